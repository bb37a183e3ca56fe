//! GitHub Apps: `GET /app`, `GET /app/installations`,
//! `GET /repos/{owner}/{repo}/installation` and installation access tokens,
//! authenticated by an RS256 JWT signed with the app's private key (verified
//! against the registered public key). As on GitHub, a JWT may live at most
//! ten minutes (`exp` further ahead, or already past, is a 401) and an
//! installation token expires after an hour. An installation token acts as
//! `<slug>[bot]`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use octocrab::jsonwebtoken::{Algorithm, DecodingKey, Validation, decode};
use rand::Rng;
use serde::Deserialize;
use serde_json::{Value, json};

use super::http::ApiError;
use super::state::{GithubState, LogEntry, Model, TokenInfo, fmt_time};

/// GitHub's longest JWT lifetime: `exp` at most this far ahead of now.
pub const MAX_JWT_LIFETIME_SECS: i64 = 600;
/// How long an installation access token lives on GitHub.
pub const INSTALLATION_TOKEN_LIFETIME_SECS: i64 = 3600;

/// A registered GitHub App.
#[derive(Debug, Clone)]
pub struct App {
    pub id: u64,
    pub slug: String,
    pub name: String,
    pub public_key_pem: String,
    pub installations: Vec<Installation>,
    /// Lifetime of the installation tokens it mints (GitHub: one hour;
    /// shorter only in tests of token refresh).
    pub token_lifetime_secs: i64,
}

/// One installation of an App on an account, covering some repositories.
#[derive(Debug, Clone)]
pub struct Installation {
    pub id: u64,
    /// The account (user or organization) it is installed on.
    pub account: String,
    /// `owner/name` of the repositories it may access.
    pub repositories: Vec<String>,
}

impl App {
    /// The login its installation tokens act as.
    pub fn bot_login(&self) -> String {
        format!("{}[bot]", self.slug)
    }
}

impl GithubState {
    /// Sets how long `app_id`'s installation tokens live (GitHub: an hour).
    pub async fn set_app_token_lifetime(&self, app_id: u64, seconds: i64) {
        if let Some(app) = self.lock().await.apps.get_mut(&app_id) {
            app.token_lifetime_secs = seconds;
        }
    }
}

#[derive(Deserialize)]
struct Claims {
    iss: serde_json::Value,
    #[serde(default)]
    exp: Option<i64>,
    #[serde(default)]
    iat: Option<i64>,
}

/// Verifies the `Authorization: Bearer <jwt>` of an app request.
fn authenticate(m: &Model, headers: &HeaderMap) -> Result<App, ApiError> {
    let jwt = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "A JSON web token could not be decoded",
            )
        })?;
    // Read the issuer first to pick the key, then verify for real.
    let bad = || {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "A JSON web token could not be decoded",
        )
    };
    let payload = jwt.split('.').nth(1).ok_or_else(bad)?;
    let payload = base64::Engine::decode(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        payload.trim_end_matches('='),
    )
    .map_err(|_| bad())?;
    let unverified: Claims = serde_json::from_slice(&payload).map_err(|_| bad())?;
    let iss = match &unverified.iss {
        serde_json::Value::Number(n) => n.as_u64(),
        serde_json::Value::String(s) => s.parse().ok(),
        _ => None,
    }
    .ok_or_else(|| {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "'Issuer' claim ('iss') must be an Integer",
        )
    })?;
    let app = m
        .apps
        .get(&iss)
        .ok_or_else(|| ApiError::new(StatusCode::UNAUTHORIZED, "Integration not found"))?;
    let key = DecodingKey::from_rsa_pem(app.public_key_pem.as_bytes()).map_err(|_| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "app public key is not valid PEM",
        )
    })?;
    let mut v = Validation::new(Algorithm::RS256);
    // GitHub (and octocrab) put a number in `iss`, which jsonwebtoken only
    // validates as a string; the issuer was matched above. Expiry is
    // checked below with GitHub's own messages.
    v.set_required_spec_claims(&["exp", "iat"]);
    v.validate_exp = false;
    let claims = decode::<Claims>(jwt, &key, &v)
        .map_err(|e| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                &format!("A JSON web token could not be decoded ({e})"),
            )
        })?
        .claims;
    let now = Utc::now().timestamp();
    let exp = claims.exp.unwrap_or_default();
    if exp <= now {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires",
        ));
    }
    if exp > now + MAX_JWT_LIFETIME_SECS {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "'Expiration time' claim ('exp') is too far in the future",
        ));
    }
    // GitHub allows a little clock drift on `iat`, not a token from the future.
    if claims.iat.unwrap_or_default() > now + 60 {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "'Issued at' claim ('iat') must be an Integer representing a time in the past",
        ));
    }
    Ok(app.clone())
}

/// `GET /app`.
pub async fn get_app(
    State(st): State<GithubState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let app = authenticate(&m, &headers)?;
    Ok(Json(json!({
        "id": app.id, "slug": app.slug, "node_id": format!("A_{}", app.id), "name": app.name,
        "owner": null, "description": null,
        "external_url": format!("{}/_apps/{}", m.base_url, app.slug),
        "html_url": format!("{}/_apps/{}", m.base_url, app.slug),
        "created_at": fmt_time(Utc::now()), "updated_at": fmt_time(Utc::now()),
        "permissions": {"contents": "write", "pull_requests": "write", "issues": "write", "actions": "write"},
        "events": [],
    }))
    .into_response())
}

fn installation_json(m: &Model, app: &App, i: &Installation) -> Value {
    let account_id = m.users.get(&i.account).map_or(0, |u| u.id);
    json!({
        "id": i.id,
        "account": {"login": i.account, "id": account_id, "type": "Organization"},
        "app_id": app.id,
        "app_slug": app.slug,
        "target_id": account_id,
        "target_type": "Organization",
        "repository_selection": "selected",
        "access_tokens_url": format!("{}/app/installations/{}/access_tokens", m.base_url, i.id),
        "repositories_url": format!("{}/installation/repositories", m.base_url),
        "html_url": format!("{}/_apps/{}/installations/{}", m.base_url, app.slug, i.id),
        "permissions": {"contents": "write", "pull_requests": "write", "issues": "write", "actions": "write"},
        "events": [],
        "created_at": fmt_time(Utc::now()),
        "updated_at": fmt_time(Utc::now()),
        "single_file_name": null,
        "suspended_at": null,
        "suspended_by": null,
    })
}

fn log(m: &mut Model, method: &str, path: String, status: u16) {
    m.record(LogEntry {
        method: method.to_string(),
        path,
        status,
        login: None,
        at: None,
    });
}

/// `GET /app/installations`: every installation of the App.
pub async fn list_installations(
    State(st): State<GithubState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let mut m = st.lock().await;
    let app = authenticate(&m, &headers)?;
    let list: Vec<Value> = app
        .installations
        .iter()
        .map(|i| installation_json(&m, &app, i))
        .collect();
    log(&mut m, "GET", "/app/installations".into(), 200);
    Ok(Json(Value::Array(list)).into_response())
}

/// `GET /repos/{owner}/{repo}/installation`: the App's installation that
/// covers the repository (404 when it is not installed there).
pub async fn repo_installation(
    State(st): State<GithubState>,
    headers: HeaderMap,
    Path((owner, repo)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let mut m = st.lock().await;
    let app = authenticate(&m, &headers)?;
    let full = format!("{owner}/{repo}");
    let path = format!("/repos/{full}/installation");
    let Some(i) = app
        .installations
        .iter()
        .find(|i| i.repositories.iter().any(|r| r.eq_ignore_ascii_case(&full)))
    else {
        log(&mut m, "GET", path, 404);
        return Err(ApiError::not_found());
    };
    let body = installation_json(&m, &app, i);
    log(&mut m, "GET", path, 200);
    Ok(Json(body).into_response())
}

/// `POST /app/installations/{id}/access_tokens`: mints a token that expires
/// after an hour.
pub async fn access_token(
    State(st): State<GithubState>,
    headers: HeaderMap,
    Path(installation): Path<u64>,
) -> Result<Response, ApiError> {
    let mut m = st.lock().await;
    let app = authenticate(&m, &headers)?;
    let path = format!("/app/installations/{installation}/access_tokens");
    if !app.installations.iter().any(|i| i.id == installation) {
        log(&mut m, "POST", path, 404);
        return Err(ApiError::not_found());
    }
    let bytes: [u8; 18] = rand::rng().random();
    let token = format!("ghs_{}", hex::encode(bytes));
    let now = Utc::now();
    let expires = now + chrono::Duration::seconds(app.token_lifetime_secs);
    m.tokens.insert(
        token.clone(),
        TokenInfo {
            login: app.bot_login(),
            limit: super::state::DEFAULT_RATE_LIMIT,
            used: 0,
            reset: now.timestamp() + 3600,
            expires_at: Some(expires.timestamp()),
        },
    );
    log(&mut m, "POST", path, 201);
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "token": token, "expires_at": fmt_time(expires),
            "permissions": {"contents": "write", "pull_requests": "write", "issues": "write", "actions": "write"},
            "repository_selection": "selected",
        })),
    )
        .into_response())
}
