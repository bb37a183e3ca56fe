//! `klaud plan`: a dry run — which families are stale, what would replace
//! their images, and why. Asks the registries; changes nothing anywhere.

use std::io::IsTerminal;
use std::path::PathBuf;

use klaud_planner::plan::{PlanOptions, PlanReport, plan};
use klaud_planner::registry::{BasicCredentials, RegistryClient, RegistryConfig};
use klaud_planner::repo::Repository;

use super::CliError;
use crate::config::Config;
use klaud_github::Credential;
use klaud_github::upstream::GithubUpstream;

/// Arguments of `klaud plan`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    checkout: super::LocalCheckout,
    /// Configuration file (`klaud.toml`); defaults apply without one.
    #[arg(long, value_name = "FILE", env = "KLAUD_CONFIG")]
    config: Option<PathBuf>,
    /// Use another base URL for a registry host, e.g. `docker.io=http://127.0.0.1:5000`
    /// (repeatable; adds to and overrides `[registry.mirrors]`).
    #[arg(long = "mirror", value_name = "HOST=URL")]
    mirrors: Vec<String>,
    /// At most this many candidates (overrides `planner.max_candidates`).
    #[arg(long, value_name = "N")]
    max: Option<usize>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Also print requests by kind next to the minimum, wall time and peak memory.
    #[arg(long)]
    stats: bool,
    /// Exit 0 even when some families could not be resolved (registry
    /// errors, unreadable master entries); by default that fails a CI gate.
    #[arg(long, visible_alias = "allow-unreadable")]
    allow_unresolved: bool,
    /// GitHub App credentials for the upstream proof (instead of a token).
    #[command(flatten)]
    auth: crate::auth::AuthArgs,
    /// The local store that keeps registry content (manifests and configs
    /// by digest, tag lists with their validators) between plans, as the
    /// daemon does; default: the configuration's `daemon.store` when it
    /// exists, else none (every plan cold).
    #[arg(long, value_name = "PATH", env = "KLAUD_STORE")]
    store: Option<PathBuf>,
}

/// Runs the command.
pub fn run(args: Args) -> Result<(), CliError> {
    let mut config = super::load_config(args.config.as_deref(), args.checkout.path()?)?;
    args.auth.apply(&mut config.github);
    let repository = Repository::open_with(args.checkout.path()?, &config.repo_options())?;
    // Credentials may also come from KLAUD_REGISTRY_<HOST>_USERNAME/_PASSWORD
    // for any registry the repository's images live on.
    let hosts: std::collections::BTreeSet<String> = repository
        .families()
        .iter()
        .map(|f| f.image().registry().to_owned())
        .collect();
    let registry = registry_config(&config, &args.mirrors)?
        .with_env_credentials(hosts.iter().map(String::as_str));
    let rules = config.track_rules().map_err(CliError::bad_input)?;
    let release_rules = config.release_rules().map_err(CliError::bad_input)?;
    // The upstream proof for nightly → release moves needs a GitHub token;
    // without one such moves are skipped, with the reason in the plan.
    let client = RegistryClient::new(registry).map_err(CliError::bad_input)?;
    let store = plan_store(&args, &config);
    if let Some(store) = &store {
        klaud_service::restore_breaker(&client, store);
    }

    let runtime = super::runtime()?;
    let auth = crate::auth::Auth::from_config(&config.github, |name| std::env::var(name))
        .map_err(|e| CliError::bad_input(anyhow::anyhow!(e)))?;
    let credential = match (auth, &config.github.repository) {
        (None, _) => {
            // Without a token only the upstream proof is skipped (the
            // plan says so per family), but a token meant for Klaud in a
            // variable it does not read deserves a word.
            if let Some(hint) = config.github.unread_token_hint(|name| std::env::var(name)) {
                eprintln!("hint: {hint}");
            }
            None
        }
        (Some(crate::auth::Auth::Token { token, .. }), _) => Some(Credential::Token(token)),
        // An App's installation is found through the repository it is on.
        (Some(app), Some(repo)) => Some(
            runtime
                .block_on(app.credential(&config.github.api_url, repo))
                .map_err(|e| super::github_failure(e, "GitHub App credential"))?,
        ),
        (Some(_), None) => {
            tracing::warn!(
                "a GitHub App is configured but no github.repository to find its installation \
                 on; the upstream proof of nightly-to-release moves is skipped"
            );
            None
        }
    };
    let upstream =
        credential.map(|credential| GithubUpstream::new(&config.github.api_url, credential));
    let bar = progress_bar(repository.families().len(), args.json);
    let progress = |done: usize, _total: usize| {
        if let Some(bar) = &bar {
            bar.set_position(done as u64);
        }
    };
    let mut options = PlanOptions::new(chrono::Utc::now());
    options.min_age = config.planner.min_age;
    options.max_candidates = args.max.unwrap_or(config.planner.max_candidates);
    options.rules = rules;
    options.release_rules = release_rules;
    options.compare = upstream
        .as_ref()
        .map(|u| u as &dyn klaud_planner::plan::UpstreamCompare);
    options.upstream = config.upstream.clone();
    options.max_timed_tags = config.registry.max_timed_tags;
    // The configuration's ignore rules (the dashboard's live on GitHub and
    // join them in a wave); each ignored family's reason is in the table.
    let config_rules = config.ignore_rules().map_err(CliError::bad_input)?;
    options.ignore = klaud_service::dashboard_issue::rules_in_force(&config_rules, None, &[]);
    options.progress = Some(&progress);
    options.creation_times = store
        .as_ref()
        .map(|s| s as &dyn klaud_planner::plan::CreationTimes);
    let mut report =
        runtime.block_on(async { plan(&repository, &client.session(), &options).await });
    if let Some(store) = &store
        && let Err(e) = store.save_breaker(&client.breaker_state())
    {
        tracing::warn!(error = %e, "registry breaker not saved");
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    if config.lifecycle.require_baseline {
        let source = crate::compose::baseline(&config, None)?;
        runtime.block_on(block_unready(
            &repository,
            source.as_ref(),
            &config.lifecycle.model_names,
            &mut report,
        ));
    }

    if args.json {
        // Groups come from the repository, not the registry plan: added
        // beside the report's own fields.
        let mut value = serde_json::to_value(&report).map_err(anyhow::Error::from)?;
        if let Some(object) = value.as_object_mut() {
            object.insert(
                "groups".to_owned(),
                serde_json::to_value(repository.groups()).map_err(anyhow::Error::from)?,
            );
        }
        let mut text = serde_json::to_string_pretty(&value).map_err(anyhow::Error::from)?;
        text.push('\n');
        super::emit(&text);
    } else if super::output::quiet() {
        // The verdict without the long part: no row per family, no groups.
        super::emit(render_candidates(&report).trim_start_matches('\n'));
    } else {
        let mut text = render(&report);
        text.push_str(&super::families::render_groups(&repository));
        super::emit(&text);
    }
    if args.stats {
        eprint!("{}", stats(&report));
    }
    match unresolved(&report).map(|summary| {
        // Each unreadable family (or file) by name, not only a count.
        match super::families::unreadable_summary(repository.unreadable()) {
            Some(names) => format!("{summary}; {names}"),
            None => summary,
        }
    }) {
        Some(summary) if args.allow_unresolved => {
            eprintln!("warning: {summary} (tolerated by --allow-unresolved)");
            Ok(())
        }
        // Not the input's fault as a rule (a registry down, a token
        // missing): exit 1, after the table so the reasons are on screen.
        Some(summary) => Err(CliError::failure(anyhow::anyhow!(
            "{summary}; {} (--allow-unresolved accepts this)",
            if super::output::quiet() {
                "the plan without --quiet gives their reasons"
            } else {
                "their reasons are in the plan above"
            }
        ))),
        None => Ok(()),
    }
}

/// The store a plan keeps registry content in: `--store`, else the
/// deployment's (`daemon.store` of the configuration given) when a daemon
/// or wave already made it; a plan never leaves a new store in whatever
/// directory it runs from unasked. Only a saving: one that cannot be opened
/// (a running daemon holds it) leaves the plan cold, with a warning.
fn plan_store(args: &Args, config: &Config) -> Option<klaud_store::Store> {
    let path = match (&args.store, &args.config) {
        (Some(path), _) => path.clone(),
        (None, Some(_)) => {
            let path = PathBuf::from(&config.daemon.store);
            if !path.is_dir() {
                return None;
            }
            path
        }
        (None, None) => return None,
    };
    match klaud_store::Store::open(&path) {
        Ok(store) => Some(store),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "store not opened; this plan keeps no registry content");
            None
        }
    }
}

/// `N of M families could not be resolved`, when any could not: a
/// registry error, or a master entry that could not be read.
fn unresolved(report: &PlanReport) -> Option<String> {
    let errors = report
        .families
        .iter()
        .filter(|f| f.status == klaud_planner::plan::Status::Error)
        .count();
    let unreadable = report.unreadable.len();
    if errors + unreadable == 0 {
        return None;
    }
    let total = report.families.len() + unreadable;
    let mut parts = Vec::new();
    if errors > 0 {
        parts.push(format!("{errors} with a registry error"));
    }
    if unreadable > 0 {
        parts.push(format!("{unreadable} unreadable"));
    }
    Some(format!(
        "{} of {total} families could not be resolved ({})",
        errors + unreadable,
        parts.join(", ")
    ))
}

/// What a wave decides before it claims (see configs/README.md#baseline-readiness-lifecycle-require_baseline): a chosen candidate
/// whose family has no complete published baseline is readiness-blocked,
/// with the reason, and no longer a candidate. (A wave gives its slot to
/// the next stale family; this preview does not re-plan.)
async fn block_unready(
    repository: &Repository,
    source: &dyn klaud_lifecycle::baseline::BaselineSource,
    model_names: &std::collections::BTreeMap<String, String>,
    report: &mut klaud_planner::plan::PlanReport,
) {
    use klaud_lifecycle::baseline::{baseline_of, readiness_gap};
    use klaud_planner::plan::{BlockKind, Blocked};
    if !source.configured() {
        return;
    }
    let today = chrono::Utc::now().date_naive();
    let mut unready = std::collections::BTreeMap::new();
    for c in &report.candidates {
        let Ok(family) = repository.family(&c.family) else {
            continue;
        };
        let current = family.image().to_string();
        let baseline = baseline_of(source, family, model_names, &current, today).await;
        if let Some(gap) = readiness_gap(&baseline) {
            unready.insert(c.family.clone(), gap);
        }
    }
    report
        .candidates
        .retain(|c| !unready.contains_key(&c.family));
    for f in report.families.iter_mut() {
        if let Some(gap) = unready.remove(&f.family) {
            f.reasons.insert(0, gap.clone());
            f.blocked = Some(Blocked {
                kind: BlockKind::ReadinessBlocked,
                reason: gap,
                pull: None,
                author: None,
            });
        }
    }
}

/// The registry client's settings from the configuration and `--mirror` flags.
pub fn registry_config(config: &Config, flags: &[String]) -> Result<RegistryConfig, CliError> {
    let mut registry = RegistryConfig {
        timeout: config.registry.timeout,
        concurrency: config.registry.concurrency,
        max_retries: config.registry.max_retries,
        max_tag_pages: config.registry.max_tag_pages,
        breaker_cooldown: config.registry.breaker_cooldown,
        ..RegistryConfig::default()
    };
    for (host, base) in &config.registry.hub_api {
        let parsed = url::Url::parse(base).map_err(|e| {
            CliError::bad_input(anyhow::anyhow!(
                "registry.hub_api.{host}: {base:?} is not a URL: {e}"
            ))
        })?;
        registry.hub_api.insert(host.clone(), parsed);
    }
    let mut mirrors: Vec<(String, String)> = config.registry.mirrors.clone().into_iter().collect();
    for flag in flags {
        let (host, url) = flag.split_once('=').ok_or_else(|| {
            CliError::bad_input(anyhow::anyhow!("--mirror {flag:?}: write it as HOST=URL"))
        })?;
        mirrors.push((host.trim().to_owned(), url.trim().to_owned()));
    }
    for (host, url) in mirrors {
        let parsed = url::Url::parse(&url).map_err(|e| {
            CliError::bad_input(anyhow::anyhow!(
                "mirror for {host}: {url:?} is not a URL: {e}"
            ))
        })?;
        registry.mirrors.insert(host, parsed);
    }
    for (host, names) in &config.registry.credentials {
        let read = |name: &str| {
            std::env::var(name).map_err(|_| {
                CliError::bad_input(anyhow::anyhow!(
                    "registry.credentials.{host}: environment variable {name} is not set"
                ))
            })
        };
        registry.credentials.insert(
            host.clone(),
            BasicCredentials {
                username: read(&names.username_env)?,
                password: read(&names.password_env)?,
            },
        );
    }
    Ok(registry)
}

fn progress_bar(total: usize, json: bool) -> Option<indicatif::ProgressBar> {
    if json || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("planning {bar:30} {pos}/{len} families")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    Some(bar)
}

/// The table: one row per family, then the chosen candidates.
fn render(report: &PlanReport) -> String {
    let rows: Vec<[String; 6]> = report
        .families
        .iter()
        .map(|f| {
            [
                f.family.clone(),
                match &f.blocked {
                    Some(b) => b.kind.as_str().to_owned(),
                    None => serde_json::to_value(f.status)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default(),
                },
                f.current.clone(),
                f.candidate
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), |c| candidate_cell(&f.current, c)),
                f.clock
                    .and_then(|c| serde_json::to_value(c).ok())
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_else(|| "-".to_owned()),
                f.reasons.join("; "),
            ]
        })
        .collect();
    use super::table::Fit;
    let mut out = super::output::table_fitted(
        &[
            "FAMILY",
            "STATUS",
            "CURRENT",
            "CANDIDATE",
            "CLOCK",
            "REASONS",
        ],
        &[
            Fit::Tail,
            Fit::Keep,
            Fit::Elide,
            Fit::Elide,
            Fit::Elide,
            Fit::Below,
        ],
        &rows,
    );
    out.push_str(&render_candidates(report));
    out
}

/// The candidate as the table shows it: in a fitted table only what
/// changes (`:tag`) when the repository stays the same, since the row
/// already shows it under CURRENT; the whole pinned reference with
/// `--wide` (and in the candidates' list under the table).
fn candidate_cell(current: &str, candidate: &klaud_planner::plan::Candidate) -> String {
    let same_repository = klaud_planner::image::ImageRef::parse(current)
        .is_ok_and(|c| c.normalized_repository() == candidate.image.normalized_repository());
    if same_repository && super::output::table_width().is_some() {
        format!(":{}", candidate.tag)
    } else {
        candidate.image.to_string()
    }
}

/// What follows the table, and all `--quiet` prints: the plan-wide notes,
/// the families not planned, and the candidates.
fn render_candidates(report: &PlanReport) -> String {
    let mut out = String::new();
    // Plan-wide facts (an unreachable registry host) are said once here;
    // the families it affects only point to them.
    let mut said = std::collections::BTreeSet::new();
    for note in report.notes.iter().filter(|n| said.insert(n.as_str())) {
        out.push_str(&format!("\nnote: {note}"));
    }
    if !said.is_empty() {
        out.push('\n');
    }
    // Unreadable families are not in the table: each is named with the
    // file and line to fix.
    for broken in &report.unreadable {
        out.push_str(&format!("\nnot planned: {broken}"));
    }
    if !report.unreadable.is_empty() {
        out.push('\n');
    }
    out.push_str(&format!(
        "\n{} candidate(s) for this wave:\n",
        report.candidates.len()
    ));
    for candidate in &report.candidates {
        out.push_str(&format!(
            "  {}  {}  {}\n",
            candidate.id, candidate.family, candidate.image
        ));
        if candidate.members.len() > 1 {
            let keys: Vec<&str> = candidate
                .members
                .iter()
                .map(|m| m.rsplit_once(':').map_or(m.as_str(), |(_, key)| key))
                .collect();
            out.push_str(&format!("    with its group: {}\n", keys.join(" + ")));
        }
    }
    out
}

/// Requests by kind next to the floor (what any correct plan of the same
/// scenario must read, computed from the scenario alone: see
/// `klaud_planner::floor`), wall time and peak memory.
pub fn stats(report: &PlanReport) -> String {
    let r = &report.requests;
    let f = &report.floor;
    let rows = [
        ("manifest_head", r.manifest_head, Some(f.manifest_head)),
        ("manifest_get", r.manifest_get, Some(f.manifest_get)),
        ("blob_get", r.blob_get, Some(f.blob_get)),
        ("tags_list", r.tags_list, Some(f.tags_list)),
        ("token", r.token, None),
        ("hub_api", r.hub_api, Some(f.hub_api)),
        ("other", r.other, None),
    ];
    let mut out = String::from("requests        made    floor\n");
    for (name, made, floor) in rows {
        let floor = floor.map_or_else(|| "-".to_owned(), |m| m.to_string());
        out.push_str(&format!("{name:<14} {made:>5}  {floor:>7}\n"));
    }
    out.push_str(&format!(
        "{:<14} {:>5}  {:>7}  ({:.2}x the floor)\n",
        "total",
        r.total(),
        f.total(),
        r.total() as f64 / f.total().max(1) as f64
    ));
    out.push_str(&render_hosts(&hosts(report)));
    for (host, q) in &report.quotas {
        out.push_str(&format!(
            "pull quota     {host}: {} of {} left per {} h\n",
            q.remaining,
            q.limit,
            q.window_secs.div_ceil(3600)
        ));
    }
    out.push_str(&format!("wall time      {} ms\n", report.elapsed_ms));
    if let Some(peak) = peak_memory_kib() {
        out.push_str(&format!("peak memory    {:.1} MiB\n", peak as f64 / 1024.0));
    }
    out
}

/// One registry host's figures in a plan: its pulls and requests next to
/// the floor, and the candidate tags proposed from it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HostFigures {
    /// The registry host as image references name it.
    pub host: String,
    /// Manifest `GET`s: what Docker Hub counts as pulls.
    pub pulls: u64,
    /// Distinct candidate tags proposed from the host.
    pub candidates: usize,
    /// Distinct images proposed: candidate tags by platform (a tag proposed
    /// to an amd64 and an arm64 family is two images behind one index).
    pub proposals: usize,
    /// Every request to the host.
    pub requests: u64,
    /// The fewest any correct plan of the same scenario makes
    /// ([`PlanReport::floor_by_host`]).
    pub floor: u64,
}

/// [`HostFigures`] of every host the plan asked or needed.
pub fn hosts(report: &PlanReport) -> Vec<HostFigures> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut proposed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut images: BTreeMap<String, BTreeSet<(String, String)>> = BTreeMap::new();
    for family in &report.families {
        if let Some(c) = &family.candidate {
            let tag = format!("{}:{}", c.image.normalized_repository(), c.tag);
            let host = c.image.registry().to_owned();
            images
                .entry(host.clone())
                .or_default()
                .insert((tag.clone(), family.architecture.to_owned()));
            proposed.entry(host).or_default().insert(tag);
        }
    }
    let mut names: BTreeSet<&String> = report.requests_by_host.keys().collect();
    names.extend(report.floor_by_host.keys());
    names
        .into_iter()
        .map(|host| {
            let made = report
                .requests_by_host
                .get(host)
                .copied()
                .unwrap_or_default();
            HostFigures {
                host: host.clone(),
                pulls: made.manifest_get,
                candidates: proposed.get(host).map_or(0, BTreeSet::len),
                proposals: images.get(host).map_or(0, BTreeSet::len),
                requests: made.total(),
                floor: report.floor_by_host.get(host).map_or(0, |m| m.total()),
            }
        })
        .collect()
}

/// The per-host table; Docker Hub, whose manifest `GET`s are pulls counted
/// against a small hourly quota, with its target: at most 2 pulls per
/// proposed image (its index and its platform's manifest).
pub fn render_hosts(hosts: &[HostFigures]) -> String {
    let mut out = format!(
        "{:<14} {:>5}  {:>10}  {:>8}  {:>7}  pull target\n",
        "registry host", "pulls", "candidates", "requests", "floor"
    );
    for h in hosts {
        let target = if h.host == "docker.io" {
            let bound = 2 * h.proposals as u64;
            let verdict = if h.pulls <= bound { "met" } else { "MISSED" };
            format!("<= 2 x {} images = {bound}, {verdict}", h.proposals)
        } else {
            "no pull quota".to_owned()
        };
        out.push_str(&format!(
            "{:<14} {:>5}  {:>10}  {:>8}  {:>7}  {target}\n",
            h.host, h.pulls, h.candidates, h.requests, h.floor
        ));
    }
    out
}

/// Peak resident memory of this process (Linux `VmHWM`).
pub fn peak_memory_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_says_each_plan_note_once() {
        let mut report = PlanReport::empty();
        let note = "registry host hub.docker.com unreachable since 2026-12-01T10:00:00Z (dns error); \
                    not asked again before 2026-12-01T10:15:00Z, families that need it say so";
        report.notes = vec![note.to_owned(), note.to_owned()];
        let text = render(&report);
        assert_eq!(text.matches(note).count(), 1, "{text}");
        assert!(text.contains(&format!("note: {note}\n")), "{text}");
        assert!(!render(&PlanReport::empty()).contains("note:"));
    }

    #[test]
    fn an_empty_plan_has_nothing_unresolved() {
        assert_eq!(unresolved(&PlanReport::empty()), None);
    }
}
