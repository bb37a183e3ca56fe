//! Sick nodes across candidates: the failed jobs of Klaud's own runs,
//! triaged once each, grouped by node and signature. A node that fails the
//! same way for two families, or on two days, is the node's fault rather
//! than any one image's, so it is shown once (with every family it hit)
//! instead of once per candidate.
//!
//! Everything here is pure and reads only what GitHub says of the runs
//! (titles, branches, times, jobs and their logs), so every instance that
//! reads the same runs computes the same table.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use super::normalize::cut;
use super::triage::Triage;

/// How far back failed runs count.
pub const WINDOW: TimeDelta = TimeDelta::days(14);
/// A node is sick when one signature failed on it for at least this many
/// families…
pub const SICK_FAMILIES: usize = 2;
/// …or on at least this many days (UTC).
pub const SICK_DAYS: usize = 2;
/// Longest node name, family key or sample line kept, in characters.
const MAX_TEXT: usize = 200;
/// Most failed jobs of one run kept.
pub const MAX_FAILURES_PER_RUN: usize = 16;
/// Most families a row lists (the rest are counted).
pub const MAX_FAMILIES_SHOWN: usize = 12;

/// One failed job of a run, as the table counts it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeFailure {
    /// The node the log names, else the job's runner.
    pub node: String,
    /// The triage class (`infrastructure`, `engine`, `setup`, `unknown`).
    pub class: String,
    /// The playbook entry that matched, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<String>,
    /// The normalised signature's id (`sig-…`).
    pub signature: String,
    /// The first matching line, cut short.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<String>,
}

impl NodeFailure {
    /// What one failed job's triage says for the table, `node` being the
    /// node its log names or else its runner; `None` for teardown noise
    /// (no failure) and for a job whose node is not known.
    pub fn of(triage: &Triage, node: Option<&str>) -> Option<NodeFailure> {
        if !triage.is_failure() {
            return None;
        }
        let node = match triage {
            Triage::Infrastructure { node: Some(n), .. } => Some(n.as_str()),
            _ => node,
        }
        .filter(|n| !n.trim().is_empty())?;
        Some(NodeFailure {
            node: clip(node),
            class: triage.class_name().to_owned(),
            entry: triage.entry().map(clip),
            signature: triage.signature().map(|s| s.id.clone()).unwrap_or_default(),
            line: triage.lines().first().map(|l| clip(&l.text)),
        })
    }

    /// What the row is keyed by: the entry when one matched (its lines
    /// differ from job to job), else the normalised signature.
    fn key(&self) -> &str {
        self.entry.as_deref().unwrap_or(&self.signature)
    }
}

/// Whether reading a run's failed-job logs stops after this job's: its
/// known engine failure's entry is in scope (`ctx`) and has fixes, so a
/// playbook repair comes before anything the later logs could ask for (a
/// retry would meet the same failure again). Every reader stops here by
/// this one rule, in the jobs' listed order, as with [`BrokenRunners`]:
/// the sick-nodes pass always, the engine's triage when a repair follows
/// (and the failures it keeps for the table end here in any case), so
/// every instance's table counts the same jobs of a run.
pub fn settles_run(t: &Triage, book: &super::Playbook, ctx: &super::JobContext) -> bool {
    let Triage::KnownEngine { entry, .. } = t else {
        return false;
    };
    book.entry(entry)
        .is_some_and(|e| !e.fixes.is_empty() && e.applies_to(ctx))
}

/// The runners of one run whose own node a failed job's log already showed
/// broken (an infrastructure triage naming the runner itself): the log of
/// another failed job of that run on the same runner can change nothing.
/// The run is an infrastructure failure either way (any one job makes it
/// one), and the table counts that node for the run's family and day
/// already; only its tally of failed jobs stays lower. A runner that only
/// dispatches to other nodes (its log names another) is no such runner:
/// its other jobs may have run anywhere. Every reader of a run's logs (the
/// engine's triage, the sick-nodes pass) skips by this one rule, in the
/// jobs' listed order, so both keep the same failures for a run.
#[derive(Debug, Default, Clone)]
pub struct BrokenRunners(BTreeSet<String>);

impl BrokenRunners {
    /// After reading the log of a failed job on `runner`: what its
    /// `triage` found, as the table counts it.
    pub fn note(&mut self, runner: Option<&str>, triage: &Triage, failure: Option<&NodeFailure>) {
        if let (Some(runner), Triage::Infrastructure { .. }, Some(f)) = (runner, triage, failure)
            && f.node == runner
        {
            self.0.insert(runner.to_owned());
        }
    }

    /// Whether the log of a failed job on `runner` adds nothing.
    pub fn skips(&self, runner: Option<&str>) -> bool {
        runner.is_some_and(|r| self.0.contains(r))
    }
}

/// The failed jobs of one completed run attempt: what is kept by run and
/// attempt, since neither changes once the attempt completed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunFailures {
    /// The run's id.
    pub run: u64,
    /// Its attempt.
    pub attempt: u64,
    /// The family id of the candidate the run was for.
    pub family: String,
    /// The family's key as the smoke's title names it, when it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family_key: Option<String>,
    /// When the run was created (GitHub's time).
    pub at: DateTime<Utc>,
    /// Its failed jobs with a known node.
    pub failures: Vec<NodeFailure>,
    /// Whether its jobs were triaged with their family's scope (framework,
    /// hardware, engine version); a run kept without it is read again, so
    /// an entry scoped to its family can match.
    #[serde(default)]
    pub scoped: bool,
}

/// The failed runs the last sick-nodes table was made from: what a report
/// written between two passes judges a node by.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SickWindow {
    /// The runs, as kept by run and attempt.
    pub runs: Vec<RunFailures>,
}

/// Which candidate's family a run of Klaud's was for, from what GitHub
/// says of it: the sweep runs on the candidate's branch
/// (`klaud/auto-<candidate>`), the smoke's title ends with
/// `klaud-<owner run>-<candidate>` and starts with the family key. The
/// family id is the candidate id's first part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFamily {
    /// The family id.
    pub family: String,
    /// The family key, when the title names it.
    pub key: Option<String>,
    /// The candidate id (`<family id>-<image identity>`), lowercase.
    pub candidate: String,
}

/// The family of a run of Klaud's, or `None` when the run is none of its
/// candidates'.
pub fn run_family(title: Option<&str>, head_branch: Option<&str>) -> Option<RunFamily> {
    let family_of = |candidate: &str| {
        let id = candidate.split('-').next().unwrap_or_default();
        let plain =
            |s: &str| s.len() <= 130 && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        (!id.is_empty() && id.len() <= 64 && plain(candidate))
            .then(|| (id.to_ascii_lowercase(), candidate.to_ascii_lowercase()))
    };
    let title = title.unwrap_or_default();
    let from_title = title.split_whitespace().last().and_then(|last| {
        let rest = last.strip_prefix("klaud-")?;
        let (run, candidate) = rest.split_once('-')?;
        (!run.is_empty() && run.chars().all(|c| c.is_ascii_digit()))
            .then_some(candidate)
            .and_then(family_of)
    });
    if let Some((family, candidate)) = from_title {
        // The repository's `run-name` may put words before the label
        // (InferenceX's is `smoke - <test-name>`).
        let key = title
            .split_once(" · ")
            .map(|(k, _)| k.rsplit_once(" - ").map_or(k, |(_, k)| k).trim())
            .filter(|k| !k.is_empty())
            .map(clip);
        return Some(RunFamily {
            family,
            key,
            candidate,
        });
    }
    let (family, candidate) = family_of(head_branch?.strip_prefix("klaud/auto-")?)?;
    Some(RunFamily {
        family,
        key: None,
        candidate,
    })
}

/// One sick node and the signature it keeps failing with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SickNodeRow {
    /// The node.
    pub node: String,
    /// The playbook entry, or the normalised signature when none matched.
    pub signature: String,
    /// The playbook entry that matched, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<String>,
    /// The triage class of the newest failure.
    pub class: String,
    /// The families it hit, by key where a title named it (else by id),
    /// sorted, at most [`MAX_FAMILIES_SHOWN`].
    pub families: Vec<String>,
    /// How many families it hit in all.
    pub family_count: usize,
    /// How many failed jobs (whose logs were read: see [`BrokenRunners`]).
    pub failures: usize,
    /// The first failure's run's creation time.
    pub first_seen: DateTime<Utc>,
    /// The last.
    pub last_seen: DateTime<Utc>,
    /// A line of the newest failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<String>,
}

/// The sick nodes among `runs`: one row per node and signature that failed
/// for at least [`SICK_FAMILIES`] families or on at least [`SICK_DAYS`]
/// days, the most failures first, then the newest.
pub fn sick_nodes(runs: &[RunFailures]) -> Vec<SickNodeRow> {
    // A family's key from any run that names it, so the sweep's runs
    // (titled by the PR) show the same name as the smoke's.
    let keys: BTreeMap<&str, &str> = runs
        .iter()
        .filter_map(|r| Some((r.family.as_str(), r.family_key.as_deref()?)))
        .collect();
    struct Acc<'a> {
        families: BTreeSet<&'a str>,
        days: BTreeSet<chrono::NaiveDate>,
        failures: usize,
        first: DateTime<Utc>,
        last: DateTime<Utc>,
        newest: &'a NodeFailure,
    }
    let mut groups: BTreeMap<(&str, &str), Acc<'_>> = BTreeMap::new();
    for run in runs {
        for f in &run.failures {
            let acc = groups.entry((&f.node, f.key())).or_insert_with(|| Acc {
                families: BTreeSet::new(),
                days: BTreeSet::new(),
                failures: 0,
                first: run.at,
                last: run.at,
                newest: f,
            });
            acc.families.insert(&run.family);
            acc.days.insert(run.at.date_naive());
            acc.failures += 1;
            acc.first = acc.first.min(run.at);
            if run.at >= acc.last {
                acc.last = run.at;
                acc.newest = f;
            }
        }
    }
    let mut rows: Vec<SickNodeRow> = groups
        .into_iter()
        .filter(|(_, a)| a.families.len() >= SICK_FAMILIES || a.days.len() >= SICK_DAYS)
        .map(|((node, key), a)| {
            let mut families: Vec<String> = a
                .families
                .iter()
                .map(|f| keys.get(f).copied().unwrap_or(f).to_owned())
                .collect();
            families.sort();
            families.dedup();
            families.truncate(MAX_FAMILIES_SHOWN);
            SickNodeRow {
                node: node.to_owned(),
                signature: key.to_owned(),
                entry: a.newest.entry.clone(),
                class: a.newest.class.clone(),
                families,
                family_count: a.families.len(),
                failures: a.failures,
                first_seen: a.first,
                last_seen: a.last,
                line: a.newest.line.clone(),
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        b.failures
            .cmp(&a.failures)
            .then(b.last_seen.cmp(&a.last_seen))
            .then(a.node.cmp(&b.node))
            .then(a.signature.cmp(&b.signature))
    });
    rows
}

fn clip(text: &str) -> String {
    let one: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    cut(one.trim(), MAX_TEXT).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn a_run_is_settled_by_a_known_engine_failure_with_a_fix_in_scope_only() {
        let book = crate::playbook::Playbook::parse(
            "demo",
            include_str!("../../../configs/demo/.github/klaud-playbook.yaml"),
        )
        .expect("the demo playbook parses");
        let vllm = crate::playbook::JobContext {
            framework: Some("vllm".into()),
            ..Default::default()
        };
        let sglang = crate::playbook::JobContext {
            framework: Some("sglang".into()),
            ..Default::default()
        };
        let triage = |log: &str, ctx: &crate::playbook::JobContext| {
            crate::playbook::triage(&crate::playbook::JobLogView::new(log), &book, ctx)
        };
        let oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n";
        assert!(settles_run(&triage(oom, &vllm), &book, &vllm));
        // Out of the entry's scope: nothing is known, nothing settled.
        assert!(!settles_run(&triage(oom, &sglang), &book, &sglang));
        // A broken node, teardown noise and the unknown settle nothing:
        // the logs after them still decide.
        for log in [
            "srun: error: pyxis is broken\n",
            "============ Serving Benchmark Result ============\nSuccessful requests: 64\nEngineDeadError\n",
            "Traceback (most recent call last):\nRuntimeError: something new\n",
        ] {
            assert!(!settles_run(&triage(log, &vllm), &book, &vllm), "{log}");
        }
    }

    fn at(day: u32, hour: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, day, hour, 0, 0).unwrap()
    }

    fn failure(node: &str, entry: Option<&str>, sig: &str) -> NodeFailure {
        NodeFailure {
            node: node.into(),
            class: "infrastructure".into(),
            entry: entry.map(str::to_owned),
            signature: sig.into(),
            line: Some(format!("{sig} line")),
        }
    }

    fn run(
        id: u64,
        family: &str,
        key: Option<&str>,
        when: DateTime<Utc>,
        f: Vec<NodeFailure>,
    ) -> RunFailures {
        RunFailures {
            run: id,
            attempt: 1,
            family: family.into(),
            family_key: key.map(str::to_owned),
            at: when,
            failures: f,
            scoped: true,
        }
    }

    #[test]
    fn one_node_failing_for_two_families_is_one_row_listing_both() {
        let runs = vec![
            run(
                1,
                "aaaa",
                Some("fam-a"),
                at(1, 10),
                vec![failure("gpu-node-7", Some("node-pyxis-broken"), "sig-1")],
            ),
            run(
                2,
                "bbbb",
                Some("fam-b"),
                at(1, 12),
                vec![failure("gpu-node-7", Some("node-pyxis-broken"), "sig-2")],
            ),
            // The same family again: counted, not listed twice.
            run(
                3,
                "aaaa",
                None,
                at(1, 14),
                vec![failure("gpu-node-7", Some("node-pyxis-broken"), "sig-1")],
            ),
        ];
        let rows = sick_nodes(&runs);
        assert_eq!(rows.len(), 1, "{rows:#?}");
        let r = &rows[0];
        assert_eq!(r.node, "gpu-node-7");
        assert_eq!(r.signature, "node-pyxis-broken");
        assert_eq!(r.entry.as_deref(), Some("node-pyxis-broken"));
        assert_eq!(r.families, vec!["fam-a", "fam-b"]);
        assert_eq!(r.family_count, 2);
        assert_eq!(r.failures, 3);
        assert_eq!(r.first_seen, at(1, 10));
        assert_eq!(r.last_seen, at(1, 14));
    }

    #[test]
    fn one_family_on_one_day_is_not_sick_but_on_two_days_it_is() {
        let once = vec![
            run(
                1,
                "aaaa",
                None,
                at(1, 10),
                vec![failure("n1", None, "sig-x")],
            ),
            run(
                2,
                "aaaa",
                None,
                at(1, 20),
                vec![failure("n1", None, "sig-x")],
            ),
        ];
        assert!(sick_nodes(&once).is_empty());
        let twice = vec![
            run(
                1,
                "aaaa",
                None,
                at(1, 10),
                vec![failure("n1", None, "sig-x")],
            ),
            run(
                2,
                "aaaa",
                None,
                at(2, 9),
                vec![failure("n1", None, "sig-x")],
            ),
        ];
        let rows = sick_nodes(&twice);
        assert_eq!(rows.len(), 1);
        // Without a key the family is named by its id.
        assert_eq!(rows[0].families, vec!["aaaa"]);
        assert_eq!(rows[0].signature, "sig-x");
    }

    #[test]
    fn different_signatures_or_nodes_are_different_rows() {
        let runs = vec![
            run(
                1,
                "aaaa",
                None,
                at(1, 10),
                vec![failure("n1", None, "sig-x"), failure("n2", None, "sig-x")],
            ),
            run(
                2,
                "bbbb",
                None,
                at(1, 11),
                vec![failure("n1", None, "sig-y"), failure("n2", None, "sig-x")],
            ),
        ];
        let rows = sick_nodes(&runs);
        assert_eq!(rows.len(), 1, "{rows:#?}");
        assert_eq!(
            (rows[0].node.as_str(), rows[0].signature.as_str()),
            ("n2", "sig-x")
        );
    }

    #[test]
    fn a_runs_family_comes_from_its_title_or_its_branch() {
        let smoke = run_family(
            Some("smoke - dsr1-fp4-b200-sglang · Initial smoke · klaud-42-0123456789abcdef-fedcba9876543210"),
            Some("main"),
        )
        .expect("smoke");
        assert_eq!(smoke.family, "0123456789abcdef");
        assert_eq!(smoke.key.as_deref(), Some("dsr1-fp4-b200-sglang"));
        assert_eq!(smoke.candidate, "0123456789abcdef-fedcba9876543210");
        let sweep = run_family(
            Some("Sweep - Bump sglang"),
            Some("klaud/auto-0123456789abcdef-fedcba9876543210"),
        )
        .expect("sweep");
        assert_eq!(sweep.family, "0123456789abcdef");
        assert_eq!(sweep.key, None);
        assert_eq!(sweep.candidate, "0123456789abcdef-fedcba9876543210");
        assert_eq!(run_family(Some("a person's run"), Some("main")), None);
        assert_eq!(run_family(Some("x klaud-run-abc"), None), None);
        assert_eq!(run_family(None, Some("klaud/auto-")), None);
    }

    #[test]
    fn a_runner_whose_own_node_a_log_showed_broken_is_not_read_again() {
        let infra = |node: &str| Triage::Infrastructure {
            node: Some(node.into()),
            entry: Some("node-pyxis-broken".into()),
            signature: crate::playbook::LogSignature::of(["pyxis is broken"]),
            lines: Vec::new(),
        };
        let unknown = Triage::Unknown {
            signature: crate::playbook::LogSignature::of(["boom"]),
            lines: Vec::new(),
        };
        let mut broken = BrokenRunners::default();
        // An unknown failure on a runner says nothing of its other jobs.
        let t = unknown.clone();
        broken.note(Some("r1"), &t, NodeFailure::of(&t, Some("r1")).as_ref());
        assert!(!broken.skips(Some("r1")));
        // A runner that dispatches elsewhere: its log named another node,
        // so its other jobs may have run on healthy ones.
        let t = infra("slurm-node-9");
        broken.note(
            Some("login-1"),
            &t,
            NodeFailure::of(&t, Some("login-1")).as_ref(),
        );
        assert!(!broken.skips(Some("login-1")));
        assert!(!broken.skips(Some("slurm-node-9")));
        // The runner itself broken: its other jobs are not read, other
        // runners' and jobs without a runner are.
        let t = infra("r2");
        broken.note(Some("r2"), &t, NodeFailure::of(&t, Some("r2")).as_ref());
        assert!(broken.skips(Some("r2")));
        assert!(!broken.skips(Some("r3")));
        assert!(!broken.skips(None));
        // Nothing is noted for a job without a runner.
        let mut none = BrokenRunners::default();
        none.note(None, &t, NodeFailure::of(&t, None).as_ref());
        assert!(!none.skips(Some("r2")));
    }

    #[test]
    fn teardown_noise_and_jobs_without_a_node_are_not_counted() {
        let teardown = Triage::TeardownNoise {
            entry: "engine-dead-after-window".into(),
            window_end: 3,
            lines: Vec::new(),
        };
        assert_eq!(NodeFailure::of(&teardown, Some("n1")), None);
        let unknown = Triage::Unknown {
            signature: crate::playbook::LogSignature::of(["boom"]),
            lines: Vec::new(),
        };
        assert_eq!(NodeFailure::of(&unknown, None), None);
        let f = NodeFailure::of(&unknown, Some("runner-3")).expect("counted");
        assert_eq!(f.node, "runner-3");
        assert_eq!(f.class, "unknown");
        assert!(f.signature.starts_with("sig-"), "{f:?}");
    }
}
