//! Writes are paced as GitHub asks integrations to make them: one at a
//! time, at least a second apart, within 80 content writes a minute (the
//! unit tests of `klaud-github`'s pacer hold the minute and hour windows).
//! Here a real `klaud wave` process with GitHub's pace configured writes to
//! the simulator, and the simulator's own clock says when they arrived; the
//! figures are printed (`-- --nocapture`).

use std::process::Command;
use std::time::Duration;

use chrono::{DateTime, Utc};
use klaud_sandbox::stack::BOT_TOKEN;

use crate::support::{Harness, write_klaud_toml};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_at_githubs_pace_writes_one_at_a_time_a_second_apart() {
    let stack = Harness::demo()
        .demo_ci()
        .poll(Duration::from_millis(20))
        .start_stack()
        .await;
    let dir = tempfile::tempdir().expect("tempdir");
    // Set explicitly: against the simulator nothing set means unpaced.
    let config = write_klaud_toml(
        &stack,
        dir.path(),
        "write_gap = \"1s\"\nwrites_per_minute = 80\nwrites_per_hour = 500\n",
    );
    let registry = stack.registry_url.clone();
    let store = dir.path().join("store");
    let out = tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_klaud"));
        cmd.env("KLAUD_GITHUB_TOKEN", BOT_TOKEN)
            .env_remove("GITHUB_TOKEN")
            .arg("wave")
            .arg("--config")
            .arg(&config)
            .arg("--store")
            .arg(&store)
            .args(["--max", "2", "--json", "--wait", "0s"]);
        for host in ["docker.io", "nvcr.io", "hub.docker.com"] {
            cmd.args(["--mirror", &format!("{host}={registry}")]);
        }
        cmd.output().expect("run klaud wave")
    })
    .await
    .expect("join");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Klaud's writes as they arrived at the simulator. GraphQL queries are
    // reads sent as POSTs and are not paced.
    let log = stack.github.state().request_log().await;
    let mut writes: Vec<DateTime<Utc>> = log
        .iter()
        .filter(|e| {
            e.method != "GET"
                && e.method != "HEAD"
                && e.path != "/graphql"
                && e.login
                    .as_deref()
                    .is_some_and(|l| l.eq_ignore_ascii_case("Klaud-Cold"))
        })
        .filter_map(|e| e.at)
        .collect();
    writes.sort();
    assert!(writes.len() >= 5, "the wave wrote {} times", writes.len());
    let gaps: Vec<f64> = writes
        .windows(2)
        .map(|w| (w[1] - w[0]).num_milliseconds() as f64 / 1000.0)
        .collect();
    let within = |span: chrono::TimeDelta| {
        writes
            .iter()
            .map(|t| {
                writes
                    .iter()
                    .filter(|u| **u >= *t && **u - *t < span)
                    .count()
            })
            .max()
            .unwrap_or(0)
    };
    let per_second = within(chrono::TimeDelta::seconds(1));
    let per_minute = within(chrono::TimeDelta::seconds(60));
    let smallest = gaps.iter().copied().fold(f64::INFINITY, f64::min);
    println!(
        "real-pace wave: {} writes in {:.1} s; at most {per_second} in any second and {per_minute} in any minute; smallest gap between arrivals {smallest:.2} s",
        writes.len(),
        (writes[writes.len() - 1] - writes[0]).num_milliseconds() as f64 / 1000.0,
    );
    // Each write starts a second after the one before; on loopback it
    // arrives within a fraction of that.
    assert!(smallest > 0.5, "writes {smallest} s apart: {gaps:?}");
    assert!(per_second <= 2, "{per_second} writes in one second");
    assert!(per_minute <= 80, "{per_minute} writes in one minute");
}
