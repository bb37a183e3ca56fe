//! The states GitHub reports for workflow runs, jobs and pull requests, as
//! types. GitHub documents the values ("Workflow runs" and "Workflow jobs"
//! REST API, and "Create a check run" for the `status`/`conclusion`
//! options) and adds to them over time, so each enum keeps what it does not
//! know as `Unknown(text)` instead of failing a poll; text round-trips
//! exactly through [`std::fmt::Display`] / [`std::str::FromStr`] and serde.

use std::convert::Infallible;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An enum over GitHub's documented words plus `Unknown(String)`, written and
/// read as the plain word (serde and `Display`/`FromStr`).
macro_rules! github_word {
    (
        $(#[$meta:meta])*
        $name:ident { $( $(#[$vmeta:meta])* $variant:ident => $text:literal ),+ $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value this version does not know (GitHub adds some over
            /// time), kept verbatim.
            Unknown(String),
        }

        impl $name {
            /// GitHub's word for it.
            pub fn as_str(&self) -> &str {
                match self {
                    $( Self::$variant => $text, )+
                    Self::Unknown(s) => s,
                }
            }

            /// Reads GitHub's word; an unknown word becomes `Unknown`.
            pub fn parse(s: &str) -> Self {
                match s {
                    $( $text => Self::$variant, )+
                    other => Self::Unknown(other.to_owned()),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = Infallible;
            fn from_str(s: &str) -> Result<Self, Infallible> {
                Ok(Self::parse(s))
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self::parse(s)
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self::parse(&s)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
                Ok(Self::parse(&s))
            }
        }
    };
}

github_word! {
    /// Where a workflow run or job is (`status`).
    RunStatus {
        /// Waiting for a runner.
        Queued => "queued",
        /// Running.
        InProgress => "in_progress",
        /// Finished; the conclusion says how.
        Completed => "completed",
        /// Waiting on a deployment protection rule.
        Waiting => "waiting",
        /// Created, not yet queued.
        Requested => "requested",
        /// Held by a concurrency group.
        Pending => "pending",
    }
}

github_word! {
    /// What started a workflow run (`event`); Klaud reads the two it
    /// starts or watches, the rest only to tell them apart.
    RunEvent {
        /// Dispatched by API (Klaud's smoke).
        WorkflowDispatch => "workflow_dispatch",
        /// A pull request event (the final sweep).
        PullRequest => "pull_request",
        /// A push to a branch.
        Push => "push",
        /// A schedule.
        Schedule => "schedule",
    }
}

github_word! {
    /// How a compare's `head` relates to its `base` (`status` of the
    /// compare API).
    CompareStatus {
        /// `head` has commits `base` lacks, and all of `base`'s.
        Ahead => "ahead",
        /// `base` has commits `head` lacks, and all of `head`'s.
        Behind => "behind",
        /// Each side has commits the other lacks.
        Diverged => "diverged",
        /// The same commit.
        Identical => "identical",
    }
}

github_word! {
    /// What the author of a comment is to the repository
    /// (`author_association`), as GitHub decides it: what a repository's
    /// own gates read to decide whether a comment authorizes anything.
    AuthorAssociation {
        /// Owns the repository.
        Owner => "OWNER",
        /// A member of the organization that owns it.
        Member => "MEMBER",
        /// Invited to collaborate on it.
        Collaborator => "COLLABORATOR",
        /// Has committed to it before.
        Contributor => "CONTRIBUTOR",
        /// Has not contributed before.
        FirstTimeContributor => "FIRST_TIME_CONTRIBUTOR",
        /// A first-time GitHub user.
        FirstTimer => "FIRST_TIMER",
        /// A placeholder for an imported user.
        Mannequin => "MANNEQUIN",
        /// None of these.
        None => "NONE",
    }
}

impl AuthorAssociation {
    /// Whether InferenceX's reuse gate counts a `/reuse-sweep-run` by this
    /// association (`DEFAULT_ALLOWED_AUTHOR_ASSOCIATIONS` of
    /// `utils/merge_reuse_gate.py`: owners, members and collaborators).
    pub fn reuse_gate_accepts(&self) -> bool {
        matches!(self, Self::Owner | Self::Member | Self::Collaborator)
    }
}

impl CompareStatus {
    /// Whether `head` holds every commit of `base` (it descends from it or
    /// is it).
    pub fn head_contains_base(&self) -> bool {
        matches!(self, Self::Ahead | Self::Identical)
    }
}

impl RunStatus {
    /// Whether the run or job can no longer change (until a re-run).
    pub fn is_completed(&self) -> bool {
        *self == Self::Completed
    }
}

github_word! {
    /// How a completed run or job ended (`conclusion`).
    RunConclusion {
        /// Passed.
        Success => "success",
        /// Failed.
        Failure => "failure",
        /// Neither passed nor failed.
        Neutral => "neutral",
        /// Cancelled.
        Cancelled => "cancelled",
        /// Skipped (a false `if:`).
        Skipped => "skipped",
        /// Ran past its time limit.
        TimedOut => "timed_out",
        /// Needs a person (approval).
        ActionRequired => "action_required",
        /// Left incomplete too long; GitHub marked it stale.
        Stale => "stale",
        /// Could not start (an invalid workflow file).
        StartupFailure => "startup_failure",
    }
}

impl RunConclusion {
    /// Whether a job that ended so counts as failed in reports: anything
    /// but success, skipped or neutral (a timeout and a cancel too).
    pub fn counts_as_failure(&self) -> bool {
        !matches!(self, Self::Success | Self::Skipped | Self::Neutral)
    }
}

/// A pull request's state: GitHub's `state` (`open` / `closed`) with
/// `merged_at` telling a merge from a close.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PullState {
    /// Open.
    Open,
    /// Closed without merging.
    Closed,
    /// Closed by merging.
    Merged,
}

impl PullState {
    /// From GitHub's `state` and whether `merged_at` is set. Only `open`
    /// is open: GitHub documents no third state, and anything else cannot
    /// be written to.
    pub fn from_github(state: &str, merged: bool) -> Self {
        if state == "open" {
            Self::Open
        } else if merged {
            Self::Merged
        } else {
            Self::Closed
        }
    }

    /// Open (not closed or merged).
    pub fn is_open(self) -> bool {
        self == Self::Open
    }

    /// Closed by merging.
    pub fn is_merged(self) -> bool {
        self == Self::Merged
    }

    /// GitHub's `state` word (`open` or `closed`; a merged PR is closed).
    pub fn github_state(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Closed | Self::Merged => "closed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_and_unknown_words_are_kept() {
        for w in [
            "queued",
            "in_progress",
            "completed",
            "waiting",
            "requested",
            "pending",
        ] {
            let s = RunStatus::parse(w);
            assert!(!matches!(s, RunStatus::Unknown(_)), "{w}");
            assert_eq!(s.to_string(), w);
        }
        assert_eq!(
            RunStatus::parse("expected"),
            RunStatus::Unknown("expected".into())
        );
        assert_eq!(
            serde_json::to_string(&RunConclusion::TimedOut).unwrap(),
            "\"timed_out\""
        );
        let c: RunConclusion = serde_json::from_str("\"startup_failure\"").unwrap();
        assert_eq!(c, RunConclusion::StartupFailure);
        let c: RunConclusion = serde_json::from_str("\"noop\"").unwrap();
        assert_eq!(c.as_str(), "noop");
        assert!(RunStatus::Completed.is_completed());
        assert!(!RunStatus::Unknown("completed ".into()).is_completed());
    }

    #[test]
    fn pull_state_reads_state_and_merged_at() {
        assert_eq!(PullState::from_github("open", false), PullState::Open);
        assert_eq!(PullState::from_github("closed", false), PullState::Closed);
        assert_eq!(PullState::from_github("closed", true), PullState::Merged);
        assert_eq!(PullState::Merged.github_state(), "closed");
    }
}
