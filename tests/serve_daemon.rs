//! The daemon (`klaud serve`'s loop) over the sandbox: the dashboard in a
//! real browser, two instances sharing one repository, a killed instance
//! recovered by the other after its leases expire, and no credential in
//! logs, errors or the page.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::support::{chromium, chromium_cmd};
use klaud_claims::{Claimant, PullNumber};
use klaud_lifecycle::engine::{Journal, MemoryJournal, Step};
use klaud_sandbox::stack::{BOT_TOKEN, SandboxStack};
use klaud_service::daemon::serve::{Daemon, RepoService, ServeSettings, http_router};
use klaud_service::dashboard::StatusSnapshot;
use tokio::sync::{Notify, watch};

use crate::support::{Harness, REPO, daemon, serve_settings, wait_for, write_klaud_toml};

fn settings(claimant: Claimant, max: usize, lease: chrono::TimeDelta) -> ServeSettings {
    let mut engine = crate::support::engine_config(42);
    engine.lease = lease;
    serve_settings(claimant, engine, max, true)
}

fn all_finished(s: &StatusSnapshot) -> bool {
    !s.repositories.is_empty()
        && s.repositories
            .iter()
            .all(|r| !r.candidates.is_empty() && r.candidates.iter().all(|c| c.outcome.is_some()))
}

/// Every PR of the sandbox repository: number → head branch.
async fn pulls(stack: &SandboxStack) -> Vec<(u64, String)> {
    let url = format!(
        "{}/repos/{REPO}/pulls?state=all&per_page=100",
        stack.github.url()
    );
    let body: serde_json::Value = http()
        .get(url)
        .bearer_auth(BOT_TOKEN)
        .header("user-agent", "klaud-test")
        .send()
        .await
        .expect("list pulls")
        .json()
        .await
        .expect("pulls JSON");
    body.as_array()
        .expect("pull list")
        .iter()
        .map(|p| {
            (
                p["number"].as_u64().expect("number"),
                p["head"]["ref"].as_str().expect("head ref").to_owned(),
            )
        })
        .collect()
}

/// Loopback only: never through a proxy from the environment.
fn http() -> reqwest::Client {
    klaud_http::http_client_builder()
        .no_proxy()
        .build()
        .expect("HTTP client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_shows_every_candidate_with_its_pr_and_outcome_in_chromium() {
    let Some(browser) = chromium() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "chromium is missing (apt-get install -y chromium)"
        );
        eprintln!("SKIP: chromium is not installed; the dashboard browser test did not run");
        return;
    };
    let stack = Harness::demo()
        .demo_ci()
        .poll(Duration::from_millis(20))
        .start_stack()
        .await;
    let journal: Arc<dyn Journal> = Arc::new(MemoryJournal::new());
    let claimant = Claimant::new(uuid::Uuid::new_v4());
    let (daemon, mut feed) = daemon(
        &stack,
        settings(claimant, 10, chrono::TimeDelta::hours(2)),
        Arc::clone(&journal),
    )
    .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn({
        let app = http_router(feed.clone(), None);
        async move { axum::serve(listener, app).await }
    });
    let (stop_tx, stop) = watch::channel(false);
    let running = tokio::spawn(async move { daemon.run(Arc::new(Notify::new()), stop).await });
    wait_for(&mut feed, "every candidate's outcome", all_finished).await;

    // The JSON API matches the sandbox: the same candidates and PR numbers.
    let base = format!("http://{addr}");
    let status: serde_json::Value = http()
        .get(format!("{base}/api/v1/status"))
        .send()
        .await
        .expect("status")
        .json()
        .await
        .expect("status JSON");
    let repo = &status["repositories"][0];
    assert_eq!(repo["name"], REPO, "{status:#}");
    let api: BTreeMap<String, u64> = repo["candidates"]
        .as_array()
        .expect("candidates")
        .iter()
        .map(|c| {
            let label = c["pull_request"]["label"].as_str().expect("PR link");
            (
                c["id"].as_str().expect("id").to_owned(),
                label.trim_start_matches('#').parse().expect("PR number"),
            )
        })
        .collect();
    let sandbox: BTreeMap<String, u64> = pulls(&stack)
        .await
        .into_iter()
        .filter_map(|(n, head)| Some((head.strip_prefix("klaud/auto-")?.to_owned(), n)))
        .collect();
    assert_eq!(api, sandbox, "API candidates and PRs vs the sandbox");
    let records = journal.list().await.expect("journal");
    assert_eq!(records.len(), api.len());
    assert!(records.iter().all(|r| r.step == Step::Done));
    assert!(
        !repo["families"].as_array().expect("families").is_empty(),
        "families from the plan"
    );

    // The page in a real browser.
    let profile = tempfile::tempdir().expect("profile");
    let dom = tokio::task::spawn_blocking({
        let (browser, profile, url) = (browser.clone(), profile.path().to_owned(), base.clone());
        move || {
            chromium_cmd(&browser, &profile)
                .arg("--dump-dom")
                .arg(format!("{url}/"))
                .output()
                .expect("run chromium")
        }
    })
    .await
    .expect("chromium task");
    assert!(
        dom.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&dom.stderr)
    );
    let dom = String::from_utf8_lossy(&dom.stdout).into_owned();
    for c in repo["candidates"].as_array().expect("candidates") {
        let family = c["family"].as_str().expect("family");
        let key = family.rsplit(':').next().expect("key");
        assert!(dom.contains(key), "{key} missing from the page");
        let pr = c["pull_request"]["url"].as_str().expect("PR url");
        assert!(dom.contains(pr), "PR link {pr} missing from the page");
    }
    for outcome in ["validated", "failed"] {
        assert!(
            dom.contains(outcome),
            "outcome {outcome} missing from the page"
        );
    }
    assert!(!dom.contains(BOT_TOKEN), "the token reached the page");

    let shots = Path::new(env!("CARGO_TARGET_TMPDIR"));
    for (w, h) in [(1280, 800), (390, 844)] {
        let file = shots.join(format!("dashboard-{w}x{h}.png"));
        let _ = std::fs::remove_file(&file);
        let out = tokio::task::spawn_blocking({
            let (browser, profile, url, file) = (
                browser.clone(),
                profile.path().to_owned(),
                base.clone(),
                file.clone(),
            );
            move || {
                chromium_cmd(&browser, &profile)
                    .arg(format!("--screenshot={}", file.display()))
                    .arg(format!("--window-size={w},{h}"))
                    .arg("--hide-scrollbars")
                    .arg(format!("{url}/"))
                    .output()
                    .expect("run chromium")
            }
        })
        .await
        .expect("chromium task");
        assert!(
            out.status.success() && file.exists(),
            "screenshot {}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("screenshot: {}", file.display());
    }

    stop_tx.send(true).expect("stop");
    running.await.expect("daemon task").expect("daemon");
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_split_families_and_one_recovers_the_other_after_its_lease() {
    let stack = Harness::demo()
        .demo_ci()
        .poll(Duration::from_millis(20))
        .start_stack()
        .await;
    let lease = chrono::TimeDelta::seconds(4);
    let a_journal = Arc::new(MemoryJournal::new());
    let b_journal = Arc::new(MemoryJournal::new());
    let (a, mut a_feed) = daemon(
        &stack,
        settings(Claimant::new(uuid::Uuid::new_v4()), 2, lease),
        Arc::clone(&a_journal) as Arc<dyn Journal>,
    )
    .await;
    let (b, mut b_feed) = daemon(
        &stack,
        settings(Claimant::new(uuid::Uuid::new_v4()), 2, lease),
        Arc::clone(&b_journal) as Arc<dyn Journal>,
    )
    .await;
    let (_a_stop_tx, a_stop) = watch::channel(false);
    let a_task = tokio::spawn(async move { a.run(Arc::new(Notify::new()), a_stop).await });
    wait_for(&mut a_feed, "instance A's first wave", |s| {
        s.waves_total >= 1 && s.repositories.iter().all(|r| !r.candidates.is_empty())
    })
    .await;
    // Killed: no graceful shutdown, its claims stay leased.
    a_task.abort();
    let _ = a_task.await;
    let a_records = a_journal.list().await.expect("A's journal");
    assert!(!a_records.is_empty(), "A made progress");
    assert!(
        a_records.len() <= 2,
        "daemon.concurrency bounds A's candidates"
    );
    assert!(
        a_records.iter().any(|r| r.step != Step::Done),
        "A was killed with unfinished candidates"
    );
    let a_families: BTreeSet<String> = a_records.iter().map(|r| r.family.clone()).collect();
    let a_open: BTreeSet<String> = a_records
        .iter()
        .filter(|r| r.step != Step::Done)
        .map(|r| r.candidate.to_string())
        .collect();

    let (b_stop_tx, b_stop) = watch::channel(false);
    let b_task = tokio::spawn(async move { b.run(Arc::new(Notify::new()), b_stop).await });
    wait_for(
        &mut b_feed,
        "B's own candidates and A's orphans to finish",
        |s| {
            let Some(r) = s.repositories.first() else {
                return false;
            };
            let ids: BTreeSet<&str> = r.candidates.iter().map(|c| c.id.as_str()).collect();
            r.candidates.iter().all(|c| c.outcome.is_some())
                && r.candidates.iter().any(|c| !a_families.contains(&c.family))
                && a_open.iter().all(|id| ids.contains(id.as_str()))
        },
    )
    .await;
    b_stop_tx.send(true).expect("stop B");
    b_task.await.expect("B task").expect("B");

    let b_records = b_journal.list().await.expect("B's journal");
    for rec in &b_records {
        let ending = rec.ending.as_ref().expect("finished");
        if a_open.contains(rec.candidate.as_str()) {
            assert_eq!(
                ending.outcome.to_string(),
                "unexpected-error",
                "A's orphan {} recovered",
                rec.candidate
            );
        } else {
            assert!(
                !a_families.contains(&rec.family),
                "B claimed A's family {}",
                rec.family
            );
        }
    }
    // One PR per candidate branch, never two.
    let prs = pulls(&stack).await;
    let heads: BTreeSet<&str> = prs.iter().map(|(_, h)| h.as_str()).collect();
    assert_eq!(heads.len(), prs.len(), "duplicate PRs: {prs:?}");
    let candidates: BTreeSet<&str> = a_records
        .iter()
        .chain(&b_records)
        .map(|r| r.candidate.as_str())
        .collect();
    assert!(prs.len() <= candidates.len(), "{prs:?} vs {candidates:?}");
}

/// A recognisable fake credential: if it shows up anywhere, it leaked.
const CANARY_TOKEN: &str = "ghp_KLAUDCANARYtoken0123456789abcdefABCDEF";
const CANARY_SECRET: &str = "whsec-KLAUDCANARY-webhook-secret-42";

fn serve_command(stack: &SandboxStack, dir: &Path, token: &str) -> std::process::Command {
    let config = write_klaud_toml(
        stack,
        dir,
        "[daemon]\nreconcile_interval = \"1s\"\nschedule = \"0 0 1 1 *\"\n\
         webhook_secret_env = \"KLAUD_TEST_WEBHOOK_SECRET\"\n",
    );
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_klaud"));
    cmd.env("KLAUD_GITHUB_TOKEN", token)
        .env("KLAUD_TEST_WEBHOOK_SECRET", CANARY_SECRET)
        .env("RUST_LOG", "debug")
        .env_remove("GITHUB_TOKEN")
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .arg("--store")
        .arg(dir.join("store"))
        .args(["--dashboard", "127.0.0.1:0", "--wave-now"]);
    for host in ["docker.io", "nvcr.io", "hub.docker.com", "ghcr.io"] {
        cmd.args(["--mirror", &format!("{host}={}", stack.registry_url)]);
    }
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_never_shows_a_credential_and_stops_gracefully_on_sigterm() {
    let stack = Harness::demo()
        .demo_ci()
        .poll(Duration::from_millis(20))
        .start_stack()
        .await;
    let dir = tempfile::tempdir().expect("tempdir");

    // A token of another identity: refused at preflight, never echoed.
    let refused = tokio::task::spawn_blocking({
        let mut cmd = serve_command(&stack, dir.path(), CANARY_TOKEN);
        move || cmd.output().expect("run klaud serve")
    })
    .await
    .expect("serve task");
    assert!(!refused.status.success(), "a foreign token must be refused");
    for stream in [&refused.stdout, &refused.stderr] {
        let text = String::from_utf8_lossy(stream);
        assert!(!text.contains(CANARY_TOKEN), "token leaked: {text}");
        assert!(!text.contains(CANARY_SECRET), "secret leaked: {text}");
    }

    // The bot's token: runs, serves the page, stops on SIGTERM.
    let mut child = serve_command(&stack, dir.path(), BOT_TOKEN)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn klaud serve");
    let stdout = child.stdout.take().expect("stdout");
    let stderr = child.stderr.take().expect("stderr");
    let logs = std::thread::spawn(move || {
        use std::io::Read;
        let mut text = String::new();
        let _ = std::io::BufReader::new(stderr).read_to_string(&mut text);
        text
    });
    let first = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("first line");
        line
    })
    .await
    .expect("read task");
    let url = first
        .trim()
        .strip_prefix("dashboard: ")
        .unwrap_or_else(|| panic!("first line names the dashboard: {first:?}"))
        .trim_end_matches('/')
        .to_owned();
    let client = http();
    let _first_wave = tokio::time::timeout(Duration::from_secs(180), async {
        loop {
            if let Ok(r) = client.get(format!("{url}/api/v1/status")).send().await
                && let Ok(v) = r.json::<serde_json::Value>().await
                && v["waves_total"].as_u64().is_some_and(|n| n >= 1)
                && v["repositories"][0]["candidates"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c["pull_request"]["url"].is_string()))
            {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("a wave with a PR on the dashboard");
    for path in ["/", "/api/v1/status", "/metrics", "/healthz"] {
        let body = client
            .get(format!("{url}{path}"))
            .send()
            .await
            .expect("page")
            .text()
            .await
            .expect("body");
        assert!(!body.contains(BOT_TOKEN), "token on {path}");
        assert!(!body.contains(CANARY_SECRET), "webhook secret on {path}");
    }
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .map(|s| s.success());
    assert!(matches!(killed, Ok(true)), "kill -TERM");
    let exit = tokio::task::spawn_blocking(move || child.wait().expect("wait"))
        .await
        .expect("wait task");
    let logs = logs.join().expect("logs");
    assert!(
        exit.success(),
        "graceful exit after SIGTERM: {exit:?}\n{logs}"
    );
    assert!(logs.contains("shutting down"), "{logs}");
    assert!(!logs.contains(BOT_TOKEN), "token in the logs");
    assert!(!logs.contains(CANARY_SECRET), "webhook secret in the logs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verified_webhook_wakes_the_reconcile_loop_and_a_forged_one_does_not() {
    use hmac::Mac;
    let stack = Harness::demo()
        .demo_ci()
        .poll(Duration::from_millis(20))
        .start_stack()
        .await;
    let mut s = settings(
        Claimant::new(uuid::Uuid::new_v4()),
        1,
        chrono::TimeDelta::hours(2),
    );
    // Without a wake-up the next pass would be an hour away.
    s.reconcile_interval = Duration::from_secs(3600);
    let (daemon, mut feed) = daemon(&stack, s, Arc::new(MemoryJournal::new())).await;
    let wake = Arc::new(Notify::new());
    let secret = b"klaud-test-webhook-secret";
    let app = http_router(
        feed.clone(),
        Some(klaud_service::daemon::webhook::WebhookState::new(
            secret,
            Arc::clone(&wake),
        )),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let (stop_tx, stop) = watch::channel(false);
    let running = tokio::spawn({
        let wake = Arc::clone(&wake);
        async move { daemon.run(wake, stop).await }
    });
    wait_for(&mut feed, "the first wave", |s| s.waves_total >= 1).await;
    let first = feed.borrow_and_update().generated_at;

    let body = br#"{"action":"completed"}"#.to_vec();
    let sign = |key: &[u8]| {
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("key");
        mac.update(&body);
        format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
    };
    let post = |signature: String| {
        http()
            .post(format!("http://{addr}/webhook"))
            .header("x-hub-signature-256", signature)
            .header("x-github-event", "workflow_run")
            .body(body.clone())
            .send()
    };
    let forged = post(sign(b"not-the-secret")).await.expect("post");
    assert_eq!(forged.status(), 401);
    assert!(
        !feed.has_changed().expect("feed"),
        "a forged delivery must not wake the loop"
    );
    let genuine = post(sign(secret)).await.expect("post");
    assert_eq!(genuine.status(), 202);
    wait_for(&mut feed, "a reconcile pass after the webhook", |s| {
        s.generated_at != first
    })
    .await;

    stop_tx.send(true).expect("stop");
    running.await.expect("daemon task").expect("daemon");
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_starting_together_never_open_two_prs_for_a_family() {
    let stack = Harness::demo()
        .demo_ci()
        .poll(Duration::from_millis(20))
        .start_stack()
        .await;
    let lease = chrono::TimeDelta::hours(2);
    let journals = [
        Arc::new(MemoryJournal::new()),
        Arc::new(MemoryJournal::new()),
    ];
    let mut runs = Vec::new();
    let mut stops = Vec::new();
    let mut feeds = Vec::new();
    for journal in &journals {
        let (d, feed) = daemon(
            &stack,
            settings(Claimant::new(uuid::Uuid::new_v4()), 3, lease),
            Arc::clone(journal) as Arc<dyn Journal>,
        )
        .await;
        let (tx, rx) = watch::channel(false);
        runs.push(tokio::spawn(async move {
            d.run(Arc::new(Notify::new()), rx).await
        }));
        stops.push(tx);
        feeds.push(feed);
    }
    for feed in &mut feeds {
        wait_for(
            feed,
            "each instance's wave and its candidates' outcomes",
            |s| {
                s.waves_total >= 1
                    && s.repositories
                        .iter()
                        .all(|r| r.candidates.iter().all(|c| c.outcome.is_some()))
            },
        )
        .await;
    }
    for tx in &stops {
        tx.send(true).expect("stop");
    }
    for run in runs {
        run.await.expect("daemon task").expect("daemon");
    }
    // A family may show up in both journals only when the second instance
    // claimed it after the first released it and found the work already
    // finished on GitHub (same PR, nothing redone).
    let mut families: BTreeMap<String, BTreeSet<Option<PullNumber>>> = BTreeMap::new();
    let mut total = 0;
    for journal in &journals {
        for rec in journal.list().await.expect("journal") {
            families.entry(rec.family).or_default().insert(rec.pull);
            total += 1;
        }
    }
    assert!(total > 0, "somebody made progress");
    assert!(
        families.values().all(|pulls| pulls.len() == 1),
        "a family got two PRs: {families:?}"
    );
    let prs = pulls(&stack).await;
    let heads: BTreeSet<&str> = prs.iter().map(|(_, h)| h.as_str()).collect();
    assert_eq!(heads.len(), prs.len(), "duplicate PRs: {prs:?}");
    assert_eq!(prs.len(), families.len(), "one PR per family");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_daemon_keeps_the_breaker_of_an_unreachable_registry() {
    let stack = Harness::demo()
        .demo_ci()
        .poll(Duration::from_millis(20))
        .start_stack()
        .await;
    // A loopback port nobody listens on: the connection is refused, which
    // trips the breaker for that host.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let host = format!("127.0.0.1:{closed}");
    let store = klaud_store::Store::temporary().expect("store");
    let start = |registry: klaud_planner::registry::RegistryClient| {
        let store = store.clone();
        let stack = &stack;
        async move {
            let forge = crate::support::forge_of(stack).await;
            let journal = klaud_service::StoreJournal::new(store.clone());
            let baseline =
                klaud_service::HttpBaselineSource::new(&stack.baseline_url).expect("baseline");
            let (tx, feed) = Daemon::feed();
            let daemon = Daemon::new(
                vec![RepoService {
                    forge,
                    journal: Arc::new(journal) as Arc<dyn Journal>,
                    store: Some(store),
                }],
                registry,
                Box::new(baseline),
                None,
                settings(
                    Claimant::new(uuid::Uuid::new_v4()),
                    2,
                    chrono::TimeDelta::hours(2),
                ),
                tx,
            )
            .expect("daemon");
            (daemon, feed)
        }
    };
    let unreachable = || crate::support::registry_at(&format!("http://{host}"));

    let (daemon, mut feed) = start(unreachable()).await;
    let (stop_tx, stop) = watch::channel(false);
    let running = tokio::spawn(async move { daemon.run(Arc::new(Notify::new()), stop).await });
    wait_for(&mut feed, "the first wave", |s| s.waves_total >= 1).await;
    stop_tx.send(true).expect("stop");
    running.await.expect("daemon task").expect("daemon");
    let saved = store.load_breaker().expect("read").expect("breaker saved");
    assert!(
        saved.hosts.iter().any(|t| t.host == host),
        "the wave's plan saves the tripped host: {saved:?}"
    );

    // A new process: a fresh client, the same store.
    let fresh = unreachable();
    assert!(fresh.breaker_state().hosts.is_empty());
    let (daemon, _feed) = start(fresh).await;
    let restored = daemon.registry().breaker_state();
    assert!(
        restored.hosts.iter().any(|t| t.host == host),
        "the restarted daemon does not ask {host} again: {restored:?}"
    );
}

/// `serve` gives each bump its upstream range as `klaud wave` does: the
/// nightly family's PR body names the engine's source repository and links
/// the compare from the old image's commit to the new one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_records_the_upstream_range_of_a_nightly_bump() {
    use klaud_github::upstream::GithubUpstream;
    use klaud_github::{Credential, Secret};
    let stack = Harness::demo()
        .demo_ci()
        .poll(Duration::from_millis(20))
        .start_stack()
        .await;
    let mut settings = settings(
        Claimant::new(uuid::Uuid::new_v4()),
        10,
        chrono::TimeDelta::hours(2),
    );
    settings.upstream = BTreeMap::from([(
        "vllm/vllm-openai".to_owned(),
        "vllm-project/vllm".to_owned(),
    )]);
    let (daemon, mut feed) = daemon(&stack, settings, Arc::new(MemoryJournal::new())).await;
    let daemon = daemon.with_upstream(GithubUpstream::new(
        &stack.github.url(),
        Credential::Token(Secret::new(BOT_TOKEN)),
    ));
    let (stop_tx, stop) = watch::channel(false);
    let task = tokio::spawn(async move { daemon.run(Arc::new(Notify::new()), stop).await });
    wait_for(&mut feed, "the first wave", |s| {
        s.waves_total >= 1 && s.repositories.iter().all(|r| !r.candidates.is_empty())
    })
    .await;
    let nightly = pulls(&stack)
        .await
        .into_iter()
        .map(|(n, _)| n)
        .collect::<Vec<_>>();
    let mut found = None;
    for number in nightly {
        let url = format!("{}/repos/{REPO}/pulls/{number}", stack.github.url());
        let pull: serde_json::Value = http()
            .get(url)
            .bearer_auth(BOT_TOKEN)
            .header("user-agent", "klaud-test")
            .send()
            .await
            .expect("pull")
            .json()
            .await
            .expect("pull JSON");
        let body = pull["body"].as_str().unwrap_or_default().to_owned();
        if body.contains("vllm/vllm-openai:nightly-") {
            found = Some(body);
        }
    }
    let _ = stop_tx.send(true);
    let _ = task.await;
    let body = found.expect("the nightly family's PR");
    assert!(body.contains("**Upstream:** vllm-project/vllm"), "{body}");
    assert!(
        body.contains(
            "https://github.com/vllm-project/vllm/compare/3ee2df30337a301164c46ae444b76ee67e71c106..."
        ),
        "{body}"
    );
    assert!(body.contains("**上游**：vllm-project/vllm"), "{body}");
}
