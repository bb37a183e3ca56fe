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

use serde::Serialize;

use super::context::{CommandError, Retries};
use super::pace::{last_refusals, refusal_due, refusal_marker};
use super::{
    Authorization, Command, ParsedCommand, RetryRelease, authorize, find_retry_release,
    parse_commands,
};
use crate::engine::{CandidateRecord, Comment, Engine, Forge, reply_permit};

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
        let known = engine.known_author(rec, number);
        let Some(permit) = reply_permit(replies, number, known.as_deref()).await? else {
            // Not Klaud's PR (a mismatching record): take no orders there.
            return Ok(Vec::new());
        };
        // Saved with the record's next change: no later pass reads the PR
        // for its author again.
        rec.bot_pull = Some(number);
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
                            super::verbs::run(engine, rec, retries, &user, command, &mut started)
                                .await?,
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

#[cfg(test)]
mod tests {
    use super::*;

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
