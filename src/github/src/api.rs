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

    // ------------------------------------------------------------- git data

    /// The sha a ref (full name) points at; `None` when absent.
    pub fn get_ref<'f>(
        &'f self,
        name: &'f str,
    ) -> BoxFuture<'f, Result<Option<String>, GithubError>> {
        Box::pin(async move {
            let what = format!("read ref {name}");
            let path = self.path(&format!("git/ref/{}", short_ref(name)));
            // Conditional: ownership checks re-read the same refs at every step,
            // and an unchanged ref is a free 304.
            let Some(body) = self.t.read_found_conditional(&what, &path).await? else {
                return Ok(None);
            };
            Ok(Some(
                crate::transport::decode::<RawRef>(&what, &body)?.object.sha,
            ))
        })
    }

    /// Every ref whose full name starts with `prefix`, as (name, sha).
    pub fn list_refs<'f>(
        &'f self,
        prefix: &'f str,
    ) -> BoxFuture<'f, Result<Vec<(String, String)>, GithubError>> {
        Box::pin(async move {
            let what = format!("list refs {prefix}*");
            let path = self.path(&format!(
                "git/matching-refs/{}?per_page=100",
                short_ref(prefix)
            ));
            let refs: Vec<RawRef> = self.t.get_all(&what, &path, None).await?;
            Ok(refs.into_iter().map(|r| (r.name, r.object.sha)).collect())
        })
    }

    /// Creates a ref. [`GithubError::AlreadyExists`] when it exists. After
    /// an ambiguous failure the ref is re-read: pointing at `sha` means our
    /// write landed — sound only when `sha` is unique to this writer (claim
    /// commits carry the owner's id, so two owners never share one).
    pub(crate) async fn create_ref(&self, name: &str, sha: &str) -> Result<(), GithubError> {
        let what = format!("create ref {name}");
        let body = json!({"ref": name, "sha": sha});
        for _ in 0..2 {
            match self
                .t
                .write(&what, Method::POST, &self.path("git/refs"), Some(&body))
                .await
            {
                Ok(raw) => return ok_or_error(&what, &raw),
                Err(GithubError::Ambiguous { detail, .. }) => match self.get_ref(name).await? {
                    Some(s) if s == sha => return Ok(()),
                    Some(_) => {
                        return Err(GithubError::AlreadyExists {
                            what,
                            message: "Reference already exists".into(),
                        });
                    }
                    None => tracing::warn!(what, detail, "write did not land; sending it again"),
                },
                Err(e) => return Err(e),
            }
        }
        Err(GithubError::Ambiguous {
            what,
            detail: "the write failed twice without landing".into(),
        })
    }

    /// Moves a ref. Without `force`, a non-fast-forward answers
    /// [`GithubError::NotFastForward`] (the compare-and-swap).
    pub(crate) async fn update_ref(
        &self,
        name: &str,
        sha: &str,
        force: bool,
    ) -> Result<(), GithubError> {
        let what = format!("update ref {name}");
        let body = json!({"sha": sha, "force": force});
        let path = self.path(&format!("git/refs/{}", short_ref(name)));
        for _ in 0..2 {
            match self.t.write(&what, Method::PATCH, &path, Some(&body)).await {
                Ok(raw)
                    if raw.status == http::StatusCode::UNPROCESSABLE_ENTITY
                        && raw.message().contains("does not exist") =>
                {
                    return Err(GithubError::NotFound { what });
                }
                Ok(raw) => return ok_or_error(&what, &raw),
                // Re-sending is safe: a non-forced update stays a CAS, and a
                // forced one converges on the same sha.
                Err(GithubError::Ambiguous { detail, .. }) => {
                    if self.get_ref(name).await?.as_deref() == Some(sha) {
                        return Ok(());
                    }
                    tracing::warn!(what, detail, "ref update did not land; sending it again");
                }
                Err(e) => return Err(e),
            }
        }
        Err(GithubError::Ambiguous {
            what,
            detail: "the write failed twice without landing".into(),
        })
    }

    /// Deletes a ref; [`GithubError::NotFound`] when it does not exist.
    pub(crate) async fn delete_ref(&self, name: &str) -> Result<(), GithubError> {
        let what = format!("delete ref {name}");
        let path = self.path(&format!("git/refs/{}", short_ref(name)));
        match self.t.write(&what, Method::DELETE, &path, None).await {
            Ok(raw)
                if raw.status == http::StatusCode::UNPROCESSABLE_ENTITY
                    && raw.message().contains("does not exist") =>
            {
                Err(GithubError::NotFound { what })
            }
            Ok(raw) => ok_or_error(&what, &raw),
            Err(GithubError::Ambiguous { detail, .. }) => match self.get_ref(name).await? {
                None => Ok(()),
                Some(_) => Err(GithubError::Ambiguous { what, detail }),
            },
            Err(e) => Err(e),
        }
    }

    pub(crate) async fn git_commit(&self, sha: &str) -> Result<GitCommit, GithubError> {
        let what = format!("read commit {sha}");
        let c: RawGitCommit = self
            .t
            .get_json_immutable(&what, &self.path(&format!("git/commits/{}", seg(sha))))
            .await?;
        Ok(GitCommit {
            message: c.message,
            tree: c.tree.sha,
            parents: c.parents.into_iter().map(|p| p.sha).collect(),
        })
    }

    /// Git objects are content-addressed, so re-sending a create after an
    /// ambiguous failure only ever yields the same object.
    async fn create_object(
        &self,
        what: &str,
        kind: &str,
        body: &Value,
    ) -> Result<(String, bytes::Bytes), GithubError> {
        let path = self.path(&format!("git/{kind}"));
        let mut last = None;
        for _ in 0..2 {
            match self.t.write(what, Method::POST, &path, Some(body)).await {
                Ok(raw) => {
                    ok_or_error(what, &raw)?;
                    return Ok((raw.json::<ShaOnly>(what)?.sha, raw.body));
                }
                Err(e @ GithubError::Ambiguous { .. }) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| GithubError::Ambiguous {
            what: what.to_string(),
            detail: "no answer".into(),
        }))
    }

    /// Creates a blob and returns its sha.
    pub(crate) async fn create_blob(&self, content: &[u8]) -> Result<String, GithubError> {
        let body = json!({"content": B64.encode(content), "encoding": "base64"});
        Ok(self.create_object("create blob", "blobs", &body).await?.0)
    }

    /// Creates a tree from `base_tree` plus changes and returns its sha.
    pub(crate) async fn create_tree(
        &self,
        base_tree: Option<&str>,
        changes: &[TreeChange],
    ) -> Result<String, GithubError> {
        let mut entries = Vec::new();
        for c in changes {
            let mode = if c.executable { "100755" } else { "100644" };
            let entry = match &c.content {
                // Text goes into the tree request itself (GitHub writes the
                // blob): one request less per file than a blob first.
                Some(bytes) if bytes.len() <= INLINE_TREE_CONTENT_MAX => {
                    match std::str::from_utf8(bytes) {
                        Ok(text) => {
                            json!({"path": c.path, "mode": mode, "type": "blob", "content": text})
                        }
                        Err(_) => {
                            let sha = self.create_blob(bytes).await?;
                            json!({"path": c.path, "mode": mode, "type": "blob", "sha": sha})
                        }
                    }
                }
                Some(bytes) => {
                    let sha = self.create_blob(bytes).await?;
                    json!({"path": c.path, "mode": mode, "type": "blob", "sha": sha})
                }
                None => json!({"path": c.path, "mode": mode, "type": "blob", "sha": null}),
            };
            entries.push(entry);
        }
        let mut body = json!({"tree": entries});
        if let Some(b) = base_tree {
            body["base_tree"] = json!(b);
        }
        Ok(self.create_object("create tree", "trees", &body).await?.0)
    }

    /// Every blob of a commit's (or tree's) tree, recursively, as
    /// `(path, blob sha)`. A truncated answer (GitHub caps recursive trees)
    /// is an error rather than a silently partial listing.
    pub fn tree_blobs<'f>(
        &'f self,
        tree_ish: &'f str,
    ) -> BoxFuture<'f, Result<Vec<(String, String)>, GithubError>> {
        Box::pin(async move {
            let what = format!("read tree of {tree_ish}");
            let path = self.path(&format!("git/trees/{}?recursive=1", seg(tree_ish)));
            let t: RecursiveTree = if is_full_sha(tree_ish) {
                self.t.get_json_immutable(&what, &path).await?
            } else {
                self.t.get_json(&what, &path).await?
            };
            if t.truncated {
                return Err(GithubError::Decode {
                    what,
                    detail: "GitHub truncated the recursive tree".into(),
                });
            }
            // Read by commit sha, the answer names that commit's tree: a claim
            // commit or a bump made on this commit needs no read of it.
            if is_full_sha(tree_ish)
                && let Some(tree) = t.sha.as_deref().filter(|s| is_full_sha(s))
            {
                self.t.remember_tree(tree_ish, tree);
            }
            Ok(t.tree
                .into_iter()
                .filter(|e| e.kind == "blob")
                .map(|e| (e.path, e.sha))
                .collect())
        })
    }

    /// `Some(blob sha or None when absent)` for `path` in the recursive tree
    /// of commit `sha`, when that tree was read already and is complete;
    /// `None` when only a request can tell.
    fn blob_in_read_tree(&self, sha: &str, path: &str) -> Option<Option<String>> {
        if !is_full_sha(sha) {
            return None;
        }
        let body = self
            .t
            .cached_immutable(&self.path(&format!("git/trees/{}?recursive=1", seg(sha))))?;
        let tree: RecursiveTree = serde_json::from_slice(&body).ok()?;
        if tree.truncated {
            return None;
        }
        let entry = tree.tree.into_iter().find(|e| e.path == path);
        match entry {
            Some(e) if e.kind == "blob" => Some(Some(e.sha)),
            // A directory (or a submodule) is not a file: the contents API
            // says what it is.
            Some(_) => None,
            None => Some(None),
        }
    }

    /// A blob's bytes.
    pub fn get_blob<'f>(&'f self, sha: &'f str) -> BoxFuture<'f, Result<Vec<u8>, GithubError>> {
        Box::pin(async move {
            #[derive(Deserialize)]
            struct Blob {
                content: String,
                encoding: String,
            }
            let what = format!("read blob {sha}");
            let b: Blob = self
                .t
                .get_json_immutable(&what, &self.path(&format!("git/blobs/{}", seg(sha))))
                .await?;
            if b.encoding != "base64" {
                return Err(GithubError::Decode {
                    what,
                    detail: format!("blob encoding {:?}", b.encoding),
                });
            }
            B64.decode(b.content.replace(['\n', '\r'], ""))
                .map_err(|e| GithubError::Decode {
                    what,
                    detail: format!("content is not base64: {e}"),
                })
        })
    }

    /// Creates a commit object and returns its sha.
    pub(crate) async fn create_commit(
        &self,
        message: &str,
        tree: &str,
        parents: &[String],
    ) -> Result<String, GithubError> {
        let body = json!({"message": message, "tree": tree, "parents": parents});
        let (sha, answer) = self
            .create_object("create commit", "commits", &body)
            .await?;
        // GitHub answers a create with the commit object itself, the same
        // JSON `GET git/commits/{sha}` gives, and a commit never changes: the
        // next step's read of it (the claim record in its message, the head
        // it checks) is answered from memory.
        if is_full_sha(&sha)
            && crate::transport::decode::<RawGitCommit>("created commit", &answer).is_ok()
        {
            self.t
                .remember_immutable(&self.path(&format!("git/commits/{}", seg(&sha))), answer);
            self.t.remember_tree(&sha, tree);
        }
        Ok(sha)
    }

    /// The tree of commit `sha`: known without a request when the commit
    /// was made here or its tree was read by its sha, else read (and the
    /// commit is kept, like every git object read by sha).
    pub(crate) async fn tree_of(&self, sha: &str) -> Result<String, GithubError> {
        if let Some(tree) = self.t.known_tree(sha) {
            return Ok(tree);
        }
        let tree = self.git_commit(sha).await?.tree;
        self.t.remember_tree(sha, &tree);
        Ok(tree)
    }

    /// Remembers what a commit made here with [`Github::create_tree`] on
    /// `parent`'s tree holds: `files` as set, every other path as in
    /// `parent`. A later read of a file at that commit asks nothing.
    pub(crate) fn remember_own_commit(&self, sha: &str, parent: &str, files: &[TreeChange]) {
        if is_full_sha(sha) && is_full_sha(parent) {
            self.t.remember_own_commit(
                sha,
                parent,
                files.iter().map(|c| {
                    (
                        c.path.clone(),
                        c.content.as_ref().map(|b| bytes::Bytes::from(b.clone())),
                    )
                }),
            );
        }
    }

    /// A file's bytes at a ref; `None` when the path does not exist.
    pub fn get_contents<'f>(
        &'f self,
        path: &'f str,
        git_ref: &'f str,
    ) -> BoxFuture<'f, Result<Option<Vec<u8>>, GithubError>> {
        Box::pin(async move {
            #[derive(Deserialize)]
            struct Content {
                #[serde(default)]
                content: Option<String>,
                #[serde(default)]
                encoding: Option<String>,
                #[serde(default)]
                sha: Option<String>,
                #[serde(rename = "type", default)]
                kind: Option<String>,
            }
            // A commit Klaud made holds the files it set, and its parent's
            // everywhere else: no request for what Klaud wrote itself.
            let mut git_ref = git_ref.to_string();
            for _ in 0..64 {
                match self.t.own_file(&git_ref, path) {
                    crate::transport::OwnFile::Set(bytes) => return Ok(bytes.map(|b| b.to_vec())),
                    crate::transport::OwnFile::AsIn(parent) => git_ref = parent,
                    crate::transport::OwnFile::Unknown => break,
                }
            }
            let git_ref = git_ref.as_str();
            // The plan read this commit's whole tree by its sha: the file is
            // absent, or the blob the tree names; when that blob was read
            // too, no request. (A blob not read yet costs one request either
            // way; the contents API's is the one the caches of checkouts and
            // the store expect.)
            match self.blob_in_read_tree(git_ref, path) {
                Some(None) => return Ok(None),
                Some(Some(sha)) => {
                    let blob = self.path(&format!("git/blobs/{}", seg(&sha)));
                    if self.t.cached_immutable(&blob).is_some() {
                        return self.get_blob(&sha).await.map(Some);
                    }
                }
                None => {}
            }
            let what = format!("read {path} at {git_ref}");
            let p = self.path(&format!(
                "contents/{}?{}",
                path_of(path),
                query(&[("ref", git_ref)])
            ));
            // A file at a commit sha never changes; at a branch it may.
            let body = if is_full_sha(git_ref) {
                self.t.read_immutable(&what, &p).await?
            } else {
                self.t.read_found(&what, &p).await?.map(|raw| raw.body)
            };
            let Some(body) = body else {
                return Ok(None);
            };
            // A directory answers with an array.
            let c: Content =
                crate::transport::decode(&what, &body).map_err(|_| GithubError::Decode {
                    what: what.clone(),
                    detail: "not a file (a directory listing?)".into(),
                })?;
            if c.kind.as_deref().is_some_and(|k| k != "file") {
                return Err(GithubError::Decode {
                    what,
                    detail: format!("not a file but a {}", c.kind.unwrap_or_default()),
                });
            }
            let decode = |text: &str, what: String| {
                B64.decode(text.replace(['\n', '\r'], ""))
                    .map_err(|e| GithubError::Decode {
                        what,
                        detail: format!("content is not base64: {e}"),
                    })
            };
            match (c.content.as_deref(), c.encoding.as_deref(), c.sha) {
                (Some(text), Some("base64"), _) => decode(text, what).map(Some),
                // Files over 1 MB are not inlined: read the blob (up to 100 MB).
                (_, Some("none"), Some(sha)) | (None, _, Some(sha)) => {
                    #[derive(Deserialize)]
                    struct Blob {
                        content: String,
                        encoding: String,
                    }
                    let b: Blob = self
                        .t
                        .get_json_immutable(&what, &self.path(&format!("git/blobs/{}", seg(&sha))))
                        .await?;
                    if b.encoding != "base64" {
                        return Err(GithubError::Decode {
                            what,
                            detail: format!("blob encoding {:?}", b.encoding),
                        });
                    }
                    decode(&b.content, what).map(Some)
                }
                _ => Err(GithubError::Decode {
                    what,
                    detail: "file content missing from the response".into(),
                }),
            }
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
    pub(crate) async fn set_draft(&self, pull: &PullInfo, draft: bool) -> Result<(), GithubError> {
        let (what, mutation) = if draft {
            (
                format!("convert #{} to draft", pull.number),
                "convertPullRequestToDraft",
            )
        } else {
            (
                format!("mark #{} ready for review", pull.number),
                "markPullRequestReadyForReview",
            )
        };
        let query = format!(
            "mutation($id: ID!) {{ {mutation}(input: {{pullRequestId: $id}}) {{ pullRequest {{ isDraft }} }} }}"
        );
        let body = json!({"query": query, "variables": {"id": pull.node_id}});
        // Setting this state again is harmless.
        let raw = self
            .t
            .write_idempotent(&what, Method::POST, "/graphql", Some(&body))
            .await?;
        ok_or_error(&what, &raw)?;
        let v: Value = raw.json(&what)?;
        if let Some(errs) = v
            .get("errors")
            .and_then(Value::as_array)
            .filter(|e| !e.is_empty())
        {
            let message = errs
                .iter()
                .filter_map(|e| e.get("message").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("; ");
            return Err(GithubError::Rejected {
                what,
                status: 200,
                message,
            });
        }
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

    // -------------------------------------------------------------- actions

    /// Dispatches a workflow. Asks for `return_run_details`; a server that
    /// rejects the parameter is asked again without it (then `run_id` is
    /// `None`: find the run by title). An ambiguous failure is returned as
    /// is — the caller must search for the run before dispatching again.
    pub(crate) async fn dispatch_workflow(
        &self,
        workflow: &str,
        git_ref: &str,
        inputs: &Value,
    ) -> Result<DispatchOutcome, GithubError> {
        #[derive(Deserialize)]
        struct Details {
            workflow_run_id: u64,
            #[serde(default)]
            html_url: Option<String>,
        }
        let what = format!("dispatch {workflow} on {git_ref}");
        let path = self.path(&format!("actions/workflows/{}/dispatches", seg(workflow)));
        let with = json!({"ref": git_ref, "inputs": inputs, "return_run_details": true});
        let raw = self
            .t
            .write(&what, Method::POST, &path, Some(&with))
            .await?;
        let raw = if matches!(raw.status.as_u16(), 400 | 422)
            && raw.message().contains("return_run_details")
        {
            let without = json!({"ref": git_ref, "inputs": inputs});
            self.t
                .write(&what, Method::POST, &path, Some(&without))
                .await?
        } else {
            raw
        };
        ok_or_error(&what, &raw)?;
        if raw.status == http::StatusCode::NO_CONTENT || raw.body.is_empty() {
            return Ok(DispatchOutcome {
                run_id: None,
                html_url: None,
            });
        }
        let d: Details = raw.json(&what)?;
        Ok(DispatchOutcome {
            run_id: Some(d.workflow_run_id),
            html_url: d.html_url,
        })
    }

    /// A workflow by file name (or id); `None` when the repository has no
    /// such workflow.
    pub fn get_workflow<'f>(
        &'f self,
        workflow: &'f str,
    ) -> BoxFuture<'f, Result<Option<WorkflowInfo>, GithubError>> {
        Box::pin(async move {
            let what = format!("read workflow {workflow}");
            let path = self.path(&format!("actions/workflows/{}", seg(workflow)));
            self.t
                .read_found(&what, &path)
                .await?
                .map(|raw| raw.json(&what))
                .transpose()
        })
    }

    /// The REST (`core`) budget from `GET /rate_limit`, which GitHub does
    /// not count against it; `None` when the server has rate limiting
    /// turned off (GitHub Enterprise answers 404 then).
    pub fn rate_limit<'f>(
        &'f self,
    ) -> BoxFuture<'f, Result<Option<super::RateBudget>, GithubError>> {
        Box::pin(async move {
            #[derive(Deserialize)]
            struct Window {
                limit: u64,
                remaining: u64,
                #[serde(default)]
                used: Option<u64>,
                #[serde(default)]
                reset: i64,
            }
            #[derive(Deserialize)]
            struct Resources {
                core: Window,
            }
            #[derive(Deserialize)]
            struct RateLimit {
                resources: Resources,
            }
            let what = "read the rate limit (GET /rate_limit)";
            let Some(raw) = self.t.read_found(what, "/rate_limit").await? else {
                return Ok(None);
            };
            let core = raw.json::<RateLimit>(what)?.resources.core;
            Ok(Some(super::RateBudget {
                limit: core.limit,
                remaining: core.remaining,
                used: core
                    .used
                    .unwrap_or(core.limit.saturating_sub(core.remaining)),
                reset_unix: core.reset,
                resource: "core".into(),
            }))
        })
    }

    /// Workflow runs matching the filter, newest first (all pages).
    pub fn list_runs<'f>(
        &'f self,
        filter: &'f RunFilter,
    ) -> BoxFuture<'f, Result<Vec<RunInfo>, GithubError>> {
        Box::pin(async move {
            let mut q: Vec<(&str, &str)> = vec![("per_page", "100")];
            for (k, v) in [
                ("event", &filter.event),
                ("actor", &filter.actor),
                ("branch", &filter.branch),
                ("status", &filter.status),
                ("head_sha", &filter.head_sha),
                ("created", &filter.created),
            ] {
                if let Some(v) = v {
                    q.push((k, v));
                }
            }
            let base = match &filter.workflow {
                Some(w) => format!("actions/workflows/{}/runs", seg(w)),
                None => "actions/runs".to_string(),
            };
            let p = self.path(&format!("{base}?{}", query(&q)));
            let runs: Vec<RawRun> = self
                .t
                .get_all("list workflow runs", &p, Some("workflow_runs"))
                .await?;
            Ok(runs.into_iter().map(RunInfo::from).collect())
        })
    }

    /// One run (conditional GET: polling costs no budget while unchanged).
    pub fn get_run<'f>(&'f self, id: u64) -> BoxFuture<'f, Result<RunInfo, GithubError>> {
        Box::pin(async move {
            let what = format!("read workflow run {id}");
            let r: RawRun = self
                .t
                .get_json_cached(&what, &self.path(&format!("actions/runs/{id}")))
                .await?;
            Ok(r.into())
        })
    }

    /// Cancels a run; a run that already completed counts as done.
    pub(crate) async fn cancel_run(&self, id: u64) -> Result<(), GithubError> {
        let what = format!("cancel workflow run {id}");
        let path = self.path(&format!("actions/runs/{id}/cancel"));
        match self.t.write(&what, Method::POST, &path, None).await {
            Ok(raw) if raw.status == http::StatusCode::CONFLICT => Ok(()),
            Ok(raw) => ok_or_error(&what, &raw),
            Err(GithubError::Ambiguous { detail, .. }) => {
                let run = self.get_run(id).await?;
                if run.status.as_ref().is_some_and(RunStatus::is_completed) {
                    return Ok(());
                }
                let raw = self
                    .t
                    .write(&what, Method::POST, &path, None)
                    .await
                    .map_err(|_| GithubError::Ambiguous {
                        what: what.clone(),
                        detail,
                    })?;
                if raw.status == http::StatusCode::CONFLICT {
                    return Ok(());
                }
                ok_or_error(&what, &raw)
            }
            Err(e) => Err(e),
        }
    }

    /// Artifacts of a run.
    pub fn list_artifacts<'f>(
        &'f self,
        run_id: u64,
    ) -> BoxFuture<'f, Result<Vec<Artifact>, GithubError>> {
        Box::pin(async move {
            let p = self.path(&format!("actions/runs/{run_id}/artifacts?per_page=100"));
            self.t
                .get_all(
                    &format!("list artifacts of run {run_id}"),
                    &p,
                    Some("artifacts"),
                )
                .await
        })
    }

    /// An artifact's zip bytes (GitHub redirects to a signed URL; octocrab
    /// follows it without sending the token to the other host).
    pub fn download_artifact<'f>(&'f self, id: u64) -> BoxFuture<'f, Result<Vec<u8>, GithubError>> {
        Box::pin(async move {
            let what = format!("download artifact {id}");
            // An artifact never changes once uploaded (GitHub gives a re-upload
            // a new id), so every report step after the first reads it from
            // memory instead of asking for a new signed URL.
            match self
                .t
                .read_immutable(&what, &self.path(&format!("actions/artifacts/{id}/zip")))
                .await?
            {
                Some(body) => Ok(body.to_vec()),
                None => Err(GithubError::NotFound { what }),
            }
        })
    }

    /// Compares two commits or branches.
    pub fn compare<'f>(
        &'f self,
        base: &'f str,
        head: &'f str,
    ) -> BoxFuture<'f, Result<Comparison, GithubError>> {
        Box::pin(async move {
            let what = format!("compare {base}...{head}");
            let p = self.path(&format!("compare/{}...{}?per_page=1", seg(base), seg(head)));
            self.t.get_json(&what, &p).await
        })
    }

    /// Compares two commits with the commits and files between them.
    pub fn compare_detail<'f>(
        &'f self,
        base: &'f str,
        head: &'f str,
    ) -> BoxFuture<'f, Result<CompareDetail, GithubError>> {
        Box::pin(async move {
            let what = format!("compare {base}...{head}");
            let p = self.path(&format!("compare/{}...{}", seg(base), seg(head)));
            self.t.get_json(&what, &p).await
        })
    }

    /// The compare `base...head` with its changed files and their patches.
    /// Only the first page is read: GitHub puts the file list there and
    /// nowhere else (later pages carry only commits).
    pub fn compare_files<'f>(
        &'f self,
        base: &'f str,
        head: &'f str,
    ) -> BoxFuture<'f, Result<ComparisonFiles, GithubError>> {
        Box::pin(async move {
            let what = format!("compare {base}...{head} with files");
            let p = self.path(&format!(
                "compare/{}...{}?per_page=100&page=1",
                seg(base),
                seg(head)
            ));
            self.t.get_json(&what, &p).await
        })
    }

    /// Up to `limit` (at most 100: one page) commits reachable from `sha`
    /// that touch `path`, newest first (`GET commits?sha=&path=`).
    pub fn commits_touching<'f>(
        &'f self,
        path: &'f str,
        sha: &'f str,
        limit: usize,
    ) -> BoxFuture<'f, Result<Vec<String>, GithubError>> {
        Box::pin(async move {
            let what = format!("list commits touching {path}");
            let per_page = limit.clamp(1, 100).to_string();
            let p = self.path(&format!(
                "commits?{}",
                query(&[("sha", sha), ("path", path), ("per_page", &per_page)])
            ));
            let list: Vec<ShaOnly> = self.t.get_json(&what, &p).await?;
            Ok(list.into_iter().map(|c| c.sha).collect())
        })
    }

    /// The files one commit changes, with their patches (first page).
    pub fn commit_files<'f>(
        &'f self,
        sha: &'f str,
    ) -> BoxFuture<'f, Result<Vec<klaud_planner::audit::ChangedFile>, GithubError>> {
        Box::pin(async move {
            let what = format!("get commit {sha}");
            let p = self.path(&format!("commits/{}", seg(sha)));
            // A commit never changes: cached by its sha.
            let c: CommitFiles = self.t.get_json_immutable(&what, &p).await?;
            Ok(c.files)
        })
    }

    /// Jobs of a run's latest attempt.
    pub fn list_jobs<'f>(
        &'f self,
        run_id: u64,
    ) -> BoxFuture<'f, Result<Vec<JobInfo>, GithubError>> {
        Box::pin(async move {
            let p = self.path(&format!("actions/runs/{run_id}/jobs?per_page=100"));
            self.t
                .get_all(&format!("list jobs of run {run_id}"), &p, Some("jobs"))
                .await
        })
    }

    /// A job's plain-text log (GitHub answers 302 to a short-lived URL;
    /// octocrab follows it without sending the token to the other host).
    /// Read once per failed job: not kept in memory afterwards.
    pub fn job_log<'f>(&'f self, job_id: u64) -> BoxFuture<'f, Result<Vec<u8>, GithubError>> {
        Box::pin(async move {
            let what = format!("read the log of job {job_id}");
            match self
                .t
                .read_found(&what, &self.path(&format!("actions/jobs/{job_id}/logs")))
                .await?
            {
                Some(raw) => Ok(raw.body.to_vec()),
                None => Err(GithubError::NotFound { what }),
            }
        })
    }

    /// Re-runs a completed run. After an ambiguous failure the run is
    /// re-read: a higher attempt than before means the re-run was accepted.
    pub(crate) async fn rerun_run(&self, id: u64) -> Result<(), GithubError> {
        let what = format!("re-run workflow run {id}");
        let before = self.get_run(id).await?.run_attempt;
        let path = self.path(&format!("actions/runs/{id}/rerun"));
        match self.t.write(&what, Method::POST, &path, None).await {
            Ok(raw) => ok_or_error(&what, &raw),
            Err(GithubError::Ambiguous { detail, .. }) => {
                if self.get_run(id).await?.run_attempt > before {
                    Ok(())
                } else {
                    Err(GithubError::Ambiguous { what, detail })
                }
            }
            Err(e) => Err(e),
        }
    }
}

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
