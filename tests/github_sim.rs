//! The GitHub simulator over plain HTTP: GitHub's status codes, messages,
//! pagination, ETags, rate limits, permissions and the control API.

use std::collections::BTreeMap;
use std::path::PathBuf;

use base64::Engine;
use klaud_sandbox::github::{Fault, FaultAction, GithubSim, Permission};
use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};
use sha1::Digest;

use crate::support::GithubOnly;

const REPO: &str = "sandbox/benchmarks";
const BOT: &str = "bot-token";
const READER: &str = "reader-token";

struct T {
    sim: GithubSim,
    http: Client,
}

impl T {
    async fn new() -> Self {
        let sim = GithubOnly::new(REPO)
            .user("Klaud-Cold", None, Some(Permission::Write))
            .user("reader", None, Some(Permission::Read))
            .token("Klaud-Cold", BOT, None)
            .token("reader", READER, Some(1000))
            .files(
                "Klaud-Cold",
                "init",
                &[("a.txt", b"a\n"), ("perf-changelog.yaml", b"- x\n")],
            )
            .start()
            .await;
        Self {
            sim,
            http: klaud_http::http_client_builder()
                .user_agent("klaud-test")
                .build()
                .unwrap(),
        }
    }

    async fn call(
        &self,
        token: Option<&str>,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, reqwest::header::HeaderMap, Value) {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.sim.url()));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = resp.bytes().await.unwrap();
        let v = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (status, headers, v)
    }

    async fn get(&self, path: &str) -> (StatusCode, reqwest::header::HeaderMap, Value) {
        self.call(Some(BOT), Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let (s, _, v) = self.call(Some(BOT), Method::POST, path, Some(body)).await;
        (s, v)
    }

    async fn main_sha(&self) -> String {
        let (_, _, v) = self
            .get("/repos/sandbox/benchmarks/git/ref/heads/main")
            .await;
        v["object"]["sha"].as_str().unwrap().to_string()
    }

    /// A commit on top of `parent` that adds `path`.
    async fn commit(&self, parent: &str, path: &str, content: &str) -> String {
        let (_, _, c) = self
            .get(&format!("/repos/sandbox/benchmarks/git/commits/{parent}"))
            .await;
        let base_tree = c["tree"]["sha"].as_str().unwrap().to_string();
        let (s, t) = self
            .post(
                "/repos/sandbox/benchmarks/git/trees",
                json!({"base_tree": base_tree, "tree": [{"path": path, "mode": "100644", "type": "blob", "content": content}]}),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{t}");
        let (s, c) = self
            .post(
                "/repos/sandbox/benchmarks/git/commits",
                json!({"message": format!("add {path}"), "tree": t["sha"], "parents": [parent]}),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{c}");
        c["sha"].as_str().unwrap().to_string()
    }
}

#[tokio::test]
async fn refs_answer_like_github() {
    let t = T::new().await;
    let main = t.main_sha().await;
    let (s, v) = t
        .post(
            "/repos/sandbox/benchmarks/git/refs",
            json!({"ref": "refs/heads/x", "sha": main}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (s, v) = t
        .post(
            "/repos/sandbox/benchmarks/git/refs",
            json!({"ref": "refs/heads/x", "sha": main}),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(v["message"], "Reference already exists");

    let side = t.commit(&main, "b.txt", "b").await;
    let other = t.commit(&main, "c.txt", "c").await;
    let (s, _, _) = t
        .call(
            Some(BOT),
            Method::PATCH,
            "/repos/sandbox/benchmarks/git/refs/heads/x",
            Some(json!({"sha": side, "force": false})),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let (s, _, v) = t
        .call(
            Some(BOT),
            Method::PATCH,
            "/repos/sandbox/benchmarks/git/refs/heads/x",
            Some(json!({"sha": other, "force": false})),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(v["message"], "Update is not a fast forward");
    let (s, _, _) = t
        .call(
            Some(BOT),
            Method::PATCH,
            "/repos/sandbox/benchmarks/git/refs/heads/x",
            Some(json!({"sha": other, "force": true})),
        )
        .await;
    assert_eq!(s, StatusCode::OK);

    let (s, _, _) = t
        .call(
            Some(BOT),
            Method::DELETE,
            "/repos/sandbox/benchmarks/git/refs/heads/x",
            None,
        )
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, _, v) = t
        .call(
            Some(BOT),
            Method::DELETE,
            "/repos/sandbox/benchmarks/git/refs/heads/x",
            None,
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(v["message"], "Reference does not exist");
    let (s, _, v) = t.get("/repos/sandbox/benchmarks/git/ref/heads/x").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(v["message"], "Not Found");
    assert!(v["documentation_url"].is_string());

    let (s, _, v) = t
        .get(&format!("/repos/sandbox/benchmarks/compare/main...{other}"))
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        (
            v["ahead_by"].as_u64(),
            v["behind_by"].as_u64(),
            v["status"].as_str()
        ),
        (Some(1), Some(0), Some("ahead"))
    );
}

#[tokio::test]
async fn lists_paginate_with_link_headers() {
    let t = T::new().await;
    let main = t.main_sha().await;
    for i in 0..35 {
        let (s, _) = t
            .post(
                "/repos/sandbox/benchmarks/git/refs",
                json!({"ref": format!("refs/heads/p/{i:02}"), "sha": main}),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED);
    }
    let (_, h, v) = t
        .get("/repos/sandbox/benchmarks/git/matching-refs/heads/p/")
        .await;
    assert_eq!(v.as_array().unwrap().len(), 30);
    let link = h["link"].to_str().unwrap();
    assert!(
        link.contains("page=2>; rel=\"next\"") && link.contains("rel=\"last\""),
        "{link}"
    );
    let (_, h, v) = t
        .get("/repos/sandbox/benchmarks/git/matching-refs/heads/p/?per_page=30&page=2")
        .await;
    assert_eq!(v.as_array().unwrap().len(), 5);
    assert!(h["link"].to_str().unwrap().contains("rel=\"prev\""));
    let (_, h, v) = t
        .get("/repos/sandbox/benchmarks/git/matching-refs/heads/p/?per_page=500")
        .await;
    assert_eq!(v.as_array().unwrap().len(), 35);
    assert!(h.get("link").is_none());
}

#[tokio::test]
async fn etags_rate_limits_and_versions() {
    let t = T::new().await;
    let st = t.sim.state();
    st.add_user("tiny", None, false).await;
    st.add_token("tiny", "tiny-token", Some(2)).await.unwrap();
    let url = format!("{}/repos/sandbox/benchmarks", t.sim.url());
    let r = t
        .http
        .get(&url)
        .bearer_auth("tiny-token")
        .send()
        .await
        .unwrap();
    let etag = r.headers()["etag"].to_str().unwrap().to_string();
    assert_eq!(r.headers()["x-ratelimit-remaining"], "1");
    let r = t
        .http
        .get(&url)
        .bearer_auth("tiny-token")
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(r.headers()["x-ratelimit-remaining"], "1", "a 304 is free");
    let r = t
        .http
        .get(&url)
        .bearer_auth("tiny-token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = t
        .http
        .get(&url)
        .bearer_auth("tiny-token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(r.headers()["x-ratelimit-remaining"], "0");
    assert!(r.headers().contains_key("x-ratelimit-reset"));
    let v: Value = r.json().await.unwrap();
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .starts_with("API rate limit exceeded for user ID")
    );

    let r = t
        .http
        .get(&url)
        .bearer_auth(BOT)
        .header("x-github-api-version", "1999-01-01")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = t
        .http
        .get(&url)
        .bearer_auth(BOT)
        .header("x-github-api-version", "2022-11-28")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = t
        .http
        .get(format!("{}/user", t.sim.url()))
        .bearer_auth("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        r.json::<Value>().await.unwrap()["message"],
        "Bad credentials"
    );

    let log = serde_json::to_string(&st.request_log().await).unwrap();
    assert!(!log.contains("tiny-token") && !log.contains(BOT) && !log.contains("nope"));
    assert!(log.contains("\"login\":\"tiny\""));
}

#[tokio::test]
async fn pull_requests_permissions_labels_and_graphql() {
    let t = T::new().await;
    let main = t.main_sha().await;
    let head = t.commit(&main, "perf-changelog.yaml", "- x\n\n- y\n").await;
    t.post(
        "/repos/sandbox/benchmarks/git/refs",
        json!({"ref": "refs/heads/klaud/auto-1", "sha": head}),
    )
    .await;
    let pr = json!({"title": "T", "head": "sandbox:klaud/auto-1", "base": "main", "body": "B", "draft": true});
    let (s, _, v) = t
        .call(
            Some(READER),
            Method::POST,
            "/repos/sandbox/benchmarks/pulls",
            Some(pr.clone()),
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    let (s, p) = t.post("/repos/sandbox/benchmarks/pulls", pr.clone()).await;
    assert_eq!(s, StatusCode::CREATED, "{p}");
    assert_eq!(p["draft"], true);
    assert_eq!(p["head"]["sha"], head);
    let (s, v) = t.post("/repos/sandbox/benchmarks/pulls", pr).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        v["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("already exists"),
        "{v}"
    );
    let n = p["number"].as_u64().unwrap();

    let (_, _, l) = t
        .get("/repos/sandbox/benchmarks/pulls?head=sandbox:klaud/auto-1&state=all")
        .await;
    assert_eq!(l.as_array().unwrap().len(), 1);
    let (_, _, l) = t
        .get("/repos/sandbox/benchmarks/pulls?head=sandbox:other")
        .await;
    assert!(l.as_array().unwrap().is_empty());

    // Anyone may comment; only writers may label.
    let (s, _, c) = t
        .call(
            Some(READER),
            Method::POST,
            &format!("/repos/sandbox/benchmarks/issues/{n}/comments"),
            Some(json!({"body": "/klaud stop"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    assert_eq!(c["user"]["login"], "reader");
    let (s, _, _) = t
        .call(
            Some(READER),
            Method::POST,
            &format!("/repos/sandbox/benchmarks/issues/{n}/labels"),
            Some(json!({"labels": ["x"]})),
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, v) = t
        .post(
            &format!("/repos/sandbox/benchmarks/issues/{n}/labels"),
            json!({"labels": ["full-sweep-fail-fast"]}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (_, _, runs) = t
        .get("/repos/sandbox/benchmarks/actions/runs?event=pull_request")
        .await;
    assert_eq!(runs["total_count"], 1);
    assert_eq!(
        runs["workflow_runs"][0]["path"],
        ".github/workflows/run-sweep.yml"
    );
    let (s, _, v) = t
        .call(
            Some(BOT),
            Method::DELETE,
            &format!("/repos/sandbox/benchmarks/issues/{n}/labels/nope"),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(v["message"], "Label does not exist");

    let (s, v) = t
        .post("/graphql", json!({"query": "mutation($id: ID!) { markPullRequestReadyForReview(input: {pullRequestId: $id}) { pullRequest { isDraft } } }", "variables": {"id": p["node_id"]}}))
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        v["data"]["markPullRequestReadyForReview"]["pullRequest"]["isDraft"],
        false
    );
    let (_, _, p2) = t.get(&format!("/repos/sandbox/benchmarks/pulls/{n}")).await;
    assert_eq!(p2["draft"], false);
    let (_, v) = t.post("/graphql", json!({"query": "mutation { convertPullRequestToDraft(input: {pullRequestId: \"PR_0\"}) { pullRequest { isDraft } } }"})).await;
    assert_eq!(v["errors"][0]["type"], "NOT_FOUND");

    // Deleting the head branch closes the PR, as on GitHub.
    t.call(
        Some(BOT),
        Method::DELETE,
        "/repos/sandbox/benchmarks/git/refs/heads/klaud/auto-1",
        None,
    )
    .await;
    let (_, _, p3) = t.get(&format!("/repos/sandbox/benchmarks/pulls/{n}")).await;
    assert_eq!(p3["state"], "closed");
}

#[tokio::test]
async fn actions_dispatch_cancel_rerun_and_artifacts() {
    let t = T::new().await;
    let main = t.main_sha().await;
    let path = "/repos/sandbox/benchmarks/actions/workflows/e2e-tests.yml/dispatches";
    let (s, _, v) = t
        .call(
            Some(BOT),
            Method::POST,
            path,
            Some(json!({"ref": "main", "inputs": {"test-name": "klaud-7-x", "ref": main}})),
        )
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT, "{v}");
    let (s, v) = t.post(path, json!({"ref": "nope", "inputs": {}})).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let (_, _, runs) = t.get("/repos/sandbox/benchmarks/actions/runs?actor=Klaud-Cold&event=workflow_dispatch&status=queued").await;
    assert_eq!(runs["total_count"], 1);
    let run = &runs["workflow_runs"][0];
    assert_eq!(run["display_title"], "e2e Test - klaud-7-x");
    assert_eq!(run["triggering_actor"]["login"], "Klaud-Cold");
    let id = run["id"].as_u64().unwrap();
    let (_, _, none) = t
        .get("/repos/sandbox/benchmarks/actions/runs?created=<2000-01-01")
        .await;
    assert_eq!(none["total_count"], 0);

    // Long enough that the run is surely still queued when re-read.
    t.sim
        .state()
        .set_cancel_delay(std::time::Duration::from_secs(2))
        .await;
    let (s, _) = t
        .post(
            &format!("/repos/sandbox/benchmarks/actions/runs/{id}/cancel"),
            json!({}),
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED);
    // Cancelling is asynchronous: the run keeps its status for a moment,
    // a second cancel is accepted too, and only a completed run says 409.
    let run_path = format!("/repos/sandbox/benchmarks/actions/runs/{id}");
    let (_, _, r) = t.get(&run_path).await;
    assert_eq!(
        (r["status"].as_str(), r["conclusion"].as_str()),
        (Some("queued"), None)
    );
    let (s, _) = t.post(&format!("{run_path}/cancel"), json!({})).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let mut r = r;
    for _ in 0..400 {
        if r["status"] == "completed" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        r = t.get(&run_path).await.2;
    }
    assert_eq!(r["conclusion"], "cancelled", "{r}");
    let (_, _, jobs) = t.get(&format!("{run_path}/jobs")).await;
    assert_eq!(jobs["jobs"][0]["conclusion"], "cancelled", "{jobs}");
    let (s, _) = t.post(&format!("{run_path}/cancel"), json!({})).await;
    assert_eq!(s, StatusCode::CONFLICT);
    let (s, _) = t
        .post(
            &format!("/repos/sandbox/benchmarks/actions/runs/{id}/rerun"),
            json!({}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let (_, _, r) = t
        .get(&format!("/repos/sandbox/benchmarks/actions/runs/{id}"))
        .await;
    assert_eq!(
        (r["run_attempt"].as_u64(), r["status"].as_str()),
        (Some(2), Some("queued"))
    );
    let (_, _, jobs) = t
        .get(&format!("/repos/sandbox/benchmarks/actions/runs/{id}/jobs"))
        .await;
    assert_eq!(jobs["total_count"], 1);

    // Control API over HTTP: complete the run with an artifact.
    let control = format!(
        "{}/_sandbox/repos/sandbox/benchmarks/runs/{id}/complete",
        t.sim.url()
    );
    let r = t
        .http
        .post(&control)
        .json(&json!({"conclusion": "failure", "artifacts": {"klaud-sweep-manifest": {"sweep_manifest.json": "{\"head\":\"x\"}"}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let (_, _, arts) = t
        .get(&format!(
            "/repos/sandbox/benchmarks/actions/runs/{id}/artifacts"
        ))
        .await;
    let aid = arts["artifacts"][0]["id"].as_u64().unwrap();
    let no_redirect = klaud_http::http_client_builder()
        .user_agent("klaud-test")
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = no_redirect
        .get(format!(
            "{}/repos/sandbox/benchmarks/actions/artifacts/{aid}/zip",
            t.sim.url()
        ))
        .bearer_auth(BOT)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FOUND);
    let loc = r.headers()["location"].to_str().unwrap().to_string();
    let zip = t
        .http
        .get(&loc)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(zip.to_vec())).unwrap();
    let mut s = String::new();
    std::io::Read::read_to_string(&mut archive.by_name("sweep_manifest.json").unwrap(), &mut s)
        .unwrap();
    assert_eq!(s, "{\"head\":\"x\"}");
}

#[tokio::test]
async fn faults_delay_fail_and_then_expire() {
    let t = T::new().await;
    let r = t
        .http
        .post(format!("{}/_sandbox/faults", t.sim.url()))
        .json(&json!({"method": "GET", "path": "/repos/*/git/ref/*", "count": 1, "action": {"kind": "status", "status": 503, "retry_after": 2}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    t.sim
        .state()
        .add_fault(Fault {
            method: None,
            path: "/user".into(),
            count: 1,
            action: FaultAction::Delay { millis: 5 },
        })
        .await;
    let (s, h, _) = t.get("/repos/sandbox/benchmarks/git/ref/heads/main").await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(h["retry-after"], "2");
    let (s, _, _) = t.get("/repos/sandbox/benchmarks/git/ref/heads/main").await;
    assert_eq!(s, StatusCode::OK);
    // Malformed bodies get GitHub's JSON errors, not a crash or plain text.
    let r = t
        .http
        .post(format!("{}/repos/sandbox/benchmarks/git/refs", t.sim.url()))
        .bearer_auth(BOT)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        r.json::<Value>().await.unwrap()["message"],
        "Problems parsing JSON"
    );
    let (s, v) = t
        .post("/repos/sandbox/benchmarks/git/refs", json!({"ref": 5}))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .starts_with("Invalid request."),
        "{v}"
    );
    let (s, v) = t
        .post(
            "/repos/sandbox/benchmarks/git/trees",
            json!({"tree": [{"path": "../x", "content": "x"}]}),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let (s, _, u) = t.get("/user").await;
    assert_eq!(
        (s, u["login"].as_str()),
        (StatusCode::OK, Some("Klaud-Cold"))
    );
}

fn fixtures() -> Option<PathBuf> {
    let dir = PathBuf::from(crate::support::REPO_ROOT).join("../shared/fixtures/inferencex/full");
    if dir.is_dir() {
        return Some(dir);
    }
    if std::env::var_os("CI").is_some() {
        panic!(
            "fixtures missing at {} (required when CI is set)",
            dir.display()
        );
    }
    eprintln!(
        "SKIP: fixtures missing at {}; not testing the seeded repository",
        dir.display()
    );
    None
}

#[tokio::test]
async fn seeding_from_the_fixtures_gives_git_identical_blobs() {
    let Some(dir) = fixtures() else { return };
    let t = T::new().await;
    let r = t
        .http
        .post(format!("{}/_sandbox/repos", t.sim.url()))
        .json(&json!({"repo": "semi/inferencex", "seed_dir": dir}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let (s, _, v) = t
        .get("/repos/semi/inferencex/contents/perf-changelog.yaml?ref=main")
        .await;
    assert_eq!(s, StatusCode::OK);
    let content = base64::engine::general_purpose::STANDARD
        .decode(v["content"].as_str().unwrap().replace('\n', ""))
        .unwrap();
    let on_disk = std::fs::read(dir.join("perf-changelog.yaml")).unwrap();
    assert_eq!(content, on_disk);
    let mut h = sha1::Sha1::new();
    h.update(format!("blob {}\0", on_disk.len()).as_bytes());
    h.update(&on_disk);
    assert_eq!(v["sha"].as_str().unwrap(), hex::encode(h.finalize()));
    let (s, _, listing) = t.get("/repos/semi/inferencex/contents/configs").await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        listing
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "nvidia-master.yaml")
    );
}

/// Every JSON shape Klaud or octocrab reads deserializes into octocrab's
/// typed models (required fields present, types right).
#[tokio::test]
async fn responses_deserialize_into_octocrab_models() {
    use octocrab::models;
    fn parse<T: serde::de::DeserializeOwned>(what: &str, v: Value) -> T {
        serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{what}: {e}\n{v:#}"))
    }
    let t = T::new().await;
    let main = t.main_sha().await;
    let head = t.commit(&main, "perf-changelog.yaml", "- x\n- y\n").await;
    t.post(
        "/repos/sandbox/benchmarks/git/refs",
        json!({"ref": "refs/heads/b", "sha": head}),
    )
    .await;

    let (_, _, v) = t.get("/repos/sandbox/benchmarks/git/ref/heads/b").await;
    let _: models::repos::Ref = parse("ref", v);
    let (_, _, v) = t
        .get(&format!("/repos/sandbox/benchmarks/git/commits/{head}"))
        .await;
    let _: models::commits::GitCommitObject = parse("git commit", v);
    let (_, _, v) = t
        .get(&format!("/repos/sandbox/benchmarks/commits/{head}"))
        .await;
    let _: models::commits::Commit = parse("commit", v);
    let (_, _, v) = t
        .get(&format!("/repos/sandbox/benchmarks/compare/main...{head}"))
        .await;
    let _: models::commits::CommitComparison = parse("compare", v);
    let (_, _, v) = t
        .get("/repos/sandbox/benchmarks/contents/a.txt?ref=b")
        .await;
    let c: models::repos::Content = parse("contents", v);
    assert_eq!(c.decoded_content().as_deref(), Some("a\n"));
    // Not checked against octocrab's `RepoPermission`: its enum expects
    // pull/push, but GitHub answers the legacy roles read/write/admin/none
    // in `permission` (the forge reads `role_name` with its own struct).
    let (_, _, v) = t.get("/users/reader").await;
    let _: models::Author = parse("user", v);

    let (_, p) = t
        .post(
            "/repos/sandbox/benchmarks/pulls",
            json!({"title": "T", "head": "b", "base": "main", "draft": true}),
        )
        .await;
    let n = p["number"].as_u64().unwrap();
    let (_, _, v) = t
        .get(&format!("/repos/sandbox/benchmarks/pulls/{n}/files"))
        .await;
    let _: Vec<models::repos::DiffEntry> = parse("pull files", v);
    t.post(
        &format!("/repos/sandbox/benchmarks/issues/{n}/labels"),
        json!(["full-sweep-fail-fast"]),
    )
    .await;
    let (_, _, v) = t
        .get(&format!("/repos/sandbox/benchmarks/issues/{n}/labels"))
        .await;
    let _: Vec<models::Label> = parse("labels", v);

    let (_, _, v) = t.get("/repos/sandbox/benchmarks/actions/workflows").await;
    let _: Vec<models::workflows::WorkFlow> = parse("workflows", v["workflows"].clone());
    let (_, _, runs) = t.get("/repos/sandbox/benchmarks/actions/runs").await;
    let run: models::workflows::Run = parse("run", runs["workflow_runs"][0].clone());
    let run_id = run.id.into_inner();
    let mut files = BTreeMap::new();
    files.insert("agg_bmk.json".to_string(), b"[]".to_vec());
    let mut arts = BTreeMap::new();
    arts.insert("results_bmk".to_string(), files);
    t.sim
        .state()
        .complete_run(REPO, run_id, "success", arts)
        .await
        .unwrap();
    let (_, _, v) = t
        .get(&format!(
            "/repos/sandbox/benchmarks/actions/runs/{run_id}/jobs"
        ))
        .await;
    let _: Vec<models::workflows::Job> = parse("jobs", v["jobs"].clone());
    let (_, _, v) = t
        .get(&format!(
            "/repos/sandbox/benchmarks/actions/runs/{run_id}/artifacts"
        ))
        .await;
    let _: Vec<models::workflows::WorkflowListArtifact> =
        parse("artifacts", v["artifacts"].clone());
}

/// GitHub reads bodies as JSON whatever their `Content-Type`, deletes tree
/// paths given `sha: null`, and takes labels as names or `{"name": ...}`.
#[tokio::test]
async fn json_without_content_type_null_tree_shas_and_label_objects_are_accepted() {
    let t = T::new().await;
    let url = format!("{}/repos/sandbox/benchmarks/git/blobs", t.sim.url());
    // Like GitHub's own curl examples: `-d '{...}'` sends form encoding.
    let r = t
        .http
        .post(&url)
        .bearer_auth(BOT)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(r#"{"content":"hi\n","encoding":"utf-8"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let r = t
        .http
        .post(&url)
        .bearer_auth(BOT)
        .body(r#"{"content":"hi\n","encoding":"utf-8"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED, "no Content-Type at all");
    let r = t
        .http
        .post(&url)
        .bearer_auth(BOT)
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["message"], "Problems parsing JSON");

    let main = t.main_sha().await;
    let (_, _, commit) = t
        .get(&format!("/repos/sandbox/benchmarks/git/commits/{main}"))
        .await;
    let base_tree = commit["tree"]["sha"].as_str().unwrap();
    let (s, tree) = t
        .post(
            "/repos/sandbox/benchmarks/git/trees",
            json!({"base_tree": base_tree, "tree": [
                {"path": "a.txt", "mode": "100644", "type": "blob", "sha": null},
            ]}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{tree}");
    let paths: Vec<&str> = tree["tree"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["path"].as_str())
        .collect();
    assert_eq!(paths, vec!["perf-changelog.yaml"], "a.txt deleted");

    t.post(
        "/repos/sandbox/benchmarks/git/refs",
        json!({"ref": "refs/heads/topic", "sha": main}),
    )
    .await;
    let files = BTreeMap::from([("b.txt".to_string(), Some(b"b\n".to_vec()))]);
    t.sim
        .state()
        .push_commit(REPO, "topic", "Klaud-Cold", files, "topic")
        .await
        .unwrap();
    let (s, pr) = t
        .post(
            "/repos/sandbox/benchmarks/pulls",
            json!({"title": "t", "head": "topic", "base": "main"}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{pr}");
    let number = pr["number"].as_u64().unwrap();
    let (s, labels) = t
        .post(
            &format!("/repos/sandbox/benchmarks/issues/{number}/labels"),
            json!({"labels": [{"name": "full-sweep"}, "other"]}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{labels}");
    let names: Vec<&str> = labels
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["name"].as_str())
        .collect();
    assert_eq!(names, vec!["full-sweep", "other"]);
}

/// GitHub refuses requests without a `User-Agent`, and collaborator
/// lookups by callers without push access.
#[tokio::test]
async fn no_user_agent_and_reader_permission_lookups_are_refused() {
    let t = T::new().await;
    let bare = klaud_http::http_client_builder().build().unwrap();
    for agent in [None, Some("")] {
        let mut req = bare
            .get(format!("{}/repos/sandbox/benchmarks", t.sim.url()))
            .bearer_auth(BOT);
        if let Some(a) = agent {
            req = req.header("user-agent", a);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{agent:?}");
        let text = r.text().await.unwrap();
        assert!(
            text.contains("Please make sure your request has a User-Agent header"),
            "{text}"
        );
    }
    let path = "/repos/sandbox/benchmarks/collaborators/Klaud-Cold/permission";
    let (s, _, v) = t.call(Some(READER), Method::GET, path, None).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    assert_eq!(
        v["message"],
        "Must have push access to view repository collaborators."
    );
    let (s, _, v) = t.call(Some(BOT), Method::GET, path, None).await;
    assert_eq!(
        (s, v["permission"].as_str()),
        (StatusCode::OK, Some("write"))
    );
}

/// The mutation's input for `branch` at `expected`, adding `path`.
fn commit_on_branch(branch: &str, expected: &str, path: &str, content: &[u8]) -> Value {
    let contents = base64::engine::general_purpose::STANDARD.encode(content);
    json!({
        "query": "mutation($input: CreateCommitOnBranchInput!) { createCommitOnBranch(input: $input) { commit { oid message tree { oid } } } }",
        "variables": {"input": {
            "branch": {"repositoryNameWithOwner": REPO, "branchName": branch},
            "expectedHeadOid": expected,
            "message": {"headline": format!("add {path}"), "body": "why\n"},
            "fileChanges": {"additions": [{"path": path, "contents": contents}]},
        }},
    })
}

/// GitHub's `createCommitOnBranch`: one commit on the branch's head with
/// the changes on its tree, the branch moved to it, and the same `push`
/// and `pull_request: synchronize` runs a REST ref update starts; a stale
/// `expectedHeadOid` refused with GitHub's `STALE_DATA` error and the
/// branch untouched; malformed or unknown input refused without a panic.
// Kept whole (about 120 lines): one repository's story, REST and GraphQL
// side by side.
#[tokio::test]
async fn create_commit_on_branch_moves_the_branch_like_a_push() {
    let workflow = b"name: ci\non: [push, pull_request]\njobs:\n  t:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo hi\n";
    let sim = GithubOnly::new(REPO)
        .user("Klaud-Cold", None, Some(Permission::Write))
        .user("reader", None, Some(Permission::Read))
        .token("Klaud-Cold", BOT, None)
        .token("reader", READER, Some(1000))
        .files(
            "Klaud-Cold",
            "init",
            &[
                ("a.txt", b"a\n"),
                ("gone/x.txt", b"x\n"),
                (".github/workflows/ci.yml", workflow),
            ],
        )
        .start()
        .await;
    let t = T {
        sim,
        http: klaud_http::http_client_builder()
            .user_agent("klaud-test")
            .build()
            .unwrap(),
    };
    // A pull request needs a commit of its own on its branch.
    let main = t.commit(&t.main_sha().await, "start.txt", "s\n").await;
    for b in ["rest", "gql"] {
        t.post(
            "/repos/sandbox/benchmarks/git/refs",
            json!({"ref": format!("refs/heads/{b}"), "sha": main}),
        )
        .await;
        let pr = json!({"title": b, "head": b, "base": "main", "body": "", "draft": true});
        let (s, v) = t.post("/repos/sandbox/benchmarks/pulls", pr).await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
    }
    // The REST way: tree, commit, ref update.
    let rest = t.commit(&main, "b.txt", "b\n").await;
    let (s, _, v) = t
        .call(
            Some(BOT),
            Method::PATCH,
            "/repos/sandbox/benchmarks/git/refs/heads/rest",
            Some(json!({"sha": rest})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    // The GraphQL way, with and without `refs/heads/`, deleting a folder.
    let mut input = commit_on_branch("refs/heads/gql", &main, "b.txt", b"b\n");
    input["variables"]["input"]["fileChanges"]["deletions"] = json!([{"path": "gone"}]);
    let (s, v) = t.post("/graphql", input).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let c = &v["data"]["createCommitOnBranch"]["commit"];
    let gql = c["oid"].as_str().expect("oid").to_owned();
    assert_eq!(c["message"], "add b.txt\n\nwhy\n");
    let (_, _, r) = t.get("/repos/sandbox/benchmarks/git/ref/heads/gql").await;
    assert_eq!(r["object"]["sha"], gql.as_str());
    let (_, _, commit) = t
        .get(&format!("/repos/sandbox/benchmarks/commits/{gql}"))
        .await;
    assert_eq!(commit["parents"].as_array().map(Vec::len), Some(1));
    assert_eq!(commit["parents"][0]["sha"], main.as_str());
    assert_eq!(commit["author"]["login"], "Klaud-Cold");
    assert_eq!(commit["commit"]["tree"]["sha"], c["tree"]["oid"]);
    let (s, _, _) = t
        .get(&format!(
            "/repos/sandbox/benchmarks/contents/gone/x.txt?ref={gql}"
        ))
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "the deletion applies");
    let (s, _, _) = t
        .get(&format!(
            "/repos/sandbox/benchmarks/contents/b.txt?ref={gql}"
        ))
        .await;
    assert_eq!(s, StatusCode::OK, "the addition applies");
    // The same events start the same workflows as the REST push.
    let events = |sha: String| {
        let t = &t;
        async move {
            let (_, _, runs) = t
                .get(&format!(
                    "/repos/sandbox/benchmarks/actions/runs?head_sha={sha}"
                ))
                .await;
            let mut e: Vec<String> = runs["workflow_runs"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r["event"].as_str().map(str::to_owned))
                .collect();
            e.sort();
            e
        }
    };
    let by_rest = events(rest.clone()).await;
    assert_eq!(by_rest, ["pull_request", "push"]);
    assert_eq!(events(gql.clone()).await, by_rest);

    // A stale head: GitHub's error, HTTP 200, the branch untouched.
    let (s, v) = t
        .post("/graphql", commit_on_branch("gql", &main, "c.txt", b"c\n"))
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["data"]["createCommitOnBranch"], Value::Null);
    assert_eq!(v["errors"][0]["type"], "STALE_DATA");
    assert_eq!(
        v["errors"][0]["message"],
        format!("Expected branch to point to \"{main}\" but it did not.  Pull and try again.")
    );
    let (_, _, r) = t.get("/repos/sandbox/benchmarks/git/ref/heads/gql").await;
    assert_eq!(r["object"]["sha"], gql.as_str());

    // Unknown branch and repository, a reader, malformed input.
    let (_, v) = t
        .post("/graphql", commit_on_branch("nope", &gql, "c.txt", b"c\n"))
        .await;
    assert_eq!(v["errors"][0]["type"], "NOT_FOUND", "{v}");
    let mut other = commit_on_branch("gql", &gql, "c.txt", b"c\n");
    other["variables"]["input"]["branch"]["repositoryNameWithOwner"] = json!("sandbox/none");
    let (_, v) = t.post("/graphql", other).await;
    assert_eq!(v["errors"][0]["type"], "NOT_FOUND", "{v}");
    let (_, _, v) = t
        .call(
            Some(READER),
            Method::POST,
            "/graphql",
            Some(commit_on_branch("gql", &gql, "c.txt", b"c\n")),
        )
        .await;
    assert_eq!(v["errors"][0]["type"], "FORBIDDEN", "{v}");
    let malformed = [
        json!({"input": null}),
        json!({"input": {"branch": {"repositoryNameWithOwner": REPO, "branchName": "gql"}}}),
        json!({"input": {"branch": {"repositoryNameWithOwner": REPO, "branchName": "gql"},
            "expectedHeadOid": "xyz", "message": {"headline": "h"}}}),
        json!({"input": {"branch": {"repositoryNameWithOwner": REPO, "branchName": "gql"},
            "expectedHeadOid": gql, "message": {"headline": "h"},
            "fileChanges": {"additions": [{"path": "a", "contents": "%%%"}]}}}),
        json!({"input": {"branch": {"repositoryNameWithOwner": REPO, "branchName": "gql"},
            "expectedHeadOid": gql, "message": {"headline": "h"},
            "fileChanges": {"additions": [{"path": "../a", "contents": ""}]}}}),
    ];
    let query = "mutation($input: CreateCommitOnBranchInput!) { createCommitOnBranch(input: $input) { commit { oid } } }";
    for vars in malformed {
        let (s, v) = t
            .post("/graphql", json!({"query": query, "variables": vars}))
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert!(v["errors"][0]["message"].is_string(), "{vars}: {v}");
    }
    let (_, _, r) = t.get("/repos/sandbox/benchmarks/git/ref/heads/gql").await;
    assert_eq!(r["object"]["sha"], gql.as_str(), "nothing refused moved it");
    // An empty change list is an empty commit, as the docs allow.
    let mut empty = commit_on_branch("gql", &gql, "c.txt", b"c\n");
    empty["variables"]["input"]["fileChanges"] = json!({});
    let (_, v) = t.post("/graphql", empty).await;
    let c = &v["data"]["createCommitOnBranch"]["commit"];
    let (_, _, parent) = t
        .get(&format!("/repos/sandbox/benchmarks/git/commits/{gql}"))
        .await;
    assert_eq!(c["tree"]["oid"], parent["tree"]["sha"], "{v}");
    // The commit counts against the content-creation limit, as GitHub
    // counts what its GraphQL API creates.
    let tip = c["oid"].as_str().expect("oid").to_owned();
    t.sim.state().set_content_limits(Some(1), None).await;
    let (s, v) = t
        .post("/graphql", commit_on_branch("gql", &tip, "d.txt", b"d\n"))
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    let (_, _, r) = t.get("/repos/sandbox/benchmarks/git/ref/heads/gql").await;
    assert_eq!(r["object"]["sha"], tip.as_str());
}

#[tokio::test]
async fn repository_issue_comments_filter_by_update_and_sort_as_github_does() {
    let t = T::new().await;
    let repo = "/repos/sandbox/benchmarks";
    let mut ids = Vec::new();
    let mut last_issue = Value::Null;
    for (title, comments) in [("one", 3), ("two", 1)] {
        let (s, issue) = t
            .post(&format!("{repo}/issues"), json!({"title": title}))
            .await;
        assert_eq!(s, StatusCode::CREATED, "{issue}");
        for i in 0..comments {
            let (s, c) = t
                .post(
                    &format!("{repo}/issues/{}/comments", issue["number"]),
                    json!({"body": format!("{title} {i}")}),
                )
                .await;
            assert_eq!(s, StatusCode::CREATED, "{c}");
            ids.push(c["id"].as_u64().unwrap());
        }
        last_issue = issue["number"].clone();
    }
    let listed = |v: &Value| -> Vec<u64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_u64().unwrap())
            .collect()
    };
    // Without `sort`: every issue's comments, ascending by id, and
    // `direction` ignored.
    let (s, _, v) = t
        .get(&format!("{repo}/issues/comments?direction=desc"))
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(listed(&v), ids);
    let on = format!("/issues/{last_issue}");
    assert!(v[3]["issue_url"].as_str().unwrap().ends_with(&on), "{v}");
    // `since` is on `updated_at`: an edit brings an old comment back,
    // and `sort=updated` puts it last going up.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let (s, _, edited) = t
        .call(
            Some(BOT),
            Method::PATCH,
            &format!("{repo}/issues/comments/{}", ids[0]),
            Some(json!({"body": "/klaud status"})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{edited}");
    let since = edited["updated_at"].as_str().unwrap();
    let (_, _, v) = t
        .get(&format!("{repo}/issues/comments?since={since}"))
        .await;
    assert_eq!(listed(&v), [ids[0]]);
    let (_, _, v) = t
        .get(&format!(
            "{repo}/issues/comments?sort=updated&direction=asc"
        ))
        .await;
    assert_eq!(listed(&v).last(), Some(&ids[0]));
    // `sort` alone goes down.
    let (_, _, v) = t.get(&format!("{repo}/issues/comments?sort=updated")).await;
    assert_eq!(listed(&v).first(), Some(&ids[0]));
    // Pages with `Link`.
    let (_, h, v) = t
        .get(&format!(
            "{repo}/issues/comments?sort=created&direction=asc&per_page=3"
        ))
        .await;
    assert_eq!(listed(&v), ids[..3]);
    assert!(h["link"].to_str().unwrap().contains("rel=\"next\""));
    // Bad parameters are refused, not ignored.
    for bad in ["sort=comments", "direction=up", "since=yesterday"] {
        let (s, _, v) = t.get(&format!("{repo}/issues/comments?{bad}")).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {v}");
    }
}

/// A document of two mutations, as GitHub runs one: `createRef` then
/// `createCommitOnBranch`, each answered under its own key, a refused
/// field `null` with an error whose `path` names it while the next still
/// runs; a field or variable that does not fit the schema refuses the
/// whole document before anything runs.
// Kept whole (about 110 lines): one branch's story through the outcomes.
#[tokio::test]
async fn a_document_of_two_mutations_runs_each_in_turn() {
    let t = T::new().await;
    let main = t.main_sha().await;
    let (_, _, repo) = t.get("/repos/sandbox/benchmarks").await;
    let repository = repo["node_id"].as_str().expect("node_id").to_owned();
    let both = |branch: &str, expected: &str, path: &str| {
        let mut doc = commit_on_branch(branch, expected, path, b"x\n");
        doc["query"] = json!(
            "mutation($ref: CreateRefInput!, $input: CreateCommitOnBranchInput!) { made: createRef(input: $ref) { ref { name } } createCommitOnBranch(input: $input) { commit { oid } } }"
        );
        doc["variables"]["ref"] = json!({
            "repositoryId": repository, "name": format!("refs/heads/{branch}"), "oid": main,
        });
        doc
    };
    let tip = |branch: &'static str| {
        let t = &t;
        async move {
            let (_, _, r) = t
                .get(&format!("/repos/sandbox/benchmarks/git/ref/heads/{branch}"))
                .await;
            r["object"]["sha"].as_str().map(str::to_owned)
        }
    };

    // A new branch: both run, the ref under its alias.
    let (s, v) = t.post("/graphql", both("fresh", &main, "a.txt")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(v.get("errors").is_none(), "{v}");
    assert_eq!(v["data"]["made"]["ref"]["name"], "fresh");
    let first = v["data"]["createCommitOnBranch"]["commit"]["oid"]
        .as_str()
        .expect("a commit")
        .to_owned();
    assert_eq!(tip("fresh").await, Some(first.clone()));

    // The branch is there at the base: the ref is refused, and the
    // commit, which runs anyway, lands on it.
    t.post(
        "/repos/sandbox/benchmarks/git/refs",
        json!({"ref": "refs/heads/left", "sha": main}),
    )
    .await;
    let (_, v) = t.post("/graphql", both("left", &main, "a.txt")).await;
    assert_eq!(v["data"]["made"], Value::Null, "{v}");
    assert_eq!(v["errors"][0]["path"], json!(["made"]));
    assert_eq!(
        v["errors"][0]["message"],
        "A ref named \"refs/heads/left\" already exists in the repository."
    );
    let landed = v["data"]["createCommitOnBranch"]["commit"]["oid"]
        .as_str()
        .map(str::to_owned);
    assert!(landed.is_some(), "{v}");
    assert_eq!(tip("left").await, landed);

    // The branch is elsewhere: both refused, each with its own error,
    // and nothing moves.
    let (_, v) = t.post("/graphql", both("fresh", &main, "b.txt")).await;
    assert_eq!(v["data"]["made"], Value::Null, "{v}");
    assert_eq!(v["data"]["createCommitOnBranch"], Value::Null, "{v}");
    let paths: Vec<&Value> = v["errors"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| &e["path"])
        .collect();
    assert_eq!(paths, [&json!(["made"]), &json!(["createCommitOnBranch"])]);
    assert_eq!(v["errors"][1]["type"], "STALE_DATA");
    assert_eq!(tip("fresh").await, Some(first));

    // An unknown field, an undeclared variable, a commit input that does
    // not fit: refused whole, so the ref before them is not created.
    let mut unknown = both("never1", &main, "c.txt");
    unknown["query"] = json!(
        "mutation($ref: CreateRefInput!) { createRef(input: $ref) { ref { name } } mergeBranch(input: {}) { clientMutationId } }"
    );
    let mut undeclared = both("never2", &main, "c.txt");
    undeclared["query"] = json!(
        "mutation($ref: CreateRefInput!) { createRef(input: $ref) { ref { name } } createCommitOnBranch(input: $input) { commit { oid } } }"
    );
    let mut misfit = both("never3", &main, "c.txt");
    misfit["variables"]["input"]["expectedHeadOid"] = json!("not-a-sha");
    for (doc, branch) in [
        (unknown, "never1"),
        (undeclared, "never2"),
        (misfit, "never3"),
    ] {
        let (s, v) = t.post("/graphql", doc).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert!(v.get("data").is_none(), "{v}");
        assert!(v["errors"][0]["message"].is_string(), "{v}");
        assert_eq!(tip(branch).await, None, "{branch}: {v}");
    }

    // Not a document, or one too deeply nested: refused, no panic.
    for query in [
        "mutation {",
        "{ a }}}",
        &format!("{}{}", "{".repeat(40), "}".repeat(40)),
    ] {
        let (s, v) = t
            .post("/graphql", json!({"query": query, "variables": {}}))
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert!(v["errors"][0]["message"].is_string(), "{query}: {v}");
    }

    // A repository id that names nothing: the ref's own error.
    let mut nowhere = both("never4", &main, "c.txt");
    nowhere["variables"]["ref"]["repositoryId"] = json!("R_0");
    let (_, v) = t.post("/graphql", nowhere).await;
    assert_eq!(v["errors"][0]["type"], "NOT_FOUND", "{v}");
    assert_eq!(v["errors"][1]["type"], "NOT_FOUND", "{v}");
    assert_eq!(tip("never4").await, None);
}
