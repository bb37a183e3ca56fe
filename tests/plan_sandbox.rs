//! `plan` against the sandbox registry simulator: statuses, tracks, pinned
//! candidates, skipped tags with reasons, selection order, request economy
//! and error isolation.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use klaud_planner::plan::{Clock, PlanOptions, PlanReport, Status, plan};
use klaud_planner::registry::{RegistryClient, RegistryConfig};
use klaud_planner::repo::Repository;
use klaud_sandbox::registry::{Fault, RegistrySim, SimRoute, router};
use serde_json::json;

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap()
}

fn ago(hours: i64) -> String {
    (now() - chrono::Duration::hours(hours)).to_rfc3339()
}

const NIGHTLY_CURRENT: &str = "3ee2df30337a301164c46ae444b76ee67e71c106";
const NIGHTLY_GOOD: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const NIGHTLY_BAD: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

fn seed() -> serde_json::Value {
    let amd64_only = json!([{"architecture": "amd64"}]);
    json!({"repositories": {
        "lmsysorg/sglang": {"tags": {
            "v0.5.16-cu130": {"created": ago(900)},
            "v0.5.17-cu130": {"created": ago(240)},
            "v0.5.18-cu130": {"created": ago(2)},
            "v0.5.19-cu130-runtime": {"created": ago(300)},
            "v0.5.18-rocm720-mi30x": {"created": ago(300)},
        }},
        "vllm/vllm-openai": {"tags": {
            "v0.25.0": {"created": ago(900), "pushed": ago(900)},
            "v0.26.0": {"created": ago(100), "pushed": ago(100), "platforms": amd64_only},
            "demo-special": {"pushed": ago(50)},
            format!("nightly-{NIGHTLY_CURRENT}"): {"pushed": ago(120), "labels": {"org.opencontainers.image.revision": NIGHTLY_CURRENT}},
            format!("nightly-{NIGHTLY_GOOD}"): {"pushed": ago(72), "labels": {"org.opencontainers.image.revision": NIGHTLY_GOOD}},
            format!("nightly-{NIGHTLY_BAD}"): {"pushed": ago(48), "labels": {"org.opencontainers.image.revision": "c".repeat(40)}},
        }},
        "nvidia/tensorrt-llm/release": {"tags": {
            "1.3.0rc14": {"created": ago(2000)},
            "1.3.0rc18": {"created": ago(1000)},
            "1.3.0": {"created": ago(500)},
            "1.4.0rc1": {"created": ago(400)},
        }},
        "lmsysorg/sglang-rocm": {"tags": {
            "v0.5.17-rocm720-mi35x-20260817": {"created": ago(800)},
            "v0.5.17-rocm720-mi30x-20260817": {"created": ago(800)},
        }},
    }})
}

struct Served {
    sim: Arc<RegistrySim>,
    url: url::Url,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve() -> Served {
    // Request counts are the point here, without the token round trips
    // (`sandbox_registry` covers the token flow).
    let sim = Arc::new(
        RegistrySim::from_seed_json(&seed().to_string())
            .unwrap()
            .open(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = router(Arc::clone(&sim));
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    Served {
        sim,
        url: url::Url::parse(&format!("http://{addr}")).unwrap(),
        task,
    }
}

fn client(served: &Served) -> RegistryClient {
    let mut config = RegistryConfig::default();
    for host in ["docker.io", "nvcr.io", "hub.docker.com"] {
        config.mirrors.insert(host.into(), served.url.clone());
    }
    config.retry_base_delay = Duration::from_millis(1);
    config.max_retries = 1;
    RegistryClient::new(config).unwrap()
}

fn demo() -> Repository {
    Repository::open(Path::new(crate::support::REPO_ROOT).join("configs/demo")).unwrap()
}

fn family<'a>(report: &'a PlanReport, key: &str) -> &'a klaud_planner::plan::FamilyPlan {
    report
        .families
        .iter()
        .find(|f| f.family.ends_with(&format!(":{key}")))
        .unwrap()
}

#[tokio::test]
async fn plan_finds_each_familys_next_image_on_its_track() {
    let served = serve().await;
    let client = client(&served);
    let repository = demo();
    let mut options = PlanOptions::new(now());
    options.max_candidates = 10;
    let report = plan(&repository, &client.session(), &options).await;

    let sglang = family(&report, "demo-fp4-b200-sglang");
    assert_eq!(sglang.status, Status::StaleNewer, "{:?}", sglang.reasons);
    let candidate = sglang.candidate.as_ref().unwrap();
    let digest = served
        .sim
        .digest_of("lmsysorg/sglang", "v0.5.17-cu130")
        .unwrap();
    assert_eq!(
        candidate.image.to_string(),
        format!("lmsysorg/sglang:v0.5.17-cu130@{digest}")
    );
    assert_eq!(candidate.clock, Clock::TagText);
    assert!(
        sglang
            .reasons
            .iter()
            .any(|r| r.contains("v0.5.18-cu130: only 2h old")),
        "{:?}",
        sglang.reasons
    );

    let vllm = family(&report, "demo-fp4-b200-vllm");
    assert_eq!(vllm.candidate.as_ref().unwrap().tag, "v0.26.0");
    let grace = family(&report, "demo-fp4-gb200-dynamo-vllm-disagg");
    assert_eq!(grace.status, Status::UpToDate);
    assert!(
        grace
            .reasons
            .iter()
            .any(|r| r.contains("v0.26.0: no linux/arm64 image")),
        "{:?}",
        grace.reasons
    );

    let nightly = family(&report, "demo-fp4-b300-vllm-agentic");
    let candidate = nightly.candidate.as_ref().unwrap();
    assert_eq!(candidate.tag, format!("nightly-{NIGHTLY_GOOD}"));
    assert_eq!(candidate.clock, Clock::RegistryPushTime);
    assert_eq!(candidate.revision.as_deref(), Some(NIGHTLY_GOOD));
    assert!(
        nightly
            .reasons
            .iter()
            .any(|r| r.contains("does not match the tag's commit")),
        "{:?}",
        nightly.reasons
    );

    let trt = family(&report, "demo-fp8-h200-trt");
    let candidate = trt.candidate.as_ref().unwrap();
    assert!(
        candidate
            .image
            .to_string()
            .starts_with("nvcr.io#nvidia/tensorrt-llm/release:1.4.0rc1@sha256:")
    );

    let rocm = family(&report, "demo-fp8-mi355x-sglang");
    assert_eq!(rocm.status, Status::StalePruned);
    assert_eq!(
        rocm.candidate.as_ref().unwrap().tag,
        "v0.5.17-rocm720-mi35x-20260817"
    );

    let special = family(&report, "demo-fp4-b200-vllm-special");
    assert_eq!(special.status, Status::UnknownTrack);
    assert!(special.candidate.is_none());

    // Pruned first; every candidate id is the family id plus the image identity.
    assert_eq!(report.candidates[0].family, rocm.family);
    for selected in &report.candidates {
        let plan = report
            .families
            .iter()
            .find(|f| f.family == selected.family)
            .unwrap();
        assert!(selected.id.starts_with(&format!("{}-", plan.id)));
    }
}

#[tokio::test]
async fn a_plan_makes_few_requests_and_a_second_plan_no_gets() {
    let served = serve().await;
    let client = client(&served);
    let repository = demo();
    let options = PlanOptions::new(now());
    let first = plan(&repository, &client.session(), &options).await;
    // Four repositories are listed once each, whatever the number of families.
    assert_eq!(first.requests.tags_list, 4);
    assert_eq!(first.floor.tags_list, 4);
    assert!(first.requests.manifest_head >= first.floor.manifest_head);
    let second = plan(&repository, &client.session(), &options).await;
    assert_eq!(second.requests.manifest_get, 0, "{:?}", second.requests);
    assert_eq!(second.requests.blob_get, 0, "{:?}", second.requests);
    assert_eq!(
        serde_json::to_value(&first.candidates).unwrap(),
        serde_json::to_value(&second.candidates).unwrap()
    );
}

#[tokio::test]
async fn a_broken_repository_only_fails_its_own_families() {
    let served = serve().await;
    served.sim.inject_fault(Fault {
        route: SimRoute::TagsList,
        repository: Some("vllm/vllm-openai".into()),
        count: 100,
        status: 500,
        retry_after: None,
    });
    let client = client(&served);
    let report = plan(&demo(), &client.session(), &PlanOptions::new(now())).await;
    let vllm = family(&report, "demo-fp4-b200-vllm");
    assert_eq!(vllm.status, Status::Error);
    assert!(vllm.reasons[0].contains("500"), "{:?}", vllm.reasons);
    assert_eq!(
        family(&report, "demo-fp4-b200-sglang").status,
        Status::StaleNewer
    );
}

#[tokio::test]
async fn occupied_and_cooling_families_are_not_selected_and_the_cap_holds() {
    let served = serve().await;
    let client = client(&served);
    let repository = demo();
    let mut options = PlanOptions::new(now());
    let sglang_id = repository
        .family("demo-fp4-b200-sglang")
        .unwrap()
        .id
        .clone();
    let trt_id = repository.family("demo-fp8-h200-trt").unwrap().id.clone();
    options.occupied.insert(sglang_id.clone());
    options.cooling_down.insert(trt_id.clone());
    options.max_candidates = 2;
    let report = plan(&repository, &client.session(), &options).await;
    assert_eq!(report.candidates.len(), 2);
    assert!(
        report
            .candidates
            .iter()
            .all(|c| !c.id.starts_with(&sglang_id) && !c.id.starts_with(&trt_id))
    );
}
