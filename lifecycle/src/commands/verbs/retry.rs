//! `/klaud retry`: a finished, unsuccessful candidate's family leaves its
//! cooldown, so the next wave plans it again.
//!
//! - Parsing: the verb; the rest of the line is the reason kept with the
//!   request. The old helper's hidden retry-release marker counts as this
//!   verb (see [`crate::commands::find_retry_release`]).
//! - Permission: write, maintain or admin, like every verb. The dashboard
//!   issue's retry box asks the same way ([`request_retry`]), under the
//!   issue's own permission rule.
//! - Effect: a retry request in the journal ([`request_retry`]); on a
//!   validated PR a person pushed to, the final sweep again at its head
//!   ([`resweep`]).
//! - Tests: below; `tests/maintainer_commands.rs`:
//!   `retry_is_refused_while_running_and_lifts_the_cooldown_once_finished`,
//!   `retry_on_a_pr_finished_before_the_cooldown_is_recorded`,
//!   `the_old_helpers_retry_release_marker_from_a_writer_is_honoured_like_retry`;
//!   `tests/dashboard_issue.rs`: `a_ticked_retry_lifts_the_cooldown_of_a_failed_family`.

use klaud_claims::{CandidateId, Clock};

use crate::BoxFuture;
use crate::commands::{CommandError, Refusal, Retries};
use crate::engine::{CandidateRecord, Engine, Journal, JournalError, RetryRequest, Step};
use crate::model::Outcome;

/// Carries out `/klaud retry` by `user`; the reply.
pub(super) async fn run(
    retries: Option<Retries<'_>>,
    rec: &CandidateRecord,
    user: &str,
    reason: &str,
) -> Result<String, CommandError> {
    let Some(r) = retries else {
        return Ok("Cannot retry: this instance has no store to record the request.".into());
    };
    Ok(
        match request_retry(r.journal, r.clock, rec, user, reason).await? {
            Ok(text) | Err(Refusal(text)) => text,
        },
    )
}

/// Carries out `/klaud retry` on a validated PR a person pushed to: its
/// final sweep runs again at the PR's head (`engine/resweep.rs`); the
/// record to drive is added to `started`.
pub(super) async fn resweep(
    engine: &Engine<'_>,
    rec: &mut CandidateRecord,
    started: &mut Vec<crate::engine::Target>,
) -> Result<String, CommandError> {
    Ok(match engine.resweep(rec).await? {
        Ok((text, target)) => {
            started.push(target);
            text
        }
        Err(Refusal(text)) => text,
    })
}

/// The family id whose retry request concerns `rec`, when its candidate id
/// is well-formed.
pub fn retry_family(rec: &CandidateRecord) -> Option<String> {
    CandidateId::new(rec.candidate.as_str())
        .ok()
        .map(|id| id.family().as_str().to_owned())
}

/// Whether `request` (the retry request of `rec`'s family) lifts the
/// cooldown of the finished candidate `rec`: it was made after the
/// candidate ended.
pub fn retry_lifts(rec: &CandidateRecord, request: Option<&RetryRequest>) -> bool {
    request.is_some_and(|r| r.at >= rec.updated_at)
}

/// Whether a retry request in `journal` lifts the cooldown of the family of
/// the finished candidate `rec` (a request made after the candidate ended).
/// An unreadable request counts as none.
pub async fn retry_requested(journal: &dyn Journal, rec: &CandidateRecord) -> bool {
    let Some(family) = retry_family(rec) else {
        return false;
    };
    match journal.retry_request(&family).await {
        Ok(request) => retry_lifts(rec, request.as_ref()),
        Err(_) => false,
    }
}

/// `retry` (the documented choice): a finished, unsuccessful candidate's
/// family leaves its cooldown, so the next wave plans it again. A candidate
/// still in progress already retries infrastructure failures and repairs on
/// its own, and a validated one has nothing to retry; both are refused with
/// the reason. The same image is not tried again — its receipt stands — so
/// the retry takes effect when the family has a newer candidate image.
/// Returns the reply: recorded, or [`Refusal`] with why not.
pub fn request_retry<'f>(
    journal: &'f dyn Journal,
    clock: &'f dyn Clock,
    rec: &'f CandidateRecord,
    by: &'f str,
    reason: &'f str,
) -> BoxFuture<'f, Result<Result<String, Refusal>, JournalError>> {
    Box::pin(async move {
        let ending = rec.ending.as_ref().filter(|_| rec.step == Step::Done);
        let Some(ending) = ending else {
            return Ok(Err(Refusal(format!(
                "Nothing to retry: candidate {} is still in progress (step {}); infrastructure failures and repairs are retried automatically.",
                rec.candidate,
                rec.step.as_str()
            ))));
        };
        if let Some(w) = rec.upkeep.as_ref().and_then(|u| u.withdrawn.as_ref()) {
            return Ok(Err(Refusal(format!(
                "Nothing to retry: candidate {} was validated, and {}.",
                rec.candidate,
                w.line()
            ))));
        }
        if ending.outcome == Outcome::Validated {
            return Ok(Err(Refusal(format!(
                "Nothing to retry: candidate {} was validated.",
                rec.candidate
            ))));
        }
        let Ok(id) = CandidateId::new(rec.candidate.as_str()) else {
            return Ok(Err(Refusal(format!(
                "Cannot retry: {:?} is not a candidate id.",
                rec.candidate
            ))));
        };
        journal
            .record_retry_request(
                id.family().as_str(),
                &RetryRequest {
                    candidate: rec.candidate.clone(),
                    by: by.to_owned(),
                    reason: reason.to_owned(),
                    at: clock.now(),
                },
            )
            .await?;
        Ok(Ok(format!(
            "Retry recorded: family `{}` (ended {}) leaves its cooldown and is planned again at the next wave when it has a candidate image.",
            rec.family, ending.outcome
        )))
    })
}
