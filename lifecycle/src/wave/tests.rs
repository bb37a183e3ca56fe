//! Whole waves over the [`MemoryForge`], a [`MemoryJournal`] and a
//! [`ManualClock`]: no HTTP, no sleeps. The demo repository
//! (`configs/demo/`, Klaud's own small fixture) is the base checkout. The
//! plans here start nothing new (`max_candidates = 0`), so no registry is
//! asked: the candidates come from the journal and from claims.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{NaiveDate, TimeDelta, TimeZone, Utc};
use klaud_claims::{
    Acquire, CandidateId, ClaimBook, ClaimCandidate, Claimant, Clock, CommitSha, RunCompletion,
    RunCompletionError,
};
use klaud_planner::identity::candidate_id;
use klaud_planner::image::ImageRef;
use klaud_planner::plan::PlanOptions;
use klaud_planner::registry::{RegistryClient, RegistryConfig};
use klaud_planner::repo::{RepoOptions, Repository};

use super::*;
use crate::baseline::{Fetched, SourceError};
use crate::commands::reply_marker;
use crate::engine::{ManualClock, MemoryForge, MemoryJournal};

const REPO: &str = "demo/benchmarks";
const BOT: &str = "Klaud-Cold";
const FAMILY: &str = "configs/nvidia-master.yaml:demo-fp4-b200-sglang";
const IMAGE: &str = "lmsysorg/sglang:v0.5.17-cu130";

fn demo_root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/demo"))
}

/// A baseline API that is down (the engine reports n/a and goes on).
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

/// The base commit is the demo repository pushed to the memory forge's
/// `main`; Klaud's branches are read back from the forge.
struct DemoBase<'a> {
    forge: &'a MemoryForge,
    sha: CommitSha,
}

#[async_trait]
impl BaseSource for DemoBase<'_> {
    async fn base(&self, _: &str, options: &RepoOptions) -> Result<BaseCheckout, WaveFailure> {
        let repository = Repository::open_with(demo_root(), options)
            .map_err(|e| WaveFailure::Port(Box::new(e)))?;
        Ok(BaseCheckout {
            sha: self.sha.clone(),
            repository,
            keep: Box::new(()),
        })
    }

    async fn branch_file(&self, branch: &str, path: &str) -> Result<Option<Vec<u8>>, WaveFailure> {
        self.forge
            .read_file(path, branch)
            .await
            .map_err(|e| WaveFailure::Port(Box::new(e)))
    }
}

/// Nobody else has a pull request open.
struct NoPulls;

#[async_trait]
impl PullSource for NoPulls {
    async fn open_pulls(&self, _: &Repository, _: &str) -> Result<OpenPulls, WaveFailure> {
        Ok(OpenPulls::default())
    }
}

/// Old helpers' runs are unknown (only leased claims are taken over).
struct NoRuns;

#[async_trait]
impl RunCompletion for NoRuns {
    async fn run_completed(&self, _: u64) -> Result<Option<bool>, RunCompletionError> {
        Ok(None)
    }
}

struct World {
    forge: MemoryForge,
    journal: MemoryJournal,
    clock: ManualClock,
    config: EngineConfig,
    registry: RegistryClient,
    base: CommitSha,
    target: Target,
}

fn claimant() -> Claimant {
    Claimant::new(uuid::Uuid::from_u128(1))
}

impl World {
    async fn new() -> Self {
        let mut config = EngineConfig::new(7);
        // The baseline API is down; readiness is not what these test.
        config.require_baseline = false;
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
        let repository = Repository::open(demo_root()).expect("demo repository");
        let family = repository.family(FAMILY).expect("family");
        let id = candidate_id(
            &family.id,
            &ImageRef::parse(IMAGE).expect("image").normalized(),
        );
        let target = Target {
            family: family.family.clone(),
            candidate: CandidateId::new(&id).expect("candidate id"),
            image: IMAGE.into(),
            revision: None,
            clock: None,
            not_release_reason: None,
            upstream: None,
            versions: None,
            variant: None,
        };
        Self {
            forge,
            journal: MemoryJournal::new(),
            clock: ManualClock::new(Utc.with_ymd_and_hms(2026, 9, 1, 0, 0, 0).unwrap()),
            config,
            registry: RegistryClient::new(RegistryConfig::default()).expect("registry"),
            base,
            target,
        }
    }

    /// Runs one wave that starts nothing new from the plan.
    async fn wave(&self) -> WaveSummary {
        let base = DemoBase {
            forge: &self.forge,
            sha: self.base.clone(),
        };
        let ports = WavePorts {
            forge: &self.forge,
            journal: &self.journal,
            clock: &self.clock,
            runs: &NoRuns,
            registry: &self.registry,
            baseline: &NoBaseline,
            repair: None,
            base: &base,
            pulls: &NoPulls,
            upstream: None,
            plans: None,
            retries: Some(Retries {
                journal: &self.journal,
                clock: &self.clock,
            }),
            observer: None,
        };
        let mut plan = PlanOptions::new(self.clock.now());
        plan.max_candidates = 0;
        let options = WaveSettings {
            claimant: claimant(),
            engine: self.config.clone(),
            plan,
            poll: Duration::ZERO,
            wait: Duration::ZERO,
            cooldown: Duration::from_secs(3600),
            stop: None,
        };
        Wave::new(ports, options).run().await.expect("wave")
    }

    /// The candidate as a journal record at its first step (what a wave
    /// that planned it leaves behind when it stops before claiming).
    async fn journaled(&self) {
        let repository = Repository::open(demo_root()).expect("demo repository");
        let engine = Engine::new(
            &self.forge,
            &self.journal,
            &self.clock,
            claimant(),
            &NoBaseline,
            &repository,
            self.base.clone(),
            &self.config,
        );
        let rec = engine.open_record(&self.target).await.expect("record");
        assert_eq!(rec.step, Step::Claim);
        self.journal.save(&rec).await.expect("save");
    }

    async fn record(&self) -> CandidateRecord {
        self.journal
            .load(self.target.candidate.as_str())
            .await
            .expect("journal")
            .expect("record")
    }

    fn count_writes(&self, prefix: &str) -> usize {
        self.forge
            .writes()
            .iter()
            .filter(|w| w.starts_with(prefix))
            .count()
    }
}

#[tokio::test]
async fn a_wave_claims_a_journaled_candidate_and_drives_it_to_its_draft_pr_once() {
    let w = World::new().await;
    w.journaled().await;
    let summary = w.wave().await;
    assert_eq!(summary.base, w.base);
    assert_eq!(summary.candidates.len(), 1, "{summary:#?}");
    let c = &summary.candidates[0];
    assert_eq!(c.candidate, w.target.candidate.as_str());
    assert_eq!(c.outcome, None);
    assert_eq!(c.phase, "smoke");
    let pulls = w.forge.pulls();
    assert_eq!(pulls.len(), 1);
    assert!(pulls[0].state.is_open() && pulls[0].draft);
    assert_eq!(c.pull_request.as_deref(), Some(pulls[0].html_url.as_str()));
    assert_eq!(c.runs.len(), 1, "the smoke is dispatched");
    let book = ClaimBook::new(w.forge.refs(), &w.clock, claimant());
    let claims = book.list_claims().await.expect("claims");
    assert_eq!(claims.len(), 1);
    assert!(
        book.adopt(&claims[0]).is_some(),
        "the claim is this instance's"
    );

    // The next wave resumes: nothing is opened or dispatched again.
    let again = w.wave().await;
    assert_eq!(again.candidates.len(), 1);
    assert_eq!(w.forge.pulls().len(), 1);
    assert_eq!(w.count_writes("open pull"), 1);
    assert_eq!(w.count_writes("dispatch"), 1);
}

#[tokio::test]
async fn a_stop_is_answered_once_before_driving_and_a_reader_is_refused() {
    let w = World::new().await;
    w.journaled().await;
    w.wave().await;
    let pr = w.record().await.pull.expect("pull");
    w.forge.set_permission("maintainer", "write");
    w.forge.set_permission("reader", "read");
    let refused = w
        .forge
        .comment_as("reader", pr, "/klaud stop")
        .expect("comment");
    let stop = w
        .forge
        .comment_as("maintainer", pr, "/klaud stop no GPUs this week")
        .expect("comment");

    let summary = w.wave().await;
    let answered: Vec<(u64, bool)> = summary
        .answered
        .iter()
        .map(|a| (a.comment, a.allowed))
        .collect();
    assert_eq!(answered, vec![(refused, false), (stop, true)]);
    let rec = w.record().await;
    assert_eq!(rec.step, Step::Done);
    let ending = rec.ending.expect("ending");
    assert_eq!(ending.outcome, Outcome::Handoff);
    assert!(ending.message.contains("no GPUs this week"), "{ending:?}");
    let comments = w.forge.list_comments(pr).await.expect("comments");
    let replies = |id: u64| {
        comments
            .iter()
            .filter(|c| c.body.starts_with(&reply_marker(id)))
            .count()
    };
    assert_eq!(replies(refused), 1);
    assert_eq!(replies(stop), 1);
    assert!(
        comments
            .iter()
            .any(|c| c.body.starts_with(&reply_marker(refused)) && c.body.contains("Refused")),
        "{comments:#?}"
    );
    // Stopped: only the claim was released, the PR is left to people.
    assert!(w.forge.pulls()[0].state.is_open());
    let book = ClaimBook::new(w.forge.refs(), &w.clock, claimant());
    assert!(book.list_claims().await.expect("claims").is_empty());

    // Answered once: the next wave (a recently finished candidate's PR is
    // still read for commands) posts nothing more.
    let later = w.wave().await;
    assert!(later.answered.is_empty(), "{later:#?}");
    let comments = w.forge.list_comments(pr).await.expect("comments");
    assert_eq!(
        comments
            .iter()
            .filter(|c| c.body.starts_with("<!-- klaud-reply:"))
            .count(),
        2
    );

    // On the finished candidate a retry is recorded in the journal and
    // lifts the family's cooldown.
    assert!(!crate::commands::retry_requested(&w.journal, &w.record().await).await);
    let retry = w
        .forge
        .comment_as("maintainer", pr, "/klaud retry new driver")
        .expect("comment");
    let summary = w.wave().await;
    assert_eq!(summary.answered.len(), 1, "{summary:#?}");
    assert_eq!(summary.answered[0].verbs, vec!["retry".to_owned()]);
    let comments = w.forge.list_comments(pr).await.expect("comments");
    assert!(
        comments
            .iter()
            .any(|c| c.body.starts_with(&reply_marker(retry)) && c.body.contains("Retry recorded")),
        "{comments:#?}"
    );
    let request = w
        .journal
        .retry_request(w.target.candidate.family().as_str())
        .await
        .expect("journal")
        .expect("request");
    assert_eq!(request.by, "maintainer");
    assert_eq!(request.reason, "new driver");
    assert!(crate::commands::retry_requested(&w.journal, &w.record().await).await);
}

#[tokio::test]
async fn a_wave_recovers_a_claim_whose_lease_ran_out() {
    let w = World::new().await;
    // Another instance claimed the family and died.
    let dead = Claimant::new(uuid::Uuid::from_u128(2));
    let book = ClaimBook::new(w.forge.refs(), &w.clock, dead);
    let candidate = ClaimCandidate::new(
        w.base.clone(),
        w.target.family.clone(),
        w.target.candidate.clone(),
    );
    let taken = book
        .acquire(
            &w.target.candidate.family(),
            vec![candidate],
            &w.base,
            41,
            TimeDelta::minutes(10),
        )
        .await
        .expect("acquire");
    assert!(matches!(taken, Acquire::Won(_)), "{taken:?}");

    // While its lease runs, the claim is left alone and occupies the family.
    let early = w.wave().await;
    assert!(early.candidates.is_empty(), "{early:#?}");
    assert_eq!(book.list_claims().await.expect("claims").len(), 1);

    w.clock.advance(TimeDelta::hours(1));
    let summary = w.wave().await;
    assert_eq!(summary.candidates.len(), 1, "{summary:#?}");
    let c = &summary.candidates[0];
    assert_eq!(c.candidate, w.target.candidate.as_str());
    assert_eq!(c.outcome.as_deref(), Some("unexpected-error"));
    let rec = w.record().await;
    assert_eq!(rec.step, Step::Done);
    assert!(
        book.list_claims().await.expect("claims").is_empty(),
        "the family is free again"
    );
    // Its recovery lease is gone too.
    assert!(
        book.list_recovery_leases()
            .await
            .expect("leases")
            .is_empty()
    );
}
