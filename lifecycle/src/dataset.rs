//! Which AgentX dataset a benchmark replayed, and whether a candidate's
//! AgentX numbers may be set beside the frozen baseline's.
//!
//! An AgentX replay is only comparable with one of the same traces. The
//! results API's rows name no dataset; the producer run that published a
//! row does, in the `dataset` object (`loader`, `hf_dataset_name`) of each
//! of its `bmk_agentic_*` artifacts. So at freeze time Klaud reads the
//! producer runs of the frozen AgentX points ([`attach_datasets`]) and
//! keeps what each run named in the baseline record ([`FrozenDataset`]).
//! What one run's artifacts say never changes, and a sweep run publishes
//! many families, so the rows read are also kept in the journal per run
//! ([`ProducerDatasets`]): no run's artifacts are downloaded twice. The
//! candidate's dataset comes from its own run's AgentX rows.
//!
//! Every reason here is a sentence Klaud writes in the reports;
//! [`reason_words`] gives it in both languages.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::BoxFuture;
use crate::artifacts::{
    AgenticRow, Artifact, ArtifactKind, ArtifactLimits, BenchmarkRow, parse_artifact,
};
use crate::baseline::{
    Baseline, BaselinePoint, BaselineValue, FamilyKey, Scenario, hardware_of_runner, run_id_of_url,
};
use crate::engine::forge::{Forge, ForgeError};
use crate::engine::journal::Journal;

mod reasons;
pub mod record;
pub use reasons::reason_words;
use reasons::{DIFFERENT, NEW_UNNAMED, NO_PRODUCER, NOT_FROZEN, UNKNOWN};
pub use record::{Dataset, DatasetFinding, FrozenDataset, ProducerDatasets, ProducerRow};

/// Longest dataset name kept; a longer one is not a name but a payload.
pub const MAX_DATASET_CHARS: usize = 200;
/// Most AgentX artifacts read from one producer run. A full InferenceX
/// sweep uploads a few hundred benchmark artifacts in all; more AgentX
/// ones than this is not a sweep Klaud should download whole.
pub const MAX_AGENTIC_ARTIFACTS: usize = 512;

/// Why the `dataset` of a row cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field {field}: {problem}")]
pub struct DatasetError {
    /// Dotted path of the field (`dataset.loader`).
    pub field: String,
    /// What is wrong.
    pub problem: String,
}

fn name_field(
    obj: &serde_json::Map<String, Value>,
    key: &str,
) -> Result<Option<String>, DatasetError> {
    let field = format!("dataset.{key}");
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => {
            let s = s.trim();
            if s.is_empty() {
                return Ok(None);
            }
            if s.chars().count() > MAX_DATASET_CHARS {
                return Err(DatasetError {
                    field,
                    problem: format!("longer than {MAX_DATASET_CHARS} characters"),
                });
            }
            if s.chars().any(char::is_control) {
                return Err(DatasetError {
                    field,
                    problem: "holds control characters".into(),
                });
            }
            Ok(Some(s.to_owned()))
        }
        Some(_) => Err(DatasetError {
            field,
            problem: "expected text".into(),
        }),
    }
}

/// The dataset an AgentX row names (`dataset.loader`, else
/// `dataset.hf_dataset_name`); `None` when it names none.
pub fn row_dataset(row: &AgenticRow) -> Result<Option<Dataset>, DatasetError> {
    let obj = match row.extra.get("dataset") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(obj)) => obj,
        Some(_) => {
            return Err(DatasetError {
                field: "dataset".into(),
                problem: "expected an object".into(),
            });
        }
    };
    let loader = name_field(obj, "loader")?;
    let hf = name_field(obj, "hf_dataset_name")?;
    Ok(loader.or_else(|| hf.clone()).map(|name| Dataset {
        name,
        hf_dataset_name: hf,
    }))
}

fn gone(run: u64) -> String {
    format!("producer run {run} is gone")
}
fn expired(run: u64) -> String {
    format!("the AgentX artifacts of producer run {run} have expired")
}
fn none_uploaded(run: u64) -> String {
    format!("producer run {run} uploaded no AgentX artifact")
}
fn unreadable(run: u64, why: &str) -> String {
    format!("the AgentX artifacts of producer run {run} are unreadable: {why}")
}
fn not_read(run: u64, why: &str) -> String {
    format!("producer run {run} could not be read: {why}")
}
fn no_row(run: u64) -> String {
    format!("producer run {run} has no AgentX row of this config")
}
fn unnamed(run: u64) -> String {
    format!("the AgentX rows of producer run {run} name no dataset")
}
fn several(run: u64, names: &[String]) -> String {
    format!(
        "the AgentX rows of producer run {run} name several datasets: {}",
        names.join(", ")
    )
}

/// Reads what producer run `run` says of its datasets: `Err` only for a
/// failure that may pass (network, rate limit), which is not kept.
pub fn read_producer_run<'f>(
    forge: &'f dyn Forge,
    run: u64,
    limits: &'f ArtifactLimits,
) -> BoxFuture<'f, Result<ProducerDatasets, ForgeError>> {
    Box::pin(async move {
        let unknown = |reason: String| Ok(ProducerDatasets::Unknown { reason });
        match forge.get_run(run).await {
            Ok(_) => {}
            Err(ForgeError::NotFound(_)) => return unknown(gone(run)),
            Err(e) => return Err(e),
        }
        let artifacts = match forge.list_artifacts(run).await {
            Ok(a) => a,
            Err(ForgeError::NotFound(_)) => return unknown(gone(run)),
            Err(e) => return Err(e),
        };
        let agentic: Vec<_> = artifacts
            .iter()
            .filter(|a| ArtifactKind::of(&a.name) == Some(ArtifactKind::Agentic))
            .collect();
        if agentic.is_empty() {
            return unknown(none_uploaded(run));
        }
        let mut rows = Vec::new();
        let mut failure: Option<String> = None;
        let mut lapsed = 0;
        for a in agentic.iter().take(MAX_AGENTIC_ARTIFACTS) {
            if a.expired {
                lapsed += 1;
                continue;
            }
            let bytes = match forge.download_artifact(a.id).await {
                Ok(b) => b,
                // An artifact removed since the listing was read is as
                // good as expired.
                Err(ForgeError::NotFound(_)) => {
                    lapsed += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            match parse_artifact(&a.name, &bytes, limits) {
                Ok(Artifact::Benchmark { rows: parsed, .. }) => {
                    rows.extend(parsed.iter().filter_map(|r| match r {
                        BenchmarkRow::Agentic(r) => Some(producer_row(r)),
                        BenchmarkRow::FixedSeqLen(_) => None,
                    }));
                }
                Ok(_) => {}
                Err(e) => {
                    failure.get_or_insert_with(|| e.to_string());
                }
            }
        }
        if rows.is_empty() {
            return unknown(match failure {
                Some(why) => unreadable(run, &why),
                None if lapsed > 0 => expired(run),
                None => none_uploaded(run),
            });
        }
        Ok(ProducerDatasets::Read { rows })
    })
}

fn producer_row(r: &AgenticRow) -> ProducerRow {
    ProducerRow {
        model_prefix: r.identity.model_prefix.clone(),
        hw: r.identity.hw.clone(),
        framework: r.identity.framework.clone(),
        precision: r.identity.precision.clone(),
        conc: r.conc,
        tp: r.identity.tp,
        // A row with a malformed dataset names none: it cannot prove one.
        dataset: row_dataset(r).ok().flatten(),
    }
}

fn agrees(stated: Option<&str>, wanted: &str) -> bool {
    stated.is_none_or(|s| s.eq_ignore_ascii_case(wanted))
}

/// The dataset producer run `run`'s rows of the family `key` name.
pub fn finding_for(run: u64, datasets: &ProducerDatasets, key: &FamilyKey) -> DatasetFinding {
    let rows = match datasets {
        ProducerDatasets::Unknown { reason } => {
            return DatasetFinding::Unknown {
                reason: reason.clone(),
            };
        }
        ProducerDatasets::Read { rows } => rows,
    };
    let mine: Vec<&ProducerRow> = rows
        .iter()
        .filter(|r| {
            agrees(r.model_prefix.as_deref(), &key.model_prefix)
                && agrees(r.framework.as_deref(), &key.framework)
                && agrees(r.precision.as_deref(), &key.precision)
                && r.hw
                    .as_deref()
                    .is_none_or(|hw| hardware_of_runner(hw) == key.hardware)
        })
        .collect();
    if mine.is_empty() {
        return DatasetFinding::Unknown {
            reason: no_row(run),
        };
    }
    // Distinct datasets by name, the first row's words for each.
    let mut named: BTreeMap<&str, &Dataset> = BTreeMap::new();
    for d in mine.iter().filter_map(|r| r.dataset.as_ref()) {
        named.entry(d.name.as_str()).or_insert(d);
    }
    let mut datasets = named.into_values();
    match (datasets.next(), datasets.next()) {
        (None, _) => DatasetFinding::Unknown {
            reason: unnamed(run),
        },
        (Some(one), None) => DatasetFinding::Named {
            dataset: one.clone(),
        },
        (Some(first), Some(second)) => {
            let names: Vec<String> = [first, second]
                .into_iter()
                .chain(datasets)
                .map(|d| d.name.clone())
                .collect();
            DatasetFinding::Unknown {
                reason: several(run, &names),
            }
        }
    }
}

/// The producer run of a measured point, from its record or its URL.
pub fn producer_of(point: &BaselinePoint) -> Option<u64> {
    match &point.value {
        BaselineValue::Measured {
            run_id, run_url, ..
        } => run_id.or_else(|| run_url.as_deref().and_then(run_id_of_url)),
        BaselineValue::Unavailable { .. } => None,
    }
}

/// Adds to `baseline` the dataset of every producer run its measured
/// AgentX points come from, reading each run's artifacts through `forge`
/// unless `journal` keeps them already. Never fails: a run that cannot be
/// read is frozen as unknown, with why.
pub fn attach_datasets<'f>(
    forge: &'f dyn Forge,
    journal: &'f dyn Journal,
    limits: &'f ArtifactLimits,
    key: &'f FamilyKey,
    baseline: &'f mut Baseline,
) -> BoxFuture<'f, ()> {
    Box::pin(async move {
        let runs: BTreeSet<u64> = baseline
            .points
            .iter()
            .filter(|p| p.point.scenario == Scenario::Agentic)
            .filter_map(producer_of)
            .collect();
        for run in runs {
            if baseline.agentx_datasets.iter().any(|d| d.run_id == run) {
                continue;
            }
            // A journal that cannot answer is only a cache miss.
            let kept = journal.producer_datasets(run).await.ok().flatten();
            let datasets = match kept {
                Some(d) => d,
                None => match read_producer_run(forge, run, limits).await {
                    Ok(d) => {
                        if let Err(e) = journal.record_producer_datasets(run, &d).await {
                            tracing::warn!(run, error = %e, "the producer run's datasets are not kept");
                        }
                        d
                    }
                    Err(e) => ProducerDatasets::Unknown {
                        reason: not_read(run, &e.to_string()),
                    },
                },
            };
            baseline.agentx_datasets.push(FrozenDataset {
                run_id: run,
                finding: finding_for(run, &datasets, key),
            });
        }
    })
}

/// The dataset `baseline` froze for producer run `run`, or why there is
/// none.
pub fn frozen_finding(baseline: &Baseline, run: u64) -> DatasetFinding {
    baseline
        .agentx_datasets
        .iter()
        .find(|d| d.run_id == run)
        .map(|d| d.finding.clone())
        .unwrap_or_else(|| DatasetFinding::Unknown {
            reason: NOT_FROZEN.to_owned(),
        })
}

/// Why an AgentX row may not be set beside a frozen point: its message is
/// the report's N/A reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Incomparable {
    /// One side's dataset is not known; says why.
    #[error("{UNKNOWN}{0}")]
    Unknown(String),
    /// The two sides replayed different datasets.
    #[error("{DIFFERENT}the baseline's {baseline}, this run's {run}")]
    Different {
        /// The baseline's dataset.
        baseline: String,
        /// This run's dataset.
        run: String,
    },
}

/// Whether the candidate's AgentX `row` may be set beside the frozen
/// `point`: `Err` is why not (the datasets differ, or one is unknown). A
/// fixed-seq-len point or row is always comparable here.
pub fn comparable(
    baseline: &Baseline,
    point: &BaselinePoint,
    row: &BenchmarkRow,
) -> Result<(), Incomparable> {
    let BenchmarkRow::Agentic(new) = row else {
        return Ok(());
    };
    if point.point.scenario != Scenario::Agentic {
        return Ok(());
    }
    let old = match producer_of(point) {
        None => return Err(Incomparable::Unknown(NO_PRODUCER.to_owned())),
        Some(run) => match frozen_finding(baseline, run) {
            DatasetFinding::Named { dataset } => dataset,
            DatasetFinding::Unknown { reason } => return Err(Incomparable::Unknown(reason)),
        },
    };
    let new = match row_dataset(new) {
        Ok(Some(d)) => d,
        Ok(None) => return Err(Incomparable::Unknown(NEW_UNNAMED.to_owned())),
        Err(e) => {
            return Err(Incomparable::Unknown(format!("this run's AgentX row: {e}")));
        }
    };
    if old.name == new.name {
        Ok(())
    } else {
        Err(Incomparable::Different {
            baseline: old.name,
            run: new.name,
        })
    }
}

#[cfg(test)]
mod tests;
