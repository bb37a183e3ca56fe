//! The benchmark repository's sweep-reuse gate: InferenceX's
//! `utils/find_reusable_sweep_run.py` (and `python3 -m infx.workflows.reuse`
//! in newer layouts), rule for rule, over what GitHub answers.
//!
//! On `pull_request` `synchronize` it says whether the PR sweep may be
//! skipped (a maintainer authorized reuse); on a push to `main` it decides
//! whether the merged PR's earlier sweep is reused instead of sweeping
//! again, failing closed (an error fails the gate's job, as the script
//! exits 1). [`decide`] reads GitHub through [`ReuseSource`], so its rules
//! are tested without the simulator.

use std::collections::BTreeSet;
use std::sync::LazyLock;

/// Authors whose comment may authorize reuse (the script's default).
pub const ALLOWED_AUTHOR_ASSOCIATIONS: &[&str] = &["OWNER", "MEMBER", "COLLABORATOR"];
/// Labels that make a sweep a full sweep; reuse requires one.
pub const FULL_SWEEP_LABELS: &[&str] = super::FULL_SWEEP_LABELS;
/// Labels whose sweep artifacts cannot be reused.
pub const REUSE_INCOMPATIBLE_LABELS: &[&str] = &["evals-only", "agentx-fast"];
/// Aggregate artifacts that make a run reusable (with `bmk_agentic_*`).
pub const REUSABLE_AGGREGATE_ARTIFACTS: &[&str] = &["results_bmk", "eval_results_all"];
/// The command the script looks for.
pub const REUSE_COMMAND: &str = "/reuse-sweep-run";

/// A PR comment as the issue comments API lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateComment {
    pub created_at: String,
    pub author_association: String,
    pub body: String,
}

/// The fields of a pull request the gate reads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GatePull {
    pub number: u64,
    pub labels: Vec<String>,
    pub merged_at: Option<String>,
    pub head_ref: String,
}

/// The fields of a workflow run the gate reads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GateRun {
    pub id: u64,
    pub event: String,
    pub status: String,
    pub conclusion: Option<String>,
    /// `.github/workflows/<file>`.
    pub path: String,
    pub head_sha: String,
    pub run_attempt: u64,
    pub html_url: String,
}

/// What the gate asks GitHub, one method per REST call of the script.
pub trait ReuseSource {
    /// `GET /commits/{sha}/pulls`: the numbers of the PRs of a commit.
    fn commit_pulls(&self, sha: &str) -> Vec<u64>;
    /// `GET /issues/{n}/comments`.
    fn comments(&self, pr: u64) -> Vec<GateComment>;
    /// `GET /pulls/{n}`.
    fn pull(&self, pr: u64) -> Option<GatePull>;
    /// `GET /actions/runs/{id}`.
    fn run(&self, id: u64) -> Option<GateRun>;
    /// `GET /actions/workflows/{workflow}/runs?event=pull_request&branch=&status=completed`,
    /// newest first.
    fn completed_pr_runs(&self, workflow: &str, branch: &str) -> Vec<GateRun>;
    /// `GET /pulls/{n}/commits`: the shas.
    fn pr_commits(&self, pr: u64) -> BTreeSet<String>;
    /// `GET /actions/runs/{id}/artifacts`: names of unexpired artifacts.
    fn artifact_names(&self, run: u64) -> BTreeSet<String>;
}

/// The event the gate runs for (the script's arguments).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateEvent {
    pub event_name: String,
    pub event_action: String,
    pub pr_number: Option<u64>,
    pub commit_sha: String,
    pub git_ref: String,
    pub workflow_id: String,
    /// The commands that authorize reuse (`/reuse-sweep-run`; newer layouts
    /// also take `/use`).
    pub commands: Vec<String>,
}

/// The gate's outputs (`$GITHUB_OUTPUT` of the step), in the script's order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GateOutputs {
    pub reuse_enabled: bool,
    pub skip_pr_sweep: bool,
    pub source_run_id: String,
    pub source_run_attempt: String,
    pub source_run_url: String,
    pub source_pr_number: String,
    pub source_head_sha: String,
    pub reason: String,
}

impl GateOutputs {
    fn disabled(reason: String) -> Self {
        Self {
            reason,
            ..Self::default()
        }
    }

    /// `key=value` pairs as the step writes them.
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let flag = |b: bool| if b { "true" } else { "false" }.to_string();
        vec![
            ("reuse-enabled", flag(self.reuse_enabled)),
            ("skip-pr-sweep", flag(self.skip_pr_sweep)),
            ("reuse-source-run-id", self.source_run_id.clone()),
            ("reuse-source-run-attempt", self.source_run_attempt.clone()),
            ("reuse-source-run-url", self.source_run_url.clone()),
            ("reuse-source-pr-number", self.source_pr_number.clone()),
            ("reuse-source-head-sha", self.source_head_sha.clone()),
            ("reuse-reason", self.reason.clone()),
        ]
    }
}

/// Why the gate fails its job (the script's `RuntimeError`s).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct GateError(pub String);

fn fail<T>(message: String) -> Result<T, GateError> {
    Err(GateError(message))
}

/// `(?m)^\s*<command>(?:\s+(\d+))?\s*$` for each command.
fn command_pattern(command: &str) -> Option<regex::Regex> {
    regex::Regex::new(&format!(
        r"(?m)^\s*{}(?:\s+(\d+))?\s*$",
        regex::escape(command)
    ))
    .ok()
}

static DEFAULT_PATTERN: LazyLock<Option<regex::Regex>> =
    LazyLock::new(|| command_pattern(REUSE_COMMAND));

/// The newest comment by an allowed author holding a command on a line of
/// its own: `(authorized, pinned run id)`; the last command of that comment
/// is the maintainer's final intent. Comments are ordered by `created_at`
/// (stable for ties, as Python's sort).
pub fn find_reuse_authorization(
    comments: &[GateComment],
    commands: &[String],
) -> (bool, Option<u64>) {
    let patterns: Vec<regex::Regex> = commands
        .iter()
        .filter_map(|c| {
            if c == REUSE_COMMAND {
                DEFAULT_PATTERN.clone()
            } else {
                command_pattern(c)
            }
        })
        .collect();
    let mut sorted: Vec<&GateComment> = comments.iter().collect();
    sorted.sort_by(|a, b| a.created_at.cmp(&b.created_at));
    for c in sorted.into_iter().rev() {
        if !ALLOWED_AUTHOR_ASSOCIATIONS.contains(&c.author_association.as_str()) {
            continue;
        }
        // The last match in the body, whichever command it is.
        let last = patterns
            .iter()
            .flat_map(|p| p.captures_iter(&c.body))
            .max_by_key(|cap| cap.get(0).map_or(0, |m| m.start()));
        if let Some(cap) = last {
            let pinned = cap.get(1).and_then(|m| m.as_str().parse().ok());
            return (true, pinned);
        }
    }
    (false, None)
}

/// Whether a run produced ingest-relevant results.
pub fn has_reusable_result_artifacts(names: &BTreeSet<String>) -> bool {
    names.iter().any(|n| {
        REUSABLE_AGGREGATE_ARTIFACTS.contains(&n.as_str()) || n.starts_with("bmk_agentic_")
    })
}

fn workflow_path(workflow_id: &str) -> String {
    if workflow_id.starts_with(".github/") {
        workflow_id.to_string()
    } else {
        format!(".github/workflows/{workflow_id}")
    }
}

/// The latest successful PR sweep of the branch whose head is one of the
/// PR's commits and that has results (gated no-op runs succeed without).
fn find_latest_successful_pr_run(
    src: &dyn ReuseSource,
    workflow_id: &str,
    head_branch: &str,
    valid_shas: &BTreeSet<String>,
) -> Option<GateRun> {
    if head_branch.is_empty() || valid_shas.is_empty() {
        return None;
    }
    src.completed_pr_runs(workflow_id, head_branch)
        .into_iter()
        .filter(|r| r.conclusion.as_deref() == Some("success"))
        .filter(|r| valid_shas.contains(&r.head_sha))
        .find(|r| has_reusable_result_artifacts(&src.artifact_names(r.id)))
}

/// Fails closed unless the run is a reusable source run of the PR.
pub fn validate_reusable_run(
    src: &dyn ReuseSource,
    workflow_id: &str,
    pr_number: u64,
    run: &GateRun,
    allow_failed: bool,
) -> Result<(), GateError> {
    let id = run.id;
    if run.event != "pull_request" {
        return fail(format!(
            "Reusable source run {id} is not a pull_request run."
        ));
    }
    if run.status != "completed" {
        return fail(format!("Reusable source run {id} is not completed."));
    }
    // A pinned run is an explicit choice: a failed or cancelled sweep still
    // carries the points that completed.
    let allowed: &[&str] = if allow_failed {
        &["success", "failure", "cancelled"]
    } else {
        &["success"]
    };
    if !run
        .conclusion
        .as_deref()
        .is_some_and(|c| allowed.contains(&c))
    {
        let expected = if allow_failed {
            "success, failure, or cancelled"
        } else {
            "success"
        };
        let got = match &run.conclusion {
            Some(c) => format!("'{c}'"),
            None => "None".to_string(),
        };
        return fail(format!(
            "Reusable source run {id} has conclusion {got}; expected {expected}."
        ));
    }
    let expected_path = workflow_path(workflow_id);
    if !run.path.is_empty() && run.path != expected_path {
        return fail(format!(
            "Reusable source run {id} is from {}, expected {expected_path}.",
            run.path
        ));
    }
    if run.head_sha.is_empty() {
        return fail(format!("Reusable source run {id} has no head_sha."));
    }
    if !src.pr_commits(pr_number).contains(&run.head_sha) {
        return fail(format!(
            "Reusable source run {id} head {} is not in PR #{pr_number}'s commit list; \
             pin a run whose commit is still part of the PR.",
            run.head_sha
        ));
    }
    if !has_reusable_result_artifacts(&src.artifact_names(id)) {
        return fail(format!(
            "Reusable source run {id} has no benchmark, eval, or agentic result artifact."
        ));
    }
    Ok(())
}

/// The script's `main`: the outputs, or the error that fails the job.
pub fn decide(event: &GateEvent, src: &dyn ReuseSource) -> Result<GateOutputs, GateError> {
    let command = event
        .commands
        .first()
        .cloned()
        .unwrap_or_else(|| REUSE_COMMAND.to_string());
    let authorization = |pr: u64| find_reuse_authorization(&src.comments(pr), &event.commands);
    if event.event_name == "pull_request" {
        if event.event_action != "synchronize" {
            let action = if event.event_action.is_empty() {
                "unknown"
            } else {
                &event.event_action
            };
            return Ok(GateOutputs::disabled(format!(
                "pull_request action {action} is not synchronize"
            )));
        }
        let Some(pr) = event.pr_number else {
            return fail("--pr-number is required for pull_request synchronize".into());
        };
        let (authorized, _) = authorization(pr);
        let has = if authorized { "has" } else { "has no" };
        return Ok(GateOutputs {
            skip_pr_sweep: authorized,
            source_pr_number: pr.to_string(),
            ..GateOutputs::disabled(format!("PR #{pr} {has} {command} authorization"))
        });
    }
    if event.event_name != "push" || event.git_ref != "refs/heads/main" {
        return Ok(GateOutputs::disabled("not a push to main".into()));
    }
    let pulls = src.commit_pulls(&event.commit_sha);
    if pulls.is_empty() {
        return Ok(GateOutputs::disabled("no associated pull request".into()));
    }
    if pulls.len() > 1 {
        let authorized: Vec<u64> = pulls
            .iter()
            .copied()
            .filter(|n| authorization(*n).0)
            .collect();
        if !authorized.is_empty() {
            let numbers: Vec<String> = pulls.iter().map(u64::to_string).collect();
            let authorized: Vec<String> = authorized.iter().map(|n| format!("#{n}")).collect();
            return fail(format!(
                "Commit {} maps to multiple PRs ({}); found reuse authorization on {}; \
                 refusing to reuse artifacts.",
                event.commit_sha,
                numbers.join(", "),
                authorized.join(", ")
            ));
        }
        return Ok(GateOutputs::disabled(
            "multiple associated pull requests".into(),
        ));
    }
    let pr_number = pulls[0];
    let (authorized, pinned) = authorization(pr_number);
    if !authorized {
        return Ok(GateOutputs {
            source_pr_number: pr_number.to_string(),
            ..GateOutputs::disabled(format!("PR #{pr_number} has no {command} authorization"))
        });
    }
    let Some(pr) = src.pull(pr_number) else {
        return fail(format!("GitHub API /pulls/{pr_number} failed: HTTP 404"));
    };
    let labels: BTreeSet<&str> = pr.labels.iter().map(String::as_str).collect();
    let incompatible: Vec<&str> = REUSE_INCOMPATIBLE_LABELS
        .iter()
        .copied()
        .filter(|l| labels.contains(l))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if !incompatible.is_empty() {
        return fail(format!(
            "PR #{pr_number} has {command} authorization but uses reuse-incompatible label(s): {}.",
            incompatible.join(", ")
        ));
    }
    if !FULL_SWEEP_LABELS.iter().any(|l| labels.contains(l)) {
        let accepted: BTreeSet<&str> = FULL_SWEEP_LABELS.iter().copied().collect();
        return fail(format!(
            "PR #{pr_number} has {command} authorization but is missing any of: {}.",
            accepted.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    if pr.merged_at.is_none() {
        return fail(format!("PR #{pr_number} is not marked as merged."));
    }
    let (run, reason) = match pinned {
        Some(id) => {
            let Some(run) = src.run(id) else {
                return fail(format!("GitHub API /actions/runs/{id} failed: HTTP 404"));
            };
            (
                run,
                format!("PR #{pr_number} approved reusable full sweep from pinned run {id}"),
            )
        }
        None => {
            let shas = src.pr_commits(pr_number);
            if shas.is_empty() {
                return fail(format!("PR #{pr_number} has no commits."));
            }
            let Some(run) =
                find_latest_successful_pr_run(src, &event.workflow_id, &pr.head_ref, &shas)
            else {
                return fail(format!(
                    "PR #{pr_number} has {command} authorization but no successful {} \
                     pull_request run was found for any of its {} commit(s); pin a specific \
                     run with `{command} <run_id>`.",
                    event.workflow_id,
                    shas.len()
                ));
            };
            let reason = format!(
                "PR #{pr_number} approved reusable full sweep from latest run on {}",
                run.head_sha
            );
            (run, reason)
        }
    };
    validate_reusable_run(src, &event.workflow_id, pr_number, &run, pinned.is_some())?;
    Ok(GateOutputs {
        reuse_enabled: true,
        skip_pr_sweep: false,
        source_run_id: run.id.to_string(),
        source_run_attempt: run.run_attempt.max(1).to_string(),
        source_run_url: run.html_url.clone(),
        source_pr_number: pr_number.to_string(),
        source_head_sha: run.head_sha.clone(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A GitHub of canned answers, like the script's tests' fakes.
    #[derive(Default)]
    struct Fake {
        commit_pulls: Vec<u64>,
        comments: Vec<GateComment>,
        pull: Option<GatePull>,
        runs: BTreeMap<u64, GateRun>,
        pr_commits: BTreeSet<String>,
        artifacts: BTreeMap<u64, BTreeSet<String>>,
    }

    impl ReuseSource for Fake {
        fn commit_pulls(&self, _: &str) -> Vec<u64> {
            self.commit_pulls.clone()
        }
        fn comments(&self, _: u64) -> Vec<GateComment> {
            self.comments.clone()
        }
        fn pull(&self, _: u64) -> Option<GatePull> {
            self.pull.clone()
        }
        fn run(&self, id: u64) -> Option<GateRun> {
            self.runs.get(&id).cloned()
        }
        fn completed_pr_runs(&self, _: &str, _: &str) -> Vec<GateRun> {
            self.runs.values().rev().cloned().collect()
        }
        fn pr_commits(&self, _: u64) -> BTreeSet<String> {
            self.pr_commits.clone()
        }
        fn artifact_names(&self, run: u64) -> BTreeSet<String> {
            self.artifacts.get(&run).cloned().unwrap_or_default()
        }
    }

    fn comment(at: &str, association: &str, body: &str) -> GateComment {
        GateComment {
            created_at: format!("2026-05-13T00:{at}:00Z"),
            author_association: association.into(),
            body: body.into(),
        }
    }

    fn commands() -> Vec<String> {
        vec![REUSE_COMMAND.to_string()]
    }

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn sweep_run(id: u64, conclusion: &str, head: &str) -> GateRun {
        GateRun {
            id,
            event: "pull_request".into(),
            status: "completed".into(),
            conclusion: Some(conclusion.into()),
            path: ".github/workflows/run-sweep.yml".into(),
            head_sha: head.into(),
            run_attempt: 1,
            html_url: format!("https://github.com/o/r/actions/runs/{id}"),
        }
    }

    fn push() -> GateEvent {
        GateEvent {
            event_name: "push".into(),
            event_action: String::new(),
            pr_number: None,
            commit_sha: "merge-sha".into(),
            git_ref: "refs/heads/main".into(),
            workflow_id: "run-sweep.yml".into(),
            commands: commands(),
        }
    }

    fn synchronize() -> GateEvent {
        GateEvent {
            event_name: "pull_request".into(),
            event_action: "synchronize".into(),
            pr_number: Some(1321),
            ..push()
        }
    }

    /// A merged full-sweep PR whose one commit `abc123` has run 10 with
    /// results, and `comments` on it.
    fn merged(comments: Vec<GateComment>, labels: &[&str]) -> Fake {
        Fake {
            commit_pulls: vec![1321],
            comments,
            pull: Some(GatePull {
                number: 1321,
                labels: labels.iter().map(|s| s.to_string()).collect(),
                merged_at: Some("2026-05-13T00:01:00Z".into()),
                head_ref: "klaud/x".into(),
            }),
            runs: BTreeMap::from([(10, sweep_run(10, "success", "abc123"))]),
            pr_commits: names(&["abc123"]),
            artifacts: BTreeMap::from([(10, names(&["results_bmk"]))]),
        }
    }

    #[test]
    fn authorization_uses_the_latest_allowed_comment() {
        let comments = vec![
            comment("00", "MEMBER", "/reuse-sweep-run 111"),
            comment("01", "CONTRIBUTOR", "/reuse-sweep-run 222"),
            comment("02", "OWNER", "approved\n/reuse-sweep-run 333"),
        ];
        assert_eq!(
            find_reuse_authorization(&comments, &commands()),
            (true, Some(333))
        );
    }

    #[test]
    fn authorization_accepts_the_command_without_a_run_id() {
        let comments = vec![comment("00", "OWNER", "/reuse-sweep-run")];
        assert_eq!(
            find_reuse_authorization(&comments, &commands()),
            (true, None)
        );
    }

    #[test]
    fn a_newer_command_without_id_unpins_an_older_pin() {
        let comments = vec![
            comment("00", "OWNER", "/reuse-sweep-run 111"),
            comment("01", "OWNER", "/reuse-sweep-run"),
        ];
        assert_eq!(
            find_reuse_authorization(&comments, &commands()),
            (true, None)
        );
    }

    #[test]
    fn inline_mentions_do_not_authorize() {
        let comments = vec![comment(
            "00",
            "OWNER",
            "please run /reuse-sweep-run 111 after merge",
        )];
        assert_eq!(
            find_reuse_authorization(&comments, &commands()),
            (false, None)
        );
    }

    #[test]
    fn comments_of_contributors_and_apps_do_not_authorize() {
        let comments = vec![
            comment("00", "CONTRIBUTOR", "/reuse-sweep-run 1"),
            comment("01", "NONE", "/reuse-sweep-run 2"),
        ];
        assert_eq!(
            find_reuse_authorization(&comments, &commands()),
            (false, None)
        );
    }

    #[test]
    fn the_last_command_of_a_comment_wins_and_use_counts_where_accepted() {
        let both = vec![REUSE_COMMAND.to_string(), "/use".to_string()];
        let comments = vec![comment(
            "00",
            "COLLABORATOR",
            "/reuse-sweep-run 1\n/use 2\n",
        )];
        assert_eq!(find_reuse_authorization(&comments, &both), (true, Some(2)));
        assert_eq!(
            find_reuse_authorization(&comments, &commands()),
            (true, Some(1))
        );
    }

    #[test]
    fn latest_successful_run_skips_newer_failed_and_gated_no_op_runs() {
        let mut fake = merged(vec![], &[]);
        fake.runs.insert(11, sweep_run(11, "failure", "abc123"));
        fake.runs.insert(12, sweep_run(12, "success", "abc123"));
        fake.artifacts.insert(11, names(&["results_bmk"]));
        // Run 12 is a gated no-op: it succeeded with no results.
        let found =
            find_latest_successful_pr_run(&fake, "run-sweep.yml", "klaud/x", &names(&["abc123"]));
        assert_eq!(found.map(|r| r.id), Some(10));
    }

    #[test]
    fn an_agentic_only_run_is_reusable() {
        assert!(has_reusable_result_artifacts(&names(&["bmk_agentic_x"])));
        assert!(has_reusable_result_artifacts(&names(&["eval_results_all"])));
        assert!(!has_reusable_result_artifacts(&names(&[
            "bmk_x",
            "klaud-sweep-manifest"
        ])));
    }

    #[test]
    fn synchronize_with_authorization_skips_the_pr_sweep() {
        let fake = merged(vec![comment("00", "OWNER", "/reuse-sweep-run")], &[]);
        let out = decide(&synchronize(), &fake).unwrap();
        assert!(out.skip_pr_sweep && !out.reuse_enabled);
        assert_eq!(out.reason, "PR #1321 has /reuse-sweep-run authorization");
        assert_eq!(out.source_pr_number, "1321");
    }

    #[test]
    fn synchronize_without_authorization_sweeps() {
        let fake = merged(vec![comment("00", "CONTRIBUTOR", "/reuse-sweep-run")], &[]);
        let out = decide(&synchronize(), &fake).unwrap();
        assert!(!out.skip_pr_sweep);
        assert_eq!(out.reason, "PR #1321 has no /reuse-sweep-run authorization");
    }

    #[test]
    fn a_label_event_does_not_read_comments() {
        let fake = merged(vec![comment("00", "OWNER", "/reuse-sweep-run")], &[]);
        let event = GateEvent {
            event_action: "labeled".into(),
            ..synchronize()
        };
        let out = decide(&event, &fake).unwrap();
        assert!(!out.skip_pr_sweep);
        assert_eq!(out.reason, "pull_request action labeled is not synchronize");
    }

    #[test]
    fn validation_accepts_a_successful_run_of_the_pr() {
        let fake = merged(vec![], &[]);
        assert_eq!(
            validate_reusable_run(&fake, "run-sweep.yml", 1321, &fake.runs[&10], false),
            Ok(())
        );
    }

    #[test]
    fn failed_and_cancelled_runs_are_reusable_only_when_pinned() {
        for conclusion in ["failure", "cancelled"] {
            let mut fake = merged(vec![], &[]);
            fake.runs.insert(10, sweep_run(10, conclusion, "abc123"));
            let run = fake.runs[&10].clone();
            assert_eq!(
                validate_reusable_run(&fake, "run-sweep.yml", 1321, &run, true),
                Ok(())
            );
            assert_eq!(
                validate_reusable_run(&fake, "run-sweep.yml", 1321, &run, false),
                Err(GateError(format!(
                    "Reusable source run 10 has conclusion '{conclusion}'; expected success."
                )))
            );
        }
    }

    #[test]
    fn a_run_of_an_older_pr_commit_is_valid_and_an_orphaned_one_is_not() {
        let mut fake = merged(vec![], &[]);
        fake.pr_commits = names(&["abc123", "def456"]);
        assert_eq!(
            validate_reusable_run(&fake, "run-sweep.yml", 1321, &fake.runs[&10], false),
            Ok(())
        );
        fake.pr_commits = names(&["def456"]);
        let err = validate_reusable_run(&fake, "run-sweep.yml", 1321, &fake.runs[&10], false)
            .unwrap_err();
        assert!(err.0.contains("is not in PR #1321's commit list"), "{err}");
    }

    #[test]
    fn a_run_of_another_workflow_or_without_results_is_not_reusable() {
        let mut fake = merged(vec![], &[]);
        let mut run = fake.runs[&10].clone();
        run.path = ".github/workflows/e2e-tests.yml".into();
        assert!(validate_reusable_run(&fake, "run-sweep.yml", 1321, &run, false).is_err());
        fake.artifacts.insert(10, names(&["bmk_x"]));
        let err = validate_reusable_run(&fake, "run-sweep.yml", 1321, &fake.runs[&10], false)
            .unwrap_err();
        assert!(
            err.0
                .contains("has no benchmark, eval, or agentic result artifact")
        );
    }

    #[test]
    fn a_pinned_run_enables_reuse_after_merge() {
        let fake = merged(
            vec![comment("00", "OWNER", "/reuse-sweep-run 10")],
            &["full-sweep-enabled"],
        );
        let out = decide(&push(), &fake).unwrap();
        assert!(out.reuse_enabled);
        assert_eq!(
            (
                out.source_run_id.as_str(),
                out.source_pr_number.as_str(),
                out.source_head_sha.as_str()
            ),
            ("10", "1321", "abc123")
        );
        assert_eq!(
            out.reason,
            "PR #1321 approved reusable full sweep from pinned run 10"
        );
    }

    #[test]
    fn a_pinned_failed_run_enables_reuse() {
        let mut fake = merged(
            vec![comment("00", "OWNER", "/reuse-sweep-run 10")],
            &["full-sweep-enabled"],
        );
        fake.runs.insert(10, sweep_run(10, "failure", "abc123"));
        assert!(decide(&push(), &fake).unwrap().reuse_enabled);
    }

    #[test]
    fn the_command_without_id_resolves_to_the_latest_sweep_of_any_pr_commit() {
        let mut fake = merged(
            vec![comment("00", "MEMBER", "/reuse-sweep-run")],
            &["full-sweep-fail-fast"],
        );
        // The PR merged main after its sweep: the sweep's commit is older.
        fake.pr_commits = names(&["abc123", "merge-of-main"]);
        let out = decide(&push(), &fake).unwrap();
        assert_eq!(out.source_run_id, "10");
        assert_eq!(
            out.reason,
            "PR #1321 approved reusable full sweep from latest run on abc123"
        );
    }

    #[test]
    fn without_a_maintainer_comment_reuse_is_disabled() {
        let fake = merged(
            vec![comment("00", "NONE", "/reuse-sweep-run 10")],
            &["full-sweep-enabled"],
        );
        let out = decide(&push(), &fake).unwrap();
        assert!(!out.reuse_enabled);
        assert_eq!(out.reason, "PR #1321 has no /reuse-sweep-run authorization");
    }

    #[test]
    fn all_evals_with_a_non_canary_full_sweep_label_is_reusable() {
        let fake = merged(
            vec![comment("00", "OWNER", "/reuse-sweep-run 10")],
            &["all-evals", "non-canary-full-sweep-enabled"],
        );
        assert!(decide(&push(), &fake).unwrap().reuse_enabled);
    }

    #[test]
    fn an_incompatible_label_or_no_full_sweep_label_fails_the_gate() {
        let fake = merged(
            vec![comment("00", "OWNER", "/reuse-sweep-run 10")],
            &["full-sweep-enabled", "evals-only"],
        );
        assert_eq!(
            decide(&push(), &fake).unwrap_err().0,
            "PR #1321 has /reuse-sweep-run authorization but uses reuse-incompatible label(s): evals-only."
        );
        let fake = merged(
            vec![comment("00", "OWNER", "/reuse-sweep-run 10")],
            &["sweep-enabled"],
        );
        assert_eq!(
            decide(&push(), &fake).unwrap_err().0,
            "PR #1321 has /reuse-sweep-run authorization but is missing any of: full-sweep-enabled, \
             full-sweep-fail-fast, full-sweep-fail-fast-no-canary, non-canary-full-sweep-enabled."
        );
    }

    #[test]
    fn a_commit_of_several_prs_refuses_when_one_is_authorized() {
        let mut fake = merged(
            vec![comment("00", "OWNER", "/reuse-sweep-run")],
            &["full-sweep-enabled"],
        );
        fake.commit_pulls = vec![1, 2];
        assert!(
            decide(&push(), &fake)
                .unwrap_err()
                .0
                .contains("maps to multiple PRs (1, 2)")
        );
        fake.comments.clear();
        assert_eq!(
            decide(&push(), &fake).unwrap().reason,
            "multiple associated pull requests"
        );
    }

    #[test]
    fn pushes_elsewhere_and_unassociated_commits_do_not_reuse() {
        let mut fake = merged(
            vec![comment("00", "OWNER", "/reuse-sweep-run")],
            &["full-sweep-enabled"],
        );
        let other = GateEvent {
            git_ref: "refs/heads/dev".into(),
            ..push()
        };
        assert_eq!(decide(&other, &fake).unwrap().reason, "not a push to main");
        fake.commit_pulls.clear();
        assert_eq!(
            decide(&push(), &fake).unwrap().reason,
            "no associated pull request"
        );
    }

    #[test]
    fn an_unmerged_pr_fails_the_gate() {
        let mut fake = merged(
            vec![comment("00", "OWNER", "/reuse-sweep-run")],
            &["full-sweep-enabled"],
        );
        if let Some(p) = fake.pull.as_mut() {
            p.merged_at = None;
        }
        assert_eq!(
            decide(&push(), &fake).unwrap_err().0,
            "PR #1321 is not marked as merged."
        );
    }
}
