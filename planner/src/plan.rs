//! Staleness and candidate selection (spec §3.2–3.3): for every family, is
//! there a newer image on its track, is it safe, and exactly which digest?
//!
//! Request discipline: each upstream repository's tags are listed once per
//! plan and each tag resolved once (the [`RegistrySession`] single-flights
//! them), a current tag is only `HEAD`ed, and manifests and configs are
//! fetched only for candidate tags — newest first, stopping at the first
//! that qualifies.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::future::join_all;
use serde::Serialize;

use crate::identity::candidate_id;
use crate::image::ImageRef;
use crate::registry::{PlatformImage, RegistryError, RegistrySession, RequestCounts};
use crate::repo::{Family, Repository};
use crate::tracks::{Track, TrackOrdering, TrackRule, commit_matches, track_for};

/// Image labels that carry the upstream commit an image was built from.
pub const REVISION_LABELS: &[&str] = &["org.opencontainers.image.revision", "ai.vllm.build.commit"];
/// Label with the image's creation time.
pub const CREATED_LABEL: &str = "org.opencontainers.image.created";
/// Candidate tags examined at most per family (newest first) before giving up.
const MAX_EXAMINED: usize = 12;
/// On a push-ordered track without push times every matching tag needs its
/// image config to be ordered; beyond this many the family is an error.
const MAX_UNTIMED_TAGS: usize = 40;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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
}

/// The plan for one family.
#[derive(Debug, Clone, Serialize)]
pub struct FamilyPlan {
    /// `configs/<x>-master.yaml:<key>`.
    pub family: String,
    /// Family id.
    pub id: String,
    /// Status.
    pub status: Status,
    /// The current image, as written.
    pub current: String,
    /// The track name, when the tag has one.
    pub track: Option<String>,
    /// The chosen image, if any.
    pub candidate: Option<Candidate>,
    /// The clock used to order the track, if any.
    pub clock: Option<Clock>,
    /// Why, in plain words: skipped tags, moved tags, errors.
    pub reasons: Vec<String>,
    /// When the current image was made, as far as the plan knows (orders
    /// the selection: older images first).
    #[serde(skip)]
    current_time: Option<DateTime<Utc>>,
    /// How many qualifying-looking tags are newer than the current one.
    #[serde(skip)]
    newer_count: usize,
}

/// A candidate chosen for this wave.
#[derive(Debug, Clone, Serialize)]
pub struct Selected {
    /// The family.
    pub family: String,
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
    /// The fewest requests any correct plan could have made: one tag listing
    /// per listed repository, one `HEAD` per distinct current tag, plus the
    /// candidate lookups.
    pub minimum: RequestCounts,
    /// Wall time of the plan.
    pub elapsed_ms: u64,
}

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
    ) -> Result<Option<bool>, String>;
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
    /// Called after each family is planned with (done, total).
    pub progress: Option<&'a (dyn Fn(usize, usize) + Sync)>,
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
            progress: None,
        }
    }
}

/// Plans every family of `repository` against the registries.
pub async fn plan(
    repository: &Repository,
    session: &RegistrySession,
    options: &PlanOptions<'_>,
) -> PlanReport {
    let started = Instant::now();
    let before = session.client().counts();
    let total = repository.families().len();
    let done = std::sync::atomic::AtomicUsize::new(0);
    let families = join_all(repository.families().iter().map(|family| async {
        let result = plan_family(family, session, options).await;
        let finished = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if let Some(progress) = options.progress {
            progress(finished, total);
        }
        result
    }))
    .await;
    let candidates = select(&families, options);
    let after = session.client().counts();
    PlanReport {
        minimum: minimum_requests(repository, &families),
        families,
        candidates,
        requests: subtract(after, before),
        elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    }
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

/// The request floor: every listed repository once, every distinct current
/// tag once, and for every chosen candidate its `HEAD`, one index per
/// distinct digest, and one platform manifest and one config per distinct
/// digest and platform (families on other platforms need theirs).
fn minimum_requests(repository: &Repository, families: &[FamilyPlan]) -> RequestCounts {
    let mut listed = BTreeSet::new();
    let mut heads = BTreeSet::new();
    for (family, plan) in repository.families().iter().zip(families) {
        let image = family.image();
        if image.tag().is_some() {
            heads.insert(image.normalized_repository() + ":" + image.tag().unwrap_or_default());
        }
        if plan.track.is_some() && plan.status != Status::Error {
            listed.insert(image.normalized_repository());
        }
    }
    let mut candidate_heads = BTreeSet::new();
    let mut candidate_digests = BTreeSet::new();
    let mut candidate_platforms = BTreeSet::new();
    for (family, plan) in repository.families().iter().zip(families) {
        if let Some(candidate) = &plan.candidate {
            candidate_heads.insert(candidate.image.normalized_repository() + ":" + &candidate.tag);
            candidate_digests.insert(candidate.digest.clone());
            candidate_platforms.insert((candidate.digest.clone(), family.platform));
        }
    }
    let digests = candidate_digests.len() as u64;
    let platforms = candidate_platforms.len() as u64;
    RequestCounts {
        manifest_head: (heads.len() + candidate_heads.len()) as u64,
        manifest_get: digests + platforms,
        blob_get: platforms,
        tags_list: listed.len() as u64,
        ..RequestCounts::default()
    }
}

struct FamilyWork<'a> {
    family: &'a Family,
    image: &'a ImageRef,
    host: String,
    repository: String,
    plan: FamilyPlan,
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
            status: Status::UpToDate,
            current: image.to_string(),
            track: None,
            candidate: None,
            clock: None,
            reasons: Vec::new(),
            current_time: None,
            newer_count: 0,
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

    // The current tag: HEAD only.
    let mut pruned = false;
    match session
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
        Err(err) => return Err(err.to_string()),
    }

    let Some(track) = track else {
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

    let tags = session
        .list_tags(&work.host, &work.repository)
        .await
        .map_err(|e| e.to_string())?;
    let ordered = order_track(
        work,
        session,
        &track,
        &tag,
        current_position.key.as_ref(),
        pruned,
        &tags,
    )
    .await?;
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
        None => {
            first_qualifying(
                work,
                session,
                options,
                &track,
                &ordered.newer,
                ordered.clock,
                false,
            )
            .await?
        }
    };
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

struct OrderedTags {
    /// Newer tags on the track, newest first, with their time when known.
    newer: Vec<(String, Option<DateTime<Utc>>)>,
    clock: Clock,
    current_time: Option<DateTime<Utc>>,
}

async fn order_track(
    work: &mut FamilyWork<'_>,
    session: &RegistrySession,
    track: &Track,
    current_tag: &str,
    current_key: Option<&crate::tracks::SortKey>,
    pruned: bool,
    tags: &[String],
) -> Result<OrderedTags, String> {
    let on_track: Vec<(&String, crate::tracks::TagPosition)> = tags
        .iter()
        .filter(|t| t.as_str() != current_tag)
        .filter_map(|t| track.matches(t).map(|p| (t, p)))
        .collect();
    if track.ordering() != TrackOrdering::Pushed {
        let current_key = current_key.ok_or("an ordered track gave the current tag no key")?;
        let mut newer: Vec<_> = on_track
            .into_iter()
            .filter_map(|(t, p)| p.key.filter(|k| k > current_key).map(|k| (k, t.clone())))
            .collect();
        newer.sort_by(|a, b| b.0.cmp(&a.0));
        let current_time = current_key.date.map(|d| d.and_utc());
        return Ok(OrderedTags {
            newer: newer.into_iter().map(|(_, t)| (t, None)).collect(),
            clock: Clock::TagText,
            current_time,
        });
    }

    // Push-ordered: Docker Hub's push times when the registry offers them.
    // When the Hub API fails the images' creation times still order the
    // track, so the family degrades instead of failing.
    let push_times = match session.hub_push_times(&work.host, &work.repository).await {
        Ok(times) => times,
        Err(err) => {
            work.plan.reasons.push(format!(
                "Docker Hub push times unavailable ({err}); ordering by image creation time"
            ));
            None
        }
    };
    if let Some(times) = push_times {
        // A pruned current tag has no push time: every tag on the track is newer.
        let current = times.get(current_tag).copied();
        if current.is_none() && !pruned {
            return Err(format!(
                "Docker Hub has no push time for the current tag {current_tag}; cannot order the track"
            ));
        }
        let mut newer: Vec<(String, Option<DateTime<Utc>>)> = on_track
            .into_iter()
            .filter_map(|(t, _)| {
                times
                    .get(t)
                    .filter(|time| current.is_none_or(|c| **time > c))
                    .map(|time| (t.clone(), Some(*time)))
            })
            .collect();
        newer.sort_by_key(|(t, time)| (Reverse(*time), t.clone()));
        return Ok(OrderedTags {
            newer,
            clock: Clock::RegistryPushTime,
            current_time: current,
        });
    }

    // No push times: the images' own creation times order the track, which
    // costs a config read per tag — bounded.
    if on_track.len() > MAX_UNTIMED_TAGS {
        return Err(format!(
            "{} tags on push-ordered track {} and the registry offers no push times; configure an ordered track",
            on_track.len(),
            track.name()
        ));
    }
    let platform = work.family.platform;
    let (current_time, mut clock) = if pruned {
        (None, Clock::ConfigCreated)
    } else {
        let current_head = session
            .head_manifest(&work.host, &work.repository, current_tag)
            .await
            .map_err(|e| e.to_string())?;
        let (time, clock) =
            image_time(session, work, &current_head.digest, platform.architecture())
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| {
                    format!(
                        "the current image {current_tag} has no creation time to order the track by"
                    )
                })?;
        (Some(time), clock)
    };
    let mut newer = Vec::new();
    for (tag, _) in on_track {
        let head = match session
            .head_manifest(&work.host, &work.repository, tag)
            .await
        {
            Ok(head) => head,
            Err(err) if err.is_not_found() => continue,
            Err(err) => return Err(err.to_string()),
        };
        let time = image_time(session, work, &head.digest, platform.architecture())
            .await
            .map_err(|e| e.to_string())?;
        if let Some((time, tag_clock)) = time
            && current_time.is_none_or(|current| time > current)
        {
            clock = tag_clock;
            newer.push((tag.clone(), Some(time)));
        }
    }
    newer.sort_by_key(|(t, time)| (Reverse(*time), t.clone()));
    Ok(OrderedTags {
        newer,
        clock,
        current_time,
    })
}

/// The creation time of an image by digest for the family's architecture
/// (or, lacking it, the first platform the image lists: ordering needs some
/// time, and a tag without the family's platform is rejected later anyway).
/// Reads the index and that one platform only.
async fn image_time(
    session: &RegistrySession,
    work: &FamilyWork<'_>,
    digest: &str,
    architecture: &str,
) -> Result<Option<(DateTime<Utc>, Clock)>, RegistryError> {
    let image = session
        .image_platforms(&work.host, &work.repository, digest)
        .await?;
    let Some(platform) = image
        .platform("linux", architecture)
        .or(image.platforms.first())
    else {
        return Ok(None);
    };
    let platform = session
        .platform_image(&work.host, &work.repository, platform)
        .await?;
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
    newer: &[(String, Option<DateTime<Utc>>)],
    clock: Clock,
    nightly_to_release: bool,
) -> Result<Option<Candidate>, String> {
    let architecture = work.family.platform.architecture();
    for (examined, (tag, known_time)) in newer.iter().enumerate() {
        if examined == MAX_EXAMINED {
            work.plan.reasons.push(format!(
                "stopped after {MAX_EXAMINED} newer tags that did not qualify"
            ));
            break;
        }
        let head = match session
            .head_manifest(&work.host, &work.repository, tag)
            .await
        {
            Ok(head) => head,
            Err(err) if err.is_not_found() => {
                work.plan
                    .reasons
                    .push(format!("{tag}: listed but not resolvable; skipped"));
                continue;
            }
            Err(err) => return Err(err.to_string()),
        };
        let image = match session
            .image_platforms(&work.host, &work.repository, &head.digest)
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
        // Only the family's platform is read: the others' labels and times
        // cannot change the verdict.
        let platform = match session
            .platform_image(&work.host, &work.repository, platform)
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
            Some(time) => (Some(*time), clock),
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
        let min_age = chrono::Duration::from_std(options.min_age).unwrap_or(chrono::Duration::MAX);
        if age < min_age {
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
            .with_reference(Some(tag), Some(&head.digest))
            .map_err(|e| format!("{tag}: {e}"))?;
        return Ok(Some(Candidate {
            image,
            tag: tag.clone(),
            digest: head.digest,
            revision: label,
            time: Some(time),
            clock: used_clock,
            nightly_to_release,
        }));
    }
    Ok(None)
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
            let newer = vec![(newest.clone(), None)];
            let candidate =
                first_qualifying(work, session, options, track, &newer, Clock::TagText, true)
                    .await?;
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

/// Picks at most `max_candidates`: pruned families first, then the oldest
/// current images (by the plan's clock; families behind by more tags first
/// when no clock says), skipping occupied and cooling-down families, and at
/// most half the slots (rounded up) per image repository so one upstream
/// release cannot take the whole wave.
fn select(families: &[FamilyPlan], options: &PlanOptions<'_>) -> Vec<Selected> {
    let mut stale: Vec<&FamilyPlan> = families
        .iter()
        .filter(|f| f.candidate.is_some())
        .filter(|f| !options.occupied.contains(&f.id) && !options.cooling_down.contains(&f.id))
        .collect();
    stale.sort_by(|a, b| {
        let pruned = |f: &FamilyPlan| f.status != Status::StalePruned;
        pruned(a)
            .cmp(&pruned(b))
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
    let mut selected = Vec::new();
    for family in stale {
        if selected.len() == options.max_candidates {
            break;
        }
        let Some(candidate) = &family.candidate else {
            continue;
        };
        let repository = candidate.image.normalized_repository();
        let count = taken.entry(repository).or_default();
        if *count == per_repository {
            continue;
        }
        *count += 1;
        selected.push(Selected {
            family: family.family.clone(),
            id: candidate_id(&family.id, &candidate.image.normalized()),
            image: candidate.image.to_string(),
        });
    }
    selected
}

fn display<S: serde::Serializer, T: std::fmt::Display>(value: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(value)
}
