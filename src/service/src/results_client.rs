//! The baseline source over HTTP: the InferenceX public API shape
//! (`/api/v1/benchmarks`, `/api/v1/workflow-info`, `/api/openapi.json`).
//! The API is public, so no credential is ever sent.
//!
//! The API compresses every answer (InferenceX-app's `cachedJson` sets
//! `Content-Encoding: gzip` whatever the request asked); reqwest decodes it,
//! and the body cap counts decoded bytes, so a small compressed answer
//! cannot expand past it.
//!
//! Display names are found, not guessed: the API looks `model` up exactly,
//! in one name per model key. [`HttpBaselineSource::display_name`] reads the
//! names the OpenAPI description lists for `/api/v1/benchmarks`'s `model`
//! and asks each name it has not mapped yet for its rows, whose `model` is
//! the model prefix. What it learns is kept (in the store when one is
//! given) and asked again only when a prefix is unknown, at most once per
//! process and hour.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::NaiveDate;
use klaud_lifecycle::baseline::{
    BaselineSource, Fetched, SourceError, benchmarks_url, evaluations_url, model_rows_url,
    workflow_info_url,
};
use klaud_store::{KnownModelNames, Store};
use serde_json::Value;

/// Largest answer read, decoded (the real API answers a few hundred
/// kilobytes).
const MAX_BODY: usize = 16 * 1024 * 1024;
/// How long an unknown prefix waits before the API's names are read again.
const NAMES_REFRESH: Duration = Duration::from_secs(3600);
/// Most display names read from one OpenAPI description: the real app
/// lists a handful; more is a hostile or broken answer.
const MAX_NAMES: usize = 256;
/// Longest display name accepted.
const MAX_NAME_LEN: usize = 200;

/// The HTTP client for the results API could not be built (TLS setup).
#[derive(Debug, thiserror::Error)]
#[error("baseline HTTP client: {0}")]
pub struct BaselineClientError(#[from] reqwest::Error);

/// The public results API at a base URL.
#[derive(Debug, Clone)]
pub struct HttpBaselineSource {
    base: String,
    client: reqwest::Client,
    max_body: usize,
    names: Arc<tokio::sync::Mutex<NameBook>>,
    store: Option<Store>,
}

/// The display names learnt so far, and when the API was last asked.
#[derive(Debug, Default)]
struct NameBook {
    known: KnownModelNames,
    /// Whether the store's copy has been read into `known`.
    loaded: bool,
    /// When this process last read the API's names, and what failed then.
    asked: Option<(Instant, Option<SourceError>)>,
}

/// A failed GET: the error, and the HTTP status when there was one.
struct GetError {
    status: Option<reqwest::StatusCode>,
    error: SourceError,
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
            max_body: MAX_BODY,
            names: Arc::default(),
            store: None,
        })
    }

    /// Keeps the display names found in `store`, and starts from what it
    /// kept.
    pub fn with_store(mut self, store: Store) -> Self {
        self.store = Some(store);
        self
    }

    /// Caps answers at `bytes`, decoded (tests use a small cap).
    pub fn with_max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// The API's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    async fn get(&self, url: String) -> Result<Fetched, SourceError> {
        self.get_status(url).await.map_err(|e| e.error)
    }

    async fn get_status(&self, url: String) -> Result<Fetched, GetError> {
        let fail = |status: Option<reqwest::StatusCode>, reason: String| GetError {
            status,
            error: SourceError {
                url: url.clone(),
                reason,
            },
        };
        let mut resp = self
            .client
            .get(&url)
            .send()
            .await
            .map_err(|e| fail(None, format!("request failed: {e}")))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(fail(Some(status), format!("HTTP {status}")));
        }
        // Read chunk by chunk so an oversized answer is refused once it
        // passes the cap, not after all of it is in memory. The chunks are
        // decoded bytes: a gzip bomb stops at the cap too.
        let mut bytes = Vec::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| fail(None, format!("reading the answer: {e}")))?
        {
            if bytes.len() + chunk.len() > self.max_body {
                return Err(fail(
                    None,
                    format!("answer is larger than {} bytes (decoded)", self.max_body),
                ));
            }
            bytes.extend_from_slice(&chunk);
        }
        let body =
            String::from_utf8(bytes).map_err(|_| fail(None, "answer is not UTF-8".into()))?;
        Ok(Fetched { url, body })
    }

    /// `<base>/api/openapi.json`: where the API lists its display names.
    pub fn openapi_url(&self) -> String {
        format!("{}/api/openapi.json", self.base)
    }

    /// Reads the API's display names and maps each one not yet mapped to
    /// the model prefix of its rows. Names the description no longer lists
    /// are dropped.
    async fn refresh(&self, known: &KnownModelNames) -> Result<KnownModelNames, SourceError> {
        let fetched = self.get(self.openapi_url()).await?;
        let names = parse_openapi_names(&fetched)?;
        let mut out = KnownModelNames {
            names: Default::default(),
            refreshed: Some(chrono::Utc::now()),
        };
        for name in names {
            if let Some(Some(prefix)) = known.names.get(&name) {
                out.names.insert(name, Some(prefix.clone()));
                continue;
            }
            let prefix = match self.get_status(model_rows_url(&self.base, &name)).await {
                Ok(f) => prefix_of_rows(&f),
                // The app answers 400 for a name it does not know: the
                // description and the table disagree, and the name maps
                // to nothing.
                Err(e) if e.status == Some(reqwest::StatusCode::BAD_REQUEST) => None,
                Err(e) => {
                    tracing::warn!(name, error = %e.error, "a display name's rows could not be read; asked again at the next refresh");
                    None
                }
            };
            out.names.insert(name, prefix);
        }
        Ok(out)
    }
}

/// The display names `/api/openapi.json` lists as the `enum` of
/// `/api/v1/benchmarks`'s `model` parameter.
pub fn parse_openapi_names(fetched: &Fetched) -> Result<Vec<String>, SourceError> {
    let fail = |reason: String| SourceError {
        url: fetched.url.clone(),
        reason,
    };
    let value: Value =
        serde_json::from_str(&fetched.body).map_err(|e| fail(format!("not valid JSON: {e}")))?;
    let parameters = value
        .pointer("/paths/~1api~1v1~1benchmarks/get/parameters")
        .and_then(Value::as_array)
        .ok_or_else(|| fail("paths[\"/api/v1/benchmarks\"].get.parameters is not a list".into()))?;
    let model = parameters
        .iter()
        .find(|p| p.get("name").and_then(Value::as_str) == Some("model"))
        .ok_or_else(|| {
            fail("paths[\"/api/v1/benchmarks\"].get.parameters has no `model` parameter".into())
        })?;
    let listed = model
        .pointer("/schema/enum")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            fail("the `model` parameter of /api/v1/benchmarks has no schema.enum list".into())
        })?;
    if listed.len() > MAX_NAMES {
        return Err(fail(format!(
            "the `model` parameter's schema.enum lists {} names, more than {MAX_NAMES}",
            listed.len()
        )));
    }
    let mut names = Vec::new();
    for (i, name) in listed.iter().enumerate() {
        let name = name
            .as_str()
            .filter(|n| !n.trim().is_empty() && n.len() <= MAX_NAME_LEN)
            .ok_or_else(|| {
                fail(format!(
                    "the `model` parameter's schema.enum[{i}] is not a name of 1 to {MAX_NAME_LEN} bytes"
                ))
            })?;
        if !names.iter().any(|n| n == name) {
            names.push(name.to_owned());
        }
    }
    Ok(names)
}

/// The model prefix an answer's rows carry (their `model` field), when it
/// has rows that name one.
fn prefix_of_rows(fetched: &Fetched) -> Option<String> {
    let value: Value = serde_json::from_str(&fetched.body).ok()?;
    value.as_array()?.iter().find_map(|row| {
        row.get("model")
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty() && m.len() <= MAX_NAME_LEN)
            .map(str::to_owned)
    })
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

    async fn display_name(&self, prefix: &str) -> Result<Option<String>, SourceError> {
        // One lookup at a time: a wave asks for many families at once, and
        // one refresh answers them all.
        let mut book = self.names.lock().await;
        if !book.loaded {
            book.loaded = true;
            if let Some(kept) = self.store.as_ref().and_then(|s| s.model_names(&self.base)) {
                book.known = kept;
            }
        }
        if let Some(name) = book.known.name_of(prefix) {
            return Ok(Some(name.to_owned()));
        }
        if let Some((at, failed)) = &book.asked
            && at.elapsed() < NAMES_REFRESH
        {
            return match failed {
                Some(e) => Err(e.clone()),
                None => Ok(None),
            };
        }
        match self.refresh(&book.known).await {
            Ok(known) => {
                book.known = known;
                book.asked = Some((Instant::now(), None));
                if let Some(store) = &self.store
                    && let Err(e) = store.save_model_names(&self.base, &book.known)
                {
                    tracing::warn!(error = %e, "could not keep the results API's display names");
                }
                Ok(book.known.name_of(prefix).map(str::to_owned))
            }
            Err(e) => {
                book.asked = Some((Instant::now(), Some(e.clone())));
                Err(e)
            }
        }
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

    async fn display_name(&self, _prefix: &str) -> Result<Option<String>, SourceError> {
        Err(SourceError {
            url: String::new(),
            reason: "no baseline source is configured".into(),
        })
    }

    fn configured(&self) -> bool {
        false
    }
}
