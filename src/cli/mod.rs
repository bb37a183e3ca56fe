//! Command-line interface. One file per command; this module only parses
//! arguments and maps errors to exit codes.

pub mod sandbox;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bump;
mod claims;
mod families;
mod plan;

/// Exit code for success.
pub const EXIT_OK: u8 = 0;
/// Exit code for a failure that is not the input's fault (I/O, network).
pub const EXIT_FAILURE: u8 = 1;
/// Exit code for bad input or usage: the message says what to fix.
pub const EXIT_BAD_INPUT: u8 = 2;

/// A command failure with the exit code it maps to.
#[derive(Debug)]
pub struct CliError {
    pub code: u8,
    pub error: anyhow::Error,
}

impl CliError {
    /// Bad input or usage (exit code 2).
    pub fn bad_input(error: impl Into<anyhow::Error>) -> Self {
        Self {
            code: EXIT_BAD_INPUT,
            error: error.into(),
        }
    }
}

impl CliError {
    /// A failure that is not the input's fault (exit code 1).
    pub fn failure(error: impl Into<anyhow::Error>) -> Self {
        Self {
            code: EXIT_FAILURE,
            error: error.into(),
        }
    }
}

impl<E: Into<anyhow::Error>> From<E> for CliError {
    fn from(error: E) -> Self {
        Self::bad_input(error)
    }
}

#[derive(Debug, Parser)]
#[command(
    name = "klaud",
    version,
    about = "Keeps the container images of a GPU-inference benchmark repository fresh"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List every config family: id, image and platform.
    Families(families::Args),
    /// Apply Klaud's exact image edit (and changelog entry) to a local checkout.
    Bump(bump::Args),
    /// Dry run: which families are stale, their candidate images, and why.
    Plan(plan::Args),
    /// Claim refs on GitHub: list, acquire or release a family's claim.
    Claims(claims::Args),
    /// Serve the GitHub simulator with a seeded repository on loopback.
    Sandbox(sandbox::Args),
}

/// Parses the command line, runs the command and returns the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    let result = match cli.command {
        Command::Families(args) => families::run(args),
        Command::Bump(args) => bump::run(args),
        Command::Plan(args) => plan::run(args),
        Command::Sandbox(args) => sandbox::run(args),
        Command::Claims(args) => claims::run(args),
    };
    match result {
        Ok(()) => ExitCode::from(EXIT_OK),
        Err(err) => {
            eprintln!("error: {:#}", err.error);
            ExitCode::from(err.code)
        }
    }
}

/// Logs go to stderr; `RUST_LOG` filters them (default: warnings).
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Writes command output to stdout. A closed pipe (`klaud families | head`)
/// is the reader's choice, not an error worth a panic.
pub fn emit(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
}
