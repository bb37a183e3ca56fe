//! Parses the real InferenceX samples under `../shared/fixtures/inferencex/`.

use std::io::{Cursor, Write};
use std::path::PathBuf;

use klaud_lifecycle::artifacts::{
    AGG_EVAL_ARTIFACT, AGG_EVAL_FILE, Artifact, ArtifactLimits, BenchmarkRow,
    SWEEP_MANIFEST_ARTIFACT, SWEEP_MANIFEST_FILE, parse_artifact,
};

/// Reads a fixture, or returns `None` after a loud SKIP when the fixtures are
/// absent outside CI (in CI their absence fails the test).
pub fn fixture(name: &str) -> Option<Vec<u8>> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/inferencex")
        .join(name);
    match std::fs::read(&path) {
        Ok(bytes) => Some(bytes),
        Err(e) if std::env::var_os("CI").is_some() => {
            panic!("fixture {} is missing in CI: {e}", path.display())
        }
        Err(e) => {
            eprintln!(
                "SKIP: fixture {} unavailable ({e}); test not run",
                path.display()
            );
            None
        }
    }
}

fn zip_of(name: &str, data: &[u8]) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    let mut w = zip::ZipWriter::new(&mut out);
    w.start_file(name, zip::write::SimpleFileOptions::default())
        .expect("start");
    w.write_all(data).expect("write");
    w.finish().expect("finish");
    out.into_inner()
}

#[test]
fn real_agentx_row_parses() {
    let Some(bytes) = fixture("agg-agentic-row.sample.json") else {
        return;
    };
    let zip = zip_of("bmk_agentic_golden/agg.json", &bytes);
    let parsed = parse_artifact("bmk_agentic_golden", &zip, &ArtifactLimits::default())
        .expect("the real row parses");
    let Artifact::Benchmark { mut rows, .. } = parsed else {
        panic!("expected a benchmark artifact, got {parsed:?}");
    };
    let Some(BenchmarkRow::Agentic(row)) = rows.pop() else {
        panic!("expected an AgentX row");
    };
    assert_eq!(row.conc, 4);
    assert_eq!(row.identity.tp, Some(8));
    assert_eq!(row.identity.dp_attention, Some(false));
    assert_eq!(row.identity.spec_decoding.as_deref(), Some("mtp"));
    assert_eq!(row.metrics.output_tput_per_gpu, 3.2627);
    assert_eq!(row.metrics.tput_per_gpu, 405.2768);
    assert_eq!(row.metrics.mean_ttft, 102.01531);
    assert_eq!(row.metrics.mean_tpot, 0.01008);
    assert_eq!(row.num_requests_successful, Some(112));
    assert!(row.extra.contains_key("server_metrics"));
    // The producer run's artifact names the dataset the replay used.
    let dataset = klaud_lifecycle::dataset::row_dataset(&row)
        .expect("readable")
        .expect("named");
    assert_eq!(dataset.name, "semianalysis_cc_traces_weka_062126");
    assert_eq!(
        dataset.hf_dataset_name.as_deref(),
        Some("semianalysisai/cc-traces-weka-062126")
    );
}

#[test]
fn real_eval_and_manifest_samples_parse() {
    let Some(evals) = fixture("agg-eval-all.sample.json") else {
        return;
    };
    let zip = zip_of(&format!("{AGG_EVAL_ARTIFACT}/{AGG_EVAL_FILE}"), &evals);
    let Artifact::Evals { rows } =
        parse_artifact(AGG_EVAL_ARTIFACT, &zip, &ArtifactLimits::default()).expect("evals parse")
    else {
        panic!("not evals");
    };
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].task.as_str(), rows[0].conc), ("gsm8k", 28));
    assert_eq!(rows[0].n_eff, Some(2));

    let Some(manifest) = fixture("sweep-manifest.sample.json") else {
        return;
    };
    let zip = zip_of(SWEEP_MANIFEST_FILE, &manifest);
    let Artifact::Manifest(m) =
        parse_artifact(SWEEP_MANIFEST_ARTIFACT, &zip, &ArtifactLimits::default())
            .expect("manifest parses")
    else {
        panic!("not a manifest");
    };
    assert_eq!(m.head, "b".repeat(40));
    assert_eq!((m.run_id, m.run_attempt, m.full_sweep), (123, 1, false));
    assert!(m.extra.contains_key("points"));
}

#[test]
fn every_real_family_expands_into_points() {
    use klaud_lifecycle::baseline::{FamilyKey, family_points};
    let root =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/inferencex/full");
    if fixture("full/configs/nvidia-master.yaml").is_none() {
        return;
    }
    let repo = klaud_planner::repo::Repository::open(&root).expect("the real checkout opens");
    let mut total = 0;
    let mut dup: Vec<String> = Vec::new();
    for family in repo.families() {
        let points = family_points(&family.family, &family.entry)
            .unwrap_or_else(|e| panic!("{}: {e}", family.family));
        let key = FamilyKey::of(family);
        assert!(
            !key.hardware.is_empty() && !key.hardware.contains(':'),
            "{key:?}"
        );
        let labels: std::collections::BTreeSet<String> = points.iter().map(|p| p.label()).collect();
        if labels.len() != points.len() {
            dup.push(family.family.clone());
        }
        total += points.len();
    }
    assert!(dup.is_empty(), "labels not unique in {dup:?}");
    assert!(total > 1000, "only {total} points over the real masters");
}

#[test]
fn real_api_samples_build_a_baseline() {
    use chrono::NaiveDate;
    use klaud_lifecycle::baseline::*;
    let Some(bench) = fixture("api-benchmarks.sample.json") else {
        return;
    };
    let point = |isl, osl| PointSpec {
        scenario: Scenario::FixedSeqLen { isl, osl },
        conc: 4,
        spec_decoding: "none".into(),
        kv_offload: None,
        decode: Workers {
            num_workers: None,
            tp: 4,
            ep: 1,
            dp_attn: false,
        },
        prefill: None,
    };
    let request = BaselineRequest {
        model: "DeepSeek-R1-0528".into(),
        date: NaiveDate::from_ymd_opt(2026, 2, 27).expect("date"),
        image: "lmsysorg/sglang:v0.5.9-rocm700-mi35x".into(),
        key: FamilyKey {
            hardware: "mi355x".into(),
            framework: "sglang".into(),
            model_prefix: "dsr1".into(),
            precision: "fp4".into(),
        },
        points: vec![point(1024, 1024), point(1024, 8192), point(8192, 1024)],
    };
    let baseline = build_baseline(
        &request,
        &Fetched {
            url: "https://x/api/v1/benchmarks".into(),
            body: String::from_utf8(bench).expect("utf-8"),
        },
    )
    .expect("real samples parse");
    let m = baseline.points[0]
        .metrics()
        .expect("1k1k row of the current image");
    assert!((m.output_tput_per_gpu - 89.88905796876784).abs() < 1e-9);
    // Frozen with its own publication day and producer run.
    assert!(matches!(
        &baseline.points[0].value,
        BaselineValue::Measured { published: Some(d), run_id: Some(22469096331), .. }
            if *d == NaiveDate::from_ymd_opt(2026, 2, 27).expect("date")
    ));
    // The 1k8k row records no image: accepted, but it lacks output_tput_per_gpu.
    assert!(
        matches!(&baseline.points[1].value, BaselineValue::Unavailable { reason } if reason.contains("output_tput_per_gpu"))
    );
    assert!(
        matches!(&baseline.points[2].value, BaselineValue::Unavailable { reason } if reason == "not published as of 2026-02-27")
    );
    let json = serde_json::to_string(&baseline).expect("serializable");
    let back: Baseline = serde_json::from_str(&json).expect("round-trips");
    assert_eq!(back, baseline);
}

#[test]
fn baseline_blocks_of_real_families_fit_a_pr_body() {
    use chrono::NaiveDate;
    use klaud_lifecycle::baseline::*;
    use klaud_lifecycle::report::{FrozenBaseline, Provenance, render_baseline_block};
    let root =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/inferencex/full");
    if fixture("full/configs/nvidia-master.yaml").is_none() {
        return;
    }
    let repo = klaud_planner::repo::Repository::open(&root).expect("the real checkout opens");
    let mut largest = (0, String::new());
    for family in repo.families() {
        let points = family_points(&family.family, &family.entry).expect("expands");
        let frozen = FrozenBaseline {
            provenance: Provenance {
                engine: "SGLang".into(),
                old_image: family.image().to_string(),
                new_image: format!("{}@sha256:{}", family.image(), "a".repeat(64)),
                old_tag: family.image().tag().map(str::to_owned),
                new_tag: "v99.0.0".into(),
                digest: format!("sha256:{}", "a".repeat(64)),
                revision: Some("b".repeat(40)),
                clock: Some("registry push time".into()),
                upstream: None,
                not_release_reason: None,
                scope: None,
                versions: None,
            },
            baseline: Baseline {
                date: NaiveDate::from_ymd_opt(2026, 9, 9).expect("date"),
                image: family.image().to_string(),
                model: family.entry.model.clone(),
                source_urls: vec!["https://example.com/api/v1/benchmarks".into()],
                evals: Vec::new(),
                evals_unavailable: None,
                agentx_datasets: Vec::new(),
                unknown_model: None,
                points: points
                    .iter()
                    .map(|p| BaselinePoint {
                        label: p.label(),
                        point: p.clone(),
                        value: BaselineValue::Measured {
                            metrics: klaud_lifecycle::artifacts::PointMetrics {
                                tput_per_gpu: 12345.678901234,
                                output_tput_per_gpu: 1234.5678901234,
                                mean_ttft: 1.23456789012,
                                mean_tpot: 0.0123456789012,
                            },
                            run_url: Some("https://github.com/SemiAnalysisAI/InferenceX/actions/runs/12345678901/attempts/1".into()),
                            published: NaiveDate::from_ymd_opt(2026, 9, 3),
                            run_id: Some(12345678901),
                        },
                    })
                    .collect(),
            },
        };
        let chars = render_baseline_block(&frozen).chars().count();
        if chars > largest.0 {
            largest = (chars, family.family.clone());
        }
    }
    eprintln!(
        "largest baseline block: {} characters ({})",
        largest.0, largest.1
    );
    assert!(largest.0 <= 60_000, "{largest:?}");
}

#[test]
fn offloading_variants_of_one_topology_stay_separate_points() {
    use klaud_lifecycle::baseline::family_points;
    let root =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/inferencex/full");
    if fixture("full/configs/nvidia-master.yaml").is_none() {
        return;
    }
    let repo = klaud_planner::repo::Repository::open(&root).expect("the real checkout opens");
    let family = repo
        .family("configs/nvidia-master.yaml:qwen3.5-fp8-h100-sglang-agentic")
        .expect("family exists");
    let points = family_points(&family.family, &family.entry).expect("expands");
    let at12: Vec<_> = points
        .iter()
        .filter(|p| p.conc == 12 && p.decode.tp == 8 && p.decode.ep == 8)
        .map(|p| p.label())
        .collect();
    assert_eq!(
        at12,
        vec!["AgentX c12 TP8 EP8", "AgentX c12 TP8 EP8 KV dram/hicache"]
    );
}
