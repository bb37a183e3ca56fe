//! The external action the engine records, durably, just before taking it
//! ([`super::CandidateRecord::intent`]). After a crash the intent says what
//! may have happened; the engine still re-reads GitHub to find out.
//!
//! Stored as the sentence earlier versions wrote (`"repair 2"`, `"cancel
//! run 17"`), so journals written before this type load unchanged, and a
//! sentence this version does not know (an older or newer writer) loads as
//! [`Intent::Other`] and is written back byte for byte.

use std::convert::Infallible;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An action about to be taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Intent {
    /// Take the family's claim.
    AcquireClaim,
    /// Make the bump commit.
    CommitBump,
    /// Create the candidate branch.
    CreateBranch,
    /// Open the draft PR.
    OpenPull,
    /// Write the frozen baseline into the PR body.
    FreezeBaseline,
    /// Dispatch the smoke workflow (its file name).
    Dispatch(String),
    /// Cancel a run that overran its timeout.
    CancelStuckRun(u64),
    /// Run repair number n (from 1).
    Repair(u32),
    /// Post the comment of a report (its marker key).
    Comment(String),
    /// Edit the live report comment of a key.
    EditLiveReport(String),
    /// Post the live report comment of a key.
    CommentLiveReport(String),
    /// Commit the changelog entry.
    CommitChangelog,
    /// Push the changelog commit.
    PushChangelog,
    /// Mark the PR ready before the final sweep.
    ReadyBeforeSweep,
    /// Set the sweep label.
    SetSweepLabel,
    /// Re-run a sweep run.
    RerunSweep(u64),
    /// Mark the PR ready for review (a validated end).
    MarkReady,
    /// Post the `/reuse-sweep-run` authorization (its old sentence names
    /// `/use`, which it replaced).
    PostUse,
    /// Ask a maintainer for the `/reuse-sweep-run` line.
    AskReuse,
    /// Edit Klaud's reuse comment so its line no longer stands.
    WithdrawReuse,
    /// Say on the PR that the sweep no longer covers its head.
    SayUncovered,
    /// Merge the base into the branch (a merge commit, no ref moved yet).
    MergeBase,
    /// Move the branch to the merge commit.
    PushMerge,
    /// Say in the PR why the base cannot be merged in without a person.
    ExplainConflict,
    /// Post the cleanup marker.
    PostCleanupMarker,
    /// Remove a label.
    RemoveLabel(String),
    /// Convert the PR back to a draft.
    ConvertToDraft,
    /// Close the PR.
    ClosePull,
    /// Cancel a run of the candidate.
    CancelRun(u64),
    /// Delete the candidate branch.
    DeleteBranch,
    /// Release the claim.
    ReleaseClaim,
    /// Set (or with `None` remove) a field of the shared claim record.
    ClaimField {
        /// Field name.
        field: String,
        /// New value.
        value: Option<String>,
    },
    /// Add a sibling candidate to the shared claim.
    ClaimAddCandidate(String),
    /// List new variants (their names) in the shared claim.
    ClaimAddVariants(Vec<String>),
    /// Ask for variants (their names) instead of repair number n.
    ProposeVariants {
        /// The repair the proposal answers.
        repair: u32,
        /// The proposed variants' names.
        names: Vec<String>,
    },
    /// Update the related-experiments section of the PR body.
    UpdateExperimentsSection,
    /// A sentence this version does not know, kept verbatim.
    Other(String),
}

/// The intents without an argument, with their sentences.
const FIXED: &[(&str, Intent)] = &[
    ("acquire claim", Intent::AcquireClaim),
    ("commit the bump", Intent::CommitBump),
    ("create the branch", Intent::CreateBranch),
    ("open the pull request", Intent::OpenPull),
    ("freeze the baseline", Intent::FreezeBaseline),
    ("commit the changelog", Intent::CommitChangelog),
    ("push the changelog", Intent::PushChangelog),
    (
        "mark ready for review before the sweep",
        Intent::ReadyBeforeSweep,
    ),
    ("set the sweep label", Intent::SetSweepLabel),
    ("mark ready for review", Intent::MarkReady),
    ("post /use", Intent::PostUse),
    ("ask a maintainer to authorize reuse", Intent::AskReuse),
    ("withdraw the reuse authorization", Intent::WithdrawReuse),
    (
        "say the sweep no longer covers the head",
        Intent::SayUncovered,
    ),
    ("merge the base into the branch", Intent::MergeBase),
    ("push the merge of the base", Intent::PushMerge),
    (
        "explain why the base cannot be merged",
        Intent::ExplainConflict,
    ),
    ("post the cleanup marker", Intent::PostCleanupMarker),
    ("convert to draft", Intent::ConvertToDraft),
    ("close the pull request", Intent::ClosePull),
    ("delete the branch", Intent::DeleteBranch),
    ("release the claim", Intent::ReleaseClaim),
    (
        "update the related experiments section",
        Intent::UpdateExperimentsSection,
    ),
];

impl fmt::Display for Intent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some((text, _)) = FIXED.iter().find(|(_, i)| i == self) {
            return f.write_str(text);
        }
        match self {
            Intent::Dispatch(workflow) => write!(f, "dispatch {workflow}"),
            Intent::CancelStuckRun(id) => write!(f, "cancel stuck run {id}"),
            Intent::Repair(n) => write!(f, "repair {n}"),
            Intent::Comment(key) => write!(f, "comment {key}"),
            Intent::EditLiveReport(key) => write!(f, "edit live report {key}"),
            Intent::CommentLiveReport(key) => write!(f, "comment live report {key}"),
            Intent::RerunSweep(id) => write!(f, "re-run sweep {id}"),
            Intent::RemoveLabel(label) => write!(f, "remove label {label}"),
            Intent::CancelRun(id) => write!(f, "cancel run {id}"),
            // `{:?}` of an `Option<&str>`: the sentence earlier versions wrote.
            Intent::ClaimField { field, value } => {
                write!(f, "claim: {field} = {:?}", value.as_deref())
            }
            Intent::ClaimAddCandidate(id) => write!(f, "claim: add candidate {id}"),
            Intent::ClaimAddVariants(names) => {
                write!(f, "claim: add Variant {}", names.join(", "))
            }
            Intent::ProposeVariants { repair, names } => {
                write!(f, "repair {repair}: propose Variant {}", names.join(", "))
            }
            Intent::Other(text) => f.write_str(text),
            fixed => unreachable!("{fixed:?} is in FIXED"),
        }
    }
}

impl Intent {
    /// Reads a sentence; one that is not exactly what some intent writes
    /// becomes [`Intent::Other`], so every sentence round-trips.
    pub fn parse(s: &str) -> Self {
        match Self::parse_known(s) {
            Some(intent) if intent.to_string() == s => intent,
            _ => Intent::Other(s.to_owned()),
        }
    }

    fn parse_known(s: &str) -> Option<Self> {
        if let Some((_, i)) = FIXED.iter().find(|(text, _)| *text == s) {
            return Some(i.clone());
        }
        let arg = |prefix: &str| s.strip_prefix(prefix).map(str::to_owned);
        // Longer prefixes first: "comment live report k" is not "comment k".
        if let Some(key) = arg("comment live report ") {
            return Some(Intent::CommentLiveReport(key));
        }
        if let Some(key) = arg("edit live report ") {
            return Some(Intent::EditLiveReport(key));
        }
        if let Some(rest) = arg("cancel stuck run ") {
            return rest.parse().ok().map(Intent::CancelStuckRun);
        }
        if let Some(rest) = arg("cancel run ") {
            return rest.parse().ok().map(Intent::CancelRun);
        }
        if let Some(rest) = arg("re-run sweep ") {
            return rest.parse().ok().map(Intent::RerunSweep);
        }
        let names = |list: &str| list.split(", ").map(str::to_owned).collect::<Vec<_>>();
        if let Some(rest) = arg("repair ")
            && let Some((n, list)) = rest.split_once(": propose Variant ")
        {
            return n.parse().ok().map(|repair| Intent::ProposeVariants {
                repair,
                names: names(list),
            });
        }
        if let Some(rest) = arg("repair ") {
            return rest.parse().ok().map(Intent::Repair);
        }
        if let Some(list) = arg("claim: add Variant ") {
            return Some(Intent::ClaimAddVariants(names(list.as_str())));
        }
        if let Some(id) = arg("claim: add candidate ") {
            return Some(Intent::ClaimAddCandidate(id));
        }
        if let Some(rest) = arg("claim: ") {
            let (field, value) = rest.split_once(" = ")?;
            let value = match value {
                "None" => None,
                // Rust's `{:?}` of a plain string is its JSON string for
                // the field values Klaud writes; anything else falls back
                // to `Other` through the round-trip check.
                v => Some(
                    serde_json::from_str::<String>(v.strip_prefix("Some(")?.strip_suffix(')')?)
                        .ok()?,
                ),
            };
            return Some(Intent::ClaimField {
                field: field.to_owned(),
                value,
            });
        }
        if let Some(label) = arg("remove label ") {
            return Some(Intent::RemoveLabel(label));
        }
        if let Some(workflow) = arg("dispatch ") {
            return Some(Intent::Dispatch(workflow));
        }
        if let Some(key) = arg("comment ") {
            return Some(Intent::Comment(key));
        }
        None
    }
}

impl FromStr for Intent {
    type Err = Infallible;
    fn from_str(s: &str) -> Result<Self, Infallible> {
        Ok(Self::parse(s))
    }
}

impl Serialize for Intent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Intent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Ok(Self::parse(&s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sentence_the_old_engine_wrote_parses_to_its_intent() {
        let cases = [
            ("acquire claim", Intent::AcquireClaim),
            ("repair 2", Intent::Repair(2)),
            (
                "repair 1: propose Variant B, C",
                Intent::ProposeVariants {
                    repair: 1,
                    names: vec!["B".into(), "C".into()],
                },
            ),
            (
                "claim: add Variant B, C",
                Intent::ClaimAddVariants(vec!["B".into(), "C".into()]),
            ),
            ("cancel stuck run 17", Intent::CancelStuckRun(17)),
            ("cancel run 18", Intent::CancelRun(18)),
            ("re-run sweep 19", Intent::RerunSweep(19)),
            (
                "dispatch e2e-tests.yml",
                Intent::Dispatch("e2e-tests.yml".into()),
            ),
            ("comment smoke-1", Intent::Comment("smoke-1".into())),
            (
                "comment live report smoke-1",
                Intent::CommentLiveReport("smoke-1".into()),
            ),
            (
                "edit live report smoke-1",
                Intent::EditLiveReport("smoke-1".into()),
            ),
            (
                "remove label full-sweep",
                Intent::RemoveLabel("full-sweep".into()),
            ),
            (
                "mark ready for review before the sweep",
                Intent::ReadyBeforeSweep,
            ),
            ("mark ready for review", Intent::MarkReady),
            (
                "claim: experiment-state = Some(\"won\")",
                Intent::ClaimField {
                    field: "experiment-state".into(),
                    value: Some("won".into()),
                },
            ),
            (
                "claim: experiment-state = None",
                Intent::ClaimField {
                    field: "experiment-state".into(),
                    value: None,
                },
            ),
            (
                "claim: add candidate d92e15065c55779d-0123456789abcdef",
                Intent::ClaimAddCandidate("d92e15065c55779d-0123456789abcdef".into()),
            ),
        ];
        for (text, intent) in cases {
            assert_eq!(Intent::parse(text), intent, "{text}");
            assert_eq!(intent.to_string(), text);
        }
    }

    #[test]
    fn unknown_or_odd_sentences_round_trip_as_other() {
        for text in [
            "poke the bear",
            "repair 02",
            "repair two",
            "cancel run -1",
            "claim: x = Some(\"a\\u{1}\")",
            "",
        ] {
            let i = Intent::parse(text);
            assert_eq!(i, Intent::Other(text.into()), "{text}");
            assert_eq!(i.to_string(), text);
            let json = serde_json::to_string(&i).unwrap();
            assert_eq!(json, serde_json::to_string(text).unwrap());
        }
    }
}
