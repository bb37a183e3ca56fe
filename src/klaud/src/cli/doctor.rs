//! `klaud doctor`: checks that a configuration, token and machine can run
//! Klaud against a repository — before anything is touched. Every check
//! only reads (GitHub, the registries, the baseline API, the store) and the
//! run keeps going after a failure, so one run lists every problem.
//!
//! Exit codes: 0 when nothing failed (warnings allowed), 2 when a check
//! failed (configuration, credentials or repository setup to fix), 1 only
//! when doctor itself could not run.

use klaud_lifecycle::workflow_contract::{
    DraftPolicy, Workflow, klaud_smoke_inputs, smoke_dispatch, sweep_runs_on_drafts,
    sweep_start_refusal, workflow_path,
};
use std::collections::BTreeSet;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use klaud_claims::{ClaimBook, ClaimEntry, Claimant, Clock};
use klaud_planner::registry::{ApiBase, Challenge, RegistryClient, RegistryConfig};
use klaud_planner::repo::Repository;
use serde::Serialize;

use super::CliError;
use crate::compose::{Connection, engine_config};
use crate::config::Config;
use klaud_github::{Github, GithubError, RateBudget};
use klaud_service::HttpBaselineSource;
use klaud_store::{Store, StoreError, trees};

/// Upper bound of one check on top of the clients' own timeouts and
/// retries, so a check that keeps being retried cannot hold the run.
const CHECK_TIMEOUT: Duration = Duration::from_secs(300);

/// Every check's name, in the order they run.
pub const CHECKS: [&str; 13] = [
    "config",
    "token",
    "identity",
    "permission",
    "base-branch",
    "workflows",
    "playbook",
    "claims",
    "rate-limit",
    "registries",
    "baseline",
    "capacity",
    "store",
];

/// Below this share of the REST budget the rate-limit check warns.
const LOW_BUDGET_PERCENT: u64 = 10;

/// Arguments of `klaud doctor`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    connection: Connection,
    /// Use another base URL for a registry host, e.g. `docker.io=http://127.0.0.1:5000`
    /// (repeatable; adds to and overrides `[registry.mirrors]`).
    #[arg(long = "mirror", value_name = "HOST=URL")]
    mirrors: Vec<String>,
    /// Print a JSON array of checks instead of a table.
    #[arg(long)]
    json: bool,
    /// Check only what needs no token and no network: the configuration,
    /// the local checkout (families, workflow files, whether the sweep will
    /// start on Klaud's pull requests) and the store.
    #[arg(long)]
    offline: bool,
    /// The benchmark repository checkout `--offline` reads, and where the
    /// configuration is looked for without `--config`
    /// (`configs/klaud.toml`, then `klaud.toml`).
    #[arg(long, value_name = "PATH", default_value = ".")]
    checkout: PathBuf,
}

/// The end of the config check's detail when no repository is configured
/// (for `--offline`, which asks nothing of it, only a warning).
const NO_REPOSITORY: &str = "no repository: pass --repo OWNER/NAME or set github.repository";

/// The checks `--offline` runs (the others need GitHub or the network).
pub const OFFLINE_CHECKS: [&str; 5] = ["config", "checkout", "workflows", "playbook", "store"];

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Nothing to do.
    Ok,
    /// Klaud can run, but look at this (or it could not be checked).
    Warn,
    /// Klaud cannot work like this; the detail says what to fix.
    Fail,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

/// One check: its name, how it came out, and one line saying what was
/// found and, when not ok, what to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Short stable name (`identity`, `claims`, ...).
    pub name: &'static str,
    /// The verdict.
    pub status: Status,
    /// What was found (and what to do).
    pub detail: String,
}

impl Check {
    fn ok(name: &'static str, detail: impl Into<String>) -> Self {
        Self {
            name,
            status: Status::Ok,
            detail: detail.into(),
        }
    }
    fn warn(name: &'static str, detail: impl Into<String>) -> Self {
        Self {
            name,
            status: Status::Warn,
            detail: detail.into(),
        }
    }
    fn fail(name: &'static str, detail: impl Into<String>) -> Self {
        Self {
            name,
            status: Status::Fail,
            detail: detail.into(),
        }
    }
    /// A check that could not run because an earlier one did not pass.
    fn skipped(name: &'static str, because: &str) -> Self {
        Self::warn(name, format!("not checked: {because}"))
    }
}

/// Runs the command.
pub fn run(args: Args) -> Result<(), CliError> {
    let runtime = super::runtime()?;
    let mut connection = args.connection.clone();
    if connection.config.is_none() {
        connection.config = crate::config::find_config(&args.checkout);
    }
    let checks = if args.offline {
        runtime.block_on(diagnose_offline(&connection, &args.mirrors, &args.checkout))
    } else {
        runtime.block_on(diagnose(&connection, &args.mirrors))
    };
    if args.json {
        let mut text = serde_json::to_string_pretty(&checks)
            .context("cannot encode the checks as JSON")
            .map_err(CliError::failure)?;
        text.push('\n');
        super::emit(&text);
    } else {
        super::emit(&render(&checks));
    }
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| c.status == Status::Fail)
        .map(|c| c.name)
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(CliError::bad_input(anyhow::anyhow!(
            "{} check(s) failed: {}",
            failed.len(),
            failed.join(", ")
        )))
    }
}

/// The table, then a one-line count; `--quiet` leaves the checks that
/// passed out of the table.
fn render(checks: &[Check]) -> String {
    let quiet = super::output::quiet();
    let rows: Vec<[String; 3]> = checks
        .iter()
        .filter(|c| !quiet || c.status != Status::Ok)
        .map(|c| {
            [
                c.name.to_owned(),
                c.status.as_str().to_owned(),
                c.detail.clone(),
            ]
        })
        .collect();
    let mut out = super::families::render_table(&["CHECK", "STATUS", "DETAIL"], &rows);
    let count = |s: Status| checks.iter().filter(|c| c.status == s).count();
    out.push_str(&format!(
        "\n{} checks: {} ok, {} warn, {} fail\n",
        checks.len(),
        count(Status::Ok),
        count(Status::Warn),
        count(Status::Fail)
    ));
    out
}

/// Runs `check`, turning a run past [`CHECK_TIMEOUT`] into a failure.
async fn bounded<T>(name: &'static str, check: impl Future<Output = T>) -> Result<T, Check> {
    tokio::time::timeout(CHECK_TIMEOUT, check)
        .await
        .map_err(|_| {
            Check::fail(
                name,
                format!(
                    "did not finish within {}s; check the network path to the service",
                    CHECK_TIMEOUT.as_secs()
                ),
            )
        })
}

/// Every check, in order.
pub async fn diagnose(connection: &Connection, mirrors: &[String]) -> Vec<Check> {
    let mut checks = Vec::new();

    // 1. configuration
    let (loaded, check) = check_config(connection, mirrors);
    checks.push(check);
    let Some(Loaded { config, registry }) = loaded else {
        let why = "the configuration did not load";
        checks.extend(CHECKS[1..].iter().map(|&name| Check::skipped(name, why)));
        return checks;
    };

    // 2. token (or GitHub App)
    let found = crate::auth::Auth::from_config(&config.github, |name| std::env::var(name));
    let auth = found.as_ref().ok().and_then(|a| a.clone());
    checks.push(match &found {
        Err(e) => Check::fail("token", e.to_string()),
        Ok(Some(a)) => Check::ok("token", a.describe()),
        Ok(None) if config.github.token_env.is_empty() => Check::fail(
            "token",
            "github.token_env names no environment variable and no GitHub App is configured; \
             list the variables the token may be in, or set github.app_id",
        ),
        Ok(None) => Check::fail(
            "token",
            format!(
                "none of {} is set; set one to a token of {}, or configure a GitHub App \
                 (github.app_id and its private key){}",
                config
                    .github
                    .token_env
                    .iter()
                    .map(|n| format!("${n}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                config.github.bot_login,
                config
                    .github
                    .unread_token_hint(|name| std::env::var(name))
                    .map_or_else(String::new, |hint| format!("; {hint}"))
            ),
        ),
    });

    // 3. identity (and whether GitHub can be asked anything else)
    let forge = match (&config.github.repository, auth) {
        (None, _) => {
            checks.push(Check::skipped("identity", "no repository is configured"));
            None
        }
        (Some(_), None) => {
            checks.push(Check::skipped("identity", "no GitHub credential"));
            None
        }
        (Some(repo), Some(auth)) => {
            let (forge, check) = check_identity(&config, repo, &auth).await;
            checks.push(check);
            forge
        }
    };

    let engine = engine_config(&config, 0);
    let mut repository = None;
    match &forge {
        None => {
            let why = "GitHub could not be asked (see the checks above)";
            for name in [
                "permission",
                "base-branch",
                "workflows",
                "playbook",
                "claims",
                "rate-limit",
            ] {
                checks.push(Check::skipped(name, why));
            }
        }
        Some(forge) => {
            // 4. permission
            checks.push(
                bounded("permission", check_permission(forge))
                    .await
                    .unwrap_or_else(|c| c),
            );
            // 5. base branch
            let (repo, check) = bounded(
                "base-branch",
                check_base(forge, &engine.base_branch, &engine.repo),
            )
            .await
            .unwrap_or_else(|c| (None, c));
            repository = repo;
            checks.push(check);
            // 6. workflows
            let workflows = [
                (
                    engine.smoke_workflow.as_str(),
                    "Klaud dispatches it for the smoke test",
                ),
                (
                    engine.sweep_workflow.as_str(),
                    "Klaud watches the final sweep it runs",
                ),
            ];
            checks.push(
                bounded(
                    "workflows",
                    check_workflows(
                        forge,
                        &workflows,
                        &engine.base_branch,
                        &engine.sweep_label,
                        engine.sweep_runs_on_drafts,
                        repository.as_ref(),
                    ),
                )
                .await
                .unwrap_or_else(|c| c),
            );
            // 6b. playbook, at the base branch
            checks.push(
                bounded(
                    "playbook",
                    check_playbook_at_base(forge, &config.lifecycle.playbook, &engine.base_branch),
                )
                .await
                .unwrap_or_else(|c| c),
            );
            // 7. claims
            checks.push(
                bounded("claims", check_claims(forge, &forge.clock()))
                    .await
                    .unwrap_or_else(|c| c),
            );
            // 8. rate limit
            checks.push(
                bounded("rate-limit", check_rate_limit(forge))
                    .await
                    .unwrap_or_else(|c| c),
            );
        }
    }

    // 9. registries
    checks.push(match (&repository, registry) {
        (_, None) => Check::skipped(
            "registries",
            "the registry settings are unusable (see config)",
        ),
        (None, _) => Check::skipped(
            "registries",
            "needs the families of the base branch (see base-branch)",
        ),
        (Some(repository), Some(registry)) => {
            bounded("registries", check_registries(registry, repository))
                .await
                .unwrap_or_else(|c| c)
        }
    });

    // 10. baseline
    checks.push(
        bounded(
            "baseline",
            check_baseline(
                &config.lifecycle.baseline_api,
                repository.as_ref(),
                &config.lifecycle.model_names,
            ),
        )
        .await
        .unwrap_or_else(|c| c),
    );

    // 11. capacity
    checks.push(
        bounded(
            "capacity",
            check_capacity(config.capacity.as_ref(), repository.as_ref()),
        )
        .await
        .unwrap_or_else(|c| c),
    );

    // 12. store (synchronous: sled; waiting out another holder's lock takes
    // a few seconds at most)
    let store = connection
        .store
        .clone()
        .unwrap_or_else(|| PathBuf::from(&config.daemon.store));
    let instance = crate::compose::parse_instance_id(connection.instance_id.as_deref())
        .map_err(|e| e.message());
    let in_actions = std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true");
    checks.push(
        tokio::task::spawn_blocking(move || {
            // sled writes `conf` when it creates a store.
            let fresh = !store.join("conf").exists();
            instance_check(check_store(&store), instance, in_actions && fresh)
        })
        .await
        .unwrap_or_else(|e| Check::fail("store", format!("the check stopped: {e}"))),
    );
    checks
}

/// The store check, with what it means for the instance id: a malformed
/// `--instance-id` fails; an Actions run with a fresh store
/// (`fresh_in_actions`) and no fixed id would make each run a new instance
/// (the next run would take this run's candidates for orphans).
fn instance_check(
    store: Check,
    instance: Result<Option<uuid::Uuid>, String>,
    fresh_in_actions: bool,
) -> Check {
    match instance {
        Err(e) => Check::fail(store.name, e),
        Ok(Some(id)) if store.status != Status::Fail => Check {
            detail: format!("{}; instance id {id} (--instance-id)", store.detail),
            ..store
        },
        Ok(None) if fresh_in_actions && store.status == Status::Ok => Check::warn(
            store.name,
            format!(
                "{}, and no KLAUD_INSTANCE_ID: in Actions with a fresh store every run is a \
                     new instance, and the next run ends this run's candidates as orphans; set \
                     KLAUD_INSTANCE_ID to a fixed UUID",
                store.detail
            ),
        ),
        Ok(_) => store,
    }
}

/// The configuration with the command-line overrides applied, and the
/// registry settings built from it (`None` when they are unusable; the
/// config check then says why).
struct Loaded {
    config: Config,
    registry: Option<RegistryConfig>,
}

/// Loads the configuration with the command-line overrides applied, and
/// checks the registry settings (`--mirror`, `[registry.mirrors]`, the
/// credential variables) up front so a typo there shows even when the
/// registries cannot be asked.
fn check_config(c: &Connection, mirrors: &[String]) -> (Option<Loaded>, Check) {
    const NAME: &str = "config";
    let (mut config, origin) = match &c.config {
        Some(path) => match Config::load(path) {
            Ok(config) => (config, path.display().to_string()),
            Err(e) => {
                return (
                    None,
                    Check::fail(NAME, format!("{e}; fix the file and run doctor again")),
                );
            }
        },
        None => (
            Config::default(),
            "no file (--config or $KLAUD_CONFIG): built-in defaults".to_owned(),
        ),
    };
    if let Some(api) = &c.github_api {
        if let Err(e) = url::Url::parse(api) {
            return (
                None,
                Check::fail(NAME, format!("--github-api {api:?} is not a URL: {e}")),
            );
        }
        config.github.api_url = api.clone();
    }
    if let Some(repo) = &c.repo {
        config.github.repository = Some(repo.clone());
    }
    c.auth.apply(&mut config.github);
    let mut check = match &config.github.repository {
        None => Check::fail(NAME, format!("{origin}, but {NO_REPOSITORY}")),
        Some(_) if config.github.bot_login == super::init::BOT_LOGIN_PLACEHOLDER => Check::fail(
            NAME,
            format!(
                "{origin}: github.bot_login is still klaud init's placeholder; set it to the \
                 bot's login (or run init again with a credential or --bot-login)"
            ),
        ),
        Some(repo) if !is_owner_name(repo) => Check::fail(
            NAME,
            format!("{origin}, but the repository {repo:?} is not OWNER/NAME"),
        ),
        Some(repo) => Check::ok(
            NAME,
            format!(
                "{origin}: {repo} at {}, bot {}, base branch {}",
                config.github.api_url, config.github.bot_login, config.lifecycle.base_branch
            ),
        ),
    };
    // A bad repository fails here once; the GitHub checks then have
    // nothing to ask about.
    if check.status == Status::Fail {
        config.github.repository = None;
    }
    let registry = match super::plan::registry_config(&config, mirrors) {
        Ok(r) => Some(r),
        Err(e) => {
            let problem = e.message();
            check = if check.status == Status::Fail {
                Check::fail(NAME, format!("{}; and {problem}", check.detail))
            } else {
                Check::fail(NAME, format!("{origin}: {problem}"))
            };
            None
        }
    };
    (Some(Loaded { config, registry }), check)
}

fn is_owner_name(repo: &str) -> bool {
    matches!(repo.split_once('/'), Some((o, n)) if !o.is_empty() && !n.is_empty() && !n.contains('/'))
}

/// The identity preflight, kept apart from connecting so that a token of
/// another account still lets the read-only checks after it run.
async fn check_identity(
    config: &Config,
    repo: &str,
    auth: &crate::auth::Auth,
) -> (Option<Github>, Check) {
    const NAME: &str = "identity";
    let credential = match bounded(NAME, auth.credential(&config.github.api_url, repo)).await {
        Err(check) => return (None, check),
        Ok(Err(e)) => return (None, Check::fail(NAME, e.to_string())),
        Ok(Ok(c)) => c,
    };
    let forge = match crate::compose::github_client(&config.github, repo, credential) {
        Ok(forge) => forge,
        Err(e) => return (None, Check::fail(NAME, e.to_string())),
    };
    match bounded(NAME, forge.preflight()).await {
        Err(check) => (None, check),
        Ok(Ok(me)) => (
            Some(forge),
            Check::ok(
                NAME,
                format!(
                    "the credential acts as {}, the configured bot login",
                    me.login
                ),
            ),
        ),
        // The token works, it is only someone else's: everything after this
        // only reads, so it still runs as that reader (and shows what else
        // is wrong); only a wave or the daemon would be refused.
        Ok(Err(GithubError::IdentityMismatch { expected, found })) => (
            Some(forge),
            Check::warn(
                NAME,
                format!(
                    "reading as {found}, not the bot login {expected}: doctor, status and \
                     `claims list` work with it, but wave, serve and every write need a \
                     credential of {expected} (or set github.bot_login to {found:?})"
                ),
            ),
        ),
        // A rejected token or an unreachable API fails every later call
        // the same way; say it once.
        Ok(Err(e)) => (None, Check::fail(NAME, e.to_string())),
    }
}

async fn check_permission(forge: &Github) -> Check {
    const NAME: &str = "permission";
    let bot = forge.bot_login();
    let repo = forge.repo();
    match forge.collaborator_permission(bot).await {
        Ok(p) if p.may_write() => Check::ok(NAME, format!("{bot} has {p} access to {repo}")),
        Ok(p) => Check::fail(
            NAME,
            format!(
                "{bot} has only {p} access to {repo}; Klaud pushes branches, opens PRs and \
                 creates claim refs: give it write (or maintain) access"
            ),
        ),
        Err(GithubError::NotFound { .. }) => Check::fail(
            NAME,
            format!(
                "{repo} or the user {bot} was not found (or the token cannot see them); \
                 check github.repository and github.bot_login"
            ),
        ),
        // GitHub lets only tokens with push access look collaborators up.
        Err(GithubError::Rejected { status: 403, .. }) => Check::fail(
            NAME,
            format!(
                "{bot} may not look up collaborator permissions on {repo} (GitHub answers 403 \
                 without push access): it has at most read access; give it write (or maintain) access"
            ),
        ),
        Err(e) => Check::fail(NAME, format!("{e}; the bot needs write access to {repo}")),
    }
}

/// Reads the base branch as a wave would (without the store's blob cache,
/// which would write to it) and opens the repository model.
async fn check_base(
    forge: &Github,
    branch: &str,
    options: &klaud_planner::repo::RepoOptions,
) -> (Option<Repository>, Check) {
    const NAME: &str = "base-branch";
    let (sha, _checkout, repository) =
        match klaud_service::base_checkout(forge, branch, options, None).await {
            Ok(parts) => parts,
            Err(klaud_service::wave_adapters::WaveError::NoBase(_)) => {
                return (
                    None,
                    Check::fail(
                        NAME,
                        format!(
                            "{} has no branch {branch:?}; set lifecycle.base_branch",
                            forge.repo()
                        ),
                    ),
                );
            }
            Err(e) => {
                return (
                    None,
                    Check::fail(
                        NAME,
                        format!("{branch}: {e}; fix the master configs on {branch}"),
                    ),
                );
            }
        };
    let masters: BTreeSet<&str> = repository
        .families()
        .iter()
        .filter_map(|f| f.family.split_once(':').map(|(file, _)| file))
        .collect();
    let short = sha.get(..7).unwrap_or(&sha);
    let found = format!(
        "{branch} at {short}: {} families in {} master config(s)",
        repository.families().len(),
        masters.len()
    );
    let check = if repository.families().is_empty() {
        Check::fail(
            NAME,
            format!(
                "{found}; the master configs have no entries, so there is nothing to keep fresh"
            ),
        )
    } else if repository.warnings().is_empty() {
        Check::ok(NAME, found)
    } else {
        let warnings = repository.warnings();
        let shown: Vec<String> = warnings.iter().take(3).map(ToString::to_string).collect();
        let more = warnings.len().saturating_sub(shown.len());
        Check::warn(
            NAME,
            format!(
                "{found}; {} warning(s): {}{}; see `klaud families` on a checkout",
                warnings.len(),
                shown.join("; "),
                if more > 0 {
                    format!("; and {more} more")
                } else {
                    String::new()
                }
            ),
        )
    };
    (Some(repository), check)
}

/// A workflow file at `git_ref`, parsed; `None` when absent.
async fn read_workflow(
    forge: &Github,
    file: &str,
    git_ref: &str,
) -> Result<Option<Workflow>, String> {
    let path = workflow_path(file);
    match forge.get_contents(&path, git_ref).await {
        Ok(None) => Ok(None),
        Ok(Some(bytes)) => Workflow::parse(file, &String::from_utf8_lossy(&bytes))
            .map(Some)
            .map_err(|e| e.to_string()),
        Err(e) => Err(format!("{path}: {e}")),
    }
}

async fn check_workflows(
    forge: &Github,
    workflows: &[(&str, &str)],
    base_branch: &str,
    sweep_label: &str,
    policy: DraftPolicy,
    repository: Option<&Repository>,
) -> Check {
    const NAME: &str = "workflows";
    let mut found = Vec::new();
    let mut problems = Vec::new();
    for (file, why) in workflows {
        match forge.get_workflow(file).await {
            Ok(Some(w)) if w.state == "active" => found.push(format!("{file} ({})", w.name)),
            Ok(Some(w)) => problems.push(format!(
                "{file} is {} ({why}): enable it in the Actions tab",
                w.state
            )),
            Ok(None) => problems.push(format!(
                "{file} is missing ({why}): add .github/workflows/{file} to the default branch"
            )),
            Err(e) => problems.push(format!("{file}: {e}")),
        }
    }
    // What the engine will read at the base commit: the smoke's declared
    // inputs (a dispatch GitHub would refuse with 422 fails here first),
    // whether the sweep runs on drafts and whether it starts at all.
    if let Some((smoke, sweep)) = workflows.first().zip(workflows.get(1)) {
        let smoke_file = read_workflow(forge, smoke.0, base_branch).await;
        let sweep_file = read_workflow(forge, sweep.0, base_branch).await;
        let setup = SweepSetup {
            base_branch,
            label: sweep_label,
            policy,
            changed: repository.map(klauds_pull_files),
        };
        workflow_contents(
            (smoke.0, smoke_file),
            (sweep.0, sweep_file),
            &setup,
            &mut found,
            &mut problems,
        );
    }
    if problems.is_empty() {
        Check::ok(NAME, format!("active: {}", found.join(", ")))
    } else {
        Check::fail(NAME, problems.join("; "))
    }
}

/// How Klaud's pull request looks when it labels it for the final sweep.
struct SweepSetup<'a> {
    base_branch: &'a str,
    label: &'a str,
    policy: DraftPolicy,
    /// The files the pull request changes (`None`: the repository could not
    /// be read, so whether the sweep starts is not checked).
    changed: Option<Vec<String>>,
}

/// The files a Klaud pull request changes when it is labelled: the
/// changelog of the repository's layout and a master file.
fn klauds_pull_files(repository: &Repository) -> Vec<String> {
    let master = repository
        .families()
        .first()
        .and_then(|f| f.family.split_once(':'))
        .map(|(file, _)| file);
    super::init::klauds_changes(repository.prefix(), master)
}

/// What the smoke and sweep files say, read from GitHub or a checkout:
/// the smoke takes Klaud's inputs, the sweep's draft behaviour, and that
/// the sweep starts on Klaud's labelled pull request at all (its `on:
/// pull_request` types, branches and paths, and its job conditions).
fn workflow_contents(
    smoke: (&str, Result<Option<Workflow>, String>),
    sweep: (&str, Result<Option<Workflow>, String>),
    setup: &SweepSetup<'_>,
    found: &mut Vec<String>,
    problems: &mut Vec<String>,
) {
    match smoke.1 {
        Ok(Some(w)) => {
            let wanted = klaud_smoke_inputs(
                "0000000000000000000000000000000000000000",
                "test-config --config-files <file> --config-keys <key> --smoke",
                "klaud-0-doctor",
            );
            match smoke_dispatch(Some(&w), &wanted, setup.base_branch, "doctor", "") {
                Ok(d) => found.push(format!(
                    "{} takes the inputs {}",
                    smoke.0,
                    d.inputs.keys().cloned().collect::<Vec<_>>().join(", ")
                )),
                Err(e) => problems.push(e.to_string()),
            }
        }
        Ok(None) => {}
        Err(e) => problems.push(e),
    }
    let sweep_file = match sweep.1 {
        Ok(w) => w,
        Err(e) => {
            problems.push(e);
            return;
        }
    };
    match sweep_runs_on_drafts(sweep_file.as_ref(), setup.label, setup.policy) {
        Ok(true) => found.push(format!("{} runs on drafts", sweep.0)),
        Ok(false) => found.push(format!(
            "{} skips drafts (Klaud marks the PR ready before labelling)",
            sweep.0
        )),
        Err(e) => problems.push(e.to_string()),
    }
    let (Some(w), Some(changed)) = (&sweep_file, &setup.changed) else {
        return;
    };
    match sweep_start_refusal(w, setup.base_branch, setup.label, setup.policy, changed) {
        Ok(None) => found.push(format!(
            "{} starts on Klaud's PR labelled {}",
            sweep.0, setup.label
        )),
        Ok(Some(why)) => problems.push(format!(
            "{} will not start on Klaud's pull requests (labelled {}, changing {}): {why}; \
             every candidate would wait for a sweep that never runs. Fix the workflow's \
             trigger, or run Klaud on the layout it expects",
            sweep.0,
            setup.label,
            changed.join(", ")
        )),
        Err(e) => problems.push(e.to_string()),
    }
}

/// A workflow file of the checkout, parsed; `None` when absent.
fn read_local_workflow(checkout: &Path, file: &str) -> Result<Option<Workflow>, String> {
    let path = checkout.join(workflow_path(file));
    match std::fs::read_to_string(&path) {
        Ok(text) => Workflow::parse(file, &text)
            .map(Some)
            .map_err(|e| e.to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// `--offline`: the configuration, the checkout, its workflow files and
/// the store; everything that needs GitHub or the network is listed as not
/// checked.
pub async fn diagnose_offline(
    connection: &Connection,
    mirrors: &[String],
    checkout: &Path,
) -> Vec<Check> {
    let mut checks = Vec::new();
    let (loaded, mut config_check) = check_config(connection, mirrors);
    // Offline nothing is asked of the repository on GitHub, so a missing
    // `github.repository` is for the online run to fail on.
    if config_check.status == Status::Fail
        && config_check.detail.ends_with(NO_REPOSITORY)
        && loaded.as_ref().is_some_and(|l| l.registry.is_some())
    {
        config_check.status = Status::Warn;
    }
    checks.push(config_check);
    let Some(Loaded { config, .. }) = loaded else {
        let why = "the configuration did not load";
        checks.extend(
            OFFLINE_CHECKS[1..]
                .iter()
                .map(|&name| Check::skipped(name, why)),
        );
        return checks;
    };
    let engine = engine_config(&config, 0);

    let repository = match Repository::open_with(checkout, &engine.repo) {
        Ok(r) => Some(r),
        Err(e) => {
            checks.push(Check::fail(
                "checkout",
                format!(
                    "{}: {e}; pass the benchmark repository's checkout with --checkout",
                    checkout.display()
                ),
            ));
            None
        }
    };
    if let Some(r) = &repository {
        let layout = if r.prefix().is_empty() {
            "root layout".to_owned()
        } else {
            format!("{} layout", r.prefix())
        };
        let found = format!(
            "{} ({layout}): {} families, {} unreadable",
            checkout.display(),
            r.families().len(),
            r.unreadable().len()
        );
        let summary = super::families::warning_counts(r.warnings());
        checks.push(if r.families().is_empty() {
            Check::fail(
                "checkout",
                format!(
                    "{found}; the master configs have no entries, so there is nothing to keep fresh"
                ),
            )
        } else if !r.unreadable().is_empty() {
            Check::warn(
                "checkout",
                format!("{found}; `klaud families` names each unreadable entry"),
            )
        } else if summary.is_empty() {
            Check::ok("checkout", found)
        } else {
            Check::warn(
                "checkout",
                format!("{found}; warnings: {summary} (`klaud families -v` lists them)"),
            )
        });
    }

    let mut found = Vec::new();
    let mut problems = Vec::new();
    for file in [&engine.smoke_workflow, &engine.sweep_workflow] {
        if !checkout.join(workflow_path(file)).is_file() {
            problems.push(format!(
                "{file} is missing: add {} (Klaud {} it)",
                workflow_path(file),
                if *file == engine.smoke_workflow {
                    "dispatches"
                } else {
                    "watches the final sweep of"
                }
            ));
        }
    }
    let setup = SweepSetup {
        base_branch: &engine.base_branch,
        label: &engine.sweep_label,
        policy: engine.sweep_runs_on_drafts,
        changed: repository.as_ref().map(klauds_pull_files),
    };
    workflow_contents(
        (
            &engine.smoke_workflow,
            read_local_workflow(checkout, &engine.smoke_workflow),
        ),
        (
            &engine.sweep_workflow,
            read_local_workflow(checkout, &engine.sweep_workflow),
        ),
        &setup,
        &mut found,
        &mut problems,
    );
    checks.push(if problems.is_empty() {
        Check::ok(
            "workflows",
            format!("in the checkout: {}", found.join(", ")),
        )
    } else {
        Check::fail("workflows", problems.join("; "))
    });

    checks.push(check_playbook_in_checkout(
        checkout,
        &config.lifecycle.playbook,
    ));

    let store = connection
        .store
        .clone()
        .unwrap_or_else(|| PathBuf::from(&config.daemon.store));
    checks.push(
        tokio::task::spawn_blocking(move || check_store(&store))
            .await
            .unwrap_or_else(|e| Check::fail("store", format!("the check stopped: {e}"))),
    );
    for name in CHECKS {
        if !OFFLINE_CHECKS.contains(&name) && name != "base-branch" {
            checks.push(Check::skipped(
                name,
                "--offline (needs GitHub or the network)",
            ));
        }
    }
    checks
}

async fn check_claims(forge: &Github, clock: &dyn Clock) -> Check {
    const NAME: &str = "claims";
    // Listing only reads; the claimant is never used to write.
    let book = ClaimBook::new(forge, clock, Claimant::new(uuid::Uuid::nil()));
    let claims = match book.list_claims().await {
        Ok(c) => c,
        Err(e) => return Check::fail(NAME, format!("listing claim refs: {e}")),
    };
    let leases = match book.list_recovery_leases().await {
        Ok(l) => l,
        Err(e) => return Check::fail(NAME, format!("listing recovery leases: {e}")),
    };
    let all = || claims.iter().chain(&leases);
    let unparsable: Vec<String> = all()
        .filter_map(|e| {
            e.record
                .as_ref()
                .err()
                .map(|why| format!("{} ({why})", e.tip.name))
        })
        .collect();
    if !unparsable.is_empty() {
        return Check::fail(
            NAME,
            format!(
                "{} ref(s) do not parse: {}; planning stops until each is fixed or deleted by \
                 hand (Klaud never deletes them)",
                unparsable.len(),
                unparsable.join("; ")
            ),
        );
    }
    let now = clock.now();
    let expired: Vec<&str> = all()
        .filter(|e: &&ClaimEntry| e.lease_expired(now) == Some(true))
        .map(|e| e.tip.name.as_str())
        .collect();
    let leaseless = claims
        .iter()
        .filter(|e| e.record.as_ref().is_ok_and(|r| r.lease_until.is_none()))
        .count();
    let counts = format!(
        "{} claim(s) ({leaseless} without a lease, from the old helper), {} recovery lease(s)",
        claims.len(),
        leases.len()
    );
    if expired.is_empty() {
        Check::ok(NAME, counts)
    } else {
        Check::warn(
            NAME,
            format!(
                "{counts}; {} with an expired lease: {}; the next wave's recovery takes them over",
                expired.len(),
                expired.join(", ")
            ),
        )
    }
}

async fn check_rate_limit(forge: &Github) -> Check {
    const NAME: &str = "rate-limit";
    // `/rate_limit` is free; when the server does not offer it, the
    // headers of the calls above carry the same figures.
    let (budget, source) = match forge.rate_limit().await {
        Ok(Some(b)) => (Some(b), "GET /rate_limit"),
        Ok(None) => (forge.rate_budget(), "response headers"),
        Err(e) => match forge.rate_budget() {
            Some(b) => (Some(b), "response headers"),
            None => return Check::fail(NAME, e.to_string()),
        },
    };
    let Some(budget) = budget else {
        return Check::warn(
            NAME,
            "GitHub reported no rate limit (rate limiting may be off on this server)",
        );
    };
    budget_check(&budget, source)
}

fn budget_check(b: &RateBudget, source: &str) -> Check {
    const NAME: &str = "rate-limit";
    let reset = chrono::DateTime::from_timestamp(b.reset_unix, 0)
        .map(|t| t.format("%H:%M UTC").to_string())
        .unwrap_or_else(|| "unknown".to_owned());
    let found = format!(
        "{} of {} requests left, resets at {reset} (from {source})",
        b.remaining, b.limit
    );
    if b.limit > 0 && b.remaining.saturating_mul(100) < b.limit.saturating_mul(LOW_BUDGET_PERCENT) {
        Check::warn(
            NAME,
            format!(
                "{found}: under {LOW_BUDGET_PERCENT}%; a wave may stall until the reset — wait, \
                 or give Klaud a token of its own"
            ),
        )
    } else {
        Check::ok(NAME, found)
    }
}

mod playbook;
mod services;

use playbook::{check_playbook_at_base, check_playbook_in_checkout};
use services::{check_baseline, check_capacity, check_registries, check_store};

#[cfg(test)]
mod tests;
