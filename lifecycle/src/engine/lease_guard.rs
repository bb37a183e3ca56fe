//! The lease margin: every write checks, just before it is sent,
//! that the claim lease its proof saw is still valid for at least the write
//! window (a margin plus the write's timeout). An instance that stalled
//! between its ownership check and the write (a long GC pause, a suspended
//! VM, a slow read) therefore never writes once its lease could have been
//! taken over: the write is refused with [`ForgeError::Proof`] and nothing
//! is sent; the next step's renewal then finds the claim lost.

use async_trait::async_trait;
use chrono::TimeDelta;
use klaud_claims::{Clock, PullNumber, RefStore};

use super::forge::{
    ArtifactInfo, Comment, Forge, ForgeError, LeaseSeen, Permitted, ProofError, Pull, Run,
    RunQuery, Written,
};

/// A forge whose writes first check the proof's lease against the clock.
pub(crate) struct LeaseGuard<'a> {
    pub(crate) inner: &'a dyn Forge,
    pub(crate) clock: &'a dyn Clock,
    /// How much lease must be left when a write is sent.
    pub(crate) window: TimeDelta,
}

impl LeaseGuard<'_> {
    fn check(&self, lease: &LeaseSeen, what: &str) -> Result<(), ForgeError> {
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
    async fn get_pull(&self, number: PullNumber) -> Result<Pull, ForgeError> {
        self.inner.get_pull(number).await
    }
    async fn closed_by(&self, number: PullNumber) -> Result<Option<String>, ForgeError> {
        self.inner.closed_by(number).await
    }
    async fn own_pulls_active_since(
        &self,
        since: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<PullNumber>, ForgeError> {
        self.inner.own_pulls_active_since(since).await
    }
    async fn permission(&self, login: &str) -> Result<crate::engine::Permission, ForgeError> {
        self.inner.permission(login).await
    }
    async fn list_comments(&self, number: PullNumber) -> Result<Vec<Comment>, ForgeError> {
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
    async fn job_log(&self, job: u64, limit: usize) -> Result<Vec<u8>, ForgeError> {
        self.inner.job_log(job, limit).await
    }
    async fn compare_commits(
        &self,
        base: &str,
        head: &str,
    ) -> Result<super::forge::Comparison, ForgeError> {
        self.inner.compare_commits(base, head).await
    }
    async fn write(&self, permitted: Permitted<'_>) -> Result<Written, ForgeError> {
        // A reply answers a maintainer and needs no claim.
        if let Some(lease) = permitted.lease() {
            self.check(lease, permitted.write().what())?;
        }
        self.inner.write(permitted).await
    }
}
