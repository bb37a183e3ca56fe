//! How the engine is configured for one repository ([`EngineConfig`]), the
//! names it derives from a candidate (its branch, its smoke's test name, its
//! commits' trailer) and its `perf-changelog.yaml` entry.

use crate::artifacts::ArtifactLimits;
use crate::model::DEFAULT_REPAIR_BUDGET;
use crate::workflow_contract::DraftPolicy;
use chrono::TimeDelta;
use klaud_claims::PullNumber;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Every sweep label Klaud manages (see configs/README.md#what-klaud-reads-from-the-benchmark-repositorys-workflows).
pub const SWEEP_LABELS: [&str; 8] = [
    "sweep-enabled",
    "full-sweep-enabled",
    "non-canary-full-sweep-enabled",
    "full-sweep-fail-fast",
    "full-sweep-fail-fast-no-canary",
    "all-evals",
    "evals-only",
    "agentx-fast",
];

/// How the engine works for one repository.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The owner run written into claims and markers.
    pub owner_run: u64,
    /// The base branch.
    pub base_branch: String,
    /// The bot's display name in titles.
    pub display_name: String,
    /// The targeted smoke workflow file.
    pub smoke_workflow: String,
    /// The final sweep workflow file.
    pub sweep_workflow: String,
    /// The one primary sweep label Klaud sets.
    pub sweep_label: String,
    /// Every sweep label Klaud manages (the others are removed).
    pub managed_labels: Vec<String>,
    /// Repairs a candidate may use.
    pub repair_budget: u32,
    /// Claim lease length; renewed when less than half is left.
    pub lease: TimeDelta,
    /// Lease that must be left beyond a write's timeout when the write is
    /// sent (the write window is this plus `write_timeout`, at most a
    /// quarter of the lease less a second: test-sized leases).
    pub lease_margin: TimeDelta,
    /// How long one GitHub write may take (the transport's timeout).
    pub write_timeout: TimeDelta,
    /// Authorize reuse of the validated sweep at merge (`/reuse-sweep-run`).
    pub authorize_reuse: bool,
    /// How long a dispatched run may take to show up before Klaud
    /// dispatches again.
    pub dispatch_grace: TimeDelta,
    /// Model prefix (a master entry's `model-prefix`) → display name the
    /// results API knows it by: overrides what the baseline source finds.
    pub model_names: BTreeMap<String, String>,
    /// Bounds on artifact sizes.
    pub artifact_limits: ArtifactLimits,
    /// How long a smoke run may stay unfinished before Klaud cancels it and
    /// retries (an infrastructure failure).
    pub run_timeout: TimeDelta,
    /// How long after labelling the final sweep may take to start before
    /// the candidate ends `uncertain`.
    pub sweep_start_timeout: TimeDelta,
    /// Base of the changelog's `pr-link` (the benchmark repository's gate
    /// wants `https://github.com/<owner>/<repo>/pull/<N>`).
    pub pr_link_base: String,
    /// Whether the final sweep runs on draft PRs (`auto`: read the sweep
    /// workflow's job conditions at the base commit).
    pub sweep_runs_on_drafts: DraftPolicy,
    /// How the base checkout is read (configured recipe roots).
    pub repo: klaud_planner::repo::RepoOptions,
    /// How a bump treats recipes that disagree with the master.
    pub bump: klaud_planner::bump::BumpOptions,
    /// The capacity gate (see configs/README.md#shared-clusters-capacity), checked before claiming and before
    /// every dispatch (smoke, re-run, sweep label); `None`: no gate.
    pub capacity: Option<Arc<klaud_planner::capacity::CapacityGate>>,
    /// What to do with a Klaud PR already open when somebody else's PR
    /// starts to overlap its family.
    pub on_human_overlap: HumanOverlap,
    /// `[[experiments]]`: families whose candidate runs as racing variants; empty: every candidate runs alone.
    pub experiments: Vec<crate::experiment::ExperimentSpec>,
    /// Whether a candidate needs the published baseline of its family's
    /// current image for every point before any GPU work (`readiness-
    /// blocked` otherwise). Off: missing points are N/A rows. Only checked
    /// when a results API is configured.
    pub require_baseline: bool,
    /// Live attempt reports: the least time between two edits of a run's
    /// report comment while the run is in progress, and how long a run
    /// with no finished job waits for its first one (`None`: the report is
    /// posted only when the run ends).
    pub live_report_interval: Option<TimeDelta>,
    /// The playbook's path in the benchmark repository, read at the
    /// candidate's base (empty: no playbook).
    pub playbook: String,
    /// The dashboard issue's number, when the wave's composition found one:
    /// every PR body's footer links it.
    pub dashboard_issue: Option<u64>,
    /// Klaud PRs closed unmerged whose "not this image" rule a maintainer
    /// undid on the dashboard issue: their candidate may be proposed again,
    /// with a new PR beside the closed one, and does not cool down.
    pub undone_declines: Vec<PullNumber>,
    /// `[hunt]`: regression hunts; off by default.
    pub hunt: crate::hunt::HuntSettings,
}

impl EngineConfig {
    /// Whether `rec` ended because a person closed its PR unmerged and a
    /// maintainer has since undone that "not this image".
    pub fn decline_undone(&self, rec: &super::journal::CandidateRecord) -> bool {
        rec.step == super::journal::Step::Done
            && rec
                .ending
                .as_ref()
                .and_then(|e| e.declined.as_ref())
                .is_some_and(|d| self.undone_declines.contains(&d.pull))
    }
}

/// What Klaud does with its own open PR when a human PR later changes the
/// same family (`[lifecycle] on_human_overlap`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HumanOverlap {
    /// Leave Klaud's PR as it is; the dashboard notes the overlap.
    #[default]
    Leave,
    /// End Klaud's candidate `handoff` with the usual cleanup (its runs
    /// cancelled, its PR closed with a receipt naming the human PR).
    Handoff,
}

impl EngineConfig {
    /// The defaults (see configs/README.md#what-klaud-reads-from-the-benchmark-repositorys-workflows
    /// and `klaud_lifecycle::model`) for `owner_run`.
    pub fn new(owner_run: u64) -> Self {
        Self {
            owner_run,
            base_branch: "main".into(),
            display_name: crate::report::DEFAULT_DISPLAY_NAME.into(),
            smoke_workflow: "e2e-tests.yml".into(),
            sweep_workflow: "run-sweep.yml".into(),
            sweep_label: "full-sweep-fail-fast".into(),
            managed_labels: SWEEP_LABELS.iter().map(|s| (*s).to_owned()).collect(),
            repair_budget: DEFAULT_REPAIR_BUDGET,
            lease: TimeDelta::hours(2),
            lease_margin: TimeDelta::minutes(1),
            // klaud-github's connect (15 s) plus read (60 s) timeouts.
            write_timeout: TimeDelta::seconds(75),
            authorize_reuse: true,
            dispatch_grace: TimeDelta::minutes(2),
            model_names: BTreeMap::new(),
            artifact_limits: ArtifactLimits::default(),
            pr_link_base: "https://github.com".into(),
            sweep_start_timeout: TimeDelta::hours(1),
            run_timeout: TimeDelta::hours(12),
            sweep_runs_on_drafts: DraftPolicy::Auto,
            repo: klaud_planner::repo::RepoOptions::default(),
            bump: klaud_planner::bump::BumpOptions::default(),
            capacity: None,
            on_human_overlap: HumanOverlap::Leave,
            experiments: Vec::new(),
            require_baseline: true,
            live_report_interval: Some(TimeDelta::minutes(5)),
            playbook: crate::playbook::DEFAULT_PATH.to_owned(),
            dashboard_issue: None,
            undone_declines: Vec::new(),
            hunt: crate::hunt::HuntSettings::default(),
        }
    }
}

/// `klaud-<owner run>-<candidate>`: what identifies a smoke run as this
/// candidate's, at the end of its `test-name` input (and so of its title).
/// Runs dispatched before titles named the family carry exactly this.
pub fn smoke_test_name(owner_run: u64, candidate: &str) -> String {
    format!("klaud-{owner_run}-{candidate}")
}

/// The smoke's `test-name` input: `<family key> · <attempt> ·
/// klaud-<owner run>-<candidate>`. The repository's `run-name` echoes it,
/// so the Actions tab names the family and the attempt; the identity stays
/// last, where [`is_smoke_title`] finds it.
pub fn smoke_run_label(key: &str, attempt: &str, owner_run: u64, candidate: &str) -> String {
    let key: String = key.split_whitespace().collect::<Vec<_>>().join(" ");
    format!(
        "{key} · {attempt} · {}",
        smoke_test_name(owner_run, candidate)
    )
}

/// Whether a run title is one of this candidate's smokes: it ends with
/// [`smoke_test_name`] after a space (or is exactly it), whether the run
/// was dispatched with the family-naming label or before it existed.
pub fn is_smoke_title(title: &str, owner_run: u64, candidate: &str) -> bool {
    let id = smoke_test_name(owner_run, candidate);
    title
        .strip_suffix(&id)
        .is_some_and(|before| before.is_empty() || before.ends_with(' '))
}

/// The commit trailer that names the candidate a commit of Klaud's is for.
pub(super) const TRAILER: &str = "Klaud-Candidate: ";

/// Klaud's `perf-changelog.yaml` entry for a bump of family `key` to
/// `image`, listing `config_keys` and linking `link` (its PR). The final
/// step and the upkeep merge both write this entry; the repository's gate
/// (`utils/validate_perf_changelog.py`) is run on it in the tests.
pub fn changelog_entry(
    config_keys: Vec<String>,
    key: &str,
    image: &str,
    link: &str,
) -> klaud_planner::changelog::ChangelogEntry {
    let tag = klaud_planner::image::ImageRef::parse(image)
        .ok()
        .and_then(|i| i.tag().map(str::to_owned))
        .unwrap_or_else(|| "a new build".into());
    klaud_planner::changelog::ChangelogEntry {
        config_keys,
        description: description(key, &tag),
        pr_link: link.to_owned(),
    }
}

/// The changelog sentence, at most 120 characters.
pub(super) fn description(key: &str, tag: &str) -> String {
    let full = format!("Update {key} image to {tag}");
    if full.chars().count() <= 120 {
        return full;
    }
    let short = format!("Update image to {tag}");
    short.chars().take(120).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::target::branch_name;

    #[test]
    fn description_fits_the_changelog_rule() {
        let d = description(&"k".repeat(200), "v1");
        assert!(d.chars().count() <= 120, "{d}");
        assert_eq!(description("a", "v1"), "Update a image to v1");
    }

    #[test]
    fn names_follow_the_helper() {
        assert_eq!(branch_name("a-b"), "klaud/auto-a-b");
        assert_eq!(smoke_test_name(7, "a-b"), "klaud-7-a-b");
        assert_eq!(
            smoke_run_label("dsr1-fp4  b200", "Repair 1/5", 7, "a-b"),
            "dsr1-fp4 b200 · Repair 1/5 · klaud-7-a-b"
        );
    }

    #[test]
    fn smoke_titles_are_recognised_with_and_without_the_family_label() {
        for title in [
            "e2e Test - klaud-7-a-b",
            "e2e Test - k · Initial smoke, repair 0/5 · klaud-7-a-b",
            "klaud-7-a-b",
        ] {
            assert!(is_smoke_title(title, 7, "a-b"), "{title}");
        }
        for title in [
            "e2e Test - klaud-17-a-b",
            "e2e Test - klaud-7-a-b-c",
            "e2e Test - xklaud-7-a-b",
            "e2e Test - klaud-7-a-b (copy)",
        ] {
            assert!(!is_smoke_title(title, 7, "a-b"), "{title}");
        }
    }
}
