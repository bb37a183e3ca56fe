//! `klaud sandbox`: serves the GitHub simulator on loopback with a seeded
//! repository and three accounts (bot, maintainer, reader), prints one JSON
//! line describing it, and serves until Ctrl-C. Beside it: the baseline API
//! (the InferenceX public API shape, from the seeded families), the OCI
//! registry simulator with `--registry-seed`, and with `--ci SCRIPT` the CI
//! simulator, which runs dispatched and label-triggered workflows by itself.
//! When the seed has `.github/workflows/*.yml`, those files decide which runs
//! exist (and the JSON line lists them as `"workflows"`).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, bail};
use rand::Rng;
use tokio::net::TcpListener;

use std::sync::Arc;

use klaud_sandbox::ci::{CiSim, Script, baseline_router};
use klaud_sandbox::github::{GithubState, Permission, serve_github};
use klaud_sandbox::registry::RegistrySim;

use super::CliError;

/// Arguments of `klaud sandbox`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Directory whose files become the initial commit on `main`
    /// (e.g. the InferenceX fixtures); without it `main` holds a README.
    #[arg(long)]
    pub seed: Option<PathBuf>,
    /// Repository to create.
    #[arg(long, default_value = "sandbox/benchmarks")]
    pub repo: String,
    /// Login of the bot account.
    #[arg(long, default_value = "Klaud-Cold")]
    pub bot_login: String,
    /// Seed file of the OCI registry simulator.
    #[arg(long)]
    pub registry_seed: Option<PathBuf>,
    /// CI simulator script (TOML; see `configs/demo-ci.toml`): run dispatched
    /// and label-triggered workflows with these outcomes.
    #[arg(long, value_name = "SCRIPT")]
    pub ci: Option<PathBuf>,
    /// Allow listening on a non-loopback address (the sandbox has no real
    /// authentication and its control API is open).
    #[arg(long)]
    pub allow_non_loopback: bool,
    /// GitHub's secondary limit on content-creating requests per token and
    /// minute: past it a write gets 403 with `retry-after` and is not
    /// performed. `0` turns it off.
    #[arg(long, value_name = "N", default_value_t = klaud_sandbox::github::CONTENT_LIMIT_PER_MINUTE)]
    pub content_limit_per_minute: u32,
    /// The same per token and hour. `0` turns it off.
    #[arg(long, value_name = "N", default_value_t = klaud_sandbox::github::CONTENT_LIMIT_PER_HOUR)]
    pub content_limit_per_hour: u32,
}

/// Login of the sandbox maintainer (write permission).
pub const MAINTAINER_LOGIN: &str = "sandbox-maintainer";
/// Login of the sandbox reader (read permission).
pub const READER_LOGIN: &str = "sandbox-reader";

fn token() -> String {
    let bytes: [u8; 18] = rand::rng().random();
    format!("ghp_sandbox{}", hex::encode(bytes))
}

/// Runs the command.
pub fn run(args: Args) -> Result<(), CliError> {
    if !args.listen.ip().is_loopback() && !args.allow_non_loopback {
        return Err(CliError::bad_input(anyhow::anyhow!(
            "--listen {} is not a loopback address; the sandbox has an open control API. \
             Use 127.0.0.1 or pass --allow-non-loopback",
            args.listen
        )));
    }
    // A bad seed is the user's input: refuse before serving anything.
    let registry = match &args.registry_seed {
        Some(seed) => Some(RegistrySim::from_seed_file(seed).map_err(|e| {
            CliError::bad_input(anyhow::anyhow!("--registry-seed {}: {e}", seed.display()))
        })?),
        None => None,
    };
    let script = match &args.ci {
        Some(path) => Some(
            Script::from_file(path)
                .map_err(|e| CliError::bad_input(anyhow::anyhow!("--ci: {e}")))?,
        ),
        None => None,
    };
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    rt.block_on(serve(args, registry, script))
        .map_err(CliError::from)
}

async fn serve(
    args: Args,
    registry: Option<RegistrySim>,
    script: Option<Script>,
) -> anyhow::Result<()> {
    let state = GithubState::new();
    let limit = |n: u32| (n > 0).then_some(n);
    state
        .set_content_limits(
            limit(args.content_limit_per_minute),
            limit(args.content_limit_per_hour),
        )
        .await;
    state.create_repo(&args.repo, "main").await?;
    let owner = args.repo.split('/').next().unwrap_or("sandbox").to_string();
    state.add_user(&owner, None, false).await;
    state
        .add_user(&args.bot_login, Some("Klaud Cold"), false)
        .await;
    state
        .add_user(MAINTAINER_LOGIN, Some("Sandbox Maintainer"), false)
        .await;
    state
        .add_user(READER_LOGIN, Some("Sandbox Reader"), false)
        .await;
    let (bot_token, maintainer_token, reader_token) = (token(), token(), token());
    state.add_token(&args.bot_login, &bot_token, None).await?;
    state
        .add_token(MAINTAINER_LOGIN, &maintainer_token, None)
        .await?;
    state.add_token(READER_LOGIN, &reader_token, None).await?;
    state
        .set_permission(&args.repo, &args.bot_login, Permission::Write)
        .await?;
    state
        .set_permission(&args.repo, MAINTAINER_LOGIN, Permission::Write)
        .await?;
    state
        .set_permission(&args.repo, READER_LOGIN, Permission::Read)
        .await?;
    match &args.seed {
        Some(dir) => {
            if !dir.is_dir() {
                bail!("--seed {}: not a directory", dir.display());
            }
            state
                .seed_from_dir(&args.repo, dir, Some(MAINTAINER_LOGIN))
                .await
                .with_context(|| format!("seeding {} from {}", args.repo, dir.display()))?;
        }
        None => {
            let mut files = std::collections::BTreeMap::new();
            files.insert(
                "README.md".to_string(),
                Some(b"# Sandbox benchmarks\n".to_vec()),
            );
            state
                .push_commit(
                    &args.repo,
                    "main",
                    MAINTAINER_LOGIN,
                    files,
                    "Initial commit",
                )
                .await?;
        }
    }
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr()?;
    let api = format!("http://{addr}");
    // The registry simulator listens beside the GitHub simulator, on the same
    // address and a port of its own.
    let mut registry_url = None;
    let mut registry_task = None;
    if let Some(sim) = registry {
        let registry_listener = TcpListener::bind(SocketAddr::new(args.listen.ip(), 0))
            .await
            .context("binding the registry simulator")?;
        registry_url = Some(format!("http://{}", registry_listener.local_addr()?));
        let app = klaud_sandbox::registry::router(Arc::new(sim));
        registry_task = Some(tokio::spawn(async move {
            axum::serve(registry_listener, app).await
        }));
    }
    // The baseline API has its own port: it is not GitHub and must not share
    // GitHub's authentication, rate limits or request log.
    let baseline_listener = TcpListener::bind(SocketAddr::new(args.listen.ip(), 0))
        .await
        .context("binding the baseline API")?;
    let baseline_url = format!("http://{}", baseline_listener.local_addr()?);
    let baseline_app = baseline_router(state.clone(), &args.repo);
    let baseline_task =
        tokio::spawn(async move { axum::serve(baseline_listener, baseline_app).await });
    // The cluster-status API (see configs/README.md#shared-clusters-capacity) on a port of its own, its clusters
    // named after the seeded runners file's nodes.
    let runners = args
        .seed
        .as_ref()
        .and_then(|d| std::fs::read_to_string(d.join("configs/runners.yaml")).ok())
        .unwrap_or_default();
    let capacity_key = token();
    let capacity = klaud_sandbox::capacity::CapacitySim::new(
        &capacity_key,
        klaud_sandbox::capacity::CapacitySim::clusters_of_runners(&runners),
    );
    let capacity_listener = TcpListener::bind(SocketAddr::new(args.listen.ip(), 0))
        .await
        .context("binding the cluster-status API")?;
    let capacity_url = format!("http://{}", capacity_listener.local_addr()?);
    let capacity_app = klaud_sandbox::capacity::router(capacity);
    let capacity_task =
        tokio::spawn(async move { axum::serve(capacity_listener, capacity_app).await });
    let ci = script.map(|s| CiSim::spawn(state.clone(), s));
    let workflows = state.workflow_files(&args.repo).await;
    let mut line = serde_json::json!({
        "github_api": api,
        "registry": registry_url,
        "baseline_api": baseline_url,
        "capacity_api": capacity_url,
        "capacity_control": format!("{capacity_url}/_control"),
        "capacity_key": capacity_key,
        "ci": ci.is_some(),
        "control": format!("{api}/_sandbox"),
        "repo": args.repo,
        "bot_token": bot_token,
        "maintainer_token": maintainer_token,
        "reader_token": reader_token,
        "content_limit": {
            "per_minute": limit(args.content_limit_per_minute),
            "per_hour": limit(args.content_limit_per_hour),
        },
    });
    // The CI behaviour comes from the seeded workflow files when there are any.
    if !workflows.is_empty() {
        line["workflows"] = serde_json::json!(workflows);
    }
    println!("{line}");
    tokio::select! {
        r = serve_github(listener, state) => r.context("serving the GitHub simulator")?,
        r = tokio::signal::ctrl_c() => r.context("waiting for Ctrl-C")?,
    }
    if let Some(task) = registry_task {
        task.abort();
    }
    baseline_task.abort();
    capacity_task.abort();
    drop(ci);
    Ok(())
}
