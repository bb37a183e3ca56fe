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
//! engine version it ran), as the engine's own triage is, so an entry
//! scoped to vLLM matches a vLLM family's job here too: the family comes
//! from the run (its title or branch names the candidate), its framework
//! and runner from the master configs at the base (read only when a run
//! is new), and its image from the family's master file at a commit of
//! the candidate on GitHub (see `candidate_image`). Every instance reads
//! the same commit, so a candidate another instance ran gets the same
//! entry here as there; this instance's record of the candidate only
//! spares the read when it names the run's head. A read that failed
//! leaves the run's version unknown (an entry scoped to an engine version
//! does not match) and the run is read again by a later pass.

use chrono::{DateTime, Utc};
use klaud_claims::CommitSha;
use klaud_github::{Github, GithubError, RunFilter, RunInfo};
use klaud_lifecycle::BoxFuture;
use klaud_lifecycle::engine::{Journal, RunConclusion};
use klaud_lifecycle::job_log::MAX_JOB_LOG_BYTES;
use klaud_lifecycle::playbook::sick::{
    BrokenRunners, MAX_FAILURES_PER_RUN, NodeFailure, RunFailures, RunFamily, SickNodeRow,
    SickWindow, run_family, settles_run, sick_nodes,
};
use klaud_lifecycle::playbook::{
    JobContext, JobLogView, Playbook, family_context, log_node, triage,
};
use klaud_planner::repo::{Family, RepoOptions, Repository};
use klaud_store::Store;

pub use klaud_lifecycle::playbook::sick::WINDOW;
/// Most pages of 100 failed runs read in one pass.
const MAX_PAGES: usize = 3;
/// Most runs not yet kept whose jobs are read in one pass; the rest are
/// read by the next passes, so a first pass over a busy repository does
/// not spend the budget at once.
const MAX_NEW_RUNS: usize = 20;
/// Largest master file read at a run's head (InferenceX's largest is about
/// 320 KB); a bigger one leaves the run's engine version unknown.
const MAX_MASTER_BYTES: usize = 4 << 20;

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
                let (scope, settled) =
                    scope_of(forge, journal, base.as_ref(), &family, run, sources.repo).await;
                let failures = RunFailures {
                    run: run.id,
                    attempt: run.run_attempt,
                    family: family.family,
                    family_key: family.key,
                    at,
                    failures: failed_jobs(forge, run.id, &book, &scope).await?,
                    // A base or a head that could not be read is tried again.
                    scoped: base.is_some() && settled,
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
/// the engine version of the candidate's image, derived as the engine's
/// own triage derives it. The second value is false when GitHub could not
/// be read for a reason that may pass (the run is then read again by a
/// later pass).
async fn scope_of(
    forge: &Github,
    journal: &dyn Journal,
    base: Option<&Repository>,
    family: &RunFamily,
    run: &RunInfo,
    options: &RepoOptions,
) -> (JobContext, bool) {
    let at_base = base.and_then(|r| r.family(&family.family).ok());
    let recorded = match journal.load(&family.candidate).await {
        Ok(Some(rec))
            if rec
                .head
                .as_ref()
                .is_some_and(|h| h.as_str().eq_ignore_ascii_case(&run.head_sha)) =>
        {
            Some(rec.image)
        }
        _ => None,
    };
    let (image, settled) = match (recorded, base.zip(at_base)) {
        (Some(image), _) => (Some(image), true),
        (None, Some((base, at_base))) => {
            match candidate_image(forge, base, at_base, family, run, options).await {
                Ok(image) => (image, true),
                Err(e) => {
                    tracing::warn!(family = %family.family, run = run.id, error = %e,
                        "sick nodes: the candidate's image could not be read; its engine version is unknown until a later pass");
                    (None, false)
                }
            }
        }
        (None, None) => (None, true),
    };
    (family_context(at_base, image.as_deref(), None), settled)
}

/// The image of `family`'s candidate that `run` tested, as every instance
/// reads it from GitHub: the family's master file at a commit of the
/// candidate, opened as the planner opens a checkout. The commit is the
/// run's head when the run is on the candidate's branch (a sweep); a smoke
/// is dispatched on another branch with the candidate's head as an input
/// GitHub does not list, so its candidate is read at the branch, or at its
/// pull request's head once the branch is gone. An image is taken only
/// when it is the candidate's (its id names the family and the image), so
/// a moved branch or base cannot lend another image; a merged candidate is
/// the base's image, with no read. `Ok(None)` when no read can tell (the
/// commit, the file or the family is not there); `Err` for a read that may
/// succeed later.
async fn candidate_image(
    forge: &Github,
    base: &Repository,
    family: &Family,
    run_family: &RunFamily,
    run: &RunInfo,
    options: &RepoOptions,
) -> Result<Option<String>, GithubError> {
    let is_candidates = |image: &String| {
        klaud_planner::identity::candidate_id(&family.id, image) == run_family.candidate
    };
    let merged = family.image().normalized();
    if is_candidates(&merged) {
        return Ok(Some(merged));
    }
    let path = format!("{}{}", base.prefix(), family.file);
    let read = async |at: &str| -> Result<Option<String>, GithubError> {
        Ok(master_at(forge, &path, at)
            .await?
            .and_then(|bytes| master_image(&path, &bytes, &family.family, options))
            .filter(is_candidates))
    };
    let branch = klaud_lifecycle::engine::branch_name(&run_family.candidate);
    if run.head_branch.as_deref() == Some(branch.as_str()) {
        // A hostile or odd head would be read at a ref whose answer moves.
        return match CommitSha::parse(&run.head_sha) {
            Ok(head) => read(head.as_str()).await,
            Err(_) => Ok(None),
        };
    }
    if let Some(image) = read(&branch).await? {
        return Ok(Some(image));
    }
    match forge.find_pull_for_head(&branch, "all").await {
        Ok(Some(pull)) => match CommitSha::parse(&pull.head_sha) {
            Ok(head) => read(head.as_str()).await,
            Err(_) => Ok(None),
        },
        Ok(None) => Ok(None),
        Err(e) if settled(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether a read's error says what every later read would say.
fn settled(e: &GithubError) -> bool {
    matches!(
        e,
        GithubError::NotFound { .. } | GithubError::Decode { .. } | GithubError::Rejected { .. }
    )
}

/// The master file at `path` at `at` (a commit or the candidate's branch);
/// `None` when it is not there, or too large to be a master.
async fn master_at(forge: &Github, path: &str, at: &str) -> Result<Option<Vec<u8>>, GithubError> {
    let bytes = match forge.get_contents(path, at).await {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(None),
        Err(e) if settled(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    if bytes.len() > MAX_MASTER_BYTES {
        tracing::warn!(
            path,
            at,
            bytes = bytes.len(),
            max = MAX_MASTER_BYTES,
            "sick nodes: a master file is too large to read; the run's engine version is unknown"
        );
        return Ok(None);
    }
    Ok(Some(bytes))
}

/// The normalised image of `family` in the master file at `path` with
/// `bytes`, read by the planner's own rules from a checkout holding only
/// that file; `None` when the family is not readable there.
fn master_image(path: &str, bytes: &[u8], family: &str, options: &RepoOptions) -> Option<String> {
    let dir = tempfile::tempdir()
        .inspect_err(|e| tracing::warn!(error = %e, "sick nodes: no temporary directory"))
        .ok()?;
    let target = dir.path().join(path);
    let written = target
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(&target, bytes));
    if let Err(e) = written {
        tracing::warn!(path, error = %e, "sick nodes: a master file could not be written to read it");
        return None;
    }
    let repository = Repository::open_with(dir.path(), options).ok()?;
    let found = repository.family(family).ok()?;
    Some(found.image().normalized())
}

/// The failed jobs of run `run` with a known node, each log read once
/// (bounded) and triaged with `scope` and the job's runner, by the
/// engine's rule of which logs can tell anything (`BrokenRunners`). A log
/// GitHub no longer has leaves its job out.
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
    let mut broken = BrokenRunners::default();
    for job in failed {
        let runner = job.runner_name.as_deref();
        if broken.skips(runner) {
            continue;
        }
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
        let failure = NodeFailure::of(&t, node.as_deref());
        broken.note(runner, &t, failure.as_ref());
        out.extend(failure);
        if settles_run(&t, book, &ctx) {
            break;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFERENCEX_PLAYBOOK: &str = include_str!("../../../configs/inferencex-playbook.yaml");
    const DEMO_MASTER: &str = include_str!("../../../configs/demo/configs/nvidia-master.yaml");
    const MASTER: &str = "configs/nvidia-master.yaml";

    fn demo() -> Repository {
        Repository::open(concat!(env!("CARGO_MANIFEST_DIR"), "/../../configs/demo"))
            .expect("the demo repository")
    }

    /// A run's scope: the family's framework and hardware from the base,
    /// and the engine version of the image its master names at the run's
    /// head, so an entry scoped to a version range matches the candidate's
    /// run though the base still names the old image.
    #[test]
    fn a_runs_engine_version_is_the_one_its_head_names() {
        let repo = demo();
        let family = repo.family("demo-fp4-b200-vllm").expect("family");
        assert_eq!(family.image().tag(), Some("v0.25.0"));
        let book = Playbook::parse("inferencex", INFERENCEX_PLAYBOOK).expect("parses");
        let oom = JobLogView::new(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
        );

        let bumped = DEMO_MASTER.replacen(
            "demo-fp4-b200-vllm:\n  image: vllm/vllm-openai:v0.25.0",
            "demo-fp4-b200-vllm:\n  image: vllm/vllm-openai:v0.21.0",
            1,
        );
        assert_ne!(bumped, DEMO_MASTER);
        let options = RepoOptions::default();
        let image = master_image(MASTER, bumped.as_bytes(), &family.family, &options);
        assert_eq!(image.as_deref(), Some("vllm/vllm-openai:v0.21.0"));
        let scope = family_context(Some(family), image.as_deref(), None);
        assert_eq!(scope.framework.as_deref(), Some("vllm"));
        assert_eq!(scope.hardware.as_deref(), Some("b200"));
        assert_eq!(scope.engine_version.as_deref(), Some("v0.21.0"));
        assert_eq!(
            triage(&oom, &book, &scope).entry(),
            Some("vllm-oom-at-load")
        );

        // The base's own image is outside the entry's range.
        let at_base = master_image(MASTER, DEMO_MASTER.as_bytes(), &family.id, &options);
        let scope = family_context(Some(family), at_base.as_deref(), None);
        assert_eq!(scope.engine_version.as_deref(), Some("v0.25.0"));
        assert_eq!(triage(&oom, &book, &scope).entry(), None);

        // No version without the image.
        let unknown = family_context(Some(family), None, None);
        assert_eq!(unknown.engine_version, None);
        assert_eq!(triage(&oom, &book, &unknown).entry(), None);
    }

    /// What a head holds is outside input: a family missing there, a
    /// broken entry or a file that is no YAML leaves the version unknown,
    /// and a path from the base with the `inferencex-e2e/` prefix is read
    /// where the planner reads it.
    #[test]
    fn a_head_without_a_readable_family_names_no_image() {
        let options = RepoOptions::default();
        let family = "configs/nvidia-master.yaml:demo-fp4-b200-vllm";
        let gone = DEMO_MASTER.replace("demo-fp4-b200-vllm:", "renamed-b200-vllm:");
        assert_eq!(
            master_image(MASTER, gone.as_bytes(), family, &options),
            None
        );
        let broken = DEMO_MASTER.replacen(
            "image: vllm/vllm-openai:v0.25.0",
            "image: [not, an, image]",
            1,
        );
        assert_eq!(
            master_image(MASTER, broken.as_bytes(), family, &options),
            None
        );
        assert_eq!(master_image(MASTER, b"\xff\x00: [", family, &options), None);
        assert_eq!(master_image(MASTER, b"", family, &options), None);
        let prefixed = format!("inferencex-e2e/{MASTER}");
        assert_eq!(
            master_image(&prefixed, DEMO_MASTER.as_bytes(), family, &options).as_deref(),
            Some("vllm/vllm-openai:v0.25.0")
        );
    }
}
