//! The GitHub simulator's merge conflicts and the benchmark repository's
//! sweep-reuse gate, over raw HTTP: two PRs appending to the changelog
//! conflict once one merges (GitHub's `mergeable`, computed after a first
//! `null`), a conflicting PR starts no `pull_request` run until main is
//! merged into it, and the sweep of `run-sweep.yml` — the demo's and the
//! real 843c6254 one — skips its benchmark jobs exactly when
//! `find_reusable_sweep_run.py`'s rules say so.

use crate::support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use klaud_sandbox::ci::{CiSim, Script};
use klaud_sandbox::github::{GithubSim, Permission};
use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};

const REPO: &str = "sandbox/benchmarks";
const BOT: &str = "Klaud-Cold";
const BOT_TOKEN: &str = "bot-token";
const MAINTAINER_TOKEN: &str = "maintainer-token";
const OUTSIDER_TOKEN: &str = "outsider-token";
const APP_TOKEN: &str = "app-token";
const INVITED_READER_TOKEN: &str = "invited-reader-token";
const CHANGELOG: &str = "perf-changelog.yaml";
const PATIENCE: Duration = Duration::from_secs(60);

fn demo_dir() -> PathBuf {
    PathBuf::from(support::REPO_ROOT).join("configs/demo")
}

struct T {
    sim: GithubSim,
    ci: CiSim,
    http: Client,
}

impl T {
    /// The demo repository, its workflows replaced by a real InferenceX
    /// version's when `real` names one.
    async fn new(real: Option<&str>) -> Option<Self> {
        let (st, _) = support::GithubOnly::new(REPO)
            .user(BOT, Some("Klaud Cold"), Some(Permission::Write))
            .user("maintainer", None, Some(Permission::Write))
            .user("outsider", None, None)
            .user("invited-reader", None, Some(Permission::Read))
            .token(BOT, BOT_TOKEN, None)
            .token("maintainer", MAINTAINER_TOKEN, None)
            .token("outsider", OUTSIDER_TOKEN, None)
            .token("invited-reader", INVITED_READER_TOKEN, None)
            .seed_dir(&demo_dir(), "maintainer")
            .state()
            .await;
        // A GitHub App's bot with write access, as Klaud's installation.
        st.add_user("klaud-app[bot]", None, true).await;
        st.add_token("klaud-app[bot]", APP_TOKEN, None)
            .await
            .unwrap();
        st.set_permission(REPO, "klaud-app[bot]", Permission::Write)
            .await
            .unwrap();
        if let Some(version) = real {
            let dir = support::inferencex_workflows(version)?;
            let mut files = BTreeMap::new();
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                if name.ends_with(".yml") {
                    files.insert(
                        format!(".github/workflows/{name}"),
                        Some(std::fs::read(&path).unwrap()),
                    );
                }
            }
            st.push_commit(REPO, "main", "maintainer", files, "Use the real workflows")
                .await
                .unwrap();
        }
        let sim = support::serve(st.clone()).await;
        let ci = CiSim::spawn_with_poll(st, Script::all_success(), Duration::from_millis(20));
        Some(Self {
            sim,
            ci,
            http: klaud_http::http_client_builder()
                .user_agent("klaud-test")
                .build()
                .unwrap(),
        })
    }

    async fn call(
        &self,
        token: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = self
            .http
            .request(method, format!("{}/repos/{REPO}{path}", self.sim.url()))
            .bearer_auth(token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let bytes = resp.bytes().await.unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    async fn get(&self, path: &str) -> Value {
        let (s, v) = self.call(BOT_TOKEN, Method::GET, path, None).await;
        assert!(s.is_success(), "GET {path}: {s} {v}");
        v
    }

    async fn post(&self, token: &str, path: &str, body: Value) -> Value {
        let (s, v) = self.call(token, Method::POST, path, Some(body)).await;
        assert!(s.is_success(), "POST {path}: {s} {v}");
        v
    }

    async fn main_sha(&self) -> String {
        self.get("/git/ref/heads/main").await["object"]["sha"]
            .as_str()
            .unwrap()
            .to_string()
    }

    async fn file_at(&self, path: &str, sha: &str) -> String {
        let v = self.get(&format!("/contents/{path}?ref={sha}")).await;
        let b64: String = v["content"]
            .as_str()
            .unwrap()
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        use base64::Engine;
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap(),
        )
        .unwrap()
    }

    /// A ready PR from `branch` appending one changelog entry for `key`.
    async fn open_pr(&self, branch: &str, key: &str) -> (u64, String) {
        let main = self.main_sha().await;
        self.post(
            BOT_TOKEN,
            "/git/refs",
            json!({"ref": format!("refs/heads/{branch}"), "sha": main}),
        )
        .await;
        let changelog = self.file_at(CHANGELOG, &main).await;
        let mut files = BTreeMap::new();
        files.insert(
            CHANGELOG.to_string(),
            Some(format!("{changelog}{}", entry(key)).into_bytes()),
        );
        let head = self
            .sim
            .state()
            .push_commit(REPO, branch, BOT, files, &format!("Sweep {key}"))
            .await
            .unwrap();
        let pr = self
            .post(
                BOT_TOKEN,
                "/pulls",
                json!({"title": format!("Sweep {key}"), "head": branch, "base": "main", "draft": false}),
            )
            .await;
        (pr["number"].as_u64().unwrap(), head)
    }

    async fn label(&self, n: u64, label: &str) {
        self.post(
            BOT_TOKEN,
            &format!("/issues/{n}/labels"),
            json!({"labels": [label]}),
        )
        .await;
    }

    async fn comment(&self, token: &str, n: u64, body: &str) -> Value {
        self.post(
            token,
            &format!("/issues/{n}/comments"),
            json!({"body": body}),
        )
        .await
    }

    /// `mergeable` and `mergeable_state` of one read.
    async fn mergeability(&self, n: u64) -> (Value, Value) {
        let p = self.get(&format!("/pulls/{n}")).await;
        (p["mergeable"].clone(), p["mergeable_state"].clone())
    }

    async fn merge(&self, n: u64) -> (StatusCode, Value) {
        self.call(
            MAINTAINER_TOKEN,
            Method::PUT,
            &format!("/pulls/{n}/merge"),
            Some(json!({"merge_method": "squash"})),
        )
        .await
    }

    async fn runs(&self, event: &str) -> Vec<Value> {
        self.get(&format!("/actions/runs?event={event}&per_page=100"))
            .await["workflow_runs"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// The newest run of `event` on `sha` once completed.
    async fn completed_run_on(&self, event: &str, sha: &str) -> Value {
        let start = tokio::time::Instant::now();
        loop {
            let run = self
                .runs(event)
                .await
                .into_iter()
                .find(|r| r["head_sha"] == sha && r["name"] == "Run Sweep");
            if let Some(run) = run.filter(|r| r["status"] == "completed") {
                return run;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "no completed {event} run on {sha}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn artifact_names(&self, run: &Value) -> Vec<String> {
        let v = self
            .get(&format!("/actions/runs/{}/artifacts", run["id"]))
            .await;
        v["artifacts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["name"].as_str().unwrap().to_string())
            .collect()
    }

    /// Job name → (conclusion, log).
    async fn jobs(&self, run: &Value) -> BTreeMap<String, (String, String)> {
        let v = self
            .get(&format!("/actions/runs/{}/jobs?per_page=100", run["id"]))
            .await;
        let mut out = BTreeMap::new();
        for j in v["jobs"].as_array().unwrap() {
            let log = self
                .http
                .get(format!(
                    "{}/repos/{REPO}/actions/jobs/{}/logs",
                    self.sim.url(),
                    j["id"]
                ))
                .bearer_auth(BOT_TOKEN)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            out.insert(
                j["name"].as_str().unwrap().to_string(),
                (j["conclusion"].as_str().unwrap_or("").to_string(), log),
            );
        }
        out
    }
}

fn entry(key: &str) -> String {
    format!(
        "\n- config-keys:\n    - {key}\n  description:\n    - \"Sweep {key}\"\n  pr-link: https://github.com/{REPO}/pull/0\n"
    )
}

fn has_benchmarks(names: &[String]) -> bool {
    names.iter().any(|n| n.starts_with("bmk_"))
}

#[tokio::test]
async fn a_merged_changelog_entry_makes_the_other_pr_dirty_until_main_is_merged_into_it() {
    let t = T::new(None).await.unwrap();
    let (a, _) = t.open_pr("sweep-a", "demo-fp4-b200-sglang").await;
    let (b, b_head) = t.open_pr("sweep-b", "demo-fp4-b200-vllm").await;

    // GitHub computes mergeability after the first read asks for it.
    assert_eq!(t.mergeability(b).await, (Value::Null, json!("unknown")));
    assert_eq!(t.mergeability(b).await, (json!(true), json!("clean")));

    let (s, merged) = t.merge(a).await;
    assert_eq!(s, StatusCode::OK, "{merged}");
    let squash = merged["sha"].as_str().unwrap().to_string();
    let commit = t.get(&format!("/git/commits/{squash}")).await;
    assert_eq!(
        commit["parents"].as_array().unwrap().len(),
        1,
        "a squash has one parent"
    );

    // Both appended at the tail of the changelog: a conflict, as for git.
    assert_eq!(t.mergeability(b).await, (Value::Null, json!("unknown")));
    assert_eq!(t.mergeability(b).await, (json!(false), json!("dirty")));
    let page = t
        .http
        .get(
            t.get(&format!("/pulls/{b}")).await["html_url"]
                .as_str()
                .unwrap(),
        )
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("conflicts that must be resolved: <code>perf-changelog.yaml</code>"),
        "{page}"
    );
    let (s, refused) = t.merge(b).await;
    assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(refused["message"], "Pull Request is not mergeable");

    // A conflicting PR gets no pull_request run, whatever the event.
    let before = t.runs("pull_request").await.len();
    t.label(b, "full-sweep-fail-fast").await;
    assert_eq!(t.runs("pull_request").await.len(), before);

    // Merge main into the branch with the git data API: main's entries,
    // then the PR's own again.
    let main = t.main_sha().await;
    let main_commit = t.get(&format!("/git/commits/{main}")).await;
    let resolved = format!(
        "{}{}",
        t.file_at(CHANGELOG, &main).await,
        entry("demo-fp4-b200-vllm")
    );
    let tree = t
        .post(
            BOT_TOKEN,
            "/git/trees",
            json!({"base_tree": main_commit["tree"]["sha"], "tree": [
                {"path": CHANGELOG, "mode": "100644", "type": "blob", "content": resolved}]}),
        )
        .await;
    let merge_commit = t
        .post(
            BOT_TOKEN,
            "/git/commits",
            json!({"message": "Merge main", "tree": tree["sha"], "parents": [b_head, main]}),
        )
        .await;
    let merge_sha = merge_commit["sha"].as_str().unwrap().to_string();
    let (s, v) = t
        .call(
            BOT_TOKEN,
            Method::PATCH,
            "/git/refs/heads/sweep-b",
            Some(json!({"sha": merge_sha})),
        )
        .await;
    assert!(s.is_success(), "{v}");
    assert_eq!(t.mergeability(b).await, (Value::Null, json!("unknown")));
    assert_eq!(t.mergeability(b).await, (json!(true), json!("clean")));

    // The PR's commits: its own, then the merge of main, oldest first.
    let commits = t.get(&format!("/pulls/{b}/commits")).await;
    let shas: Vec<&str> = commits
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["sha"].as_str().unwrap())
        .collect();
    assert_eq!(shas, [b_head.as_str(), merge_sha.as_str()]);
    assert_eq!(commits[1]["parents"].as_array().unwrap().len(), 2);
    assert_eq!(commits[0]["commit"]["message"], "Sweep demo-fp4-b200-vllm");
    let page = t
        .get(&format!("/pulls/{b}/commits?per_page=1&page=2"))
        .await;
    assert_eq!(page[0]["sha"], merge_sha.as_str());

    let (s, merged) = t.merge(b).await;
    assert_eq!(s, StatusCode::OK, "{merged}");
    let pulls = t
        .get(&format!(
            "/commits/{}/pulls",
            merged["sha"].as_str().unwrap()
        ))
        .await;
    let numbers: Vec<u64> = pulls
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, [b]);
    let of_head = t.get(&format!("/commits/{b_head}/pulls")).await;
    assert_eq!(of_head[0]["number"], b);
    assert_eq!(
        t.get(&format!("/commits/{squash}/pulls")).await[0]["number"],
        a
    );
}

#[tokio::test]
async fn comment_author_association_follows_github_and_never_trusts_an_app_bot() {
    let t = T::new(None).await.unwrap();
    let (n, _) = t.open_pr("sweep-a", "demo-fp4-b200-sglang").await;
    let by = |token| t.comment(token, n, "/reuse-sweep-run");
    assert_eq!(
        by(MAINTAINER_TOKEN).await["author_association"],
        "COLLABORATOR"
    );
    // Invited with read access is still an invited collaborator on GitHub.
    assert_eq!(
        by(INVITED_READER_TOKEN).await["author_association"],
        "COLLABORATOR"
    );
    assert_eq!(by(OUTSIDER_TOKEN).await["author_association"], "NONE");
    assert_eq!(by(APP_TOKEN).await["author_association"], "NONE");
    let (s, owner_view) = t
        .call(
            BOT_TOKEN,
            Method::GET,
            &format!("/issues/{n}/comments"),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let associations: Vec<&str> = owner_view
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["author_association"].as_str().unwrap())
        .collect();
    assert_eq!(
        associations,
        ["COLLABORATOR", "COLLABORATOR", "NONE", "NONE"]
    );
    let one = t
        .get(&format!("/issues/comments/{}", owner_view[3]["id"]))
        .await;
    assert_eq!(one["author_association"], "NONE");
}

/// Opens a labelled PR, waits for its sweep, and returns (PR, sweep run).
async fn swept_pr(t: &T, branch: &str, key: &str) -> (u64, Value) {
    let (n, head) = t.open_pr(branch, key).await;
    t.label(n, "full-sweep-fail-fast").await;
    let run = t.completed_run_on("pull_request", &head).await;
    assert_eq!(run["conclusion"], "success", "{run}");
    let names = t.artifact_names(&run).await;
    assert!(
        has_benchmarks(&names),
        "{names:?} {:?} {:?}",
        t.jobs(&run).await,
        t.ci.events()
    );
    (n, run)
}

#[tokio::test]
async fn without_a_maintainer_authorization_the_push_to_main_sweeps_again() {
    let t = T::new(None).await.unwrap();
    let (n, run) = swept_pr(&t, "sweep-a", "demo-fp4-b200-sglang").await;
    // Comments by people the gate does not trust.
    t.comment(
        OUTSIDER_TOKEN,
        n,
        &format!("/reuse-sweep-run {}", run["id"]),
    )
    .await;
    t.comment(APP_TOKEN, n, &format!("/reuse-sweep-run {}", run["id"]))
        .await;
    let (s, merged) = t.merge(n).await;
    assert_eq!(s, StatusCode::OK, "{merged}");
    let push = t
        .completed_run_on("push", merged["sha"].as_str().unwrap())
        .await;
    assert_eq!(push["conclusion"], "success");
    let names = t.artifact_names(&push).await;
    assert!(has_benchmarks(&names), "{names:?}");
    let jobs = t.jobs(&push).await;
    assert!(
        jobs.keys().any(|j| j.starts_with("single-node")),
        "{jobs:?}"
    );
    assert!(
        jobs["setup"]
            .1
            .contains(&format!("PR #{n} has no /reuse-sweep-run authorization")),
        "{jobs:?}"
    );
}

#[tokio::test]
async fn a_maintainer_pinned_sweep_is_reused_after_the_merge_without_benchmarking() {
    let t = T::new(None).await.unwrap();
    let (n, run) = swept_pr(&t, "sweep-a", "demo-fp4-b200-sglang").await;
    let id = run["id"].as_u64().unwrap();
    t.comment(
        MAINTAINER_TOKEN,
        n,
        &format!("Results look right.\n/reuse-sweep-run {id}\n"),
    )
    .await;
    let (s, merged) = t.merge(n).await;
    assert_eq!(s, StatusCode::OK, "{merged}");
    let push = t
        .completed_run_on("push", merged["sha"].as_str().unwrap())
        .await;
    assert_eq!(push["conclusion"], "success", "{push}");
    assert_eq!(t.artifact_names(&push).await, Vec::<String>::new());
    let jobs = t.jobs(&push).await;
    assert_eq!(jobs["sweep"].0, "skipped", "{jobs:?}");
    assert_eq!(jobs["setup"].0, "success");
    assert!(
        jobs["setup"].1.contains(&format!(
            "PR #{n} approved reusable full sweep from pinned run {id}"
        )),
        "{jobs:?}"
    );
    assert!(jobs["setup"].1.contains(r#""reuse-enabled": "true""#));
}

#[tokio::test]
async fn a_pinned_run_that_is_not_the_prs_fails_the_gate_closed() {
    let t = T::new(None).await.unwrap();
    let (n, _) = swept_pr(&t, "sweep-a", "demo-fp4-b200-sglang").await;
    t.comment(MAINTAINER_TOKEN, n, "/reuse-sweep-run 12345")
        .await;
    let (_, merged) = t.merge(n).await;
    let push = t
        .completed_run_on("push", merged["sha"].as_str().unwrap())
        .await;
    assert_eq!(push["conclusion"], "failure", "{push}");
    assert!(!has_benchmarks(&t.artifact_names(&push).await));
    let jobs = t.jobs(&push).await;
    assert_eq!(jobs["setup"].0, "failure");
    assert!(
        jobs["setup"]
            .1
            .starts_with("error: GitHub API /actions/runs/12345"),
        "{jobs:?}"
    );
}

#[tokio::test]
async fn a_push_to_an_authorized_pr_or_one_marked_skip_sweep_skips_the_pr_sweep() {
    let t = T::new(None).await.unwrap();
    let (n, _) = swept_pr(&t, "sweep-a", "demo-fp4-b200-sglang").await;
    let st = t.sim.state();
    let push = |message: &'static str| async move {
        let mut files = BTreeMap::new();
        files.insert(format!("notes/{}.md", message.len()), Some(b"x\n".to_vec()));
        st.push_commit(REPO, "sweep-a", BOT, files, message)
            .await
            .unwrap()
    };
    // Not authorized: a push sweeps again.
    let head = push("Touch up").await;
    let run = t.completed_run_on("pull_request", &head).await;
    assert!(has_benchmarks(&t.artifact_names(&run).await));
    // [skip-sweep] in the head commit's message: no benchmark.
    let head = push("Merge main [skip-sweep]").await;
    let run = t.completed_run_on("pull_request", &head).await;
    assert_eq!(run["conclusion"], "success");
    assert!(t.artifact_names(&run).await.is_empty());
    let jobs = t.jobs(&run).await;
    assert_eq!(jobs["check-changelog"].1, "skip-pr-sweep=true\n");
    assert_eq!(jobs["setup"].0, "skipped");
    // A maintainer's authorization: the gate skips the PR sweep.
    t.comment(MAINTAINER_TOKEN, n, "/reuse-sweep-run").await;
    let head = push("More notes").await;
    let run = t.completed_run_on("pull_request", &head).await;
    assert_eq!(run["conclusion"], "success");
    assert!(t.artifact_names(&run).await.is_empty());
    let jobs = t.jobs(&run).await;
    assert_eq!(jobs["reuse-sweep-gate"].0, "success", "{jobs:?}");
    assert!(
        jobs["reuse-sweep-gate"]
            .1
            .contains(r#""skip-pr-sweep": "true""#)
    );
    assert_eq!(jobs["sweep"].0, "skipped");
    let skipped =
        t.ci.events()
            .into_iter()
            .find(|e| e.run_id == run["id"].as_u64().unwrap())
            .unwrap();
    assert!(
        skipped.note.contains("has /reuse-sweep-run authorization"),
        "{skipped:?}"
    );
}

#[tokio::test]
async fn the_real_843c6254_sweep_reuses_an_authorized_pr_sweep_after_merge() {
    let Some(t) = T::new(Some("843c6254")).await else {
        return;
    };
    let (n, run) = swept_pr(&t, "sweep-a", "demo-fp4-b200-sglang").await;
    t.comment(
        MAINTAINER_TOKEN,
        n,
        &format!("/reuse-sweep-run {}", run["id"]),
    )
    .await;
    let (s, merged) = t.merge(n).await;
    assert_eq!(s, StatusCode::OK, "{merged}");
    let push = t
        .completed_run_on("push", merged["sha"].as_str().unwrap())
        .await;
    assert_eq!(push["conclusion"], "success", "{push}");
    assert!(!has_benchmarks(&t.artifact_names(&push).await));
    let jobs = t.jobs(&push).await;
    assert_eq!(
        jobs.get("single-node 1k1k /").map(|j| j.0.as_str()),
        Some("skipped"),
        "{jobs:?} {:?}",
        t.ci.events()
    );
    assert!(
        jobs["setup"]
            .1
            .contains("approved reusable full sweep from pinned run")
    );

    // The same PR flow without the comment benchmarks on main.
    let Some(t) = T::new(Some("843c6254")).await else {
        return;
    };
    let (n, _) = swept_pr(&t, "sweep-a", "demo-fp4-b200-sglang").await;
    let (_, merged) = t.merge(n).await;
    let push = t
        .completed_run_on("push", merged["sha"].as_str().unwrap())
        .await;
    assert!(has_benchmarks(&t.artifact_names(&push).await));
    let jobs = t.jobs(&push).await;
    assert!(
        jobs.keys()
            .any(|j| j.starts_with("single-node 8k1k / / p1 |")),
        "{jobs:?}"
    );
}
