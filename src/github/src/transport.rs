//! Klaud's request policy on top of octocrab's raw calls: octocrab runs with
//! `RetryConfig::None` (it would otherwise repeat POSTs on a 5xx), and this
//! layer decides. Reads retry with backoff and jitter, honouring
//! `retry-after` and `x-ratelimit-reset`; writes are sent once, and only a
//! secondary-limit rejection (the request was not acted upon) is waited out
//! and re-sent. An ambiguous write failure is reported as such so the caller
//! re-reads state before deciding.
//!
//! GitHub's secondary limit is followed as its REST documentation says: with
//! `retry-after`, wait that long; with `x-ratelimit-remaining: 0`, wait for
//! `x-ratelimit-reset`; otherwise wait at least a minute, doubling for each
//! repeated rejection ([`secondary_wait`]). While such a pause lasts no
//! request of this transport is sent (continuing while limited can get the
//! integration banned), and the pause is visible ([`Transport::secondary_pause`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use http_body_util::BodyExt;
use klaud_lifecycle::job_log::HeadTail;
use octocrab::Octocrab;
use rand::Rng;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{GithubError, RateBudget, RetryPolicy};

/// A fully read response.
#[derive(Debug)]
pub(crate) struct Raw {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Raw {
    /// GitHub's `message` field, if the body is a GitHub error.
    pub fn message(&self) -> String {
        serde_json::from_slice::<Value>(&self.body)
            .ok()
            .and_then(|v| {
                let msg = v.get("message")?.as_str()?.to_string();
                let detail = v
                    .get("errors")
                    .and_then(Value::as_array)
                    .and_then(|e| e.first())
                    .and_then(|e| e.get("message"))
                    .and_then(Value::as_str)
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default();
                Some(format!("{msg}{detail}"))
            })
            .unwrap_or_else(|| format!("HTTP {}", self.status.as_u16()))
    }

    fn header_u64(&self, name: &str) -> Option<u64> {
        self.headers.get(name)?.to_str().ok()?.trim().parse().ok()
    }

    /// How long GitHub asks us to wait, if it asks: `retry-after`, or the
    /// primary window's reset when `x-ratelimit-remaining` is 0.
    pub fn requested_wait(&self, now_unix: i64) -> Option<Duration> {
        if let Some(secs) = self.header_u64("retry-after") {
            return Some(Duration::from_secs(secs));
        }
        if self.header_u64("x-ratelimit-remaining") == Some(0) {
            let reset = self.header_u64("x-ratelimit-reset")? as i64;
            return Some(Duration::from_secs((reset - now_unix).max(1) as u64));
        }
        None
    }

    /// GitHub's secondary limit: any 429, or a 403 whose message says
    /// "secondary rate limit" (a spent primary window, `remaining: 0`, is not).
    pub fn is_secondary_limit(&self) -> bool {
        if self.header_u64("x-ratelimit-remaining") == Some(0) && self.status.as_u16() == 403 {
            return false;
        }
        match self.status.as_u16() {
            429 => true,
            403 => self
                .message()
                .to_ascii_lowercase()
                .contains("secondary rate limit"),
            _ => false,
        }
    }

    /// A rate-limit rejection (primary or secondary): the request was not
    /// acted upon, so repeating it after the wait is safe even for writes.
    pub fn is_rate_limited(&self) -> bool {
        match self.status.as_u16() {
            429 => true,
            403 => {
                self.headers.contains_key("retry-after")
                    || self.header_u64("x-ratelimit-remaining") == Some(0)
                    || self.message().to_ascii_lowercase().contains("rate limit")
            }
            _ => false,
        }
    }

    pub fn json<T: DeserializeOwned>(&self, what: &str) -> Result<T, GithubError> {
        decode(what, &self.body)
    }

    /// `Link: <...>; rel="next"`, read by the registries' reader.
    pub fn next_link(&self) -> Option<String> {
        self.headers
            .get_all(http::header::LINK)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(klaud_planner::link::next_link)
            .map(str::to_owned)
    }
}

/// How long one GitHub write may take by default: the client's connect
/// (15 s) plus read (60 s) timeouts.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(75);
/// The shortest wait after a secondary-limit rejection that gives none:
/// GitHub's docs say "wait for at least one minute before retrying".
pub const SECONDARY_MIN_WAIT: Duration = Duration::from_secs(60);
/// The longest such wait, however often the limit repeats.
pub const SECONDARY_MAX_WAIT: Duration = Duration::from_secs(30 * 60);

/// Largest response body read from GitHub: the biggest real answers (a
/// recursive tree, a page of report comments, a master config's blob) are
/// a few MB.
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// How a response body is held.
#[derive(Clone, Copy, Debug)]
enum BodyShape {
    /// Whole, refused past [`MAX_RESPONSE_BYTES`].
    Whole,
    /// Its first and last bytes, this many in all, however long it is.
    HeadTail(usize),
}

/// How long to wait after the `strikes`-th secondary-limit rejection in a
/// row that gave no `retry-after` (1-based): 60 s, 120 s, 240 s, … capped at
/// [`SECONDARY_MAX_WAIT`].
pub fn secondary_wait(strikes: u32) -> Duration {
    let doublings = strikes.saturating_sub(1).min(16);
    SECONDARY_MIN_WAIT
        .saturating_mul(1u32 << doublings)
        .min(SECONDARY_MAX_WAIT)
}

/// A pause GitHub's secondary limit imposed on every request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecondaryPause {
    /// No request is sent before this.
    pub until: chrono::DateTime<chrono::Utc>,
    /// The route whose rejection started the pause.
    pub route: String,
    /// Rejections in a row that gave no `retry-after`.
    pub strikes: u32,
    /// Only writes were rejected (GitHub's limit on content-creating
    /// requests), so reads still go out.
    pub writes_only: bool,
}

/// What the transport knows of GitHub's secondary limit.
#[derive(Debug, Default)]
pub(crate) struct SecondaryLimit {
    pause: Option<SecondaryPause>,
    strikes: u32,
}

impl SecondaryLimit {
    /// The wait a rate-limited answer to `route` asks for, recording a
    /// pause when it is the secondary limit. `None`: GitHub gave no wait
    /// and it is not the secondary limit (the caller backs off).
    pub(crate) fn on_limited(
        &mut self,
        raw: &Raw,
        route: &str,
        write: bool,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Option<Duration> {
        let told = raw.requested_wait(now.timestamp());
        let secondary = raw.is_secondary_limit() || (told.is_none() && raw.is_rate_limited());
        if !secondary {
            return told;
        }
        let wait = match told {
            Some(wait) => wait,
            None => {
                // Requests sent before the pause began were rejected by the
                // same limit: they do not make it longer.
                let active = self.pause.as_ref().is_some_and(|p| p.until > now);
                if !active {
                    self.strikes = self.strikes.saturating_add(1);
                }
                let wait = match &self.pause {
                    Some(p) if active => (p.until - now).to_std().unwrap_or(SECONDARY_MIN_WAIT),
                    _ => secondary_wait(self.strikes),
                };
                if !active {
                    tracing::warn!(
                        route,
                        wait_secs = wait.as_secs(),
                        strikes = self.strikes,
                        "GitHub's secondary rate limit (no retry-after): pausing every request for {} s",
                        wait.as_secs()
                    );
                }
                wait
            }
        };
        let until = now + chrono::TimeDelta::from_std(wait).unwrap_or(chrono::TimeDelta::MAX);
        let writes_only = write
            && self
                .pause
                .as_ref()
                .is_none_or(|p| p.until <= now || p.writes_only);
        match &mut self.pause {
            Some(p) if p.until >= until && p.until > now => p.writes_only &= writes_only,
            _ => {
                self.pause = Some(SecondaryPause {
                    until,
                    route: route.to_string(),
                    strikes: self.strikes,
                    writes_only,
                });
            }
        }
        Some(wait)
    }

    /// An answer that was not rate-limited: the limit has let go.
    pub(crate) fn on_answered(&mut self, now: chrono::DateTime<chrono::Utc>) {
        if self.pause.as_ref().is_none_or(|p| p.until <= now) {
            self.pause = None;
            self.strikes = 0;
        }
    }

    /// The pause still to be waited out at `now`, if any.
    pub(crate) fn active(&self, now: chrono::DateTime<chrono::Utc>) -> Option<SecondaryPause> {
        self.pause.clone().filter(|p| p.until > now)
    }

    /// The pause a request (a write, or a read) must wait out at `now`.
    fn holding(&self, write: bool, now: chrono::DateTime<chrono::Utc>) -> Option<SecondaryPause> {
        self.active(now).filter(|p| write || !p.writes_only)
    }
}

/// Why a single exchange failed before a complete response was read.
#[derive(Debug)]
pub(crate) struct TransportFailure(pub String);

pub(crate) struct Transport {
    gh: Octocrab,
    api_url: String,
    policy: RetryPolicy,
    etags: Mutex<HashMap<String, CachedPage>>,
    immutable: Mutex<ImmutableCache>,
    commits: Mutex<KnownCommits>,
    budgets: Mutex<BTreeMap<String, RateBudget>>,
    secondary: Mutex<SecondaryLimit>,
    /// The longest one write may take before its outcome counts as unknown
    /// (the lease check sends a write only with this much lease left).
    write_timeout: Duration,
    /// GitHub's clock minus the local one at the last answer with a `Date`
    /// header, in milliseconds ([`SKEW_UNKNOWN`] before the first).
    skew_ms: AtomicI64,
    /// Paces writes as GitHub asks; `None`: unpaced (the library default,
    /// for simulators and tests; Klaud's configuration sets GitHub's).
    pacer: Option<crate::pace::Pacer>,
}

/// No answer with a `Date` header yet.
const SKEW_UNKNOWN: i64 = i64::MIN;
/// `Date` has whole seconds and the answer took some time to arrive: a
/// difference under this is measurement noise, not skew.
const SKEW_NOISE: chrono::TimeDelta = chrono::TimeDelta::seconds(2);

/// GitHub's clock minus `local`, from an answer's `Date` header (RFC 7231,
/// e.g. `Thu, 03 Dec 2026 15:09:45 GMT`); zero within the noise.
pub(crate) fn skew_of(
    headers: &HeaderMap,
    local: chrono::DateTime<chrono::Utc>,
) -> Option<chrono::TimeDelta> {
    let date = headers.get(http::header::DATE)?.to_str().ok()?;
    let github = chrono::DateTime::parse_from_rfc2822(date).ok()?;
    let skew = github.with_timezone(&chrono::Utc) - local;
    Some(if skew.abs() < SKEW_NOISE {
        chrono::TimeDelta::zero()
    } else {
        skew
    })
}

/// What is known of commits without asking again, all of it fixed forever
/// (a commit never changes): which tree a commit has (from a tree read by
/// commit sha, or a commit Klaud made), and for a commit Klaud made with
/// [`crate::Github`]'s tree API, its parent and the files it set (every
/// other path holds what it holds in the parent).
#[derive(Default)]
struct KnownCommits {
    trees: HashMap<String, String>,
    own: HashMap<String, OwnCommit>,
    bytes: usize,
}

/// A commit Klaud made: one parent, and the files it set (`None`: deleted).
struct OwnCommit {
    parent: String,
    files: HashMap<String, Option<Bytes>>,
}

/// What a commit Klaud made holds at one path.
pub(crate) enum OwnFile {
    /// Not a commit Klaud made (or forgotten): ask GitHub.
    Unknown,
    /// The commit set the path to this (`None`: deleted it).
    Set(Option<Bytes>),
    /// The commit did not touch the path: it holds what this parent holds.
    AsIn(String),
}

/// At most this many bytes of files of commits Klaud made are kept; the
/// record starts over when an insert would pass it.
const KNOWN_COMMITS_BYTES: usize = 32 * 1024 * 1024;

/// Answers that can never change: git objects by sha, and a file at a
/// commit sha (content-addressed). Asked once per process, however many
/// steps and reconcile passes read them.
#[derive(Default)]
struct ImmutableCache {
    /// Path → body. A 404 is not kept: an object (or the commit a file is
    /// read at) that is missing now may be pushed a moment later.
    answers: HashMap<String, Bytes>,
    bytes: usize,
}

impl ImmutableCache {
    /// Keeps one answer; one larger than an eighth of the budget is not
    /// kept, and the cache starts over when the budget would be passed.
    fn insert(&mut self, path: &str, body: Bytes) {
        let size = path.len() + body.len();
        if size > IMMUTABLE_CACHE_BYTES / 8 {
            return;
        }
        if self.bytes + size > IMMUTABLE_CACHE_BYTES {
            *self = ImmutableCache::default();
        }
        self.bytes += size;
        if let Some(old) = self.answers.insert(path.to_string(), body) {
            self.bytes -= path.len() + old.len();
        }
    }
}

/// At most this many bytes of immutable answers (the InferenceX configs and
/// recipes are about 4 MB); the cache starts over when an insert would pass it.
const IMMUTABLE_CACHE_BYTES: usize = 128 * 1024 * 1024;

/// Upper bound on cached conditional GETs; the cache is cleared when full
/// (polling touches few distinct URLs, so this is a safety valve).
const ETAG_CACHE_MAX: usize = 512;
/// And at most this many bytes of bodies (pages of report comments can be
/// large); the cache starts over when an insert would pass it.
const ETAG_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// At most this many bytes of conditional-read answers are handed out to
/// be kept across processes ([`Transport::conditional_pages`]): a light
/// Actions pass restores them from its store, and a store that grows with
/// every page read would make each restore slower than the reads it saves.
const KEPT_PAGES_BYTES: usize = 8 * 1024 * 1024;

/// A conditional-read answer as kept between processes (the store of a
/// light Actions pass): the path asked, its validator, the body and the
/// next page's address.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConditionalPage {
    /// The API path read.
    pub path: String,
    /// GitHub's `ETag` for it.
    pub etag: String,
    /// The answer's body (GitHub's JSON).
    pub body: String,
    /// The next page's address, for list endpoints.
    pub next: Option<String>,
}

/// A GET answer kept for conditional requests: its validator, body and
/// the next page's address (a 304 carries neither).
#[derive(Clone)]
struct CachedPage {
    etag: HeaderValue,
    body: Bytes,
    next: Option<String>,
}

impl Transport {
    pub fn new(gh: Octocrab, api_url: String, policy: RetryPolicy) -> Self {
        Self {
            gh,
            api_url,
            policy,
            etags: Mutex::new(HashMap::new()),
            immutable: Mutex::new(ImmutableCache::default()),
            commits: Mutex::new(KnownCommits::default()),
            budgets: Mutex::new(BTreeMap::new()),
            secondary: Mutex::new(SecondaryLimit::default()),
            write_timeout: DEFAULT_WRITE_TIMEOUT,
            skew_ms: AtomicI64::new(SKEW_UNKNOWN),
            pacer: None,
        }
    }

    /// Paces every write from now on (see [`crate::pace`]).
    pub fn set_write_pace(&mut self, pace: crate::WritePace) {
        self.pacer = Some(crate::pace::Pacer::new(pace));
    }

    /// The conditional-read answers held now, most bytes last dropped first
    /// past [`KEPT_PAGES_BYTES`]; bodies that are not UTF-8 are left out.
    pub fn conditional_pages(&self) -> Vec<ConditionalPage> {
        let Ok(cache) = self.etags.lock() else {
            return Vec::new();
        };
        let mut pages: Vec<ConditionalPage> = cache
            .iter()
            .filter_map(|(path, page)| {
                Some(ConditionalPage {
                    path: path.clone(),
                    etag: page.etag.to_str().ok()?.to_owned(),
                    body: String::from_utf8(page.body.to_vec()).ok()?,
                    next: page.next.clone(),
                })
            })
            .collect();
        pages.sort_by_key(|p| p.body.len());
        let mut bytes = 0;
        pages.retain(|p| {
            bytes += p.body.len();
            bytes <= KEPT_PAGES_BYTES
        });
        pages
    }

    /// Takes up answers an earlier process kept, within this cache's
    /// bounds; a page with an unusable validator is skipped. GitHub still
    /// decides: a changed resource answers 200 and replaces the page.
    pub fn restore_conditional_pages(&self, pages: Vec<ConditionalPage>) {
        let Ok(mut cache) = self.etags.lock() else {
            return;
        };
        let mut bytes: usize = cache.values().map(|p| p.body.len()).sum();
        for page in pages {
            if cache.len() >= ETAG_CACHE_MAX
                || page.body.len() > ETAG_CACHE_BYTES / 16
                || bytes + page.body.len() > ETAG_CACHE_BYTES
            {
                break;
            }
            let Ok(etag) = HeaderValue::from_str(&page.etag) else {
                continue;
            };
            bytes += page.body.len();
            cache.insert(
                page.path,
                CachedPage {
                    etag,
                    body: Bytes::from(page.body),
                    next: page.next,
                },
            );
        }
    }

    /// GitHub's clock minus the local one, as of the last answer (`None`
    /// before any answer carried a `Date`).
    pub(crate) fn clock_skew(&self) -> Option<chrono::TimeDelta> {
        match self.skew_ms.load(Ordering::Relaxed) {
            SKEW_UNKNOWN => None,
            ms => Some(chrono::TimeDelta::milliseconds(ms)),
        }
    }

    /// Bounds every write to `timeout` end to end.
    pub(crate) fn set_write_timeout(&mut self, timeout: Duration) {
        self.write_timeout = timeout;
    }

    /// The pause GitHub's secondary limit imposes right now, if any.
    pub fn secondary_pause(&self) -> Option<SecondaryPause> {
        self.secondary.lock().ok()?.active(chrono::Utc::now())
    }

    /// Waits out a secondary-limit pause before sending anything, or gives
    /// up with [`GithubError::RateLimited`] when it is longer than the
    /// policy's `max_wait` (nothing is sent meanwhile).
    async fn honour_pause(&self, what: &str, write: bool) -> Result<(), GithubError> {
        let Some(pause) = self
            .secondary
            .lock()
            .ok()
            .and_then(|s| s.holding(write, chrono::Utc::now()))
        else {
            return Ok(());
        };
        let left = (pause.until - chrono::Utc::now())
            .to_std()
            .unwrap_or_default();
        if left.is_zero() {
            return Ok(());
        }
        self.wait(what, left).await
    }

    /// The wait before repeating a rate-limited request (GitHub's, or the
    /// secondary limit's, else the backoff step).
    fn limited_wait(&self, raw: &Raw, path: &str, write: bool, attempt: u32) -> Duration {
        let route = path.split('?').next().unwrap_or(path);
        self.secondary
            .lock()
            .ok()
            .and_then(|mut s| s.on_limited(raw, route, write, chrono::Utc::now()))
            .unwrap_or_else(|| self.backoff(attempt))
    }

    fn answered(&self) {
        if let Ok(mut s) = self.secondary.lock() {
            s.on_answered(chrono::Utc::now());
        }
    }

    /// Latest budget per rate-limit resource (`core`, `graphql`, ...).
    pub fn budgets(&self) -> BTreeMap<String, RateBudget> {
        self.budgets.lock().map(|b| b.clone()).unwrap_or_default()
    }

    /// Turns an absolute `Link` URL on our API into the relative path
    /// octocrab expects (it only attaches credentials to relative URIs).
    pub fn relative(&self, url: &str) -> Option<String> {
        if let Some(rest) = url.strip_prefix(&self.api_url) {
            return Some(if rest.starts_with('/') {
                rest.to_string()
            } else {
                format!("/{rest}")
            });
        }
        // A Link to another host would leak nothing (no auth is attached)
        // but is not ours to follow.
        None
    }

    fn record_budget(&self, headers: &HeaderMap) {
        let get = |n: &str| {
            headers
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let num = |n: &str| get(n).and_then(|v| v.parse::<u64>().ok());
        if let (Some(limit), Some(remaining)) =
            (num("x-ratelimit-limit"), num("x-ratelimit-remaining"))
            && let Ok(mut b) = self.budgets.lock()
        {
            let resource = get("x-ratelimit-resource").unwrap_or_else(|| "core".into());
            b.insert(
                resource.clone(),
                RateBudget {
                    limit,
                    remaining,
                    used: num("x-ratelimit-used").unwrap_or(limit.saturating_sub(remaining)),
                    reset_unix: num("x-ratelimit-reset").unwrap_or(0) as i64,
                    resource,
                },
            );
        }
    }

    /// One exchange, body fully read. No retries here.
    pub async fn exchange(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        headers: Option<HeaderMap>,
    ) -> Result<Raw, TransportFailure> {
        self.exchange_shaped(method, path, body, headers, BodyShape::Whole)
            .await
    }

    async fn exchange_shaped(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        headers: Option<HeaderMap>,
        shape: BodyShape,
    ) -> Result<Raw, TransportFailure> {
        let fail = |e: octocrab::Error| TransportFailure(transport_detail(&e));
        let resp = match method {
            Method::GET => self.gh._get_with_headers(path, headers).await,
            Method::POST => self.gh._post(path, body).await,
            Method::PATCH => self.gh._patch(path, body).await,
            Method::PUT => self.gh._put(path, body).await,
            Method::DELETE => self.gh._delete(path, body).await,
            other => return Err(TransportFailure(format!("unsupported method {other}"))),
        }
        .map_err(fail)?;
        let (parts, body) = resp.into_parts();
        let body = match shape {
            // A body past the bound is refused while it streams in, before
            // it is held in memory.
            BodyShape::Whole => http_body_util::Limited::new(body, MAX_RESPONSE_BYTES)
                .collect()
                .await
                .map_err(|e| {
                    TransportFailure(format!(
                        "reading the response body (at most {MAX_RESPONSE_BYTES} bytes): {}",
                        transport_detail(&*e)
                    ))
                })?
                .to_bytes(),
            BodyShape::HeadTail(limit) => {
                let mut body = body;
                let mut kept = HeadTail::new(limit);
                while let Some(frame) = body.frame().await {
                    let frame = frame.map_err(|e| {
                        TransportFailure(format!(
                            "reading the response body: {}",
                            transport_detail(&e)
                        ))
                    })?;
                    if let Some(data) = frame.data_ref() {
                        kept.push(data);
                    }
                }
                Bytes::from(kept.finish())
            }
        };
        self.record_budget(&parts.headers);
        if let Some(skew) = skew_of(&parts.headers, chrono::Utc::now()) {
            self.skew_ms.store(
                skew.num_milliseconds().max(SKEW_UNKNOWN + 1),
                Ordering::Relaxed,
            );
        }
        Ok(Raw {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }

    fn backoff(&self, attempt: u32) -> Duration {
        let exp = self
            .policy
            .base_delay
            .saturating_mul(2u32.saturating_pow(attempt))
            .min(self.policy.max_delay);
        // Jitter (50-100% of the step) so concurrent instances do not retry
        // in lockstep.
        let jitter = rand::rng().random_range(0.5..1.0);
        exp.mul_f64(jitter)
    }

    async fn wait(&self, what: &str, wait: Duration) -> Result<(), GithubError> {
        if wait > self.policy.max_wait {
            return Err(GithubError::RateLimited {
                what: what.to_string(),
                retry_after_secs: wait.as_secs(),
            });
        }
        tracing::info!(
            what,
            wait_ms = wait.as_millis() as u64,
            "waiting before retrying a GitHub request"
        );
        tokio::time::sleep(wait).await;
        Ok(())
    }

    /// A read: retried on transport errors, 5xx and rate limits.
    pub async fn read(
        &self,
        what: &str,
        path: &str,
        headers: Option<HeaderMap>,
    ) -> Result<Raw, GithubError> {
        self.read_shaped(what, path, headers, BodyShape::Whole)
            .await
    }

    /// A read of something that may not exist whose body can be longer
    /// than anything kept whole (a job's log): only its first and last
    /// bytes, `limit` in all, are held as it streams in ([`HeadTail`]).
    /// `None` on 404, otherwise it must succeed with 2xx.
    pub async fn read_head_tail(
        &self,
        what: &str,
        path: &str,
        limit: usize,
    ) -> Result<Option<Bytes>, GithubError> {
        let raw = self
            .read_shaped(what, path, None, BodyShape::HeadTail(limit))
            .await?;
        if raw.status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        ok_or_error(what, &raw)?;
        Ok(Some(raw.body))
    }

    async fn read_shaped(
        &self,
        what: &str,
        path: &str,
        headers: Option<HeaderMap>,
        shape: BodyShape,
    ) -> Result<Raw, GithubError> {
        let mut attempt = 0;
        loop {
            let last = attempt + 1 >= self.policy.max_attempts;
            self.honour_pause(what, false).await?;
            match self
                .exchange_shaped(Method::GET, path, None, headers.clone(), shape)
                .await
            {
                Ok(raw) if raw.is_rate_limited() => {
                    let wait = self.limited_wait(&raw, path, false, attempt);
                    if last {
                        return Err(status_error(what, &raw));
                    }
                    self.wait(what, wait).await?;
                }
                Ok(raw) if raw.status.is_server_error() => {
                    if last {
                        return Err(status_error(what, &raw));
                    }
                    let wait = raw
                        .requested_wait(chrono::Utc::now().timestamp())
                        .unwrap_or_else(|| self.backoff(attempt));
                    self.wait(what, wait).await?;
                }
                Ok(raw) => {
                    self.answered();
                    return Ok(raw);
                }
                Err(TransportFailure(detail)) => {
                    if last {
                        return Err(GithubError::Transport {
                            what: what.to_string(),
                            detail,
                        });
                    }
                    self.wait(what, self.backoff(attempt)).await?;
                }
            }
            attempt += 1;
        }
    }

    /// A read that must succeed with 2xx, decoded.
    pub async fn get_json<T: DeserializeOwned>(
        &self,
        what: &str,
        path: &str,
    ) -> Result<T, GithubError> {
        let raw = self.read(what, path, None).await?;
        ok_or_error(what, &raw)?;
        raw.json(what)
    }

    /// A read of something that may not exist: `None` on 404, otherwise it
    /// must succeed with 2xx.
    pub async fn read_found(&self, what: &str, path: &str) -> Result<Option<Raw>, GithubError> {
        let raw = self.read(what, path, None).await?;
        if raw.status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        ok_or_error(what, &raw)?;
        Ok(Some(raw))
    }

    /// A read of something that can never change (a git object by sha, a
    /// file at a commit sha): answered from memory after the first time.
    /// `None` on 404, otherwise it must succeed with 2xx.
    pub async fn read_immutable(
        &self,
        what: &str,
        path: &str,
    ) -> Result<Option<Bytes>, GithubError> {
        if let Some(hit) = self.cached_immutable(path) {
            return Ok(Some(hit));
        }
        let answer = self.read_found(what, path).await?.map(|raw| raw.body);
        if let Some(body) = &answer
            && let Ok(mut c) = self.immutable.lock()
        {
            c.insert(path, body.clone());
        }
        Ok(answer)
    }

    /// The kept answer of an immutable read, if there is one; asks nothing.
    pub fn cached_immutable(&self, path: &str) -> Option<Bytes> {
        self.immutable
            .lock()
            .ok()
            .and_then(|c| c.answers.get(path).cloned())
    }

    /// Keeps `body` as the answer to a later [`Transport::read_immutable`]
    /// of `path`: a write's answer that is the immutable object itself (a
    /// created commit).
    pub fn remember_immutable(&self, path: &str, body: Bytes) {
        if let Ok(mut c) = self.immutable.lock() {
            c.insert(path, body);
        }
    }

    /// Remembers that `commit` has tree `tree` (commits never change).
    pub fn remember_tree(&self, commit: &str, tree: &str) {
        if let Ok(mut c) = self.commits.lock() {
            if c.trees.len() >= ETAG_CACHE_MAX * 8 {
                c.trees.clear();
            }
            c.trees.insert(commit.to_string(), tree.to_string());
        }
    }

    /// The tree of `commit`, when known without a request.
    pub fn known_tree(&self, commit: &str) -> Option<String> {
        self.commits.lock().ok()?.trees.get(commit).cloned()
    }

    /// Remembers a commit Klaud made on `parent` that set `files` (the
    /// tree was made from the parent's tree plus exactly these changes).
    pub fn remember_own_commit(
        &self,
        sha: &str,
        parent: &str,
        files: impl IntoIterator<Item = (String, Option<Bytes>)>,
    ) {
        let files: HashMap<String, Option<Bytes>> = files
            .into_iter()
            .map(|(p, b)| (p.trim_start_matches('/').to_string(), b))
            .collect();
        let size: usize = files
            .iter()
            .map(|(p, b)| p.len() + b.as_ref().map_or(0, Bytes::len))
            .sum();
        if size > KNOWN_COMMITS_BYTES / 8 {
            return;
        }
        if let Ok(mut c) = self.commits.lock() {
            if c.bytes + size > KNOWN_COMMITS_BYTES {
                c.own.clear();
                c.bytes = 0;
            }
            c.bytes += size;
            let commit = OwnCommit {
                parent: parent.to_string(),
                files,
            };
            c.own.insert(sha.to_string(), commit);
        }
    }

    /// The parent a commit Klaud made was made on and the paths it set
    /// (sorted), when it is known.
    pub fn own_paths(&self, sha: &str) -> Option<(String, Vec<String>)> {
        let c = self.commits.lock().ok()?;
        let own = c.own.get(sha)?;
        let mut paths: Vec<String> = own.files.keys().cloned().collect();
        paths.sort();
        Some((own.parent.clone(), paths))
    }

    /// What commit `sha` holds at `path`, when Klaud made the commit.
    pub fn own_file(&self, sha: &str, path: &str) -> OwnFile {
        let Ok(c) = self.commits.lock() else {
            return OwnFile::Unknown;
        };
        match c.own.get(sha) {
            None => OwnFile::Unknown,
            Some(own) => match own.files.get(path.trim_start_matches('/')) {
                Some(bytes) => OwnFile::Set(bytes.clone()),
                None => OwnFile::AsIn(own.parent.clone()),
            },
        }
    }

    /// [`Transport::read_immutable`] of something that must exist, decoded.
    pub async fn get_json_immutable<T: DeserializeOwned>(
        &self,
        what: &str,
        path: &str,
    ) -> Result<T, GithubError> {
        match self.read_immutable(what, path).await? {
            Some(body) => decode(what, &body),
            None => Err(GithubError::NotFound {
                what: what.to_string(),
            }),
        }
    }

    /// A conditional read of something that may not exist (a ref): `None` on
    /// 404; an unchanged answer is a free 304.
    pub async fn read_found_conditional(
        &self,
        what: &str,
        path: &str,
    ) -> Result<Option<Bytes>, GithubError> {
        match self.read_conditional(what, path).await {
            Ok((body, _)) => Ok(Some(body)),
            Err(GithubError::NotFound { .. }) => {
                if let Ok(mut c) = self.etags.lock() {
                    c.remove(path);
                }
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// A conditional GET: a 304 answers from the cache and costs no
    /// budget. The body (from GitHub or the cache) and the next page link.
    async fn read_conditional(
        &self,
        what: &str,
        path: &str,
    ) -> Result<(Bytes, Option<String>), GithubError> {
        let cached = self.etags.lock().ok().and_then(|c| c.get(path).cloned());
        let mut headers = HeaderMap::new();
        if let Some(c) = &cached {
            headers.insert(http::header::IF_NONE_MATCH, c.etag.clone());
        }
        let raw = self.read(what, path, Some(headers)).await?;
        if raw.status == StatusCode::NOT_MODIFIED {
            return cached
                .map(|c| (c.body, c.next))
                .ok_or_else(|| GithubError::Decode {
                    what: what.to_string(),
                    detail: "304 Not Modified without a cached copy".into(),
                });
        }
        ok_or_error(what, &raw)?;
        let next = raw.next_link();
        if let Some(etag) = raw.headers.get(http::header::ETAG)
            && raw.body.len() <= ETAG_CACHE_BYTES / 16
            && let Ok(mut c) = self.etags.lock()
        {
            let bytes: usize = c.values().map(|p| p.body.len()).sum();
            if c.len() >= ETAG_CACHE_MAX || bytes + raw.body.len() > ETAG_CACHE_BYTES {
                c.clear();
            }
            let page = CachedPage {
                etag: etag.clone(),
                body: raw.body.clone(),
                next: next.clone(),
            };
            c.insert(path.to_string(), page);
        }
        Ok((raw.body, next))
    }

    /// [`Transport::read_conditional`], decoded.
    pub async fn get_json_cached<T: DeserializeOwned>(
        &self,
        what: &str,
        path: &str,
    ) -> Result<T, GithubError> {
        let (body, _) = self.read_conditional(what, path).await?;
        decode(what, &body)
    }

    /// Every page of a list endpoint. `key` selects the array inside a
    /// wrapped page (`workflow_runs`, `artifacts`); `None` for bare arrays.
    pub async fn get_all<T: DeserializeOwned>(
        &self,
        what: &str,
        path: &str,
        key: Option<&str>,
    ) -> Result<Vec<T>, GithubError> {
        self.get_pages(what, path, key, 1000, &|_: &[T]| false)
            .await
    }

    /// The items of a paged list, page by page, until a page for which
    /// `enough` holds (given everything read so far) or `max_pages` pages:
    /// for lists read newest first where the wanted item is near the top.
    pub async fn get_pages<T: DeserializeOwned>(
        &self,
        what: &str,
        path: &str,
        key: Option<&str>,
        max_pages: usize,
        enough: &(dyn Fn(&[T]) -> bool + Sync),
    ) -> Result<Vec<T>, GithubError> {
        let mut out = Vec::new();
        let mut next = Some(path.to_string());
        let mut pages = 0;
        while let Some(p) = next.take() {
            pages += 1;
            if pages > max_pages.min(1000) {
                if max_pages < 1000 {
                    break;
                }
                return Err(GithubError::Decode {
                    what: what.to_string(),
                    detail: "more than 1000 pages; refusing to follow further".into(),
                });
            }
            // Conditional: an unchanged page (an idle poll) costs no budget.
            let (body, next_link) = self.read_conditional(what, &p).await?;
            let page: Vec<T> = match key {
                None => decode(what, &body)?,
                Some(k) => {
                    let mut v: Value = decode(what, &body)?;
                    let items =
                        v.get_mut(k)
                            .map(Value::take)
                            .ok_or_else(|| GithubError::Decode {
                                what: what.to_string(),
                                detail: format!("page has no {k:?} array"),
                            })?;
                    serde_json::from_value(items).map_err(|e| GithubError::Decode {
                        what: what.to_string(),
                        detail: e.to_string(),
                    })?
                }
            };
            out.extend(page);
            if enough(&out) {
                break;
            }
            next = match next_link {
                None => None,
                // Stopping here would silently truncate the list.
                Some(link) => Some(self.relative(&link).ok_or_else(|| GithubError::Decode {
                    what: what.to_string(),
                    detail: format!(
                        "next page {link:?} is not under the API URL {:?}",
                        self.api_url
                    ),
                })?),
            };
        }
        Ok(out)
    }

    /// A write whose repetition is harmless (replacing a body, setting labels
    /// or draft state, deleting): when the first attempt leaves the outcome
    /// unknown it is sent once more instead of re-reading first.
    pub async fn write_idempotent(
        &self,
        what: &str,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Raw, GithubError> {
        match self.write(what, method.clone(), path, body).await {
            Err(GithubError::Ambiguous { .. }) => self.write(what, method, path, body).await,
            other => other,
        }
    }

    /// A write, sent once. Rate-limit rejections are waited out and re-sent
    /// (GitHub did not act on them); anything else that leaves the outcome
    /// unknown comes back as [`GithubError::Ambiguous`].
    pub async fn write(
        &self,
        what: &str,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Raw, GithubError> {
        // A GraphQL query is a read sent as a POST: only mutations are
        // writes GitHub paces.
        let is_query = path == "/graphql"
            && body
                .and_then(|b| b.get("query"))
                .and_then(Value::as_str)
                .is_some_and(|q| !q.trim_start().starts_with("mutation"));
        let _turn = match (&self.pacer, is_query) {
            (Some(pacer), false) => Some(pacer.turn().await),
            _ => None,
        };
        let mut attempt = 0;
        loop {
            // Nothing was sent yet: giving up here leaves nothing ambiguous.
            self.honour_pause(what, true).await?;
            // The client's own timeouts bound each connect and each read,
            // not the whole answer: the lease check needs an end-to-end bound.
            let exchanged = tokio::time::timeout(
                self.write_timeout,
                self.exchange(method.clone(), path, body, None),
            )
            .await
            .unwrap_or_else(|_| {
                Err(TransportFailure(format!(
                    "no answer within {}s",
                    self.write_timeout.as_secs_f64()
                )))
            });
            match exchanged {
                Ok(raw) if raw.is_rate_limited() => {
                    // GitHub did not act on it, so it may be sent again.
                    let wait = self.limited_wait(&raw, path, true, attempt);
                    if attempt + 1 >= self.policy.max_attempts {
                        return Err(status_error(what, &raw));
                    }
                    self.wait(what, wait).await?;
                }
                Ok(raw) if raw.status.is_server_error() => {
                    return Err(GithubError::Ambiguous {
                        what: what.to_string(),
                        detail: format!("HTTP {}", raw.status.as_u16()),
                    });
                }
                Ok(raw) => {
                    self.answered();
                    return Ok(raw);
                }
                Err(TransportFailure(detail)) => {
                    return Err(GithubError::Ambiguous {
                        what: what.to_string(),
                        detail,
                    });
                }
            }
            attempt += 1;
        }
    }
}

/// Error text of an octocrab/hyper failure. octocrab errors never contain the
/// token (it lives in a sensitive header), but keep only the chain of
/// messages anyway.
fn transport_detail(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut src = e.source();
    while let Some(s) = src {
        parts.push(s.to_string());
        src = s.source();
    }
    parts.dedup();
    parts.join(": ")
}

/// Maps a non-2xx response to a typed error.
pub(crate) fn status_error(what: &str, raw: &Raw) -> GithubError {
    let message = raw.message();
    let what = what.to_string();
    match raw.status.as_u16() {
        401 => GithubError::Unauthorized { what, message },
        404 => GithubError::NotFound { what },
        422 if message.contains("already exists") => GithubError::AlreadyExists { what, message },
        422 if message.contains("not a fast forward") => GithubError::NotFastForward { what },
        _ if raw.is_rate_limited() => GithubError::RateLimited {
            what,
            retry_after_secs: raw
                .requested_wait(chrono::Utc::now().timestamp())
                .map(|d| d.as_secs())
                .unwrap_or(60),
        },
        s if s >= 500 => GithubError::Server { what, status: s },
        status => GithubError::Rejected {
            what,
            status,
            message,
        },
    }
}

pub(crate) fn decode<T: DeserializeOwned>(what: &str, body: &[u8]) -> Result<T, GithubError> {
    serde_json::from_slice(body).map_err(|e| GithubError::Decode {
        what: what.to_string(),
        detail: e.to_string(),
    })
}

pub(crate) fn ok_or_error(what: &str, raw: &Raw) -> Result<(), GithubError> {
    if raw.status.is_success() {
        Ok(())
    } else {
        Err(status_error(what, raw))
    }
}

#[cfg(test)]
mod tests;
