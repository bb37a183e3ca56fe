//! The capacity gate (see configs/README.md#shared-clusters-capacity) through the real engine, the
//! octocrab forge and the sandbox's cluster-status simulator: busy, stale,
//! unreachable and invalid capacity defer before claiming and before every
//! dispatch, and a deferred family goes ahead once its cluster has room.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use klaud_claims::SystemClock;
use klaud_lifecycle::engine::{CandidateRecord, MemoryJournal, Progress, Step, Target};
use klaud_lifecycle::model::{Outcome, Phase};
use klaud_lifecycle::report::{MarkerKey, find_record, parse_receipt};
use klaud_planner::capacity::{CapacityGate, DEFAULT_PATH, HttpCapacity, Verdict};
use klaud_sandbox::capacity::{AnswerMode, ClusterState};
use klaud_sandbox::stack::CAPACITY_KEY;
use klaud_service::GithubLifecycle;

use crate::lifecycle_e2e::VALIDATED_SCRIPT;
use crate::support::{Harness, REPO};

const KEY: &str = "demo-fp4-b200-sglang";
/// `configs/demo/configs/runners.yaml`: b200 → `b200-demo_00`.
const CLUSTER: &str = "b200-demo";

fn gate(env: &Harness, key: &str) -> CapacityGate {
    CapacityGate {
        source: Box::new(
            HttpCapacity::new(
                &env.stack.capacity_url,
                DEFAULT_PATH,
                key.to_owned(),
                Duration::from_secs(5),
            )
            .expect("client"),
        ),
        overrides: BTreeMap::new(),
    }
}

async fn gated_env() -> Harness {
    let mut env = Harness::demo().script(VALIDATED_SCRIPT).start().await;
    env.config.capacity = Some(Arc::new(gate(&env, CAPACITY_KEY)));
    env
}

/// Steps `rec` until `stop` holds or it is done.
async fn drive_until(
    env: &Harness,
    journal: &MemoryJournal,
    rec: &mut CandidateRecord,
    stop: impl Fn(&CandidateRecord) -> bool,
) {
    let lifecycle = GithubLifecycle::new(&env.forge);
    let clock = SystemClock;
    let engine = env.engine(&lifecycle, journal, &clock);
    let started = Instant::now();
    while !stop(rec) && rec.step != Step::Done {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "stuck: {rec:#?}"
        );
        match engine.step(rec).await.expect("step") {
            Progress::Waiting(_) => tokio::time::sleep(Duration::from_millis(15)).await,
            Progress::Skipped(why) => panic!("skipped: {why}"),
            _ => {}
        }
    }
}

async fn open(env: &Harness, journal: &MemoryJournal, target: &Target) -> CandidateRecord {
    let lifecycle = GithubLifecycle::new(&env.forge);
    let clock = SystemClock;
    let engine = env.engine(&lifecycle, journal, &clock);
    engine.open_record(target).await.expect("record")
}

fn deferred(rec: &CandidateRecord, phase: Phase, why: &str) {
    let e = rec.ending.as_ref().expect("ending");
    assert_eq!(e.outcome, Outcome::CapacityDeferred, "{e:?}");
    assert_eq!(e.phase, phase, "{e:?}");
    assert!(
        e.message.contains(why),
        "{:?} should say {why:?}",
        e.message
    );
}

async fn receipt_outcome(
    env: &Harness,
    number: impl Into<u64>,
) -> Option<(Outcome, Option<klaud_claims::CommitSha>)> {
    let number: u64 = number.into();
    env.bodies(number).await.iter().find_map(|b| {
        let found = find_record(b).ok().flatten()?;
        matches!(found.key, MarkerKey::Outcome { .. }).then_some(())?;
        let r = parse_receipt(&found).ok()?;
        Some((r.result.outcome(), r.head))
    })
}

#[tokio::test]
async fn a_busy_cluster_defers_before_claiming_and_a_later_attempt_goes_ahead() {
    let env = gated_env().await;
    env.stack.capacity.set_cluster(CLUSTER, ClusterState::Busy);
    let target = env.target(KEY).await;
    let journal = MemoryJournal::new();
    let mut rec = open(&env, &journal, &target).await;
    drive_until(&env, &journal, &mut rec, |_| false).await;
    deferred(&rec, Phase::Resolve, "cluster b200-demo has no idle node");
    assert!(
        rec.ending
            .as_ref()
            .unwrap()
            .message
            .contains("before claiming")
    );
    assert!(env.pulls(&rec.branch).await.is_empty(), "no PR");
    assert!(env.claims().await.is_empty(), "no claim");
    assert_eq!(env.dispatches().await, 0, "no GPU work");

    // Room again: the same candidate starts over and is validated.
    env.stack.capacity.set_cluster(CLUSTER, ClusterState::Idle);
    let mut rec = open(&env, &journal, &target).await;
    assert_eq!(
        rec.step,
        Step::Claim,
        "a deferral is retried from the start"
    );
    drive_until(&env, &journal, &mut rec, |_| false).await;
    assert_eq!(rec.ending.as_ref().unwrap().outcome, Outcome::Validated);
    assert!(
        env.stack.capacity.reads() >= 3,
        "checked before each dispatch"
    );
}

#[tokio::test]
async fn a_stale_cluster_before_the_smoke_closes_the_pr_and_deletes_the_branch() {
    let env = gated_env().await;
    let target = env.target(KEY).await;
    let journal = MemoryJournal::new();
    let mut rec = open(&env, &journal, &target).await;
    // Up to the smoke dispatch (the PR and baseline exist, nothing runs).
    drive_until(&env, &journal, &mut rec, |r| r.step == Step::Smoke).await;
    env.stack.capacity.set_cluster(CLUSTER, ClusterState::Stale);
    drive_until(&env, &journal, &mut rec, |_| false).await;
    deferred(&rec, Phase::Targeted, "cluster b200-demo is stale");
    assert_eq!(env.dispatches().await, 0, "never dispatched");
    let pulls = env.pulls(&rec.branch).await;
    assert_eq!(pulls.len(), 1);
    let pull = env.pull(pulls[0]).await;
    assert!(!pull.state.is_open(), "the PR is closed");
    assert_eq!(
        receipt_outcome(&env, pull.number).await.map(|r| r.0),
        Some(Outcome::CapacityDeferred)
    );
    assert!(
        env.stack.state().ref_sha(REPO, &rec.branch).await.is_none(),
        "the branch is deleted"
    );
    assert!(env.claims().await.is_empty(), "the claim is released");

    // A later attempt opens a new PR beside the closed one.
    env.stack.capacity.set_cluster(CLUSTER, ClusterState::Idle);
    let mut rec = open(&env, &journal, &target).await;
    drive_until(&env, &journal, &mut rec, |_| false).await;
    assert_eq!(rec.ending.as_ref().unwrap().outcome, Outcome::Validated);
    assert_eq!(env.pulls(&rec.branch).await.len(), 2);
}

#[tokio::test]
async fn a_busy_cluster_before_the_sweep_label_sets_no_label() {
    let env = gated_env().await;
    let target = env.target(KEY).await;
    let journal = MemoryJournal::new();
    let mut rec = open(&env, &journal, &target).await;
    drive_until(&env, &journal, &mut rec, |r| r.step == Step::Final).await;
    env.stack.capacity.set_cluster(CLUSTER, ClusterState::Down);
    drive_until(&env, &journal, &mut rec, |_| false).await;
    deferred(&rec, Phase::FinalSweep, "cluster b200-demo is maintenance");
    assert_eq!(env.label_writes().await, 0, "the sweep label is never set");
    assert_eq!(env.dispatches().await, 1, "only the smoke ran");
}

#[tokio::test]
async fn unreachable_invalid_and_redirected_answers_defer_and_say_why() {
    let env = gated_env().await;
    let g = gate(&env, CAPACITY_KEY);
    let family = env
        .repository
        .families()
        .iter()
        .find(|f| f.key == KEY)
        .expect("family");
    let check = || g.check(&env.repository, family, chrono::Utc::now());
    assert!(matches!(check().await, Verdict::Eligible { .. }));
    for (mode, why) in [
        (AnswerMode::Unreachable, "capacity API unreachable"),
        (AnswerMode::Redirect, "redirects are not followed"),
        (AnswerMode::Invalid, "summary.totalNodes: 9 but"),
        (AnswerMode::Old, "generatedAt"),
    ] {
        env.stack.capacity.set_answer(mode);
        match check().await {
            Verdict::Deferred(m) => assert!(m.contains(why), "{mode:?}: {m}"),
            v => panic!("{mode:?}: {v:?}"),
        }
    }
    env.stack.capacity.set_answer(AnswerMode::Ok);
    // A wrong key is refused by the API, and the key is never echoed.
    let wrong = gate(&env, "not-the-key");
    match wrong
        .check(&env.repository, family, chrono::Utc::now())
        .await
    {
        Verdict::Deferred(m) => {
            assert!(m.contains("401"), "{m}");
            assert!(!m.contains("not-the-key"), "{m}");
        }
        v => panic!("{v:?}"),
    }

    // Through the engine: unreachable means deferred, never dispatched.
    env.stack.capacity.set_answer(AnswerMode::Unreachable);
    let target = env.target(KEY).await;
    let journal = MemoryJournal::new();
    let mut rec = open(&env, &journal, &target).await;
    drive_until(&env, &journal, &mut rec, |_| false).await;
    deferred(&rec, Phase::Resolve, "capacity API unreachable");
    assert_eq!(env.dispatches().await, 0);
}

#[tokio::test]
async fn the_cluster_mapping_can_be_overridden() {
    let mut env = gated_env().await;
    let mut g = gate(&env, CAPACITY_KEY);
    g.overrides
        .insert("b200".into(), vec!["b200-elsewhere".into()]);
    env.config.capacity = Some(Arc::new(g));
    env.stack
        .capacity
        .set_cluster("b200-elsewhere", ClusterState::Busy);
    let target = env.target(KEY).await;
    let journal = MemoryJournal::new();
    let mut rec = open(&env, &journal, &target).await;
    drive_until(&env, &journal, &mut rec, |_| false).await;
    deferred(
        &rec,
        Phase::Resolve,
        "cluster b200-elsewhere has no idle node",
    );
}

/// The demo plus a b300 twin of `demo-fp4-gb200-dynamo-vllm-disagg` that
/// shares its 1p1d recipe: the two form one family group, bumped together,
/// on different clusters (`gb200-demo`, `b300-demo`).
async fn group_env() -> (Harness, tempfile::TempDir) {
    let seed = tempfile::tempdir().expect("tempdir");
    let demo = Path::new(crate::support::REPO_ROOT).join("configs/demo");
    crate::support::copy_tree(&demo, seed.path());
    let master = seed.path().join("configs/nvidia-master.yaml");
    let mut text = std::fs::read_to_string(&master).expect("master");
    text.push_str(
        "\ndemo-fp4-b300-dynamo-vllm-disagg:\n  image: vllm/vllm-openai:v0.25.0\n  model: demo/Demo-V4\n  \
         model-prefix: demo\n  runner: b300\n  precision: fp4\n  framework: dynamo-vllm\n  \
         multinode: true\n  disagg: true\n  scenarios:\n    fixed-seq-len:\n    - isl: 8192\n      \
         osl: 1024\n      search-space:\n      - conc-list: [32]\n        prefill:\n          \
         num-worker: 1\n          tp: 8\n          ep: 8\n          dp-attn: true\n          \
         additional-settings:\n          - \"CONFIG_FILE=recipes/vllm/demo-model/disagg-gb200-1p1d.yaml\"\n        \
         decode:\n          num-worker: 1\n          tp: 8\n          ep: 8\n          dp-attn: true\n",
    );
    std::fs::write(&master, text).expect("write");
    let mut env = Harness::demo().seed_dir(seed.path()).start().await;
    env.config.capacity = Some(Arc::new(gate(&env, CAPACITY_KEY)));
    (env, seed)
}

#[tokio::test]
async fn a_family_group_checks_the_clusters_of_every_member_not_only_the_first() {
    const FIRST: &str = "demo-fp4-gb200-dynamo-vllm-disagg";
    const TWIN: &str = "demo-fp4-b300-dynamo-vllm-disagg";
    let (env, _seed) = group_env().await;
    let group = env
        .repository
        .groups()
        .iter()
        .find(|g| g.families.iter().any(|f| f.ends_with(FIRST)))
        .expect("the two share a recipe: one group");
    assert!(
        group.families.iter().any(|f| f.ends_with(TWIN)),
        "{group:?}"
    );
    // The first member's cluster has room; the twin's is busy.
    env.stack
        .capacity
        .set_cluster("gb200-demo", ClusterState::Idle);
    env.stack
        .capacity
        .set_cluster("b300-demo", ClusterState::Busy);
    let target = env.target(FIRST).await;
    let journal = MemoryJournal::new();
    let mut rec = open(&env, &journal, &target).await;
    drive_until(&env, &journal, &mut rec, |_| false).await;
    deferred(&rec, Phase::Resolve, &format!("group member {TWIN}"));
    deferred(&rec, Phase::Resolve, "cluster b300-demo has no idle node");
    assert!(env.claims().await.is_empty(), "no claim");
    assert_eq!(env.dispatches().await, 0, "no GPU work");

    // Both have room: the group is claimed and its smoke dispatched.
    env.stack
        .capacity
        .set_cluster("b300-demo", ClusterState::Idle);
    let mut rec = open(&env, &journal, &target).await;
    drive_until(&env, &journal, &mut rec, |r| {
        r.attempts.first().is_some_and(|a| a.run.is_some())
    })
    .await;
    assert!(rec.ending.is_none(), "{rec:#?}");
    assert_eq!(env.dispatches().await, 1);
}
