//! The candidate lifecycle over the whole InferenceX checkout
//! (`shared/fixtures/inferencex/full/`) with the real workflow files of both
//! versions: `843c6254` (project at the root, sweep skips drafts, a `push`
//! trigger on main) and `newer` (project under `inferencex-e2e/`). The
//! families are real master keys with their real recipes; the registry
//! serves the tags the test builds from those families' images.

use std::path::Path;

use klaud_lifecycle::engine::{CandidateRecord, MemoryJournal};
use klaud_lifecycle::model::{AttemptKind, Outcome};
use klaud_planner::image::ImageRef;
use klaud_planner::repo::Repository;
use serde_json::json;

use crate::lifecycle_e2e::assert_validated;
use crate::support;
use crate::support::Harness;

/// Validated (single node, SGLang on Docker Hub).
const VALIDATED: &str = "dsr1-fp4-b200-sglang";
/// Retried after an infrastructure failure, then validated (multi-node,
/// disaggregated agentic vLLM nightly on GB200, arm64).
const RETRIED: &str = "dsv4-fp4-gb200-dynamo-vllm-agentic-mtp-disagg";
/// Failed with cleanup (TensorRT-LLM on nvcr.io, enroot spelling).
const FAILED: &str = "dsr1-fp4-b200-trt";

/// The newer tag each family moves to.
const MOVES: &[(&str, &str)] = &[
    (VALIDATED, "v0.5.17-cu130"),
    (RETRIED, "nightly-5e35a6f4f9bbc217c599692157ca985c894373f7"),
    (FAILED, "1.3.0rc18"),
];

const SCRIPT: &str = r#"
[families."*"]
smoke = ["success"]
sweep = ["success"]
[families.dsr1-fp4-b200-trt]
smoke = ["failure"]
[families.dsv4-fp4-gb200-dynamo-vllm-agentic-mtp-disagg]
smoke = ["infra", "success"]
"#;

/// The full checkout (under `project`) plus the workflow files of
/// `version`, in a temporary directory; `None` when the fixtures are absent
/// (skipped loudly; a failure under `CI`).
fn full_seed(version: &str) -> Option<tempfile::TempDir> {
    let full = support::inferencex_full()?;
    let workflows = support::inferencex_workflows(version)?;
    let dir = tempfile::tempdir().expect("tempdir");
    // The newer InferenceX keeps its project under `inferencex-e2e/` (its
    // sweep triggers on `inferencex-e2e/perf-changelog.yaml`).
    let project = if version == "newer" {
        dir.path().join("inferencex-e2e")
    } else {
        dir.path().to_path_buf()
    };
    support::copy_tree(&full, &project);
    support::copy_tree(&workflows, &dir.path().join(".github/workflows"));
    Some(dir)
}

/// A registry seed serving, for each `(key, new tag)`, the family's current
/// tag (old) and the new one (old enough to be a candidate), in the
/// repository its image names. Nightly tags named by a commit carry it as
/// `org.opencontainers.image.revision`, as the real nightlies do.
fn registry_seed(full: &Path, moves: &[(&str, &str)]) -> String {
    let repository = Repository::open(full).expect("the full checkout opens");
    let now = chrono::Utc::now();
    let stamp = |days: i64| (now - chrono::TimeDelta::days(days)).to_rfc3339();
    let tag_seed = |tag: &str, days: i64| {
        let mut seed = json!({"pushed": stamp(days), "created": stamp(days + 1)});
        if let Some(sha) = tag.strip_prefix("nightly-")
            && sha.len() == 40
            && sha.bytes().all(|b| b.is_ascii_hexdigit())
        {
            seed["labels"] = json!({"org.opencontainers.image.revision": sha});
        }
        seed
    };
    let mut repositories = serde_json::Map::new();
    for (key, new_tag) in moves {
        let family = repository.family(key).expect("a real family");
        let image: &ImageRef = family.image();
        let old = image.tag().expect("the family's image has a tag");
        let tags = repositories
            .entry(image.repository())
            .or_insert_with(|| json!({"tags": {}}));
        tags["tags"][old] = tag_seed(old, 90);
        tags["tags"][*new_tag] = tag_seed(new_tag, 3);
    }
    json!({ "repositories": repositories }).to_string()
}

/// A sandbox over the full checkout with `version`'s workflows, or `None`.
async fn full_env(version: &str, script: Option<&str>) -> Option<(Harness, tempfile::TempDir)> {
    let full = support::inferencex_full()?;
    let seed = full_seed(version)?;
    let registry = registry_seed(&full, MOVES);
    let env = Harness::demo()
        .seed_dir(seed.path())
        .registry_seed(&registry)
        .script_opt(script)
        .start()
        .await;
    Some((env, seed))
}

/// The full checkout has many stale families; the plan keeps them all so
/// the wanted one is among them.
async fn target(env: &Harness, key: &str) -> klaud_lifecycle::engine::Target {
    env.target_within(key, 500).await
}

fn has_infra_retry(rec: &CandidateRecord) -> bool {
    rec.attempts
        .iter()
        .any(|a| matches!(a.kind, AttemptKind::InfraRetry { n: 1 }))
}

/// On both versions, over the whole repository: a candidate is validated,
/// one whose smoke hits the infrastructure is retried and validated, and
/// one whose smoke fails ends failed with its PR closed, unlabelled and its
/// claim released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_repository_candidates_are_validated_retried_and_cleaned_up_on_both_versions() {
    for version in ["843c6254", "newer"] {
        let Some((env, _seed)) = full_env(version, Some(SCRIPT)).await else {
            return;
        };
        let expected_prefix = if version == "newer" {
            "inferencex-e2e/"
        } else {
            ""
        };
        assert_eq!(env.repository.prefix(), expected_prefix, "{version}");
        let journal = MemoryJournal::new();

        let t = target(&env, VALIDATED).await;
        assert!(t.image.contains("v0.5.17-cu130"), "{version}: {}", t.image);
        let rec = env.finish(&journal, &t).await;
        assert_validated(&env, &t, &rec).await;
        // The sweep benchmarked the real family at the exact head.
        let pull = env.pull(rec.pull.expect("pull")).await;
        let sweep = rec
            .attempts
            .iter()
            .rev()
            .find(|a| a.kind == AttemptKind::FinalSweep)
            .and_then(|a| a.run.clone())
            .expect("a bound sweep run");
        let live = env.forge.get_run(sweep.id).await.expect("sweep run");
        assert_eq!(live.event, "pull_request", "{version}");
        assert_eq!(live.head_sha, pull.head_sha, "{version}");
        assert_eq!(
            live.display_title.as_deref(),
            Some(format!("Run Sweep - {}", pull.title).as_str()),
            "{version}"
        );

        // The sweep manifest exists only where the seeded workflow uploads
        // it (the newer run-sweep.yml does, 843c6254 does not).
        let names: Vec<String> = env
            .forge
            .list_artifacts(sweep.id)
            .await
            .expect("artifacts")
            .into_iter()
            .map(|a| a.name)
            .collect();
        assert_eq!(
            names.iter().any(|n| n == "klaud-sweep-manifest"),
            version == "newer",
            "{version}: {names:?}"
        );
        assert!(
            names.iter().any(|n| n == "results_bmk"),
            "{version}: {names:?}"
        );

        // Another family of the real masters runs on the same API config
        // with another image, and the API keeps one row per config and
        // point: as after this family's own latest sweep, its run is the
        // newest published one here.
        let published = &env.stack.published;
        let yesterday = published.today().pred_opt().expect("a day");
        published.set_seeded_on(RETRIED, yesterday);
        let t = target(&env, RETRIED).await;
        let rec = env.finish(&journal, &t).await;
        assert_validated(&env, &t, &rec).await;
        assert!(has_infra_retry(&rec), "{version}: {:?}", rec.attempts);

        let t = target(&env, FAILED).await;
        let rec = env.finish(&journal, &t).await;
        let ending = rec.ending.as_ref().expect("ending");
        assert_eq!(ending.outcome, Outcome::Failed, "{version}: {ending:?}");
        let pull = env.pull(rec.pull.expect("pull")).await;
        assert!(
            !pull.state.is_open() && pull.draft,
            "{version}: closed as a draft"
        );
        assert!(pull.labels.is_empty(), "{version}: {:?}", pull.labels);
        assert!(env.claims().await.is_empty(), "{version}: claims released");
    }
}
