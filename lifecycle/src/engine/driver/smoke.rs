//! Smoke attempts, infrastructure retries and repairs.

use crate::engine::forge::Forge as _;
use serde_json::Value;

use super::{
    CLOCK_SKEW, Engine, EngineError, INFRA_DETAIL, Progress, RepairContext, RepairOutcome,
    SWEEP_INFRA_DETAIL, Scope, classify,
};
use crate::artifacts::{Artifact, BenchmarkRow, EvalRow, SweepManifest, parse_artifact};
use crate::engine::forge::{ForgeError, Run, RunQuery};
use crate::engine::journal::{AttemptRecord, CandidateRecord, Step};
use crate::engine::ownership::{Mismatch, MismatchKind};
use crate::model::{AttemptKind, AttemptStatus, MAX_INFRA_RETRIES, Outcome, Phase, RunRef};
use crate::report::{
    AttemptReport, FrozenBaseline, MarkerKey, ReportName, compare, compare_evals, find_record,
    parse_baseline_block, parse_report, render_report,
};
use crate::workflows::SmokeDispatch;

impl Engine<'_> {
    // -------------------------------------------------------------- smoke

    /// Rebuilds the attempts from the report comments (empty journal).
    pub(super) async fn rebuild_attempts(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<(), EngineError> {
        let Some(number) = rec.pull else {
            return Ok(());
        };
        let comments = self.forge.list_comments(number).await?;
        rec.attempts = self.reported_attempts(rec, &comments, false);
        for a in &rec.attempts {
            if let AttemptKind::Repair { n, .. } = a.kind {
                rec.repairs = rec.repairs.max(n);
            }
        }
        Ok(())
    }

    /// The attempts whose reports are published, in publishing order.
    pub(super) fn reported_attempts(
        &self,
        rec: &CandidateRecord,
        comments: &[crate::engine::forge::Comment],
        with_sweep: bool,
    ) -> Vec<AttemptRecord> {
        let mut out = Vec::new();
        for c in comments {
            if !self.by_bot(c.author.as_deref()) {
                continue;
            }
            let Ok(Some(found)) = find_record(&c.body) else {
                continue;
            };
            let MarkerKey::Report {
                owner_run,
                candidate,
                name: ReportName::Run { .. },
                part,
            } = &found.key
            else {
                continue;
            };
            if *owner_run != rec.owner_run
                || candidate.as_str() != rec.candidate
                || part.is_some_and(|p| p != 1)
            {
                continue;
            }
            let Ok(report) = parse_report(&found) else {
                continue;
            };
            let Some(kind) = report.kind else { continue };
            if kind == AttemptKind::FinalSweep && !with_sweep {
                continue;
            }
            out.push(AttemptRecord {
                kind,
                head: report.head.clone().unwrap_or_default(),
                dispatched_at: None,
                run: report.run.clone(),
                status: report.status,
                infra: matches!(
                    report.detail.as_deref(),
                    Some(INFRA_DETAIL | SWEEP_INFRA_DETAIL)
                ),
                // A live report names the attempt's run, not its result.
                reported: !report.is_live(),
            });
        }
        out
    }

    pub(super) fn head(rec: &CandidateRecord) -> Result<String, EngineError> {
        rec.head
            .clone()
            .ok_or_else(|| EngineError::Invalid("no branch head recorded".into()))
    }

    pub(super) async fn step_smoke(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<Progress, EngineError> {
        if rec.attempts.is_empty() {
            self.rebuild_attempts(rec).await?;
            if rec.attempts.is_empty() {
                rec.attempts.push(AttemptRecord {
                    kind: AttemptKind::Initial {
                        budget: self.config.repair_budget,
                    },
                    head: Self::head(rec)?,
                    dispatched_at: None,
                    run: None,
                    status: AttemptStatus::Queued,
                    infra: false,
                    reported: false,
                });
            }
            self.save(rec).await?;
        }
        let idx = rec.attempts.len() - 1;
        if rec.attempts[idx].reported {
            return self.after_attempt(rec).await;
        }
        let head = rec.attempts[idx].head.clone();
        let plan = match self.smoke_plan(rec, &head).await? {
            Ok(p) => p,
            Err(why) => {
                // Before any dispatch: GitHub would refuse it (422) or the
                // run could not test the candidate.
                let m = format!("the smoke workflow cannot be dispatched: {why}");
                return self
                    .end(rec, Outcome::Incompatible, Phase::Targeted, m, false)
                    .await;
            }
        };
        let title = plan.title.clone();
        let run = match rec.attempts[idx].run.clone() {
            Some(r) => r,
            None => return self.find_or_dispatch(rec, idx, plan).await,
        };
        let live = self.forge.get_run(run.id).await?;
        if !live.is_completed() {
            // A run stuck in the queue (no runner) is cancelled after the
            // timeout; its cancellation then counts as an infrastructure
            // failure and is retried.
            let started = live
                .created_at
                .as_deref()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.with_timezone(&chrono::Utc))
                .or(rec.attempts[idx].dispatched_at);
            if started.is_some_and(|t| self.clock.now() - t > self.config.run_timeout) {
                let proof = match self.prove(rec, Scope::Run(live.id, &title)).await? {
                    Ok(p) => p,
                    Err(p) => return Ok(p),
                };
                self.intend(rec, &format!("cancel stuck run {}", live.id))
                    .await?;
                self.forge.cancel_run(&proof, live.id).await?;
                // The cancel is accepted now and takes effect later; the
                // run counts once GitHub shows it completed.
                return Ok(Progress::Waiting(format!(
                    "smoke run {} is being cancelled",
                    live.id
                )));
            }
            if let Some(p) = self.publish_live(rec, idx, &live, "smoke").await? {
                return Ok(p);
            }
            return Ok(Progress::Waiting(format!(
                "smoke run {} is {}",
                live.id, live.status
            )));
        }
        let (status, infra) = classify(&live);
        let (rows, evals, mut notes, _) = self.collect(live.id).await?;
        if let Some(c) = &live.conclusion {
            notes.insert(0, format!("Run conclusion: {c}."));
        }
        let frozen = self.frozen(rec).await?;
        let kind = rec.attempts[idx].kind;
        let run = RunRef {
            id: live.id,
            attempt: live.attempt,
            url: live.html_url.clone(),
        };
        let report = AttemptReport {
            owner_run: rec.owner_run,
            candidate: Self::candidate_id(rec)?,
            name: ReportName::Run {
                id: live.id,
                attempt: live.attempt,
            },
            kind: Some(kind),
            status,
            detail: Some(if infra { INFRA_DETAIL } else { "smoke" }.to_owned()),
            run: Some(run.clone()),
            at: self.clock.now(),
            image: rec.image.clone(),
            head: Some(rec.attempts[idx].head.clone()),
            sections: compare(&frozen.baseline, &rows, "no result in this run"),
            evals: compare_evals(&evals, &[]),
            notes,
            part: None,
            failed_jobs: self.failed_jobs(live.id, status).await?,
            live: None,
        };
        let rendered = render_report(&report).map_err(|e| EngineError::Invalid(e.to_string()))?;
        if let Some(p) = self
            .publish(rec, &rendered, Scope::Run(live.id, &title))
            .await?
        {
            return Ok(p);
        }
        let a = &mut rec.attempts[idx];
        a.run = Some(run);
        a.status = status;
        a.infra = infra;
        a.reported = true;
        self.save(rec).await?;
        Ok(Progress::Advanced(Step::Smoke))
    }

    /// Finds the run this attempt dispatched, or dispatches it. A
    /// dispatched run's `head_sha` is the tip of the dispatched branch, not
    /// the candidate head, so the run is found by what Klaud controls: its
    /// title (which echoes the test name), actor, event, branch, and a
    /// creation time after the dispatch.
    pub(super) async fn find_or_dispatch(
        &self,
        rec: &mut CandidateRecord,
        idx: usize,
        plan: SmokeDispatch,
    ) -> Result<Progress, EngineError> {
        let title = plan.title.as_str();
        let known: Vec<u64> = rec.runs().iter().map(|r| r.id).collect();
        let runs = self
            .forge
            .list_runs(&RunQuery {
                workflow: self.config.smoke_workflow.clone(),
                event: Some("workflow_dispatch".into()),
                actor: Some(self.forge.bot_login()),
                head_sha: None,
            })
            .await?;
        // Clocks of Klaud and GitHub differ a little; a run of an earlier
        // attempt is excluded by id (`known`) anyway.
        let after = rec.attempts[idx].dispatched_at.map(|t| t - CLOCK_SKEW);
        let created_after = |r: &Run| match (after, r.created_at.as_deref()) {
            (Some(after), Some(at)) => chrono::DateTime::parse_from_rfc3339(at)
                .map(|t| t.with_timezone(&chrono::Utc) >= after)
                .unwrap_or(true),
            _ => true,
        };
        // Newest first: the oldest unknown run is the one of this attempt.
        if let Some(found) = runs.iter().rev().find(|r| {
            r.title == title
                && r.event == "workflow_dispatch"
                && self.by_bot(r.actor.as_deref())
                && r.head_branch
                    .as_deref()
                    .is_none_or(|b| b == rec.base_branch)
                && !known.contains(&r.id)
                && created_after(r)
        }) {
            rec.attempts[idx].run = Some(RunRef {
                id: found.id,
                attempt: found.attempt,
                url: found.html_url.clone(),
            });
            rec.attempts[idx].status = AttemptStatus::Running;
            self.save(rec).await?;
            return Ok(Progress::Advanced(Step::Smoke));
        }
        if let Some(at) = rec.attempts[idx].dispatched_at
            && self.clock.now() - at < self.config.dispatch_grace
        {
            return Ok(Progress::Waiting(format!(
                "the smoke run dispatched at {at} is not visible yet"
            )));
        }
        if let Some(p) = self.capacity_deferred(rec, "the smoke dispatch").await? {
            return Ok(p);
        }
        let proof = match self.prove(rec, Scope::Pull).await? {
            Ok(p) => p,
            Err(p) => return Ok(p),
        };
        let inputs = Value::Object(plan.inputs);
        rec.attempts[idx].dispatched_at = Some(self.clock.now());
        self.intend(rec, &format!("dispatch {}", self.config.smoke_workflow))
            .await?;
        match self
            .forge
            .dispatch(
                &proof,
                &self.config.smoke_workflow,
                &rec.base_branch,
                &inputs,
            )
            .await
        {
            Ok(Some(id)) => {
                let live = self.forge.get_run(id).await?;
                rec.attempts[idx].run = Some(RunRef {
                    id,
                    attempt: live.attempt,
                    url: live.html_url,
                });
                rec.attempts[idx].status = AttemptStatus::Queued;
                self.save(rec).await?;
                Ok(Progress::Advanced(Step::Smoke))
            }
            Ok(None) | Err(ForgeError::Ambiguous(_)) => Ok(Progress::Waiting(
                "dispatched; looking for the run by title".into(),
            )),
            Err(e) => Err(e.into()),
        }
    }

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
                (!matches!(conclusion.as_str(), "success" | "skipped" | "neutral")).then_some(
                    crate::report::FailedJob {
                        name: j.name,
                        conclusion,
                        url: j.html_url,
                    },
                )
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
        let mut aggregated = Vec::new();
        let mut evals = Vec::new();
        let mut notes = Vec::new();
        let mut manifest = None;
        for a in self.forge.list_artifacts(run).await? {
            if crate::artifacts::ArtifactKind::of(&a.name).is_none() {
                continue;
            }
            if a.expired {
                notes.push(format!("Artifact {} expired.", a.name));
                continue;
            }
            let bytes = self.forge.download_artifact(a.id).await?;
            match parse_artifact(&a.name, &bytes, &self.config.artifact_limits) {
                Ok(Artifact::Benchmark { rows: r, .. }) => rows.extend(r),
                Ok(Artifact::AggregatedBenchmarks { rows: r }) => aggregated.extend(r),
                Ok(Artifact::Evals { rows: r }) => evals.extend(r),
                Ok(Artifact::Manifest(m)) => manifest = Some(m),
                Err(e) => notes.push(format!("Artifact {} unreadable: {e}", a.name)),
            }
        }
        // Per-point artifacts are the primary source; the aggregate only
        // when a run has no per-point artifacts.
        if rows.is_empty() {
            rows = aggregated;
        }
        Ok((rows, evals, notes, manifest))
    }

    pub(super) async fn after_attempt(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<Progress, EngineError> {
        let Some(last) = rec.attempts.last().cloned() else {
            return Ok(Progress::Advanced(Step::Smoke));
        };
        if last.status == AttemptStatus::Passed {
            rec.step = Step::Final;
            self.save(rec).await?;
            return Ok(Progress::Advanced(Step::Final));
        }
        if last.infra {
            let retries = rec
                .attempts
                .iter()
                .rev()
                .take_while(|a| matches!(a.kind, AttemptKind::InfraRetry { .. }))
                .count() as u32;
            if retries < MAX_INFRA_RETRIES {
                rec.attempts.push(AttemptRecord {
                    kind: AttemptKind::InfraRetry { n: retries + 1 },
                    head: last.head.clone(),
                    dispatched_at: None,
                    run: None,
                    status: AttemptStatus::Queued,
                    infra: false,
                    reported: false,
                });
                self.save(rec).await?;
                return Ok(Progress::Advanced(Step::Smoke));
            }
            let m = format!(
                "the smoke run failed on infrastructure {} times",
                retries + 1
            );
            return self
                .end(rec, Outcome::Failed, Phase::Targeted, m, false)
                .await;
        }
        if self.repair.is_some() && rec.repairs < self.config.repair_budget {
            rec.step = Step::Repair;
            self.save(rec).await?;
            return Ok(Progress::Advanced(Step::Repair));
        }
        let m = if self.repair.is_some() {
            format!(
                "the smoke still fails after {} repairs",
                self.config.repair_budget
            )
        } else {
            "the smoke failed and no repair hook is configured".to_owned()
        };
        self.end(rec, Outcome::Failed, Phase::Targeted, m, false)
            .await
    }

    // ------------------------------------------------------------- repair

    pub(super) async fn step_repair(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<Progress, EngineError> {
        let Some(hook) = self.repair else {
            let m = "no repair hook is configured".to_owned();
            return self
                .end(rec, Outcome::Failed, Phase::Targeted, m, false)
                .await;
        };
        let n = rec.repairs + 1;
        let intent = format!("repair {n}");
        let old_head = Self::head(rec)?;
        let tip = self.branch_tip(&rec.branch).await?;
        let already = rec.intent.as_deref() == Some(intent.as_str())
            && tip.as_ref().is_some_and(|t| t.sha != old_head);
        if !already {
            if let Err(p) = self.prove(rec, Scope::Pull).await? {
                return Ok(p);
            }
            let last = rec.attempts.last().cloned();
            let failed_run = last.as_ref().and_then(|a| a.run.as_ref()).map(|r| r.id);
            let (failed_jobs, artifacts) = match failed_run {
                Some(id) => (
                    self.failed_jobs(id, AttemptStatus::Failed).await?,
                    self.forge
                        .list_artifacts(id)
                        .await?
                        .into_iter()
                        .map(|a| a.name)
                        .collect(),
                ),
                None => (Vec::new(), Vec::new()),
            };
            let context = RepairContext {
                version: super::REPAIR_INPUT_VERSION,
                candidate: rec.candidate.clone(),
                family: rec.family.clone(),
                key: rec.key.clone(),
                image: rec.image.clone(),
                repository: self.forge.repo(),
                branch: rec.branch.clone(),
                head: old_head.clone(),
                pull_request: rec.pull,
                run: last.as_ref().and_then(|a| a.run.clone()),
                repair: n,
                budget: self.config.repair_budget,
                budget_left: self.config.repair_budget.saturating_sub(n),
                report: serde_json::to_value(last.as_ref().map(|a| (&a.kind, a.status)))
                    .unwrap_or(Value::Null),
                failed_jobs,
                artifacts,
            };
            self.intend(rec, &intent).await?;
            match hook.repair(&context).await {
                Ok(RepairOutcome::Pushed) => {}
                Ok(RepairOutcome::GaveUp(why)) => {
                    let m = format!("the repair hook gave up on repair {n}: {why}");
                    return self
                        .end(rec, Outcome::Failed, Phase::Targeted, m, false)
                        .await;
                }
                Err(e) => {
                    let m = format!("the repair hook failed on repair {n}: {e}");
                    return self
                        .end(rec, Outcome::Failed, Phase::Targeted, m, false)
                        .await;
                }
            }
        }
        let Some(tip) = self.branch_tip(&rec.branch).await? else {
            let m = Mismatch {
                kind: MismatchKind::Unexpected,
                what: format!("branch {} after repair {n}", rec.branch),
                expected: "a new head".into(),
                found: "no branch".into(),
            };
            return self.on_mismatch(rec, m).await;
        };
        if tip.sha == old_head {
            let m = format!("the repair hook pushed nothing for repair {n}");
            return self
                .end(rec, Outcome::Failed, Phase::Targeted, m, false)
                .await;
        }
        // The hook pushes as the bot; the new head descends from ours.
        if !tip.parents.contains(&old_head) {
            let m = Mismatch {
                kind: MismatchKind::Handoff,
                what: format!("head of {} after repair {n}", rec.branch),
                expected: format!("a commit on top of {old_head}"),
                found: format!("{} with parents {:?}", tip.sha, tip.parents),
            };
            return self.on_mismatch(rec, m).await;
        }
        rec.head = Some(tip.sha.clone());
        rec.repairs = n;
        rec.attempts.push(AttemptRecord {
            kind: AttemptKind::Repair {
                n,
                budget: self.config.repair_budget,
            },
            head: tip.sha,
            dispatched_at: None,
            run: None,
            status: AttemptStatus::Queued,
            infra: false,
            reported: false,
        });
        rec.step = Step::Smoke;
        self.save(rec).await?;
        Ok(Progress::Advanced(Step::Smoke))
    }
}
