//! Property tests: hostile artifact bytes never panic the parsers.

use std::io::{Cursor, Write};

use klaud_lifecycle::artifacts::{ArtifactLimits, parse_artifact};
use proptest::prelude::*;

const NAMES: &[&str] = &[
    "bmk_x",
    "bmk_agentic_x",
    "results_bmk",
    "eval_results_all",
    "klaud-sweep-manifest",
];

fn zip_of(file: &str, data: &[u8]) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    let mut w = zip::ZipWriter::new(&mut out);
    w.start_file(file, zip::write::SimpleFileOptions::default())
        .expect("start");
    w.write_all(data).expect("write");
    w.finish().expect("finish");
    out.into_inner()
}

fn jsonish() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("\"false\"".to_owned()),
        Just("-1".to_owned()),
        Just("4.5".to_owned()),
        Just("1e400".to_owned()),
        Just("18446744073709551616".to_owned()),
        "\"[a-z_]{0,8}\"",
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        let keys = prop::sample::select(vec![
            "conc",
            "tput_per_gpu",
            "output_tput_per_gpu",
            "mean_ttft",
            "mean_tpot",
            "tp",
            "dp_attention",
            "request_metrics",
            "throughput",
            "per_gpu",
            "latency",
            "ttft",
            "tpot",
            "mean",
            "total_tput_tps",
            "output_tput_tps",
            "task",
            "score",
            "head",
            "run-id",
            "run-attempt",
            "full-sweep",
            "isl",
        ]);
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec((keys, inner), 0..6).prop_map(|kv| {
                let fields: Vec<String> = kv.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                format!("{{{}}}", fields.join(","))
            }),
        ]
    })
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512), name in prop::sample::select(NAMES)) {
        let _ = parse_artifact(name, &bytes, &ArtifactLimits::default());
    }

    #[test]
    fn random_json_in_a_valid_zip_never_panics(json in jsonish(), name in prop::sample::select(NAMES)) {
        for file in ["agg.json", "agg_bmk.json", "agg_eval_all.json", "sweep_manifest.json"] {
            let zip = zip_of(file, json.as_bytes());
            let _ = parse_artifact(name, &zip, &ArtifactLimits::default());
        }
    }
}
