//! `klaud-claims` owns claim refs: the record format shared with the existing
//! InferenceX helper (plus Klaud's owner, lease and fence), and the acquire,
//! renew, release and takeover rules, over a small ref-store trait.
//!
//! It must never overwrite a claim it cannot prove is its own or expired, and
//! never delete a claim it cannot parse.

pub mod store;

pub use store::{RefStore, RefStoreError, RefTip};
