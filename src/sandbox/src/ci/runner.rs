//! The runner task: picks up queued workflow runs from the simulator's
//! state, moves them to `in_progress` and completes them per the script.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use chrono::Utc;
use serde_json::Value;
use tokio::time::Instant;

use super::jobs::{self, PlannedJob};
use super::points::{self, FamilySpec};
use super::results::{self, Uploads};
use super::script::{Conclusion, RunKind, Script, Step};
use super::{CiEvent, FULL_SWEEP_LABELS};
use crate::github::GithubState;
use crate::github::state::{Artifact, Repo, zip_files};

/// Directory holding the project when the repository uses the new layout.
const E2E_PREFIX: &str = "inferencex-e2e";
const CHANGELOG: &str = "perf-changelog.yaml";
const SMOKE_WORKFLOW: &str = "e2e-tests.yml";
const SWEEP_WORKFLOW: &str = "run-sweep.yml";
const MANIFEST_ARTIFACT: &str = "klaud-sweep-manifest";

/// What the runner copies out of the state for one newly queued run, so the
/// YAML work happens without holding the simulator's lock.
struct Snapshot {
    repo: String,
    run_id: u64,
    run_attempt: u64,
    kind: RunKind,
    head_sha: String,
    inputs: Value,
    /// Master files at the head: project-relative path → text.
    head_masters: BTreeMap<String, String>,
    /// Master files at the merge base (sweeps).
    base_masters: BTreeMap<String, String>,
    head_changelog: Option<String>,
    base_changelog: Option<String>,
    labels: Vec<String>,
    /// Whether the run uploads `klaud-sweep-manifest`.
    manifest: bool,
    /// What the run's own workflow decided before any benchmark (the
    /// `[skip-sweep]` policy and the reuse gate), when it has those jobs.
    gate: Option<super::gate::GatePlan>,
    /// The files the script's `passes_when` read, at the head
    /// (repository-relative path → text; absent files are left out).
    staged_files: BTreeMap<String, String>,
}

/// Whether each queued sweep run's workflow, at the run's head, uploads the
/// sweep manifest (by repository and head): the real workflow files decide
/// (only some versions upload it). Heads without workflow files are left
/// out, so the built-in behaviour (it does) applies.
fn manifest_uploads(m: &mut crate::github::state::Model) -> HashMap<(String, String), bool> {
    let mut heads = Vec::new();
    for r in m.repos.values() {
        let sweep_ids: Vec<u64> = r
            .workflows
            .iter()
            .filter(|w| w.path.rsplit('/').next() == Some(SWEEP_WORKFLOW))
            .map(|w| w.id)
            .collect();
        for run in r.runs.values() {
            if run.status == "queued" && sweep_ids.contains(&run.workflow_id) {
                heads.push((r.full_name(), run.head_sha.clone()));
            }
        }
    }
    let mut out = HashMap::new();
    for (full, sha) in heads {
        let Some((owner, name)) = full.split_once('/') else {
            continue;
        };
        let Some(set) = crate::github::workflow_events::set_at(m, owner, name, &sha) else {
            continue;
        };
        let uploads = match set.get(SWEEP_WORKFLOW) {
            Some(w) => w
                .may_upload(MANIFEST_ARTIFACT, &|p| set.resolve(p))
                .unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "ci simulator: cannot read the sweep's uploads");
                    false
                }),
            None => false,
        };
        out.insert((full, sha), uploads);
    }
    out
}

/// A run in progress, due to conclude.
struct Pending {
    repo: String,
    run_id: u64,
    run_attempt: u64,
    due: Instant,
    conclusion: Conclusion,
    /// What is still to upload (a job's artifacts leave when it ends).
    uploads: Uploads,
    /// When the run started and how long it takes: jobs end in between.
    started: Instant,
    delay: Duration,
    /// The run's jobs, with the state ids they got (`None` until written).
    jobs: Vec<(PlannedJob, Option<u64>, bool)>,
    /// The runner its jobs land on.
    node: Option<String>,
}

/// The runner's own memory; nothing here is shared with other runners.
pub(super) struct Runner {
    state: GithubState,
    script: Script,
    counters: HashMap<(String, String, RunKind), usize>,
    pending: Vec<Pending>,
    events: Arc<StdMutex<Vec<CiEvent>>>,
}

impl Runner {
    pub(super) fn new(
        state: GithubState,
        script: Script,
        events: Arc<StdMutex<Vec<CiEvent>>>,
    ) -> Self {
        Self {
            state,
            script,
            counters: HashMap::new(),
            pending: Vec::new(),
            events,
        }
    }

    /// Polls until the task is aborted.
    pub(super) async fn run(mut self, poll: Duration) {
        let mut tick = tokio::time::interval(poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.tick().await;
        }
    }

    /// One poll: start new runs, conclude due ones.
    pub(super) async fn tick(&mut self) {
        let snapshots = self.pick_up().await;
        for snap in snapshots {
            let pending = self.plan(snap);
            self.pending.push(pending);
        }
        self.conclude_due().await;
    }

    /// Moves every newly queued smoke or sweep run to `in_progress` and
    /// copies what planning it needs.
    async fn pick_up(&mut self) -> Vec<Snapshot> {
        let mut m = self.state.lock().await;
        let now = Utc::now();
        let mut out = Vec::new();
        let manifests = manifest_uploads(&mut m);
        let mut gates = super::gate::plan_queued(&mut m);
        let wanted = self.script.passes_when_files();
        for r in m.repos.values_mut() {
            let workflows: HashMap<u64, String> = r
                .workflows
                .iter()
                .map(|w| (w.id, w.path.rsplit('/').next().unwrap_or("").to_string()))
                .collect();
            // A run leaves `queued` under this same lock, so the status alone
            // says whether it is new; a run put back to `queued` (a re-run, or
            // a test through the control API) runs again as the next attempt.
            let queued: Vec<u64> = r
                .runs
                .values()
                // A cancelled run waiting to end never starts.
                .filter(|run| run.status == "queued" && !run.cancel_requested)
                .map(|run| run.id)
                .collect();
            for id in queued {
                let Some(run) = r.runs.get(&id) else {
                    continue;
                };
                let file = workflows.get(&run.workflow_id).map(String::as_str);
                let kind = match (file, run.event.as_str()) {
                    (Some(SMOKE_WORKFLOW), "workflow_dispatch") => RunKind::Smoke,
                    // A push to the default branch sweeps what it merged,
                    // as the real workflow's push trigger does.
                    (Some(SWEEP_WORKFLOW), "pull_request" | "push") => RunKind::Sweep,
                    // Other workflows are left to whoever drives them.
                    _ => continue,
                };
                // The smoke workflow checks out `inputs.ref` when given: its
                // run head is the tip of the dispatched branch, not the code.
                let head_sha = match kind {
                    RunKind::Smoke => run
                        .inputs
                        .get("ref")
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty())
                        .and_then(|s| r.resolve(s))
                        .unwrap_or_else(|| run.head_sha.clone()),
                    RunKind::Sweep => run.head_sha.clone(),
                };
                let prefix = project_prefix(r, &head_sha);
                let head_masters = masters_at(r, &head_sha, &prefix);
                let head_changelog = text_at(r, &head_sha, &format!("{prefix}{CHANGELOG}"));
                let (mut base_masters, mut base_changelog, mut labels) =
                    (BTreeMap::new(), None, Vec::new());
                if kind == RunKind::Sweep && run.event == "push" {
                    // The pushed changes are the head against its first parent.
                    if let Some(parent) = r
                        .objects
                        .commits
                        .get(&head_sha)
                        .and_then(|c| c.parents.first())
                    {
                        base_masters = masters_at(r, parent, &prefix);
                        base_changelog = text_at(r, parent, &format!("{prefix}{CHANGELOG}"));
                    }
                } else if kind == RunKind::Sweep {
                    if let Some(p) = run.pull_requests.first().and_then(|n| r.pulls.get(n)) {
                        labels = p.labels.clone();
                        let base = r.resolve(&p.base_ref).unwrap_or_default();
                        if let Some(mb) = r.objects.merge_base(&base, &head_sha) {
                            base_masters = masters_at(r, &mb, &prefix);
                            base_changelog = text_at(r, &mb, &format!("{prefix}{CHANGELOG}"));
                        }
                    }
                }
                let manifest = kind == RunKind::Sweep
                    && manifests
                        .get(&(r.full_name(), run.head_sha.clone()))
                        .copied()
                        .unwrap_or(true);
                let gate = gates.remove(&(r.full_name(), run.id));
                let staged_files = wanted
                    .iter()
                    .filter_map(|f| Some((f.clone(), text_at(r, &head_sha, f)?)))
                    .collect();
                let snap = Snapshot {
                    gate,
                    staged_files,
                    manifest,
                    repo: r.full_name(),
                    run_id: run.id,
                    run_attempt: run.run_attempt,
                    kind,
                    head_sha,
                    inputs: run.inputs.clone(),
                    head_masters,
                    base_masters,
                    head_changelog,
                    base_changelog,
                    labels,
                };
                if let Some(run) = r.runs.get_mut(&id) {
                    run.status = "in_progress".into();
                    run.updated_at = now;
                    run.run_started_at = now;
                }
                out.push(snap);
            }
        }
        out
    }

    /// Decides a run's outcome and builds its artifacts.
    fn plan(&mut self, s: Snapshot) -> Pending {
        let found = match s.kind {
            RunKind::Smoke => smoke_families(&s),
            RunKind::Sweep => sweep_families(&s),
        };
        if let Some(gate) = s.gate.as_ref().filter(|g| !g.benchmarks_run) {
            // The workflow skips every benchmark job (the PR's sweep is
            // reused, the head says `[skip-sweep]`, or the gate failed):
            // the run ends with its bookkeeping jobs and uploads nothing.
            let conclusion = if gate.failed {
                Conclusion::Failure
            } else {
                Conclusion::Success
            };
            self.record(CiEvent {
                repo: s.repo.clone(),
                run_id: s.run_id,
                run_attempt: s.run_attempt,
                kind: s.kind,
                family: None,
                attempt_index: 0,
                conclusion: conclusion.as_github().to_string(),
                note: format!("no benchmark job runs: {}", gate.reason),
            });
            // Its jobs take the time the family's next sweep would (a
            // newer event of the PR may still cancel it meanwhile), without
            // using up a step of the script.
            let delay = match &found {
                Ok(f) => f.first().map_or(Duration::ZERO, |(spec, _)| {
                    let index = self
                        .counters
                        .get(&(s.repo.clone(), spec.family.clone(), s.kind))
                        .copied()
                        .unwrap_or(0);
                    self.script.step(&spec.family, s.kind, index).delay
                }),
                Err(_) => Duration::ZERO,
            };
            let jobs = gate
                .jobs
                .iter()
                .map(|j| {
                    let mut j = j.clone();
                    if j.conclusion != "skipped" {
                        j.at = 0.99;
                    }
                    (j, None, false)
                })
                .collect();
            let now = Instant::now();
            return Pending {
                repo: s.repo,
                run_id: s.run_id,
                run_attempt: s.run_attempt,
                due: now + delay,
                conclusion,
                uploads: Uploads::new(),
                started: now,
                delay,
                jobs,
                node: None,
            };
        }
        let total: usize = found
            .as_ref()
            .map(|f| f.iter().map(|(spec, _)| spec.points.len()).sum())
            .unwrap_or(0);
        let (families, problem) = match found {
            // Each point becomes an artifact; a run naming many large
            // families must not make the simulator build without bound.
            Ok(_) if total > points::MAX_POINTS => (
                Vec::new(),
                Some(format!(
                    "the run would benchmark {total} points, more than the simulator's {} per run",
                    points::MAX_POINTS
                )),
            ),
            Ok(f) if !f.is_empty() => (f, None),
            Ok(_) => (
                Vec::new(),
                Some("no benchmark family found for this run".to_string()),
            ),
            Err(e) => (Vec::new(), Some(e)),
        };
        let now = Instant::now();
        let mut uploads = Uploads::new();
        let Some((first, _)) = families.first() else {
            // The real workflow fails while generating its matrix when the
            // config it is asked for does not exist.
            let reason = problem.unwrap_or_default();
            tracing::warn!(repo = %s.repo, run = s.run_id, %reason, "ci simulator: run fails");
            self.record(CiEvent {
                repo: s.repo.clone(),
                run_id: s.run_id,
                run_attempt: s.run_attempt,
                kind: s.kind,
                family: None,
                attempt_index: 0,
                conclusion: Conclusion::Failure.as_github().to_string(),
                note: reason,
            });
            return Pending {
                repo: s.repo,
                run_id: s.run_id,
                run_attempt: s.run_attempt,
                due: now,
                conclusion: Conclusion::Failure,
                uploads,
                started: now,
                delay: Duration::ZERO,
                jobs: Vec::new(),
                node: None,
            };
        };
        let family = first.family.clone();
        let counter = self
            .counters
            .entry((s.repo.clone(), family.clone(), s.kind))
            .or_insert(0);
        let index = *counter;
        *counter += 1;
        // The image under test is the family's in the master config at the
        // run's head: where the real workflow reads it.
        let step: Step = self
            .script
            .step_for_image(&family, s.kind, index, &first.image);
        let step = with_staged_fix(step, &s.staged_files);
        build_uploads(&s, &families, &step, &mut uploads);
        // Infrastructure failures never reach a benchmark job: such a run
        // shows the one job GitHub names after it.
        let planned = match step.conclusion {
            Conclusion::Infra(_) => Vec::new(),
            c => {
                let ran: Vec<usize> = families.iter().map(|(f, _)| points_ran(f, &step)).collect();
                let mut planned =
                    jobs::plan_jobs(s.kind, &families, c, &step.multipliers, &ran, &uploads);
                if let Some(gate) = &s.gate {
                    with_gate_jobs(&mut planned, &gate.jobs);
                }
                print_staged_lines(&mut planned, &step);
                planned
            }
        };
        self.record(CiEvent {
            repo: s.repo.clone(),
            run_id: s.run_id,
            run_attempt: s.run_attempt,
            kind: s.kind,
            family: Some(family),
            attempt_index: index,
            conclusion: step.conclusion.as_github().to_string(),
            note: String::new(),
        });
        Pending {
            repo: s.repo,
            run_id: s.run_id,
            run_attempt: s.run_attempt,
            due: now + step.delay,
            conclusion: step.conclusion,
            uploads,
            started: now,
            delay: step.delay,
            jobs: planned.into_iter().map(|j| (j, None, false)).collect(),
            node: step.node.clone(),
        }
    }

    fn record(&self, e: CiEvent) {
        // A poisoned lock only means a reader panicked; the list is still usable.
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        if events.len() >= super::EVENTS_CAPACITY {
            let excess = events.len() + 1 - super::EVENTS_CAPACITY;
            events.drain(..excess);
        }
        events.push(e);
    }

    /// Ends the jobs whose time has come (uploading their artifacts) and
    /// concludes every pending run whose time has come, unless someone else
    /// (a cancel, a re-run) changed it meanwhile.
    async fn conclude_due(&mut self) {
        let now = Instant::now();
        let mut work = Vec::new();
        for (i, p) in self.pending.iter().enumerate() {
            let run_due = p.due <= now;
            let ending: Vec<usize> = p
                .jobs
                .iter()
                .enumerate()
                .filter(|(_, (j, _, done))| {
                    !done && (run_due || p.started + jobs::due(p.delay, j.at) <= now)
                })
                .map(|(k, _)| k)
                .collect();
            let unwritten = p.jobs.iter().any(|(_, id, _)| id.is_none());
            if !run_due && ending.is_empty() && !unwritten {
                continue;
            }
            let names: Vec<String> = if run_due {
                p.uploads.keys().cloned().collect()
            } else {
                ending
                    .iter()
                    .flat_map(|k| p.jobs[*k].0.artifacts.clone())
                    .collect()
            };
            let mut arts = Vec::new();
            for name in names {
                let Some(files) = p.uploads.get(&name) else {
                    continue;
                };
                match zip_files(files) {
                    Ok(z) => arts.push((name, z)),
                    Err(e) => tracing::error!(run = p.run_id, artifact = %name, error = %e,
                        "ci simulator: cannot zip an artifact"),
                }
            }
            work.push((i, run_due, ending, arts));
        }
        if work.is_empty() {
            return;
        }
        let mut finished = Vec::new();
        let mut m = self.state.lock().await;
        for (i, run_due, ending, arts) in work {
            let p = &mut self.pending[i];
            let ids: Vec<u64> = arts.iter().map(|_| m.id()).collect();
            let job_ids: Vec<u64> = p
                .jobs
                .iter()
                .filter(|(_, id, _)| id.is_none())
                .map(|_| m.id())
                .collect();
            let Some(r) = m.repos.get_mut(&p.repo.to_ascii_lowercase()) else {
                finished.push(i);
                continue;
            };
            let Some(run) = r.runs.get_mut(&p.run_id) else {
                finished.push(i);
                continue;
            };
            // A cancel in flight decides the outcome, not the script.
            if run.status != "in_progress"
                || run.run_attempt != p.run_attempt
                || run.cancel_requested
            {
                finished.push(i);
                continue;
            }
            let now = Utc::now();
            if !job_ids.is_empty() {
                let mut fresh = job_ids.into_iter();
                run.jobs.clear();
                for (j, id, _) in p.jobs.iter_mut() {
                    let new_id = id.or_else(|| fresh.next()).unwrap_or_default();
                    *id = Some(new_id);
                    run.jobs.push(crate::github::state::Job {
                        id: new_id,
                        name: j.name.clone(),
                        // The collect jobs wait for the benchmarks.
                        status: if j.at >= 1.0 { "queued" } else { "in_progress" }.into(),
                        conclusion: None,
                        started_at: now,
                        completed_at: None,
                        log: j.log.clone(),
                        runner_name: p.node.clone(),
                    });
                }
            }
            for k in &ending {
                let (planned, id, done) = &mut p.jobs[*k];
                *done = true;
                if let Some(job) = run.jobs.iter_mut().find(|j| Some(j.id) == *id) {
                    job.status = "completed".into();
                    job.conclusion = Some(planned.conclusion.clone());
                    job.completed_at = Some(now);
                }
            }
            if run_due {
                run.status = "completed".into();
                run.conclusion = Some(p.conclusion.as_github().to_string());
                run.updated_at = now;
                finished.push(i);
            }
            for ((name, zip), id) in arts.into_iter().zip(ids) {
                p.uploads.remove(&name);
                r.artifacts.insert(
                    id,
                    Artifact {
                        id,
                        run_id: p.run_id,
                        name,
                        zip,
                        created_at: now,
                        expired: false,
                    },
                );
            }
        }
        drop(m);
        finished.sort_unstable();
        for i in finished.into_iter().rev() {
            self.pending.remove(i);
        }
    }
}

/// A step whose `passes_when` edit is at the run's head passes instead,
/// with baseline numbers, on the same node and after the same delay.
fn with_staged_fix(step: Step, files: &BTreeMap<String, String>) -> Step {
    let fixed = step
        .passes_when
        .as_ref()
        .is_some_and(|p| files.get(&p.file).is_some_and(|t| t.contains(&p.contains)));
    if !fixed {
        return step;
    }
    Step {
        delay: step.delay,
        node: step.node,
        ..Step::success()
    }
}

/// The failed jobs of a run print the step's staged lines, after a line
/// naming the node, as a runner's log does.
fn print_staged_lines(planned: &mut [PlannedJob], step: &Step) {
    if step.log_lines.is_empty() && step.node.is_none() {
        return;
    }
    for j in planned.iter_mut().filter(|j| j.conclusion == "failure") {
        if let Some(node) = &step.node {
            j.log.push_str(&format!("Runner name: '{node}'\n"));
        }
        for line in &step.log_lines {
            j.log.push_str(line);
            j.log.push('\n');
        }
    }
}

/// Shows the workflow's policy and gate jobs among a sweep's jobs: a job
/// listed already (`check-changelog`, `setup`) gets its log, another one
/// (`reuse-sweep-gate`) comes before `setup`.
fn with_gate_jobs(planned: &mut Vec<PlannedJob>, gate_jobs: &[PlannedJob]) {
    for g in gate_jobs {
        if let Some(j) = planned.iter_mut().find(|j| j.name == g.name) {
            j.log = g.log.clone();
            continue;
        }
        let at = planned
            .iter()
            .position(|j| j.name == "setup")
            .unwrap_or(planned.len().min(1));
        planned.insert(at, g.clone());
    }
}

/// How many points of `f` produce a row in a run ending per `step`.
fn points_ran(f: &FamilySpec, step: &Step) -> usize {
    match (step.conclusion, step.partial) {
        (_, true) => f.points.len().div_ceil(2),
        (Conclusion::Success, false) => f.points.len(),
        _ => 0,
    }
}

/// Fills `uploads` for a run of `families` concluding per `step`.
fn build_uploads(
    s: &Snapshot,
    families: &[(FamilySpec, String)],
    step: &Step,
    uploads: &mut Uploads,
) {
    if let Conclusion::Infra(_) = step.conclusion {
        // Infrastructure failures never reach a benchmark job.
        return;
    }
    if s.kind == RunKind::Sweep && s.manifest {
        // The manifest is written when the sweep's matrix is set up, before
        // any benchmark can fail.
        let full = s
            .labels
            .iter()
            .any(|l| FULL_SWEEP_LABELS.contains(&l.as_str()));
        results::add_manifest(
            uploads,
            &s.head_sha,
            s.run_id,
            s.run_attempt,
            full,
            families,
        );
    }
    let mut rows = Vec::new();
    let mut evals = Vec::new();
    for (f, _) in families {
        let limit = points_ran(f, step);
        // What the rows record: the master's image, unless the script
        // stages a run that measured another container.
        let image = step.measured_image.as_deref().unwrap_or(&f.image);
        rows.extend(results::point_rows(f, image, &step.multipliers, limit));
        if step.conclusion == Conclusion::Success
            && let Some(row) = results::eval_row(f, image, &step.multipliers)
        {
            evals.push(row);
            if let Some((name, files)) = results::eval_artifact(f, image, &step.multipliers) {
                uploads.insert(name, files);
            }
        }
    }
    results::add_rows(uploads, rows);
    results::add_evals(uploads, evals);
}

/// `"inferencex-e2e/"` when the commit uses the new layout, else `""`.
fn project_prefix(r: &Repo, sha: &str) -> String {
    let is_dir = r
        .objects
        .commits
        .get(sha)
        .and_then(|c| r.objects.lookup(&c.tree, E2E_PREFIX))
        .is_some_and(|e| e.is_tree());
    if is_dir {
        format!("{E2E_PREFIX}/")
    } else {
        String::new()
    }
}

/// A file's text at a commit (`None` when missing or not UTF-8).
pub(super) fn text_at(r: &Repo, sha: &str, path: &str) -> Option<String> {
    let commit = r.objects.commits.get(sha)?;
    let entry = r.objects.lookup(&commit.tree, path)?;
    if entry.is_tree() {
        return None;
    }
    let bytes = r.objects.blobs.get(&entry.sha)?;
    String::from_utf8(bytes.clone()).ok()
}

/// Every `configs/*-master.yaml` at a commit, keyed project-relative.
pub(super) fn masters_at(r: &Repo, sha: &str, prefix: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Some(commit) = r.objects.commits.get(sha) else {
        return out;
    };
    let Some(dir) = r
        .objects
        .lookup(&commit.tree, &format!("{prefix}configs"))
        .filter(|e| e.is_tree())
    else {
        return out;
    };
    let Some(entries) = r.objects.trees.get(&dir.sha) else {
        return out;
    };
    for e in entries {
        if e.is_tree() || !e.name.ends_with("-master.yaml") {
            continue;
        }
        if let Some(text) = r
            .objects
            .blobs
            .get(&e.sha)
            .and_then(|b| String::from_utf8(b.clone()).ok())
        {
            out.insert(format!("configs/{}", e.name), text);
        }
    }
    out
}

/// Parses every master once; a master that does not parse is skipped
/// (and logged), as the real matrix generator would fail only for it.
fn parsed(masters: &BTreeMap<String, String>) -> BTreeMap<String, Value> {
    masters
        .iter()
        .filter_map(|(path, text)| match points::parse_master(path, text) {
            Ok(v) => Some((path.clone(), v)),
            Err(e) => {
                tracing::warn!(error = %e, "ci simulator: master config does not parse");
                None
            }
        })
        .collect()
}

/// Families of a dispatched smoke run, from its `generate-cli-command`.
fn smoke_families(s: &Snapshot) -> Result<Vec<(FamilySpec, String)>, String> {
    let cmd = s
        .inputs
        .get("generate-cli-command")
        .and_then(Value::as_str)
        .ok_or("the dispatch has no generate-cli-command input")?;
    let (files, keys) = points::parse_cli_command(cmd);
    if files.is_empty() || keys.is_empty() {
        return Err(format!(
            "generate-cli-command {cmd:?} names no --config-files or no --config-keys"
        ));
    }
    let masters = parsed(&s.head_masters);
    let mut out = Vec::new();
    for key in &keys {
        let found = files.iter().find_map(|file| {
            masters
                .get(file)
                .filter(|m| m.get(key).is_some())
                .map(|m| (file, m))
        });
        let Some((file, master)) = found else {
            return Err(format!(
                "config key {key:?} is not in {} at {}",
                files.join(", "),
                s.head_sha
            ));
        };
        let spec = points::family_spec(file, key, master).map_err(|e| e.to_string())?;
        out.push((spec, file.clone()));
    }
    Ok(out)
}

/// Families of a sweep run: the config keys of the changelog entries the PR
/// appends (what the real `run-sweep.yml` sweeps), else the master entries it
/// changes. The branch name means nothing here: GitHub does not know Klaud.
fn sweep_families(s: &Snapshot) -> Result<Vec<(FamilySpec, String)>, String> {
    let head = parsed(&s.head_masters);
    let lookup = |key: &str| -> Option<Result<(FamilySpec, String), String>> {
        head.iter()
            .find(|(_, m)| m.get(key).is_some())
            .map(|(file, m)| {
                points::family_spec(file, key, m)
                    .map(|f| (f, file.clone()))
                    .map_err(|e| e.to_string())
            })
    };
    let mut keys: Vec<String> = appended_changelog_keys(
        s.base_changelog.as_deref().unwrap_or(""),
        s.head_changelog.as_deref().unwrap_or(""),
    );
    if keys.is_empty() {
        let base = parsed(&s.base_masters);
        for (file, m) in &head {
            let Some(entries) = m.as_object() else {
                continue;
            };
            for (key, entry) in entries {
                if base.get(file).and_then(|b| b.get(key)) != Some(entry) {
                    keys.push(key.clone());
                }
            }
        }
    }
    let mut out: Vec<(FamilySpec, String)> = Vec::new();
    for key in keys {
        if out.iter().any(|(f, _)| f.key == key) {
            continue;
        }
        match lookup(&key) {
            Some(Ok(f)) => out.push(f),
            Some(Err(e)) => return Err(e),
            // A changelog may name a key a later PR removed; the real sweep
            // skips it.
            None => {}
        }
    }
    Ok(out)
}

/// Config keys of the entries `head` appends to `base` (both changelog
/// texts). Entries are compared as parsed data, so only new list items count.
fn appended_changelog_keys(base: &str, head: &str) -> Vec<String> {
    let list = |text: &str| -> Vec<Value> {
        klaud_planner::yaml::parse_lenient(text)
            .ok()
            .and_then(|(doc, _)| doc)
            .and_then(|doc| doc.to_json().as_array().cloned())
            .unwrap_or_default()
    };
    let (b, h) = (list(base), list(head));
    let new = if h.len() >= b.len() && h[..b.len()] == b[..] {
        &h[b.len()..]
    } else {
        // A rewritten history: take entries that are not in the base.
        return h
            .iter()
            .filter(|e| !b.contains(e))
            .flat_map(entry_keys)
            .collect();
    };
    new.iter().flat_map(entry_keys).collect()
}

fn entry_keys(entry: &Value) -> Vec<String> {
    entry
        .get("config-keys")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MASTER: &str = "a:\n  image: x/y:1\n  model: m\n  model-prefix: p\n  runner: b200\n  precision: fp4\n  framework: vllm\n  scenarios:\n    fixed-seq-len:\n    - isl: 1\n      osl: 1\n      search-space:\n      - { tp: 1, conc-list: [1] }\n";

    fn sweep(head_master: &str, _head_branch: &str) -> Snapshot {
        let b = MASTER.replace("a:", "b:");
        let mut head_masters = BTreeMap::new();
        head_masters.insert(
            "configs/n-master.yaml".to_string(),
            format!("{head_master}{b}"),
        );
        let mut base_masters = BTreeMap::new();
        base_masters.insert("configs/n-master.yaml".to_string(), format!("{MASTER}{b}"));
        Snapshot {
            repo: "o/r".into(),
            run_id: 1,
            run_attempt: 1,
            kind: RunKind::Sweep,
            head_sha: "0".repeat(40),
            inputs: Value::Null,
            head_masters,
            base_masters,
            head_changelog: None,
            base_changelog: None,
            labels: Vec::new(),
            manifest: true,
            gate: None,
            staged_files: BTreeMap::new(),
        }
    }

    fn failing_step(passes_when: Option<(&str, &str)>) -> Step {
        Step {
            conclusion: Conclusion::Failure,
            node: Some("n1".into()),
            log_lines: vec!["boom".into()],
            passes_when: passes_when.map(|(file, contains)| crate::ci::script::PassesWhen {
                file: file.into(),
                contains: contains.into(),
            }),
            ..Step::success()
        }
    }

    #[test]
    fn a_staged_failure_passes_once_its_edit_is_at_the_head() {
        let files: BTreeMap<String, String> =
            [("b/x.sh".to_owned(), "serve --mem 0.90\n".to_owned())].into();
        let fixed = with_staged_fix(failing_step(Some(("b/x.sh", "--mem 0.90"))), &files);
        assert_eq!(fixed.conclusion, Conclusion::Success);
        assert!(fixed.log_lines.is_empty());
        assert_eq!(fixed.node.as_deref(), Some("n1"));
        let still = with_staged_fix(failing_step(Some(("b/x.sh", "--mem 0.85"))), &files);
        assert_eq!(still.conclusion, Conclusion::Failure);
        let absent = with_staged_fix(failing_step(Some(("b/y.sh", "--mem 0.90"))), &files);
        assert_eq!(absent.conclusion, Conclusion::Failure);
    }

    #[test]
    fn failed_jobs_print_the_staged_lines_after_their_node() {
        let job = |conclusion: &str| PlannedJob {
            name: "j".into(),
            at: 0.5,
            conclusion: conclusion.into(),
            artifacts: Vec::new(),
            log: String::new(),
        };
        let mut planned = vec![job("success"), job("failure")];
        print_staged_lines(&mut planned, &failing_step(None));
        assert_eq!(planned[0].log, "");
        assert_eq!(planned[1].log, "Runner name: 'n1'\nboom\n");
    }

    fn keys(s: &Snapshot) -> Vec<String> {
        sweep_families(s)
            .unwrap()
            .into_iter()
            .map(|(f, _)| f.family)
            .collect()
    }

    #[test]
    fn sweep_families_come_from_the_changelog_then_changed_entries_never_the_branch() {
        let changed = sweep(&MASTER.replace("x/y:1", "x/y:2"), "feature");
        assert_eq!(keys(&changed), vec!["configs/n-master.yaml:a"]);
        let fid = klaud_planner::identity::family_id("configs/n-master.yaml:b");
        let unchanged = sweep(MASTER, &format!("klaud/auto-{fid}-0123456789abcdef"));
        assert!(keys(&unchanged).is_empty());
        assert!(keys(&sweep(MASTER, "feature")).is_empty());
        // The changelog wins over both.
        let mut logged = sweep(&MASTER.replace("x/y:1", "x/y:2"), "feature");
        logged.base_changelog = Some("- config-keys: [a]\n".into());
        logged.head_changelog = Some("- config-keys: [a]\n\n- config-keys: [b, gone]\n".into());
        assert_eq!(keys(&logged), vec!["configs/n-master.yaml:b"]);
    }

    #[test]
    fn appended_changelog_entries_name_the_swept_keys() {
        let base = "- config-keys:\n    - old\n  description:\n    - \"x\"\n";
        let head = format!(
            "{base}\n- config-keys:\n    - new-a\n    - new-b\n  description:\n    - \"y\"\n"
        );
        assert_eq!(appended_changelog_keys(base, &head), vec!["new-a", "new-b"]);
        assert!(appended_changelog_keys(base, base).is_empty());
        assert!(appended_changelog_keys("", "not: [valid").is_empty());
    }
}
