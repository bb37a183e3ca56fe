//! `klaud candidate show|finish|handoff|retry ID`: look at one candidate of
//! this instance, end it now with the usual cleanup, hand it to a maintainer
//! (Klaud stops touching the PR and releases its claim), or let a finished
//! unsuccessful candidate's family be planned again before its cooldown
//! ends (the same rule as the `/klaud retry` PR command).

use std::path::{Path, PathBuf};

use clap::Subcommand;
use klaud_lifecycle::engine::{CandidateRecord, Journal, Progress};
use klaud_lifecycle::model::Outcome;

use super::CliError;
use crate::compose::{Connection, EngineParts, connect, engine_config};
use klaud_service::{GithubLifecycle, StoreJournal};
use klaud_store::Store;

/// Arguments of `klaud candidate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Print the journal record of a candidate (no GitHub access).
    Show {
        /// Candidate id (`<family id>-<image id>`).
        id: String,
        /// Configuration file (for `daemon.store`).
        #[arg(long, value_name = "FILE", env = "KLAUD_CONFIG")]
        config: Option<PathBuf>,
        /// The local store directory.
        #[arg(long, value_name = "PATH")]
        store: Option<PathBuf>,
    },
    /// End an unfinished candidate now: cleanup, receipt, claim released.
    Finish {
        /// Candidate id.
        id: String,
        /// The outcome to record: `handoff` (an operator's decision, the
        /// default), `failed` or `unexpected-error`.
        #[arg(long, default_value = "handoff")]
        outcome: String,
        #[command(flatten)]
        connection: Connection,
    },
    /// Hand a candidate to a maintainer: Klaud changes nothing on its PR or
    /// branch any more and releases its claim.
    Handoff {
        /// Candidate id.
        id: String,
        #[command(flatten)]
        connection: Connection,
    },
    /// Lift the cooldown of a finished, unsuccessful candidate's family so
    /// the next wave plans it again (no GitHub access).
    Retry {
        /// Candidate id.
        id: String,
        /// Why (kept with the request).
        #[arg(long, default_value = "")]
        reason: String,
        /// Configuration file (for `daemon.store`).
        #[arg(long, value_name = "FILE", env = "KLAUD_CONFIG")]
        config: Option<PathBuf>,
        /// The local store directory.
        #[arg(long, value_name = "PATH")]
        store: Option<PathBuf>,
    },
}

/// Runs the command.
pub fn run(args: Args) -> Result<(), CliError> {
    let runtime = super::runtime()?;
    runtime.block_on(async {
        match args.action {
            Action::Show { id, config, store } => {
                let config = super::load_config(config.as_deref(), Path::new("."))?;
                let store = store.unwrap_or_else(|| PathBuf::from(&config.daemon.store));
                let journal = StoreJournal::new(Store::open(&store).map_err(CliError::failure)?);
                let rec = load(&journal, &id).await?;
                let mut text = serde_json::to_string_pretty(&rec).map_err(anyhow::Error::from)?;
                text.push('\n');
                super::emit(&text);
                Ok(())
            }
            Action::Finish {
                id,
                outcome,
                connection,
            } => {
                let outcome = match outcome.parse::<Outcome>() {
                    Ok(o @ (Outcome::Handoff | Outcome::Failed | Outcome::UnexpectedError)) => o,
                    _ => {
                        return Err(CliError::bad_input(anyhow::anyhow!(
                            "--outcome {outcome:?}: use handoff (the default), failed or \
                             unexpected-error"
                        )));
                    }
                };
                end(&connection, &id, outcome, false).await
            }
            Action::Handoff { id, connection } => {
                end(&connection, &id, Outcome::Handoff, true).await
            }
            Action::Retry {
                id,
                reason,
                config,
                store,
            } => {
                let config = super::load_config(config.as_deref(), Path::new("."))?;
                let store = store.unwrap_or_else(|| PathBuf::from(&config.daemon.store));
                let journal = StoreJournal::new(Store::open(&store).map_err(CliError::failure)?);
                let rec = load(&journal, &id).await?;
                match klaud_service::pr_commands::request_retry(
                    journal.store(),
                    &klaud_claims::SystemClock,
                    &rec,
                    "operator",
                    &reason,
                )
                .await
                .map_err(CliError::failure)?
                {
                    Ok(text) => {
                        super::emit(&format!("{text}\n"));
                        Ok(())
                    }
                    Err(refusal) => Err(CliError::bad_input(anyhow::anyhow!(refusal))),
                }
            }
        }
    })
}

async fn load(journal: &StoreJournal, id: &str) -> Result<CandidateRecord, CliError> {
    journal
        .load(id)
        .await
        .map_err(CliError::failure)?
        .ok_or_else(|| {
            CliError::bad_input(anyhow::anyhow!(
                "candidate {id} is not in this instance's journal; `klaud wave` rebuilds it from GitHub"
            ))
        })
}

async fn end(
    connection: &Connection,
    id: &str,
    outcome: Outcome,
    hands_off: bool,
) -> Result<(), CliError> {
    let session = connect(connection).await?;
    let mut rec = load(&session.journal, id).await?;
    let parts = EngineParts::load(
        &session.forge,
        &session.config,
        engine_config(&session.config, rec.owner_run),
        Some(session.journal.store()),
    )
    .await?;
    let lifecycle = GithubLifecycle::new(&session.forge);
    let clock = session.clock();
    let engine = parts.engine(
        &lifecycle,
        &session.journal,
        &clock,
        session.claimant.clone(),
    );
    // The receipt names the operator, as `klaud claims release` does.
    let by = ["GITHUB_ACTOR", "USER", "LOGNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.trim().is_empty()))
        .unwrap_or_else(|| "an operator".to_owned());
    let by: String = by.chars().filter(|c| !c.is_control()).collect();
    let message = if hands_off {
        format!("handed to a maintainer by operator {by} (klaud candidate handoff)")
    } else {
        format!("ended by operator {by} (klaud candidate finish)")
    };
    engine
        .end_now(&mut rec, outcome, message, hands_off)
        .await
        .map_err(CliError::failure)?;
    match engine
        .drive(&mut rec, 64)
        .await
        .map_err(CliError::failure)?
    {
        Progress::Done(ending) => {
            let outcome = ending.map_or_else(|| "done".to_owned(), |e| e.outcome.to_string());
            super::emit(&format!("{id}: {outcome}\n"));
            Ok(())
        }
        other => Err(CliError::failure(anyhow::anyhow!(
            "{id} did not finish: {other:?}"
        ))),
    }
}
