//! The one write path. Every change Klaud makes on GitHub is a [`Write`]
//! naming its target; only [`OwnershipProof::permit`] (or, for a reply,
//! [`ReplyPermit::permit`]) turns one into a [`Permitted`] write, after
//! checking that the proof covers that target. A forge backend implements
//! the single method [`super::forge::Forge::write`], which takes a
//! [`Permitted`] write: it performs plain operations and cannot be handed a
//! write nobody checked. The convenience methods callers use
//! ([`Writes`]) build the write, ask the proof and send it, and cannot be
//! overridden by a backend.

use async_trait::async_trait;
use chrono::TimeDelta;
use klaud_claims::{Clock, CommitSha, PullNumber};
use serde_json::Value;

use super::forge::{
    Comment, Forge, ForgeError, LeaseSeen, Permitted, ProofError, Pull, Write, Written,
};
use super::ownership::{OwnershipProof, ReplyPermit};

/// The lease margin: every write checks, just before it is sent, that the
/// claim lease its proof saw is still valid for at least the write window
/// (a margin plus the write's timeout). An instance that stalled between
/// its ownership check and the write (a long GC pause, a suspended VM, a
/// slow read) therefore never writes once its lease could have been taken
/// over: the write is refused with [`ForgeError::Proof`] and nothing is
/// sent; the next step's renewal then finds the claim lost.
#[derive(Clone, Copy)]
pub(crate) struct LeaseWindow<'a> {
    pub(crate) clock: &'a dyn Clock,
    /// How much lease must be left when a write is sent.
    pub(crate) window: TimeDelta,
}

impl LeaseWindow<'_> {
    /// `Ok` when `permitted` may be sent now: a reply (it answers a
    /// maintainer and needs no claim), or a write whose proof's lease has
    /// the window left.
    pub(crate) fn check(&self, permitted: &Permitted<'_>) -> Result<(), ForgeError> {
        let Some(lease) = permitted.lease() else {
            return Ok(());
        };
        let what = permitted.write().what();
        let now = self.clock.now();
        let left = lease.until.map(|u| u - now);
        match left {
            Some(left) if left >= self.window => Ok(()),
            _ => Err(ForgeError::Proof(ProofError {
                proved: format!(
                    "claim {} with lease until {}",
                    lease.claim_ref,
                    lease
                        .until
                        .map_or_else(|| "(no lease)".into(), |u| u.to_rfc3339())
                ),
                asked: format!(
                    "{what} at {now}: it needs {} of lease left (margin plus write timeout), {}",
                    secs(self.window),
                    left.map_or_else(
                        || "the claim has none".into(),
                        |l| format!("{} are left", secs(l))
                    )
                ),
            })),
        }
    }
}

fn secs(d: TimeDelta) -> String {
    format!("{:.1}s", d.num_milliseconds() as f64 / 1000.0)
}

impl OwnershipProof {
    /// `write` as a permitted write when this proof covers its target: the
    /// branch for ref writes and the pull request from it, the head for a
    /// commit, the pull request for its body, state, comments and labels,
    /// the run for a re-run or cancel, a checked head and pull request for
    /// a dispatch (whose workflow, ref and inputs the permit then names).
    pub fn permit<'a>(&self, write: Write<'a>) -> Result<Permitted<'a>, ProofError> {
        match &write {
            Write::CommitFiles { parent, .. } => self.for_commit(parent)?,
            Write::CommitMerge { head, .. } => self.for_commit(head)?,
            Write::CommitOnBranch {
                branch,
                expected_head,
                ..
            } => self.for_branch_head(branch, expected_head)?,
            Write::CreateBranch { branch, .. }
            | Write::CreateBranchWithCommit { branch, .. }
            | Write::FastForwardBranch { branch, .. }
            | Write::DeleteBranch { branch } => self.for_branch(branch)?,
            Write::CreateDraftPull { head, .. } => self.for_branch(head)?,
            Write::UpdatePullBody { number, .. }
            | Write::ClosePull { number }
            | Write::CreateComment { number, .. }
            | Write::UpdateComment { number, .. }
            | Write::Reply { number, .. }
            | Write::AddLabels { number, .. }
            | Write::RemoveLabel { number, .. } => self.for_pull(*number)?,
            Write::SetDraft { pull, .. } => self.for_pull(pull.number)?,
            Write::Dispatch { .. } => self.for_dispatch()?,
            Write::RerunRun { id } | Write::CancelRun { id } => self.for_run(*id)?,
        }
        Ok(Permitted::new(
            write,
            Some(LeaseSeen {
                claim_ref: self.claim_ref().to_owned(),
                until: self.lease_until(),
            }),
        ))
    }
}

impl ReplyPermit {
    /// A reply of `body` on this permit's pull request.
    pub fn permit<'a>(&self, body: &'a str) -> Permitted<'a> {
        Permitted::new(
            Write::Reply {
                number: self.pull(),
                body,
            },
            None,
        )
    }
}

/// The writes callers make, each one [`Write`] checked by its proof and
/// sent through [`Forge::write`]. Implemented for every forge and for no
/// other type, so no backend can replace a check.
#[async_trait]
pub trait Writes: Forge {
    /// [`Write::CommitFiles`]; the new commit's sha.
    async fn commit_files(
        &self,
        proof: &OwnershipProof,
        parent: &CommitSha,
        files: &[(String, Vec<u8>)],
        message: &str,
    ) -> Result<CommitSha, ForgeError> {
        let write = Write::CommitFiles {
            parent,
            files,
            message,
        };
        match self.write(proof.permit(write)?).await? {
            Written::Commit(sha) => Ok(sha),
            other => Err(other.wrong("a commit")),
        }
    }
    /// [`Write::CommitMerge`]; the new commit's sha.
    async fn commit_merge(
        &self,
        proof: &OwnershipProof,
        head: &CommitSha,
        base: &CommitSha,
        files: &[(String, Vec<u8>)],
        message: &str,
    ) -> Result<CommitSha, ForgeError> {
        let write = Write::CommitMerge {
            head,
            base,
            files,
            message,
        };
        match self.write(proof.permit(write)?).await? {
            Written::Commit(sha) => Ok(sha),
            other => Err(other.wrong("a merge commit")),
        }
    }
    /// [`Write::CommitOnBranch`]; the new commit's sha, which `branch`
    /// now points at.
    async fn commit_on_branch(
        &self,
        proof: &OwnershipProof,
        branch: &str,
        expected_head: &CommitSha,
        files: &[(String, Vec<u8>)],
        message: &str,
    ) -> Result<CommitSha, ForgeError> {
        let write = Write::CommitOnBranch {
            branch,
            expected_head,
            files,
            message,
        };
        match self.write(proof.permit(write)?).await? {
            Written::Commit(sha) => Ok(sha),
            other => Err(other.wrong("a commit on a branch")),
        }
    }
    /// [`Write::CreateBranch`].
    async fn create_branch(
        &self,
        proof: &OwnershipProof,
        branch: &str,
        sha: &CommitSha,
    ) -> Result<(), ForgeError> {
        let write = Write::CreateBranch { branch, sha };
        self.write(proof.permit(write)?)
            .await?
            .done("creating a branch")
    }
    /// [`Write::CreateBranchWithCommit`]; the new commit's sha, which
    /// `branch` now points at.
    async fn create_branch_with_commit(
        &self,
        proof: &OwnershipProof,
        branch: &str,
        base: &CommitSha,
        files: &[(String, Vec<u8>)],
        message: &str,
    ) -> Result<CommitSha, ForgeError> {
        let write = Write::CreateBranchWithCommit {
            branch,
            base,
            files,
            message,
        };
        match self.write(proof.permit(write)?).await? {
            Written::Commit(sha) => Ok(sha),
            other => Err(other.wrong("a branch with a commit")),
        }
    }
    /// [`Write::FastForwardBranch`].
    async fn fast_forward_branch(
        &self,
        proof: &OwnershipProof,
        branch: &str,
        sha: &CommitSha,
    ) -> Result<(), ForgeError> {
        let write = Write::FastForwardBranch { branch, sha };
        self.write(proof.permit(write)?).await?.done("a push")
    }
    /// [`Write::DeleteBranch`].
    async fn delete_branch(&self, proof: &OwnershipProof, branch: &str) -> Result<(), ForgeError> {
        let write = Write::DeleteBranch { branch };
        self.write(proof.permit(write)?)
            .await?
            .done("deleting a branch")
    }
    /// [`Write::CreateDraftPull`]; the new pull request.
    async fn create_draft_pull(
        &self,
        proof: &OwnershipProof,
        title: &str,
        head: &str,
        base: &str,
        body: &str,
    ) -> Result<Pull, ForgeError> {
        let write = Write::CreateDraftPull {
            title,
            head,
            base,
            body,
        };
        match self.write(proof.permit(write)?).await? {
            Written::Pull(p) => Ok(p),
            other => Err(other.wrong("opening a pull request")),
        }
    }
    /// [`Write::UpdatePullBody`].
    async fn update_pull_body(
        &self,
        proof: &OwnershipProof,
        number: PullNumber,
        body: &str,
    ) -> Result<(), ForgeError> {
        let write = Write::UpdatePullBody { number, body };
        self.write(proof.permit(write)?)
            .await?
            .done("editing a pull request")
    }
    /// [`Write::ClosePull`].
    async fn close_pull(
        &self,
        proof: &OwnershipProof,
        number: PullNumber,
    ) -> Result<(), ForgeError> {
        let write = Write::ClosePull { number };
        self.write(proof.permit(write)?)
            .await?
            .done("closing a pull request")
    }
    /// [`Write::SetDraft`].
    async fn set_draft(
        &self,
        proof: &OwnershipProof,
        pull: &Pull,
        draft: bool,
    ) -> Result<(), ForgeError> {
        let write = Write::SetDraft { pull, draft };
        self.write(proof.permit(write)?)
            .await?
            .done("changing draft state")
    }
    /// [`Write::CreateComment`]; the posted comment.
    async fn create_comment(
        &self,
        proof: &OwnershipProof,
        number: PullNumber,
        body: &str,
    ) -> Result<Comment, ForgeError> {
        let write = Write::CreateComment { number, body };
        match self.write(proof.permit(write)?).await? {
            Written::Comment(c) => Ok(c),
            other => Err(other.wrong("a comment")),
        }
    }
    /// [`Write::UpdateComment`]; the edited comment.
    async fn update_comment(
        &self,
        proof: &OwnershipProof,
        number: PullNumber,
        comment: u64,
        body: &str,
    ) -> Result<Comment, ForgeError> {
        let write = Write::UpdateComment {
            number,
            comment,
            body,
        };
        match self.write(proof.permit(write)?).await? {
            Written::Comment(c) => Ok(c),
            other => Err(other.wrong("a comment edit")),
        }
    }
    /// A reply on the pull request of `permit` (maintainer commands, also
    /// after a handoff); the posted comment.
    async fn reply(&self, permit: &ReplyPermit, body: &str) -> Result<Comment, ForgeError> {
        match self.write(permit.permit(body)).await? {
            Written::Comment(c) => Ok(c),
            other => Err(other.wrong("a reply")),
        }
    }
    /// [`Write::AddLabels`].
    async fn add_labels(
        &self,
        proof: &OwnershipProof,
        number: PullNumber,
        labels: &[String],
    ) -> Result<(), ForgeError> {
        let write = Write::AddLabels { number, labels };
        self.write(proof.permit(write)?)
            .await?
            .done("adding a label")
    }
    /// [`Write::RemoveLabel`].
    async fn remove_label(
        &self,
        proof: &OwnershipProof,
        number: PullNumber,
        label: &str,
    ) -> Result<(), ForgeError> {
        let write = Write::RemoveLabel { number, label };
        self.write(proof.permit(write)?)
            .await?
            .done("removing a label")
    }
    /// [`Write::Dispatch`]; the run id and web page when the server
    /// returns run details. [`ForgeError::Ambiguous`] means: search for
    /// the run before dispatching again.
    async fn dispatch_run(
        &self,
        proof: &OwnershipProof,
        workflow: &str,
        git_ref: &str,
        inputs: &Value,
    ) -> Result<Option<(u64, Option<String>)>, ForgeError> {
        let write = Write::Dispatch {
            workflow,
            git_ref,
            inputs,
        };
        match self.write(proof.permit(write)?).await? {
            Written::Dispatched(run) => Ok(run),
            other => Err(other.wrong("a workflow dispatch")),
        }
    }
    /// [`Writes::dispatch_run`] without the page.
    async fn dispatch(
        &self,
        proof: &OwnershipProof,
        workflow: &str,
        git_ref: &str,
        inputs: &Value,
    ) -> Result<Option<u64>, ForgeError> {
        let run = self.dispatch_run(proof, workflow, git_ref, inputs).await?;
        Ok(run.map(|(id, _)| id))
    }
    /// [`Write::RerunRun`].
    async fn rerun_run(&self, proof: &OwnershipProof, id: u64) -> Result<(), ForgeError> {
        let write = Write::RerunRun { id };
        self.write(proof.permit(write)?).await?.done("a re-run")
    }
    /// [`Write::CancelRun`].
    async fn cancel_run(&self, proof: &OwnershipProof, id: u64) -> Result<(), ForgeError> {
        let write = Write::CancelRun { id };
        self.write(proof.permit(write)?).await?.done("a cancel")
    }
}

impl<F: Forge + ?Sized> Writes for F {}
