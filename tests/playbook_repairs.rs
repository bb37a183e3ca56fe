//! The playbook through the sandbox: the demo repository carries one
//! (`configs/demo/.github/klaud-playbook.yaml`), the CI script makes a job
//! fail with given log lines on a given node and pass once a given edit is
//! at the run's head. A known OOM is repaired without a hook; a fix that
//! does not help is followed by the next, then the candidate fails listing
//! both; an OOM outside the entry's scope is not touched; a node failure is
//! retried as infrastructure; teardown noise after the window is no failure.

use klaud_lifecycle::engine::MemoryJournal;
use klaud_lifecycle::model::{AttemptKind, Outcome};

use crate::support::{FailsUntil, Harness};

const SCRIPT: &str = "benchmarks/single_node/fixed_seq_len/demo_fp4_b200_vllm.sh";
const OOM: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. \
                   GPU 3 has a total capacity of 178.35 GiB of which 1.12 GiB is free.";

/// A script where `family`'s smokes fail with `lines` on `node` until
/// `contains` is in the demo's vLLM benchmark script.
fn failing_until(family: &str, lines: &[&str], node: &str, contains: &str) -> String {
    FailsUntil {
        family,
        lines,
        node,
        file: SCRIPT,
        contains,
    }
    .smokes()
}

/// The bodies of the bot's report comments on pull request `number`.
async fn reports(env: &Harness, number: impl Into<u64>) -> Vec<String> {
    env.bodies(number)
        .await
        .into_iter()
        .filter(|b| b.contains("klaud-report:"))
        .collect()
}

async fn script_at_tip(env: &Harness, branch: &str) -> String {
    let bytes = env
        .forge
        .get_contents(SCRIPT, branch)
        .await
        .expect("read")
        .expect("present");
    String::from_utf8(bytes).expect("utf-8")
}

#[tokio::test]
async fn a_known_oom_is_repaired_by_the_playbook_without_a_hook() {
    let env = Harness::demo()
        .script(&failing_until(
            "demo-fp4-b200-vllm",
            &[OOM],
            "b200-dgx-07",
            "--gpu-memory-utilization 0.90",
        ))
        .start()
        .await;
    let target = env.target("demo-fp4-b200-vllm").await;
    let journal = MemoryJournal::new();
    let rec = env.finish(&journal, &target).await;
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Validated, "{ending:?}");
    assert_eq!(rec.repairs, 1);
    let kinds: Vec<AttemptKind> = rec.attempts.iter().map(|a| a.kind).collect();
    assert_eq!(
        kinds,
        vec![
            AttemptKind::Initial { budget: 5 },
            AttemptKind::Repair { n: 1, budget: 5 },
            AttemptKind::FinalSweep
        ]
    );
    // The edit is the one value, byte-exact.
    let base = std::fs::read_to_string(crate::support::demo_seed().join(SCRIPT)).expect("seed");
    assert_eq!(
        script_at_tip(&env, &rec.branch).await,
        base.replace(
            "--gpu-memory-utilization 0.95",
            "--gpu-memory-utilization 0.90"
        )
    );
    let number = rec.pull.expect("pull");
    let bodies = reports(&env, number).await;
    // The failed smoke's report names the class, the entry, the node and
    // the matching line, in both languages.
    let failed = bodies
        .iter()
        .find(|b| b.contains("**Triage:**"))
        .expect("a triaged report");
    assert!(failed.contains("known engine failure"), "{failed}");
    assert!(failed.contains("`vllm-oom-at-load`"), "{failed}");
    assert!(failed.contains("on node `b200-dgx-07`"), "{failed}");
    assert!(failed.contains("torch.OutOfMemoryError"), "{failed}");
    assert!(failed.contains("**分诊**："), "{failed}");
    assert!(failed.contains("已知引擎故障"), "{failed}");
    // Every one of the run's failed jobs printed the OOM; triage stopped
    // at the first, whose known failure has a fix to make: one log read,
    // the rest named in the report as not read.
    let failed_jobs = failed.matches(r#""conclusion":"failure""#).count();
    let log = env.stack.state().request_log().await;
    let first_smoke = rec.attempts[0].run.as_ref().expect("first smoke").id;
    let listed = log
        .iter()
        .position(|r| {
            r.path
                .contains(&format!("/actions/runs/{first_smoke}/jobs"))
        })
        .expect("the failed smoke's jobs listed");
    let logs_read = log[listed..]
        .iter()
        .take_while(|r| !(r.method == "POST" && r.path.ends_with("/comments")))
        .filter(|r| r.path.contains("/actions/jobs/") && r.path.ends_with("/logs"))
        .count();
    assert_eq!((failed_jobs, logs_read), (6, 1), "{failed}");
    assert!(
        failed.contains("The logs of 5 later failed job(s) were not read")
            && failed.contains("个失败作业的日志未读取"),
        "{failed}"
    );
    // Between the failed jobs' logs and the repair's push, the branch is
    // not compared (this journal opened the PR and made no repair yet, so
    // no fix was tried) and read at most once: the ownership proof's look
    // at where it points, which a wave answers from its listing of Klaud's
    // branches when the step runs in the pass that listed them.
    // The repair's commit and push are one GraphQL request, the first
    // after the failed jobs' logs were read.
    let first_log = log
        .iter()
        .position(|r| r.path.ends_with("/logs"))
        .expect("the failed jobs' logs");
    let push = first_log
        + log[first_log..]
            .iter()
            .position(|r| r.method == "POST" && r.path == "/graphql")
            .expect("the repair's push");
    let triaged = log[..push]
        .iter()
        .rposition(|r| r.path.ends_with("/logs"))
        .expect("the failed jobs' logs");
    let between = &log[triaged..push];
    let compares: Vec<_> = between
        .iter()
        .filter(|r| r.path.contains("/compare/"))
        .collect();
    assert!(compares.is_empty(), "{compares:#?}");
    let branch_reads = between
        .iter()
        .filter(|r| r.method == "GET" && r.path.contains("/git/ref/heads/klaud/auto-"))
        .count();
    assert!(branch_reads <= 1, "{between:#?}");
    // What the repair changed is Klaud's own commit on the failed head:
    // the repaired smoke's report lists it without asking GitHub.
    let repaired = rec.attempts[1].head.as_str();
    let compares: Vec<_> = log
        .iter()
        .filter(|r| r.path.contains("/compare/") && r.path.contains(repaired))
        .collect();
    assert!(compares.is_empty(), "{compares:#?}");
    assert!(
        bodies
            .iter()
            .any(|b| b.contains("What repair") && b.contains("demo_fp4_b200_vllm.sh")),
        "{bodies:#?}"
    );
    // The repaired smoke's report says which entry and fix the repair was.
    assert!(
        bodies.iter().any(|b| b.contains("What repair")
            && b.contains("vllm-oom-at-load (--gpu-memory-utilization 0.95 → 0.90)")),
        "{bodies:#?}"
    );
    // And why, from the entry's diagnosis, in both languages.
    assert!(
        bodies.iter().any(|b| b.contains(
            "Why playbook entry `vllm-oom-at-load` (fix 1): vLLM's CUDA-graph memory profiler"
        ) && b.contains(
            "剧本条目 `vllm-oom-at-load`（第 1 个修复）的原因：vLLM 的 CUDA 图内存分析器"
        )),
        "{bodies:#?}"
    );
}

#[tokio::test]
async fn a_fix_that_does_not_help_is_followed_by_the_next_then_both_are_listed() {
    let env = Harness::demo()
        .script(&failing_until(
            "demo-fp4-b200-vllm",
            &[OOM],
            "b200-dgx-07",
            "an edit no playbook makes",
        ))
        .start()
        .await;
    let target = env.target("demo-fp4-b200-vllm").await;
    let journal = MemoryJournal::new();
    let rec = env.finish(&journal, &target).await;
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Failed, "{ending:?}");
    assert_eq!(rec.repairs, 2, "{ending:?}");
    assert!(
        ending.message.contains(
            "playbook fixes tried without success: vllm-oom-at-load#1, vllm-oom-at-load#2"
        ),
        "{ending:?}"
    );
    assert!(
        ending.message.contains("no repair hook is configured"),
        "{ending:?}"
    );
}

#[tokio::test]
async fn an_oom_outside_the_entrys_scope_is_not_repaired() {
    // The entry holds for vLLM only: the same words from SGLang are not
    // its failure, and nothing is committed.
    let env = Harness::demo()
        .script(&failing_until(
            "demo-fp4-b200-sglang",
            &[OOM],
            "b200-dgx-07",
            "--gpu-memory-utilization 0.90",
        ))
        .start()
        .await;
    let target = env.target("demo-fp4-b200-sglang").await;
    let journal = MemoryJournal::new();
    let rec = env.finish(&journal, &target).await;
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Failed, "{ending:?}");
    assert_eq!(rec.repairs, 0);
    assert_eq!(
        ending.message, "the smoke failed and no repair hook is configured",
        "{ending:?}"
    );
    let number = rec.pull.expect("pull");
    let bodies = reports(&env, number).await;
    assert!(
        bodies.iter().any(|b| b.contains("unknown failure")),
        "{bodies:#?}"
    );
    assert!(
        !bodies.iter().any(|b| b.contains("vllm-oom-at-load")),
        "{bodies:#?}"
    );
}

#[tokio::test]
async fn a_failure_on_a_sick_node_is_retried_as_infrastructure_for_two_families() {
    let env = Harness::demo()
        .script(
            r#"
[families."*"]
smoke = ["success"]
sweep = ["success"]
[families.demo-fp8-h200-trt]
smoke = [{ outcome = "failure", log_lines = ["srun: error: pyxis is broken"], node = "mia1-p01-g09" }, "success"]
[families.demo-fp4-b200-sglang]
smoke = [{ outcome = "failure", log_lines = ["srun: error: pyxis is broken"], node = "mia1-p01-g09" }, "success"]
"#,
        )
        .start()
        .await;
    for key in ["demo-fp8-h200-trt", "demo-fp4-b200-sglang"] {
        let target = env.target(key).await;
        let journal = MemoryJournal::new();
        let from = env.stack.state().request_log().await.len();
        let rec = env.finish(&journal, &target).await;
        // Every failed job ran on the node the first log shows broken:
        // that log decides, the others are not read.
        let logs = env.stack.state().request_log().await[from..]
            .iter()
            .filter(|r| r.path.ends_with("/logs"))
            .count();
        assert_eq!(logs, 1, "{key}");
        let ending = rec.ending.as_ref().expect("ending");
        assert_eq!(ending.outcome, Outcome::Validated, "{key}: {ending:?}");
        assert_eq!(rec.repairs, 0, "{key}");
        assert!(rec.attempts[0].infra, "{key}: {:?}", rec.attempts);
        assert_eq!(
            rec.attempts[1].kind,
            AttemptKind::InfraRetry { n: 1 },
            "{key}"
        );
        let bodies = reports(&env, rec.pull.expect("pull")).await;
        let first = bodies
            .iter()
            .find(|b| b.contains("**Triage:**"))
            .expect("a triaged report");
        assert!(first.contains("infrastructure failure"), "{first}");
        assert!(first.contains("on node `mia1-p01-g09`"), "{first}");
        assert!(first.contains("`node-pyxis-broken`"), "{first}");
        assert!(first.contains("基础设施故障"), "{first}");
        let failed_jobs = first
            .lines()
            .find(|l| l.starts_with("**Failed jobs:**"))
            .expect("the failed jobs");
        assert!(
            failed_jobs.matches("(failure)").count() > 1,
            "{failed_jobs}"
        );
    }
}

#[tokio::test]
async fn teardown_noise_after_the_window_is_not_a_failure() {
    let env = Harness::demo()
        .script(
            r#"
[families."*"]
smoke = ["success"]
sweep = ["success"]
[families.demo-fp4-b200-vllm]
smoke = [{ outcome = "failure", partial = true, node = "b200-dgx-07", log_lines = [
  "============ Serving Benchmark Result ============",
  "Successful requests:                     64",
  "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace for the root cause.",
] }]
"#,
        )
        .start()
        .await;
    let target = env.target("demo-fp4-b200-vllm").await;
    let journal = MemoryJournal::new();
    let rec = env.finish(&journal, &target).await;
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Validated, "{ending:?}");
    assert_eq!(rec.repairs, 0);
    let bodies = reports(&env, rec.pull.expect("pull")).await;
    let smoke = bodies
        .iter()
        .find(|b| b.contains("**Triage:**"))
        .expect("a triaged report");
    assert!(
        smoke.contains("teardown noise after the window (not a failure)"),
        "{smoke}"
    );
    assert!(smoke.contains("`engine-dead-after-window`"), "{smoke}");
}
