//! Screenshots of what maintainers read, for a person to look at: the
//! dashboard issue's Markdown rendered as GitHub renders an issue (GFM,
//! 1012 px wide, GitHub-like styles) and the web dashboard, each taken by
//! headless Chromium. Only when `KLAUD_SCREENSHOTS` names a directory:
//! the PNGs (and the HTML they were taken of) go there.

use std::path::{Path, PathBuf};

/// GitHub's issue body column, in CSS pixels.
pub const ISSUE_WIDTH: u32 = 1012;

/// The directory `KLAUD_SCREENSHOTS` names, created; `None` when unset.
pub fn screenshot_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("KLAUD_SCREENSHOTS")?);
    std::fs::create_dir_all(&dir).expect("screenshot directory");
    Some(dir)
}

/// A stand-in for GitHub's `markdown-body` styles: its fonts, table,
/// code and task-list looks, enough to judge widths and wrapping.
const GITHUB_CSS: &str = r#"
body { margin: 0; background: #fff; }
.markdown-body { box-sizing: border-box; width: 1012px; padding: 16px; color: #1f2328;
  font: 14px/1.5 -apple-system, BlinkMacSystemFont, "Segoe UI", "Noto Sans", Helvetica, Arial, "Noto Sans CJK SC", "WenQuanYi Zen Hei", sans-serif; word-wrap: break-word; }
.markdown-body h2 { font-size: 1.5em; border-bottom: 1px solid #d1d9e0b3; padding-bottom: .3em; margin: 24px 0 16px; }
.markdown-body h3 { font-size: 1.25em; margin: 24px 0 16px; }
.markdown-body p, .markdown-body ul, .markdown-body table, .markdown-body blockquote { margin: 0 0 16px; }
.markdown-body ul { padding-left: 2em; }
.markdown-body code { font: 85%/1.45 ui-monospace, SFMono-Regular, "SF Mono", Menlo, monospace; background: #818b981f; border-radius: 6px; padding: .2em .4em; white-space: break-spaces; }
.markdown-body table { display: block; width: max-content; max-width: 100%; overflow: auto; border-collapse: collapse; }
.markdown-body th, .markdown-body td { border: 1px solid #d1d9e0; padding: 6px 13px; }
.markdown-body th { font-weight: 600; }
.markdown-body tr:nth-child(2n) { background: #f6f8fa; }
.markdown-body a { color: #0969da; text-decoration: none; }
.markdown-body li.task-list-item { list-style: none; }
.markdown-body li.task-list-item input { margin: 0 .2em .25em -1.4em; vertical-align: middle; }
.markdown-body blockquote { padding: 0 1em; color: #59636e; border-left: .25em solid #d1d9e0; }
"#;

/// `markdown` as GitHub shows an issue body: GFM to HTML, in the issue
/// column's width and styles.
pub fn github_issue_html(title: &str, markdown: &str) -> String {
    use pulldown_cmark::{Options, Parser, html};
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_GFM;
    let mut body = String::new();
    html::push_html(&mut body, Parser::new_ext(markdown, options));
    format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{title}</title><style>{GITHUB_CSS}</style></head><body><div class=\"markdown-body\"><h1>{title}</h1>{body}</div></body></html>\n"
    )
}

/// Chromium, where Debian installs it; `None` when it is not installed.
pub fn chromium() -> Option<PathBuf> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// Headless Chromium with a throwaway `profile` and nothing of its own
/// on the network: every page test starts from this.
pub fn chromium_cmd(bin: &Path, profile: &Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(bin);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    cmd
}

/// Takes a `width` px wide screenshot of `url` into `png`, tall enough for
/// `height` px; `false` (said loudly) without Chromium.
pub fn screenshot(url: &str, png: &Path, width: u32, height: u32) -> bool {
    let Some(bin) = chromium() else {
        eprintln!("SKIP: chromium is not installed; no screenshot of {url}");
        return false;
    };
    let profile = tempfile::tempdir().expect("profile");
    let out = chromium_cmd(&bin, profile.path())
        .arg("--hide-scrollbars")
        .arg(format!("--window-size={width},{height}"))
        .arg(format!("--screenshot={}", png.display()))
        .arg(url)
        .output()
        .expect("run chromium");
    assert!(
        out.status.success() && png.is_file(),
        "chromium: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("screenshot: {}", png.display());
    true
}

/// Screenshots the dashboard issue `body` as GitHub shows it, into
/// `<dir>/<name>.png` (and its HTML beside it), when asked for.
pub fn screenshot_issue(name: &str, body: &str) {
    let Some(dir) = screenshot_dir() else {
        return;
    };
    let page = github_issue_html("Klaud dashboard / Klaud 看板", body);
    let html = dir.join(format!("{name}.html"));
    std::fs::write(&html, &page).expect("write html");
    // Tall enough for the body: a line of Markdown is at most a few lines
    // on screen.
    let height = (300 + 26 * body.lines().count()).min(16_000) as u32;
    screenshot(
        &format!("file://{}", html.display()),
        &dir.join(format!("{name}.png")),
        ISSUE_WIDTH,
        height,
    );
}

/// The page a test opens in Chromium to read the dashboard as the browser
/// built it: the dashboard in a same-origin frame, and once it loaded,
/// what the rows matching `SELECTOR` hold, written into `#probe` as JSON.
/// Per row: each cell's rendered text by its `data-label`, and the
/// elements inside the row the page's own markup never makes (a script,
/// an image, a frame, an element with an event handler) — what hostile
/// text would become if it were not escaped. `pwned` is set when a
/// payload ran.
const PROBE_PAGE: &str = r#"<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>
<iframe id="page" src="/" style="width:1280px;height:2400px"></iframe>
<pre id="probe">not loaded</pre>
<script>
const frame = document.getElementById('page');
frame.addEventListener('load', () => {
  const doc = frame.contentDocument;
  const foreign = 'script, img, iframe, object, embed, svg, style, link, a, [onerror], [onload], [onclick], [onmouseover]';
  const rows = [...doc.querySelectorAll(SELECTOR)].map(tr => {
    const cells = {};
    for (const td of tr.querySelectorAll('td')) {
      cells[td.dataset.label || ''] = td.innerText.trim();
    }
    return { cells, foreign: tr.querySelectorAll(foreign).length };
  });
  const pwned = !!(window.__pwned || frame.contentWindow.__pwned);
  document.getElementById('probe').textContent = JSON.stringify({ rows, pwned });
});
</script></body></html>"#;

/// Serves `snapshot` on the dashboard's own router (on loopback) and
/// returns what headless Chromium read from the DOM of its page for the
/// rows matching the CSS `selector` (see [`PROBE_PAGE`]); `None` without
/// Chromium.
pub async fn dashboard_dom_rows(
    snapshot: klaud_service::dashboard::StatusSnapshot,
    selector: &str,
) -> Option<serde_json::Value> {
    let bin = chromium()?;
    let (sender, receiver) = tokio::sync::watch::channel(std::sync::Arc::new(snapshot));
    let probe = PROBE_PAGE.replace(
        "SELECTOR",
        &serde_json::to_string(selector).expect("a JSON string"),
    );
    let app = klaud_service::dashboard::router(receiver).route(
        "/klaud-test-probe",
        axum::routing::get(move || async move { axum::response::Html(probe) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!(
        "http://{}/klaud-test-probe",
        listener.local_addr().expect("addr")
    );
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let profile = tempfile::tempdir().expect("profile");
    let out = tokio::task::spawn_blocking({
        let profile = profile.path().to_owned();
        move || {
            chromium_cmd(&bin, &profile)
                .arg("--dump-dom")
                .arg(url)
                .output()
                .expect("run chromium")
        }
    })
    .await
    .expect("chromium task");
    server.abort();
    drop(sender);
    assert!(
        out.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dom = String::from_utf8_lossy(&out.stdout);
    let probe = dom
        .split_once("<pre id=\"probe\">")
        .and_then(|(_, rest)| rest.split_once("</pre>"))
        .map(|(text, _)| text)
        .unwrap_or_else(|| panic!("no probe in the DOM: {dom}"));
    // The DOM serializer escapes a text node's `&`, `<` and `>` (and a
    // no-break space); `&amp;` last, so an escaped entity stays as written.
    let json = probe
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&");
    Some(serde_json::from_str(&json).unwrap_or_else(|e| panic!("the probe's JSON ({e}): {json}")))
}
