//! Step 5 of 9, `Step::Smoke`: one smoke attempt at the exact head: dispatch
//! the targeted workflow (`dispatch`), watch the run (live report,
//! cancelling a run stuck past the timeout), publish its attempt report,
//! then decide: passed goes to `final`, an infrastructure failure is
//! retried by the one rule in `attempt`, a real failure goes to `repair`.
//!
//! After `baseline` (and after each repair). Reads the run, its jobs and
//! artifacts and the frozen baseline. May write: the dispatch, a cancel of
//! its own stuck run, report comments, under a proof.

use crate::engine::attempt::classify;
use crate::engine::attempt::{InfraRetry, Shown, attempt_report, infra_retry};
use crate::engine::config::is_smoke_title;
use crate::engine::context::Engine;
use crate::engine::context::Progress;
use crate::engine::error::EngineError;
use crate::engine::forge::Forge as _;
use crate::engine::forge::Run;
use crate::engine::intent::Intent;
use crate::engine::journal::{AttemptRecord, CandidateRecord, Step};
use crate::engine::measured_image::end_measured;
use crate::engine::proof::Scope;
use crate::engine::write::Writes as _;
use crate::model::{AttemptKind, AttemptStatus, Outcome, Phase, RunRef};
use crate::report::render_report;

/// The attempts as the published reports tell them (an empty journal),
/// else the initial smoke attempt. The baseline step does it right
/// after publishing its report, from the comment list it has just
/// read; the smoke step only when a record reaches it without.
pub(in crate::engine) async fn first_attempts(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
) -> Result<(), EngineError> {
    if !rec.attempts.is_empty() {
        return Ok(());
    }
    cx.rebuild_attempts(rec).await?;
    if rec.attempts.is_empty() {
        rec.attempts.push(AttemptRecord {
            kind: AttemptKind::Initial {
                budget: cx.config.repair_budget,
            },
            head: Engine::head(rec)?.to_string(),
            dispatched_at: None,
            run: None,
            status: AttemptStatus::Queued,
            infra: false,
            reported: false,
        });
    }
    cx.save(rec).await
}

pub(in crate::engine) async fn run(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
) -> Result<Progress, EngineError> {
    first_attempts(cx, rec).await?;
    // The flag and environment audit found that the recipes use what
    // the new engine no longer defines: no GPU run can pass, so none is
    // dispatched. Only before the first dispatch: a run already made
    // (an older record) is seen through.
    if rec.attempts.iter().all(|a| a.run.is_none())
        && let Some(note) = rec.upstream.as_ref().and_then(crate::report::audit_note)
    {
        let note = note.en.into_owned();
        rec.ending = Some(crate::engine::journal::Ending {
            outcome: Outcome::Incompatible,
            phase: Phase::Targeted,
            message: note.clone(),
            hands_off: false,
            note: Some(note),
            declined: None,
        });
        rec.step = crate::engine::journal::Step::Finish;
        cx.save(rec).await?;
        return Ok(Progress::Advanced(crate::engine::journal::Step::Finish));
    }
    let idx = rec.attempts.len() - 1;
    if rec.attempts[idx].reported {
        return after_attempt(cx, rec).await;
    }
    let head = rec.attempts[idx].head.clone();
    let plan = match cx.smoke_plan(rec, &head).await? {
        Ok(p) => p,
        Err(why) => {
            // Before any dispatch: GitHub would refuse it (422) or the
            // run could not test the candidate.
            let m = format!("the smoke workflow cannot be dispatched: {why}");
            return cx
                .end(rec, Outcome::Incompatible, Phase::Targeted, m, false)
                .await;
        }
    };
    let run = match rec.attempts[idx].run.clone() {
        Some(r) => r,
        None => return cx.find_or_dispatch(rec, idx, plan).await,
    };
    let live = cx.forge.get_run(run.id).await?;
    // A run dispatched before the title named the family and the attempt
    // keeps its old title: the proof checks the title the run has, once it
    // is recognisably this candidate's.
    let title = if is_smoke_title(&live.title, rec.owner_run, rec.candidate.as_str()) {
        live.title.clone()
    } else {
        plan.title.clone()
    };
    if !live.is_completed() {
        return watch_run(cx, rec, idx, &live, &title).await;
    }
    report_run(cx, rec, idx, &live, &title).await
}

/// A smoke run still going: its live report, or its cancel once it is
/// stuck past the run timeout.
async fn watch_run(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
    idx: usize,
    live: &Run,
    title: &str,
) -> Result<Progress, EngineError> {
    // A run stuck in the queue (no runner) is cancelled after the
    // timeout; its cancellation then counts as an infrastructure
    // failure and is retried.
    let started = live.created_at.or(rec.attempts[idx].dispatched_at);
    if started.is_some_and(|t| cx.clock.now() - t > cx.config.run_timeout) {
        let proof = match cx.prove(rec, Scope::Run(live.id, title)).await? {
            Ok(p) => p,
            Err(p) => return Ok(p),
        };
        cx.intend(rec, Intent::CancelStuckRun(live.id)).await?;
        cx.forge.cancel_run(&proof, live.id).await?;
        // The cancel is accepted now and takes effect later; the
        // run counts once GitHub shows it completed.
        return Ok(Progress::Waiting(format!(
            "smoke run {} is being cancelled",
            live.id
        )));
    }
    if let Some(p) = cx.publish_live(rec, idx, live).await? {
        return Ok(p);
    }
    Ok(Progress::Waiting(format!(
        "smoke run {} is {}",
        live.id, live.status
    )))
}

/// A finished smoke run: its report published and the attempt recorded,
/// then what follows it.
async fn report_run(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
    idx: usize,
    live: &Run,
    title: &str,
) -> Result<Progress, EngineError> {
    let (status, infra) = classify(live);
    let (rows, evals, mut notes, _) = cx.collect(live.id).await?;
    if let Some(c) = &live.conclusion {
        notes.insert(0, format!("Run conclusion: {c}."));
    }
    let triaged = cx
        .triaged_jobs(
            rec,
            live,
            status,
            !infra && rec.repairs < cx.config.repair_budget,
        )
        .await?;
    notes.extend(triaged.unread_note());
    let failed_jobs = triaged.jobs;
    // A run GitHub calls failed whose jobs' logs name the runner or node
    // is the infrastructure's fault: retried by the one rule, unless a
    // known engine failure has a playbook fix (the retry would fail the
    // same way). The smoke workflow has no input to choose or avoid a
    // runner, so the retry lands wherever GitHub puts it.
    let infra = infra
        || (status == AttemptStatus::Failed
            && !triaged.repair_first
            && Engine::infra_by_triage(&failed_jobs));
    // Noise after the benchmark window is no failure of the measurement;
    // the final sweep's check-final still asks for every point.
    let status = if status == AttemptStatus::Failed && !infra && Engine::teardown_only(&failed_jobs)
    {
        notes.push(
            "Every failed job's log shows only teardown noise after the benchmark window: \
             not a failure."
                .to_owned(),
        );
        AttemptStatus::Passed
    } else {
        status
    };
    // Whatever the run concluded: a run of another container is no test
    // of the candidate, and running it again measures the same one.
    let measured = cx.measured_mismatch(rec, &rows);
    let (status, infra) = match &measured {
        Some(m) => {
            notes.extend(m.notes());
            (AttemptStatus::Failed, false)
        }
        None => (status, infra),
    };
    let frozen = cx.frozen(rec).await?;
    let kind = rec.attempts[idx].kind;
    let run = RunRef {
        id: live.id,
        attempt: live.attempt,
        url: live.html_url.clone(),
    };
    let repair = cx.repair_changes(rec, idx).await?;
    let shown = Shown {
        kind,
        status,
        infra,
        run: run.clone(),
        head: rec.attempts[idx].head.clone(),
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
    let rendered = render_report(&report).map_err(|e| EngineError::Invalid(e.to_string()))?;
    if let Some(p) = cx
        .publish(rec, &rendered, Scope::Run(live.id, title))
        .await?
    {
        return Ok(p);
    }
    let a = &mut rec.attempts[idx];
    a.run = Some(run);
    a.status = status;
    a.infra = infra;
    a.reported = true;
    if let Some(m) = &measured {
        end_measured(rec, Phase::Targeted, m);
        cx.save(rec).await?;
        return Ok(Progress::Advanced(Step::Finish));
    }
    cx.save(rec).await?;
    // What follows the report needs no new look at GitHub: deciding it
    // in a step of its own would only read the pull request again, in
    // full, since the report just changed it.
    after_attempt(cx, rec).await
}

pub(in crate::engine) async fn after_attempt(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
) -> Result<Progress, EngineError> {
    let Some(last) = rec.attempts.last().cloned() else {
        return Ok(Progress::Advanced(Step::Smoke));
    };
    if last.status == AttemptStatus::Passed {
        rec.step = Step::Final;
        cx.save(rec).await?;
        return Ok(Progress::Advanced(Step::Final));
    }
    if last.infra {
        return match infra_retry(&rec.attempts) {
            InfraRetry::Again(n) => {
                rec.attempts.push(AttemptRecord {
                    kind: AttemptKind::InfraRetry { n },
                    head: last.head.clone(),
                    dispatched_at: None,
                    run: None,
                    status: AttemptStatus::Queued,
                    infra: false,
                    reported: false,
                });
                cx.save(rec).await?;
                Ok(Progress::Advanced(Step::Smoke))
            }
            InfraRetry::GiveUp(n) => {
                let m = format!("the smoke run failed on infrastructure {n} times");
                cx.end(rec, Outcome::Failed, Phase::Targeted, m, false)
                    .await
            }
        };
    }
    // The playbook repairs without a hook: the repair step looks at it.
    let repairable = cx.repair.is_some() || cx.playbook(rec).await?.is_some();
    if repairable && rec.repairs < cx.config.repair_budget {
        rec.step = Step::Repair;
        cx.save(rec).await?;
        return Ok(Progress::Advanced(Step::Repair));
    }
    let m = if repairable {
        let tried = cx.tried_note(rec, &last.head).await?;
        format!(
            "the smoke still fails after {} repairs{tried}",
            cx.config.repair_budget
        )
    } else {
        "the smoke failed and no repair hook is configured".to_owned()
    };
    cx.end(rec, Outcome::Failed, Phase::Targeted, m, false)
        .await
}
