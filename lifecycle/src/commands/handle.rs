//! Maintainer commands on Klaud's candidate PRs (see `klaud_lifecycle::commands`): find the
//! comments not answered yet, check the author's permission (fail closed),
//! carry out `/klaud retry|release|stop|status` and answer every command
//! comment with exactly one reply. The old helper's hidden
//! `<!-- klaud-retry-release:<parent>:<candidate>:<head> -->` from a writer
//! counts as `/klaud retry` when it names the PR's candidate at Klaud's
//! head; otherwise (another candidate or head, a non-writer, malformed) it
//! is ignored with a log line and no reply.
//!
//! "Answered once" rests on GitHub, not on local state: every reply starts
//! with the hidden marker `<!-- klaud-reply:<comment id> -->`, and a comment
//! whose marker is already among the PR's comments is never handled again.
//! So an empty store, a restart or two instances converge on one reply. The
//! command runs before its reply is posted; a crash in between runs it again
//! on the next pass, which is harmless because every command is idempotent
//! (ending a finished candidate changes nothing, a retry request is a put).
//!
//! Replies are the one write Klaud makes on a PR that may not be its own any
//! more (after a handoff the maintainer still gets an answer), so they need
//! no ownership proof but their own narrower [`ReplyPermit`]: a comment on
//! that one PR, granted when the bot authored it, checked before anything
//! is read from it.

use crate::BoxFuture;
use crate::engine::write::Writes as _;
use std::collections::{BTreeMap, BTreeSet};

use klaud_claims::{CandidateId, Clock};
use serde::Serialize;

use super::pace::{last_refusals, refusal_due, refusal_marker};
use super::{
    Authorization, Command, ParsedCommand, Refusal, RetryRelease, authorize, find_retry_release,
    parse_commands,
};
use crate::engine::{
    CandidateRecord, Comment, Engine, EngineError, Forge, ForgeError, Journal, JournalError,
    RetryRequest, Step, reply_permit,
};
use crate::model::Outcome;

const REPLY_PREFIX: &str = "<!-- klaud-reply:";

/// Replies posted per PR and pass. GitHub allows about 80 content-creating
/// requests a minute; a flood of command comments must not spend the
/// budget the lifecycle needs (refusals are paced further, see
/// [`super::pace`]). The rest are answered on the next pass, oldest first.
pub const MAX_REPLIES_PER_PASS: usize = 10;

/// The hidden marker of the reply to comment `id`.
pub fn reply_marker(id: u64) -> String {
    format!("{REPLY_PREFIX}{id} -->")
}

/// The comment ids a body answers (its `klaud-reply` markers).
fn answered_ids(body: &str) -> impl Iterator<Item = u64> + '_ {
    body.match_indices(REPLY_PREFIX).filter_map(|(at, _)| {
        let rest = &body[at + REPLY_PREFIX.len()..];
        let end = rest.find("-->")?;
        rest[..end].trim().parse().ok()
    })
}

/// Why commands could not be handled (transient: the next pass retries).
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// GitHub failed (comments, permit, reply).
    #[error(transparent)]
    Forge(#[from] ForgeError),
    /// The engine failed while carrying out a command.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The journal failed to keep a retry request.
    #[error(transparent)]
    Journal(#[from] JournalError),
}

/// One answered command comment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Answered {
    /// The comment.
    pub comment: u64,
    /// Its author.
    pub user: String,
    /// The verbs it carried, in order.
    pub verbs: Vec<String>,
    /// Whether the author was allowed to command Klaud.
    pub allowed: bool,
    /// Variants a `/klaud try` started: the caller opens and drives them.
    #[serde(skip)]
    pub started: Vec<crate::engine::Target>,
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

/// The text of a `/klaud status` answer.
pub fn status_text(rec: &CandidateRecord) -> String {
    let state = match (&rec.ending, rec.step) {
        (Some(e), Step::Done) => format!("finished: **{}** ({})", e.outcome, e.message),
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
        .map(|r| format!("[{}]({})", r.id, r.url))
        .collect();
    let mut text = format!(
        "Candidate `{}` · family `{}` · image `{}`\n\n- State: {state}\n- Attempt: {attempt}\n- Repairs: {}\n- Runs: {}",
        rec.candidate,
        rec.family,
        rec.image,
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

/// Where a maintainer's commands act besides the PR: the journal that
/// keeps retry requests (`None`: `/klaud retry` is answered that it cannot
/// be recorded) and the clock that stamps them.
#[derive(Clone, Copy)]
pub struct Retries<'a> {
    /// The journal that keeps them.
    pub journal: &'a dyn Journal,
    /// The time a request is stamped with.
    pub clock: &'a dyn Clock,
}

/// Handles the unanswered maintainer commands on `rec`'s PR: each command
/// comment gets exactly one reply, and allowed commands act through
/// `engine` (stop, release) or `retries` (retry). Returns what was answered.
/// The daemon calls this once per candidate with a PR per pass, serially
/// per repository.
pub fn handle_commands<'f>(
    forge: &'f dyn Forge,
    engine: &'f Engine<'f>,
    rec: &'f mut CandidateRecord,
    retries: Option<Retries<'f>>,
) -> BoxFuture<'f, Result<Vec<Answered>, CommandError>> {
    Box::pin(async move {
        let Some(number) = rec.pull else {
            return Ok(Vec::new());
        };
        let bot = forge.bot_login();
        let replies = forge;
        let Some(permit) = reply_permit(replies, number).await? else {
            // Not Klaud's PR (a mismatching record): take no orders there.
            return Ok(Vec::new());
        };
        let comments = forge.list_comments(number).await?;
        let is_bot = |c: &Comment| {
            c.author
                .as_deref()
                .is_some_and(|a| a.eq_ignore_ascii_case(&bot))
        };
        let mut answered: BTreeSet<u64> = comments
            .iter()
            .filter(|c| is_bot(c))
            .flat_map(|c| answered_ids(&c.body).collect::<Vec<_>>())
            .collect();
        let mut refused_at = last_refusals(
            comments
                .iter()
                .filter(|c| is_bot(c))
                .map(|c| c.body.as_str()),
        );
        let now = engine.clock().now();
        // One lookup per person and pass: a reader's waiting commands are
        // looked at again every pass until the next refusal is due.
        let mut lookups: BTreeMap<String, Authorization> = BTreeMap::new();
        let mut out = Vec::new();
        let mut posted = 0;
        for comment in &comments {
            if posted >= MAX_REPLIES_PER_PASS {
                break;
            }
            if is_bot(comment) || answered.contains(&comment.id) {
                continue;
            }
            let mut commands = parse_commands(&comment.body);
            let user = comment.author.clone().unwrap_or_else(|| "(unknown)".into());
            // The old helper's hidden retry request, when the comment carries
            // no command of its own.
            let legacy = if commands.is_empty() {
                match find_retry_release(&comment.body) {
                    None => continue,
                    Some(found) => match legacy_retry(rec, comment.id, &user, found) {
                        Some(parsed) => Some(parsed),
                        None => continue,
                    },
                }
            } else {
                None
            };
            let key = user.to_ascii_lowercase();
            let authorization = match lookups.get(&key) {
                Some(a) => a.clone(),
                None => {
                    let lookup = forge.permission(&user).await;
                    if let Err(e) = &lookup {
                        tracing::warn!(user, error = %e, "permission lookup failed; refusing the command");
                    }
                    let a = authorize(&user, lookup.as_ref().map_err(|e| e.to_string()));
                    lookups.insert(key, a.clone());
                    a
                }
            };
            if let Some(parsed) = legacy {
                if let Authorization::Refused(why) = &authorization {
                    // Hidden markers are no conversation: a refusal is logged,
                    // not answered.
                    tracing::warn!(
                        comment = comment.id,
                        user,
                        "ignoring a malformed marker: {why}"
                    );
                    continue;
                }
                commands.push(parsed);
            }
            let mut lines = Vec::new();
            let mut started = Vec::new();
            let allowed = authorization == Authorization::Allowed;
            // The comments this reply answers: this one, and for a refusal
            // every other waiting command of the same person.
            let mut covers = vec![(comment.id, commands.clone())];
            match authorization {
                Authorization::Refused(why) => {
                    if !refusal_due(&refused_at, &user, now) {
                        continue;
                    }
                    covers.extend(
                        comments
                            .iter()
                            .filter(|c| {
                                c.id != comment.id
                                    && !is_bot(c)
                                    && !answered.contains(&c.id)
                                    && c.author
                                        .as_deref()
                                        .is_some_and(|a| a.eq_ignore_ascii_case(&user))
                            })
                            .map(|c| (c.id, parse_commands(&c.body)))
                            .filter(|(_, found)| !found.is_empty()),
                    );
                    lines.push(format!("Refused: {why}"));
                    lines.push(refusal_marker(&user, now));
                    refused_at.insert(user.to_ascii_lowercase(), now);
                }
                Authorization::Allowed => {
                    for command in &commands {
                        lines.push(
                            execute(engine, rec, retries, &user, command, &mut started).await?,
                        );
                    }
                }
            }
            let ids: Vec<String> = covers.iter().map(|(id, _)| id.to_string()).collect();
            let body = format!(
                "{}\n{}\n\n<sub>Answer to comment{} {} by `{}`.</sub>",
                covers
                    .iter()
                    .map(|(id, _)| reply_marker(*id))
                    .collect::<Vec<_>>()
                    .join("\n"),
                lines.join("\n\n"),
                if ids.len() == 1 { "" } else { "s" },
                ids.join(", "),
                user
            );
            replies.reply(&permit, &body).await?;
            posted += 1;
            let mut started = Some(started);
            for (id, found) in covers {
                answered.insert(id);
                out.push(Answered {
                    comment: id,
                    user: user.clone(),
                    verbs: found.iter().map(|c| c.command.verb().to_owned()).collect(),
                    allowed,
                    started: started.take().unwrap_or_default(),
                });
            }
        }
        Ok(out)
    })
}

/// The `/klaud retry` a retry-release marker stands for, when it names
/// `rec`'s candidate at the head Klaud last wrote; `None` (logged) when it
/// is malformed or names another candidate or head.
fn legacy_retry(
    rec: &CandidateRecord,
    comment: u64,
    user: &str,
    found: Result<RetryRelease, super::RetryReleaseError>,
) -> Option<ParsedCommand> {
    let marker = match found {
        Ok(m) => m,
        Err(why) => {
            tracing::warn!(comment, user, "ignoring a malformed marker: {why}");
            return None;
        }
    };
    if marker.candidate.as_str() != rec.candidate {
        tracing::warn!(
            comment,
            user,
            "ignoring a klaud-retry-release marker: it names candidate {}, this PR's candidate is {}",
            marker.candidate,
            rec.candidate
        );
        return None;
    }
    if rec.head.as_deref() != Some(marker.head.as_str()) {
        tracing::warn!(
            comment,
            user,
            "ignoring a klaud-retry-release marker: it names head {}, candidate {} is at {}",
            marker.head,
            rec.candidate,
            rec.head.as_deref().unwrap_or("no head")
        );
        return None;
    }
    Some(ParsedCommand {
        command: Command::Retry,
        argument: format!("retry-release marker of run {}", marker.parent),
        line: 1,
    })
}

async fn execute(
    engine: &Engine<'_>,
    rec: &mut CandidateRecord,
    retries: Option<Retries<'_>>,
    user: &str,
    parsed: &ParsedCommand,
    started: &mut Vec<crate::engine::Target>,
) -> Result<String, CommandError> {
    // The reason lands in the receipt: it must not ping anyone.
    let argument = no_mentions(&parsed.argument);
    let why = if argument.is_empty() {
        String::new()
    } else {
        format!(": {argument}")
    };
    match &parsed.command {
        Command::Status => Ok(status_text(rec)),
        // A validated PR a person pushed to: its final sweep runs again.
        Command::Retry if crate::engine::sweeps_again(rec) => {
            Ok(match engine.resweep(rec).await? {
                Ok((text, target)) => {
                    started.push(target);
                    text
                }
                Err(Refusal(text)) => text,
            })
        }
        Command::Retry => match retries {
            None => Ok("Cannot retry: this instance has no store to record the request.".into()),
            Some(r) => Ok(
                match request_retry(r.journal, r.clock, rec, user, &argument).await? {
                    Ok(text) | Err(Refusal(text)) => text,
                },
            ),
        },
        Command::Stop | Command::Release => {
            if rec.step == Step::Done {
                let outcome = rec
                    .ending
                    .as_ref()
                    .map_or_else(|| "done".to_owned(), |e| e.outcome.to_string());
                return Ok(format!(
                    "Nothing to {}: candidate {} already finished ({outcome}).",
                    parsed.command.verb(),
                    rec.candidate
                ));
            }
            let stop = parsed.command == Command::Stop;
            let message = if stop {
                format!("stopped by maintainer {user} (/klaud stop){why}")
            } else {
                format!("released by maintainer {user} (/klaud release){why}")
            };
            // stop: hands off, only the claim is released. release: the
            // usual cleanup, the receipt names who and why.
            engine.end_now(rec, Outcome::Handoff, message, stop).await?;
            engine.drive(rec, 64).await?;
            Ok(if stop {
                format!(
                    "Stopped: Klaud no longer changes this PR or its branch; the claim is {}.",
                    if rec.step == Step::Done {
                        "released"
                    } else {
                        "being released"
                    }
                )
            } else {
                format!(
                    "Released: the candidate is cleaned up and its claim {}.",
                    if rec.step == Step::Done {
                        "released"
                    } else {
                        "is being released"
                    }
                )
            })
        }
        Command::Try => {
            let request = match super::parse_try(&parsed.argument) {
                Ok(r) => r,
                Err(e) => {
                    return Ok(format!(
                        "Not started: {}. Write `/klaud try <name> [from <variant>]: <edit>; <edit>` (see the README).",
                        no_mentions(&e.to_string()).replace('`', "'")
                    ));
                }
            };
            Ok(match engine.add_variant(rec, &request).await? {
                Ok(target) => {
                    let text = format!(
                        "Started Variant {} of experiment `{}` on branch `{}`: it races its siblings under the same claim.",
                        request.name,
                        target
                            .variant
                            .as_ref()
                            .map_or("", |v| v.experiment.as_str()),
                        crate::engine::branch_name(target.candidate.as_str())
                    );
                    started.push(target);
                    text
                }
                Err(Refusal(why)) => {
                    format!("Not started: {}", no_mentions(&why).replace('`', "'"))
                }
            })
        }
        Command::Hunt => {
            if rec.step == Step::Done || rec.pull.is_none() {
                return Ok(format!(
                    "Nothing to hunt: candidate {} has finished or has no PR.",
                    rec.candidate
                ));
            }
            let target = if argument.is_empty() {
                "smoke".to_owned()
            } else {
                crate::model::shorten(&argument, 80)
            };
            Ok(
                match engine
                    .hunt_on_request(rec, user, &target.replace('`', "'"))
                    .await?
                {
                    Ok(text) | Err(Refusal(text)) => text,
                },
            )
        }
        Command::Unknown(verb) => Ok(format!(
            "Unknown command `{}`. Commands: {}.",
            verb.replace('`', ""),
            super::usages()
        )),
    }
}

/// Text safe to post: a zero-width space after every `@` keeps GitHub
/// from turning `@name` or `@org/team` into a notification.
/// Keeps text written into a PR comment from notifying anyone.
pub fn no_mentions(text: &str) -> String {
    text.replace('@', "@\u{200b}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_cannot_mention_anyone() {
        assert_eq!(no_mentions("ask @alice"), "ask @\u{200b}alice");
        assert_eq!(no_mentions("plain"), "plain");
    }

    #[test]
    fn reply_markers_round_trip_and_junk_is_ignored() {
        let body = format!("{}\ntext {}", reply_marker(42), reply_marker(7));
        assert_eq!(answered_ids(&body).collect::<Vec<_>>(), vec![42, 7]);
        for junk in [
            "<!-- klaud-reply:",
            "<!-- klaud-reply:abc -->",
            "<!-- klaud-reply:-1 -->",
            "<!-- klaud-reply:99999999999999999999999 -->",
        ] {
            assert_eq!(answered_ids(junk).count(), 0, "{junk}");
        }
    }
}
