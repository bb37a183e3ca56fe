//! Live attempt reports through the sandbox: the run's report comment is
//! posted while the run is in progress, edited in place as its jobs finish
//! (a bounded number of times), found again after a restart, and replaced
//! by the final report; the Chinese blocks of everything Klaud posts hold
//! the full text.

use std::time::{Duration, Instant};

use klaud_claims::SystemClock;
use klaud_lifecycle::engine::{CandidateRecord, Journal, MemoryJournal, Progress, Target};
use klaud_lifecycle::model::Outcome;
use klaud_lifecycle::report::find_record;
use klaud_service::GithubLifecycle;

use crate::support::{Harness, REPO};

const KEY: &str = "demo-fp4-b200-sglang";

/// The smoke of the family runs 3 s, its jobs ending one by one.
const SLOW_SMOKE: &str = r#"
[families."*"]
smoke = ["success"]
sweep = ["success"]
[families.demo-fp4-b200-sglang]
smoke = [{ delay = 3, outcome = "success" }]
[families.demo-fp4-b200-vllm]
smoke = [{ delay = 3, outcome = "failure", partial = true }]
"#;

fn fast_reports(config: &mut klaud_lifecycle::engine::EngineConfig) {
    config.live_report_interval = Some(chrono::TimeDelta::milliseconds(300));
}

/// A report comment of a run: (comment id, body).
async fn run_reports(env: &Harness, number: impl Into<u64>) -> Vec<(u64, String)> {
    let number: u64 = number.into();
    env.forge
        .list_comments(number, None)
        .await
        .expect("comments")
        .into_iter()
        .filter(|c| {
            find_record(&c.body)
                .ok()
                .flatten()
                .is_some_and(|r| r.key.to_string().contains(":run-"))
        })
        .map(|c| (c.id, c.body))
        .collect()
}

/// Says from the run reports seen whether to stop driving.
type Stop = dyn Fn(&[(u64, String)]) -> bool + Sync;

/// Steps the engine until `stop` says so (or the candidate ends), keeping
/// every distinct body of the run report comments seen between steps.
async fn drive(
    env: &Harness,
    journal: &dyn Journal,
    target: &Target,
    stop: &Stop,
    seen: &mut Vec<(u64, String)>,
) -> CandidateRecord {
    let lifecycle = GithubLifecycle::new(&env.forge);
    let clock = SystemClock;
    let engine = env.engine(&lifecycle, journal, &clock);
    let mut rec = engine.open_record(target).await.expect("record");
    let started = Instant::now();
    loop {
        let progress = engine.step(&mut rec).await.expect("step");
        if let Some(number) = rec.pull {
            let now = run_reports(env, number).await;
            for c in &now {
                if !seen.contains(c) {
                    seen.push(c.clone());
                }
            }
            if stop(&now) {
                return rec;
            }
        }
        match progress {
            Progress::Done(_) => return rec,
            _ if started.elapsed() > Duration::from_secs(60) => panic!("no end: {rec:#?}"),
            Progress::Waiting(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            _ => {}
        }
    }
}

/// PATCHes of one comment in the request log.
async fn edits_of(env: &Harness, comment: u64) -> usize {
    env.stack
        .state()
        .request_log()
        .await
        .iter()
        .filter(|e| {
            e.method == "PATCH"
                && e.path.ends_with(&format!("/issues/comments/{comment}"))
                && e.status < 300
        })
        .count()
}

fn live(body: &str) -> bool {
    body.contains("**Initial smoke, repair 0/5 · running (")
}

/// `| 1 | 1,234 (+0.0%) | ...` rows of the English tables.
fn measured_rows(body: &str) -> usize {
    let english = body.split("<details>").next().unwrap_or("");
    english
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| Concurrency") && !l.contains("N/A"))
        .filter(|l| l.chars().nth(2).is_some_and(|c| c.is_ascii_digit()))
        .count()
}

#[tokio::test]
async fn a_running_smoke_report_is_edited_in_place_as_its_jobs_finish() {
    let env = Harness::demo()
        .script(SLOW_SMOKE)
        .configure(fast_reports)
        .start()
        .await;
    let target = env.target(KEY).await;
    let journal = MemoryJournal::new();
    let mut seen = Vec::new();
    let rec = drive(&env, &journal, &target, &|_| false, &mut seen).await;
    assert_eq!(
        rec.ending.as_ref().map(|e| e.outcome),
        Some(Outcome::Validated)
    );
    let number = rec.pull.expect("pull");
    // One comment per run; the smoke's was live first, then final.
    let smoke_id = seen.iter().find(|(_, b)| live(b)).expect("a live report").0;
    let versions: Vec<&String> = seen
        .iter()
        .filter(|(id, _)| *id == smoke_id)
        .map(|(_, b)| b)
        .collect();
    let lives: Vec<&&String> = versions.iter().filter(|b| live(b)).collect();
    assert!(
        lives[0].contains("Jobs: ") && lives[0].contains("throughput"),
        "{}",
        lives[0]
    );
    assert!(
        lives
            .iter()
            .any(|b| b.contains("(evals passed, throughput running)")
                || b.contains("throughput running")),
        "{lives:#?}"
    );
    // Rows appear as jobs finish: some live version shows some but not all.
    let counts: Vec<usize> = lives.iter().map(|b| measured_rows(b)).collect();
    let last = versions.last().expect("final");
    assert!(
        last.contains("**Initial smoke, repair 0/5 · passed (smoke)**"),
        "{last}"
    );
    let all = measured_rows(last);
    assert!(all >= 2, "{last}");
    assert!(
        counts.iter().any(|c| *c > 0 && *c < all),
        "no live version with part of the rows: {counts:?} of {all}"
    );
    assert!(
        lives
            .iter()
            .any(|b| b.contains("its job has not finished yet")
                && b.contains("该点位的作业尚未完成")),
        "pending points say why they are N/A, in both languages"
    );
    // Final report in the same comment; no second comment for the run.
    let now = run_reports(&env, number).await;
    let smoke_comments: Vec<_> = now.iter().filter(|(id, _)| *id == smoke_id).collect();
    assert_eq!(smoke_comments.len(), 1);
    assert!(!live(&smoke_comments[0].1));
    let markers: Vec<String> = now
        .iter()
        .filter_map(|(_, b)| find_record(b).ok().flatten().map(|r| r.key.to_string()))
        .collect();
    let mut unique = markers.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), markers.len(), "{markers:?}");
    // Bounded: every edit changed what the comment shows (one per version
    // seen at most, plus the final one), and the run has few jobs.
    let edits = edits_of(&env, smoke_id).await;
    assert!(edits >= 1, "never edited");
    assert!(
        edits <= versions.len(),
        "{edits} edits for {} versions",
        versions.len()
    );
    let jobs = env
        .forge
        .list_jobs(rec.attempts[0].run.as_ref().expect("run").id)
        .await
        .expect("jobs")
        .len();
    assert!(edits <= jobs + 1, "{edits} edits for {jobs} jobs");
}

#[tokio::test]
async fn a_restart_mid_run_finds_the_live_comment_again() {
    let env = Harness::demo()
        .script(SLOW_SMOKE)
        .configure(fast_reports)
        .start()
        .await;
    let target = env.target(KEY).await;
    let journal = MemoryJournal::new();
    let mut seen = Vec::new();
    let rec = drive(
        &env,
        &journal,
        &target,
        &|now| now.iter().any(|(_, b)| live(b)),
        &mut seen,
    )
    .await;
    let number = rec.pull.expect("pull");
    let live_id = seen.iter().find(|(_, b)| live(b)).expect("live").0;
    // A crash that loses the journal: the next instance starts empty.
    journal.clear();
    let rec = drive(&env, &journal, &target, &|_| false, &mut seen).await;
    assert_eq!(
        rec.ending.as_ref().map(|e| e.outcome),
        Some(Outcome::Validated)
    );
    assert_eq!(
        env.dispatches().await,
        1,
        "the smoke was not dispatched again"
    );
    let now = run_reports(&env, number).await;
    let smoke: Vec<_> = now
        .iter()
        .filter(|(_, b)| b.contains("Initial smoke, repair 0/5"))
        .collect();
    assert_eq!(smoke.len(), 1, "{now:#?}");
    assert_eq!(
        smoke[0].0, live_id,
        "the final report is in the live comment"
    );
    assert!(smoke[0].1.contains("passed (smoke)"));
}

#[tokio::test]
async fn reports_are_written_without_listing_the_comments_and_a_deleted_live_one_is_posted_again() {
    let env = Harness::demo()
        .script(SLOW_SMOKE)
        .configure(fast_reports)
        .start()
        .await;
    let target = env.target(KEY).await;
    let journal = MemoryJournal::new();
    // Stepped without looking at the comments (`drive` lists them), until
    // the record holds its live report.
    let (live_id, number) = {
        let lifecycle = GithubLifecycle::new(&env.forge);
        let clock = SystemClock;
        let engine = env.engine(&lifecycle, &journal, &clock);
        let mut rec = engine.open_record(&target).await.expect("record");
        let started = Instant::now();
        loop {
            let progress = engine.step(&mut rec).await.expect("step");
            let own = rec.own_comments.as_ref().map(|o| o.comments.as_slice());
            if let Some(c) = own.unwrap_or_default().iter().find(|c| live(&c.body)) {
                break (c.id, rec.pull.expect("pull"));
            }
            assert!(started.elapsed() < Duration::from_secs(60), "{rec:#?}");
            if let Progress::Waiting(_) = progress {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    // Klaud opened the PR and wrote every comment on it so far from its
    // own record: it never had to list them.
    let listings = || async {
        env.stack
            .state()
            .request_log()
            .await
            .iter()
            .filter(|e| e.method == "GET" && e.path.contains(&format!("/issues/{number}/comments")))
            .count()
    };
    assert_eq!(
        listings().await,
        0,
        "comments listed before the live report"
    );
    // A maintainer deletes the live report while the run goes on.
    let mut seen = Vec::new();
    env.person(klaud_sandbox::stack::MAINTAINER_TOKEN)
        .delete_comment(live_id)
        .await;
    let rec = drive(&env, &journal, &target, &|_| false, &mut seen).await;
    assert_eq!(
        rec.ending.as_ref().map(|e| e.outcome),
        Some(Outcome::Validated)
    );
    let smoke: Vec<_> = run_reports(&env, number)
        .await
        .into_iter()
        .filter(|(_, b)| b.contains("Initial smoke, repair 0/5"))
        .collect();
    assert_eq!(smoke.len(), 1, "{smoke:#?}");
    assert!(smoke[0].1.contains("passed (smoke)"), "{}", smoke[0].1);
}

/// The Chinese block of a body: between `<summary>中文</summary>` and the
/// next `</details>`.
fn chinese_blocks(body: &str) -> Vec<&str> {
    body.split("<summary>中文</summary>")
        .skip(1)
        .map(|rest| rest.split("</details>").next().unwrap_or(rest))
        .collect()
}

/// Words of a Chinese block outside code spans, links and quoted
/// originals (`原文：…`, outside text Klaud cannot translate): four
/// lowercase English words in a row are an English sentence left in.
fn english_sentence(block: &str) -> Option<String> {
    let code = regex::Regex::new(r"`[^`]*`").expect("regex");
    let links = regex::Regex::new(r"\[[^\]]*\]\([^)]*\)").expect("regex");
    let quoted = regex::Regex::new(r"原文：[^\n]*").expect("regex");
    let cleaned = code.replace_all(block, "").into_owned();
    let cleaned = links.replace_all(&cleaned, "").into_owned();
    let cleaned = quoted.replace_all(&cleaned, "").into_owned();
    let words = regex::Regex::new(r"(?:\b[a-z]{2,}\b[ ,.]+){3}\b[a-z]{2,}\b").expect("regex");
    words.find(&cleaned).map(|m| m.as_str().to_owned())
}

#[tokio::test]
async fn chinese_blocks_hold_the_full_text_and_every_na_says_why() {
    let env = Harness::demo()
        .script(SLOW_SMOKE)
        .configure(fast_reports)
        .start()
        .await;
    let mut bodies = Vec::new();
    for key in [KEY, "demo-fp4-b200-vllm"] {
        let target = env.target(key).await;
        let journal = MemoryJournal::new();
        let mut seen = Vec::new();
        let rec = drive(&env, &journal, &target, &|_| false, &mut seen).await;
        let number = rec.pull.expect("pull");
        bodies.extend(seen.into_iter().map(|(_, b)| b));
        bodies.extend(
            env.forge
                .list_comments(number.get(), None)
                .await
                .expect("comments")
                .into_iter()
                .map(|c| c.body),
        );
        bodies.push(env.pull(number).await.body.unwrap_or_default());
    }
    // The detector itself finds what it is for.
    assert!(english_sentence("运行结论：the smoke failed and no hook").is_some());
    assert!(english_sentence("镜像：`a b c d e` · [x y z w](https://x)").is_none());
    let mut na_seen = false;
    for body in &bodies {
        if !body.contains("<!-- klaud") {
            continue;
        }
        let blocks = chinese_blocks(body);
        assert!(!blocks.is_empty(), "no Chinese block in {body}");
        for block in blocks {
            for lazy in ["同上", "如上", "见上", "as above"] {
                assert!(!block.contains(lazy), "{lazy:?} in {block}");
            }
            if let Some(s) = english_sentence(block) {
                panic!("English sentence {s:?} in the Chinese block:\n{block}");
            }
        }
        // Every N/A is explained in both languages.
        let english = body.split("<summary>中文</summary>").next().unwrap_or("");
        if english.contains("| N/A") || english.contains("N/A |") {
            na_seen = true;
            assert!(
                english.contains("**N/A:**")
                    || english.contains("**Note:**")
                    || english.contains("**Eval:** N/A ("),
                "{body}"
            );
            assert!(
                body.contains("**N/A**：") || body.contains("**说明**："),
                "{body}"
            );
        }
    }
    assert!(na_seen, "no N/A was rendered at all");
    let _ = REPO;
}

/// The final sweep of the family runs 3 s, its jobs ending one by one.
const SLOW_SWEEP: &str = r#"
[families."*"]
smoke = ["success"]
sweep = [{ delay = 3, outcome = "success" }]
"#;

/// A validated sweep's live report comment is where its receipt goes,
/// with the final report folded in: an edit, no comment more, and the
/// report once on the PR.
#[tokio::test]
async fn a_live_sweep_report_becomes_the_receipt_with_the_final_report() {
    use klaud_lifecycle::report::{candidate_receipt, find_records, parse_report};
    let env = Harness::demo()
        .script(SLOW_SWEEP)
        .configure(fast_reports)
        .start()
        .await;
    let target = env.target(KEY).await;
    let journal = MemoryJournal::new();
    let mut seen = Vec::new();
    let rec = drive(&env, &journal, &target, &|_| false, &mut seen).await;
    assert_eq!(
        rec.ending.as_ref().map(|e| e.outcome),
        Some(Outcome::Validated)
    );
    let number = rec.pull.expect("pull");
    let named = format!(":run-{}-", rec.sweep.as_ref().expect("sweep").run_id);
    let live_id = seen
        .iter()
        .find(|(_, b)| {
            find_record(b).ok().flatten().is_some_and(|f| {
                f.key.to_string().contains(&named) && parse_report(&f).is_ok_and(|r| r.is_live())
            })
        })
        .expect("a live report of the sweep")
        .0;
    let comments = env
        .forge
        .list_comments(u64::from(number), None)
        .await
        .expect("comments");
    let holding: Vec<_> = comments
        .iter()
        .filter(|c| {
            find_records(&c.body)
                .is_ok_and(|f| f.iter().any(|r| r.key.to_string().contains(&named)))
        })
        .collect();
    assert_eq!(holding.len(), 1, "{comments:#?}");
    assert_eq!(holding[0].id, live_id, "the live comment holds the receipt");
    assert!(candidate_receipt(&holding[0].body, rec.candidate.as_str()).is_some());
    let records = find_records(&holding[0].body).expect("valid");
    let report = parse_report(&records[1]).expect("the report");
    assert!(!report.is_live(), "the final report, not the live one");
    let receipts = comments
        .iter()
        .filter(|c| candidate_receipt(&c.body, rec.candidate.as_str()).is_some())
        .count();
    assert_eq!(receipts, 1);
}
