//! On-demand recovery (`klaud recover`, spec §6): take over every claim
//! whose lease expired — and every lease-less (old helper) claim whose
//! owner run has completed — by compare-and-swap with `fence + 1`, then
//! finish each orphaned candidate: only release when a verified receipt
//! already exists, otherwise end it `unexpected-error` with the full
//! cleanup. Of several recoverers racing for the same claim exactly one
//! wins the CAS, so the cleanup runs once.

use chrono::{DateTime, TimeDelta, Utc};
use klaud_claims::{ClaimBook, ClaimEntry, ClaimRecord, HeldClaim, Takeover};
use klaud_lifecycle::engine::{Engine, Progress, Step};
use serde::Serialize;

use super::wave::WaveError;
use crate::github::{Forge, ForgeRunStatus};

/// A claim this instance took over, with the record it replaced.
#[derive(Debug, Clone)]
pub struct Orphan {
    /// The claim as we wrote it.
    pub held: HeldClaim,
    /// The orphan's record (its run and candidates).
    pub previous: ClaimRecord,
}

/// What recovery did with one orphaned candidate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Recovered {
    /// Family.
    pub family: String,
    /// Candidate id.
    pub candidate: String,
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

/// Takes over, by CAS, every claim of another owner that may be recovered
/// now (optionally only `family`, as a family id or family string).
pub async fn take_over_orphans(
    forge: &Forge,
    book: &ClaimBook<'_>,
    owner_run: u64,
    lease: TimeDelta,
    family: Option<&str>,
    now: DateTime<Utc>,
) -> Result<(Vec<Orphan>, Vec<(String, String)>), WaveError> {
    let claims = book
        .list_claims()
        .await
        .map_err(|e| WaveError::Claims(e.to_string()))?;
    let runs = ForgeRunStatus::new(forge);
    let mut orphans = Vec::new();
    let mut skipped = Vec::new();
    for entry in &claims {
        let name = entry.tip.name.clone();
        if family.is_some_and(|f| !matches_family(entry, f)) {
            continue;
        }
        if book.adopt(entry).is_some() {
            skipped.push((name, "held by this instance".into()));
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
        if record.lease_until.is_some() && entry.lease_expired(now) != Some(true) {
            skipped.push((name, "lease still running".into()));
            continue;
        }
        match book.takeover(&family_id, owner_run, lease, &runs).await {
            Ok(Takeover::Took { held, previous }) => orphans.push(Orphan {
                held,
                previous: *previous,
            }),
            Ok(other) => skipped.push((name, format!("not taken over: {other:?}"))),
            Err(e) => skipped.push((name, format!("takeover failed: {e}"))),
        }
    }
    Ok((orphans, skipped))
}

/// Finishes the candidates of claims taken over: a receipt already on the
/// PR means only release; otherwise `unexpected-error` with cleanup.
/// `max_steps` bounds the engine steps per candidate.
pub async fn finish_orphans(
    engine: &Engine<'_>,
    orphans: &[Orphan],
    max_steps: usize,
) -> RecoveryReport {
    let mut report = RecoveryReport::default();
    for orphan in orphans {
        for c in &orphan.previous.candidates {
            let mut entry = Recovered {
                family: c.family.clone(),
                candidate: c.id.as_str().to_owned(),
                orphan_run: orphan.previous.run_id,
                outcome: None,
                message: String::new(),
            };
            let result = match engine
                .recover(&c.family, &c.id, &orphan.held, orphan.previous.run_id)
                .await
            {
                Ok(mut rec) => engine.drive(&mut rec, max_steps).await.map(|p| (rec, p)),
                Err(e) => Err(e),
            };
            match result {
                Ok((rec, progress))
                    if rec.step == Step::Done || matches!(progress, Progress::Done(_)) =>
                {
                    entry.outcome = rec.ending.as_ref().map(|e| e.outcome.to_string());
                    entry.message = rec
                        .ending
                        .as_ref()
                        .map_or_else(String::new, |e| e.message.clone());
                    report.recovered.push(entry);
                }
                Ok((rec, other)) => {
                    entry.message =
                        format!("not finished yet (step {}): {other:?}", rec.step.as_str());
                    report.recovered.push(entry);
                }
                Err(e) => report
                    .skipped
                    .push((c.id.as_str().to_owned(), format!("recovery: {e}"))),
            }
        }
    }
    report
}
