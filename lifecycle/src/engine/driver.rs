//! The steps of a candidate's life. See the module documentation of
//! [`crate::engine`] for the rules every step follows.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::TimeDelta;
use klaud_claims::{
    Acquire, CandidateId, ClaimBook, ClaimCandidate, ClaimEntry, Claimant, Clock, HeldClaim, Renew,
};
use klaud_planner::changelog::{CHANGELOG_PATH, ChangelogEntry, append_entry, validate_append};
use klaud_planner::image::ImageRef;
use klaud_planner::repo::{Family, Repository};
use serde::Serialize;
use serde_json::{Value, json};

use super::forge::{Forge, ForgeError, Run, RunQuery};
use super::journal::{AttemptRecord, CandidateRecord, Ending, Journal, JournalError, Step};
use super::ownership::{self, Expectation, Mismatch, MismatchKind, OwnershipError, OwnershipProof};
use crate::artifacts::{
    Artifact, ArtifactLimits, BenchmarkRow, EvalRow, SweepManifest, parse_artifact,
};
use crate::baseline::{
    Baseline, BaselinePoint, BaselineRequest, BaselineSource, BaselineValue, FamilyKey,
    family_points, freeze,
};
use crate::model::{
    AttemptKind, AttemptStatus, DEFAULT_REPAIR_BUDGET, FinishedResult, MAX_INFRA_RETRIES, Outcome,
    Phase, RunRef,
};
use crate::report::{
    AttemptReport, BASELINE_START, FrozenBaseline, MarkerKey, Provenance, Receipt, RenderedComment,
    ReportName, SweepCheck, compare, compare_evals, engine_display, find_record, initial_body,
    parse_baseline_block, parse_report, pr_title, render_baseline_block, render_cleanup,
    render_receipt, render_report, splice_baseline,
};

/// Every sweep label Klaud manages (spec §3.5).
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
    /// Post `/use <run-id>` after a validated sweep.
    pub post_use_comment: bool,
    /// How long a dispatched run may take to show up before Klaud
    /// dispatches again.
    pub dispatch_grace: TimeDelta,
    /// Model (as in the master config) → display name the baseline API wants.
    pub model_names: BTreeMap<String, String>,
    /// Bounds on artifact sizes.
    pub artifact_limits: ArtifactLimits,
    /// Base of the changelog's `pr-link` (the benchmark repository's gate
    /// wants `https://github.com/<owner>/<repo>/pull/<N>`).
    pub pr_link_base: String,
}

impl EngineConfig {
    /// The defaults of spec §3.5 and §6 for `owner_run`.
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
            post_use_comment: false,
            dispatch_grace: TimeDelta::minutes(2),
            model_names: BTreeMap::new(),
            artifact_limits: ArtifactLimits::default(),
            pr_link_base: "https://github.com".into(),
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
    Claim(String),
    /// The candidate does not fit the repository.
    #[error("{0}")]
    Invalid(String),
}

/// What the repair hook gets (as JSON on stdin for a command hook).
#[derive(Debug, Clone, Serialize)]
pub struct RepairContext {
    /// Candidate id.
    pub candidate: String,
    /// Family.
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
    /// The failed attempt's report record.
    pub report: Value,
}

/// What the repair hook did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepairOutcome {
    /// It pushed a new head to the branch as the bot.
    Pushed,
    /// It found no fix.
    GaveUp(String),
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
    forge: &'a dyn Forge,
    journal: &'a dyn Journal,
    clock: &'a dyn Clock,
    claimant: Claimant,
    baseline: &'a dyn BaselineSource,
    repair: Option<&'a dyn RepairHook>,
    repository: &'a Repository,
    repository_sha: String,
    config: &'a EngineConfig,
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
        Self {
            forge,
            journal,
            clock,
            claimant,
            baseline,
            repair: None,
            repository,
            repository_sha: repository_sha.into(),
            config,
        }
    }

    /// Adds a repair hook.
    pub fn with_repair(mut self, hook: &'a dyn RepairHook) -> Self {
        self.repair = Some(hook);
        self
    }

    fn book(&self) -> ClaimBook<'_> {
        ClaimBook::new(self.forge.refs(), self.clock, self.claimant.clone())
    }

    /// The journal's record of `target`, or a new one rebuilt from GitHub:
    /// a PR that already carries this candidate's receipt is finished.
    pub async fn open_record(&self, target: &Target) -> Result<CandidateRecord, EngineError> {
        if let Some(rec) = self.journal.load(target.candidate.as_str()).await? {
            return Ok(rec);
        }
        let family = self.family(&target.family)?;
        let branch = branch_name(target.candidate.as_str());
        let mut rec = CandidateRecord {
            candidate: target.candidate.as_str().to_owned(),
            family: target.family.clone(),
            key: family.key.clone(),
            old_image: family.image().to_string(),
            image: target.image.clone(),
            owner_run: self.config.owner_run,
            base_branch: self.config.base_branch.clone(),
            base_sha: self.repository_sha.clone(),
            branch: branch.clone(),
            step: Step::Claim,
            claim: None,
            head: None,
            pending_commit: None,
            pull: None,
            pull_url: None,
            frozen: None,
            attempts: Vec::new(),
            repairs: 0,
            sweep_requested_at: None,
            sweep: None,
            ending: None,
            intent: None,
            updated_at: self.clock.now(),
            revision: target.revision.clone(),
            clock: target.clock.clone(),
            not_release_reason: target.not_release_reason.clone(),
        };
        if let Some(pull) = self.forge.find_pull(&branch).await? {
            self.rebuild_ending(&mut rec, &pull).await?;
        }
        self.save(&mut rec).await?;
        Ok(rec)
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
            .unwrap_or(0);
        rec.head = rec
            .attempts
            .last()
            .map(|a| a.head.clone())
            .filter(|h| !h.is_empty());
        let (outcome, phase) = match rec.attempts.last() {
            Some(a) if a.kind == AttemptKind::FinalSweep => (Outcome::Failed, Phase::FinalSweep),
            Some(a) if a.status != AttemptStatus::Passed => (Outcome::Failed, Phase::Targeted),
            _ => (Outcome::UnexpectedError, Phase::Unknown),
        };
        rec.ending = Some(Ending {
            outcome,
            phase,
            message: "resumed an interrupted cleanup".into(),
            hands_off: false,
        });
        rec.step = Step::Finish;
        Ok(())
    }

    /// Recovery (spec §6): after taking over the expired claim of another
    /// owner, finish its orphaned candidate as `unexpected-error` with the
    /// usual cleanup — unless a receipt already exists, then only release.
    /// The record keeps the orphan's owner run, so the cleanup marker and
    /// receipt complete the orphan's own records, and its runs (found by
    /// title and head) are cancelled if still going.
    pub async fn recover(
        &self,
        family: &str,
        candidate: &CandidateId,
        held: &HeldClaim,
        orphan_run: u64,
    ) -> Result<CandidateRecord, EngineError> {
        let branch = branch_name(candidate.as_str());
        let key = family.rsplit(':').next().unwrap_or(family).to_owned();
        let old_image = self
            .family(family)
            .map(|f| f.image().to_string())
            .unwrap_or_default();
        let mut rec = CandidateRecord {
            candidate: candidate.as_str().to_owned(),
            family: family.to_owned(),
            key,
            old_image,
            image: String::new(),
            revision: None,
            clock: None,
            not_release_reason: None,
            owner_run: orphan_run,
            base_branch: self.config.base_branch.clone(),
            base_sha: self.repository_sha.clone(),
            branch: branch.clone(),
            step: Step::Finish,
            claim: Some(super::journal::StoredClaim::of(held)),
            head: None,
            pending_commit: None,
            pull: None,
            pull_url: None,
            frozen: None,
            attempts: Vec::new(),
            repairs: 0,
            sweep_requested_at: None,
            sweep: None,
            ending: None,
            intent: None,
            updated_at: self.clock.now(),
        };
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
        let title = format!("e2e Test - {}", smoke_test_name(orphan_run, &rec.candidate));
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
                    head: r.head_sha.clone(),
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
        rec.ending = Some(Ending {
            outcome: Outcome::UnexpectedError,
            phase: Phase::Unknown,
            message: format!(
                "recovered: the claim of run {orphan_run} expired before the candidate finished"
            ),
            hands_off: false,
        });
        self.save(&mut rec).await?;
        Ok(rec)
    }

    /// Ends a candidate now (an operator's decision): `hands_off` leaves the
    /// PR and branch as they are and only releases Klaud's claim; otherwise
    /// the usual cleanup runs. The next [`Engine::step`] carries it out.
    pub async fn end_now(
        &self,
        rec: &mut CandidateRecord,
        outcome: Outcome,
        message: String,
        hands_off: bool,
    ) -> Result<(), EngineError> {
        if rec.step == Step::Done {
            return Ok(());
        }
        let phase = Self::phase_of(rec.step);
        self.end(rec, outcome, phase, message, hands_off).await?;
        Ok(())
    }

    /// Drives `rec` until it waits, finishes, is skipped or `max_steps`
    /// steps were taken.
    pub async fn drive(
        &self,
        rec: &mut CandidateRecord,
        max_steps: usize,
    ) -> Result<Progress, EngineError> {
        let mut last = Progress::Advanced(rec.step);
        for _ in 0..max_steps {
            last = self.step(rec).await?;
            if !matches!(last, Progress::Advanced(_)) {
                break;
            }
        }
        Ok(last)
    }

    /// Advances `rec` by one step.
    pub async fn step(&self, rec: &mut CandidateRecord) -> Result<Progress, EngineError> {
        if !matches!(rec.step, Step::Claim | Step::Done)
            && let Some(p) = self.renew(rec).await?
        {
            return Ok(p);
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

    fn by_bot(&self, login: Option<&str>) -> bool {
        let bot = self.forge.bot_login();
        login.is_some_and(|l| l.eq_ignore_ascii_case(&bot))
    }

    fn candidate_id(rec: &CandidateRecord) -> Result<CandidateId, EngineError> {
        CandidateId::new(&rec.candidate)
            .map_err(|e| EngineError::Invalid(format!("candidate {}: {e}", rec.candidate)))
    }

    async fn save(&self, rec: &mut CandidateRecord) -> Result<(), EngineError> {
        rec.updated_at = self.clock.now();
        self.journal.save(rec).await?;
        Ok(())
    }

    /// Records what is about to happen, durably, before it happens.
    async fn intend(&self, rec: &mut CandidateRecord, what: &str) -> Result<(), EngineError> {
        rec.intent = Some(what.to_owned());
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
        pr_title(&self.config.display_name, &rec.key, &engine, &tag)
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
        let outcome = match m.kind {
            MismatchKind::Handoff => Outcome::Handoff,
            MismatchKind::Unexpected => Outcome::UnexpectedError,
        };
        let phase = Self::phase_of(rec.step);
        self.end(rec, outcome, phase, m.to_string(), true).await
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
            if let Some(entry) = book
                .inspect(&family)
                .await
                .map_err(|e| EngineError::Claim(e.to_string()))?
                && let Some(held) = book.adopt(&entry)
                && held
                    .record
                    .candidate_ids()
                    .contains(&rec.candidate.as_str())
            {
                self.hold(rec, &held);
            }
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
            pull: if with_pull { rec.pull } else { None },
            run: match scope {
                Scope::Run(id, title) => Some((id, title)),
                _ => None,
            },
        };
        match ownership::check(self.forge, expect).await {
            Ok(proof) => Ok(Ok(proof)),
            Err(OwnershipError::Mismatch(m)) => Ok(Err(self.on_mismatch(rec, m).await?)),
            Err(OwnershipError::Forge(e)) => Err(e.into()),
        }
    }

    /// Renews the lease when less than half of it is left.
    async fn renew(&self, rec: &mut CandidateRecord) -> Result<Option<Progress>, EngineError> {
        let Some(stored) = rec.claim.clone() else {
            return Ok(None);
        };
        if rec.ending.as_ref().is_some_and(|e| e.hands_off) {
            return Ok(None);
        }
        let held = stored.held()?;
        let left = held
            .record
            .lease_until
            .map(|u| u - self.clock.now())
            .unwrap_or_else(TimeDelta::zero);
        if left * 2 > self.config.lease {
            return Ok(None);
        }
        match self
            .book()
            .renew(&held, self.config.lease)
            .await
            .map_err(|e| EngineError::Claim(e.to_string()))?
        {
            Renew::Renewed(h) => {
                rec.claim = Some(super::journal::StoredClaim::of(&h));
                self.save(rec).await?;
                Ok(None)
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
        let comments = self.forge.list_comments(number).await?;
        let missing: Vec<&RenderedComment> = rendered
            .iter()
            .filter(|r| {
                !comments.iter().any(|c| {
                    self.by_bot(c.author.as_deref())
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
            self.intend(rec, &format!("comment {}", r.key)).await?;
            self.forge.create_comment(&proof, number, &r.body).await?;
        }
        Ok(None)
    }

    // -------------------------------------------------------------- claim

    async fn step_claim(&self, rec: &mut CandidateRecord) -> Result<Progress, EngineError> {
        let cid = Self::candidate_id(rec)?;
        let family_id = cid.family();
        let book = self.book();
        let claim_err = |e: klaud_claims::ClaimError| EngineError::Claim(e.to_string());
        if let Some(entry) = book.inspect(&family_id).await.map_err(claim_err)? {
            return self.adopt_or_skip(rec, &book, &entry).await;
        }
        self.intend(rec, "acquire claim").await?;
        let base = self.repository_sha.clone();
        match book
            .acquire(
                &family_id,
                vec![ClaimCandidate::new(&base, &rec.family, cid.clone())],
                &base,
                rec.owner_run,
                self.config.lease,
            )
            .await
            .map_err(claim_err)?
        {
            Acquire::Won(held) => {
                self.hold(rec, &held);
                rec.step = Step::Prepare;
                self.save(rec).await?;
                Ok(Progress::Advanced(Step::Prepare))
            }
            Acquire::Occupied(entry) => self.adopt_or_skip(rec, &book, &entry).await,
        }
    }

    fn hold(&self, rec: &mut CandidateRecord, held: &HeldClaim) {
        rec.claim = Some(super::journal::StoredClaim::of(held));
        rec.owner_run = held.record.run_id;
    }

    async fn adopt_or_skip(
        &self,
        rec: &mut CandidateRecord,
        book: &ClaimBook<'_>,
        entry: &ClaimEntry,
    ) -> Result<Progress, EngineError> {
        if let Some(held) = book.adopt(entry)
            && held
                .record
                .candidate_ids()
                .contains(&rec.candidate.as_str())
        {
            self.hold(rec, &held);
            rec.step = Step::Prepare;
            self.save(rec).await?;
            return Ok(Progress::Advanced(Step::Prepare));
        }
        let who = match &entry.record {
            Ok(r) => format!(
                "run {} (owner {})",
                r.run_id,
                r.owner
                    .map_or_else(|| "old helper".into(), |o| o.to_string())
            ),
            Err(e) => format!("an unparsable claim ({e})"),
        };
        Ok(Progress::Skipped(format!(
            "family {} is claimed by {who}",
            rec.family
        )))
    }

    // ------------------------------------------------------------ prepare

    async fn branch_tip(&self, branch: &str) -> Result<Option<klaud_claims::RefTip>, EngineError> {
        self.forge
            .refs()
            .read_ref(&format!("refs/heads/{branch}"))
            .await
            .map_err(|e| ForgeError::Other(format!("read branch {branch}: {e}")).into())
    }

    /// Adopts the branch tip when it is a commit Klaud made but did not get
    /// to journal (a crash between push and save).
    async fn reconcile_head(&self, rec: &mut CandidateRecord) -> Result<(), EngineError> {
        let Some(pending) = rec.pending_commit.clone() else {
            return Ok(());
        };
        if let Some(tip) = self.branch_tip(&rec.branch).await?
            && tip.sha == pending
        {
            rec.head = Some(pending);
            rec.pending_commit = None;
            self.save(rec).await?;
        }
        Ok(())
    }

    async fn step_prepare(&self, rec: &mut CandidateRecord) -> Result<Progress, EngineError> {
        if let Some(tip) = self.branch_tip(&rec.branch).await? {
            let trailer = format!("{TRAILER}{}", rec.candidate);
            let ours = rec.head.as_deref() == Some(tip.sha.as_str())
                || rec.pending_commit.as_deref() == Some(tip.sha.as_str())
                || (rec.head.is_none() && tip.message.lines().any(|l| l.trim() == trailer));
            if !ours {
                let m = Mismatch {
                    kind: MismatchKind::Unexpected,
                    what: format!("branch {}", rec.branch),
                    expected: "absent, or a commit Klaud made".into(),
                    found: format!("{} (not a Klaud commit)", tip.sha),
                };
                return self.on_mismatch(rec, m).await;
            }
            rec.head = Some(tip.sha);
            rec.pending_commit = None;
            rec.step = Step::Open;
            self.save(rec).await?;
            return Ok(Progress::Advanced(Step::Open));
        }
        let proof = match self.prove(rec, Scope::Claim).await? {
            Ok(p) => p,
            Err(p) => return Ok(p),
        };
        let commit = match rec.pending_commit.clone() {
            Some(c) => c,
            None => {
                let family = self.family(&rec.family)?;
                let from = family.image().clone();
                let to = match ImageRef::parse(&rec.image) {
                    Ok(i) => i,
                    Err(e) => {
                        let m = format!("candidate image {:?} does not parse: {e}", rec.image);
                        return self
                            .end(rec, Outcome::UnexpectedError, Phase::Resolve, m, true)
                            .await;
                    }
                };
                if from.same_image(&to) {
                    let m = format!("the base branch already uses {}", rec.image);
                    return self
                        .end(rec, Outcome::AlreadyUpdated, Phase::Resolve, m, true)
                        .await;
                }
                let bump = match self.repository.plan_bump(&rec.family, &from, &to) {
                    Ok(b) => b,
                    Err(e) => {
                        let m = format!("the bump cannot be made: {e}");
                        return self
                            .end(rec, Outcome::UnexpectedError, Phase::Resolve, m, true)
                            .await;
                    }
                };
                let files: Vec<(String, Vec<u8>)> = bump
                    .edits
                    .iter()
                    .map(|e| (e.path.clone(), e.after.clone().into_bytes()))
                    .collect();
                let tag = to.tag().unwrap_or("digest").to_owned();
                let message = format!(
                    "Update {} image to {tag}\n\n{} -> {}\n\n{TRAILER}{}\n",
                    rec.key, rec.old_image, rec.image, rec.candidate
                );
                rec.base_sha = self.repository_sha.clone();
                self.intend(rec, "commit the bump").await?;
                let sha = self
                    .forge
                    .commit_files(&proof, &rec.base_sha, &files, &message)
                    .await?;
                rec.pending_commit = Some(sha.clone());
                self.save(rec).await?;
                sha
            }
        };
        self.intend(rec, "create the branch").await?;
        match self.forge.create_branch(&proof, &rec.branch, &commit).await {
            // Re-read next step: ours (a lost response) or foreign.
            Ok(()) | Err(ForgeError::AlreadyExists(_)) | Err(ForgeError::Ambiguous(_)) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(Progress::Advanced(Step::Prepare))
    }

    // --------------------------------------------------------------- open

    async fn step_open(&self, rec: &mut CandidateRecord) -> Result<Progress, EngineError> {
        if let Some(pull) = self.forge.find_pull(&rec.branch).await? {
            if !pull.open || !self.by_bot(pull.author.as_deref()) {
                let m = Mismatch {
                    kind: MismatchKind::Unexpected,
                    what: format!("pull request #{} for {}", pull.number, rec.branch),
                    expected: format!("an open PR by {}", self.forge.bot_login()),
                    found: format!(
                        "{} PR by {}",
                        if pull.open { "an open" } else { "a closed" },
                        pull.author.as_deref().unwrap_or("nobody")
                    ),
                };
                return self.on_mismatch(rec, m).await;
            }
            rec.pull = Some(pull.number);
            rec.pull_url = Some(pull.html_url);
            rec.step = Step::Baseline;
            self.save(rec).await?;
            return Ok(Progress::Advanced(Step::Baseline));
        }
        let proof = match self.prove(rec, Scope::Branch).await? {
            Ok(p) => p,
            Err(p) => return Ok(p),
        };
        let title = self.title(rec);
        self.intend(rec, "open the pull request").await?;
        match self
            .forge
            .create_draft_pull(
                &proof,
                &title,
                &rec.branch,
                &rec.base_branch,
                &initial_body(),
            )
            .await
        {
            Ok(pull) => {
                rec.pull = Some(pull.number);
                rec.pull_url = Some(pull.html_url);
                rec.step = Step::Baseline;
                self.save(rec).await?;
                Ok(Progress::Advanced(Step::Baseline))
            }
            // Look again next step.
            Err(ForgeError::Ambiguous(_)) => Ok(Progress::Advanced(Step::Open)),
            Err(e) => Err(e.into()),
        }
    }

    // ----------------------------------------------------------- baseline

    async fn frozen_now(&self, rec: &CandidateRecord) -> FrozenBaseline {
        let image = ImageRef::parse(&rec.image).ok();
        let old = ImageRef::parse(&rec.old_image).ok();
        let family = self.family(&rec.family).ok();
        let engine = family
            .zip(image.as_ref())
            .map(|(f, i)| engine_display(&f.entry.framework, &i.repository()))
            .unwrap_or_else(|| "engine".into());
        let date = self.clock.now().date_naive();
        let mut model = String::new();
        let baseline = match family {
            Some(f) => {
                model = self
                    .config
                    .model_names
                    .get(&f.entry.model)
                    .cloned()
                    .unwrap_or_else(|| {
                        f.entry
                            .model
                            .rsplit('/')
                            .next()
                            .unwrap_or(&f.entry.model)
                            .to_owned()
                    });
                match family_points(&f.family, &f.entry) {
                    Ok(points) => {
                        let request = BaselineRequest {
                            model: model.clone(),
                            date,
                            image: rec.old_image.clone(),
                            key: FamilyKey::of(f),
                            points: points.clone(),
                        };
                        match freeze(self.baseline, &request).await {
                            Ok(b) => Ok(b),
                            Err(e) => Err((points, e.to_string())),
                        }
                    }
                    Err(e) => Err((Vec::new(), e.to_string())),
                }
            }
            None => Err((Vec::new(), format!("family {} not found", rec.family))),
        };
        let baseline = baseline.unwrap_or_else(|(points, reason)| Baseline {
            date,
            image: rec.old_image.clone(),
            model,
            source_urls: Vec::new(),
            points: points
                .into_iter()
                .map(|p| BaselinePoint {
                    label: p.label(),
                    point: p,
                    value: BaselineValue::Unavailable {
                        reason: format!("no baseline: {reason}"),
                    },
                })
                .collect(),
        });
        FrozenBaseline {
            provenance: Provenance {
                engine,
                old_image: rec.old_image.clone(),
                new_image: rec.image.clone(),
                old_tag: old.as_ref().and_then(|i| i.tag().map(str::to_owned)),
                new_tag: image
                    .as_ref()
                    .and_then(|i| i.tag().map(str::to_owned))
                    .unwrap_or_default(),
                digest: image
                    .as_ref()
                    .and_then(|i| i.digest().map(str::to_owned))
                    .unwrap_or_default(),
                revision: rec.revision.clone(),
                clock: rec.clock.clone(),
                upstream: None,
                not_release_reason: rec.not_release_reason.clone(),
            },
            baseline,
        }
    }

    async fn step_baseline(&self, rec: &mut CandidateRecord) -> Result<Progress, EngineError> {
        let number = rec
            .pull
            .ok_or_else(|| EngineError::Invalid("baseline without a pull request".into()))?;
        let pull = self.forge.get_pull(number).await?;
        let frozen = match parse_baseline_block(&pull.body) {
            Ok(Some(f)) => f,
            Ok(None) if pull.body.contains(BASELINE_START) => {
                let m = "the PR body's baseline block has no record".to_owned();
                return self
                    .end(rec, Outcome::UnexpectedError, Phase::Baseline, m, false)
                    .await;
            }
            Ok(None) => {
                let frozen = self.frozen_now(rec).await;
                let block = render_baseline_block(&frozen);
                let body = match splice_baseline(&pull.body, &block) {
                    Ok(b) => b,
                    // Someone removed the placeholder: the block goes first,
                    // their text stays.
                    Err(crate::report::SpliceError::NotFound) => {
                        format!("{block}\n{}", pull.body)
                    }
                    Err(e) => {
                        let m = format!("cannot freeze the baseline into the PR body: {e}");
                        return self
                            .end(rec, Outcome::UnexpectedError, Phase::Baseline, m, false)
                            .await;
                    }
                };
                let proof = match self.prove(rec, Scope::Pull).await? {
                    Ok(p) => p,
                    Err(p) => return Ok(p),
                };
                self.intend(rec, "freeze the baseline").await?;
                self.forge.update_pull_body(&proof, number, &body).await?;
                frozen
            }
            Err(e) => {
                let m = format!("the PR body's baseline record is malformed: {e}");
                return self
                    .end(rec, Outcome::UnexpectedError, Phase::Baseline, m, false)
                    .await;
            }
        };
        let cid = Self::candidate_id(rec)?;
        let report =
            AttemptReport::for_baseline(rec.owner_run, cid, self.clock.now(), &frozen.baseline);
        rec.frozen = Some(frozen);
        self.save(rec).await?;
        let rendered = render_report(&report).map_err(|e| EngineError::Invalid(e.to_string()))?;
        if let Some(p) = self.publish(rec, &rendered, Scope::Pull).await? {
            return Ok(p);
        }
        rec.step = Step::Smoke;
        self.save(rec).await?;
        Ok(Progress::Advanced(Step::Smoke))
    }

    // -------------------------------------------------------------- smoke

    /// Rebuilds the attempts from the report comments (empty journal).
    async fn rebuild_attempts(&self, rec: &mut CandidateRecord) -> Result<(), EngineError> {
        let Some(number) = rec.pull else {
            return Ok(());
        };
        let comments = self.forge.list_comments(number).await?;
        rec.attempts = self.reported_attempts(rec, &comments, false);
        for a in &rec.attempts {
            if let AttemptKind::Repair { n, .. } = a.kind {
                rec.repairs = rec.repairs.max(n);
            }
        }
        Ok(())
    }

    /// The attempts whose reports are published, in publishing order.
    fn reported_attempts(
        &self,
        rec: &CandidateRecord,
        comments: &[super::forge::Comment],
        with_sweep: bool,
    ) -> Vec<AttemptRecord> {
        let mut out = Vec::new();
        for c in comments {
            if !self.by_bot(c.author.as_deref()) {
                continue;
            }
            let Ok(Some(found)) = find_record(&c.body) else {
                continue;
            };
            let MarkerKey::Report {
                owner_run,
                candidate,
                name: ReportName::Run { .. },
                part,
            } = &found.key
            else {
                continue;
            };
            if *owner_run != rec.owner_run
                || candidate.as_str() != rec.candidate
                || part.is_some_and(|p| p != 1)
            {
                continue;
            }
            let Ok(report) = parse_report(&found) else {
                continue;
            };
            let Some(kind) = report.kind else { continue };
            if kind == AttemptKind::FinalSweep && !with_sweep {
                continue;
            }
            out.push(AttemptRecord {
                kind,
                head: report.head.clone().unwrap_or_default(),
                dispatched_at: None,
                run: report.run.clone(),
                status: report.status,
                infra: matches!(
                    report.detail.as_deref(),
                    Some(INFRA_DETAIL | SWEEP_INFRA_DETAIL)
                ),
                reported: true,
            });
        }
        out
    }

    fn head(rec: &CandidateRecord) -> Result<String, EngineError> {
        rec.head
            .clone()
            .ok_or_else(|| EngineError::Invalid("no branch head recorded".into()))
    }

    async fn step_smoke(&self, rec: &mut CandidateRecord) -> Result<Progress, EngineError> {
        if rec.attempts.is_empty() {
            self.rebuild_attempts(rec).await?;
            if rec.attempts.is_empty() {
                rec.attempts.push(AttemptRecord {
                    kind: AttemptKind::Initial {
                        budget: self.config.repair_budget,
                    },
                    head: Self::head(rec)?,
                    dispatched_at: None,
                    run: None,
                    status: AttemptStatus::Queued,
                    infra: false,
                    reported: false,
                });
            }
            self.save(rec).await?;
        }
        let idx = rec.attempts.len() - 1;
        if rec.attempts[idx].reported {
            return self.after_attempt(rec).await;
        }
        let test_name = smoke_test_name(rec.owner_run, &rec.candidate);
        let title = format!("e2e Test - {test_name}");
        let run = match rec.attempts[idx].run.clone() {
            Some(r) => r,
            None => return self.find_or_dispatch(rec, idx, &test_name, &title).await,
        };
        let live = self.forge.get_run(run.id).await?;
        if !live.is_completed() {
            return Ok(Progress::Waiting(format!(
                "smoke run {} is {}",
                live.id, live.status
            )));
        }
        let (status, infra) = classify(&live);
        let (rows, evals, mut notes, _) = self.collect(live.id).await?;
        if let Some(c) = &live.conclusion {
            notes.insert(0, format!("Run conclusion: {c}."));
        }
        let frozen = self.frozen(rec).await?;
        let kind = rec.attempts[idx].kind;
        let run = RunRef {
            id: live.id,
            attempt: live.attempt,
            url: live.html_url.clone(),
        };
        let report = AttemptReport {
            owner_run: rec.owner_run,
            candidate: Self::candidate_id(rec)?,
            name: ReportName::Run {
                id: live.id,
                attempt: live.attempt,
            },
            kind: Some(kind),
            status,
            detail: Some(if infra { INFRA_DETAIL } else { "smoke" }.to_owned()),
            run: Some(run.clone()),
            at: self.clock.now(),
            image: rec.image.clone(),
            head: Some(rec.attempts[idx].head.clone()),
            sections: compare(&frozen.baseline, &rows, "no result in this run"),
            evals: compare_evals(&evals, &[]),
            notes,
            part: None,
        };
        let rendered = render_report(&report).map_err(|e| EngineError::Invalid(e.to_string()))?;
        if let Some(p) = self
            .publish(rec, &rendered, Scope::Run(live.id, &title))
            .await?
        {
            return Ok(p);
        }
        let a = &mut rec.attempts[idx];
        a.run = Some(run);
        a.status = status;
        a.infra = infra;
        a.reported = true;
        self.save(rec).await?;
        Ok(Progress::Advanced(Step::Smoke))
    }

    async fn find_or_dispatch(
        &self,
        rec: &mut CandidateRecord,
        idx: usize,
        test_name: &str,
        title: &str,
    ) -> Result<Progress, EngineError> {
        let head = rec.attempts[idx].head.clone();
        let known: Vec<u64> = rec.runs().iter().map(|r| r.id).collect();
        let runs = self
            .forge
            .list_runs(&RunQuery {
                workflow: self.config.smoke_workflow.clone(),
                event: Some("workflow_dispatch".into()),
                actor: Some(self.forge.bot_login()),
                head_sha: Some(head.clone()),
            })
            .await?;
        // Newest first: the oldest unknown run is the one of this attempt.
        if let Some(found) = runs
            .iter()
            .rev()
            .find(|r| r.title == title && self.by_bot(r.actor.as_deref()) && !known.contains(&r.id))
        {
            rec.attempts[idx].run = Some(RunRef {
                id: found.id,
                attempt: found.attempt,
                url: found.html_url.clone(),
            });
            rec.attempts[idx].status = AttemptStatus::Running;
            self.save(rec).await?;
            return Ok(Progress::Advanced(Step::Smoke));
        }
        if let Some(at) = rec.attempts[idx].dispatched_at
            && self.clock.now() - at < self.config.dispatch_grace
        {
            return Ok(Progress::Waiting(format!(
                "the smoke run dispatched at {at} is not visible yet"
            )));
        }
        let proof = match self.prove(rec, Scope::Pull).await? {
            Ok(p) => p,
            Err(p) => return Ok(p),
        };
        let family = self.family(&rec.family)?;
        let inputs = json!({
            "ref": head,
            "generate-cli-command": format!(
                "test-config --config-files {} --config-keys {} --smoke",
                family.file, family.key
            ),
            "fail-fast": "true",
            "klaud-run": "true",
            "test-name": test_name,
        });
        rec.attempts[idx].dispatched_at = Some(self.clock.now());
        self.intend(rec, &format!("dispatch {}", self.config.smoke_workflow))
            .await?;
        match self
            .forge
            .dispatch(
                &proof,
                &self.config.smoke_workflow,
                &rec.base_branch,
                &inputs,
            )
            .await
        {
            Ok(Some(id)) => {
                let live = self.forge.get_run(id).await?;
                rec.attempts[idx].run = Some(RunRef {
                    id,
                    attempt: live.attempt,
                    url: live.html_url,
                });
                rec.attempts[idx].status = AttemptStatus::Queued;
                self.save(rec).await?;
                Ok(Progress::Advanced(Step::Smoke))
            }
            Ok(None) | Err(ForgeError::Ambiguous(_)) => Ok(Progress::Waiting(
                "dispatched; looking for the run by title".into(),
            )),
            Err(e) => Err(e.into()),
        }
    }

    async fn frozen(&self, rec: &mut CandidateRecord) -> Result<FrozenBaseline, EngineError> {
        if let Some(f) = &rec.frozen {
            return Ok(f.clone());
        }
        let number = rec
            .pull
            .ok_or_else(|| EngineError::Invalid("no pull request".into()))?;
        let pull = self.forge.get_pull(number).await?;
        let frozen = parse_baseline_block(&pull.body)
            .map_err(|e| EngineError::Invalid(format!("PR #{number} baseline: {e}")))?
            .ok_or_else(|| EngineError::Invalid(format!("PR #{number} has no baseline")))?;
        rec.frozen = Some(frozen.clone());
        Ok(frozen)
    }

    /// Downloads and parses a run's artifacts. Unknown artifacts are
    /// skipped; broken ones become notes, never errors.
    async fn collect(
        &self,
        run: u64,
    ) -> Result<
        (
            Vec<BenchmarkRow>,
            Vec<EvalRow>,
            Vec<String>,
            Option<SweepManifest>,
        ),
        EngineError,
    > {
        let mut rows = Vec::new();
        let mut aggregated = Vec::new();
        let mut evals = Vec::new();
        let mut notes = Vec::new();
        let mut manifest = None;
        for a in self.forge.list_artifacts(run).await? {
            if crate::artifacts::ArtifactKind::of(&a.name).is_none() {
                continue;
            }
            if a.expired {
                notes.push(format!("Artifact {} expired.", a.name));
                continue;
            }
            let bytes = self.forge.download_artifact(a.id).await?;
            match parse_artifact(&a.name, &bytes, &self.config.artifact_limits) {
                Ok(Artifact::Benchmark { row, .. }) => rows.push(*row),
                Ok(Artifact::AggregatedBenchmarks { rows: r }) => aggregated.extend(r),
                Ok(Artifact::Evals { rows: r }) => evals.extend(r),
                Ok(Artifact::Manifest(m)) => manifest = Some(m),
                Err(e) => notes.push(format!("Artifact {} unreadable: {e}", a.name)),
            }
        }
        // Per-point artifacts are the primary source; the aggregate only
        // when a run has no per-point artifacts.
        if rows.is_empty() {
            rows = aggregated;
        }
        Ok((rows, evals, notes, manifest))
    }

    async fn after_attempt(&self, rec: &mut CandidateRecord) -> Result<Progress, EngineError> {
        let Some(last) = rec.attempts.last().cloned() else {
            return Ok(Progress::Advanced(Step::Smoke));
        };
        if last.status == AttemptStatus::Passed {
            rec.step = Step::Final;
            self.save(rec).await?;
            return Ok(Progress::Advanced(Step::Final));
        }
        if last.infra {
            let retries = rec
                .attempts
                .iter()
                .rev()
                .take_while(|a| matches!(a.kind, AttemptKind::InfraRetry { .. }))
                .count() as u32;
            if retries < MAX_INFRA_RETRIES {
                rec.attempts.push(AttemptRecord {
                    kind: AttemptKind::InfraRetry { n: retries + 1 },
                    head: last.head.clone(),
                    dispatched_at: None,
                    run: None,
                    status: AttemptStatus::Queued,
                    infra: false,
                    reported: false,
                });
                self.save(rec).await?;
                return Ok(Progress::Advanced(Step::Smoke));
            }
            let m = format!(
                "the smoke run failed on infrastructure {} times",
                retries + 1
            );
            return self
                .end(rec, Outcome::Failed, Phase::Targeted, m, false)
                .await;
        }
        if self.repair.is_some() && rec.repairs < self.config.repair_budget {
            rec.step = Step::Repair;
            self.save(rec).await?;
            return Ok(Progress::Advanced(Step::Repair));
        }
        let m = if self.repair.is_some() {
            format!(
                "the smoke still fails after {} repairs",
                self.config.repair_budget
            )
        } else {
            "the smoke failed and no repair hook is configured".to_owned()
        };
        self.end(rec, Outcome::Failed, Phase::Targeted, m, false)
            .await
    }

    // ------------------------------------------------------------- repair

    async fn step_repair(&self, rec: &mut CandidateRecord) -> Result<Progress, EngineError> {
        let Some(hook) = self.repair else {
            let m = "no repair hook is configured".to_owned();
            return self
                .end(rec, Outcome::Failed, Phase::Targeted, m, false)
                .await;
        };
        let n = rec.repairs + 1;
        let intent = format!("repair {n}");
        let old_head = Self::head(rec)?;
        let tip = self.branch_tip(&rec.branch).await?;
        let already = rec.intent.as_deref() == Some(intent.as_str())
            && tip.as_ref().is_some_and(|t| t.sha != old_head);
        if !already {
            if let Err(p) = self.prove(rec, Scope::Pull).await? {
                return Ok(p);
            }
            let last = rec.attempts.last().cloned();
            let context = RepairContext {
                candidate: rec.candidate.clone(),
                family: rec.family.clone(),
                key: rec.key.clone(),
                image: rec.image.clone(),
                repository: self.forge.repo(),
                branch: rec.branch.clone(),
                head: old_head.clone(),
                pull_request: rec.pull,
                run: last.as_ref().and_then(|a| a.run.clone()),
                repair: n,
                budget: self.config.repair_budget,
                report: serde_json::to_value(last.as_ref().map(|a| (&a.kind, a.status)))
                    .unwrap_or(Value::Null),
            };
            self.intend(rec, &intent).await?;
            match hook.repair(&context).await {
                Ok(RepairOutcome::Pushed) => {}
                Ok(RepairOutcome::GaveUp(why)) => {
                    let m = format!("the repair hook gave up on repair {n}: {why}");
                    return self
                        .end(rec, Outcome::Failed, Phase::Targeted, m, false)
                        .await;
                }
                Err(e) => {
                    let m = format!("the repair hook failed on repair {n}: {e}");
                    return self
                        .end(rec, Outcome::Failed, Phase::Targeted, m, false)
                        .await;
                }
            }
        }
        let Some(tip) = self.branch_tip(&rec.branch).await? else {
            let m = Mismatch {
                kind: MismatchKind::Unexpected,
                what: format!("branch {} after repair {n}", rec.branch),
                expected: "a new head".into(),
                found: "no branch".into(),
            };
            return self.on_mismatch(rec, m).await;
        };
        if tip.sha == old_head {
            let m = format!("the repair hook pushed nothing for repair {n}");
            return self
                .end(rec, Outcome::Failed, Phase::Targeted, m, false)
                .await;
        }
        // The hook pushes as the bot; the new head descends from ours.
        if !tip.parents.contains(&old_head) {
            let m = Mismatch {
                kind: MismatchKind::Handoff,
                what: format!("head of {} after repair {n}", rec.branch),
                expected: format!("a commit on top of {old_head}"),
                found: format!("{} with parents {:?}", tip.sha, tip.parents),
            };
            return self.on_mismatch(rec, m).await;
        }
        rec.head = Some(tip.sha.clone());
        rec.repairs = n;
        rec.attempts.push(AttemptRecord {
            kind: AttemptKind::Repair {
                n,
                budget: self.config.repair_budget,
            },
            head: tip.sha,
            dispatched_at: None,
            run: None,
            status: AttemptStatus::Queued,
            infra: false,
            reported: false,
        });
        rec.step = Step::Smoke;
        self.save(rec).await?;
        Ok(Progress::Advanced(Step::Smoke))
    }

    // -------------------------------------------------------------- final

    async fn step_final(&self, rec: &mut CandidateRecord) -> Result<Progress, EngineError> {
        self.reconcile_head(rec).await?;
        let number = rec
            .pull
            .ok_or_else(|| EngineError::Invalid("final without a pull request".into()))?;
        let link = format!(
            "{}/{}/pull/{number}",
            self.config.pr_link_base.trim_end_matches('/'),
            self.forge.repo()
        );
        let path = format!("{}{CHANGELOG_PATH}", self.repository.prefix());
        let base_tip = self
            .branch_tip(&rec.base_branch)
            .await?
            .ok_or_else(|| ForgeError::NotFound(format!("base branch {}", rec.base_branch)))?;
        let head = Self::head(rec)?;
        let base_bytes = self
            .forge
            .read_file(&path, &base_tip.sha)
            .await?
            .unwrap_or_default();
        let head_bytes = self
            .forge
            .read_file(&path, &head)
            .await?
            .unwrap_or_default();
        let appended = validate_append(&base_bytes, &head_bytes).is_ok_and(|n| n >= 1)
            && String::from_utf8_lossy(&head_bytes[base_bytes.len()..]).contains(&link);
        if !appended {
            let proof = match self.prove(rec, Scope::Pull).await? {
                Ok(p) => p,
                Err(p) => return Ok(p),
            };
            let tag = ImageRef::parse(&rec.image)
                .ok()
                .and_then(|i| i.tag().map(str::to_owned))
                .unwrap_or_else(|| "a new build".into());
            let entry = ChangelogEntry {
                config_keys: vec![rec.key.clone()],
                description: description(&rec.key, &tag),
                pr_link: link.clone(),
            };
            // A stale base is re-taken: the entry goes onto the current
            // base's bytes, never a merge.
            let new = match append_entry(&base_bytes, &entry)
                .map_err(|e| e.to_string())
                .and_then(|new| {
                    validate_append(&base_bytes, &new)
                        .map(|_| new)
                        .map_err(|e| format!("check-final: {e}"))
                }) {
                Ok(n) => n,
                Err(e) => {
                    let m = format!("the changelog entry cannot be appended: {e}");
                    return self
                        .end(rec, Outcome::UnexpectedError, Phase::FinalSweep, m, false)
                        .await;
                }
            };
            let message = format!(
                "Add perf-changelog entry for {}\n\n{TRAILER}{}\n",
                rec.key, rec.candidate
            );
            self.intend(rec, "commit the changelog").await?;
            let sha = self
                .forge
                .commit_files(&proof, &head, &[(path, new)], &message)
                .await?;
            rec.pending_commit = Some(sha.clone());
            self.intend(rec, "push the changelog").await?;
            match self
                .forge
                .fast_forward_branch(&proof, &rec.branch, &sha)
                .await
            {
                Ok(()) => {
                    rec.head = Some(sha);
                    rec.pending_commit = None;
                    self.save(rec).await?;
                }
                // Re-read next step (reconcile_head or the ownership check
                // tells what happened).
                Err(ForgeError::Ambiguous(_)) | Err(ForgeError::NotFastForward(_)) => {}
                Err(e) => return Err(e.into()),
            }
            return Ok(Progress::Advanced(Step::Final));
        }
        let pull = self.forge.get_pull(number).await?;
        let sweep = &self.config.sweep_label;
        let remove: Vec<String> = pull
            .labels
            .iter()
            .filter(|l| *l != sweep && self.config.managed_labels.iter().any(|m| m == *l))
            .cloned()
            .collect();
        let add = !pull.labels.iter().any(|l| l == sweep);
        if !remove.is_empty() || add {
            let proof = match self.prove(rec, Scope::Pull).await? {
                Ok(p) => p,
                Err(p) => return Ok(p),
            };
            self.intend(rec, "set the sweep label").await?;
            for l in &remove {
                self.forge.remove_label(&proof, number, l).await?;
            }
            if add {
                self.forge
                    .add_labels(&proof, number, std::slice::from_ref(sweep))
                    .await?;
            }
        }
        rec.sweep_requested_at.get_or_insert(self.clock.now());
        rec.attempts.push(AttemptRecord {
            kind: AttemptKind::FinalSweep,
            head,
            dispatched_at: None,
            run: None,
            status: AttemptStatus::Queued,
            infra: false,
            reported: false,
        });
        rec.step = Step::Sweep;
        self.save(rec).await?;
        Ok(Progress::Advanced(Step::Sweep))
    }

    // -------------------------------------------------------------- sweep

    async fn step_sweep(&self, rec: &mut CandidateRecord) -> Result<Progress, EngineError> {
        let head = Self::head(rec)?;
        let idx = match rec.attempts.last() {
            Some(a) if a.kind == AttemptKind::FinalSweep => rec.attempts.len() - 1,
            _ => {
                rec.attempts.push(AttemptRecord {
                    kind: AttemptKind::FinalSweep,
                    head: head.clone(),
                    dispatched_at: None,
                    run: None,
                    status: AttemptStatus::Queued,
                    infra: false,
                    reported: false,
                });
                rec.attempts.len() - 1
            }
        };
        let title = self.title(rec);
        if rec.attempts[idx].reported && rec.attempts[idx].infra {
            return self.retry_sweep(rec, idx, &title).await;
        }
        if rec.attempts[idx].reported {
            let (outcome, m) = match (&rec.attempts[idx].status, &rec.sweep) {
                (AttemptStatus::Passed, Some(_)) => (
                    Outcome::Validated,
                    "the final sweep passed on the exact head".to_owned(),
                ),
                _ => (
                    Outcome::Failed,
                    "the final sweep did not pass on the exact head".to_owned(),
                ),
            };
            return self.end(rec, outcome, Phase::FinalSweep, m, false).await;
        }
        let run = match rec.attempts[idx].run.clone() {
            Some(r) => r,
            None => {
                let known: Vec<u64> = rec.runs().iter().map(|r| r.id).collect();
                let runs = self
                    .forge
                    .list_runs(&RunQuery {
                        workflow: self.config.sweep_workflow.clone(),
                        event: Some("pull_request".into()),
                        actor: None,
                        head_sha: Some(head.clone()),
                    })
                    .await?;
                let Some(found) = runs
                    .into_iter()
                    .find(|r| r.head_sha == head && !known.contains(&r.id))
                else {
                    return Ok(Progress::Waiting(
                        "waiting for the final sweep to start".into(),
                    ));
                };
                let r = RunRef {
                    id: found.id,
                    attempt: found.attempt,
                    url: found.html_url,
                };
                rec.attempts[idx].run = Some(r.clone());
                rec.attempts[idx].status = AttemptStatus::Running;
                self.save(rec).await?;
                r
            }
        };
        let live = self.forge.get_run(run.id).await?;
        if !live.is_completed() {
            return Ok(Progress::Waiting(format!(
                "final sweep run {} is {}",
                live.id, live.status
            )));
        }
        let (rows, evals, mut notes, manifest) = self.collect(live.id).await?;
        let passed = live.conclusion.as_deref() == Some("success");
        let check = match &manifest {
            Some(m) if m.head == head && m.run_id == live.id && m.full_sweep => Some(SweepCheck {
                run_id: live.id,
                run_attempt: live.attempt,
                head: head.clone(),
                full_sweep: true,
                manifest: true,
            }),
            Some(m) => {
                notes.push(format!(
                    "The sweep manifest does not match: head {}, run {}, full sweep {}.",
                    m.head, m.run_id, m.full_sweep
                ));
                None
            }
            None if live.head_sha == head => Some(SweepCheck {
                run_id: live.id,
                run_attempt: live.attempt,
                head: head.clone(),
                full_sweep: true,
                manifest: false,
            }),
            None => None,
        };
        if let Some(c) = &live.conclusion {
            notes.insert(0, format!("Run conclusion: {c}."));
        }
        let (_, infra) = classify(&live);
        let status = if passed && check.is_some() {
            AttemptStatus::Passed
        } else if live.conclusion.as_deref() == Some("cancelled") {
            AttemptStatus::Cancelled
        } else {
            AttemptStatus::Failed
        };
        let frozen = self.frozen(rec).await?;
        let report = AttemptReport {
            owner_run: rec.owner_run,
            candidate: Self::candidate_id(rec)?,
            name: ReportName::Run {
                id: live.id,
                attempt: live.attempt,
            },
            kind: Some(AttemptKind::FinalSweep),
            status,
            detail: Some(
                if infra {
                    SWEEP_INFRA_DETAIL
                } else {
                    "full sweep"
                }
                .to_owned(),
            ),
            run: Some(run.clone()),
            at: self.clock.now(),
            image: rec.image.clone(),
            head: Some(head.clone()),
            sections: compare(&frozen.baseline, &rows, "no result in this run"),
            evals: compare_evals(&evals, &[]),
            notes,
            part: None,
        };
        let rendered = render_report(&report).map_err(|e| EngineError::Invalid(e.to_string()))?;
        if let Some(p) = self
            .publish(rec, &rendered, Scope::Run(live.id, &title))
            .await?
        {
            return Ok(p);
        }
        rec.sweep = check.filter(|_| passed);
        let a = &mut rec.attempts[idx];
        a.status = status;
        a.infra = infra;
        a.reported = true;
        self.save(rec).await?;
        Ok(Progress::Advanced(Step::Sweep))
    }

    /// An infrastructure failure of the final sweep: re-run it (at most
    /// [`MAX_INFRA_RETRIES`] times, not counted as repairs), else fail.
    async fn retry_sweep(
        &self,
        rec: &mut CandidateRecord,
        idx: usize,
        title: &str,
    ) -> Result<Progress, EngineError> {
        let Some(run) = rec.attempts[idx].run.clone() else {
            return Err(EngineError::Invalid(
                "a reported sweep without a run".into(),
            ));
        };
        let retries = rec
            .attempts
            .iter()
            .filter(|a| a.kind == AttemptKind::FinalSweep && a.infra)
            .count() as u32;
        if retries > MAX_INFRA_RETRIES {
            let m = format!("the final sweep failed on infrastructure {retries} times");
            return self
                .end(rec, Outcome::Failed, Phase::FinalSweep, m, false)
                .await;
        }
        // A re-run that landed before a crash shows as a newer attempt.
        let live = self.forge.get_run(run.id).await?;
        if live.attempt <= run.attempt {
            let proof = match self.prove(rec, Scope::Run(run.id, title)).await? {
                Ok(p) => p,
                Err(p) => return Ok(p),
            };
            self.intend(rec, &format!("re-run sweep {}", run.id))
                .await?;
            match self.forge.rerun_run(&proof, run.id).await {
                Ok(()) | Err(ForgeError::Ambiguous(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let head = rec.attempts[idx].head.clone();
        rec.attempts.push(AttemptRecord {
            kind: AttemptKind::FinalSweep,
            head,
            dispatched_at: None,
            run: Some(RunRef {
                id: run.id,
                attempt: run.attempt + 1,
                url: run.url,
            }),
            status: AttemptStatus::Queued,
            infra: false,
            reported: false,
        });
        self.save(rec).await?;
        Ok(Progress::Advanced(Step::Sweep))
    }

    // ------------------------------------------------------------- finish

    async fn step_finish(&self, rec: &mut CandidateRecord) -> Result<Progress, EngineError> {
        let ending = rec.ending.clone().unwrap_or_else(|| Ending {
            outcome: Outcome::UnexpectedError,
            phase: Phase::Unknown,
            message: "finished without a recorded ending".into(),
            hands_off: false,
        });
        if !ending.hands_off
            && let Some(number) = rec.pull
        {
            let cid = Self::candidate_id(rec)?;
            let comments = self.forge.list_comments(number).await?;
            let has = |key: &MarkerKey| {
                comments.iter().any(|c| {
                    self.by_bot(c.author.as_deref())
                        && find_record(&c.body)
                            .ok()
                            .flatten()
                            .is_some_and(|f| &f.key == key)
                })
            };
            let receipt_key = MarkerKey::Outcome {
                owner_run: rec.owner_run,
                candidate: cid.clone(),
            };
            if !has(&receipt_key) {
                let progress = if ending.outcome == Outcome::Validated {
                    self.finish_validated(rec, number).await?
                } else {
                    let cleanup_key = MarkerKey::Cleanup {
                        owner_run: rec.owner_run,
                        candidate: cid.clone(),
                    };
                    self.cleanup(rec, number, !has(&cleanup_key)).await?
                };
                if let Some(p) = progress {
                    return Ok(p);
                }
                let runs = rec.runs();
                let result = match FinishedResult::new(
                    ending.outcome,
                    ending.phase,
                    rec.pull,
                    runs.clone(),
                    rec.repairs,
                ) {
                    Ok(r) => r,
                    Err(e) => FinishedResult::new(
                        Outcome::UnexpectedError,
                        ending.phase,
                        rec.pull,
                        runs,
                        rec.repairs,
                    )
                    .map_err(|_| EngineError::Invalid(e.to_string()))?,
                };
                let receipt = Receipt {
                    owner_run: rec.owner_run,
                    candidate: cid,
                    head: rec.head.clone(),
                    result,
                    sweep: rec.sweep.clone(),
                    note: None,
                    note_zh: None,
                };
                let rendered = render_receipt(&receipt);
                if let Some(p) = self
                    .publish(rec, std::slice::from_ref(&rendered), Scope::PullOnly)
                    .await?
                {
                    return Ok(p);
                }
            }
        }
        self.release(rec).await?;
        rec.step = Step::Done;
        rec.intent = None;
        self.save(rec).await?;
        Ok(Progress::Done(rec.ending.clone()))
    }

    async fn finish_validated(
        &self,
        rec: &mut CandidateRecord,
        number: u64,
    ) -> Result<Option<Progress>, EngineError> {
        let pull = self.forge.get_pull(number).await?;
        if pull.draft {
            let proof = match self.prove(rec, Scope::Pull).await? {
                Ok(p) => p,
                Err(p) => return Ok(Some(p)),
            };
            self.intend(rec, "mark ready for review").await?;
            self.forge.set_draft(&proof, &pull, false).await?;
        }
        if self.config.post_use_comment
            && let Some(sweep) = rec.sweep.clone()
        {
            let body = format!("/use {}", sweep.run_id);
            let comments = self.forge.list_comments(number).await?;
            if !comments
                .iter()
                .any(|c| self.by_bot(c.author.as_deref()) && c.body.trim() == body)
            {
                let proof = match self.prove(rec, Scope::Pull).await? {
                    Ok(p) => p,
                    Err(p) => return Ok(Some(p)),
                };
                self.intend(rec, "post /use").await?;
                self.forge.create_comment(&proof, number, &body).await?;
            }
        }
        Ok(None)
    }

    async fn cleanup(
        &self,
        rec: &mut CandidateRecord,
        number: u64,
        marker_missing: bool,
    ) -> Result<Option<Progress>, EngineError> {
        let proof = match self.prove(rec, Scope::PullOnly).await? {
            Ok(p) => p,
            Err(p) => return Ok(Some(p)),
        };
        if marker_missing {
            let cid = Self::candidate_id(rec)?;
            let marker = render_cleanup(rec.owner_run, &cid);
            self.intend(rec, "post the cleanup marker").await?;
            self.forge
                .create_comment(&proof, number, &marker.body)
                .await?;
        }
        let smoke_title = format!(
            "e2e Test - {}",
            smoke_test_name(rec.owner_run, &rec.candidate)
        );
        // Sweep runs carry the PR's title.
        let pr_title = self.forge.get_pull(number).await?.title;
        for run in rec.runs() {
            let live = self.forge.get_run(run.id).await?;
            if live.is_completed() {
                continue;
            }
            let title = if live.event == "workflow_dispatch" {
                smoke_title.clone()
            } else {
                pr_title.clone()
            };
            let proof = match self.prove(rec, Scope::Run(run.id, &title)).await? {
                Ok(p) => p,
                Err(p) => return Ok(Some(p)),
            };
            self.intend(rec, &format!("cancel run {}", run.id)).await?;
            self.forge.cancel_run(&proof, run.id).await?;
        }
        let pull = self.forge.get_pull(number).await?;
        for l in pull
            .labels
            .iter()
            .filter(|l| self.config.managed_labels.iter().any(|m| m == *l))
        {
            self.intend(rec, &format!("remove label {l}")).await?;
            self.forge.remove_label(&proof, number, l).await?;
        }
        if pull.open && !pull.draft {
            self.intend(rec, "convert to draft").await?;
            self.forge.set_draft(&proof, &pull, true).await?;
        }
        if pull.open {
            self.intend(rec, "close the pull request").await?;
            self.forge.close_pull(&proof, number).await?;
        }
        self.delete_branch_if_unchanged(rec).await
    }

    async fn delete_branch_if_unchanged(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<Option<Progress>, EngineError> {
        let Some(head) = rec.head.clone() else {
            return Ok(None);
        };
        match self.branch_tip(&rec.branch).await? {
            Some(tip) if tip.sha == head => {
                let proof = match self.prove(rec, Scope::Branch).await? {
                    Ok(p) => p,
                    Err(p) => return Ok(Some(p)),
                };
                self.intend(rec, "delete the branch").await?;
                match self.forge.delete_branch(&proof, &rec.branch).await {
                    Ok(()) | Err(ForgeError::NotFound(_)) => Ok(None),
                    Err(e) => Err(e.into()),
                }
            }
            // Gone already, or someone pushed: their branch now.
            _ => Ok(None),
        }
    }

    async fn release(&self, rec: &mut CandidateRecord) -> Result<(), EngineError> {
        let book = self.book();
        let claim_err = |e: klaud_claims::ClaimError| EngineError::Claim(e.to_string());
        let held = match &rec.claim {
            Some(stored) => Some(stored.held()?),
            None => {
                let family = Self::candidate_id(rec)?.family();
                match book.inspect(&family).await.map_err(claim_err)? {
                    Some(entry) => book
                        .adopt(&entry)
                        .filter(|h| h.record.candidate_ids().contains(&rec.candidate.as_str())),
                    None => None,
                }
            }
        };
        let Some(held) = held else { return Ok(()) };
        self.intend(rec, "release the claim").await?;
        match book.release(&held).await {
            Ok(_) => {
                rec.claim = None;
                Ok(())
            }
            // Not ours any more: nothing of ours to release.
            Err(klaud_claims::ClaimError::NotOwner { .. }) => {
                rec.claim = None;
                Ok(())
            }
            Err(e) => Err(claim_err(e)),
        }
    }
}

/// Splits a completed run's conclusion into an attempt status and whether
/// it was the infrastructure's fault (retried without counting as repair).
fn classify(run: &Run) -> (AttemptStatus, bool) {
    match run.conclusion.as_deref() {
        Some("success") => (AttemptStatus::Passed, false),
        Some("failure") => (AttemptStatus::Failed, false),
        // Klaud cancels only during cleanup, so a cancel here is someone
        // else's (or a lost runner).
        Some("cancelled") => (AttemptStatus::Cancelled, true),
        _ => (AttemptStatus::Failed, true),
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
            status: "completed".into(),
            conclusion: Some(c.into()),
            head_sha: String::new(),
            actor: None,
            created_at: None,
            html_url: String::new(),
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
