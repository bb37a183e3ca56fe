//! Recovery (see `klaud_lifecycle::model`), run by every wave and by `klaud recover`: a claim
//! whose lease expired — or a lease-less (old helper) claim whose owner run
//! completed — is an orphan. For each of its candidates the recoverer first
//! takes the recovery lease `refs/heads/klaud/recovery-<owner run>-<candidate>`
//! (an exclusive create, like a claim), then takes the claim over by
//! compare-and-swap with `fence + 1`, and finishes the candidate: only
//! release when a verified receipt already exists, otherwise
//! `unexpected-error` with the full cleanup. The recovery lease is released
//! once the candidate is done.
//!
//! Of several recoverers racing for one orphan exactly one gets the
//! recovery lease, so the cleanup runs once. The lease is also the recorded
//! intent: a recoverer that dies after taking the claim finds its lease
//! again on restart and resumes; one that dies for good leaves a lease that
//! expires and is swept (or taken over) by the next recoverer.
//!
//! The same machinery serves a maintainer's `klaud claims release`
//! ([`release_claim`]): the claim is taken over (forced only with
//! `--force`), and its candidates end with a receipt that names who
//! released them and why.

use crate::BoxFuture;
use std::collections::{BTreeMap, BTreeSet};

use crate::engine::{CandidateRecord, Engine, Progress, Step};
use crate::model::Outcome;
use chrono::{DateTime, TimeDelta, Utc};
use klaud_claims::{
    Acquire, CandidateId, ClaimBook, ClaimCandidate, ClaimEntry, ClaimError, FamilyId, HeldClaim,
    Release, Renew, RunCompletion, Takeover,
};
use serde::Serialize;

/// What recovery needs to know about this instance.
pub struct RecoveryContext<'a> {
    /// Claim operations as this instance.
    pub book: &'a ClaimBook<'a>,
    /// Whether an old helper's owner run completed.
    pub runs: &'a dyn RunCompletion,
    /// This instance's run, written into what it takes over.
    pub owner_run: u64,
    /// Lease length of what it takes.
    pub lease: TimeDelta,
    /// Now.
    pub now: DateTime<Utc>,
}

/// A claim this instance holds in order to finish another owner's
/// candidates.
#[derive(Debug, Clone)]
pub struct Orphan {
    /// The claim, ours now (fence raised).
    pub held: HeldClaim,
    /// The run that owned the claim before.
    pub orphan_run: u64,
    /// The candidates to finish.
    pub candidates: Vec<ClaimCandidate>,
    /// The recovery leases this instance holds for them.
    pub leases: Vec<HeldClaim>,
}

/// What recovery did with one orphaned candidate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Recovered {
    /// Family string (empty when its record could not be opened).
    pub family: String,
    /// Candidate id.
    pub candidate: CandidateId,
    /// The orphan's run.
    pub orphan_run: u64,
    /// The outcome of its receipt, once finished.
    pub outcome: Option<String>,
    /// What happened, in one sentence.
    pub message: String,
}

/// The result of one recovery pass.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RecoveryReport {
    /// Orphaned candidates handled by this instance.
    pub recovered: Vec<Recovered>,
    /// Claims left alone, with the reason (lease running, run going,
    /// another recoverer won, a failure).
    pub skipped: Vec<(String, String)>,
}

/// Whether `entry` matches `--family`: its family id, or the family string
/// of one of its candidates.
fn matches_family(entry: &ClaimEntry, wanted: &str) -> bool {
    entry.family().is_some_and(|f| f.as_str() == wanted)
        || entry
            .record
            .as_ref()
            .is_ok_and(|r| r.candidates.iter().any(|c| c.family == wanted))
}

/// The recovery leases among `leases` that this instance holds, by
/// candidate id, with the orphan run their name carries.
fn our_leases(book: &ClaimBook<'_>, leases: &[ClaimEntry]) -> BTreeMap<String, (u64, HeldClaim)> {
    leases
        .iter()
        .filter_map(|entry| {
            let (run, id) = CandidateId::from_recovery_ref(&entry.tip.name)?;
            Some((id.as_str().to_owned(), (run, book.adopt(entry)?)))
        })
        .collect()
}

/// What [`take_over_orphans`] returns: the orphans taken over, and the
/// families it skipped with why.
pub type TakenOver = (Vec<Orphan>, Vec<(String, String)>);

/// What [`open_orphans`] returns: the records opened, and the candidates
/// that could not be opened with why.
pub type OpenedOrphans = (Vec<CandidateRecord>, Vec<(CandidateId, String)>);

/// Finds the orphans among `claims` (as listed this pass) and takes each
/// over: recovery leases first, then the claim. `leases` are the recovery
/// leases listed this pass; `journaled` the candidates this instance's
/// journal knows (a claim of ours with a recovery lease of ours but no
/// journal record is a recovery interrupted by a crash, and is resumed).
/// `family` limits the pass to one family (id or family string).
pub fn take_over_orphans<'f>(
    ctx: &'f RecoveryContext<'f>,
    claims: &'f [ClaimEntry],
    leases: &'f [ClaimEntry],
    journaled: &'f BTreeSet<String>,
    family: Option<&'f str>,
) -> BoxFuture<'f, TakenOver> {
    Box::pin(async move {
        let ours = our_leases(ctx.book, leases);
        let mut orphans = Vec::new();
        let mut skipped = Vec::new();
        for entry in claims {
            let name = entry.tip.name.clone();
            if family.is_some_and(|f| !matches_family(entry, f)) {
                continue;
            }
            if let Some(held) = ctx.book.adopt(entry) {
                if let Some(orphan) = interrupted_recovery(held, &ours, journaled) {
                    orphans.push(orphan);
                } else {
                    skipped.push((name, "held by this instance".into()));
                }
                continue;
            }
            let Some(family_id) = entry.family() else {
                skipped.push((name, "not a claim ref".into()));
                continue;
            };
            let record = match &entry.record {
                Ok(r) => r,
                Err(e) => {
                    // Never acted on: a maintainer must look at it.
                    skipped.push((name, format!("does not parse, left alone: {e}")));
                    continue;
                }
            };
            match record.lease_until {
                Some(until) if until > ctx.now => {
                    skipped.push((name, "lease still running".into()));
                    continue;
                }
                Some(_) => {}
                // Asked before any write: an old helper's claim whose run goes
                // on must not cost a lease create and delete every pass.
                None => match ctx.runs.run_completed(record.run_id).await {
                    Ok(Some(true)) => {}
                    Ok(Some(false)) => {
                        let why =
                            format!("lease-less claim of run {} still running", record.run_id);
                        skipped.push((name, why));
                        continue;
                    }
                    Ok(None) => {
                        let why = format!("lease-less claim of unknown run {}", record.run_id);
                        skipped.push((name, why));
                        continue;
                    }
                    Err(e) => {
                        skipped.push((name, format!("run {}: {e}", record.run_id)));
                        continue;
                    }
                },
            }
            let taken =
                match take_recovery_leases(ctx, record.run_id, &record.candidates, entry).await {
                    Ok(taken) => taken,
                    Err(why) => {
                        skipped.push((name, why));
                        continue;
                    }
                };
            match ctx
                .book
                .takeover(&family_id, ctx.owner_run, ctx.lease, ctx.runs)
                .await
            {
                Ok(Takeover::Took { held, previous }) => orphans.push(Orphan {
                    held,
                    orphan_run: previous.run_id,
                    candidates: previous.candidates.clone(),
                    leases: taken,
                }),
                other => {
                    let why = match other {
                        Ok(t) => format!("not taken over: {t:?}"),
                        Err(e) => format!("takeover failed: {e}"),
                    };
                    release_leases(ctx.book, &taken).await;
                    skipped.push((name, why));
                }
            }
        }
        (orphans, skipped)
    })
}

/// A claim of ours whose candidates have recovery leases of ours but no
/// journal record: the recovery this instance started before it crashed.
fn interrupted_recovery(
    held: HeldClaim,
    ours: &BTreeMap<String, (u64, HeldClaim)>,
    journaled: &BTreeSet<String>,
) -> Option<Orphan> {
    let mut orphan_run = None;
    let mut leases = Vec::new();
    let mut candidates = Vec::new();
    for c in &held.record.candidates {
        if let Some((run, lease)) = ours.get(c.id.as_str())
            && !journaled.contains(c.id.as_str())
        {
            orphan_run = Some(*run);
            leases.push(lease.clone());
            candidates.push(c.clone());
        }
    }
    Some(Orphan {
        orphan_run: orphan_run?,
        candidates,
        held,
        leases,
    })
}

/// Takes the recovery lease of every candidate of an orphaned claim, or
/// none: one held by a live recoverer means another instance is on it.
async fn take_recovery_leases(
    ctx: &RecoveryContext<'_>,
    orphan_run: u64,
    candidates: &[ClaimCandidate],
    claim: &ClaimEntry,
) -> Result<Vec<HeldClaim>, String> {
    let mut taken = Vec::new();
    for c in candidates {
        match take_recovery_lease(ctx, orphan_run, c, &claim.tip.sha).await {
            Ok(held) => taken.push(held),
            Err(why) => {
                release_leases(ctx.book, &taken).await;
                return Err(why);
            }
        }
    }
    Ok(taken)
}

async fn take_recovery_lease(
    ctx: &RecoveryContext<'_>,
    orphan_run: u64,
    candidate: &ClaimCandidate,
    claim_sha: &str,
) -> Result<HeldClaim, String> {
    let acquired = ctx
        .book
        .acquire_recovery_lease(orphan_run, candidate, claim_sha, ctx.owner_run, ctx.lease)
        .await
        .map_err(|e| format!("recovery lease: {e}"))?;
    let entry = match acquired {
        Acquire::Won(held) => return Ok(held),
        Acquire::Occupied(entry) => entry,
    };
    if let Some(held) = ctx.book.adopt(&entry) {
        return Ok(held);
    }
    let holder = match &entry.record {
        Ok(r) => r,
        Err(e) => {
            return Err(format!(
                "{} does not parse, left alone: {e}",
                entry.tip.name
            ));
        }
    };
    if entry.lease_expired(ctx.now) != Some(true) {
        return Err(format!(
            "another instance is recovering it (run {}, recovery lease until {})",
            holder.run_id,
            holder
                .lease_until
                .map_or_else(|| "unknown".to_owned(), |u| u.to_rfc3339())
        ));
    }
    // Its recoverer died: take its lease over, fenced like a claim.
    match ctx
        .book
        .takeover_recovery_lease(
            orphan_run,
            &candidate.id,
            ctx.owner_run,
            ctx.lease,
            ctx.runs,
        )
        .await
    {
        Ok(Takeover::Took { held, .. }) => Ok(held),
        Ok(other) => Err(format!("recovery lease not taken over: {other:?}")),
        Err(e) => Err(format!("recovery lease takeover: {e}")),
    }
}

async fn release_leases(book: &ClaimBook<'_>, leases: &[HeldClaim]) {
    for lease in leases {
        if let Err(e) = book.release(lease).await {
            // It expires and is swept by the next pass.
            tracing::warn!(lease = lease.ref_name, error = %e, "recovery lease not released");
        }
    }
}

/// Opens the journal record of every candidate of `orphans` (rebuilt from
/// GitHub: PR, owned runs, an existing receipt). Failures are returned as
/// skipped with the reason; the claim stays ours and a later pass resumes.
pub fn open_orphans<'f>(
    engine: &'f Engine<'f>,
    orphans: &'f [Orphan],
) -> BoxFuture<'f, OpenedOrphans> {
    Box::pin(async move {
        let mut records = Vec::new();
        let mut skipped = Vec::new();
        for orphan in orphans {
            for c in &orphan.candidates {
                match engine
                    .recover(&c.family, &c.id, &orphan.held, orphan.orphan_run)
                    .await
                {
                    Ok(rec) => records.push(rec),
                    Err(e) => skipped.push((c.id.clone(), format!("recovery: {e}"))),
                }
            }
        }
        (records, skipped)
    })
}

/// Finishes the candidates of claims taken over (`klaud recover`): a
/// receipt already on the PR means only release; otherwise
/// `unexpected-error` with cleanup. `max_steps` bounds the engine steps per
/// candidate. Recovery leases of finished candidates are released.
pub fn finish_orphans<'f>(
    engine: &'f Engine<'f>,
    book: &'f ClaimBook<'f>,
    orphans: &'f [Orphan],
    max_steps: usize,
) -> BoxFuture<'f, RecoveryReport> {
    Box::pin(async move {
        let (mut records, skipped) = open_orphans(engine, orphans).await;
        let mut report = RecoveryReport {
            skipped: skipped
                .into_iter()
                .map(|(id, why)| (id.to_string(), why))
                .collect(),
            ..RecoveryReport::default()
        };
        let runs: BTreeMap<&str, u64> = orphans
            .iter()
            .flat_map(|o| o.candidates.iter().map(|c| (c.id.as_str(), o.orphan_run)))
            .collect();
        for rec in &mut records {
            let orphan_run = runs
                .get(rec.candidate.as_str())
                .copied()
                .unwrap_or(rec.owner_run);
            let progress = engine.drive(rec, max_steps).await;
            report.recovered.push(recovered(rec, orphan_run, progress));
        }
        let leases: Vec<HeldClaim> = orphans.iter().flat_map(|o| o.leases.clone()).collect();
        release_finished_leases(book, &leases, &records).await;
        report
    })
}

fn recovered(
    rec: &CandidateRecord,
    orphan_run: u64,
    progress: Result<Progress, crate::engine::EngineError>,
) -> Recovered {
    let mut out = Recovered {
        family: rec.family.clone(),
        candidate: rec.candidate.clone(),
        orphan_run,
        outcome: None,
        message: String::new(),
    };
    match progress {
        Ok(_) if rec.step == Step::Done => {
            out.outcome = rec.ending.as_ref().map(|e| e.outcome.to_string());
            out.message = rec
                .ending
                .as_ref()
                .map_or_else(String::new, |e| e.message.clone());
        }
        Ok(other) => {
            out.message = format!("not finished yet (step {}): {other:?}", rec.step.as_str());
        }
        Err(e) => out.message = format!("stopped at step {}: {e}", rec.step.as_str()),
    }
    out
}

/// Releases the recovery leases whose candidate is done in `records`.
async fn release_finished_leases(
    book: &ClaimBook<'_>,
    leases: &[HeldClaim],
    records: &[CandidateRecord],
) {
    let done: BTreeSet<&str> = records
        .iter()
        .filter(|r| r.step == Step::Done)
        .map(|r| r.candidate.as_str())
        .collect();
    let finished: Vec<HeldClaim> = leases
        .iter()
        .filter(|l| {
            CandidateId::from_recovery_ref(&l.ref_name)
                .is_some_and(|(_, id)| done.contains(id.as_str()))
        })
        .cloned()
        .collect();
    release_leases(book, &finished).await;
}

/// Keeps the recovery leases in order at the end of a pass. Ours (`listed`
/// this pass, or `acquired` during it): released once the candidate is
/// done in `records` (this instance's journal), renewed while it is being
/// recovered. Another's that expired and whose orphan is no longer the
/// claim's owner (`claims` as listed this pass): its recoverer died after
/// the recovery moved on, so it is taken over and deleted.
pub fn settle_recovery_leases<'f>(
    ctx: &'f RecoveryContext<'f>,
    listed: &'f [ClaimEntry],
    acquired: &'f [HeldClaim],
    claims: &'f [ClaimEntry],
    records: &'f [CandidateRecord],
) -> BoxFuture<'f, ()> {
    Box::pin(async move {
        let mut ours: BTreeMap<String, HeldClaim> = listed
            .iter()
            .filter_map(|e| ctx.book.adopt(e).map(|h| (h.ref_name.clone(), h)))
            .collect();
        for held in acquired {
            ours.insert(held.ref_name.clone(), held.clone());
        }
        let by_candidate: BTreeMap<&str, &CandidateRecord> =
            records.iter().map(|r| (r.candidate.as_str(), r)).collect();
        let held: Vec<HeldClaim> = ours.into_values().collect();
        release_finished_leases(ctx.book, &held, records).await;
        for lease in &held {
            let unfinished = CandidateId::from_recovery_ref(&lease.ref_name)
                .and_then(|(_, id)| by_candidate.get(id.as_str()).copied())
                .is_some_and(|r| r.step != Step::Done);
            let left = lease.record.lease_until.map(|u| u - ctx.now);
            if unfinished
                && left.is_some_and(|l| l * 2 < ctx.lease)
                && let Ok(Renew::Lost(lost)) = ctx.book.renew(lease, ctx.lease).await
            {
                tracing::info!(lease = lease.ref_name, %lost, "recovery lease lost");
            }
        }
        let claim_runs: BTreeMap<FamilyId, Option<u64>> = claims
            .iter()
            .filter_map(|e| Some((e.family()?, e.record.as_ref().ok().map(|r| r.run_id))))
            .collect();
        for entry in listed {
            let Some((orphan_run, id)) = CandidateId::from_recovery_ref(&entry.tip.name) else {
                continue;
            };
            if ctx.book.adopt(entry).is_some() || entry.lease_expired(ctx.now) != Some(true) {
                continue;
            }
            // Still the claim's owner (or unreadable): recovery proper takes
            // this lease over when it gets to the claim.
            match claim_runs.get(&id.family()) {
                Some(Some(run)) if *run != orphan_run => {}
                None => {}
                Some(_) => continue,
            }
            match ctx
                .book
                .takeover_recovery_lease(orphan_run, &id, ctx.owner_run, ctx.lease, ctx.runs)
                .await
            {
                Ok(Takeover::Took { held, .. }) => match ctx.book.release(&held).await {
                    Ok(Release::Released | Release::AlreadyGone) => {
                        tracing::info!(lease = held.ref_name, "stale recovery lease removed");
                    }
                    Err(e) => {
                        tracing::warn!(lease = held.ref_name, error = %e, "stale recovery lease")
                    }
                },
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(lease = entry.tip.name, error = %e, "stale recovery lease")
                }
            }
        }
    })
}

/// What a maintainer's release of a family did.
#[derive(Debug, Clone, Serialize)]
pub struct Released {
    /// The claim ref.
    #[serde(rename = "ref")]
    pub ref_name: String,
    /// Its candidates, each finished with a receipt naming who and why.
    pub candidates: Vec<Recovered>,
    /// Whether the claim is gone; `false` when a candidate did not finish
    /// (the claim then stays leased and recovery finishes it later).
    pub claim_released: bool,
}

/// Why a maintainer's release did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseRefused {
    /// The family has no claim.
    #[error("no claim at {0}: nothing to release")]
    Vacant(String),
    /// A live owner holds the claim and `force` was not given.
    #[error("{ref_name} is held by a live owner ({why}); pass --force to release it anyway")]
    Live {
        /// The claim ref.
        ref_name: String,
        /// Why it counts as live.
        why: String,
    },
    /// The claim moved while it was being taken over.
    #[error("{0} changed while it was being released; look again and re-run")]
    Raced(String),
    /// The claim does not parse: only a forced delete by hand removes it.
    #[error(
        "{ref_name} does not parse ({why}); it has no candidates to finish: delete it with --force"
    )]
    Unparsable {
        /// The claim ref.
        ref_name: String,
        /// The parse error.
        why: String,
    },
    /// GitHub or the claim store failed.
    #[error(transparent)]
    Claim(#[from] ClaimError),
}

/// A maintainer releases `family` (`klaud claims release`): the claim is
/// taken over by compare-and-swap — refused while a live owner holds it
/// unless `force` — and each of its candidates ends as `handoff` with the
/// usual cleanup and a receipt whose note is `note` (who and why). A
/// candidate whose receipt already exists is only released. Without an
/// `engine` (a manual claim: nothing on GitHub to finish) only the claim is
/// released.
pub fn release_claim<'f>(
    ctx: &'f RecoveryContext<'f>,
    engine: Option<&'f Engine<'f>>,
    family: &'f FamilyId,
    force: bool,
    note: &'f str,
) -> BoxFuture<'f, Result<Released, ReleaseRefused>> {
    Box::pin(async move {
        let ref_name = family.claim_ref();
        let taken = if force {
            ctx.book
                .force_takeover(family, ctx.owner_run, ctx.lease)
                .await
        } else {
            ctx.book
                .takeover(family, ctx.owner_run, ctx.lease, ctx.runs)
                .await
        };
        let taken = taken.map_err(|e| match e {
            ClaimError::Unparsable { ref_name, source } => ReleaseRefused::Unparsable {
                ref_name,
                why: source.to_string(),
            },
            e => ReleaseRefused::Claim(e),
        })?;
        let (held, previous) = match taken {
            Takeover::Took { held, previous } => (held, previous),
            Takeover::Vacant => return Err(ReleaseRefused::Vacant(ref_name)),
            Takeover::Refused(why) => {
                return Err(ReleaseRefused::Live {
                    ref_name,
                    why: why.to_string(),
                });
            }
            Takeover::Lost(_) => return Err(ReleaseRefused::Raced(ref_name)),
        };
        let orphan = Orphan {
            held: held.clone(),
            orphan_run: previous.run_id,
            candidates: previous.candidates.clone(),
            leases: Vec::new(),
        };
        let (mut records, skipped) = match engine {
            Some(engine) => open_orphans(engine, std::slice::from_ref(&orphan)).await,
            None => (Vec::new(), Vec::new()),
        };
        let mut candidates = Vec::new();
        for rec in &mut records {
            let Some(engine) = engine else { break };
            // A receipt on GitHub (or a maintainer's earlier stop) already ended
            // it: only the claim is released.
            let ended = rec.ending.as_ref().is_some_and(|e| e.hands_off);
            let mut progress = Ok(Progress::Advanced(rec.step));
            if !ended
                && let Err(e) = engine
                    .end_now(rec, Outcome::Handoff, note.to_owned(), false)
                    .await
            {
                progress = Err(e);
            }
            if progress.is_ok() {
                progress = engine.drive(rec, 64).await;
            }
            candidates.push(recovered(rec, previous.run_id, progress));
        }
        // A candidate that could not be opened keeps the claim: its lease runs
        // out and the next recovery finishes it, rather than freeing the family
        // under an open PR.
        let all_opened = skipped.is_empty();
        for (id, why) in skipped {
            candidates.push(Recovered {
                family: String::new(),
                candidate: id,
                orphan_run: previous.run_id,
                outcome: None,
                message: format!("{why}; the claim stays until its lease runs out"),
            });
        }
        // Finished candidates released the claim; a manual claim (no engine)
        // has none, so it is released here.
        let claim_released = all_opened && records.iter().all(|r| r.step == Step::Done);
        if claim_released {
            ctx.book.release(&held).await.or_else(|e| match e {
                // Already moved on by the finished candidates' release.
                ClaimError::NotOwner { .. } => Ok(Release::AlreadyGone),
                e => Err(e),
            })?;
        }
        Ok(Released {
            ref_name,
            candidates,
            claim_released,
        })
    })
}
