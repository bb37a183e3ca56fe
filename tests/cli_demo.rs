//! `klaud demo` and `klaud wave` as a user runs them.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use klaud::cli::demo::stats::{FAILED_RUN_ALLOWANCE, LIFECYCLE_LIMIT};
use klaud_sandbox::ci::Script;
use klaud_sandbox::stack::BOT_TOKEN;

use crate::support::{Harness, write_klaud_toml};

fn klaud() -> Command {
    Command::new(env!("CARGO_BIN_EXE_klaud"))
}

#[test]
fn demo_ends_every_candidate_with_the_scripted_outcomes() {
    let out = klaud()
        .args([
            "demo",
            "--json",
            "--exit-when-done",
            "--stats",
            "--dashboard",
            "127.0.0.1:0",
        ])
        .current_dir(crate::support::REPO_ROOT)
        .output()
        .expect("run klaud demo");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    // In a pipe the story is plain lines on stderr (stdout stays JSON).
    let story = String::from_utf8_lossy(&out.stderr);
    for step in [
        "opened draft PR #",
        "smoke dispatched",
        "passed",
        "changelog appended, final sweep label set",
        "validated (final-sweep)",
        "failed (targeted)",
    ] {
        assert!(
            story.contains(step),
            "{step:?} missing from the story:\n{story}"
        );
    }
    assert!(
        !story.contains('\u{1b}'),
        "control codes in a pipe:\n{story}"
    );
    // The terminal says where Klaud's dashboard issue is.
    assert!(
        story.contains("dashboard issue: http://127.0.0.1:") && story.contains("/issues/"),
        "no dashboard issue line in the story:\n{story}"
    );
    // An hour of the demo left running stays well inside the core budget.
    let hour = &v["requests"]["hour"];
    let (charged, budget) = (
        hour["charged"].as_u64().expect("hour charged"),
        hour["budget"].as_u64().expect("budget"),
    );
    assert!(
        charged * 2 < budget,
        "{charged} of {budget} charged in an hour"
    );
    // The registry side: a cold plan of the demo's masters asks every host
    // it needs and stays within Docker Hub's pull target; a warm one pulls
    // nothing.
    let registry = &v["requests"]["registry"];
    let cold = registry["cold"].as_array().expect("cold hosts");
    assert!(!cold.is_empty(), "{registry:#}");
    for host in cold {
        let n = |k: &str| host[k].as_u64().unwrap_or_else(|| panic!("{k}: {host}"));
        assert!(n("floor") > 0 && n("requests") > 0, "{host}");
        if host["host"] == "docker.io" {
            assert!(n("pulls") <= 2 * n("candidates"), "{host}");
        }
    }
    for host in registry["warm"].as_array().expect("warm hosts") {
        assert_eq!(host["pulls"], 0, "{registry:#}");
    }
    assert!(
        story.contains("Registry requests of a cold plan"),
        "{story}"
    );
    // A pass with nothing to do costs nothing against the rate limit: refs
    // and lists are conditional (304), git objects and files at a commit
    // are read once.
    let idle = &v["requests"]["idle_pass"];
    assert!(idle["total"].as_u64().expect("idle total") > 0, "{v:#}");
    assert_eq!(idle["charged"], 0, "an idle pass was charged: {v:#}");
    assert_eq!(idle["writes"], 0, "{v:#}");
    // Per candidate (claim to receipt) and per pass, cut from the
    // simulator's log: every validated candidate has its steps and writes,
    // and the parts never add up to more than the whole demo.
    let per = v["requests"]["candidates"]
        .as_array()
        .expect("per candidate");
    assert_eq!(v["requests"]["limit"], LIFECYCLE_LIMIT, "{v:#}");
    assert_eq!(
        v["requests"]["failed_run_allowance"], FAILED_RUN_ALLOWANCE,
        "{v:#}"
    );
    assert_eq!(v["requests"]["target"], 30, "{v:#}");
    let validated: Vec<_> = per.iter().filter(|c| c["outcome"] == "validated").collect();
    // Four: the playbook repairs the vLLM family's OOM (configs/demo-ci.toml).
    assert_eq!(validated.len(), 4, "{v:#}");
    for figures in &validated {
        // Should a figure be out of range, what the story said of this
        // candidate (its reuse line posted or withdrawn, the base merged
        // in) tells why.
        let name = figures["family"]
            .as_str()
            .and_then(|f| f.rsplit(':').next())
            .unwrap_or_default();
        let told: Vec<&str> = story
            .lines()
            .filter(|l| l.contains(&format!("{name} ")))
            .collect();
        let c = serde_json::json!({"figures": figures, "story": told});
        assert!(figures["steps"].as_u64() > Some(0), "{c:#}");
        // The floor comes from what the lifecycle left on GitHub: two
        // commits, a smoke and a sweep with their results. One with a
        // failed run (a repair, or an infrastructure failure read from its
        // log) adds that run, its jobs and any repair commit, so its floor
        // is higher and its limit is counted above the floor: the failed
        // jobs' logs, the playbook and the repair's compare are read on top
        // of what the floor counts.
        let floor = figures["floor"].as_u64().expect("floor");
        let charged = figures["work"]["charged"].as_u64().expect("charged");
        assert!(charged >= floor, "{c:#}");
        let plain = figures["scenario"]["failed"] == 0
            && figures["scenario"]["commits"].as_u64() <= Some(2);
        if plain {
            assert!((20..=30).contains(&floor), "{c:#}");
            assert!(charged <= LIFECYCLE_LIMIT as u64, "{c:#}");
        } else {
            assert!(floor > 23, "{c:#}");
            assert!(charged <= floor + FAILED_RUN_ALLOWANCE as u64, "{c:#}");
        }
        assert!(figures["work"]["writes"].as_u64() > Some(0), "{c:#}");
        assert!(figures["work"]["charged"].as_u64() <= figures["work"]["total"].as_u64());
    }
    let sum = |rows: &Vec<serde_json::Value>, key: &str| -> u64 {
        rows.iter()
            .map(|r| r[key]["total"].as_u64().unwrap_or(0))
            .sum()
    };
    let passes = v["requests"]["passes"].as_array().expect("passes");
    assert!(!passes.is_empty(), "{v:#}");
    let parts = sum(per, "work") + sum(per, "polls") + sum(passes, "all");
    let whole = v["requests"]["all"]["total"].as_u64().expect("all");
    assert!(parts > 0 && parts <= whole, "{parts} of {whole}: {v:#}");
    // The demo repository's own workflow files decide which runs exist.
    assert_eq!(
        v["workflows"],
        serde_json::json!(["e2e-tests.yml", "run-sweep.yml"]),
        "{v:#}"
    );
    let candidates = v["candidates"].as_array().expect("candidates");
    assert!(!candidates.is_empty());
    let by_key = |key: &str| {
        candidates
            .iter()
            .find(|c| {
                c["family"]
                    .as_str()
                    .is_some_and(|f| f.ends_with(&format!(":{key}")))
            })
            .unwrap_or_else(|| panic!("{key} missing from {v:#}"))
    };
    for c in candidates {
        // A family deferred before claiming has no PR.
        let deferred = c["outcome"] == "capacity-deferred";
        for field in [
            "family",
            "image",
            "outcome",
            "phase",
            "pull_request",
            "runs",
            "repairs",
        ] {
            if deferred && field == "pull_request" {
                continue;
            }
            assert!(!c[field].is_null(), "{field} missing in {c:#}");
        }
    }
    // The demo's mi355x cluster is busy: that family waits for capacity,
    // with nothing opened or dispatched.
    let busy = by_key("demo-fp8-mi355x-sglang");
    assert_eq!(busy["outcome"], "capacity-deferred", "{busy:#}");
    assert_eq!(busy["phase"], "resolve");
    assert!(busy["pull_request"].is_null() && busy["runs"] == serde_json::json!([]));
    assert_eq!(by_key("demo-fp4-b200-sglang")["outcome"], "validated");
    // The vLLM family's smoke runs out of memory; the demo repository's
    // playbook knows it and lowers the memory fraction, and the repaired
    // smoke passes: smoke, repaired smoke, sweep.
    let repaired = by_key("demo-fp4-b200-vllm");
    assert_eq!(repaired["outcome"], "validated", "{repaired:#}");
    assert_eq!(
        repaired["runs"].as_array().map(Vec::len),
        Some(3),
        "{repaired:#}"
    );
    // The agentic nightly family fails (configs/demo-ci.toml breaks it from
    // the fifth of the seven nightlies in between) and, with `[hunt]` on for
    // it (configs/demo-klaud.toml), finds that nightly in 3 GPU runs
    // (⌈log2 8⌉) before its clean-up; the hunt leaves the outcome alone.
    let hunted = by_key("demo-fp4-b300-vllm-agentic");
    assert_eq!(hunted["outcome"], "failed", "{hunted:#}");
    for line in [
        "regression hunt: planned over 7 served tags",
        "regression hunt: step 3 at nightly-45411a710f8f17e80b26c090e17d37fbd0f1d2bf: bad",
        "Last good: nightly-979a93274b0e5dbe3340263bf97812ca398c81b5 (upstream 979a93274b0e) · \
         first bad: nightly-45411a710f8f17e80b26c090e17d37fbd0f1d2bf (upstream 45411a710f8f)",
        "Upstream change: 979a93274b0e...45411a710f8f",
        "GPU runs used: 3 (a binary search needs 3)",
    ] {
        assert!(
            story.contains(line),
            "{line:?} missing from the story:\n{story}"
        );
    }
    assert!(!story.contains("regression hunt: step 4"), "{story}");
    // The multi-node family runs as an experiment (configs/demo-klaud.toml):
    // three variants, each with its PR; Variant B's passes first and wins,
    // the others end `duplicate`.
    let variants: Vec<&serde_json::Value> = candidates
        .iter()
        .filter(|c| {
            c["family"]
                .as_str()
                .is_some_and(|f| f.ends_with(":demo-fp4-gb200-dynamo-vllm-disagg"))
        })
        .collect();
    let mut outcomes: Vec<&str> = variants
        .iter()
        .map(|c| c["outcome"].as_str().unwrap_or("none"))
        .collect();
    outcomes.sort();
    assert_eq!(outcomes, ["duplicate", "duplicate", "validated"], "{v:#}");
    assert!(
        variants.iter().all(|c| c["pull_request"].is_string()),
        "every variant has its PR: {v:#}"
    );
    assert!(
        story.contains("Variant B of experiment demo-disagg validated first"),
        "{story}"
    );
    let retried = by_key("demo-fp8-h200-trt");
    assert_eq!(retried["outcome"], "validated");
    assert_eq!(
        retried["runs"].as_array().map(Vec::len),
        Some(3),
        "smoke, retry, sweep"
    );
}

/// The demo is killed mid-way with its store kept and started again: the
/// new demo has a new sandbox, so the kept candidates point at pull
/// requests that are gone. It says so once, starts over and ends every
/// candidate as a fresh demo does, instead of polling "not found".
#[test]
fn a_demo_restarted_with_its_kept_store_starts_over_once() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let mut first = klaud()
        // `--exit-when-done` bounds the read below if no PR ever opens.
        .args([
            "demo",
            "--exit-when-done",
            "--dashboard",
            "127.0.0.1:0",
            "--store",
        ])
        .arg(&store)
        .current_dir(crate::support::REPO_ROOT)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start klaud demo");
    // Kill it once a PR is open, as a Ctrl-C or a crash would. Without
    // `--json` the story is on stdout.
    let story = first.stdout.take().expect("stdout");
    let opened = BufReader::new(story)
        .lines()
        .map_while(Result::ok)
        .any(|line| line.contains("opened draft PR #"));
    first.kill().expect("kill the first demo");
    first.wait().expect("reap");
    assert!(opened, "the first demo never opened a PR");

    let out = klaud()
        .args([
            "demo",
            "--json",
            "--exit-when-done",
            "--dashboard",
            "127.0.0.1:0",
            "--store",
        ])
        .arg(&store)
        .current_dir(crate::support::REPO_ROOT)
        .output()
        .expect("run klaud demo again");
    let story = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{story}");
    assert_eq!(
        story.matches("starts over with a new sandbox").count(),
        1,
        "said once: {story}"
    );
    assert!(
        !story.contains("not found"),
        "polled the gone sandbox: {story}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let candidates = v["candidates"].as_array().expect("candidates");
    let validated = candidates
        .iter()
        .filter(|c| c["outcome"] == "validated")
        .count();
    assert_eq!(validated, 4, "the fresh demo's outcomes: {v:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wave_resumes_without_duplicates_and_rebuilds_from_an_empty_store() {
    let _root = Path::new(crate::support::REPO_ROOT);
    let stack = Harness::demo()
        .demo_ci()
        .poll(Duration::from_millis(20))
        .start_stack()
        .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_klaud_toml(&stack, dir.path(), "");
    let store = dir.path().join("store");
    let registry = stack.registry_url.clone();
    let wave = move |wait: &str| {
        let mut cmd = klaud();
        cmd.env("KLAUD_GITHUB_TOKEN", BOT_TOKEN)
            .env_remove("GITHUB_TOKEN")
            .arg("wave")
            .arg("--config")
            .arg(&config)
            .arg("--store")
            .arg(&store)
            .args(["--max", "10", "--json", "--poll", "1s", "--wait", wait]);
        for host in ["docker.io", "nvcr.io", "hub.docker.com"] {
            cmd.args(["--mirror", &format!("{host}={registry}")]);
        }
        cmd
    };
    let run = |mut cmd: Command| {
        let out = cmd.output().expect("run klaud wave");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("JSON")
    };
    // A wave that does not wait, then one that waits until the end.
    let first = tokio::task::spawn_blocking({
        let cmd = wave("0s");
        move || run(cmd)
    })
    .await
    .expect("first wave");
    assert!(
        first["candidates"]
            .as_array()
            .is_some_and(|c| !c.is_empty())
    );
    let blob_reads = |log: &[klaud_sandbox::github::LogEntry]| {
        log.iter()
            .filter(|e| e.method == "GET" && e.path.contains("/git/blobs/"))
            .count()
    };
    let after_first = blob_reads(&stack.state().request_log().await);
    assert!(after_first > 0);
    // The demo's registry challenges like Docker Hub: the wave went through
    // the bearer-token flow.
    assert!(stack.registry.requires_token());
    assert!(
        stack
            .registry
            .requests(klaud_sandbox::registry::SimRoute::Token)
            > 0,
        "no token was fetched: {:?}",
        stack.registry.request_counts()
    );
    let second = tokio::task::spawn_blocking({
        let cmd = wave("120s");
        move || run(cmd)
    })
    .await
    .expect("second wave");
    let done = |v: &serde_json::Value| {
        v["candidates"]
            .as_array()
            .map(|c| c.iter().all(|c| !c["outcome"].is_null()))
            .unwrap_or(false)
    };
    assert!(done(&second), "{second:#}");
    assert_eq!(
        blob_reads(&stack.state().request_log().await),
        after_first,
        "the base branch's blobs come from the store's cache"
    );
    let pulls = |v: &serde_json::Value| -> Vec<String> {
        let mut p: Vec<String> = v["candidates"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["pull_request"].as_str().map(str::to_owned))
            .collect();
        p.sort();
        p
    };
    // A deleted store: the third wave finds everything finished on GitHub.
    std::fs::remove_dir_all(dir.path().join("store")).expect("delete store");
    let third = tokio::task::spawn_blocking({
        let cmd = wave("0s");
        move || run(cmd)
    })
    .await
    .expect("third wave");
    assert!(done(&third), "{third:#}");
    // A candidate that finished in the first wave is cooling down in the
    // second, so the PRs of both waves together are the ones there are.
    let mut before: Vec<String> = pulls(&first).into_iter().chain(pulls(&second)).collect();
    before.sort();
    before.dedup();
    // Families whose validated PR is still open are occupied by it (one
    // open Klaud PR per family, read from GitHub): not taken up again.
    let third_pulls = pulls(&third);
    assert!(
        third_pulls.iter().all(|p| before.contains(p)),
        "no new PRs; third {third:#}"
    );
    let occupied = third["blocked"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["outcome"] == "occupied")
        .count();
    assert_eq!(
        third_pulls.len() + occupied,
        before.len(),
        "every earlier PR is either found finished or occupies its family; third {third:#}"
    );
    let log = stack.state().request_log().await;
    let opened = log
        .iter()
        .filter(|e| e.method == "POST" && e.path.ends_with("/pulls") && e.status < 300)
        .count();
    assert_eq!(opened, before.len(), "no new PRs");
    let dispatches = log
        .iter()
        .filter(|e| e.method == "POST" && e.path.contains("/dispatches"))
        .count();
    // 6 candidates: 6 initial smokes plus 1 infrastructure retry and the
    // smoke of the vLLM family after the playbook's repair.
    assert_eq!(dispatches, 8, "dispatches; second wave {second:#}");
}

/// Scheduled one-shot waves as the Actions workflow runs them: a fresh
/// store and a new run id every time. With one `KLAUD_INSTANCE_ID` a later
/// run resumes the earlier run's candidates; without it, it is a stranger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_waves_with_fresh_stores_resume_under_one_instance_id() {
    let _root = Path::new(crate::support::REPO_ROOT);
    // Every smoke keeps running for a while, so the first wave (which does
    // not wait) cannot finish a candidate: on a fast machine it otherwise
    // could, and the later wave would rightly have nothing to resume.
    let script = Script::parse(
        "slow smoke",
        "[families.\"*\"]\nsmoke = [{ delay = 8, outcome = \"success\" }]\nsweep = [\"success\"]\n",
    )
    .expect("script");
    let stack = Harness::demo()
        .ci(script)
        .poll(Duration::from_millis(20))
        .start_stack()
        .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_klaud_toml(&stack, dir.path(), "");
    let instance = "6f1c2b3a-4d5e-4f60-8a9b-0c1d2e3f4a5b";
    let registry = stack.registry_url.clone();
    let dir_path = dir.path().to_owned();
    let wave = move |run: u32, id: Option<&str>, max: &str, wait: &str| {
        let mut cmd = klaud();
        cmd.env("KLAUD_GITHUB_TOKEN", BOT_TOKEN)
            .env_remove("GITHUB_TOKEN")
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_RUN_ID", run.to_string())
            .env_remove("KLAUD_INSTANCE_ID")
            .arg("wave")
            .arg("--config")
            .arg(&config)
            .arg("--store")
            .arg(dir_path.join(format!("store-{run}")))
            .args(["--max", max, "--json", "--poll", "1s", "--wait", wait]);
        if let Some(id) = id {
            cmd.env("KLAUD_INSTANCE_ID", id);
        }
        for host in ["docker.io", "nvcr.io", "hub.docker.com"] {
            cmd.args(["--mirror", &format!("{host}={registry}")]);
        }
        cmd
    };
    let run = |mut cmd: Command| async move {
        let out = tokio::task::spawn_blocking(move || cmd.output().expect("run klaud wave"))
            .await
            .expect("wave task");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        (json, stderr)
    };
    let ids = |v: &serde_json::Value| -> Vec<String> {
        let mut ids: Vec<String> = v["candidates"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["candidate"].as_str().map(str::to_owned))
            .collect();
        ids.sort();
        ids
    };

    let (first, stderr) = run(wave(101, Some(instance), "2", "0s")).await;
    let started = ids(&first);
    assert_eq!(started.len(), 2, "{first:#}");
    for c in first["candidates"].as_array().expect("candidates") {
        assert!(
            c["outcome"].is_null(),
            "still running after the first wave: {c:#}"
        );
    }
    assert!(!stderr.contains("KLAUD_INSTANCE_ID"), "{stderr}");

    // A run without the id is another instance: it is warned, and the
    // first run's claims (leased) are not its own.
    let (stranger, stderr) = run(wave(102, None, "0", "0s")).await;
    assert!(
        stderr.contains("new Klaud instance") && stderr.contains("KLAUD_INSTANCE_ID"),
        "{stderr}"
    );
    assert!(ids(&stranger).is_empty(), "{stranger:#}");

    // The next scheduled run with the id resumes both and finishes them.
    let (later, later_err) = run(wave(103, Some(instance), "0", "120s")).await;
    assert_eq!(ids(&later), started, "{later:#} {later_err}");
    for c in later["candidates"].as_array().expect("candidates") {
        let outcome = c["outcome"].as_str().unwrap_or("unfinished");
        assert!(
            outcome != "unfinished" && outcome != "unexpected-error",
            "{c:#}"
        );
    }

    // A malformed id is refused before anything is touched.
    let mut bad = wave(104, Some("not-a-uuid"), "0", "0s");
    let out = tokio::task::spawn_blocking(move || bad.output().expect("run"))
        .await
        .expect("task");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("KLAUD_INSTANCE_ID"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
