//! Getting an issue (or a pull request seen as one) and issue comments
//! (one issue's, or a whole repository's).

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde::Deserialize;
use serde_json::{Value, json};

use super::http::{ApiError, Caller, FullUri, paginate, since_param};
use super::state::{GithubState, IssueComment};

fn parse_id(n: &str) -> Result<u64, ApiError> {
    n.parse().map_err(|_| ApiError::not_found())
}

pub async fn get_issue(
    State(st): State<GithubState>,
    Path((owner, repo, number)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    let v = m
        .any_issue_json(r, parse_id(&number)?)
        .ok_or_else(ApiError::not_found)?;
    Ok(Json(v).into_response())
}

#[derive(Deserialize, Default)]
pub struct ListQuery {
    #[serde(default)]
    since: Option<String>,
}

pub async fn list(
    State(st): State<GithubState>,
    Path((owner, repo, number)): Path<(String, String, String)>,
    Query(q): Query<ListQuery>,
    FullUri(uri): FullUri,
) -> Result<Response, ApiError> {
    let number = parse_id(&number)?;
    let since = since_param(q.since.as_deref(), || invalid("since"))?;
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    if !r.has_issue(number) {
        return Err(ApiError::not_found());
    }
    let items: Vec<Value> = r
        .comments
        .values()
        .filter(|c| c.issue == number)
        .filter(|c| since.is_none_or(|s| c.updated_at >= s))
        .map(|c| m.comment_json(r, c))
        .collect();
    Ok(paginate(items, &m.base_url, &uri, None))
}

/// GitHub's 422 for a malformed list parameter of issue comments.
fn invalid(field: &str) -> ApiError {
    ApiError::validation(json!({"resource": "IssueComment", "field": field, "code": "invalid"}))
}

#[derive(Deserialize, Default)]
pub struct RepoListQuery {
    #[serde(default)]
    sort: Option<String>,
    #[serde(default)]
    direction: Option<String>,
    #[serde(default)]
    since: Option<String>,
}

/// `GET /repos/{owner}/{repo}/issues/comments`, GitHub's "List issue
/// comments for a repository": the comments on every issue and pull
/// request, ascending by id without `sort`; with `sort` (`created` or
/// `updated`) by that time in `direction` (`asc` or `desc`, default
/// `desc`; GitHub ignores `direction` without `sort`); `since` keeps the
/// comments updated at or after it (an edit counts); paginated with
/// `per_page` (at most 100) and `Link`. A bad `sort`, `direction` or
/// `since` is a 422, as GitHub's parameter validation answers.
pub async fn list_for_repo(
    State(st): State<GithubState>,
    Path((owner, repo)): Path<(String, String)>,
    Query(q): Query<RepoListQuery>,
    FullUri(uri): FullUri,
) -> Result<Response, ApiError> {
    let sort = q.sort.as_deref();
    if sort.is_some_and(|s| !["created", "updated"].contains(&s)) {
        return Err(invalid("sort"));
    }
    let ascending = match q.direction.as_deref() {
        None | Some("desc") => false,
        Some("asc") => true,
        Some(_) => return Err(invalid("direction")),
    };
    let since = since_param(q.since.as_deref(), || invalid("since"))?;
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    let mut found: Vec<&IssueComment> = r
        .comments
        .values()
        .filter(|c| since.is_none_or(|s| c.updated_at >= s))
        .collect();
    found.sort_by_key(|c| c.id);
    if let Some(sort) = sort {
        // Stable: comments of the same second stay in id order.
        found.sort_by_key(|c| match sort {
            "updated" => c.updated_at,
            _ => c.created_at,
        });
        if !ascending {
            found.reverse();
        }
    }
    let items: Vec<Value> = found.into_iter().map(|c| m.comment_json(r, c)).collect();
    Ok(paginate(items, &m.base_url, &uri, None))
}

#[derive(Deserialize)]
pub struct BodyIn {
    body: String,
}

/// GitHub's limit on a comment body.
const MAX_COMMENT: usize = 65_536;

fn check_body(body: &str) -> Result<(), ApiError> {
    if body.chars().count() > MAX_COMMENT {
        return Err(ApiError::validation(json!({
            "resource": "IssueComment", "code": "custom", "field": "body",
            "message": "body is too long (maximum is 65536 characters)",
        })));
    }
    if body.is_empty() {
        return Err(ApiError::validation(
            json!({"resource": "IssueComment", "code": "missing_field", "field": "body"}),
        ));
    }
    Ok(())
}

pub async fn create(
    State(st): State<GithubState>,
    caller: Caller,
    Path((owner, repo, number)): Path<(String, String, String)>,
    Json(body): Json<BodyIn>,
) -> Result<Response, ApiError> {
    let login = caller.require()?.to_string();
    let number = parse_id(&number)?;
    check_body(&body.body)?;
    let mut m = st.lock().await;
    let id = m.id();
    let r = m.repo_mut(&owner, &repo)?;
    if !r.has_issue(number) {
        return Err(ApiError::not_found());
    }
    let now = Utc::now();
    // A new comment is activity on the issue or pull request: GitHub moves
    // its `updated_at` (what "recently updated" listings sort by).
    r.touch_issue(number, now);
    r.comments.insert(
        id,
        IssueComment {
            id,
            issue: number,
            body: body.body,
            user: login,
            created_at: now,
            updated_at: now,
            edits: Vec::new(),
        },
    );
    let r = m.repo(&owner, &repo)?;
    let c = r.comments.get(&id).ok_or_else(ApiError::not_found)?;
    Ok((StatusCode::CREATED, Json(m.comment_json(r, c))).into_response())
}

pub async fn get_one(
    State(st): State<GithubState>,
    Path((owner, repo, id)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    let c = r
        .comments
        .get(&parse_id(&id)?)
        .ok_or_else(ApiError::not_found)?;
    Ok(Json(m.comment_json(r, c)).into_response())
}

/// `PATCH` (GitHub) and `POST` (what octocrab's `update_comment` sends).
pub async fn update(
    State(st): State<GithubState>,
    caller: Caller,
    Path((owner, repo, id)): Path<(String, String, String)>,
    Json(body): Json<BodyIn>,
) -> Result<Response, ApiError> {
    let login = caller.require()?.to_string();
    let id = parse_id(&id)?;
    check_body(&body.body)?;
    let mut m = st.lock().await;
    let r = m.repo_mut(&owner, &repo)?;
    let c = r.comments.get_mut(&id).ok_or_else(ApiError::not_found)?;
    if !c.user.eq_ignore_ascii_case(&login)
        && r.permission_of(&login) < super::state::Permission::Write
    {
        return Err(ApiError::forbidden(
            "Resource not accessible by personal access token",
        ));
    }
    let c = r.comments.get_mut(&id).ok_or_else(ApiError::not_found)?;
    let now = Utc::now();
    c.body = body.body;
    c.updated_at = now;
    // GitHub keeps who wrote each version: someone with write access may
    // edit another's comment, and the text is then theirs.
    c.edits.push((login.clone(), now));
    let issue = c.issue;
    r.touch_issue(issue, now);
    let r = m.repo(&owner, &repo)?;
    let c = r.comments.get(&id).ok_or_else(ApiError::not_found)?;
    Ok(Json(m.comment_json(r, c)).into_response())
}

pub async fn delete(
    State(st): State<GithubState>,
    caller: Caller,
    Path((owner, repo, id)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let login = caller.require()?.to_string();
    let id = parse_id(&id)?;
    let mut m = st.lock().await;
    let r = m.repo_mut(&owner, &repo)?;
    // As on GitHub: its author, or anyone with write access.
    let c = r.comments.get(&id).ok_or_else(ApiError::not_found)?;
    if !c.user.eq_ignore_ascii_case(&login)
        && r.permission_of(&login) < super::state::Permission::Write
    {
        return Err(ApiError::forbidden(
            "Resource not accessible by personal access token",
        ));
    }
    r.comments.remove(&id).ok_or_else(ApiError::not_found)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
