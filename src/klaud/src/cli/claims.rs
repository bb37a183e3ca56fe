//! `klaud claims list|acquire|release`: claim refs of a repository on GitHub.
//!
//! There is no local store here: GitHub is the truth, so these commands can
//! run beside a daemon or each other. Every command first runs the identity
//! preflight (the token must belong to the bot login). Exit codes: 0 done,
//! 3 the claim belongs to somebody else (acquire: occupied; release: a live
//! owner holds it, or it does not parse, and no `--force`), 2 bad input or
//! preflight mismatch, 1 transport or GitHub failures.
//!
//! Releasing another owner's claim is a recovery with a person's name on it:
//! the claim is taken over by compare-and-swap (fence + 1, so a live holder
//! stops at its next ownership check), and each candidate ends as `handoff`
//! with the usual cleanup and a receipt saying who released it and why.
//!
//! A claim made here has no planner candidate behind it, but the record
//! format (shared with the old helper) needs at least one candidate of the
//! family. It gets one synthetic candidate whose image half is the identity
//! of [`MANUAL_CLAIM_TARGET`]: recovery finds no branch or PR for it and only
//! releases the claim once its lease ran out.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, anyhow};
use chrono::{DateTime, TimeDelta, Utc};
use clap::Subcommand;
use klaud_claims::claim::MAX_LEASE;
use klaud_claims::{
    Acquire, CandidateId, ClaimBook, ClaimCandidate, ClaimEntry, ClaimError, Claimant, Clock,
    FamilyId, Release,
};
use klaud_planner::identity;
use serde::Serialize;
use uuid::Uuid;

use super::CliError;
use crate::config::{Config, parse_duration};
use klaud_github::{ForgeRunCompletion, Github, GithubError};
use klaud_service::GithubLifecycle;
use klaud_service::recover::{Recovered, RecoveryContext, ReleaseRefused, release_claim};

use crate::compose::{self, EngineParts};
use klaud_lifecycle::engine::MemoryJournal;

/// Exit code when the claim belongs to somebody else.
pub const EXIT_HELD_BY_OTHER: u8 = 3;

/// The "image" a manual (CLI) claim's synthetic candidate is named after.
pub const MANUAL_CLAIM_TARGET: &str = "klaud-cli:manual-claim";

/// Arguments of `klaud claims`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    #[command(subcommand)]
    command: ClaimsCommand,
}

/// Where the repository is; each flag overrides `klaud.toml`.
#[derive(Debug, clap::Args)]
struct Target {
    /// GitHub REST API base URL (overrides `github.api_url`).
    #[arg(long = "github-api", value_name = "URL", global = true)]
    github_api: Option<String>,
    /// The benchmark repository (overrides `github.repository`).
    #[arg(long, value_name = "OWNER/NAME", global = true)]
    repo: Option<String>,
    /// Configuration file (`klaud.toml`); defaults apply without one.
    #[arg(long, value_name = "FILE", env = "KLAUD_CONFIG", global = true)]
    config: Option<PathBuf>,
    /// The login the token must belong to (overrides `github.bot_login`).
    #[arg(long, value_name = "LOGIN", global = true)]
    bot_login: Option<String>,
    /// GitHub App credentials (instead of a token).
    #[command(flatten)]
    auth: crate::auth::AuthArgs,
}

/// The forge settings with the credential still to be resolved (an App's
/// installation may need a lookup); `github` carries the flags' API URL
/// and bot login.
#[derive(Debug)]
struct ForgeSpec {
    github: crate::config::GithubConfig,
    repo: String,
    auth: crate::auth::Auth,
}

#[derive(Debug, Subcommand)]
enum ClaimsCommand {
    /// Every claim ref and recovery lease, unparsable ones included.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Claim a family on the default branch head (exit 3 when occupied).
    Acquire(AcquireArgs),
    /// Release a claim: yours (`--owner`); another's with `--reason` once its
    /// lease ran out (its candidates end with a receipt naming who and why),
    /// or while its owner is live with `--force --reason`.
    Release(ReleaseArgs),
}

#[derive(Debug, clap::Args)]
struct AcquireArgs {
    /// Family string (`configs/nvidia-master.yaml:KEY`); a family id is not
    /// enough here, the claim record stores the string.
    #[arg(long, value_name = "FAMILY")]
    family: String,
    /// How long the claim holds before recovery may take it over (30s, 90m, 24h, 7d).
    #[arg(long, value_name = "DURATION", default_value = "24h")]
    lease: String,
    /// Run id written into the claim (GitHub Actions sets `GITHUB_RUN_ID`);
    /// 0 means "not tied to a workflow run".
    #[arg(long, value_name = "ID", env = "GITHUB_RUN_ID", default_value_t = 0)]
    run_id: u64,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct ReleaseArgs {
    /// Family string (`configs/nvidia-master.yaml:KEY`) or 16-hex family id.
    #[arg(long, value_name = "FAMILY")]
    family: String,
    /// The owner uuid `acquire` printed: releases the claim only if it is still that owner's.
    #[arg(long, value_name = "UUID")]
    owner: Option<Uuid>,
    /// Release it even though a live owner holds the lease (or it does not parse).
    #[arg(long, requires = "reason")]
    force: bool,
    /// Why (required unless it is yours); written into each candidate's receipt.
    #[arg(long, value_name = "TEXT")]
    reason: Option<String>,
    /// Who is releasing it, for the receipt (default: $GITHUB_ACTOR, else $USER).
    #[arg(long, value_name = "NAME")]
    by: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs the command.
pub fn run(args: Args) -> Result<(), CliError> {
    let config = super::load_config(args.target.config.as_deref(), std::path::Path::new("."))?;
    let forge_config = forge_config(&config, &args.target, |name| std::env::var(name))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .map_err(CliError::failure)?;
    // Local input is checked before anything talks to GitHub.
    let request = match args.command {
        ClaimsCommand::List { json } => Request::List { json },
        ClaimsCommand::Acquire(a) => Request::Acquire(AcquireRequest::new(a)?),
        ClaimsCommand::Release(r) => Request::Release(ReleaseRequest::new(r)?),
    };
    runtime.block_on(async {
        let credential = forge_config
            .auth
            .credential(&forge_config.github.api_url, &forge_config.repo)
            .await
            .map_err(|e| github_error(e, "GitHub credential"))?;
        let forge = compose::github_client(&forge_config.github, &forge_config.repo, credential)
            .map_err(|e| github_error(e, "GitHub client"))?;
        // Listing only reads: any credential that can read will do, and the
        // reader is told whose it is. Writes must be the bot's.
        let read_only = matches!(request, Request::List { .. });
        let access = if read_only {
            compose::Access::Read
        } else {
            compose::Access::Write
        };
        let me = compose::identify(&forge, access)
            .await
            .map_err(|e| github_error(e, "identity preflight"))?;
        if read_only {
            eprintln!("reading {} as {}", forge.repo(), me.login);
        }
        match request {
            Request::List { json } => list(&forge, json).await,
            Request::Acquire(a) => acquire(&forge, a).await,
            Request::Release(mut r) => {
                // A bare key names its claim only through the master configs.
                if matches!(r.family, FamilyArg::Key(_)) {
                    r.family = resolve_family(&forge, &r.family).await?;
                }
                release(&forge, &config, r).await
            }
        }
    })
}

/// A command with its input checked.
enum Request {
    List { json: bool },
    Acquire(AcquireRequest),
    Release(ReleaseRequest),
}

struct AcquireRequest {
    family: FamilyArg,
    lease: TimeDelta,
    run_id: u64,
    json: bool,
}

impl AcquireRequest {
    fn new(args: AcquireArgs) -> Result<Self, CliError> {
        let family = parse_family(&args.family)?;
        let lease = parse_duration(&args.lease)
            .map_err(|e| CliError::bad_input(anyhow!("--lease: {e}")))?;
        let lease = TimeDelta::from_std(lease)
            .map_err(|_| CliError::bad_input(anyhow!("--lease {:?} is too long", args.lease)))?;
        if lease < TimeDelta::seconds(1) || lease > MAX_LEASE {
            return Err(CliError::bad_input(anyhow!(
                "--lease {:?} is outside 1s..={}d",
                args.lease,
                MAX_LEASE.num_days()
            )));
        }
        Ok(Self {
            family,
            lease,
            run_id: args.run_id,
            json: args.json,
        })
    }
}

struct ReleaseRequest {
    family: FamilyArg,
    owner: Option<Uuid>,
    force: bool,
    reason: Option<String>,
    by: String,
    json: bool,
}

impl ReleaseRequest {
    fn new(args: ReleaseArgs) -> Result<Self, CliError> {
        let family = parse_family(&args.family)?;
        let reason = match args.reason.as_deref().map(str::trim) {
            Some("") => {
                return Err(CliError::bad_input(anyhow!(
                    "--reason is empty; say why the claim is released"
                )));
            }
            other => other.map(str::to_owned),
        };
        if reason.is_none() && args.owner.is_none() {
            return Err(CliError::bad_input(anyhow!(
                "--reason TEXT is required to release a claim that is not yours (pass --owner \
                 UUID for your own): it goes into the receipt of each candidate"
            )));
        }
        let by = match args.by.as_deref().map(str::trim) {
            Some("") => {
                return Err(CliError::bad_input(anyhow!(
                    "--by is empty; say who is releasing the claim"
                )));
            }
            Some(by) => by.to_owned(),
            None => ["GITHUB_ACTOR", "USER", "LOGNAME"]
                .iter()
                .find_map(|v| std::env::var(v).ok().filter(|s| !s.trim().is_empty()))
                .unwrap_or_else(|| "an operator".to_owned()),
        };
        Ok(Self {
            family,
            owner: args.owner,
            force: args.force,
            reason,
            by: clean(&by),
            json: args.json,
        })
    }
}

/// The forge settings from `klaud.toml`, the flags and the token variables.
fn forge_config(
    config: &Config,
    target: &Target,
    env: impl Fn(&str) -> Result<String, std::env::VarError>,
) -> Result<ForgeSpec, CliError> {
    let api_url = target
        .github_api
        .clone()
        .unwrap_or_else(|| config.github.api_url.clone());
    url::Url::parse(&api_url)
        .map_err(|e| CliError::bad_input(anyhow!("--github-api {api_url:?} is not a URL: {e}")))?;
    let repo = target
        .repo
        .clone()
        .or_else(|| config.github.repository.clone())
        .ok_or_else(|| {
            CliError::bad_input(anyhow!(
                "no repository: pass --repo OWNER/NAME or set github.repository in klaud.toml"
            ))
        })?;
    let bot_login = target
        .bot_login
        .clone()
        .unwrap_or_else(|| config.github.bot_login.clone());
    let mut github = crate::config::GithubConfig {
        api_url,
        bot_login,
        ..config.github.clone()
    };
    target.auth.apply(&mut github);
    let auth = crate::auth::Auth::from_config(&github, &env)
        .map_err(|e| CliError::bad_input(anyhow!(e)))?
        .ok_or_else(|| CliError::bad_input(anyhow!(github.missing_token_in(&env))))?;
    Ok(ForgeSpec { github, repo, auth })
}

/// Bad requests and refusals are the user's to fix (2); GitHub or the
/// network failing is not (1).
fn github_error(e: GithubError, context: &str) -> CliError {
    super::github_failure(e, context)
}

fn claim_error(e: ClaimError) -> CliError {
    match e {
        ClaimError::InvalidRequest(_) => CliError::bad_input(e),
        ClaimError::NotOwner { .. } | ClaimError::Unparsable { .. } => CliError {
            code: EXIT_HELD_BY_OTHER,
            error: e.into(),
        },
        ClaimError::Store { .. }
        | ClaimError::RunCompletion { .. }
        | ClaimError::Contended { .. }
        | ClaimError::Moved { .. } => CliError::failure(e),
    }
}

fn held_by_other(error: anyhow::Error) -> CliError {
    CliError {
        code: EXIT_HELD_BY_OTHER,
        error,
    }
}

/// `--family` as given: a family string (with its id) or only an id.
#[derive(Debug, Clone, PartialEq, Eq)]
enum FamilyArg {
    Name {
        family: String,
        id: FamilyId,
    },
    Id(FamilyId),
    /// A bare config key (what `klaud bump --family` takes), resolved
    /// against the base branch's master configs before use.
    Key(String),
}

impl FamilyArg {
    /// The family id; `None` for a bare key not yet resolved.
    fn id(&self) -> Option<&FamilyId> {
        match self {
            Self::Name { id, .. } | Self::Id(id) => Some(id),
            Self::Key(_) => None,
        }
    }
}

/// Resolves a bare key or a family id to the family string: the top-level
/// keys of the default branch's master configs (`configs/*-master.yaml`,
/// under `inferencex-e2e/` when the repository has it) are the families.
/// Only the key names are read, so one malformed entry elsewhere does not
/// stop a claim on another.
async fn resolve_family(forge: &Github, family: &FamilyArg) -> Result<FamilyArg, CliError> {
    let wanted = match family {
        FamilyArg::Name { .. } => return Ok(family.clone()),
        FamilyArg::Id(id) => id.to_string(),
        FamilyArg::Key(key) => key.clone(),
    };
    let branch = forge
        .default_branch()
        .await
        .map_err(|e| github_error(e, "reading the default branch"))?;
    let base = forge
        .get_ref(&format!("refs/heads/{branch}"))
        .await
        .map_err(|e| github_error(e, "reading the default branch head"))?
        .ok_or_else(|| {
            CliError::failure(anyhow!("the default branch {branch:?} has no head commit"))
        })?;
    let tree = forge
        .tree_blobs(&base)
        .await
        .map_err(|e| github_error(e, "listing the master configs"))?;
    let mut found = Vec::new();
    for (path, _) in &tree {
        let rel = path.strip_prefix("inferencex-e2e/").unwrap_or(path);
        let Some(file) = rel.strip_prefix("configs/") else {
            continue;
        };
        if file.contains('/') || !file.ends_with("-master.yaml") {
            continue;
        }
        let Some(bytes) = forge
            .get_contents(path, &base)
            .await
            .map_err(|e| github_error(e, "reading a master config"))?
        else {
            continue;
        };
        let Ok(text) = String::from_utf8(bytes) else {
            continue;
        };
        // Entry by entry: a broken entry elsewhere (or this family's own)
        // does not hide the keys of the file.
        let Ok(confined) = klaud_planner::yaml::parse_confined(&text) else {
            continue;
        };
        let keys = confined
            .root
            .as_ref()
            .and_then(|doc| doc.as_mapping())
            .unwrap_or_default()
            .iter()
            .filter_map(|(k, _)| k.as_scalar())
            .chain(confined.broken.iter().filter_map(|b| b.key.as_deref()));
        for key in keys {
            let name = format!("{rel}:{key}");
            let id = identity::family_id(&name);
            if key == wanted || id == wanted {
                found.push((name, id));
            }
        }
    }
    found.sort();
    found.dedup();
    match found.as_slice() {
        [(name, id)] => {
            let id = FamilyId::new(id)
                .map_err(|e| CliError::failure(anyhow!("family id {id:?}: {e}")))?;
            Ok(FamilyArg::Name {
                family: name.clone(),
                id,
            })
        }
        [] => Err(CliError::bad_input(anyhow!(
            "--family {wanted:?}: no family of {} at {base} has this key or id; \
             `klaud families` lists them",
            forge.repo()
        ))),
        many => Err(CliError::bad_input(anyhow!(
            "--family {wanted:?} is ambiguous: {}; pass the family string",
            many.iter()
                .map(|(name, _)| name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// The family id of `--family TEXT` when the default branch has that
/// family (by family string, key or id): an error naming it otherwise, so
/// that a typo is not read as "nothing to do".
pub(super) async fn family_in_repository(forge: &Github, text: &str) -> Result<FamilyId, CliError> {
    match resolve_family(forge, &parse_family(text)?).await? {
        FamilyArg::Name { family, id } => {
            let branch = forge
                .default_branch()
                .await
                .map_err(|e| github_error(e, "reading the default branch"))?;
            let base = forge
                .get_ref(&format!("refs/heads/{branch}"))
                .await
                .map_err(|e| github_error(e, "reading the default branch head"))?
                .ok_or_else(|| {
                    CliError::failure(anyhow!("the default branch {branch:?} has no head commit"))
                })?;
            check_family_exists(forge, &family, &base).await?;
            Ok(id)
        }
        FamilyArg::Id(id) => Ok(id),
        FamilyArg::Key(key) => Err(CliError::failure(anyhow!(
            "--family {key:?} did not resolve to a family string"
        ))),
    }
}

fn parse_family(text: &str) -> Result<FamilyArg, CliError> {
    let bad = |why: String| CliError::bad_input(anyhow!("--family {text:?}: {why}"));
    if let Ok(id) = FamilyId::new(text) {
        return Ok(FamilyArg::Id(id));
    }
    if text.len() == 16 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad("family ids are lowercase hex".into()));
    }
    let Some((path, key)) = text.split_once(':') else {
        // A bare config key, as `klaud bump --family` takes it.
        if !text.is_empty()
            && !text.contains('/')
            && !text.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Ok(FamilyArg::Key(text.to_owned()));
        }
        return Err(bad(
            "expected a family string like configs/nvidia-master.yaml:KEY, its KEY or a 16-hex \
             family id"
                .into(),
        ));
    };
    if key.is_empty() || key.trim() != key || key.chars().any(char::is_control) {
        return Err(bad("the config key after ':' is empty or has spaces".into()));
    }
    if path.starts_with("inferencex-e2e/") {
        return Err(bad(
            "family strings never carry the inferencex-e2e/ prefix; drop it".into(),
        ));
    }
    if !path.starts_with("configs/")
        || !path.ends_with(".yaml")
        || path.split('/').any(|part| part.is_empty() || part == "..")
    {
        return Err(bad(
            "the part before ':' must be a master file such as configs/nvidia-master.yaml".into(),
        ));
    }
    let id = FamilyId::new(&identity::family_id(text))
        .map_err(|e| bad(format!("computed family id is invalid: {e}")))?;
    Ok(FamilyArg::Name {
        family: text.to_owned(),
        id,
    })
}

/// Escapes control characters: claim records and errors come from GitHub
/// and must not drive the terminal.
fn clean(text: &str) -> String {
    if text.chars().any(char::is_control) {
        text.chars()
            .flat_map(|c| {
                if c.is_control() {
                    c.escape_default().collect::<Vec<_>>()
                } else {
                    vec![c]
                }
            })
            .collect()
    } else {
        text.to_owned()
    }
}

/// One claim ref as shown by `list` (and as the holder in other commands).
#[derive(Debug, Serialize)]
struct ClaimView {
    kind: &'static str,
    #[serde(rename = "ref")]
    ref_name: String,
    family_id: Option<String>,
    sha: String,
    /// `active`, `expired`, `lease-less` (old helper) or `unparsable`.
    state: &'static str,
    owner: Option<String>,
    run_id: Option<u64>,
    lease_until: Option<String>,
    fence: Option<u64>,
    holder: Option<String>,
    /// Made by `klaud claims acquire`, not by a planner wave.
    manual: bool,
    candidates: Vec<CandidateView>,
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct CandidateView {
    id: String,
    family: String,
    base: String,
}

impl ClaimView {
    fn new(kind: &'static str, entry: &ClaimEntry, now: DateTime<Utc>) -> Self {
        let mut view = Self {
            kind,
            ref_name: clean(&entry.tip.name),
            family_id: entry
                .family()
                .or_else(|| {
                    CandidateId::from_recovery_ref(&entry.tip.name).map(|(_, c)| c.family())
                })
                .map(|f| f.to_string()),
            sha: clean(&entry.tip.sha),
            state: "unparsable",
            owner: None,
            run_id: None,
            lease_until: None,
            fence: None,
            holder: None,
            manual: false,
            candidates: Vec::new(),
            error: None,
        };
        match &entry.record {
            Ok(r) => {
                view.state = match r.lease_until {
                    Some(until) if until <= now => "expired",
                    Some(_) => "active",
                    None => "lease-less",
                };
                view.owner = r.owner.map(|o| o.to_string());
                view.run_id = Some(r.run_id);
                view.lease_until = r
                    .lease_until
                    .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
                view.fence = r.fence;
                view.holder = r.holder.as_deref().map(clean);
                view.manual = r
                    .candidates
                    .iter()
                    .any(|c| Some(&c.id) == manual_candidate_id(&c.id.family()).as_ref());
                view.candidates = r
                    .candidates
                    .iter()
                    .map(|c| CandidateView {
                        id: c.id.to_string(),
                        family: clean(&c.family),
                        base: clean(&c.base),
                    })
                    .collect();
            }
            Err(e) => view.error = Some(clean(&e.to_string())),
        }
        view
    }

    /// One line: who holds it and until when.
    fn holder_line(&self) -> String {
        if let Some(error) = &self.error {
            return format!("{} does not parse: {error}", self.ref_name);
        }
        format!(
            "owner {}, run {}, lease until {}, fence {}, holder {}{}",
            self.owner.as_deref().unwrap_or("none (old helper)"),
            self.run_id.unwrap_or(0),
            self.lease_until.as_deref().unwrap_or("none"),
            self.fence.unwrap_or(0),
            self.holder.as_deref().unwrap_or("old helper"),
            match self.state {
                "expired" => " (lease expired)",
                "lease-less" => " (lease-less: may be taken over once its run completed)",
                _ => "",
            }
        )
    }
}

/// The synthetic candidate of a manual claim on `family`; `None` only if
/// the identity were not hex, which `identity::candidate_id` rules out.
fn manual_candidate_id(family: &FamilyId) -> Option<CandidateId> {
    CandidateId::new(&identity::candidate_id(
        family.as_str(),
        MANUAL_CLAIM_TARGET,
    ))
    .ok()
}

fn book<'a>(forge: &'a Github, clock: &'a dyn Clock, owner: Uuid) -> ClaimBook<'a> {
    ClaimBook::new(forge, clock, Claimant::new(owner))
}

async fn list(forge: &Github, json: bool) -> Result<(), CliError> {
    let clock = forge.clock();
    let book = book(forge, &clock, Uuid::new_v4());
    let claims = book.list_claims().await.map_err(claim_error)?;
    let leases = book.list_recovery_leases().await.map_err(claim_error)?;
    let now = clock.now();
    let views: Vec<ClaimView> = claims
        .iter()
        .map(|e| ClaimView::new("claim", e, now))
        .chain(
            leases
                .iter()
                .map(|e| ClaimView::new("recovery-lease", e, now)),
        )
        .collect();
    if json {
        let out = serde_json::json!({ "repo": forge.repo(), "claims": views });
        let mut text = serde_json::to_string_pretty(&out).map_err(anyhow::Error::from)?;
        text.push('\n');
        super::emit(&text);
    } else {
        super::emit(&render_table(&forge.repo(), &views));
    }
    Ok(())
}

fn render_table(repo: &str, views: &[ClaimView]) -> String {
    if views.is_empty() {
        return format!("no claims in {repo}\n");
    }
    let header = [
        "FAMILY ID",
        "OWNER",
        "RUN-ID",
        "LEASE-UNTIL",
        "FENCE",
        "HOLDER",
        "STATE",
        "FAMILY",
    ];
    let dash = || "-".to_owned();
    let rows: Vec<[String; 8]> = views
        .iter()
        .map(|v| {
            // Recovery leases and malformed names are shown by ref name.
            let family_id = match (v.kind, &v.family_id) {
                ("claim", Some(id)) => id.clone(),
                _ => v.ref_name.trim_start_matches("refs/heads/").to_owned(),
            };
            if let Some(error) = &v.error {
                return [
                    family_id,
                    dash(),
                    dash(),
                    dash(),
                    dash(),
                    dash(),
                    "UNPARSABLE".to_owned(),
                    error.clone(),
                ];
            }
            let state = if v.manual {
                format!("{} (manual)", v.state)
            } else {
                v.state.to_owned()
            };
            [
                family_id,
                v.owner.clone().unwrap_or_else(dash),
                v.run_id.map_or_else(dash, |r| r.to_string()),
                v.lease_until.clone().unwrap_or_else(dash),
                v.fence.map_or_else(dash, |f| f.to_string()),
                v.holder.clone().unwrap_or_else(dash),
                state,
                v.candidates
                    .iter()
                    .map(|c| c.family.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            ]
        })
        .collect();
    let mut out = if super::output::table_width().is_none() {
        super::families::render_table(&header, &rows)
    } else {
        narrow_table(&rows)
    };
    let unparsable = views.iter().filter(|v| v.error.is_some()).count();
    if unparsable > 0 {
        let _ = writeln!(
            out,
            "{unparsable} claim ref(s) do not parse: planning stops until they are fixed or \
             deleted by hand (klaud claims release --force --reason TEXT)"
        );
    }
    out
}

/// The claims in 100 columns: the holder and the families (or the parse
/// error) go on a line of their own under their claim, and the owner, a
/// UUID, loses its middle (`--wide` and `--json` give it whole).
fn narrow_table(rows: &[[String; 8]]) -> String {
    use super::table::Fit;
    let rows: Vec<[String; 7]> = rows
        .iter()
        .map(|[id, owner, run, lease, fence, holder, state, family]| {
            let below = match holder.as_str() {
                "-" => family.clone(),
                holder => format!("{family} (held by {holder})"),
            };
            [
                id.clone(),
                owner.clone(),
                run.clone(),
                lease.clone(),
                fence.clone(),
                state.clone(),
                below,
            ]
        })
        .collect();
    super::output::table_fitted(
        &[
            "FAMILY ID",
            "OWNER",
            "RUN-ID",
            "LEASE-UNTIL",
            "FENCE",
            "STATE",
            "FAMILY",
        ],
        &[
            Fit::Keep,
            Fit::Elide,
            Fit::Keep,
            Fit::Keep,
            Fit::Keep,
            Fit::Keep,
            Fit::Below,
        ],
        &rows,
    )
}

/// Finds the master file of `family` at `base` and checks it has the key, so
/// a typo cannot claim a family that does not exist.
async fn check_family_exists(forge: &Github, family: &str, base: &str) -> Result<(), CliError> {
    let (path, key) = family
        .split_once(':')
        .ok_or_else(|| CliError::bad_input(anyhow!("{family:?} has no ':'")))?;
    // The project root is inferencex-e2e/ when the repository has it.
    let mut text = None;
    for candidate in [format!("inferencex-e2e/{path}"), path.to_owned()] {
        if let Some(bytes) = forge
            .get_contents(&candidate, base)
            .await
            .map_err(|e| github_error(e, "reading the master file"))?
        {
            text = Some((candidate, bytes));
            break;
        }
    }
    let Some((found_at, bytes)) = text else {
        return Err(CliError::bad_input(anyhow!(
            "--family {family:?}: {path} does not exist at {base}"
        )));
    };
    let text = String::from_utf8(bytes)
        .map_err(|_| CliError::bad_input(anyhow!("{found_at} at {base} is not UTF-8")))?;
    let confined = klaud_planner::yaml::parse_confined(&text)
        .map_err(|e| CliError::bad_input(anyhow!("{found_at} at {base}: {e}")))?;
    let in_root = confined.root.as_ref().and_then(|d| d.get(key)).is_some();
    if !in_root
        && !confined
            .broken
            .iter()
            .any(|b| b.key.as_deref() == Some(key))
    {
        return Err(CliError::bad_input(anyhow!(
            "--family {family:?}: {found_at} at {base} has no config key {key:?}; \
             `klaud families` lists the families"
        )));
    }
    Ok(())
}

#[derive(Debug, Serialize)]
struct AcquireOutput<'a> {
    result: &'static str,
    family: &'a str,
    #[serde(rename = "ref")]
    ref_name: String,
    owner: Option<String>,
    sha: Option<String>,
    run_id: Option<u64>,
    lease_until: Option<String>,
    fence: Option<u64>,
    base: Option<&'a str>,
    /// The claim that is in the way, when occupied.
    held_by: Option<ClaimView>,
}

async fn acquire(forge: &Github, args: AcquireRequest) -> Result<(), CliError> {
    // The claim record stores the family string: an id or a bare key is
    // looked up in the base branch's master configs.
    let (family, family_id) = match resolve_family(forge, &args.family).await? {
        FamilyArg::Name { family, id } => (family, id),
        other => {
            return Err(CliError::failure(anyhow!(
                "--family {other:?} did not resolve to a family string"
            )));
        }
    };
    let (family, family_id) = (&family, &family_id);
    let lease = &args.lease;
    let branch = forge
        .default_branch()
        .await
        .map_err(|e| github_error(e, "reading the default branch"))?;
    let base = forge
        .get_ref(&format!("refs/heads/{branch}"))
        .await
        .map_err(|e| github_error(e, "reading the default branch head"))?
        .ok_or_else(|| {
            CliError::failure(anyhow!("the default branch {branch:?} has no head commit"))
        })?;
    let base = klaud_claims::CommitSha::parse(&base).map_err(|e| {
        CliError::failure(anyhow!("the head of the default branch {branch:?}: {e}"))
    })?;
    check_family_exists(forge, family, &base).await?;

    let owner = Uuid::new_v4();
    let clock = forge.clock();
    let book = book(forge, &clock, owner);
    let candidate_id = manual_candidate_id(family_id).ok_or_else(|| {
        CliError::failure(anyhow!("cannot name the manual candidate of {family_id}"))
    })?;
    let candidate = ClaimCandidate::new(base.clone(), family.clone(), candidate_id);
    let outcome = book
        .acquire(family_id, vec![candidate], &base, args.run_id, *lease)
        .await
        .map_err(claim_error)?;
    match outcome {
        Acquire::Won(held) => {
            let record = &held.record;
            let out = AcquireOutput {
                result: "acquired",
                family,
                ref_name: held.ref_name.clone(),
                owner: Some(owner.to_string()),
                sha: Some(held.sha.clone()),
                run_id: Some(record.run_id),
                lease_until: record
                    .lease_until
                    .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
                fence: record.fence,
                base: Some(&base),
                held_by: None,
            };
            if args.json {
                emit_json(&out)?;
            } else {
                super::emit(&format!(
                    "acquired {} for {family}\nowner: {owner}\nrun-id: {}\nlease-until: {}\n\
                     fence: {}\nbase: {base} ({branch})\nrelease it with: klaud claims release \
                     --family {family} --owner {owner}\n",
                    held.ref_name,
                    record.run_id,
                    out.lease_until.as_deref().unwrap_or("none"),
                    record.fence_or_zero(),
                ));
            }
            Ok(())
        }
        Acquire::Occupied(entry) => {
            let view = ClaimView::new("claim", &entry, clock.now());
            let line = view.holder_line();
            if args.json {
                emit_json(&AcquireOutput {
                    result: "occupied",
                    family,
                    ref_name: view.ref_name.clone(),
                    owner: None,
                    sha: None,
                    run_id: None,
                    lease_until: None,
                    fence: None,
                    base: None,
                    held_by: Some(view),
                })?;
            } else {
                super::emit(&format!(
                    "occupied: {} for {family} is held: {line}\n",
                    family_id.claim_ref()
                ));
            }
            Err(held_by_other(anyhow!("{family} is occupied ({line})")))
        }
    }
}

#[derive(Debug, Serialize)]
struct ReleaseOutput {
    result: &'static str,
    #[serde(rename = "ref")]
    ref_name: String,
    forced: bool,
    released_by: String,
    /// The login of the token that did it.
    token_of: String,
    reason: Option<String>,
    previous: Option<ClaimView>,
    /// The claim's candidates, each ended with a receipt naming who and why.
    candidates: Vec<Recovered>,
}

impl ReleaseOutput {
    fn text(&self) -> String {
        let mut text = match self.result {
            "released" => format!(
                "released {} (by {}, token of {})",
                self.ref_name, self.released_by, self.token_of
            ),
            "unfinished" => format!(
                "took over {} (by {}, token of {}) but did not finish every candidate",
                self.ref_name, self.released_by, self.token_of
            ),
            _ => format!("no claim at {}: nothing to release", self.ref_name),
        };
        if self.forced {
            text.push_str(", forced");
        }
        if let Some(reason) = &self.reason {
            let _ = write!(text, "; reason: {}", clean(reason));
        }
        if let Some(previous) = &self.previous {
            let _ = write!(text, "\nprevious holder: {}", previous.holder_line());
        }
        for c in &self.candidates {
            let _ = write!(
                text,
                "\ncandidate {}: {} — {}",
                c.candidate,
                c.outcome.as_deref().unwrap_or("not finished"),
                clean(&c.message)
            );
        }
        text.push('\n');
        text
    }
}

async fn release(forge: &Github, config: &Config, args: ReleaseRequest) -> Result<(), CliError> {
    let clock = forge.clock();
    // Without --owner this run owns nothing; its uuid only fences what it
    // takes over on the way to releasing it.
    let owner = args.owner.unwrap_or_else(Uuid::new_v4);
    let book = book(forge, &clock, owner);
    let family_id = args.family.id().cloned().ok_or_else(|| {
        CliError::failure(anyhow!(
            "--family {:?} was not resolved to a family",
            args.family
        ))
    })?;
    let ref_name = family_id.claim_ref();
    let output = |result, previous, candidates| ReleaseOutput {
        result,
        ref_name: ref_name.clone(),
        forced: args.force,
        released_by: args.by.clone(),
        token_of: forge.bot_login().to_owned(),
        reason: args.reason.clone(),
        previous,
        candidates,
    };
    let emit = |out: ReleaseOutput| -> Result<(), CliError> {
        if args.json {
            return emit_json(&out);
        }
        super::emit(&out.text());
        Ok(())
    };

    let Some(entry) = book.inspect(&family_id).await.map_err(claim_error)? else {
        return emit(output("already-gone", None, Vec::new()));
    };
    let view = ClaimView::new("claim", &entry, clock.now());
    let record = match &entry.record {
        Ok(record) => record,
        Err(_) if args.force => return force_delete(&book, &entry, view, output, emit).await,
        Err(_) => {
            return Err(held_by_other(anyhow!(
                "refusing to release {ref_name}: {}; it has no candidates to finish, so it is \
                 only deleted by hand: pass --force --reason TEXT",
                view.holder_line()
            )));
        }
    };

    if args.owner.is_some() && record.owner == args.owner {
        // Same checks the daemon's release makes: owner, run, fence and
        // candidates must still be what we just read.
        let released = book
            .release_expected(&ref_name, record)
            .await
            .map_err(claim_error)?;
        let result = match released {
            Release::Released => "released",
            Release::AlreadyGone => "already-gone",
        };
        return emit(ReleaseOutput {
            forced: false,
            ..output(result, Some(view), Vec::new())
        });
    }
    if let Some(owner) = args.owner
        && !args.force
    {
        return Err(held_by_other(anyhow!(
            "refusing to release {ref_name}: {}; it is not owned by {owner}. To release it \
             anyway, pass --force --reason TEXT",
            view.holder_line()
        )));
    }
    // Checked before the base checkout below: a refusal costs no reads.
    if !args.force
        && let Some(until) = record.lease_until
        && until > clock.now()
    {
        return Err(held_by_other(anyhow!(
            "refusing to release {ref_name}: a live owner holds it ({}). Wait until the lease \
             runs out, or pass --force --reason TEXT",
            view.holder_line()
        )));
    }

    let who = klaud_service::pr_commands::no_mentions(&args.by);
    let why = klaud_service::pr_commands::no_mentions(args.reason.as_deref().unwrap_or(""));
    let note = format!("released by {who} with `klaud claims release`: {why}");
    let owner_run = crate::compose::owner_run();
    let engine_cfg = crate::compose::engine_config(config, owner_run);
    let runs = ForgeRunCompletion::new(forge);
    let ctx = RecoveryContext {
        book: &book,
        runs: &runs,
        owner_run,
        lease: engine_cfg.lease,
        now: clock.now(),
    };
    tracing::warn!(
        ref_name,
        by = args.by,
        reason = args.reason.as_deref().unwrap_or(""),
        previous = view.holder_line(),
        forced = args.force,
        "releasing another owner's claim"
    );
    let manual_only = record
        .candidates
        .iter()
        .all(|c| Some(&c.id) == manual_candidate_id(&c.id.family()).as_ref());
    let released = if manual_only {
        release_claim(&ctx, None, &family_id, args.force, &note).await
    } else {
        // Finishing the candidates needs the engine over the base branch.
        let parts = EngineParts::load(forge, config, engine_cfg.clone(), None).await?;
        let lifecycle = GithubLifecycle::new(forge);
        let journal = MemoryJournal::new();
        let engine = parts.engine(&lifecycle, &journal, &clock, book.claimant().clone());
        release_claim(&ctx, Some(&engine), &family_id, args.force, &note).await
    };
    match released {
        Ok(done) if done.claim_released => emit(output("released", Some(view), done.candidates)),
        Ok(done) => {
            emit(output("unfinished", Some(view), done.candidates))?;
            Err(CliError::failure(anyhow!(
                "{ref_name}: not every candidate finished, so the claim stays leased by this \
                 release; re-run it with --force, or let recovery finish it once the lease runs out"
            )))
        }
        Err(ReleaseRefused::Vacant(_)) => emit(output("already-gone", Some(view), Vec::new())),
        Err(ReleaseRefused::Claim(e)) => Err(claim_error(e)),
        Err(refused) => Err(held_by_other(anyhow!(refused))),
    }
}

/// Deletes a claim that does not parse (`--force` only): exactly the commit
/// shown, through [`klaud_claims::ClaimBook::force_delete`].
async fn force_delete(
    book: &klaud_claims::ClaimBook<'_>,
    entry: &ClaimEntry,
    view: ClaimView,
    output: impl Fn(&'static str, Option<ClaimView>, Vec<Recovered>) -> ReleaseOutput,
    emit: impl Fn(ReleaseOutput) -> Result<(), CliError>,
) -> Result<(), CliError> {
    let ref_name = entry.tip.name.as_str();
    tracing::warn!(
        ref_name,
        previous = view.holder_line(),
        "force-deleting an unparsable claim"
    );
    let result = match book.force_delete(&entry.tip).await {
        Ok(Release::Released) => "released",
        Ok(Release::AlreadyGone) => "already-gone",
        Err(ClaimError::Moved {
            expected, found, ..
        }) => {
            return Err(held_by_other(anyhow!(
                "{ref_name} moved from {expected} to {} while it was being released; nothing was \
                 deleted: look again (klaud claims list) and re-run",
                clean(&found)
            )));
        }
        Err(e) => return Err(CliError::failure(anyhow!(e))),
    };
    emit(output(result, Some(view), Vec::new()))
}

fn emit_json(value: &impl Serialize) -> Result<(), CliError> {
    let mut text = serde_json::to_string_pretty(value).map_err(anyhow::Error::from)?;
    text.push('\n');
    super::emit(&text);
    Ok(())
}

#[cfg(test)]
mod tests;
