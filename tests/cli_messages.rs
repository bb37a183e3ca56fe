//! Messages and exit codes the first-contact issue found misleading: each
//! names the real cause, and only bad input exits 2.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use klaud_sandbox::stack::{BOT_TOKEN, MAINTAINER, MAINTAINER_TOKEN};

use crate::support::Harness;

fn klaud() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_klaud"));
    cmd.env("KLAUD_GITHUB_TOKEN", BOT_TOKEN)
        .env_remove("GITHUB_TOKEN")
        .env_remove("GITHUB_STEP_SUMMARY")
        .env_remove("KLAUD_CONFIG");
    cmd
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_repository_is_named_as_such_not_as_a_missing_base_branch() {
    let _root = Path::new(crate::support::REPO_ROOT);
    let stack = Harness::demo()
        .poll(Duration::from_millis(20))
        .start_stack()
        .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let url = stack.github.url();
    let store = dir.path().join("store");
    let out = tokio::task::spawn_blocking(move || {
        klaud()
            .args(["wave", "--github-api", &url, "--repo", "demo/no-such-repo"])
            .arg("--store")
            .arg(&store)
            .output()
            .expect("klaud wave")
    })
    .await
    .expect("wave");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("repository demo/no-such-repo does not exist"),
        "{err}"
    );
    assert!(!err.contains("base branch"), "{err}");

    // `status` only reads: a maintainer's own token will do, and it says whose.
    let url = stack.github.url();
    let store = dir.path().join("status-store");
    let out = tokio::task::spawn_blocking(move || {
        klaud()
            .env("KLAUD_GITHUB_TOKEN", MAINTAINER_TOKEN)
            .args(["status", "--github-api", &url, "--repo", "demo/benchmarks"])
            .arg("--store")
            .arg(&store)
            .output()
            .expect("klaud status")
    })
    .await
    .expect("status");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!("reading demo/benchmarks as {MAINTAINER}")),
        "{err}"
    );
}

#[test]
fn a_non_loopback_dashboard_names_the_setting_that_exists() {
    let out = klaud()
        .args(["serve", "--repo", "a/b", "--dashboard", "0.0.0.0:0"])
        .output()
        .expect("klaud serve");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("daemon.dashboard_allow_remote = true"),
        "{err}"
    );
    assert!(!err.contains("--dashboard-allow-remote"), "{err}");
}

#[test]
fn an_unreachable_github_is_a_failure_not_bad_input() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let api = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().expect("tempdir");
    for command in ["wave", "status", "recover"] {
        let out = klaud()
            .args([command, "--github-api", &api, "--repo", "a/b"])
            .arg("--store")
            .arg(dir.path().join(command))
            .output()
            .expect("klaud");
        assert_eq!(out.status.code(), Some(1), "{command}: {}", stderr(&out));
    }
}
