//! One attempt's outcome, for the smoke and the final sweep alike: how a
//! finished run's conclusion reads ([`classify`]), the one attempt report
//! builder ([`attempt_report`]), the one infrastructure-retry rule
//! ([`infra_retry`]), and the facts a report needs (the frozen baseline,
//! the run's results and failed jobs, what the repair before it changed).

use crate::artifacts::{Artifact, BenchmarkRow, EvalRow, SweepManifest, parse_artifact};
use crate::engine::context::Engine;
use crate::engine::error::EngineError;
use crate::engine::forge::Job;
use crate::engine::forge::{Forge as _, Run, RunConclusion};
use crate::engine::journal::AttemptRecord;
use crate::engine::journal::CandidateRecord;
use crate::model::{AttemptKind, AttemptStatus};
use crate::model::{MAX_INFRA_RETRIES, RunRef};
use crate::report::{
    AttemptReport, FailedJob, FrozenBaseline, LiveJobs, RepairChanges, ReportName, compare,
    compare_evals, parse_baseline_block,
};

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

/// Longest runner name kept: GitHub's are short; a longer one is cut.
const MAX_NODE_CHARS: usize = 128;

/// The jobs among `jobs` that count as failed, with their log pages.
pub(super) fn failed_of(jobs: Vec<Job>) -> Vec<FailedJob> {
    jobs.into_iter()
        .filter_map(|j| {
            let conclusion = j.conclusion?;
            conclusion.counts_as_failure().then_some(FailedJob {
                name: j.name,
                conclusion,
                url: j.html_url,
                node: j
                    .runner_name
                    .map(|n| n.chars().take(MAX_NODE_CHARS).collect()),
                triage: None,
            })
        })
        .collect()
}

/// The report's detail line: which run it is, and whether it failed on
/// infrastructure (rebuilding from GitHub reads `infra` back from it).
fn detail(kind: AttemptKind, infra: bool) -> &'static str {
    match (kind == AttemptKind::FinalSweep, infra) {
        (false, false) => "smoke",
        (false, true) => INFRA_DETAIL,
        (true, false) => "full sweep",
        (true, true) => SWEEP_INFRA_DETAIL,
    }
}

/// What one run of an attempt showed: the parts of its report that differ
/// between a smoke, a final sweep and a live report of either.
pub(super) struct Shown {
    pub(super) kind: AttemptKind,
    pub(super) status: AttemptStatus,
    /// Whether the run failed on infrastructure (said in the detail line).
    pub(super) infra: bool,
    pub(super) run: RunRef,
    pub(super) head: String,
    pub(super) rows: Vec<BenchmarkRow>,
    pub(super) evals: Vec<EvalRow>,
    pub(super) notes: Vec<String>,
    /// What a frozen point without a result in this run says.
    pub(super) missing: &'static str,
    pub(super) failed_jobs: Vec<FailedJob>,
    /// The jobs' progress, in a live report only.
    pub(super) live: Option<LiveJobs>,
    pub(super) repair: Option<RepairChanges>,
}

/// What an attempt's run did against the frozen baseline, as the report
/// of run `run` (its id and attempt name the report's marker). The one
/// place an attempt report is built: the smoke, the final sweep and their
/// live reports all come here.
pub(super) fn attempt_report(
    cx: &Engine<'_>,
    rec: &CandidateRecord,
    run: &Run,
    frozen: &FrozenBaseline,
    shown: Shown,
) -> AttemptReport {
    AttemptReport {
        owner_run: rec.owner_run,
        candidate: rec.candidate.clone(),
        name: ReportName::Run {
            id: run.id,
            attempt: run.attempt,
        },
        kind: Some(shown.kind),
        status: shown.status,
        detail: Some(detail(shown.kind, shown.infra).to_owned()),
        run: Some(shown.run),
        at: cx.clock.now(),
        image: rec.image.clone(),
        head: Some(shown.head),
        sections: compare(&frozen.baseline, &shown.rows, shown.missing),
        evals: compare_evals(&shown.evals, &frozen.baseline),
        notes: shown.notes,
        part: None,
        failed_jobs: shown.failed_jobs,
        live: shown.live,
        repair: shown.repair,
        // Set by the step once the run's failures are kept.
        sick_nodes: None,
    }
}

/// What an infrastructure failure of an attempt's run leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum InfraRetry {
    /// Run it again: this is retry `n` of the attempt.
    Again(u32),
    /// Give up: the run failed on infrastructure this many times in a row.
    GiveUp(u32),
}

/// The one infrastructure-retry rule, for the smoke and the final sweep
/// alike: an attempt whose run failed on infrastructure is run again at
/// most [`MAX_INFRA_RETRIES`] times, never counted as a repair. The
/// failures counted are the reported ones in a row at the end of
/// `attempts`, so each attempt (a repaired head is a new one) has its own
/// retries, as documented ("at most 2 per attempt").
pub(super) fn infra_retry(attempts: &[AttemptRecord]) -> InfraRetry {
    let failures = attempts
        .iter()
        .rev()
        .take_while(|a| a.reported && a.infra)
        .count();
    let failures = u32::try_from(failures).unwrap_or(u32::MAX);
    if failures > MAX_INFRA_RETRIES {
        InfraRetry::GiveUp(failures)
    } else {
        InfraRetry::Again(failures)
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
        Ok(failed_of(self.forge.list_jobs(run).await?))
    }

    /// Downloads and parses a run's artifacts. Unknown artifacts are
    /// skipped; broken ones become notes, never errors.
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
        let playbook = self.playbook_fixes_shown(rec, &cmp.commits).await?;
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
            playbook,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::forge::RunStatus;
    use klaud_claims::CommitSha;

    #[test]
    fn infrastructure_conclusions_are_retried() {
        let run = |c: &str| Run {
            id: 1,
            attempt: 1,
            title: String::new(),
            event: "workflow_dispatch".into(),
            status: RunStatus::Completed,
            conclusion: Some(RunConclusion::parse(c)),
            head_sha: CommitSha::parse(&"0".repeat(40)).unwrap(),
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

    fn attempt(kind: AttemptKind, infra: bool) -> AttemptRecord {
        AttemptRecord {
            kind,
            head: "h".into(),
            dispatched_at: None,
            run: None,
            status: AttemptStatus::Failed,
            infra,
            reported: true,
        }
    }

    #[test]
    fn an_attempt_is_run_again_twice_after_infrastructure_failures_then_given_up() {
        let initial = AttemptKind::Initial { budget: 5 };
        let mut attempts = vec![attempt(initial, true)];
        assert_eq!(infra_retry(&attempts), InfraRetry::Again(1));
        attempts.push(attempt(AttemptKind::InfraRetry { n: 1 }, true));
        assert_eq!(infra_retry(&attempts), InfraRetry::Again(2));
        attempts.push(attempt(AttemptKind::InfraRetry { n: 2 }, true));
        assert_eq!(infra_retry(&attempts), InfraRetry::GiveUp(3));
    }

    #[test]
    fn each_attempt_has_its_own_infrastructure_retries_for_the_smoke_and_the_sweep() {
        // Two sweeps lost to infrastructure, a real failure repaired, then
        // the repaired head's sweep lost once: its first retry, not a third.
        let sweep = AttemptKind::FinalSweep;
        let attempts = vec![
            attempt(sweep, true),
            attempt(sweep, true),
            attempt(sweep, false),
            attempt(AttemptKind::Repair { n: 1, budget: 5 }, false),
            attempt(sweep, true),
        ];
        assert_eq!(infra_retry(&attempts), InfraRetry::Again(1));
        // An unreported run has not failed yet.
        let mut pending = attempt(AttemptKind::Initial { budget: 5 }, true);
        pending.reported = false;
        assert_eq!(infra_retry(&[pending]), InfraRetry::Again(0));
    }
}
