//! What `klaud --version` says: the version number and the commit the
//! binary was built from (see `build.rs`).

/// `commit <sha>`, `commit <sha>, uncommitted changes` or `commit unknown`.
pub const BUILD: &str = env!("KLAUD_BUILD");

/// `0.1.0 (commit <sha>)`: clap prints it after the program's name.
pub const LINE: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("KLAUD_BUILD"), ")");
