//! Klaud's questions asked of the real InferenceX workflow files in both
//! versions (`../shared/fixtures/inferencex/workflows/{843c6254,newer}/`):
//! the smoke inputs it may send, the titles its runs carry and whether the
//! sweep runs on drafts.

use std::path::PathBuf;

use klaud_claims::PullNumber;
use klaud_lifecycle::engine::{Pull, PullState};
use klaud_lifecycle::workflow_contract::{
    DraftPolicy, Workflow, klaud_smoke_inputs, smoke_dispatch, sweep_runs_on_drafts, sweep_title,
};

/// A workflow file of one version, or `None` after a loud SKIP when the
/// fixtures are absent outside CI (in CI their absence fails the test).
fn workflow(version: &str, file: &str) -> Option<Workflow> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/inferencex/workflows")
        .join(version)
        .join(file);
    match std::fs::read_to_string(&path) {
        Ok(text) => Some(Workflow::parse(file, &text).expect("the real file parses")),
        Err(e) if std::env::var_os("CI").is_some() => {
            panic!("fixture {} is missing in CI: {e}", path.display())
        }
        Err(e) => {
            eprintln!(
                "\n*** SKIPPED: fixture {} unavailable ({e}); test not run ***\n",
                path.display()
            );
            None
        }
    }
}

const HEAD: &str = "0123456789abcdef0123456789abcdef01234567";

#[test]
fn smoke_inputs_follow_each_versions_declarations() {
    for (version, has_klaud_run) in [("843c6254", false), ("newer", true)] {
        let Some(w) = workflow(version, "e2e-tests.yml") else {
            return;
        };
        let wanted = klaud_smoke_inputs(
            HEAD,
            "test-config --config-files configs/nvidia-master.yaml --config-keys k --smoke",
            "klaud-7-cand",
        );
        let d = smoke_dispatch(Some(&w), &wanted, "main", "Klaud-Cold", "unused")
            .unwrap_or_else(|e| panic!("{version}: {e}"));
        assert_eq!(
            d.inputs.contains_key("klaud-run"),
            has_klaud_run,
            "{version}: {:?}",
            d.inputs
        );
        for name in ["ref", "generate-cli-command", "test-name", "fail-fast"] {
            assert!(d.inputs.contains_key(name), "{version}: {name}");
        }
        assert_eq!(d.title, "e2e Test - klaud-7-cand", "{version}");
    }
}

#[test]
fn the_sweep_title_and_draft_rule_follow_each_version() {
    let pull = Pull {
        number: PullNumber::from(12),
        state: PullState::Open,
        draft: true,
        title: "[Klaud Cold] Update k SGLang image to v1".into(),
        body: String::new(),
        head_ref: "klaud/auto-x".into(),
        head_sha: HEAD.parse().unwrap(),
        head_repo: Some("SemiAnalysisAI/InferenceX".into()),
        author: Some("Klaud-Cold".into()),
        labels: vec!["full-sweep-fail-fast".into()],
        html_url: String::new(),
        mergeable: None,
        node_id: None,
    };
    let label = "full-sweep-fail-fast";
    for (version, on_drafts) in [("843c6254", false), ("newer", true)] {
        let Some(w) = workflow(version, "run-sweep.yml") else {
            return;
        };
        let title = sweep_title(Some(&w), &pull, "main", "SemiAnalysisAI/InferenceX", label)
            .expect("evaluates")
            .expect("a title");
        assert_eq!(title, format!("Run Sweep - {}", pull.title), "{version}");
        assert_eq!(
            sweep_runs_on_drafts(Some(&w), label, DraftPolicy::Auto).expect("answers"),
            on_drafts,
            "{version}"
        );
    }
}
