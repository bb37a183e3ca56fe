//! The frozen baseline (see configs/README.md#baseline-readiness-lifecycle-require_baseline): the published results of a family's
//! current image, taken once from the InferenceX public API and frozen into
//! the PR body.
//!
//! The HTTP side is the [`BaselineSource`] trait (implemented by the binary);
//! everything else is pure: expanding a family's search space into points,
//! parsing the API answers and matching rows to points. A point without a
//! usable row is kept as N/A with the reason, never dropped.
//!
//! Results are published when a sweep runs, not daily, so the baseline is
//! asked "as of" the freezing day (no `exact=true`): the API answers, for
//! every point `(config, concurrency, isl, osl)`, its newest published row
//! at or before the day (InferenceX-app's `getLatestBenchmarks`: `DISTINCT
//! ON (config_id, conc, isl, osl) … ORDER BY … date DESC`). A partial
//! re-sweep therefore hides nothing: the points it did not run keep their
//! older rows. Each point is frozen with its own publication day, run and
//! producer run id; points of one family may come from different days and
//! runs.
//!
//! The API looks its `model` parameter up exactly, in a table of one display
//! name per model key (the master's `model-prefix`, which each row carries
//! back as `model`). The name is found, never derived from the master's
//! `model` path: a configured override (`[lifecycle.model_names]`, keyed by
//! model-prefix) first, else what the source finds
//! ([`BaselineSource::display_name`]). A prefix the API knows no name for is
//! its own readiness block ([`BASELINE_MODEL_UNKNOWN`]).

use crate::BoxFuture;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;

use async_trait::async_trait;
use chrono::NaiveDate;
use klaud_planner::image::ImageRef;
use klaud_planner::repo::{Family, MasterEntry};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::artifacts::PointMetrics;
use crate::model::shorten;

/// One answer of the baseline source: the URL asked and the body received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// The URL the body came from (shown in the PR as a source).
    pub url: String,
    /// The response body.
    pub body: String,
}

/// Why the baseline source could not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("baseline source {url}: {reason}")]
pub struct SourceError {
    /// The URL asked (no credentials: the API is public).
    pub url: String,
    /// What went wrong.
    pub reason: String,
}

/// Where published results come from: the InferenceX public API shape
/// (`/api/v1/benchmarks?model=<display name>&date=<date>` and
/// `/api/v1/workflow-info?date=<date>`).
#[async_trait]
pub trait BaselineSource: Send + Sync {
    /// Benchmark rows of `model` (display name) as published on or before
    /// `date`: the newest row of every point, each dated with its own
    /// publication day.
    async fn benchmarks(&self, model: &str, date: NaiveDate) -> Result<Fetched, SourceError>;
    /// The display name the API answers rows of the model prefix `prefix`
    /// for (`Ok(None)`: it knows none). The API matches names exactly, so
    /// a source reads them from the API; the default cannot, and says so.
    async fn display_name(&self, prefix: &str) -> Result<Option<String>, SourceError> {
        Err(SourceError {
            url: String::new(),
            reason: format!(
                "this baseline source cannot look up the display name of model-prefix {prefix:?}"
            ),
        })
    }
    /// Workflow runs, changelog entries and configs of `date`.
    async fn workflow_info(&self, date: NaiveDate) -> Result<Fetched, SourceError>;
    /// Every published eval result (`/api/v1/evaluations`: all models and
    /// days, the latest attempt of each run), or `None` when the source
    /// publishes no evals.
    async fn evaluations(&self) -> Result<Option<Fetched>, SourceError> {
        Ok(None)
    }
    /// Whether a results API stands behind this source. `false` (no API
    /// configured) turns the readiness gate off: there is nothing
    /// published to require.
    fn configured(&self) -> bool {
        true
    }
}

/// `<base>/api/v1/benchmarks?model=<model>&date=<date>`: the newest
/// publication of every point as of `date`. Never `exact=true`, which
/// answers only what was published on that very day and is empty on
/// almost every day a candidate is frozen.
pub fn benchmarks_url(base: &str, model: &str, date: NaiveDate) -> String {
    let model: String = url::form_urlencoded::byte_serialize(model.as_bytes()).collect();
    format!(
        "{}/api/v1/benchmarks?model={model}&date={date}",
        base.trim_end_matches('/')
    )
}

/// `<base>/api/v1/benchmarks?model=<model>`: the newest row of every
/// point, whatever the day. Asked once per display name to learn which
/// model prefix (the rows' `model`) the name stands for.
pub fn model_rows_url(base: &str, model: &str) -> String {
    let model: String = url::form_urlencoded::byte_serialize(model.as_bytes()).collect();
    format!(
        "{}/api/v1/benchmarks?model={model}",
        base.trim_end_matches('/')
    )
}

/// The producer run id of a published row's `run_url`
/// (`…/actions/runs/<id>` or `…/actions/runs/<id>/attempts/<n>`).
pub fn run_id_of_url(run_url: &str) -> Option<u64> {
    let (_, rest) = run_url.split_once("/actions/runs/")?;
    rest.split(['/', '?', '#']).next()?.parse().ok()
}

/// `<base>/api/v1/workflow-info?date=<date>`.
pub fn workflow_info_url(base: &str, date: NaiveDate) -> String {
    format!(
        "{}/api/v1/workflow-info?date={date}",
        base.trim_end_matches('/')
    )
}

/// `<base>/api/v1/evaluations`: every published eval result.
pub fn evaluations_url(base: &str) -> String {
    format!("{}/api/v1/evaluations", base.trim_end_matches('/'))
}

/// Why a baseline could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BaselineError {
    /// The source failed.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// An answer is not JSON of the expected shape.
    #[error("baseline source {url}: {reason}")]
    Response {
        /// The URL.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// One row of an answer is malformed.
    #[error("baseline source {url}, row {index}: {reason}")]
    Row {
        /// The URL.
        url: String,
        /// Row index, from 0.
        index: usize,
        /// What is wrong (names the field).
        reason: String,
    },
    /// The family's search space cannot be expanded into points.
    #[error("family {family}: {reason}")]
    SearchSpace {
        /// The family.
        family: String,
        /// What is wrong, with its location.
        reason: String,
    },
}

/// What every point of a family shares, in the API's vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FamilyKey {
    /// Hardware as the API names it (`b200`, `mi355x`).
    pub hardware: String,
    /// Engine (`sglang`, `vllm`, …).
    pub framework: String,
    /// Model prefix (`dsr1`).
    pub model_prefix: String,
    /// Precision (`fp4`).
    pub precision: String,
}

impl FamilyKey {
    /// The key of a family, with its hardware derived by [`hardware_of_runner`].
    pub fn of(family: &Family) -> Self {
        Self {
            hardware: hardware_of_runner(&family.entry.runner),
            framework: family.entry.framework.to_ascii_lowercase(),
            model_prefix: family.entry.model_prefix.clone(),
            precision: family.entry.precision.to_ascii_lowercase(),
        }
    }
}

/// The API's hardware name for a runner label: `cluster:b200-dgxc` → `b200`,
/// `h100-multinode` → `h100`, `mi355x` → `mi355x`. Runner labels name a GPU
/// followed by a pool suffix; the API keeps only the GPU.
pub fn hardware_of_runner(runner: &str) -> String {
    let runner = runner.strip_prefix("cluster:").unwrap_or(runner);
    runner
        .split(['-', '_'])
        .next()
        .unwrap_or(runner)
        .to_ascii_lowercase()
}

/// Fixed sequence lengths or AgentX traces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Scenario {
    /// `fixed-seq-len` with its lengths.
    FixedSeqLen {
        /// Input sequence length.
        isl: u64,
        /// Output sequence length.
        osl: u64,
    },
    /// `agentic-coding`.
    Agentic,
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scenario::FixedSeqLen { isl, osl } => {
                write!(f, "{}{}", short_len(*isl), short_len(*osl))
            }
            Scenario::Agentic => f.write_str("AgentX"),
        }
    }
}

/// `8192` → `8k`, `1000` → `1000`.
fn short_len(n: u64) -> String {
    if n >= 1024 && n % 1024 == 0 {
        format!("{}k", n / 1024)
    } else {
        n.to_string()
    }
}

/// Parallelism of one role (the whole server, or prefill / decode workers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Workers {
    /// Worker count (disaggregated roles only).
    pub num_workers: Option<u64>,
    /// Tensor parallelism.
    pub tp: u64,
    /// Expert parallelism.
    pub ep: u64,
    /// Data-parallel attention.
    pub dp_attn: bool,
}

/// One benchmark point a family runs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PointSpec {
    /// Scenario.
    pub scenario: Scenario,
    /// Concurrency.
    pub conc: u64,
    /// Speculative decoding (`none` when not set).
    pub spec_decoding: String,
    /// KV-cache offloading, `<mode>` or `<mode>/<backend>` (`dram/hicache`);
    /// `None` when off. Families run the same topology with and without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_offload: Option<String>,
    /// The server (single node) or the decode workers (disaggregated).
    pub decode: Workers,
    /// The prefill workers of a disaggregated point.
    pub prefill: Option<Workers>,
}

impl PointSpec {
    /// The topology part of the label: `TP4 EP4 DPA`, or for disaggregated
    /// points prefill/decode as TP × workers, `PTP1x3/DTP4x4`, with EP and
    /// DPA in parentheses when used: `P(TP8 EP8 DPA)x1/DTP8x2`.
    pub fn topology(&self) -> String {
        fn parallelism(w: &Workers) -> String {
            let mut s = format!("TP{}", w.tp);
            if w.ep > 1 {
                s.push_str(&format!(" EP{}", w.ep));
            }
            if w.dp_attn {
                s.push_str(" DPA");
            }
            s
        }
        fn role(prefix: char, w: &Workers) -> String {
            let n = w.num_workers.unwrap_or(1);
            if w.ep > 1 || w.dp_attn {
                format!("{prefix}({})x{n}", parallelism(w))
            } else {
                format!("{prefix}TP{}x{n}", w.tp)
            }
        }
        match &self.prefill {
            None => parallelism(&self.decode),
            Some(prefill) => format!("{}/{}", role('P', prefill), role('D', &self.decode)),
        }
    }

    /// A short unique label, e.g. `8k1k c64 TP4 EP4 DPA MTP` or
    /// `AgentX c565 PTP1x3/DTP4x4`.
    pub fn label(&self) -> String {
        let mut s = format!("{} c{} {}", self.scenario, self.conc, self.topology());
        if self.spec_decoding != "none" {
            s.push(' ');
            s.push_str(&self.spec_decoding.to_ascii_uppercase());
        }
        if let Some(kv) = &self.kv_offload {
            s.push_str(" KV ");
            s.push_str(kv);
        }
        s
    }
}

pub use klaud_planner::search_space::{MAX_POINTS, concurrencies};

/// Expands a master entry's `scenarios` into points, in config order and
/// without duplicates. `conc-start`/`conc-end` doubles from start to end, as
/// the InferenceX sweep generator does; `conc-list` is taken as written.
pub fn family_points(family: &str, entry: &MasterEntry) -> Result<Vec<PointSpec>, BaselineError> {
    scenario_points(family, &entry.scenarios)
}

/// Expands `scenarios` (a master entry's, or a selection of them) into
/// points, as [`family_points`] does.
pub fn scenario_points(
    family: &str,
    scenarios: &std::collections::BTreeMap<String, Value>,
) -> Result<Vec<PointSpec>, BaselineError> {
    let fail = |reason: String| BaselineError::SearchSpace {
        family: family.to_owned(),
        reason,
    };
    let mut points = Vec::new();
    let mut seen = HashSet::new();
    for (name, value) in scenarios {
        let agentic = match name.as_str() {
            "fixed-seq-len" => false,
            "agentic-coding" => true,
            // Scenarios Klaud does not know are not compared, not an error.
            _ => continue,
        };
        let blocks = value
            .as_array()
            .ok_or_else(|| fail(format!("scenarios.{name} is not a list")))?;
        for (bi, block) in blocks.iter().enumerate() {
            let at = format!("scenarios.{name}[{bi}]");
            let scenario = if agentic {
                Scenario::Agentic
            } else {
                Scenario::FixedSeqLen {
                    isl: uint(block, "isl").ok_or_else(|| fail(format!("{at}.isl is missing")))?,
                    osl: uint(block, "osl").ok_or_else(|| fail(format!("{at}.osl is missing")))?,
                }
            };
            let spaces = block
                .get("search-space")
                .and_then(Value::as_array)
                .ok_or_else(|| fail(format!("{at}.search-space is not a list")))?;
            for (si, space) in spaces.iter().enumerate() {
                let at = format!("{at}.search-space[{si}]");
                let concs = concurrencies(space).map_err(|r| fail(format!("{at}: {r}")))?;
                let spec_decoding = text(space, "spec-decoding").unwrap_or_else(|| "none".into());
                let kv_offload = kv_offload(space);
                let (decode, prefill) = match (space.get("prefill"), space.get("decode")) {
                    (Some(p), Some(d)) => (
                        workers(d, true).map_err(|r| fail(format!("{at}.decode: {r}")))?,
                        Some(workers(p, true).map_err(|r| fail(format!("{at}.prefill: {r}")))?),
                    ),
                    (None, None) => (
                        workers(space, false).map_err(|r| fail(format!("{at}: {r}")))?,
                        None,
                    ),
                    _ => return Err(fail(format!("{at}: prefill and decode must come together"))),
                };
                for conc in concs {
                    let point = PointSpec {
                        scenario,
                        conc,
                        spec_decoding: spec_decoding.clone(),
                        kv_offload: kv_offload.clone(),
                        decode,
                        prefill,
                    };
                    if seen.insert(point.clone()) {
                        points.push(point);
                        if points.len() > MAX_POINTS {
                            return Err(fail(format!("more than {MAX_POINTS} points")));
                        }
                    }
                }
            }
        }
    }
    Ok(points)
}

fn kv_offload(space: &Value) -> Option<String> {
    let mode = text(space, "kv-offloading").filter(|m| m != "none" && !m.is_empty())?;
    match space
        .get("kv-offload-backend")
        .and_then(|b| b.get("name"))
        .and_then(Value::as_str)
    {
        Some(backend) => Some(format!("{mode}/{backend}")),
        None => Some(mode),
    }
}

fn uint(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

fn text(v: &Value, key: &str) -> Option<String> {
    match v.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn workers(v: &Value, role: bool) -> Result<Workers, String> {
    let tp = uint(v, "tp").ok_or("tp is missing or not a positive integer")?;
    let ep = match v.get("ep") {
        None | Some(Value::Null) => 1,
        Some(e) => e.as_u64().ok_or("ep is not an integer")?,
    };
    let dp_attn = match v.get("dp-attn") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err("dp-attn is not true or false".into()),
    };
    let num_workers = if role {
        Some(uint(v, "num-worker").unwrap_or(1))
    } else {
        None
    };
    Ok(Workers {
        num_workers,
        tp,
        ep,
        dp_attn,
    })
}

/// One row of `/api/v1/benchmarks`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiBenchmarkRow {
    /// Hardware (`mi355x`).
    pub hardware: String,
    /// Engine.
    pub framework: String,
    /// Model prefix (`dsr1`).
    pub model: String,
    /// Precision.
    pub precision: String,
    /// Speculative decoding (`none`, `mtp`).
    #[serde(default)]
    pub spec_method: Option<String>,
    /// Disaggregated.
    #[serde(default)]
    pub disagg: Option<bool>,
    /// Multi-node.
    #[serde(default)]
    pub is_multinode: Option<bool>,
    /// Prefill TP.
    #[serde(default)]
    pub prefill_tp: Option<u64>,
    /// Prefill EP.
    #[serde(default)]
    pub prefill_ep: Option<u64>,
    /// Prefill DP attention.
    #[serde(default)]
    pub prefill_dp_attention: Option<bool>,
    /// Prefill workers (0 when not disaggregated).
    #[serde(default)]
    pub prefill_num_workers: Option<u64>,
    /// Decode TP.
    #[serde(default)]
    pub decode_tp: Option<u64>,
    /// Decode EP.
    #[serde(default)]
    pub decode_ep: Option<u64>,
    /// Decode DP attention.
    #[serde(default)]
    pub decode_dp_attention: Option<bool>,
    /// Decode workers (0 when not disaggregated).
    #[serde(default)]
    pub decode_num_workers: Option<u64>,
    /// Input sequence length (absent for AgentX).
    #[serde(default)]
    pub isl: Option<u64>,
    /// Output sequence length (absent for AgentX).
    #[serde(default)]
    pub osl: Option<u64>,
    /// Concurrency.
    pub conc: u64,
    /// Image, when recorded.
    #[serde(default)]
    pub image: Option<String>,
    /// Metrics, seconds for latencies.
    #[serde(default)]
    pub metrics: serde_json::Map<String, Value>,
    /// Publication date.
    #[serde(default)]
    pub date: Option<String>,
    /// The run that produced it.
    #[serde(default)]
    pub run_url: Option<String>,
}

/// `/api/v1/workflow-info`: only the parts the baseline uses.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkflowInfo {
    /// Runs of the day.
    #[serde(default)]
    pub runs: Vec<Value>,
    /// Changelog entries of the day.
    #[serde(default)]
    pub changelogs: Vec<Value>,
    /// Configurations benchmarked that day.
    #[serde(default)]
    pub configs: Vec<WorkflowConfig>,
}

/// A configuration benchmarked on a day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowConfig {
    /// Model prefix.
    pub model: String,
    /// Input sequence length.
    #[serde(default)]
    pub isl: Option<u64>,
    /// Output sequence length.
    #[serde(default)]
    pub osl: Option<u64>,
    /// Precision.
    pub precision: String,
    /// Hardware.
    pub hardware: String,
    /// Engine.
    pub framework: String,
    /// Speculative decoding.
    #[serde(default)]
    pub spec_method: Option<String>,
    /// Disaggregated.
    #[serde(default)]
    pub disagg: Option<bool>,
}

/// Parses a `/api/v1/benchmarks` answer.
pub fn parse_benchmarks(fetched: &Fetched) -> Result<Vec<ApiBenchmarkRow>, BaselineError> {
    json_rows(fetched, "rows")?
        .into_iter()
        .enumerate()
        .map(|(index, row)| {
            serde_json::from_value(row).map_err(|e| BaselineError::Row {
                url: fetched.url.clone(),
                index,
                reason: e.to_string(),
            })
        })
        .collect()
}

/// The list of JSON rows an answer of the results API is, or why not.
fn json_rows(fetched: &Fetched, what: &str) -> Result<Vec<Value>, BaselineError> {
    let value: Value =
        serde_json::from_str(&fetched.body).map_err(|e| BaselineError::Response {
            url: fetched.url.clone(),
            reason: format!("not valid JSON: {e}"),
        })?;
    match value {
        Value::Array(rows) => Ok(rows),
        _ => Err(BaselineError::Response {
            url: fetched.url.clone(),
            reason: format!("expected a list of {what}"),
        }),
    }
}

/// Parses a `/api/v1/workflow-info` answer.
pub fn parse_workflow_info(fetched: &Fetched) -> Result<WorkflowInfo, BaselineError> {
    let fail = |reason: String| BaselineError::Response {
        url: fetched.url.clone(),
        reason,
    };
    let value: Value =
        serde_json::from_str(&fetched.body).map_err(|e| fail(format!("not valid JSON: {e}")))?;
    // Derived deserializers also accept a list in field order; the API
    // answers an object, and anything else is a wrong endpoint.
    if !value.is_object() {
        return Err(fail("expected a workflow-info object".into()));
    }
    serde_json::from_value(value).map_err(|e| fail(format!("not a workflow-info object: {e}")))
}

/// The frozen baseline of one PR.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    /// The day the baseline was asked as of (the freezing day). Each
    /// measured point carries its own publication day
    /// ([`BaselineValue::Measured`]); records frozen before points did
    /// were asked for this exact day, which is then their publication day.
    pub date: NaiveDate,
    /// The family's current image (what the baseline measures).
    pub image: String,
    /// Model display name asked (empty when none was found).
    pub model: String,
    /// The model prefix the results API knows no display name for, when
    /// that is why nothing was asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown_model: Option<String>,
    /// The URLs the data came from.
    pub source_urls: Vec<String>,
    /// One entry per family point, in family order.
    pub points: Vec<BaselinePoint>,
    /// The published eval scores of the current image: those produced by
    /// the runs the measured points come from (an eval row names no image;
    /// its run does).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evals: Vec<FrozenEval>,
    /// Why no published eval could be frozen, when the evals were asked
    /// for and none were found (`None`: not asked, or found).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evals_unavailable: Option<String>,
    /// The AgentX dataset of each producer run the measured AgentX points
    /// come from ([`crate::dataset::attach_datasets`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agentx_datasets: Vec<crate::dataset::record::FrozenDataset>,
}

/// One published eval score frozen with the baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrozenEval {
    /// Task (`gsm8k`).
    pub task: String,
    /// Which metric `score` is (`em_strict`, …), as the artifacts name it.
    pub score_name: String,
    /// Score in `[0, 1]`.
    pub score: f64,
    /// Concurrency the eval ran at.
    pub conc: Option<u64>,
    /// Effective sample count, when published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<u64>,
    /// The decode (or whole-server) parallelism it ran with.
    pub decode: Workers,
    /// The day it was published.
    pub published: Option<NaiveDate>,
    /// The producer run's address.
    pub run_url: Option<String>,
}

/// A point's baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselinePoint {
    /// Short label, e.g. `8k1k c64 TP4`.
    pub label: String,
    /// The point.
    pub point: PointSpec,
    /// The published numbers, or why there are none.
    pub value: BaselineValue,
}

/// Published numbers, or why there are none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum BaselineValue {
    /// Numbers from a published row.
    Measured {
        /// The metrics (latencies in seconds).
        metrics: PointMetrics,
        /// The run that produced them.
        run_url: Option<String>,
        /// The day the row was published (absent in records frozen before
        /// points carried it: [`Baseline::date`] then).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        published: Option<NaiveDate>,
        /// The producer run id, read from `run_url`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        run_id: Option<u64>,
    },
    /// N/A.
    Unavailable {
        /// Why.
        reason: String,
    },
}

/// One producer run a frozen baseline takes points from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publication {
    /// The day its rows were published.
    pub date: NaiveDate,
    /// The producer run id, when the rows name their run.
    pub run_id: Option<u64>,
    /// The run's address (`…/actions/runs/<id>/attempts/<n>`).
    pub run_url: Option<String>,
    /// How many of the family's points it gave.
    pub points: usize,
}

impl Baseline {
    /// The publications the measured points come from, oldest first
    /// (then by run id): what the PR body names as the baseline's source.
    pub fn publications(&self) -> Vec<Publication> {
        let mut out: Vec<Publication> = Vec::new();
        for p in &self.points {
            let BaselineValue::Measured {
                run_url,
                published,
                run_id,
                ..
            } = &p.value
            else {
                continue;
            };
            let date = published.unwrap_or(self.date);
            let run_id = run_id.or_else(|| run_url.as_deref().and_then(run_id_of_url));
            match out
                .iter_mut()
                .find(|x| x.date == date && x.run_id == run_id)
            {
                Some(x) => x.points += 1,
                None => out.push(Publication {
                    date,
                    run_id,
                    run_url: run_url.clone(),
                    points: 1,
                }),
            }
        }
        out.sort_by_key(|x| (x.date, x.run_id));
        out
    }
}

impl BaselinePoint {
    /// The metrics, when measured.
    pub fn metrics(&self) -> Option<&PointMetrics> {
        match &self.value {
            BaselineValue::Measured { metrics, .. } => Some(metrics),
            BaselineValue::Unavailable { .. } => None,
        }
    }
}

/// The reason code of a family whose published baseline cannot be found at
/// all (the source failed, or no point has published numbers).
pub const BASELINE_UNAVAILABLE: &str = "baseline-unavailable";
/// The reason code of a published baseline that lacks some of the family's
/// points.
pub const BASELINE_INCOMPLETE: &str = "baseline-incomplete";
/// The reason code of a family whose model prefix the results API knows no
/// display name for (and none is configured): nothing can be asked.
pub const BASELINE_MODEL_UNKNOWN: &str = "baseline-model-unknown";

/// What a maintainer sets when the results API knows no name for `prefix`.
fn model_unknown_words(prefix: &str) -> String {
    format!(
        "the results API knows no display name for model-prefix {prefix:?} (none of the names \
         its OpenAPI description lists answers with rows of it); set [lifecycle.model_names] \
         \"{prefix}\" = \"<display name>\""
    )
}

/// Why a frozen baseline does not make the candidate ready (`None`: every
/// point has published numbers). The text starts with the reason code
/// ([`BASELINE_MODEL_UNKNOWN`], [`BASELINE_UNAVAILABLE`] or
/// [`BASELINE_INCOMPLETE`]) and names the missing points with their reasons.
pub fn readiness_gap(baseline: &Baseline) -> Option<String> {
    if let Some(prefix) = &baseline.unknown_model {
        return Some(format!(
            "{BASELINE_MODEL_UNKNOWN}: {}",
            model_unknown_words(prefix)
        ));
    }
    let missing: Vec<String> = baseline
        .points
        .iter()
        .filter_map(|p| match &p.value {
            BaselineValue::Measured { .. } => None,
            BaselineValue::Unavailable { reason } => Some(format!("{} ({reason})", p.label)),
        })
        .collect();
    if baseline.points.is_empty() {
        return Some(format!(
            "{BASELINE_UNAVAILABLE}: no published baseline of {} as of {}: the family has no points to compare",
            baseline.image, baseline.date
        ));
    }
    if missing.is_empty() {
        return None;
    }
    let total = baseline.points.len();
    // At most a handful named; the frozen table in the PR body has them all.
    const NAMED: usize = 8;
    let mut named = missing
        .iter()
        .take(NAMED)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if missing.len() > NAMED {
        named.push_str(&format!("; and {} more", missing.len() - NAMED));
    }
    Some(if missing.len() == total {
        format!(
            "{BASELINE_UNAVAILABLE}: no published baseline of {} as of {} for any of the family's {total} points: {named}",
            baseline.image, baseline.date
        )
    } else {
        format!(
            "{BASELINE_INCOMPLETE}: the published baseline of {} as of {} lacks {} of the family's {total} points: {named}",
            baseline.image,
            baseline.date,
            missing.len()
        )
    })
}

/// What to freeze.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaselineRequest {
    /// Model display name, as the API wants it (`Qwen-3.5-397B-A17B`).
    pub model: String,
    /// The day to ask as of (the freezing day): the newest publication of
    /// every point on or before it.
    pub date: NaiveDate,
    /// The family's current image.
    pub image: String,
    /// Shared point attributes.
    pub key: FamilyKey,
    /// The points, from [`family_points`].
    pub points: Vec<PointSpec>,
}

/// The display name the results API knows `family`'s model prefix by:
/// the configured override (`model_names`, keyed by model-prefix), else
/// what `source` finds. `Ok(None)`: the API knows no name for it.
pub fn model_name_of<'f>(
    source: &'f dyn BaselineSource,
    family: &'f Family,
    model_names: &'f BTreeMap<String, String>,
) -> BoxFuture<'f, Result<Option<String>, SourceError>> {
    Box::pin(async move {
        let prefix = &family.entry.model_prefix;
        match model_names.get(prefix) {
            Some(name) => Ok(Some(name.clone())),
            None => source.display_name(prefix).await,
        }
    })
}

/// The baseline of `family`'s image `old_image` as published on or before
/// `date`: every point, N/A with the reason where there is none, the
/// source failing and an unknown display name included (never an error:
/// the caller decides what a gap means).
pub fn baseline_of<'f>(
    source: &'f dyn BaselineSource,
    family: &'f Family,
    model_names: &'f BTreeMap<String, String>,
    old_image: &'f str,
    date: NaiveDate,
) -> BoxFuture<'f, Baseline> {
    Box::pin(async move {
        let points = family_points(&family.family, &family.entry);
        let (model, unknown_model, reason) = match model_name_of(source, family, model_names).await
        {
            Ok(Some(name)) => (name, None, None),
            Ok(None) => {
                let prefix = family.entry.model_prefix.clone();
                let reason = model_unknown_words(&prefix);
                (String::new(), Some(prefix), Some(reason))
            }
            Err(e) => (String::new(), None, Some(e.to_string())),
        };
        let (points, reason) = match (points, reason) {
            (Err(e), _) => (Vec::new(), e.to_string()),
            (Ok(points), Some(reason)) => (points, reason),
            (Ok(points), None) => {
                let request = BaselineRequest {
                    model: model.clone(),
                    date,
                    image: old_image.to_owned(),
                    key: FamilyKey::of(family),
                    points,
                };
                match freeze(source, &request).await {
                    Ok(b) => return b,
                    Err(e) => (request.points, e.to_string()),
                }
            }
        };
        Baseline {
            date,
            image: old_image.to_owned(),
            model,
            unknown_model,
            source_urls: Vec::new(),
            evals: Vec::new(),
            evals_unavailable: None,
            agentx_datasets: Vec::new(),
            points: points
                .into_iter()
                .map(|p| BaselinePoint {
                    label: p.label(),
                    point: p,
                    value: BaselineValue::Unavailable {
                        reason: format!("no baseline: {reason}"),
                    },
                })
                .collect(),
        }
    })
}

/// Asks `source` and freezes the baseline. Only the benchmarks route is
/// asked: the as-of answer holds every point's newest row whatever day it
/// was published, which `workflow-info` (one day's runs) could not tell.
pub fn freeze<'f>(
    source: &'f dyn BaselineSource,
    request: &'f BaselineRequest,
) -> BoxFuture<'f, Result<Baseline, BaselineError>> {
    Box::pin(async move {
        let benchmarks = source.benchmarks(&request.model, request.date).await?;
        build_baseline(request, &benchmarks)
    })
}

/// Matches the API's as-of answer to the request's points.
pub fn build_baseline(
    request: &BaselineRequest,
    benchmarks: &Fetched,
) -> Result<Baseline, BaselineError> {
    let rows = parse_benchmarks(benchmarks)?;
    let current = ImageRef::parse(&request.image).ok();
    let points = request
        .points
        .iter()
        .map(|point| BaselinePoint {
            label: point.label(),
            point: point.clone(),
            value: match_point(request, current.as_ref(), point, &rows),
        })
        .collect();
    Ok(Baseline {
        date: request.date,
        image: request.image.clone(),
        model: request.model.clone(),
        unknown_model: None,
        source_urls: vec![benchmarks.url.clone()],
        evals: Vec::new(),
        evals_unavailable: None,
        agentx_datasets: Vec::new(),
        points,
    })
}

fn eq_ci(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

/// Whether a stated row value agrees with the point; unstated agrees.
fn agrees<T: PartialEq>(stated: Option<T>, wanted: T) -> bool {
    stated.is_none_or(|s| s == wanted)
}

/// Whether `row` is on the point's line: the same config, scenario and
/// topology, any concurrency (the API's selection unit).
fn row_on_line(key: &FamilyKey, point: &PointSpec, row: &ApiBenchmarkRow) -> bool {
    if !(eq_ci(&row.hardware, &key.hardware)
        && eq_ci(&row.framework, &key.framework)
        && eq_ci(&row.model, &key.model_prefix)
        && eq_ci(&row.precision, &key.precision))
    {
        return false;
    }
    let scenario_ok = match point.scenario {
        Scenario::FixedSeqLen { isl, osl } => row.isl == Some(isl) && row.osl == Some(osl),
        Scenario::Agentic => row.isl.is_none() && row.osl.is_none(),
    };
    let spec_ok = row
        .spec_method
        .as_deref()
        .is_none_or(|s| eq_ci(s, &point.spec_decoding));
    let disagg = point.prefill.is_some();
    // Single-node rows repeat the server's parallelism as prefill and decode.
    let prefill = point.prefill.unwrap_or(point.decode);
    let workers_ok = |stated: Option<u64>, wanted: Option<u64>| match wanted {
        Some(w) => agrees(stated, w),
        None => stated.is_none_or(|s| s == 0),
    };
    scenario_ok
        && spec_ok
        && agrees(row.disagg, disagg)
        && agrees(row.decode_tp, point.decode.tp)
        && agrees(row.decode_ep, point.decode.ep)
        && agrees(row.decode_dp_attention, point.decode.dp_attn)
        && agrees(row.prefill_tp, prefill.tp)
        && agrees(row.prefill_ep, prefill.ep)
        && agrees(row.prefill_dp_attention, prefill.dp_attn)
        && workers_ok(row.decode_num_workers, point.decode.num_workers)
        && workers_ok(
            row.prefill_num_workers,
            point.prefill.and_then(|p| p.num_workers),
        )
}

fn same_image(current: Option<&ImageRef>, written: &str, row_image: &str) -> bool {
    match (current, ImageRef::parse(row_image)) {
        (Some(current), Ok(row)) => current.same_image(&row),
        _ => written == row_image,
    }
}

/// A row's publication day, when it states a valid one.
fn row_date(row: &ApiBenchmarkRow) -> Option<NaiveDate> {
    row.date
        .as_deref()
        .and_then(|d| NaiveDate::parse_from_str(d, "%Y-%m-%d").ok())
}

fn row_run_id(row: &ApiBenchmarkRow) -> Option<u64> {
    row.run_url.as_deref().and_then(run_id_of_url)
}

/// `run 34896669482 on 2026-09-15`, as far as the row says.
fn publication_words(row: &ApiBenchmarkRow) -> String {
    let day = row
        .date
        .as_deref()
        .map_or_else(|| "an unstated day".to_owned(), str::to_owned);
    match row_run_id(row) {
        Some(id) => format!("run {id} on {day}"),
        None => format!("a run on {day}"),
    }
}

fn match_point(
    request: &BaselineRequest,
    current: Option<&ImageRef>,
    point: &PointSpec,
    rows: &[ApiBenchmarkRow],
) -> BaselineValue {
    let is_current = |r: &ApiBenchmarkRow| {
        r.image
            .as_deref()
            .is_some_and(|i| same_image(current, &request.image, i))
    };
    let newest = |r: &&ApiBenchmarkRow| (row_date(r), row_run_id(r));
    let on_line: Vec<&ApiBenchmarkRow> = rows
        .iter()
        .filter(|row| row_on_line(&request.key, point, row))
        .collect();
    // The API answers one row per point (its newest at or before the day,
    // whichever run published it), unless two configs look the same to it
    // (master keys that differ only in fields the rows do not carry, like
    // a recipe): then the row of the family's own image is the family's,
    // and another image is N/A only when no row ran this one. A row that
    // records no image is an older publication and counts as this image's.
    let mine = |r: &ApiBenchmarkRow| r.image.is_none() || is_current(r);
    let at_conc = || on_line.iter().copied().filter(|r| r.conc == point.conc);
    let chosen = at_conc()
        .filter(|r| mine(r))
        .max_by_key(newest)
        .or_else(|| at_conc().max_by_key(newest));
    let Some(row) = chosen else {
        // The API answers every point ever published up to the day, so a
        // point without a row was never published; its line's newest row
        // says where the family's other numbers come from.
        let reason = match on_line.iter().copied().max_by_key(newest) {
            Some(latest) => format!(
                "not published as of {} (its line's newest row: {})",
                request.date,
                publication_words(latest)
            ),
            None => format!("not published as of {}", request.date),
        };
        return BaselineValue::Unavailable { reason };
    };
    if let Some(other) = row.image.as_deref().filter(|_| !mine(row)) {
        return BaselineValue::Unavailable {
            reason: format!(
                "published result ran another image ({})",
                shorten(other, 120)
            ),
        };
    }
    let metric = |name: &str| {
        row.metrics
            .get(name)
            .and_then(Value::as_f64)
            .filter(|f| f.is_finite())
    };
    let names = [
        "tput_per_gpu",
        "output_tput_per_gpu",
        "mean_ttft",
        "mean_tpot",
    ];
    let values: Vec<Option<f64>> = names.iter().map(|n| metric(n)).collect();
    match values.as_slice() {
        [Some(t), Some(o), Some(ttft), Some(tpot)] => BaselineValue::Measured {
            metrics: PointMetrics {
                tput_per_gpu: *t,
                output_tput_per_gpu: *o,
                mean_ttft: *ttft,
                mean_tpot: *tpot,
            },
            run_url: row.run_url.clone(),
            published: row_date(row),
            run_id: row_run_id(row),
        },
        _ => {
            let missing: Vec<&str> = names
                .iter()
                .zip(&values)
                .filter(|(_, v)| v.is_none())
                .map(|(n, _)| *n)
                .collect();
            BaselineValue::Unavailable {
                reason: format!("published result lacks {}", missing.join(", ")),
            }
        }
    }
}

mod evals;

pub use evals::{ApiEvalRow, EVAL_SCORE_FIELDS, attach_evals, freeze_evals, parse_evaluations};

#[cfg(test)]
mod tests;
