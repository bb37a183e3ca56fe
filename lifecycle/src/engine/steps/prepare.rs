//! Step 2 of 9, `Step::Prepare`: create branch `klaud/auto-<candidate>` at
//! the base with the bump commit on it, in one write (the byte-exact image
//! change in the master files, for every member of a family group, plus an
//! experiment variant's own files).
//!
//! After `claim`, before `open`. Reads the branch tip (a commit of Klaud's,
//! by trailer, is adopted; a branch holding nothing beyond the base gets
//! the commit; anything else is a mismatch; not read before the first
//! write of a record that created its own claim, whose create answers
//! "already exists" when a branch is there) and the base files.
//! May write: the candidate's branch and the bump commit on it, under a
//! proof.

use crate::engine::config::TRAILER;
use crate::engine::context::Engine;
use crate::engine::context::Progress;
use crate::engine::error::EngineError;
use crate::engine::forge::{CompareStatus, Forge as _, ForgeError};
use crate::engine::intent::Intent;
use crate::engine::journal::{CandidateRecord, Step};
use crate::engine::ownership::{Mismatch, MismatchKind, OwnershipProof};
use crate::engine::proof::Scope;
use crate::engine::write::Writes as _;
use crate::model::{Outcome, Phase};
use crate::report::BumpScope;
use klaud_claims::CommitSha;
use klaud_planner::image::ImageRef;
use klaud_planner::retired::Retirements;

pub(in crate::engine) async fn run(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
) -> Result<Progress, EngineError> {
    // Nothing of this lifecycle is on the branch yet when its own claim
    // was just created and no write of the bump was tried: create, not
    // read.
    let first_push = rec.claim_created_here
        && rec.head.is_none()
        && rec.pending_commit.is_none()
        && !matches!(rec.intent, Some(Intent::CreateBranch | Intent::CommitBump));
    let tip = match first_push {
        true => None,
        false => cx.branch_tip(&rec.branch).await?,
    };
    // Where the branch stands when it holds nothing beyond the base: the
    // ref this step creates before its commit, left so by a crash or a
    // lost answer in between.
    let mut empty_at = None;
    if let Some(tip) = tip {
        let trailer = format!("{TRAILER}{}", rec.candidate);
        let ours = rec.head.as_deref() == Some(tip.sha.as_str())
            || rec.pending_commit.as_deref() == Some(tip.sha.as_str())
            || (rec.head.is_none() && tip.message.lines().any(|l| l.trim() == trailer));
        if ours {
            rec.head = Some(tip.sha);
            rec.pending_commit = None;
            rec.step = Step::Open;
            cx.save(rec).await?;
            return Ok(Progress::Advanced(Step::Open));
        }
        if rec.pending_commit.is_some() || !holds_nothing_beyond_base(cx, &tip.sha).await? {
            let m = Mismatch {
                kind: MismatchKind::Unexpected,
                what: format!("branch {}", rec.branch),
                expected: "absent, or a commit Klaud made".into(),
                found: format!("{} (not a Klaud commit)", tip.sha),
            };
            return cx.on_mismatch(rec, m).await;
        }
        empty_at = Some(tip.sha);
    }
    let proof = match cx.prove(rec, Scope::Claim).await? {
        Ok(p) => p,
        Err(p) => return Ok(p),
    };
    // A journal of an earlier version made the commit first and the
    // branch at it after: that commit is the bump.
    if let Some(commit) = rec.pending_commit.clone() {
        create_branch_at(cx, rec, &proof, &commit).await?;
        return Ok(Progress::Advanced(Step::Prepare));
    }
    let (files, message) = match bump_files(cx, rec)? {
        Ok(f) => f,
        Err((outcome, m)) => return cx.end(rec, outcome, Phase::Resolve, m, true).await,
    };
    rec.base_sha = cx.repository_sha.clone();
    match empty_at {
        // No branch yet: created at the base with the bump commit on it,
        // one write where a ref and a commit apart take two.
        None => return commit_bump(cx, rec, &proof, &files, &message, Onto::NewBranch).await,
        Some(at) if at != rec.base_sha => {
            // Left at an older base: moved up to this one, a fast-forward,
            // since it holds nothing the base lacks.
            cx.intend(rec, Intent::CreateBranch).await?;
            let branch = rec.branch.clone();
            match cx
                .forge
                .fast_forward_branch(&proof, &branch, &rec.base_sha)
                .await
            {
                Ok(()) => {}
                Err(ForgeError::NotFastForward(_)) | Err(ForgeError::Ambiguous(_)) => {
                    return Ok(Progress::Advanced(Step::Prepare));
                }
                Err(e) => return Err(e.into()),
            }
        }
        Some(_) => {}
    }
    commit_bump(cx, rec, &proof, &files, &message, Onto::Branch).await
}

/// Creates the candidate's branch at `sha`: `true` when GitHub made it,
/// `false` when only the next step's read of the tip can tell (it existed
/// already, or the answer was lost: ours or someone else's).
async fn create_branch_at(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
    proof: &OwnershipProof,
    sha: &CommitSha,
) -> Result<bool, EngineError> {
    cx.intend(rec, Intent::CreateBranch).await?;
    let branch = rec.branch.clone();
    match cx.forge.create_branch(proof, &branch, sha).await {
        Ok(()) => Ok(true),
        Err(ForgeError::AlreadyExists(_)) | Err(ForgeError::Ambiguous(_)) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Where the bump commit goes.
#[derive(Clone, Copy)]
enum Onto {
    /// A branch created at the base with the commit on it, in one write;
    /// a branch already there takes the commit when it is at the base.
    NewBranch,
    /// The branch, already at the base, moved to the commit in the same
    /// write.
    Branch,
}

/// The bump commit made on the candidate's branch; a refusal, a branch
/// already there or a lost answer is read from the tip next step (the
/// commit carries the candidate's trailer).
async fn commit_bump(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
    proof: &OwnershipProof,
    files: &[(String, Vec<u8>)],
    message: &str,
    onto: Onto,
) -> Result<Progress, EngineError> {
    cx.intend(rec, Intent::CommitBump).await?;
    let branch = rec.branch.clone();
    let base = rec.base_sha.clone();
    let made = match onto {
        Onto::NewBranch => {
            cx.forge
                .create_branch_with_commit(proof, &branch, &base, files, message)
                .await
        }
        Onto::Branch => {
            cx.forge
                .commit_on_branch(proof, &branch, &base, files, message)
                .await
        }
    };
    match made {
        Ok(sha) => {
            rec.head = Some(sha);
            rec.step = Step::Open;
            cx.save(rec).await?;
            Ok(Progress::Advanced(Step::Open))
        }
        Err(ForgeError::NotFastForward(_))
        | Err(ForgeError::AlreadyExists(_))
        | Err(ForgeError::Ambiguous(_)) => Ok(Progress::Advanced(Step::Prepare)),
        Err(e) => Err(e.into()),
    }
}

/// Whether the commit `tip` holds nothing the base lacks (it is the base
/// or behind it): a branch there carries no one's work, and the bump may
/// be made on it.
async fn holds_nothing_beyond_base(cx: &Engine<'_>, tip: &CommitSha) -> Result<bool, EngineError> {
    if *tip == cx.repository_sha {
        return Ok(true);
    }
    let cmp = cx
        .forge
        .compare_commits(cx.repository_sha.as_str(), tip.as_str())
        .await?;
    Ok(matches!(
        cmp.status,
        CompareStatus::Behind | CompareStatus::Identical
    ))
}

/// The bump commit's files (path, new bytes) and message.
type BumpCommit = (Vec<(String, Vec<u8>)>, String);

/// The files and message of the bump commit (a variant's edits on top),
/// with the bump's scope recorded on `rec`; `Ok(Err((outcome, why)))`
/// when there is nothing to bump or it cannot be made, and the candidate
/// ends so.
// Kept whole (about 85 lines): the checks that end the candidate (key
// removed, model retired, image unparsable or already there) stand in
// one place, right before the one bump they guard.
fn bump_files(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
) -> Result<Result<BumpCommit, (Outcome, String)>, EngineError> {
    let family = match cx.repository.family(&rec.family) {
        Ok(f) => f,
        // The base moved on since the plan: the family's key was
        // removed (or archived) there, so there is nothing to bump.
        Err(klaud_planner::repo::RepoError::UnknownFamily { .. }) => {
            let m = format!(
                "the base branch no longer has {}: it was removed or archived",
                rec.family
            );
            return Ok(Err((Outcome::Retired, m)));
        }
        Err(e) => {
            return Err(EngineError::Invalid(format!("family {}: {e}", rec.family)));
        }
    };
    // MODELS.md of the base may have retired the model since the
    // plan (the planner checks the same rule before claiming).
    if let Some(why) = Retirements::read(cx.repository).reason(family) {
        let m = format!("the base branch retires {}: {why}", rec.family);
        return Ok(Err((Outcome::Retired, m)));
    }
    let from = family.image().clone();
    let to = match ImageRef::parse(&rec.image) {
        Ok(i) => i,
        Err(e) => {
            let m = format!("candidate image {:?} does not parse: {e}", rec.image);
            return Ok(Err((Outcome::UnexpectedError, m)));
        }
    };
    if from.same_image(&to) {
        let m = format!("the base branch already uses {}", rec.image);
        return Ok(Err((Outcome::AlreadyUpdated, m)));
    }
    let bump = match cx
        .repository
        .plan_bump_with(&rec.family, &from, &to, &cx.config.bump)
    {
        Ok(b) => b,
        Err(e) => {
            let m = format!("the bump cannot be made: {e}");
            return Ok(Err((Outcome::UnexpectedError, m)));
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
        match variant_files(cx, rec, &bump, &v) {
            Ok(extra) => {
                for (path, after) in extra {
                    match files.iter_mut().find(|(p, _)| *p == path) {
                        Some(f) => f.1 = after.into_bytes(),
                        None => files.push((path, after.into_bytes())),
                    }
                }
            }
            Err(m) => return Ok(Err((Outcome::UnexpectedError, m))),
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
    rec.scope = Some(BumpScope::of(&bump));
    Ok(Ok((files, message)))
}

/// A variant's extra edits on top of the bump's files; `Err` names
/// file, line and edit.
pub(in crate::engine) fn variant_files(
    cx: &Engine<'_>,
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
    cx.repository
        .apply_variant_edits(&rec.family, &bumped, &edits)
        .map_err(|e| format!("Variant {}: {e}", v.name))
}
