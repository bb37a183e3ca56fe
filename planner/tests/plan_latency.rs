//! A plan at a registry's latency: round trips counted by a loopback proxy
//! in front of a real `docker-registry` (`DelayProxy::rounds`: the longest
//! chain of requests each asked after the one before it was answered), so
//! what waits on what is checked from the order of events, not the clock.
//!
//! Reading a tag's age takes three reads that need each other (index,
//! platform manifest, config). The newest build is often too young to
//! propose; where pulls are not counted the next one is read beside it, so
//! passing it over costs no round trips of its own. A tag pinned by digest
//! is asked whether it moved beside the track's reads, not before them.

use chrono::{Duration, Utc};
use klaud_planner::plan::{PlanOptions, PlanReport, plan};
use klaud_planner::registry::testkit::{DelayProxy, LocalRegistry, PlatformSpec, Pusher};
use klaud_planner::registry::{RegistryClient, RegistryConfig};
use klaud_planner::repo::Repository;

/// Well above the pauses of a loaded machine between requests a client
/// sends together, so the proxy's order of events is the plan's.
const DELAY: std::time::Duration = std::time::Duration::from_millis(300);
const REPOSITORY: &str = "acme/server";

/// A checkout with one family running `image`.
fn checkout(image: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let master = format!(
        "server-fp8-h200-vllm:\n  image: {image}\n  model: demo/Demo\n  model-prefix: demo\n  runner: h200\n  precision: fp8\n  framework: vllm\n  multinode: false\n  scenarios:\n    fixed-seq-len:\n    - isl: 1024\n      osl: 1024\n      search-space:\n      - {{ tp: 8, conc-start: 4, conc-end: 64 }}\n"
    );
    std::fs::create_dir_all(dir.path().join("configs")).unwrap();
    std::fs::write(dir.path().join("configs/nvidia-master.yaml"), master).unwrap();
    dir
}

/// Pushes `tag`, made `hours` ago; returns the digest its tag resolves to.
async fn push(pusher: &Pusher, tag: &str, hours: i64, label: &str) -> String {
    let made = Utc::now() - Duration::hours(hours);
    pusher
        .push_image(
            REPOSITORY,
            tag,
            &[PlatformSpec::linux(
                "amd64",
                &[("build", label)],
                Some(made),
            )],
        )
        .await
        .unwrap()
        .index_digest
}

/// Plans the checkout with quay.io behind a fresh delaying proxy: the
/// report, and the round trips and requests the proxy saw.
async fn plan_at_latency(registry: &LocalRegistry, image: &str) -> (PlanReport, u64, u64) {
    let dir = checkout(image);
    let repository = Repository::open(dir.path()).unwrap();
    let proxy = DelayProxy::start(registry.base_url(), DELAY).unwrap();
    let mut config = RegistryConfig::default();
    config
        .mirrors
        .insert("quay.io".to_owned(), proxy.base_url());
    let client = RegistryClient::new(config).unwrap();
    let report = plan(
        &repository,
        &client.session(),
        &PlanOptions::new(Utc::now()),
    )
    .await;
    (report, proxy.rounds(), proxy.requests())
}

fn proposed(report: &PlanReport) -> Option<&str> {
    report.families[0]
        .candidate
        .as_ref()
        .map(|c| c.tag.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newest_build_too_young_to_propose_costs_no_round_trips_of_its_own() {
    let Some(registry) = LocalRegistry::start_or_skip("plan_latency") else {
        return;
    };
    let pusher = Pusher::new(registry.base_url());
    let current = "quay.io/acme/server:v0.4.0";
    push(&pusher, "v0.4.0", 24 * 30, "4").await;
    push(&pusher, "v0.5.0", 24 * 10, "5").await;

    // One newer build: the tag list, then its index, manifest and config.
    let (alone, alone_rounds, alone_requests) = plan_at_latency(&registry, current).await;
    assert_eq!(proposed(&alone), Some("v0.5.0"), "{alone:#?}");
    assert_eq!(alone_rounds, 4, "{alone:#?}");

    // A newer one an hour old is read, and passed over, beside it.
    push(&pusher, "v0.6.0", 1, "6").await;
    let (report, rounds, requests) = plan_at_latency(&registry, current).await;
    let family = &report.families[0];
    assert_eq!(proposed(&report), Some("v0.5.0"), "{report:#?}");
    assert!(
        family
            .reasons
            .iter()
            .any(|r| r.starts_with("v0.6.0: only 1h old")),
        "{:?}",
        family.reasons
    );
    assert_eq!(
        rounds, alone_rounds,
        "passing over the too-young newest waited on it: {rounds} round trips"
    );
    // Its own index, manifest and config, which its verdict needs, and
    // nothing else.
    assert_eq!(requests, alone_requests + 3);
    assert_eq!(report.requests.total(), report.floor.total());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_qualifying_newest_costs_at_most_the_next_builds_three_reads() {
    let Some(registry) = LocalRegistry::start_or_skip("plan_latency") else {
        return;
    };
    let pusher = Pusher::new(registry.base_url());
    push(&pusher, "v0.4.0", 24 * 30, "4").await;
    push(&pusher, "v0.5.0", 24 * 10, "5").await;
    push(&pusher, "v0.6.0", 24 * 3, "6").await;
    let (report, rounds, _) = plan_at_latency(&registry, "quay.io/acme/server:v0.4.0").await;
    assert_eq!(proposed(&report), Some("v0.6.0"), "{report:#?}");
    assert_eq!(rounds, 4);
    // The read of v0.5.0 beside it was spent for nothing: the price of not
    // waiting, bounded by one image.
    assert_eq!(
        report.requests.total(),
        report.floor.total() + 3,
        "{:?} against the floor {:?}",
        report.requests,
        report.floor
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_tag_is_asked_whether_it_moved_beside_the_tracks_reads() {
    let Some(registry) = LocalRegistry::start_or_skip("plan_latency") else {
        return;
    };
    let pusher = Pusher::new(registry.base_url());
    let pinned = push(&pusher, "v0.4.0", 24 * 30, "4").await;
    push(&pusher, "v0.5.0", 24 * 10, "5").await;
    push(&pusher, "v0.6.0", 1, "6").await;
    // The tag is pushed again over the pinned build.
    let moved = push(&pusher, "v0.4.0", 24 * 20, "4 again").await;
    assert_ne!(pinned, moved);

    let image = format!("quay.io/acme/server:v0.4.0@{pinned}");
    let (report, rounds, _) = plan_at_latency(&registry, &image).await;
    let family = &report.families[0];
    assert_eq!(proposed(&report), Some("v0.5.0"), "{report:#?}");
    assert_eq!(
        family.reasons.first().map(String::as_str),
        Some(
            format!(
                "tag v0.4.0 moved: pinned {pinned}, the registry now serves {moved}; not bumped for that alone"
            )
            .as_str()
        ),
        "{:?}",
        family.reasons
    );
    assert_eq!(
        rounds, 4,
        "the HEAD of the pinned tag held back the track's reads"
    );
}
