//! Step 6 of 6 of an experiment's race, the repair hook's proposal: when
//! the hook proposes variants instead of a repair, they join the
//! experiment (as a `/klaud try` would), and the candidate waits for their
//! race, ending `failed` when every proposed variant finished without a
//! win.
//!
//! In the repair step, instead of repair `n`. Reads the claim's siblings
//! and their records. May write: the shared claim record (through
//! `grow`), the candidate's own record.

use crate::engine::context::Engine;
use crate::engine::context::Progress;
use crate::engine::error::EngineError;
use crate::engine::forge::Forge as _;
use crate::engine::intent::Intent;
use crate::engine::journal::{CandidateRecord, Step};
use crate::engine::repair_hook::RepairContext;
use crate::experiment::{FINAL_FIELD, Proposal, Sibling};
use crate::model::{Outcome, Phase};
use serde_json::Value;

impl Engine<'_> {
    /// In the repair step: when the claim lists variants the repair hook
    /// proposed instead of repair `n`, the candidate waits for their race
    /// (`Some(progress)`). A sibling's win ends it `duplicate` (the gate);
    /// when every proposed variant finished without a win, it ends
    /// `failed`. `None`: no proposal answers repair `n`.
    // Kept whole (about 80 lines): the race's endings (a sibling's win, all
    // finished without one, still running) are read from one claim listing.
    pub(in crate::engine) async fn proposal_wait(
        &self,
        rec: &mut CandidateRecord,
        n: u32,
        phase: Phase,
    ) -> Result<Option<Progress>, EngineError> {
        // A plain candidate is one only after a proposal was (perhaps)
        // listed: its intent says so; the others need no claim read.
        let proposed = match &rec.intent {
            Some(Intent::ProposeVariants { repair, .. }) => *repair == n,
            Some(Intent::ClaimAddVariants(_)) => true,
            _ => false,
        };
        if rec.claim.is_none() || (rec.variant.is_none() && !proposed) {
            return Ok(None);
        }
        // A crash may have come between the listing and the record's save:
        // what counts is the claim on GitHub.
        let Some(held) = self.refresh_claim(rec).await? else {
            return Ok(None);
        };
        let Some(info) = rec.variant.clone() else {
            return Ok(None);
        };
        let proposed: Vec<Sibling> = info
            .siblings
            .iter()
            .filter(|s| {
                s.proposed
                    .as_ref()
                    .is_some_and(|p| p.answers(&rec.candidate, n))
            })
            .cloned()
            .collect();
        if proposed.is_empty() {
            return Ok(None);
        }
        if let Some(p) = self.experiment_gate(rec).await? {
            return Ok(Some(p));
        }
        // A failed final sweep held the slot: give it to the proposals.
        if held.record.extra.get(FINAL_FIELD).and_then(Value::as_str)
            == Some(rec.candidate.as_str())
        {
            self.mark_claim(rec, FINAL_FIELD, None).await?;
        }
        let names = proposed
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        for s in &proposed {
            let r = self.journal.load(s.candidate.as_str()).await?;
            // Not started yet is not finished: a listed variant is always
            // started (its record, or a rebuild from the claim).
            let finished = match &r {
                Some(r) => r.step == Step::Done,
                None => {
                    self.forge
                        .find_pull(&crate::engine::target::branch_name(s.candidate.as_str()))
                        .await?
                        .is_some()
                        && self.sibling_finished(s, None).await?
                }
            };
            let validated = r
                .as_ref()
                .and_then(|r| r.ending.as_ref())
                .is_some_and(|e| e.outcome == Outcome::Validated);
            if !finished || validated {
                return Ok(Some(Progress::Waiting(format!(
                    "the repair hook proposed Variant {names} instead of repair {n}; \
                     waiting for their race"
                ))));
            }
        }
        let m = format!(
            "the repair hook proposed Variant {names} instead of repair {n}, \
             and none of them validated"
        );
        Ok(Some(self.end(rec, Outcome::Failed, phase, m, false).await?))
    }

    /// The repair hook proposed variants instead of repair `context.repair`:
    /// each, checked like a maintainer's `/klaud try`, joins the
    /// experiment under the claim (all or none), and the candidate waits
    /// for their race. A refusal ends the candidate `failed` naming why.
    pub(in crate::engine) async fn propose_variants(
        &self,
        rec: &mut CandidateRecord,
        context: &RepairContext,
        phase: Phase,
        requests: &[crate::engine::TryRequest],
    ) -> Result<Progress, EngineError> {
        let n = context.repair;
        if let Some(tip) = self.branch_tip(&rec.branch).await?
            && tip.sha != context.head
        {
            let m = format!(
                "the repair hook both pushed to {} and proposed variants on repair {n}; \
                 it must do one or the other",
                rec.branch
            );
            return self.end(rec, Outcome::Failed, phase, m, false).await;
        }
        if requests.is_empty() {
            let m = format!("the repair hook proposed no variants on repair {n}");
            return self.end(rec, Outcome::Failed, phase, m, false).await;
        }
        // Build on what the claim lists now (another proposal, a try).
        self.refresh_claim(rec).await?;
        let proposal = Proposal {
            by: rec.candidate.clone(),
            variant: rec
                .variant
                .as_ref()
                .map_or_else(|| "base".to_owned(), |v| v.name.clone()),
            repair: n,
            attempt: rec
                .attempts
                .last()
                .map_or_else(|| "attempt".to_owned(), |a| a.kind.title()),
            run: context.run.as_ref().map(crate::model::RunRef::attempt_url),
        };
        self.intend(
            rec,
            Intent::ProposeVariants {
                repair: n,
                names: requests.iter().map(|r| r.name.clone()).collect(),
            },
        )
        .await?;
        let names = requests
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        match self.add_variants(rec, requests, Some(&proposal)).await? {
            Ok(targets) => {
                for t in &targets {
                    self.open_record(t).await?;
                }
                Ok(Progress::Waiting(format!(
                    "the repair hook proposed Variant {names} instead of repair {n}; \
                     waiting for their race"
                )))
            }
            Err(why) => {
                let m = format!(
                    "the repair hook's variants for repair {n} were refused (none was added): {why}"
                );
                self.end(rec, Outcome::Failed, phase, m, false).await
            }
        }
    }
}
