//! Claiming, preparing the bump commit and branch, opening the draft PR.

use crate::engine::forge::Forge as _;
use crate::engine::intent::Intent;
use crate::engine::write::Writes as _;
use klaud_claims::{Acquire, ClaimBook, ClaimCandidate, ClaimEntry, HeldClaim};
use klaud_planner::image::ImageRef;
use klaud_planner::retired::Retirements;

use super::{Engine, EngineError, Progress, Scope, TRAILER};
use crate::engine::forge::ForgeError;
use crate::engine::journal::{CandidateRecord, Step};
use crate::engine::ownership::{Mismatch, MismatchKind};
use crate::model::{Outcome, Phase};
use crate::report::{BumpScope, initial_body};

impl Engine<'_> {
    // -------------------------------------------------------------- claim

    pub(super) async fn step_claim(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<Progress, EngineError> {
        let cid = Self::candidate_id(rec)?;
        let family_id = cid.family();
        let book = self.book();
        let claim_err = EngineError::ClaimOp;
        if let Some(entry) = book.inspect(&family_id).await.map_err(claim_err)? {
            return self.adopt_or_skip(rec, &book, &entry).await;
        }
        // Free family: the candidate may have been finished meanwhile (by
        // another instance, or before the journal was lost).
        if rec.claim.is_none()
            && let Some(pull) = self.forge.find_pull(&rec.branch).await?
        {
            self.rebuild_ending(rec, &pull).await?;
            if rec.ending.is_some() {
                self.save(rec).await?;
                return Ok(Progress::Advanced(rec.step));
            }
        }
        if let Some(p) = self.capacity_deferred(rec, "claiming").await? {
            return Ok(p);
        }
        self.intend(rec, Intent::AcquireClaim).await?;
        let base = self.repository_sha.clone();
        // A family group is bumped as one candidate under its first
        // member's claim ref; the record lists every member so other
        // instances (and the old helper) see each of them as taken.
        // An experiment's variants all run under this one claim: it lists
        // every variant candidate (issue 15).
        let ids: Vec<klaud_claims::CandidateId> = match &rec.variant {
            Some(v) => v.siblings.iter().map(|s| s.candidate.clone()).collect(),
            None => vec![cid.clone()],
        };
        let members = self.bumped_together(&rec.family);
        let candidates = ids
            .iter()
            .flat_map(|id| {
                members
                    .iter()
                    .map(|member| ClaimCandidate::new(&base, member, id.clone()))
            })
            .collect();
        match book
            .acquire(
                &family_id,
                candidates,
                &base,
                rec.owner_run,
                self.config.lease,
            )
            .await
            .map_err(claim_err)?
        {
            Acquire::Won(held) => {
                self.hold(rec, &held);
                rec.step = Step::Prepare;
                self.save(rec).await?;
                Ok(Progress::Advanced(Step::Prepare))
            }
            Acquire::Occupied(entry) => self.adopt_or_skip(rec, &book, &entry).await,
        }
    }

    pub(super) fn hold(&self, rec: &mut CandidateRecord, held: &HeldClaim) {
        rec.claim = Some(crate::engine::journal::StoredClaim::of(held));
        rec.owner_run = held.record.run_id;
    }

    pub(super) async fn adopt_or_skip(
        &self,
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
            self.hold(rec, &held);
            rec.step = Step::Prepare;
            self.save(rec).await?;
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

    // ------------------------------------------------------------ prepare

    pub(super) async fn branch_tip(
        &self,
        branch: &str,
    ) -> Result<Option<klaud_claims::RefTip>, EngineError> {
        self.forge
            .refs()
            .read_ref(&format!("refs/heads/{branch}"))
            .await
            .map_err(|e| ForgeError::refs(format!("read branch {branch}"), e).into())
    }

    /// Adopts the branch tip when it is a commit Klaud made but did not get
    /// to journal (a crash between push and save).
    pub(super) async fn reconcile_head(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<(), EngineError> {
        let Some(pending) = rec.pending_commit.clone() else {
            return Ok(());
        };
        if let Some(tip) = self.branch_tip(&rec.branch).await?
            && tip.sha == pending
        {
            rec.head = Some(pending);
            rec.pending_commit = None;
            self.save(rec).await?;
        }
        Ok(())
    }

    /// What the candidate's bump covers: as recorded when the commit was
    /// made, else planned again from the base checkout (a branch adopted
    /// after the journal was lost). `None` when it cannot be planned.
    pub(super) fn bump_scope(&self, rec: &CandidateRecord) -> Option<BumpScope> {
        if let Some(scope) = &rec.scope {
            return Some(scope.clone());
        }
        let family = self.family(&rec.family).ok()?;
        let to = ImageRef::parse(&rec.image).ok()?;
        self.repository
            .plan_bump_with(&rec.family, family.image(), &to, &self.config.bump)
            .ok()
            .map(|plan| BumpScope::of(&plan))
    }

    /// The changelog's `config-keys`: every key the bump changed (a family
    /// group is bumped together), else the candidate's own key.
    pub(super) fn changelog_keys(&self, rec: &CandidateRecord) -> Vec<String> {
        match self.bump_scope(rec) {
            Some(scope) if !scope.keys.is_empty() => scope.keys,
            _ => vec![rec.key.clone()],
        }
    }

    pub(super) async fn step_prepare(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<Progress, EngineError> {
        if let Some(tip) = self.branch_tip(&rec.branch).await? {
            let trailer = format!("{TRAILER}{}", rec.candidate);
            let ours = rec.head.as_deref() == Some(tip.sha.as_str())
                || rec.pending_commit.as_deref() == Some(tip.sha.as_str())
                || (rec.head.is_none() && tip.message.lines().any(|l| l.trim() == trailer));
            if !ours {
                let m = Mismatch {
                    kind: MismatchKind::Unexpected,
                    what: format!("branch {}", rec.branch),
                    expected: "absent, or a commit Klaud made".into(),
                    found: format!("{} (not a Klaud commit)", tip.sha),
                };
                return self.on_mismatch(rec, m).await;
            }
            rec.head = Some(tip.sha);
            rec.pending_commit = None;
            rec.step = Step::Open;
            self.save(rec).await?;
            return Ok(Progress::Advanced(Step::Open));
        }
        let proof = match self.prove(rec, Scope::Claim).await? {
            Ok(p) => p,
            Err(p) => return Ok(p),
        };
        let commit = match rec.pending_commit.clone() {
            Some(c) => c,
            None => {
                let family = match self.repository.family(&rec.family) {
                    Ok(f) => f,
                    // The base moved on since the plan: the family's key was
                    // removed (or archived) there, so there is nothing to bump.
                    Err(klaud_planner::repo::RepoError::UnknownFamily { .. }) => {
                        let m = format!(
                            "the base branch no longer has {}: it was removed or archived",
                            rec.family
                        );
                        return self
                            .end(rec, Outcome::Retired, Phase::Resolve, m, true)
                            .await;
                    }
                    Err(e) => {
                        return Err(EngineError::Invalid(format!("family {}: {e}", rec.family)));
                    }
                };
                // MODELS.md of the base may have retired the model since the
                // plan (the planner checks the same rule before claiming).
                if let Some(why) = Retirements::read(self.repository).reason(family) {
                    let m = format!("the base branch retires {}: {why}", rec.family);
                    return self
                        .end(rec, Outcome::Retired, Phase::Resolve, m, true)
                        .await;
                }
                let from = family.image().clone();
                let to = match ImageRef::parse(&rec.image) {
                    Ok(i) => i,
                    Err(e) => {
                        let m = format!("candidate image {:?} does not parse: {e}", rec.image);
                        return self
                            .end(rec, Outcome::UnexpectedError, Phase::Resolve, m, true)
                            .await;
                    }
                };
                if from.same_image(&to) {
                    let m = format!("the base branch already uses {}", rec.image);
                    return self
                        .end(rec, Outcome::AlreadyUpdated, Phase::Resolve, m, true)
                        .await;
                }
                let bump =
                    match self
                        .repository
                        .plan_bump_with(&rec.family, &from, &to, &self.config.bump)
                    {
                        Ok(b) => b,
                        Err(e) => {
                            let m = format!("the bump cannot be made: {e}");
                            return self
                                .end(rec, Outcome::UnexpectedError, Phase::Resolve, m, true)
                                .await;
                        }
                    };
                let mut files: Vec<(String, Vec<u8>)> = bump
                    .edits
                    .iter()
                    .map(|e| (e.path.clone(), e.after.clone().into_bytes()))
                    .collect();
                let tag = to.tag().unwrap_or("digest").to_owned();
                let mut message = format!(
                    "Update {} image to {tag}\n\n{} -> {}\n\n",
                    rec.key, rec.old_image, rec.image
                );
                if let Some(v) = rec.variant.clone() {
                    match self.variant_files(rec, &bump, &v) {
                        Ok(extra) => {
                            for (path, after) in extra {
                                match files.iter_mut().find(|(p, _)| *p == path) {
                                    Some(f) => f.1 = after.into_bytes(),
                                    None => files.push((path, after.into_bytes())),
                                }
                            }
                        }
                        Err(m) => {
                            return self
                                .end(rec, Outcome::UnexpectedError, Phase::Resolve, m, true)
                                .await;
                        }
                    }
                    message.push_str(&format!(
                        "Experiment {}, Variant {}:\n{}\n\n",
                        v.experiment,
                        v.name,
                        v.edits
                            .iter()
                            .map(|e| format!("- {e}"))
                            .collect::<Vec<_>>()
                            .join("\n")
                    ));
                }
                message.push_str(&format!("{TRAILER}{}\n", rec.candidate));
                rec.base_sha = self.repository_sha.clone();
                rec.scope = Some(BumpScope::of(&bump));
                self.intend(rec, Intent::CommitBump).await?;
                let sha = self
                    .forge
                    .commit_files(&proof, &rec.base_sha, &files, &message)
                    .await?;
                rec.pending_commit = Some(sha.clone());
                self.save(rec).await?;
                sha
            }
        };
        self.intend(rec, Intent::CreateBranch).await?;
        match self.forge.create_branch(&proof, &rec.branch, &commit).await {
            // Re-read next step: ours (a lost response) or foreign.
            Ok(()) | Err(ForgeError::AlreadyExists(_)) | Err(ForgeError::Ambiguous(_)) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(Progress::Advanced(Step::Prepare))
    }

    /// A variant's extra edits on top of the bump's files; `Err` names
    /// file, line and edit.
    fn variant_files(
        &self,
        rec: &CandidateRecord,
        bump: &klaud_planner::bump::BumpPlan,
        v: &crate::experiment::VariantInfo,
    ) -> Result<Vec<(String, String)>, String> {
        let edits = klaud_planner::variant::parse_edits(&v.edits.join("\n"))
            .map_err(|e| format!("Variant {}: {e}", v.name))?;
        // Recipe paths, like the bump's, are repository-relative.
        let bumped: std::collections::BTreeMap<String, String> = bump
            .edits
            .iter()
            .map(|e| (e.path.clone(), e.after.clone()))
            .collect();
        self.repository
            .apply_variant_edits(&rec.family, &bumped, &edits)
            .map_err(|e| format!("Variant {}: {e}", v.name))
    }

    // --------------------------------------------------------------- open

    pub(super) async fn step_open(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<Progress, EngineError> {
        if let Some(pull) = self.forge.find_pull(&rec.branch).await?
            && !self.deferred_pull(rec, &pull).await?
        {
            if !pull.state.is_open() || !self.by_bot(pull.author.as_deref()) {
                let m = Mismatch {
                    kind: MismatchKind::Unexpected,
                    what: format!("pull request #{} for {}", pull.number, rec.branch),
                    expected: format!("an open PR by {}", self.forge.bot_login()),
                    found: format!(
                        "{} PR by {}",
                        if pull.state.is_open() {
                            "an open"
                        } else {
                            "a closed"
                        },
                        pull.author.as_deref().unwrap_or("nobody")
                    ),
                };
                return self.on_mismatch(rec, m).await;
            }
            rec.pull = Some(pull.number);
            rec.pull_url = Some(pull.html_url);
            rec.step = Step::Baseline;
            self.save(rec).await?;
            return Ok(Progress::Advanced(Step::Baseline));
        }
        let proof = match self.prove(rec, Scope::Branch).await? {
            Ok(p) => p,
            Err(p) => return Ok(p),
        };
        let title = self.title(rec);
        self.intend(rec, Intent::OpenPull).await?;
        match self
            .forge
            .create_draft_pull(
                &proof,
                &title,
                &rec.branch,
                &rec.base_branch,
                &initial_body(),
            )
            .await
        {
            Ok(pull) => {
                rec.pull = Some(pull.number);
                rec.pull_url = Some(pull.html_url);
                rec.pull_opened_here = true;
                // A new PR: no comment of Klaud's yet.
                rec.own_comments = Some(Default::default());
                rec.step = Step::Baseline;
                self.save(rec).await?;
                Ok(Progress::Advanced(Step::Baseline))
            }
            // Look again next step.
            Err(ForgeError::Ambiguous(_)) => Ok(Progress::Advanced(Step::Open)),
            Err(e) => Err(e.into()),
        }
    }
}
