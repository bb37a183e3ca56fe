//! A candidate as the plan chose it, and the branch named for it: what a
//! record is made from and rebuilt to, kept apart from the engine's
//! configuration so that the journal, the experiments and the wave name
//! a target without depending on either.

use crate::report::UpstreamRange;
use klaud_claims::CandidateId;

/// A candidate chosen by the planner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Family string.
    pub family: String,
    /// Candidate id.
    pub candidate: CandidateId,
    /// The pinned candidate image.
    pub image: String,
    /// The image's revision label.
    pub revision: Option<String>,
    /// The clock that ordered the tags.
    pub clock: Option<String>,
    /// Why a nightly rather than a release, when so.
    pub not_release_reason: Option<String>,
    /// Upstream source commits between the old and the new image, when a
    /// source repository is configured and both commits are known.
    pub upstream: Option<UpstreamRange>,
    /// Toolkit and engine versions the old and new image declare, when the
    /// candidate's config was read by the planner.
    pub versions: Option<crate::report::VersionsCompared>,
    /// The experiment variant this candidate is, if it is one.
    pub variant: Option<crate::experiment::variant::VariantInfo>,
}

/// What every candidate branch's name starts with.
pub const BRANCH_PREFIX: &str = "klaud/auto-";

/// `klaud/auto-<candidate>`.
pub fn branch_name(candidate: &str) -> String {
    format!("{BRANCH_PREFIX}{candidate}")
}
