//! A nightly family moves to a release only when the engine's source
//! repository proves the release contains the nightly's commit: GitHub's
//! compare API, asked through the real forge of the simulator.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use klaud_github::upstream::GithubUpstream;
use klaud_github::{Credential, Secret};
use klaud_planner::plan::{PlanOptions, ReleaseRule, Status, UpstreamCompare, plan};
use klaud_planner::registry::{RegistryClient, RegistryConfig};
use klaud_planner::repo::Repository;
use klaud_planner::tracks::{TrackOrdering, TrackRule};
use klaud_sandbox::github::{GithubSim, Permission};
use klaud_sandbox::registry::{RegistrySim, router};

const TOKEN: &str = "ghp_upstream_reader_token";

/// The engine's source repository with two commits, and release tags at
/// each of them.
async fn upstream() -> (GithubSim, String, String) {
    let (state, _) = crate::support::GithubOnly::new("vllm-project/vllm")
        .user("engine-dev", None, Some(Permission::Write))
        .token("engine-dev", TOKEN, None)
        .state()
        .await;
    let file =
        |text: &str| BTreeMap::from([("README.md".to_owned(), Some(text.as_bytes().to_vec()))]);
    let old = state
        .push_commit(
            "vllm-project/vllm",
            "main",
            "engine-dev",
            file("one"),
            "one",
        )
        .await
        .unwrap();
    let new = state
        .push_commit(
            "vllm-project/vllm",
            "main",
            "engine-dev",
            file("two"),
            "two",
        )
        .await
        .unwrap();
    let sim = crate::support::serve(state).await;
    let http = klaud_http::http_client().expect("http client");
    for (tag, sha) in [("v0.26.0", &new), ("v0.25.9", &old)] {
        let response = http
            .post(format!("{}/repos/vllm-project/vllm/git/refs", sim.url()))
            .bearer_auth(TOKEN)
            .header("user-agent", "klaud-test")
            .json(&serde_json::json!({"ref": format!("refs/tags/{tag}"), "sha": sha}))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{}", response.status());
    }
    (sim, old, new)
}

fn registry_seed(nightly_commit: &str, release: &str) -> String {
    serde_json::json!({"repositories": {"vllm/vllm-openai": {"tags": {
        "v0.25.0": {"pushed": "2026-06-01T00:00:00Z", "created": "2026-06-01T00:00:00Z"},
        "demo-special": {"pushed": "2026-06-01T00:00:00Z"},
        format!("nightly-{nightly_commit}"): {
            "pushed": "2026-08-01T00:00:00Z",
            "labels": {"org.opencontainers.image.revision": nightly_commit}
        },
        release: {"pushed": "2026-09-01T00:00:00Z", "created": "2026-09-01T00:00:00Z"}
    }}}})
    .to_string()
}

/// A demo checkout whose nightly family names `commit`.
fn checkout(commit: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let demo = Path::new(crate::support::REPO_ROOT).join("configs/demo");
    for entry in ["configs/nvidia-master.yaml", "configs/runners.yaml"] {
        let text = std::fs::read_to_string(demo.join(entry)).unwrap();
        let text = text.replace("3ee2df30337a301164c46ae444b76ee67e71c106", commit);
        std::fs::create_dir_all(dir.path().join("configs")).unwrap();
        std::fs::write(dir.path().join(entry), text).unwrap();
    }
    dir
}

async fn plan_nightly(
    commit: &str,
    release: &str,
    compare: Option<&dyn UpstreamCompare>,
) -> klaud_planner::plan::FamilyPlan {
    let sim = Arc::new(RegistrySim::from_seed_json(&registry_seed(commit, release)).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = url::Url::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, router(sim)).await });
    let mut config = RegistryConfig {
        retry_base_delay: Duration::from_millis(1),
        ..RegistryConfig::default()
    };
    for host in ["docker.io", "hub.docker.com", "nvcr.io"] {
        config.mirrors.insert(host.to_owned(), url.clone());
    }
    let client = RegistryClient::new(config).unwrap();
    let dir = checkout(commit);
    let repository = Repository::open(dir.path()).unwrap();
    let mut options = PlanOptions::new(Utc.with_ymd_and_hms(2026, 11, 29, 0, 0, 0).unwrap());
    options.release_rules = vec![ReleaseRule {
        track: TrackRule::new(
            "vllm/vllm-openai",
            r"^v(?P<version>\d+\.\d+\.\d+)$",
            TrackOrdering::Semver,
        )
        .unwrap(),
        nightly_track: Some("nightly-<commit>".into()),
    }];
    options
        .upstream
        .insert("vllm/vllm-openai".into(), "vllm-project/vllm".into());
    options.compare = compare;
    let report = plan(&repository, &client.session(), &options).await;
    server.abort();
    report
        .families
        .into_iter()
        .find(|f| f.family.ends_with(":demo-fp4-b300-vllm-agentic"))
        .unwrap()
}

#[tokio::test]
async fn a_release_that_contains_the_nightly_commit_is_chosen() {
    let (github, old, _new) = upstream().await;
    let compare = GithubUpstream::new(&github.url(), Credential::Token(Secret::new(TOKEN)));
    let family = plan_nightly(&old, "v0.26.0", Some(&compare)).await;
    assert_eq!(family.status, Status::StaleNewer, "{:?}", family.reasons);
    let candidate = family.candidate.unwrap();
    assert_eq!(candidate.tag, "v0.26.0");
    assert!(candidate.nightly_to_release);
}

#[tokio::test]
async fn a_release_behind_the_nightly_commit_is_refused() {
    let (github, _old, new) = upstream().await;
    let compare = GithubUpstream::new(&github.url(), Credential::Token(Secret::new(TOKEN)));
    let family = plan_nightly(&new, "v0.25.9", Some(&compare)).await;
    assert!(family.candidate.is_none_or(|c| !c.nightly_to_release));
    assert!(
        family
            .reasons
            .iter()
            .any(|r| r.contains("is behind the nightly's commit")),
        "{:?}",
        family.reasons
    );
}

#[tokio::test]
async fn without_a_proof_the_release_is_skipped_with_the_reason() {
    let family = plan_nightly(&"a".repeat(40), "v0.26.0", None).await;
    assert!(family.candidate.is_none_or(|c| !c.nightly_to_release));
    assert!(
        family.reasons.iter().any(|r| r.contains("cannot compare")),
        "{:?}",
        family.reasons
    );
}
