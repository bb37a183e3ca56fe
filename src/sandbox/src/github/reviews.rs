//! Pull request reviews and inline review comments, each with GitHub's
//! `author_association`:
//!
//! - `GET|POST /repos/{o}/{r}/pulls/{n}/reviews`, `GET …/reviews/{id}`
//!   (`event` `APPROVE`, `REQUEST_CHANGES` or `COMMENT` submits; without it
//!   the review stays `PENDING`, as on GitHub),
//! - `GET|POST /repos/{o}/{r}/pulls/{n}/comments`,
//!   `GET|PATCH /repos/{o}/{r}/pulls/comments/{id}`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde::Deserialize;
use serde_json::{Value, json};

use super::http::{ApiError, Caller, FullUri, paginate};
use super::state::{GithubState, Model, Repo, Review, ReviewComment, fmt_time};

/// GitHub's limit on a review or comment body.
const MAX_BODY: usize = 65_536;

fn parse_id(n: &str) -> Result<u64, ApiError> {
    n.parse().map_err(|_| ApiError::not_found())
}

fn check_body(body: &str) -> Result<(), ApiError> {
    if body.chars().count() > MAX_BODY {
        return Err(ApiError::validation(json!({
            "resource": "PullRequestReview", "code": "custom", "field": "body",
            "message": "body is too long (maximum is 65536 characters)",
        })));
    }
    Ok(())
}

fn review_json(m: &Model, r: &Repo, v: &Review) -> Value {
    let url = m.repo_url(&r.owner, &r.name);
    let html = m.html_base(&url);
    json!({
        "id": v.id, "node_id": format!("PRR_{}", v.id),
        "user": m.login_json(&v.user), "body": v.body, "state": v.state,
        "html_url": format!("{html}/pull/{}#pullrequestreview-{}", v.pull, v.id),
        "pull_request_url": format!("{url}/pulls/{}", v.pull),
        "author_association": m.author_association(r, &v.user),
        "submitted_at": if v.state == "PENDING" { None } else { Some(fmt_time(v.submitted_at)) },
        "commit_id": v.commit_id,
        "_links": {
            "html": {"href": format!("{html}/pull/{}#pullrequestreview-{}", v.pull, v.id)},
            "pull_request": {"href": format!("{url}/pulls/{}", v.pull)},
        },
    })
}

fn comment_json(m: &Model, r: &Repo, c: &ReviewComment) -> Value {
    let url = m.repo_url(&r.owner, &r.name);
    let html = m.html_base(&url);
    json!({
        "id": c.id, "node_id": format!("PRRC_{}", c.id),
        "url": format!("{url}/pulls/comments/{}", c.id),
        "pull_request_review_id": c.review_id, "diff_hunk": "", "path": c.path,
        "commit_id": c.commit_id, "original_commit_id": c.commit_id,
        "user": m.login_json(&c.user), "body": c.body,
        "created_at": fmt_time(c.created_at), "updated_at": fmt_time(c.updated_at),
        "html_url": format!("{html}/pull/{}#discussion_r{}", c.pull, c.id),
        "pull_request_url": format!("{url}/pulls/{}", c.pull),
        "author_association": m.author_association(r, &c.user),
        "line": c.line, "original_line": c.line, "side": "RIGHT",
        "_links": {
            "self": {"href": format!("{url}/pulls/comments/{}", c.id)},
            "html": {"href": format!("{html}/pull/{}#discussion_r{}", c.pull, c.id)},
            "pull_request": {"href": format!("{url}/pulls/{}", c.pull)},
        },
    })
}

pub async fn list_reviews(
    State(st): State<GithubState>,
    Path((owner, repo, number)): Path<(String, String, String)>,
    FullUri(uri): FullUri,
) -> Result<Response, ApiError> {
    let number = parse_id(&number)?;
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    if !r.pulls.contains_key(&number) {
        return Err(ApiError::not_found());
    }
    let items = r
        .reviews
        .values()
        .filter(|v| v.pull == number)
        .map(|v| review_json(&m, r, v))
        .collect();
    Ok(paginate(items, &m.base_url, &uri, None))
}

pub async fn get_review(
    State(st): State<GithubState>,
    Path((owner, repo, number, id)): Path<(String, String, String, String)>,
) -> Result<Response, ApiError> {
    let number = parse_id(&number)?;
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    let v = r
        .reviews
        .get(&parse_id(&id)?)
        .filter(|v| v.pull == number)
        .ok_or_else(ApiError::not_found)?;
    Ok(Json(review_json(&m, r, v)).into_response())
}

#[derive(Deserialize)]
pub struct ReviewIn {
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    event: Option<String>,
    #[serde(default)]
    commit_id: Option<String>,
}

pub async fn create_review(
    State(st): State<GithubState>,
    caller: Caller,
    Path((owner, repo, number)): Path<(String, String, String)>,
    Json(b): Json<ReviewIn>,
) -> Result<Response, ApiError> {
    let login = caller.require()?.to_string();
    let number = parse_id(&number)?;
    let body = b.body.unwrap_or_default();
    check_body(&body)?;
    let state = match b.event.as_deref() {
        None => "PENDING",
        Some("APPROVE") => "APPROVED",
        Some("REQUEST_CHANGES") => "CHANGES_REQUESTED",
        Some("COMMENT") => "COMMENTED",
        Some(_) => {
            return Err(ApiError::validation(
                json!({"resource": "PullRequestReview", "field": "event", "code": "invalid"}),
            ));
        }
    };
    if matches!(state, "COMMENTED" | "CHANGES_REQUESTED") && body.is_empty() {
        return Err(ApiError::unprocessable(
            "Unprocessable Entity: body is required for this event",
        ));
    }
    let mut m = st.lock().await;
    let id = m.id();
    let r = m.repo_mut(&owner, &repo)?;
    let pull = r.pulls.get(&number).ok_or_else(ApiError::not_found)?;
    if state == "APPROVED" && pull.user.eq_ignore_ascii_case(&login) {
        return Err(ApiError::unprocessable(
            "Unprocessable Entity: Can not approve your own pull request",
        ));
    }
    let commit_id = b.commit_id.unwrap_or_else(|| pull.head_sha.clone());
    if let Some(p) = r.pulls.get_mut(&number) {
        p.updated_at = Utc::now();
    }
    r.reviews.insert(
        id,
        Review {
            id,
            pull: number,
            user: login,
            body,
            state: state.into(),
            commit_id,
            submitted_at: Utc::now(),
        },
    );
    let r = m.repo(&owner, &repo)?;
    let v = r.reviews.get(&id).ok_or_else(ApiError::not_found)?;
    Ok(Json(review_json(&m, r, v)).into_response())
}

pub async fn list_comments(
    State(st): State<GithubState>,
    Path((owner, repo, number)): Path<(String, String, String)>,
    FullUri(uri): FullUri,
) -> Result<Response, ApiError> {
    let number = parse_id(&number)?;
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    if !r.pulls.contains_key(&number) {
        return Err(ApiError::not_found());
    }
    let items = r
        .review_comments
        .values()
        .filter(|c| c.pull == number)
        .map(|c| comment_json(&m, r, c))
        .collect();
    Ok(paginate(items, &m.base_url, &uri, None))
}

pub async fn get_comment(
    State(st): State<GithubState>,
    Path((owner, repo, id)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    let c = r
        .review_comments
        .get(&parse_id(&id)?)
        .ok_or_else(ApiError::not_found)?;
    Ok(Json(comment_json(&m, r, c)).into_response())
}

#[derive(Deserialize)]
pub struct CommentIn {
    body: String,
    #[serde(default)]
    commit_id: Option<String>,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    line: Option<u64>,
}

pub async fn create_comment(
    State(st): State<GithubState>,
    caller: Caller,
    Path((owner, repo, number)): Path<(String, String, String)>,
    Json(b): Json<CommentIn>,
) -> Result<Response, ApiError> {
    let login = caller.require()?.to_string();
    let number = parse_id(&number)?;
    check_body(&b.body)?;
    let Some(path) = b.path.filter(|p| !p.is_empty()) else {
        return Err(ApiError::validation(
            json!({"resource": "PullRequestReviewComment", "field": "path", "code": "missing_field"}),
        ));
    };
    let mut m = st.lock().await;
    let id = m.id();
    let review_id = m.id();
    let r = m.repo_mut(&owner, &repo)?;
    let pull = r.pulls.get(&number).ok_or_else(ApiError::not_found)?;
    let commit_id = b.commit_id.unwrap_or_else(|| pull.head_sha.clone());
    let now = Utc::now();
    if let Some(p) = r.pulls.get_mut(&number) {
        p.updated_at = now;
    }
    // An inline comment outside a review comes with a review of its own
    // (state COMMENTED, empty body), as on GitHub.
    r.reviews.insert(
        review_id,
        Review {
            id: review_id,
            pull: number,
            user: login.clone(),
            body: String::new(),
            state: "COMMENTED".into(),
            commit_id: commit_id.clone(),
            submitted_at: now,
        },
    );
    r.review_comments.insert(
        id,
        ReviewComment {
            id,
            pull: number,
            review_id: Some(review_id),
            user: login,
            body: b.body,
            path,
            line: b.line,
            commit_id,
            created_at: now,
            updated_at: now,
        },
    );
    let r = m.repo(&owner, &repo)?;
    let c = r.review_comments.get(&id).ok_or_else(ApiError::not_found)?;
    Ok((StatusCode::CREATED, Json(comment_json(&m, r, c))).into_response())
}

#[derive(Deserialize)]
pub struct EditIn {
    body: String,
}

pub async fn update_comment(
    State(st): State<GithubState>,
    caller: Caller,
    Path((owner, repo, id)): Path<(String, String, String)>,
    Json(b): Json<EditIn>,
) -> Result<Response, ApiError> {
    let login = caller.require()?.to_string();
    check_body(&b.body)?;
    let id = parse_id(&id)?;
    let mut m = st.lock().await;
    let r = m.repo_mut(&owner, &repo)?;
    let c = r
        .review_comments
        .get_mut(&id)
        .ok_or_else(ApiError::not_found)?;
    if !c.user.eq_ignore_ascii_case(&login) {
        return Err(ApiError::forbidden(
            "Must be the comment's author to edit it.",
        ));
    }
    let now = Utc::now();
    c.body = b.body;
    c.updated_at = now;
    let pull = c.pull;
    if let Some(p) = r.pulls.get_mut(&pull) {
        p.updated_at = now;
    }
    let r = m.repo(&owner, &repo)?;
    let c = r.review_comments.get(&id).ok_or_else(ApiError::not_found)?;
    Ok(Json(comment_json(&m, r, c)).into_response())
}
