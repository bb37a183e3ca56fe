//! `klaud serve`: the daemon. Scheduled planner waves, a reconcile loop that
//! resumes this instance's candidates and renews their leases, the status
//! dashboard (and the webhook when a secret is configured) on loopback.
//! SIGTERM or SIGINT finishes the current step, flushes the store and exits,
//! leaving claims leased for another instance to take over after expiry.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use klaud_claims::Claimant;
use klaud_lifecycle::engine::{Journal, RepairHook};
use klaud_planner::registry::RegistryClient;
use tokio::sync::{Notify, watch};

use super::CliError;
use klaud_github::upstream::GithubUpstream;
use klaud_service::StoreJournal;
use klaud_service::daemon::schedule::WaveSchedule;
use klaud_service::daemon::serve::{
    Daemon, RepoService, ServeSettings, http_router, shutdown_on_signal,
};
use klaud_service::daemon::webhook::WebhookState;
use klaud_service::dashboard::check_listen;
use klaud_store::Store;

/// Arguments of `klaud serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Configuration file (`klaud.toml`); defaults apply without one.
    #[arg(long, value_name = "FILE", env = "KLAUD_CONFIG")]
    config: Option<PathBuf>,
    /// A benchmark repository, OWNER/NAME; repeat for several (overrides
    /// `github.repository`).
    #[arg(long, value_name = "OWNER/NAME")]
    repo: Vec<String>,
    /// GitHub REST API base URL (overrides `github.api_url`).
    #[arg(long, value_name = "URL")]
    github_api: Option<String>,
    /// The local store directory (overrides `daemon.store`). With several
    /// repositories each gets `<PATH>/<owner>/<name>`.
    #[arg(long, value_name = "PATH")]
    store: Option<PathBuf>,
    /// Dashboard address (overrides `daemon.dashboard_listen`).
    #[arg(long, value_name = "ADDR")]
    dashboard: Option<String>,
    /// Use another base URL for a registry host, e.g. `docker.io=http://127.0.0.1:5000`.
    #[arg(long = "mirror", value_name = "HOST=URL")]
    mirrors: Vec<String>,
    /// Run a planner wave at start instead of waiting for the schedule.
    #[arg(long)]
    wave_now: bool,
    /// GitHub App credentials (instead of a token).
    #[command(flatten)]
    auth: crate::auth::AuthArgs,
}

/// Runs the command.
pub fn run(args: Args) -> Result<(), CliError> {
    let mut config = super::load_config(args.config.as_deref(), std::path::Path::new("."))?;
    if let Some(api) = &args.github_api {
        config.github.api_url = api.clone();
    }
    args.auth.apply(&mut config.github);
    let repos: Vec<String> = if args.repo.is_empty() {
        config.github.repository.iter().cloned().collect()
    } else {
        args.repo.clone()
    };
    if repos.is_empty() {
        return Err(CliError::bad_input(anyhow::anyhow!(
            "no repository: pass --repo OWNER/NAME or set github.repository"
        )));
    }
    let listen = args
        .dashboard
        .clone()
        .unwrap_or_else(|| config.daemon.dashboard_listen.clone());
    let listen: SocketAddr = listen.parse().map_err(|_| {
        anyhow::anyhow!("--dashboard {listen:?} is not an address like 127.0.0.1:8723")
    })?;
    check_listen(listen, config.daemon.dashboard_allow_remote)?;
    let schedule = WaveSchedule::parse(&config.daemon.schedule, &config.daemon.timezone)
        .map_err(|e| anyhow::anyhow!("daemon.schedule: {e}"))?;
    let webhook_secret = match &config.daemon.webhook_secret_env {
        Some(name) => Some(
            std::env::var(name)
                .ok()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| {
                    anyhow::anyhow!("daemon.webhook_secret_env names {name}, which is not set")
                })?,
        ),
        None => None,
    };
    // Read before anything starts: a missing key or token is bad input.
    crate::auth::Auth::required(&config.github).map_err(anyhow::Error::msg)?;
    let store_root = args
        .store
        .clone()
        .unwrap_or_else(|| PathBuf::from(&config.daemon.store));
    let runtime = super::runtime()?;
    runtime.block_on(async {
        let mut services = Vec::new();
        let mut claimant = None;
        let mut upstream_credential = None;
        for repo in &repos {
            // Each repository may be another installation of the App.
            let (forge, credential, _) =
                crate::compose::forge_for(&config, repo, crate::compose::Access::Write).await?;
            upstream_credential.get_or_insert(credential);
            let path = if repos.len() == 1 {
                store_root.clone()
            } else {
                store_root.join(repo)
            };
            let store = Store::open(&path)
                .with_context(|| format!("opening the store {}", path.display()))
                .map_err(CliError::failure)?;
            let journal = StoreJournal::new(store.clone());
            if claimant.is_none() {
                // One instance id for every repository: the first store's.
                let id = journal.instance_id().await.map_err(CliError::failure)?;
                claimant = Some(Claimant::new(id));
            }
            services.push(RepoService {
                forge,
                journal: Arc::new(journal) as Arc<dyn Journal>,
                store: Some(store),
            });
        }
        let claimant =
            claimant.ok_or_else(|| CliError::bad_input(anyhow::anyhow!("no repository")))?;
        let registry = super::plan::registry_config(&config, &args.mirrors)?;
        let registry = RegistryClient::new(registry).map_err(CliError::bad_input)?;
        // One source serves every repository; the first store keeps the
        // display names it finds.
        let names_store = services.first().and_then(|s| s.store.as_ref());
        let baseline = crate::compose::baseline(&config, names_store)?;
        let repair =
            crate::compose::repair_hook(&config)?.map(|h| Box::new(h) as Box<dyn RepairHook>);
        let settings = ServeSettings {
            claimant,
            engine: crate::compose::engine_config(&config, crate::compose::owner_run()),
            schedule,
            wave_on_start: args.wave_now,
            reconcile_interval: config.daemon.reconcile_interval,
            concurrency: config.daemon.concurrency,
            max_candidates: config.planner.max_candidates,
            min_age: config.planner.min_age,
            cooldown: config.planner.cooldown,
            rules: config.track_rules().map_err(CliError::bad_input)?,
            release_rules: config.release_rules().map_err(CliError::bad_input)?,
            upstream: config.upstream.clone(),
            max_timed_tags: config.registry.max_timed_tags,
            poll: std::time::Duration::from_secs(5),
            pass_wait: std::time::Duration::ZERO,
            ignore: config.ignore_rules().map_err(CliError::bad_input)?,
        };
        let (feed_tx, feed) = Daemon::feed();
        let mut daemon = Daemon::new(services, registry, baseline, repair, settings, feed_tx)
            .map_err(CliError::bad_input)?
            // What each wave does, as plain lines on stderr next to the log.
            .with_sink(Arc::new(super::story::TerminalStory::plain(
                super::story::Stream::Stderr,
            )));
        for repo in &repos {
            daemon = daemon.with_web_url(repo, config.github.repository_web_url(repo));
        }
        // As in `klaud wave`: the same credential reads the engines' public
        // source repositories.
        if let (false, Some(credential)) = (config.upstream.is_empty(), upstream_credential) {
            daemon = daemon.with_upstream(
                GithubUpstream::new(&config.github.api_url, credential)
                    .with_audit(config.audit.options()),
            );
        }
        let signoffs = config
            .signoff
            .enabled
            .then(klaud_service::signoff::SignoffQueue::default);
        if let Some(queue) = &signoffs {
            daemon = daemon.with_signoff(queue.clone(), config.signoff.eval_bars.clone());
        }
        let wake = Arc::new(Notify::new());
        let webhook = webhook_secret.as_ref().map(|s| {
            let state = WebhookState::new(s.as_bytes(), Arc::clone(&wake));
            match &signoffs {
                Some(queue) => state.with_signoffs(queue.clone()),
                None => state,
            }
        });
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("cannot listen on {listen}"))
            .map_err(CliError::failure)?;
        let bound = listener.local_addr().map_err(anyhow::Error::from)?;
        super::emit(&format!("dashboard: http://{bound}/\n"));
        let app = http_router(feed, webhook);
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        let (stop_tx, stop) = watch::channel(false);
        tokio::spawn(shutdown_on_signal(Arc::new(stop_tx)));
        let result = daemon.run(wake, stop).await;
        server.abort();
        result.map_err(CliError::failure)
    })
}
