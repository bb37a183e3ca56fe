//! Closing one variant's PR ends that variant only: "not this image" is
//! the decision of closing the last open PR of an image, and a validated
//! sibling outvotes it. Through the real engine, the octocrab forge and
//! the GitHub and CI simulators; the rules are read the way `wave`, `plan`
//! and `serve` read them (`rules_in_force`).

use std::time::{Duration, Instant};

use klaud_claims::{Claimant, SystemClock};
use klaud_lifecycle::engine::{CandidateRecord, Journal, MemoryJournal, Progress, Step, Target};
use klaud_lifecycle::experiment::variant_targets;
use klaud_lifecycle::model::Outcome;
use klaud_planner::ignore::IgnoreTarget;
use klaud_planner::variant::{Variant, parse_edits, resolve};
use klaud_sandbox::stack::MAINTAINER_TOKEN;
use klaud_service::GithubLifecycle;
use klaud_service::dashboard_issue::{declined_in, rules_in_force};

use crate::support::Harness;

const KEY: &str = "demo-fp4-gb200-dynamo-vllm-disagg";

/// A's smoke (the family's first) runs long; B's passes at once.
const B_PASSES: &str = r#"
[families."*"]
smoke = ["success"]
sweep = ["success"]
[families.demo-fp4-gb200-dynamo-vllm-disagg]
smoke = [{ outcome = "success", delay = 60 }, "success"]
sweep = ["success"]
"#;

/// Both smokes run long: nothing is validated before the PRs are closed.
const BOTH_LONG: &str = r#"
[families."*"]
smoke = ["success"]
sweep = ["success"]
[families.demo-fp4-gb200-dynamo-vllm-disagg]
smoke = [{ outcome = "success", delay = 60 }, { outcome = "success", delay = 60 }]
sweep = ["success"]
"#;

/// Variants A and B of one image (neither edits the image).
async fn variants(env: &Harness) -> Vec<Target> {
    let v = |name: &str, edits: &str| Variant {
        name: name.into(),
        from: None,
        edits: parse_edits(edits).expect("edits"),
    };
    let resolved = resolve(&[
        v("A", "set resources.gpus_per_node=8"),
        v("B", "set model.precision=fp8"),
    ])
    .expect("variants");
    let base = env.target(KEY).await;
    variant_targets(&base, "close", &resolved, 0).expect("targets")
}

/// Steps both variants round-robin; a maintainer closes the PR of each
/// variant named in `close` as soon as it has one. Stops when both are
/// done, or when `until` holds.
async fn race_closing(
    env: &Harness,
    journal: &dyn Journal,
    close: &[usize],
    until: impl Fn(&[CandidateRecord]) -> bool,
) -> Vec<CandidateRecord> {
    let lifecycle = GithubLifecycle::new(&env.forge);
    let clock = SystemClock;
    let who = Claimant::new(uuid::Uuid::from_u128(0x6465_636c));
    let engine = env.engine_as(&lifecycle, journal, &clock, who, &env.config);
    let mut recs = Vec::new();
    for t in variants(env).await {
        recs.push(engine.open_record(&t).await.expect("record"));
    }
    let mut closed = vec![false; recs.len()];
    let started = Instant::now();
    loop {
        let mut moved = false;
        for i in 0..recs.len() {
            if recs[i].step == Step::Done {
                continue;
            }
            let p = engine.step(&mut recs[i]).await.expect("step");
            moved |= matches!(p, Progress::Advanced(_));
            if close.contains(&i)
                && !closed[i]
                && let Some(n) = recs[i].pull
                && recs[i].attempts.first().is_some_and(|a| a.run.is_some())
            {
                env.person(MAINTAINER_TOKEN).close_pull(n).await;
                closed[i] = true;
            }
        }
        if recs.iter().all(|r| r.step == Step::Done) || until(&recs) {
            return recs;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "no end after 90 s: {recs:#?}"
        );
        if !moved {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn outcome(rec: &CandidateRecord) -> Option<Outcome> {
    rec.ending.as_ref().map(|e| e.outcome)
}

/// The "not this image" rules among those in force for `records`.
fn image_rules(records: &[CandidateRecord]) -> Vec<String> {
    rules_in_force(&[], None, records)
        .iter()
        .filter_map(|r| match &r.target {
            IgnoreTarget::FamilyImage { image, .. } => Some(image.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn closing_a_variant_while_its_sibling_validates_rules_nothing_out() {
    let env = Harness::demo().script(B_PASSES).start().await;
    let journal = MemoryJournal::new();
    let recs = race_closing(&env, &journal, &[0], |_| false).await;
    let (a, b) = (&recs[0], &recs[1]);
    assert_eq!(outcome(a), Some(Outcome::Handoff), "{a:#?}");
    let declined = a.ending.as_ref().and_then(|e| e.declined.as_ref());
    assert!(declined.is_some(), "a person closed A: {a:#?}");
    assert_eq!(outcome(b), Some(Outcome::Validated), "{b:#?}");
    assert!(env.pull(b.pull.expect("pull")).await.state.is_open());

    // A's receipt says the close ended A only.
    let receipt = env
        .bodies(a.pull.expect("A's PR"))
        .await
        .into_iter()
        .find(|b| b.contains("<!-- klaud-outcome:"))
        .expect("A's receipt");
    assert!(receipt.contains("This variant only"), "{receipt}");
    assert!(!receipt.contains("will not propose"), "{receipt}");
    let records = journal.list().await.expect("records");
    assert!(
        declined_in(&records).is_empty(),
        "{:#?}",
        declined_in(&records)
    );
    assert!(
        image_rules(&records).is_empty(),
        "{:?}",
        image_rules(&records)
    );
}

#[tokio::test]
async fn closing_the_last_open_variant_without_a_validated_sibling_rules_the_image_out() {
    let env = Harness::demo().script(BOTH_LONG).start().await;
    let journal = MemoryJournal::new();
    // A is closed while B still runs: A ends, the image is not ruled out.
    let recs = race_closing(&env, &journal, &[0], |recs| recs[0].step == Step::Done).await;
    assert_eq!(outcome(&recs[0]), Some(Outcome::Handoff), "{:#?}", recs[0]);
    assert_ne!(recs[1].step, Step::Done, "{:#?}", recs[1]);
    let records = journal.list().await.expect("records");
    assert!(
        image_rules(&records).is_empty(),
        "{:?}",
        image_rules(&records)
    );

    // Then B, the last open PR of the image, is closed too: now it is
    // "not this image".
    let b = recs[1].pull.expect("B's PR");
    env.person(MAINTAINER_TOKEN).close_pull(b).await;
    let lifecycle = GithubLifecycle::new(&env.forge);
    let clock = SystemClock;
    let who = Claimant::new(uuid::Uuid::from_u128(0x6465_636c));
    let engine = env.engine_as(&lifecycle, &journal, &clock, who, &env.config);
    let mut rec = recs[1].clone();
    let started = Instant::now();
    while rec.step != Step::Done {
        assert!(started.elapsed() < Duration::from_secs(60), "{rec:#?}");
        if !matches!(
            engine.step(&mut rec).await.expect("step"),
            Progress::Advanced(_)
        ) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert_eq!(outcome(&rec), Some(Outcome::Handoff), "{rec:#?}");
    // B was the last open PR of the image: its receipt says "not this image".
    let receipt = env
        .bodies(b)
        .await
        .into_iter()
        .find(|body| body.contains("<!-- klaud-outcome:"))
        .expect("B's receipt");
    assert!(receipt.contains("will not propose"), "{receipt}");
    let records = journal.list().await.expect("records");
    let rules = image_rules(&records);
    assert!(!rules.is_empty(), "the image is ruled out: {records:#?}");
    assert!(
        rules.iter().all(|i| rec.image.starts_with(i.as_str())),
        "{rules:?} vs {}",
        rec.image
    );
    assert_eq!(declined_in(&records).len(), 2, "both closes stand now");
}
