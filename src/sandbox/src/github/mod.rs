//! A GitHub REST API simulator: the subset Klaud uses, with GitHub's paths,
//! status codes, JSON shapes, `Link` pagination, `ETag`s and rate-limit
//! headers, answered from an in-memory model ([`GithubState`]). A control API
//! under `/_sandbox/` (and the same operations on [`GithubState`]) seeds
//! repositories, registers users and tokens, injects faults and completes
//! workflow runs. Tests drive the real octocrab code path against it.

mod actions;
mod apps;
mod comments;
mod commit_on_branch;
mod contents;
mod control;
pub mod faults;
mod git;
mod githttp;
mod graphql;
mod http;
mod issues;
mod labels;
mod merge;
mod mutation;
mod pages;
mod pulls;
mod refs;
mod reviews;
pub mod state;
mod statuses;
mod users;
pub(crate) mod workflow_events;

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use chrono::Utc;
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

pub use faults::{Fault, FaultAction};
pub use state::{
    ArtifactFiles, CONTENT_LIMIT_PER_HOUR, CONTENT_LIMIT_PER_MINUTE, GithubState, IssueView,
    LogEntry, Permission, SimError,
};

use self::http::{ApiError, Caller};

/// Largest response the ETag layer buffers (artifacts are served elsewhere).
const MAX_BODY: usize = 64 * 1024 * 1024;
/// Anonymous callers share one bucket, like GitHub's per-IP limit.
const ANON_KEY: &str = "";
const ANON_LIMIT: u64 = 60;

/// The axum router of the simulator over `state`.
pub fn router(state: GithubState) -> Router {
    let repo = Router::new()
        .route("/", get(users::get_repo))
        .route("/installation", get(apps::repo_installation))
        .route("/collaborators/{user}/permission", get(users::permission))
        .route("/git/blobs", post(git::create_blob))
        .route("/git/blobs/{sha}", get(git::get_blob))
        .route("/git/trees", post(git::create_tree))
        .route("/git/trees/{sha}", get(git::get_tree))
        .route("/git/commits", post(git::create_commit))
        .route("/git/commits/{sha}", get(git::get_commit))
        .route("/git/ref/{*name}", get(refs::get_ref))
        .route(
            "/git/refs/{*name}",
            get(refs::get_ref)
                .patch(refs::update_ref)
                .delete(refs::delete_ref),
        )
        .route("/git/matching-refs/{*prefix}", get(refs::matching_refs))
        .route("/git/refs", post(refs::create_ref))
        .route("/contents/{*path}", get(contents::get_contents))
        .route("/commits", get(contents::list_commits))
        .route("/commits/{sha}", get(contents::get_commit))
        .route("/commits/{sha}/pulls", get(pulls::pulls_of_commit))
        .route("/compare/{basehead}", get(contents::compare))
        .route("/pulls", get(pulls::list).post(pulls::create))
        .route("/pulls/{number}", get(pulls::get).patch(pulls::update))
        .route("/pulls/{number}/files", get(pulls::files))
        .route("/pulls/{number}/commits", get(pulls::commits))
        .route("/pulls/{number}/merge", put(pulls::merge))
        .route(
            "/pulls/{number}/reviews",
            get(reviews::list_reviews).post(reviews::create_review),
        )
        .route("/pulls/{number}/reviews/{id}", get(reviews::get_review))
        .route(
            "/pulls/{number}/comments",
            get(reviews::list_comments).post(reviews::create_comment),
        )
        .route(
            "/pulls/comments/{id}",
            get(reviews::get_comment).patch(reviews::update_comment),
        )
        .route("/statuses/{sha}", post(statuses::create))
        .route("/commits/{sha}/statuses", get(statuses::list))
        .route("/commits/{sha}/status", get(statuses::combined))
        .route("/commits/{sha}/check-runs", get(statuses::check_runs))
        .route("/issues", get(issues::list).post(issues::create))
        .route(
            "/issues/{number}",
            get(comments::get_issue).patch(issues::update),
        )
        .route(
            "/issues/{number}/comments",
            get(comments::list).post(comments::create),
        )
        .route("/issues/comments", get(comments::list_for_repo))
        .route(
            "/issues/comments/{id}",
            get(comments::get_one)
                .patch(comments::update)
                .post(comments::update)
                .delete(comments::delete),
        )
        .route(
            "/issues/{number}/labels",
            get(labels::list)
                .post(labels::add)
                .put(labels::set)
                .delete(labels::clear),
        )
        .route(
            "/issues/{number}/labels/{name}",
            axum::routing::delete(labels::remove),
        )
        .route("/actions/workflows", get(actions::list_workflows))
        .route("/actions/workflows/{id}", get(actions::get_workflow))
        .route(
            "/actions/workflows/{id}/dispatches",
            post(actions::dispatch),
        )
        .route(
            "/actions/workflows/{id}/runs",
            get(actions::list_workflow_runs),
        )
        .route("/actions/runs", get(actions::list_runs))
        .route(
            "/actions/runs/{id}",
            get(actions::get_run).delete(actions::delete_run),
        )
        .route("/actions/runs/{id}/jobs", get(actions::jobs))
        .route("/actions/jobs/{id}/logs", get(actions::job_logs))
        .route("/actions/runs/{id}/cancel", post(actions::cancel))
        .route("/actions/runs/{id}/rerun", post(actions::rerun))
        .route("/actions/runs/{id}/artifacts", get(actions::run_artifacts))
        .route("/actions/artifacts/{id}", get(actions::get_artifact))
        .route("/actions/artifacts/{id}/zip", get(actions::artifact_zip));
    Router::new()
        .route("/user", get(users::me))
        .route("/users/{login}", get(users::get_user))
        .route("/graphql", post(graphql::graphql))
        .route("/app", get(apps::get_app))
        .route("/app/installations", get(apps::list_installations))
        .route(
            "/app/installations/{id}/access_tokens",
            post(apps::access_token),
        )
        .nest("/repos/{owner}/{repo}", repo)
        .nest("/_sandbox", control::router())
        .nest("/_html", pages::router().merge(githttp::router()))
        .fallback(|| async { ApiError::not_found() })
        .layer(axum::middleware::from_fn_with_state(state.clone(), gate))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            stamp_date,
        ))
        .with_state(state)
}

/// GitHub stamps every answer with its own time (`Date`, RFC 7231). Set
/// here from the simulator's clock, which a test may put off the local one
/// (`POST /_sandbox/clock`) to play a machine whose clock is wrong.
async fn stamp_date(State(st): State<GithubState>, req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let now = Utc::now() + st.clock_offset().await;
    if let Ok(v) = HeaderValue::from_str(&now.format("%a, %d %b %Y %H:%M:%S GMT").to_string()) {
        resp.headers_mut().insert(header::DATE, v);
    }
    resp
}

/// Serves the simulator on `listener` until the future is dropped. The
/// state's base URL is set from the listener's address.
pub async fn serve_github(listener: TcpListener, state: GithubState) -> std::io::Result<()> {
    serve_until(listener, state, std::future::pending()).await
}

async fn serve_until(
    listener: TcpListener,
    state: GithubState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    state.set_base_url(&format!("http://{addr}")).await;
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

/// A running simulator for tests; stops when dropped.
pub struct GithubSim {
    addr: SocketAddr,
    state: GithubState,
    stop: Option<oneshot::Sender<()>>,
}

impl GithubSim {
    /// Starts a simulator over `state` on `127.0.0.1:0`.
    pub async fn start(state: GithubState) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        state.set_base_url(&format!("http://{addr}")).await;
        let (tx, rx) = oneshot::channel::<()>();
        let st = state.clone();
        tokio::spawn(async move {
            let shutdown = async move {
                let _ = rx.await;
            };
            if let Err(e) = serve_until(listener, st, shutdown).await {
                tracing::error!(error = %e, "github simulator stopped");
            }
        });
        Ok(Self {
            addr,
            state,
            stop: Some(tx),
        })
    }

    /// Base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The simulator's state (for seeding and assertions).
    pub fn state(&self) -> &GithubState {
        &self.state
    }
}

impl Drop for GithubSim {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, tok) = v.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") || scheme.eq_ignore_ascii_case("token"))
        .then(|| tok.trim().to_string())
        .filter(|t| !t.is_empty())
}

/// API versions GitHub accepts in `X-GitHub-Api-Version`.
const API_VERSIONS: [&str; 2] = ["2022-11-28", "2026-03-10"];

/// Cross-cutting behaviour of every API request: authentication, the
/// primary rate limit, injected faults, write permissions, `ETag`s and the
/// request log.
async fn gate(State(st): State<GithubState>, mut req: Request, next: Next) -> Response {
    // When the request arrived: how a client paced its requests, whatever
    // the handler then took.
    let arrived = Utc::now();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let log_path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| path.clone());
    // Control routes, signed artifact downloads and web pages (`html_url`s)
    // are not GitHub API calls.
    if path.starts_with("/_sandbox/") || path.starts_with("/_html/") {
        return next.run(req).await;
    }
    if !has_user_agent(req.headers()) {
        return refuse_without_user_agent(&st, &method, &log_path).await;
    }
    json_without_content_type(&mut req);
    // App endpoints authenticate with a JWT, checked by their handlers.
    let app_route = path == "/app"
        || path.starts_with("/app/")
        || (path.starts_with("/repos/") && path.ends_with("/installation"));
    if app_route {
        return next.run(req).await;
    }
    let token = bearer(req.headers());
    let if_none_match = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let version = req
        .headers()
        .get("x-github-api-version")
        .map(|v| v.to_str().unwrap_or("").to_string());

    // GitHub's content-creation limits count what the GraphQL API creates
    // too: a request that makes a commit (`createCommitOnBranch`) or a ref
    // (`createRef`) is one, where the same through REST is up to three
    // (tree, commit, ref).
    let (req, graphql_creates) = if method == Method::POST && path == "/graphql" {
        let (parts, body) = req.into_parts();
        let bytes = axum::body::to_bytes(body, MAX_BODY)
            .await
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        let creates = text.contains("createCommitOnBranch") || text.contains("createRef");
        (Request::from_parts(parts, Body::from(bytes)), creates)
    } else {
        (req, false)
    };
    let mut req = req;
    let mut m = st.lock().await;
    let now = Utc::now().timestamp();
    let (bucket, login) = match &token {
        Some(t) => match m.tokens.get(t) {
            // An expired installation token is refused like an unknown one.
            Some(info) if info.expires_at.is_none_or(|at| now < at) => {
                (t.clone(), Some(info.login.clone()))
            }
            _ => {
                m.record(LogEntry {
                    method: method.to_string(),
                    path: log_path,
                    status: 401,
                    login: None,
                    at: None,
                });
                return ApiError::bad_credentials().into_response();
            }
        },
        None => (ANON_KEY.to_string(), None),
    };
    let bucket_info = m
        .tokens
        .entry(bucket.clone())
        .or_insert_with(|| state::TokenInfo {
            login: String::new(),
            limit: ANON_LIMIT,
            used: 0,
            reset: now + 3600,
            expires_at: None,
        });
    if now >= bucket_info.reset {
        bucket_info.used = 0;
        bucket_info.reset = now + 3600;
    }
    let resource = if path == "/graphql" {
        "graphql"
    } else {
        "core"
    };
    let rate_headers = |info: &state::TokenInfo| {
        let mut h = HeaderMap::new();
        let remaining = info.limit.saturating_sub(info.used);
        for (k, v) in [
            ("x-ratelimit-limit", info.limit.to_string()),
            ("x-ratelimit-remaining", remaining.to_string()),
            ("x-ratelimit-used", info.used.to_string()),
            ("x-ratelimit-reset", info.reset.to_string()),
            ("x-ratelimit-resource", resource.to_string()),
        ] {
            if let Ok(v) = HeaderValue::from_str(&v) {
                h.insert(k, v);
            }
        }
        h
    };
    let finish = |m: &mut state::Model, resp: Response, counted: bool| -> Response {
        let status = resp.status().as_u16();
        let mut resp = resp;
        if let Some(info) = m.tokens.get_mut(&bucket) {
            if counted {
                info.used += 1;
            }
            resp.headers_mut().extend(rate_headers(info));
        }
        resp.headers_mut().insert(
            "x-github-api-version-selected",
            HeaderValue::from_static(API_VERSIONS[0]),
        );
        m.record(LogEntry {
            method: method.to_string(),
            path: log_path.clone(),
            status,
            login: login.clone(),
            at: Some(arrived),
        });
        resp
    };

    if let Some(v) = &version
        && !API_VERSIONS.contains(&v.as_str())
    {
        let e = ApiError::new(
            StatusCode::BAD_REQUEST,
            &format!("API version {v:?} is not supported."),
        );
        return finish(&mut m, e.into_response(), false);
    }
    let rate_limit_query = method == Method::GET && path == "/rate_limit";
    if bucket_info.used >= bucket_info.limit && !rate_limit_query {
        let msg = match login.as_deref().and_then(|l| m.user(l)) {
            Some(u) => format!(
                "API rate limit exceeded for user ID {}. If you reach out to GitHub Support for help, please include the request ID.",
                u.id
            ),
            None => "API rate limit exceeded for 127.0.0.1. (But here's the good news: Authenticated requests get a higher rate limit.)".to_string(),
        };
        let e = ApiError::forbidden(&msg);
        return finish(&mut m, e.into_response(), false);
    }

    // Content-creating: what adds or changes content (a GraphQL query
    // reads; of the GraphQL mutations the simulator answers only the
    // commit and the ref are counted; deleting creates nothing).
    let creates = matches!(method, Method::POST | Method::PATCH | Method::PUT)
        && (path != "/graphql" || graphql_creates);
    let limits = (m.content_limit_per_minute, m.content_limit_per_hour);
    if creates && limits != (None, None) {
        let window = m.content_writes.entry(bucket.clone()).or_default();
        while window.front().is_some_and(|&t| t <= now - 3600) {
            window.pop_front();
        }
        let last_minute = window.iter().filter(|&&t| t > now - 60).count();
        let wait = match limits {
            (Some(limit), _) if last_minute >= limit as usize => window
                .iter()
                .find(|&&t| t > now - 60)
                .map(|&t| t + 60 - now),
            (_, Some(limit)) if window.len() >= limit as usize => {
                window.front().map(|&t| t + 3600 - now)
            }
            _ => None,
        };
        if let Some(wait) = wait {
            let mut resp = ApiError::forbidden(faults::SECONDARY_LIMIT_MESSAGE).into_response();
            if let Ok(v) = HeaderValue::from_str(&wait.max(1).to_string()) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
            return finish(&mut m, resp, true);
        }
        window.push_back(now);
    }

    let fault = faults::take(&mut m.faults, method.as_str(), &path);
    let answered = match &fault {
        Some(FaultAction::Status {
            status,
            retry_after,
            message,
        }) => Some((*status, *retry_after, message.clone())),
        Some(FaultAction::SecondaryLimit {
            status,
            retry_after,
        }) => Some((
            *status,
            *retry_after,
            Some(faults::SECONDARY_LIMIT_MESSAGE.to_owned()),
        )),
        _ => None,
    };
    if let Some((status, retry_after, message)) = &answered {
        let code = StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let msg = message.clone().unwrap_or_else(|| {
            code.canonical_reason()
                .unwrap_or("Injected fault")
                .to_string()
        });
        let mut resp = ApiError::new(code, &msg).into_response();
        if let Some(secs) = retry_after
            && let Ok(v) = HeaderValue::from_str(&secs.to_string())
        {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        return finish(&mut m, resp, true);
    }

    // `GET /rate_limit` reports the caller's buckets and, like GitHub's,
    // costs nothing and answers even when the budget is spent.
    if rate_limit_query && let Some(info) = m.tokens.get(&bucket).cloned() {
        let window = |limit: u64, used: u64| {
            json!({
                "limit": limit, "used": used, "remaining": limit.saturating_sub(used),
                "reset": info.reset,
            })
        };
        let core = window(info.limit, info.used);
        let body = json!({
            "resources": {
                "core": core,
                "graphql": window(info.limit, 0),
                "search": window(30, 0),
            },
            "rate": core,
        });
        return finish(&mut m, axum::Json(body).into_response(), false);
    }

    // Writing to a repository needs push access; commenting does not (any
    // signed-in user can comment on a public repository).
    if method != Method::GET && method != Method::HEAD {
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        if segs.len() >= 3 && segs[0] == "repos" {
            let is_comment = method == Method::POST
                && segs.len() == 6
                && segs[3] == "issues"
                && segs[5] == "comments";
            // Anyone signed in may open an issue, and its author may edit
            // it: the handlers check the rest.
            let is_issue = segs.len() >= 4
                && segs[3] == "issues"
                && ((method == Method::POST && segs.len() == 4)
                    || (method == Method::PATCH
                        && segs.len() == 5
                        && segs[4].parse::<u64>().is_ok()));
            // Its author may edit or delete a comment: the handlers check.
            let is_comment_edit = segs.len() == 6 && segs[3] == "issues" && segs[4] == "comments";
            // Triage access suffices for an issue's labels, as on GitHub.
            let is_label = segs.len() >= 6 && segs[3] == "issues" && segs[5] == "labels";
            let needed = if is_label {
                Permission::Triage
            } else {
                Permission::Write
            };
            match &login {
                None => return finish(&mut m, ApiError::requires_auth().into_response(), true),
                Some(l) => {
                    if let Ok(r) = m.repo(segs[1], segs[2])
                        && !is_comment
                        && !is_issue
                        && !is_comment_edit
                        && r.permission_of(l) < needed
                    {
                        let e =
                            ApiError::forbidden("Resource not accessible by personal access token");
                        return finish(&mut m, e.into_response(), true);
                    }
                }
            }
        }
    }
    drop(m);

    let full_uri = req.uri().clone();
    req.extensions_mut().insert(http::FullUri(full_uri));
    req.extensions_mut().insert(Caller(login.clone()));
    if let Some(FaultAction::Delay { millis }) = &fault {
        tokio::time::sleep(Duration::from_millis(*millis)).await;
    }
    let resp = github_shaped_rejection(next.run(req).await).await;

    let resp = match &fault {
        Some(FaultAction::AfterWriteStatus { status }) => {
            let code = StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY);
            let mut m = st.lock().await;
            return finish(
                &mut m,
                ApiError::new(code, "Server Error").into_response(),
                true,
            );
        }
        Some(FaultAction::AfterWriteDrop) => {
            let mut m = st.lock().await;
            let broken = futures::stream::once(async {
                Err::<bytes::Bytes, std::io::Error>(std::io::Error::other(
                    "connection dropped by fault",
                ))
            });
            let mut resp = Response::new(Body::from_stream(broken));
            *resp.status_mut() = StatusCode::OK;
            return finish(&mut m, resp, true);
        }
        _ => resp,
    };

    // ETag / If-None-Match for successful GETs; a 304 is free.
    if method == Method::GET && resp.status() == StatusCode::OK {
        let (mut parts, body) = resp.into_parts();
        let bytes = match axum::body::to_bytes(body, MAX_BODY).await {
            Ok(b) => b,
            Err(_) => {
                let mut m = st.lock().await;
                let e = ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "response too large");
                return finish(&mut m, e.into_response(), true);
            }
        };
        let etag = format!("\"{}\"", &hex::encode(Sha256::digest(&bytes))[..40]);
        let hit = if_none_match.is_some_and(|inm| {
            inm.split(',')
                .map(|t| t.trim().trim_start_matches("W/"))
                .any(|t| t == etag || t == "*")
        });
        let mut m = st.lock().await;
        if let Ok(v) = HeaderValue::from_str(&etag) {
            parts.headers.insert(header::ETAG, v);
        }
        if hit {
            let mut resp = Response::new(Body::empty());
            *resp.status_mut() = StatusCode::NOT_MODIFIED;
            if let Some(v) = parts.headers.get(header::ETAG) {
                resp.headers_mut().insert(header::ETAG, v.clone());
            }
            return finish(&mut m, resp, false);
        }
        return finish(&mut m, Response::from_parts(parts, Body::from(bytes)), true);
    }
    let mut m = st.lock().await;
    finish(&mut m, resp, true)
}

/// GitHub's text for a request without a `User-Agent` (an empty one counts
/// as none); it answers in HTML, not JSON.
const NO_USER_AGENT: &str = "Request forbidden by administrative rules. Please make sure your request has a User-Agent header (https://docs.github.com/en/rest/overview/resources-in-the-rest-api#user-agent-required). Check https://developer.github.com for other possible causes.";

/// Whether a request names its client (an empty `User-Agent` does not).
fn has_user_agent(headers: &HeaderMap) -> bool {
    headers
        .get(header::USER_AGENT)
        .is_some_and(|v| !v.as_bytes().iter().all(u8::is_ascii_whitespace))
}

/// GitHub refuses API requests that carry no `User-Agent` with 403.
async fn refuse_without_user_agent(st: &GithubState, method: &Method, log_path: &str) -> Response {
    st.lock().await.record(LogEntry {
        method: method.to_string(),
        path: log_path.to_string(),
        status: 403,
        login: None,
        at: None,
    });
    let resp = (
        StatusCode::FORBIDDEN,
        [(header::CONTENT_TYPE, "text/html")],
        NO_USER_AGENT,
    );
    resp.into_response()
}

/// GitHub reads a request body as JSON whatever its `Content-Type` says
/// (its own curl examples send none); axum's `Json` insists on the header,
/// so it is set here before the handlers see the request.
fn json_without_content_type(req: &mut Request) {
    let is_json = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let mime = v
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            mime == "application/json"
                || (mime.starts_with("application/") && mime.ends_with("+json"))
        });
    if !is_json {
        req.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
}

/// axum answers a malformed body with plain text; GitHub answers JSON:
/// 400 "Problems parsing JSON", or 422 "Invalid request." for JSON of the
/// wrong shape.
async fn github_shaped_rejection(resp: Response) -> Response {
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json || !matches!(status.as_u16(), 400 | 415 | 422) {
        return resp;
    }
    let detail = axum::body::to_bytes(resp.into_body(), 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let e = if status == StatusCode::UNPROCESSABLE_ENTITY {
        ApiError::unprocessable(&format!("Invalid request.\n\n{detail}"))
    } else {
        ApiError::new(StatusCode::BAD_REQUEST, "Problems parsing JSON")
    };
    e.into_response()
}
