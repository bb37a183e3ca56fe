//! The changelog entry, the sweep label and the final sweep.

use super::upkeep::MergePlan;
use crate::engine::forge::Forge as _;
use crate::engine::intent::Intent;
use crate::engine::write::Writes as _;
use klaud_planner::changelog::{CHANGELOG_PATH, append_entry, validate_append};

use super::{Engine, EngineError, Progress, SWEEP_INFRA_DETAIL, Scope, TRAILER, classify};
use crate::check_final::{added_entries, swept_points, uncovered_by};
use crate::engine::forge::{ForgeError, RunConclusion, RunQuery};
use crate::engine::journal::{AttemptRecord, CandidateRecord, Step};
use crate::engine::ownership::{Mismatch, MismatchKind};
use crate::model::{AttemptKind, AttemptStatus, MAX_INFRA_RETRIES, Outcome, Phase, RunRef};
use crate::report::{
    AttemptReport, ReportName, SweepCheck, compare, compare_evals, render_report, uncovered_points,
};
use crate::workflows::is_sweep_of;

impl Engine<'_> {
    // -------------------------------------------------------------- final

    pub(super) async fn step_final(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<Progress, EngineError> {
        self.reconcile_head(rec).await?;
        // One variant of an experiment in its final sweep at a time.
        if let Some(p) = self.experiment_final_slot(rec).await? {
            return Ok(p);
        }
        let number = rec
            .pull
            .ok_or_else(|| EngineError::Invalid("final without a pull request".into()))?;
        let link = self.entry_link(number);
        let path = format!("{}{CHANGELOG_PATH}", self.repository.prefix());
        let base_tip = self
            .branch_tip(&rec.base_branch)
            .await?
            .ok_or_else(|| ForgeError::NotFound(format!("base branch {}", rec.base_branch)))?;
        let head = Self::head(rec)?;
        let base_bytes = self
            .forge
            .read_file(&path, &base_tip.sha)
            .await?
            .unwrap_or_default();
        let head_bytes = self
            .forge
            .read_file(&path, &head)
            .await?
            .unwrap_or_default();
        let appended = validate_append(&base_bytes, &head_bytes).is_ok_and(|n| n >= 1)
            && String::from_utf8_lossy(&head_bytes[base_bytes.len()..]).contains(&link);
        if !appended {
            let proof = match self.prove(rec, Scope::Pull).await? {
                Ok(p) => p,
                Err(p) => return Ok(p),
            };
            let entry = self.changelog_entry(rec, &link);
            // A stale base is re-taken: the entry goes onto the current
            // base's bytes, never a merge.
            let new = match append_entry(&base_bytes, &entry)
                .map_err(|e| e.to_string())
                .and_then(|new| {
                    validate_append(&base_bytes, &new)
                        .map(|_| new)
                        .map_err(|e| format!("check-final: {e}"))
                }) {
                Ok(n) => n,
                Err(e) => {
                    let m = format!("the changelog entry cannot be appended: {e}");
                    return self
                        .end(rec, Outcome::UnexpectedError, Phase::FinalSweep, m, false)
                        .await;
                }
            };
            let message = format!(
                "Add perf-changelog entry for {}\n\n{TRAILER}{}\n",
                rec.key, rec.candidate
            );
            // A base that moved since the branch was made is merged in with
            // the entry (never a rebase): a PR that conflicts with its base
            // gets no `pull_request` run, so the label would start nothing.
            let plan = self
                .merge_plan(rec, &head, &base_tip.sha, Some(&link))
                .await?;
            self.intend(rec, Intent::CommitChangelog).await?;
            let sha = match plan {
                MergePlan::UpToDate => {
                    self.forge
                        .commit_files(&proof, &head, &[(path, new)], &message)
                        .await?
                }
                MergePlan::Merge { base_tip, files } => {
                    let message = format!(
                        "Add perf-changelog entry for {}, merging {}\n\n{TRAILER}{}\n",
                        rec.key, rec.base_branch, rec.candidate
                    );
                    self.forge
                        .commit_merge(&proof, &head, &base_tip, &files, &message)
                        .await?
                }
                MergePlan::HandOff(why) => {
                    let m = format!("the base moved and cannot be merged in: {why}");
                    self.end(rec, Outcome::Handoff, Phase::FinalSweep, m.clone(), true)
                        .await?;
                    if let Some(ending) = rec.ending.as_mut() {
                        ending.note = Some(m);
                    }
                    self.save(rec).await?;
                    return Ok(Progress::Advanced(Step::Finish));
                }
            };
            rec.pending_commit = Some(sha.clone());
            self.intend(rec, Intent::PushChangelog).await?;
            match self
                .forge
                .fast_forward_branch(&proof, &rec.branch, &sha)
                .await
            {
                Ok(()) => {
                    rec.head = Some(sha);
                    rec.pending_commit = None;
                    self.save(rec).await?;
                }
                // Re-read next step (reconcile_head or the ownership check
                // tells what happened).
                Err(ForgeError::Ambiguous(_)) | Err(ForgeError::NotFastForward(_)) => {}
                Err(e) => return Err(e.into()),
            }
            return Ok(Progress::Advanced(Step::Final));
        }
        let pull = self.forge.get_pull(number).await?;
        let sweep = &self.config.sweep_label;
        let remove: Vec<String> = pull
            .labels
            .iter()
            .filter(|l| *l != sweep && self.config.managed_labels.iter().any(|m| m == *l))
            .cloned()
            .collect();
        let add = !pull.labels.iter().any(|l| l == sweep);
        if add {
            let labels: Vec<String> = pull
                .labels
                .iter()
                .filter(|l| !remove.contains(l))
                .cloned()
                .chain(std::iter::once(sweep.clone()))
                .collect();
            if let Some(gap) = self
                .uncovered_at_head(rec, &path, &base_bytes, &head_bytes, &head, &labels)
                .await?
            {
                return self
                    .end(rec, Outcome::Failed, Phase::FinalSweep, gap, false)
                    .await;
            }
        }
        let workflows = self.base_workflows(&rec.base_sha).await?;
        let sweep_file = workflows.sweep.as_ref().ok().and_then(Option::as_ref);
        let on_drafts = match crate::workflows::sweep_runs_on_drafts(
            sweep_file,
            sweep,
            self.config.sweep_runs_on_drafts,
        ) {
            Ok(b) => b,
            Err(e) => {
                let m = format!("cannot tell whether the final sweep runs on drafts: {e}");
                return self
                    .end(rec, Outcome::Incompatible, Phase::FinalSweep, m, false)
                    .await;
            }
        };
        // A sweep that skips drafts would conclude `skipped`: the PR is
        // marked ready first, so the label event already sees it ready.
        // Klaud never requests reviews; readiness is all it changes.
        // Labelling starts the sweep: capacity is checked first.
        if add && let Some(p) = self.capacity_deferred(rec, "the sweep label").await? {
            return Ok(p);
        }
        let ready_first = !on_drafts && pull.draft;
        if ready_first {
            let proof = match self.prove(rec, Scope::Pull).await? {
                Ok(p) => p,
                Err(p) => return Ok(p),
            };
            self.intend(rec, Intent::ReadyBeforeSweep).await?;
            self.forge.set_draft(&proof, &pull, false).await?;
        }
        if !remove.is_empty() || add {
            let proof = match self.prove(rec, Scope::Pull).await? {
                Ok(p) => p,
                Err(p) => return Ok(p),
            };
            self.intend(rec, Intent::SetSweepLabel).await?;
            for l in &remove {
                self.forge.remove_label(&proof, number, l).await?;
            }
            if add {
                self.forge
                    .add_labels(&proof, number, std::slice::from_ref(sweep))
                    .await?;
            }
        }
        rec.sweep_requested_at.get_or_insert(self.clock.now());
        rec.attempts.push(AttemptRecord {
            kind: AttemptKind::FinalSweep,
            head,
            dispatched_at: None,
            run: None,
            status: AttemptStatus::Queued,
            infra: false,
            reported: false,
        });
        rec.step = Step::Sweep;
        self.save(rec).await?;
        Ok(Progress::Advanced(Step::Sweep))
    }

    /// check-final before the label: why the sweep the repository will run
    /// at `head` (with `labels`) would leave frozen points unmeasured, or
    /// `None` when it covers every one.
    async fn uncovered_at_head(
        &self,
        rec: &mut CandidateRecord,
        changelog_path: &str,
        base_changelog: &[u8],
        head_changelog: &[u8],
        head: &str,
        labels: &[String],
    ) -> Result<Option<String>, EngineError> {
        let frozen = self.frozen(rec).await?;
        if frozen.baseline.points.is_empty() {
            return Ok(None);
        }
        let added = match added_entries(base_changelog, head_changelog) {
            Ok(a) => a,
            Err(e) => {
                return Ok(Some(format!(
                    "check-final: the sweep matrix at {head} cannot be derived from {changelog_path}: {e}"
                )));
            }
        };
        let family = rec.family.clone();
        let (file, key) = family.rsplit_once(':').unwrap_or((&family, &rec.key));
        let master_path = format!("{}{file}", self.repository.prefix());
        let scenarios = match self.forge.read_file(&master_path, head).await? {
            Some(bytes) => scenarios_of(&bytes, key),
            None => Err(format!("{master_path} is missing")),
        };
        let swept = scenarios.and_then(|s| swept_points(&family, key, &s, &added, labels));
        let missing = match swept {
            Ok(swept) => uncovered_by(&frozen.baseline, &swept),
            Err(e) => {
                return Ok(Some(format!(
                    "check-final: the sweep matrix of {key} at {head} cannot be derived: {e}"
                )));
            }
        };
        Ok((!missing.is_empty()).then(|| {
            format!(
                "check-final: the sweep {} would run at {head} leaves {} of the {} frozen baseline points out: {}",
                self.config.sweep_workflow,
                missing.len(),
                frozen.baseline.points.len(),
                missing.join("; ")
            )
        }))
    }

    // -------------------------------------------------------------- sweep

    pub(super) async fn step_sweep(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<Progress, EngineError> {
        let head = Self::head(rec)?;
        let idx = match rec.attempts.last() {
            Some(a) if a.kind == AttemptKind::FinalSweep => rec.attempts.len() - 1,
            _ => {
                rec.attempts.push(AttemptRecord {
                    kind: AttemptKind::FinalSweep,
                    head: head.clone(),
                    dispatched_at: None,
                    run: None,
                    status: AttemptStatus::Queued,
                    infra: false,
                    reported: false,
                });
                rec.attempts.len() - 1
            }
        };
        let number = rec
            .pull
            .ok_or_else(|| EngineError::Invalid("sweep without a pull request".into()))?;
        let pull = self.forge.get_pull(number).await?;
        let expected_title = self.sweep_title(rec, &pull).await?;
        let repo = self.forge.repo();
        let ours = |r: &crate::engine::forge::Run| {
            is_sweep_of(r, number, &head, &repo, expected_title.as_deref())
        };
        if rec.attempts[idx].reported && rec.attempts[idx].infra {
            return self.retry_sweep(rec, idx, &ours).await;
        }
        if rec.attempts[idx].reported && !rec.uncovered.is_empty() {
            // A green run that left frozen points without a result: no
            // repair of the recipe can answer for points the sweep did not
            // run, and the PR must not look validated.
            let m = format!(
                "check-final: the final sweep passed but left {} of the frozen baseline points without a result: {}",
                rec.uncovered.len(),
                rec.uncovered.join("; ")
            );
            return self
                .end(rec, Outcome::Failed, Phase::FinalSweep, m, false)
                .await;
        }
        if rec.attempts[idx].reported
            && rec.attempts[idx].status == AttemptStatus::Failed
            && rec.sweep.is_none()
            && self.repair.is_some()
        {
            // A failed sweep goes to the repair hook like a failed smoke;
            // the repaired head gets a new final sweep.
            if rec.repairs < self.config.repair_budget {
                rec.step = Step::Repair;
                self.save(rec).await?;
                return Ok(Progress::Advanced(Step::Repair));
            }
            let m = format!(
                "the final sweep still fails after {} repairs",
                self.config.repair_budget
            );
            return self
                .end(rec, Outcome::Failed, Phase::FinalSweep, m, false)
                .await;
        }
        if rec.attempts[idx].reported {
            let (outcome, m) = match (&rec.attempts[idx].status, &rec.sweep) {
                (AttemptStatus::Passed, Some(_)) => (
                    Outcome::Validated,
                    "the final sweep passed on the exact head".to_owned(),
                ),
                _ => (
                    Outcome::Failed,
                    "the final sweep did not pass on the exact head".to_owned(),
                ),
            };
            return self.end(rec, outcome, Phase::FinalSweep, m, false).await;
        }
        let run = match rec.attempts[idx].run.clone() {
            Some(r) => r,
            None => {
                let known: Vec<u64> = rec.runs().iter().map(|r| r.id).collect();
                let runs = self
                    .forge
                    .list_runs(&RunQuery {
                        workflow: self.config.sweep_workflow.clone(),
                        event: Some("pull_request".into()),
                        actor: None,
                        head_sha: Some(head.clone()),
                    })
                    .await?;
                // Newest first. Concurrency (cancel-in-progress) cancels the
                // older runs of the group, so the live one is the newest run
                // that is not cancelled; a cancelled one only when nothing
                // else exists yet.
                let mine: Vec<_> = runs
                    .into_iter()
                    .filter(|r| ours(r) && !known.contains(&r.id))
                    .collect();
                let found = mine
                    .iter()
                    .find(|r| r.conclusion != Some(RunConclusion::Cancelled))
                    .or(mine.first())
                    .cloned();
                let Some(found) = found else {
                    // The sweep is triggered by GitHub, not by Klaud: if it
                    // never starts (a workflow condition, a disabled
                    // workflow), say so instead of waiting forever.
                    if let Some(at) = rec.sweep_requested_at
                        && self.clock.now() - at > self.config.sweep_start_timeout
                    {
                        let m = format!(
                            "no final sweep started on {head} within {} minutes of labelling",
                            self.config.sweep_start_timeout.num_minutes()
                        );
                        return self
                            .end(rec, Outcome::Uncertain, Phase::FinalSweep, m, false)
                            .await;
                    }
                    return Ok(Progress::Waiting(
                        "waiting for the final sweep to start".into(),
                    ));
                };
                let r = RunRef {
                    id: found.id,
                    attempt: found.attempt,
                    url: found.html_url,
                };
                rec.attempts[idx].run = Some(r.clone());
                rec.attempts[idx].status = AttemptStatus::Running;
                self.save(rec).await?;
                r
            }
        };
        let live = self.forge.get_run(run.id).await?;
        if !ours(&live) {
            let m = Mismatch {
                kind: MismatchKind::Unexpected,
                what: format!("final sweep run {}", live.id),
                expected: format!("a pull_request run of #{number} on {head} from {repo}"),
                found: format!(
                    "{} run on {} titled {:?}",
                    live.event, live.head_sha, live.title
                ),
            };
            return self.on_mismatch(rec, m).await;
        }
        // The run was identified by pull request, head, event and head
        // repository above; its own title is what the ownership check
        // re-reads (the workflow's run-name, never the PR title alone).
        let title = live.title.clone();
        if !live.is_completed() {
            if let Some(p) = self.publish_live(rec, idx, &live, "full sweep").await? {
                return Ok(p);
            }
            return Ok(Progress::Waiting(format!(
                "final sweep run {} is {}",
                live.id, live.status
            )));
        }
        if matches!(
            live.conclusion,
            Some(RunConclusion::Cancelled | RunConclusion::Skipped)
        ) {
            // Concurrency cancels the older run of a group when a newer
            // event (a label, a push) starts another; a run that skipped
            // every job may be followed by the label's run. Follow the
            // newer run instead of treating this one as the sweep.
            let newer = self
                .forge
                .list_runs(&RunQuery {
                    workflow: self.config.sweep_workflow.clone(),
                    event: Some("pull_request".into()),
                    actor: None,
                    head_sha: Some(head.clone()),
                })
                .await?
                .into_iter()
                .find(|r| ours(r) && r.id > live.id);
            if let Some(n) = newer {
                rec.attempts[idx].run = Some(RunRef {
                    id: n.id,
                    attempt: n.attempt,
                    url: n.html_url,
                });
                self.save(rec).await?;
                return Ok(Progress::Advanced(Step::Sweep));
            }
        }
        if live.conclusion == Some(RunConclusion::Skipped) {
            let requested = rec.sweep_requested_at.unwrap_or_else(|| self.clock.now());
            if self.clock.now() - requested < self.config.dispatch_grace {
                return Ok(Progress::Waiting(format!(
                    "final sweep run {} skipped every job; waiting for the label's run",
                    live.id
                )));
            }
            // Not the candidate's fault and not an outage: the workflow's
            // job conditions excluded this PR. Re-running cannot help.
            let m = format!(
                "the final sweep run {} concluded skipped: the job conditions of {} excluded PR #{number} (draft: {}, labels: {}); if the sweep needs a ready PR, set sweep_runs_on_drafts = false",
                live.id,
                self.config.sweep_workflow,
                pull.draft,
                pull.labels.join(", ")
            );
            return self
                .end(rec, Outcome::Uncertain, Phase::FinalSweep, m, false)
                .await;
        }
        let (rows, evals, mut notes, manifest) = self.collect(live.id).await?;
        let passed = live.conclusion == Some(RunConclusion::Success);
        let check = match &manifest {
            Some(m) if m.head == head && m.run_id == live.id && m.full_sweep => Some(SweepCheck {
                run_id: live.id,
                run_attempt: live.attempt,
                head: head.clone(),
                full_sweep: true,
                manifest: true,
            }),
            Some(m) => {
                notes.push(format!(
                    "The sweep manifest does not match: head {}, run {}, full sweep {}.",
                    m.head, m.run_id, m.full_sweep
                ));
                None
            }
            None if live.head_sha == head => Some(SweepCheck {
                run_id: live.id,
                run_attempt: live.attempt,
                head: head.clone(),
                full_sweep: true,
                manifest: false,
            }),
            None => None,
        };
        if let Some(c) = &live.conclusion {
            notes.insert(0, format!("Run conclusion: {c}."));
        }
        let (_, infra) = classify(&live);
        let frozen = self.frozen(rec).await?;
        // check-final, after the sweep: every frozen point needs a result
        // of this run, whatever the run concluded (the incumbent's
        // `finish` applies the same rule before readiness).
        let uncovered: Vec<String> = uncovered_points(&frozen.baseline, &rows)
            .into_iter()
            .map(|p| p.label.clone())
            .collect();
        if passed && !uncovered.is_empty() {
            notes.push(format!(
                "check-final: {} of the {} frozen baseline points have no result in this run: {}.",
                uncovered.len(),
                frozen.baseline.points.len(),
                uncovered.join("; ")
            ));
        }
        let status = if passed && check.is_some() && uncovered.is_empty() {
            AttemptStatus::Passed
        } else if live.conclusion == Some(RunConclusion::Cancelled) {
            AttemptStatus::Cancelled
        } else {
            AttemptStatus::Failed
        };
        let report = AttemptReport {
            owner_run: rec.owner_run,
            candidate: Self::candidate_id(rec)?,
            name: ReportName::Run {
                id: live.id,
                attempt: live.attempt,
            },
            kind: Some(AttemptKind::FinalSweep),
            status,
            detail: Some(
                if infra {
                    SWEEP_INFRA_DETAIL
                } else {
                    "full sweep"
                }
                .to_owned(),
            ),
            run: Some(run.clone()),
            at: self.clock.now(),
            image: rec.image.clone(),
            head: Some(head.clone()),
            sections: compare(&frozen.baseline, &rows, "no result in this run"),
            evals: compare_evals(&evals, &frozen.baseline),
            notes,
            part: None,
            failed_jobs: self.failed_jobs(live.id, status).await?,
            live: None,
            repair: self.repair_changes(rec, idx).await?,
        };
        if let Some(changes) = &report.repair {
            // Counted even when this run only learnt of the repair from
            // GitHub (an empty journal).
            rec.repairs = rec.repairs.max(changes.n);
        }
        let rendered = render_report(&report).map_err(|e| EngineError::Invalid(e.to_string()))?;
        if let Some(p) = self
            .publish(rec, &rendered, Scope::Run(live.id, &title))
            .await?
        {
            return Ok(p);
        }
        rec.sweep = check.filter(|_| passed && uncovered.is_empty());
        rec.uncovered = if passed { uncovered } else { Vec::new() };
        let a = &mut rec.attempts[idx];
        a.status = status;
        a.infra = infra;
        a.reported = true;
        self.save(rec).await?;
        Ok(Progress::Advanced(Step::Sweep))
    }

    /// An infrastructure failure of the final sweep: re-run it (at most
    /// [`MAX_INFRA_RETRIES`] times, not counted as repairs), else fail. A
    /// re-run counts as started only once GitHub shows the new attempt; an
    /// answer whose outcome is unknown (a 5xx) is settled by re-reading the
    /// run, never assumed.
    pub(super) async fn retry_sweep(
        &self,
        rec: &mut CandidateRecord,
        idx: usize,
        ours: &(dyn Fn(&crate::engine::forge::Run) -> bool + Sync),
    ) -> Result<Progress, EngineError> {
        let Some(run) = rec.attempts[idx].run.clone() else {
            return Err(EngineError::Invalid(
                "a reported sweep without a run".into(),
            ));
        };
        let retries = rec
            .attempts
            .iter()
            .filter(|a| a.kind == AttemptKind::FinalSweep && a.infra)
            .count() as u32;
        if retries > MAX_INFRA_RETRIES {
            let m = format!("the final sweep failed on infrastructure {retries} times");
            return self
                .end(rec, Outcome::Failed, Phase::FinalSweep, m, false)
                .await;
        }
        // A re-run that landed (before a crash, or behind a lost answer)
        // shows as a newer attempt.
        let live = self.forge.get_run(run.id).await?;
        if live.attempt > run.attempt {
            let head = rec.attempts[idx].head.clone();
            rec.attempts.push(AttemptRecord {
                kind: AttemptKind::FinalSweep,
                head,
                dispatched_at: None,
                run: Some(RunRef {
                    id: run.id,
                    attempt: live.attempt,
                    url: live.html_url,
                }),
                status: AttemptStatus::Queued,
                infra: false,
                reported: false,
            });
            self.save(rec).await?;
            return Ok(Progress::Advanced(Step::Sweep));
        }
        // `dispatched_at` of the reported attempt holds when its re-run was
        // last requested: GitHub may show the new attempt a moment later.
        if let Some(at) = rec.attempts[idx].dispatched_at
            && self.clock.now() - at < self.config.dispatch_grace
        {
            return Ok(Progress::Waiting(format!(
                "re-run of sweep {} requested at {at}; GitHub shows no new attempt yet",
                run.id
            )));
        }
        if !ours(&live) {
            let m = Mismatch {
                kind: MismatchKind::Unexpected,
                what: format!("final sweep run {}", live.id),
                expected: "the final sweep of this pull request and head".into(),
                found: format!(
                    "{} run on {} titled {:?}",
                    live.event, live.head_sha, live.title
                ),
            };
            return self.on_mismatch(rec, m).await;
        }
        if let Some(p) = self.capacity_deferred(rec, "the sweep re-run").await? {
            return Ok(p);
        }
        let proof = match self.prove(rec, Scope::Run(run.id, &live.title)).await? {
            Ok(p) => p,
            Err(p) => return Ok(p),
        };
        rec.attempts[idx].dispatched_at = Some(self.clock.now());
        self.intend(rec, Intent::RerunSweep(run.id)).await?;
        match self.forge.rerun_run(&proof, run.id).await {
            Ok(()) | Err(ForgeError::Ambiguous(_)) => {}
            Err(e) => return Err(e.into()),
        }
        let again = self.forge.get_run(run.id).await?;
        if again.attempt > run.attempt {
            return Ok(Progress::Advanced(Step::Sweep));
        }
        Ok(Progress::Waiting(format!(
            "re-run of sweep {} requested; waiting for GitHub to show the new attempt",
            run.id
        )))
    }
}

/// The `scenarios` of `key` in a master file's bytes.
fn scenarios_of(
    bytes: &[u8],
    key: &str,
) -> Result<std::collections::BTreeMap<String, serde_json::Value>, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    let doc = klaud_planner::yaml::parse(text)
        .map_err(|e| e.to_string())?
        .map(|d| d.to_json())
        .unwrap_or_default();
    let entry = doc
        .get(key)
        .ok_or_else(|| format!("the master config has no entry {key}"))?;
    Ok(entry
        .get("scenarios")
        .and_then(serde_json::Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default())
}
