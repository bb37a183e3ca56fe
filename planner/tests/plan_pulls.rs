//! Docker Hub pulls: a manifest GET is a pull against a small hourly
//! quota, so a plan orders, screens and proposes tags with what is free
//! (the tag listing, Docker Hub's tags API); a wave pulls only
//! the image of a candidate it picks — and, with the manifests kept
//! ([`MemoryContentCache`], what the daemon's store keeps between runs),
//! never twice for one digest. Against
//! a real `docker-registry` on loopback and the testkit's Docker Hub tags
//! API.

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use klaud_planner::plan::{PlanOptions, PlanReport, Status, plan};
use klaud_planner::registry::testkit::{
    HubApi, LocalRegistry, PlatformSpec, Pusher, docker_hub_mirrors, one_family_checkout,
};
use klaud_planner::registry::{MemoryContentCache, RegistryClient};
use klaud_planner::repo::Repository;

async fn push(
    pusher: &Pusher,
    hub: &HubApi,
    tag: &str,
    architectures: &[&str],
    pushed: DateTime<Utc>,
) {
    let revision = format!("{tag}-source");
    let labels = [("org.opencontainers.image.revision", revision.as_str())];
    let platforms: Vec<PlatformSpec> = architectures
        .iter()
        .map(|a| PlatformSpec::linux(a, &labels, Some(pushed)))
        .collect();
    let image = pusher
        .push_image("klaud/pulls", tag, &platforms)
        .await
        .unwrap();
    hub.record("klaud/pulls", tag, pushed, &image);
}

fn client(
    registry: &LocalRegistry,
    hub: &HubApi,
    content: &Arc<MemoryContentCache>,
) -> RegistryClient {
    let client = RegistryClient::new(docker_hub_mirrors(registry, Some(hub))).unwrap();
    client.set_content_cache(content.clone());
    client
}

fn pulls(report: &PlanReport) -> u64 {
    report
        .requests_by_host
        .get("docker.io")
        .map_or(0, |c| c.manifest_get)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_proposed_candidate_is_pulled_and_never_again() {
    let test = "only_the_proposed_candidate_is_pulled_and_never_again";
    let Some(registry) = LocalRegistry::start_or_skip(test) else {
        return;
    };
    let hub = HubApi::start().unwrap();
    let now = Utc::now();
    let pusher = Pusher::new(registry.base_url());
    push(
        &pusher,
        &hub,
        "v0.25.0",
        &["amd64"],
        now - Duration::days(30),
    )
    .await;
    push(
        &pusher,
        &hub,
        "v0.26.0",
        &["amd64"],
        now - Duration::days(5),
    )
    .await;
    // Newer, but one only for arm64 and one pushed an hour ago: Docker Hub's
    // tags API says so without a pull.
    push(
        &pusher,
        &hub,
        "v0.27.0",
        &["arm64"],
        now - Duration::days(3),
    )
    .await;
    push(
        &pusher,
        &hub,
        "v0.28.0",
        &["amd64"],
        now - Duration::hours(1),
    )
    .await;
    let dir = one_family_checkout("klaud/pulls:v0.25.0").unwrap();
    let repository = Repository::open(dir.path()).unwrap();
    let content = Arc::new(MemoryContentCache::default());

    let cold = plan(
        &repository,
        &client(&registry, &hub, &content).session(),
        &PlanOptions::new(now),
    )
    .await;
    let family = &cold.families[0];
    assert_eq!(family.status, Status::StaleNewer, "{:?}", family.reasons);
    assert_eq!(family.candidate.as_ref().unwrap().tag, "v0.26.0");
    let reasons = family.reasons.join("; ");
    assert!(reasons.contains("v0.28.0: only 1h old"), "{reasons}");
    assert!(
        reasons.contains("v0.27.0: no linux/amd64 image (Docker Hub lists linux/arm64)"),
        "{reasons}"
    );
    // The tags API told its digest, age and platforms, so nothing is read,
    // for the tags passed over or for the one proposed: no pull, and no
    // HEAD (a wave confirms the digest of a pick before acting on it).
    assert_eq!(pulls(&cold), 0, "{:?}", cold.requests_by_host);
    assert_eq!(cold.requests.manifest_head, 0);
    assert_eq!(cold.requests.blob_get, 0);
    let candidate = family.candidate.as_ref().unwrap();
    assert!(!candidate.image_read);
    assert_eq!(candidate.revision, None);
    assert!(candidate.versions.is_empty());
    assert!(
        candidate.image.to_string().ends_with(&candidate.digest),
        "{}",
        candidate.image
    );
    // The floor of this scenario (the API's page and the tag list) is
    // exactly what was made.
    assert_eq!(
        cold.requests.total(),
        cold.floor.total(),
        "{:?} vs {:?}",
        cold.requests,
        cold.floor
    );

    // A restarted Klaud plans the same without a pull.
    let warm = plan(
        &repository,
        &client(&registry, &hub, &content).session(),
        &PlanOptions::new(now),
    )
    .await;
    assert_eq!(warm.families[0].candidate.as_ref().unwrap().tag, "v0.26.0");
    assert_eq!(pulls(&warm), 0, "{:?}", warm.requests_by_host);

    // A wave reads the image of the candidate it picks (its versions and
    // revision): its index and amd64 manifest, two pulls, once; with the
    // content kept, a restarted Klaud reads it again without a pull.
    let reader = client(&registry, &hub, &content);
    let declared = klaud_planner::provenance::declared(&reader, &candidate.image, "amd64")
        .await
        .unwrap()
        .expect("the candidate's image is there");
    assert_eq!(declared.revision.as_deref(), Some("v0.26.0-source"));
    assert_eq!(reader.counts().manifest_get, 2);
    let again = client(&registry, &hub, &content);
    klaud_planner::provenance::declared(&again, &candidate.image, "amd64")
        .await
        .unwrap()
        .expect("read again");
    assert_eq!(again.counts().manifest_get, 0);
}
