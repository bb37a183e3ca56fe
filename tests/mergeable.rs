//! Results InferenceX can merge: check-final after the sweep through the
//! sandbox's CI (a green sweep whose artifacts lack points), and validated
//! PRs that stay mergeable once another changelog entry lands — the base
//! merged in (never a rebase), no GPU job for that push, and the merge of
//! the PR reusing its sweep through the repository's own reuse gate.

use std::time::{Duration, Instant};

use klaud_claims::SystemClock;
use klaud_lifecycle::engine::{CandidateRecord, MemoryJournal, Upkept};
use klaud_lifecycle::model::Outcome;
use klaud_planner::changelog::validate_append;
use klaud_service::GithubLifecycle;
use serde_json::Value;

use crate::changelog_gate::{byte_rules, gate_python};
use crate::lifecycle_e2e::VALIDATED_SCRIPT;
use crate::support::{Harness, REPO, inferencex_full};

const CHANGELOG: &str = "perf-changelog.yaml";

async fn maintainer(env: &Harness) -> crate::support::Person {
    env.person(klaud_sandbox::stack::MAINTAINER_TOKEN)
}

/// `GET` of a repository path as the bot, raw.
async fn get(env: &Harness, path: &str) -> Value {
    let url = format!("{}/repos/{REPO}/{path}", env.stack.github.url());
    klaud_http::http_client_builder()
        .user_agent("klaud-test")
        .build()
        .expect("client")
        .get(url)
        .bearer_auth(klaud_sandbox::stack::BOT_TOKEN)
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json")
}

/// The pull request as GitHub answers it once mergeability is computed.
async fn mergeable(env: &Harness, number: impl Into<u64>) -> (Option<bool>, String) {
    let number: u64 = number.into();
    let started = Instant::now();
    loop {
        let pull = get(env, &format!("pulls/{number}")).await;
        if !pull["mergeable"].is_null() || started.elapsed() > Duration::from_secs(10) {
            return (
                pull["mergeable"].as_bool(),
                pull["mergeable_state"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Upkeep passes over `rec` until one does something other than wait.
async fn keep_mergeable(env: &Harness, rec: &mut CandidateRecord) -> Upkept {
    let lifecycle = GithubLifecycle::new(&env.forge);
    let journal = MemoryJournal::new();
    let clock = SystemClock;
    let engine = env.engine(&lifecycle, &journal, &clock);
    let started = Instant::now();
    loop {
        match engine.keep_mergeable(rec).await.expect("upkeep") {
            Upkept::Waiting(_) if started.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return other,
        }
    }
}

/// The runs of `workflow` for `event`, newest first, as GitHub lists them.
async fn runs(env: &Harness, event: &str) -> Vec<Value> {
    get(
        env,
        &format!("actions/workflows/run-sweep.yml/runs?event={event}&per_page=100"),
    )
    .await["workflow_runs"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Waits for run `id` to complete and returns its jobs and artifact names.
async fn finished_run(env: &Harness, id: u64) -> (Value, Vec<Value>, Vec<String>) {
    let started = Instant::now();
    loop {
        let run = get(env, &format!("actions/runs/{id}")).await;
        if run["status"] == "completed" {
            let jobs = get(env, &format!("actions/runs/{id}/jobs?per_page=100")).await["jobs"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let artifacts = get(env, &format!("actions/runs/{id}/artifacts")).await["artifacts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|a| a["name"].as_str().map(str::to_owned))
                .collect();
            return (run, jobs, artifacts);
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "run {id} never completed: {run}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The push-to-main run of `run-sweep.yml` for merge commit `sha`.
async fn push_run(env: &Harness, sha: &str) -> (Value, Vec<Value>, Vec<String>) {
    let started = Instant::now();
    loop {
        if let Some(run) = runs(env, "push")
            .await
            .into_iter()
            .find(|r| r["head_sha"] == sha)
        {
            return finished_run(env, run["id"].as_u64().expect("id")).await;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no push run on {sha}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn benchmark_artifacts(artifacts: &[String]) -> Vec<&String> {
    artifacts
        .iter()
        .filter(|a| a.starts_with("bmk_") || *a == "results_bmk")
        .collect()
}

#[tokio::test]
async fn a_green_sweep_whose_artifacts_lack_points_ends_failed_naming_each() {
    let script = format!(
        "{VALIDATED_SCRIPT}\n[families.demo-fp4-b200-sglang]\nsweep = [{{ outcome = \"success\", partial = true }}]\n"
    );
    let env = Harness::demo().script(&script).start().await;
    let target = env.target("demo-fp4-b200-sglang").await;
    let journal = MemoryJournal::new();
    let rec = env.finish(&journal, &target).await;
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Failed, "{ending:?}");
    let frozen = rec.frozen.as_ref().expect("frozen");
    let total = frozen.baseline.points.len();
    let missing: Vec<&str> = frozen.baseline.points[total.div_ceil(2)..]
        .iter()
        .map(|p| p.label.as_str())
        .collect();
    assert!(!missing.is_empty());
    assert!(
        ending.message.contains(&missing.join("; ")),
        "the ending names every missing point: {}",
        ending.message
    );
    assert!(rec.sweep.is_none(), "no verified sweep");
    let number = rec.pull.expect("pull");
    let bodies = env.bodies(number).await;
    assert!(
        bodies.iter().any(|b| b.contains(&format!(
            "check-final: {} of the {total} frozen baseline points have no result in this run",
            missing.len()
        ))),
        "the sweep report names the gap: {bodies:#?}"
    );
    let pull = env.pull(number).await;
    assert!(!pull.state.is_open(), "an unvalidated PR is cleaned up");
}

#[tokio::test]
async fn merging_one_validated_pr_keeps_the_others_mergeable_with_their_sweeps_reusable() {
    let env = Harness::demo().script(VALIDATED_SCRIPT).start().await;
    let a_target = env.target("demo-fp4-b200-sglang").await;
    let b_target = env.target("demo-fp8-mi355x-sglang").await;
    let c_target = env.target("demo-fp8-h200-trt").await;
    let journal = MemoryJournal::new();
    let a = env.finish(&journal, &a_target).await;
    let mut b = env.finish(&journal, &b_target).await;
    for rec in [&a, &b] {
        assert_eq!(
            rec.ending.as_ref().map(|e| e.outcome),
            Some(Outcome::Validated),
            "{rec:#?}"
        );
    }
    let (a_pr, b_pr) = (a.pull.expect("a"), b.pull.expect("b"));
    assert_eq!(mergeable(&env, b_pr).await.0, Some(true));

    // Klaud authorized each sweep's reuse in the gate's own form.
    for (rec, number) in [(&a, a_pr), (&b, b_pr)] {
        let run = rec.sweep.as_ref().expect("sweep").run_id;
        let bodies = env.bodies(number).await;
        assert_eq!(
            bodies
                .iter()
                .filter(|x| x.trim() == format!("/reuse-sweep-run {run}"))
                .count(),
            1,
            "{bodies:#?}"
        );
    }

    // A maintainer squash-merges A: B now conflicts on the changelog.
    let maintainer = maintainer(&env).await;
    let (status, merged) = maintainer
        .try_merge(a_pr.get(), serde_json::json!({"merge_method": "squash"}))
        .await;
    assert_eq!(status, 200, "{merged}");
    let a_merge = merged["sha"].as_str().expect("sha").to_owned();
    assert_eq!(mergeable(&env, b_pr).await, (Some(false), "dirty".into()));

    // A's merge reuses its sweep: the push to main runs no GPU job.
    let (_, jobs, artifacts) = push_run(&env, &a_merge).await;
    assert!(
        benchmark_artifacts(&artifacts).is_empty(),
        "main swept again: {artifacts:?} {jobs:#?}"
    );

    // Klaud merges main into B: a merge commit (the validated run's commit
    // stays in the PR), the changelog main's plus B's entry at the tail,
    // and `[skip-sweep]` so the synchronize run starts no GPU job.
    let old_head = b.head.clone().expect("head");
    let upkept = keep_mergeable(&env, &mut b).await;
    let Upkept::Merged(new_head) = upkept else {
        panic!("{upkept:?}")
    };
    assert_eq!(b.head.as_deref(), Some(new_head.as_str()));
    assert_eq!(mergeable(&env, b_pr).await, (Some(true), "clean".into()));
    let commit = get(&env, &format!("git/commits/{new_head}")).await;
    let parents: Vec<&str> = commit["parents"]
        .as_array()
        .expect("parents")
        .iter()
        .filter_map(|p| p["sha"].as_str())
        .collect();
    let main_tip = get(&env, "git/ref/heads/main").await["object"]["sha"]
        .as_str()
        .expect("main")
        .to_owned();
    assert_eq!(parents, vec![old_head.as_str(), main_tip.as_str()]);
    assert!(
        commit["message"]
            .as_str()
            .unwrap_or("")
            .contains("[skip-sweep]"),
        "{commit}"
    );
    let main_log = env
        .forge
        .get_contents(CHANGELOG, &main_tip)
        .await
        .expect("read")
        .expect("main changelog");
    let b_log = env
        .forge
        .get_contents(CHANGELOG, &new_head)
        .await
        .expect("read")
        .expect("b changelog");
    assert_eq!(
        validate_append(&main_log, &b_log),
        Ok(1),
        "one entry re-appended"
    );
    assert!(String::from_utf8_lossy(&b_log[main_log.len()..]).contains(&format!("/pull/{b_pr}")));
    // The repository's own gate accepts the re-appended changelog (its
    // links name InferenceX; the demo's name the sandbox's repositories).
    if let (Some(full), Some(_)) = (inferencex_full(), gate_python()) {
        let as_inferencex = |bytes: &[u8]| {
            let mut text = String::from_utf8(bytes.to_vec()).expect("utf-8");
            for repo in ["demo/benchmarks", "sandbox/benchmarks"] {
                text = text.replace(
                    &format!("https://github.com/{repo}/pull/"),
                    "https://github.com/SemiAnalysisAI/InferenceX/pull/",
                );
            }
            text.into_bytes()
        };
        assert_eq!(
            byte_rules(
                &full.join("utils"),
                &as_inferencex(&main_log),
                &as_inferencex(&b_log),
                b_pr.get()
            ),
            Ok(1)
        );
    }
    let b_run = b.sweep.as_ref().expect("sweep").run_id;
    let validated_head = get(&env, &format!("actions/runs/{b_run}")).await["head_sha"]
        .as_str()
        .expect("head")
        .to_owned();
    let commits = get(&env, &format!("pulls/{b_pr}/commits?per_page=100")).await;
    assert!(
        commits
            .as_array()
            .expect("commits")
            .iter()
            .any(|c| c["sha"] == validated_head.as_str()),
        "the validated run's commit stays in the PR"
    );
    let sync = runs(&env, "pull_request")
        .await
        .into_iter()
        .find(|r| r["head_sha"] == new_head.as_str())
        .expect("the upkeep push is a synchronize event");
    let (_, _, artifacts) = finished_run(&env, sync["id"].as_u64().expect("id")).await;
    assert!(
        benchmark_artifacts(&artifacts).is_empty(),
        "the upkeep push ran GPU jobs: {artifacts:?}"
    );
    // Nothing more to do while it merges cleanly.
    assert_eq!(keep_mergeable(&env, &mut b).await, Upkept::Current);

    // C was prepared on the old base: its final step merges main in with
    // its entry, so its PR does not conflict and its sweep starts.
    let c = env.finish(&journal, &c_target).await;
    assert_eq!(
        c.ending.as_ref().map(|e| e.outcome),
        Some(Outcome::Validated),
        "{c:#?}"
    );
    assert_eq!(mergeable(&env, c.pull.expect("c")).await.0, Some(true));

    // Merging B reuses B's validated sweep through the repository's gate.
    let (status, merged) = maintainer
        .try_merge(b_pr.get(), serde_json::json!({"merge_method": "squash"}))
        .await;
    assert_eq!(status, 200, "{merged}");
    let (run, jobs, artifacts) = push_run(&env, merged["sha"].as_str().expect("sha")).await;
    assert!(
        benchmark_artifacts(&artifacts).is_empty(),
        "main swept B again: {artifacts:?} {jobs:#?}"
    );
    assert_eq!(run["conclusion"], "success", "{run}");
    // And B is no longer looked after.
    let settled = keep_mergeable(&env, &mut b).await;
    assert!(
        matches!(settled, Upkept::Settled(ref why) if why.contains("merged")),
        "{settled:?}"
    );
}

/// A base that changed the bump's own line cannot be merged in by Klaud: it
/// says so in the PR (both languages), leaves the branch as it was and no
/// longer looks after the PR.
#[tokio::test]
async fn a_base_that_changed_the_bumps_own_line_is_handed_to_a_maintainer() {
    let env = Harness::demo().script(VALIDATED_SCRIPT).start().await;
    let target = env.target("demo-fp8-h200-trt").await;
    let journal = MemoryJournal::new();
    let mut rec = env.finish(&journal, &target).await;
    assert_eq!(
        rec.ending.as_ref().map(|e| e.outcome),
        Some(Outcome::Validated)
    );
    let number = rec.pull.expect("pull");
    let head = rec.head.clone().expect("head");
    // A person bumps the same family on main to another release, and
    // appends their own changelog entry.
    let master = "configs/nvidia-master.yaml";
    let main_tip = get(&env, "git/ref/heads/main").await["object"]["sha"]
        .as_str()
        .expect("main")
        .to_owned();
    let text = env
        .forge
        .get_contents(master, &main_tip)
        .await
        .expect("read")
        .expect("master");
    let text = String::from_utf8(text).expect("utf-8").replace(
        "nvcr.io#nvidia/tensorrt-llm/release:1.3.0rc14",
        "nvcr.io#nvidia/tensorrt-llm/release:1.3.0rc99",
    );
    let mut log = env
        .forge
        .get_contents(CHANGELOG, &main_tip)
        .await
        .expect("read")
        .expect("changelog");
    log.extend_from_slice(
        b"\n- config-keys:\n    - demo-fp8-h200-trt\n  description:\n    - \"A person's bump\"\n  pr-link: https://github.com/demo/benchmarks/pull/99\n",
    );
    env.stack
        .state()
        .push_commit(
            REPO,
            "main",
            klaud_sandbox::stack::MAINTAINER,
            std::collections::BTreeMap::from([
                (master.to_owned(), Some(text.into_bytes())),
                (CHANGELOG.to_owned(), Some(log)),
            ]),
            "A person's bump of the same family",
        )
        .await
        .expect("push");
    let upkept = keep_mergeable(&env, &mut rec).await;
    let Upkept::Settled(why) = upkept else {
        panic!("{upkept:?}")
    };
    assert!(why.contains(master), "{why}");
    assert_eq!(
        rec.head.as_deref(),
        Some(head.as_str()),
        "the branch is untouched"
    );
    let bodies = env.bodies(number).await;
    let note = bodies
        .iter()
        .find(|b| b.contains("Klaud cannot merge the base into this PR"))
        .expect("the PR says why");
    assert!(note.contains("<summary>中文</summary>"), "{note}");
    assert!(
        env.claims().await.is_empty(),
        "the claim taken for the upkeep is released"
    );
    // Settled: later passes leave it alone.
    assert!(matches!(
        keep_mergeable(&env, &mut rec).await,
        Upkept::Settled(_)
    ));
}
