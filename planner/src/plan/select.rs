//! Which candidate a family gets: the first newer tag that qualifies
//! (its image readable, old enough, not ignored), a release track's own
//! rule, and the selection across families within the plan's limits.

use super::*;

/// Walks newer tags newest first and returns the first that qualifies:
/// resolvable, old enough, built for the family's platform, and (for
/// commit-named tags) carrying the tag's commit.
pub(super) async fn first_qualifying(
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
    // and the one that qualifies is pinned at the digest it names (and read
    // by it where a commit is to be proven). Unavailable (no such API,
    // unreachable, refused): the registry is asked as before.
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
    // Where no pull is counted, the image of the next tag the walk would
    // read is read beside the first one whose age only its image tells:
    // should that one be too young, as the newest build often is, the next
    // verdict costs no further round trips of index, manifest and config.
    // Should it qualify, the extra reads (at most one image) are spent for
    // nothing; on Docker Hub, whose manifest `GET`s are pulls, never.
    if hub.is_none()
        && work.host != DOCKER_HUB
        && let Some([first, next]) = read_ahead_pair(track, newer, options.now, min_age)
    {
        let (host, repository) = (work.host.as_str(), work.repository.as_str());
        futures::join!(
            read_tag_image(session, host, repository, first, architecture),
            read_tag_image(session, host, repository, next, architecture)
        );
    }
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
            // Its age only its image tells: the read may end in a refusal
            // that pays for no proposal, so the plan grants it from what
            // its proposals leave (see `read_parked`).
            if !work.speculative && text_date(track, tag, options.now).is_none() {
                let rest = newer.len() - examined - 1;
                work.plan.reasons.push(format!(
                    "deferred: {tag}{} not read: its tag names no date, so only its image tells its age, Docker Hub's tags API is unavailable, and this plan's pulls went to its proposals (at most 2 each); planned again next run, when what this plan read costs no pull",
                    if rest > 0 {
                        format!(" and {rest} older newer tag(s)")
                    } else {
                        String::new()
                    }
                ));
                work.plan.parked = Some(tag.clone());
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
        let tag_commit = track.matches(tag).and_then(|p| p.commit);
        // Docker Hub: the tags API has told the tag's digest, age and
        // platforms. Only a tag that names a commit needs its image (the
        // revision label that proves the commit), and one without a push
        // time its age; that platform's manifest, which the API names, is
        // the only pull, and a free `HEAD` beside it confirms that the tag
        // points where the API says (should the two disagree, the
        // registry's answer is read as without the API). Any other tag is
        // proposed at the API's digest, as Renovate trusts it
        // (`DockerHubCache`): a `HEAD` here would decide nothing, and
        // spent on every proposal it holds up the reads that do decide
        // one. A wave confirms the digest of each it picks before acting
        // on it (`Candidate::image_read`).
        let mut from_hub = None;
        let mut registry_digest = None;
        if let Some(info) = hub_tag
            && let Some(hub_digest) = &info.digest
            && let Some(platform) = info
                .platforms
                .iter()
                .find(|p| p.os == "linux" && p.architecture == architecture)
        {
            if tag_commit.is_none() && known_time.is_some() {
                let time = (known_time, clock);
                return candidate(
                    work,
                    tag,
                    hub_digest.clone(),
                    time,
                    nightly_to_release,
                    None,
                )
                .map(Some);
            }
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
        // Without Docker Hub's tags API a tag whose text names its date was
        // judged old enough by that date before the read: the pull only
        // resolves its digest, and an image rebuilt under an old date is no
        // half-published build. A tag that names no date has only its
        // image to tell its age, and `min_age` holds for it as for any
        // other: the older tags wait for the next plan.
        let dated_by_text = scarce
            && known_time.is_none()
            && clock == Clock::TagText
            && text_date(track, tag, options.now).is_some();
        if age < min_age && dated_by_text {
            work.plan.reasons.push(format!(
                "{tag}: proposed by the date in its tag text (Docker Hub's tags API is unavailable); its image says it is {}h old, under the minimum {}h, a rebuild under that date",
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
        let time = (Some(time), used_clock);
        return candidate(work, tag, digest, time, nightly_to_release, Some(&platform)).map(Some);
    }
    Ok(None)
}

/// The candidate `tag` at `digest`, with what `platform` (its image, when
/// the plan read it) declares.
fn candidate(
    work: &FamilyWork<'_>,
    tag: &str,
    digest: String,
    (time, clock): (Option<DateTime<Utc>>, Clock),
    nightly_to_release: bool,
    platform: Option<&PlatformImage>,
) -> Result<Candidate, String> {
    let image = work
        .image
        .with_reference(Some(tag), Some(&digest))
        .map_err(|e| format!("{tag}: {e}"))?;
    Ok(Candidate {
        image,
        tag: tag.to_owned(),
        digest,
        revision: platform.and_then(revision).map(str::to_owned),
        time,
        clock,
        nightly_to_release,
        versions: platform
            .map(crate::provenance::ImageVersions::of)
            .unwrap_or_default(),
        image_read: platform.is_some(),
    })
}

/// The first two tags of `newer` whose image [`first_qualifying`] would
/// read (without Docker Hub's tags API), when the first one's age only its
/// image tells; `None` when a known time decides the first read, or fewer
/// than two would be read. Follows the walk's own skips: a tag whose known
/// time or text date is too young is passed over without a read.
fn read_ahead_pair<'t>(
    track: &Track,
    newer: &'t [NewerTag],
    now: DateTime<Utc>,
    min_age: chrono::Duration,
) -> Option<[&'t str; 2]> {
    let too_young = |at: DateTime<Utc>| now.signed_duration_since(at) < min_age;
    let mut read = newer.iter().take(MAX_EXAMINED).filter(|n| match n.time {
        Some(time) => !too_young(time),
        None => text_date(track, &n.tag, now).is_none_or(|dated| !too_young(dated)),
    });
    let first = read.next()?;
    if first.time.is_some() {
        return None;
    }
    Some([first.tag.as_str(), read.next()?.tag.as_str()])
}

/// Reads what [`first_qualifying`] reads of a tag without Docker Hub's tags
/// API (its index and the family's platform), into the session's memo;
/// failures are kept there too, for the walk to meet and report.
async fn read_tag_image(
    session: &RegistrySession,
    host: &str,
    repository: &str,
    tag: &str,
    architecture: &str,
) {
    let Ok(head) = session.resolve_for_read(host, repository, tag).await else {
        return;
    };
    let Ok(image) = session
        .image_platforms(host, repository, &head.digest)
        .await
    else {
        return;
    };
    if let Some(platform) = image.platform("linux", architecture) {
        let _ = session.platform_image(host, repository, platform).await;
    }
}

/// Tags whose image is read per family while Docker Hub's pulls are spent
/// without its tags API.
pub(super) const SCARCE_READS_PER_FAMILY: usize = 1;

/// The date a tag's text names (a year-less one in the year of `now`), at
/// its start: the build cannot be older than that day.
pub(super) fn text_date(track: &Track, tag: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
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
pub(super) async fn release_candidate(
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
pub(super) fn select(
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
