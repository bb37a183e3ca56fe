//! Optional GitHub webhook endpoint: a verified delivery wakes the reconcile
//! loop early; without webhooks Klaud simply polls. With sign-off
//! verification on, a delivery announcing a CODEOWNER sign-off (a PR
//! comment, review or inline comment with the phrase) is queued for the
//! woken pass. Deliveries are verified
//! with HMAC-SHA256 over the raw body (`X-Hub-Signature-256`) and a shared
//! secret; anything else is refused with 401 and logged without the body.

use std::sync::Arc;

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
}

impl WebhookState {
    /// A webhook checked against `secret` that wakes `wake` when verified.
    pub fn new(secret: &[u8], wake: Arc<Notify>) -> Self {
        Self {
            secret: secret.into(),
            wake,
            signoffs: None,
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
