//! `klaud recover [--family F]`: recover orphaned claims now (see `klaud_lifecycle::model`) —
//! expired leases, and lease-less old-helper claims whose run completed.

use klaud_claims::{ClaimBook, Clock as _};
use klaud_lifecycle::engine::Journal;

use super::CliError;
use crate::compose::{Connection, EngineParts, connect, engine_config};
use klaud_github::ForgeRunCompletion;
use klaud_service::GithubLifecycle;
use klaud_service::recover::{
    RecoveryContext, finish_orphans, settle_recovery_leases, take_over_orphans,
};

/// Arguments of `klaud recover`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only this family (family id or `<master file>:<key>`).
    #[arg(long, value_name = "FAMILY")]
    family: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    connection: Connection,
}

/// Runs the command.
pub fn run(args: Args) -> Result<(), CliError> {
    let runtime = super::runtime()?;
    runtime.block_on(async {
        let session = connect(&args.connection).await?;
        let engine_cfg = engine_config(&session.config, session.owner_run);
        let clock = session.clock();
        let book = ClaimBook::new(&session.forge, &clock, session.claimant.clone());
        let runs = ForgeRunCompletion::new(&session.forge);
        let recovery = RecoveryContext {
            book: &book,
            runs: &runs,
            owner_run: session.owner_run,
            lease: engine_cfg.lease,
            now: clock.now(),
        };
        let failed = |e: klaud_claims::ClaimError| CliError::failure(anyhow::Error::new(e));
        let claims = book.list_claims().await.map_err(failed)?;
        let leases = book.list_recovery_leases().await.map_err(failed)?;
        // A family no claim names must at least be one of the repository's,
        // or a typo would read as "nothing to recover" and exit 0. A claim
        // of a family since removed from the repository still matches.
        let mut family = args.family.clone();
        if let Some(wanted) = &args.family
            && !names_family(&claims, &leases, wanted)
        {
            let id = super::claims::family_in_repository(&session.forge, wanted).await?;
            family = Some(id.to_string());
        }
        let journal = session.journal.list().await.map_err(CliError::failure)?;
        let journaled = journal.iter().map(|r| r.candidate.to_string()).collect();
        let (orphans, mut skipped) =
            take_over_orphans(&recovery, &claims, &leases, &journaled, family.as_deref()).await;
        let mut recovered = Vec::new();
        if !orphans.is_empty() {
            let parts = EngineParts::load(
                &session.forge,
                &session.config,
                engine_cfg.clone(),
                Some(session.journal.store()),
            )
            .await?;
            let lifecycle = GithubLifecycle::new(&session.forge);
            let engine = parts.engine(
                &lifecycle,
                &session.journal,
                &clock,
                session.claimant.clone(),
            );
            let report = finish_orphans(&engine, &book, &orphans, 64).await;
            recovered = report.recovered;
            skipped.extend(report.skipped);
        }
        // Stale leases of recoverers that died are swept here too.
        let journal = session.journal.list().await.map_err(CliError::failure)?;
        settle_recovery_leases(&recovery, &leases, &[], &claims, &journal).await;
        if args.json {
            let value = serde_json::json!({"recovered": recovered, "skipped": skipped});
            let mut text = serde_json::to_string_pretty(&value).map_err(anyhow::Error::from)?;
            text.push('\n');
            super::emit(&text);
        } else {
            let mut out = String::new();
            for r in &recovered {
                out.push_str(&format!(
                    "recovered {} (run {}): {} — {}\n",
                    r.candidate,
                    r.orphan_run,
                    r.outcome.as_deref().unwrap_or("unfinished"),
                    r.message
                ));
            }
            for (what, why) in &skipped {
                out.push_str(&format!("skipped {what}: {why}\n"));
            }
            if out.is_empty() {
                out.push_str("no claims to recover\n");
            }
            super::emit(&out);
        }
        Ok(())
    })
}

/// Whether any claim or recovery lease belongs to `wanted` (a family id or
/// family string), the way `take_over_orphans` matches them.
fn names_family(
    claims: &[klaud_claims::ClaimEntry],
    leases: &[klaud_claims::ClaimEntry],
    wanted: &str,
) -> bool {
    let by_claim = claims.iter().any(|entry| {
        entry.family().is_some_and(|f| f.as_str() == wanted)
            || entry
                .record
                .as_ref()
                .is_ok_and(|r| r.candidates.iter().any(|c| c.family == wanted))
    });
    let by_lease = leases.iter().any(|entry| {
        klaud_claims::CandidateId::from_recovery_ref(&entry.tip.name)
            .is_some_and(|(_, c)| c.family().as_str() == wanted)
    });
    by_claim || by_lease
}
