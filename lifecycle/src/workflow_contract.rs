//! What Klaud takes from the benchmark repository's own workflow files at a
//! candidate's base commit: which smoke inputs it may send, the titles its
//! runs will carry, and whether the final sweep runs on a draft pull
//! request. The files are read by `klaud-workflows`; this module only asks
//! it Klaud's questions, so there is one workflow reader in the workspace.
//!
//! A missing file means "behave as before workflow files were read": every
//! input is sent, titles follow the InferenceX convention, drafts run.

use klaud_claims::PullNumber;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use klaud_workflows::EventContext;
pub use klaud_workflows::{Workflow, WorkflowError};

use crate::engine::forge::{Pull, Run, RunEvent};
#[cfg(test)]
use crate::engine::forge::{PullState, RunStatus};

/// Where workflow files live in a repository.
pub const WORKFLOWS_DIR: &str = ".github/workflows";

/// The repository path of a workflow file name (`e2e-tests.yml`).
pub fn workflow_path(file: &str) -> String {
    format!("{WORKFLOWS_DIR}/{file}")
}

/// Whether the final sweep runs while the pull request is a draft
/// (setting `sweep_runs_on_drafts`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DraftPolicy {
    /// Read the sweep workflow's job conditions at the base commit; when the
    /// file is absent, assume drafts run (the newer InferenceX behaviour).
    #[default]
    Auto,
    /// The sweep runs on drafts: keep the PR a draft until Klaud finishes.
    Runs,
    /// The sweep skips drafts: mark the PR ready for review before labelling.
    Skips,
}

/// One input Klaud would like to send to the smoke workflow.
#[derive(Debug, Clone, PartialEq)]
pub struct WantedInput {
    /// Input name.
    pub name: &'static str,
    /// Value.
    pub value: Value,
    /// Without it the smoke cannot target the candidate (or cannot be found
    /// again), so a workflow that does not declare it is unusable.
    pub essential: bool,
}

/// The inputs Klaud's smoke wants (see configs/README.md#what-klaud-reads-from-the-benchmark-repositorys-workflows), in the order it sends them:
/// `ref`, `generate-cli-command` and `test-name` are essential (the run must
/// test the candidate head and be findable by its title); `fail-fast` and
/// `klaud-run` are sent only where the workflow declares them.
pub fn klaud_smoke_inputs(head: &str, command: &str, test_name: &str) -> Vec<WantedInput> {
    let s = |v: &str| Value::String(v.to_owned());
    vec![
        WantedInput {
            name: "ref",
            value: s(head),
            essential: true,
        },
        WantedInput {
            name: "generate-cli-command",
            value: s(command),
            essential: true,
        },
        WantedInput {
            name: "fail-fast",
            value: s("true"),
            essential: false,
        },
        WantedInput {
            name: "klaud-run",
            value: s("true"),
            essential: false,
        },
        WantedInput {
            name: "test-name",
            value: s(test_name),
            essential: true,
        },
    ]
}

/// What to dispatch: the inputs to send and the title the run will carry.
#[derive(Debug, Clone, PartialEq)]
pub struct SmokeDispatch {
    /// The inputs, only those the workflow declares.
    pub inputs: Map<String, Value>,
    /// The run's `display_title` as GitHub will compute it.
    pub title: String,
}

/// Why the smoke workflow at the base commit cannot be dispatched the way
/// Klaud needs. Each message names the workflow file and the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SmokeInputError {
    /// The workflow has no `workflow_dispatch` trigger.
    #[error("{file} has no workflow_dispatch trigger, so Klaud cannot dispatch its smoke")]
    NotDispatchable {
        /// Workflow file.
        file: String,
    },
    /// An input Klaud cannot do without is not declared.
    #[error(
        "{file} does not declare the workflow_dispatch input {input:?}, which Klaud needs to target the candidate"
    )]
    Undeclared {
        /// Workflow file.
        file: String,
        /// Input name.
        input: String,
    },
    /// The workflow requires an input Klaud does not know how to fill.
    #[error(
        "{file} requires the workflow_dispatch input {input:?} (no default), which Klaud does not send"
    )]
    RequiredNotSent {
        /// Workflow file.
        file: String,
        /// Input name.
        input: String,
    },
    /// GitHub would refuse the dispatch (HTTP 422) for another reason.
    #[error("{file} would refuse the dispatch: {message}")]
    Refused {
        /// Workflow file.
        file: String,
        /// GitHub's message.
        message: String,
    },
    /// `run-name` does not evaluate.
    #[error("{0}")]
    Title(String),
}

/// The smoke dispatch for `workflow` (`None`: no file at the base commit,
/// send everything and expect `fallback_title`). `git_ref` is the branch
/// dispatched on, `actor` the bot.
pub fn smoke_dispatch(
    workflow: Option<&Workflow>,
    wanted: &[WantedInput],
    git_ref: &str,
    actor: &str,
    fallback_title: &str,
) -> Result<SmokeDispatch, SmokeInputError> {
    let Some(w) = workflow else {
        return Ok(SmokeDispatch {
            inputs: wanted
                .iter()
                .map(|i| (i.name.to_owned(), i.value.clone()))
                .collect(),
            title: fallback_title.to_owned(),
        });
    };
    let file = w.file().to_owned();
    let Some(declared) = w.dispatch_inputs() else {
        return Err(SmokeInputError::NotDispatchable { file });
    };
    let mut inputs = Map::new();
    for i in wanted {
        if declared.iter().any(|d| d.name == i.name) {
            inputs.insert(i.name.to_owned(), i.value.clone());
        } else if i.essential {
            return Err(SmokeInputError::Undeclared {
                file,
                input: i.name.to_owned(),
            });
        }
    }
    if let Some(d) = declared
        .iter()
        .find(|d| d.required && d.default.is_none() && !inputs.contains_key(&d.name))
    {
        return Err(SmokeInputError::RequiredNotSent {
            file,
            input: d.name.clone(),
        });
    }
    let resolved = w
        .validate_dispatch(&inputs)
        .map_err(|r| SmokeInputError::Refused {
            file: file.clone(),
            message: r.message,
        })?;
    let event = json!({
        "ref": format!("refs/heads/{git_ref}"),
        "workflow": workflow_path(w.file()),
        "sender": {"login": actor},
    });
    let ctx = EventContext::new("workflow_dispatch", event)
        .map_err(|e| SmokeInputError::Title(format!("{file}: {e}")))?
        .with_github("actor", Value::String(actor.to_owned()))
        .with_dispatch_inputs(&resolved);
    let title = w
        .run_title(&ctx)
        .map_err(|e| SmokeInputError::Title(e.to_string()))?;
    Ok(SmokeDispatch { inputs, title })
}

/// Whether the sweep runs while the PR is a draft carrying `label`.
pub fn sweep_runs_on_drafts(
    workflow: Option<&Workflow>,
    label: &str,
    policy: DraftPolicy,
) -> Result<bool, WorkflowError> {
    match (policy, workflow) {
        (DraftPolicy::Runs, _) => Ok(true),
        (DraftPolicy::Skips, _) => Ok(false),
        (DraftPolicy::Auto, None) => Ok(true),
        (DraftPolicy::Auto, Some(w)) => w.runs_on_draft(label),
    }
}

/// Why the sweep workflow would not start when Klaud labels its pull
/// request (`None`: it starts). The pull request is the one Klaud makes:
/// against `base_branch`, changing `changed` (the master file and the
/// changelog), carrying `label`, a draft when the sweep runs on drafts
/// under `policy` (Klaud marks it ready first otherwise). A sweep that
/// never starts would leave every candidate waiting for it, so a setup
/// check asks this before the first candidate does.
pub fn sweep_start_refusal(
    workflow: &Workflow,
    base_branch: &str,
    label: &str,
    policy: DraftPolicy,
    changed: &[String],
) -> Result<Option<String>, WorkflowError> {
    let draft = sweep_runs_on_drafts(Some(workflow), label, policy)?;
    let event = json!({
        "action": "labeled",
        "label": {"name": label},
        "number": 1,
        "pull_request": {
            "number": 1,
            "title": "klaud: probe",
            "draft": draft,
            "state": "open",
            "labels": [{"name": label}],
            "user": {"login": "klaud"},
            "head": {"ref": "klaud/probe", "sha": "0000000000000000000000000000000000000000", "repo": {"full_name": "probe/repo"}},
            "base": {"ref": base_branch, "sha": "0000000000000000000000000000000000000000", "repo": {"full_name": "probe/repo"}},
        },
        "repository": {"full_name": "probe/repo", "owner": {"login": "probe"}},
        "sender": {"login": "klaud"},
    });
    let ctx = EventContext::new("pull_request", event)
        .map_err(|e| WorkflowError {
            file: workflow.file().to_owned(),
            field: Some("on.pull_request".into()),
            line: None,
            column: None,
            message: e.to_string(),
        })?
        .with_github("run_id", Value::from(1))
        .with_changed_files(changed.iter().cloned());
    if let Some(refusal) = workflow.pull_request_refusal(&ctx) {
        return Ok(Some(refusal.to_string()));
    }
    if workflow.plan_jobs(&ctx)?.outlook() == klaud_workflows::RunOutlook::Skipped {
        return Ok(Some(format!(
            "every job's condition skips a {} pull request labelled `{label}`",
            if draft { "draft" } else { "ready" }
        )));
    }
    Ok(None)
}

/// The title GitHub gives the sweep run Klaud causes by labelling `pull`
/// with `label` in `repo` (`None`: no sweep file at the base commit).
pub fn sweep_title(
    workflow: Option<&Workflow>,
    pull: &Pull,
    base_branch: &str,
    repo: &str,
    label: &str,
) -> Result<Option<String>, WorkflowError> {
    let Some(w) = workflow else {
        return Ok(None);
    };
    let labels: Vec<Value> = pull.labels.iter().map(|l| json!({"name": l})).collect();
    let event = json!({
        "action": "labeled",
        "label": {"name": label},
        "number": pull.number,
        "pull_request": {
            "number": pull.number,
            "title": pull.title,
            "draft": pull.draft,
            "state": pull.state.github_state(),
            "labels": labels,
            "user": {"login": pull.author},
            "head": {"ref": pull.head_ref, "sha": pull.head_sha, "repo": {"full_name": pull.head_repo}},
            "base": {"ref": base_branch, "repo": {"full_name": repo}},
        },
        "repository": {"full_name": repo},
        "sender": {"login": pull.author},
    });
    let ctx = EventContext::new("pull_request", event).map_err(|e| WorkflowError {
        file: w.file().to_owned(),
        field: Some("run-name".into()),
        line: None,
        column: None,
        message: e.to_string(),
    })?;
    w.run_title(&ctx).map(Some)
}

/// Whether `run` is the final sweep of PR `number` on `head` in `repo`:
/// a `pull_request` run on that exact head, from the repository itself,
/// that names the PR (or, where GitHub leaves `pull_requests` empty, carries
/// the title the workflow gives the PR's sweep). A title alone never
/// decides it.
pub fn is_sweep_of(
    run: &Run,
    number: PullNumber,
    head: &str,
    repo: &str,
    title: Option<&str>,
) -> bool {
    run.event == RunEvent::PullRequest
        && run.head_sha == head
        && run
            .head_repo
            .as_deref()
            .is_none_or(|r| r.eq_ignore_ascii_case(repo))
        && (run.pull_requests.contains(&number) || title.is_some_and(|t| run.title == t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use klaud_claims::CommitSha;

    const PATH_FILTERED_SWEEP: &str = r#"
name: Sweep
on:
  pull_request:
    branches: [main]
    types: [synchronize, labeled, unlabeled]
    paths: ["inferencex-e2e/perf-changelog.yaml"]
jobs:
  sweep:
    if: contains(github.event.pull_request.labels.*.name, 'full-sweep-fail-fast')
    runs-on: x
    steps: [{run: "true"}]
"#;

    fn files(list: &[&str]) -> Vec<String> {
        list.iter().map(|f| (*f).to_owned()).collect()
    }

    #[test]
    fn a_sweep_filtered_on_the_other_layouts_changelog_does_not_start_on_klauds_pull_request() {
        let w = Workflow::parse("run-sweep.yml", PATH_FILTERED_SWEEP).unwrap();
        let root_layout = files(&["perf-changelog.yaml", "configs/nvidia-master.yaml"]);
        let why = sweep_start_refusal(
            &w,
            "main",
            "full-sweep-fail-fast",
            DraftPolicy::Auto,
            &root_layout,
        )
        .unwrap()
        .expect("refused");
        assert!(
            why.contains("paths (inferencex-e2e/perf-changelog.yaml)"),
            "{why}"
        );
        assert!(
            why.contains("perf-changelog.yaml, configs/nvidia-master.yaml"),
            "{why}"
        );
        let e2e_layout = files(&["inferencex-e2e/perf-changelog.yaml"]);
        assert_eq!(
            sweep_start_refusal(
                &w,
                "main",
                "full-sweep-fail-fast",
                DraftPolicy::Auto,
                &e2e_layout
            )
            .unwrap(),
            None
        );
    }

    #[test]
    fn a_sweep_on_another_base_branch_or_label_does_not_start() {
        let w = Workflow::parse("run-sweep.yml", PATH_FILTERED_SWEEP).unwrap();
        let changed = files(&["inferencex-e2e/perf-changelog.yaml"]);
        let base = sweep_start_refusal(
            &w,
            "dev",
            "full-sweep-fail-fast",
            DraftPolicy::Auto,
            &changed,
        )
        .unwrap()
        .expect("refused");
        assert!(base.contains("base branch `dev`"), "{base}");
        let label = sweep_start_refusal(&w, "main", "sweep-please", DraftPolicy::Auto, &changed)
            .unwrap()
            .expect("refused");
        assert!(label.contains("every job's condition skips"), "{label}");
    }

    const SMOKE: &str = r#"
name: Smoke
run-name: smoke - ${{ inputs.test-name || inputs.cmd }}
on:
  workflow_dispatch:
    inputs:
      cmd: {type: string, required: false, default: ""}
      test-name: {type: string, required: false}
      ref: {type: string, required: false}
      fail-fast: {type: boolean, required: false, default: false}
jobs:
  a: {runs-on: x, steps: [{run: "true"}]}
"#;

    fn wanted() -> Vec<WantedInput> {
        let w = |name, value: &str, essential| WantedInput {
            name,
            value: Value::String(value.into()),
            essential,
        };
        vec![
            w("ref", "abc", true),
            w("cmd", "run it", true),
            w("fail-fast", "true", false),
            w("klaud-run", "true", false),
            w("test-name", "klaud-1-x", true),
        ]
    }

    #[test]
    fn only_declared_inputs_are_sent_and_the_title_is_evaluated() {
        let w = Workflow::parse("smoke.yml", SMOKE).unwrap();
        let d = smoke_dispatch(Some(&w), &wanted(), "main", "bot", "unused").unwrap();
        assert!(!d.inputs.contains_key("klaud-run"), "{:?}", d.inputs);
        assert_eq!(d.inputs.len(), 4);
        assert_eq!(d.title, "smoke - klaud-1-x");
        // Without a file everything is sent and the fallback title expected.
        let d = smoke_dispatch(None, &wanted(), "main", "bot", "fallback").unwrap();
        assert!(d.inputs.contains_key("klaud-run"));
        assert_eq!(d.title, "fallback");
    }

    #[test]
    fn unusable_smoke_workflows_name_the_input() {
        let no_ref = SMOKE.replace("      ref: {type: string, required: false}\n", "");
        let w = Workflow::parse("smoke.yml", &no_ref).unwrap();
        let e = smoke_dispatch(Some(&w), &wanted(), "main", "bot", "").unwrap_err();
        assert_eq!(
            e.to_string(),
            "smoke.yml does not declare the workflow_dispatch input \"ref\", which Klaud needs to target the candidate"
        );
        let required = SMOKE.replace(
            "jobs:",
            "      runner: {type: string, required: true}\njobs:",
        );
        let w = Workflow::parse("smoke.yml", &required).unwrap();
        let e = smoke_dispatch(Some(&w), &wanted(), "main", "bot", "").unwrap_err();
        assert!(
            matches!(&e, SmokeInputError::RequiredNotSent { input, .. } if input == "runner"),
            "{e}"
        );
        let choice = SMOKE.replace(
            "fail-fast: {type: boolean, required: false, default: false}",
            "fail-fast: {type: choice, options: [no, yes], default: no}",
        );
        let w = Workflow::parse("smoke.yml", &choice).unwrap();
        let e = smoke_dispatch(Some(&w), &wanted(), "main", "bot", "").unwrap_err();
        assert!(matches!(e, SmokeInputError::Refused { .. }), "{e}");
        let push = "on: push\njobs:\n  a: {runs-on: x, steps: [{run: \"true\"}]}\n";
        let w = Workflow::parse("smoke.yml", push).unwrap();
        let e = smoke_dispatch(Some(&w), &wanted(), "main", "bot", "").unwrap_err();
        assert!(matches!(e, SmokeInputError::NotDispatchable { .. }), "{e}");
    }

    const SWEEP: &str = r#"
name: Sweep
run-name: Sweep - ${{ github.event.pull_request.title }}
on:
  pull_request:
    types: [labeled, synchronize]
jobs:
  a:
    if: ${{ !github.event.pull_request.draft }}
    runs-on: x
    steps: [{run: "true"}]
"#;

    fn pull() -> Pull {
        Pull {
            number: PullNumber::from(7),
            state: PullState::Open,
            draft: true,
            title: "[Klaud] Update x".into(),
            body: String::new(),
            head_ref: "klaud/auto-x".into(),
            head_sha: CommitSha::parse(&"a".repeat(40)).unwrap(),
            head_repo: Some("o/r".into()),
            author: Some("bot".into()),
            labels: vec![],
            html_url: String::new(),
            mergeable: None,
            node_id: None,
        }
    }

    #[test]
    fn drafts_follow_the_job_conditions_or_the_setting() {
        let skips = Workflow::parse("sweep.yml", SWEEP).unwrap();
        let runs = Workflow::parse(
            "sweep.yml",
            &SWEEP.replace("    if: ${{ !github.event.pull_request.draft }}\n", ""),
        )
        .unwrap();
        let label = "full-sweep-fail-fast";
        assert!(!sweep_runs_on_drafts(Some(&skips), label, DraftPolicy::Auto).unwrap());
        assert!(sweep_runs_on_drafts(Some(&runs), label, DraftPolicy::Auto).unwrap());
        assert!(sweep_runs_on_drafts(None, label, DraftPolicy::Auto).unwrap());
        assert!(sweep_runs_on_drafts(Some(&skips), label, DraftPolicy::Runs).unwrap());
        assert!(!sweep_runs_on_drafts(Some(&runs), label, DraftPolicy::Skips).unwrap());
    }

    #[test]
    fn sweep_runs_are_recognised_by_pull_and_head_never_by_title_alone() {
        let w = Workflow::parse("sweep.yml", SWEEP).unwrap();
        let p = pull();
        let title = sweep_title(Some(&w), &p, "main", "o/r", "l")
            .unwrap()
            .unwrap();
        assert_eq!(title, "Sweep - [Klaud] Update x");
        let run = Run {
            id: 1,
            attempt: 1,
            title: title.clone(),
            event: "pull_request".into(),
            status: RunStatus::Queued,
            conclusion: None,
            head_sha: p.head_sha.clone(),
            actor: Some("bot".into()),
            created_at: None,
            html_url: String::new(),
            head_branch: Some(p.head_ref.clone()),
            head_repo: Some("o/r".into()),
            pull_requests: vec![],
        };
        assert!(is_sweep_of(
            &run,
            PullNumber::from(7),
            &p.head_sha,
            "o/r",
            Some(&title)
        ));
        let by_number = Run {
            title: "something else".into(),
            pull_requests: vec![PullNumber::from(7)],
            ..run.clone()
        };
        assert!(is_sweep_of(
            &by_number,
            PullNumber::from(7),
            &p.head_sha,
            "o/r",
            Some(&title)
        ));
        let other_head = Run {
            head_sha: CommitSha::parse(&"0".repeat(40)).unwrap(),
            ..run.clone()
        };
        assert!(!is_sweep_of(
            &other_head,
            PullNumber::from(7),
            &p.head_sha,
            "o/r",
            Some(&title)
        ));
        let fork = Run {
            head_repo: Some("fork/r".into()),
            ..by_number.clone()
        };
        assert!(!is_sweep_of(
            &fork,
            PullNumber::from(7),
            &p.head_sha,
            "o/r",
            Some(&title)
        ));
        let push = Run {
            event: "push".into(),
            ..by_number
        };
        assert!(!is_sweep_of(
            &push,
            PullNumber::from(7),
            &p.head_sha,
            "o/r",
            Some(&title)
        ));
        // The PR title alone (a run without run-name) is not enough.
        let pr_titled = Run {
            title: p.title.clone(),
            ..run
        };
        assert!(!is_sweep_of(
            &pr_titled,
            PullNumber::from(7),
            &p.head_sha,
            "o/r",
            Some(&title)
        ));
    }
}
