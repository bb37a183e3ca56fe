//! Runs decided by the repository's own workflow files.
//!
//! When the commit an event runs on has `.github/workflows/*.yml`, those files
//! decide whether, when and under which title a run exists, through
//! `klaud-workflows`: the trigger and its `types`/`branches`/`paths` filters,
//! `run-name`, `workflow_dispatch` input validation (GitHub's 422s), job
//! `if:` conditions (a run whose every job is skipped concludes `skipped` at
//! once), concurrency groups with `cancel-in-progress`, and the run head (a
//! dispatch runs on the tip of the dispatched ref). The CI runner then
//! decides what the benchmark jobs of the runs that do exist produce.
//!
//! Without workflow files at the commit, callers keep the built-in
//! InferenceX behaviour (these functions answer `None`).
//!
//! Concurrency without `cancel-in-progress` is simplified: GitHub keeps the
//! newer run pending until the running one finishes and cancels an older
//! pending one; here the older *queued* run is cancelled and the newer one
//! queues at once.

use std::sync::Arc;

use chrono::Utc;
use klaud_workflows::{EventContext, WorkflowSet};
use serde_json::{Map, Value, json};

use super::git::diff_files;
use super::http::ApiError;
use super::state::{Model, Repo, Run, Workflow};

/// Where GitHub reads workflow files from.
pub const WORKFLOWS_DIR: &str = ".github/workflows";

/// The workflow files at a commit, parsed (cached by the folder's tree sha);
/// `None` when the commit has no workflow file. Files that do not parse are
/// left out with a warning, as GitHub runs the others.
pub fn set_at(m: &mut Model, owner: &str, repo: &str, sha: &str) -> Option<Arc<WorkflowSet>> {
    let r = m.repo(owner, repo).ok()?;
    let commit = r.objects.commits.get(sha)?;
    let dir = r
        .objects
        .lookup(&commit.tree, WORKFLOWS_DIR)
        .filter(|e| e.is_tree())?;
    if let Some(set) = m.workflow_sets.get(&dir.sha) {
        return (!set.is_empty()).then(|| set.clone());
    }
    let files: Vec<(String, String)> = r
        .objects
        .trees
        .get(&dir.sha)?
        .iter()
        .filter(|e| !e.is_tree())
        .filter_map(|e| {
            let text = String::from_utf8(r.objects.blobs.get(&e.sha)?.clone()).ok()?;
            Some((e.name.clone(), text))
        })
        .collect();
    let (set, errors) = WorkflowSet::parse_lenient(files);
    for e in errors {
        tracing::warn!(error = %e, "workflow file does not parse; no run starts from it");
    }
    let set = Arc::new(set);
    m.workflow_sets.insert(dir.sha.clone(), set.clone());
    (!set.is_empty()).then_some(set)
}

/// Registers every workflow file at `sha` (its `name:` as the workflow
/// name), so the workflows API lists the repository's real files. Files that
/// are gone are dropped, runs are kept. Does nothing without workflow files.
pub fn register_files(
    m: &mut Model,
    owner: &str,
    repo: &str,
    sha: &str,
) -> Result<Vec<String>, ApiError> {
    let Some(set) = set_at(m, owner, repo, sha) else {
        return Ok(Vec::new());
    };
    let names: Vec<String> = set.names().map(str::to_string).collect();
    for name in &names {
        let title = set
            .get(name)
            .map(|w| w.name().to_string())
            .unwrap_or_default();
        let id = m.id();
        let r = m.repo_mut(owner, repo)?;
        let path = format!("{WORKFLOWS_DIR}/{name}");
        match r.workflows.iter_mut().find(|w| w.path == path) {
            Some(w) => w.name = title,
            None => r.workflows.push(Workflow {
                id,
                name: title,
                path,
            }),
        }
    }
    let r = m.repo_mut(owner, repo)?;
    r.workflows.retain(|w| {
        names
            .iter()
            .any(|n| w.path == format!("{WORKFLOWS_DIR}/{n}"))
    });
    Ok(names)
}

/// Files a PR changes against its base (the three-dot diff GitHub filters
/// `paths` on).
fn pr_changed_files(r: &Repo, base_ref: &str, head: &str) -> Vec<String> {
    let base = r.resolve(base_ref).unwrap_or_default();
    r.objects
        .merge_base(&base, head)
        .and_then(|mb| Some((r.objects.commits.get(&mb)?, r.objects.commits.get(head)?)))
        .map(|(a, b)| diff_files(&r.objects, &a.tree, &b.tree))
        .unwrap_or_default()
        .iter()
        .filter_map(|f| f["filename"].as_str().map(str::to_string))
        .collect()
}

/// A `pull_request` event with `action` (and the label of a `labeled` /
/// `unlabeled` event): starts a run of every workflow it triggers. `None`
/// when the PR head has no workflow files (the caller keeps its built-in
/// behaviour).
pub fn pull_request_event(
    m: &mut Model,
    owner: &str,
    repo: &str,
    number: u64,
    action: &str,
    label: Option<&str>,
    sender: &str,
) -> Result<Option<Vec<u64>>, ApiError> {
    let r = m.repo(owner, repo)?;
    let Some(p) = r.pulls.get(&number).filter(|p| p.open) else {
        return Ok(None);
    };
    let head = p.head_sha.clone();
    let Some(set) = set_at(m, owner, repo, &head) else {
        return Ok(None);
    };
    let r = m.repo(owner, repo)?;
    let p = &r.pulls[&number];
    let mut payload = json!({
        "action": action,
        "number": number,
        "pull_request": m.pull_json(r, p),
        "repository": m.repo_json(r),
        "sender": m.login_json(sender),
    });
    if let Some(label) = label {
        payload["label"] = m.label_json(r, label);
    }
    let files = pr_changed_files(r, &p.base_ref, &head);
    // "Workflows will not run on pull_request activity if the pull request
    // has a merge conflict" (GitHub's events documentation); the base
    // repository's `pull_request_target` workflows still run.
    let conflicting = r.pull_conflicts(p) == Some(true);
    let mut started = Vec::new();
    // GitHub delivers the same activity as both events; `pull_request_target`
    // workflows run in the base repository's context.
    for event in ["pull_request", "pull_request_target"] {
        if event == "pull_request" && conflicting {
            continue;
        }
        let ctx = EventContext::new(event, payload.clone())
            .map_err(|e| ApiError::unprocessable(&e.to_string()))?
            .with_changed_files(files.clone());
        for (file, _) in set.triggered_by(&ctx) {
            started.push(start_run(
                m,
                owner,
                repo,
                &set,
                file,
                &ctx,
                vec![number],
                Value::Null,
                sender,
            )?);
        }
    }
    Ok(Some(started))
}

/// A `push` of `before..after` to `refs/heads/<branch>`: starts a run of
/// every workflow it triggers. `None` without workflow files at `after`.
pub fn push_event(
    m: &mut Model,
    owner: &str,
    repo: &str,
    full_ref: &str,
    before: &str,
    after: &str,
    sender: &str,
) -> Result<Option<Vec<u64>>, ApiError> {
    let Some(set) = set_at(m, owner, repo, after) else {
        return Ok(None);
    };
    let r = m.repo(owner, repo)?;
    let (Some(old), Some(new)) = (r.objects.commits.get(before), r.objects.commits.get(after))
    else {
        return Ok(Some(Vec::new()));
    };
    let files: Vec<String> = diff_files(&r.objects, &old.tree, &new.tree)
        .iter()
        .filter_map(|f| f["filename"].as_str().map(str::to_string))
        .collect();
    let payload = json!({
        "ref": full_ref, "before": before, "after": after,
        "head_commit": {"id": after, "message": new.message},
        "repository": m.repo_json(r),
        "sender": m.login_json(sender),
    });
    let ctx = EventContext::new("push", payload)
        .map_err(|e| ApiError::unprocessable(&e.to_string()))?
        .with_changed_files(files);
    let mut started = Vec::new();
    for (file, _) in set.triggered_by(&ctx) {
        started.push(start_run(
            m,
            owner,
            repo,
            &set,
            file,
            &ctx,
            Vec::new(),
            Value::Null,
            sender,
        )?);
    }
    Ok(Some(started))
}

/// A `workflow_dispatch` of `file` on `refs/heads/<branch>` (tip `tip`):
/// validates the inputs as GitHub does (422 with GitHub's message) and
/// starts the run on the tip of the ref. `None` without workflow files.
#[allow(clippy::too_many_arguments)]
pub fn dispatch_event(
    m: &mut Model,
    owner: &str,
    repo: &str,
    file: &str,
    branch: &str,
    tip: &str,
    inputs: &Map<String, Value>,
    sender: &str,
) -> Result<Option<u64>, ApiError> {
    let Some(set) = set_at(m, owner, repo, tip) else {
        return Ok(None);
    };
    let Some(wf) = set.get(file) else {
        return Err(ApiError::not_found());
    };
    let resolved = wf
        .validate_dispatch(inputs)
        .map_err(|refusal| ApiError::unprocessable(&refusal.message))?;
    let r = m.repo(owner, repo)?;
    let payload = json!({
        "ref": format!("refs/heads/{branch}"),
        "workflow": format!("{WORKFLOWS_DIR}/{file}"),
        "repository": m.repo_json(r),
        "sender": m.login_json(sender),
    });
    let ctx = EventContext::new("workflow_dispatch", payload)
        .map_err(|e| ApiError::unprocessable(&e.to_string()))?
        .with_github("sha", json!(tip))
        .with_dispatch_inputs(&resolved);
    let inputs = Value::Object(resolved.event_inputs().clone());
    start_run(m, owner, repo, &set, file, &ctx, Vec::new(), inputs, sender).map(Some)
}

/// Creates the run of `file` for the event: title, head, skipped conclusion
/// and concurrency cancels from the workflow file.
#[allow(clippy::too_many_arguments)]
fn start_run(
    m: &mut Model,
    owner: &str,
    repo: &str,
    set: &WorkflowSet,
    file: &str,
    event: &EventContext,
    pull_requests: Vec<u64>,
    inputs: Value,
    actor: &str,
) -> Result<u64, ApiError> {
    let wf = set.get(file).ok_or_else(ApiError::not_found)?;
    let (run_id, job_id, new_workflow_id) = (m.id() * 1000, m.id(), m.id());
    let ctx = event
        .clone()
        .with_github("run_id", json!(run_id))
        .with_github("run_attempt", json!(1))
        .with_github("workflow", json!(wf.name()))
        .with_github("actor", json!(actor));
    let title = wf.run_title(&ctx).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "run-name does not evaluate; using the workflow name");
        wf.name().to_string()
    });
    let skipped = match wf.plan_jobs(&ctx) {
        Ok(plan) => plan.conclusion() == Some("skipped"),
        Err(e) => {
            tracing::warn!(error = %e, "job conditions do not evaluate; the run proceeds");
            false
        }
    };
    let concurrency = wf.concurrency(&ctx).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "concurrency group does not evaluate; no group");
        None
    });
    let head = ctx.run_head();
    let now = Utc::now();
    let path = format!("{WORKFLOWS_DIR}/{file}");
    let r = m.repo_mut(owner, repo)?;
    let workflow_id = match r.workflows.iter().find(|w| w.path == path) {
        Some(w) => w.id,
        None => {
            r.workflows.push(Workflow {
                id: new_workflow_id,
                name: wf.name().to_string(),
                path,
            });
            new_workflow_id
        }
    };
    if let Some(c) = &concurrency {
        let group = c.group.to_lowercase();
        for other in r.runs.values_mut() {
            let same = other
                .concurrency_group
                .as_ref()
                .is_some_and(|g| g.to_lowercase() == group);
            let cancellable = match other.status.as_str() {
                "queued" | "pending" | "waiting" => true,
                "in_progress" => c.cancel_in_progress,
                _ => false,
            };
            if same && cancellable {
                other.status = "completed".into();
                other.conclusion = Some("cancelled".into());
                other.updated_at = now;
            }
        }
    }
    let run = Run {
        id: run_id,
        workflow_id,
        name: wf.name().to_string(),
        display_title: title,
        event: head.event,
        status: if skipped { "completed" } else { "queued" }.into(),
        conclusion: skipped.then(|| "skipped".to_string()),
        head_branch: head.head_branch.unwrap_or_default(),
        head_sha: head.head_sha.unwrap_or_default(),
        actor: actor.to_string(),
        triggering_actor: actor.to_string(),
        run_attempt: 1,
        inputs,
        pull_requests,
        created_at: now,
        updated_at: now,
        run_started_at: now,
        job_id,
        concurrency_group: concurrency.map(|c| c.group),
        past_attempts: Vec::new(),
        cancel_requested: false,
        jobs: Vec::new(),
        context: Some(ctx),
    };
    r.runs.insert(run_id, run);
    Ok(run_id)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::github::state::{GithubState, Pull};

    const SWEEP: &str = r#"
name: Sweep
run-name: Sweep - ${{ github.event.pull_request.title }}
concurrency:
  group: sweep-${{ github.event.pull_request.number }}-${{ github.event.action == 'labeled' && github.event.label.name != 'go' && github.run_id || 'active' }}
  cancel-in-progress: true
on:
  pull_request:
    branches: [main]
    types: [synchronize, labeled]
    paths: [changelog.yaml]
jobs:
  gate:
    if: >-
      !github.event.pull_request.draft &&
      contains(github.event.pull_request.labels.*.name, 'go') &&
      (github.event.action != 'labeled' || github.event.label.name == 'go')
    runs-on: ubuntu-latest
    steps: [{run: echo}]
"#;

    const SMOKE: &str = r#"
name: Smoke
run-name: Smoke - ${{ inputs.test-name }}
on:
  workflow_dispatch:
    inputs:
      test-name: {type: string, required: true}
      ref: {type: string}
      fast: {type: boolean, default: false}
jobs:
  run:
    runs-on: ubuntu-latest
    steps: [{run: echo}]
"#;

    fn files(pairs: &[(&str, &str)]) -> BTreeMap<String, Option<Vec<u8>>> {
        pairs
            .iter()
            .map(|(p, t)| (p.to_string(), Some(t.as_bytes().to_vec())))
            .collect()
    }

    async fn repo_with_pr(draft: bool, labels: &[&str], changelog: bool) -> (GithubState, String) {
        let st = GithubState::new();
        st.add_user("klaud", None, true).await;
        st.create_repo("o/r", "main").await.unwrap();
        st.push_commit(
            "o/r",
            "main",
            "klaud",
            files(&[
                (".github/workflows/sweep.yml", SWEEP),
                (".github/workflows/smoke.yml", SMOKE),
                ("changelog.yaml", "- a\n"),
                ("README.md", "x\n"),
            ]),
            "seed",
        )
        .await
        .unwrap();
        let tip = st.ref_sha("o/r", "refs/heads/main").await.unwrap();
        st.lock()
            .await
            .repo_mut("o", "r")
            .unwrap()
            .set_ref("refs/heads/klaud/auto-x", &tip);
        let change = if changelog {
            ("changelog.yaml", "- a\n- b\n")
        } else {
            ("README.md", "y\n")
        };
        let head = st
            .push_commit("o/r", "klaud/auto-x", "klaud", files(&[change]), "bump")
            .await
            .unwrap();
        let mut m = st.lock().await;
        let id = m.id();
        let r = m.repo_mut("o", "r").unwrap();
        let now = Utc::now();
        r.pulls.insert(
            1,
            Pull {
                number: 1,
                id,
                title: "Bump x".into(),
                body: None,
                open: true,
                draft,
                head_ref: "klaud/auto-x".into(),
                head_sha: head.clone(),
                base_ref: "main".into(),
                user: "klaud".into(),
                labels: labels.iter().map(|l| l.to_string()).collect(),
                created_at: now,
                updated_at: now,
                closed_at: None,
                closed_by: None,
                merged: None,
                mergeability: None,
            },
        );
        drop(m);
        (st, head)
    }

    fn run(m: &Model, id: u64) -> Run {
        m.repo("o", "r").unwrap().runs[&id].clone()
    }

    #[tokio::test]
    async fn a_listed_pull_request_has_what_githubs_list_has_and_no_mergeability() {
        let (st, _) = repo_with_pr(false, &["go"], true).await;
        let m = st.lock().await;
        let r = m.repo("o", "r").unwrap();
        let p = r.pulls.values().next().unwrap();
        let (full, listed) = (m.pull_json(r, p), m.pull_list_json(r, p));
        for key in [
            "mergeable",
            "mergeable_state",
            "merged",
            "comments",
            "commits",
        ] {
            assert!(full.get(key).is_some(), "{key} in the single read");
            assert!(
                listed.get(key).is_none(),
                "{key} in the listing: {listed:#}"
            );
        }
        for key in ["number", "state", "draft", "labels", "head", "user", "body"] {
            assert_eq!(listed[key], full[key], "{key}");
        }
    }

    #[tokio::test]
    async fn seeded_workflow_files_are_the_registered_workflows() {
        let (st, _) = repo_with_pr(false, &[], true).await;
        let m = st.lock().await;
        let r = m.repo("o", "r").unwrap();
        let mut paths: Vec<(&str, &str)> = r
            .workflows
            .iter()
            .map(|w| (w.path.as_str(), w.name.as_str()))
            .collect();
        paths.sort();
        assert_eq!(
            paths,
            [
                (".github/workflows/smoke.yml", "Smoke"),
                (".github/workflows/sweep.yml", "Sweep")
            ]
        );
    }

    #[tokio::test]
    async fn draft_prs_get_a_skipped_run_and_ready_ones_a_queued_run_titled_by_run_name() {
        let (st, head) = repo_with_pr(true, &["go"], true).await;
        let mut m = st.lock().await;
        let ids = pull_request_event(&mut m, "o", "r", 1, "labeled", Some("go"), "klaud")
            .unwrap()
            .unwrap();
        let draft_run = run(&m, ids[0]);
        assert_eq!(
            (draft_run.status.as_str(), draft_run.conclusion.as_deref()),
            ("completed", Some("skipped"))
        );
        assert_eq!(draft_run.display_title, "Sweep - Bump x");
        assert_eq!(draft_run.head_sha, head);
        assert_eq!(draft_run.head_branch, "klaud/auto-x");
        assert_eq!(draft_run.event, "pull_request");

        m.repo_mut("o", "r")
            .unwrap()
            .pulls
            .get_mut(&1)
            .unwrap()
            .draft = false;
        let first = pull_request_event(&mut m, "o", "r", 1, "labeled", Some("go"), "klaud")
            .unwrap()
            .unwrap()[0];
        assert_eq!(run(&m, first).status, "queued");
        assert_eq!(
            run(&m, first).concurrency_group.as_deref(),
            Some("sweep-1-active")
        );

        // A foreign label has a group of its own and cancels nothing.
        let foreign = pull_request_event(&mut m, "o", "r", 1, "labeled", Some("docs"), "klaud")
            .unwrap()
            .unwrap()[0];
        assert_eq!(run(&m, foreign).conclusion.as_deref(), Some("skipped"));
        assert_eq!(run(&m, first).status, "queued");

        // A push to the PR cancels the labelled run in the same group.
        let second = pull_request_event(&mut m, "o", "r", 1, "synchronize", None, "klaud")
            .unwrap()
            .unwrap()[0];
        assert_eq!(run(&m, first).conclusion.as_deref(), Some("cancelled"));
        assert_eq!(run(&m, second).status, "queued");
        // Opened is not one of the sweep's types.
        assert_eq!(
            pull_request_event(&mut m, "o", "r", 1, "opened", None, "klaud").unwrap(),
            Some(vec![])
        );
    }

    #[tokio::test]
    async fn a_pr_that_does_not_touch_the_changelog_starts_no_run() {
        let (st, _) = repo_with_pr(false, &["go"], false).await;
        let mut m = st.lock().await;
        assert_eq!(
            pull_request_event(&mut m, "o", "r", 1, "labeled", Some("go"), "klaud").unwrap(),
            Some(vec![])
        );
    }

    #[tokio::test]
    async fn pushing_to_a_pr_branch_is_a_synchronize_event() {
        let (st, _) = repo_with_pr(false, &["go"], true).await;
        let before = st.run_ids("o/r").await.len();
        st.push_commit(
            "o/r",
            "klaud/auto-x",
            "klaud",
            files(&[("changelog.yaml", "- c\n")]),
            "more",
        )
        .await
        .unwrap();
        let m = st.lock().await;
        let runs: Vec<&Run> = m.repo("o", "r").unwrap().runs.values().collect();
        assert_eq!(runs.len(), before + 1);
        assert_eq!(runs.last().unwrap().status, "queued");
    }

    #[tokio::test]
    async fn dispatch_inputs_are_validated_and_the_run_heads_on_the_dispatched_branch() {
        let (st, head) = repo_with_pr(false, &[], true).await;
        let tip = st.ref_sha("o/r", "refs/heads/main").await.unwrap();
        let mut m = st.lock().await;
        let given = |v: Value| v.as_object().unwrap().clone();
        let refuse = |m: &mut Model, v: Value| {
            dispatch_event(m, "o", "r", "smoke.yml", "main", &tip, &given(v), "klaud")
                .unwrap_err()
                .message
        };
        assert_eq!(
            refuse(&mut m, json!({"test-name": "t", "klaud-run": "true"})),
            r#"Unexpected inputs provided: ["klaud-run"]"#
        );
        assert_eq!(
            refuse(&mut m, json!({"ref": "x"})),
            "Required input 'test-name' not provided"
        );
        assert_eq!(
            refuse(&mut m, json!({"test-name": "t", "fast": "yes"})),
            "Provided value 'yes' for input 'fast' not in the list of allowed values"
        );
        assert_eq!(
            dispatch_event(
                &mut m,
                "o",
                "r",
                "sweep.yml",
                "main",
                &tip,
                &Map::new(),
                "klaud"
            )
            .unwrap_err()
            .message,
            "Workflow does not have 'workflow_dispatch' trigger"
        );
        let id = dispatch_event(
            &mut m,
            "o",
            "r",
            "smoke.yml",
            "main",
            &tip,
            &given(json!({"test-name": "t", "ref": head})),
            "klaud",
        )
        .unwrap()
        .unwrap();
        let r = run(&m, id);
        assert_eq!(r.display_title, "Smoke - t");
        assert_eq!(
            (r.head_branch.as_str(), r.head_sha.as_str()),
            ("main", tip.as_str())
        );
        assert_eq!(r.inputs["fast"], json!("false"), "defaults are applied");
        assert_eq!(r.inputs["ref"], json!(head));
    }

    #[tokio::test]
    async fn without_workflow_files_the_built_in_behaviour_stays() {
        let st = GithubState::new();
        st.add_user("klaud", None, true).await;
        st.create_repo("o/r", "main").await.unwrap();
        let sha = st
            .push_commit(
                "o/r",
                "main",
                "klaud",
                files(&[("README.md", "x\n")]),
                "seed",
            )
            .await
            .unwrap();
        let mut m = st.lock().await;
        assert!(set_at(&mut m, "o", "r", &sha).is_none());
        assert_eq!(
            dispatch_event(
                &mut m,
                "o",
                "r",
                "e2e-tests.yml",
                "main",
                &sha,
                &Map::new(),
                "klaud"
            )
            .unwrap(),
            None
        );
        assert_eq!(
            m.repo("o", "r").unwrap().workflows.len(),
            2,
            "the built-in InferenceX workflows"
        );
    }

    /// The real InferenceX workflow files, when the shared fixtures exist.
    fn inferencex_workflows(version: &str) -> Option<Vec<(String, String)>> {
        let dir = std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/fixtures/inferencex/workflows"
        ))
        .join(version);
        if !dir.is_dir() {
            assert!(
                std::env::var_os("CI").is_none(),
                "InferenceX workflow fixtures missing at {} (required when CI is set)",
                dir.display()
            );
            eprintln!(
                "SKIPPED: InferenceX workflow fixtures not found at {}",
                dir.display()
            );
            return None;
        }
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_string();
            if name.ends_with(".yml") {
                out.push((
                    format!(".github/workflows/{name}"),
                    std::fs::read_to_string(&path).unwrap(),
                ));
            }
        }
        Some(out)
    }

    #[tokio::test]
    async fn the_real_inferencex_files_drive_the_simulator_in_both_versions() {
        for (version, changelog, drafts_run, declares_klaud_run) in [
            ("843c6254", "perf-changelog.yaml", false, false),
            ("newer", "inferencex-e2e/perf-changelog.yaml", true, true),
        ] {
            let Some(workflows) = inferencex_workflows(version) else {
                return;
            };
            let st = GithubState::new();
            st.add_user("Klaud-Cold", None, true).await;
            st.create_repo("SemiAnalysisAI/InferenceX", "main")
                .await
                .unwrap();
            let mut seed: Vec<(&str, &str)> = workflows
                .iter()
                .map(|(p, t)| (p.as_str(), t.as_str()))
                .collect();
            seed.push((changelog, "- config-keys: [a]\n"));
            st.push_commit(
                "SemiAnalysisAI/InferenceX",
                "main",
                "Klaud-Cold",
                files(&seed),
                "seed",
            )
            .await
            .unwrap();
            let tip = st
                .ref_sha("SemiAnalysisAI/InferenceX", "refs/heads/main")
                .await
                .unwrap();
            let (owner, repo) = ("SemiAnalysisAI", "InferenceX");
            st.lock()
                .await
                .repo_mut(owner, repo)
                .unwrap()
                .set_ref("refs/heads/klaud/auto-a", &tip);
            let head = st
                .push_commit(
                    "SemiAnalysisAI/InferenceX",
                    "klaud/auto-a",
                    "Klaud-Cold",
                    files(&[(changelog, "- config-keys: [a]\n- config-keys: [b]\n")]),
                    "bump",
                )
                .await
                .unwrap();
            let mut m = st.lock().await;
            let id = m.id();
            let now = Utc::now();
            m.repo_mut(owner, repo).unwrap().pulls.insert(
                7,
                Pull {
                    number: 7,
                    id,
                    title: "[Klaud Cold] Bump a".into(),
                    body: None,
                    open: true,
                    draft: true,
                    head_ref: "klaud/auto-a".into(),
                    head_sha: head.clone(),
                    base_ref: "main".into(),
                    user: "Klaud-Cold".into(),
                    labels: vec!["full-sweep-enabled".into()],
                    created_at: now,
                    updated_at: now,
                    closed_at: None,
                    closed_by: None,
                    merged: None,
                    mergeability: None,
                },
            );
            let ids = pull_request_event(
                &mut m,
                owner,
                repo,
                7,
                "labeled",
                Some("full-sweep-enabled"),
                "Klaud-Cold",
            )
            .unwrap()
            .unwrap();
            let runs: Vec<Run> = ids
                .iter()
                .map(|id| m.repo(owner, repo).unwrap().runs[id].clone())
                .collect();
            let sweep: Vec<&Run> = runs.iter().filter(|r| r.name == "Run Sweep").collect();
            assert_eq!(sweep.len(), 1, "{version}: one run-sweep run");
            // The older version also has a pull_request_target workflow for
            // external PRs: its run exists and is skipped for Klaud's own.
            for other in runs.iter().filter(|r| r.name != "Run Sweep") {
                assert_eq!(other.event, "pull_request_target", "{version}");
                assert_eq!(
                    other.conclusion.as_deref(),
                    Some("skipped"),
                    "{version}: {}",
                    other.display_title
                );
            }
            assert_eq!(
                runs.len(),
                if version == "843c6254" { 2 } else { 1 },
                "{version}"
            );
            let r = sweep[0].clone();
            assert_eq!(
                r.display_title, "Run Sweep - [Klaud Cold] Bump a",
                "{version}"
            );
            assert_eq!(r.name, "Run Sweep");
            assert_eq!(r.head_sha, head);
            let expected = if drafts_run {
                (None, "queued")
            } else {
                (Some("skipped"), "completed")
            };
            assert_eq!(
                (r.conclusion.as_deref(), r.status.as_str()),
                expected,
                "{version}"
            );

            let inputs = json!({"test-name": "smoke", "generate-cli-command": "x", "ref": head, "klaud-run": "true"});
            let answer = dispatch_event(
                &mut m,
                owner,
                repo,
                "e2e-tests.yml",
                "main",
                &tip,
                inputs.as_object().unwrap(),
                "Klaud-Cold",
            );
            match answer {
                Ok(Some(id)) => {
                    assert!(declares_klaud_run, "{version}");
                    let r = m.repo(owner, repo).unwrap().runs[&id].clone();
                    assert_eq!(r.display_title, "e2e Test - smoke");
                    assert_eq!(
                        r.head_sha, tip,
                        "{version}: a dispatch runs on the tip of main"
                    );
                }
                Err(e) => {
                    assert!(!declares_klaud_run, "{version}: {}", e.message);
                    assert_eq!(e.message, r#"Unexpected inputs provided: ["klaud-run"]"#);
                }
                Ok(None) => panic!("{version}: workflow files were not found"),
            }
        }
    }
}
