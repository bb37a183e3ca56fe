//! The record of one of Klaud's own PRs that already carries its receipt,
//! rebuilt from GitHub when the journal has none (the store is a cache: an
//! evicted one must not stop the upkeep of validated PRs awaiting their
//! merge, nor the answers to commands on finished PRs).
//!
//! Only what GitHub shows is used: the PR (author, branch, head), the
//! bumped master file on the branch (the image), the receipt (owner run,
//! validated head, sweep run, outcome) and the branch tip (Klaud's own
//! upkeep merges on top of the validated head).

use crate::BoxFuture;
use crate::engine::config::TRAILER;
use crate::engine::context::Engine;
use crate::engine::error::EngineError;
use crate::engine::forge::{CompareStatus, Forge as _, Pull};
use crate::engine::journal::{CandidateRecord, Step};
use crate::engine::target::branch_name;
use klaud_claims::{CandidateId, CommitSha};
use klaud_planner::image::ImageRef;

impl Engine<'_> {
    /// The finished record of `pull` when it is one of Klaud's own
    /// candidate PRs carrying this candidate's receipt; `None` when it is
    /// not Klaud's, names no family of the base, or has no receipt (a
    /// candidate still in flight is resumed from its claim instead). The
    /// record is saved at `done`, so the next pass reads the journal.
    pub fn rebuild_finished<'f>(
        &'f self,
        pull: &'f Pull,
    ) -> BoxFuture<'f, Result<Option<CandidateRecord>, EngineError>> {
        Box::pin(async move {
            if !self.by_bot(pull.author.as_deref()) {
                return Ok(None);
            }
            let Some(candidate) = pull
                .head_ref
                .strip_prefix(branch_name("").as_str())
                .and_then(|id| CandidateId::new(id).ok())
            else {
                return Ok(None);
            };
            let family_id = candidate.family();
            let Some(family) = self
                .repository
                .families()
                .iter()
                .find(|f| f.id == family_id.as_str())
            else {
                return Ok(None);
            };
            let Some(image) = self.branch_image(pull.head_sha.as_str(), family).await? else {
                return Ok(None);
            };
            let mut rec = self.new_record(
                &candidate,
                &family.family,
                family.key.clone(),
                family.image().to_string(),
            );
            rec.image = image;
            self.rebuild_ending(&mut rec, pull).await?;
            // Only a receipt makes the record finished (it is taken
            // hands-off); an interrupted cleanup is finished by the
            // candidate's own resume under its claim.
            if !rec.ending.as_ref().is_some_and(|e| e.hands_off) || rec.step != Step::Finish {
                return Ok(None);
            }
            rec.pull_url = Some(pull.html_url.clone());
            if pull.state.is_open() {
                self.upkept_head(&mut rec, pull).await?;
            }
            rec.claim = None;
            rec.step = Step::Done;
            rec.intent = None;
            self.save(&mut rec).await?;
            Ok(Some(rec))
        })
    }

    /// The head an open PR's upkeep goes on from, and the base it last
    /// took in.
    async fn upkept_head(&self, rec: &mut CandidateRecord, pull: &Pull) -> Result<(), EngineError> {
        // Klaud's own `[skip-sweep]` merges of the base on top of the
        // validated commit carry its trailer: the tip is then Klaud's
        // head, not a person's push that withdraws the reuse line.
        let trailer = format!("{TRAILER}{}", rec.candidate);
        if let Some(validated) = rec.head.clone()
            && validated != pull.head_sha
            && let Some(tip) = self.branch_tip(&rec.branch).await?
            && tip.sha == pull.head_sha
            && tip.message.lines().any(|l| l.trim() == trailer)
            && self
                .only_own_merges_between(&validated, &tip.sha, &trailer)
                .await?
        {
            rec.head = Some(tip.sha);
        }
        // A base tip the branch already contains needs no merge.
        if let Some(head) = rec.head.clone() {
            let cmp = self
                .forge
                .compare_commits(self.repository_sha.as_str(), head.as_str())
                .await?;
            rec.base_sha = cmp.merge_base.unwrap_or(head);
        }
        Ok(())
    }

    /// Whether each commit on the first-parent path from `tip` back to
    /// the `validated` commit is one of Klaud's own base merges (two
    /// parents, the bot's, with this candidate's `trailer`). A trailer
    /// alone is not enough: a person's rebase or cherry-pick keeps it, and
    /// adopting such a head would keep the reuse line on commits the sweep
    /// never ran. Anything else leaves the validated head, and the upkeep
    /// withdraws the line.
    async fn only_own_merges_between(
        &self,
        validated: &CommitSha,
        tip: &CommitSha,
        trailer: &str,
    ) -> Result<bool, EngineError> {
        let cmp = self
            .forge
            .compare_commits(validated.as_str(), tip.as_str())
            .await?;
        // A cut list cannot show the whole path.
        if cmp.status != CompareStatus::Ahead || cmp.total_commits > cmp.commits.len() as u64 {
            return Ok(false);
        }
        let mut at = tip;
        // Each step leaves a commit of the list: at most that many.
        for _ in 0..=cmp.commits.len() {
            if at == validated {
                return Ok(true);
            }
            let Some(commit) = cmp.commits.iter().find(|c| &c.sha == at) else {
                return Ok(false);
            };
            if commit.parents.len() != 2 || !self.by_klaud(commit, trailer) {
                return Ok(false);
            }
            at = &commit.parents[0];
        }
        Ok(false)
    }

    /// The image `family`'s entry runs at `git_ref` (the PR's head, whose
    /// branch a cleanup may have deleted); `None` when the file or the
    /// entry's image is absent or does not read.
    async fn branch_image(
        &self,
        git_ref: &str,
        family: &klaud_planner::repo::Family,
    ) -> Result<Option<String>, EngineError> {
        let path = format!("{}{}", self.repository.prefix(), family.file);
        let Some(bytes) = self.forge.read_file(&path, git_ref).await? else {
            return Ok(None);
        };
        let image = std::str::from_utf8(&bytes)
            .ok()
            .and_then(|text| klaud_planner::yaml::parse_readable(text).ok().flatten())
            .and_then(|doc| {
                doc.get(&family.key)?
                    .get("image")?
                    .as_scalar()
                    .map(str::to_owned)
            });
        Ok(image.filter(|i| ImageRef::parse(i).is_ok()))
    }
}
