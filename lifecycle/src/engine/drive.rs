//! Moving a candidate from step to step: [`Engine::step`] looks at the
//! claim, the experiment and the pull request every step needs, then hands
//! the record to the one step its `Step` names (`steps/`); [`Engine::drive`]
//! repeats that until the candidate waits or ends. A step that keeps finding
//! the candidate's things gone ends it here (`count_vanished`).

use crate::BoxFuture;
use crate::engine::context::Engine;
use crate::engine::context::Progress;
use crate::engine::error::EngineError;
use crate::engine::forge::{Forge as _, ForgeError};
use crate::engine::journal::{CandidateRecord, Step};
use crate::engine::steps;
use crate::model::Outcome;

/// Reads kept across a run of steps (see [`Engine::keep_reads`]); dropping
/// it forgets them.
#[must_use = "the reads are kept only while this is alive"]
pub struct KeptReads<'s, 'a> {
    _scope: crate::engine::step_reads::StepScope<'s, 'a>,
}

impl<'a> Engine<'a> {
    /// Keeps what the steps read until the returned guard is dropped, for a
    /// run of steps that advance one after another without waiting: a step
    /// then does not re-read, charged, what the step before it just wrote.
    /// Drop it as soon as a step waits, fails or ends (the next run's first
    /// look must read GitHub again, see `engine::step_reads`).
    pub fn keep_reads(&self) -> KeptReads<'_, 'a> {
        KeptReads {
            _scope: self.forge.scope(),
        }
    }
}

impl Engine<'_> {
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
            let _kept = self.keep_reads();
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
    pub(super) async fn count_vanished(
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

    pub(super) async fn step_once(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<Progress, EngineError> {
        // A `/klaud try` may have made this candidate a variant.
        if !matches!(rec.step, Step::Claim | Step::Done) {
            self.adopt_listed_from_held(rec).await?;
        }
        if !matches!(rec.step, Step::Claim | Step::Done)
            && let Some(p) = self.renew(rec).await?
        {
            return Ok(p);
        }
        // An experiment's variant first looks at its siblings.
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
            Step::Claim => steps::claim::run(self, rec).await?,
            Step::Prepare => steps::prepare::run(self, rec).await?,
            Step::Open => steps::open::run(self, rec).await?,
            Step::Baseline => steps::baseline::run(self, rec).await?,
            Step::Smoke => steps::smoke::run(self, rec).await?,
            Step::Repair => steps::repair::run(self, rec).await?,
            Step::Final => steps::final_sweep::run(self, rec).await?,
            Step::Sweep => steps::sweep::run(self, rec).await?,
            Step::Finish => steps::finish::run(self, rec).await?,
            Step::Done => Progress::Done(rec.ending.clone()),
        };
        Ok(progress)
    }
}
