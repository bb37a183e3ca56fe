//! `klaud wave`: one planner wave now — preflight (the token must be the bot),
//! this instance's leftovers first, then plan, claim and drive every
//! candidate as far as it can go; print a summary. Running it again resumes
//! and never duplicates anything. Its parts come from [`crate::compose`].

use std::path::PathBuf;

use klaud_lifecycle::engine::RepairHook;
use klaud_planner::plan::{CreationTimes, PlanOptions};
use klaud_planner::registry::RegistryClient;

use super::CliError;
use crate::compose::{Connection, baseline, connect, engine_config, repair_hook};
use crate::config::parse_duration;
use klaud_github::upstream::GithubUpstream;
use klaud_service::wave_adapters::{WaveOptions, run_wave};

/// Arguments of `klaud wave`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    connection: Connection,
    /// Use another base URL for a registry host, e.g. `docker.io=http://127.0.0.1:5000`.
    #[arg(long = "mirror", value_name = "HOST=URL")]
    mirrors: Vec<String>,
    /// At most this many new candidates (overrides `planner.max_candidates`).
    #[arg(long, value_name = "N")]
    max: Option<usize>,
    /// Keep polling running workflows this long before returning (a later
    /// wave resumes), e.g. `30m`.
    #[arg(long, default_value = "0s")]
    wait: String,
    /// Poll interval while waiting.
    #[arg(long, default_value = "30s")]
    poll: String,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Append a Markdown summary (one table per candidate: outcome, phase,
    /// reason, PR, repairs, runs) to this file; inside GitHub Actions the
    /// default is `$GITHUB_STEP_SUMMARY`, the job's summary page.
    #[arg(long, value_name = "PATH", env = "GITHUB_STEP_SUMMARY")]
    step_summary: Option<PathBuf>,
    /// A local git checkout of the base branch (in Actions: the job's own
    /// `actions/checkout`) to read the repository from instead of
    /// downloading it; its HEAD must be the base branch's head commit.
    #[arg(long, value_name = "PATH")]
    checkout: Option<PathBuf>,
}

/// Appends the step summary; a summary that cannot be written is logged,
/// not a failed wave (the wave's work is done and recorded).
fn write_step_summary(
    path: &std::path::Path,
    summary: &klaud_service::WaveSummary,
    brief: &[String],
) {
    use std::io::Write as _;
    let result = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| {
            f.write_all(klaud_service::step_summary::render(summary, brief).as_bytes())
        });
    if let Err(e) = result {
        tracing::warn!(path = %path.display(), error = %e, "step summary not written");
    }
}

/// Runs the command.
pub fn run(args: Args) -> Result<(), CliError> {
    let wait = parse_duration(&args.wait)
        .map_err(|e| CliError::bad_input(anyhow::anyhow!("--wait: {e}")))?;
    let poll = crate::config::parse_interval(&args.poll, crate::config::MIN_INTERVAL)
        .map_err(|e| CliError::bad_input(anyhow::anyhow!("--poll: {e}")))?;
    let runtime = super::runtime()?;
    runtime.block_on(async {
        let session = connect(&args.connection).await?;
        // The budget after the identity preflight: the pass's cost is what
        // it spends from here.
        let mut requests = super::wave_report::Requests {
            before: session.forge.rate_budget(),
            after: None,
        };
        let config = &session.config;
        let registry = super::plan::registry_config(config, &args.mirrors)?;
        let client = RegistryClient::new(registry).map_err(CliError::bad_input)?;
        klaud_service::restore_breaker(&client, session.journal.store());
        // A light Actions pass is a new process with the store kept: the
        // last pass's answers make unchanged reads free 304s.
        klaud_service::restore_conditional_pages(&session.forge, session.journal.store());
        let baseline = baseline(config, Some(session.journal.store()))?;
        let hook = repair_hook(config)?;
        // Upstream reads (the release proof, the bump's commit range) use
        // the same token; public repositories only.
        let upstream = (!config.upstream.is_empty()).then(|| {
            GithubUpstream::new(&config.github.api_url, session.credential.clone())
                .with_audit(config.audit.options())
        });
        let records = klaud_lifecycle::engine::Journal::list(&session.journal)
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "journal not readable; closed PRs it knows are not ruled out");
                Vec::new()
            });
        let config_rules = config.ignore_rules().map_err(CliError::bad_input)?;
        let track_rules = config.track_rules().map_err(CliError::bad_input)?;
        let release_rules = config.release_rules().map_err(CliError::bad_input)?;
        // The wave runs inside one visit of the dashboard issue: its ticked
        // boxes steer the plan, and it shows the wave's end. A dashboard
        // that cannot be read stops no wave, but holds its planning.
        let visit = klaud_service::dashboard_issue::Visit {
            base_branch: config.lifecycle.base_branch.clone(),
            cooldown: config.planner.cooldown,
            web_dashboard: None,
            wave: true,
            playbook: config.lifecycle.playbook.clone(),
            repo: config.repo_options(),
            cache: Some(session.journal.store().clone()),
        };
        let (summary, issue, _) = klaud_service::dashboard_issue::around_wave(
            &session.forge,
            &session.journal,
            session.base_clock,
            visit,
            async |steering| {
                let mut plan = PlanOptions::new(session.base_clock.now());
                plan.ignore = klaud_service::dashboard_issue::rules_in_force(
                    &config_rules,
                    Some(steering),
                    &records,
                );
                plan.run_first = steering.run_first();
                plan.min_age = config.planner.min_age;
                plan.max_candidates = args.max.unwrap_or(config.planner.max_candidates);
                plan.rules = track_rules;
                plan.release_rules = release_rules;
                plan.upstream = config.upstream.clone();
                plan.max_timed_tags = config.registry.max_timed_tags;
                plan.creation_times = Some(session.journal.store() as &dyn CreationTimes);
                plan.compare = upstream
                    .as_ref()
                    .map(|u| u as &dyn klaud_planner::plan::UpstreamCompare);
                let options = WaveOptions {
                    lifecycle: klaud_lifecycle::wave::WaveSettings {
                        claimant: session.claimant.clone(),
                        engine: klaud_lifecycle::engine::EngineConfig {
                            dashboard_issue: steering.number(),
                            undone_declines: steering.undone_declines(),
                            ..engine_config(config, session.owner_run)
                        },
                        plan,
                        poll,
                        wait,
                        cooldown: config.planner.cooldown,
                        stop: None,
                    },
                    upstream: upstream.as_ref(),
                    cache: Some(session.journal.store()),
                    checkout: args.checkout.as_deref(),
                    clock: session.base_clock,
                };
                run_wave(
                    &session.forge,
                    &session.journal,
                    &client,
                    baseline.as_ref(),
                    hook.as_ref().map(|h| h as &dyn RepairHook),
                    options,
                )
                .await
            },
        )
        .await;
        if let Some(issue) = issue {
            tracing::info!(url = %issue.html_url, "dashboard issue");
        }
        klaud_service::save_conditional_pages(&session.forge, session.journal.store());
        if let Err(e) = session.journal.store().flush().await {
            tracing::warn!(error = %e, "store not flushed; the next run re-reads from GitHub");
        }
        let summary = summary.map_err(|e| match e {
            // What the user named is wrong: the repository or the checkout.
            klaud_service::WaveError::NoRepository(_)
            | klaud_service::WaveError::CheckoutMismatch(_) => CliError::bad_input(e),
            e => CliError::failure(e),
        })?;
        requests.after = session.forge.rate_budget();
        let brief = super::wave_report::brief(&summary, &requests);
        if let Some(path) = args
            .step_summary
            .as_deref()
            .filter(|p| !p.as_os_str().is_empty())
        {
            write_step_summary(path, &summary, &brief);
        }
        let mut brief_text = brief.join("\n");
        brief_text.push('\n');
        if args.json {
            let mut text = serde_json::to_string_pretty(&summary).map_err(anyhow::Error::from)?;
            text.push('\n');
            super::emit(&text);
            // stdout is the JSON (a file, in the shipped workflow): the
            // log gets the lines.
            eprint!("{brief_text}");
        } else if super::output::quiet() {
            super::emit(&brief_text);
        } else {
            super::emit(&format!(
                "{}\n{brief_text}",
                super::wave_report::table(&summary)
            ));
        }
        // A scheduled job must not stay green when nothing could be done.
        if let Some(cause) = &summary.stopped_by {
            return Err(CliError::failure(anyhow::anyhow!(
                "every candidate of this wave stopped: {cause}"
            )));
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    #[derive(clap::Parser)]
    struct Wave {
        #[command(flatten)]
        args: super::Args,
    }

    #[test]
    fn a_zero_or_negative_poll_is_refused_before_anything_connects() {
        use clap::Parser;
        for poll in ["0s", "0m", "-30s"] {
            let flag = format!("--poll={poll}");
            let wave = Wave::try_parse_from(["wave", flag.as_str()]).expect("flags");
            let err = super::run(wave.args).expect_err(poll);
            let text = format!("{:#}", err.error);
            assert!(text.contains("--poll"), "{poll}: {text}");
            assert!(
                text.contains("at least 1s") || text.contains("negative"),
                "{poll}: {text}"
            );
        }
    }
}
