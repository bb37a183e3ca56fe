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

use klaud_lifecycle::BoxFuture;
use std::collections::BTreeMap;
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

/// `image` with its digest cut to its first 12 hex digits (`repo:tag@
/// sha256:0123456789ab…`): a 64-digit digest pushes every other column of a
/// table off the screen, and the full reference is kept next to it (a link
/// or a hover) wherever the short one is shown.
pub fn short_image(image: &str) -> String {
    const SHOWN: usize = 12;
    match image.split_once('@') {
        Some((name, digest)) => {
            let (algorithm, hex) = digest.split_once(':').unwrap_or(("", digest));
            let cut: String = hex.chars().take(SHOWN).collect();
            let more = if hex.chars().count() > SHOWN {
                "…"
            } else {
                ""
            };
            let sep = if algorithm.is_empty() { "" } else { ":" };
            format!("{name}@{algorithm}{sep}{cut}{more}")
        }
        None => image.to_owned(),
    }
}

/// The dashboard page for `snapshot` (what `GET /` answers).
pub fn render_page(snapshot: &StatusSnapshot) -> String {
    html::render(snapshot)
}

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
    /// Repositories whose requests GitHub's secondary rate limit holds
    /// back right now, and until when.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub github_pauses: Vec<GithubPauseRow>,
    /// Repositories whose GitHub clock differs from this machine's by more
    /// than the lease margin (leases are kept on GitHub's time).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clock_skews: Vec<ClockSkewRow>,
    /// Registry requests made since start, by kind.
    pub registry_requests: klaud_planner::registry::RequestCounts,
    /// The pull quota each registry host last stated (Docker Hub), by host.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub registry_quotas: BTreeMap<String, klaud_planner::registry::PullQuota>,
    /// Registry hosts not asked right now (unreachable, or out of pull
    /// quota), with why and until when.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub registry_waits: Vec<klaud_planner::registry::TrippedHost>,
    /// Waves run since start.
    pub waves_total: u64,
    /// When the next planner wave fires.
    pub next_wave: Option<DateTime<Utc>>,
    /// Recent errors, newest first (messages never carry credentials).
    pub recent_errors: Vec<EventRow>,
    /// Whether a plan (a wave's, or the dry run before the first wave) is
    /// running right now.
    pub planning: bool,
    /// The GitHub `core` budget over the last hours, oldest first, at most
    /// one sample a minute.
    pub budget_history: Vec<BudgetSample>,
}

/// The GitHub `core` rate budget at one moment.
#[derive(Debug, Clone, Serialize)]
pub struct BudgetSample {
    /// When it was read.
    pub at: DateTime<Utc>,
    /// Requests left in the window.
    pub remaining: u64,
    /// The window's limit.
    pub limit: u64,
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
    /// Experiments: the variants of one family side by side.
    pub experiments: Vec<ExperimentRow>,
    /// The repository's dashboard issue, where maintainers steer Klaud.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dashboard_issue: Option<LinkRow>,
    /// Nodes failing the same way across families or days, from GitHub's
    /// runs (the dashboard issue shows the same table).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sick_nodes: Vec<klaud_lifecycle::playbook::sick::SickNodeRow>,
}

/// The variants of one experiment on one family.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ExperimentRow {
    /// `configs/<file>:<key>`.
    pub family: String,
    /// The experiment's name.
    pub experiment: String,
    /// Its variants, in the experiment's order.
    pub variants: Vec<VariantRow>,
}

/// One variant of an experiment.
#[derive(Debug, Clone, Serialize)]
pub struct VariantRow {
    /// `A`, `F`, …
    pub name: String,
    /// The variant it builds on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Its candidate id.
    pub candidate: klaud_claims::CandidateId,
    /// Its outcome once finished, else the state machine's step.
    pub state: String,
    pub pull_request: Option<LinkRow>,
    /// The image it runs.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image: String,
    /// Its own edits (what tells it apart from the variant it builds on),
    /// as the experiment names them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub edits: Vec<String>,
}

/// The experiment variants among `records`, grouped by family and
/// experiment; a variant seen twice (a later candidate of the family) shows
/// its newest record.
pub fn experiment_rows(records: &[klaud_lifecycle::engine::CandidateRecord]) -> Vec<ExperimentRow> {
    let mut groups: std::collections::BTreeMap<
        (String, String),
        Vec<(
            &klaud_lifecycle::experiment::VariantInfo,
            &klaud_lifecycle::engine::CandidateRecord,
        )>,
    > = std::collections::BTreeMap::new();
    for rec in records {
        let Some(v) = &rec.variant else { continue };
        let group = groups
            .entry((rec.family.clone(), v.experiment.clone()))
            .or_default();
        match group.iter_mut().find(|(g, _)| g.name == v.name) {
            Some(slot) if slot.1.updated_at < rec.updated_at => *slot = (v, rec),
            Some(_) => {}
            None => group.push((v, rec)),
        }
    }
    groups
        .into_iter()
        .map(|((family, experiment), mut group)| {
            // The experiment's own order (A, B, C; a `/klaud try` variant
            // after the configured ones), as the PR bodies list them.
            let order = |v: &klaud_lifecycle::experiment::VariantInfo| {
                v.siblings
                    .iter()
                    .position(|s| s.name == v.name)
                    .unwrap_or(usize::MAX)
            };
            group.sort_by(|a, b| order(a.0).cmp(&order(b.0)).then(a.0.name.cmp(&b.0.name)));
            ExperimentRow {
                family,
                experiment,
                variants: group
                    .into_iter()
                    .map(|(v, rec)| VariantRow {
                        name: v.name.clone(),
                        from: v.from.clone(),
                        candidate: rec.candidate.clone(),
                        state: state_of(rec),
                        pull_request: pull_link(rec),
                        image: rec.image.clone(),
                        edits: v.own.clone(),
                    })
                    .collect(),
            }
        })
        .collect()
}

/// A family in the latest plan.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FamilyRow {
    pub family: String,
    pub id: String,
    /// `up-to-date`, `stale-newer`, `stale-pruned`, `unknown-track`, `error`,
    /// or the block that keeps it from being bumped: `retired`, `duplicate`
    /// (somebody else's PR), `occupied` (Klaud's own open PR).
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
    /// For a recovery lease: the orphaned candidate being finished and the
    /// run that owned it (`None` for a claim).
    pub recovering: Option<String>,
}

impl ClaimRow {
    /// The row of a claim ref or recovery lease as listed on GitHub.
    pub fn of(entry: &klaud_claims::ClaimEntry) -> Self {
        let recovery = klaud_claims::CandidateId::from_recovery_ref(&entry.tip.name);
        let family_id = entry
            .family()
            .or_else(|| recovery.as_ref().map(|(_, c)| c.family()))
            .map_or_else(|| entry.tip.name.clone(), |f| f.as_str().to_owned());
        let recovering = recovery.map(|(run, c)| format!("{c} of run {run}"));
        match &entry.record {
            Ok(r) => Self {
                family_id,
                family: r.candidates.first().map(|c| c.family.clone()),
                owner: r.owner.map(|o| o.to_string()),
                run_id: Some(r.run_id),
                lease_until: r.lease_until,
                fence: r.fence,
                holder: r.holder.clone(),
                parse_error: None,
                recovering,
            },
            Err(err) => Self {
                family_id,
                parse_error: Some(err.to_string()),
                recovering,
                ..Self::default()
            },
        }
    }
}

impl CandidateRow {
    /// The row of a journal record.
    pub fn of(rec: &klaud_lifecycle::engine::CandidateRecord) -> Self {
        Self {
            id: rec.candidate.to_string(),
            family: rec.family.clone(),
            image: rec.image.clone(),
            old_image: rec.old_image.clone(),
            state: rec.step.as_str().to_owned(),
            attempt: rec.attempts.last().map(|a| {
                // A run that never started before the candidate ended is
                // not waiting any more: its last status would read as work
                // still queued.
                let open = matches!(
                    a.status,
                    klaud_lifecycle::model::AttemptStatus::Queued
                        | klaud_lifecycle::model::AttemptStatus::Running
                );
                match rec.ending.as_ref() {
                    Some(e) if open => format!(
                        "{} · {}, ended with the candidate ({})",
                        a.kind.title(),
                        a.status,
                        e.outcome
                    ),
                    _ => format!("{} · {}", a.kind.title(), a.status),
                }
            }),
            pull_request: pull_link(rec),
            runs: rec
                .runs()
                .into_iter()
                .map(|run| LinkRow {
                    label: format!("Run {} / attempt {}", run.id, run.attempt),
                    url: run.attempt_url(),
                })
                .collect(),
            outcome: outcome_of(rec).map(|e| e.outcome.to_string()),
            merge: rec
                .upkeep
                .as_ref()
                .map(|u| u.describe())
                .filter(|d| !d.is_empty()),
        }
    }
}

impl OutcomeRow {
    /// The row of a finished journal record; `None` while it runs.
    pub fn of(rec: &klaud_lifecycle::engine::CandidateRecord) -> Option<Self> {
        let ending = outcome_of(rec)?;
        Some(Self {
            at: Some(rec.updated_at),
            family: rec.family.clone(),
            candidate: rec.candidate.clone(),
            outcome: ending.outcome.to_string(),
            phase: ending.phase.to_string(),
            pull_request: pull_link(rec),
            hunt: rec.hunt.en.clone(),
            hunt_zh: rec.hunt.zh.clone(),
        })
    }
}

/// What a record's state is in one word: its outcome once it ended (also
/// while its cleanup still runs, as `duplicate (finishing)`), else the
/// state machine's step.
fn state_of(rec: &klaud_lifecycle::engine::CandidateRecord) -> String {
    match (outcome_of(rec), rec.ending.as_ref()) {
        (Some(e), _) => e.outcome.to_string(),
        (None, Some(e)) => format!("{} (finishing)", e.outcome),
        (None, None) => rec.step.as_str().to_owned(),
    }
}

/// The ending of a finished record (an ending is decided a step before
/// the record is done).
fn outcome_of(
    rec: &klaud_lifecycle::engine::CandidateRecord,
) -> Option<&klaud_lifecycle::engine::Ending> {
    rec.ending
        .as_ref()
        .filter(|_| rec.step == klaud_lifecycle::engine::Step::Done)
}

fn pull_link(rec: &klaud_lifecycle::engine::CandidateRecord) -> Option<LinkRow> {
    Some(LinkRow {
        label: rec
            .pull
            .map_or_else(|| "PR".to_owned(), |n| format!("#{n}")),
        url: rec.pull_url.clone()?,
    })
}

/// Every claim and recovery lease of the book's repository, as rows.
pub fn claim_rows<'f>(
    book: &'f klaud_claims::ClaimBook<'f>,
) -> BoxFuture<'f, Result<Vec<ClaimRow>, klaud_claims::ClaimError>> {
    Box::pin(async move {
        let claims = book.list_claims().await?;
        let leases = book.list_recovery_leases().await?;
        Ok(claims.iter().chain(&leases).map(ClaimRow::of).collect())
    })
}

/// A candidate.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CandidateRow {
    pub id: String,
    pub family: String,
    pub image: String,
    /// The image the base branch runs, which `image` replaces.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub old_image: String,
    /// The state machine's step (`prepared`, `smoke`, `final-sweep`, …).
    pub state: String,
    /// E.g. `Repair 2/5`.
    pub attempt: Option<String>,
    pub pull_request: Option<LinkRow>,
    pub runs: Vec<LinkRow>,
    pub outcome: Option<String>,
    /// A validated PR awaiting its merge: reuse and upkeep, in a line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merge: Option<String>,
}

/// A link with a label.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LinkRow {
    pub label: String,
    pub url: String,
}

/// A finished candidate.
#[derive(Debug, Clone, Serialize)]
pub struct OutcomeRow {
    pub at: Option<DateTime<Utc>>,
    pub family: String,
    pub candidate: klaud_claims::CandidateId,
    pub outcome: String,
    pub phase: String,
    pub pull_request: Option<LinkRow>,
    /// The candidate's regression hunt (its result lines, English then
    /// Chinese, as in its receipt); empty when none ran.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hunt: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hunt_zh: Vec<String>,
}

/// A GitHub rate-limit budget.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RateBudgetRow {
    pub resource: String,
    pub limit: u64,
    pub remaining: u64,
    pub reset: Option<DateTime<Utc>>,
}

/// A pause GitHub's secondary rate limit imposes: no request (or, for a
/// limit on content-creating requests, no write) is sent before `until`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GithubPauseRow {
    /// `OWNER/NAME`.
    pub repository: String,
    /// When requests resume.
    pub until: Option<DateTime<Utc>>,
    /// The route whose rejection started it.
    pub route: String,
    /// Only writes are held back.
    pub writes_only: bool,
}

impl GithubPauseRow {
    /// "paused by GitHub's secondary limit until `<time>`".
    pub fn describe(&self) -> String {
        format!(
            "{}{} paused by GitHub's secondary limit until {} (after {})",
            self.repository,
            if self.writes_only { " writes" } else { "" },
            self.until.map_or_else(
                || "—".to_owned(),
                |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
            ),
            self.route
        )
    }
}

/// GitHub's clock against this machine's, when they differ by more than the
/// lease margin.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ClockSkewRow {
    /// `OWNER/NAME`.
    pub repository: String,
    /// GitHub's time minus this machine's, in seconds.
    pub seconds: i64,
}

impl ClockSkewRow {
    /// "this machine's clock is 600 s behind GitHub's ...".
    pub fn describe(&self) -> String {
        format!(
            "{}: this machine's clock is {} s {} GitHub's; leases are kept on GitHub's time",
            self.repository,
            self.seconds.unsigned_abs(),
            if self.seconds > 0 {
                "behind"
            } else {
                "ahead of"
            }
        )
    }
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
pub fn serve<'f>(
    listener: tokio::net::TcpListener,
    feed: SnapshotFeed,
) -> BoxFuture<'f, std::io::Result<()>> {
    Box::pin(async move { axum::serve(listener, router(feed)).await })
}

/// Refuses non-loopback addresses unless explicitly allowed: the page shows
/// the repository's internal state.
pub fn check_listen(addr: SocketAddr, allow_non_loopback: bool) -> Result<(), NotLoopback> {
    if addr.ip().is_loopback() || allow_non_loopback {
        Ok(())
    } else {
        Err(NotLoopback(addr))
    }
}

/// A dashboard address off loopback that the configuration did not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "dashboard address {0} is not loopback; to expose it (the dashboard has no \
     authentication), set daemon.dashboard_allow_remote = true in klaud.toml"
)]
pub struct NotLoopback(pub SocketAddr);

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

#[cfg(test)]
mod tests {
    use super::*;
    use klaud_claims::{ClaimEntry, ClaimParseError, ClaimRecord, RefTip};

    fn tip(name: &str, message: &str) -> RefTip {
        RefTip {
            name: name.to_owned(),
            sha: "a".repeat(40),
            message: message.to_owned(),
            parents: vec!["b".repeat(40)],
            tree: "c".repeat(40),
        }
    }

    #[test]
    fn a_claim_that_does_not_parse_is_shown_with_its_error() {
        let name = "refs/heads/klaud/claim-d92e15065c55779d";
        let entry = ClaimEntry {
            tip: tip(name, "not json"),
            record: ClaimRecord::parse("not json").map_err(ClaimParseError::from),
        };
        let row = ClaimRow::of(&entry);
        assert_eq!(row.family_id, "d92e15065c55779d");
        assert!(row.parse_error.is_some(), "{row:?}");
        assert_eq!(row.owner, None);
    }

    #[test]
    fn a_leased_claim_shows_owner_lease_and_fence() {
        let owner = uuid::Uuid::from_u128(7);
        let message = format!(
            "{{\"candidates\":[{{\"base\":\"{}\",\"family\":\"configs/nvidia-master.yaml:dsr1-fp4-b200-sglang\",\"id\":\"d92e15065c55779d-0123456789abcdef\"}}],\"fence\":3,\"holder\":\"klaud/0.1.0\",\"lease-until\":\"2026-11-29T22:00:00Z\",\"owner\":\"{owner}\",\"run-id\":42}}",
            "b".repeat(40)
        );
        let entry = ClaimEntry {
            tip: tip("refs/heads/klaud/claim-d92e15065c55779d", &message),
            record: ClaimRecord::parse(&message).map_err(ClaimParseError::from),
        };
        let row = ClaimRow::of(&entry);
        assert_eq!(row.parse_error, None, "{row:?}");
        assert_eq!(row.owner, Some(owner.to_string()));
        assert_eq!(row.fence, Some(3));
        assert_eq!(row.run_id, Some(42));
        assert_eq!(
            row.family.as_deref(),
            Some("configs/nvidia-master.yaml:dsr1-fp4-b200-sglang")
        );
        assert!(row.lease_until.is_some());
    }

    #[test]
    fn a_recovery_lease_names_the_candidate_it_finishes() {
        let owner = uuid::Uuid::from_u128(9);
        let message = format!(
            "{{\"candidates\":[{{\"base\":\"{}\",\"family\":\"configs/nvidia-master.yaml:dsr1-fp4-b200-sglang\",\"id\":\"d92e15065c55779d-0123456789abcdef\"}}],\"fence\":1,\"holder\":\"klaud/0.1.0\",\"lease-until\":\"2026-11-29T22:00:00Z\",\"owner\":\"{owner}\",\"run-id\":43}}",
            "b".repeat(40)
        );
        let name = "refs/heads/klaud/recovery-42-d92e15065c55779d-0123456789abcdef";
        let entry = ClaimEntry {
            tip: tip(name, &message),
            record: ClaimRecord::parse(&message).map_err(ClaimParseError::from),
        };
        let row = ClaimRow::of(&entry);
        assert_eq!(row.family_id, "d92e15065c55779d");
        assert_eq!(
            row.recovering.as_deref(),
            Some("d92e15065c55779d-0123456789abcdef of run 42")
        );
        assert_eq!(row.owner, Some(owner.to_string()));
        assert_eq!(row.run_id, Some(43));
        let claim = ClaimEntry {
            tip: tip("refs/heads/klaud/claim-d92e15065c55779d", &message),
            record: ClaimRecord::parse(&message).map_err(ClaimParseError::from),
        };
        assert_eq!(ClaimRow::of(&claim).recovering, None);
    }
}
