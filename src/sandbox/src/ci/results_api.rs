//! A deterministic stand-in for InferenceX-app's public results API, the
//! one the lifecycle freezes its baseline from (see
//! configs/README.md#baseline-readiness-lifecycle-require_baseline): the
//! published results of every family on the repository's default branch,
//! kept in the app's own tables ([`tables`]) and answered with the app's
//! query logic and route rules.
//!
//! | Route | Answer |
//! | --- | --- |
//! | `GET /api/v1/benchmarks?model=<display name>[&date=<YYYY-MM-DD>][&exact=true]` | `getLatestBenchmarks`: for every `(config, conc, isl, osl)` of the model, its newest successful row of a latest run attempt (below) |
//! | `GET /api/v1/evaluations` | every published eval row (all models and days, newest day first) in the shape of the app's `EvalRow`: config, `task`, `conc`, `metrics` (`em_strict`, `em_flexible`, `n_eff`), `date` and the run's `html_url` as `run_url`; no image |
//! | `GET /api/v1/workflow-info?date=<YYYY-MM-DD>` | `{"runs", "changelogs", "configs"}` of that day's latest run attempts, in the shape of `api-workflow-info.sample.json`; another date format is 400 `{"error":"Invalid date format (YYYY-MM-DD required)"}` |
//! | `GET /api/openapi.json` | the OpenAPI 3 description; the `model` parameter of `/api/v1/benchmarks` lists the display names as its `enum` ([`names`]) |
//! | `POST /_control/unpublished`, `/_control/published`, `/_control/models` | what is published and named (below) |
//! | `GET /_control/dump` | the tables as the app's `db:dump` writes them: `{"configs.json": […], "workflow_runs.json": […], "benchmark_results.json": […]}` |
//!
//! **Answers** are what the app's `cachedJson` sends: JSON, gzip-compressed
//! with `Content-Encoding: gzip` whatever the request's `Accept-Encoding`
//! said ([`Published::set_gzip`] turns that off). Errors are plain JSON,
//! as `NextResponse.json`: an unknown display name is 400 `{"error":"Unknown
//! model"}`, a `date` the database cannot read 500 `{"error":"Internal server
//! error"}`.
//!
//! **Names.** `model` is looked up exactly (case and all) in a table of one
//! display name per DB model key, the master config's `model-prefix`
//! ([`names::DEFAULT_NAMES`]; the demo repository's `demo` is
//! `Klaud-Demo-Bench`); every row's `model` is that key.
//!
//! **Tables.** A config row is one distinct deployment (hardware, framework,
//! model key, precision, speculative method, parallelism and GPU counts); a
//! workflow run row is one attempt of one GitHub run (`github_run_id`,
//! `run_attempt`, `html_url`, `date`, `conclusion`); a benchmark result row
//! is one point of one attempt, with its config, `date`, lengths, `conc`,
//! `image`, `metrics` and `error` (set when the point failed).
//!
//! **Selection, per point.** `date` with `exact=true` (the word `true`
//! only): the newest row of each point published that day; `date` alone:
//! the newest at or before it; no `date`: the newest of all. Rows with an
//! `error` and rows of an attempt a later attempt of the same GitHub run
//! superseded are never answered. So after a partial re-sweep every point
//! keeps its own newest row, from whichever run and day that is; among rows
//! of one day the first recorded wins (the app's JSON provider; see
//! [`tables::Tables::latest_benchmarks`]). Each row's `run_url` is
//! `…/actions/runs/<id>/attempts/<n>`.
//!
//! **Publications.** Results are published when a sweep runs, not daily.
//! Every family starts with one seeded run, published
//! [`Published::seeded_on`] its key: 2 to 9 days before
//! [`Published::today`] (deterministic per key; both can be set), with the
//! family's current image and every point, recorded first in the
//! families' order. Runs published later are recorded after them, in
//! publication order.
//!
//! **Control.** `POST /_control/unpublished` `{"key": K, "conc": [N, …]}`
//! (no `conc`: the whole key; `{"clear": true}` publishes everything again)
//! withholds results: a withheld key has no rows and no config (never
//! benchmarked), withheld concurrencies have no rows in any run.
//! `POST /_control/published` `{"key": K, "conc": [N, …]?, "image": I?,
//! "date": "YYYY-MM-DD"?, "throughput": F?, "failed": [N, …]?,
//! "attempt_of": R?, "in_run": R?}` publishes one more run of `key`: only
//! those concurrencies (default every point), run with image `I` (default
//! the family's current image), on `date` (default today), measuring `F`
//! times the seeded throughput (default 1), with the points at `failed`
//! recorded with an error; `attempt_of` makes it the next attempt of GitHub
//! run `R` (its earlier attempts no longer count; default day: `R`'s),
//! `in_run` more rows of `R`'s latest attempt (on its day); it answers
//! `{"run_id", "date"}`; `{"clear": true}` drops every run published this
//! way. `POST /_control/models` `{"prefix": P, "name": N|null, "openapi":
//! bool?}` names a prefix or forgets its name ([`names::ModelNames::set`]:
//! `openapi: false` leaves a name out of the description's `enum`; with no
//! name, `openapi: true` keeps the forgotten name there) and answers
//! `{"names", "enum"}`. [`Published`] offers the same from Rust.

mod names;
pub mod tables;

use axum::Json;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use chrono::{Days, NaiveDate, Utc};
use flate2::Compression;
use flate2::write::GzEncoder;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::sync::{Arc, Mutex};

pub use names::{DEFAULT_NAMES, ModelNames};
use tables::{ConfigFields, NewResult, NewRun, Tables};

use super::points::{self, FamilySpec, Point};
use super::results;
use crate::github::GithubState;

#[derive(Clone)]
struct Api {
    state: GithubState,
    repo: String,
    published: Published,
    /// The families of the last default-branch head read, by that head:
    /// parsing the masters again for every question made a long series of
    /// questions slow.
    families: Arc<Mutex<Option<Parsed>>>,
}

/// A default-branch head and the families it holds.
type Parsed = (String, Arc<Vec<FamilySpec>>);

/// One more run published for a key (the control route's body, and
/// [`Published::publish`]'s argument).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Sweep {
    /// The config key.
    pub key: String,
    /// The concurrencies it measured (`None`: every point of the key).
    #[serde(default)]
    pub conc: Option<Vec<u64>>,
    /// The image it ran (`None`: the family's current image).
    #[serde(default)]
    pub image: Option<String>,
    /// The day it was published (`None`: [`Published::today`], or for
    /// another attempt of a run, that run's day).
    #[serde(default)]
    pub date: Option<NaiveDate>,
    /// What it measured against the seeded numbers: a factor on every
    /// point's throughput (`None`: 1, the same numbers). Real re-sweeps of
    /// one image differ a little; this is how a test gives a point a
    /// published history with a spread.
    #[serde(default)]
    pub throughput: Option<f64>,
}

/// Which workflow run a publication belongs to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RunOf {
    /// A new GitHub run, attempt 1.
    #[default]
    New,
    /// The next attempt of this GitHub run: the app then answers none of
    /// the run's earlier attempts, whatever they measured.
    Attempt(u64),
    /// More rows of this GitHub run's latest attempt (a run sweeps many
    /// keys).
    Join(u64),
}

/// A publication with everything a history may hold: a [`Sweep`], its
/// failed points and the run it belongs to.
#[derive(Debug, Clone, Default)]
pub struct Publication {
    pub sweep: Sweep,
    /// Concurrencies measured with an error (kept, never answered).
    pub failed: Vec<u64>,
    pub run: RunOf,
}

#[derive(Debug, Clone)]
struct Run {
    key: String,
    conc: Option<BTreeSet<u64>>,
    failed: BTreeSet<u64>,
    image: Option<String>,
    /// `None`: the day of the GitHub run's earlier attempt.
    date: Option<NaiveDate>,
    github_run_id: u64,
    attempt: u32,
    throughput: Option<f64>,
}

impl Run {
    fn measures(&self, conc: u64) -> bool {
        self.conc.as_ref().is_none_or(|c| c.contains(&conc))
    }
}

#[derive(Debug, Default)]
struct Book {
    /// Config key → `None` (the whole key was never benchmarked) or the
    /// concurrencies whose points have no published row.
    withheld: BTreeMap<String, Option<BTreeSet<u64>>>,
    /// What "today" is (`None`: the real UTC day).
    today: Option<NaiveDate>,
    /// Seeded publication days set by a test, by key.
    seeded: BTreeMap<String, NaiveDate>,
    /// Runs published after the seeded ones, in publication order.
    runs: Vec<Run>,
    names: ModelNames,
    /// Answers stay uncompressed (the app always compresses).
    uncompressed: bool,
    /// The tables last built, for the head and day they were built for:
    /// building them for every question made long series slow. Every
    /// change to what is published drops them.
    built: Option<Built>,
}

type Built = (String, NaiveDate, Arc<(Tables, Vec<RunView>)>);

/// What the API publishes: the seeded run of every key, the runs added
/// since, what is withheld from all of them, and the names it knows
/// models by.
#[derive(Debug, Clone, Default)]
pub struct Published {
    book: Arc<Mutex<Book>>,
}

/// One recorded run of one key, as the evaluations route reads it.
#[derive(Debug)]
struct RunView {
    key: String,
    github_run_id: u64,
    attempt: u32,
    date: NaiveDate,
    conc: Option<BTreeSet<u64>>,
    failed: BTreeSet<u64>,
}

impl Published {
    /// Withholds every result of `key`.
    pub fn withhold_key(&self, key: &str) {
        self.edit().withheld.insert(key.to_owned(), None);
    }

    /// Withholds the points of `key` at these concurrencies.
    pub fn withhold_points(&self, key: &str, concurrencies: &[u64]) {
        let mut b = self.edit();
        // A key withheld whole stays withheld whole.
        if let Some(set) = b
            .withheld
            .entry(key.to_owned())
            .or_insert_with(|| Some(BTreeSet::new()))
        {
            set.extend(concurrencies.iter().copied());
        }
    }

    /// Publishes everything withheld again.
    pub fn clear(&self) {
        self.edit().withheld.clear();
    }

    /// The API's today: the real UTC day unless [`Published::set_today`]
    /// moved it.
    pub fn today(&self) -> NaiveDate {
        self.lock().today.unwrap_or_else(|| Utc::now().date_naive())
    }

    /// Makes `date` the API's today (the seeded days move with it).
    pub fn set_today(&self, date: NaiveDate) {
        self.edit().today = Some(date);
    }

    /// The day the seeded run of `key` was published: 2 to 9 days before
    /// [`Published::today`], the same for a key every time, unless
    /// [`Published::set_seeded_on`] says otherwise.
    pub fn seeded_on(&self, key: &str) -> NaiveDate {
        let b = self.lock();
        Self::seeded_in(&b, key)
    }

    /// Publishes the seeded run of `key` on `date`.
    pub fn set_seeded_on(&self, key: &str, date: NaiveDate) {
        self.edit().seeded.insert(key.to_owned(), date);
    }

    /// The GitHub run id of the seeded run of `key`.
    pub fn seeded_run(&self, key: &str) -> u64 {
        let b = self.lock();
        seeded_run_id(key, Self::seeded_in(&b, key))
    }

    /// Publishes one more run; returns its run id.
    pub fn publish(&self, sweep: Sweep) -> u64 {
        self.publish_run(Publication {
            sweep,
            ..Publication::default()
        })
    }

    /// Publishes one more run, attempt or part of a run; returns its
    /// GitHub run id.
    pub fn publish_run(&self, p: Publication) -> u64 {
        let mut b = self.edit();
        let today = b.today.unwrap_or_else(|| Utc::now().date_naive());
        let last_attempt = |b: &Book, id: u64| {
            b.runs
                .iter()
                .filter(|r| r.github_run_id == id)
                .map(|r| r.attempt)
                .max()
                // The seeded runs, and runs whose earlier attempts
                // published nothing, are at attempt 1.
                .unwrap_or(1)
        };
        let (github_run_id, attempt, date) = match p.run {
            RunOf::New => {
                let date = p.sweep.date.unwrap_or(today);
                let id = run_id(&format!("{}|{date}|{}", p.sweep.key, b.runs.len() + 1));
                (id, 1, Some(date))
            }
            RunOf::Attempt(id) => (id, last_attempt(&b, id).saturating_add(1), p.sweep.date),
            // A run's rows share its day.
            RunOf::Join(id) => (id, last_attempt(&b, id), None),
        };
        b.runs.push(Run {
            key: p.sweep.key,
            conc: p.sweep.conc.map(|c| c.into_iter().collect()),
            failed: p.failed.into_iter().collect(),
            image: p.sweep.image,
            date,
            github_run_id,
            attempt,
            throughput: p.sweep.throughput,
        });
        github_run_id
    }

    /// Drops every run [`Published::publish`] added.
    pub fn clear_runs(&self) {
        self.edit().runs.clear();
    }

    /// Names `prefix` `name` for the route and the OpenAPI `enum` alike
    /// (`None`: both forget it).
    pub fn name_model(&self, prefix: &str, name: Option<&str>) {
        self.lock().names.set(prefix, name, name.is_some());
    }

    /// [`ModelNames::set`]: names `prefix` or forgets its name, with
    /// `listed` saying what the OpenAPI `enum` shows (a name the route
    /// knows but the description leaves out, or a forgotten name the
    /// description still lists).
    pub fn name_model_listed(&self, prefix: &str, name: Option<&str>, listed: bool) {
        self.lock().names.set(prefix, name, listed);
    }

    /// Every prefix → display name the route knows.
    pub fn model_names(&self) -> BTreeMap<String, String> {
        self.lock().names.table().clone()
    }

    /// The display names the OpenAPI description lists, sorted.
    pub fn openapi_enum(&self) -> Vec<String> {
        self.lock().names.listed()
    }

    /// Whether answers are gzip-compressed, as the app's always are (the
    /// default).
    pub fn gzip(&self) -> bool {
        !self.lock().uncompressed
    }

    /// Compresses answers (`true`, the default) or not.
    pub fn set_gzip(&self, on: bool) {
        self.lock().uncompressed = !on;
    }

    fn seeded_in(b: &Book, key: &str) -> NaiveDate {
        if let Some(d) = b.seeded.get(key) {
            return *d;
        }
        let today = b.today.unwrap_or_else(|| Utc::now().date_naive());
        let digest = Sha256::digest(format!("published-on|{key}"));
        let days_ago = 2 + u64::from(digest[0] % 8);
        today.checked_sub_days(Days::new(days_ago)).unwrap_or(today)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Book> {
        // A poisoned lock only means a panicking test thread; the book is
        // still whole.
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The book, to change what is published.
    fn edit(&self) -> std::sync::MutexGuard<'_, Book> {
        let mut b = self.lock();
        b.built = None;
        b
    }

    /// [`Published::build`], kept until the book, the head or the day
    /// changes.
    fn tables(
        &self,
        families: &[FamilySpec],
        head: &str,
        html: &str,
    ) -> Arc<(Tables, Vec<RunView>)> {
        let mut b = self.lock();
        let today = b.today.unwrap_or_else(|| Utc::now().date_naive());
        if let Some((at, day, built)) = &b.built
            && at == head
            && *day == today
        {
            return built.clone();
        }
        let built = Arc::new(Self::build(&b, families, html));
        b.built = Some((head.to_owned(), today, built.clone()));
        built
    }

    /// The tables as published over `families` (the default branch's),
    /// with every recorded run of a key.
    fn build(b: &Book, families: &[FamilySpec], html: &str) -> (Tables, Vec<RunView>) {
        let today = b.today.unwrap_or_else(|| Utc::now().date_naive());
        let by_key: HashMap<&str, &FamilySpec> =
            families.iter().map(|f| (f.key.as_str(), f)).collect();
        let mut seeded: Vec<Run> = Vec::new();
        for f in families {
            let date = Self::seeded_in(b, &f.key);
            seeded.push(Run {
                key: f.key.clone(),
                conc: None,
                failed: BTreeSet::new(),
                image: None,
                date: Some(date),
                github_run_id: seeded_run_id(&f.key, date),
                attempt: 1,
                throughput: None,
            });
        }
        let mut t = Tables::default();
        let mut views = Vec::new();
        let mut days: HashMap<u64, NaiveDate> = HashMap::new();
        for run in seeded.iter().chain(b.runs.iter()) {
            let date = run
                .date
                .or_else(|| days.get(&run.github_run_id).copied())
                .unwrap_or(today);
            days.entry(run.github_run_id).or_insert(date);
            let html_url = format!("{html}/actions/runs/{}", run.github_run_id);
            let head = Sha256::digest(format!("published-head|{}", run.github_run_id));
            let wr = t.run(NewRun {
                github_run_id: run.github_run_id,
                run_attempt: run.attempt,
                name: "Run Sweep - scheduled full sweep".into(),
                conclusion: Some("success".into()),
                head_sha: hex::encode(&head[..20]),
                html_url: Some(html_url),
                date,
            });
            let withheld = b.withheld.get(&run.key);
            if matches!(withheld, Some(None)) {
                continue;
            }
            let Some(f) = by_key.get(run.key.as_str()) else {
                continue;
            };
            views.push(RunView {
                key: run.key.clone(),
                github_run_id: run.github_run_id,
                attempt: run.attempt,
                date,
                conc: run.conc.clone(),
                failed: run.failed.clone(),
            });
            for p in &f.points {
                let held = matches!(withheld, Some(Some(c)) if c.contains(&p.conc));
                if !run.measures(p.conc) || held {
                    continue;
                }
                let failed = run.failed.contains(&p.conc);
                if failed {
                    t.fail_run(wr);
                }
                t.insert(wr, result_of(f, p, run, failed));
            }
        }
        (t, views)
    }
}

/// The GitHub run id of the seeded run of `key` published on `date`.
fn seeded_run_id(key: &str, date: NaiveDate) -> u64 {
    run_id(&format!("{key}|{date}|0"))
}

/// The result row `run` records for point `p` of `f`.
fn result_of(f: &FamilySpec, p: &Point, run: &Run, failed: bool) -> NewResult {
    // The API row of the seeded numbers carries the config as the app
    // stores it (hardware from the runner, GPU counts per role).
    let row = results::api_row(f, p, "", "");
    let text = |k: &str| row[k].as_str().unwrap_or_default().to_owned();
    let num = |k: &str| row[k].as_u64().unwrap_or(0);
    let flag = |k: &str| row[k].as_bool().unwrap_or(false);
    let config = ConfigFields {
        hardware: text("hardware"),
        framework: text("framework"),
        model: text("model"),
        precision: text("precision"),
        spec_method: text("spec_method"),
        disagg: flag("disagg"),
        is_multinode: flag("is_multinode"),
        prefill_tp: num("prefill_tp"),
        prefill_ep: num("prefill_ep"),
        prefill_dp_attention: flag("prefill_dp_attention"),
        prefill_num_workers: num("prefill_num_workers"),
        decode_tp: num("decode_tp"),
        decode_ep: num("decode_ep"),
        decode_dp_attention: flag("decode_dp_attention"),
        decode_num_workers: num("decode_num_workers"),
        num_prefill_gpu: num("num_prefill_gpu"),
        num_decode_gpu: num("num_decode_gpu"),
    };
    let mut metrics: Map<String, Value> = row["metrics"].as_object().cloned().unwrap_or_default();
    if let Some(factor) = run.throughput {
        for field in ["tput_per_gpu", "output_tput_per_gpu", "input_tput_per_gpu"] {
            if let Some(v) = metrics.get(field).and_then(Value::as_f64) {
                metrics.insert(field.into(), json!(v * factor));
            }
        }
    }
    NewResult {
        config,
        benchmark_type: if p.agentic() {
            "agentic".into()
        } else {
            "single_turn".into()
        },
        isl: p.isl,
        osl: p.osl,
        conc: p.conc,
        image: Some(run.image.clone().unwrap_or_else(|| text("image"))),
        metrics,
        error: failed.then(|| format!("benchmark at concurrency {} failed", p.conc)),
    }
}

/// The API's router over the families of `repo` (`owner/name`) in `state`,
/// publishing everything.
pub fn baseline_router(state: GithubState, repo: &str) -> Router {
    baseline_router_with(state, repo, Published::default())
}

/// The API's router, publishing what `published` says.
pub fn baseline_router_with(state: GithubState, repo: &str, published: Published) -> Router {
    Router::new()
        .route("/api/v1/benchmarks", get(benchmarks))
        .route("/api/v1/workflow-info", get(workflow_info))
        .route("/api/v1/evaluations", get(evaluations))
        .route("/api/openapi.json", get(openapi))
        .route("/_control/unpublished", post(control))
        .route("/_control/published", post(control_published))
        .route("/_control/models", post(control_models))
        .route("/_control/dump", get(control_dump))
        .with_state(Api {
            state,
            repo: repo.to_string(),
            published,
            families: Arc::default(),
        })
}

#[derive(Deserialize)]
struct ControlBody {
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    conc: Option<Vec<u64>>,
    #[serde(default)]
    clear: bool,
}

async fn control(
    State(api): State<Api>,
    Json(body): Json<ControlBody>,
) -> Result<Response, ApiError> {
    if body.clear {
        api.published.clear();
    }
    match (body.key, body.conc) {
        (Some(key), None) => api.published.withhold_key(&key),
        (Some(key), Some(conc)) => api.published.withhold_points(&key, &conc),
        (None, Some(_)) => return Err(bad("`conc` needs a `key`".into())),
        (None, None) if !body.clear => {
            return Err(bad("expected `key` (and `conc`) or `clear`".into()));
        }
        (None, None) => {}
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Deserialize)]
struct PublishBody {
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    conc: Option<Vec<u64>>,
    #[serde(default)]
    image: Option<String>,
    #[serde(default)]
    date: Option<String>,
    #[serde(default)]
    throughput: Option<f64>,
    #[serde(default)]
    failed: Option<Vec<u64>>,
    #[serde(default)]
    attempt_of: Option<u64>,
    #[serde(default)]
    in_run: Option<u64>,
    #[serde(default)]
    clear: bool,
}

async fn control_published(
    State(api): State<Api>,
    Json(body): Json<PublishBody>,
) -> Result<Response, ApiError> {
    if body.clear {
        api.published.clear_runs();
    }
    let Some(key) = body.key else {
        if body.clear {
            return Ok(StatusCode::NO_CONTENT.into_response());
        }
        return Err(bad("expected `key` or `clear`".into()));
    };
    let run = match (body.attempt_of, body.in_run) {
        (Some(_), Some(_)) => {
            return Err(bad("`attempt_of` and `in_run` exclude each other".into()));
        }
        (Some(id), None) => RunOf::Attempt(id),
        (None, Some(id)) => RunOf::Join(id),
        (None, None) => RunOf::New,
    };
    let date = body.date.as_deref().map(parse_day).transpose()?;
    let date = match (date, run) {
        (None, RunOf::New) => Some(api.published.today()),
        (d, _) => d,
    };
    let id = api.published.publish_run(Publication {
        sweep: Sweep {
            key,
            conc: body.conc,
            image: body.image,
            date,
            throughput: body.throughput.filter(|f| f.is_finite() && *f > 0.0),
        },
        failed: body.failed.unwrap_or_default(),
        run,
    });
    let day = date.map(|d| d.format("%Y-%m-%d").to_string());
    Ok(Json(json!({"run_id": id, "date": day})).into_response())
}

#[derive(Deserialize)]
struct ModelsBody {
    prefix: String,
    name: Option<String>,
    #[serde(default)]
    openapi: Option<bool>,
}

async fn control_models(
    State(api): State<Api>,
    Json(body): Json<ModelsBody>,
) -> Result<Response, ApiError> {
    let fits = |what: &str, s: &str| {
        if s.is_empty() || s.len() > names::MAX_NAME_LEN {
            Err(bad(format!(
                "`{what}` must be 1 to {} bytes",
                names::MAX_NAME_LEN
            )))
        } else {
            Ok(())
        }
    };
    fits("prefix", &body.prefix)?;
    if let Some(n) = &body.name {
        fits("name", n)?;
    }
    let listed = body.openapi.unwrap_or(body.name.is_some());
    api.published
        .name_model_listed(&body.prefix, body.name.as_deref(), listed);
    Ok(Json(json!({
        "names": api.published.model_names(),
        "enum": api.published.openapi_enum(),
    }))
    .into_response())
}

async fn control_dump(State(api): State<Api>) -> Result<Response, ApiError> {
    let (families, html, head) = families(&api).await?;
    let built = api.published.tables(&families, &head, &html);
    let tables = &built.0;
    let files: Map<String, Value> = tables
        .dump()
        .into_iter()
        .map(|(name, rows)| (name.to_owned(), rows))
        .collect();
    Ok(Json(Value::Object(files)).into_response())
}

/// An error answer: status and message, plain JSON as `NextResponse.json`.
struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({"error": self.1}))).into_response()
    }
}

fn bad(message: String) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, message)
}

/// The app's catch-all answer when its query throws.
fn internal() -> ApiError {
    ApiError(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Internal server error".into(),
    )
}

fn parse_day(d: &str) -> Result<NaiveDate, ApiError> {
    NaiveDate::parse_from_str(d, "%Y-%m-%d").map_err(|_| {
        bad(format!(
            "query parameter `date`: {d:?} is not a YYYY-MM-DD date"
        ))
    })
}

/// A successful answer as the app's `cachedJson` sends it: gzip whatever
/// the request accepts, cached by the CDN for a day.
fn answer(api: &Api, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_else(|_| b"null".to_vec());
    let headers = [
        (header::CONTENT_TYPE, "application/json"),
        (header::CACHE_CONTROL, "public, max-age=0, s-maxage=86400"),
    ];
    if !api.published.gzip() {
        return (headers, bytes).into_response();
    }
    // The level is invisible to clients; the fastest keeps the unoptimized
    // simulator quick.
    let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
    // Writing into a Vec cannot fail.
    let compressed = gz
        .write_all(&bytes)
        .and_then(|()| gz.finish())
        .unwrap_or_default();
    (headers, [(header::CONTENT_ENCODING, "gzip")], compressed).into_response()
}

/// Every family on the default branch, with the repository's HTML address
/// and the head read.
async fn families(api: &Api) -> Result<(Arc<Vec<FamilySpec>>, String, String), ApiError> {
    let (head, masters, html) = {
        let m = api.state.lock().await;
        let key = api.repo.to_ascii_lowercase();
        let Some(r) = m.repos.get(&key) else {
            return Err(ApiError(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("repository {} is not seeded", api.repo),
            ));
        };
        let head = r.resolve(&r.default_branch).unwrap_or_default();
        let html = m.html_base(&m.repo_url(&r.owner, &r.name));
        let cached = api
            .families
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some((_, families)) = cached.filter(|(at, _)| *at == head) {
            return Ok((families, html, head));
        }
        let prefix = if r
            .objects
            .commits
            .get(&head)
            .and_then(|c| r.objects.lookup(&c.tree, "inferencex-e2e"))
            .is_some_and(|e| e.is_tree())
        {
            "inferencex-e2e/"
        } else {
            ""
        };
        let masters = super::runner::masters_at(r, &head, prefix);
        (head, masters, html)
    };
    let mut out = Vec::new();
    for (file, text) in &masters {
        let doc = match points::parse_master(file, text) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(error = %e, "baseline api: skipping a master that does not parse");
                continue;
            }
        };
        let Some(entries) = doc.as_object() else {
            continue;
        };
        for key in entries.keys() {
            match points::family_spec(file, key, &doc) {
                Ok(f) => out.push(f),
                Err(e) => tracing::warn!(error = %e, "baseline api: skipping a family"),
            }
        }
    }
    let out = Arc::new(out);
    *api.families.lock().unwrap_or_else(|e| e.into_inner()) = Some((head.clone(), out.clone()));
    Ok((out, html, head))
}

/// A GitHub-looking run id (11 digits, as today's are), stable for `seed`
/// so URLs in frozen baselines stay put.
fn run_id(seed: &str) -> u64 {
    let d = Sha256::digest(format!("published-sweep|{seed}"));
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    10_000_000_000 + u64::from_be_bytes(b) % 89_999_999_999
}

#[derive(Deserialize)]
struct BenchQuery {
    model: Option<String>,
    date: Option<String>,
    exact: Option<String>,
}

/// The day a `date` parameter names, as the app's query reads it: empty is
/// no date; a day, or an instant whose first ten characters are one, is
/// that day; anything else makes the database's `::date` cast throw.
fn query_day(date: Option<&str>) -> Result<Option<NaiveDate>, ApiError> {
    let Some(d) = date.filter(|d| !d.is_empty()) else {
        return Ok(None);
    };
    let (Some(head), Some(rest)) = (d.get(..10), d.get(10..)) else {
        return Err(internal());
    };
    let day = NaiveDate::parse_from_str(head, "%Y-%m-%d").map_err(|_| internal())?;
    if !(rest.is_empty() || rest.starts_with('T') || rest.starts_with(' ')) {
        return Err(internal());
    }
    Ok(Some(day))
}

async fn benchmarks(
    State(api): State<Api>,
    Query(q): Query<BenchQuery>,
) -> Result<Response, ApiError> {
    let model = q.model.unwrap_or_default();
    let Some(key) = api
        .published
        .lock()
        .names
        .prefix_of(&model)
        .map(str::to_owned)
    else {
        return Err(bad("Unknown model".into()));
    };
    let date = query_day(q.date.as_deref())?;
    // As the real route: only the word `true` asks for one day.
    let exact = q.exact.as_deref() == Some("true");
    let (families, html, head) = families(&api).await?;
    let built = api.published.tables(&families, &head, &html);
    let tables = &built.0;
    let rows = tables.latest_benchmarks(&key, date, exact);
    // The producer runs the rows name exist on the sandbox GitHub, with
    // the AgentX artifacts that name their dataset.
    let named: Vec<&FamilySpec> = families.iter().filter(|f| f.model_prefix == key).collect();
    super::producer::register(&api.state, &api.repo, &named, &rows).await;
    Ok(answer(&api, &Value::Array(rows)))
}

async fn openapi(State(api): State<Api>) -> Response {
    let doc = api.published.lock().names.openapi();
    answer(&api, &doc)
}

/// Every eval of the latest run attempts of every family not withheld:
/// the eval's point must have been measured, without an error, by the
/// attempt (a partial re-sweep without it published no eval).
async fn evaluations(State(api): State<Api>) -> Result<Response, ApiError> {
    let (families, html, head) = families(&api).await?;
    let built = api.published.tables(&families, &head, &html);
    let (tables, views) = (&built.0, &built.1);
    let latest: HashMap<u64, u32> = tables
        .latest_runs()
        .into_values()
        .map(|r| (r.github_run_id, r.run_attempt))
        .collect();
    let by_key: HashMap<&str, &FamilySpec> = families.iter().map(|f| (f.key.as_str(), f)).collect();
    let mut rows: Vec<(NaiveDate, Value)> = Vec::new();
    for run in views
        .iter()
        .filter(|v| latest.get(&v.github_run_id) == Some(&v.attempt))
    {
        let Some(f) = by_key.get(run.key.as_str()) else {
            continue;
        };
        let day = run.date.format("%Y-%m-%d").to_string();
        let run_url = format!("{html}/actions/runs/{}", run.github_run_id);
        let measured = |p: &Point| {
            run.conc.as_ref().is_none_or(|c| c.contains(&p.conc))
                && !run.failed.contains(&p.conc)
                && !api.published.point_withheld(&f.key, p.conc)
        };
        if let Some(row) = results::api_eval_row(f, &day, &run_url, measured) {
            rows.push((run.date, row));
        }
    }
    rows.sort_by_key(|r| std::cmp::Reverse(r.0));
    let rows: Vec<Value> = rows.into_iter().map(|(_, r)| r).collect();
    Ok(answer(&api, &Value::Array(rows)))
}

impl Published {
    fn point_withheld(&self, key: &str, conc: u64) -> bool {
        match self.lock().withheld.get(key) {
            Some(None) => true,
            Some(Some(set)) => set.contains(&conc),
            None => false,
        }
    }
}

#[derive(Deserialize)]
struct InfoQuery {
    date: Option<String>,
}

async fn workflow_info(
    State(api): State<Api>,
    Query(q): Query<InfoQuery>,
) -> Result<Response, ApiError> {
    let date = q.date.unwrap_or_default();
    let well_formed = date.len() == 10
        && date.bytes().enumerate().all(|(i, c)| {
            if i == 4 || i == 7 {
                c == b'-'
            } else {
                c.is_ascii_digit()
            }
        });
    if !date.is_empty() && !well_formed {
        return Err(bad("Invalid date format (YYYY-MM-DD required)".into()));
    }
    let (families, html, head) = families(&api).await?;
    let built = api.published.tables(&families, &head, &html);
    let tables = &built.0;
    let (runs, configs) = if date.is_empty() {
        // The JSON provider finds nothing of no day.
        (Vec::new(), Vec::new())
    } else {
        let day = NaiveDate::parse_from_str(&date, "%Y-%m-%d").map_err(|_| internal())?;
        (tables.runs_on(day), tables.configs_on(day))
    };
    Ok(answer(
        &api,
        &json!({"runs": runs, "changelogs": [], "configs": configs}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_date_parameter_reads_as_the_apps_query_reads_it() {
        assert_eq!(query_day(None).ok(), Some(None));
        assert_eq!(query_day(Some("")).ok(), Some(None));
        let d = NaiveDate::from_ymd_opt(2026, 9, 1);
        assert_eq!(query_day(Some("2026-09-01")).ok(), Some(d));
        assert_eq!(query_day(Some("2026-09-01T12:00:00Z")).ok(), Some(d));
        for bad in [
            "yesterday",
            "2026-09-0",
            "2026-09-01x",
            "2026-09-é1",
            "２０２６-09-01",
        ] {
            assert!(query_day(Some(bad)).is_err(), "{bad}");
        }
    }
}
