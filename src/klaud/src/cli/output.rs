//! How much the CLI prints and how wide: `--quiet` and `--wide`, given once
//! on the command line and read by every command that prints a table or a
//! long report, so no command's arguments need to carry them.

use std::sync::OnceLock;

/// The output flags of this process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Output {
    /// `--quiet`: only what a script or a skimming reader needs.
    pub quiet: bool,
    /// `--wide`: tables as wide as their cells.
    pub wide: bool,
}

static OUTPUT: OnceLock<Output> = OnceLock::new();

/// Sets the flags; the first call wins (the command line is parsed once).
pub fn set(output: Output) {
    let _ = OUTPUT.set(output);
}

/// The flags (both off when never set, as for a command run from a test).
pub fn get() -> Output {
    OUTPUT.get().copied().unwrap_or_default()
}

/// Whether `--quiet` was given.
pub fn quiet() -> bool {
    get().quiet
}

/// The width tables fit in: [`super::table::WIDTH`], or none with `--wide`.
pub fn table_width() -> Option<usize> {
    (!get().wide).then_some(super::table::WIDTH)
}

/// A table fitted as the flags say.
pub fn table<R: AsRef<[String]>>(header: &[&str], rows: &[R]) -> String {
    super::table::render(header, rows, table_width())
}

/// A table fitted as the flags say, each column as `fits` says.
pub fn table_fitted<R: AsRef<[String]>>(
    header: &[&str],
    fits: &[super::table::Fit],
    rows: &[R],
) -> String {
    super::table::render_fitted(header, fits, rows, table_width())
}
