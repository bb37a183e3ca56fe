//! Rebuilding a record from what GitHub shows, so that an empty or stale
//! journal converges on the same end: the new record, the end already
//! published (receipt, cleanup marker, merged or closed PR), the runs Klaud
//! owns, the attempts its reports name, and the recovery of a dead
//! instance's candidate ([`Engine::recover`]).

use crate::BoxFuture;
use crate::engine::attempt::{INFRA_DETAIL, SWEEP_INFRA_DETAIL};
use crate::engine::config::{TRAILER, is_smoke_title};
use crate::engine::context::Engine;
use crate::engine::error::EngineError;
use crate::engine::forge::{Comment, Forge as _, RunQuery};
use crate::engine::journal::{AttemptRecord, CandidateRecord, Ending, Step};
use crate::engine::target::{Target, branch_name};
use crate::model::{AttemptKind, AttemptStatus, Outcome, Phase, RunRef};
use crate::report::{
    AttemptReport, MarkerKey, Receipt, ReportName, find_record, find_records, parse_report,
};
use klaud_claims::{CandidateId, CommitSha, HeldClaim};

impl Engine<'_> {
    /// A record of `candidate` on this engine's base with nothing done yet:
    /// at the claim step, owned by this engine's run, no image chosen.
    pub(super) fn new_record(
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
            pending_branch_commit: None,
            pull: None,
            pull_url: None,
            pull_opened_here: false,
            bot_pull: None,
            claim_created_here: false,
            own_comments: None,
            frozen: None,
            attempts: Vec::new(),
            repairs: 0,
            sweep_requested_at: None,
            sweep: None,
            uncovered: Vec::new(),
            final_report: None,
            upkeep: None,
            ending: None,
            intent: None,
            updated_at: self.clock.now(),
            revision: None,
            clock: None,
            not_release_reason: None,
            upstream: None,
            hunt: Default::default(),
            learned: None,
            swept_again: false,
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
                // then it stays as it is, without a GitHub request. So does
                // a "not this image" a maintainer undid.
                if !self.config.decline_undone(&rec)
                    && (!rec.deferred() || self.capacity_refusal(&rec.family).await?.is_some())
                {
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
                let comments = self.forge.list_comments(pull.number).await?;
                if !self.resume_resweep(&mut rec, &pull, &comments) {
                    self.rebuild_ending_from(&mut rec, &pull, &comments).await?;
                }
            }
            self.save(&mut rec).await?;
            Ok(rec)
        })
    }

    /// With an empty journal, a PR that carries this candidate's receipt is
    /// finished, and one with its cleanup marker is mid-cleanup: the ending
    /// is re-derived from the published reports the same way it was first
    /// decided, so the receipt comes out the same.
    pub(super) async fn rebuild_ending(
        &self,
        rec: &mut CandidateRecord,
        pull: &super::forge::Pull,
    ) -> Result<(), EngineError> {
        let comments = self.forge.list_comments(pull.number).await?;
        self.rebuild_ending_from(rec, pull, &comments).await
    }

    /// [`Engine::rebuild_ending`] from the PR's `comments`, read already.
    async fn rebuild_ending_from(
        &self,
        rec: &mut CandidateRecord,
        pull: &super::forge::Pull,
        comments: &[Comment],
    ) -> Result<(), EngineError> {
        let mut cleanup = None;
        let mut first = None;
        for c in comments {
            if !self.by_bot(c.author.as_deref()) {
                continue;
            }
            let Ok(Some(found)) = find_record(&c.body) else {
                continue;
            };
            match &found.key {
                MarkerKey::Outcome { candidate, .. } if candidate.as_str() == rec.candidate => {
                    if let Ok(receipt) = crate::report::parse_receipt(&found) {
                        first = Some(receipt);
                        break;
                    }
                }
                MarkerKey::Cleanup {
                    owner_run,
                    candidate,
                } if candidate.as_str() == rec.candidate => cleanup = Some(*owner_run),
                _ => {}
            }
        }
        if let Some(receipt) = first {
            let undone = receipt
                .declined
                .as_ref()
                .is_some_and(|d| self.config.undone_declines.contains(&d.pull));
            if (receipt.result.outcome() == Outcome::CapacityDeferred || undone)
                && !pull.state.is_open()
            {
                // A deferral is tried again from the start: the
                // closed PR is history, not this attempt's end.
                return Ok(());
            }
            Self::take_receipt(rec, pull, &receipt);
            self.rebuild_swept_again(rec, comments, &receipt);
            return Ok(());
        }
        let Some(owner_run) = cleanup else {
            return Ok(());
        };
        self.resume_cleanup(rec, pull, owner_run, comments).await
    }

    /// The record of a candidate whose receipt is on `pull`: finished.
    fn take_receipt(rec: &mut CandidateRecord, pull: &super::forge::Pull, receipt: &Receipt) {
        rec.pull = Some(pull.number);
        rec.pull_url = Some(pull.html_url.clone());
        rec.owner_run = receipt.owner_run;
        rec.head = receipt.head.clone();
        rec.repairs = receipt.result.repairs();
        rec.sweep = receipt.sweep.clone();
        rec.learned = receipt.learned.clone();
        rec.ending = Some(Ending {
            outcome: receipt.result.outcome(),
            phase: receipt.result.phase(),
            message: "found finished on GitHub".into(),
            hands_off: true,
            note: None,
            declined: receipt.declined.clone(),
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
    }

    /// The record of a candidate whose cleanup marker of run `owner_run`
    /// is on `pull`: its ending re-derived from the published reports
    /// (or a sibling's win), to finish the interrupted cleanup.
    async fn resume_cleanup(
        &self,
        rec: &mut CandidateRecord,
        pull: &super::forge::Pull,
        owner_run: u64,
        comments: &[Comment],
    ) -> Result<(), EngineError> {
        rec.owner_run = owner_run;
        rec.pull = Some(pull.number);
        rec.pull_url = Some(pull.html_url.clone());
        rec.attempts = self.reported_attempts(rec, comments, true);
        rec.repairs = rec
            .attempts
            .iter()
            .filter_map(|a| match a.kind {
                AttemptKind::Repair { n, .. } => Some(n),
                _ => None,
            })
            .max()
            .unwrap_or(0)
            .max(self.published_repairs(rec, comments));
        rec.head = rec
            .attempts
            .last()
            .and_then(|a| CommitSha::parse(&a.head).ok());
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
            declined: None,
        });
        rec.step = Step::Finish;
        Ok(())
    }

    /// Without a journal: the head Klaud last wrote (the branch tip, when
    /// it carries this candidate's trailer) and every run Klaud owns that
    /// the reports do not name yet: smoke runs by title and actor, sweeps
    /// by head. They are added as unreported attempts, so a cleanup
    /// cancels what still runs and the receipt names them.
    // Kept whole (about 90 lines): the head and both run searches feed one
    // list of unreported attempts, in the order a cleanup needs them.
    pub(super) async fn find_owned_runs(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<(), EngineError> {
        if rec.head.is_none() {
            let trailer = format!("{TRAILER}{}", rec.candidate);
            if let Some(tip) = self.branch_tip(&rec.branch).await?
                && tip.message.lines().any(|l| l.trim() == trailer)
            {
                rec.head = Some(tip.sha);
            }
        }
        let head = rec
            .head
            .as_ref()
            .map(CommitSha::to_string)
            .unwrap_or_default();
        let known: Vec<u64> = rec.runs().iter().map(|r| r.id).collect();
        let smoke = self.bot_smoke_runs().await?;
        for r in smoke.iter().rev() {
            if is_smoke_title(&r.title, rec.owner_run, rec.candidate.as_str())
                && !known.contains(&r.id)
            {
                rec.attempts.push(AttemptRecord {
                    kind: AttemptKind::Initial {
                        budget: self.config.repair_budget,
                    },
                    // A dispatched run's head_sha is the base tip; the
                    // attempt tested the candidate head.
                    head: if head.is_empty() {
                        r.head_sha.to_string()
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
                    head: head.to_string(),
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
                    rec.bot_pull = Some(pull.number);
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
                declined: None,
            });
            self.save(&mut rec).await?;
            Ok(rec)
        })
    }

    /// Rebuilds the attempts from the report comments (empty journal).
    pub(super) async fn rebuild_attempts(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<(), EngineError> {
        let Some(number) = rec.pull else {
            return Ok(());
        };
        let comments = self.comments_with_reports(rec, number).await?;
        rec.attempts = self.reported_attempts(rec, &comments, false);
        for a in &rec.attempts {
            if let AttemptKind::Repair { n, .. } = a.kind {
                rec.repairs = rec.repairs.max(n);
            }
        }
        // Repairs of final sweeps are not smoke attempts: their reports
        // say which repair came before them.
        rec.repairs = rec.repairs.max(self.published_repairs(rec, &comments));
        Ok(())
    }

    /// The published reports of this candidate's owner run, parsed (first
    /// parts only), in publishing order.
    pub(super) fn published_reports(
        &self,
        rec: &CandidateRecord,
        comments: &[crate::engine::forge::Comment],
    ) -> Vec<AttemptReport> {
        comments
            .iter()
            .filter(|c| self.by_bot(c.author.as_deref()))
            .flat_map(|c| find_records(&c.body).unwrap_or_default())
            .filter(|f| {
                matches!(&f.key, MarkerKey::Report {
                    owner_run, candidate, name: ReportName::Run { .. }, part,
                } if *owner_run == rec.owner_run
                    && candidate.as_str() == rec.candidate
                    && part.is_none_or(|p| p == 1))
            })
            .filter_map(|f| parse_report(&f).ok())
            .collect()
    }

    /// The highest repair number the published reports name (a smoke's
    /// `Repair n/…` or the `repair` of any report after a repair).
    pub(super) fn published_repairs(
        &self,
        rec: &CandidateRecord,
        comments: &[crate::engine::forge::Comment],
    ) -> u32 {
        self.published_reports(rec, comments)
            .iter()
            .filter_map(|r| match (r.kind, &r.repair) {
                (_, Some(changes)) => Some(changes.n),
                (Some(AttemptKind::Repair { n, .. }), None) => Some(n),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// The attempts whose reports are published (and the one kept for the
    /// receipt), in publishing order.
    pub(super) fn reported_attempts(
        &self,
        rec: &CandidateRecord,
        comments: &[crate::engine::forge::Comment],
        with_sweep: bool,
    ) -> Vec<AttemptRecord> {
        let mut out = Vec::new();
        let published: Vec<AttemptReport> = comments
            .iter()
            .filter(|c| self.by_bot(c.author.as_deref()))
            .flat_map(|c| find_records(&c.body).unwrap_or_default())
            .filter(|found| {
                matches!(&found.key, MarkerKey::Report {
                    owner_run, candidate, name: ReportName::Run { .. }, part,
                } if *owner_run == rec.owner_run
                    && candidate.as_str() == rec.candidate
                    && part.is_none_or(|p| p == 1))
            })
            .filter_map(|found| parse_report(&found).ok())
            .collect();
        // The report kept for the receipt is the newest, not on the PR yet.
        let kept = Self::kept_report(rec).filter(|k| !published.iter().any(|p| p.key() == k.key()));
        for report in published.iter().chain(kept.as_ref()) {
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
                // A live report names the attempt's run, not its result.
                reported: !report.is_live(),
            });
        }
        out
    }
}
