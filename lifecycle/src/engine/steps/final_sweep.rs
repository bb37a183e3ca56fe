//! Step 7 of 9, `Step::Final`: ready the pull request for the final sweep:
//! append Klaud's `perf-changelog.yaml` entry (merging a moved base first,
//! `upkeep`), run check-final on the head, set the draft state the sweep's
//! job conditions need and add exactly one sweep label.
//!
//! After a passed `smoke`, before `sweep`. Reads the changelog at the base
//! tip and the head, the master file's scenarios, the labels. May write:
//! the changelog commit on the branch, the draft state and the sweep label,
//! under a proof.

use crate::check_final::{added_entries, swept_points, uncovered_by};
use crate::engine::config::TRAILER;
use crate::engine::context::Engine;
use crate::engine::context::Progress;
use crate::engine::error::EngineError;
use crate::engine::forge::{Forge as _, ForgeError};
use crate::engine::intent::Intent;
use crate::engine::journal::{AttemptRecord, CandidateRecord, PendingBranchCommit, Step};
use crate::engine::ownership::OwnershipProof;
use crate::engine::proof::Scope;
use crate::engine::upkeep::MergePlan;
use crate::engine::write::Writes as _;
use crate::model::{AttemptKind, AttemptStatus, Outcome, Phase};
use klaud_claims::{CommitSha, PullNumber};
use klaud_planner::changelog::{CHANGELOG_PATH, append_entry, validate_append};

pub(in crate::engine) async fn run(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
) -> Result<Progress, EngineError> {
    cx.reconcile_head(rec).await?;
    // One variant of an experiment in its final sweep at a time.
    if let Some(p) = cx.experiment_final_slot(rec).await? {
        return Ok(p);
    }
    let number = rec
        .pull
        .ok_or_else(|| EngineError::Invalid("final without a pull request".into()))?;
    let link = cx.entry_link(number);
    let path = format!("{}{CHANGELOG_PATH}", cx.repository.prefix());
    let base_tip = cx
        .branch_sha(&rec.base_branch)
        .await?
        .ok_or_else(|| ForgeError::NotFound(format!("base branch {}", rec.base_branch)))?;
    let head = Engine::head(rec)?;
    let base_bytes = cx
        .forge
        .read_file(&path, &base_tip)
        .await?
        .unwrap_or_default();
    let head_bytes = cx.forge.read_file(&path, &head).await?.unwrap_or_default();
    let log = Changelog {
        path,
        link,
        base_tip,
        base_bytes,
        head_bytes,
    };
    let appended = validate_append(&log.base_bytes, &log.head_bytes).is_ok_and(|n| n >= 1)
        && String::from_utf8_lossy(&log.head_bytes[log.base_bytes.len()..]).contains(&log.link);
    if !appended {
        return append_changelog(cx, rec, &head, log).await;
    }
    label_for_sweep(cx, rec, number, head, &log).await
}

/// `perf-changelog.yaml` at the base tip and at the candidate's head.
struct Changelog {
    path: String,
    /// The entry's link (the pull request).
    link: String,
    base_tip: CommitSha,
    base_bytes: Vec<u8>,
    head_bytes: Vec<u8>,
}

/// Appends Klaud's changelog entry onto the current base's file, merging
/// a base that moved, and pushes it; the next step looks again.
// Kept whole (about 90 lines): one commit and push under one proof and
// its intents; the merge plan's three answers share them.
async fn append_changelog(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
    head: &CommitSha,
    log: Changelog,
) -> Result<Progress, EngineError> {
    let Changelog {
        path,
        link,
        base_tip,
        base_bytes,
        ..
    } = log;
    let proof = match cx.prove(rec, Scope::Pull).await? {
        Ok(p) => p,
        Err(p) => return Ok(p),
    };
    let entry = cx.changelog_entry(rec, &link);
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
            return cx
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
    let plan = cx.merge_plan(rec, head, &base_tip, Some(&link)).await?;
    let sha = match plan {
        // Up to date: the commit and the push are one write.
        MergePlan::UpToDate => {
            let files = [(path, new)];
            return commit_on_branch(cx, rec, &proof, head, &files, &message).await;
        }
        MergePlan::Merge { base_tip, files } => {
            let message = format!(
                "Add perf-changelog entry for {}, merging {}\n\n{TRAILER}{}\n",
                rec.key, rec.base_branch, rec.candidate
            );
            cx.intend(rec, Intent::CommitChangelog).await?;
            cx.forge
                .commit_merge(&proof, head, &base_tip, &files, &message)
                .await?
        }
        MergePlan::HandOff(why) => {
            let m = format!("the base moved and cannot be merged in: {why}");
            cx.end(rec, Outcome::Handoff, Phase::FinalSweep, m.clone(), true)
                .await?;
            if let Some(ending) = rec.ending.as_mut() {
                ending.note = Some(m);
            }
            cx.save(rec).await?;
            return Ok(Progress::Advanced(Step::Finish));
        }
    };
    rec.pending_commit = Some(sha.clone());
    cx.intend(rec, Intent::PushChangelog).await?;
    match cx
        .forge
        .fast_forward_branch(&proof, &rec.branch, &sha)
        .await
    {
        Ok(()) => {
            rec.head = Some(sha);
            rec.pending_commit = None;
            cx.save(rec).await?;
        }
        // Re-read next step (reconcile_head or the ownership check
        // tells what happened).
        Err(ForgeError::Ambiguous(_)) | Err(ForgeError::NotFastForward(_)) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(Progress::Advanced(Step::Final))
}

/// The changelog commit on `head` and the branch moved to it, in one
/// write. Its parent and message are recorded first: an answer that never
/// came leaves a commit only they can recognise ([`Engine::reconcile_head`]
/// next step).
async fn commit_on_branch(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
    proof: &OwnershipProof,
    head: &CommitSha,
    files: &[(String, Vec<u8>)],
    message: &str,
) -> Result<Progress, EngineError> {
    rec.pending_branch_commit = Some(PendingBranchCommit {
        parent: head.clone(),
        message: message.to_owned(),
    });
    cx.intend(rec, Intent::PushChangelog).await?;
    let branch = rec.branch.clone();
    match cx
        .forge
        .commit_on_branch(proof, &branch, head, files, message)
        .await
    {
        Ok(sha) => {
            rec.head = Some(sha);
            rec.pending_branch_commit = None;
            cx.save(rec).await?;
        }
        // Refused before anything was made: the branch moved, which the
        // next step's ownership check reads as someone else's push.
        Err(ForgeError::NotFastForward(_)) => {
            rec.pending_branch_commit = None;
            cx.save(rec).await?;
        }
        // The tip tells next step.
        Err(ForgeError::Ambiguous(_)) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(Progress::Advanced(Step::Final))
}

/// Adds the one sweep label (removing Klaud's other sweep labels), after
/// check-final at the head, the capacity gate and, when the sweep skips
/// drafts, marking the PR ready; then waits for the sweep.
// Kept whole (about 90 lines): the order of its writes is the rule
// (check-final and capacity before the label, ready before the label).
async fn label_for_sweep(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
    number: PullNumber,
    head: CommitSha,
    log: &Changelog,
) -> Result<Progress, EngineError> {
    let pull = cx.forge.get_pull(number).await?;
    let sweep = &cx.config.sweep_label;
    let remove: Vec<String> = pull
        .labels
        .iter()
        .filter(|l| *l != sweep && cx.config.managed_labels.iter().any(|m| m == *l))
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
        if let Some(gap) = uncovered_at_head(cx, rec, log, &head, &labels).await? {
            return cx
                .end(rec, Outcome::Failed, Phase::FinalSweep, gap, false)
                .await;
        }
    }
    let workflows = cx.base_workflows(&rec.base_sha).await?;
    let sweep_file = workflows.sweep.as_ref().ok().and_then(Option::as_ref);
    let on_drafts = match crate::workflow_contract::sweep_runs_on_drafts(
        sweep_file,
        sweep,
        cx.config.sweep_runs_on_drafts,
    ) {
        Ok(b) => b,
        Err(e) => {
            let m = format!("cannot tell whether the final sweep runs on drafts: {e}");
            return cx
                .end(rec, Outcome::Incompatible, Phase::FinalSweep, m, false)
                .await;
        }
    };
    // A sweep that skips drafts would conclude `skipped`: the PR is
    // marked ready first, so the label event already sees it ready.
    // Klaud never requests reviews; readiness is all it changes.
    // Labelling starts the sweep: capacity is checked first.
    if add && let Some(p) = cx.capacity_deferred(rec, "the sweep label").await? {
        return Ok(p);
    }
    let ready_first = !on_drafts && pull.draft;
    if ready_first {
        let proof = match cx.prove(rec, Scope::Pull).await? {
            Ok(p) => p,
            Err(p) => return Ok(p),
        };
        cx.intend(rec, Intent::ReadyBeforeSweep).await?;
        cx.forge.set_draft(&proof, &pull, false).await?;
    }
    if !remove.is_empty() || add {
        let proof = match cx.prove(rec, Scope::Pull).await? {
            Ok(p) => p,
            Err(p) => return Ok(p),
        };
        cx.intend(rec, Intent::SetSweepLabel).await?;
        for l in &remove {
            cx.forge.remove_label(&proof, number, l).await?;
        }
        if add {
            cx.forge
                .add_labels(&proof, number, std::slice::from_ref(sweep))
                .await?;
        }
    }
    rec.sweep_requested_at.get_or_insert(cx.clock.now());
    rec.attempts.push(AttemptRecord {
        kind: AttemptKind::FinalSweep,
        head: head.to_string(),
        dispatched_at: None,
        run: None,
        status: AttemptStatus::Queued,
        infra: false,
        reported: false,
    });
    rec.step = Step::Sweep;
    cx.save(rec).await?;
    if !add {
        // The label was there already (a resumed or rebuilt record): the
        // sweep started long enough ago to be looked for now.
        return Ok(Progress::Advanced(Step::Sweep));
    }
    // GitHub starts the sweep a moment after the label's event: looked
    // for now, it is not there yet or still queued, a read that shows
    // nothing (and the run is read again when it ends). The sweep step
    // looks from the next round of steps, a poll interval later.
    Ok(Progress::Waiting(
        "the final sweep starts on the label's event; looked for from the next round".into(),
    ))
}

/// check-final before the label: why the sweep the repository will run
/// at `head` (with `labels`) would leave frozen points unmeasured, or
/// `None` when it covers every one.
async fn uncovered_at_head(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
    log: &Changelog,
    head: &CommitSha,
    labels: &[String],
) -> Result<Option<String>, EngineError> {
    let frozen = cx.frozen(rec).await?;
    if frozen.baseline.points.is_empty() {
        return Ok(None);
    }
    let added = match added_entries(&log.base_bytes, &log.head_bytes) {
        Ok(a) => a,
        Err(e) => {
            return Ok(Some(format!(
                "check-final: the sweep matrix at {head} cannot be derived from {}: {e}",
                log.path
            )));
        }
    };
    let family = rec.family.clone();
    let (file, key) = family.rsplit_once(':').unwrap_or((&family, &rec.key));
    let master_path = format!("{}{file}", cx.repository.prefix());
    let scenarios = match cx.forge.read_file(&master_path, head).await? {
        Some(bytes) => scenarios_of(&bytes, key),
        None => Err(format!("{master_path} is missing")),
    };
    let swept = scenarios
        .and_then(|s| swept_points(&family, key, &s, &added, labels).map_err(|e| e.to_string()));
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
            cx.config.sweep_workflow,
            missing.len(),
            frozen.baseline.points.len(),
            missing.join("; ")
        )
    }))
}

/// The `scenarios` of `key` in a master file's bytes.
pub(in crate::engine) fn scenarios_of(
    bytes: &[u8],
    key: &str,
) -> Result<std::collections::BTreeMap<String, serde_json::Value>, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    let doc = klaud_planner::yaml::parse_readable(text)
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
