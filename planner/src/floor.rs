//! The request floor of a plan, computed from the scenario alone: the
//! families, their current tags, the registries' tag lists and what each
//! registry says of a tag without a read of its image (Docker Hub's tags
//! API: push time, platforms), plus whatever facts of an image are known.
//!
//! The plan never uses this module to decide anything: it is the yardstick
//! its requests are measured against (`klaud plan --stats`, the bench). A
//! floor taken from what the plan chose to read would always equal what it
//! read, whatever it wasted.
//!
//! What must be read to decide a family, cheapest first:
//! - a tag without a track, or one pinned by digest: one `HEAD`;
//! - a tag on a track: its repository's tag list, once per repository;
//!   Docker Hub's tags API once per repository where it answers and the
//!   family needs a push time or has a newer tag;
//! - a tag the text orders (version, full date): nothing to order it;
//! - where push times are to be had, nothing to order or age a tag;
//! - without them, one read of a tag's image (its index and one platform's
//!   manifest and config: any platform gives the time) for every tag whose
//!   order only that time gives — every tag of a push-ordered track, the
//!   rebuilds tied on their text when no newer text key decides, and on a
//!   year-less (`MMDD`) track each tag that can be newer than the current
//!   one, newest first, stopping at the first proof;
//! - on Docker Hub without its tags API (every manifest `GET` a pull):
//!   order by the text where it can, defer what it cannot (and a tag whose
//!   text names no date, whose age only its image tells), and read only
//!   the tag chosen;
//! - the chosen tag: where the tags API named its digest, push time and
//!   platforms, nothing, unless its tag names a commit to prove (or the
//!   API gave no push time): then its platform's manifest and config, and
//!   a `HEAD` that confirms the digest; otherwise its index and, per
//!   family platform, that platform's manifest and config. A newer tag
//!   passed over costs what it took to see why.
//!
//! Facts the scenario does not hold (an image never read, no tags API) are
//! taken at their cheapest: a floor may only be too low, never too high.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Duration, Utc};

use crate::registry::RequestCounts;
use crate::tracks::{SortKey, Track, TrackOrdering, TrackRule, commit_matches, track_for};

/// The registry host whose manifest `GET`s are pulls counted against a
/// small hourly quota.
const DOCKER_HUB: &str = "docker.io";
/// Docker Hub's tags API answers 100 tags a page.
const HUB_PAGE: usize = 100;
/// Newer tags examined at most per family: past it a plan gives up too.
const MAX_EXAMINED: usize = 12;

/// What is known of one tag's image.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TagFacts {
    /// When it was pushed or made (push time where the registry gives one).
    pub time: Option<DateTime<Utc>>,
    /// The architectures it is built for (`linux/<arch>`); `None`: unknown.
    pub architectures: Option<Vec<String>>,
    /// The commit its revision label names, when known.
    pub revision: Option<String>,
    /// Whether it is a single manifest rather than an index (its tag's
    /// `GET` is then also its platform's manifest).
    pub single: bool,
    /// Each platform's manifest digest by architecture, when known: content
    /// is read once per digest, whatever tag or repository names it (one
    /// build pushed as `vllm/vllm-openai:v0.27.5` and
    /// `vllm/vllm-openai-rocm:v0.27.5` is one manifest and one config).
    pub platform_digests: BTreeMap<String, String>,
}

/// One image repository of the scenario.
#[derive(Debug, Clone, Default)]
pub struct RepositoryFacts {
    /// The registry's tag list; `None` when it could not be read.
    pub tags: Option<Vec<String>>,
    /// Whether Docker Hub's tags API answers for it.
    pub push_times: bool,
    /// What is known of each tag.
    pub facts: BTreeMap<String, TagFacts>,
}

/// One family to decide (held families, retired or ignored, cost nothing
/// and are left out by the caller).
#[derive(Debug, Clone)]
pub struct FloorFamily {
    /// The registry host as the image reference names it.
    pub host: String,
    /// The normalized repository (`library/x`, `nvidia/...`).
    pub repository: String,
    /// The current tag, if the reference has one.
    pub tag: Option<String>,
    /// Whether the reference is pinned by digest.
    pub pinned: bool,
    /// The family's platform architecture (`amd64`, `arm64`).
    pub architecture: String,
}

/// Everything the floor is computed from.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The time the plan runs at.
    pub now: DateTime<Utc>,
    /// How old a tag must be to be proposed.
    pub min_age: Duration,
    /// Configured tracks.
    pub rules: Vec<TrackRule>,
    /// The families to decide.
    pub families: Vec<FloorFamily>,
    /// By (host, normalized repository).
    pub repositories: BTreeMap<(String, String), RepositoryFacts>,
}

/// What must be read, deduplicated across families.
#[derive(Default)]
struct Needs {
    heads: BTreeSet<(String, String, String)>,
    lists: BTreeMap<(String, String), u64>,
    hub: BTreeMap<(String, String), u64>,
    indexes: BTreeSet<(String, String, String)>,
    /// (host, repository, tag, architecture): a platform's manifest and config.
    platforms: BTreeSet<(String, String, String, String)>,
    /// Tags read only for their time: any one platform will do.
    timed: BTreeMap<(String, String, String), String>,
    /// Single-manifest tags: the index read is the manifest read.
    single: BTreeSet<(String, String, String)>,
}

/// The floor by registry host (as image references name it).
pub fn floor(scenario: &Scenario) -> BTreeMap<String, RequestCounts> {
    let mut needs = Needs::default();
    for family in &scenario.families {
        family_floor(scenario, family, &mut needs);
    }
    let mut out: BTreeMap<String, RequestCounts> = BTreeMap::new();
    for (host, _, _) in &needs.heads {
        out.entry(host.clone()).or_default().manifest_head += 1;
    }
    for ((host, _), pages) in &needs.lists {
        out.entry(host.clone()).or_default().tags_list += pages;
    }
    for ((host, _), pages) in &needs.hub {
        out.entry(host.clone()).or_default().hub_api += pages;
    }
    for (host, _, _) in &needs.indexes {
        out.entry(host.clone()).or_default().manifest_get += 1;
    }
    let mut platforms = needs.platforms.clone();
    for ((host, repository, tag), architecture) in &needs.timed {
        let read = needs
            .platforms
            .iter()
            .any(|(h, r, t, _)| h == host && r == repository && t == tag);
        if !read {
            platforms.insert((
                host.clone(),
                repository.clone(),
                tag.clone(),
                architecture.clone(),
            ));
        }
    }
    let mut read_digests = BTreeSet::new();
    for (host, repository, tag, architecture) in &platforms {
        let digest = scenario
            .repositories
            .get(&(host.clone(), repository.clone()))
            .and_then(|r| r.facts.get(tag))
            .and_then(|f| f.platform_digests.get(architecture));
        if let Some(digest) = digest
            && !read_digests.insert(digest.clone())
        {
            continue;
        }
        let counts = out.entry(host.clone()).or_default();
        let key = (host.clone(), repository.clone(), tag.clone());
        // A single manifest came with its tag's read; only the config is left.
        if !needs.single.contains(&key) {
            counts.manifest_get += 1;
        }
        counts.blob_get += 1;
    }
    out
}

/// The sum over hosts.
pub fn total(by_host: &BTreeMap<String, RequestCounts>) -> RequestCounts {
    let mut total = RequestCounts::default();
    for c in by_host.values() {
        total.manifest_head += c.manifest_head;
        total.manifest_get += c.manifest_get;
        total.blob_get += c.blob_get;
        total.tags_list += c.tags_list;
        total.token += c.token;
        total.hub_api += c.hub_api;
        total.other += c.other;
    }
    total
}

/// How one tag of a family is read.
struct Reader<'a> {
    host: &'a str,
    repository: &'a str,
    architecture: &'a str,
    repo: &'a RepositoryFacts,
}

impl Reader<'_> {
    fn key(&self, tag: &str) -> (String, String, String) {
        (
            self.host.to_owned(),
            self.repository.to_owned(),
            tag.to_owned(),
        )
    }

    fn facts(&self, tag: &str) -> TagFacts {
        self.repo.facts.get(tag).cloned().unwrap_or_default()
    }

    /// A read of the tag's image for its time alone (one platform).
    fn time(&self, needs: &mut Needs, tag: &str) {
        let key = self.key(tag);
        if self.facts(tag).single {
            needs.single.insert(key.clone());
        }
        needs.indexes.insert(key.clone());
        needs
            .timed
            .entry(key)
            .or_insert_with(|| self.architecture.to_owned());
    }

    /// A read of the tag's index and, when it has one, the family's
    /// platform; whether the platform is there.
    fn platform(&self, needs: &mut Needs, tag: &str, by_head: bool) -> bool {
        let key = self.key(tag);
        let facts = self.facts(tag);
        if facts.single {
            needs.single.insert(key.clone());
        }
        if by_head {
            needs.heads.insert(key.clone());
        } else {
            needs.indexes.insert(key.clone());
        }
        let present = facts
            .architectures
            .as_ref()
            .is_none_or(|a| a.iter().any(|x| x == self.architecture));
        if present {
            needs
                .platforms
                .insert((key.0, key.1, key.2, self.architecture.to_owned()));
        }
        present
    }
}

fn family_floor(scenario: &Scenario, family: &FloorFamily, needs: &mut Needs) {
    let Some(tag) = &family.tag else { return };
    let head = (family.host.clone(), family.repository.clone(), tag.clone());
    let track = track_for(&family.repository, tag, &scenario.rules)
        .ok()
        .flatten();
    let Some(track) = track else {
        needs.heads.insert(head);
        return;
    };
    if family.pinned {
        needs.heads.insert(head.clone());
    }
    let repo_key = (family.host.clone(), family.repository.clone());
    let empty = RepositoryFacts::default();
    let repo = scenario.repositories.get(&repo_key).unwrap_or(&empty);
    let Some(tags) = &repo.tags else {
        needs.lists.insert(repo_key, 1);
        return;
    };
    needs.lists.insert(repo_key.clone(), 1);
    if tags.is_empty() {
        // Nothing listed says nothing of the current tag: its HEAD does.
        needs.heads.insert(head);
        return;
    }
    let Some(current) = track.matches(tag) else {
        return;
    };
    let pruned = !tags.contains(tag);
    let on_track: Vec<&String> = tags
        .iter()
        .filter(|t| *t != tag && track.matches(t).is_some())
        .collect();
    let reader = Reader {
        host: &family.host,
        repository: &family.repository,
        architecture: &family.architecture,
        repo,
    };
    let push = repo.push_times;
    let scarce = !push && family.host == DOCKER_HUB;
    let pushed = track.ordering() == TrackOrdering::Pushed;
    let month_day = track.needs_time_for_key();
    let time_of = |t: &str| reader.facts(t).time;
    let mut hub_needed = false;

    // Newer tags, newest first; tags whose order costs a read of each.
    let newer: Vec<String> = if pushed {
        if scarce {
            return;
        }
        hub_needed = true;
        if !push {
            for t in &on_track {
                reader.time(needs, t);
            }
            if !pruned {
                reader.time(needs, tag);
            }
        }
        let current_time = if pruned { None } else { time_of(tag) };
        let mut newer: Vec<(DateTime<Utc>, &String)> = on_track
            .iter()
            .filter_map(|t| time_of(t).map(|time| (time, *t)))
            .filter(|(time, _)| pruned || current_time.is_some_and(|c| *time > c))
            .collect();
        newer.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
        newer.into_iter().map(|(_, t)| t.clone()).collect()
    } else if month_day {
        hub_needed = push;
        // The latest date a tag's text allows (no image is made after now):
        // a tag whose latest date is not after the current one's cannot be
        // newer. Where push times are known they give the year outright.
        let key = |t: &str| {
            let position = track.matches(t)?;
            match (push, time_of(t)) {
                (true, Some(time)) => position.key_at(time),
                _ => position.key_at(scenario.now),
            }
        };
        let current_key = if pruned { None } else { key(tag) };
        by_key(&on_track, &key, current_key.as_ref())
    } else {
        let current_key = if pruned { None } else { current.key.clone() };
        let keyed = |t: &str| track.matches(t).and_then(|p| p.key);
        let mut groups: BTreeMap<SortKey, Vec<&String>> = BTreeMap::new();
        for t in &on_track {
            if let Some(k) = keyed(t)
                && current_key.as_ref().is_none_or(|c| k >= *c)
            {
                groups.entry(k).or_default().push(t);
            }
        }
        let mut newer = Vec::new();
        for (k, group) in groups.into_iter().rev() {
            let ties_current = current_key.as_ref() == Some(&k);
            if !track.ties_by_time() {
                if !ties_current {
                    newer.extend(group.into_iter().cloned());
                }
                continue;
            }
            if group.len() == 1 && !ties_current {
                newer.push(group[0].clone());
                continue;
            }
            // Rebuilds tied on their text: only their times order them.
            if scarce {
                break;
            }
            hub_needed = true;
            if !push {
                for t in &group {
                    reader.time(needs, t);
                }
                if ties_current {
                    reader.time(needs, tag);
                }
            }
            let current_time = time_of(tag);
            let mut timed: Vec<(DateTime<Utc>, &String)> = group
                .into_iter()
                .filter_map(|t| time_of(t).map(|time| (time, t)))
                .filter(|(time, _)| !ties_current || current_time.is_some_and(|c| *time > c))
                .collect();
            timed.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
            newer.extend(timed.into_iter().map(|(_, t)| t.clone()));
            // Reads stop where a proof is found: the walk below decides.
            if !newer.is_empty() && !ties_current {
                break;
            }
        }
        newer
    };
    if !newer.is_empty() {
        hub_needed = true;
    }
    if hub_needed && push {
        let pages = tags.len().div_ceil(HUB_PAGE).max(1) as u64;
        needs.hub.insert(repo_key, pages);
    }

    // The walk: newest first, the first that qualifies ends it.
    let text_date = |t: &str| {
        let position = track.matches(t)?;
        let key = if month_day {
            position.key_at(scenario.now)?
        } else {
            position.key?
        };
        key.date.map(|d| d.and_utc())
    };
    let young = |time: DateTime<Utc>| scenario.now.signed_duration_since(time) < scenario.min_age;
    for t in newer.iter().take(MAX_EXAMINED) {
        let facts = reader.facts(t);
        if push {
            if facts.time.is_some_and(young) {
                continue;
            }
            if facts
                .architectures
                .as_ref()
                .is_some_and(|a| !a.iter().any(|x| x == &family.architecture))
            {
                continue;
            }
            // The API named its digest and told its age and platforms: its
            // image is read only to prove the commit a tag names, or for an
            // age the API did not give (a `HEAD` beside that read confirms
            // the digest); otherwise nothing is.
            let commit_named = track.matches(t).is_some_and(|p| p.commit.is_some());
            if !commit_named && facts.time.is_some() {
                return;
            }
            reader.platform(needs, t, true);
            if disqualified(&track, t, &facts) {
                continue;
            }
            return;
        }
        if text_date(t).is_some_and(young) {
            continue;
        }
        if scarce && text_date(t).is_none() {
            // Its age only a pull of its image tells, and a refusal would
            // pay for no proposal: a plan may defer it, saying so, so the
            // cheapest correct plan reads nothing for it.
            return;
        }
        // A tag read for its time has told its age already, and which
        // platforms it has.
        if needs.timed.contains_key(&reader.key(t))
            && (facts.time.is_some_and(young)
                || facts
                    .architectures
                    .as_ref()
                    .is_some_and(|a| !a.iter().any(|x| x == &family.architecture)))
        {
            continue;
        }
        let present = reader.platform(needs, t, false);
        if scarce {
            // One read per family: what the text chose is what is proposed.
            return;
        }
        if !present || facts.time.is_some_and(young) || disqualified(&track, t, &facts) {
            continue;
        }
        return;
    }
}

/// Tags keyed above `current`, newest key first (name order within one).
fn by_key(
    tags: &[&String],
    key: &dyn Fn(&str) -> Option<SortKey>,
    current: Option<&SortKey>,
) -> Vec<String> {
    let mut keyed: Vec<(SortKey, &String)> = tags
        .iter()
        .filter_map(|t| key(t).map(|k| (k, *t)))
        .filter(|(k, _)| current.is_none_or(|c| k > c))
        .collect();
    keyed.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    keyed.into_iter().map(|(_, t)| t.clone()).collect()
}

/// A commit-named tag whose image's revision label names another commit.
fn disqualified(track: &Track, tag: &str, facts: &TagFacts) -> bool {
    let Some(commit) = track.matches(tag).and_then(|p| p.commit) else {
        return false;
    };
    facts
        .revision
        .as_deref()
        .is_some_and(|label| !commit_matches(&commit, label))
}

#[cfg(test)]
#[path = "floor_tests.rs"]
mod tests;
