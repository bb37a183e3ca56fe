//! The daemon loop behind `klaud serve` (and `klaud demo`): planner waves on
//! the cron schedule, a reconcile pass every `reconcile_interval` (or when the
//! webhook wakes it) that resumes this instance's candidates and renews their
//! claims' leases, and a [`StatusSnapshot`] published after every pass.
//!
//! Every pass is one [`run_wave`](crate::wave_adapters::run_wave) per repository: a
//! scheduled wave may start new candidates, a reconcile pass may not (it
//! still resumes, heartbeats and recovers expired claims). Passes never sleep inside the engine, so a
//! shutdown request is honoured between steps: the current pass finishes,
//! the stores are flushed, and claims stay leased so another instance can
//! take over after their lease expires.

use klaud_lifecycle::BoxFuture;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use klaud_claims::{ClaimBook, Claimant, Clock, SystemClock};
use klaud_lifecycle::baseline::BaselineSource;
use klaud_lifecycle::engine::{CandidateRecord, EngineConfig, Journal, RepairHook, Step};
use klaud_planner::plan::{BlockKind, FamilyPlan, PlanOptions, ReleaseRule, Status};
use klaud_planner::registry::RegistryClient;
use klaud_planner::tracks::TrackRule;
use tokio::sync::{Notify, watch};

use super::schedule::WaveSchedule;
use crate::dashboard::{
    BudgetSample, CandidateRow, ClockSkewRow, EventRow, FamilyRow, GithubPauseRow, OutcomeRow,
    RateBudgetRow, RepositoryStatus, StatusSnapshot,
};
use crate::wave_adapters::{WaveError, WaveOptions, WaveSummary, run_wave_told};
use klaud_github::Github;
use klaud_store::{Event, EventKind, Store};

/// How many errors the dashboard keeps.
const MAX_ERRORS: usize = 20;
/// How many outcomes per repository the dashboard shows.
const MAX_OUTCOMES: usize = 50;

/// One benchmark repository served by this instance: its forge and its own
/// journal namespace.
pub struct RepoService {
    /// The identity-checked forge for this repository.
    pub forge: Github,
    /// This repository's candidate journal.
    pub journal: Arc<dyn Journal>,
    /// The store behind the journal, when there is one: base blob cache,
    /// event log, flushed on shutdown.
    pub store: Option<Store>,
}

/// What the daemon does and how often.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    /// This instance (claim owner).
    pub claimant: Claimant,
    /// Engine settings (owner run, lease, labels, budgets).
    pub engine: EngineConfig,
    /// When planner waves fire.
    pub schedule: WaveSchedule,
    /// Run a planner wave right away instead of waiting for the first fire.
    pub wave_on_start: bool,
    /// Time between reconcile passes.
    pub reconcile_interval: Duration,
    /// Most unfinished candidates per repository.
    pub concurrency: usize,
    /// Most new candidates per wave (before the concurrency bound).
    pub max_candidates: usize,
    /// A newer tag must be at least this old.
    pub min_age: Duration,
    /// Families whose candidate finished this recently are not planned again.
    pub cooldown: Duration,
    /// Configured tag tracks.
    pub rules: Vec<TrackRule>,
    /// Configured release tracks.
    pub release_rules: Vec<ReleaseRule>,
    /// Image repository → upstream source repository.
    pub upstream: BTreeMap<String, String>,
    /// Most tags of one track ordered by creation time
    /// ([`PlanOptions::max_timed_tags`]).
    pub max_timed_tags: usize,
    /// Poll interval inside a pass (only used when `pass_wait` is not zero).
    pub poll: Duration,
    /// How long one pass keeps polling running workflows before it returns.
    pub pass_wait: Duration,
    /// The configuration's `[[ignore]]` rules (the dashboard's and the
    /// closed PRs' join them on each pass).
    pub ignore: Vec<klaud_planner::ignore::IgnoreRule>,
}

/// Why the daemon could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// No repository to serve.
    #[error("no repository to serve: pass --repo OWNER/NAME or set github.repository")]
    NoRepository,
    /// Flushing a store on shutdown failed.
    #[error("flushing the store of {repo}: {detail}")]
    Flush { repo: String, detail: String },
}

/// Which kind of pass to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    Wave,
    Reconcile,
}

/// The daemon: repositories, clients and the snapshot feed.
pub struct Daemon {
    repos: Vec<RepoService>,
    registry: RegistryClient,
    baseline: Box<dyn BaselineSource>,
    repair: Option<Box<dyn RepairHook>>,
    settings: ServeSettings,
    feed: watch::Sender<Arc<StatusSnapshot>>,
    /// Web page of each repository (`owner/name` → URL) for the dashboard;
    /// `https://github.com/owner/name` unless set.
    web_urls: BTreeMap<String, String>,
    sink: Option<Arc<dyn crate::story::StepSink>>,
    /// Reads of the engines' source repositories (the bump's commit range,
    /// the release-versus-nightly proof), as `klaud wave` does.
    upstream: Option<Arc<klaud_github::upstream::GithubUpstream>>,
    /// Sign-off verification: the webhook's queue and the eval bars.
    signoff: Option<(crate::signoff::SignoffQueue, BTreeMap<String, f64>)>,
    /// This machine's clock: schedules and the dashboard read it, leases
    /// read it corrected to each repository's GitHub time.
    clock: Arc<dyn Clock>,
}

/// How many rate-budget samples the dashboard chart keeps (one a minute:
/// six hours).
const MAX_BUDGET_SAMPLES: usize = 360;

/// Mutable state of the loop that the snapshot needs.
#[derive(Default)]
struct LoopState {
    waves: u64,
    next_wave: Option<DateTime<Utc>>,
    families: BTreeMap<String, Vec<FamilyPlan>>,
    /// Each repository's dashboard issue, once known.
    dashboard_issues: BTreeMap<String, String>,
    /// Each repository's sick nodes, as its last pass read them.
    sick_nodes: BTreeMap<String, Vec<klaud_lifecycle::playbook::sick::SickNodeRow>>,
    errors: VecDeque<EventRow>,
    announced: BTreeSet<String>,
    planning: bool,
    budget_history: VecDeque<BudgetSample>,
    signoffs: crate::signoff::SignoffWatch,
    /// Repositories whose clock skew was logged (once until it is back
    /// within the margin).
    skew_reported: BTreeSet<String>,
}

impl Daemon {
    /// A daemon over `repos`; snapshots go to `feed`.
    pub fn new(
        repos: Vec<RepoService>,
        registry: RegistryClient,
        baseline: Box<dyn BaselineSource>,
        repair: Option<Box<dyn RepairHook>>,
        settings: ServeSettings,
        feed: watch::Sender<Arc<StatusSnapshot>>,
    ) -> Result<Self, ServeError> {
        if repos.is_empty() {
            return Err(ServeError::NoRepository);
        }
        // One client serves every repository, so the breakers saved in any
        // of their stores apply (the longest trip of a host wins).
        for store in repos.iter().filter_map(|r| r.store.as_ref()) {
            crate::wave_adapters::restore_breaker(&registry, store);
        }
        Ok(Self {
            repos,
            registry,
            baseline,
            repair,
            settings,
            feed,
            web_urls: BTreeMap::new(),
            sink: None,
            upstream: None,
            signoff: None,
            clock: Arc::new(SystemClock),
        })
    }

    /// Reads time from `clock` instead of the system's (a test that must
    /// see a lease run out moves it instead of waiting).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Verifies CODEOWNER sign-offs after every pass: those `queue` holds
    /// (announced by the webhook), then those written after Klaud's last
    /// verdict on an open pull request (the catch-up).
    pub fn with_signoff(
        mut self,
        queue: crate::signoff::SignoffQueue,
        eval_bars: BTreeMap<String, f64>,
    ) -> Self {
        self.signoff = Some((queue, eval_bars));
        self
    }

    /// Reads upstream source repositories through `upstream` in every wave:
    /// each bump gets its commit range (count and compare link) and a
    /// nightly may move to a release only with the upstream proof.
    pub fn with_upstream(mut self, upstream: klaud_github::upstream::GithubUpstream) -> Self {
        self.upstream = Some(Arc::new(upstream));
        self
    }

    /// Links `repository` (`owner/name`) to `url` on the dashboard (a
    /// GitHub Enterprise host, the sandbox's pages).
    pub fn with_web_url(mut self, repository: &str, url: impl Into<String>) -> Self {
        self.web_urls.insert(repository.to_owned(), url.into());
        self
    }

    /// Tells `sink` every visible candidate step and the end of each pass
    /// (the terminal of `klaud serve` and `klaud demo`).
    pub fn with_sink(mut self, sink: Arc<dyn crate::story::StepSink>) -> Self {
        self.sink = Some(sink);
        self
    }

    /// The repositories served.
    pub fn repos(&self) -> &[RepoService] {
        &self.repos
    }

    /// The registry client (its request counts are on the dashboard).
    pub fn registry(&self) -> &RegistryClient {
        &self.registry
    }

    /// The baseline source.
    pub fn baseline(&self) -> &dyn BaselineSource {
        self.baseline.as_ref()
    }

    /// A fresh feed (initial, empty snapshot) for [`Daemon::new`].
    pub fn feed() -> (
        watch::Sender<Arc<StatusSnapshot>>,
        watch::Receiver<Arc<StatusSnapshot>>,
    ) {
        watch::channel(Arc::new(StatusSnapshot::default()))
    }

    /// Runs until `shutdown` turns true (or its sender is dropped). The
    /// current pass always finishes; claims are left leased.
    pub fn run<'f>(
        &'f self,
        wake: Arc<Notify>,
        mut shutdown: watch::Receiver<bool>,
    ) -> BoxFuture<'f, Result<(), ServeError>> {
        Box::pin(async move {
            let mut state = LoopState::default();
            for repo in &self.repos {
                // Errors recorded by an earlier run stay visible after a restart.
                if let Some(store) = &repo.store {
                    match store.recent_events(MAX_ERRORS) {
                        Ok(events) => state.errors.extend(
                            events
                                .into_iter()
                                .filter(|e| e.event.kind == EventKind::Error)
                                .map(|e| EventRow {
                                    at: Some(e.at),
                                    message: e.event.message,
                                }),
                        ),
                        Err(e) => tracing::warn!(error = %e, "cannot read the event log"),
                    }
                }
                // Outcomes reached before this start are history, not news.
                if let Ok(records) = repo.journal.list().await {
                    state.announced.extend(
                        records
                            .into_iter()
                            .filter(|r| r.step == Step::Done)
                            .map(|r| r.candidate.to_string()),
                    );
                }
            }
            state.errors.truncate(MAX_ERRORS);
            state.next_wave = if self.settings.wave_on_start {
                Some(self.clock.now())
            } else {
                self.settings.schedule.next_after(self.clock.now())
            };
            // The page is useful before the first (possibly long) wave ends.
            self.publish(&mut state).await;
            if !self.settings.wave_on_start {
                // Until the first scheduled wave (hours away) the page shows a
                // plan made without claiming anything.
                for repo in &self.repos {
                    if *shutdown.borrow() {
                        break;
                    }
                    self.dry_plan(repo, &mut state).await;
                }
                self.publish(&mut state).await;
            }
            loop {
                if *shutdown.borrow() {
                    break;
                }
                let pass = match state.next_wave {
                    Some(at) if at <= self.clock.now() => Pass::Wave,
                    _ => Pass::Reconcile,
                };
                if pass == Pass::Wave {
                    state.planning = true;
                    self.publish(&mut state).await;
                }
                for repo in &self.repos {
                    if *shutdown.borrow() {
                        break;
                    }
                    self.pass(repo, pass, &mut state, &shutdown).await;
                }
                state.planning = false;
                if pass == Pass::Wave {
                    state.waves += 1;
                    // Computed after the wave so a long wave never fires twice.
                    state.next_wave = self.settings.schedule.next_after(self.clock.now());
                }
                self.publish(&mut state).await;
                let reconcile = tokio::time::sleep(self.settings.reconcile_interval);
                let until_wave = state
                    .next_wave
                    .and_then(|at| (at - self.clock.now()).to_std().ok())
                    .unwrap_or(Duration::MAX);
                let wave = tokio::time::sleep(until_wave.min(Duration::from_secs(86_400 * 365)));
                tokio::select! {
                    () = reconcile => {}
                    () = wave => {}
                    () = wake.notified() => tracing::debug!("woken by the webhook"),
                    changed = shutdown.changed() => {
                        if changed.is_err() {
                            break;
                        }
                    }
                }
            }
            tracing::info!("shutting down: claims stay leased until they expire");
            for repo in &self.repos {
                if let Some(store) = &repo.store {
                    store.flush().await.map_err(|e| ServeError::Flush {
                        repo: repo.forge.repo(),
                        detail: e.to_string(),
                    })?;
                }
            }
            Ok(())
        })
    }

    /// One wave or reconcile pass over one repository, inside one visit
    /// of its dashboard issue (its ticked boxes steer the plan, and it
    /// shows the pass's end). Failures are logged and shown; the next pass
    /// resumes.
    async fn pass(
        &self,
        repo: &RepoService,
        pass: Pass,
        state: &mut LoopState,
        stop: &watch::Receiver<bool>,
    ) {
        let name = repo.forge.repo();
        let records = match repo.journal.list().await {
            Ok(records) => records,
            Err(e) => {
                self.error(repo, state, format!("{name}: journal: {e}"));
                return;
            }
        };
        let visit = crate::dashboard_issue::Visit {
            base_branch: self.settings.engine.base_branch.clone(),
            cooldown: self.settings.cooldown,
            web_dashboard: None,
            wave: pass == Pass::Wave,
            playbook: self.settings.engine.playbook.clone(),
            repo: self.settings.engine.repo.clone(),
            cache: repo.store.clone(),
        };
        let mut full = false;
        let (result, issue, nodes) = crate::dashboard_issue::around_wave(
            &repo.forge,
            repo.journal.as_ref(),
            self.clock.as_ref(),
            visit,
            async |steering| {
                let options = self.wave_options(repo, pass, steering, &records, stop);
                full = options.lifecycle.plan.max_candidates == 0;
                run_wave_told(
                    &repo.forge,
                    repo.journal.as_ref(),
                    &self.registry,
                    self.baseline.as_ref(),
                    self.repair.as_deref(),
                    options,
                    self.sink.as_deref(),
                )
                .await
            },
        )
        .await;
        if let Some(issue) = issue {
            state.dashboard_issues.insert(name.clone(), issue.html_url);
        }
        if let Some(nodes) = nodes {
            state.sick_nodes.insert(name.clone(), nodes.rows);
        }
        self.note_wave(repo, pass, full, result, state).await;
        self.announce(repo, state).await;
        if let Some((queue, bars)) = &self.signoff {
            let announced = queue.take(&name);
            let lines = state.signoffs.pass(&repo.forge, announced, bars).await;
            for line in lines {
                match line {
                    Ok(done) => tracing::info!(repo = %name, "{done}"),
                    Err(e) => self.error(repo, state, e.to_string()),
                }
            }
        }
    }

    /// What the pass's wave left for the dashboard page and the log: the
    /// plan's families (or a dry plan when no slot was free), skips, and
    /// candidates stopped by an error.
    async fn note_wave(
        &self,
        repo: &RepoService,
        pass: Pass,
        full: bool,
        result: Result<WaveSummary, WaveError>,
        state: &mut LoopState,
    ) {
        let name = repo.forge.repo();
        match result {
            Ok(summary) => {
                if !summary.families.is_empty() {
                    state
                        .families
                        .insert(name.clone(), summary.families.clone());
                } else if pass == Pass::Wave && full {
                    // No free slot: the wave planned nothing, but the page
                    // still shows what is stale.
                    self.dry_plan(repo, state).await;
                }
                for (id, why) in &summary.skipped {
                    tracing::info!(repo = %name, candidate = %id, why, "skipped");
                }
                for c in &summary.candidates {
                    if let Some(status) = c.status.as_deref()
                        && status.starts_with("stopped:")
                    {
                        self.error(repo, state, format!("{name}: {}: {status}", c.candidate));
                    }
                }
            }
            Err(e) => self.error(repo, state, format!("{name}: {pass:?} failed: {e}")),
        }
    }

    /// What a pass's wave plans and may do: the configuration, with the
    /// dashboard issue's ignores, run-now requests and undone declines,
    /// and as many new candidates as free slots (none on a reconcile pass).
    fn wave_options<'a>(
        &'a self,
        repo: &'a RepoService,
        pass: Pass,
        steering: &crate::dashboard_issue::Steering,
        records: &[klaud_lifecycle::engine::CandidateRecord],
        stop: &watch::Receiver<bool>,
    ) -> WaveOptions<'a> {
        // A record still at `Claim` lost the claim race (occupied family)
        // and holds nothing: it must not take a concurrency slot.
        let unfinished = records
            .iter()
            .filter(|r| !matches!(r.step, Step::Done | Step::Claim))
            .count();
        let mut plan = PlanOptions::new(self.clock.now());
        plan.ignore =
            crate::dashboard_issue::rules_in_force(&self.settings.ignore, Some(steering), records);
        plan.run_first = steering.run_first();
        plan.min_age = self.settings.min_age;
        plan.max_candidates = match pass {
            Pass::Wave => self
                .settings
                .max_candidates
                .min(self.settings.concurrency.saturating_sub(unfinished)),
            Pass::Reconcile => 0,
        };
        plan.rules = self.settings.rules.clone();
        plan.release_rules = self.settings.release_rules.clone();
        plan.upstream = self.settings.upstream.clone();
        plan.max_timed_tags = self.settings.max_timed_tags;
        plan.compare = self
            .upstream
            .as_deref()
            .map(|u| u as &dyn klaud_planner::plan::UpstreamCompare);
        WaveOptions {
            lifecycle: klaud_lifecycle::wave::WaveSettings {
                claimant: self.settings.claimant.clone(),
                engine: EngineConfig {
                    dashboard_issue: steering.number().or(self.settings.engine.dashboard_issue),
                    undone_declines: steering.undone_declines(),
                    ..self.settings.engine.clone()
                },
                plan,
                poll: self.settings.poll,
                wait: self.settings.pass_wait,
                cooldown: self.settings.cooldown,
                stop: Some(stop.clone()),
            },
            upstream: self.upstream.as_deref(),
            cache: repo.store.as_ref(),
            checkout: None,
            clock: self.clock.as_ref(),
        }
    }

    /// Plans `repo` without claiming anything (the dashboard's view before
    /// the first wave, and when every slot is taken).
    async fn dry_plan(&self, repo: &RepoService, state: &mut LoopState) {
        let name = repo.forge.repo();
        state.planning = true;
        self.publish(state).await;
        let result = crate::wave_adapters::base_checkout(
            &repo.forge,
            &self.settings.engine.base_branch,
            &self.settings.engine.repo,
            repo.store.as_ref(),
        )
        .await;
        match result {
            Ok((_base, _dir, repository)) => {
                let mut options = PlanOptions::new(self.clock.now());
                options.min_age = self.settings.min_age;
                options.max_candidates = 0;
                options.rules = self.settings.rules.clone();
                options.release_rules = self.settings.release_rules.clone();
                options.upstream = self.settings.upstream.clone();
                options.max_timed_tags = self.settings.max_timed_tags;
                options.creation_times = repo
                    .store
                    .as_ref()
                    .map(|s| s as &dyn klaud_planner::plan::CreationTimes);
                let report =
                    klaud_planner::plan::plan(&repository, &self.registry.session(), &options)
                        .await;
                state.families.insert(name, report.families);
            }
            Err(e) => self.error(repo, state, format!("{name}: planning failed: {e}")),
        }
        state.planning = false;
    }

    /// Logs, keeps and stores an error (messages come from error types that
    /// never carry credentials).
    fn error(&self, repo: &RepoService, state: &mut LoopState, message: String) {
        tracing::warn!(error = %message, "daemon pass");
        if let Some(store) = &repo.store {
            let mut event = Event::new(EventKind::Error, message.clone());
            event.repository = Some(repo.forge.repo());
            if let Err(e) = store.append_event(&event) {
                tracing::warn!(error = %e, "cannot record the error event");
            }
        }
        state.errors.push_front(EventRow {
            at: Some(self.clock.now()),
            message,
        });
        state.errors.truncate(MAX_ERRORS);
    }

    /// Records each newly reached outcome once in the store's event log.
    async fn announce(&self, repo: &RepoService, state: &mut LoopState) {
        let Ok(records) = repo.journal.list().await else {
            return;
        };
        for rec in records.into_iter().filter(|r| r.step == Step::Done) {
            if !state.announced.insert(rec.candidate.to_string()) {
                continue;
            }
            let outcome = rec
                .ending
                .as_ref()
                .map(|e| e.outcome.to_string())
                .unwrap_or_default();
            tracing::info!(repo = %repo.forge.repo(), candidate = %rec.candidate, outcome, "candidate finished");
            if let Some(store) = &repo.store {
                let event = Event {
                    kind: EventKind::Outcome,
                    repository: Some(repo.forge.repo()),
                    candidate: Some(rec.candidate.to_string()),
                    message: format!("{} ended {outcome}", rec.family),
                    link: rec.pull_url.clone(),
                };
                if let Err(e) = store.append_event(&event) {
                    tracing::warn!(error = %e, "cannot record the outcome event");
                }
            }
        }
    }

    /// Builds and sends the snapshot.
    async fn publish(&self, state: &mut LoopState) {
        let mut repositories = Vec::new();
        let mut budgets = Vec::new();
        let mut pauses = Vec::new();
        let mut skews = Vec::new();
        for repo in &self.repos {
            repositories.push(self.repo_status(repo, state).await);
            // Leases are kept on GitHub's time, so a skew is harmless to
            // the claims; it is reported because it means this machine's
            // clock is wrong for everything else (logs, schedules).
            let name = repo.forge.repo();
            match repo.forge.clock_skew() {
                Some(skew) if skew.abs() > self.settings.engine.lease_margin => {
                    if state.skew_reported.insert(name.clone()) {
                        tracing::warn!(
                            repo = %name,
                            skew_seconds = skew.num_seconds(),
                            "this machine's clock differs from GitHub's by more than the lease \
                             margin; leases are kept on GitHub's time"
                        );
                    }
                    skews.push(ClockSkewRow {
                        repository: name,
                        seconds: skew.num_seconds(),
                    });
                }
                _ => {
                    state.skew_reported.remove(&name);
                }
            }
            if let Some(pause) = repo.forge.secondary_pause() {
                pauses.push(GithubPauseRow {
                    repository: repo.forge.repo(),
                    until: Some(pause.until),
                    route: pause.route,
                    writes_only: pause.writes_only,
                });
            }
            for b in repo.forge.rate_budgets() {
                budgets.push(RateBudgetRow {
                    resource: if self.repos.len() > 1 {
                        format!("{} {}", repo.forge.repo(), b.resource)
                    } else {
                        b.resource.clone()
                    },
                    limit: b.limit,
                    remaining: b.remaining,
                    reset: DateTime::from_timestamp(b.reset_unix, 0),
                });
            }
        }
        if let Some(core) = budgets.iter().find(|b| b.resource == "core") {
            let now = self.clock.now();
            // One sample a minute: the latest reading within a minute
            // replaces the previous one.
            if state
                .budget_history
                .back()
                .is_some_and(|s| now - s.at < chrono::TimeDelta::minutes(1))
            {
                state.budget_history.pop_back();
            }
            state.budget_history.push_back(BudgetSample {
                at: now,
                remaining: core.remaining,
                limit: core.limit,
            });
            while state.budget_history.len() > MAX_BUDGET_SAMPLES {
                state.budget_history.pop_front();
            }
        }
        let snapshot = StatusSnapshot {
            generated_at: Some(self.clock.now()),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            bot_login: self
                .repos
                .first()
                .map(|r| r.forge.bot_login().to_owned())
                .unwrap_or_default(),
            repositories,
            github_budget: budgets,
            github_pauses: pauses,
            clock_skews: skews,
            registry_requests: self.registry.counts(),
            registry_quotas: self.registry.pull_quotas(),
            registry_waits: self.registry.breaker_state().hosts,
            waves_total: state.waves,
            next_wave: state.next_wave,
            recent_errors: state.errors.iter().cloned().collect(),
            planning: state.planning,
            budget_history: state.budget_history.iter().cloned().collect(),
        };
        self.feed.send_replace(Arc::new(snapshot));
    }

    async fn repo_status(&self, repo: &RepoService, state: &LoopState) -> RepositoryStatus {
        let name = repo.forge.repo();
        let families = state
            .families
            .get(&name)
            .map(|fs| fs.iter().map(family_row).collect())
            .unwrap_or_default();
        let clock = repo.forge.clock_on(self.clock.as_ref());
        let book = ClaimBook::new(&repo.forge, &clock, self.settings.claimant.clone());
        let claims = match crate::dashboard::claim_rows(&book).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(repo = %name, error = %e, "cannot list claims for the dashboard");
                Vec::new()
            }
        };
        let records = repo.journal.list().await.unwrap_or_default();
        let mut done: Vec<&CandidateRecord> =
            records.iter().filter(|r| r.step == Step::Done).collect();
        done.sort_by_key(|r| std::cmp::Reverse(r.updated_at));
        let outcomes = done
            .iter()
            .filter_map(|r| OutcomeRow::of(r))
            .take(MAX_OUTCOMES)
            .collect();
        let mut candidates: Vec<CandidateRow> = records.iter().map(CandidateRow::of).collect();
        candidates.sort_by(|a, b| a.family.cmp(&b.family));
        let url = self
            .web_urls
            .get(&name)
            .cloned()
            .unwrap_or_else(|| repo_web_url(&name));
        let dashboard_issue =
            state
                .dashboard_issues
                .get(&name)
                .map(|url| crate::dashboard::LinkRow {
                    label: "dashboard issue".into(),
                    url: url.clone(),
                });
        let sick_nodes = state.sick_nodes.get(&name).cloned().unwrap_or_default();
        RepositoryStatus {
            name,
            url,
            families,
            claims,
            candidates,
            outcomes,
            experiments: crate::dashboard::experiment_rows(&records),
            dashboard_issue,
            sick_nodes,
        }
    }
}

fn repo_web_url(name: &str) -> String {
    format!("https://github.com/{name}")
}

fn family_row(f: &FamilyPlan) -> FamilyRow {
    // Stale at least since the chosen newer image was made.
    let stale_hours = f
        .candidate
        .as_ref()
        .filter(|_| matches!(f.status, Status::StaleNewer | Status::StalePruned))
        .and_then(|c| c.time)
        .map(|t| (Utc::now() - t).num_hours().max(0));
    FamilyRow {
        family: f.family.clone(),
        id: f.id.clone(),
        // A blocked family (retired, duplicate, occupied) shows the block:
        // whatever the registry says, it is not bumped.
        status: match &f.blocked {
            Some(b) => b.kind.as_str().to_owned(),
            None => serde_json::to_value(f.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_else(|| format!("{:?}", f.status)),
        },
        current: f.current.clone(),
        candidate: f.candidate.as_ref().map(|c| c.image.to_string()),
        stale_hours,
        // A readiness block is decided by the wave, not the registry: its
        // reason (which points lack a published baseline) leads.
        reasons: f
            .blocked
            .iter()
            .filter(|b| b.kind == BlockKind::ReadinessBlocked)
            .map(|b| b.reason.clone())
            .chain(f.reasons.iter().cloned())
            .collect(),
    }
}

/// Resolves when SIGTERM or SIGINT arrives; then flips `shutdown` to true.
pub async fn shutdown_on_signal(shutdown: Arc<watch::Sender<bool>>) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; Ctrl-C only");
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
    tracing::info!("signal received: finishing the current step");
    let _ = shutdown.send(true);
}

/// The dashboard routes, plus `POST /webhook` when a secret is configured.
pub fn http_router(
    feed: crate::dashboard::SnapshotFeed,
    webhook: Option<super::webhook::WebhookState>,
) -> axum::Router {
    let router = crate::dashboard::router(feed);
    match webhook {
        Some(state) => router.merge(super::webhook::router(state)),
        None => router,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_daemon_without_repositories_is_refused() {
        let registry = RegistryClient::new(Default::default()).expect("registry");
        let settings = ServeSettings {
            claimant: Claimant::new(uuid::Uuid::from_u128(1)),
            engine: EngineConfig::new(1),
            schedule: WaveSchedule::parse("0 */6 * * *", "UTC").expect("schedule"),
            wave_on_start: false,
            reconcile_interval: Duration::from_secs(60),
            concurrency: 2,
            max_candidates: 5,
            min_age: Duration::from_secs(86_400),
            cooldown: Duration::ZERO,
            rules: Vec::new(),
            release_rules: Vec::new(),
            upstream: BTreeMap::new(),
            max_timed_tags: klaud_planner::plan::DEFAULT_MAX_TIMED_TAGS,
            poll: Duration::from_secs(5),
            pass_wait: Duration::ZERO,
            ignore: Vec::new(),
        };
        let (tx, _rx) = Daemon::feed();
        let result = Daemon::new(
            Vec::new(),
            registry,
            Box::new(crate::results_client::NoBaseline),
            None,
            settings,
            tx,
        );
        assert!(matches!(result, Err(ServeError::NoRepository)));
    }
}
