//! OCI distribution client for upstream registries (Docker Hub, NGC, GHCR,
//! Quay, local mirrors), built on `reqwest` rather than the `oci-client`
//! crate: Klaud needs per-kind request counting, mirrors for every host,
//! Docker Hub's REST API and exact control over which requests are sent,
//! which that crate does not expose.
//!
//! Design for "fewest requests", and fewest pulls: on Docker Hub every
//! manifest `GET` is a pull against a small hourly quota, while `HEAD`,
//! `tags/list`, blobs and Docker Hub's tags API are not. A current tag is
//! checked against the tag listing (or with `HEAD` when pinned); push
//! times, the digest a tag points at and its platforms come from Docker
//! Hub's tags API where it answers ([`RegistryClient::hub_tags`]), so a tag
//! too young or without the family's platform is passed over unpulled.
//! Manifests and config blobs are fetched only for candidate tags — the
//! index, then only the manifest and config of the platform a family runs
//! on — and cached by digest for the life of the [`RegistryClient`] and,
//! with a [`ContentCache`] (the daemon's store, kept between Actions runs),
//! for good: a digest is pulled once ever. A [`RegistrySession`] (one per
//! plan) lists each repository's tags and resolves each tag at most once,
//! with concurrent callers sharing one request.
//!
//! Auth is anonymous first; a 401 challenge is answered once (bearer token
//! from the realm, cached per host and scope, or basic credentials), and a
//! second 401 is an error. Reads are retried on 5xx, 429 and broken
//! connections with jittered exponential backoff that honours
//! `Retry-After`; a connection-level failure (DNS, refused, timeout) is not
//! retried but trips a per-host breaker (see [`BreakerState`]), so the rest
//! of the plan, and the next plans within the cooldown, do not wait for
//! that host again.

mod auth;
mod breaker;
mod client;
mod config;
mod content_cache;
mod error;
mod http;
mod model;
mod session;
#[cfg(feature = "testkit")]
pub mod testkit;
mod validate;

pub use auth::{Challenge, parse_challenge};
pub use breaker::{BreakerState, TrippedHost};
pub use client::{HubTags, RegistryClient};
pub use config::{BasicCredentials, HUB_API_HOST, RegistryConfig};
pub use content_cache::{ContentCache, KeptTagList, MemoryContentCache};
pub use error::{RegistryError, Target, Unreachable};
pub use http::PullQuota;
pub use model::{
    ApiBase, DOCKER_LIST, DOCKER_MANIFEST, HubTagInfo, ImageDetails, ImagePlatforms,
    MANIFEST_ACCEPT, ManifestHead, OCI_CONFIG, OCI_INDEX, OCI_MANIFEST, PlatformImage, PlatformRef,
    RequestCounts, is_index_media_type,
};
pub use session::RegistrySession;

/// What a plan learned of an image by reading it: facts of the registry's
/// content, kept apart from what the plan decided (see `crate::floor`).
#[derive(Debug, Clone)]
pub struct ObservedImage {
    /// A single manifest rather than an index.
    pub single: bool,
    /// Every platform the image lists.
    pub platforms: Vec<ObservedPlatform>,
}

/// One platform of an [`ObservedImage`].
#[derive(Debug, Clone)]
pub struct ObservedPlatform {
    /// `amd64`, `arm64`, ...
    pub architecture: String,
    /// The digest of this platform's manifest.
    pub digest: String,
    /// The config's `created`, when the platform was read.
    pub created: Option<chrono::DateTime<chrono::Utc>>,
    /// The config's labels, when the platform was read.
    pub labels: Option<std::collections::BTreeMap<String, String>>,
}
