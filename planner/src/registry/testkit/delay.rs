//! A loopback HTTP proxy that holds every request for a fixed delay before
//! forwarding it: a registry on 127.0.0.1 answers in well under a
//! millisecond, a real one across the internet in tens, and a plan whose
//! requests wait on each other in chains is slow only at the latter.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use url::Url;

use super::TestkitError;

/// Largest request body forwarded (pushes go to the registry directly).
const MAX_BODY: usize = 64 * 1024 * 1024;

/// A proxy on 127.0.0.1 in front of `upstream`, adding `delay` to every
/// request; runs on its own thread, so it outlives its caller's runtimes,
/// and stops on drop.
pub struct DelayProxy {
    addr: SocketAddr,
    log: Arc<std::sync::Mutex<Log>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

/// Per request, the step at which it arrived and the step at which its
/// answer was ready (one counter for both): what a client could have known
/// when it asked.
#[derive(Default)]
struct Log {
    step: u64,
    requests: Vec<(u64, Option<u64>)>,
}

impl DelayProxy {
    /// Starts forwarding to `upstream` (scheme, host and port; the path of
    /// each request is kept) after `delay`.
    pub fn start(upstream: Url, delay: Duration) -> Result<Self, TestkitError> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .map_err(|e| TestkitError::Start(format!("delay proxy bind: {e}")))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| TestkitError::Start(format!("delay proxy: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| TestkitError::Start(format!("delay proxy local_addr: {e}")))?;
        let client = klaud_http::http_client_builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| TestkitError::Start(format!("delay proxy client: {e}")))?;
        let log = Arc::new(std::sync::Mutex::new(Log::default()));
        let recorder = Arc::clone(&log);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
                    let (client, upstream, recorder) =
                        (client.clone(), upstream.clone(), Arc::clone(&recorder));
                    async move {
                        let index = {
                            let mut log = recorder.lock().unwrap_or_else(|p| p.into_inner());
                            log.step += 1;
                            let step = log.step;
                            log.requests.push((step, None));
                            log.requests.len() - 1
                        };
                        tokio::time::sleep(delay).await;
                        let response = forward(&client, &upstream, request).await;
                        let mut log = recorder.lock().unwrap_or_else(|p| p.into_inner());
                        log.step += 1;
                        let step = log.step;
                        if let Some(entry) = log.requests.get_mut(index) {
                            entry.1 = Some(step);
                        }
                        response
                    }
                });
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stopped.await;
                    })
                    .await;
            });
        });
        Ok(Self {
            addr,
            log,
            stop: Some(stop),
        })
    }

    /// Where it serves.
    pub fn base_url(&self) -> Url {
        Url::parse(&format!("http://{}", self.addr)).unwrap_or_else(|e| unreachable!("{e}"))
    }

    /// Requests forwarded so far.
    pub fn requests(&self) -> u64 {
        let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        log.requests.len() as u64
    }

    /// Round trips the requests so far took one after another: the longest
    /// chain of requests each asked after the one before it was answered.
    /// A client that asks what it can at once takes as many as its longest
    /// chain of reads that need each other; one that waits needlessly
    /// takes more. Read from the order of events, not the clock: with a
    /// delay well above the client's own pauses it does not depend on the
    /// machine's speed.
    pub fn rounds(&self) -> u64 {
        let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        // (step answered, round trips up to and including it)
        let mut depth: Vec<(u64, u64)> = Vec::new();
        let mut longest = 0;
        // In the order they arrived: each was logged under the lock as it came.
        for (asked, answered) in &log.requests {
            let before = depth
                .iter()
                .filter(|(done, _)| done < asked)
                .map(|(_, rounds)| *rounds)
                .max()
                .unwrap_or(0);
            longest = longest.max(before + 1);
            if let Some(done) = answered {
                depth.push((*done, before + 1));
            }
        }
        longest
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Headers that describe one hop, not the message.
fn hop_by_hop(name: &str) -> bool {
    matches!(
        name,
        "host" | "connection" | "keep-alive" | "transfer-encoding" | "upgrade" | "te" | "trailer"
    )
}

async fn forward(
    client: &reqwest::Client,
    upstream: &Url,
    request: axum::extract::Request,
) -> axum::response::Response {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, MAX_BODY).await else {
        return StatusCode::PAYLOAD_TOO_LARGE.into_response();
    };
    let mut url = upstream.clone();
    url.set_path(parts.uri.path());
    url.set_query(parts.uri.query());
    let head = parts.method == axum::http::Method::HEAD;
    let mut outgoing = client.request(parts.method, url);
    for (name, value) in &parts.headers {
        if !hop_by_hop(name.as_str()) && name != "content-length" {
            outgoing = outgoing.header(name, value);
        }
    }
    let answer = match outgoing.body(body).send().await {
        Ok(answer) => answer,
        Err(err) => return (StatusCode::BAD_GATEWAY, err.to_string()).into_response(),
    };
    let status = answer.status();
    let headers = answer.headers().clone();
    let Ok(bytes) = answer.bytes().await else {
        return StatusCode::BAD_GATEWAY.into_response();
    };
    let mut response = axum::response::Response::new(axum::body::Body::from(bytes));
    *response.status_mut() = status;
    for (name, value) in &headers {
        // A HEAD answer keeps the length of the body it stands for.
        if !hop_by_hop(name.as_str()) && (head || name != "content-length") {
            response.headers_mut().append(name, value.clone());
        }
    }
    response
}
