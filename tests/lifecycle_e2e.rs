//! The candidate lifecycle end to end: the real engine, the octocrab forge
//! and the GitHub, registry, CI and baseline simulators over loopback.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use klaud_claims::{CandidateId, Claimant};
use klaud_lifecycle::engine::{
    CandidateRecord, Journal, MemoryJournal, Progress, RepairContext, RepairError, RepairHook,
    RepairOutcome, Step, Target,
};
use klaud_lifecycle::model::{AttemptKind, Outcome};
use klaud_planner::plan::{PlanOptions, plan};
use klaud_sandbox::stack::MAINTAINER;
use klaud_service::GithubLifecycle;

use crate::support::{BOT, Harness, OWNER_RUN, REPO, assert_unique, engine_config, markers, owner};

pub(crate) const VALIDATED_SCRIPT: &str = r#"
[families."*"]
smoke = ["success"]
sweep = ["success"]
[families.demo-fp4-b200-vllm]
smoke = ["failure"]
[families.demo-fp8-h200-trt]
smoke = ["infra", "success"]
[families.demo-fp4-b300-vllm-agentic]
smoke = ["failure", "success"]
[families.demo-fp8-mi355x-sglang]
sweep = ["infra:timed_out", "success"]
"#;

pub(crate) async fn assert_validated(env: &Harness, target: &Target, rec: &CandidateRecord) {
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Validated, "{ending:?}");
    let pulls = env.pulls(&rec.branch).await;
    assert_eq!(pulls.len(), 1, "one PR for the branch");
    let pull = env.pull(pulls[0]).await;
    assert!(
        pull.state.is_open() && !pull.draft,
        "validated PRs are open and ready"
    );
    assert_eq!(pull.labels, vec!["full-sweep-fail-fast".to_owned()]);
    assert!(
        pull.body
            .as_deref()
            .unwrap_or("")
            .contains("<!-- klaud-baseline-body -->")
    );
    let bodies = env.bodies(pull.number).await;
    let m = markers(&bodies);
    assert_unique(&m);
    assert!(m.iter().any(|k| k.starts_with("klaud-outcome:")), "{m:?}");
    // The baseline is in the PR body only: no comment repeats it.
    assert!(!m.iter().any(|k| k.ends_with(":baseline")), "{m:?}");
    assert!(env.claims().await.is_empty(), "claim released");
    // The head carries the bump and the changelog entry.
    let changelog = env
        .forge
        .get_contents(
            &format!("{}perf-changelog.yaml", env.repository.prefix()),
            &pull.head_sha,
        )
        .await
        .expect("read")
        .expect("exists");
    let text = String::from_utf8(changelog).expect("utf-8");
    assert!(
        text.contains(&format!("https://github.com/{REPO}/pull/{}", pull.number)),
        "{text}"
    );
    assert!(text.ends_with('\n') && !text.ends_with("\n\n"));
    let master = env
        .forge
        .get_contents(
            &format!("{}configs/nvidia-master.yaml", env.repository.prefix()),
            &pull.head_sha,
        )
        .await
        .expect("read")
        .expect("exists");
    let image = target
        .image
        .split('@')
        .next()
        .unwrap_or_default()
        .to_owned();
    assert!(String::from_utf8_lossy(&master).contains(&image));
}

#[tokio::test]
async fn validated_candidate_ends_ready_for_review_with_receipt() {
    let env = Harness::demo().script(VALIDATED_SCRIPT).start().await;
    let target = env.target("demo-fp4-b200-sglang").await;
    let journal = MemoryJournal::new();
    let rec = env.finish(&journal, &target).await;
    assert_validated(&env, &target, &rec).await;
    assert_eq!(rec.runs().len(), 2, "one smoke and the final sweep");
    assert_eq!(env.dispatches().await, 1);
    let pull = env.pull(rec.pull.expect("pull")).await;
    let bodies = env.bodies(pull.number).await;
    // Reports and receipt as published, run-specific numbers redacted.
    let redact = regex::Regex::new(r"(https?://127\.0\.0\.1:\d+|\b\d{6,}\b|\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(:\d{2}(\.\d+)?Z?)?( UTC)?|\b[0-9a-f]{40}\b|\b[0-9a-f]{16}-[0-9a-f]{16}\b|\d{4}-\d{2}-\d{2})")
        .expect("regex");
    let receipt = bodies
        .iter()
        .find(|b| b.starts_with("<!-- klaud-outcome:"))
        .expect("receipt");
    insta::assert_snapshot!("validated_receipt", redact.replace_all(receipt, "[X]"));
    insta::assert_snapshot!("validated_pr_title", pull.title);
    let smoke = bodies
        .iter()
        .find(|b| b.contains("Initial smoke, repair 0/5"))
        .expect("smoke report");
    insta::assert_snapshot!("validated_smoke_report", redact.replace_all(smoke, "[X]"));
    let body = pull.body.clone().unwrap_or_default();
    insta::assert_snapshot!("validated_pr_body", redact.replace_all(&body, "[X]"));
    // Driving again changes nothing.
    let before = env.stack.state().request_log().await;
    let again = env.finish(&journal, &target).await;
    assert_eq!(again.step, Step::Done);
    let after = env.stack.state().request_log().await;
    assert!(
        after[before.len()..].iter().all(|e| e.method == "GET"),
        "a finished candidate makes no writes"
    );
}

#[tokio::test]
async fn failed_smoke_without_hook_cleans_up() {
    let env = Harness::demo().script(VALIDATED_SCRIPT).start().await;
    let target = env.target("demo-fp4-b200-vllm").await;
    let journal = MemoryJournal::new();
    let rec = env.finish(&journal, &target).await;
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Failed);
    let number = rec.pull.expect("pull");
    let pull = env.pull(number).await;
    assert!(
        !pull.state.is_open() && pull.draft,
        "closed and back to draft"
    );
    assert!(pull.labels.is_empty());
    assert_eq!(
        env.forge
            .get_ref(&format!("refs/heads/{}", rec.branch))
            .await
            .expect("ref"),
        None
    );
    let m = markers(&env.bodies(number).await);
    assert_unique(&m);
    assert!(m.iter().any(|k| k.starts_with("klaud-cleanup:")), "{m:?}");
    assert!(
        m.last().is_some_and(|k| k.starts_with("klaud-outcome:")),
        "{m:?}"
    );
    assert!(env.claims().await.is_empty());
    let receipt = env
        .bodies(number)
        .await
        .into_iter()
        .find(|b| b.starts_with("<!-- klaud-outcome:"))
        .expect("receipt");
    assert!(receipt.contains("**failed** · Repairs: 0"), "{receipt}");
    // The failed attempt's report names the failed jobs (the benchmark
    // jobs, as GitHub names the real workflow's jobs) with their log pages,
    // as the Actions jobs API gives them (`html_url`), in both languages.
    let failed_report = env
        .bodies(number)
        .await
        .into_iter()
        .find(|b| b.contains("klaud-report:") && b.contains("Failed jobs:"))
        .expect("a report naming the failed jobs");
    let job_link = regex::Regex::new(
        r"\*\*Failed jobs:\*\* \[single-node / / p1 \\\| demo fp4 b200 vllm TP8 c4\]\(http://127\.0\.0\.1:\d+/_html/demo/benchmarks/actions/runs/\d+/job/\d+\) \(failure\)",
    )
    .expect("regex");
    assert!(job_link.is_match(&failed_report), "{failed_report}");
    let job_url = regex::Regex::new(
        r#""failed_jobs":\[\{"name":"single-node / / p1 \| demo fp4 b200 vllm TP8 c4","conclusion":"failure","url":"http://127\.0\.0\.1:\d+/_html/demo/benchmarks/actions/runs/\d+/job/\d+"(,"triage":\{"class":"unknown"\})?\},"#,
    )
    .expect("regex");
    assert!(job_url.is_match(&failed_report), "{failed_report}");
    assert!(
        failed_report.contains("**失败的作业**："),
        "{failed_report}"
    );
    let redact = regex::Regex::new(
        r"(https?://127\.0\.0\.1:\d+|\b\d{6,}\b|\b[0-9a-f]{40}\b|\b[0-9a-f]{16}-[0-9a-f]{16}\b)",
    )
    .expect("regex");
    insta::assert_snapshot!("failed_receipt", redact.replace_all(&receipt, "[X]"));
    let cleanup = env
        .bodies(number)
        .await
        .into_iter()
        .find(|b| b.starts_with("<!-- klaud-cleanup:"))
        .expect("cleanup marker");
    insta::assert_snapshot!("failed_cleanup", redact.replace_all(&cleanup, "[X]"));
}

#[tokio::test]
async fn infrastructure_failure_is_retried_without_counting_as_repair() {
    let env = Harness::demo().script(VALIDATED_SCRIPT).start().await;
    let target = env.target("demo-fp8-h200-trt").await;
    let journal = MemoryJournal::new();
    let rec = env.finish(&journal, &target).await;
    assert_validated(&env, &target, &rec).await;
    let kinds: Vec<AttemptKind> = rec.attempts.iter().map(|a| a.kind).collect();
    assert_eq!(
        kinds,
        vec![
            AttemptKind::Initial { budget: 5 },
            AttemptKind::InfraRetry { n: 1 },
            AttemptKind::FinalSweep
        ]
    );
    assert_eq!(rec.repairs, 0);
    assert_eq!(env.dispatches().await, 2);
}

/// A repair hook that pushes one commit onto the branch as the bot.
pub(crate) struct PushingHook {
    state: klaud_sandbox::github::GithubState,
    calls: Mutex<Vec<u32>>,
    seen: Mutex<Vec<RepairContext>>,
}

impl PushingHook {
    pub(crate) fn new(state: klaud_sandbox::github::GithubState) -> Self {
        PushingHook {
            state,
            calls: Mutex::new(Vec::new()),
            seen: Mutex::new(Vec::new()),
        }
    }
}

#[async_trait]
impl RepairHook for PushingHook {
    async fn repair(&self, ctx: &RepairContext) -> Result<RepairOutcome, RepairError> {
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(ctx.repair);
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(ctx.clone());
        let mut files = BTreeMap::new();
        files.insert(
            format!("repairs/{}.txt", ctx.repair),
            Some(b"tuned\n".to_vec()),
        );
        self.state
            .push_commit(
                REPO,
                &ctx.branch,
                BOT,
                files,
                &format!("Repair the smoke\n\n{}\n", ctx.trailer),
            )
            .await
            .map_err(RepairError::new)?;
        Ok(RepairOutcome::Pushed)
    }
}

#[tokio::test]
async fn failed_smoke_is_repaired_by_the_hook() {
    let env = Harness::demo().script(VALIDATED_SCRIPT).start().await;
    let target = env.target("demo-fp4-b300-vllm-agentic").await;
    let journal = MemoryJournal::new();
    let hook = PushingHook::new(env.stack.state().clone());
    let rec = env.finish_with(&journal, &target, Some(&hook)).await;
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Validated, "{ending:?}");
    assert_eq!(rec.repairs, 1);
    assert_eq!(*hook.calls.lock().expect("calls"), vec![1]);
    // The hook was told which jobs failed, where their logs are, and what
    // the failed run uploaded.
    let seen = hook.seen.lock().expect("seen").clone();
    let ctx = &seen[0];
    assert_eq!(ctx.version, 2);
    assert_eq!(ctx.budget_left, 4);
    let job = ctx.failed_jobs.first().expect("a failed job");
    assert_eq!(job.conclusion.as_str(), "failure");
    assert!(
        job.url.as_deref().is_some_and(|u| u.contains("/job/")),
        "{job:?}"
    );
    assert!(
        ctx.run.as_ref().is_some_and(|r| ctx.failed_jobs[0]
            .url
            .as_deref()
            .is_some_and(|u| u.contains(&format!("/runs/{}/", r.id)))),
        "{ctx:?}"
    );
    assert!(
        rec.attempts
            .iter()
            .any(|a| a.kind == AttemptKind::Repair { n: 1, budget: 5 })
    );
}

/// Drives a candidate (no CI simulator: runs stay queued) until its smoke
/// run is dispatched, then returns the record.
async fn until_smoke_dispatched(
    env: &Harness,
    journal: &MemoryJournal,
    target: &Target,
) -> CandidateRecord {
    let lifecycle = GithubLifecycle::new(&env.forge);
    let clock = env.clock;
    let engine = env.engine(&lifecycle, journal, clock);
    let mut rec = engine.open_record(target).await.expect("record");
    for _ in 0..100 {
        engine.step(&mut rec).await.expect("step");
        if rec.attempts.first().is_some_and(|a| a.run.is_some()) {
            return rec;
        }
    }
    panic!("never dispatched: {rec:#?}");
}

async fn complete_smoke(env: &Harness, rec: &CandidateRecord) {
    let run = rec.attempts[0].run.as_ref().expect("run").id;
    env.stack
        .state()
        .complete_run(REPO, run, "success", BTreeMap::new())
        .await
        .expect("complete");
}

async fn maintainer(env: &Harness) -> crate::support::Person {
    env.person(klaud_sandbox::stack::MAINTAINER_TOKEN)
}

async fn hands_off_case(
    change: impl AsyncFnOnce(&Harness, &CandidateRecord),
) -> (Harness, CandidateRecord, Vec<String>) {
    let env = Harness::demo().start().await;
    let target = env.target("demo-fp4-b200-sglang").await;
    let journal = MemoryJournal::new();
    let rec = until_smoke_dispatched(&env, &journal, &target).await;
    change(&env, &rec).await;
    complete_smoke(&env, &rec).await;
    let log_before = env.stack.state().request_log().await.len();
    let rec = env.finish(&journal, &target).await;
    let writes: Vec<String> = env.stack.state().request_log().await[log_before..]
        .iter()
        .filter(|e| e.method != "GET")
        .map(|e| format!("{} {}", e.method, e.path))
        .collect();
    (env, rec, writes)
}

/// Only the claim (Klaud's own) may be touched after a handoff, and the
/// receipt posted on the PR as a reply, once.
fn only_claim_writes(writes: &[String]) {
    let mut receipts = 0;
    for w in writes {
        if w.starts_with("POST") && w.contains("/comments") {
            receipts += 1;
            continue;
        }
        assert!(
            w.contains("klaud/claim-"),
            "mutation after handoff: {w} in {writes:#?}"
        );
    }
    assert!(receipts <= 1, "one receipt at most: {writes:#?}");
}

/// The receipt Klaud posted on `number` (its record parsed).
async fn receipt_on(env: &Harness, number: impl Into<u64>) -> klaud_lifecycle::report::Receipt {
    let number: u64 = number.into();
    env.stack
        .state()
        .comment_bodies(REPO, number)
        .await
        .iter()
        .filter_map(|b| klaud_lifecycle::report::find_record(b).ok().flatten())
        .find_map(|f| klaud_lifecycle::report::parse_receipt(&f).ok())
        .unwrap_or_else(|| panic!("no receipt on #{number}"))
}

#[tokio::test]
async fn handoff_label_stops_every_mutation() {
    let (env, rec, writes) = hands_off_case(async |env, rec| {
        maintainer(env)
            .await
            .add_labels(rec.pull.expect("pull"), &["klaud-handoff"])
            .await;
    })
    .await;
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Handoff, "{ending:?}");
    assert!(
        ending.message.contains("klaud-handoff"),
        "{}",
        ending.message
    );
    only_claim_writes(&writes);
    let pull = env.pull(rec.pull.expect("pull")).await;
    assert!(
        pull.state.is_open(),
        "the PR stays as the maintainer left it"
    );
    assert!(
        env.claims().await.is_empty(),
        "Klaud's own claim is released"
    );
    let receipt = receipt_on(&env, rec.pull.expect("pull")).await;
    assert_eq!(receipt.result.outcome(), Outcome::Handoff);
    let note = receipt.note.expect("the receipt says why");
    assert!(note.contains("klaud-handoff"), "{note}");
}

#[tokio::test]
async fn foreign_commit_is_a_handoff() {
    let (env, rec, writes) = hands_off_case(async |env, rec| {
        let mut files = BTreeMap::new();
        files.insert("fix.txt".to_owned(), Some(b"mine\n".to_vec()));
        env.stack
            .state()
            .push_commit(REPO, &rec.branch, MAINTAINER, files, "Maintainer fix")
            .await
            .expect("push");
    })
    .await;
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Handoff, "{ending:?}");
    assert!(
        ending.message.contains("foreign commit"),
        "{}",
        ending.message
    );
    assert!(ending.message.contains(rec.head.as_deref().unwrap_or("?")));
    only_claim_writes(&writes);
    let receipt = receipt_on(&env, rec.pull.expect("pull")).await;
    assert_eq!(receipt.result.outcome(), Outcome::Handoff);
    assert!(
        receipt
            .note
            .as_deref()
            .is_some_and(|n| n.contains("foreign commit")),
        "{receipt:?}"
    );
    assert!(
        env.forge
            .get_ref(&format!("refs/heads/{}", rec.branch))
            .await
            .expect("ref")
            .is_some()
    );
}

#[tokio::test]
async fn a_deleted_branch_is_a_handoff_with_a_receipt() {
    let (env, rec, writes) = hands_off_case(async |env, rec| {
        maintainer(env)
            .await
            .delete_ref(&format!("refs/heads/{}", rec.branch))
            .await;
    })
    .await;
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Handoff, "{ending:?}");
    only_claim_writes(&writes);
    let receipt = receipt_on(&env, rec.pull.expect("pull")).await;
    assert_eq!(receipt.result.outcome(), Outcome::Handoff);
    // GitHub closes a PR whose head branch is deleted: the note names the
    // deletion or the closing, whichever Klaud saw first.
    assert!(
        receipt
            .note
            .as_deref()
            .is_some_and(|n| n.contains("deleted") || n.contains("closed by")),
        "{receipt:?}"
    );
    assert!(env.claims().await.is_empty(), "the claim is released");
}

#[tokio::test]
async fn a_claim_deleted_by_hand_is_a_maintainers_release() {
    let mut env = Harness::demo().start().await;
    // Renewed at every step: the deletion is seen while the smoke runs.
    env.config.lease = chrono::TimeDelta::seconds(2);
    let target = env.target("demo-fp4-b200-sglang").await;
    let journal = MemoryJournal::new();
    let rec = until_smoke_dispatched(&env, &journal, &target).await;
    let run = rec.attempts[0].run.as_ref().expect("run").id;
    let family = rec.candidate.as_str().split('-').next().expect("family id");
    maintainer(&env)
        .await
        .delete_ref(&format!("refs/heads/klaud/claim-{family}"))
        .await;
    let rec = env.finish(&journal, &target).await;
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Handoff, "{ending:?}");
    let number = rec.pull.expect("pull");
    let cancels = env
        .stack
        .state()
        .request_log()
        .await
        .iter()
        .filter(|e| e.method == "POST" && e.path.ends_with(&format!("/runs/{run}/cancel")))
        .filter(|e| e.status < 300)
        .count();
    assert_eq!(cancels, 1, "Klaud's smoke run is cancelled");
    assert!(
        !env.pull(number).await.state.is_open(),
        "the PR is closed: an open Klaud PR would block the family for good"
    );
    assert!(
        env.forge
            .get_ref(&format!("refs/heads/{}", rec.branch))
            .await
            .expect("ref")
            .is_none(),
        "the branch is deleted"
    );
    assert!(env.claims().await.is_empty(), "the claim is released again");
    let receipt = receipt_on(&env, number).await;
    assert_eq!(receipt.result.outcome(), Outcome::Handoff);
    assert!(
        receipt
            .note
            .as_deref()
            .is_some_and(|n| n.contains("removed by hand")),
        "{receipt:?}"
    );
}

/// Steps `rec` until it ends, each failing step a "not found" (at most
/// `rounds` × the vanished tries in all), and checks it ended
/// `unexpected-error` after that many tries in a row.
async fn end_after_vanished_tries(
    env: &Harness,
    journal: &MemoryJournal,
    rec: &mut CandidateRecord,
    rounds: u32,
    what: &str,
) {
    let lifecycle = GithubLifecycle::new(&env.forge);
    let engine = env.engine(&lifecycle, journal, env.clock);
    let tries = klaud_lifecycle::engine::journal::VANISHED_TRIES;
    let mut not_found = 0;
    let ending = loop {
        match engine.step(rec).await {
            Ok(Progress::Done(ending)) => break ending.expect("ending"),
            Ok(_) => {}
            Err(e) => {
                assert!(e.to_string().contains("not found"), "{e}");
                not_found += 1;
            }
        }
        assert!(
            not_found <= rounds * tries,
            "still polling a vanished {what}: {rec:#?}"
        );
    };
    assert_eq!(ending.outcome, Outcome::UnexpectedError, "{ending:?}");
    assert!(
        ending
            .message
            .contains(&format!("not found {tries} times in a row")),
        "{}",
        ending.message
    );
    assert_eq!(rec.step, Step::Done);
}

/// The records point at a repository that is gone (a reset, a transfer,
/// a demo store kept across sandboxes): every step finds the PR missing.
/// The candidate ends after a bounded number of tries instead of polling
/// "not found" for ever.
#[tokio::test]
async fn a_candidate_whose_pull_request_vanished_ends_after_bounded_tries() {
    let gone = Harness::demo().start().await;
    let target = gone.target("demo-fp4-b200-sglang").await;
    let journal = MemoryJournal::new();
    let mut rec = until_smoke_dispatched(&gone, &journal, &target).await;
    drop(gone);
    let env = Harness::demo().start().await;
    end_after_vanished_tries(&env, &journal, &mut rec, 2, "PR").await;
    assert!(env.claims().await.is_empty(), "no claim is left behind");
    let posts = env
        .stack
        .state()
        .request_log()
        .await
        .iter()
        .filter(|e| e.method != "GET" && !e.path.contains("klaud/claim-"))
        .count();
    assert_eq!(posts, 0, "nothing is written for a candidate that is gone");
}

/// A maintainer deleted the candidate's completed smoke run from the
/// Actions tab while its PR stayed open: the candidate ends after a bounded
/// number of tries, and since its PR is still there it is cleaned up as
/// usual (closed, branch deleted, receipt posted), its claim released.
#[tokio::test]
async fn a_candidate_whose_run_vanished_ends_and_cleans_up_its_open_pr() {
    let env = Harness::demo().start().await;
    let target = env.target("demo-fp4-b200-sglang").await;
    let journal = MemoryJournal::new();
    let mut rec = until_smoke_dispatched(&env, &journal, &target).await;
    let number = rec.pull.expect("PR");
    complete_smoke(&env, &rec).await;
    let run = rec.attempts[0].run.as_ref().expect("run").id;
    maintainer(&env).await.delete_run(run).await;
    end_after_vanished_tries(&env, &journal, &mut rec, 1, "run").await;
    assert!(env.claims().await.is_empty(), "the claim is released");
    assert!(
        !env.pull(number).await.state.is_open(),
        "the open PR is closed"
    );
    assert!(
        env.forge
            .get_ref(&format!("refs/heads/{}", rec.branch))
            .await
            .expect("ref")
            .is_none(),
        "the unchanged branch is deleted"
    );
    let receipt = receipt_on(&env, number).await;
    assert_eq!(receipt.result.outcome(), Outcome::UnexpectedError);
}

/// Stops after `k` steps, restarts (from the journal, or from an empty one)
/// and checks the end is the uninterrupted one, without duplicates.
async fn crash_at(k: usize, keep_journal: bool, key: &str) -> Step {
    let env = Harness::demo().script(VALIDATED_SCRIPT).start().await;
    let target = env.target(key).await;
    let journal = MemoryJournal::new();
    let reached = env.steps(&journal, &target, k).await;
    if !keep_journal {
        journal.clear();
    }
    let rec = env.finish(&journal, &target).await;
    let what = format!("crash after {k} steps (journal kept: {keep_journal})");
    let number = rec.pull.unwrap_or_else(|| panic!("{what}: no PR"));
    assert_eq!(env.pulls(&rec.branch).await.len(), 1, "{what}: PRs");
    let m = markers(&env.bodies(number).await);
    assert_unique(&m);
    assert!(env.claims().await.is_empty(), "{what}: claim left");
    let ending = rec.ending.clone().expect("ending");
    if key == "demo-fp4-b200-vllm" {
        assert_eq!(ending.outcome, Outcome::Failed, "{what}: {ending:?}");
        assert_eq!(env.dispatches().await, 1, "{what}: dispatches");
        assert!(
            m.iter().any(|k| k.starts_with("klaud-cleanup:")),
            "{what}: {m:?}"
        );
    } else {
        assert_validated(&env, &target, &rec).await;
        assert_eq!(env.dispatches().await, 1, "{what}: dispatches");
        assert_eq!(env.label_writes().await, 1, "{what}: label writes");
    }
    assert_eq!(
        m.iter().filter(|k| k.starts_with("klaud-outcome:")).count(),
        1,
        "{what}"
    );
    reached
}

/// Crashes after 1, 2, … steps until the interrupted run itself got to the
/// end, so every step boundary (and every wait) is a crash point once.
async fn crash_everywhere(key: &str) {
    let mut seen = Vec::new();
    for k in 1..=80 {
        let kept = crash_at(k, true, key).await;
        let cleared = crash_at(k, false, key).await;
        seen.push(kept);
        if kept == Step::Done && cleared == Step::Done {
            let mut expected = vec![
                Step::Prepare,
                Step::Open,
                Step::Baseline,
                Step::Smoke,
                Step::Finish,
            ];
            if key != "demo-fp4-b200-vllm" {
                expected.extend([Step::Final, Step::Sweep]);
            }
            for step in expected {
                assert!(seen.contains(&step), "never crashed in {step:?}: {seen:?}");
            }
            return;
        }
    }
    panic!("the interrupted run never finished: {seen:?}");
}

#[tokio::test]
async fn crash_and_restart_at_every_step_converges_validated() {
    crash_everywhere("demo-fp4-b200-sglang").await;
}

#[tokio::test]
async fn crash_and_restart_at_every_step_converges_failed() {
    crash_everywhere("demo-fp4-b200-vllm").await;
}

#[tokio::test]
async fn final_sweep_infrastructure_failure_is_rerun() {
    let env = Harness::demo().script(VALIDATED_SCRIPT).start().await;
    let target = env.target("demo-fp8-mi355x-sglang").await;
    let journal = MemoryJournal::new();
    let rec = env.finish(&journal, &target).await;
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Validated, "{ending:?}");
    let sweeps: Vec<(u64, u32)> = rec
        .attempts
        .iter()
        .filter(|a| a.kind == AttemptKind::FinalSweep)
        .filter_map(|a| a.run.as_ref().map(|r| (r.id, r.attempt)))
        .collect();
    assert_eq!(sweeps.len(), 2, "{sweeps:?}");
    assert_eq!(sweeps[0].0, sweeps[1].0, "the same run, re-run");
    assert_eq!((sweeps[0].1, sweeps[1].1), (1, 2));
    assert_eq!(rec.repairs, 0);
    let m = markers(&env.bodies(rec.pull.expect("pull")).await);
    assert_unique(&m);
}

/// One engine step, its requests cut from the simulator's log the way
/// `klaud demo --stats` cuts them (a poll changes nothing but `updated_at`
/// and writes nothing). Reads are kept across steps that advance one after
/// another, as the wave keeps them (`Engine::keep_reads`), and forgotten
/// when a step waits or ends.
async fn measured_step<'e, 'a>(
    env: &Harness,
    engine: &'e klaud_lifecycle::engine::Engine<'a>,
    kept: &mut Option<klaud_lifecycle::engine::KeptReads<'e, 'a>>,
    rec: &mut CandidateRecord,
    figures: &mut klaud::cli::demo::stats::LifecycleRequests,
) -> Progress {
    if kept.is_none() {
        *kept = Some(engine.keep_reads());
    }
    let from = env.stack.state().request_log().await.len();
    let before = rec.clone();
    let before_step = rec.step;
    let progress = engine.step(rec).await.expect("step");
    let log = env.stack.state().request_log().await;
    let changed = CandidateRecord {
        updated_at: rec.updated_at,
        ..before
    } != *rec;
    figures.add_step(&log[from..], changed);
    if std::env::var_os("KLAUD_FIGURES_DETAIL").is_some() {
        for e in &log[from..] {
            eprintln!("  STEPREQ {} {} {}", e.method, e.path, e.status);
        }
        eprintln!("STEP {before_step:?} -> {:?} changed={changed}", rec.step);
    }
    if !matches!(progress, Progress::Advanced(_)) {
        *kept = None;
    }
    progress
}

/// One validated lifecycle, claim to receipt, costs at most
/// `LIFECYCLE_LIMIT` charged GitHub requests besides polls, and a pass with
/// nothing to do afterwards costs none (only 304s). Request counts, not
/// timings.
#[tokio::test]
async fn request_figures_per_validated_candidate() {
    use klaud::cli::demo::RequestFigures;
    use klaud::cli::demo::stats::{LIFECYCLE_LIMIT, LifecycleRequests};
    let env = Harness::demo().start().await;
    let target = env.target("demo-fp4-b200-sglang").await;
    let journal = MemoryJournal::new();
    let lifecycle = GithubLifecycle::new(&env.forge);
    // The wave lists the claims once a pass (a pass's cost, not the
    // lifecycle's) and tells the engine which it saw.
    let listed = klaud_lifecycle::engine::Forge::refs(&lifecycle)
        .list_refs(klaud_claims::CLAIM_REF_PREFIX)
        .await
        .expect("claims")
        .into_iter()
        .map(|t| t.name)
        .collect();
    let before = env.stack.state().request_log().await.len();
    let clock = env.clock;
    let engine = env
        .engine(&lifecycle, &journal, clock)
        .with_listed_claims(listed);
    let mut figures = LifecycleRequests::default();
    let mut kept = None;
    let mut rec = engine.open_record(&target).await.expect("record");
    // Opening the record (outside any step) is the lifecycle's too.
    let opened = RequestFigures::of(&env.stack.state().request_log().await[before..]);
    figures.work.add(opened);
    figures.outside_steps.add(opened);
    for _ in 0..100 {
        measured_step(&env, &engine, &mut kept, &mut rec, &mut figures).await;
        if rec.attempts.first().is_some_and(|a| a.run.is_some()) {
            break;
        }
    }
    assert!(rec.attempts[0].run.is_some(), "never dispatched: {rec:#?}");
    // Polls of the queued smoke: the second looks at an unchanged run.
    measured_step(&env, &engine, &mut kept, &mut rec, &mut figures).await;
    let warm = env.stack.state().request_log().await.len();
    let progress = measured_step(&env, &engine, &mut kept, &mut rec, &mut figures).await;
    assert!(matches!(progress, Progress::Waiting(_)), "{progress:?}");
    let log = env.stack.state().request_log().await;
    let idle = RequestFigures::of(&log[warm..]);
    assert_eq!(idle.writes, 0, "an idle poll writes nothing");
    assert!(figures.poll_steps >= 1, "{figures:?}");
    complete_smoke(&env, &rec).await;
    // The sweep: complete it as soon as it starts.
    let state = env.stack.state().clone();
    let results = crate::support::results_covering(&rec);
    let completer = tokio::spawn(async move {
        loop {
            for id in state.run_ids(REPO).await {
                let _ = state
                    .complete_run(REPO, id, "success", results.clone())
                    .await;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let started = std::time::Instant::now();
    loop {
        match measured_step(&env, &engine, &mut kept, &mut rec, &mut figures).await {
            Progress::Done(_) => break,
            Progress::Skipped(why) => panic!("skipped: {why}"),
            Progress::Waiting(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            Progress::Advanced(_) => {}
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no end: {rec:#?}"
        );
    }
    completer.abort();
    assert_eq!(
        rec.ending.as_ref().map(|e| e.outcome),
        Some(Outcome::Validated)
    );
    let log = env.stack.state().request_log().await;
    let all = RequestFigures::of(&log[before..]);
    if std::env::var_os("KLAUD_FIGURES_DETAIL").is_some() {
        for e in &log[before..] {
            eprintln!("REQ {} {} {}", e.method, e.path, e.status);
        }
    }
    // Passes with nothing to do: the first still reads what the last steps
    // changed; the second must cost nothing against the rate limit.
    let options = || {
        let mut o = env.wave_options(owner(), env.config.clone());
        o.lifecycle.plan.max_candidates = 0;
        o.lifecycle.cooldown = Duration::ZERO;
        o
    };
    env.wave(&journal, options()).await;
    let from = env.stack.state().request_log().await.len();
    env.wave(&journal, options()).await;
    let pass = RequestFigures::of(&env.stack.state().request_log().await[from..]);
    eprintln!(
        "FIGURES validated candidate: {} requests, {} charged, {} writes, {} content-creating; \
         not polls: {} charged (at most {LIFECYCLE_LIMIT}), {} total; polls ({} steps): {} charged, \
         {} total; one idle poll: {} requests, {} charged; an idle pass: {} requests, {} charged \
         (must be 0)",
        all.total,
        all.charged,
        all.writes,
        all.content_creating,
        figures.work.charged,
        figures.work.total,
        figures.poll_steps,
        figures.polls.charged,
        figures.polls.total,
        idle.total,
        idle.charged,
        pass.total,
        pass.charged,
    );
    assert!(all.writes > 0 && all.content_creating <= all.writes);
    assert!(
        figures.work.charged <= LIFECYCLE_LIMIT,
        "a validated lifecycle costs {} charged requests besides polls (limit {LIFECYCLE_LIMIT}): {figures:?}",
        figures.work.charged
    );
    // 43–50 when each thing was read once per step; 36–40 (the machine
    // loaded by other test runs) since reads are kept across steps that
    // advance without waiting, the PR is opened with its baseline, and a
    // run that ends before a job of it was seen finished gets its final
    // report alone; 32 since a claim the pass's listing showed free and
    // its first branch are created without a read that finds nothing, and
    // the base branch's tip is read without its commit. The spread is how
    // many polls a run takes and whether a run is first seen queued or
    // running; a little room for timing, none for a regression.
    const TODAY: usize = 36;
    assert!(
        figures.work.charged <= TODAY,
        "a validated lifecycle costs {} charged requests besides polls (at most {TODAY} measured): {figures:?}",
        figures.work.charged
    );
    assert_eq!(
        figures.work.total + figures.polls.total + figures.refreshes.total,
        all.total
    );
    assert_eq!(pass.charged, 0, "an idle pass is only 304s: {pass:?}");
    assert!(pass.total > 0, "the idle pass still looks (conditionally)");
}

/// The sled store as the journal: a crash after k steps, the store closed
/// and opened again (the real restart), then the same end as without crash.
#[tokio::test]
async fn crash_and_restart_with_the_sled_store_converges() {
    use klaud_service::StoreJournal;
    use klaud_store::Store;
    for k in [2, 4, 6, 9, 12] {
        let env = Harness::demo().script(VALIDATED_SCRIPT).start().await;
        let target = env.target("demo-fp4-b200-sglang").await;
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let journal = StoreJournal::new(Store::open(dir.path()).expect("store"));
            env.steps(&journal, &target, k).await;
        }
        let journal = StoreJournal::new(Store::open(dir.path()).expect("store reopens"));
        let saved = journal
            .load(target.candidate.as_str())
            .await
            .expect("load")
            .expect("the record survived the restart");
        assert_ne!(saved.step, Step::Claim, "after {k} steps");
        let rec = env.finish(&journal, &target).await;
        assert_validated(&env, &target, &rec).await;
        assert_eq!(env.dispatches().await, 1, "after {k} steps");
    }
}

/// Recovery (see `klaud_lifecycle::model`): an instance dies mid-smoke; once its lease expires,
/// another instance's wave takes the claim over (fence + 1), cancels the
/// orphan's run, cleans up and posts the receipt as unexpected-error.
#[tokio::test]
async fn expired_claim_is_taken_over_and_its_candidate_cleaned_up() {
    let mut env = Harness::demo().start().await;
    env.config.lease = chrono::TimeDelta::seconds(1);
    let target = env.target("demo-fp4-b200-sglang").await;
    let dead = MemoryJournal::new();
    let rec = until_smoke_dispatched(&env, &dead, &target).await;
    let run = rec.attempts[0].run.clone().expect("run").id;
    env.clock.advance(chrono::TimeDelta::milliseconds(2100));

    let other = Claimant::new(uuid::Uuid::from_u128(7));
    let journal = MemoryJournal::new();
    let mut options = env.wave_options(other, engine_config(5151));
    options.lifecycle.plan.max_candidates = 0;
    options.lifecycle.wait = Duration::from_secs(10);
    options.lifecycle.cooldown = Duration::ZERO;
    let summary = env.wave(&journal, options).await;
    let recovered = summary
        .candidates
        .iter()
        .find(|c| c.candidate == target.candidate.as_str())
        .unwrap_or_else(|| panic!("not recovered: {summary:#?}"));
    assert_eq!(
        recovered.outcome.as_deref(),
        Some("unexpected-error"),
        "{recovered:#?}"
    );
    let number = rec.pull.expect("pull");
    let pull = env.pull(number).await;
    assert!(!pull.state.is_open(), "closed");
    // GitHub cancels asynchronously: the run ends a moment after the 202.
    let live = crate::support::run_once_completed(&env.forge, run).await;
    assert_eq!(
        live.conclusion.as_ref().map(|c| c.as_str()),
        Some("cancelled")
    );
    let m = markers(&env.bodies(number).await);
    assert_unique(&m);
    let orphan = format!("klaud-outcome:{OWNER_RUN}:{}", target.candidate.as_str());
    assert!(
        m.contains(&orphan),
        "the receipt completes the orphan's records: {m:?}"
    );
    assert!(env.claims().await.is_empty());
    let leases = env
        .forge
        .list_refs("refs/heads/klaud/recovery-")
        .await
        .expect("recovery leases");
    assert!(leases.is_empty(), "recovery lease left behind: {leases:?}");
    let lease = format!(
        "git/refs/heads/klaud/recovery-{OWNER_RUN}-{}",
        target.candidate.as_str()
    );
    let released = env.stack.state().request_log().await.into_iter().any(|e| {
        e.method == "DELETE" && e.path.ends_with(&lease) && (200..300).contains(&e.status)
    });
    assert!(
        released,
        "the recovery lease {lease} was taken and released"
    );
    assert_eq!(
        env.forge
            .get_ref(&format!("refs/heads/{}", rec.branch))
            .await
            .expect("ref"),
        None
    );
}

/// A validated sweep is authorized for reuse at merge exactly once, in the
/// form the repository's gate reads: Klaud's own `/reuse-sweep-run <run>`
/// when GitHub gives its comments an accepted association, else one request
/// to a maintainer for that line. A second pass adds nothing.
#[tokio::test]
async fn reuse_of_the_validated_sweep_is_authorized_once_in_the_gates_form() {
    let env = Harness::demo().script(VALIDATED_SCRIPT).start().await;
    let target = env.target("demo-fp4-b200-sglang").await;
    let journal = MemoryJournal::new();
    let rec = env.finish(&journal, &target).await;
    assert_validated(&env, &target, &rec).await;
    let sweep = rec.sweep.clone().expect("sweep check");
    let number = rec.pull.expect("pull");
    let comments = env
        .forge
        .list_comments(number.get(), None)
        .await
        .expect("comments");
    let association = comments
        .iter()
        .rev()
        .find(|c| c.author.as_deref() == Some(BOT))
        .and_then(|c| c.author_association.clone())
        .expect("GitHub names the association of Klaud's comments");
    journal.clear();
    env.finish(&journal, &target).await;
    let bodies = env.bodies(number).await;
    let line = format!("/reuse-sweep-run {}", sweep.run_id);
    let own_lines = bodies.iter().filter(|b| b.trim() == line).count();
    let requests = bodies
        .iter()
        .filter(|b| b.contains("klaud-reuse-request:"))
        .count();
    if matches!(association.as_str(), "OWNER" | "MEMBER" | "COLLABORATOR") {
        assert_eq!((own_lines, requests), (1, 0), "{bodies:#?}");
    } else {
        assert_eq!((own_lines, requests), (0, 1), "{bodies:#?}");
        let request = bodies
            .iter()
            .find(|b| b.contains("klaud-reuse-request:"))
            .expect("request");
        assert!(request.contains(&line), "{request}");
        assert!(request.contains(&format!("`{association}`")), "{request}");
    }
    assert!(
        !bodies.iter().any(|b| b.starts_with("/use ")),
        "{bodies:#?}"
    );
}

/// A smoke run no runner ever picks up is cancelled after the run timeout
/// and retried as an infrastructure failure; after two retries the
/// candidate fails and is cleaned up.
#[tokio::test]
async fn stuck_smoke_runs_are_cancelled_and_retried() {
    let mut env = Harness::demo().start().await;
    env.config.run_timeout = chrono::TimeDelta::seconds(1);
    let target = env.target("demo-fp4-b200-sglang").await;
    let journal = MemoryJournal::new();
    let rec = env.finish(&journal, &target).await;
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Failed, "{ending:?}");
    assert!(
        ending.message.contains("infrastructure"),
        "{}",
        ending.message
    );
    let kinds: Vec<AttemptKind> = rec.attempts.iter().map(|a| a.kind).collect();
    assert_eq!(
        kinds,
        vec![
            AttemptKind::Initial { budget: 5 },
            AttemptKind::InfraRetry { n: 1 },
            AttemptKind::InfraRetry { n: 2 }
        ]
    );
    for run in rec.runs() {
        let live = env.forge.get_run(run.id).await.expect("run");
        assert_eq!(
            live.conclusion.as_ref().map(|c| c.as_str()),
            Some("cancelled")
        );
    }
    assert_eq!(env.dispatches().await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_that_loses_its_picks_to_a_racing_instance_claims_the_next_stale_families() {
    use klaud_sandbox::github::{Fault, FaultAction};
    let env = Harness::demo().start().await;
    let registry = env.registry();
    let mut plan_options = PlanOptions::new(chrono::Utc::now());
    plan_options.max_candidates = 2;
    // What the wave is going to pick (the plan is deterministic).
    let picks = plan(&env.repository, &registry.session(), &plan_options)
        .await
        .candidates;
    assert_eq!(picks.len(), 2, "{picks:?}");

    // Another instance claims exactly those after the wave has listed the
    // claims and before it claims: the recovery-lease listing that follows
    // the claim listing is held back long enough.
    env.stack
        .state()
        .add_fault(Fault {
            method: Some("GET".into()),
            path: "*/git/matching-refs/heads/klaud/recovery-*".into(),
            count: 1,
            action: FaultAction::Delay { millis: 1500 },
        })
        .await;
    let racer = async {
        loop {
            let log = env.stack.state().request_log().await;
            if log
                .iter()
                .any(|e| e.path.contains("git/matching-refs/heads/klaud/claim-"))
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let clock = env.clock;
        let other = klaud_claims::ClaimBook::new(
            &env.forge,
            clock,
            Claimant::new(uuid::Uuid::from_u128(99)),
        );
        for p in &picks {
            let id = CandidateId::new(&p.id).expect("id");
            let won = other
                .acquire(
                    &id.family(),
                    vec![klaud_claims::ClaimCandidate::new(
                        env.base.clone(),
                        &p.family,
                        id.clone(),
                    )],
                    &env.base,
                    1,
                    chrono::TimeDelta::hours(1),
                )
                .await
                .expect("racing claim");
            assert!(matches!(won, klaud_claims::Acquire::Won(_)), "{won:?}");
        }
    };
    let journal = MemoryJournal::new();
    let mut options = env.wave_options(owner(), engine_config(OWNER_RUN));
    options.lifecycle.plan = plan_options;
    options.lifecycle.cooldown = Duration::ZERO;
    let (summary, ()) = tokio::join!(env.wave(&journal, options), racer);

    let lost: Vec<&str> = picks.iter().map(|p| p.id.as_str()).collect();
    for id in &lost {
        let why = summary
            .skipped
            .iter()
            .find(|(s, _)| s == id)
            .unwrap_or_else(|| panic!("{id} not reported lost: {summary:#?}"));
        assert!(why.1.contains("is claimed by"), "{why:?}");
    }
    let lost_families: Vec<&str> = picks.iter().map(|p| p.family.as_str()).collect();
    assert_eq!(
        summary.candidates.len(),
        2,
        "the lost slots are refilled: {summary:#?}"
    );
    for c in &summary.candidates {
        assert!(!lost_families.contains(&c.family.as_str()), "{c:#?}");
        assert!(c.pull_request.is_some(), "{c:#?}");
    }
    assert_eq!(env.claims().await.len(), 4, "two each, none shared");
}

/// One-shot waves as the Actions workflow runs them: every wave a new
/// process with an empty journal and its own run id, the same instance id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_shot_waves_with_empty_journals_carry_a_candidate_to_its_outcome() {
    // Runs that keep going for a second: a wave that does not wait cannot
    // carry the candidate through on its own, however fast this machine is.
    const SLOW_RUNS: &str = r#"
[families."*"]
smoke = [{ delay = 1, outcome = "success" }]
sweep = [{ delay = 1, outcome = "success" }]
"#;
    let env = Harness::demo().script(SLOW_RUNS).start().await;
    let mut outcome = None;
    let mut candidate = None;
    for wave in 0..40u64 {
        let journal = MemoryJournal::new();
        // A new Actions run each time.
        let mut options = env.wave_options(owner(), engine_config(9_000 + wave));
        options.lifecycle.plan.max_candidates = 1;
        let summary = env.wave(&journal, options).await;
        let c = summary
            .candidates
            .first()
            .unwrap_or_else(|| panic!("wave {wave} has no candidate: {summary:#?}"));
        let id = candidate.get_or_insert_with(|| c.candidate.clone());
        assert_eq!(&c.candidate, id, "a later wave resumes the same candidate");
        if c.outcome.is_some() {
            outcome = Some((wave, c.clone()));
            break;
        }
        // The next scheduled run, once the CI simulator moved on.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (waves, c) = outcome.expect("the candidate finished within 40 waves");
    assert_eq!(c.outcome.as_deref(), Some("validated"), "{c:#?}");
    // `waves` counts from 0: at least one resume with an empty journal
    // (the runs outlast a wave that does not wait).
    assert!(
        waves >= 1,
        "it took {} wave(s): the test must span several",
        waves + 1
    );
    let branch = format!("klaud/auto-{}", c.candidate);
    let pulls = env.pulls(&branch).await;
    assert_eq!(pulls.len(), 1, "one PR");
    let m = markers(&env.bodies(pulls[0]).await);
    assert_unique(&m);
    assert!(!m.is_empty());
    assert!(
        m.iter().all(|k| k.contains(":9000:")),
        "every record keeps the first wave's run: {m:?}"
    );
    assert_eq!(env.dispatches().await, 1, "one smoke dispatch");
    assert!(env.claims().await.is_empty());
}

/// A one-shot run with a fresh journal after upstream moved on: the plan
/// proposes a newer image, so the held candidate is found from its branch
/// and resumed, not left holding its family forever; a held claim with no
/// branch at all is finished and its family freed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_claims_the_plan_no_longer_proposes_are_resumed_from_their_branch() {
    use klaud_sandbox::registry::TagSeed;
    use klaud_service::wave_adapters::WaveSummary;
    let env = Harness::demo().start().await;
    let wave = |run: u64| {
        let env = &env;
        async move {
            let mut options = env.wave_options(owner(), engine_config(run));
            options.lifecycle.plan.max_candidates = 10;
            env.wave(&MemoryJournal::new(), options).await
        }
    };
    let find = |s: &WaveSummary, key: &str| {
        s.candidates
            .iter()
            .find(|c| c.family.ends_with(&format!(":{key}")))
            .cloned()
    };
    let first = wave(9_000).await;
    let held = find(&first, "demo-fp4-b200-sglang").expect("b200-sglang started");
    assert!(held.pull_request.is_some(), "{held:#?}");

    // Upstream publishes a newer tag on the family's track.
    env.stack
        .registry
        .add_tag(
            "lmsysorg/sglang",
            "v0.5.18-cu130",
            &TagSeed {
                pushed: Some("2026-10-01T10:00:00Z".parse().expect("time")),
                created: Some("2026-10-01T09:00:00Z".parse().expect("time")),
                ..TagSeed::default()
            },
        )
        .expect("new tag");
    // And a claim of ours whose candidate never got a branch.
    let trt = env
        .repository
        .families()
        .iter()
        .find(|f| f.family.ends_with(":demo-fp8-h200-trt"))
        .expect("family")
        .clone();
    let orphan_id = CandidateId::new(&klaud_planner::identity::candidate_id(
        &trt.id,
        "nvcr.io/nvidia/tensorrt-llm/release:9.9.9",
    ))
    .expect("id");
    let clock = env.clock;
    let book = klaud_claims::ClaimBook::new(&env.forge, clock, owner());
    if let Some(entry) = book.inspect(&orphan_id.family()).await.expect("inspect") {
        // The first wave claimed this family too: give its claim up first.
        let ours = book.adopt(&entry).expect("ours");
        book.release(&ours).await.expect("release");
    }
    let won = book
        .acquire(
            &orphan_id.family(),
            vec![klaud_claims::ClaimCandidate::new(
                env.base.clone(),
                &trt.family,
                orphan_id.clone(),
            )],
            &env.base,
            8_999,
            chrono::TimeDelta::hours(1),
        )
        .await
        .expect("acquire");
    assert!(matches!(won, klaud_claims::Acquire::Won(_)), "{won:?}");

    let second = wave(9_001).await;
    let resumed = second
        .candidates
        .iter()
        .find(|c| c.candidate == held.candidate)
        .unwrap_or_else(|| panic!("{} not resumed: {second:#?}", held.candidate));
    assert_eq!(resumed.pull_request, held.pull_request, "the same PR");
    assert_eq!(resumed.outcome, None, "still running: {resumed:#?}");
    assert_eq!(resumed.image, held.image);
    let lost = second
        .candidates
        .iter()
        .find(|c| c.candidate == orphan_id.as_str())
        .unwrap_or_else(|| panic!("{orphan_id} not finished: {second:#?}"));
    assert_eq!(
        lost.outcome.as_deref(),
        Some("unexpected-error"),
        "{lost:#?}"
    );
    assert!(
        lost.message
            .as_deref()
            .is_some_and(|m| m.contains("lost track")),
        "{lost:#?}"
    );
    assert!(
        book.inspect(&orphan_id.family())
            .await
            .expect("inspect")
            .is_none(),
        "the family is free again"
    );
    let branch = format!("klaud/auto-{}", held.candidate);
    assert_eq!(env.pulls(&branch).await.len(), 1, "no second PR");
}

/// A store whose disk is full: every save fails as sled reports it.
struct FullDisk(MemoryJournal);

#[async_trait]
impl Journal for FullDisk {
    async fn save(
        &self,
        _record: &CandidateRecord,
    ) -> Result<(), klaud_lifecycle::engine::journal::JournalError> {
        Err(klaud_lifecycle::engine::journal::JournalError::new(
            "save candidate",
            std::io::Error::new(std::io::ErrorKind::StorageFull, "No space left on device"),
        ))
    }
    async fn load(
        &self,
        candidate: &str,
    ) -> Result<Option<CandidateRecord>, klaud_lifecycle::engine::journal::JournalError> {
        self.0.load(candidate).await
    }
    async fn list(
        &self,
    ) -> Result<Vec<CandidateRecord>, klaud_lifecycle::engine::journal::JournalError> {
        self.0.list().await
    }
}

/// A wave on a full disk does nothing and says why: every candidate stops
/// on the store, so the wave names the store as the cause (the CLI turns
/// it into a non-zero exit, as for a revoked token in `cli_app`), and
/// nothing was opened or claimed that no record remembers.
#[tokio::test]
async fn a_wave_on_a_full_disk_stops_on_the_store_and_names_it() {
    let env = Harness::demo().start().await;
    let journal = FullDisk(MemoryJournal::new());
    let summary = env
        .wave(&journal, env.wave_options(owner(), env.config.clone()))
        .await;
    let cause = summary.stopped_by.clone().unwrap_or_default();
    assert!(
        cause.contains("local store") && cause.contains("No space left on device"),
        "{summary:#?}"
    );
    assert!(env.claims().await.is_empty(), "no claim without a record");
    let writes: Vec<String> = env
        .stack
        .state()
        .request_log()
        .await
        .iter()
        .filter(|e| e.method != "GET" && !e.path.contains("klaud/claim-"))
        .map(|e| format!("{} {}", e.method, e.path))
        .collect();
    assert!(writes.is_empty(), "written without a record: {writes:?}");
}

/// A failed candidate's finish finds its own cleanup marker and receipt in
/// the record's copy of its comments, and lists none. A kill between a
/// comment's intent and its answer (the comment landed, the answer was
/// lost, and the client could not look: `cut` counts the finish's comment
/// posts before it) leaves the copy untrusted: the restart lists the
/// comments once, and neither the cleanup marker nor the receipt is posted
/// twice or lost.
#[tokio::test]
async fn the_finish_lists_the_comments_only_after_a_comment_write_was_cut_off() {
    use klaud_sandbox::github::{Fault, FaultAction};
    for cut in [None, Some(0), Some(1)] {
        let (env, target, journal) = validated("demo-fp4-b200-vllm").await;
        let lifecycle = GithubLifecycle::new(&env.forge);
        let engine = env.engine(&lifecycle, &journal, env.clock);
        let mut rec = record_at(&engine, &target, Step::Finish).await;
        let number = rec.pull.expect("PR");
        let state = env.stack.state().clone();
        if let Some(posted) = cut {
            let comments = "/repos/*/issues/*/comments";
            if posted > 0 {
                state
                    .add_fault(Fault {
                        method: Some("POST".into()),
                        path: comments.into(),
                        count: posted,
                        action: FaultAction::Delay { millis: 0 },
                    })
                    .await;
            }
            state
                .add_fault(Fault {
                    method: Some("POST".into()),
                    path: comments.into(),
                    count: 1,
                    action: FaultAction::AfterWriteDrop,
                })
                .await;
            // Nor can the client look whether it landed: the step dies with
            // the comment on the PR and only its intent recorded.
            state
                .add_fault(Fault::status("GET", format!("{comments}*"), 10_000, 500))
                .await;
            let died = engine.step(&mut rec).await;
            assert!(died.is_err(), "cut {cut:?}: the step dies: {died:?}");
            let intent = format!("{:?}", journal.list().await.expect("journal")[0].intent);
            let cut_off = ["Some(PostCleanupMarker)", "Some(Comment(\"klaud-outcome:"];
            assert!(
                intent.starts_with(cut_off[posted as usize]),
                "cut {cut:?}: died at {intent}"
            );
            state.clear_faults().await;
        }
        let before = state.request_log().await.len();
        let rec = env.finish(&journal, &target).await;
        let log = state.request_log().await;
        let listing = format!("/issues/{number}/comments");
        let lists = log[before..]
            .iter()
            .filter(|e| {
                e.method == "GET"
                    && e.path
                        .split('?')
                        .next()
                        .is_some_and(|p| p.ends_with(&listing))
            })
            .count();
        assert_eq!(
            lists,
            usize::from(cut.is_some()),
            "cut {cut:?}: comment listings in {:#?}",
            &log[before..]
        );
        let m = markers(&env.bodies(number).await);
        assert_unique(&m);
        for kind in ["klaud-cleanup:", "klaud-outcome:"] {
            assert_eq!(
                m.iter().filter(|k| k.starts_with(kind)).count(),
                1,
                "cut {cut:?}: {kind} in {m:?}"
            );
        }
        let ending = rec.ending.expect("ending");
        assert_eq!(ending.outcome, Outcome::Failed, "cut {cut:?}: {ending:?}");
    }
}

/// The changelog commit is one GraphQL write whose answer may be lost:
/// after GitHub made it (the connection dropped) the journal, as a kill
/// right after sending leaves it, holds only the commit's parent and
/// message; after a 502 that made nothing, the same. Either way the next
/// step settles it from the branch tip: the lifecycle ends validated with
/// exactly one changelog commit, no handoff.
#[tokio::test]
async fn a_lost_answer_to_the_changelog_commit_leaves_one_commit_and_no_handoff() {
    for (landed, fault) in lost_or_refused() {
        let (env, target, journal) = validated("demo-fp4-b200-sglang").await;
        let lifecycle = GithubLifecycle::new(&env.forge);
        let engine = env.engine(&lifecycle, &journal, env.clock);
        let mut rec = record_at(&engine, &target, Step::Final).await;
        let head = rec.head.clone().expect("head");
        let branch = format!("refs/heads/{}", rec.branch);
        let state = env.stack.state().clone();
        fault_next_graphql(&env, fault).await;
        engine.step(&mut rec).await.expect("the final step");
        let kept = journal.list().await.expect("journal").remove(0);
        let asked = kept.pending_branch_commit.expect("the intent is kept");
        assert_eq!(asked.parent, head, "landed {landed}");
        let tip = state.ref_sha(REPO, &branch).await.expect("branch");
        assert_eq!(tip != head.as_str(), landed, "landed {landed}");
        // The journal as a kill after sending leaves it drives on.
        let rec = env.finish(&journal, &target).await;
        assert_validated(&env, &target, &rec).await;
        let commits = commits_beyond_base(&lifecycle, &rec).await;
        let entries = commits
            .iter()
            .filter(|c| c.message.starts_with("Add perf-changelog entry"))
            .count();
        assert_eq!(entries, 1, "landed {landed}: {commits:#?}");
        assert_eq!(rec.pending_branch_commit, None);
    }
}

/// The bump is one write: a GraphQL document that creates the branch at
/// the base and makes the commit on it. When its answer is lost (both
/// landed) or GitHub fails it before acting (no branch), the next step
/// finds out from the tip: the PR still ends validated with exactly one
/// bump commit, and no handoff.
#[tokio::test]
async fn a_lost_answer_to_the_bump_commit_leaves_one_bump_and_no_handoff() {
    for (landed, fault) in lost_or_refused() {
        let (env, target, journal) = validated("demo-fp4-b200-sglang").await;
        let lifecycle = GithubLifecycle::new(&env.forge);
        let engine = env.engine(&lifecycle, &journal, env.clock);
        let mut rec = record_at(&engine, &target, Step::Prepare).await;
        let branch = format!("refs/heads/{}", rec.branch);
        let state = env.stack.state().clone();
        fault_next_graphql(&env, fault).await;
        let p = engine.step(&mut rec).await.expect("the prepare step");
        assert_eq!(p, Progress::Advanced(Step::Prepare), "landed {landed}");
        let tip = state.ref_sha(REPO, &branch).await;
        assert_eq!(
            tip.as_ref().is_some_and(|t| t != rec.base_sha.as_str()),
            landed,
            "landed {landed}: the branch is at {tip:?}"
        );
        if !landed {
            assert_eq!(tip, None, "refused before acting: no branch");
        }
        let rec = env.finish(&journal, &target).await;
        assert_validated(&env, &target, &rec).await;
        let commits = commits_beyond_base(&lifecycle, &rec).await;
        let bumps = commits
            .iter()
            .filter(|c| c.message.starts_with("Update "))
            .count();
        assert_eq!(bumps, 1, "landed {landed}: {commits:#?}");
        assert_eq!(
            commits[0].parents,
            vec![rec.base_sha.clone()],
            "landed {landed}"
        );
    }
}

/// After a lost answer to the changelog commit, a person's commit on the
/// recorded parent with the very same message is not taken for Klaud's:
/// its author is not the bot, so the next step hands the PR over and
/// leaves the person's commit where it is.
#[tokio::test]
async fn a_persons_commit_with_klauds_message_after_a_lost_answer_is_a_handoff() {
    let (env, target, journal) = validated("demo-fp4-b200-sglang").await;
    let lifecycle = GithubLifecycle::new(&env.forge);
    let engine = env.engine(&lifecycle, &journal, env.clock);
    let mut rec = record_at(&engine, &target, Step::Final).await;
    let state = env.stack.state().clone();
    let [_, (_, refused)] = lost_or_refused();
    fault_next_graphql(&env, refused).await;
    engine.step(&mut rec).await.expect("the final step");
    let asked = rec
        .pending_branch_commit
        .clone()
        .expect("the intent is kept");
    let files = BTreeMap::from([("perf-changelog.yaml".to_owned(), Some(b"- x\n".to_vec()))]);
    let theirs = state
        .push_commit(REPO, &rec.branch, MAINTAINER, files, &asked.message)
        .await
        .expect("a person's push");
    let rec = env.finish(&journal, &target).await;
    let ending = rec.ending.clone().expect("ending");
    assert_eq!(ending.outcome, Outcome::Handoff, "{ending:?}");
    assert_eq!(
        state
            .ref_sha(REPO, &format!("refs/heads/{}", rec.branch))
            .await,
        Some(theirs)
    );
}

/// A validated candidate's final sweep report goes out in one comment with
/// its receipt, after Klaud's own reuse line; a POST of that comment cut
/// off with only its intent recorded is
/// neither posted twice nor lost, and every reader finds both records.
#[tokio::test]
async fn the_final_report_and_the_receipt_are_one_comment_even_after_a_cut_off_post() {
    use klaud_lifecycle::report::{candidate_receipt, find_records, parse_report};
    use klaud_sandbox::github::{Fault, FaultAction};
    for cut in [false, true] {
        let (env, target, journal) = validated("demo-fp4-b200-sglang").await;
        let lifecycle = GithubLifecycle::new(&env.forge);
        let engine = env.engine(&lifecycle, &journal, env.clock);
        let mut rec = record_at(&engine, &target, Step::Finish).await;
        let kept = rec
            .final_report
            .clone()
            .map(serde_json::from_value::<klaud_lifecycle::report::AttemptReport>)
            .expect("the sweep's report waits for the receipt")
            .expect("typed");
        let number = rec.pull.expect("PR");
        let state = env.stack.state().clone();
        if cut {
            let comments = "/repos/*/issues/*/comments";
            // The reuse line goes out first; the receipt's POST is cut off.
            for (count, action) in [
                (1, FaultAction::Delay { millis: 0 }),
                (1, FaultAction::AfterWriteDrop),
            ] {
                state
                    .add_fault(Fault {
                        method: Some("POST".into()),
                        path: comments.into(),
                        count,
                        action,
                    })
                    .await;
            }
            // Nor can the client look whether it landed (after the one
            // listing the reuse line is decided on): the step dies with the
            // comment on the PR and only its intent recorded.
            state
                .add_fault(Fault {
                    method: Some("GET".into()),
                    path: format!("{comments}*"),
                    count: 1,
                    action: FaultAction::Delay { millis: 0 },
                })
                .await;
            state
                .add_fault(Fault::status("GET", format!("{comments}*"), 10_000, 500))
                .await;
            let died = engine.step(&mut rec).await;
            assert!(died.is_err(), "the step dies: {died:?}");
            let intent = format!("{:?}", journal.list().await.expect("journal")[0].intent);
            assert!(
                intent.starts_with("Some(Comment(\"klaud-outcome:"),
                "died at {intent}"
            );
            state.clear_faults().await;
        }
        let rec = env.finish(&journal, &target).await;
        assert_validated(&env, &target, &rec).await;
        assert!(rec.final_report.is_none(), "cut {cut}: posted, not kept");
        let bodies = env.bodies(number).await;
        assert_unique(&markers(&bodies));
        let report_key = format!("{}", kept.key());
        let holding: Vec<&String> = bodies
            .iter()
            .filter(|b| {
                find_records(b).is_ok_and(|f| f.iter().any(|r| r.key.to_string() == report_key))
            })
            .collect();
        assert_eq!(
            holding.len(),
            1,
            "cut {cut}: the final report once: {bodies:#?}"
        );
        let folded = holding[0];
        let receipt = candidate_receipt(folded, rec.candidate.as_str()).expect("the receipt");
        assert_eq!(receipt.result.outcome(), Outcome::Validated);
        let records = find_records(folded).expect("valid");
        assert_eq!(parse_report(&records[1]).expect("typed"), kept);
        // The reuse line is its own comment, before the receipt, and the
        // newest line the repository's gate reads.
        let run = rec.sweep.as_ref().expect("sweep").run_id;
        let line = format!("/reuse-sweep-run {run}");
        let reuse = bodies
            .iter()
            .position(|b| b.trim() == line)
            .expect("reuse line");
        let receipt_at = bodies.iter().position(|b| b == folded).expect("receipt");
        assert!(reuse < receipt_at, "{bodies:#?}");
        let gated = bodies
            .iter()
            .rposition(|b| b.lines().any(|l| l.trim().starts_with("/reuse-sweep-run")));
        assert_eq!(gated, Some(reuse), "cut {cut}: {bodies:#?}");
    }
}

/// Steps `rec` until it reaches `step`, waiting out the sandbox's runs
/// (at most a minute).
/// The two ways the answer to a write goes missing, each with whether the
/// write landed: GitHub made it and the connection dropped, or GitHub
/// failed before it acted (a `Status` fault answers without running the
/// handler).
fn lost_or_refused() -> [(bool, klaud_sandbox::github::FaultAction); 2] {
    use klaud_sandbox::github::FaultAction;
    let refused = FaultAction::Status {
        status: 502,
        retry_after: None,
        message: None,
    };
    [(true, FaultAction::AfterWriteDrop), (false, refused)]
}

/// The next GraphQL request (Klaud's commits onto a branch) meets `action`.
async fn fault_next_graphql(env: &Harness, action: klaud_sandbox::github::FaultAction) {
    env.stack
        .state()
        .add_fault(klaud_sandbox::github::Fault {
            method: Some("POST".into()),
            path: "/graphql".into(),
            count: 1,
            action,
        })
        .await;
}

/// The commits on a finished record's branch beyond its base, oldest
/// first, as GitHub's compare lists them.
async fn commits_beyond_base(
    lifecycle: &GithubLifecycle<'_>,
    rec: &CandidateRecord,
) -> Vec<klaud_lifecycle::engine::ComparedCommit> {
    use klaud_lifecycle::engine::Forge as _;
    let head = rec.head.clone().expect("head");
    lifecycle
        .compare_commits(rec.base_sha.as_str(), head.as_str())
        .await
        .expect("compare")
        .commits
}

/// The demo with every run passing (`VALIDATED_SCRIPT`), the target of
/// family `key` and an empty journal.
async fn validated(key: &str) -> (Harness, Target, MemoryJournal) {
    let env = Harness::demo().script(VALIDATED_SCRIPT).start().await;
    let target = env.target(key).await;
    (env, target, MemoryJournal::new())
}

/// `target`'s record, opened by `engine` and stepped until it reaches
/// `step`.
async fn record_at(
    engine: &klaud_lifecycle::engine::Engine<'_>,
    target: &Target,
    step: Step,
) -> CandidateRecord {
    let mut rec = engine.open_record(target).await.expect("record");
    step_to(engine, &mut rec, step).await;
    rec
}

async fn step_to(
    engine: &klaud_lifecycle::engine::Engine<'_>,
    rec: &mut CandidateRecord,
    step: Step,
) {
    let started = std::time::Instant::now();
    while rec.step != step {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{step:?} never came: {:?}",
            rec.step
        );
        if let Progress::Waiting(_) = engine.step(rec).await.expect("step") {
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
    }
}
