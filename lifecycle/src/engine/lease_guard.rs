//! The lease margin (issue 11): every write checks, just before it is sent,
//! that the claim lease its proof saw is still valid for at least the write
//! window (a margin plus the write's timeout). An instance that stalled
//! between its ownership check and the write (a long GC pause, a suspended
//! VM, a slow read) therefore never writes once its lease could have been
//! taken over: the write is refused with [`ForgeError::Proof`] and nothing
//! is sent; the next step's renewal then finds the claim lost.

use async_trait::async_trait;
use chrono::TimeDelta;
use klaud_claims::{Clock, RefStore};
use serde_json::Value;

use super::forge::{ArtifactInfo, Comment, Forge, ForgeError, Pull, Run, RunQuery};
use super::ownership::{OwnershipProof, ProofError, ReplyPermit};

/// A forge whose writes first check the proof's lease against the clock.
pub(crate) struct LeaseGuard<'a> {
    pub(crate) inner: &'a dyn Forge,
    pub(crate) clock: &'a dyn Clock,
    /// How much lease must be left when a write is sent.
    pub(crate) window: TimeDelta,
}

impl LeaseGuard<'_> {
    fn check(&self, proof: &OwnershipProof, what: &str) -> Result<(), ForgeError> {
        let now = self.clock.now();
        let left = proof.lease_until().map(|u| u - now);
        match left {
            Some(left) if left >= self.window => Ok(()),
            _ => Err(ForgeError::Proof(ProofError {
                proved: format!(
                    "claim {} with lease until {}",
                    proof.claim_ref(),
                    proof
                        .lease_until()
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

#[async_trait]
impl Forge for LeaseGuard<'_> {
    fn repo(&self) -> String {
        self.inner.repo()
    }
    fn bot_login(&self) -> String {
        self.inner.bot_login()
    }
    fn refs(&self) -> &dyn RefStore {
        // Claim writes are compare-and-swaps on the claim itself.
        self.inner.refs()
    }
    async fn read_file(&self, path: &str, git_ref: &str) -> Result<Option<Vec<u8>>, ForgeError> {
        self.inner.read_file(path, git_ref).await
    }
    async fn find_pull(&self, branch: &str) -> Result<Option<Pull>, ForgeError> {
        self.inner.find_pull(branch).await
    }
    async fn get_pull(&self, number: u64) -> Result<Pull, ForgeError> {
        self.inner.get_pull(number).await
    }
    async fn closed_by(&self, number: u64) -> Result<Option<String>, ForgeError> {
        self.inner.closed_by(number).await
    }
    async fn permission(&self, login: &str) -> Result<crate::commands::Permission, ForgeError> {
        self.inner.permission(login).await
    }
    async fn list_comments(&self, number: u64) -> Result<Vec<Comment>, ForgeError> {
        self.inner.list_comments(number).await
    }
    async fn list_runs(&self, query: &RunQuery) -> Result<Vec<Run>, ForgeError> {
        self.inner.list_runs(query).await
    }
    async fn get_run(&self, id: u64) -> Result<Run, ForgeError> {
        self.inner.get_run(id).await
    }
    async fn list_artifacts(&self, run: u64) -> Result<Vec<ArtifactInfo>, ForgeError> {
        self.inner.list_artifacts(run).await
    }
    async fn download_artifact(&self, id: u64) -> Result<Vec<u8>, ForgeError> {
        self.inner.download_artifact(id).await
    }
    async fn list_jobs(&self, run: u64) -> Result<Vec<super::forge::Job>, ForgeError> {
        self.inner.list_jobs(run).await
    }
    async fn compare_commits(
        &self,
        base: &str,
        head: &str,
    ) -> Result<super::forge::Comparison, ForgeError> {
        self.inner.compare_commits(base, head).await
    }
    async fn commit_files(
        &self,
        proof: &OwnershipProof,
        parent: &str,
        files: &[(String, Vec<u8>)],
        message: &str,
    ) -> Result<String, ForgeError> {
        self.check(proof, "a commit")?;
        self.inner.commit_files(proof, parent, files, message).await
    }
    async fn commit_merge(
        &self,
        proof: &OwnershipProof,
        head: &str,
        base: &str,
        files: &[(String, Vec<u8>)],
        message: &str,
    ) -> Result<String, ForgeError> {
        self.check(proof, "a merge commit")?;
        self.inner
            .commit_merge(proof, head, base, files, message)
            .await
    }
    async fn create_branch(
        &self,
        proof: &OwnershipProof,
        branch: &str,
        sha: &str,
    ) -> Result<(), ForgeError> {
        self.check(proof, "creating a branch")?;
        self.inner.create_branch(proof, branch, sha).await
    }
    async fn fast_forward_branch(
        &self,
        proof: &OwnershipProof,
        branch: &str,
        sha: &str,
    ) -> Result<(), ForgeError> {
        self.check(proof, "a push")?;
        self.inner.fast_forward_branch(proof, branch, sha).await
    }
    async fn delete_branch(&self, proof: &OwnershipProof, branch: &str) -> Result<(), ForgeError> {
        self.check(proof, "deleting a branch")?;
        self.inner.delete_branch(proof, branch).await
    }
    async fn create_draft_pull(
        &self,
        proof: &OwnershipProof,
        title: &str,
        head: &str,
        base: &str,
        body: &str,
    ) -> Result<Pull, ForgeError> {
        self.check(proof, "opening a pull request")?;
        self.inner
            .create_draft_pull(proof, title, head, base, body)
            .await
    }
    async fn update_pull_body(
        &self,
        proof: &OwnershipProof,
        number: u64,
        body: &str,
    ) -> Result<(), ForgeError> {
        self.check(proof, "editing a pull request")?;
        self.inner.update_pull_body(proof, number, body).await
    }
    async fn close_pull(&self, proof: &OwnershipProof, number: u64) -> Result<(), ForgeError> {
        self.check(proof, "closing a pull request")?;
        self.inner.close_pull(proof, number).await
    }
    async fn set_draft(
        &self,
        proof: &OwnershipProof,
        pull: &Pull,
        draft: bool,
    ) -> Result<(), ForgeError> {
        self.check(proof, "changing draft state")?;
        self.inner.set_draft(proof, pull, draft).await
    }
    async fn create_comment(
        &self,
        proof: &OwnershipProof,
        number: u64,
        body: &str,
    ) -> Result<Comment, ForgeError> {
        self.check(proof, "a comment")?;
        self.inner.create_comment(proof, number, body).await
    }
    async fn update_comment(
        &self,
        proof: &OwnershipProof,
        number: u64,
        comment: u64,
        body: &str,
    ) -> Result<Comment, ForgeError> {
        self.check(proof, "a comment edit")?;
        self.inner
            .update_comment(proof, number, comment, body)
            .await
    }
    async fn reply(&self, permit: &ReplyPermit, body: &str) -> Result<Comment, ForgeError> {
        // A reply answers a maintainer and needs no claim.
        self.inner.reply(permit, body).await
    }
    async fn add_labels(
        &self,
        proof: &OwnershipProof,
        number: u64,
        labels: &[String],
    ) -> Result<(), ForgeError> {
        self.check(proof, "adding a label")?;
        self.inner.add_labels(proof, number, labels).await
    }
    async fn remove_label(
        &self,
        proof: &OwnershipProof,
        number: u64,
        label: &str,
    ) -> Result<(), ForgeError> {
        self.check(proof, "removing a label")?;
        self.inner.remove_label(proof, number, label).await
    }
    async fn dispatch(
        &self,
        proof: &OwnershipProof,
        workflow: &str,
        git_ref: &str,
        inputs: &Value,
    ) -> Result<Option<u64>, ForgeError> {
        self.check(proof, "a workflow dispatch")?;
        self.inner.dispatch(proof, workflow, git_ref, inputs).await
    }
    async fn dispatch_run(
        &self,
        proof: &OwnershipProof,
        workflow: &str,
        git_ref: &str,
        inputs: &Value,
    ) -> Result<Option<(u64, Option<String>)>, ForgeError> {
        self.check(proof, "a workflow dispatch")?;
        self.inner
            .dispatch_run(proof, workflow, git_ref, inputs)
            .await
    }
    async fn rerun_run(&self, proof: &OwnershipProof, id: u64) -> Result<(), ForgeError> {
        self.check(proof, "a re-run")?;
        self.inner.rerun_run(proof, id).await
    }
    async fn cancel_run(&self, proof: &OwnershipProof, id: u64) -> Result<(), ForgeError> {
        self.check(proof, "a cancel")?;
        self.inner.cancel_run(proof, id).await
    }
}
