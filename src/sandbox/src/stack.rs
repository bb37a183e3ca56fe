//! The whole sandbox in-process: the GitHub simulator with a seeded
//! repository and accounts, the registry simulator, the baseline API and the
//! CI simulator — what `klaud demo` and the lifecycle tests run against.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::ci::{CiSim, Published, Script, baseline_router_with};
use super::github::{GithubSim, GithubState, Permission};
use super::registry::{RegistrySim, router as registry_router};

/// The maintainer account of the stack (write permission).
pub const MAINTAINER: &str = "sandbox-maintainer";
/// The bot's token in the stack (the sandbox is loopback-only and throwaway).
pub const BOT_TOKEN: &str = "ghp_sandbox_bot";
/// The maintainer's token.
pub const MAINTAINER_TOKEN: &str = "ghp_sandbox_maintainer";
/// The cluster-status API's Bearer key in the stack.
pub const CAPACITY_KEY: &str = "sandbox-capacity-key";

/// A running sandbox; everything stops when it is dropped.
pub struct SandboxStack {
    /// The GitHub simulator.
    pub github: GithubSim,
    /// `owner/name`.
    pub repo: String,
    /// The bot login.
    pub bot: String,
    /// Registry simulator base URL.
    pub registry_url: String,
    /// The registry simulator (for seeding and counts).
    pub registry: Arc<RegistrySim>,
    /// Baseline API base URL.
    pub baseline_url: String,
    /// What the baseline API withholds (everything published at start).
    pub published: Published,
    /// The CI simulator, when a script was given.
    pub ci: Option<CiSim>,
    /// Cluster-status API origin (key [`CAPACITY_KEY`]).
    pub capacity_url: String,
    /// The cluster-status simulator (clusters from the seed's runners file).
    pub capacity: super::capacity::CapacitySim,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for SandboxStack {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl SandboxStack {
    /// Starts the stack: `repo` seeded from `seed_dir` on `main`, the
    /// registry from `registry_seed` (JSON text), and the CI simulator
    /// running `script` every `ci_poll` when given.
    pub async fn start(
        repo: &str,
        bot: &str,
        seed_dir: &Path,
        registry_seed: &str,
        script: Option<Script>,
        ci_poll: Duration,
    ) -> anyhow::Result<Self> {
        let state = GithubState::new();
        state.create_repo(repo, "main").await?;
        let owner = repo.split('/').next().unwrap_or("sandbox");
        state.add_user(owner, None, false).await;
        state.add_user(bot, Some("Klaud Cold"), false).await;
        state
            .add_user(MAINTAINER, Some("Sandbox Maintainer"), false)
            .await;
        state.add_token(bot, BOT_TOKEN, None).await?;
        state.add_token(MAINTAINER, MAINTAINER_TOKEN, None).await?;
        state.set_permission(repo, bot, Permission::Write).await?;
        state
            .set_permission(repo, MAINTAINER, Permission::Write)
            .await?;
        state
            .seed_from_dir(repo, seed_dir, Some(MAINTAINER))
            .await?;
        let github = GithubSim::start(state.clone()).await?;

        let registry = Arc::new(RegistrySim::from_seed_json(registry_seed)?);
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let registry_url = format!("http://{}", listener.local_addr()?);
        let app = registry_router(registry.clone());
        let mut tasks = vec![tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        })];

        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let baseline_url = format!("http://{}", listener.local_addr()?);
        let published = Published::default();
        let app = baseline_router_with(state.clone(), repo, published.clone());
        tasks.push(tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        }));

        let runners =
            std::fs::read_to_string(seed_dir.join("configs/runners.yaml")).unwrap_or_default();
        let capacity = super::capacity::CapacitySim::new(
            CAPACITY_KEY,
            super::capacity::CapacitySim::clusters_of_runners(&runners),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let capacity_url = format!("http://{}", listener.local_addr()?);
        let app = super::capacity::router(capacity.clone());
        tasks.push(tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        }));

        let ci = script.map(|s| CiSim::spawn_with_poll(state.clone(), s, ci_poll));
        Ok(Self {
            github,
            repo: repo.to_owned(),
            bot: bot.to_owned(),
            registry_url,
            registry,
            baseline_url,
            published,
            ci,
            capacity_url,
            capacity,
            tasks,
        })
    }

    /// The simulator's state.
    pub fn state(&self) -> &GithubState {
        self.github.state()
    }
}
