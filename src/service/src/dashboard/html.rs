//! The dashboard page: plain server-rendered HTML with inline CSS, readable
//! at 1280×800 and at phone width, no scripts. Every interpolated value goes
//! through [`escape`].

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use super::{
    BudgetSample, CandidateRow, ClaimRow, ExperimentRow, FamilyRow, LinkRow, OutcomeRow,
    RepositoryStatus, StatusSnapshot,
};

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
td.mono, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; word-break: break-all; }
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

/// Escapes text for HTML element content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Only http(s) links are rendered as links; anything else becomes text.
fn link(link: &LinkRow) -> String {
    if link.url.starts_with("https://") || link.url.starts_with("http://") {
        format!(
            "<a href=\"{}\">{}</a>",
            escape(&link.url),
            escape(&link.label)
        )
    } else {
        escape(&link.label)
    }
}

fn time(at: Option<DateTime<Utc>>) -> String {
    at.map_or_else(
        || "—".to_owned(),
        |t| t.format("%Y-%m-%d %H:%M UTC").to_string(),
    )
}

fn badge(status: &str) -> String {
    let class = match status {
        "up-to-date" | "validated" | "passed" | "done" => "ok",
        "stale-newer" | "running" | "queued" | "smoke" | "final-sweep" => "info",
        "stale-pruned" | "failed" | "error" | "unexpected-error" | "unparsable" => "bad",
        _ => "warn",
    };
    format!("<span class=\"badge {class}\">{}</span>", escape(status))
}

/// Renders the whole page.
pub fn render(snapshot: &StatusSnapshot) -> String {
    let mut page = String::with_capacity(16 * 1024);
    let _ = write!(
        page,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta http-equiv=\"refresh\" content=\"30\">\
         <title>Klaud status</title><style>{STYLE}</style></head><body>"
    );
    let _ = write!(
        page,
        "<h1>Klaud</h1><p class=\"meta\">{} · acting as <b>{}</b> · updated {}</p>",
        escape(&format!("klaud {}", snapshot.version)),
        escape(&snapshot.bot_login),
        time(snapshot.generated_at),
    );
    if snapshot.planning {
        page.push_str("<p class=\"planning\"><span class=\"badge info\">planning…</span> reading the repository and the registries</p>");
    }
    render_cards(&mut page, snapshot);
    render_budget_chart(&mut page, &snapshot.budget_history);
    if snapshot.repositories.is_empty() {
        page.push_str("<p class=\"empty\">No repository has been read yet.</p>");
    }
    for repository in &snapshot.repositories {
        render_repository(&mut page, repository);
    }
    page.push_str("<h2>Recent errors</h2>");
    if snapshot.recent_errors.is_empty() {
        page.push_str("<p class=\"empty\">None.</p>");
    } else {
        page.push_str("<div class=\"scroll\"><table class=\"stack\"><thead><tr><th>When</th><th>Error</th></tr></thead><tbody>");
        for event in &snapshot.recent_errors {
            let _ = write!(
                page,
                "<tr><td data-label=\"When\">{}</td><td data-label=\"Error\">{}</td></tr>",
                time(event.at),
                escape(&event.message)
            );
        }
        page.push_str("</tbody></table></div>");
    }
    page.push_str("</body></html>\n");
    page
}

fn render_cards(page: &mut String, snapshot: &StatusSnapshot) {
    page.push_str("<div class=\"cards\">");
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
    let _ = write!(
        page,
        "<div class=\"card\">Next wave<b>{}</b></div>",
        time(snapshot.next_wave)
    );
    let _ = write!(
        page,
        "<div class=\"card\">Active candidates<b>{candidates}</b></div>"
    );
    let _ = write!(
        page,
        "<div class=\"card\">Stale families<b>{stale}</b></div>"
    );
    let _ = write!(
        page,
        "<div class=\"card\">Waves run<b>{}</b></div>",
        snapshot.waves_total
    );
    for budget in &snapshot.github_budget {
        let _ = write!(
            page,
            "<div class=\"card\">GitHub {}<b>{} / {}</b>resets {}</div>",
            escape(&budget.resource),
            budget.remaining,
            budget.limit,
            time(budget.reset)
        );
    }
    for skew in &snapshot.clock_skews {
        let _ = write!(
            page,
            "<div class=\"card\">Clock skew<b>{} s</b>{}</div>",
            skew.seconds,
            escape(&skew.describe())
        );
    }
    for pause in &snapshot.github_pauses {
        let _ = write!(
            page,
            "<div class=\"card\">GitHub paused<b>until {}</b>{}</div>",
            escape(&time(pause.until)),
            escape(&pause.describe())
        );
    }
    let _ = write!(
        page,
        "<div class=\"card\">Registry requests<b>{}</b>{} HEAD · {} GET</div>",
        snapshot.registry_requests.total(),
        snapshot.registry_requests.manifest_head,
        snapshot.registry_requests.manifest_get + snapshot.registry_requests.blob_get
    );
    for (host, q) in &snapshot.registry_quotas {
        let _ = write!(
            page,
            "<div class=\"card\">Pull quota {}<b>{} / {}</b>per {} h</div>",
            escape(host),
            q.remaining,
            q.limit,
            q.window_secs.div_ceil(3600)
        );
    }
    for wait in &snapshot.registry_waits {
        let _ = write!(
            page,
            "<div class=\"card\">Registry {} waits<b>until {}</b>{}</div>",
            escape(&wait.host),
            escape(&time(Some(wait.until))),
            escape(&wait.reason)
        );
    }
    page.push_str("</div>");
}

/// The `core` budget over the sampled hours as an inline SVG line (no
/// script): the height is what is left of the limit.
fn render_budget_chart(page: &mut String, samples: &[BudgetSample]) {
    const W: f64 = 600.0;
    const H: f64 = 120.0;
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        return;
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
    let _ = write!(
        page,
        "<h2>GitHub core budget</h2><figure class=\"chart\"><svg role=\"img\" aria-label=\"GitHub core requests left, {} to {}\" \
         viewBox=\"-40 -10 {} {}\" width=\"100%\" style=\"max-width:680px\" xmlns=\"http://www.w3.org/2000/svg\">\
         <line x1=\"0\" y1=\"0\" x2=\"{W}\" y2=\"0\" stroke=\"#8884\"/><line x1=\"0\" y1=\"{H}\" x2=\"{W}\" y2=\"{H}\" stroke=\"#8884\"/>\
         <text x=\"-4\" y=\"4\" text-anchor=\"end\" font-size=\"10\" fill=\"currentColor\">{}</text>\
         <text x=\"-4\" y=\"{H}\" text-anchor=\"end\" font-size=\"10\" fill=\"currentColor\">0</text>\
         <text x=\"0\" y=\"{}\" font-size=\"10\" fill=\"currentColor\">{}</text>\
         <text x=\"{W}\" y=\"{}\" text-anchor=\"end\" font-size=\"10\" fill=\"currentColor\">{}</text>\
         <polyline fill=\"none\" stroke=\"#1565c0\" stroke-width=\"2\" points=\"{}\"/>\
         <circle cx=\"{}\" cy=\"{}\" r=\"3\" fill=\"#1565c0\"/></svg>\
         <figcaption class=\"meta\">requests left of {} per hour, {} now</figcaption></figure>",
        first.at.format("%H:%M"),
        last.at.format("%H:%M"),
        W + 50.0,
        H + 30.0,
        last.limit,
        H + 14.0,
        first.at.format("%H:%M UTC"),
        H + 14.0,
        last.at.format("%H:%M UTC"),
        points.join(" "),
        // The latest reading, visible even as the only sample.
        last_x,
        last_y,
        last.limit,
        last.remaining,
    );
}

fn render_repository(page: &mut String, repository: &RepositoryStatus) {
    let _ = write!(
        page,
        "<h2><a href=\"{}\">{}</a></h2>",
        escape(&repository.url),
        escape(&repository.name)
    );
    page.push_str("<h3>Candidates</h3>");
    render_candidates(page, &repository.candidates);
    if !repository.experiments.is_empty() {
        page.push_str("<h3>Experiments</h3>");
        render_experiments(page, &repository.experiments);
    }
    page.push_str("<h3>Claims</h3>");
    render_claims(page, &repository.claims);
    page.push_str("<h3>Recent outcomes</h3>");
    render_outcomes(page, &repository.outcomes);
    page.push_str("<h3>Families</h3>");
    render_families(page, &repository.families);
}

fn render_candidates(page: &mut String, candidates: &[CandidateRow]) {
    if candidates.is_empty() {
        page.push_str("<p class=\"empty\">No candidates.</p>");
        return;
    }
    page.push_str("<div class=\"scroll\"><table class=\"stack\"><thead><tr><th>Family</th><th>Image</th><th>State</th><th>Attempt</th><th>PR</th><th>Runs</th></tr></thead><tbody>");
    for candidate in candidates {
        let runs: Vec<String> = candidate.runs.iter().map(link).collect();
        let state = candidate.outcome.as_deref().unwrap_or(&candidate.state);
        let _ = write!(
            page,
            "<tr><td data-label=\"Family\" class=\"mono\">{}</td><td data-label=\"Image\" class=\"mono\">{}</td>\
             <td data-label=\"State\">{}</td><td data-label=\"Attempt\">{}</td><td data-label=\"PR\">{}</td><td data-label=\"Runs\">{}</td></tr>",
            escape(&candidate.family),
            escape(&candidate.image),
            badge(state),
            escape(candidate.attempt.as_deref().unwrap_or("—")),
            match (&candidate.pull_request, &candidate.merge) {
                (Some(pr), Some(merge)) =>
                    format!("{}<br><small>{}</small>", link(pr), escape(merge)),
                (Some(pr), None) => link(pr),
                (None, _) => "—".to_owned(),
            },
            if runs.is_empty() {
                "—".to_owned()
            } else {
                runs.join(", ")
            },
        );
    }
    page.push_str("</tbody></table></div>");
}

/// One table per experiment and family: its variants side by side.
fn render_experiments(page: &mut String, experiments: &[ExperimentRow]) {
    for experiment in experiments {
        let _ = write!(
            page,
            "<h4 class=\"experiment\">Experiment {} · <span class=\"mono\">{}</span></h4>\
             <div class=\"scroll\"><table class=\"stack\"><thead><tr><th>Variant</th><th>State</th><th>PR</th><th>Candidate</th></tr></thead><tbody>",
            escape(&experiment.experiment),
            escape(&experiment.family),
        );
        for v in &experiment.variants {
            let name = match &v.from {
                Some(from) => format!("Variant {} (= {} plus …)", v.name, from),
                None => format!("Variant {}", v.name),
            };
            let _ = write!(
                page,
                "<tr class=\"variant\"><td data-label=\"Variant\">{}</td><td data-label=\"State\">{}</td>\
                 <td data-label=\"PR\">{}</td><td data-label=\"Candidate\" class=\"mono\">{}</td></tr>",
                escape(&name),
                badge(&v.state),
                v.pull_request.as_ref().map_or_else(|| "—".to_owned(), link),
                escape(v.candidate.as_str()),
            );
        }
        page.push_str("</tbody></table></div>");
    }
}

fn render_claims(page: &mut String, claims: &[ClaimRow]) {
    if claims.is_empty() {
        page.push_str("<p class=\"empty\">No claims.</p>");
        return;
    }
    page.push_str("<div class=\"scroll\"><table class=\"stack\"><thead><tr><th>Family</th><th>Owner</th><th>Run</th><th>Lease until</th><th>Fence</th><th>Holder</th></tr></thead><tbody>");
    for claim in claims {
        let mut family = claim
            .family
            .clone()
            .unwrap_or_else(|| claim.family_id.clone());
        if let Some(what) = &claim.recovering {
            let _ = write!(family, " — recovery lease: finishing {what}");
        }
        let owner = match &claim.parse_error {
            Some(error) => format!("{} {}", badge("unparsable"), escape(error)),
            None => escape(claim.owner.as_deref().unwrap_or("old helper (no lease)")),
        };
        let _ = write!(
            page,
            "<tr><td data-label=\"Family\" class=\"mono\">{}</td><td data-label=\"Owner\" class=\"mono\">{}</td><td data-label=\"Run\">{}</td>\
             <td data-label=\"Lease until\">{}</td><td data-label=\"Fence\">{}</td><td data-label=\"Holder\">{}</td></tr>",
            escape(&family),
            owner,
            claim
                .run_id
                .map_or_else(|| "—".to_owned(), |r| r.to_string()),
            time(claim.lease_until),
            claim
                .fence
                .map_or_else(|| "—".to_owned(), |f| f.to_string()),
            escape(claim.holder.as_deref().unwrap_or("—")),
        );
    }
    page.push_str("</tbody></table></div>");
}

fn render_outcomes(page: &mut String, outcomes: &[OutcomeRow]) {
    if outcomes.is_empty() {
        page.push_str("<p class=\"empty\">None yet.</p>");
        return;
    }
    page.push_str("<div class=\"scroll\"><table class=\"stack\"><thead><tr><th>When</th><th>Family</th><th>Outcome</th><th>Phase</th><th>PR</th></tr></thead><tbody>");
    for outcome in outcomes {
        let _ = write!(
            page,
            "<tr><td data-label=\"When\">{}</td><td data-label=\"Family\" class=\"mono\">{}</td><td data-label=\"Outcome\">{}</td>\
             <td data-label=\"Phase\">{}</td><td data-label=\"PR\">{}</td></tr>",
            time(outcome.at),
            escape(&outcome.family),
            badge(&outcome.outcome),
            escape(&outcome.phase),
            outcome
                .pull_request
                .as_ref()
                .map_or_else(|| "—".to_owned(), link),
        );
    }
    page.push_str("</tbody></table></div>");
}

fn render_families(page: &mut String, families: &[FamilyRow]) {
    if families.is_empty() {
        page.push_str("<p class=\"empty\">No plan yet.</p>");
        return;
    }
    page.push_str("<div class=\"scroll\"><table class=\"stack\"><thead><tr><th>Family</th><th>Status</th><th>Current</th><th>Candidate</th><th>Stale for</th><th>Why</th></tr></thead><tbody>");
    for family in families {
        let reasons: String = family
            .reasons
            .iter()
            .map(|r| format!("<li>{}</li>", escape(r)))
            .collect();
        let _ = write!(
            page,
            "<tr><td data-label=\"Family\" class=\"mono\">{}</td><td data-label=\"Status\">{}</td><td data-label=\"Current\" class=\"mono\">{}</td>\
             <td data-label=\"Candidate\" class=\"mono\">{}</td><td data-label=\"Stale for\">{}</td><td data-label=\"Why\">{}</td></tr>",
            escape(&family.family),
            badge(&family.status),
            escape(&family.current),
            escape(family.candidate.as_deref().unwrap_or("—")),
            family.stale_hours.map_or_else(
                || "—".to_owned(),
                |h| if h >= 48 {
                    format!("{} d", h / 24)
                } else {
                    format!("{h} h")
                }
            ),
            if reasons.is_empty() {
                String::new()
            } else {
                format!("<ul class=\"reasons\">{reasons}</ul>")
            },
        );
    }
    page.push_str("</tbody></table></div>");
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
            page.contains("o/r: this machine&#39;s clock is 600 s behind GitHub&#39;s"),
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
            page.contains(
                "o/r paused by GitHub&#39;s secondary limit until 2027-01-15 08:00:00 UTC"
            ),
            "{page}"
        );
    }
}
