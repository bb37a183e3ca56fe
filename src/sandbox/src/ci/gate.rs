//! What a sweep run's own workflow decides before any benchmark runs: the
//! `[skip-sweep]` commit-message policy and the sweep-reuse gate
//! ([`super::reuse`]), found in the seeded `run-sweep.yml` by the script
//! its jobs call, their outputs fed to the job conditions
//! (`needs.<job>.outputs.<name>`) through `klaud-workflows`.
//!
//! The jobs whose conditions then decide are the workflow's benchmark jobs:
//! the jobs (or reusable-workflow calls) that upload a `bmk_*` artifact.
//! When none of them runs, the run ends with its bookkeeping jobs only and
//! uploads nothing; the gate's reason is in its job's log.

use std::collections::{BTreeSet, HashMap};

use klaud_workflows::{Assumptions, EventContext, JobDecision, JobResult, Workflow, WorkflowSet};
use serde_json::{Map, Value, json};

use super::jobs::PlannedJob;
use super::reuse::{self, GateComment, GateEvent, GatePull, GateRun, ReuseSource};
use crate::github::state::{Model, Repo, fmt_time};

const SWEEP_WORKFLOW: &str = "run-sweep.yml";
/// What the repository's gate scripts are called in their jobs' `run:`.
const GATE_SCRIPT: &str = "find_reusable_sweep_run.py";
const GATE_MODULE: &str = "infx.workflows.reuse";
/// The marker the `check-changelog` policy step greps the head commit for.
const SKIP_SWEEP_MARKER: &str = "[skip-sweep]";
/// A name any benchmark upload step can produce (`bmk_<result>`).
const BENCHMARK_ARTIFACT_PROBE: &str = "bmk_probe";

/// The decision for one queued sweep run.
#[derive(Debug, Clone, PartialEq)]
pub struct GatePlan {
    /// Whether any benchmark job runs.
    pub benchmarks_run: bool,
    /// Whether a gate job fails (the run then fails).
    pub failed: bool,
    /// The run's jobs when no benchmark runs; when benchmarks run, the
    /// policy and gate jobs to show with the sweep's own.
    pub jobs: Vec<PlannedJob>,
    /// The gate's reason (or error), for the CI event log.
    pub reason: String,
}

/// The simulator's state as the gate's REST calls see it.
struct StateSource<'a> {
    m: &'a Model,
    r: &'a Repo,
}

impl StateSource<'_> {
    fn gate_run(&self, run: &crate::github::state::Run) -> GateRun {
        let url = self.m.repo_url(&self.r.owner, &self.r.name);
        GateRun {
            id: run.id,
            event: run.event.clone(),
            status: run.status.clone(),
            conclusion: run.conclusion.clone(),
            path: self
                .r
                .workflows
                .iter()
                .find(|w| w.id == run.workflow_id)
                .map(|w| w.path.clone())
                .unwrap_or_default(),
            head_sha: run.head_sha.clone(),
            run_attempt: run.run_attempt,
            html_url: format!("{}/actions/runs/{}", self.m.html_base(&url), run.id),
        }
    }
}

impl ReuseSource for StateSource<'_> {
    fn commit_pulls(&self, sha: &str) -> Vec<u64> {
        self.r
            .pulls
            .values()
            .rev()
            .filter(|p| p.open || p.merged.is_some())
            .filter(|p| {
                p.merged.as_ref().is_some_and(|x| x.sha == sha)
                    || self.r.pull_commit_shas(p).iter().any(|s| s == sha)
            })
            .map(|p| p.number)
            .collect()
    }

    fn comments(&self, pr: u64) -> Vec<GateComment> {
        self.r
            .comments
            .values()
            .filter(|c| c.issue == pr)
            .map(|c| GateComment {
                created_at: fmt_time(c.created_at),
                author_association: self.m.author_association(self.r, &c.user).to_string(),
                body: c.body.clone(),
            })
            .collect()
    }

    fn pull(&self, pr: u64) -> Option<GatePull> {
        self.r.pulls.get(&pr).map(|p| GatePull {
            number: p.number,
            labels: p.labels.clone(),
            merged_at: p.merged.as_ref().map(|x| fmt_time(x.at)),
            head_ref: p.head_ref.clone(),
        })
    }

    fn run(&self, id: u64) -> Option<GateRun> {
        self.r.runs.get(&id).map(|run| self.gate_run(run))
    }

    fn completed_pr_runs(&self, workflow: &str, branch: &str) -> Vec<GateRun> {
        let Some(w) = self.r.workflow(workflow) else {
            return Vec::new();
        };
        self.r
            .runs
            .values()
            .rev()
            .filter(|run| run.workflow_id == w.id)
            .filter(|run| run.event == "pull_request" && run.status == "completed")
            .filter(|run| run.head_branch == branch)
            .map(|run| self.gate_run(run))
            .collect()
    }

    fn pr_commits(&self, pr: u64) -> BTreeSet<String> {
        self.r
            .pulls
            .get(&pr)
            .map(|p| self.r.pull_commit_shas(p).into_iter().collect())
            .unwrap_or_default()
    }

    fn artifact_names(&self, run: u64) -> BTreeSet<String> {
        self.r
            .artifacts
            .values()
            .filter(|a| a.run_id == run)
            .map(|a| a.name.clone())
            .collect()
    }
}

/// A stand-in `search-space-config` with work of every kind: the plan asks
/// whether the workflow lets benchmark jobs run at all; which points a
/// sweep benchmarks is the CI simulator's business.
fn search_space_probe() -> Value {
    let kinds = json!({"1k1k": [{}], "8k1k": [{}], "agentic": [{}]});
    json!({
        "single_node": kinds, "multi_node": kinds, "evals": [{}], "agentic_evals": [{}],
        "multinode_evals": [{}], "multinode_agentic_evals": [{}],
    })
}

/// The event the gate runs for, from the run's context.
fn gate_event(ctx: &EventContext, commands: Vec<String>) -> GateEvent {
    let event = ctx.event();
    let pr = &event["pull_request"];
    let commit_sha = match ctx.event_name() {
        "pull_request" => pr["head"]["sha"].as_str().unwrap_or_default().to_string(),
        _ => ctx.github_str("sha").unwrap_or_default().to_string(),
    };
    GateEvent {
        event_name: ctx.event_name().to_string(),
        event_action: ctx.action().unwrap_or_default().to_string(),
        pr_number: pr["number"].as_u64(),
        commit_sha,
        git_ref: ctx.github_str("ref").unwrap_or_default().to_string(),
        workflow_id: SWEEP_WORKFLOW.to_string(),
        commands,
    }
}

/// The top-level jobs of `wf` that upload benchmark results, directly or
/// through the reusable workflows they call.
fn benchmark_jobs(wf: &Workflow, set: &WorkflowSet) -> BTreeSet<String> {
    let uploads = match wf.artifact_uploads(&|p| set.resolve(p)) {
        Ok(u) => u,
        Err(e) => {
            tracing::warn!(error = %e, "ci simulator: cannot read the sweep's uploads");
            return BTreeSet::new();
        }
    };
    uploads
        .iter()
        .filter(|u| u.may_be_named(BENCHMARK_ARTIFACT_PROBE))
        .map(|u| match u.via.first() {
            Some(caller) => caller
                .split_once('#')
                .map_or(caller.as_str(), |(_, job)| job)
                .to_string(),
            None => u.job.clone(),
        })
        .collect()
}

/// Decides a queued sweep run's policy and reuse gate from its workflow
/// file; `None` when the run has no context, its workflow calls neither,
/// or its jobs cannot be planned (the sweep then runs as before).
pub fn plan(
    m: &Model,
    r: &Repo,
    set: &WorkflowSet,
    run: &crate::github::state::Run,
) -> Option<GatePlan> {
    let ctx = run.context.as_ref()?;
    let wf = set.get(SWEEP_WORKFLOW)?;
    let script_jobs = wf.jobs_running(GATE_SCRIPT);
    let module_jobs = wf.jobs_running(GATE_MODULE);
    let policy_jobs = wf.jobs_running(SKIP_SWEEP_MARKER);
    if script_jobs.is_empty() && module_jobs.is_empty() && policy_jobs.is_empty() {
        return None;
    }
    let benchmarks = benchmark_jobs(wf, set);
    if benchmarks.is_empty() {
        return None;
    }
    // Newer layouts' gate module also takes `/use <id>`.
    let mut commands = vec![reuse::REUSE_COMMAND.to_string()];
    if !module_jobs.is_empty() {
        commands.push("/use".to_string());
    }
    let source = StateSource { m, r };
    let gate = reuse::decide(&gate_event(ctx, commands), &source);
    let message = r
        .objects
        .commits
        .get(&run.head_sha)
        .map(|c| c.message.as_str())
        .unwrap_or_default();
    // The policy step reads the PR head's message; other events have none.
    let skip_sweep = ctx.event_name() == "pull_request" && message.contains(SKIP_SWEEP_MARKER);

    let gate_jobs: Vec<&String> = script_jobs.iter().chain(&module_jobs).collect();
    let mut assumptions = Assumptions::default();
    let mut logs: HashMap<&str, String> = HashMap::new();
    for id in &policy_jobs {
        let flag = if skip_sweep { "true" } else { "false" };
        let mut outputs = Map::new();
        outputs.insert("skip-pr-sweep".into(), json!(flag));
        assumptions = assumptions.outputs(id, outputs);
        logs.insert(id, format!("skip-pr-sweep={flag}\n"));
    }
    for id in &gate_jobs {
        match &gate {
            Ok(out) => {
                let mut outputs: Map<String, Value> = out
                    .pairs()
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), json!(v)))
                    .collect();
                outputs.insert(
                    "search-space-config".into(),
                    json!(search_space_probe().to_string()),
                );
                assumptions = assumptions.outputs(id, outputs);
                let printed: Map<String, Value> = out
                    .pairs()
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), json!(v)))
                    .collect();
                logs.insert(
                    id,
                    serde_json::to_string_pretty(&Value::Object(printed)).unwrap_or_default(),
                );
            }
            Err(e) => {
                assumptions = assumptions.result(id, JobResult::Failure);
                logs.insert(id, format!("error: {e}\n"));
            }
        }
    }
    let job_plan = match wf.plan_jobs_assuming(ctx, &assumptions) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "ci simulator: sweep job conditions do not evaluate");
            return None;
        }
    };
    let benchmarks_run = job_plan
        .jobs
        .iter()
        .any(|j| benchmarks.contains(&j.id) && j.decision != JobDecision::Skipped);
    let ran_and_failed = |id: &str| {
        job_plan
            .job(id)
            .is_some_and(|j| j.assumed_result == Some(JobResult::Failure))
    };
    let failed = gate_jobs.iter().any(|id| ran_and_failed(id));
    let job_of = |j: &klaud_workflows::PlannedJob| {
        let conclusion = match (j.decision, j.assumed_result) {
            (JobDecision::Skipped, _) => "skipped",
            (_, Some(JobResult::Failure)) => "failure",
            _ => "success",
        };
        PlannedJob {
            name: j.name.clone().unwrap_or_else(|| j.id.clone()),
            at: 0.0,
            conclusion: conclusion.to_string(),
            artifacts: Vec::new(),
            log: if j.decision == JobDecision::Skipped {
                String::new()
            } else {
                logs.get(j.id.as_str()).cloned().unwrap_or_default()
            },
        }
    };
    let jobs: Vec<PlannedJob> = if benchmarks_run {
        job_plan
            .jobs
            .iter()
            .filter(|j| j.decision != JobDecision::Skipped)
            .filter(|j| gate_jobs.iter().any(|g| **g == j.id) || policy_jobs.contains(&j.id))
            .map(job_of)
            .collect()
    } else {
        job_plan.jobs.iter().map(job_of).collect()
    };
    let reason = match &gate {
        Ok(out) => out.reason.clone(),
        Err(e) => e.to_string(),
    };
    Some(GatePlan {
        benchmarks_run,
        failed,
        jobs,
        reason,
    })
}

/// Plans every queued sweep run of every repository (by repository full
/// name and run id).
pub fn plan_queued(m: &mut Model) -> HashMap<(String, u64), GatePlan> {
    let mut queued = Vec::new();
    for r in m.repos.values() {
        let Some(w) = r.workflow(SWEEP_WORKFLOW) else {
            continue;
        };
        for run in r.runs.values() {
            if run.status == "queued" && run.workflow_id == w.id && run.context.is_some() {
                queued.push((
                    r.owner.clone(),
                    r.name.clone(),
                    run.id,
                    run.head_sha.clone(),
                ));
            }
        }
    }
    let mut out = HashMap::new();
    for (owner, name, id, head) in queued {
        let Some(set) = crate::github::workflow_events::set_at(m, &owner, &name, &head) else {
            continue;
        };
        let Ok(r) = m.repo(&owner, &name) else {
            continue;
        };
        let Some(run) = r.runs.get(&id) else {
            continue;
        };
        if let Some(plan) = plan(m, r, &set, run) {
            out.insert((r.full_name(), id), plan);
        }
    }
    out
}
