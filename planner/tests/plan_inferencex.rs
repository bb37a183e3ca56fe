//! The full InferenceX masters planned against a real `docker-registry` on
//! loopback, seeded with every family's current image and a newer tag on
//! each track.

use std::path::{Path, PathBuf};

use chrono::Utc;
use klaud_planner::plan::{PlanOptions, Status, plan};
use klaud_planner::registry::testkit::{LocalRegistry, Pusher, seed_repository};
use klaud_planner::registry::{RegistryClient, RegistryConfig};
use klaud_planner::repo::Repository;

fn inferencex_full() -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/inferencex/full");
    if path.join("configs/nvidia-master.yaml").is_file() {
        return Some(path);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "the shared InferenceX fixtures are missing at {}",
        path.display()
    );
    eprintln!(
        "\n*** SKIPPED: no shared InferenceX fixtures at {} ***\n",
        path.display()
    );
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_full_inferencex_masters_plan_against_a_real_registry() {
    let Some(full) = inferencex_full() else {
        return;
    };
    let Some(registry) =
        LocalRegistry::start_or_skip("the_full_inferencex_masters_plan_against_a_real_registry")
    else {
        return;
    };
    let repository = Repository::open(&full).unwrap();
    let now = Utc::now();
    let seeded = seed_repository(&Pusher::new(registry.base_url()), &repository, now)
        .await
        .unwrap();
    assert!(seeded.repositories >= 10 && seeded.tags > 100, "{seeded:?}");

    let mut config = RegistryConfig::default();
    for host in [
        "docker.io",
        "nvcr.io",
        "ghcr.io",
        "quay.io",
        "hub.docker.com",
    ] {
        config.mirrors.insert(host.to_owned(), registry.base_url());
    }
    let client = RegistryClient::new(config).unwrap();
    let options = PlanOptions::new(now);
    // The mirror serves no Docker Hub tags API: a release whose tag names
    // no date costs pulls to learn its age, and each plan reads such tags
    // only with the pulls its proposals leave (kept content is free), so
    // the plans that follow read what the first deferred, each within two
    // pulls per Docker Hub proposal, until nothing waits.
    let mut report = plan(&repository, &client.session(), &options).await;
    let hub_pulls = |r: &klaud_planner::plan::PlanReport| {
        r.requests_by_host
            .get("docker.io")
            .map_or(0, |c| c.manifest_get)
    };
    let hub_proposals = |r: &klaud_planner::plan::PlanReport| {
        r.families
            .iter()
            .filter_map(|f| Some((f.candidate.as_ref()?, f.architecture)))
            .filter(|(c, _)| c.image.registry() == "docker.io")
            .map(|(c, arch)| (c.image.normalized_repository(), c.tag.clone(), arch))
            .collect::<std::collections::BTreeSet<_>>()
            .len() as u64
    };
    let waiting = |r: &klaud_planner::plan::PlanReport| {
        r.families
            .iter()
            .filter(|f| {
                f.reasons
                    .iter()
                    .any(|x| x.contains("its tag names no date"))
            })
            .count()
    };
    let mut plans = 1;
    while waiting(&report) > 0 {
        assert!(
            hub_pulls(&report) <= 2 * hub_proposals(&report).max(1),
            "plan {plans}: {} Docker Hub pulls for {} proposals (image and platform)",
            hub_pulls(&report),
            hub_proposals(&report)
        );
        assert!(
            plans < 8,
            "{} families still wait after {plans} plans",
            waiting(&report)
        );
        report = plan(&repository, &client.session(), &options).await;
        plans += 1;
    }
    eprintln!("every deferred release read after {plans} plan(s)");

    assert_eq!(report.families.len(), 208);
    let count = |status: Status| {
        report
            .families
            .iter()
            .filter(|f| f.status == status)
            .count()
    };
    let errors: Vec<_> = report
        .families
        .iter()
        .filter(|f| f.status == Status::Error)
        .map(|f| (&f.family, &f.reasons))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    assert!(
        count(Status::StaleNewer) > 100,
        "{}",
        count(Status::StaleNewer)
    );
    assert!(count(Status::StalePruned) > 0);
    assert!(count(Status::UnknownTrack) > 0);
    // Every seeded newer tag of a tracked family is found, pinned to its digest.
    for family in report
        .families
        .iter()
        .filter(|f| f.status == Status::StaleNewer)
    {
        let candidate = family.candidate.as_ref().unwrap();
        assert!(
            candidate
                .image
                .to_string()
                .contains(&format!(":{}@sha256:", candidate.tag))
        );
    }
    assert_eq!(report.candidates.len(), 5);
    // One listing per repository, nothing twice.
    assert_eq!(report.requests.tags_list, report.floor.tags_list);
    eprintln!(
        "requests {:?}\nfloor {:?}\nelapsed {} ms",
        report.requests, report.floor, report.elapsed_ms
    );

    let again = plan(&repository, &client.session(), &options).await;
    assert_eq!(again.requests.manifest_get, 0);
    assert_eq!(again.requests.blob_get, 0);
}
