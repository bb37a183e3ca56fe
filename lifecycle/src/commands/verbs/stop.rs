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
//!   ([`hand_off`], which `/klaud release` shares: a candidate that already
//!   finished is told so, one that runs ends as a maintainer's hand-off
//!   with who and why in its receipt, then is driven to its end; the two
//!   differ only in what is cleaned up and in their words).
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

/// How `/klaud stop` ends a candidate: only its claim is released.
pub(super) const STOP: HandOff = HandOff {
    command: Command::Stop,
    receipt: "stopped",
    claim_only: true,
    reply: |released| {
        format!(
            "Stopped: Klaud no longer changes this PR or its branch; the claim is {}.",
            if released {
                "released"
            } else {
                "being released"
            }
        )
    },
};

/// One way a maintainer's command ends a candidate.
pub(super) struct HandOff {
    /// The command.
    pub command: Command,
    /// What the receipt says was done: `stopped`, `released`.
    pub receipt: &'static str,
    /// Only the claim is released (stop); else the usual cleanup runs
    /// (release).
    pub claim_only: bool,
    /// The reply, given whether the claim is released by now.
    pub reply: fn(released: bool) -> String,
}

/// Carries out `how` by `user` on `rec`; `why` is `": <reason>"` or empty.
pub(super) async fn hand_off(
    engine: &Engine<'_>,
    rec: &mut CandidateRecord,
    how: &HandOff,
    user: &str,
    why: &str,
) -> Result<String, CommandError> {
    if let Some(done) = already_finished(rec, &how.command) {
        return Ok(done);
    }
    let message = format!(
        "{} by maintainer {user} (/klaud {}){why}",
        how.receipt,
        how.command.verb()
    );
    engine
        .end_now(rec, Outcome::Handoff, message, how.claim_only)
        .await?;
    engine.drive(rec, 64).await?;
    Ok((how.reply)(rec.step == Step::Done))
}

/// The reply to `command` on a candidate that already finished; `None`
/// while it runs.
fn already_finished(rec: &CandidateRecord, command: &Command) -> Option<String> {
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
