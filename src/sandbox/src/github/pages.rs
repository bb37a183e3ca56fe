//! Readable web pages at the simulator's `html_url`s, shaped like GitHub's:
//! a repository (open pull requests, branches, other refs), a pull request
//! (title, state, draft, labels, author, head, the rendered body and
//! comments), an issue (title, state, labels, the rendered body with its
//! task-list boxes, comments) and a workflow run (title, event, status, conclusion, jobs,
//! artifacts, attempts, `…/attempts/<n>` for an earlier one).
//!
//! Markdown goes through `pulldown-cmark` (GitHub-flavoured extensions);
//! raw HTML in it is escaped, except HTML comments, which are dropped the
//! way GitHub hides them, and a few bare formatting tags GitHub's sanitizer
//! keeps. Pages are built with maud, which escapes every other value by
//! construction. Pages are not API calls: they skip
//! the rate limit and the request log.

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, PreEscaped, html};
use pulldown_cmark::{CowStr, Event, Options, Parser, Tag};

use super::state::{GithubState, Repo, Run, fmt_time};

/// The page routes, nested under `/_html`.
pub fn router() -> axum::Router<GithubState> {
    use axum::routing::get;
    axum::Router::new()
        .route("/{owner}/{repo}", get(repository))
        .route("/{owner}/{repo}/pull/{number}", get(pull))
        .route("/{owner}/{repo}/issues/{number}", get(issue))
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

fn page(title: &str, crumbs: Markup, body: Markup) -> Response {
    let html = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · GitHub simulator" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header.top { "GitHub simulator · " (crumbs) }
                (body)
            }
        }
    };
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        html.into_string() + "\n",
    )
        .into_response()
}

fn not_found(what: &str) -> Response {
    let mut resp = page(
        "Not found",
        html! {},
        html! { h1 { "404" } p { (what) " does not exist." } },
    );
    *resp.status_mut() = StatusCode::NOT_FOUND;
    resp
}

fn repo_path(r: &Repo) -> String {
    format!("/_html/{}/{}", r.owner, r.name)
}

fn crumbs(r: &Repo) -> Markup {
    html! { a href=(repo_path(r)) { (r.full_name()) } }
}

fn first_line(message: &str) -> &str {
    message.lines().next().unwrap_or("")
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(7)]
}

fn empty() -> Markup {
    html! { p.empty { "None." } }
}

async fn repository(
    State(st): State<GithubState>,
    Path((owner, repo)): Path<(String, String)>,
) -> Response {
    let m = st.lock().await;
    let Ok(r) = m.repo(&owner, &repo) else {
        return not_found(&format!("repository {owner}/{repo}"));
    };
    let path = repo_path(r);
    let open: Vec<_> = r.pulls.values().rev().filter(|p| p.open).collect();
    let (branches, other): (Vec<_>, Vec<_>) = r
        .refs
        .iter()
        .partition(|(name, _)| name.starts_with("refs/heads/"));
    let body = html! {
        h1 { (r.full_name()) }
        p.meta { "default branch " code { (r.default_branch) } }
        h2 { "Open pull requests" }
        @if open.is_empty() {
            (empty())
        } @else {
            table {
                tr { th { "#" } th { "Title" } th { "Author" } th { "Head" } th { "Labels" } }
                @for p in open {
                    tr {
                        td { a href={ (path) "/pull/" (p.number) } { "#" (p.number) } }
                        td {
                            @if p.draft { span.label { "Draft" } " " }
                            a href={ (path) "/pull/" (p.number) } { (p.title) }
                        }
                        td { (p.user) }
                        td.mono { (p.head_ref) }
                        td { (labels(&p.labels)) }
                    }
                }
            }
        }
        h2 { "Branches" }
        (refs_table(r, &branches, "refs/heads/"))
        // Claim refs live under refs/heads/, recovery leases and the like
        // may not: both tables show each tip's commit message, which is
        // where such records are written.
        h2 { "Other refs" }
        (refs_table(r, &other, ""))
    };
    page(&r.full_name(), crumbs(r), body)
}

fn refs_table(r: &Repo, refs: &[(&String, &String)], strip: &str) -> Markup {
    if refs.is_empty() {
        return empty();
    }
    let path = repo_path(r);
    html! {
        table {
            tr { th { "Ref" } th { "Commit" } th { "Updated" } th { "Message" } th { "Pull request" } }
            @for (name, sha) in refs {
                @let commit = r.objects.commits.get(sha.as_str());
                @let pr = r
                    .pulls
                    .values()
                    .rev()
                    .find(|p| name.strip_prefix("refs/heads/") == Some(p.head_ref.as_str()));
                tr {
                    td.mono { (name.strip_prefix(strip).unwrap_or(name)) }
                    td.mono { (short(sha)) }
                    td { (commit.map(|c| fmt_time(c.committer.date)).unwrap_or_default()) }
                    td.mono { (commit.map(|c| first_line(&c.message)).unwrap_or("")) }
                    td {
                        @if let Some(p) = pr {
                            a href={ (path) "/pull/" (p.number) } { "#" (p.number) }
                        }
                    }
                }
            }
        }
    }
}

fn labels(names: &[String]) -> Markup {
    html! {
        @for l in names { span.label { (l) } }
    }
}

/// The merge box of a pull request page: the web page computes what the
/// API's `mergeable` only answers on a second read, and names the
/// conflicting files as GitHub's page does.
fn merge_line(r: &Repo, p: &super::state::Pull) -> Markup {
    if let Some(m) = &p.merged {
        return html! { "Merged as " code.mono { (short(&m.sha)) } };
    }
    if !p.open {
        return html! { "Closed without merging" };
    }
    let outcome = r.mergeability_pair(p).and_then(|(base, head)| {
        let mb = r.objects.merge_base(&base, &head)?;
        super::merge::merge_commits(&r.objects, &mb, &base, &head)
    });
    html! {
        @match outcome {
            Some(super::merge::TreeMerge::Clean(_)) => {
                span.state.open { "No conflicts" }
                " This branch has no conflicts with the base branch"
            }
            Some(super::merge::TreeMerge::Conflicts(paths)) => {
                span.state.closed { "Conflicts" }
                " This branch has conflicts that must be resolved: "
                @for (i, f) in paths.iter().enumerate() {
                    @if i > 0 { ", " }
                    code { (f) }
                }
            }
            None => {
                span.state.closed { "Conflicts" }
                " This branch has no history in common with the base branch"
            }
        }
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
    let runs: Vec<&Run> = r
        .runs
        .values()
        .filter(|run| run.pull_requests.contains(&p.number) || run.head_branch == p.head_ref)
        .collect();
    let body = html! {
        h1 { (p.title) " " span.meta { "#" (p.number) } }
        p {
            span class={ "state " (class) } { (state) }
            " " b { (p.user) } " wants to merge "
            code { (p.head_ref) } " into " code { (p.base_ref) }
            " · head " code.mono { (short(&p.head_sha)) }
            " · opened " (fmt_time(p.created_at))
        }
        p {
            "Labels: "
            @if p.labels.is_empty() { span.empty { "none" } } @else { (labels(&p.labels)) }
        }
        p { (merge_line(r, p)) }
        div.comment {
            div.who { b { (p.user) } " opened this pull request" }
            div.body {
                @match p.body.as_deref() {
                    // Markdown rendered and sanitized by `markdown`.
                    Some(text) => (PreEscaped(markdown(text))),
                    None => p.empty { "No description provided." },
                }
            }
        }
        @for c in r.comments.values().filter(|c| c.issue == p.number) {
            div.comment id={ "issuecomment-" (c.id) } {
                div.who {
                    b { (c.user) } " commented " (fmt_time(c.created_at))
                    @if c.updated_at > c.created_at { " · edited" }
                }
                div.body { (PreEscaped(markdown(&c.body))) }
            }
        }
        h2 { "Workflow runs" }
        (runs_table(r, &runs))
    };
    page(&format!("{} #{}", p.title, p.number), crumbs(r), body)
}

async fn issue(
    State(st): State<GithubState>,
    Path((owner, repo, number)): Path<(String, String, String)>,
) -> Response {
    let m = st.lock().await;
    let Ok(r) = m.repo(&owner, &repo) else {
        return not_found(&format!("repository {owner}/{repo}"));
    };
    let Some(i) = number.parse::<u64>().ok().and_then(|n| r.issues.get(&n)) else {
        return not_found(&format!("issue {number}"));
    };
    let (class, state) = if i.open {
        ("open", "Open")
    } else {
        ("closed", "Closed")
    };
    let body = html! {
        h1 { (i.title) " " span.meta { "#" (i.number) } }
        p {
            span class={ "state " (class) } { (state) }
            " " b { (i.user) } " opened this issue " (fmt_time(i.created_at))
            @if let Some((who, at)) = &i.last_edit { " · edited by " b { (who) } " " (fmt_time(*at)) }
        }
        p {
            "Labels: "
            @if i.labels.is_empty() { span.empty { "none" } } @else { (labels(&i.labels)) }
        }
        div.comment {
            div.body {
                @match i.body.as_deref() {
                    // Markdown rendered and sanitized by `markdown`.
                    Some(text) => (PreEscaped(markdown(text))),
                    None => p.empty { "No description provided." },
                }
            }
        }
        @for c in r.comments.values().filter(|c| c.issue == i.number) {
            div.comment id={ "issuecomment-" (c.id) } {
                div.who { b { (c.user) } " commented " (fmt_time(c.created_at)) }
                div.body { (PreEscaped(markdown(&c.body))) }
            }
        }
    };
    page(&format!("{} #{}", i.title, i.number), crumbs(r), body)
}

fn runs_table(r: &Repo, runs: &[&Run]) -> Markup {
    if runs.is_empty() {
        return empty();
    }
    let path = repo_path(r);
    html! {
        table {
            tr { th { "Run" } th { "Title" } th { "Event" } th { "Status" } th { "Attempt" } }
            @for run in runs {
                tr {
                    td { a href={ (path) "/actions/runs/" (run.id) } { (run.id) } }
                    td { (run.display_title) }
                    td { (run.event) }
                    td { (status_text(&run.status, run.conclusion.as_deref())) }
                    td { (run.run_attempt) }
                }
            }
        }
    }
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
    let repo_path = repo_path(r);
    let path = format!("{repo_path}/actions/runs/{}", run.id);
    let latest = shown == run.run_attempt;
    let artifacts: Vec<_> = r
        .artifacts
        .values()
        .filter(|a| a.run_id == run.id)
        .collect();
    let body = html! {
        h1 { (run.display_title) }
        p.meta { (run.name) " · run " (run.id) " · attempt " (shown) " of " (run.run_attempt) }
        table {
            tr { th { "Event" } td { (run.event) } }
            tr { th { "Status" } td { (status) } }
            tr { th { "Conclusion" } td { (conclusion.unwrap_or("—")) } }
            tr { th { "Branch" } td.mono { (run.head_branch) } }
            tr { th { "Commit" } td.mono { (run.head_sha) } }
            tr { th { "Triggered by" } td { (actor) } }
            tr { th { "Started" } td { (fmt_time(started)) } }
            tr { th { "Updated" } td { (fmt_time(updated)) } }
        }
        @if !run.pull_requests.is_empty() {
            p {
                "Pull requests: "
                @for (i, n) in run.pull_requests.iter().enumerate() {
                    @if i > 0 { ", " }
                    a href={ (repo_path) "/pull/" (n) } { "#" (n) }
                }
            }
        }
        h2 { "Jobs" }
        table {
            tr { th { "Job" } th { "Status" } }
            @if run.jobs.is_empty() || !latest {
                tr {
                    td id={ "job-" (run.job_id) } { (run.name) }
                    td { (status_text(status, conclusion)) }
                }
            }
            @if latest {
                @for j in &run.jobs {
                    tr {
                        td id={ "job-" (j.id) } { (j.name) }
                        td { (status_text(&j.status, j.conclusion.as_deref())) }
                    }
                }
            }
        }
        h2 { "Artifacts" }
        @if artifacts.is_empty() {
            (empty())
        } @else {
            table {
                tr { th { "Name" } th { "Size" } th { "Created" } }
                @for a in artifacts {
                    tr {
                        td.mono { (a.name) }
                        td { (a.zip.len()) " bytes" }
                        td { (fmt_time(a.created_at)) }
                    }
                }
            }
        }
        h2 { "Attempts" }
        table {
            tr { th { "Attempt" } th { "Status" } th { "Triggered by" } }
            @for a in &run.past_attempts {
                tr {
                    td { a href={ (path) "/attempts/" (a.attempt) } { "#" (a.attempt) } }
                    td { (status_text(&a.status, a.conclusion.as_deref())) }
                    td { (a.triggering_actor) }
                }
            }
            tr {
                td { a href={ (path) "/attempts/" (run.run_attempt) } { "#" (run.run_attempt) } " (latest)" }
                td { (status_text(&run.status, run.conclusion.as_deref())) }
                td { (run.triggering_actor) }
            }
        }
    };
    page(
        &format!("{} · run {}", run.display_title, run.id),
        crumbs(r),
        body,
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
    fn values_are_escaped_by_construction() {
        let hostile = "<script>alert(\"x\")</script> & 'q'";
        let html = labels(&[hostile.to_owned()]).into_string();
        assert_eq!(
            html,
            "<span class=\"label\">&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; 'q'</span>"
        );
        let resp = page(hostile, html! {}, html! { p { (hostile) } });
        assert_eq!(resp.status(), StatusCode::OK);
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
