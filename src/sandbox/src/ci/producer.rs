//! The published (producer) runs behind the results API's AgentX rows.
//!
//! A published row names the run that produced it (`run_url`,
//! `…/actions/runs/<id>/attempts/1`); on the real repository that run's
//! `bmk_agentic_*` artifacts name the dataset the replay used, which the
//! API's rows do not. So the sandbox GitHub serves those runs too: when
//! the results API answers AgentX rows, [`register`] makes each producer
//! run exist in the repository (completed, on the default branch's head)
//! with one `bmk_agentic_*` artifact per answered point, in the CI
//! script's row shape, naming [`SANDBOX_DATASET`].
//!
//! **Control.** A test changes a producer run before or after the API
//! first answers it: [`set_dataset`] (its artifacts name another
//! dataset), [`expire`] (listed `expired: true`, their zip 410) and
//! [`remove`] (the run is gone: 404). The same is
//! `POST /_sandbox/producer-runs/{id}` on the GitHub simulator with
//! `{"dataset": D?, "expired": true?, "gone": true?}`.

use std::collections::BTreeMap;
use std::io::Read;

use chrono::Utc;
use serde_json::Value;

use super::points::{FamilySpec, Point, sanitize};
use super::results;
use crate::github::GithubState;
use crate::github::state::{Artifact, ProducerOverride, Run, zip_files};

/// The `dataset.loader` the sandbox's AgentX rows name (the CI script's
/// and the producer runs' alike).
pub const SANDBOX_DATASET: &str = "klaud_sandbox_traces";
/// The `dataset.hf_dataset_name` beside it.
pub const SANDBOX_HF_DATASET: &str = "klaud/sandbox-traces";

/// The run id of a published row's `run_url`.
fn run_id_of(row: &Value) -> Option<u64> {
    let url = row.get("run_url")?.as_str()?;
    let (_, rest) = url.split_once("/actions/runs/")?;
    rest.split(['/', '?', '#']).next()?.parse().ok()
}

fn text<'v>(row: &'v Value, field: &str) -> &'v str {
    row.get(field).and_then(Value::as_str).unwrap_or_default()
}

/// The family and points of `families` an API row of an AgentX point
/// stands for.
fn points_of<'f>(families: &[&'f FamilySpec], row: &Value) -> Vec<(&'f FamilySpec, &'f Point)> {
    let conc = row.get("conc").and_then(Value::as_u64);
    let tp = row.get("decode_tp").and_then(Value::as_u64);
    let eq = |a: &str, b: &str| a.eq_ignore_ascii_case(b);
    families
        .iter()
        .filter(|f| {
            eq(
                &results::hardware_of_runner(&f.runner),
                text(row, "hardware"),
            ) && eq(&f.model_prefix, text(row, "model"))
                && eq(&f.framework, text(row, "framework"))
                && eq(&f.precision, text(row, "precision"))
        })
        .flat_map(|f| {
            f.points
                .iter()
                .filter(move |p| {
                    p.agentic()
                        && Some(p.conc) == conc
                        && Some(p.decode.tp) == tp
                        && eq(&p.spec_decoding, text(row, "spec_method"))
                })
                .map(move |p| (*f, p))
        })
        .collect()
}

/// `row` naming `dataset` instead of the sandbox's.
fn with_dataset(mut row: Value, dataset: Option<&str>) -> Value {
    if let Some(d) = dataset {
        row["dataset"]["loader"] = Value::String(d.to_owned());
        row["dataset"]["hf_dataset_name"] = Value::String(format!("sandbox/{d}"));
    }
    row
}

/// Makes the producer run of every AgentX row of `rows` (an answer of the
/// results API for `families`) exist in `repo`, with an artifact for each
/// answered point it lacks. Fixed-seq-len rows need no run: nothing Klaud
/// compares lives only in their producer's artifacts.
pub async fn register(state: &GithubState, repo: &str, families: &[&FamilySpec], rows: &[Value]) {
    // Run id → artifact name → (file, row).
    let mut wanted: BTreeMap<u64, BTreeMap<String, (String, Value)>> = BTreeMap::new();
    for row in rows
        .iter()
        .filter(|r| r.get("isl").is_none_or(Value::is_null))
    {
        let Some(run) = run_id_of(row) else { continue };
        let image = text(row, "image");
        for (f, p) in points_of(families, row) {
            let image = if image.is_empty() { &f.image } else { image };
            let m = results::baseline_metrics(&f.family, p);
            let name = format!("{}_{}", sanitize(&f.key), p.slug());
            wanted.entry(run).or_default().insert(
                format!("bmk_agentic_{name}"),
                (
                    format!("{name}.json"),
                    results::agentic_row(f, p, image, &m),
                ),
            );
        }
    }
    if wanted.is_empty() {
        return;
    }
    let mut m = state.lock().await;
    let now = Utc::now();
    for (run, artifacts) in wanted {
        let o = m.producer_overrides.get(&run).cloned().unwrap_or_default();
        if o.gone {
            continue;
        }
        let Some(r) = m.repos.get(&repo.to_ascii_lowercase()) else {
            return;
        };
        let exists = r.runs.contains_key(&run);
        let have: Vec<String> = r
            .artifacts
            .values()
            .filter(|a| a.run_id == run)
            .map(|a| a.name.clone())
            .collect();
        let head = r.resolve(&r.default_branch).unwrap_or_default();
        let branch = r.default_branch.clone();
        let owner = r.owner.clone();
        let workflow = r
            .workflow("run-sweep.yml")
            .or_else(|| r.workflows.first())
            .map(|w| (w.id, w.name.clone()))
            .unwrap_or((0, "Run Sweep".to_owned()));
        let mut new = Vec::new();
        for (name, (file, row)) in artifacts {
            if have.contains(&name) {
                continue;
            }
            let row = with_dataset(row, o.dataset.as_deref());
            let bytes = serde_json::to_vec_pretty(&row).unwrap_or_default();
            let Ok(zip) = zip_files(&BTreeMap::from([(file, bytes)])) else {
                continue;
            };
            new.push((m.id(), name, zip));
        }
        let job_id = m.id();
        let Some(r) = m.repos.get_mut(&repo.to_ascii_lowercase()) else {
            return;
        };
        if !exists {
            r.runs.insert(
                run,
                Run {
                    id: run,
                    workflow_id: workflow.0,
                    name: workflow.1.clone(),
                    display_title: workflow.1,
                    event: "schedule".into(),
                    status: "completed".into(),
                    conclusion: Some("success".into()),
                    head_branch: branch,
                    head_sha: head,
                    actor: owner.clone(),
                    triggering_actor: owner,
                    run_attempt: 1,
                    inputs: Value::Null,
                    pull_requests: Vec::new(),
                    created_at: now,
                    updated_at: now,
                    run_started_at: now,
                    job_id,
                    concurrency_group: None,
                    past_attempts: Vec::new(),
                    cancel_requested: false,
                    jobs: Vec::new(),
                    context: None,
                },
            );
        }
        for (id, name, zip) in new {
            r.artifacts.insert(
                id,
                Artifact {
                    id,
                    run_id: run,
                    name,
                    zip,
                    created_at: now,
                    expired: o.expired,
                },
            );
        }
    }
}

/// Applies `change` to producer run `run` of `repo`: kept for when the
/// results API first names the run, and applied at once to a run it named
/// already.
pub async fn change(state: &GithubState, repo: &str, run: u64, change: ProducerOverride) {
    let mut m = state.lock().await;
    let kept = m.producer_overrides.entry(run).or_default();
    if change.dataset.is_some() {
        kept.dataset = change.dataset.clone();
    }
    kept.expired |= change.expired;
    kept.gone |= change.gone;
    let kept = kept.clone();
    let Some(r) = m.repos.get_mut(&repo.to_ascii_lowercase()) else {
        return;
    };
    if kept.gone {
        r.runs.remove(&run);
        r.artifacts.retain(|_, a| a.run_id != run);
        return;
    }
    for a in r.artifacts.values_mut().filter(|a| a.run_id == run) {
        a.expired = kept.expired;
        if let Some(d) = kept.dataset.as_deref()
            && let Some(zip) = renamed(&a.zip, d)
        {
            a.zip = zip;
        }
    }
}

/// An artifact's zip with every JSON row naming `dataset`.
fn renamed(zip: &[u8], dataset: &str) -> Option<Vec<u8>> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(zip)).ok()?;
    let mut files = BTreeMap::new();
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).ok()?;
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).ok()?;
        let name = entry.name().to_owned();
        if let Ok(row) = serde_json::from_slice::<Value>(&bytes) {
            bytes = serde_json::to_vec_pretty(&with_dataset(row, Some(dataset))).ok()?;
        }
        files.insert(name, bytes);
    }
    zip_files(&files).ok()
}

/// Producer run `run`'s AgentX artifacts name `dataset`.
pub async fn set_dataset(state: &GithubState, repo: &str, run: u64, dataset: &str) {
    let o = ProducerOverride {
        dataset: Some(dataset.to_owned()),
        ..ProducerOverride::default()
    };
    change(state, repo, run, o).await;
}

/// Producer run `run`'s artifacts are past their retention.
pub async fn expire(state: &GithubState, repo: &str, run: u64) {
    let o = ProducerOverride {
        expired: true,
        ..ProducerOverride::default()
    };
    change(state, repo, run, o).await;
}

/// Producer run `run` was deleted.
pub async fn remove(state: &GithubState, repo: &str, run: u64) {
    let o = ProducerOverride {
        gone: true,
        ..ProducerOverride::default()
    };
    change(state, repo, run, o).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rename_rewrites_every_json_row_and_keeps_other_files() {
        let row = serde_json::json!({"conc": 4, "dataset": {"loader": SANDBOX_DATASET}});
        let zip = zip_files(&BTreeMap::from([
            ("r.json".to_owned(), serde_json::to_vec(&row).expect("json")),
            ("notes.txt".to_owned(), b"kept".to_vec()),
        ]))
        .expect("zip");
        let renamed = renamed(&zip, "other_traces").expect("renamed");
        let mut archive = zip::ZipArchive::new(std::io::Cursor::new(renamed)).expect("zip");
        let mut text = String::new();
        archive
            .by_name("r.json")
            .expect("row")
            .read_to_string(&mut text)
            .expect("read");
        let row: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(row["dataset"]["loader"], "other_traces");
        assert_eq!(row["dataset"]["hf_dataset_name"], "sandbox/other_traces");
        assert_eq!(row["conc"], 4);
        let mut notes = String::new();
        archive
            .by_name("notes.txt")
            .expect("notes")
            .read_to_string(&mut notes)
            .expect("read");
        assert_eq!(notes, "kept");
    }

    #[test]
    fn a_run_url_names_its_run_with_or_without_an_attempt() {
        let id = |url: &str| run_id_of(&serde_json::json!({ "run_url": url }));
        assert_eq!(
            id("http://127.0.0.1:1/o/r/actions/runs/42/attempts/1"),
            Some(42)
        );
        assert_eq!(id("https://github.com/o/r/actions/runs/42"), Some(42));
        assert_eq!(id("https://github.com/o/r/pull/42"), None);
        assert_eq!(run_id_of(&serde_json::json!({})), None);
    }
}
