//! The registry client: manifests, configs and tag lists, with
//! content-addressed caches shared by every clone.

use futures::future::BoxFuture;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::future::try_join_all;
use reqwest::Method;
use reqwest::header::LINK;

use crate::link::next_link;
use sha2::{Digest as _, Sha256, Sha512};
use tokio::sync::OnceCell;
use url::Url;

use super::config::RegistryConfig;
use super::content_cache::{ContentCache, KeptTagList};
use super::error::{RegistryError, Target};
use super::http::{Http, content_type, status_error};
use super::model::{
    AnyManifest, ApiBase, DOCKER_LIST, DOCKER_MANIFEST, HubTag, HubTagInfo, HubTagPage,
    ImageConfig, ImageDetails, ImagePlatforms, MANIFEST_ACCEPT, ManifestHead, OCI_INDEX,
    OCI_MANIFEST, PlatformImage, PlatformRef, RequestCounts, RequestKind, TagList,
    is_index_media_type,
};
use super::validate;

/// Docker Hub's push time of each tag of a repository.
pub type HubPushTimes = BTreeMap<String, DateTime<Utc>>;

/// What Docker Hub's tags API says of each tag of a repository.
pub type HubTags = BTreeMap<String, HubTagInfo>;

/// Values computed once per key; only successes are kept, so a failed fetch
/// is tried again by the next caller while concurrent callers share one try.
pub(crate) struct OnceMap<K, V> {
    cells: Mutex<HashMap<K, Arc<OnceCell<V>>>>,
}

impl<K, V> Default for OnceMap<K, V> {
    fn default() -> Self {
        Self {
            cells: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash + Clone, V: Clone> OnceMap<K, V> {
    pub(crate) fn cell(&self, key: &K) -> Arc<OnceCell<V>> {
        let mut map = self.cells.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(map.entry(key.clone()).or_default())
    }

    /// The value for `key` when it is computed; never starts a computation.
    pub(crate) fn peek(&self, key: &K) -> Option<V> {
        let map = self.cells.lock().unwrap_or_else(|p| p.into_inner());
        map.get(key).and_then(|cell| cell.get().cloned())
    }

    /// Whether the value for `key` is computed (and kept).
    pub(crate) fn is_ready(&self, key: &K) -> bool {
        let map = self.cells.lock().unwrap_or_else(|p| p.into_inner());
        map.get(key).is_some_and(|cell| cell.initialized())
    }
}

/// What a platform manifest and its config say, cached by manifest digest.
#[derive(Debug, Clone)]
struct PlatformData {
    os: Option<String>,
    architecture: Option<String>,
    variant: Option<String>,
    labels: BTreeMap<String, String>,
    env: BTreeMap<String, String>,
    created: Option<DateTime<Utc>>,
}

pub(crate) struct Inner {
    pub(crate) http: Http,
    details: OnceMap<String, Arc<ImageDetails>>,
    indexes: OnceMap<String, Arc<ImagePlatforms>>,
    platforms: OnceMap<String, Arc<PlatformData>>,
    /// The digest each tag resolved to last, so a tag whose index is cached
    /// is only `HEAD`ed again (see [`RegistryClient::resolve_for_read`]).
    tag_digests: Mutex<HashMap<(String, String, String), String>>,
    /// Manifests and configs kept beyond this process (the daemon's store).
    content: std::sync::RwLock<Option<Arc<dyn ContentCache>>>,
}

/// Most tags of a list kept with its validator.
const MAX_KEPT_TAGS: usize = 20_000;
/// Longest `ETag` kept (a hostile registry's header is not stored).
const MAX_ETAG_LEN: usize = 256;

/// OCI distribution client. Cheap to clone; clones share connections, token
/// cache, request counters and the by-digest caches.
#[derive(Clone)]
pub struct RegistryClient {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for RegistryClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryClient")
            .field("config", &self.inner.http.config)
            .finish_non_exhaustive()
    }
}

impl RegistryClient {
    /// Builds a client; fails when the configuration is unusable.
    pub fn new(config: RegistryConfig) -> Result<Self, RegistryError> {
        Ok(Self {
            inner: Arc::new(Inner {
                http: Http::new(config)?,
                details: OnceMap::default(),
                indexes: OnceMap::default(),
                platforms: OnceMap::default(),
                tag_digests: Mutex::default(),
                content: std::sync::RwLock::default(),
            }),
        })
    }

    /// Keeps manifests and configs in `cache` from now on (and reads them
    /// from it), for this client and its clones.
    pub fn set_content_cache(&self, cache: Arc<dyn ContentCache>) {
        *self
            .inner
            .content
            .write()
            .unwrap_or_else(|p| p.into_inner()) = Some(cache);
    }

    fn content_cache(&self) -> Option<Arc<dyn ContentCache>> {
        self.inner
            .content
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Kept bytes for `digest` that still hash to it and fit the bound.
    fn cached(&self, digest: &str) -> Option<Bytes> {
        let bytes = self.content_cache()?.get(digest)?;
        let fits = bytes.len() <= self.http().config.max_manifest_bytes;
        if fits && digest_of(&bytes, Some(digest)) == digest {
            Some(Bytes::from(bytes))
        } else {
            tracing::warn!(
                digest,
                "kept registry content does not hash to its digest; asking the registry"
            );
            None
        }
    }

    fn keep(&self, digest: &str, bytes: &[u8]) {
        if let Some(cache) = self.content_cache() {
            cache.put(digest, bytes);
        }
    }

    /// Requests sent so far by this client and its clones.
    pub fn counts(&self) -> RequestCounts {
        self.inner.http.counters.snapshot()
    }

    /// Requests sent so far by this client and its clones, by registry host
    /// as image references name it (`docker.io`, `nvcr.io`, ...).
    pub fn counts_by_host(&self) -> BTreeMap<String, RequestCounts> {
        self.inner.http.counters.snapshot_by_host()
    }

    /// Hosts whose breaker is open now (a connection-level failure within
    /// the cooldown): a value the daemon may persist and restore after a
    /// restart with [`Self::restore_breaker`].
    pub fn breaker_state(&self) -> super::BreakerState {
        self.inner.http.breaker.state(Utc::now())
    }

    /// The pull quota each registry host last stated (Docker Hub:
    /// `ratelimit-limit` / `ratelimit-remaining`), by `host[:port]`.
    pub fn pull_quotas(&self) -> std::collections::BTreeMap<String, super::PullQuota> {
        self.inner
            .http
            .quotas
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(host, (quota, _))| (host.clone(), *quota))
            .collect()
    }

    /// The pulls `host` (as image references name it: `docker.io`) has
    /// left by the quota its registry last stated, less those on their
    /// way; `None` when no quota was stated in a window still current.
    pub fn pulls_left(&self, host: &str) -> Option<u64> {
        self.inner.http.pulls_left(host)
    }

    /// Re-opens the breakers of a persisted [`Self::breaker_state`] whose
    /// cooldown has not ended.
    pub fn restore_breaker(&self, state: &super::BreakerState) {
        self.inner.http.breaker.restore(state, Utc::now());
    }

    /// The configuration in use.
    pub fn config(&self) -> &RegistryConfig {
        &self.inner.http.config
    }

    fn http(&self) -> &Http {
        &self.inner.http
    }

    fn url(&self, host: &str, rest: &str) -> Result<Url, RegistryError> {
        let base = self.http().config.base_url(host)?;
        let mut url = base.clone();
        url.set_path(&format!(
            "{}/v2/{}",
            base.path().trim_end_matches('/'),
            rest
        ));
        Ok(url)
    }

    /// Resolves a tag or digest with `HEAD` (a GET and a body hash only when
    /// the registry omits `Docker-Content-Digest` or the media type).
    pub fn head_manifest<'f>(
        &'f self,
        host: &'f str,
        repository: &'f str,
        reference: &'f str,
    ) -> BoxFuture<'f, Result<ManifestHead, RegistryError>> {
        Box::pin(async move {
            let target = Target::new(host, repository, Some(reference));
            validate::host(&target)?;
            validate::repository(&target)?;
            validate::reference(&target)?;
            let url = self.url(host, &format!("{repository}/manifests/{reference}"))?;
            let ex = self
                .http()
                .registry(
                    RequestKind::ManifestHead,
                    &target,
                    Method::HEAD,
                    &url,
                    Some(MANIFEST_ACCEPT),
                )
                .await?;
            let status = ex.response.status();
            if !status.is_success() {
                return Err(status_error(
                    status,
                    RequestKind::ManifestHead,
                    &target,
                    &url,
                ));
            }
            let headers = ex.response.headers();
            let digest = content_digest(headers, &target)?;
            let media_type = content_type(headers).filter(|m| is_manifest_media_type(m));
            drop(ex);
            if let (Some(digest), Some(media_type)) = (&digest, &media_type) {
                if reference.contains(':') && digest != reference {
                    return Err(RegistryError::DigestMismatch {
                        target,
                        expected: reference.to_owned(),
                        actual: digest.clone(),
                    });
                }
                return Ok(ManifestHead {
                    digest: digest.clone(),
                    media_type: media_type.clone(),
                });
            }
            // Some registries and proxies drop these headers on HEAD: the digest
            // is then the hash of the exact bytes a GET returns.
            let (body, header_type) = self.get_manifest_raw(&target, &url).await?;
            let computed = digest_of(
                &body,
                digest
                    .as_deref()
                    .or(reference.contains(':').then_some(reference)),
            );
            if let Some(expected) = digest
                .as_deref()
                .or(reference.contains(':').then_some(reference))
                && expected != computed
            {
                return Err(RegistryError::DigestMismatch {
                    target,
                    expected: expected.to_owned(),
                    actual: computed,
                });
            }
            let parsed: AnyManifest = parse_json(&body, &target, "manifest JSON")?;
            let media_type = media_type.or(header_type).or_else(|| infer_media_type(&parsed)).ok_or_else(|| {
            RegistryError::Invalid {
                target: target.clone(),
                what: "manifest".into(),
                reason: "no media type in headers or `mediaType` field, and neither `manifests` nor `config` present"
                    .into(),
            }
        })?;
            Ok(ManifestHead {
                digest: computed,
                media_type,
            })
        })
    }

    async fn get_manifest_raw(
        &self,
        target: &Target,
        url: &Url,
    ) -> Result<(Bytes, Option<String>), RegistryError> {
        let kind = RequestKind::ManifestGet;
        let limit = self.http().config.max_manifest_bytes;
        let got = self
            .http()
            .fetch(kind, target, url, Some(MANIFEST_ACCEPT), limit, true)
            .await?;
        if !got.status.is_success() {
            return Err(status_error(got.status, kind, target, url));
        }
        let ct = content_type(&got.headers).filter(|m| is_manifest_media_type(m));
        Ok((got.body, ct))
    }

    /// GETs a manifest by digest and checks that the bytes hash to it.
    async fn get_manifest(
        &self,
        target: &Target,
        digest: &str,
    ) -> Result<(Bytes, Option<String>), RegistryError> {
        if let Some(body) = self.cached(digest) {
            return Ok((body, None));
        }
        let url = self.url(
            &target.host,
            &format!("{}/manifests/{digest}", target.repository),
        )?;
        let (body, ct) = self.get_manifest_raw(target, &url).await?;
        verify_digest(target, digest, &body)?;
        self.keep(digest, &body);
        Ok((body, ct))
    }

    async fn get_blob(&self, target: &Target, digest: &str) -> Result<Bytes, RegistryError> {
        if let Some(body) = self.cached(digest) {
            return Ok(body);
        }
        let url = self.url(
            &target.host,
            &format!("{}/blobs/{digest}", target.repository),
        )?;
        let kind = RequestKind::BlobGet;
        let limit = self.http().config.max_manifest_bytes;
        let got = self
            .http()
            .fetch(kind, target, &url, None, limit, true)
            .await?;
        if !got.status.is_success() {
            return Err(status_error(got.status, kind, target, &url));
        }
        verify_digest(target, digest, &got.body)?;
        self.keep(digest, &got.body);
        Ok(got.body)
    }

    /// Platforms, labels and creation times of every platform of an image by
    /// digest (one manifest and one config read per platform). Cached by
    /// digest for the life of the client: the content cannot change. A
    /// caller that needs one platform should use [`Self::image_platforms`]
    /// and [`Self::platform_image`], which read only that platform.
    pub fn image_details<'f>(
        &'f self,
        host: &'f str,
        repository: &'f str,
        digest: &'f str,
    ) -> BoxFuture<'f, Result<Arc<ImageDetails>, RegistryError>> {
        Box::pin(async move {
            let target = checked_target(host, repository, digest, "digest argument")?;
            let cell = self.inner.details.cell(&digest.to_owned());
            cell.get_or_try_init(|| async {
                let image = self.image_platforms(host, repository, digest).await?;
                let platforms = try_join_all(
                    image
                        .platforms
                        .iter()
                        .map(|p| self.platform_image_at(&target, p)),
                )
                .await?;
                Ok(Arc::new(ImageDetails {
                    digest: image.digest.clone(),
                    media_type: image.media_type.clone(),
                    platforms: platforms.into_iter().map(Arc::unwrap_or_clone).collect(),
                }))
            })
            .await
            .cloned()
        })
    }

    /// Which platforms an image by digest is built for, from its index (one
    /// manifest read) — or, for a single-platform manifest, from the manifest
    /// and its config, which also makes that platform's
    /// [`Self::platform_image`] free. Cached by digest for the life of the
    /// client.
    pub fn image_platforms<'f>(
        &'f self,
        host: &'f str,
        repository: &'f str,
        digest: &'f str,
    ) -> BoxFuture<'f, Result<Arc<ImagePlatforms>, RegistryError>> {
        Box::pin(async move {
            let target = checked_target(host, repository, digest, "digest argument")?;
            let cell = self.inner.indexes.cell(&digest.to_owned());
            cell.get_or_try_init(|| self.fetch_platforms(&target, digest))
                .await
                .cloned()
        })
    }

    /// Labels and creation time of one platform an image lists: its manifest
    /// and config, read once per manifest digest for the life of the client.
    pub fn platform_image<'f>(
        &'f self,
        host: &'f str,
        repository: &'f str,
        platform: &'f PlatformRef,
    ) -> BoxFuture<'f, Result<Arc<PlatformImage>, RegistryError>> {
        Box::pin(async move {
            let target = checked_target(host, repository, &platform.digest, "platform digest")?;
            self.platform_image_at(&target, platform).await
        })
    }

    async fn platform_image_at(
        &self,
        target: &Target,
        platform: &PlatformRef,
    ) -> Result<Arc<PlatformImage>, RegistryError> {
        let t = Target::new(&target.host, &target.repository, Some(&platform.digest));
        let data = self.platform_data(&t, &platform.digest, None).await?;
        Ok(Arc::new(PlatformImage {
            os: platform.os.clone(),
            architecture: platform.architecture.clone(),
            variant: platform.variant.clone().or_else(|| data.variant.clone()),
            digest: platform.digest.clone(),
            labels: data.labels.clone(),
            env: data.env.clone(),
            created: data.created,
        }))
    }

    /// Resolves a tag whose index the caller reads next. When this client
    /// has not resolved the tag to an index it still holds, one `GET` of the
    /// manifest by tag replaces `HEAD` plus `GET` by digest: the digest is
    /// the hash of the bytes (checked against `Docker-Content-Digest`) and
    /// the index goes into the by-digest cache, so
    /// [`Self::image_platforms`] is free. On Docker Hub both ways cost one
    /// pull. A tag seen before with its index cached is only `HEAD`ed, which
    /// is not a pull.
    pub fn resolve_for_read<'f>(
        &'f self,
        host: &'f str,
        repository: &'f str,
        reference: &'f str,
    ) -> BoxFuture<'f, Result<ManifestHead, RegistryError>> {
        Box::pin(async move {
            let key = (host.to_owned(), repository.to_owned(), reference.to_owned());
            let known = reference.contains(':')
                || {
                    let seen = self
                        .inner
                        .tag_digests
                        .lock()
                        .unwrap_or_else(|p| p.into_inner());
                    seen.get(&key)
                        .is_some_and(|digest| self.inner.indexes.is_ready(digest))
                }
                || self.content_cache().is_some_and(|cache| {
                    cache
                        .tag_digest(host, repository, reference)
                        .is_some_and(|digest| cache.get(&digest).is_some())
                });
            if known {
                let head = self.head_manifest(host, repository, reference).await?;
                self.remember_tag(key, &head.digest);
                return Ok(head);
            }
            let target = Target::new(host, repository, Some(reference));
            validate::host(&target)?;
            validate::repository(&target)?;
            validate::reference(&target)?;
            let url = self.url(host, &format!("{repository}/manifests/{reference}"))?;
            let kind = RequestKind::ManifestGet;
            let limit = self.http().config.max_manifest_bytes;
            let got = self
                .http()
                .fetch(kind, &target, &url, Some(MANIFEST_ACCEPT), limit, true)
                .await?;
            if !got.status.is_success() {
                return Err(status_error(got.status, kind, &target, &url));
            }
            let header_digest = content_digest(&got.headers, &target)?;
            let digest = digest_of(&got.body, header_digest.as_deref());
            if let Some(expected) = header_digest
                && expected != digest
            {
                return Err(RegistryError::DigestMismatch {
                    target,
                    expected,
                    actual: digest,
                });
            }
            let header_type = content_type(&got.headers).filter(|m| is_manifest_media_type(m));
            self.keep(&digest, &got.body);
            let at = Target::new(host, repository, Some(&digest));
            let cell = self.inner.indexes.cell(&digest);
            let body = got.body;
            let platforms = cell
                .get_or_try_init(|| self.platforms_from(&at, &digest, &body, header_type))
                .await?;
            let head = ManifestHead {
                digest: digest.clone(),
                media_type: platforms.media_type.clone(),
            };
            self.remember_tag(key, &digest);
            Ok(head)
        })
    }

    /// What this client already holds of an image by digest, without a
    /// request: its platforms and, for each platform read, its creation
    /// time and labels.
    pub(crate) fn observed(&self, digest: &str) -> Option<super::ObservedImage> {
        let index = self.inner.indexes.peek(&digest.to_owned())?;
        let platforms = index
            .platforms
            .iter()
            .map(|p| {
                let data = self.inner.platforms.peek(&p.digest);
                super::ObservedPlatform {
                    architecture: p.architecture.clone(),
                    digest: p.digest.clone(),
                    created: data.as_ref().and_then(|d| d.created),
                    labels: data.map(|d| d.labels.clone()),
                }
            })
            .collect();
        Some(super::ObservedImage {
            single: !is_index_media_type(&index.media_type),
            platforms,
        })
    }

    fn remember_tag(&self, key: (String, String, String), digest: &str) {
        if key.2.contains(':') {
            return;
        }
        if let Some(cache) = self.content_cache() {
            cache.put_tag_digest(&key.0, &key.1, &key.2, digest);
        }
        let mut seen = self
            .inner
            .tag_digests
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        seen.insert(key, digest.to_owned());
    }

    async fn fetch_platforms(
        &self,
        target: &Target,
        digest: &str,
    ) -> Result<Arc<ImagePlatforms>, RegistryError> {
        let (body, header_type) = self.get_manifest(target, digest).await?;
        self.platforms_from(target, digest, &body, header_type)
            .await
    }

    async fn platforms_from(
        &self,
        target: &Target,
        digest: &str,
        body: &[u8],
        header_type: Option<String>,
    ) -> Result<Arc<ImagePlatforms>, RegistryError> {
        let parsed: AnyManifest = parse_json(body, target, "manifest JSON")?;
        let media_type = header_type
            .or_else(|| {
                parsed
                    .media_type
                    .clone()
                    .filter(|m| is_manifest_media_type(m))
            })
            .or_else(|| infer_media_type(&parsed))
            .ok_or_else(|| RegistryError::Invalid {
                target: target.clone(),
                what: "manifest".into(),
                reason: "cannot tell index from manifest: no media type, `manifests` or `config`"
                    .into(),
            })?;
        let platforms = if is_index_media_type(&media_type) {
            let entries = parsed.manifests.ok_or_else(|| RegistryError::Invalid {
                target: target.clone(),
                what: "index JSON".into(),
                reason: "field `manifests` missing".into(),
            })?;
            entries
                .into_iter()
                .filter(|d| {
                    d.media_type
                        .as_deref()
                        .is_none_or(|m| !is_index_media_type(m))
                })
                .filter_map(|d| d.platform.map(|p| (d.digest, p)))
                // Build attestations are listed as unknown/unknown: not images.
                .filter(|(_, p)| p.os != "unknown" && p.architecture != "unknown")
                // Every entry is checked although only one may be read: an
                // index with a malformed entry is not trusted for the others.
                .map(|(d, p)| {
                    validate::digest_value(&d).map_err(|reason| RegistryError::Invalid {
                        target: target.clone(),
                        what: "index entry `digest`".into(),
                        reason,
                    })?;
                    Ok(PlatformRef {
                        os: p.os,
                        architecture: p.architecture,
                        variant: p.variant,
                        digest: d,
                    })
                })
                .collect::<Result<Vec<_>, RegistryError>>()?
        } else {
            // A single-platform image names its platform only in its config.
            let data = self.platform_data(target, digest, Some(parsed)).await?;
            let missing = |f: &str| RegistryError::Invalid {
                target: target.clone(),
                what: "image config JSON".into(),
                reason: format!("field `{f}` missing in a single-platform image"),
            };
            vec![PlatformRef {
                os: data.os.clone().ok_or_else(|| missing("os"))?,
                architecture: data
                    .architecture
                    .clone()
                    .ok_or_else(|| missing("architecture"))?,
                variant: data.variant.clone(),
                digest: digest.to_owned(),
            }]
        };
        Ok(Arc::new(ImagePlatforms {
            digest: digest.to_owned(),
            media_type,
            platforms,
        }))
    }

    async fn platform_data(
        &self,
        target: &Target,
        digest: &str,
        already: Option<AnyManifest>,
    ) -> Result<Arc<PlatformData>, RegistryError> {
        let cell = self.inner.platforms.cell(&digest.to_owned());
        cell.get_or_try_init(|| async move {
            let manifest = match already {
                Some(m) => m,
                None => {
                    let (body, _) = self.get_manifest(target, digest).await?;
                    parse_json(&body, target, "platform manifest JSON")?
                }
            };
            let config = manifest.config.ok_or_else(|| RegistryError::Invalid {
                target: target.clone(),
                what: "platform manifest JSON".into(),
                reason: "field `config` missing".into(),
            })?;
            validate::digest_value(&config.digest).map_err(|reason| RegistryError::Invalid {
                target: target.clone(),
                what: "manifest `config.digest`".into(),
                reason,
            })?;
            let blob = self.get_blob(target, &config.digest).await?;
            let cfg: ImageConfig = parse_json(&blob, target, "image config JSON")?;
            let created = match cfg.created.as_deref() {
                Some(s) => match DateTime::parse_from_rfc3339(s) {
                    Ok(t) => Some(t.with_timezone(&Utc)),
                    Err(e) => {
                        tracing::warn!(%target, created = s, error = %e, "image config `created` is not RFC 3339; ignored");
                        None
                    }
                },
                None => None,
            };
            Ok(Arc::new(PlatformData {
                os: cfg.os,
                architecture: cfg.architecture,
                variant: cfg.variant,
                labels: cfg
                    .config
                    .as_ref()
                    .and_then(|c| c.labels.clone())
                    .unwrap_or_default(),
                env: super::model::env_map(cfg.config.and_then(|c| c.env)),
                created,
            }))
        })
        .await
        .cloned()
    }

    /// Whether `host` (or its mirror) is a registry that answers: `GET /v2/`
    /// must give 200, or 401 with a `WWW-Authenticate` challenge Klaud can
    /// answer. Anonymous and read-only; retried like every read.
    pub fn check_api_base<'f>(
        &'f self,
        host: &'f str,
    ) -> BoxFuture<'f, Result<ApiBase, RegistryError>> {
        Box::pin(async move {
            let target = Target::new(host, "", None);
            validate::host(&target)?;
            let base = self.http().config.base_url(host)?;
            let mut url = base.clone();
            url.set_path(&format!("{}/v2/", base.path().trim_end_matches('/')));
            let kind = RequestKind::ApiBase;
            let (status, headers) = self.http().probe(kind, &target, &url).await?;
            if status.is_success() {
                return Ok(ApiBase::Open);
            }
            if status == reqwest::StatusCode::UNAUTHORIZED {
                let header = headers
                    .get(reqwest::header::WWW_AUTHENTICATE)
                    .ok_or_else(|| RegistryError::Unauthorized {
                        target: target.clone(),
                        reason: "HTTP 401 for /v2/ without a WWW-Authenticate challenge".into(),
                    })?
                    .to_str()
                    .map_err(|_| RegistryError::Invalid {
                        target: target.clone(),
                        what: "WWW-Authenticate header".into(),
                        reason: "not visible ASCII".into(),
                    })?;
                let challenge = super::auth::parse_challenge(header).map_err(|reason| {
                    RegistryError::Invalid {
                        target: target.clone(),
                        what: "WWW-Authenticate header".into(),
                        reason: reason.to_string(),
                    }
                })?;
                return Ok(ApiBase::Challenge(challenge));
            }
            Err(RegistryError::Status {
                target,
                what: kind.describe(),
                status: status.as_u16(),
                url: super::http::strip_query(&url),
            })
        })
    }

    /// All tags of a repository, following `Link` pages up to the page cap.
    /// The order is the registry's; nothing assumes it is sorted.
    pub fn list_tags<'f>(
        &'f self,
        host: &'f str,
        repository: &'f str,
    ) -> BoxFuture<'f, Result<Vec<String>, RegistryError>> {
        Box::pin(async move {
            let target = Target::new(host, repository, None);
            validate::host(&target)?;
            validate::repository(&target)?;
            let first = self.url(host, &format!("{repository}/tags/list"))?;
            let mut url = first.clone();
            if let Some(n) = self.http().config.tag_page_size {
                url.query_pairs_mut().append_pair("n", &n.to_string());
            }
            let mut seen = HashSet::new();
            let mut tags = Vec::new();
            // A list kept with its validator makes an unchanged one a 304.
            // Only a list that fits one page is kept: a later page's
            // validator says nothing of the first.
            let cache = self.content_cache();
            let kept = cache
                .as_ref()
                .and_then(|c| c.tag_list(host, repository))
                .filter(|k| k.tags.len() <= MAX_KEPT_TAGS);
            for page_number in 0..self.http().config.max_tag_pages {
                let kind = RequestKind::TagsList;
                let limit = self.http().config.max_tag_list_bytes;
                let condition = kept
                    .as_ref()
                    .filter(|_| page_number == 0)
                    .map(|k| k.etag.as_str());
                let got = self
                    .http()
                    .fetch_with(kind, &target, &url, None, limit, true, condition)
                    .await?;
                if got.status == reqwest::StatusCode::NOT_MODIFIED
                    && let Some(kept) = &kept
                    && page_number == 0
                {
                    return Ok(kept.tags.clone());
                }
                if !got.status.is_success() {
                    return Err(status_error(got.status, kind, &target, &url));
                }
                let next = got
                    .headers
                    .get_all(LINK)
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .find_map(next_link)
                    .map(|s| s.to_owned());
                let page: TagList = parse_json(&got.body, &target, "tag list JSON")?;
                for t in page.tags.unwrap_or_default() {
                    if seen.insert(t.clone()) {
                        tags.push(t);
                    }
                }
                match next {
                    None => {
                        if page_number == 0
                            && tags.len() <= MAX_KEPT_TAGS
                            && let Some(cache) = &cache
                            && let Some(etag) = got
                                .headers
                                .get(reqwest::header::ETAG)
                                .and_then(|v| v.to_str().ok())
                                .filter(|v| !v.is_empty() && v.len() <= MAX_ETAG_LEN)
                        {
                            cache.put_tag_list(
                                host,
                                repository,
                                &KeptTagList {
                                    etag: etag.to_owned(),
                                    tags: tags.clone(),
                                },
                            );
                        }
                        return Ok(tags);
                    }
                    Some(link) => {
                        url = same_origin_join(
                            &first,
                            &url,
                            &link,
                            &target,
                            "tag list `Link` header",
                        )?
                    }
                }
            }
            Err(RegistryError::TooManyPages {
                target,
                limit: self.http().config.max_tag_pages,
            })
        })
    }

    /// Push times from Docker Hub's REST API for a repository (`namespace/name`)
    /// of `host`, newest first, up to the page cap. `None` when the host has
    /// no such API ([`RegistryConfig::hub_api_for`]: Docker Hub, or
    /// configured), or the API does not know the repository or refuses
    /// anonymous access.
    pub fn hub_push_times<'f>(
        &'f self,
        host: &'f str,
        repository: &'f str,
    ) -> BoxFuture<'f, Result<Option<HubPushTimes>, RegistryError>> {
        Box::pin(async move {
            Ok(self.hub_tags(host, repository).await?.map(|tags| {
                tags.into_iter()
                    .filter_map(|(tag, info)| info.pushed.map(|p| (tag, p)))
                    .collect()
            }))
        })
    }

    /// What Docker Hub's REST API says of each tag of a repository
    /// (`namespace/name`) of `host`: push time, digest and platforms, newest
    /// first up to the page cap. None of it is a pull. `None` as for
    /// [`Self::hub_push_times`].
    pub fn hub_tags<'f>(
        &'f self,
        host: &'f str,
        repository: &'f str,
    ) -> BoxFuture<'f, Result<Option<HubTags>, RegistryError>> {
        Box::pin(async move {
            let target = Target::new(host, repository, None);
            validate::repository(&target)?;
            let Some(base) = self.http().config.hub_api_for(host) else {
                return Ok(None);
            };
            let Some((ns, name)) = repository.split_once('/').filter(|(_, n)| !n.contains('/'))
            else {
                return Ok(None);
            };
            let mut url = base.clone();
            url.set_path(&format!(
                "{}/v2/namespaces/{ns}/repositories/{name}/tags",
                base.path().trim_end_matches('/')
            ));
            // Newest first, so a capped listing still covers the candidates.
            url.query_pairs_mut()
                .append_pair("page_size", "100")
                .append_pair("ordering", "last_updated");
            let first = url.clone();
            let mut out = BTreeMap::new();
            for _page in 0..self.http().config.max_tag_pages {
                let kind = RequestKind::HubApi;
                let limit = self.http().config.max_tag_list_bytes;
                let accept = Some("application/json");
                let got = self
                    .http()
                    .fetch(kind, &target, &url, accept, limit, false)
                    .await?;
                let status = got.status;
                if matches!(status.as_u16(), 401 | 403 | 404) {
                    tracing::info!(%target, status = status.as_u16(), "Docker Hub tags API unavailable for this repository");
                    return Ok(None);
                }
                if !status.is_success() {
                    return Err(status_error(status, RequestKind::HubApi, &target, &url));
                }
                let page: HubTagPage = parse_json(&got.body, &target, "Docker Hub tags page JSON")?;
                for tag in page.results {
                    let info = hub_tag_info(&target, &tag)?;
                    out.insert(tag.name, info);
                }
                match page.next.filter(|n| !n.is_empty()) {
                    None => return Ok(Some(out)),
                    Some(next) => {
                        url = same_origin_join(
                            &first,
                            &url,
                            &next,
                            &target,
                            "Docker Hub `next` link",
                        )?
                    }
                }
            }
            tracing::info!(%target, pages = self.http().config.max_tag_pages, "Docker Hub tag history capped; older tags have no push time");
            Ok(Some(out))
        })
    }
}

/// One tag of a Docker Hub tags page. A malformed push time fails the
/// listing (it orders the track); a malformed digest only drops that digest
/// (the registry is then asked, as without the API).
fn hub_tag_info(target: &Target, tag: &HubTag) -> Result<HubTagInfo, RegistryError> {
    let pushed = match &tag.tag_last_pushed {
        None => None,
        Some(pushed) => match DateTime::parse_from_rfc3339(pushed) {
            Ok(t) => Some(t.with_timezone(&Utc)),
            Err(e) => {
                return Err(RegistryError::Invalid {
                    target: target.clone(),
                    what: format!("Docker Hub tag {:?} field `tag_last_pushed`", tag.name),
                    reason: format!("{pushed:?}: {e}"),
                });
            }
        },
    };
    let well_formed = |d: &Option<String>| {
        d.as_deref()
            .filter(|d| validate::digest_value(d).is_ok())
            .map(str::to_owned)
    };
    let platforms = tag
        .images
        .iter()
        .flatten()
        .filter_map(|image| {
            Some(PlatformRef {
                os: image.os.clone().filter(|o| !o.is_empty())?,
                architecture: image.architecture.clone().filter(|a| !a.is_empty())?,
                variant: image.variant.clone().filter(|v| !v.is_empty()),
                digest: well_formed(&image.digest)?,
            })
        })
        .filter(|p| p.os != "unknown" && p.architecture != "unknown")
        .collect();
    Ok(HubTagInfo {
        pushed,
        digest: well_formed(&tag.digest),
        platforms,
    })
}

/// The target of a by-digest lookup, with host, repository and digest
/// checked before anything is sent.
fn checked_target(
    host: &str,
    repository: &str,
    digest: &str,
    what: &str,
) -> Result<Target, RegistryError> {
    let target = Target::new(host, repository, Some(digest));
    validate::host(&target)?;
    validate::repository(&target)?;
    validate::digest_value(digest).map_err(|reason| RegistryError::Invalid {
        target: target.clone(),
        what: what.to_owned(),
        reason,
    })?;
    Ok(target)
}

fn parse_json<T: serde::de::DeserializeOwned>(
    body: &[u8],
    target: &Target,
    what: &str,
) -> Result<T, RegistryError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        RegistryError::Invalid {
            target: target.clone(),
            what: if path == "." {
                what.to_owned()
            } else {
                format!("{what} at `{path}`")
            },
            reason: e.into_inner().to_string(),
        }
    })
}

fn is_manifest_media_type(m: &str) -> bool {
    matches!(m, OCI_INDEX | DOCKER_LIST | OCI_MANIFEST | DOCKER_MANIFEST)
}

fn infer_media_type(m: &AnyManifest) -> Option<String> {
    if let Some(mt) = m
        .media_type
        .as_deref()
        .filter(|t| is_manifest_media_type(t))
    {
        return Some(mt.to_owned());
    }
    if m.manifests.is_some() {
        Some(OCI_INDEX.to_owned())
    } else if m.config.is_some() {
        Some(OCI_MANIFEST.to_owned())
    } else {
        None
    }
}

/// Digest of `body` in the algorithm of `like` (sha256 unless it says sha512).
fn digest_of(body: &[u8], like: Option<&str>) -> String {
    if like.is_some_and(|d| d.starts_with("sha512:")) {
        format!("sha512:{}", hex::encode(Sha512::digest(body)))
    } else {
        format!("sha256:{}", hex::encode(Sha256::digest(body)))
    }
}

fn verify_digest(target: &Target, expected: &str, body: &[u8]) -> Result<(), RegistryError> {
    let actual = digest_of(body, Some(expected));
    if actual == expected {
        Ok(())
    } else {
        Err(RegistryError::DigestMismatch {
            target: target.clone(),
            expected: expected.to_owned(),
            actual,
        })
    }
}

/// Resolves a pagination link against the current URL and refuses one that
/// leaves the origin we started from (we would send our token there).
fn same_origin_join(
    first: &Url,
    current: &Url,
    link: &str,
    target: &Target,
    what: &str,
) -> Result<Url, RegistryError> {
    let next = current.join(link).map_err(|e| RegistryError::Invalid {
        target: target.clone(),
        what: what.to_owned(),
        reason: format!("{link:?}: {e}"),
    })?;
    if next.origin() != first.origin() {
        return Err(RegistryError::Invalid {
            target: target.clone(),
            what: what.to_owned(),
            reason: format!(
                "next page {next} leaves the origin {}",
                first.origin().ascii_serialization()
            ),
        });
    }
    Ok(next)
}

/// The `Docker-Content-Digest` header of a manifest response, validated;
/// `None` when absent or empty (the caller then hashes the body).
fn content_digest(
    headers: &reqwest::header::HeaderMap,
    target: &Target,
) -> Result<Option<String>, RegistryError> {
    let Some(value) = headers.get("docker-content-digest") else {
        return Ok(None);
    };
    let digest = value.to_str().map(str::trim).unwrap_or_default();
    if digest.is_empty() {
        return Ok(None);
    }
    validate::digest_value(digest).map_err(|reason| RegistryError::Invalid {
        target: target.clone(),
        what: "Docker-Content-Digest header".into(),
        reason,
    })?;
    Ok(Some(digest.to_owned()))
}

#[cfg(test)]
mod tests;
