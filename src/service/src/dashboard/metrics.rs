//! `/metrics`: the snapshot in Prometheus text format.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::StatusSnapshot;

/// Escapes a label value (backslash, quote, newline).
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Renders the metrics.
pub fn render(snapshot: &StatusSnapshot) -> String {
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, samples: Vec<(String, u64)>| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, value) in samples {
            if labels.is_empty() {
                let _ = writeln!(out, "{name} {value}");
            } else {
                let _ = writeln!(out, "{name}{{{labels}}} {value}");
            }
        }
    };
    metric(
        "klaud_waves_total",
        "counter",
        "Planner waves run since start.",
        vec![(String::new(), snapshot.waves_total)],
    );

    let mut candidates: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut outcomes: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut families: BTreeMap<(String, String), u64> = BTreeMap::new();
    for repository in &snapshot.repositories {
        for candidate in repository.candidates.iter().filter(|c| c.outcome.is_none()) {
            *candidates
                .entry((repository.name.clone(), candidate.state.clone()))
                .or_default() += 1;
        }
        for outcome in &repository.outcomes {
            *outcomes
                .entry((repository.name.clone(), outcome.outcome.clone()))
                .or_default() += 1;
        }
        for family in &repository.families {
            *families
                .entry((repository.name.clone(), family.status.clone()))
                .or_default() += 1;
        }
    }
    let by = |map: BTreeMap<(String, String), u64>, key: &str| -> Vec<(String, u64)> {
        map.into_iter()
            .map(|((repository, value), count)| {
                (
                    format!(
                        "repository=\"{}\",{key}=\"{}\"",
                        label(&repository),
                        label(&value)
                    ),
                    count,
                )
            })
            .collect()
    };
    metric(
        "klaud_candidates",
        "gauge",
        "Active candidates by state.",
        by(candidates, "state"),
    );
    metric(
        "klaud_outcomes_recent",
        "gauge",
        "Recent outcomes shown on the dashboard, by outcome.",
        by(outcomes, "outcome"),
    );
    metric(
        "klaud_families",
        "gauge",
        "Families by staleness in the latest plan.",
        by(families, "status"),
    );

    let r = snapshot.registry_requests;
    metric(
        "klaud_registry_requests_total",
        "counter",
        "Registry requests by kind.",
        [
            ("manifest_head", r.manifest_head),
            ("manifest_get", r.manifest_get),
            ("blob_get", r.blob_get),
            ("tags_list", r.tags_list),
            ("token", r.token),
            ("hub_api", r.hub_api),
            ("other", r.other),
        ]
        .into_iter()
        .map(|(kind, value)| (format!("kind=\"{kind}\""), value))
        .collect(),
    );
    metric(
        "klaud_github_rate_limit_remaining",
        "gauge",
        "GitHub requests left in the current rate-limit window.",
        snapshot
            .github_budget
            .iter()
            .map(|b| (format!("resource=\"{}\"", label(&b.resource)), b.remaining))
            .collect(),
    );
    metric(
        "klaud_github_secondary_limit_paused_until_seconds",
        "gauge",
        "Unix time until which GitHub's secondary rate limit holds this repository's requests back.",
        snapshot
            .github_pauses
            .iter()
            .map(|p| {
                (
                    format!("repository=\"{}\"", label(&p.repository)),
                    p.until
                        .map_or(0, |t| u64::try_from(t.timestamp()).unwrap_or(0)),
                )
            })
            .collect(),
    );
    metric(
        "klaud_github_rate_limit",
        "gauge",
        "GitHub rate limit of the current window.",
        snapshot
            .github_budget
            .iter()
            .map(|b| (format!("resource=\"{}\"", label(&b.resource)), b.limit))
            .collect(),
    );
    out
}
