//! Step 2 of 9, `Step::Prepare`: make the bump commit (the byte-exact image
//! change in the master files, for every member of a family group, plus an
//! experiment variant's own files) and push branch `klaud/auto-<candidate>`.
//!
//! After `claim`, before `open`. Reads the branch tip (a commit of Klaud's,
//! by trailer, is adopted; anything else is a mismatch; not read before the
//! first push of a record that created its own claim, whose create answers
//! "already exists" when a branch is there) and the base files.
//! May write: the bump commit and the candidate's branch, under a proof.

use crate::engine::config::TRAILER;
use crate::engine::context::Engine;
use crate::engine::context::Progress;
use crate::engine::error::EngineError;
use crate::engine::forge::ForgeError;
use crate::engine::intent::Intent;
use crate::engine::journal::{CandidateRecord, Step};
use crate::engine::ownership::{Mismatch, MismatchKind};
use crate::engine::proof::Scope;
use crate::engine::write::Writes as _;
use crate::model::{Outcome, Phase};
use crate::report::BumpScope;
use klaud_planner::image::ImageRef;
use klaud_planner::retired::Retirements;

pub(in crate::engine) async fn run(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
) -> Result<Progress, EngineError> {
    // Nothing of this lifecycle is on the branch yet when its own claim
    // was just created and no commit of it was made: create, not read.
    let first_push = rec.claim_created_here && rec.head.is_none() && rec.pending_commit.is_none();
    let tip = match first_push {
        true => None,
        false => cx.branch_tip(&rec.branch).await?,
    };
    if let Some(tip) = tip {
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
            return cx.on_mismatch(rec, m).await;
        }
        rec.head = Some(tip.sha);
        rec.pending_commit = None;
        rec.step = Step::Open;
        cx.save(rec).await?;
        return Ok(Progress::Advanced(Step::Open));
    }
    let proof = match cx.prove(rec, Scope::Claim).await? {
        Ok(p) => p,
        Err(p) => return Ok(p),
    };
    let commit = match rec.pending_commit.clone() {
        Some(c) => c,
        None => {
            let (files, message) = match bump_files(cx, rec)? {
                Ok(f) => f,
                Err((outcome, m)) => return cx.end(rec, outcome, Phase::Resolve, m, true).await,
            };
            rec.base_sha = cx.repository_sha.clone();
            cx.intend(rec, Intent::CommitBump).await?;
            let sha = cx
                .forge
                .commit_files(&proof, &rec.base_sha, &files, &message)
                .await?;
            rec.pending_commit = Some(sha.clone());
            cx.save(rec).await?;
            sha
        }
    };
    cx.intend(rec, Intent::CreateBranch).await?;
    match cx.forge.create_branch(&proof, &rec.branch, &commit).await {
        // Re-read next step: ours (a lost response) or foreign.
        Ok(()) | Err(ForgeError::AlreadyExists(_)) | Err(ForgeError::Ambiguous(_)) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(Progress::Advanced(Step::Prepare))
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
