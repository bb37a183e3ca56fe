//! A deterministic stand-in for the InferenceX public API the lifecycle
//! freezes its baseline from (spec §3.6): the "published result of the
//! current image" of every family on the repository's default branch.
//!
//! | Route | Answer |
//! | --- | --- |
//! | `GET /api/v1/benchmarks?model=<display name>&date=<YYYY-MM-DD>&exact=true` | a JSON list of rows in the shape of `api-benchmarks.sample.json`, one per point of every family whose model matches |
//! | `GET /api/v1/workflow-info?date=<YYYY-MM-DD>` | `{"runs", "changelogs", "configs"}` in the shape of `api-workflow-info.sample.json` |
//!
//! The display name matches a family when it equals (ignoring case) its
//! `model-prefix`, its full `model`, or the last path segment of `model`
//! (`demo/Demo-R1` → `Demo-R1`); without `exact=true` a substring of one of
//! those is enough. Every date answers the same numbers (those of
//! [`super::results::baseline_metrics`]), dated with the date asked. Bad
//! queries get 400 with `{"error": …}` naming the parameter.
//!
//! What is published can be narrowed through [`Published`] (or the control
//! route `POST /_control/unpublished` `{"key": K, "conc": [N, …]}`; no
//! `conc`: the whole key; `{"clear": true}` publishes everything again):
//! a withheld key answers no rows and no `configs` entry (never
//! benchmarked), withheld concurrencies answer no rows for those points
//! (benchmarked, not published).

use axum::Json;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use chrono::NaiveDate;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use super::points::{self, FamilySpec};
use super::results;
use crate::github::GithubState;

#[derive(Clone)]
struct Api {
    state: GithubState,
    repo: String,
    published: Published,
}

/// Which results the API withholds: config key → `None` (the whole key was
/// never benchmarked) or the concurrencies whose points have no published
/// row.
#[derive(Debug, Clone, Default)]
pub struct Published {
    withheld: Arc<Mutex<BTreeMap<String, Option<BTreeSet<u64>>>>>,
}

impl Published {
    /// Withholds every result of `key`.
    pub fn withhold_key(&self, key: &str) {
        self.lock().insert(key.to_owned(), None);
    }

    /// Withholds the points of `key` at these concurrencies.
    pub fn withhold_points(&self, key: &str, concurrencies: &[u64]) {
        let mut w = self.lock();
        // A key withheld whole stays withheld whole.
        if let Some(set) = w
            .entry(key.to_owned())
            .or_insert_with(|| Some(BTreeSet::new()))
        {
            set.extend(concurrencies.iter().copied());
        }
    }

    /// Publishes everything again.
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Option<BTreeSet<u64>>>> {
        // A poisoned lock only means a panicking test thread; the map is
        // still whole.
        self.withheld.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn key_withheld(&self, key: &str) -> bool {
        matches!(self.lock().get(key), Some(None))
    }

    fn point_withheld(&self, key: &str, conc: u64) -> bool {
        match self.lock().get(key) {
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

/// The API's router, withholding what `published` says.
pub fn baseline_router_with(state: GithubState, repo: &str, published: Published) -> Router {
    Router::new()
        .route("/api/v1/benchmarks", get(benchmarks))
        .route("/api/v1/workflow-info", get(workflow_info))
        .route("/_control/unpublished", post(control))
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

fn parse_date(date: Option<&str>) -> Result<NaiveDate, ApiError> {
    let Some(d) = date else {
        return Err(bad("query parameter `date` is required (YYYY-MM-DD)".into()));
    };
    NaiveDate::parse_from_str(d, "%Y-%m-%d").map_err(|_| {
        bad(format!(
            "query parameter `date`: {d:?} is not a YYYY-MM-DD date"
        ))
    })
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

fn model_matches(f: &FamilySpec, name: &str, exact: bool) -> bool {
    let name = name.trim().to_ascii_lowercase();
    if name.is_empty() {
        return false;
    }
    let last = f.model.rsplit('/').next().unwrap_or(&f.model);
    [f.model_prefix.as_str(), f.model.as_str(), last]
        .iter()
        .map(|c| c.to_ascii_lowercase())
        .any(|c| if exact { c == name } else { c.contains(&name) })
}

/// A run id that is stable for a date, so URLs in frozen baselines stay put.
fn run_id_for(date: &NaiveDate) -> u64 {
    let d = Sha256::digest(format!("published-sweep|{date}"));
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    // GitHub run ids are 11 digits today.
    10_000_000_000 + u64::from_be_bytes(b) % 89_999_999_999
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
    let date = parse_date(q.date.as_deref())?;
    let Some(model) = q.model.filter(|m| !m.trim().is_empty()) else {
        return Err(bad(
            "query parameter `model` is required (the model's display name)".into(),
        ));
    };
    let exact = match q.exact.as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(bad(format!(
                "query parameter `exact`: {other:?} is not true or false"
            )));
        }
    };
    let (families, html) = families(&api).await?;
    let run_url = format!("{html}/actions/runs/{}/attempts/1", run_id_for(&date));
    let date = date.format("%Y-%m-%d").to_string();
    let rows: Vec<Value> = families
        .iter()
        .filter(|f| model_matches(f, &model, exact))
        .flat_map(|f| {
            f.points
                .iter()
                .filter(|p| !api.published.point_withheld(&f.key, p.conc))
                .map(|p| results::api_row(f, p, &date, &run_url))
                .collect::<Vec<_>>()
        })
        .collect();
    Ok(Json(Value::Array(rows)).into_response())
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
    let id = run_id_for(&date);
    let day = date.format("%Y-%m-%d").to_string();
    let mut configs: Vec<Value> = Vec::new();
    for f in families
        .iter()
        .filter(|f| !api.published.key_withheld(&f.key))
    {
        for p in &f.points {
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
    Ok(Json(json!({
        "runs": [{
            "github_run_id": id.to_string(), "name": "Run Sweep - scheduled full sweep",
            "conclusion": "success", "run_attempt": 1,
            "html_url": format!("{html}/actions/runs/{id}"),
            "created_at": format!("{day}T03:00:00Z"), "date": day,
        }],
        "changelogs": [],
        "configs": configs,
    }))
    .into_response())
}
