//! The baseline source over HTTP: the InferenceX public API shape
//! (`/api/v1/benchmarks`, `/api/v1/workflow-info`). The API is public, so
//! no credential is ever sent.

use std::time::Duration;

use async_trait::async_trait;
use chrono::NaiveDate;
use klaud_lifecycle::baseline::{
    BaselineSource, Fetched, SourceError, benchmarks_url, evaluations_url, workflow_info_url,
};

/// Largest answer read (the real API answers a few hundred kilobytes).
const MAX_BODY: usize = 16 * 1024 * 1024;

/// The HTTP client for the results API could not be built (TLS setup).
#[derive(Debug, thiserror::Error)]
#[error("baseline HTTP client: {0}")]
pub struct BaselineClientError(#[from] reqwest::Error);

/// The public results API at a base URL.
#[derive(Debug, Clone)]
pub struct HttpBaselineSource {
    base: String,
    client: reqwest::Client,
}

impl HttpBaselineSource {
    /// A source at `base` (e.g. `https://inferencex.example`).
    pub fn new(base: &str) -> Result<Self, BaselineClientError> {
        // reqwest sends no User-Agent of its own; name the client, as
        // public APIs (GitHub's among them) ask.
        let client = klaud_http::http_client_builder()
            .user_agent(concat!("klaud/", env!("CARGO_PKG_VERSION")))
            .timeout(Duration::from_secs(30))
            .build()?;
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            client,
        })
    }

    async fn get(&self, url: String) -> Result<Fetched, SourceError> {
        let fail = |reason: String| SourceError {
            url: url.clone(),
            reason,
        };
        let mut resp = self
            .client
            .get(&url)
            .send()
            .await
            .map_err(|e| fail(format!("request failed: {e}")))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(fail(format!("HTTP {status}")));
        }
        // Read chunk by chunk so an oversized answer is refused once it
        // passes the cap, not after all of it is in memory.
        let mut bytes = Vec::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| fail(format!("reading the answer: {e}")))?
        {
            if bytes.len() + chunk.len() > MAX_BODY {
                return Err(fail(format!("answer is larger than {MAX_BODY} bytes")));
            }
            bytes.extend_from_slice(&chunk);
        }
        let body = String::from_utf8(bytes).map_err(|_| fail("answer is not UTF-8".into()))?;
        Ok(Fetched { url, body })
    }
}

#[async_trait]
impl BaselineSource for HttpBaselineSource {
    async fn benchmarks(&self, model: &str, date: NaiveDate) -> Result<Fetched, SourceError> {
        self.get(benchmarks_url(&self.base, model, date)).await
    }

    async fn workflow_info(&self, date: NaiveDate) -> Result<Fetched, SourceError> {
        self.get(workflow_info_url(&self.base, date)).await
    }

    async fn evaluations(&self) -> Result<Option<Fetched>, SourceError> {
        self.get(evaluations_url(&self.base)).await.map(Some)
    }
}

/// A source that has nothing: every point is N/A with the reason.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoBaseline;

#[async_trait]
impl BaselineSource for NoBaseline {
    async fn benchmarks(&self, _model: &str, _date: NaiveDate) -> Result<Fetched, SourceError> {
        Err(SourceError {
            url: String::new(),
            reason: "no baseline source is configured".into(),
        })
    }

    async fn workflow_info(&self, _date: NaiveDate) -> Result<Fetched, SourceError> {
        Err(SourceError {
            url: String::new(),
            reason: "no baseline source is configured".into(),
        })
    }

    fn configured(&self) -> bool {
        false
    }
}
