//! Live attempt reports: while a smoke or sweep run is in progress, its
//! report comment is posted early and edited in place as jobs finish; the
//! final report then replaces it in the same comment. The first one waits
//! for a finished job, or for the run to be as old as the edit interval: a
//! run that ends sooner gets its final report alone.
//!
//! The comment is found by its hidden marker (`run-<id>-<attempt>`,
//! deterministic), its record says when it was last written (`at`, the edit
//! clock for the minimum interval) and what it showed (an unchanged report
//! costs no edit). A record that opened its PR looks for it in its own copy
//! of the comments it wrote ([`OwnComments`]) rather than listing them;
//! when a write may have landed unrecorded (a crash after it), or the
//! journal is gone, the comments are listed, so a restart finds the same
//! comment and never posts a second one.

use crate::engine::attempt::{Shown, attempt_report, failed_of};
use crate::engine::context::Engine;
use crate::engine::context::Progress;
use crate::engine::error::EngineError;
use crate::engine::forge::{Comment, Forge as _, ForgeError, Run, RunStatus};
use crate::engine::intent::Intent;
use crate::engine::journal::{CandidateRecord, OwnComments};
use crate::engine::proof::Scope;
use crate::engine::write::Writes as _;
use crate::model::{AttemptStatus, RunRef};
use crate::report::{
    AttemptReport, LiveJobs, MarkerKey, RenderedComment, ReportName, find_record, find_records,
    parse_report, render_report,
};
use klaud_claims::PullNumber;

/// Why a point of a live report has no row yet.
pub(super) const NOT_FINISHED: &str = "its job has not finished yet";

impl Engine<'_> {
    /// The comments reports are posted and edited against: the record's
    /// copy of its own when it can be trusted (see [`OwnComments`]), else
    /// a listing, which becomes the copy when the record opened the PR.
    pub(super) async fn report_comments(
        &self,
        rec: &mut CandidateRecord,
        number: PullNumber,
    ) -> Result<Vec<Comment>, EngineError> {
        if let Some(own) = Self::trusted_own_comments(rec) {
            return Ok(own.to_vec());
        }
        let comments = self.forge.list_comments(number).await?;
        if rec.pull_opened_here {
            rec.own_comments = Some(OwnComments {
                comments: comments
                    .iter()
                    .filter(|c| self.by_bot(c.author.as_deref()))
                    .cloned()
                    .collect(),
                settled: rec.intent.clone(),
            });
        }
        Ok(comments)
    }

    /// The record's copy of its own comments, unless a comment write may
    /// have landed without the record knowing (see [`OwnComments`]).
    pub(super) fn trusted_own_comments(rec: &CandidateRecord) -> Option<&[Comment]> {
        let pending_write = matches!(
            rec.intent,
            Some(
                Intent::Comment(_)
                    | Intent::CommentLiveReport(_)
                    | Intent::EditLiveReport(_)
                    | Intent::PostCleanupMarker
            )
        );
        rec.own_comments
            .as_ref()
            .filter(|own| !pending_write || own.settled == rec.intent)
            .map(|own| own.comments.as_slice())
    }

    /// Klaud's published reports on PR `number` are read from the
    /// record's trusted copy of its comments, else from a listing.
    pub(super) async fn comments_with_reports(
        &self,
        rec: &CandidateRecord,
        number: PullNumber,
    ) -> Result<Vec<Comment>, EngineError> {
        match Self::trusted_own_comments(rec) {
            Some(own) => Ok(own.to_vec()),
            None => Ok(self.forge.list_comments(number).await?),
        }
    }

    /// Keeps the answer of a comment write (under the record's current
    /// intent) in the record's copy of its comments.
    pub(super) fn remember_comment(rec: &mut CandidateRecord, written: Comment) {
        let intent = rec.intent.clone();
        if let Some(own) = rec.own_comments.as_mut() {
            match own.comments.iter_mut().find(|c| c.id == written.id) {
                Some(c) => *c = written,
                None => own.comments.push(written),
            }
            own.settled = intent;
        }
    }

    /// Edits one of Klaud's comments; one a person deleted is forgotten
    /// (with the copy, so the next look lists the comments and posts anew).
    pub(super) async fn edit_own_comment(
        &self,
        rec: &mut CandidateRecord,
        proof: &crate::engine::ownership::OwnershipProof,
        number: PullNumber,
        id: u64,
        body: &str,
    ) -> Result<bool, EngineError> {
        match self.forge.update_comment(proof, number, id, body).await {
            Ok(written) => {
                Self::remember_comment(rec, written);
                Ok(true)
            }
            Err(ForgeError::NotFound(_)) if rec.own_comments.is_some() => {
                rec.own_comments = None;
                self.save(rec).await?;
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The bot's comment holding a live report with the same owner run,
    /// candidate and record name as `key` (any part), if there is one: the
    /// comment the final report is written into.
    pub(super) fn live_comment<'c>(
        &self,
        comments: &'c [Comment],
        key: &MarkerKey,
    ) -> Option<(&'c Comment, AttemptReport)> {
        let MarkerKey::Report {
            owner_run,
            candidate,
            name,
            part,
        } = key
        else {
            return None;
        };
        if part.is_some_and(|p| p != 1) {
            return None;
        }
        comments
            .iter()
            .filter(|c| self.by_bot(c.author.as_deref()))
            .find_map(|c| {
                let found = find_record(&c.body).ok().flatten()?;
                let MarkerKey::Report {
                    owner_run: o,
                    candidate: k,
                    name: n,
                    ..
                } = &found.key
                else {
                    return None;
                };
                if o != owner_run || k != candidate || n != name {
                    return None;
                }
                let report = parse_report(&found).ok()?;
                report.is_live().then_some((c, report))
            })
    }

    /// Posts or edits the live report of `run` (in progress) for attempt
    /// `idx`. Returns `Some(progress)` only when an ownership check ended
    /// the candidate. Does nothing when live reports are off, when the
    /// comment was edited less than the configured interval ago, or when
    /// the report would show what it already shows.
    pub(super) async fn publish_live(
        &self,
        rec: &mut CandidateRecord,
        idx: usize,
        run: &Run,
    ) -> Result<Option<Progress>, EngineError> {
        let Some(interval) = self.config.live_report_interval else {
            return Ok(None);
        };
        let Some(number) = rec.pull else {
            return Ok(None);
        };
        let name = ReportName::Run {
            id: run.id,
            attempt: run.attempt,
        };
        let key = MarkerKey::Report {
            owner_run: rec.owner_run,
            candidate: Self::candidate_id(rec)?,
            name,
            part: None,
        };
        let comments = self.report_comments(rec, number).await?;
        let existing = self.live_comment(&comments, &key);
        let final_exists = comments.iter().any(|c| {
            self.by_bot(c.author.as_deref())
                && find_records(&c.body).is_ok_and(|found| found.iter().any(|f| {
                    matches!(&f.key, MarkerKey::Report { owner_run, candidate, name: n, .. }
                        if *owner_run == rec.owner_run && candidate.as_str() == rec.candidate && *n == name)
                }))
        }) && existing.is_none();
        if final_exists {
            // The run ended and its report is out; a live one never
            // overwrites it.
            return Ok(None);
        }
        let now = self.clock.now();
        if let Some((_, old)) = &existing
            && now - old.at < interval
        {
            return Ok(None);
        }
        // A first report with no finished job would only say that the run
        // waits or runs: it waits as long as an edit would, unless a job
        // finishes sooner. A run that ends within that time gets its final
        // report alone, one comment instead of a comment and an edit (and a
        // queued run costs no jobs read).
        let first_and_young =
            existing.is_none() && run.created_at.is_none_or(|at| now - at < interval);
        if first_and_young && run.status == RunStatus::Queued {
            return Ok(None);
        }
        let report = self.live_report(rec, idx, run).await?;
        let any_done = report
            .live
            .as_ref()
            .is_some_and(|l| l.groups.iter().any(|g| g.done > 0));
        if first_and_young && !any_done {
            return Ok(None);
        }
        let rendered = self.render_live(&report)?;
        if let Some((comment, old)) = &existing {
            let mut same = old.clone();
            same.at = report.at;
            if same == report || comment.body == rendered.body {
                return Ok(None);
            }
        }
        let title = run.title.clone();
        let proof = match self.prove(rec, Scope::Run(run.id, &title)).await? {
            Ok(p) => p,
            Err(p) => return Ok(Some(p)),
        };
        match existing.map(|(c, _)| c.id) {
            Some(id) => {
                self.intend(rec, Intent::EditLiveReport(key.to_string()))
                    .await?;
                self.edit_own_comment(rec, &proof, number, id, &rendered.body)
                    .await?;
            }
            None => {
                self.intend(rec, Intent::CommentLiveReport(key.to_string()))
                    .await?;
                let written = self
                    .forge
                    .create_comment(&proof, number, &rendered.body)
                    .await?;
                Self::remember_comment(rec, written);
            }
        }
        // The copy of the comments is only as good as the record saved.
        if rec.own_comments.is_some() {
            self.save(rec).await?;
        }
        Ok(None)
    }

    /// The live report of a run Klaud cancelled because its candidate
    /// ended (a sibling variant validated first, a maintainer released it),
    /// edited once to say so: a closed PR must not keep saying "running".
    /// Returns `Some(progress)` only when an ownership check ended the
    /// candidate.
    pub(super) async fn end_live_report(
        &self,
        rec: &mut CandidateRecord,
        run: &Run,
    ) -> Result<Option<Progress>, EngineError> {
        let (Some(number), Some(idx)) = (
            rec.pull,
            rec.attempts
                .iter()
                .position(|a| a.run.as_ref().is_some_and(|r| r.id == run.id)),
        ) else {
            return Ok(None);
        };
        let key = MarkerKey::Report {
            owner_run: rec.owner_run,
            candidate: Self::candidate_id(rec)?,
            name: ReportName::Run {
                id: run.id,
                attempt: run.attempt,
            },
            part: None,
        };
        let comments = self.report_comments(rec, number).await?;
        let Some((comment, _)) = self.live_comment(&comments, &key) else {
            return Ok(None);
        };
        let comment_id = comment.id;
        let old_body = comment.body.clone();
        let mut report = self.live_report(rec, idx, run).await?;
        report.status = AttemptStatus::Cancelled;
        report.live = None;
        report.detail = Some(crate::report::format::STOPPED_DETAIL.to_owned());
        let rendered = self.render_live(&report)?;
        if rendered.body == old_body {
            return Ok(None);
        }
        let title = run.title.clone();
        let proof = match self.prove(rec, Scope::Run(run.id, &title)).await? {
            Ok(p) => p,
            Err(p) => return Ok(Some(p)),
        };
        self.intend(rec, Intent::EditLiveReport(key.to_string()))
            .await?;
        self.edit_own_comment(rec, &proof, number, comment_id, &rendered.body)
            .await?;
        if rec.own_comments.is_some() {
            self.save(rec).await?;
        }
        Ok(None)
    }

    /// A live report holds what the run shows now: the job groups, the rows
    /// of the benchmark jobs that uploaded their artifact (InferenceX
    /// uploads `bmk_*` per job), and the jobs that failed so far. Eval
    /// scores come from the run-level `eval_results_all` artifact, which is
    /// written when the run ends; until then the status line says how the
    /// eval jobs stand.
    pub(super) async fn live_report(
        &self,
        rec: &mut CandidateRecord,
        idx: usize,
        run: &Run,
    ) -> Result<AttemptReport, EngineError> {
        let jobs = self.forge.list_jobs(run.id).await?;
        let live = LiveJobs::of(&jobs);
        // A run none of whose jobs finished has uploaded no results yet:
        // listing its artifacts would be a charged request for nothing.
        let any_finished = jobs
            .iter()
            .any(|j| j.status.as_ref().is_some_and(RunStatus::is_completed));
        let (rows, evals, notes) = if any_finished {
            let (rows, evals, notes, _) = self.collect(run.id).await?;
            (rows, evals, notes)
        } else {
            (Vec::new(), Vec::new(), Vec::new())
        };
        let frozen = self.frozen(rec).await?;
        let status = if run.status == RunStatus::Queued {
            AttemptStatus::Queued
        } else {
            AttemptStatus::Running
        };
        let shown = Shown {
            kind: rec.attempts[idx].kind,
            status,
            infra: false,
            run: RunRef {
                id: run.id,
                attempt: run.attempt,
                url: run.html_url.clone(),
            },
            head: rec.attempts[idx].head.clone(),
            rows,
            evals,
            notes,
            missing: NOT_FINISHED,
            failed_jobs: failed_of(jobs),
            live: Some(live),
            // The run's final report says what the repair before it changed.
            repair: None,
        };
        Ok(attempt_report(self, rec, run, &frozen, shown))
    }

    /// One comment: a live report too large for one comment keeps its
    /// first part only (the final report is split as usual).
    pub(super) fn render_live(
        &self,
        report: &AttemptReport,
    ) -> Result<RenderedComment, EngineError> {
        render_report(report)
            .map_err(|e| EngineError::Invalid(e.to_string()))?
            .into_iter()
            .next()
            .ok_or_else(|| EngineError::Invalid("a live report rendered to nothing".into()))
    }
}
