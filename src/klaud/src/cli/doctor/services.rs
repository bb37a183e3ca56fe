//! The checks of what Klaud talks to beside GitHub: the image registries,
//! the results API the baseline is frozen from, the capacity source and
//! the local store.

use super::*;

pub(super) async fn check_registries(registry: RegistryConfig, repository: &Repository) -> Check {
    const NAME: &str = "registries";
    let hosts: BTreeSet<String> = repository
        .families()
        .iter()
        .map(|f| f.image().registry().to_owned())
        .collect();
    let registry = registry.with_env_credentials(hosts.iter().map(String::as_str));
    let via = |host: &str| {
        registry
            .mirrors
            .get(host)
            .map(|u| format!(" via {u}"))
            .unwrap_or_default()
    };
    let described: Vec<(String, String)> = hosts.iter().map(|h| (h.clone(), via(h))).collect();
    let client = match RegistryClient::new(registry) {
        Ok(c) => c,
        Err(e) => return Check::fail(NAME, e.to_string()),
    };
    let answers = futures::future::join_all(
        described
            .iter()
            .map(|(host, _)| client.check_api_base(host)),
    )
    .await;
    let mut good = Vec::new();
    let mut bad = Vec::new();
    for ((host, via), answer) in described.iter().zip(answers) {
        match answer {
            Ok(ApiBase::Open) => good.push(format!("{host}{via} (anonymous)")),
            Ok(ApiBase::Challenge(Challenge::Bearer { .. })) => {
                good.push(format!("{host}{via} (token auth)"))
            }
            Ok(ApiBase::Challenge(Challenge::Basic)) => {
                good.push(format!("{host}{via} (basic auth)"))
            }
            Err(e) => bad.push(format!("{host}{via}: {e}")),
        }
    }
    // Docker Hub counts every manifest GET as a pull, per account or, for
    // anonymous pulls, per IP address (shared by every job on a hosted
    // runner's address): what the plan can spend there is the budget.
    if hosts.contains(klaud_planner::image::DOCKER_HUB) {
        good.push(if client.config().credentials.contains_key(klaud_planner::image::DOCKER_HUB) {
            "Docker Hub pulls with credentials (a personal account: 100 pulls per hour)".to_owned()
        } else {
            "Docker Hub pulls anonymously: 10 pulls per hour per IP address, shared by every job on a hosted runner; set [registry.credentials.\"docker.io\"] for 100 per hour".to_owned()
        });
    }
    if bad.is_empty() {
        Check::ok(NAME, format!("answering: {}", good.join(", ")))
    } else {
        Check::fail(
            NAME,
            format!(
                "{}; check the network, or point the host at a mirror (--mirror / [registry.mirrors]){}",
                bad.join("; "),
                if good.is_empty() {
                    String::new()
                } else {
                    format!(" (answering: {})", good.join(", "))
                }
            ),
        )
    }
}

pub(super) async fn check_baseline(
    base: &str,
    repository: Option<&Repository>,
    overrides: &std::collections::BTreeMap<String, String>,
) -> Check {
    const NAME: &str = "baseline";
    use klaud_lifecycle::baseline::{BaselineSource, parse_workflow_info};
    if base.trim().is_empty() {
        return Check::warn(
            NAME,
            "not checked: lifecycle.baseline_api is empty, so every baseline point of a report \
             will be N/A and lifecycle.require_baseline gates nothing; set it to the results API",
        );
    }
    let source = match HttpBaselineSource::new(base) {
        Ok(s) => s,
        Err(e) => return Check::fail(NAME, e.to_string()),
    };
    let today = chrono::Utc::now().date_naive();
    let fetched = match source.workflow_info(today).await {
        Ok(f) => f,
        Err(e) => {
            return Check::fail(NAME, format!("{e}; check lifecycle.baseline_api"));
        }
    };
    let answers = match parse_workflow_info(&fetched) {
        Ok(info) => format!(
            "{} answers workflow-info for {today}: {} run(s), {} config(s)",
            base.trim_end_matches('/'),
            info.runs.len(),
            info.configs.len()
        ),
        Err(e) => {
            return Check::fail(
                NAME,
                format!("{e}; is lifecycle.baseline_api the results API?"),
            );
        }
    };
    let Some(repository) = repository else {
        return Check::ok(NAME, answers);
    };
    let (names, problems) = model_name_lines(&source, repository, overrides).await;
    let detail = format!("{answers}; model names: {}", names.join(", "));
    if problems == 0 {
        Check::ok(NAME, detail)
    } else {
        Check::warn(
            NAME,
            format!(
                "{detail}; {problems} model prefix(es) have no display name the results API \
                 knows, so their families are readiness-blocked (baseline-model-unknown)"
            ),
        )
    }
}

/// Every model prefix of the repository with the display name the results
/// API knows it by (or the override), or the problem; and how many have a
/// problem.
async fn model_name_lines(
    source: &HttpBaselineSource,
    repository: &Repository,
    overrides: &std::collections::BTreeMap<String, String>,
) -> (Vec<String>, usize) {
    use klaud_lifecycle::baseline::BaselineSource;
    let prefixes: BTreeSet<&str> = repository
        .families()
        .iter()
        .map(|f| f.entry.model_prefix.as_str())
        .collect();
    let mut lines = Vec::new();
    let mut problems = 0;
    for prefix in prefixes {
        if let Some(name) = overrides.get(prefix) {
            lines.push(format!("{prefix} = {name:?} (configured)"));
            continue;
        }
        match source.display_name(prefix).await {
            Ok(Some(name)) => lines.push(format!("{prefix} = {name:?}")),
            Ok(None) => {
                problems += 1;
                lines.push(format!(
                    "{prefix}: unknown to the API; set [lifecycle.model_names] {prefix:?} = \"<display name>\""
                ));
            }
            Err(e) => {
                problems += 1;
                lines.push(format!("{prefix}: {e}"));
            }
        }
    }
    (lines, problems)
}

/// Reads the cluster-status API once, when `[capacity]` is configured, and
/// says whether every family's clusters are in the answer.
pub(super) async fn check_capacity(
    capacity: Option<&crate::config::CapacityConfig>,
    repository: Option<&Repository>,
) -> Check {
    const NAME: &str = "capacity";
    let Some(c) = capacity else {
        return Check::ok(
            NAME,
            "not configured ([capacity] is absent): no capacity gate, so smoke runs and \
             sweeps are dispatched whatever the clusters' load",
        );
    };
    let gate = match c.gate_from(|n| std::env::var(n)) {
        Ok(g) => g,
        Err(e) => return Check::fail(NAME, e.to_string()),
    };
    let report = match gate.source.read(chrono::Utc::now()).await {
        Ok(r) => r,
        Err(e) => {
            return Check::fail(
                NAME,
                format!("{e}; every candidate would be deferred (capacity.origin, capacity.path)"),
            );
        }
    };
    let eligible = report
        .clusters
        .iter()
        .filter(|c| c.ineligible().is_none())
        .count();
    let mut detail = format!(
        "{} answers: {} cluster(s), {eligible} with room",
        gate.source.describe(),
        report.clusters.len()
    );
    let Some(repository) = repository else {
        return Check::ok(NAME, detail);
    };
    let mut missing = BTreeSet::new();
    for f in repository.families() {
        match gate.clusters_of(repository, f) {
            Ok(wanted) if klaud_planner::capacity::matching(&report, &wanted).is_empty() => {
                missing.insert(format!("{} ({})", f.entry.runner, wanted.join(", ")));
            }
            Ok(_) => {}
            Err(e) => {
                missing.insert(e.to_string());
            }
        }
    }
    if missing.is_empty() {
        return Check::ok(NAME, detail);
    }
    detail.push_str(&format!(
        "; families of these runners would always be deferred (no matching cluster; set          [capacity.clusters]): {}",
        missing.into_iter().collect::<Vec<_>>().join("; ")
    ));
    Check::warn(NAME, detail)
}

/// sled 0.34.7 has no read-only mode, so a store that does not exist yet is
/// never opened (opening would create it), and an existing one is opened
/// and dropped without a Klaud write (its format marker is only read; sled
/// may still tidy its own log files while opening, which changes no
/// record). Being held by a running daemon is normal, so that is a warning.
pub(super) fn check_store(path: &Path) -> Check {
    const NAME: &str = "store";
    let shown = path.display();
    if !path.exists() {
        // The first run creates the directory: its nearest existing
        // ancestor must be a directory.
        let ancestor = path.ancestors().skip(1).find(|a| a.exists());
        return match ancestor {
            Some(a) if !a.as_os_str().is_empty() && !a.is_dir() => Check::fail(
                NAME,
                format!(
                    "{shown} cannot be created: {} is not a directory; set daemon.store or --store",
                    a.display()
                ),
            ),
            _ => Check::ok(
                NAME,
                format!("no store at {shown} yet; the first run creates it"),
            ),
        };
    }
    if !path.is_dir() {
        return Check::fail(
            NAME,
            format!("{shown} is not a directory; set daemon.store or --store to a directory"),
        );
    }
    // sled writes `conf` when it creates a store.
    if !path.join("conf").exists() {
        return Check::ok(
            NAME,
            format!("{shown} exists but holds no store yet; the first run creates it there"),
        );
    }
    match Store::open(path) {
        Ok(store) => match store.stats() {
            Ok(stats) => {
                let n = |t: &str| stats.records.get(t).copied().unwrap_or(0);
                Check::ok(
                    NAME,
                    format!(
                        "{shown} opens: {} candidate(s), {} outcome(s), {} KiB on disk",
                        n(trees::CANDIDATES),
                        n(trees::OUTCOMES),
                        stats.size_on_disk / 1024
                    ),
                )
            }
            Err(e) => Check::fail(NAME, e.to_string()),
        },
        Err(StoreError::Locked { .. }) => Check::warn(
            NAME,
            format!(
                "{shown} is held by a running Klaud (sled allows one process per store), so it \
                 was not opened; fine beside a daemon — give any other instance its own store"
            ),
        ),
        Err(e) => Check::fail(NAME, e.to_string()),
    }
}
