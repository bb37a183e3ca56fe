//! The steps of a candidate's life. See the module documentation of
//! [`crate::engine`] for the rules every step follows.

use crate::BoxFuture;
use crate::engine::write::Writes as _;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::TimeDelta;
use klaud_claims::{Acquire, CandidateId, ClaimBook, Claimant, Clock, HeldClaim, Renew};
use klaud_planner::image::ImageRef;
use klaud_planner::repo::{Family, Repository};
use serde::Serialize;
use serde_json::Value;

#[cfg(test)]
use super::forge::RunStatus;
use super::forge::{Forge, ForgeError, Run, RunConclusion, RunQuery};
use super::intent::Intent;
use super::journal::{AttemptRecord, CandidateRecord, Ending, Journal, JournalError, Step};
use super::ownership::{self, Expectation, Mismatch, MismatchKind, OwnershipError, OwnershipProof};
use crate::artifacts::ArtifactLimits;
use crate::baseline::BaselineSource;
use crate::model::{AttemptKind, AttemptStatus, DEFAULT_REPAIR_BUDGET, Outcome, Phase, RunRef};
use crate::report::{
    MarkerKey, RenderedComment, UpstreamRange, engine_display, find_record, pr_title,
};
use crate::workflows::{
    DraftPolicy, SmokeDispatch, Workflow, klaud_smoke_inputs, smoke_dispatch, workflow_path,
};

mod baseline;
mod experiment;
mod finish;
mod live;
mod smoke;
mod start;
mod sweep;
mod upkeep;

pub use upkeep::Upkept;

/// Every sweep label Klaud manages (see configs/README.md#what-klaud-reads-from-the-benchmark-repositorys-workflows).
pub const SWEEP_LABELS: [&str; 8] = [
    "sweep-enabled",
    "full-sweep-enabled",
    "non-canary-full-sweep-enabled",
    "full-sweep-fail-fast",
    "full-sweep-fail-fast-no-canary",
    "all-evals",
    "evals-only",
    "agentx-fast",
];

/// How the engine works for one repository.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The owner run written into claims and markers.
    pub owner_run: u64,
    /// The base branch.
    pub base_branch: String,
    /// The bot's display name in titles.
    pub display_name: String,
    /// The targeted smoke workflow file.
    pub smoke_workflow: String,
    /// The final sweep workflow file.
    pub sweep_workflow: String,
    /// The one primary sweep label Klaud sets.
    pub sweep_label: String,
    /// Every sweep label Klaud manages (the others are removed).
    pub managed_labels: Vec<String>,
    /// Repairs a candidate may use.
    pub repair_budget: u32,
    /// Claim lease length; renewed when less than half is left.
    pub lease: TimeDelta,
    /// Lease that must be left beyond a write's timeout when the write is
    /// sent (the write window is this plus `write_timeout`, at most a
    /// quarter of the lease less a second: test-sized leases).
    pub lease_margin: TimeDelta,
    /// How long one GitHub write may take (the transport's timeout).
    pub write_timeout: TimeDelta,
    /// Authorize reuse of the validated sweep at merge (`/reuse-sweep-run`).
    pub authorize_reuse: bool,
    /// How long a dispatched run may take to show up before Klaud
    /// dispatches again.
    pub dispatch_grace: TimeDelta,
    /// Model (as in the master config) → display name the baseline API wants.
    pub model_names: BTreeMap<String, String>,
    /// Bounds on artifact sizes.
    pub artifact_limits: ArtifactLimits,
    /// How long a smoke run may stay unfinished before Klaud cancels it and
    /// retries (an infrastructure failure).
    pub run_timeout: TimeDelta,
    /// How long after labelling the final sweep may take to start before
    /// the candidate ends `uncertain`.
    pub sweep_start_timeout: TimeDelta,
    /// Base of the changelog's `pr-link` (the benchmark repository's gate
    /// wants `https://github.com/<owner>/<repo>/pull/<N>`).
    pub pr_link_base: String,
    /// Whether the final sweep runs on draft PRs (`auto`: read the sweep
    /// workflow's job conditions at the base commit).
    pub sweep_runs_on_drafts: DraftPolicy,
    /// How the base checkout is read (configured recipe roots).
    pub repo: klaud_planner::repo::RepoOptions,
    /// How a bump treats recipes that disagree with the master.
    pub bump: klaud_planner::bump::BumpOptions,
    /// The capacity gate (see configs/README.md#shared-clusters-capacity), checked before claiming and before
    /// every dispatch (smoke, re-run, sweep label); `None`: no gate.
    pub capacity: Option<Arc<klaud_planner::capacity::CapacityGate>>,
    /// What to do with a Klaud PR already open when somebody else's PR
    /// starts to overlap its family.
    pub on_human_overlap: HumanOverlap,
    /// `[[experiments]]`: families whose candidate runs as racing variants
    /// (issue 15); empty: every candidate runs alone.
    pub experiments: Vec<crate::experiment::ExperimentSpec>,
    /// Whether a candidate needs the published baseline of its family's
    /// current image for every point before any GPU work (`readiness-
    /// blocked` otherwise). Off: missing points are N/A rows. Only checked
    /// when a results API is configured.
    pub require_baseline: bool,
    /// Live attempt reports: the least time between two edits of a run's
    /// report comment while the run is in progress (`None`: the report is
    /// posted only when the run ends).
    pub live_report_interval: Option<TimeDelta>,
}

/// What Klaud does with its own open PR when a human PR later changes the
/// same family (`[lifecycle] on_human_overlap`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HumanOverlap {
    /// Leave Klaud's PR as it is; the dashboard notes the overlap.
    #[default]
    Leave,
    /// End Klaud's candidate `handoff` with the usual cleanup (its runs
    /// cancelled, its PR closed with a receipt naming the human PR).
    Handoff,
}

impl EngineConfig {
    /// The defaults (see configs/README.md#what-klaud-reads-from-the-benchmark-repositorys-workflows
    /// and `klaud_lifecycle::model`) for `owner_run`.
    pub fn new(owner_run: u64) -> Self {
        Self {
            owner_run,
            base_branch: "main".into(),
            display_name: crate::report::DEFAULT_DISPLAY_NAME.into(),
            smoke_workflow: "e2e-tests.yml".into(),
            sweep_workflow: "run-sweep.yml".into(),
            sweep_label: "full-sweep-fail-fast".into(),
            managed_labels: SWEEP_LABELS.iter().map(|s| (*s).to_owned()).collect(),
            repair_budget: DEFAULT_REPAIR_BUDGET,
            lease: TimeDelta::hours(2),
            lease_margin: TimeDelta::minutes(1),
            // klaud-github's connect (15 s) plus read (60 s) timeouts.
            write_timeout: TimeDelta::seconds(75),
            authorize_reuse: true,
            dispatch_grace: TimeDelta::minutes(2),
            model_names: BTreeMap::new(),
            artifact_limits: ArtifactLimits::default(),
            pr_link_base: "https://github.com".into(),
            sweep_start_timeout: TimeDelta::hours(1),
            run_timeout: TimeDelta::hours(12),
            sweep_runs_on_drafts: DraftPolicy::Auto,
            repo: klaud_planner::repo::RepoOptions::default(),
            bump: klaud_planner::bump::BumpOptions::default(),
            capacity: None,
            on_human_overlap: HumanOverlap::Leave,
            experiments: Vec::new(),
            require_baseline: true,
            live_report_interval: Some(TimeDelta::minutes(5)),
        }
    }
}

/// A candidate chosen by the planner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Family string.
    pub family: String,
    /// Candidate id.
    pub candidate: CandidateId,
    /// The pinned candidate image.
    pub image: String,
    /// The image's revision label.
    pub revision: Option<String>,
    /// The clock that ordered the tags.
    pub clock: Option<String>,
    /// Why a nightly rather than a release, when so.
    pub not_release_reason: Option<String>,
    /// Upstream source commits between the old and the new image, when a
    /// source repository is configured and both commits are known.
    pub upstream: Option<UpstreamRange>,
    /// Toolkit and engine versions the old and new image declare, when the
    /// candidate's config was read by the planner.
    pub versions: Option<crate::report::VersionsCompared>,
    /// The experiment variant this candidate is, if it is one.
    pub variant: Option<crate::experiment::VariantInfo>,
}

/// What one call of [`Engine::step`] achieved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Moved on; call again.
    Advanced(Step),
    /// Waiting for GitHub (a run); call again later.
    Waiting(String),
    /// Finished with this ending (`None`: found already finished elsewhere).
    Done(Option<Ending>),
    /// Not taken up (e.g. the family is claimed by someone else).
    Skipped(String),
}

/// Why the engine could not go on (transient: the next wave tries again).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// GitHub failed.
    #[error(transparent)]
    Forge(#[from] ForgeError),
    /// The journal failed.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// A claim operation failed.
    #[error("claim: {0}")]
    ClaimOp(#[from] klaud_claims::ClaimError),
    /// A claim record is not what the engine needs (the experiment
    /// fields of a shared claim).
    #[error("claim: {0}")]
    Claim(String),
    /// The candidate does not fit the repository.
    #[error("{0}")]
    Invalid(String),
}

impl EngineError {
    /// The cause when this failure is not the candidate's but the whole
    /// instance's: GitHub refused the credential, or the local store cannot
    /// be written. Every other candidate stops the same way, so a wave
    /// that ends on it must not look successful.
    pub fn global_cause(&self) -> Option<String> {
        let credential = match self {
            Self::Forge(e) => e.is_credential_refused(),
            Self::ClaimOp(klaud_claims::ClaimError::Store { source, .. }) => {
                matches!(source, klaud_claims::RefStoreError::CredentialRefused(_))
            }
            _ => false,
        };
        if credential {
            return Some(format!("GitHub refused the credential: {self}"));
        }
        matches!(self, Self::Journal(_)).then(|| format!("the local store failed: {self}"))
    }
}

/// The version of [`RepairContext`] as a hook reads it (2: `report` is the
/// failed attempt's typed report record, not a `[kind, status]` pair).
pub const REPAIR_INPUT_VERSION: u32 = 2;

/// What the repair hook gets (as JSON on stdin for a command hook).
#[derive(Debug, Clone, Serialize)]
pub struct RepairContext {
    /// Version of this input ([`REPAIR_INPUT_VERSION`]); a change that
    /// renames or removes a field bumps it.
    pub version: u32,
    /// Candidate id.
    pub candidate: CandidateId,
    /// Family string (`configs/<file>:<key>`).
    pub family: String,
    /// Config key.
    pub key: String,
    /// The candidate image.
    pub image: String,
    /// `owner/name`.
    pub repository: String,
    /// The branch to push the repair to.
    pub branch: String,
    /// Its current head.
    pub head: String,
    /// The pull request.
    pub pull_request: Option<u64>,
    /// The failed run.
    pub run: Option<RunRef>,
    /// Which repair this is, from 1.
    pub repair: u32,
    /// The budget.
    pub budget: u32,
    /// Repairs left after this one.
    pub budget_left: u32,
    /// What failed: `targeted` (the smoke) or `final-sweep`.
    pub phase: Phase,
    /// The failed attempt's typed report record as published on the PR
    /// (tables, notes, failed jobs); `null` when it cannot be read back.
    pub report: Value,
    /// The login every pushed commit must be authored by.
    pub author: String,
    /// The trailer line every pushed commit's message must carry
    /// (`Klaud-Candidate: <candidate>`); a commit without it, or by
    /// another author, is a person's, and Klaud hands the PR off.
    pub trailer: String,
    /// The failed run's jobs that did not succeed, with their log pages.
    pub failed_jobs: Vec<crate::report::FailedJob>,
    /// Names of the failed run's artifacts (download them through the
    /// Actions artifacts API).
    pub artifacts: Vec<String>,
}

/// What the repair hook did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepairOutcome {
    /// It pushed a new head to the branch as the bot.
    Pushed,
    /// It found no fix.
    GaveUp(String),
    /// It pushed nothing and proposes these variants instead (the grammar
    /// of `/klaud try`): they join the candidate's experiment as siblings,
    /// and the candidate waits for their race.
    Variants(Vec<crate::commands::TryRequest>),
}

/// An external repair agent.
#[async_trait]
pub trait RepairHook: Send + Sync {
    /// Tries to repair; returns once a new head is pushed or it gives up.
    async fn repair(&self, context: &RepairContext) -> Result<RepairOutcome, String>;
}

/// `klaud/auto-<candidate>`.
pub fn branch_name(candidate: &str) -> String {
    format!("klaud/auto-{candidate}")
}

/// `klaud-<owner run>-<candidate>`: the smoke `test-name` input.
pub fn smoke_test_name(owner_run: u64, candidate: &str) -> String {
    format!("klaud-{owner_run}-{candidate}")
}

const TRAILER: &str = "Klaud-Candidate: ";
/// How far GitHub's clock may be behind Klaud's when a run's creation time
/// is compared with the dispatch time.
/// The longest key list a PR title spells out: the title says it twice
/// (English and Chinese), and GitHub refuses titles over 256 characters.
const TITLE_KEYS_MAX: usize = 80;
const CLOCK_SKEW: TimeDelta = TimeDelta::minutes(5);
const INFRA_DETAIL: &str = "smoke, infrastructure failure";
const SWEEP_INFRA_DETAIL: &str = "full sweep, infrastructure failure";

/// Which ownership facts a mutation needs checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope<'a> {
    Claim,
    Branch,
    Pull,
    /// The pull request but not the branch (it may be deleted in cleanup).
    PullOnly,
    Run(u64, &'a str),
}

/// The state machine over a forge, a journal and the base checkout.
pub struct Engine<'a> {
    /// The forge behind the lease guard (every write checks the lease),
    /// with reads kept for the length of one step.
    forge: super::step_reads::StepReads<'a>,
    journal: &'a dyn Journal,
    clock: &'a dyn Clock,
    claimant: Claimant,
    baseline: &'a dyn BaselineSource,
    repair: Option<&'a dyn RepairHook>,
    repository: &'a Repository,
    repository_sha: String,
    config: &'a EngineConfig,
    /// The smoke and sweep workflows by base commit (they never change for
    /// a commit, so each is read once per engine).
    workflows: Mutex<BTreeMap<String, Arc<BaseWorkflows>>>,
}

/// The smoke and sweep workflow files at one base commit: `Ok(None)` when
/// the file is absent, `Err` (the parse error) when it does not parse.
#[derive(Debug)]
pub(crate) struct BaseWorkflows {
    smoke: Result<Option<Workflow>, String>,
    sweep: Result<Option<Workflow>, String>,
}

impl std::fmt::Debug for Engine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("claimant", &self.claimant)
            .field("repository_sha", &self.repository_sha)
            .finish_non_exhaustive()
    }
}

type Proved = Result<OwnershipProof, Progress>;

impl<'a> Engine<'a> {
    /// An engine over `repository`, a checkout of the base branch at
    /// `repository_sha`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        forge: &'a dyn Forge,
        journal: &'a dyn Journal,
        clock: &'a dyn Clock,
        claimant: Claimant,
        baseline: &'a dyn BaselineSource,
        repository: &'a Repository,
        repository_sha: impl Into<String>,
        config: &'a EngineConfig,
    ) -> Self {
        // Leases are recorded to the second, so one just renewed may have
        // less than a second more than asked for; the window never asks
        // for more than a quarter of what is surely left.
        let sure = (config.lease - TimeDelta::seconds(1)).max(TimeDelta::zero());
        let window = (config.lease_margin + config.write_timeout).min(sure / 4);
        Self {
            forge: super::step_reads::StepReads::new(super::lease_guard::LeaseGuard {
                inner: forge,
                clock,
                window,
            }),
            journal,
            clock,
            claimant,
            baseline,
            repair: None,
            repository,
            repository_sha: repository_sha.into(),
            config,
            workflows: Mutex::new(BTreeMap::new()),
        }
    }

    /// The clock this engine stamps and compares leases with (its
    /// callers stamp what they record for it with the same one).
    pub fn clock(&self) -> &'a dyn Clock {
        self.clock
    }

    /// Adds a repair hook.
    pub fn with_repair(mut self, hook: &'a dyn RepairHook) -> Self {
        self.repair = Some(hook);
        self
    }

    /// Asks the capacity gate, when there is one, whether `rec`'s family
    /// may use its clusters now. `Some(progress)`: it may not (or the API
    /// gave no usable answer), and the candidate ended `capacity-deferred`
    /// with the usual cleanup; the caller returns `progress`.
    async fn capacity_deferred(
        &self,
        rec: &mut CandidateRecord,
        before: &str,
    ) -> Result<Option<Progress>, EngineError> {
        let Some(why) = self.capacity_refusal(&rec.family).await? else {
            return Ok(None);
        };
        let phase = Self::phase_of(rec.step);
        let m = format!("capacity-deferred before {before}: {why}");
        Ok(Some(
            self.end(rec, Outcome::CapacityDeferred, phase, m, false)
                .await?,
        ))
    }

    /// Why `family` (with every family bumped together with it) may not
    /// use its clusters now (`None`: it may, or no gate is configured).
    async fn capacity_refusal(&self, family: &str) -> Result<Option<String>, EngineError> {
        let Some(gate) = self.config.capacity.as_deref() else {
            return Ok(None);
        };
        // A group is bumped, smoked and swept together: every member's
        // clusters must have room, not only the first member's.
        let members = self.bumped_together(family);
        let families = members
            .iter()
            .map(|m| self.family(m))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(
            match gate
                .check_all(self.repository, &families, self.clock.now())
                .await
            {
                klaud_planner::capacity::Verdict::Eligible { .. } => None,
                klaud_planner::capacity::Verdict::Deferred(why) => Some(why),
            },
        )
    }

    fn book(&self) -> ClaimBook<'_> {
        ClaimBook::new(self.forge.refs(), self.clock, self.claimant.clone())
    }

    /// A record of `candidate` on this engine's base with nothing done yet:
    /// at the claim step, owned by this engine's run, no image chosen.
    fn new_record(
        &self,
        candidate: &CandidateId,
        family: &str,
        key: String,
        old_image: String,
    ) -> CandidateRecord {
        CandidateRecord {
            candidate: candidate.clone(),
            family: family.to_owned(),
            key,
            old_image,
            image: String::new(),
            owner_run: self.config.owner_run,
            base_branch: self.config.base_branch.clone(),
            base_sha: self.repository_sha.clone(),
            branch: branch_name(candidate.as_str()),
            step: Step::Claim,
            claim: None,
            head: None,
            pending_commit: None,
            pull: None,
            pull_url: None,
            pull_opened_here: false,
            own_comments: None,
            frozen: None,
            attempts: Vec::new(),
            repairs: 0,
            sweep_requested_at: None,
            sweep: None,
            uncovered: Vec::new(),
            upkeep: None,
            ending: None,
            intent: None,
            updated_at: self.clock.now(),
            revision: None,
            clock: None,
            not_release_reason: None,
            upstream: None,
            versions: None,
            scope: None,
            variant: None,
            vanished: 0,
        }
    }

    /// The journal's record of `target`, or a new one rebuilt from GitHub:
    /// a PR that already carries this candidate's receipt is finished.
    pub fn open_record<'f>(
        &'f self,
        target: &'f Target,
    ) -> BoxFuture<'f, Result<CandidateRecord, EngineError>> {
        Box::pin(async move {
            if let Some(rec) = self.journal.load(target.candidate.as_str()).await? {
                // A deferral starts over once its clusters have room; until
                // then it stays as it is, without a GitHub request.
                if !rec.deferred() || self.capacity_refusal(&rec.family).await?.is_some() {
                    return Ok(rec);
                }
            }
            let family = self.family(&target.family)?;
            let mut rec = self.new_record(
                &target.candidate,
                &target.family,
                family.key.clone(),
                family.image().to_string(),
            );
            rec.image = target.image.clone();
            rec.revision = target.revision.clone();
            rec.clock = target.clock.clone();
            rec.not_release_reason = target.not_release_reason.clone();
            rec.upstream = target.upstream.clone();
            rec.versions = target.versions.clone();
            rec.variant = target.variant.clone();
            let branch = rec.branch.clone();
            if let Some(pull) = self.forge.find_pull(&branch).await? {
                self.rebuild_ending(&mut rec, &pull).await?;
            }
            self.save(&mut rec).await?;
            Ok(rec)
        })
    }

    /// With an empty journal, a PR that carries this candidate's receipt is
    /// finished, and one with its cleanup marker is mid-cleanup: the ending
    /// is re-derived from the published reports the same way it was first
    /// decided, so the receipt comes out the same.
    async fn rebuild_ending(
        &self,
        rec: &mut CandidateRecord,
        pull: &super::forge::Pull,
    ) -> Result<(), EngineError> {
        let comments = self.forge.list_comments(pull.number).await?;
        let mut cleanup = None;
        for c in &comments {
            if !self.by_bot(c.author.as_deref()) {
                continue;
            }
            let Ok(Some(found)) = find_record(&c.body) else {
                continue;
            };
            match &found.key {
                MarkerKey::Outcome { candidate, .. } if candidate.as_str() == rec.candidate => {
                    let Ok(receipt) = crate::report::parse_receipt(&found) else {
                        continue;
                    };
                    if receipt.result.outcome() == Outcome::CapacityDeferred
                        && !pull.state.is_open()
                    {
                        // A deferral is tried again from the start: the
                        // closed PR is history, not this attempt's end.
                        return Ok(());
                    }
                    rec.pull = Some(pull.number);
                    rec.pull_url = Some(pull.html_url.clone());
                    rec.owner_run = receipt.owner_run;
                    rec.head = receipt.head.clone();
                    rec.repairs = receipt.result.repairs();
                    rec.sweep = receipt.sweep.clone();
                    rec.ending = Some(Ending {
                        outcome: receipt.result.outcome(),
                        phase: receipt.result.phase(),
                        message: "found finished on GitHub".into(),
                        hands_off: true,
                        note: None,
                    });
                    rec.attempts = receipt
                        .result
                        .runs()
                        .iter()
                        .map(|r| AttemptRecord {
                            kind: AttemptKind::FinalSweep,
                            head: String::new(),
                            dispatched_at: None,
                            run: Some(r.clone()),
                            status: AttemptStatus::Passed,
                            infra: false,
                            reported: true,
                        })
                        .collect();
                    rec.step = Step::Finish;
                    return Ok(());
                }
                MarkerKey::Cleanup {
                    owner_run,
                    candidate,
                } if candidate.as_str() == rec.candidate => cleanup = Some(*owner_run),
                _ => {}
            }
        }
        let Some(owner_run) = cleanup else {
            return Ok(());
        };
        rec.owner_run = owner_run;
        rec.pull = Some(pull.number);
        rec.pull_url = Some(pull.html_url.clone());
        rec.attempts = self.reported_attempts(rec, &comments, true);
        rec.repairs = rec
            .attempts
            .iter()
            .filter_map(|a| match a.kind {
                AttemptKind::Repair { n, .. } => Some(n),
                _ => None,
            })
            .max()
            .unwrap_or(0)
            .max(self.published_repairs(rec, &comments));
        rec.head = rec
            .attempts
            .last()
            .map(|a| a.head.clone())
            .filter(|h| !h.is_empty());
        // Reports name only finished attempts: a run still going, and the
        // head, come from GitHub (the cleanup must cancel and delete them).
        let reported = rec.attempts.len();
        self.find_owned_runs(rec).await?;
        let (outcome, phase) = match rec.attempts[..reported].last() {
            Some(a) if a.kind == AttemptKind::FinalSweep => (Outcome::Failed, Phase::FinalSweep),
            Some(a) if a.status != AttemptStatus::Passed => (Outcome::Failed, Phase::Targeted),
            _ => (Outcome::UnexpectedError, Phase::Unknown),
        };
        // A variant's cleanup may be its stop by a sibling's win, which no
        // report shows: the claim's winner field says so.
        let (outcome, phase, message, note) = match self.stopped_by_winner(rec).await? {
            Some(m) => {
                let phase = rec.attempts[..reported]
                    .last()
                    .map_or(Phase::Resolve, |a| a.kind.phase());
                // As the stop's `end_now`: the receipt links the winner.
                (Outcome::Duplicate, phase, m.clone(), Some(m))
            }
            None => (
                outcome,
                phase,
                "resumed an interrupted cleanup".to_owned(),
                None,
            ),
        };
        rec.ending = Some(Ending {
            outcome,
            phase,
            message,
            hands_off: false,
            note,
        });
        rec.step = Step::Finish;
        Ok(())
    }

    /// Without a journal: the head Klaud last wrote (the branch tip, when
    /// it carries this candidate's trailer) and every run Klaud owns that
    /// the reports do not name yet: smoke runs by title and actor, sweeps
    /// by head. They are added as unreported attempts, so a cleanup
    /// cancels what still runs and the receipt names them.
    async fn find_owned_runs(&self, rec: &mut CandidateRecord) -> Result<(), EngineError> {
        if rec.head.is_none() {
            let trailer = format!("{TRAILER}{}", rec.candidate);
            if let Some(tip) = self.branch_tip(&rec.branch).await?
                && tip.message.lines().any(|l| l.trim() == trailer)
            {
                rec.head = Some(tip.sha);
            }
        }
        let head = rec.head.clone().unwrap_or_default();
        let title = match self.smoke_plan(rec, &head).await? {
            Ok(plan) => plan.title,
            Err(_) => format!(
                "e2e Test - {}",
                smoke_test_name(rec.owner_run, rec.candidate.as_str())
            ),
        };
        let known: Vec<u64> = rec.runs().iter().map(|r| r.id).collect();
        let smoke = self
            .forge
            .list_runs(&RunQuery {
                workflow: self.config.smoke_workflow.clone(),
                event: Some("workflow_dispatch".into()),
                actor: Some(self.forge.bot_login()),
                head_sha: None,
            })
            .await?;
        for r in smoke.iter().rev() {
            if r.title == title && !known.contains(&r.id) {
                rec.attempts.push(AttemptRecord {
                    kind: AttemptKind::Initial {
                        budget: self.config.repair_budget,
                    },
                    // A dispatched run's head_sha is the base tip; the
                    // attempt tested the candidate head.
                    head: if head.is_empty() {
                        r.head_sha.clone()
                    } else {
                        head.clone()
                    },
                    dispatched_at: None,
                    run: Some(RunRef {
                        id: r.id,
                        attempt: r.attempt,
                        url: r.html_url.clone(),
                    }),
                    status: if r.is_completed() {
                        AttemptStatus::Failed
                    } else {
                        AttemptStatus::Running
                    },
                    infra: false,
                    reported: false,
                });
            }
        }
        if let Some(head) = rec.head.clone() {
            let known: Vec<u64> = rec.runs().iter().map(|r| r.id).collect();
            let sweeps = self
                .forge
                .list_runs(&RunQuery {
                    workflow: self.config.sweep_workflow.clone(),
                    event: Some("pull_request".into()),
                    actor: None,
                    head_sha: Some(head.clone()),
                })
                .await?;
            for r in sweeps.iter().filter(|r| !known.contains(&r.id)) {
                rec.attempts.push(AttemptRecord {
                    kind: AttemptKind::FinalSweep,
                    head: head.clone(),
                    dispatched_at: None,
                    run: Some(RunRef {
                        id: r.id,
                        attempt: r.attempt,
                        url: r.html_url.clone(),
                    }),
                    status: AttemptStatus::Running,
                    infra: false,
                    reported: false,
                });
            }
        }
        Ok(())
    }

    /// Recovery (see `klaud_lifecycle::model`): after taking over the expired claim of another
    /// owner, finish its orphaned candidate as `unexpected-error` with the
    /// usual cleanup — unless a receipt already exists, then only release.
    /// The record keeps the orphan's owner run, so the cleanup marker and
    /// receipt complete the orphan's own records, and its runs (found by
    /// title and head) are cancelled if still going.
    pub fn recover<'f>(
        &'f self,
        family: &'f str,
        candidate: &'f CandidateId,
        held: &'f HeldClaim,
        orphan_run: u64,
    ) -> BoxFuture<'f, Result<CandidateRecord, EngineError>> {
        Box::pin(async move {
            let key = family.rsplit(':').next().unwrap_or(family).to_owned();
            let old_image = self
                .family(family)
                .map(|f| f.image().to_string())
                .unwrap_or_default();
            let mut rec = self.new_record(candidate, family, key, old_image);
            rec.owner_run = orphan_run;
            rec.step = Step::Finish;
            rec.claim = Some(super::journal::StoredClaim::of(held));
            let branch = rec.branch.clone();
            let trailer = format!("{TRAILER}{}", rec.candidate);
            if let Some(tip) = self.branch_tip(&branch).await?
                && tip.message.lines().any(|l| l.trim() == trailer)
            {
                rec.head = Some(tip.sha);
            }
            if let Some(pull) = self.forge.find_pull(&branch).await? {
                if self.by_bot(pull.author.as_deref()) {
                    rec.pull = Some(pull.number);
                    rec.pull_url = Some(pull.html_url.clone());
                }
                self.rebuild_ending(&mut rec, &pull).await?;
                if rec.ending.is_some() {
                    // A receipt (only release) or an interrupted cleanup.
                    rec.claim = Some(super::journal::StoredClaim::of(held));
                    self.save(&mut rec).await?;
                    return Ok(rec);
                }
                let comments = self.forge.list_comments(pull.number).await?;
                rec.attempts = self.reported_attempts(&rec, &comments, true);
            }
            self.find_owned_runs(&mut rec).await?;
            rec.ending = Some(Ending {
                outcome: Outcome::UnexpectedError,
                phase: Phase::Unknown,
                message: format!(
                    "recovered: the claim of run {orphan_run} expired before the candidate finished"
                ),
                hands_off: false,
                note: None,
            });
            self.save(&mut rec).await?;
            Ok(rec)
        })
    }

    /// Ends a candidate now (an operator's decision): `hands_off` leaves the
    /// PR and branch as they are and only releases Klaud's claim; otherwise
    /// the usual cleanup runs. The next [`Engine::step`] carries it out.
    pub fn end_now<'f>(
        &'f self,
        rec: &'f mut CandidateRecord,
        outcome: Outcome,
        message: String,
        hands_off: bool,
    ) -> BoxFuture<'f, Result<(), EngineError>> {
        Box::pin(async move {
            if rec.step == Step::Done {
                return Ok(());
            }
            let phase = Self::phase_of(rec.step);
            self.end(rec, outcome, phase, message.clone(), hands_off)
                .await?;
            // A person decided this end: the receipt says who and why.
            if let Some(ending) = rec.ending.as_mut() {
                ending.note = Some(message);
            }
            self.save(rec).await?;
            Ok(())
        })
    }

    /// Drives `rec` until it waits, finishes, is skipped or `max_steps`
    /// steps were taken.
    pub fn drive<'f>(
        &'f self,
        rec: &'f mut CandidateRecord,
        max_steps: usize,
    ) -> BoxFuture<'f, Result<Progress, EngineError>> {
        Box::pin(async move {
            let mut last = Progress::Advanced(rec.step);
            for _ in 0..max_steps {
                last = self.step(rec).await?;
                if !matches!(last, Progress::Advanced(_)) {
                    break;
                }
            }
            Ok(last)
        })
    }

    /// Advances `rec` by one step. Within the step each pull request,
    /// comment list, run and ref is read from GitHub once (see the module
    /// documentation of [`crate::engine`]).
    pub fn step<'f>(
        &'f self,
        rec: &'f mut CandidateRecord,
    ) -> BoxFuture<'f, Result<Progress, EngineError>> {
        Box::pin(async move {
            let _reads = self.forge.scope();
            let result = self.step_once(rec).await;
            self.count_vanished(rec, result).await
        })
    }

    /// A step that failed because something of the candidate's is gone
    /// would fail the same way for ever (a daemon or a kept store polling
    /// "not found"). After [`super::journal::VANISHED_TRIES`] such steps in
    /// a row the candidate ends `unexpected-error` with the usual cleanup of
    /// whatever is left; when the finish itself keeps finding things gone
    /// (its PR), it ends again without receipt or cleanup and only its
    /// claim is released. Nobody closed or merged it: a closed or merged PR
    /// still exists and ends through the usual steps.
    async fn count_vanished(
        &self,
        rec: &mut CandidateRecord,
        result: Result<Progress, EngineError>,
    ) -> Result<Progress, EngineError> {
        match result {
            Err(EngineError::Forge(ForgeError::NotFound(what))) if rec.step != Step::Done => {
                rec.vanished += 1;
                if rec.vanished < super::journal::VANISHED_TRIES {
                    self.save(rec).await?;
                    return Err(EngineError::Forge(ForgeError::NotFound(what)));
                }
                let tries = rec.vanished;
                rec.vanished = 0;
                let phase = Self::phase_of(rec.step);
                let message = format!(
                    "{what}: not found {tries} times in a row; the candidate's pull request, \
                     branch or run no longer exists (a reset or transferred repository, a \
                     deleted run), so it ends and its claim is released"
                );
                // Finishing itself reads the vanished thing: no receipt, no
                // cleanup, only the claim.
                let finishing = rec.step == Step::Finish;
                if finishing {
                    rec.pull = None;
                }
                self.end(rec, Outcome::UnexpectedError, phase, message, finishing)
                    .await
            }
            Ok(progress) => {
                if rec.vanished != 0 {
                    rec.vanished = 0;
                    self.save(rec).await?;
                }
                Ok(progress)
            }
            other => other,
        }
    }

    async fn step_once(&self, rec: &mut CandidateRecord) -> Result<Progress, EngineError> {
        // A `/klaud try` may have made this candidate a variant (issue 15).
        if !matches!(rec.step, Step::Claim | Step::Done) {
            self.adopt_listed_from_held(rec).await?;
        }
        if !matches!(rec.step, Step::Claim | Step::Done)
            && let Some(p) = self.renew(rec).await?
        {
            return Ok(p);
        }
        // An experiment's variant first looks at its siblings (issue 15).
        if rec.variant.is_some()
            && !matches!(rec.step, Step::Claim | Step::Finish | Step::Done)
            && let Some(p) = self.experiment_gate(rec).await?
        {
            return Ok(p);
        }
        if matches!(
            rec.step,
            Step::Baseline | Step::Smoke | Step::Repair | Step::Final | Step::Sweep
        ) && let Some(number) = rec.pull
        {
            let pull = self.forge.get_pull(number).await?;
            if !pull.state.is_open() {
                return self.closed_elsewhere(rec, &pull).await;
            }
        }
        let progress = match rec.step {
            Step::Claim => self.step_claim(rec).await?,
            Step::Prepare => self.step_prepare(rec).await?,
            Step::Open => self.step_open(rec).await?,
            Step::Baseline => self.step_baseline(rec).await?,
            Step::Smoke => self.step_smoke(rec).await?,
            Step::Repair => self.step_repair(rec).await?,
            Step::Final => self.step_final(rec).await?,
            Step::Sweep => self.step_sweep(rec).await?,
            Step::Finish => self.step_finish(rec).await?,
            Step::Done => Progress::Done(rec.ending.clone()),
        };
        Ok(progress)
    }

    // ------------------------------------------------------------ helpers

    fn family(&self, family: &str) -> Result<&Family, EngineError> {
        self.repository
            .family(family)
            .map_err(|e| EngineError::Invalid(format!("family {family}: {e}")))
    }

    /// The families one bump of `family` changes: its whole family group
    /// (repository order), or the family alone.
    pub(super) fn bumped_together(&self, family: &str) -> Vec<String> {
        match self.repository.group_of(family) {
            Some(group) if group.families.iter().any(|f| f == family) => group.families.clone(),
            _ => vec![family.to_owned()],
        }
    }

    /// The smoke's `test-config` command: every key the bump changes (a
    /// family group is smoked together, as it is bumped together) and
    /// their master files, each once, in repository order.
    fn smoke_command(&self, rec: &CandidateRecord) -> Result<String, EngineError> {
        let members = self.bumped_together(&rec.family);
        let mut files: Vec<&str> = Vec::new();
        let mut keys: Vec<&str> = Vec::new();
        for member in &members {
            let family = self.family(member)?;
            if !files.contains(&family.file.as_str()) {
                files.push(&family.file);
            }
            keys.push(&family.key);
        }
        Ok(format!(
            "test-config --config-files {} --config-keys {} --smoke",
            files.join(" "),
            keys.join(" ")
        ))
    }

    fn by_bot(&self, login: Option<&str>) -> bool {
        let bot = self.forge.bot_login();
        login.is_some_and(|l| l.eq_ignore_ascii_case(&bot))
    }

    /// The record's id (checked when the record was made or loaded); a
    /// `Result` so that callers keep one error path.
    fn candidate_id(rec: &CandidateRecord) -> Result<CandidateId, EngineError> {
        Ok(rec.candidate.clone())
    }

    async fn save(&self, rec: &mut CandidateRecord) -> Result<(), EngineError> {
        rec.updated_at = self.clock.now();
        self.journal.save(rec).await?;
        Ok(())
    }

    /// Records what is about to happen, durably, before it happens.
    async fn intend(&self, rec: &mut CandidateRecord, what: Intent) -> Result<(), EngineError> {
        rec.intent = Some(what);
        self.save(rec).await
    }

    fn title(&self, rec: &CandidateRecord) -> String {
        let image = ImageRef::parse(&rec.image).ok();
        let engine = self
            .family(&rec.family)
            .ok()
            .zip(image.as_ref())
            .map(|(f, i)| engine_display(&f.entry.framework, &i.repository()))
            .unwrap_or_else(|| "engine".into());
        let tag = image
            .as_ref()
            .and_then(|i| i.tag().map(str::to_owned))
            .unwrap_or_else(|| rec.image.clone());
        let title = pr_title(
            &self.config.display_name,
            &self.title_keys(rec),
            &engine,
            &tag,
        );
        match &rec.variant {
            Some(v) => crate::experiment::variant_title(&title, &self.config.display_name, &v.name),
            None => title,
        }
    }

    /// The keys a PR title names: the family's own, or every member of a
    /// family group (`a + b`). GitHub cuts titles at 256 characters, so a
    /// group too long to list names its first key and how many more.
    fn title_keys(&self, rec: &CandidateRecord) -> String {
        let keys = self.changelog_keys(rec);
        let all = keys.join(" + ");
        if keys.len() <= 1 || all.chars().count() <= TITLE_KEYS_MAX {
            return all;
        }
        format!("{} + {} more", keys[0], keys.len() - 1)
    }

    /// The smoke and sweep workflows at the candidate's base commit.
    async fn base_workflows(&self, sha: &str) -> Result<Arc<BaseWorkflows>, EngineError> {
        if let Some(w) = self.lock_workflows().get(sha) {
            return Ok(w.clone());
        }
        let mut read = Vec::new();
        for file in [&self.config.smoke_workflow, &self.config.sweep_workflow] {
            let parsed = match self.forge.read_file(&workflow_path(file), sha).await? {
                None => Ok(None),
                Some(bytes) => String::from_utf8(bytes)
                    .map_err(|_| format!("{}: not UTF-8", workflow_path(file)))
                    .and_then(|text| {
                        Workflow::parse(file, &text)
                            .map(Some)
                            .map_err(|e| e.to_string())
                    }),
            };
            read.push(parsed);
        }
        let sweep = read.pop().unwrap_or(Ok(None));
        let smoke = read.pop().unwrap_or(Ok(None));
        let w = Arc::new(BaseWorkflows { smoke, sweep });
        self.lock_workflows().insert(sha.to_owned(), w.clone());
        Ok(w)
    }

    fn lock_workflows(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<BaseWorkflows>>> {
        // A poisoned cache only means a panic elsewhere; its entries are
        // still whole (inserted in one call).
        self.workflows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What the smoke of `rec` dispatches and the title its run carries,
    /// from the smoke workflow at the base commit. `Ok(Err(message))`: the
    /// workflow cannot be dispatched as Klaud needs (the candidate ends).
    async fn smoke_plan(
        &self,
        rec: &CandidateRecord,
        head: &str,
    ) -> Result<Result<SmokeDispatch, String>, EngineError> {
        let workflows = self.base_workflows(&rec.base_sha).await?;
        let smoke = match &workflows.smoke {
            Ok(w) => w.as_ref(),
            Err(e) => return Ok(Err(e.clone())),
        };
        let test_name = smoke_test_name(rec.owner_run, rec.candidate.as_str());
        let command = match self.smoke_command(rec) {
            Ok(command) => command,
            Err(e) => return Ok(Err(e.to_string())),
        };
        let wanted = klaud_smoke_inputs(head, &command, &test_name);
        Ok(smoke_dispatch(
            smoke,
            &wanted,
            &rec.base_branch,
            &self.forge.bot_login(),
            &format!("e2e Test - {test_name}"),
        )
        .map_err(|e| e.to_string()))
    }

    /// The title GitHub gives the sweep of `pull` (`None`: no sweep file).
    async fn sweep_title(
        &self,
        rec: &CandidateRecord,
        pull: &super::forge::Pull,
    ) -> Result<Option<String>, EngineError> {
        let workflows = self.base_workflows(&rec.base_sha).await?;
        let Ok(Some(w)) = &workflows.sweep else {
            return Ok(None);
        };
        // A run-name that does not evaluate is GitHub's problem to show;
        // the run is still recognised by pull request and head.
        Ok(crate::workflows::sweep_title(
            Some(w),
            pull,
            &rec.base_branch,
            &self.forge.repo(),
            &self.config.sweep_label,
        )
        .ok()
        .flatten())
    }

    fn phase_of(step: Step) -> Phase {
        match step {
            Step::Claim | Step::Prepare | Step::Open => Phase::Resolve,
            Step::Baseline => Phase::Baseline,
            Step::Smoke | Step::Repair => Phase::Targeted,
            Step::Final | Step::Sweep => Phase::FinalSweep,
            Step::Finish | Step::Done => Phase::Unknown,
        }
    }

    /// Decides the end and moves to `Finish`.
    async fn end(
        &self,
        rec: &mut CandidateRecord,
        outcome: Outcome,
        phase: Phase,
        message: String,
        hands_off: bool,
    ) -> Result<Progress, EngineError> {
        rec.ending = Some(Ending {
            outcome,
            phase,
            message,
            hands_off,
            note: None,
        });
        rec.step = Step::Finish;
        self.save(rec).await?;
        Ok(Progress::Advanced(Step::Finish))
    }

    async fn on_mismatch(
        &self,
        rec: &mut CandidateRecord,
        m: Mismatch,
    ) -> Result<Progress, EngineError> {
        // Whoever took the candidate away (`klaud claims release --force`,
        // recovery) may already have published its receipt: that outcome
        // stands, so the receipt, `klaud status` and the dashboard agree.
        if let Some(number) = rec.pull
            && let Some((outcome, phase, note)) = self.published_outcome(number, rec).await?
        {
            rec.ending = Some(Ending {
                outcome,
                phase,
                message: format!("ended elsewhere: the receipt on #{number} says {outcome}"),
                hands_off: true,
                note,
            });
            rec.step = Step::Finish;
            self.save(rec).await?;
            return Ok(Progress::Advanced(Step::Finish));
        }
        let phase = Self::phase_of(rec.step);
        match m.kind {
            MismatchKind::ClaimRemoved => self.claim_removed_by_hand(rec, m).await,
            MismatchKind::Handoff => {
                // A person took the PR over: Klaud touches nothing, but the
                // PR still says so (the receipt, posted as a reply), so the
                // end is not only in this instance's journal.
                let note = format!(
                    "a person took over: {} is {} (Klaud expected {}); Klaud stopped and left \
                     the pull request as it is",
                    m.what, m.found, m.expected
                );
                self.end(rec, Outcome::Handoff, phase, m.to_string(), true)
                    .await?;
                if let Some(ending) = rec.ending.as_mut() {
                    ending.note = Some(note);
                }
                self.save(rec).await?;
                Ok(Progress::Advanced(Step::Finish))
            }
            MismatchKind::Unexpected => {
                self.end(rec, Outcome::UnexpectedError, phase, m.to_string(), true)
                    .await
            }
        }
    }

    /// The claim ref was deleted and nobody published an ending: a
    /// maintainer released the family by hand. Klaud claims it again only
    /// to let go properly (its runs cancelled, its PR closed with a receipt
    /// saying why, its branch deleted, the claim released), so the family
    /// is not blocked by an orphaned open PR and may be planned again. When
    /// somebody else claimed the family meanwhile it is theirs: hands off.
    async fn claim_removed_by_hand(
        &self,
        rec: &mut CandidateRecord,
        m: Mismatch,
    ) -> Result<Progress, EngineError> {
        let phase = Self::phase_of(rec.step);
        let removed = match rec.claim.as_ref() {
            Some(stored) => Some(stored.held()?),
            None => None,
        };
        let ref_name = removed
            .as_ref()
            .map_or_else(|| m.what.clone(), |h| h.ref_name.clone());
        let candidates = removed
            .map(|h| h.record.candidates)
            .filter(|c| !c.is_empty());
        rec.claim = None;
        let family = Self::candidate_id(rec)?.family();
        let book = self.book();
        let mut held = None;
        if let Some(candidates) = candidates {
            self.intend(rec, Intent::AcquireClaim).await?;
            match book
                .acquire(
                    &family,
                    candidates,
                    &self.repository_sha,
                    rec.owner_run,
                    self.config.lease,
                )
                .await
                .map_err(EngineError::ClaimOp)?
            {
                Acquire::Won(h) => held = Some(h),
                Acquire::Occupied(entry) => {
                    held = book
                        .adopt(&entry)
                        .filter(|h| h.record.candidate_ids().contains(&rec.candidate.as_str()));
                }
            }
        }
        let Some(held) = held else {
            let message = format!(
                "{m}; the family was claimed again by someone else before Klaud could let go"
            );
            return self
                .end(rec, Outcome::UnexpectedError, phase, message, true)
                .await;
        };
        self.hold(rec, &held);
        let note = format!(
            "the claim {ref_name} was removed by hand: Klaud takes that as a maintainer's \
             release, stops its runs, closes this pull request and may plan the family again"
        );
        self.end(rec, Outcome::Handoff, phase, m.to_string(), false)
            .await?;
        if let Some(ending) = rec.ending.as_mut() {
            ending.note = Some(note);
        }
        self.save(rec).await?;
        Ok(Progress::Advanced(Step::Finish))
    }

    /// Someone else closed or merged the PR (issue 11): Klaud stops
    /// touching it. The finish cancels Klaud's own running runs, writes the
    /// receipt and releases the claim, and nothing else (no labels, no
    /// report, no changelog, no sweep wait). Merged ends `validated` when
    /// its sweep was verified, else `handoff`; closed ends `handoff`
    /// naming who closed it.
    async fn closed_elsewhere(
        &self,
        rec: &mut CandidateRecord,
        pull: &super::forge::Pull,
    ) -> Result<Progress, EngineError> {
        let phase = Self::phase_of(rec.step);
        let (outcome, message) = if pull.state.is_merged() {
            let verified = rec.sweep.is_some() && rec.step == Step::Sweep;
            (
                if verified {
                    Outcome::Validated
                } else {
                    Outcome::Handoff
                },
                format!("#{} was merged by someone else", pull.number),
            )
        } else {
            let closer = self.forge.closed_by(pull.number).await?;
            if self.by_bot(closer.as_deref()) {
                // Klaud's own login closed it: another instance that took
                // the claim over (or an operator's forced release), not a
                // person's decision. Its receipt, once posted, is the end.
                let m = Mismatch {
                    kind: MismatchKind::Unexpected,
                    what: format!("state of #{}", pull.number),
                    expected: "open".into(),
                    found: "closed by another Klaud instance, which took the claim over".into(),
                };
                return self.on_mismatch(rec, m).await;
            }
            let who = closer.map_or_else(|| "someone else".to_owned(), |l| format!("@{l}"));
            (
                Outcome::Handoff,
                format!("#{} was closed by {who}", pull.number),
            )
        };
        self.end(rec, outcome, phase, message.clone(), false)
            .await?;
        if let Some(ending) = rec.ending.as_mut() {
            ending.note = Some(message);
        }
        self.save(rec).await?;
        Ok(Progress::Advanced(Step::Finish))
    }

    /// The outcome, phase and note of the bot's receipt for `rec`'s
    /// candidate on PR `number`, if one was published (by any owner run).
    async fn published_outcome(
        &self,
        number: u64,
        rec: &CandidateRecord,
    ) -> Result<Option<(Outcome, Phase, Option<String>)>, EngineError> {
        let comments = self.forge.list_comments(number).await?;
        Ok(comments
            .iter()
            .filter(|c| self.by_bot(c.author.as_deref()))
            .filter_map(|c| find_record(&c.body).ok().flatten())
            .filter(|f| {
                matches!(&f.key, MarkerKey::Outcome { candidate, .. }
                    if candidate.as_str() == rec.candidate)
            })
            .find_map(|f| crate::report::parse_receipt(&f).ok())
            .map(|r| (r.result.outcome(), r.result.phase(), r.note)))
    }

    /// Runs the ownership check for `scope`. `Err(progress)` means the
    /// candidate ended (mismatch) and the caller must return `progress`.
    async fn prove(
        &self,
        rec: &mut CandidateRecord,
        scope: Scope<'_>,
    ) -> Result<Proved, EngineError> {
        if rec.claim.is_none() {
            // An empty journal: the claim may still be ours on GitHub.
            let book = self.book();
            let family = Self::candidate_id(rec)?.family();
            if let Some(entry) = book.inspect(&family).await.map_err(EngineError::ClaimOp)?
                && let Some(held) = book.adopt(&entry)
                && held
                    .record
                    .candidate_ids()
                    .contains(&rec.candidate.as_str())
            {
                self.hold(rec, &held);
            }
        }
        // A write needs lease left (the lease guard): a step that has run
        // long renews before it proves.
        if let Some(p) = self.renew(rec).await? {
            return Ok(Err(p));
        }
        let Some(stored) = rec.claim.clone() else {
            let m = Mismatch {
                kind: MismatchKind::Unexpected,
                what: "claim".into(),
                expected: "a claim held by this instance".into(),
                found: "none recorded".into(),
            };
            return Ok(Err(self.on_mismatch(rec, m).await?));
        };
        let held = stored.held()?;
        let branch = rec.branch.clone();
        let head = rec.head.clone();
        let with_branch = matches!(scope, Scope::Branch | Scope::Pull | Scope::Run(..));
        let with_pull = matches!(scope, Scope::Pull | Scope::PullOnly | Scope::Run(..));
        let expect = Expectation {
            claim: &held,
            branch: if with_branch {
                head.as_deref().map(|h| (branch.as_str(), h))
            } else {
                None
            },
            creates: (scope == Scope::Claim).then_some(branch.as_str()),
            pull: if with_pull { rec.pull } else { None },
            run: match scope {
                Scope::Run(id, title) => Some((id, title)),
                _ => None,
            },
        };
        match ownership::check(&self.forge, expect).await {
            Ok(proof) => Ok(Ok(proof)),
            Err(OwnershipError::Mismatch(m)) => Ok(Err(self.on_mismatch(rec, m).await?)),
            Err(OwnershipError::Forge(e)) => Err(e.into()),
        }
    }

    /// Renews the lease when less than half of it is left.
    /// More than half of the lease is left: renewing now would only cost a write.
    fn lease_needs_no_renewal(&self, held: &HeldClaim) -> bool {
        let left = held
            .record
            .lease_until
            .map(|u| u - self.clock.now())
            .unwrap_or_else(TimeDelta::zero);
        left * 2 > self.config.lease
    }

    async fn renew(&self, rec: &mut CandidateRecord) -> Result<Option<Progress>, EngineError> {
        let Some(stored) = rec.claim.clone() else {
            return Ok(None);
        };
        if rec.ending.as_ref().is_some_and(|e| e.hands_off) {
            return Ok(None);
        }
        let held = stored.held()?;
        if self.lease_needs_no_renewal(&held) {
            return Ok(None);
        }
        let mut renewed = self
            .book()
            .renew(&held, self.config.lease)
            .await
            .map_err(EngineError::ClaimOp)?;
        // A sibling variant renewed the shared claim first: its tip is ours.
        if matches!(renewed, Renew::Lost(klaud_claims::Lost::Moved(_)))
            && self.adopt_moved_claim(rec).await?
            && let Some(stored) = rec.claim.clone()
        {
            let held = stored.held()?;
            if self.lease_needs_no_renewal(&held) {
                return Ok(None);
            }
            renewed = self
                .book()
                .renew(&held, self.config.lease)
                .await
                .map_err(EngineError::ClaimOp)?;
        }
        match renewed {
            Renew::Renewed(h) => {
                rec.claim = Some(super::journal::StoredClaim::of(&h));
                self.save(rec).await?;
                Ok(None)
            }
            Renew::Lost(klaud_claims::Lost::Gone) => {
                let m = Mismatch {
                    kind: MismatchKind::ClaimRemoved,
                    what: format!("claim {}", held.ref_name),
                    expected: "the claim this instance renews".into(),
                    found: "no claim ref (deleted)".into(),
                };
                Ok(Some(self.on_mismatch(rec, m).await?))
            }
            Renew::Lost(lost) => {
                rec.claim = None;
                let phase = Self::phase_of(rec.step);
                let m = format!("the claim was lost: {lost}");
                Ok(Some(
                    self.end(rec, Outcome::UnexpectedError, phase, m, true)
                        .await?,
                ))
            }
        }
    }

    /// Whether `pull` is a closed PR of the bot that an earlier attempt of
    /// `rec` closed as `capacity-deferred` (a new PR is opened beside it).
    async fn deferred_pull(
        &self,
        rec: &CandidateRecord,
        pull: &super::forge::Pull,
    ) -> Result<bool, EngineError> {
        if pull.state.is_open() || !self.by_bot(pull.author.as_deref()) {
            return Ok(false);
        }
        let comments = self.forge.list_comments(pull.number).await?;
        Ok(comments.iter().any(|c| {
            self.by_bot(c.author.as_deref())
                && find_record(&c.body).ok().flatten().is_some_and(|f| {
                    matches!(&f.key, MarkerKey::Outcome { candidate, .. } if candidate.as_str() == rec.candidate)
                        && crate::report::parse_receipt(&f)
                            .is_ok_and(|r| r.result.outcome() == Outcome::CapacityDeferred)
                })
        }))
    }

    /// Publishes every rendered comment whose marker is not on the PR yet.
    async fn publish(
        &self,
        rec: &mut CandidateRecord,
        rendered: &[RenderedComment],
        scope: Scope<'_>,
    ) -> Result<Option<Progress>, EngineError> {
        let Some(number) = rec.pull else {
            return Ok(None);
        };
        let comments = self.report_comments(rec, number).await?;
        // A live report of the same run is replaced in its comment by the
        // final one (its first part); any other existing record is final.
        let live = rendered.iter().find_map(|r| {
            self.live_comment(&comments, &r.key)
                .map(|(c, _)| (c.id, &r.key))
        });
        let missing: Vec<&RenderedComment> = rendered
            .iter()
            .filter(|r| {
                live.is_some_and(|(_, k)| *k == r.key)
                    || !comments.iter().any(|c| {
                        self.by_bot(c.author.as_deref())
                            && live.is_none_or(|(id, _)| id != c.id)
                            && find_record(&c.body)
                                .ok()
                                .flatten()
                                .is_some_and(|f| f.key == r.key)
                    })
            })
            .collect();
        if missing.is_empty() {
            return Ok(None);
        }
        let proof = match self.prove(rec, scope).await? {
            Ok(p) => p,
            Err(p) => return Ok(Some(p)),
        };
        for r in missing {
            self.intend(rec, Intent::Comment(r.key.to_string())).await?;
            match live {
                Some((id, k)) if *k == r.key => {
                    if !self
                        .edit_own_comment(rec, &proof, number, id, &r.body)
                        .await?
                    {
                        // A person deleted the live report: the next step
                        // lists the comments and posts the report anew.
                        return Ok(Some(Progress::Waiting(
                            "the live report comment is gone; posting the report anew".into(),
                        )));
                    }
                }
                _ => {
                    let written = self.forge.create_comment(&proof, number, &r.body).await?;
                    Self::remember_comment(rec, written);
                }
            }
        }
        Ok(None)
    }
}

/// Splits a completed run's conclusion into an attempt status and whether
/// it was the infrastructure's fault (retried without counting as repair).
fn classify(run: &Run) -> (AttemptStatus, bool) {
    match &run.conclusion {
        Some(RunConclusion::Success) => (AttemptStatus::Passed, false),
        Some(RunConclusion::Failure) => (AttemptStatus::Failed, false),
        // Cancelled by someone else, a lost runner, or by Klaud after the
        // run timeout: never the candidate's fault.
        Some(RunConclusion::Cancelled) => (AttemptStatus::Cancelled, true),
        _ => (AttemptStatus::Failed, true),
    }
}

/// Klaud's `perf-changelog.yaml` entry for a bump of family `key` to
/// `image`, listing `config_keys` and linking `link` (its PR). The final
/// step and the upkeep merge both write this entry; the repository's gate
/// (`utils/validate_perf_changelog.py`) is run on it in the tests.
pub fn changelog_entry(
    config_keys: Vec<String>,
    key: &str,
    image: &str,
    link: &str,
) -> klaud_planner::changelog::ChangelogEntry {
    let tag = klaud_planner::image::ImageRef::parse(image)
        .ok()
        .and_then(|i| i.tag().map(str::to_owned))
        .unwrap_or_else(|| "a new build".into());
    klaud_planner::changelog::ChangelogEntry {
        config_keys,
        description: description(key, &tag),
        pr_link: link.to_owned(),
    }
}

/// The changelog sentence, at most 120 characters.
fn description(key: &str, tag: &str) -> String {
    let full = format!("Update {key} image to {tag}");
    if full.chars().count() <= 120 {
        return full;
    }
    let short = format!("Update image to {tag}");
    short.chars().take(120).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn description_fits_the_changelog_rule() {
        let d = description(&"k".repeat(200), "v1");
        assert!(d.chars().count() <= 120, "{d}");
        assert_eq!(description("a", "v1"), "Update a image to v1");
    }

    #[test]
    fn infrastructure_conclusions_are_retried() {
        let run = |c: &str| Run {
            id: 1,
            attempt: 1,
            title: String::new(),
            event: "workflow_dispatch".into(),
            status: RunStatus::Completed,
            conclusion: Some(RunConclusion::parse(c)),
            head_sha: String::new(),
            actor: None,
            created_at: None,
            html_url: String::new(),
            head_branch: None,
            head_repo: None,
            pull_requests: Vec::new(),
        };
        assert_eq!(classify(&run("success")), (AttemptStatus::Passed, false));
        assert_eq!(classify(&run("failure")), (AttemptStatus::Failed, false));
        for c in ["startup_failure", "timed_out", "cancelled", "stale"] {
            assert!(classify(&run(c)).1, "{c}");
        }
    }

    #[test]
    fn names_follow_the_helper() {
        assert_eq!(branch_name("a-b"), "klaud/auto-a-b");
        assert_eq!(smoke_test_name(7, "a-b"), "klaud-7-a-b");
    }
}
