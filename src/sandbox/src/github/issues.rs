//! Plain issues: open, list (with GitHub's `state`, `creator`, `labels`,
//! `sort`, `direction` and `since` filters; pull requests are listed too,
//! as GitHub lists them), and edit (title, body, state, labels). Anyone
//! signed in may open an issue; its author or a user with write access may
//! edit its title and body, triage access suffices for its state and
//! labels, and labels sent by someone without triage access are dropped
//! silently, as GitHub does.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};

use super::http::{ApiError, Caller, FullUri, paginate};
use super::state::{GithubState, Issue, Permission, Repo};

/// GitHub's limit on an issue body.
const MAX_BODY: usize = 65_536;

fn parse_number(n: &str) -> Result<u64, ApiError> {
    n.parse().map_err(|_| ApiError::not_found())
}

fn invalid(field: &str) -> ApiError {
    ApiError::validation(json!({"resource": "Issue", "field": field, "code": "invalid"}))
}

fn check_body(body: Option<&str>) -> Result<(), ApiError> {
    if body.is_some_and(|b| b.chars().count() > MAX_BODY) {
        return Err(ApiError::validation(json!({
            "resource": "Issue", "code": "custom", "field": "body",
            "message": "body is too long (maximum is 65536 characters)",
        })));
    }
    Ok(())
}

/// A title is a string or a number (GitHub accepts both).
#[derive(Deserialize)]
#[serde(untagged)]
pub enum Title {
    Text(String),
    Number(i64),
}

impl Title {
    fn text(self) -> String {
        match self {
            Title::Text(t) => t,
            Title::Number(n) => n.to_string(),
        }
    }
}

#[derive(Deserialize)]
pub struct CreateIssue {
    #[serde(default)]
    title: Option<Title>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    labels: Vec<super::labels::LabelIn>,
}

/// Labels by name, creating unknown ones in the repository as GitHub does.
fn canonical_labels(r: &mut Repo, names: Vec<String>, ids: Vec<u64>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (name, id) in names.into_iter().zip(ids) {
        let name = name.trim().to_string();
        if name.is_empty() {
            continue;
        }
        let canonical = r.label_named(&name, id);
        if !out.iter().any(|l| l.eq_ignore_ascii_case(&canonical)) {
            out.push(canonical);
        }
    }
    out
}

pub async fn create(
    State(st): State<GithubState>,
    caller: Caller,
    Path((owner, repo)): Path<(String, String)>,
    Json(body): Json<CreateIssue>,
) -> Result<Response, ApiError> {
    let login = caller.require()?.to_string();
    let title = body.title.map(Title::text).unwrap_or_default();
    if title.trim().is_empty() {
        return Err(ApiError::validation(
            json!({"resource": "Issue", "code": "missing_field", "field": "title"}),
        ));
    }
    check_body(body.body.as_deref())?;
    let names: Vec<String> = body.labels.into_iter().map(|l| l.name()).collect();
    let mut m = st.lock().await;
    let id = m.id();
    let ids: Vec<u64> = names.iter().map(|_| m.id()).collect();
    let r = m.repo_mut(&owner, &repo)?;
    let labels = if r.permission_of(&login) >= Permission::Triage {
        canonical_labels(r, names, ids)
    } else {
        Vec::new()
    };
    let number = r.next_number;
    r.next_number += 1;
    let now = Utc::now();
    r.issues.insert(
        number,
        Issue {
            number,
            id,
            title,
            body: body.body,
            open: true,
            user: login,
            labels,
            created_at: now,
            updated_at: now,
            closed_at: None,
            closed_by: None,
            state_reason: None,
            last_edit: None,
        },
    );
    let r = m.repo(&owner, &repo)?;
    let v = m
        .any_issue_json(r, number)
        .ok_or_else(ApiError::not_found)?;
    Ok((StatusCode::CREATED, Json(v)).into_response())
}

#[derive(Deserialize, Default)]
pub struct ListQuery {
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    creator: Option<String>,
    #[serde(default)]
    labels: Option<String>,
    #[serde(default)]
    sort: Option<String>,
    #[serde(default)]
    direction: Option<String>,
    #[serde(default)]
    since: Option<String>,
}

/// What the list filters see of an issue or pull request.
struct Listed {
    number: u64,
    open: bool,
    user: String,
    labels: Vec<String>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

pub async fn list(
    State(st): State<GithubState>,
    Path((owner, repo)): Path<(String, String)>,
    Query(q): Query<ListQuery>,
    FullUri(uri): FullUri,
) -> Result<Response, ApiError> {
    let state = q.state.as_deref().unwrap_or("open");
    if !["open", "closed", "all"].contains(&state) {
        return Err(invalid("state"));
    }
    let sort = q.sort.as_deref().unwrap_or("created");
    if !["created", "updated", "comments"].contains(&sort) {
        return Err(invalid("sort"));
    }
    let since = super::http::since_param(q.since.as_deref(), || invalid("since"))?;
    let wanted: Vec<String> = q
        .labels
        .as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    let mut all: Vec<Listed> = r
        .pulls
        .values()
        .map(|p| Listed {
            number: p.number,
            open: p.open,
            user: p.user.clone(),
            labels: p.labels.clone(),
            created_at: p.created_at,
            updated_at: p.updated_at,
        })
        .chain(r.issues.values().map(|i| Listed {
            number: i.number,
            open: i.open,
            user: i.user.clone(),
            labels: i.labels.clone(),
            created_at: i.created_at,
            updated_at: i.updated_at,
        }))
        .filter(|i| match state {
            "open" => i.open,
            "closed" => !i.open,
            _ => true,
        })
        .filter(|i| {
            q.creator
                .as_deref()
                .is_none_or(|c| i.user.eq_ignore_ascii_case(c))
        })
        .filter(|i| {
            wanted
                .iter()
                .all(|w| i.labels.iter().any(|l| l.eq_ignore_ascii_case(w)))
        })
        .filter(|i| since.is_none_or(|s| i.updated_at >= s))
        .collect();
    let comments = |n: u64| r.comments.values().filter(|c| c.issue == n).count();
    match sort {
        "updated" => all.sort_by_key(|i| (i.updated_at, i.number)),
        "comments" => all.sort_by_key(|i| (comments(i.number), i.number)),
        _ => all.sort_by_key(|i| (i.created_at, i.number)),
    }
    if q.direction.as_deref() != Some("asc") {
        all.reverse();
    }
    let items: Vec<Value> = all
        .iter()
        .filter_map(|i| m.any_issue_json(r, i.number))
        .collect();
    Ok(paginate(items, &m.base_url, &uri, None))
}

#[derive(Deserialize)]
pub struct UpdateIssue {
    #[serde(default)]
    title: Option<Title>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    state_reason: Option<String>,
    #[serde(default)]
    labels: Option<Vec<super::labels::LabelIn>>,
}

pub async fn update(
    State(st): State<GithubState>,
    caller: Caller,
    Path((owner, repo, number)): Path<(String, String, String)>,
    Json(body): Json<UpdateIssue>,
) -> Result<Response, ApiError> {
    let login = caller.require()?.to_string();
    let number = parse_number(&number)?;
    check_body(body.body.as_deref())?;
    if body
        .state
        .as_deref()
        .is_some_and(|s| s != "open" && s != "closed")
    {
        return Err(invalid("state"));
    }
    if body
        .state_reason
        .as_deref()
        .is_some_and(|s| !["completed", "not_planned", "reopened", "duplicate"].contains(&s))
    {
        return Err(invalid("state_reason"));
    }
    let names: Option<Vec<String>> = body
        .labels
        .map(|ls| ls.into_iter().map(|l| l.name()).collect());
    let mut m = st.lock().await;
    let count = names.as_ref().map_or(0, Vec::len);
    let ids: Vec<u64> = (0..count).map(|_| m.id()).collect();
    let r = m.repo_mut(&owner, &repo)?;
    let permission = r.permission_of(&login);
    let now = Utc::now();
    let edits_text = body.title.is_some() || body.body.is_some();
    if r.pulls.contains_key(&number) {
        // The simulator changes a pull request's state through the pulls
        // API only (where its workflow events are raised).
        if body.state.is_some() || names.is_some() {
            return Err(ApiError::unprocessable(
                "the simulator edits a pull request's state and labels through the pulls and labels APIs",
            ));
        }
        let p = r.pulls.get_mut(&number).ok_or_else(ApiError::not_found)?;
        if !p.user.eq_ignore_ascii_case(&login) && permission < Permission::Write {
            return Err(ApiError::forbidden(
                "Resource not accessible by personal access token",
            ));
        }
        if let Some(t) = body.title {
            p.title = t.text();
        }
        if let Some(b) = body.body {
            p.body = Some(b);
        }
        p.updated_at = now;
    } else {
        let author = r
            .issues
            .get(&number)
            .ok_or_else(ApiError::not_found)?
            .user
            .eq_ignore_ascii_case(&login);
        let may_text = author || permission >= Permission::Write;
        let may_triage = author || permission >= Permission::Triage;
        if (edits_text && !may_text) || (body.state.is_some() && !may_triage) {
            return Err(ApiError::forbidden(
                "Resource not accessible by personal access token",
            ));
        }
        let labels = match names {
            Some(n) if permission >= Permission::Triage => Some(canonical_labels(r, n, ids)),
            _ => None,
        };
        let i = r.issues.get_mut(&number).ok_or_else(ApiError::not_found)?;
        if let Some(t) = body.title {
            let t = t.text();
            if t.trim().is_empty() {
                return Err(ApiError::validation(
                    json!({"resource": "Issue", "code": "missing_field", "field": "title"}),
                ));
            }
            i.title = t;
        }
        if let Some(b) = body.body {
            i.body = Some(b);
        }
        if edits_text {
            i.last_edit = Some((login.clone(), now));
        }
        if let Some(l) = labels {
            i.labels = l;
        }
        match body.state.as_deref() {
            Some("closed") if i.open => {
                i.open = false;
                i.closed_at = Some(now);
                i.closed_by = Some(login.clone());
                i.state_reason = Some(body.state_reason.unwrap_or_else(|| "completed".into()));
            }
            Some("open") if !i.open => {
                i.open = true;
                i.closed_at = None;
                i.closed_by = None;
                i.state_reason = Some("reopened".into());
            }
            _ => {}
        }
        i.updated_at = now;
    }
    let r = m.repo(&owner, &repo)?;
    let v = m
        .any_issue_json(r, number)
        .ok_or_else(ApiError::not_found)?;
    Ok(Json(v).into_response())
}
