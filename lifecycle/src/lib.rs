//! `klaud-lifecycle` owns the candidate state machine: ownership proofs,
//! attempts, reports and receipts, finish and recovery, over a forge trait and
//! a journal trait.
//!
//! It must never mutate anything on the forge without an ownership proof.

pub mod artifacts;
pub mod baseline;
pub mod commands;
pub mod model;
pub mod report;
