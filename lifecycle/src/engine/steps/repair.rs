//! Step 6 of 9, `Step::Repair`: repair a failed smoke or final sweep,
//! within the repair budget, first by the playbook (`playbook_repair`: the
//! next untried fix of the entries the failed jobs matched), else by the
//! repair hook, and take the answer: a repaired head (back to `smoke`),
//! variants to race (`experiment`), or giving up with everything tried.
//!
//! After a failed `smoke` or `sweep`. Reads the failed run's jobs and
//! report, the playbook at the base, the branch tip (a repair commit that
//! is not Klaud's or the hook's is a mismatch). May write: a playbook
//! repair's commit onto the branch (the commit and the push in one write),
//! under a proof; the hook pushes to the branch while the proof holds.

use crate::engine::config::TRAILER;
use crate::engine::context::Engine;
use crate::engine::context::Progress;
use crate::engine::error::EngineError;
use crate::engine::forge::Forge as _;
use crate::engine::intent::Intent;
use crate::engine::journal::{AttemptRecord, CandidateRecord, Step};
use crate::engine::ownership::{Mismatch, MismatchKind};
use crate::engine::playbook_repair::{PlaybookRepair, tried_sentence};
use crate::engine::proof::Scope;
use crate::engine::repair_hook::{RepairContext, RepairOutcome};
use crate::model::{AttemptKind, AttemptStatus, Outcome, Phase, RunRef};
use crate::report::{FailedJob, MarkerKey, ReportName, find_records, parse_report};
use klaud_claims::CommitSha;
use serde_json::Value;

pub(in crate::engine) async fn run(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
) -> Result<Progress, EngineError> {
    let last = rec.attempts.last().cloned();
    // A repair follows a failed smoke or a failed final sweep; its end
    // is reported in the phase that failed.
    let phase = last.as_ref().map_or(Phase::Targeted, |a| a.kind.phase());
    // The hook answered this repair with variants (the claim lists
    // them): their race decides, the hook is not asked again.
    if let Some(p) = cx.proposal_wait(rec, rec.repairs + 1, phase).await? {
        return Ok(p);
    }
    let n = rec.repairs + 1;
    let intent = Intent::Repair(n);
    let old_head = Engine::head(rec)?;
    // Only a repair resumed after its intent was recorded can have pushed
    // already; otherwise the tip is not read here (a push by someone else
    // meanwhile refuses Klaud's fast-forward, and the new head is checked
    // commit by commit below).
    let already = rec.intent.as_ref() == Some(&intent)
        && cx
            .branch_tip(&rec.branch)
            .await?
            .is_some_and(|t| t.sha != old_head);
    let mut pushed = false;
    let mut own = None;
    let mut tried = None;
    if !already {
        // The playbook first: a known failure's fix costs no agent.
        let report = match last.as_ref().and_then(|a| a.run.as_ref()) {
            Some(run) => published_report(cx, rec, run).await?,
            None => Value::Null,
        };
        let jobs: Vec<FailedJob> = report
            .get("failed_jobs")
            .and_then(|j| serde_json::from_value(j.clone()).ok())
            .unwrap_or_default();
        match cx.playbook_repair(rec, &jobs, n, &old_head).await? {
            PlaybookRepair::Pushed(sha) => {
                pushed = true;
                own = sha;
            }
            PlaybookRepair::Stop(p) => return Ok(p),
            PlaybookRepair::Nothing { tried: t, skipped } => {
                tried = tried_sentence(&t, &skipped);
            }
        }
    }
    if pushed || already {
        return take_new_head(cx, rec, n, phase, &old_head, own.as_ref()).await;
    }
    let Some(hook) = cx.repair else {
        let m = match tried {
            Some(t) => format!(
                "the {} still fails: {t}; no repair hook is configured",
                phase_word(phase)
            ),
            None => format!(
                "the {} failed and no repair hook is configured",
                phase_word(phase)
            ),
        };
        return cx.end(rec, Outcome::Failed, phase, m, false).await;
    };
    let tried = tried.map(|t| format!(" ({t})")).unwrap_or_default();
    if let Err(p) = cx.prove(rec, Scope::Pull).await? {
        return Ok(p);
    }
    let context = repair_context(cx, rec, last.as_ref(), n, phase, &old_head).await?;
    cx.intend(rec, intent).await?;
    let outcome = hook.repair(&context).await;
    // The hook pushed (or may have): nothing read before it holds.
    cx.forge.forget();
    match outcome {
        Ok(RepairOutcome::Pushed) => {}
        Ok(RepairOutcome::Variants(requests)) => {
            return cx.propose_variants(rec, &context, phase, &requests).await;
        }
        Ok(RepairOutcome::GaveUp(why)) => {
            let m = format!("the repair hook gave up on repair {n}: {why}{tried}");
            return cx.end(rec, Outcome::Failed, phase, m, false).await;
        }
        Err(e) => {
            let m = format!("the repair hook failed on repair {n}: {e}{tried}");
            return cx.end(rec, Outcome::Failed, phase, m, false).await;
        }
    }
    take_new_head(cx, rec, n, phase, &old_head, None).await
}

/// How an ending names the run that failed.
fn phase_word(phase: Phase) -> &'static str {
    if phase == Phase::FinalSweep {
        "final sweep"
    } else {
        "smoke"
    }
}

/// What the repair hook is told about repair `n` of the failed attempt
/// `last`: the failed run, its jobs, artifacts and published report.
async fn repair_context(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
    last: Option<&AttemptRecord>,
    n: u32,
    phase: Phase,
    old_head: &CommitSha,
) -> Result<RepairContext, EngineError> {
    let failed_run = last.and_then(|a| a.run.clone());
    let (failed_jobs, artifacts, report) = match &failed_run {
        Some(run) => (
            cx.failed_jobs(run.id, AttemptStatus::Failed).await?,
            cx.forge
                .list_artifacts(run.id)
                .await?
                .into_iter()
                .map(|a| a.name)
                .collect(),
            published_report(cx, rec, run).await?,
        ),
        None => (Vec::new(), Vec::new(), Value::Null),
    };
    Ok(RepairContext {
        version: crate::engine::repair_hook::REPAIR_INPUT_VERSION,
        candidate: rec.candidate.clone(),
        family: rec.family.clone(),
        key: rec.key.clone(),
        image: rec.image.clone(),
        repository: cx.forge.repo(),
        branch: rec.branch.clone(),
        head: old_head.clone(),
        pull_request: rec.pull,
        run: failed_run,
        repair: n,
        budget: cx.config.repair_budget,
        budget_left: cx.config.repair_budget.saturating_sub(n),
        phase,
        report,
        author: cx.forge.bot_login(),
        trailer: format!("{TRAILER}{}", rec.candidate),
        failed_jobs,
        artifacts,
    })
}

/// After the hook: the branch's new head, checked to be the hook's own
/// commits, becomes the next smoke attempt (or, after a failed sweep, the
/// next final sweep). `own`: the playbook repair commit Klaud made on
/// `old_head` and pushed in this step.
async fn take_new_head(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
    n: u32,
    phase: Phase,
    old_head: &str,
    own: Option<&CommitSha>,
) -> Result<Progress, EngineError> {
    let Some(tip) = cx.branch_tip(&rec.branch).await? else {
        let m = Mismatch {
            kind: MismatchKind::Unexpected,
            what: format!("branch {} after repair {n}", rec.branch),
            expected: "a new head".into(),
            found: "no branch".into(),
        };
        return cx.on_mismatch(rec, m).await;
    };
    if tip.sha == old_head {
        let m = format!("the repair hook pushed nothing for repair {n}");
        return cx.end(rec, Outcome::Failed, phase, m, false).await;
    }
    // Which commits are the hook's is read from GitHub (the compare
    // from the recorded head to the tip), never remembered: after a
    // crash the same commits give the same answer. A tip that is the
    // commit Klaud just made on the old head has nothing else to check.
    let foreign = if own.is_some_and(|sha| *sha == tip.sha) {
        None
    } else {
        foreign_repair_commit(cx, rec, old_head, &tip.sha, n).await?
    };
    if let Some(m) = foreign {
        let progress = cx.on_mismatch(rec, m).await?;
        // The repair step reads as targeted; a sweep's repair was not.
        if let Some(e) = rec.ending.as_mut()
            && e.phase == Phase::Targeted
            && phase == Phase::FinalSweep
        {
            e.phase = phase;
            cx.save(rec).await?;
        }
        return Ok(progress);
    }
    rec.head = Some(tip.sha.clone());
    rec.repairs = n;
    if phase == Phase::FinalSweep {
        // The new head needs its own final sweep (configs/README.md#how-it-works: on the
        // exact head). The push itself starts it (`synchronize`); the
        // final step re-checks the changelog entry and the label.
        rec.sweep = None;
        rec.sweep_requested_at = Some(cx.clock.now());
        rec.step = Step::Final;
        cx.save(rec).await?;
        return Ok(Progress::Advanced(Step::Final));
    }
    rec.attempts.push(AttemptRecord {
        kind: AttemptKind::Repair {
            n,
            budget: cx.config.repair_budget,
        },
        head: tip.sha.to_string(),
        dispatched_at: None,
        run: None,
        status: AttemptStatus::Queued,
        infra: false,
        reported: false,
    });
    rec.step = Step::Smoke;
    cx.save(rec).await?;
    Ok(Progress::Advanced(Step::Smoke))
}

/// The first commit between `old` and `new` that is not the repair
/// hook's (authored by the bot and carrying this candidate's trailer),
/// as a handoff; `None` when every one is.
pub(in crate::engine) async fn foreign_repair_commit(
    cx: &Engine<'_>,
    rec: &CandidateRecord,
    old: &str,
    new: &str,
    n: u32,
) -> Result<Option<Mismatch>, EngineError> {
    let what = format!("head of {} after repair {n}", rec.branch);
    let cmp = cx.forge.compare_commits(old, new).await?;
    if cmp.status != crate::engine::CompareStatus::Ahead {
        return Ok(Some(Mismatch {
            kind: MismatchKind::Handoff,
            what,
            expected: format!("commits on top of {old}"),
            found: format!("{new}, {} from {old}", cmp.status),
        }));
    }
    if cmp.total_commits as usize > cmp.commits.len() {
        // GitHub lists at most 250 commits: the rest cannot be checked.
        return Ok(Some(Mismatch {
            kind: MismatchKind::Handoff,
            what,
            expected: "commits Klaud can check one by one".into(),
            found: format!(
                "{} commits, {} listed",
                cmp.total_commits,
                cmp.commits.len()
            ),
        }));
    }
    let trailer = format!("{TRAILER}{}", rec.candidate);
    for c in &cmp.commits {
        let by_bot = cx.by_bot(c.author.as_deref());
        let marked = c.message.lines().any(|l| l.trim() == trailer);
        if !by_bot || !marked {
            return Ok(Some(Mismatch {
                kind: MismatchKind::Handoff,
                what,
                expected: format!("commits by {} carrying \"{trailer}\"", cx.forge.bot_login()),
                found: format!(
                    "{} by {}{}",
                    c.sha,
                    c.author.as_deref().unwrap_or("no GitHub account"),
                    if marked { "" } else { " without the trailer" }
                ),
            }));
        }
    }
    Ok(None)
}

/// The typed report record of `run` as published on the PR (JSON), or
/// `null` when it is not there or does not parse.
pub(in crate::engine) async fn published_report(
    cx: &Engine<'_>,
    rec: &CandidateRecord,
    run: &RunRef,
) -> Result<Value, EngineError> {
    let Some(number) = rec.pull else {
        return Ok(Value::Null);
    };
    let comments = cx.comments_with_reports(rec, number).await?;
    let found = comments
        .iter()
        .filter(|c| cx.by_bot(c.author.as_deref()))
        .flat_map(|c| find_records(&c.body).unwrap_or_default())
        .filter(|f| {
            matches!(&f.key, MarkerKey::Report {
                owner_run, candidate, name: ReportName::Run { id, attempt }, part,
            } if *owner_run == rec.owner_run
                && candidate.as_str() == rec.candidate
                && *id == run.id
                && *attempt == run.attempt
                && part.is_none_or(|p| p == 1))
        })
        .find_map(|f| parse_report(&f).ok());
    Ok(found
        .and_then(|r| serde_json::to_value(r).ok())
        .unwrap_or(Value::Null))
}
