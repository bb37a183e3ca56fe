//! OCI registry simulator for the sandbox: the distribution read API
//! (`/v2/`, manifests `HEAD`/`GET` by tag or digest, blobs, `tags/list` with
//! `n`/`last` and `Link`), a bearer-token challenge with its own `/token`
//! endpoint (on by default, like every public registry), Docker Hub's tags REST API shape
//! (`/v2/namespaces/{ns}/repositories/{repo}/tags` with `tag_last_pushed`),
//! tag deletion (prune) and fault injection.
//!
//! State lives in one [`RegistrySim`]; every response is derived from it, so
//! tests mutate the simulator (add or delete a tag, inject a fault) and the
//! planner's unchanged `RegistryClient` sees the effect. Seed format:
//! [`RegistrySeed`].

mod routes;
mod seed;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

pub use routes::router;
pub use seed::{PlatformSeed, RegistrySeed, RepositorySeed, TagSeed};

/// Errors of the simulator's seed and mutation API.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The seed file could not be read.
    #[error("reading registry seed {path}: {reason}")]
    Read {
        /// Seed path.
        path: String,
        /// I/O error.
        reason: String,
    },
    /// The seed is not valid JSON of the documented shape.
    #[error("registry seed is invalid: {0}")]
    Seed(String),
}

/// Which endpoint a request hit, for fault injection and counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SimRoute {
    /// `GET /v2/`.
    Base,
    /// `HEAD /v2/<repo>/manifests/<ref>`.
    ManifestHead,
    /// `GET /v2/<repo>/manifests/<ref>`.
    ManifestGet,
    /// `DELETE /v2/<repo>/manifests/<ref>`.
    ManifestDelete,
    /// `GET|HEAD /v2/<repo>/blobs/<digest>`.
    BlobGet,
    /// `GET /v2/<repo>/tags/list`.
    TagsList,
    /// `GET /token`.
    Token,
    /// `GET /v2/namespaces/<ns>/repositories/<repo>/tags`.
    HubApi,
}

/// An injected fault: the next `count` requests to `route` (optionally only
/// for `repository`) get `status`, with `Retry-After` when given.
#[derive(Debug, Clone)]
pub struct Fault {
    /// Endpoint to break.
    pub route: SimRoute,
    /// Only this repository (`None`: any).
    pub repository: Option<String>,
    /// How many requests fail.
    pub count: u32,
    /// Status to answer (429, 500, 503, ...).
    pub status: u16,
    /// `Retry-After` header value, verbatim (`"1"` or an HTTP date).
    pub retry_after: Option<String>,
}

/// Token-auth settings: every `/v2/<repo>/...` request needs a bearer token
/// from `/token` covering `repository:<repo>:pull`, as on Docker Hub, nvcr.io
/// and ghcr.io (which challenge even anonymous pulls). On by default
/// ([`SimAuth::anonymous`]); [`RegistrySim::open`] turns it off.
#[derive(Clone)]
pub struct SimAuth {
    /// `service` in the challenge.
    pub service: String,
    /// Basic credentials `/token` requires, if any.
    pub basic: Option<(String, String)>,
    /// Lifetime announced in `expires_in`.
    pub token_lifetime: Duration,
}

/// `service` the simulator names in its challenges by default.
pub const DEFAULT_SERVICE: &str = "sandbox-registry";

impl SimAuth {
    /// Anonymous pull tokens, like Docker Hub's for public images: `/token`
    /// needs no credentials but checks the service and scope.
    pub fn anonymous() -> Self {
        Self {
            service: DEFAULT_SERVICE.to_owned(),
            basic: None,
            token_lifetime: Duration::from_secs(300),
        }
    }
}

impl std::fmt::Debug for SimAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimAuth")
            .field("service", &self.service)
            .field(
                "basic",
                &self.basic.as_ref().map(|(u, _)| (u, "<redacted>")),
            )
            .field("token_lifetime", &self.token_lifetime)
            .finish()
    }
}

#[derive(Debug, Clone)]
struct TagState {
    digest: String,
    media_type: &'static str,
    pushed: Option<DateTime<Utc>>,
}

#[derive(Debug, Default)]
struct RepoState {
    tags: BTreeMap<String, TagState>,
    manifests: HashMap<String, (&'static str, Vec<u8>)>,
    blobs: HashMap<String, Vec<u8>>,
}

#[derive(Debug, Default)]
struct State {
    repos: BTreeMap<String, RepoState>,
    faults: Vec<Fault>,
    tokens: HashMap<String, (Vec<String>, Instant)>,
    counts: BTreeMap<SimRoute, u64>,
    token_seq: u64,
}

/// The simulator: seeded state plus auth and fault settings.
#[derive(Debug)]
pub struct RegistrySim {
    state: Mutex<State>,
    auth: Option<SimAuth>,
    default_page_size: Option<usize>,
}

impl RegistrySim {
    /// Builds the simulator from a parsed seed; fails on the first tag that
    /// cannot be generated, naming it.
    pub fn from_seed(seed: RegistrySeed) -> Result<Self, SimError> {
        let sim = Self {
            state: Mutex::new(State::default()),
            auth: Some(SimAuth::anonymous()),
            default_page_size: None,
        };
        for (repo, r) in seed.repositories {
            if !valid_repository(&repo) {
                return Err(SimError::Seed(format!(
                    "{repo:?} is not a valid repository path"
                )));
            }
            sim.lock().repos.entry(repo.clone()).or_default();
            for (tag, t) in r.tags {
                sim.add_tag(&repo, &tag, &t)?;
            }
        }
        Ok(sim)
    }

    /// Parses a seed from JSON text.
    pub fn from_seed_json(json: &str) -> Result<Self, SimError> {
        let seed: RegistrySeed =
            serde_json::from_str(json).map_err(|e| SimError::Seed(e.to_string()))?;
        Self::from_seed(seed)
    }

    /// Reads and parses a seed file.
    pub fn from_seed_file(path: &Path) -> Result<Self, SimError> {
        let text = std::fs::read_to_string(path).map_err(|e| SimError::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Self::from_seed_json(&text)
    }

    /// Serves without any authentication (no real public registry does;
    /// for tests that are about something else).
    pub fn open(mut self) -> Self {
        self.auth = None;
        self
    }

    /// Whether requests need a bearer token.
    pub fn requires_token(&self) -> bool {
        self.auth.is_some()
    }

    /// Requires bearer tokens from the simulator's `/token` endpoint with
    /// these settings (e.g. basic credentials for a private registry).
    pub fn with_token_auth(mut self, auth: SimAuth) -> Self {
        self.auth = Some(auth);
        self
    }

    /// Paginates `tags/list` at this size even when the client sends no `n`
    /// (as some registries do).
    pub fn with_default_page_size(mut self, n: usize) -> Self {
        self.default_page_size = Some(n.max(1));
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds or replaces `repo:tag`; returns the digest the tag now resolves to.
    pub fn add_tag(&self, repo: &str, tag: &str, seed: &TagSeed) -> Result<String, SimError> {
        if !valid_repository(repo) {
            return Err(SimError::Seed(format!(
                "{repo:?} is not a valid repository path"
            )));
        }
        if !valid_tag(tag) {
            return Err(SimError::Seed(format!(
                "{repo}: {tag:?} is not a valid tag"
            )));
        }
        let generated = seed::generate(repo, tag, seed).map_err(SimError::Seed)?;
        let mut state = self.lock();
        let r = state.repos.entry(repo.to_owned()).or_default();
        for (d, mt, bytes) in generated.manifests {
            r.manifests.insert(d, (mt, bytes));
        }
        for (d, bytes) in generated.blobs {
            r.blobs.insert(d, bytes);
        }
        let (digest, media_type) = generated.top;
        r.tags.insert(
            tag.to_owned(),
            TagState {
                digest: digest.clone(),
                media_type,
                pushed: seed.pushed,
            },
        );
        Ok(digest)
    }

    /// Removes a tag (its manifests stay reachable by digest, as on real
    /// registries after an untag). Returns whether the tag existed.
    pub fn delete_tag(&self, repo: &str, tag: &str) -> bool {
        let mut state = self.lock();
        state
            .repos
            .get_mut(repo)
            .is_some_and(|r| r.tags.remove(tag).is_some())
    }

    /// Queues a fault.
    pub fn inject_fault(&self, fault: Fault) {
        self.lock().faults.push(fault);
    }

    /// The digest `repo:tag` resolves to now.
    pub fn digest_of(&self, repo: &str, tag: &str) -> Option<String> {
        self.lock()
            .repos
            .get(repo)?
            .tags
            .get(tag)
            .map(|t| t.digest.clone())
    }

    /// Requests served per route so far (faulted ones included).
    pub fn request_counts(&self) -> BTreeMap<SimRoute, u64> {
        self.lock().counts.clone()
    }

    /// Requests served on one route so far.
    pub fn requests(&self, route: SimRoute) -> u64 {
        self.lock().counts.get(&route).copied().unwrap_or(0)
    }
}

pub(crate) fn valid_repository(r: &str) -> bool {
    !r.is_empty()
        && r.len() <= 255
        && r.split('/').all(|c| {
            let b = c.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter().all(|&x| {
                    x.is_ascii_lowercase() || x.is_ascii_digit() || matches!(x, b'.' | b'_' | b'-')
                })
        })
}

pub(crate) fn valid_tag(t: &str) -> bool {
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter()
            .all(|&x| x.is_ascii_alphanumeric() || matches!(x, b'_' | b'.' | b'-'))
}
