//! GitHub Apps: `GET /app` and installation access tokens, authenticated by
//! an RS256 JWT signed with the app's private key (verified against the
//! registered public key). An installation token acts as `<slug>[bot]`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use octocrab::jsonwebtoken::{Algorithm, DecodingKey, Validation, decode};
use rand::Rng;
use serde::Deserialize;
use serde_json::json;

use super::http::ApiError;
use super::state::{GithubState, Model, TokenInfo, fmt_time};

/// A registered GitHub App.
#[derive(Debug, Clone)]
pub struct App {
    pub id: u64,
    pub slug: String,
    pub name: String,
    pub public_key_pem: String,
    pub installations: Vec<u64>,
}

impl App {
    /// The login its installation tokens act as.
    pub fn bot_login(&self) -> String {
        format!("{}[bot]", self.slug)
    }
}

#[derive(Deserialize)]
struct Claims {
    iss: serde_json::Value,
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
    // validates as a string; the issuer was matched above.
    v.set_required_spec_claims(&["exp", "iat"]);
    decode::<Claims>(jwt, &key, &v).map_err(|e| {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            &format!("A JSON web token could not be decoded ({e})"),
        )
    })?;
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

/// `POST /app/installations/{id}/access_tokens`: mints an hour-long token.
pub async fn access_token(
    State(st): State<GithubState>,
    headers: HeaderMap,
    Path(installation): Path<u64>,
) -> Result<Response, ApiError> {
    let mut m = st.lock().await;
    let app = authenticate(&m, &headers)?;
    if !app.installations.contains(&installation) {
        return Err(ApiError::not_found());
    }
    let bytes: [u8; 18] = rand::rng().random();
    let token = format!("ghs_{}", hex::encode(bytes));
    let expires = Utc::now() + chrono::Duration::hours(1);
    m.tokens.insert(
        token.clone(),
        TokenInfo {
            login: app.bot_login(),
            limit: super::state::DEFAULT_RATE_LIMIT,
            used: 0,
            reset: Utc::now().timestamp() + 3600,
        },
    );
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "token": token, "expires_at": fmt_time(expires),
            "permissions": {"contents": "write", "pull_requests": "write", "issues": "write", "actions": "write"},
            "repository_selection": "all",
        })),
    )
        .into_response())
}
