//! The store is a cache: validated PRs awaiting their merge are looked
//! after from GitHub alone once the journal is gone. Each validated PR's
//! record is deleted (a fresh journal), and the next wave rebuilds it from
//! the PR, its receipt and its branch: it keeps the PR mergeable with the
//! same writes as for a PR whose record was kept, answers a maintainer's
//! `/klaud status`, posts Klaud's deleted reuse line again, and a second
//! pass writes nothing. Once a lost record shows the store was lost, the
//! recently active finished PRs are rebuilt too: a command on a closed one
//! is answered. A person's commit that copies Klaud's trailer is not taken
//! for Klaud's own base merge.

use std::time::{Duration, Instant};

use klaud_lifecycle::engine::{CandidateRecord, Journal as _, MemoryJournal};
use klaud_lifecycle::model::Outcome;
use klaud_lifecycle::wave::WaveSummary;
use klaud_sandbox::stack::MAINTAINER_TOKEN;

use crate::lifecycle_e2e::VALIDATED_SCRIPT;
use crate::support::{Harness, assert_unique, markers};

/// Whether PR `number` merges cleanly, once GitHub has computed it.
async fn mergeable(env: &Harness, number: u64) -> Option<bool> {
    let started = Instant::now();
    loop {
        let pull = env.get_as_maintainer(&format!("pulls/{number}")).await;
        if !pull["mergeable"].is_null() || started.elapsed() > Duration::from_secs(10) {
            return pull["mergeable"].as_bool();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One wave that plans nothing new over `journal`.
async fn upkeep_wave(env: &Harness, journal: &MemoryJournal) -> WaveSummary {
    let mut options = env.wave_options(crate::support::owner(), env.config.clone());
    options.lifecycle.plan.max_candidates = 0;
    env.wave(journal, options).await
}

async fn record(journal: &MemoryJournal, rec: &CandidateRecord) -> CandidateRecord {
    journal
        .load(rec.candidate.as_str())
        .await
        .expect("load")
        .expect("a record")
}

#[tokio::test]
async fn validated_prs_are_kept_and_answered_after_the_store_is_lost() {
    let mut env = Harness::demo().script(VALIDATED_SCRIPT).start().await;
    // Four candidates' writes exceed GitHub's content limit of a minute;
    // Klaud's pacing would wait it out, which this test is not about.
    env.stack.state().set_content_limits(None, None).await;
    env.forge = crate::support::forge_of(&env.stack)
        .await
        .with_write_pace(klaud_github::WritePace::UNPACED);
    let journal = MemoryJournal::new();
    let mut finished = Vec::new();
    for key in [
        "demo-fp4-b200-sglang",
        "demo-fp8-mi355x-sglang",
        "demo-fp8-h200-trt",
    ] {
        finished.push(env.validated(&journal, key).await);
    }
    let [a, kept, lost] = <[CandidateRecord; 3]>::try_from(finished).expect("three");
    // A failed candidate: its PR closed, its receipt on it.
    let failed = env
        .finish(&journal, &env.target("demo-fp4-b200-vllm").await)
        .await;
    assert_eq!(
        failed.ending.as_ref().map(|e| e.outcome),
        Some(Outcome::Failed),
        "{failed:#?}"
    );
    let failed_pr = failed.pull.expect("failed").get();
    assert!(!env.pull(failed_pr).await.state.is_open());
    let (kept_pr, lost_pr) = (
        kept.pull.expect("kept").get(),
        lost.pull.expect("lost").get(),
    );
    let dispatches = env.dispatches().await;

    // A maintainer merges A: both other PRs now conflict on the changelog.
    let maintainer = env.person(MAINTAINER_TOKEN);
    let (status, merged) = maintainer
        .try_merge(
            a.pull.expect("a").get(),
            serde_json::json!({"merge_method": "squash"}),
        )
        .await;
    assert_eq!(status, 200, "{merged}");
    assert_eq!(mergeable(&env, kept_pr).await, Some(false));
    assert_eq!(mergeable(&env, lost_pr).await, Some(false));

    // The store is lost for one of them: a fresh journal holding only the
    // other's record, the undisturbed run to compare with.
    let store = MemoryJournal::new();
    store
        .save(&record(&journal, &kept).await)
        .await
        .expect("save");
    let from = env.stack.state().requests_recorded();
    upkeep_wave(&env, &store).await;
    let writes = env.writes_since(from).await;
    // The kept record is looked after first, then the rebuilt one: the
    // same writes, in the same order.
    assert!(!writes.is_empty() && writes.len() % 2 == 0, "{writes:#?}");
    let (first, second) = writes.split_at(writes.len() / 2);
    assert_eq!(
        first, second,
        "the lost PR's upkeep differs from the kept one's"
    );
    assert!(
        first.iter().any(|w| w.contains("/git/commits")),
        "the base was merged in: {writes:#?}"
    );
    for number in [kept_pr, lost_pr] {
        assert_eq!(mergeable(&env, number).await, Some(true), "#{number}");
    }
    let rebuilt = record(&store, &lost).await;
    assert_eq!(rebuilt.pull, lost.pull);
    assert_eq!(rebuilt.sweep, lost.sweep, "the validated sweep run");
    assert_eq!(rebuilt.image, lost.image);
    assert_eq!(
        rebuilt.ending.as_ref().map(|e| e.outcome),
        Some(Outcome::Validated)
    );
    let upkept_head = rebuilt.head.clone().expect("head");
    assert_ne!(Some(&upkept_head), lost.head.as_ref(), "the merge moved it");

    // The store is lost again, now on a head Klaud's own upkeep made. A
    // maintainer deletes Klaud's reuse line and asks for the status.
    let run = lost.sweep.as_ref().expect("sweep").run_id;
    let line = format!("/reuse-sweep-run {run}");
    for id in env.bot_lines(lost_pr, &line).await {
        maintainer.delete_comment(id).await;
    }
    assert!(env.bot_lines(lost_pr, &line).await.is_empty());
    let asked = maintainer.comment(lost_pr, "/klaud status").await;
    let asked_failed = maintainer.comment(failed_pr, "/klaud status").await;
    let kept_bodies = env.bodies(kept_pr).await;
    let empty = MemoryJournal::new();
    let summary = upkeep_wave(&env, &empty).await;
    assert_eq!(summary.answered.len(), 2, "{summary:#?}");
    let marker = klaud_service::pr_commands::reply_marker(asked_failed);
    let bodies = env.bodies(failed_pr).await;
    let replies: Vec<&String> = bodies.iter().filter(|b| b.contains(&marker)).collect();
    assert_eq!(replies.len(), 1, "{bodies:#?}");
    assert!(replies[0].contains("failed"), "{}", replies[0]);
    let marker = klaud_service::pr_commands::reply_marker(asked);
    let bodies = env.bodies(lost_pr).await;
    let replies: Vec<&String> = bodies.iter().filter(|b| b.contains(&marker)).collect();
    assert_eq!(replies.len(), 1, "{bodies:#?}");
    assert!(replies[0].contains("validated"), "{}", replies[0]);
    assert_eq!(
        env.bot_lines(lost_pr, &line).await.len(),
        1,
        "the reuse line is posted again"
    );
    assert!(
        !bodies.iter().any(|b| b.contains("klaud-sweep-uncovered")),
        "Klaud's own merge is not a person's push: {bodies:#?}"
    );
    assert_eq!(
        env.bodies(kept_pr).await,
        kept_bodies,
        "nothing to do on #{kept_pr}"
    );
    assert_eq!(
        record(&empty, &lost).await.head,
        Some(upkept_head),
        "the head is Klaud's upkeep merge"
    );

    // The next pass reads its rebuilt records and writes nothing.
    let from = env.stack.state().requests_recorded();
    let summary = upkeep_wave(&env, &empty).await;
    assert!(summary.answered.is_empty(), "{summary:#?}");
    assert_eq!(env.writes_since(from).await, Vec::<String>::new());

    // No duplicate PR, dispatch or comment.
    for rec in [&kept, &lost, &failed] {
        assert_eq!(env.pulls(&rec.branch).await.len(), 1, "{}", rec.branch);
        assert_unique(&markers(&env.bodies(rec.pull.expect("pull")).await));
    }
    assert_eq!(env.dispatches().await, dispatches);
    assert!(env.claims().await.is_empty(), "every claim released");
}

/// With the store lost, a head whose message carries Klaud's trailer is
/// taken for Klaud's own only when it is Klaud's base merge on top of the
/// validated commit. A person's commit that copies the trailer (a
/// cherry-pick, an amended message) is a person's push: the rebuilt record
/// keeps the validated head, and the upkeep withdraws the reuse line.
#[tokio::test]
async fn a_persons_commit_copying_klauds_trailer_is_not_taken_for_klauds_after_the_store_is_lost() {
    let env = Harness::demo().script(VALIDATED_SCRIPT).start().await;
    let journal = MemoryJournal::new();
    let rec = env.validated(&journal, "demo-fp4-b200-sglang").await;
    let number = rec.pull.expect("pull").get();
    let run = rec.sweep.as_ref().expect("sweep").run_id;
    let line = format!("/reuse-sweep-run {run}");
    assert_eq!(env.bot_lines(number, &line).await.len(), 1);
    let message = format!("Tune the recipe\n\nKlaud-Candidate: {}\n", rec.candidate);
    let pushed = crate::support::maintainers_push(
        &env,
        &rec,
        "NOTES.md",
        b"a person's change\n".to_vec(),
        &message,
    )
    .await;

    let empty = MemoryJournal::new();
    upkeep_wave(&env, &empty).await;
    let rebuilt = record(&empty, &rec).await;
    assert_eq!(rebuilt.head, rec.head, "the validated head: {rebuilt:#?}");
    let withdrawn = rebuilt
        .upkeep
        .as_ref()
        .and_then(|u| u.withdrawn.clone())
        .unwrap_or_else(|| panic!("not withdrawn: {rebuilt:#?}"));
    assert_eq!(withdrawn.head.as_str(), pushed);
    assert!(env.bot_lines(number, &line).await.is_empty());
    let bodies = env.bodies(number).await;
    assert!(
        bodies.iter().any(|b| b.contains("klaud-sweep-uncovered")),
        "{bodies:#?}"
    );
}
