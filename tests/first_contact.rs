//! What a newcomer sees first: every link on the dashboard opens a page of
//! the simulated GitHub (PR, run attempt, repository), report comments link
//! runs over loopback HTTP, the budget chart is drawn, and the plan is on
//! the page before the first wave (a dry run that claims nothing).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use klaud_claims::Claimant;
use klaud_lifecycle::engine::MemoryJournal;
use klaud_sandbox::stack::SandboxStack;
use klaud_service::daemon::serve::{Daemon, ServeSettings, http_router};
use klaud_service::dashboard::SnapshotFeed;
use tokio::sync::{Notify, watch};

use crate::support::{Harness, REPO, serve_settings, wait_for};

fn settings(wave_on_start: bool) -> ServeSettings {
    serve_settings(
        Claimant::new(uuid::Uuid::new_v4()),
        crate::support::engine_config(42),
        10,
        wave_on_start,
    )
}

/// The daemon as `klaud demo` builds it: the repository heading links to
/// the sandbox's repository page.
async fn daemon(stack: &SandboxStack, settings: ServeSettings) -> (Daemon, SnapshotFeed) {
    let (daemon, feed) =
        crate::support::daemon(stack, settings, Arc::new(MemoryJournal::new())).await;
    let web = format!("{}/_html/{REPO}", stack.github.url());
    (daemon.with_web_url(REPO, web), feed)
}

fn http() -> reqwest::Client {
    klaud_http::http_client_builder()
        .no_proxy()
        .build()
        .expect("HTTP client")
}

/// Every `href` of a page, unescaped.
fn hrefs(page: &str) -> Vec<String> {
    page.split("href=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(|h| h.replace("&amp;", "&"))
        .collect()
}

async fn get_page(url: &str) -> String {
    let resp = http().get(url).send().await.expect("GET page");
    assert_eq!(resp.status(), 200, "{url}");
    let kind = resp.headers()["content-type"]
        .to_str()
        .unwrap_or("")
        .to_owned();
    assert!(kind.starts_with("text/html"), "{url}: {kind}");
    resp.text().await.expect("page text")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_link_opens_a_sandbox_page_and_the_budget_chart_is_drawn() {
    let stack = Harness::demo()
        .demo_ci()
        .poll(Duration::from_millis(20))
        .start_stack()
        .await;
    let (daemon, mut feed) = daemon(&stack, settings(true)).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let server = tokio::spawn({
        let app = http_router(feed.clone(), None);
        async move { axum::serve(listener, app).await }
    });
    let (stop_tx, stop) = watch::channel(false);
    let running = tokio::spawn(async move { daemon.run(Arc::new(Notify::new()), stop).await });
    wait_for(&mut feed, "every candidate's outcome", |s| {
        s.repositories
            .iter()
            .all(|r| !r.candidates.is_empty() && r.candidates.iter().all(|c| c.outcome.is_some()))
            && !s.repositories.is_empty()
    })
    .await;

    let dashboard = get_page(&format!("{base}/")).await;
    assert!(
        dashboard.contains("<svg") && dashboard.contains("<polyline"),
        "no budget chart on the dashboard"
    );
    let pages = format!("{}/_html/{REPO}", stack.github.url());
    let links = hrefs(&dashboard);
    assert!(
        links.contains(&pages),
        "the repository heading links to {pages}: {links:?}"
    );
    let mut kinds = BTreeSet::new();
    for link in &links {
        assert!(link.starts_with(&pages), "{link} is not a sandbox page");
        let page = get_page(link).await;
        let rest = &link[pages.len()..];
        if rest.is_empty() {
            kinds.insert("repository");
            assert!(page.contains("Open pull requests") && page.contains("Branches"));
            assert!(page.contains("klaud/auto-"), "candidate branches listed");
        } else if let Some(n) = rest.strip_prefix("/pull/") {
            kinds.insert("pull");
            assert!(page.contains(&format!("#{n}")), "{link}");
            assert!(
                ["Open", "Draft", "Closed"]
                    .iter()
                    .any(|s| page.contains(&format!(">{s}</span>"))),
                "{link}: no state"
            );
            // Hidden markers stay hidden; comments are rendered Markdown.
            assert!(
                !page.contains("&lt;!--") && !page.contains("<!--"),
                "{link}"
            );
            assert!(
                page.contains("<strong>") || page.contains("<table>"),
                "{link}"
            );
            // Report comments link their runs over loopback HTTP.
            let run_links: Vec<String> = hrefs(&page)
                .into_iter()
                .filter(|h| h.starts_with(&format!("{pages}/actions/runs/")))
                .collect();
            assert!(!run_links.is_empty(), "{link}: no run link in the comments");
            for run in run_links {
                get_page(&run).await;
            }
        } else if let Some(run) = rest.strip_prefix("/actions/runs/") {
            kinds.insert("run");
            for field in [
                "Event",
                "Status",
                "Conclusion",
                "Jobs",
                "Artifacts",
                "Attempts",
            ] {
                assert!(page.contains(field), "{link}: {field} missing");
            }
            if let Some((_, n)) = run.split_once("/attempts/") {
                kinds.insert("attempt");
                assert!(page.contains(&format!("attempt {n} of")), "{link}");
            }
        }
    }
    for kind in ["repository", "pull", "run", "attempt"] {
        assert!(kinds.contains(kind), "no {kind} link on the dashboard");
    }
    // An earlier attempt of a re-run run has its own page.
    let rerun = links
        .iter()
        .find(|l| l.ends_with("/attempts/2"))
        .expect("a re-run");
    let first = get_page(&rerun.replace("/attempts/2", "/attempts/1")).await;
    assert!(first.contains("attempt 1 of 2"), "{first}");

    // In a real browser the PR page shows the rendered report, never a
    // hidden marker.
    if let Some(pull) = links.iter().find(|l| l.contains("/pull/")) {
        match browser_dom(pull).await {
            Some(dom) => {
                assert!(dom.contains("<strong>"), "{dom}");
                assert!(!dom.contains("klaud-outcome"), "a marker is in the DOM");
            }
            None => {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "chromium is missing (apt-get install -y chromium)"
                );
                eprintln!(
                    "SKIP: chromium is not installed; the PR page was not opened in a browser"
                );
            }
        }
    }

    stop_tx.send(true).expect("stop");
    running.await.expect("daemon task").expect("daemon");
    server.abort();
}

/// The DOM headless Chromium builds for `url`; `None` without Chromium.
pub(crate) async fn browser_dom(url: &str) -> Option<String> {
    let bin = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.exists())?;
    let profile = tempfile::tempdir().expect("profile");
    let url = url.to_owned();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(bin)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--dump-dom",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(url)
            .output()
            .expect("run chromium")
    })
    .await
    .expect("chromium task");
    assert!(
        out.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_a_plan_before_the_first_wave_without_claiming() {
    let stack = Harness::demo()
        .demo_ci()
        .poll(Duration::from_millis(20))
        .start_stack()
        .await;
    let (daemon, mut feed) = daemon(&stack, settings(false)).await;
    let (stop_tx, stop) = watch::channel(false);
    let running = tokio::spawn(async move { daemon.run(Arc::new(Notify::new()), stop).await });
    wait_for(&mut feed, "the dry-run plan", |s| {
        s.repositories.iter().any(|r| !r.families.is_empty())
    })
    .await;
    let snapshot = Arc::clone(&feed.borrow());
    assert_eq!(snapshot.waves_total, 0, "no wave ran");
    let repo = &snapshot.repositories[0];
    assert!(
        repo.families.iter().any(|f| f.status.starts_with("stale")),
        "the demo has stale families: {:?}",
        repo.families
    );
    assert!(
        repo.families
            .iter()
            .filter(|f| f.status == "stale-newer")
            .all(|f| f.stale_hours.is_some()),
        "Stale for is filled in: {:?}",
        repo.families
    );
    assert!(repo.candidates.is_empty() && repo.claims.is_empty());
    let page = klaud_service::dashboard::render_page(&snapshot);
    assert!(!page.contains("No plan yet"), "the page shows the plan");
    stop_tx.send(true).expect("stop");
    running.await.expect("daemon task").expect("daemon");
    // Nothing was claimed or opened on GitHub.
    let refs = stack.state().request_log().await;
    assert!(
        refs.iter()
            .all(|e| e.method == "GET" || e.method == "HEAD" || e.path == "/graphql"),
        "a dry run wrote: {:?}",
        refs.iter()
            .filter(|e| e.method != "GET" && e.method != "HEAD")
            .collect::<Vec<_>>()
    );
}
