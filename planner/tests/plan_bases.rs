//! Builds on another base and Docker Hub without its tags API, against a
//! real `docker-registry` on loopback (and the testkit's Docker Hub tags API
//! where it answers).
//!
//! ATOM's images name their ROCm, Python and PyTorch (`rocm7.2.3_…_atom20260511`),
//! and its maintainers move builds across ROCm versions: the newest build is
//! found whatever its base, the plan says when the proposal moves the base,
//! and a configured track that pins the base names the newest build it left
//! out. Without the tags API every manifest `GET` on Docker Hub is a pull
//! with nothing free to screen tags by: the plan orders by the tags' text,
//! reads at most one image per family and defers, with the reason, what the
//! text cannot order.

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use klaud_planner::plan::{FamilyPlan, PlanOptions, PlanReport, Status, plan};
use klaud_planner::registry::testkit::{
    HubApi, LocalRegistry, PlatformSpec, Pusher, docker_hub_mirrors,
};
use klaud_planner::registry::{MemoryContentCache, RegistryClient};
use klaud_planner::repo::Repository;
use klaud_planner::tracks::{TrackOrdering, TrackRule};

const ATOM: &str = "rocm/atom";

fn atom(rocm: &str, build: &str) -> String {
    format!("rocm{rocm}_ubuntu24.04_py3.12_pytorch_release_2.10.0_atom{build}")
}

/// A checkout whose AMD master has one family per image.
fn checkout(images: &[String]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut master = String::new();
    for (i, image) in images.iter().enumerate() {
        master.push_str(&format!(
            "m{i}-fp8-mi355x-atom:\n  image: {image}\n  model: demo/Demo\n  model-prefix: demo\n  runner: mi355x\n  precision: fp8\n  framework: atom\n  multinode: false\n  scenarios:\n    fixed-seq-len:\n    - isl: 1024\n      osl: 1024\n      search-space:\n      - {{ tp: 8, conc-start: 4, conc-end: 64 }}\n"
        ));
    }
    std::fs::create_dir_all(dir.path().join("configs")).unwrap();
    std::fs::write(dir.path().join("configs/amd-master.yaml"), master).unwrap();
    dir
}

async fn push(
    pusher: &Pusher,
    hub: Option<&HubApi>,
    repository: &str,
    tag: &str,
    made: DateTime<Utc>,
) {
    let image = pusher
        .push_image(
            repository,
            tag,
            &[PlatformSpec::linux("amd64", &[], Some(made))],
        )
        .await
        .unwrap();
    if let Some(hub) = hub {
        hub.record(repository, tag, made, &image);
    }
}

fn client(
    registry: &LocalRegistry,
    hub: Option<&HubApi>,
    content: Option<&Arc<MemoryContentCache>>,
) -> RegistryClient {
    let client = RegistryClient::new(docker_hub_mirrors(registry, hub)).unwrap();
    if let Some(content) = content {
        client.set_content_cache(content.clone());
    }
    client
}

fn family<'r>(report: &'r PlanReport, image: &str) -> &'r FamilyPlan {
    report
        .families
        .iter()
        .find(|f| f.current == image)
        .unwrap_or_else(|| panic!("no family runs {image}: {report:#?}"))
}

fn pulls(report: &PlanReport) -> u64 {
    report
        .requests_by_host
        .get("docker.io")
        .map_or(0, |c| c.manifest_get)
}

fn proposed(report: &PlanReport) -> u64 {
    report
        .families
        .iter()
        .filter(|f| f.candidate.is_some())
        .count() as u64
}

/// A plan's Docker Hub pulls stay within two per proposal.
fn assert_two_pulls_per_proposal(report: &PlanReport) {
    let proposals = proposed(report);
    assert!(
        pulls(report) <= 2 * proposals,
        "{} pulls for {proposals} proposals: {:?}",
        pulls(report),
        report.requests_by_host
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_newest_build_on_another_rocm_is_proposed_and_the_move_is_said() {
    let test = "the_newest_build_on_another_rocm_is_proposed_and_the_move_is_said";
    let Some(registry) = LocalRegistry::start_or_skip(test) else {
        return;
    };
    let hub = HubApi::start().unwrap();
    let now = Utc::now();
    let pusher = Pusher::new(registry.base_url());
    for (tag, days) in [
        (atom("7.2.3", "20260511"), 40),
        (atom("7.2.3", "20260519"), 30),
        (atom("7.2.4", "20260531"), 20),
        (atom("7.2.4", "0.1.3"), 15),
        (atom("7.2.5", "0.1.3"), 10),
        (atom("7.3.1", "0.1.3"), 5),
        (atom("7.2.2", "0.1.2.post"), 50),
    ] {
        push(&pusher, Some(&hub), ATOM, &tag, now - Duration::days(days)).await;
    }
    let images = [
        format!("{ATOM}:{}", atom("7.2.3", "20260511")),
        format!("{ATOM}:{}", atom("7.2.4", "0.1.3")),
        format!("{ATOM}:{}", atom("7.2.2", "0.1.2.post")),
    ];
    let dir = checkout(&images);
    let repository = Repository::open(dir.path()).unwrap();
    let report = plan(
        &repository,
        &client(&registry, Some(&hub), None).session(),
        &PlanOptions::new(now),
    )
    .await;

    // The May 31 build on ROCm 7.2.4, not the May 19 one on 7.2.3.
    let dated = family(&report, &images[0]);
    assert_eq!(dated.status, Status::StaleNewer, "{dated:#?}");
    let candidate = dated.candidate.as_ref().expect("a candidate");
    assert_eq!(candidate.tag, atom("7.2.4", "20260531"));
    assert!(
        dated
            .reasons
            .iter()
            .any(|r| r.ends_with("also moves ROCm 7.2.3 → 7.2.4")),
        "{:?}",
        dated.reasons
    );

    // ATOM 0.1.3 is rebuilt on newer ROCm: the newest base wins the tie.
    let versioned = family(&report, &images[1]);
    let candidate = versioned.candidate.as_ref().expect("a candidate");
    assert_eq!(candidate.tag, atom("7.3.1", "0.1.3"), "{versioned:#?}");
    assert!(
        versioned
            .reasons
            .iter()
            .any(|r| r.ends_with("also moves ROCm 7.2.4 → 7.3.1")),
        "{:?}",
        versioned.reasons
    );

    // An unnumbered post-release has an order: the next ATOM on another ROCm.
    let post = family(&report, &images[2]);
    assert_eq!(post.status, Status::StaleNewer, "{post:#?}");
    assert_eq!(
        post.candidate.as_ref().map(|c| c.tag.as_str()),
        Some(atom("7.3.1", "0.1.3").as_str())
    );

    // Every family not proposed its track's newest tag says why.
    for f in &report.families {
        assert!(!f.reasons.is_empty(), "{f:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_track_that_pins_the_base_names_the_build_it_left_out() {
    let test = "a_configured_track_that_pins_the_base_names_the_build_it_left_out";
    let Some(registry) = LocalRegistry::start_or_skip(test) else {
        return;
    };
    let hub = HubApi::start().unwrap();
    let now = Utc::now();
    let pusher = Pusher::new(registry.base_url());
    for (tag, days) in [
        (atom("7.2.3", "20260511"), 40),
        (atom("7.2.3", "20260519"), 30),
        (atom("7.2.4", "20260531"), 20),
    ] {
        push(&pusher, Some(&hub), ATOM, &tag, now - Duration::days(days)).await;
    }
    let images = [format!("{ATOM}:{}", atom("7.2.3", "20260511"))];
    let dir = checkout(&images);
    let repository = Repository::open(dir.path()).unwrap();
    let mut options = PlanOptions::new(now);
    options.rules = vec![
        TrackRule::new(
            ATOM,
            r"rocm7\.2\.3_ubuntu24\.04_py3\.12_pytorch_release_2\.10\.0_atom(?P<date>[0-9]{8})",
            TrackOrdering::Date,
        )
        .unwrap(),
    ];
    let report = plan(
        &repository,
        &client(&registry, Some(&hub), None).session(),
        &options,
    )
    .await;
    let pinned = family(&report, &images[0]);
    assert_eq!(
        pinned.candidate.as_ref().map(|c| c.tag.as_str()),
        Some(atom("7.2.3", "20260519").as_str()),
        "{pinned:#?}"
    );
    let left_out = format!(
        "newest build left out: {} (newer on rocm<rocm>_ubuntu24.04_py<py>_pytorch_release_<pytorch>_atom<yyyymmdd>): it would move ROCm 7.2.3 → 7.2.4, and the configured track",
        atom("7.2.4", "20260531")
    );
    assert!(
        pinned.reasons.iter().any(|r| r.starts_with(&left_out)),
        "{:?}",
        pinned.reasons
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_tags_api_a_proposal_costs_at_most_two_pulls_and_the_rest_is_deferred() {
    let test = "without_the_tags_api_a_proposal_costs_at_most_two_pulls_and_the_rest_is_deferred";
    let Some(registry) = LocalRegistry::start_or_skip(test) else {
        return;
    };
    let now = Utc::now();
    let pusher = Pusher::new(registry.base_url());
    // A versioned track with three newer releases, the newest old enough.
    for (tag, days) in [
        ("v0.25.0", 40),
        ("v0.26.0", 9),
        ("v0.27.0", 6),
        ("v0.28.0", 3),
    ] {
        push(
            &pusher,
            None,
            "klaud/semver",
            tag,
            now - Duration::days(days),
        )
        .await;
    }
    // A dated track whose newest build is dated today: too young by its
    // text, passed over without a pull.
    let today = now.format("%Y%m%d").to_string();
    for (tag, days) in [
        ("nightly-20260101".to_owned(), 300),
        ("nightly-20260301".to_owned(), 250),
        (format!("nightly-{today}"), 0),
    ] {
        push(
            &pusher,
            None,
            "klaud/dated",
            &tag,
            now - Duration::days(days),
        )
        .await;
    }
    // Builds named by commit: only push time orders them.
    for (tag, days) in [
        ("dev-1a2b3c4", 30),
        ("dev-5d6e7f8", 20),
        ("dev-9a8b7c6", 10),
    ] {
        push(
            &pusher,
            None,
            "klaud/commits",
            tag,
            now - Duration::days(days),
        )
        .await;
    }
    let images = [
        "klaud/semver:v0.25.0".to_owned(),
        "klaud/dated:nightly-20260101".to_owned(),
        "klaud/commits:dev-1a2b3c4".to_owned(),
    ];
    let dir = checkout(&images);
    let repository = Repository::open(dir.path()).unwrap();
    let content = Arc::new(MemoryContentCache::default());
    let report = plan(
        &repository,
        &client(&registry, None, Some(&content)).session(),
        &PlanOptions::new(now),
    )
    .await;

    // The dated proposal spent the plan's pulls: the release, whose age
    // only its image tells, waits for the next plan.
    let semver = family(&report, "klaud/semver:v0.25.0");
    assert!(semver.candidate.is_none(), "{semver:#?}");
    assert!(
        semver
            .reasons
            .iter()
            .any(|r| r.starts_with("deferred: v0.28.0 and 2 older newer tag(s) not read")),
        "{:?}",
        semver.reasons
    );
    let dated = family(&report, "klaud/dated:nightly-20260101");
    assert_eq!(
        dated.candidate.as_ref().map(|c| c.tag.as_str()),
        Some("nightly-20260301"),
        "{dated:#?}"
    );
    assert!(
        dated
            .reasons
            .iter()
            .any(|r| r.starts_with(&format!("nightly-{today}: dated "))
                && r.contains("without reading it")),
        "{:?}",
        dated.reasons
    );
    let commits = family(&report, "klaud/commits:dev-1a2b3c4");
    assert!(commits.candidate.is_none(), "{commits:#?}");
    assert!(
        commits.reasons.iter().any(|r| r.starts_with(
            "deferred: track dev-<commit> is ordered by push time only, and Docker Hub's tags API is unavailable"
        )),
        "{:?}",
        commits.reasons
    );
    assert_eq!(proposed(&report), 1);
    assert_two_pulls_per_proposal(&report);

    // The next plan finds the dated build in the store, without a pull,
    // and reads the release with the pulls that leaves.
    let next = plan(
        &repository,
        &client(&registry, None, Some(&content)).session(),
        &PlanOptions::new(now),
    )
    .await;
    let semver = family(&next, "klaud/semver:v0.25.0");
    assert_eq!(
        semver.candidate.as_ref().map(|c| c.tag.as_str()),
        Some("v0.28.0"),
        "{semver:#?}"
    );
    assert_eq!(proposed(&next), 2);
    assert_two_pulls_per_proposal(&next);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_tags_api_a_too_young_newest_defers_the_older_ones() {
    let test = "without_the_tags_api_a_too_young_newest_defers_the_older_ones";
    let Some(registry) = LocalRegistry::start_or_skip(test) else {
        return;
    };
    let now = Utc::now();
    let pusher = Pusher::new(registry.base_url());
    for (tag, hours) in [
        ("v0.25.0", 900),
        ("v0.26.0", 200),
        ("v0.27.0", 100),
        ("v0.28.0", 1),
    ] {
        push(
            &pusher,
            None,
            "klaud/semver",
            tag,
            now - Duration::hours(hours),
        )
        .await;
    }
    let images = ["klaud/semver:v0.25.0".to_owned()];
    let dir = checkout(&images);
    let repository = Repository::open(dir.path()).unwrap();
    let report = plan(
        &repository,
        &client(&registry, None, None).session(),
        &PlanOptions::new(now),
    )
    .await;
    let f = family(&report, "klaud/semver:v0.25.0");
    assert!(f.candidate.is_none(), "{f:#?}");
    assert!(
        f.reasons
            .iter()
            .any(|r| r.starts_with("v0.28.0: only 1h old")),
        "{:?}",
        f.reasons
    );
    assert!(
        f.reasons.iter().any(|r| r.starts_with(
            "deferred: 2 older newer tag(s) not read (v0.27.0, v0.26.0): Docker Hub's tags API is unavailable"
        )),
        "{:?}",
        f.reasons
    );
    assert!(pulls(&report) <= 2, "{:?}", report.requests_by_host);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_tags_api_rebuilds_tied_on_their_text_are_deferred_not_passed() {
    let test = "without_the_tags_api_rebuilds_tied_on_their_text_are_deferred_not_passed";
    let Some(registry) = LocalRegistry::start_or_skip(test) else {
        return;
    };
    let now = Utc::now();
    let pusher = Pusher::new(registry.base_url());
    for (tag, days) in [
        ("nightly-dev-20260801-a1b2c3d4", 60),
        ("nightly-dev-20260808-b1b2c3d4", 53),
        ("nightly-dev-20260815-c1b2c3d4", 46),
        ("nightly-dev-20260815-d1b2c3d4", 45),
    ] {
        push(
            &pusher,
            None,
            "klaud/dated",
            tag,
            now - Duration::days(days),
        )
        .await;
    }
    let images = ["klaud/dated:nightly-dev-20260801-a1b2c3d4".to_owned()];
    let dir = checkout(&images);
    let repository = Repository::open(dir.path()).unwrap();
    let report = plan(
        &repository,
        &client(&registry, None, None).session(),
        &PlanOptions::new(now),
    )
    .await;
    let f = family(&report, &images[0]);
    // Which August 15 build is newer only the images can tell: neither is
    // guessed, and the August 8 build is not proposed past them.
    assert!(f.candidate.is_none(), "{f:#?}");
    assert!(
        f.reasons.iter().any(|r| r.starts_with(
            "deferred: nightly-dev-20260815-c1b2c3d4, nightly-dev-20260815-d1b2c3d4 are rebuilds of one version"
        )),
        "{:?}",
        f.reasons
    );
    assert_eq!(pulls(&report), 0, "{:?}", report.requests_by_host);
}

/// The bench's pessimistic case in small: without the tags API, two dated
/// tracks are proposed by their text and three version tracks have a
/// newest release pushed an hour ago, whose age only its image tells. The
/// first plan's pulls go to its proposals and the releases are deferred,
/// naming the tag and why; each later plan, with what the earlier ones
/// kept, pulls nothing it already read and spends what its kept proposals
/// no longer cost on the deferred releases, until every one is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_tags_api_young_releases_are_read_within_the_plans_pull_budget() {
    let test = "without_the_tags_api_young_releases_are_read_within_the_plans_pull_budget";
    let Some(registry) = LocalRegistry::start_or_skip(test) else {
        return;
    };
    let now = Utc::now();
    let pusher = Pusher::new(registry.base_url());
    // Each repository's builds a minute apart from the others': distinct
    // images (one build under two names would be read once, by digest).
    let dated = ["klaud/dated-a", "klaud/dated-b"];
    for (i, repository) in dated.into_iter().enumerate() {
        for (tag, days) in [("nightly-20260101", 300), ("nightly-20260301", 250)] {
            let made = now - Duration::days(days) - Duration::minutes(i as i64);
            push(&pusher, None, repository, tag, made).await;
        }
    }
    let semver = ["klaud/semver-a", "klaud/semver-b", "klaud/semver-c"];
    for (i, repository) in semver.into_iter().enumerate() {
        for (tag, hours) in [
            ("v0.25.0", 900),
            ("v0.26.0", 200),
            ("v0.27.0", 100),
            ("v0.28.0", 1),
        ] {
            let made = now - Duration::hours(hours) - Duration::minutes(i as i64);
            push(&pusher, None, repository, tag, made).await;
        }
    }
    let mut images: Vec<String> = dated
        .iter()
        .map(|r| format!("{r}:nightly-20260101"))
        .collect();
    images.extend(semver.iter().map(|r| format!("{r}:v0.25.0")));
    let dir = checkout(&images);
    let repository = Repository::open(dir.path()).unwrap();
    let content = Arc::new(MemoryContentCache::default());
    let options = PlanOptions::new(now);
    let deferred_unread = |f: &FamilyPlan| {
        f.reasons.iter().any(|r| {
            r.starts_with(
                "deferred: v0.28.0 and 2 older newer tag(s) not read: its tag names no date",
            )
        })
    };

    let cold = plan(
        &repository,
        &client(&registry, None, Some(&content)).session(),
        &options,
    )
    .await;
    for image in &images[..2] {
        let f = family(&cold, image);
        assert_eq!(
            f.candidate.as_ref().map(|c| c.tag.as_str()),
            Some("nightly-20260301"),
            "{f:#?}"
        );
    }
    for image in &images[2..] {
        let f = family(&cold, image);
        assert!(f.candidate.is_none(), "{f:#?}");
        assert!(deferred_unread(f), "{:?}", f.reasons);
        assert!(
            !f.reasons.iter().any(|r| r.starts_with("up to date")),
            "{:?}",
            f.reasons
        );
    }
    assert_eq!(proposed(&cold), 2);
    assert_eq!(
        pulls(&cold),
        2 * proposed(&cold),
        "{:?}",
        cold.requests_by_host
    );
    // The floor is the proposals' reads alone: the young releases are
    // deferred at no cost by the cheapest plan.
    let hub_floor = cold.floor_by_host["docker.io"].manifest_get;
    assert_eq!(hub_floor, 2 * proposed(&cold));

    // The next plan finds its proposals in the store, and what they no
    // longer cost reads two of the deferred releases, each refused with
    // its reason; the third still waits.
    let warm = plan(
        &repository,
        &client(&registry, None, Some(&content)).session(),
        &options,
    )
    .await;
    assert_eq!(proposed(&warm), 2);
    for image in &images[2..4] {
        let f = family(&warm, image);
        assert!(!deferred_unread(f), "{:?}", f.reasons);
        assert!(
            f.reasons
                .iter()
                .any(|r| r.starts_with("v0.28.0: only 1h old")),
            "{:?}",
            f.reasons
        );
    }
    assert!(deferred_unread(family(&warm, &images[4])));
    assert_eq!(pulls(&warm), 2 * 2, "{:?}", warm.requests_by_host);
    assert!(pulls(&warm) <= 2 * proposed(&warm));

    // The third reads the last release; the fourth has read everything.
    let third = plan(
        &repository,
        &client(&registry, None, Some(&content)).session(),
        &options,
    )
    .await;
    assert!(!deferred_unread(family(&third, &images[4])));
    assert_eq!(pulls(&third), 2, "{:?}", third.requests_by_host);
    let fourth = plan(
        &repository,
        &client(&registry, None, Some(&content)).session(),
        &options,
    )
    .await;
    assert_eq!(pulls(&fourth), 0, "{:?}", fourth.requests_by_host);
}
