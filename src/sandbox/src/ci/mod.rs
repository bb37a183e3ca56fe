//! The CI simulator: runs the workflows the GitHub simulator queues, with
//! outcomes from a script, and uploads artifacts in the real InferenceX
//! formats (see configs/README.md#what-klaud-reads-from-the-benchmark-repositorys-workflows). It reads and writes the simulator's state directly
//! (a poll every ~100 ms), so it costs no GitHub API traffic and never
//! shows up in the request log.
//!
//! # Which runs it runs
//!
//! - `e2e-tests.yml` runs from `workflow_dispatch` (smoke / targeted attempts).
//!   The family comes from the `generate-cli-command` input
//!   (`test-config --config-files <file> --config-keys <key> --smoke`), read
//!   from the master config at the run's head sha. A key that is not there
//!   fails the run with no artifacts, as the real matrix generation does.
//! - `run-sweep.yml` runs from `pull_request` (final sweeps) and from `push`
//!   (a merge to main, where the seeded workflow has that trigger). The
//!   families are the `config-keys` of the changelog entries the PR appends
//!   (a push: the pushed commit appends to its parent; what the real workflow
//!   sweeps), else the master entries the PR changes. A sweep of several
//!   families uploads rows for all of them and follows the script of the
//!   first (Klaud sweeps one family per PR).
//!
//! Runs of other workflows are left alone. A queued run moves to
//! `in_progress` on the next poll and concludes when its step says.
//!
//! Whether, when and under which title a run exists is the GitHub
//! simulator's business: from the seeded repository's `.github/workflows/`
//! when it has them (`github::workflows`: triggers, `run-name`, dispatch
//! validation, job conditions, concurrency, run heads), else its built-in
//! InferenceX triggers. A dispatched smoke run's head is the tip of the
//! dispatched branch; the code it benchmarks is `inputs.ref` when given, as
//! the real workflow checks that out.
//!
//! # Script file (TOML)
//!
//! ```toml
//! # The default for every family: all runs pass with baseline numbers.
//! [families."*"]
//! smoke = ["success"]
//! sweep = ["success"]
//!
//! # A family by config key (or by full family, `configs/x-master.yaml:key`).
//! [families.demo-fp4-b200-vllm]
//! smoke = ["failure"]                      # every smoke run fails
//!
//! [families.demo-fp8-h200-trt]
//! # 1st smoke: infrastructure failure; 2nd: passes, 10% faster.
//! smoke = ["infra", { outcome = "success", throughput = 1.10, ttft = 0.95 }]
//!
//! [families.demo-fp8-mi355x-sglang]
//! # 1st smoke runs 5 s, then fails with half of its rows uploaded.
//! smoke = [{ delay = 5 }, { outcome = "failure", partial = true }, "success"]
//! sweep = ["infra:timed_out", "success"]
//! ```
//!
//! - `families.<name>`: `*` (default), a config key, or a full family; a run
//!   looks up its full family, then its key, then `*`.
//! - `smoke` / `sweep`: the steps of that family's runs in order (1st smoke,
//!   2nd smoke, …; re-runs count as runs). Past the end the last step repeats;
//!   a family with no list for the kind falls through to the next name; with
//!   nothing at all a run succeeds.
//! - A step is a word or a table. Words: `success`, `failure` (a real
//!   benchmark failure), `infra` (= `infra:startup_failure`),
//!   `infra:timed_out`, `infra:cancelled` (cancelled by the system), and
//!   `delay:<seconds>`. Table fields: `outcome` (one of the words, or `delay`),
//!   `delay` (seconds the run stays `in_progress` first; a table with only
//!   `delay` is a delay step), `throughput`, `ttft`, `tpot`, `score`
//!   (multipliers on the baseline numbers, in (0, 100]; default 1.0),
//!   `partial` (failures and successes: upload the rows of the first half of the
//!   points), `image` (failures and successes: the image every result row
//!   records instead of the master's, as when a launcher or a recipe ran
//!   another container; e.g. `{ outcome = "success", image = "lmsysorg/sglang:v0.5.8-cu130" }`).
//! - A delay step attaches to the outcome after it: `["delay:30", "success"]`
//!   is one run that stays running 30 s and then passes.
//!
//! ## A failure staged by its log, on a node, fixed by an edit
//!
//! ```toml
//! [families.demo-fp4-b200-vllm]
//! # Fails with an OOM on node b200-dgx-07 until the benchmark script at the
//! # run's head lowers the memory fraction; then passes with baseline numbers.
//! smoke = [{ outcome = "failure", node = "b200-dgx-07",
//!            log_lines = ["torch.OutOfMemoryError: CUDA out of memory"],
//!            passes_when = { file = "benchmarks/single_node/fixed_seq_len/demo_fp4_b200_vllm.sh",
//!                            contains = "--gpu-memory-utilization 0.90" } }]
//! ```
//!
//! - `log_lines` (failures and successes): lines every failed job of the
//!   run prints (`GET .../actions/jobs/{id}/logs`), after a line naming its
//!   node; at most 200, each one line of at most 2,000 characters.
//! - `node`: the runner every job of the run lands on, served as the job's
//!   `runner_name`: letters, digits, `-`, `_`, `.`.
//! - `passes_when = { file, contains }` (not on a success): the run passes
//!   instead, with baseline numbers and on the same node, when `file`
//!   (repository-relative) at the run's head commit contains `contains`.
//!   With the step last in its list, every run fails until the edit lands.
//! - An infrastructure conclusion starts no job that prints: a node's own
//!   failure is staged as `failure` with its `node` and `log_lines`.
//!
//! ## A regression staged at a tag
//!
//! ```toml
//! [families.demo-fp8-b200-vllm-nightly]
//! # From nightly-c onward the image is 20% slower and starts answering later;
//! # nightly-a and nightly-b (and any tag not listed) behave as scripted.
//! regression = { tags = ["nightly-a", "nightly-b", "nightly-c", "nightly-d"], from = "nightly-c", throughput = 0.8, ttft = 1.3 }
//! ```
//!
//! - `families.<name>.regression`: looked up like the lists (full family,
//!   config key, `*`; the first found). It applies to every run of the
//!   family, smoke and sweep, whose image carries `from` or a later tag.
//! - The image is the family's `image` in the master config at the run's
//!   head (for a dispatched smoke: at `inputs.ref` when given), as the real
//!   workflow reads it; its tag is what follows the last `:` of the name,
//!   without any `@digest`.
//! - `tags` (required): the track's tags, oldest first; the simulator has
//!   no ordering of its own, the script states it. Tags are unique, with no
//!   space, `:` or `@`.
//! - `from` (required): the first tag with the regression, one of `tags`.
//! - `outcome` (optional): what affected runs end with instead of their
//!   step's (`failure`, `success`, `infra…`; not `delay`).
//! - `throughput`, `ttft`, `tpot`, `score` (optional): factors in (0, 100]
//!   multiplied into the step's own. A regression with neither an outcome
//!   nor a factor stages nothing and is an error.
//!
//! # What a run uploads
//!
//! - success: per benchmark job, as the templates upload them (`<R>` is the
//!   job's result name): single node `bmk_<R>` (`agg_<R>.json`, a
//!   fixed-seq-len row) or `bmk_agentic_<R>` (`<R>.json`, an AgentX row);
//!   multi node one job per sweep line, `bmk_<R>` with one
//!   `agg_<R>_conc<C>.json` per point or `bmk_agentic_<R>` with
//!   `<R>_conc<C>.json`; per family that ran evals `eval_<EXP>_<R>` (multi
//!   node `eval_<R>`); `results_bmk/agg_bmk.json` (all rows);
//!   `eval_results_all/agg_eval_all.json`.
//! - success with `partial`: the same, but only the first half of the point
//!   rows (a green run whose artifacts lack points; check-final's case).
//! - failure: nothing, or with `partial` the first half of the point rows and
//!   their `results_bmk`.
//! - infrastructure failure: nothing.
//! - every non-infrastructure sweep run also uploads
//!   `klaud-sweep-manifest/sweep_manifest.json` (`head` = the exact run head,
//!   `run-id`, `run-attempt`, `full-sweep` = the PR carries a full-sweep label)
//!   when its seeded `run-sweep.yml` (or a workflow it calls) has an
//!   `actions/upload-artifact` step that can be named so, as only some
//!   InferenceX versions do; without workflow files, always.
//!
//! # Jobs
//!
//! A run lists its jobs as GitHub names those of the real workflows
//! ([`jobs`]): bookkeeping jobs (`get-jobs`; `check-changelog`, `setup`),
//! one benchmark job per point (single node) or sweep line (multi node),
//! an eval job per family that runs evals, then the collect jobs. The
//! benchmark and eval jobs end one by one, spread evenly over the run's
//! `delay`, each uploading its own `bmk_*` / `eval_*` artifact when it ends
//! (so a reader sees rows appear while the run is in progress); the
//! run-level aggregates come when the run ends, the sweep manifest with
//! `setup`. In a failed run the jobs whose points produced no row fail.
//! Infrastructure failures show one job named after the run.
//!
//! Numbers are deterministic per family and point and independent of the
//! image: multipliers of 1.0 reproduce the baseline API ([`baseline_router`])
//! exactly.

pub mod gate;
pub mod jobs;
pub mod points;
pub mod producer;
pub mod results;
mod results_api;
pub mod reuse;
mod runner;
pub mod script;

use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use tokio::task::JoinHandle;

pub use results_api::{
    DEFAULT_NAMES, ModelNames, Publication, Published, RunOf, Sweep, baseline_router,
    baseline_router_with, tables,
};
pub use script::{
    Conclusion, InfraKind, Multipliers, Regression, RunKind, Script, ScriptError, Step,
};

use crate::github::GithubState;

/// How often the runner looks at the state by default.
pub const DEFAULT_POLL: Duration = Duration::from_millis(100);

/// Decisions kept for [`CiSim::events`]; older ones are dropped so a
/// long-running sandbox stays small.
pub const EVENTS_CAPACITY: usize = 10_000;

/// Sweep labels that make a sweep a full sweep (see configs/README.md#what-klaud-reads-from-the-benchmark-repositorys-workflows).
pub const FULL_SWEEP_LABELS: &[&str] = &[
    "full-sweep-enabled",
    "non-canary-full-sweep-enabled",
    "full-sweep-fail-fast",
    "full-sweep-fail-fast-no-canary",
];

/// What the simulator decided for one run, for tests and the demo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CiEvent {
    /// `owner/name`.
    pub repo: String,
    pub run_id: u64,
    pub run_attempt: u64,
    pub kind: RunKind,
    /// The family whose script was used; `None` when none was found.
    pub family: Option<String>,
    /// 0-based index of this run among the family's runs of this kind.
    pub attempt_index: usize,
    /// The conclusion it will get.
    pub conclusion: String,
    /// Why the run fails when no family was found.
    pub note: String,
}

/// A running CI simulator; it stops when dropped.
pub struct CiSim {
    task: JoinHandle<()>,
    events: Arc<StdMutex<Vec<CiEvent>>>,
}

impl CiSim {
    /// Starts the runner over `state` with the default poll interval. Must be
    /// called inside a Tokio runtime.
    pub fn spawn(state: GithubState, script: Script) -> Self {
        Self::spawn_with_poll(state, script, DEFAULT_POLL)
    }

    /// Starts the runner polling every `poll`.
    pub fn spawn_with_poll(state: GithubState, script: Script, poll: Duration) -> Self {
        let events = Arc::new(StdMutex::new(Vec::new()));
        let runner = runner::Runner::new(state, script, events.clone());
        let task = tokio::spawn(runner.run(poll.max(Duration::from_millis(1))));
        Self { task, events }
    }

    /// The decisions so far (at most [`EVENTS_CAPACITY`]), oldest first.
    pub fn events(&self) -> Vec<CiEvent> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Stops the runner; runs still in progress stay `in_progress`.
    pub fn stop(self) {
        drop(self);
    }
}

impl Drop for CiSim {
    fn drop(&mut self) {
        self.task.abort();
    }
}
