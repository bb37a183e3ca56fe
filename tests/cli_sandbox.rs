//! `klaud sandbox` as a process: it prints one JSON line, serves the seeded
//! repository with working tokens, and refuses non-loopback addresses.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use serde_json::Value;

/// Kills the child (by its own handle) when the test ends, even on panic.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn sandbox_refuses_a_non_loopback_listen_address() {
    let out = Command::new(env!("CARGO_BIN_EXE_klaud"))
        .args(["sandbox", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--allow-non-loopback"), "{err}");
}

#[tokio::test]
async fn sandbox_prints_its_endpoints_and_serves_the_seeded_repository() {
    let mut child = Child(
        Command::new(env!("CARGO_BIN_EXE_klaud"))
            .args(["sandbox", "--bot-login", "Klaud-Cold"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    })
    .await
    .unwrap();
    let info: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(info["repo"], "sandbox/benchmarks");
    assert!(info["registry"].is_null());
    assert!(
        info["workflows"].is_null(),
        "no workflow files, built-in CI"
    );
    let api = info["github_api"].as_str().unwrap();
    assert!(api.starts_with("http://127.0.0.1:"));
    let http = klaud_http::http_client_builder()
        .user_agent("klaud-test")
        .build()
        .unwrap();
    for (token, login) in [
        ("bot_token", "Klaud-Cold"),
        ("maintainer_token", "sandbox-maintainer"),
        ("reader_token", "sandbox-reader"),
    ] {
        let me: Value = http
            .get(format!("{api}/user"))
            .bearer_auth(info[token].as_str().unwrap())
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(me["login"], login);
    }
    let perm: Value = http
        .get(format!(
            "{api}/repos/sandbox/benchmarks/collaborators/sandbox-reader/permission"
        ))
        .bearer_auth(info["bot_token"].as_str().unwrap())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(perm["permission"], "read");
    let main = http
        .get(format!("{api}/repos/sandbox/benchmarks/git/ref/heads/main"))
        .send()
        .await
        .unwrap();
    assert_eq!(main.status(), 200);
    let log = http
        .get(format!("{}/log", info["control"].as_str().unwrap()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!log.contains(info["bot_token"].as_str().unwrap()));
}

#[tokio::test]
async fn sandbox_takes_its_ci_behaviour_from_seeded_workflow_files() {
    let seed = tempfile::tempdir().unwrap();
    let workflows = seed.path().join(".github/workflows");
    std::fs::create_dir_all(&workflows).unwrap();
    std::fs::write(seed.path().join("README.md"), "# seeded\n").unwrap();
    std::fs::write(
        workflows.join("smoke.yml"),
        "name: Smoke\nrun-name: Smoke - ${{ inputs.test-name }}\non:\n  workflow_dispatch:\n    inputs:\n      test-name: {type: string, required: true}\njobs:\n  run:\n    runs-on: ubuntu-latest\n    steps: [{run: echo}]\n",
    )
    .unwrap();
    let mut child = Child(
        Command::new(env!("CARGO_BIN_EXE_klaud"))
            .args(["sandbox", "--seed", seed.path().to_str().unwrap()])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    })
    .await
    .unwrap();
    let info: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(info["workflows"], serde_json::json!(["smoke.yml"]));
    let api = info["github_api"].as_str().unwrap();
    let token = info["bot_token"].as_str().unwrap();
    let http = klaud_http::http_client_builder()
        .user_agent("klaud-test")
        .build()
        .unwrap();
    let listed: Value = http
        .get(format!("{api}/repos/sandbox/benchmarks/actions/workflows"))
        .bearer_auth(token)
        .header("user-agent", "klaud-test")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let names: Vec<&str> = listed["workflows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Smoke"]);
    let refused = http
        .post(format!(
            "{api}/repos/sandbox/benchmarks/actions/workflows/smoke.yml/dispatches"
        ))
        .bearer_auth(token)
        .header("user-agent", "klaud-test")
        .json(
            &serde_json::json!({"ref": "main", "inputs": {"test-name": "t", "klaud-run": "true"}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 422);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(
        body["message"],
        r#"Unexpected inputs provided: ["klaud-run"]"#
    );
}

#[tokio::test]
async fn sandbox_serves_the_demo_registry_that_plan_reads() {
    let root = crate::support::REPO_ROOT;
    let mut child = Child(
        Command::new(env!("CARGO_BIN_EXE_klaud"))
            .args(["sandbox", "--seed", &format!("{root}/configs/demo")])
            .args([
                "--registry-seed",
                &format!("{root}/configs/demo-registry.json"),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    })
    .await
    .unwrap();
    let info: Value = serde_json::from_str(&line).unwrap();
    let registry = info["registry"].as_str().unwrap().to_owned();
    assert!(registry.starts_with("http://127.0.0.1:"));
    let output = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_klaud"))
            .args([
                "plan",
                "--checkout",
                &format!("{root}/configs/demo"),
                "--json",
            ])
            .args(["--mirror", &format!("docker.io={registry}")])
            .args(["--mirror", &format!("nvcr.io={registry}")])
            .args(["--mirror", &format!("hub.docker.com={registry}")])
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
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let status = |key: &str| {
        report["families"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["family"].as_str().unwrap().ends_with(key))
            .map(|f| f["status"].as_str().unwrap().to_owned())
            .unwrap()
    };
    assert_eq!(status(":demo-fp8-mi355x-sglang"), "stale-pruned");
    assert_eq!(status(":demo-fp4-b200-sglang"), "stale-newer");
    assert_eq!(status(":demo-fp4-b300-vllm-agentic"), "stale-newer");
    assert_eq!(status(":demo-fp4-gb200-dynamo-vllm-disagg"), "stale-newer");
    assert_eq!(status(":demo-fp8-h200-trt"), "stale-newer");
    assert_eq!(status(":demo-fp4-b200-vllm-special"), "unknown-track");
    assert_eq!(report["candidates"].as_array().unwrap().len(), 5);
}
