//! `klaud demo`: the whole sandbox in-process (GitHub simulator seeded from
//! `configs/demo`, registry simulator from `configs/demo-registry.json`, the
//! CI simulator running `configs/demo-ci.toml` on the runs the seed's own
//! `.github/workflows/` start, the baseline API), then
//! waves of the real lifecycle against it until every candidate has an
//! outcome, and a summary with the PR URLs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use klaud_claims::Claimant;
use klaud_lifecycle::engine::{EngineConfig, Journal, MemoryJournal};
use klaud_planner::plan::PlanOptions;
use klaud_planner::registry::{RegistryClient, RegistryConfig};
use serde::Serialize;

use tokio::sync::watch;

use super::CliError;

mod maintainer;
pub mod stats;
use klaud_github::{Credential, ForgeConfig, Github, RetryPolicy, Secret};
use klaud_sandbox::ci::Script;
use klaud_sandbox::github::LogEntry;
use klaud_sandbox::stack::{BOT_TOKEN, SandboxStack};
use klaud_service::daemon::schedule::WaveSchedule;
use klaud_service::daemon::serve::{Daemon, RepoService, ServeSettings};
use klaud_service::wave_adapters::{CandidateSummary, WaveOptions, run_wave};
use klaud_service::{HttpBaselineSource, StoreJournal};
use klaud_store::Store;

/// Arguments of `klaud demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print one JSON object (`candidates`, each with `family`, `image`,
    /// `outcome`, `phase`, `pull_request`, `runs`, `repairs`; `waves`; and
    /// `workflows`, the seed's workflow files that drive the CI simulator).
    #[arg(long)]
    json: bool,
    /// Also print GitHub request figures to stderr: per candidate from
    /// claim to receipt (polls apart, next to the target, the limit and the
    /// floor), per
    /// pass outside the steps, the whole demo and one idle pass.
    #[arg(long)]
    stats: bool,
    /// Exit once every candidate has an outcome and print the summary
    /// (default: keep serving the dashboard until Ctrl-C).
    #[arg(long)]
    exit_when_done: bool,
    /// Dashboard address (port 0 picks a free one).
    #[arg(long, default_value = klaud_service::dashboard::DEFAULT_LISTEN, value_name = "ADDR")]
    dashboard: String,
    /// With `--exit-when-done`: give up after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout_secs: u64,
    /// Directory of the sample repository (default: `configs/demo`).
    #[arg(long)]
    seed: Option<PathBuf>,
    /// Registry seed (default: `configs/demo-registry.json`).
    #[arg(long)]
    registry_seed: Option<PathBuf>,
    /// CI script (default: `configs/demo-ci.toml`).
    #[arg(long)]
    ci: Option<PathBuf>,
    /// Keep the journal in this directory (default: in memory).
    #[arg(long)]
    store: Option<PathBuf>,
    /// A klaud.toml whose `[[experiments]]` the demo runs (default:
    /// `configs/demo-klaud.toml`: three variants of the multi-node family).
    #[arg(long)]
    config: Option<PathBuf>,
}

/// `configs/<name>` under the working directory, else under the source
/// tree this binary was built from.
fn default_path(name: &str) -> PathBuf {
    let local = Path::new("configs").join(name);
    if local.exists() {
        return local;
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../configs")
        .join(name)
}

/// The demo's result.
#[derive(Debug, Serialize)]
pub struct DemoReport {
    /// Every candidate, by family.
    pub candidates: Vec<CandidateSummary>,
    /// Waves run.
    pub waves: usize,
    /// The seed's `.github/workflows/*.yml` that decide which CI runs exist
    /// (empty: the simulator's built-in InferenceX behaviour).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub workflows: Vec<String>,
    /// GitHub request figures, with `--stats`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<DemoRequests>,
}

/// `--stats` in `--json`: the same figures stderr gets.
#[derive(Debug, Clone, Serialize)]
pub struct DemoRequests {
    /// The whole demo.
    pub all: RequestFigures,
    /// Each candidate's lifecycle, claim to receipt, cut from the
    /// simulator's request log at step boundaries ([`stats`]).
    pub candidates: Vec<CandidateRequests>,
    /// What a validated lifecycle without a failed run may cost, polls
    /// excluded.
    pub limit: usize,
    /// What a validated lifecycle with a failed run may cost above its
    /// floor, polls excluded.
    pub failed_run_allowance: usize,
    /// What a validated lifecycle should cost, polls excluded.
    pub target: usize,
    /// Each pass's requests outside the candidates' steps that name no
    /// candidate (planning, claim listing, overlap, audit).
    pub passes: Vec<stats::PassRequests>,
    /// One wave with nothing to do, after the candidates finished.
    pub idle_pass: RequestFigures,
    /// Candidates that ended validated.
    pub validated: usize,
    /// The first hour of a demo left running: its candidates once, then an
    /// idle pass every reconcile interval.
    pub hour: HourEstimate,
    /// The registry side: a plan of the demo's masters.
    pub registry: RegistryFigures,
}

/// `--stats`: pulls and requests per registry host of a plan of the demo's
/// masters against its registry, cold (a fresh client, as every plan in
/// the Actions deployment) and warm (the same client again), next to the
/// minimum; and the build figure.
#[derive(Debug, Clone, Serialize)]
pub struct RegistryFigures {
    /// The cold plan, by host.
    pub cold: Vec<super::plan::HostFigures>,
    /// The warm plan, by host.
    pub warm: Vec<super::plan::HostFigures>,
    /// A cold `cargo build --release` of this binary, as last measured
    /// (a running binary cannot time its own cold build).
    pub build: &'static str,
}

/// The last measured cold build of this binary, kept in
/// `configs/cold-build.txt` (the plan bench prints the same file);
/// configs/README.md "Performance" says how it is measured.
pub const BUILD_FIGURE: &str = include_str!("../../../../configs/cold-build.txt");

/// One candidate's requests in `--stats`.
#[derive(Debug, Clone, Serialize)]
pub struct CandidateRequests {
    /// Candidate id.
    pub candidate: klaud_claims::CandidateId,
    /// Family string (`configs/<file>:<key>`).
    pub family: String,
    /// Experiment variant, if it is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// Outcome (`validated`, …), if it ended.
    pub outcome: Option<String>,
    /// Its requests.
    #[serde(flatten)]
    pub requests: stats::LifecycleRequests,
}

/// What the first hour of `klaud demo` costs against GitHub's limits.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct HourEstimate {
    /// Reconcile passes in an hour at the demo's interval.
    pub passes: u64,
    /// Requests charged to the primary (`core`) limit.
    pub charged: u64,
    /// Every request, 304s included.
    pub total: u64,
    /// The sandbox token's primary limit per hour (GitHub's 5,000).
    pub budget: u64,
}

impl HourEstimate {
    /// The demo's figures extrapolated to an hour.
    pub fn of(all: RequestFigures, idle: RequestFigures, interval: Duration) -> Self {
        let passes = 3600 / interval.as_secs().max(1);
        Self {
            passes,
            charged: all.charged as u64 + passes * idle.charged as u64,
            total: all.total as u64 + passes * idle.total as u64,
            budget: klaud_sandbox::github::state::DEFAULT_RATE_LIMIT,
        }
    }
}

/// How often the demo's daemon reconciles: an interval a real deployment
/// without webhooks could use (the default is 60 s); each pass keeps
/// polling running workflows for up to [`DEMO_PASS_WAIT`], every
/// [`DEMO_POLL`], so a candidate still finishes in about a minute.
pub const DEMO_RECONCILE: Duration = Duration::from_secs(10);
/// How long one demo pass keeps polling running workflows.
pub const DEMO_PASS_WAIT: Duration = Duration::from_secs(30);
/// How often a demo pass looks at running workflows.
pub const DEMO_POLL: Duration = Duration::from_secs(2);

/// GitHub request figures from the simulator's log.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct RequestFigures {
    /// Every API request.
    pub total: usize,
    /// Requests charged to the primary rate limit: all but the conditional
    /// reads GitHub answered 304 Not Modified.
    pub charged: usize,
    /// Requests that are not reads.
    pub writes: usize,
    /// Writes that count against GitHub's content-creation limit.
    pub content_creating: usize,
}

impl RequestFigures {
    /// Adds `other`'s counts.
    pub fn add(&mut self, other: RequestFigures) {
        self.total += other.total;
        self.charged += other.charged;
        self.writes += other.writes;
        self.content_creating += other.content_creating;
    }

    /// Counts a slice of the request log.
    pub fn of(log: &[LogEntry]) -> Self {
        let mut f = Self::default();
        for e in log {
            if e.path.starts_with("/_sandbox") {
                continue;
            }
            f.total += 1;
            if e.status != 304 {
                f.charged += 1;
            }
            if is_write(e) {
                f.writes += 1;
            }
            if e.method == "POST" && is_content_creating(&e.path) {
                f.content_creating += 1;
            }
        }
        f
    }
}

/// Whether a logged request writes: every method but reads, and the
/// GraphQL endpoint (Klaud sends it only the draft mutations).
pub fn is_write(e: &LogEntry) -> bool {
    (e.method != "GET" && e.method != "HEAD") || e.path == "/graphql"
}

/// GitHub's secondary limit counts requests that create content: comments,
/// PRs, commits and git objects, refs, dispatches.
fn is_content_creating(path: &str) -> bool {
    let path = path.split('?').next().unwrap_or(path);
    path.ends_with("/comments")
        || path.ends_with("/pulls")
        || path.ends_with("/git/blobs")
        || path.ends_with("/git/trees")
        || path.ends_with("/git/commits")
        || path.ends_with("/git/refs")
        || path.ends_with("/dispatches")
}

/// Runs the command.
pub fn run(args: Args) -> Result<(), CliError> {
    let DemoInputs {
        seed,
        registry_text,
        script,
        experiments,
        hunt,
    } = DemoInputs::read(&args)?;
    let runtime = super::runtime()?;
    let (mut report, figures) = runtime
        .block_on(demo(
            &args,
            &seed,
            &registry_text,
            script,
            experiments,
            hunt,
        ))
        .map_err(CliError::failure)?;
    if args.stats {
        report.requests = Some(DemoRequests {
            all: figures.all,
            candidates: figures.candidates.clone(),
            limit: stats::LIFECYCLE_LIMIT,
            failed_run_allowance: stats::FAILED_RUN_ALLOWANCE,
            target: stats::LIFECYCLE_TARGET,
            passes: figures.passes.clone(),
            idle_pass: figures.idle,
            validated: figures.validated,
            hour: HourEstimate::of(figures.all, figures.idle, DEMO_RECONCILE),
            registry: figures.registry.clone(),
        });
    }
    if args.json {
        let mut text = serde_json::to_string_pretty(&report).map_err(anyhow::Error::from)?;
        text.push('\n');
        super::emit(&text);
    } else {
        let summary = klaud_service::WaveSummary {
            base: String::new(),
            candidates: report.candidates.clone(),
            skipped: Vec::new(),
            answered: Vec::new(),
            blocked: Vec::new(),
            families: Vec::new(),
            unreadable: Vec::new(),
            stopped_by: None,
        };
        if !super::output::quiet() {
            super::emit(&super::wave_report::table(&summary));
        }
        super::emit(&format!(
            "done: {} after {} wave(s)\n",
            super::story::tally(&summary),
            report.waves
        ));
    }
    if args.stats {
        print_stats(&figures);
        print_totals(&figures);
    }
    let done =
        !report.candidates.is_empty() && report.candidates.iter().all(|c| c.outcome.is_some());
    if done || !args.exit_when_done {
        Ok(())
    } else {
        Err(CliError::failure(anyhow::anyhow!(
            "some candidates have no outcome after {} s",
            args.timeout_secs
        )))
    }
}

/// What the demo runs on: the seed repository, the registry's images, the
/// CI script and the configuration's experiments and hunt settings.
struct DemoInputs {
    seed: PathBuf,
    registry_text: String,
    script: Script,
    experiments: Vec<klaud_lifecycle::experiment::ExperimentSpec>,
    hunt: klaud_lifecycle::hunt::HuntSettings,
}

impl DemoInputs {
    fn read(args: &Args) -> Result<DemoInputs, CliError> {
        let seed = args.seed.clone().unwrap_or_else(|| default_path("demo"));
        let registry_seed = args
            .registry_seed
            .clone()
            .unwrap_or_else(|| default_path("demo-registry.json"));
        let ci = args
            .ci
            .clone()
            .unwrap_or_else(|| default_path("demo-ci.toml"));
        let registry_text = std::fs::read_to_string(&registry_seed)
            .with_context(|| format!("reading {}", registry_seed.display()))?;
        let script =
            Script::from_file(&ci).map_err(|e| anyhow::anyhow!("{}: {e}", ci.display()))?;
        let config = args
            .config
            .clone()
            .unwrap_or_else(|| default_path("demo-klaud.toml"));
        let demo_config = crate::config::Config::load(&config)
            .map_err(|e| CliError::bad_input(anyhow::anyhow!("{e}")))?;
        let hunt = demo_config.hunt.settings();
        let experiments = demo_config
            .experiment_specs()
            .map_err(|e| CliError::bad_input(anyhow::anyhow!("{}: {e}", config.display())))?;
        if !seed.is_dir() {
            return Err(CliError::bad_input(anyhow::anyhow!(
                "{} is not a directory",
                seed.display()
            )));
        }
        Ok(DemoInputs {
            seed,
            registry_text,
            script,
            experiments,
            hunt,
        })
    }
}

/// The whole demo's GitHub requests, averaged per validated candidate, an
/// idle wave's and an hour's estimate.
fn print_totals(figures: &Figures) {
    let (all, idle, validated) = (figures.all, figures.idle, figures.validated);
    let hour = HourEstimate::of(all, idle, DEMO_RECONCILE);
    let per = |n: usize| {
        if validated == 0 {
            0.0
        } else {
            n as f64 / validated as f64
        }
    };
    eprintln!(
        "GitHub requests of the whole demo: {} total ({} charged, the rest free 304s), {} writes, \
         {} content-creating; averaged over the {validated} validated candidates (failed ones' \
         requests included): {:.1} total, {:.1} charged, {:.1} writes, {:.1} content-creating; \
         one idle wave afterwards: {} total, {} charged (minimum 0), {} writes; \
         an hour left running ({} passes, one every {} s): {} charged of the {}/h core budget ({} total)",
        all.total,
        all.charged,
        all.writes,
        all.content_creating,
        per(all.total),
        per(all.charged),
        per(all.writes),
        per(all.content_creating),
        idle.total,
        idle.charged,
        idle.writes,
        hour.passes,
        DEMO_RECONCILE.as_secs(),
        hour.charged,
        hour.budget,
        hour.total,
    );
}

/// The demo's registry client: every registry host the demo images name
/// goes to the simulator.
pub fn sandbox_registry(url: &str) -> anyhow::Result<RegistryClient> {
    let mut config = RegistryConfig::default();
    let url = url::Url::parse(url)?;
    for host in ["docker.io", "nvcr.io", "hub.docker.com", "ghcr.io"] {
        config.mirrors.insert(host.into(), url.clone());
    }
    config.retry_base_delay = Duration::from_millis(5);
    config.max_retries = 2;
    Ok(RegistryClient::new(config)?)
}

/// Connects to the stack's GitHub simulator as the bot. Its writes go
/// without GitHub's one-second gap but within the content-creation limits
/// the simulator enforces ([`klaud_github::WritePace::SANDBOX`]).
pub async fn sandbox_forge(stack: &SandboxStack) -> anyhow::Result<Github> {
    Ok(Github::connect(ForgeConfig {
        api_url: stack.github.url(),
        repo: stack.repo.clone(),
        bot_login: stack.bot.clone(),
        credential: Credential::Token(Secret::new(BOT_TOKEN)),
        retry: RetryPolicy {
            max_attempts: 3,
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_millis(50),
            max_wait: Duration::from_secs(2),
        },
    })
    .await?
    .with_write_pace(klaud_github::WritePace::SANDBOX))
}

/// Every demo starts a new sandbox, so the candidates a kept store holds
/// point at pull requests, runs and claims of one that is gone: resuming
/// them would only poll "not found". The demo says so once and starts
/// over; the store's other contents (instance id, cache, events) stay.
async fn forget_gone_sandbox(store: &Store, dir: &std::path::Path) -> anyhow::Result<()> {
    let old =
        store.list::<klaud_lifecycle::engine::CandidateRecord>(klaud_store::trees::CANDIDATES)?;
    if old.is_empty() {
        return Ok(());
    }
    eprintln!(
        "klaud demo: the store at {} holds {} candidate(s) of an earlier demo, whose sandbox \
         is gone with it; this demo starts over with a new sandbox and forgets them",
        dir.display(),
        old.len()
    );
    for (key, _) in old {
        store.remove(klaud_store::trees::CANDIDATES, &key)?;
    }
    store.flush().await?;
    Ok(())
}

/// Engine settings for the sandbox: the defaults with short waits.
pub fn sandbox_engine(owner_run: u64) -> EngineConfig {
    let mut engine = EngineConfig::new(owner_run);
    engine.dispatch_grace = chrono::TimeDelta::seconds(5);
    // Sandbox runs take seconds: live reports are edited at that pace.
    engine.live_report_interval = Some(chrono::TimeDelta::seconds(2));
    engine
}

/// The demo family whose cluster is busy: it shows a `capacity-deferred`.
pub const BUSY_CLUSTER: &str = "mi355x-demo";

/// [`sandbox_engine`] gated by the stack's cluster-status API, with
/// [`BUSY_CLUSTER`] busy from the start (the demo shows one deferral; the
/// family is tried again in every later wave).
fn demo_engine(owner_run: u64, stack: &SandboxStack) -> anyhow::Result<EngineConfig> {
    let mut engine = sandbox_engine(owner_run);
    let source = klaud_planner::capacity::HttpCapacity::new(
        &stack.capacity_url,
        klaud_planner::capacity::DEFAULT_PATH,
        klaud_sandbox::stack::CAPACITY_KEY.to_owned(),
        Duration::from_secs(5),
    )?;
    engine.capacity = Some(Arc::new(klaud_planner::capacity::CapacityGate {
        source: Box::new(source),
        overrides: BTreeMap::new(),
    }));
    Ok(engine)
}

/// Every stale demo family in one wave.
fn demo_plan() -> PlanOptions<'static> {
    let mut plan = PlanOptions::new(chrono::Utc::now());
    plan.max_candidates = 10;
    plan
}

/// What `--stats` measured.
struct Figures {
    registry: RegistryFigures,
    all: RequestFigures,
    idle: RequestFigures,
    validated: usize,
    candidates: Vec<CandidateRequests>,
    passes: Vec<stats::PassRequests>,
}

/// Plans the demo's masters twice against its registry with one fresh
/// client: the first plan is cold, the second warm.
async fn registry_figures(seed: &Path, registry_url: &str) -> anyhow::Result<RegistryFigures> {
    let repository = klaud_planner::repo::Repository::open(seed)?;
    let client = sandbox_registry(registry_url)?;
    let options = demo_plan();
    let cold = klaud_planner::plan::plan(&repository, &client.session(), &options).await;
    let warm = klaud_planner::plan::plan(&repository, &client.session(), &options).await;
    Ok(RegistryFigures {
        cold: super::plan::hosts(&cold),
        warm: super::plan::hosts(&warm),
        build: BUILD_FIGURE.trim_end(),
    })
}

/// What `rec`'s lifecycle left on GitHub: its runs and their artifacts as
/// the simulator holds them, its reuse line among the PR's comments.
async fn scenario_of(
    github: &klaud_sandbox::github::state::GithubState,
    repo: &str,
    rec: &klaud_lifecycle::engine::CandidateRecord,
) -> stats::Scenario {
    use klaud_lifecycle::model::{AttemptKind, AttemptStatus};
    let mut s = stats::Scenario::default();
    let mut heads = std::collections::BTreeSet::new();
    for a in &rec.attempts {
        if !a.head.is_empty() {
            heads.insert(a.head.as_str());
        }
        let Some(run) = &a.run else { continue };
        match (run.attempt > 1, a.kind) {
            (true, _) => s.reruns += 1,
            (false, AttemptKind::FinalSweep) => s.labelled += 1,
            (false, _) => s.dispatched += 1,
        }
        if matches!(a.status, AttemptStatus::Passed | AttemptStatus::Failed) {
            s.judged += 1;
            s.failed += usize::from(a.status == AttemptStatus::Failed);
            s.run_level_artifacts += github
                .artifact_names(repo, run.id)
                .await
                .iter()
                .filter(|n| {
                    klaud_lifecycle::artifacts::ArtifactKind::of(n)
                        .is_some_and(|k| !k.is_per_point())
                })
                .count();
        }
    }
    s.commits = heads.len();
    s.labels = usize::from(s.labelled > 0);
    s.ready = rec
        .ending
        .as_ref()
        .is_some_and(|e| e.outcome == klaud_lifecycle::model::Outcome::Validated);
    if let Some(n) = rec.pull {
        s.reuse_line = github
            .comment_bodies(repo, n.get())
            .await
            .iter()
            .any(|b| b.trim_start().starts_with("/reuse-sweep-run"));
    }
    s
}

/// The per-candidate and per-pass figures, each next to its limit.
fn print_stats(f: &Figures) {
    eprintln!(
        "Registry requests of a cold plan of the demo's masters (a fresh client):\n{}\
         and of a warm one (the same client again):\n{}\
         Build: {}",
        super::plan::render_hosts(&f.registry.cold),
        super::plan::render_hosts(&f.registry.warm),
        f.registry.build
    );
    eprintln!(
        "GitHub requests per candidate, claim to receipt (cut from the simulator's request log at \
         step boundaries; polls = steps that changed nothing and wrote nothing):"
    );
    for c in &f.candidates {
        print_lifecycle(c);
    }
    print_passes(&f.passes);
}

/// How one lifecycle's charged requests stand against its bound: a
/// validated one without a failed run against the target and the limit,
/// one with a failed run against its floor plus the allowance.
fn lifecycle_verdict(outcome: &str, r: &stats::LifecycleRequests) -> String {
    let over = |bound: usize| {
        if r.work.charged <= bound {
            "ok".to_owned()
        } else {
            format!("over by {}", r.work.charged - bound)
        }
    };
    if outcome != "validated" {
        "limit applies to validated ones".to_owned()
    } else if r.scenario.failed > 0 {
        // A failed run's log and extra report are read and written on
        // top of its floor: held to the floor plus an allowance, and
        // shown against the target like every validated lifecycle.
        format!(
            "target {}: {}; with a failed run: {} above its floor {}, limit floor + {}: {}",
            stats::LIFECYCLE_TARGET,
            over(stats::LIFECYCLE_TARGET),
            r.work.charged.saturating_sub(r.floor),
            r.floor,
            stats::FAILED_RUN_ALLOWANCE,
            over(r.floor + stats::FAILED_RUN_ALLOWANCE)
        )
    } else {
        format!(
            "target {}: {}, limit {}: {}; floor {} from what it left on GitHub",
            stats::LIFECYCLE_TARGET,
            over(stats::LIFECYCLE_TARGET),
            stats::LIFECYCLE_LIMIT,
            over(stats::LIFECYCLE_LIMIT),
            r.floor
        )
    }
}

/// One candidate's line of `--stats`.
fn print_lifecycle(c: &CandidateRequests) {
    let r = &c.requests;
    let outcome = c.outcome.as_deref().unwrap_or("unfinished");
    let name = c.family.rsplit(':').next().unwrap_or(&c.family);
    let variant = c
        .variant
        .as_deref()
        .map(|v| format!(" [Variant {v}]"))
        .unwrap_or_default();
    let verdict = lifecycle_verdict(outcome, r);
    eprintln!(
        "  {name}{variant} ({outcome}): {} steps; lifecycle (not polls) {} charged ({verdict}), \
         {} total, {} writes, of which outside steps {} charged / {} total; \
         polls ({} steps) {} charged (minimum 0), {} total; \
         live-report refreshes while a run goes on ({} steps) {} charged, {} total \
         (with them: {} charged)",
        r.steps,
        r.work.charged,
        r.work.total,
        r.work.writes,
        r.outside_steps.charged,
        r.outside_steps.total,
        r.poll_steps,
        r.polls.charged,
        r.polls.total,
        r.refresh_steps,
        r.refreshes.charged,
        r.refreshes.total,
        r.work.charged + r.refreshes.charged,
    );
}

/// The passes' own requests, outside the candidates' steps.
fn print_passes(passes: &[stats::PassRequests]) {
    eprintln!(
        "GitHub requests per pass outside the candidates' steps, naming no candidate \
         (charged/total; a pass that claims nothing new: minimum 0 charged):"
    );
    for p in passes {
        let ct = |x: &RequestFigures| format!("{}/{}", x.charged, x.total);
        eprintln!(
            "  pass {}: {} — plan (base ref, commits, trees, blobs, files) {}, claims {}, \
             overlap (open PRs, files) {}, audit (compare) {}, comments {}, other {}, \
             validated PRs kept mergeable {}",
            p.pass,
            ct(&p.all),
            ct(&p.plan),
            ct(&p.claims),
            ct(&p.overlap),
            ct(&p.audit),
            ct(&p.comments),
            ct(&p.other),
            ct(&p.upkeep),
        );
    }
}

async fn demo(
    args: &Args,
    seed: &Path,
    registry_seed: &str,
    script: Script,
    experiments: Vec<klaud_lifecycle::experiment::ExperimentSpec>,
    hunt: klaud_lifecycle::hunt::HuntSettings,
) -> anyhow::Result<(DemoReport, Figures)> {
    let stack = start_sandbox(seed, registry_seed, script).await?;
    let engine = EngineConfig {
        experiments,
        hunt,
        ..demo_engine(
            u64::try_from(chrono::Utc::now().timestamp()).unwrap_or(1),
            &stack,
        )?
    };
    let workflows = stack.state().workflow_files(&stack.repo).await;
    let (journal, store) = open_journal(args).await?;
    let claimant = Claimant::new(uuid::Uuid::new_v4());
    let (listener, bound, pages) = listen(args, &stack).await?;
    let story = Arc::new(super::story::TerminalStory::new(if args.json {
        super::story::Stream::Stderr
    } else {
        super::story::Stream::Stdout
    }));
    // The story, with the request log marked at every step and pass.
    let cutter = Arc::new(stats::RequestCutter::new(
        Arc::clone(&story) as Arc<dyn klaud_service::story::StepSink>,
        stack.state().clone(),
    ));
    let (feed_tx, feed) = Daemon::feed();
    let app = klaud_service::daemon::serve::http_router(feed.clone(), None);
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let parts = DaemonParts {
        journal: Arc::clone(&journal),
        store,
        claimant: claimant.clone(),
        engine: engine.clone(),
        pages: pages.clone(),
        sink: Arc::clone(&cutter) as Arc<dyn klaud_service::story::StepSink>,
    };
    let daemon = demo_daemon(&stack, parts, feed_tx).await?;
    let stop = play_scene(
        &stack,
        WatchEnd {
            exit: args.exit_when_done,
            timeout_secs: args.timeout_secs,
            bound,
            pages,
        },
        feed.clone(),
        Arc::clone(&story),
    );
    let wake = Arc::new(tokio::sync::Notify::new());
    let start = stack.state().requests_recorded();
    daemon.run(wake, stop).await?;
    story.finish();
    server.abort();
    let waves = usize::try_from(feed.borrow().waves_total).unwrap_or(usize::MAX);
    let ran = Ran {
        stack: &stack,
        daemon: &daemon,
        journal: journal.as_ref(),
        cutter: &cutter,
        claimant: &claimant,
        engine: &engine,
        start,
    };
    let (candidates, figures) = measure(args, seed, ran).await?;
    Ok((
        DemoReport {
            candidates,
            waves,
            workflows,
            requests: None,
        },
        figures,
    ))
}

/// The simulated GitHub, registry and results API the demo runs against,
/// one of its clusters busy.
async fn start_sandbox(
    seed: &Path,
    registry_seed: &str,
    script: Script,
) -> anyhow::Result<SandboxStack> {
    let stack = SandboxStack::start(
        "demo/benchmarks",
        "Klaud-Cold",
        seed,
        registry_seed,
        Some(script),
        Duration::from_millis(20),
    )
    .await?;
    stack
        .capacity
        .set_cluster(BUSY_CLUSTER, klaud_sandbox::capacity::ClusterState::Busy);
    Ok(stack)
}

/// The journal the demo's daemon writes: in the store `--store` names
/// (forgetting what a previous sandbox left there), else in memory.
async fn open_journal(args: &Args) -> anyhow::Result<(Arc<dyn Journal>, Option<Store>)> {
    Ok(match &args.store {
        Some(dir) => {
            let store = Store::open(dir)?;
            forget_gone_sandbox(&store, dir).await?;
            (Arc::new(StoreJournal::new(store.clone())), Some(store))
        }
        None => (Arc::new(MemoryJournal::new()), None),
    })
}

/// Binds the dashboard's address and says, as the very first line, where
/// the dashboard and the simulated GitHub's pages are.
async fn listen(
    args: &Args,
    stack: &SandboxStack,
) -> anyhow::Result<(tokio::net::TcpListener, std::net::SocketAddr, String)> {
    let listen: std::net::SocketAddr = args.dashboard.parse().map_err(|_| {
        anyhow::anyhow!(
            "--dashboard {:?} is not an address like 127.0.0.1:8723",
            args.dashboard
        )
    })?;
    klaud_service::dashboard::check_listen(listen, false)?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let bound = listener.local_addr()?;
    // First line, so a newcomer (and a test) can open the page at once.
    let pages = format!("{}/_html/{}", stack.github.url(), stack.repo);
    let line = format!(
        "dashboard: http://{bound}/  <- open this in a browser; its PR and run links open the simulated GitHub ({pages})\n\
         writes: one at a time without the 1 s gap against the sandbox (a shorter pace than GitHub's, for the demo), within the 80 a minute and 500 an hour the sandbox enforces as GitHub does; against GitHub 1 s apart as well ([github] write_gap, writes_per_minute, writes_per_hour)\n"
    );
    if args.json {
        eprint!("{line}");
    } else {
        super::emit(&line);
    }
    Ok((listener, bound, pages))
}

/// What the demo's daemon is built from, besides the sandbox.
struct DaemonParts {
    journal: Arc<dyn Journal>,
    store: Option<Store>,
    claimant: Claimant,
    engine: EngineConfig,
    pages: String,
    sink: Arc<dyn klaud_service::story::StepSink>,
}

/// The daemon `klaud serve` would run, against the sandbox, on the demo's
/// short clock.
async fn demo_daemon(
    stack: &SandboxStack,
    parts: DaemonParts,
    feed_tx: watch::Sender<Arc<klaud_service::dashboard::StatusSnapshot>>,
) -> anyhow::Result<Daemon> {
    let forge = sandbox_forge(stack).await?;
    let registry = sandbox_registry(&stack.registry_url)?;
    let baseline = HttpBaselineSource::new(&stack.baseline_url)?;
    Ok(Daemon::new(
        vec![RepoService {
            forge,
            journal: parts.journal,
            store: parts.store,
        }],
        registry,
        Box::new(baseline),
        None,
        ServeSettings {
            claimant: parts.claimant,
            engine: parts.engine,
            schedule: WaveSchedule::parse("*/5 * * * *", "UTC")?,
            wave_on_start: true,
            reconcile_interval: DEMO_RECONCILE,
            concurrency: 10,
            max_candidates: 10,
            min_age: demo_plan().min_age,
            cooldown: Duration::ZERO,
            rules: Vec::new(),
            release_rules: Vec::new(),
            upstream: BTreeMap::new(),
            max_timed_tags: klaud_planner::plan::DEFAULT_MAX_TIMED_TAGS,
            poll: DEMO_POLL,
            pass_wait: DEMO_PASS_WAIT,
            ignore: Vec::new(),
        },
        feed_tx,
    )?
    .with_web_url(&stack.repo, parts.pages)
    .with_sink(parts.sink))
}

/// Starts the scripted maintainer and the watcher that ends the demo;
/// the daemon stops when the returned receiver says so (or on a signal).
fn play_scene(
    stack: &SandboxStack,
    end: WatchEnd,
    feed: watch::Receiver<Arc<klaud_service::dashboard::StatusSnapshot>>,
    story: Arc<super::story::TerminalStory>,
) -> watch::Receiver<bool> {
    let (stop_tx, stop) = watch::channel(false);
    let stop_tx = Arc::new(stop_tx);
    tokio::spawn(klaud_service::daemon::serve::shutdown_on_signal(
        Arc::clone(&stop_tx),
    ));
    // Once two validated PRs wait for their merge, a scripted maintainer
    // merges one; Klaud keeps the others mergeable.
    let scene = Arc::new(maintainer::Scene::default());
    tokio::spawn(maintainer::play(
        stack.github.url().to_owned(),
        stack.repo.clone(),
        feed.clone(),
        Arc::clone(&story),
        Arc::clone(&scene),
    ));
    tokio::spawn(watch_until_done(end, feed, story, scene, stop_tx));
    stop
}

/// How the demo ends: with `--exit-when-done`, once every candidate has an
/// outcome (or after the timeout); otherwise it stays up and says so.
struct WatchEnd {
    exit: bool,
    timeout_secs: u64,
    bound: std::net::SocketAddr,
    pages: String,
}

/// Follows the daemon's status feed: names the dashboard issue once it is
/// open, lets the scripted maintainer finish, and ends the demo.
async fn watch_until_done(
    end: WatchEnd,
    mut feed: watch::Receiver<Arc<klaud_service::dashboard::StatusSnapshot>>,
    story: Arc<super::story::TerminalStory>,
    scene: Arc<maintainer::Scene>,
    stop_tx: Arc<watch::Sender<bool>>,
) {
    let timeout = if end.exit {
        Duration::from_secs(end.timeout_secs)
    } else {
        Duration::from_secs(86_400 * 365)
    };
    let mut issue_told = false;
    let watch = async {
        while feed.changed().await.is_ok() {
            let snapshot = Arc::clone(&feed.borrow_and_update());
            // Once, as soon as the first pass opened it: where the
            // maintainers' view of Klaud is.
            if !issue_told
                && let Some(issue) = snapshot
                    .repositories
                    .iter()
                    .find_map(|r| r.dashboard_issue.as_ref())
            {
                issue_told = true;
                story.line(&format!(
                    "dashboard issue: {}  <- Klaud's issue in the simulated GitHub: tick a box there to steer it",
                    issue.url
                ));
            }
            let outcomes = !snapshot.repositories.is_empty()
                && snapshot.repositories.iter().all(|r| {
                    !r.candidates.is_empty() && r.candidates.iter().all(|c| c.outcome.is_some())
                });
            let validated = snapshot
                .repositories
                .iter()
                .flat_map(|r| &r.candidates)
                .filter(|c| c.outcome.as_deref() == Some("validated"))
                .count();
            if outcomes && validated < 2 {
                scene.skip();
            }
            if outcomes && scene.done() {
                return true;
            }
        }
        false
    };
    let finished = tokio::time::timeout(timeout, watch).await == Ok(true);
    if end.exit {
        let _ = stop_tx.send(true);
    } else if finished {
        // The closing line of a demo left running: the pages stay, and
        // their addresses have long scrolled away.
        story.close(&format!(
            "done: every candidate has an outcome; the dashboard http://{}/ and the \
             simulated GitHub {} stay up until Ctrl-C",
            end.bound, end.pages
        ));
    }
}

/// What a finished demo is measured from.
struct Ran<'a> {
    stack: &'a SandboxStack,
    daemon: &'a Daemon,
    journal: &'a dyn Journal,
    cutter: &'a stats::RequestCutter,
    claimant: &'a Claimant,
    engine: &'a EngineConfig,
    /// The request log's length when the daemon started.
    start: u64,
}

/// Every candidate's summary, and the figures `--stats` prints: the
/// GitHub requests cut by candidate and pass, an idle wave's, the plans'.
async fn measure(
    args: &Args,
    seed: &Path,
    ran: Ran<'_>,
) -> anyhow::Result<(Vec<CandidateSummary>, Figures)> {
    let Ran { stack, daemon, .. } = ran;
    let (forge, registry, baseline) = (
        &daemon.repos()[0].forge,
        daemon.registry(),
        daemon.baseline(),
    );
    let mut records = Records::read(ran.journal, stack).await?;
    let (first, full) = stack.state().request_log_numbered().await;
    let marks = ran.cutter.marks();
    if args.stats && std::env::var_os("KLAUD_STATS_DETAIL").is_some() {
        eprint!("{}", stats::dump(first, &full, &marks));
    }
    let cut = stats::cut(
        first,
        ran.start,
        &full,
        &marks,
        &records.owners,
        forge.bot_login(),
    );
    let options = || WaveOptions {
        lifecycle: klaud_lifecycle::wave::WaveSettings {
            claimant: ran.claimant.clone(),
            engine: ran.engine.clone(),
            plan: demo_plan(),
            poll: Duration::from_millis(50),
            wait: Duration::from_secs(0),
            cooldown: Duration::ZERO,
            stop: None,
        },
        upstream: None,
        cache: None,
        checkout: None,
        clock: &klaud_claims::SystemClock,
    };
    // The idle figure is a pass with nothing new to do: the first pass after
    // the candidates finished still reads what their last steps changed, so
    // the second one is measured.
    let mut before_idle = full.len();
    if args.stats {
        run_wave(forge, ran.journal, registry, baseline, None, options()).await?;
        before_idle = stack.state().request_log().await.len();
        run_wave(forge, ran.journal, registry, baseline, None, options()).await?;
    }
    let after = stack.state().request_log().await;
    let validated = records
        .all
        .values()
        .filter(|c| c.outcome.as_deref() == Some("validated"))
        .count();
    let candidates = records.per_candidate(cut.candidates);
    let registry = if args.stats {
        registry_figures(seed, &stack.registry_url).await?
    } else {
        RegistryFigures {
            cold: Vec::new(),
            warm: Vec::new(),
            build: BUILD_FIGURE.trim_end(),
        }
    };
    let figures = Figures {
        registry,
        all: RequestFigures::of(&full),
        idle: RequestFigures::of(&after[before_idle.min(after.len())..]),
        validated,
        candidates,
        passes: cut.passes,
    };
    let mut summaries: Vec<CandidateSummary> = records.all.into_values().collect();
    summaries.sort_by(|a, b| a.family.cmp(&b.family));
    Ok((summaries, figures))
}

/// The journal's candidates as the figures need them.
struct Records {
    all: BTreeMap<String, CandidateSummary>,
    owners: Vec<stats::CandidatePaths>,
    /// Family, variant and outcome, by candidate.
    named: BTreeMap<klaud_claims::CandidateId, (String, Option<String>, Option<String>)>,
    scenarios: BTreeMap<klaud_claims::CandidateId, stats::Scenario>,
}

impl Records {
    async fn read(journal: &dyn Journal, stack: &SandboxStack) -> anyhow::Result<Records> {
        let mut records = Records {
            all: BTreeMap::new(),
            owners: Vec::new(),
            named: BTreeMap::new(),
            scenarios: BTreeMap::new(),
        };
        for rec in journal.list().await.map_err(|e| anyhow::anyhow!("{e}"))? {
            records
                .all
                .insert(rec.candidate.to_string(), CandidateSummary::of(&rec, None));
            records.owners.push(stats::CandidatePaths {
                candidate: rec.candidate.clone(),
                pull: rec.pull,
                branch: rec.branch.clone(),
                runs: rec
                    .attempts
                    .iter()
                    .filter_map(|a| a.run.as_ref().map(|r| r.id))
                    .collect(),
            });
            records.named.insert(
                rec.candidate.clone(),
                (
                    rec.family.clone(),
                    rec.variant.as_ref().map(|v| v.name.clone()),
                    rec.ending.as_ref().map(|e| e.outcome.to_string()),
                ),
            );
            let scenario = scenario_of(stack.state(), &stack.repo, &rec).await;
            records.scenarios.insert(rec.candidate.clone(), scenario);
        }
        Ok(records)
    }

    /// Each candidate's requests, named, with its scenario and floor.
    fn per_candidate(
        &mut self,
        cut: BTreeMap<klaud_claims::CandidateId, stats::LifecycleRequests>,
    ) -> Vec<CandidateRequests> {
        let mut per_candidate: Vec<CandidateRequests> = cut
            .into_iter()
            .map(|(candidate, mut requests)| {
                let (family, variant, outcome) =
                    self.named.get(&candidate).cloned().unwrap_or_default();
                requests.scenario = self.scenarios.remove(&candidate).unwrap_or_default();
                // The floor is of a validated lifecycle: the claim, the PR and
                // the reports it counts are not all there for the others.
                if outcome.as_deref() == Some("validated") {
                    requests.floor = requests.scenario.floor();
                }
                CandidateRequests {
                    candidate,
                    family,
                    variant,
                    outcome,
                    requests,
                }
            })
            .collect();
        per_candidate.sort_by(|a, b| (&a.family, &a.variant).cmp(&(&b.family, &b.variant)));
        per_candidate
    }
}

#[cfg(test)]
mod tests;
