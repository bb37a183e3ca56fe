//! Image provenance: the versions a candidate's config declares (labels and
//! `config.Env`) come out of the plan, and the old image's are read on
//! request; nothing undeclared is filled in.

use chrono::{Duration, Utc};
use klaud_planner::image::ImageRef;
use klaud_planner::plan::{PlanOptions, Status, plan};
use klaud_planner::provenance::{ImageVersions, image_versions};
use klaud_planner::registry::testkit::{LocalRegistry, PlatformSpec, Pusher};
use klaud_planner::registry::{RegistryClient, RegistryConfig};
use klaud_planner::repo::Repository;

fn checkout(image: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let master = format!(
        "a-fp4-b200-vllm:\n  image: {image}\n  model: demo/Demo\n  model-prefix: demo\n  runner: b200\n  precision: fp4\n  framework: vllm\n  multinode: false\n  scenarios:\n    fixed-seq-len:\n    - isl: 1024\n      osl: 1024\n      search-space:\n      - {{ tp: 8, conc-start: 4, conc-end: 64 }}\n"
    );
    std::fs::create_dir_all(dir.path().join("configs")).unwrap();
    std::fs::write(dir.path().join("configs/nvidia-master.yaml"), master).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidate_and_old_image_declare_their_versions() {
    let test = "candidate_and_old_image_declare_their_versions";
    let Some(registry) = LocalRegistry::start_or_skip(test) else {
        return;
    };
    let now = Utc::now();
    let pusher = Pusher::new(registry.base_url());
    let old = PlatformSpec::linux("amd64", &[], Some(now - Duration::days(30))).with_env(&[
        ("PATH", "/usr/bin"),
        ("CUDA_VERSION", "13.0.2"),
        ("PYTORCH_VERSION", "2.13.0"),
    ]);
    pusher
        .push_image("klaud/prov", "v0.25.0", &[old])
        .await
        .unwrap();
    let new = PlatformSpec::linux(
        "amd64",
        &[("ai.vllm.build.commit", "3df4ae15aaaa")],
        Some(now - Duration::days(3)),
    )
    .with_env(&[
        ("CUDA_VERSION", "13.0.2"),
        ("PYTORCH_VERSION", "2.14.0"),
        // An empty value declares nothing.
        ("VLLM_VERSION", ""),
    ]);
    pusher
        .push_image("klaud/prov", "v0.26.0", &[new])
        .await
        .unwrap();
    let mut config = RegistryConfig::default();
    config
        .mirrors
        .insert("docker.io".to_owned(), registry.base_url());
    let client = RegistryClient::new(config).unwrap();

    let dir = checkout("klaud/prov:v0.25.0");
    let repository = Repository::open(dir.path()).unwrap();
    let report = plan(&repository, &client.session(), &PlanOptions::new(now)).await;
    let family = &report.families[0];
    assert_eq!(family.status, Status::StaleNewer, "{family:?}");
    let candidate = family.candidate.as_ref().expect("candidate");
    assert_eq!(
        candidate.versions,
        ImageVersions {
            cuda: Some("13.0.2".into()),
            torch: Some("2.14.0".into()),
            engine_commit: Some("3df4ae15aaaa".into()),
            ..ImageVersions::default()
        }
    );

    let old_ref = ImageRef::parse("klaud/prov:v0.25.0").unwrap();
    let old = image_versions(&client, &old_ref, "amd64").await.unwrap();
    assert_eq!(
        old,
        Some(ImageVersions {
            cuda: Some("13.0.2".into()),
            torch: Some("2.13.0".into()),
            ..ImageVersions::default()
        })
    );
    // A platform the image lacks, and a tag the registry lacks: unknown.
    assert_eq!(
        image_versions(&client, &old_ref, "arm64").await.unwrap(),
        None
    );
    let gone = ImageRef::parse("klaud/prov:v0.1.0").unwrap();
    assert_eq!(image_versions(&client, &gone, "amd64").await.unwrap(), None);
}
