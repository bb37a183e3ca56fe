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
use chrono::{DateTime, Utc};
use klaud_claims::{CommitSha, PullNumber};
use serde_json::Value;

use super::forge::{Comment, Forge, ForgeError, Pull};
use super::ownership::{OwnershipProof, ProofError, ReplyPermit};

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
    /// Creates `refs/heads/<branch>` at `sha`.
    CreateBranch { branch: &'a str, sha: &'a CommitSha },
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
    /// The write in words, for the lease guard's refusals.
    pub fn what(&self) -> &'static str {
        match self {
            Write::CommitFiles { .. } => "a commit",
            Write::CommitMerge { .. } => "a merge commit",
            Write::CreateBranch { .. } => "creating a branch",
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
    fn wrong(self, asked: &str) -> ForgeError {
        ForgeError::Other(format!("the forge answered {self:?} to {asked}"))
    }

    fn done(self, asked: &str) -> Result<(), ForgeError> {
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
    /// The write to send.
    pub fn write(&self) -> &Write<'a> {
        &self.write
    }

    /// The claim lease the write was proved under (`None`: it needs none).
    pub fn lease(&self) -> Option<&LeaseSeen> {
        self.lease.as_ref()
    }
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
            Write::CreateBranch { branch, .. }
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
        Ok(Permitted {
            write,
            lease: Some(LeaseSeen {
                claim_ref: self.claim_ref().to_owned(),
                until: self.lease_until(),
            }),
        })
    }
}

impl ReplyPermit {
    /// A reply of `body` on this permit's pull request.
    pub fn permit<'a>(&self, body: &'a str) -> Permitted<'a> {
        Permitted {
            write: Write::Reply {
                number: self.pull(),
                body,
            },
            lease: None,
        }
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
