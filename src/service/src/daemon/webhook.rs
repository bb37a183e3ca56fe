//! Optional GitHub webhook endpoint: a verified delivery wakes the reconcile
//! loop early; without webhooks Klaud simply polls. With sign-off
//! verification on, a delivery announcing a CODEOWNER sign-off (a PR
//! comment, review or inline comment with the phrase) is queued for the
//! woken pass. Deliveries are verified
//! with HMAC-SHA256 over the raw body (`X-Hub-Signature-256`) and a shared
//! secret; anything else is refused with 401 and logged without the body.
//! A delivery id (`X-GitHub-Delivery`) already handled is answered 200 and
//! does nothing: GitHub redelivers, and a signed delivery replayed by
//! anyone who saw it must not wake passes or queue sign-offs again.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::sync::Notify;

/// The webhook route's state.
#[derive(Clone)]
pub struct WebhookState {
    secret: Arc<[u8]>,
    wake: Arc<Notify>,
    signoffs: Option<crate::signoff::SignoffQueue>,
    handled: Arc<Mutex<Handled>>,
}

/// Most delivery ids remembered; the oldest are forgotten first. GitHub
/// redelivers within hours, far fewer deliveries than this for one
/// repository.
const MAX_HANDLED: usize = 10_000;

/// The delivery ids handled, oldest first.
#[derive(Debug, Default)]
struct Handled {
    ids: HashSet<String>,
    order: VecDeque<String>,
}

impl Handled {
    /// Records `id`; whether it was new.
    fn first_time(&mut self, id: &str) -> bool {
        if self.ids.contains(id) {
            return false;
        }
        self.ids.insert(id.to_owned());
        self.order.push_back(id.to_owned());
        while self.order.len() > MAX_HANDLED {
            if let Some(old) = self.order.pop_front() {
                self.ids.remove(&old);
            }
        }
        true
    }
}

impl WebhookState {
    /// A webhook checked against `secret` that wakes `wake` when verified.
    pub fn new(secret: &[u8], wake: Arc<Notify>) -> Self {
        Self {
            secret: secret.into(),
            wake,
            signoffs: None,
            handled: Arc::default(),
        }
    }

    /// Queues the sign-offs deliveries announce on `queue`.
    pub fn with_signoffs(mut self, queue: crate::signoff::SignoffQueue) -> Self {
        self.signoffs = Some(queue);
        self
    }
}

impl std::fmt::Debug for WebhookState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookState { secret: *** }")
    }
}

/// `POST /webhook`.
pub fn router(state: WebhookState) -> Router {
    Router::new()
        .route("/webhook", post(deliver))
        .with_state(state)
}

/// Whether `signature` (`sha256=<hex>`) is the HMAC-SHA256 of `body` under
/// `secret`. The comparison is constant-time.
pub fn verify(secret: &[u8], body: &[u8], signature: &str) -> bool {
    let Some(hex_digest) = signature.strip_prefix("sha256=") else {
        return false;
    };
    let Ok(expected) = hex::decode(hex_digest) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
        return false;
    };
    mac.update(body);
    mac.verify_slice(&expected).is_ok()
}

async fn deliver(State(state): State<WebhookState>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let signature = headers
        .get("x-hub-signature-256")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !verify(&state.secret, &body, signature) {
        let delivery = headers
            .get("x-github-delivery")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-");
        tracing::warn!(
            delivery,
            "webhook delivery refused: bad or missing signature"
        );
        return StatusCode::UNAUTHORIZED;
    }
    // Only a verified delivery is remembered, so nobody can fill the list
    // with made-up ids. Ids are GitHub's GUIDs: a longer one is cut, never
    // kept whole.
    if let Some(id) = headers
        .get("x-github-delivery")
        .and_then(|v| v.to_str().ok())
        .map(|id| id.chars().take(100).collect::<String>())
    {
        // A poisoned lock only means a panicking thread; the set is whole.
        let mut handled = state.handled.lock().unwrap_or_else(|e| e.into_inner());
        if !handled.first_time(&id) {
            tracing::debug!(delivery = %id, "webhook delivery already handled");
            return StatusCode::OK;
        }
    }
    if let Some(queue) = &state.signoffs {
        let event = headers
            .get("x-github-event")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if let Ok(payload) = serde_json::from_slice::<serde_json::Value>(&body)
            && let Some(announced) = crate::signoff::announced(event, &payload)
        {
            tracing::info!(
                repository = %announced.repository,
                pull = announced.pull,
                "sign-off announced"
            );
            queue.push(announced);
        }
    }
    state.wake.notify_one();
    StatusCode::ACCEPTED
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sign(secret: &[u8], body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap();
        mac.update(body);
        format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
    }

    #[test]
    fn only_the_right_signature_verifies() {
        let body = br#"{"action":"created"}"#;
        let good = sign(b"s3cret", body);
        assert!(verify(b"s3cret", body, &good));
        assert!(!verify(b"other", body, &good));
        assert!(!verify(b"s3cret", b"{}", &good));
        assert!(!verify(b"s3cret", body, &good.replace("sha256=", "sha1=")));
        assert!(!verify(b"s3cret", body, "sha256=zz"));
        assert!(!verify(b"s3cret", body, ""));
    }

    #[tokio::test]
    async fn a_bad_signature_is_401_and_a_good_one_wakes_the_loop() {
        let wake = Arc::new(Notify::new());
        let app = router(WebhookState::new(b"s3cret", Arc::clone(&wake)));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/webhook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let http = klaud_http::http_client().expect("http client");
        let body = br#"{"action":"created"}"#.to_vec();
        let bad = http
            .post(&url)
            .header("x-hub-signature-256", sign(b"wrong", &body))
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(bad.status(), 401);
        let woken = wake.notified();
        let good = http
            .post(&url)
            .header("x-hub-signature-256", sign(b"s3cret", &body))
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(good.status(), 202);
        tokio::time::timeout(std::time::Duration::from_secs(5), woken)
            .await
            .unwrap();
    }

    #[test]
    fn the_handled_ids_are_bounded_oldest_first() {
        let mut handled = Handled::default();
        for i in 0..MAX_HANDLED + 5 {
            assert!(handled.first_time(&format!("id-{i}")));
        }
        assert_eq!(handled.ids.len(), MAX_HANDLED);
        assert!(!handled.first_time(&format!("id-{}", MAX_HANDLED + 4)));
        assert!(handled.first_time("id-0"), "forgotten: the oldest");
    }

    #[tokio::test]
    async fn a_replayed_delivery_is_handled_once() {
        let wake = Arc::new(Notify::new());
        let queue = crate::signoff::SignoffQueue::default();
        let app =
            router(WebhookState::new(b"s3cret", Arc::clone(&wake)).with_signoffs(queue.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/webhook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let http = klaud_http::http_client().expect("http client");
        let body = serde_json::json!({
            "action": "created",
            "issue": {"number": 7, "pull_request": {"url": "u"}},
            "comment": {"id": 42, "body": "As a PR reviewer and CODEOWNER, I have reviewed this and have:"},
            "repository": {"full_name": "o/r"},
        })
        .to_string()
        .into_bytes();
        let send = |delivery: &'static str| {
            http.post(&url)
                .header("x-github-event", "issue_comment")
                .header("x-github-delivery", delivery)
                .header("x-hub-signature-256", sign(b"s3cret", &body))
                .body(body.clone())
                .send()
        };
        let mut statuses = Vec::new();
        for _ in 0..300 {
            statuses.push(
                send("72d3162e-cc78-11e3-81ab-4c9367dc0958")
                    .await
                    .unwrap()
                    .status(),
            );
        }
        assert_eq!(statuses[0], 202);
        assert!(statuses[1..].iter().all(|s| *s == 200), "{statuses:?}");
        assert_eq!(queue.take("o/r").len(), 1, "one sign-off queued");
        // Another delivery is handled as usual.
        assert_eq!(
            send("9a0b1c2d-0000-11e3-81ab-4c9367dc0958")
                .await
                .unwrap()
                .status(),
            202
        );
        assert_eq!(queue.take("o/r").len(), 1);
    }

    #[tokio::test]
    async fn a_signed_signoff_delivery_is_queued_for_the_woken_pass() {
        let wake = Arc::new(Notify::new());
        let queue = crate::signoff::SignoffQueue::default();
        let app =
            router(WebhookState::new(b"s3cret", Arc::clone(&wake)).with_signoffs(queue.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/webhook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let http = klaud_http::http_client().expect("http client");
        let body = serde_json::json!({
            "action": "created",
            "issue": {"number": 7, "pull_request": {"url": "u"}},
            "comment": {"id": 42, "body": "As a PR reviewer and CODEOWNER, I have reviewed this and have:"},
            "repository": {"full_name": "o/r"},
        })
        .to_string()
        .into_bytes();
        let answer = http
            .post(&url)
            .header("x-github-event", "issue_comment")
            .header("x-hub-signature-256", sign(b"s3cret", &body))
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 202);
        let queued = queue.take("o/r");
        assert_eq!(queued.len(), 1);
        assert_eq!(queued[0].pull, 7);
    }
}
