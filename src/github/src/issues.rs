//! The dashboard issue's REST calls: find Klaud's own issues by label,
//! open one, edit one Klaud opened, and ask who last edited it.
//!
//! The writes are public but narrow: they only ever touch an issue the
//! bot opened (the caller hands back an [`IssueInfo`] that says so), so
//! nothing here can edit a person's issue or a pull request.

use http::Method;
use klaud_lifecycle::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};

use super::transport::ok_or_error;
use super::{Github, GithubError};

#[derive(Deserialize)]
struct RawIssue {
    number: u64,
    #[serde(default)]
    title: String,
    #[serde(default)]
    body: Option<String>,
    state: String,
    #[serde(default)]
    html_url: String,
    #[serde(default)]
    user: Option<Login>,
    /// Present on pull requests, which the issues list includes.
    #[serde(default)]
    pull_request: Option<Value>,
    #[serde(default)]
    state_reason: Option<String>,
    #[serde(default)]
    labels: Vec<RawLabel>,
}

#[derive(Deserialize)]
struct Login {
    login: String,
}

/// GitHub sends labels as objects; older answers (and some proxies) as
/// bare names.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawLabel {
    Named { name: String },
    Bare(String),
}

/// An issue as the dashboard needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueInfo {
    /// Its number.
    pub number: u64,
    /// Its title.
    pub title: String,
    /// Its body (empty when it has none).
    pub body: String,
    /// Whether it is open.
    pub open: bool,
    /// Its web page.
    pub html_url: String,
    /// Who opened it.
    pub author: Option<String>,
    /// Why it was closed (`completed`, `not_planned`, `duplicate`), or
    /// `reopened`; `None` when GitHub does not say.
    pub state_reason: Option<String>,
    /// Its labels' names.
    pub labels: Vec<String>,
}

impl IssueInfo {
    /// Whether it carries `label` (GitHub compares label names without
    /// case).
    pub fn has_label(&self, label: &str) -> bool {
        self.labels.iter().any(|l| l.eq_ignore_ascii_case(label))
    }
}

impl From<RawIssue> for IssueInfo {
    fn from(r: RawIssue) -> Self {
        Self {
            number: r.number,
            title: r.title,
            body: r.body.unwrap_or_default(),
            open: r.state == "open",
            html_url: r.html_url,
            author: r.user.map(|u| u.login),
            state_reason: r.state_reason,
            labels: r
                .labels
                .into_iter()
                .map(|l| match l {
                    RawLabel::Named { name } | RawLabel::Bare(name) => name,
                })
                .collect(),
        }
    }
}

/// Most issues one label listing reads: the dashboard keeps one, so more
/// than this is somebody else's doing and the rest can wait.
const MAX_LISTED: usize = 100;

impl Github {
    /// Issues (not pull requests) the bot opened that carry `label`, open
    /// or closed, oldest first. One conditional read: unchanged, it is a
    /// free 304.
    pub fn own_issues<'f>(
        &'f self,
        label: &'f str,
    ) -> BoxFuture<'f, Result<Vec<IssueInfo>, GithubError>> {
        Box::pin(async move {
            let q = super::api::query(&[
                ("state", "all"),
                ("creator", self.bot_login()),
                ("labels", label),
                ("sort", "created"),
                ("direction", "asc"),
                ("per_page", "100"),
            ]);
            let what = format!("list issues labelled {label:?}");
            let raw: Vec<RawIssue> = self
                .t
                .get_all(&what, &self.path(&format!("issues?{q}")), None)
                .await?;
            Ok(raw
                .into_iter()
                .filter(|i| i.pull_request.is_none())
                .take(MAX_LISTED)
                .map(IssueInfo::from)
                .collect())
        })
    }

    /// The pull requests the bot opened (any state) with activity since
    /// `since` (RFC 3339): a comment, an edit, a state change moves an
    /// issue's `updated_at`. One listing, read up to `max_pages` pages, so
    /// a finished PR's comments are read again only when something happened
    /// on it rather than every old PR on every pass.
    pub fn own_pulls_active_since<'f>(
        &'f self,
        since: &'f str,
        max_pages: usize,
    ) -> BoxFuture<'f, Result<Vec<u64>, GithubError>> {
        Box::pin(async move {
            let q = super::api::query(&[
                ("state", "all"),
                ("creator", self.bot_login()),
                ("since", since),
                ("sort", "updated"),
                ("direction", "desc"),
                ("per_page", "100"),
            ]);
            let what = "list the bot's pull requests with recent activity".to_owned();
            let raw: Vec<RawIssue> = self
                .t
                .get_pages(
                    &what,
                    &self.path(&format!("issues?{q}")),
                    None,
                    max_pages,
                    &|_: &[RawIssue]| false,
                )
                .await?;
            Ok(raw
                .into_iter()
                .filter(|i| i.pull_request.is_some())
                .map(|i| i.number)
                .collect())
        })
    }

    /// Issues (not pull requests) the bot opened whose body holds `marker`,
    /// open or closed, with or without labels, newest first: for when the
    /// label that finds them was removed. The list includes the bot's pull
    /// requests, so it is read page by page (newest first) only until the
    /// first page that holds one, and at most `max_pages` pages.
    pub fn own_issues_with_marker<'f>(
        &'f self,
        marker: &'f str,
        max_pages: usize,
    ) -> BoxFuture<'f, Result<Vec<IssueInfo>, GithubError>> {
        Box::pin(async move {
            let q = super::api::query(&[
                ("state", "all"),
                ("creator", self.bot_login()),
                ("sort", "created"),
                ("direction", "desc"),
                ("per_page", "100"),
            ]);
            let what = "list the bot's issues to find its dashboard issue".to_owned();
            let holds = |i: &RawIssue| {
                i.pull_request.is_none() && i.body.as_deref().is_some_and(|b| b.contains(marker))
            };
            let raw: Vec<RawIssue> = self
                .t
                .get_pages(
                    &what,
                    &self.path(&format!("issues?{q}")),
                    None,
                    max_pages,
                    &|read: &[RawIssue]| read.iter().any(holds),
                )
                .await?;
            Ok(raw
                .into_iter()
                .filter(holds)
                .take(MAX_LISTED)
                .map(IssueInfo::from)
                .collect())
        })
    }

    /// Reopens an issue the bot opened (a person closed its dashboard
    /// issue) and puts `label` back on it when it is missing.
    pub fn restore_own_issue<'f>(
        &'f self,
        issue: &'f IssueInfo,
        label: &'f str,
    ) -> BoxFuture<'f, Result<IssueInfo, GithubError>> {
        Box::pin(async move {
            let what = format!("reopen and label issue #{}", issue.number);
            self.refuse_unless_own(&what, issue)?;
            let mut labels = issue.labels.clone();
            if !issue.has_label(label) {
                labels.push(label.to_owned());
            }
            let payload = json!({"state": "open", "labels": labels});
            let path = self.path(&format!("issues/{}", issue.number));
            // The same state and labels sent twice are the same issue.
            let raw = self
                .t
                .write_idempotent(&what, Method::PATCH, &path, Some(&payload))
                .await?;
            ok_or_error(&what, &raw)?;
            Ok(raw.json::<RawIssue>(&what)?.into())
        })
    }

    fn refuse_unless_own(&self, what: &str, issue: &IssueInfo) -> Result<(), GithubError> {
        let ours = issue
            .author
            .as_deref()
            .is_some_and(|a| a.eq_ignore_ascii_case(self.bot_login()));
        if ours {
            return Ok(());
        }
        Err(GithubError::Rejected {
            what: what.to_owned(),
            status: 0,
            message: format!(
                "#{} was not opened by {}; Klaud edits only its own issues",
                issue.number,
                self.bot_login()
            ),
        })
    }

    /// Issue `number` as it is now (a conditional read: unchanged, a free
    /// 304); `None` when it is a pull request or gone.
    pub fn issue<'f>(
        &'f self,
        number: u64,
    ) -> BoxFuture<'f, Result<Option<IssueInfo>, GithubError>> {
        Box::pin(async move {
            let what = format!("read issue #{number}");
            match self
                .t
                .get_json_cached::<RawIssue>(&what, &self.path(&format!("issues/{number}")))
                .await
            {
                Ok(raw) if raw.pull_request.is_none() => Ok(Some(raw.into())),
                Ok(_) | Err(GithubError::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        })
    }

    /// Opens an issue with `label`. After an ambiguous failure the issues
    /// are listed again: an open one of the bot's with exactly this title
    /// and body means it landed.
    pub fn open_issue<'f>(
        &'f self,
        title: &'f str,
        body: &'f str,
        label: &'f str,
    ) -> BoxFuture<'f, Result<IssueInfo, GithubError>> {
        Box::pin(async move {
            let what = format!("open issue {title:?}");
            let payload = json!({"title": title, "body": body, "labels": [label]});
            let path = self.path("issues");
            match self
                .t
                .write(&what, Method::POST, &path, Some(&payload))
                .await
            {
                Ok(raw) => {
                    ok_or_error(&what, &raw)?;
                    Ok(raw.json::<RawIssue>(&what)?.into())
                }
                Err(GithubError::Ambiguous { what, detail }) => {
                    let found = self.own_issues(label).await?;
                    found
                        .into_iter()
                        .find(|i| i.title == title && i.body == body)
                        .ok_or(GithubError::Ambiguous { what, detail })
                }
                Err(e) => Err(e),
            }
        })
    }

    /// Replaces the body of an issue the bot opened, or closes it as a
    /// duplicate (`body` `None`). Refused for anybody else's issue.
    pub fn edit_own_issue<'f>(
        &'f self,
        issue: &'f IssueInfo,
        body: Option<&'f str>,
    ) -> BoxFuture<'f, Result<IssueInfo, GithubError>> {
        Box::pin(async move {
            let what = format!("edit issue #{}", issue.number);
            self.refuse_unless_own(&what, issue)?;
            let payload = match body {
                Some(b) => json!({"body": b}),
                None => json!({"state": "closed", "state_reason": "duplicate"}),
            };
            let path = self.path(&format!("issues/{}", issue.number));
            // The same body or state sent twice is the same issue.
            let raw = self
                .t
                .write_idempotent(&what, Method::PATCH, &path, Some(&payload))
                .await?;
            ok_or_error(&what, &raw)?;
            Ok(raw.json::<RawIssue>(&what)?.into())
        })
    }

    /// Who last edited issue `number`'s title or body (GraphQL's `editor`;
    /// REST does not say), `None` before any edit.
    pub fn issue_editor<'f>(
        &'f self,
        number: u64,
    ) -> BoxFuture<'f, Result<Option<String>, GithubError>> {
        Box::pin(async move {
            let what = format!("last editor of #{number}");
            let query = "query($owner: String!, $name: String!, $number: Int!) { repository(owner: $owner, name: $name) { issue(number: $number) { editor { login } lastEditedAt } } }";
            let v = self
                .graphql(
                    &what,
                    query,
                    json!({"owner": self.owner, "name": self.name, "number": number}),
                )
                .await?;
            Ok(v["data"]["repository"]["issue"]["editor"]["login"]
                .as_str()
                .map(str::to_owned))
        })
    }
}
