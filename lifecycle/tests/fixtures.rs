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
    let Artifact::Benchmark { row, .. } = parsed else {
        panic!("expected a benchmark artifact, got {parsed:?}");
    };
    let BenchmarkRow::Agentic(row) = *row else {
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
