//! The nine steps of a candidate's life, one file each, in the order the
//! `Step` of its record names them:
//!
//! claim → prepare → open → baseline → smoke ⇄ repair → final (`final_sweep`)
//! → sweep (→ repair → smoke …) → finish
//!
//! Each step is a free function `run(cx, rec)` over the step context (the
//! [`Engine`](crate::engine::Engine): forge, journal, clock, configuration)
//! and the candidate's record (`finish` first runs a regression hunt when
//! one is due: `Engine::hunt_before_finish`); it returns a [`Progress`](crate::engine::Progress)
//! and never sleeps. `drive` picks the step; each file's first lines say
//! where the step sits, what it reads and what it may write.

pub(super) mod baseline;
pub(super) mod claim;
pub(super) mod final_sweep;
pub(super) mod finish;
pub(super) mod open;
pub(super) mod prepare;
pub(super) mod repair;
pub(super) mod smoke;
pub(super) mod sweep;
