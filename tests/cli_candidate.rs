//! `klaud candidate handoff|finish` as an operator runs them: each ends the
//! candidate as the operator's decision and posts the receipt on its PR.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use klaud_sandbox::stack::BOT_TOKEN;

use crate::support::{Harness, REPO, write_klaud_toml};

fn klaud(config: &Path, store: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_klaud"))
        .env("KLAUD_GITHUB_TOKEN", BOT_TOKEN)
        .env_remove("GITHUB_TOKEN")
        .env_remove("GITHUB_ACTOR")
        .env_remove("GITHUB_STEP_SUMMARY")
        .env("USER", "ops-alice")
        .args(args)
        .arg("--config")
        .arg(config)
        .arg("--store")
        .arg(store)
        .output()
        .expect("klaud")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handoff_and_finish_post_a_receipt_naming_the_operator() {
    let _root = Path::new(crate::support::REPO_ROOT);
    // No CI script: the smokes stay queued, so both candidates are unfinished.
    let stack = Harness::demo()
        .poll(Duration::from_millis(20))
        .start_stack()
        .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_klaud_toml(&stack, dir.path(), "");
    let store = dir.path().join("store");
    let registry = stack.registry_url.clone();
    let (c2, s2) = (config.clone(), store.clone());
    let out = tokio::task::spawn_blocking(move || {
        let mut args = vec![
            "wave".to_owned(),
            "--max".into(),
            "2".into(),
            "--wait".into(),
            "0s".into(),
            "--json".into(),
        ];
        for host in ["docker.io", "nvcr.io", "hub.docker.com"] {
            args.push("--mirror".into());
            args.push(format!("{host}={registry}"));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        klaud(&c2, &s2, &args)
    })
    .await
    .expect("wave");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let wave: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let open: Vec<(String, u64)> = wave["candidates"]
        .as_array()
        .expect("candidates")
        .iter()
        .filter(|c| c["outcome"].is_null())
        .filter_map(|c| {
            let url = c["pull_request"].as_str()?;
            Some((
                c["candidate"].as_str()?.to_owned(),
                url.rsplit('/').next()?.parse().ok()?,
            ))
        })
        .collect();
    assert!(
        open.len() >= 2,
        "two unfinished candidates with PRs: {wave:#}"
    );

    let http = klaud_http::http_client().expect("http client");
    let get = |path: String| {
        let http = http.clone();
        let url = format!("{}/repos/{REPO}/{path}", stack.github.url());
        async move {
            http.get(url)
                .bearer_auth(BOT_TOKEN)
                .header("User-Agent", "klaud-test")
                .send()
                .await
                .expect("request")
                .json::<serde_json::Value>()
                .await
                .expect("JSON")
        }
    };
    let receipts = |comments: &serde_json::Value| -> Vec<String> {
        comments
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["body"].as_str())
            .filter(|b| b.contains("ops-alice"))
            .map(str::to_owned)
            .collect()
    };

    // handoff: the PR stays open, and says who handed it over.
    let (id, pr) = open[0].clone();
    let (c2, s2) = (config.clone(), store.clone());
    let out = tokio::task::spawn_blocking(move || klaud(&c2, &s2, &["candidate", "handoff", &id]))
        .await
        .expect("handoff");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("handoff"));
    let comments = get(format!("issues/{pr}/comments")).await;
    let found = receipts(&comments);
    assert_eq!(
        found.len(),
        1,
        "one receipt naming the operator: {comments:#}"
    );
    assert!(found[0].contains("handoff"), "{}", found[0]);
    assert_eq!(get(format!("pulls/{pr}")).await["state"], "open");

    // finish: an operator's decision is a handoff by default, not an
    // unexpected error; the usual cleanup runs and the receipt says who.
    let (id, pr) = open[1].clone();
    let (c2, s2) = (config.clone(), store.clone());
    let out = tokio::task::spawn_blocking(move || klaud(&c2, &s2, &["candidate", "finish", &id]))
        .await
        .expect("finish");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("handoff") && !stdout.contains("unexpected"),
        "{stdout}"
    );
    let comments = get(format!("issues/{pr}/comments")).await;
    let found = receipts(&comments);
    assert_eq!(found.len(), 1, "{comments:#}");
    assert!(!found[0].contains("unexpected-error"), "{}", found[0]);
}
