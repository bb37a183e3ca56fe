//! `/klaud stop`: Klaud hands the PR off: it stops changing the PR and its
//! branch and releases its claim; the PR stays open for people.
//!
//! - Parsing: the verb; the rest of the line is the reason written into the
//!   receipt (mentions broken).
//! - Permission: write, maintain or admin, like every verb. This is the one
//!   reader of `stop` for candidates, experiments and regression hunts
//!   alike: a hunt reaches it only as the candidate's hand-off (and ends
//!   with the narrowest range), and a failed permission lookup is refused
//!   with a reply, never read as a vanished PR.
//! - Effect: the candidate ends as `handoff` with only its claim released
//!   ([`end_by_maintainer`], shared with `/klaud release`).
//! - Tests: `tests/maintainer_commands.rs`:
//!   `maintainer_stop_ends_the_candidate_as_handoff_with_one_reply`,
//!   `failed_permission_lookup_refuses`,
//!   `the_wave_honours_stop_and_answers_once_across_two_waves`,
//!   `stop_on_a_pr_finished_before_the_cooldown_says_it_already_finished`;
//!   `tests/regression_hunt.rs`: `a_maintainers_stop_ends_the_hunt_mid_way`,
//!   `a_stop_whose_permission_lookup_fails_mid_hunt_is_refused_and_the_hunt_goes_on`.

use crate::commands::{Command, CommandError};
use crate::engine::{CandidateRecord, Engine, Step};
use crate::model::Outcome;

/// Carries out `/klaud stop` by `user`; `why` is `": <reason>"` or empty.
pub(super) async fn run(
    engine: &Engine<'_>,
    rec: &mut CandidateRecord,
    user: &str,
    why: &str,
) -> Result<String, CommandError> {
    if let Some(done) = already_finished(rec, &Command::Stop) {
        return Ok(done);
    }
    let message = format!("stopped by maintainer {user} (/klaud stop){why}");
    end_by_maintainer(engine, rec, message, true).await?;
    Ok(format!(
        "Stopped: Klaud no longer changes this PR or its branch; the claim is {}.",
        if rec.step == Step::Done {
            "released"
        } else {
            "being released"
        }
    ))
}

/// The reply to `command` on a candidate that already finished; `None`
/// while it runs.
pub(super) fn already_finished(rec: &CandidateRecord, command: &Command) -> Option<String> {
    if rec.step != Step::Done {
        return None;
    }
    let outcome = rec
        .ending
        .as_ref()
        .map_or_else(|| "done".to_owned(), |e| e.outcome.to_string());
    Some(format!(
        "Nothing to {}: candidate {} already finished ({outcome}).",
        command.verb(),
        rec.candidate
    ))
}

/// Ends `rec` as a maintainer's hand-off with `message` in its receipt and
/// drives it to its end: `claim_only` (stop) releases only the claim; else
/// (release) the usual cleanup runs.
pub(super) async fn end_by_maintainer(
    engine: &Engine<'_>,
    rec: &mut CandidateRecord,
    message: String,
    claim_only: bool,
) -> Result<(), CommandError> {
    engine
        .end_now(rec, Outcome::Handoff, message, claim_only)
        .await?;
    engine.drive(rec, 64).await?;
    Ok(())
}
