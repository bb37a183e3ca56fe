//! `klaud wave`: one planner wave now — preflight (the token must be the bot),
//! this instance's leftovers first, then plan, claim and drive every
//! candidate as far as it can go; print a summary. Running it again resumes
//! and never duplicates anything.

use std::path::PathBuf;
use std::time::Duration;

use klaud_claims::Claimant;
use klaud_lifecycle::baseline::BaselineSource;
use klaud_lifecycle::engine::{EngineConfig, RepairHook};
use klaud_planner::plan::{CreationTimes, PlanOptions};
use klaud_planner::registry::RegistryClient;

use super::CliError;
use crate::config::{Config, parse_duration};
use klaud_github::upstream::GithubUpstream;
use klaud_github::{Credential, Forge, ForgeConfig, RetryPolicy};
use klaud_service::wave::{WaveOptions, render_summary, run_wave};
use klaud_service::{CommandHook, HttpBaselineSource, NoBaseline, StoreJournal};
use klaud_store::Store;

/// Where and as whom (shared by `wave` and `candidate`).
#[derive(Debug, Clone, clap::Args)]
pub struct Connection {
    /// GitHub REST API base URL (overrides `github.api_url`).
    #[arg(long, value_name = "URL")]
    pub github_api: Option<String>,
    /// The benchmark repository, OWNER/NAME (overrides `github.repository`).
    #[arg(long, value_name = "OWNER/NAME")]
    pub repo: Option<String>,
    /// Configuration file (`klaud.toml`); defaults apply without one.
    #[arg(long, value_name = "FILE", env = "KLAUD_CONFIG")]
    pub config: Option<PathBuf>,
    /// The local store directory (overrides `daemon.store`).
    #[arg(long, value_name = "PATH")]
    pub store: Option<PathBuf>,
    /// This instance's id (default: made once and kept in the store). Runs
    /// with an ephemeral store — scheduled Actions waves — must all pass the
    /// same one, or each run is a new instance whose candidates the next run
    /// recovers as orphans.
    #[arg(long, value_name = "UUID", env = "KLAUD_INSTANCE_ID")]
    pub instance_id: Option<String>,
}

/// `--instance-id` / `KLAUD_INSTANCE_ID`: empty means unset.
pub(crate) fn parse_instance_id(text: Option<&str>) -> Result<Option<uuid::Uuid>, CliError> {
    match text.map(str::trim).filter(|t| !t.is_empty()) {
        None => Ok(None),
        Some(t) => uuid::Uuid::parse_str(t).map(Some).map_err(|e| {
            CliError::bad_input(anyhow::anyhow!(
                "--instance-id / KLAUD_INSTANCE_ID {t:?} is not a UUID ({e}); make one with \
                 `uuidgen` and keep it"
            ))
        }),
    }
}

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
}

/// Everything a lifecycle command needs, connected and checked.
pub struct Session {
    /// The configuration.
    pub config: Config,
    /// The forge (identity preflight passed).
    pub forge: Forge,
    /// The journal.
    pub journal: StoreJournal,
    /// This instance.
    pub claimant: Claimant,
    /// The owner run of this process.
    pub owner_run: u64,
    /// The credential (for upstream reads).
    pub credential: Credential,
}

/// The owner run: the Actions run this wave runs in, else the start time.
pub(crate) fn owner_run() -> u64 {
    std::env::var("GITHUB_RUN_ID")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| u64::try_from(chrono::Utc::now().timestamp()).unwrap_or(1))
}

/// Loads the configuration, connects (identity preflight) and opens the store.
pub async fn connect(c: &Connection) -> Result<Session, CliError> {
    let instance_id = parse_instance_id(c.instance_id.as_deref())?;
    let mut config = match &c.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    if let Some(api) = &c.github_api {
        config.github.api_url = api.clone();
    }
    if let Some(repo) = &c.repo {
        config.github.repository = Some(repo.clone());
    }
    let repo = config.github.repository.clone().ok_or_else(|| {
        CliError::bad_input(anyhow::anyhow!(
            "no repository: pass --repo OWNER/NAME or set github.repository"
        ))
    })?;
    let token = config
        .github
        .token()
        .map_err(|e| CliError::bad_input(anyhow::anyhow!(e)))?
        .token;
    let forge = Forge::connect(ForgeConfig {
        api_url: config.github.api_url.clone(),
        repo,
        bot_login: config.github.bot_login.clone(),
        credential: Credential::Token(token.clone()),
        retry: RetryPolicy::default(),
    })
    .await
    .map_err(CliError::bad_input)?;
    let store = c
        .store
        .clone()
        .unwrap_or_else(|| PathBuf::from(&config.daemon.store));
    let journal = StoreJournal::new(Store::open(&store).map_err(CliError::failure)?);
    let owner = match instance_id {
        Some(id) => id,
        None => {
            let fresh = !journal.has_instance_id().map_err(CliError::failure)?;
            if fresh && std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true") {
                tracing::warn!(
                    "this run is a new Klaud instance (a fresh store and no KLAUD_INSTANCE_ID): \
                     the next run will take the candidates it starts for orphans and end them \
                     as unexpected-error; set KLAUD_INSTANCE_ID to a fixed UUID"
                );
            }
            journal.instance_id().await.map_err(CliError::failure)?
        }
    };
    let claimant = Claimant::new(owner);
    Ok(Session {
        config,
        forge,
        journal,
        claimant,
        owner_run: owner_run(),
        credential: Credential::Token(token),
    })
}

/// The engine settings from the configuration.
pub fn engine_config(config: &Config, owner_run: u64) -> EngineConfig {
    let mut e = EngineConfig::new(owner_run);
    let l = &config.lifecycle;
    e.base_branch = l.base_branch.clone();
    e.sweep_label = l.sweep_label.clone();
    if !e.managed_labels.contains(&l.sweep_label) {
        e.managed_labels.push(l.sweep_label.clone());
    }
    e.repair_budget = l.repair_budget;
    e.post_use_comment = l.use_comment;
    e.sweep_runs_on_drafts = l.sweep_runs_on_drafts;
    e.on_human_overlap = l.on_human_overlap;
    e.model_names = l.model_names.clone();
    if let Ok(lease) = chrono::TimeDelta::from_std(config.daemon.lease) {
        e.lease = lease;
    }
    e.repo = config.repo_options();
    e.bump = config.bump_options();
    e
}

/// The baseline source from the configuration.
pub fn baseline(config: &Config) -> Result<Box<dyn BaselineSource>, CliError> {
    if config.lifecycle.baseline_api.trim().is_empty() {
        return Ok(Box::new(NoBaseline));
    }
    Ok(Box::new(
        HttpBaselineSource::new(&config.lifecycle.baseline_api)
            .map_err(|e| CliError::bad_input(anyhow::anyhow!(e)))?,
    ))
}

/// What an engine outside a wave needs, owned: the configuration's engine
/// settings, a checkout of the base branch, the baseline source and the
/// repair hook (`klaud recover`, `klaud candidate`, `klaud claims release`).
pub struct EngineParts {
    config: EngineConfig,
    base: String,
    _checkout: tempfile::TempDir,
    repository: klaud_planner::repo::Repository,
    baseline: Box<dyn BaselineSource>,
    hook: Option<CommandHook>,
}

impl EngineParts {
    /// Reads the base branch (blobs from `cache` when given) and builds the
    /// baseline source and repair hook from `config`.
    pub async fn load(
        forge: &Forge,
        config: &Config,
        engine: EngineConfig,
        cache: Option<&Store>,
    ) -> Result<Self, CliError> {
        let (base, checkout, repository) =
            klaud_service::base_checkout(forge, &engine.base_branch, &engine.repo, cache)
                .await
                .map_err(CliError::failure)?;
        Ok(Self {
            base,
            _checkout: checkout,
            repository,
            baseline: baseline(config)?,
            hook: repair_hook(config)?,
            config: engine,
        })
    }

    /// An engine over these parts.
    pub fn engine<'a>(
        &'a self,
        lifecycle: &'a klaud_service::GithubLifecycle<'a>,
        journal: &'a dyn klaud_lifecycle::engine::Journal,
        clock: &'a dyn klaud_claims::Clock,
        claimant: Claimant,
    ) -> klaud_lifecycle::engine::Engine<'a> {
        let engine = klaud_lifecycle::engine::Engine::new(
            lifecycle,
            journal,
            clock,
            claimant,
            self.baseline.as_ref(),
            &self.repository,
            self.base.clone(),
            &self.config,
        );
        match &self.hook {
            Some(hook) => engine.with_repair(hook as &dyn RepairHook),
            None => engine,
        }
    }
}

/// The repair hook from the configuration.
pub fn repair_hook(config: &Config) -> Result<Option<CommandHook>, CliError> {
    if config.lifecycle.repair_command.is_empty() {
        return Ok(None);
    }
    CommandHook::new(
        config.lifecycle.repair_command.clone(),
        Duration::from_secs(2 * 3600),
    )
    .map(Some)
    .map_err(|e| CliError::bad_input(anyhow::anyhow!("lifecycle.repair_command: {e}")))
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
        let config = &session.config;
        let registry = super::plan::registry_config(config, &args.mirrors)?;
        let client = RegistryClient::new(registry).map_err(CliError::bad_input)?;
        klaud_service::restore_breaker(&client, session.journal.store());
        let baseline = baseline(config)?;
        let hook = repair_hook(config)?;
        // Upstream reads (the release proof, the bump's commit range) use
        // the same token; public repositories only.
        let upstream = (!config.upstream.is_empty())
            .then(|| GithubUpstream::new(&config.github.api_url, session.credential.clone()));
        let mut plan = PlanOptions::new(chrono::Utc::now());
        plan.min_age = config.planner.min_age;
        plan.max_candidates = args.max.unwrap_or(config.planner.max_candidates);
        plan.rules = config
            .track_rules()
            .map_err(|(k, m)| CliError::bad_input(anyhow::anyhow!("{k}: {m}")))?;
        plan.release_rules = config
            .release_rules()
            .map_err(|(k, m)| CliError::bad_input(anyhow::anyhow!("{k}: {m}")))?;
        plan.upstream = config.upstream.clone();
        plan.max_timed_tags = config.registry.max_timed_tags;
        plan.creation_times = Some(session.journal.store() as &dyn CreationTimes);
        plan.compare = upstream
            .as_ref()
            .map(|u| u as &dyn klaud_planner::plan::UpstreamCompare);
        let options = WaveOptions {
            claimant: session.claimant.clone(),
            engine: engine_config(config, session.owner_run),
            plan,
            poll,
            wait,
            cooldown: config.planner.cooldown,
            upstream: upstream.as_ref(),
            cache: Some(session.journal.store()),
            stop: None,
        };
        let summary = run_wave(
            &session.forge,
            &session.journal,
            &client,
            baseline.as_ref(),
            hook.as_ref().map(|h| h as &dyn RepairHook),
            options,
        )
        .await
        .map_err(CliError::failure)?;
        if args.json {
            let mut text = serde_json::to_string_pretty(&summary).map_err(anyhow::Error::from)?;
            text.push('\n');
            super::emit(&text);
        } else {
            super::emit(&render_summary(&summary));
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::parse_instance_id;

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

    #[test]
    fn an_instance_id_is_a_uuid_and_empty_means_unset() {
        let id = "6f1c2b3a-4d5e-4f60-8a9b-0c1d2e3f4a5b";
        assert_eq!(
            parse_instance_id(Some(id))
                .ok()
                .flatten()
                .map(|u| u.to_string()),
            Some(id.to_owned())
        );
        assert!(matches!(parse_instance_id(Some("  ")), Ok(None)));
        assert!(matches!(parse_instance_id(None), Ok(None)));
        let err = parse_instance_id(Some("not-a-uuid")).expect_err("refused");
        assert_eq!(err.code, super::super::EXIT_BAD_INPUT);
        assert!(err.error.to_string().contains("KLAUD_INSTANCE_ID"));
    }
}
