//! The jobs of a simulated run, named as GitHub names the jobs of the real
//! InferenceX workflows, and when each one finishes.
//!
//! GitHub names a job of a called (reusable) workflow `<caller name> /
//! <called job name>`. The callers in `e2e-tests.yml` and `run-sweep.yml`
//! (both fixture versions) are named `single-node /`, `multi-node /`,
//! `agentic /`, `multi-node agentic /`, `eval /`, `multi-node eval /`, and in
//! the sweep `single-node 8k1k /`, `multi-node 1k1k /`, ...; the called job
//! of `benchmark-tmpl.yml` / `benchmark-multinode-tmpl.yml` is
//! `p<priority> | <model-prefix> <precision> <runner> <framework> TP<tp>...
//! c<conc>` with ` | eval-only` on eval jobs. Bookkeeping jobs keep their ids
//! (`get-jobs`, `setup`, `collect-results`, ...).
//!
//! One benchmark job runs per point (single node) or per sweep line (multi
//! node), and uploads its own `bmk_*` artifact when it ends, as the
//! templates do; the run-level aggregates come from the collect jobs at the
//! end of the run.

use std::collections::BTreeMap;
use std::time::Duration;

use super::points::{FamilySpec, Point};
use super::results::{self, Uploads};
use super::script::{Conclusion, Multipliers, RunKind};

/// A job as planned: its name, when it ends (as a share of the run's
/// delay, 0 = at once, 1 = with the run), how, and what it uploads.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedJob {
    pub name: String,
    /// Ends after this share of the run's delay.
    pub at: f64,
    pub conclusion: String,
    /// Artifact names it uploads when it ends.
    pub artifacts: Vec<String>,
    /// What it prints (its log).
    pub log: String,
}

fn framework_short(f: &str) -> &str {
    match f {
        "sglang" => "sgl",
        "dynamo-sglang" => "dyn-sgl",
        "sglang-disagg" => "sgl-disagg",
        other => other,
    }
}

fn topology(p: &Point) -> String {
    let role = |tp: u64, ep: u64, dpa: bool| {
        let mut s = format!("TP{tp}");
        if ep > 1 {
            s.push_str(&format!("/EP{ep}"));
        }
        if dpa {
            s.push_str("/DPA");
        }
        s
    };
    match &p.prefill {
        Some(pre) => format!(
            "{}P ({}) x {}D ({})",
            pre.num_workers.max(1),
            role(pre.tp, pre.ep, pre.dp_attn),
            p.decode.num_workers.max(1),
            role(p.decode.tp, p.decode.ep, p.decode.dp_attn)
        ),
        None => role(p.decode.tp, p.decode.ep, p.decode.dp_attn),
    }
}

/// The called benchmark job's name for points of one job.
fn callee(f: &FamilySpec, first: &Point, concs: &[u64], eval: bool) -> String {
    let mut name = format!(
        "p1 | {} {} {} {} {}",
        f.model_prefix,
        f.precision,
        f.runner,
        framework_short(&f.framework),
        topology(first)
    );
    if first.spec_decoding != "none" {
        name.push(' ');
        name.push_str(&first.spec_decoding);
    }
    if first.kv_offloading != "none" {
        name.push_str(&format!(" {} KV offload", first.kv_offloading));
    }
    let concs: Vec<String> = concs.iter().map(u64::to_string).collect();
    name.push_str(&format!(" c{}", concs.join("x")));
    if eval {
        name.push_str(" | eval-only");
    }
    name
}

/// `1k1k`, `8k1k`: the sweep callers' sequence-length words.
fn seq_word(p: &Point) -> Option<String> {
    let k = |n: u64| {
        if n % 1024 == 0 {
            format!("{}k", n / 1024)
        } else {
            n.to_string()
        }
    };
    Some(format!("{}{}", k(p.isl?), k(p.osl?)))
}

fn caller(kind: RunKind, f: &FamilySpec, p: &Point, eval: bool) -> String {
    let node = if f.multinode {
        "multi-node"
    } else {
        "single-node"
    };
    match (eval, p.agentic(), f.multinode) {
        (true, true, true) => "multi-node agentic eval /".into(),
        (true, true, false) => "agentic eval /".into(),
        (true, false, true) => "multi-node eval /".into(),
        (true, false, false) => "eval /".into(),
        (false, true, true) => "multi-node agentic /".into(),
        (false, true, false) => "agentic /".into(),
        (false, false, _) => match (kind, seq_word(p)) {
            (RunKind::Sweep, Some(w)) => format!("{node} {w} /"),
            _ => format!("{node} /"),
        },
    }
}

/// The jobs of a run of `families` with `conclusion`, given the uploads
/// the run makes (`uploads`, by artifact name) and how many points of each
/// family produced a row (`ran`).
pub fn plan_jobs(
    kind: RunKind,
    families: &[(FamilySpec, String)],
    conclusion: Conclusion,
    multipliers: &Multipliers,
    ran: &[usize],
    uploads: &Uploads,
) -> Vec<PlannedJob> {
    let ok = |b: bool| if b { "success" } else { "failure" }.to_owned();
    let mut start = Vec::new();
    match kind {
        RunKind::Smoke => start.push(("get-jobs", Vec::new())),
        RunKind::Sweep => {
            start.push(("check-changelog", Vec::new()));
            // The manifest is written when the matrix is set up.
            let manifest: Vec<String> = uploads
                .keys()
                .filter(|k| k.as_str() == "klaud-sweep-manifest")
                .cloned()
                .collect();
            start.push(("setup", manifest));
        }
    }
    let mut middle: Vec<(String, bool, Vec<String>)> = Vec::new();
    for ((f, image), ran) in families.iter().zip(ran) {
        // Artifact name of every point that produced a row, by index.
        let rows = results::point_rows(f, image, multipliers, *ran);
        // One job per point, or per sweep line on multi node.
        let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        let mut order = Vec::new();
        for (i, p) in f.points.iter().enumerate() {
            let key = if f.multinode {
                p.shape_slug()
            } else {
                p.slug()
            };
            if !groups.contains_key(&key) {
                order.push(key.clone());
            }
            groups.entry(key).or_default().push(i);
        }
        for key in order {
            let idx = &groups[&key];
            let first = &f.points[idx[0]];
            let concs: Vec<u64> = idx.iter().map(|i| f.points[*i].conc).collect();
            let mut arts: Vec<String> = idx
                .iter()
                .filter_map(|i| rows.get(*i).map(|(name, _, _)| name.clone()))
                .collect();
            arts.dedup();
            // A green run whose artifacts lack points still shows its jobs
            // green: the rows went missing after the benchmark.
            let passed = conclusion == Conclusion::Success || idx.iter().all(|i| *i < *ran);
            middle.push((
                format!(
                    "{} / {}",
                    caller(kind, f, first, false),
                    callee(f, first, &concs, false)
                ),
                passed,
                arts,
            ));
        }
        if let Some((name, _)) = results::eval_artifact(f, image, multipliers)
            && let Some(p) = f.points.first()
        {
            let uploaded = uploads.contains_key(&name);
            middle.push((
                format!(
                    "{} / {}",
                    caller(kind, f, p, true),
                    callee(f, p, &[p.conc], true)
                ),
                uploaded || conclusion == Conclusion::Success,
                if uploaded { vec![name] } else { Vec::new() },
            ));
        }
    }
    let mut out: Vec<PlannedJob> = start
        .into_iter()
        .map(|(name, artifacts)| PlannedJob {
            name: name.to_owned(),
            at: 0.0,
            conclusion: "success".into(),
            artifacts,
            log: String::new(),
        })
        .collect();
    let n = middle.len() as f64;
    for (i, (name, passed, artifacts)) in middle.into_iter().enumerate() {
        out.push(PlannedJob {
            name,
            at: (i as f64 + 1.0) / (n + 1.0),
            conclusion: ok(passed),
            artifacts,
            log: String::new(),
        });
    }
    for name in [
        "collect-results / collect-results",
        "collect-evals / collect-evals",
    ] {
        out.push(PlannedJob {
            name: name.into(),
            at: 1.0,
            conclusion: "success".into(),
            artifacts: Vec::new(),
            log: String::new(),
        });
    }
    out
}

/// When a job planned at share `at` of `delay` ends.
pub fn due(delay: Duration, at: f64) -> Duration {
    delay.mul_f64(at.clamp(0.0, 1.0))
}
