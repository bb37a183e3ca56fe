//! The GitHub forge: every call Klaud makes to GitHub, over octocrab's raw
//! requests with Klaud's own retry and write policy (see the `transport` module).
//!
//! Writes are never blindly repeated: when a write ends ambiguously (5xx,
//! dropped connection) the forge re-reads whether the thing exists — the
//! ref, the PR for the head branch, the comment carrying our hidden marker —
//! and only then decides. Credentials never appear in errors, logs or
//! `Debug` output.
//!
//! `klaud-github` owns the GitHub side of Klaud: the transport (retries,
//! conditional requests, rate budget), the REST calls, the claim
//! [`klaud_claims::RefStore`] over git refs and the lifecycle forge
//! ([`lifecycle::GithubLifecycle`]) the engine drives. It must never decide
//! lifecycle rules (who owns what, what an outcome is): it carries out what
//! the lifecycle crate asks, and reports GitHub's answer faithfully. Its
//! REST writes are crate-private: outside callers write only through the
//! lifecycle forge (each write checked against its ownership proof or reply
//! permit), the claim store (claim and recovery-lease refs only), the
//! dashboard issue's calls (an issue the bot opened) and the playbook pull
//! request a dashboard box asks for (a branch under `klaud/playbook/`).
//!
//! The async calls other crates make return [`klaud_lifecycle::BoxFuture`]s,
//! so their bodies (and octocrab's generics under them) are compiled once,
//! here.

mod api;
mod graphql;
mod issues;
pub mod lifecycle;
mod pace;
mod playbook_pull;
mod refstore;
mod run_completion;
pub mod signoff;
mod transport;
pub mod upstream;

use klaud_lifecycle::BoxFuture;
use std::fmt;
use std::time::Duration;

use http::HeaderName;
use octocrab::Octocrab;
use octocrab::service::middleware::retry::RetryConfig;

pub use api::{
    Artifact, COMPARE_FILE_LIMIT, CommentInfo, Comparison, ComparisonFiles, DispatchOutcome,
    FileChange, JobInfo, PullInfo, RunFilter, RunInfo, TreeChange, UserInfo, WorkflowInfo,
};

pub use issues::IssueInfo;
pub use pace::WritePace;
pub use playbook_pull::{PLAYBOOK_BRANCH_PREFIX, PlaybookPull};
pub use run_completion::ForgeRunCompletion;
pub use transport::{
    ConditionalPage, DEFAULT_WRITE_TIMEOUT, MAX_RESPONSE_BYTES, SECONDARY_MAX_WAIT,
    SECONDARY_MIN_WAIT, SecondaryPause, secondary_wait,
};

use transport::Transport;

/// The REST API version Klaud is written against.
pub const API_VERSION: &str = "2022-11-28";

/// A credential. Its `Debug` and `Display` never show the value.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }
    fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// How the forge authenticates.
#[derive(Clone)]
pub enum Credential {
    /// A personal access token (or any token used as-is).
    Token(Secret),
    /// A GitHub App installation: short-lived installation tokens are minted
    /// (and re-minted before expiry) from the app's RS256 private key. The
    /// identity is `<app slug>[bot]`.
    App {
        app_id: u64,
        private_key_pem: Secret,
        installation_id: u64,
    },
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credential::Token(_) => f.write_str("Token(***)"),
            Credential::App {
                app_id,
                installation_id,
                ..
            } => f
                .debug_struct("App")
                .field("app_id", app_id)
                .field("installation_id", installation_id)
                .field("private_key_pem", &"***")
                .finish(),
        }
    }
}

/// Retry policy for reads (and for rate-limited writes).
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Attempts per request, the first included.
    pub max_attempts: u32,
    /// First backoff step; doubles per attempt, with jitter.
    pub base_delay: Duration,
    /// Cap of one backoff step.
    pub max_delay: Duration,
    /// Longest wait GitHub may ask for (`retry-after`, rate-limit reset)
    /// before the forge gives up with [`GithubError::RateLimited`] instead.
    pub max_wait: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            max_wait: Duration::from_secs(120),
        }
    }
}

/// How to reach one repository.
#[derive(Debug, Clone)]
pub struct ForgeConfig {
    /// API base, e.g. `https://api.github.com` or the sandbox URL.
    pub api_url: String,
    /// `OWNER/NAME`.
    pub repo: String,
    /// The login the credential must resolve to (InferenceX: `Klaud-Cold`).
    pub bot_login: String,
    /// The credential: a token, or a GitHub App installation.
    pub credential: Credential,
    pub retry: RetryPolicy,
}

/// The last rate-limit figures GitHub reported (for the dashboard).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateBudget {
    pub limit: u64,
    pub remaining: u64,
    pub used: u64,
    pub reset_unix: i64,
    pub resource: String,
}

/// Why a GitHub operation failed. Messages name the operation (`what`) and
/// never carry a credential.
#[derive(Debug, thiserror::Error)]
pub enum GithubError {
    #[error(
        "the GitHub credential belongs to {found:?}, but the configured bot login is {expected:?}; \
         use a token of {expected:?} or set the bot login to {found:?}"
    )]
    IdentityMismatch { expected: String, found: String },
    #[error(
        "{what}: GitHub rejected the credential ({message}); check that the token is valid and not expired"
    )]
    Unauthorized { what: String, message: String },
    #[error("{what}: not found")]
    NotFound { what: String },
    #[error("{what}: already exists ({message})")]
    AlreadyExists { what: String, message: String },
    #[error("{what}: not a fast-forward")]
    NotFastForward { what: String },
    #[error("{what}: GitHub answered {status}: {message}")]
    Rejected {
        what: String,
        status: u16,
        message: String,
    },
    #[error("{what}: rate limited; GitHub asks to wait {retry_after_secs}s, longer than allowed")]
    RateLimited { what: String, retry_after_secs: u64 },
    #[error("{what}: outcome unknown ({detail}); the state could not be confirmed")]
    Ambiguous { what: String, detail: String },
    #[error("{what}: GitHub server error {status}")]
    Server { what: String, status: u16 },
    #[error("{what}: network error: {detail}")]
    Transport { what: String, detail: String },
    #[error("{what}: unexpected response: {detail}")]
    Decode { what: String, detail: String },
    #[error("GitHub forge configuration: {0}")]
    Config(String),
}

/// A connected, identity-checked forge for one repository.
pub struct Github {
    pub(crate) t: Transport,
    /// The app-JWT client, for `GET /app` (App credentials only).
    app: Option<Transport>,
    pub(crate) owner: String,
    pub(crate) name: String,
    bot_login: String,
    /// The repository's GraphQL node id once read: it never changes, and
    /// a mutation that creates a ref names the repository by it.
    repository_id: std::sync::OnceLock<String>,
}

impl fmt::Debug for Github {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Github")
            .field("repo", &format_args!("{}/{}", self.owner, self.name))
            .field("bot_login", &self.bot_login)
            .finish_non_exhaustive()
    }
}

impl Github {
    /// Builds the client and runs the identity preflight: `GET /user` must
    /// be the configured bot login, else [`GithubError::IdentityMismatch`].
    pub fn connect(config: ForgeConfig) -> BoxFuture<'static, Result<Self, GithubError>> {
        Box::pin(async move {
            let forge = Self::connect_unchecked(config)?;
            forge.preflight().await?;
            Ok(forge)
        })
    }

    /// Bounds every write to `timeout` end to end (default
    /// [`DEFAULT_WRITE_TIMEOUT`]); a write still unanswered then has an
    /// unknown outcome. The lifecycle's lease check must know the same figure.
    pub fn with_write_timeout(mut self, timeout: Duration) -> Self {
        self.t.set_write_timeout(timeout);
        self
    }

    /// Paces every write as `pace` says (GitHub asks for one at a time, a
    /// second apart, 80 content writes a minute and 500 an hour). Without
    /// it writes are sent as they come.
    pub fn with_write_pace(mut self, pace: WritePace) -> Self {
        self.t.set_write_pace(pace);
        self
    }

    /// Builds the client without the identity preflight (for tools that only
    /// read). Prefer [`Github::connect`].
    pub fn connect_unchecked(config: ForgeConfig) -> Result<Self, GithubError> {
        let (owner, name) = config
            .repo
            .split_once('/')
            .filter(|(o, n)| !o.is_empty() && !n.is_empty() && !n.contains('/'))
            .ok_or_else(|| {
                GithubError::Config(format!("repository {:?} is not OWNER/NAME", config.repo))
            })?;
        if config.bot_login.trim().is_empty() {
            return Err(GithubError::Config("the bot login is empty".into()));
        }
        let api_url = config.api_url.trim_end_matches('/').to_string();
        let builder = || client_builder(&api_url);
        let build_err =
            |e: octocrab::Error| GithubError::Config(format!("building the HTTP client: {e}"));
        let (gh, app) = match &config.credential {
            Credential::Token(token) => (
                builder()?
                    .personal_token(token.expose().to_string())
                    .build()
                    .map_err(build_err)?,
                None,
            ),
            Credential::App {
                app_id,
                private_key_pem,
                installation_id,
            } => {
                let key = app_key(*app_id, private_key_pem)?;
                let app_client = builder()?
                    .app(octocrab::models::AppId(*app_id), key)
                    .build()
                    .map_err(build_err)?;
                let installation = app_client
                    .installation(octocrab::models::InstallationId(*installation_id))
                    .map_err(build_err)?;
                (
                    installation,
                    Some(Transport::new(
                        app_client,
                        api_url.clone(),
                        config.retry.clone(),
                    )),
                )
            }
        };
        Ok(Self {
            t: Transport::new(gh, api_url, config.retry),
            app,
            owner: owner.to_string(),
            name: name.to_string(),
            bot_login: config.bot_login,
            repository_id: std::sync::OnceLock::new(),
        })
    }

    /// Checks that the credential resolves to the bot login.
    pub fn preflight<'f>(&'f self) -> BoxFuture<'f, Result<UserInfo, GithubError>> {
        Box::pin(async move {
            let me = self.identity().await?;
            // GitHub logins are case-insensitive.
            if !me.login.eq_ignore_ascii_case(&self.bot_login) {
                return Err(GithubError::IdentityMismatch {
                    expected: self.bot_login.clone(),
                    found: me.login,
                });
            }
            Ok(me)
        })
    }

    /// Whose the credential is: the token's user (`GET /user`), or for an
    /// App `<slug>[bot]` (`GET /app`). Checks nothing (read-only commands
    /// accept any credential that can read).
    pub fn identity<'f>(&'f self) -> BoxFuture<'f, Result<UserInfo, GithubError>> {
        Box::pin(async move {
            let me = match &self.app {
                None => self.current_user().await?,
                Some(app) => {
                    #[derive(serde::Deserialize)]
                    struct AppInfo {
                        id: u64,
                        slug: String,
                    }
                    let a: AppInfo = app
                        .get_json("identity preflight (GET /app)", "/app")
                        .await?;
                    UserInfo {
                        login: format!("{}[bot]", a.slug),
                        id: a.id,
                        name: None,
                    }
                }
            };
            Ok(me)
        })
    }

    /// Whether the repository exists and the credential can see it
    /// (`GET /repos/{owner}/{name}`; GitHub answers 404 for both).
    pub fn repository_visible<'f>(&'f self) -> BoxFuture<'f, Result<bool, GithubError>> {
        Box::pin(async move {
            let what = format!("read repository {}/{}", self.owner, self.name);
            let path = format!("/repos/{}/{}", self.owner, self.name);
            Ok(self.t.read_found(&what, &path).await?.is_some())
        })
    }

    /// The repository's GraphQL node id (`node_id` of `GET
    /// /repos/{owner}/{name}`), read once per client and kept: what
    /// `createRef` names the repository by. The read is conditional, so a
    /// process that took up an earlier one's answers is answered 304.
    pub fn repository_id<'f>(&'f self) -> BoxFuture<'f, Result<String, GithubError>> {
        Box::pin(async move {
            if let Some(id) = self.repository_id.get() {
                return Ok(id.clone());
            }
            #[derive(serde::Deserialize)]
            struct Repository {
                node_id: String,
            }
            let what = format!("read repository {}/{}", self.owner, self.name);
            let path = format!("/repos/{}/{}", self.owner, self.name);
            let read: Repository = self.t.get_json_cached(&what, &path).await?;
            // A node id is a short opaque token; anything else is not one,
            // and is never sent back inside a mutation.
            let plausible = !read.node_id.is_empty()
                && read.node_id.len() <= 200
                && read
                    .node_id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-=+/".contains(c));
            if !plausible {
                return Err(GithubError::Decode {
                    what,
                    detail: "node_id is not a GraphQL node id".into(),
                });
            }
            Ok(self.repository_id.get_or_init(|| read.node_id).clone())
        })
    }

    /// `OWNER/NAME` of the repository.
    pub fn repo(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }

    /// The configured bot login.
    pub fn bot_login(&self) -> &str {
        &self.bot_login
    }

    /// The conditional-read answers (ETag, body) this client holds, to be
    /// kept where the next process finds them: each light Actions pass is
    /// a new process, and without them its first read of every unchanged
    /// thing is a charged 200 instead of a free 304.
    pub fn conditional_pages(&self) -> Vec<ConditionalPage> {
        self.t.conditional_pages()
    }

    /// Takes up answers [`Github::conditional_pages`] gave an earlier process.
    pub fn restore_conditional_pages(&self, pages: Vec<ConditionalPage>) {
        self.t.restore_conditional_pages(pages);
    }

    /// The latest REST (`core`) rate-limit budget GitHub reported, if any.
    pub fn rate_budget(&self) -> Option<RateBudget> {
        self.t.budgets().remove("core")
    }

    /// The latest budget of every rate-limit resource seen (`core`,
    /// `graphql`, ...), for the dashboard.
    pub fn rate_budgets(&self) -> Vec<RateBudget> {
        self.t.budgets().into_values().collect()
    }

    /// The pause GitHub's secondary rate limit imposes on this forge's
    /// requests right now, if any (for the dashboard).
    pub fn secondary_pause(&self) -> Option<SecondaryPause> {
        self.t.secondary_pause()
    }

    /// GitHub's clock minus this machine's, from the `Date` of its last
    /// answer (`None` before the first; zero within a second or two).
    pub fn clock_skew(&self) -> Option<chrono::TimeDelta> {
        self.t.clock_skew()
    }

    /// The claims clock on GitHub's time: leases are written and compared
    /// by every instance, so they must all read one clock, and a machine
    /// whose own clock is off must not take a live claim over (or think
    /// its own lease longer than it is).
    pub fn clock(&self) -> GithubClock<'_> {
        self.clock_on(&klaud_claims::SystemClock)
    }

    /// [`Github::clock`] over `base` instead of the system clock: the
    /// composition root chooses the machine's clock (tests one they move),
    /// this forge corrects it by the skew it measured.
    pub fn clock_on<'c>(&'c self, base: &'c dyn klaud_claims::Clock) -> GithubClock<'c> {
        GithubClock { forge: self, base }
    }

    pub(crate) fn path(&self, rest: &str) -> String {
        format!("/repos/{}/{}/{rest}", self.owner, self.name)
    }
}

/// [`klaud_claims::Clock`] reading GitHub's time: the local clock corrected
/// by the skew the forge last measured (the local clock alone until GitHub
/// has answered once).
#[derive(Clone, Copy)]
pub struct GithubClock<'f> {
    forge: &'f Github,
    base: &'f dyn klaud_claims::Clock,
}

impl std::fmt::Debug for GithubClock<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GithubClock")
            .field("skew", &self.forge.clock_skew())
            .finish_non_exhaustive()
    }
}

impl klaud_claims::Clock for GithubClock<'_> {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.base.now() + self.forge.clock_skew().unwrap_or_default()
    }
}

/// An octocrab builder with Klaud's transport settings: no octocrab
/// retries (the transport owns the policy), the pinned API version, timeouts.
fn client_builder(
    api_url: &str,
) -> Result<
    octocrab::OctocrabBuilder<
        octocrab::NoSvc,
        octocrab::DefaultOctocrabBuilderConfig,
        octocrab::NoAuth,
        octocrab::NotLayerReady,
    >,
    GithubError,
> {
    Ok(Octocrab::builder()
        .base_uri(api_url)
        .map_err(|e| GithubError::Config(format!("API URL {api_url:?}: {e}")))?
        .add_retry_config(RetryConfig::None)
        .add_header(
            HeaderName::from_static("x-github-api-version"),
            API_VERSION.into(),
        )
        .set_connect_timeout(Some(Duration::from_secs(15)))
        .set_read_timeout(Some(Duration::from_secs(60))))
}

/// The App's signing key. The error never quotes the key.
fn app_key(
    app_id: u64,
    private_key_pem: &Secret,
) -> Result<octocrab::jsonwebtoken::EncodingKey, GithubError> {
    octocrab::jsonwebtoken::EncodingKey::from_rsa_pem(private_key_pem.expose().as_bytes()).map_err(
        |e| {
            GithubError::Config(format!(
                "GitHub App {app_id}: the private key is not an RSA PEM key ({e})"
            ))
        },
    )
}

/// The id of the App's installation on `repo` (`OWNER/NAME`), from
/// `GET /repos/{owner}/{name}/installation` with the App's JWT: for
/// configurations that give an App id and key but no installation id.
pub fn find_installation<'f>(
    api_url: &'f str,
    app_id: u64,
    private_key_pem: &'f Secret,
    repo: &'f str,
    retry: RetryPolicy,
) -> BoxFuture<'f, Result<u64, GithubError>> {
    Box::pin(async move {
        let (owner, name) = repo
            .split_once('/')
            .filter(|(o, n)| !o.is_empty() && !n.is_empty() && !n.contains('/'))
            .ok_or_else(|| GithubError::Config(format!("repository {repo:?} is not OWNER/NAME")))?;
        let api_url = api_url.trim_end_matches('/').to_string();
        let key = app_key(app_id, private_key_pem)?;
        let app_client = client_builder(&api_url)?
            .app(octocrab::models::AppId(app_id), key)
            .build()
            .map_err(|e| GithubError::Config(format!("building the HTTP client: {e}")))?;
        let t = Transport::new(app_client, api_url, retry);
        #[derive(serde::Deserialize)]
        struct Installation {
            id: u64,
        }
        let what = format!("GitHub App {app_id}: find its installation on {owner}/{name}");
        match t
            .get_json::<Installation>(&what, &format!("/repos/{owner}/{name}/installation"))
            .await
        {
            Ok(i) => Ok(i.id),
            Err(GithubError::NotFound { .. }) => Err(GithubError::Config(format!(
                "GitHub App {app_id} is not installed on {owner}/{name} (or the repository does not \
             exist): install the App on the repository, or set github.app_installation_id"
            ))),
            Err(e) => Err(e),
        }
    })
}
