//! Baseline readiness (issue 11): a family whose published baseline cannot
//! be found, or does not cover its points, ends `readiness-blocked` before
//! any GPU work; `[lifecycle] require_baseline = false` lets it go on with
//! N/A rows. The real wave and engine, the octocrab forge and the sandbox
//! (whose results API withholds what the test says).

use klaud_lifecycle::engine::MemoryJournal;
use klaud_service::wave::{CandidateSummary, WaveSummary};

use crate::people::{KEY, wave_config};
use crate::support::Harness;

fn candidate_of<'a>(summary: &'a WaveSummary, key: &str) -> &'a CandidateSummary {
    summary
        .candidates
        .iter()
        .find(|c| c.family.ends_with(&format!(":{key}")))
        .unwrap_or_else(|| panic!("{key} is not a candidate: {:#?}", summary.candidates))
}

fn pull_number(c: &CandidateSummary) -> u64 {
    c.pull_request
        .as_deref()
        .and_then(|u| u.rsplit('/').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no pull request: {c:#?}"))
}

/// Workflow runs on GitHub whose title names `candidate` (the smoke's
/// `test-name` carries it) or that ran on its branch.
async fn runs_of(env: &Harness, candidate: &str) -> Vec<u64> {
    env.forge
        .list_runs(&klaud_github::RunFilter::default())
        .await
        .expect("runs")
        .into_iter()
        .filter(|r| {
            r.display_title
                .as_deref()
                .is_some_and(|t| t.contains(candidate))
                || r.head_branch.as_deref() == Some(&format!("klaud/auto-{candidate}"))
        })
        .map(|r| r.id)
        .collect()
}

/// The receipt, `klaud status` (the journal's outcome rows, which the
/// dashboard shows too) and the wave summary all say `outcome`.
async fn agree(env: &Harness, journal: &MemoryJournal, c: &CandidateSummary, outcome: &str) {
    assert_eq!(c.outcome.as_deref(), Some(outcome), "{c:#?}");
    let bodies = env.bodies(pull_number(c)).await;
    let receipt = bodies
        .iter()
        .rfind(|b| b.starts_with("<!-- klaud-outcome:"))
        .expect("a receipt");
    assert!(
        receipt.contains(&format!("\"outcome\":\"{outcome}\"")),
        "{receipt}"
    );
    let status = klaud_service::status::repository_status(
        &env.forge,
        journal,
        klaud_claims::Claimant::new(uuid::Uuid::from_u128(0x7265_6164)),
    )
    .await
    .expect("status");
    let row = status
        .outcomes
        .iter()
        .find(|o| o.candidate == c.candidate)
        .expect("an outcome row");
    assert_eq!(row.outcome, outcome);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_family_with_no_published_baseline_is_readiness_blocked_before_any_dispatch() {
    let env = Harness::demo().start().await;
    env.stack.published.withhold_key(KEY);
    let journal = MemoryJournal::new();
    let summary = wave_config(&env, crate::support::engine_config(5201), &journal).await;
    let c = candidate_of(&summary, KEY);
    agree(&env, &journal, c, "readiness-blocked").await;
    assert_eq!(c.phase, "baseline", "{c:#?}");
    let message = c.message.as_deref().unwrap_or_default();
    assert!(message.contains("baseline-unavailable"), "{message}");
    assert!(c.runs.is_empty(), "{c:#?}");
    assert!(runs_of(&env, c.candidate.as_str()).await.is_empty());
    // The receipt names the reason code; the PR is closed.
    let number = pull_number(c);
    let bodies = env.bodies(number).await;
    let receipt = bodies.last().expect("receipt");
    assert!(receipt.contains("baseline-unavailable"), "{receipt}");
    assert!(!env.pull(number).await.state.is_open());
    // The other families, whose baselines are published, go on to smoke.
    assert!(
        summary
            .candidates
            .iter()
            .any(|x| !x.family.ends_with(&format!(":{KEY}")) && !x.runs.is_empty()),
        "{:#?}",
        summary.candidates
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_baseline_missing_some_points_is_readiness_blocked_naming_them() {
    let env = Harness::demo().start().await;
    // demo-fp4-b200-vllm runs 1k1k TP8 at c4…c64: two of its points are
    // not published.
    env.stack.published.withhold_points(KEY, &[8, 32]);
    let journal = MemoryJournal::new();
    let summary = wave_config(&env, crate::support::engine_config(5202), &journal).await;
    let c = candidate_of(&summary, KEY);
    agree(&env, &journal, c, "readiness-blocked").await;
    let message = c.message.as_deref().unwrap_or_default();
    assert!(message.contains("baseline-incomplete"), "{message}");
    assert!(
        message.contains("lacks 2 of the family's 5 points"),
        "{message}"
    );
    assert!(
        message.contains("c8") && message.contains("c32"),
        "{message}"
    );
    assert!(!message.contains("c16 "), "{message}");
    assert!(c.runs.is_empty(), "{c:#?}");
    assert!(runs_of(&env, c.candidate.as_str()).await.is_empty());
    let bodies = env.bodies(pull_number(c)).await;
    let receipt = bodies.last().expect("receipt");
    assert!(
        receipt.contains("baseline-incomplete") && receipt.contains("c32"),
        "{receipt}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_require_baseline_a_missing_baseline_gives_na_rows_and_the_smoke_runs() {
    let env = Harness::demo().start().await;
    env.stack.published.withhold_key(KEY);
    let mut engine = crate::support::engine_config(5203);
    engine.require_baseline = false;
    let journal = MemoryJournal::new();
    let summary = wave_config(&env, engine, &journal).await;
    let c = candidate_of(&summary, KEY);
    assert_ne!(c.outcome.as_deref(), Some("readiness-blocked"), "{c:#?}");
    assert!(!c.runs.is_empty(), "the smoke was dispatched: {c:#?}");
    let pull = env.forge.get_pull(pull_number(c)).await.expect("pull");
    let body = pull.body.unwrap_or_default();
    assert!(body.contains("<!-- klaud-baseline-body -->"), "{body}");
    assert!(body.contains("N/A"), "{body}");
    // Every point is an N/A row with its reason, and the smoke still ran.
    assert!(
        body.contains("| 1k1k c64 TP8 | N/A | N/A | N/A | N/A |")
            && (body.contains("no published result for this point")
                || body.contains("not benchmarked on")),
        "{body}"
    );
}
