//! GitHub Actions: workflows, dispatches (with and without
//! `return_run_details`), runs with GitHub's filters, jobs, cancel, rerun and
//! artifacts (zip files served through a redirect, like GitHub's signed
//! blob-storage URLs).

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, NaiveDate, Utc};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::git::diff_files;
use super::http::{ApiError, Caller, FullUri, paginate};
use super::state::{GithubState, Model, Run};

/// The changelog whose change (plus a sweep label) triggers `run-sweep.yml`.
const CHANGELOG: &str = "perf-changelog.yaml";

fn parse_id(n: &str) -> Result<u64, ApiError> {
    n.parse().map_err(|_| ApiError::not_found())
}

pub async fn list_workflows(
    State(st): State<GithubState>,
    Path((owner, repo)): Path<(String, String)>,
    FullUri(uri): FullUri,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    let items: Vec<Value> = r.workflows.iter().map(|w| m.workflow_json(r, w)).collect();
    Ok(paginate(items, &m.base_url, &uri, Some("workflows")))
}

/// `GET /repos/{owner}/{repo}/actions/workflows/{id or file name}`.
pub async fn get_workflow(
    State(st): State<GithubState>,
    Path((owner, repo, wf)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    let w = r.workflow(&wf).ok_or_else(ApiError::not_found)?;
    Ok(Json(m.workflow_json(r, w)).into_response())
}

#[derive(Deserialize)]
pub struct DispatchIn {
    #[serde(rename = "ref")]
    git_ref: String,
    #[serde(default)]
    inputs: Map<String, Value>,
    #[serde(default)]
    return_run_details: bool,
}

pub async fn dispatch(
    State(st): State<GithubState>,
    caller: Caller,
    Path((owner, repo, wf)): Path<(String, String, String)>,
    Json(body): Json<DispatchIn>,
) -> Result<Response, ApiError> {
    let login = caller.require()?.to_string();
    if body.inputs.len() > 25 {
        return Err(ApiError::unprocessable(
            "you may only define up to 25 `inputs` for a `workflow_dispatch` event",
        ));
    }
    for (k, v) in &body.inputs {
        if !(v.is_string() || v.is_boolean() || v.is_number()) {
            return Err(ApiError::unprocessable(&format!(
                "Invalid value for input '{k}': inputs must be strings, numbers or booleans"
            )));
        }
    }
    let mut m = st.lock().await;
    if body.return_run_details && !m.run_details_supported {
        return Err(ApiError::unprocessable(
            "Invalid request.\n\n\"return_run_details\" is not a permitted key.",
        ));
    }
    let (run_id, job_id) = (m.id() * 1000, m.id());
    let r = m.repo(&owner, &repo)?;
    let w = r.workflow(&wf).ok_or_else(ApiError::not_found)?.clone();
    let branch = body
        .git_ref
        .strip_prefix("refs/heads/")
        .unwrap_or(&body.git_ref)
        .to_string();
    let branch_sha = r
        .refs
        .get(&format!("refs/heads/{branch}"))
        .or_else(|| r.refs.get(&format!("refs/tags/{branch}")))
        .cloned()
        .ok_or_else(|| ApiError::unprocessable(&format!("No ref found for: {}", body.git_ref)))?;
    let file = w.path.rsplit('/').next().unwrap_or_default().to_string();
    if let Some(run_id) = super::workflow_events::dispatch_event(
        &mut m,
        &owner,
        &repo,
        &file,
        &branch,
        &branch_sha,
        &body.inputs,
        &login,
    )? {
        let url = m.repo_url(&owner, &repo);
        return Ok(dispatch_answer(&m, &url, run_id, body.return_run_details));
    }
    let r = m.repo(&owner, &repo)?;
    let head_sha = body
        .inputs
        .get("ref")
        .and_then(Value::as_str)
        .and_then(|s| r.resolve(s))
        .unwrap_or(branch_sha);
    let display_title = body
        .inputs
        .get("test-name")
        .and_then(Value::as_str)
        .map(|t| format!("e2e Test - {t}"))
        .unwrap_or_else(|| w.name.clone());
    let now = Utc::now();
    let run = Run {
        id: run_id,
        workflow_id: w.id,
        name: w.name.clone(),
        display_title,
        event: "workflow_dispatch".into(),
        status: "queued".into(),
        conclusion: None,
        head_branch: branch,
        head_sha,
        actor: login.clone(),
        triggering_actor: login,
        run_attempt: 1,
        inputs: Value::Object(body.inputs),
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
    };
    let url = m.repo_url(&owner, &repo);
    m.repo_mut(&owner, &repo)?.runs.insert(run_id, run);
    Ok(dispatch_answer(&m, &url, run_id, body.return_run_details))
}

/// GitHub's answer to an accepted dispatch: 204, or the run's ids when
/// `return_run_details` was asked for.
fn dispatch_answer(m: &Model, url: &str, run_id: u64, details: bool) -> Response {
    if details {
        return Json(json!({
            "workflow_run_id": run_id,
            "run_url": format!("{url}/actions/runs/{run_id}"),
            "html_url": format!("{}/actions/runs/{run_id}", m.html_base(url)),
        }))
        .into_response();
    }
    StatusCode::NO_CONTENT.into_response()
}

/// Starts the final-sweep run for a labelled PR when its head changes the
/// changelog (the InferenceX `run-sweep.yml` trigger).
pub fn start_sweep_run(
    m: &mut Model,
    owner: &str,
    repo: &str,
    number: u64,
    login: &str,
) -> Result<(), ApiError> {
    let (run_id, job_id) = (m.id() * 1000, m.id());
    let r = m.repo(owner, repo)?;
    let Some(p) = r.pulls.get(&number).filter(|p| p.open) else {
        return Ok(());
    };
    let Some(w) = r.workflow("run-sweep.yml").cloned() else {
        return Ok(());
    };
    let base = r.resolve(&p.base_ref).unwrap_or_default();
    let changes_changelog = r
        .objects
        .merge_base(&base, &p.head_sha)
        .and_then(|mb| {
            Some((
                r.objects.commits.get(&mb)?,
                r.objects.commits.get(&p.head_sha)?,
            ))
        })
        .map(|(a, b)| {
            diff_files(&r.objects, &a.tree, &b.tree).iter().any(|f| {
                f["filename"]
                    .as_str()
                    .is_some_and(|n| n.ends_with(CHANGELOG))
            })
        })
        .unwrap_or(false);
    // GitHub starts no `pull_request` run on a PR that conflicts.
    if !changes_changelog || r.pull_conflicts(p) == Some(true) {
        return Ok(());
    }
    let now = Utc::now();
    let run = Run {
        id: run_id,
        workflow_id: w.id,
        name: w.name.clone(),
        display_title: p.title.clone(),
        event: "pull_request".into(),
        status: "queued".into(),
        conclusion: None,
        head_branch: p.head_ref.clone(),
        head_sha: p.head_sha.clone(),
        actor: login.to_string(),
        triggering_actor: login.to_string(),
        run_attempt: 1,
        inputs: Value::Null,
        pull_requests: vec![number],
        created_at: now,
        updated_at: now,
        run_started_at: now,
        job_id,
        concurrency_group: None,
        past_attempts: Vec::new(),
        cancel_requested: false,
        jobs: Vec::new(),
        context: None,
    };
    m.repo_mut(owner, repo)?.runs.insert(run_id, run);
    Ok(())
}

#[derive(Deserialize, Default)]
pub struct RunsQuery {
    #[serde(default)]
    event: Option<String>,
    #[serde(default)]
    actor: Option<String>,
    #[serde(default)]
    branch: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    head_sha: Option<String>,
    #[serde(default)]
    created: Option<String>,
}

fn parse_when(s: &str, end_of_day: bool) -> Option<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.with_timezone(&Utc));
    }
    let d = NaiveDate::parse_from_str(s, "%Y-%m-%d").ok()?;
    let t = if end_of_day {
        d.and_hms_opt(23, 59, 59)?
    } else {
        d.and_hms_opt(0, 0, 0)?
    };
    Some(t.and_utc())
}

/// GitHub's `created` search qualifier: `>=X`, `>X`, `<=X`, `<X`, `A..B` or a date.
/// A compiled `created` qualifier.
type CreatedFilter = Box<dyn Fn(DateTime<Utc>) -> bool + Send + Sync>;

fn created_filter(q: &str) -> Result<CreatedFilter, ApiError> {
    let bad = || {
        ApiError::validation(
            json!({"resource": "WorkflowRun", "field": "created", "code": "invalid"}),
        )
    };
    let q = q.trim().to_string();
    if let Some(v) = q.strip_prefix(">=") {
        let t = parse_when(v, false).ok_or_else(bad)?;
        return Ok(Box::new(move |c| c >= t));
    }
    if let Some(v) = q.strip_prefix("<=") {
        let t = parse_when(v, true).ok_or_else(bad)?;
        return Ok(Box::new(move |c| c <= t));
    }
    if let Some(v) = q.strip_prefix('>') {
        let t = parse_when(v, true).ok_or_else(bad)?;
        return Ok(Box::new(move |c| c > t));
    }
    if let Some(v) = q.strip_prefix('<') {
        let t = parse_when(v, false).ok_or_else(bad)?;
        return Ok(Box::new(move |c| c < t));
    }
    if let Some((a, b)) = q.split_once("..") {
        let lo = if a == "*" {
            None
        } else {
            Some(parse_when(a, false).ok_or_else(bad)?)
        };
        let hi = if b == "*" {
            None
        } else {
            Some(parse_when(b, true).ok_or_else(bad)?)
        };
        return Ok(Box::new(move |c| {
            lo.is_none_or(|l| c >= l) && hi.is_none_or(|h| c <= h)
        }));
    }
    let lo = parse_when(&q, false).ok_or_else(bad)?;
    let hi = parse_when(&q, true).ok_or_else(bad)?;
    Ok(Box::new(move |c| c >= lo && c <= hi))
}

pub async fn list_runs(
    State(st): State<GithubState>,
    Path((owner, repo)): Path<(String, String)>,
    Query(q): Query<RunsQuery>,
    FullUri(uri): FullUri,
) -> Result<Response, ApiError> {
    runs_page(&st, &owner, &repo, None, q, &uri).await
}

/// `GET actions/workflows/{id or file}/runs`.
pub async fn list_workflow_runs(
    State(st): State<GithubState>,
    Path((owner, repo, wf)): Path<(String, String, String)>,
    Query(q): Query<RunsQuery>,
    FullUri(uri): FullUri,
) -> Result<Response, ApiError> {
    runs_page(&st, &owner, &repo, Some(&wf), q, &uri).await
}

async fn runs_page(
    st: &GithubState,
    owner: &str,
    repo: &str,
    workflow: Option<&str>,
    q: RunsQuery,
    uri: &axum::http::Uri,
) -> Result<Response, ApiError> {
    let created = q.created.as_deref().map(created_filter).transpose()?;
    let m = st.lock().await;
    let r = m.repo(owner, repo)?;
    let workflow_id = match workflow {
        Some(w) => Some(r.workflow(w).ok_or_else(ApiError::not_found)?.id),
        None => None,
    };
    let items: Vec<Value> = r
        .runs
        .values()
        .rev()
        .filter(|x| workflow_id.is_none_or(|w| x.workflow_id == w))
        .filter(|x| q.event.as_deref().is_none_or(|e| x.event == e))
        .filter(|x| {
            q.actor
                .as_deref()
                .is_none_or(|a| x.actor.eq_ignore_ascii_case(a))
        })
        .filter(|x| q.branch.as_deref().is_none_or(|b| x.head_branch == b))
        .filter(|x| q.head_sha.as_deref().is_none_or(|h| x.head_sha == h))
        .filter(|x| {
            q.status
                .as_deref()
                .is_none_or(|s| x.status == s || x.conclusion.as_deref() == Some(s))
        })
        .filter(|x| created.as_ref().is_none_or(|f| f(x.created_at)))
        .map(|x| m.run_json(r, x))
        .collect();
    Ok(paginate(items, &m.base_url, uri, Some("workflow_runs")))
}

pub async fn get_run(
    State(st): State<GithubState>,
    Path((owner, repo, id)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    let run = r
        .runs
        .get(&parse_id(&id)?)
        .ok_or_else(ApiError::not_found)?;
    Ok(Json(m.run_json(r, run)).into_response())
}

pub async fn jobs(
    State(st): State<GithubState>,
    Path((owner, repo, id)): Path<(String, String, String)>,
    FullUri(uri): FullUri,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    let run = r
        .runs
        .get(&parse_id(&id)?)
        .ok_or_else(ApiError::not_found)?;
    // A run that fails at startup never created its jobs; GitHub's job
    // model has no `startup_failure` conclusion.
    let jobs = if run.conclusion.as_deref() == Some("startup_failure") {
        Vec::new()
    } else {
        m.jobs_json(r, run)
    };
    Ok(paginate(jobs, &m.base_url, &uri, Some("jobs")))
}

/// `GET .../actions/jobs/{id}/logs`: as GitHub, 302 to a short-lived
/// download address (here on the same server) that serves the plain text.
pub async fn job_logs(
    State(st): State<GithubState>,
    Path((owner, repo, id)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    if !r
        .runs
        .values()
        .flat_map(|run| run.jobs.iter())
        .any(|j| j.id == id)
    {
        return Err(ApiError::not_found());
    }
    let location = format!("{}/_sandbox/job-log/{}/{}", m.base_url, r.id, id);
    Ok((StatusCode::FOUND, [(header::LOCATION, location)]).into_response())
}

/// Serves a job's log text for [`job_logs`]' redirect.
pub async fn job_log_download(
    State(st): State<GithubState>,
    Path((repo_id, id)): Path<(u64, u64)>,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let job = m
        .repos
        .values()
        .find(|r| r.id == repo_id)
        .into_iter()
        .flat_map(|r| r.runs.values().flat_map(|run| run.jobs.iter()))
        .find(|j| j.id == id)
        .ok_or_else(ApiError::not_found)?;
    Ok((
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        job.log.clone(),
    )
        .into_response())
}

/// `POST .../runs/{id}/cancel`: GitHub accepts with 202 and the run ends
/// as `cancelled` a little later (its jobs with it); until then it keeps its
/// status. A completed run answers 409.
pub async fn cancel(
    State(st): State<GithubState>,
    Path((owner, repo, id)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let mut m = st.lock().await;
    let delay = m.cancel_delay;
    let r = m.repo_mut(&owner, &repo)?;
    let key = r.full_name();
    let run = r.runs.get_mut(&id).ok_or_else(ApiError::not_found)?;
    if run.status == "completed" {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "Cannot cancel a workflow run that is completed.",
        ));
    }
    if !run.cancel_requested {
        run.cancel_requested = true;
        let attempt = run.run_attempt;
        let st = st.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            finish_cancel(&st, &key, id, attempt).await;
        });
    }
    Ok((StatusCode::ACCEPTED, Json(json!({}))).into_response())
}

/// Ends a cancelled run unless it finished or was re-run meanwhile.
async fn finish_cancel(st: &GithubState, full: &str, id: u64, attempt: u64) {
    let mut m = st.lock().await;
    let Some(run) = m
        .repos
        .get_mut(&full.to_ascii_lowercase())
        .and_then(|r| r.runs.get_mut(&id))
    else {
        return;
    };
    if run.cancel_requested && run.run_attempt == attempt && run.status != "completed" {
        run.status = "completed".into();
        run.conclusion = Some("cancelled".into());
        run.cancel_requested = false;
        run.updated_at = Utc::now();
    }
}

/// `DELETE /repos/{owner}/{repo}/actions/runs/{id}`: GitHub deletes a
/// run only once it completed (or after two weeks, which no test waits
/// for), and answers 204 with its artifacts and jobs gone with it.
pub async fn delete_run(
    State(st): State<GithubState>,
    caller: Caller,
    Path((owner, repo, id)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    caller.require()?;
    let mut m = st.lock().await;
    let r = m.repo_mut(&owner, &repo)?;
    let id = parse_id(&id)?;
    let run = r.runs.get(&id).ok_or_else(ApiError::not_found)?;
    if run.status != "completed" {
        return Err(ApiError::forbidden(
            "Cannot delete a workflow run that is not completed",
        ));
    }
    r.runs.remove(&id);
    r.artifacts.retain(|_, a| a.run_id != id);
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn rerun(
    State(st): State<GithubState>,
    caller: Caller,
    Path((owner, repo, id)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let login = caller.require()?.to_string();
    let mut m = st.lock().await;
    let r = m.repo_mut(&owner, &repo)?;
    let run = r
        .runs
        .get_mut(&parse_id(&id)?)
        .ok_or_else(ApiError::not_found)?;
    if run.status != "completed" {
        return Err(ApiError::forbidden("This workflow run is not completed"));
    }
    let now = Utc::now();
    run.past_attempts.push(super::state::PastAttempt {
        attempt: run.run_attempt,
        status: run.status.clone(),
        conclusion: run.conclusion.clone(),
        triggering_actor: run.triggering_actor.clone(),
        started_at: run.run_started_at,
        updated_at: run.updated_at,
    });
    run.run_attempt += 1;
    run.jobs.clear();
    run.cancel_requested = false;
    run.status = "queued".into();
    run.conclusion = None;
    run.triggering_actor = login;
    run.updated_at = now;
    run.run_started_at = now;
    Ok((StatusCode::CREATED, Json(json!({}))).into_response())
}

pub async fn run_artifacts(
    State(st): State<GithubState>,
    Path((owner, repo, id)): Path<(String, String, String)>,
    FullUri(uri): FullUri,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    if !r.runs.contains_key(&id) {
        return Err(ApiError::not_found());
    }
    let items: Vec<Value> = r
        .artifacts
        .values()
        .filter(|a| a.run_id == id)
        .map(|a| m.artifact_json(r, a))
        .collect();
    Ok(paginate(items, &m.base_url, &uri, Some("artifacts")))
}

pub async fn get_artifact(
    State(st): State<GithubState>,
    Path((owner, repo, id)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    let a = r
        .artifacts
        .get(&parse_id(&id)?)
        .ok_or_else(ApiError::not_found)?;
    Ok(Json(m.artifact_json(r, a)).into_response())
}

/// 302 to a download address on the same server (GitHub redirects to a
/// short-lived signed blob-storage URL that needs no token).
pub async fn artifact_zip(
    State(st): State<GithubState>,
    Path((owner, repo, id)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    let a = r
        .artifacts
        .get(&parse_id(&id)?)
        .ok_or_else(ApiError::not_found)?;
    if a.expired {
        return Err(ApiError::new(StatusCode::GONE, "Artifact has expired"));
    }
    let location = format!("{}/_sandbox/download/{}/{}", m.base_url, r.id, a.id);
    Ok((StatusCode::FOUND, [(header::LOCATION, location)]).into_response())
}

/// Serves artifact bytes for [`artifact_zip`]'s redirect.
pub async fn download(
    State(st): State<GithubState>,
    Path((repo_id, id)): Path<(u64, u64)>,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let r = m
        .repos
        .values()
        .find(|r| r.id == repo_id)
        .ok_or_else(ApiError::not_found)?;
    let a = r.artifacts.get(&id).ok_or_else(ApiError::not_found)?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/zip")],
        a.zip.clone(),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_qualifiers_follow_github_search_syntax() {
        let t = parse_when("2026-08-22T10:00:00Z", false).unwrap();
        assert!(created_filter(">=2026-08-22T10:00:00Z").unwrap()(t));
        assert!(!created_filter(">2026-08-22").unwrap()(t));
        assert!(created_filter("2026-08-22").unwrap()(t));
        assert!(created_filter("2026-08-21..2026-08-22").unwrap()(t));
        assert!(created_filter("*..2026-08-21").is_ok_and(|f| !f(t)));
        assert!(created_filter(">=yesterday").is_err());
    }
}
