//! The GitHub simulator's secondary limit on content-creating requests, on
//! by default as on GitHub (80 a minute and 500 an hour per credential):
//! past it a write gets 403 with `retry-after` and is not performed, reads
//! and other credentials go on; `klaud sandbox` switches it from the CLI.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use klaud_sandbox::github::{CONTENT_LIMIT_PER_MINUTE, Permission};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::GithubOnly;

const REPO: &str = "sandbox/benchmarks";
const WRITER: &str = "writer";
const WRITER_TOKEN: &str = "ghp_content_writer";
const OTHER: &str = "other";
const OTHER_TOKEN: &str = "ghp_content_other";

struct Sim {
    sim: klaud_sandbox::github::GithubSim,
    http: reqwest::Client,
    issue: u64,
}

impl Sim {
    async fn start() -> Self {
        let sim = GithubOnly::new(REPO)
            .user(WRITER, None, Some(Permission::Write))
            .user(OTHER, None, Some(Permission::Write))
            .token(WRITER, WRITER_TOKEN, None)
            .token(OTHER, OTHER_TOKEN, None)
            .files(WRITER, "seed", &[("README.md", b"seed\n")])
            .start()
            .await;
        let http = klaud_http::http_client_builder()
            .user_agent("klaud-test")
            .build()
            .expect("client");
        let mut s = Self {
            sim,
            http,
            issue: 0,
        };
        let (status, issue) = s
            .send(OTHER_TOKEN, "POST", "/issues", Some(json!({"title": "t"})))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{issue}");
        s.issue = issue["number"].as_u64().expect("number");
        s
    }

    async fn send(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let url = format!("{}/repos/{REPO}{path}", self.sim.url());
        let mut req = self
            .http
            .request(method.parse().expect("method"), url)
            .bearer_auth(token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("send");
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let mut v: Value = resp.json().await.unwrap_or(Value::Null);
        if let Some(secs) = retry_after {
            v["__retry_after"] = json!(secs);
        }
        (status, v)
    }

    async fn comment(&self, token: &str, body: &str) -> (StatusCode, Value) {
        self.send(
            token,
            "POST",
            &format!("/issues/{}/comments", self.issue),
            Some(json!({ "body": body })),
        )
        .await
    }

    async fn comment_count(&self) -> usize {
        self.sim
            .state()
            .comment_bodies(REPO, self.issue)
            .await
            .len()
    }
}

#[tokio::test]
async fn past_80_content_writes_in_a_minute_a_credential_is_refused_by_default() {
    let s = Sim::start().await;
    for i in 0..CONTENT_LIMIT_PER_MINUTE {
        let (status, v) = s.comment(WRITER_TOKEN, &format!("c{i}")).await;
        assert_eq!(status, StatusCode::CREATED, "write {i}: {v}");
    }
    let (status, v) = s.comment(WRITER_TOKEN, "one too many").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{v}");
    assert!(
        v["message"]
            .as_str()
            .is_some_and(|m| m.contains("secondary rate limit")),
        "{v}"
    );
    let wait = v["__retry_after"].as_u64().expect("retry-after");
    assert!((1..=60).contains(&wait), "{wait}");
    assert_eq!(
        s.comment_count().await,
        CONTENT_LIMIT_PER_MINUTE as usize,
        "the refused write was not performed"
    );
    // Reads are not content-creating, and the limit is per credential.
    let (status, _) = s
        .send(WRITER_TOKEN, "GET", &format!("/issues/{}", s.issue), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, v) = s.comment(OTHER_TOKEN, "another credential").await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
}

#[tokio::test]
async fn the_hourly_content_limit_refuses_with_the_wait_until_the_oldest_write_ages_out() {
    let s = Sim::start().await;
    s.sim.state().set_content_limits(None, Some(3)).await;
    for i in 0..3 {
        let (status, v) = s.comment(WRITER_TOKEN, &format!("c{i}")).await;
        assert_eq!(status, StatusCode::CREATED, "{v}");
    }
    let (status, v) = s.comment(WRITER_TOKEN, "fourth").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{v}");
    let wait = v["__retry_after"].as_u64().expect("retry-after");
    assert!((3000..=3600).contains(&wait), "{wait}");
    // Turned off, the same credential writes again.
    s.sim.state().set_content_limits(None, None).await;
    let (status, v) = s.comment(WRITER_TOKEN, "fourth").await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
}

/// Kills the child (by its own handle) when the test ends, even on panic.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `klaud sandbox` with `args`: its JSON line.
async fn sandbox(args: &[&str]) -> (Child, Value) {
    let mut child = Child(
        Command::new(env!("CARGO_BIN_EXE_klaud"))
            .arg("sandbox")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn"),
    );
    let stdout = child.0.stdout.take().expect("stdout");
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).expect("line");
        line
    })
    .await
    .expect("join");
    (child, serde_json::from_str(&line).expect("json line"))
}

/// Posts comments on a new issue as the sandbox's bot until one is refused
/// or `most` went through; how many went through.
async fn writes_until_refused(info: &Value, most: u32) -> u32 {
    let api = info["github_api"].as_str().expect("api");
    let token = info["bot_token"].as_str().expect("token");
    let repo = info["repo"].as_str().expect("repo");
    let http = klaud_http::http_client_builder()
        .user_agent("klaud-test")
        .build()
        .expect("client");
    let issue: Value = http
        .post(format!("{api}/repos/{repo}/issues"))
        .bearer_auth(token)
        .json(&json!({"title": "t"}))
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    let number = issue["number"].as_u64().expect("number");
    // The issue itself was the first write.
    for done in 1..most {
        let status = http
            .post(format!("{api}/repos/{repo}/issues/{number}/comments"))
            .bearer_auth(token)
            .json(&json!({"body": "c"}))
            .send()
            .await
            .expect("send")
            .status();
        if !status.is_success() {
            assert_eq!(status, StatusCode::FORBIDDEN);
            return done;
        }
    }
    most
}

#[tokio::test]
async fn klaud_sandbox_has_the_limit_on_and_switches_it_from_the_cli() {
    let (_child, info) = sandbox(&[]).await;
    assert_eq!(info["content_limit"]["per_minute"], 80, "{info}");
    assert_eq!(info["content_limit"]["per_hour"], 500, "{info}");
    assert_eq!(writes_until_refused(&info, 100).await, 80);

    let (_child, info) = sandbox(&["--content-limit-per-minute", "5"]).await;
    assert_eq!(info["content_limit"]["per_minute"], 5, "{info}");
    assert_eq!(writes_until_refused(&info, 100).await, 5);

    let (_child, info) = sandbox(&[
        "--content-limit-per-minute",
        "0",
        "--content-limit-per-hour",
        "0",
    ])
    .await;
    assert!(info["content_limit"]["per_minute"].is_null(), "{info}");
    assert!(info["content_limit"]["per_hour"].is_null(), "{info}");
    assert_eq!(writes_until_refused(&info, 100).await, 100);
}
