//! The example Actions workflow (`configs/klaud-wave.workflow.yml`) parses
//! as GitHub reads it (`klaud-workflows`, over github-actions-models) and
//! completes a lifecycle: a cached binary instead of a build per run, a
//! `--wait`, the local checkout, and diagnostics uploaded whatever happens.

use std::path::Path;

fn workflow_text() -> String {
    std::fs::read_to_string(
        Path::new(crate::support::REPO_ROOT).join("configs/klaud-wave.workflow.yml"),
    )
    .expect("the example workflow")
}

fn steps(text: &str) -> Vec<yaml_serde::Value> {
    let doc: yaml_serde::Value = yaml_serde::from_str(text).expect("YAML");
    doc["jobs"]["wave"]["steps"]
        .as_sequence()
        .expect("steps of the wave job")
        .clone()
}

fn field<'a>(step: &'a yaml_serde::Value, key: &str) -> &'a str {
    step.get(key).and_then(|v| v.as_str()).unwrap_or("")
}

#[test]
fn the_example_workflow_parses_and_uploads_diagnostics_always() {
    let text = workflow_text();
    let workflow =
        klaud_workflows::Workflow::parse(".github/workflows/klaud-wave.yml", &text).expect("valid");
    let uploads = workflow.artifact_uploads(&|_| None).expect("uploads");
    let diagnostics = uploads
        .iter()
        .find(|u| u.name.starts_with("klaud-diagnostics"))
        .expect("a diagnostics artifact");
    assert_eq!(
        diagnostics.condition.as_deref().map(str::trim),
        Some("always()"),
        "diagnostics are uploaded even when the wave fails"
    );
}

#[test]
fn the_example_workflow_builds_klaud_only_on_a_cache_miss_and_waits() {
    let text = workflow_text();
    let steps = steps(&text);
    let cache = steps
        .iter()
        .find(|s| field(s, "uses").starts_with("actions/cache@"))
        .expect("the binary is cached");
    let cache_id = field(cache, "id");
    assert!(!cache_id.is_empty());
    let key = cache["with"]["key"].as_str().expect("a cache key");
    assert!(key.contains("KLAUD_REV"), "keyed on the version: {key}");
    for step in steps
        .iter()
        .filter(|s| field(s, "run").contains("cargo install"))
    {
        let condition = field(step, "if");
        assert!(
            condition.contains(&format!("steps.{cache_id}.outputs.cache-hit")),
            "cargo install runs only on a cache miss: {condition:?}"
        );
    }
    let wave = steps
        .iter()
        .map(|s| field(s, "run"))
        .find(|r| r.contains("klaud wave"))
        .expect("a wave step");
    for flag in ["--wait ", "--checkout ", "--store ", "--config "] {
        assert!(wave.contains(flag), "the wave passes {flag}: {wave}");
    }
    assert!(
        !wave.contains("--wait 0"),
        "a wave that does not wait advances one step per run"
    );
    assert!(text.contains("Expected runs per candidate"));
}
