//! The engine's side of [`crate::measured`]: whether a finished smoke or
//! final sweep measured the PR's image, what in the base checkout chose
//! the container when it did not, and the end that follows; and the
//! launcher check the readiness gate asks before a claim.

use klaud_planner::launcher_pin::{block_reason, launcher_pin, launchers_of};

use crate::artifacts::BenchmarkRow;
use crate::engine::context::Engine;
use crate::engine::journal::{CandidateRecord, Ending, Step};
use crate::measured::{ChosenBy, MeasuredMismatch, check};
use crate::model::{Outcome, Phase};

/// External recipes named in a note at most.
const MAX_RECIPES_NAMED: usize = 3;

impl Engine<'_> {
    /// The mismatch between the image `rows` record and the PR's image,
    /// with what chose the container where Klaud can see it; `None` when
    /// every row records the PR's image (or there are no rows).
    pub(super) fn measured_mismatch(
        &self,
        rec: &CandidateRecord,
        rows: &[BenchmarkRow],
    ) -> Option<MeasuredMismatch> {
        let mut mismatch = check(&rec.family, &rec.image, rows, Vec::new())?;
        mismatch.chosen_by = self.chosen_by(&rec.family);
        Some(mismatch)
    }

    /// What can choose the container of `family`'s runs: a launcher line
    /// that pins it, else the external recipes (which may name their
    /// own), else the launchers the runs use.
    fn chosen_by(&self, family: &str) -> Vec<ChosenBy> {
        let Ok(f) = self.family(family) else {
            return Vec::new();
        };
        if let Ok(Some(pin)) = launcher_pin(self.repository, f) {
            return vec![ChosenBy::LauncherPin {
                at: format!("{}:{}", pin.launcher, pin.line),
                sets: format!("{}={}", pin.variable, pin.value),
            }];
        }
        let external: Vec<ChosenBy> = f
            .recipes
            .iter()
            .filter(|r| !r.in_repository)
            .take(MAX_RECIPES_NAMED)
            .map(|r| ChosenBy::ExternalRecipe(r.path.clone()))
            .collect();
        if !external.is_empty() {
            return external;
        }
        launchers_of(self.repository, f)
            .into_iter()
            .map(ChosenBy::Launcher)
            .collect()
    }

    /// Why `family` must not be claimed because its launcher runs a fixed
    /// container whatever the master's image (the reason code first).
    /// A launcher that cannot be read blocks nothing: Klaud cannot tell,
    /// and the measured image is still checked after each run.
    pub(super) fn launcher_gap(&self, family: &str) -> Option<String> {
        let f = self.family(family).ok()?;
        match launcher_pin(self.repository, f) {
            Ok(Some(pin)) => Some(block_reason(&pin, f)),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(family, error = %e, "launcher not analysed");
                None
            }
        }
    }
}

/// Ends `rec` `failed` in `phase` because its run measured another image:
/// set in the same save as the attempt's report, so neither the retry
/// rule nor the repair hook ever sees the attempt.
pub(super) fn end_measured(rec: &mut CandidateRecord, phase: Phase, mismatch: &MeasuredMismatch) {
    rec.ending = Some(Ending {
        outcome: Outcome::Failed,
        phase,
        message: mismatch.notes().join(" "),
        hands_off: false,
        note: Some(mismatch.receipt_note()),
        declined: None,
    });
    rec.step = Step::Finish;
}
