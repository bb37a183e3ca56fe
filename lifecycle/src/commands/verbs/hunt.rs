//! `/klaud hunt [point]`: find the first nightly between the old and the
//! new image whose smoke fails.
//!
//! - Parsing: the verb; the rest of the line, if any, is the point named in
//!   the hunt's reports (at most 80 characters, backticks replaced).
//! - Permission: write, maintain or admin, like every verb.
//! - Effect: the hunt's plan on the PR
//!   ([`crate::engine::Engine::hunt_on_request`]); the finish step runs the
//!   hunt before the candidate's cleanup.
//! - Tests: below; `tests/regression_hunt.rs`, and
//!   `tests/maintainer_commands.rs`:
//!   `hunt_on_a_pr_finished_before_the_cooldown_says_there_is_nothing_to_hunt`.

use crate::commands::{CommandError, Refusal};
use crate::engine::{CandidateRecord, Engine, Step};

/// Carries out `/klaud hunt [point]` by `user`; `argument` has its
/// mentions broken.
pub(super) async fn run(
    engine: &Engine<'_>,
    rec: &mut CandidateRecord,
    user: &str,
    argument: &str,
) -> Result<String, CommandError> {
    if rec.step == Step::Done || rec.pull.is_none() {
        return Ok(format!(
            "Nothing to hunt: candidate {} has finished or has no PR.",
            rec.candidate
        ));
    }
    let target = if argument.is_empty() {
        "smoke".to_owned()
    } else {
        crate::model::shorten(argument, 80)
    };
    // Kept as written: every place that shows the point renders it with
    // klaud-render's code-span rule, whose fence outgrows any backticks.
    Ok(match engine.hunt_on_request(rec, user, &target).await? {
        Ok(text) | Err(Refusal(text)) => text,
    })
}

#[cfg(test)]
mod tests {
    use crate::commands::{Command, parse_commands};

    fn commands(body: &str) -> Vec<Command> {
        parse_commands(body)
            .into_iter()
            .map(|c| c.command)
            .collect()
    }

    #[test]
    fn hunt_takes_an_optional_point() {
        let parsed = parse_commands(
            "/klaud hunt
/KLAUD Hunt conc 64 tp8",
        );
        assert_eq!(parsed[0].command, Command::Hunt);
        assert_eq!(parsed[0].argument, "");
        assert_eq!(parsed[1].command, Command::Hunt);
        assert_eq!(parsed[1].argument, "conc 64 tp8");
        assert_eq!(
            commands("/klaud hunter"),
            vec![Command::Unknown("hunter".into())]
        );
    }
}
