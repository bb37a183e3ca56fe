//! `/klaud release`: Klaud cleans the candidate up (its runs cancelled,
//! the PR closed, the branch deleted) and releases its claim.
//!
//! - Parsing: the verb; the rest of the line is the reason written into the
//!   receipt (mentions broken).
//! - Permission: write, maintain or admin, like every verb.
//! - Effect: the candidate ends as `handoff` with the usual cleanup
//!   ([`super::stop::hand_off`], shared with `/klaud stop`).
//! - Tests: `tests/maintainer_commands.rs`:
//!   `release_cleans_up_and_the_receipt_names_who_and_why`,
//!   `release_on_a_pr_finished_before_the_cooldown_says_it_already_finished`.

use super::stop::HandOff;
use crate::commands::Command;

/// How `/klaud release` ends a candidate: the usual cleanup, then the
/// claim released.
pub(super) const RELEASE: HandOff = HandOff {
    command: Command::Release,
    receipt: "released",
    claim_only: false,
    reply: |released| {
        format!(
            "Released: the candidate is cleaned up and its claim {}.",
            if released {
                "released"
            } else {
                "is being released"
            }
        )
    },
};
