//! A deterministic stand-in for the InferenceX public API the lifecycle
//! freezes its baseline from (see configs/README.md#baseline-readiness-lifecycle-require_baseline): the published results of every
//! family on the repository's default branch, answered the way the real
//! API (InferenceX-app `api/v1/benchmarks`, `getLatestBenchmarks`) does.
//!
//! | Route | Answer |
//! | --- | --- |
//! | `GET /api/v1/benchmarks?model=<display name>[&date=<YYYY-MM-DD>][&exact=true]` | a JSON list of rows in the shape of `api-benchmarks.sample.json`; an unknown display name is 400 `{"error":"Unknown model"}` |
//! | `GET /api/v1/evaluations` | every published eval row (all models and days, newest day first) in the shape of InferenceX-app's `EvalRow`: config, `task`, `conc`, `metrics` (`em_strict`, `em_flexible`, `n_eff`), `date` and the run's `run_url`; no image |
//! | `GET /api/v1/workflow-info?date=<YYYY-MM-DD>` | `{"runs", "changelogs", "configs"}` of the runs published that day, in the shape of `api-workflow-info.sample.json` |
//! | `POST /_control/unpublished` | withholds results (below) |
//! | `POST /_control/published` | publishes another run (below) |
//!
//! The display name names the families whose `model-prefix`, full `model`
//! or last path segment of `model` (`demo/Demo-R1` → `Demo-R1`) it equals,
//! ignoring case; a name that names none is the API's "Unknown model".
//!
//! **Publications.** Results are published when a sweep runs, not daily.
//! Every family starts with one seeded run, published
//! [`Published::seeded_on`] its key: 2 to 9 days before
//! [`Published::today`] (deterministic per key; both can be set), with the
//! family's current image and every point. A run's rows carry its
//! publication `date`, its `run_url` (`…/actions/runs/<id>/attempts/1`)
//! and its `image`. The selection unit is the line `(key, isl, osl,
//! topology)`:
//! - `exact=true`: only rows of runs published on exactly `date`;
//! - `date` without `exact`: for each line, the newest run (latest day,
//!   then highest run id) published on or before `date` with data for the
//!   line, and every concurrency that run measured, nothing from older
//!   runs (a partial re-sweep truncates the line);
//! - no `date`: the same over every run (the latest).
//!
//! **Control.** `POST /_control/unpublished` `{"key": K, "conc": [N, …]}`
//! (no `conc`: the whole key; `{"clear": true}` publishes everything again)
//! withholds results: a withheld key answers no rows and no `configs`
//! entry (never benchmarked), withheld concurrencies answer no rows for
//! those points in any run. `POST /_control/published` `{"key": K, "conc":
//! [N, …]?, "image": I?, "date": "YYYY-MM-DD"?, "throughput": F?}` publishes
//! one more run of `key`: only those concurrencies (default every point),
//! run with image `I` (default the family's current image), on `date`
//! (default today), measuring `F` times the seeded throughput (default 1);
//! it answers `{"run_id", "date"}`; `{"clear": true}` drops every run
//! published this way. [`Published`] offers the same from Rust.

use axum::Json;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use chrono::{Days, NaiveDate, Utc};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use super::points::{self, FamilySpec, Point};
use super::results;
use crate::github::GithubState;

#[derive(Clone)]
struct Api {
    state: GithubState,
    repo: String,
    published: Published,
}

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
    /// The day it was published (`None`: [`Published::today`]).
    #[serde(default)]
    pub date: Option<NaiveDate>,
    /// What it measured against the seeded numbers: a factor on every
    /// point's throughput (`None`: 1, the same numbers). Real re-sweeps of
    /// one image differ a little; this is how a test gives a point a
    /// published history with a spread.
    #[serde(default)]
    pub throughput: Option<f64>,
}

#[derive(Debug, Clone)]
struct Run {
    key: String,
    conc: Option<BTreeSet<u64>>,
    image: Option<String>,
    date: NaiveDate,
    id: u64,
    throughput: Option<f64>,
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
}

/// What the API publishes: the seeded run of every key, the runs added
/// since, and what is withheld from all of them.
#[derive(Debug, Clone, Default)]
pub struct Published {
    book: Arc<Mutex<Book>>,
}

impl Published {
    /// Withholds every result of `key`.
    pub fn withhold_key(&self, key: &str) {
        self.lock().withheld.insert(key.to_owned(), None);
    }

    /// Withholds the points of `key` at these concurrencies.
    pub fn withhold_points(&self, key: &str, concurrencies: &[u64]) {
        let mut b = self.lock();
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
        self.lock().withheld.clear();
    }

    /// The API's today: the real UTC day unless [`Published::set_today`]
    /// moved it.
    pub fn today(&self) -> NaiveDate {
        self.lock().today.unwrap_or_else(|| Utc::now().date_naive())
    }

    /// Makes `date` the API's today (the seeded days move with it).
    pub fn set_today(&self, date: NaiveDate) {
        self.lock().today = Some(date);
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
        self.lock().seeded.insert(key.to_owned(), date);
    }

    /// Publishes one more run; returns its run id.
    pub fn publish(&self, sweep: Sweep) -> u64 {
        let mut b = self.lock();
        let date = sweep
            .date
            .unwrap_or_else(|| b.today.unwrap_or_else(|| Utc::now().date_naive()));
        let id = run_id(&format!("{}|{date}|{}", sweep.key, b.runs.len() + 1));
        b.runs.push(Run {
            key: sweep.key,
            conc: sweep.conc.map(|c| c.into_iter().collect()),
            image: sweep.image,
            date,
            id,
            throughput: sweep.throughput,
        });
        id
    }

    /// Drops every run [`Published::publish`] added.
    pub fn clear_runs(&self) {
        self.lock().runs.clear();
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

    /// Every run of `key`: the seeded one first.
    fn runs_of(&self, key: &str) -> Vec<Run> {
        let b = self.lock();
        let date = Self::seeded_in(&b, key);
        let seeded = Run {
            key: key.to_owned(),
            conc: None,
            image: None,
            date,
            id: run_id(&format!("{key}|{date}|0")),
            throughput: None,
        };
        std::iter::once(seeded)
            .chain(b.runs.iter().filter(|r| r.key == key).cloned())
            .collect()
    }

    fn key_withheld(&self, key: &str) -> bool {
        matches!(self.lock().withheld.get(key), Some(None))
    }

    fn point_withheld(&self, key: &str, conc: u64) -> bool {
        match self.lock().withheld.get(key) {
            Some(None) => true,
            Some(Some(set)) => set.contains(&conc),
            None => false,
        }
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
        .route("/_control/unpublished", post(control))
        .route("/_control/published", post(control_published))
        .with_state(Api {
            state,
            repo: repo.to_string(),
            published,
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
    let date = body.date.as_deref().map(parse_day).transpose()?;
    let date = date.unwrap_or_else(|| api.published.today());
    let id = api.published.publish(Sweep {
        key,
        conc: body.conc,
        image: body.image,
        date: Some(date),
        throughput: body.throughput.filter(|f| f.is_finite() && *f > 0.0),
    });
    Ok(Json(json!({"run_id": id, "date": date.format("%Y-%m-%d").to_string()})).into_response())
}

/// An error answer: status and message.
struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({"error": self.1}))).into_response()
    }
}

fn bad(message: String) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, message)
}

fn parse_day(d: &str) -> Result<NaiveDate, ApiError> {
    NaiveDate::parse_from_str(d, "%Y-%m-%d").map_err(|_| {
        bad(format!(
            "query parameter `date`: {d:?} is not a YYYY-MM-DD date"
        ))
    })
}

fn parse_date(date: Option<&str>) -> Result<NaiveDate, ApiError> {
    let Some(d) = date else {
        return Err(bad("query parameter `date` is required (YYYY-MM-DD)".into()));
    };
    parse_day(d)
}

/// Every family on the default branch, with the repository's HTML address.
async fn families(api: &Api) -> Result<(Vec<FamilySpec>, String), ApiError> {
    let (masters, html) = {
        let m = api.state.lock().await;
        let key = api.repo.to_ascii_lowercase();
        let Some(r) = m.repos.get(&key) else {
            return Err(ApiError(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("repository {} is not seeded", api.repo),
            ));
        };
        let head = r.resolve(&r.default_branch).unwrap_or_default();
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
        let html = m.html_base(&m.repo_url(&r.owner, &r.name));
        (masters, html)
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
    Ok((out, html))
}

fn model_matches(f: &FamilySpec, name: &str) -> bool {
    let name = name.trim().to_ascii_lowercase();
    if name.is_empty() {
        return false;
    }
    let last = f.model.rsplit('/').next().unwrap_or(&f.model);
    [f.model_prefix.as_str(), f.model.as_str(), last]
        .iter()
        .any(|c| c.to_ascii_lowercase() == name)
}

/// A GitHub-looking run id (11 digits, as today's are), stable for `seed`
/// so URLs in frozen baselines stay put.
fn run_id(seed: &str) -> u64 {
    let d = Sha256::digest(format!("published-sweep|{seed}"));
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    10_000_000_000 + u64::from_be_bytes(b) % 89_999_999_999
}

/// The API's selection unit within a key: everything but the concurrency.
type Line = (
    Option<u64>,
    Option<u64>,
    String,
    String,
    points::Workers,
    Option<points::Workers>,
);

fn line_of(p: &Point) -> Line {
    (
        p.isl,
        p.osl,
        p.spec_decoding.clone(),
        p.kv_offloading.clone(),
        p.decode,
        p.prefill,
    )
}

/// Which runs to answer from.
#[derive(Clone, Copy)]
enum Asked {
    /// Only runs of that day.
    Exact(NaiveDate),
    /// The newest run per line at or before the day (`None`: of all).
    AsOf(Option<NaiveDate>),
}

/// The rows `f` answers.
fn rows_of(api: &Api, f: &FamilySpec, html: &str, asked: Asked) -> Vec<Value> {
    let runs = api.published.runs_of(&f.key);
    let measured = |run: &Run, p: &Point| {
        run.conc.as_ref().is_none_or(|c| c.contains(&p.conc))
            && !api.published.point_withheld(&f.key, p.conc)
    };
    let row = |run: &Run, p: &Point| {
        let run_url = format!("{html}/actions/runs/{}/attempts/1", run.id);
        let day = run.date.format("%Y-%m-%d").to_string();
        let mut row = results::api_row(f, p, &day, &run_url);
        if let Some(image) = &run.image {
            row["image"] = Value::String(image.clone());
        }
        if let Some(factor) = run.throughput {
            for field in ["tput_per_gpu", "output_tput_per_gpu", "input_tput_per_gpu"] {
                if let Some(v) = row["metrics"][field].as_f64() {
                    row["metrics"][field] = json!(v * factor);
                }
            }
        }
        row
    };
    let cutoff = match asked {
        Asked::Exact(day) => {
            return runs
                .iter()
                .filter(|r| r.date == day)
                .flat_map(|run| {
                    f.points
                        .iter()
                        .filter(|p| measured(run, p))
                        .map(|p| row(run, p))
                        .collect::<Vec<_>>()
                })
                .collect();
        }
        Asked::AsOf(cutoff) => cutoff,
    };
    // The newest run with data for each line, at or before the cutoff.
    let mut chosen: HashMap<Line, &Run> = HashMap::new();
    for p in &f.points {
        let newest = runs
            .iter()
            .filter(|r| cutoff.is_none_or(|d| r.date <= d) && measured(r, p))
            .max_by_key(|r| (r.date, r.id));
        if let Some(run) = newest {
            let slot = chosen.entry(line_of(p)).or_insert(run);
            if (run.date, run.id) > (slot.date, slot.id) {
                *slot = run;
            }
        }
    }
    f.points
        .iter()
        .filter_map(|p| {
            let run = chosen.get(&line_of(p))?;
            measured(run, p).then(|| row(run, p))
        })
        .collect()
}

#[derive(Deserialize)]
struct BenchQuery {
    model: Option<String>,
    date: Option<String>,
    exact: Option<String>,
}

async fn benchmarks(
    State(api): State<Api>,
    Query(q): Query<BenchQuery>,
) -> Result<Response, ApiError> {
    let date = q.date.as_deref().map(parse_day).transpose()?;
    // As the real route: only the word `true` asks for one day.
    let exact = q.exact.as_deref() == Some("true");
    let asked = match (date, exact) {
        (Some(d), true) => Asked::Exact(d),
        (d, _) => Asked::AsOf(d),
    };
    let model = q.model.unwrap_or_default();
    let (families, html) = families(&api).await?;
    let named: Vec<&FamilySpec> = families
        .iter()
        .filter(|f| model_matches(f, &model))
        .collect();
    if named.is_empty() {
        return Err(bad("Unknown model".into()));
    }
    let rows: Vec<Value> = named
        .iter()
        .flat_map(|f| rows_of(&api, f, &html, asked))
        .collect();
    // The producer runs the rows name exist on the sandbox GitHub, with
    // the AgentX artifacts that name their dataset.
    super::producer::register(&api.state, &api.repo, &named, &rows).await;
    Ok(Json(Value::Array(rows)).into_response())
}

/// Every run's eval of every family not withheld: the eval's point must
/// have been measured by the run (a partial re-sweep without it published
/// no eval).
async fn evaluations(State(api): State<Api>) -> Result<Response, ApiError> {
    let (families, html) = families(&api).await?;
    let mut rows: Vec<(NaiveDate, Value)> = Vec::new();
    for f in families
        .iter()
        .filter(|f| !api.published.key_withheld(&f.key))
    {
        for run in api.published.runs_of(&f.key) {
            let day = run.date.format("%Y-%m-%d").to_string();
            let run_url = format!("{html}/actions/runs/{}", run.id);
            let measured = |p: &Point| {
                run.conc.as_ref().is_none_or(|c| c.contains(&p.conc))
                    && !api.published.point_withheld(&f.key, p.conc)
            };
            if let Some(row) = results::api_eval_row(f, &day, &run_url, measured) {
                rows.push((run.date, row));
            }
        }
    }
    rows.sort_by_key(|r| std::cmp::Reverse(r.0));
    Ok(Json(Value::Array(rows.into_iter().map(|(_, r)| r).collect())).into_response())
}

#[derive(Deserialize)]
struct InfoQuery {
    date: Option<String>,
}

async fn workflow_info(
    State(api): State<Api>,
    Query(q): Query<InfoQuery>,
) -> Result<Response, ApiError> {
    let date = parse_date(q.date.as_deref())?;
    let (families, html) = families(&api).await?;
    let day = date.format("%Y-%m-%d").to_string();
    let mut runs: BTreeMap<u64, Value> = BTreeMap::new();
    let mut configs: Vec<Value> = Vec::new();
    for f in families
        .iter()
        .filter(|f| !api.published.key_withheld(&f.key))
    {
        for run in api
            .published
            .runs_of(&f.key)
            .into_iter()
            .filter(|r| r.date == date)
        {
            runs.entry(run.id).or_insert_with(|| {
                json!({
                    "github_run_id": run.id.to_string(), "name": "Run Sweep - scheduled full sweep",
                    "conclusion": "success", "run_attempt": 1,
                    "html_url": format!("{html}/actions/runs/{}", run.id),
                    "created_at": format!("{day}T03:00:00Z"), "date": day,
                })
            });
            for p in f
                .points
                .iter()
                .filter(|p| run.conc.as_ref().is_none_or(|c| c.contains(&p.conc)))
            {
                let c = json!({
                    "model": f.model_prefix, "isl": p.isl, "osl": p.osl, "precision": f.precision,
                    "hardware": results::hardware_of_runner(&f.runner), "framework": f.framework,
                    "spec_method": p.spec_decoding, "disagg": p.prefill.is_some(),
                });
                if !configs.contains(&c) {
                    configs.push(c);
                }
            }
        }
    }
    Ok(Json(json!({
        "runs": runs.into_values().collect::<Vec<_>>(),
        "changelogs": [],
        "configs": configs,
    }))
    .into_response())
}
