//! Staleness and candidate selection (see `klaud_planner::tracks`): for every family, is
//! there a newer image on its track, is it safe, and exactly which digest?
//!
//! Request discipline: each upstream repository's tags are listed once per
//! plan and each tag resolved once (the [`RegistrySession`] single-flights
//! them), a current tag on a track is checked against that listing (only a
//! digest-pinned or track-less one is `HEAD`ed), and manifests and configs
//! are fetched only for candidate tags — newest first, stopping at the first
//! that qualifies — and for tags whose order needs their creation time
//! (read concurrently, cached by digest).

use futures::future::BoxFuture;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::future::join_all;
use serde::Serialize;

use crate::identity::candidate_id;
use crate::image::ImageRef;
use crate::registry::{PlatformImage, RegistryError, RegistrySession, RequestCounts};
use crate::repo::{Family, Repository};
use crate::tracks::{
    Track, TrackOrdering, TrackRule, TrackSource, base_change_sentence, commit_matches, track_for,
};

/// How a clock is named in reasons.
fn clock_name(clock: Clock) -> &'static str {
    match clock {
        Clock::TagText => "tag text",
        Clock::RegistryPushTime => "registry push time",
        Clock::CreatedLabel => "image created label",
        Clock::ConfigCreated => "image config created",
    }
}

/// Image labels that carry the upstream commit an image was built from.
pub const REVISION_LABELS: &[&str] = &["org.opencontainers.image.revision", "ai.vllm.build.commit"];
/// Label with the image's creation time.
pub const CREATED_LABEL: &str = "org.opencontainers.image.created";
/// Candidate tags examined at most per family (newest first) before giving up.
const MAX_EXAMINED: usize = 12;
/// Default of [`PlanOptions::max_timed_tags`].
pub const DEFAULT_MAX_TIMED_TAGS: usize = 2000;
/// Families planned at once: enough to keep every repository's requests in
/// flight, few enough that a 10,000-family plan does not hold every
/// family's intermediate state at the same time.
const FAMILIES_IN_FLIGHT: usize = 256;

/// Whether a family needs a new image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// The current tag is gone from the registry (fresh nodes cannot pull it).
    StalePruned,
    /// A newer tag on the family's track is old enough and qualifies.
    StaleNewer,
    /// Nothing newer qualifies.
    UpToDate,
    /// The current tag has no recognisable order; never bumped automatically.
    UnknownTrack,
    /// The registry could not be asked; see the reasons.
    Error,
}

/// Which clock ordered the tags or aged the candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Clock {
    /// The tag text itself (version, date or number).
    TagText,
    /// Docker Hub's `tag_last_pushed`.
    RegistryPushTime,
    /// The image's `org.opencontainers.image.created` label.
    CreatedLabel,
    /// The image config's `created` field.
    ConfigCreated,
}

/// A qualified newer image for a family.
#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    /// The pinned reference to write: `repo:tag@sha256:<index digest>`, in
    /// the family's own spelling.
    #[serde(serialize_with = "display")]
    pub image: ImageRef,
    /// The tag.
    pub tag: String,
    /// The index digest that was checked and is pinned.
    pub digest: String,
    /// The upstream revision label, when the image has one.
    pub revision: Option<String>,
    /// When the image was pushed or built, by [`Candidate::clock`].
    pub time: Option<DateTime<Utc>>,
    /// Which clock ordered and aged it.
    pub clock: Clock,
    /// Whether this moves a nightly family to a release.
    pub nightly_to_release: bool,
    /// Toolkit and engine versions the candidate's config declares.
    #[serde(skip_serializing_if = "crate::provenance::ImageVersions::is_empty")]
    pub versions: crate::provenance::ImageVersions,
}

/// Why a family is not bumped whatever its registry says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum BlockKind {
    /// The repository retired it (MODELS.md, `configs/deprecated/`): the
    /// outcome `retired`; the registry is not asked.
    Retired,
    /// Somebody else's open PR changes its entry or recipes: the outcome
    /// `duplicate`.
    Duplicate,
    /// Klaud's own PR for it is still open (one open PR per family).
    Occupied,
    /// A baseline is required and the family's current image has no
    /// complete published one (see configs/README.md#baseline-readiness-lifecycle-require_baseline): the outcome
    /// `readiness-blocked`, decided before the claim. Set by the wave,
    /// never by the plan itself.
    ReadinessBlocked,
    /// A maintainer's ignore rule (configuration, dashboard issue, or a
    /// closed Klaud PR) leaves the family or its candidate alone: see
    /// [`crate::ignore`].
    Ignored,
}

impl BlockKind {
    /// The kebab-case spelling (the outcome's for `retired`, `duplicate`
    /// and `readiness-blocked`).
    pub fn as_str(self) -> &'static str {
        match self {
            BlockKind::Retired => "retired",
            BlockKind::Duplicate => "duplicate",
            BlockKind::Occupied => "occupied",
            BlockKind::ReadinessBlocked => "readiness-blocked",
            BlockKind::Ignored => "ignored",
        }
    }
}

/// A family that is not selected, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Blocked {
    /// What kind of block.
    pub kind: BlockKind,
    /// In plain words, naming the PR and its author when there is one.
    pub reason: String,
    /// The PR in the way, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pull: Option<u64>,
    /// Its author.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
}

/// The plan for one family.
#[derive(Debug, Clone, Serialize)]
pub struct FamilyPlan {
    /// `configs/<x>-master.yaml:<key>`.
    pub family: String,
    /// Family id.
    pub id: String,
    /// The master file's line where the family's entry starts (1-based),
    /// for links to it.
    #[serde(skip)]
    pub line: usize,
    /// Status.
    pub status: Status,
    /// The current image, as written.
    pub current: String,
    /// The architecture of the family's platform (`amd64`, `arm64`): the
    /// image of a candidate it runs.
    #[serde(skip)]
    pub architecture: &'static str,
    /// The track name, when the tag has one.
    pub track: Option<String>,
    /// The chosen image, if any.
    pub candidate: Option<Candidate>,
    /// The clock used to order the track, if any.
    pub clock: Option<Clock>,
    /// Why, in plain words: skipped tags, moved tags, errors.
    pub reasons: Vec<String>,
    /// Set when the family is not bumped whatever the registry says
    /// (retired, somebody else's PR, Klaud's own open PR).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocked: Option<Blocked>,
    /// When the current image was made, as far as the plan knows (orders
    /// the selection: older images first).
    #[serde(skip)]
    current_time: Option<DateTime<Utc>>,
    /// How many qualifying-looking tags are newer than the current one.
    #[serde(skip)]
    newer_count: usize,
    /// Held before the registry was asked (retired, or an ignore rule for
    /// the whole family): costs no request, so the floor leaves it out.
    #[serde(skip)]
    held_unasked: bool,
}

/// A candidate chosen for this wave.
#[derive(Debug, Clone, Serialize)]
pub struct Selected {
    /// The family; for a family group, its first member in repository
    /// order, so every instance claims the same ref for the group.
    pub family: String,
    /// Every member of the family group bumped with this candidate (the
    /// family included), in repository order; empty for a lone family.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<String>,
    /// Candidate id: `<family id>-<identity(normalized image)[:16]>`.
    pub id: String,
    /// The pinned image.
    pub image: String,
}

/// The result of one plan.
#[derive(Debug, Clone, Serialize)]
pub struct PlanReport {
    /// One entry per family, in repository order.
    pub families: Vec<FamilyPlan>,
    /// The candidates chosen for this wave, in priority order.
    pub candidates: Vec<Selected>,
    /// Registry requests this plan made, by kind.
    pub requests: RequestCounts,
    /// The fewest requests any correct plan could have made, computed from
    /// the scenario alone (families, tag lists, what the registry said and
    /// what its images are), not from which reads this plan chose: see
    /// [`crate::floor`].
    pub floor: RequestCounts,
    /// [`Self::requests`] by registry host as image references name it
    /// (`docker.io`: Docker Hub, whose manifest GETs are pulls).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests_by_host: BTreeMap<String, RequestCounts>,
    /// [`Self::floor`] by registry host.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub floor_by_host: BTreeMap<String, RequestCounts>,
    /// Wall time of the plan.
    pub elapsed_ms: u64,
    /// What concerns the whole plan, said once rather than per family: a
    /// registry host that is unreachable (its breaker is open), and until when.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Families (or whole master files) the repository could not read, each
    /// naming the file and line: they are left out of this plan, and every
    /// other family is planned as usual.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
    /// The pull quota each registry host stated during the plan (Docker
    /// Hub's `ratelimit-remaining` of `ratelimit-limit`), by host.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub quotas: BTreeMap<String, crate::registry::PullQuota>,
}

impl PlanReport {
    /// A plan of nothing (a pass that skips the registry).
    pub fn empty() -> Self {
        Self {
            families: Vec::new(),
            candidates: Vec::new(),
            requests: RequestCounts::default(),
            floor: RequestCounts::default(),
            requests_by_host: BTreeMap::new(),
            floor_by_host: BTreeMap::new(),
            elapsed_ms: 0,
            notes: Vec::new(),
            unreadable: Vec::new(),
            quotas: BTreeMap::new(),
        }
    }
}

/// Why the upstream source repository could not answer; the cause is kept
/// (the planner does not know the forge's error type).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct UpstreamError(#[from] pub Box<dyn std::error::Error + Send + Sync>);

/// Proves that a release contains a nightly's commit, by asking the
/// upstream source repository (a GitHub compare). Implemented outside the
/// planner, which never talks to GitHub.
#[async_trait::async_trait]
pub trait UpstreamCompare: Send + Sync {
    /// `Some(true)` when `release_tag` of `source` contains `commit`,
    /// `Some(false)` when it does not, `None` when that cannot be told.
    async fn release_contains(
        &self,
        source: &str,
        release_tag: &str,
        commit: &str,
    ) -> Result<Option<bool>, UpstreamError>;
}

/// A release track that nightly families may move to, once the upstream
/// source repository proves the release contains the nightly's commit.
#[derive(Debug, Clone)]
pub struct ReleaseRule {
    /// The release track (its repository is the image repository).
    pub track: TrackRule,
    /// Only nightlies on this track (by name, e.g.
    /// `nightly-dev-cu13-<yyyymmdd>-<commit>`) may move; `None`: any
    /// commit-named track of the repository.
    pub nightly_track: Option<String>,
}

/// What the plan needs besides the repository and the registry.
pub struct PlanOptions<'a> {
    /// The time the plan runs at.
    pub now: DateTime<Utc>,
    /// A newer tag must be at least this old.
    pub min_age: Duration,
    /// At most this many candidates.
    pub max_candidates: usize,
    /// Configured tracks (override the inferred ones).
    pub rules: Vec<TrackRule>,
    /// Release tracks nightly families of a repository may move to.
    pub release_rules: Vec<ReleaseRule>,
    /// Image repository (normalized) → upstream source repository.
    pub upstream: BTreeMap<String, String>,
    /// Proof that a release is not behind a nightly; without it such moves
    /// are skipped with the reason.
    pub compare: Option<&'a dyn UpstreamCompare>,
    /// Family ids claimed by someone (never selected).
    pub occupied: BTreeSet<String>,
    /// Family ids cooling down after a recent candidate (never selected).
    pub cooling_down: BTreeSet<String>,
    /// Family ids blocked by what is open on GitHub (duplicate, occupied);
    /// still planned, so the plan can say which image it would propose.
    pub blocked: BTreeMap<String, Blocked>,
    /// Called after each family is planned with (done, total).
    pub progress: Option<&'a (dyn Fn(usize, usize) + Sync)>,
    /// Creation times by image digest, kept across plans (the daemon's
    /// store); `None`: only the client's in-memory caches.
    pub creation_times: Option<&'a dyn CreationTimes>,
    /// Most tags of one track whose creation time is read to order it when
    /// the registry offers no push times (each costs a `HEAD`, and once per
    /// digest ever an index, manifest and config). Past it the family is an
    /// error that says so. Default [`DEFAULT_MAX_TIMED_TAGS`].
    pub max_timed_tags: usize,
    /// What maintainers told Klaud to leave alone.
    pub ignore: crate::ignore::IgnoreRules,
    /// Family ids a maintainer asked to run now: picked before every other
    /// family and on top of `max_candidates` (the budget would otherwise
    /// decide whether it is reached at all), when this plan may pick
    /// anything (`max_candidates` above 0). Blocked, occupied and
    /// cooling-down families stay unpicked.
    pub run_first: BTreeSet<String>,
}

/// An image's creation time, as cached by digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CreationTime {
    /// When the image was built.
    pub time: DateTime<Utc>,
    /// Which field said so ([`Clock::CreatedLabel`] or [`Clock::ConfigCreated`]).
    pub clock: Clock,
}

/// A content-addressed cache of creation times: the key is an image (index
/// or manifest) digest, so an entry never goes stale and a store may keep it
/// forever. The time is that of the family's platform (or, lacking it, the
/// first the image lists), so only that platform's manifest and config are
/// read; `digest` is the index digest and `architecture` the platform's. Implemented in memory by
/// [`MemoryCreationTimes`]; the daemon's store can implement it to survive
/// restarts.
pub trait CreationTimes: Send + Sync {
    /// The cached time of the image `digest` for `architecture`.
    fn get(&self, digest: &str, architecture: &str) -> Option<CreationTime>;
    /// Remembers a time read from the registry.
    fn put(&self, digest: &str, architecture: &str, time: CreationTime);
}

/// [`CreationTimes`] in memory, with hit and miss counts for benchmarks.
#[derive(Debug, Default)]
pub struct MemoryCreationTimes {
    entries: std::sync::Mutex<std::collections::HashMap<String, CreationTime>>,
    hits: std::sync::atomic::AtomicU64,
    misses: std::sync::atomic::AtomicU64,
}

impl MemoryCreationTimes {
    /// Entries held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// (hits, misses) so far.
    pub fn hits_and_misses(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.hits.load(Relaxed), self.misses.load(Relaxed))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, CreationTime>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl CreationTimes for MemoryCreationTimes {
    fn get(&self, digest: &str, architecture: &str) -> Option<CreationTime> {
        use std::sync::atomic::Ordering::Relaxed;
        let found = self
            .lock()
            .get(&format!("{digest} {architecture}"))
            .copied();
        match found {
            Some(_) => self.hits.fetch_add(1, Relaxed),
            None => self.misses.fetch_add(1, Relaxed),
        };
        found
    }

    fn put(&self, digest: &str, architecture: &str, time: CreationTime) {
        self.lock().insert(format!("{digest} {architecture}"), time);
    }
}

impl PlanOptions<'_> {
    /// Defaults: now, 24 h minimum age, 5 candidates, nothing configured.
    pub fn new(now: DateTime<Utc>) -> Self {
        Self {
            now,
            min_age: Duration::from_secs(24 * 3600),
            max_candidates: 5,
            rules: Vec::new(),
            release_rules: Vec::new(),
            upstream: BTreeMap::new(),
            compare: None,
            occupied: BTreeSet::new(),
            cooling_down: BTreeSet::new(),
            blocked: BTreeMap::new(),
            progress: None,
            creation_times: None,
            max_timed_tags: DEFAULT_MAX_TIMED_TAGS,
            run_first: BTreeSet::new(),
            ignore: crate::ignore::IgnoreRules::default(),
        }
    }
}

/// Plans every family of `repository` against the registries.
///
/// Families are planned grouped by image repository, a bounded number at
/// a time, so several repositories are in flight at once while the
/// intermediate state of at most `FAMILIES_IN_FLIGHT` families is held.
/// Requests depend on the distinct repositories and tags, not on how many
/// families share them (the session single-flights each lookup).
pub fn plan<'f>(
    repository: &'f Repository,
    session: &'f RegistrySession,
    options: &'f PlanOptions<'f>,
) -> BoxFuture<'f, PlanReport> {
    Box::pin(async move {
        use futures::StreamExt as _;

        let started = Instant::now();
        let before = session.client().counts();
        let before_by_host = session.client().counts_by_host();
        let all = repository.families();
        let total = all.len();
        let retirements = crate::retired::Retirements::read(repository);
        let retirements = &retirements;
        let mut order: Vec<usize> = (0..total).collect();
        order.sort_by_cached_key(|&i| {
            let image = all[i].image();
            (image.registry().to_owned(), image.repository())
        });
        let done = std::sync::atomic::AtomicUsize::new(0);
        let done = &done;
        let mut planned: Vec<Option<FamilyPlan>> = (0..total).map(|_| None).collect();
        let mut results = futures::stream::iter(order)
            .map(|i| async move {
                let result = if let Some(reason) = retirements.reason(&all[i]) {
                    let line = format!("retired: {reason}");
                    held_plan(&all[i], BlockKind::Retired, reason, line)
                } else if let Some(rule) = options.ignore.family(&all[i]) {
                    let line = rule.describe();
                    held_plan(&all[i], BlockKind::Ignored, line.clone(), line)
                } else {
                    plan_family(&all[i], session, options).await
                };
                let finished = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                if let Some(progress) = options.progress {
                    progress(finished, total);
                }
                (i, result)
            })
            .buffer_unordered(FAMILIES_IN_FLIGHT);
        while let Some((i, result)) = results.next().await {
            planned[i] = Some(result);
        }
        drop(results);
        let mut families: Vec<FamilyPlan> = planned.into_iter().flatten().collect();
        for f in families.iter_mut().filter(|f| f.blocked.is_none()) {
            if let Some(b) = options.blocked.get(&f.id) {
                let mut b = b.clone();
                if b.kind == BlockKind::Occupied
                    && let Some(c) = &f.candidate
                    && !b
                        .reason
                        .contains(&candidate_id(&f.id, &c.image.normalized()))
                {
                    b.reason
                        .push_str(&format!("; superseded upstream: would propose {}", c.image));
                }
                f.reasons.push(b.reason.clone());
                f.blocked = Some(b);
            }
        }
        for f in families.iter_mut().filter(|f| f.blocked.is_none()) {
            let Some(candidate) = &f.candidate else {
                continue;
            };
            if let Some(rule) = options.ignore.candidate(&f.id, &candidate.image) {
                let reason = format!(
                    "{}; a newer image than {} is proposed when one qualifies",
                    rule.describe(),
                    candidate.tag
                );
                f.reasons.push(reason.clone());
                f.blocked = Some(Blocked {
                    kind: BlockKind::Ignored,
                    reason,
                    pull: None,
                    author: None,
                });
            }
        }
        let candidates = select(&families, repository, options);
        let after = session.client().counts();
        let after_by_host = session.client().counts_by_host();
        let floor_by_host =
            crate::floor::floor(&floor_scenario(repository, &families, session, options));
        PlanReport {
            floor: crate::floor::total(&floor_by_host),
            requests_by_host: after_by_host
                .iter()
                .map(|(host, after)| {
                    let before = before_by_host.get(host).copied().unwrap_or_default();
                    (host.clone(), after.since(&before))
                })
                .filter(|(_, counts)| counts.total() > 0)
                .collect(),
            floor_by_host,
            notes: breaker_notes(session),
            quotas: session.client().pull_quotas(),
            unreadable: repository
                .unreadable()
                .iter()
                .map(ToString::to_string)
                .collect(),
            families,
            candidates,
            requests: subtract(after, before),
            elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        }
    })
}

/// One line per registry host whose breaker is open.
fn breaker_notes(session: &RegistrySession) -> Vec<String> {
    session
        .client()
        .breaker_state()
        .hosts
        .into_iter()
        .map(|trip| {
            let since = trip.since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            let until = trip.until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            if trip.reason.starts_with("out of pull quota") {
                format!(
                    "registry host {} {} since {since}; no manifest is pulled from it before {until}, the families that need one are left for that plan",
                    trip.host, trip.reason
                )
            } else {
                format!(
                    "registry host {} unreachable since {since} ({}); not asked again before {until}, families that need it say so",
                    trip.host, trip.reason
                )
            }
        })
        .collect()
}

fn subtract(after: RequestCounts, before: RequestCounts) -> RequestCounts {
    RequestCounts {
        manifest_head: after.manifest_head.saturating_sub(before.manifest_head),
        manifest_get: after.manifest_get.saturating_sub(before.manifest_get),
        blob_get: after.blob_get.saturating_sub(before.blob_get),
        tags_list: after.tags_list.saturating_sub(before.tags_list),
        token: after.token.saturating_sub(before.token),
        hub_api: after.hub_api.saturating_sub(before.hub_api),
        other: after.other.saturating_sub(before.other),
    }
}

/// The scenario this plan met, for its floor: the families it had to
/// decide (held ones cost nothing), the tag lists and tags API answers it
/// read, and what it learned of each image it read. Only facts go in, never
/// which tags the plan chose to read: a tag it did not read is taken at its
/// cheapest by the floor.
fn floor_scenario(
    repository: &Repository,
    families: &[FamilyPlan],
    session: &RegistrySession,
    options: &PlanOptions<'_>,
) -> crate::floor::Scenario {
    use crate::floor::{FloorFamily, RepositoryFacts, TagFacts};
    let mut floor_families = Vec::new();
    let mut repositories: BTreeMap<(String, String), RepositoryFacts> = BTreeMap::new();
    for (family, plan) in repository.families().iter().zip(families) {
        if plan.held_unasked {
            continue;
        }
        let image = family.image();
        let host = image.registry().to_owned();
        let repo = image.repository();
        let normalized = image.normalized_repository();
        floor_families.push(FloorFamily {
            host: host.clone(),
            repository: normalized.clone(),
            tag: image.tag().map(str::to_owned),
            pinned: image.digest().is_some(),
            architecture: family.platform.architecture().to_owned(),
        });
        let key = (host.clone(), normalized);
        if repositories.contains_key(&key) {
            continue;
        }
        let tags = session.tags_if_listed(&host, &repo);
        let hub = session.hub_tags_if_read(&host, &repo);
        let mut facts = BTreeMap::new();
        for tag in tags.iter().flat_map(|t| t.iter()) {
            let mut known = TagFacts::default();
            if let Some(info) = hub.as_ref().and_then(|h| h.get(tag)) {
                known.time = info.pushed;
                if !info.platforms.is_empty() {
                    known.architectures = Some(
                        info.platforms
                            .iter()
                            .map(|p| p.architecture.clone())
                            .collect(),
                    );
                }
            }
            if let Some(seen) = session.observed(&host, &repo, tag) {
                known.single = seen.single;
                known.architectures = Some(
                    seen.platforms
                        .iter()
                        .map(|p| p.architecture.clone())
                        .collect(),
                );
                for platform in &seen.platforms {
                    let Some(labels) = &platform.labels else {
                        continue;
                    };
                    if known.revision.is_none() {
                        known.revision =
                            REVISION_LABELS.iter().find_map(|l| labels.get(*l)).cloned();
                    }
                    if known.time.is_none() {
                        known.time = labels
                            .get(CREATED_LABEL)
                            .and_then(|l| DateTime::parse_from_rfc3339(l.trim()).ok())
                            .map(|t| t.with_timezone(&Utc))
                            .or(platform.created);
                    }
                }
            }
            if known != TagFacts::default() {
                facts.insert(tag.clone(), known);
            }
        }
        repositories.insert(
            key,
            RepositoryFacts {
                tags: tags.map(|t| t.as_ref().clone()),
                push_times: hub.is_some(),
                facts,
            },
        );
    }
    crate::floor::Scenario {
        now: options.now,
        min_age: chrono::Duration::from_std(options.min_age).unwrap_or(chrono::Duration::MAX),
        rules: options.rules.clone(),
        families: floor_families,
        repositories,
    }
}

struct FamilyWork<'a> {
    family: &'a Family,
    image: &'a ImageRef,
    host: String,
    repository: String,
    plan: FamilyPlan,
}

/// The plan of a family held before the registry is asked (retired, or
/// ignored as a whole): never bumped, no request made.
fn held_plan(family: &Family, kind: BlockKind, reason: String, line: String) -> FamilyPlan {
    FamilyPlan {
        family: family.family.clone(),
        id: family.id.clone(),
        line: family.line,
        status: Status::UpToDate,
        current: family.image().to_string(),
        architecture: family.platform.architecture(),
        track: None,
        candidate: None,
        clock: None,
        reasons: vec![line],
        blocked: Some(Blocked {
            kind,
            reason,
            pull: None,
            author: None,
        }),
        current_time: None,
        newer_count: 0,
        held_unasked: true,
    }
}

async fn plan_family(
    family: &Family,
    session: &RegistrySession,
    options: &PlanOptions<'_>,
) -> FamilyPlan {
    let image = family.image();
    let mut work = FamilyWork {
        family,
        image,
        host: image.registry().to_owned(),
        repository: image.repository(),
        plan: FamilyPlan {
            family: family.family.clone(),
            id: family.id.clone(),
            line: family.line,
            status: Status::UpToDate,
            current: image.to_string(),
            architecture: family.platform.architecture(),
            track: None,
            candidate: None,
            clock: None,
            reasons: Vec::new(),
            blocked: None,
            current_time: None,
            newer_count: 0,
            held_unasked: false,
        },
    };
    if let Err(reason) = examine(&mut work, session, options).await {
        work.plan.status = Status::Error;
        work.plan.candidate = None;
        work.plan.reasons.push(reason);
    }
    work.plan
}

async fn examine(
    work: &mut FamilyWork<'_>,
    session: &RegistrySession,
    options: &PlanOptions<'_>,
) -> Result<(), String> {
    let Some(tag) = work.image.tag().map(str::to_owned) else {
        work.plan.status = Status::UnknownTrack;
        work.plan
            .reasons
            .push("pinned by digest only: no tag to follow".to_owned());
        return Ok(());
    };
    let normalized_repository = work.image.normalized_repository();
    let track =
        track_for(&normalized_repository, &tag, &options.rules).map_err(|e| e.to_string())?;

    // The current tag. On a track its repository is listed anyway, and the
    // listing says whether the tag still exists: a HEAD is needed only to
    // see whether a pinned tag moved, or when nothing is listed.
    // Where Docker Hub's tags API may answer, it is asked beside the tag
    // list rather than after it: a family on Docker Hub needs its push
    // times whenever anything is newer, and a registry across the internet
    // makes every request that waits on another cost a round trip.
    let tags = match &track {
        Some(_) => {
            let hub = async {
                if session.client().config().hub_api_for(&work.host).is_some() {
                    // Its answer is kept in the session; a failure is
                    // handled where the push times are used.
                    let _ = session.hub_push_times(&work.host, &work.repository).await;
                }
            };
            let (listed, ()) = futures::join!(session.list_tags(&work.host, &work.repository), hub);
            Some(listed.map_err(|e| short(&e))?)
        }
        None => None,
    };
    let mut pruned = false;
    // A registry that lists no tags at all (`{"tags": null}` or `[]`) says
    // nothing about the current one: its own HEAD decides whether it is gone.
    let listed_none = tags.as_ref().is_some_and(|t| t.is_empty());
    match &tags {
        Some(tags) if work.image.digest().is_none() && !tags.is_empty() => {
            if !tags.contains(&tag) {
                pruned = true;
                work.plan.reasons.push(format!(
                    "current tag {tag} is gone from the registry (pruned)"
                ));
            }
        }
        _ => match session
            .head_manifest(&work.host, &work.repository, &tag)
            .await
        {
            Ok(head) => {
                if let Some(pinned) = work.image.digest()
                    && pinned != head.digest
                {
                    work.plan.reasons.push(format!(
                        "tag {tag} moved: pinned {pinned}, the registry now serves {}; not bumped for that alone",
                        head.digest
                    ));
                }
            }
            Err(err) if err.is_not_found() => {
                pruned = true;
                work.plan.reasons.push(format!(
                    "current tag {tag} is gone from the registry (pruned)"
                ));
            }
            Err(err) => return Err(short(&err)),
        },
    }
    if listed_none && !pruned {
        // Nothing to order: neither "up to date" nor "pruned" would be true.
        return Err(format!(
            "the registry lists no tags for {} (an empty or null tag list) although it still serves {tag}; nothing to compare it with, so it is neither pruned nor known to be up to date",
            work.repository
        ));
    }

    let (Some(track), Some(tags)) = (track, tags) else {
        work.plan.status = Status::UnknownTrack;
        work.plan.reasons.push(format!(
            "tag {tag:?} has no recognisable order; bump it by hand or configure a track"
        ));
        return Ok(());
    };
    work.plan.track = Some(track.name().to_owned());
    let Some(current_position) = track.matches(&tag) else {
        return Err(format!(
            "tag {tag} does not match its own track {}",
            track.name()
        ));
    };

    let ordered = order_track(
        work,
        session,
        options,
        &track,
        &tag,
        &current_position,
        pruned,
        &tags,
    )
    .await?;
    if let Some(note) = &ordered.deferred {
        work.plan.reasons.push(note.clone());
    }
    work.plan.newer_count = ordered.newer.len();
    work.plan.clock = Some(ordered.clock);
    work.plan.current_time = ordered.current_time;

    // A nightly family may move to a release that provably contains its commit.
    let mut release = None;
    if let Some(commit) = &current_position.commit {
        release = release_candidate(work, session, options, commit, &tags).await?;
    }
    let chosen = match release {
        Some(candidate) => Some(candidate),
        None => first_qualifying(work, session, options, &track, &ordered.newer, false).await?,
    };
    if let Some(candidate) = &chosen {
        // A move to another ROCm or CUDA is a change of its own that the
        // maintainer must see, not only a newer build.
        if let Some(sentence) = base_change_sentence(&tag, &candidate.tag) {
            work.plan
                .reasons
                .push(format!("{}: {sentence}", candidate.tag));
        }
        if let Some(newest) = ordered.newer.first()
            && newest.tag != candidate.tag
            && !candidate.nightly_to_release
        {
            work.plan.reasons.push(format!(
                "proposes {}, not {}, the newest tag on track {}: the newer ones did not qualify",
                candidate.tag,
                newest.tag,
                track.name()
            ));
        }
    }
    if track.source() == TrackSource::Configured {
        let reference = chosen.as_ref().map_or(tag.as_str(), |c| c.tag.as_str());
        if let Some(note) = pinned_base_note(&track, reference, &tags) {
            work.plan.reasons.push(note);
        }
    }
    if chosen.is_none() && !pruned {
        // Say what was compared: "up to date" without a reason cannot be
        // told apart from a track that was never looked at.
        let clock = clock_name(ordered.clock);
        work.plan.reasons.push(match ordered.newer.first() {
            None if ordered.deferred.is_some() => format!(
                "nothing newer that the text of {} tag(s) on track {} can order",
                ordered.compared + 1,
                track.name()
            ),
            None => format!(
                "up to date: {tag} is the newest of {} tag(s) on track {} (by {clock})",
                ordered.compared + 1,
                track.name()
            ),
            Some(newest) => format!(
                "up to date: {} newer tag(s) on track {} (newest {}, by {}) but none qualified",
                ordered.newer.len(),
                track.name(),
                newest.tag,
                clock_name(newest.clock)
            ),
        });
    }
    work.plan.status = match (&chosen, pruned) {
        (_, true) => Status::StalePruned,
        (Some(_), false) => Status::StaleNewer,
        (None, false) => Status::UpToDate,
    };
    if pruned && chosen.is_none() {
        work.plan
            .reasons
            .push("no qualifying replacement on the track yet".to_owned());
    }
    work.plan.candidate = chosen;
    Ok(())
}

/// Where a configured track keeps a family on its base (`rocm7.2.3_…`):
/// the newest build on the track inferred from the tag, which follows the
/// bases, that the configured one leaves out, and why. Only text-ordered
/// inferred tracks are asked, so this costs no request.
fn pinned_base_note(configured: &Track, reference: &str, tags: &[String]) -> Option<String> {
    let wide = crate::tracks::infer_track(reference)?;
    if wide.base_names().is_empty()
        || wide.ordering() == TrackOrdering::Pushed
        || wide.needs_time_for_key()
    {
        return None;
    }
    let floor = wide.matches(reference)?.key?;
    let (_, newest) = tags
        .iter()
        .filter(|t| configured.matches(t).is_none())
        .filter_map(|t| wide.matches(t)?.key.map(|k| (k, t)))
        .filter(|(k, _)| *k > floor)
        .max_by(|a, b| a.0.cmp(&b.0).then_with(|| b.1.cmp(a.1)))?;
    let moves = crate::tracks::base_changes(reference, newest);
    let why = if moves.is_empty() {
        format!(
            "the configured track {} does not admit it",
            configured.name()
        )
    } else {
        let list: Vec<String> = moves.iter().map(ToString::to_string).collect();
        format!(
            "it would move {}, and the configured track {} pins that base",
            list.join(", "),
            configured.name()
        )
    };
    Some(format!(
        "newest build left out: {newest} (newer on {}): {why}",
        wide.name()
    ))
}

/// A newer tag on the track, with its push or creation time when the
/// ordering needed it, and the clock that put it there.
struct NewerTag {
    tag: String,
    time: Option<DateTime<Utc>>,
    clock: Clock,
}

struct OrderedTags {
    /// Newer tags on the track, newest first.
    newer: Vec<NewerTag>,
    clock: Clock,
    current_time: Option<DateTime<Utc>>,
    /// Tags on the track besides the current one.
    compared: usize,
    /// Set when the track could not be ordered within the pull budget:
    /// why, for the family's reasons, instead of "up to date".
    deferred: Option<String>,
}

/// Where a tag sits: its text key (with a year-less date's year filled
/// in) and, when the track needs it, its push or creation time.
type Place = (
    Option<crate::tracks::SortKey>,
    Option<(DateTime<Utc>, Clock)>,
);

#[allow(clippy::too_many_arguments)]
async fn order_track(
    work: &mut FamilyWork<'_>,
    session: &RegistrySession,
    options: &PlanOptions<'_>,
    track: &Track,
    current_tag: &str,
    current_position: &crate::tracks::TagPosition,
    pruned: bool,
    tags: &[String],
) -> Result<OrderedTags, String> {
    let on_track: Vec<(&String, crate::tracks::TagPosition)> = tags
        .iter()
        .filter(|t| t.as_str() != current_tag)
        .filter_map(|t| track.matches(t).map(|p| (t, p)))
        .collect();
    let compared = on_track.len();
    let pushed = track.ordering() == TrackOrdering::Pushed;
    let every_tag_needs_time = pushed || track.needs_time_for_key();
    if !every_tag_needs_time && !track.ties_by_time() {
        let current_key = current_position
            .key
            .as_ref()
            .ok_or("an ordered track gave the current tag no key")?;
        let mut newer: Vec<_> = on_track
            .into_iter()
            .filter_map(|(t, p)| p.key.filter(|k| k > current_key).map(|k| (k, t.clone())))
            .collect();
        newer.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        return Ok(OrderedTags {
            newer: newer
                .into_iter()
                .map(|(_, tag)| NewerTag {
                    tag,
                    time: None,
                    clock: Clock::TagText,
                })
                .collect(),
            clock: Clock::TagText,
            current_time: current_key.date.map(|d| d.and_utc()),
            compared,
            deferred: None,
        });
    }

    // A year-less date without push times: the text places each tag at the
    // latest date it can have, so only tags that can be newer than the
    // current one are read, newest first, each telling its own year and
    // age when it is examined; the current image is never read for it.
    let year_less_by_text = track.needs_time_for_key()
        && !pushed
        && !track.ties_by_time()
        && !matches!(
            session.hub_push_times(&work.host, &work.repository).await,
            Ok(Some(_))
        );
    if year_less_by_text || pulls_scarce(work, session).await {
        return Ok(order_by_text(
            options.now,
            track,
            current_tag,
            current_position,
            pruned,
            &on_track,
        ));
    }

    // Which tags need a clock: all of them when the text alone cannot key
    // them; otherwise only rebuilds that tie on the text key — with the
    // current tag, or among the newest tags a plan would examine.
    let mut wanted: Vec<&str> = Vec::new();
    if every_tag_needs_time {
        wanted.extend(on_track.iter().map(|(t, _)| t.as_str()));
    } else {
        let current_key = current_position.key.as_ref();
        let mut by_key: BTreeMap<&crate::tracks::SortKey, Vec<&str>> = BTreeMap::new();
        for (t, p) in &on_track {
            if let Some(k) = &p.key
                && current_key.is_none_or(|c| k >= c)
            {
                by_key.entry(k).or_default().push(t.as_str());
            }
        }
        let mut covered = 0;
        for (key, group) in by_key.iter().rev() {
            let ties_current = current_key == Some(*key);
            if group.len() > 1 || ties_current {
                wanted.extend(group.iter().copied());
            }
            covered += group.len();
            if covered >= MAX_EXAMINED && !ties_current {
                // The current key's group still matters if it comes later.
                if let Some(c) = current_key
                    && let Some(group) = by_key.get(c)
                {
                    wanted.extend(group.iter().copied());
                }
                break;
            }
        }
        wanted.sort_unstable();
        wanted.dedup();
    }
    // The current tag's own clock is read when the text cannot order it
    // against the others (a push-ordered or year-less track, a rebuild with
    // the same key) or when it is the only way to know when the current
    // image was made. A dated key already says that: on a nightly track
    // with a family per night this skips one image read per family.
    let current_needs_time = every_tag_needs_time
        || current_position
            .key
            .as_ref()
            .is_none_or(|k| k.date.is_none())
        || on_track
            .iter()
            .any(|(_, p)| p.key.is_some() && p.key == current_position.key);
    if !pruned && current_needs_time {
        wanted.push(current_tag);
    }
    let times = tag_times(work, session, options, track, &wanted, pruned.then_some(())).await?;
    let place = |tag: &str, position: &crate::tracks::TagPosition| -> Place {
        let time = times.get(tag).copied();
        let key = if track.needs_time_for_key() {
            time.and_then(|(t, _)| position.key_at(t))
        } else {
            position.key.clone()
        };
        (key, time)
    };
    let current: Option<Place> = (!pruned).then(|| place(current_tag, current_position));
    if let Some((key, time)) = &current {
        if time.is_none() && current_needs_time {
            return Err(format!(
                "the current image {current_tag} has no push or creation time to order the track by"
            ));
        }
        if key.is_none() && !pushed {
            return Err(format!(
                "the current tag {current_tag} has no key on its own track {}",
                track.name()
            ));
        }
    }
    let is_newer = |(key, time): &Place| -> bool {
        let Some((ck, ct)) = &current else {
            // Pruned: anything on the track that can be placed replaces it.
            return key.is_some() || (pushed && time.is_some());
        };
        if pushed {
            return matches!((time, ct), (Some(t), Some(c)) if t.0 > c.0);
        }
        match key.cmp(ck) {
            Ordering::Greater => key.is_some(),
            Ordering::Equal if track.ties_by_time() => {
                matches!((time, ct), (Some(t), Some(c)) if t.0 > c.0)
            }
            _ => false,
        }
    };
    let mut newer: Vec<(Place, String)> = on_track
        .iter()
        .map(|(t, p)| (place(t, p), (*t).clone()))
        .filter(|(place, _)| is_newer(place))
        .collect();
    newer.sort_by(|(a, at), (b, bt)| {
        b.0.cmp(&a.0)
            .then_with(|| b.1.map(|x| x.0).cmp(&a.1.map(|x| x.0)))
            .then_with(|| at.cmp(bt))
    });
    let time_clock = times.values().next().map(|(_, c)| *c);
    let current_key = current.as_ref().and_then(|(k, _)| k.clone());
    let current_time = current.as_ref().and_then(|(k, t)| {
        t.map(|t| t.0)
            .or_else(|| k.as_ref().and_then(|k| k.date).map(|d| d.and_utc()))
    });
    Ok(OrderedTags {
        newer: newer
            .into_iter()
            .map(|((key, time), tag)| NewerTag {
                // A push-ordered tag, or a rebuild of the current version,
                // is newer by the clock; anything else by its text.
                clock: if pushed || (current.is_some() && key == current_key) {
                    time.map_or(Clock::TagText, |t| t.1)
                } else {
                    Clock::TagText
                },
                time: time.map(|t| t.0),
                tag,
            })
            .collect(),
        clock: if pushed {
            time_clock.unwrap_or(Clock::ConfigCreated)
        } else {
            Clock::TagText
        },
        current_time,
        compared,
        deferred: None,
    })
}

/// Whether every manifest `GET` of the family's registry is a pull against
/// a small quota (Docker Hub) and the tags API that would spare them (push
/// times, digests, platforms) did not answer for its repository: then the
/// plan orders by tag text and reads at most one image per family.
async fn pulls_scarce(work: &FamilyWork<'_>, session: &RegistrySession) -> bool {
    work.host == DOCKER_HUB
        && !matches!(
            session.hub_push_times(&work.host, &work.repository).await,
            Ok(Some(_))
        )
}

/// The registry host whose manifest `GET`s are pulls counted against a
/// small hourly quota.
const DOCKER_HUB: &str = "docker.io";

/// Orders a track by its text alone, where the clock that would otherwise
/// order it costs a pull per tag: a year-less date takes the year of the
/// plan's clock, and tags the text cannot tell apart (rebuilds tied on
/// their version or date, a track ordered by push time only) are deferred
/// with the reason rather than read.
fn order_by_text(
    now: DateTime<Utc>,
    track: &Track,
    current_tag: &str,
    current_position: &crate::tracks::TagPosition,
    pruned: bool,
    on_track: &[(&String, crate::tracks::TagPosition)],
) -> OrderedTags {
    let compared = on_track.len();
    let why = "Docker Hub's tags API is unavailable, and reading each image's creation time would cost pulls";
    if track.ordering() == TrackOrdering::Pushed {
        return OrderedTags {
            newer: Vec::new(),
            clock: Clock::TagText,
            current_time: None,
            compared,
            deferred: Some(format!(
                "deferred: track {} is ordered by push time only, and {why} ({} tag(s)); planned again when the API answers",
                track.name(),
                compared + 1
            )),
        };
    }
    let key_of = |p: &crate::tracks::TagPosition| {
        if track.needs_time_for_key() {
            p.key_at(now)
        } else {
            p.key.clone()
        }
    };
    let current_key = if pruned {
        None
    } else {
        key_of(current_position)
    };
    let mut groups: BTreeMap<crate::tracks::SortKey, Vec<&str>> = BTreeMap::new();
    for (t, p) in on_track {
        if let Some(k) = key_of(p)
            && current_key.as_ref().is_none_or(|c| k > *c)
        {
            groups.entry(k).or_default().push(t.as_str());
        }
    }
    let mut deferred = Vec::new();
    let mut newer = Vec::new();
    for (_, group) in groups.into_iter().rev() {
        // Rebuilds tied on their text: which is newest is unknown, and an
        // older build proposed past them would be the wrong one.
        if group.len() > 1 && track.ties_by_time() {
            deferred.extend(group);
            break;
        }
        newer.extend(group.into_iter().map(|tag| NewerTag {
            tag: tag.to_owned(),
            time: None,
            clock: Clock::TagText,
        }));
    }
    let ties_current = !pruned
        && track.ties_by_time()
        && on_track
            .iter()
            .any(|(t, p)| t.as_str() != current_tag && key_of(p) == current_key);
    let mut notes = Vec::new();
    deferred.sort_unstable();
    if !deferred.is_empty() {
        notes.push(format!(
            "deferred: {} are rebuilds of one version on track {} that only push or creation time can order, and {why}; older builds are not proposed past them",
            deferred.join(", "),
            track.name()
        ));
    }
    if ties_current {
        notes.push(format!(
            "rebuilds of {current_tag}'s own version are not compared with it: {why}"
        ));
    }
    OrderedTags {
        newer,
        clock: Clock::TagText,
        current_time: current_key.and_then(|k| k.date).map(|d| d.and_utc()),
        compared,
        deferred: (!notes.is_empty()).then(|| notes.join("; ")),
    }
}

/// Push or creation times of `tags`: Docker Hub's push times when the
/// registry has that API (one listing per repository), else every image's
/// creation time — read concurrently within the client's request bound and
/// cached by digest ([`CreationTimes`]). Tags that are gone or have no time
/// are left out.
async fn tag_times(
    work: &mut FamilyWork<'_>,
    session: &RegistrySession,
    options: &PlanOptions<'_>,
    track: &Track,
    tags: &[&str],
    pruned: Option<()>,
) -> Result<BTreeMap<String, (DateTime<Utc>, Clock)>, String> {
    // When the Hub API fails the images' creation times still order the
    // track, so the family degrades instead of failing. An unreachable host
    // is said once for the whole plan (its notes), not per family.
    match session.hub_push_times(&work.host, &work.repository).await {
        Ok(Some(times)) => {
            let current_known = pruned.is_some()
                || tags
                    .last()
                    .is_some_and(|current| times.contains_key(*current));
            if current_known {
                return Ok(tags
                    .iter()
                    .filter_map(|t| {
                        times
                            .get(*t)
                            .map(|time| ((*t).to_owned(), (*time, Clock::RegistryPushTime)))
                    })
                    .collect());
            }
            work.plan.reasons.push(format!(
                "Docker Hub has no push time for the current tag; ordering {} by image creation time",
                track.name()
            ));
        }
        Ok(None) => {}
        Err(err) if err.is_unreachable() => {}
        Err(err) => work.plan.reasons.push(format!(
            "Docker Hub push times unavailable ({err}); ordering by image creation time"
        )),
    }
    if tags.len() > options.max_timed_tags {
        return Err(format!(
            "{} tags on track {} need their creation time read (the registry offers no push times), more than the bound of {} per track; raise `max_timed_tags` or configure an ordered track for {}",
            tags.len(),
            track.name(),
            options.max_timed_tags,
            work.image.normalized_repository()
        ));
    }
    let architecture = work.family.platform.architecture();
    let (host, repository) = (work.host.as_str(), work.repository.as_str());
    let lookups = tags.iter().map(|tag| async move {
        // The index is read next unless the time is cached: one `GET` by tag
        // instead of `HEAD` plus `GET` by digest.
        let head = match session.resolve_for_read(host, repository, tag).await {
            Ok(head) => head,
            Err(err) if err.is_not_found() => return Ok(None),
            Err(err) => return Err(err),
        };
        let time = creation_time(
            session,
            options,
            host,
            repository,
            &head.digest,
            architecture,
        )
        .await?;
        Ok(time.map(|t| ((*tag).to_owned(), t)))
    });
    let mut out = BTreeMap::new();
    for result in join_all(lookups).await {
        match result {
            Ok(Some((tag, time))) => {
                out.insert(tag, time);
            }
            Ok(None) => {}
            Err(err) => return Err(short(&err)),
        }
    }
    Ok(out)
}

/// An image's creation time (see [`CreationTimes`] for which platform's),
/// from the cache when it has the digest, else read and stored.
async fn creation_time(
    session: &RegistrySession,
    options: &PlanOptions<'_>,
    host: &str,
    repository: &str,
    digest: &str,
    architecture: &str,
) -> Result<Option<(DateTime<Utc>, Clock)>, RegistryError> {
    if let Some(cache) = options.creation_times
        && let Some(known) = cache.get(digest, architecture)
    {
        return Ok(Some((known.time, known.clock)));
    }
    let time = image_time(session, host, repository, digest, architecture).await?;
    if let (Some(cache), Some((time, clock))) = (options.creation_times, time) {
        cache.put(digest, architecture, CreationTime { time, clock });
    }
    Ok(time)
}

/// The creation time of an image by digest for `architecture` (or, lacking
/// it, the first platform the image lists: ordering needs some time, and a
/// tag without the family's platform is rejected later anyway).
/// Reads the index and that one platform only.
async fn image_time(
    session: &RegistrySession,
    host: &str,
    repository: &str,
    digest: &str,
    architecture: &str,
) -> Result<Option<(DateTime<Utc>, Clock)>, RegistryError> {
    let image = session.image_platforms(host, repository, digest).await?;
    let Some(platform) = image
        .platform("linux", architecture)
        .or(image.platforms.first())
    else {
        return Ok(None);
    };
    let platform = session.platform_image(host, repository, platform).await?;
    Ok(platform_time(&platform))
}

/// The creation time of one platform's image: the label first, then the
/// config's `created`.
fn platform_time(platform: &PlatformImage) -> Option<(DateTime<Utc>, Clock)> {
    if let Some(label) = platform.labels.get(CREATED_LABEL)
        && let Ok(time) = DateTime::parse_from_rfc3339(label.trim())
    {
        return Some((time.with_timezone(&Utc), Clock::CreatedLabel));
    }
    platform.created.map(|time| (time, Clock::ConfigCreated))
}

fn revision(platform: &PlatformImage) -> Option<&str> {
    REVISION_LABELS
        .iter()
        .find_map(|label| platform.labels.get(*label))
        .map(String::as_str)
}

/// An error for a family's reasons: an unreachable host is described in the
/// plan's notes, so the family only names it.
fn short(err: &RegistryError) -> String {
    match err {
        RegistryError::Unreachable(u) => {
            format!(
                "{}: {} is unreachable (see the plan notes)",
                u.target, u.host
            )
        }
        other => other.to_string(),
    }
}

/// Content that is broken rather than unreachable: the tag is skipped, not
/// the family failed.
fn is_unusable(err: &RegistryError) -> bool {
    matches!(
        err,
        RegistryError::Invalid { .. }
            | RegistryError::DigestMismatch { .. }
            | RegistryError::NotFound { .. }
    )
}

/// Walks newer tags newest first and returns the first that qualifies:
/// resolvable, old enough, built for the family's platform, and (for
/// commit-named tags) carrying the tag's commit.
async fn first_qualifying(
    work: &mut FamilyWork<'_>,
    session: &RegistrySession,
    options: &PlanOptions<'_>,
    track: &Track,
    newer: &[NewerTag],
    nightly_to_release: bool,
) -> Result<Option<Candidate>, String> {
    let architecture = work.family.platform.architecture();
    let min_age = chrono::Duration::from_std(options.min_age).unwrap_or(chrono::Duration::MAX);
    // Docker Hub's tags API says, without a pull, when each tag was pushed,
    // what it points at and for which platforms: a tag too young or without
    // the family's platform is passed over before its manifest is pulled,
    // and the one that qualifies is read by the digest it names. Unavailable
    // (no such API, unreachable, refused): the registry is asked as before.
    let hub = if newer.is_empty() {
        None
    } else {
        session
            .hub_tags(&work.host, &work.repository)
            .await
            .ok()
            .flatten()
    };
    // Without the tags API every tag examined on Docker Hub costs two pulls
    // (its index and its platform's manifest): one tag per family keeps a
    // proposal at two, and what the text says is too young costs none.
    let scarce = hub.is_none() && work.host == DOCKER_HUB;
    let mut pulled = 0;
    for (examined, newer_tag) in newer.iter().enumerate() {
        let NewerTag { tag, time, clock } = newer_tag;
        let clock = *clock;
        if examined == MAX_EXAMINED {
            work.plan.reasons.push(format!(
                "stopped after {MAX_EXAMINED} newer tags that did not qualify"
            ));
            break;
        }
        let hub_tag = hub.as_ref().and_then(|h| h.get(tag));
        let known_time = time.or(hub_tag.and_then(|h| h.pushed));
        // A build is not older than the date its tag names: one dated too
        // recently is passed over without a read.
        if known_time.is_none()
            && let Some(dated) = text_date(track, tag, options.now)
            && options.now.signed_duration_since(dated) < min_age
        {
            work.plan.reasons.push(format!(
                "{tag}: dated {} in its tag, younger than the minimum {}h; skipped without reading it",
                dated.date_naive(),
                min_age.num_hours()
            ));
            continue;
        }
        if scarce && known_time.is_none() {
            if pulled == SCARCE_READS_PER_FAMILY {
                let rest: Vec<&str> = newer[examined..]
                    .iter()
                    .map(|n| n.tag.as_str())
                    .take(4)
                    .collect();
                work.plan.reasons.push(format!(
                    "deferred: {} older newer tag(s) not read ({}{}): Docker Hub's tags API is unavailable and each read costs 2 pulls; planned again when the newer one qualifies or the API answers",
                    newer.len() - examined,
                    rest.join(", "),
                    if newer.len() - examined > rest.len() { ", …" } else { "" }
                ));
                break;
            }
            pulled += 1;
        }
        if let Some(known) = known_time {
            let age = options.now.signed_duration_since(known);
            if age < min_age {
                work.plan.reasons.push(format!(
                    "{tag}: only {}h old (minimum {}h); skipped",
                    age.num_hours().max(0),
                    min_age.num_hours()
                ));
                continue;
            }
        }
        if let Some(info) = hub_tag
            && info.has_platform("linux", architecture) == Some(false)
        {
            let have: Vec<String> = info
                .platforms
                .iter()
                .map(|p| format!("{}/{}", p.os, p.architecture))
                .collect();
            work.plan.reasons.push(format!(
                "{tag}: no linux/{architecture} image (Docker Hub lists {}); skipped",
                have.join(", ")
            ));
            continue;
        }
        // Docker Hub: a free `HEAD` confirms that the tag points where the
        // tags API says, and the API names the family's platform manifest,
        // so that manifest is the only pull. Should the two disagree, the
        // registry's answer is read as without the API.
        let mut from_hub = None;
        let mut registry_digest = None;
        if let Some(info) = hub_tag
            && let Some(hub_digest) = &info.digest
            && let Some(platform) = info
                .platforms
                .iter()
                .find(|p| p.os == "linux" && p.architecture == architecture)
        {
            // The platform manifest the API names is read while the HEAD
            // confirms the digest, not after: the session keeps the answer
            // for the read below, and should the two disagree it is the one
            // read the registry's own answer makes unnecessary.
            let (head, _) = futures::join!(
                session.head_manifest(&work.host, &work.repository, tag),
                session.platform_image(&work.host, &work.repository, platform)
            );
            match head {
                Ok(head) if head.digest == *hub_digest => {
                    from_hub = Some((head.digest, platform.clone()));
                }
                Ok(head) => {
                    work.plan.reasons.push(format!(
                        "{tag}: Docker Hub's tags API says {hub_digest}, the registry serves {}; read from the registry",
                        head.digest
                    ));
                    registry_digest = Some(head.digest);
                }
                Err(err) if err.is_not_found() => {
                    work.plan
                        .reasons
                        .push(format!("{tag}: listed but not resolvable; skipped"));
                    continue;
                }
                Err(err) => return Err(err.to_string()),
            }
        }
        let (digest, platform) = match from_hub {
            Some(found) => found,
            None => {
                let digest = match registry_digest {
                    Some(digest) => digest,
                    None => match session
                        .resolve_for_read(&work.host, &work.repository, tag)
                        .await
                    {
                        Ok(head) => head.digest,
                        Err(err) if err.is_not_found() => {
                            work.plan
                                .reasons
                                .push(format!("{tag}: listed but not resolvable; skipped"));
                            continue;
                        }
                        Err(err) => return Err(err.to_string()),
                    },
                };
                let image = match session
                    .image_platforms(&work.host, &work.repository, &digest)
                    .await
                {
                    Ok(image) => image,
                    Err(err) if is_unusable(&err) => {
                        work.plan
                            .reasons
                            .push(format!("{tag}: unusable image ({err}); skipped"));
                        continue;
                    }
                    Err(err) => return Err(err.to_string()),
                };
                let Some(platform) = image.platform("linux", architecture) else {
                    let have = image.names();
                    work.plan.reasons.push(format!(
                        "{tag}: no linux/{architecture} image (has {}); skipped",
                        if have.is_empty() {
                            "none".to_owned()
                        } else {
                            have.join(", ")
                        }
                    ));
                    continue;
                };
                (digest, platform.clone())
            }
        };
        // Only the family's platform is read: the others' labels and times
        // cannot change the verdict.
        let platform = match session
            .platform_image(&work.host, &work.repository, &platform)
            .await
        {
            Ok(platform) => platform,
            Err(err) if is_unusable(&err) => {
                work.plan.reasons.push(format!(
                    "{tag}: unusable linux/{architecture} image ({err}); skipped"
                ));
                continue;
            }
            Err(err) => return Err(err.to_string()),
        };
        let (time, used_clock) = match known_time {
            Some(time) => (Some(time), clock),
            None => match platform_time(&platform) {
                Some((time, label_clock)) => (
                    Some(time),
                    if clock == Clock::TagText {
                        clock
                    } else {
                        label_clock
                    },
                ),
                None => (None, clock),
            },
        };
        let Some(time) = time else {
            work.plan.reasons.push(format!(
                "{tag}: no push or creation time, so its age is unknown; skipped"
            ));
            continue;
        };
        let age = options.now.signed_duration_since(time);
        // Without Docker Hub's tags API the text chose this tag and its age
        // was judged by the date it names, if any: the pull only resolves
        // its digest. Vetoing it now would spend the pulls on nothing and
        // leave the older tags unread for want of budget.
        let by_text = scarce && known_time.is_none() && clock == Clock::TagText;
        if age < min_age && by_text {
            work.plan.reasons.push(format!(
                "{tag}: proposed by its tag text (Docker Hub's tags API is unavailable); its image says it is {}h old, under the minimum {}h, which only push times could check without spending pulls",
                age.num_hours().max(0),
                min_age.num_hours()
            ));
        } else if age < min_age {
            work.plan.reasons.push(format!(
                "{tag}: only {}h old (minimum {}h); skipped",
                age.num_hours().max(0),
                min_age.num_hours()
            ));
            continue;
        }
        let tag_commit = track.matches(tag).and_then(|p| p.commit);
        let label = revision(&platform).map(str::to_owned);
        if let Some(commit) = &tag_commit {
            match &label {
                Some(label) if !commit_matches(commit, label) => {
                    work.plan
                        .reasons
                        .push(format!("{tag}: revision label {label} does not match the tag's commit {commit}; disqualified"));
                    continue;
                }
                None if commit.len() == 40 => {
                    work.plan.reasons.push(format!(
                        "{tag}: no revision label to prove the tag's commit {commit}; disqualified"
                    ));
                    continue;
                }
                _ => {}
            }
        }
        let image = work
            .image
            .with_reference(Some(tag), Some(&digest))
            .map_err(|e| format!("{tag}: {e}"))?;
        return Ok(Some(Candidate {
            image,
            tag: tag.clone(),
            digest,
            revision: label,
            time: Some(time),
            clock: used_clock,
            nightly_to_release,
            versions: crate::provenance::ImageVersions::of(&platform),
        }));
    }
    Ok(None)
}

/// Tags whose image is read per family while Docker Hub's pulls are spent
/// without its tags API.
const SCARCE_READS_PER_FAMILY: usize = 1;

/// The date a tag's text names (a year-less one in the year of `now`), at
/// its start: the build cannot be older than that day.
fn text_date(track: &Track, tag: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let position = track.matches(tag)?;
    let key = if track.needs_time_for_key() {
        position.key_at(now)?
    } else {
        position.key?
    };
    key.date.map(|d| d.and_utc())
}

/// For a nightly family: the newest release on the repository's configured
/// release track that provably contains the nightly's commit.
async fn release_candidate(
    work: &mut FamilyWork<'_>,
    session: &RegistrySession,
    options: &PlanOptions<'_>,
    commit: &str,
    tags: &[String],
) -> Result<Option<Candidate>, String> {
    let normalized_repository = work.image.normalized_repository();
    let nightly_track = work.plan.track.clone().unwrap_or_default();
    let Some(rule) = options.release_rules.iter().find(|r| {
        r.track.repository() == normalized_repository
            && r.nightly_track
                .as_ref()
                .is_none_or(|name| *name == nightly_track)
    }) else {
        return Ok(None);
    };
    let track = rule.track.track();
    let mut releases: Vec<_> = tags
        .iter()
        .filter_map(|t| track.matches(t).and_then(|p| p.key).map(|k| (k, t.clone())))
        .collect();
    releases.sort_by(|a, b| b.0.cmp(&a.0));
    let Some((_, newest)) = releases.first() else {
        return Ok(None);
    };
    let Some(source) = options.upstream.get(&normalized_repository) else {
        work.plan.reasons.push(format!(
            "release {newest} not considered: no upstream source repository configured for {normalized_repository}"
        ));
        return Ok(None);
    };
    let Some(compare) = options.compare else {
        work.plan.reasons.push(format!(
            "release {newest} not considered: cannot compare it with commit {commit} in {source}"
        ));
        return Ok(None);
    };
    match compare.release_contains(source, newest, commit).await {
        Ok(Some(true)) => {
            let newer = [NewerTag {
                tag: newest.clone(),
                time: None,
                clock: Clock::TagText,
            }];
            let candidate = first_qualifying(work, session, options, track, &newer, true).await?;
            Ok(candidate)
        }
        Ok(Some(false)) => {
            work.plan
                .reasons
                .push(format!("release {newest} is behind the nightly's commit {commit} in {source}; staying on nightlies"));
            Ok(None)
        }
        Ok(None) | Err(_) => {
            work.plan.reasons.push(format!(
                "release {newest} not proven to contain commit {commit} in {source}; skipped"
            ));
            Ok(None)
        }
    }
}

/// Picks the families a maintainer asked to run now (`run_first`, on top
/// of the budget), then at most `max_candidates`: pruned families first, then the oldest
/// current images (by the plan's clock; families behind by more tags first
/// when no clock says), skipping occupied and cooling-down families, and at
/// most half the slots (rounded up) per image repository so one upstream
/// release cannot take the whole wave.
///
/// A family group (members sharing in-repository recipes) is one unit: it
/// is picked once, under its first member, and only when no member is
/// occupied or cooling down — bumping one member rewrites the others'
/// recipes. A group whose members run different images cannot be bumped
/// until aligned (the repository's warnings say how), so it is skipped.
fn select(
    families: &[FamilyPlan],
    repository: &Repository,
    options: &PlanOptions<'_>,
) -> Vec<Selected> {
    // Retired, duplicate and occupied families (see [`Blocked`]) are held
    // back like claimed ones, for groups as well.
    let blocked = |f: &FamilyPlan| {
        f.blocked.is_some()
            || options.occupied.contains(&f.id)
            || options.cooling_down.contains(&f.id)
    };
    let by_family: HashMap<&str, &FamilyPlan> =
        families.iter().map(|f| (f.family.as_str(), f)).collect();
    let mut stale: Vec<&FamilyPlan> = families
        .iter()
        .filter(|f| f.candidate.is_some())
        .filter(|f| !blocked(f))
        .collect();
    let first = |f: &FamilyPlan| options.max_candidates > 0 && options.run_first.contains(&f.id);
    stale.sort_by(|a, b| {
        let pruned = |f: &FamilyPlan| f.status != Status::StalePruned;
        first(b)
            .cmp(&first(a))
            .then_with(|| pruned(a).cmp(&pruned(b)))
            .then_with(|| match (a.current_time, b.current_time) {
                (Some(x), Some(y)) => x.cmp(&y),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            })
            .then_with(|| b.newer_count.cmp(&a.newer_count))
            .then_with(|| a.family.cmp(&b.family))
    });
    let per_repository = options.max_candidates.div_ceil(2).max(1);
    let mut taken: BTreeMap<String, usize> = BTreeMap::new();
    let mut groups_seen: BTreeSet<&str> = BTreeSet::new();
    let mut selected = Vec::new();
    // Run-now picks come first and ride on top of the budget.
    let mut asked_taken = 0;
    for family in stale {
        let asked = first(family);
        if !asked && selected.len() - asked_taken >= options.max_candidates {
            break;
        }
        let Some(candidate) = &family.candidate else {
            continue;
        };
        let (lead, members) = match repository.group_of(&family.family) {
            None => (family, Vec::new()),
            Some(group) => {
                let Some(first) = group.families.first() else {
                    continue;
                };
                if !group.same_image || !groups_seen.insert(first.as_str()) {
                    continue;
                }
                let plans: Option<Vec<&FamilyPlan>> = group
                    .families
                    .iter()
                    .map(|m| by_family.get(m.as_str()).copied())
                    .collect();
                match plans {
                    Some(plans) if !plans.iter().any(|p| blocked(p)) => {
                        (plans[0], group.families.clone())
                    }
                    _ => continue,
                }
            }
        };
        let image_repository = candidate.image.normalized_repository();
        let count = taken.entry(image_repository).or_default();
        // A family asked for by name is neither limited by nor counted
        // against its image repository's share.
        if !asked {
            if *count >= per_repository {
                continue;
            }
            *count += 1;
        }
        asked_taken += usize::from(asked);
        selected.push(Selected {
            family: lead.family.clone(),
            members,
            id: candidate_id(&lead.id, &candidate.image.normalized()),
            image: candidate.image.to_string(),
        });
    }
    selected
}

fn display<S: serde::Serializer, T: std::fmt::Display>(value: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(value)
}
