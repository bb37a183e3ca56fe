//! Sick nodes across candidates, gathered from GitHub once per pass: the
//! failed runs of Klaud's own smokes and sweeps over a window, their failed
//! jobs' logs triaged with the playbook on the base branch, grouped by node
//! and signature (`klaud_lifecycle::playbook::sick` holds the rule).
//!
//! What a completed run attempt's jobs said never changes, so it is kept in
//! the journal's cache by run and attempt: a steady pass costs one
//! conditional list of the runs (a free 304 while no run failed), and no
//! job list or log. The cache is only a cache: a lost store costs reading
//! those runs again, and gives the same table, as another instance reading
//! the same runs does. A cached run keeps the triage of the playbook in
//! force when it was first read.

use chrono::{DateTime, TimeDelta, Utc};
use klaud_github::{Github, GithubError, RunFilter, RunInfo};
use klaud_lifecycle::BoxFuture;
use klaud_lifecycle::engine::{Journal, RunConclusion};
use klaud_lifecycle::job_log::MAX_JOB_LOG_BYTES;
use klaud_lifecycle::playbook::sick::{
    MAX_FAILURES_PER_RUN, NodeFailure, RunFailures, SickNodeRow, run_family, sick_nodes,
};
use klaud_lifecycle::playbook::{JobContext, JobLogView, Playbook, log_node, triage};

/// How far back failed runs count.
pub const WINDOW: TimeDelta = TimeDelta::days(14);
/// Most pages of 100 failed runs read in one pass.
const MAX_PAGES: usize = 3;
/// Most runs not yet kept whose jobs are read in one pass; the rest are
/// read by the next passes, so a first pass over a busy repository does
/// not spend the budget at once.
const MAX_NEW_RUNS: usize = 20;

/// Why the table could not be gathered.
#[derive(Debug, thiserror::Error)]
pub enum SickNodesError {
    /// Klaud's failed runs could not be listed.
    #[error("listing Klaud's failed runs: {0}")]
    List(#[source] GithubError),
    /// A run's jobs could not be listed.
    #[error("listing the jobs of run {run}: {source}")]
    Jobs {
        /// The run.
        run: u64,
        /// Why.
        #[source]
        source: GithubError,
    },
    /// A failed job's log could not be read.
    #[error("reading the log of job {job}: {source}")]
    Log {
        /// The job.
        job: u64,
        /// Why.
        #[source]
        source: GithubError,
    },
}

/// The sick-nodes table of one pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SickNodes {
    /// One row per sick node and signature.
    pub rows: Vec<SickNodeRow>,
    /// Failed runs in the window not read yet (the next pass reads them).
    pub pending: usize,
}

/// Reads Klaud's failed runs of the last [`WINDOW`] before `now` and
/// returns the sick nodes among them, triaging each failed job not kept
/// yet with the playbook at `playbook_path` on `base_branch` (read only
/// when there is such a job; an empty path, a missing or a broken playbook
/// leaves every failure unknown, by its own signature).
pub fn gather<'f>(
    forge: &'f Github,
    journal: &'f dyn Journal,
    now: DateTime<Utc>,
    base_branch: &'f str,
    playbook_path: &'f str,
) -> BoxFuture<'f, Result<SickNodes, SickNodesError>> {
    Box::pin(async move {
        let since = now - WINDOW;
        let filter = RunFilter {
            actor: Some(forge.bot_login().to_owned()),
            status: Some("failure".to_owned()),
            ..RunFilter::default()
        };
        let runs = forge
            .recent_runs(&filter, since, MAX_PAGES)
            .await
            .map_err(SickNodesError::List)?;
        let mut kept = Vec::new();
        let mut unread = Vec::new();
        for run in &runs {
            let Some(at) = created(run).filter(|at| *at >= since) else {
                continue;
            };
            let completed = run.status.as_ref().is_some_and(|s| s.is_completed());
            if !completed || run.conclusion != Some(RunConclusion::Failure) {
                continue;
            }
            let Some(family) = run_family(run.display_title.as_deref(), run.head_branch.as_deref())
            else {
                continue;
            };
            match journal.run_failures(run.id, run.run_attempt).await {
                Ok(Some(f)) => kept.push(f),
                Ok(None) => unread.push((run, at, family)),
                Err(e) => {
                    tracing::warn!(run = run.id, error = %e, "kept failures of a run unreadable; reading it again");
                    unread.push((run, at, family));
                }
            }
        }
        let pending = unread.len().saturating_sub(MAX_NEW_RUNS);
        if !unread.is_empty() {
            let book = playbook(forge, base_branch, playbook_path).await;
            for (run, at, family) in unread.into_iter().take(MAX_NEW_RUNS) {
                let failures = RunFailures {
                    run: run.id,
                    attempt: run.run_attempt,
                    family: family.family,
                    family_key: family.key,
                    at,
                    failures: failed_jobs(forge, run.id, &book).await?,
                };
                if let Err(e) = journal.record_run_failures(&failures).await {
                    tracing::warn!(run = run.id, error = %e, "could not keep a run's failures; the next pass reads it again");
                }
                kept.push(failures);
            }
        }
        Ok(SickNodes {
            rows: sick_nodes(&kept),
            pending,
        })
    })
}

fn created(run: &RunInfo) -> Option<DateTime<Utc>> {
    let at = run.created_at.as_deref()?;
    DateTime::parse_from_rfc3339(at)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// The playbook on the base branch; empty when there is none or it does
/// not parse (its errors are `klaud doctor`'s to show).
async fn playbook(forge: &Github, base_branch: &str, path: &str) -> Playbook {
    if path.is_empty() {
        return Playbook::default();
    }
    let bytes = match forge.get_contents(path, base_branch).await {
        Ok(Some(b)) => b,
        Ok(None) => return Playbook::default(),
        Err(e) => {
            tracing::warn!(path, error = %e, "the playbook could not be read; failures stay unknown");
            return Playbook::default();
        }
    };
    Playbook::parse(path, &String::from_utf8_lossy(&bytes)).unwrap_or_else(|e| {
        tracing::warn!(path, error = %e, "the playbook does not parse; failures stay unknown");
        Playbook::default()
    })
}

/// The failed jobs of run `run` with a known node, each log read once
/// (bounded). A log GitHub no longer has leaves its job out.
async fn failed_jobs(
    forge: &Github,
    run: u64,
    book: &Playbook,
) -> Result<Vec<NodeFailure>, SickNodesError> {
    let jobs = forge
        .list_jobs(run)
        .await
        .map_err(|source| SickNodesError::Jobs { run, source })?;
    let mut out = Vec::new();
    let failed = jobs
        .iter()
        .filter(|j| j.conclusion.as_ref().is_some_and(|c| c.counts_as_failure()))
        .take(MAX_FAILURES_PER_RUN);
    for job in failed {
        let log = match forge.job_log(job.id, MAX_JOB_LOG_BYTES).await {
            Ok(l) => l,
            Err(GithubError::NotFound { .. }) => continue,
            Err(source) => {
                return Err(SickNodesError::Log {
                    job: job.id,
                    source,
                });
            }
        };
        let view = JobLogView::new(&String::from_utf8_lossy(&log));
        let ctx = JobContext {
            runner_name: job.runner_name.clone(),
            ..JobContext::default()
        };
        let t = triage(&view, book, &ctx);
        let node = log_node(&view).or_else(|| job.runner_name.clone());
        out.extend(NodeFailure::of(&t, node.as_deref()));
    }
    Ok(out)
}
