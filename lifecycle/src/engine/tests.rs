//! Each engine step over the [`MemoryForge`], a [`MemoryJournal`] and a
//! [`ManualClock`]: no HTTP, no sleeps. The demo repository
//! (`configs/demo/`, Klaud's own small fixture) is the base checkout.

use std::path::Path;

use async_trait::async_trait;
use chrono::{NaiveDate, TimeZone, Utc};
use klaud_claims::{CandidateId, Claimant};
use klaud_planner::identity::candidate_id;
use klaud_planner::image::ImageRef;
use klaud_planner::repo::Repository;

use super::*;
use crate::baseline::{BaselineSource, Fetched, SourceError};
use crate::model::Outcome;

const REPO: &str = "demo/benchmarks";
const BOT: &str = "Klaud-Cold";
const FAMILY: &str = "configs/nvidia-master.yaml:demo-fp4-b200-sglang";
const IMAGE: &str = "lmsysorg/sglang:v0.5.17-cu130";

/// A baseline API that is down: the engine reports the baseline as n/a and
/// goes on, which is all these tests need from it.
struct NoBaseline;

#[async_trait]
impl BaselineSource for NoBaseline {
    async fn benchmarks(&self, _: &str, _: NaiveDate) -> Result<Fetched, SourceError> {
        Err(SourceError {
            url: "memory://baseline".into(),
            reason: "down in this test".into(),
        })
    }
    async fn workflow_info(&self, _: NaiveDate) -> Result<Fetched, SourceError> {
        Err(SourceError {
            url: "memory://baseline".into(),
            reason: "down in this test".into(),
        })
    }
}

struct World {
    forge: MemoryForge,
    journal: MemoryJournal,
    clock: ManualClock,
    repository: Repository,
    base: String,
    config: EngineConfig,
    target: Target,
}

fn demo_root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/demo"))
}

impl World {
    async fn new() -> Self {
        let repository = Repository::open(demo_root()).expect("demo repository");
        let config = EngineConfig::new(7);
        let forge =
            MemoryForge::new(REPO, BOT).with_sweep(&config.sweep_workflow, &config.managed_labels);
        let mut files = Vec::new();
        for path in [
            "configs/nvidia-master.yaml",
            "configs/amd-master.yaml",
            "perf-changelog.yaml",
        ] {
            files.push((path, std::fs::read(demo_root().join(path)).expect(path)));
        }
        let refs: Vec<(&str, &[u8])> = files.iter().map(|(p, b)| (*p, b.as_slice())).collect();
        let base = forge.push("main", &refs, "seed").await.expect("seed");
        let family = repository.family(FAMILY).expect("family");
        let image = ImageRef::parse(IMAGE).expect("image");
        let id = candidate_id(&family.id, &image.normalized());
        let target = Target {
            family: FAMILY.into(),
            candidate: CandidateId::new(&id).expect("candidate id"),
            image: IMAGE.into(),
            revision: None,
            clock: None,
            not_release_reason: None,
            upstream: None,
        };
        Self {
            forge,
            journal: MemoryJournal::new(),
            clock: ManualClock::new(Utc.with_ymd_and_hms(2026, 9, 1, 0, 0, 0).unwrap()),
            repository,
            base,
            config,
            target,
        }
    }

    fn engine(&self) -> Engine<'_> {
        Engine::new(
            &self.forge,
            &self.journal,
            &self.clock,
            Claimant::new(uuid::Uuid::from_u128(1)),
            &NoBaseline,
            &self.repository,
            self.base.clone(),
            &self.config,
        )
    }

    /// Drives the candidate until it waits; the record and the progress.
    async fn until_waiting(&self, rec: &mut CandidateRecord) -> Progress {
        self.engine().drive(rec, 50).await.expect("drive")
    }

    /// The smoke run of the current attempt.
    fn smoke_run(&self, rec: &CandidateRecord) -> u64 {
        rec.attempts
            .last()
            .and_then(|a| a.run.as_ref())
            .expect("run")
            .id
    }
}

async fn started() -> (World, CandidateRecord) {
    let w = World::new().await;
    let mut rec = w.engine().open_record(&w.target).await.expect("record");
    let p = w.until_waiting(&mut rec).await;
    assert!(matches!(p, Progress::Waiting(_)), "{p:?}");
    (w, rec)
}

#[tokio::test]
async fn prepare_opens_a_draft_pull_request_with_the_bump_and_dispatches_the_smoke() {
    let (w, rec) = started().await;
    assert_eq!(rec.step, Step::Smoke);
    let pulls = w.forge.pulls();
    assert_eq!(pulls.len(), 1);
    let pull = &pulls[0];
    assert!(pull.open && pull.draft);
    assert_eq!(pull.head_ref, branch_name(rec.candidate.as_str()));
    let master = w
        .forge
        .read_file("configs/nvidia-master.yaml", &pull.head_ref)
        .await
        .expect("read")
        .expect("file");
    let master = String::from_utf8(master).expect("utf-8");
    assert!(master.contains(IMAGE), "{master}");
    // The baseline was frozen into the body (n/a: the API is down).
    assert!(pull.body.contains("klaud-baseline"), "{}", pull.body);
    let runs = w.forge.runs();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].event, "workflow_dispatch");
    assert_eq!(
        runs[0].title,
        format!("e2e Test - {}", smoke_test_name(7, rec.candidate.as_str()))
    );
    // As on GitHub, the dispatched run sits on the tip of the dispatched
    // branch, not on the candidate head it benchmarks.
    assert_ne!(Some(runs[0].head_sha.as_str()), rec.head.as_deref());
    assert!(runs[0].pull_requests.is_empty());
    // Nothing was done twice.
    let writes = w.forge.writes();
    assert_eq!(
        writes.iter().filter(|x| x.starts_with("open pull")).count(),
        1
    );
    assert_eq!(
        writes.iter().filter(|x| x.starts_with("dispatch")).count(),
        1
    );
}

#[tokio::test]
async fn a_passed_smoke_is_reported_then_changelog_sweep_label_and_a_validated_finish() {
    let (w, mut rec) = started().await;
    let run = w.smoke_run(&rec);
    // While the run goes, the engine only waits.
    w.forge.start_run(run).expect("start");
    let p = w.until_waiting(&mut rec).await;
    assert!(matches!(p, Progress::Waiting(_)), "{p:?}");
    w.forge
        .complete_run(run, "success", Vec::new())
        .expect("complete");
    let p = w.until_waiting(&mut rec).await;
    assert!(matches!(p, Progress::Waiting(_)), "{p:?}");
    assert_eq!(rec.step, Step::Sweep);
    let number = rec.pull.expect("pull");
    let pull = w.forge.get_pull(number).await.expect("pull");
    assert!(
        pull.labels.contains(&w.config.sweep_label),
        "{:?}",
        pull.labels
    );
    assert!(pull.draft, "still a draft while the sweep runs");
    let changelog = w
        .forge
        .read_file("perf-changelog.yaml", &pull.head_ref)
        .await
        .expect("read")
        .expect("changelog");
    let changelog = String::from_utf8(changelog).expect("utf-8");
    assert!(
        changelog.contains(&format!("/pull/{number}")),
        "{changelog}"
    );
    let comments = w.forge.list_comments(number).await.expect("comments");
    assert!(!comments.is_empty(), "the smoke report is posted");

    let sweep = w
        .forge
        .runs()
        .into_iter()
        .find(|r| r.event == "pull_request")
        .expect("the sweep label started the sweep");
    assert_eq!(Some(sweep.head_sha.as_str()), rec.head.as_deref());
    w.forge
        .complete_run(sweep.id, "success", Vec::new())
        .expect("complete");
    let p = w.until_waiting(&mut rec).await;
    let Progress::Done(Some(ending)) = p else {
        panic!("{p:?}")
    };
    assert_eq!(ending.outcome, Outcome::Validated, "{ending:?}");
    let pull = w.forge.get_pull(number).await.expect("pull");
    assert!(
        pull.open && !pull.draft,
        "a validated PR stays open, ready for review"
    );
}

#[tokio::test]
async fn an_infrastructure_failure_is_retried_without_counting_as_a_repair() {
    let (w, mut rec) = started().await;
    let run = w.smoke_run(&rec);
    w.forge
        .complete_run(run, "startup_failure", Vec::new())
        .expect("complete");
    let p = w.until_waiting(&mut rec).await;
    assert!(matches!(p, Progress::Waiting(_)), "{p:?}");
    assert_eq!(rec.repairs, 0);
    let dispatches = w
        .forge
        .runs()
        .into_iter()
        .filter(|r| r.event == "workflow_dispatch")
        .count();
    assert_eq!(dispatches, 2, "one retry dispatched");
    assert_ne!(w.smoke_run(&rec), run);
}

#[tokio::test]
async fn a_failed_smoke_without_repair_cleans_up_and_releases_the_claim() {
    let (w, mut rec) = started().await;
    let run = w.smoke_run(&rec);
    w.forge
        .complete_run(run, "failure", Vec::new())
        .expect("complete");
    let p = w.until_waiting(&mut rec).await;
    let Progress::Done(Some(ending)) = p else {
        panic!("{p:?}")
    };
    assert_eq!(ending.outcome, Outcome::Failed, "{ending:?}");
    let number = rec.pull.expect("pull");
    let pull = w.forge.get_pull(number).await.expect("pull");
    assert!(!pull.open, "closed");
    assert!(
        w.forge
            .git()
            .ref_sha(&format!("refs/heads/{}", rec.branch))
            .is_none(),
        "the unchanged branch is deleted"
    );
    assert!(
        w.forge
            .git()
            .ref_names()
            .iter()
            .all(|r| !r.contains("klaud/claim-")),
        "the claim is released"
    );
}

/// After a handoff only Klaud's own claim is touched.
fn no_writes_since(w: &World, before: usize) {
    let writes = w.forge.writes();
    assert_eq!(writes.len(), before, "{:?}", &writes[before..]);
}

#[tokio::test]
async fn a_foreign_commit_is_a_handoff_that_writes_nothing() {
    let (w, mut rec) = started().await;
    let before = w.forge.writes().len();
    w.forge
        .push(&rec.branch, &[("fix.txt", b"mine\n")], "Maintainer fix")
        .await
        .expect("push");
    let run = w.smoke_run(&rec);
    w.forge
        .complete_run(run, "failure", Vec::new())
        .expect("complete");
    let p = w.until_waiting(&mut rec).await;
    let Progress::Done(Some(ending)) = p else {
        panic!("{p:?}")
    };
    assert_eq!(ending.outcome, Outcome::Handoff, "{ending:?}");
    assert!(
        ending.message.contains("foreign commit"),
        "{}",
        ending.message
    );
    no_writes_since(&w, before);
    assert!(
        w.forge
            .get_pull(rec.pull.expect("pull"))
            .await
            .expect("pull")
            .open
    );
}

#[tokio::test]
async fn the_handoff_label_is_a_handoff_that_writes_nothing() {
    let (w, mut rec) = started().await;
    let before = w.forge.writes().len();
    let number = rec.pull.expect("pull");
    w.forge
        .label_as_maintainer(number, HANDOFF_LABEL)
        .expect("label");
    let run = w.smoke_run(&rec);
    w.forge
        .complete_run(run, "success", Vec::new())
        .expect("complete");
    let p = w.until_waiting(&mut rec).await;
    let Progress::Done(Some(ending)) = p else {
        panic!("{p:?}")
    };
    assert_eq!(ending.outcome, Outcome::Handoff, "{ending:?}");
    no_writes_since(&w, before);
}

#[tokio::test]
async fn the_memory_forge_refuses_a_proof_for_another_pull_request() {
    let (w, rec) = started().await;
    let number = rec.pull.expect("pull");
    let held = rec.claim.as_ref().expect("claim").held().expect("held");
    let expect = Expectation {
        claim: &held,
        branch: Some((rec.branch.as_str(), rec.head.as_deref().expect("head"))),
        creates: None,
        pull: Some(number),
        run: None,
    };
    let proof = ownership::check(&w.forge, expect).await.expect("proof");
    let before = w.forge.writes().len();
    let err = w
        .forge
        .create_comment(&proof, number + 1, "elsewhere")
        .await
        .expect_err("another PR");
    assert!(matches!(err, ForgeError::Proof(_)), "{err:?}");
    let err = w
        .forge
        .cancel_run(&proof, w.smoke_run(&rec))
        .await
        .expect_err("a run the proof did not check");
    assert!(matches!(err, ForgeError::Proof(_)), "{err:?}");
    no_writes_since(&w, before);
    // The claim store hands out no way around the proof.
    let err = w
        .forge
        .refs()
        .delete_ref(&format!("refs/heads/{}", rec.branch))
        .await
        .expect_err("a branch through the claim store");
    assert!(err.to_string().contains("not a claim"), "{err}");
    // A reply permit allows a comment on its PR, after a handoff too.
    w.forge
        .label_as_maintainer(number, HANDOFF_LABEL)
        .expect("label");
    let permit = reply_permit(&w.forge, number)
        .await
        .expect("read")
        .expect("the bot's PR");
    w.forge.reply(&permit, "answer").await.expect("reply");
    assert_eq!(
        w.forge.writes().last().map(String::as_str),
        Some(&*format!("reply #{number}"))
    );
}
