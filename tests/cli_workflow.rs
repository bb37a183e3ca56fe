//! The example Actions workflow (`configs/klaud-wave.workflow.yml`) parses
//! as GitHub reads it (`klaud-workflows`, over github-actions-models) and
//! runs light passes: a cached binary instead of a build per run, the store
//! kept between runs, `--wait 0s`, a pass when a smoke or sweep ends or a
//! maintainer comments, and diagnostics uploaded whatever happens. Every
//! workflow file Klaud ships is hardened (zizmor checks the same in CI).

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
fn the_example_workflow_builds_klaud_only_on_a_cache_miss_and_runs_light_passes() {
    let text = workflow_text();
    let steps = steps(&text);
    let cache = steps
        .iter()
        .find(|s| field(s, "uses").starts_with("actions/cache@") && !field(s, "id").is_empty())
        .expect("the binary is cached");
    let cache_id = field(cache, "id");
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
    // The store is kept between passes: a new entry per run, the newest restored.
    let store = steps
        .iter()
        .find(|s| {
            field(s, "uses").starts_with("actions/cache@") && field(s, "name").contains("store")
        })
        .expect("the store is cached");
    assert!(
        store["with"]["key"]
            .as_str()
            .unwrap()
            .contains("github.run_id")
    );
    assert_eq!(store["with"]["restore-keys"].as_str(), Some("klaud-store-"));
    let wave = steps
        .iter()
        .map(|s| field(s, "run"))
        .find(|r| r.contains("/bin/klaud\" wave"))
        .expect("a wave step");
    for flag in [
        "--wait 0s",
        "--checkout ",
        "--store \"$KLAUD_STORE\"",
        "--config ",
    ] {
        assert!(wave.contains(flag), "the wave passes {flag}: {wave}");
    }
}

#[test]
fn the_example_workflow_passes_when_a_smoke_or_sweep_ends_on_commands_and_on_a_short_schedule() {
    let doc: yaml_serde::Value = yaml_serde::from_str(&workflow_text()).expect("YAML");
    let on = &doc["on"];
    assert_eq!(
        on["workflow_run"]["workflows"],
        yaml_serde::from_str::<yaml_serde::Value>("[\"End-to-End Tests\", \"Run Sweep\"]").unwrap()
    );
    assert_eq!(on["workflow_run"]["types"][0].as_str(), Some("completed"));
    assert_eq!(on["issue_comment"]["types"][0].as_str(), Some("created"));
    let cron = on["schedule"][0]["cron"].as_str().expect("a schedule");
    // Twice an hour at most 30 minutes apart: klaud init's 3h lease covers six.
    assert_eq!(cron, "7,37 * * * *");
    let condition = doc["jobs"]["wave"]["if"]
        .as_str()
        .expect("a comment filter");
    assert!(condition.contains("'/klaud'") && condition.contains("author_association"));
}

/// Whether the shipped workflow's pass runs for `event` with `payload`, as
/// GitHub decides it (the job's `if:` evaluated by `klaud-workflows`).
fn pass_runs_for(event: &str, payload: serde_json::Value) -> bool {
    use klaud_workflows::{EventContext, JobDecision, Workflow};
    let workflow =
        Workflow::parse(".github/workflows/klaud-wave.yml", &workflow_text()).expect("valid");
    let ctx = EventContext::new(event, payload).expect("context");
    assert!(workflow.triggered_by(&ctx), "{event} starts the workflow");
    let plan = workflow.plan_jobs(&ctx).expect("plan");
    match plan.job("wave").expect("the wave job").decision {
        JobDecision::Runs => true,
        JobDecision::Skipped => false,
        other => panic!("{event}: the decision must be known, got {other:?}"),
    }
}

#[test]
fn the_example_workflow_wakes_on_commands_and_dashboard_edits_by_people_only() {
    use serde_json::json;
    let comment = |body: &str, association: &str| {
        json!({"action": "created",
               "issue": {"number": 7, "pull_request": {"url": "u"}, "body": ""},
               "comment": {"body": body, "author_association": association},
               "sender": {"login": "alice", "type": "User"}})
    };
    assert!(pass_runs_for(
        "issue_comment",
        comment("/klaud retry", "MEMBER")
    ));
    assert!(!pass_runs_for(
        "issue_comment",
        comment("LGTM, thanks", "MEMBER")
    ));
    assert!(!pass_runs_for(
        "issue_comment",
        comment("/klaud retry", "NONE")
    ));
    let edit = |body: &str, kind: &str| {
        json!({"action": "edited",
               "issue": {"number": 3, "body": body},
               "sender": {"login": "someone", "type": kind}})
    };
    let dashboard = "<!-- klaud:dashboard -->\n- [x] <!-- retry:abc --> retry";
    assert!(
        pass_runs_for("issues", edit(dashboard, "User")),
        "a person ticking a box on the dashboard issue starts a pass"
    );
    assert!(
        !pass_runs_for("issues", edit(dashboard, "Bot")),
        "Klaud's own edit of the dashboard issue starts nothing"
    );
    assert!(
        !pass_runs_for("issues", edit("an unrelated issue", "User")),
        "edits of other issues start nothing"
    );
    assert!(pass_runs_for(
        "schedule",
        json!({"schedule": "7,37 * * * *"})
    ));
}

#[test]
fn a_skipped_run_never_joins_the_pass_concurrency_group() {
    // A workflow-level group would let a skipped comment run replace a
    // pass that waits; the job-level group is taken only by a job that runs.
    let doc: yaml_serde::Value = yaml_serde::from_str(&workflow_text()).expect("YAML");
    assert!(doc.get("concurrency").is_none(), "no workflow-level group");
    assert_eq!(
        doc["jobs"]["wave"]["concurrency"]["group"].as_str(),
        Some("klaud-wave")
    );
    let signoff: yaml_serde::Value = yaml_serde::from_str(
        &std::fs::read_to_string(
            Path::new(crate::support::REPO_ROOT).join("configs/klaud-signoff.workflow.yml"),
        )
        .expect("the sign-off workflow"),
    )
    .expect("YAML");
    assert!(
        signoff.get("concurrency").is_none(),
        "no workflow-level group"
    );
    assert!(signoff["jobs"]["verify"]["concurrency"]["group"].is_string());
}

#[test]
fn an_outage_doctor_reports_never_stops_the_pass() {
    // Doctor exits non-zero when only the results API or one registry is
    // down; the wave holds only the families that need it, so the pass must
    // run whatever doctor said, and the step summary says what doctor found.
    let steps = steps(&workflow_text());
    let position = |needle: &str| {
        steps
            .iter()
            .position(|s| field(s, "run").contains(needle))
            .unwrap_or_else(|| panic!("a step running {needle}"))
    };
    let doctor = &steps[position("klaud\" doctor")];
    assert_eq!(
        doctor["continue-on-error"].as_bool(),
        Some(true),
        "a failing doctor does not fail the job"
    );
    let doctor_id = field(doctor, "id");
    assert!(!doctor_id.is_empty(), "doctor's outcome can be read");
    let wave_at = position("klaud\" wave");
    assert!(wave_at > position("klaud\" doctor"));
    // Every step between doctor and the pass, and the pass itself, runs
    // after a failed doctor: no condition on doctor's success, and a
    // failing step in between does not fail the job.
    for step in &steps[position("klaud\" doctor") + 1..=wave_at] {
        let condition = field(step, "if");
        assert!(
            !condition.contains("success()") && !condition.contains(".outcome == 'success'"),
            "{condition}"
        );
        if !std::ptr::eq(step, &steps[wave_at]) {
            assert_eq!(step["continue-on-error"].as_bool(), Some(true), "{step:?}");
        }
    }
    assert!(
        field(&steps[wave_at], "if").is_empty(),
        "the pass runs after any doctor outcome"
    );
    let report = steps
        .iter()
        .find(|s| field(s, "if").contains(&format!("steps.{doctor_id}.outcome == 'failure'")))
        .expect("a step reports doctor's findings");
    assert!(field(report, "run").contains("GITHUB_STEP_SUMMARY"));
}

#[test]
fn both_shipped_workflows_build_one_binary_per_version() {
    // actions/cache matches on the key and the path: the same pair in both
    // workflows means a version is compiled once for both.
    let cache_of = |file: &str, job: &str| {
        let text = std::fs::read_to_string(Path::new(crate::support::REPO_ROOT).join(file))
            .expect("workflow");
        let doc: yaml_serde::Value = yaml_serde::from_str(&text).expect("YAML");
        let env_root = doc["jobs"][job]["env"]["KLAUD_ROOT"]
            .as_str()
            .or_else(|| doc["env"]["KLAUD_ROOT"].as_str())
            .expect("KLAUD_ROOT")
            .to_owned();
        let step = doc["jobs"][job]["steps"]
            .as_sequence()
            .expect("steps")
            .iter()
            .find(|s| field(s, "id") == "klaud-bin")
            .expect("the binary cache")
            .clone();
        (
            step["with"]["key"].as_str().expect("key").to_owned(),
            step["with"]["path"]
                .as_str()
                .expect("path")
                .replace("env.KLAUD_ROOT", &env_root),
        )
    };
    assert_eq!(
        cache_of("configs/klaud-wave.workflow.yml", "wave"),
        cache_of("configs/klaud-signoff.workflow.yml", "verify")
    );
}

#[test]
fn the_workflows_klaud_ships_are_hardened() {
    let root = Path::new(crate::support::REPO_ROOT);
    let pinned = regex::Regex::new(r"^[\w.-]+/[\w.-]+@[0-9a-f]{40}$").unwrap();
    for file in [
        "configs/klaud-wave.workflow.yml",
        "configs/demo/.github/workflows/e2e-tests.yml",
        "configs/demo/.github/workflows/run-sweep.yml",
    ] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let doc: yaml_serde::Value = yaml_serde::from_str(&text).expect("YAML");
        let jobs = doc["jobs"].as_mapping().expect("jobs");
        for (job, body) in jobs {
            for step in body["steps"].as_sequence().into_iter().flatten() {
                let uses = field(step, "uses");
                if !uses.is_empty() {
                    assert!(
                        pinned.is_match(uses),
                        "{file}: {uses} is not pinned to a commit"
                    );
                    let line = text.lines().find(|l| l.contains(uses)).unwrap();
                    assert!(
                        line.contains(" # "),
                        "{file}: {uses} has no version comment"
                    );
                }
                assert!(
                    !field(step, "run").contains("${{"),
                    "{file} {job:?}: a template expanded inside run: {}",
                    field(step, "run")
                );
                if uses.starts_with("actions/checkout@") {
                    assert_eq!(
                        step["with"]["persist-credentials"].as_bool(),
                        Some(false),
                        "{file} {job:?}"
                    );
                }
            }
        }
    }
    let doc: yaml_serde::Value = yaml_serde::from_str(&workflow_text()).expect("YAML");
    assert!(
        doc["permissions"]
            .as_mapping()
            .is_some_and(|m| m.is_empty())
    );
    assert_eq!(
        doc["jobs"]["wave"]["permissions"],
        yaml_serde::from_str::<yaml_serde::Value>("contents: read").unwrap()
    );
}

/// The shipped workflow runs `klaud wave --json > wave.json`: the job's
/// log (stderr) and its step summary still say in a few lines what the
/// pass did, with the GitHub requests it cost; stdout stays the JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_says_what_it_did_in_the_log_and_the_step_summary() {
    use klaud_sandbox::stack::BOT_TOKEN;
    let stack = crate::support::Harness::demo()
        .demo_ci()
        .poll(std::time::Duration::from_millis(20))
        .start_stack()
        .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = crate::support::write_klaud_toml(&stack, dir.path(), "");
    let summary = dir.path().join("summary.md");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_klaud"));
    cmd.env_remove("GITHUB_TOKEN")
        .env_remove("GH_TOKEN")
        .env_remove("RUST_LOG")
        .env("KLAUD_GITHUB_TOKEN", BOT_TOKEN)
        .env("GITHUB_STEP_SUMMARY", &summary)
        .arg("wave")
        .arg("--config")
        .arg(&config)
        .arg("--store")
        .arg(dir.path().join("store"))
        .args([
            "--json",
            "--wait",
            "0s",
            "--max",
            "1",
            "--log-format",
            "github",
        ]);
    for host in ["docker.io", "nvcr.io", "hub.docker.com"] {
        cmd.args(["--mirror", &format!("{host}={}", stack.registry_url)]);
    }
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("klaud wave"))
        .await
        .expect("wave");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(
        json["candidates"].as_array().map(Vec::len),
        Some(1),
        "{json:#}"
    );

    let planned = stderr
        .lines()
        .find(|l| l.starts_with("wave at "))
        .unwrap_or_else(|| panic!("no brief in the log: {stderr}"));
    assert!(planned.contains(" families planned, "), "{planned}");
    assert!(stderr.contains("candidates: 1 worked on; "), "{stderr}");
    let requests = stderr
        .lines()
        .find(|l| l.starts_with("GitHub: "))
        .unwrap_or_else(|| panic!("no request count: {stderr}"));
    let charged: u64 = requests
        .trim_start_matches("GitHub: ")
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{requests}"));
    assert!(
        charged > 0,
        "a pass that opened a PR asked GitHub: {requests}"
    );

    let markdown = std::fs::read_to_string(&summary).expect("step summary");
    assert!(markdown.contains("- wave at "), "{markdown}");
    assert!(markdown.contains("- GitHub: "), "{markdown}");
    assert!(markdown.contains("| Outcome / 结果 |"), "{markdown}");
}
