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
use crate::engine::forge::Forge as _;
use crate::engine::journal::CandidateRecord;
use crate::experiment::{FINAL_FIELD, Sibling, VariantInfo, WINNER_FIELD};
use crate::model::Outcome;
use klaud_claims::ClaimRecord;
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
    /// variant is the winner (so the others stop), recorded in the claim
    /// unless its final sweep slot says so already; another end gives up
    /// the final sweep slot if it held it.
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
        let holds_final = held.record.extra.get(FINAL_FIELD).and_then(Value::as_str)
            == Some(rec.candidate.as_str());
        // The final sweep's slot already names this variant, and with its
        // own validated end that makes it the winner (`claim_winner`): a
        // second claim commit would only repeat it.
        if validated && !holds_final {
            self.mark_claim(rec, WINNER_FIELD, Some(rec.candidate.clone().as_str()))
                .await?;
        } else if !validated && holds_final {
            self.mark_claim(rec, FINAL_FIELD, None).await?;
        }
        Ok(())
    }

    /// The variant of `info` that won, by the shared claim `record`: the
    /// one its winner field names, or the one its final sweep slot names
    /// once that variant ended validated (only the slot's holder can run
    /// the final sweep that validates, and it keeps the slot when it
    /// wins). That end is read from the sibling's journal record, or,
    /// without one (a lost journal), from the receipt on its pull request.
    pub(in crate::engine) async fn claim_winner(
        &self,
        info: &VariantInfo,
        record: &ClaimRecord,
        siblings: &[(Sibling, Option<CandidateRecord>)],
    ) -> Result<Option<String>, EngineError> {
        if let Some(w) = record.extra.get(WINNER_FIELD).and_then(Value::as_str) {
            return Ok(Some(w.to_owned()));
        }
        let Some(last) = record.extra.get(FINAL_FIELD).and_then(Value::as_str) else {
            return Ok(None);
        };
        let Some(sibling) = info.siblings.iter().find(|s| s.candidate == last) else {
            return Ok(None);
        };
        let known = siblings
            .iter()
            .find(|(s, _)| s.candidate == last)
            .and_then(|(_, r)| r.as_ref());
        let won = match known {
            // A record rebuilt from the receipt is a hands-off end, and
            // still the winner's.
            Some(r) => r
                .ending
                .as_ref()
                .is_some_and(|e| e.outcome == Outcome::Validated),
            None => self.receipt_validated(sibling).await?,
        };
        Ok(won.then(|| last.to_owned()))
    }

    /// Whether `sibling`'s pull request carries Klaud's receipt saying it
    /// validated.
    async fn receipt_validated(&self, sibling: &Sibling) -> Result<bool, EngineError> {
        let branch = crate::engine::target::branch_name(sibling.candidate.as_str());
        let Some(pull) = self.forge.find_pull(&branch).await? else {
            return Ok(false);
        };
        Ok(self
            .bot_receipt(pull.number, sibling.candidate.as_str())
            .await?
            .is_some_and(|r| r.result.outcome() == Outcome::Validated))
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
