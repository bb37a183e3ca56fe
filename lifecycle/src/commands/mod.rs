//! Maintainer commands in PR comments and who may give them. Each verb
//! has its own file under `verbs/` (its parsing rule, permission rule,
//! effect and tests) and a line in [`COMMANDS`], the one table of them.
//!
//! A command is a line that starts (after at most three spaces) with
//! `/klaud` followed by a verb. Text that Markdown shows as code or as a
//! quotation is never a command: fenced blocks (```` ``` ```` and `~~~`),
//! indented code, `>` quotes and HTML comments are skipped, and a command
//! inside inline code cannot start a line. This keeps a maintainer who
//! explains or quotes a command from triggering it.
//!
//! [`handle_commands`] carries the commands out on a candidate's PR over
//! the lifecycle [`Forge`](crate::engine::Forge) and
//! [`Journal`](crate::engine::Journal): one reply per command comment,
//! found again by its hidden marker; a person refused is told so at most
//! once an hour per PR ([`pace`]).

use std::fmt;

mod context;
mod handle;
pub mod pace;
mod table;
mod verbs;

pub use crate::engine::{Permission, Refusal, TryRequest};

pub use context::{CommandError, Retries, no_mentions};
pub use handle::{Answered, MAX_REPLIES_PER_PASS, handle_commands, reply_marker};
pub use table::{COMMANDS, CommandHelp, Needs, docs_table, usages};
pub use verbs::{
    TryParseError, parse_error_reply, parse_try, request_retry, retry_family, retry_lifts,
    retry_requested, status_text, unknown_reply,
};

/// What a command line asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Command {
    /// Run the next attempt again.
    Retry,
    /// Release the claim.
    Release,
    /// Stop working on the PR (finish as handoff).
    Stop,
    /// Reply with the candidate's state.
    Status,
    /// Start another variant of this PR's candidate:
    /// `/klaud try <name> [from <variant>]: <edits>`.
    Try,
    /// Hunt the first bad nightly between the old and the new image: `/klaud hunt [point]`.
    Hunt,
    /// `/klaud` with a verb Klaud does not know (empty when there was
    /// none); the bot answers with help.
    Unknown(String),
}

impl Command {
    /// The verb as written in a comment.
    pub fn verb(&self) -> &str {
        match self {
            Command::Retry => "retry",
            Command::Release => "release",
            Command::Stop => "stop",
            Command::Status => "status",
            Command::Try => "try",
            Command::Hunt => "hunt",
            Command::Unknown(verb) => verb,
        }
    }
}

/// A command found in a comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedCommand {
    /// The command.
    pub command: Command,
    /// The text after the verb, trimmed (e.g. a reason), at most
    /// [`MAX_ARGUMENT_CHARS`] characters.
    pub argument: String,
    /// 1-based line number in the comment.
    pub line: usize,
}

/// Arguments are free text for receipts and replies; longer ones are cut.
pub const MAX_ARGUMENT_CHARS: usize = 500;

const PREFIX: &str = "/klaud";

/// The commands in a comment body, in order.
pub fn parse_commands(body: &str) -> Vec<ParsedCommand> {
    let mut found = Vec::new();
    let mut fence: Option<(char, usize)> = None;
    let mut in_html_comment = false;
    // Indented code cannot interrupt a paragraph, so an indented line right
    // after text is a continuation, not code — but a continuation line is
    // also not at the start of a block, so it can never be a command either.
    for (index, raw) in body.split('\n').enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        let (indent, rest) = leading_indent(line);

        if let Some((ch, len)) = fence {
            if indent < 4 && closes_fence(rest, ch, len) {
                fence = None;
            }
            continue;
        }
        if in_html_comment {
            if line.contains("-->") {
                in_html_comment = false;
            }
            continue;
        }
        if indent >= 4 {
            continue;
        }
        if let Some(open) = opens_fence(rest) {
            fence = Some(open);
            continue;
        }
        if rest.starts_with('>') {
            continue;
        }
        if let Some(after) = rest.strip_prefix("<!--") {
            if !after.contains("-->") {
                in_html_comment = true;
            }
            continue;
        }
        if let Some(command) = parse_line(rest, index + 1) {
            found.push(command);
        }
    }
    found
}

/// Width of leading spaces and tabs (a tab counts as four, as in
/// CommonMark's tab stops from the line start) and the rest of the line.
fn leading_indent(line: &str) -> (usize, &str) {
    let mut width = 0;
    for (i, c) in line.char_indices() {
        match c {
            ' ' => width += 1,
            '\t' => width += 4 - width % 4,
            _ => return (width, &line[i..]),
        }
    }
    (width, "")
}

fn opens_fence(rest: &str) -> Option<(char, usize)> {
    let ch = rest.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let len = rest.chars().take_while(|c| *c == ch).count();
    if len < 3 {
        return None;
    }
    // A backtick fence's info string may not contain backticks.
    if ch == '`' && rest[len..].contains('`') {
        return None;
    }
    Some((ch, len))
}

fn closes_fence(rest: &str, ch: char, len: usize) -> bool {
    let run = rest.chars().take_while(|c| *c == ch).count();
    run >= len && rest[run * ch.len_utf8()..].trim().is_empty()
}

fn parse_line(rest: &str, line: usize) -> Option<ParsedCommand> {
    let head = rest.get(..PREFIX.len())?;
    if !head.eq_ignore_ascii_case(PREFIX) {
        return None;
    }
    let after = &rest[PREFIX.len()..];
    // `/klaudius` is not `/klaud`.
    if !(after.is_empty() || after.starts_with(char::is_whitespace)) {
        return None;
    }
    let after = after.trim();
    let (verb, argument) = match after.split_once(char::is_whitespace) {
        Some((verb, argument)) => (verb, argument.trim()),
        None => (after, ""),
    };
    let command = table::command_of(verb);
    Some(ParsedCommand {
        command,
        argument: argument.chars().take(MAX_ARGUMENT_CHARS).collect(),
        line,
    })
}

/// Whether a command is obeyed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authorization {
    /// The user may command Klaud.
    Allowed,
    /// Refused; the reason is safe to post as a reply.
    Refused(String),
}

/// The permission rule: only `write`, `maintain` and `admin` may command
/// Klaud; a lookup that failed or answered something unknown refuses (fail
/// closed). `lookup` is the role GitHub answered, or the error.
pub fn authorize<E: fmt::Display>(user: &str, lookup: Result<&Permission, E>) -> Authorization {
    // Every verb of the table needs the same roles, so one answer serves
    // all the commands of a comment.
    let needs = Needs::Write;
    let roles = needs.roles();
    let user: String = user.chars().take(60).collect();
    match lookup {
        Err(_) => Authorization::Refused(format!(
            "Could not verify the repository permission of {user} (the lookup failed), so nothing was done; write the command again once GitHub answers. Commands need {roles} permission."
        )),
        Ok(role) if needs.allows(role) => Authorization::Allowed,
        Ok(Permission::Unknown(_)) => Authorization::Refused(format!(
            "{user} has an unrecognized permission; commands need {roles} permission."
        )),
        Ok(other) => Authorization::Refused(format!(
            "{user} has {other} permission; commands need {roles} permission."
        )),
    }
}

/// The hidden marker the old helper posted to ask for a retry:
/// `<!-- klaud-retry-release:<parent run>:<candidate>:<head sha> -->`.
pub const RETRY_RELEASE_PREFIX: &str = "<!-- klaud-retry-release:";

/// A parsed retry-release marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryRelease {
    /// The owner run the helper named (its parent run).
    pub parent: u64,
    /// The candidate id.
    pub candidate: klaud_claims::CandidateId,
    /// The head commit the request was made on (40 lowercase hex).
    pub head: String,
}

/// What is malformed in a retry-release marker (the helper wrote it; the
/// message says which field).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("retry-release marker{0}")]
pub struct RetryReleaseError(String);

/// The first retry-release marker in `body`: `None` when there is none,
/// `Err` naming what is malformed. Unlike `/klaud` commands it is an HTML
/// comment by design, so it counts wherever it stands.
pub fn find_retry_release(body: &str) -> Option<Result<RetryRelease, RetryReleaseError>> {
    let malformed = |what: String| Some(Err(RetryReleaseError(what)));
    let at = body.find(RETRY_RELEASE_PREFIX)?;
    let rest = &body[at + RETRY_RELEASE_PREFIX.len()..];
    let Some(end) = rest.find("-->") else {
        return malformed(" without its closing -->".into());
    };
    let inner = rest[..end].trim();
    let fields: Vec<&str> = inner.split(':').collect();
    let [parent, candidate, head] = fields.as_slice() else {
        return malformed(format!(
            " {:?}: expected <parent>:<candidate>:<head>",
            shorten(inner)
        ));
    };
    let parent = match parent.parse::<u64>() {
        Ok(p) if !parent.starts_with('+') => p,
        _ => {
            return malformed(format!(": parent {:?} is not a run id", shorten(parent)));
        }
    };
    let candidate = match klaud_claims::CandidateId::new(candidate) {
        Ok(c) => c,
        Err(e) => return malformed(format!(": {e}")),
    };
    if head.len() != 40 || !head.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return malformed(format!(
            ": head {:?} is not a 40-hex commit sha",
            shorten(head)
        ));
    }
    Some(Ok(RetryRelease {
        parent,
        candidate,
        head: (*head).to_owned(),
    }))
}

fn shorten(s: &str) -> String {
    s.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commands(body: &str) -> Vec<Command> {
        parse_commands(body)
            .into_iter()
            .map(|c| c.command)
            .collect()
    }

    #[test]
    fn every_listed_command_parses_as_itself() {
        for help in COMMANDS {
            let parsed = parse_commands(help.usage);
            assert_eq!(parsed.len(), 1, "{}", help.usage);
            assert!(
                !matches!(parsed[0].command, Command::Unknown(_)),
                "{} is not a known verb",
                help.usage
            );
        }
        assert_eq!(
            usages(),
            "`/klaud retry`, `/klaud status`, `/klaud stop`, `/klaud release`, `/klaud try`, `/klaud hunt`"
        );
    }

    #[test]
    fn finds_each_command_at_line_start() {
        let body =
            "Thanks!\n/klaud retry\n  /klaud status\n/klaud release flaky runner\r\n/klaud stop";
        let parsed = parse_commands(body);
        assert_eq!(
            parsed.iter().map(|c| c.command.clone()).collect::<Vec<_>>(),
            vec![
                Command::Retry,
                Command::Status,
                Command::Release,
                Command::Stop
            ]
        );
        assert_eq!(parsed[2].argument, "flaky runner");
        assert_eq!(parsed[2].line, 4);
    }

    #[test]
    fn unknown_and_bare_commands_are_reported_for_help() {
        assert_eq!(
            commands("/klaud frobnicate\n/klaud\n/KLAUD Retry"),
            vec![
                Command::Unknown("frobnicate".into()),
                Command::Unknown(String::new()),
                Command::Retry
            ]
        );
        assert!(commands("/klaudius retry\nplease /klaud retry\n/klaud-retry").is_empty());
    }

    #[test]
    fn code_quotes_and_comments_are_ignored() {
        let body = "```\n/klaud retry\n```\n~~~~ sh\n/klaud stop\n~~~\nstill fenced\n/klaud stop\n~~~~\n\
                    > /klaud release\n>/klaud release\n    /klaud status\n\t/klaud status\n\
                    `/klaud retry`\n<!--\n/klaud stop\n-->\n<!-- /klaud stop -->\n/klaud status";
        assert_eq!(commands(body), vec![Command::Status]);
    }

    #[test]
    fn unterminated_fence_swallows_the_rest() {
        assert!(commands("```\n/klaud retry").is_empty());
        assert_eq!(commands("``` a`b\n/klaud retry"), vec![Command::Retry]);
    }

    #[test]
    fn permission_rule_fails_closed() {
        for role in ["write", "maintain", "admin", "Admin", "push"] {
            assert_eq!(
                authorize::<String>("alice", Ok(&Permission::parse(role))),
                Authorization::Allowed,
                "{role}"
            );
        }
        for role in ["read", "triage", "none", "owner", ""] {
            assert!(matches!(
                authorize::<String>("bob", Ok(&Permission::parse(role))),
                Authorization::Refused(_)
            ));
        }
        let refused = authorize("carol", Err("HTTP 502"));
        let Authorization::Refused(reason) = refused else {
            panic!("a failed lookup must refuse");
        };
        assert!(reason.contains("Could not verify"), "{reason}");
        assert!(!reason.contains("502"), "{reason}");
    }

    #[test]
    fn retry_release_markers_parse_and_malformed_ones_say_why() {
        let head = "a".repeat(40);
        let cid = "0123456789abcdef-fedcba9876543210";
        let body = format!("retry please\n<!-- klaud-retry-release:123:{cid}:{head} -->\n");
        let m = find_retry_release(&body).expect("found").expect("valid");
        assert_eq!(
            (m.parent, m.candidate.as_str(), m.head.as_str()),
            (123, cid, head.as_str())
        );
        assert!(find_retry_release("/klaud retry").is_none());
        for (junk, why) in [
            ("<!-- klaud-retry-release:1:2 -->".to_owned(), "expected"),
            (
                format!("<!-- klaud-retry-release:x:{cid}:{head} -->"),
                "not a run id",
            ),
            (
                format!("<!-- klaud-retry-release:1:nope:{head} -->"),
                "candidate",
            ),
            (
                format!("<!-- klaud-retry-release:1:{cid}:abc -->"),
                "40-hex",
            ),
            ("<!-- klaud-retry-release:1:2:3".to_owned(), "closing"),
        ] {
            let e = find_retry_release(&junk)
                .expect("found")
                .expect_err("malformed")
                .to_string();
            assert!(e.contains(why), "{junk}: {e}");
        }
    }
}
