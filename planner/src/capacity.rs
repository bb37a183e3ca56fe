//! The cluster-capacity gate (see configs/README.md#shared-clusters-capacity): the shape of the incumbent's
//! private cluster-status API, which clusters a family's runners use
//! (`configs/runners.yaml`), and whether one of them has room.
//!
//! The answer accepted is exactly what the incumbent reads:
//!
//! ```json
//! {"kind": "inferencex.status.clusters", "generatedAt": "2026-12-01T10:00:00Z",
//!  "data": {"available": true, "clusters": [
//!    {"clusterId": "h100-dgxc-slurm", "stale": false, "status": "operational",
//!     "observedAt": "…", "receivedAt": "…",
//!     "summary": {"totalNodes": 20, "allocatedNodes": 10, "mixedNodes": 2,
//!                 "idleNodes": 6, "downNodes": 1, "otherNodes": 1}}]}}
//! ```
//!
//! Unknown fields are ignored (schema versions are not checked, so an
//! additive change never turns capacity off); a missing or malformed field
//! refuses the whole answer with an error naming the field.

use futures::future::BoxFuture;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::Value;

use crate::repo::{Family, Repository};

/// The `kind` the answer must carry.
pub const KIND: &str = "inferencex.status.clusters";
/// The incumbent's path on the dashboard origin.
pub const DEFAULT_PATH: &str = "/api/status/clusters";
/// The environment variable the incumbent reads the key from.
pub const DEFAULT_KEY_ENV: &str = "KLAUD_DASHBOARD_API_KEY";
/// How old an answer may be.
pub const MAX_AGE: TimeDelta = TimeDelta::seconds(120);
/// How far the API's clock may be ahead of Klaud's.
pub const SKEW: TimeDelta = TimeDelta::seconds(5);
/// Largest cluster-status answer read, decoded (a real one lists a few
/// dozen clusters).
const MAX_ANSWER: usize = 4 * 1024 * 1024;

/// Why no usable reading was had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapacityError {
    /// The API could not be reached or answered with an HTTP error.
    #[error("capacity API unreachable: {0}")]
    Unreachable(String),
    /// The answer is not in the accepted shape; names the field.
    #[error("capacity API answer invalid: {0}")]
    Invalid(String),
    /// The configuration cannot work (no key, bad origin).
    #[error("capacity configuration: {0}")]
    Config(String),
    /// No cluster is known for a family's runner label.
    #[error(
        "runner label {runner:?} has no nodes in configs/runners.yaml and no [capacity.clusters] entry names it or key {key:?}"
    )]
    UnknownRunner {
        /// The family's runner label.
        runner: String,
        /// The family's key.
        key: String,
    },
}

/// Node counts of one cluster; they add up to `total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeSummary {
    /// `totalNodes` (> 0).
    pub total: u64,
    /// `allocatedNodes`.
    pub allocated: u64,
    /// `mixedNodes`.
    pub mixed: u64,
    /// `idleNodes`.
    pub idle: u64,
    /// `downNodes`.
    pub down: u64,
    /// `otherNodes`.
    pub other: u64,
}

/// One cluster of the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterStatus {
    /// `clusterId`.
    pub id: String,
    /// `stale`.
    pub stale: bool,
    /// `status`.
    pub status: String,
    /// `summary`.
    pub summary: NodeSummary,
}

impl ClusterStatus {
    /// `None` when the cluster may take work; otherwise why not. Not stale,
    /// `operational` or `degraded`, an idle node, and below 80 % busy:
    /// `(allocated + mixed) × 5 < total × 4`.
    pub fn ineligible(&self) -> Option<String> {
        let s = &self.summary;
        if self.stale {
            return Some(format!("cluster {} is stale", self.id));
        }
        if self.status != "operational" && self.status != "degraded" {
            return Some(format!("cluster {} is {}", self.id, self.status));
        }
        if s.idle == 0 {
            return Some(format!("cluster {} has no idle node", self.id));
        }
        let busy = s.allocated.saturating_add(s.mixed);
        if busy.saturating_mul(5) >= s.total.saturating_mul(4) {
            return Some(format!(
                "cluster {} is {}/{} nodes busy (80% or more)",
                self.id, busy, s.total
            ));
        }
        None
    }
}

/// A validated answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacityReport {
    /// `generatedAt`.
    pub generated_at: DateTime<Utc>,
    /// `data.clusters`.
    pub clusters: Vec<ClusterStatus>,
}

fn invalid(field: &str, what: &str) -> CapacityError {
    CapacityError::Invalid(format!("{field}: {what}"))
}

fn field<'v>(obj: &'v Value, path: &str, name: &str) -> Result<&'v Value, CapacityError> {
    obj.get(name)
        .ok_or_else(|| invalid(&format!("{path}{name}"), "missing"))
}

fn time(obj: &Value, path: &str, name: &str) -> Result<DateTime<Utc>, CapacityError> {
    let v = field(obj, path, name)?;
    let s = v
        .as_str()
        .ok_or_else(|| invalid(&format!("{path}{name}"), "expected an RFC 3339 string"))?;
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| {
            invalid(
                &format!("{path}{name}"),
                &format!("{s:?} is not RFC 3339 ({e})"),
            )
        })
}

fn count(obj: &Value, path: &str, name: &str) -> Result<u64, CapacityError> {
    field(obj, path, name)?
        .as_u64()
        .ok_or_else(|| invalid(&format!("{path}{name}"), "expected a non-negative integer"))
}

/// Validates an answer read at `now` (see configs/README.md#shared-clusters-capacity).
pub fn parse_report(body: &[u8], now: DateTime<Utc>) -> Result<CapacityReport, CapacityError> {
    let root: Value = serde_json::from_slice(body)
        .map_err(|e| CapacityError::Invalid(format!("not JSON: {e}")))?;
    if !root.is_object() {
        return Err(invalid("(answer)", "expected a JSON object"));
    }
    match field(&root, "", "kind")?.as_str() {
        Some(KIND) => {}
        Some(other) => return Err(invalid("kind", &format!("{other:?}, expected {KIND:?}"))),
        None => return Err(invalid("kind", "expected a string")),
    }
    let generated = time(&root, "", "generatedAt")?;
    if generated > now + SKEW {
        return Err(invalid(
            "generatedAt",
            &format!("{generated} is in the future (now {now}, {SKEW} skew allowed)"),
        ));
    }
    if now - generated > MAX_AGE + SKEW {
        return Err(invalid(
            "generatedAt",
            &format!(
                "{generated} is {}s old (at most {}s)",
                (now - generated).num_seconds(),
                MAX_AGE.num_seconds()
            ),
        ));
    }
    let data = field(&root, "", "data")?;
    if !data.is_object() {
        return Err(invalid("data", "expected an object"));
    }
    match field(data, "data.", "available")?.as_bool() {
        Some(true) => {}
        Some(false) => return Err(invalid("data.available", "false (no reading available)")),
        None => return Err(invalid("data.available", "expected a boolean")),
    }
    let list = field(data, "data.", "clusters")?
        .as_array()
        .ok_or_else(|| invalid("data.clusters", "expected a list"))?;
    let mut seen = BTreeSet::new();
    let mut clusters = Vec::with_capacity(list.len());
    for (i, c) in list.iter().enumerate() {
        let path = format!("data.clusters[{i}].");
        if !c.is_object() {
            return Err(invalid(
                &format!("data.clusters[{i}]"),
                "expected an object",
            ));
        }
        let id = field(c, &path, "clusterId")?
            .as_str()
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| invalid(&format!("{path}clusterId"), "expected a non-empty string"))?
            .to_owned();
        if !seen.insert(id.clone()) {
            return Err(invalid(
                &format!("{path}clusterId"),
                &format!("{id:?} appears twice"),
            ));
        }
        let path = format!("data.clusters[{i}] ({id}).");
        let stale = field(c, &path, "stale")?
            .as_bool()
            .ok_or_else(|| invalid(&format!("{path}stale"), "expected a boolean"))?;
        let status = field(c, &path, "status")?
            .as_str()
            .ok_or_else(|| invalid(&format!("{path}status"), "expected a string"))?
            .to_owned();
        let observed = time(c, &path, "observedAt")?;
        let received = time(c, &path, "receivedAt")?;
        if observed > received + SKEW {
            return Err(invalid(
                &format!("{path}observedAt"),
                &format!("{observed} is after receivedAt {received}"),
            ));
        }
        if received > generated + SKEW {
            return Err(invalid(
                &format!("{path}receivedAt"),
                &format!("{received} is after generatedAt {generated}"),
            ));
        }
        let summary = field(c, &path, "summary")?;
        let sp = format!("{path}summary.");
        if !summary.is_object() {
            return Err(invalid(&format!("{path}summary"), "expected an object"));
        }
        let s = NodeSummary {
            total: count(summary, &sp, "totalNodes")?,
            allocated: count(summary, &sp, "allocatedNodes")?,
            mixed: count(summary, &sp, "mixedNodes")?,
            idle: count(summary, &sp, "idleNodes")?,
            down: count(summary, &sp, "downNodes")?,
            other: count(summary, &sp, "otherNodes")?,
        };
        if s.total == 0 {
            return Err(invalid(
                &format!("{sp}totalNodes"),
                "must be greater than 0",
            ));
        }
        let sum = [s.allocated, s.mixed, s.idle, s.down, s.other]
            .iter()
            .try_fold(0u64, |a, b| a.checked_add(*b));
        if sum != Some(s.total) {
            return Err(invalid(
                &format!("{sp}totalNodes"),
                &format!(
                    "{} but allocated+mixed+idle+down+other = {}",
                    s.total,
                    sum.map_or_else(|| "overflow".into(), |n| n.to_string())
                ),
            ));
        }
        clusters.push(ClusterStatus {
            id,
            stale,
            status,
            summary: s,
        });
    }
    Ok(CapacityReport {
        generated_at: generated,
        clusters,
    })
}

/// Whether a family may use its clusters now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// One of its clusters has room.
    Eligible {
        /// The first eligible cluster.
        cluster: String,
    },
    /// None has (or no usable reading): why, for the receipt.
    Deferred(String),
}

/// The cluster ids of `report` that belong to one of `wanted`: the id
/// equals a wanted name or starts with it plus `-` (the incumbent's match).
pub fn matching<'r>(report: &'r CapacityReport, wanted: &[String]) -> Vec<&'r ClusterStatus> {
    report
        .clusters
        .iter()
        .filter(|c| {
            wanted.iter().any(|w| {
                c.id == *w
                    || c.id
                        .strip_prefix(w.as_str())
                        .is_some_and(|rest| rest.starts_with('-'))
            })
        })
        .collect()
}

/// The verdict for a family using `wanted` clusters: eligible when at least
/// one of them is (a runner takes whichever node is free).
pub fn decide(report: &CapacityReport, wanted: &[String]) -> Verdict {
    let found = matching(report, wanted);
    if found.is_empty() {
        return Verdict::Deferred(format!(
            "the capacity API reports none of the clusters {}",
            wanted.join(", ")
        ));
    }
    let mut why = Vec::new();
    for c in found {
        match c.ineligible() {
            None => {
                return Verdict::Eligible {
                    cluster: c.id.clone(),
                };
            }
            Some(w) => why.push(w),
        }
    }
    Verdict::Deferred(why.join("; "))
}

/// `h100-dgxc-slurm_07` → `h100-dgxc-slurm`: a runner node's cluster is its
/// name without the `_NN` suffix (our reading of the naming, see configs/README.md#shared-clusters-capacity;
/// configurable through [`CapacityGate::overrides`]).
pub fn cluster_of_node(node: &str) -> &str {
    match node.rsplit_once('_') {
        Some((cluster, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => cluster,
        _ => node,
    }
}

/// Runner label → the clusters of its nodes, from `configs/runners.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunnerClusters {
    labels: BTreeMap<String, Vec<String>>,
}

impl RunnerClusters {
    /// Reads `labels:` of the runners file (`path` names it in errors).
    pub fn parse(path: &str, text: &str) -> Result<Self, CapacityError> {
        let doc =
            crate::yaml::parse(text).map_err(|e| CapacityError::Invalid(format!("{path}: {e}")))?;
        let mut labels = BTreeMap::new();
        let Some(doc) = doc else {
            return Ok(Self { labels });
        };
        let Some(map) = doc.get("labels") else {
            return Ok(Self { labels });
        };
        let map = map.as_mapping().ok_or_else(|| {
            CapacityError::Invalid(format!("{path}:{}: labels: expected a mapping", map.line))
        })?;
        for (label, nodes) in map {
            let Some(label) = label.as_scalar() else {
                continue;
            };
            let list = nodes.as_sequence().ok_or_else(|| {
                CapacityError::Invalid(format!(
                    "{path}:{}: labels.{label}: expected a list of node names",
                    nodes.line
                ))
            })?;
            let mut clusters = BTreeSet::new();
            for n in list {
                let name = n.as_scalar().ok_or_else(|| {
                    CapacityError::Invalid(format!(
                        "{path}:{}: labels.{label}: expected a node name",
                        n.line
                    ))
                })?;
                clusters.insert(cluster_of_node(name).to_owned());
            }
            labels.insert(label.to_owned(), clusters.into_iter().collect());
        }
        Ok(Self { labels })
    }

    /// The runners file of a repository as read at open (empty when absent).
    pub fn read(repository: &Repository) -> Result<Self, CapacityError> {
        match repository.runners_file() {
            Some(text) => Self::parse(
                &format!("{}configs/runners.yaml", repository.prefix()),
                text,
            ),
            None => Ok(Self::default()),
        }
    }

    /// Every cluster of every label, sorted and once each.
    pub fn all(&self) -> Vec<String> {
        let set: BTreeSet<&String> = self.labels.values().flatten().collect();
        set.into_iter().cloned().collect()
    }

    /// The clusters of `label`'s nodes, sorted (`None`: unknown label).
    pub fn clusters(&self, label: &str) -> Option<&[String]> {
        self.labels.get(label).map(Vec::as_slice)
    }
}

/// Reads the cluster-status API.
#[async_trait]
pub trait CapacitySource: Send + Sync {
    /// A fresh, validated reading at `now`.
    async fn read(&self, now: DateTime<Utc>) -> Result<CapacityReport, CapacityError>;
    /// Where it reads from (no secret), for `doctor` and messages.
    fn describe(&self) -> String;
}

/// The API over HTTP: a Bearer key, a fixed origin, no redirects.
pub struct HttpCapacity {
    client: reqwest::Client,
    url: url::Url,
    key: String,
}

impl std::fmt::Debug for HttpCapacity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key never appears in debug output.
        f.debug_struct("HttpCapacity")
            .field("url", &self.url.as_str())
            .finish_non_exhaustive()
    }
}

impl HttpCapacity {
    /// A client for `origin` (scheme, host and port only) and `path`.
    pub fn new(
        origin: &str,
        path: &str,
        key: String,
        timeout: Duration,
    ) -> Result<Self, CapacityError> {
        let base = url::Url::parse(origin)
            .map_err(|e| CapacityError::Config(format!("origin {origin:?}: {e}")))?;
        if !matches!(base.scheme(), "http" | "https")
            || base.host().is_none()
            || base.path() != "/"
            || base.query().is_some()
            || !base.username().is_empty()
            || base.password().is_some()
        {
            return Err(CapacityError::Config(format!(
                "origin {origin:?}: expected scheme://host[:port] with no path, query or user"
            )));
        }
        if !path.starts_with('/') {
            return Err(CapacityError::Config(format!(
                "path {path:?}: must start with /"
            )));
        }
        let url = base
            .join(path)
            .map_err(|e| CapacityError::Config(format!("path {path:?}: {e}")))?;
        if url.origin() != base.origin() {
            return Err(CapacityError::Config(format!(
                "path {path:?} leaves the origin {origin}"
            )));
        }
        if key.trim().is_empty() {
            return Err(CapacityError::Config("the API key is empty".into()));
        }
        let client = klaud_http::http_client_builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .build()
            .map_err(|e| CapacityError::Config(e.to_string()))?;
        Ok(Self { client, url, key })
    }
}

#[async_trait]
impl CapacitySource for HttpCapacity {
    async fn read(&self, now: DateTime<Utc>) -> Result<CapacityReport, CapacityError> {
        let answer = self
            .client
            .get(self.url.clone())
            .bearer_auth(&self.key)
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            // reqwest's error text names the URL, never the headers.
            .map_err(|e| CapacityError::Unreachable(format!("{}: {e}", self.url)))?;
        let status = answer.status();
        if status.is_redirection() {
            return Err(CapacityError::Unreachable(format!(
                "{}: answered {status} (redirects are not followed)",
                self.url
            )));
        }
        if !status.is_success() {
            return Err(CapacityError::Unreachable(format!(
                "{}: answered {status}",
                self.url
            )));
        }
        // Chunk by chunk, decoded (reqwest inflates gzip): a compressed
        // answer cannot grow past the cap in memory.
        let mut answer = answer;
        let mut body = Vec::new();
        while let Some(chunk) = answer
            .chunk()
            .await
            .map_err(|e| CapacityError::Unreachable(format!("{}: {e}", self.url)))?
        {
            if body.len() + chunk.len() > MAX_ANSWER {
                return Err(CapacityError::Unreachable(format!(
                    "{}: the answer is larger than {MAX_ANSWER} bytes (decoded)",
                    self.url
                )));
            }
            body.extend_from_slice(&chunk);
        }
        parse_report(&body, now)
    }

    fn describe(&self) -> String {
        self.url.to_string()
    }
}

/// A source that cannot read (the key is missing, the origin is wrong):
/// every check defers with its reason, so a broken configuration never
/// dispatches blind.
#[derive(Debug, Clone)]
pub struct Unusable(pub String);

#[async_trait]
impl CapacitySource for Unusable {
    async fn read(&self, _now: DateTime<Utc>) -> Result<CapacityReport, CapacityError> {
        Err(CapacityError::Config(self.0.clone()))
    }

    fn describe(&self) -> String {
        format!("(unusable: {})", self.0)
    }
}

/// The gate: a source plus which clusters each family uses.
pub struct CapacityGate {
    /// Where readings come from.
    pub source: Box<dyn CapacitySource>,
    /// Runner label or config key → cluster names, replacing what
    /// `configs/runners.yaml` says (a key wins over its runner label).
    pub overrides: BTreeMap<String, Vec<String>>,
}

impl std::fmt::Debug for CapacityGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapacityGate")
            .field("source", &self.source.describe())
            .field("overrides", &self.overrides)
            .finish()
    }
}

impl CapacityGate {
    /// The clusters `family` runs on: the override for its key or runner
    /// label, else the clusters of its runner label's nodes.
    pub fn clusters_of(
        &self,
        repository: &Repository,
        family: &Family,
    ) -> Result<Vec<String>, CapacityError> {
        if let Some(c) = self
            .overrides
            .get(&family.key)
            .or_else(|| self.overrides.get(&family.entry.runner))
        {
            return Ok(c.clone());
        }
        let runners = RunnerClusters::read(repository)?;
        match runners.clusters(&family.entry.runner) {
            Some(c) if !c.is_empty() => Ok(c.to_vec()),
            _ => Err(CapacityError::UnknownRunner {
                runner: family.entry.runner.clone(),
                key: family.key.clone(),
            }),
        }
    }

    /// Reads the API once and decides for `family`. Anything but a usable
    /// reading defers, saying why: never dispatch blind.
    pub fn check<'f>(
        &'f self,
        repository: &'f Repository,
        family: &'f Family,
        now: DateTime<Utc>,
    ) -> BoxFuture<'f, Verdict> {
        Box::pin(async move { self.check_all(repository, &[family], now).await })
    }

    /// Reads the API once and decides for families bumped together (a
    /// family group smokes and sweeps every member): each member needs an
    /// eligible cluster of its own runner, so one busy member defers them
    /// all, naming it. The verdict's cluster is the first member's.
    pub fn check_all<'f>(
        &'f self,
        repository: &'f Repository,
        families: &'f [&'f Family],
        now: DateTime<Utc>,
    ) -> BoxFuture<'f, Verdict> {
        Box::pin(async move {
            let group = families.len() > 1;
            let name = |f: &Family, why: String| {
                if group {
                    format!("group member {}: {why}", f.key)
                } else {
                    why
                }
            };
            let mut wanted = Vec::new();
            for family in families {
                match self.clusters_of(repository, family) {
                    Ok(w) => wanted.push((*family, w)),
                    Err(why) => return Verdict::Deferred(name(family, why.to_string())),
                }
            }
            let report = match self.source.read(now).await {
                Ok(report) => report,
                Err(e) => return Verdict::Deferred(e.to_string()),
            };
            let mut first = None;
            for (family, w) in &wanted {
                match decide(&report, w) {
                    Verdict::Eligible { cluster } => {
                        first.get_or_insert(cluster);
                    }
                    Verdict::Deferred(why) => return Verdict::Deferred(name(family, why)),
                }
            }
            match first {
                Some(cluster) => Verdict::Eligible { cluster },
                None => Verdict::Deferred("no family to check".into()),
            }
        })
    }
}

#[cfg(test)]
mod tests;
