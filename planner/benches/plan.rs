//! Benchmark: plan the full InferenceX masters against a real
//! `docker-registry` on loopback and print wall time, requests by kind next
//! to the floor, and peak memory — cold (empty caches) and warm (a second
//! plan in the same process).
//!
//! `cargo bench -p klaud-planner --bench plan` (needs `docker-registry`, e.g.
//! `apt-get install -y docker-registry`, and the shared fixtures beside the
//! checkout). Set `KLAUD_BENCH_CONCURRENCY` to change the requests in flight
//! per registry host (16 by default, Klaud's and Renovate's), for every
//! scenario but `scale`, which runs at 16 and 64.
//!
//! Scenarios (all by default; name some to run only those, e.g.
//! `cargo bench -p klaud-planner --bench plan -- heldout scale`):
//! - `fixtures`: the masters with one newer tag per track (cold and warm);
//! - `heldout`: the masters with several newer tags per stale track in every
//!   tag shape, every registry host mirrored and no Docker Hub API — checks
//!   the proposed tag of every track against the newest one pushed, then
//!   again with `hub.docker.com` mirrored to a port that never answers;
//! - `scale`: 10,000 families over 500 repositories;
//! - `families`: reading masters of 32k and 200k entries.
//!
//! Requests are printed next to the plan's own floor (`klaud_planner::floor`
//! over the scenario the plan saw) and, on `heldout`, the floor of the
//! whole scenario from every image the bench seeded.
//!
//! `KLAUD_BENCH_DELAY_MS=0,50` runs `heldout` once per delay, each
//! registry and tags API request held that long by a loopback proxy
//! (`registry::testkit::DelayProxy`), Renovate's too, as a registry across
//! the internet answers, and prints next to each plan's wall time the
//! least any client could take at that delay (`scenarios::wall_floor`,
//! from the scenario floor and the protocol's chains of reads).
//!
//! `KLAUD_BENCH_RENOVATE=<renovate binary>` adds Renovate's wall time on
//! the `heldout` scenario, at each delay (see `plan/renovate.rs`); `KLAUD_BENCH_PERF=<file>`
//! records a `perf` profile (planner and registry) of the `scale` plan and
//! of the `heldout` plan that Renovate is compared with.

use std::path::Path;
use std::time::Instant;

use chrono::Utc;
use klaud_planner::plan::{PlanOptions, PlanReport, plan};
use klaud_planner::registry::testkit::{LocalRegistry, Pusher, seed_repository};
use klaud_planner::registry::{RegistryClient, RegistryConfig};
use klaud_planner::repo::Repository;

#[path = "plan/renovate.rs"]
mod renovate;
#[path = "plan/scenarios.rs"]
mod scenarios;

/// The requests in flight per registry host: `KLAUD_BENCH_CONCURRENCY`, or
/// the client's default.
fn concurrency() -> usize {
    std::env::var("KLAUD_BENCH_CONCURRENCY")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| RegistryConfig::default().concurrency)
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let want = |name: &str| args.is_empty() || args.iter().any(|a| a == name);
    if want("fixtures") {
        fixtures();
    }
    if want("heldout") {
        scenarios::heldout();
    }
    if want("scale") {
        scenarios::scale();
    }
    if want("families") {
        scenarios::families();
    }
}

fn fixtures() {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/inferencex/full");
    if !full.is_dir() {
        eprintln!(
            "the shared InferenceX fixtures are not at {}; nothing to measure",
            full.display()
        );
        std::process::exit(2);
    }
    let registry = match LocalRegistry::start() {
        Ok(registry) => registry,
        Err(err) => {
            eprintln!("cannot start docker-registry: {err}");
            std::process::exit(2);
        }
    };
    let concurrency = concurrency();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let repository = Repository::open(&full).expect("fixtures load");
        let now = Utc::now();
        let started = Instant::now();
        let seeded = seed_repository(&Pusher::new(registry.base_url()), &repository, now)
            .await
            .expect("seeding the local registry");
        println!(
            "seeded {} tags in {} repositories ({} newer, {} pruned) in {:.1} s",
            seeded.tags,
            seeded.repositories,
            seeded.newer.len(),
            seeded.pruned.len(),
            started.elapsed().as_secs_f64()
        );
        let mut config = RegistryConfig {
            concurrency,
            ..RegistryConfig::default()
        };
        for host in [
            "docker.io",
            "nvcr.io",
            "ghcr.io",
            "quay.io",
            "hub.docker.com",
        ] {
            config.mirrors.insert(host.to_owned(), registry.base_url());
        }
        let client = RegistryClient::new(config).expect("client");
        let options = PlanOptions::new(now);
        let cold = plan(&repository, &client.session(), &options).await;
        print_figures("cold plan (empty caches)", &cold, concurrency);
        let warm = plan(&repository, &client.session(), &options).await;
        print_figures("warm plan (same process)", &warm, concurrency);
    });
    if let Some(peak) = peak_memory_kib() {
        println!("peak memory: {:.1} MiB", peak as f64 / 1024.0);
    }
}

pub(crate) fn print_figures(title: &str, report: &PlanReport, concurrency: usize) {
    print_against(title, report, concurrency, None);
}

/// The requests made next to the plan's own floor (the scenario as the
/// plan saw it: an image it never read is taken at its cheapest) and, when
/// the bench knows every image it seeded, the floor of the whole scenario.
pub(crate) fn print_against(
    title: &str,
    report: &PlanReport,
    concurrency: usize,
    scenario: Option<&klaud_planner::registry::RequestCounts>,
) {
    let r = report.requests;
    let f = report.floor;
    let s = scenario.copied().unwrap_or_default();
    println!(
        "\n{title}: {} families, {} candidates, {} ms, concurrency {concurrency}",
        report.families.len(),
        report.candidates.len(),
        report.elapsed_ms
    );
    println!(
        "  {:<14} {:>6} {:>8} {:>15}",
        "requests", "made", "floor", "scenario floor"
    );
    for (name, made, floor, full) in [
        (
            "manifest_head",
            r.manifest_head,
            f.manifest_head,
            s.manifest_head,
        ),
        (
            "manifest_get",
            r.manifest_get,
            f.manifest_get,
            s.manifest_get,
        ),
        ("blob_get", r.blob_get, f.blob_get, s.blob_get),
        ("tags_list", r.tags_list, f.tags_list, s.tags_list),
        ("token", r.token, f.token, s.token),
        ("hub_api", r.hub_api, f.hub_api, s.hub_api),
        ("other", r.other, f.other, s.other),
    ] {
        let full = if scenario.is_some() {
            full.to_string()
        } else {
            "-".to_owned()
        };
        println!("  {name:<14} {made:>6} {floor:>8} {full:>15}");
    }
    let (against, what) = match scenario {
        Some(s) => (s.total(), "the scenario floor"),
        None => (f.total(), "the floor"),
    };
    println!(
        "  {:<14} {:>6} {:>8} {:>15}   ({:.2}× {what}; target ≤ 1.06×)",
        "total",
        r.total(),
        f.total(),
        scenario.map_or("-".to_owned(), |s| s.total().to_string()),
        r.total() as f64 / against.max(1) as f64
    );
    // Docker Hub's tags API asked where the scenario has none that
    // answers (an outage): each repository's page is asked at once, before
    // the first could fail, since asking one first would cost a round trip
    // in every plan where the API answers. Shown apart, not hidden.
    if let Some(s) = scenario.filter(|s| s.hub_api == 0 && r.hub_api > 0) {
        let registry = r.total() - r.hub_api;
        println!(
            "  {:<14} {registry:>6} {:>8} {:>15}   ({:.2}× the scenario floor, without the {} tags API request(s) that never answered)",
            "registry",
            f.total() - f.hub_api,
            s.total(),
            registry as f64 / s.total().max(1) as f64,
            r.hub_api
        );
    }
    print_hosts(report, None);
}

/// Pulls (manifest GETs) and requests per registry host, next to their
/// targets: on Docker Hub, whose manifest GETs are pulls counted against
/// a small hourly quota, at most 2 per proposed image (its index and its
/// platform's manifest; a tag proposed to amd64 and arm64 families is two
/// images behind one index) in a cold plan and, in a warm one, none for a
/// tag already read: `warm` is what the warm plan may pull for the tags the
/// cold plan deferred (Docker Hub without its tags API reads them in the
/// next plan, from what its kept proposals no longer cost).
pub(crate) fn print_hosts(report: &PlanReport, warm: Option<u64>) {
    type Proposed = std::collections::BTreeMap<String, std::collections::BTreeSet<String>>;
    let (mut proposed, mut images): (Proposed, Proposed) = Default::default();
    for family in &report.families {
        if let Some(c) = &family.candidate {
            let tag = format!("{}:{}", c.image.normalized_repository(), c.tag);
            let host = c.image.registry().to_owned();
            images
                .entry(host.clone())
                .or_default()
                .insert(format!("{tag} {}", family.architecture));
            proposed.entry(host).or_default().insert(tag);
        }
    }
    let mut hosts: std::collections::BTreeSet<&String> = report.requests_by_host.keys().collect();
    hosts.extend(report.floor_by_host.keys());
    println!(
        "  {:<10} {:>6} {:>10} {:>8} {:>8}   pull target",
        "host", "pulls", "candidates", "requests", "floor"
    );
    for host in hosts {
        let made = report
            .requests_by_host
            .get(host)
            .copied()
            .unwrap_or_default();
        let minimum = report.floor_by_host.get(host).copied().unwrap_or_default();
        let candidates = proposed.get(host.as_str()).map_or(0, |c| c.len());
        let proposals = images.get(host.as_str()).map_or(0, |c| c.len());
        let target = if host != "docker.io" {
            "no pull quota".to_owned()
        } else if let Some(deferred) = warm {
            let verdict = if made.manifest_get <= deferred {
                "met"
            } else {
                "MISSED"
            };
            if deferred == 0 {
                format!("0 (warm), {verdict}")
            } else {
                format!(
                    "0 (warm) + {deferred} for tags the cold plan deferred, now read, {verdict}"
                )
            }
        } else {
            let bound = 2 * proposals as u64;
            let verdict = if made.manifest_get <= bound {
                "met"
            } else {
                "MISSED"
            };
            format!("≤ 2 × {proposals} images = {bound}, {verdict}")
        };
        println!(
            "  {host:<10} {:>6} {candidates:>10} {:>8} {:>8}   {target}",
            made.manifest_get,
            made.total(),
            minimum.total(),
        );
    }
}

/// `perf record` of the given processes while alive, when
/// `KLAUD_BENCH_PERF=<file>` is set: profiles only the measured plan, not
/// the seeding before it (`perf report -i <file> --sort comm,dso,sym`).
pub(crate) struct Profile(Option<std::process::Child>);

impl Profile {
    pub(crate) fn start(pids: &[u32]) -> Self {
        let Some(out) = std::env::var_os("KLAUD_BENCH_PERF") else {
            return Self(None);
        };
        let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
        let child = std::process::Command::new("perf")
            .args(["record", "-q", "-F", "999", "-g", "-o"])
            .arg(&out)
            .args(["-p", &pids.join(",")])
            .stdout(std::process::Stdio::null())
            .spawn();
        match child {
            Ok(child) => {
                // perf attaches asynchronously; give it a moment.
                std::thread::sleep(std::time::Duration::from_millis(300));
                Self(Some(child))
            }
            Err(err) => {
                eprintln!("KLAUD_BENCH_PERF set but perf does not start: {err}");
                Self(None)
            }
        }
    }
}

impl Drop for Profile {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            // perf writes its file on SIGINT.
            let _ = std::process::Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
            let _ = child.wait();
        }
    }
}

pub(crate) fn peak_memory_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

/// User plus system CPU seconds a process has used so far (`self` or a
/// pid), from `/proc/<pid>/stat`; `None` off Linux. The wall time of a
/// loopback benchmark on a shared machine says little alone: this splits
/// it between the planner and the registry it talks to.
pub(crate) fn cpu_seconds(pid: Option<u32>) -> Option<f64> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/stat"),
        None => "/proc/self/stat".to_owned(),
    };
    let stat = std::fs::read_to_string(path).ok()?;
    // The command name (field 2) may hold spaces; the fields after its
    // closing parenthesis are fixed: utime and stime are the 12th and 13th.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // USER_HZ is 100 on every Linux ABI Rust targets.
    Some(ticks / 100.0)
}
