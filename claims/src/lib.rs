//! `klaud-claims` owns claim refs: the record format shared with the existing
//! InferenceX helper (plus Klaud's owner, lease and fence), and the acquire,
//! renew, release and takeover rules, over a small ref-store trait.
//!
//! It must never overwrite a claim it cannot prove is its own or expired, and
//! never delete a claim it cannot parse.

pub mod claim;
pub mod memory;
pub mod names;
pub mod record;
pub mod store;

pub use claim::{
    Acquire, ClaimBook, ClaimEntry, ClaimError, ClaimParseError, Claimant, Clock, HeldClaim, Lost,
    ManualClock, PlanningBlocked, Release, Renew, RunStatus, RunStatusError, SystemClock, Takeover,
    TakeoverRefusal, ensure_plannable,
};
pub use memory::MemoryRefStore;
pub use names::{CandidateId, FamilyId, IdError};
pub use record::{ClaimCandidate, ClaimRecord, RecordError};
pub use store::{RefStore, RefStoreError, RefTip};
