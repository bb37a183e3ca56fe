//! Safety under takeover and restarts, through the real engine,
//! the octocrab forge and the sandbox: a writer stalled past its lease
//! never writes after another instance recovered its candidate, and an
//! interrupted cleanup resumed with an empty store finishes it for real.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use klaud_claims::{ClaimBook, Claimant, ManualClock, SystemClock, Takeover};
use klaud_lifecycle::engine::{
    CandidateRecord, EngineError, ForgeError, Journal, JournalError, MemoryJournal, Progress, Step,
};
use klaud_lifecycle::model::Outcome;
use klaud_lifecycle::report::{MarkerKey, find_record, parse_receipt};
use klaud_service::GithubLifecycle;
use tokio::sync::Notify;

use crate::lifecycle_e2e::VALIDATED_SCRIPT;
use crate::support::{Harness, REPO};

const KEY: &str = "demo-fp4-b200-sglang";

fn a() -> Claimant {
    Claimant::new(uuid::Uuid::from_u128(0xa))
}

fn b() -> Claimant {
    Claimant::new(uuid::Uuid::from_u128(0xb))
}

/// A journal that, once armed, stalls the save that records the intent to
/// write (`intent` starts with the armed prefix) until released: the
/// moment between the ownership check and the write.
struct StallingJournal {
    inner: MemoryJournal,
    armed: Mutex<Option<String>>,
    stalled: Notify,
    resume: Notify,
}

#[async_trait]
impl Journal for StallingJournal {
    async fn save(&self, record: &CandidateRecord) -> Result<(), JournalError> {
        self.inner.save(record).await?;
        let hit = {
            let mut armed = self.armed.lock().unwrap();
            let hit = armed.as_deref().is_some_and(|p| {
                record
                    .intent
                    .as_ref()
                    .is_some_and(|i| i.to_string().starts_with(p))
            });
            if hit {
                *armed = None;
            }
            hit
        };
        if hit {
            self.stalled.notify_one();
            self.resume.notified().await;
        }
        Ok(())
    }
    async fn load(&self, candidate: &str) -> Result<Option<CandidateRecord>, JournalError> {
        self.inner.load(candidate).await
    }
    async fn list(&self) -> Result<Vec<CandidateRecord>, JournalError> {
        self.inner.list().await
    }
}

/// The bodies of the PR's comments after the first receipt.
fn after_receipt(bodies: &[String]) -> Vec<String> {
    let at = bodies
        .iter()
        .position(|b| {
            find_record(b)
                .ok()
                .flatten()
                .is_some_and(|f| matches!(f.key, MarkerKey::Outcome { .. }))
        })
        .expect("a receipt");
    bodies[at + 1..].to_vec()
}

/// Instance A stalls just before `write` (an intent prefix); meanwhile its
/// lease runs out and instance B takes the claim over and recovers the
/// candidate. When A wakes, the write must not be sent.
async fn stalled_writer(stop_before: fn(&CandidateRecord) -> bool, write: &str) {
    let mut env = Harness::demo().script(VALIDATED_SCRIPT).start().await;
    env.config.lease = chrono::TimeDelta::hours(1);
    let clock = ManualClock::new(chrono::Utc::now());
    let lifecycle = GithubLifecycle::new(&env.forge);
    let journal = StallingJournal {
        inner: MemoryJournal::new(),
        armed: Mutex::new(None),
        stalled: Notify::new(),
        resume: Notify::new(),
    };
    let engine_a = env.engine_as(&lifecycle, &journal, &clock, a(), &env.config);
    let target = env.target(KEY).await;
    let mut rec = engine_a.open_record(&target).await.expect("record");
    let started = Instant::now();
    while !stop_before(&rec) {
        assert!(started.elapsed() < Duration::from_secs(60), "{rec:#?}");
        assert_ne!(rec.step, Step::Done, "{rec:#?}");
        if let Progress::Waiting(_) = engine_a.step(&mut rec).await.expect("step") {
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
    }
    let number = rec.pull.expect("a PR");
    *journal.armed.lock().unwrap() = Some(write.to_owned());

    let b_journal = MemoryJournal::new();
    let (family, candidate, owner_run) = (rec.family.clone(), rec.candidate.clone(), rec.owner_run);
    let recover = async {
        journal.stalled.notified().await;
        let dispatches = env.dispatches().await;
        // A is stuck; its lease runs out and B recovers the candidate.
        clock.advance(chrono::TimeDelta::hours(1) + chrono::TimeDelta::minutes(1));
        let book = ClaimBook::new(&env.forge, &clock, b());
        let runs = klaud_github::ForgeRunCompletion::new(&env.forge);
        let cid = candidate.clone();
        let held = match book
            .takeover(&cid.family(), 777, env.config.lease, &runs)
            .await
            .expect("takeover")
        {
            Takeover::Took { held, .. } => held,
            other => panic!("{other:?}"),
        };
        let engine_b = env.engine_as(&lifecycle, &b_journal, &clock, b(), &env.config);
        let mut orphan = engine_b
            .recover(&family, &cid, &held, owner_run)
            .await
            .expect("recover");
        let done = engine_b.drive(&mut orphan, 50).await.expect("recovery");
        assert!(matches!(done, Progress::Done(_)), "{done:?}");
        journal.resume.notify_one();
        dispatches
    };
    // A steps on until the armed write: the step that makes it may come
    // after steps that only wait (a run still in progress).
    let write_a = async {
        loop {
            match engine_a.step(&mut rec).await {
                Ok(Progress::Waiting(_)) => tokio::time::sleep(Duration::from_millis(15)).await,
                Ok(Progress::Advanced(_)) => {}
                other => return other,
            }
        }
    };
    let (written, dispatches) = tokio::join!(write_a, recover);
    match written {
        Err(EngineError::Forge(ForgeError::Proof(e))) => {
            assert!(e.to_string().contains("of lease left"), "{e}");
        }
        other => panic!("the stalled write was not refused: {other:?}"),
    }
    // A goes on: it finds its claim lost and writes nothing more.
    for _ in 0..5 {
        match engine_a.step(&mut rec).await {
            Ok(Progress::Done(_)) => break,
            Ok(_) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(
        env.dispatches().await,
        dispatches,
        "no dispatch after the takeover"
    );
    let bodies = env.bodies(number).await;
    assert_eq!(
        after_receipt(&bodies),
        Vec::<String>::new(),
        "nothing after B's receipt"
    );
    let receipt = bodies
        .iter()
        .find_map(|b| {
            let f = find_record(b).ok().flatten()?;
            parse_receipt(&f).ok()
        })
        .expect("receipt");
    assert_eq!(receipt.result.outcome(), Outcome::UnexpectedError);
}

#[tokio::test]
async fn a_writer_stalled_past_its_lease_never_dispatches_after_a_recovery() {
    stalled_writer(|r| r.step == Step::Smoke, "dispatch").await;
}

#[tokio::test]
async fn a_writer_stalled_past_its_lease_never_comments_after_a_recovery() {
    // The smoke's report is the first comment (the baseline is in the PR
    // body only).
    stalled_writer(|r| r.step == Step::Smoke, "comment").await;
}

/// The cleanup marker is posted, then the instance dies with its store:
/// the smoke still runs, the branch is still there. A fresh store resumes
/// from GitHub alone.
#[tokio::test]
async fn cleanup_resumed_on_a_fresh_store_cancels_runs_deletes_the_branch_and_names_them() {
    // No CI: the smoke stays queued.
    let env = Harness::demo().start().await;
    let target = env.target(KEY).await;
    let clock = SystemClock;
    let lifecycle = GithubLifecycle::new(&env.forge);
    let journal = StallingJournal {
        inner: MemoryJournal::new(),
        armed: Mutex::new(None),
        stalled: Notify::new(),
        resume: Notify::new(),
    };
    let engine = env.engine_as(&lifecycle, &journal, &clock, a(), &env.config);
    let mut rec = engine.open_record(&target).await.expect("record");
    let started = Instant::now();
    while rec.attempts.first().is_none_or(|a| a.run.is_none()) {
        assert!(started.elapsed() < Duration::from_secs(60), "{rec:#?}");
        if let Progress::Waiting(_) = engine.step(&mut rec).await.expect("step") {
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
    }
    let run = rec.attempts[0].run.clone().unwrap().id;
    let head = rec.head.clone().expect("head");
    let number = rec.pull.unwrap();
    // An operator ends it; the cleanup marker goes up, and the instance
    // dies with its store just before cancelling the run.
    engine
        .end_now(&mut rec, Outcome::Failed, "stopped by a test".into(), false)
        .await
        .expect("end");
    *journal.armed.lock().unwrap() = Some("cancel".into());
    tokio::select! {
        p = engine.step(&mut rec) => panic!("the step was to crash: {p:?}"),
        () = journal.stalled.notified() => {}
    }
    drop(rec);
    assert!(
        env.bodies(number)
            .await
            .iter()
            .any(|b| b.contains("<!-- klaud-cleanup:")),
        "the cleanup marker is up"
    );

    let fresh = MemoryJournal::new();
    let engine = env.engine_as(&lifecycle, &fresh, &clock, a(), &env.config);
    let mut rec = engine.open_record(&target).await.expect("record");
    assert_eq!(rec.step, Step::Finish, "resumed as a cleanup: {rec:#?}");
    let done = engine.drive(&mut rec, 50).await.expect("drive");
    assert!(matches!(done, Progress::Done(_)), "{done:?}");

    // GitHub cancels asynchronously: the run ends a moment after the 202.
    let live = crate::support::run_once_completed(&env.forge, run).await;
    assert_eq!(
        live.conclusion.as_ref().map(|c| c.as_str()),
        Some("cancelled"),
        "the smoke was cancelled"
    );
    assert!(
        env.stack.state().ref_sha(REPO, &rec.branch).await.is_none(),
        "the branch is deleted"
    );
    assert!(!env.pull(number).await.state.is_open(), "the PR is closed");
    let receipt = env
        .bodies(number)
        .await
        .iter()
        .find_map(|b| {
            let f = find_record(b).ok().flatten()?;
            parse_receipt(&f).ok()
        })
        .expect("receipt");
    assert_eq!(
        receipt.head.as_deref(),
        Some(head.as_str()),
        "the real head"
    );
    let ids: Vec<u64> = receipt.result.runs().iter().map(|r| r.id).collect();
    assert_eq!(ids, vec![run], "the real runs");
    assert!(env.claims().await.is_empty(), "released");
}
