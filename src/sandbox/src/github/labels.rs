//! Labels on issues and pull requests. Each added or removed label of a pull
//! request is a `labeled` / `unlabeled` event for the repository's workflow
//! files (`workflow_events`). Without workflow files, adding a label to a pull
//! request that changes `perf-changelog.yaml` starts a `pull_request` run of
//! `run-sweep.yml`, like the InferenceX workflow trigger.

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;

use super::actions::start_sweep_run;
use super::http::{ApiError, Caller};
use super::state::{GithubState, Model};
use super::workflow_events;

/// The shapes GitHub accepts: `{"labels": [...]}` and a bare array, each of
/// names or of `{"name": ...}` objects.
#[derive(Deserialize)]
#[serde(untagged)]
pub enum LabelsIn {
    Wrapped { labels: Vec<LabelIn> },
    Bare(Vec<LabelIn>),
}

/// One label as sent: a name, or an object with one.
#[derive(Deserialize)]
#[serde(untagged)]
pub enum LabelIn {
    Name(String),
    Object { name: String },
}

impl LabelIn {
    /// The label's name.
    pub fn name(self) -> String {
        match self {
            LabelIn::Name(n) | LabelIn::Object { name: n } => n,
        }
    }
}

impl LabelsIn {
    fn names(self) -> Vec<String> {
        match self {
            LabelsIn::Wrapped { labels } | LabelsIn::Bare(labels) => {
                labels.into_iter().map(LabelIn::name).collect()
            }
        }
    }
}

fn parse_number(n: &str) -> Result<u64, ApiError> {
    n.parse().map_err(|_| ApiError::not_found())
}

fn labels_of(m: &Model, owner: &str, repo: &str, number: u64) -> Result<Response, ApiError> {
    let r = m.repo(owner, repo)?;
    let labels = r.issue_labels(number).ok_or_else(ApiError::not_found)?;
    let v: Vec<Value> = labels.iter().map(|l| m.label_json(r, l)).collect();
    Ok(Json(Value::Array(v)).into_response())
}

pub async fn list(
    State(st): State<GithubState>,
    Path((owner, repo, number)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    labels_of(&m, &owner, &repo, parse_number(&number)?)
}

/// Adds labels (creating unknown ones in the repository, as GitHub does).
/// Returns whether any label was new on the issue.
fn add_labels(
    m: &mut Model,
    owner: &str,
    repo: &str,
    number: u64,
    names: Vec<String>,
) -> Result<Vec<String>, ApiError> {
    let ids: Vec<u64> = names.iter().map(|_| m.id()).collect();
    let r = m.repo_mut(owner, repo)?;
    if !r.has_issue(number) {
        return Err(ApiError::not_found());
    }
    let mut added = Vec::new();
    for (name, id) in names.into_iter().zip(ids) {
        let name = name.trim().to_string();
        if name.is_empty() || name.chars().count() > 100 {
            return Err(ApiError::unprocessable(&format!(
                "label name {name:?} is invalid"
            )));
        }
        let canonical = r.label_named(&name, id);
        let labels = r.issue_labels_mut(number).ok_or_else(ApiError::not_found)?;
        if !labels.iter().any(|l| l.eq_ignore_ascii_case(&canonical)) {
            labels.push(canonical.clone());
            added.push(canonical);
        }
    }
    Ok(added)
}

/// GitHub sends one `labeled` event per label added to a pull request;
/// without workflow files the built-in sweep trigger starts one run for the
/// request. A plain issue's labels start nothing.
fn labeled(
    m: &mut Model,
    owner: &str,
    repo: &str,
    number: u64,
    added: &[String],
    login: &str,
) -> Result<(), ApiError> {
    if !m.repo(owner, repo)?.pulls.contains_key(&number) {
        return Ok(());
    }
    for label in added {
        if workflow_events::pull_request_event(
            m,
            owner,
            repo,
            number,
            "labeled",
            Some(label),
            login,
        )?
        .is_none()
        {
            return start_sweep_run(m, owner, repo, number, login);
        }
    }
    Ok(())
}

pub async fn add(
    State(st): State<GithubState>,
    caller: Caller,
    Path((owner, repo, number)): Path<(String, String, String)>,
    Json(body): Json<LabelsIn>,
) -> Result<Response, ApiError> {
    let login = caller.require()?.to_string();
    let number = parse_number(&number)?;
    let mut m = st.lock().await;
    let added = add_labels(&mut m, &owner, &repo, number, body.names())?;
    labeled(&mut m, &owner, &repo, number, &added, &login)?;
    labels_of(&m, &owner, &repo, number)
}

pub async fn set(
    State(st): State<GithubState>,
    caller: Caller,
    Path((owner, repo, number)): Path<(String, String, String)>,
    Json(body): Json<LabelsIn>,
) -> Result<Response, ApiError> {
    let login = caller.require()?.to_string();
    let number = parse_number(&number)?;
    let mut m = st.lock().await;
    m.repo_mut(&owner, &repo)?
        .issue_labels_mut(number)
        .ok_or_else(ApiError::not_found)?
        .clear();
    let added = add_labels(&mut m, &owner, &repo, number, body.names())?;
    labeled(&mut m, &owner, &repo, number, &added, &login)?;
    labels_of(&m, &owner, &repo, number)
}

pub async fn clear(
    State(st): State<GithubState>,
    Path((owner, repo, number)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let number = parse_number(&number)?;
    let mut m = st.lock().await;
    m.repo_mut(&owner, &repo)?
        .issue_labels_mut(number)
        .ok_or_else(ApiError::not_found)?
        .clear();
    Ok(axum::http::StatusCode::NO_CONTENT.into_response())
}

pub async fn remove(
    State(st): State<GithubState>,
    caller: Caller,
    Path((owner, repo, number, name)): Path<(String, String, String, String)>,
) -> Result<Response, ApiError> {
    let number = parse_number(&number)?;
    let mut m = st.lock().await;
    let r = m.repo_mut(&owner, &repo)?;
    let is_pull = r.pulls.contains_key(&number);
    let labels = r.issue_labels_mut(number).ok_or_else(ApiError::not_found)?;
    let Some(removed) = labels
        .iter()
        .find(|l| l.eq_ignore_ascii_case(&name))
        .cloned()
    else {
        return Err(ApiError::new(
            axum::http::StatusCode::NOT_FOUND,
            "Label does not exist",
        ));
    };
    labels.retain(|l| !l.eq_ignore_ascii_case(&name));
    if let Some(login) = caller.login().filter(|_| is_pull) {
        let login = login.to_string();
        workflow_events::pull_request_event(
            &mut m,
            &owner,
            &repo,
            number,
            "unlabeled",
            Some(&removed),
            &login,
        )?;
    }
    labels_of(&m, &owner, &repo, number)
}
