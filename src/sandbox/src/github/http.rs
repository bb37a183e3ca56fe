//! HTTP plumbing shared by the handlers: GitHub-shaped errors, the caller
//! extracted by the auth middleware, and `Link` pagination.

use axum::Json;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// Documentation link GitHub puts in every error body.
pub const DOCS_URL: &str = "https://docs.github.com/rest";

/// An error answered in GitHub's JSON shape.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub errors: Option<Value>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: &str) -> Self {
        Self {
            status,
            message: message.to_string(),
            errors: None,
        }
    }
    pub fn not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "Not Found")
    }
    pub fn unprocessable(message: &str) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, message)
    }
    /// 422 "Validation Failed" with one entry in `errors`.
    pub fn validation(error: Value) -> Self {
        Self {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            message: "Validation Failed".into(),
            errors: Some(json!([error])),
        }
    }
    pub fn bad_credentials() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "Bad credentials")
    }
    pub fn requires_auth() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "Requires authentication")
    }
    pub fn forbidden(message: &str) -> Self {
        Self::new(StatusCode::FORBIDDEN, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({
            "message": self.message,
            "documentation_url": DOCS_URL,
            "status": self.status.as_u16().to_string(),
        });
        if let Some(errors) = self.errors {
            body["errors"] = errors;
        }
        (self.status, Json(body)).into_response()
    }
}

/// The authenticated user of a request (set by the auth middleware); `None`
/// for anonymous requests.
#[derive(Debug, Clone, Default)]
pub struct Caller(pub Option<String>);

impl Caller {
    pub fn login(&self) -> Option<&str> {
        self.0.as_deref()
    }
    /// The login, or 401 for anonymous callers.
    pub fn require(&self) -> Result<&str, ApiError> {
        self.login().ok_or_else(ApiError::requires_auth)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = std::convert::Infallible;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<Caller>()
            .cloned()
            .unwrap_or_default())
    }
}

/// Pages a list like GitHub: `per_page` defaults to 30 and is capped at 100,
/// `page` starts at 1, `Link` carries next/last/first/prev.
pub fn paginate(items: Vec<Value>, base_url: &str, uri: &Uri, wrap: Option<&str>) -> Response {
    let pairs: Vec<(String, String)> = uri
        .query()
        .map(|q| {
            url::form_urlencoded::parse(q.as_bytes())
                .into_owned()
                .collect()
        })
        .unwrap_or_default();
    let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let per_page = get("per_page")
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(30)
        .min(100);
    let page = get("page")
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(1);
    let total = items.len();
    let last = total.div_ceil(per_page).max(1);
    let slice: Vec<Value> = items
        .into_iter()
        .skip((page - 1).saturating_mul(per_page))
        .take(per_page)
        .collect();
    let link_for = |p: usize| {
        let mut ser = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in &pairs {
            if k != "page" && k != "per_page" {
                ser.append_pair(k, v);
            }
        }
        ser.append_pair("per_page", &per_page.to_string());
        ser.append_pair("page", &p.to_string());
        format!("<{base_url}{}?{}>", uri.path(), ser.finish())
    };
    let mut links = Vec::new();
    if page < last {
        links.push(format!("{}; rel=\"next\"", link_for(page + 1)));
        links.push(format!("{}; rel=\"last\"", link_for(last)));
    }
    if page > 1 {
        links.push(format!("{}; rel=\"first\"", link_for(1)));
        links.push(format!("{}; rel=\"prev\"", link_for(page - 1)));
    }
    let body = match wrap {
        Some(key) => json!({"total_count": total, key: slice}),
        None => Value::Array(slice),
    };
    let mut resp = Json(body).into_response();
    if !links.is_empty()
        && let Ok(v) = HeaderValue::from_str(&links.join(", "))
    {
        resp.headers_mut().insert(header::LINK, v);
    }
    resp
}

/// The request URI as received, before router nesting strips the prefix
/// (set by the gate middleware; `Link` headers need the full path).
#[derive(Debug, Clone)]
pub struct FullUri(pub Uri);

impl<S: Send + Sync> FromRequestParts<S> for FullUri {
    type Rejection = std::convert::Infallible;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<FullUri>()
            .cloned()
            .unwrap_or_else(|| FullUri(parts.uri.clone())))
    }
}

/// A list endpoint's `since` (ISO 8601, as GitHub takes it), `None` when
/// not given; `invalid` is the 422 a malformed one gets.
pub fn since_param(
    since: Option<&str>,
    invalid: impl FnOnce() -> ApiError,
) -> Result<Option<chrono::DateTime<chrono::FixedOffset>>, ApiError> {
    since
        .map(|s| chrono::DateTime::parse_from_rfc3339(s).map_err(|_| invalid()))
        .transpose()
}
