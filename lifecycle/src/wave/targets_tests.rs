//! A wave's reads of a pick the plan took from Docker Hub's tags API alone,
//! against a real `docker-registry` on loopback and the testkit's tags API.

use std::collections::BTreeSet;

use chrono::{DateTime, Duration, Utc};
use klaud_planner::plan::{PlanOptions, PlanReport, plan};
use klaud_planner::registry::testkit::{
    HubApi, LocalRegistry, PlatformSpec, Pusher, docker_hub_mirrors, one_family_checkout,
};
use klaud_planner::registry::{RegistryClient, RegistryConfig};
use klaud_planner::repo::Repository;

use super::plan_targets;

const REPOSITORY: &str = "klaud/confirm";

/// Pushes `tag` for amd64 with `revision` as its revision label; the tags
/// API is told of it only when `hub` is given.
async fn push(
    pusher: &Pusher,
    hub: Option<&HubApi>,
    tag: &str,
    revision: &str,
    pushed: DateTime<Utc>,
) {
    let labels = [("org.opencontainers.image.revision", revision)];
    let platforms = [PlatformSpec::linux("amd64", &labels, Some(pushed))];
    let image = pusher
        .push_image(REPOSITORY, tag, &platforms)
        .await
        .unwrap();
    if let Some(hub) = hub {
        hub.record(REPOSITORY, tag, pushed, &image);
    }
}

fn client(registry: &LocalRegistry, hub: &HubApi) -> RegistryClient {
    RegistryClient::new(docker_hub_mirrors(registry, Some(hub))).unwrap()
}

async fn targets(
    report: &PlanReport,
    ours: &BTreeSet<String>,
    repository: &Repository,
    registry: &RegistryClient,
) -> Vec<crate::engine::Target> {
    let mut seen = BTreeSet::new();
    plan_targets(report, ours, &mut seen, None, repository, registry).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pick_pinned_at_the_tags_apis_digest_is_worked_only_where_the_registry_serves_it() {
    let test = "a_pick_pinned_at_the_tags_apis_digest_is_worked_only_where_the_registry_serves_it";
    let Some(registry) = LocalRegistry::start_or_skip(test) else {
        return;
    };
    let hub = HubApi::start().unwrap();
    let now = Utc::now();
    let pusher = Pusher::new(registry.base_url());
    let five_days_ago = now - Duration::days(5);
    push(
        &pusher,
        Some(&hub),
        "v0.25.0",
        "old-source",
        now - Duration::days(30),
    )
    .await;
    push(&pusher, Some(&hub), "v0.26.0", "new-source", five_days_ago).await;
    let dir = one_family_checkout(&format!("{REPOSITORY}:v0.25.0")).unwrap();
    let repository = Repository::open(dir.path()).unwrap();
    let reader = client(&registry, &hub);

    let report = plan(&repository, &reader.session(), &PlanOptions::new(now)).await;
    let candidate = report.families[0].candidate.clone().expect("proposed");
    assert_eq!(candidate.tag, "v0.26.0");
    assert!(!candidate.image_read, "{candidate:?}");
    assert_eq!(report.requests.manifest_head, 0, "{:?}", report.requests);

    // The registry serves the digest the API named: the pick is worked,
    // with what its image declares.
    let worked = targets(&report, &BTreeSet::new(), &repository, &reader).await;
    assert_eq!(worked.len(), 1);
    assert_eq!(worked[0].revision.as_deref(), Some("new-source"));
    assert_eq!(worked[0].image, candidate.image.to_string());

    // v0.26.0 is pushed again (the API has not caught up): the tag no
    // longer points where the plan pinned it, and the pick is not worked.
    push(&pusher, None, "v0.26.0", "rebuilt-source", now).await;
    let fresh = client(&registry, &hub);
    assert!(
        targets(&report, &BTreeSet::new(), &repository, &fresh)
            .await
            .is_empty()
    );
    // Nor while the registry does not answer.
    let unreachable = {
        let mut config = RegistryConfig::default();
        config.mirrors.insert(
            "docker.io".to_owned(),
            "http://127.0.0.1:9".parse().unwrap(),
        );
        config.max_retries = 0;
        RegistryClient::new(config).unwrap()
    };
    assert!(
        targets(&report, &BTreeSet::new(), &repository, &unreachable)
            .await
            .is_empty()
    );

    // A claim this instance already holds was confirmed when it was taken:
    // its work goes on whatever the tag does now.
    let held: BTreeSet<String> = report.candidates.iter().map(|c| c.id.clone()).collect();
    assert_eq!(held.len(), 1);
    let worked = targets(&report, &held, &repository, &fresh).await;
    assert_eq!(worked.len(), 1);
    assert_eq!(worked[0].image, candidate.image.to_string());
}
