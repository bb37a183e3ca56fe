//! The step context: [`Engine`] carries what every step works with (the
//! forge behind the step reads and the lease check, the journal, the clock,
//! the claimant, the baseline source, the repair hook, the base checkout and
//! the configuration) and the services every step shares: saving the record
//! and its intent, ending a candidate, the capacity gate, the claim book and
//! the few facts derived from the record (its head, its family, the keys a
//! bump changes).
//!
//! The steps themselves are free functions in `steps/`, one file each;
//! ownership proofs are in `proof`, publishing reports in `publish` and
//! `live`, the workflow dispatch in `dispatch`, rebuilding a record from
//! GitHub in `rebuild`, and moving a record from step to step in `drive`.

use crate::baseline::BaselineSource;
use crate::engine::config::EngineConfig;
use crate::engine::error::EngineError;
use crate::engine::forge::{CompareStatus, Forge, ForgeError};
use crate::engine::intent::Intent;
use crate::engine::journal::{CandidateRecord, Ending, Journal, PendingBranchCommit, Step};
use crate::engine::repair_hook::RepairHook;
use crate::model::{Outcome, Phase};
use crate::report::BumpScope;
use crate::workflow_contract::Workflow;
use chrono::TimeDelta;
use klaud_claims::{CandidateId, ClaimBook, Claimant, Clock, CommitSha};
use klaud_planner::image::ImageRef;
use klaud_planner::repo::{Family, Repository};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The state machine over a forge, a journal and the base checkout.
pub struct Engine<'a> {
    /// The forge, with reads kept for the length of one step and every
    /// write's lease checked before it is sent.
    pub(super) forge: super::step_reads::StepReads<'a>,
    pub(super) journal: &'a dyn Journal,
    pub(super) clock: &'a dyn Clock,
    pub(super) claimant: Claimant,
    pub(super) baseline: &'a dyn BaselineSource,
    pub(super) repair: Option<&'a dyn RepairHook>,
    /// Where a hunt's plan reads the track's served tags.
    pub(super) hunt_tags: Option<&'a dyn crate::hunt::tags::HuntTags>,
    pub(super) repository: &'a Repository,
    pub(super) repository_sha: CommitSha,
    pub(super) config: &'a EngineConfig,
    /// The smoke and sweep workflows by base commit (they never change for
    /// a commit, so each is read once per engine).
    pub(super) workflows: Mutex<BTreeMap<String, Arc<BaseWorkflows>>>,
    /// The claim refs the pass's own listing showed, when the caller listed
    /// them in this pass (see [`Engine::with_listed_claims`]), and those
    /// this engine created since (an experiment's variants share one).
    pub(super) listed_claims: Mutex<Option<std::collections::BTreeSet<String>>>,
    /// Claim refs this engine created (an experiment's siblings adopt one
    /// whose branches nothing made yet; see also
    /// [`Engine::seed_created_claim`]).
    pub(super) created_claims: Mutex<std::collections::BTreeSet<String>>,
    /// The authors of the pull requests the pass's listing of open PRs
    /// showed (see [`Engine::with_listed_authors`]).
    pub(super) listed_authors: BTreeMap<klaud_claims::PullNumber, String>,
}

/// A branch's tip commit, as the ref store read it.
#[derive(Debug, Clone)]
pub(super) struct BranchTip {
    pub(super) sha: CommitSha,
    /// The commit's message.
    pub(super) message: String,
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

/// The smoke and sweep workflow files at one base commit: `Ok(None)` when
/// the file is absent, `Err` (the parse error) when it does not parse.
#[derive(Debug)]
pub(crate) struct BaseWorkflows {
    pub(super) smoke: Result<Option<Workflow>, String>,
    pub(super) sweep: Result<Option<Workflow>, String>,
}

/// What one upkeep pass over a validated PR did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upkept {
    /// The PR merges cleanly (or GitHub said nothing else).
    Current,
    /// GitHub has not computed mergeability yet; look again next pass.
    Waiting(String),
    /// The base was merged in: the new head.
    Merged(CommitSha),
    /// Another holder has the family's claim; look again next pass.
    Busy(String),
    /// Klaud stopped keeping this PR (merged, closed, handed off, or the
    /// base changed the bump itself), with why.
    Settled(String),
    /// A person pushed on top of the validated commit: Klaud withdrew its
    /// reuse authorization and watches only for the merge or close.
    Withdrawn(String),
}

/// A sha GitHub (or a test forge) answered, checked before it can reach a
/// record; `what` names where it was read.
pub(crate) fn forge_sha(what: &str, text: &str) -> Result<CommitSha, ForgeError> {
    CommitSha::parse(text).map_err(|e| ForgeError::Other(format!("{what}: {e}")))
}

impl std::fmt::Debug for Engine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("claimant", &self.claimant)
            .field("repository_sha", &self.repository_sha)
            .finish_non_exhaustive()
    }
}

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
        repository_sha: CommitSha,
        config: &'a EngineConfig,
    ) -> Self {
        // Leases are recorded to the second, so one just renewed may have
        // less than a second more than asked for; the window never asks
        // for more than a quarter of what is surely left.
        let sure = (config.lease - TimeDelta::seconds(1)).max(TimeDelta::zero());
        let window = (config.lease_margin + config.write_timeout).min(sure / 4);
        Self {
            forge: super::step_reads::StepReads::new(
                forge,
                super::write::LeaseWindow { clock, window },
            ),
            journal,
            clock,
            claimant,
            baseline,
            repair: None,
            hunt_tags: None,
            repository,
            repository_sha,
            config,
            workflows: Mutex::new(BTreeMap::new()),
            listed_claims: Mutex::new(None),
            created_claims: Mutex::new(std::collections::BTreeSet::new()),
            listed_authors: BTreeMap::new(),
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

    /// Adds the registry's side of a regression hunt: without it no hunt
    /// starts by itself (there are no tags to search).
    pub fn with_hunt_tags(mut self, tags: &'a dyn crate::hunt::tags::HuntTags) -> Self {
        self.hunt_tags = Some(tags);
        self
    }

    /// Asks the capacity gate, when there is one, whether `rec`'s family
    /// may use its clusters now. `Some(progress)`: it may not (or the API
    /// gave no usable answer), and the candidate ended `capacity-deferred`
    /// with the usual cleanup; the caller returns `progress`.
    pub(super) async fn capacity_deferred(
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
    pub(super) async fn capacity_refusal(
        &self,
        family: &str,
    ) -> Result<Option<String>, EngineError> {
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

    pub(super) fn book(&self) -> ClaimBook<'_> {
        ClaimBook::new(self.forge.refs(), self.clock, self.claimant.clone())
    }

    pub(super) fn family(&self, family: &str) -> Result<&Family, EngineError> {
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

    /// `body` ending with the current footer (commands, what closing
    /// means, the dashboard issue): every edit of a PR body refreshes it, so
    /// a PR opened before the dashboard issue existed links it later.
    pub(super) fn with_footer(&self, body: &str) -> String {
        crate::report::splice_footer(
            body,
            &crate::report::render_footer(self.config.dashboard_issue),
        )
    }

    pub(super) fn by_bot(&self, login: Option<&str>) -> bool {
        let bot = self.forge.bot_login();
        login.is_some_and(|l| l.eq_ignore_ascii_case(&bot))
    }

    /// Whether `commit` is Klaud's own for a candidate: the bot's, with the
    /// candidate's `trailer` line (`Klaud-Candidate: <id>`).
    pub(super) fn by_klaud(
        &self,
        commit: &crate::engine::forge::ComparedCommit,
        trailer: &str,
    ) -> bool {
        self.by_bot(commit.author.as_deref()) && commit.message.lines().any(|l| l.trim() == trailer)
    }

    /// The record's id (checked when the record was made or loaded); a
    /// `Result` so that callers keep one error path.
    pub(super) fn candidate_id(rec: &CandidateRecord) -> Result<CandidateId, EngineError> {
        Ok(rec.candidate.clone())
    }

    pub(super) async fn save(&self, rec: &mut CandidateRecord) -> Result<(), EngineError> {
        rec.updated_at = self.clock.now();
        self.journal.save(rec).await?;
        Ok(())
    }

    /// Records what is about to happen, durably, before it happens.
    pub(super) async fn intend(
        &self,
        rec: &mut CandidateRecord,
        what: Intent,
    ) -> Result<(), EngineError> {
        rec.intent = Some(what);
        self.save(rec).await
    }

    pub(super) fn phase_of(step: Step) -> Phase {
        match step {
            Step::Claim | Step::Prepare | Step::Open => Phase::Resolve,
            Step::Baseline => Phase::Baseline,
            Step::Smoke | Step::Repair => Phase::Targeted,
            Step::Final | Step::Sweep => Phase::FinalSweep,
            Step::Finish | Step::Done => Phase::Unknown,
        }
    }

    /// Decides the end and moves to `Finish`.
    pub(super) async fn end(
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
            declined: None,
        });
        rec.step = Step::Finish;
        self.save(rec).await?;
        Ok(Progress::Advanced(Step::Finish))
    }

    pub(super) fn head(rec: &CandidateRecord) -> Result<CommitSha, EngineError> {
        rec.head
            .clone()
            .ok_or_else(|| EngineError::Invalid("no branch head recorded".into()))
    }

    pub(super) async fn branch_tip(&self, branch: &str) -> Result<Option<BranchTip>, EngineError> {
        let Some(tip) = self
            .forge
            .refs()
            .read_ref(&format!("refs/heads/{branch}"))
            .await
            .map_err(|e| ForgeError::refs(format!("read branch {branch}"), e))?
        else {
            return Ok(None);
        };
        Ok(Some(BranchTip {
            sha: forge_sha(&format!("tip of branch {branch}"), &tip.sha)?,
            message: tip.message,
        }))
    }

    /// Where `branch` is (its commit unread), `None` when it is absent: for
    /// the base branch, whose tip is only merged in or compared against.
    pub(super) async fn branch_sha(&self, branch: &str) -> Result<Option<CommitSha>, EngineError> {
        let sha = self
            .forge
            .refs()
            .read_ref_sha(&format!("refs/heads/{branch}"))
            .await
            .map_err(|e| ForgeError::refs(format!("read branch {branch}"), e))?;
        sha.map(|s| forge_sha(&format!("tip of branch {branch}"), &s))
            .transpose()
            .map_err(Into::into)
    }

    /// Adopts the branch tip when it is a commit Klaud made but did not get
    /// to journal (a crash between push and save).
    pub(super) async fn reconcile_head(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<(), EngineError> {
        if let Some(asked) = rec.pending_branch_commit.clone() {
            return self.reconcile_branch_commit(rec, asked).await;
        }
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

    /// After a commit-and-move whose answer was lost: the tip is adopted
    /// when it is provably that write, one commit on the recorded parent,
    /// by the bot, with the recorded message (read only in this case). A
    /// tip still at the parent means it did not land, and the step makes
    /// it again; any other tip is left for the ownership check, which
    /// hands a branch someone else moved over.
    async fn reconcile_branch_commit(
        &self,
        rec: &mut CandidateRecord,
        asked: PendingBranchCommit,
    ) -> Result<(), EngineError> {
        if let Some(tip) = self.branch_tip(&rec.branch).await?
            && tip.sha != asked.parent
            && rec.head.as_ref() == Some(&asked.parent)
        {
            let cmp = self.forge.compare_commits(&asked.parent, &tip.sha).await?;
            let ours = match cmp.commits.as_slice() {
                [only] => {
                    cmp.status == CompareStatus::Ahead
                        && cmp.total_commits == 1
                        && only.sha == tip.sha
                        && only.parents == [asked.parent.clone()]
                        && self.by_bot(only.author.as_deref())
                        && only.message.trim_end() == asked.message.trim_end()
                }
                _ => false,
            };
            if ours {
                rec.head = Some(tip.sha);
            }
        }
        rec.pending_branch_commit = None;
        self.save(rec).await
    }

    /// What the candidate's bump covers: as recorded when the commit was
    /// made, else planned again from the base checkout (a branch adopted
    /// after the journal was lost). `None` when it cannot be planned.
    pub(super) fn bump_scope(&self, rec: &CandidateRecord) -> Option<BumpScope> {
        if let Some(scope) = &rec.scope {
            return Some(scope.clone());
        }
        let family = self.family(&rec.family).ok()?;
        let to = ImageRef::parse(&rec.image).ok()?;
        self.repository
            .plan_bump_with(&rec.family, family.image(), &to, &self.config.bump)
            .ok()
            .map(|plan| BumpScope::of(&plan))
    }

    /// The changelog's `config-keys`: every key the bump changed (a family
    /// group is bumped together), else the candidate's own key.
    pub(super) fn changelog_keys(&self, rec: &CandidateRecord) -> Vec<String> {
        match self.bump_scope(rec) {
            Some(scope) if !scope.keys.is_empty() => scope.keys,
            _ => vec![rec.key.clone()],
        }
    }
}
