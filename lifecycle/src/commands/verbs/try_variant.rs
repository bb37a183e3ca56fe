//! `/klaud try <name> [from <variant>]: <edits>`: start another variant
//! of this PR's candidate, which races it under the same claim.
//!
//! - Parsing: [`parse_try`] (edits in the grammar of
//!   [`klaud_planner::variant`], `;`-separated); a repair hook's proposed
//!   variants are read by the same rule.
//! - Permission: write, maintain or admin, like every verb.
//! - Effect: the variant joins the candidate's experiment
//!   ([`crate::engine::Engine::add_variant`]); the caller opens and drives
//!   it.
//! - Tests: below; `tests/experiments.rs`, and
//!   `tests/maintainer_commands.rs`: `try_on_a_pr_finished_before_the_cooldown_is_answered`.

use crate::commands::{CommandError, Refusal};
use crate::engine::{CandidateRecord, Engine, TryRequest};

/// Carries out `/klaud try <argument>`; the variants it started are added
/// to `started`.
pub(super) async fn run(
    engine: &Engine<'_>,
    rec: &mut CandidateRecord,
    argument: &str,
    started: &mut Vec<crate::engine::Target>,
) -> Result<String, CommandError> {
    let request = match parse_try(argument) {
        Ok(r) => r,
        Err(e) => return Ok(parse_error_reply(&e)),
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
            format!("Not started: {}", klaud_render::escape::text(&why))
        }
    })
}

/// The reply to a `/klaud try` whose argument does not read (the error
/// quotes the commenter's text).
pub fn parse_error_reply(e: &TryParseError) -> String {
    format!(
        "Not started: {}. Write `/klaud try <name> [from <variant>]: <edit>; <edit>` (see the README).",
        klaud_render::escape::text(&e.to_string())
    )
}

/// Why a `/klaud try` argument does not read; the message is the reply.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TryParseError {
    /// No `:` between the name and the edits.
    #[error("expected `/klaud try <name> [from <variant>]: <edits>`")]
    Shape,
    /// The words before the `:` are not a name or `<name> from <variant>`.
    #[error("{0:?} is not `<name>` or `<name> from <variant>`")]
    Head(String),
    /// A variant name Klaud cannot use.
    #[error("variant name {0:?} must be 1 to 32 letters, digits, '-' or '_'")]
    Name(String),
    /// The edits do not parse.
    #[error(transparent)]
    Edits(#[from] klaud_planner::variant::EditSyntaxError),
    /// A new variant without a base changes nothing.
    #[error("a new variant needs at least one edit")]
    NoEdits,
}

/// Parses the argument of `/klaud try`: `<name> [from <variant>]: <edits>`
/// (edits in the grammar of [`klaud_planner::variant`], `;`-separated).
pub fn parse_try(argument: &str) -> Result<TryRequest, TryParseError> {
    let Some((head, edits)) = argument.split_once(':') else {
        return Err(TryParseError::Shape);
    };
    let words: Vec<&str> = head.split_whitespace().collect();
    let (name, from) = match words.as_slice() {
        [name] => (*name, None),
        [name, kw, base] if kw.eq_ignore_ascii_case("from") => (*name, Some(*base)),
        _ => return Err(TryParseError::Head(head.trim().to_owned())),
    };
    for n in std::iter::once(name).chain(from) {
        if !klaud_planner::variant::valid_name(n) {
            return Err(TryParseError::Name(n.to_owned()));
        }
    }
    let edits = klaud_planner::variant::parse_edits(edits)?;
    if edits.is_empty() && from.is_none() {
        return Err(TryParseError::NoEdits);
    }
    Ok(TryRequest {
        name: name.to_owned(),
        from: from.map(str::to_owned),
        edits,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::{Command, parse_commands};

    #[test]
    fn try_takes_a_name_an_optional_base_and_edits() {
        let found = parse_commands("/klaud try F from E: set a.b=1; unset c.d");
        assert_eq!(found[0].command, Command::Try);
        let t = parse_try(&found[0].argument).unwrap();
        assert_eq!(
            (t.name.as_str(), t.from.as_deref(), t.edits.len()),
            ("F", Some("E"), 2)
        );
        let t = parse_try("G: add-flag frontend.args --x").unwrap();
        assert_eq!((t.name.as_str(), t.from), ("G", None));
        for bad in [
            "G",
            "G set a=1",
            ": set a.b=1",
            "a b c d: set a.b=1",
            "G from: set a.b=1",
            "G:",
            "G: frob x",
            "é: set a.b=1",
        ] {
            assert!(parse_try(bad).is_err(), "{bad}");
        }
        assert!(
            parse_try("G from E:").is_ok(),
            "a copy of E under another name"
        );
    }
}
