//! One HTTP exchange with retries, body limits, counting and auth.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use chrono::{DateTime, Utc};
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, RETRY_AFTER, WWW_AUTHENTICATE};
use reqwest::{Method, Response, StatusCode};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use url::Url;

use super::auth::{
    Challenge, DEFAULT_TOKEN_LIFETIME, Token, TokenCache, TokenResponse, parse_challenge,
    pull_scope,
};
use super::breaker::{Breaker, TrippedHost};
use super::config::RegistryConfig;
use super::error::{RegistryError, Target, describe_reqwest};
use super::model::{RequestCounts, RequestKind};

/// Request counters, one per [`RequestKind`].
#[derive(Default)]
pub(crate) struct Counters {
    manifest_head: AtomicU64,
    manifest_get: AtomicU64,
    blob_get: AtomicU64,
    tags_list: AtomicU64,
    token: AtomicU64,
    hub_api: AtomicU64,
    other: AtomicU64,
    /// The same, by registry host as image references name it (a mirror's
    /// requests count for the host it stands in for): Docker Hub's quota is
    /// per host, so its pulls are told apart from NGC's or GHCR's.
    by_host: std::sync::Mutex<std::collections::BTreeMap<String, RequestCounts>>,
}

impl Counters {
    fn bump_host(&self, kind: RequestKind, host: &str) {
        self.bump(kind);
        let mut by_host = self.by_host.lock().unwrap_or_else(|p| p.into_inner());
        if !by_host.contains_key(host) {
            by_host.insert(host.to_owned(), RequestCounts::default());
        }
        if let Some(counts) = by_host.get_mut(host) {
            counts.add(kind);
        }
    }

    pub(crate) fn snapshot_by_host(&self) -> std::collections::BTreeMap<String, RequestCounts> {
        self.by_host
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn bump(&self, kind: RequestKind) {
        let c = match kind {
            RequestKind::ManifestHead => &self.manifest_head,
            RequestKind::ManifestGet => &self.manifest_get,
            RequestKind::BlobGet => &self.blob_get,
            RequestKind::TagsList => &self.tags_list,
            RequestKind::Token => &self.token,
            RequestKind::HubApi => &self.hub_api,
            RequestKind::ApiBase => &self.other,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> RequestCounts {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RequestCounts {
            manifest_head: l(&self.manifest_head),
            manifest_get: l(&self.manifest_get),
            blob_get: l(&self.blob_get),
            tags_list: l(&self.tags_list),
            token: l(&self.token),
            hub_api: l(&self.hub_api),
            other: l(&self.other),
        }
    }
}

/// A registry's pull quota as its answers state it: Docker Hub sends
/// `ratelimit-limit: 100;w=21600` and `ratelimit-remaining: 76;w=21600` on
/// manifest requests (a manifest GET is a pull; HEAD is free).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PullQuota {
    /// Pulls allowed per window.
    pub limit: u64,
    /// Pulls left in the current window.
    pub remaining: u64,
    /// The window, in seconds.
    pub window_secs: u64,
}

impl PullQuota {
    /// The quota the headers state, when they state one.
    pub fn of(headers: &HeaderMap) -> Option<Self> {
        // `<count>;w=<seconds>`; the window is optional in the draft spec.
        fn field(headers: &HeaderMap, name: &str) -> Option<(u64, Option<u64>)> {
            let v = headers.get(name)?.to_str().ok()?;
            let mut parts = v.split(';');
            let count = parts.next()?.trim().parse().ok()?;
            let window = parts
                .filter_map(|p| p.trim().strip_prefix("w="))
                .find_map(|w| w.trim().parse().ok());
            Some((count, window))
        }
        let (limit, w1) = field(headers, "ratelimit-limit")?;
        let (remaining, w2) = field(headers, "ratelimit-remaining")?;
        Some(Self {
            limit,
            remaining: remaining.min(limit),
            // Docker Hub's documented window when none is stated: 6 hours.
            window_secs: w2.or(w1).unwrap_or(6 * 3600),
        })
    }

    fn describe(&self) -> String {
        format!(
            "{} of {} pulls left per {} h",
            self.remaining,
            self.limit,
            self.window_secs.div_ceil(3600)
        )
    }
}

/// How a request authenticates.
#[derive(Clone)]
enum Auth {
    Anonymous,
    Bearer(Token),
    Basic,
}

/// What one request is: kind for counting, target for errors, and the HTTP
/// method, URL and `Accept` header.
#[derive(Clone, Copy)]
struct Call<'a> {
    kind: RequestKind,
    target: &'a Target,
    method: &'a Method,
    url: &'a Url,
    accept: Option<&'a str>,
    /// A validator of an answer kept from an earlier read: an unchanged
    /// resource is a `304` without a body.
    if_none_match: Option<&'a str>,
}

/// Outcome of [`Http::fetch`].
pub(crate) struct Fetched {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

/// A response together with the concurrency permit it occupies until its
/// body has been read.
pub(crate) struct Exchange {
    pub(crate) response: Response,
    _permit: OwnedSemaphorePermit,
}

/// The HTTP layer shared by every clone of a client.
pub(crate) struct Http {
    pub(crate) config: RegistryConfig,
    client: reqwest::Client,
    /// `concurrency` requests in flight per registry host (as image
    /// references name it): one slow or busy registry does not hold back
    /// the requests every other one could answer meanwhile.
    permits: std::sync::Mutex<std::collections::HashMap<String, Arc<Semaphore>>>,
    tokens: TokenCache,
    basic_hosts: std::sync::Mutex<std::collections::HashSet<String>>,
    pub(crate) counters: Counters,
    pub(crate) breaker: Breaker,
    /// The last pull quota each host stated (`host[:port]`), and when.
    pub(crate) quotas:
        std::sync::Mutex<std::collections::BTreeMap<String, (PullQuota, DateTime<Utc>)>>,
    /// Manifest `GET`s sent to each host (`host[:port]`) and not answered
    /// yet: pulls the last stated quota may not count.
    pulls_in_flight: Arc<std::sync::Mutex<std::collections::BTreeMap<String, u64>>>,
}

/// A pull sent and not yet answered; dropping it (answer or failure) frees
/// its place in the host's quota.
struct PullInFlight {
    host: String,
    in_flight: Arc<std::sync::Mutex<std::collections::BTreeMap<String, u64>>>,
}

impl Drop for PullInFlight {
    fn drop(&mut self) {
        let mut map = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = map.get_mut(&self.host) {
            *n = n.saturating_sub(1);
        }
    }
}

impl Http {
    pub(crate) fn new(config: RegistryConfig) -> Result<Self, RegistryError> {
        config.validate()?;
        let client = klaud_http::http_client_builder()
            .user_agent(config.user_agent.clone())
            .timeout(config.timeout)
            .connect_timeout(config.timeout.min(Duration::from_secs(10)))
            .build()
            .map_err(|e| {
                RegistryError::Config(format!("cannot build HTTP client: {}", describe_reqwest(e)))
            })?;
        Ok(Self {
            breaker: Breaker::new(config.breaker_cooldown),
            permits: Default::default(),
            config,
            client,
            tokens: TokenCache::default(),
            basic_hosts: Default::default(),
            counters: Counters::default(),
            quotas: Default::default(),
            pulls_in_flight: Default::default(),
        })
    }

    /// Sends a read request, retrying 5xx, 429 and transport errors with
    /// exponential backoff and full jitter, honouring `Retry-After`. Returns
    /// the last response whatever its status; the caller interprets it.
    async fn send(
        &self,
        call: &Call<'_>,
        auth: &Auth,
        host_for_basic: &str,
    ) -> Result<Exchange, RegistryError> {
        let Call {
            kind,
            target,
            method,
            url,
            accept,
            if_none_match,
        } = *call;
        let network_host = authority(url);
        let mut attempt: u32 = 0;
        loop {
            if let Some(trip) = self.breaker.tripped(&network_host, Utc::now()) {
                return Err(unreachable(target, &trip));
            }
            let permit = self
                .host_permits(&target.host)
                .acquire_owned()
                .await
                .map_err(|_| RegistryError::Config("registry client was shut down".into()))?;
            // A manifest GET is a pull: with none left in the window it
            // would only be refused, and asking while refused can make the
            // registry stretch the limit. Stop before it, counting the pulls
            // already on their way, which the stated quota may not include.
            let _pull = if kind == RequestKind::ManifestGet {
                match self.reserve_pull(&network_host) {
                    Ok(pull) => Some(pull),
                    Err(q) => return Err(self.out_of_quota(target, &network_host, &q, None)),
                }
            } else {
                None
            };
            self.counters.bump_host(kind, &target.host);
            let mut req = self.client.request(method.clone(), url.clone());
            if let Some(a) = accept {
                req = req.header(ACCEPT, a);
            }
            if let Some(v) = if_none_match {
                req = req.header(reqwest::header::IF_NONE_MATCH, v);
            }
            if kind == RequestKind::HubApi {
                req = req.timeout(self.config.hub_api_timeout.min(self.config.timeout));
            }
            req = match auth {
                Auth::Anonymous => req,
                Auth::Bearer(t) => req.bearer_auth(&t.0),
                Auth::Basic => match self.config.credentials.get(host_for_basic) {
                    Some(c) => req.basic_auth(&c.username, Some(&c.password)),
                    None => req,
                },
            };
            let result = req.send().await;
            if let Ok(resp) = &result {
                let quota = PullQuota::of(resp.headers());
                if let Some(q) = quota {
                    self.quotas
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(network_host.clone(), (q, Utc::now()));
                }
                // A 429 from a registry that counts pulls is its quota, not
                // a passing overload: retrying cannot help before the
                // window turns, so the host waits until then.
                if resp.status() == StatusCode::TOO_MANY_REQUESTS
                    && let Some(q) = quota.or_else(|| self.quota(&network_host))
                {
                    let wait = retry_after(resp.headers(), Utc::now());
                    return Err(self.out_of_quota(target, &network_host, &q, wait));
                }
            }
            let retry_in = match &result {
                Ok(resp) if is_retryable_status(resp.status()) => Some(
                    retry_after(resp.headers(), Utc::now())
                        .map(|d| d.min(self.config.max_retry_delay)),
                ),
                Ok(_) => None,
                // A request that cannot be built or a redirect loop will not
                // get better by asking again.
                Err(e) if e.is_builder() || e.is_redirect() => None,
                // Neither will a host that does not resolve, refuses or does
                // not answer: retrying it only multiplies the wait. The
                // breaker makes every later request fail fast.
                Err(e) if e.is_connect() || e.is_timeout() => {
                    let reason = describe_reqwest_ref(e);
                    let trip = self.breaker.trip(&network_host, &reason, Utc::now());
                    tracing::warn!(host = %network_host, %reason, until = %trip.until, "registry host unreachable; not asked again before the cooldown ends");
                    return Err(unreachable(target, &trip));
                }
                Err(_) => Some(None),
            };
            match (result, retry_in) {
                (Ok(response), Some(wait)) if attempt < self.config.max_retries => {
                    drop(response);
                    drop(permit);
                    let wait = wait.unwrap_or_else(|| self.backoff(attempt));
                    tracing::debug!(%target, what = kind.describe(), attempt, ?wait, "retrying after retryable status");
                    tokio::time::sleep(wait).await;
                }
                (Ok(response), _) => {
                    return Ok(Exchange {
                        response,
                        _permit: permit,
                    });
                }
                (Err(e), Some(_)) if attempt < self.config.max_retries => {
                    drop(permit);
                    let wait = self.backoff(attempt);
                    tracing::debug!(%target, what = kind.describe(), attempt, ?wait, error = %describe_reqwest(e), "retrying after transport error");
                    tokio::time::sleep(wait).await;
                }
                (Err(e), _) => {
                    return Err(RegistryError::Transport {
                        target: target.clone(),
                        what: kind.describe(),
                        reason: format!("{} (after {} attempts)", describe_reqwest(e), attempt + 1),
                    });
                }
            }
            attempt += 1;
        }
    }

    fn host_permits(&self, host: &str) -> Arc<Semaphore> {
        let mut map = self.permits.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(
            map.entry(host.to_owned())
                .or_insert_with(|| Arc::new(Semaphore::new(self.config.concurrency))),
        )
    }

    /// One anonymous read whose answer is interpreted by the caller, with
    /// the usual retries but without answering an auth challenge: a 401 is
    /// itself the answer when asking whether a registry is there.
    pub(crate) async fn probe(
        &self,
        kind: RequestKind,
        target: &Target,
        url: &Url,
    ) -> Result<(StatusCode, HeaderMap), RegistryError> {
        let call = Call {
            kind,
            target,
            method: &Method::GET,
            url,
            accept: None,
            if_none_match: None,
        };
        let ex = self.send(&call, &Auth::Anonymous, "").await?;
        Ok((ex.response.status(), ex.response.headers().clone()))
    }

    /// Takes a place for one pull from `host`, or the quota that leaves
    /// none: the last stated remaining count less the pulls sent since and
    /// not answered (an answer states a count that may already include
    /// them, so this may refuse early; it never sends past the quota).
    fn reserve_pull(&self, host: &str) -> Result<PullInFlight, PullQuota> {
        let quota = self.quota(host);
        let mut map = self
            .pulls_in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let in_flight = map.entry(host.to_owned()).or_default();
        if let Some(q) = quota
            && q.remaining <= *in_flight
        {
            return Err(q);
        }
        *in_flight += 1;
        Ok(PullInFlight {
            host: host.to_owned(),
            in_flight: Arc::clone(&self.pulls_in_flight),
        })
    }

    /// The pulls `host` (as image references name it) has left by the
    /// quota its registry last stated, less those on their way; `None`
    /// when it stated none in a window that can still be the current one.
    pub(crate) fn pulls_left(&self, host: &str) -> Option<u64> {
        let network_host = authority(&self.config.base_url(host).ok()?);
        let quota = self.quota(&network_host)?;
        let in_flight = self
            .pulls_in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&network_host)
            .copied()
            .unwrap_or(0);
        Some(quota.remaining.saturating_sub(in_flight))
    }

    /// The quota `host` last stated, while its window can still be the
    /// current one: a long-running process must not hold a spent window
    /// against the next.
    fn quota(&self, host: &str) -> Option<PullQuota> {
        let (quota, seen) = *self
            .quotas
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(host)?;
        // A window no clock can hold (a hostile header) lasts forever.
        let window = i64::try_from(quota.window_secs)
            .ok()
            .and_then(chrono::Duration::try_seconds)
            .unwrap_or(chrono::Duration::MAX);
        (Utc::now() - seen < window).then_some(quota)
    }

    /// Opens `host`'s breaker until its quota window turns (or the
    /// registry's `Retry-After`), so the rest of the plan, and the next
    /// plans, leave its families for later instead of failing each.
    fn out_of_quota(
        &self,
        target: &Target,
        host: &str,
        quota: &PullQuota,
        retry_after: Option<Duration>,
    ) -> RegistryError {
        let now = Utc::now();
        let wait = retry_after.unwrap_or(Duration::from_secs(quota.window_secs));
        let until = chrono::Duration::from_std(wait)
            .ok()
            .and_then(|d| now.checked_add_signed(d))
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        let reason = format!("out of pull quota ({})", quota.describe());
        let trip = self.breaker.trip_until(host, &reason, now, until);
        tracing::warn!(%host, %reason, until = %trip.until, "registry pull quota spent; no manifest is pulled from it before the window turns");
        unreachable(target, &trip)
    }

    fn backoff(&self, attempt: u32) -> Duration {
        let exp = self
            .config
            .retry_base_delay
            .saturating_mul(2u32.saturating_pow(attempt.min(16)));
        let cap = exp.min(self.config.max_retry_delay);
        let nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
        // Full jitter: concurrent clients that failed together spread out.
        Duration::from_nanos(rand::random_range(0..=nanos))
    }

    /// A registry request (`/v2/...`) with anonymous-first auth: on 401 the
    /// challenge is answered once (token or basic credentials); a second 401
    /// is an error, never a loop.
    pub(crate) async fn registry(
        &self,
        kind: RequestKind,
        target: &Target,
        method: Method,
        url: &Url,
        accept: Option<&str>,
    ) -> Result<Exchange, RegistryError> {
        self.registry_with(kind, target, method, url, accept, None)
            .await
    }

    /// [`Self::registry`], conditional on `if_none_match` when given.
    async fn registry_with(
        &self,
        kind: RequestKind,
        target: &Target,
        method: Method,
        url: &Url,
        accept: Option<&str>,
        if_none_match: Option<&str>,
    ) -> Result<Exchange, RegistryError> {
        let host = target.host.as_str();
        let scope = pull_scope(&target.repository);
        let mut auth = match self.tokens.get(host, &scope) {
            Some(t) => Auth::Bearer(t),
            None if self.is_basic_host(host) => Auth::Basic,
            None => Auth::Anonymous,
        };
        let mut answered = false;
        loop {
            let call = Call {
                kind,
                target,
                method: &method,
                url,
                accept,
                if_none_match,
            };
            let ex = self.send(&call, &auth, host).await?;
            if ex.response.status() != StatusCode::UNAUTHORIZED {
                return Ok(ex);
            }
            let unauthorized = |reason: String| RegistryError::Unauthorized {
                target: target.clone(),
                reason,
            };
            if answered {
                return Err(unauthorized(format!(
                    "registry answered 401 again after the auth challenge was answered ({})",
                    match auth {
                        Auth::Basic => "basic credentials rejected or insufficient",
                        _ => "fresh token rejected or insufficient",
                    }
                )));
            }
            answered = true;
            let header = ex
                .response
                .headers()
                .get(WWW_AUTHENTICATE)
                .ok_or_else(|| unauthorized("401 without a WWW-Authenticate challenge".into()))?
                .to_str()
                .map_err(|_| unauthorized("WWW-Authenticate header is not visible ASCII".into()))?
                .to_owned();
            drop(ex);
            let challenge = parse_challenge(&header).map_err(|reason| RegistryError::Invalid {
                target: target.clone(),
                what: "WWW-Authenticate header".into(),
                reason: reason.to_string(),
            })?;
            let used = match &auth {
                Auth::Bearer(t) => Some(t.0.clone()),
                _ => None,
            };
            auth = match challenge {
                Challenge::Bearer {
                    realm,
                    service,
                    scope: asked,
                } => {
                    // One token fetch per scope at a time: requests challenged
                    // together wait for it instead of each asking the realm.
                    let gate = self.tokens.gate(host, &scope);
                    let _serialized = gate.lock().await;
                    match self.tokens.get(host, &scope) {
                        Some(fresh) if Some(&fresh.0) != used.as_ref() => Auth::Bearer(fresh),
                        _ => {
                            let asked = asked.unwrap_or_else(|| scope.clone());
                            let (token, lifetime) = self
                                .fetch_token(target, &realm, service.as_deref(), &asked)
                                .await?;
                            self.tokens.put(host, &scope, token.clone(), lifetime);
                            Auth::Bearer(token)
                        }
                    }
                }
                Challenge::Basic => {
                    if !self.config.credentials.contains_key(host) {
                        return Err(unauthorized(format!(
                            "registry requires basic credentials and none are configured for {host}"
                        )));
                    }
                    self.basic_hosts
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(host.to_owned());
                    Auth::Basic
                }
            };
        }
    }

    fn is_basic_host(&self, host: &str) -> bool {
        self.basic_hosts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(host)
    }

    async fn fetch_token(
        &self,
        target: &Target,
        realm: &str,
        service: Option<&str>,
        scope: &str,
    ) -> Result<(Token, Duration), RegistryError> {
        let invalid = |reason: String| RegistryError::Invalid {
            target: target.clone(),
            what: "token realm".into(),
            reason,
        };
        let mut url = Url::parse(realm).map_err(|e| invalid(format!("{realm:?}: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid(format!("{realm:?}: scheme must be http or https")));
        }
        {
            let mut q = url.query_pairs_mut();
            if let Some(s) = service {
                q.append_pair("service", s);
            }
            for s in scope.split(' ').filter(|s| !s.is_empty()) {
                q.append_pair("scope", s);
            }
        }
        let host = target.host.as_str();
        let auth = if self.config.credentials.contains_key(host) {
            Auth::Basic
        } else {
            Auth::Anonymous
        };
        let call = Call {
            kind: RequestKind::Token,
            target,
            method: &Method::GET,
            url: &url,
            accept: None,
            if_none_match: None,
        };
        let ex = self.send(&call, &auth, host).await?;
        let status = ex.response.status();
        if !status.is_success() {
            return Err(RegistryError::Unauthorized {
                target: target.clone(),
                reason: format!(
                    "token endpoint {} answered HTTP {}{}",
                    strip_query(&url),
                    status.as_u16(),
                    if matches!(auth, Auth::Basic) {
                        " (check the credentials configured for this host)"
                    } else {
                        ""
                    }
                ),
            });
        }
        let body = self
            .read_body(
                ex,
                self.config.max_manifest_bytes,
                RequestKind::Token,
                target,
            )
            .await?;
        let parsed: TokenResponse =
            serde_json::from_slice(&body).map_err(|e| RegistryError::Invalid {
                target: target.clone(),
                what: "token response JSON".into(),
                reason: e.to_string(),
            })?;
        let token = parsed
            .token
            .or(parsed.access_token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| RegistryError::Invalid {
                target: target.clone(),
                what: "token response JSON".into(),
                reason: "field `token` (or `access_token`) missing or empty".into(),
            })?;
        let lifetime = match parsed.expires_in {
            Some(s) if s > 0 => Duration::from_secs(s.unsigned_abs()),
            _ => DEFAULT_TOKEN_LIFETIME,
        };
        Ok((Token(token), lifetime))
    }

    /// A GET returning status, headers and, for a 2xx, the body (refused past
    /// `limit` bytes). A body that breaks off mid-stream is retried like a
    /// failed connection. `registry_auth` selects the `/v2/` challenge flow;
    /// without it the request is anonymous (Docker Hub's REST API).
    pub(crate) async fn fetch(
        &self,
        kind: RequestKind,
        target: &Target,
        url: &Url,
        accept: Option<&str>,
        limit: usize,
        registry_auth: bool,
    ) -> Result<Fetched, RegistryError> {
        self.fetch_with(kind, target, url, accept, limit, registry_auth, None)
            .await
    }

    /// [`Self::fetch`], conditional on `if_none_match` when given (a `304`
    /// comes back as its status, without a body).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn fetch_with(
        &self,
        kind: RequestKind,
        target: &Target,
        url: &Url,
        accept: Option<&str>,
        limit: usize,
        registry_auth: bool,
        if_none_match: Option<&str>,
    ) -> Result<Fetched, RegistryError> {
        let mut attempt: u32 = 0;
        loop {
            let ex = if registry_auth {
                self.registry_with(kind, target, Method::GET, url, accept, if_none_match)
                    .await?
            } else {
                let call = Call {
                    kind,
                    target,
                    method: &Method::GET,
                    url,
                    accept,
                    if_none_match,
                };
                self.send(&call, &Auth::Anonymous, "").await?
            };
            let status = ex.response.status();
            let headers = ex.response.headers().clone();
            if !status.is_success() {
                return Ok(Fetched {
                    status,
                    headers,
                    body: Bytes::new(),
                });
            }
            match self.read_body(ex, limit, kind, target).await {
                Err(RegistryError::Transport { reason, .. })
                    if attempt < self.config.max_retries =>
                {
                    let wait = self.backoff(attempt);
                    tracing::debug!(%target, what = kind.describe(), attempt, ?wait, error = %reason, "retrying a broken body");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
                Ok(body) => {
                    return Ok(Fetched {
                        status,
                        headers,
                        body,
                    });
                }
            }
        }
    }

    /// Reads a body, refusing it as soon as it exceeds `limit` bytes.
    async fn read_body(
        &self,
        ex: Exchange,
        limit: usize,
        kind: RequestKind,
        target: &Target,
    ) -> Result<Bytes, RegistryError> {
        let Exchange {
            mut response,
            _permit,
        } = ex;
        let too_large = || RegistryError::TooLarge {
            target: target.clone(),
            what: kind.describe(),
            limit,
        };
        if response.content_length().is_some_and(|n| n > limit as u64) {
            return Err(too_large());
        }
        let mut buf = BytesMut::new();
        loop {
            let chunk = response
                .chunk()
                .await
                .map_err(|e| RegistryError::Transport {
                    target: target.clone(),
                    what: kind.describe(),
                    reason: format!("reading the body: {}", describe_reqwest(e)),
                })?;
            let Some(chunk) = chunk else { break };
            if buf.len() + chunk.len() > limit {
                return Err(too_large());
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(buf.freeze())
    }
}

/// `host[:port]` of a URL: what the breaker keys on.
fn authority(url: &Url) -> String {
    match (url.host_str(), url.port()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_owned(),
        (None, _) => url.as_str().to_owned(),
    }
}

fn unreachable(target: &Target, trip: &TrippedHost) -> RegistryError {
    RegistryError::Unreachable(Box::new(super::error::Unreachable {
        target: target.clone(),
        host: trip.host.clone(),
        reason: trip.reason.clone(),
        until: trip
            .until
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    }))
}

fn describe_reqwest_ref(err: &reqwest::Error) -> String {
    let mut out = if err.is_timeout() {
        "timed out".to_owned()
    } else {
        "connection failed".to_owned()
    };
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

fn is_retryable_status(s: StatusCode) -> bool {
    s == StatusCode::TOO_MANY_REQUESTS || s.is_server_error()
}

/// `Retry-After` as a delay: delta-seconds or an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap, now: DateTime<Utc>) -> Option<Duration> {
    let v = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = DateTime::parse_from_rfc2822(v).ok()?.with_timezone(&Utc);
    Some((at - now).to_std().unwrap_or(Duration::ZERO))
}

/// Media type from `Content-Type` without parameters.
pub(crate) fn content_type(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(CONTENT_TYPE)?.to_str().ok()?;
    let mt = v.split(';').next()?.trim();
    (!mt.is_empty()).then(|| mt.to_ascii_lowercase())
}

/// A URL for messages: without query (token endpoints carry scopes there).
pub(crate) fn strip_query(url: &Url) -> String {
    let mut u = url.clone();
    u.set_query(None);
    u.to_string()
}

/// Maps a non-success status to an error.
pub(crate) fn status_error(
    status: StatusCode,
    kind: RequestKind,
    target: &Target,
    url: &Url,
) -> RegistryError {
    match status.as_u16() {
        404 => RegistryError::NotFound {
            target: target.clone(),
            what: kind.describe(),
        },
        401 | 403 => RegistryError::Unauthorized {
            target: target.clone(),
            reason: format!("HTTP {} for {}", status.as_u16(), kind.describe()),
        },
        s => RegistryError::Status {
            target: target.clone(),
            what: kind.describe(),
            status: s,
            url: strip_query(url),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn retry_after_seconds_and_dates() {
        let now = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        assert_eq!(retry_after(&h, now), Some(Duration::from_secs(7)));
        h.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Thu, 01 Jan 2026 00:00:30 GMT"),
        );
        assert_eq!(retry_after(&h, now), Some(Duration::from_secs(30)));
        h.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Wed, 31 Dec 2025 00:00:30 GMT"),
        );
        assert_eq!(retry_after(&h, now), Some(Duration::ZERO));
        h.insert(RETRY_AFTER, HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h, now), None);
        h.insert(RETRY_AFTER, HeaderValue::from_static("-3"));
        assert_eq!(retry_after(&h, now), None);
    }

    #[test]
    fn content_type_drops_parameters() {
        let mut h = HeaderMap::new();
        h.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/vnd.oci.image.index.v1+json; charset=utf-8"),
        );
        assert_eq!(
            content_type(&h).as_deref(),
            Some("application/vnd.oci.image.index.v1+json")
        );
    }
}
