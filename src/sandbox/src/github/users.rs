//! Users, the authenticated user per token, repositories and collaborator
//! permissions.

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::http::{ApiError, Caller};
use super::state::{GithubState, Permission};

/// `GET /user`: the account behind the token (what Klaud's identity
/// preflight checks).
pub async fn me(State(st): State<GithubState>, caller: Caller) -> Result<Response, ApiError> {
    let login = caller.require()?;
    let m = st.lock().await;
    let u = m.user(login).ok_or_else(ApiError::bad_credentials)?;
    if u.is_bot && u.login.ends_with("[bot]") {
        // Installation tokens have no user behind them.
        return Err(ApiError::forbidden(
            "Resource not accessible by integration",
        ));
    }
    Ok(Json(m.public_user_json(u)).into_response())
}

/// `GET /users/{login}`.
pub async fn get_user(
    State(st): State<GithubState>,
    Path(login): Path<String>,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let u = m.user(&login).ok_or_else(ApiError::not_found)?;
    Ok(Json(m.public_user_json(u)).into_response())
}

/// `GET /repos/{owner}/{repo}`.
pub async fn get_repo(
    State(st): State<GithubState>,
    Path((owner, repo)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    Ok(Json(m.repo_json(r)).into_response())
}

/// `GET /repos/{owner}/{repo}/collaborators/{user}/permission`. GitHub
/// lets only callers with push access look collaborators up.
pub async fn permission(
    State(st): State<GithubState>,
    caller: Caller,
    Path((owner, repo, user)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let login = caller.require()?;
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    if r.permission_of(login) < Permission::Write {
        return Err(ApiError::forbidden(
            "Must have push access to view repository collaborators.",
        ));
    }
    let u = m.user(&user).ok_or_else(ApiError::not_found)?;
    let explicit = user.eq_ignore_ascii_case(&r.owner)
        || r.collaborators.contains_key(&user.to_ascii_lowercase());
    let perm = if explicit {
        r.permission_of(&u.login)
    } else {
        Permission::Read
    };
    // GitHub folds maintain into "write" and triage into "read" in
    // `permission`, and keeps the precise value in `role_name`.
    let (legacy, role) = match perm {
        Permission::Admin => ("admin", "admin"),
        Permission::Maintain => ("write", "maintain"),
        Permission::Write => ("write", "write"),
        Permission::Triage => ("read", "triage"),
        Permission::Read => ("read", "read"),
        Permission::None => ("none", "none"),
    };
    let mut user_json = m.user_json(u);
    user_json["permissions"] = json!({
        "admin": perm >= Permission::Admin, "maintain": perm >= Permission::Maintain,
        "push": perm >= Permission::Write, "triage": perm >= Permission::Triage,
        "pull": perm >= Permission::Read,
    });
    user_json["role_name"] = json!(role);
    Ok(Json(json!({"permission": legacy, "role_name": role, "user": user_json})).into_response())
}
