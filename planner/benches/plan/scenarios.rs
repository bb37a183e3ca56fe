//! The held-out-like, scale and `families` scenarios of the plan benchmark.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use chrono::{DateTime, Datelike, NaiveDate, Utc};
use klaud_planner::floor::{FloorFamily, RepositoryFacts, Scenario, TagFacts};
use klaud_planner::plan::{MemoryCreationTimes, PlanOptions, plan};
use klaud_planner::registry::testkit::{
    DelayProxy, HubApi, LocalRegistry, PlatformSpec, Pusher, next_tag_on,
};
use klaud_planner::registry::{MemoryContentCache, RegistryClient, RegistryConfig, RequestCounts};
use klaud_planner::repo::Repository;
use klaud_planner::retired::Retirements;
use klaud_planner::tracks::{Track, TrackOrdering, infer_track, track_for};
use sha2::Digest as _;

use super::{Profile, cpu_seconds, peak_memory_kib, print_against, print_figures};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn start_registry() -> LocalRegistry {
    LocalRegistry::start().unwrap_or_else(|err| {
        eprintln!("cannot start docker-registry: {err}");
        std::process::exit(2);
    })
}

/// Resets the peak-RSS counter so each scenario reports its own peak.
fn reset_peak_memory() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn peak_mib() -> f64 {
    peak_memory_kib().unwrap_or(0) as f64 / 1024.0
}

/// A short commit of `len` hex digits that inference reads as a commit.
fn commit(seed: &str, len: usize) -> String {
    let hex = hex::encode(sha2::Sha256::digest(seed.as_bytes()));
    let body: String = hex.chars().take(len.saturating_sub(2)).collect();
    format!("a1{body}")
}

/// One stale track of the scenario: the tags it has now and the newer
/// ones pushed, oldest first; `expected` is what every family on it must get.
struct StaleTrack {
    repository: String,
    host: String,
    track: Track,
    families: Vec<String>,
    pushed: Vec<(String, DateTime<Utc>)>,
    expected: Option<String>,
}

fn month_day_date(tag: &str, track: &Track) -> Option<(NaiveDate, String)> {
    let (m, d) = track.matches(tag)?.month_day?;
    Some((
        NaiveDate::from_ymd_opt(2026, m, d)?,
        format!("{m:02}{d:02}"),
    ))
}

/// The i-th newer tag after `newest` (1-based): by the text where the text
/// orders, a fresh commit where only time does, the date moved on where it
/// has no year. Times are increasing; the caller adds the last one too young.
fn newer_tags(
    track: &Track,
    newest: &str,
    newest_time: DateTime<Utc>,
    count: usize,
    seed: &str,
) -> Vec<(String, DateTime<Utc>)> {
    let mut out = Vec::new();
    let position = track.matches(newest).expect("on its track");
    let mut tag = newest.to_owned();
    for i in 1..=count {
        let time = newest_time + chrono::Duration::days(i as i64);
        let next = if track.needs_time_for_key() {
            let (date, text) = month_day_date(newest, track).expect("a month-day");
            let new_date = date + chrono::Duration::days(7 * i as i64);
            let new_text = format!("{:02}{:02}", new_date.month(), new_date.day());
            let at = text_position(newest, &text);
            let mut next = format!("{}{}{}", &newest[..at], new_text, &newest[at + 4..]);
            // A build counter after the date starts again at 1.
            if let Some(rest) = next[at + 4..].strip_prefix('-')
                && rest.bytes().all(|b| b.is_ascii_digit())
                && !rest.is_empty()
            {
                next.truncate(at + 5);
                next.push('1');
            }
            let created =
                new_date.and_hms_opt(12, 0, 0).unwrap().and_utc() + chrono::Duration::days(1);
            out.push((next, created));
            continue;
        } else if track.ordering() == TrackOrdering::Pushed
            || (track.ties_by_time()
                && (position.key.as_ref().is_some_and(|k| k.date.is_none()) || i == count))
        {
            // Rebuilds: the same text with another commit, later in time.
            let old = track
                .matches(&tag)
                .and_then(|p| p.commit)
                .expect("a commit");
            tag.replacen(&old, &commit(&format!("{seed}-{i}"), old.len()), 1)
        } else {
            next_tag_on(track, &tag).expect("a next tag")
        };
        assert!(track.matches(&next).is_some(), "{next} is not on {track}");
        tag = next.clone();
        out.push((next, time));
    }
    out
}

fn text_position(tag: &str, text: &str) -> usize {
    tag.rfind(text).expect("the month-day is in the tag")
}

/// The revision label a commit-named tag needs.
fn labels_for(track: Option<&Track>, tag: &str) -> Vec<(String, String)> {
    let mut labels = vec![(
        "org.opencontainers.image.version".to_owned(),
        tag.to_owned(),
    )];
    if let Some(commit) = track.and_then(|t| t.matches(tag)).and_then(|p| p.commit) {
        labels.push((
            "org.opencontainers.image.revision".to_owned(),
            format!("{commit:0<40}"),
        ));
    }
    labels
}

/// (repository, tag, labels, created) of one image to push.
type Image = (String, String, Vec<(String, String)>, DateTime<Utc>);

/// Pushes `images`, and records each push in Docker Hub's tags API
/// simulator (push time = the image's creation time); returns each
/// platform's manifest digest by (repository, tag) and architecture.
async fn push(
    pusher: &Pusher,
    images: Vec<Image>,
    hub: &HubApi,
) -> BTreeMap<(String, String), BTreeMap<String, String>> {
    use futures::StreamExt as _;
    let mut by_repository: BTreeMap<String, Vec<_>> = BTreeMap::new();
    for (repo, tag, labels, created) in images {
        by_repository
            .entry(repo)
            .or_default()
            .push((tag, labels, created));
    }
    let pushes = by_repository.into_iter().map(|(repo, tags)| async move {
        let mut digests = Vec::new();
        for (tag, labels, created) in tags {
            let labels: Vec<(&str, &str)> = labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let platforms = [
                PlatformSpec::linux("amd64", &labels, Some(created)),
                PlatformSpec::linux("arm64", &labels, Some(created)),
            ];
            let pushed = pusher
                .push_image(&repo, &tag, &platforms)
                .await
                .unwrap_or_else(|e| panic!("push {repo}:{tag}: {e}"));
            hub.record(&repo, &tag, created, &pushed);
            let platforms = pushed
                .platforms
                .iter()
                .map(|(arch, manifest, _)| (arch.clone(), manifest.clone()))
                .collect();
            digests.push(((repo.clone(), tag), platforms));
        }
        digests
    });
    let mut results = futures::stream::iter(pushes).buffer_unordered(8);
    let mut out = BTreeMap::new();
    while let Some(digests) = results.next().await {
        out.extend(digests);
    }
    out
}

/// The held-out-like scenario (see the bench's doc).
pub fn heldout() {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/inferencex/full");
    let Ok(repository) = Repository::open(&full) else {
        eprintln!(
            "the shared InferenceX fixtures are not at {}; skipped",
            full.display()
        );
        return;
    };
    let registry = start_registry();
    let now = Utc::now();
    let base = now - chrono::Duration::days(60);
    let hub_api = HubApi::start().unwrap_or_else(|err| {
        eprintln!("cannot start the Docker Hub tags API simulator: {err}");
        std::process::exit(2);
    });
    println!(
        "\n== heldout: real masters, several newer tags per stale track, with and without Docker Hub's tags API =="
    );

    // Tracks by (repository, track name), with the families on them.
    let mut tracks: BTreeMap<(String, String), StaleTrack> = BTreeMap::new();
    let mut currents: BTreeMap<(String, String), DateTime<Utc>> = BTreeMap::new();
    // Tags without a track, with the families on them.
    let mut no_track: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    // A retired family (MODELS.md, `configs/deprecated/`) is never bumped:
    // its image is still upstream, but it makes no track stale.
    let retirements = Retirements::read(&repository);
    let mut retired = 0;
    for family in repository.families() {
        let image = family.image();
        let Some(tag) = image.tag() else { continue };
        let repo = image.repository();
        let track = track_for(&image.normalized_repository(), tag, &[])
            .ok()
            .flatten();
        let created = match track.as_ref().and_then(|t| month_day_date(tag, t)) {
            Some((date, _)) => {
                date.and_hms_opt(12, 0, 0).unwrap().and_utc() + chrono::Duration::days(1)
            }
            None => base,
        };
        currents.insert((repo.clone(), tag.to_owned()), created);
        if retirements.reason(family).is_some() {
            retired += 1;
            continue;
        }
        match track {
            Some(track) => {
                let entry = tracks
                    .entry((repo.clone(), track.name().to_owned()))
                    .or_insert_with(|| StaleTrack {
                        repository: repo.clone(),
                        host: image.registry().to_owned(),
                        track,
                        families: Vec::new(),
                        pushed: Vec::new(),
                        expected: None,
                    });
                entry.families.push(family.family.clone());
            }
            None if image.digest().is_none() => {
                no_track
                    .entry((repo, tag.to_owned()))
                    .or_default()
                    .push(family.family.clone());
            }
            // Pinned by digest on purpose: nothing newer is expected.
            None => {}
        }
    }
    // Current tags of one time-ordered track are an hour apart, in name order.
    let mut images = Vec::new();
    for ((repo, tag), created) in &mut currents {
        let track = track_for(repo, tag, &[]).ok().flatten();
        if let Some(t) = &track
            && t.ordering() == TrackOrdering::Pushed
        {
            let rank = tracks
                .get(&(repo.clone(), t.name().to_owned()))
                .map_or(0, |s| s.families.len() as i64);
            *created += chrono::Duration::hours(rank.min(23));
        }
    }
    for ((repo, tag), created) in &currents {
        let track = infer_track(tag);
        images.push((
            repo.clone(),
            tag.clone(),
            labels_for(track.as_ref(), tag),
            *created,
        ));
    }
    for ((_, name), stale) in &mut tracks {
        let on: Vec<(&String, &DateTime<Utc>)> = currents
            .iter()
            .filter(|((r, t), _)| *r == stale.repository && stale.track.matches(t).is_some())
            .map(|((_, t), c)| (t, c))
            .collect();
        // The newest current tag: by text, else by time.
        let (newest, newest_time) = on
            .iter()
            .max_by(|a, b| {
                let key = |t: &str| stale.track.matches(t).and_then(|p| p.key);
                let (ka, kb) = (key(a.0), key(b.0));
                if stale.track.ordering() == TrackOrdering::Pushed
                    || stale.track.needs_time_for_key()
                    || ka == kb
                {
                    a.1.cmp(b.1).then(a.0.cmp(b.0))
                } else {
                    ka.cmp(&kb)
                }
            })
            .map(|(t, c)| ((*t).clone(), **c))
            .expect("a current tag");
        let count = if stale.track.ties_by_time()
            && stale
                .track
                .matches(&newest)
                .and_then(|p| p.key)
                .is_some_and(|k| k.date.is_none())
        {
            5
        } else {
            4
        };
        let mut newer = newer_tags(
            &stale.track,
            &newest,
            newest_time.max(base),
            count + 1,
            &format!("{}:{name}", stale.repository),
        );
        // The last one is too young to propose: the one before is expected.
        if let Some(last) = newer.last_mut() {
            last.1 = now - chrono::Duration::hours(1);
        }
        stale.expected = newer.get(count - 1).map(|(t, _)| t.clone());
        for (tag, created) in &newer {
            images.push((
                stale.repository.clone(),
                tag.clone(),
                labels_for(Some(&stale.track), tag),
                *created,
            ));
        }
        stale.pushed = newer;
    }
    // Every unpinned build without a recognisable order has a newer one
    // upstream that only a person can tell is its successor: stale tracks
    // Klaud is expected to miss, each saying why in its reasons.
    let mut missed_by_design = Vec::new();
    for ((repo, tag), families) in &no_track {
        let newer = if let Some(line) = tag.strip_suffix("_atom0.1.2.post") {
            // Upstream moved to the next ATOM on another ROCm at once: the
            // build another family already runs.
            line.replacen("rocm7.2.2", "rocm7.2.4", 1) + "_atom0.1.3"
        } else {
            format!("{tag}-v2")
        };
        missed_by_design.push((format!("{repo}:{tag} → {newer}"), families.clone()));
        if !currents.contains_key(&(repo.clone(), newer.clone())) {
            images.push((
                repo.clone(),
                newer,
                Vec::new(),
                now - chrono::Duration::days(3),
            ));
        }
    }
    // Every image the bench pushes, for the floor of the whole scenario.
    let mut seeded: BTreeMap<String, BTreeMap<String, TagFacts>> = BTreeMap::new();
    for (repo, tag, labels, created) in &images {
        let revision = labels
            .iter()
            .find(|(k, _)| k == "org.opencontainers.image.revision")
            .map(|(_, v)| v.clone());
        seeded.entry(repo.clone()).or_default().insert(
            tag.clone(),
            TagFacts {
                time: Some(*created),
                architectures: Some(vec!["amd64".to_owned(), "arm64".to_owned()]),
                revision,
                single: false,
                platform_digests: BTreeMap::new(),
            },
        );
    }
    let started = Instant::now();
    let pushed = images.len();
    let pusher = Pusher::new(registry.base_url());
    let digests = runtime().block_on(push(&pusher, images, &hub_api));
    // The same build pushed under two names is one content: the client
    // reads it once by digest, and so does the floor.
    for ((repo, tag), platforms) in digests {
        if let Some(facts) = seeded.get_mut(&repo).and_then(|r| r.get_mut(&tag)) {
            facts.platform_digests = platforms;
        }
    }
    let stale_total = tracks.len() + missed_by_design.len();
    println!(
        "seeded {pushed} tags: {} stale tracks ({} with a track, {} without; {retired} retired families left out) in {:.1} s",
        stale_total,
        tracks.len(),
        missed_by_design.len(),
        started.elapsed().as_secs_f64()
    );

    println!("build (recorded): {}", RECORDED_BUILD.trim_end());

    // `KLAUD_BENCH_DELAY_MS=0,50`: each delay in turn, added to every
    // registry and tags API request (Renovate's too) by a loopback proxy.
    let delays: Vec<u64> = std::env::var("KLAUD_BENCH_DELAY_MS")
        .ok()
        .map(|v| v.split(',').filter_map(|d| d.trim().parse().ok()).collect())
        .filter(|d: &Vec<u64>| !d.is_empty())
        .unwrap_or_else(|| vec![0]);
    let mut summary = Vec::new();
    for delay in delays {
        let proxies = (delay > 0).then(|| {
            let d = std::time::Duration::from_millis(delay);
            let start = |url: url::Url| {
                DelayProxy::start(url, d).unwrap_or_else(|err| {
                    eprintln!("cannot start the delay proxy: {err}");
                    std::process::exit(2);
                })
            };
            (start(registry.base_url()), start(hub_api.base_url()))
        });
        let (registry_url, hub_url) = match &proxies {
            Some((r, h)) => (r.base_url(), h.base_url()),
            None => (registry.base_url(), hub_api.base_url()),
        };
        println!("\n==== every registry request delayed {delay} ms ====");
        let renovate = super::renovate::run(&full, &registry_url);
        if let Some(run) = &renovate {
            println!(
                "Renovate {} on the same masters and registry: {:.2} s wall, {} CPU s, {} dependencies with updates",
                run.version,
                run.wall.as_secs_f64(),
                run.cpu_seconds
                    .map_or("?".to_owned(), |c| format!("{c:.2}")),
                run.updates.map_or("?".to_owned(), |n| n.to_string()),
            );
        }
        for (variant, hub, compared) in [
            (
                "Docker Hub's tags API answering (as on Docker Hub: push times, digests, platforms)",
                Some(hub_url.clone()),
                true,
            ),
            (
                "hub.docker.com not mirrored (no tags API: creation times order the tracks)",
                None,
                false,
            ),
            (
                "hub.docker.com mirrored to a port that accepts and never answers",
                Some(black_hole()),
                false,
            ),
        ] {
            let mut config = RegistryConfig {
                concurrency: super::concurrency(),
                ..RegistryConfig::default()
            };
            for host in ["docker.io", "nvcr.io", "ghcr.io", "quay.io"] {
                config.mirrors.insert(host.to_owned(), registry_url.clone());
            }
            if let Some(url) = &hub {
                config
                    .mirrors
                    .insert("hub.docker.com".to_owned(), url.clone());
            }
            let client = RegistryClient::new(config).expect("client");
            // What the daemon's store keeps (and Actions mode keeps between
            // runs): manifests and configs by digest.
            let content = std::sync::Arc::new(MemoryContentCache::default());
            client.set_content_cache(content.clone());
            let times = MemoryCreationTimes::default();
            let mut options = PlanOptions::new(now);
            options.creation_times = Some(&times);
            reset_peak_memory();
            let cpu_before = (cpu_seconds(None), cpu_seconds(Some(registry.pid())));
            // Only the plan the Renovate comparison times is profiled.
            let profile = compared.then(|| Profile::start(&[std::process::id(), registry.pid()]));
            let started = Instant::now();
            let report = runtime().block_on(plan(&repository, &client.session(), &options));
            let wall = started.elapsed();
            drop(profile);
            println!("\n-- {variant}");
            let push_times = hub.is_some() && compared;
            let by_host = scenario_floor(&repository, &retirements, &seeded, push_times, now);
            let whole = klaud_planner::floor::total(&by_host);
            let limit = client.config().concurrency;
            print_against("cold plan", &report, limit, Some(&whole));
            println!(
                "  wall {:.2} s, peak memory {:.1} MiB, load average {}",
                wall.as_secs_f64(),
                peak_mib(),
                load_average()
            );
            let least = (delay > 0).then(|| wall_floor(&by_host, push_times, delay, limit));
            if let Some((least, why)) = &least {
                println!(
                    "  wall floor at {delay} ms: {least} ms, {why}; Klaud took {:.0} ms ({:.2}× it)",
                    wall.as_secs_f64() * 1000.0,
                    wall.as_secs_f64() * 1000.0 / (*least).max(1) as f64
                );
            }
            if let ((Some(own0), Some(reg0)), Some(own1), Some(reg1)) = (
                cpu_before,
                cpu_seconds(None),
                cpu_seconds(Some(registry.pid())),
            ) {
                println!(
                    "  CPU: planner {:.2} s, docker-registry {:.2} s",
                    own1 - own0,
                    reg1 - reg0
                );
            }
            if let Some(run) = &renovate {
                let ratio = wall.as_secs_f64() / run.wall.as_secs_f64();
                println!(
                    "  Klaud {:.2} s against Renovate {:.2} s: {ratio:.3} of its wall time (target ≤ 0.05)",
                    wall.as_secs_f64(),
                    run.wall.as_secs_f64(),
                );
                if let Some((least, _)) = least {
                    println!(
                        "  the wall floor is {:.3} of Renovate's wall time: no client within {limit} requests in flight per host does better",
                        least as f64 / 1000.0 / run.wall.as_secs_f64()
                    );
                }
                summary.push((delay, variant, wall, run.wall, ratio));
            }
            for note in &report.notes {
                println!("  plan note: {note}");
            }
            let by_family: BTreeMap<&str, _> = report
                .families
                .iter()
                .map(|f| (f.family.as_str(), f))
                .collect();
            let mut right = 0;
            let mut wrong = Vec::new();
            let mut missed = Vec::new();
            let mut deferred = 0;
            for stale in tracks.values() {
                // Without Docker Hub's tags API its tracks are ordered by their
                // text and every pull only resolves the tag the text chose.
                // The newest a date names is proposed, its age judged by that
                // date (the dates the bench gives are weeks old). The newest a
                // version names has only its image to tell its age, which the
                // bench makes one hour: `min_age` vetoes it and, one read per
                // family, the older ones wait for the next plan, saying so. What
                // only time orders (push-ordered tracks, rebuilds tied on
                // their text) is deferred too.
                let scarce = !compared && stale.host == "docker.io";
                let newest = stale.pushed.last().map(|(t, _)| t.as_str());
                let dated_by_text = newest
                    .and_then(|t| stale.track.matches(t))
                    .and_then(|p| p.key_at(now))
                    .is_some_and(|k| k.date.is_some());
                let expected = if !scarce {
                    stale.expected.as_deref()
                } else if stale.track.ordering() == TrackOrdering::Pushed
                    || stale.track.ties_by_time()
                    || !dated_by_text
                {
                    deferred += 1;
                    None
                } else {
                    newest
                };
                let mut ok = true;
                for family in &stale.families {
                    let plan = by_family[family.as_str()];
                    let got = plan.candidate.as_ref().map(|c| c.tag.as_str());
                    if got != expected {
                        ok = false;
                        if got.is_some() {
                            wrong
                                .push(format!("{family}: proposed {got:?}, expected {expected:?}"));
                        } else {
                            missed.push(format!(
                                "{family} ({}): {:?} — {}",
                                stale.track.name(),
                                plan.status,
                                plan.reasons.join("; ")
                            ));
                        }
                    }
                }
                right += usize::from(ok);
            }
            let up_to_date_without_reason = report
                .families
                .iter()
                .filter(|f| {
                    f.status == klaud_planner::plan::Status::UpToDate && f.reasons.is_empty()
                })
                .count();
            println!(
                "  newest tag proposed on {right} of {stale_total} stale tracks (target ≥ 34 of 36; {deferred} of them deferred as expected, saying why), wrong proposals: {} (target 0), up-to-date without a reason: {up_to_date_without_reason}",
                wrong.len()
            );
            for line in wrong.iter().chain(&missed) {
                println!("    {line}");
            }
            for (line, families) in &missed_by_design {
                let reasons: BTreeSet<String> = families
                    .iter()
                    .flat_map(|f| by_family[f.as_str()].reasons.iter().cloned())
                    .collect();
                println!(
                    "    no order: {line}; the plan says: {}",
                    reasons.into_iter().collect::<Vec<_>>().join("; ")
                );
            }
            let warm_started = Instant::now();
            let warm_client = RegistryClient::new(client.config().clone()).expect("client");
            // What the daemon's store would persist across a restart.
            let breaker = serde_json::to_string(&client.breaker_state()).expect("breaker state");
            warm_client.restore_breaker(&serde_json::from_str(&breaker).expect("breaker state"));
            warm_client.set_content_cache(content.clone());
            let warm = runtime().block_on(plan(&repository, &warm_client.session(), &options));
            let (hits, misses) = times.hits_and_misses();
            println!(
                "  warm plan, restarted client (breaker state, creation times and kept content restored): {} ms, {} requests (manifest_get {}, blob_get {}), cache {} entries, {hits} hits / {misses} misses",
                warm_started.elapsed().as_millis(),
                warm.requests.total(),
                warm.requests.manifest_get,
                warm.requests.blob_get,
                times.len()
            );
            let (kept, hints, content_hits) = content.stats();
            println!(
                "  kept content: {kept} manifests and configs, {hints} tag hints, {content_hits} hits"
            );
            super::print_hosts(&warm, Some(deferred_then_read(&report, &warm)));
        }
    }
    if !summary.is_empty() {
        println!(
            "\nwall time against Renovate (delay, variant: Klaud, Renovate, ratio; target ≤ 0.05 at 50 ms):"
        );
        for (delay, variant, klaud, renovate, ratio) in summary {
            let short = variant.split(" (").next().unwrap_or(variant);
            println!(
                "  {delay:>3} ms  {short:<60} {:>6.2} s {:>7.2} s  {ratio:.3}",
                klaud.as_secs_f64(),
                renovate.as_secs_f64()
            );
        }
    }
}

/// The pulls a warm plan may make on Docker Hub for tags the cold plan
/// deferred unread (`deferred: <tag> … not read: its tag names no date`)
/// and the warm one read: the tag's index and one manifest per platform.
fn deferred_then_read(
    cold: &klaud_planner::plan::PlanReport,
    warm: &klaud_planner::plan::PlanReport,
) -> u64 {
    let parked = |report: &klaud_planner::plan::PlanReport, i: usize| {
        report.families[i].reasons.iter().find_map(|r| {
            let rest = r.strip_prefix("deferred: ")?;
            rest.contains("not read: its tag names no date")
                .then(|| rest.split_whitespace().next().map(str::to_owned))
                .flatten()
        })
    };
    let mut tags = BTreeSet::new();
    let mut platforms = BTreeSet::new();
    for (i, family) in cold.families.iter().enumerate() {
        let Some(tag) = parked(cold, i) else { continue };
        if parked(warm, i).as_deref() == Some(tag.as_str()) {
            continue;
        }
        let Some((repository, _)) = family.current.rsplit_once(':') else {
            continue;
        };
        tags.insert((repository.to_owned(), tag.clone()));
        platforms.insert((repository.to_owned(), tag, family.architecture));
    }
    (tags.len() + platforms.len()) as u64
}

/// The floor of the held-out scenario from everything the bench seeded
/// (every tag's time, platforms and revision), independent of what a plan
/// reads: `push_times` where Docker Hub's tags API answers.
fn scenario_floor(
    repository: &Repository,
    retirements: &Retirements,
    seeded: &BTreeMap<String, BTreeMap<String, TagFacts>>,
    push_times: bool,
    now: DateTime<Utc>,
) -> BTreeMap<String, RequestCounts> {
    let mut families = Vec::new();
    let mut repositories = BTreeMap::new();
    for family in repository.families() {
        if retirements.reason(family).is_some() {
            continue;
        }
        let image = family.image();
        let host = image.registry().to_owned();
        let key = (host.clone(), image.normalized_repository());
        let facts = seeded.get(&image.repository()).cloned().unwrap_or_default();
        repositories
            .entry(key.clone())
            .or_insert_with(|| RepositoryFacts {
                tags: Some(facts.keys().cloned().collect()),
                push_times: push_times && host == "docker.io",
                facts,
            });
        families.push(FloorFamily {
            host,
            repository: key.1,
            tag: image.tag().map(str::to_owned),
            pinned: image.digest().is_some(),
            architecture: family.platform.architecture().to_owned(),
        });
    }
    klaud_planner::floor::floor(&Scenario {
        now,
        min_age: chrono::Duration::hours(24),
        rules: Vec::new(),
        families,
        repositories,
    })
}

/// The least wall time in which any client can make the scenario's
/// necessary requests (`by_host`, its floor) when each takes `delay_ms`
/// and a host answers at most `limit` at once (Klaud's default and
/// Renovate's): per host, the longer of its requests in rounds of `limit`
/// and its longest chain of reads that each need the one before — the tag
/// list; the index, then the platform's manifest (one read where Docker
/// Hub's tags API names the platform's digest); then the config. The tags
/// API is a host of its own (`hub.docker.com`), so its pages do not count
/// among Docker Hub's registry requests. CPU is left out: this is what the
/// round trips alone cost. Returns it with the host that sets it and why.
fn wall_floor(
    by_host: &BTreeMap<String, RequestCounts>,
    push_times: bool,
    delay_ms: u64,
    limit: usize,
) -> (u64, String) {
    let limit = limit.max(1) as u64;
    by_host
        .iter()
        .map(|(host, needed)| {
            let rounds = (needed.total() - needed.hub_api)
                .div_ceil(limit)
                .max(needed.hub_api.div_ceil(limit));
            let manifests = match needed.manifest_get {
                0 => u64::from(needed.manifest_head > 0),
                _ if push_times && host == "docker.io" => 1,
                _ => 2,
            };
            let chain = 1 + manifests + u64::from(needed.blob_get > 0);
            let why = if rounds >= chain {
                format!(
                    "{host}'s {} necessary registry requests at {limit} in flight take {rounds} round trips",
                    needed.total() - needed.hub_api
                )
            } else {
                format!("{host}'s longest chain of dependent reads is {chain} round trips")
            };
            (rounds.max(chain) * delay_ms, why)
        })
        .max_by_key(|(ms, _)| *ms)
        .unwrap_or((0, "nothing to read".to_owned()))
}

/// The last cold `cargo build --release` of the `klaud` binary (the
/// README's first command builds it), next to the target. A bench cannot
/// time a cold build of the workspace it is part of, so this is the
/// recorded figure, with its date and commit, from the file
/// `klaud demo --stats` prints too; configs/README.md "Performance" says
/// how it is measured.
pub const RECORDED_BUILD: &str = include_str!("../../../configs/cold-build.txt");

/// The 1-minute load average: wall times on a shared machine need it.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

/// A loopback port that accepts connections and never answers.
fn black_hole() -> url::Url {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    url::Url::parse(&format!("http://{addr}")).expect("url")
}

const SCALE_FAMILIES: usize = 10_000;
const SCALE_REPOSITORIES: usize = 500;
const SCALE_TAGS: usize = 6;

/// Writes a checkout with one master of `entries` families spread over
/// `repositories` image repositories.
fn write_masters(dir: &Path, entries: usize, repositories: usize, registry_host: &str) {
    std::fs::create_dir_all(dir.join("configs")).expect("configs dir");
    let mut text = String::with_capacity(entries * 200);
    for i in 0..entries {
        let repo = i % repositories;
        let tag = (i / repositories) % (SCALE_TAGS - 1);
        let _ = write!(
            text,
            "scale-{i:06}:\n  image: {registry_host}/scale/r{repo:03}:v1.0.{tag}\n  model: m\n  model-prefix: m\n  runner: h100\n  precision: fp8\n  framework: vllm\n  multinode: false\n  scenarios:\n    fixed-seq-len:\n    - isl: 1024\n      osl: 1024\n"
        );
    }
    std::fs::write(dir.join("configs/scale-master.yaml"), text).expect("write master");
}

/// 10,000 families over 500 repositories (see the bench's doc).
pub fn scale() {
    println!("\n== scale: {SCALE_FAMILIES} families over {SCALE_REPOSITORIES} repositories ==");
    let registry = start_registry();
    let now = Utc::now();
    let dir = tempfile::tempdir().expect("tempdir");
    write_masters(dir.path(), SCALE_FAMILIES, SCALE_REPOSITORIES, "docker.io");
    let started = Instant::now();
    let pusher = Pusher::new(registry.base_url());
    runtime().block_on(async {
        use futures::StreamExt as _;
        let pushes = (0..SCALE_REPOSITORIES).map(|r| {
            let pusher = pusher.clone();
            async move {
                for t in 0..SCALE_TAGS {
                    let created = now - chrono::Duration::days(60 - t as i64);
                    // A label per repository keeps every image distinct, as upstream.
                    let name = format!("scale/r{r:03}");
                    let labels = [("org.opencontainers.image.title", name.as_str())];
                    let platforms = [PlatformSpec::linux("amd64", &labels, Some(created))];
                    pusher
                        .push_image(&format!("scale/r{r:03}"), &format!("v1.0.{t}"), &platforms)
                        .await
                        .expect("push");
                }
            }
        });
        let mut results = futures::stream::iter(pushes).buffer_unordered(16);
        while results.next().await.is_some() {}
    });
    println!(
        "seeded {} tags in {SCALE_REPOSITORIES} repositories in {:.1} s",
        SCALE_REPOSITORIES * SCALE_TAGS,
        started.elapsed().as_secs_f64()
    );
    for concurrency in [16, 64] {
        reset_peak_memory();
        let mut config = RegistryConfig {
            concurrency,
            ..RegistryConfig::default()
        };
        config
            .mirrors
            .insert("docker.io".to_owned(), registry.base_url());
        let client = RegistryClient::new(config).expect("client");
        let cpu_before = (cpu_seconds(None), cpu_seconds(Some(registry.pid())));
        let profile = Profile::start(&[std::process::id(), registry.pid()]);
        let started = Instant::now();
        let repository = Repository::open(dir.path()).expect("scale masters load");
        let read = started.elapsed();
        let report =
            runtime().block_on(plan(&repository, &client.session(), &PlanOptions::new(now)));
        let wall = started.elapsed();
        drop(profile);
        let stale = report
            .families
            .iter()
            .filter(|f| f.candidate.is_some())
            .count();
        print_figures(
            &format!("scale plan, concurrency {concurrency}"),
            &report,
            concurrency,
        );
        println!(
            "  read masters {:.2} s + plan = {:.2} s wall (target ≤ 5 s), peak memory {:.1} MiB (target ≤ 150 MiB), {stale} families with a candidate, load average {}",
            read.as_secs_f64(),
            wall.as_secs_f64(),
            peak_mib(),
            load_average()
        );
        if let ((Some(own0), Some(reg0)), Some(own1), Some(reg1)) = (
            cpu_before,
            cpu_seconds(None),
            cpu_seconds(Some(registry.pid())),
        ) {
            println!(
                "  CPU: planner {:.2} s, docker-registry {:.2} s (the rest of the wall time is waiting on a shared machine)",
                own1 - own0,
                reg1 - reg0
            );
        }
    }
}

/// Reading masters of 32k and 200k entries: linear?
pub fn families() {
    println!("\n== families: reading large masters ==");
    let mut per_entry = Vec::new();
    for entries in [32_000usize, 200_000] {
        let dir = tempfile::tempdir().expect("tempdir");
        write_masters(dir.path(), entries, 500, "docker.io");
        reset_peak_memory();
        let started = Instant::now();
        let repository = Repository::open(dir.path()).expect("masters load");
        let elapsed = started.elapsed();
        assert_eq!(repository.families().len(), entries);
        let us = elapsed.as_secs_f64() * 1e6 / entries as f64;
        per_entry.push(us);
        println!(
            "  {entries:>7} entries: {:.2} s ({us:.1} µs per entry; target 200k < 10 s), peak memory {:.1} MiB",
            elapsed.as_secs_f64(),
            peak_mib()
        );
    }
    if let [small, large] = per_entry[..] {
        println!(
            "  cost per entry grows {:.2}× from 32k to 200k (1.0 = linear)",
            large / small
        );
    }
}
