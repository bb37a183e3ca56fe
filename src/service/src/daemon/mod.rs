//! The long-running daemon (`klaud serve`): scheduled planner waves, the
//! reconcile loop, lease heartbeats and the dashboard.

pub mod schedule;
pub mod serve;
pub mod webhook;
