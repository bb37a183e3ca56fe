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
    /// (and only when something changed); `"0s"` posts the report only when
    /// the run ends.
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
    /// Requests in flight at once.
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

    fn check(&self, origin: &str) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            path: origin.to_owned(),
            key: key.to_owned(),
            message,
        };
        if let Some(repository) = &self.github.repository {
            let parts: Vec<&str> = repository.split('/').collect();
            if parts.len() != 2 || parts.iter().any(|p| p.is_empty()) {
                return Err(invalid(
                    "github.repository",
                    format!("{repository:?} must be owner/name"),
                ));
            }
        }
        if self.github.app_id.is_none() {
            for (key, set) in [
                (
                    "github.app_installation_id",
                    self.github.app_installation_id.is_some(),
                ),
                (
                    "github.app_private_key_file",
                    self.github.app_private_key_file.is_some(),
                ),
            ] {
                if set {
                    return Err(invalid(
                        key,
                        "is set but github.app_id is not; set the App's id too, or remove the key"
                            .to_owned(),
                    ));
                }
            }
        }
        for (prefix, name) in &self.lifecycle.model_names {
            let key = format!("lifecycle.model_names.{prefix:?}");
            // Keys used to be the master's `model` path; such a key now
            // matches no family, silently, so it is refused.
            if prefix.contains('/') {
                return Err(invalid(
                    &key,
                    format!(
                        "keys are model prefixes (a master entry's `model-prefix`, e.g. \"dsr1\"), \
                         not model paths; write [lifecycle.model_names] \"<model-prefix>\" = {name:?}"
                    ),
                ));
            }
            if prefix.trim().is_empty() || name.trim().is_empty() {
                return Err(invalid(
                    &key,
                    "neither the model prefix nor its display name may be empty".to_owned(),
                ));
            }
        }
        klaud_planner::audit::validate(&self.audit.engines)
            .map_err(|e| invalid("audit.engines", e.to_string()))?;
        self.hunt
            .check()
            .map_err(|(key, message)| invalid(key, message))?;
        if self.audit.max_files > klaud_github::COMPARE_FILE_LIMIT {
            return Err(invalid(
                "audit.max_files",
                format!(
                    "{} is more than the {} changed files GitHub's compare lists",
                    self.audit.max_files,
                    klaud_github::COMPARE_FILE_LIMIT
                ),
            ));
        }
        url::Url::parse(&self.github.api_url).map_err(|e| {
            invalid(
                "github.api_url",
                format!("{:?} is not a URL: {e}", self.github.api_url),
            )
        })?;
        if let Some(web) = &self.github.web_url {
            url::Url::parse(web)
                .map_err(|e| invalid("github.web_url", format!("{web:?} is not a URL: {e}")))?;
        }
        if let Some(c) = &self.capacity {
            klaud_planner::capacity::HttpCapacity::new(
                &c.origin,
                &c.path,
                "checked-later".into(),
                c.timeout,
            )
            .map_err(|e| {
                let key = if e.to_string().contains("path ") {
                    "capacity.path"
                } else {
                    "capacity.origin"
                };
                invalid(key, e.to_string())
            })?;
            at_least(c.timeout, MIN_INTERVAL)
                .map_err(|e| invalid("capacity.timeout", e.to_string()))?;
            if c.key_env.trim().is_empty() {
                return Err(invalid("capacity.key_env", "must name a variable".into()));
            }
            for (name, ids) in &c.clusters {
                if ids.is_empty() || ids.iter().any(|i| i.trim().is_empty()) {
                    return Err(invalid(
                        &format!("capacity.clusters.{name}"),
                        "must list at least one non-empty cluster id".into(),
                    ));
                }
            }
        }
        if self.planner.max_candidates == 0 {
            return Err(invalid(
                "planner.max_candidates",
                "must be at least 1".to_owned(),
            ));
        }
        klaud_service::daemon::schedule::WaveSchedule::parse(
            &self.daemon.schedule,
            &self.daemon.timezone,
        )
        .map_err(|e| invalid("daemon.schedule", e.to_string()))?;
        let listen: std::net::SocketAddr = self.daemon.dashboard_listen.parse().map_err(|_| {
            invalid(
                "daemon.dashboard_listen",
                format!(
                    "{:?} is not an address like 127.0.0.1:8723",
                    self.daemon.dashboard_listen
                ),
            )
        })?;
        klaud_service::dashboard::check_listen(listen, self.daemon.dashboard_allow_remote)
            .map_err(|e| invalid("daemon.dashboard_listen", e.to_string()))?;
        if self.daemon.concurrency == 0 {
            return Err(invalid(
                "daemon.concurrency",
                "must be at least 1".to_owned(),
            ));
        }
        // Waits (`planner.min_age`, `planner.cooldown`) may be zero: that
        // turns the wait off. Intervals and timeouts may not.
        for (key, value) in [
            ("daemon.reconcile_interval", self.daemon.reconcile_interval),
            ("registry.timeout", self.registry.timeout),
            ("github.write_timeout", self.github.write_timeout),
        ] {
            at_least(value, MIN_INTERVAL).map_err(|e| invalid(key, e.to_string()))?;
        }
        // Heartbeats run inside reconcile passes and renew once less than
        // half of the lease is left: a pass must fit in that half with room
        // to spare for the pass itself, or a live owner loses its claims.
        let floor = self
            .daemon
            .reconcile_interval
            .saturating_mul(LEASE_PER_RECONCILE)
            .max(MIN_LEASE);
        if self.daemon.lease < floor {
            return Err(invalid(
                "daemon.lease",
                format!(
                    "{}s is too short: heartbeats can keep a lease only when it is at least \
                     {LEASE_PER_RECONCILE} × daemon.reconcile_interval and at least {}s \
                     (here {}s)",
                    self.daemon.lease.as_secs(),
                    MIN_LEASE.as_secs(),
                    floor.as_secs()
                ),
            ));
        }
        // A write is sent only with lease_margin + write_timeout of lease
        // left, so it lands (or is given up) before the lease ends and
        // another instance may take over. The engine caps that window at a
        // quarter of the lease (less the second leases are rounded to):
        // a shorter lease would let a stalled write land after a takeover.
        let window = self
            .daemon
            .lease_margin
            .saturating_add(self.github.write_timeout);
        let needed = window
            .saturating_mul(4)
            .saturating_add(Duration::from_secs(1));
        if self.daemon.lease < needed {
            return Err(invalid(
                "daemon.lease",
                format!(
                    "{}s is too short for the write window: a GitHub write is sent only with \
                     daemon.lease_margin + github.write_timeout ({}s + {}s) of lease left, and \
                     that must fit four times in the lease (at least {}s); lengthen the lease or \
                     shorten daemon.lease_margin or github.write_timeout",
                    self.daemon.lease.as_secs_f64(),
                    self.daemon.lease_margin.as_secs_f64(),
                    self.github.write_timeout.as_secs_f64(),
                    needed.as_secs_f64()
                ),
            ));
        }
        // Only with a hook: without one the timeout is never used.
        if !self.lifecycle.repair_command.is_empty()
            && (self.lifecycle.repair_timeout.is_zero()
                || self.lifecycle.repair_timeout >= self.daemon.lease)
        {
            return Err(invalid(
                "lifecycle.repair_timeout",
                format!(
                    "{}s must be more than zero and shorter than daemon.lease ({}s): the \
                     claim's heartbeat does not run while the hook does",
                    self.lifecycle.repair_timeout.as_secs(),
                    self.daemon.lease.as_secs()
                ),
            ));
        }
        if let Some(why) = playbook_path_problem(&self.lifecycle.playbook) {
            return Err(invalid("lifecycle.playbook", why));
        }
        if self.registry.concurrency == 0 {
            return Err(invalid(
                "registry.concurrency",
                "must be at least 1".to_owned(),
            ));
        }
        for (host, base) in &self.registry.mirrors {
            url::Url::parse(base).map_err(|e| {
                invalid(
                    &format!("registry.mirrors.{host}"),
                    format!("{base:?} is not a URL: {e}"),
                )
            })?;
        }
        for (host, base) in &self.registry.hub_api {
            let key = format!("registry.hub_api.{host}");
            let url = url::Url::parse(base)
                .map_err(|e| invalid(&key, format!("{base:?} is not a URL: {e}")))?;
            if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
                return Err(invalid(
                    &key,
                    format!("{base:?} must be an http or https URL with a host"),
                ));
            }
        }
        if self.registry.breaker_cooldown.is_zero() {
            return Err(invalid(
                "registry.breaker_cooldown",
                "must be longer than 0s (a host that cannot be reached would be asked by every request)"
                    .to_owned(),
            ));
        }
        if self.registry.max_timed_tags == 0 {
            return Err(invalid(
                "registry.max_timed_tags",
                "must be at least 1".to_owned(),
            ));
        }
        for (index, root) in self.recipe_roots.iter().enumerate() {
            let safe = |path: &str| {
                !path.trim().is_empty()
                    && !path.starts_with('/')
                    && path.split('/').all(|part| part != "..")
            };
            if !safe(&root.prefix) || !safe(&root.folder) {
                return Err(invalid(
                    &format!("recipe_roots[{index}]"),
                    format!(
                        "prefix {:?} and folder {:?} must be non-empty relative paths without `..`",
                        root.prefix, root.folder
                    ),
                ));
            }
        }
        self.experiment_specs()
            .map_err(|(key, message)| invalid(&key, message))?;
        self.ignore_rules()
            .map_err(|(key, message)| invalid(&key, message))?;
        self.track_rules()
            .map_err(|(key, message)| invalid(&key, message))?;
        self.release_rules()
            .map_err(|(key, message)| invalid(&key, message))?;
        Ok(())
    }

    /// The configured `[[ignore]]` rules; errors name the key
    /// (`ignore[2].tag`).
    pub fn ignore_rules(&self) -> Result<Vec<klaud_planner::ignore::IgnoreRule>, (String, String)> {
        use klaud_planner::ignore::{IgnoreRule, IgnoreSource, IgnoreTarget};
        let mut out = Vec::new();
        for (i, rule) in self.ignore.iter().enumerate() {
            let key = format!("ignore[{i}]");
            fn nonempty<'v>(
                key: &str,
                field: &str,
                value: &'v Option<String>,
            ) -> Result<Option<&'v str>, (String, String)> {
                match value.as_deref().map(str::trim) {
                    Some("") => Err((format!("{key}.{field}"), "must not be empty".to_owned())),
                    other => Ok(other),
                }
            }
            let family = nonempty(&key, "family", &rule.family)?;
            let repository = nonempty(&key, "repository", &rule.repository)?;
            let tag = nonempty(&key, "tag", &rule.tag)?;
            if rule.reason.trim().is_empty() {
                return Err((
                    format!("{key}.reason"),
                    "say why (it is shown in `klaud plan` and on the dashboard)".to_owned(),
                ));
            }
            let target = match (family, repository, tag) {
                (Some(f), None, None) => IgnoreTarget::Family(f.to_owned()),
                (Some(_), Some(_), _) => {
                    return Err((
                        format!("{key}.repository"),
                        "set either `family` or `repository`, not both".to_owned(),
                    ));
                }
                (Some(_), None, Some(_)) => {
                    return Err((
                        format!("{key}.tag"),
                        "`tag` narrows a `repository`; a family rule has none".to_owned(),
                    ));
                }
                (None, None, _) => {
                    return Err((
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
                        return Err((
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
    ) -> Result<Vec<klaud_lifecycle::experiment::ExperimentSpec>, (String, String)> {
        use klaud_planner::variant::{Variant, parse_edits, resolve};
        let mut out: Vec<klaud_lifecycle::experiment::ExperimentSpec> = Vec::new();
        for (i, e) in self.experiments.iter().enumerate() {
            let key = format!("experiments[{i}]");
            if !klaud_planner::variant::valid_name(&e.name) {
                return Err((
                    format!("{key}.name"),
                    format!("{:?} must be 1 to 32 letters, digits, '-' or '_'", e.name),
                ));
            }
            if out.iter().any(|o| o.name == e.name) {
                return Err((
                    format!("{key}.name"),
                    format!("experiment {} is declared twice", e.name),
                ));
            }
            if e.families.is_empty() || e.families.iter().any(|f| f.trim().is_empty()) {
                return Err((
                    format!("{key}.families"),
                    "list at least one family or pattern, none empty".to_owned(),
                ));
            }
            if e.variants.is_empty() {
                return Err((
                    format!("{key}.variants"),
                    "an experiment needs at least one variant".to_owned(),
                ));
            }
            let mut variants = Vec::new();
            for (j, v) in e.variants.iter().enumerate() {
                let mut edits = Vec::new();
                for (k, text) in v.edits.iter().enumerate() {
                    edits.extend(parse_edits(text).map_err(|err| {
                        (format!("{key}.variants[{j}].edits[{k}]"), err.to_string())
                    })?);
                }
                variants.push(Variant {
                    name: v.name.clone(),
                    from: v.from.clone(),
                    edits,
                });
            }
            let variants =
                resolve(&variants).map_err(|err| (format!("{key}.variants"), err.to_string()))?;
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
    pub fn track_rules(&self) -> Result<Vec<klaud_planner::tracks::TrackRule>, (String, String)> {
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
    pub fn release_rules(&self) -> Result<Vec<klaud_planner::plan::ReleaseRule>, (String, String)> {
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
) -> Result<klaud_planner::tracks::TrackRule, (String, String)> {
    let ordering = ordering
        .parse()
        .map_err(|e| (format!("{key}.ordering"), format!("{e}")))?;
    klaud_planner::tracks::TrackRule::new(repository, pattern, ordering)
        .map_err(|e| (key.to_owned(), e.to_string()))
}

/// Durations are written like `30s`, `90m`, `2 hours` or `1h 30m`.
fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

/// [`duration`] for a key whose absence means "the default".
fn optional_duration<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Duration>, D::Error> {
    duration(deserializer).map(Some)
}

/// Parses an interval or timeout (`30s`, `90m`, …) that must be at least
/// `min`; errors say the minimum.
pub fn parse_interval(text: &str, min: Duration) -> Result<Duration, DurationError> {
    let value = parse_duration(text)?;
    at_least(value, min)?;
    Ok(value)
}

fn at_least(value: Duration, min: Duration) -> Result<(), DurationError> {
    if value < min {
        return Err(DurationError::TooShort { value, min });
    }
    Ok(())
}

/// How a duration is written, for error messages.
const DURATION_SYNTAX: &str = "write it like 30s, 90m, 24h, 7d, \"2 hours\" or \"1h 30m\"";

/// A duration that does not read, or is shorter than allowed.
#[derive(Debug, thiserror::Error)]
pub enum DurationError {
    #[error("{text:?} is negative; {syntax}", syntax = DURATION_SYNTAX)]
    Negative { text: String },
    #[error("{text:?} has no unit; {syntax}", syntax = DURATION_SYNTAX)]
    NoUnit { text: String },
    #[error("{text:?} is too long")]
    TooLong { text: String },
    #[error("{text:?} is not a duration ({source}); {syntax}", syntax = DURATION_SYNTAX)]
    Invalid {
        text: String,
        #[source]
        source: humantime::DurationError,
    },
    #[error(
        "{}s is too short: an interval must be at least {}s",
        value.as_secs(),
        min.as_secs()
    )]
    TooShort { value: Duration, min: Duration },
}

/// Parses `30s`, `90m`, `2 hours`, `1h 30m` (humantime's units).
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let text = text.trim();
    if text.starts_with('-') {
        return Err(DurationError::Negative { text: text.into() });
    }
    humantime::parse_duration(text).map_err(|source| match source {
        humantime::DurationError::UnknownUnit { unit, .. } if unit.is_empty() => {
            DurationError::NoUnit { text: text.into() }
        }
        humantime::DurationError::NumberOverflow => DurationError::TooLong { text: text.into() },
        source => DurationError::Invalid {
            text: text.into(),
            source,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repair_timeout_is_configurable_and_kept_below_the_lease() {
        let config = Config::parse("t.toml", "[lifecycle]\nrepair_timeout = \"30m\"\n").unwrap();
        assert_eq!(config.lifecycle.repair_timeout, Duration::from_secs(1800));
        assert!(Config::default().lifecycle.repair_timeout < Config::default().daemon.lease);
        let err = Config::parse(
            "t.toml",
            "[daemon]\nlease = \"1h\"\n[lifecycle]\nrepair_command = [\"fix\"]\nrepair_timeout = \"1h\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("lifecycle.repair_timeout"), "{err}");
        assert!(err.contains("daemon.lease"), "{err}");
    }

    #[test]
    fn the_playbook_path_stays_inside_the_repository() {
        assert_eq!(
            Config::default().lifecycle.playbook,
            ".github/klaud-playbook.yaml"
        );
        for ok in ["", "ops/playbook.yaml", ".github/klaud-playbook.yaml"] {
            let text = format!("[lifecycle]\nplaybook = {ok:?}\n");
            assert_eq!(
                Config::parse("t.toml", &text).unwrap().lifecycle.playbook,
                ok
            );
        }
        for bad in ["/etc/passwd", "../x.yaml", "a//b.yaml", "a/./b", "a\\b"] {
            let text = format!("[lifecycle]\nplaybook = {bad:?}\n");
            let err = Config::parse("t.toml", &text).unwrap_err().to_string();
            assert!(err.contains("lifecycle.playbook"), "{bad}: {err}");
        }
    }

    #[test]
    fn hunt_is_off_by_default_and_its_keys_are_checked() {
        let absent = Config::parse("t.toml", "").unwrap();
        assert_eq!(
            absent.hunt.settings(),
            klaud_lifecycle::hunt::HuntSettings::default()
        );
        assert!(!absent.hunt.enabled);
        let on = Config::parse(
            "t.toml",
            "[hunt]\nenabled = true\nfamilies = [\"*-nightly\"]\nbudget = 5\nweekly_budget = 20\nnoise_band = 0.08\n",
        )
        .unwrap();
        let s = on.hunt.settings();
        assert!(s.applies("configs/x-master.yaml:dsr1-nightly"));
        assert!(!s.applies("configs/x-master.yaml:dsr1"));
        assert_eq!((s.budget, s.weekly_budget, s.noise_band), (5, 20, 0.08));
        for (text, key) in [
            ("[hunt]\nbudget = 0\n", "hunt.budget"),
            ("[hunt]\nbudget = 17\nweekly_budget = 40\n", "hunt.budget"),
            (
                "[hunt]\nbudget = 6\nweekly_budget = 5\n",
                "hunt.weekly_budget",
            ),
            ("[hunt]\nnoise_band = 5\n", "hunt.noise_band"),
            ("[hunt]\nnoise_band = 0.0\n", "hunt.noise_band"),
            ("[hunt]\nfamilies = [\" \"]\n", "hunt.families"),
        ] {
            let err = Config::parse("t.toml", text).unwrap_err().to_string();
            assert!(err.contains(key), "{text:?}: {err}");
        }
        let err = Config::parse("t.toml", "[hunt]\nbudgt = 3\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("budgt"), "{err}");
    }

    #[test]
    fn audit_defaults_and_its_limits_are_checked() {
        let absent = Config::parse("t.toml", "").unwrap();
        assert!(absent.audit.enabled);
        assert_eq!(absent.audit.max_files, 300);
        assert_eq!(absent.audit.max_commit_lookups, 10);
        assert_eq!(
            absent.audit.engines,
            klaud_planner::audit::default_engines()
        );
        let err = Config::parse("t.toml", "[audit]\nmax_files = 301\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("audit.max_files"), "{err}");
        let bad = "[[audit.engines]]\nrepository = \"a/b\"\n[[audit.engines.rules]]\nkind = \"flag\"\nfiles = [\"x.py\"]\npattern = \"(\"\n";
        let err = Config::parse("t.toml", bad).unwrap_err().to_string();
        assert!(
            err.contains("audit.engines") && err.contains("a/b"),
            "{err}"
        );
        let off = Config::parse("t.toml", "[audit]\nenabled = false\n").unwrap();
        assert!(!off.audit.options().enabled);
    }

    #[test]
    fn upstream_defaults_to_the_inferencex_engines_and_an_empty_table_turns_it_off() {
        let absent = Config::parse("t.toml", "").unwrap();
        assert_eq!(absent.upstream, default_upstream());
        assert_eq!(
            absent
                .upstream
                .get("nvcr.io/nvidia/tensorrt-llm/release")
                .map(String::as_str),
            Some("NVIDIA/TensorRT-LLM")
        );
        assert_eq!(
            absent.upstream.get("rocm/atom").map(String::as_str),
            Some("ROCm/ATOM")
        );
        let off = Config::parse("t.toml", "[upstream]\n").unwrap();
        assert!(off.upstream.is_empty());
        let own = Config::parse("t.toml", "[upstream]\n\"a/b\" = \"c/d\"\n").unwrap();
        assert_eq!(own.upstream.len(), 1, "a table replaces the defaults");
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/inferencex.toml");
        assert_eq!(
            Config::load(&path).unwrap().upstream,
            default_upstream(),
            "the example lists the defaults"
        );
    }

    #[test]
    fn repositories_link_to_the_web_origin_of_their_api() {
        let mut github = GithubConfig::default();
        assert_eq!(github.repository_web_url("o/r"), "https://github.com/o/r");
        github.api_url = "https://ghe.example.com/api/v3/".into();
        assert_eq!(
            github.repository_web_url("o/r"),
            "https://ghe.example.com/o/r"
        );
        github.web_url = Some("http://127.0.0.1:4000/_html/".into());
        assert_eq!(
            github.repository_web_url("o/r"),
            "http://127.0.0.1:4000/_html/o/r"
        );
        let err = Config::parse("t.toml", "[github]\nweb_url = \"not a url\"\n")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("github.web_url"), "{err}");
    }

    #[test]
    fn the_example_configuration_parses_and_matches_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/inferencex.toml");
        let config = Config::load(&path).unwrap();
        let defaults = Config::default();
        assert_eq!(
            config.github.repository.as_deref(),
            Some("SemiAnalysisAI/InferenceX")
        );
        assert_eq!(config.github.bot_login, defaults.github.bot_login);
        assert_eq!(
            config.planner.max_candidates,
            defaults.planner.max_candidates
        );
        assert_eq!(config.planner.min_age, defaults.planner.min_age);
        assert_eq!(config.registry.concurrency, defaults.registry.concurrency);
        assert_eq!(config.registry.timeout, defaults.registry.timeout);
        assert_eq!(
            config.registry.breaker_cooldown,
            defaults.registry.breaker_cooldown
        );
        assert_eq!(
            config.registry.max_timed_tags,
            defaults.registry.max_timed_tags
        );
        assert_eq!(config.registry.hub_api, defaults.registry.hub_api);
        assert_eq!(config.daemon.schedule, defaults.daemon.schedule);
        assert_eq!(config.daemon.lease, defaults.daemon.lease);
        assert_eq!(
            config.daemon.dashboard_listen,
            defaults.daemon.dashboard_listen
        );
    }

    #[test]
    fn model_names_are_keyed_by_model_prefix_and_a_model_path_key_is_refused() {
        let ok = Config::parse(
            "t",
            "[lifecycle.model_names]\n\"qwen3.5\" = \"Qwen-3.5-397B-A17B\"\n",
        )
        .unwrap();
        assert_eq!(
            ok.lifecycle.model_names.get("qwen3.5").map(String::as_str),
            Some("Qwen-3.5-397B-A17B")
        );
        let err = Config::parse(
            "t",
            "[lifecycle.model_names]\n\"Qwen/Qwen3.5-397B-A17B-FP8\" = \"Qwen-3.5-397B-A17B\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("lifecycle.model_names") && err.contains("model prefixes"),
            "{err}"
        );
        let err = Config::parse("t", "[lifecycle.model_names]\n\"dsr1\" = \"\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("may be empty"), "{err}");
    }

    #[test]
    fn capacity_is_off_by_default_and_checked_when_present() {
        assert!(Config::parse("t", "").unwrap().capacity.is_none());
        let c = Config::parse("t", "[capacity]\norigin = \"https://dash.example\"\n")
            .unwrap()
            .capacity
            .unwrap();
        assert_eq!(c.path, "/api/status/clusters");
        assert_eq!(c.key_env, "KLAUD_DASHBOARD_API_KEY");
        assert_eq!(c.timeout, Duration::from_secs(10));
        let missing = c
            .gate_from(|_| Err(std::env::VarError::NotPresent))
            .unwrap_err()
            .to_string();
        assert!(missing.contains("set KLAUD_DASHBOARD_API_KEY"), "{missing}");
        let gate = c.gate_from(|_| Ok("s3cret".into())).unwrap();
        assert!(!format!("{gate:?}").contains("s3cret"));
        for (text, key) in [
            ("origin = \"https://d.example/x\"", "capacity.origin"),
            (
                "origin = \"https://d.example\"\npath = \"x\"",
                "capacity.path",
            ),
            (
                "origin = \"https://d.example\"\ntimeout = \"0s\"",
                "capacity.timeout",
            ),
            (
                "origin = \"https://d.example\"\nclusters = { h100 = [] }",
                "capacity.clusters.h100",
            ),
            ("path = \"/x\"", "origin"),
        ] {
            let err = Config::parse("t", &format!("[capacity]\n{text}\n")).unwrap_err();
            assert!(err.to_string().contains(key), "{text}: {err}");
        }
    }

    #[test]
    fn sweep_runs_on_drafts_is_auto_true_or_false() {
        for (text, want) in [
            ("", DraftPolicy::Auto),
            (
                "[lifecycle]\nsweep_runs_on_drafts = \"auto\"\n",
                DraftPolicy::Auto,
            ),
            (
                "[lifecycle]\nsweep_runs_on_drafts = true\n",
                DraftPolicy::Runs,
            ),
            (
                "[lifecycle]\nsweep_runs_on_drafts = false\n",
                DraftPolicy::Skips,
            ),
        ] {
            let config = Config::parse("klaud.toml", text).unwrap();
            assert_eq!(config.lifecycle.sweep_runs_on_drafts, want, "{text:?}");
        }
    }

    #[test]
    fn ignore_rules_are_read_normalized_and_errors_name_the_file_and_field() {
        use klaud_planner::ignore::{IgnoreSource, IgnoreTarget};
        let text = r#"
[[ignore]]
family = "configs/amd-master.yaml:*-atom-*"
reason = "ATOM images are bumped by hand"

[[ignore]]
repository = "docker.io/rocm/atom-dev"
reason = "a dev repository"

[[ignore]]
repository = "nvcr.io#nvidia/sglang"
tag = "*-rc*"
reason = "release candidates"
"#;
        let rules = Config::parse("klaud.toml", text)
            .unwrap()
            .ignore_rules()
            .unwrap();
        assert_eq!(
            rules.iter().map(|r| r.target.clone()).collect::<Vec<_>>(),
            vec![
                IgnoreTarget::Family("configs/amd-master.yaml:*-atom-*".into()),
                IgnoreTarget::Repository("rocm/atom-dev".into()),
                IgnoreTarget::Tag {
                    repository: "nvcr.io/nvidia/sglang".into(),
                    tag: "*-rc*".into()
                },
            ]
        );
        assert!(rules.iter().all(|r| r.source == IgnoreSource::Config));
        assert_eq!(rules[2].reason, "release candidates");
        for (bad, key, what) in [
            ("[[ignore]]\nfamily = \"k\"\n", "klaud.toml", "reason"),
            (
                "[[ignore]]\nfamily = \"k\"\nreason = \" \"\n",
                "ignore[0].reason",
                "say why",
            ),
            ("[[ignore]]\nreason = \"r\"\n", "ignore[0]", "set `family`"),
            (
                "[[ignore]]\nfamily = \"k\"\nrepository = \"a/b\"\nreason = \"r\"\n",
                "ignore[0].repository",
                "not both",
            ),
            (
                "[[ignore]]\nfamily = \"k\"\ntag = \"v1\"\nreason = \"r\"\n",
                "ignore[0].tag",
                "narrows",
            ),
            (
                "[[ignore]]\nrepository = \"a/b:v1\"\nreason = \"r\"\n",
                "ignore[0].repository",
                "not an image repository",
            ),
            (
                "[[ignore]]\nfamily = \"\"\nreason = \"r\"\n",
                "ignore[0].family",
                "empty",
            ),
            (
                "[[ignore]]\nfamily = \"k\"\nreason = \"r\"\nwhy = \"x\"\n",
                "klaud.toml",
                "unknown field",
            ),
        ] {
            let e = Config::parse("klaud.toml", bad).unwrap_err().to_string();
            assert!(
                e.starts_with("klaud.toml") && e.contains(key) && e.contains(what),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn experiments_are_read_with_derived_variants_and_checked() {
        let text = r#"
[[experiments]]
name = "parser"
families = ["configs/nvidia-master.yaml:dsr1-*", "kimi-*"]
max_concurrent = 3

[[experiments.variants]]
name = "E"
edits = ["set backend.decode_environment.X=\"1\"; add-flag frontend.args router-mode=kv"]

[[experiments.variants]]
name = "F"
from = "E"
edits = ["unset backend.decode_environment.Y"]
"#;
        let config = Config::parse("klaud.toml", text).unwrap();
        let specs = config.experiment_specs().unwrap();
        assert_eq!(specs.len(), 1);
        assert_eq!(specs[0].max_concurrent, 3);
        assert_eq!(
            specs[0].variants[1].edits.len(),
            3,
            "{:?}",
            specs[0].variants[1]
        );
        assert!(specs[0].matches("configs/nvidia-master.yaml:dsr1-fp4-b200-sglang"));
        assert!(specs[0].matches("configs/amd-master.yaml:kimi-k2"));
        let defaults = Config::parse(
            "klaud.toml",
            "[[experiments]]\nname = \"x\"\nfamilies = [\"k\"]\n[[experiments.variants]]\nname = \"A\"\n",
        )
        .unwrap();
        assert_eq!(defaults.experiment_specs().unwrap()[0].max_concurrent, 2);
        for (bad, key, what) in [
            (
                text.replace("unset backend", "frobnicate backend"),
                "experiments[0].variants[1].edits[0]",
                "unknown edit",
            ),
            (
                text.replace("from = \"E\"", "from = \"Z\""),
                "experiments[0].variants",
                "not a variant",
            ),
            (
                text.replace("name = \"F\"", "name = \"E\""),
                "experiments[0].variants",
                "twice",
            ),
            (
                text.replace("name = \"parser\"", "name = \"a b\""),
                "experiments[0].name",
                "letters",
            ),
            (
                text.replace(
                    "families = [\"configs/nvidia-master.yaml:dsr1-*\", \"kimi-*\"]",
                    "families = []",
                ),
                "experiments[0].families",
                "at least one",
            ),
        ] {
            let e = Config::parse("klaud.toml", &bad).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains(what), "{e}");
        }
        let unknown = text.replace("max_concurrent = 3", "max_concurrency = 3");
        assert!(Config::parse("klaud.toml", &unknown).is_err());
    }

    #[test]
    fn recipe_roots_and_the_bump_policy_are_read_and_checked() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/inferencex.toml");
        let config = Config::load(&path).unwrap();
        let options = config.repo_options();
        assert!(options.recipe_roots.iter().any(|r| {
            r.prefix == "recipes/trtllm/kimi-k25-nvfp4/b200-fp4"
                && r.folder
                    .ends_with("trtllm/kimi-k2.5/disagg/trtllm_dynamo/b200-fp4")
        }));
        let align = Config::parse("t", "[bump]\ndisagreeing_recipes = \"align\"\n").unwrap();
        assert_eq!(
            align.bump_options().disagreeing,
            klaud_planner::bump::DisagreePolicy::Align
        );
        let err = Config::parse("t", "[bump]\ndisagreeing_recipes = \"sometimes\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("disagreeing_recipes"), "{err}");
        let err = Config::parse(
            "t",
            "[[recipe_roots]]\nprefix = \"recipes/x\"\nfolder = \"../outside\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("recipe_roots[0]"), "{err}");
    }

    #[test]
    fn an_empty_file_is_all_defaults() {
        let config = Config::parse("empty", "").unwrap();
        assert_eq!(config.planner.max_candidates, 5);
        assert_eq!(config.planner.min_age, Duration::from_secs(86_400));
    }

    #[test]
    fn mistakes_name_the_key() {
        for (text, needle) in [
            ("[planner]\nmax_candidate = 3\n", "max_candidate"),
            ("[planner]\nmin_age = \"24\"\n", "no unit"),
            ("[planner]\nmax_candidates = 0\n", "planner.max_candidates"),
            ("[github]\nrepository = \"nope\"\n", "owner/name"),
            (
                "[registry.mirrors]\n\"docker.io\" = \"not a url\"\n",
                "registry.mirrors.docker.io",
            ),
            (
                "[[tracks]]\nrepository = \"x/y\"\npattern = \"(\"\nordering = \"semver\"\n",
                "tracks[0]",
            ),
            (
                "[[tracks]]\nrepository = \"x/y\"\npattern = \"^(?P<version>.*)$\"\nordering = \"sideways\"\n",
                "tracks[0].ordering",
            ),
            ("planner = 3\n", "planner"),
            ("[daemon]\nschedule = \"0 9 * *\"\n", "daemon.schedule"),
            (
                "[daemon]\ndashboard_listen = \"0.0.0.0:8723\"\n",
                "daemon.dashboard_allow_remote = true",
            ),
            ("[daemon]\nlease = \"1m\"\n", "daemon.lease"),
            (
                "[lifecycle]\nsweep_runs_on_drafts = \"maybe\"\n",
                "lifecycle.sweep_runs_on_drafts",
            ),
            (
                "[daemon]\nreconcile_interval = \"10s\"\nlease = \"39s\"\n",
                "daemon.lease",
            ),
            (
                "[daemon]\nreconcile_interval = \"1s\"\nlease = \"4s\"\n",
                "at least 5s",
            ),
            (
                "[daemon]\nreconcile_interval = \"0s\"\n",
                "daemon.reconcile_interval",
            ),
            ("[daemon]\nreconcile_interval = \"0m\"\n", "at least 1s"),
            ("[daemon]\nreconcile_interval = \"-30s\"\n", "negative"),
            ("[daemon]\nlease = \"0s\"\n", "daemon.lease"),
            ("[daemon]\nlease = \"-2h\"\n", "negative"),
            ("[registry]\ntimeout = \"0s\"\n", "registry.timeout"),
            ("[planner]\ncooldown = \"-1d\"\n", "negative"),
            ("[daemon]\nschedule = \"0 0 30 2 *\"\n", "never fires"),
            ("[daemon]\nschedule = \"* * * * * *\"\n", "at least 60s"),
        ] {
            let err = Config::parse("klaud.toml", text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn registry_hub_api_breaker_and_timed_tags_are_read_with_defaults() {
        let defaults = Config::parse("empty", "").unwrap().registry;
        assert!(defaults.hub_api.is_empty());
        assert_eq!(defaults.breaker_cooldown, Duration::from_secs(15 * 60));
        assert_eq!(
            defaults.max_timed_tags,
            klaud_planner::plan::DEFAULT_MAX_TIMED_TAGS
        );
        let config = Config::parse(
            "klaud.toml",
            "[registry]\nbreaker_cooldown = \"2m\"\nmax_timed_tags = 300\n\
             [registry.hub_api]\n\"registry.example\" = \"http://127.0.0.1:9000\"\n",
        )
        .unwrap();
        assert_eq!(config.registry.breaker_cooldown, Duration::from_secs(120));
        assert_eq!(config.registry.max_timed_tags, 300);
        assert_eq!(
            config
                .registry
                .hub_api
                .get("registry.example")
                .map(String::as_str),
            Some("http://127.0.0.1:9000")
        );
        for (text, needle) in [
            (
                "[registry.hub_api]\n\"registry.example\" = \"not a url\"\n",
                "registry.hub_api.registry.example",
            ),
            (
                "[registry.hub_api]\n\"registry.example\" = \"file:///tmp/x\"\n",
                "registry.hub_api.registry.example",
            ),
            (
                "[registry]\nbreaker_cooldown = \"15\"\n",
                "breaker_cooldown",
            ),
            (
                "[registry]\nbreaker_cooldown = \"0s\"\n",
                "registry.breaker_cooldown",
            ),
            (
                "[registry]\nmax_timed_tags = 0\n",
                "registry.max_timed_tags",
            ),
            ("[registry]\nmax_timed_tags = \"many\"\n", "max_timed_tags"),
            ("[registry]\nmax_timed_tags = -3\n", "max_timed_tags"),
            ("[registry]\nhub_api = 3\n", "hub_api"),
        ] {
            let err = Config::parse("klaud.toml", text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn the_token_is_the_first_set_variable_trimmed() {
        use std::env::VarError;
        let github = GithubConfig::default();
        let env = |name: &str| match name {
            "KLAUD_GITHUB_TOKEN" => Ok("  ".to_owned()),
            "GITHUB_TOKEN" => Ok(" ghp_x\n".to_owned()),
            _ => Err(VarError::NotPresent),
        };
        let found = github.token_from(env).unwrap().expect("found");
        assert_eq!(found.variable, "GITHUB_TOKEN", "a blank variable is unset");
        let gh = |name: &str| match name {
            "GH_TOKEN" => Ok("ghp_secret".to_owned()),
            _ => Err(VarError::NotPresent),
        };
        let hint = github.unread_token_hint(gh).expect("a hint");
        assert!(
            hint.contains("GH_TOKEN is set but Klaud does not read it"),
            "{hint}"
        );
        assert!(!hint.contains("ghp_secret"), "{hint}");
        assert!(github.missing_token_in(gh).ends_with(&hint));
        assert_eq!(github.unread_token_hint(env), None, "a token was found");
        let reads_it = GithubConfig {
            token_env: vec!["GH_TOKEN".to_owned()],
            ..GithubConfig::default()
        };
        assert_eq!(reads_it.unread_token_hint(gh), None, "GH_TOKEN is read");
        let none = github.token_from(|_| Err(VarError::NotPresent)).unwrap();
        assert!(none.is_none());
        assert!(
            github
                .missing_token()
                .contains("KLAUD_GITHUB_TOKEN, GITHUB_TOKEN")
        );
        let bad = github
            .token_from(|_| Err(VarError::NotUnicode("\u{fffd}".into())))
            .unwrap_err()
            .to_string();
        assert!(bad.contains("KLAUD_GITHUB_TOKEN"), "{bad}");
    }

    #[test]
    fn zero_waits_turn_the_wait_off_but_zero_intervals_are_refused() {
        let config = Config::parse(
            "klaud.toml",
            "[planner]\nmin_age = \"0s\"\ncooldown = \"0h\"\n",
        )
        .unwrap();
        assert_eq!(config.planner.min_age, Duration::ZERO);
        assert_eq!(config.planner.cooldown, Duration::ZERO);
        assert_eq!(
            parse_interval("30s", MIN_INTERVAL).unwrap(),
            Duration::from_secs(30)
        );
        for text in ["0s", "0d"] {
            let err = parse_interval(text, MIN_INTERVAL).unwrap_err().to_string();
            assert!(err.contains("at least 1s"), "{text}: {err}");
        }
        let err = parse_interval("-5m", MIN_INTERVAL).unwrap_err().to_string();
        assert!(err.contains("negative"), "{err}");
    }

    #[test]
    fn durations_take_spelled_out_and_compound_units() {
        for (text, seconds) in [
            ("90s", 90),
            ("2 hours", 7200),
            ("1h 30m", 5400),
            ("1h30m", 5400),
            ("7d", 604_800),
            (" 24h ", 86_400),
        ] {
            assert_eq!(
                parse_duration(text).ok(),
                Some(Duration::from_secs(seconds)),
                "{text}"
            );
        }
        let config = Config::parse("t.toml", "[planner]\nmin_age = \"2 hours\"\n").unwrap();
        assert_eq!(config.planner.min_age, Duration::from_secs(7200));
        let err = parse_duration("30").unwrap_err().to_string();
        assert!(
            err.contains("has no unit") && err.contains("1h 30m"),
            "{err}"
        );
        let err = parse_duration("5 fortnights").unwrap_err();
        assert!(
            std::error::Error::source(&err).is_some(),
            "humantime's cause is kept"
        );
        let err = err.to_string();
        assert!(
            err.contains("not a duration") && err.contains("30s"),
            "{err}"
        );
        assert!(
            parse_duration("99999999999999999999d")
                .unwrap_err()
                .to_string()
                .contains("too long")
        );
        let err = Config::parse("t.toml", "[planner]\nmin_age = \"soon\"\n")
            .unwrap_err()
            .to_string();
        // TOML's error names the file, line and key; ours what to write.
        assert!(
            err.contains("t.toml") && err.contains("min_age") && err.contains("2 hours"),
            "{err}"
        );
    }

    #[test]
    fn a_lease_scales_with_the_reconcile_interval() {
        let config = Config::parse(
            "klaud.toml",
            "[github]\nwrite_timeout = \"1s\"\n\
             [daemon]\nreconcile_interval = \"1s\"\nlease = \"8s\"\nlease_margin = \"0s\"\n",
        )
        .unwrap();
        assert_eq!(config.daemon.lease, Duration::from_secs(8));
        let config = Config::parse(
            "klaud.toml",
            "[github]\nwrite_timeout = \"20s\"\n\
             [daemon]\nreconcile_interval = \"60s\"\nlease = \"4m\"\nlease_margin = \"30s\"\n",
        )
        .unwrap();
        assert_eq!(config.daemon.lease, Duration::from_secs(240));
    }

    #[test]
    fn a_lease_too_short_for_the_write_window_is_refused() {
        // The defaults: a write is sent with 60 s + 75 s of lease left,
        // so the lease must hold that window four times and a second.
        let daemon = "[daemon]\nreconcile_interval = \"1s\"\n";
        let err = Config::parse("klaud.toml", &format!("{daemon}lease = \"20s\"\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("daemon.lease"), "{err}");
        assert!(err.contains("write window"), "{err}");
        assert!(err.contains("541s"), "{err}");
        assert!(Config::parse("klaud.toml", &format!("{daemon}lease = \"540s\"\n")).is_err());
        let config = Config::parse("klaud.toml", &format!("{daemon}lease = \"541s\"\n")).unwrap();
        assert_eq!(config.daemon.lease, Duration::from_secs(541));
        // A shorter write timeout makes room for a shorter lease, and the
        // engine is told the same figure the GitHub client enforces.
        let config = Config::parse(
            "klaud.toml",
            "[github]\nwrite_timeout = \"10s\"\n\
             [daemon]\nreconcile_interval = \"1s\"\nlease = \"5m\"\nlease_margin = \"20s\"\n",
        )
        .unwrap();
        let engine = crate::compose::engine_config(&config, 1);
        assert_eq!(engine.write_timeout, chrono::TimeDelta::seconds(10));
        assert_eq!(engine.lease_margin, chrono::TimeDelta::seconds(20));
        let err = Config::parse("klaud.toml", "[github]\nwrite_timeout = \"0s\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("github.write_timeout"), "{err}");
    }
}
