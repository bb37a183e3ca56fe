//! Domain vocabulary of a candidate's life: outcomes, phases,
//! attempts and the checked record of a finished candidate.
//!
//! Everything here is serializable in the kebab-case spelling the hidden
//! report records use, and every parser of that spelling rejects unknown
//! values with an error that names them.

use std::fmt;
use std::str::FromStr;

use klaud_claims::PullNumber;
use klaud_render::Bilingual;
use serde::{Deserialize, Serialize};

pub use klaud_claims::CandidateId;

/// The workflow run of the Klaud session that owns a candidate (the
/// `run-id` of the claim record). Plain `u64`, as GitHub run ids are.
pub type OwnerRun = u64;

/// A spelling that is not one of the known values of a vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {found:?}; expected one of: {expected}")]
pub struct UnknownValue {
    /// Which vocabulary (`outcome`, `phase`, …).
    pub what: &'static str,
    /// The text found, shortened.
    pub found: String,
    /// The accepted spellings.
    pub expected: String,
}

macro_rules! vocabulary {
    ($(#[$meta:meta])* $name:ident, $what:literal, { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The kebab-case spelling used in records and reports.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownValue;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $name::ALL
                    .iter()
                    .copied()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| UnknownValue {
                        what: $what,
                        found: shorten(s, 60),
                        expected: $name::ALL.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(", "),
                    })
            }
        }
    };
}

vocabulary!(
    /// How a candidate ended.
    Outcome, "outcome", {
        /// The final sweep passed on the exact head; the PR is ready for review.
        Validated => "validated",
        /// No GPU capacity; try again in a later wave.
        CapacityDeferred => "capacity-deferred",
        /// The repository was not ready: the published baseline of the
        /// family's current image is missing or lacks points (`baseline-unavailable`,
        /// `baseline-incomplete`), or the results API knows no display name
        /// for its model prefix (`baseline-model-unknown`), before any GPU work.
        ReadinessBlocked => "readiness-blocked",
        /// The candidate image cannot run this family (platform, engine).
        Incompatible => "incompatible",
        /// Another PR already proposes this image.
        Duplicate => "duplicate",
        /// The family no longer exists on the base branch.
        Retired => "retired",
        /// The base branch already carries the candidate image.
        AlreadyUpdated => "already-updated",
        /// Klaud cannot tell what happened (e.g. lost runs).
        Uncertain => "uncertain",
        /// The smoke or final sweep failed and no repair fixed it.
        Failed => "failed",
        /// A maintainer took over (label or foreign commit).
        Handoff => "handoff",
        /// Anything else, including ownership mismatches and recovery.
        UnexpectedError => "unexpected-error",
    }
);

vocabulary!(
    /// Where in its life a candidate was when it ended.
    Phase, "phase", {
        /// Resolving and preparing the candidate.
        Resolve => "resolve",
        /// Freezing the baseline.
        Baseline => "baseline",
        /// Targeted smoke attempts and repairs.
        Targeted => "targeted",
        /// The final full sweep.
        FinalSweep => "final-sweep",
        /// Cleaning up after an unsuccessful end.
        Cleanup => "cleanup",
        /// Not known (recovery of a candidate whose journal is lost).
        Unknown => "unknown",
    }
);

vocabulary!(
    /// State of one attempt.
    AttemptStatus, "attempt status", {
        /// Dispatched, not started.
        Queued => "queued",
        /// Started.
        Running => "running",
        /// Completed successfully.
        Passed => "passed",
        /// Completed with a real failure.
        Failed => "failed",
        /// Cancelled.
        Cancelled => "cancelled",
        /// Postponed (capacity).
        Deferred => "deferred",
    }
);

impl AttemptStatus {
    /// The status as a report header says it, in both languages.
    pub fn words(self) -> Bilingual {
        let zh = match self {
            AttemptStatus::Queued => "排队中",
            AttemptStatus::Running => "运行中",
            AttemptStatus::Passed => "通过",
            AttemptStatus::Failed => "失败",
            AttemptStatus::Cancelled => "已取消",
            AttemptStatus::Deferred => "已推迟",
        };
        Bilingual::new(self.as_str(), zh)
    }

    /// Whether the attempt can no longer change.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            AttemptStatus::Passed
                | AttemptStatus::Failed
                | AttemptStatus::Cancelled
                | AttemptStatus::Deferred
        )
    }
}

/// Default number of repairs a candidate may use.
pub const DEFAULT_REPAIR_BUDGET: u32 = 5;
/// Infrastructure retries allowed per attempt; they never count as repairs.
pub const MAX_INFRA_RETRIES: u32 = 2;

/// Which attempt a run belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum AttemptKind {
    /// The first smoke: `Initial smoke, repair 0/<budget>`.
    Initial {
        /// The repair budget.
        budget: u32,
    },
    /// A smoke after repair `n`: `Repair n/<budget>`.
    Repair {
        /// Which repair, from 1.
        n: u32,
        /// The repair budget.
        budget: u32,
    },
    /// A re-run after an infrastructure failure: "Infrastructure retry n".
    InfraRetry {
        /// Which retry of the attempt, from 1.
        n: u32,
    },
    /// The final full sweep.
    FinalSweep,
}

impl AttemptKind {
    /// The title used in report headers, e.g. `Repair 2/5` / `修复 2/5`.
    pub fn titles(&self) -> Bilingual {
        match *self {
            AttemptKind::Initial { budget } => Bilingual::owned(
                format!("Initial smoke, repair 0/{budget}"),
                format!("初始冒烟测试，修复 0/{budget}"),
            ),
            AttemptKind::Repair { n, budget } => {
                Bilingual::owned(format!("Repair {n}/{budget}"), format!("修复 {n}/{budget}"))
            }
            AttemptKind::InfraRetry { n } => Bilingual::owned(
                format!("Infrastructure retry {n}"),
                format!("基础设施重试 {n}"),
            ),
            AttemptKind::FinalSweep => Bilingual::new("Final full sweep", "最终完整 sweep"),
        }
    }

    /// The English title, e.g. `Repair 2/5`.
    pub fn title(&self) -> String {
        self.titles().en.into_owned()
    }

    /// The phase this attempt belongs to.
    pub fn phase(&self) -> Phase {
        match self {
            AttemptKind::FinalSweep => Phase::FinalSweep,
            _ => Phase::Targeted,
        }
    }
}

impl fmt::Display for AttemptKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.title())
    }
}

/// A person closed a candidate's PR without merging: "not this image".
/// The family is not bumped to this image again, and is bumped to a newer
/// one when it appears (see `klaud_planner::ignore`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Declined {
    /// The closed PR.
    pub pull: PullNumber,
    /// Who closed it.
    pub by: String,
    /// The family id the candidate's claim used (a family group's too).
    pub family: String,
    /// The image without its digest, `repository:tag` normalized.
    pub image: String,
}

impl Declined {
    /// The declined image of a candidate image (`repository:tag`,
    /// normalized, the digest dropped); `None` without a tag.
    pub fn image_of(image: &str) -> Option<String> {
        let parsed = klaud_planner::image::ImageRef::parse(image).ok()?;
        Some(format!(
            "{}:{}",
            parsed.normalized_repository(),
            parsed.tag()?
        ))
    }

    /// The plan's rule for it.
    pub fn rule(&self) -> klaud_planner::ignore::IgnoreRule {
        use klaud_planner::ignore::{IgnoreRule, IgnoreSource, IgnoreTarget};
        IgnoreRule {
            target: IgnoreTarget::FamilyImage {
                family: self.family.clone(),
                image: self.image.clone(),
            },
            reason: "closed without merging: not this image".to_owned(),
            source: IgnoreSource::ClosedPull {
                number: self.pull.get(),
                by: self.by.clone(),
            },
        }
    }
}

/// One workflow run attempt Klaud owns.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RunRef {
    /// GitHub run id.
    pub id: u64,
    /// Run attempt, from 1.
    pub attempt: u32,
    /// The run's HTML URL.
    pub url: String,
}

impl RunRef {
    /// The web page of this attempt: GitHub's run `html_url` always names
    /// the latest attempt, a rerun's earlier attempts live at
    /// `…/attempts/<n>`.
    pub fn attempt_url(&self) -> String {
        if self.attempt > 1 {
            format!(
                "{}/attempts/{}",
                self.url.trim_end_matches('/'),
                self.attempt
            )
        } else {
            self.url.clone()
        }
    }
}

/// Why a finished result was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResultError {
    /// `validated` without everything it requires.
    #[error("outcome validated needs {0}")]
    ValidatedIncomplete(&'static str),
}

/// The checked record of a finished candidate: the rule "validated needs
/// phase final-sweep, a PR and at least one run" holds for every value, also
/// for one deserialized from a hidden record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "FinishedFields")]
pub struct FinishedResult {
    outcome: Outcome,
    phase: Phase,
    #[serde(rename = "pull-request")]
    pull_request: Option<PullNumber>,
    runs: Vec<RunRef>,
    repairs: u32,
}

#[derive(Deserialize)]
struct FinishedFields {
    outcome: Outcome,
    phase: Phase,
    #[serde(rename = "pull-request")]
    pull_request: Option<PullNumber>,
    runs: Vec<RunRef>,
    repairs: u32,
}

impl TryFrom<FinishedFields> for FinishedResult {
    type Error = ResultError;

    fn try_from(f: FinishedFields) -> Result<Self, Self::Error> {
        FinishedResult::new(f.outcome, f.phase, f.pull_request, f.runs, f.repairs)
    }
}

impl FinishedResult {
    /// Checks the outcome rules and builds the result.
    pub fn new(
        outcome: Outcome,
        phase: Phase,
        pull_request: Option<PullNumber>,
        runs: Vec<RunRef>,
        repairs: u32,
    ) -> Result<Self, ResultError> {
        if outcome == Outcome::Validated {
            if phase != Phase::FinalSweep {
                return Err(ResultError::ValidatedIncomplete("phase final-sweep"));
            }
            if pull_request.is_none() {
                return Err(ResultError::ValidatedIncomplete("a pull request"));
            }
            if runs.is_empty() {
                return Err(ResultError::ValidatedIncomplete("at least one run"));
            }
        }
        Ok(Self {
            outcome,
            phase,
            pull_request,
            runs,
            repairs,
        })
    }

    /// How it ended.
    pub fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// Where it ended.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The PR number, if one was opened.
    pub fn pull_request(&self) -> Option<PullNumber> {
        self.pull_request
    }

    /// Every run Klaud owned for the candidate, in dispatch order.
    pub fn runs(&self) -> &[RunRef] {
        &self.runs
    }

    /// Repairs used.
    pub fn repairs(&self) -> u32 {
        self.repairs
    }
}

/// Cuts hostile text for error messages.
pub(crate) fn shorten(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> RunRef {
        RunRef {
            id: 35570778795,
            attempt: 1,
            url: "https://github.com/o/r/actions/runs/35570778795".into(),
        }
    }

    #[test]
    fn outcomes_and_phases_use_kebab_case_both_ways() {
        for o in Outcome::ALL {
            let json = serde_json::to_string(o).expect("serialize");
            assert_eq!(json, format!("\"{}\"", o.as_str()));
            assert_eq!(o.as_str().parse::<Outcome>(), Ok(*o));
        }
        assert_eq!(Outcome::UnexpectedError.as_str(), "unexpected-error");
        assert_eq!(Outcome::CapacityDeferred.as_str(), "capacity-deferred");
        assert_eq!(Phase::FinalSweep.to_string(), "final-sweep");
        let err = "Validated".parse::<Outcome>().unwrap_err();
        assert!(
            err.to_string().contains("unknown outcome \"Validated\""),
            "{err}"
        );
        assert!(serde_json::from_str::<Phase>("\"final_sweep\"").is_err());
    }

    #[test]
    fn a_rerun_links_its_own_attempt() {
        let mut r = run();
        assert_eq!(r.attempt_url(), r.url);
        r.attempt = 2;
        assert_eq!(r.attempt_url(), format!("{}/attempts/2", r.url));
    }

    #[test]
    fn attempt_titles_follow_the_spec() {
        assert_eq!(
            AttemptKind::Initial { budget: 5 }.title(),
            "Initial smoke, repair 0/5"
        );
        assert_eq!(
            AttemptKind::Repair { n: 2, budget: 5 }.title(),
            "Repair 2/5"
        );
        assert_eq!(
            AttemptKind::InfraRetry { n: 1 }.title(),
            "Infrastructure retry 1"
        );
        assert_eq!(AttemptKind::FinalSweep.title(), "Final full sweep");
        let json = serde_json::to_string(&AttemptKind::Repair { n: 1, budget: 5 }).unwrap();
        assert_eq!(json, r#"{"kind":"repair","n":1,"budget":5}"#);
    }

    #[test]
    fn validated_requires_final_sweep_pr_and_run() {
        let ok = FinishedResult::new(
            Outcome::Validated,
            Phase::FinalSweep,
            Some(PullNumber::from(3222)),
            vec![run()],
            0,
        );
        assert!(ok.is_ok());
        assert_eq!(
            FinishedResult::new(
                Outcome::Validated,
                Phase::Targeted,
                Some(PullNumber::from(1)),
                vec![run()],
                0
            ),
            Err(ResultError::ValidatedIncomplete("phase final-sweep"))
        );
        assert_eq!(
            FinishedResult::new(Outcome::Validated, Phase::FinalSweep, None, vec![run()], 0),
            Err(ResultError::ValidatedIncomplete("a pull request"))
        );
        assert_eq!(
            FinishedResult::new(
                Outcome::Validated,
                Phase::FinalSweep,
                Some(PullNumber::from(1)),
                vec![],
                0
            ),
            Err(ResultError::ValidatedIncomplete("at least one run"))
        );
        assert!(FinishedResult::new(Outcome::Failed, Phase::Resolve, None, vec![], 0).is_ok());
    }

    #[test]
    fn deserializing_a_finished_result_rechecks_the_rule() {
        let good = FinishedResult::new(
            Outcome::Validated,
            Phase::FinalSweep,
            Some(PullNumber::from(7)),
            vec![run()],
            1,
        )
        .expect("valid");
        let json = serde_json::to_string(&good).expect("serialize");
        assert_eq!(
            serde_json::from_str::<FinishedResult>(&json).expect("parse"),
            good
        );
        let forged =
            r#"{"outcome":"validated","phase":"targeted","pull-request":7,"runs":[],"repairs":0}"#;
        let err = serde_json::from_str::<FinishedResult>(forged).unwrap_err();
        assert!(err.to_string().contains("outcome validated needs"), "{err}");
    }
}
