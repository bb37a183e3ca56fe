//! Recovery of orphaned claims now lives in the lifecycle crate
//! ([`klaud_lifecycle::recover`]); this path stays for the CLI and tests.

pub use klaud_lifecycle::recover::*;
