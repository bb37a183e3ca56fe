//! Publishing a rendered report on the candidate's pull request, once: each
//! part is found by its hidden marker before it is written, so a restart
//! edits or skips instead of posting twice. Also the end already published
//! in a receipt and the deferred pull request of a capacity-deferred
//! candidate.

use crate::engine::context::Engine;
use crate::engine::context::Progress;
use crate::engine::error::EngineError;
use crate::engine::forge::Forge as _;
use crate::engine::intent::Intent;
use crate::engine::journal::CandidateRecord;
use crate::engine::proof::Scope;
use crate::engine::write::Writes as _;
use crate::model::{Outcome, Phase};
use crate::report::{Receipt, RenderedComment, candidate_receipt, find_records};
use klaud_claims::PullNumber;

impl Engine<'_> {
    /// The outcome, phase and note of the bot's receipt for `rec`'s
    /// candidate on PR `number`, if one was published (by any owner run).
    pub(super) async fn published_outcome(
        &self,
        number: PullNumber,
        rec: &CandidateRecord,
    ) -> Result<Option<(Outcome, Phase, Option<String>)>, EngineError> {
        Ok(self
            .bot_receipt(number, rec.candidate.as_str())
            .await?
            .map(|r| (r.result.outcome(), r.result.phase(), r.note)))
    }

    /// The bot's receipt of `candidate` on PR `number`, if one was
    /// published (by any owner run).
    pub(super) async fn bot_receipt(
        &self,
        number: PullNumber,
        candidate: &str,
    ) -> Result<Option<Receipt>, EngineError> {
        let comments = self.forge.list_comments(number).await?;
        Ok(comments
            .iter()
            .filter(|c| self.by_bot(c.author.as_deref()))
            .find_map(|c| candidate_receipt(&c.body, candidate)))
    }

    /// Whether `pull` is a closed PR of the bot that an earlier attempt of
    /// `rec` closed as `capacity-deferred`, or that a person closed and
    /// whose "not this image" was undone (a new PR is opened beside it).
    pub(super) async fn deferred_pull(
        &self,
        rec: &CandidateRecord,
        pull: &super::forge::Pull,
    ) -> Result<bool, EngineError> {
        if pull.state.is_open() || !self.by_bot(pull.author.as_deref()) {
            return Ok(false);
        }
        // A person closed it, and a maintainer undid that "not this
        // image": the candidate gets a new PR beside the closed one.
        if self.config.undone_declines.contains(&pull.number) && !pull.state.is_merged() {
            return Ok(true);
        }
        let comments = self.forge.list_comments(pull.number).await?;
        Ok(comments.iter().any(|c| {
            self.by_bot(c.author.as_deref())
                && candidate_receipt(&c.body, rec.candidate.as_str())
                    .is_some_and(|r| r.result.outcome() == Outcome::CapacityDeferred)
        }))
    }

    /// Whether `rendered`, the report of the run the candidate ends on, may
    /// wait for the finish and go out in one comment with the receipt: one
    /// part, and no line the repository's reuse gate would read (the
    /// receipt comment comes after Klaud's `/reuse-sweep-run`, and a
    /// comment with such a line is one the withdrawal rewrites whole).
    pub(super) fn may_fold(rendered: &[RenderedComment]) -> bool {
        matches!(rendered, [report] if crate::engine::promise::reuse_line_run(&report.body).is_none())
    }

    /// The report kept for the receipt (`CandidateRecord::final_report`),
    /// typed; one that does not read back (a journal written by another
    /// version) is none.
    pub(super) fn kept_report(rec: &CandidateRecord) -> Option<crate::report::AttemptReport> {
        serde_json::from_value(rec.final_report.clone()?).ok()
    }

    /// The report kept for the receipt (`CandidateRecord::final_report`),
    /// posted alone: the end goes on without a receipt comment now (a
    /// regression hunt first, an experiment's section, a receipt edited in
    /// place). Nothing happens when it was already posted.
    pub(super) async fn post_final_report(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<Option<Progress>, EngineError> {
        let Some(report) = Self::kept_report(rec) else {
            return Ok(None);
        };
        let rendered = crate::report::render_report(&report)
            .map_err(|e| EngineError::Invalid(e.to_string()))?;
        if let Some(p) = self.publish(rec, &rendered, Scope::PullOnly).await? {
            return Ok(Some(p));
        }
        rec.final_report = None;
        self.save(rec).await?;
        Ok(None)
    }

    /// Publishes every rendered comment whose marker is not on the PR yet.
    pub(super) async fn publish(
        &self,
        rec: &mut CandidateRecord,
        rendered: &[RenderedComment],
        scope: Scope<'_>,
    ) -> Result<Option<Progress>, EngineError> {
        let Some(number) = rec.pull else {
            return Ok(None);
        };
        let comments = self.report_comments(rec, number).await?;
        // A live report of the same run is replaced in its comment by the
        // final one (its first part); any other existing record is final.
        let live = rendered.iter().find_map(|r| {
            self.live_comment(&comments, &r.key)
                .map(|(c, _)| (c.id, &r.key))
        });
        let missing: Vec<&RenderedComment> = rendered
            .iter()
            .filter(|r| {
                live.is_some_and(|(_, k)| *k == r.key)
                    || !comments.iter().any(|c| {
                        self.by_bot(c.author.as_deref())
                            && live.is_none_or(|(id, _)| id != c.id)
                            && find_records(&c.body)
                                .is_ok_and(|found| found.iter().any(|f| f.key == r.key))
                    })
            })
            .collect();
        if missing.is_empty() {
            return Ok(None);
        }
        let proof = match self.prove(rec, scope).await? {
            Ok(p) => p,
            Err(p) => return Ok(Some(p)),
        };
        for r in missing {
            self.intend(rec, Intent::Comment(r.key.to_string())).await?;
            match live {
                Some((id, k)) if *k == r.key => {
                    if !self
                        .edit_own_comment(rec, &proof, number, id, &r.body)
                        .await?
                    {
                        // A person deleted the live report: the next step
                        // lists the comments and posts the report anew.
                        return Ok(Some(Progress::Waiting(
                            "the live report comment is gone; posting the report anew".into(),
                        )));
                    }
                }
                _ => {
                    let written = self.forge.create_comment(&proof, number, &r.body).await?;
                    Self::remember_comment(rec, written);
                }
            }
        }
        Ok(None)
    }
}
