//! The demo's scripted maintainer: once two validated PRs wait for their
//! merge, it squash-merges the older one, as a maintainer would with the
//! merge button. Every other validated PR then conflicts on
//! `perf-changelog.yaml` until Klaud's next pass merges the base into it;
//! the scene ends when they all merge cleanly again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::http::Method;
use klaud_sandbox::stack::{MAINTAINER, MAINTAINER_TOKEN};
use klaud_service::dashboard::StatusSnapshot;
use serde_json::Value;
use tokio::sync::watch;

use super::super::story::TerminalStory;

/// How often the maintainer looks at the dashboard feed and the PRs.
const LOOK_EVERY: Duration = Duration::from_millis(500);

/// The scene's state, shared with the demo's "done" watch.
#[derive(Debug, Default)]
pub struct Scene {
    done: AtomicBool,
}

impl Scene {
    /// Whether the scene has nothing left to show: it played out, or the
    /// demo ended with fewer than two validated PRs.
    pub fn done(&self) -> bool {
        self.done.load(Ordering::SeqCst)
    }

    /// Marks the scene over (nothing to merge).
    pub fn skip(&self) {
        self.done.store(true, Ordering::SeqCst);
    }
}

/// Plays the scene on `repo` (`owner/name`) of the sandbox GitHub at
/// `api`, reading validated PRs from the dashboard `feed`.
pub async fn play(
    api: String,
    repo: String,
    mut feed: watch::Receiver<Arc<StatusSnapshot>>,
    story: Arc<TerminalStory>,
    scene: Arc<Scene>,
) {
    let Ok(http) = klaud_http::http_client_builder()
        .user_agent("klaud-demo-maintainer")
        .build()
    else {
        scene.skip();
        return;
    };
    let maintainer = Maintainer { http, api, repo };
    let Some(merged) = maintainer.merge_one(&mut feed, &story).await else {
        scene.skip();
        return;
    };
    maintainer.wait_until_mergeable(merged).await;
    story.line(&format!(
        "{} maintainer @{MAINTAINER}  every open validated PR merges cleanly again after #{merged}; merging each reuses its sweep",
        chrono::Local::now().format("%H:%M:%S"),
    ));
    scene.done.store(true, Ordering::SeqCst);
}

/// The maintainer's own client of the simulated GitHub.
struct Maintainer {
    http: klaud_http::Client,
    api: String,
    repo: String,
}

impl Maintainer {
    /// The answer's JSON when it succeeded.
    async fn call(&self, method: Method, path: String, body: Option<Value>) -> Option<Value> {
        let mut req = self
            .http
            .request(method, format!("{}/repos/{}/{path}", self.api, self.repo))
            .bearer_auth(MAINTAINER_TOKEN);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.ok()?;
        let ok = resp.status().is_success();
        let value: Value = resp.json().await.ok()?;
        ok.then_some(value)
    }

    /// Waits for two open validated PRs and squash-merges the first; its
    /// number, or `None` when the daemon stopped first.
    async fn merge_one(
        &self,
        feed: &mut watch::Receiver<Arc<StatusSnapshot>>,
        story: &TerminalStory,
    ) -> Option<u64> {
        loop {
            let validated: Vec<u64> = {
                let snapshot = feed.borrow_and_update();
                snapshot
                    .repositories
                    .iter()
                    .flat_map(|r| &r.candidates)
                    .filter(|c| c.outcome.as_deref() == Some("validated"))
                    .filter_map(|c| c.pull_request.as_ref())
                    .filter_map(|l| l.label.strip_prefix('#')?.parse().ok())
                    .collect()
            };
            let mut open = Vec::new();
            for n in validated {
                if let Some(p) = self.call(Method::GET, format!("pulls/{n}"), None).await
                    && p["state"] == "open"
                {
                    open.push(n);
                }
            }
            open.sort_unstable();
            if open.len() >= 2 {
                let n = open[0];
                let body = serde_json::json!({"merge_method": "squash"});
                let merged = self
                    .call(Method::PUT, format!("pulls/{n}/merge"), Some(body))
                    .await;
                if let Some(m) = merged {
                    let sha = m["sha"].as_str().unwrap_or_default();
                    story.line(&format!(
                        "{} maintainer @{MAINTAINER}  squash-merged validated PR #{n} as {}; the other validated PRs now conflict on perf-changelog.yaml",
                        chrono::Local::now().format("%H:%M:%S"),
                        sha.get(..12).unwrap_or(sha)
                    ));
                    return Some(n);
                }
            }
            feed.changed().await.ok()?;
            tokio::time::sleep(LOOK_EVERY).await;
        }
    }

    /// Until Klaud has merged the base into every other open validated PR.
    async fn wait_until_mergeable(&self, merged: u64) {
        loop {
            tokio::time::sleep(LOOK_EVERY).await;
            let pulls = self
                .call(Method::GET, "pulls?state=open&per_page=100".into(), None)
                .await
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default();
            let mut waiting = false;
            for p in pulls
                .iter()
                .filter(|p| {
                    p["head"]["ref"]
                        .as_str()
                        .is_some_and(|r| r.starts_with("klaud/auto-"))
                })
                .filter(|p| p["draft"] == false)
            {
                let n = p["number"].as_u64().unwrap_or_default();
                if n == merged {
                    continue;
                }
                // A single read computes mergeability; the next one answers it.
                let pull = self.call(Method::GET, format!("pulls/{n}"), None).await;
                if pull.as_ref().is_none_or(|p| p["mergeable"] != true) {
                    waiting = true;
                }
            }
            if !waiting {
                return;
            }
        }
    }
}
