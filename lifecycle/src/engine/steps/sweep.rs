//! Step 8 of 9, `Step::Sweep`: watch the final full sweep GitHub starts on
//! the exact head after the label: find the run, follow a newer one when
//! concurrency cancels it, publish its attempt report and check that every
//! frozen point has a result; re-run an infrastructure failure (the one
//! rule in `attempt`), send a real failure to `repair`, end the candidate
//! on a pass. The report of a pass is kept in the record and goes out in
//! one comment with the receipt (`finish`), a write fewer; every other
//! report goes out here (a failed one is what a cleanup rebuilt after a
//! lost store reads its ending from).
//!
//! After `final`, before `finish`. Reads the sweep runs, their artifacts
//! and manifest, the frozen baseline. May write: report comments and a
//! re-run of its own sweep, under a proof.

use crate::artifacts::SweepManifest;
use crate::engine::attempt::classify;
use crate::engine::attempt::{InfraRetry, Shown, attempt_report, infra_retry};
use crate::engine::context::Engine;
use crate::engine::context::Progress;
use crate::engine::error::EngineError;
use crate::engine::forge::{Forge as _, ForgeError, RunConclusion, RunQuery};
use crate::engine::forge::{Pull, Run};
use crate::engine::intent::Intent;
use crate::engine::journal::{AttemptRecord, CandidateRecord, Step};
use crate::engine::measured_image::end_measured;
use crate::engine::ownership::{Mismatch, MismatchKind};
use crate::engine::proof::Scope;
use crate::engine::write::Writes as _;
use crate::model::{AttemptKind, AttemptStatus, Outcome, Phase, RunRef};
use crate::report::{SweepCheck, render_report, uncovered_points};
use crate::workflow_contract::is_sweep_of;
use klaud_claims::CommitSha;

pub(in crate::engine) async fn run(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
) -> Result<Progress, EngineError> {
    let head = Engine::head(rec)?;
    let idx = match rec.attempts.last() {
        Some(a) if a.kind == AttemptKind::FinalSweep => rec.attempts.len() - 1,
        _ => {
            rec.attempts.push(AttemptRecord {
                kind: AttemptKind::FinalSweep,
                head: head.to_string(),
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
    let pull = cx.forge.get_pull(number).await?;
    let expected_title = cx.sweep_title(rec, &pull).await?;
    let repo = cx.forge.repo();
    let ours = |r: &Run| is_sweep_of(r, number, &head, &repo, expected_title.as_deref());
    if rec.attempts[idx].reported {
        return after_report(cx, rec, idx, &ours).await;
    }
    let run = match rec.attempts[idx].run.clone() {
        Some(r) => r,
        None => match find_run(cx, rec, idx, &head, &ours).await? {
            Ok(r) => r,
            Err(p) => return Ok(p),
        },
    };
    let live = cx.forge.get_run(run.id).await?;
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
        return cx.on_mismatch(rec, m).await;
    }
    if !live.is_completed() {
        if let Some(p) = cx.publish_live(rec, idx, &live).await? {
            return Ok(p);
        }
        return Ok(Progress::Waiting(format!(
            "final sweep run {} is {}",
            live.id, live.status
        )));
    }
    if let Some(p) = follow_newer_or_skip(cx, rec, idx, &live, &pull, &head, &ours).await? {
        return Ok(p);
    }
    report_run(cx, rec, idx, &live, run, &head).await
}

/// What follows a reported sweep: a re-run after an infrastructure
/// failure, the repair of a real failure, or the end.
async fn after_report(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
    idx: usize,
    ours: &(dyn Fn(&Run) -> bool + Sync),
) -> Result<Progress, EngineError> {
    if rec.attempts[idx].infra {
        return retry_sweep(cx, rec, idx, ours).await;
    }
    if !rec.uncovered.is_empty() {
        // A green run that left frozen points without a result: no
        // repair of the recipe can answer for points the sweep did not
        // run, and the PR must not look validated.
        let m = format!(
            "check-final: the final sweep passed but left {} of the frozen baseline points without a result: {}",
            rec.uncovered.len(),
            rec.uncovered.join("; ")
        );
        return cx
            .end(rec, Outcome::Failed, Phase::FinalSweep, m, false)
            .await;
    }
    if rec.attempts[idx].status == AttemptStatus::Failed
        && rec.sweep.is_none()
        && cx.repair.is_some()
    {
        // A failed sweep goes to the repair hook like a failed smoke;
        // the repaired head gets a new final sweep.
        if rec.repairs < cx.config.repair_budget {
            rec.step = Step::Repair;
            cx.save(rec).await?;
            return Ok(Progress::Advanced(Step::Repair));
        }
        let m = format!(
            "the final sweep still fails after {} repairs",
            cx.config.repair_budget
        );
        return cx
            .end(rec, Outcome::Failed, Phase::FinalSweep, m, false)
            .await;
    }
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
    cx.end(rec, outcome, Phase::FinalSweep, m, false).await
}

/// The sweep GitHub started for this head after the label, recorded on
/// attempt `idx`; `Err(progress)` while none has started (or, past the
/// start timeout, the candidate's end).
async fn find_run(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
    idx: usize,
    head: &CommitSha,
    ours: &(dyn Fn(&Run) -> bool + Sync),
) -> Result<Result<RunRef, Progress>, EngineError> {
    let known: Vec<u64> = rec.runs().iter().map(|r| r.id).collect();
    let runs = cx.forge.list_runs(&sweep_runs(cx, head)).await?;
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
            && cx.clock.now() - at > cx.config.sweep_start_timeout
        {
            let m = format!(
                "no final sweep started on {head} within {} minutes of labelling",
                cx.config.sweep_start_timeout.num_minutes()
            );
            return Ok(Err(cx
                .end(rec, Outcome::Uncertain, Phase::FinalSweep, m, false)
                .await?));
        }
        return Ok(Err(Progress::Waiting(
            "waiting for the final sweep to start".into(),
        )));
    };
    let r = RunRef {
        id: found.id,
        attempt: found.attempt,
        url: found.html_url,
    };
    rec.attempts[idx].run = Some(r.clone());
    rec.attempts[idx].status = AttemptStatus::Running;
    cx.save(rec).await?;
    Ok(Ok(r))
}

/// The `pull_request` runs of the sweep workflow on `head`.
pub(in crate::engine) fn sweep_runs(cx: &Engine<'_>, head: &CommitSha) -> RunQuery {
    RunQuery {
        workflow: cx.config.sweep_workflow.clone(),
        event: Some("pull_request".into()),
        actor: None,
        head_sha: Some(head.clone()),
    }
}

/// A cancelled or skipped sweep run: follow a newer run of the same sweep
/// when there is one, wait a moment for the label's run after a skipped
/// one, else end `uncertain` on a skip. `None`: the run is the sweep.
async fn follow_newer_or_skip(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
    idx: usize,
    live: &Run,
    pull: &Pull,
    head: &CommitSha,
    ours: &(dyn Fn(&Run) -> bool + Sync),
) -> Result<Option<Progress>, EngineError> {
    if matches!(
        live.conclusion,
        Some(RunConclusion::Cancelled | RunConclusion::Skipped)
    ) {
        // Concurrency cancels the older run of a group when a newer
        // event (a label, a push) starts another; a run that skipped
        // every job may be followed by the label's run. Follow the
        // newer run instead of treating this one as the sweep.
        let newer = cx
            .forge
            .list_runs(&sweep_runs(cx, head))
            .await?
            .into_iter()
            .find(|r| ours(r) && r.id > live.id);
        if let Some(n) = newer {
            rec.attempts[idx].run = Some(RunRef {
                id: n.id,
                attempt: n.attempt,
                url: n.html_url,
            });
            cx.save(rec).await?;
            return Ok(Some(Progress::Advanced(Step::Sweep)));
        }
    }
    if live.conclusion != Some(RunConclusion::Skipped) {
        return Ok(None);
    }
    let requested = rec.sweep_requested_at.unwrap_or_else(|| cx.clock.now());
    if cx.clock.now() - requested < cx.config.dispatch_grace {
        return Ok(Some(Progress::Waiting(format!(
            "final sweep run {} skipped every job; waiting for the label's run",
            live.id
        ))));
    }
    // Not the candidate's fault and not an outage: the workflow's
    // job conditions excluded this PR. Re-running cannot help.
    let m = format!(
        "the final sweep run {} concluded skipped: the job conditions of {} excluded PR #{} (draft: {}, labels: {}); if the sweep needs a ready PR, set sweep_runs_on_drafts = false",
        live.id,
        cx.config.sweep_workflow,
        pull.number,
        pull.draft,
        pull.labels.join(", ")
    );
    Ok(Some(
        cx.end(rec, Outcome::Uncertain, Phase::FinalSweep, m, false)
            .await?,
    ))
}

/// The proof a finished run is the full sweep of `head`: its manifest when
/// it uploaded one (a manifest that does not match is said in `notes`),
/// else its head.
fn sweep_check(
    manifest: Option<&SweepManifest>,
    live: &Run,
    head: &CommitSha,
    notes: &mut Vec<String>,
) -> Option<SweepCheck> {
    let check = |manifest| SweepCheck {
        run_id: live.id,
        run_attempt: live.attempt,
        head: head.clone(),
        full_sweep: true,
        manifest,
    };
    match manifest {
        Some(m) if m.head == *head && m.run_id == live.id && m.full_sweep => Some(check(true)),
        Some(m) => {
            notes.push(format!(
                "The sweep manifest does not match: head {}, run {}, full sweep {}.",
                m.head, m.run_id, m.full_sweep
            ));
            None
        }
        None if live.head_sha == *head => Some(check(false)),
        None => None,
    }
}

/// A finished sweep run: its results against the frozen baseline
/// (check-final: every frozen point needs a result), its report
/// published, the attempt recorded.
async fn report_run(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
    idx: usize,
    live: &Run,
    run: RunRef,
    head: &CommitSha,
) -> Result<Progress, EngineError> {
    let (rows, evals, mut notes, manifest) = cx.collect(live.id).await?;
    let passed = live.conclusion == Some(RunConclusion::Success);
    let check = sweep_check(manifest.as_ref(), live, head, &mut notes);
    if let Some(c) = &live.conclusion {
        notes.insert(0, format!("Run conclusion: {c}."));
    }
    let (_, infra) = classify(live);
    let frozen = cx.frozen(rec).await?;
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
    // A failed final sweep's jobs are all read: what follows it (a retry,
    // the repair hook, the end) is not the playbook's to decide alone.
    let failed_jobs = cx.triaged_jobs(rec, live, status, false).await?.jobs;
    // check-final also asks what ran: a sweep of another container
    // validates nothing, whatever it concluded, and a re-run or a repair
    // would measure the same container again.
    let measured = cx.measured_mismatch(rec, &rows);
    let (status, infra) = match &measured {
        Some(m) => {
            notes.extend(m.notes());
            (AttemptStatus::Failed, false)
        }
        None => (status, infra),
    };
    let repair = cx.repair_changes(rec, idx).await?;
    let shown = Shown {
        kind: AttemptKind::FinalSweep,
        status,
        infra,
        run,
        head: head.to_string(),
        rows,
        evals,
        notes,
        missing: "no result in this run",
        failed_jobs,
        live: None,
        repair,
    };
    let mut report = attempt_report(cx, rec, live, &frozen, shown);
    report.sick_nodes = cx.sick_nodes_seen(rec, live, &report.failed_jobs).await;
    if let Some(changes) = &report.repair {
        // Counted even when this run only learnt of the repair from
        // GitHub (an empty journal).
        rec.repairs = rec.repairs.max(changes.n);
    }
    let rendered = render_report(&report).map_err(|e| EngineError::Invalid(e.to_string()))?;
    // A sweep that validates the candidate is its last report: it goes
    // out with the receipt, in one comment, unless it cannot
    // (`Engine::may_fold`).
    let validates = status == AttemptStatus::Passed
        && check.is_some()
        && uncovered.is_empty()
        && measured.is_none();
    let kept = if validates && Engine::may_fold(&rendered) {
        serde_json::to_value(&report).ok()
    } else {
        None
    };
    if kept.is_some() {
        rec.final_report = kept;
    } else if let Some(p) = cx
        // The run was identified by pull request, head, event and head
        // repository; its own title is what the ownership check re-reads
        // (the workflow's run-name, never the PR title alone).
        .publish(rec, &rendered, Scope::Run(live.id, &live.title))
        .await?
    {
        return Ok(p);
    }
    rec.sweep = check.filter(|_| passed && uncovered.is_empty() && measured.is_none());
    rec.uncovered = if passed { uncovered } else { Vec::new() };
    let a = &mut rec.attempts[idx];
    a.status = status;
    a.infra = infra;
    a.reported = true;
    if let Some(m) = &measured {
        end_measured(rec, Phase::FinalSweep, m);
        cx.save(rec).await?;
        return Ok(Progress::Advanced(Step::Finish));
    }
    cx.save(rec).await?;
    Ok(Progress::Advanced(Step::Sweep))
}

/// An infrastructure failure of the final sweep: re-run it while the one
/// retry rule allows ([`infra_retry`], never counted as a repair), else
/// fail. A
/// re-run counts as started only once GitHub shows the new attempt; an
/// answer whose outcome is unknown (a 5xx) is settled by re-reading the
/// run, never assumed.
// Kept whole (about 80 lines): finding a landed re-run, the retry rule
// and the re-run itself are one sequence under one proof.
pub(in crate::engine) async fn retry_sweep(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
    idx: usize,
    ours: &(dyn Fn(&crate::engine::forge::Run) -> bool + Sync),
) -> Result<Progress, EngineError> {
    let Some(run) = rec.attempts[idx].run.clone() else {
        return Err(EngineError::Invalid(
            "a reported sweep without a run".into(),
        ));
    };
    if let InfraRetry::GiveUp(n) = infra_retry(&rec.attempts) {
        let m = format!("the final sweep failed on infrastructure {n} times");
        return cx
            .end(rec, Outcome::Failed, Phase::FinalSweep, m, false)
            .await;
    }
    // A re-run that landed (before a crash, or behind a lost answer)
    // shows as a newer attempt.
    let live = cx.forge.get_run(run.id).await?;
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
        cx.save(rec).await?;
        return Ok(Progress::Advanced(Step::Sweep));
    }
    // `dispatched_at` of the reported attempt holds when its re-run was
    // last requested: GitHub may show the new attempt a moment later.
    if let Some(at) = rec.attempts[idx].dispatched_at
        && cx.clock.now() - at < cx.config.dispatch_grace
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
        return cx.on_mismatch(rec, m).await;
    }
    if let Some(p) = cx.capacity_deferred(rec, "the sweep re-run").await? {
        return Ok(p);
    }
    let proof = match cx.prove(rec, Scope::Run(run.id, &live.title)).await? {
        Ok(p) => p,
        Err(p) => return Ok(p),
    };
    rec.attempts[idx].dispatched_at = Some(cx.clock.now());
    cx.intend(rec, Intent::RerunSweep(run.id)).await?;
    match cx.forge.rerun_run(&proof, run.id).await {
        Ok(()) | Err(ForgeError::Ambiguous(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let again = cx.forge.get_run(run.id).await?;
    if again.attempt > run.attempt {
        return Ok(Progress::Advanced(Step::Sweep));
    }
    Ok(Progress::Waiting(format!(
        "re-run of sweep {} requested; waiting for GitHub to show the new attempt",
        run.id
    )))
}
