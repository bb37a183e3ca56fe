//! The candidate state machine (see configs/README.md#how-it-works, `klaud_lifecycle::engine::ownership`, `klaud_lifecycle::model`, `klaud_lifecycle::report`): claim → prepare → open →
//! baseline → smoke attempts → repairs → final → finish, over a [`Forge`]
//! and a [`Journal`].
//!
//! Every step first looks for its work already done, by deterministic name
//! (branch `klaud/auto-<candidate>`, the claim ref, the PR for the branch,
//! run titles) or by hidden marker (reports, receipts, the cleanup marker),
//! and continues from there; so a crash anywhere, a restart from the journal
//! or from an empty journal all converge on the same end without duplicate
//! branches, PRs, comments, labels or dispatches. Every mutation needs an
//! [`OwnershipProof`] from [`ownership::check`]; a mismatch ends the
//! candidate as `handoff` (label, foreign commit) or `unexpected-error`
//! without touching anything but Klaud's own claim.
//!
//! Within one step each pull request, comment list, run and ref is read
//! from GitHub once; the step's later looks at it (its ownership checks
//! among them) are answered from that read and the answers of Klaud's own
//! writes in the step (`step_reads`). Every step's first look reads GitHub
//! again, so what a person changed between two steps is always seen.
//!
//! [`Engine::step`] advances a candidate by one step and never sleeps:
//! while a run is going it answers [`Progress::Waiting`] and the caller
//! decides when to ask again.

mod asks;
mod attempt;
mod config;
mod context;
mod decline;
mod dispatch;
mod drive;
mod error;
mod experiment;
pub mod forge;
mod hunt;
pub mod intent;
pub mod journal;
mod learn;
mod listed;
mod live;
mod measured_image;
#[cfg(any(test, feature = "testkit"))]
pub mod memory;
pub mod ownership;
mod playbook_repair;
mod promise;
mod proof;
mod publish;
mod rebuild;
mod rebuild_done;
mod repair_hook;
mod resweep;
mod sick_note;
pub mod states;
mod step_reads;
mod steps;
pub(crate) mod target;
mod upkeep;
pub mod write;

pub use asks::{Permission, Refusal, TryRequest};
pub use config::{
    EngineConfig, HumanOverlap, changelog_entry, is_smoke_title, smoke_run_label, smoke_test_name,
};
pub use context::{Engine, Progress, Upkept};
pub use drive::KeptReads;
pub use error::EngineError;
pub use forge::{
    ArtifactInfo, AuthorAssociation, Comment, CompareStatus, ComparedCommit, Comparison,
    ErrorSource, Forge, ForgeError, Job, LeaseSeen, Permitted, ProofError, Pull, PullState, Run,
    RunConclusion, RunEvent, RunQuery, RunStatus, Write, Written,
};
pub use hunt::{HuntProgress, hunt_test_name, is_hunt_news};
pub use intent::Intent;
pub use journal::{
    AttemptRecord, CandidateRecord, Ending, Journal, JournalError, MemoryJournal,
    PendingBranchCommit, RetryRequest, ReuseAuthorization, Step, StoredClaim, Upkeep, Withdrawn,
};
pub use klaud_claims::ManualClock;
#[cfg(any(test, feature = "testkit"))]
pub use memory::MemoryForge;
pub use ownership::{
    Expectation, HANDOFF_LABEL, Mismatch, MismatchKind, OwnershipError, OwnershipProof,
    ReplyPermit, reply_permit,
};
pub use repair_hook::{
    REPAIR_INPUT_VERSION, RepairContext, RepairError, RepairHook, RepairOutcome,
};
pub use resweep::sweeps_again;
pub use target::{BRANCH_PREFIX, Target, branch_name};
pub use write::Writes;

#[cfg(test)]
mod tests;
