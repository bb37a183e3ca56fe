//! Errors of the registry client.
//!
//! Every error names what was asked (host, repository, reference) and why it
//! failed. Errors are `Clone` because a [`super::RegistrySession`] shares one
//! result between every caller of the same key. They never carry credentials:
//! tokens and passwords only travel in headers, and URLs shown here are the
//! ones Klaud built, which hold neither.

use std::fmt;

/// What a failed request was about: `host/repository[:tag|@digest]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Normalized registry host as written in image references (`docker.io`).
    pub host: String,
    /// Repository path within the registry (`library/ubuntu`).
    pub repository: String,
    /// Tag or digest, when the request was about one.
    pub reference: Option<String>,
}

impl Target {
    pub(crate) fn new(host: &str, repository: &str, reference: Option<&str>) -> Self {
        Self {
            host: host.to_owned(),
            repository: repository.to_owned(),
            reference: reference.map(str::to_owned),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A request about the registry itself (`/v2/`) names no repository.
        if self.repository.is_empty() {
            return f.write_str(&self.host);
        }
        write!(f, "{}/{}", self.host, self.repository)?;
        match &self.reference {
            Some(r) if r.contains(':') => write!(f, "@{r}"),
            Some(r) => write!(f, ":{r}"),
            None => Ok(()),
        }
    }
}

/// Failure of a registry operation.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RegistryError {
    /// The client configuration is unusable (bad mirror URL, zero limits, ...).
    #[error("invalid registry configuration: {0}")]
    Config(String),
    /// The registry answered 404: the tag, digest or repository does not exist
    /// (for a current tag this means it was pruned).
    #[error("{target}: not found (HTTP 404 for {what})")]
    NotFound {
        /// What was asked.
        target: Target,
        /// Which kind of object was missing (manifest, blob, tag list).
        what: &'static str,
    },
    /// The registry refused our credentials or a token obtained just before.
    #[error("{target}: authentication failed: {reason}")]
    Unauthorized {
        /// What was asked.
        target: Target,
        /// Why (challenge missing, token endpoint status, second 401, ...).
        reason: String,
    },
    /// An unexpected HTTP status after retries were exhausted or not allowed.
    #[error("{target}: HTTP {status} for {what} at {url}")]
    Status {
        /// What was asked.
        target: Target,
        /// Which kind of request failed.
        what: &'static str,
        /// Final HTTP status code.
        status: u16,
        /// Request URL (never carries credentials).
        url: String,
    },
    /// Connection, timeout or body read failure after retries.
    #[error("{target}: request for {what} failed: {reason}")]
    Transport {
        /// What was asked.
        target: Target,
        /// Which kind of request failed.
        what: &'static str,
        /// Underlying cause.
        reason: String,
    },
    /// The host failed at the connection level (DNS, refused, timeout), now
    /// or earlier within its breaker cooldown: not asked again until then.
    #[error(transparent)]
    Unreachable(Box<Unreachable>),
    /// The response body exceeded the configured limit.
    #[error("{target}: {what} response exceeds the limit of {limit} bytes")]
    TooLarge {
        /// What was asked.
        target: Target,
        /// Which kind of response.
        what: &'static str,
        /// Configured limit in bytes.
        limit: usize,
    },
    /// The response could not be understood (bad JSON, missing field, bad header).
    #[error("{target}: invalid {what}: {reason}")]
    Invalid {
        /// What was asked.
        target: Target,
        /// Which document or header, and which field in it.
        what: String,
        /// Parser message.
        reason: String,
    },
    /// Content fetched by digest hashed to something else.
    #[error("{target}: digest mismatch: asked for {expected}, registry content is {actual}")]
    DigestMismatch {
        /// What was asked.
        target: Target,
        /// The digest that was requested.
        expected: String,
        /// The digest the registry reported or the received bytes hash to.
        actual: String,
    },
    /// Tag listing did not end within the configured page cap.
    #[error("{target}: tag list still continues after {limit} pages (raise max_tag_pages)")]
    TooManyPages {
        /// What was asked.
        target: Target,
        /// Configured page cap.
        limit: usize,
    },
}

impl RegistryError {
    /// True when the registry said the object does not exist (HTTP 404).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound { .. })
    }

    /// True when a host's breaker is open: the host failed at the
    /// connection level and is not asked until its cooldown ends.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Self::Unreachable(_))
    }
}

/// A host whose breaker is open (see [`RegistryError::Unreachable`]).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{target}: {host} is unreachable ({reason}); not asked again before {until}")]
pub struct Unreachable {
    /// What was asked.
    pub target: Target,
    /// The network host that failed (after mirrors).
    pub host: String,
    /// The connection failure.
    pub reason: String,
    /// End of the cooldown (RFC 3339, UTC).
    pub until: String,
}

/// Formats an error with its source chain, without the URL reqwest would add
/// (our own messages already say what was requested).
pub(crate) fn describe_reqwest(err: reqwest::Error) -> String {
    let err = err.without_url();
    let mut out = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
