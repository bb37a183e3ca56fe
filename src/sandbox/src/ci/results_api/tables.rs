//! The published results as InferenceX-app keeps them: its `configs`,
//! `workflow_runs` and `benchmark_results` tables
//! (`packages/db/migrations/001_initial_schema.sql`), the queries the
//! results API answers with over them (`packages/db/src/json-provider.ts`,
//! which implements the SQL of `packages/db/src/queries/` over table
//! dumps), and those dumps in `packages/db/src/dump-db.ts`'s serialisation.

use std::collections::{HashMap, HashSet};

use chrono::NaiveDate;
use serde::Serialize;
use serde_json::{Map, Value, json};

/// Everything of a `configs` row but its id: the table's natural key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ConfigFields {
    pub hardware: String,
    pub framework: String,
    /// The DB model key: the master config's `model-prefix`.
    pub model: String,
    pub precision: String,
    pub spec_method: String,
    pub disagg: bool,
    pub is_multinode: bool,
    pub prefill_tp: u64,
    pub prefill_ep: u64,
    pub prefill_dp_attention: bool,
    pub prefill_num_workers: u64,
    pub decode_tp: u64,
    pub decode_ep: u64,
    pub decode_dp_attention: bool,
    pub decode_num_workers: u64,
    pub num_prefill_gpu: u64,
    pub num_decode_gpu: u64,
}

/// A `configs` row (`id serial`: a number in a dump).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConfigRow {
    pub id: u32,
    #[serde(flatten)]
    pub fields: ConfigFields,
}

/// A `workflow_runs` row: one attempt of one GitHub workflow run.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowRunRow {
    pub id: u64,
    pub github_run_id: u64,
    pub run_attempt: u32,
    pub name: String,
    pub status: String,
    pub conclusion: Option<String>,
    pub head_sha: String,
    pub head_branch: String,
    pub html_url: Option<String>,
    /// `YYYY-MM-DDTHH:MM:SSZ`.
    pub created_at: String,
    pub date: NaiveDate,
}

/// A `benchmark_results` row: one point measured by one run attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchmarkResultRow {
    pub id: u64,
    pub workflow_run_id: u64,
    pub config_id: u32,
    pub benchmark_type: String,
    pub date: NaiveDate,
    /// `None` for an AgentX point, which has no fixed sequence lengths.
    pub isl: Option<u64>,
    pub osl: Option<u64>,
    pub conc: u64,
    pub image: Option<String>,
    pub metrics: Map<String, Value>,
    /// `None`: the point succeeded; failed points are kept but never answered.
    pub error: Option<String>,
}

/// A run attempt to record (the table assigns its id).
#[derive(Debug, Clone)]
pub struct NewRun {
    pub github_run_id: u64,
    pub run_attempt: u32,
    pub name: String,
    pub conclusion: Option<String>,
    pub head_sha: String,
    pub html_url: Option<String>,
    pub date: NaiveDate,
}

/// A result to record under a run attempt (the table assigns its id).
#[derive(Debug, Clone)]
pub struct NewResult {
    pub config: ConfigFields,
    pub benchmark_type: String,
    pub isl: Option<u64>,
    pub osl: Option<u64>,
    pub conc: u64,
    pub image: Option<String>,
    pub metrics: Map<String, Value>,
    pub error: Option<String>,
}

type ResultKey = (u64, u32, String, Option<u64>, Option<u64>, u64);

/// The three tables, rows in insertion order (as `SELECT *` returns them
/// and a dump holds them).
#[derive(Debug, Default)]
pub struct Tables {
    pub configs: Vec<ConfigRow>,
    pub workflow_runs: Vec<WorkflowRunRow>,
    pub benchmark_results: Vec<BenchmarkResultRow>,
    config_ids: HashMap<ConfigFields, u32>,
    run_ids: HashMap<(u64, u32), u64>,
    result_keys: HashSet<ResultKey>,
}

fn day(d: NaiveDate) -> String {
    d.format("%Y-%m-%d").to_string()
}

impl Tables {
    /// The id of the run attempt `(github_run_id, run_attempt)`, recorded
    /// first if new (the table's natural key: a second recording of the
    /// same attempt is the first one).
    pub fn run(&mut self, run: NewRun) -> u64 {
        if let Some(id) = self.run_ids.get(&(run.github_run_id, run.run_attempt)) {
            return *id;
        }
        let id = self.workflow_runs.len() as u64 + 1;
        self.run_ids
            .insert((run.github_run_id, run.run_attempt), id);
        self.workflow_runs.push(WorkflowRunRow {
            id,
            github_run_id: run.github_run_id,
            run_attempt: run.run_attempt,
            name: run.name,
            status: "completed".into(),
            conclusion: run.conclusion,
            head_sha: run.head_sha,
            head_branch: "main".into(),
            html_url: run.html_url,
            created_at: format!("{}T03:00:00Z", day(run.date)),
            date: run.date,
        });
        id
    }

    /// Marks a recorded run attempt failed (one of its points failed).
    pub fn fail_run(&mut self, workflow_run_id: u64) {
        if let Some(r) = self
            .workflow_runs
            .iter_mut()
            .find(|r| r.id == workflow_run_id)
        {
            r.conclusion = Some("failure".into());
        }
    }

    /// Records a result of the run attempt `workflow_run_id`, with its
    /// config, and the run's day (the table denormalizes it). A second
    /// result of the same attempt, config, type, lengths and concurrency is
    /// dropped, as the table's unique constraint makes an ingest do.
    pub fn insert(&mut self, workflow_run_id: u64, row: NewResult) -> bool {
        let Some(date) = self
            .workflow_runs
            .get((workflow_run_id as usize).wrapping_sub(1))
            .map(|r| r.date)
        else {
            return false;
        };
        let config_id = match self.config_ids.get(&row.config) {
            Some(id) => *id,
            None => {
                let id = self.configs.len() as u32 + 1;
                self.config_ids.insert(row.config.clone(), id);
                self.configs.push(ConfigRow {
                    id,
                    fields: row.config.clone(),
                });
                id
            }
        };
        let key = (
            workflow_run_id,
            config_id,
            row.benchmark_type.clone(),
            row.isl,
            row.osl,
            row.conc,
        );
        if !self.result_keys.insert(key) {
            return false;
        }
        self.benchmark_results.push(BenchmarkResultRow {
            id: self.benchmark_results.len() as u64 + 1,
            workflow_run_id,
            config_id,
            benchmark_type: row.benchmark_type,
            date,
            isl: row.isl,
            osl: row.osl,
            conc: row.conc,
            image: row.image,
            metrics: row.metrics,
            error: row.error,
        });
        true
    }

    /// The `latest_workflow_runs` view: the highest attempt of each GitHub
    /// run, by row id.
    pub fn latest_runs(&self) -> HashMap<u64, &WorkflowRunRow> {
        let mut by_github: HashMap<u64, &WorkflowRunRow> = HashMap::new();
        for r in &self.workflow_runs {
            let slot = by_github.entry(r.github_run_id).or_insert(r);
            if r.run_attempt > slot.run_attempt {
                *slot = r;
            }
        }
        by_github.into_values().map(|r| (r.id, r)).collect()
    }

    fn config(&self, id: u32) -> Option<&ConfigRow> {
        self.configs.get((id as usize).wrapping_sub(1))
    }

    /// `getLatestBenchmarks(model, date, exact)`: for every `(config, conc,
    /// isl, osl)` of the model, its newest successful result of a latest
    /// run attempt, at or before `date` (`exact`: on that day only; no
    /// date: of all).
    ///
    /// Among results of the same day the first recorded wins: the JSON
    /// provider sorts by day with a stable sort over the dump's row order.
    /// The SQL (`DISTINCT ON … ORDER BY … date DESC`) leaves that tie
    /// unordered, so the app's database may pick either; this follows the
    /// JSON provider so that the two can be compared row for row.
    pub fn latest_benchmarks(
        &self,
        model: &str,
        date: Option<NaiveDate>,
        exact: bool,
    ) -> Vec<Value> {
        let latest = self.latest_runs();
        let mut candidates: Vec<&BenchmarkResultRow> = self
            .benchmark_results
            .iter()
            .filter(|br| br.error.is_none())
            .filter(|br| {
                self.config(br.config_id)
                    .is_some_and(|c| c.fields.model == model)
            })
            .filter(|br| latest.contains_key(&br.workflow_run_id))
            .filter(|br| match date {
                Some(d) if exact => br.date == d,
                Some(d) => br.date <= d,
                None => true,
            })
            .collect();
        // Stable, like Array.prototype.sort.
        candidates.sort_by_key(|br| std::cmp::Reverse(br.date));
        let mut seen = HashSet::new();
        candidates
            .into_iter()
            .filter(|br| seen.insert((br.config_id, br.conc, br.isl, br.osl)))
            .filter_map(|br| {
                let c = self.config(br.config_id)?;
                let wr = latest.get(&br.workflow_run_id)?;
                Some(benchmark_row(br, c, wr))
            })
            .collect()
    }

    /// `getWorkflowRunsByDate(date)`: the latest attempts of that day with
    /// a conclusion, oldest first.
    pub fn runs_on(&self, date: NaiveDate) -> Vec<Value> {
        let mut runs: Vec<&WorkflowRunRow> = self
            .latest_runs()
            .into_values()
            .filter(|r| r.date == date && r.conclusion.is_some())
            .collect();
        runs.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        runs.into_iter()
            .map(|r| {
                json!({
                    // A bigint: the app's driver gives it as text.
                    "github_run_id": r.github_run_id.to_string(), "name": r.name,
                    "conclusion": r.conclusion, "run_attempt": r.run_attempt,
                    "html_url": r.html_url, "created_at": r.created_at, "date": day(r.date),
                })
            })
            .collect()
    }

    /// `getDateConfigs(date)`: the distinct model, lengths and config of
    /// the successful results of that day's latest attempts.
    pub fn configs_on(&self, date: NaiveDate) -> Vec<Value> {
        let latest = self.latest_runs();
        let mut out: Vec<Value> = Vec::new();
        for br in &self.benchmark_results {
            if br.error.is_some() || br.date != date || !latest.contains_key(&br.workflow_run_id) {
                continue;
            }
            let Some(c) = self.config(br.config_id) else {
                continue;
            };
            let c = &c.fields;
            let row = json!({
                "model": c.model, "isl": br.isl, "osl": br.osl, "precision": c.precision,
                "hardware": c.hardware, "framework": c.framework,
                "spec_method": c.spec_method, "disagg": c.disagg,
            });
            if !out.contains(&row) {
                out.push(row);
            }
        }
        out
    }

    /// The three tables as `dump-db.ts` writes them (`SELECT *` rows through
    /// `JSON.stringify`): file name → JSON text. Postgres gives `bigint` and
    /// `bigserial` columns as text, `date` and `timestamptz` columns as ISO
    /// instants.
    pub fn dump(&self) -> Vec<(&'static str, Value)> {
        let instant = |d: NaiveDate| format!("{}T00:00:00.000Z", day(d));
        let configs: Vec<Value> = self
            .configs
            .iter()
            .map(|c| serde_json::to_value(c).unwrap_or(Value::Null))
            .collect();
        let runs: Vec<Value> = self
            .workflow_runs
            .iter()
            .map(|r| {
                json!({
                    "id": r.id.to_string(), "github_run_id": r.github_run_id.to_string(),
                    "run_attempt": r.run_attempt, "name": r.name, "status": r.status,
                    "conclusion": r.conclusion, "head_sha": r.head_sha,
                    "head_branch": r.head_branch, "html_url": r.html_url,
                    "created_at": r.created_at.replace('Z', ".000Z"),
                    "run_started_at": r.created_at.replace('Z', ".000Z"),
                    "date": instant(r.date),
                })
            })
            .collect();
        let results: Vec<Value> = self
            .benchmark_results
            .iter()
            .map(|br| {
                json!({
                    "id": br.id.to_string(), "workflow_run_id": br.workflow_run_id.to_string(),
                    "config_id": br.config_id, "benchmark_type": br.benchmark_type,
                    "date": instant(br.date), "isl": br.isl, "osl": br.osl, "conc": br.conc,
                    "image": br.image, "metrics": br.metrics, "error": br.error,
                    "server_log_id": null,
                })
            })
            .collect();
        vec![
            ("configs.json", Value::Array(configs)),
            ("workflow_runs.json", Value::Array(runs)),
            ("benchmark_results.json", Value::Array(results)),
        ]
    }
}

/// A `BenchmarkRow` of the API: the config, the point, its image and
/// metrics, its day and its run attempt's address.
fn benchmark_row(br: &BenchmarkResultRow, c: &ConfigRow, wr: &WorkflowRunRow) -> Value {
    let c = &c.fields;
    json!({
        "hardware": c.hardware, "framework": c.framework, "model": c.model,
        "precision": c.precision, "spec_method": c.spec_method, "disagg": c.disagg,
        "is_multinode": c.is_multinode, "prefill_tp": c.prefill_tp, "prefill_ep": c.prefill_ep,
        "prefill_dp_attention": c.prefill_dp_attention,
        "prefill_num_workers": c.prefill_num_workers, "decode_tp": c.decode_tp,
        "decode_ep": c.decode_ep, "decode_dp_attention": c.decode_dp_attention,
        "decode_num_workers": c.decode_num_workers, "num_prefill_gpu": c.num_prefill_gpu,
        "num_decode_gpu": c.num_decode_gpu, "isl": br.isl, "osl": br.osl, "conc": br.conc,
        "image": br.image, "metrics": br.metrics, "date": day(br.date),
        "run_url": wr.html_url.as_ref().map(|u| format!("{u}/attempts/{}", wr.run_attempt)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(model: &str, tp: u64) -> ConfigFields {
        ConfigFields {
            hardware: "b200".into(),
            framework: "sglang".into(),
            model: model.into(),
            precision: "fp4".into(),
            spec_method: "none".into(),
            disagg: false,
            is_multinode: false,
            prefill_tp: tp,
            prefill_ep: 1,
            prefill_dp_attention: false,
            prefill_num_workers: 0,
            decode_tp: tp,
            decode_ep: 1,
            decode_dp_attention: false,
            decode_num_workers: 0,
            num_prefill_gpu: tp,
            num_decode_gpu: tp,
        }
    }

    fn d(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    fn run(t: &mut Tables, gh: u64, attempt: u32, date: &str) -> u64 {
        t.run(NewRun {
            github_run_id: gh,
            run_attempt: attempt,
            name: "Run Sweep".into(),
            conclusion: Some("success".into()),
            head_sha: "0".repeat(40),
            html_url: Some(format!("https://github.com/o/r/actions/runs/{gh}")),
            date: d(date),
        })
    }

    fn result(t: &mut Tables, run: u64, conc: u64, image: &str, error: bool) {
        t.insert(
            run,
            NewResult {
                config: config("demo", 4),
                benchmark_type: "single_turn".into(),
                isl: Some(1024),
                osl: Some(1024),
                conc,
                image: Some(image.into()),
                metrics: Map::new(),
                error: error.then(|| "failed".into()),
            },
        );
    }

    fn answered(rows: &[Value]) -> Vec<(u64, String, String)> {
        let mut v: Vec<_> = rows
            .iter()
            .map(|r| {
                (
                    r["conc"].as_u64().unwrap(),
                    r["image"].as_str().unwrap().to_owned(),
                    r["run_url"]
                        .as_str()
                        .unwrap()
                        .rsplit("runs/")
                        .next()
                        .unwrap()
                        .to_owned(),
                )
            })
            .collect();
        v.sort();
        v
    }

    #[test]
    fn each_point_keeps_its_newest_successful_row_of_a_latest_attempt() {
        let mut t = Tables::default();
        let a = run(&mut t, 100, 1, "2026-03-01");
        result(&mut t, a, 4, "old", false);
        result(&mut t, a, 8, "old", false);
        // A partial re-sweep: only c8, and c4 failed.
        let b = run(&mut t, 200, 1, "2026-03-03");
        result(&mut t, b, 8, "new", false);
        result(&mut t, b, 4, "new", true);
        // Attempt 1 of run 300 is superseded by attempt 2, which has no c4.
        let c1 = run(&mut t, 300, 1, "2026-03-04");
        result(&mut t, c1, 4, "gone", false);
        let c2 = run(&mut t, 300, 2, "2026-03-04");
        result(&mut t, c2, 8, "rerun", false);

        let rows = t.latest_benchmarks("demo", Some(d("2026-03-03")), false);
        assert_eq!(
            answered(&rows),
            [
                (4, "old".into(), "100/attempts/1".into()),
                (8, "new".into(), "200/attempts/1".into())
            ]
        );
        let rows = t.latest_benchmarks("demo", None, false);
        assert_eq!(
            answered(&rows),
            [
                (4, "old".into(), "100/attempts/1".into()),
                (8, "rerun".into(), "300/attempts/2".into())
            ]
        );
        let rows = t.latest_benchmarks("demo", Some(d("2026-03-03")), true);
        assert_eq!(
            answered(&rows),
            [(8, "new".into(), "200/attempts/1".into())]
        );
        assert!(t.latest_benchmarks("other", None, false).is_empty());
        assert!(
            t.latest_benchmarks("demo", Some(d("2026-02-28")), false)
                .is_empty()
        );
    }

    #[test]
    fn among_rows_of_one_day_the_first_recorded_wins() {
        let mut t = Tables::default();
        let a = run(&mut t, 900, 1, "2026-03-01");
        let b = run(&mut t, 100, 1, "2026-03-01");
        result(&mut t, a, 4, "first", false);
        result(&mut t, b, 4, "second", false);
        let rows = t.latest_benchmarks("demo", None, false);
        assert_eq!(
            answered(&rows),
            [(4, "first".into(), "900/attempts/1".into())]
        );
    }

    #[test]
    fn a_dump_serialises_ids_as_postgres_gives_them() {
        let mut t = Tables::default();
        let a = run(&mut t, 12345678901, 1, "2026-03-01");
        result(&mut t, a, 4, "img", false);
        result(&mut t, a, 4, "duplicate", false);
        let dump = t.dump();
        assert_eq!(dump[0].1[0]["id"], 1);
        assert_eq!(dump[1].1[0]["id"], "1");
        assert_eq!(dump[1].1[0]["github_run_id"], "12345678901");
        assert_eq!(dump[1].1[0]["date"], "2026-03-01T00:00:00.000Z");
        assert_eq!(dump[2].1[0]["workflow_run_id"], "1");
        assert_eq!(dump[2].1[0]["config_id"], 1);
        assert_eq!(dump[2].1.as_array().unwrap().len(), 1, "unique per attempt");
    }
}
