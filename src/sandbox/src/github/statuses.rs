//! Commit statuses and check runs, as GitHub's REST API gives them.
//!
//! - `POST /repos/{o}/{r}/statuses/{sha}` (push access; `state` one of
//!   `error`, `failure`, `pending`, `success`; `context` defaults to
//!   `default`; 201 with the status),
//! - `GET /repos/{o}/{r}/commits/{ref}/statuses` (every status, newest first),
//! - `GET /repos/{o}/{r}/commits/{ref}/status` (the combined status: the
//!   newest per context; `failure` when any is `error` or `failure`,
//!   `pending` when any is pending or there is none, else `success`),
//! - `GET /repos/{o}/{r}/commits/{ref}/check-runs`: the jobs of the Actions
//!   runs on that commit, as GitHub Actions reports each job as a check run
//!   (`details_url` is the job's page under `/actions/runs/{run}/job/{job}`).

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde::Deserialize;
use serde_json::{Value, json};

use super::http::{ApiError, Caller, FullUri, paginate};
use super::state::{CommitStatus, GithubState, Model, Permission, Repo, fmt_time};

const STATES: &[&str] = &["error", "failure", "pending", "success"];

/// GitHub refuses more statuses than this per commit and context.
const MAX_PER_CONTEXT: usize = 1000;

#[derive(Deserialize)]
pub struct StatusIn {
    state: String,
    #[serde(default)]
    target_url: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    context: Option<String>,
}

fn status_json(m: &Model, r: &Repo, s: &CommitStatus) -> Value {
    let url = m.repo_url(&r.owner, &r.name);
    json!({
        "url": format!("{url}/statuses/{}", s.sha),
        "avatar_url": null,
        "id": s.id, "node_id": format!("SC_{}", s.id),
        "state": s.state, "description": s.description, "target_url": s.target_url,
        "context": s.context,
        "created_at": fmt_time(s.created_at), "updated_at": fmt_time(s.created_at),
        "creator": m.login_json(&s.creator),
    })
}

pub async fn create(
    State(st): State<GithubState>,
    caller: Caller,
    Path((owner, repo, sha)): Path<(String, String, String)>,
    Json(body): Json<StatusIn>,
) -> Result<Response, ApiError> {
    let login = caller.require()?.to_string();
    if !STATES.contains(&body.state.as_str()) {
        return Err(ApiError::validation(
            json!({"resource": "Status", "field": "state", "code": "invalid"}),
        ));
    }
    let mut m = st.lock().await;
    let id = m.id();
    let r = m.repo_mut(&owner, &repo)?;
    if r.permission_of(&login) < Permission::Write {
        return Err(ApiError::not_found());
    }
    if !r.objects.commits.contains_key(&sha) {
        return Err(ApiError::unprocessable(&format!(
            "No commit found for SHA: {sha}"
        )));
    }
    let context = body.context.unwrap_or_else(|| "default".into());
    let same = r
        .statuses
        .iter()
        .filter(|s| s.sha == sha && s.context == context)
        .count();
    if same >= MAX_PER_CONTEXT {
        return Err(ApiError::validation(json!({
            "resource": "Status", "code": "custom",
            "message": "This SHA and context has reached the maximum number of statuses.",
        })));
    }
    r.statuses.push(CommitStatus {
        id,
        sha,
        state: body.state,
        context,
        description: body.description,
        target_url: body.target_url,
        creator: login,
        created_at: Utc::now(),
    });
    let r = m.repo(&owner, &repo)?;
    let s = r.statuses.last().ok_or_else(ApiError::not_found)?;
    Ok((StatusCode::CREATED, Json(status_json(&m, r, s))).into_response())
}

fn resolve(r: &Repo, reference: &str) -> Result<String, ApiError> {
    r.resolve(reference)
        .ok_or_else(|| ApiError::unprocessable(&format!("No commit found for SHA: {reference}")))
}

pub async fn list(
    State(st): State<GithubState>,
    Path((owner, repo, reference)): Path<(String, String, String)>,
    FullUri(uri): FullUri,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    let sha = resolve(r, &reference)?;
    let items = r
        .statuses
        .iter()
        .rev()
        .filter(|s| s.sha == sha)
        .map(|s| status_json(&m, r, s))
        .collect();
    Ok(paginate(items, &m.base_url, &uri, None))
}

pub async fn combined(
    State(st): State<GithubState>,
    Path((owner, repo, reference)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    let sha = resolve(r, &reference)?;
    let mut latest: Vec<&CommitStatus> = Vec::new();
    for s in r.statuses.iter().rev().filter(|s| s.sha == sha) {
        if !latest.iter().any(|l| l.context == s.context) {
            latest.push(s);
        }
    }
    let state = if latest
        .iter()
        .any(|s| s.state == "error" || s.state == "failure")
    {
        "failure"
    } else if latest.is_empty() || latest.iter().any(|s| s.state == "pending") {
        "pending"
    } else {
        "success"
    };
    let url = m.repo_url(&owner, &repo);
    Ok(Json(json!({
        "state": state,
        "statuses": latest.iter().map(|s| status_json(&m, r, s)).collect::<Vec<_>>(),
        "sha": sha, "total_count": latest.len(),
        "repository": m.minimal_repo_json(r),
        "commit_url": format!("{url}/commits/{sha}"),
        "url": format!("{url}/commits/{sha}/status"),
    }))
    .into_response())
}

/// The GitHub Actions app, which owns the check runs of workflow jobs.
fn actions_app(m: &Model) -> Value {
    json!({
        "id": 15368, "slug": "github-actions", "node_id": "MDM6QXBwMTUzNjg=",
        "owner": m.login_json("github"), "name": "GitHub Actions", "description": "",
        "external_url": "https://help.github.com/en/actions",
        "html_url": "https://github.com/apps/github-actions",
        "created_at": "2018-07-30T09:30:17Z", "updated_at": "2024-04-10T20:33:16Z",
        "permissions": {"actions": "write", "checks": "write", "contents": "write",
                        "metadata": "read", "statuses": "write"},
        "events": ["check_run", "check_suite", "pull_request", "push", "workflow_run"],
    })
}

#[derive(Deserialize, Default)]
pub struct CheckRunQuery {
    #[serde(default)]
    check_name: Option<String>,
    #[serde(default)]
    status: Option<String>,
}

pub async fn check_runs(
    State(st): State<GithubState>,
    Path((owner, repo, reference)): Path<(String, String, String)>,
    Query(q): Query<CheckRunQuery>,
    FullUri(uri): FullUri,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    let sha = resolve(r, &reference)?;
    let url = m.repo_url(&owner, &repo);
    let html = m.html_base(&url);
    let mut items = Vec::new();
    // A run that failed at startup created no jobs, so no check runs.
    let runs =
        r.runs.values().rev().filter(|run| {
            run.head_sha == sha && run.conclusion.as_deref() != Some("startup_failure")
        });
    for run in runs {
        for job in m.jobs_json(r, run) {
            let name = job["name"].as_str().unwrap_or_default().to_owned();
            let status = job["status"].as_str().unwrap_or_default().to_owned();
            if q.check_name.as_deref().is_some_and(|n| n != name)
                || q.status.as_deref().is_some_and(|s| s != status)
            {
                continue;
            }
            let id = job["id"].as_u64().unwrap_or_default();
            items.push(json!({
                "id": id, "node_id": format!("CR_{id}"), "head_sha": run.head_sha,
                "external_id": "", "url": format!("{url}/check-runs/{id}"),
                "html_url": format!("{html}/runs/{id}"),
                "details_url": job["html_url"],
                "status": status, "conclusion": job["conclusion"],
                "started_at": job["started_at"], "completed_at": job["completed_at"],
                "output": {"title": null, "summary": null, "text": null, "annotations_count": 0,
                           "annotations_url": format!("{url}/check-runs/{id}/annotations")},
                "name": name,
                "check_suite": {"id": run.id + 1},
                "app": actions_app(&m),
                "pull_requests": [],
            }));
        }
    }
    Ok(paginate(items, &m.base_url, &uri, Some("check_runs")))
}
