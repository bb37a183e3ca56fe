//! The read-only status dashboard: one server-rendered HTML page, the same
//! data as JSON (`/api/v1/status`), Prometheus text (`/metrics`) and
//! `/healthz`.
//!
//! The daemon publishes a [`StatusSnapshot`] through a `watch` channel after
//! every change; the dashboard only renders the latest one, so a page load
//! never touches GitHub or a registry. Snapshots are built from public state
//! only (logins, refs, URLs, counts): no credential is ever part of one.

mod html;
mod metrics;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio::sync::watch;

/// Default listen address: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8723";

/// Everything the dashboard shows, at one moment.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StatusSnapshot {
    /// When the snapshot was taken.
    pub generated_at: Option<DateTime<Utc>>,
    /// Klaud's version.
    pub version: String,
    /// The bot login Klaud acts as.
    pub bot_login: String,
    /// One entry per repository this instance serves.
    pub repositories: Vec<RepositoryStatus>,
    /// GitHub rate-limit budgets, per resource.
    pub github_budget: Vec<RateBudgetRow>,
    /// Registry requests made since start, by kind.
    pub registry_requests: klaud_planner::registry::RequestCounts,
    /// Waves run since start.
    pub waves_total: u64,
    /// When the next planner wave fires.
    pub next_wave: Option<DateTime<Utc>>,
    /// Recent errors, newest first (messages never carry credentials).
    pub recent_errors: Vec<EventRow>,
}

/// The state of one benchmark repository.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RepositoryStatus {
    /// `owner/name`.
    pub name: String,
    /// Web URL of the repository.
    pub url: String,
    /// Families with their staleness and candidate, from the latest plan.
    pub families: Vec<FamilyRow>,
    /// Claim refs on GitHub.
    pub claims: Vec<ClaimRow>,
    /// Candidates Klaud is working on or finished recently.
    pub candidates: Vec<CandidateRow>,
    /// Recent outcomes, newest first.
    pub outcomes: Vec<OutcomeRow>,
}

/// A family in the latest plan.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FamilyRow {
    pub family: String,
    pub id: String,
    /// `up-to-date`, `stale-newer`, `stale-pruned`, `unknown-track`, `error`.
    pub status: String,
    pub current: String,
    pub candidate: Option<String>,
    /// How long the current image has been stale, in hours, when known.
    pub stale_hours: Option<i64>,
    pub reasons: Vec<String>,
}

/// A claim ref.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ClaimRow {
    pub family_id: String,
    pub family: Option<String>,
    /// Instance uuid (Klaud) or `None` for the old helper's claims.
    pub owner: Option<String>,
    pub run_id: Option<u64>,
    pub lease_until: Option<DateTime<Utc>>,
    pub fence: Option<u64>,
    pub holder: Option<String>,
    /// Set when the claim does not parse (planning is then refused).
    pub parse_error: Option<String>,
}

/// A candidate.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CandidateRow {
    pub id: String,
    pub family: String,
    pub image: String,
    /// The state machine's step (`prepared`, `smoke`, `final-sweep`, …).
    pub state: String,
    /// E.g. `Repair 2/5`.
    pub attempt: Option<String>,
    pub pull_request: Option<LinkRow>,
    pub runs: Vec<LinkRow>,
    pub outcome: Option<String>,
}

/// A link with a label.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LinkRow {
    pub label: String,
    pub url: String,
}

/// A finished candidate.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OutcomeRow {
    pub at: Option<DateTime<Utc>>,
    pub family: String,
    pub candidate: String,
    pub outcome: String,
    pub phase: String,
    pub pull_request: Option<LinkRow>,
}

/// A GitHub rate-limit budget.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RateBudgetRow {
    pub resource: String,
    pub limit: u64,
    pub remaining: u64,
    pub reset: Option<DateTime<Utc>>,
}

/// A logged event.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EventRow {
    pub at: Option<DateTime<Utc>>,
    pub message: String,
}

/// The dashboard's shared view of the latest snapshot.
pub type SnapshotFeed = watch::Receiver<Arc<StatusSnapshot>>;

/// The dashboard's routes over a snapshot feed.
pub fn router(feed: SnapshotFeed) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/api/v1/status", get(status_json))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .with_state(feed)
}

/// Serves the dashboard until the listener fails or the task is dropped.
pub async fn serve(listener: tokio::net::TcpListener, feed: SnapshotFeed) -> std::io::Result<()> {
    axum::serve(listener, router(feed)).await
}

/// Refuses non-loopback addresses unless explicitly allowed: the page shows
/// the repository's internal state.
pub fn check_listen(addr: SocketAddr, allow_non_loopback: bool) -> Result<(), String> {
    if addr.ip().is_loopback() || allow_non_loopback {
        Ok(())
    } else {
        Err(format!(
            "dashboard address {addr} is not loopback; pass --dashboard-allow-remote to expose it"
        ))
    }
}

async fn page(State(feed): State<SnapshotFeed>) -> Response {
    let snapshot = Arc::clone(&feed.borrow());
    let mut response = html::render(&snapshot).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    // The page has no scripts of its own; forbid any.
    response.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'"),
    );
    response
}

async fn status_json(State(feed): State<SnapshotFeed>) -> Response {
    let snapshot = Arc::clone(&feed.borrow());
    axum::Json(snapshot.as_ref().clone()).into_response()
}

async fn metrics(State(feed): State<SnapshotFeed>) -> Response {
    let snapshot = Arc::clone(&feed.borrow());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        metrics::render(&snapshot),
    )
        .into_response()
}

async fn healthz(State(feed): State<SnapshotFeed>) -> Response {
    let fresh = feed.borrow().generated_at.is_some();
    if fresh {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting\n").into_response()
    }
}
