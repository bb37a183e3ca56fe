//! Step 9 of 9, `Step::Finish`: the end: a validated pull request is made
//! ready for review (and reuse of the validated run authorised), any other
//! end is cleaned up (cleanup marker, labels, draft, close, cancelled runs,
//! the branch if unchanged); then the receipt (a validated one with the
//! final sweep's report in the same comment, `report::fold_receipt`), and
//! the claim released.
//!
//! Last; every step that ends the candidate (`Engine::end`) comes here.
//! A regression hunt that is due runs here first, one step per call,
//! while the PR is open and the claim held (`engine::hunt`).
//! Reads the pull request, its comments and runs. May write: the receipt,
//! the cleanup, the reuse request, the claim's release; a person's own
//! changes are never touched.

use crate::engine::config::{is_smoke_title, smoke_test_name};
use crate::engine::context::Engine;
use crate::engine::context::Progress;
use crate::engine::error::EngineError;
use crate::engine::forge::{AuthorAssociation, Forge as _, ForgeError, RunEvent};
use crate::engine::intent::Intent;
use crate::engine::journal::{CandidateRecord, Ending, ReuseAuthorization, Step};
use crate::engine::ownership::reply_permit;
use crate::engine::promise::reuse_line_run;
use crate::engine::promise::{Standing, standing};
use crate::engine::proof::Scope;
use crate::engine::write::Writes as _;
use crate::model::{FinishedResult, Outcome, Phase};
use crate::report::{
    MarkerKey, Receipt, RenderedComment, find_record, find_records, fold_receipt, parse_report,
    render_cleanup, render_receipt, render_report,
};
use crate::workflow_contract::is_sweep_of;
use klaud_claims::PullNumber;

pub(in crate::engine) async fn run(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
) -> Result<Progress, EngineError> {
    let ending = rec.ending.clone().unwrap_or_else(|| Ending {
        outcome: Outcome::UnexpectedError,
        phase: Phase::Unknown,
        message: "finished without a recorded ending".into(),
        hands_off: false,
        note: None,
        declined: None,
    });
    // A person's hands-off end (an operator's `klaud candidate handoff`,
    // a maintainer's `/klaud stop`) still gets its receipt, so the PR
    // says who ended it and why and an instance without a journal reads
    // the end from GitHub; only the cleanup is skipped. An ownership
    // mismatch without a note (the PR's author or repository changed)
    // posts nothing: the PR is not Klaud's any more.
    let receipt_only = ending.hands_off && ending.note.is_some();
    // A regression hunt runs here, before the cleanup closes the PR and
    // the release frees the claim; it leaves the ending as it is.
    // A hunt that cannot go on (a record or workflow that does not read)
    // is left where it is: it must not turn the candidate's own end into
    // an error. A forge error is retried like any other.
    match cx.hunt_before_finish(rec).await {
        Ok(Some(p)) => return report_alone_then(cx, rec, &ending, p).await,
        Ok(None) => {}
        Err(EngineError::Invalid(why)) => {
            tracing::warn!(candidate = %rec.candidate, "regression hunt left unfinished: {why}");
        }
        Err(e) => return Err(e),
    }
    cx.experiment_finish(rec).await?;
    if let Some(p) = cx.final_experiment_section(rec).await? {
        return report_alone_then(cx, rec, &ending, p).await;
    }
    if (!ending.hands_off || receipt_only)
        && let Some(number) = rec.pull
    {
        let cid = Engine::candidate_id(rec)?;
        let comments = own_markers(cx, rec, number).await?;
        let has = |key: &MarkerKey| {
            comments.iter().any(|c| {
                cx.by_bot(c.author.as_deref())
                    && find_record(&c.body)
                        .ok()
                        .flatten()
                        .is_some_and(|f| &f.key == key)
            })
        };
        let receipt_key = MarkerKey::Outcome {
            owner_run: rec.owner_run,
            candidate: cid.clone(),
        };
        // A sweep a `/klaud retry` ran again ends by replacing the first
        // receipt, which names the head before the person's push.
        let superseded = cx.superseded_receipt(rec, &comments, &receipt_key);
        if !has(&receipt_key) || superseded.is_some() {
            let progress = if receipt_only {
                None
            } else if !cx.forge.get_pull(number).await?.state.is_open() {
                // Not Klaud's to change any more: only its own runs stop.
                cancel_runs(cx, rec, number).await?
            } else if ending.outcome == Outcome::Validated {
                finish_validated(cx, rec, number).await?
            } else if superseded.is_some() {
                // A sweep `/klaud retry` ran again after a person pushed:
                // the branch carries their commits, so a failure is told
                // in the receipt and the PR left open for them.
                None
            } else {
                let cleanup_key = MarkerKey::Cleanup {
                    owner_run: rec.owner_run,
                    candidate: cid.clone(),
                };
                cleanup(cx, rec, number, !has(&cleanup_key)).await?
            };
            if let Some(p) = progress {
                return Ok(p);
            }
            let found = Found {
                comments: &comments,
                superseded,
            };
            return receipt(cx, rec, &ending, number, cid, receipt_only, found).await;
        }
    }
    already_received(cx, rec, &ending).await
}

/// The end when the receipt is on the PR already (the report kept for it
/// went out in the same comment, found there by its marker, or goes out
/// alone now) or none is posted (a person's end posts nothing more).
async fn already_received(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
    ending: &Ending,
) -> Result<Progress, EngineError> {
    if !ending.hands_off
        && let Some(p) = cx.post_final_report(rec).await?
    {
        return Ok(p);
    }
    done(cx, rec).await
}

/// `progress` of a finish that goes on before its receipt (a regression
/// hunt, an experiment's section), after the report kept for the receipt
/// is posted alone, so the PR shows the sweep while that runs. A person's
/// end posts nothing more.
async fn report_alone_then(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
    ending: &Ending,
    progress: Progress,
) -> Result<Progress, EngineError> {
    if ending.hands_off {
        return Ok(progress);
    }
    Ok(cx.post_final_report(rec).await?.unwrap_or(progress))
}

/// What the finish found on the PR before its receipt: the comments with
/// Klaud's markers, and the receipt comment a sweep run again replaces.
struct Found<'a> {
    comments: &'a [crate::engine::forge::Comment],
    superseded: Option<u64>,
}

/// The receipt comment with the report kept for it
/// (`CandidateRecord::final_report`) folded in, and that report's key,
/// when the report is not on the PR yet (a live report of its run aside)
/// and the two make one comment with no line the reuse gate reads; `None`
/// when the receipt goes alone.
fn with_final_report(
    rec: &CandidateRecord,
    comments: &[crate::engine::forge::Comment],
    receipt: &RenderedComment,
) -> Option<(RenderedComment, MarkerKey)> {
    let parts = render_report(&Engine::kept_report(rec)?).ok()?;
    let [rendered] = parts.as_slice() else {
        return None;
    };
    let posted = comments.iter().any(|c| {
        find_records(&c.body).is_ok_and(|found| {
            found
                .iter()
                .any(|f| f.key == rendered.key && parse_report(f).is_ok_and(|r| !r.is_live()))
        })
    });
    fold_receipt(receipt, rendered)
        .filter(|folded| !posted && reuse_line_run(&folded.body).is_none())
        .map(|folded| (folded, rendered.key.clone()))
}

/// Writes the receipt `rendered` (with the final report folded in) into
/// comment `id`, the live report of the run the report is of, instead of
/// a new comment: the live report is replaced by the final one anyway.
async fn receipt_into_live(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
    number: PullNumber,
    id: u64,
    rendered: &RenderedComment,
) -> Result<Option<Progress>, EngineError> {
    let proof = match cx.prove(rec, Scope::PullOnly).await? {
        Ok(p) => p,
        Err(p) => return Ok(Some(p)),
    };
    cx.intend(rec, Intent::Comment(rendered.key.to_string()))
        .await?;
    if cx
        .edit_own_comment(rec, &proof, number, id, &rendered.body)
        .await?
    {
        return Ok(None);
    }
    // A person deleted the live report: the next look lists the comments
    // and posts the receipt anew.
    Ok(Some(Progress::Waiting(
        "the live report comment is gone; posting the receipt anew".into(),
    )))
}

/// The body replacing receipt comment `id`: the new `receipt`, keeping
/// the report folded into the comment it replaces (that sweep's report
/// stays on the PR; the new sweep's went out alone).
fn replacing(
    comments: &[crate::engine::forge::Comment],
    id: u64,
    receipt: RenderedComment,
) -> RenderedComment {
    let kept = comments
        .iter()
        .find(|c| c.id == id)
        .and_then(|c| find_records(&c.body).ok())
        .and_then(|found| found.get(1).and_then(|f| parse_report(f).ok()))
        .and_then(|report| render_report(&report).ok())
        .and_then(|parts| match parts.as_slice() {
            [one] => fold_receipt(&receipt, one),
            _ => None,
        });
    kept.unwrap_or(receipt)
}

/// The comments the finish finds Klaud's own markers in (its receipt,
/// cleanup marker and hunt records): the record's copy of its own comments
/// while that is trusted, else a listing (which the copy is then renewed
/// from). Every comment carrying those markers is posted through that copy
/// after its intent is saved, so a crash between the intent and the answer
/// leaves the copy untrusted and the next look lists the comments: the
/// receipt is neither posted twice nor lost. A record rebuilt after a lost
/// store has no copy and lists. Others' comments in Klaud's name are not in
/// the copy, so these list too: a hands-off end (another instance, or a
/// forced `klaud claims release`, may have posted the receipt, and the
/// reply that receipt would be needs no proof that could notice), and a
/// sweep run again by `/klaud retry` (told by the marker in the command's
/// reply).
pub(in crate::engine) async fn own_markers(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
    number: PullNumber,
) -> Result<Vec<crate::engine::forge::Comment>, EngineError> {
    if rec.swept_again || rec.ending.as_ref().is_some_and(|e| e.hands_off) {
        return Ok(cx.forge.list_comments(number).await?);
    }
    cx.report_comments(rec, number).await
}

/// The claim released (by the last sibling of an experiment) and the
/// record done.
async fn done(cx: &Engine<'_>, rec: &mut CandidateRecord) -> Result<Progress, EngineError> {
    if cx.experiment_releases(rec).await? {
        release(cx, rec).await?;
    } else {
        // A sibling still runs under the shared claim; the last
        // sibling to finish releases it.
        rec.claim = None;
    }
    rec.step = Step::Done;
    rec.intent = None;
    // Posted by now (with the receipt or alone), or not Klaud's to post.
    rec.final_report = None;
    cx.save(rec).await?;
    Ok(Progress::Done(rec.ending.clone()))
}

/// The receipt of `ending` on pull request `number` (a reply when a
/// person ended it, `receipt_only`), then done.
/// The result lines of the candidate's last ended hunt on PR `number`,
/// English and Chinese (empty when none ended; a hunt's records that do not
/// read are left out of the receipt rather than stopping it).
async fn hunt_lines(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
    number: PullNumber,
) -> Result<(Vec<String>, Vec<String>), EngineError> {
    let cid = Engine::candidate_id(rec)?;
    let comments = own_markers(cx, rec, number).await?;
    let ours = comments
        .iter()
        .filter(|c| cx.by_bot(c.author.as_deref()))
        .map(|c| c.body.as_str());
    Ok(match crate::hunt::Hunt::from_comments(&cid, ours) {
        Ok(Some(crate::hunt::Rebuilt {
            hunt,
            ended: Some(result),
            ..
        })) => crate::hunt::result_lines(hunt.plan(), &result)
            .into_iter()
            .map(|l| (l.en.into_owned(), l.zh.into_owned()))
            .unzip(),
        _ => Default::default(),
    })
}

/// Whether `ending`'s decline is one variant's that waits for a sibling
/// of the same image still running or validated (`Declined::stands`),
/// by the siblings' journal records.
async fn declined_waits(
    cx: &Engine<'_>,
    rec: &CandidateRecord,
    ending: &Ending,
) -> Result<bool, EngineError> {
    let (Some(d), Some(info)) = (&ending.declined, &rec.variant) else {
        return Ok(false);
    };
    let siblings: Vec<CandidateRecord> = cx
        .sibling_records(info)
        .await?
        .into_iter()
        .filter_map(|(_, r)| r)
        .collect();
    Ok(!d.stands(rec, &siblings))
}

async fn receipt(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
    ending: &Ending,
    number: PullNumber,
    cid: klaud_claims::CandidateId,
    receipt_only: bool,
    found: Found<'_>,
) -> Result<Progress, EngineError> {
    let runs = rec.runs();
    let result = match FinishedResult::new(
        ending.outcome,
        ending.phase,
        rec.pull,
        runs.clone(),
        rec.repairs,
    ) {
        Ok(r) => r,
        Err(e) => FinishedResult::new(
            Outcome::UnexpectedError,
            ending.phase,
            rec.pull,
            runs,
            rec.repairs,
        )
        .map_err(|_| EngineError::Invalid(e.to_string()))?,
    };
    let receipt = Receipt {
        owner_run: rec.owner_run,
        candidate: cid,
        head: rec.head.clone(),
        result,
        sweep: rec.sweep.clone(),
        note: ending.note.clone(),
        // The audit's note has its Chinese twin in the record.
        note_zh: match &ending.declined {
            Some(d) => Some(format!("#{} 已被 @{} 关闭，未合并", d.pull, d.by)),
            None => rec
                .upstream
                .as_ref()
                .and_then(crate::report::audit_note)
                .filter(|note| ending.note.as_deref() == Some(&*note.en))
                .map(|note| note.zh.into_owned())
                .or_else(|| {
                    let note = ending.note.as_deref()?;
                    crate::measured::note_words(note).map(|w| w.zh.into_owned())
                }),
        },
        declined: ending.declined.clone(),
        declined_waits: declined_waits(cx, rec, ending).await?,
        dashboard: cx.config.dashboard_issue.and_then(|n| {
            let url = rec.pull_url.as_deref()?;
            let (repo, _) = url.rsplit_once("/pull/")?;
            Some((n, format!("{repo}/issues/{n}")))
        }),
        hunt: hunt_lines(cx, rec, number).await?,
        // A proposal is advice: a read it needs that fails (a commit of
        // the failed head force-pushed away, an outage) leaves it out
        // rather than holding the receipt, which ends the lifecycle.
        learned: match ending.outcome {
            Outcome::Validated => cx.learned_entry(rec).await.unwrap_or_else(|e| {
                tracing::warn!(candidate = %rec.candidate, error = %e, "no playbook entry proposed: a read it needs failed");
                None
            }),
            _ => None,
        },
    };
    rec.learned = receipt.learned.clone();
    // Kept for `klaud status` and the dashboards, saved with the end.
    rec.hunt = crate::engine::journal::HuntLines {
        en: receipt.hunt.0.clone(),
        zh: receipt.hunt.1.clone(),
    };
    let rendered = render_receipt(&receipt);
    if let Some(p) = post_receipt(cx, rec, number, rendered, receipt_only, found).await? {
        return Ok(p);
    }
    done(cx, rec).await
}

/// Posts the receipt `rendered`: a reply when a person ended the
/// candidate (`receipt_only`), an edit of the receipt a sweep run again
/// replaces, else a comment, with the final report folded in where it can
/// be. `Some` when the finish waits (or the ownership check refused).
async fn post_receipt(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
    number: PullNumber,
    rendered: RenderedComment,
    receipt_only: bool,
    found: Found<'_>,
) -> Result<Option<Progress>, EngineError> {
    if receipt_only {
        // Only folded in: alone it would need a proof the PR may not pass.
        let rendered = with_final_report(rec, found.comments, &rendered)
            .map_or(rendered, |(folded, _)| folded);
        // A person's end: the PR may not be Klaud's any more (a
        // handoff label, a foreign commit, its branch deleted),
        // so the receipt is a reply, the one comment Klaud may
        // post on a PR it let go of; none on another's PR.
        let known = cx.known_author(rec, number);
        if let Some(permit) = reply_permit(&cx.forge, number, known.as_deref()).await? {
            cx.intend(rec, Intent::Comment(rendered.key.to_string()))
                .await?;
            cx.forge.reply(&permit, &rendered.body).await?;
        }
    } else if let Some(id) = found.superseded {
        if let Some(p) = cx.post_final_report(rec).await? {
            return Ok(Some(p));
        }
        let rendered = replacing(found.comments, id, rendered);
        let proof = match cx.prove(rec, Scope::PullOnly).await? {
            Ok(p) => p,
            Err(p) => return Ok(Some(p)),
        };
        cx.intend(rec, Intent::Comment(rendered.key.to_string()))
            .await?;
        cx.forge
            .update_comment(&proof, number, id, &rendered.body)
            .await?;
    } else {
        let rendered = match with_final_report(rec, found.comments, &rendered) {
            Some((folded, report)) => match cx.live_comment(found.comments, &report) {
                Some((live, _)) => {
                    return receipt_into_live(cx, rec, number, live.id, &folded).await;
                }
                None => folded,
            },
            // A report that cannot go with the receipt goes first, alone,
            // as it did before the receipt existed.
            None => match cx.post_final_report(rec).await? {
                Some(p) => return Ok(Some(p)),
                None => rendered,
            },
        };
        if let Some(p) = cx
            .publish(rec, std::slice::from_ref(&rendered), Scope::PullOnly)
            .await?
        {
            return Ok(Some(p));
        }
    }
    Ok(None)
}

pub(in crate::engine) async fn finish_validated(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
    number: PullNumber,
) -> Result<Option<Progress>, EngineError> {
    let pull = cx.forge.get_pull(number).await?;
    if pull.draft {
        let proof = match cx.prove(rec, Scope::Pull).await? {
            Ok(p) => p,
            Err(p) => return Ok(Some(p)),
        };
        cx.intend(rec, Intent::MarkReady).await?;
        cx.forge.set_draft(&proof, &pull, false).await?;
    }
    if cx.config.authorize_reuse
        && let Some(sweep) = rec.sweep.clone()
        && let Some(p) = authorize_reuse(cx, rec, number, sweep.run_id).await?
    {
        return Ok(Some(p));
    }
    Ok(None)
}

/// Authorizes reuse of the validated run `run` at merge, in the form
/// every version of the repository's reuse gate accepts: a whole-line
/// `/reuse-sweep-run <run>` from an OWNER, MEMBER or COLLABORATOR
/// (`utils/find_reusable_sweep_run.py`), unless the line the gate goes by
/// already pins that run. Also each pass over a validated PR (upkeep), so
/// a line deleted or outdone by a bare one is posted again. Klaud posts it itself only when
/// GitHub gives its own comments such an association (an App's may
/// carry another); otherwise it asks a maintainer for exactly that line.
pub(in crate::engine) async fn authorize_reuse(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
    number: PullNumber,
    run: u64,
) -> Result<Option<Progress>, EngineError> {
    let comments = cx.forge.list_comments(number).await?;
    // Only the line the gate goes by counts, and only when it pins this
    // run: a bare line lets the gate pick a run itself, and anyone GitHub
    // calls a collaborator may have written it (or may delete it).
    match standing(&comments, run, |c| cx.by_bot(c.author.as_deref())) {
        Standing::Pinned => {
            let upkeep = rec.upkeep.get_or_insert_with(Default::default);
            if upkeep.reuse.is_none() {
                upkeep.reuse = Some(ReuseAuthorization::Klaud { run });
            }
            return Ok(None);
        }
        // A person pinned another run after Klaud's: their decision.
        Standing::PersonPinnedOther(other) => {
            tracing::info!(candidate = %rec.candidate, run, other, "a person pinned another run for reuse; Klaud leaves it");
            return Ok(None);
        }
        Standing::Missing => {}
    }
    // The association GitHub gives Klaud's own comments, read from the
    // newest one (the baseline and attempt reports came before).
    let association = comments
        .iter()
        .rev()
        .find(|c| cx.by_bot(c.author.as_deref()))
        .and_then(|c| c.author_association.clone());
    let accepted = association
        .as_ref()
        .is_some_and(AuthorAssociation::reuse_gate_accepts);
    let cid = Engine::candidate_id(rec)?;
    let marker = format!("<!-- klaud-reuse-request:{cid} -->");
    let (body, intent, reuse) = if accepted {
        (
            format!("/reuse-sweep-run {run}"),
            Intent::PostUse,
            ReuseAuthorization::Klaud { run },
        )
    } else {
        let association = association.map_or_else(|| "unknown".to_owned(), |a| a.to_string());
        if comments
            .iter()
            .any(|c| cx.by_bot(c.author.as_deref()) && c.body.contains(&marker))
        {
            rec.upkeep.get_or_insert_with(Default::default).reuse =
                Some(ReuseAuthorization::Maintainer { run, association });
            return Ok(None);
        }
        (
            reuse_request(&marker, run, &association),
            Intent::AskReuse,
            ReuseAuthorization::Maintainer { run, association },
        )
    };
    let proof = match cx.prove(rec, Scope::Pull).await? {
        Ok(p) => p,
        Err(p) => return Ok(Some(p)),
    };
    cx.intend(rec, intent).await?;
    cx.forge.create_comment(&proof, number, &body).await?;
    rec.upkeep.get_or_insert_with(Default::default).reuse = Some(reuse);
    cx.save(rec).await?;
    Ok(None)
}

pub(in crate::engine) async fn cleanup(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
    number: PullNumber,
    marker_missing: bool,
) -> Result<Option<Progress>, EngineError> {
    let proof = match cx.prove(rec, Scope::PullOnly).await? {
        Ok(p) => p,
        Err(p) => return Ok(Some(p)),
    };
    if marker_missing {
        let cid = Engine::candidate_id(rec)?;
        let marker = render_cleanup(rec.owner_run, &cid);
        cx.intend(rec, Intent::PostCleanupMarker).await?;
        let written = cx
            .forge
            .create_comment(&proof, number, &marker.body)
            .await?;
        Engine::remember_comment(rec, written);
    }
    if let Some(p) = cancel_runs(cx, rec, number).await? {
        return Ok(Some(p));
    }
    let pull = cx.forge.get_pull(number).await?;
    for l in pull
        .labels
        .iter()
        .filter(|l| cx.config.managed_labels.iter().any(|m| m == *l))
    {
        cx.intend(rec, Intent::RemoveLabel(l.clone())).await?;
        cx.forge.remove_label(&proof, number, l).await?;
    }
    if pull.state.is_open() && !pull.draft {
        cx.intend(rec, Intent::ConvertToDraft).await?;
        cx.forge.set_draft(&proof, &pull, true).await?;
    }
    if pull.state.is_open() {
        cx.intend(rec, Intent::ClosePull).await?;
        cx.forge.close_pull(&proof, number).await?;
    }
    delete_branch_if_unchanged(cx, rec).await
}

/// Cancels Klaud's own runs of `rec` that are still going (by the
/// smoke title, or as this PR's sweep on its head).
pub(in crate::engine) async fn cancel_runs(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
    number: PullNumber,
) -> Result<Option<Progress>, EngineError> {
    let head = rec.head.as_deref().unwrap_or_default();
    let smoke_title = match cx.smoke_plan(rec, head).await? {
        Ok(plan) => plan.title,
        Err(_) => format!(
            "e2e Test - {}",
            smoke_test_name(rec.owner_run, rec.candidate.as_str())
        ),
    };
    let pull = cx.forge.get_pull(number).await?;
    let sweep_title = cx.sweep_title(rec, &pull).await?;
    let repo = cx.forge.repo();
    let runs: Vec<(crate::model::RunRef, String)> = rec
        .attempts
        .iter()
        .filter_map(|a| {
            let h = if a.head.is_empty() { head } else { &a.head };
            a.run.clone().map(|r| (r, h.to_owned()))
        })
        .collect();
    for (run, run_head) in runs {
        // A run deleted on GitHub runs nothing and has nothing to
        // cancel; reading it again would only stall the cleanup of
        // a PR that is still there.
        let live = match cx.forge.get_run(run.id).await {
            Err(ForgeError::NotFound(_)) => continue,
            other => other?,
        };
        if live.is_completed() {
            continue;
        }
        let title = if live.event == RunEvent::WorkflowDispatch {
            // Each attempt's run has its own title; the proof re-reads it.
            if is_smoke_title(&live.title, rec.owner_run, rec.candidate.as_str()) {
                live.title.clone()
            } else {
                smoke_title.clone()
            }
        } else if is_sweep_of(&live, number, &run_head, &repo, sweep_title.as_deref()) {
            // Identified by pull request and head; its own title is
            // what the ownership check re-reads.
            live.title.clone()
        } else {
            // Not recognisably this PR's sweep: leave it alone.
            continue;
        };
        let proof = match cx.prove(rec, Scope::Run(run.id, &title)).await? {
            Ok(p) => p,
            Err(p) => return Ok(Some(p)),
        };
        cx.intend(rec, Intent::CancelRun(run.id)).await?;
        // GitHub accepts (202) and ends the run a little later; the
        // receipt does not wait for it, since release and recovery
        // finish a candidate in one pass.
        cx.forge.cancel_run(&proof, run.id).await?;
        // Its live report said "running": it now says why it stopped,
        // on a PR Klaud still owns (a closed or merged one is left alone).
        if !pull.state.is_open() {
            continue;
        }
        if let Some(p) = cx.end_live_report(rec, &live).await? {
            return Ok(Some(p));
        }
    }
    Ok(None)
}

pub(in crate::engine) async fn delete_branch_if_unchanged(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
) -> Result<Option<Progress>, EngineError> {
    let Some(head) = rec.head.clone() else {
        return Ok(None);
    };
    match cx.branch_tip(&rec.branch).await? {
        Some(tip) if tip.sha == head => {
            let proof = match cx.prove(rec, Scope::Branch).await? {
                Ok(p) => p,
                Err(p) => return Ok(Some(p)),
            };
            cx.intend(rec, Intent::DeleteBranch).await?;
            match cx.forge.delete_branch(&proof, &rec.branch).await {
                Ok(()) | Err(ForgeError::NotFound(_)) => Ok(None),
                Err(e) => Err(e.into()),
            }
        }
        // Gone already, or someone pushed: their branch now.
        _ => Ok(None),
    }
}

pub(in crate::engine) async fn release(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
) -> Result<(), EngineError> {
    let book = cx.book();
    let claim_err = EngineError::ClaimOp;
    let held = match &rec.claim {
        Some(stored) => Some(stored.held()?),
        None => {
            let family = Engine::candidate_id(rec)?.family();
            match book.inspect(&family).await.map_err(claim_err)? {
                Some(entry) => book
                    .adopt(&entry)
                    .filter(|h| h.record.candidate_ids().contains(&rec.candidate.as_str())),
                None => None,
            }
        }
    };
    let Some(held) = held else { return Ok(()) };
    cx.intend(rec, Intent::ReleaseClaim).await?;
    match book.release(&held).await {
        Ok(_) => {
            rec.claim = None;
            Ok(())
        }
        // Not ours any more: nothing of ours to release.
        Err(klaud_claims::ClaimError::NotOwner { .. }) => {
            rec.claim = None;
            Ok(())
        }
        Err(e) => Err(claim_err(e)),
    }
}

/// Asks a maintainer, in both languages, for the reuse line. The gate
/// reads lines, not markdown, so the fenced line would match its pattern;
/// it is no authorization because the gate does not count the association
/// GitHub gave this comment (the reason it is posted).
pub(in crate::engine) fn reuse_request(marker: &str, run: u64, association: &str) -> String {
    format!(
        "{marker}\n**Reuse of the validated sweep needs a maintainer.** GitHub gives Klaud's comments the association `{association}`, which the repository's reuse gate does not accept. To merge without running the whole sweep again on main, a maintainer comments exactly this line (keep the full-sweep label on the PR):\n\n```\n/reuse-sweep-run {run}\n```\n\n<details>\n<summary>中文</summary>\n\n**复用已验证的 sweep 需要维护者操作**。 GitHub 为 Klaud 的评论标注的关联身份为 `{association}`，仓库的复用检查不接受该身份。若要合并时不在 main 上重新运行完整 sweep，请维护者评论以下这一行（并保留 PR 上的 full-sweep 标签）：\n\n```\n/reuse-sweep-run {run}\n```\n\n</details>\n"
    )
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_owners_members_and_collaborators_authorize() {
        for a in ["OWNER", "MEMBER", "COLLABORATOR"] {
            assert!(AuthorAssociation::parse(a).reuse_gate_accepts());
        }
        for a in ["CONTRIBUTOR", "NONE", "FIRST_TIME_CONTRIBUTOR", "owner", ""] {
            assert!(!AuthorAssociation::parse(a).reuse_gate_accepts());
        }
    }

    #[test]
    fn the_request_to_a_maintainer_names_the_line_and_the_association_in_both_languages() {
        let body = reuse_request("<!-- m -->", 42, "NONE");
        assert!(body.contains("/reuse-sweep-run 42"));
        assert!(body.contains("<summary>中文</summary>"));
        assert!(body.contains("`NONE`"));
    }
}
