//! Retired families in a plan, against a real `docker-registry` on
//! loopback: the archive under `configs/deprecated/` is parsed while the
//! plan's first requests are in flight, and what it and MODELS.md retire
//! is still held and never read, whichever runtime polls the plan.

use chrono::{Duration, Utc};
use klaud_planner::plan::{BlockKind, PlanOptions, PlanReport, plan};
use klaud_planner::registry::testkit::{LocalRegistry, PlatformSpec, Pusher};
use klaud_planner::registry::{RegistryClient, RegistryConfig};
use klaud_planner::repo::Repository;

/// One master entry running `image` on the 1k1k scenario.
fn entry(key: &str, image: &str, prefix: &str) -> String {
    format!(
        "{key}:\n  image: {image}\n  model: demo/Demo\n  model-prefix: {prefix}\n  runner: b200\n  precision: fp8\n  framework: vllm\n  multinode: false\n  scenarios:\n    fixed-seq-len:\n    - isl: 1024\n      osl: 1024\n      search-space:\n      - {{ tp: 8, conc-start: 4, conc-end: 64 }}\n"
    )
}

/// Three families on three registry hosts (one registry behind them all):
/// a live one, one whose key the archive holds with every scenario it runs,
/// and one whose model MODELS.md retires.
fn checkout() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let archived = entry("old-fp8-b200-vllm", "ghcr.io/klaud/archived:v0.25.0", "old");
    let master = [
        entry("live-fp8-b200-vllm", "klaud/live:v0.25.0", "live"),
        archived.clone(),
        entry("gone-fp8-b200-vllm", "quay.io/klaud/gone:v0.25.0", "gone"),
    ]
    .join("\n");
    std::fs::create_dir_all(dir.path().join("configs/deprecated")).unwrap();
    std::fs::write(dir.path().join("configs/nvidia-master.yaml"), master).unwrap();
    std::fs::write(
        dir.path().join("configs/deprecated/nvidia-old-master.yaml"),
        format!("# Archived.\n\n{archived}"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("MODELS.md"),
        "| Model | Deprecated | Remains |\n|---|---|---|\n\
         | Gone (`gone`) | Deprecated since 2026-01-02 ([#7](https://example.invalid/7)) | Nothing |\n",
    )
    .unwrap();
    dir
}

async fn plan_staged(test: &str) -> Option<PlanReport> {
    let registry = LocalRegistry::start_or_skip(test)?;
    let now = Utc::now();
    let pusher = Pusher::new(registry.base_url());
    for repository in ["klaud/live", "klaud/archived", "klaud/gone"] {
        for (tag, age) in [("v0.25.0", 30), ("v0.26.0", 5)] {
            let platforms = [PlatformSpec::linux(
                "amd64",
                &[],
                Some(now - Duration::days(age)),
            )];
            pusher
                .push_image(repository, tag, &platforms)
                .await
                .unwrap();
        }
    }
    let dir = checkout();
    let repository = Repository::open(dir.path()).unwrap();
    let mut config = RegistryConfig::default();
    for host in ["docker.io", "ghcr.io", "quay.io"] {
        config.mirrors.insert(host.to_owned(), registry.base_url());
    }
    let client = RegistryClient::new(config).unwrap();
    let report = plan(&repository, &client.session(), &PlanOptions::new(now)).await;
    let by_host = client.counts_by_host();
    // MODELS.md is read before any request, and an archived key's own
    // entries are judged before the whole archive is parsed: neither
    // family costs a request.
    assert!(!by_host.contains_key("quay.io"), "{by_host:?}");
    assert!(!by_host.contains_key("ghcr.io"), "{by_host:?}");
    assert!(by_host.contains_key("docker.io"), "{by_host:?}");
    Some(report)
}

fn assert_held(report: &PlanReport) {
    let family = |key: &str| {
        report
            .families
            .iter()
            .find(|f| f.family.contains(key))
            .unwrap_or_else(|| panic!("{key} in {:?}", report.families))
    };
    let live = family("live-fp8-b200-vllm");
    assert_eq!(
        live.candidate.as_ref().map(|c| c.tag.as_str()),
        Some("v0.26.0"),
        "{live:?}"
    );
    let archived = family("old-fp8-b200-vllm").blocked.as_ref().expect("held");
    assert_eq!(archived.kind, BlockKind::Retired);
    assert!(
        archived
            .reason
            .contains("archived in configs/deprecated/nvidia-old-master.yaml"),
        "{archived:?}"
    );
    let gone = family("gone-fp8-b200-vllm").blocked.as_ref().expect("held");
    assert_eq!(gone.kind, BlockKind::Retired);
    assert!(gone.reason.contains("MODELS.md"), "{gone:?}");
    assert_eq!(report.candidates.len(), 1, "{:?}", report.candidates);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_archive_read_beside_the_first_requests_still_retires_its_keys() {
    let Some(report) =
        plan_staged("the_archive_read_beside_the_first_requests_still_retires_its_keys").await
    else {
        return;
    };
    assert_held(&report);
}

// A current-thread runtime: the archive goes to its blocking pool all the same.
#[tokio::test]
async fn on_one_thread_the_archive_still_retires_its_keys() {
    let Some(report) = plan_staged("on_one_thread_the_archive_still_retires_its_keys").await else {
        return;
    };
    assert_held(&report);
}
