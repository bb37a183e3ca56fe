//! Smoke attempts, infrastructure retries and repairs.

use crate::engine::forge::Forge as _;
use crate::engine::intent::Intent;
use crate::engine::write::Writes as _;
use serde_json::Value;

use super::{
    CLOCK_SKEW, Engine, EngineError, INFRA_DETAIL, Progress, RepairContext, RepairOutcome,
    SWEEP_INFRA_DETAIL, Scope, TRAILER, classify,
};
use crate::artifacts::{Artifact, BenchmarkRow, EvalRow, SweepManifest, parse_artifact};
use crate::engine::forge::{ForgeError, Run, RunQuery};
use crate::engine::journal::{AttemptRecord, CandidateRecord, Step};
use crate::engine::ownership::{Mismatch, MismatchKind};
use crate::model::{AttemptKind, AttemptStatus, MAX_INFRA_RETRIES, Outcome, Phase, RunRef};
use crate::report::{
    AttemptReport, FrozenBaseline, MarkerKey, RepairChanges, ReportName, compare, compare_evals,
    find_record, parse_baseline_block, parse_report, render_report,
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
        let comments = self.comments_with_reports(rec, number).await?;
        rec.attempts = self.reported_attempts(rec, &comments, false);
        for a in &rec.attempts {
            if let AttemptKind::Repair { n, .. } = a.kind {
                rec.repairs = rec.repairs.max(n);
            }
        }
        // Repairs of final sweeps are not smoke attempts: their reports
        // say which repair came before them.
        rec.repairs = rec.repairs.max(self.published_repairs(rec, &comments));
        Ok(())
    }

    /// The published reports of this candidate's owner run, parsed (first
    /// parts only), in publishing order.
    fn published_reports(
        &self,
        rec: &CandidateRecord,
        comments: &[crate::engine::forge::Comment],
    ) -> Vec<AttemptReport> {
        comments
            .iter()
            .filter(|c| self.by_bot(c.author.as_deref()))
            .filter_map(|c| find_record(&c.body).ok().flatten())
            .filter(|f| {
                matches!(&f.key, MarkerKey::Report {
                    owner_run, candidate, name: ReportName::Run { .. }, part,
                } if *owner_run == rec.owner_run
                    && candidate.as_str() == rec.candidate
                    && part.is_none_or(|p| p == 1))
            })
            .filter_map(|f| parse_report(&f).ok())
            .collect()
    }

    /// The highest repair number the published reports name (a smoke's
    /// `Repair n/…` or the `repair` of any report after a repair).
    pub(super) fn published_repairs(
        &self,
        rec: &CandidateRecord,
        comments: &[crate::engine::forge::Comment],
    ) -> u32 {
        self.published_reports(rec, comments)
            .iter()
            .filter_map(|r| match (r.kind, &r.repair) {
                (_, Some(changes)) => Some(changes.n),
                (Some(AttemptKind::Repair { n, .. }), None) => Some(n),
                _ => None,
            })
            .max()
            .unwrap_or(0)
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

    /// The attempts as the published reports tell them (an empty journal),
    /// else the initial smoke attempt. The baseline step does it right
    /// after publishing its report, from the comment list it has just
    /// read; the smoke step only when a record reaches it without.
    pub(super) async fn first_attempts(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<(), EngineError> {
        if !rec.attempts.is_empty() {
            return Ok(());
        }
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
        self.save(rec).await
    }

    pub(super) async fn step_smoke(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<Progress, EngineError> {
        self.first_attempts(rec).await?;
        // The flag and environment audit found that the recipes use what
        // the new engine no longer defines: no GPU run can pass, so none is
        // dispatched. Only before the first dispatch: a run already made
        // (an older record) is seen through.
        if rec.attempts.iter().all(|a| a.run.is_none())
            && let Some((note, _)) = rec.upstream.as_ref().and_then(crate::report::audit_note)
        {
            rec.ending = Some(crate::engine::journal::Ending {
                outcome: Outcome::Incompatible,
                phase: Phase::Targeted,
                message: note.clone(),
                hands_off: false,
                note: Some(note),
            });
            rec.step = crate::engine::journal::Step::Finish;
            self.save(rec).await?;
            return Ok(Progress::Advanced(crate::engine::journal::Step::Finish));
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
                self.intend(rec, Intent::CancelStuckRun(live.id)).await?;
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
            evals: compare_evals(&evals, &frozen.baseline),
            notes,
            part: None,
            failed_jobs: self.failed_jobs(live.id, status).await?,
            live: None,
            repair: self.repair_changes(rec, idx).await?,
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
        // What follows the report needs no new look at GitHub: deciding it
        // in a step of its own would only read the pull request again, in
        // full, since the report just changed it.
        self.after_attempt(rec).await
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
        // An attempt of a record that opened its PR, never dispatched (its
        // `dispatched_at` is saved before any dispatch), has no run to find:
        // the listing, charged every time, is only asked when one may exist.
        let never_dispatched = rec.pull_opened_here && rec.attempts[idx].dispatched_at.is_none();
        let runs = if never_dispatched {
            Vec::new()
        } else {
            self.forge
                .list_runs(&RunQuery {
                    workflow: self.config.smoke_workflow.clone(),
                    event: Some("workflow_dispatch".into()),
                    actor: Some(self.forge.bot_login()),
                    head_sha: None,
                })
                .await?
        };
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
        self.intend(rec, Intent::Dispatch(self.config.smoke_workflow.clone()))
            .await?;
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
            Ok(Some((id, url))) => {
                // A new run is attempt 1; its page, when the dispatch did
                // not say, is read.
                let (attempt, url) = match url {
                    Some(url) => (1, url),
                    None => {
                        let live = self.forge.get_run(id).await?;
                        (live.attempt, live.html_url)
                    }
                };
                rec.attempts[idx].run = Some(RunRef { id, attempt, url });
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
        let last = rec.attempts.last().cloned();
        // A repair follows a failed smoke or a failed final sweep; its end
        // is reported in the phase that failed.
        let phase = last.as_ref().map_or(Phase::Targeted, |a| a.kind.phase());
        // The hook answered this repair with variants (the claim lists
        // them): their race decides, the hook is not asked again.
        if let Some(p) = self.proposal_wait(rec, rec.repairs + 1, phase).await? {
            return Ok(p);
        }
        let Some(hook) = self.repair else {
            let m = "no repair hook is configured".to_owned();
            return self.end(rec, Outcome::Failed, phase, m, false).await;
        };
        let n = rec.repairs + 1;
        let intent = Intent::Repair(n);
        let old_head = Self::head(rec)?;
        let tip = self.branch_tip(&rec.branch).await?;
        let already =
            rec.intent.as_ref() == Some(&intent) && tip.as_ref().is_some_and(|t| t.sha != old_head);
        if !already {
            if let Err(p) = self.prove(rec, Scope::Pull).await? {
                return Ok(p);
            }
            let failed_run = last.as_ref().and_then(|a| a.run.clone());
            let (failed_jobs, artifacts, report) = match &failed_run {
                Some(run) => (
                    self.failed_jobs(run.id, AttemptStatus::Failed).await?,
                    self.forge
                        .list_artifacts(run.id)
                        .await?
                        .into_iter()
                        .map(|a| a.name)
                        .collect(),
                    self.published_report(rec, run).await?,
                ),
                None => (Vec::new(), Vec::new(), Value::Null),
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
                run: failed_run,
                repair: n,
                budget: self.config.repair_budget,
                budget_left: self.config.repair_budget.saturating_sub(n),
                phase,
                report,
                author: self.forge.bot_login(),
                trailer: format!("{TRAILER}{}", rec.candidate),
                failed_jobs,
                artifacts,
            };
            self.intend(rec, intent).await?;
            let outcome = hook.repair(&context).await;
            // The hook pushed (or may have): nothing read before it holds.
            self.forge.forget();
            match outcome {
                Ok(RepairOutcome::Pushed) => {}
                Ok(RepairOutcome::Variants(requests)) => {
                    return self.propose_variants(rec, &context, phase, &requests).await;
                }
                Ok(RepairOutcome::GaveUp(why)) => {
                    let m = format!("the repair hook gave up on repair {n}: {why}");
                    return self.end(rec, Outcome::Failed, phase, m, false).await;
                }
                Err(e) => {
                    let m = format!("the repair hook failed on repair {n}: {e}");
                    return self.end(rec, Outcome::Failed, phase, m, false).await;
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
            return self.end(rec, Outcome::Failed, phase, m, false).await;
        }
        // Which commits are the hook's is read from GitHub (the compare
        // from the recorded head to the tip), never remembered: after a
        // crash the same commits give the same answer.
        if let Some(m) = self
            .foreign_repair_commit(rec, &old_head, &tip.sha, n)
            .await?
        {
            let progress = self.on_mismatch(rec, m).await?;
            // The repair step reads as targeted; a sweep's repair was not.
            if let Some(e) = rec.ending.as_mut()
                && e.phase == Phase::Targeted
                && phase == Phase::FinalSweep
            {
                e.phase = phase;
                self.save(rec).await?;
            }
            return Ok(progress);
        }
        rec.head = Some(tip.sha.clone());
        rec.repairs = n;
        if phase == Phase::FinalSweep {
            // The new head needs its own final sweep (configs/README.md#how-it-works: on the
            // exact head). The push itself starts it (`synchronize`); the
            // final step re-checks the changelog entry and the label.
            rec.sweep = None;
            rec.sweep_requested_at = Some(self.clock.now());
            rec.step = Step::Final;
            self.save(rec).await?;
            return Ok(Progress::Advanced(Step::Final));
        }
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

    /// The first commit between `old` and `new` that is not the repair
    /// hook's (authored by the bot and carrying this candidate's trailer),
    /// as a handoff; `None` when every one is.
    async fn foreign_repair_commit(
        &self,
        rec: &CandidateRecord,
        old: &str,
        new: &str,
        n: u32,
    ) -> Result<Option<Mismatch>, EngineError> {
        let what = format!("head of {} after repair {n}", rec.branch);
        let cmp = self.forge.compare_commits(old, new).await?;
        if cmp.status != crate::engine::CompareStatus::Ahead {
            return Ok(Some(Mismatch {
                kind: MismatchKind::Handoff,
                what,
                expected: format!("commits on top of {old}"),
                found: format!("{new}, {} from {old}", cmp.status),
            }));
        }
        if cmp.total_commits as usize > cmp.commits.len() {
            // GitHub lists at most 250 commits: the rest cannot be checked.
            return Ok(Some(Mismatch {
                kind: MismatchKind::Handoff,
                what,
                expected: "commits Klaud can check one by one".into(),
                found: format!(
                    "{} commits, {} listed",
                    cmp.total_commits,
                    cmp.commits.len()
                ),
            }));
        }
        let trailer = format!("{TRAILER}{}", rec.candidate);
        for c in &cmp.commits {
            let by_bot = self.by_bot(c.author.as_deref());
            let marked = c.message.lines().any(|l| l.trim() == trailer);
            if !by_bot || !marked {
                return Ok(Some(Mismatch {
                    kind: MismatchKind::Handoff,
                    what,
                    expected: format!(
                        "commits by {} carrying \"{trailer}\"",
                        self.forge.bot_login()
                    ),
                    found: format!(
                        "{} by {}{}",
                        c.sha,
                        c.author.as_deref().unwrap_or("no GitHub account"),
                        if marked { "" } else { " without the trailer" }
                    ),
                }));
            }
        }
        Ok(None)
    }

    /// The typed report record of `run` as published on the PR (JSON), or
    /// `null` when it is not there or does not parse.
    async fn published_report(
        &self,
        rec: &CandidateRecord,
        run: &RunRef,
    ) -> Result<Value, EngineError> {
        let Some(number) = rec.pull else {
            return Ok(Value::Null);
        };
        let comments = self.comments_with_reports(rec, number).await?;
        let found = comments
            .iter()
            .filter(|c| self.by_bot(c.author.as_deref()))
            .filter_map(|c| find_record(&c.body).ok().flatten())
            .filter(|f| {
                matches!(&f.key, MarkerKey::Report {
                    owner_run, candidate, name: ReportName::Run { id, attempt }, part,
                } if *owner_run == rec.owner_run
                    && candidate.as_str() == rec.candidate
                    && *id == run.id
                    && *attempt == run.attempt
                    && part.is_none_or(|p| p == 1))
            })
            .find_map(|f| parse_report(&f).ok());
        Ok(found
            .and_then(|r| serde_json::to_value(r).ok())
            .unwrap_or(Value::Null))
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
