//! `klaud-service`: the long-running side of Klaud and the wiring of the
//! candidate lifecycle to the outside world. It owns the daemon with its
//! schedule, reconcile loop and webhook ([`daemon`]), the status dashboard
//! ([`dashboard`], [`status`]), the baseline API client ([`results_client`])
//! and the repair hook ([`repair_hook`]), and it connects the wave to
//! GitHub and the store: [`wave_adapters`] implements the ports of
//! `klaud_lifecycle::wave` (base checkout with the blob cache, the open
//! pull requests of [`overlap`], upstream ranges, the registry breaker) and
//! keeps `run_wave` / `run_wave_told`; [`pr_commands`] and [`recover`] are
//! thin adapters of `klaud_lifecycle::commands` and `klaud_lifecycle::recover`.
//!
//! It must never re-implement a rule another crate owns: repository
//! knowledge is `klaud-planner`'s, claims are `klaud-claims`', the candidate
//! state machine, the wave's phases, recovery, maintainer commands,
//! ownership proofs and reports are `klaud-lifecycle`'s, and every GitHub
//! call goes through `klaud-github`.
//!
//! Its async entry points return [`klaud_lifecycle::BoxFuture`]s, so the
//! binary crate does not compile the daemon and the wave again.

pub mod daemon;
pub mod dashboard;
pub mod dashboard_issue;
pub mod overlap;
pub mod pr_commands;
pub mod repair_hook;
pub mod results_client;
pub mod sick_nodes;
pub mod signoff;
pub mod status;
pub mod step_summary;
pub mod story;
pub mod wave_adapters;

/// Recovery of orphaned claims lives in the lifecycle crate; this path
/// stays for the CLI and the tests.
pub use klaud_lifecycle::recover;

pub use klaud_github::lifecycle::GithubLifecycle;
pub use klaud_store::journal::StoreJournal;
pub use repair_hook::{CheckoutSource, CommandHook};
pub use results_client::{HttpBaselineSource, NoBaseline};
pub use wave_adapters::{
    CandidateSummary, WaveError, WaveOptions, WaveSummary, materialize, restore_breaker,
    restore_conditional_pages, run_wave, run_wave_told, save_conditional_pages,
};
pub use wave_adapters::{base_checkout, base_checkout_from};
