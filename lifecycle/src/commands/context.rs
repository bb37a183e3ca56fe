//! What the comment handler and every verb share: the error of a command
//! that could not be carried out, where retry requests are kept, and the
//! rule for outside text a command keeps. A leaf beside `handle` and
//! `verbs`, so that the handler calls the verbs without the verbs
//! importing the handler back.

use klaud_claims::Clock;

use crate::engine::{EngineError, ForgeError, Journal, JournalError};

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

/// Outside text Klaud keeps (a command's reason, who released a claim)
/// with its mentions broken by the rule every writer shares; where it is
/// shown it is escaped again as a whole (`klaud_render::escape::text`).
pub fn no_mentions(text: &str) -> String {
    klaud_render::escape::break_mentions(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_cannot_mention_anyone() {
        assert_eq!(no_mentions("ask @alice"), "ask @\u{2060}alice");
        assert_eq!(no_mentions("plain"), "plain");
    }
}
