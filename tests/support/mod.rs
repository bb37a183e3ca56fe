//! Helpers shared by the integration tests.
#![allow(dead_code)]

mod harness;
pub use harness::*;

mod github;
pub use github::*;

mod daemon;
pub use daemon::*;

mod screens;
pub use screens::*;

mod validated;
pub use validated::*;

mod staged;
pub use staged::*;

mod own;
pub use own::*;

use std::path::{Path, PathBuf};

/// The repository root (the tests are compiled as part of `src/klaud`).
pub const REPO_ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// The shared InferenceX fixtures beside the checkout, or `None` (with a loud
/// message) when they are absent on a developer machine. On CI (`CI` set)
/// their absence is a failure.
pub fn inferencex_full() -> Option<PathBuf> {
    let path = Path::new(REPO_ROOT).join("../shared/fixtures/inferencex/full");
    if path.join("configs/nvidia-master.yaml").is_file() {
        return Some(path);
    }
    if std::env::var_os("CI").is_some() {
        panic!(
            "the shared InferenceX fixtures are missing at {}; CI must provide them",
            path.display()
        );
    }
    eprintln!(
        "\n*** SKIPPED: the shared InferenceX fixtures are not at {} — this test needs them ***\n",
        path.display()
    );
    None
}

/// The InferenceX-app files beside the checkout (its query code, run as a
/// separate process), or `None` as [`inferencex_full`] says.
pub fn inferencex_app() -> Option<PathBuf> {
    let path = Path::new(REPO_ROOT).join("../shared/fixtures/inferencex-app");
    if path.join("packages/db/src/json-provider.ts").is_file() {
        return Some(path);
    }
    if std::env::var_os("CI").is_some() {
        panic!(
            "the shared InferenceX-app fixtures are missing at {}; CI must provide them",
            path.display()
        );
    }
    eprintln!(
        "\n*** SKIPPED: the shared InferenceX-app fixtures are not at {} — this test needs them ***\n",
        path.display()
    );
    None
}

/// A tool a test needs is missing: a failure on CI (`.ci/run` installs it),
/// a loud skip elsewhere.
pub fn missing_tool(what: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{what} is missing; .ci/run installs it");
    }
    eprintln!("\n*** SKIPPED: {what} is missing — this test needs it ***\n");
}

/// Copies a directory tree (the fixtures are read-only; tests edit copies).
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
            let mut permissions = std::fs::metadata(&target).unwrap().permissions();
            #[allow(clippy::permissions_set_readonly_false)]
            permissions.set_readonly(false);
            std::fs::set_permissions(&target, permissions).unwrap();
        }
    }
}

/// Every file under `root`, relative path → bytes.
pub fn snapshot(root: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut files = std::collections::BTreeMap::new();
    fn walk(root: &Path, dir: &Path, files: &mut std::collections::BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                walk(root, &entry.path(), files);
            } else {
                let relative = entry
                    .path()
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                files.insert(relative, std::fs::read(entry.path()).unwrap());
            }
        }
    }
    walk(root, root, &mut files);
    files
}

/// Someone on GitHub who is not Klaud's engine: a maintainer, the old
/// helper, or the bot's own token used by hand. Klaud's forge writes only
/// with an ownership proof, so the tests act for everyone else through
/// octocrab's plain REST calls.
pub struct Person {
    gh: octocrab::Octocrab,
    repo: String,
}

impl Person {
    /// A person with `token` on `repo` (`owner/name`) of the GitHub at
    /// `api_url`.
    pub fn new(api_url: &str, token: &str, repo: &str) -> Self {
        let gh = octocrab::Octocrab::builder()
            .base_uri(api_url)
            .expect("api url")
            .personal_token(token.to_owned())
            .build()
            .expect("octocrab");
        Self {
            gh,
            repo: repo.to_owned(),
        }
    }

    async fn send(
        &self,
        delete: bool,
        route: &str,
        body: Option<serde_json::Value>,
    ) -> serde_json::Value {
        let route = format!("/repos/{}/{route}", self.repo);
        let response = if delete {
            self.gh._delete(route.as_str(), body.as_ref()).await
        } else {
            self.gh._post(route.as_str(), body.as_ref()).await
        }
        .unwrap_or_else(|e| panic!("{route}: {e}"));
        let status = response.status();
        let text = self.gh.body_to_string(response).await.expect("body");
        assert!(status.is_success(), "{route}: {status} {text}");
        if text.trim().is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_str(&text).expect("json")
        }
    }

    /// Replaces an issue's body as this person would in the web editor
    /// (ticking a box is such an edit); the status and GitHub's answer.
    pub async fn try_edit_issue_body(&self, number: impl Into<u64>, body: &str) -> (u16, String) {
        let number: u64 = number.into();
        let route = format!("/repos/{}/issues/{number}", self.repo);
        let response = self
            .gh
            ._patch(route.as_str(), Some(&serde_json::json!({"body": body})))
            .await
            .unwrap_or_else(|e| panic!("{route}: {e}"));
        let status = response.status().as_u16();
        let text = self.gh.body_to_string(response).await.expect("body");
        (status, text)
    }

    /// [`Person::try_edit_issue_body`] that must succeed.
    pub async fn edit_issue_body(&self, number: impl Into<u64>, body: &str) {
        let number: u64 = number.into();
        let (status, text) = self.try_edit_issue_body(number, body).await;
        assert_eq!(status, 200, "editing #{number}: {text}");
    }

    /// Closes an issue, as a triage user may on any issue.
    pub async fn close_issue(&self, number: impl Into<u64>) {
        let number: u64 = number.into();
        let route = format!("/repos/{}/issues/{number}", self.repo);
        let response = self
            .gh
            ._patch(
                route.as_str(),
                Some(&serde_json::json!({"state": "closed", "state_reason": "completed"})),
            )
            .await
            .unwrap_or_else(|e| panic!("{route}: {e}"));
        assert!(
            response.status().is_success(),
            "{route}: {}",
            response.status()
        );
    }

    /// Removes a label from an issue, as a triage user may.
    pub async fn remove_label(&self, number: impl Into<u64>, label: &str) {
        let number: u64 = number.into();
        self.send(true, &format!("issues/{number}/labels/{label}"), None)
            .await;
    }

    /// Posts a comment; its id.
    pub async fn comment(&self, number: impl Into<u64>, body: &str) -> u64 {
        let number: u64 = number.into();
        let c = self
            .send(
                false,
                &format!("issues/{number}/comments"),
                Some(serde_json::json!({ "body": body })),
            )
            .await;
        c["id"].as_u64().expect("comment id")
    }

    /// Deletes a comment (anyone's, as a maintainer may).
    pub async fn delete_comment(&self, id: u64) {
        self.send(true, &format!("issues/comments/{id}"), None)
            .await;
    }

    /// Deletes a completed workflow run (as a maintainer may, from the
    /// Actions tab).
    pub async fn delete_run(&self, id: u64) {
        self.send(true, &format!("actions/runs/{id}"), None).await;
    }

    /// Closes a pull request (without merging).
    pub async fn close_pull(&self, number: impl Into<u64>) {
        let number: u64 = number.into();
        let route = format!("/repos/{}/pulls/{number}", self.repo);
        let response = self
            .gh
            ._patch(
                route.as_str(),
                Some(&serde_json::json!({ "state": "closed" })),
            )
            .await
            .unwrap_or_else(|e| panic!("{route}: {e}"));
        assert!(
            response.status().is_success(),
            "{route}: {}",
            response.status()
        );
    }

    /// `PUT /pulls/{number}/merge` with `body`: the status and the answer.
    pub async fn try_merge(
        &self,
        number: u64,
        body: serde_json::Value,
    ) -> (u16, serde_json::Value) {
        let route = format!("/repos/{}/pulls/{number}/merge", self.repo);
        let response = self
            .gh
            ._put(route.as_str(), Some(&body))
            .await
            .unwrap_or_else(|e| panic!("{route}: {e}"));
        let status = response.status().as_u16();
        let text = self.gh.body_to_string(response).await.expect("body");
        (
            status,
            serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
        )
    }

    /// Marks the PR ready for review when it is a draft (GitHub merges no
    /// drafts), then merges it at its current head, as a maintainer does
    /// with the merge button. Returns the merge commit sha.
    pub async fn merge_pull(&self, number: impl Into<u64>) -> String {
        let number: u64 = number.into();
        let route = format!("/repos/{}/pulls/{number}", self.repo);
        let pull: serde_json::Value = self
            .gh
            .get(route.as_str(), None::<&()>)
            .await
            .expect("pull");
        if pull["draft"].as_bool() == Some(true) {
            let node = pull["node_id"].as_str().expect("node id");
            let q = format!(
                "mutation {{ markPullRequestReadyForReview(input: {{pullRequestId: \"{node}\"}}) {{ pullRequest {{ isDraft }} }} }}"
            );
            let _: serde_json::Value = self
                .gh
                .graphql(&serde_json::json!({ "query": q }))
                .await
                .expect("ready for review");
        }
        let head = pull["head"]["sha"].as_str().expect("head").to_owned();
        let (status, answer) = self
            .try_merge(number, serde_json::json!({ "sha": head }))
            .await;
        assert_eq!(status, 200, "{answer}");
        answer["sha"].as_str().expect("merge sha").to_owned()
    }

    /// Creates `refs/heads/<branch>` at `sha`.
    pub async fn create_branch(&self, branch: &str, sha: &str) {
        self.send(
            false,
            "git/refs",
            Some(serde_json::json!({ "ref": format!("refs/heads/{branch}"), "sha": sha })),
        )
        .await;
    }

    /// Opens a pull request from `head` onto `base`; its number.
    pub async fn open_pull(&self, head: &str, base: &str, title: &str) -> u64 {
        let p = self
            .send(
                false,
                "pulls",
                Some(serde_json::json!({ "head": head, "base": base, "title": title })),
            )
            .await;
        p["number"].as_u64().expect("pull number")
    }

    /// Adds labels to an issue or pull request.
    pub async fn add_labels(&self, number: impl Into<u64>, labels: &[&str]) {
        let number: u64 = number.into();
        self.send(
            false,
            &format!("issues/{number}/labels"),
            Some(serde_json::json!({ "labels": labels })),
        )
        .await;
    }

    /// Deletes a ref (`refs/heads/...`).
    pub async fn delete_ref(&self, full: &str) {
        let short = full.strip_prefix("refs/").expect("a full ref name");
        self.send(true, &format!("git/refs/{short}"), None).await;
    }

    /// Dispatches `workflow` on `git_ref`; the run id the server returns.
    pub async fn dispatch(&self, workflow: &str, git_ref: &str, inputs: serde_json::Value) -> u64 {
        let out = self
            .send(
                false,
                &format!("actions/workflows/{workflow}/dispatches"),
                Some(serde_json::json!({
                    "ref": git_ref,
                    "inputs": inputs,
                    "return_run_details": true,
                })),
            )
            .await;
        out["workflow_run_id"]
            .as_u64()
            .unwrap_or_else(|| panic!("no run id in {out}"))
    }
}

/// The real InferenceX workflow files of one version (`843c6254`, `newer`)
/// beside the checkout, or `None` (with a loud message) when they are absent
/// on a developer machine. On CI (`CI` set) their absence is a failure.
pub fn inferencex_workflows(version: &str) -> Option<PathBuf> {
    let path = Path::new(REPO_ROOT)
        .join("../shared/fixtures/inferencex/workflows")
        .join(version);
    if path.join("run-sweep.yml").is_file() && path.join("e2e-tests.yml").is_file() {
        return Some(path);
    }
    if std::env::var_os("CI").is_some() {
        panic!(
            "the shared InferenceX workflow fixtures are missing at {}; CI must provide them",
            path.display()
        );
    }
    eprintln!(
        "\n*** SKIPPED: the shared InferenceX workflow fixtures are not at {} — this test needs them ***\n",
        path.display()
    );
    None
}

/// The run once it has completed. GitHub cancels asynchronously (202, then
/// the run ends as `cancelled` a moment later), so a test that cancelled a
/// run reads it until it ends, for at most ten seconds.
pub async fn run_once_completed(forge: &klaud_github::Github, id: u64) -> klaud_github::RunInfo {
    let mut live = forge.get_run(id).await.expect("run");
    for _ in 0..200 {
        if live.status.as_ref().map(|s| s.as_str()) == Some("completed") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        live = forge.get_run(id).await.expect("run");
    }
    live
}

/// Runs `fut` to completion on a fresh current-thread runtime (for
/// synchronous tests that run `klaud` as a process).
pub fn block_on<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(fut)
}

/// Starts what `start` builds on a runtime of its own, on a thread that
/// keeps it served for the life of the test process, and returns what
/// `pick` takes from it (URLs, shared state).
pub fn detached<S, T, F>(start: impl FnOnce() -> F + Send + 'static, pick: fn(&S) -> T) -> T
where
    F: std::future::Future<Output = S>,
    S: 'static,
    T: Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let served = start().await;
            tx.send(pick(&served)).expect("send");
            std::future::pending::<()>().await;
        });
    });
    rx.recv().expect("the detached sandbox started")
}

/// A `results_bmk` artifact (name → file → bytes, as the sandbox's
/// `complete_run` takes them) with one fixed-seq-len row for every frozen
/// baseline point of `rec` (decode-side parallelism for disaggregated
/// points), so a completed sweep covers them all (check-final).
pub fn results_covering(
    rec: &klaud_lifecycle::engine::CandidateRecord,
) -> std::collections::BTreeMap<String, std::collections::BTreeMap<String, Vec<u8>>> {
    let rows: Vec<serde_json::Value> = rec
        .frozen
        .iter()
        .flat_map(|f| &f.baseline.points)
        .filter_map(|p| {
            let klaud_lifecycle::baseline::Scenario::FixedSeqLen { isl, osl } = p.point.scenario
            else {
                return None;
            };
            Some(serde_json::json!({
                "hw": "b200", "conc": p.point.conc, "isl": isl, "osl": osl, "image": rec.image,
                "tp": p.point.decode.tp, "ep": p.point.decode.ep,
                "dp_attention": p.point.decode.dp_attn, "spec_decoding": p.point.spec_decoding,
                "disagg": p.point.prefill.is_some(), "tput_per_gpu": 100.0,
                "output_tput_per_gpu": 50.0, "mean_ttft": 0.1, "mean_tpot": 0.01,
            }))
        })
        .collect();
    let file = serde_json::to_vec(&rows).expect("json");
    std::collections::BTreeMap::from([(
        "results_bmk".to_owned(),
        std::collections::BTreeMap::from([("agg_bmk.json".to_owned(), file)]),
    )])
}
