//! `klaud-claims` owns claim refs: the record format shared with the existing
//! InferenceX helper (plus Klaud's owner, lease and fence), and the acquire,
//! renew, release and takeover rules, over a small ref-store trait.
//!
//! It must never overwrite a claim it cannot prove is its own or expired, and
//! never delete a claim it cannot parse.
//!
//! Design: a claim is `refs/heads/klaud/claim-<family id>` pointing at a
//! commit (base tree, base parent) whose message is the [`ClaimRecord`].
//! Every write is a GitHub-side compare-and-swap: acquiring creates the ref
//! (an existing ref means occupied), renewing and taking over fast-forward it
//! from the tip that was read, so of concurrent writers exactly one wins.
//! Takeovers raise the `fence`, which the lifecycle's ownership checks
//! compare before every mutation. Release is read-check-delete: GitHub has no
//! conditional delete, see [`ClaimBook::release`]. Time comes from an
//! injected [`Clock`], the state of old-helper runs from [`RunCompletion`].
//!
//! The [`ClaimBook`]'s async methods return boxed futures, compiled once
//! here rather than again in every crate that awaits them (see
//! `klaud_lifecycle::BoxFuture`).

pub mod claim;
pub mod memory;
pub mod names;
pub mod record;
pub mod store;

pub use claim::{
    Acquire, ClaimBook, ClaimEntry, ClaimError, ClaimParseError, Claimant, Clock, HeldClaim, Lost,
    ManualClock, PlanningBlocked, Release, Renew, RunCompletion, RunCompletionError, ShiftedClock,
    SystemClock, Takeover, TakeoverRefusal, ensure_plannable,
};
pub use memory::MemoryRefStore;
pub use names::{
    CLAIM_REF_PREFIX, CandidateId, CommitSha, CommitShaError, FamilyId, IdError, PullNumber,
    RECOVERY_REF_PREFIX, is_coordination_ref,
};
pub use record::{ClaimCandidate, ClaimRecord, RecordError};
pub use store::{RefStore, RefStoreError, RefTip};
