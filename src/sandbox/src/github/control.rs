//! The control API under `/_sandbox/` (JSON, no authentication: the sandbox
//! only listens on loopback). It mirrors the Rust-level API of
//! [`GithubState`] so tests in other processes can seed, inject faults and
//! drive workflow runs.
//!
//! | Method and path | Body | Effect |
//! | --- | --- | --- |
//! | `POST /_sandbox/repos` | `{"repo": "o/n", "default_branch"?: "main", "seed_dir"?: DIR, "committer"?: LOGIN}` | creates a repository, optionally committing every file of `DIR` on the default branch; answers `{"repo", "head"}` |
//! | `POST /_sandbox/users` | `{"login", "name"?, "bot"?: false, "type"?: "User" \| "Bot", "token"?, "rate_limit"?: 5000, "permission"?: "read\|triage\|write\|maintain\|admin", "repo"?: "o/n"}` | registers a user with a token (the one given, or a new one) and its primary limit per hour, and grants the permission on `repo` (or every repository); answers `{"login", "id", "token"}` |
//! | `PUT /_sandbox/repos/{o}/{n}/collaborators/{login}` | `{"permission": "none|read|triage|write|maintain|admin"}` | sets a permission |
//! | `POST /_sandbox/repos/{o}/{n}/push` | `{"branch", "login", "message", "files": {PATH: TEXT \| {"base64": B64} \| null}}` | pushes one commit as `login` (null deletes); answers `{"sha"}` |
//! | `DELETE /_sandbox/repos/{o}/{n}/workflows/{file}` | | removes a workflow (404 when there is none) |
//! | `POST /_sandbox/repos/{o}/{n}/runs/{id}/complete` | `{"conclusion", "artifacts": {NAME: {PATH: TEXT \| {"base64": B64}}}}` | completes a run; each artifact is zipped |
//! | `POST /_sandbox/repos/{o}/{n}/runs` | `{"head_sha", "workflow"?: "run-sweep.yml", "event"?: "pull_request", "conclusion"?: "success", "jobs": [{"name", "conclusion"}], "artifacts"?: {NAME: {PATH: TEXT \| {"base64": B64}}}}` | records a finished run with those jobs (each a check run of the commit) and artifacts; answers `{"id"}` |
//! | `POST /_sandbox/repos/{o}/{n}/runs/{id}/status` | `{"status", "conclusion"?}` | sets a run's status |
//! | `POST /_sandbox/repos/{o}/{n}/producer-runs/{id}` | `{"dataset"?: D, "expired"?: true, "gone"?: true}` | changes a producer run the results API names (`ci::producer`): its AgentX artifacts name dataset `D`, are expired, or the run is gone; before or after the API first answers it |
//! | `POST /_sandbox/clock` | `{"offset_seconds": N}` | puts this GitHub's clock (the `Date` of its answers) N seconds from the local one |
//! | `POST /_sandbox/tokens/revoke` | `{"token"}` (in the body, so it never appears in a logged path) | revokes a token: every request with it is then answered 401 "Bad credentials"; 404 when there is no such token |
//! | `POST /_sandbox/faults` | a [`Fault`], e.g. `{"method": "POST", "path": "/repos/*/pulls", "count": 1, "action": {"kind": "after_write_status", "status": 502}}` | installs a fault (`status` with `retry_after`/`message`, `secondary_limit` with `status` (403 or 429) and an optional `retry_after` — GitHub's secondary rate limit with or without the header, `delay` with `millis`, `after_write_status`, `after_write_drop`) |
//! | `DELETE /_sandbox/faults` | | removes all faults |
//! | `GET /_sandbox/log` | | the request log: method, path, status, login (never a token) |
//! | `GET /_sandbox/download/{repo id}/{artifact id}` | | artifact bytes (the target of the artifact `zip` redirect) |
//! | `GET /_sandbox/job-log/{repo id}/{job id}` | | a job's log text (the target of the job `logs` redirect) |

use std::collections::BTreeMap;
use std::path::PathBuf;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::{Json, Router};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde::Deserialize;
use serde_json::{Value, json};

use super::faults::Fault;
use super::state::{ArtifactFiles, FinishedRun, GithubState, Permission, SimError};

/// Control routes (mounted under `/_sandbox`).
pub fn router() -> Router<GithubState> {
    Router::new()
        .route("/repos", post(create_repo))
        .route("/users", post(create_user))
        .route(
            "/repos/{owner}/{repo}/collaborators/{login}",
            put(set_permission),
        )
        .route("/repos/{owner}/{repo}/push", post(push))
        .route(
            "/repos/{owner}/{repo}/workflows/{workflow}",
            delete(remove_workflow),
        )
        .route(
            "/repos/{owner}/{repo}/runs/{id}/complete",
            post(complete_run),
        )
        .route("/repos/{owner}/{repo}/runs/{id}/status", post(run_status))
        .route("/repos/{owner}/{repo}/runs", post(add_run))
        .route(
            "/repos/{owner}/{repo}/producer-runs/{id}",
            post(change_producer_run),
        )
        .route("/tokens/revoke", post(revoke_token))
        .route("/clock", post(set_clock))
        .route("/faults", post(add_fault))
        .route("/faults", delete(clear_faults))
        .route("/log", get(log))
        .route("/download/{repo_id}/{id}", get(super::actions::download))
        .route(
            "/job-log/{repo_id}/{id}",
            get(super::actions::job_log_download),
        )
}

struct ControlError(SimError);

impl IntoResponse for ControlError {
    fn into_response(self) -> Response {
        let status = match &self.0 {
            SimError::NoRepo(_) | SimError::NoUser(_) | SimError::NotFound(_) => {
                StatusCode::NOT_FOUND
            }
            SimError::RepoExists(_) => StatusCode::CONFLICT,
            SimError::Invalid(_) | SimError::Io { .. } => StatusCode::BAD_REQUEST,
        };
        (status, Json(json!({"message": self.0.to_string()}))).into_response()
    }
}

impl From<SimError> for ControlError {
    fn from(e: SimError) -> Self {
        Self(e)
    }
}

#[derive(Deserialize)]
struct RepoIn {
    repo: String,
    #[serde(default)]
    default_branch: Option<String>,
    #[serde(default)]
    seed_dir: Option<PathBuf>,
    #[serde(default)]
    committer: Option<String>,
}

async fn create_repo(
    State(st): State<GithubState>,
    Json(b): Json<RepoIn>,
) -> Result<Response, ControlError> {
    st.create_repo(&b.repo, b.default_branch.as_deref().unwrap_or("main"))
        .await?;
    let head = match &b.seed_dir {
        Some(dir) => Some(
            st.seed_from_dir(&b.repo, dir, b.committer.as_deref())
                .await?,
        ),
        None => None,
    };
    Ok((
        StatusCode::CREATED,
        Json(json!({"repo": b.repo, "head": head})),
    )
        .into_response())
}

#[derive(Deserialize)]
struct UserIn {
    login: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    bot: bool,
    /// `User` or `Bot` (GitHub's account `type`); `Bot` is the same as
    /// `"bot": true`.
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    rate_limit: Option<u64>,
    /// A permission to grant, on `repo` or, without it, on every repository.
    #[serde(default)]
    permission: Option<Permission>,
    #[serde(default)]
    repo: Option<String>,
}

async fn create_user(
    State(st): State<GithubState>,
    Json(b): Json<UserIn>,
) -> Result<Response, ControlError> {
    let bot = match b.kind.as_deref() {
        None => b.bot,
        Some("User") => false,
        Some("Bot") => true,
        Some(other) => {
            return Err(SimError::Invalid(format!("type {other:?} is not User or Bot")).into());
        }
    };
    let id = st.add_user(&b.login, b.name.as_deref(), bot).await;
    // Tests that want several people need a credential for each: one is
    // made up when none is given.
    let token = b.token.clone().unwrap_or_else(|| {
        let suffix: u64 = rand::random();
        format!("sandbox_{}_{suffix:016x}", b.login.replace(['[', ']'], ""))
    });
    st.add_token(&b.login, &token, b.rate_limit).await?;
    if let Some(permission) = b.permission {
        let repos = match &b.repo {
            Some(repo) => vec![repo.clone()],
            None => st.repo_names().await,
        };
        for repo in repos {
            st.set_permission(&repo, &b.login, permission).await?;
        }
    }
    Ok((
        StatusCode::CREATED,
        Json(json!({"login": b.login, "id": id, "token": token})),
    )
        .into_response())
}

#[derive(Deserialize)]
struct PermissionIn {
    permission: Permission,
}

async fn set_permission(
    State(st): State<GithubState>,
    Path((owner, repo, login)): Path<(String, String, String)>,
    Json(b): Json<PermissionIn>,
) -> Result<Response, ControlError> {
    st.set_permission(&format!("{owner}/{repo}"), &login, b.permission)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// File content in control requests: a UTF-8 string, `{"base64": "..."}`,
/// or `null` (delete).
fn bytes_of(v: &Value, what: &str) -> Result<Option<Vec<u8>>, SimError> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone().into_bytes())),
        Value::Object(o) => match o.get("base64").and_then(Value::as_str) {
            Some(b) => B64
                .decode(b)
                .map(Some)
                .map_err(|e| SimError::Invalid(format!("{what}: invalid base64: {e}"))),
            None => Err(SimError::Invalid(format!(
                "{what}: expected a string, {{\"base64\": ...}} or null"
            ))),
        },
        _ => Err(SimError::Invalid(format!(
            "{what}: expected a string, {{\"base64\": ...}} or null"
        ))),
    }
}

#[derive(Deserialize)]
struct PushIn {
    branch: String,
    login: String,
    message: String,
    files: BTreeMap<String, Value>,
}

async fn push(
    State(st): State<GithubState>,
    Path((owner, repo)): Path<(String, String)>,
    Json(b): Json<PushIn>,
) -> Result<Response, ControlError> {
    let mut files = BTreeMap::new();
    for (path, v) in &b.files {
        files.insert(path.clone(), bytes_of(v, path)?);
    }
    let sha = st
        .push_commit(
            &format!("{owner}/{repo}"),
            &b.branch,
            &b.login,
            files,
            &b.message,
        )
        .await?;
    Ok((StatusCode::CREATED, Json(json!({"sha": sha}))).into_response())
}

async fn remove_workflow(
    State(st): State<GithubState>,
    Path((owner, repo, workflow)): Path<(String, String, String)>,
) -> Result<Response, ControlError> {
    if st
        .remove_workflow(&format!("{owner}/{repo}"), &workflow)
        .await?
    {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(SimError::NotFound(format!("workflow {workflow}")).into())
    }
}

#[derive(Deserialize)]
struct CompleteIn {
    conclusion: String,
    #[serde(default)]
    artifacts: BTreeMap<String, BTreeMap<String, Value>>,
}

async fn complete_run(
    State(st): State<GithubState>,
    Path((owner, repo, id)): Path<(String, String, u64)>,
    Json(b): Json<CompleteIn>,
) -> Result<Response, ControlError> {
    let mut artifacts: ArtifactFiles = BTreeMap::new();
    for (name, files) in &b.artifacts {
        let mut out = BTreeMap::new();
        for (path, v) in files {
            let bytes = bytes_of(v, &format!("{name}/{path}"))?
                .ok_or_else(|| SimError::Invalid(format!("{name}/{path}: content is null")))?;
            out.insert(path.clone(), bytes);
        }
        artifacts.insert(name.clone(), out);
    }
    st.complete_run(&format!("{owner}/{repo}"), id, &b.conclusion, artifacts)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Deserialize)]
struct StatusIn {
    status: String,
    #[serde(default)]
    conclusion: Option<String>,
}

async fn run_status(
    State(st): State<GithubState>,
    Path((owner, repo, id)): Path<(String, String, u64)>,
    Json(b): Json<StatusIn>,
) -> Result<Response, ControlError> {
    st.set_run_status(
        &format!("{owner}/{repo}"),
        id,
        &b.status,
        b.conclusion.as_deref(),
    )
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Deserialize)]
struct ProducerIn {
    #[serde(default)]
    dataset: Option<String>,
    #[serde(default)]
    expired: bool,
    #[serde(default)]
    gone: bool,
}

async fn change_producer_run(
    State(st): State<GithubState>,
    Path((owner, repo, id)): Path<(String, String, u64)>,
    Json(b): Json<ProducerIn>,
) -> Response {
    let change = super::state::ProducerOverride {
        dataset: b.dataset,
        expired: b.expired,
        gone: b.gone,
    };
    crate::ci::producer::change(&st, &format!("{owner}/{repo}"), id, change).await;
    StatusCode::NO_CONTENT.into_response()
}

#[derive(Deserialize)]
struct ClockBody {
    offset_seconds: i64,
}

async fn set_clock(State(st): State<GithubState>, Json(b): Json<ClockBody>) -> Response {
    match chrono::TimeDelta::try_seconds(b.offset_seconds) {
        Some(offset) => {
            st.set_clock_offset(offset).await;
            StatusCode::NO_CONTENT.into_response()
        }
        None => StatusCode::BAD_REQUEST.into_response(),
    }
}

#[derive(Deserialize)]
struct RevokeBody {
    token: String,
}

async fn revoke_token(State(st): State<GithubState>, Json(b): Json<RevokeBody>) -> Response {
    if st.revoke_token(&b.token).await {
        StatusCode::NO_CONTENT.into_response()
    } else {
        StatusCode::NOT_FOUND.into_response()
    }
}

async fn add_fault(State(st): State<GithubState>, Json(f): Json<Fault>) -> Response {
    st.add_fault(f).await;
    StatusCode::NO_CONTENT.into_response()
}

async fn clear_faults(State(st): State<GithubState>) -> Response {
    st.clear_faults().await;
    StatusCode::NO_CONTENT.into_response()
}

async fn log(State(st): State<GithubState>) -> Response {
    Json(st.request_log().await).into_response()
}

#[derive(Deserialize)]
struct JobIn {
    name: String,
    conclusion: String,
}

#[derive(Deserialize)]
struct RunIn {
    head_sha: String,
    #[serde(default)]
    workflow: Option<String>,
    #[serde(default)]
    event: Option<String>,
    #[serde(default)]
    conclusion: Option<String>,
    #[serde(default)]
    jobs: Vec<JobIn>,
    #[serde(default)]
    artifacts: BTreeMap<String, BTreeMap<String, Value>>,
}

async fn add_run(
    State(st): State<GithubState>,
    Path((owner, repo)): Path<(String, String)>,
    Json(b): Json<RunIn>,
) -> Result<Response, ControlError> {
    let mut artifacts: ArtifactFiles = BTreeMap::new();
    for (name, files) in &b.artifacts {
        let mut out = BTreeMap::new();
        for (path, v) in files {
            let bytes = bytes_of(v, &format!("{name}/{path}"))?
                .ok_or_else(|| SimError::Invalid(format!("{name}/{path}: content is null")))?;
            out.insert(path.clone(), bytes);
        }
        artifacts.insert(name.clone(), out);
    }
    let run = FinishedRun {
        workflow: b.workflow.unwrap_or_else(|| "run-sweep.yml".into()),
        head_sha: b.head_sha,
        event: b.event.unwrap_or_else(|| "pull_request".into()),
        conclusion: b.conclusion.unwrap_or_else(|| "success".into()),
        jobs: b.jobs.into_iter().map(|j| (j.name, j.conclusion)).collect(),
        artifacts,
    };
    let id = st.add_finished_run(&format!("{owner}/{repo}"), run).await?;
    Ok((StatusCode::CREATED, Json(json!({"id": id}))).into_response())
}
