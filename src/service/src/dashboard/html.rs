//! The dashboard page: plain server-rendered HTML with inline CSS, readable
//! at 1280×800 and at phone width, no scripts. Built with maud, which
//! escapes every interpolated value; only the constant style sheet is
//! inserted as is.

use chrono::{DateTime, Utc};
use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::{
    BudgetSample, CandidateRow, ClaimRow, ExperimentRow, FamilyRow, LinkRow, OutcomeRow,
    RepositoryStatus, StatusSnapshot, short_image,
};

/// A name (family, image, candidate) that may wrap after a path separator
/// (`/`, `:`, `@`) and nowhere else: `break-all` would cut `sglang` into
/// `sgl` and `ang` to fit a column, and a browser would break a key such
/// as `dsr1-fp4-b200-sglang` at its hyphens.
fn name(text: &str) -> Markup {
    let mut parts = Vec::new();
    let mut start = 0;
    for (i, c) in text.char_indices() {
        if matches!(c, '/' | ':' | '@') {
            parts.push(&text[start..i + c.len_utf8()]);
            start = i + c.len_utf8();
        }
    }
    parts.push(&text[start..]);
    html! {
        @for (i, part) in parts.iter().enumerate() {
            @if i > 0 { wbr; }
            span.nw { (part) }
        }
    }
}

/// An image shortened to a short digest, the full reference on hover.
fn image(full: &str) -> Markup {
    html! { span.image title=(full) { (name(&short_image(full))) } }
}

/// Text written as Markdown for GitHub (reasons, upkeep, hunt lines): its
/// code spans become `<code>`, bold marks and Markdown escapes go, so the
/// page never shows raw backticks or asterisks.
fn prose(text: &str) -> Markup {
    let clean = text
        .replace("**", "")
        .replace("\\|", "|")
        .replace("\\_", "_")
        .replace("\\*", "*");
    let parts: Vec<&str> = clean.split('`').collect();
    // An unmatched backtick is no code span: dropped, its text kept.
    let paired = parts.len() % 2 == 1;
    html! {
        @for (i, part) in parts.iter().enumerate() {
            @if paired && i % 2 == 1 {
                code { (part) }
            } @else {
                (part)
            }
        }
    }
}

const STYLE: &str = r#"
:root { color-scheme: light dark; --line: #8884; --muted: #888; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; padding: 16px; max-width: 1400px; }
h1 { font-size: 20px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 24px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 15px; margin: 16px 0 6px; }
.meta { color: var(--muted); margin: 0 0 12px; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(150px, 1fr)); gap: 8px; margin: 12px 0; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 8px 10px; }
.card b { display: block; font-size: 18px; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { font-weight: 600; white-space: nowrap; }
td.mono, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; word-break: normal; overflow-wrap: normal; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; }
.arrow { color: var(--muted); }
.nw { white-space: nowrap; }
.badge { display: inline-block; padding: 0 6px; border-radius: 10px; font-size: 12px; white-space: nowrap; border: 1px solid var(--line); }
.ok { background: #2e7d3222; } .warn { background: #f9a82533; } .bad { background: #c6282833; } .info { background: #1565c022; }
.empty { color: var(--muted); font-style: italic; }
ul.reasons { margin: 0; padding-left: 16px; color: var(--muted); }
@media (max-width: 640px) {
  body { padding: 10px; }
  table.stack thead { display: none; }
  table.stack tr { display: block; border-bottom: 1px solid var(--line); padding: 6px 0; }
  table.stack td { display: block; border: 0; padding: 2px 0; }
  table.stack td::before { content: attr(data-label) ": "; font-weight: 600; }
}
"#;

/// Only http(s) links are rendered as links; anything else becomes text.
fn link(link: &LinkRow) -> Markup {
    html! {
        @if link.url.starts_with("https://") || link.url.starts_with("http://") {
            a href=(link.url) { (link.label) }
        } @else {
            (link.label)
        }
    }
}

fn optional_link(row: Option<&LinkRow>) -> Markup {
    html! {
        @match row {
            Some(row) => (link(row)),
            None => "—",
        }
    }
}

fn time(at: Option<DateTime<Utc>>) -> String {
    at.map_or_else(
        || "—".to_owned(),
        |t| t.format("%Y-%m-%d %H:%M UTC").to_string(),
    )
}

fn badge(status: &str) -> Markup {
    let class = match status {
        "up-to-date" | "validated" | "passed" | "done" => "ok",
        "stale-newer" | "running" | "queued" | "smoke" | "final-sweep" => "info",
        "stale-pruned" | "failed" | "error" | "unexpected-error" | "unparsable" => "bad",
        _ => "warn",
    };
    html! { span class={ "badge " (class) } { (status) } }
}

/// A table that stacks into labelled lines at phone width; `rows` are its
/// `<tr>`s.
fn stack_table(headers: &[&str], rows: Markup) -> Markup {
    html! {
        div.scroll {
            table.stack {
                thead { tr { @for header in headers { th { (header) } } } }
                tbody { (rows) }
            }
        }
    }
}

/// Renders the whole page.
pub fn render(snapshot: &StatusSnapshot) -> String {
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta http-equiv="refresh" content="30";
                title { "Klaud status" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { "Klaud" }
                p.meta {
                    "klaud " (snapshot.version) " · acting as " b { (snapshot.bot_login) }
                    " · updated " (time(snapshot.generated_at))
                }
                @if snapshot.planning {
                    p.planning {
                        span.badge.info { "planning…" }
                        " reading the repository and the registries"
                    }
                }
                (cards(snapshot))
                (budget_chart(&snapshot.budget_history))
                @if snapshot.repositories.is_empty() {
                    p.empty { "No repository has been read yet." }
                }
                @for repository in &snapshot.repositories {
                    (render_repository(repository))
                }
                h2 { "Recent errors" }
                @if snapshot.recent_errors.is_empty() {
                    p.empty { "None." }
                } @else {
                    (stack_table(&["When", "Error"], html! {
                        @for event in &snapshot.recent_errors {
                            tr {
                                td data-label="When" { (time(event.at)) }
                                td data-label="Error" { (prose(&event.message)) }
                            }
                        }
                    }))
                }
            }
        }
    };
    let mut page = page.into_string();
    page.push('\n');
    page
}

fn cards(snapshot: &StatusSnapshot) -> Markup {
    let candidates: usize = snapshot
        .repositories
        .iter()
        .map(|r| r.candidates.iter().filter(|c| c.outcome.is_none()).count())
        .sum();
    let stale: usize = snapshot
        .repositories
        .iter()
        .map(|r| {
            r.families
                .iter()
                .filter(|f| f.status.starts_with("stale"))
                .count()
        })
        .sum();
    let requests = &snapshot.registry_requests;
    html! {
        div.cards {
            div.card { "Next wave" b { (time(snapshot.next_wave)) } }
            div.card { "Active candidates" b { (candidates) } }
            div.card { "Stale families" b { (stale) } }
            div.card { "Waves run" b { (snapshot.waves_total) } }
            @for budget in &snapshot.github_budget {
                div.card {
                    "GitHub " (budget.resource)
                    b { (budget.remaining) " / " (budget.limit) }
                    "resets " (time(budget.reset))
                }
            }
            @for skew in &snapshot.clock_skews {
                div.card { "Clock skew" b { (skew.seconds) " s" } (skew.describe()) }
            }
            @for pause in &snapshot.github_pauses {
                div.card { "GitHub paused" b { "until " (time(pause.until)) } (pause.describe()) }
            }
            div.card {
                "Registry requests" b { (requests.total()) }
                (requests.manifest_head) " HEAD · "
                (requests.manifest_get + requests.blob_get) " GET"
            }
            @for (host, q) in &snapshot.registry_quotas {
                div.card {
                    "Pull quota " (host)
                    b { (q.remaining) " / " (q.limit) }
                    "per " (q.window_secs.div_ceil(3600)) " h"
                }
            }
            @for wait in &snapshot.registry_waits {
                div.card {
                    "Registry " (wait.host) " waits"
                    b { "until " (time(Some(wait.until))) }
                    (prose(&wait.reason))
                }
            }
        }
    }
}

/// The `core` budget over the sampled hours as an inline SVG line (no
/// script): the height is what is left of the limit. SVG elements get
/// explicit end tags: in HTML, only `/>` would close them, and maud writes
/// void elements without it.
fn budget_chart(samples: &[BudgetSample]) -> Markup {
    const W: f64 = 600.0;
    const H: f64 = 120.0;
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        return html! {};
    };
    let span = (last.at - first.at).num_seconds().max(60) as f64;
    let points: Vec<String> = samples
        .iter()
        .map(|s| {
            let x = (s.at - first.at).num_seconds() as f64 / span * W;
            let share = if s.limit == 0 {
                0.0
            } else {
                s.remaining.min(s.limit) as f64 / s.limit as f64
            };
            format!("{x:.1},{:.1}", H - share * H)
        })
        .collect();
    let (last_x, last_y) = points
        .last()
        .and_then(|p| p.split_once(','))
        .unwrap_or(("0", "0"));
    let label = format!(
        "GitHub core requests left, {} to {}",
        first.at.format("%H:%M"),
        last.at.format("%H:%M")
    );
    let view_box = format!("-40 -10 {} {}", W + 50.0, H + 30.0);
    html! {
        h2 { "GitHub core budget" }
        figure.chart {
            svg role="img" aria-label=(label) viewBox=(view_box) width="100%"
                style="max-width:680px" xmlns="http://www.w3.org/2000/svg" {
                line x1="0" y1="0" x2=(W) y2="0" stroke="#8884" {}
                line x1="0" y1=(H) x2=(W) y2=(H) stroke="#8884" {}
                text x="-4" y="4" text-anchor="end" font-size="10" fill="currentColor" { (last.limit) }
                text x="-4" y=(H) text-anchor="end" font-size="10" fill="currentColor" { "0" }
                text x="0" y=(H + 14.0) font-size="10" fill="currentColor" {
                    (first.at.format("%H:%M UTC"))
                }
                text x=(W) y=(H + 14.0) text-anchor="end" font-size="10" fill="currentColor" {
                    (last.at.format("%H:%M UTC"))
                }
                polyline fill="none" stroke="#1565c0" stroke-width="2" points=(points.join(" ")) {}
                // The latest reading, visible even as the only sample.
                circle cx=(last_x) cy=(last_y) r="3" fill="#1565c0" {}
            }
            figcaption.meta {
                "requests left of " (last.limit) " per hour, " (last.remaining) " now"
            }
        }
    }
}

fn render_repository(repository: &RepositoryStatus) -> Markup {
    html! {
        h2 { a href=(repository.url) { (repository.name) } }
        @if let Some(issue) = &repository.dashboard_issue {
            p { "Steer Klaud from its dashboard issue: " (link(issue)) }
        }
        h3 { "Candidates" }
        (render_candidates(&repository.candidates))
        @if !repository.experiments.is_empty() {
            h3 { "Experiments" }
            (render_experiments(&repository.experiments))
        }
        @if !repository.sick_nodes.is_empty() {
            h3 { "Sick nodes" }
            (render_sick_nodes(&repository.sick_nodes))
        }
        h3 { "Claims" }
        (render_claims(&repository.claims))
        h3 { "Recent outcomes" }
        (render_outcomes(&repository.outcomes))
        h3 { "Families" }
        (render_families(&repository.families))
    }
}

fn render_candidates(candidates: &[CandidateRow]) -> Markup {
    if candidates.is_empty() {
        return html! { p.empty { "No candidates." } };
    }
    let headers = [
        "Family",
        "Image (old → new)",
        "State",
        "Attempt",
        "PR",
        "Runs",
    ];
    stack_table(
        &headers,
        html! {
            @for candidate in candidates {
                tr {
                    td.mono data-label="Family" { (name(&candidate.family)) }
                    td.mono data-label="Image" {
                        @if !candidate.old_image.is_empty() {
                            (image(&candidate.old_image)) span.arrow { " → " }
                        }
                        (image(&candidate.image))
                    }
                    td data-label="State" {
                        (badge(candidate.outcome.as_deref().unwrap_or(&candidate.state)))
                    }
                    td data-label="Attempt" { (candidate.attempt.as_deref().unwrap_or("—")) }
                    td data-label="PR" {
                        (optional_link(candidate.pull_request.as_ref()))
                        @if let (Some(_), Some(merge)) = (&candidate.pull_request, &candidate.merge) {
                            br; small { (prose(merge)) }
                        }
                    }
                    td data-label="Runs" {
                        @for (i, run) in candidate.runs.iter().enumerate() {
                            @if i > 0 { ", " }
                            (link(run))
                        }
                        @if candidate.runs.is_empty() { "—" }
                    }
                }
            }
        },
    )
}

/// One table per experiment and family: its variants side by side.
fn render_experiments(experiments: &[ExperimentRow]) -> Markup {
    html! {
        @for experiment in experiments {
            h4.experiment {
                "Experiment " (experiment.experiment) " · "
                span.mono { (name(&experiment.family)) }
            }
            (stack_table(&["Variant", "State", "PR", "Image", "Changes"], html! {
                @for v in &experiment.variants {
                    tr.variant {
                        td data-label="Variant" {
                            "Variant " (v.name)
                            @if let Some(from) = &v.from { " (= " (from) " plus …)" }
                        }
                        td data-label="State" { (badge(&v.state)) }
                        td data-label="PR" { (optional_link(v.pull_request.as_ref())) }
                        td.mono data-label="Image" title=(v.candidate.as_str()) {
                            @if v.image.is_empty() { "—" } @else { (image(&v.image)) }
                        }
                        td data-label="Changes" {
                            @if v.edits.is_empty() { "—" }
                            @for (i, edit) in v.edits.iter().enumerate() {
                                @if i > 0 { br; }
                                code { (edit) }
                            }
                        }
                    }
                }
            }))
        }
    }
}

/// Nodes failing the same way across families or days: one row per node
/// and signature, as the dashboard issue lists them.
fn render_sick_nodes(rows: &[klaud_lifecycle::playbook::sick::SickNodeRow]) -> Markup {
    let when = |t: &chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%d %H:%M UTC").to_string();
    stack_table(
        &[
            "Node",
            "Signature",
            "Families",
            "Failures",
            "First seen",
            "Last seen",
            "Playbook entry",
        ],
        html! {
            @for r in rows {
                tr.sick-node {
                    td.mono data-label="Node" { (r.node) }
                    td data-label="Signature" {
                        code { (r.signature) } " (" (r.class) ")"
                        @if let (None, Some(line)) = (&r.entry, &r.line) { br; code { (line) } }
                    }
                    td.mono data-label="Families" {
                        @for (i, f) in r.families.iter().enumerate() {
                            @if i > 0 { br; }
                            (name(f))
                        }
                        @if r.family_count > r.families.len() {
                            br; "+" (r.family_count - r.families.len())
                        }
                    }
                    td data-label="Failures" { (r.failures) }
                    td data-label="First seen" { (when(&r.first_seen)) }
                    td data-label="Last seen" { (when(&r.last_seen)) }
                    td.mono data-label="Playbook entry" { (r.entry.as_deref().unwrap_or("—")) }
                }
            }
        },
    )
}

fn render_claims(claims: &[ClaimRow]) -> Markup {
    if claims.is_empty() {
        return html! { p.empty { "No claims." } };
    }
    let headers = ["Family", "Owner", "Run", "Lease until", "Fence", "Holder"];
    stack_table(
        &headers,
        html! {
            @for claim in claims {
                tr {
                    td.mono data-label="Family" {
                        (name(claim.family.as_deref().unwrap_or(&claim.family_id)))
                        @if let Some(what) = &claim.recovering {
                            " — recovery lease: finishing " (name(what))
                        }
                    }
                    td.mono data-label="Owner" {
                        @match &claim.parse_error {
                            Some(error) => { (badge("unparsable")) " " (prose(error)) }
                            None => (claim.owner.as_deref().unwrap_or("old helper (no lease)")),
                        }
                    }
                    td data-label="Run" {
                        (claim.run_id.map_or_else(|| "—".to_owned(), |r| r.to_string()))
                    }
                    td data-label="Lease until" { (time(claim.lease_until)) }
                    td data-label="Fence" {
                        (claim.fence.map_or_else(|| "—".to_owned(), |f| f.to_string()))
                    }
                    td data-label="Holder" { (claim.holder.as_deref().unwrap_or("—")) }
                }
            }
        },
    )
}

fn render_outcomes(outcomes: &[OutcomeRow]) -> Markup {
    if outcomes.is_empty() {
        return html! { p.empty { "None yet." } };
    }
    stack_table(
        &["When", "Family", "Outcome", "Phase", "PR"],
        html! {
            @for outcome in outcomes {
                tr {
                    td data-label="When" { (time(outcome.at)) }
                    td.mono data-label="Family" { (name(&outcome.family)) }
                    td data-label="Outcome" {
                        (badge(&outcome.outcome))
                        // A hunt's lines are Markdown for GitHub; here
                        // they are text (escaped by maud).
                        @for line in outcome.hunt.iter().chain(&outcome.hunt_zh) {
                            div.hunt { (prose(line)) }
                        }
                    }
                    td data-label="Phase" { (outcome.phase) }
                    td data-label="PR" { (optional_link(outcome.pull_request.as_ref())) }
                }
            }
        },
    )
}

fn stale_for(hours: Option<i64>) -> String {
    hours.map_or_else(
        || "—".to_owned(),
        |h| {
            if h >= 48 {
                format!("{} d", h / 24)
            } else {
                format!("{h} h")
            }
        },
    )
}

fn render_families(families: &[FamilyRow]) -> Markup {
    if families.is_empty() {
        return html! { p.empty { "No plan yet." } };
    }
    let headers = [
        "Family",
        "Status",
        "Current",
        "Candidate",
        "Stale for",
        "Why",
    ];
    stack_table(
        &headers,
        html! {
            @for family in families {
                tr {
                    td.mono data-label="Family" { (name(&family.family)) }
                    td data-label="Status" { (badge(&family.status)) }
                    td.mono data-label="Current" { (image(&family.current)) }
                    td.mono data-label="Candidate" {
                        @match &family.candidate {
                            Some(c) => (image(c)),
                            None => "—",
                        }
                    }
                    td data-label="Stale for" { (stale_for(family.stale_hours)) }
                    td data-label="Why" {
                        @if !family.reasons.is_empty() {
                            ul.reasons { @for reason in &family.reasons { li { (prose(reason)) } } }
                        }
                    }
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dashboard::GithubPauseRow;

    #[test]
    fn hostile_text_is_escaped_and_only_http_links_render() {
        let snapshot = StatusSnapshot {
            bot_login: "<script>alert(1)</script>".into(),
            repositories: vec![RepositoryStatus {
                name: "o/r".into(),
                url: "https://github.com/o/r".into(),
                candidates: vec![CandidateRow {
                    family: "f\"><img src=x>".into(),
                    pull_request: Some(LinkRow {
                        label: "#1".into(),
                        url: "javascript:alert(1)".into(),
                    }),
                    ..CandidateRow::default()
                }],
                ..RepositoryStatus::default()
            }],
            ..StatusSnapshot::default()
        };
        let page = render(&snapshot);
        assert!(!page.contains("GitHub paused"));
        assert!(!page.contains("<script>"));
        assert!(!page.contains("<img"));
        assert!(!page.contains("javascript:"));
        assert!(page.contains("&lt;script&gt;"));
    }

    #[test]
    fn images_show_old_to_new_short_names_wrap_only_at_separators_and_no_markdown_is_raw() {
        let digest = "sha256:d6e7288627be8b02be88e4bba38e73f6d50e2826869f753c13a4c4385ab3eda9";
        let snapshot = StatusSnapshot {
            repositories: vec![RepositoryStatus {
                name: "o/r".into(),
                url: "https://github.com/o/r".into(),
                candidates: vec![CandidateRow {
                    family: "configs/nvidia-master.yaml:dsr1-fp4-b200-sglang".into(),
                    old_image: "lmsysorg/sglang:v0.5.16-cu130".into(),
                    image: format!("lmsysorg/sglang:v0.5.17-cu130@{digest}"),
                    state: "done".into(),
                    outcome: Some("validated".into()),
                    merge: Some("reusable: sweep `run 7` on the head".into()),
                    pull_request: Some(LinkRow {
                        label: "#3".into(),
                        url: "https://github.com/o/r/pull/3".into(),
                    }),
                    ..CandidateRow::default()
                }],
                families: vec![FamilyRow {
                    family: "configs/a.yaml:k".into(),
                    status: "stale-newer".into(),
                    current: "vllm/vllm-openai:v0.9.0".into(),
                    reasons: vec!["tag `v1` is **older**; skipped".into()],
                    ..FamilyRow::default()
                }],
                ..RepositoryStatus::default()
            }],
            ..StatusSnapshot::default()
        };
        let page = render(&snapshot);
        let text_of_body = page.split_once("<body>").map_or("", |(_, b)| b);
        assert!(!text_of_body.contains('`'), "raw backticks: {page}");
        assert!(!text_of_body.contains("**"), "raw bold: {page}");
        assert!(page.contains("<code>run 7</code>"), "{page}");
        assert!(page.contains("<code>v1</code> is older"), "{page}");
        // Old → new, the new one with a short digest and the full one on hover.
        let old = page.find("v0.5.16").expect("old image");
        let new = page.find("v0.5.17").expect("new image");
        assert!(old < new, "{page}");
        assert!(page.contains(&format!("title=\"lmsysorg/sglang:v0.5.17-cu130@{digest}\"")));
        assert!(page.contains("d6e7288627be…"), "{page}");
        assert!(
            !page.contains(">d6e7288627be8b02be88"),
            "the full digest is not shown as text"
        );
        // A name wraps after its separators only.
        assert!(
            page.contains(
                "<span class=\"nw\">lmsysorg/</span><wbr><span class=\"nw\">sglang:</span><wbr><span class=\"nw\">v0.5.17-cu130@</span><wbr>"
            ),
            "{page}"
        );
        assert!(
            page.contains("<span class=\"nw\">dsr1-fp4-b200-sglang</span>"),
            "{page}"
        );
        assert!(!page.contains("break-all"));
    }

    #[test]
    fn each_registry_quota_and_a_host_out_of_quota_are_shown_with_the_wait() {
        let until = DateTime::from_timestamp(1_800_000_000, 0).expect("time");
        let quota = klaud_planner::registry::PullQuota {
            limit: 100,
            remaining: 0,
            window_secs: 21600,
        };
        let snapshot = StatusSnapshot {
            registry_quotas: [("registry-1.docker.io".to_owned(), quota)].into(),
            registry_waits: vec![klaud_planner::registry::TrippedHost {
                host: "registry-1.docker.io".into(),
                reason: "out of pull quota (0 of 100 pulls left per 6 h)".into(),
                since: until - chrono::Duration::hours(6),
                until,
            }],
            ..StatusSnapshot::default()
        };
        let page = render(&snapshot);
        assert!(
            page.contains("Pull quota registry-1.docker.io<b>0 / 100</b>per 6 h"),
            "{page}"
        );
        assert!(
            page.contains("Registry registry-1.docker.io waits<b>until ")
                && page.contains("out of pull quota (0 of 100 pulls left per 6 h)"),
            "{page}"
        );
    }

    #[test]
    fn a_clock_skew_beyond_the_margin_is_shown() {
        let snapshot = StatusSnapshot {
            clock_skews: vec![super::super::ClockSkewRow {
                repository: "o/r".into(),
                seconds: 600,
            }],
            ..StatusSnapshot::default()
        };
        let page = render(&snapshot);
        assert!(
            page.contains("o/r: this machine's clock is 600 s behind GitHub's"),
            "{page}"
        );
    }

    #[test]
    fn a_secondary_limit_pause_is_shown_with_its_end() {
        let until = DateTime::from_timestamp(1_800_000_000, 0);
        let snapshot = StatusSnapshot {
            github_pauses: vec![GithubPauseRow {
                repository: "o/r".into(),
                until,
                route: "/repos/o/r/pulls".into(),
                writes_only: false,
            }],
            ..StatusSnapshot::default()
        };
        let page = render(&snapshot);
        assert!(
            page.contains("o/r paused by GitHub's secondary limit until 2027-01-15 08:00:00 UTC"),
            "{page}"
        );
    }
}
