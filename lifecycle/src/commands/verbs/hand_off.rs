//! What `/klaud stop` and `/klaud release` share: a candidate that already
//! finished is told so, and one that runs ends as a maintainer's hand-off
//! (`handoff`) with who and why in its receipt, then is driven to its end.
//! The two differ only in what is cleaned up and in their words.

use crate::commands::{Command, CommandError};
use crate::engine::{CandidateRecord, Engine, Step};
use crate::model::Outcome;

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
