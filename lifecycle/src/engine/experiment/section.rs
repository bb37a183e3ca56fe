//! Step 3 of 6 of an experiment's race, the siblings section of each body:
//! the "Related experiments" section shows every sibling's record, written
//! in the same edit as the baseline freeze when it can be, again when the
//! variant's own row changes (its step, its repairs), with the siblings as
//! they stand then, and once more as a variant ends so the body it leaves
//! is not stale. A sibling's move alone does not edit the body: every edit
//! is a charged write and makes the next read of the pull request a
//! charged one too, and the siblings' own PRs say where they are.
//!
//! Beside the gate and the finish. Reads the siblings' records and the
//! variant's PR body. May write: the PR body's experiments section, after
//! the ownership check.

use crate::engine::context::Engine;
use crate::engine::context::Progress;
use crate::engine::error::EngineError;
use crate::engine::forge::Forge as _;
use crate::engine::intent::Intent;
use crate::engine::journal::{CandidateRecord, Step};
use crate::engine::proof::Scope;
use crate::engine::write::Writes as _;
use crate::experiment;
use crate::experiment::{Sibling, VariantInfo};
use crate::model::Outcome;
use klaud_claims::PullNumber;

impl Engine<'_> {
    /// `body` with the variant's "Related experiments" section showing its
    /// siblings' records and `rec` as it stands.
    pub(in crate::engine) fn splice_experiment_section(
        info: &VariantInfo,
        mut rows: Vec<(Sibling, Option<CandidateRecord>)>,
        rec: &CandidateRecord,
        body: &str,
    ) -> String {
        if let Some(row) = rows.iter_mut().find(|(s, _)| s.candidate == rec.candidate) {
            row.1 = Some(rec.clone());
        }
        experiment::splice_section(body, &experiment::render_section(info, &rows))
    }

    /// For a variant, `body` with the experiments section it will show once
    /// `rec` has moved on to `next`: the baseline freeze writes it in the
    /// same edit, so the next step has nothing to change (each edit of the
    /// body also makes the next read of the pull request a charged one).
    pub(in crate::engine) async fn with_experiment_section(
        &self,
        rec: &CandidateRecord,
        next: Step,
        body: String,
    ) -> Result<String, EngineError> {
        let Some(info) = &rec.variant else {
            return Ok(body);
        };
        let siblings = self.sibling_records(info).await?;
        let mut ahead = rec.clone();
        ahead.step = next;
        Ok(Self::splice_experiment_section(
            info, siblings, &ahead, &body,
        ))
    }

    /// Whether `current`'s experiments section already shows `rec`'s own
    /// row in the state it is in now (whatever its siblings' rows say).
    pub(in crate::engine) fn own_row_current(
        info: &VariantInfo,
        rec: &CandidateRecord,
        current: &str,
    ) -> bool {
        let Some(section) = experiment::section_of(current) else {
            return false;
        };
        let state = format!("| {} |", experiment::state_text(Some(rec)));
        let own = format!("| **{}", info.name);
        section
            .lines()
            .any(|l| l.starts_with(&own) && l.ends_with(&state))
    }

    /// Writes the experiments section of `rec`'s PR (body `current`) when
    /// it changed, after the ownership check.
    pub(super) async fn rewrite_experiments_section(
        &self,
        rec: &mut CandidateRecord,
        info: &VariantInfo,
        siblings: Vec<(Sibling, Option<CandidateRecord>)>,
        number: PullNumber,
        current: &str,
    ) -> Result<Option<Progress>, EngineError> {
        let body = Self::splice_experiment_section(info, siblings, rec, current);
        let body = self.with_footer(&body);
        if body == current {
            return Ok(None);
        }
        let proof = match self.prove(rec, Scope::Pull).await? {
            Ok(p) => p,
            Err(p) => return Ok(Some(p)),
        };
        self.intend(rec, Intent::UpdateExperimentsSection).await?;
        self.forge.update_pull_body(&proof, number, &body).await?;
        Ok(None)
    }

    /// A variant's experiments section as it ends, so the body it leaves
    /// for reviewers is not stale ("final sweep" after it ended): its own
    /// row says how it ended, and for the winner every sibling still going
    /// shows what it becomes now (each ends `duplicate` once a variant
    /// validated). Returns `Some(progress)` only when an ownership check
    /// ended the candidate.
    pub(in crate::engine) async fn final_experiment_section(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<Option<Progress>, EngineError> {
        let (Some(info), Some(number)) = (rec.variant.clone(), rec.pull) else {
            return Ok(None);
        };
        let Some(ending) = rec.ending.clone().filter(|e| !e.hands_off) else {
            return Ok(None);
        };
        let won = ending.outcome == Outcome::Validated;
        let mut siblings = self.sibling_records(&info).await?;
        for (s, r) in siblings.iter_mut() {
            if !won || s.candidate == rec.candidate {
                continue;
            }
            if let Some(r) = r.as_mut().filter(|r| r.step != Step::Done) {
                r.step = Step::Finish;
                r.ending = Some(crate::engine::journal::Ending {
                    outcome: Outcome::Duplicate,
                    phase: ending.phase,
                    message: format!("Variant {} validated first", info.name),
                    hands_off: false,
                    note: None,
                    declined: None,
                });
            }
        }
        let pull = self.forge.get_pull(number).await?;
        if !pull.state.is_open() {
            return Ok(None);
        }
        self.rewrite_experiments_section(rec, &info, siblings, number, &pull.body)
            .await
    }
}
