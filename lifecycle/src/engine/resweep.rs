//! A maintainer's `/klaud retry` on a validated PR whose promise was
//! withdrawn (a person pushed on top of the validated commit): the final
//! sweep runs again at the PR's head, through the same path as the first
//! one (`final` labels, `sweep` watches, `finish` authorizes reuse of the
//! new run and replaces the receipt).
//!
//! The record starts again at `Step::Final` under a fresh claim. The reply
//! to the command carries a hidden marker naming the head: with the store
//! lost mid-sweep, a record opened from GitHub finds it while no receipt
//! names that head and resumes the sweep instead of taking the old
//! receipt; the finish step then replaces the old receipt (one receipt
//! per candidate, naming the head and run that now hold).
//!
//! Reads the pull request, the claim and the sweep runs of the head. May
//! write: the claim (acquired, like the claim step) and, under a proof,
//! the sweep label taken off so the final step's label starts a run. Whoever retries is answered once (the commands
//! module), so one retry comment starts one sweep.

use crate::commands::Refusal;
use crate::engine::context::Engine;
use crate::engine::error::EngineError;
use crate::engine::forge::{Comment, Forge as _, Pull, RunConclusion};
use crate::engine::intent::Intent;
use crate::engine::journal::{CandidateRecord, Step};
use crate::engine::proof::Scope;
use crate::engine::target::Target;
use crate::engine::write::Writes as _;
use crate::model::Outcome;
use crate::report::{MarkerKey, Receipt, candidate_receipt, find_record};
use klaud_claims::{Acquire, ClaimCandidate, CommitSha};

const RESWEEP_PREFIX: &str = "<!-- klaud-resweep:";

/// The hidden marker of a reply that started the sweep of `candidate`
/// again at `head`.
pub fn resweep_marker(candidate: &str, head: &CommitSha) -> String {
    format!("{RESWEEP_PREFIX}{candidate}:{head} -->")
}

/// The head named by the bot's newest resweep marker of `candidate` in
/// `comments`, unless a receipt of the candidate names that head already
/// (that sweep ended).
fn pending_head(
    comments: &[Comment],
    candidate: &str,
    by_bot: impl Fn(&Comment) -> bool,
) -> Option<CommitSha> {
    let head = newest_resweep(comments, candidate, &by_bot)?;
    let ended = comments
        .iter()
        .filter(|c| by_bot(c))
        .filter_map(|c| receipt_of(c, candidate))
        .any(|r| r.head.as_ref() == Some(&head));
    (!ended).then_some(head)
}

/// The head the bot's newest resweep marker of `candidate` names.
fn newest_resweep(
    comments: &[Comment],
    candidate: &str,
    by_bot: &impl Fn(&Comment) -> bool,
) -> Option<CommitSha> {
    let prefix = format!("{RESWEEP_PREFIX}{candidate}:");
    comments
        .iter()
        .filter(|c| by_bot(c))
        .filter_map(|c| {
            let at = c.body.find(&prefix)?;
            let rest = &c.body[at + prefix.len()..];
            CommitSha::parse(rest.split(" -->").next()?).ok()
        })
        .next_back()
}

/// The receipt of `candidate` a comment carries.
fn receipt_of(c: &Comment, candidate: &str) -> Option<Receipt> {
    candidate_receipt(&c.body, candidate)
}

/// Whether a receipt naming `head` ends a sweep a `/klaud retry` ran
/// again: the bot's newest resweep marker of `candidate` names that head.
/// What a record rebuilt from GitHub knows of
/// [`CandidateRecord::swept_again`].
fn ends_a_resweep(
    comments: &[Comment],
    candidate: &str,
    head: Option<&CommitSha>,
    by_bot: impl Fn(&Comment) -> bool,
) -> bool {
    head.is_some() && newest_resweep(comments, candidate, &by_bot).as_ref() == head
}

impl Engine<'_> {
    /// A record rebuilt from `receipt` on a PR with `comments`: marks it
    /// swept again when the receipt ends a sweep `/klaud retry` ran again,
    /// so the next retry after a failed one sweeps again (not only lifts
    /// the cooldown), as the lost record would have.
    pub(super) fn rebuild_swept_again(
        &self,
        rec: &mut CandidateRecord,
        comments: &[Comment],
        receipt: &Receipt,
    ) {
        rec.swept_again = ends_a_resweep(
            comments,
            rec.candidate.as_str(),
            receipt.head.as_ref(),
            |c| self.by_bot(c.author.as_deref()),
        );
    }

    /// `/klaud retry` on `rec`, a validated PR whose reuse line was
    /// withdrawn: claims the family again and puts the record back at the
    /// final sweep on the PR's head now. `Ok`: the reply (with the marker
    /// a rebuild finds) and the target the caller drives this pass.
    pub(crate) async fn resweep(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<Result<(String, Target), Refusal>, EngineError> {
        let Some(number) = rec.pull else {
            return Ok(Err(Refusal(
                "Nothing to sweep: the candidate has no PR.".into(),
            )));
        };
        let pull = self.forge.get_pull(number).await?;
        if !pull.state.is_open() {
            return Ok(Err(Refusal(format!(
                "Nothing to sweep: #{number} is not open."
            ))));
        }
        let cid = Self::candidate_id(rec)?;
        let family = cid.family();
        let book = self.book();
        let base = self.repository_sha.clone();
        let candidates = self
            .bumped_together(&rec.family)
            .iter()
            .map(|member| ClaimCandidate::new(base.clone(), member, cid.clone()))
            .collect();
        self.intend(rec, Intent::AcquireClaim).await?;
        let held = match book
            .acquire(
                &family,
                candidates,
                &base,
                self.config.owner_run,
                self.config.lease,
            )
            .await
            .map_err(EngineError::ClaimOp)?
        {
            Acquire::Won(h) => h,
            Acquire::Occupied(entry) => match book.adopt(&entry) {
                Some(h) if h.record.candidate_ids().contains(&rec.candidate.as_str()) => h,
                _ => {
                    return Ok(Err(Refusal(format!(
                        "Not now: family `{}` is claimed by another candidate or instance; retry when it is free.",
                        rec.family
                    ))));
                }
            },
        };
        crate::engine::proof::hold(self, rec, &held);
        let head = pull.head_sha.clone();
        self.restart_at_final(rec, &pull, head.clone());
        self.save(rec).await?;
        // The final step labels a PR without the label; one that still
        // carries it gets no `labeled` event, so unless Klaud's own sweep
        // of this head started already (a retry answered twice) the label
        // is taken off first and the final step puts it back.
        let label = &self.config.sweep_label;
        if pull.labels.iter().any(|l| l == label) && !self.sweep_started(&head).await? {
            let proof = match self.prove(rec, Scope::Pull).await? {
                Ok(p) => p,
                Err(_) => {
                    return Ok(Err(Refusal(
                        "Not swept: the PR or its claim is not Klaud's any more.".into(),
                    )));
                }
            };
            self.intend(rec, Intent::SetSweepLabel).await?;
            self.forge.remove_label(&proof, number, label).await?;
        }
        let reply = format!(
            "{}\nSweeping again: the final sweep runs at {head}, the PR's head now; when it passes, Klaud replaces its receipt and posts `/reuse-sweep-run` with the new run.",
            resweep_marker(cid.as_str(), &head)
        );
        Ok(Ok((reply, rec.target())))
    }

    /// With no record, a sweep a `/klaud retry` started that has not
    /// finished (its reply is newer than the last receipt, at the PR's
    /// head): the record resumes at the final sweep. `false` otherwise.
    pub(super) fn resume_resweep(
        &self,
        rec: &mut CandidateRecord,
        pull: &Pull,
        comments: &[Comment],
    ) -> bool {
        if !pull.state.is_open() {
            return false;
        }
        let Some(head) = pending_head(comments, rec.candidate.as_str(), |c| {
            self.by_bot(c.author.as_deref())
        }) else {
            return false;
        };
        if head != pull.head_sha {
            return false;
        }
        self.restart_at_final(rec, pull, head);
        true
    }

    fn restart_at_final(&self, rec: &mut CandidateRecord, pull: &Pull, head: CommitSha) {
        rec.pull = Some(pull.number);
        rec.pull_url = Some(pull.html_url.clone());
        rec.head = Some(head);
        rec.pending_commit = None;
        rec.pending_branch_commit = None;
        rec.ending = None;
        rec.sweep = None;
        rec.sweep_requested_at = None;
        rec.uncovered.clear();
        rec.upkeep = None;
        rec.intent = None;
        rec.swept_again = true;
        rec.step = Step::Final;
    }

    /// Whether Klaud's own sweep of `head` started and may still pass (not
    /// cancelled or skipped). A run the person's push started is theirs:
    /// the ownership check writes no report on it.
    async fn sweep_started(&self, head: &CommitSha) -> Result<bool, EngineError> {
        let runs = self
            .forge
            .list_runs(&crate::engine::steps::sweep::sweep_runs(self, head))
            .await?;
        Ok(runs.iter().any(|r| {
            self.by_bot(r.actor.as_deref())
                && !matches!(
                    r.conclusion,
                    Some(RunConclusion::Cancelled | RunConclusion::Skipped)
                )
        }))
    }

    /// The comment of `rec`'s receipt (`key`) that a sweep run again after
    /// `/klaud retry` replaces: one naming another head than `rec`'s, when
    /// a resweep marker names `rec`'s head. `None` otherwise.
    pub(super) fn superseded_receipt(
        &self,
        rec: &CandidateRecord,
        comments: &[Comment],
        key: &MarkerKey,
    ) -> Option<u64> {
        let head = rec.head.as_ref()?;
        let by_bot = |c: &Comment| self.by_bot(c.author.as_deref());
        if newest_resweep(comments, rec.candidate.as_str(), &by_bot).as_ref() != Some(head) {
            return None;
        }
        comments
            .iter()
            .filter(|c| by_bot(c))
            .find(|c| {
                find_record(&c.body)
                    .ok()
                    .flatten()
                    .is_some_and(|f| &f.key == key)
                    && receipt_of(c, rec.candidate.as_str())
                        .is_some_and(|r| r.head.as_ref() != Some(head))
            })
            .map(|c| c.id)
    }
}

/// Whether `/klaud retry` on `rec` sweeps again: validated, finished, and
/// its reuse line withdrawn after a person's push; or a sweep run again
/// that failed, which left the PR to the person (who may have pushed a
/// fix since).
pub fn sweeps_again(rec: &CandidateRecord) -> bool {
    let ending = rec.ending.as_ref().filter(|_| rec.step == Step::Done);
    ending.is_some_and(|e| {
        (e.outcome == Outcome::Validated
            && rec.upkeep.as_ref().is_some_and(|u| u.withdrawn.is_some()))
            || (rec.swept_again
                && e.outcome == Outcome::Failed
                && e.phase == crate::model::Phase::FinalSweep
                // A person's end (hands off, with their note) leaves the PR
                // with them; an end read back from the receipt has no note.
                && !(e.hands_off && e.note.is_some()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comment(id: u64, body: &str) -> Comment {
        Comment {
            id,
            body: body.into(),
            author: Some("klaud".into()),
            author_association: None,
        }
    }

    #[test]
    fn a_resweep_marker_names_its_candidate_and_head() {
        let head = CommitSha::parse(&"b".repeat(40)).expect("sha");
        let cand = "0123456789abcdef-0123456789abcdef";
        let started = [comment(
            2,
            &format!("{}\nSweeping again", resweep_marker(cand, &head)),
        )];
        let all = |_: &Comment| true;
        assert_eq!(pending_head(&started, cand, all), Some(head));
        assert_eq!(pending_head(&started, "other", all), None);
        assert_eq!(pending_head(&started, cand, |_| false), None);
        assert_eq!(pending_head(&[comment(1, "no marker")], cand, all), None);
    }

    #[test]
    fn a_receipt_at_the_head_a_resweep_marker_names_ends_a_resweep() {
        let old = CommitSha::parse(&"a".repeat(40)).expect("sha");
        let head = CommitSha::parse(&"b".repeat(40)).expect("sha");
        let cand = "0123456789abcdef-0123456789abcdef";
        let marked = [comment(
            2,
            &format!("{}\nSweeping again", resweep_marker(cand, &head)),
        )];
        let all = |_: &Comment| true;
        assert!(ends_a_resweep(&marked, cand, Some(&head), all));
        // The first sweep's receipt, another candidate's marker, a marker
        // a person wrote, or no head: not a resweep's end.
        assert!(!ends_a_resweep(&marked, cand, Some(&old), all));
        assert!(!ends_a_resweep(&marked, "other", Some(&head), all));
        assert!(!ends_a_resweep(&marked, cand, Some(&head), |_| false));
        assert!(!ends_a_resweep(&marked, cand, None, all));
        assert!(!ends_a_resweep(&[], cand, Some(&head), all));
    }
}
