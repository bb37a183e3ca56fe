//! Readable web pages at the simulator's `html_url`s, shaped like GitHub's:
//! a repository (open pull requests, branches, other refs), a pull request
//! (title, state, draft, labels, author, head, the rendered body and
//! comments) and a workflow run (title, event, status, conclusion, jobs,
//! artifacts, attempts, `…/attempts/<n>` for an earlier one).
//!
//! Markdown goes through `pulldown-cmark` (GitHub-flavoured extensions);
//! raw HTML in it is escaped, except HTML comments, which are dropped the
//! way GitHub hides them, and a few bare formatting tags GitHub's sanitizer
//! keeps. Every other value is escaped. Pages are not API calls: they skip
//! the rate limit and the request log.

use std::fmt::Write as _;

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use pulldown_cmark::{CowStr, Event, Options, Parser, Tag};

use super::state::{GithubState, Model, Repo, Run, fmt_time};

/// The page routes, nested under `/_html`.
pub fn router() -> axum::Router<GithubState> {
    use axum::routing::get;
    axum::Router::new()
        .route("/{owner}/{repo}", get(repository))
        .route("/{owner}/{repo}/pull/{number}", get(pull))
        .route("/{owner}/{repo}/actions/runs/{id}", get(run))
        .route(
            "/{owner}/{repo}/actions/runs/{id}/job/{job}",
            get(run_of_job),
        )
        .route(
            "/{owner}/{repo}/actions/runs/{id}/attempts/{attempt}",
            get(run_attempt),
        )
}

const STYLE: &str = r#"
:root { color-scheme: light dark; --line: #8884; --muted: #888; }
body { font: 14px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto; padding: 16px; max-width: 1012px; }
header.top { color: var(--muted); margin-bottom: 12px; }
h1 { font-size: 24px; font-weight: 400; margin: 8px 0; }
h2 { font-size: 16px; margin: 24px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
.meta { color: var(--muted); }
.state { display: inline-block; padding: 2px 10px; border-radius: 14px; color: #fff; font-weight: 600; }
.open { background: #1f883d; } .closed { background: #cf222e; } .draft { background: #6e7781; } .merged { background: #8250df; }
.label { display: inline-block; padding: 0 8px; border-radius: 10px; border: 1px solid var(--line); font-size: 12px; margin-right: 4px; }
.comment { border: 1px solid var(--line); border-radius: 6px; margin: 12px 0; }
.comment > .who { padding: 6px 12px; border-bottom: 1px solid var(--line); background: #8881; }
.comment > .body { padding: 4px 12px; overflow-x: auto; }
table { border-collapse: collapse; }
th, td { text-align: left; padding: 4px 8px; border: 1px solid var(--line); vertical-align: top; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; }
.empty { color: var(--muted); font-style: italic; }
"#;

/// Escapes text for HTML element content and attribute values.
fn escape(text: &str) -> String {
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

/// Bare tags (no attributes but `<details open>`) GitHub's sanitizer keeps
/// and Klaud's comments use; any other raw HTML is shown as text.
fn allowed_tag(html: &str) -> bool {
    const TAGS: [&str; 12] = [
        "details", "summary", "br", "sub", "sup", "b", "i", "em", "strong", "code", "kbd", "p",
    ];
    let Some(inner) = html
        .trim()
        .strip_prefix('<')
        .and_then(|h| h.strip_suffix('>'))
    else {
        return false;
    };
    let inner = inner.trim_end_matches('/').trim();
    let (closing, inner) = match inner.strip_prefix('/') {
        Some(rest) => (true, rest),
        None => (false, inner),
    };
    let mut words = inner.split_ascii_whitespace();
    let name = words.next().unwrap_or("").to_ascii_lowercase();
    let rest: Vec<&str> = words.collect();
    TAGS.contains(&name.as_str())
        && (rest.is_empty() || (!closing && name == "details" && rest == ["open"]))
}

/// Raw HTML from Markdown: comments dropped (one may span several events,
/// so `in_comment` carries over), allowed bare tags kept, every other tag
/// and all text shown as text. Hand-written because pulldown-cmark passes
/// raw HTML through untouched and a full sanitizer crate is more than
/// these pages need.
fn sanitize_html(html: &str, in_comment: &mut bool) -> String {
    let mut out = String::new();
    let mut rest = html;
    while !rest.is_empty() {
        if *in_comment {
            match rest.find("-->") {
                Some(end) => {
                    rest = &rest[end + 3..];
                    *in_comment = false;
                }
                None => rest = "",
            }
            continue;
        }
        if let Some(after) = rest.strip_prefix("<!--") {
            *in_comment = true;
            rest = after;
            continue;
        }
        if rest.starts_with('<')
            && let Some(end) = rest.find('>')
            && allowed_tag(&rest[..=end])
        {
            out.push_str(&rest[..=end]);
            rest = &rest[end + 1..];
            continue;
        }
        let ch = rest.chars().next().unwrap_or(' ');
        match ch {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
        rest = &rest[ch.len_utf8()..];
    }
    out
}

/// GitHub-flavoured Markdown to HTML; hidden `<!-- -->` markers vanish.
pub fn markdown(text: &str) -> String {
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_FOOTNOTES;
    let mut in_comment = false;
    let events = Parser::new_ext(text, options).filter_map(|event| match event {
        Event::Html(html) | Event::InlineHtml(html) => {
            let clean = sanitize_html(&html, &mut in_comment);
            (!clean.is_empty()).then(|| Event::Html(clean.into()))
        }
        Event::Start(Tag::Link {
            link_type,
            dest_url,
            title,
            id,
        }) => Some(Event::Start(Tag::Link {
            link_type,
            dest_url: safe_url(dest_url),
            title,
            id,
        })),
        Event::Start(Tag::Image {
            link_type,
            dest_url,
            title,
            id,
        }) => Some(Event::Start(Tag::Image {
            link_type,
            dest_url: safe_url(dest_url),
            title,
            id,
        })),
        other => Some(other),
    });
    let mut out = String::new();
    pulldown_cmark::html::push_html(&mut out, events);
    out
}

/// Link targets GitHub keeps: web URLs, anchors and paths; a `javascript:`
/// or `data:` target becomes a dead anchor.
fn safe_url(url: CowStr<'_>) -> CowStr<'_> {
    let lower = url.trim_start().to_ascii_lowercase();
    let scheme = lower.split_once(':').map(|(s, _)| s);
    let safe = match scheme {
        Some(s)
            if s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
        {
            matches!(s, "http" | "https" | "mailto")
        }
        // No scheme (or a colon after a path segment): relative.
        _ => true,
    };
    if safe { url } else { CowStr::Borrowed("#") }
}

fn page(title: &str, crumbs: &str, body: &str) -> Response {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · GitHub simulator</title><style>{STYLE}</style></head><body>\
         <header class=\"top\">GitHub simulator · {crumbs}</header>{body}</body></html>\n",
        escape(title)
    );
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response()
}

fn not_found(what: &str) -> Response {
    let mut resp = page(
        "Not found",
        "",
        &format!("<h1>404</h1><p>{} does not exist.</p>", escape(what)),
    );
    *resp.status_mut() = StatusCode::NOT_FOUND;
    resp
}

fn repo_path(r: &Repo) -> String {
    format!("/_html/{}/{}", r.owner, r.name)
}

fn crumbs(r: &Repo) -> String {
    format!(
        "<a href=\"{}\">{}</a>",
        escape(&repo_path(r)),
        escape(&r.full_name())
    )
}

fn first_line(message: &str) -> &str {
    message.lines().next().unwrap_or("")
}

async fn repository(
    State(st): State<GithubState>,
    Path((owner, repo)): Path<(String, String)>,
) -> Response {
    let m = st.lock().await;
    let Ok(r) = m.repo(&owner, &repo) else {
        return not_found(&format!("repository {owner}/{repo}"));
    };
    let mut body = format!(
        "<h1>{}</h1><p class=\"meta\">default branch <code>{}</code></p>",
        escape(&r.full_name()),
        escape(&r.default_branch)
    );
    body.push_str("<h2>Open pull requests</h2>");
    let open: Vec<_> = r.pulls.values().rev().filter(|p| p.open).collect();
    if open.is_empty() {
        body.push_str("<p class=\"empty\">None.</p>");
    } else {
        body.push_str(
            "<table><tr><th>#</th><th>Title</th><th>Author</th><th>Head</th><th>Labels</th></tr>",
        );
        for p in open {
            let _ = write!(
                body,
                "<tr><td><a href=\"{path}/pull/{n}\">#{n}</a></td><td>{draft}<a href=\"{path}/pull/{n}\">{title}</a></td>\
                 <td>{user}</td><td class=\"mono\">{head}</td><td>{labels}</td></tr>",
                path = escape(&repo_path(r)),
                n = p.number,
                draft = if p.draft {
                    "<span class=\"label\">Draft</span> "
                } else {
                    ""
                },
                title = escape(&p.title),
                user = escape(&p.user),
                head = escape(&p.head_ref),
                labels = labels(&p.labels),
            );
        }
        body.push_str("</table>");
    }
    let (branches, other): (Vec<_>, Vec<_>) = r
        .refs
        .iter()
        .partition(|(name, _)| name.starts_with("refs/heads/"));
    body.push_str("<h2>Branches</h2>");
    refs_table(&mut body, &m, r, &branches, "refs/heads/");
    // Claim refs live under refs/heads/, recovery leases and the like may
    // not: both tables show each tip's commit message, which is where such
    // records are written.
    body.push_str("<h2>Other refs</h2>");
    refs_table(&mut body, &m, r, &other, "");
    page(&r.full_name(), &crumbs(r), &body)
}

fn refs_table(body: &mut String, _m: &Model, r: &Repo, refs: &[(&String, &String)], strip: &str) {
    if refs.is_empty() {
        body.push_str("<p class=\"empty\">None.</p>");
        return;
    }
    body.push_str(
        "<table><tr><th>Ref</th><th>Commit</th><th>Updated</th><th>Message</th><th>Pull request</th></tr>",
    );
    for (name, sha) in refs {
        let commit = r.objects.commits.get(sha.as_str());
        let short = name.strip_prefix(strip).unwrap_or(name);
        let pr = r
            .pulls
            .values()
            .rev()
            .find(|p| name.strip_prefix("refs/heads/") == Some(p.head_ref.as_str()))
            .map(|p| {
                format!(
                    "<a href=\"{}/pull/{}\">#{}</a>",
                    escape(&repo_path(r)),
                    p.number,
                    p.number
                )
            })
            .unwrap_or_default();
        let _ = write!(
            body,
            "<tr><td class=\"mono\">{}</td><td class=\"mono\">{}</td><td>{}</td><td class=\"mono\">{}</td><td>{pr}</td></tr>",
            escape(short),
            escape(&sha[..sha.len().min(7)]),
            commit
                .map(|c| fmt_time(c.committer.date))
                .unwrap_or_default(),
            escape(commit.map(|c| first_line(&c.message)).unwrap_or("")),
        );
    }
    body.push_str("</table>");
}

fn labels(names: &[String]) -> String {
    names
        .iter()
        .map(|l| format!("<span class=\"label\">{}</span>", escape(l)))
        .collect::<Vec<_>>()
        .join("")
}

/// The merge box of a pull request page: the web page computes what the
/// API's `mergeable` only answers on a second read, and names the
/// conflicting files as GitHub's page does.
fn merge_line(r: &Repo, p: &super::state::Pull) -> String {
    if let Some(m) = &p.merged {
        return format!(
            "Merged as <code class=\"mono\">{}</code>",
            escape(&m.sha[..m.sha.len().min(7)])
        );
    }
    if !p.open {
        return "Closed without merging".to_owned();
    }
    let outcome = r.mergeability_pair(p).and_then(|(base, head)| {
        let mb = r.objects.merge_base(&base, &head)?;
        super::merge::merge_commits(&r.objects, &mb, &base, &head)
    });
    match outcome {
        Some(super::merge::TreeMerge::Clean(_)) => {
            "<span class=\"state open\">No conflicts</span> This branch has no conflicts with the base branch".to_owned()
        }
        Some(super::merge::TreeMerge::Conflicts(paths)) => format!(
            "<span class=\"state closed\">Conflicts</span> This branch has conflicts that must be resolved: {}",
            paths
                .iter()
                .map(|f| format!("<code>{}</code>", escape(f)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => "<span class=\"state closed\">Conflicts</span> This branch has no history in common with the base branch".to_owned(),
    }
}

async fn pull(
    State(st): State<GithubState>,
    Path((owner, repo, number)): Path<(String, String, String)>,
) -> Response {
    let m = st.lock().await;
    let Ok(r) = m.repo(&owner, &repo) else {
        return not_found(&format!("repository {owner}/{repo}"));
    };
    let Some(p) = number.parse::<u64>().ok().and_then(|n| r.pulls.get(&n)) else {
        return not_found(&format!("pull request {number}"));
    };
    let (class, state) = match (p.open, p.draft) {
        (true, true) => ("draft", "Draft"),
        (true, false) => ("open", "Open"),
        (false, _) => ("closed", "Closed"),
    };
    let mut body = format!(
        "<h1>{} <span class=\"meta\">#{}</span></h1>\
         <p><span class=\"state {class}\">{state}</span> <b>{}</b> wants to merge \
         <code>{}</code> into <code>{}</code> · head <code class=\"mono\">{}</code> · opened {}</p>\
         <p>Labels: {}</p>",
        escape(&p.title),
        p.number,
        escape(&p.user),
        escape(&p.head_ref),
        escape(&p.base_ref),
        escape(&p.head_sha[..p.head_sha.len().min(7)]),
        fmt_time(p.created_at),
        if p.labels.is_empty() {
            "<span class=\"empty\">none</span>".to_owned()
        } else {
            labels(&p.labels)
        },
    );
    let _ = write!(body, "<p>{}</p>", merge_line(r, p));
    let _ = write!(
        body,
        "<div class=\"comment\"><div class=\"who\"><b>{}</b> opened this pull request</div><div class=\"body\">{}</div></div>",
        escape(&p.user),
        p.body
            .as_deref()
            .map(markdown)
            .unwrap_or_else(|| { "<p class=\"empty\">No description provided.</p>".to_owned() })
    );
    for c in r.comments.values().filter(|c| c.issue == p.number) {
        let edited = if c.updated_at > c.created_at {
            " · edited"
        } else {
            ""
        };
        let _ = write!(
            body,
            "<div class=\"comment\" id=\"issuecomment-{}\"><div class=\"who\"><b>{}</b> commented {}{edited}</div>\
             <div class=\"body\">{}</div></div>",
            c.id,
            escape(&c.user),
            fmt_time(c.created_at),
            markdown(&c.body)
        );
    }
    let runs: Vec<&Run> = r
        .runs
        .values()
        .filter(|run| run.pull_requests.contains(&p.number) || run.head_branch == p.head_ref)
        .collect();
    body.push_str("<h2>Workflow runs</h2>");
    runs_table(&mut body, r, &runs);
    page(&format!("{} #{}", p.title, p.number), &crumbs(r), &body)
}

fn runs_table(body: &mut String, r: &Repo, runs: &[&Run]) {
    if runs.is_empty() {
        body.push_str("<p class=\"empty\">None.</p>");
        return;
    }
    body.push_str(
        "<table><tr><th>Run</th><th>Title</th><th>Event</th><th>Status</th><th>Attempt</th></tr>",
    );
    for run in runs {
        let _ = write!(
            body,
            "<tr><td><a href=\"{}/actions/runs/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&repo_path(r)),
            run.id,
            run.id,
            escape(&run.display_title),
            escape(&run.event),
            escape(&status_text(&run.status, run.conclusion.as_deref())),
            run.run_attempt
        );
    }
    body.push_str("</table>");
}

fn status_text(status: &str, conclusion: Option<&str>) -> String {
    match conclusion {
        Some(c) => format!("{status}: {c}"),
        None => status.to_owned(),
    }
}

async fn run(
    State(st): State<GithubState>,
    Path((owner, repo, id)): Path<(String, String, String)>,
) -> Response {
    run_page(&st, &owner, &repo, &id, None).await
}

async fn run_of_job(
    State(st): State<GithubState>,
    Path((owner, repo, id, _job)): Path<(String, String, String, String)>,
) -> Response {
    run_page(&st, &owner, &repo, &id, None).await
}

async fn run_attempt(
    State(st): State<GithubState>,
    Path((owner, repo, id, attempt)): Path<(String, String, String, String)>,
) -> Response {
    match attempt.parse::<u64>() {
        Ok(n) if n >= 1 => run_page(&st, &owner, &repo, &id, Some(n)).await,
        _ => not_found(&format!("attempt {attempt}")),
    }
}

async fn run_page(
    st: &GithubState,
    owner: &str,
    repo: &str,
    id: &str,
    attempt: Option<u64>,
) -> Response {
    let m = st.lock().await;
    let Ok(r) = m.repo(owner, repo) else {
        return not_found(&format!("repository {owner}/{repo}"));
    };
    let Some(run) = id.parse::<u64>().ok().and_then(|n| r.runs.get(&n)) else {
        return not_found(&format!("workflow run {id}"));
    };
    let shown = attempt.unwrap_or(run.run_attempt);
    let (status, conclusion, actor, started, updated) = if shown == run.run_attempt {
        (
            run.status.as_str(),
            run.conclusion.as_deref(),
            run.triggering_actor.as_str(),
            run.run_started_at,
            run.updated_at,
        )
    } else if let Some(a) = run.past_attempts.iter().find(|a| a.attempt == shown) {
        (
            a.status.as_str(),
            a.conclusion.as_deref(),
            a.triggering_actor.as_str(),
            a.started_at,
            a.updated_at,
        )
    } else {
        return not_found(&format!("attempt {shown} of run {}", run.id));
    };
    let path = format!("{}/actions/runs/{}", repo_path(r), run.id);
    let mut body = format!(
        "<h1>{}</h1><p class=\"meta\">{} · run {} · attempt {shown} of {}</p>\
         <table><tr><th>Event</th><td>{}</td></tr><tr><th>Status</th><td>{}</td></tr>\
         <tr><th>Conclusion</th><td>{}</td></tr><tr><th>Branch</th><td class=\"mono\">{}</td></tr>\
         <tr><th>Commit</th><td class=\"mono\">{}</td></tr><tr><th>Triggered by</th><td>{}</td></tr>\
         <tr><th>Started</th><td>{}</td></tr><tr><th>Updated</th><td>{}</td></tr></table>",
        escape(&run.display_title),
        escape(&run.name),
        run.id,
        run.run_attempt,
        escape(&run.event),
        escape(status),
        escape(conclusion.unwrap_or("—")),
        escape(&run.head_branch),
        escape(&run.head_sha),
        escape(actor),
        fmt_time(started),
        fmt_time(updated),
    );
    if !run.pull_requests.is_empty() {
        let links: Vec<String> = run
            .pull_requests
            .iter()
            .map(|n| format!("<a href=\"{}/pull/{n}\">#{n}</a>", escape(&repo_path(r))))
            .collect();
        let _ = write!(body, "<p>Pull requests: {}</p>", links.join(", "));
    }
    body.push_str("<h2>Jobs</h2>");
    body.push_str("<table><tr><th>Job</th><th>Status</th></tr>");
    if run.jobs.is_empty() || shown != run.run_attempt {
        let _ = write!(
            body,
            "<tr><td id=\"job-{}\">{}</td><td>{}</td></tr>",
            run.job_id,
            escape(&run.name),
            escape(&status_text(status, conclusion)),
        );
    }
    if shown == run.run_attempt {
        for j in &run.jobs {
            let _ = write!(
                body,
                "<tr><td id=\"job-{}\">{}</td><td>{}</td></tr>",
                j.id,
                escape(&j.name),
                escape(&status_text(&j.status, j.conclusion.as_deref())),
            );
        }
    }
    body.push_str("</table>");
    body.push_str("<h2>Artifacts</h2>");
    let artifacts: Vec<_> = r
        .artifacts
        .values()
        .filter(|a| a.run_id == run.id)
        .collect();
    if artifacts.is_empty() {
        body.push_str("<p class=\"empty\">None.</p>");
    } else {
        body.push_str("<table><tr><th>Name</th><th>Size</th><th>Created</th></tr>");
        for a in artifacts {
            let _ = write!(
                body,
                "<tr><td class=\"mono\">{}</td><td>{} bytes</td><td>{}</td></tr>",
                escape(&a.name),
                a.zip.len(),
                fmt_time(a.created_at)
            );
        }
        body.push_str("</table>");
    }
    body.push_str(
        "<h2>Attempts</h2><table><tr><th>Attempt</th><th>Status</th><th>Triggered by</th></tr>",
    );
    for a in &run.past_attempts {
        let _ = write!(
            body,
            "<tr><td><a href=\"{}/attempts/{}\">#{}</a></td><td>{}</td><td>{}</td></tr>",
            escape(&path),
            a.attempt,
            a.attempt,
            escape(&status_text(&a.status, a.conclusion.as_deref())),
            escape(&a.triggering_actor)
        );
    }
    let _ = write!(
        body,
        "<tr><td><a href=\"{}/attempts/{}\">#{}</a> (latest)</td><td>{}</td><td>{}</td></tr></table>",
        escape(&path),
        run.run_attempt,
        run.run_attempt,
        escape(&status_text(&run.status, run.conclusion.as_deref())),
        escape(&run.triggering_actor)
    );
    page(
        &format!("{} · run {}", run.display_title, run.id),
        &crumbs(r),
        &body,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_hides_markers_and_escapes_raw_html() {
        let html = markdown(
            "<!-- klaud:report {\"a\":1} -->\n**Smoke** passed\n\n<details><summary>More</summary>\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n</details>\n\n<script>alert(1)</script> <img src=x onerror=alert(1)>\n\n<!--\nmulti\nline\n-->\nafter",
        );
        assert!(!html.contains("klaud:report"), "{html}");
        assert!(!html.contains("multi"), "{html}");
        assert!(html.contains("<strong>Smoke</strong>"), "{html}");
        assert!(html.contains("<table>"), "{html}");
        assert!(
            html.contains("<details>") && html.contains("<summary>"),
            "{html}"
        );
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
        assert!(html.contains("after"), "{html}");
        let links =
            markdown("[a](javascript:alert(1)) [b](https://github.com/o/r) [c](JaVaScript:x)");
        assert!(
            !links.to_ascii_lowercase().contains("javascript"),
            "{links}"
        );
        assert!(links.contains("href=\"https://github.com/o/r\""), "{links}");
    }

    #[test]
    fn only_bare_formatting_tags_pass() {
        assert!(allowed_tag("<details>"));
        assert!(allowed_tag("<details open>"));
        assert!(allowed_tag("</summary>"));
        assert!(allowed_tag("<br/>"));
        assert!(!allowed_tag("<b onclick=x>"));
        assert!(!allowed_tag("<a href=\"javascript:x\">"));
        assert!(!allowed_tag("<details open onmouseover=x>"));
    }
}
