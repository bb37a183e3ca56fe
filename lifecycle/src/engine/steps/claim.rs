//! Step 1 of 9, `Step::Claim`: take the family's claim ref, or adopt the
//! claim this candidate already holds.
//!
//! Sits first: nothing is written to the repository before the claim is
//! Klaud's. Reads the claim ref (not when the pass's listing showed it
//! absent: the create then answers whether it is there), the candidate's
//! pull request (a candidate finished meanwhile ends here) and the
//! capacity gate. May write: the claim ref only (acquire, adopt, or an
//! experiment's shared claim). Next:
//! `prepare`; a claim held by someone else skips the candidate.

use crate::engine::context::Engine;
use crate::engine::context::Progress;
use crate::engine::error::EngineError;
use crate::engine::forge::Forge as _;
use crate::engine::intent::Intent;
use crate::engine::journal::{CandidateRecord, Step};
use crate::engine::proof::hold;
use klaud_claims::{Acquire, ClaimBook, ClaimCandidate, ClaimEntry};

pub(in crate::engine) async fn run(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
) -> Result<Progress, EngineError> {
    let cid = Engine::candidate_id(rec)?;
    let family_id = cid.family();
    let book = cx.book();
    let claim_err = EngineError::ClaimOp;
    // A record that never held the claim of a family the pass's listing
    // showed free creates it straight away (see `with_listed_claims`).
    let listed_free = rec.claim.is_none() && cx.listed_free(&family_id.claim_ref());
    if rec.claim.is_none() && rec.variant.is_some() {
        cx.seed_sibling_claim(&family_id.claim_ref());
    }
    if !listed_free && let Some(entry) = book.inspect(&family_id).await.map_err(claim_err)? {
        return adopt_or_skip(cx, rec, &book, &entry).await;
    }
    // Free family: the candidate may have been finished meanwhile (by
    // another instance, or before the journal was lost).
    if rec.claim.is_none()
        && let Some(pull) = cx.forge.find_pull(&rec.branch).await?
    {
        cx.rebuild_ending(rec, &pull).await?;
        if rec.ending.is_some() {
            cx.save(rec).await?;
            return Ok(Progress::Advanced(rec.step));
        }
    }
    if let Some(p) = cx.capacity_deferred(rec, "claiming").await? {
        return Ok(p);
    }
    cx.intend(rec, Intent::AcquireClaim).await?;
    let base = cx.repository_sha.clone();
    // A family group is bumped as one candidate under its first
    // member's claim ref; the record lists every member so other
    // instances (and the old helper) see each of them as taken.
    // An experiment's variants all run under this one claim: it lists
    // every variant candidate.
    let ids: Vec<klaud_claims::CandidateId> = match &rec.variant {
        Some(v) => v.siblings.iter().map(|s| s.candidate.clone()).collect(),
        None => vec![cid.clone()],
    };
    let members = cx.bumped_together(&rec.family);
    let candidates = ids
        .iter()
        .flat_map(|id| {
            members
                .iter()
                .map(|member| ClaimCandidate::new(base.clone(), member, id.clone()))
        })
        .collect();
    match book
        .acquire(
            &family_id,
            candidates,
            &base,
            rec.owner_run,
            cx.config.lease,
        )
        .await
        .map_err(claim_err)?
    {
        Acquire::Won(held) => {
            hold(cx, rec, &held);
            rec.claim_created_here = true;
            cx.listed_taken(&family_id.claim_ref(), true);
            rec.step = Step::Prepare;
            cx.save(rec).await?;
            Ok(Progress::Advanced(Step::Prepare))
        }
        Acquire::Occupied(entry) => {
            cx.listed_taken(&family_id.claim_ref(), false);
            adopt_or_skip(cx, rec, &book, &entry).await
        }
    }
}

pub(in crate::engine) async fn adopt_or_skip(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
    book: &ClaimBook<'_>,
    entry: &ClaimEntry,
) -> Result<Progress, EngineError> {
    if let Some(held) = book.adopt(entry)
        && held
            .record
            .candidate_ids()
            .contains(&rec.candidate.as_str())
    {
        hold(cx, rec, &held);
        // A sibling variant adopting the claim this engine just created:
        // nothing of its own lifecycle was made under it yet.
        if rec.variant.is_some() && cx.created_claim(&entry.tip.name) {
            rec.claim_created_here = true;
        }
        rec.step = Step::Prepare;
        cx.save(rec).await?;
        return Ok(Progress::Advanced(Step::Prepare));
    }
    let who = match &entry.record {
        Ok(r) => format!(
            "run {} (owner {})",
            r.run_id,
            r.owner
                .map_or_else(|| "old helper".into(), |o| o.to_string())
        ),
        Err(e) => format!("an unparsable claim ({e})"),
    };
    Ok(Progress::Skipped(format!(
        "family {} is claimed by {who}",
        rec.family
    )))
}
