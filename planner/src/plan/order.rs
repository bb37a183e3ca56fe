//! How a track's tags are put in order: by what they carry, and where the
//! track needs a clock, by their push or creation times within the pull
//! budget.

use super::*;

/// A newer tag on the track, with its push or creation time when the
/// ordering needed it, and the clock that put it there.
pub(super) struct NewerTag {
    pub(super) tag: String,
    pub(super) time: Option<DateTime<Utc>>,
    pub(super) clock: Clock,
}

pub(super) struct OrderedTags {
    /// Newer tags on the track, newest first.
    pub(super) newer: Vec<NewerTag>,
    pub(super) clock: Clock,
    pub(super) current_time: Option<DateTime<Utc>>,
    /// Tags on the track besides the current one.
    pub(super) compared: usize,
    /// Set when the track could not be ordered within the pull budget:
    /// why, for the family's reasons, instead of "up to date".
    pub(super) deferred: Option<String>,
}

/// Where a tag sits: its text key (with a year-less date's year filled
/// in) and, when the track needs it, its push or creation time.
pub(super) type Place = (
    Option<crate::tracks::SortKey>,
    Option<(DateTime<Utc>, Clock)>,
);

#[allow(clippy::too_many_arguments)]
pub(super) async fn order_track(
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
pub(super) async fn pulls_scarce(work: &FamilyWork<'_>, session: &RegistrySession) -> bool {
    work.host == DOCKER_HUB
        && !matches!(
            session.hub_push_times(&work.host, &work.repository).await,
            Ok(Some(_))
        )
}

/// The registry host whose manifest `GET`s are pulls counted against a
/// small hourly quota.
pub(super) const DOCKER_HUB: &str = "docker.io";

/// Orders a track by its text alone, where the clock that would otherwise
/// order it costs a pull per tag: a year-less date takes the year of the
/// plan's clock, and tags the text cannot tell apart (rebuilds tied on
/// their version or date, a track ordered by push time only) are deferred
/// with the reason rather than read.
pub(super) fn order_by_text(
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
pub(super) async fn tag_times(
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
pub(super) async fn creation_time(
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
pub(super) async fn image_time(
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
pub(super) fn platform_time(platform: &PlatformImage) -> Option<(DateTime<Utc>, Clock)> {
    if let Some(label) = platform.labels.get(CREATED_LABEL)
        && let Ok(time) = DateTime::parse_from_rfc3339(label.trim())
    {
        return Some((time.with_timezone(&Utc), Clock::CreatedLabel));
    }
    platform.created.map(|time| (time, Clock::ConfigCreated))
}

/// The upstream revision an image's labels name.
pub(crate) fn revision(platform: &PlatformImage) -> Option<&str> {
    REVISION_LABELS
        .iter()
        .find_map(|label| platform.labels.get(*label))
        .map(String::as_str)
}
