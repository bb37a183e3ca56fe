//! Each engine step over the [`MemoryForge`], a [`MemoryJournal`] and a
//! [`ManualClock`]: no HTTP, no sleeps. The demo repository
//! (`configs/demo/`, Klaud's own small fixture) is the base checkout.

use std::path::Path;

use async_trait::async_trait;
use chrono::{NaiveDate, TimeZone, Utc};
use klaud_claims::{CandidateId, Claimant, CommitSha, PullNumber};
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
    base: CommitSha,
    config: EngineConfig,
    target: Target,
}

fn demo_root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/demo"))
}

impl World {
    async fn new() -> Self {
        let repository = Repository::open(demo_root()).expect("demo repository");
        let mut files = Vec::new();
        for path in [
            "configs/nvidia-master.yaml",
            "configs/amd-master.yaml",
            "perf-changelog.yaml",
        ] {
            files.push((
                path.to_owned(),
                std::fs::read(demo_root().join(path)).expect(path),
            ));
        }
        Self::seeded(repository, &files, FAMILY, IMAGE, EngineConfig::new(7)).await
    }

    /// A world whose base branch holds `files` (what `repository` was read
    /// from), with `family` to be moved to `image`.
    async fn seeded(
        repository: Repository,
        files: &[(String, Vec<u8>)],
        family: &str,
        image: &str,
        mut config: EngineConfig,
    ) -> Self {
        // The baseline API is down here; these tests are about the steps
        // after the baseline, not the readiness gate.
        config.require_baseline = false;
        let forge =
            MemoryForge::new(REPO, BOT).with_sweep(&config.sweep_workflow, &config.managed_labels);
        let refs: Vec<(&str, &[u8])> = files
            .iter()
            .map(|(p, b)| (p.as_str(), b.as_slice()))
            .collect();
        let base = forge.push("main", &refs, "seed").await.expect("seed");
        let found = repository.family(family).expect("family");
        let parsed = ImageRef::parse(image).expect("image");
        let id = candidate_id(&found.id, &parsed.normalized());
        let target = Target {
            family: found.family.clone(),
            candidate: CandidateId::new(&id).expect("candidate id"),
            image: image.into(),
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
    assert!(pull.state.is_open() && pull.draft);
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
    assert_eq!(runs[0].event, RunEvent::WorkflowDispatch);
    // The Actions tab names the family and the attempt; the candidate's
    // identity ends the title.
    assert_eq!(
        runs[0].title,
        format!(
            "e2e Test - {} · Initial smoke, repair 0/5 · {}",
            rec.key,
            smoke_test_name(7, rec.candidate.as_str())
        )
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

/// A smoke dispatched by a Klaud from before titles named the family: the
/// record lost the run (a crash between the dispatch and the save), and the
/// run is found again by its old title, not dispatched a second time; it
/// is watched and reported under its own title.
#[tokio::test]
async fn a_smoke_dispatched_under_the_legacy_title_is_found_not_dispatched_again() {
    let (w, mut rec) = started().await;
    let id = w.smoke_run(&rec);
    w.forge
        .retitle_run(
            id,
            &format!("e2e Test - {}", smoke_test_name(7, rec.candidate.as_str())),
        )
        .expect("run");
    let last = rec.attempts.len() - 1;
    rec.attempts[last].run = None;
    let p = w.until_waiting(&mut rec).await;
    assert!(matches!(p, Progress::Waiting(_)), "{p:?}");
    assert_eq!(rec.attempts[last].run.as_ref().map(|r| r.id), Some(id));
    let dispatches = w
        .forge
        .writes()
        .iter()
        .filter(|x| x.starts_with("dispatch"))
        .count();
    assert_eq!(dispatches, 1, "the GPUs are not spent twice");
    w.forge.start_run(id).expect("run");
    w.forge
        .complete_run(id, RunConclusion::Failure, Vec::new())
        .expect("run");
    let p = w.until_waiting(&mut rec).await;
    assert!(
        rec.attempts[last].reported,
        "the legacy run is reported: {p:?} {rec:#?}"
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
    // The step that added the label waits: GitHub starts the sweep a
    // moment after the label's event, so it is looked for next round.
    assert!(
        matches!(&p, Progress::Waiting(why) if why.contains("the label's event")),
        "{p:?}"
    );
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
        .find(|r| r.event == RunEvent::PullRequest)
        .expect("the sweep label started the sweep");
    assert_eq!(Some(sweep.head_sha.as_str()), rec.head.as_deref());
    w.forge
        .complete_run(sweep.id, "success", results_of(&rec, &[]))
        .expect("complete");
    let p = w.until_waiting(&mut rec).await;
    let Progress::Done(Some(ending)) = p else {
        panic!("{p:?}")
    };
    assert_eq!(ending.outcome, Outcome::Validated, "{ending:?}");
    let pull = w.forge.get_pull(number).await.expect("pull");
    assert!(
        pull.state.is_open() && !pull.draft,
        "a validated PR stays open, ready for review"
    );
}

/// A `results_bmk` artifact with one fixed-seq-len row per frozen point of
/// `rec` (decode-side parallelism for disaggregated points), but none for
/// the concurrencies in `leave_out`.
fn results_of(rec: &CandidateRecord, leave_out: &[u64]) -> Vec<(String, Vec<u8>)> {
    use std::io::Write;
    let frozen = rec.frozen.as_ref().expect("a frozen baseline");
    let rows: Vec<serde_json::Value> = frozen
        .baseline
        .points
        .iter()
        .filter(|p| !leave_out.contains(&p.point.conc))
        .map(|p| {
            let crate::baseline::Scenario::FixedSeqLen { isl, osl } = p.point.scenario else {
                panic!("the demo family is fixed-seq-len");
            };
            serde_json::json!({
                "hw": "b200", "conc": p.point.conc, "isl": isl, "osl": osl, "image": rec.image,
                "tp": p.point.decode.tp, "ep": p.point.decode.ep,
                "dp_attention": p.point.decode.dp_attn, "spec_decoding": p.point.spec_decoding,
                "disagg": p.point.prefill.is_some(), "tput_per_gpu": 100.0, "output_tput_per_gpu": 50.0,
                "mean_ttft": 0.1, "mean_tpot": 0.01,
            })
        })
        .collect();
    let mut out = std::io::Cursor::new(Vec::new());
    {
        let mut w = zip::ZipWriter::new(&mut out);
        w.start_file("agg_bmk.json", zip::write::SimpleFileOptions::default())
            .expect("start");
        w.write_all(serde_json::to_string(&rows).expect("json").as_bytes())
            .expect("write");
        w.finish().expect("finish");
    }
    vec![("results_bmk".to_owned(), out.into_inner())]
}

#[tokio::test]
async fn a_green_sweep_that_leaves_frozen_points_without_a_result_is_not_validated() {
    let (w, mut rec) = started().await;
    let run = w.smoke_run(&rec);
    w.forge
        .complete_run(run, "success", Vec::new())
        .expect("complete");
    w.until_waiting(&mut rec).await;
    assert_eq!(rec.step, Step::Sweep);
    let sweep = w
        .forge
        .runs()
        .into_iter()
        .find(|r| r.event == RunEvent::PullRequest)
        .expect("the sweep label started the sweep");
    w.forge
        .complete_run(sweep.id, "success", results_of(&rec, &[2, 16]))
        .expect("complete");
    let p = w.until_waiting(&mut rec).await;
    let Progress::Done(Some(ending)) = p else {
        panic!("{p:?}")
    };
    assert_eq!(ending.outcome, Outcome::Failed, "{ending:?}");
    assert!(
        ending.message.contains(
            "left 2 of the frozen baseline points without a result: 8k1k c2 TP4; 8k1k c16 TP4"
        ),
        "{}",
        ending.message
    );
    // The sweep's report names them too, and the PR is cleaned up.
    let number = rec.pull.expect("pull");
    let comments = w.forge.list_comments(number).await.expect("comments");
    assert!(
        comments.iter().any(|c| c
            .body
            .contains("check-final: 2 of the 6 frozen baseline points")),
        "no report names the missing points"
    );
    assert!(
        !w.forge
            .get_pull(number)
            .await
            .expect("pull")
            .state
            .is_open()
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
        .filter(|r| r.event == RunEvent::WorkflowDispatch)
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
    assert!(!pull.state.is_open(), "closed");
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

/// Nothing was written since `before` (claim refs aside).
fn no_writes_since(w: &World, before: usize) {
    let writes = w.forge.writes();
    assert_eq!(writes.len(), before, "{:?}", &writes[before..]);
}

/// After a handoff only Klaud's own claim is touched, and the receipt is
/// posted once as a reply (the one comment allowed on a PR Klaud let go of).
fn only_the_receipt_since(w: &World, before: usize) {
    let writes = w.forge.writes();
    let since = &writes[before..];
    assert!(
        since.len() == 1 && since[0].starts_with("reply"),
        "{since:?}"
    );
}

#[tokio::test]
async fn a_foreign_commit_is_a_handoff_that_writes_only_its_receipt() {
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
    only_the_receipt_since(&w, before);
    assert!(
        w.forge
            .get_pull(rec.pull.expect("pull"))
            .await
            .expect("pull")
            .state
            .is_open()
    );
}

#[tokio::test]
async fn the_handoff_label_is_a_handoff_that_writes_only_its_receipt() {
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
    only_the_receipt_since(&w, before);
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
        .create_comment(&proof, PullNumber::from(number.get() + 1), "elsewhere")
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
    let permit = reply_permit(&w.forge, number, None)
        .await
        .expect("read")
        .expect("the bot's PR");
    w.forge.reply(&permit, "answer").await.expect("reply");
    assert_eq!(
        w.forge.writes().last().map(String::as_str),
        Some(&*format!("reply #{number}"))
    );
}

const RECIPES: &str = "benchmarks/multi_node/srt-slurm-recipes";
const VLLM_OLD: &str = "vllm/vllm-openai:v0.25.0";
const VLLM_NEW: &str = "vllm/vllm-openai:v0.25.1";

fn group_master(key: &str, recipes: &[&str]) -> String {
    let mut text = format!(
        "{key}:\n  image: {VLLM_OLD}\n  model: demo/Model\n  model-prefix: demo\n  runner: gb200\n  precision: fp4\n  framework: dynamo-vllm\n  multinode: true\n  scenarios:\n    fixed-seq-len:\n    - isl: 1024\n      osl: 1024\n      search-space:\n      - additional-settings:\n"
    );
    for recipe in recipes {
        text.push_str(&format!("        - \"CONFIG_FILE=recipes/m/{recipe}\"\n"));
    }
    text
}

fn group_recipe(image: &str) -> Vec<u8> {
    format!("name: r\nmodel:\n  container: \"{image}\"\n").into_bytes()
}

/// Two families sharing `shared.yaml`, one of them also using a recipe that
/// runs another image: bumped as one, with the policy in `config.bump`.
async fn group_world(config: EngineConfig) -> (World, tempfile::TempDir) {
    let files: Vec<(String, Vec<u8>)> = vec![
        (
            "configs/x-master.yaml".into(),
            format!(
                "{}\n{}",
                group_master("fam-a", &["shared.yaml", "differ.yaml"]),
                group_master("fam-b", &["shared.yaml"])
            )
            .into_bytes(),
        ),
        (format!("{RECIPES}/m/shared.yaml"), group_recipe(VLLM_OLD)),
        (
            format!("{RECIPES}/m/differ.yaml"),
            group_recipe("vllm/vllm-openai:v0.24.0"),
        ),
        (
            "perf-changelog.yaml".into(),
            b"- config-keys:\n    - x\n  description:\n    - \"x\"\n  pr-link: https://github.com/o/r/pull/1\n".to_vec(),
        ),
    ];
    let dir = tempfile::tempdir().expect("tempdir");
    for (path, bytes) in &files {
        let target = dir.path().join(path);
        std::fs::create_dir_all(target.parent().expect("parent")).expect("mkdir");
        std::fs::write(target, bytes).expect("write");
    }
    let repository = Repository::open_with(dir.path(), &config.repo).expect("group repository");
    let world = World::seeded(repository, &files, "fam-b", VLLM_NEW, config).await;
    (world, dir)
}

#[tokio::test]
async fn a_group_bump_records_its_scope_in_the_pr_body_and_all_keys_in_the_changelog() {
    let mut config = EngineConfig::new(7);
    config.bump.disagreeing = klaud_planner::bump::DisagreePolicy::Align;
    let (w, _dir) = group_world(config).await;
    let mut rec = w.engine().open_record(&w.target).await.expect("record");
    let p = w.until_waiting(&mut rec).await;
    assert!(matches!(p, Progress::Waiting(_)), "{p:?}");
    let scope = rec.scope.clone().expect("scope recorded at prepare");
    assert_eq!(scope.keys, ["fam-a", "fam-b"]);
    assert_eq!(scope.aligned, [format!("{RECIPES}/m/differ.yaml")]);
    let head = rec.head.clone().expect("head");
    let differ = w
        .forge
        .read_file(&format!("{RECIPES}/m/differ.yaml"), &head)
        .await
        .expect("read")
        .expect("recipe");
    assert_eq!(
        differ,
        group_recipe(VLLM_NEW),
        "the align policy reached the bump"
    );
    let number = rec.pull.expect("pull");
    let pull = w.forge.get_pull(number).await.expect("pull");
    assert!(
        pull.title.contains("Update fam-a + fam-b "),
        "the title names every key: {}",
        pull.title
    );
    // One claim, under the asked family's ref, listing every member.
    let claim = rec.claim.clone().expect("claim");
    let record = klaud_claims::ClaimRecord::parse(&claim.message).expect("record");
    let families: Vec<&str> = record
        .candidates
        .iter()
        .map(|c| c.family.as_str())
        .collect();
    assert_eq!(
        families,
        ["configs/x-master.yaml:fam-a", "configs/x-master.yaml:fam-b"]
    );
    assert_eq!(record.candidate_ids(), [rec.candidate.as_str()]);
    let claim_refs: Vec<String> = w
        .forge
        .git()
        .ref_names()
        .into_iter()
        .filter(|r| r.starts_with(klaud_claims::CLAIM_REF_PREFIX))
        .collect();
    assert_eq!(claim_refs.len(), 1, "{claim_refs:?}");
    // The smoke runs every key the bump changed.
    let dispatch = w
        .forge
        .writes()
        .into_iter()
        .find(|x| x.starts_with("dispatch"))
        .expect("dispatched");
    assert!(
        dispatch.contains("--config-files configs/x-master.yaml --config-keys fam-a fam-b --smoke"),
        "{dispatch}"
    );
    let body = pull.body;
    assert!(body.contains("Bumped together"), "{body}");
    assert!(body.contains("Recipes aligned to the new image"), "{body}");
    assert!(body.contains("differ.yaml"), "{body}");

    let run = w.smoke_run(&rec);
    w.forge
        .complete_run(run, "success", Vec::new())
        .expect("complete");
    let p = w.until_waiting(&mut rec).await;
    assert!(matches!(p, Progress::Waiting(_)), "{p:?}");
    assert_eq!(rec.step, Step::Sweep);
    let changelog = w
        .forge
        .read_file("perf-changelog.yaml", rec.head.as_deref().expect("head"))
        .await
        .expect("read")
        .expect("changelog");
    let changelog = String::from_utf8(changelog).expect("utf-8");
    assert!(
        changelog.contains("- config-keys:\n    - fam-a\n    - fam-b\n"),
        "{changelog}"
    );
}

#[tokio::test]
async fn under_the_default_policy_a_disagreeing_recipe_is_left_and_named() {
    let (w, _dir) = group_world(EngineConfig::new(7)).await;
    let mut rec = w.engine().open_record(&w.target).await.expect("record");
    let p = w.until_waiting(&mut rec).await;
    // fam-a and fam-b agree on the master image; only a recipe differs, so
    // the default policy leaves it and reports it as left.
    assert!(matches!(p, Progress::Waiting(_)), "{p:?}");
    let scope = rec.scope.clone().expect("scope");
    assert!(scope.aligned.is_empty());
    assert_eq!(scope.left, [format!("{RECIPES}/m/differ.yaml")]);
    let body = w
        .forge
        .get_pull(rec.pull.expect("pull"))
        .await
        .expect("pull")
        .body;
    assert!(body.contains("Recipes left on their own image"), "{body}");
}

#[tokio::test]
async fn a_plain_single_key_bump_keeps_the_pr_body_free_of_a_scope() {
    let (w, rec) = started().await;
    let scope = rec.scope.clone().expect("scope recorded at prepare");
    assert_eq!(scope.keys, std::slice::from_ref(&rec.key));
    assert!(!scope.is_notable());
    let frozen = rec.frozen.as_ref().expect("frozen");
    assert_eq!(frozen.provenance.scope, None);
    let body = w
        .forge
        .get_pull(rec.pull.expect("pull"))
        .await
        .expect("pull")
        .body;
    assert!(!body.contains("\"scope\""), "{body}");
    assert!(!body.contains("Bumped together"), "{body}");
}

/// The demo's multi-node family (it runs two in-repository recipes) with
/// its recipes seeded too, and three variants of its bump.
async fn experiment_world(max_concurrent: u32) -> (World, Vec<Target>) {
    use klaud_planner::variant::{Variant, parse_edits, resolve};
    let repository = Repository::open(demo_root()).expect("demo repository");
    let mut files = Vec::new();
    for path in [
        "configs/nvidia-master.yaml",
        "configs/amd-master.yaml",
        "perf-changelog.yaml",
        "benchmarks/multi_node/srt-slurm-recipes/vllm/demo-model/disagg-gb200-1p1d.yaml",
        "benchmarks/multi_node/srt-slurm-recipes/vllm/demo-model/disagg-gb200-2p1d.yaml",
    ] {
        files.push((
            path.to_owned(),
            std::fs::read(demo_root().join(path)).expect(path),
        ));
    }
    let family = "configs/nvidia-master.yaml:demo-fp4-gb200-dynamo-vllm-disagg";
    let w = World::seeded(
        repository,
        &files,
        family,
        "vllm/vllm-openai:v0.26.0",
        EngineConfig::new(7),
    )
    .await;
    let v = |name: &str, from: Option<&str>, edits: &str| Variant {
        name: name.into(),
        from: from.map(Into::into),
        edits: parse_edits(edits).expect("edits"),
    };
    let resolved = resolve(&[
        v("A", None, "set resources.gpus_per_node=8"),
        v("B", None, "set model.precision=fp8"),
        v("C", Some("B"), "unset identity.frameworks"),
    ])
    .expect("variants");
    let targets = crate::experiment::variant_targets(&w.target, "exp", &resolved, max_concurrent)
        .expect("targets");
    (w, targets)
}

fn smoke_of(w: &World, rec: &CandidateRecord) -> Run {
    let id = w.smoke_run(rec);
    w.forge
        .runs()
        .into_iter()
        .find(|r| r.id == id)
        .expect("run")
}

/// The experiments section of a variant's PR body.
fn experiments_section(body: &str) -> &str {
    crate::experiment::section_of(body).expect("an experiments section")
}

#[tokio::test]
async fn an_experiment_race_is_won_by_the_second_variant_and_the_others_end_duplicate() {
    let (w, targets) = experiment_world(0).await;
    let mut recs = Vec::new();
    for t in &targets {
        let mut rec = w.engine().open_record(t).await.expect("record");
        let p = w.until_waiting(&mut rec).await;
        assert!(matches!(p, Progress::Waiting(_)), "{p:?}");
        assert_eq!(
            rec.step,
            Step::Smoke,
            "{}",
            rec.variant.as_ref().unwrap().name
        );
        recs.push(rec);
    }
    // One claim lists every variant; one branch and draft PR per variant.
    let claims: Vec<String> = w
        .forge
        .git()
        .ref_names()
        .into_iter()
        .filter(|r| r.contains("klaud/claim-"))
        .collect();
    assert_eq!(claims.len(), 1, "{claims:?}");
    let pulls = w.forge.pulls();
    assert_eq!(pulls.len(), 3);
    for (rec, name) in recs.iter().zip(["A", "B", "C"]) {
        let pull = w.forge.get_pull(rec.pull.unwrap()).await.unwrap();
        assert!(
            pull.title
                .starts_with(&format!("[Klaud Cold][experiment][Variant {name}] Update ")),
            "{}",
            pull.title
        );
        assert!(pull.draft);
    }
    // Variant C = B plus its own edit: both edits are on its branch.
    let recipe = "benchmarks/multi_node/srt-slurm-recipes/vllm/demo-model/disagg-gb200-1p1d.yaml";
    let c_recipe = w
        .forge
        .read_file(recipe, recs[2].head.as_deref().unwrap())
        .await
        .unwrap()
        .unwrap();
    let c_recipe = String::from_utf8(c_recipe).unwrap();
    let base_recipe = std::fs::read_to_string(demo_root().join(recipe)).unwrap();
    assert_eq!(
        c_recipe,
        base_recipe
            .replace("vllm/vllm-openai:v0.25.0", "vllm/vllm-openai:v0.26.0")
            .replace("precision: fp4", "precision: fp8")
            .replace("  frameworks: { dynamo: \"1.3.1\" }\n", "")
    );

    // B passes first and goes on to the final sweep.
    let b_smoke = smoke_of(&w, &recs[1]);
    w.forge
        .complete_run(b_smoke.id, "success", Vec::new())
        .unwrap();
    for rec in recs.iter_mut() {
        let p = w.until_waiting(rec).await;
        assert!(matches!(p, Progress::Waiting(_)), "{p:?}");
    }
    assert_eq!(recs[1].step, Step::Sweep);
    // A passes too, but waits: B holds the final sweep.
    let a_smoke = smoke_of(&w, &recs[0]);
    w.forge
        .complete_run(a_smoke.id, "success", Vec::new())
        .unwrap();
    let p = w.until_waiting(&mut recs[0]).await;
    assert!(
        matches!(&p, Progress::Waiting(m) if m.contains("Variant B")),
        "{p:?}"
    );
    assert_eq!(recs[0].step, Step::Final);
    // The body of each variant lists its siblings with their state as it
    // was when the variant's own row last changed: A, now in its final
    // step, shows itself and B there; C, still in its smoke, was not
    // edited for its siblings' moves.
    let a_body = w.forge.get_pull(recs[0].pull.unwrap()).await.unwrap().body;
    let a_section = experiments_section(&a_body);
    assert_eq!(
        a_section.matches("final sweep / 最终扫描").count(),
        2,
        "{a_section}"
    );
    let c_body = w.forge.get_pull(recs[2].pull.unwrap()).await.unwrap().body;
    assert!(
        c_body.contains("Related experiments / 相关实验"),
        "{c_body}"
    );
    assert!(
        c_body.contains("Variant C = Variant B plus `unset identity.frameworks`"),
        "{c_body}"
    );
    let c_section = experiments_section(&c_body);
    assert!(c_section.contains("smoke, 0 repair(s) used"), "{c_section}");
    assert!(!c_section.contains("final sweep / 最终扫描"), "{c_section}");

    // B's sweep validates: B wins, A and C stop as duplicates.
    let sweep = w
        .forge
        .runs()
        .into_iter()
        .find(|r| {
            r.event == RunEvent::PullRequest && Some(r.head_sha.as_str()) == recs[1].head.as_deref()
        })
        .expect("B's sweep");
    w.forge
        .complete_run(sweep.id, "success", results_of(&recs[1], &[]))
        .unwrap();
    let p = w.until_waiting(&mut recs[1]).await;
    let Progress::Done(Some(ending)) = p else {
        panic!("{p:?}")
    };
    assert_eq!(ending.outcome, Outcome::Validated, "{ending:?}");
    assert!(
        w.forge
            .git()
            .ref_names()
            .iter()
            .any(|r| r.contains("klaud/claim-")),
        "the winner keeps the claim while its siblings stop"
    );
    // The final sweep slot already names the winner: its validated end
    // adds no claim commit of its own.
    let claim_ref = w
        .forge
        .git()
        .ref_names()
        .into_iter()
        .find(|r| r.contains("klaud/claim-"))
        .expect("the claim");
    let tip = w.forge.refs().read_ref(&claim_ref).await.unwrap().unwrap();
    let record = klaud_claims::ClaimRecord::parse(&tip.message).unwrap();
    let field = |f: &str| {
        record
            .extra
            .get(f)
            .and_then(|v| v.as_str().map(str::to_owned))
    };
    assert_eq!(
        field(crate::experiment::FINAL_FIELD).as_deref(),
        Some(recs[1].candidate.as_str())
    );
    assert_eq!(field(crate::experiment::WINNER_FIELD), None);
    let b_url = recs[1].pull_url.clone().unwrap();
    for i in [0, 2] {
        let p = w.until_waiting(&mut recs[i]).await;
        let Progress::Done(Some(ending)) = p else {
            panic!("{p:?}")
        };
        assert_eq!(ending.outcome, Outcome::Duplicate);
        let number = recs[i].pull.unwrap();
        assert!(
            !w.forge.get_pull(number).await.unwrap().state.is_open(),
            "closed"
        );
        let comments = w.forge.list_comments(number).await.unwrap();
        assert!(
            comments
                .iter()
                .any(|c| c.body.contains("klaud-outcome") && c.body.contains(&b_url)),
            "the receipt links the winner"
        );
    }
    let c_run = smoke_of(&w, &recs[2]);
    assert_eq!(
        c_run.conclusion,
        Some(RunConclusion::Cancelled),
        "{c_run:?}"
    );
    assert!(
        w.forge
            .git()
            .ref_names()
            .iter()
            .all(|r| !r.contains("klaud/claim-")),
        "the last sibling released the claim"
    );
    let b_pull = w.forge.get_pull(recs[1].pull.unwrap()).await.unwrap();
    assert!(b_pull.state.is_open() && !b_pull.draft);
    assert_eq!(w.forge.pulls().len(), 3, "no PR twice");
}

#[tokio::test]
async fn an_experiment_whose_variants_all_fail_cleans_every_one_up_and_frees_the_family() {
    let (w, targets) = experiment_world(2).await;
    let mut recs = Vec::new();
    for t in &targets {
        let mut rec = w.engine().open_record(t).await.expect("record");
        w.until_waiting(&mut rec).await;
        recs.push(rec);
    }
    // The bound: two run, the third waits for a slot without a branch.
    assert_eq!(recs[0].step, Step::Smoke);
    assert_eq!(recs[1].step, Step::Smoke);
    assert_eq!(recs[2].step, Step::Prepare);
    assert!(recs[2].head.is_none() && recs[2].pull.is_none());
    for i in [0, 1] {
        let run = smoke_of(&w, &recs[i]);
        w.forge.complete_run(run.id, "failure", Vec::new()).unwrap();
        let p = w.until_waiting(&mut recs[i]).await;
        let Progress::Done(Some(ending)) = p else {
            panic!("{p:?}")
        };
        assert_eq!(ending.outcome, Outcome::Failed);
    }
    assert!(
        w.forge
            .git()
            .ref_names()
            .iter()
            .any(|r| r.contains("klaud/claim-")),
        "the third variant still runs under the claim"
    );
    // A slot is free: the third goes on, and fails too.
    let p = w.until_waiting(&mut recs[2]).await;
    assert!(matches!(p, Progress::Waiting(_)), "{p:?}");
    assert_eq!(recs[2].step, Step::Smoke);
    let run = smoke_of(&w, &recs[2]);
    w.forge.complete_run(run.id, "failure", Vec::new()).unwrap();
    let p = w.until_waiting(&mut recs[2]).await;
    assert!(
        matches!(p, Progress::Done(Some(ref e)) if e.outcome == Outcome::Failed),
        "{p:?}"
    );
    assert!(w.forge.pulls().iter().all(|p| !p.state.is_open()));
    assert!(
        w.forge
            .git()
            .ref_names()
            .iter()
            .all(|r| !r.contains("klaud/claim-")),
        "released by the last"
    );
}

/// The demo repository's three files with `edit` applied to the NVIDIA
/// master and `extra` files added, written to a temporary checkout.
fn edited_demo(
    edit: impl Fn(&str) -> String,
    extra: &[(&str, &str)],
) -> (Repository, Vec<(String, Vec<u8>)>, tempfile::TempDir) {
    let mut files = Vec::new();
    for path in [
        "configs/nvidia-master.yaml",
        "configs/amd-master.yaml",
        "perf-changelog.yaml",
    ] {
        let mut bytes = std::fs::read(demo_root().join(path)).expect(path);
        if path == "configs/nvidia-master.yaml" {
            bytes = edit(std::str::from_utf8(&bytes).expect("utf-8")).into_bytes();
        }
        files.push((path.to_owned(), bytes));
    }
    for (path, text) in extra {
        files.push(((*path).to_owned(), text.as_bytes().to_vec()));
    }
    let dir = tempfile::tempdir().expect("tempdir");
    for (path, bytes) in &files {
        let target = dir.path().join(path);
        std::fs::create_dir_all(target.parent().expect("parent")).expect("mkdir");
        std::fs::write(target, bytes).expect("write");
    }
    let repository = Repository::open(dir.path()).expect("edited demo repository");
    (repository, files, dir)
}

/// Drives a fresh candidate to its ending before any pull request exists.
async fn ended_before_a_pull(w: &World) -> Ending {
    let rec = w.engine().open_record(&w.target).await.expect("record");
    drive_to_an_ending_before_a_pull(w, rec).await
}

async fn drive_to_an_ending_before_a_pull(w: &World, mut rec: CandidateRecord) -> Ending {
    let p = w.until_waiting(&mut rec).await;
    let Progress::Done(Some(ending)) = p else {
        panic!("{p:?}")
    };
    assert!(w.forge.pulls().is_empty(), "no pull request is opened");
    assert!(w.forge.runs().is_empty(), "nothing is dispatched");
    assert!(
        w.forge
            .git()
            .ref_names()
            .iter()
            .all(|r| !r.contains("klaud/claim-")),
        "the claim is released"
    );
    ending
}

#[tokio::test]
async fn a_base_that_already_carries_the_image_ends_already_updated() {
    let old = "lmsysorg/sglang:v0.5.16-cu130";
    let (repository, files, _dir) = edited_demo(|t| t.replacen(old, IMAGE, 1), &[]);
    let w = World::seeded(repository, &files, FAMILY, IMAGE, EngineConfig::new(7)).await;
    let ending = ended_before_a_pull(&w).await;
    assert_eq!(ending.outcome, Outcome::AlreadyUpdated, "{ending:?}");
    assert!(ending.message.contains(IMAGE), "{}", ending.message);
}

#[tokio::test]
async fn a_family_the_base_retired_in_models_md_ends_retired() {
    let models = "| Model | Prefix | Status |\n|---|---|---|\n| Demo R1 | `demo` | Deprecated since 2026-08-20 ([#41](https://github.com/demo/benchmarks/pull/41)) |\n";
    let (repository, files, _dir) = edited_demo(str::to_owned, &[("MODELS.md", models)]);
    let w = World::seeded(repository, &files, FAMILY, IMAGE, EngineConfig::new(7)).await;
    let ending = ended_before_a_pull(&w).await;
    assert_eq!(ending.outcome, Outcome::Retired, "{ending:?}");
    assert!(ending.message.contains("#41"), "{}", ending.message);
}

#[tokio::test]
async fn a_family_removed_from_the_base_ends_retired() {
    let mut w = World::new().await;
    // The plan saw the family; the base the engine now works from has lost
    // its key (e.g. a merge moved it to configs/deprecated/).
    let (repository, _files, dir) = edited_demo(
        |t| {
            let start = t.find("demo-fp4-b200-sglang:").expect("key");
            let end = t[start + 1..]
                .find("\ndemo-")
                .map_or(t.len(), |i| start + 2 + i);
            format!("{}{}", &t[..start], &t[end..])
        },
        &[],
    );
    assert!(repository.family(FAMILY).is_err(), "the key is gone");
    // The record was opened (planned) against the old base.
    let rec = w.engine().open_record(&w.target).await.expect("record");
    w.repository = repository;
    let ending = drive_to_an_ending_before_a_pull(&w, rec).await;
    assert_eq!(ending.outcome, Outcome::Retired, "{ending:?}");
    assert!(
        ending.message.contains("no longer has"),
        "{}",
        ending.message
    );
    drop(dir);
}

#[test]
fn a_refused_credential_or_a_failing_store_is_an_instance_wide_failure() {
    let refused = EngineError::Forge(ForgeError::CredentialRefused(
        "get pull request #1: GitHub rejected the credential (Bad credentials)".into(),
    ));
    assert!(
        refused
            .global_cause()
            .is_some_and(|c| c.contains("GitHub refused the credential")),
        "{refused}"
    );
    let claim_read = EngineError::ClaimOp(klaud_claims::ClaimError::Store {
        action: "read",
        ref_name: "refs/heads/klaud/claim-x".into(),
        source: klaud_claims::RefStoreError::CredentialRefused("Bad credentials".into()),
    });
    assert!(claim_read.global_cause().is_some(), "{claim_read}");
    let disk_full = EngineError::Journal(JournalError::new(
        "save candidate",
        std::io::Error::new(std::io::ErrorKind::StorageFull, "No space left on device"),
    ));
    assert!(
        disk_full
            .global_cause()
            .is_some_and(|c| c.contains("local store") && c.contains("No space left")),
        "{disk_full}"
    );
    // A candidate's own trouble stays the candidate's.
    for own in [
        EngineError::Forge(ForgeError::NotFound("pull request #1".into())),
        EngineError::Forge(ForgeError::Other("HTTP 502".into())),
        EngineError::Invalid("no such family".into()),
    ] {
        assert_eq!(own.global_cause(), None, "{own}");
    }
}

mod hunt {
    use super::*;
    use crate::engine::HuntProgress;
    use crate::hunt::{EndReason, Hunt, HuntPlan, HuntTag, Next, PLAN_VERSION, Probe, Trigger};

    fn tag(name: &str) -> HuntTag {
        HuntTag {
            tag: name.into(),
            digest: Some(format!("sha256:{}", "cd".repeat(32))),
            commit: None,
        }
    }

    fn plan() -> HuntPlan {
        HuntPlan {
            version: PLAN_VERSION,
            family: FAMILY.into(),
            image: "lmsysorg/sglang".into(),
            old: tag("v0.5.16-cu130"),
            new: tag("v0.5.17-cu130"),
            tags: (0..7).map(|i| tag(&format!("t{i}"))).collect(),
            probe: Probe::Outcome {
                target: "smoke".into(),
            },
            budget: 4,
            trigger: Trigger::Failure,
            upstream: None,
        }
    }

    /// Hunt smokes dispatched so far, with the image each one's commit
    /// carries.
    async fn hunt_dispatches(w: &World) -> Vec<String> {
        let mut out = Vec::new();
        for write in w.forge.writes() {
            let Some(inputs) = write.strip_prefix("dispatch e2e-tests.yml ") else {
                continue;
            };
            let inputs: serde_json::Value = serde_json::from_str(inputs).expect("inputs");
            if !inputs["test-name"]
                .as_str()
                .unwrap_or("")
                .contains(" · klaud-hunt-")
            {
                continue;
            }
            // The Actions tab names the family and the step, as for a
            // candidate's own smoke.
            let label = inputs["test-name"].as_str().unwrap_or("");
            assert!(
                label.starts_with("demo-fp4-b200-sglang · hunt 1 step "),
                "{label}"
            );
            let sha = inputs["ref"].as_str().expect("ref");
            let master = w
                .forge
                .read_file("configs/nvidia-master.yaml", sha)
                .await
                .expect("read")
                .expect("master");
            let text = String::from_utf8(master).unwrap();
            let mut lines = text.lines();
            lines
                .find(|l| *l == "demo-fp4-b200-sglang:")
                .expect("entry");
            let image = lines.next().unwrap().trim().strip_prefix("image:").unwrap();
            out.push(image.trim().trim_matches('"').to_owned());
        }
        out
    }

    /// Calls the hunt until it ends, completing each dispatched run: tags
    /// from `bad_from` on fail. `crash_every_call`: each call starts from
    /// the record as it was before the hunt (a journal cleared).
    async fn hunt_until_over(
        w: &World,
        rec: &mut CandidateRecord,
        bad_from: usize,
        crash_every_call: bool,
    ) -> crate::hunt::HuntResult {
        let plan = plan();
        for _ in 0..40 {
            // A fresh engine each call: nothing but GitHub is remembered;
            // with `crash_every_call` the journal's record is dropped too.
            let mut fresh = rec.clone();
            let r = if crash_every_call {
                &mut fresh
            } else {
                &mut *rec
            };
            match w.engine().hunt_step(r, Some(&plan), 0).await.expect("hunt") {
                HuntProgress::Ended(result) => return result,
                HuntProgress::Waiting(_) => {}
                other => panic!("{other:?}"),
            }
            // Complete the hunt run that is going, if any.
            for run in w.forge.runs() {
                if run.title.contains("klaud-hunt-") && !run.status.is_completed() {
                    let image = hunt_dispatches(w).await.pop().expect("dispatched");
                    let i: usize = image.rsplit(":t").next().unwrap().parse().expect("tag");
                    let c = if i >= bad_from { "failure" } else { "success" };
                    w.forge
                        .complete_run(run.id, c, Vec::new())
                        .expect("complete");
                }
            }
        }
        panic!("the hunt never ended");
    }

    #[tokio::test]
    async fn the_engine_bisects_the_tags_with_one_smoke_per_step_and_records_them_on_the_pr() {
        for (bad_from, crash) in [(0, false), (4, true), (6, false), (7, true)] {
            let (w, mut rec) = started().await;
            let result = hunt_until_over(&w, &mut rec, bad_from, crash).await;
            let want = if bad_from == 7 {
                "v0.5.17-cu130".to_owned()
            } else {
                format!("t{bad_from}")
            };
            assert_eq!(result.first_bad.tag, want, "bad from {bad_from}");
            assert_eq!(result.reason, EndReason::Found);
            let dispatched = hunt_dispatches(&w).await;
            assert_eq!(dispatched.len(), 3, "{dispatched:?}");
            // Each step's commit carries exactly its tag; none is repeated.
            let mut seen = dispatched.clone();
            seen.sort();
            seen.dedup();
            assert_eq!(seen.len(), 3);
            assert!(
                dispatched
                    .iter()
                    .all(|d| d.starts_with("lmsysorg/sglang:t")),
                "{dispatched:?}"
            );
            // The candidate itself is untouched: still at its smoke.
            assert_eq!(rec.step, Step::Smoke);
            // Calling again publishes nothing more.
            let before = w.forge.writes().len();
            let again = w
                .engine()
                .hunt_step(&mut rec, Some(&plan()), 0)
                .await
                .unwrap();
            assert!(matches!(again, HuntProgress::Ended(_)), "{again:?}");
            assert_eq!(w.forge.writes().len(), before);
        }
    }

    #[tokio::test]
    async fn a_running_step_is_waited_for_and_a_maintainers_stop_ends_the_hunt() {
        let (w, mut rec) = started().await;
        let number = rec.pull.expect("pull");
        let plan = plan();
        let step = |rec: &mut CandidateRecord| {
            let w = &w;
            let plan = plan.clone();
            let mut r = rec.clone();
            async move {
                let p = w.engine().hunt_step(&mut r, Some(&plan), 0).await.unwrap();
                (p, r)
            }
        };
        // Plan, then step 1 dispatched; calling again while it runs waits.
        for _ in 0..4 {
            let (p, r) = step(&mut rec).await;
            assert!(matches!(p, HuntProgress::Waiting(_)), "{p:?}");
            rec = r;
        }
        assert_eq!(hunt_dispatches(&w).await.len(), 1);
        // Someone without write access cannot stop it: the commands refuse
        // and the hunt goes on.
        w.forge.set_permission("reader", "read");
        w.forge.comment_as("reader", number, "/klaud stop").unwrap();
        w.forge.set_permission("maintainer", "write");
        let answered = crate::commands::handle_commands(&w.forge, &w.engine(), &mut rec, None)
            .await
            .expect("commands");
        assert!(answered.iter().all(|a| !a.allowed), "{answered:?}");
        let run = w
            .forge
            .runs()
            .into_iter()
            .find(|r| r.title.contains("klaud-hunt-"))
            .unwrap();
        w.forge.complete_run(run.id, "success", Vec::new()).unwrap();
        let (p, r) = step(&mut rec).await;
        assert!(
            matches!(p, HuntProgress::Waiting(ref m) if m.starts_with("regression hunt: step 1 at t") && m.ends_with(": good") && crate::engine::is_hunt_news(m)),
            "{p:?}"
        );
        rec = r;
        // The hunt reads no commands itself: a maintainer's stop acts
        // through the commands, which hand the candidate off and end the
        // hunt with the narrowest range.
        w.forge
            .comment_as("maintainer", number, "/klaud stop")
            .unwrap();
        let answered = crate::commands::handle_commands(&w.forge, &w.engine(), &mut rec, None)
            .await
            .expect("commands");
        assert!(answered.iter().any(|a| a.allowed), "{answered:?}");
        assert!(rec.ending.as_ref().is_some_and(|e| e.hands_off), "{rec:?}");
        assert_eq!(hunt_dispatches(&w).await.len(), 1);
        // The PR's records rebuild to the same hunt, ended by the stop.
        let comments = w.forge.list_comments(number).await.unwrap();
        let cand = CandidateId::new(rec.candidate.as_str()).unwrap();
        let rebuilt = Hunt::from_comments(&cand, comments.iter().map(|c| c.body.as_str()))
            .unwrap()
            .unwrap();
        assert_eq!(rebuilt.hunt.steps().len(), 1);
        let result = rebuilt.ended.expect("an end record");
        assert_eq!(result.reason, EndReason::Stopped);
        assert_eq!(result.last_good.tag, "t3");
        assert!(matches!(rebuilt.hunt.next(10, true), Next::Done(_)));
    }
}

/// A claim the pass's listing showed free, and then its branch, are
/// created without a read that would find nothing (each a charged 404 on
/// GitHub).
mod blind_creates {
    use super::*;
    use klaud_claims::memory::Op;

    fn listed_free(w: &World) -> Engine<'_> {
        w.engine()
            .with_listed_claims(std::collections::BTreeSet::new())
    }

    /// Steps `rec` until it leaves `Step::Prepare` (a handful of steps at
    /// most: a create, a read, a commit).
    async fn past_prepare(engine: &Engine<'_>, rec: &mut CandidateRecord) {
        for _ in 0..4 {
            if rec.step != Step::Prepare {
                return;
            }
            engine.step(rec).await.expect("prepare");
        }
    }

    #[tokio::test]
    async fn a_free_claim_and_its_first_branch_are_created_without_reading_them() {
        let w = World::new().await;
        let engine = listed_free(&w);
        let mut rec = engine.open_record(&w.target).await.expect("record");
        let before = w.forge.git().calls().len();
        let kept = engine.keep_reads();
        assert_eq!(
            engine.step(&mut rec).await.expect("claim"),
            Progress::Advanced(Step::Prepare)
        );
        assert!(rec.claim_created_here, "{rec:#?}");
        past_prepare(&engine, &mut rec).await;
        drop(kept);
        assert_eq!(rec.step, Step::Open);
        let calls = w.forge.git().calls()[before..].to_vec();
        assert!(!calls.contains(&Op::ReadRef), "{calls:?}");
        let branch = format!("refs/heads/{}", rec.branch);
        assert_eq!(
            w.forge.git().ref_sha(&branch).as_deref(),
            rec.head.as_deref()
        );
    }

    #[tokio::test]
    async fn a_claim_made_after_the_listing_is_read_when_the_create_fails_and_kept() {
        let w = World::new().await;
        let engine = listed_free(&w);
        let mut rec = engine.open_record(&w.target).await.expect("record");
        let family = Engine::candidate_id(&rec).expect("id").family();
        let name = family.claim_ref();
        let other = w
            .forge
            .git()
            .plant(&name, "not a claim of this instance", w.base.as_str())
            .expect("planted");
        let p = engine.step(&mut rec).await.expect("claim");
        assert!(matches!(p, Progress::Skipped(_)), "{p:?}");
        assert_eq!(w.forge.git().ref_sha(&name), Some(other));
        assert!(!rec.claim_created_here);
    }

    #[tokio::test]
    async fn a_branch_an_earlier_lifecycle_left_is_adopted_after_the_create_fails() {
        let w = World::new().await;
        let engine = listed_free(&w);
        let mut rec = engine.open_record(&w.target).await.expect("record");
        let branch = format!("refs/heads/{}", rec.branch);
        let message = format!("an earlier bump\n\n{}{}\n", config::TRAILER, rec.candidate);
        let left = w
            .forge
            .git()
            .plant(&branch, &message, w.base.as_str())
            .expect("planted");
        engine.step(&mut rec).await.expect("claim");
        assert!(rec.claim_created_here);
        past_prepare(&engine, &mut rec).await;
        assert_eq!(rec.step, Step::Open);
        // Nothing overwrote it: the branch's own commit is the head.
        assert_eq!(rec.head.as_deref(), Some(left.as_str()));
        assert_eq!(w.forge.git().ref_sha(&branch), Some(left));
    }

    /// The bump creates its branch at the base, then commits onto it: a
    /// branch left at the base between the two (a crash, a lost answer)
    /// gets the one bump commit, and nobody's work is taken for a
    /// person's.
    #[tokio::test]
    async fn a_branch_left_at_the_base_gets_the_bump_commit() {
        let w = World::new().await;
        let engine = listed_free(&w);
        let mut rec = engine.open_record(&w.target).await.expect("record");
        engine.step(&mut rec).await.expect("claim");
        let branch = format!("refs/heads/{}", rec.branch);
        assert!(w.forge.git().force_ref(&branch, w.base.as_str()));
        past_prepare(&engine, &mut rec).await;
        assert_eq!(rec.step, Step::Open, "{rec:#?}");
        assert!(rec.ending.is_none(), "{:?}", rec.ending);
        let head = rec.head.clone().expect("head");
        assert_eq!(w.forge.git().ref_sha(&branch), Some(head.to_string()));
        let bump = only_commit_beyond_base(&w, &head).await;
        assert!(bump.message.starts_with("Update "), "{bump:#?}");
    }

    /// The one commit between `w`'s base and `head` (asserted to be one).
    async fn only_commit_beyond_base(
        w: &World,
        head: &CommitSha,
    ) -> crate::engine::forge::ComparedCommit {
        use crate::engine::forge::Forge as _;
        let cmp = w
            .forge
            .compare_commits(w.base.as_str(), head.as_str())
            .await
            .expect("compare");
        assert_eq!(cmp.commits.len(), 1, "{cmp:#?}");
        cmp.commits.into_iter().next().expect("one commit")
    }

    /// A branch left at an older base (the base moved on before the bump
    /// was made) is moved up to the base the bump is made on, so the
    /// commit holds the bump and nothing of the older tree.
    #[tokio::test]
    async fn a_branch_left_at_an_older_base_is_moved_up_before_the_bump() {
        let mut w = World::new().await;
        let old = w.base.clone();
        w.base = w
            .forge
            .push("main", &[("README.md", b"moved on\n")], "a later commit")
            .await
            .expect("push");
        let engine = listed_free(&w);
        let mut rec = engine.open_record(&w.target).await.expect("record");
        engine.step(&mut rec).await.expect("claim");
        let branch = format!("refs/heads/{}", rec.branch);
        assert!(w.forge.git().force_ref(&branch, old.as_str()));
        past_prepare(&engine, &mut rec).await;
        assert_eq!(rec.step, Step::Open, "{rec:#?}");
        assert_eq!(rec.base_sha, w.base);
        let head = rec.head.clone().expect("head");
        let bump = only_commit_beyond_base(&w, &head).await;
        assert_eq!(bump.parents, vec![w.base.clone()]);
    }

    /// A branch at a commit beyond the base that is not Klaud's is no
    /// place for the bump: the candidate is handed off and the commit
    /// stays.
    #[tokio::test]
    async fn a_branch_holding_someone_elses_commit_is_not_built_on() {
        let w = World::new().await;
        let engine = listed_free(&w);
        let mut rec = engine.open_record(&w.target).await.expect("record");
        let branch = format!("refs/heads/{}", rec.branch);
        let theirs = w
            .forge
            .git()
            .plant(&branch, "a person's work", w.base.as_str())
            .expect("planted");
        engine.step(&mut rec).await.expect("claim");
        past_prepare(&engine, &mut rec).await;
        assert!(rec.head.is_none(), "{rec:#?}");
        assert!(rec.ending.as_ref().is_some_and(|e| e.hands_off), "{rec:#?}");
        assert_eq!(w.forge.git().ref_sha(&branch), Some(theirs));
    }

    #[tokio::test]
    async fn without_a_listing_the_claim_and_the_branch_are_read_first() {
        let w = World::new().await;
        let mut rec = w.engine().open_record(&w.target).await.expect("record");
        let before = w.forge.git().calls().len();
        w.engine().step(&mut rec).await.expect("claim");
        let calls = w.forge.git().calls()[before..].to_vec();
        assert_eq!(calls.first(), Some(&Op::ReadRef), "{calls:?}");
    }
}

/// A run of steps whose first look is answered from the pass's listings
/// (`Engine::seed_listed`): what the listing shows of Klaud's own pull
/// request and branch is not read again, and a person's change after the
/// listing is the same as one right after the step's own read.
mod listed_reads {
    use super::*;
    use klaud_claims::memory::Op;

    /// The candidate's pull request and branch head as a listing made now
    /// shows them.
    async fn listing(w: &World, rec: &CandidateRecord) -> (Pull, String) {
        let mut pull = w
            .forge
            .get_pull(rec.pull.expect("pull"))
            .await
            .expect("pull");
        // GitHub's list has no `mergeable`.
        pull.mergeable = None;
        let branch = format!("refs/heads/{}", rec.branch);
        (pull, w.forge.git().ref_sha(&branch).expect("branch"))
    }

    /// One run of steps, as the wave's drive makes it, seeded with `listed`
    /// when given; the progress and the ref reads it made.
    async fn run(
        w: &World,
        rec: &mut CandidateRecord,
        listed: Option<&(Pull, String)>,
    ) -> (Progress, usize) {
        let engine = w.engine();
        let before = w.forge.git().calls().len();
        let kept = engine.keep_reads();
        if let Some((pull, head)) = listed {
            engine.seed_listed(rec, Some(pull), Some(head));
        }
        let mut p = Progress::Advanced(rec.step);
        for _ in 0..64 {
            p = engine.step(rec).await.expect("step");
            if !matches!(p, Progress::Advanced(_)) {
                break;
            }
        }
        drop(kept);
        let reads = w.forge.git().calls()[before..]
            .iter()
            .filter(|op| **op == Op::ReadRef)
            .count();
        (p, reads)
    }

    /// Ref reads made since call number `from`.
    fn claim_reads(w: &World, from: usize) -> usize {
        w.forge.git().calls()[from..]
            .iter()
            .filter(|op| **op == Op::ReadRef)
            .count()
    }

    /// A claim this engine created earlier in the pass answers the next
    /// run of steps' ownership check: the same steps, one read fewer. An
    /// engine of a later pass (or a record whose claim moved since) reads
    /// it from GitHub as before.
    #[tokio::test]
    async fn a_claim_created_in_the_pass_is_not_read_back_at_the_next_run_of_steps() {
        let mut figures = Vec::new();
        for seeded in [false, true] {
            let w = World::new().await;
            let engine = w.engine();
            let mut rec = engine.open_record(&w.target).await.expect("record");
            assert_eq!(rec.step, Step::Claim);
            let p = engine.step(&mut rec).await.expect("claim");
            assert_eq!(p, Progress::Advanced(Step::Prepare), "{p:?}");
            let before = w.forge.git().calls().len();
            let kept = engine.keep_reads();
            if seeded {
                engine.seed_created_claim(&rec);
            }
            let p = engine.step(&mut rec).await.expect("prepare");
            drop(kept);
            figures.push((claim_reads(&w, before), rec.step, p));

            // The next pass's engine knows nothing of the create.
            let later = w.engine();
            let before = w.forge.git().calls().len();
            let kept = later.keep_reads();
            later.seed_created_claim(&rec);
            drop(later.step(&mut rec).await.expect("next step"));
            drop(kept);
            assert!(claim_reads(&w, before) > 0, "a later pass reads GitHub");
        }
        let (plain, seeded) = (&figures[0], &figures[1]);
        assert_eq!((plain.1, &plain.2), (seeded.1, &seeded.2), "{figures:?}");
        assert_eq!(seeded.0 + 1, plain.0, "{figures:?}");
    }

    /// An experiment's variant joining the claim its sibling created
    /// earlier in the pass adopts the tip that create made instead of
    /// reading it back, and its next run of steps is seeded like a plain
    /// candidate's while it holds the tip this engine last wrote. An
    /// engine of a later pass reads the claim as before.
    #[tokio::test]
    async fn a_variant_joining_its_siblings_fresh_claim_does_not_read_it_back() {
        let mut figures = Vec::new();
        for same_engine in [false, true] {
            let (w, targets) = experiment_world(0).await;
            let engine = w.engine();
            let mut a = engine.open_record(&targets[0]).await.expect("A");
            let p = engine.step(&mut a).await.expect("A claims");
            assert_eq!(p, Progress::Advanced(Step::Prepare), "{p:?}");
            let other = w.engine();
            let joining = if same_engine { &engine } else { &other };
            let mut b = joining.open_record(&targets[1]).await.expect("B");
            let before = w.forge.git().calls().len();
            let p = joining.step(&mut b).await.expect("B joins");
            assert_eq!(p, Progress::Advanced(Step::Prepare), "{p:?}");
            let joined = claim_reads(&w, before);
            assert_eq!(
                b.claim.as_ref().map(|c| &c.sha),
                a.claim.as_ref().map(|c| &c.sha),
                "B holds the tip A created"
            );
            let before = w.forge.git().calls().len();
            let kept = joining.keep_reads();
            joining.seed_created_claim(&b);
            let p = joining.step(&mut b).await.expect("B prepares");
            drop(kept);
            figures.push((joined, claim_reads(&w, before), b.step, p));

            let later = w.engine();
            let before = w.forge.git().calls().len();
            let kept = later.keep_reads();
            later.seed_created_claim(&b);
            drop(later.step(&mut b).await.expect("next step"));
            drop(kept);
            assert!(claim_reads(&w, before) > 0, "a later pass reads GitHub");
        }
        let (plain, seeded) = (&figures[0], &figures[1]);
        assert_eq!((plain.2, &plain.3), (seeded.2, &seeded.3), "{figures:?}");
        assert!(plain.0 > 0, "another engine reads the claim: {figures:?}");
        assert_eq!(seeded.0, 0, "{figures:?}");
        assert!(seeded.1 < plain.1, "{figures:?}");
    }

    #[tokio::test]
    async fn a_listed_branch_head_answers_the_ownership_check_without_a_read() {
        let mut reads = Vec::new();
        for seeded in [false, true] {
            let (w, mut rec) = started().await;
            let listed = listing(&w, &rec).await;
            let run_id = w.smoke_run(&rec);
            w.forge
                .complete_run(run_id, "success", Vec::new())
                .expect("complete");
            let (_, n) = run(&w, &mut rec, seeded.then_some(&listed)).await;
            reads.push((n, rec.step));
        }
        let (plain, seeded) = (reads[0], reads[1]);
        assert_eq!(plain.1, seeded.1, "the same steps either way: {reads:?}");
        assert!(seeded.0 < plain.0, "{reads:?}");
    }

    #[tokio::test]
    async fn a_listing_that_shows_another_head_is_not_used() {
        let (w, mut rec) = started().await;
        let (mut pull, _) = listing(&w, &rec).await;
        let theirs = w
            .forge
            .push(&rec.branch, &[("fix.txt", b"mine\n")], "Maintainer fix")
            .await
            .expect("push");
        // The listing saw the person's push: neither is taken as Klaud's.
        pull.head_sha = theirs.clone();
        let run_id = w.smoke_run(&rec);
        w.forge
            .complete_run(run_id, "success", Vec::new())
            .expect("complete");
        let listed = (pull, theirs.to_string());
        let (p, _) = run(&w, &mut rec, Some(&listed)).await;
        let Progress::Done(Some(ending)) = p else {
            panic!("{p:?}")
        };
        assert_eq!(ending.outcome, Outcome::Handoff, "{ending:?}");
    }

    #[tokio::test]
    async fn a_push_after_the_listing_is_never_overwritten_and_ends_in_a_handoff() {
        let (w, mut rec) = started().await;
        let listed = listing(&w, &rec).await;
        // A person pushes after the pass listed, before the step reads.
        let theirs = w
            .forge
            .push(&rec.branch, &[("fix.txt", b"mine\n")], "Maintainer fix")
            .await
            .expect("push");
        let run_id = w.smoke_run(&rec);
        w.forge
            .complete_run(run_id, "success", Vec::new())
            .expect("complete");
        let branch = format!("refs/heads/{}", rec.branch);
        let (mut p, _) = run(&w, &mut rec, Some(&listed)).await;
        assert_eq!(
            w.forge.git().ref_sha(&branch).as_deref(),
            Some(theirs.as_str()),
            "the person's commit stays the branch head"
        );
        // The next run of steps reads GitHub (no listing kept).
        if !matches!(p, Progress::Done(_)) {
            p = run(&w, &mut rec, None).await.0;
        }
        let Progress::Done(Some(ending)) = p else {
            panic!("{p:?}")
        };
        assert_eq!(ending.outcome, Outcome::Handoff, "{ending:?}");
        assert_eq!(
            w.forge.git().ref_sha(&branch).as_deref(),
            Some(theirs.as_str())
        );
    }
}

/// A later pass's first ownership check answered from the pass's claim
/// listing (`Engine::seed_listed_claim`) while the claim is still where
/// Klaud's own last write left it; a claim that moved is read and seen.
mod listed_claim {
    use super::*;
    use crate::engine::proof::Scope;
    use klaud_claims::RefStore as _;
    use klaud_claims::memory::Op;

    /// A record holding its claim, as an earlier pass left it, and the
    /// claim's tip as a listing made now shows it.
    async fn claimed(w: &World) -> (CandidateRecord, klaud_claims::RefTip) {
        let engine = w.engine();
        let mut rec = engine.open_record(&w.target).await.expect("record");
        engine.step(&mut rec).await.expect("claim");
        let name = rec.claim.as_ref().expect("claim").ref_name.clone();
        let tip = w.forge.git().read_ref(&name).await.expect("read");
        (rec, tip.expect("the claim"))
    }

    /// A new pass's claim-scope proof, seeded with `listed`; whether it
    /// proved and how many refs it read.
    async fn prove(
        w: &World,
        rec: &mut CandidateRecord,
        listed: &klaud_claims::RefTip,
    ) -> (bool, usize) {
        let engine = w.engine();
        let before = w.forge.git().calls().len();
        let kept = engine.keep_reads();
        engine.seed_listed_claim(rec, listed);
        let proved = engine.prove(rec, Scope::Claim).await.expect("prove");
        drop(kept);
        let reads = w.forge.git().calls()[before..]
            .iter()
            .filter(|op| **op == Op::ReadRef)
            .count();
        (proved.is_ok(), reads)
    }

    #[tokio::test]
    async fn a_claim_the_listing_shows_as_klaud_left_it_is_not_read_again() {
        let w = World::new().await;
        let (mut rec, tip) = claimed(&w).await;
        assert_eq!(prove(&w, &mut rec, &tip).await, (true, 0));
    }

    #[tokio::test]
    async fn a_claim_listed_elsewhere_than_klaud_left_it_is_read_and_its_move_seen() {
        let w = World::new().await;
        let (mut rec, _) = claimed(&w).await;
        let name = rec.claim.as_ref().expect("claim").ref_name.clone();
        // A person moved the claim before the listing: the listing shows
        // another commit, so it vouches for nothing.
        let other = w
            .forge
            .git()
            .plant(&name, "not this instance's claim", w.base.as_str())
            .expect("planted");
        let moved = w.forge.git().read_ref(&name).await.expect("read");
        let moved = moved.expect("the moved claim");
        assert_eq!(moved.sha, other);
        assert_eq!(prove(&w, &mut rec, &moved).await, (false, 1));
    }

    #[tokio::test]
    async fn without_a_listing_the_claim_is_read() {
        let w = World::new().await;
        let (mut rec, mut tip) = claimed(&w).await;
        // A listing of another ref (or none) seeds nothing.
        tip.name = "refs/heads/klaud/claim-0000000000000000".into();
        assert_eq!(prove(&w, &mut rec, &tip).await, (true, 1));
    }
}
