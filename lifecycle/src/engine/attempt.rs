//! One attempt's outcome, for the smoke and the final sweep alike: how a
//! finished run's conclusion reads ([`classify`]), the one attempt report
//! builder ([`attempt_report`]), the one infrastructure-retry rule
//! ([`infra_retry`]), and the facts a report needs (the frozen baseline,
//! the run's results and failed jobs, what the repair before it changed).

use crate::artifacts::{Artifact, BenchmarkRow, EvalRow, SweepManifest, parse_artifact};
use crate::engine::context::Engine;
use crate::engine::error::EngineError;
use crate::engine::forge::{Forge as _, Run, RunConclusion};
use crate::engine::journal::CandidateRecord;
use crate::model::{AttemptKind, AttemptStatus};
use crate::report::{FrozenBaseline, RepairChanges, ReportName, parse_baseline_block};

/// The detail line of a smoke report whose run failed on infrastructure;
/// rebuilding from GitHub reads it back as `infra`.
pub(super) const INFRA_DETAIL: &str = "smoke, infrastructure failure";

/// The same for a final sweep.
pub(super) const SWEEP_INFRA_DETAIL: &str = "full sweep, infrastructure failure";

/// Splits a completed run's conclusion into an attempt status and whether
/// it was the infrastructure's fault (retried without counting as repair).
pub(super) fn classify(run: &Run) -> (AttemptStatus, bool) {
    match &run.conclusion {
        Some(RunConclusion::Success) => (AttemptStatus::Passed, false),
        Some(RunConclusion::Failure) => (AttemptStatus::Failed, false),
        // Cancelled by someone else, a lost runner, or by Klaud after the
        // run timeout: never the candidate's fault.
        Some(RunConclusion::Cancelled) => (AttemptStatus::Cancelled, true),
        _ => (AttemptStatus::Failed, true),
    }
}

impl Engine<'_> {
    pub(super) async fn frozen(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<FrozenBaseline, EngineError> {
        if let Some(f) = &rec.frozen {
            return Ok(f.clone());
        }
        let number = rec
            .pull
            .ok_or_else(|| EngineError::Invalid("no pull request".into()))?;
        let pull = self.forge.get_pull(number).await?;
        let frozen = parse_baseline_block(&pull.body)
            .map_err(|e| EngineError::Invalid(format!("PR #{number} baseline: {e}")))?
            .ok_or_else(|| EngineError::Invalid(format!("PR #{number} has no baseline")))?;
        rec.frozen = Some(frozen.clone());
        Ok(frozen)
    }

    /// Downloads and parses a run's artifacts. Unknown artifacts are
    /// skipped; broken ones become notes, never errors.
    /// The jobs of a failed run that did not succeed, with their log
    /// pages; nothing for a run that did not fail.
    pub(super) async fn failed_jobs(
        &self,
        run: u64,
        status: AttemptStatus,
    ) -> Result<Vec<crate::report::FailedJob>, EngineError> {
        if status != AttemptStatus::Failed {
            return Ok(Vec::new());
        }
        Ok(self
            .forge
            .list_jobs(run)
            .await?
            .into_iter()
            .filter_map(|j| {
                let conclusion = j.conclusion?;
                conclusion
                    .counts_as_failure()
                    .then_some(crate::report::FailedJob {
                        name: j.name,
                        conclusion,
                        url: j.html_url,
                    })
            })
            .collect())
    }

    pub(super) async fn collect(
        &self,
        run: u64,
    ) -> Result<
        (
            Vec<BenchmarkRow>,
            Vec<EvalRow>,
            Vec<String>,
            Option<SweepManifest>,
        ),
        EngineError,
    > {
        let mut rows = Vec::new();
        let mut evals = Vec::new();
        let mut notes = Vec::new();
        let mut manifest = None;
        // InferenceX's own comparison (the compare job of `run-sweep.yml`)
        // reads the run-level `results_bmk`: one download instead of one
        // per point. Per-point artifacts are read only when the aggregate
        // is missing, expired, unreadable or empty: a run still going (live
        // reports), or one whose collect-results job failed.
        let (per_point, run_level): (Vec<_>, Vec<_>) = self
            .forge
            .list_artifacts(run)
            .await?
            .into_iter()
            .filter_map(|a| crate::artifacts::ArtifactKind::of(&a.name).map(|kind| (kind, a)))
            .partition(|(kind, _)| kind.is_per_point());
        for (i, (_, a)) in run_level.iter().chain(&per_point).enumerate() {
            if i == run_level.len() && !rows.is_empty() {
                break;
            }
            if a.expired {
                notes.push(format!("Artifact {} expired.", a.name));
                continue;
            }
            let bytes = self.forge.download_artifact(a.id).await?;
            match parse_artifact(&a.name, &bytes, &self.config.artifact_limits) {
                Ok(
                    Artifact::Benchmark { rows: r, .. }
                    | Artifact::AggregatedBenchmarks { rows: r },
                ) => rows.extend(r),
                Ok(Artifact::Evals { rows: r }) => evals.extend(r),
                Ok(Artifact::Manifest(m)) => manifest = Some(m),
                Err(e) => notes.push(format!("Artifact {} unreadable: {e}", a.name)),
            }
        }
        Ok((rows, evals, notes, manifest))
    }

    /// What the repair before attempt `idx` changed, when one came right
    /// before it: the commit subjects and files of the GitHub compare from
    /// the failed attempt's head to this one's.
    pub(super) async fn repair_changes(
        &self,
        rec: &CandidateRecord,
        idx: usize,
    ) -> Result<Option<RepairChanges>, EngineError> {
        // A repair is the only step that moves the head right after a
        // failed attempt (infrastructure retries keep it; the changelog
        // commit follows a passed smoke).
        let after_repair = |i: usize| {
            i > 0 && {
                let (prev, this) = (&rec.attempts[i - 1], &rec.attempts[i]);
                prev.head != this.head
                    && !prev.head.is_empty()
                    && prev.status != AttemptStatus::Passed
                    && !prev.infra
            }
        };
        if idx >= rec.attempts.len() {
            return Ok(None);
        }
        let (n, from) = if after_repair(idx) {
            let n = (1..=idx).filter(|&i| after_repair(i)).count() as u32;
            (n, rec.attempts[idx - 1].head.clone())
        } else if rec.attempts[idx].kind == AttemptKind::FinalSweep {
            // Rebuilt from GitHub (an empty journal): the failed sweep
            // before this one is only in its published report. A sweep
            // with another head before this one was repaired since.
            let Some(number) = rec.pull else {
                return Ok(None);
            };
            let comments = self.comments_with_reports(rec, number).await?;
            let head = &rec.attempts[idx].head;
            let reports = self.published_reports(rec, &comments);
            // Not the first run of this head (a retry): the repair was
            // reported already. This run's own live report does not count.
            let this = rec.attempts[idx].run.as_ref().map(|r| ReportName::Run {
                id: r.id,
                attempt: r.attempt,
            });
            if reports.iter().any(|r| {
                r.head.as_deref() == Some(head.as_str()) && r.live.is_none() && Some(r.name) != this
            }) {
                return Ok(None);
            }
            let Some(failed) = reports.iter().rev().find(|r| {
                r.kind == Some(AttemptKind::FinalSweep)
                    && r.status == AttemptStatus::Failed
                    && r.detail.as_deref() != Some(SWEEP_INFRA_DETAIL)
                    && r.head
                        .as_deref()
                        .is_some_and(|h| h != head && !h.is_empty())
            }) else {
                return Ok(None);
            };
            let n = self.published_repairs(rec, &comments) + 1;
            (n, failed.head.clone().unwrap_or_default())
        } else {
            return Ok(None);
        };
        let (from, to) = (&from, &rec.attempts[idx].head);
        let cmp = self.forge.compare_commits(from, to).await?;
        Ok(Some(RepairChanges {
            n,
            from: from.clone(),
            to: to.clone(),
            subjects: cmp
                .commits
                .iter()
                .map(|c| c.message.lines().next().unwrap_or("").trim().to_owned())
                .collect(),
            files: cmp.files,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::forge::RunStatus;

    #[test]
    fn infrastructure_conclusions_are_retried() {
        let run = |c: &str| Run {
            id: 1,
            attempt: 1,
            title: String::new(),
            event: "workflow_dispatch".into(),
            status: RunStatus::Completed,
            conclusion: Some(RunConclusion::parse(c)),
            head_sha: String::new(),
            actor: None,
            created_at: None,
            html_url: String::new(),
            head_branch: None,
            head_repo: None,
            pull_requests: Vec::new(),
        };
        assert_eq!(classify(&run("success")), (AttemptStatus::Passed, false));
        assert_eq!(classify(&run("failure")), (AttemptStatus::Failed, false));
        for c in ["startup_failure", "timed_out", "cancelled", "stale"] {
            assert!(classify(&run(c)).1, "{c}");
        }
    }
}
