//! Command-line interface. One file per command; this module only parses
//! arguments and maps errors to exit codes.

#[cfg(feature = "sandbox")]
pub mod demo;
#[cfg(feature = "sandbox")]
pub mod sandbox;
pub mod serve;
pub mod signoff;
pub mod wave;
mod wave_report;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bump;
mod candidate;
mod claims;
mod doctor;
mod families;
mod init;
pub mod output;
mod plan;
pub(crate) use plan::registry_config;
mod recover;
mod status;
pub mod story;
pub mod table;

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

    /// The error and its causes on one line, each said once.
    pub fn message(&self) -> String {
        error_text(&self.error)
    }
}

/// `error: cause: cause`, like anyhow's `{:#}`, but a cause whose text the
/// line already ends with is left out: Klaud's errors end their message
/// with their source's (the engine and the daemon show errors by their
/// message alone), so the whole chain would say it twice.
fn error_text(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let part = cause.to_string();
        if text.is_empty() {
            text = part;
        } else if !text.ends_with(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
    }
    text
}

/// A GitHub error as a command failure: a credential, identity or request
/// the user must fix is bad input (2); GitHub or the network failing is a
/// failure (1).
pub(crate) fn github_failure(e: klaud_github::GithubError, context: &str) -> CliError {
    use klaud_github::GithubError as G;
    let input = matches!(
        e,
        G::IdentityMismatch { .. }
            | G::Unauthorized { .. }
            | G::NotFound { .. }
            | G::Config(_)
            | G::Rejected { .. }
    );
    let error = anyhow::Error::new(e).context(context.to_owned());
    if input {
        CliError::bad_input(error)
    } else {
        CliError::failure(error)
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
    version = crate::version::LINE,
    about = "Keeps the container images of a GPU-inference benchmark repository fresh"
)]
struct Cli {
    /// Log format on stderr (default: `github` inside GitHub Actions, else `human`).
    #[arg(long, global = true, value_enum, value_name = "FORMAT")]
    log_format: Option<crate::logging::LogFormat>,
    /// Print less: a command's verdict and counts without its long tables
    /// and lists (errors and warnings still show).
    #[arg(long, short, global = true)]
    quiet: bool,
    /// Print tables as wide as their cells instead of fitting them into
    /// 100 columns (long cells are elided in the middle, text wraps).
    #[arg(long, global = true)]
    wide: bool,
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
    #[cfg(feature = "sandbox")]
    Sandbox(sandbox::Args),
    /// Run the whole lifecycle against an in-process sandbox and print the outcomes.
    #[cfg(feature = "sandbox")]
    Demo(demo::Args),
    /// The daemon: scheduled waves, reconcile loop, lease heartbeats and the dashboard.
    Serve(serve::Args),
    /// One planner wave now: recover own leftovers, plan, claim and drive candidates.
    Wave(wave::Args),
    /// One candidate: show its record, finish it now, or hand it to a maintainer.
    Candidate(candidate::Args),
    /// Recover orphaned claims now: expired leases and finished old-helper runs.
    Recover(recover::Args),
    /// Claims, candidates, recent outcomes and open Klaud PRs (`--json`: the dashboard snapshot).
    Status(status::Args),
    /// Check configuration, token, repository, registries and store without changing anything.
    Doctor(doctor::Args),
    /// Write a `klaud.toml` that fits this checkout, each choice explained.
    Init(init::Args),
    /// Verify a CODEOWNER sign-off on a pull request and publish the verdict and status.
    Signoff(signoff::Args),
}

/// Parses the command line, runs the command and returns the process exit code.
pub fn main() -> ExitCode {
    // Before any client is built: reqwest has no TLS provider of its own.
    klaud_http::install();
    let cli = Cli::parse();
    let log_format = cli
        .log_format
        .unwrap_or_else(crate::logging::LogFormat::detect);
    crate::logging::init(log_format);
    output::set(output::Output {
        quiet: cli.quiet,
        wide: cli.wide,
    });
    let result = match cli.command {
        Command::Families(args) => families::run(args),
        Command::Bump(args) => bump::run(args),
        Command::Plan(args) => plan::run(args),
        #[cfg(feature = "sandbox")]
        Command::Sandbox(args) => sandbox::run(args),
        Command::Claims(args) => claims::run(args),
        #[cfg(feature = "sandbox")]
        Command::Demo(args) => demo::run(args),
        Command::Wave(args) => wave::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Candidate(args) => candidate::run(args),
        Command::Recover(args) => recover::run(args),
        Command::Status(args) => status::run(args),
        Command::Doctor(args) => doctor::run(args),
        Command::Init(args) => init::run(args),
        Command::Signoff(args) => signoff::run(args),
    };
    match result {
        Ok(()) => ExitCode::from(EXIT_OK),
        Err(err) => {
            let message = err.message();
            eprintln!("error: {message}");
            if log_format == crate::logging::LogFormat::Github {
                eprintln!("::error::{}", crate::logging::annotation_escape(&message));
            }
            ExitCode::from(err.code)
        }
    }
}

/// `--checkout PATH`: the local checkout a command reads (families, bump,
/// plan). Every command spells a GitHub repository `--repo OWNER/NAME`, so
/// `--repo` with a path is refused with the new spelling.
#[derive(Debug, Clone, clap::Args)]
pub struct LocalCheckout {
    /// Path of the benchmark repository checkout.
    #[arg(long, value_name = "PATH", default_value = ".")]
    checkout: std::path::PathBuf,
    /// Refused: `--repo` is `OWNER/NAME` on GitHub in every command.
    #[arg(long, value_name = "PATH", hide = true)]
    repo: Option<String>,
}

impl LocalCheckout {
    /// The checkout directory, or bad input for the old `--repo PATH`.
    pub fn path(&self) -> Result<&std::path::Path, CliError> {
        match &self.repo {
            None => Ok(&self.checkout),
            Some(value) => Err(CliError::bad_input(anyhow::anyhow!(
                "--repo is a GitHub repository (OWNER/NAME) in every command; for a local \
                 checkout pass --checkout {value}"
            ))),
        }
    }
}

/// The configuration file a command reads: the one `--config` (or
/// `$KLAUD_CONFIG`) names, else the one `klaud doctor` finds under `dir`
/// (said on stderr, since nothing on the command line names it), else
/// none: the built-in defaults apply.
pub(crate) fn config_path(
    named: Option<&std::path::Path>,
    dir: &std::path::Path,
) -> Option<std::path::PathBuf> {
    if let Some(path) = named {
        return Some(path.to_owned());
    }
    let found = crate::config::find_config(dir)?;
    if !output::quiet() {
        eprintln!(
            "configuration: {} (found; --config FILE reads another)",
            found.strip_prefix(".").unwrap_or(&found).display()
        );
    }
    Some(found)
}

/// The configuration [`config_path`] finds, or the defaults.
pub(crate) fn load_config(
    named: Option<&std::path::Path>,
    dir: &std::path::Path,
) -> Result<crate::config::Config, CliError> {
    match config_path(named, dir) {
        Some(path) => Ok(crate::config::Config::load(&path)?),
        None => Ok(crate::config::Config::default()),
    }
}

/// The multi-threaded async runtime a command runs on.
fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            CliError::failure(anyhow::Error::new(e).context("cannot start the async runtime"))
        })
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

#[cfg(test)]
mod tests {
    use super::error_text;

    #[test]
    fn the_global_flags_clash_with_no_command_s_own() {
        use clap::CommandFactory as _;
        super::Cli::command().debug_assert();
    }

    #[test]
    fn a_cause_the_message_already_ends_with_is_said_once() {
        let claim = klaud_claims::ClaimError::Store {
            action: "read",
            ref_name: "refs/heads/klaud/claim-d92e15065c55779d".into(),
            source: klaud_claims::RefStoreError::Other("HTTP 502".into()),
        };
        assert_eq!(
            error_text(&anyhow::Error::new(claim)),
            "could not read refs/heads/klaud/claim-d92e15065c55779d: ref store: HTTP 502"
        );
        let wrapped = anyhow::Error::new(std::io::Error::other("disk full")).context("open store");
        assert_eq!(error_text(&wrapped), "open store: disk full");
    }
}
