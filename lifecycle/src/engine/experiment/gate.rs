//! Step 2 of 6 of an experiment's race, the gate: before each step of a
//! running variant, stop when a sibling won, wait for a slot under the
//! concurrency bound (a variant parked for proposed variants takes none),
//! and write the siblings section of the body when the variant's own row
//! changed (`section`).
//!
//! After the claim is adopted, before every step the drive runs for a
//! variant. Reads the siblings' records, their PRs and receipts, the
//! claim's winner. May write: the experiments section of the PR body
//! (`section`), under a proof.

use crate::engine::context::Engine;
use crate::engine::context::Progress;
use crate::engine::error::EngineError;
use crate::engine::forge::Forge as _;
use crate::engine::journal::{CandidateRecord, Step};
use crate::experiment::{Sibling, VariantInfo};
use crate::model::Outcome;
use crate::report::{MarkerKey, find_record};

impl Engine<'_> {
    /// Before each step of a running variant: stop when a sibling won,
    /// wait for a slot under the concurrency bound, and write the siblings
    /// section of the body when the variant's own row changed.
    /// `Some(progress)`: return it.
    pub(in crate::engine) async fn experiment_gate(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<Option<Progress>, EngineError> {
        let Some(info) = rec.variant.clone() else {
            return Ok(None);
        };
        let Some(held) = self.refresh_claim(rec).await? else {
            // Not ours (any more): the ownership check says so and ends it.
            return Ok(None);
        };
        let siblings = self.sibling_records(&info).await?;
        if let Some(winner) = self
            .claim_winner(&info, &held.record, &siblings)
            .await?
            .filter(|w| *w != rec.candidate)
        {
            let m = self.winner_message(&info, &siblings, &winner).await?;
            // Rebuilt without a journal, the record may not know its own
            // branch and PR yet: the stop must close what exists.
            if matches!(rec.step, Step::Prepare | Step::Open) {
                self.adopt_existing(rec).await?;
            }
            self.end_now(rec, Outcome::Duplicate, m, false).await?;
            return Ok(Some(Progress::Advanced(Step::Finish)));
        }
        if rec.step == Step::Prepare
            && rec.head.is_none()
            && rec.pending_commit.is_none()
            && info.max_concurrent > 0
        {
            let running: Vec<&str> = siblings
                .iter()
                .filter(|(s, r)| {
                    s.candidate != rec.candidate
                        && r.as_ref().is_some_and(|r| {
                            !matches!(r.step, Step::Claim | Step::Done)
                                && (r.step != Step::Prepare
                                    || r.head.is_some()
                                    || r.pending_commit.is_some())
                                && !Self::parked(&info, r)
                        })
                })
                .map(|(s, _)| s.name.as_str())
                .collect();
            if running.len() >= info.max_concurrent as usize
                && self.branch_tip(&rec.branch).await?.is_none()
            {
                return Ok(Some(Progress::Waiting(format!(
                    "{} of experiment {}'s variants run already ({}); at most {} at once",
                    running.len(),
                    info.experiment,
                    running.join(", "),
                    info.max_concurrent
                ))));
            }
        }
        if let Some(number) = rec.pull
            && matches!(
                rec.step,
                Step::Smoke | Step::Repair | Step::Final | Step::Sweep
            )
        {
            let pull = self.forge.get_pull(number).await?;
            if Self::own_row_current(&info, rec, &pull.body) {
                return Ok(None);
            }
            return self
                .rewrite_experiments_section(rec, &info, siblings, number, &pull.body)
                .await;
        }
        Ok(None)
    }

    /// Whether `r` waits for the variants the repair hook proposed instead
    /// of its next repair (it runs nothing, so takes no slot).
    pub(in crate::engine) fn parked(info: &VariantInfo, r: &CandidateRecord) -> bool {
        r.step == Step::Repair
            && info.siblings.iter().any(|s| {
                s.proposed
                    .as_ref()
                    .is_some_and(|p| p.answers(&r.candidate, r.repairs + 1))
            })
    }

    /// Each sibling with its journal record, in experiment order.
    pub(in crate::engine) async fn sibling_records(
        &self,
        info: &VariantInfo,
    ) -> Result<Vec<(Sibling, Option<CandidateRecord>)>, EngineError> {
        let mut out = Vec::new();
        for s in &info.siblings {
            out.push((s.clone(), self.journal.load(s.candidate.as_str()).await?));
        }
        Ok(out)
    }

    /// Whether a sibling has finished: its record is done, or (no record)
    /// its PR carries its receipt, or it never got a branch or PR.
    pub(in crate::engine) async fn sibling_finished(
        &self,
        sibling: &Sibling,
        rec: Option<&CandidateRecord>,
    ) -> Result<bool, EngineError> {
        if let Some(r) = rec {
            return Ok(r.step == Step::Done);
        }
        let branch = crate::engine::target::branch_name(sibling.candidate.as_str());
        let Some(pull) = self.forge.find_pull(&branch).await? else {
            return Ok(self.branch_tip(&branch).await?.is_none());
        };
        let comments = self.forge.list_comments(pull.number).await?;
        Ok(comments.iter().any(|c| {
            self.by_bot(c.author.as_deref())
                && find_record(&c.body).ok().flatten().is_some_and(|f| {
                    matches!(&f.key, MarkerKey::Outcome { candidate, .. }
                        if candidate.as_str() == sibling.candidate)
                })
        }))
    }

    /// The stop message of a variant whose sibling `winner` validated,
    /// linking the winner's PR.
    pub(in crate::engine) async fn winner_message(
        &self,
        info: &VariantInfo,
        siblings: &[(Sibling, Option<CandidateRecord>)],
        winner: &str,
    ) -> Result<String, EngineError> {
        let (name, link) = siblings
            .iter()
            .find(|(s, _)| s.candidate == winner)
            .map(|(s, r)| {
                let url = r.as_ref().and_then(|r| r.pull_url.clone());
                (s.name.clone(), url)
            })
            .unwrap_or_else(|| (winner.to_owned(), None));
        let link = match link {
            Some(url) => url,
            None => self
                .forge
                .find_pull(&crate::engine::target::branch_name(winner))
                .await?
                .map(|p| p.html_url)
                .unwrap_or_else(|| crate::engine::target::branch_name(winner)),
        };
        Ok(format!(
            "Variant {name} of experiment {} validated first: {link}",
            info.experiment
        ))
    }

    /// For a variant rebuilt without its journal in the middle of its
    /// cleanup: when a sibling is the claim's winner, the stop message
    /// (the cleanup was the stop, its end is `duplicate`); `None` when no
    /// sibling won (the reports decide the end).
    pub(in crate::engine) async fn stopped_by_winner(
        &self,
        rec: &CandidateRecord,
    ) -> Result<Option<String>, EngineError> {
        let Some(info) = rec.variant.clone() else {
            return Ok(None);
        };
        let family = Self::candidate_id(rec)?.family();
        let Some(entry) = self
            .book()
            .inspect(&family)
            .await
            .map_err(|e| EngineError::Claim(e.to_string()))?
        else {
            return Ok(None);
        };
        let Ok(record) = entry.record else {
            return Ok(None);
        };
        let siblings = self.sibling_records(&info).await?;
        let Some(winner) = self.claim_winner(&info, &record, &siblings).await? else {
            return Ok(None);
        };
        if winner == rec.candidate || !info.siblings.iter().any(|s| s.candidate == winner) {
            return Ok(None);
        }
        Ok(Some(self.winner_message(&info, &siblings, &winner).await?))
    }
}
