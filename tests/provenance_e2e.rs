//! Image provenance end to end: the registry simulator serves image configs
//! whose environment and labels declare CUDA, torch and the engine build;
//! a wave plans the bump (proposed from Docker Hub's tags API without a
//! read of the new image), reads both images' configs, and the frozen PR
//! body and its hidden record show both side by side.

use klaud_claims::Claimant;
use klaud_lifecycle::engine::MemoryJournal;
use klaud_lifecycle::report::parse_baseline_block;

use crate::support::{Harness, engine_config};

/// The demo registry seed with versions declared on the SGLang CUDA tags.
fn registry_seed() -> String {
    let root = std::path::Path::new(crate::support::REPO_ROOT);
    let text = std::fs::read_to_string(root.join("configs/demo-registry.json")).expect("seed");
    let mut seed: serde_json::Value = serde_json::from_str(&text).expect("seed JSON");
    let tags = &mut seed["repositories"]["lmsysorg/sglang"]["tags"];
    tags["v0.5.16-cu130"]["env"] = serde_json::json!({
        "CUDA_VERSION": "13.0.2", "PYTORCH_VERSION": "2.9.1", "SGLANG_VERSION": "0.5.16"
    });
    tags["v0.5.17-cu130"]["env"] = serde_json::json!({
        "CUDA_VERSION": "13.0.2", "PYTORCH_VERSION": "2.10.0", "SGLANG_VERSION": "0.5.17"
    });
    seed.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pr_body_shows_the_versions_both_images_declare() {
    let env = Harness::demo()
        .registry_seed(&registry_seed())
        .start()
        .await;
    let journal = MemoryJournal::new();
    let options = env.wave_options(
        Claimant::new(uuid::Uuid::from_u128(0x7072_6f76)),
        engine_config(7_100),
    );
    let summary = env.wave(&journal, options).await;
    let c = summary
        .candidates
        .iter()
        .find(|c| c.family.ends_with(":demo-fp4-b200-sglang"))
        .unwrap_or_else(|| panic!("no SGLang CUDA candidate: {summary:#?}"));
    let branch = format!("klaud/auto-{}", c.candidate);
    let pulls = env.pulls(&branch).await;
    assert_eq!(pulls.len(), 1, "{c:#?}");
    let body = env.pull(pulls[0]).await.body.unwrap_or_default();
    let frozen = parse_baseline_block(&body)
        .expect("readable block")
        .expect("baseline frozen in the first wave");
    let versions = frozen.provenance.versions.expect("versions recorded");
    let old = versions.old.expect("old image config read");
    assert_eq!(old.torch.as_deref(), Some("2.9.1"));
    assert_eq!(versions.new.torch.as_deref(), Some("2.10.0"));
    assert_eq!(versions.new.cuda.as_deref(), Some("13.0.2"));
    // Nothing declared, nothing shown: the demo images carry no build label.
    assert_eq!(versions.new.engine_commit, None);
    assert!(body.contains("| CUDA | `13.0.2` | unchanged |"), "{body}");
    assert!(body.contains("| torch | `2.9.1` | `2.10.0` |"), "{body}");
    assert!(body.contains("| CUDA | `13.0.2` | 未变 |"), "{body}");
    assert!(!body.contains("engine build commit"), "{body}");
}
