//! What the sign-off test binaries share: the repository's files, read in
//! place from `../shared/fixtures/inferencex/` (never copied in).

use std::path::{Path, PathBuf};

/// The fixture folder when it holds the sign-off files and the full
/// checkout; without them a test skips loudly, and fails when `CI` is set.
pub fn fixtures() -> Option<PathBuf> {
    let dir = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/inferencex"
    ));
    if dir.join("signoff/seed-001-pr-thread.txt").is_file()
        && dir.join("signoff/newer").is_dir()
        && dir.join("full").is_dir()
    {
        return Some(dir.to_path_buf());
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "InferenceX fixtures missing at {} (required when CI is set)",
        dir.display()
    );
    eprintln!(
        "SKIPPED: InferenceX fixtures not found at {}",
        dir.display()
    );
    None
}
