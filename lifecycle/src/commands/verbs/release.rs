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
use super::{CommandHelp, Needs};
use crate::commands::{Command, CommandError};
use crate::engine::{CandidateRecord, Engine, Step};

/// Its line in the table.
pub(super) const HELP: CommandHelp = CommandHelp {
    command: Command::Release,
    usage: "/klaud release",
    en: "clean up the candidate (its runs cancelled, the PR closed) and release its claim",
    zh: "清理该候选（取消其运行并关闭 PR），并释放认领",
    needs: Needs::Write,
};

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
