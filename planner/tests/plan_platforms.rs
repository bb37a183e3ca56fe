//! A family reads only the platform it runs on: planned against a real
//! `docker-registry` on loopback, counting what the planner sends for
//! families on one multi-arch image.

use chrono::{DateTime, Duration, Utc};
use klaud_planner::plan::{PlanOptions, PlanReport, Status, plan};
use klaud_planner::registry::testkit::{LocalRegistry, PlatformSpec, Pusher};
use klaud_planner::registry::{RegistryClient, RegistryConfig};
use klaud_planner::repo::{Platform, Repository};

const REVISION: &str = "org.opencontainers.image.revision";

/// A checkout whose families (key, runner) all run `image`; `gb200` runners
/// are arm64, the others amd64.
fn checkout(image: &str, families: &[(&str, &str)]) -> tempfile::TempDir {
    let entries: Vec<(&str, &str, &str)> = families
        .iter()
        .map(|(key, runner)| (image, *key, *runner))
        .collect();
    checkout_of(&entries)
}

/// A checkout with one family per (image, key, runner).
fn checkout_of(families: &[(&str, &str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut master = String::new();
    for (image, key, runner) in families {
        master.push_str(&format!(
            "{key}:\n  image: {image}\n  model: demo/Demo\n  model-prefix: demo\n  runner: {runner}\n  precision: fp4\n  framework: vllm\n  multinode: false\n  scenarios:\n    fixed-seq-len:\n    - isl: 1024\n      osl: 1024\n      search-space:\n      - {{ tp: 8, conc-start: 4, conc-end: 64 }}\n\n"
        ));
    }
    std::fs::create_dir_all(dir.path().join("configs")).unwrap();
    std::fs::write(dir.path().join("configs/nvidia-master.yaml"), master).unwrap();
    dir
}

/// Each architecture's image carries its own revision label, so a family
/// that read the wrong platform shows it.
fn platforms(architectures: &[&str], created: DateTime<Utc>) -> Vec<PlatformSpec> {
    architectures
        .iter()
        .map(|arch| PlatformSpec::linux(arch, &[(REVISION, &format!("rev-{arch}"))], Some(created)))
        .collect()
}

struct Setup {
    _registry: LocalRegistry,
    client: RegistryClient,
    now: DateTime<Utc>,
}

/// A registry holding `repository:v0.25.0` (both platforms) and
/// `repository:v0.26.0` built for `newer`, and a client that reads it as
/// Docker Hub.
async fn setup(test: &str, repository: &str, newer: &[&str]) -> Option<Setup> {
    let registry = LocalRegistry::start_or_skip(test)?;
    let now = Utc::now();
    let pusher = Pusher::new(registry.base_url());
    pusher
        .push_image(
            repository,
            "v0.25.0",
            &platforms(&["amd64", "arm64"], now - Duration::days(30)),
        )
        .await
        .unwrap();
    pusher
        .push_image(
            repository,
            "v0.26.0",
            &platforms(newer, now - Duration::days(3)),
        )
        .await
        .unwrap();
    let mut config = RegistryConfig::default();
    config
        .mirrors
        .insert("docker.io".to_owned(), registry.base_url());
    let client = RegistryClient::new(config).unwrap();
    Some(Setup {
        _registry: registry,
        client,
        now,
    })
}

async fn plan_checkout(setup: &Setup, dir: &tempfile::TempDir) -> (Repository, PlanReport) {
    let repository = Repository::open(dir.path()).unwrap();
    let report = plan(
        &repository,
        &setup.client.session(),
        &PlanOptions::new(setup.now),
    )
    .await;
    (repository, report)
}

fn gets(report: &PlanReport) -> (u64, u64) {
    (report.requests.manifest_get, report.requests.blob_get)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amd64_and_arm64_families_each_read_their_own_platform_once() {
    let test = "amd64_and_arm64_families_each_read_their_own_platform_once";
    let Some(setup) = setup(test, "klaud/mixed", &["amd64", "arm64"]).await else {
        return;
    };
    let dir = checkout(
        "klaud/mixed:v0.25.0",
        &[
            ("a-fp4-b200-vllm", "b200"),
            ("a-fp4-gb200-vllm", "gb200"),
            ("a-fp8-b200-vllm", "b200"),
            ("a-fp8-gb200-vllm", "gb200"),
        ],
    );
    let (repository, report) = plan_checkout(&setup, &dir).await;
    let platforms: Vec<Platform> = repository.families().iter().map(|f| f.platform).collect();
    assert_eq!(
        platforms,
        [
            Platform::LinuxAmd64,
            Platform::LinuxArm64,
            Platform::LinuxAmd64,
            Platform::LinuxArm64
        ]
    );
    for (family, plan) in repository.families().iter().zip(&report.families) {
        assert_eq!(plan.status, Status::StaleNewer, "{plan:?}");
        let candidate = plan.candidate.as_ref().unwrap();
        assert_eq!(candidate.tag, "v0.26.0");
        let expected = format!("rev-{}", family.platform.architecture());
        assert_eq!(
            candidate.revision.as_deref(),
            Some(expected.as_str()),
            "{}",
            plan.family
        );
    }
    // One index, then one manifest and one config per platform, however
    // many families share it.
    assert_eq!(gets(&report), (3, 2), "{:?}", report.requests);
    // Docker Hub without its tags API: a release whose tag names no date
    // may be deferred (only a pull of its image tells its age), so the
    // floor counts no read of it and this plan's read is above it.
    assert_eq!(
        (report.floor.manifest_get, report.floor.blob_get),
        (0, 0),
        "{:?}",
        report.floor
    );

    let warm = plan_checkout(&setup, &dir).await.1;
    assert_eq!(gets(&warm), (0, 0), "{:?}", warm.requests);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn families_on_one_platform_read_one_platform() {
    let test = "families_on_one_platform_read_one_platform";
    let Some(setup) = setup(test, "klaud/twins", &["amd64", "arm64"]).await else {
        return;
    };
    let dir = checkout(
        "klaud/twins:v0.25.0",
        &[("a-fp4-b200-vllm", "b200"), ("a-fp4-h200-vllm", "h200")],
    );
    let (_, report) = plan_checkout(&setup, &dir).await;
    for plan in &report.families {
        let candidate = plan.candidate.as_ref().unwrap();
        assert_eq!(candidate.revision.as_deref(), Some("rev-amd64"));
    }
    assert_eq!(gets(&report), (2, 1), "{:?}", report.requests);
    // An undated release on Docker Hub without its tags API may be
    // deferred: the floor counts no read of it.
    assert_eq!((report.floor.manifest_get, report.floor.blob_get), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_without_the_family_platform_is_rejected_from_the_index_alone() {
    let test = "a_tag_without_the_family_platform_is_rejected_from_the_index_alone";
    let Some(setup) = setup(test, "klaud/amd-only", &["amd64"]).await else {
        return;
    };
    let dir = checkout("klaud/amd-only:v0.25.0", &[("a-fp4-gb200-vllm", "gb200")]);
    let (_, report) = plan_checkout(&setup, &dir).await;
    let family = &report.families[0];
    assert_eq!(family.status, Status::UpToDate, "{family:?}");
    assert!(family.candidate.is_none());
    assert!(
        family
            .reasons
            .iter()
            .any(|r| r == "v0.26.0: no linux/arm64 image (has linux/amd64); skipped"),
        "{:?}",
        family.reasons
    );
    assert_eq!(gets(&report), (1, 0), "{:?}", report.requests);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordering_a_nightly_track_by_creation_time_reads_only_the_family_platform() {
    let test = "ordering_a_nightly_track_by_creation_time_reads_only_the_family_platform";
    let Some(registry) = LocalRegistry::start_or_skip(test) else {
        return;
    };
    let now = Utc::now();
    let pusher = Pusher::new(registry.base_url());
    let (old, new) = ("a".repeat(40), "b".repeat(40));
    for (commit, age) in [(&old, 30), (&new, 3)] {
        let created = now - Duration::days(age);
        let stamp = created.to_rfc3339();
        let specs: Vec<PlatformSpec> = ["amd64", "arm64"]
            .iter()
            .map(|arch| {
                PlatformSpec::linux(
                    arch,
                    &[
                        (REVISION, commit.as_str()),
                        ("org.opencontainers.image.created", stamp.as_str()),
                    ],
                    Some(created),
                )
            })
            .collect();
        pusher
            .push_image("klaud/nightly", &format!("nightly-{commit}"), &specs)
            .await
            .unwrap();
    }
    // No push times on ghcr.io: the track is ordered by the images'
    // creation times, which costs a config read per tag (a registry that
    // counts no pulls; Docker Hub without its tags API defers it instead).
    let mut config = RegistryConfig::default();
    config
        .mirrors
        .insert("ghcr.io".to_owned(), registry.base_url());
    let setup = Setup {
        _registry: registry,
        client: RegistryClient::new(config).unwrap(),
        now,
    };
    let dir = checkout(
        &format!("ghcr.io/klaud/nightly:nightly-{old}"),
        &[("a-fp4-gb200-vllm", "gb200")],
    );
    let (_, report) = plan_checkout(&setup, &dir).await;
    let family = &report.families[0];
    assert_eq!(family.status, Status::StaleNewer, "{family:?}");
    let candidate = family.candidate.as_ref().unwrap();
    assert_eq!(candidate.tag, format!("nightly-{new}"));
    assert_eq!(candidate.revision.as_deref(), Some(new.as_str()));
    // Two indexes, and the arm64 manifest and config of each; amd64 is
    // never read.
    assert_eq!(gets(&report), (4, 2), "{:?}", report.requests);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dated_nightly_track_reads_no_current_image_its_date_already_places() {
    let test = "a_dated_nightly_track_reads_no_current_image_its_date_already_places";
    let Some(registry) = LocalRegistry::start_or_skip(test) else {
        return;
    };
    let now = Utc::now();
    let pusher = Pusher::new(registry.base_url());
    // A family per night, as InferenceX pins SGLang's dated nightlies; the
    // commit after the date makes rebuilds of one night tie on the text.
    let nights = [
        ("20260801", "a1b2c3d4", 60),
        ("20260808", "b1b2c3d4", 53),
        ("20260815", "c1b2c3d4", 46),
    ];
    for (night, commit, age) in nights {
        pusher
            .push_image(
                "klaud/dated",
                &format!("nightly-dev-{night}-{commit}"),
                &[PlatformSpec::linux(
                    "amd64",
                    &[(REVISION, &format!("{commit:0<40}"))],
                    Some(now - Duration::days(age)),
                )],
            )
            .await
            .unwrap();
    }
    let mut config = RegistryConfig::default();
    config
        .mirrors
        .insert("docker.io".to_owned(), registry.base_url());
    let setup = Setup {
        _registry: registry,
        client: RegistryClient::new(config).unwrap(),
        now,
    };
    let master = checkout_of(&[
        (
            "klaud/dated:nightly-dev-20260801-a1b2c3d4",
            "a-fp4-b200-vllm",
            "b200",
        ),
        (
            "klaud/dated:nightly-dev-20260808-b1b2c3d4",
            "a-fp8-b200-vllm",
            "b200",
        ),
    ]);
    let (_, report) = plan_checkout(&setup, &master).await;
    for plan in &report.families {
        assert_eq!(plan.status, Status::StaleNewer, "{plan:?}");
        let candidate = plan.candidate.as_ref().unwrap();
        assert_eq!(candidate.tag, "nightly-dev-20260815-c1b2c3d4");
    }
    // Only the candidate is read (index, manifest, config): each current
    // tag's date places it, and no other tag shares a night with it.
    assert_eq!(gets(&report), (2, 1), "{:?}", report.requests);
}

/// Without push times (on ghcr.io or nvcr.io, which count no pulls) only
/// the images say when each tag was
/// made: ordering a push-ordered track reads every tag's index, manifest
/// and config, and a newer tag too young to propose is read before it is
/// passed over. No correct plan can skip these reads, so the floor
/// counts them, and the plan makes no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_floor_counts_the_reads_ordering_and_ages_need_without_push_times() {
    let test = "the_floor_counts_the_reads_ordering_and_ages_need_without_push_times";
    let Some(registry) = LocalRegistry::start_or_skip(test) else {
        return;
    };
    let now = Utc::now();
    let pusher = Pusher::new(registry.base_url());
    let commit = |c: char| c.to_string().repeat(40);
    let nightly = |c: char, age: Duration| {
        let revision = commit(c);
        (
            format!("nightly-{revision}"),
            vec![PlatformSpec::linux(
                "amd64",
                &[(REVISION, revision.as_str())],
                Some(now - age),
            )],
        )
    };
    // Pushed oldest first; the newest is an hour old, too young (24 h).
    for (tag, platforms) in [
        nightly('a', Duration::days(30)),
        nightly('b', Duration::days(10)),
        nightly('c', Duration::hours(1)),
    ] {
        pusher
            .push_image("klaud/nightly", &tag, &platforms)
            .await
            .unwrap();
    }
    for (tag, age) in [
        ("v0.25.0", Duration::days(30)),
        ("v0.26.0", Duration::days(3)),
        ("v0.27.0", Duration::hours(1)),
    ] {
        pusher
            .push_image("klaud/release", tag, &platforms(&["amd64"], now - age))
            .await
            .unwrap();
    }
    let mut config = RegistryConfig::default();
    config
        .mirrors
        .insert("ghcr.io".to_owned(), registry.base_url());
    let setup = Setup {
        _registry: registry,
        client: RegistryClient::new(config).unwrap(),
        now,
    };
    let current = format!("ghcr.io/klaud/nightly:nightly-{}", commit('a'));
    let dir = checkout_of(&[
        (current.as_str(), "a-fp4-b200-vllm", "b200"),
        ("ghcr.io/klaud/release:v0.25.0", "b-fp4-b200-vllm", "b200"),
    ]);
    let (_, report) = plan_checkout(&setup, &dir).await;
    let proposed: Vec<Option<&str>> = report
        .families
        .iter()
        .map(|f| f.candidate.as_ref().map(|c| c.tag.as_str()))
        .collect();
    let expected_nightly = format!("nightly-{}", commit('b'));
    assert_eq!(
        proposed,
        [Some(expected_nightly.as_str()), Some("v0.26.0")],
        "{:#?}",
        report.families
    );
    // The nightly track: 3 tags, each an index, a manifest and a config.
    // The release track: the too-young v0.27.0 and the candidate v0.26.0,
    // each likewise (the text orders it, so the current tag is not read).
    assert_eq!(
        gets(&report),
        (3 * 2 + 2 * 2, 3 + 2),
        "{:?}",
        report.requests
    );
    assert_eq!(
        (report.floor.manifest_get, report.floor.blob_get),
        gets(&report),
        "{:?}",
        report.floor
    );
    assert_eq!(report.requests.total(), report.floor.total());
}
