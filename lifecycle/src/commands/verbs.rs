//! The table of every `/klaud` verb: one file each (below), with its
//! parsing rule, its permission rule, its effect and its tests. The PR
//! footer, the reply to an unknown verb and the command table of
//! `configs/README.md` are made from [`COMMANDS`] (a test keeps the README
//! in step), and every place that acts on a command comes through [`run`]
//! (the dashboard issue's retry box and `klaud candidate retry` through
//! [`request_retry`]).

mod hunt;
mod release;
mod retry;
mod status;
mod stop;
mod try_variant;

pub use retry::{request_retry, retry_family, retry_lifts, retry_requested};
pub use status::status_text;
pub use try_variant::{TryParseError, parse_error_reply, parse_try};

use super::{Command, CommandError, ParsedCommand, Permission, Retries, no_mentions};
use crate::engine::{CandidateRecord, Engine};

/// Who may give a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// A person who may push: `write`, `maintain` or `admin`
    /// ([`Permission::may_write`]).
    Write,
}

impl Needs {
    /// Whether `role` may give the command.
    pub fn allows(self, role: &Permission) -> bool {
        match self {
            Needs::Write => role.may_write(),
        }
    }

    /// The roles, as replies and the docs name them.
    pub fn roles(self) -> &'static str {
        match self {
            Needs::Write => "write, maintain or admin",
        }
    }
}

/// One `/klaud` command as people are told about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandHelp {
    /// The command it is.
    pub command: Command,
    /// How it is written.
    pub usage: &'static str,
    /// What it does, in English.
    pub en: &'static str,
    /// What it does, in Chinese.
    pub zh: &'static str,
    /// Who may give it.
    pub needs: Needs,
}

/// Every command Klaud answers, in the order people are shown them.
pub const COMMANDS: [CommandHelp; 6] = [
    retry::HELP,
    status::HELP,
    stop::HELP,
    release::HELP,
    try_variant::HELP,
    hunt::HELP,
];

/// The command a verb names (any case); an unknown one keeps at most 40
/// characters of what was written, for the help reply.
pub(super) fn command_of(verb: &str) -> Command {
    COMMANDS
        .into_iter()
        .map(|c| c.command)
        .find(|c| c.verb().eq_ignore_ascii_case(verb))
        .unwrap_or_else(|| Command::Unknown(verb.chars().take(40).collect()))
}

/// The commands' usages, for one line: `` `/klaud retry`, `/klaud status`, … ``.
pub fn usages() -> String {
    COMMANDS
        .iter()
        .map(|c| {
            let verb: Vec<&str> = c.usage.splitn(3, ' ').take(2).collect();
            format!("`{}`", verb.join(" "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The Markdown table of the commands in `configs/README.md`.
pub fn docs_table() -> String {
    let mut out = String::from("| command | what it does | who may |\n| --- | --- | --- |\n");
    for c in COMMANDS {
        out.push_str(&format!(
            "| `{}` | {} | {} |\n",
            c.usage,
            c.en,
            c.needs.roles()
        ));
    }
    out
}

/// The reply to a verb Klaud does not know (the verb is the commenter's
/// text).
pub fn unknown_reply(verb: &str) -> String {
    format!(
        "Unknown command {}. Commands: {}.",
        klaud_render::escape::code(verb),
        usages()
    )
}

/// Carries out one command of an allowed `user` on `rec`; the reply's text.
/// Variants a `/klaud try` started are added to `started`.
pub(super) async fn run(
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
            retry::resweep(engine, rec, started).await
        }
        Command::Retry => retry::run(retries, rec, user, &argument).await,
        Command::Stop => stop::run(engine, rec, user, &why).await,
        Command::Release => release::run(engine, rec, user, &why).await,
        Command::Try => try_variant::run(engine, rec, &parsed.argument, started).await,
        Command::Hunt => hunt::run(engine, rec, user, &argument).await,
        Command::Unknown(verb) => Ok(unknown_reply(verb)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readme_lists_the_commands_of_the_table() {
        let readme = include_str!("../../../configs/README.md");
        let start = "<!-- commands: made from klaud_lifecycle::commands::COMMANDS -->\n";
        let end = "<!-- /commands -->";
        let at = readme.find(start).expect("the README's command table") + start.len();
        let len = readme[at..]
            .find(end)
            .expect("the end of the command table");
        assert_eq!(
            &readme[at..at + len],
            docs_table(),
            "configs/README.md's command table differs from COMMANDS: paste docs_table()"
        );
    }

    #[test]
    fn every_verb_is_in_the_table_once() {
        let verbs: Vec<&str> = COMMANDS.iter().map(|c| c.command.verb()).collect();
        let mut unique = verbs.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), verbs.len(), "{verbs:?}");
        for c in &COMMANDS {
            assert!(c.usage.starts_with(&format!("/klaud {}", c.command.verb())));
            assert_eq!(command_of(&c.command.verb().to_uppercase()), c.command);
            // `authorize` answers a whole comment by one rule.
            assert_eq!(c.needs, Needs::Write, "{}", c.usage);
        }
    }
}
