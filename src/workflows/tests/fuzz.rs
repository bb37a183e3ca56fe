//! Fuzzing on stable of the workflow reader: property tests feed
//! [`Workflow::parse`] arbitrary text, mutations of the real InferenceX
//! workflow files (`/work/shared/fixtures/inferencex/workflows/`, the
//! corpus; without them the mutation target skips loudly, and fails when
//! `CI` is set) and `${{ }}` expressions in a run name, then ask every
//! question Klaud asks of a workflow (run title, triggers, job plan,
//! drafts, dispatch inputs). Nothing may panic, and what comes back is
//! bounded by the input.
//!
//! The default case count keeps CI fast; a longer run:
//!
//! ```text
//! PROPTEST_CASES=20000 cargo test -p klaud-workflows --test fuzz
//! ```

use std::path::Path;

use klaud_workflows::{EventContext, Workflow};
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::json;

fn config(default_cases: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases);
    Config {
        cases,
        max_shrink_iters: 1024,
        ..Config::default()
    }
}

/// The real workflow files of both fixture versions (empty without them).
fn corpus() -> Vec<(String, String)> {
    let dir = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/inferencex/workflows"
    ));
    let mut files = Vec::new();
    for version in ["843c6254", "newer"] {
        let Ok(entries) = std::fs::read_dir(dir.join(version)) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "yml" || e == "yaml")
                && let Ok(text) = std::fs::read_to_string(&path)
            {
                let name = path
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                files.push((name, text));
            }
        }
    }
    if files.is_empty() {
        assert!(
            std::env::var_os("CI").is_none(),
            "InferenceX workflow fixtures missing at {} (required when CI is set)",
            dir.display()
        );
        eprintln!(
            "SKIPPED: InferenceX workflow fixtures not found at {}",
            dir.display()
        );
    }
    files
}

/// Asks a parsed workflow everything Klaud asks, under a dispatch, a push
/// and a pull request event.
fn exercise(workflow: &Workflow, input_len: usize) -> Result<(), TestCaseError> {
    prop_assert!(workflow.job_ids().len() <= input_len);
    let events = [
        (
            "workflow_dispatch",
            json!({"ref": "refs/heads/main", "inputs": {"test-name": "x"}}),
        ),
        ("push", json!({"ref": "refs/heads/main", "after": "abc"})),
        (
            "pull_request",
            json!({"action": "labeled", "number": 7, "label": {"name": "full-sweep-fail-fast"},
                   "pull_request": {"number": 7, "draft": true, "head": {"ref": "klaud/x", "sha": "abc"},
                                    "base": {"ref": "main"}, "labels": [{"name": "full-sweep-fail-fast"}]}}),
        ),
    ];
    for (name, event) in events {
        let Ok(ctx) = EventContext::new(name, event) else {
            continue;
        };
        if let Ok(title) = workflow.run_title(&ctx) {
            // A title is the run name evaluated: bounded by the file and
            // the event, never blown up by the expression.
            prop_assert!(title.len() <= input_len + 4096, "{} bytes", title.len());
        }
        let _ = workflow.triggered_by(&ctx);
        if let Ok(plan) = workflow.plan_jobs(&ctx) {
            let _ = plan.outlook();
        }
    }
    let _ = workflow.runs_on_draft("full-sweep-fail-fast");
    let _ = workflow.dispatch_inputs();
    let _ = workflow.jobs_running("x");
    Ok(())
}

/// A real file with whole lines dropped, doubled or swapped, or a byte
/// replaced.
fn mutated_real() -> impl Strategy<Value = (String, String)> {
    let files = corpus();
    let files = if files.is_empty() {
        vec![("empty.yml".to_owned(), String::new())]
    } else {
        files
    };
    (
        0..files.len(),
        proptest::collection::vec((0u8..4, any::<u16>(), any::<char>()), 1..8),
    )
        .prop_map(move |(i, edits)| {
            let (name, text) = &files[i];
            let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
            for (kind, at, c) in edits {
                if lines.is_empty() {
                    break;
                }
                let at = usize::from(at) % lines.len();
                match kind {
                    0 => {
                        lines.remove(at);
                    }
                    1 => {
                        let line = lines[at].clone();
                        lines.insert(at, line);
                    }
                    2 => {
                        let other = (at * 7 + 3) % lines.len();
                        lines.swap(at, other);
                    }
                    _ => {
                        let line = &mut lines[at];
                        let cut = line
                            .char_indices()
                            .nth(at % (line.len() + 1))
                            .map_or(line.len(), |(i, _)| i);
                        line.insert(cut, c);
                    }
                }
            }
            (name.clone(), lines.join("\n"))
        })
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn fuzz_mutated_real_workflows_never_panic(case in mutated_real()) {
        let (name, text) = case;
        if let Ok(workflow) = Workflow::parse(&name, &text) {
            exercise(&workflow, text.len())?;
        }
    }

    #[test]
    fn fuzz_arbitrary_text_is_refused_or_read(text in "\\PC{0,600}") {
        if let Ok(workflow) = Workflow::parse("fuzz.yml", &text) {
            exercise(&workflow, text.len())?;
        }
    }

    #[test]
    fn fuzz_run_name_expressions_evaluate_or_fail_cleanly(
        expr in "([a-z_.]{1,12}|'[a-z ]{0,8}'|[0-9]{1,4}|[()!=<>&|,\\[\\]*]|format|contains|startsWith|join|toJSON|fromJSON|github|inputs|needs| ){1,30}"
    ) {
        let text = format!(
            "name: fuzz\nrun-name: \"${{{{ {} }}}}\"\non:\n  workflow_dispatch:\n  push:\njobs:\n  a:\n    runs-on: x\n    steps:\n      - run: y\n",
            expr.replace('"', "'")
        );
        if let Ok(workflow) = Workflow::parse("fuzz.yml", &text) {
            exercise(&workflow, text.len())?;
        }
    }
}
