//! The race of an experiment's variants (see [`crate::experiment`]): the
//! shared claim, the concurrency bound, the one final sweep at a time, the
//! winner and the losers, the siblings section of each body, and the
//! release by the last sibling to finish. Not a step of its own: the drive
//! asks `experiment_gate` before a variant's step, and the steps ask for
//! their slot (final sweep, finish, release). One file per part, in the
//! order a variant meets them: `claim` (the shared claim), `gate` (before
//! each step), `section` (the siblings section of each body), `finish`
//! (the final sweep slot, the winner, the release), `grow` (`/klaud try`
//! adds variants), `propose` (the repair hook's variants).

mod claim;
mod finish;
mod gate;
mod grow;
mod propose;
mod section;

/// How often a compare-and-swap on the shared claim is tried again when a
/// sibling moved it in between.
pub(super) const CAS_ATTEMPTS: usize = 5;
