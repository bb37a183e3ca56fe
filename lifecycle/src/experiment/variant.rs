//! What a variant's record and its claim keep of its experiment: plain
//! records, so that the journal and the engine's configuration that hold
//! them need nothing of the experiment's planning and rendering in
//! [`crate::experiment`].

use klaud_claims::CandidateId;
use serde::{Deserialize, Serialize};

/// One variant of an experiment, as its siblings see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sibling {
    /// Variant name.
    pub name: String,
    /// Its candidate id.
    pub candidate: CandidateId,
    /// The variant it builds on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Its own edits.
    pub own: Vec<String>,
    /// Set when the repair hook proposed it (instead of a repair).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposed: Option<Proposal>,
}

/// Which failed attempt the repair hook answered by proposing a variant
/// (kept in the claim's sibling list, so it survives a lost journal and
/// the proposal is never made twice).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    /// The candidate whose attempt failed.
    pub by: CandidateId,
    /// Its variant name in the experiment.
    pub variant: String,
    /// The repair the hook was asked for (from 1).
    pub repair: u32,
    /// The failed attempt's title (`Initial smoke attempt`, `Repair 1/5`, …).
    pub attempt: String,
    /// The failed run's page, when there was a run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
}

impl Proposal {
    /// Whether this is the answer to repair `repair` of `candidate`.
    pub fn answers(&self, candidate: &CandidateId, repair: u32) -> bool {
        self.by == *candidate && self.repair == repair
    }
}

/// What makes a candidate a variant (kept in its journal record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VariantInfo {
    /// The experiment's name.
    pub experiment: String,
    /// This variant's name.
    pub name: String,
    /// The variant it builds on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Its own edits.
    pub own: Vec<String>,
    /// Inherited and own edits: what its commit applies.
    pub edits: Vec<String>,
    /// Every variant of the experiment, this one included, in order.
    pub siblings: Vec<Sibling>,
    /// How many variants may run (branch made, not finished) at once; 0:
    /// no bound.
    #[serde(default)]
    pub max_concurrent: u32,
    /// The candidate image the experiment started from (a variant without
    /// an `image` edit runs it).
    #[serde(default)]
    pub base_image: String,
}

impl VariantInfo {
    /// The other variants.
    pub fn others(&self) -> impl Iterator<Item = &Sibling> {
        self.siblings.iter().filter(move |s| s.name != self.name)
    }
}
