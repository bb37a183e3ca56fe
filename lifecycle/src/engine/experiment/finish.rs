//! Step 4 of 6 of an experiment's race, the final sweep slot and the end:
//! only one variant is in its final sweep at a time; a validated variant
//! is recorded as the winner (so the others stop), another end gives up
//! the slot; only the last sibling to finish releases the shared claim.
//!
//! In the final sweep step (before the changelog and the sweep label) and
//! in the finish step. Reads the claim and the siblings' records. May
//! write: the shared claim record's final and winner fields.

use crate::engine::context::Engine;
use crate::engine::context::Progress;
use crate::engine::error::EngineError;
use crate::engine::journal::CandidateRecord;
use crate::experiment::{FINAL_FIELD, WINNER_FIELD};
use crate::model::Outcome;
use serde_json::Value;

impl Engine<'_> {
    /// Before a variant's changelog and sweep label: only one variant is in
    /// its final sweep at a time. `Some(progress)`: wait.
    pub(in crate::engine) async fn experiment_final_slot(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<Option<Progress>, EngineError> {
        let Some(info) = rec.variant.clone() else {
            return Ok(None);
        };
        let Some(held) = self.refresh_claim(rec).await? else {
            return Ok(None);
        };
        if let Some(other) = held.record.extra.get(FINAL_FIELD).and_then(Value::as_str)
            && other != rec.candidate
        {
            let sibling = info.siblings.iter().find(|s| s.candidate == other);
            let finished = match sibling {
                Some(s) => {
                    let r = self.journal.load(s.candidate.as_str()).await?;
                    self.sibling_finished(s, r.as_ref()).await?
                }
                None => true,
            };
            if !finished {
                return Ok(Some(Progress::Waiting(format!(
                    "passed the smoke; Variant {} is in its final sweep first",
                    sibling.map_or(other, |s| s.name.as_str())
                ))));
            }
        }
        self.mark_claim(rec, FINAL_FIELD, Some(rec.candidate.clone().as_str()))
            .await?;
        Ok(None)
    }

    /// At a variant's finish, before anything is published: a validated
    /// variant is recorded as the winner (so the others stop), another end
    /// gives up the final sweep slot if it held it.
    pub(in crate::engine) async fn experiment_finish(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<(), EngineError> {
        if rec.variant.is_none() || rec.ending.as_ref().is_some_and(|e| e.hands_off) {
            return Ok(());
        }
        let Some(held) = self.refresh_claim(rec).await? else {
            return Ok(());
        };
        let validated = rec
            .ending
            .as_ref()
            .is_some_and(|e| e.outcome == Outcome::Validated);
        if validated {
            self.mark_claim(rec, WINNER_FIELD, Some(rec.candidate.clone().as_str()))
                .await?;
        } else if held.record.extra.get(FINAL_FIELD).and_then(Value::as_str)
            == Some(rec.candidate.as_str())
        {
            self.mark_claim(rec, FINAL_FIELD, None).await?;
        }
        Ok(())
    }

    /// Whether a finished variant releases the shared claim: only the last
    /// sibling to finish does (the others still need it to act).
    pub(in crate::engine) async fn experiment_releases(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<bool, EngineError> {
        if rec.variant.is_none() {
            return Ok(true);
        }
        // Release what is on GitHub now, not a tip a sibling moved on from;
        // and learn of siblings a `/klaud try` added meanwhile.
        self.refresh_claim(rec).await?;
        let Some(info) = rec.variant.clone() else {
            return Ok(true);
        };
        for (s, r) in self.sibling_records(&info).await? {
            if s.candidate != rec.candidate && !self.sibling_finished(&s, r.as_ref()).await? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}
