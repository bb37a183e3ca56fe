//! Two real `klaud serve` processes against one sandbox:
//! they never claim the same family, both make progress, and when one is
//! killed with SIGKILL (no graceful shutdown) the other recovers its
//! candidates once their leases expire — closed PRs with an
//! `unexpected-error` receipt, claims released, no duplicate PR.
//!
//! A second test starts both at once: they race for the same families and
//! the claim refs let one win each, so no family ever gets two PRs.
//!
//! The sandbox (GitHub, registry, baseline API, CI simulators) runs in this
//! test process; the daemons reach it over loopback. In the first test CI is
//! held back until instance A is dead, so A is certain to die with
//! unfinished work.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use klaud_lifecycle::report::{find_record, parse_receipt};
use klaud_sandbox::ci::{CiSim, Script};
use klaud_sandbox::stack::{BOT_TOKEN, SandboxStack};
use serde_json::Value;

use crate::support::{Harness, REPO, write_klaud_toml};

/// Short enough to keep the test quick, and still 20 reconcile passes long
/// (the configuration refuses less than 4), and four write windows of
/// `LEASE_MARGIN` + `WRITE_TIMEOUT` (the configuration refuses less).
const LEASE: &str = "20s";
const LEASE_MARGIN: &str = "1s";
/// Loopback writes answer in milliseconds; this is room for a loaded machine.
const WRITE_TIMEOUT: &str = "3s";
/// The most any wait in this test may take before it fails.
const PATIENCE: Duration = Duration::from_secs(240);

/// Loopback only: never through a proxy from the environment.
fn http() -> reqwest::Client {
    klaud_http::http_client_builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("HTTP client")
}

/// One `klaud serve` child process. Dropping it kills the process, so a
/// failing test never leaves a daemon behind.
struct Serve {
    name: &'static str,
    child: Option<Child>,
    /// Everything the process wrote to stderr so far.
    log: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
    /// Dashboard base URL, without a trailing slash.
    url: String,
    _dir: tempfile::TempDir,
}

impl Serve {
    /// Starts `klaud serve` with its own configuration and store (so its own
    /// instance id) in a fresh directory, and waits for its dashboard URL.
    async fn start(name: &'static str, stack: &SandboxStack) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = write_klaud_toml(
            stack,
            dir.path(),
            &format!(
                // Still in write_klaud_toml's [github] table.
                "write_timeout = \"{WRITE_TIMEOUT}\"\n\
                 [planner]\nmax_candidates = 2\n\
                 [daemon]\nreconcile_interval = \"1s\"\nlease = \"{LEASE}\"\n\
                 lease_margin = \"{LEASE_MARGIN}\"\n\
                 concurrency = 2\nschedule = \"0 0 1 1 *\"\n"
            ),
        );
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_klaud"));
        cmd.env("KLAUD_GITHUB_TOKEN", BOT_TOKEN)
            .env(
                "RUST_LOG",
                "info,klaud=debug,klaud_lifecycle=debug,klaud_claims=debug",
            )
            // Plain lines in a failure message, not terminal colours.
            .env("NO_COLOR", "1")
            .env_remove("GITHUB_TOKEN")
            .env_remove("GITHUB_RUN_ID")
            .env_remove("GITHUB_ACTIONS")
            .env_remove("KLAUD_CONFIG")
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .arg("--store")
            .arg(dir.path().join("store"))
            .args(["--dashboard", "127.0.0.1:0", "--wave-now"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for host in ["docker.io", "nvcr.io", "hub.docker.com", "ghcr.io"] {
            cmd.args(["--mirror", &format!("{host}={}", stack.registry_url)]);
        }
        let mut child = cmd.spawn().expect("spawn klaud serve");
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let mut readers = Vec::new();
        readers.push(std::thread::spawn({
            let log = Arc::clone(&log);
            move || {
                let mut reader = BufReader::new(stderr);
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                    log.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push_str(&line);
                    line.clear();
                }
            }
        }));
        let (first_tx, first_rx) = std::sync::mpsc::channel();
        readers.push(std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let _ = first_tx.send(line);
            // Keep draining so the child never blocks on a full pipe.
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
        }));
        let mut serve = Self {
            name,
            child: Some(child),
            log,
            readers,
            url: String::new(),
            _dir: dir,
        };
        let first = tokio::task::spawn_blocking(move || first_rx.recv_timeout(PATIENCE))
            .await
            .expect("stdout task");
        let url = first
            .ok()
            .and_then(|l| Some(l.trim().strip_prefix("dashboard: ")?.to_owned()));
        let Some(url) = url else {
            panic!(
                "{name}: the first stdout line must name the dashboard\n{}",
                serve.logs()
            );
        };
        serve.url = url.trim_end_matches('/').to_owned();
        serve
    }

    fn logs(&self) -> String {
        let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        format!(
            "----- {} stderr -----\n{log}----- end of {} -----\n",
            self.name, self.name
        )
    }

    /// The dashboard's `/api/v1/status`, or `None` while it does not answer.
    async fn status(&self, client: &reqwest::Client) -> Option<Value> {
        let response = client
            .get(format!("{}/api/v1/status", self.url))
            .send()
            .await
            .ok()?;
        if !response.status().is_success() {
            return None;
        }
        response.json().await.ok()
    }

    /// SIGKILL: the process dies between any two instructions.
    fn kill(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().expect("SIGKILL");
        let status = child.wait().expect("wait");
        assert!(!status.success(), "{}: killed, yet {status:?}", self.name);
    }

    /// SIGTERM, then the exit status.
    async fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        let sent = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .map(|s| s.success());
        assert!(matches!(sent, Ok(true)), "kill -TERM {}", self.name);
        let status = tokio::task::spawn_blocking(move || child.wait().expect("wait"))
            .await
            .expect("wait task");
        // The pipes are closed now: the readers end and the log is whole.
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
        status
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Both processes' logs, for a failure message.
fn logs(serves: &[&Serve]) -> String {
    serves.iter().map(|s| s.logs()).collect()
}

/// One candidate row of a dashboard snapshot.
#[derive(Debug, Clone)]
struct Row {
    id: String,
    family: String,
    state: String,
    outcome: Option<String>,
    pull: Option<String>,
}

fn rows(status: &Value) -> Vec<Row> {
    status["repositories"][0]["candidates"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| Row {
                    id: c["id"].as_str().unwrap_or_default().to_owned(),
                    family: c["family"].as_str().unwrap_or_default().to_owned(),
                    state: c["state"].as_str().unwrap_or_default().to_owned(),
                    outcome: c["outcome"].as_str().map(str::to_owned),
                    pull: c["pull_request"]["url"].as_str().map(str::to_owned),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Claim rows of a snapshot: family → owner.
fn claim_owners(status: &Value) -> BTreeMap<String, Option<String>> {
    status["repositories"][0]["claims"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .filter_map(|c| {
                    Some((
                        c["family"].as_str()?.to_owned(),
                        c["owner"].as_str().map(str::to_owned),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Polls `serve`'s dashboard until `done` holds; the snapshot that did.
async fn wait_for(
    serve: &Serve,
    others: &[&Serve],
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let client = http();
    let waited = tokio::time::timeout(PATIENCE, async {
        loop {
            if let Some(status) = serve.status(&client).await
                && done(&status)
            {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
    .await;
    match waited {
        Ok(status) => status,
        Err(_) => {
            let last = serve.status(&client).await;
            let mut all = vec![serve];
            all.extend_from_slice(others);
            panic!(
                "timed out waiting for {what}; last snapshot of {}: {last:#?}\n{}",
                serve.name,
                logs(&all)
            );
        }
    }
}

/// A GET on the GitHub simulator's REST API as the bot.
async fn github(stack: &SandboxStack, path: &str) -> Value {
    let url = format!("{}/repos/{REPO}/{path}", stack.github.url());
    let response = http()
        .get(&url)
        .bearer_auth(BOT_TOKEN)
        .header("user-agent", "klaud-test")
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    assert!(
        response.status().is_success(),
        "GET {url}: {}",
        response.status()
    );
    response
        .json()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: JSON: {e}"))
}

/// One PR of the sandbox repository.
#[derive(Debug)]
struct Pull {
    number: u64,
    head: String,
    state: String,
}

async fn pulls(stack: &SandboxStack) -> Vec<Pull> {
    let body = github(stack, "pulls?state=all&per_page=100").await;
    body.as_array()
        .expect("pull list")
        .iter()
        .map(|p| Pull {
            number: p["number"].as_u64().expect("number"),
            head: p["head"]["ref"].as_str().expect("head ref").to_owned(),
            state: p["state"].as_str().expect("state").to_owned(),
        })
        .collect()
}

/// Every ref under `refs/heads/<prefix>`.
async fn refs(stack: &SandboxStack, prefix: &str) -> Vec<String> {
    let body = github(stack, &format!("git/matching-refs/heads/{prefix}")).await;
    body.as_array()
        .expect("ref list")
        .iter()
        .map(|r| r["ref"].as_str().expect("ref name").to_owned())
        .collect()
}

/// Fails with both logs when two PRs share a head branch or a family.
async fn assert_one_pr_per_branch(stack: &SandboxStack, serves: &[&Serve]) -> Vec<Pull> {
    let prs = pulls(stack).await;
    let mut heads: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for p in &prs {
        heads.entry(p.head.as_str()).or_default().push(p.number);
    }
    let doubled: Vec<_> = heads.iter().filter(|(_, n)| n.len() > 1).collect();
    assert!(
        doubled.is_empty(),
        "duplicate PRs for a branch: {doubled:?}\n{}",
        logs(serves)
    );
    // Branches are `klaud/auto-<family id>-<image id>`: one family, one PR.
    let mut families: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for p in &prs {
        let family = p
            .head
            .strip_prefix("klaud/auto-")
            .and_then(|c| c.split('-').next())
            .unwrap_or_else(|| panic!("PR #{} from a foreign branch {}", p.number, p.head));
        families.entry(family).or_default().push(p.number);
    }
    let doubled: Vec<_> = families.iter().filter(|(_, n)| n.len() > 1).collect();
    assert!(
        doubled.is_empty(),
        "two PRs for one family: {doubled:?}\n{}",
        logs(serves)
    );
    prs
}

/// The families an instance drives (a PR means it held the claim), and the
/// one owner their claim refs name.
fn driven(status: &Value, serve: &Serve, serves: &[&Serve]) -> (BTreeSet<String>, String) {
    let families: BTreeSet<String> = rows(status)
        .into_iter()
        .filter(|r| r.pull.is_some())
        .map(|r| r.family)
        .collect();
    let claims = claim_owners(status);
    let owners: BTreeSet<Option<String>> = families
        .iter()
        .map(|f| claims.get(f).cloned().flatten())
        .collect();
    let owner = match owners.into_iter().collect::<Vec<_>>().as_slice() {
        [Some(owner)] => owner.clone(),
        other => panic!(
            "{}'s families {families:?} must all be claimed by one owner, found {other:?} in {claims:?}\n{}",
            serve.name,
            logs(serves)
        ),
    };
    (families, owner)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_serve_process_is_recovered_by_the_other_without_duplicate_prs() {
    let mut stack = Harness::demo()
        .poll(Duration::from_millis(20))
        .start_stack()
        .await;

    // A alone first, so its claims exist when B plans: B must plan around
    // them, and both get families of their own.
    let mut a = Serve::start("A", &stack).await;
    let has_pr = |s: &Value| {
        s["waves_total"].as_u64().is_some_and(|n| n >= 1)
            && rows(s).iter().any(|r| r.pull.is_some())
    };
    wait_for(&a, &[], "A's first wave to open a PR", has_pr).await;
    let mut b = Serve::start("B", &stack).await;
    let b_status = wait_for(&b, &[&a], "B's first wave to open a PR", has_pr).await;
    let a_status = wait_for(&a, &[&b], "A's snapshot", |_| true).await;

    // Both made progress, on disjoint families, each under its own owner.
    let (a_families, a_owner) = driven(&a_status, &a, &[&a, &b]);
    let (b_families, b_owner) = driven(&b_status, &b, &[&a, &b]);
    assert_ne!(
        a_owner, b_owner,
        "separate stores give separate instance ids"
    );
    assert!(
        a_families.is_disjoint(&b_families),
        "a family claimed by both: A {a_families:?}, B {b_families:?}\n{}",
        logs(&[&a, &b])
    );
    for (name, status) in [("A", &a_status), ("B", &b_status)] {
        let unfinished = rows(status)
            .iter()
            .filter(|r| !matches!(r.state.as_str(), "claim" | "done"))
            .count();
        assert!(
            unfinished <= 2,
            "{name} exceeds daemon.concurrency: {status:#}"
        );
    }
    assert_one_pr_per_branch(&stack, &[&a, &b]).await;

    // No CI has run yet, so every candidate of A is still waiting on its
    // smoke run: killed now, A leaves its claims leased and its work open.
    let a_open: BTreeSet<String> = rows(&a_status)
        .into_iter()
        .filter(|r| r.pull.is_some() && r.outcome.is_none())
        .map(|r| r.id)
        .collect();
    assert!(
        !a_open.is_empty(),
        "A has unfinished candidates: {a_status:#}"
    );
    a.kill();
    stack.ci = Some(CiSim::spawn_with_poll(
        stack.state().clone(),
        Script::all_success(),
        Duration::from_millis(20),
    ));

    // B finishes its own candidates and, once A's leases expired, A's too.
    let end = wait_for(
        &b,
        &[&a],
        "B to recover A's orphans and finish its own candidates",
        |s| {
            let rows = rows(s);
            let outcome = |id: &str| {
                rows.iter()
                    .find(|r| r.id == id)
                    .and_then(|r| r.outcome.clone())
            };
            !rows.is_empty()
                && rows.iter().all(|r| r.outcome.is_some())
                && a_open.iter().all(|id| outcome(id).is_some())
        },
    )
    .await;
    let end_rows = rows(&end);
    eprintln!(
        "B's outcomes: {:?}",
        end_rows
            .iter()
            .map(|r| (r.family.as_str(), r.outcome.as_deref().unwrap_or("-")))
            .collect::<Vec<_>>()
    );
    for id in &a_open {
        let row = end_rows.iter().find(|r| &r.id == id).expect("recovered");
        assert_eq!(
            row.outcome.as_deref(),
            Some("unexpected-error"),
            "A's orphan {id} is recovered as unexpected-error: {end:#}\n{}",
            logs(&[&a, &b])
        );
    }
    for row in &end_rows {
        if !a_open.contains(&row.id) {
            assert!(
                !a_families.contains(&row.family),
                "B drove A's family {} as a candidate of its own\n{}",
                row.family,
                logs(&[&a, &b])
            );
        }
    }

    // GitHub agrees: one PR per branch; every orphan's PR closed with one
    // receipt saying unexpected-error; no claim or recovery ref left of A's.
    let prs = assert_one_pr_per_branch(&stack, &[&a, &b]).await;
    for id in &a_open {
        let branch = format!("klaud/auto-{id}");
        let pr = prs.iter().find(|p| p.head == branch).unwrap_or_else(|| {
            panic!("no PR for A's candidate {id}: {prs:?}\n{}", logs(&[&a, &b]))
        });
        assert_eq!(pr.state, "closed", "A's orphan PR #{} is closed", pr.number);
        let comments = github(
            &stack,
            &format!("issues/{}/comments?per_page=100", pr.number),
        )
        .await;
        let receipts: Vec<String> = comments
            .as_array()
            .expect("comment list")
            .iter()
            .filter_map(|c| c["body"].as_str())
            .filter_map(|body| {
                let record = find_record(body).ok()??;
                let receipt = parse_receipt(&record).ok()?;
                (receipt.candidate.as_str() == id).then(|| receipt.result.outcome().to_string())
            })
            .collect();
        assert_eq!(
            receipts,
            ["unexpected-error"],
            "PR #{}: exactly one receipt, unexpected-error\n{}",
            pr.number,
            logs(&[&a, &b])
        );
    }
    let claims = refs(&stack, "klaud/claim-").await;
    for id in &a_open {
        let family_id = id.split('-').next().expect("family id");
        let claim = format!("refs/heads/klaud/claim-{family_id}");
        assert!(
            !claims.contains(&claim),
            "{claim} left behind after recovery: {claims:?}\n{}",
            logs(&[&a, &b])
        );
    }
    let recovery = refs(&stack, "klaud/recovery-").await;
    assert!(
        recovery.is_empty(),
        "recovery leases left behind: {recovery:?}\n{}",
        logs(&[&a, &b])
    );

    // B stops cleanly on SIGTERM.
    let exit = b.terminate().await;
    assert!(
        exit.success(),
        "B after SIGTERM: {exit:?}\n{}",
        logs(&[&a, &b])
    );
    let b_log = b.logs();
    assert!(b_log.contains("shutting down"), "{b_log}");
    assert!(!b_log.contains(BOT_TOKEN), "the token reached B's log");
    drop(a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_serve_processes_starting_together_never_open_two_prs_for_a_family() {
    let mut stack = Harness::demo()
        .poll(Duration::from_millis(20))
        .start_stack()
        .await;
    stack.ci = Some(CiSim::spawn_with_poll(
        stack.state().clone(),
        Script::all_success(),
        Duration::from_millis(20),
    ));
    // Both plan the same base at once, so they race for the same families:
    // the claim refs must pick one winner per family.
    let (mut a, mut b) = tokio::join!(Serve::start("A", &stack), Serve::start("B", &stack));
    let finished = |s: &Value| {
        let rows = rows(s);
        s["waves_total"].as_u64().is_some_and(|n| n >= 1)
            && rows.iter().all(|r| r.outcome.is_some())
    };
    let a_end = wait_for(&a, &[&b], "A's wave and its candidates' outcomes", finished).await;
    let b_end = wait_for(&b, &[&a], "B's wave and its candidates' outcomes", finished).await;

    // A family in both journals means the later one found the work already
    // finished on GitHub after the winner released it: same PR, nothing redone.
    let mut families: BTreeMap<String, BTreeSet<Option<String>>> = BTreeMap::new();
    for status in [&a_end, &b_end] {
        for row in rows(status) {
            families.entry(row.family).or_default().insert(row.pull);
        }
    }
    assert!(
        families.values().flatten().any(Option::is_some),
        "somebody opened a PR: {families:?}\n{}",
        logs(&[&a, &b])
    );
    assert!(
        families.values().all(|pulls| pulls.len() == 1),
        "a family got two PRs: {families:?}\n{}",
        logs(&[&a, &b])
    );
    let prs = assert_one_pr_per_branch(&stack, &[&a, &b]).await;
    let with_pr = families
        .values()
        .filter(|p| p.iter().any(Option::is_some))
        .count();
    assert_eq!(prs.len(), with_pr, "one PR per family: {prs:?}");

    for serve in [&mut a, &mut b] {
        let exit = serve.terminate().await;
        assert!(
            exit.success(),
            "{} after SIGTERM: {exit:?}\n{}",
            serve.name,
            serve.logs()
        );
    }
}
