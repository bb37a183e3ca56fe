//! The frozen baseline's accuracy side: the results API's evaluation rows
//! ([`ApiEvalRow`]), the ones frozen beside a family's points
//! ([`freeze_evals`]) and attaching them to a baseline ([`attach_evals`]).

use serde::Deserialize;

use super::*;

/// One row of `/api/v1/evaluations` (InferenceX-app's `getAllEvalResults`):
/// the config it ran, the task, its metrics and its run; no image.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ApiEvalRow {
    /// Hardware.
    pub hardware: String,
    /// Engine.
    pub framework: String,
    /// Model prefix (`dsr1`).
    pub model: String,
    /// Precision.
    pub precision: String,
    /// Speculative decoding.
    #[serde(default)]
    pub spec_method: Option<String>,
    /// Decode (or whole-server) TP.
    #[serde(default)]
    pub decode_tp: Option<u64>,
    /// Decode EP.
    #[serde(default)]
    pub decode_ep: Option<u64>,
    /// Decode DP attention.
    #[serde(default)]
    pub decode_dp_attention: Option<bool>,
    /// Task.
    pub task: String,
    /// Publication day.
    #[serde(default)]
    pub date: Option<String>,
    /// Concurrency.
    #[serde(default)]
    pub conc: Option<u64>,
    /// Scores and counts.
    #[serde(default)]
    pub metrics: serde_json::Map<String, Value>,
    /// The producer run.
    #[serde(default)]
    pub run_url: Option<String>,
}

/// Metric fields that are an eval's score, in order of preference: the
/// same order the artifacts' `agg_eval_all.json` rows are read in.
pub const EVAL_SCORE_FIELDS: &[&str] = &["score", "em_strict", "em_flexible", "acc", "exact_match"];

/// The rows of a `/api/v1/evaluations` answer. The answer covers every
/// model, so a row that does not parse is another config's problem and is
/// skipped; only an answer that is not a list fails.
pub fn parse_evaluations(fetched: &Fetched) -> Result<Vec<ApiEvalRow>, BaselineError> {
    Ok(json_rows(fetched, "eval rows")?
        .into_iter()
        .filter_map(|row| serde_json::from_value(row).ok())
        .collect())
}

/// The published evals of `baseline`'s image for the family `key`: rows of
/// the family's config produced by a run that produced one of its measured
/// points, the newest per task, metric, concurrency and parallelism.
pub fn freeze_evals(key: &FamilyKey, baseline: &Baseline, rows: &[ApiEvalRow]) -> Vec<FrozenEval> {
    let producers: BTreeSet<u64> = baseline
        .points
        .iter()
        .filter_map(|p| match &p.value {
            BaselineValue::Measured {
                run_id, run_url, ..
            } => run_id.or_else(|| run_url.as_deref().and_then(run_id_of_url)),
            BaselineValue::Unavailable { .. } => None,
        })
        .collect();
    type Slot = (String, String, Option<u64>, u64, u64, bool);
    let mut newest: BTreeMap<Slot, (FrozenEval, Option<u64>)> = BTreeMap::new();
    for row in rows {
        let run = row.run_url.as_deref().and_then(run_id_of_url);
        if !(eq_ci(&row.hardware, &key.hardware)
            && eq_ci(&row.framework, &key.framework)
            && eq_ci(&row.model, &key.model_prefix)
            && eq_ci(&row.precision, &key.precision)
            && run.is_some_and(|r| producers.contains(&r)))
        {
            continue;
        }
        let Some(point) = baseline.points.iter().find(|p| {
            row.spec_method
                .as_deref()
                .is_none_or(|s| eq_ci(s, &p.point.spec_decoding))
                && agrees(row.decode_tp, p.point.decode.tp)
                && agrees(row.decode_ep, p.point.decode.ep)
                && agrees(row.decode_dp_attention, p.point.decode.dp_attn)
        }) else {
            continue;
        };
        let Some((score_name, score)) = EVAL_SCORE_FIELDS.iter().find_map(|f| {
            row.metrics
                .get(*f)
                .and_then(Value::as_f64)
                .filter(|v| v.is_finite())
                .map(|v| ((*f).to_owned(), v))
        }) else {
            continue;
        };
        let published = row
            .date
            .as_deref()
            .and_then(|d| NaiveDate::parse_from_str(d, "%Y-%m-%d").ok());
        let eval = FrozenEval {
            task: row.task.clone(),
            score_name: score_name.clone(),
            score,
            conc: row.conc,
            samples: row.metrics.get("n_eff").and_then(Value::as_u64),
            decode: point.point.decode,
            published,
            run_url: row.run_url.clone(),
        };
        let d = point.point.decode;
        let slot = (
            row.task.clone(),
            score_name,
            row.conc,
            d.tp,
            d.ep,
            d.dp_attn,
        );
        match newest.get(&slot) {
            Some((kept, kept_run)) if (kept.published, *kept_run) >= (published, run) => {}
            _ => {
                newest.insert(slot, (eval, run));
            }
        }
    }
    newest.into_values().map(|(e, _)| e).collect()
}

/// Adds the published evals of `baseline`'s image to it (one request for
/// all of them; the readiness check before a claim does not ask, only the
/// freeze into a PR does). A failing source leaves the evals N/A with why.
pub fn attach_evals<'f>(
    source: &'f dyn BaselineSource,
    key: &'f FamilyKey,
    baseline: &'f mut Baseline,
) -> BoxFuture<'f, ()> {
    Box::pin(async move {
        if baseline.points.iter().all(|p| p.metrics().is_none()) {
            return;
        }
        let fetched = match source.evaluations().await {
            Ok(Some(f)) => f,
            Ok(None) => return,
            Err(e) => {
                baseline.evals_unavailable = Some(e.to_string());
                return;
            }
        };
        match parse_evaluations(&fetched) {
            Ok(rows) => {
                baseline.evals = freeze_evals(key, baseline, &rows);
                if baseline.evals.is_empty() {
                    baseline.evals_unavailable = Some(
                        "no eval result published by the runs the baseline points come from".into(),
                    );
                } else {
                    baseline.source_urls.push(fetched.url);
                }
            }
            Err(e) => baseline.evals_unavailable = Some(e.to_string()),
        }
    })
}
