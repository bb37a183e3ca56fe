//! `klaud.toml`: Klaud's configuration. Every key has a default (documented
//! in `configs/inferencex.toml`); secrets never live here — only the names of
//! the environment variables that hold them.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use klaud_lifecycle::workflow_contract::DraftPolicy;
use serde::{Deserialize, Deserializer};

/// A lease must be at least this many reconcile intervals long.
const LEASE_PER_RECONCILE: u32 = 4;
/// The shortest lease at any reconcile interval.
const MIN_LEASE: Duration = Duration::from_secs(5);
/// The shortest interval or timeout Klaud accepts: a zero reconcile interval
/// or poll would spin on GitHub's rate budget, a zero timeout fails every call.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// The whole configuration file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where the benchmark repository lives on GitHub.
    pub github: GithubConfig,
    /// Candidate selection.
    pub planner: PlannerConfig,
    /// Upstream registries.
    pub registry: RegistryConfig,
    /// Extra or overriding tag tracks, per image repository.
    pub tracks: Vec<TrackConfig>,
    /// Release tracks that nightly families may move to (with an upstream proof).
    pub release_tracks: Vec<ReleaseTrackConfig>,
    /// The long-running daemon (`klaud serve`).
    pub daemon: DaemonConfig,
    /// How candidates are driven (workflows, labels, repairs, baseline).
    pub lifecycle: LifecycleConfig,
    /// Image repository (normalized, e.g. `vllm/vllm-openai`) → upstream
    /// source repository on GitHub (`vllm-project/vllm`), used to prove a
    /// release is not behind a nightly's commit and to give each bump its
    /// commit range. Absent: [`default_upstream`]; an empty table turns
    /// upstream reads off.
    pub upstream: BTreeMap<String, String>,
    /// Launcher copy mappings: recipes named under `prefix` live in the
    /// project folder `folder` (what `cp -rT` in `runners/launch_*.sh` does).
    pub recipe_roots: Vec<RecipeRootConfig>,
    /// How bumps treat recipes that do not simply carry the old image.
    pub bump: BumpConfig,
    /// The cluster-capacity gate (see configs/README.md#shared-clusters-capacity); absent: nothing is gated.
    pub capacity: Option<CapacityConfig>,
    /// The flag and environment audit of each bump's upstream range.
    pub audit: AuditConfig,
    /// Experiments: families whose candidate runs as several
    /// racing variants.
    pub experiments: Vec<ExperimentConfig>,
    /// CODEOWNER sign-off verification.
    pub signoff: SignoffConfig,
    /// `[[ignore]]`: families, image repositories or tags Klaud leaves
    /// alone, each with the reason the plan and the dashboard show.
    pub ignore: Vec<IgnoreConfig>,
    /// Regression hunts.
    pub hunt: HuntConfig,
}

/// `[hunt]`: regression hunts (see configs/README.md#regression-hunts-hunt-klaud-hunt).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HuntConfig {
    /// Whether a failed or regressed candidate starts a hunt by itself
    /// (default `false`; `/klaud hunt` works either way).
    pub enabled: bool,
    /// Family patterns it applies to (`*` wildcard; with a `:` matched
    /// against `configs/<file>:<key>`, else against the key); default `["*"]`.
    pub families: Vec<String>,
    /// GPU runs one hunt may use (default 4).
    pub budget: u32,
    /// GPU runs all hunts of the repository may use in seven days (default 12).
    pub weekly_budget: u32,
    /// The relative noise band of a point without published history
    /// (default 0.05: ±5%).
    pub noise_band: f64,
}

impl Default for HuntConfig {
    fn default() -> Self {
        let d = klaud_lifecycle::hunt::HuntSettings::default();
        Self {
            enabled: d.enabled,
            families: d.families,
            budget: d.budget,
            weekly_budget: d.weekly_budget,
            noise_band: d.noise_band,
        }
    }
}

impl HuntConfig {
    /// The engine's settings.
    pub fn settings(&self) -> klaud_lifecycle::hunt::HuntSettings {
        klaud_lifecycle::hunt::HuntSettings {
            enabled: self.enabled,
            families: self.families.clone(),
            budget: self.budget,
            weekly_budget: self.weekly_budget,
            noise_band: self.noise_band,
        }
    }

    fn check(&self) -> Result<(), (&'static str, String)> {
        use klaud_lifecycle::hunt::MAX_BUDGET;
        if self.families.iter().any(|f| f.trim().is_empty()) {
            return Err(("hunt.families", "a pattern must not be empty".into()));
        }
        if self.budget == 0 || self.budget > MAX_BUDGET {
            return Err((
                "hunt.budget",
                format!("{} is not between 1 and {MAX_BUDGET}", self.budget),
            ));
        }
        if self.weekly_budget < self.budget {
            return Err((
                "hunt.weekly_budget",
                format!(
                    "{} is less than one hunt's budget ({}); no hunt could finish",
                    self.weekly_budget, self.budget
                ),
            ));
        }
        if !self.noise_band.is_finite() || self.noise_band <= 0.0 || self.noise_band >= 1.0 {
            return Err((
                "hunt.noise_band",
                format!(
                    "{} is not a fraction between 0 and 1 (0.05 is ±5%)",
                    self.noise_band
                ),
            ));
        }
        Ok(())
    }
}

/// `[[ignore]]`: one rule. Exactly one of `family` (a family pattern) and
/// `repository` (an image repository, optionally narrowed to `tag`
/// patterns).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IgnoreConfig {
    /// A family pattern: `<master>:<key>`, a key alone or a family id, `*`
    /// a wildcard.
    #[serde(default)]
    pub family: Option<String>,
    /// An image repository (`lmsysorg/sglang`, `nvcr.io/nvidia/sglang`).
    #[serde(default)]
    pub repository: Option<String>,
    /// With `repository`: only its tags matching this `*` pattern.
    #[serde(default)]
    pub tag: Option<String>,
    /// Why; shown in `klaud plan` and on the dashboard issue.
    pub reason: String,
}

/// `[signoff]`: CODEOWNER sign-off verification.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SignoffConfig {
    /// Whether `klaud serve` verifies sign-offs (webhook deliveries and the
    /// reconcile passes' catch-up) and publishes verdicts; default `false`.
    /// `klaud signoff` works either way.
    pub enabled: bool,
    /// The least eval score per task (lower-case), e.g. `{ gsm8k = 0.85 }`;
    /// the repository does not write its bar in a file.
    pub eval_bars: BTreeMap<String, f64>,
}

impl Default for SignoffConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            eval_bars: klaud_signoff::evidence::default_eval_bars(),
        }
    }
}

/// `[audit]`: the flag and environment audit (runs where `[upstream]`
/// names the image's source repository).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditConfig {
    /// Whether to audit (default `true`).
    pub enabled: bool,
    /// The most changed files a compare may list to be read (default and
    /// ceiling 300, GitHub's own limit).
    pub max_files: usize,
    /// Commits read per removed item to name the one that removed it
    /// (default 10; 0 names only the range).
    pub max_commit_lookups: usize,
    /// Where each engine defines flags and variables; absent: vLLM and
    /// SGLang as [`klaud_planner::audit::default_engines`] gives them. A
    /// list replaces the defaults.
    pub engines: Vec<klaud_planner::audit::EngineDefinitions>,
}

impl Default for AuditConfig {
    fn default() -> Self {
        let d = klaud_github::upstream::AuditOptions::default();
        Self {
            enabled: d.enabled,
            max_files: d.max_files,
            max_commit_lookups: d.max_commit_lookups,
            engines: d.engines,
        }
    }
}

impl AuditConfig {
    /// The options the upstream reader audits with.
    pub fn options(&self) -> klaud_github::upstream::AuditOptions {
        klaud_github::upstream::AuditOptions {
            enabled: self.enabled,
            max_files: self.max_files,
            max_commit_lookups: self.max_commit_lookups,
            engines: self.engines.clone(),
        }
    }
}

/// `[[experiments]]`: variants of a candidate's bump that race; the first
/// validated one wins.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentConfig {
    /// Its name (in PR bodies, commit messages and candidate ids).
    pub name: String,
    /// Family patterns: `<master>:<key>` or a key alone, `*` a wildcard.
    pub families: Vec<String>,
    /// How many variants of one family run at once (0: no bound).
    #[serde(default = "default_max_concurrent")]
    pub max_concurrent: u32,
    /// The variants, in order.
    pub variants: Vec<VariantConfig>,
}

fn default_max_concurrent() -> u32 {
    klaud_lifecycle::experiment::DEFAULT_MAX_CONCURRENT
}

/// `[[experiments.variants]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VariantConfig {
    /// `A`, `F`, `parser-v2`: letters, digits, `-`, `_`.
    pub name: String,
    /// The variant this one extends ("F = E plus …").
    #[serde(default)]
    pub from: Option<String>,
    /// Edits in the grammar of the README (each entry one or more,
    /// separated by `;`).
    #[serde(default)]
    pub edits: Vec<String>,
}

/// `[capacity]`: the incumbent's private cluster-status API.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapacityConfig {
    /// The dashboard's origin, `scheme://host[:port]` (no path); required.
    pub origin: String,
    /// The API path on that origin.
    #[serde(default = "default_capacity_path")]
    pub path: String,
    /// The environment variable holding the Bearer key.
    #[serde(default = "default_capacity_key_env")]
    pub key_env: String,
    /// How long one reading may take.
    #[serde(default = "default_capacity_timeout", deserialize_with = "duration")]
    pub timeout: Duration,
    /// Runner label or config key → cluster ids, replacing what
    /// `configs/runners.yaml` says (a key wins over its runner label).
    #[serde(default)]
    pub clusters: BTreeMap<String, Vec<String>>,
}

fn default_capacity_path() -> String {
    klaud_planner::capacity::DEFAULT_PATH.to_owned()
}

fn default_capacity_key_env() -> String {
    klaud_planner::capacity::DEFAULT_KEY_ENV.to_owned()
}

fn default_capacity_timeout() -> Duration {
    Duration::from_secs(10)
}

/// A credential the configuration names could not be read: which variable,
/// file or key, and what to set. Never holds the secret itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CredentialError(pub(crate) String);

impl CapacityConfig {
    /// The gate over HTTP, with the key read through `lookup`; an error
    /// says what is missing (never the key).
    pub fn gate_from(
        &self,
        lookup: impl Fn(&str) -> Result<String, std::env::VarError>,
    ) -> Result<klaud_planner::capacity::CapacityGate, CredentialError> {
        let key = match lookup(&self.key_env) {
            Ok(v) if !v.trim().is_empty() => v.trim().to_owned(),
            Ok(_) | Err(std::env::VarError::NotPresent) => {
                return Err(CredentialError(format!(
                    "no capacity API key: set {} (capacity.key_env)",
                    self.key_env
                )));
            }
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(CredentialError(format!(
                    "environment variable {} is not valid UTF-8",
                    self.key_env
                )));
            }
        };
        let source =
            klaud_planner::capacity::HttpCapacity::new(&self.origin, &self.path, key, self.timeout)
                .map_err(|e| CredentialError(e.to_string()))?;
        Ok(klaud_planner::capacity::CapacityGate {
            source: Box::new(source),
            overrides: self.clusters.clone(),
        })
    }

    /// [`CapacityConfig::gate_from`] the process environment; when that
    /// fails, a gate that defers everything with the reason (fail closed).
    pub fn gate(&self) -> klaud_planner::capacity::CapacityGate {
        self.gate_from(|n| std::env::var(n)).unwrap_or_else(|why| {
            klaud_planner::capacity::CapacityGate {
                source: Box::new(klaud_planner::capacity::Unusable(why.to_string())),
                overrides: self.clusters.clone(),
            }
        })
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            github: GithubConfig::default(),
            planner: PlannerConfig::default(),
            registry: RegistryConfig::default(),
            tracks: Vec::new(),
            release_tracks: Vec::new(),
            daemon: DaemonConfig::default(),
            lifecycle: LifecycleConfig::default(),
            upstream: default_upstream(),
            recipe_roots: Vec::new(),
            bump: BumpConfig::default(),
            capacity: None,
            audit: AuditConfig::default(),
            experiments: Vec::new(),
            signoff: SignoffConfig::default(),
            ignore: Vec::new(),
            hunt: HuntConfig::default(),
        }
    }
}

/// The engines InferenceX benchmarks and their source repositories, keyed
/// by the normalized image repositories its master configs use.
pub fn default_upstream() -> BTreeMap<String, String> {
    [
        ("vllm/vllm-openai", "vllm-project/vllm"),
        ("vllm/vllm-openai-rocm", "vllm-project/vllm"),
        ("lmsysorg/sglang", "sgl-project/sglang"),
        ("lmsysorg/sglang-rocm", "sgl-project/sglang"),
        ("rocm/sgl-dev", "sgl-project/sglang"),
        ("nvcr.io/nvidia/tensorrt-llm/release", "NVIDIA/TensorRT-LLM"),
        ("rocm/atom", "ROCm/ATOM"),
        ("rocm/atom-dev", "ROCm/ATOM"),
    ]
    .into_iter()
    .map(|(image, source)| (image.to_owned(), source.to_owned()))
    .collect()
}

/// `[[recipe_roots]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecipeRootConfig {
    /// The recipe path prefix as settings spell it, e.g. `recipes/trtllm/kimi-k25-nvfp4/b200-fp4`.
    pub prefix: String,
    /// The project-relative folder the launcher copies there.
    pub folder: String,
}

/// `[bump]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BumpConfig {
    /// Recipe image fields that carry another image than the master:
    /// `"leave"` (warn, the default) or `"align"` (set them to the new image).
    pub disagreeing_recipes: klaud_planner::bump::DisagreePolicy,
}

/// `[github]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GithubConfig {
    /// REST API base URL.
    pub api_url: String,
    /// `owner/name` of the benchmark repository.
    pub repository: Option<String>,
    /// The login the credential must resolve to.
    pub bot_login: String,
    /// Environment variables tried, in order, for the token.
    pub token_env: Vec<String>,
    /// A GitHub App's id: when set, Klaud acts as the App's installation
    /// (short-lived installation tokens) instead of a token from `token_env`.
    pub app_id: Option<u64>,
    /// The App's installation id; absent: looked up for the repository
    /// (`GET /repos/{owner}/{name}/installation`).
    pub app_installation_id: Option<u64>,
    /// File with the App's private key (PEM); without it the key is read
    /// from `app_private_key_env`.
    pub app_private_key_file: Option<String>,
    /// Environment variable with the App's private key (PEM).
    pub app_private_key_env: String,
    /// Web origin repositories are linked to on the dashboard (default:
    /// `https://github.com` for `api.github.com`, the host of a GitHub
    /// Enterprise `…/api/v3` URL).
    pub web_url: Option<String>,
    /// How long one GitHub write may take, end to end, before its outcome
    /// counts as unknown (and is re-read). A write is sent only with
    /// `daemon.lease_margin` plus this much of the claim's lease left.
    #[serde(deserialize_with = "duration")]
    pub write_timeout: Duration,
    /// Least time between two writes (default `1s`). GitHub asks
    /// integrations to write one at a time, at least a second apart; a
    /// write waits for its turn.
    #[serde(deserialize_with = "optional_duration")]
    pub write_gap: Option<Duration>,
    /// Most writes in any minute (default 80, GitHub's secondary limit on
    /// content creation); `0`: no limit. Writes past it wait.
    pub writes_per_minute: Option<u32>,
    /// Most writes in any hour (default 500, GitHub's); `0`: no limit.
    pub writes_per_hour: Option<u32>,
}

impl GithubConfig {
    /// How writes are paced: as configured, else GitHub's pace, except
    /// against an API on this machine (the sandbox), where nothing
    /// configured means no gap but still within the content-creation
    /// limits the simulator enforces.
    pub fn write_pace(&self) -> klaud_github::WritePace {
        use klaud_github::WritePace;
        let configured = self.write_gap.is_some()
            || self.writes_per_minute.is_some()
            || self.writes_per_hour.is_some();
        let base = if !configured && api_on_this_machine(&self.api_url) {
            WritePace::SANDBOX
        } else {
            WritePace::GITHUB
        };
        WritePace {
            gap: self.write_gap.unwrap_or(base.gap),
            per_minute: self.writes_per_minute.unwrap_or(base.per_minute),
            per_hour: self.writes_per_hour.unwrap_or(base.per_hour),
        }
    }
}

/// Whether `api_url` points at a loopback address (a simulator).
fn api_on_this_machine(api_url: &str) -> bool {
    url::Url::parse(api_url).is_ok_and(|u| match u.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    })
}

/// Variables other GitHub tools read a token from, which Klaud reads only
/// when `github.token_env` names them: the `gh` CLI's.
pub const UNREAD_TOKEN_ENV: [&str; 2] = ["GH_TOKEN", "GH_ENTERPRISE_TOKEN"];

/// A GitHub token found in the environment, with the variable it came from.
#[derive(Debug)]
pub struct FoundToken {
    /// The variable (one of `github.token_env`).
    pub variable: String,
    /// The token, trimmed.
    pub token: klaud_github::Secret,
}

impl GithubConfig {
    /// The first variable of `token_env` that `lookup` finds set and not
    /// blank; an error names a variable that is not UTF-8.
    pub fn token_from(
        &self,
        lookup: impl Fn(&str) -> Result<String, std::env::VarError>,
    ) -> Result<Option<FoundToken>, CredentialError> {
        for name in &self.token_env {
            match lookup(name) {
                Ok(value) if !value.trim().is_empty() => {
                    return Ok(Some(FoundToken {
                        variable: name.clone(),
                        token: klaud_github::Secret::new(value.trim()),
                    }));
                }
                Ok(_) | Err(std::env::VarError::NotPresent) => {}
                Err(std::env::VarError::NotUnicode(_)) => {
                    return Err(CredentialError(format!(
                        "environment variable {name} is not valid UTF-8"
                    )));
                }
            }
        }
        Ok(None)
    }

    /// The web page of `repository` (`owner/name`).
    pub fn repository_web_url(&self, repository: &str) -> String {
        let origin = match &self.web_url {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => {
                let api = self.api_url.trim_end_matches('/');
                match api.strip_suffix("/api/v3") {
                    Some(host) => host.to_owned(),
                    None if api == "https://api.github.com" => "https://github.com".to_owned(),
                    None => api.replacen("://api.", "://", 1),
                }
            }
        };
        format!("{origin}/{repository}")
    }

    /// When no variable of `token_env` holds a token but one another
    /// GitHub tool reads does (`GH_TOKEN`, the `gh` CLI's): a hint that
    /// Klaud does not read it, and how to hand it over. A token there is
    /// often meant for Klaud, and without the hint the run only says that
    /// none is set.
    pub fn unread_token_hint(
        &self,
        lookup: impl Fn(&str) -> Result<String, std::env::VarError>,
    ) -> Option<String> {
        if self.app_id.is_some() || matches!(self.token_from(&lookup), Ok(Some(_)) | Err(_)) {
            return None;
        }
        let unread = UNREAD_TOKEN_ENV.iter().find(|name| {
            !self.token_env.iter().any(|n| n == *name)
                && lookup(name).is_ok_and(|v| !v.trim().is_empty())
        })?;
        let read = self
            .token_env
            .first()
            .map_or("KLAUD_GITHUB_TOKEN", String::as_str);
        Some(format!(
            "{unread} is set but Klaud does not read it (it reads {}: github.token_env); \
             export {read}=\"${unread}\", or add \"{unread}\" to github.token_env",
            if self.token_env.is_empty() {
                "no variable".to_owned()
            } else {
                self.token_env.join(", ")
            }
        ))
    }

    /// What to do when no token is set, with the hint of
    /// [`GithubConfig::unread_token_hint`] when it applies.
    pub fn missing_token_in(
        &self,
        lookup: impl Fn(&str) -> Result<String, std::env::VarError>,
    ) -> String {
        match self.unread_token_hint(lookup) {
            Some(hint) => format!("{}; {hint}", self.missing_token()),
            None => self.missing_token(),
        }
    }

    /// What to do when no token is set.
    pub fn missing_token(&self) -> String {
        format!(
            "no GitHub token: set one of {} (github.token_env) to a token of {:?}, or act as a \
             GitHub App (github.app_id or --app-id, with its private key)",
            self.token_env.join(", "),
            self.bot_login
        )
    }
}

impl Default for GithubConfig {
    fn default() -> Self {
        Self {
            api_url: "https://api.github.com".to_owned(),
            repository: None,
            bot_login: "Klaud-Cold".to_owned(),
            token_env: vec!["KLAUD_GITHUB_TOKEN".to_owned(), "GITHUB_TOKEN".to_owned()],
            app_id: None,
            app_installation_id: None,
            app_private_key_file: None,
            app_private_key_env: "KLAUD_GITHUB_APP_PRIVATE_KEY".to_owned(),
            web_url: None,
            write_timeout: klaud_github::DEFAULT_WRITE_TIMEOUT,
            write_gap: None,
            writes_per_minute: None,
            writes_per_hour: None,
        }
    }
}

/// `[daemon]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonConfig {
    /// When planner waves fire: 5-field crontab, or 6/7 fields with seconds first.
    pub schedule: String,
    /// IANA time zone of the schedule.
    pub timezone: String,
    /// How often the reconcile loop polls owned PRs and runs (conditional
    /// requests; a verified webhook wakes it early).
    #[serde(deserialize_with = "duration")]
    pub reconcile_interval: Duration,
    /// How long a claim's lease lasts; heartbeats renew it once less than
    /// half is left. At least 4 × `reconcile_interval` (and 5 s).
    #[serde(deserialize_with = "duration")]
    pub lease: Duration,
    /// Lease that must be left, beyond a GitHub write's timeout, when the
    /// write is sent; a stalled instance never writes after its lease
    /// could have been taken over.
    #[serde(deserialize_with = "duration")]
    pub lease_margin: Duration,
    /// Candidates driven at once per repository.
    pub concurrency: usize,
    /// Dashboard address (loopback unless `dashboard_allow_remote`).
    pub dashboard_listen: String,
    /// Allow a non-loopback dashboard address.
    pub dashboard_allow_remote: bool,
    /// Environment variable with the webhook secret; no webhook endpoint without it.
    pub webhook_secret_env: Option<String>,
    /// Where the local store (a cache and journal; deletable) lives.
    pub store: String,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        Self {
            schedule: "0 */6 * * *".to_owned(),
            timezone: "UTC".to_owned(),
            reconcile_interval: Duration::from_secs(60),
            lease: Duration::from_secs(2 * 3600),
            lease_margin: Duration::from_secs(60),
            concurrency: 2,
            dashboard_listen: klaud_service::dashboard::DEFAULT_LISTEN.to_owned(),
            dashboard_allow_remote: false,
            webhook_secret_env: None,
            store: ".klaud/store".to_owned(),
        }
    }
}

/// `[lifecycle]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LifecycleConfig {
    /// The branch PRs target and bumps start from.
    pub base_branch: String,
    /// The one primary sweep label Klaud sets for the final sweep.
    pub sweep_label: String,
    /// Repairs a candidate may use.
    pub repair_budget: u32,
    /// The repair hook: a command (argv) given the failure context as JSON
    /// on stdin; empty means no hook (a failed smoke finishes `failed`).
    pub repair_command: Vec<String>,
    /// How long one run of the repair command may take before it is
    /// killed; must be shorter than `daemon.lease`, so a claim does not
    /// lapse while its owner waits on the hook.
    #[serde(deserialize_with = "duration")]
    pub repair_timeout: Duration,
    /// Directory Klaud makes the repair hook's git checkout of the head in
    /// (`<dir>/<candidate>`, removed after the hook); empty: no checkout.
    pub repair_checkout_dir: String,
    /// Authorize reuse of the validated sweep at merge: post
    /// `/reuse-sweep-run <run-id>` when GitHub gives Klaud's comments an
    /// association the repository's reuse gate accepts, else ask a
    /// maintainer for that line. `use_comment` is the former name.
    #[serde(alias = "use_comment")]
    pub authorize_reuse: bool,
    /// Base URL of the public results API the baseline is frozen from;
    /// empty means no baseline (every point N/A, with the reason).
    pub baseline_api: String,
    /// Model prefix (a master entry's `model-prefix`, e.g. `dsr1`) →
    /// display name the results API knows it by (`DeepSeek-R1-0528`): an
    /// override of the name Klaud finds in the API itself.
    pub model_names: BTreeMap<String, String>,
    /// Whether the final sweep runs on draft PRs: `"auto"` (default) reads
    /// the sweep workflow's job conditions at the base commit, `true` keeps
    /// the PR a draft until Klaud finishes, `false` marks it ready for
    /// review before the sweep label is added.
    #[serde(deserialize_with = "draft_policy")]
    pub sweep_runs_on_drafts: DraftPolicy,
    /// A Klaud PR already open when somebody else's PR starts to change the
    /// same family: `"leave"` (default) leaves it and notes the overlap on
    /// the dashboard, `"handoff"` ends it `handoff` with the usual cleanup.
    pub on_human_overlap: klaud_lifecycle::engine::HumanOverlap,
    /// Whether a candidate needs the published baseline of its family's
    /// current image for every point before any GPU work; without it the
    /// candidate ends `readiness-blocked` (default true). Checked only when
    /// `baseline_api` is set. false: missing points are N/A rows.
    pub require_baseline: bool,
    /// Live attempt reports: while a smoke or sweep run is in progress its
    /// report comment is edited in place at most once per this interval
    /// (and only when something changed), first posted when a job finishes
    /// or the run is this old; `"0s"` posts the report only when the run
    /// ends.
    #[serde(deserialize_with = "duration")]
    pub live_report_interval: Duration,
    /// The playbook of known failures, a path in the benchmark repository
    /// (read at the base branch; format: `configs/playbook.md`); empty: no
    /// playbook. A missing file means no entries.
    pub playbook: String,
}

/// Why a `lifecycle.playbook` path cannot name a file of the repository,
/// if it cannot.
fn playbook_path_problem(path: &str) -> Option<String> {
    if path.is_empty() {
        return None;
    }
    if path.len() > 200 {
        return Some("longer than 200 characters".to_owned());
    }
    if path.starts_with('/') || path.contains('\\') {
        return Some(format!(
            "{path:?} must be a path inside the benchmark repository, like .github/klaud-playbook.yaml"
        ));
    }
    if path
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Some(format!(
            "{path:?} has an empty, . or .. part; write it like .github/klaud-playbook.yaml"
        ));
    }
    None
}

/// `"auto"`, `true` or `false`.
fn draft_policy<'de, D: Deserializer<'de>>(deserializer: D) -> Result<DraftPolicy, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Flag(bool),
        Word(String),
    }
    match Raw::deserialize(deserializer)? {
        Raw::Flag(true) => Ok(DraftPolicy::Runs),
        Raw::Flag(false) => Ok(DraftPolicy::Skips),
        Raw::Word(w) if w == "auto" => Ok(DraftPolicy::Auto),
        Raw::Word(w) => Err(serde::de::Error::custom(format!(
            "lifecycle.sweep_runs_on_drafts: expected \"auto\", true or false, found {w:?}"
        ))),
    }
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        Self {
            base_branch: "main".to_owned(),
            sweep_label: "full-sweep-fail-fast".to_owned(),
            repair_budget: 5,
            repair_command: Vec::new(),
            repair_timeout: Duration::from_secs(90 * 60),
            repair_checkout_dir: ".klaud/repair".to_owned(),
            authorize_reuse: true,
            baseline_api: String::new(),
            model_names: BTreeMap::new(),
            sweep_runs_on_drafts: DraftPolicy::Auto,
            on_human_overlap: klaud_lifecycle::engine::HumanOverlap::Leave,
            require_baseline: true,
            live_report_interval: Duration::from_secs(5 * 60),
            playbook: klaud_lifecycle::playbook::DEFAULT_PATH.to_owned(),
        }
    }
}

/// `[planner]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlannerConfig {
    /// At most this many candidates per wave.
    pub max_candidates: usize,
    /// A newer tag must be at least this old (half-published nightlies are skipped).
    #[serde(deserialize_with = "duration")]
    pub min_age: Duration,
    /// After a family finishes, wait this long before picking it again.
    #[serde(deserialize_with = "duration")]
    pub cooldown: Duration,
}

impl Default for PlannerConfig {
    fn default() -> Self {
        Self {
            max_candidates: 5,
            min_age: Duration::from_secs(24 * 3600),
            cooldown: Duration::from_secs(72 * 3600),
        }
    }
}

/// `[registry]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RegistryConfig {
    /// Registry host → base URL to use instead (air-gapped sites, tests).
    /// The key `hub.docker.com` redirects Docker Hub's tags API.
    pub mirrors: BTreeMap<String, String>,
    /// Registry host → basic credentials, read from environment variables.
    pub credentials: BTreeMap<String, CredentialEnv>,
    /// Requests in flight at once to one registry host.
    pub concurrency: usize,
    /// Per-request timeout.
    #[serde(deserialize_with = "duration")]
    pub timeout: Duration,
    /// Retries of a read after 5xx, 429 or a dropped connection.
    pub max_retries: u32,
    /// `tags/list` pages followed at most.
    pub max_tag_pages: usize,
    /// Registry host → base URL of a Docker-Hub-style tags API that gives
    /// push times (`{base}/v2/namespaces/{ns}/repositories/{repo}/tags`).
    /// Docker Hub needs no entry; without one, other registries' tracks are
    /// ordered by image creation times. Default: empty.
    pub hub_api: BTreeMap<String, String>,
    /// How long a registry host that failed at the connection level (DNS,
    /// refused, timeout) is not asked again. Default 15m.
    #[serde(deserialize_with = "duration")]
    pub breaker_cooldown: Duration,
    /// Most tags of one track whose creation time is read to order it when
    /// the registry gives no push times; past it the family is an error.
    /// Default 2000.
    pub max_timed_tags: usize,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self {
            mirrors: BTreeMap::new(),
            credentials: BTreeMap::new(),
            concurrency: 16,
            timeout: Duration::from_secs(30),
            max_retries: 4,
            max_tag_pages: 50,
            hub_api: BTreeMap::new(),
            breaker_cooldown: klaud_planner::registry::RegistryConfig::default().breaker_cooldown,
            max_timed_tags: klaud_planner::plan::DEFAULT_MAX_TIMED_TAGS,
        }
    }
}

/// Names of the environment variables holding a registry's credentials.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialEnv {
    /// Variable with the user name.
    pub username_env: String,
    /// Variable with the password or token.
    pub password_env: String,
}

/// One `[[tracks]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrackConfig {
    /// Normalized image repository, e.g. `lmsysorg/sglang` or `nvcr.io/nvidia/tensorrt-llm/release`.
    pub repository: String,
    /// Regex over the whole tag with named captures `version`, `date`, `number`, `commit`.
    pub pattern: String,
    /// `semver`, `numeric`, `date` or `pushed`.
    pub ordering: String,
}

/// One `[[release_tracks]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseTrackConfig {
    /// Normalized image repository.
    pub repository: String,
    /// Regex over the whole release tag with a `version` (or `date`, `number`) capture.
    pub pattern: String,
    /// `semver`, `numeric` or `date`.
    pub ordering: String,
    /// Only nightlies on this track name may move (as `klaud plan` prints
    /// it, e.g. `nightly-<commit>`); absent: every commit-named track.
    pub nightly_track: Option<String>,
}

/// A configuration problem, naming the file and what to fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// TOML syntax, an unknown key or a wrong type (the message has the line).
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    /// A value that parsed but makes no sense.
    #[error("{path}: {key}: {message}")]
    Invalid {
        path: String,
        key: String,
        message: String,
    },
}

/// Where the configuration is looked for without `--config` or
/// `$KLAUD_CONFIG`, under the checkout a command reads (the working
/// directory for commands without `--checkout`): where `klaud init` and
/// the README put it, then the top of the checkout.
/// A configured rule that does not read: the key it stands under
/// (`ignore[2].tag`) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct RuleError {
    /// The key.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl RuleError {
    fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            message: message.into(),
        }
    }
}

pub const CONFIG_LOCATIONS: [&str; 2] = ["configs/klaud.toml", "klaud.toml"];

/// The first of [`CONFIG_LOCATIONS`] under `dir` that is a file.
pub fn find_config(dir: &Path) -> Option<std::path::PathBuf> {
    CONFIG_LOCATIONS
        .iter()
        .map(|name| dir.join(name))
        .find(|path| path.is_file())
}

impl Config {
    /// Reads and checks a configuration file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let display = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: display.clone(),
            source,
        })?;
        Self::parse(&display, &text)
    }

    /// Parses and checks configuration text; `origin` names it in errors.
    pub fn parse(origin: &str, text: &str) -> Result<Self, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        config.check(origin)?;
        Ok(config)
    }

    /// The configured `[[ignore]]` rules; errors name the key
    /// (`ignore[2].tag`).
    pub fn ignore_rules(&self) -> Result<Vec<klaud_planner::ignore::IgnoreRule>, RuleError> {
        use klaud_planner::ignore::{IgnoreRule, IgnoreSource, IgnoreTarget};
        let mut out = Vec::new();
        for (i, rule) in self.ignore.iter().enumerate() {
            let key = format!("ignore[{i}]");
            fn nonempty<'v>(
                key: &str,
                field: &str,
                value: &'v Option<String>,
            ) -> Result<Option<&'v str>, RuleError> {
                match value.as_deref().map(str::trim) {
                    Some("") => Err(RuleError::new(
                        format!("{key}.{field}"),
                        "must not be empty".to_owned(),
                    )),
                    other => Ok(other),
                }
            }
            let family = nonempty(&key, "family", &rule.family)?;
            let repository = nonempty(&key, "repository", &rule.repository)?;
            let tag = nonempty(&key, "tag", &rule.tag)?;
            if rule.reason.trim().is_empty() {
                return Err(RuleError::new(
                    format!("{key}.reason"),
                    "say why (it is shown in `klaud plan` and on the dashboard)".to_owned(),
                ));
            }
            let target = match (family, repository, tag) {
                (Some(f), None, None) => IgnoreTarget::Family(f.to_owned()),
                (Some(_), Some(_), _) => {
                    return Err(RuleError::new(
                        format!("{key}.repository"),
                        "set either `family` or `repository`, not both".to_owned(),
                    ));
                }
                (Some(_), None, Some(_)) => {
                    return Err(RuleError::new(
                        format!("{key}.tag"),
                        "`tag` narrows a `repository`; a family rule has none".to_owned(),
                    ));
                }
                (None, None, _) => {
                    return Err(RuleError::new(
                        key.clone(),
                        "set `family` (a family pattern) or `repository` (an image repository, with an optional `tag` pattern)".to_owned(),
                    ));
                }
                (None, Some(r), tag) => {
                    // Spelled as the planner compares it (`docker.io/` and
                    // enroot's `#` dropped); a tag or digest is not a
                    // repository.
                    // An image reference needs a tag: one is put on to
                    // read the repository, which must not have its own.
                    let parsed = klaud_planner::image::ImageRef::parse(&format!("{r}:probe"))
                        .ok()
                        .filter(|i| i.tag() == Some("probe") && !r.contains('@'));
                    let Some(parsed) = parsed else {
                        return Err(RuleError::new(
                            format!("{key}.repository"),
                            format!(
                                "{r:?} is not an image repository (no tag or digest; put a tag pattern in `tag`)"
                            ),
                        ));
                    };
                    let repository = parsed.normalized_repository();
                    match tag {
                        None => IgnoreTarget::Repository(repository),
                        Some(t) => IgnoreTarget::Tag {
                            repository,
                            tag: t.to_owned(),
                        },
                    }
                }
            };
            out.push(IgnoreRule {
                target,
                reason: rule.reason.trim().to_owned(),
                source: IgnoreSource::Config,
            });
        }
        Ok(out)
    }

    /// The configured `[[experiments]]`, derived variants resolved; errors
    /// name the key.
    pub fn experiment_specs(
        &self,
    ) -> Result<Vec<klaud_lifecycle::experiment::ExperimentSpec>, RuleError> {
        use klaud_planner::variant::{Variant, parse_edits, resolve};
        let mut out: Vec<klaud_lifecycle::experiment::ExperimentSpec> = Vec::new();
        for (i, e) in self.experiments.iter().enumerate() {
            let key = format!("experiments[{i}]");
            if !klaud_planner::variant::valid_name(&e.name) {
                return Err(RuleError::new(
                    format!("{key}.name"),
                    format!("{:?} must be 1 to 32 letters, digits, '-' or '_'", e.name),
                ));
            }
            if out.iter().any(|o| o.name == e.name) {
                return Err(RuleError::new(
                    format!("{key}.name"),
                    format!("experiment {} is declared twice", e.name),
                ));
            }
            if e.families.is_empty() || e.families.iter().any(|f| f.trim().is_empty()) {
                return Err(RuleError::new(
                    format!("{key}.families"),
                    "list at least one family or pattern, none empty".to_owned(),
                ));
            }
            if e.variants.is_empty() {
                return Err(RuleError::new(
                    format!("{key}.variants"),
                    "an experiment needs at least one variant".to_owned(),
                ));
            }
            let mut variants = Vec::new();
            for (j, v) in e.variants.iter().enumerate() {
                let mut edits = Vec::new();
                for (k, text) in v.edits.iter().enumerate() {
                    edits.extend(parse_edits(text).map_err(|err| {
                        RuleError::new(format!("{key}.variants[{j}].edits[{k}]"), err.to_string())
                    })?);
                }
                variants.push(Variant {
                    name: v.name.clone(),
                    from: v.from.clone(),
                    edits,
                });
            }
            let variants = resolve(&variants)
                .map_err(|err| RuleError::new(format!("{key}.variants"), err.to_string()))?;
            out.push(klaud_lifecycle::experiment::ExperimentSpec {
                name: e.name.clone(),
                families: e.families.clone(),
                max_concurrent: e.max_concurrent,
                variants,
            });
        }
        Ok(out)
    }

    /// How to read a checkout: the configured `[[recipe_roots]]`.
    pub fn repo_options(&self) -> klaud_planner::repo::RepoOptions {
        klaud_planner::repo::RepoOptions {
            recipe_roots: self
                .recipe_roots
                .iter()
                .map(|r| klaud_planner::repo::RecipeRoot {
                    prefix: r.prefix.clone(),
                    folder: r.folder.clone(),
                })
                .collect(),
        }
    }

    /// The configured bump options.
    pub fn bump_options(&self) -> klaud_planner::bump::BumpOptions {
        klaud_planner::bump::BumpOptions {
            disagreeing: self.bump.disagreeing_recipes,
        }
    }

    /// The configured `[[tracks]]` as planner rules; errors name the key.
    pub fn track_rules(&self) -> Result<Vec<klaud_planner::tracks::TrackRule>, RuleError> {
        self.tracks
            .iter()
            .enumerate()
            .map(|(index, track)| {
                rule(
                    &format!("tracks[{index}]"),
                    &track.repository,
                    &track.pattern,
                    &track.ordering,
                )
            })
            .collect()
    }

    /// The configured `[[release_tracks]]` as planner rules.
    pub fn release_rules(&self) -> Result<Vec<klaud_planner::plan::ReleaseRule>, RuleError> {
        self.release_tracks
            .iter()
            .enumerate()
            .map(|(index, release)| {
                let key = format!("release_tracks[{index}]");
                Ok(klaud_planner::plan::ReleaseRule {
                    track: rule(
                        &key,
                        &release.repository,
                        &release.pattern,
                        &release.ordering,
                    )?,
                    nightly_track: release.nightly_track.clone(),
                })
            })
            .collect()
    }
}

fn rule(
    key: &str,
    repository: &str,
    pattern: &str,
    ordering: &str,
) -> Result<klaud_planner::tracks::TrackRule, RuleError> {
    let ordering = ordering
        .parse()
        .map_err(|e| RuleError::new(format!("{key}.ordering"), format!("{e}")))?;
    klaud_planner::tracks::TrackRule::new(repository, pattern, ordering)
        .map_err(|e| RuleError::new(key.to_owned(), e.to_string()))
}

mod check;
mod duration;

pub use duration::{DurationError, parse_duration, parse_interval};
use duration::{at_least, duration, optional_duration};

#[cfg(test)]
mod tests;
