//! Step 3 of 3 of a regression hunt, a step's result: when a step's run
//! ended, its verdict (and, for a metric probe, the value read from its
//! `results_bmk`) is recorded on the PR, and the search moves on; once it
//! is over, the drive in this module's parent publishes the end.
//!
//! After a step's run ended. Reads the run and its artifacts. May write:
//! the step's record comment on the PR, under a proof.

use crate::artifacts::{AGG_BMK_ARTIFACT, Artifact, parse_artifact};
use crate::engine::context::Engine;
use crate::engine::error::EngineError;
use crate::engine::forge::{Forge as _, RunConclusion};
use crate::engine::journal::CandidateRecord;
use crate::hunt::{Hunt, HuntPlan, HuntTag, Probe, StepRecord, Verdict, measure, render_step};
use crate::report::MarkerKey;

use super::{HUNT_NEWS, HuntProgress};

impl Engine<'_> {
    /// Records step `step` at `tag` from its ended `run`: its verdict (and
    /// value, for a metric probe) on the PR.
    pub(super) async fn hunt_record(
        &self,
        rec: &mut CandidateRecord,
        key: MarkerKey,
        hunt: &Hunt,
        step: u32,
        tag: &HuntTag,
        run: &crate::engine::forge::Run,
    ) -> Result<HuntProgress, EngineError> {
        let (verdict, value, note) = match &run.conclusion {
            Some(RunConclusion::Success) => {
                let value = self.hunt_value(run.id, hunt.plan()).await?;
                let note = value.as_ref().err().cloned().unwrap_or_default();
                let value = value.ok().flatten();
                (hunt.verdict_of(true, value), value, note)
            }
            Some(RunConclusion::Failure) => (Verdict::Bad, None, "failure".to_owned()),
            other => (
                Verdict::Infra,
                None,
                other
                    .as_ref()
                    .map_or("no conclusion".to_owned(), |c| c.to_string()),
            ),
        };
        let record = StepRecord {
            step,
            tag: tag.tag.clone(),
            run: Some(run.id),
            verdict,
            value,
            note: crate::model::shorten(&note, 200),
        };
        let body = render_step(&key, hunt.plan(), &record);
        self.hunt_publish(
            rec,
            key,
            body,
            &format!(
                "{HUNT_NEWS}step {step} at {}: {}",
                tag.tag,
                match verdict {
                    Verdict::Good => "good",
                    Verdict::Bad => "bad",
                    Verdict::Infra => "infrastructure failure, no evidence",
                    Verdict::Gone => "no longer served",
                }
            ),
        )
        .await
    }

    /// The point's value from a finished run's `results_bmk`: `Ok(None)`
    /// when the probe reads no row, `Err` why the row is not there.
    pub(super) async fn hunt_value(
        &self,
        run: u64,
        plan: &HuntPlan,
    ) -> Result<Result<Option<f64>, String>, EngineError> {
        let Probe::Metric {
            metric,
            at: Some(at),
            ..
        } = &plan.probe
        else {
            return Ok(Ok(None));
        };
        let artifacts = self.forge.list_artifacts(run).await?;
        let Some(a) = artifacts
            .iter()
            .find(|a| a.name == AGG_BMK_ARTIFACT && !a.expired)
        else {
            return Ok(Err(format!("run {run} uploaded no {AGG_BMK_ARTIFACT}")));
        };
        let bytes = self.forge.download_artifact(a.id).await?;
        Ok(
            match parse_artifact(AGG_BMK_ARTIFACT, &bytes, &self.config.artifact_limits) {
                Ok(Artifact::AggregatedBenchmarks { rows }) => measure(&rows, at, *metric)
                    .map(Some)
                    .map_err(|e| e.to_string()),
                Ok(_) => Err(format!("{AGG_BMK_ARTIFACT} is not a benchmark list")),
                Err(e) => Err(e.to_string()),
            },
        )
    }
}
