//! Deterministic benchmark numbers and the artifacts and API rows built
//! from them, in the InferenceX formats (see configs/README.md#what-klaud-reads-from-the-benchmark-repositorys-workflows, configs/README.md#baseline-readiness-lifecycle-require_baseline).
//!
//! Every number derives from a hash of the family and the point, never from
//! the image, so a run with multipliers of 1.0 reproduces the published
//! baseline exactly and a multiplier of 1.10 shows as +10.0%.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::points::{FamilySpec, Point, sanitize};
use super::script::Multipliers;

/// The numbers of one point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Metrics {
    /// Total tokens/s per GPU.
    pub tput_per_gpu: f64,
    /// Output tokens/s per GPU.
    pub output_tput_per_gpu: f64,
    /// Input tokens/s per GPU.
    pub input_tput_per_gpu: f64,
    /// Seconds.
    pub mean_ttft: f64,
    /// Seconds.
    pub mean_tpot: f64,
}

/// Uniform numbers in `[0, 1)` drawn from a hash of `parts`.
fn unit_draws(parts: &[&str]) -> [f64; 4] {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        // A separator so ("ab","c") and ("a","bc") differ.
        h.update([0u8]);
    }
    let digest = h.finalize();
    let mut out = [0.0; 4];
    for (i, chunk) in digest.chunks_exact(8).take(4).enumerate() {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        // 53 bits of mantissa give an exact uniform double.
        out[i] = (u64::from_be_bytes(b) >> 11) as f64 / (1u64 << 53) as f64;
    }
    out
}

fn round(x: f64, decimals: i32) -> f64 {
    let p = 10f64.powi(decimals);
    (x * p).round() / p
}

/// Lengths an AgentX trace point stands for (its mean input and output).
const AGENTIC_ISL: f64 = 60_000.0;
const AGENTIC_OSL: f64 = 800.0;

/// The published (baseline) numbers of a point of `family`. The speed of a
/// sweep line comes from the family and the point's shape, so numbers move
/// smoothly with concurrency; each point adds a few percent of its own noise.
pub fn baseline_metrics(family: &str, point: &Point) -> Metrics {
    let [f1, f2, ..] = unit_draws(&[family, &point.shape_slug()]);
    let [p1, p2, ..] = unit_draws(&[family, &point.slug()]);
    let gpus = point.num_gpus().max(1) as f64;
    let conc = point.conc.max(1) as f64;
    let isl = point.isl.map_or(AGENTIC_ISL, |v| v as f64);
    let osl = point.osl.map_or(AGENTIC_OSL, |v| v as f64).max(1.0);
    // Per-user decode speed falls as concurrency grows; total throughput rises.
    let per_user = (60.0 + 60.0 * f1) / (1.0 + conc / 48.0) * (0.97 + 0.06 * p1);
    let output = per_user * conc / gpus;
    let input = output * isl / osl;
    let ttft = (0.04 + isl / (40_000.0 + 40_000.0 * f2)) * (1.0 + conc / 64.0) * (0.95 + 0.1 * p2);
    Metrics {
        tput_per_gpu: round(input + output, 4),
        output_tput_per_gpu: round(output, 4),
        input_tput_per_gpu: round(input, 4),
        mean_ttft: round(ttft, 6),
        mean_tpot: round(1.0 / per_user, 6),
    }
}

/// A run's numbers: the baseline scaled by the script's multipliers.
pub fn run_metrics(family: &str, point: &Point, m: &Multipliers) -> Metrics {
    let b = baseline_metrics(family, point);
    let input = round(b.input_tput_per_gpu * m.throughput, 4);
    let output = round(b.output_tput_per_gpu * m.throughput, 4);
    Metrics {
        tput_per_gpu: round(b.tput_per_gpu * m.throughput, 4),
        output_tput_per_gpu: output,
        input_tput_per_gpu: input,
        mean_ttft: round(b.mean_ttft * m.ttft, 6),
        mean_tpot: round(b.mean_tpot * m.tpot, 6),
    }
}

/// The published eval score of a family (gsm8k-like, 0.90–0.97).
pub fn baseline_score(family: &str) -> f64 {
    let [r, ..] = unit_draws(&[family, "eval"]);
    round(0.90 + 0.07 * r, 4)
}

/// The concurrency evals run at: the family's highest fixed-seq-len one
/// (or highest overall).
fn eval_point(f: &FamilySpec) -> Option<&Point> {
    f.points
        .iter()
        .filter(|p| !p.agentic())
        .max_by_key(|p| p.conc)
        .or_else(|| f.points.iter().max_by_key(|p| p.conc))
}

/// The API's hardware name for a runner label (`cluster:b200-dgxc` → `b200`).
pub fn hardware_of_runner(runner: &str) -> String {
    let runner = runner.strip_prefix("cluster:").unwrap_or(runner);
    runner
        .split(['-', '_'])
        .next()
        .unwrap_or(runner)
        .to_ascii_lowercase()
}

/// The result name `<R>` of a benchmark job, as the templates'
/// `RESULT_FILENAME`: one per point for a single-node family, one per sweep
/// line (the points that differ only in concurrency, their concurrencies
/// joined by `x`) for a multi-node one, whose job runs a whole `conc-list`.
fn result_name(f: &FamilySpec, shape: &str, concs: &[u64]) -> String {
    let concs: Vec<String> = concs.iter().map(u64::to_string).collect();
    format!("{}_{shape}_conc{}", sanitize(&f.key), concs.join("x"))
}

/// Latency distribution in the AgentX shape, around a mean.
fn dist(mean: f64) -> Value {
    json!({
        "mean": round(mean, 6), "p50": round(mean * 0.92, 6), "p75": round(mean * 1.1, 6),
        "p90": round(mean * 1.3, 6), "p95": round(mean * 1.45, 6), "std": round(mean * 0.25, 6),
    })
}

/// A fixed-seq-len `bmk_<name>` row (the InferenceX per-point aggregate).
pub fn fixed_row(f: &FamilySpec, p: &Point, image: &str, m: &Metrics) -> Value {
    let mut row = json!({
        "hw": f.runner, "conc": p.conc, "image": image, "model": f.model,
        "infmax_model_prefix": f.model_prefix, "framework": f.framework,
        "precision": f.precision, "spec_decoding": p.spec_decoding,
        "disagg": p.prefill.is_some(), "isl": p.isl, "osl": p.osl,
        "is_multinode": f.multinode, "tp": p.decode.tp, "ep": p.decode.ep,
        "dp_attention": p.decode.dp_attn, "num_gpus": p.num_gpus(),
        "kv_offloading": p.kv_offloading,
        "tput_per_gpu": m.tput_per_gpu, "output_tput_per_gpu": m.output_tput_per_gpu,
        "input_tput_per_gpu": m.input_tput_per_gpu,
        "mean_ttft": m.mean_ttft, "median_ttft": round(m.mean_ttft * 0.92, 6),
        "p99_ttft": round(m.mean_ttft * 1.8, 6),
        "mean_tpot": m.mean_tpot, "median_tpot": round(m.mean_tpot * 0.98, 6),
        "p99_tpot": round(m.mean_tpot * 1.3, 6),
        "mean_itl": m.mean_tpot, "mean_intvty": round(1.0 / m.mean_tpot.max(1e-9), 4),
        "mean_e2el": round(m.mean_ttft + m.mean_tpot * p.osl.unwrap_or(1) as f64, 6),
    });
    if let (Some(pre), Some(obj)) = (&p.prefill, row.as_object_mut()) {
        for (k, v) in [
            ("prefill_tp", json!(pre.tp)),
            ("prefill_ep", json!(pre.ep)),
            ("prefill_dp_attention", json!(pre.dp_attn)),
            ("prefill_num_workers", json!(pre.num_workers)),
            ("decode_tp", json!(p.decode.tp)),
            ("decode_ep", json!(p.decode.ep)),
            ("decode_dp_attention", json!(p.decode.dp_attn)),
            ("decode_num_workers", json!(p.decode.num_workers)),
        ] {
            obj.insert(k.into(), v);
        }
    }
    row
}

/// An AgentX `bmk_agentic_<name>` row (the shape of the AgentX sample).
pub fn agentic_row(f: &FamilySpec, p: &Point, image: &str, m: &Metrics) -> Value {
    let gpus = p.num_gpus().max(1);
    let duration = 1800.0;
    let total_req = 40 * p.conc.max(1) + 16;
    let ok_req = total_req - 16;
    json!({
        "hw": f.runner, "conc": p.conc, "image": image,
        "recipe_fingerprint": hex::encode(Sha256::digest(format!("{}|{}", f.family, p.slug()))),
        "model": f.model, "infmax_model_prefix": f.model_prefix, "framework": f.framework,
        "precision": f.precision, "spec_decoding": p.spec_decoding,
        "disagg": p.prefill.is_some(), "scenario_type": "agentic-coding",
        "is_multinode": f.multinode, "num_gpus": gpus, "tp": p.decode.tp, "ep": p.decode.ep,
        "dp_attention": p.decode.dp_attn.to_string(), "kv_offloading": p.kv_offloading,
        "kv_offload_backend": null, "allocated_cpu_dram_gb": 0,
        "num_requests_total": total_req, "num_requests_successful": ok_req,
        "request_accounting": {
            "records_total": total_req, "records_profiled": ok_req,
            "records_dropped_total": 16, "records_warmup_dropped": 16,
            "records_error_dropped": 0, "error_categories": {},
        },
        "pp": 1, "dcp_size": 1, "pcp_size": 1,
        "dataset": {"source_type": "public_dataset", "loader": super::producer::SANDBOX_DATASET,
                    "hf_dataset_name": super::producer::SANDBOX_HF_DATASET, "hf_split": "train",
                    "num_dataset_entries": 393},
        "request_metrics": {
            "latency": {
                "ttft": dist(m.mean_ttft), "tpot": dist(m.mean_tpot), "itl": dist(m.mean_tpot),
                "e2el": dist(m.mean_ttft + m.mean_tpot * AGENTIC_OSL),
            },
            "throughput": {
                "input": {"tokens_per_second": round(m.input_tput_per_gpu * gpus as f64, 4)},
                "output": {"tokens_per_second": round(m.output_tput_per_gpu * gpus as f64, 4)},
                "total": {"tokens_per_second": round(m.tput_per_gpu * gpus as f64, 4)},
                "duration_seconds": duration,
                "per_gpu": {"total_tput_tps": m.tput_per_gpu,
                            "output_tput_tps": m.output_tput_per_gpu,
                            "input_tput_tps": m.input_tput_per_gpu},
            },
        },
    })
}

/// One `agg_eval_all.json` row for a family.
pub fn eval_row(f: &FamilySpec, image: &str, multipliers: &Multipliers) -> Option<Value> {
    let p = eval_point(f)?;
    let score = round((baseline_score(&f.family) * multipliers.score).min(1.0), 4);
    Some(json!({
        "infmax_model_prefix": f.model_prefix, "model": f.model, "image": image,
        "hw": f.runner, "framework": f.framework, "precision": f.precision,
        "tp": p.decode.tp, "ep": p.decode.ep, "num_gpus": p.num_gpus(),
        "disagg": p.prefill.is_some(), "is_multinode": f.multinode,
        "prefill_num_workers": p.prefill.map_or(0, |w| w.num_workers),
        "decode_num_workers": if p.prefill.is_some() { p.decode.num_workers } else { 0 },
        "conc": p.conc, "task": "gsm8k", "score": score, "score_name": "em_strict",
        "em_strict": score, "em_flexible": round((score + 0.01).min(1.0), 4), "n_eff": 1319,
    }))
}

/// The result rows of a run, `(artifact name, file name, row)` per point,
/// laid out as the InferenceX templates upload them:
/// - single node: `bmk_<R>` holding `agg_<R>.json`, or for AgentX
///   `bmk_agentic_<R>` holding `<R>.json`;
/// - multi node: one artifact per job (sweep line), `bmk_<R>` holding one
///   `agg_<R>_conc<C>.json` per point, or `bmk_agentic_<R>` holding
///   `<R>_conc<C>.json`.
///
/// Only the first `limit` points ran (a partial failure).
pub fn point_rows(
    f: &FamilySpec,
    image: &str,
    multipliers: &Multipliers,
    limit: usize,
) -> Vec<(String, String, Value)> {
    let ran: Vec<&Point> = f.points.iter().take(limit).collect();
    // Multi-node jobs: the concurrencies of each sweep line, in config order.
    let mut lines: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    if f.multinode {
        for p in &ran {
            lines.entry(p.shape_slug()).or_default().push(p.conc);
        }
    }
    ran.into_iter()
        .map(|p| {
            let m = run_metrics(&f.family, p, multipliers);
            let shape = p.shape_slug();
            let (name, suffix) = match lines.get(&shape) {
                Some(concs) => (result_name(f, &shape, concs), format!("_conc{}", p.conc)),
                None => (result_name(f, &shape, &[p.conc]), String::new()),
            };
            if p.agentic() {
                (
                    format!("bmk_agentic_{name}"),
                    format!("{name}{suffix}.json"),
                    agentic_row(f, p, image, &m),
                )
            } else {
                (
                    format!("bmk_{name}"),
                    format!("agg_{name}{suffix}.json"),
                    fixed_row(f, p, image, &m),
                )
            }
        })
        .collect()
}

/// The per-job eval artifact of a family that ran its evals: single node
/// `eval_<EXP>_<R>`, multi node `eval_<R>`, with the files the templates
/// upload (`meta_env.json`, `results*.json`). Klaud reads the run-level
/// `eval_results_all` instead; these exist so a reader of the run sees
/// what GitHub would show.
pub fn eval_artifact(
    f: &FamilySpec,
    image: &str,
    multipliers: &Multipliers,
) -> Option<(String, BTreeMap<String, Vec<u8>>)> {
    let p = eval_point(f)?;
    let r = result_name(f, &p.shape_slug(), &[p.conc]);
    let name = if f.multinode {
        format!("eval_{r}")
    } else {
        format!("eval_{}_{r}", sanitize(&f.key))
    };
    let score = round((baseline_score(&f.family) * multipliers.score).min(1.0), 4);
    let meta = json!({
        "image": image, "framework": f.framework, "precision": f.precision,
        "model": f.model, "hw": f.runner, "conc": p.conc, "is_multinode": f.multinode,
    });
    let results = json!({
        "results": {"gsm8k": {"exact_match,strict-match": score,
                              "exact_match,flexible-extract": round((score + 0.01).min(1.0), 4)}},
        "n-samples": {"gsm8k": {"original": 1319, "effective": 1319}},
    });
    let files = BTreeMap::from([
        ("meta_env.json".to_owned(), json_bytes(&meta)),
        ("results_gsm8k.json".to_owned(), json_bytes(&results)),
    ]);
    Some((name, files))
}

fn json_bytes(v: &Value) -> Vec<u8> {
    // Serializing a Value cannot fail; fall back to an empty list to stay total.
    serde_json::to_vec_pretty(v).unwrap_or_else(|_| b"[]".to_vec())
}

/// What a run uploads, by artifact name then file.
pub type Uploads = BTreeMap<String, BTreeMap<String, Vec<u8>>>;

/// Adds per-point artifacts and the run-level `results_bmk` aggregate.
pub fn add_rows(uploads: &mut Uploads, rows: Vec<(String, String, Value)>) {
    if rows.is_empty() {
        return;
    }
    let agg: Vec<Value> = rows.iter().map(|(_, _, r)| r.clone()).collect();
    for (name, file, row) in rows {
        uploads
            .entry(name)
            .or_default()
            .insert(file, json_bytes(&row));
    }
    uploads
        .entry("results_bmk".into())
        .or_default()
        .insert("agg_bmk.json".into(), json_bytes(&Value::Array(agg)));
}

/// Adds `eval_results_all/agg_eval_all.json`.
pub fn add_evals(uploads: &mut Uploads, rows: Vec<Value>) {
    if rows.is_empty() {
        return;
    }
    uploads
        .entry("eval_results_all".into())
        .or_default()
        .insert("agg_eval_all.json".into(), json_bytes(&Value::Array(rows)));
}

/// The sweep's `matrix`, in the sweep-manifest sample's shape.
fn matrix_entry(f: &FamilySpec, image: &str) -> Value {
    let concs: Vec<u64> = f.points.iter().map(|p| p.conc).collect();
    json!({
        "exp-name": f.key, "model-prefix": f.model_prefix, "model": f.model,
        "runner": f.runner, "framework": f.framework, "precision": f.precision,
        "conc": concs, "disagg": f.points.iter().any(|p| p.prefill.is_some()), "image": image,
    })
}

/// Adds `klaud-sweep-manifest/sweep_manifest.json`.
pub fn add_manifest(
    uploads: &mut Uploads,
    head: &str,
    run_id: u64,
    run_attempt: u64,
    full_sweep: bool,
    families: &[(FamilySpec, String)],
) {
    let (multi, single): (Vec<_>, Vec<_>) = families.iter().partition(|(f, _)| f.multinode);
    let entries = |list: Vec<&(FamilySpec, String)>| -> Vec<Value> {
        list.into_iter()
            .map(|(f, img)| matrix_entry(f, img))
            .collect()
    };
    let manifest = json!({
        "schema-version": 2, "head": head, "run-id": run_id, "run-attempt": run_attempt,
        "full-sweep": full_sweep,
        "matrix": {"single_node": {"benchmarks": entries(single)},
                   "multi_node": {"benchmarks": entries(multi)}},
        "publication": {"mode": "incremental", "replacement_scope": []},
        "config-keys": families.iter().map(|(f, _)| f.key.clone()).collect::<Vec<_>>(),
    });
    uploads
        .entry("klaud-sweep-manifest".into())
        .or_default()
        .insert("sweep_manifest.json".into(), json_bytes(&manifest));
}

/// The `/api/v1/evaluations` row of `f`'s eval (InferenceX-app's
/// `getAllEvalResults`: the config, the task, its metrics and the run; no
/// image), published on `date` by the run at `run_url`, when the run
/// measured the eval's point (`measured`).
pub fn api_eval_row(
    f: &FamilySpec,
    date: &str,
    run_url: &str,
    measured: impl Fn(&Point) -> bool,
) -> Option<Value> {
    let p = eval_point(f).filter(|p| measured(p))?;
    let score = baseline_score(&f.family);
    Some(json!({
        "hardware": hardware_of_runner(&f.runner), "framework": f.framework,
        "model": f.model_prefix, "precision": f.precision, "spec_method": p.spec_decoding,
        "decode_tp": p.decode.tp, "decode_ep": p.decode.ep,
        "decode_dp_attention": p.decode.dp_attn, "task": "gsm8k", "date": date,
        "conc": p.conc,
        "metrics": {"em_strict": score, "em_flexible": round((score + 0.01).min(1.0), 4), "n_eff": 1319},
        "timestamp": format!("{date}T03:00:00Z"), "run_url": run_url,
    }))
}

/// One `/api/v1/benchmarks` row for a point of `f`, published on `date`.
pub fn api_row(f: &FamilySpec, p: &Point, date: &str, run_url: &str) -> Value {
    let m = baseline_metrics(&f.family, p);
    let pre = p.prefill.unwrap_or(p.decode);
    let disagg = p.prefill.is_some();
    let role_gpus = |w: &super::points::Workers| w.tp.saturating_mul(w.num_workers.max(1));
    let (np, nd) = if disagg {
        (role_gpus(&pre), role_gpus(&p.decode))
    } else {
        (p.decode.tp, p.decode.tp)
    };
    json!({
        "hardware": hardware_of_runner(&f.runner), "framework": f.framework,
        "model": f.model_prefix, "precision": f.precision, "spec_method": p.spec_decoding,
        "disagg": disagg, "is_multinode": f.multinode,
        "prefill_tp": pre.tp, "prefill_ep": pre.ep, "prefill_dp_attention": pre.dp_attn,
        "prefill_num_workers": if disagg { pre.num_workers } else { 0 },
        "decode_tp": p.decode.tp, "decode_ep": p.decode.ep,
        "decode_dp_attention": p.decode.dp_attn,
        "decode_num_workers": if disagg { p.decode.num_workers } else { 0 },
        "num_prefill_gpu": np, "num_decode_gpu": nd,
        "isl": p.isl, "osl": p.osl, "conc": p.conc, "image": f.image,
        "metrics": {
            "mean_ttft": m.mean_ttft, "median_ttft": round(m.mean_ttft * 0.92, 6),
            "p99_ttft": round(m.mean_ttft * 1.8, 6),
            "mean_tpot": m.mean_tpot, "median_tpot": round(m.mean_tpot * 0.98, 6),
            "p99_tpot": round(m.mean_tpot * 1.3, 6), "mean_itl": m.mean_tpot,
            "tput_per_gpu": m.tput_per_gpu, "output_tput_per_gpu": m.output_tput_per_gpu,
            "input_tput_per_gpu": m.input_tput_per_gpu,
        },
        "date": date, "run_url": run_url,
    })
}

#[cfg(test)]
mod tests {
    use super::super::points::Workers;
    use super::*;

    fn point(conc: u64) -> Point {
        Point {
            isl: Some(8192),
            osl: Some(1024),
            conc,
            spec_decoding: "none".into(),
            kv_offloading: "none".into(),
            decode: Workers {
                num_workers: 1,
                tp: 4,
                ep: 1,
                dp_attn: false,
            },
            prefill: None,
        }
    }

    #[test]
    fn numbers_are_deterministic_and_plausible() {
        let a = baseline_metrics("configs/x.yaml:k", &point(8));
        assert_eq!(a, baseline_metrics("configs/x.yaml:k", &point(8)));
        assert_ne!(a, baseline_metrics("configs/x.yaml:other", &point(8)));
        assert!(a.output_tput_per_gpu > 0.0 && a.mean_tpot > 0.0 && a.mean_ttft > 0.0);
        assert!(
            (a.tput_per_gpu - a.input_tput_per_gpu - a.output_tput_per_gpu).abs() < 1e-3,
            "{a:?}"
        );
        // More users share the GPUs: throughput per GPU rises, per-user speed falls.
        let b = baseline_metrics("configs/x.yaml:k", &point(64));
        assert!(b.output_tput_per_gpu > a.output_tput_per_gpu);
        assert!(b.mean_tpot > a.mean_tpot);
    }

    #[test]
    fn a_sweep_line_gains_throughput_and_loses_per_user_speed_with_concurrency() {
        let line: Vec<Metrics> = [1, 2, 4, 8, 16, 32, 64, 128, 256]
            .iter()
            .map(|c| baseline_metrics("configs/x.yaml:k", &point(*c)))
            .collect();
        for w in line.windows(2) {
            assert!(w[1].output_tput_per_gpu > w[0].output_tput_per_gpu, "{w:?}");
            assert!(w[1].mean_ttft > w[0].mean_ttft * 0.9, "{w:?}");
        }
    }

    #[test]
    fn multipliers_scale_the_baseline() {
        let p = point(16);
        let b = baseline_metrics("f:k", &p);
        let same = run_metrics("f:k", &p, &Multipliers::default());
        assert_eq!(b, same);
        let m = Multipliers {
            throughput: 1.10,
            ttft: 0.5,
            ..Multipliers::default()
        };
        let r = run_metrics("f:k", &p, &m);
        let delta = (r.output_tput_per_gpu / b.output_tput_per_gpu - 1.0) * 100.0;
        assert!((delta - 10.0).abs() < 0.05, "{delta}");
        assert!((r.mean_ttft / b.mean_ttft - 0.5).abs() < 1e-3);
        assert_eq!(r.mean_tpot, b.mean_tpot);
    }

    #[test]
    fn runner_labels_map_to_api_hardware() {
        assert_eq!(hardware_of_runner("cluster:b200-dgxc"), "b200");
        assert_eq!(hardware_of_runner("mi355x"), "mi355x");
        assert_eq!(hardware_of_runner("h100_multinode"), "h100");
    }
}
