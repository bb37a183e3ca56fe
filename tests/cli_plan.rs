//! `klaud plan` as a user runs it, against the sandbox registry simulator.

use crate::support;

use std::process::Command;
use std::sync::Arc;

use klaud_sandbox::registry::{RegistrySim, router};

const SEED: &str = r#"{"repositories": {
  "lmsysorg/sglang": {"tags": {
    "v0.5.16-cu130": {"created": "2026-01-01T00:00:00Z"},
    "v0.5.17-cu130": {"created": "2026-02-01T00:00:00Z"}
  }},
  "vllm/vllm-openai": {"tags": {
    "v0.25.0": {"created": "2026-01-01T00:00:00Z", "pushed": "2026-01-01T00:00:00Z"}
  }}
}}"#;

/// Serves the simulator on a thread of its own; returns its URL.
fn serve() -> String {
    serve_seed(SEED)
}

/// [`serve`] with another registry seed.
fn serve_seed(seed: &'static str) -> String {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let sim = Arc::new(RegistrySim::from_seed_json(seed).unwrap());
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            sender.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, router(sim)).await.unwrap();
        });
    });
    format!("http://{}", receiver.recv().unwrap())
}

#[test]
fn plan_json_reports_families_candidates_and_requests() {
    let url = serve();
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/../../configs/demo");
    let output = Command::new(env!("CARGO_BIN_EXE_klaud"))
        .args(["plan", "--checkout", demo, "--json", "--max", "3"])
        .arg("--allow-unresolved")
        .args(["--mirror", &format!("docker.io={url}")])
        .args(["--mirror", &format!("nvcr.io={url}")])
        .args(["--mirror", &format!("hub.docker.com={url}")])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let families = report["families"].as_array().unwrap();
    assert_eq!(families.len(), 7);
    for family in families {
        for key in [
            "family",
            "status",
            "current",
            "candidate",
            "clock",
            "reasons",
        ] {
            assert!(family.get(key).is_some(), "{key} missing in {family}");
        }
    }
    let sglang = families
        .iter()
        .find(|f| {
            f["family"]
                .as_str()
                .unwrap()
                .ends_with(":demo-fp4-b200-sglang")
        })
        .unwrap();
    assert_eq!(sglang["status"], "stale-newer");
    assert!(
        sglang["candidate"]["image"]
            .as_str()
            .unwrap()
            .starts_with("lmsysorg/sglang:v0.5.17-cu130@sha256:")
    );
    // The trt family's registry has no such repository: only it fails.
    let trt = families
        .iter()
        .find(|f| {
            f["family"]
                .as_str()
                .unwrap()
                .ends_with(":demo-fp8-h200-trt")
        })
        .unwrap();
    assert_eq!(trt["status"], "error", "{trt}");
    assert!(trt["reasons"].to_string().contains("404"), "{trt}");
    let candidates = report["candidates"].as_array().unwrap();
    assert_eq!(candidates[0]["family"], sglang["family"]);
    for key in [
        "manifest_head",
        "manifest_get",
        "blob_get",
        "tags_list",
        "token",
        "hub_api",
        "other",
    ] {
        assert!(report["requests"][key].is_u64(), "{key}");
    }
    assert!(report["elapsed_ms"].is_u64());
}

#[test]
fn plan_fails_when_a_family_cannot_be_resolved_unless_told_to_allow_it() {
    let url = serve();
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/../../configs/demo");
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_klaud"))
            .args(["plan", "--checkout", demo])
            .args(extra)
            .args(["--mirror", &format!("docker.io={url}")])
            .args(["--mirror", &format!("nvcr.io={url}")])
            .args(["--mirror", &format!("hub.docker.com={url}")])
            .output()
            .unwrap()
    };
    // The simulator has no repository for two of the demo families' images.
    let gate = run(&[]);
    let stderr = String::from_utf8_lossy(&gate.stderr);
    assert_eq!(gate.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("2 of 7 families could not be resolved (2 with a registry error)"),
        "{stderr}"
    );
    assert!(
        String::from_utf8_lossy(&gate.stdout).contains("demo-fp8-h200-trt"),
        "the table is still printed"
    );
    let tolerated = run(&["--allow-unresolved"]);
    let stderr = String::from_utf8_lossy(&tolerated.stderr);
    assert!(tolerated.status.success(), "{stderr}");
    assert!(
        stderr.contains("2 of 7 families could not be resolved"),
        "{stderr}"
    );
}

/// A key written twice in a master costs its family alone: the plan names
/// it (with both lines) and plans every other family, and the gate fails
/// naming it unless `--allow-unresolved` (or its alias) is given.
#[test]
fn plan_names_a_duplicated_family_plans_the_rest_and_fails_the_gate() {
    let url = serve();
    let dir = tempfile::tempdir().unwrap();
    support::copy_tree(
        std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../configs/demo")),
        dir.path(),
    );
    let master = dir.path().join("configs/nvidia-master.yaml");
    let text = std::fs::read_to_string(&master).unwrap();
    let start = text.find("demo-fp8-h200-trt:").unwrap();
    let end = text[start + 1..]
        .find("\ndemo-")
        .map_or(text.len(), |i| start + 2 + i);
    let entry = text[start..end].to_owned();
    std::fs::write(&master, format!("{text}\n{entry}")).unwrap();
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_klaud"))
            .args(["plan", "--checkout", dir.path().to_str().unwrap(), "--json"])
            .args(extra)
            .args(["--mirror", &format!("docker.io={url}")])
            .args(["--mirror", &format!("nvcr.io={url}")])
            .args(["--mirror", &format!("hub.docker.com={url}")])
            .output()
            .unwrap()
    };
    let gate = run(&[]);
    let stderr = String::from_utf8_lossy(&gate.stderr);
    assert_eq!(gate.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("1 unreadable: configs/nvidia-master.yaml:demo-fp8-h200-trt"),
        "{stderr}"
    );
    let report: serde_json::Value = serde_json::from_slice(&gate.stdout).unwrap();
    assert_eq!(report["families"].as_array().map(Vec::len), Some(6));
    let unreadable = report["unreadable"].to_string();
    assert!(
        unreadable.contains("duplicate key \\\"demo-fp8-h200-trt\\\" (first defined on line"),
        "{unreadable}"
    );
    let tolerated = run(&["--allow-unreadable"]);
    assert!(
        tolerated.status.success(),
        "{}",
        String::from_utf8_lossy(&tolerated.stderr)
    );
}

#[test]
fn plan_refuses_a_bad_mirror_flag() {
    let output = Command::new(env!("CARGO_BIN_EXE_klaud"))
        .args([
            "plan",
            "--checkout",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../../configs/demo"),
            "--mirror",
            "docker.io",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("HOST=URL"));
}

#[test]
fn plan_shows_families_that_share_recipes_as_a_group() {
    let url = serve();
    let dir = tempfile::tempdir().unwrap();
    let demo = std::path::Path::new(crate::support::REPO_ROOT).join("configs/demo");
    support::copy_tree(&demo, dir.path());
    // A twin of the disagg family that runs the same recipes.
    let master = dir.path().join("configs/nvidia-master.yaml");
    let text = std::fs::read_to_string(&master).unwrap();
    let start = text.find("demo-fp4-gb200-dynamo-vllm-disagg:").unwrap();
    let twin = text[start..].replacen(
        "demo-fp4-gb200-dynamo-vllm-disagg:",
        "demo-fp4-gb200-dynamo-vllm-disagg-twin:",
        1,
    );
    std::fs::write(&master, format!("{text}\n{twin}")).unwrap();
    let run = |json: bool| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_klaud"));
        command
            .args(["plan", "--checkout", dir.path().to_str().unwrap()])
            .arg("--allow-unresolved")
            .args(["--mirror", &format!("docker.io={url}")])
            .args(["--mirror", &format!("nvcr.io={url}")])
            .args(["--mirror", &format!("hub.docker.com={url}")]);
        if json {
            command.arg("--json");
        }
        let output = command.output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    };
    let report: serde_json::Value = serde_json::from_str(&run(true)).unwrap();
    let groups = report["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{groups:?}");
    assert_eq!(
        groups[0]["keys"],
        serde_json::json!([
            "demo-fp4-gb200-dynamo-vllm-disagg",
            "demo-fp4-gb200-dynamo-vllm-disagg-twin"
        ])
    );
    assert_eq!(groups[0]["same_image"], true);
    let table = run(false);
    assert!(
        table.contains(
            "group demo-fp4-gb200-dynamo-vllm-disagg + demo-fp4-gb200-dynamo-vllm-disagg-twin"
        ),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_shows_a_family_without_a_published_baseline_as_readiness_blocked() {
    let stack = crate::support::Harness::demo().start_stack().await;
    stack.published.withhold_key("demo-fp4-b200-sglang");
    let dir = tempfile::tempdir().unwrap();
    let config = crate::support::write_klaud_toml(&stack, dir.path(), "");
    let url = stack.registry_url.clone();
    let output = tokio::task::spawn_blocking(move || {
        let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/../../configs/demo");
        Command::new(env!("CARGO_BIN_EXE_klaud"))
            .args(["plan", "--checkout", demo, "--json"])
            .arg("--config")
            .arg(&config)
            .args(["--mirror", &format!("docker.io={url}")])
            .args(["--mirror", &format!("nvcr.io={url}")])
            .args(["--mirror", &format!("hub.docker.com={url}")])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let of = |key: &str| {
        report["families"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["family"].as_str().unwrap().ends_with(&format!(":{key}")))
            .cloned()
            .unwrap()
    };
    let sglang = of("demo-fp4-b200-sglang");
    assert_eq!(sglang["blocked"]["kind"], "readiness-blocked", "{sglang}");
    assert!(
        sglang["blocked"]["reason"].as_str().unwrap().starts_with(
            "baseline-unavailable: no published baseline of lmsysorg/sglang:v0.5.16-cu130 as of"
        ),
        "{sglang}"
    );
    let candidates: Vec<&str> = report["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["family"].as_str().unwrap())
        .collect();
    assert!(
        !candidates.contains(&sglang["family"].as_str().unwrap()),
        "{candidates:?}"
    );
    // A family whose baseline is published stays a candidate.
    let vllm = of("demo-fp4-b200-vllm");
    assert!(vllm.get("blocked").is_none(), "{vllm}");
    assert!(
        candidates.contains(&vllm["family"].as_str().unwrap()),
        "{candidates:?}"
    );
}

/// `[[ignore]]` in the configuration: a family pattern keeps a stale
/// family out of the plan, a tag pattern keeps one tag from being proposed,
/// and `klaud plan` says which rule and why, in the table and in JSON.
#[test]
fn plan_shows_configured_ignores_with_their_reasons() {
    const NEWER: &str = r#"{"repositories": {
  "lmsysorg/sglang": {"tags": {
    "v0.5.16-cu130": {"created": "2026-01-01T00:00:00Z"},
    "v0.5.17-cu130": {"created": "2026-02-01T00:00:00Z"}
  }},
  "vllm/vllm-openai": {"tags": {
    "v0.25.0": {"created": "2026-01-01T00:00:00Z", "pushed": "2026-01-01T00:00:00Z"},
    "v0.26.0": {"created": "2026-02-01T00:00:00Z", "pushed": "2026-02-01T00:00:00Z"}
  }}
}}"#;
    let url = serve_seed(NEWER);
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/../../configs/demo");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("klaud.toml");
    std::fs::write(
        &config,
        r#"
[[ignore]]
family = "*-b200-vllm"
reason = "vLLM on B200 waits for the new driver"

[[ignore]]
repository = "docker.io/lmsysorg/sglang"
tag = "v0.5.17*"
reason = "v0.5.17 regressed TTFT"
"#,
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_klaud"))
            .args(["plan", "--checkout", demo, "--allow-unresolved", "--config"])
            .arg(&config)
            .args(extra)
            .args(["--mirror", &format!("docker.io={url}")])
            .args(["--mirror", &format!("nvcr.io={url}")])
            .args(["--mirror", &format!("hub.docker.com={url}")])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let report: serde_json::Value = serde_json::from_str(&run(&["--json"])).unwrap();
    let family = |key: &str| {
        report["families"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["family"].as_str().unwrap().ends_with(&format!(":{key}")))
            .unwrap()
            .clone()
    };
    let vllm = family("demo-fp4-b200-vllm");
    assert_eq!(vllm["blocked"]["kind"], "ignored", "{vllm}");
    let reasons = vllm["reasons"].to_string();
    assert!(
        reasons.contains(
            "family `*-b200-vllm` (by the configuration): vLLM on B200 waits for the new driver"
        ),
        "{vllm}"
    );
    let sglang = family("demo-fp4-b200-sglang");
    assert_eq!(sglang["blocked"]["kind"], "ignored", "{sglang}");
    let reasons = sglang["reasons"].to_string();
    assert!(
        reasons.contains(
            "tags `lmsysorg/sglang:v0.5.17*` (by the configuration): v0.5.17 regressed TTFT"
        ),
        "{sglang}"
    );
    assert!(
        reasons.contains("a newer image than v0.5.17-cu130"),
        "{sglang}"
    );
    // A family the rules do not name is still planned.
    let special = family("demo-fp4-b200-vllm-special");
    assert!(special["blocked"].is_null(), "{special}");
    let ids: Vec<&str> = report["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["family"].as_str().unwrap())
        .collect();
    assert!(
        !ids.iter()
            .any(|f| f.ends_with(":demo-fp4-b200-vllm") || f.ends_with(":demo-fp4-b200-sglang")),
        "{ids:?}"
    );

    let table = run(&[]);
    assert!(
        table.contains("vLLM on B200 waits for the new driver"),
        "{table}"
    );
    assert!(table.contains("v0.5.17 regressed TTFT"), "{table}");
    let row = table
        .lines()
        .find(|l| l.contains(":demo-fp4-b200-vllm ") || l.ends_with(":demo-fp4-b200-vllm"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(row.contains("ignored"), "{row}");

    // A rule without a reason is refused, naming the file and the field.
    std::fs::write(
        &config,
        "[[ignore]]\nfamily = \"*-b200-vllm\"\nreason = \"\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_klaud"))
        .args(["plan", "--checkout", demo, "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("klaud.toml") && stderr.contains("ignore[0].reason"),
        "{stderr}"
    );
}

/// The demo checkout's plan as a user reads it: `--checkout` a copy with
/// `configs/klaud.toml` in it, found without `--config` (as `klaud
/// doctor` finds it), so its ignore rule holds.
#[test]
fn plan_reads_the_checkouts_configs_klaud_toml_and_fits_100_columns() {
    let url = serve();
    let dir = tempfile::tempdir().unwrap();
    support::copy_tree(
        std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../configs/demo")),
        dir.path(),
    );
    std::fs::write(
        dir.path().join("configs/klaud.toml"),
        "[[ignore]]\nfamily = \"configs/nvidia-master.yaml:demo-fp4-b200-sglang\"\n\
         reason = \"held for the test\"\n",
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_klaud"))
            .env_remove("KLAUD_CONFIG")
            .args(["plan", "--allow-unresolved", "--checkout"])
            .arg(dir.path())
            .args(extra)
            .args(["--mirror", &format!("docker.io={url}")])
            .args(["--mirror", &format!("nvcr.io={url}")])
            .args(["--mirror", &format!("hub.docker.com={url}")])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    let out = run(&["--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("configs/klaud.toml (found"), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let family = report["families"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["family"] == "configs/nvidia-master.yaml:demo-fp4-b200-sglang")
        .expect("the family is planned");
    assert_eq!(family["blocked"]["kind"], "ignored", "{family:#}");
    assert!(
        report["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["family"] != family["family"]),
        "an ignored family is no candidate: {report:#}"
    );

    let width = |text: &str| text.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    let table = String::from_utf8(run(&[]).stdout).unwrap();
    assert!(width(&table) <= 100, "{table}");
    let words = table.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains("held for the test"),
        "reasons are kept: {table}"
    );
    let wide = String::from_utf8(run(&["--wide"]).stdout).unwrap();
    assert!(width(&wide) > 100, "{wide}");
    // Quiet: the candidates, not a row per family.
    let quiet = String::from_utf8(run(&["--quiet"]).stdout).unwrap();
    assert!(!quiet.contains("FAMILY"), "{quiet}");
    assert!(quiet.contains("candidate(s) for this wave"), "{quiet}");
}

/// Requests in flight to a registry host that stops answering all fail
/// together; the log says so once per host, not once per request.
#[test]
fn plan_warns_once_per_unreachable_host() {
    // A port nothing listens on any more.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/../../configs/demo");
    let out = Command::new(env!("CARGO_BIN_EXE_klaud"))
        .env_remove("RUST_LOG")
        .env_remove("GITHUB_ACTIONS")
        .args(["plan", "--allow-unresolved", "--checkout", demo])
        .args(["--mirror", &format!("docker.io=http://{closed}")])
        .args(["--mirror", &format!("nvcr.io=http://{closed}")])
        .args(["--mirror", &format!("hub.docker.com=http://{closed}")])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let warnings = stderr
        .lines()
        .filter(|l| l.contains("registry host unreachable") && l.contains(&closed.to_string()))
        .count();
    assert_eq!(warnings, 1, "{stderr}");
}

/// Docker Hub pulls of one `klaud plan --json` run.
fn plan_pulls(url: &str, store: &std::path::Path) -> (u64, u64, serde_json::Value) {
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/../../configs/demo");
    let output = Command::new(env!("CARGO_BIN_EXE_klaud"))
        .args(["plan", "--checkout", demo, "--json", "--allow-unresolved"])
        .args(["--mirror", &format!("docker.io={url}")])
        .args(["--mirror", &format!("nvcr.io={url}")])
        .arg("--store")
        .arg(store)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let hub = &report["requests_by_host"]["docker.io"];
    (
        hub["manifest_get"].as_u64().unwrap_or(0),
        hub["tags_list"].as_u64().unwrap_or(0),
        report,
    )
}

#[test]
fn a_second_plan_with_the_store_kept_pulls_nothing() {
    let url = serve();
    let store = tempfile::tempdir().unwrap();
    let (cold_pulls, cold_lists, cold) = plan_pulls(&url, store.path());
    let (warm_pulls, warm_lists, warm) = plan_pulls(&url, store.path());
    let proposed = |r: &serde_json::Value| {
        r["families"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| f["candidate"]["image"].as_str().map(str::to_owned))
            .collect::<Vec<_>>()
    };
    assert!(!proposed(&cold).is_empty(), "{cold}");
    assert_eq!(proposed(&cold), proposed(&warm));
    assert!(cold_pulls > 0, "{cold}");
    // Manifests and configs come from the store; the tag lists are asked
    // again, conditionally (an unchanged one is a 304).
    assert_eq!(warm_pulls, 0, "{warm}");
    assert_eq!(warm_lists, cold_lists);
}

/// `--stats` measures the requests made against the floor of the scenario
/// (what any correct plan of these families, tag lists and images must
/// read), not against what this plan chose to read: on the demo's masters
/// the floor is below nothing the plan made, and names every host asked.
#[test]
fn plan_stats_prints_requests_against_the_floor_of_the_scenario() {
    let url = serve();
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/../../configs/demo");
    let output = Command::new(env!("CARGO_BIN_EXE_klaud"))
        .args(["plan", "--checkout", demo, "--stats", "--allow-unresolved"])
        .args(["--mirror", &format!("docker.io={url}")])
        .args(["--mirror", &format!("nvcr.io={url}")])
        .args(["--mirror", &format!("hub.docker.com={url}")])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("requests        made    floor\n"),
        "{stderr}"
    );
    let total = stderr
        .lines()
        .find(|l| l.starts_with("total "))
        .unwrap_or_else(|| panic!("no total line: {stderr}"));
    let numbers: Vec<u64> = total
        .split_whitespace()
        .skip(1)
        .take(2)
        .map(|n| n.parse().unwrap())
        .collect();
    let (made, floor) = (numbers[0], numbers[1]);
    assert!(floor > 0 && floor <= made, "{stderr}");
    assert!(total.ends_with("x the floor)"), "{total}");
    assert!(
        stderr.contains("registry host  pulls  candidates  requests    floor  pull target"),
        "{stderr}"
    );
    assert!(
        stderr.lines().any(|l| l.starts_with("docker.io ")),
        "{stderr}"
    );
}
