//! A simulator of the private cluster-status API the incumbent reads
//! (`GET /api/status/clusters` with a Bearer key; see configs/README.md#shared-clusters-capacity), with a control
//! route to change what it answers.
//!
//! Answers are generated at request time from the state, like the real
//! dashboard: `generatedAt` is now, each cluster's `observedAt` and
//! `receivedAt` a little earlier, and node counts that add up.
//!
//! Control (no key; loopback only):
//! - `GET /_control/clusters`: the state as JSON;
//! - `POST /_control/clusters/{id}` `{"state": "idle"|"busy"|"stale"|"down"}`
//!   sets one cluster (an unknown id adds it);
//! - `POST /_control/answer` `{"answer": "ok"|"unreachable"|"invalid"|"old"|"redirect"}`
//!   changes the whole answer: 503, node counts that do not add up, a
//!   reading ten minutes old, or a 302 to another origin.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{SecondsFormat, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The path the API answers on.
pub const PATH: &str = "/api/status/clusters";

/// What one cluster reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClusterState {
    /// Operational, most nodes idle.
    Idle,
    /// Operational, every node allocated.
    Busy,
    /// The reading is stale.
    Stale,
    /// Under maintenance.
    Down,
}

/// What the whole answer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AnswerMode {
    /// A good answer.
    Ok,
    /// 503 Service Unavailable.
    Unreachable,
    /// Node counts that do not add up.
    Invalid,
    /// `generatedAt` ten minutes ago.
    Old,
    /// A redirect to another origin.
    Redirect,
}

#[derive(Debug)]
struct Inner {
    clusters: BTreeMap<String, ClusterState>,
    mode: AnswerMode,
    reads: u64,
}

/// The simulator's state.
#[derive(Debug, Clone)]
pub struct CapacitySim {
    key: String,
    inner: Arc<Mutex<Inner>>,
}

impl CapacitySim {
    /// A simulator accepting `key`, reporting `clusters` as idle.
    pub fn new(key: &str, clusters: impl IntoIterator<Item = String>) -> Self {
        Self {
            key: key.to_owned(),
            inner: Arc::new(Mutex::new(Inner {
                clusters: clusters
                    .into_iter()
                    .map(|c| (c, ClusterState::Idle))
                    .collect(),
                mode: AnswerMode::Ok,
                reads: 0,
            })),
        }
    }

    /// The clusters of a repository's `configs/runners.yaml` text: every
    /// node name without its `_NN` suffix (how the dashboard names them).
    pub fn clusters_of_runners(text: &str) -> Vec<String> {
        klaud_planner::capacity::RunnerClusters::parse("configs/runners.yaml", text)
            .map(|r| r.all())
            .unwrap_or_default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sets one cluster's state (adding it when unknown).
    pub fn set_cluster(&self, id: &str, state: ClusterState) {
        self.lock().clusters.insert(id.to_owned(), state);
    }

    /// Sets what the whole answer is.
    pub fn set_answer(&self, mode: AnswerMode) {
        self.lock().mode = mode;
    }

    /// How many authorized reads were answered.
    pub fn reads(&self) -> u64 {
        self.lock().reads
    }

    fn answer(&self) -> Result<Value, AnswerMode> {
        let mut inner = self.lock();
        inner.reads += 1;
        let now = Utc::now();
        let generated = match inner.mode {
            AnswerMode::Ok | AnswerMode::Invalid => now,
            AnswerMode::Old => now - TimeDelta::minutes(10),
            m => return Err(m),
        };
        let at =
            |d: i64| (generated - TimeDelta::seconds(d)).to_rfc3339_opts(SecondsFormat::Secs, true);
        let clusters: Vec<Value> = inner
            .clusters
            .iter()
            .map(|(id, state)| {
                let (alloc, mixed, idle, status, stale) = match state {
                    ClusterState::Idle => (2, 1, 5, "operational", false),
                    ClusterState::Busy => (7, 1, 0, "operational", false),
                    ClusterState::Stale => (2, 1, 5, "operational", true),
                    ClusterState::Down => (0, 0, 0, "maintenance", false),
                };
                let down = 8 - alloc - mixed - idle;
                let total = if inner.mode == AnswerMode::Invalid {
                    9
                } else {
                    8
                };
                json!({
                    "clusterId": id, "stale": stale, "status": status,
                    "observedAt": at(20), "receivedAt": at(10),
                    "summary": {"totalNodes": total, "allocatedNodes": alloc,
                                "mixedNodes": mixed, "idleNodes": idle,
                                "downNodes": down, "otherNodes": 0}
                })
            })
            .collect();
        Ok(json!({
            "kind": "inferencex.status.clusters",
            "generatedAt": generated.to_rfc3339_opts(SecondsFormat::Secs, true),
            "data": {"available": true, "clusters": clusters}
        }))
    }
}

async fn clusters(State(sim): State<CapacitySim>, headers: HeaderMap) -> Response {
    let authorized = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|k| k == sim.key);
    if !authorized {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            Json(json!({"error": "unauthorized"})),
        )
            .into_response();
    }
    match sim.answer() {
        Ok(v) => Json(v).into_response(),
        Err(AnswerMode::Redirect) => (
            StatusCode::FOUND,
            [(
                header::LOCATION,
                "http://elsewhere.invalid/api/status/clusters",
            )],
        )
            .into_response(),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": "cluster status unavailable"})),
        )
            .into_response(),
    }
}

#[derive(Deserialize)]
struct SetCluster {
    state: ClusterState,
}

#[derive(Deserialize)]
struct SetAnswer {
    answer: AnswerMode,
}

async fn control_state(State(sim): State<CapacitySim>) -> Json<Value> {
    let inner = sim.lock();
    Json(json!({"clusters": inner.clusters, "answer": inner.mode, "reads": inner.reads}))
}

async fn control_cluster(
    State(sim): State<CapacitySim>,
    Path(id): Path<String>,
    Json(body): Json<SetCluster>,
) -> StatusCode {
    sim.set_cluster(&id, body.state);
    StatusCode::NO_CONTENT
}

async fn control_answer(State(sim): State<CapacitySim>, Json(body): Json<SetAnswer>) -> StatusCode {
    sim.set_answer(body.answer);
    StatusCode::NO_CONTENT
}

/// The API and its control routes.
pub fn router(sim: CapacitySim) -> Router {
    Router::new()
        .route(PATH, get(clusters))
        .route("/_control/clusters", get(control_state))
        .route("/_control/clusters/{id}", post(control_cluster))
        .route("/_control/answer", post(control_answer))
        .with_state(sim)
}
