//! Staleness and candidate selection (see `klaud_planner::tracks`): for every family, is
//! there a newer image on its track, is it safe, and exactly which digest?
//!
//! Request discipline: each upstream repository's tags are listed once per
//! plan and each tag resolved once (the [`RegistrySession`] single-flights
//! them), a current tag on a track is checked against that listing (only a
//! digest-pinned or track-less one is `HEAD`ed), and manifests and configs
//! are fetched only for candidate tags — newest first, stopping at the first
//! that qualifies — and for tags whose order needs their creation time
//! (read concurrently, cached by digest). Where Docker Hub's tags API tells
//! a candidate's digest, push time and platforms, nothing of it is read
//! unless its tag names a commit to prove ([`Candidate::image_read`]).

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
use crate::retired::{ArchiveText, Archived, Retirements};
use crate::tracks::{
    Track, TrackOrdering, TrackRule, TrackSource, base_change_sentence, commit_matches, track_for,
};

mod select;
use select::*;

mod order;
pub(crate) use order::revision;
use order::*;

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
    /// The index digest that is pinned: the registry's answer, or where
    /// the image was not read ([`Candidate::image_read`]) the one Docker
    /// Hub's tags API names.
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
    /// Whether the plan read the image itself. Where Docker Hub's tags API
    /// names the tag's digest, push time and platforms, nothing else the
    /// plan decides needs a read: such a candidate's `versions` and
    /// `revision` are left unread, and a wave reads them for the picks it
    /// works on ([`crate::provenance::declared`]), as it reads the old
    /// image's, and checks that the registry serves the pinned digest
    /// ([`crate::provenance::tag_digest`]) before it acts on one.
    #[serde(skip_serializing_if = "is_true")]
    pub image_read: bool,
}

fn is_true(value: &bool) -> bool {
    *value
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
    /// On Docker Hub without its tags API: the newer tag whose age only a
    /// read of its image tells, left unread for the plan's pull budget
    /// (see [`read_parked`]).
    #[serde(skip)]
    parked: Option<String>,
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
        let base = Retirements::base(repository);
        let models = Retirements::models_md(&base);
        // The archive's files are read now, and the few entries that decide
        // whether a repository is read first parsed alone; the whole parse
        // runs on a blocking thread while those reads are in flight.
        let archive = std::sync::Arc::new(ArchiveText::read(&base));
        let registry = session.client().config();
        let first = first_read_repositories(all, &models, &archive, options, registry);
        let planning = async {
            let retirements = &models.with_archive(read_archive(archive).await);
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
                        plan_family(&all[i], session, options, false).await
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
            planned
        };
        // The archive of retired keys is parsed while the reads every plan
        // starts with are in flight, not before them.
        let ((), mut planned) = futures::join!(first_reads(first, session), planning);
        let pulls_before = before_by_host.get(DOCKER_HUB).map_or(0, |c| c.manifest_get);
        read_parked(all, &mut planned, session, options, pulls_before).await;
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

/// Docker Hub without its tags API: every manifest `GET` is a pull, and a
/// tag whose text names no date has only its image to tell its age. The
/// families parked on such a tag (the plan's first pass reads none) are
/// planned again, tag by tag in repository order, only while the pulls
/// the plan made stay within two per proposed image (its index and its
/// platform's manifest), and within the quota Docker Hub last stated; one
/// tag's read that may end refused is allowed only while nothing is
/// proposed, so a site without the API still moves. The rest stay
/// deferred, saying so: the next plan reads them, and what this one read is
/// free there (kept by digest), which leaves their pulls to the deferred.
async fn read_parked(
    all: &[Family],
    planned: &mut [Option<FamilyPlan>],
    session: &RegistrySession,
    options: &PlanOptions<'_>,
    pulls_before: u64,
) {
    // Families waiting on one tag share its read: they are granted together.
    let mut waiting: Vec<((String, String), Vec<usize>)> = Vec::new();
    for (i, plan) in planned.iter().enumerate() {
        let Some(tag) = plan.as_ref().and_then(|p| p.parked.clone()) else {
            continue;
        };
        let key = (all[i].image().repository(), tag);
        match waiting.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(i),
            None => waiting.push((key, vec![i])),
        }
    }
    while !waiting.is_empty() {
        let proposed: BTreeSet<(String, &str)> = planned
            .iter()
            .flatten()
            .filter_map(|p| {
                let c = p.candidate.as_ref()?;
                (c.image.registry() == DOCKER_HUB).then(|| {
                    (
                        format!("{}:{}", c.image.normalized_repository(), c.tag),
                        p.architecture,
                    )
                })
            })
            .collect();
        let spent = session
            .client()
            .counts_by_host()
            .get(DOCKER_HUB)
            .map_or(0, |c| c.manifest_get)
            .saturating_sub(pulls_before);
        // A read costs the tag's index and one manifest per platform asked.
        let read_cost = |members: &[usize]| {
            let platforms: BTreeSet<&str> = members
                .iter()
                .map(|&i| all[i].platform.architecture())
                .collect();
            1 + platforms.len() as u64
        };
        // A read that may end refused is allowed only while nothing is
        // proposed: then the plan's pulls stay within two per proposal
        // whatever the tags turn out to be. Reads are kept by digest, so a
        // proposal the next plan finds in the store costs no pull and
        // leaves room for the tags this one deferred.
        let refusable = read_cost(&waiting[0].1);
        let speculation = if proposed.is_empty() { refusable } else { 0 };
        let budget = (2 * proposed.len() as u64 + speculation).saturating_sub(spent);
        let left = session.client().pulls_left(DOCKER_HUB);
        let budget = left.map_or(budget, |left| budget.min(left));
        let mut granted = Vec::new();
        let mut cost = 0;
        while let Some((_, members)) = waiting.first() {
            let read = read_cost(members);
            if cost + read > budget {
                break;
            }
            cost += read;
            granted.extend(waiting.remove(0).1);
        }
        if granted.is_empty() {
            // The quota, not the proposals, held the reads back: say so.
            if let Some(left) = left.filter(|&left| left < refusable) {
                for &i in waiting.iter().flat_map(|(_, members)| members) {
                    if let Some(plan) = planned[i].as_mut() {
                        plan.reasons.push(format!(
                            "Docker Hub's quota has {left} pull(s) left in its window; a plan never pulls past it"
                        ));
                    }
                }
            }
            break;
        }
        let replanned = join_all(
            granted
                .iter()
                .map(|&i| plan_family(&all[i], session, options, true)),
        )
        .await;
        for (i, plan) in granted.into_iter().zip(replanned) {
            planned[i] = Some(plan);
        }
    }
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
                for p in &info.platforms {
                    known
                        .platform_digests
                        .insert(p.architecture.clone(), p.digest.clone());
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
                    known
                        .platform_digests
                        .insert(platform.architecture.clone(), platform.digest.clone());
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
    /// Whether a tag whose age only its image tells may be read where
    /// every manifest `GET` is a pull (Docker Hub without its tags API);
    /// otherwise the family is parked on it.
    speculative: bool,
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
        parked: None,
    }
}

/// The keys archived under `configs/deprecated/` (see
/// [`ArchiveText::parse`]), parsed on a blocking thread: on InferenceX
/// about half a megabyte of YAML, 20-35 ms of CPU that would otherwise
/// hold back every request of the plan.
async fn read_archive(archive: std::sync::Arc<ArchiveText>) -> Archived {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        let on_thread = std::sync::Arc::clone(&archive);
        if let Ok(parsed) = runtime.spawn_blocking(move || on_thread.parse()).await {
            return parsed;
        }
    }
    // No runtime with a blocking pool, or its task died: parse it here.
    archive.parse()
}

/// The image repositories whose first reads (tag list, Docker Hub's push
/// times) are asked while the archive is parsed: those of families on a
/// track that MODELS.md does not retire and no ignore rule holds, and
/// that the archive does not retire. A family whose key opens a line of
/// the archive is judged by its key's entries parsed alone, and only when
/// no other family already brings its repository in: on InferenceX a
/// third of the live keys are archived for a scenario they no longer run.
/// Only as many per registry host as it answers at once (its tags API
/// pages count there too), the first in the order families are planned
/// in: more would queue ahead of the first families' next reads (with 500
/// repositories, a plan 7% slower).
fn first_read_repositories(
    all: &[Family],
    models: &Retirements,
    archive: &ArchiveText,
    options: &PlanOptions<'_>,
    registry: &crate::registry::RegistryConfig,
) -> BTreeSet<(String, String)> {
    let on_track = all
        .iter()
        .filter(|f| models.reason(f).is_none() && options.ignore.family(f).is_none())
        .filter_map(|f| {
            let image = f.image();
            let tag = image.tag()?;
            track_for(&image.normalized_repository(), tag, &options.rules)
                .ok()
                .flatten()?;
            Some((f, (image.registry().to_owned(), image.repository())))
        });
    let (archived, unarchived): (Vec<_>, Vec<_>) =
        on_track.partition(|(f, _)| archive.contains(&f.key));
    let mut repositories: BTreeSet<(String, String)> =
        unarchived.into_iter().map(|(_, key)| key).collect();
    for (family, key) in archived {
        if !repositories.contains(&key) && archive.retires(family) != Some(true) {
            repositories.insert(key);
        }
    }
    let mut in_flight: BTreeMap<&str, usize> = BTreeMap::new();
    repositories
        .iter()
        .filter(|(host, _)| {
            let requests = 1 + usize::from(registry.hub_api_for(host).is_some());
            let taken = in_flight.entry(host).or_default();
            *taken += requests;
            *taken <= registry.concurrency.max(requests)
        })
        .cloned()
        .collect()
}

/// Asks what [`examine`] asks first for each of `repositories`; the
/// session keeps the answers (failures included) for it.
async fn first_reads(repositories: BTreeSet<(String, String)>, session: &RegistrySession) {
    use futures::StreamExt as _;
    futures::stream::iter(repositories)
        .for_each_concurrent(None, |(host, repository)| async move {
            let _ = list_with_push_times(session, &host, &repository).await;
        })
        .await;
}

/// The repository's tag list, with Docker Hub's push times asked beside
/// it rather than after it where its tags API may answer: a family on
/// Docker Hub needs them whenever anything is newer, and a registry
/// across the internet makes every request that waits on another cost a
/// round trip. The push times' answer is kept in the session; a failure
/// is handled where they are used.
async fn list_with_push_times(
    session: &RegistrySession,
    host: &str,
    repository: &str,
) -> Result<std::sync::Arc<Vec<String>>, RegistryError> {
    let hub = async {
        if session.client().config().hub_api_for(host).is_some() {
            let _ = session.hub_push_times(host, repository).await;
        }
    };
    let (listed, ()) = futures::join!(session.list_tags(host, repository), hub);
    listed
}

async fn plan_family(
    family: &Family,
    session: &RegistrySession,
    options: &PlanOptions<'_>,
    speculative: bool,
) -> FamilyPlan {
    let image = family.image();
    let mut work = FamilyWork {
        family,
        image,
        speculative,
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
            parked: None,
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
    let tags = match &track {
        Some(_) => Some(
            list_with_push_times(session, &work.host, &work.repository)
                .await
                .map_err(|e| short(&e))?,
        ),
        None => None,
    };
    // A tag pinned by digest and still listed is asked for only to say
    // whether it moved, which changes nothing else the plan reads: that
    // answer is awaited beside the track's own reads, not before them.
    let moved_only =
        work.image.digest().is_some() && tags.as_ref().is_some_and(|t| t.contains(&tag));
    let mut pruned = false;
    // A registry that lists no tags at all (`{"tags": null}` or `[]`) says
    // nothing about the current one: its own HEAD decides whether it is gone.
    let listed_none = tags.as_ref().is_some_and(|t| t.is_empty());
    match &tags {
        Some(tags) if work.image.digest().is_none() && !tags.is_empty() => {
            if !tags.contains(&tag) {
                pruned = true;
                work.plan.reasons.push(pruned_reason(&tag));
            }
        }
        _ if moved_only => {}
        _ => match session
            .head_manifest(&work.host, &work.repository, &tag)
            .await
        {
            Ok(head) => {
                if let Some(pinned) = work.image.digest()
                    && pinned != head.digest
                {
                    work.plan
                        .reasons
                        .push(moved_reason(&tag, pinned, &head.digest));
                }
            }
            Err(err) if err.is_not_found() => {
                pruned = true;
                work.plan.reasons.push(pruned_reason(&tag));
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
    if !moved_only {
        return examine_track(work, session, options, &track, &tags, &tag, pruned).await;
    }
    let image = work.image;
    let (host, repository) = (work.host.clone(), work.repository.clone());
    let before = work.plan.clone();
    let (head, examined) = futures::join!(
        session.head_manifest(&host, &repository, &tag),
        examine_track(work, session, options, &track, &tags, &tag, false)
    );
    match head {
        Ok(head) => {
            if let Some(pinned) = image.digest()
                && pinned != head.digest
            {
                work.plan
                    .reasons
                    .insert(0, moved_reason(&tag, pinned, &head.digest));
            }
            examined
        }
        // Listed, yet gone when asked: pruned after all, and planned so.
        Err(err) if err.is_not_found() => {
            work.plan = before;
            work.plan.reasons.push(pruned_reason(&tag));
            examine_track(work, session, options, &track, &tags, &tag, true).await
        }
        Err(err) => {
            work.plan = before;
            Err(short(&err))
        }
    }
}

fn pruned_reason(tag: &str) -> String {
    format!("current tag {tag} is gone from the registry (pruned)")
}

fn moved_reason(tag: &str, pinned: &str, served: &str) -> String {
    format!(
        "tag {tag} moved: pinned {pinned}, the registry now serves {served}; not bumped for that alone"
    )
}

/// The rest of [`examine`] once the current tag's fate is known: the track
/// ordered, a candidate chosen, and the family's status and reasons set.
#[allow(clippy::too_many_arguments)]
async fn examine_track(
    work: &mut FamilyWork<'_>,
    session: &RegistrySession,
    options: &PlanOptions<'_>,
    track: &Track,
    tags: &[String],
    tag: &str,
    pruned: bool,
) -> Result<(), String> {
    work.plan.track = Some(track.name().to_owned());
    let Some(current_position) = track.matches(tag) else {
        return Err(format!(
            "tag {tag} does not match its own track {}",
            track.name()
        ));
    };

    let ordered = order_track(
        work,
        session,
        options,
        track,
        tag,
        &current_position,
        pruned,
        tags,
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
        release = release_candidate(work, session, options, commit, tags).await?;
    }
    let chosen = match release {
        Some(candidate) => Some(candidate),
        None => first_qualifying(work, session, options, track, &ordered.newer, false).await?,
    };
    if let Some(candidate) = &chosen {
        // A move to another ROCm or CUDA is a change of its own that the
        // maintainer must see, not only a newer build.
        if let Some(sentence) = base_change_sentence(tag, &candidate.tag) {
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
        let reference = chosen.as_ref().map_or(tag, |c| c.tag.as_str());
        if let Some(note) = pinned_base_note(track, reference, tags) {
            work.plan.reasons.push(note);
        }
    }
    if chosen.is_none() && !pruned && work.plan.parked.is_none() {
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

fn display<S: serde::Serializer, T: std::fmt::Display>(value: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(value)
}

#[cfg(test)]
mod first_read_tests {
    use super::*;
    use crate::registry::RegistryConfig;

    /// A checkout of `n` families, each on its own repository of `host`.
    fn checkout(host: &str, n: usize) -> (tempfile::TempDir, Repository) {
        let dir = tempfile::tempdir().unwrap();
        let master: String = (0..n)
            .map(|i| {
                format!(
                    "f{i:02}-fp8-b200-vllm:\n  image: {host}/klaud/r{i:02}:v0.25.0\n  model: demo/Demo\n  model-prefix: demo\n  runner: b200\n  precision: fp8\n  framework: vllm\n  multinode: false\n  scenarios:\n    fixed-seq-len:\n    - isl: 1024\n      osl: 1024\n      search-space:\n      - {{ tp: 8, conc-start: 4, conc-end: 64 }}\n"
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::create_dir_all(dir.path().join("configs")).unwrap();
        std::fs::write(dir.path().join("configs/nvidia-master.yaml"), master).unwrap();
        let repository = Repository::open(dir.path()).unwrap();
        (dir, repository)
    }

    #[test]
    fn first_reads_fill_one_round_of_each_host_in_planning_order() {
        let options = PlanOptions::new(Utc::now());
        let registry = RegistryConfig::default();
        let first = |families: &[Family], archive: &ArchiveText| {
            let models = Retirements::default();
            first_read_repositories(families, &models, archive, &options, &registry)
                .into_iter()
                .map(|(_, repository)| repository)
                .collect::<Vec<_>>()
        };
        let none = ArchiveText::default();
        // Docker Hub: a tag list and a tags API page per repository.
        let (_dir, repository) = checkout("docker.io", 20);
        let names = first(repository.families(), &none);
        assert_eq!(names.len(), registry.concurrency / 2, "{names:?}");
        assert_eq!(names.first().map(String::as_str), Some("klaud/r00"));
        // Elsewhere a tag list alone.
        let (dir, repository) = checkout("ghcr.io", 20);
        let names = first(repository.families(), &none);
        assert_eq!(names.len(), registry.concurrency, "{names:?}");
        // Archived keys, each entry judged alone: with every scenario the
        // family runs (retired: not read first), for another scenario
        // only (live), and by an alias to an anchor of another entry (only
        // the whole parse can tell: read first).
        let deprecated = dir.path().join("configs/deprecated");
        std::fs::create_dir_all(&deprecated).unwrap();
        let entry = |key: &str, isl: u32| {
            format!("{key}:\n  scenarios:\n    fixed-seq-len:\n    - isl: {isl}\n      osl: 1024\n")
        };
        let archive = format!(
            "{}{}anchor-holder:\n  scenarios: &runs\n    fixed-seq-len:\n    - isl: 1024\n      osl: 1024\nf02-fp8-b200-vllm:\n  scenarios: *runs\n",
            entry("f00-fp8-b200-vllm", 1024),
            entry("f01-fp8-b200-vllm", 8192),
        );
        std::fs::write(deprecated.join("x.yaml"), archive).unwrap();
        let archive = ArchiveText::read(dir.path());
        let names = first(&repository.families()[..4], &archive);
        assert_eq!(names, ["klaud/r01", "klaud/r02", "klaud/r03"]);
        // The whole parse agrees on the first two and retires the third.
        let parsed = Retirements::default().with_archive(archive.parse());
        let retired: Vec<bool> = repository.families()[..3]
            .iter()
            .map(|f| parsed.reason(f).is_some())
            .collect();
        assert_eq!(retired, [true, false, true]);
    }
}
