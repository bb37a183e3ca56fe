//! HTTP surface of the registry simulator.

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use chrono::SecondsFormat;
use serde_json::{Value, json};

use super::{RegistrySim, SimRoute, valid_repository};

/// The simulator's routes: `/v2/...`, `/token` and Docker Hub's tags API.
pub fn router(state: Arc<RegistrySim>) -> Router {
    Router::new()
        .route("/v2", any(base))
        .route("/v2/", any(base))
        .route("/v2/{*rest}", any(v2))
        .route("/token", get(token))
        .with_state(state)
}

fn distribution_error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = json!({"errors": [{"code": code, "message": message, "detail": null}]});
    let mut r = (status, axum::Json(body)).into_response();
    r.headers_mut().insert(
        "docker-distribution-api-version",
        HeaderValue::from_static("registry/2.0"),
    );
    r
}

/// `http://<Host>`: the simulator does not know its own address, the
/// client's `Host` header does.
fn origin(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|h| {
            h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".:-[]".contains(&b))
        })
        .unwrap_or("127.0.0.1");
    format!("http://{host}")
}

fn query_pairs(q: Option<&str>) -> Vec<(String, String)> {
    url::form_urlencoded::parse(q.unwrap_or_default().as_bytes())
        .into_owned()
        .collect()
}

impl RegistrySim {
    /// Counts the request and answers an injected fault when one matches.
    fn enter(&self, route: SimRoute, repo: Option<&str>) -> Option<Response> {
        let mut state = self.lock();
        *state.counts.entry(route).or_default() += 1;
        let hit = state.faults.iter_mut().find(|f| {
            f.count > 0
                && f.route == route
                && (f.repository.is_none() || f.repository.as_deref() == repo)
        })?;
        hit.count -= 1;
        let status = StatusCode::from_u16(hit.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let retry_after = hit.retry_after.clone();
        state.faults.retain(|f| f.count > 0);
        drop(state);
        let code = if status == StatusCode::TOO_MANY_REQUESTS {
            "TOOMANYREQUESTS"
        } else {
            "UNAVAILABLE"
        };
        let mut r = distribution_error(status, code, "injected fault");
        if let Some(v) = retry_after.and_then(|v| HeaderValue::from_str(&v).ok()) {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
        Some(r)
    }

    /// Checks the bearer token when token auth is on; the 401 carries the
    /// challenge for `repo` (or none for `/v2/`).
    fn authorize(&self, headers: &HeaderMap, repo: Option<&str>) -> Option<Response> {
        let auth = self.auth.as_ref()?;
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if let Some(token) = presented {
            let mut state = self.lock();
            state.tokens.retain(|_, (_, until)| *until > Instant::now());
            if let Some((repos, _)) = state.tokens.get(token)
                && repo.is_none_or(|r| repos.iter().any(|x| x == r))
            {
                return None;
            }
        }
        let mut challenge = format!(
            r#"Bearer realm="{}/token",service="{}""#,
            origin(headers),
            auth.service
        );
        if let Some(r) = repo {
            challenge.push_str(&format!(r#",scope="repository:{r}:pull""#));
        }
        if presented.is_some() {
            challenge.push_str(r#",error="invalid_token""#);
        }
        let mut resp = distribution_error(
            StatusCode::UNAUTHORIZED,
            "UNAUTHORIZED",
            "authentication required",
        );
        if let Ok(v) = HeaderValue::from_str(&challenge) {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        Some(resp)
    }
}

async fn base(State(sim): State<Arc<RegistrySim>>, headers: HeaderMap) -> Response {
    if let Some(r) = sim.enter(SimRoute::Base, None) {
        return r;
    }
    if let Some(r) = sim.authorize(&headers, None) {
        return r;
    }
    let mut r = axum::Json(json!({})).into_response();
    r.headers_mut().insert(
        "docker-distribution-api-version",
        HeaderValue::from_static("registry/2.0"),
    );
    r
}

enum Target<'a> {
    Manifest(&'a str, &'a str),
    Blob(&'a str, &'a str),
    Tags(&'a str),
    Hub(&'a str, &'a str),
}

fn parse_target(rest: &str) -> Option<Target<'_>> {
    if let Some(repo) = rest.strip_suffix("/tags/list") {
        return Some(Target::Tags(repo));
    }
    if let Some(hub) = rest.strip_prefix("namespaces/") {
        let mut parts = hub.split('/');
        if let (Some(ns), Some("repositories"), Some(name), Some("tags"), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) {
            return Some(Target::Hub(ns, name));
        }
    }
    if let Some((repo, reference)) = rest.rsplit_once("/manifests/") {
        return Some(Target::Manifest(repo, reference));
    }
    if let Some((repo, digest)) = rest.rsplit_once("/blobs/") {
        return Some(Target::Blob(repo, digest));
    }
    None
}

async fn v2(
    State(sim): State<Arc<RegistrySim>>,
    method: Method,
    headers: HeaderMap,
    Path(rest): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let not_found = || distribution_error(StatusCode::NOT_FOUND, "NOT_FOUND", "no such endpoint");
    let Some(target) = parse_target(&rest) else {
        return not_found();
    };
    match target {
        Target::Hub(ns, name) if method == Method::GET => {
            if let Some(r) = sim.enter(SimRoute::HubApi, Some(&format!("{ns}/{name}"))) {
                return r;
            }
            hub_tags(&sim, &headers, ns, name, query.as_deref())
        }
        Target::Tags(repo) if method == Method::GET => {
            if let Some(r) = sim.enter(SimRoute::TagsList, Some(repo)) {
                return r;
            }
            if let Some(r) = sim.authorize(&headers, Some(repo)) {
                return r;
            }
            with_etag(&headers, tags_list(&sim, repo, query.as_deref())).await
        }
        Target::Manifest(repo, reference) => {
            let route = match method {
                Method::HEAD => SimRoute::ManifestHead,
                Method::GET => SimRoute::ManifestGet,
                Method::DELETE => SimRoute::ManifestDelete,
                _ => {
                    return distribution_error(
                        StatusCode::METHOD_NOT_ALLOWED,
                        "UNSUPPORTED",
                        "method not allowed",
                    );
                }
            };
            if let Some(r) = sim.enter(route, Some(repo)) {
                return r;
            }
            if let Some(r) = sim.authorize(&headers, Some(repo)) {
                return r;
            }
            if route == SimRoute::ManifestDelete {
                return if sim.delete_tag(repo, reference) {
                    StatusCode::ACCEPTED.into_response()
                } else {
                    distribution_error(
                        StatusCode::NOT_FOUND,
                        "MANIFEST_UNKNOWN",
                        "manifest unknown",
                    )
                };
            }
            manifest(&sim, &headers, repo, reference)
        }
        Target::Blob(repo, digest) if method == Method::GET || method == Method::HEAD => {
            if let Some(r) = sim.enter(SimRoute::BlobGet, Some(repo)) {
                return r;
            }
            if let Some(r) = sim.authorize(&headers, Some(repo)) {
                return r;
            }
            let state = sim.lock();
            match state.repos.get(repo).and_then(|r| r.blobs.get(digest)) {
                Some(bytes) => {
                    let mut r = (StatusCode::OK, bytes.clone()).into_response();
                    let h = r.headers_mut();
                    h.insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/octet-stream"),
                    );
                    if let Ok(v) = HeaderValue::from_str(digest) {
                        h.insert("docker-content-digest", v);
                    }
                    r
                }
                None => distribution_error(
                    StatusCode::NOT_FOUND,
                    "BLOB_UNKNOWN",
                    "blob unknown to registry",
                ),
            }
        }
        _ => distribution_error(
            StatusCode::METHOD_NOT_ALLOWED,
            "UNSUPPORTED",
            "method not allowed",
        ),
    }
}

fn manifest(sim: &RegistrySim, headers: &HeaderMap, repo: &str, reference: &str) -> Response {
    let unknown = || {
        distribution_error(
            StatusCode::NOT_FOUND,
            "MANIFEST_UNKNOWN",
            "manifest unknown",
        )
    };
    let state = sim.lock();
    let Some(r) = state.repos.get(repo) else {
        return distribution_error(
            StatusCode::NOT_FOUND,
            "NAME_UNKNOWN",
            "repository name not known to registry",
        );
    };
    let digest = if reference.contains(':') {
        reference.to_owned()
    } else {
        match r.tags.get(reference) {
            Some(t) => t.digest.clone(),
            None => return unknown(),
        }
    };
    let Some((media_type, bytes)) = r.manifests.get(&digest) else {
        return unknown();
    };
    // Like real registries: a manifest whose type the client did not offer
    // in Accept is not served.
    let accepted = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|a| a.split(';').next().is_some_and(|m| m.trim() == *media_type));
    if !accepted {
        return unknown();
    }
    let mut resp = (StatusCode::OK, bytes.clone()).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(media_type));
    if let Ok(v) = HeaderValue::from_str(&digest) {
        h.insert("docker-content-digest", v);
    }
    h.insert(
        "docker-distribution-api-version",
        HeaderValue::from_static("registry/2.0"),
    );
    resp
}

fn tags_list(sim: &RegistrySim, repo: &str, query: Option<&str>) -> Response {
    let pairs = query_pairs(query);
    let get = |k: &str| {
        pairs
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    let n = match get("n").map(str::parse::<usize>) {
        None => sim.default_page_size,
        Some(Ok(n)) => Some(n),
        Some(Err(_)) => {
            return distribution_error(
                StatusCode::BAD_REQUEST,
                "PAGINATION_NUMBER_INVALID",
                "invalid n",
            );
        }
    };
    let last = get("last").unwrap_or_default();
    let state = sim.lock();
    let Some(r) = state.repos.get(repo) else {
        return distribution_error(
            StatusCode::NOT_FOUND,
            "NAME_UNKNOWN",
            "repository name not known to registry",
        );
    };
    let mut rest = r.tags.keys().filter(|t| t.as_str() > last);
    let page: Vec<&String> = match n {
        Some(n) => rest.by_ref().take(n).collect(),
        None => rest.by_ref().collect(),
    };
    let more = rest.next().is_some();
    let mut resp = axum::Json(json!({"name": repo, "tags": page})).into_response();
    if let (true, Some(n), Some(last)) = (more, n, page.last()) {
        let next: String = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("n", &n.to_string())
            .append_pair("last", last)
            .finish();
        if let Ok(v) =
            HeaderValue::from_str(&format!(r#"</v2/{repo}/tags/list?{next}>; rel="next""#))
        {
            resp.headers_mut().insert(header::LINK, v);
        }
    }
    resp
}

fn hub_tags(
    sim: &RegistrySim,
    headers: &HeaderMap,
    ns: &str,
    name: &str,
    query: Option<&str>,
) -> Response {
    let hub_404 = || {
        (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"message": "object not found", "errinfo": {}})),
        )
            .into_response()
    };
    let repo = format!("{ns}/{name}");
    if !valid_repository(&repo) {
        return hub_404();
    }
    let pairs = query_pairs(query);
    let get = |k: &str| {
        pairs
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    let page_size = get("page_size")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(10)
        .clamp(1, 100);
    let page = get("page")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1);
    let state = sim.lock();
    let Some(r) = state.repos.get(&repo) else {
        return hub_404();
    };
    // Docker Hub with ordering=last_updated: newest push first.
    let mut tags: Vec<_> = r.tags.iter().collect();
    tags.sort_by(|a, b| b.1.pushed.cmp(&a.1.pushed).then_with(|| a.0.cmp(b.0)));
    let count = tags.len();
    let start = (page - 1).saturating_mul(page_size);
    let results: Vec<_> = tags
        .iter()
        .skip(start)
        .take(page_size)
        .map(|(name, t)| {
            let pushed = t
                .pushed
                .map(|p| p.to_rfc3339_opts(SecondsFormat::Micros, true));
            let size = r.manifests.get(&t.digest).map_or(0, |(_, b)| b.len());
            // The fields Docker Hub documents for its `tag` schema; `images`
            // lists the platforms of an index (one entry for a single
            // manifest).
            json!({
                "id": hub_id(&t.digest), "creator": 1, "last_updater": 1,
                "last_updater_username": ns, "name": name, "repository": hub_id(&repo),
                "v2": true, "full_size": size, "digest": t.digest, "media_type": t.media_type,
                "content_type": "image", "tag_status": "active",
                "tag_last_pulled": null, "tag_last_pushed": pushed, "last_updated": pushed,
                "images": hub_images(r, &t.digest, pushed.as_deref()),
            })
        })
        .collect();
    let link = |p: usize| {
        let q: String = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("page", &p.to_string())
            .append_pair("page_size", &page_size.to_string())
            .append_pair("ordering", "last_updated")
            .finish();
        format!(
            "{}/v2/namespaces/{ns}/repositories/{name}/tags?{q}",
            origin(headers)
        )
    };
    let next = (start + page_size < count).then(|| link(page + 1));
    let previous = (page > 1).then(|| link(page - 1));
    axum::Json(json!({"count": count, "next": next, "previous": previous, "results": results}))
        .into_response()
}

/// A successful answer with a strong `ETag` of its body (and `Link`), as
/// a caching registry sends; `304 Not Modified` when the client's
/// `If-None-Match` names it.
async fn with_etag(headers: &HeaderMap, response: Response) -> Response {
    use sha2::Digest as _;
    if !response.status().is_success() {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let mut hasher = sha2::Sha256::new();
    hasher.update(&bytes);
    if let Some(link) = parts.headers.get(header::LINK) {
        hasher.update(link.as_bytes());
    }
    let etag = format!("\"{}\"", hex::encode(&hasher.finalize()[..16]));
    let matches = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    if let Ok(value) = HeaderValue::from_str(&etag) {
        parts.headers.insert(header::ETAG, value);
    }
    if matches {
        parts.status = StatusCode::NOT_MODIFIED;
        parts.headers.remove(header::CONTENT_TYPE);
        return Response::from_parts(parts, axum::body::Body::empty());
    }
    Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// A stable numeric id for Docker Hub's `id` fields.
fn hub_id(s: &str) -> u64 {
    use sha2::Digest as _;
    let d = sha2::Sha256::digest(s.as_bytes());
    u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], 0]) >> 8
}

/// Docker Hub's `images` of a tag: one entry per platform manifest.
fn hub_images(r: &super::RepoState, digest: &str, pushed: Option<&str>) -> Vec<Value> {
    let image = |d: &str, platform: Option<&Value>| {
        let p = |k: &str| {
            platform
                .and_then(|p| p.get(k))
                .cloned()
                .unwrap_or(Value::Null)
        };
        json!({
            "architecture": platform.map_or(json!("amd64"), |_| p("architecture")),
            "os": platform.map_or(json!("linux"), |_| p("os")),
            "variant": p("variant"), "os_version": p("os.version"),
            "features": null, "os_features": null, "digest": d,
            "size": r.manifests.get(d).map_or(0, |(_, b)| b.len()),
            "status": "active", "last_pulled": null, "last_pushed": pushed,
        })
    };
    let Some((_, bytes)) = r.manifests.get(digest) else {
        return Vec::new();
    };
    let parsed: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
    match parsed.get("manifests").and_then(Value::as_array) {
        Some(list) => list
            .iter()
            .filter_map(|m| Some(image(m.get("digest")?.as_str()?, m.get("platform"))))
            .collect(),
        None => vec![image(digest, None)],
    }
}

async fn token(
    State(sim): State<Arc<RegistrySim>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    if let Some(r) = sim.enter(SimRoute::Token, None) {
        return r;
    }
    let Some(auth) = sim.auth.as_ref() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if let Some((user, pass)) = &auth.basic {
        use base64::Engine as _;
        let expected = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
        );
        if headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            != Some(expected.as_str())
        {
            return (
                StatusCode::UNAUTHORIZED,
                axum::Json(json!({"details": "incorrect username or password"})),
            )
                .into_response();
        }
    }
    let pairs = query_pairs(query.as_deref());
    // Docker's token servers refuse a token for another service.
    if let Some((_, service)) = pairs.iter().find(|(k, _)| k == "service")
        && service != &auth.service
    {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"details": format!("invalid service {service:?}")})),
        )
            .into_response();
    }
    let repos: Vec<String> = pairs
        .iter()
        .filter(|(k, _)| k == "scope")
        .filter_map(|(_, v)| {
            let (name, actions) = v.strip_prefix("repository:")?.rsplit_once(':')?;
            (valid_repository(name) && actions.split(',').any(|a| a == "pull"))
                .then(|| name.to_owned())
        })
        .collect();
    let token = {
        let mut state = sim.lock();
        state.token_seq += 1;
        let token = format!("sim-{}-{:016x}", state.token_seq, rand::random::<u64>());
        state
            .tokens
            .insert(token.clone(), (repos, Instant::now() + auth.token_lifetime));
        token
    };
    axum::Json(json!({
        "token": token,
        "access_token": token,
        "expires_in": auth.token_lifetime.as_secs(),
        "issued_at": chrono::Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true),
    }))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_split_into_repository_and_reference() {
        assert!(matches!(
            parse_target("a/b/c/manifests/v1"),
            Some(Target::Manifest("a/b/c", "v1"))
        ));
        assert!(matches!(
            parse_target("a/tags/list"),
            Some(Target::Tags("a"))
        ));
        assert!(matches!(
            parse_target("a/blobs/sha256:x"),
            Some(Target::Blob("a", "sha256:x"))
        ));
        assert!(matches!(
            parse_target("namespaces/vllm/repositories/vllm-openai/tags"),
            Some(Target::Hub("vllm", "vllm-openai"))
        ));
        assert!(parse_target("_catalog").is_none());
        assert!(super::super::valid_tag("v1") && !super::super::valid_tag("../x"));
    }
}
