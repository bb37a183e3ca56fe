//! The structured playbook: known failures of benchmark jobs, recognised
//! from their logs, with a diagnosis and, where one is safe, a fix.
//!
//! The benchmark repository keeps the playbook as a YAML file (the format is
//! `configs/playbook.md`); [`Playbook::parse`] reads it with every error
//! naming the file, the entry and the field. Everything here is pure: the
//! caller reads the job's log (bounded) and the family's script, and writes
//! whatever [`Fix::apply`] returns.
//!
//! - [`normalize`]: job log lines made comparable across runs, nodes and
//!   families ([`JobLogView`], [`LogSignature`]).
//! - [`triage`](triage()): one failed job classified as infrastructure, a
//!   known engine failure, a known setup failure, teardown noise after a
//!   finished benchmark window, or unknown.
//! - [`Fix`]: the safe vocabulary (one launch argument, one environment
//!   variable), applied byte-exactly to a script; [`Fix::infer`] reads a
//!   script change back as one.
//! - [`sick`]: the failed jobs of Klaud's runs grouped by node and
//!   signature, across families and days.
//! - [`propose_entry`]: a playbook entry learned from a failure that a
//!   change fixed, as YAML to paste under `entries:`.

mod context;
mod fix;
mod learn;
mod model;
pub mod normalize;
mod parse;
pub mod sick;
mod triage;
mod version;

pub use context::family_context;
pub use fix::{Applied, FixError};
pub use learn::{FailedRun, LearnInput, Proposal, line_pattern, propose_entry};
pub use model::{
    Class, Diagnosis, Entry, Fix, JobContext, Playbook, Scope, SeenOn, SickNode, Signature,
};
pub use normalize::{JobLogView, LogLine, LogSignature};
pub use parse::{FORMAT_VERSION, Limits, PlaybookError, PlaybookErrors};
pub use triage::{
    MAX_MATCHED_LINE_CHARS, MAX_MATCHED_LINES, Match, MatchedLine, Triage, log_node, matches,
    triage, window_end,
};
pub use version::{VersionRange, VersionRangeError};

/// Where the benchmark repository keeps its playbook unless the
/// configuration says otherwise.
pub const DEFAULT_PATH: &str = ".github/klaud-playbook.yaml";
