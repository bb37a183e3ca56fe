//! The candidate lifecycle against a repository that carries workflow
//! files: the real InferenceX ones in both versions (`843c6254`, whose
//! sweep skips drafts and whose smoke has no `klaud-run` input, and
//! `newer`), and small ones of our own for refusals. Klaud reads them at the
//! base commit through the GitHub contents API, as it would on GitHub.

use std::path::Path;

use klaud_lifecycle::engine::{CandidateRecord, MemoryJournal};
use klaud_lifecycle::model::{AttemptKind, AttemptStatus, Outcome};
use klaud_sandbox::github::{Fault, FaultAction};

use crate::lifecycle_e2e::{VALIDATED_SCRIPT, assert_validated};
use crate::support;
use crate::support::Harness;

/// The demo repository (under `project`, e.g. `inferencex-e2e/`, or at the
/// root) with `files` (file name → text) as its only `.github/workflows/`,
/// in a temporary directory.
fn seed_in(project: &str, files: &[(String, Vec<u8>)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    support::copy_tree(
        &Path::new(support::REPO_ROOT).join("configs/demo"),
        &dir.path().join(project),
    );
    // The demo's own workflow files give way to the ones under test.
    let own = dir.path().join(project).join(".github");
    if own.is_dir() {
        std::fs::remove_dir_all(&own).expect("drop the demo's workflows");
    }
    let wf = dir.path().join(".github/workflows");
    std::fs::create_dir_all(&wf).expect("workflows dir");
    for (name, text) in files {
        std::fs::write(wf.join(name), text).expect("write workflow");
    }
    dir
}

fn seed_with(files: &[(String, Vec<u8>)]) -> tempfile::TempDir {
    seed_in("", files)
}

/// The seed with one real workflow version, or `None` (skipped loudly).
/// The newer InferenceX keeps its project under `inferencex-e2e/` (its
/// sweep triggers on `inferencex-e2e/perf-changelog.yaml`), the older one at
/// the root.
fn real_seed(version: &str) -> Option<tempfile::TempDir> {
    let from = support::inferencex_workflows(version)?;
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&from).expect("read fixtures") {
        let entry = entry.expect("entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".yml") {
            files.push((name, std::fs::read(entry.path()).expect("read")));
        }
    }
    let project = if version == "newer" {
        "inferencex-e2e"
    } else {
        ""
    };
    Some(seed_in(project, &files))
}

/// Request-log positions of the first ready-for-review mutation and of the
/// first label write. The log does not name a GraphQL request's mutation:
/// the first two are the commits onto the branch of a lifecycle without a
/// repair (the bump onto the branch created at the base, the changelog
/// entry), both made before any draft change, the next the draft change.
async fn ready_and_label_order(env: &Harness) -> (Option<usize>, Option<usize>) {
    let log = env.stack.state().request_log().await;
    let ready = log
        .iter()
        .enumerate()
        .filter(|(_, e)| e.method == "POST" && e.path == "/graphql" && e.status < 300)
        .map(|(i, _)| i)
        .nth(2);
    let label = log
        .iter()
        .position(|e| e.method == "POST" && e.path.contains("/labels") && e.status < 300);
    (ready, label)
}

fn sweeps(rec: &CandidateRecord) -> Vec<AttemptStatus> {
    rec.attempts
        .iter()
        .filter(|a| a.kind == AttemptKind::FinalSweep)
        .map(|a| a.status)
        .collect()
}

/// On both versions: a candidate is validated (the older sweep skips drafts,
/// so the PR is marked ready before the sweep label; the newer one keeps the
/// draft), one whose smoke hits the infrastructure is retried and validated,
/// and one whose smoke fails ends failed with cleanup.
#[tokio::test]
async fn candidates_are_validated_retried_and_cleaned_up_on_both_workflow_versions() {
    for (version, skips_drafts) in [("843c6254", true), ("newer", false)] {
        let Some(seed) = real_seed(version) else {
            return;
        };
        let env = Harness::demo()
            .seed_dir(seed.path())
            .script(VALIDATED_SCRIPT)
            .start()
            .await;
        let journal = MemoryJournal::new();

        let target = env.target("demo-fp4-b200-sglang").await;
        let rec = env.finish(&journal, &target).await;
        assert_validated(&env, &target, &rec).await;
        let (ready, label) = ready_and_label_order(&env).await;
        let label = label.expect("the sweep label was written");
        if skips_drafts {
            assert!(
                ready.is_some_and(|r| r < label),
                "{version}: ready for review ({ready:?}) before the label ({label})"
            );
        } else {
            assert!(
                ready.is_none_or(|r| r > label),
                "{version}: the PR stays a draft until after the label ({ready:?}, {label})"
            );
        }

        let target = env.target("demo-fp8-h200-trt").await;
        let rec = env.finish(&journal, &target).await;
        assert_validated(&env, &target, &rec).await;
        assert!(
            rec.attempts
                .iter()
                .any(|a| matches!(a.kind, AttemptKind::InfraRetry { n: 1 })),
            "{version}: {:?}",
            rec.attempts
        );

        let target = env.target("demo-fp4-b200-vllm").await;
        let rec = env.finish(&journal, &target).await;
        let ending = rec.ending.as_ref().expect("ending");
        assert_eq!(ending.outcome, Outcome::Failed, "{version}: {ending:?}");
        let pull = env.pull(rec.pull.expect("pull")).await;
        assert!(
            !pull.state.is_open() && pull.draft,
            "{version}: closed as a draft"
        );
        assert!(pull.labels.is_empty(), "{version}: {:?}", pull.labels);
        assert!(env.claims().await.is_empty(), "{version}: claims released");
    }
}

fn posts(log: &[klaud_sandbox::github::LogEntry], needle: &str) -> usize {
    log.iter()
        .filter(|e| e.method == "POST" && e.path.contains(needle))
        .count()
}

/// A dispatch whose answer is lost (the run was created, the client saw a
/// 502) is found by its title, actor, event and creation time, not
/// dispatched a second time.
#[tokio::test]
async fn a_lost_dispatch_answer_finds_the_run_instead_of_dispatching_again() {
    let Some(seed) = real_seed("843c6254") else {
        return;
    };
    let env = Harness::demo()
        .seed_dir(seed.path())
        .script(VALIDATED_SCRIPT)
        .start()
        .await;
    env.stack
        .state()
        .add_fault(Fault {
            method: Some("POST".into()),
            path: "*/dispatches".into(),
            count: 1,
            action: FaultAction::AfterWriteStatus { status: 502 },
        })
        .await;
    let target = env.target("demo-fp4-b200-sglang").await;
    let rec = env.finish(&MemoryJournal::new(), &target).await;
    assert_validated(&env, &target, &rec).await;
    let log = env.stack.state().request_log().await;
    assert_eq!(posts(&log, "/dispatches"), 1, "one GPU run, no duplicate");
}

/// A re-run request answered 502 without starting anything is not an
/// attempt: Klaud re-reads the run, sees no new attempt, asks again, and the
/// candidate is validated after one infrastructure failure, not failed
/// after phantom attempts.
#[tokio::test]
async fn a_rerun_answered_502_counts_only_once_github_shows_the_attempt() {
    let Some(seed) = real_seed("newer") else {
        return;
    };
    let script = r#"
[families."*"]
smoke = ["success"]
sweep = ["infra:timed_out", "infra:timed_out", "success"]
"#;
    let env = Harness::demo()
        .seed_dir(seed.path())
        .script(script)
        .start()
        .await;
    env.stack
        .state()
        .add_fault(Fault {
            method: Some("POST".into()),
            path: "*/rerun".into(),
            count: 1,
            action: FaultAction::Status {
                status: 502,
                retry_after: None,
                message: None,
            },
        })
        .await;
    let target = env.target("demo-fp4-b200-sglang").await;
    let rec = env.finish(&MemoryJournal::new(), &target).await;
    assert_validated(&env, &target, &rec).await;
    // Every recorded attempt is one GitHub shows: the bound run's attempts
    // 1, 2, … in order, the last one passed, and no phantom in between.
    let statuses = sweeps(&rec);
    assert!(statuses.len() >= 2, "{:?}", rec.attempts);
    assert_eq!(statuses.last(), Some(&AttemptStatus::Passed));
    let runs: Vec<_> = rec
        .attempts
        .iter()
        .filter(|a| a.kind == AttemptKind::FinalSweep)
        .filter_map(|a| a.run.clone())
        .collect();
    let numbers: Vec<u32> = runs.iter().map(|r| r.attempt).collect();
    assert_eq!(
        numbers,
        (1..=numbers.len() as u32).collect::<Vec<_>>(),
        "{:?}",
        rec.attempts
    );
    let live = env.forge.get_run(runs[0].id).await.expect("run");
    assert_eq!(numbers.len() as u64, live.run_attempt);
    let log = env.stack.state().request_log().await;
    assert_eq!(
        posts(&log, "/rerun"),
        numbers.len(),
        "one refused request, then one per new attempt"
    );
}

/// A smoke workflow that requires an input Klaud does not send ends the
/// candidate before any dispatch, naming the input; nothing is dispatched
/// and the PR is cleaned up.
#[tokio::test]
async fn a_smoke_workflow_requiring_an_unknown_input_ends_before_any_dispatch() {
    let smoke = r#"name: End-to-End Tests
run-name: e2e Test - ${{ inputs.test-name }}
on:
  workflow_dispatch:
    inputs:
      ref: {type: string, required: false}
      generate-cli-command: {type: string, required: false, default: ""}
      test-name: {type: string, required: false}
      runner-pool: {type: string, required: true}
jobs:
  smoke:
    runs-on: ubuntu-latest
    steps:
      - run: echo smoke
"#;
    let seed = seed_with(&[("e2e-tests.yml".into(), smoke.as_bytes().to_vec())]);
    let env = Harness::demo()
        .seed_dir(seed.path())
        .script(VALIDATED_SCRIPT)
        .start()
        .await;
    let target = env.target("demo-fp4-b200-sglang").await;
    let rec = env.finish(&MemoryJournal::new(), &target).await;
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Incompatible, "{ending:?}");
    assert!(
        ending.message.contains("\"runner-pool\""),
        "{}",
        ending.message
    );
    let log = env.stack.state().request_log().await;
    assert_eq!(posts(&log, "/dispatches"), 0);
    let pull = env.pull(rec.pull.expect("pull")).await;
    assert!(!pull.state.is_open(), "cleaned up");
}

/// A sweep run that skipped every job (the 843c6254 sweep on a draft, here
/// with the setting wrongly saying drafts run) is its own case: the
/// candidate ends `uncertain` with a message naming the setting, and the
/// run is not re-run as if the infrastructure had failed.
#[tokio::test]
async fn a_skipped_sweep_ends_uncertain_with_its_own_message_and_is_not_rerun() {
    let Some(seed) = real_seed("843c6254") else {
        return;
    };
    // No script: the CI simulator leaves runs alone and this test decides
    // their conclusions, as the real workflow would.
    let mut env = Harness::demo().seed_dir(seed.path()).start().await;
    env.config.sweep_runs_on_drafts = klaud_lifecycle::workflow_contract::DraftPolicy::Runs;
    env.config.dispatch_grace = chrono::TimeDelta::seconds(1);
    let target = env.target("demo-fp4-b200-sglang").await;
    let state = env.stack.state().clone();
    let conclude = async {
        loop {
            for id in state.run_ids(crate::support::REPO).await {
                let run = env.forge.get_run(id).await.expect("run");
                if run.status == Some("completed".into()) {
                    continue;
                }
                let conclusion = if run.event == "workflow_dispatch" {
                    "success"
                } else {
                    "skipped"
                };
                state
                    .complete_run(crate::support::REPO, id, conclusion, Default::default())
                    .await
                    .expect("complete");
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    };
    let journal = MemoryJournal::new();
    let rec = tokio::select! {
        rec = env.finish(&journal, &target) => rec,
        () = conclude => unreachable!("the poller never ends"),
    };
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Uncertain, "{ending:?}");
    assert!(
        ending.message.contains("concluded skipped")
            && ending.message.contains("sweep_runs_on_drafts"),
        "{}",
        ending.message
    );
    let log = env.stack.state().request_log().await;
    assert_eq!(posts(&log, "/rerun"), 0, "a skipped sweep is not re-run");
}

/// The demo repository with its own workflow files, in a temporary
/// directory.
fn demo_seed() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    support::copy_tree(
        &Path::new(support::REPO_ROOT).join("configs/demo"),
        dir.path(),
    );
    assert!(
        dir.path().join(".github/workflows/run-sweep.yml").is_file(),
        "the demo has its own sweep workflow"
    );
    dir
}

/// The sweep runs of the PR whose head is `head`, oldest first.
async fn pr_sweep_runs(env: &Harness, head: &str) -> Vec<klaud_github::RunInfo> {
    let mut out = Vec::new();
    for id in env.stack.state().run_ids(crate::support::REPO).await {
        let run = env.forge.get_run(id).await.expect("run");
        if run.event == "pull_request"
            && run.head_sha == head
            && run.name.as_deref() == Some("Run Sweep")
        {
            out.push(run);
        }
    }
    out.sort_by_key(|r| r.id);
    out
}

/// A merge to main that changes the changelog starts the sweep workflow's
/// `push` run, titled by the merged commit's message. A squash merge carries
/// the PR title, so the push run's title is exactly the one Klaud's own
/// sweep carries, and it is the newest run. Klaud still binds the PR's
/// `pull_request` run on the candidate head and never cancels the push run:
/// on the real 843c6254 files and on the demo's own.
#[tokio::test]
async fn a_push_run_on_main_is_never_bound_as_the_final_sweep_nor_cancelled() {
    let mut seeds = vec![("demo", demo_seed())];
    if let Some(real) = real_seed("843c6254") {
        seeds.push(("843c6254", real));
    }
    for (version, seed) in seeds {
        let script = r#"
[families."*"]
smoke = ["success"]
sweep = [{ delay = 1, outcome = "success" }]
"#;
        let env = Harness::demo()
            .seed_dir(seed.path())
            .script(script)
            .start()
            .await;
        let target = env.target("demo-fp4-b200-sglang").await;
        let state = env.stack.state().clone();
        let journal = MemoryJournal::new();
        // As soon as the PR's sweep run exists, a maintainer merges another
        // PR to main (squash: the commit message is a PR title, here the
        // candidate's own) that appends to the changelog.
        let merge = async {
            loop {
                for id in state.run_ids(crate::support::REPO).await {
                    let run = env.forge.get_run(id).await.expect("run");
                    let Some(title) = run.display_title.as_deref() else {
                        continue;
                    };
                    if run.event != "pull_request"
                        || run.conclusion.as_ref().map(|c| c.as_str()) == Some("skipped")
                    {
                        continue;
                    }
                    let Some(pr_title) = title.strip_prefix("Run Sweep - ") else {
                        continue;
                    };
                    let tip = state
                        .ref_sha(crate::support::REPO, "refs/heads/main")
                        .await
                        .expect("main");
                    let main = env
                        .forge
                        .get_contents("perf-changelog.yaml", &tip)
                        .await
                        .expect("read")
                        .expect("changelog on main");
                    let mut text = String::from_utf8(main).expect("utf-8");
                    text.push_str(
                        "\n- config-keys:\n    - demo-fp8-h200-trt\n  description:\n    - \"Merged by hand\"\n  pr-link: https://github.com/demo/benchmarks/pull/999\n",
                    );
                    let files = [("perf-changelog.yaml".to_string(), Some(text.into_bytes()))]
                        .into_iter()
                        .collect();
                    state
                        .push_commit(
                            crate::support::REPO,
                            "main",
                            klaud_sandbox::stack::MAINTAINER,
                            files,
                            pr_title,
                        )
                        .await
                        .expect("merge to main");
                    return pr_title.to_string();
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        };
        let (rec, pr_title) = tokio::join!(env.finish(&journal, &target), merge);
        assert_validated(&env, &target, &rec).await;

        let mut push_runs = Vec::new();
        for id in state.run_ids(crate::support::REPO).await {
            let run = env.forge.get_run(id).await.expect("run");
            if run.event == "push" {
                push_runs.push(run);
            }
        }
        assert_eq!(push_runs.len(), 1, "{version}: one push run: {push_runs:?}");
        let push = &push_runs[0];
        assert_eq!(
            push.display_title.as_deref(),
            Some(format!("Run Sweep - {pr_title}").as_str()),
            "{version}: titled by the merged commit's message"
        );
        let bound: Vec<u64> = rec
            .attempts
            .iter()
            .filter(|a| a.kind == AttemptKind::FinalSweep)
            .filter_map(|a| a.run.as_ref().map(|r| r.id))
            .collect();
        assert!(!bound.is_empty(), "{version}");
        assert!(
            !bound.contains(&push.id),
            "{version}: the push run {} was bound: {bound:?}",
            push.id
        );
        let pull = env.pull(rec.pull.expect("pull")).await;
        let own = pr_sweep_runs(&env, &pull.head_sha).await;
        assert!(
            own.iter().any(|r| bound.contains(&r.id)),
            "{version}: {own:?}"
        );
        let log = state.request_log().await;
        assert!(
            !log.iter()
                .any(|e| e.method == "POST" && e.path.contains(&format!("/runs/{}/", push.id))),
            "{version}: Klaud wrote to the push run"
        );
        // The simulator ran the push run to its end, untouched.
        let live = env.forge.get_run(push.id).await.expect("push run");
        assert_ne!(
            live.conclusion.as_ref().map(|c| c.as_str()),
            Some("cancelled"),
            "{version}"
        );
    }
}

/// Concurrency on the real files: the event before Klaud's sweep label
/// (the newer version sweeps on the `synchronize` of Klaud's changelog
/// commit; the older one on `ready_for_review`, the draft's `synchronize`
/// being skipped) starts a run on the candidate head, and the label's run
/// lands in the same `cancel-in-progress` group and cancels it. Klaud binds
/// the run concurrency did not cancel.
#[tokio::test]
async fn the_sweep_run_concurrency_did_not_cancel_is_the_one_bound() {
    for version in ["843c6254", "newer"] {
        let Some(seed) = real_seed(version) else {
            return;
        };
        // Every sweep run stays running a moment, so the earlier one is
        // still queued or running when the label's run starts.
        let script = r#"
[families."*"]
smoke = ["success"]
sweep = [{ delay = 2, outcome = "success" }]
"#;
        let env = Harness::demo()
            .seed_dir(seed.path())
            .script(script)
            .start()
            .await;
        let target = env.target("demo-fp4-b200-sglang").await;
        let rec = env.finish(&MemoryJournal::new(), &target).await;
        assert_validated(&env, &target, &rec).await;
        let pull = env.pull(rec.pull.expect("pull")).await;
        let runs = pr_sweep_runs(&env, &pull.head_sha).await;
        let bound = rec
            .attempts
            .iter()
            .rev()
            .find(|a| a.kind == AttemptKind::FinalSweep)
            .and_then(|a| a.run.as_ref())
            .expect("a bound sweep")
            .id;
        let cancelled: Vec<u64> = runs
            .iter()
            .filter(|r| r.conclusion.as_ref().map(|c| c.as_str()) == Some("cancelled"))
            .map(|r| r.id)
            .collect();
        assert_eq!(cancelled.len(), 1, "{version}: {runs:?}");
        assert!(
            cancelled[0] < bound,
            "{version}: the older run was cancelled"
        );
        let live = env.forge.get_run(bound).await.expect("bound run");
        assert_eq!(
            live.conclusion.as_ref().map(|c| c.as_str()),
            Some("success"),
            "{version}"
        );
        // The survivor is the label's run: the newest of the PR's sweep runs.
        assert_eq!(
            runs.last().map(|r| r.id),
            Some(bound),
            "{version}: {runs:?}"
        );
    }
}
