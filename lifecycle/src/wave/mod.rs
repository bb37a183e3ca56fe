//! One wave (see configs/README.md#how-it-works): read the base branch, plan, claim, and drive every
//! candidate of this instance as far as it can go. Running a wave again
//! resumes (from the journal, or from GitHub when the journal is empty) and
//! never duplicates anything.
//!
//! [`Wave::run`] is a fixed sequence of named phases, each a method:
//! [`recover_orphans`](Wave::recover_orphans),
//! [`adopt_held_claims`](Wave::adopt_held_claims), [`plan`](Wave::plan),
//! [`check_readiness`](Wave::check_readiness), [`resume`](Wave::resume),
//! [`refill`](Wave::refill),
//! [`rebuild_lost_records`](Wave::rebuild_lost_records),
//! [`answer_commands`](Wave::answer_commands), [`drive`](Wave::drive) and
//! [`summarize`](Wave::summarize). What a phase learns is carried to the
//! next in a [`Pass`]. The plan options live in the pass, not in the
//! wave: the refill phase changes them while the engine borrows the wave's
//! [`EngineConfig`].
//!
//! The wave talks to GitHub only through the lifecycle [`Forge`] and the
//! ports ([`BaseSource`], [`PullSource`], [`UpstreamSource`],
//! [`PlanMemory`], [`WaveObserver`]); it never reads the store except
//! through the [`Journal`], and it never writes without the engine's
//! ownership proofs.

mod active;
mod lost;
mod ports;
mod summary;
mod targets;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use klaud_claims::{
    CandidateId, ClaimBook, ClaimEntry, Claimant, Clock, HeldClaim, PullNumber, RunCompletion,
    ensure_plannable,
};
use klaud_planner::plan::{BlockKind, Blocked, PlanOptions, PlanReport, plan};
use klaud_planner::registry::{RegistryClient, RegistrySession};
use klaud_planner::repo::Repository;

pub use ports::{
    BaseCheckout, BaseSource, Listed, OpenPulls, PlanMemory, PullSource, UpstreamSource,
    WaveObserver,
};
pub use summary::{BlockedFamily, CandidateSummary, WaveSummary, render_summary};

use crate::BoxFuture;
use crate::baseline::BaselineSource;
use crate::commands::{Answered, Retries, handle_commands};
use crate::engine::{
    CandidateRecord, Engine, EngineConfig, EngineError, Forge, HumanOverlap, Journal, Progress,
    RepairHook, Step, Target,
};
use crate::model::Outcome;
use crate::recover::{
    Orphan, RecoveryContext, open_orphans, settle_recovery_leases, take_over_orphans,
};
use targets::{expand_experiments, held_target, plan_targets};

/// Why a wave stopped.
#[derive(Debug, thiserror::Error)]
pub enum WaveFailure {
    /// A port failed (reading the base commit, the open pull requests):
    /// its own error, for the caller to take back.
    #[error(transparent)]
    Port(Box<dyn std::error::Error + Send + Sync>),
    /// Claims block planning (fail closed) or could not be listed.
    #[error("{0}")]
    Claims(String),
    /// The journal failed.
    #[error("{0}")]
    Journal(String),
}

/// How often a wave re-plans to replace picks whose claim another instance
/// won first.
const REFILL_ROUNDS: usize = 3;

/// How many engine steps one candidate takes in a row before the wave
/// looks at the next (and at the stop signal).
const STEPS_IN_A_ROW: usize = 64;

/// Validated PRs one pass looks after at most: each costs a conditional
/// read (free when nothing changed), and a repository rarely has more open.
const MAX_KEPT_MERGEABLE: usize = 50;

/// How far back a finished PR's activity is looked for commands once its
/// cooldown is over. Passes run hours apart, so a week covers a daemon
/// that was down for days; a command older than that on a PR nobody
/// touched since is not answered (a new comment brings the PR back).
pub const FINISHED_COMMANDS_LOOKBACK: TimeDelta = TimeDelta::days(7);

/// What a wave works with besides its settings.
#[derive(Clone, Copy)]
pub struct WavePorts<'a> {
    /// The repository on GitHub.
    pub forge: &'a dyn Forge,
    /// This instance's candidate records.
    pub journal: &'a dyn Journal,
    /// The time claims, leases, cooldowns and the wait are measured by.
    pub clock: &'a dyn Clock,
    /// Whether an old helper's owner run completed (lease-less claims).
    pub runs: &'a dyn RunCompletion,
    /// The registries the plan asks.
    pub registry: &'a RegistryClient,
    /// The published results the baseline is frozen from.
    pub baseline: &'a dyn BaselineSource,
    /// The repair hook, when one is configured.
    pub repair: Option<&'a dyn RepairHook>,
    /// The base commit and Klaud's branches' files.
    pub base: &'a dyn BaseSource,
    /// The open pull requests (other people's work, Klaud's own PRs).
    pub pulls: &'a dyn PullSource,
    /// Upstream ranges of bumps, when configured.
    pub upstream: Option<&'a dyn UpstreamSource>,
    /// Keeps the registry breaker after each plan, when there is a store.
    pub plans: Option<&'a dyn PlanMemory>,
    /// Where `/klaud retry` requests are kept (`None`: they are refused
    /// as unrecordable, and no request lifts a cooldown).
    pub retries: Option<Retries<'a>>,
    /// Told every visible candidate step and the summary.
    pub observer: Option<&'a dyn WaveObserver>,
}

/// A wave's settings.
pub struct WaveSettings<'a> {
    /// This instance.
    pub claimant: Claimant,
    /// The engine settings (owner run, workflows, labels, budgets).
    pub engine: EngineConfig,
    /// The planner settings (`occupied`, `blocked` and `cooling_down` are
    /// filled in by the wave).
    pub plan: PlanOptions<'a>,
    /// How often to look at running workflows.
    pub poll: Duration,
    /// How long this wave keeps waiting for runs before it returns (a later
    /// wave resumes), measured by the ports' clock.
    pub wait: Duration,
    /// A family whose candidate finished (in this instance's journal) less
    /// than this long ago is not planned again.
    pub cooldown: Duration,
    /// When it turns true the wave stops between steps: the current step
    /// finishes, nothing new starts (the daemon's graceful shutdown).
    pub stop: Option<tokio::sync::watch::Receiver<bool>>,
}

/// One candidate the wave works on: its record, why it is not finished,
/// and whether it was skipped (a claim race lost).
struct Slot {
    rec: CandidateRecord,
    status: Option<String>,
    skip: bool,
    /// The instance-wide failure (credential, store) it stopped on last.
    global: Option<String>,
}

impl Slot {
    fn new(rec: CandidateRecord) -> Self {
        Self {
            rec,
            status: None,
            skip: false,
            global: None,
        }
    }

    /// The candidate stopped on `e`; the next wave resumes from here.
    fn stopped(&mut self, e: &crate::engine::EngineError) {
        self.status = Some(format!("stopped: {e}"));
        self.global = e.global_cause();
    }
}

/// What the phases of one wave learn and hand on (opaque: made by
/// [`Wave::recover_orphans`], used up by [`Wave::summarize`]).
pub struct Pass<'p> {
    plan: PlanOptions<'p>,
    now: DateTime<Utc>,
    cooldown: TimeDelta,
    claims: Vec<ClaimEntry>,
    leases: Vec<ClaimEntry>,
    done: Vec<CandidateRecord>,
    unfinished: Vec<CandidateRecord>,
    orphans: Vec<Orphan>,
    /// Candidates of the orphans taken over.
    recovering: BTreeSet<String>,
    /// Candidates of claims this instance holds (not being recovered).
    ours: BTreeSet<String>,
    held_by_us: Vec<HeldClaim>,
    open_pulls: OpenPulls,
    report: PlanReport,
    targets: Vec<Target>,
    seen: BTreeSet<String>,
    /// The plan's picks whose claim is still to be taken.
    new_picks: BTreeSet<String>,
    /// Picks dropped as readiness-blocked since the last re-plan: slots
    /// the refill gives to the next stale families.
    freed: usize,
    slots: Vec<Slot>,
    skipped: Vec<(String, String)>,
    /// Per candidate whose record could not be opened, the instance-wide
    /// failure it met, if it was one (a full disk fails every open).
    open_failures: Vec<Option<String>>,
    answered: Vec<Answered>,
    overlap_notes: BTreeMap<String, String>,
    /// Klaud's recently active PRs, once listed this pass.
    recently_active: Option<BTreeSet<PullNumber>>,
}

impl Pass<'_> {
    /// `rec` is worked on in a slot this wave, and leaves `done` if it was
    /// there: a finished candidate the plan names again (an experiment's
    /// winner while its siblings are in flight and no cooldown holds the
    /// family) must have one copy in the pass, or the save of one copy
    /// undoes the other's and the upkeep takes its own base merge for a
    /// person's push.
    fn open_slot(&mut self, rec: CandidateRecord) {
        self.done.retain(|r| r.candidate != rec.candidate);
        self.slots.push(Slot::new(rec));
    }

    /// `target`'s record could not be opened: it is skipped this wave.
    fn open_failed(&mut self, target: &Target, e: &crate::engine::EngineError) {
        self.skipped
            .push((target.candidate.as_str().to_owned(), e.to_string()));
        self.open_failures.push(e.global_cause());
    }
}

/// One wave over one repository.
pub struct Wave<'a> {
    ports: WavePorts<'a>,
    claimant: Claimant,
    engine: EngineConfig,
    poll: Duration,
    wait: Duration,
    cooldown: Duration,
    stop: Option<tokio::sync::watch::Receiver<bool>>,
    plan: Option<PlanOptions<'a>>,
    /// A regression hunt's tags, from the wave's registries.
    hunt_tags: crate::hunt::RegistryHuntTags,
}

impl<'a> Wave<'a> {
    /// A wave over `ports` with `options`.
    pub fn new(ports: WavePorts<'a>, options: WaveSettings<'a>) -> Self {
        Self {
            hunt_tags: crate::hunt::RegistryHuntTags {
                registry: ports.registry.clone(),
            },
            ports,
            claimant: options.claimant,
            engine: options.engine,
            poll: options.poll,
            wait: options.wait,
            cooldown: options.cooldown,
            stop: options.stop,
            plan: Some(options.plan),
        }
    }

    /// Runs the wave: every phase in order.
    ///
    /// Boxed at the crate's edge ([`crate::BoxFuture`]).
    pub fn run(self) -> BoxFuture<'a, Result<WaveSummary, WaveFailure>> {
        Box::pin(self.run_phases())
    }

    async fn run_phases(mut self) -> Result<WaveSummary, WaveFailure> {
        let plan = self.plan.take().expect("a wave runs once");
        let base = self
            .ports
            .base
            .base(&self.engine.base_branch, &self.engine.repo)
            .await?;
        let book = ClaimBook::new(
            self.ports.forge.refs(),
            self.ports.clock,
            self.claimant.clone(),
        );
        let mut pass = self.recover_orphans(&book, plan).await?;
        self.adopt_held_claims(&book, &mut pass);
        // One session for the wave: a re-plan after a lost claim race is
        // answered from its cache.
        let session = self.ports.registry.session();
        self.plan(&base.repository, &session, &mut pass).await?;
        let listed = pass.claims.iter().map(|c| c.tip.name.clone()).collect();
        let engine = self
            .new_engine(&base)
            .with_listed_claims(listed)
            .with_listed_authors(pass.open_pulls.authors.clone());
        self.check_readiness(&engine, &mut pass).await;
        self.resume(&engine, &base.repository, &mut pass).await;
        self.refill(&engine, &base.repository, &session, &mut pass)
            .await;
        self.rebuild_lost_records(&engine, &mut pass).await;
        self.answer_commands(&engine, &mut pass).await;
        self.drive(&engine, &base.repository, &mut pass).await?;
        self.keep_mergeable(&engine, &mut pass).await;
        Ok(self.summarize(&book, base.sha.to_string(), pass).await)
    }

    /// The engine over the base checkout. It borrows the wave's engine
    /// settings, never the pass.
    fn new_engine<'e>(&'e self, base: &'e BaseCheckout) -> Engine<'e> {
        let engine = Engine::new(
            self.ports.forge,
            self.ports.journal,
            self.ports.clock,
            self.claimant.clone(),
            self.ports.baseline,
            &base.repository,
            base.sha.clone(),
            &self.engine,
        )
        .with_hunt_tags(&self.hunt_tags);
        match self.ports.repair {
            Some(hook) => engine.with_repair(hook),
            None => engine,
        }
    }

    fn stopping(&self) -> bool {
        self.stop.as_ref().is_some_and(|s| *s.borrow())
    }

    fn recovery<'r>(&'r self, book: &'r ClaimBook<'r>, now: DateTime<Utc>) -> RecoveryContext<'r> {
        RecoveryContext {
            book,
            runs: self.ports.runs,
            owner_run: self.engine.owner_run,
            lease: self.engine.lease,
            now,
        }
    }

    /// One engine step, told to the observer (records are compared around
    /// the step only when someone listens).
    async fn step(
        &self,
        engine: &Engine<'_>,
        rec: &mut CandidateRecord,
    ) -> Result<Progress, EngineError> {
        let before = self.ports.observer.map(|_| rec.clone());
        if let Some(observer) = self.ports.observer {
            observer.step_started(rec);
        }
        let progress = engine.step(rec).await;
        if let (Some(observer), Some(before)) = (self.ports.observer, &before) {
            observer.stepped(before, rec, progress.as_ref());
        }
        progress
    }

    /// Phase 1 (see `klaud_lifecycle::model`): lists the claims (failing closed when one blocks
    /// planning), the recovery leases and the journal, and takes over the
    /// orphaned claims, so their candidates are finished in this wave.
    pub async fn recover_orphans<'p>(
        &self,
        book: &ClaimBook<'_>,
        plan: PlanOptions<'p>,
    ) -> Result<Pass<'p>, WaveFailure> {
        let claims = book
            .list_claims()
            .await
            .map_err(|e| WaveFailure::Claims(e.to_string()))?;
        ensure_plannable(&claims).map_err(|e| WaveFailure::Claims(e.to_string()))?;
        let leases = book
            .list_recovery_leases()
            .await
            .map_err(|e| WaveFailure::Claims(e.to_string()))?;
        let (done, unfinished): (Vec<CandidateRecord>, Vec<CandidateRecord>) = self
            .ports
            .journal
            .list()
            .await
            .map_err(|e| WaveFailure::Journal(e.to_string()))?
            .into_iter()
            .partition(|r| r.step == Step::Done);
        let now = self.ports.clock.now();
        let journaled: BTreeSet<String> = done
            .iter()
            .chain(&unfinished)
            .map(|r| r.candidate.to_string())
            .collect();
        let recovery = self.recovery(book, now);
        let (orphans, not_recovered) =
            take_over_orphans(&recovery, &claims, &leases, &journaled, None).await;
        for (claim, why) in &not_recovered {
            tracing::debug!(claim, why, "not recovered");
        }
        let recovering = orphans
            .iter()
            .flat_map(|o| o.candidates.iter().map(|c| c.id.as_str().to_owned()))
            .collect();
        Ok(Pass {
            plan,
            now,
            cooldown: TimeDelta::from_std(self.cooldown).unwrap_or(TimeDelta::MAX),
            claims,
            leases,
            done,
            unfinished,
            orphans,
            recovering,
            ours: BTreeSet::new(),
            held_by_us: Vec::new(),
            open_pulls: OpenPulls::default(),
            report: PlanReport::empty(),
            targets: Vec::new(),
            seen: BTreeSet::new(),
            new_picks: BTreeSet::new(),
            freed: 0,
            slots: Vec::new(),
            skipped: Vec::new(),
            open_failures: Vec::new(),
            answered: Vec::new(),
            overlap_notes: BTreeMap::new(),
            recently_active: None,
        })
    }

    /// Phase 2: the claims this instance holds are its own (resumed, not
    /// planned anew); every other claim occupies its families, each member
    /// of a family group included.
    pub fn adopt_held_claims(&self, book: &ClaimBook<'_>, pass: &mut Pass<'_>) {
        for entry in &pass.claims {
            match book.adopt(entry) {
                Some(held) => {
                    pass.ours.extend(
                        held.record
                            .candidate_ids()
                            .iter()
                            .map(|s| s.to_string())
                            .filter(|id| !pass.recovering.contains(id)),
                    );
                    pass.held_by_us.push(held);
                }
                None => {
                    if let Some(family) = entry.family() {
                        pass.plan.occupied.insert(family.as_str().to_owned());
                    }
                    // A family group is claimed under its first member's
                    // ref; the record lists every member, and each is
                    // occupied.
                    if let Ok(record) = &entry.record {
                        pass.plan.occupied.extend(
                            record
                                .candidates
                                .iter()
                                .map(|c| klaud_planner::identity::family_id(&c.family)),
                        );
                    }
                }
            }
        }
    }

    /// Phase 3: blocks the families open PRs cover and those
    /// cooling down, plans, and lists the targets: this instance's
    /// unfinished journal records first, then the plan's picks (claims it
    /// holds included) with experiments expanded into their variants.
    pub async fn plan(
        &self,
        repository: &Repository,
        session: &RegistrySession,
        pass: &mut Pass<'_>,
    ) -> Result<(), WaveFailure> {
        // Other people's work and Klaud's own open PRs, read from GitHub
        // before claiming; the blocked families are still planned so the
        // plan says what they would get.
        pass.open_pulls = self
            .ports
            .pulls
            .open_pulls(repository, &self.engine.base_branch)
            .await?;
        pass.plan.blocked = pass.open_pulls.blocks.clone();
        // This instance's own candidates in flight are resumed, not blocked:
        // their PR is the open one, and the plan keeps counting them as picks.
        let in_flight: BTreeSet<String> = pass
            .ours
            .iter()
            .map(String::as_str)
            .chain(pass.unfinished.iter().map(|r| r.candidate.as_str()))
            .filter_map(|id| CandidateId::new(id).ok())
            .map(|id| id.family().as_str().to_owned())
            .collect();
        pass.plan
            .blocked
            .retain(|family, b| b.kind != BlockKind::Occupied || !in_flight.contains(family));
        for rec in &pass.done {
            // A maintainer's retry request (`/klaud retry`) lifts the cooldown.
            let retried = match self.ports.retries {
                Some(r) => crate::commands::retry_requested(r.journal, rec).await,
                None => false,
            };
            // A capacity deferral is retried in the next wave (see configs/README.md#shared-clusters-capacity).
            if pass.now - rec.updated_at < pass.cooldown
                && !retried
                && !rec.deferred()
                && !self.engine.decline_undone(rec)
                && let Ok(id) = CandidateId::new(rec.candidate.as_str())
            {
                pass.plan
                    .cooling_down
                    .insert(id.family().as_str().to_owned());
            }
        }

        // A pass that may start nothing new (the daemon's reconcile) and has
        // no held claim to rebuild from the plan skips the registry
        // entirely: at one pass a minute, a plan each time would burn the
        // registries' budget.
        let journal_ids: BTreeSet<&str> = pass
            .unfinished
            .iter()
            .map(|r| r.candidate.as_str())
            .collect();
        pass.report = if pass.plan.max_candidates == 0
            && pass.ours.iter().all(|id| journal_ids.contains(id.as_str()))
        {
            PlanReport::empty()
        } else {
            let report = plan(repository, session, &pass.plan).await;
            self.planned();
            report
        };
        for rec in &pass.unfinished {
            if let Ok(candidate) = CandidateId::new(rec.candidate.as_str())
                && pass.seen.insert(rec.candidate.to_string())
            {
                pass.targets.push(Target {
                    candidate,
                    ..rec.target()
                });
            }
        }
        let picked = plan_targets(
            &pass.report,
            &pass.ours,
            &mut pass.seen,
            self.ports.upstream,
            repository,
            self.ports.registry,
        )
        .await;
        let picked = expand_experiments(picked, &self.engine.experiments, &mut pass.seen);
        pass.new_picks = picked
            .iter()
            .map(|t| t.candidate.as_str().to_owned())
            .filter(|id| !pass.ours.contains(id))
            .collect();
        pass.targets.extend(picked);
        Ok(())
    }

    fn planned(&self) {
        if let Some(memory) = self.ports.plans {
            memory.planned(self.ports.registry);
        }
    }

    /// Phase 3b (see configs/README.md#baseline-readiness-lifecycle-require_baseline): when a baseline is required, a new pick
    /// whose family's current image has no complete published baseline is
    /// `readiness-blocked` here, before anything is written: no claim, no
    /// branch, no PR. The family shows as blocked in the wave's plan and
    /// summary, and its slot goes to the next stale family in
    /// [`refill`](Wave::refill). Candidates already in flight keep the
    /// baseline frozen in their PR.
    pub async fn check_readiness(&self, engine: &Engine<'_>, pass: &mut Pass<'_>) {
        let picks: Vec<&Target> = pass
            .targets
            .iter()
            .filter(|t| pass.new_picks.contains(t.candidate.as_str()))
            .collect();
        let gaps = readiness_gaps(engine, picks).await;
        if gaps.is_empty() {
            return;
        }
        pass.targets.retain(|t| !gaps.contains_key(&t.family));
        let kept: BTreeSet<&str> = pass.targets.iter().map(|t| t.candidate.as_str()).collect();
        pass.new_picks.retain(|id| kept.contains(id.as_str()));
        block_unready(gaps, pass);
    }

    /// Phase 4: opens a record for every candidate to work on — the
    /// orphans taken over, the held claims' candidates nobody else knows
    /// (rebuilt from their claim or branch; without either they are
    /// finished like orphans and the family freed), and the targets.
    pub async fn resume(&self, engine: &Engine<'_>, repository: &Repository, pass: &mut Pass<'_>) {
        // A claim of ours whose candidate neither the journal nor the plan
        // knows (a one-shot run with a fresh store, after upstream moved
        // on): its target is rebuilt from its branch.
        let done_ids: BTreeSet<&str> = pass.done.iter().map(|r| r.candidate.as_str()).collect();
        let mut lost_track = Vec::new();
        for held in &pass.held_by_us {
            for c in &held.record.candidates {
                let id = c.id.as_str();
                if pass.seen.contains(id) || done_ids.contains(id) || pass.recovering.contains(id) {
                    continue;
                }
                match held_target(
                    self.ports.base,
                    repository,
                    c,
                    &self.engine.experiments,
                    &held.record,
                )
                .await
                {
                    Ok(Some(t)) => {
                        pass.seen.insert(id.to_owned());
                        pass.targets.push(t);
                    }
                    // A variant that never got a branch, of an experiment
                    // whose siblings are resumed: they finish and release
                    // the claim.
                    Ok(None)
                        if held
                            .record
                            .candidates
                            .iter()
                            .any(|o| o.id != c.id && pass.seen.contains(o.id.as_str())) => {}
                    Ok(None) => lost_track.push(Orphan {
                        held: held.clone(),
                        orphan_run: held.record.run_id,
                        candidates: vec![c.clone()],
                        leases: Vec::new(),
                    }),
                    Err(e) => tracing::warn!(candidate = id, error = %e, "held claim not resumed"),
                }
            }
        }

        let (recovered, mut skipped) = open_orphans(engine, &pass.orphans).await;
        let (mut lost, lost_skipped) = open_orphans(engine, &lost_track).await;
        skipped.extend(lost_skipped);
        for rec in &mut lost {
            if let Some(ending) = rec.ending.as_mut().filter(|e| !e.hands_off) {
                ending.message = "this instance lost track of the candidate: no journal record, \
                                  no branch, and the plan proposes another image"
                    .to_owned();
            }
        }
        pass.skipped = skipped
            .into_iter()
            .map(|(id, why)| (id.to_string(), why))
            .collect();
        pass.slots.clear();
        for rec in recovered.into_iter().chain(lost) {
            pass.open_slot(rec);
        }
        let targets = std::mem::take(&mut pass.targets);
        for t in &targets {
            match engine.open_record(t).await {
                Ok(rec) => pass.open_slot(rec),
                Err(e) => pass.open_failed(t, &e),
            }
        }
        pass.targets = targets;
    }

    /// Phase 5: claims the plan's new picks now; a family lost to another
    /// instance's race frees its slot for the next stale family (re-planned
    /// up to three times), so instances started together split
    /// the work instead of one of them idling until the next wave. A
    /// readiness-blocked pick frees its slot the same way, and the
    /// re-plan's picks are checked before they are opened.
    pub async fn refill(
        &self,
        engine: &Engine<'_>,
        repository: &Repository,
        session: &RegistrySession,
        pass: &mut Pass<'_>,
    ) {
        // Re-plans after lost races are bounded by REFILL_ROUNDS; re-plans
        // for readiness-blocked picks end by themselves, as each one
        // blocks another family or picks a ready one.
        let mut races = 0;
        loop {
            if (pass.new_picks.is_empty() && pass.freed == 0) || self.stopping() {
                break;
            }
            // Families, not candidates: an experiment's variants lose together.
            let mut lost = BTreeSet::new();
            for slot in pass.slots.iter_mut() {
                if !pass.new_picks.remove(slot.rec.candidate.as_str())
                    || slot.rec.step != Step::Claim
                {
                    continue;
                }
                match self.step(engine, &mut slot.rec).await {
                    Ok(Progress::Skipped(why)) => {
                        slot.status = Some(why);
                        slot.skip = true;
                        lost.insert(slot.rec.family.clone());
                    }
                    Ok(_) => {}
                    Err(e) => slot.stopped(&e),
                }
            }
            let freed = std::mem::take(&mut pass.freed);
            if lost.is_empty() && freed == 0 {
                break;
            }
            if !lost.is_empty() {
                races += 1;
                if races > REFILL_ROUNDS {
                    break;
                }
            }
            for slot in &pass.slots {
                if let Ok(id) = CandidateId::new(slot.rec.candidate.as_str()) {
                    pass.plan.occupied.insert(id.family().as_str().to_owned());
                }
            }
            pass.plan.max_candidates = lost.len() + freed;
            let again = plan(repository, session, &pass.plan).await;
            self.planned();
            let refill = plan_targets(
                &again,
                &BTreeSet::new(),
                &mut pass.seen,
                self.ports.upstream,
                repository,
                self.ports.registry,
            )
            .await;
            let mut refill = expand_experiments(refill, &self.engine.experiments, &mut pass.seen);
            let gaps = readiness_gaps(engine, refill.iter().collect()).await;
            refill.retain(|t| !gaps.contains_key(&t.family));
            block_unready(gaps, pass);
            for t in &refill {
                match engine.open_record(t).await {
                    Ok(rec) => {
                        pass.new_picks.insert(rec.candidate.to_string());
                        pass.open_slot(rec);
                    }
                    Err(e) => pass.open_failed(t, &e),
                }
            }
        }
    }

    /// Phase 6: maintainer commands on this wave's PRs, before driving (a
    /// `stop` must win over the next step) — and on finished candidates,
    /// whatever their PR's state and age: every pass within the cooldown,
    /// afterwards when one listing of Klaud's recently active PRs names
    /// theirs. Variants a `/klaud try` started are opened to run in this
    /// wave.
    pub async fn answer_commands(&self, engine: &Engine<'_>, pass: &mut Pass<'_>) {
        let mut tried = Vec::new();
        let mut reswept = Vec::new();
        for slot in pass.slots.iter_mut() {
            if slot.skip || slot.rec.pull.is_none() {
                continue;
            }
            match handle_commands(self.ports.forge, engine, &mut slot.rec, self.ports.retries).await
            {
                Ok(a) => {
                    tried.extend(a.iter().flat_map(|x| x.started.iter().cloned()));
                    pass.answered.extend(a)
                }
                Err(e) => {
                    slot.status = Some(format!("commands not handled: {e}"));
                    tracing::warn!(candidate = %slot.rec.candidate, error = %e, "maintainer commands not handled");
                }
            }
        }
        let active = self.finished_pulls_to_read(pass).await;
        let (now, cooldown) = (pass.now, pass.cooldown);
        // The pass's own copy (a finished candidate with a slot is not in
        // `done`): what a command changes is what the upkeep saves later.
        for rec in pass.done.iter_mut().filter(|r| {
            r.pull
                .is_some_and(|n| now - r.updated_at < cooldown || active.contains(&n))
        }) {
            match handle_commands(self.ports.forge, engine, rec, self.ports.retries).await {
                Ok(a) => {
                    // A finished candidate started again (its sweep after a
                    // person's push): its journal record moved on.
                    reswept.extend(a.iter().flat_map(|x| x.started.iter().cloned()));
                    pass.answered.extend(a)
                }
                Err(e) => {
                    tracing::warn!(candidate = %rec.candidate, error = %e, "maintainer commands not handled")
                }
            }
        }
        for t in &reswept {
            pass.done.retain(|r| r.candidate != t.candidate);
            pass.seen.insert(t.candidate.as_str().to_owned());
            match engine.open_record(t).await {
                Ok(rec) => pass.open_slot(rec),
                Err(e) => pass.open_failed(t, &e),
            }
        }
        for t in &tried {
            if !pass.seen.insert(t.candidate.as_str().to_owned()) {
                continue;
            }
            match engine.open_record(t).await {
                Ok(rec) => pass.open_slot(rec),
                Err(e) => pass.open_failed(t, &e),
            }
        }
    }

    /// The PRs of candidates finished longer ago than the cooldown that saw
    /// activity within [`FINISHED_COMMANDS_LOOKBACK`]: their comments are
    /// read for commands. Those still in their cooldown are read every pass
    /// anyway; the older ones are found by one listing of Klaud's recently
    /// active PRs (GitHub's `since` on the issue list), so the cost follows
    /// what people do, not how many PRs Klaud ever finished. A failed
    /// listing answers none of them this pass (the next one retries).
    async fn finished_pulls_to_read(&self, pass: &mut Pass<'_>) -> BTreeSet<PullNumber> {
        let old = pass
            .done
            .iter()
            .any(|r| r.pull.is_some() && pass.now - r.updated_at >= pass.cooldown);
        if !old {
            return BTreeSet::new();
        }
        match self.recently_active_pulls(pass).await {
            Ok(numbers) => numbers,
            Err(e) => {
                tracing::warn!(error = %e, "finished PRs with new activity not listed; their commands wait");
                BTreeSet::new()
            }
        }
    }

    /// Phase 7: ends what a human PR now overlaps, then steps every
    /// candidate until each finishes, waits on a run past the wave's
    /// `wait`, or the stop signal comes (seen between steps).
    pub async fn drive(
        &self,
        engine: &Engine<'_>,
        repository: &Repository,
        pass: &mut Pass<'_>,
    ) -> Result<(), WaveFailure> {
        self.end_overlapped(engine, repository, pass).await?;
        let started = self.ports.clock.now();
        let wait = TimeDelta::from_std(self.wait).unwrap_or(TimeDelta::MAX);
        let mut last_listed = None;
        // The pass's claim listing is made moments before the first round
        // only; a later round (after a poll's sleep) reads its claims.
        let mut first_round = true;
        loop {
            let mut waiting = false;
            let listed = self.listed(pass, last_listed).await;
            if let Some((at, _)) = &listed {
                last_listed = Some(*at);
            }
            for slot in pass.slots.iter_mut() {
                if slot.skip || slot.rec.step == Step::Done {
                    continue;
                }
                if self.stopping() {
                    slot.status = Some("paused: shutting down".to_owned());
                    continue;
                }
                // One step at a time so a shutdown request is seen between
                // steps.
                let mut progress = Ok(Progress::Advanced(slot.rec.step));
                // Kept only while the steps advance: the loop ends at the
                // first wait, failure or end, and so does the keeping.
                let kept = engine.keep_reads();
                engine.seed_created_claim(&slot.rec);
                if let Some((at, listed)) = &listed {
                    seed_listed(engine, &slot.rec, *at, listed);
                }
                if first_round {
                    seed_listed_claim(engine, &slot.rec, &pass.claims);
                }
                for _ in 0..STEPS_IN_A_ROW {
                    progress = self.step(engine, &mut slot.rec).await;
                    if !matches!(progress, Ok(Progress::Advanced(_))) || self.stopping() {
                        break;
                    }
                }
                drop(kept);
                match progress {
                    Ok(Progress::Waiting(why)) => {
                        slot.status = Some(why);
                        waiting = true;
                    }
                    Ok(Progress::Skipped(why)) => {
                        slot.status = Some(why);
                        slot.skip = true;
                    }
                    Ok(Progress::Done(_)) => slot.status = None,
                    Ok(Progress::Advanced(_)) => waiting = true,
                    Err(e) => {
                        // Transient: the next wave resumes from here.
                        slot.stopped(&e);
                        tracing::warn!(candidate = %slot.rec.candidate, error = %e, "candidate stopped");
                    }
                }
            }
            if !waiting || self.stopping() || self.ports.clock.now() - started >= wait {
                break;
            }
            first_round = false;
            tokio::time::sleep(self.poll).await;
        }
        Ok(())
    }

    /// Klaud's open pull requests and branches for this round of steps,
    /// with when they were listed; `None` when it would not pay (below) or
    /// the listing failed: every step then reads its own.
    ///
    /// The first round lists when any candidate with a pull request steps
    /// (the pull request listing is the plan's, moments before: a free 304
    /// unless a PR moved since; an idle pass asks nothing). A later round
    /// of the same pass (a pass that keeps polling) lists only when at
    /// least two such candidates changed since the last listing: a listing
    /// after any change is itself charged, and pays off only when it
    /// answers more than one charged read.
    async fn listed(
        &self,
        pass: &Pass<'_>,
        last: Option<DateTime<Utc>>,
    ) -> Option<(DateTime<Utc>, Listed)> {
        let stepping = pass
            .slots
            .iter()
            .filter(|s| !s.skip && s.rec.step != Step::Done && s.rec.pull.is_some());
        let worth = match last {
            None => stepping.count() > 0,
            Some(last) => stepping.filter(|s| s.rec.updated_at >= last).count() > 1,
        };
        if !worth || self.stopping() {
            return None;
        }
        let at = self.ports.clock.now();
        match self.ports.pulls.listed(&self.engine.base_branch).await {
            Ok(listed) => Some((at, listed)),
            Err(e) => {
                tracing::warn!(error = %e, "Klaud's pull requests and branches not listed; each step reads its own");
                None
            }
        }
    }

    /// Phase 8: validated PRs awaiting a maintainer's merge stay mergeable.
    /// Once another PR's changelog entry lands, each of them conflicts on
    /// `perf-changelog.yaml`; Klaud merges the base in (the engine's
    /// `keep_mergeable`), so merging it still reuses its sweep. A PR that is
    /// merged, closed or handed off is no longer looked at.
    pub async fn keep_mergeable(&self, engine: &Engine<'_>, pass: &mut Pass<'_>) {
        let watched = |r: &CandidateRecord| {
            r.step == Step::Done
                && r.pull.is_some()
                && r.ending
                    .as_ref()
                    .is_some_and(|e| e.outcome == crate::model::Outcome::Validated)
                && r.upkeep.as_ref().is_none_or(|u| u.settled.is_none())
        };
        let records = pass
            .done
            .iter_mut()
            .chain(pass.slots.iter_mut().map(|s| &mut s.rec))
            .filter(|r| watched(r))
            .take(MAX_KEPT_MERGEABLE);
        for rec in records {
            if self.stopping() {
                break;
            }
            let before = self.ports.observer.map(|_| rec.clone());
            let result = engine.keep_mergeable(rec).await;
            if let (Some(observer), Some(before)) = (self.ports.observer, &before) {
                let told = result.as_ref().map(|u| Progress::Waiting(format!("{u:?}")));
                observer.stepped(before, rec, told.as_ref().map_err(|e| *e));
            }
            match result {
                Ok(upkept) => {
                    tracing::debug!(candidate = %rec.candidate, ?upkept, "validated PR upkeep")
                }
                Err(e) => {
                    tracing::warn!(candidate = %rec.candidate, error = %e, "validated PR upkeep stopped; the next pass resumes")
                }
            }
        }
    }

    /// Before any PR is opened: a human PR that appeared since the plan
    /// ends the candidate `duplicate` (its branch is cleaned up, nothing is
    /// posted on the human's PR). A Klaud PR already open that a human PR
    /// now overlaps: the configured decision (`on_human_overlap`).
    async fn end_overlapped(
        &self,
        engine: &Engine<'_>,
        repository: &Repository,
        pass: &mut Pass<'_>,
    ) -> Result<(), WaveFailure> {
        let human = if pass
            .slots
            .iter()
            .any(|s| !s.skip && s.rec.pull.is_none() && s.rec.step != Step::Done)
        {
            self.ports
                .pulls
                .open_pulls(repository, &self.engine.base_branch)
                .await?
                .human
        } else {
            std::mem::take(&mut pass.open_pulls.human)
        };
        for slot in pass.slots.iter_mut() {
            if slot.skip || matches!(slot.rec.step, Step::Done | Step::Finish) {
                continue;
            }
            let Ok(id) = CandidateId::new(slot.rec.candidate.as_str()) else {
                continue;
            };
            let Some(b) = human.get(id.family().as_str()) else {
                continue;
            };
            let ended = match (slot.rec.pull, self.engine.on_human_overlap) {
                (None, _) => {
                    engine
                        .end_now(&mut slot.rec, Outcome::Duplicate, b.reason.clone(), false)
                        .await
                }
                (Some(_), HumanOverlap::Handoff) => {
                    engine
                        .end_now(&mut slot.rec, Outcome::Handoff, b.reason.clone(), false)
                        .await
                }
                (Some(_), HumanOverlap::Leave) => {
                    pass.overlap_notes.insert(
                        slot.rec.candidate.to_string(),
                        format!("left as is (on_human_overlap = \"leave\"): {}", b.reason),
                    );
                    Ok(())
                }
            };
            if let Err(e) = ended {
                slot.stopped(&e);
            }
        }
        Ok(())
    }

    /// Phase 8: settles the recovery leases against the journal as it now
    /// is, and sums the wave up (told to the observer).
    pub async fn summarize(
        &self,
        book: &ClaimBook<'_>,
        base: String,
        pass: Pass<'_>,
    ) -> WaveSummary {
        let Pass {
            now,
            claims,
            leases,
            done,
            orphans,
            report,
            slots,
            mut skipped,
            open_failures,
            answered,
            overlap_notes,
            ..
        } = pass;
        let acquired: Vec<_> = orphans.iter().flat_map(|o| o.leases.clone()).collect();
        let mut journal_now: Vec<CandidateRecord> = done;
        journal_now.extend(slots.iter().map(|s| s.rec.clone()));
        let recovery = self.recovery(book, now);
        settle_recovery_leases(&recovery, &leases, &acquired, &claims, &journal_now).await;
        // Every candidate still open stopped on the instance's credential or
        // store, or could not even be opened for it: the wave did nothing
        // and must say so (a scheduled job fails).
        let causes: Vec<&Option<String>> = slots
            .iter()
            .filter(|s| !s.skip && s.rec.step != Step::Done)
            .map(|s| &s.global)
            .chain(&open_failures)
            .collect();
        let stopped_by = causes
            .iter()
            .all(|cause| cause.is_some())
            .then(|| causes.first().and_then(|cause| (*cause).clone()))
            .flatten();
        let mut candidates = Vec::new();
        for slot in &slots {
            if slot.skip {
                skipped.push((
                    slot.rec.candidate.to_string(),
                    slot.status.clone().unwrap_or_default(),
                ));
            } else {
                let status = match (&slot.status, overlap_notes.get(slot.rec.candidate.as_str())) {
                    (Some(s), Some(note)) => Some(format!("{s}; {note}")),
                    (None, Some(note)) => Some(note.clone()),
                    (s, None) => s.clone(),
                };
                candidates.push(CandidateSummary::of(&slot.rec, status));
            }
        }
        let summary = WaveSummary {
            base,
            candidates,
            skipped,
            answered,
            stopped_by,
            blocked: report
                .families
                .iter()
                .filter_map(|f| {
                    let b = f.blocked.as_ref()?;
                    Some(BlockedFamily {
                        family: f.family.clone(),
                        outcome: b.kind.as_str().to_owned(),
                        reason: b.reason.clone(),
                    })
                })
                .collect(),
            unreadable: report.unreadable,
            families: report.families,
        };
        if let Some(observer) = self.ports.observer {
            observer.done(&summary);
        }
        summary
    }
}

/// The readiness gap of each family among `targets` that has one, asked
/// once per family (an experiment's variants share their family's
/// baseline).
async fn readiness_gaps(engine: &Engine<'_>, targets: Vec<&Target>) -> BTreeMap<String, String> {
    let mut asked = BTreeSet::new();
    let mut gaps = BTreeMap::new();
    for t in targets {
        if !asked.insert(t.family.as_str()) {
            continue;
        }
        if let Some(gap) = engine.readiness_before_claim(&t.family).await {
            tracing::info!(family = %t.family, gap = %gap, "readiness-blocked before the claim");
            gaps.insert(t.family.clone(), gap);
        }
    }
    gaps
}

/// Blocks the families of `gaps` for the rest of the wave: re-plans skip
/// them, the plan's report (the summary, the dashboard) shows the block
/// with its reason, and each frees a slot.
fn block_unready(gaps: BTreeMap<String, String>, pass: &mut Pass<'_>) {
    for (family, gap) in gaps {
        let id = klaud_planner::identity::family_id(&family);
        let block = Blocked {
            kind: BlockKind::ReadinessBlocked,
            reason: gap,
            pull: None,
            author: None,
        };
        if let Some(f) = pass.report.families.iter_mut().find(|f| f.id == id) {
            f.blocked = Some(block.clone());
        }
        pass.plan.blocked.insert(id, block);
        pass.freed += 1;
    }
}

#[cfg(test)]
mod tests;

/// Seeds `rec`'s run of steps with its claim as the pass's claim listing
/// showed it, when that is still Klaud's own last write (see
/// `Engine::seed_listed_claim`).
fn seed_listed_claim(engine: &Engine<'_>, rec: &CandidateRecord, claims: &[ClaimEntry]) {
    let Some(held) = rec.claim.as_ref() else {
        return;
    };
    if let Some(entry) = claims.iter().find(|c| c.tip.name == held.ref_name) {
        engine.seed_listed_claim(rec, &entry.tip);
    }
}

/// Seeds `rec`'s run of steps with this round's listing (see
/// `Engine::seed_listed`), unless its record changed after the listing
/// (it has seen more than the listing did). An experiment's variant is
/// seeded too: its siblings write their own pull requests and branches,
/// never its, and the claim they share is not seeded from here.
fn seed_listed(engine: &Engine<'_>, rec: &CandidateRecord, at: DateTime<Utc>, listed: &Listed) {
    if rec.updated_at >= at {
        return;
    }
    let pull = rec
        .pull
        .and_then(|n| listed.pulls.iter().find(|p| p.number == n));
    let branch = listed.branches.get(&rec.branch).map(String::as_str);
    engine.seed_listed(rec, pull, branch);
}
