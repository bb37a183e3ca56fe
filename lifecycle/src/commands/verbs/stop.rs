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
//!   ([`super::hand_off`], shared with `/klaud release`).
//! - Tests: `tests/maintainer_commands.rs`:
//!   `maintainer_stop_ends_the_candidate_as_handoff_with_one_reply`,
//!   `failed_permission_lookup_refuses`,
//!   `the_wave_honours_stop_and_answers_once_across_two_waves`,
//!   `stop_on_a_pr_finished_before_the_cooldown_says_it_already_finished`;
//!   `tests/regression_hunt.rs`: `a_maintainers_stop_ends_the_hunt_mid_way`,
//!   `a_stop_whose_permission_lookup_fails_mid_hunt_is_refused_and_the_hunt_goes_on`.

use super::hand_off::HandOff;
use crate::commands::Command;

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
