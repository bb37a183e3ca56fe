//! `/klaud release`: Klaud cleans the candidate up (its runs cancelled,
//! the PR closed, the branch deleted) and releases its claim.
//!
//! - Parsing: the verb; the rest of the line is the reason written into the
//!   receipt (mentions broken).
//! - Permission: write, maintain or admin, like every verb.
//! - Effect: the candidate ends as `handoff` with the usual cleanup
//!   ([`super::stop::end_by_maintainer`]).
//! - Tests: `tests/maintainer_commands.rs`:
//!   `release_cleans_up_and_the_receipt_names_who_and_why`,
//!   `release_on_a_pr_finished_before_the_cooldown_says_it_already_finished`.

use super::stop::{already_finished, end_by_maintainer};
use crate::commands::{Command, CommandError};
use crate::engine::{CandidateRecord, Engine, Step};

/// Carries out `/klaud release` by `user`; `why` is `": <reason>"` or
/// empty.
pub(super) async fn run(
    engine: &Engine<'_>,
    rec: &mut CandidateRecord,
    user: &str,
    why: &str,
) -> Result<String, CommandError> {
    if let Some(done) = already_finished(rec, &Command::Release) {
        return Ok(done);
    }
    let message = format!("released by maintainer {user} (/klaud release){why}");
    end_by_maintainer(engine, rec, message, false).await?;
    Ok(format!(
        "Released: the candidate is cleaned up and its claim {}.",
        if rec.step == Step::Done {
            "released"
        } else {
            "is being released"
        }
    ))
}
