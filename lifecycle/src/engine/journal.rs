//! The journal boundary: durable candidate records. The engine records its
//! intent and flushes it before each external action, so after a crash it
//! knows what may have happened and re-reads GitHub to find out. The
//! journal is a cache of GitHub, never the truth: with an empty journal the
//! engine rebuilds each record from claims, branches, PRs, markers and runs.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use klaud_claims::{CandidateId, ClaimRecord, CommitSha, HeldClaim, PullNumber};
use serde::{Deserialize, Serialize};

use super::forge::ErrorSource;
use super::intent::Intent;
use crate::model::{AttemptKind, AttemptStatus, Outcome, Phase, RunRef};
use crate::report::{FrozenBaseline, SweepCheck, UpstreamRange};

/// Where a candidate is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    /// Take the claim.
    Claim,
    /// Commit the bump and create the branch.
    Prepare,
    /// Open the draft PR.
    Open,
    /// Freeze the baseline into the PR body.
    Baseline,
    /// Smoke attempts.
    Smoke,
    /// Run the repair hook.
    Repair,
    /// Append the changelog and label the PR.
    Final,
    /// Watch the final sweep.
    Sweep,
    /// Publish the end (validated or cleanup) and release the claim.
    Finish,
    /// Nothing left to do.
    Done,
}

impl Step {
    /// The kebab-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Claim => "claim",
            Step::Prepare => "prepare",
            Step::Open => "open",
            Step::Baseline => "baseline",
            Step::Smoke => "smoke",
            Step::Repair => "repair",
            Step::Final => "final",
            Step::Sweep => "sweep",
            Step::Finish => "finish",
            Step::Done => "done",
        }
    }
}

/// The claim as last written, in a storable form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredClaim {
    /// Full ref name.
    pub ref_name: String,
    /// The commit Klaud last moved the ref to.
    pub sha: String,
    /// The encoded record in that commit.
    pub message: String,
}

impl StoredClaim {
    /// Stores a held claim.
    pub fn of(held: &HeldClaim) -> Self {
        Self {
            ref_name: held.ref_name.clone(),
            sha: held.sha.clone(),
            message: held.record.encode(),
        }
    }

    /// The held claim back; an error names the ref when the stored record
    /// does not parse (a corrupt journal).
    pub fn held(&self) -> Result<HeldClaim, JournalError> {
        let record = ClaimRecord::parse(&self.message).map_err(|e| {
            JournalError::new(
                format!("stored claim of {} does not parse", self.ref_name),
                e,
            )
        })?;
        Ok(HeldClaim {
            ref_name: self.ref_name.clone(),
            sha: self.sha.clone(),
            record,
        })
    }
}

/// One attempt (a smoke run, its infrastructure retries, the final sweep).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// Which attempt.
    pub kind: AttemptKind,
    /// The head it tests; empty when not known (an attempt rebuilt from a
    /// receipt or a report that did not name it), so not a [`CommitSha`].
    pub head: String,
    /// When the dispatch was about to be sent (intent); `None` before.
    pub dispatched_at: Option<DateTime<Utc>>,
    /// The run, once found.
    pub run: Option<RunRef>,
    /// Status.
    pub status: AttemptStatus,
    /// Whether the run ended on an infrastructure failure.
    #[serde(default)]
    pub infra: bool,
    /// Whether its report is published.
    pub reported: bool,
}

/// How the candidate ends (decided, maybe not yet published).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ending {
    /// Outcome.
    pub outcome: Outcome,
    /// Phase.
    pub phase: Phase,
    /// Why, in one sentence.
    pub message: String,
    /// The PR or branch is not Klaud's any more (handoff, ownership
    /// mismatch): finishing touches nothing but Klaud's own claim.
    #[serde(default)]
    pub hands_off: bool,
    /// Who decided this end and why, when a person did (a maintainer's
    /// command, an operator): shown in the receipt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// A person closed the PR without merging ("not this image").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declined: Option<crate::model::Declined>,
}

/// Klaud's own comments on its pull request (see
/// [`CandidateRecord::own_comments`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OwnComments {
    /// The bot's comments, as posted or last edited.
    pub comments: Vec<super::forge::Comment>,
    /// The last comment write whose answer is in `comments`. A comment
    /// intent other than this one may have landed unseen (a crash between
    /// the write and the save), so the copy is not trusted then.
    pub settled: Option<Intent>,
}

/// A commit Klaud asked GitHub to add onto its branch and move the branch
/// to in one write ([`super::forge::Write::CommitOnBranch`]), not yet
/// known to have landed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingBranchCommit {
    /// The head the commit was asked on: its one parent.
    pub parent: CommitSha,
    /// The commit's message, exactly as sent.
    pub message: String,
}

/// Everything Klaud remembers about one candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateRecord {
    /// Candidate id.
    pub candidate: CandidateId,
    /// Family.
    pub family: String,
    /// Config key.
    pub key: String,
    /// The image on the base branch.
    pub old_image: String,
    /// The pinned candidate image.
    pub image: String,
    /// The candidate image's revision label.
    #[serde(default)]
    pub revision: Option<String>,
    /// The clock that ordered the tags.
    #[serde(default)]
    pub clock: Option<String>,
    /// Why a nightly rather than a release, when so.
    #[serde(default)]
    pub not_release_reason: Option<String>,
    /// Upstream source commits between the old and the new image.
    #[serde(default)]
    pub upstream: Option<UpstreamRange>,
    /// The result lines of the candidate's ended regression hunt, English
    /// then Chinese (as its receipt has them), for `klaud status` and the
    /// dashboards; empty when none ran.
    #[serde(default, skip_serializing_if = "HuntLines::is_empty")]
    pub hunt: HuntLines,
    /// The playbook entry learned when this candidate's repair fixed a
    /// failure the playbook did not know (its receipt carries it too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learned: Option<crate::report::LearnedEntry>,
    /// A maintainer's `/klaud retry` ran the final sweep again after a
    /// person's push: a failure then leaves the PR with them, and another
    /// retry after their next push sweeps again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub swept_again: bool,
    /// Versions the old and new image declare (planner, image configs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versions: Option<crate::report::VersionsCompared>,
    /// What the bump commit covered (keys bumped together, recipes aligned
    /// or left), recorded when the commit is made; `None` for records from
    /// before it was kept, and for a branch adopted without planning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<crate::report::BumpScope>,
    /// The experiment variant this candidate is, if it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<crate::experiment::variant::VariantInfo>,
    /// The owner run (claim `run-id`).
    pub owner_run: u64,
    /// Base branch name.
    pub base_branch: String,
    /// Base commit the bump was made on.
    pub base_sha: CommitSha,
    /// `klaud/auto-<candidate>`.
    pub branch: String,
    /// Where it is.
    pub step: Step,
    /// The claim as last written.
    pub claim: Option<StoredClaim>,
    /// The last branch head Klaud wrote (or accepted from the repair hook).
    pub head: Option<CommitSha>,
    /// A commit made but not yet on the branch (intent).
    pub pending_commit: Option<CommitSha>,
    /// A commit asked of GitHub together with the branch's move (one
    /// write), recorded before it is sent: its sha is GitHub's answer,
    /// which a lost answer or a crash never delivers, so the next step
    /// knows the commit by its parent and message instead. `None` in
    /// records from before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_branch_commit: Option<PendingBranchCommit>,
    /// Pull request number.
    pub pull: Option<PullNumber>,
    /// Pull request URL.
    pub pull_url: Option<String>,
    /// This journal opened the pull request (it did not find it open):
    /// every smoke run since was dispatched from this record, each after its
    /// attempt's `dispatched_at` was saved. `false` for records from before
    /// it was kept, adopted PRs and records rebuilt from GitHub, which look
    /// on GitHub before dispatching.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pull_opened_here: bool,
    /// The pull request a GitHub answer showed authored by the bot (its
    /// creation's, or a read's). GitHub never changes a pull request's
    /// author, so the maintainer commands' reply permit for it needs no
    /// read of it again. Kept as a number, not a flag, so that it can
    /// never vouch for another PR the record comes to name. `None`: not
    /// known (records from before it was kept, rebuilt ones): read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bot_pull: Option<PullNumber>,
    /// This journal created the family's claim ref (no claim was there; or,
    /// for an experiment's variant, the same engine had just created the
    /// claim its siblings share), so the candidate's branch is created
    /// without reading it first: that read finds nothing on almost every
    /// lifecycle and a 404 is charged. A branch an earlier lifecycle left
    /// answers the create with "already exists" and is read then. `false`
    /// for other adopted claims and records rebuilt from GitHub (a lost
    /// store), which read the branch first: a create there could only cost
    /// a commit the branch already has.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub claim_created_here: bool,
    /// Klaud's comments on the PR as its own writes left them, kept only
    /// while `pull_opened_here`: reports are posted and edited against this
    /// copy instead of a listing of the comments (charged every time, as
    /// each of Klaud's own posts changes it). `None`: not known; list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own_comments: Option<OwnComments>,
    /// The frozen baseline (a copy of the PR body's record).
    pub frozen: Option<FrozenBaseline>,
    /// Attempts, oldest first.
    pub attempts: Vec<AttemptRecord>,
    /// Repairs used.
    pub repairs: u32,
    /// When the final labels were set (the sweep starts after).
    pub sweep_requested_at: Option<DateTime<Utc>>,
    /// What the final sweep verification found.
    pub sweep: Option<SweepCheck>,
    /// check-final, after the sweep: the frozen points the final sweep
    /// left without a result (their labels), which keep the candidate from
    /// `validated`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uncovered: Vec<String>,
    /// The report of the run the candidate ends on, kept to be posted
    /// in one comment with the receipt (`report::fold_receipt`) rather
    /// than apart; the finish posts it with the receipt, or alone when
    /// the end posts no receipt right away. Kept as the report's JSON
    /// (`Engine::kept_report` reads it): the journal does not import the
    /// report types, which import the journal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_report: Option<serde_json::Value>,
    /// Keeping a validated PR mergeable until a maintainer merges it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upkeep: Option<Upkeep>,
    /// Steps in a row that failed because the candidate's PR, branch or
    /// run no longer exists on GitHub (a repository reset or transfer, a
    /// deleted run); at [`VANISHED_TRIES`] the candidate ends.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub vanished: u32,
    /// The end, once decided.
    pub ending: Option<Ending>,
    /// The last external action about to be taken (for diagnosis, and to
    /// tell a repair already started from one to start).
    pub intent: Option<Intent>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}

/// What Klaud did to keep a validated PR mergeable and its sweep reusable.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Upkeep {
    /// How merging reuses the validated run: Klaud's own
    /// `/reuse-sweep-run <run>` comment, or the line it asked a
    /// maintainer to post (its own comments carry no association the
    /// repository's gate accepts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reuse: Option<ReuseAuthorization>,
    /// The base commits merged into the branch so far, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merged_bases: Vec<CommitSha>,
    /// Why Klaud stopped keeping the PR up to date (merged, closed,
    /// handed off), once it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settled: Option<String>,
    /// A person pushed on top of the validated commit: Klaud withdrew its
    /// reuse authorization, since the sweep never ran the pushed head.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withdrawn: Option<Withdrawn>,
}

/// Why reuse of the validated sweep no longer stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Withdrawn {
    /// The run whose reuse was withdrawn.
    pub run: u64,
    /// The head the sweep never ran (a person's push).
    pub head: CommitSha,
}

impl Withdrawn {
    /// The dashboard's and `klaud status`'s line: the sweep no longer
    /// covers the head, and what a maintainer can do.
    pub fn line(&self) -> String {
        format!(
            "the sweep no longer covers the head: a person pushed {}, so Klaud withdrew `/reuse-sweep-run {}` and merging sweeps again on main; `/klaud retry` sweeps this head again, or a maintainer posts `/reuse-sweep-run` with the id of a passed sweep run of this head",
            self.head.short(),
            self.run
        )
    }
}

/// How the validated run is authorized for reuse at merge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "kebab-case")]
pub enum ReuseAuthorization {
    /// Klaud posted the line itself (its comments are a collaborator's).
    Klaud {
        /// The run whose reuse is authorized.
        run: u64,
    },
    /// Klaud asked a maintainer to post the line.
    Maintainer {
        /// The run to reuse.
        run: u64,
        /// The association GitHub gave Klaud's own comment.
        association: String,
    },
}

impl Upkeep {
    /// One line for the dashboard and `klaud status`: how merging reuses
    /// the sweep and what Klaud did to keep the PR mergeable.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        match (&self.withdrawn, &self.reuse) {
            (Some(w), _) => parts.push(w.line()),
            (None, Some(r @ ReuseAuthorization::Klaud { .. })) => {
                parts.push(format!("merge reuses the sweep (`{}`)", r.line()));
            }
            (None, Some(r @ ReuseAuthorization::Maintainer { .. })) => {
                parts.push(format!("awaiting a maintainer's `{}`", r.line()));
            }
            (None, None) => {}
        }
        match self.merged_bases.len() {
            0 => {}
            1 => parts.push("base merged in once".to_owned()),
            n => parts.push(format!("base merged in {n} times")),
        }
        if let Some(why) = &self.settled {
            parts.push(format!("no longer kept up to date: {why}"));
        }
        parts.join("; ")
    }
}

impl ReuseAuthorization {
    /// The comment line the repository's reuse gate accepts in every
    /// version (`utils/find_reusable_sweep_run.py`).
    pub fn line(&self) -> String {
        match self {
            ReuseAuthorization::Klaud { run } | ReuseAuthorization::Maintainer { run, .. } => {
                format!("/reuse-sweep-run {run}")
            }
        }
    }
}

/// A hunt's result lines in both languages.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HuntLines {
    /// English.
    pub en: Vec<String>,
    /// Chinese.
    pub zh: Vec<String>,
}

impl HuntLines {
    /// No hunt ended.
    pub fn is_empty(&self) -> bool {
        self.en.is_empty() && self.zh.is_empty()
    }
}

impl CandidateRecord {
    /// The target that opens this record again (what the plan proposed).
    pub fn target(&self) -> super::target::Target {
        super::target::Target {
            family: self.family.clone(),
            candidate: self.candidate.clone(),
            image: self.image.clone(),
            revision: self.revision.clone(),
            clock: self.clock.clone(),
            not_release_reason: self.not_release_reason.clone(),
            upstream: self.upstream.clone(),
            versions: self.versions.clone(),
            variant: self.variant.clone(),
        }
    }

    /// Every run Klaud owns for this candidate, oldest first.
    pub fn runs(&self) -> Vec<RunRef> {
        self.attempts.iter().filter_map(|a| a.run.clone()).collect()
    }

    /// Finished as `capacity-deferred`: the family is tried again in a
    /// later wave, from the start (see configs/README.md#shared-clusters-capacity).
    pub fn deferred(&self) -> bool {
        self.step == Step::Done
            && self
                .ending
                .as_ref()
                .is_some_and(|e| e.outcome == crate::model::Outcome::CapacityDeferred)
    }
}

/// A journal failure (I/O, corrupt record): what was being done, and the
/// underlying error as the source when there is one. The message ends with
/// the source's too: the engine and the daemon show errors by their message
/// alone.
#[derive(Debug, thiserror::Error)]
#[error("journal: {context}{}", cause(.source.as_ref()))]
pub struct JournalError {
    context: String,
    #[source]
    source: Option<ErrorSource>,
}

impl JournalError {
    /// `context` (what was being done) failed with `source`.
    pub fn new(
        context: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self {
            context: context.into(),
            source: Some(Box::new(source)),
        }
    }

    /// A failure with no underlying error (a journal refusing a request).
    pub fn refused(why: impl Into<String>) -> Self {
        Self {
            context: why.into(),
            source: None,
        }
    }
}

/// `": <source>"`, or nothing without a source.
fn cause(source: Option<&ErrorSource>) -> String {
    source.map(|s| format!(": {s}")).unwrap_or_default()
}

/// How many steps in a row may find the candidate's own things gone before
/// it ends: a moment of GitHub's replication lag is not an end, a vanished
/// repository is.
pub const VANISHED_TRIES: u32 = 3;

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Durable candidate records.
#[async_trait]
pub trait Journal: Send + Sync {
    /// Stores a record durably (flushed before returning).
    async fn save(&self, record: &CandidateRecord) -> Result<(), JournalError>;
    /// One record.
    async fn load(&self, candidate: &str) -> Result<Option<CandidateRecord>, JournalError>;
    /// Every record.
    async fn list(&self) -> Result<Vec<CandidateRecord>, JournalError>;
    /// The last maintainer request to plan `family` (a family id) again
    /// before its cooldown ends (`/klaud retry`). A journal that keeps none
    /// answers `None`.
    async fn retry_request(&self, family: &str) -> Result<Option<RetryRequest>, JournalError> {
        let _ = family;
        Ok(None)
    }
    /// Records a retry request for `family` durably (flushed before
    /// returning), replacing an earlier one. A journal that keeps none
    /// refuses.
    async fn record_retry_request(
        &self,
        family: &str,
        request: &RetryRequest,
    ) -> Result<(), JournalError> {
        let _ = (family, request);
        Err(JournalError::refused(
            "this journal keeps no retry requests",
        ))
    }
    /// What producer run `run`'s AgentX artifacts said, when kept. A
    /// journal that keeps none answers `None`: the artifacts are read again.
    async fn producer_datasets(
        &self,
        run: u64,
    ) -> Result<Option<crate::dataset::record::ProducerDatasets>, JournalError> {
        let _ = run;
        Ok(None)
    }
    /// Keeps what producer run `run`'s AgentX artifacts said (they never
    /// change). A journal that keeps none forgets it.
    async fn record_producer_datasets(
        &self,
        run: u64,
        datasets: &crate::dataset::record::ProducerDatasets,
    ) -> Result<(), JournalError> {
        let _ = (run, datasets);
        Ok(())
    }
    /// The failed jobs of run `run`'s attempt `attempt` as the sick-nodes
    /// table counts them, when kept. A journal that keeps none answers
    /// `None`: the run's jobs and logs are read again.
    async fn run_failures(
        &self,
        run: u64,
        attempt: u64,
    ) -> Result<Option<crate::playbook::sick::RunFailures>, JournalError> {
        let _ = (run, attempt);
        Ok(None)
    }
    /// Keeps what a completed run attempt's failed jobs said (it never
    /// changes). A journal that keeps none forgets it.
    async fn record_run_failures(
        &self,
        failures: &crate::playbook::sick::RunFailures,
    ) -> Result<(), JournalError> {
        let _ = failures;
        Ok(())
    }
    /// The failed runs the last pass's sick-nodes table was made from,
    /// when kept. A journal that keeps none answers `None`: a report
    /// judges a node by its own run alone until a pass keeps one.
    async fn sick_window(&self) -> Result<Option<crate::playbook::sick::SickWindow>, JournalError> {
        Ok(None)
    }
    /// Keeps the failed runs a pass's sick-nodes table was made from,
    /// replacing the last ones. A journal that keeps none forgets them.
    async fn record_sick_window(
        &self,
        window: &crate::playbook::sick::SickWindow,
    ) -> Result<(), JournalError> {
        let _ = window;
        Ok(())
    }
}

/// A maintainer's request to plan a family again before its cooldown ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryRequest {
    /// The finished candidate the request was made on.
    pub candidate: CandidateId,
    /// Who asked (login, or `operator` for the CLI).
    pub by: String,
    /// Why, as given.
    pub reason: String,
    /// When.
    pub at: DateTime<Utc>,
}

/// A journal in memory (tests, and runs that accept losing it: GitHub is
/// the truth and the engine rebuilds from it).
#[derive(Debug, Default)]
pub struct MemoryJournal {
    records: Mutex<BTreeMap<String, CandidateRecord>>,
    retries: Mutex<BTreeMap<String, RetryRequest>>,
    producers: Mutex<BTreeMap<u64, crate::dataset::record::ProducerDatasets>>,
    run_failures: Mutex<BTreeMap<(u64, u64), crate::playbook::sick::RunFailures>>,
    sick_window: Mutex<Option<crate::playbook::sick::SickWindow>>,
}

impl MemoryJournal {
    /// An empty journal.
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets everything (simulates a deleted store).
    pub fn clear(&self) {
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

#[async_trait]
impl Journal for MemoryJournal {
    async fn save(&self, record: &CandidateRecord) -> Result<(), JournalError> {
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(record.candidate.to_string(), record.clone());
        Ok(())
    }

    async fn load(&self, candidate: &str) -> Result<Option<CandidateRecord>, JournalError> {
        Ok(self
            .records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(candidate)
            .cloned())
    }

    async fn list(&self) -> Result<Vec<CandidateRecord>, JournalError> {
        Ok(self
            .records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect())
    }

    async fn retry_request(&self, family: &str) -> Result<Option<RetryRequest>, JournalError> {
        Ok(self
            .retries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(family)
            .cloned())
    }

    async fn record_retry_request(
        &self,
        family: &str,
        request: &RetryRequest,
    ) -> Result<(), JournalError> {
        self.retries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(family.to_owned(), request.clone());
        Ok(())
    }

    async fn producer_datasets(
        &self,
        run: u64,
    ) -> Result<Option<crate::dataset::record::ProducerDatasets>, JournalError> {
        Ok(self
            .producers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&run)
            .cloned())
    }

    async fn record_producer_datasets(
        &self,
        run: u64,
        datasets: &crate::dataset::record::ProducerDatasets,
    ) -> Result<(), JournalError> {
        self.producers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(run, datasets.clone());
        Ok(())
    }

    async fn run_failures(
        &self,
        run: u64,
        attempt: u64,
    ) -> Result<Option<crate::playbook::sick::RunFailures>, JournalError> {
        Ok(self
            .run_failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(run, attempt))
            .cloned())
    }

    async fn record_run_failures(
        &self,
        failures: &crate::playbook::sick::RunFailures,
    ) -> Result<(), JournalError> {
        self.run_failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((failures.run, failures.attempt), failures.clone());
        Ok(())
    }
    async fn sick_window(&self) -> Result<Option<crate::playbook::sick::SickWindow>, JournalError> {
        Ok(self
            .sick_window
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone())
    }

    async fn record_sick_window(
        &self,
        window: &crate::playbook::sick::SickWindow,
    ) -> Result<(), JournalError> {
        *self.sick_window.lock().unwrap_or_else(|p| p.into_inner()) = Some(window.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::JournalError;

    #[test]
    fn a_journal_error_names_the_operation_and_keeps_its_cause() {
        let e = JournalError::new("load candidate c", std::io::Error::other("disk full"));
        assert_eq!(e.to_string(), "journal: load candidate c: disk full");
        assert_eq!(
            e.source().map(|s| s.to_string()).as_deref(),
            Some("disk full")
        );
        let refused = JournalError::refused("this journal keeps no retry requests");
        assert_eq!(
            refused.to_string(),
            "journal: this journal keeps no retry requests"
        );
        assert!(refused.source().is_none());
    }
}
