//! Ownership before every write: [`Engine::prove`] checks the claim's lease
//! (renewing it when due) and that the branch, pull request and run still
//! look as Klaud left them, and answers an
//! [`crate::engine::OwnershipProof`] bound to what the write touches
//! ([`Scope`]). A mismatch ends the candidate as `handoff` or
//! `unexpected-error` (`on_mismatch`); a claim removed or a PR closed by a
//! person ends it without touching their work.

use crate::engine::context::Engine;
use crate::engine::context::Progress;
use crate::engine::error::EngineError;
use crate::engine::forge::Forge as _;
use crate::engine::intent::Intent;
use crate::engine::journal::{CandidateRecord, Ending, Step};
use crate::engine::ownership;
use crate::engine::ownership::{
    Expectation, Mismatch, MismatchKind, OwnershipError, OwnershipProof,
};
use crate::model::Outcome;
use chrono::TimeDelta;
use klaud_claims::{Acquire, HeldClaim, Renew};

/// Which ownership facts a mutation needs checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scope<'a> {
    Claim,
    Branch,
    Pull,
    /// The pull request but not the branch (it may be deleted in cleanup).
    PullOnly,
    Run(u64, &'a str),
}

pub(super) type Proved = Result<OwnershipProof, Progress>;

impl Engine<'_> {
    pub(super) async fn on_mismatch(
        &self,
        rec: &mut CandidateRecord,
        m: Mismatch,
    ) -> Result<Progress, EngineError> {
        // Whoever took the candidate away (`klaud claims release --force`,
        // recovery) may already have published its receipt: that outcome
        // stands, so the receipt, `klaud status` and the dashboard agree.
        if let Some(number) = rec.pull
            && let Some((outcome, phase, note)) = self.published_outcome(number, rec).await?
        {
            rec.ending = Some(Ending {
                outcome,
                phase,
                message: format!("ended elsewhere: the receipt on #{number} says {outcome}"),
                hands_off: true,
                note,
                declined: None,
            });
            rec.step = Step::Finish;
            self.save(rec).await?;
            return Ok(Progress::Advanced(Step::Finish));
        }
        let phase = Self::phase_of(rec.step);
        match m.kind {
            MismatchKind::ClaimRemoved => self.claim_removed_by_hand(rec, m).await,
            MismatchKind::Handoff => {
                // A person took the PR over: Klaud touches nothing, but the
                // PR still says so (the receipt, posted as a reply), so the
                // end is not only in this instance's journal.
                let note = format!(
                    "a person took over: {} is {} (Klaud expected {}); Klaud stopped and left \
                     the pull request as it is",
                    m.what, m.found, m.expected
                );
                self.end(rec, Outcome::Handoff, phase, m.to_string(), true)
                    .await?;
                if let Some(ending) = rec.ending.as_mut() {
                    ending.note = Some(note);
                }
                self.save(rec).await?;
                Ok(Progress::Advanced(Step::Finish))
            }
            MismatchKind::Unexpected => {
                self.end(rec, Outcome::UnexpectedError, phase, m.to_string(), true)
                    .await
            }
        }
    }

    /// The claim ref was deleted and nobody published an ending: a
    /// maintainer released the family by hand. Klaud claims it again only
    /// to let go properly (its runs cancelled, its PR closed with a receipt
    /// saying why, its branch deleted, the claim released), so the family
    /// is not blocked by an orphaned open PR and may be planned again. When
    /// somebody else claimed the family meanwhile it is theirs: hands off.
    pub(super) async fn claim_removed_by_hand(
        &self,
        rec: &mut CandidateRecord,
        m: Mismatch,
    ) -> Result<Progress, EngineError> {
        let phase = Self::phase_of(rec.step);
        let removed = match rec.claim.as_ref() {
            Some(stored) => Some(stored.held()?),
            None => None,
        };
        let ref_name = removed
            .as_ref()
            .map_or_else(|| m.what.clone(), |h| h.ref_name.clone());
        let candidates = removed
            .map(|h| h.record.candidates)
            .filter(|c| !c.is_empty());
        rec.claim = None;
        let family = Self::candidate_id(rec)?.family();
        let book = self.book();
        let mut held = None;
        if let Some(candidates) = candidates {
            self.intend(rec, Intent::AcquireClaim).await?;
            match book
                .acquire(
                    &family,
                    candidates,
                    &self.repository_sha,
                    rec.owner_run,
                    self.config.lease,
                )
                .await
                .map_err(EngineError::ClaimOp)?
            {
                Acquire::Won(h) => held = Some(h),
                Acquire::Occupied(entry) => {
                    held = book
                        .adopt(&entry)
                        .filter(|h| h.record.candidate_ids().contains(&rec.candidate.as_str()));
                }
            }
        }
        let Some(held) = held else {
            let message = format!(
                "{m}; the family was claimed again by someone else before Klaud could let go"
            );
            return self
                .end(rec, Outcome::UnexpectedError, phase, message, true)
                .await;
        };
        hold(self, rec, &held);
        let note = format!(
            "the claim {ref_name} was removed by hand: Klaud takes that as a maintainer's \
             release, stops its runs, closes this pull request and may plan the family again"
        );
        self.end(rec, Outcome::Handoff, phase, m.to_string(), false)
            .await?;
        if let Some(ending) = rec.ending.as_mut() {
            ending.note = Some(note);
        }
        self.save(rec).await?;
        Ok(Progress::Advanced(Step::Finish))
    }

    /// Someone else closed or merged the PR: Klaud stops
    /// touching it. The finish cancels Klaud's own running runs, writes the
    /// receipt and releases the claim, and nothing else (no labels, no
    /// report, no changelog, no sweep wait). Merged ends `validated` when
    /// its sweep was verified, else `handoff`; closed ends `handoff`
    /// naming who closed it.
    pub(super) async fn closed_elsewhere(
        &self,
        rec: &mut CandidateRecord,
        pull: &super::forge::Pull,
    ) -> Result<Progress, EngineError> {
        let phase = Self::phase_of(rec.step);
        let mut declined = None;
        let (outcome, message) = if pull.state.is_merged() {
            let verified = rec.sweep.is_some() && rec.step == Step::Sweep;
            (
                if verified {
                    Outcome::Validated
                } else {
                    Outcome::Handoff
                },
                format!("#{} was merged by someone else", pull.number),
            )
        } else {
            let closer = self.forge.closed_by(pull.number).await?;
            if self.by_bot(closer.as_deref()) {
                // Klaud's own login closed it: another instance that took
                // the claim over (or an operator's forced release), not a
                // person's decision. Its receipt, once posted, is the end.
                let m = Mismatch {
                    kind: MismatchKind::Unexpected,
                    what: format!("state of #{}", pull.number),
                    expected: "open".into(),
                    found: "closed by another Klaud instance, which took the claim over".into(),
                };
                return self.on_mismatch(rec, m).await;
            }
            // A person closed it unmerged: "not this image".
            // Without a name it could be anyone's doing, and nothing is
            // ruled out.
            declined = closer.as_ref().and_then(|by| {
                Some(crate::model::Declined {
                    pull: pull.number,
                    by: by.clone(),
                    family: rec.candidate.family().as_str().to_owned(),
                    image: crate::model::Declined::image_of(&rec.image)?,
                })
            });
            let who = closer.map_or_else(|| "someone else".to_owned(), |l| format!("@{l}"));
            let unmerged = if declined.is_some() {
                " without merging"
            } else {
                ""
            };
            (
                Outcome::Handoff,
                format!("#{} was closed by {who}{unmerged}", pull.number),
            )
        };
        self.end(rec, outcome, phase, message.clone(), false)
            .await?;
        if let Some(ending) = rec.ending.as_mut() {
            ending.note = Some(message);
            ending.declined = declined;
        }
        self.save(rec).await?;
        Ok(Progress::Advanced(Step::Finish))
    }

    /// Runs the ownership check for `scope`. `Err(progress)` means the
    /// candidate ended (mismatch) and the caller must return `progress`.
    pub(super) async fn prove(
        &self,
        rec: &mut CandidateRecord,
        scope: Scope<'_>,
    ) -> Result<Proved, EngineError> {
        if rec.claim.is_none() {
            // An empty journal: the claim may still be ours on GitHub.
            let book = self.book();
            let family = Self::candidate_id(rec)?.family();
            if let Some(entry) = book.inspect(&family).await.map_err(EngineError::ClaimOp)?
                && let Some(held) = book.adopt(&entry)
                && held
                    .record
                    .candidate_ids()
                    .contains(&rec.candidate.as_str())
            {
                hold(self, rec, &held);
            }
        }
        // A write needs lease left (the lease check): a step that has run
        // long renews before it proves.
        if let Some(p) = self.renew(rec).await? {
            return Ok(Err(p));
        }
        let Some(stored) = rec.claim.clone() else {
            let m = Mismatch {
                kind: MismatchKind::Unexpected,
                what: "claim".into(),
                expected: "a claim held by this instance".into(),
                found: "none recorded".into(),
            };
            return Ok(Err(self.on_mismatch(rec, m).await?));
        };
        let held = stored.held()?;
        let branch = rec.branch.clone();
        let head = rec.head.clone();
        let with_branch = matches!(scope, Scope::Branch | Scope::Pull | Scope::Run(..));
        let with_pull = matches!(scope, Scope::Pull | Scope::PullOnly | Scope::Run(..));
        let expect = Expectation {
            claim: &held,
            branch: if with_branch {
                head.as_deref().map(|h| (branch.as_str(), h))
            } else {
                None
            },
            creates: (scope == Scope::Claim).then_some(branch.as_str()),
            pull: if with_pull { rec.pull } else { None },
            run: match scope {
                Scope::Run(id, title) => Some((id, title)),
                _ => None,
            },
        };
        match ownership::check(&self.forge, expect).await {
            Ok(proof) => Ok(Ok(proof)),
            Err(OwnershipError::Mismatch(m)) => Ok(Err(self.on_mismatch(rec, m).await?)),
            Err(OwnershipError::Forge(e)) => Err(e.into()),
        }
    }

    /// Renews the lease when less than half of it is left.
    /// More than half of the lease is left: renewing now would only cost a write.
    pub(super) fn lease_needs_no_renewal(&self, held: &HeldClaim) -> bool {
        let left = held
            .record
            .lease_until
            .map(|u| u - self.clock.now())
            .unwrap_or_else(TimeDelta::zero);
        left * 2 > self.config.lease
    }

    pub(super) async fn renew(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<Option<Progress>, EngineError> {
        let Some(stored) = rec.claim.clone() else {
            return Ok(None);
        };
        if rec.ending.as_ref().is_some_and(|e| e.hands_off) {
            return Ok(None);
        }
        let held = stored.held()?;
        if self.lease_needs_no_renewal(&held) {
            return Ok(None);
        }
        let mut renewed = self
            .book()
            .renew(&held, self.config.lease)
            .await
            .map_err(EngineError::ClaimOp)?;
        // A sibling variant renewed the shared claim first: its tip is ours.
        if matches!(renewed, Renew::Lost(klaud_claims::Lost::Moved(_)))
            && self.adopt_moved_claim(rec).await?
            && let Some(stored) = rec.claim.clone()
        {
            let held = stored.held()?;
            if self.lease_needs_no_renewal(&held) {
                return Ok(None);
            }
            renewed = self
                .book()
                .renew(&held, self.config.lease)
                .await
                .map_err(EngineError::ClaimOp)?;
        }
        match renewed {
            Renew::Renewed(h) => {
                rec.claim = Some(super::journal::StoredClaim::of(&h));
                self.save(rec).await?;
                Ok(None)
            }
            Renew::Lost(klaud_claims::Lost::Gone) => {
                let m = Mismatch {
                    kind: MismatchKind::ClaimRemoved,
                    what: format!("claim {}", held.ref_name),
                    expected: "the claim this instance renews".into(),
                    found: "no claim ref (deleted)".into(),
                };
                Ok(Some(self.on_mismatch(rec, m).await?))
            }
            Renew::Lost(lost) => {
                rec.claim = None;
                let phase = Self::phase_of(rec.step);
                let m = format!("the claim was lost: {lost}");
                Ok(Some(
                    self.end(rec, Outcome::UnexpectedError, phase, m, true)
                        .await?,
                ))
            }
        }
    }
}

pub(in crate::engine) fn hold(_cx: &Engine<'_>, rec: &mut CandidateRecord, held: &HeldClaim) {
    rec.claim = Some(crate::engine::journal::StoredClaim::of(held));
    rec.owner_run = held.record.run_id;
}
