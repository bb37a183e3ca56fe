//! A maintainer merging Klaud's PR: the sandbox's merge route as
//! GitHub documents it, and the engine stopping at the next step: merged
//! after a verified sweep ends `validated`, merged before ends `handoff`;
//! either way Klaud cancels its own running runs, releases the claim,
//! writes a receipt and touches nothing else.

use std::time::{Duration, Instant};

use klaud_claims::{Claimant, SystemClock};
use klaud_github::lifecycle::GithubLifecycle;
use klaud_lifecycle::engine::{MemoryJournal, Progress, Step};
use klaud_lifecycle::model::Outcome;
use klaud_sandbox::stack::{MAINTAINER, MAINTAINER_TOKEN};

use crate::lifecycle_e2e::VALIDATED_SCRIPT;
use crate::people::wave_with;
use crate::support::{Harness, Own, Person, REPO, family_runs, writes_since};

fn maintainer(env: &Harness) -> Person {
    env.person(MAINTAINER_TOKEN)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_merges_as_github_documents_refusing_a_stale_sha_and_a_closed_pr() {
    let env = Harness::demo().start().await;
    let person = maintainer(&env);
    person.create_branch("human/merge-me", &env.base).await;
    env.stack
        .state()
        .push_commit(
            REPO,
            "human/merge-me",
            MAINTAINER,
            [("NOTES.md".to_owned(), Some(b"merged by hand\n".to_vec()))].into(),
            "notes",
        )
        .await
        .expect("push");
    let number = person.open_pull("human/merge-me", "main", "Notes").await;
    let (status, answer) = person
        .try_merge(number, serde_json::json!({ "sha": "0".repeat(40) }))
        .await;
    assert_eq!(status, 409, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap_or("")
            .contains("Head branch was modified")
    );
    let merge_sha = person.merge_pull(number).await;
    let pull = env.pull(number).await;
    assert!(!pull.state.is_open() && pull.state.is_merged(), "{pull:?}");
    // The base branch moved to the merge commit, which carries the change.
    let main = env
        .forge
        .get_ref("refs/heads/main")
        .await
        .expect("main")
        .expect("exists");
    assert_eq!(main, merge_sha);
    let raw: serde_json::Value = octocrab::Octocrab::builder()
        .base_uri(env.stack.github.url())
        .expect("url")
        .personal_token(MAINTAINER_TOKEN.to_owned())
        .build()
        .expect("octocrab")
        .get(format!("/repos/{REPO}/pulls/{number}"), None::<&()>)
        .await
        .expect("pull json");
    assert_eq!(raw["state"], "closed");
    assert_eq!(raw["merged"], true);
    assert_eq!(raw["merged_by"]["login"], MAINTAINER);
    assert_eq!(raw["merge_commit_sha"], merge_sha.as_str());
    assert!(raw["merged_at"].is_string(), "{raw}");
    // Merged (closed) PRs are not mergeable again.
    let (status, answer) = person.try_merge(number, serde_json::json!({})).await;
    assert_eq!(status, 405, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pr_merged_before_its_sweep_ends_handoff_and_klaud_only_cancels_and_writes_the_receipt() {
    let env = Harness::demo().start().await;
    let journal = MemoryJournal::new();
    let first = wave_with(&env, 5301, &journal).await;
    let c = first
        .candidates
        .iter()
        .find(|c| c.pull_request.is_some() && !c.runs.is_empty())
        .expect("a candidate with a PR and a smoke run")
        .clone();
    let number: u64 = c
        .pull_request
        .as_deref()
        .and_then(|u| u.rsplit('/').next())
        .and_then(|n| n.parse().ok())
        .expect("pull number");
    maintainer(&env).merge_pull(number).await;
    let comments_before = env.bodies(number).await.len();
    let log_before = env.stack.state().request_log().await.len();
    let merged = env.pull(number).await;
    let family_id = c.candidate.family();
    let runs_before = family_runs(&env, family_id.as_str()).await;

    let second = wave_with(&env, 5301, &journal).await;
    let ended = second
        .candidates
        .iter()
        .find(|x| x.candidate == c.candidate)
        .expect("still reported");
    assert_eq!(ended.outcome.as_deref(), Some("handoff"), "{ended:#?}");
    assert!(
        ended
            .message
            .as_deref()
            .is_some_and(|m| m.contains("merged by someone else")),
        "{ended:#?}"
    );
    let bodies = env.bodies(number).await;
    assert_eq!(bodies.len(), comments_before + 1, "{bodies:#?}");
    assert!(
        bodies
            .last()
            .expect("receipt")
            .starts_with("<!-- klaud-outcome:")
    );
    // The wave steps the other candidates too: only the writes naming
    // this one's things are its own, and it dispatched and pushed nothing.
    let comment_ids = env.stack.state().comment_ids(REPO, number).await;
    let run_ids: Vec<u64> = ended.runs.iter().map(|r| r.id).collect();
    let own = Own {
        pull: number,
        comments: &comment_ids,
        runs: &run_ids,
        family: family_id.as_str(),
        branch: &merged.head_ref,
    };
    let writes: Vec<String> = writes_since(&env, log_before)
        .await
        .into_iter()
        .filter(|w| own.named_by(w))
        .collect();
    let (receipts, cancels) = own.receipt_cancels_and_claim_only(&writes);
    assert_eq!(receipts, 1, "{writes:#?}");
    assert_eq!(cancels, 1, "its running smoke is cancelled: {writes:#?}");
    assert_eq!(family_runs(&env, family_id.as_str()).await, runs_before);
    assert_eq!(env.pull(number).await.head_sha, merged.head_sha);
    for run in &ended.runs {
        let live = crate::support::run_once_completed(&env.forge, run.id).await;
        assert_eq!(
            live.conclusion.as_ref().map(|c| c.as_str()),
            Some("cancelled"),
            "{live:?}"
        );
    }
    assert!(
        !env.claims()
            .await
            .iter()
            .any(|(name, _)| name.ends_with(family_id.as_str())),
        "claim released"
    );
    // The PR stays merged; nothing reopened or relabelled it.
    let pull = env.pull(number).await;
    assert!(pull.state.is_merged() && !pull.state.is_open());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pr_merged_after_its_sweep_verified_ends_validated() {
    let env = Harness::demo().script(VALIDATED_SCRIPT).start().await;
    let target = env.target("demo-fp4-b200-sglang").await;
    let journal = MemoryJournal::new();
    let lifecycle = GithubLifecycle::new(&env.forge);
    let clock = SystemClock;
    let engine = env.engine_as(
        &lifecycle,
        &journal,
        &clock,
        Claimant::new(uuid::Uuid::from_u128(0x006d_6572_6765)),
        &env.config,
    );
    let mut rec = engine.open_record(&target).await.expect("record");
    // Step until the final sweep's report says it verified, before the
    // finish: the window in which a maintainer's merge lands.
    let started = Instant::now();
    while !(rec.step == Step::Sweep && rec.sweep.is_some()) {
        assert!(rec.step != Step::Done, "ended before the window: {rec:#?}");
        assert!(started.elapsed() < Duration::from_secs(60), "{rec:#?}");
        if let Progress::Waiting(_) = engine.step(&mut rec).await.expect("step") {
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
    }
    let number = rec.pull.expect("pull");
    maintainer(&env).merge_pull(number).await;
    let log_before = env.stack.state().request_log().await.len();
    let comments_before = env.bodies(number).await;
    // Whether the sweep was first seen running (its live report already
    // posted, to be edited into the receipt) or first seen finished (its
    // report posted with the receipt) depends on the machine's speed.
    let sweep_run = rec.sweep.as_ref().expect("verified").run_id;
    let sweep_marker = format!(":run-{sweep_run}-");
    let live_sweep_report = comments_before
        .iter()
        .position(|b| b.starts_with("<!-- klaud-report:") && b.contains(&sweep_marker));
    loop {
        match engine.step(&mut rec).await.expect("step") {
            Progress::Done(_) => break,
            _ if started.elapsed() > Duration::from_secs(60) => panic!("no end: {rec:#?}"),
            Progress::Waiting(_) => tokio::time::sleep(Duration::from_millis(15)).await,
            _ => {}
        }
    }
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Validated, "{ending:?}");
    assert!(
        ending.message.contains("merged by someone else"),
        "{ending:?}"
    );
    let bodies = env.bodies(number).await;
    let receipt = bodies.last().expect("receipt");
    assert!(receipt.contains("\"outcome\":\"validated\""), "{receipt}");
    assert!(receipt.contains(&sweep_marker), "{receipt}");
    match live_sweep_report {
        Some(live) => {
            assert_eq!(live, comments_before.len() - 1, "{comments_before:#?}");
            assert_eq!(bodies.len(), comments_before.len(), "{bodies:#?}");
        }
        None => assert_eq!(bodies.len(), comments_before.len() + 1, "{bodies:#?}"),
    }
    // Every comment before the sweep's own report is left as it was.
    let kept = comments_before.len() - usize::from(live_sweep_report.is_some());
    assert_eq!(bodies[..kept], comments_before[..kept]);
    // One engine steps this one candidate: every write since the merge is
    // its own.
    let number: u64 = number.into();
    let comment_ids = env.stack.state().comment_ids(REPO, number).await;
    let family = target.candidate.family().to_string();
    let own = Own {
        pull: number,
        comments: &comment_ids,
        runs: &[],
        family: &family,
        branch: &env.pull(number).await.head_ref,
    };
    let writes = writes_since(&env, log_before).await;
    let (receipts, cancels) = own.receipt_cancels_and_claim_only(&writes);
    assert_eq!((receipts, cancels), (1, 0), "{writes:#?}");
    assert!(env.claims().await.is_empty(), "claim released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_tag_while_a_validated_pr_waits_opens_nothing_and_the_plan_says_superseded() {
    const SGLANG: &str = "demo-fp4-b200-sglang";
    let env = Harness::demo().script(VALIDATED_SCRIPT).start().await;
    let target = env.target(SGLANG).await;
    let rec = env.finish(&MemoryJournal::new(), &target).await;
    crate::lifecycle_e2e::assert_validated(&env, &target, &rec).await;
    let number = rec.pull.expect("pull");
    let family = target.candidate.family().to_string();
    let runs_before = family_runs(&env, &family).await;
    assert!(runs_before > 0, "the validated candidate's smoke and sweep");
    // Upstream publishes a newer tag on the same track while the PR waits
    // for its merge.
    let now = chrono::Utc::now();
    env.stack
        .registry
        .add_tag(
            "lmsysorg/sglang",
            "v0.5.18-cu130",
            &klaud_sandbox::registry::TagSeed {
                pushed: Some(now),
                created: Some(now),
                ..Default::default()
            },
        )
        .expect("push tag");
    // The next wave, with a fresh store.
    let summary = wave_with(&env, 5401, &MemoryJournal::new()).await;
    let f = crate::people::family_of(&summary, SGLANG);
    let b = f.blocked.as_ref().expect("occupied");
    assert_eq!(b.kind, klaud_planner::plan::BlockKind::Occupied, "{b:?}");
    assert!(
        b.reason.contains("superseded upstream") && b.reason.contains("v0.5.18-cu130"),
        "{b:?}"
    );
    assert_eq!(crate::people::klaud_pulls_of(&summary, SGLANG), 0);
    let open: Vec<u64> = crate::people::open_pulls(&env)
        .await
        .into_iter()
        .filter(|(_, head)| head.starts_with("klaud/auto-") && head.contains(&family))
        .map(|(n, _)| n)
        .collect();
    assert_eq!(open, vec![number.get()], "no second PR for the family");
    // Nothing was dispatched for it.
    assert_eq!(family_runs(&env, &family).await, runs_before);
}
