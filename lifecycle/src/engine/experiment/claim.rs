//! Step 1 of 6 of an experiment's race, the shared claim: every variant
//! holds the one claim of its family, so a variant adopts the claim's tip
//! when a sibling moved it (renewal, bookkeeping), learns what the claim
//! lists of its experiment (a `/klaud try` writes it there), marks fields
//! of the shared record by compare-and-swap, and adopts the branch and PR
//! it made before its journal was lost.
//!
//! First, before any step of a variant under the claim. Reads the claim
//! ref, the variant's branch and its PR. May write: the shared claim
//! record (compare-and-swap from its tip, only while it is Klaud's).

use super::CAS_ATTEMPTS;
use crate::engine::context::Engine;
use crate::engine::error::EngineError;
use crate::engine::forge::Forge as _;
use crate::engine::intent::Intent;
use crate::engine::journal::{CandidateRecord, StoredClaim};
use crate::experiment;
use klaud_claims::{ClaimRecord, HeldClaim, Renew};
use serde_json::Value;

/// How [`Engine::amend_claim`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::engine) enum Amended {
    /// The record says what was asked: written now, or already so.
    Done,
    /// No claim of ours lists the candidate.
    NotHeld,
    /// Siblings moved the tip on every try.
    KeptMoving,
}

impl Engine<'_> {
    /// The claim as it is on GitHub now, adopted into `rec` when it is
    /// still ours (same owner, run and fence, and it lists `rec`): a
    /// sibling's renewal or bookkeeping moved the tip since `rec` last
    /// wrote it. `None`: no claim of ours lists `rec`.
    pub(in crate::engine) async fn refresh_claim(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<Option<HeldClaim>, EngineError> {
        let book = self.book();
        let family = Self::candidate_id(rec)?.family();
        let Some(entry) = book.inspect(&family).await.map_err(EngineError::ClaimOp)? else {
            return Ok(None);
        };
        let Some(held) = book.adopt(&entry) else {
            return Ok(None);
        };
        let same_fence = match &rec.claim {
            Some(stored) => {
                let mine = stored.held()?;
                mine.record.run_id == held.record.run_id
                    && mine.record.fence_or_zero() == held.record.fence_or_zero()
            }
            None => true,
        };
        if !same_fence
            || !held
                .record
                .candidate_ids()
                .contains(&rec.candidate.as_str())
        {
            return Ok(None);
        }
        let merged = Self::adopt_listed(rec, &held.record)?;
        if rec.claim.as_ref().is_none_or(|s| s.sha != held.sha) {
            crate::engine::proof::hold(self, rec, &held);
            self.save(rec).await?;
        } else if merged {
            self.save(rec).await?;
        }
        Ok(Some(held))
    }

    /// Takes into `rec` what the claim record lists of its experiment
    /// ([`experiment::Listed`], written by `/klaud try`): the variant
    /// itself when `rec` was rebuilt without a journal as a plain
    /// candidate, and siblings it does not know yet. `true` when `rec`
    /// changed (the caller saves it).
    pub(in crate::engine) fn adopt_listed(
        rec: &mut CandidateRecord,
        record: &klaud_claims::ClaimRecord,
    ) -> Result<bool, EngineError> {
        let Some(listed) = experiment::Listed::of_claim(&record.extra) else {
            return Ok(false);
        };
        let listed = listed.map_err(|e| EngineError::Claim(format!("{}: {e}", rec.family)))?;
        match rec.variant.as_mut() {
            None => match listed.info_for(rec.candidate.as_str()) {
                Some(info) => {
                    rec.variant =
                        Some(info.map_err(|e| EngineError::Claim(format!("{}: {e}", rec.family)))?);
                    Ok(true)
                }
                None => Ok(false),
            },
            Some(info) if info.experiment == listed.experiment => {
                let mut changed = false;
                for s in &listed.siblings {
                    if !info.siblings.iter().any(|x| x.candidate == s.candidate) {
                        info.siblings.push(s.clone());
                        changed = true;
                    }
                }
                Ok(changed)
            }
            Some(_) => Ok(false),
        }
    }

    /// [`Self::adopt_listed`] from the claim `rec` holds already (no
    /// request): a candidate rebuilt as plain learns it is a variant
    /// before its first step under the claim.
    pub(in crate::engine) async fn adopt_listed_from_held(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<(), EngineError> {
        if rec.variant.is_some() {
            return Ok(());
        }
        let Some(stored) = rec.claim.clone() else {
            return Ok(());
        };
        if Self::adopt_listed(rec, &stored.held()?.record)? {
            self.save(rec).await?;
        }
        Ok(())
    }

    /// Writes `field` = `value` (or removes it) in the shared claim record,
    /// by compare-and-swap from the tip; `false` when the claim is not ours.
    pub(in crate::engine) async fn mark_claim(
        &self,
        rec: &mut CandidateRecord,
        field: &str,
        value: Option<&str>,
    ) -> Result<bool, EngineError> {
        let amended = self
            .amend_claim(rec, |held| {
                if held.record.extra.get(field).and_then(Value::as_str) == value {
                    return None;
                }
                let mut record = held.record.clone();
                match value {
                    Some(v) => {
                        record.extra.insert(field.to_owned(), Value::from(v));
                    }
                    None => {
                        record.extra.remove(field);
                    }
                }
                let intent = Intent::ClaimField {
                    field: field.to_owned(),
                    value: value.map(str::to_owned),
                };
                Some((record, intent))
            })
            .await?;
        match amended {
            Amended::Done => Ok(true),
            Amended::NotHeld => Ok(false),
            Amended::KeptMoving => Err(EngineError::Claim(format!(
                "the claim of {} kept moving while {field} was written",
                rec.family
            ))),
        }
    }

    /// The one way the shared claim record is amended: from its tip, `edit`
    /// says what to write (`None`: the tip already says it) and the intent
    /// recorded before the write; the amended claim is held and saved. A
    /// sibling's renewal moves the tip under us, so the edit is made again
    /// on the new tip, at most [`CAS_ATTEMPTS`] times.
    pub(in crate::engine) async fn amend_claim(
        &self,
        rec: &mut CandidateRecord,
        mut edit: impl FnMut(&HeldClaim) -> Option<(ClaimRecord, Intent)>,
    ) -> Result<Amended, EngineError> {
        for _ in 0..CAS_ATTEMPTS {
            let Some(held) = self.refresh_claim(rec).await? else {
                return Ok(Amended::NotHeld);
            };
            let Some((record, intent)) = edit(&held) else {
                return Ok(Amended::Done);
            };
            self.intend(rec, intent).await?;
            match self
                .book()
                .amend(&held, record)
                .await
                .map_err(EngineError::ClaimOp)?
            {
                Renew::Renewed(h) => {
                    crate::engine::proof::hold(self, rec, &h);
                    self.save(rec).await?;
                    return Ok(Amended::Done);
                }
                Renew::Lost(_) => continue,
            }
        }
        Ok(Amended::KeptMoving)
    }

    /// Adopts the claim's current tip when a sibling moved it (renewal,
    /// bookkeeping) and it is still ours; `true` when it did.
    pub(in crate::engine) async fn adopt_moved_claim(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<bool, EngineError> {
        if rec.variant.is_none() {
            return Ok(false);
        }
        let before = rec.claim.clone();
        Ok(self.refresh_claim(rec).await?.is_some()
            && rec.claim.as_ref().map(|c| &c.sha) != before.as_ref().map(|c: &StoredClaim| &c.sha))
    }

    /// The branch head (a commit with this candidate's trailer) and the
    /// bot's PR of `rec`, when they exist and the record lacks them.
    pub(in crate::engine) async fn adopt_existing(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<(), EngineError> {
        if rec.head.is_none()
            && let Some(tip) = self.branch_tip(&rec.branch).await?
        {
            let trailer = format!("{}{}", crate::engine::config::TRAILER, rec.candidate);
            if tip.message.lines().any(|l| l.trim() == trailer) {
                rec.head = Some(tip.sha);
                rec.pending_commit = None;
            }
        }
        if rec.pull.is_none()
            && let Some(pull) = self.forge.find_pull(&rec.branch).await?
            && self.by_bot(pull.author.as_deref())
        {
            rec.pull = Some(pull.number);
            rec.pull_url = Some(pull.html_url.clone());
            rec.bot_pull = Some(pull.number);
            rec.attempts = {
                let comments = self.forge.list_comments(pull.number).await?;
                self.reported_attempts(rec, &comments, true)
            };
            self.find_owned_runs(rec).await?;
        }
        self.save(rec).await
    }
}
