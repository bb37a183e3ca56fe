//! Ignore rules in a plan, against a real `docker-registry` on loopback:
//! an ignored family costs no request and is never selected; an ignored
//! image is not proposed, and the next newer one is.

use chrono::{DateTime, Duration, Utc};
use klaud_planner::ignore::{IgnoreRule, IgnoreRules, IgnoreSource, IgnoreTarget};
use klaud_planner::plan::{BlockKind, PlanOptions, PlanReport, plan};
use klaud_planner::registry::RegistryClient;
use klaud_planner::registry::testkit::{
    HubApi, LocalRegistry, PlatformSpec, Pusher, docker_hub_mirrors,
};
use klaud_planner::repo::Repository;

fn checkout() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let master = "a-fp8-b200-vllm:\n  image: klaud/ignore:v0.25.0\n  model: demo/Demo\n  model-prefix: demo\n  runner: b200\n  precision: fp8\n  framework: vllm\n  multinode: false\n  scenarios:\n    fixed-seq-len:\n    - isl: 1024\n      osl: 1024\n      search-space:\n      - { tp: 8, conc-start: 4, conc-end: 64 }\n";
    std::fs::create_dir_all(dir.path().join("configs")).unwrap();
    std::fs::write(dir.path().join("configs/nvidia-master.yaml"), master).unwrap();
    dir
}

async fn push(pusher: &Pusher, hub: &HubApi, tag: &str, pushed: DateTime<Utc>) {
    let platforms = [PlatformSpec::linux("amd64", &[], Some(pushed))];
    let image = pusher
        .push_image("klaud/ignore", tag, &platforms)
        .await
        .unwrap();
    hub.record("klaud/ignore", tag, pushed, &image);
}

/// A registry with the current tag and one newer, qualifying tag, and a
/// checkout whose one family runs the current tag.
struct Staged {
    registry: LocalRegistry,
    hub: HubApi,
    pusher: Pusher,
    now: DateTime<Utc>,
    _dir: tempfile::TempDir,
    repository: Repository,
}

async fn stage(test: &str) -> Option<Staged> {
    let registry = LocalRegistry::start_or_skip(test)?;
    let hub = HubApi::start().unwrap();
    let now = Utc::now();
    let pusher = Pusher::new(registry.base_url());
    push(&pusher, &hub, "v0.25.0", now - Duration::days(30)).await;
    push(&pusher, &hub, "v0.26.0", now - Duration::days(5)).await;
    let dir = checkout();
    let repository = Repository::open(dir.path()).unwrap();
    Some(Staged {
        registry,
        hub,
        pusher,
        now,
        _dir: dir,
        repository,
    })
}

async fn plan_with(
    registry: &LocalRegistry,
    hub: &HubApi,
    repository: &Repository,
    now: DateTime<Utc>,
    rules: Vec<IgnoreRule>,
) -> PlanReport {
    let client = RegistryClient::new(docker_hub_mirrors(registry, Some(hub))).unwrap();
    let mut options = PlanOptions::new(now);
    options.ignore = IgnoreRules::new(rules);
    plan(repository, &client.session(), &options).await
}

fn closed_pull(family: &str, image: &str) -> IgnoreRule {
    IgnoreRule {
        target: IgnoreTarget::FamilyImage {
            family: family.to_owned(),
            image: image.to_owned(),
        },
        reason: String::new(),
        source: IgnoreSource::ClosedPull {
            number: 7,
            by: "maintainer".to_owned(),
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ignored_image_is_not_proposed_and_a_newer_one_is() {
    let Some(Staged {
        registry,
        hub,
        pusher,
        now,
        _dir,
        repository,
    }) = stage("an_ignored_image_is_not_proposed_and_a_newer_one_is").await
    else {
        return;
    };
    let id = repository.families()[0].id.clone();
    let rules = || vec![closed_pull(&id, "klaud/ignore:v0.26.0")];

    let report = plan_with(&registry, &hub, &repository, now, rules()).await;
    let family = &report.families[0];
    let blocked = family.blocked.as_ref().expect("the closed image is held");
    assert_eq!(blocked.kind, BlockKind::Ignored);
    assert!(
        blocked
            .reason
            .contains("image `klaud/ignore:v0.26.0` for this family (by @maintainer closing #7)"),
        "{}",
        blocked.reason
    );
    assert!(report.candidates.is_empty(), "{:?}", report.candidates);

    // Another family's rule for the same image does not hold this one.
    let other = plan_with(
        &registry,
        &hub,
        &repository,
        now,
        vec![closed_pull("someone-else", "klaud/ignore:v0.26.0")],
    )
    .await;
    assert_eq!(other.candidates.len(), 1, "{:?}", other.families[0].reasons);

    push(&pusher, &hub, "v0.27.0", now - Duration::days(2)).await;
    let newer = plan_with(&registry, &hub, &repository, now, rules()).await;
    assert_eq!(
        newer.families[0].candidate.as_ref().unwrap().tag,
        "v0.27.0",
        "{:?}",
        newer.families[0].reasons
    );
    assert!(newer.families[0].blocked.is_none());
    assert_eq!(newer.candidates.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ignored_family_costs_no_request_and_is_never_selected() {
    let Some(Staged {
        registry,
        hub,
        now,
        _dir,
        repository,
        ..
    }) = stage("an_ignored_family_costs_no_request_and_is_never_selected").await
    else {
        return;
    };
    for target in [
        IgnoreTarget::Family("*-b200-vllm".to_owned()),
        IgnoreTarget::Repository("klaud/ignore".to_owned()),
    ] {
        let rule = IgnoreRule {
            target,
            reason: "vendor asked to hold".to_owned(),
            source: IgnoreSource::Config,
        };
        let report = plan_with(&registry, &hub, &repository, now, vec![rule]).await;
        let family = &report.families[0];
        assert_eq!(family.blocked.as_ref().unwrap().kind, BlockKind::Ignored);
        assert!(
            family.reasons[0].ends_with("(by the configuration): vendor asked to hold"),
            "{:?}",
            family.reasons
        );
        assert!(report.candidates.is_empty());
        assert_eq!(report.requests.total(), 0, "{:?}", report.requests);
        assert_eq!(report.floor.total(), 0, "{:?}", report.floor);
    }
}
