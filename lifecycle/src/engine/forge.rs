//! The forge boundary: the GitHub operations the lifecycle needs. Reads are
//! free; every change goes through [`Forge::write`], which takes a write
//! permitted by an [`super::ownership::OwnershipProof`] (only the ownership
//! check can make one, and it checks the write's target), so no code path
//! can change GitHub without having re-read that the work is still Klaud's.

pub use super::states::{
    AuthorAssociation, CompareStatus, PullState, RunConclusion, RunEvent, RunStatus,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use klaud_claims::{CommitSha, PullNumber, RefStore, RefStoreError};
use serde_json::Value;

/// A pull request as the lifecycle sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pull {
    /// Number.
    pub number: PullNumber,
    /// Open, closed or merged.
    pub state: PullState,
    /// Draft.
    pub draft: bool,
    /// Title.
    pub title: String,
    /// Body.
    pub body: String,
    /// Head branch name.
    pub head_ref: String,
    /// Head commit.
    pub head_sha: CommitSha,
    /// `owner/name` of the head repository (`None` when GitHub omits it,
    /// e.g. a deleted fork).
    pub head_repo: Option<String>,
    /// Author login.
    pub author: Option<String>,
    /// Labels.
    pub labels: Vec<String>,
    /// Web URL.
    pub html_url: String,
    /// Whether the head merges cleanly into the base: `None` while GitHub
    /// has not computed it yet (it does so asynchronously after a change of
    /// either side), `Some(false)` on a conflict.
    pub mergeable: Option<bool>,
    /// GitHub's GraphQL id, which the draft-state mutations address: every
    /// read and listing of a pull request carries it, and it never changes,
    /// so a write answered from what the step already read needs no read
    /// of its own. `None` when the source did not give it (the backend then
    /// reads it).
    pub node_id: Option<String>,
}

/// An issue comment.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Comment {
    /// Id.
    pub id: u64,
    /// Body.
    pub body: String,
    /// Author login.
    pub author: Option<String>,
    /// GitHub's `author_association`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author_association: Option<AuthorAssociation>,
}

/// A job of a workflow run (Actions jobs API).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// Id (its log is read by it).
    pub id: u64,
    /// Name.
    pub name: String,
    /// Where it is; `None` when the server did not say.
    pub status: Option<RunStatus>,
    /// Conclusion once completed.
    pub conclusion: Option<RunConclusion>,
    /// The job's page, where its log is.
    pub html_url: Option<String>,
    /// The runner (node) that ran it, GitHub's `runner_name`; `None` before
    /// one picked it up.
    pub runner_name: Option<String>,
}

/// A workflow run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// Id.
    pub id: u64,
    /// Attempt, from 1.
    pub attempt: u32,
    /// Title shown on GitHub (`display_title`).
    pub title: String,
    /// What started it.
    pub event: RunEvent,
    /// Where it is.
    pub status: RunStatus,
    /// Conclusion once completed.
    pub conclusion: Option<RunConclusion>,
    /// Commit the run tests.
    pub head_sha: CommitSha,
    /// Who started it.
    pub actor: Option<String>,
    /// When GitHub created it (read at the boundary; `None` when GitHub
    /// gave no time or one that does not parse).
    pub created_at: Option<DateTime<Utc>>,
    /// Web URL.
    pub html_url: String,
    /// Branch the run is on (for a dispatch: the dispatched branch, not
    /// `inputs.ref`).
    pub head_branch: Option<String>,
    /// `owner/name` of the repository the head comes from.
    pub head_repo: Option<String>,
    /// Pull requests GitHub associates with the run (empty for fork PRs and
    /// dispatches).
    pub pull_requests: Vec<PullNumber>,
}

impl Run {
    /// Whether the run can no longer change (until someone re-runs it).
    pub fn is_completed(&self) -> bool {
        self.status.is_completed()
    }
}

/// Which runs to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunQuery {
    /// Workflow file, e.g. `e2e-tests.yml`.
    pub workflow: String,
    /// What started them.
    pub event: Option<RunEvent>,
    /// Actor login.
    pub actor: Option<String>,
    /// Head commit.
    pub head_sha: Option<CommitSha>,
}

/// A commit of a comparison (GitHub compare API `commits[]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComparedCommit {
    /// Sha.
    pub sha: CommitSha,
    /// The whole commit message.
    pub message: String,
    /// The GitHub account of the commit's author (`author.login`); `None`
    /// when the author e-mail belongs to no account.
    pub author: Option<String>,
    /// Parent shas.
    pub parents: Vec<CommitSha>,
}

/// How `head` relates to `base` and what lies between them (GitHub
/// compare API, `base...head`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comparison {
    pub status: CompareStatus,
    /// Commits on `head` not on `base`, oldest first.
    pub commits: Vec<ComparedCommit>,
    /// Commits GitHub counts between them (`total_commits`); more than
    /// `commits.len()` when the list was cut.
    pub total_commits: u64,
    /// Paths the comparison changes (a rename names the new path).
    pub files: Vec<String>,
    /// The nearest common ancestor of both sides (`merge_base_commit`).
    pub merge_base: Option<CommitSha>,
}

/// An artifact of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactInfo {
    /// Id.
    pub id: u64,
    /// Name.
    pub name: String,
    /// Expired artifacts cannot be downloaded.
    pub expired: bool,
}

/// The underlying error of a failure, kept as its source.
pub type ErrorSource = Box<dyn std::error::Error + Send + Sync>;

/// A forge operation failed. Messages name the operation and never carry a
/// credential. A variant with a source also ends its message with the
/// source's: the engine and the daemon show errors by their message alone.
#[derive(Debug, thiserror::Error)]
pub enum ForgeError {
    /// The thing does not exist.
    #[error("{0}: not found")]
    NotFound(String),
    /// Creating something that exists (a ref).
    #[error("{0}: already exists")]
    AlreadyExists(String),
    /// A non-forced ref update that is not a fast-forward.
    #[error("{0}: not a fast-forward")]
    NotFastForward(String),
    /// A write whose outcome is unknown; re-read before trying again.
    #[error("{0}: outcome unknown")]
    Ambiguous(String),
    /// The write's target is not what its proof checked; nothing was sent.
    #[error(transparent)]
    Proof(#[from] ProofError),
    /// The forge's own transport or API failed (network, permissions, rate
    /// limits, decoding); the source's message names the operation.
    #[error("{0}")]
    Backend(#[source] ErrorSource),
    /// Reading a ref through [`Forge::refs`] failed.
    #[error("{context}: {source}")]
    Refs {
        /// What was being read, e.g. `read claim <ref>`.
        context: String,
        /// The ref store's error.
        #[source]
        source: RefStoreError,
    },
    /// A failure with no underlying error to keep (the in-memory forge's
    /// simulated refusals, test doubles).
    #[error("{0}")]
    Other(String),
    /// The forge refused the credential (revoked, expired): every later
    /// call fails the same way until it is replaced.
    #[error("{0}")]
    CredentialRefused(#[source] ErrorSource),
}

impl ForgeError {
    /// The forge implementation's own error, kept as the source.
    pub fn backend(source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Backend(Box::new(source))
    }

    /// Whether the forge refused the credential, directly or while reading
    /// a ref.
    pub fn is_credential_refused(&self) -> bool {
        matches!(
            self,
            Self::CredentialRefused(_)
                | Self::Refs {
                    source: RefStoreError::CredentialRefused(_),
                    ..
                }
        )
    }

    /// Reading a ref for `context` failed with `source`.
    pub fn refs(context: impl Into<String>, source: RefStoreError) -> Self {
        Self::Refs {
            context: context.into(),
            source,
        }
    }
}

/// A write was asked of a proof that did not check its target.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the ownership proof for {proved} does not cover {asked}")]
pub struct ProofError {
    /// What the proof checked, e.g. `claim refs/heads/klaud/claim-…, #12`.
    pub proved: String,
    /// The write's target, e.g. `pull request #13`.
    pub asked: String,
}

/// One write to GitHub with its target.
#[derive(Debug, Clone, Copy)]
pub enum Write<'a> {
    /// One commit on `parent` that sets `files` (path → bytes); moves no ref.
    CommitFiles {
        parent: &'a CommitSha,
        files: &'a [(String, Vec<u8>)],
        message: &'a str,
    },
    /// A merge commit: first parent `head`, second `base`, `base`'s tree
    /// plus `files`; moves no ref.
    CommitMerge {
        head: &'a CommitSha,
        base: &'a CommitSha,
        files: &'a [(String, Vec<u8>)],
        message: &'a str,
    },
    /// One commit on `branch`, whose only parent is `expected_head`, that
    /// sets `files`, and the branch moved to it, atomically: refused with
    /// [`ForgeError::NotFastForward`], and nothing changed, when the branch
    /// is not at `expected_head` (GitHub's `createCommitOnBranch`).
    CommitOnBranch {
        branch: &'a str,
        expected_head: &'a CommitSha,
        files: &'a [(String, Vec<u8>)],
        message: &'a str,
    },
    /// Creates `refs/heads/<branch>` at `sha`.
    CreateBranch { branch: &'a str, sha: &'a CommitSha },
    /// Creates `refs/heads/<branch>` at `base` and makes one commit on it
    /// that sets `files`, the branch moved to it, in one write (GitHub's
    /// `createRef` and `createCommitOnBranch` in one document): the commit
    /// is made when the branch is at `base` (created now, or left there
    /// before), refused with [`ForgeError::NotFastForward`] when it is
    /// elsewhere; a branch created with its commit refused stays at
    /// `base`.
    CreateBranchWithCommit {
        branch: &'a str,
        base: &'a CommitSha,
        files: &'a [(String, Vec<u8>)],
        message: &'a str,
    },
    /// Moves a branch without force (a compare-and-swap on GitHub's side).
    FastForwardBranch { branch: &'a str, sha: &'a CommitSha },
    /// Deletes a branch.
    DeleteBranch { branch: &'a str },
    /// Opens a draft pull request from `head`.
    CreateDraftPull {
        title: &'a str,
        head: &'a str,
        base: &'a str,
        body: &'a str,
    },
    /// Replaces a pull request's body.
    UpdatePullBody { number: PullNumber, body: &'a str },
    /// Closes a pull request.
    ClosePull { number: PullNumber },
    /// Marks a pull request draft (`true`) or ready for review (`false`).
    SetDraft { pull: &'a Pull, draft: bool },
    /// Posts a comment on pull request `number`.
    CreateComment { number: PullNumber, body: &'a str },
    /// Replaces the body of one of the bot's comments on pull request
    /// `number` (live reports are edited in place).
    UpdateComment {
        number: PullNumber,
        comment: u64,
        body: &'a str,
    },
    /// Posts a reply on pull request `number`: what a [`ReplyPermit`]
    /// allows (a maintainer's command answered, also after a handoff).
    Reply { number: PullNumber, body: &'a str },
    /// Adds labels.
    AddLabels {
        number: PullNumber,
        labels: &'a [String],
    },
    /// Removes a label (absent counts as removed).
    RemoveLabel { number: PullNumber, label: &'a str },
    /// Dispatches `workflow` on `git_ref` with `inputs`.
    Dispatch {
        workflow: &'a str,
        git_ref: &'a str,
        inputs: &'a Value,
    },
    /// Re-runs a completed run (a new attempt of the same run).
    RerunRun { id: u64 },
    /// Cancels a run (a completed run counts as done).
    CancelRun { id: u64 },
}

impl Write<'_> {
    /// The write in words, for the lease check's refusals.
    pub fn what(&self) -> &'static str {
        match self {
            Write::CommitFiles { .. } => "a commit",
            Write::CommitMerge { .. } => "a merge commit",
            Write::CommitOnBranch { .. } => "a commit on a branch",
            Write::CreateBranch { .. } => "creating a branch",
            Write::CreateBranchWithCommit { .. } => "creating a branch with a commit",
            Write::FastForwardBranch { .. } => "a push",
            Write::DeleteBranch { .. } => "deleting a branch",
            Write::CreateDraftPull { .. } => "opening a pull request",
            Write::UpdatePullBody { .. } => "editing a pull request",
            Write::ClosePull { .. } => "closing a pull request",
            Write::SetDraft { .. } => "changing draft state",
            Write::CreateComment { .. } => "a comment",
            Write::UpdateComment { .. } => "a comment edit",
            Write::Reply { .. } => "a reply",
            Write::AddLabels { .. } => "adding a label",
            Write::RemoveLabel { .. } => "removing a label",
            Write::Dispatch { .. } => "a workflow dispatch",
            Write::RerunRun { .. } => "a re-run",
            Write::CancelRun { .. } => "a cancel",
        }
    }
}

/// What a write answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// The write is done and answered nothing more.
    Done,
    /// The new commit's sha.
    Commit(CommitSha),
    /// The new pull request.
    Pull(Pull),
    /// The posted or edited comment.
    Comment(Comment),
    /// The dispatched run and its web page, when the server said.
    Dispatched(Option<(u64, Option<String>)>),
}

impl Written {
    pub(super) fn wrong(self, asked: &str) -> ForgeError {
        ForgeError::Other(format!("the forge answered {self:?} to {asked}"))
    }

    pub(super) fn done(self, asked: &str) -> Result<(), ForgeError> {
        match self {
            Written::Done => Ok(()),
            other => Err(other.wrong(asked)),
        }
    }
}

/// The lease a permitted write was proved under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSeen {
    /// The claim ref the proof checked.
    pub claim_ref: String,
    /// Its lease as the check read it (`None`: a claim without one).
    pub until: Option<DateTime<Utc>>,
}

/// A write its proof covers. Made only by [`OwnershipProof::permit`] and
/// [`ReplyPermit::permit`]; not `Clone`, so one check sends one write.
#[derive(Debug)]
pub struct Permitted<'a> {
    write: Write<'a>,
    /// `None` for a reply, which answers a maintainer and needs no claim.
    lease: Option<LeaseSeen>,
}

impl<'a> Permitted<'a> {
    /// Called only by the proofs' `permit` (`engine::write`): the type sits
    /// here, beside the `Forge` trait that takes it, and stays out of reach
    /// of a backend outside the engine.
    pub(super) fn new(write: Write<'a>, lease: Option<LeaseSeen>) -> Self {
        Self { write, lease }
    }

    /// The write to send.
    pub fn write(&self) -> &Write<'a> {
        &self.write
    }

    /// The claim lease the write was proved under (`None`: it needs none).
    pub fn lease(&self) -> Option<&LeaseSeen> {
        self.lease.as_ref()
    }
}

/// The GitHub operations of the lifecycle, for one repository.
#[async_trait]
pub trait Forge: Send + Sync {
    /// `owner/name`.
    fn repo(&self) -> String;
    /// The bot login every Klaud write is made as.
    fn bot_login(&self) -> String;
    /// The ref store claims are kept in. Reads see every ref; writes are
    /// refused outside the claim and recovery-lease namespaces
    /// ([`klaud_claims::is_coordination_ref`]), so no branch can be changed
    /// through it without a proof.
    fn refs(&self) -> &dyn RefStore;

    // ---- reads

    /// A file's bytes at a commit or branch; `None` when absent.
    async fn read_file(&self, path: &str, git_ref: &str) -> Result<Option<Vec<u8>>, ForgeError>;
    /// The newest pull request (any state) whose head is `branch` of this
    /// repository.
    async fn find_pull(&self, branch: &str) -> Result<Option<Pull>, ForgeError>;
    /// One pull request.
    async fn get_pull(&self, number: PullNumber) -> Result<Pull, ForgeError>;
    /// Who closed pull request `number`, when GitHub says (issue
    /// `closed_by`). Required, not defaulted: a wrapper that forgot to
    /// forward it would silently lose the name.
    async fn closed_by(&self, number: PullNumber) -> Result<Option<String>, ForgeError>;
    /// Comments of a pull request, oldest first.
    async fn list_comments(&self, number: PullNumber) -> Result<Vec<Comment>, ForgeError>;
    /// The pull requests the bot opened, in any state, with activity (a
    /// comment, an edit) since `since`: how a finished PR with a new
    /// command is found without reading every old PR's comments.
    async fn own_pulls_active_since(
        &self,
        since: DateTime<Utc>,
    ) -> Result<Vec<PullNumber>, ForgeError>;
    /// The repository role of `login` (`admin`, `maintain`, `write`,
    /// `triage`, `read`, or a custom role name): who may give maintainer
    /// commands. An error (a non-collaborator is a 404) refuses them.
    async fn permission(&self, login: &str) -> Result<super::asks::Permission, ForgeError>;
    /// Runs of a workflow, newest first.
    async fn list_runs(&self, query: &RunQuery) -> Result<Vec<Run>, ForgeError>;
    /// One run.
    async fn get_run(&self, id: u64) -> Result<Run, ForgeError>;
    /// Artifacts of a run.
    async fn list_artifacts(&self, run: u64) -> Result<Vec<ArtifactInfo>, ForgeError>;
    /// An artifact's zip bytes.
    async fn download_artifact(&self, id: u64) -> Result<Vec<u8>, ForgeError>;
    /// Jobs of a run's latest attempt.
    async fn list_jobs(&self, run: u64) -> Result<Vec<Job>, ForgeError>;
    /// A job's plain-text log, at most `limit` bytes: a longer one keeps its
    /// head and its tail (where a failure's cause and its last words are)
    /// around a line saying how much was left out.
    async fn job_log(&self, job: u64, limit: usize) -> Result<Vec<u8>, ForgeError>;
    /// The commits and files between `base` and `head` (compare API).
    async fn compare_commits(&self, base: &str, head: &str) -> Result<Comparison, ForgeError>;

    // ---- the one mutation

    /// Sends one write its proof permitted ([`super::write`]). A backend
    /// performs the write as asked: the check of its target was made when
    /// the permit was, and the callers' methods ([`super::write::Writes`])
    /// build, check and send each write.
    async fn write(&self, permitted: Permitted<'_>) -> Result<Written, ForgeError>;
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use klaud_claims::RefStoreError;

    use super::ForgeError;

    #[test]
    fn a_failed_ref_read_names_the_ref_and_keeps_the_store_error() {
        let e = ForgeError::refs(
            "read branch klaud/auto-x",
            RefStoreError::Other("HTTP 502".into()),
        );
        assert_eq!(
            e.to_string(),
            "read branch klaud/auto-x: ref store: HTTP 502"
        );
        let source = e.source().expect("kept");
        assert_eq!(source.to_string(), "ref store: HTTP 502");
    }

    #[test]
    fn a_backend_error_is_its_cause_by_message_and_by_source() {
        let e = ForgeError::backend(std::io::Error::other("read run 5: network error: reset"));
        assert_eq!(e.to_string(), "read run 5: network error: reset");
        assert_eq!(
            e.source().map(|s| s.to_string()).as_deref(),
            Some("read run 5: network error: reset")
        );
    }
}
