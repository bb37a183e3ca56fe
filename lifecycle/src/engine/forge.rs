//! The forge boundary: the GitHub operations the lifecycle needs. Reads are
//! free; every mutating method takes an [`OwnershipProof`], which only the
//! ownership check can make, so no code path can change GitHub without
//! having re-read that the work is still Klaud's.

use async_trait::async_trait;
use klaud_claims::{RefStore, RefStoreError};
use serde_json::Value;

use super::ownership::{OwnershipProof, ProofError, ReplyPermit};
pub use super::states::{CompareStatus, PullState, RunConclusion, RunStatus};

/// A pull request as the lifecycle sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pull {
    /// Number.
    pub number: u64,
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
    pub head_sha: String,
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
    /// GitHub's `author_association` (`OWNER`, `MEMBER`, `COLLABORATOR`,
    /// `CONTRIBUTOR`, `NONE`, …): what a repository's own gates read to
    /// decide whether a comment authorizes anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author_association: Option<String>,
}

/// A job of a workflow run (Actions jobs API).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// Name.
    pub name: String,
    /// Where it is; `None` when the server did not say.
    pub status: Option<RunStatus>,
    /// Conclusion once completed.
    pub conclusion: Option<RunConclusion>,
    /// The job's page, where its log is.
    pub html_url: Option<String>,
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
    /// Event (`workflow_dispatch`, `pull_request`).
    pub event: String,
    /// Where it is.
    pub status: RunStatus,
    /// Conclusion once completed.
    pub conclusion: Option<RunConclusion>,
    /// Commit the run tests.
    pub head_sha: String,
    /// Who started it.
    pub actor: Option<String>,
    /// RFC 3339 creation time.
    pub created_at: Option<String>,
    /// Web URL.
    pub html_url: String,
    /// Branch the run is on (for a dispatch: the dispatched branch, not
    /// `inputs.ref`).
    pub head_branch: Option<String>,
    /// `owner/name` of the repository the head comes from.
    pub head_repo: Option<String>,
    /// Pull requests GitHub associates with the run (empty for fork PRs and
    /// dispatches).
    pub pull_requests: Vec<u64>,
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
    /// Event.
    pub event: Option<String>,
    /// Actor login.
    pub actor: Option<String>,
    /// Head commit.
    pub head_sha: Option<String>,
}

/// A commit of a comparison (GitHub compare API `commits[]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComparedCommit {
    /// Sha.
    pub sha: String,
    /// The whole commit message.
    pub message: String,
    /// The GitHub account of the commit's author (`author.login`); `None`
    /// when the author e-mail belongs to no account.
    pub author: Option<String>,
    /// Parent shas.
    pub parents: Vec<String>,
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
    pub merge_base: Option<String>,
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
    async fn get_pull(&self, number: u64) -> Result<Pull, ForgeError>;
    /// Who closed pull request `number`, when GitHub says (issue
    /// `closed_by`). Required, not defaulted: a wrapper that forgot to
    /// forward it would silently lose the name.
    async fn closed_by(&self, number: u64) -> Result<Option<String>, ForgeError>;
    /// Comments of a pull request, oldest first.
    async fn list_comments(&self, number: u64) -> Result<Vec<Comment>, ForgeError>;
    /// The repository role of `login` (`admin`, `maintain`, `write`,
    /// `triage`, `read`, or a custom role name): who may give maintainer
    /// commands. An error (a non-collaborator is a 404) refuses them.
    async fn permission(&self, login: &str) -> Result<crate::commands::Permission, ForgeError>;
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
    /// The commits and files between `base` and `head` (compare API).
    async fn compare_commits(&self, base: &str, head: &str) -> Result<Comparison, ForgeError>;

    // ---- mutations (each needs a proof, and refuses with
    // [`ForgeError::Proof`] a target the proof did not check)

    /// Creates one commit on `parent` that sets `files` (path → bytes) and
    /// returns its sha. Moves no ref.
    async fn commit_files(
        &self,
        proof: &OwnershipProof,
        parent: &str,
        files: &[(String, Vec<u8>)],
        message: &str,
    ) -> Result<String, ForgeError>;
    /// Creates a merge commit whose first parent is `head` and second
    /// `base`, with `base`'s tree plus `files` (path → bytes), and returns
    /// its sha. Moves no ref. The proof must cover `head`.
    async fn commit_merge(
        &self,
        proof: &OwnershipProof,
        head: &str,
        base: &str,
        files: &[(String, Vec<u8>)],
        message: &str,
    ) -> Result<String, ForgeError>;
    /// Creates `refs/heads/<branch>` at `sha`.
    async fn create_branch(
        &self,
        proof: &OwnershipProof,
        branch: &str,
        sha: &str,
    ) -> Result<(), ForgeError>;
    /// Moves a branch without force (a compare-and-swap on GitHub's side).
    async fn fast_forward_branch(
        &self,
        proof: &OwnershipProof,
        branch: &str,
        sha: &str,
    ) -> Result<(), ForgeError>;
    /// Deletes a branch.
    async fn delete_branch(&self, proof: &OwnershipProof, branch: &str) -> Result<(), ForgeError>;
    /// Opens a draft pull request.
    async fn create_draft_pull(
        &self,
        proof: &OwnershipProof,
        title: &str,
        head: &str,
        base: &str,
        body: &str,
    ) -> Result<Pull, ForgeError>;
    /// Replaces a pull request's body.
    async fn update_pull_body(
        &self,
        proof: &OwnershipProof,
        number: u64,
        body: &str,
    ) -> Result<(), ForgeError>;
    /// Closes a pull request.
    async fn close_pull(&self, proof: &OwnershipProof, number: u64) -> Result<(), ForgeError>;
    /// Marks a pull request draft (`true`) or ready for review (`false`).
    async fn set_draft(
        &self,
        proof: &OwnershipProof,
        pull: &Pull,
        draft: bool,
    ) -> Result<(), ForgeError>;
    /// Posts a comment.
    async fn create_comment(
        &self,
        proof: &OwnershipProof,
        number: u64,
        body: &str,
    ) -> Result<Comment, ForgeError>;
    /// Replaces the body of one of the bot's comments on pull request
    /// `number` (live reports are edited in place).
    async fn update_comment(
        &self,
        proof: &OwnershipProof,
        number: u64,
        comment: u64,
        body: &str,
    ) -> Result<Comment, ForgeError>;
    /// Posts a reply on the pull request of `permit` (maintainer commands,
    /// also after a handoff).
    async fn reply(&self, permit: &ReplyPermit, body: &str) -> Result<Comment, ForgeError>;
    /// Adds labels.
    async fn add_labels(
        &self,
        proof: &OwnershipProof,
        number: u64,
        labels: &[String],
    ) -> Result<(), ForgeError>;
    /// Removes a label (absent counts as removed).
    async fn remove_label(
        &self,
        proof: &OwnershipProof,
        number: u64,
        label: &str,
    ) -> Result<(), ForgeError>;
    /// Dispatches a workflow on `git_ref` with `inputs`; the run id when the
    /// server returns run details. [`ForgeError::Ambiguous`] means: search
    /// for the run before dispatching again.
    async fn dispatch(
        &self,
        proof: &OwnershipProof,
        workflow: &str,
        git_ref: &str,
        inputs: &Value,
    ) -> Result<Option<u64>, ForgeError>;
    /// [`Forge::dispatch`], with the new run's web page when the server
    /// returns run details: a dispatched run is attempt 1, so nothing needs
    /// to read it. The default dispatches and knows no page (the caller
    /// reads the run).
    async fn dispatch_run(
        &self,
        proof: &OwnershipProof,
        workflow: &str,
        git_ref: &str,
        inputs: &Value,
    ) -> Result<Option<(u64, Option<String>)>, ForgeError> {
        Ok(self
            .dispatch(proof, workflow, git_ref, inputs)
            .await?
            .map(|id| (id, None)))
    }
    /// Re-runs a completed run (a new attempt of the same run).
    async fn rerun_run(&self, proof: &OwnershipProof, id: u64) -> Result<(), ForgeError>;
    /// Cancels a run (a completed run counts as done).
    async fn cancel_run(&self, proof: &OwnershipProof, id: u64) -> Result<(), ForgeError>;
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
