//! `/klaud status`: reply with the candidate's state.
//!
//! - Parsing: the verb alone; an argument is ignored.
//! - Permission: write, maintain or admin, like every verb.
//! - Effect: none; the reply is [`status_text`], and on a finished PR it
//!   says what a maintainer can do next.
//! - Tests: below; `tests/maintainer_commands.rs`:
//!   `status_on_a_pr_finished_before_the_cooldown_says_how_it_ended_and_what_next`.

use klaud_render::escape::{code, link, text};

use crate::engine::{CandidateRecord, Step};
use crate::model::Outcome;

/// The text of a `/klaud status` answer.
pub fn status_text(rec: &CandidateRecord) -> String {
    let state = match (&rec.ending, rec.step) {
        (Some(e), Step::Done) => format!("finished: **{}** ({})", e.outcome, text(&e.message)),
        (Some(e), step) => format!("ending as {} (step {})", e.outcome, step.as_str()),
        (None, step) => format!("in progress (step {})", step.as_str()),
    };
    let attempt = rec.attempts.last().map_or_else(
        || "none yet".to_owned(),
        |a| format!("{} · {}", a.kind.title(), a.status),
    );
    let runs: Vec<String> = rec
        .runs()
        .iter()
        .map(|r| link(&r.id.to_string(), &r.url))
        .collect();
    let mut text = format!(
        "Candidate {} · family {} · image {}\n\n- State: {state}\n- Attempt: {attempt}\n- Repairs: {}\n- Runs: {}",
        code(rec.candidate.as_str()),
        code(&rec.family),
        code(&rec.image),
        rec.repairs,
        if runs.is_empty() {
            "none".to_owned()
        } else {
            runs.join(", ")
        }
    );
    if let Some(next) = rec
        .ending
        .as_ref()
        .filter(|_| rec.step == Step::Done)
        .map(|e| what_next(e.outcome))
    {
        text.push_str("\n- Next: ");
        text.push_str(next);
    }
    text
}

/// What a maintainer can do about a candidate that ended as `outcome`: a
/// finished PR's status is asked for long after the wave that ended it.
fn what_next(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Validated => {
            "the final sweep passed; merging this PR adopts the image (Klaud keeps it mergeable). Nothing to retry."
        }
        Outcome::CapacityDeferred => {
            "nothing: a capacity deferral is planned again at the next wave."
        }
        Outcome::AlreadyUpdated | Outcome::Retired | Outcome::Duplicate => {
            "nothing to do here: the family needs no bump from this PR."
        }
        _ => {
            "`/klaud retry` lifts the family's cooldown, so the next wave plans it again when it has a candidate image (this image is not tried again)."
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finished_candidate_says_what_can_be_done_next() {
        assert!(what_next(Outcome::Validated).contains("Nothing to retry"));
        assert!(what_next(Outcome::Failed).contains("/klaud retry"));
        assert!(what_next(Outcome::CapacityDeferred).contains("next wave"));
    }
}
