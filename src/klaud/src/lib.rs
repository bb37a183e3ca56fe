//! `klaud`: the command line and the one composition root. It owns the
//! CLI (clap), the configuration file and logging, and builds every other
//! crate's parts from them: the GitHub forge (`klaud-github`), the store
//! (`klaud-store`), the daemon and dashboard (`klaud-service`) and, behind
//! the default-on `sandbox` feature, the simulators (`klaud-sandbox`) for
//! `klaud demo` and `klaud sandbox`.
//!
//! It must never hold a lifecycle, claim or repository rule of its own: it
//! parses what a person typed, wires the crates together and maps errors to
//! exit codes. The design overview is `src/README.md`.

pub mod auth;
pub mod cli;
pub mod compose;
pub mod config;
pub mod logging;
pub mod version;
