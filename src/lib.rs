//! Klaud: the binary's library. It owns the command line, configuration, the
//! GitHub forge (octocrab), the local store, the daemon, the dashboard and the
//! sandbox. Repository knowledge lives in `klaud-planner`, claim logic in
//! `klaud-claims`, the candidate lifecycle in `klaud-lifecycle`; this crate
//! wires them to the outside world and must never re-implement their rules.

pub mod cli;
pub mod config;
pub mod daemon;
pub mod dashboard;
pub mod github;
pub mod lifecycle;
pub mod logging;
pub mod sandbox;
pub mod store;
