//! `klaud init`: writes a `klaud.toml` that fits the checkout it runs in,
//! with a comment on every choice saying what it was read from. What a
//! newcomer would otherwise copy by hand and get wrong (the layout's
//! changelog path, a lease shorter than the schedule, the bot login, the
//! recipe roots) is read from the checkout and, when a credential is
//! there, from GitHub (`GET /user`, or `GET /app` for an App).
//!
//! The file is parsed with Klaud's own loader before it is written, so
//! `init` never leaves a file the other commands refuse.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use klaud_lifecycle::workflow_contract::{
    DraftPolicy, Workflow, sweep_start_refusal, workflow_path,
};
use klaud_planner::launchers::launcher_copies;
use klaud_planner::repo::{E2E_PREFIX, RECIPES_DIR, Repository};

use super::CliError;
use crate::config::Config;

/// The bot login init writes when it could not ask GitHub; doctor fails on it.
pub const BOT_LOGIN_PLACEHOLDER: &str = "REPLACE-WITH-BOT-LOGIN";
/// The results API InferenceX publishes its benchmarks on (the baseline).
const INFERENCEX_RESULTS_API: &str = "https://inferencex.semianalysis.com";
/// The display names InferenceX's results API knows its model prefixes by,
/// for when the API cannot be asked: the app's table
/// (`packages/constants/src/models.ts`) and the names its public clients
/// ask for since. `klaud doctor` checks them against the live API.
pub const INFERENCEX_MODEL_NAMES: &[(&str, &str)] = &[
    ("dsr1", "DeepSeek-R1-0528"),
    ("dsv4", "DeepSeek-V4-Pro"),
    ("glm5", "GLM-5"),
    ("gptoss120b", "gpt-oss-120b"),
    ("kimik2.5", "Kimi-K2.5"),
    ("kimik3", "Kimi-K3"),
    ("llama70b", "Llama-3.3-70B-Instruct-FP8"),
    ("minimaxm2.5", "MiniMax-M2.5"),
    ("qwen3.5", "Qwen-3.5-397B-A17B"),
];
/// InferenceX's playbook of known failures, written from its own
/// KLAUD_DEBUG.md; `init` puts it at `lifecycle.playbook` in an InferenceX
/// checkout.
pub const INFERENCEX_PLAYBOOK: &str = include_str!("../../../../configs/inferencex-playbook.yaml");
/// How long `init` waits for the results API to list its names.
const NAMES_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);
/// The wave workflow Klaud ships runs a pass this often (its cron); the
/// lease below must outlast several missed passes.
const PASS_INTERVAL_MINUTES: u64 = 30;
/// Passes a candidate's lease survives without a renewal: GitHub delays
/// scheduled runs under load and drops some, and the event-driven passes
/// (a finished smoke or sweep) are not guaranteed either.
const LEASE_PASSES: u64 = 6;

/// Arguments of `klaud init`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Path of the benchmark repository checkout.
    #[arg(long, value_name = "PATH", default_value = ".")]
    checkout: PathBuf,
    /// Where to write the configuration (`-` for stdout); relative paths are
    /// inside the checkout.
    #[arg(long, value_name = "FILE", default_value = "configs/klaud.toml")]
    output: PathBuf,
    /// Replace an existing file.
    #[arg(long)]
    force: bool,
    /// The benchmark repository on GitHub, OWNER/NAME (default: read from
    /// the checkout's `origin` remote).
    #[arg(long, value_name = "OWNER/NAME")]
    repo: Option<String>,
    /// The bot's login (default: asked from GitHub with the credential).
    #[arg(long, value_name = "LOGIN")]
    bot_login: Option<String>,
    /// GitHub REST API base URL.
    #[arg(long, value_name = "URL", default_value = "https://api.github.com")]
    github_api: String,
    /// Do not ask GitHub anything (the bot login is then a placeholder
    /// unless `--bot-login` is given).
    #[arg(long)]
    offline: bool,
    /// GitHub App credentials (instead of a token).
    #[command(flatten)]
    auth: crate::auth::AuthArgs,
}

/// What was found in the checkout and on GitHub, each with where from.
#[derive(Debug)]
struct Findings {
    repository: Option<(String, String)>,
    bot_login: (String, String),
    app_id: Option<u64>,
    prefix: String,
    inferencex: Option<String>,
    masters: usize,
    families: usize,
    smoke: Option<String>,
    sweep: SweepFinding,
    recipe_roots: Vec<(String, String, String)>,
    variable_copies: Vec<String>,
    /// Every model prefix of the checkout with the display name found for
    /// it (InferenceX only), and where the names came from.
    model_names: PrefixNames,
    names_from: String,
}

#[derive(Debug)]
enum SweepFinding {
    Missing,
    Unreadable(String),
    Starts { runs_on_drafts: bool },
    Refused(String),
}

/// Runs the command.
pub fn run(args: Args) -> Result<(), CliError> {
    let root = args.checkout.clone();
    let findings = inspect(&args, &root)?;
    let text = render(&findings);
    // The loader is the judge: a file it refuses is a bug here, not the user's.
    Config::parse("klaud init", &text).map_err(|e| {
        CliError::failure(anyhow::anyhow!(
            "the configuration init wrote does not load ({e}); this is a bug in klaud init"
        ))
    })?;
    if args.output.as_os_str() == "-" {
        super::emit(&text);
        return Ok(());
    }
    let target = if args.output.is_absolute() {
        args.output.clone()
    } else {
        root.join(&args.output)
    };
    if target.exists() && !args.force {
        return Err(CliError::bad_input(anyhow::anyhow!(
            "{} exists; pass --force to replace it, or --output - to print the new one",
            target.display()
        )));
    }
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(|e| {
            CliError::failure(anyhow::Error::new(e).context(format!("create {}", parent.display())))
        })?;
    }
    std::fs::write(&target, &text).map_err(|e| {
        CliError::failure(anyhow::Error::new(e).context(format!("write {}", target.display())))
    })?;
    eprintln!(
        "wrote {}; check it with `klaud doctor --offline --config {}`, then `klaud doctor`",
        target.display(),
        target.display()
    );
    if findings.inferencex.is_some() {
        write_playbook(&root, args.force)?;
    }
    if let SweepFinding::Refused(why) = &findings.sweep {
        eprintln!("warning: the sweep workflow will not start on Klaud's pull requests: {why}");
    }
    Ok(())
}

/// Writes InferenceX's playbook at the default `lifecycle.playbook` path,
/// keeping a file already there unless `force`: the repository's own
/// entries are its maintainers' to keep.
fn write_playbook(root: &Path, force: bool) -> Result<(), CliError> {
    let rel = klaud_lifecycle::playbook::DEFAULT_PATH;
    // The reader is the judge here too: a playbook it refuses is a bug.
    klaud_lifecycle::playbook::Playbook::parse(rel, INFERENCEX_PLAYBOOK).map_err(|e| {
        CliError::failure(anyhow::anyhow!(
            "InferenceX's playbook does not load ({e}); this is a bug in klaud init"
        ))
    })?;
    let target = root.join(rel);
    if target.exists() && !force {
        eprintln!(
            "kept {}; pass --force to replace it with InferenceX's playbook",
            target.display()
        );
        return Ok(());
    }
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(|e| {
            CliError::failure(anyhow::Error::new(e).context(format!("create {}", parent.display())))
        })?;
    }
    std::fs::write(&target, INFERENCEX_PLAYBOOK).map_err(|e| {
        CliError::failure(anyhow::Error::new(e).context(format!("write {}", target.display())))
    })?;
    eprintln!(
        "wrote {} (InferenceX's known failures; commit it so every instance reads it at the base branch)",
        target.display()
    );
    Ok(())
}

fn inspect(args: &Args, root: &Path) -> Result<Findings, CliError> {
    if !root.is_dir() {
        return Err(CliError::bad_input(anyhow::anyhow!(
            "{} is not a directory; pass the benchmark repository's checkout with --checkout",
            root.display()
        )));
    }
    let prefix = if root.join(E2E_PREFIX).is_dir() {
        format!("{E2E_PREFIX}/")
    } else {
        String::new()
    };
    let repository = match &args.repo {
        Some(repo) => Some((repo.clone(), "--repo".to_owned())),
        None => origin_repository(root).map(|r| (r, "the checkout's origin remote".to_owned())),
    };
    // Recipe roots and families decide nothing GitHub-side; a checkout the
    // planner cannot read at all is worth stopping for.
    let opened = Repository::open(root)?;
    let masters: std::collections::BTreeSet<&str> = opened
        .families()
        .iter()
        .filter_map(|f| f.family.split_once(':').map(|(file, _)| file))
        .collect();
    let copies = launcher_copies(root, &prefix)?;
    let mut recipe_roots = Vec::new();
    let mut variable_copies = Vec::new();
    for copy in &copies {
        if !copy.is_literal() {
            variable_copies.push(format!(
                "{}:{}: cp -rT {} {}",
                copy.launcher, copy.line, copy.folder, copy.destination
            ));
            continue;
        }
        let destination = copy.destination.trim_end_matches('/').to_owned();
        // Only destinations a master's recipe setting can name (`recipes/…`)
        // map anything; the same copy in several launchers is one root.
        if !destination.starts_with("recipes/")
            || recipe_roots
                .iter()
                .any(|(p, _, _): &(String, String, String)| *p == destination)
        {
            continue;
        }
        recipe_roots.push((
            destination,
            copy.folder.trim_end_matches('/').to_owned(),
            format!("{}:{}", copy.launcher, copy.line),
        ));
    }
    recipe_roots.sort();
    let inferencex = inferencex_evidence(root, &prefix, repository.as_ref().map(|r| r.0.as_str()));
    let workflows = root.join(workflow_path(""));
    let smoke_file = workflows.join(klaud_lifecycle::engine::EngineConfig::new(0).smoke_workflow);
    let smoke = smoke_file
        .is_file()
        .then(|| smoke_file.display().to_string());
    let sweep = sweep_finding(root, &prefix, masters.iter().next().copied());
    let (bot_login, app_id) = bot_login(args, repository.as_ref().map(|r| r.0.as_str()))?;
    let prefixes: std::collections::BTreeSet<String> = opened
        .families()
        .iter()
        .map(|f| f.entry.model_prefix.clone())
        .filter(|p| !p.trim().is_empty())
        .collect();
    let (model_names, names_from) = match &inferencex {
        Some(_) => model_names(args, &prefixes)?,
        None => (Vec::new(), String::new()),
    };
    Ok(Findings {
        repository,
        bot_login,
        app_id,
        prefix,
        inferencex,
        masters: masters.len(),
        families: opened.families().len(),
        smoke,
        sweep,
        recipe_roots,
        variable_copies,
        model_names,
        names_from,
    })
}

/// Every model prefix with its display name, when one is known.
type PrefixNames = Vec<(String, Option<String>)>;

/// The display name of every prefix: asked from InferenceX's results API
/// unless `--offline` (the way Klaud itself finds them), else, and for
/// every prefix the API could not answer, the known table.
fn model_names(
    args: &Args,
    prefixes: &std::collections::BTreeSet<String>,
) -> Result<(PrefixNames, String), CliError> {
    let known = |p: &str| {
        INFERENCEX_MODEL_NAMES
            .iter()
            .find(|(k, _)| *k == p)
            .map(|(_, n)| (*n).to_owned())
    };
    let table = || prefixes.iter().map(|p| (p.clone(), known(p))).collect();
    if args.offline {
        return Ok((table(), "the known table (--offline)".into()));
    }
    let source = klaud_service::HttpBaselineSource::new(INFERENCEX_RESULTS_API)
        .map_err(|e| CliError::failure(anyhow::anyhow!(e)))?;
    let runtime = super::runtime()?;
    let asked = runtime.block_on(async {
        tokio::time::timeout(NAMES_TIMEOUT, async {
            use klaud_lifecycle::baseline::BaselineSource as _;
            let mut out = Vec::new();
            for p in prefixes {
                out.push((p.clone(), source.display_name(p).await?));
            }
            Ok::<_, klaud_lifecycle::baseline::SourceError>(out)
        })
        .await
    });
    Ok(match asked {
        Ok(Ok(found)) => (
            found
                .into_iter()
                .map(|(p, n)| {
                    let n = n.or_else(|| known(&p));
                    (p, n)
                })
                .collect(),
            format!("{INFERENCEX_RESULTS_API}/api/openapi.json, then the known table"),
        ),
        Ok(Err(e)) => (table(), format!("the known table (the API: {e})")),
        Err(_) => (
            table(),
            format!(
                "the known table (the API did not answer within {}s)",
                NAMES_TIMEOUT.as_secs()
            ),
        ),
    })
}

/// `OWNER/NAME` from the checkout's `origin` remote on github.com (SSH or
/// HTTPS), read from `.git/config` without running git.
fn origin_repository(root: &Path) -> Option<String> {
    let text = std::fs::read_to_string(root.join(".git/config")).ok()?;
    let mut in_origin = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_origin = line == "[remote \"origin\"]";
            continue;
        }
        let Some(url) = line.strip_prefix("url").map(str::trim_start) else {
            continue;
        };
        let Some(url) = url.strip_prefix('=').map(str::trim) else {
            continue;
        };
        if !in_origin {
            continue;
        }
        let path = url
            .strip_prefix("git@github.com:")
            .or_else(|| url.strip_prefix("https://github.com/"))
            .or_else(|| url.strip_prefix("ssh://git@github.com/"))?;
        let path = path.trim_end_matches('/').trim_end_matches(".git");
        let (owner, name) = path.split_once('/')?;
        if owner.is_empty() || name.is_empty() || name.contains('/') {
            return None;
        }
        return Some(format!("{owner}/{name}"));
    }
    None
}

/// Why this checkout is InferenceX (its results API and recipe alignment
/// apply), or `None`.
fn inferencex_evidence(root: &Path, prefix: &str, repository: Option<&str>) -> Option<String> {
    if let Some(repo) = repository
        && repo
            .rsplit_once('/')
            .is_some_and(|(_, name)| name.eq_ignore_ascii_case("InferenceX"))
    {
        return Some(format!("the repository is {repo}"));
    }
    // The reuse gate and the sweep matrix generator are InferenceX's own.
    for marker in [
        "utils/find_reusable_sweep_run.py",
        "utils/matrix_logic/generate_sweep_configs.py",
    ] {
        if root.join(prefix).join(marker).is_file() {
            return Some(format!("the checkout has {prefix}{marker}"));
        }
    }
    None
}

fn sweep_finding(root: &Path, prefix: &str, master: Option<&str>) -> SweepFinding {
    let engine = klaud_lifecycle::engine::EngineConfig::new(0);
    let path = root.join(workflow_path(&engine.sweep_workflow));
    let Ok(text) = std::fs::read_to_string(&path) else {
        return SweepFinding::Missing;
    };
    let workflow = match Workflow::parse(&engine.sweep_workflow, &text) {
        Ok(w) => w,
        Err(e) => return SweepFinding::Unreadable(e.to_string()),
    };
    let changed = klauds_changes(prefix, master);
    let label = crate::config::LifecycleConfig::default().sweep_label;
    match sweep_start_refusal(&workflow, "main", &label, DraftPolicy::Auto, &changed) {
        Err(e) => SweepFinding::Unreadable(e.to_string()),
        Ok(Some(why)) => SweepFinding::Refused(why),
        Ok(None) => SweepFinding::Starts {
            runs_on_drafts: workflow.runs_on_draft(&label).unwrap_or(true),
        },
    }
}

/// The files a Klaud pull request changes when it is labelled for the
/// final sweep: the family's master file and the changelog (recipes too,
/// but a sweep's path filter is on the changelog).
pub fn klauds_changes(prefix: &str, master: Option<&str>) -> Vec<String> {
    let mut files = vec![format!(
        "{prefix}{}",
        klaud_planner::changelog::CHANGELOG_PATH
    )];
    files.extend(master.map(str::to_owned));
    files
}

/// The bot login and, for an App, its id: `--bot-login`, else asked from
/// GitHub with the credential, else a placeholder that says so.
fn bot_login(args: &Args, repo: Option<&str>) -> Result<((String, String), Option<u64>), CliError> {
    let mut github = crate::config::GithubConfig {
        api_url: args.github_api.clone(),
        ..Default::default()
    };
    args.auth.apply(&mut github);
    let app_id = github.app_id;
    if let Some(login) = &args.bot_login {
        return Ok(((login.clone(), "--bot-login".to_owned()), app_id));
    }
    let placeholder = |why: &str| {
        (
            (
                BOT_LOGIN_PLACEHOLDER.to_owned(),
                format!("{why}; replace it, `klaud doctor` refuses the placeholder"),
            ),
            app_id,
        )
    };
    if args.offline {
        return Ok(placeholder("not asked (--offline)"));
    }
    let auth = crate::auth::Auth::from_config(&github, |name| std::env::var(name))
        .map_err(|e| CliError::bad_input(anyhow::anyhow!(e)))?;
    let Some(auth) = auth else {
        return Ok(placeholder(&format!(
            "no credential in {} and no --app-id",
            github
                .token_env
                .iter()
                .map(|n| format!("${n}"))
                .collect::<Vec<_>>()
                .join(" or ")
        )));
    };
    let runtime = super::runtime()?;
    let login = runtime.block_on(async {
        let credential = match (&auth, repo) {
            (crate::auth::Auth::Token { token, .. }, _) => {
                klaud_github::Credential::Token(token.clone())
            }
            (crate::auth::Auth::App { .. }, Some(repo)) => auth
                .credential(&github.api_url, repo)
                .await
                .map_err(|e| super::github_failure(e, "GitHub App credential"))?,
            (crate::auth::Auth::App { .. }, None) => {
                return Err(CliError::bad_input(anyhow::anyhow!(
                    "a GitHub App's installation is found through the repository: pass --repo OWNER/NAME"
                )));
            }
        };
        // Any repository will do for asking who the credential is.
        let asking = crate::config::GithubConfig {
            bot_login: "klaud-init".to_owned(),
            ..github.clone()
        };
        let forge =
            crate::compose::github_client(&asking, repo.unwrap_or("klaud/init"), credential)
                .map_err(|e| super::github_failure(e, "GitHub client"))?;
        crate::compose::identify(&forge, crate::compose::Access::Read)
            .await
            .map_err(|e| super::github_failure(e, "asking GitHub who the credential is"))
    })?;
    let from = match &auth {
        crate::auth::Auth::Token { variable, .. } => format!("GET /user with ${variable}"),
        crate::auth::Auth::App { app_id, .. } => format!("GET /app for App {app_id}"),
    };
    Ok(((login.login, from), app_id))
}

fn toml_string(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

fn render(f: &Findings) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(
        w,
        "# klaud.toml written by `klaud init` for this checkout. Every key not"
    );
    let _ = writeln!(
        w,
        "# listed takes its default (configs/README.md in Klaud lists them all);"
    );
    let _ = writeln!(
        w,
        "# an unknown key is an error. Check it with `klaud doctor --offline`."
    );
    let _ = writeln!(w);
    let _ = writeln!(w, "[github]");
    match &f.repository {
        Some((repo, from)) => {
            let _ = writeln!(w, "# Source: {from}.");
            let _ = writeln!(w, "repository = {}", toml_string(repo));
        }
        None => {
            let _ = writeln!(
                w,
                "# No github.com `origin` remote in the checkout: set it, or pass --repo."
            );
            let _ = writeln!(w, "# repository = \"OWNER/NAME\"");
        }
    }
    let _ = writeln!(
        w,
        "# The account every write is made as; Klaud refuses to run as anyone else."
    );
    let _ = writeln!(w, "# Source: {}.", f.bot_login.1);
    let _ = writeln!(w, "bot_login = {}", toml_string(&f.bot_login.0));
    if let Some(app_id) = f.app_id {
        let _ = writeln!(
            w,
            "# A GitHub App: Klaud acts as its installation; the private key comes"
        );
        let _ = writeln!(
            w,
            "# from $KLAUD_GITHUB_APP_PRIVATE_KEY (app_private_key_env)."
        );
        let _ = writeln!(w, "app_id = {app_id}");
    }
    let _ = writeln!(w);
    let _ = writeln!(w, "[daemon]");
    let lease_hours = (PASS_INTERVAL_MINUTES * LEASE_PASSES).div_ceil(60);
    let _ = writeln!(
        w,
        "# The example workflow (configs/klaud-wave.workflow.yml) runs a pass every"
    );
    let _ = writeln!(
        w,
        "# {PASS_INTERVAL_MINUTES} minutes and when a smoke or sweep run ends; a claim's lease must"
    );
    let _ = writeln!(
        w,
        "# outlast the gap between passes, or the next pass would take the family"
    );
    let _ = writeln!(
        w,
        "# for an orphan. {LEASE_PASSES} passes' worth covers scheduled runs GitHub delays or drops."
    );
    let _ = writeln!(w, "lease = \"{lease_hours}h\"");
    let _ = writeln!(w);
    let _ = writeln!(w, "[lifecycle]");
    let _ = writeln!(
        w,
        "# Layout: {}. Klaud reads {}configs/*-master.yaml ({} families in {} master",
        if f.prefix.is_empty() {
            "the repository root"
        } else {
            "the inferencex-e2e/ folder"
        },
        f.prefix,
        f.families,
        f.masters
    );
    let _ = writeln!(
        w,
        "# files) and appends to {}{} before the final sweep (both follow the",
        f.prefix,
        klaud_planner::changelog::CHANGELOG_PATH
    );
    let _ = writeln!(w, "# layout; there is no key for them).");
    let engine = klaud_lifecycle::engine::EngineConfig::new(0);
    match &f.smoke {
        Some(_) => {
            let _ = writeln!(
                w,
                "# Smoke: .github/workflows/{} (found), dispatched by Klaud.",
                engine.smoke_workflow
            );
        }
        None => {
            let _ = writeln!(
                w,
                "# Smoke: .github/workflows/{} is NOT in this checkout; Klaud dispatches it by that name.",
                engine.smoke_workflow
            );
        }
    }
    let label = crate::config::LifecycleConfig::default().sweep_label;
    match &f.sweep {
        SweepFinding::Missing => {
            let _ = writeln!(
                w,
                "# Sweep: .github/workflows/{} is NOT in this checkout; Klaud labels its PR",
                engine.sweep_workflow
            );
            let _ = writeln!(w, "# `{label}` and watches a run of that file.");
        }
        SweepFinding::Unreadable(why) => {
            let _ = writeln!(
                w,
                "# Sweep: .github/workflows/{} does not parse: {why}",
                engine.sweep_workflow
            );
        }
        SweepFinding::Starts { runs_on_drafts } => {
            let _ = writeln!(
                w,
                "# Sweep: .github/workflows/{} starts on Klaud's PR labelled `{label}`",
                engine.sweep_workflow
            );
            let _ = writeln!(
                w,
                "# (checked against its on: pull_request paths, branches and job conditions);"
            );
            let _ = writeln!(
                w,
                "# it {} drafts, so \"auto\" {}.",
                if *runs_on_drafts { "runs on" } else { "skips" },
                if *runs_on_drafts {
                    "keeps the PR a draft until Klaud finishes"
                } else {
                    "marks the PR ready before labelling"
                }
            );
        }
        SweepFinding::Refused(why) => {
            let _ = writeln!(
                w,
                "# WARNING: .github/workflows/{} will NOT start on Klaud's PRs: {why}.",
                engine.sweep_workflow
            );
            let _ = writeln!(
                w,
                "# Fix the workflow's trigger (or the layout) before running Klaud;"
            );
            let _ = writeln!(w, "# `klaud doctor` fails until then.");
        }
    }
    let _ = writeln!(w, "sweep_label = {}", toml_string(&label));
    let _ = writeln!(w, "sweep_runs_on_drafts = \"auto\"");
    match &f.inferencex {
        Some(why) => {
            let _ = writeln!(
                w,
                "# InferenceX ({why}): the baseline is frozen from its public results API."
            );
            let _ = writeln!(w, "baseline_api = {}", toml_string(INFERENCEX_RESULTS_API));
            let _ = writeln!(w);
            let _ = writeln!(
                w,
                "# Model prefix (a master entry's `model-prefix`) -> the display name the"
            );
            let _ = writeln!(
                w,
                "# results API knows it by (it matches names exactly). Klaud finds names in"
            );
            let _ = writeln!(
                w,
                "# the API itself; these override it. From {}.",
                f.names_from
            );
            let _ = writeln!(w, "[lifecycle.model_names]");
            for (prefix, name) in &f.model_names {
                match name {
                    Some(name) => {
                        let _ = writeln!(w, "{} = {}", toml_string(prefix), toml_string(name));
                    }
                    None => {
                        let _ = writeln!(
                            w,
                            "# {} = ?  (no name known: `klaud doctor` says whether the API knows one)",
                            toml_string(prefix)
                        );
                    }
                }
            }
        }
        None => {
            let _ = writeln!(
                w,
                "# Not InferenceX: no results API is known, so every baseline point is N/A."
            );
            let _ = writeln!(
                w,
                "# Set it to a server with /api/v1/benchmarks and /api/v1/workflow-info."
            );
            let _ = writeln!(w, "baseline_api = \"\"");
        }
    }
    let _ = writeln!(w);
    let _ = writeln!(w, "[bump]");
    match &f.inferencex {
        Some(_) => {
            let _ = writeln!(
                w,
                "# Recipe image fields that carry another image than the master are set to"
            );
            let _ = writeln!(
                w,
                "# the new image as well, as InferenceX maintainers do by hand (replaying its"
            );
            let _ = writeln!(
                w,
                "# history, \"align\" turns 5 of 36 differing bumps byte-identical and makes"
            );
            let _ = writeln!(w, "# none worse).");
            let _ = writeln!(w, "disagreeing_recipes = \"align\"");
        }
        None => {
            let _ = writeln!(
                w,
                "# Recipe image fields that carry another image than the master are left,"
            );
            let _ = writeln!(
                w,
                "# with a warning in the report; \"align\" would set them to the new image."
            );
            let _ = writeln!(w, "disagreeing_recipes = \"leave\"");
        }
    }
    let _ = writeln!(w);
    if f.recipe_roots.is_empty() {
        let _ = writeln!(
            w,
            "# Recipe roots: no literal `cp -rT <folder> recipes/…` in {}runners/launch_*.sh;",
            f.prefix
        );
        let _ = writeln!(
            w,
            "# `recipes/<path>` settings resolve under {RECIPES_DIR}."
        );
    } else {
        let _ = writeln!(
            w,
            "# Recipe roots: the folders {}runners/launch_*.sh copy with `cp -rT`, so a recipe",
            f.prefix
        );
        let _ = writeln!(
            w,
            "# named under the prefix is the repository file a bump edits."
        );
    }
    for copy in &f.variable_copies {
        let _ = writeln!(
            w,
            "# Not mapped (its destination is a shell variable; add it by hand): {copy}"
        );
    }
    for (prefix, folder, from) in &f.recipe_roots {
        let _ = writeln!(w, "[[recipe_roots]]");
        let _ = writeln!(w, "# {from}");
        let _ = writeln!(w, "prefix = {}", toml_string(prefix));
        let _ = writeln!(w, "folder = {}", toml_string(folder));
    }
    out
}
