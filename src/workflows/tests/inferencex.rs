//! The crate against the real InferenceX workflow files (two versions) in
//! `/work/shared/fixtures/inferencex/workflows/`. The fixtures live beside
//! the repository, not in it: without them these tests skip loudly, and fail
//! when `CI` is set.

use std::path::{Path, PathBuf};

use klaud_workflows::{EventContext, JobDecision, RunOutlook, Workflow};
use serde_json::{Map, Value as Json, json};

const OLD: &str = "843c6254";
const NEW: &str = "newer";

fn fixtures() -> Option<PathBuf> {
    let dir = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/inferencex/workflows"
    ));
    if dir.join(OLD).is_dir() && dir.join(NEW).is_dir() {
        return Some(dir.to_path_buf());
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "InferenceX workflow fixtures missing at {} (required when CI is set)",
        dir.display()
    );
    eprintln!(
        "SKIPPED: InferenceX workflow fixtures not found at {}",
        dir.display()
    );
    None
}

fn text(dir: &Path, version: &str, file: &str) -> String {
    std::fs::read_to_string(dir.join(version).join(file))
        .unwrap_or_else(|e| panic!("{version}/{file}: {e}"))
}

fn load(dir: &Path, version: &str, file: &str) -> Workflow {
    Workflow::parse(file, &text(dir, version, file)).unwrap_or_else(|e| panic!("{version}: {e}"))
}

/// Resolves `.github/workflows/x.yml` to the sibling fixture file.
fn resolver(dir: &Path, version: &str) -> impl Fn(&str) -> Option<String> {
    let base = dir.join(version);
    move |path: &str| {
        let name = path.strip_prefix(".github/workflows/")?;
        std::fs::read_to_string(base.join(name)).ok()
    }
}

/// A pull request event from a same-repository Klaud branch.
fn pr_event(action: &str, draft: bool, labels: &[&str], label: Option<&str>) -> EventContext {
    let mut event = json!({
        "action": action,
        "number": 3301,
        "pull_request": {
            "number": 3301,
            "title": "[Klaud Cold] Bump vllm to v0.11.2 for dsv4-fp4-b200-vllm",
            "draft": draft,
            "state": "open",
            "labels": labels.iter().map(|l| json!({"name": l})).collect::<Vec<_>>(),
            "user": {"login": "Klaud-Cold"},
            "head": {"ref": "klaud/auto-dsv4", "sha": "1111111111111111111111111111111111111111",
                     "repo": {"full_name": "SemiAnalysisAI/InferenceX"}},
            "base": {"ref": "main", "sha": "2222222222222222222222222222222222222222",
                     "repo": {"full_name": "SemiAnalysisAI/InferenceX"}},
        },
        "repository": {"full_name": "SemiAnalysisAI/InferenceX", "owner": {"login": "SemiAnalysisAI"}},
        "sender": {"login": "Klaud-Cold"},
    });
    if let Some(l) = label {
        event["label"] = json!({"name": l});
    }
    EventContext::new("pull_request", event)
        .unwrap()
        .with_github("run_id", json!(18000000001u64))
}

fn changelog_path(version: &str) -> &'static str {
    // The newer layout keeps the benchmark tree under `inferencex-e2e/`.
    if version == OLD {
        "perf-changelog.yaml"
    } else {
        "inferencex-e2e/perf-changelog.yaml"
    }
}

#[test]
fn every_fixture_workflow_parses() {
    let Some(dir) = fixtures() else { return };
    for version in [OLD, NEW] {
        let mut count = 0;
        for entry in std::fs::read_dir(dir.join(version)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "yml") {
                let name = path.file_name().unwrap().to_str().unwrap();
                let wf = load(&dir, version, name);
                assert!(!wf.job_ids().is_empty(), "{version}/{name} has jobs");
                count += 1;
            }
        }
        assert!(count >= 6, "{version}: {count} files");
    }
}

#[test]
fn sweep_title_is_the_pr_title_or_the_head_commit_message() {
    let Some(dir) = fixtures() else { return };
    for version in [OLD, NEW] {
        let wf = load(&dir, version, "run-sweep.yml");
        let ctx = pr_event(
            "labeled",
            false,
            &["full-sweep-enabled"],
            Some("full-sweep-enabled"),
        );
        assert_eq!(
            wf.run_title(&ctx).unwrap(),
            "Run Sweep - [Klaud Cold] Bump vllm to v0.11.2 for dsv4-fp4-b200-vllm",
            "{version}"
        );
    }
    let old = load(&dir, OLD, "run-sweep.yml");
    let push = EventContext::new(
        "push",
        json!({"ref": "refs/heads/main", "after": "3333333333333333333333333333333333333333",
               "head_commit": {"message": "Bump vllm (#3301)"}}),
    )
    .unwrap()
    .with_changed_files(["perf-changelog.yaml"]);
    assert!(old.triggered_by(&push));
    assert_eq!(
        old.run_title(&push).unwrap(),
        "Run Sweep - Bump vllm (#3301)"
    );
    assert!(
        !load(&dir, NEW, "run-sweep.yml").triggered_by(&push),
        "newer has no push trigger"
    );
}

#[test]
fn smoke_dispatch_inputs_differ_between_versions() {
    let Some(dir) = fixtures() else { return };
    let given = |v: Json| -> Map<String, Json> { v.as_object().unwrap().clone() };
    let inputs = given(json!({
        "test-name": "klaud smoke dsv4-fp4-b200-vllm",
        "generate-cli-command": "test-config --config-keys dsv4-fp4-b200-vllm",
        "ref": "1111111111111111111111111111111111111111",
        "klaud-run": "true",
    }));

    let old = load(&dir, OLD, "e2e-tests.yml");
    assert_eq!(old.dispatch_inputs().unwrap().len(), 16);
    let refused = old.validate_dispatch(&inputs).unwrap_err();
    assert_eq!(
        refused.message,
        r#"Unexpected inputs provided: ["klaud-run"]"#
    );

    let new = load(&dir, NEW, "e2e-tests.yml");
    assert_eq!(new.dispatch_inputs().unwrap().len(), 19);
    let resolved = new.validate_dispatch(&inputs).unwrap();
    assert_eq!(resolved.context()["klaud-run"], json!(true));
    assert_eq!(
        resolved.context()["fail-fast"],
        json!(false),
        "default applied"
    );
    assert_eq!(resolved.context()["pr-labels-json"], json!("[]"));

    let mut without = inputs.clone();
    without.remove("klaud-run");
    let resolved = old.validate_dispatch(&without).unwrap();
    let ctx = EventContext::new("workflow_dispatch", json!({"ref": "refs/heads/main"}))
        .unwrap()
        .with_github("sha", json!("4444444444444444444444444444444444444444"))
        .with_dispatch_inputs(&resolved);
    assert_eq!(
        old.run_title(&ctx).unwrap(),
        "e2e Test - klaud smoke dsv4-fp4-b200-vllm"
    );
    assert!(old.triggered_by(&ctx));
    let head = ctx.run_head();
    assert_eq!(head.head_branch.as_deref(), Some("main"));
    assert_eq!(
        head.head_sha.as_deref(),
        Some("4444444444444444444444444444444444444444"),
        "a dispatch runs on the tip of main, not inputs.ref"
    );
    let refused = old
        .validate_dispatch(&given(json!({"test-name": "t", "trim-conc": "maybe"})))
        .unwrap_err();
    assert_eq!(
        refused.message,
        "Provided value 'maybe' for input 'trim-conc' not in the list of allowed values"
    );
}

#[test]
fn old_sweep_skips_drafts_and_newer_runs_them() {
    let Some(dir) = fixtures() else { return };
    let labels = ["full-sweep-enabled"];
    for action in ["labeled", "synchronize"] {
        let draft = pr_event(
            action,
            true,
            &labels,
            (action == "labeled").then_some(labels[0]),
        );
        let old = load(&dir, OLD, "run-sweep.yml").plan_jobs(&draft).unwrap();
        assert!(
            old.jobs.iter().all(|j| j.decision == JobDecision::Skipped),
            "{action}: {:?}",
            old.jobs
                .iter()
                .filter(|j| j.decision != JobDecision::Skipped)
                .collect::<Vec<_>>()
        );
        assert_eq!(old.conclusion(), Some("skipped"));

        let new = load(&dir, NEW, "run-sweep.yml").plan_jobs(&draft).unwrap();
        assert_eq!(
            new.job("check-changelog").unwrap().decision,
            JobDecision::Runs,
            "{action}"
        );
        assert_ne!(new.outlook(), RunOutlook::Skipped);
        assert_eq!(new.conclusion(), None);
    }
    assert!(
        !load(&dir, OLD, "run-sweep.yml")
            .runs_on_draft("full-sweep-enabled")
            .unwrap()
    );
    assert!(
        load(&dir, NEW, "run-sweep.yml")
            .runs_on_draft("full-sweep-enabled")
            .unwrap()
    );

    // Ready for review, the old version runs too.
    let ready = pr_event("labeled", false, &labels, Some(labels[0]));
    let old = load(&dir, OLD, "run-sweep.yml").plan_jobs(&ready).unwrap();
    assert_eq!(
        old.job("check-changelog").unwrap().decision,
        JobDecision::Runs
    );
    assert_eq!(old.outlook(), RunOutlook::Runs);
    // A label nobody gates on starts a run whose every job is skipped.
    let foreign = pr_event("labeled", false, &labels, Some("documentation"));
    for version in [OLD, NEW] {
        let plan = load(&dir, version, "run-sweep.yml")
            .plan_jobs(&foreign)
            .unwrap();
        assert_eq!(plan.conclusion(), Some("skipped"), "{version}");
    }
    // A PR from a fork: the newer version only sweeps same-repository heads.
    let mut fork = ready.github().clone();
    fork["event"]["pull_request"]["head"]["repo"]["full_name"] = json!("someone/InferenceX");
    let fork = EventContext::from_github(fork).unwrap();
    let plan = load(&dir, NEW, "run-sweep.yml").plan_jobs(&fork).unwrap();
    assert_eq!(
        plan.job("check-changelog").unwrap().decision,
        JobDecision::Skipped
    );
}

#[test]
fn sweep_triggers_only_on_its_types_and_the_changelog_path() {
    let Some(dir) = fixtures() else { return };
    for version in [OLD, NEW] {
        let wf = load(&dir, version, "run-sweep.yml");
        let changelog = changelog_path(version);
        for action in ["synchronize", "labeled", "unlabeled"] {
            let ctx = pr_event(action, false, &[], Some("full-sweep-enabled"))
                .with_changed_files([changelog, "configs/nvidia-master.yaml"]);
            assert!(wf.triggered_by(&ctx), "{version} {action}");
            let untouched = pr_event(action, false, &[], Some("full-sweep-enabled"))
                .with_changed_files(["configs/nvidia-master.yaml"]);
            assert!(
                !wf.triggered_by(&untouched),
                "{version} {action} without the changelog"
            );
        }
        let opened = pr_event("opened", false, &[], None).with_changed_files([changelog]);
        assert!(
            !wf.triggered_by(&opened),
            "{version}: opened is not a sweep type"
        );
        let ready = pr_event("ready_for_review", false, &[], None).with_changed_files([changelog]);
        assert_eq!(
            wf.triggered_by(&ready),
            version == OLD,
            "{version}: ready_for_review"
        );
    }
}

#[test]
fn sweep_concurrency_groups_per_event() {
    let Some(dir) = fixtures() else { return };
    for version in [OLD, NEW] {
        let wf = load(&dir, version, "run-sweep.yml");
        let ours = wf
            .concurrency(&pr_event("labeled", false, &[], Some("full-sweep-enabled")))
            .unwrap()
            .unwrap();
        assert_eq!(ours.group, "sweep-3301-active", "{version}");
        assert!(ours.cancel_in_progress);
        let push = wf
            .concurrency(&pr_event("synchronize", false, &[], None))
            .unwrap()
            .unwrap();
        assert!(
            push.same_group(&ours),
            "{version}: a push cancels the labelled run"
        );
        let foreign = wf
            .concurrency(&pr_event("labeled", false, &[], Some("documentation")))
            .unwrap()
            .unwrap();
        assert_eq!(foreign.group, "sweep-3301-18000000001", "{version}");
        assert!(
            !foreign.same_group(&ours),
            "{version}: a foreign label never cancels a sweep"
        );
    }
    let old = load(&dir, OLD, "run-sweep.yml");
    let push = EventContext::new("push", json!({"ref": "refs/heads/main", "after": "abc"}))
        .unwrap()
        .with_github("run_id", json!(7));
    let group = old.concurrency(&push).unwrap().unwrap();
    assert_eq!(group.group, "sweep-abc-active");
    assert!(group.cancel_in_progress);
}

#[test]
fn only_the_newer_sweep_uploads_the_klaud_manifest() {
    let Some(dir) = fixtures() else { return };
    let old = load(&dir, OLD, "run-sweep.yml");
    let new = load(&dir, NEW, "run-sweep.yml");
    let old_resolve = resolver(&dir, OLD);
    let new_resolve = resolver(&dir, NEW);
    assert!(
        !old.may_upload("klaud-sweep-manifest", &old_resolve)
            .unwrap()
    );
    assert!(
        new.may_upload("klaud-sweep-manifest", &new_resolve)
            .unwrap()
    );
    let manifest = new
        .artifact_uploads(&new_resolve)
        .unwrap()
        .into_iter()
        .find(|u| u.literal_name() == Some("klaud-sweep-manifest"))
        .unwrap();
    assert_eq!(manifest.job, "upload-changelog-metadata");
    let klaud = pr_event(
        "labeled",
        false,
        &["full-sweep-enabled"],
        Some("full-sweep-enabled"),
    );
    assert_eq!(
        manifest.condition_holds(&klaud).unwrap(),
        Some(true),
        "Klaud's own PR"
    );
    let mut human = klaud.github().clone();
    human["event"]["pull_request"]["user"]["login"] = json!("someone");
    let human = EventContext::from_github(human).unwrap();
    assert_eq!(
        manifest.condition_holds(&human).unwrap(),
        Some(false),
        "a human's PR"
    );

    for (wf, resolve, version) in [(&old, &old_resolve, OLD), (&new, &new_resolve, NEW)] {
        let uploads = wf.artifact_uploads(resolve).unwrap();
        for name in [
            "bmk_dsr1_1k1k_fp4_sglang",
            "bmk_agentic_dsv4",
            "eval_dsr1_fp4_lm-eval_gsm8k_1",
            "run-stats",
        ] {
            assert!(
                uploads.iter().any(|u| u.may_be_named(name)),
                "{version}: {name}"
            );
        }
        // The collect templates are fixtures only in the older version.
        let collected = ["results_bmk", "eval_results_all"];
        for name in collected {
            assert_eq!(
                uploads.iter().any(|u| u.may_be_named(name)),
                version == OLD,
                "{version}: {name}"
            );
        }
        assert!(
            !uploads.iter().any(|u| u.may_be_named("klaud-unknown")),
            "{version}"
        );
        let via_template = uploads
            .iter()
            .find(|u| u.workflow.ends_with("benchmark-multinode-tmpl.yml"))
            .unwrap_or_else(|| panic!("{version}: multinode template followed"));
        assert!(via_template.via[0].starts_with("run-sweep.yml#"));
    }
}
