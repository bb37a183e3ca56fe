//! Command-line interface. One file per command; this module only parses
//! arguments and maps errors to exit codes.

pub mod sandbox;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit code for success.
pub const EXIT_OK: u8 = 0;
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
    /// Serve the GitHub simulator with a seeded repository on loopback.
    Sandbox(sandbox::Args),
}

/// Parses the command line, runs the command and returns the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result: Result<(), CliError> = match cli.command {
        Command::Sandbox(args) => sandbox::run(args),
    };
    match result {
        Ok(()) => ExitCode::from(EXIT_OK),
        Err(err) => {
            eprintln!("error: {:#}", err.error);
            ExitCode::from(err.code)
        }
    }
}
