//! The regression hunt: when a candidate's new image fails for a
//! reason that is neither infrastructure nor explained by the flag audit, or
//! one point is worse than the frozen baseline beyond its noise band, find
//! the first nightly of the track that did it by a binary search over the
//! tags strictly between the old and the new image.
//!
//! This module is the pure core, free of I/O:
//!
//! - a [`HuntPlan`]: the ordered tags between the two images as the
//!   registry served them when the hunt began (each pinned by digest, or
//!   marked no longer served), what is measured (a point and metric against
//!   the baseline, or the failing job's outcome), the per-hunt budget;
//! - [`Hunt`]: the plan and the [`StepRecord`]s so far; [`Hunt::next`] says
//!   which tag to try next or the [`HuntResult`] (last good and first bad,
//!   or the narrowest range established when the budget ran out, tags were
//!   gone or a maintainer stopped it);
//! - which tags it searches ([`tags_between`]: the old image's track in
//!   its own order, with digests and upstream commits);
//! - the judgement of one step's value against the baseline and its noise
//!   band ([`judge`], [`noise_band`]).
//!
//! Every record is published on the PR as a hidden-marker comment
//! (`klaud-hunt:<owner run>:<candidate>:h<n>-plan|h<n>-step-<k>|h<n>-end`,
//! [`crate::report::markers`]), so [`Hunt::from_comments`] rebuilds the
//! state from GitHub alone. The choice of the next tag depends only on the
//! plan and the steps recorded, so a restart after a crash at step k picks
//! the same tag under the same step number: a run dispatched before the
//! crash is found by that name instead of being dispatched again, and a
//! recorded step is never run again.
//!
//! A hunt never changes what the candidate concluded: it only adds its own
//! records and reports.

mod report;
pub(crate) mod tags;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::{CandidateId, shorten};
use crate::report::markers::{
    HiddenRecord, HuntName, MarkerError, MarkerKey, find_record, hidden_block, hidden_json,
    parse_json,
};

pub use report::{StepCommit, engine_commits, render_end, render_plan, render_step, result_lines};
pub use tags::{
    HuntRange, HuntRangeError, HuntTags, RegistryHuntTags, ServedTag, hunt_tag, tags_between,
};

/// Runs a hunt may use unless configured otherwise.
pub const DEFAULT_BUDGET: u32 = 4;
/// Hunt runs a repository may use in seven days unless configured otherwise.
pub const DEFAULT_WEEKLY_BUDGET: u32 = 12;
/// The relative noise band of a point without published history, unless
/// configured otherwise.
pub const DEFAULT_NOISE_BAND: f64 = 0.05;
/// The narrowest band history may give a point: identical published
/// results do not make a 0.1% change a regression.
pub const MIN_NOISE_BAND: f64 = 0.01;
/// Most runs one hunt may be given: 2^16 tags would need only 16.
pub const MAX_BUDGET: u32 = 16;
/// Most tags one plan holds; its hidden record must fit one comment
/// (a tag, its digest and commit are under ~260 bytes).
pub const MAX_TAGS: usize = 128;
/// Longest tag name accepted (the OCI limit).
pub const MAX_TAG_CHARS: usize = 128;
/// Most steps one hunt records; more than its budget allows can only come
/// from records that are not Klaud's.
pub const MAX_STEPS: usize = 64;
/// Infrastructure failures at one tag before the hunt skips it.
pub const MAX_INFRA_PER_TAG: usize = 2;
/// The record format.
pub const PLAN_VERSION: u32 = 1;

/// `[hunt]`: whether and where hunts run, and their budgets.
#[derive(Debug, Clone, PartialEq)]
pub struct HuntSettings {
    /// Off by default: a hunt spends GPU runs nobody asked for.
    pub enabled: bool,
    /// Family patterns (`*` wildcard; with a `:` against the whole family
    /// `configs/<file>:<key>`, else against the key).
    pub families: Vec<String>,
    /// Runs per hunt.
    pub budget: u32,
    /// Hunt runs per repository in any seven days.
    pub weekly_budget: u32,
    /// The noise band of a point without published history.
    pub noise_band: f64,
}

impl Default for HuntSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            families: vec!["*".into()],
            budget: DEFAULT_BUDGET,
            weekly_budget: DEFAULT_WEEKLY_BUDGET,
            noise_band: DEFAULT_NOISE_BAND,
        }
    }
}

impl HuntSettings {
    /// Whether a failure or regression of `family` starts a hunt by itself
    /// (a maintainer's `/klaud hunt` needs no opt-in).
    pub fn applies(&self, family: &str) -> bool {
        let key = family.rsplit_once(':').map_or(family, |(_, k)| k);
        self.enabled
            && self.families.iter().any(|p| {
                if p.contains(':') {
                    klaud_planner::glob::wildcard(p, family)
                } else {
                    klaud_planner::glob::wildcard(p, key)
                }
            })
    }
}

/// Whether a candidate's attempt starts a hunt by itself, and why: the
/// hunt is on for its family, and either the attempt failed for real (not
/// infrastructure: `failed` is the caller's word on that) without the flag
/// audit explaining it (an upstream change that removed a flag or variable
/// the recipes set is the explanation; no hunt needed), or a point regressed
/// beyond its band (`regressed`, see [`worst_regression`]).
pub fn should_start(
    settings: &HuntSettings,
    family: &str,
    failed: bool,
    audit: Option<&klaud_planner::audit::AuditResult>,
    regressed: bool,
) -> Option<Trigger> {
    if !settings.applies(family) {
        return None;
    }
    let explained = matches!(
        audit,
        Some(klaud_planner::audit::AuditResult::Removed { .. })
    );
    if failed && !explained {
        return Some(Trigger::Failure);
    }
    (!failed && regressed).then_some(Trigger::Regression)
}

/// One point's value in a new run against the frozen baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct PointValue {
    /// The point (its report label).
    pub point: String,
    /// Where it is in a run's rows.
    pub at: PointKey,
    /// Which metric.
    pub metric: Metric,
    /// The new run's value.
    pub value: f64,
    /// The frozen baseline's value.
    pub baseline: f64,
    /// The point's noise band ([`noise_band`]).
    pub band: f64,
}

/// The point that regressed most beyond its band (by how far past the band
/// it is, relative to the baseline), as the probe a hunt measures; `None`
/// when no point regressed.
pub fn worst_regression(points: &[PointValue]) -> Option<Probe> {
    let beyond = |p: &PointValue| {
        let change = (p.value - p.baseline) / p.baseline;
        let worse = if p.metric.higher_is_better() {
            -change
        } else {
            change
        };
        worse - p.band
    };
    points
        .iter()
        .filter(|p| {
            p.baseline.is_finite()
                && p.baseline > 0.0
                && judge(p.metric, p.value, p.baseline, p.band) == Verdict::Bad
        })
        .max_by(|a, b| {
            // A value that is no number at all is the worst there is.
            let (x, y) = (beyond(a), beyond(b));
            x.is_nan()
                .cmp(&y.is_nan())
                .then(x.total_cmp(&y))
                .then_with(|| b.point.cmp(&a.point))
        })
        .map(|p| Probe::Metric {
            point: p.point.clone(),
            metric: p.metric,
            baseline: p.baseline,
            band: p.band,
            at: Some(p.at.clone()),
        })
}

/// Each frozen baseline point's metrics in a run's benchmark `rows`, with
/// the noise band `band` (the configured default; [`with_history`] then
/// gives each point the band of its published history), for
/// [`worst_regression`]. Points without published numbers or without a
/// row in the run are left out, and so are AgentX points whose row
/// replayed another dataset than the baseline's producer run (or one that
/// is not known): two replays of different traces say nothing of the image.
pub fn point_values(
    baseline: &crate::baseline::Baseline,
    rows: &[crate::artifacts::BenchmarkRow],
    band: f64,
) -> Vec<PointValue> {
    use crate::baseline::Scenario;
    let mut out = Vec::new();
    for p in &baseline.points {
        let Some(published) = p.metrics() else {
            continue;
        };
        let at = match p.point.scenario {
            Scenario::FixedSeqLen { isl, osl } => PointKey {
                isl: Some(isl),
                osl: Some(osl),
                tp: Some(p.point.decode.tp),
                conc: p.point.conc,
                agentic: false,
            },
            Scenario::Agentic => {
                let at = PointKey {
                    isl: None,
                    osl: None,
                    tp: Some(p.point.decode.tp),
                    conc: p.point.conc,
                    agentic: true,
                };
                let same_dataset = matching(rows, &at)
                    .first()
                    .is_some_and(|r| crate::dataset::comparable(baseline, p, r).is_ok());
                if !same_dataset {
                    continue;
                }
                at
            }
        };
        for metric in [Metric::Throughput, Metric::Ttft, Metric::Tpot] {
            if let Ok(value) = measure(rows, &at, metric) {
                out.push(PointValue {
                    point: p.label.clone(),
                    at: at.clone(),
                    metric,
                    value,
                    baseline: metric.of(published),
                    band,
                });
            }
        }
    }
    out
}

/// How many published runs of one image a point's history goes back to
/// (the frozen one included): each earlier one is one more request to the
/// results API.
pub const HISTORY_RUNS: usize = 4;

/// `points` with each band taken from the point's published history
/// (`history`: label → the metrics of each published run of the same
/// image, [`noise_band`]'s rule: three or more runs, else `default`).
pub fn with_history(
    points: Vec<PointValue>,
    history: &std::collections::BTreeMap<String, Vec<crate::artifacts::PointMetrics>>,
    default: f64,
) -> Vec<PointValue> {
    points
        .into_iter()
        .map(|mut p| {
            let values: Vec<f64> = history
                .get(&p.point)
                .map(|runs| runs.iter().map(|m| p.metric.of(m)).collect())
                .unwrap_or_default();
            p.band = noise_band(&values, default, MIN_NOISE_BAND);
            p
        })
        .collect()
}

/// The smoke command of a hunt step: the candidate's own, narrowed to the
/// probe's point where it is a metric (`--conc`, and `--seq-lens` for the
/// lengths the benchmark repository's generator names: `1k1k`, `8k1k`).
pub fn targeted_command(smoke: &str, probe: &Probe) -> String {
    let Probe::Metric { at: Some(at), .. } = probe else {
        return smoke.to_owned();
    };
    let mut command = format!("{smoke} --conc {}", at.conc);
    match (at.isl, at.osl) {
        (Some(1024), Some(1024)) => command.push_str(" --seq-lens 1k1k"),
        (Some(8192), Some(1024)) => command.push_str(" --seq-lens 8k1k"),
        _ => {}
    }
    command
}

/// A tag of the track as the registry served it when the hunt began.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HuntTag {
    /// The tag.
    pub tag: String,
    /// Its manifest digest (`sha256:…`); `None` when the registry no longer
    /// serves it (pruned): such a tag is never tried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The upstream commit it was built from (its revision label), when
    /// known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

/// A metric of one point, and which way is worse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Metric {
    /// Output throughput per GPU (lower is worse).
    Throughput,
    /// Mean time to first token (higher is worse).
    Ttft,
    /// Mean time per output token (higher is worse).
    Tpot,
}

impl Metric {
    /// The word reports use.
    pub fn label(self) -> klaud_render::Bilingual {
        match self {
            Metric::Throughput => klaud_render::bi!("throughput", "吞吐量"),
            Metric::Ttft => klaud_render::bi!("TTFT", "首个 token 延迟（TTFT）"),
            Metric::Tpot => klaud_render::bi!("TPOT", "每个输出 token 延迟（TPOT）"),
        }
    }

    /// This metric's value among a point's metrics.
    pub fn of(self, m: &crate::artifacts::PointMetrics) -> f64 {
        match self {
            Metric::Throughput => m.tput_per_gpu,
            Metric::Ttft => m.mean_ttft,
            Metric::Tpot => m.mean_tpot,
        }
    }

    fn higher_is_better(self) -> bool {
        matches!(self, Metric::Throughput)
    }
}

/// What each step measures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Probe {
    /// The candidate failed: a step is good when the targeted smoke passes.
    Outcome {
        /// The failing job (or point) the smoke runs alone.
        target: String,
    },
    /// One point regressed: a step is good when its value stays within the
    /// band of the frozen baseline.
    Metric {
        /// The point (its report label).
        point: String,
        /// Which metric.
        metric: Metric,
        /// The frozen baseline's value.
        baseline: f64,
        /// The relative noise band (0.05 = ±5%).
        band: f64,
        /// Which row of a run's `results_bmk` the point is (absent: the
        /// value is not read from artifacts, and a passed run is good).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at: Option<PointKey>,
    },
}

impl Probe {
    /// The job or point each step runs.
    pub fn target(&self) -> &str {
        match self {
            Probe::Outcome { target } => target,
            Probe::Metric { point, .. } => point,
        }
    }
}

/// Why the hunt started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Trigger {
    /// The candidate's attempt failed (not infrastructure, not explained by
    /// the flag audit).
    Failure,
    /// A point regressed beyond its noise band.
    Regression,
    /// A maintainer asked (`/klaud hunt [point]`).
    Command {
        /// Who asked.
        by: String,
    },
}

/// What a hunt is about; published once, as its `h<n>-plan` record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HuntPlan {
    /// [`PLAN_VERSION`].
    pub version: u32,
    /// The family (`configs/<file>:<key>`).
    pub family: String,
    /// The image repository the tags belong to.
    pub image: String,
    /// The old image (last known good).
    pub old: HuntTag,
    /// The new image (the candidate, known bad).
    pub new: HuntTag,
    /// The tags strictly between them, oldest first.
    pub tags: Vec<HuntTag>,
    /// What a step measures.
    pub probe: Probe,
    /// Runs this hunt may use.
    pub budget: u32,
    /// Why it started.
    pub trigger: Trigger,
    /// The upstream source repository (`owner/name`), for compare links.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
}

/// How one step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// The tag behaves like the old image.
    Good,
    /// The tag shows the failure or the regression.
    Bad,
    /// The run failed for infrastructure: no evidence; the tag may be
    /// tried again ([`MAX_INFRA_PER_TAG`]).
    Infra,
    /// The registry no longer serves the tag at its pinned digest: never
    /// dispatched, no run used.
    Gone,
}

/// One step, published as its `h<n>-step-<k>` record when it ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepRecord {
    /// Step number, from 1.
    pub step: u32,
    /// The tag tried.
    pub tag: String,
    /// The run, when one was dispatched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<u64>,
    /// How it ended.
    pub verdict: Verdict,
    /// The measured value, for a metric probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// A short note (the conclusion, why a tag is gone).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

impl StepRecord {
    /// Whether the step used a GPU run.
    pub fn used_run(&self) -> bool {
        self.verdict != Verdict::Gone
    }
}

/// Why a hunt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EndReason {
    /// The last good and first bad tags are adjacent among the tags served.
    Found,
    /// The hunt's budget of runs is spent.
    Budget,
    /// The week's budget of hunt runs is spent.
    WeeklyBudget,
    /// Every tag left in the range is no longer served or kept failing
    /// for infrastructure.
    TagsGone,
    /// A maintainer stopped it (`/klaud stop`).
    Stopped,
}

/// What a hunt established; published as its `h<n>-end` record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HuntResult {
    /// Why it ended.
    pub reason: EndReason,
    /// The newest tag known good (the old image when none between was).
    pub last_good: HuntTag,
    /// The oldest tag known bad (the new image when none between was).
    pub first_bad: HuntTag,
    /// Tags between them never tried (budget, stop) or unusable (gone).
    pub untested: Vec<String>,
    /// GPU runs used.
    pub runs: u32,
    /// The fewest runs that always find the first bad tag among the tags
    /// served: ⌈log2(n + 1)⌉ for n tags between (n + 1 places it can be).
    pub minimum: u32,
    /// The upstream commits between the last good and the first bad tag
    /// that touch the engine paths the flag audit knows (filled in by
    /// whoever asked the upstream compare; empty when unknown).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commits: Vec<StepCommit>,
}

impl HuntResult {
    /// Whether the first bad tag is established exactly.
    pub fn is_exact(&self) -> bool {
        self.reason == EndReason::Found && self.untested.is_empty()
    }
}

/// What to do next.
#[derive(Debug, Clone, PartialEq)]
pub enum Next<'a> {
    /// Run step `step` at `tag` (pinned by its digest).
    Try {
        /// The step number to record it under.
        step: u32,
        /// The tag.
        tag: &'a HuntTag,
    },
    /// The hunt is over.
    Done(HuntResult),
}

/// Why a plan, a step or the records on a PR cannot be used. Messages name
/// the field or the record.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HuntError {
    /// A plan field is invalid.
    #[error("hunt plan: field `{field}`: {message}")]
    Plan {
        /// The field.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A step does not follow from the plan and the steps before it.
    #[error("hunt step {step}: {message}")]
    Step {
        /// The step number.
        step: u32,
        /// What is wrong.
        message: String,
    },
    /// A hidden record on the PR is malformed.
    #[error(transparent)]
    Marker(#[from] MarkerError),
}

/// ⌈log2(n + 1)⌉: the runs a binary search needs, at worst, to place the
/// first bad image among n tags between a good and a bad one.
pub fn minimum_runs(n: usize) -> u32 {
    let places = n as u64 + 1;
    64 - (places - 1).leading_zeros()
}

/// Which point of a run's rows a metric probe reads: its concurrency and,
/// where stated, its sequence lengths and tensor parallelism.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PointKey {
    /// Input sequence length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isl: Option<u64>,
    /// Output sequence length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub osl: Option<u64>,
    /// Tensor parallelism.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tp: Option<u64>,
    /// Concurrency.
    pub conc: u64,
    /// An AgentX point (read only from AgentX rows; a fixed-seq-len key
    /// only from fixed-seq-len rows).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub agentic: bool,
}

/// The rows of a run at point `at`. A field a row does not state is not
/// compared, as the attempt reports match points.
fn matching<'r>(
    rows: &'r [crate::artifacts::BenchmarkRow],
    at: &PointKey,
) -> Vec<&'r crate::artifacts::BenchmarkRow> {
    let same = |want: Option<u64>, have: Option<u64>| match (want, have) {
        (Some(w), Some(h)) => w == h,
        _ => true,
    };
    rows.iter()
        .filter(|r| {
            let id = r.identity();
            matches!(r, crate::artifacts::BenchmarkRow::Agentic(_)) == at.agentic
                && r.conc() == at.conc
                && same(at.isl, id.isl)
                && same(at.osl, id.osl)
                && same(at.tp, id.tp)
        })
        .collect()
}

/// Why a run's rows give no value at a point.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unmeasured {
    /// No row matches the point.
    #[error("the run uploaded no row for conc {conc}")]
    NoRow {
        /// The point's concurrency.
        conc: u64,
    },
    /// Several rows match and the key cannot tell them apart.
    #[error("{rows} rows match conc {conc}; the point needs its isl, osl and tp")]
    Ambiguous {
        /// How many rows match.
        rows: usize,
        /// The point's concurrency.
        conc: u64,
    },
}

/// The value of `metric` at point `at` among a run's benchmark rows (its
/// `results_bmk`): `Err` says why there is none.
pub fn measure(
    rows: &[crate::artifacts::BenchmarkRow],
    at: &PointKey,
    metric: Metric,
) -> Result<f64, Unmeasured> {
    let found = matching(rows, at);
    let row = match found.as_slice() {
        [one] => one,
        [] => return Err(Unmeasured::NoRow { conc: at.conc }),
        many => {
            return Err(Unmeasured::Ambiguous {
                rows: many.len(),
                conc: at.conc,
            });
        }
    };
    Ok(metric.of(row.metrics()))
}

/// Whether `value` is a regression of `metric` against `baseline` beyond
/// the relative `band`.
pub fn judge(metric: Metric, value: f64, baseline: f64, band: f64) -> Verdict {
    if !value.is_finite() || value <= 0.0 {
        // A point that produced no usable number did not hold up.
        return Verdict::Bad;
    }
    let worse = if metric.higher_is_better() {
        value < baseline * (1.0 - band)
    } else {
        value > baseline * (1.0 + band)
    };
    if worse { Verdict::Bad } else { Verdict::Good }
}

/// The relative noise band of a point from its published history (several
/// published results of the same image and point): their spread
/// (max − min) over their median, never below `floor`. With fewer than
/// three usable results there is no history worth the name and the
/// configured `default` holds.
pub fn noise_band(history: &[f64], default: f64, floor: f64) -> f64 {
    let mut v: Vec<f64> = history
        .iter()
        .copied()
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect();
    if v.len() < 3 {
        return default;
    }
    v.sort_by(f64::total_cmp);
    let median = v[v.len() / 2];
    let spread = (v[v.len() - 1] - v[0]) / median;
    spread.max(floor)
}

fn plan_err(field: &str, message: impl Into<String>) -> HuntError {
    HuntError::Plan {
        field: field.to_owned(),
        message: message.into(),
    }
}

fn check_tag(field: &str, t: &HuntTag) -> Result<(), HuntError> {
    if t.tag.is_empty() || t.tag.chars().count() > MAX_TAG_CHARS {
        return Err(plan_err(
            field,
            format!(
                "tag {:?} is empty or longer than {MAX_TAG_CHARS}",
                shorten(&t.tag, 40)
            ),
        ));
    }
    if t.tag.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(plan_err(
            field,
            format!("tag {:?} has spaces or controls", shorten(&t.tag, 40)),
        ));
    }
    if let Some(d) = &t.digest {
        let ok = d.split_once(':').is_some_and(|(alg, hex)| {
            !alg.is_empty()
                && hex.len() >= 32
                && hex.len() <= 128
                && hex.bytes().all(|b| b.is_ascii_hexdigit())
        });
        if !ok {
            return Err(plan_err(
                &format!("{field}.digest"),
                format!("{:?} is not a digest like sha256:<hex>", shorten(d, 40)),
            ));
        }
    }
    if let Some(c) = &t.commit
        && (c.is_empty() || c.len() > 64 || !c.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return Err(plan_err(
            &format!("{field}.commit"),
            format!("{:?} is not a commit sha", shorten(c, 40)),
        ));
    }
    Ok(())
}

impl HuntPlan {
    /// Checks every field: a plan read back from a PR is outside input.
    pub fn validate(&self) -> Result<(), HuntError> {
        if self.version != PLAN_VERSION {
            return Err(plan_err(
                "version",
                format!("{} is not {PLAN_VERSION}", self.version),
            ));
        }
        if self.family.is_empty() || self.family.len() > 300 {
            return Err(plan_err("family", "empty or longer than 300"));
        }
        if self.image.is_empty() || self.image.len() > 300 {
            return Err(plan_err("image", "empty or longer than 300"));
        }
        check_tag("old", &self.old)?;
        check_tag("new", &self.new)?;
        if self.tags.len() > MAX_TAGS {
            return Err(plan_err(
                "tags",
                format!(
                    "{} tags between the images, more than the {MAX_TAGS} one hunt takes",
                    self.tags.len()
                ),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        seen.insert(self.old.tag.as_str());
        if !seen.insert(self.new.tag.as_str()) {
            return Err(plan_err("new", "the new image's tag is the old one's"));
        }
        for (i, t) in self.tags.iter().enumerate() {
            check_tag(&format!("tags[{i}]"), t)?;
            if !seen.insert(t.tag.as_str()) {
                return Err(plan_err(
                    &format!("tags[{i}]"),
                    format!("tag {:?} appears twice", shorten(&t.tag, 40)),
                ));
            }
        }
        if self.budget == 0 || self.budget > MAX_BUDGET {
            return Err(plan_err(
                "budget",
                format!("{} is not between 1 and {MAX_BUDGET}", self.budget),
            ));
        }
        if self.probe.target().is_empty() || self.probe.target().len() > 300 {
            return Err(plan_err("probe.target", "empty or longer than 300"));
        }
        if let Probe::Metric { baseline, band, .. } = self.probe {
            if !baseline.is_finite() || baseline <= 0.0 {
                return Err(plan_err(
                    "probe.baseline",
                    format!("{baseline} is not a positive number"),
                ));
            }
            if !band.is_finite() || !(0.0..1.0).contains(&band) {
                return Err(plan_err(
                    "probe.band",
                    format!("{band} is not between 0 and 1"),
                ));
            }
        }
        if let Some(u) = &self.upstream
            && (u.split('/').count() != 2 || u.len() > 200)
        {
            return Err(plan_err(
                "upstream",
                format!("{:?} is not owner/name", shorten(u, 40)),
            ));
        }
        Ok(())
    }

    /// Tags the registry still served when the hunt began.
    pub fn served(&self) -> usize {
        self.tags.iter().filter(|t| t.digest.is_some()).count()
    }
}

/// A hunt: its plan and the steps recorded so far.
#[derive(Debug, Clone, PartialEq)]
pub struct Hunt {
    plan: HuntPlan,
    steps: Vec<StepRecord>,
}

/// The search interval: indexes into the plan's tags; `-1` is the old
/// image, `tags.len()` the new one.
struct Interval {
    good: isize,
    bad: isize,
}

impl Hunt {
    /// A hunt with no steps yet.
    pub fn new(plan: HuntPlan) -> Result<Self, HuntError> {
        plan.validate()?;
        Ok(Self {
            plan,
            steps: Vec::new(),
        })
    }

    /// The plan.
    pub fn plan(&self) -> &HuntPlan {
        &self.plan
    }

    /// The steps recorded, in order.
    pub fn steps(&self) -> &[StepRecord] {
        &self.steps
    }

    /// GPU runs used so far.
    pub fn runs_used(&self) -> u32 {
        self.steps.iter().filter(|s| s.used_run()).count() as u32
    }

    fn index_of(&self, tag: &str) -> Option<usize> {
        self.plan.tags.iter().position(|t| t.tag == tag)
    }

    fn interval(&self) -> Interval {
        let mut iv = Interval {
            good: -1,
            bad: self.plan.tags.len() as isize,
        };
        for s in &self.steps {
            let Some(i) = self.index_of(&s.tag) else {
                continue;
            };
            match s.verdict {
                Verdict::Good => iv.good = iv.good.max(i as isize),
                Verdict::Bad => iv.bad = iv.bad.min(i as isize),
                Verdict::Infra | Verdict::Gone => {}
            }
        }
        iv
    }

    /// Whether tag `i` can still be tried.
    fn usable(&self, i: usize) -> bool {
        let t = &self.plan.tags[i];
        if t.digest.is_none() {
            return false;
        }
        let mut infra = 0;
        for s in self.steps.iter().filter(|s| s.tag == t.tag) {
            match s.verdict {
                Verdict::Gone => return false,
                Verdict::Infra => infra += 1,
                Verdict::Good | Verdict::Bad => return false,
            }
        }
        infra < MAX_INFRA_PER_TAG
    }

    /// The tag a search step picks: the middle usable tag of the interval
    /// (the upper middle of an even count, so both halves stay within
    /// ⌈log2(n + 1)⌉ runs).
    fn pick(&self, iv: &Interval) -> Option<usize> {
        let candidates: Vec<usize> = ((iv.good + 1)..iv.bad)
            .map(|i| i as usize)
            .filter(|&i| self.usable(i))
            .collect();
        candidates.get(candidates.len() / 2).copied()
    }

    /// The next step, or the result. `week_left` is what the week's budget
    /// of hunt runs still allows (across hunts; the caller counts it);
    /// `stopped` is a maintainer's `/klaud stop` seen after the plan.
    pub fn next(&self, week_left: u32, stopped: bool) -> Next<'_> {
        let iv = self.interval();
        let pick = self.pick(&iv);
        let reason = match pick {
            _ if iv.bad - iv.good <= 1 => Some(EndReason::Found),
            None => Some(EndReason::TagsGone),
            Some(_) if stopped => Some(EndReason::Stopped),
            Some(_) if self.runs_used() >= self.plan.budget => Some(EndReason::Budget),
            Some(_) if week_left == 0 => Some(EndReason::WeeklyBudget),
            Some(_) => None,
        };
        match (reason, pick) {
            (None, Some(i)) => Next::Try {
                step: self.steps.len() as u32 + 1,
                tag: &self.plan.tags[i],
            },
            (reason, _) => Next::Done(self.result(&iv, reason.unwrap_or(EndReason::TagsGone))),
        }
    }

    fn result(&self, iv: &Interval, reason: EndReason) -> HuntResult {
        let at = |i: isize| -> HuntTag {
            if i < 0 {
                self.plan.old.clone()
            } else if i as usize >= self.plan.tags.len() {
                self.plan.new.clone()
            } else {
                self.plan.tags[i as usize].clone()
            }
        };
        let untested = ((iv.good + 1)..iv.bad)
            .map(|i| self.plan.tags[i as usize].tag.clone())
            .collect();
        HuntResult {
            reason,
            last_good: at(iv.good),
            first_bad: at(iv.bad),
            untested,
            runs: self.runs_used(),
            minimum: minimum_runs(self.plan.served()),
            commits: Vec::new(),
        }
    }

    /// Records a step: it must be the next one, at the tag [`Hunt::next`]
    /// picks (a step of another choice is not this hunt's), while the hunt
    /// is not over.
    pub fn record(&mut self, step: StepRecord) -> Result<(), HuntError> {
        let err = |message: String| HuntError::Step {
            step: step.step,
            message,
        };
        if self.steps.len() >= MAX_STEPS {
            return Err(err(format!("more than {MAX_STEPS} steps")));
        }
        match self.next(u32::MAX, false) {
            Next::Try { step: k, tag } => {
                if step.step != k {
                    return Err(err(format!("expected step {k}")));
                }
                if step.tag != tag.tag {
                    return Err(err(format!(
                        "tag {:?} is not the one the search picks ({:?})",
                        shorten(&step.tag, 40),
                        shorten(&tag.tag, 40)
                    )));
                }
            }
            Next::Done(_) => return Err(err("the hunt is already over".into())),
        }
        if let Some(v) = step.value
            && !v.is_finite()
        {
            return Err(err(format!("value {v} is not a number")));
        }
        if step.note.chars().count() > 500 {
            return Err(err("note longer than 500 characters".into()));
        }
        self.steps.push(step);
        Ok(())
    }

    /// The verdict of a step that measured `value` (a metric probe), or
    /// whose run ended `passed` (an outcome probe).
    pub fn verdict_of(&self, passed: bool, value: Option<f64>) -> Verdict {
        match (&self.plan.probe, value) {
            (
                Probe::Metric {
                    metric,
                    baseline,
                    band,
                    ..
                },
                Some(v),
            ) if passed => judge(*metric, v, *baseline, *band),
            // A green run without the row its point reads did not hold up.
            (Probe::Metric { at: Some(_), .. }, None) if passed => Verdict::Bad,
            (_, _) if passed => Verdict::Good,
            _ => Verdict::Bad,
        }
    }

    /// Rebuilds the newest hunt of `candidate` from the comments of its PR
    /// (any owner run: a takeover resumes the hunt). `Ok(None)`: no hunt.
    /// The caller passes the bot's own comments only: a record anyone else
    /// wrote is not Klaud's.
    /// Comments that are not Klaud's hunt records are ignored; a malformed
    /// one, a step that does not follow, or two different records under
    /// one name are errors naming it.
    pub fn from_comments<'a>(
        candidate: &CandidateId,
        bodies: impl IntoIterator<Item = &'a str>,
    ) -> Result<Option<Rebuilt>, HuntError> {
        let mut plans: BTreeMap<u32, HuntPlan> = BTreeMap::new();
        let mut steps: BTreeMap<(u32, u32), StepRecord> = BTreeMap::new();
        let mut ends: BTreeMap<u32, HuntResult> = BTreeMap::new();
        for body in bodies {
            let Some(rec) = find_record(body).or_else(|e| {
                // A malformed record of another kind (a report, a receipt)
                // is its own readers' business, not the hunt's.
                let named = match &e {
                    MarkerError::Header { found, .. } => found,
                    MarkerError::Unterminated { marker }
                    | MarkerError::Json { marker, .. }
                    | MarkerError::Mismatch { marker, .. } => marker,
                    MarkerError::WrongKind { found, .. } => found,
                };
                if named.starts_with("klaud-hunt:") {
                    Err(e)
                } else {
                    Ok(None)
                }
            })?
            else {
                continue;
            };
            let MarkerKey::Hunt {
                candidate: c, name, ..
            } = &rec.key
            else {
                continue;
            };
            if c != candidate {
                continue;
            }
            match *name {
                HuntName::Plan { hunt } => keep(&mut plans, hunt, &rec)?,
                HuntName::Step { hunt, step } => keep(&mut steps, (hunt, step), &rec)?,
                HuntName::End { hunt } => keep(&mut ends, hunt, &rec)?,
            }
        }
        let Some((&number, plan)) = plans.iter().next_back() else {
            return Ok(None);
        };
        let mut hunt = Hunt::new(plan.clone())?;
        for ((_, k), s) in steps.range((number, 0)..=(number, u32::MAX)) {
            if s.step != *k {
                return Err(HuntError::Step {
                    step: *k,
                    message: format!("its record says step {}", s.step),
                });
            }
            hunt.record(s.clone())?;
        }
        Ok(Some(Rebuilt {
            number,
            hunt,
            ended: ends.get(&number).cloned(),
        }))
    }
}

/// A hunt rebuilt from a PR.
#[derive(Debug, Clone, PartialEq)]
pub struct Rebuilt {
    /// Its number among the candidate's hunts.
    pub number: u32,
    /// The plan and its steps.
    pub hunt: Hunt,
    /// Its end record, when published.
    pub ended: Option<HuntResult>,
}

fn keep<K: Ord + Copy + std::fmt::Debug, T: serde::de::DeserializeOwned + PartialEq>(
    map: &mut BTreeMap<K, T>,
    key: K,
    rec: &HiddenRecord<'_>,
) -> Result<(), HuntError> {
    let value: T = parse_json(rec)?;
    match map.get(&key) {
        // The same record published twice (a retried write) is one record.
        Some(old) if *old == value => Ok(()),
        Some(_) => Err(HuntError::Marker(MarkerError::Mismatch {
            marker: rec.key.to_string(),
            found: "a different record under the same name".into(),
        })),
        None => {
            map.insert(key, value);
            Ok(())
        }
    }
}

/// A hidden record block for one hunt record.
pub fn record_block<T: Serialize>(key: &MarkerKey, record: &T) -> String {
    hidden_block(key, &hidden_json(record))
}
