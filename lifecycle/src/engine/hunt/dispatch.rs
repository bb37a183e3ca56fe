//! Step 2 of 3 of a regression hunt, one step's smoke: a commit on the
//! candidate's head that bumps the family to the step's tag (moving no
//! ref, made as the candidate's own bump is), then its targeted smoke,
//! found again by the identity at the end of its title so a restart never
//! dispatches a step twice.
//!
//! After the plan, and after each recorded step while the search goes on.
//! Reads the base checkout and the smoke runs by title. May write: the
//! step's commit and its smoke dispatch, after the capacity gate and the
//! PR's ownership proof.

use crate::engine::context::Engine;
use crate::engine::error::EngineError;
use crate::engine::forge::Forge as _;
use crate::engine::intent::Intent;
use crate::engine::journal::CandidateRecord;
use crate::engine::proof::Scope;
use crate::engine::write::Writes as _;
use crate::hunt::{Hunt, HuntTag};
use crate::workflow_contract::{klaud_smoke_inputs, smoke_dispatch};
use klaud_planner::image::ImageRef;
use serde_json::Value;

use super::{HUNT_NEWS, HuntProgress, retagged};

impl Engine<'_> {
    /// Dispatches step `step`: a commit on the candidate's head that bumps
    /// the family to `tag` (moving no ref), then its targeted smoke, named
    /// `test_name` (its run found again by `title`).
    pub(super) async fn hunt_dispatch(
        &self,
        rec: &mut CandidateRecord,
        hunt: &Hunt,
        step: u32,
        tag: &HuntTag,
        test_name: &str,
        title: &str,
    ) -> Result<HuntProgress, EngineError> {
        // Not dispatched yet. The gate defers a step; it never ends the
        // candidate for a hunt's sake.
        if let Some(why) = self.capacity_refusal(&rec.family).await? {
            return Ok(HuntProgress::Waiting(format!(
                "hunt step {step} waits for capacity: {why}"
            )));
        }
        let image = retagged(
            &rec.image,
            &hunt.plan().new.tag,
            &tag.tag,
            tag.digest.as_deref(),
        )
        .ok_or_else(|| {
            EngineError::Invalid(format!(
                "the candidate image {} does not end in the hunt's new tag",
                rec.image
            ))
        })?;
        let files = self.hunt_files(rec, &image)?;
        let workflows = self.base_workflows(&rec.base_sha).await?;
        let smoke = match &workflows.smoke {
            Ok(w) => w.as_ref(),
            Err(e) => return Err(EngineError::Invalid(e.clone())),
        };
        let command = crate::hunt::targeted_command(&self.smoke_command(rec)?, &hunt.plan().probe);
        let proof = match self.prove(rec, Scope::Pull).await? {
            Ok(p) => p,
            Err(p) => return Ok(HuntProgress::Candidate(p)),
        };
        let message = format!("klaud hunt: {} at {}", rec.family, tag.tag);
        let head = Self::head(rec)?;
        let sha = self
            .forge
            .commit_files(&proof, &head, &files, &message)
            .await?;
        let wanted = klaud_smoke_inputs(&sha, &command, test_name);
        let plan = smoke_dispatch(
            smoke,
            &wanted,
            &rec.base_branch,
            &self.forge.bot_login(),
            title,
        )
        .map_err(|e| EngineError::Invalid(e.to_string()))?;
        self.intend(rec, Intent::Dispatch(self.config.smoke_workflow.clone()))
            .await?;
        let inputs = Value::Object(plan.inputs);
        match self
            .forge
            .dispatch_run(
                &proof,
                &self.config.smoke_workflow,
                &rec.base_branch,
                &inputs,
            )
            .await
        {
            Ok(_) | Err(crate::engine::forge::ForgeError::Ambiguous(_)) => Ok(
                HuntProgress::Waiting(format!("{HUNT_NEWS}step {step} dispatched at {}", tag.tag)),
            ),
            Err(e) => Err(e.into()),
        }
    }

    /// The family bumped to `image` on the base commit, as the candidate's
    /// own bump is made.
    pub(super) fn hunt_files(
        &self,
        rec: &CandidateRecord,
        image: &str,
    ) -> Result<Vec<(String, Vec<u8>)>, EngineError> {
        let family = self.family(&rec.family)?;
        let to = ImageRef::parse(image)
            .map_err(|e| EngineError::Invalid(format!("hunt image {image:?}: {e}")))?;
        let bump = self
            .repository
            .plan_bump_with(&rec.family, family.image(), &to, &self.config.bump)
            .map_err(|e| EngineError::Invalid(format!("hunt bump of {}: {e}", rec.family)))?;
        Ok(bump
            .edits
            .into_iter()
            .map(|e| (e.path, e.after.into_bytes()))
            .collect())
    }
}
