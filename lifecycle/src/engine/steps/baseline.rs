//! Step 4 of 9, `Step::Baseline`: freeze the baseline (the incumbent's
//! results the candidate is compared with) into the pull request body,
//! once, with its provenance; also the readiness check asked before a claim
//! ([`Engine::readiness_before_claim`]).
//!
//! After `open`, before `smoke`. Reads the baseline source, the producer
//! runs of its AgentX points (their artifacts, once per run) and the pull
//! request body (a frozen baseline already there is kept: `open` creates
//! the pull request with it, see [`opening_body_with_baseline`]). May
//! write: the pull request body, under a proof, when the block is not
//! there yet (a pull request adopted or opened without it). The baseline lives in the body only:
//! a comment repeating it would be the same table twice in the thread.

use crate::baseline::{Baseline, FamilyKey, attach_evals, baseline_of, readiness_gap};
use crate::dataset::attach_datasets;
use crate::engine::context::Engine;
use crate::engine::context::Progress;
use crate::engine::error::EngineError;
use crate::engine::forge::Forge as _;
use crate::engine::intent::Intent;
use crate::engine::journal::{CandidateRecord, Step};
use crate::engine::proof::Scope;
use crate::engine::steps;
use crate::engine::write::Writes as _;
use crate::model::{Outcome, Phase};
use crate::report::{
    BASELINE_START, BumpScope, FrozenBaseline, Provenance, engine_display, parse_baseline_block,
    render_baseline_block, splice_baseline,
};
use klaud_planner::image::ImageRef;

/// The baseline of `family`'s current image `old_image` as published
/// today: every point, N/A with the reason where there is none (the
/// source failing included).
pub(in crate::engine) async fn baseline_now(
    cx: &Engine<'_>,
    family: &str,
    old_image: &str,
) -> Baseline {
    let date = cx.clock.now().date_naive();
    match cx.family(family) {
        Ok(f) => baseline_of(cx.baseline, f, &cx.config.model_names, old_image, date).await,
        Err(_) => Baseline {
            date,
            image: old_image.to_owned(),
            model: String::new(),
            source_urls: Vec::new(),
            evals: Vec::new(),
            evals_unavailable: None,
            agentx_datasets: Vec::new(),
            unknown_model: None,
            points: Vec::new(),
        },
    }
}

pub(in crate::engine) async fn frozen_now(
    cx: &Engine<'_>,
    rec: &CandidateRecord,
) -> FrozenBaseline {
    let image = ImageRef::parse(&rec.image).ok();
    let old = ImageRef::parse(&rec.old_image).ok();
    let family = cx.family(&rec.family).ok();
    let engine = family
        .zip(image.as_ref())
        .map(|(f, i)| engine_display(&f.entry.framework, &i.repository()))
        .unwrap_or_else(|| "engine".into());
    let mut baseline = baseline_now(cx, &rec.family, &rec.old_image).await;
    if let Some(f) = family {
        let key = FamilyKey::of(f);
        attach_evals(cx.baseline, &key, &mut baseline).await;
        let limits = &cx.config.artifact_limits;
        attach_datasets(&cx.forge, cx.journal, limits, &key, &mut baseline).await;
    }
    FrozenBaseline {
        provenance: Provenance {
            engine,
            old_image: rec.old_image.clone(),
            new_image: rec.image.clone(),
            old_tag: old.as_ref().and_then(|i| i.tag().map(str::to_owned)),
            new_tag: image
                .as_ref()
                .and_then(|i| i.tag().map(str::to_owned))
                .unwrap_or_default(),
            digest: image
                .as_ref()
                .and_then(|i| i.digest().map(str::to_owned))
                .unwrap_or_default(),
            revision: rec.revision.clone(),
            clock: rec.clock.clone(),
            upstream: rec.upstream.clone(),
            not_release_reason: rec.not_release_reason.clone(),
            scope: cx.bump_scope(rec).filter(BumpScope::is_notable),
            versions: rec.versions.clone(),
        },
        baseline,
    }
}

/// The opening body with the baseline frozen into it, as the baseline
/// step would write it: the pull request is created with it, so that step
/// finds it there and edits nothing (one request fewer). The opening body
/// as it is when the block cannot be spliced in (the baseline step then
/// freezes it as before).
pub(in crate::engine) async fn opening_body_with_baseline(
    cx: &Engine<'_>,
    rec: &CandidateRecord,
    opening: String,
) -> Result<String, EngineError> {
    let frozen = frozen_now(cx, rec).await;
    let Ok(body) = splice_baseline(&opening, &render_baseline_block(&frozen)) else {
        return Ok(opening);
    };
    let next = match readiness_gap_of(cx, &frozen) {
        Some(_) => Step::Finish,
        None => Step::Smoke,
    };
    let body = cx.with_experiment_section(rec, next, body).await?;
    Ok(cx.with_footer(&body))
}

/// Why the frozen baseline blocks GPU work, when it is required.
pub(in crate::engine) fn readiness_gap_of(
    cx: &Engine<'_>,
    frozen: &FrozenBaseline,
) -> Option<String> {
    (cx.config.require_baseline && cx.baseline.configured())
        .then(|| readiness_gap(&frozen.baseline))
        .flatten()
}

// Kept whole (about 85 lines): the PR body is read once, and what it
// holds (a frozen record, an empty block, none yet, a malformed one)
// decides every branch that follows.
pub(in crate::engine) async fn run(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
) -> Result<Progress, EngineError> {
    let number = rec
        .pull
        .ok_or_else(|| EngineError::Invalid("baseline without a pull request".into()))?;
    let pull = cx.forge.get_pull(number).await?;
    let frozen = match parse_baseline_block(&pull.body) {
        Ok(Some(f)) => f,
        Ok(None) if pull.body.contains(BASELINE_START) => {
            let m = "the PR body's baseline block has no record".to_owned();
            return cx
                .end(rec, Outcome::UnexpectedError, Phase::Baseline, m, false)
                .await;
        }
        Ok(None) => {
            let frozen = frozen_now(cx, rec).await;
            let block = render_baseline_block(&frozen);
            let body = match splice_baseline(&pull.body, &block) {
                Ok(b) => b,
                // Someone removed the placeholder: the block goes first,
                // their text stays.
                Err(crate::report::SpliceError::NotFound) => {
                    format!("{block}\n{}", pull.body)
                }
                Err(e) => {
                    let m = format!("cannot freeze the baseline into the PR body: {e}");
                    return cx
                        .end(rec, Outcome::UnexpectedError, Phase::Baseline, m, false)
                        .await;
                }
            };
            let next = match readiness_gap_of(cx, &frozen) {
                Some(_) => Step::Finish,
                None => Step::Smoke,
            };
            let body = cx.with_experiment_section(rec, next, body).await?;
            let body = cx.with_footer(&body);
            let proof = match cx.prove(rec, Scope::Pull).await? {
                Ok(p) => p,
                Err(p) => return Ok(p),
            };
            cx.intend(rec, Intent::FreezeBaseline).await?;
            cx.forge.update_pull_body(&proof, number, &body).await?;
            frozen
        }
        Err(e) => {
            let m = format!("the PR body's baseline record is malformed: {e}");
            return cx
                .end(rec, Outcome::UnexpectedError, Phase::Baseline, m, false)
                .await;
        }
    };
    let gap = readiness_gap_of(cx, &frozen);
    rec.frozen = Some(frozen);
    cx.save(rec).await?;
    if let Some(gap) = gap {
        // Before any GPU work: the frozen table in the PR body shows
        // every point and why it is N/A; the receipt names the code.
        let m = format!("readiness-blocked: {gap}");
        cx.end(
            rec,
            Outcome::ReadinessBlocked,
            Phase::Baseline,
            m.clone(),
            false,
        )
        .await?;
        if let Some(ending) = rec.ending.as_mut() {
            ending.note = Some(m);
        }
        cx.save(rec).await?;
        return Ok(Progress::Advanced(Step::Finish));
    }
    steps::smoke::first_attempts(cx, rec).await?;
    rec.step = Step::Smoke;
    cx.save(rec).await?;
    Ok(Progress::Advanced(Step::Smoke))
}

impl Engine<'_> {
    /// Why a new candidate of `family` must not be claimed: its launcher
    /// runs a fixed container whatever the master's image
    /// (`launcher-pins-image`, asked whether or not a baseline is
    /// required: no GPU hour should measure the old container), or a
    /// baseline is required and the one its PR would freeze now is missing
    /// or incomplete (the text starts with the reason code). `None` when
    /// neither holds.
    /// The wave asks this between planning and claiming; the freeze asks
    /// again, so a baseline that disappears in between still ends the
    /// candidate.
    pub fn readiness_before_claim<'f>(
        &'f self,
        family: &'f str,
    ) -> crate::BoxFuture<'f, Option<String>> {
        Box::pin(async move {
            if let Some(gap) = self.launcher_gap(family) {
                return Some(gap);
            }
            if !(self.config.require_baseline && self.baseline.configured()) {
                return None;
            }
            let Ok(current) = self.family(family) else {
                // Not this check's business: the claim step reports it.
                return None;
            };
            let old_image = current.image().to_string();
            readiness_gap(&baseline_now(self, family, &old_image).await)
        })
    }
}
