//! The GitHub side of CODEOWNER sign-off verification: gathering
//! the evidence `klaud-signoff` decides on, once per verification, and
//! publishing the verdict comment (found again by its marker and edited in
//! place) and the `codeowner-signoff-verify` commit status.

use http::Method;
use klaud_lifecycle::BoxFuture;
use klaud_signoff::STATUS_CONTEXT;
use klaud_signoff::evidence::{SignoffEdit, SignoffKind};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::transport::ok_or_error;
use crate::{Github, GithubError};

mod gather;

/// Which sign-off to verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignoffRef {
    pub kind: SignoffKind,
    pub id: u64,
}

impl SignoffRef {
    /// Reads a comment URL's anchor (`#issuecomment-N`,
    /// `#pullrequestreview-N`, `#discussion_rN`).
    pub fn from_url(url: &str) -> Option<Self> {
        let (_, anchor) = url.rsplit_once('#')?;
        for kind in [
            SignoffKind::IssueComment,
            SignoffKind::Review,
            SignoffKind::ReviewComment,
        ] {
            if let Some(id) = anchor.strip_prefix(kind.anchor()) {
                return id.parse().ok().map(|id| Self { kind, id });
            }
        }
        None
    }
}

/// What the pull request number in a comment URL is (`/pull/N#…`).
pub fn pull_number_of_url(url: &str) -> Option<u64> {
    let before = url.split('#').next()?;
    let (_, after) = before.rsplit_once("/pull/")?;
    after.trim_end_matches('/').parse().ok()
}

#[derive(Deserialize)]
struct RawUser {
    login: String,
    #[serde(rename = "type", default)]
    kind: Option<String>,
}

#[derive(Deserialize)]
struct RawSignoff {
    id: u64,
    /// The GraphQL id its edit history is read by.
    #[serde(default)]
    node_id: Option<String>,
    #[serde(default)]
    body: Option<String>,
    user: Option<RawUser>,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    submitted_at: Option<String>,
    #[serde(default)]
    updated_at: Option<String>,
    /// Where an issue comment was posted (`…/issues/{n}`).
    #[serde(default)]
    issue_url: Option<String>,
    /// The pull request of a review or review comment (`…/pulls/{n}`).
    #[serde(default)]
    pull_request_url: Option<String>,
}

impl RawSignoff {
    /// Whether the comment or review belongs to pull request `pull` (a
    /// comment URL or id from elsewhere must not sign this one off).
    fn belongs_to(&self, pull: u64) -> bool {
        let number = |url: &Option<String>, segment: &str| {
            url.as_deref()
                .and_then(|u| u.rsplit_once(segment))
                .and_then(|(_, n)| n.trim_end_matches('/').parse::<u64>().ok())
        };
        number(&self.issue_url, "/issues/").or_else(|| number(&self.pull_request_url, "/pulls/"))
            == Some(pull)
    }

    fn when(&self) -> String {
        self.updated_at
            .clone()
            .or_else(|| self.submitted_at.clone())
            .or_else(|| self.created_at.clone())
            .unwrap_or_default()
    }
}

#[derive(Deserialize)]
struct RawFile {
    filename: String,
    status: String,
    #[serde(default)]
    previous_filename: Option<String>,
    #[serde(default)]
    patch: Option<String>,
}

#[derive(Deserialize)]
struct RawCheckRun {
    name: String,
    status: String,
    #[serde(default)]
    conclusion: Option<String>,
    #[serde(default)]
    details_url: Option<String>,
}

#[derive(Deserialize)]
struct ShaOnly {
    sha: String,
}

#[derive(Deserialize)]
struct RawArtifact {
    id: u64,
    name: String,
    #[serde(default)]
    expired: bool,
}

fn cut(mut text: String, limit: usize) -> String {
    if text.len() > limit {
        let mut end = limit;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// Who wrote a comment's current text, from its GraphQL `Comment` node,
/// when that is not `author` (see [`SignoffEdit`]).
fn edit_of(node: &Value, author: &str) -> Option<SignoffEdit> {
    let login = |v: &Value| {
        v["login"]
            .as_str()
            .filter(|l| !l.is_empty())
            .map(|l| cut(l.to_owned(), 100))
    };
    let newest = node["userContentEdits"]["nodes"]
        .as_array()
        .and_then(|n| n.last())
        .cloned()
        .unwrap_or(Value::Null);
    let edited = !node["lastEditedAt"].is_null() || !newest.is_null();
    if !edited {
        return None;
    }
    match login(&node["editor"]).or_else(|| login(&newest["editor"])) {
        Some(editor) if editor.eq_ignore_ascii_case(author) => None,
        Some(editor) => Some(SignoffEdit::By(editor)),
        None => Some(SignoffEdit::Unknown),
    }
}

/// A verdict to publish.
#[derive(Debug, Clone)]
pub struct Publication {
    pub pull: u64,
    pub head_sha: String,
    /// What the first line of the comment this verdict replaces starts
    /// with ([`klaud_signoff::render::slot`]).
    pub slot: String,
    pub body: String,
    /// `success` (PASS only), `failure` or `pending`.
    pub state: String,
    pub description: String,
}

impl Github {
    /// Publishes a verdict: Klaud's comment in the verdict's slot is
    /// edited in place, or posted; then the commit status on the assessed
    /// commit. Returns the comment's URL.
    pub fn publish_signoff<'f>(
        &'f self,
        publication: &'f Publication,
    ) -> BoxFuture<'f, Result<String, GithubError>> {
        Box::pin(async move {
            let existing = self
                .list_comments(publication.pull, None)
                .await?
                .into_iter()
                .find(|c| {
                    klaud_signoff::render::is_verdict_for(&c.body, &publication.slot)
                        && c.author
                            .as_deref()
                            .is_some_and(|a| a.eq_ignore_ascii_case(self.bot_login()))
                });
            let comment = match existing {
                Some(c) if c.body == publication.body => c,
                Some(c) => self.update_comment(c.id, &publication.body).await?,
                None => {
                    self.create_comment(publication.pull, &publication.body)
                        .await?
                }
            };
            self.set_signoff_status(
                &publication.head_sha,
                &publication.state,
                &publication.description,
                Some(&comment.html_url),
            )
            .await?;
            Ok(comment.html_url)
        })
    }

    /// Sets the `codeowner-signoff-verify` status on a commit.
    pub fn set_signoff_status<'f>(
        &'f self,
        sha: &'f str,
        state: &'f str,
        description: &'f str,
        target_url: Option<&'f str>,
    ) -> BoxFuture<'f, Result<(), GithubError>> {
        Box::pin(async move {
            let what = format!("set {STATUS_CONTEXT} status on {sha}");
            // GitHub cuts descriptions at 140 characters.
            let description: String = description.chars().take(140).collect();
            let mut payload = json!({
                "state": state, "context": STATUS_CONTEXT, "description": description,
            });
            if let Some(url) = target_url {
                payload["target_url"] = json!(url);
            }
            let raw = self
                .t
                .write_idempotent(
                    &what,
                    Method::POST,
                    &self.path(&format!("statuses/{}", crate::api::seg(sha))),
                    Some(&payload),
                )
                .await?;
            ok_or_error(&what, &raw)
        })
    }
}

/// What changed on a pull request since Klaud last spoke: its newest
/// sign-off and Klaud's newest verdict comment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SignoffActivity {
    /// The newest sign-off and when it was last written (RFC 3339).
    pub latest: Option<(SignoffRef, String)>,
    /// When Klaud's newest verdict comment was last written.
    pub last_verdict: Option<String>,
}

impl SignoffActivity {
    /// The sign-off to verify: one written after the last verdict.
    pub fn pending(&self) -> Option<(SignoffRef, String)> {
        let (signoff, when) = self.latest.clone()?;
        match &self.last_verdict {
            Some(verdict) if verdict.as_str() >= when.as_str() => None,
            _ => Some((signoff, when)),
        }
    }
}

/// An open pull request as the catch-up needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenPull {
    pub number: u64,
    pub draft: bool,
    pub updated_at: String,
}

impl Github {
    /// Open pull requests, most recently updated first (one page: the
    /// catch-up looks at the 100 most recently active).
    pub fn open_pulls_by_update<'f>(&'f self) -> BoxFuture<'f, Result<Vec<OpenPull>, GithubError>> {
        Box::pin(async move {
            #[derive(Deserialize)]
            struct Raw {
                number: u64,
                #[serde(default)]
                draft: bool,
                #[serde(default)]
                updated_at: Option<String>,
            }
            let list: Vec<Raw> = self
                .t
                .get_json(
                    "list open pull requests by update",
                    &self.path("pulls?state=open&sort=updated&direction=desc&per_page=100"),
                )
                .await?;
            Ok(list
                .into_iter()
                .map(|p| OpenPull {
                    number: p.number,
                    draft: p.draft,
                    updated_at: p.updated_at.unwrap_or_default(),
                })
                .collect())
        })
    }

    /// The newest sign-off on `pull` and Klaud's newest verdict there.
    pub fn signoff_activity<'f>(
        &'f self,
        pull: u64,
    ) -> BoxFuture<'f, Result<SignoffActivity, GithubError>> {
        Box::pin(async move {
            let mut activity = SignoffActivity::default();
            let verdicts = self.list_comments(pull, None).await?;
            activity.last_verdict = verdicts
                .iter()
                .filter(|c| {
                    c.body.starts_with(klaud_signoff::render::MARKER_PREFIX)
                        && c.author
                            .as_deref()
                            .is_some_and(|a| a.eq_ignore_ascii_case(self.bot_login()))
                })
                .filter_map(|c| c.updated_at.clone().or_else(|| c.created_at.clone()))
                .max();
            activity.latest = match self.find_signoff(pull, None).await {
                Ok((kind, raw)) => Some((SignoffRef { kind, id: raw.id }, raw.when())),
                Err(GithubError::NotFound { .. }) => None,
                Err(e) => return Err(e),
            };
            Ok(activity)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signoff_belongs_only_to_its_own_pull_request() {
        let raw = |issue: Option<&str>, pull: Option<&str>| RawSignoff {
            id: 1,
            node_id: None,
            body: None,
            user: None,
            created_at: None,
            submitted_at: None,
            updated_at: None,
            issue_url: issue.map(str::to_owned),
            pull_request_url: pull.map(str::to_owned),
        };
        assert!(raw(Some("https://api.github.com/repos/o/r/issues/7"), None).belongs_to(7));
        assert!(!raw(Some("https://api.github.com/repos/o/r/issues/8"), None).belongs_to(7));
        assert!(raw(None, Some("https://api.github.com/repos/o/r/pulls/7")).belongs_to(7));
        assert!(!raw(None, None).belongs_to(7));
    }

    #[test]
    fn the_text_is_the_last_editors_unless_the_author_wrote_it() {
        let unedited =
            json!({"editor": null, "lastEditedAt": null, "userContentEdits": {"nodes": []}});
        assert_eq!(edit_of(&unedited, "ann"), None);
        let by = |who: Value| {
            json!({"editor": who, "lastEditedAt": "2026-07-14T10:00:00Z",
                "userContentEdits": {"nodes": [{"editor": who, "editedAt": "2026-07-14T10:00:00Z"}]}})
        };
        assert_eq!(edit_of(&by(json!({"login": "Ann"})), "ann"), None);
        assert_eq!(
            edit_of(&by(json!({"login": "bob"})), "ann"),
            Some(SignoffEdit::By("bob".into()))
        );
        assert_eq!(edit_of(&by(Value::Null), "ann"), Some(SignoffEdit::Unknown));
        // Only the history names the editor.
        let history = json!({"editor": null, "lastEditedAt": null,
            "userContentEdits": {"nodes": [{"editor": {"login": "bob"}}]}});
        assert_eq!(
            edit_of(&history, "ann"),
            Some(SignoffEdit::By("bob".into()))
        );
        assert_eq!(edit_of(&Value::Null, "ann"), None);
    }

    #[test]
    fn only_a_signoff_written_after_the_last_verdict_is_pending() {
        let signoff = SignoffRef {
            kind: SignoffKind::IssueComment,
            id: 5,
        };
        let mut activity = SignoffActivity {
            latest: Some((signoff, "2026-07-14T10:00:00Z".into())),
            last_verdict: None,
        };
        assert_eq!(activity.pending().map(|p| p.0), Some(signoff));
        activity.last_verdict = Some("2026-07-14T10:05:00Z".into());
        assert_eq!(activity.pending(), None);
        activity.latest = Some((signoff, "2026-07-14T11:00:00Z".into()));
        assert!(activity.pending().is_some());
    }

    #[test]
    fn comment_urls_name_the_signoff_and_the_pull_request() {
        let url = "https://github.com/o/r/pull/2184#issuecomment-42";
        assert_eq!(
            SignoffRef::from_url(url),
            Some(SignoffRef {
                kind: SignoffKind::IssueComment,
                id: 42
            })
        );
        assert_eq!(pull_number_of_url(url), Some(2184));
        assert_eq!(
            SignoffRef::from_url("https://github.com/o/r/pull/1#discussion_r7").map(|r| r.kind),
            Some(SignoffKind::ReviewComment)
        );
        assert_eq!(
            SignoffRef::from_url("https://github.com/o/r/pull/1#pullrequestreview-9").map(|r| r.id),
            Some(9)
        );
        assert_eq!(SignoffRef::from_url("https://github.com/o/r/pull/1"), None);
    }
}
