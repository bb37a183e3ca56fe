//! The one integration-test harness: a builder that starts the sandbox
//! (GitHub, registry, CI, baseline and capacity simulators over loopback)
//! and, unless the test drives the `klaud` binary itself, connects Klaud's
//! octocrab forge and checks out the base branch.
//!
//! ```ignore
//! let env = Harness::demo().script(VALIDATED_SCRIPT).start().await;
//! let target = env.target("demo-fp4-b200-sglang").await;
//! let rec = env.finish(&MemoryJournal::new(), &target).await;
//! ```
//!
//! Defaults ([`Harness::demo`]): the repository [`REPO`] seeded from
//! `configs/demo` on `main`, the bot [`BOT`], the registry from
//! `configs/demo-registry.json`, no CI script (dispatched runs stay
//! queued), a CI poll of 10 ms, the engine settings of
//! `klaud::cli::demo::sandbox_engine` with owner run [`OWNER_RUN`], and the
//! claimant [`owner`].
//!
//! Two ends: [`HarnessBuilder::start`] gives a [`Harness`] (stack, forge,
//! base checkout, baseline client, engine config, a journal), and
//! [`HarnessBuilder::start_stack`] only the [`SandboxStack`], for tests
//! that run `klaud` as a process or a daemon and must see GitHub exactly as
//! the seed left it (no preflight, no checkout in the request log).
//!
//! To add a knob: a field on [`HarnessBuilder`] with its default in
//! [`Harness::demo`], a method that sets it, and its use in
//! [`HarnessBuilder::stack`] or [`HarnessBuilder::start`]. Tests tweak the
//! engine config or the wave options after `start` through the public
//! fields rather than through new knobs.
//!
//! This module is the only place the tests call `SandboxStack::start` and
//! `klaud::cli::demo::sandbox_*`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use klaud_claims::{CandidateId, Claimant, Clock, ShiftedClock};
use klaud_github::Github;
use klaud_lifecycle::engine::{
    CandidateRecord, Engine, EngineConfig, Forge as LifecycleForge, Journal, MemoryJournal,
    Progress, RepairHook, Step, Target,
};
use klaud_lifecycle::report::find_records;
use klaud_planner::plan::{PlanOptions, plan};
use klaud_planner::registry::RegistryClient;
use klaud_planner::repo::Repository;
use klaud_sandbox::ci::Script;
use klaud_sandbox::github::Permission;
use klaud_sandbox::stack::SandboxStack;
use klaud_service::wave_adapters::{WaveOptions, WaveSummary, run_wave};
use klaud_service::{GithubLifecycle, HttpBaselineSource, materialize};

use super::{Person, REPO_ROOT};

/// The sandbox repository of the demo.
pub const REPO: &str = "demo/benchmarks";
/// The bot login the sandbox grants write access.
pub const BOT: &str = "Klaud-Cold";
/// The default owner run id of the engine config.
pub const OWNER_RUN: u64 = 4242;

/// The repository root as a path.
pub fn root() -> &'static Path {
    Path::new(REPO_ROOT)
}

/// The demo repository the sandbox is seeded from by default.
pub fn demo_seed() -> PathBuf {
    root().join("configs/demo")
}

/// The demo registry seed (JSON text).
pub fn demo_registry_seed() -> String {
    std::fs::read_to_string(root().join("configs/demo-registry.json")).expect("registry seed")
}

/// The CI script of the demo (`configs/demo-ci.toml`).
pub fn demo_ci() -> Script {
    Script::from_file(&root().join("configs/demo-ci.toml")).expect("script")
}

/// The default claimant of the harness's engine.
pub fn owner() -> Claimant {
    Claimant::new(uuid::Uuid::from_u128(0x6b6c_6175_6400))
}

/// The sandbox's engine settings (the defaults with short waits) for
/// `owner_run`.
pub fn engine_config(owner_run: u64) -> EngineConfig {
    klaud::cli::demo::sandbox_engine(owner_run)
}

/// A registry client that reaches every mirrored host through the
/// sandbox registry at `url`.
pub fn registry_at(url: &str) -> RegistryClient {
    klaud::cli::demo::sandbox_registry(url).expect("registry")
}

/// Klaud's forge on the stack's GitHub, as the bot (a fresh client: no
/// caches shared with another forge, as after a restart).
pub async fn forge_of(stack: &SandboxStack) -> Github {
    klaud::cli::demo::sandbox_forge(stack).await.expect("forge")
}

/// Writes `dir/klaud.toml` for a `klaud` process on `stack`: the
/// `[github]` section on [`REPO`], then `sections` (TOML text ending in a
/// newline, or empty), then `[lifecycle]` with the stack's baseline API.
/// Returns the file's path.
pub fn write_klaud_toml(stack: &SandboxStack, dir: &Path, sections: &str) -> PathBuf {
    let config = dir.join("klaud.toml");
    std::fs::write(
        &config,
        format!(
            "[github]\napi_url = \"{}\"\nrepository = \"{REPO}\"\n{sections}[lifecycle]\nbaseline_api = \"{}\"\n",
            stack.github.url(),
            stack.baseline_url
        ),
    )
    .expect("config");
    config
}

/// A change [`HarnessBuilder::configure`] makes to the engine config.
type ConfigChange = Box<dyn FnOnce(&mut EngineConfig)>;

/// What the sandbox is started with; see the module doc for the defaults.
pub struct HarnessBuilder {
    seed: PathBuf,
    registry_seed: Option<String>,
    script: Option<Script>,
    poll: Duration,
    owner_run: u64,
    owner: Claimant,
    users: Vec<(String, Option<String>, String, Permission)>,
    configure: Vec<ConfigChange>,
}

/// A sandbox with the demo repository (or another seed), Klaud's forge on
/// it and one checkout of its base branch.
pub struct Harness {
    pub stack: SandboxStack,
    pub forge: Github,
    pub repository: Repository,
    /// The base commit the checkout is of.
    pub base: klaud_claims::CommitSha,
    pub baseline: HttpBaselineSource,
    pub config: EngineConfig,
    /// The claimant engines of [`Harness::engine`] act for.
    pub owner: Claimant,
    /// A journal for tests that keep one for the whole test.
    pub journal: MemoryJournal,
    /// This machine's clock for everything the harness runs (engines,
    /// waves, claim books): a test that must see a lease run out moves it
    /// ahead instead of sleeping. Leaked, so options and engines built
    /// from it do not borrow the harness.
    pub clock: &'static ShiftedClock,
    _dir: tempfile::TempDir,
}

impl Harness {
    /// The builder with the demo defaults.
    pub fn demo() -> HarnessBuilder {
        HarnessBuilder {
            seed: demo_seed(),
            registry_seed: None,
            script: None,
            poll: Duration::from_millis(10),
            owner_run: OWNER_RUN,
            owner: owner(),
            users: Vec::new(),
            configure: Vec::new(),
        }
    }
}

impl HarnessBuilder {
    /// Seeds the repository from `dir` instead of `configs/demo`.
    pub fn seed_dir(mut self, dir: &Path) -> Self {
        self.seed = dir.to_owned();
        self
    }

    /// Seeds the registry from `json` (the registry simulator's format).
    pub fn registry_seed(mut self, json: &str) -> Self {
        self.registry_seed = Some(json.to_owned());
        self
    }

    /// Runs the CI simulator with the script `toml`.
    pub fn script(self, toml: &str) -> Self {
        self.script_opt(Some(toml))
    }

    /// [`HarnessBuilder::script`] when `Some`; `None` leaves runs queued.
    pub fn script_opt(mut self, toml: Option<&str>) -> Self {
        self.script = toml.map(|s| Script::parse("test script", s).expect("script"));
        self
    }

    /// Runs the CI simulator with an already parsed script.
    pub fn ci(mut self, script: Script) -> Self {
        self.script = Some(script);
        self
    }

    /// Runs the CI simulator with `configs/demo-ci.toml`.
    pub fn demo_ci(self) -> Self {
        self.ci(demo_ci())
    }

    /// How often the CI simulator moves runs on.
    pub fn poll(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }

    /// The owner run id of the engine config.
    pub fn owner_run(mut self, run: u64) -> Self {
        self.owner_run = run;
        self
    }

    /// The claimant of [`Harness::engine`].
    pub fn owner(mut self, owner: Claimant) -> Self {
        self.owner = owner;
        self
    }

    /// One more GitHub user with `token` and `permission` on [`REPO`].
    pub fn user(
        mut self,
        login: &str,
        name: Option<&str>,
        token: &str,
        permission: Permission,
    ) -> Self {
        self.users.push((
            login.to_owned(),
            name.map(str::to_owned),
            token.to_owned(),
            permission,
        ));
        self
    }

    /// Changes the engine config before the harness hands it out (for
    /// settings every test of a file shares; one test changes
    /// [`Harness::config`] itself).
    pub fn configure(mut self, change: impl FnOnce(&mut EngineConfig) + 'static) -> Self {
        self.configure.push(Box::new(change));
        self
    }

    async fn stack(&mut self) -> SandboxStack {
        let registry_seed = self.registry_seed.take().unwrap_or_else(demo_registry_seed);
        let stack = SandboxStack::start(
            REPO,
            BOT,
            &self.seed,
            &registry_seed,
            self.script.take(),
            self.poll,
        )
        .await
        .expect("sandbox");
        let state = stack.state();
        for (login, name, token, permission) in &self.users {
            state.add_user(login, name.as_deref(), false).await;
            state.add_token(login, token, None).await.expect("token");
            state
                .set_permission(REPO, login, *permission)
                .await
                .expect("permission");
        }
        stack
    }

    /// Only the simulators: nothing has talked to GitHub yet.
    pub async fn start_stack(mut self) -> SandboxStack {
        self.stack().await
    }

    /// The simulators, Klaud's forge and a checkout of `main`.
    pub async fn start(mut self) -> Harness {
        let stack = self.stack().await;
        let forge = forge_of(&stack).await;
        let base = forge
            .get_ref("refs/heads/main")
            .await
            .expect("read main")
            .expect("main exists")
            .parse::<klaud_claims::CommitSha>()
            .expect("main's head is a sha");
        let dir = tempfile::tempdir().expect("tempdir");
        materialize(&forge, &base, dir.path(), None)
            .await
            .expect("materialize");
        let repository = Repository::open(dir.path()).expect("repository");
        let baseline = HttpBaselineSource::new(&stack.baseline_url).expect("baseline");
        let mut config = engine_config(self.owner_run);
        for change in self.configure.drain(..) {
            change(&mut config);
        }
        Harness {
            stack,
            forge,
            repository,
            base,
            baseline,
            config,
            owner: self.owner,
            journal: MemoryJournal::new(),
            clock: Box::leak(Box::new(ShiftedClock::new())),
            _dir: dir,
        }
    }
}

impl Harness {
    /// A registry client on the sandbox registry.
    pub fn registry(&self) -> RegistryClient {
        registry_at(&self.stack.registry_url)
    }

    /// Someone other than Klaud acting on GitHub with `token`.
    pub fn person(&self, token: &str) -> Person {
        Person::new(&self.stack.github.url(), token, REPO)
    }

    /// An engine for [`Harness::owner`] on the checkout.
    pub fn engine<'a>(
        &'a self,
        lifecycle: &'a dyn LifecycleForge,
        journal: &'a dyn Journal,
        clock: &'a dyn Clock,
    ) -> Engine<'a> {
        self.engine_as(lifecycle, journal, clock, self.owner.clone(), &self.config)
    }

    /// An engine for `who` with `config` on the checkout.
    pub fn engine_as<'a>(
        &'a self,
        lifecycle: &'a dyn LifecycleForge,
        journal: &'a dyn Journal,
        clock: &'a dyn Clock,
        who: Claimant,
        config: &'a EngineConfig,
    ) -> Engine<'a> {
        Engine::new(
            lifecycle,
            journal,
            clock,
            who,
            &self.baseline,
            &self.repository,
            self.base.clone(),
            config,
        )
    }

    /// The target of `key` from a plan of at most 20 candidates.
    pub async fn target(&self, key: &str) -> Target {
        self.target_within(key, 20).await
    }

    /// The target of `key` from a plan of at most `max` candidates (a large
    /// repository has more stale families than the demo).
    pub async fn target_within(&self, key: &str, max: usize) -> Target {
        let registry = self.registry();
        let mut options = PlanOptions::new(chrono::Utc::now());
        options.max_candidates = max;
        let report = plan(&self.repository, &registry.session(), &options).await;
        let selected = report
            .candidates
            .iter()
            .find(|c| c.family.ends_with(&format!(":{key}")))
            .unwrap_or_else(|| panic!("{key} is not planned: {:?}", report.candidates));
        Target {
            family: selected.family.clone(),
            candidate: CandidateId::new(&selected.id).expect("id"),
            image: selected.image.clone(),
            revision: None,
            clock: None,
            not_release_reason: None,
            // As the wave fills it in when a source repository is configured.
            upstream: Some(klaud_lifecycle::report::UpstreamRange {
                repository: "upstream/engine".into(),
                from: "1111111111111111111111111111111111111111".into(),
                to: "2222222222222222222222222222222222222222".into(),
                commits: Some(42),
                compare_url: Some(
                    "https://github.com/upstream/engine/compare/1111111...2222222".into(),
                ),
                audit: None,
            }),
            versions: None,
            variant: None,
        }
    }

    /// Drives to the end (waiting for the CI simulator as needed).
    pub async fn finish(&self, journal: &dyn Journal, target: &Target) -> CandidateRecord {
        self.finish_with(journal, target, None).await
    }

    /// [`Harness::finish`] with a repair hook.
    pub async fn finish_with(
        &self,
        journal: &dyn Journal,
        target: &Target,
        hook: Option<&dyn RepairHook>,
    ) -> CandidateRecord {
        let lifecycle = GithubLifecycle::new(&self.forge);
        let mut engine = self.engine(&lifecycle, journal, self.clock);
        if let Some(h) = hook {
            engine = engine.with_repair(h);
        }
        let mut rec = engine.open_record(target).await.expect("record");
        let started = Instant::now();
        loop {
            match engine.drive(&mut rec, 100).await.expect("drive") {
                Progress::Done(_) => return rec,
                Progress::Skipped(why) => panic!("skipped: {why}"),
                _ if started.elapsed() > Duration::from_secs(60) => {
                    panic!("no end after 60 s: {rec:#?}")
                }
                _ => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    /// Takes `steps` engine steps (a crash after them drops everything);
    /// returns the step reached.
    pub async fn steps(&self, journal: &dyn Journal, target: &Target, steps: usize) -> Step {
        let lifecycle = GithubLifecycle::new(&self.forge);
        let engine = self.engine(&lifecycle, journal, self.clock);
        let mut rec = engine.open_record(target).await.expect("record");
        // Waits do not count: the k-th crash point is the same in every run.
        let mut taken = 0;
        let started = Instant::now();
        while taken < steps && started.elapsed() < Duration::from_secs(60) {
            match engine.step(&mut rec).await.expect("step") {
                Progress::Done(_) => return Step::Done,
                Progress::Waiting(_) => tokio::time::sleep(Duration::from_millis(15)).await,
                _ => taken += 1,
            }
        }
        rec.step
    }

    /// Wave options for `claimant` with `engine`: a plan of at most 20
    /// candidates, a CI poll of 20 ms, no wait, an hour's cooldown and
    /// nothing else configured. Tests change the fields they need.
    pub fn wave_options<'a>(&self, claimant: Claimant, engine: EngineConfig) -> WaveOptions<'a> {
        let mut plan = PlanOptions::new(self.clock.now());
        plan.max_candidates = 20;
        WaveOptions {
            lifecycle: klaud_lifecycle::wave::WaveSettings {
                claimant,
                engine,
                plan,
                poll: Duration::from_millis(20),
                wait: Duration::ZERO,
                cooldown: Duration::from_secs(3600),
                stop: None,
            },
            upstream: None,
            cache: None,
            checkout: None,
            clock: self.clock,
        }
    }

    /// One wave through Klaud's forge, the sandbox registry and baseline.
    pub async fn wave(&self, journal: &dyn Journal, options: WaveOptions<'_>) -> WaveSummary {
        self.wave_repair(journal, None, options).await
    }

    /// [`Harness::wave`] with a repair hook.
    pub async fn wave_repair(
        &self,
        journal: &dyn Journal,
        repair: Option<&dyn RepairHook>,
        options: WaveOptions<'_>,
    ) -> WaveSummary {
        let registry = self.registry();
        run_wave(
            &self.forge,
            journal,
            &registry,
            &self.baseline,
            repair,
            options,
        )
        .await
        .expect("wave")
    }

    /// The open and closed pull requests whose head is `branch`.
    pub async fn pulls(&self, branch: &str) -> Vec<u64> {
        self.stack.state().pulls_for_head(REPO, branch).await
    }

    /// The comment bodies of issue or pull request `number`, in order.
    pub async fn bodies(&self, number: impl Into<u64>) -> Vec<String> {
        let number: u64 = number.into();
        self.stack.state().comment_bodies(REPO, number).await
    }

    /// Pull request `number` as Klaud's forge reads it.
    pub async fn pull(&self, number: impl Into<u64>) -> klaud_github::PullInfo {
        let number: u64 = number.into();
        self.forge.get_pull(number).await.expect("pull")
    }

    /// Successful workflow dispatches in the request log.
    pub async fn dispatches(&self) -> usize {
        self.successful_posts("/dispatches").await
    }

    /// Successful label writes in the request log.
    pub async fn label_writes(&self) -> usize {
        self.successful_posts("/labels").await
    }

    async fn successful_posts(&self, path: &str) -> usize {
        self.stack
            .state()
            .request_log()
            .await
            .iter()
            .filter(|e| e.method == "POST" && e.path.contains(path) && e.status < 300)
            .count()
    }

    /// The claim refs (name, sha).
    pub async fn claims(&self) -> Vec<(String, String)> {
        self.forge
            .list_refs("refs/heads/klaud/claim-")
            .await
            .expect("claims")
    }
}

/// The markers of Klaud's comments among `bodies`, in order.
pub fn markers(bodies: &[String]) -> Vec<String> {
    bodies
        .iter()
        .flat_map(|b| find_records(b).unwrap_or_default())
        .map(|r| r.key.to_string())
        .collect()
}

/// Fails when a marker stands twice.
pub fn assert_unique(markers: &[String]) {
    let mut seen = std::collections::BTreeSet::new();
    for m in markers {
        assert!(seen.insert(m), "duplicate comment {m} in {markers:#?}");
    }
}
