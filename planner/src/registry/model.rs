//! What the registry client returns, and the registry JSON it reads.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// OCI image index (multi-platform).
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// Docker manifest list (multi-platform).
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// OCI image manifest (one platform).
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// Docker image manifest v2 schema 2 (one platform).
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// OCI image config blob.
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";

/// `Accept` header for manifest requests: a registry that is not offered all
/// four answers 404 or 400 for some images.
pub const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";

/// True for media types that list platform manifests.
pub fn is_index_media_type(media_type: &str) -> bool {
    media_type == OCI_INDEX || media_type == DOCKER_LIST
}

/// Result of resolving a tag: the digest to pin and its media type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ManifestHead {
    /// `sha256:<hex>`; for a multi-arch tag, the index digest.
    pub digest: String,
    /// Media type of the manifest the tag points at.
    pub media_type: String,
}

/// An image by digest and the platforms it is built for, as its index (or,
/// for a single-platform image, its manifest and config) lists them. No
/// platform's labels or creation time are here: those are read per platform
/// with [`RegistrySession::platform_image`](crate::registry::RegistrySession::platform_image),
/// so "not fetched" cannot pass for "no labels".
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImagePlatforms {
    /// The digest asked for (index or single manifest).
    pub digest: String,
    /// Its media type.
    pub media_type: String,
    /// Runnable platforms (attestation entries such as `unknown/unknown` and
    /// nested indexes are left out); a single-platform manifest yields
    /// exactly one.
    pub platforms: Vec<PlatformRef>,
}

impl ImagePlatforms {
    /// The platform for `os`/`architecture`, if the image has one.
    pub fn platform(&self, os: &str, architecture: &str) -> Option<&PlatformRef> {
        self.platforms
            .iter()
            .find(|p| p.os == os && p.architecture == architecture)
    }

    /// `os/architecture` of every platform, in index order, for messages.
    pub fn names(&self) -> Vec<String> {
        self.platforms
            .iter()
            .map(|p| format!("{}/{}", p.os, p.architecture))
            .collect()
    }
}

/// Where one platform of an image is: the index entry, not its contents.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct PlatformRef {
    /// `linux`.
    pub os: String,
    /// `amd64`, `arm64`, ...
    pub architecture: String,
    /// `v8`, ... when the index (or a single-platform config) gives one.
    pub variant: Option<String>,
    /// Digest of this platform's manifest.
    pub digest: String,
}

/// An image by digest with its platforms, labels and creation times.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImageDetails {
    /// The digest asked for (index or single manifest).
    pub digest: String,
    /// Its media type.
    pub media_type: String,
    /// Runnable platforms (attestation entries such as `unknown/unknown` are
    /// left out); a single-platform manifest yields exactly one.
    pub platforms: Vec<PlatformImage>,
}

impl ImageDetails {
    /// The platform for `os`/`architecture`, if the image has one.
    pub fn platform(&self, os: &str, architecture: &str) -> Option<&PlatformImage> {
        self.platforms
            .iter()
            .find(|p| p.os == os && p.architecture == architecture)
    }
}

/// One platform of an image, with what its manifest and config say.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlatformImage {
    /// `linux`.
    pub os: String,
    /// `amd64`, `arm64`, ...
    pub architecture: String,
    /// `v8`, ... when given.
    pub variant: Option<String>,
    /// Digest of this platform's manifest.
    pub digest: String,
    /// `config.Labels` of the image config.
    pub labels: BTreeMap<String, String>,
    /// `config.Env` of the image config, `NAME=value` split at the first
    /// `=` (entries without one are dropped; a later duplicate wins, as in
    /// the container's environment).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The config's `created` time, when present and valid RFC 3339.
    pub created: Option<DateTime<Utc>>,
}

/// How a registry's API base (`GET /v2/`) answered an anonymous request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiBase {
    /// HTTP 200: the registry serves anonymous reads.
    Open,
    /// HTTP 401 with a challenge Klaud knows how to answer.
    Challenge(super::auth::Challenge),
}

/// Requests sent, by kind (every attempt counts, retries included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestCounts {
    /// `HEAD /v2/<repo>/manifests/<ref>`.
    pub manifest_head: u64,
    /// `GET /v2/<repo>/manifests/<ref>`.
    pub manifest_get: u64,
    /// `GET /v2/<repo>/blobs/<digest>`.
    pub blob_get: u64,
    /// `GET /v2/<repo>/tags/list` (each page).
    pub tags_list: u64,
    /// Token endpoint requests.
    pub token: u64,
    /// Docker Hub REST API requests (each page).
    pub hub_api: u64,
    /// Anything else.
    pub other: u64,
}

impl RequestCounts {
    pub(crate) fn add(&mut self, kind: RequestKind) {
        let c = match kind {
            RequestKind::ManifestHead => &mut self.manifest_head,
            RequestKind::ManifestGet => &mut self.manifest_get,
            RequestKind::BlobGet => &mut self.blob_get,
            RequestKind::TagsList => &mut self.tags_list,
            RequestKind::Token => &mut self.token,
            RequestKind::HubApi => &mut self.hub_api,
            RequestKind::ApiBase => &mut self.other,
        };
        *c += 1;
    }

    /// What was sent between two snapshots (`self` the later one).
    pub fn since(&self, before: &RequestCounts) -> RequestCounts {
        RequestCounts {
            manifest_head: self.manifest_head.saturating_sub(before.manifest_head),
            manifest_get: self.manifest_get.saturating_sub(before.manifest_get),
            blob_get: self.blob_get.saturating_sub(before.blob_get),
            tags_list: self.tags_list.saturating_sub(before.tags_list),
            token: self.token.saturating_sub(before.token),
            hub_api: self.hub_api.saturating_sub(before.hub_api),
            other: self.other.saturating_sub(before.other),
        }
    }

    /// Sum of all kinds.
    pub fn total(&self) -> u64 {
        self.manifest_head
            + self.manifest_get
            + self.blob_get
            + self.tags_list
            + self.token
            + self.hub_api
            + self.other
    }
}

/// Kind of request, for counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestKind {
    ManifestHead,
    ManifestGet,
    BlobGet,
    TagsList,
    Token,
    HubApi,
    /// `GET /v2/` (is the registry there at all?), counted as `other`.
    ApiBase,
}

impl RequestKind {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Self::ManifestHead | Self::ManifestGet => "manifest",
            Self::BlobGet => "config blob",
            Self::TagsList => "tag list",
            Self::Token => "token",
            Self::HubApi => "Docker Hub tags API",
            Self::ApiBase => "registry API base (/v2/)",
        }
    }
}

// --- registry JSON (lenient: unknown fields ignored, only what Klaud needs) ---

#[derive(Debug, Deserialize)]
pub(crate) struct Descriptor {
    #[serde(rename = "mediaType")]
    pub(crate) media_type: Option<String>,
    pub(crate) digest: String,
    pub(crate) platform: Option<Platform>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Platform {
    pub(crate) os: String,
    pub(crate) architecture: String,
    pub(crate) variant: Option<String>,
}

/// Index, manifest list or single manifest: which fields are present tells
/// them apart when the media type is missing.
#[derive(Debug, Deserialize)]
pub(crate) struct AnyManifest {
    #[serde(rename = "mediaType")]
    pub(crate) media_type: Option<String>,
    pub(crate) manifests: Option<Vec<Descriptor>>,
    pub(crate) config: Option<Descriptor>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ImageConfig {
    pub(crate) created: Option<String>,
    pub(crate) os: Option<String>,
    pub(crate) architecture: Option<String>,
    pub(crate) variant: Option<String>,
    pub(crate) config: Option<ImageConfigInner>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ImageConfigInner {
    #[serde(rename = "Labels")]
    pub(crate) labels: Option<BTreeMap<String, String>>,
    #[serde(rename = "Env")]
    pub(crate) env: Option<Vec<String>>,
}

/// `config.Env` as a map (see [`PlatformImage::env`]).
pub(crate) fn env_map(env: Option<Vec<String>>) -> BTreeMap<String, String> {
    env.unwrap_or_default()
        .into_iter()
        .filter_map(|entry| {
            let (name, value) = entry.split_once('=')?;
            Some((name.to_owned(), value.to_owned()))
        })
        .collect()
}

#[derive(Debug, Deserialize)]
pub(crate) struct TagList {
    pub(crate) tags: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct HubTagPage {
    pub(crate) next: Option<String>,
    pub(crate) results: Vec<HubTag>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct HubTag {
    pub(crate) name: String,
    pub(crate) tag_last_pushed: Option<String>,
    /// The digest the tag points at (an index or a single manifest).
    #[serde(default)]
    pub(crate) digest: Option<String>,
    /// One entry per platform manifest (attestations included).
    #[serde(default)]
    pub(crate) images: Option<Vec<HubImage>>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct HubImage {
    pub(crate) architecture: Option<String>,
    pub(crate) os: Option<String>,
    pub(crate) variant: Option<String>,
    pub(crate) digest: Option<String>,
}

/// What Docker Hub's tags API says of one tag, read without a pull: when it
/// was pushed, the digest it points at and the platforms that digest has.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HubTagInfo {
    /// `tag_last_pushed`.
    pub pushed: Option<DateTime<Utc>>,
    /// `digest`, when stated and well formed.
    pub digest: Option<String>,
    /// `images`: each platform with its manifest digest (entries without an
    /// os, architecture or well-formed digest, and `unknown` attestation
    /// entries, left out).
    pub platforms: Vec<PlatformRef>,
}

impl HubTagInfo {
    /// Whether the tag is built for `os`/`architecture`; `None` when the
    /// API listed no platforms (then only the manifest can tell).
    pub fn has_platform(&self, os: &str, architecture: &str) -> Option<bool> {
        (!self.platforms.is_empty()).then(|| {
            self.platforms
                .iter()
                .any(|p| p.os == os && p.architecture == architecture)
        })
    }
}
