//! `klaud-lifecycle` owns the candidate state machine: ownership proofs,
//! attempts, reports and receipts, finish and recovery, over a forge trait and
//! a journal trait — and what drives it: the [`wave`] (recover orphans,
//! adopt held claims, plan, resume, refill, answer commands, drive,
//! summarize), [`recover`]y of orphaned claims and the handling of
//! maintainer [`commands`], generic over the lifecycle `Forge`, `Journal`
//! and the claims `Clock`.
//!
//! It must never mutate anything on the forge without an ownership proof,
//! and never depend on GitHub, the store or the service: what a wave needs
//! from them (the base checkout, the open pull requests, upstream ranges,
//! the registry breaker) comes through the small traits of
//! [`wave`]'s ports, which `klaud-service` implements.
//!
//! The pure parts, free of any I/O, are: [`hunt`] (the regression hunt's
//! binary search, its records and reports), [`model`] (outcomes, phases,
//! attempts), [`artifacts`] (bounded parsing of workflow artifacts),
//! [`baseline`] (the frozen baseline from published results), [`measured`]
//! (whether a run's result rows show the PR's image), [`report`]
//! (everything Klaud publishes and the parsers of its hidden markers) and
//! [`commands`] (maintainer PR commands and who may give them) and
//! [`workflow_contract`] (what the benchmark repository's workflow files say about
//! dispatch inputs, run titles and drafts, read by `klaud-workflows`). The
//! [`engine`] drives a candidate through its life over the forge and journal
//! traits; `engine::MemoryForge` (with the `testkit` feature),
//! [`engine::MemoryJournal`] and [`engine::ManualClock`] let every step be
//! tested without HTTP or sleeps.
//!
//! An [`engine::OwnershipProof`] is made only by the ownership check, is not
//! `Clone`, and authorizes writes only to the branch, pull request and run it
//! checked; a reply to a maintainer needs only the narrower
//! [`engine::ReplyPermit`].

pub mod artifacts;
pub mod baseline;
pub mod check_final;
pub mod commands;
pub mod dataset;
pub mod engine;
pub mod experiment;
pub mod hunt;
pub mod job_log;
pub mod measured;
pub mod model;
pub mod playbook;
pub mod recover;
pub mod report;
pub mod wave;
pub mod workflow_contract;

/// What the async entry points other crates call return: a boxed `Send`
/// future.
///
/// A release build shares no generic instances between crates, and the
/// body of an `async fn` counts as generic. Unboxed, every crate that
/// awaits one of these compiles its whole body again, and everything it
/// awaits (the whole engine, for a wave); the `klaud` binary crate ended
/// up compiling most of the workspace's async code a second time, alone at
/// the end of a cold build. Boxed, the body is compiled once, here.
pub use futures::future::BoxFuture;
