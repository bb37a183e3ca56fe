//! The table of every `/klaud` verb: one file each (below), with its
//! parsing rule, its permission rule, its effect and its tests. The PR
//! footer, the reply to an unknown verb and the command table of
//! `configs/README.md` are made from [`super::COMMANDS`] (a test keeps the README
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

use super::table::usages;
use super::{Command, CommandError, ParsedCommand, Retries, no_mentions};
use crate::engine::{CandidateRecord, Engine};

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
        Command::Stop => stop::hand_off(engine, rec, &stop::STOP, user, &why).await,
        Command::Release => stop::hand_off(engine, rec, &release::RELEASE, user, &why).await,
        Command::Try => try_variant::run(engine, rec, &parsed.argument, started).await,
        Command::Hunt => hunt::run(engine, rec, user, &argument).await,
        Command::Unknown(verb) => Ok(unknown_reply(verb)),
    }
}

#[cfg(test)]
mod tests {
    use crate::commands::table::{COMMANDS, Needs, command_of, docs_table};

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
