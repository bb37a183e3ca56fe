//! The composition root: every subcommand that acts on a repository
//! builds its parts here, from the configuration and the connection flags:
//! the GitHub forge (identity preflight), the store and journal, this
//! instance's claimant and owner run, the clock, the engine settings, the
//! baseline source and the repair hook. No lifecycle rule lives here; it
//! only wires the crates together.

use std::path::PathBuf;

use klaud_claims::Claimant;
use klaud_lifecycle::baseline::BaselineSource;
use klaud_lifecycle::engine::{EngineConfig, RepairHook};

use crate::cli::CliError;
use crate::config::{Config, GithubConfig};
use klaud_github::{Credential, ForgeConfig, Github, GithubError, RetryPolicy, UserInfo};
use klaud_service::{CommandHook, HttpBaselineSource, NoBaseline, StoreJournal};
use klaud_store::Store;

/// Where and as whom (the flags every repository subcommand shares).
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
    /// GitHub App credentials (instead of a token).
    #[command(flatten)]
    pub auth: crate::auth::AuthArgs,
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

/// Everything a lifecycle command needs, connected and checked.
pub struct Session {
    /// The configuration.
    pub config: Config,
    /// The forge (identity preflight passed).
    pub forge: Github,
    /// The journal.
    pub journal: StoreJournal,
    /// This instance.
    pub claimant: Claimant,
    /// The owner run of this process.
    pub owner_run: u64,
    /// The credential (for upstream reads).
    pub credential: Credential,
    /// Whose the credential is (the bot, unless connected read-only).
    pub identity: klaud_github::UserInfo,
    /// This machine's clock (the system's: a process is not a test).
    pub base_clock: &'static dyn klaud_claims::Clock,
}

impl Session {
    /// The clock leases are written and compared on: this machine's,
    /// corrected to GitHub's time.
    pub fn clock(&self) -> klaud_github::GithubClock<'_> {
        self.forge.clock_on(self.base_clock)
    }
}

/// What a command does on GitHub: writers must be the bot login; readers
/// may use any credential that can read the repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Writes: the identity preflight must pass.
    Write,
    /// Reads only: any credential, and the command says whose it is.
    Read,
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
    connect_for(c, Access::Write).await
}

/// The configuration file with the connection's overrides applied.
pub fn load_config(c: &Connection) -> Result<Config, CliError> {
    let mut config = crate::cli::load_config(c.config.as_deref(), std::path::Path::new("."))?;
    if let Some(api) = &c.github_api {
        url::Url::parse(api).map_err(|e| {
            CliError::bad_input(anyhow::anyhow!("--github-api {api:?} is not a URL: {e}"))
        })?;
        config.github.api_url = api.clone();
    }
    if let Some(repo) = &c.repo {
        config.github.repository = Some(repo.clone());
    }
    c.auth.apply(&mut config.github);
    Ok(config)
}

/// The GitHub client for `repo` as `github.bot_login` with `credential`,
/// before any request: every command that talks to GitHub builds its
/// client here, so retries, the write timeout and the write pace are one
/// rule (a command that only reads never writes, so its pace costs
/// nothing).
pub fn github_client(
    github: &GithubConfig,
    repo: &str,
    credential: Credential,
) -> Result<Github, GithubError> {
    Ok(Github::connect_unchecked(ForgeConfig {
        api_url: github.api_url.clone(),
        repo: repo.to_owned(),
        bot_login: github.bot_login.clone(),
        credential,
        retry: RetryPolicy::default(),
    })?
    .with_write_timeout(github.write_timeout)
    .with_write_pace(github.write_pace()))
}

/// Whose the client's credential is: for [`Access::Write`] the identity
/// preflight (it must be the bot login), for [`Access::Read`] whoever it is.
pub async fn identify(forge: &Github, access: Access) -> Result<UserInfo, GithubError> {
    match access {
        Access::Write => forge.preflight().await,
        Access::Read => forge.identity().await,
    }
}

/// Connects a forge for `repo` with the configured token or App; `access`
/// says whether the identity must be the bot login.
pub async fn forge_for(
    config: &Config,
    repo: &str,
    access: Access,
) -> Result<(Github, Credential, UserInfo), CliError> {
    let auth = crate::auth::Auth::required(&config.github)
        .map_err(|e| CliError::bad_input(anyhow::anyhow!(e)))?;
    let credential = auth
        .credential(&config.github.api_url, repo)
        .await
        .map_err(|e| crate::cli::github_failure(e, "GitHub credential"))?;
    let forge = github_client(&config.github, repo, credential.clone())
        .map_err(|e| crate::cli::github_failure(e, "GitHub client"))?;
    let identity = identify(&forge, access)
        .await
        .map_err(|e| crate::cli::github_failure(e, "identity preflight"))?;
    Ok((forge, credential, identity))
}

/// [`connect`], choosing whether the identity must be the bot login.
pub async fn connect_for(c: &Connection, access: Access) -> Result<Session, CliError> {
    let instance_id = parse_instance_id(c.instance_id.as_deref())?;
    let config = load_config(c)?;
    let repo = config.github.repository.clone().ok_or_else(|| {
        CliError::bad_input(anyhow::anyhow!(
            "no repository: pass --repo OWNER/NAME or set github.repository"
        ))
    })?;
    let (forge, credential, identity) = forge_for(&config, &repo, access).await?;
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
        credential,
        identity,
        base_clock: &klaud_claims::SystemClock,
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
    e.authorize_reuse = l.authorize_reuse;
    e.sweep_runs_on_drafts = l.sweep_runs_on_drafts;
    e.on_human_overlap = l.on_human_overlap;
    e.require_baseline = l.require_baseline;
    e.live_report_interval = chrono::TimeDelta::from_std(l.live_report_interval)
        .ok()
        .filter(|d| !d.is_zero());
    e.model_names = l.model_names.clone();
    e.playbook = l.playbook.clone();
    if let Ok(lease) = chrono::TimeDelta::from_std(config.daemon.lease) {
        e.lease = lease;
    }
    if let Ok(margin) = chrono::TimeDelta::from_std(config.daemon.lease_margin) {
        e.lease_margin = margin;
    }
    if let Ok(timeout) = chrono::TimeDelta::from_std(config.github.write_timeout) {
        e.write_timeout = timeout;
    }
    e.repo = config.repo_options();
    e.bump = config.bump_options();
    e.capacity = config
        .capacity
        .as_ref()
        .map(|c| std::sync::Arc::new(c.gate()));
    // Checked when the configuration was loaded.
    e.experiments = config.experiment_specs().unwrap_or_default();
    e.hunt = config.hunt.settings();
    e
}

/// The baseline source from the configuration; the display names it finds
/// are kept in `store` when one is given (a short-lived process then does
/// not ask for them again).
pub fn baseline(
    config: &Config,
    store: Option<&Store>,
) -> Result<Box<dyn BaselineSource>, CliError> {
    if config.lifecycle.baseline_api.trim().is_empty() {
        return Ok(Box::new(NoBaseline));
    }
    let source = HttpBaselineSource::new(&config.lifecycle.baseline_api)
        .map_err(|e| CliError::bad_input(anyhow::anyhow!(e)))?;
    Ok(Box::new(match store {
        Some(store) => source.with_store(store.clone()),
        None => source,
    }))
}

/// What an engine outside a wave needs, owned: the configuration's engine
/// settings, a checkout of the base branch, the baseline source and the
/// repair hook (`klaud recover`, `klaud candidate`, `klaud claims release`).
pub struct EngineParts {
    config: EngineConfig,
    base: klaud_claims::CommitSha,
    _checkout: tempfile::TempDir,
    repository: klaud_planner::repo::Repository,
    baseline: Box<dyn BaselineSource>,
    hook: Option<CommandHook>,
    /// A regression hunt's tags, from the configured registries (as in a
    /// wave), so a hunt goes on when a candidate is stepped or recovered
    /// by hand.
    hunt_tags: klaud_lifecycle::hunt::RegistryHuntTags,
}

impl EngineParts {
    /// Reads the base branch (blobs from `cache` when given) and builds the
    /// baseline source and repair hook from `config`.
    pub async fn load(
        forge: &Github,
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
            baseline: baseline(config, cache)?,
            hook: repair_hook(config)?,
            hunt_tags: klaud_lifecycle::hunt::RegistryHuntTags {
                registry: klaud_planner::registry::RegistryClient::new(
                    crate::cli::registry_config(config, &[])?,
                )
                .map_err(CliError::bad_input)?,
            },
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
        )
        .with_hunt_tags(&self.hunt_tags);
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
    let hook = CommandHook::new(
        config.lifecycle.repair_command.clone(),
        config.lifecycle.repair_timeout,
    )
    .map(|h| h.with_api_base(&config.github.api_url))
    .map_err(|e| CliError::bad_input(anyhow::anyhow!("lifecycle.repair_command: {e}")))?;
    let (Some(repository), false) = (
        config.github.repository.as_deref(),
        config.lifecycle.repair_checkout_dir.trim().is_empty(),
    ) else {
        return Ok(Some(hook));
    };
    // The token's variable, not the token: the checkout reads it when it
    // fetches (a GitHub App's installation token is not in the
    // environment; such a checkout fetches anonymously).
    let token_env = config
        .github
        .token_from(|name| std::env::var(name))
        .ok()
        .flatten()
        .map(|t| t.variable);
    Ok(Some(hook.with_checkout(klaud_service::CheckoutSource {
        root: std::path::PathBuf::from(&config.lifecycle.repair_checkout_dir),
        clone_url: format!("{}.git", config.github.repository_web_url(repository)),
        token_env,
    })))
}

#[cfg(test)]
mod tests {
    use super::parse_instance_id;

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
        assert_eq!(err.code, crate::cli::EXIT_BAD_INPUT);
        assert!(err.error.to_string().contains("KLAUD_INSTANCE_ID"));
    }
}
