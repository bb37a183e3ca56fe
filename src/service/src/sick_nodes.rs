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
//!
//! Each run is triaged with its family's scope (framework, hardware, the
//! candidate's engine version), as the engine's own triage is, so an entry
//! scoped to vLLM matches a vLLM family's job here too: the family comes
//! from the run (its title or branch names the candidate), its framework
//! and runner from the master configs at the base (read only when a run
//! is new), and its image from this instance's record of the candidate,
//! else from the base once the candidate merged there. A run whose image
//! is not known matches no entry scoped to an engine version.

use chrono::{DateTime, Utc};
use klaud_github::{Github, GithubError, RunFilter, RunInfo};
use klaud_lifecycle::BoxFuture;
use klaud_lifecycle::engine::{Journal, RunConclusion};
use klaud_lifecycle::job_log::MAX_JOB_LOG_BYTES;
use klaud_lifecycle::playbook::sick::{
    MAX_FAILURES_PER_RUN, NodeFailure, RunFailures, RunFamily, SickNodeRow, SickWindow, run_family,
    sick_nodes,
};
use klaud_lifecycle::playbook::{
    JobContext, JobLogView, Playbook, family_context, log_node, triage,
};
use klaud_planner::repo::{RepoOptions, Repository};
use klaud_store::Store;

pub use klaud_lifecycle::playbook::sick::WINDOW;
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

/// Where a pass reads what it triages new runs with.
#[derive(Debug, Clone, Copy)]
pub struct Sources<'f> {
    /// The base branch.
    pub base_branch: &'f str,
    /// The playbook's path on it (empty: none).
    pub playbook: &'f str,
    /// How its checkout is read (the configured recipe roots).
    pub repo: &'f RepoOptions,
    /// The store whose blob cache the checkout reads through, if any.
    pub cache: Option<&'f Store>,
}

/// Reads Klaud's failed runs of the last [`WINDOW`] before `now` and
/// returns the sick nodes among them, triaging each failed job not kept
/// yet with the playbook and the family's scope from the base branch
/// (both read only when there is such a job; an empty path, a missing or a
/// broken playbook leaves every failure unknown, by its own signature).
/// The runs the table was made from are kept in `journal`, for reports
/// written before the next pass.
pub fn gather<'f>(
    forge: &'f Github,
    journal: &'f dyn Journal,
    now: DateTime<Utc>,
    sources: Sources<'f>,
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
                Ok(Some(f)) if f.scoped => kept.push(f),
                // Kept before runs were triaged with their family's scope.
                Ok(Some(_)) => unread.push((run, at, family)),
                Ok(None) => unread.push((run, at, family)),
                Err(e) => {
                    tracing::warn!(run = run.id, error = %e, "kept failures of a run unreadable; reading it again");
                    unread.push((run, at, family));
                }
            }
        }
        let pending = unread.len().saturating_sub(MAX_NEW_RUNS);
        if !unread.is_empty() {
            let book = playbook(forge, sources.base_branch, sources.playbook).await;
            let base = base_families(forge, sources).await;
            for (run, at, family) in unread.into_iter().take(MAX_NEW_RUNS) {
                let scope = scope_of(journal, base.as_ref(), &family).await;
                let failures = RunFailures {
                    run: run.id,
                    attempt: run.run_attempt,
                    family: family.family,
                    family_key: family.key,
                    at,
                    failures: failed_jobs(forge, run.id, &book, &scope).await?,
                    // A base that could not be read is tried again.
                    scoped: base.is_some(),
                };
                if let Err(e) = journal.record_run_failures(&failures).await {
                    tracing::warn!(run = run.id, error = %e, "could not keep a run's failures; the next pass reads it again");
                }
                kept.push(failures);
            }
        }
        let rows = sick_nodes(&kept);
        if let Err(e) = journal.record_sick_window(&SickWindow { runs: kept }).await {
            tracing::warn!(error = %e, "could not keep the runs of the sick-nodes table; reports judge a node by their own run");
        }
        Ok(SickNodes { rows, pending })
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

/// The families at the base, for the playbook's scopes; `None` when the
/// base cannot be read (logged; the runs are triaged without scope and
/// read again next pass).
async fn base_families(forge: &Github, sources: Sources<'_>) -> Option<Repository> {
    match crate::wave_adapters::base_checkout(
        forge,
        sources.base_branch,
        sources.repo,
        sources.cache,
    )
    .await
    {
        Ok((_, _dir, repository)) => Some(repository),
        Err(e) => {
            tracing::warn!(error = %e, "sick nodes: the base's families could not be read; failures are triaged without their scope");
            None
        }
    }
}

/// What the triage of a run of `family`'s candidate knows (the runner is
/// each job's own): the family's framework and hardware at the base, and
/// the candidate's engine version when its image is known.
async fn scope_of(
    journal: &dyn Journal,
    base: Option<&Repository>,
    family: &RunFamily,
) -> JobContext {
    let at_base = base.and_then(|r| r.family(&family.family).ok());
    let image = match journal.load(&family.candidate).await {
        Ok(Some(rec)) => Some(rec.image),
        _ => at_base.and_then(|f| {
            let image = f.image().normalized();
            (klaud_planner::identity::candidate_id(&f.id, &image) == family.candidate)
                .then_some(image)
        }),
    };
    family_context(at_base, image.as_deref(), None)
}

/// The failed jobs of run `run` with a known node, each log read once
/// (bounded) and triaged with `scope` and the job's runner. A log GitHub
/// no longer has leaves its job out.
async fn failed_jobs(
    forge: &Github,
    run: u64,
    book: &Playbook,
    scope: &JobContext,
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
            ..scope.clone()
        };
        let t = triage(&view, book, &ctx);
        let node = log_node(&view).or_else(|| job.runner_name.clone());
        out.extend(NodeFailure::of(&t, node.as_deref()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use klaud_lifecycle::engine::{CandidateRecord, MemoryJournal};
    use klaud_planner::identity::candidate_id;

    const INFERENCEX_PLAYBOOK: &str = include_str!("../../../configs/inferencex-playbook.yaml");

    fn demo() -> Repository {
        Repository::open(concat!(env!("CARGO_MANIFEST_DIR"), "/../../configs/demo"))
            .expect("the demo repository")
    }

    fn record(candidate: &str, family: &str, image: &str) -> CandidateRecord {
        serde_json::from_value(serde_json::json!({
            "candidate": candidate, "family": family, "key": "k",
            "old_image": "a:1", "image": image, "owner_run": 1, "base_branch": "main",
            "base_sha": "0000000000000000000000000000000000000000",
            "branch": format!("klaud/auto-{candidate}"), "step": "smoke", "claim": null,
            "head": null, "pending_commit": null, "pull": null, "pull_url": null,
            "frozen": null, "attempts": [], "repairs": 0, "sweep_requested_at": null,
            "sweep": null, "ending": null, "intent": null,
            "updated_at": "2026-01-01T00:00:00Z"
        }))
        .expect("record")
    }

    /// A run's scope: the family's framework and hardware from the base,
    /// and the candidate's engine version from this instance's record, or
    /// from the base once the candidate merged there; otherwise none, and
    /// an entry scoped to a version range does not match.
    #[tokio::test]
    async fn a_runs_scope_is_its_familys_with_the_candidates_engine_version_when_known() {
        let repo = demo();
        let family = repo.family("demo-fp4-b200-vllm").expect("family").clone();
        let image = "vllm/vllm-openai:v0.21.0";
        let run = RunFamily {
            family: family.id.clone(),
            key: None,
            candidate: candidate_id(&family.id, image),
        };
        let book = Playbook::parse("inferencex", INFERENCEX_PLAYBOOK).expect("parses");
        let oom = JobLogView::new(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
        );
        let journal = MemoryJournal::new();

        let unknown = scope_of(&journal, Some(&repo), &run).await;
        assert_eq!(unknown.framework.as_deref(), Some("vllm"));
        assert_eq!(unknown.hardware.as_deref(), Some("b200"));
        assert_eq!(unknown.engine_version, None);
        assert_eq!(triage(&oom, &book, &unknown).entry(), None);

        journal
            .save(&record(&run.candidate, &family.family, image))
            .await
            .expect("saved");
        let known = scope_of(&journal, Some(&repo), &run).await;
        assert_eq!(known.engine_version.as_deref(), Some("v0.21.0"));
        assert_eq!(
            triage(&oom, &book, &known).entry(),
            Some("vllm-oom-at-load")
        );

        let merged = RunFamily {
            candidate: candidate_id(&family.id, &family.image().normalized()),
            ..run.clone()
        };
        let at_base = scope_of(&MemoryJournal::new(), Some(&repo), &merged).await;
        assert_eq!(at_base.engine_version.as_deref(), Some("v0.25.0"));

        // A base that could not be read: nothing scoped holds.
        let blind = scope_of(&MemoryJournal::new(), None, &run).await;
        assert_eq!(blind, JobContext::default());
    }
}
