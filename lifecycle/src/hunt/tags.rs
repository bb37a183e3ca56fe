//! Which tags a hunt searches: those of the old image's track strictly
//! between the old and the new image, in the track's own order
//! (`klaud_planner::tracks`: the version, number or date a tag carries; the
//! registry's clock on a push-ordered track or to break a tie), each with
//! the digest the registry serves and the upstream commit it was built from
//! (its revision label, else the commit its tag names).

use std::cmp::Ordering;

use chrono::{DateTime, Utc};
use klaud_planner::tracks::{SortKey, Track};

use super::{HuntError, HuntTag, MAX_TAGS};
use crate::model::shorten;

/// The registry's side of a hunt: the old image's track as the registry
/// serves it now (the service reads the registry and calls
/// [`crate::hunt::tags_between`]).
#[async_trait::async_trait]
pub trait HuntTags: Send + Sync {
    /// The tags strictly between `old` and `new` (full image references)
    /// of `family`'s track, oldest first, with the two ends; `Err` says
    /// why no plan can be made (no hunt starts then).
    async fn range(&self, family: &str, old: &str, new: &str) -> Result<HuntRange, HuntRangeError>;
}

/// What [`HuntTags::range`] answers.
#[derive(Debug, Clone, PartialEq)]
pub struct HuntRange {
    /// The old image's tag (last known good).
    pub old: HuntTag,
    /// The new image's tag (the candidate).
    pub new: HuntTag,
    /// The tags strictly between, oldest first.
    pub tags: Vec<HuntTag>,
}

/// A tag as the registry lists it, with what reading it gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedTag {
    /// The tag.
    pub tag: String,
    /// Its manifest digest; `None` when the registry lists the tag but no
    /// longer serves its manifest (pruned).
    pub digest: Option<String>,
    /// `org.opencontainers.image.revision`, when labelled.
    pub revision: Option<String>,
    /// When it was pushed (or, lacking that, made).
    pub time: Option<DateTime<Utc>>,
}

type Place = (Option<SortKey>, Option<DateTime<Utc>>);

fn place(track: &Track, t: &ServedTag) -> Option<Place> {
    let position = track.matches(&t.tag)?;
    let key = if track.needs_time_for_key() {
        t.time.and_then(|time| position.key_at(time))
    } else {
        position.key.clone()
    };
    // Without a key (a push-ordered track) only the clock can place it.
    if key.is_none() && t.time.is_none() {
        return None;
    }
    Some((key, t.time))
}

fn commit_of(track: &Track, t: &ServedTag) -> Option<String> {
    let from_label = t
        .revision
        .as_deref()
        .map(str::trim)
        .filter(|r| (7..=64).contains(&r.len()) && r.bytes().all(|b| b.is_ascii_hexdigit()));
    from_label
        .map(str::to_owned)
        .or_else(|| track.matches(&t.tag)?.commit)
        .map(|c| c.to_ascii_lowercase())
}

/// The hunt's view of one served tag.
pub fn hunt_tag(track: &Track, t: &ServedTag) -> HuntTag {
    HuntTag {
        tag: t.tag.clone(),
        digest: t.digest.clone(),
        commit: commit_of(track, t),
    }
}

/// The tags of `track` strictly between `old` and `new`, oldest first.
/// Tags of other tracks, and tags the track cannot place (no key and no
/// time), are left out; so is anything placed like `old` or `new` (a
/// rebuild under another tag is not a step between them). Errors name the
/// tag: the two ends must be placeable, `old` before `new`, and the range
/// within what one hunt takes.
pub fn tags_between(
    track: &Track,
    old: &ServedTag,
    new: &ServedTag,
    served: &[ServedTag],
) -> Result<Vec<HuntTag>, HuntError> {
    let end = |field: &str, t: &ServedTag| {
        place(track, t).ok_or_else(|| HuntError::Plan {
            field: field.to_owned(),
            message: format!(
                "tag {:?} is not on track {track} or has no time to order it by",
                shorten(&t.tag, 60)
            ),
        })
    };
    let (lo, hi) = (end("old", old)?, end("new", new)?);
    let order = |a: &Place, b: &Place| {
        a.0.cmp(&b.0).then_with(|| {
            // Equal keys are ordered by the clock only where the track says
            // so; a push-ordered track has no key at all.
            if a.0.is_none() || track.ties_by_time() {
                a.1.cmp(&b.1)
            } else {
                Ordering::Equal
            }
        })
    };
    if order(&lo, &hi) != Ordering::Less {
        return Err(HuntError::Plan {
            field: "new".into(),
            message: format!(
                "tag {:?} is not after {:?} on track {track}",
                shorten(&new.tag, 60),
                shorten(&old.tag, 60)
            ),
        });
    }
    let mut between: Vec<(Place, &ServedTag)> = served
        .iter()
        .filter(|t| t.tag != old.tag && t.tag != new.tag)
        .filter_map(|t| Some((place(track, t)?, t)))
        .filter(|(p, _)| order(&lo, p) == Ordering::Less && order(p, &hi) == Ordering::Less)
        .collect();
    between.sort_by(|a, b| order(&a.0, &b.0).then_with(|| a.1.tag.cmp(&b.1.tag)));
    if between.len() > MAX_TAGS {
        return Err(HuntError::Plan {
            field: "tags".into(),
            message: format!(
                "{} tags between {:?} and {:?}, more than the {MAX_TAGS} one hunt takes",
                between.len(),
                shorten(&old.tag, 60),
                shorten(&new.tag, 60)
            ),
        });
    }
    Ok(between
        .into_iter()
        .map(|(_, t)| hunt_tag(track, t))
        .collect())
}

/// Why [`crate::engine::HuntTags::range`] has no range: no hunt starts.
#[derive(Debug, thiserror::Error)]
pub enum HuntRangeError {
    /// An end is not an image reference.
    #[error(transparent)]
    Image(#[from] klaud_planner::image::ImageRefError),
    /// The two ends name different image repositories.
    #[error("{old} and {new} are not one image repository")]
    OtherRepository {
        /// The old image.
        old: String,
        /// The new image.
        new: String,
    },
    /// An end has no tag, so no track to search.
    #[error("an image without a tag has no track")]
    Untagged,
    /// The old tag is on no track Klaud knows.
    #[error("tag {0:?} has no track Klaud knows")]
    NoTrack(String),
    /// The registry did not answer a listing or a manifest.
    #[error(transparent)]
    Registry(#[from] klaud_planner::registry::RegistryError),
    /// The tags cannot be placed between the ends.
    #[error(transparent)]
    Tags(#[from] HuntError),
}

/// The registry's side of a hunt ([`HuntTags`]) over a
/// registry client: the old tag's built-in track (its shape), the tags the
/// registry lists on it between the two images, each resolved to the
/// digest it serves now (HEAD: no pull). Tags are placed by what they
/// carry and, where the track needs a clock (a push-ordered nightly, a
/// year-less date, a rebuild), by the push times of Docker Hub's tags API
/// (no pull either); a registry without that API gives such a track no
/// plan. Labels are not read, so a step's commit is the one its tag names,
/// if any.
pub struct RegistryHuntTags {
    /// The registries (a clone shares the wave's connections and caches).
    pub registry: klaud_planner::registry::RegistryClient,
}

#[async_trait::async_trait]
impl HuntTags for RegistryHuntTags {
    async fn range(
        &self,
        _family: &str,
        old: &str,
        new: &str,
    ) -> Result<HuntRange, HuntRangeError> {
        use klaud_planner::image::ImageRef;
        let (o, n) = (ImageRef::parse(old)?, ImageRef::parse(new)?);
        if (o.registry(), o.repository()) != (n.registry(), n.repository()) {
            return Err(HuntRangeError::OtherRepository {
                old: old.to_owned(),
                new: new.to_owned(),
            });
        }
        let (Some(ot), Some(nt)) = (o.tag(), n.tag()) else {
            return Err(HuntRangeError::Untagged);
        };
        let track = klaud_planner::tracks::infer_track(ot)
            .ok_or_else(|| HuntRangeError::NoTrack(ot.to_owned()))?;
        let session = self.registry.session();
        let (host, repo) = (o.registry().to_owned(), o.repository());
        let listed = session.list_tags(&host, &repo).await?;
        // Push times only place tags a track cannot order by what they
        // carry: a tags API that fails leaves those out, not the hunt.
        let hub = session.hub_tags(&host, &repo).await.unwrap_or_else(|e| {
            tracing::warn!(%host, %repo, "no push times for a hunt's tags: {e}");
            None
        });
        let served = |tag: &str| ServedTag {
            tag: tag.to_owned(),
            // Filled in below, for the few tags a hunt may run.
            digest: Some(String::new()),
            revision: None,
            time: hub.as_ref().and_then(|h| h.get(tag)).and_then(|i| i.pushed),
        };
        let between = tags_between(
            &track,
            &served(ot),
            &served(nt),
            &listed.iter().map(|t| served(t)).collect::<Vec<_>>(),
        )?;
        let digest = async |tag: &str| -> Result<Option<String>, HuntRangeError> {
            match session.head_manifest(&host, &repo, tag).await {
                Ok(h) => Ok(Some(h.digest)),
                Err(e) if e.is_not_found() => Ok(None),
                Err(e) => Err(e.into()),
            }
        };
        let mut tags = Vec::with_capacity(between.len());
        for mut t in between {
            t.digest = digest(&t.tag).await?;
            tags.push(t);
        }
        let end = |t: &str, d: Option<String>| HuntTag {
            tag: t.to_owned(),
            digest: d,
            commit: track.matches(t).and_then(|p| p.commit),
        };
        Ok(HuntRange {
            old: end(ot, digest(ot).await?),
            new: end(nt, digest(nt).await?),
            tags,
        })
    }
}
