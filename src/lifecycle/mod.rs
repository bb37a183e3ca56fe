//! The candidate lifecycle wired to the outside world: the lifecycle forge
//! over GitHub, the journal on disk, the baseline source over HTTP, the
//! repair hook as a command, and the wave that drives them.

pub mod baseline;
pub mod commands;
pub mod forge;
pub mod journal;
pub mod recover;
pub mod repair;
pub mod status;
pub mod wave;

pub use baseline::{HttpBaselineSource, NoBaseline};
pub use forge::GithubLifecycle;
pub use journal::StoreJournal;
pub use repair::CommandHook;
pub use wave::base_checkout;
pub use wave::{CandidateSummary, WaveError, WaveOptions, WaveSummary, materialize, run_wave};
