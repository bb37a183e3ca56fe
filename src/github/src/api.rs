//! The forge's operations. Response types are Klaud's own lenient structs:
//! only the fields Klaud reads are required, so GitHub adding or dropping
//! optional fields (octocrab's `Run` has no `actor`, job statuses lack
//! `requested`) cannot break a poll.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use http::Method;
use klaud_lifecycle::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};

use klaud_lifecycle::commands::Permission;
use klaud_lifecycle::engine::{CompareStatus, PullState, RunConclusion, RunStatus};

use super::transport::ok_or_error;
use super::{Github, GithubError};

/// An account.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct UserInfo {
    pub login: String,
    pub id: u64,
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Deserialize)]
struct Login {
    login: String,
}

#[derive(Deserialize)]
struct LabelName {
    name: String,
}

#[derive(Deserialize)]
struct BranchRef {
    #[serde(rename = "ref")]
    name: String,
    sha: String,
    /// Absent (null) when the head fork was deleted.
    #[serde(default)]
    repo: Option<RepoName>,
}

#[derive(Deserialize)]
struct RepoName {
    full_name: String,
}

#[derive(Deserialize)]
struct RawPull {
    number: u64,
    node_id: String,
    state: String,
    #[serde(default)]
    draft: bool,
    #[serde(default)]
    title: String,
    #[serde(default)]
    body: Option<String>,
    head: BranchRef,
    base: BranchRef,
    user: Option<Login>,
    #[serde(default)]
    labels: Vec<LabelName>,
    #[serde(default)]
    html_url: String,
    #[serde(default)]
    merged_at: Option<String>,
    /// `null` until GitHub has computed it.
    #[serde(default)]
    mergeable: Option<bool>,
}

/// A pull request as Klaud needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullInfo {
    pub number: u64,
    /// GraphQL node id (for the draft-state mutations).
    pub node_id: String,
    pub state: PullState,
    pub draft: bool,
    pub title: String,
    pub body: Option<String>,
    pub head_ref: String,
    pub head_sha: String,
    /// `owner/name` of the head repository; `None` for a deleted fork.
    pub head_repo: Option<String>,
    pub base_ref: String,
    pub author: Option<String>,
    pub labels: Vec<String>,
    pub html_url: String,
    /// `None` until GitHub has computed it; `Some(false)` on a conflict.
    pub mergeable: Option<bool>,
}

impl From<RawPull> for PullInfo {
    fn from(p: RawPull) -> Self {
        Self {
            number: p.number,
            node_id: p.node_id,
            state: PullState::from_github(&p.state, p.merged_at.is_some()),
            draft: p.draft,
            title: p.title,
            body: p.body,
            head_repo: p.head.repo.map(|r| r.full_name),
            head_ref: p.head.name,
            head_sha: p.head.sha,
            base_ref: p.base.name,
            author: p.user.map(|u| u.login),
            labels: p.labels.into_iter().map(|l| l.name).collect(),
            html_url: p.html_url,
            mergeable: p.mergeable,
        }
    }
}

#[derive(Deserialize)]
struct RawComment {
    id: u64,
    #[serde(default)]
    body: Option<String>,
    user: Option<Login>,
    #[serde(default)]
    html_url: String,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    updated_at: Option<String>,
    #[serde(default)]
    author_association: Option<String>,
}

/// An issue comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommentInfo {
    pub id: u64,
    pub body: String,
    pub author: Option<String>,
    pub html_url: String,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
    /// GitHub's `author_association`.
    pub author_association: Option<String>,
}

impl From<RawComment> for CommentInfo {
    fn from(c: RawComment) -> Self {
        Self {
            id: c.id,
            body: c.body.unwrap_or_default(),
            author: c.user.map(|u| u.login),
            html_url: c.html_url,
            created_at: c.created_at,
            updated_at: c.updated_at,
            author_association: c.author_association,
        }
    }
}

#[derive(Deserialize)]
struct PrNumber {
    number: u64,
}

#[derive(Deserialize)]
struct RawRun {
    id: u64,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    display_title: Option<String>,
    #[serde(default)]
    event: String,
    #[serde(default)]
    status: Option<RunStatus>,
    #[serde(default)]
    conclusion: Option<RunConclusion>,
    #[serde(default)]
    head_branch: Option<String>,
    #[serde(default)]
    head_sha: String,
    #[serde(default)]
    actor: Option<Login>,
    #[serde(default)]
    triggering_actor: Option<Login>,
    #[serde(default)]
    run_attempt: Option<u64>,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    html_url: String,
    /// `null` is allowed by GitHub's schema (`array | null`).
    #[serde(default, deserialize_with = "null_as_default")]
    pull_requests: Vec<PrNumber>,
    /// Nullable in GitHub's schema (a deleted fork).
    #[serde(default)]
    head_repository: Option<RepoName>,
}

/// Reads `null` as the type's default: GitHub's schema marks several lists
/// and strings nullable that Klaud treats as empty.
fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A workflow run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunInfo {
    pub id: u64,
    pub name: Option<String>,
    pub display_title: Option<String>,
    pub event: String,
    /// Where the run is; `None` when GitHub left it out.
    pub status: Option<RunStatus>,
    pub conclusion: Option<RunConclusion>,
    pub head_branch: Option<String>,
    pub head_sha: String,
    pub actor: Option<String>,
    pub triggering_actor: Option<String>,
    pub run_attempt: u64,
    pub created_at: Option<String>,
    pub html_url: String,
    pub pull_requests: Vec<u64>,
    /// `owner/name` of the head repository, when GitHub gives it.
    pub head_repository: Option<String>,
}

impl From<RawRun> for RunInfo {
    fn from(r: RawRun) -> Self {
        Self {
            id: r.id,
            name: r.name,
            display_title: r.display_title,
            event: r.event,
            status: r.status,
            conclusion: r.conclusion,
            head_branch: r.head_branch,
            head_sha: r.head_sha,
            actor: r.actor.map(|a| a.login),
            triggering_actor: r.triggering_actor.map(|a| a.login),
            run_attempt: r.run_attempt.unwrap_or(1),
            created_at: r.created_at,
            html_url: r.html_url,
            pull_requests: r.pull_requests.into_iter().map(|p| p.number).collect(),
            head_repository: r.head_repository.map(|h| h.full_name),
        }
    }
}

/// A workflow of the repository (`actions/workflows/<file>`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct WorkflowInfo {
    pub id: u64,
    pub name: String,
    /// `.github/workflows/<file>`.
    pub path: String,
    /// `active`, `disabled_manually`, `disabled_inactivity`, ...
    pub state: String,
}

/// A run artifact.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Artifact {
    pub id: u64,
    pub name: String,
    #[serde(default)]
    pub size_in_bytes: u64,
    #[serde(default)]
    pub expired: bool,
}

/// What a workflow dispatch told us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatchOutcome {
    /// The run id when the server supports `return_run_details`; otherwise
    /// find the run by its title.
    pub run_id: Option<u64>,
    pub html_url: Option<String>,
}

/// A file in a new tree: `content: None` deletes the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeChange {
    pub path: String,
    pub content: Option<Vec<u8>>,
    pub executable: bool,
}

/// A file changed by a pull request.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct FileChange {
    pub filename: String,
    pub status: String,
    /// The file's blob at the PR head (for `removed`, GitHub names the
    /// removed blob).
    #[serde(default)]
    pub sha: Option<String>,
}

/// How `head` relates to `base` (`GET compare/{base}...{head}`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Comparison {
    pub status: CompareStatus,
    pub ahead_by: u64,
    pub behind_by: u64,
    #[serde(default)]
    pub total_commits: u64,
}

/// A comparison with its commits and files (`GET compare/{base}...{head}`,
/// unpaginated: GitHub lists at most 250 commits and 300 files).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct CompareDetail {
    pub status: CompareStatus,
    #[serde(default)]
    pub total_commits: u64,
    #[serde(default)]
    pub commits: Vec<ComparedCommitInfo>,
    #[serde(default)]
    pub files: Vec<ComparedFile>,
    #[serde(default)]
    pub merge_base_commit: Option<ShaOnlyPub>,
}

/// A commit named by its sha alone.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ShaOnlyPub {
    pub sha: String,
}

/// One commit of [`CompareDetail`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ComparedCommitInfo {
    pub sha: String,
    pub commit: ComparedCommitBody,
    /// The GitHub account of the author; `null` when the e-mail is no
    /// account's.
    #[serde(default)]
    pub author: Option<UserLogin>,
    #[serde(default)]
    pub parents: Vec<ComparedParent>,
}

/// The git part of a compared commit.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ComparedCommitBody {
    pub message: String,
}

/// An account as GitHub nests it (only the login is read).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct UserLogin {
    pub login: String,
}

/// A parent of a compared commit.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ComparedParent {
    pub sha: String,
}

/// A file of [`CompareDetail`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ComparedFile {
    pub filename: String,
}

/// A compare with its changed files: GitHub lists them only on the first
/// page of a paginated compare, at most [`COMPARE_FILE_LIMIT`] of them, and
/// leaves `patch` out for binary files and diffs too large to show.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ComparisonFiles {
    pub status: CompareStatus,
    pub ahead_by: u64,
    #[serde(default)]
    pub total_commits: u64,
    #[serde(default)]
    pub files: Vec<klaud_planner::audit::ChangedFile>,
}

/// The most changed files GitHub's compare lists ("Compare two commits":
/// the file list of the first page holds up to 300 files for the whole
/// comparison); a compare that lists this many may have more.
pub const COMPARE_FILE_LIMIT: usize = 300;

#[derive(Deserialize)]
struct CommitFiles {
    #[serde(default)]
    files: Vec<klaud_planner::audit::ChangedFile>,
}

/// A job of a workflow run (lenient: GitHub adds statuses over time).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct JobInfo {
    pub id: u64,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub status: Option<RunStatus>,
    #[serde(default)]
    pub conclusion: Option<RunConclusion>,
    #[serde(default)]
    pub run_attempt: Option<u64>,
    #[serde(default)]
    pub html_url: Option<String>,
    #[serde(default)]
    pub runner_name: Option<String>,
}

/// A commit object (git data API).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GitCommit {
    pub message: String,
    pub tree: String,
    pub parents: Vec<String>,
}

#[derive(Deserialize)]
struct RawGitCommit {
    message: String,
    tree: ShaOnly,
    #[serde(default)]
    parents: Vec<ShaOnly>,
}

#[derive(Deserialize)]
struct ShaOnly {
    sha: String,
}

#[derive(Deserialize)]
struct RawRef {
    #[serde(rename = "ref")]
    name: String,
    object: ShaOnly,
}

/// Percent-encodes one path segment (label names, file path parts).
/// Whether `s` names a git object by its full sha, so that what GitHub
/// answers for it can never change.
fn is_full_sha(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

pub(crate) fn seg(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn path_of(p: &str) -> String {
    p.split('/').map(seg).collect::<Vec<_>>().join("/")
}

pub(crate) fn query(pairs: &[(&str, &str)]) -> String {
    let mut ser = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        ser.append_pair(k, v);
    }
    ser.finish()
}

/// `refs/heads/x` → `heads/x` (the form the `git/ref` routes take).
fn short_ref(name: &str) -> &str {
    name.strip_prefix("refs/").unwrap_or(name)
}

/// Filters for listing workflow runs (GitHub's query parameters).
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    /// Only runs of this workflow (id or file name, e.g. `e2e-tests.yml`).
    pub workflow: Option<String>,
    pub event: Option<String>,
    pub actor: Option<String>,
    pub branch: Option<String>,
    pub status: Option<String>,
    pub head_sha: Option<String>,
    /// GitHub's `created` qualifier, e.g. `>=2026-08-22T10:00:00Z`.
    pub created: Option<String>,
}

/// Largest file (bytes) sent as text inside a tree request instead of as
/// a blob of its own.
const INLINE_TREE_CONTENT_MAX: usize = 1024 * 1024;

impl Github {
    /// `GET /user`.
    pub fn current_user<'f>(&'f self) -> BoxFuture<'f, Result<UserInfo, GithubError>> {
        Box::pin(async move {
            self.t
                .get_json("identity preflight (GET /user)", "/user")
                .await
        })
    }

    // ---------------------------------------------------------------- pulls

    /// The pull request (any state, newest first) whose head is `branch` of
    /// this repository.
    pub fn find_pull_for_head<'f>(
        &'f self,
        branch: &'f str,
        state: &'f str,
    ) -> BoxFuture<'f, Result<Option<PullInfo>, GithubError>> {
        Box::pin(async move {
            let what = format!("find pull request for {branch}");
            let head = format!("{}:{branch}", self.owner);
            let p = self.path(&format!(
                "pulls?{}",
                query(&[("head", &head), ("state", state), ("per_page", "100")])
            ));
            let pulls: Vec<RawPull> = self.t.get_all(&what, &p, None).await?;
            Ok(pulls
                .into_iter()
                .map(PullInfo::from)
                .find(|p| p.head_ref == branch))
        })
    }

    /// Opens a pull request. After an ambiguous failure the open PR for the
    /// head is looked up: if it exists it is ours, and no second one is made.
    pub(crate) async fn create_pull(
        &self,
        title: &str,
        head: &str,
        base: &str,
        body: &str,
        draft: bool,
    ) -> Result<PullInfo, GithubError> {
        let what = format!("open pull request for {head}");
        let payload =
            json!({"title": title, "head": head, "base": base, "body": body, "draft": draft});
        for _ in 0..2 {
            match self
                .t
                .write(&what, Method::POST, &self.path("pulls"), Some(&payload))
                .await
            {
                Ok(raw) => {
                    ok_or_error(&what, &raw)?;
                    return Ok(raw.json::<RawPull>(&what)?.into());
                }
                Err(GithubError::Ambiguous { detail, .. }) => {
                    if let Some(p) = self.find_pull_for_head(head, "open").await? {
                        return Ok(p);
                    }
                    tracing::warn!(
                        what,
                        detail,
                        "pull request was not created; sending it again"
                    );
                }
                Err(e) => return Err(e),
            }
        }
        Err(GithubError::Ambiguous {
            what,
            detail: "the write failed twice without landing".into(),
        })
    }

    /// One pull request (conditional GET: cheap to poll).
    pub fn get_pull<'f>(&'f self, number: u64) -> BoxFuture<'f, Result<PullInfo, GithubError>> {
        Box::pin(async move {
            let what = format!("read pull request #{number}");
            let raw: RawPull = self
                .t
                .get_json_cached(&what, &self.path(&format!("pulls/{number}")))
                .await?;
            Ok(raw.into())
        })
    }

    /// Who closed issue or pull request `number` (the issue's `closed_by`;
    /// `None` while open or when GitHub does not say).
    pub fn closed_by<'f>(
        &'f self,
        number: u64,
    ) -> BoxFuture<'f, Result<Option<String>, GithubError>> {
        Box::pin(async move {
            #[derive(Deserialize)]
            struct Issue {
                #[serde(default)]
                closed_by: Option<Login>,
            }
            let what = format!("read issue #{number}");
            let issue: Issue = self
                .t
                .get_json(&what, &self.path(&format!("issues/{number}")))
                .await?;
            Ok(issue.closed_by.map(|l| l.login))
        })
    }

    /// Pull requests in a state (`open`, `closed`, `all`), newest first.
    pub fn list_pulls<'f>(
        &'f self,
        state: &'f str,
    ) -> BoxFuture<'f, Result<Vec<PullInfo>, GithubError>> {
        Box::pin(async move {
            let p = self.path(&format!(
                "pulls?{}",
                query(&[("state", state), ("per_page", "100")])
            ));
            let pulls: Vec<RawPull> = self.t.get_all("list pull requests", &p, None).await?;
            Ok(pulls.into_iter().map(PullInfo::from).collect())
        })
    }

    /// Updates title, body and/or state (`open`/`closed`). Idempotent, so an
    /// ambiguous failure is resolved by sending it once more.
    pub(crate) async fn update_pull(
        &self,
        number: u64,
        title: Option<&str>,
        body: Option<&str>,
        state: Option<&str>,
    ) -> Result<PullInfo, GithubError> {
        let what = format!("update pull request #{number}");
        let mut payload = json!({});
        if let Some(t) = title {
            payload["title"] = json!(t);
        }
        if let Some(b) = body {
            payload["body"] = json!(b);
        }
        if let Some(s) = state {
            payload["state"] = json!(s);
        }
        let path = self.path(&format!("pulls/{number}"));
        let raw = self
            .t
            .write_idempotent(&what, Method::PATCH, &path, Some(&payload))
            .await?;
        ok_or_error(&what, &raw)?;
        Ok(raw.json::<RawPull>(&what)?.into())
    }

    /// Files changed by a pull request.
    pub fn pull_files<'f>(
        &'f self,
        number: u64,
    ) -> BoxFuture<'f, Result<Vec<FileChange>, GithubError>> {
        Box::pin(async move {
            let p = self.path(&format!("pulls/{number}/files?per_page=100"));
            self.t
                .get_all(&format!("list files of #{number}"), &p, None)
                .await
        })
    }

    /// Marks a pull request ready for review (`draft = false`) or converts
    /// it back to a draft, through GraphQL (REST has no such call).
    pub(crate) async fn set_draft(
        &self,
        number: u64,
        node_id: &str,
        draft: bool,
    ) -> Result<(), GithubError> {
        let (what, mutation) = if draft {
            (
                format!("convert #{number} to draft"),
                "convertPullRequestToDraft",
            )
        } else {
            (
                format!("mark #{number} ready for review"),
                "markPullRequestReadyForReview",
            )
        };
        let query = format!(
            "mutation($id: ID!) {{ {mutation}(input: {{pullRequestId: $id}}) {{ pullRequest {{ isDraft }} }} }}"
        );
        self.graphql(&what, &query, json!({"id": node_id})).await?;
        Ok(())
    }

    // ------------------------------------------------------------- comments

    /// Comments on an issue or PR, oldest first; `since` is RFC 3339.
    pub fn list_comments<'f>(
        &'f self,
        number: u64,
        since: Option<&'f str>,
    ) -> BoxFuture<'f, Result<Vec<CommentInfo>, GithubError>> {
        Box::pin(async move {
            let mut q = vec![("per_page", "100")];
            if let Some(s) = since {
                q.push(("since", s));
            }
            let p = self.path(&format!("issues/{number}/comments?{}", query(&q)));
            let cs: Vec<RawComment> = self
                .t
                .get_all(&format!("list comments of #{number}"), &p, None)
                .await?;
            Ok(cs.into_iter().map(CommentInfo::from).collect())
        })
    }

    /// Posts a comment. After an ambiguous failure the comments are re-read:
    /// a bot comment with exactly this body (Klaud's bodies carry a unique
    /// hidden marker) means it landed.
    pub(crate) async fn create_comment(
        &self,
        number: u64,
        body: &str,
    ) -> Result<CommentInfo, GithubError> {
        let what = format!("comment on #{number}");
        let payload = json!({"body": body});
        let path = self.path(&format!("issues/{number}/comments"));
        for _ in 0..2 {
            match self
                .t
                .write(&what, Method::POST, &path, Some(&payload))
                .await
            {
                Ok(raw) => {
                    ok_or_error(&what, &raw)?;
                    return Ok(raw.json::<RawComment>(&what)?.into());
                }
                Err(GithubError::Ambiguous { detail, .. }) => {
                    let existing = self.list_comments(number, None).await?;
                    if let Some(c) = existing.into_iter().find(|c| {
                        c.body == body
                            && c.author
                                .as_deref()
                                .is_some_and(|a| a.eq_ignore_ascii_case(self.bot_login()))
                    }) {
                        return Ok(c);
                    }
                    tracing::warn!(what, detail, "comment was not created; sending it again");
                }
                Err(e) => return Err(e),
            }
        }
        Err(GithubError::Ambiguous {
            what,
            detail: "the write failed twice without landing".into(),
        })
    }

    /// Replaces a comment's body (`PATCH .../issues/comments/{id}`). The
    /// same body sent twice gives the same comment, so an answer whose
    /// outcome is unknown is simply sent once more.
    pub(crate) async fn update_comment(
        &self,
        comment: u64,
        body: &str,
    ) -> Result<CommentInfo, GithubError> {
        let what = format!("edit comment {comment}");
        let payload = json!({"body": body});
        let path = self.path(&format!("issues/comments/{comment}"));
        let raw = self
            .t
            .write_idempotent(&what, Method::PATCH, &path, Some(&payload))
            .await?;
        ok_or_error(&what, &raw)?;
        Ok(raw.json::<RawComment>(&what)?.into())
    }

    // --------------------------------------------------------------- labels

    /// Labels on an issue or PR.
    pub fn list_labels<'f>(
        &'f self,
        number: u64,
    ) -> BoxFuture<'f, Result<Vec<String>, GithubError>> {
        Box::pin(async move {
            let p = self.path(&format!("issues/{number}/labels?per_page=100"));
            let ls: Vec<LabelName> = self
                .t
                .get_all(&format!("list labels of #{number}"), &p, None)
                .await?;
            Ok(ls.into_iter().map(|l| l.name).collect())
        })
    }

    /// Adds labels (idempotent). Returns the labels now on the issue.
    pub(crate) async fn add_labels(
        &self,
        number: u64,
        labels: &[&str],
    ) -> Result<Vec<String>, GithubError> {
        let what = format!("add labels {labels:?} to #{number}");
        let payload = json!({"labels": labels});
        let path = self.path(&format!("issues/{number}/labels"));
        let raw = self
            .t
            .write_idempotent(&what, Method::POST, &path, Some(&payload))
            .await?;
        ok_or_error(&what, &raw)?;
        Ok(raw
            .json::<Vec<LabelName>>(&what)?
            .into_iter()
            .map(|l| l.name)
            .collect())
    }

    /// Removes a label; a label that is not there counts as removed.
    pub(crate) async fn remove_label(&self, number: u64, label: &str) -> Result<(), GithubError> {
        let what = format!("remove label {label:?} from #{number}");
        let path = self.path(&format!("issues/{number}/labels/{}", seg(label)));
        let raw = self
            .t
            .write_idempotent(&what, Method::DELETE, &path, None)
            .await?;
        if raw.status == http::StatusCode::NOT_FOUND {
            return Ok(());
        }
        ok_or_error(&what, &raw)
    }

    /// A user's permission on the repository (`admin`, `maintain`, `write`,
    /// `triage`, `read` or `none`), using the precise `role_name`.
    pub fn collaborator_permission<'f>(
        &'f self,
        login: &'f str,
    ) -> BoxFuture<'f, Result<Permission, GithubError>> {
        Box::pin(async move {
            #[derive(Deserialize)]
            struct Perm {
                permission: String,
                #[serde(default)]
                role_name: Option<String>,
            }
            let what = format!("permission of {login}");
            let p: Perm = self
                .t
                .get_json(
                    &what,
                    &self.path(&format!("collaborators/{}/permission", seg(login))),
                )
                .await?;
            Ok(Permission::parse(
                p.role_name
                    .as_deref()
                    .filter(|r| !r.is_empty())
                    .unwrap_or(&p.permission),
            ))
        })
    }
}

mod actions;
mod git;

#[cfg(test)]
#[path = "api_samples.rs"]
mod api_samples;

/// `GET git/trees/{sha}?recursive=1`, as far as Klaud reads it.
#[derive(Deserialize)]
struct RecursiveTree {
    #[serde(default)]
    sha: Option<String>,
    tree: Vec<TreeEntry>,
    #[serde(default)]
    truncated: bool,
}

#[derive(Deserialize)]
struct TreeEntry {
    path: String,
    /// `100644`, `100755` (executable), `120000` (symlink), …
    #[serde(default)]
    mode: String,
    #[serde(rename = "type")]
    kind: String,
    sha: String,
}

#[cfg(test)]
mod schema_tests {
    use super::*;

    /// Values GitHub's REST schema (2022-11-28) allows for a workflow run:
    /// `pull_requests`, `head_branch`, `conclusion`, `status`, `name` and
    /// `head_repository` may be `null`.
    #[test]
    fn a_run_decodes_with_every_nullable_field_null() {
        let raw: RawRun = serde_json::from_value(serde_json::json!({
            "id": 5,
            "name": null,
            "display_title": "Run Sweep - x",
            "event": "pull_request",
            "status": null,
            "conclusion": null,
            "head_branch": null,
            "head_sha": "a".repeat(40),
            "run_attempt": 2,
            "created_at": "2026-01-01T00:00:00Z",
            "html_url": "https://github.com/o/r/actions/runs/5",
            "pull_requests": null,
            "head_repository": null,
        }))
        .expect("decodes");
        let run = RunInfo::from(raw);
        assert!(run.pull_requests.is_empty());
        assert_eq!(run.head_repository, None);
        assert_eq!(run.run_attempt, 2);
        let raw: RawRun = serde_json::from_value(serde_json::json!({
            "id": 6,
            "event": "pull_request",
            "head_sha": "b".repeat(40),
            "pull_requests": [{"number": 9, "id": 1, "url": "u",
                "head": {"ref": "x", "sha": "s", "repo": {"id": 1, "url": "u", "name": "r"}},
                "base": {"ref": "main", "sha": "t", "repo": {"id": 1, "url": "u", "name": "r"}}}],
            "head_repository": {"full_name": "o/r"},
        }))
        .expect("decodes");
        let run = RunInfo::from(raw);
        assert_eq!(run.pull_requests, [9]);
        assert_eq!(run.head_repository.as_deref(), Some("o/r"));
    }
}
