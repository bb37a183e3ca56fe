//! A regression hunt's steps on the candidate's PR (the search
//! itself is the pure [`crate::hunt`]). Where it sits: beside the steps,
//! while the candidate's claim is held and its PR open. What it reads: the
//! bot's own comments on the PR (the hunt's records; nobody else's count),
//! the smoke runs by title, a finished step's `results_bmk`. A maintainer's
//! `/klaud stop` reaches it only as the candidate's hand-off: the commands
//! module is the one reader of commands and of who may give them, so a
//! failed permission lookup is refused there with a reply and never fails
//! a hunt step. What it may write: the hunt's comments, one commit per
//! step that moves no ref (on the candidate's head, which is all the
//! ownership proof allows a commit on: the files of the family's bump from
//! the base image to the step's tag, made as the candidate's own bump is),
//! and that step's smoke dispatch — each after the capacity gate and the
//! PR's ownership proof.
//!
//! Each call does at most one of: publish the plan, record a finished
//! step, dispatch the next step, publish the end. The next step's run is
//! found by the identity at the end of its title
//! (`… · klaud-hunt-<owner run>-<candidate>-h<n>-s<k>`) before anything is
//! dispatched, so a restart with the journal kept or
//! cleared never runs a step twice. A hunt never changes the candidate's
//! step or what it concluded (its writes record their intents in the
//! record like any other).
//!
//! Who calls it: the finish step ([`Engine::hunt_before_finish`]) while
//! the PR is still open and the claim held, when `[hunt]` applies to its
//! family and the candidate failed for real or validated with a point of
//! its final sweep regressed beyond its band (that point is then what each
//! step measures, its smoke narrowed to it), or when the PR already carries
//! a hunt's plan (a maintainer's `/klaud hunt`). The tags a plan searches
//! come from the registry through the [`HuntTags`] port.

use crate::artifacts::{AGG_BMK_ARTIFACT, Artifact, parse_artifact};
use crate::engine::context::Engine;
use crate::engine::context::Progress;
use crate::engine::error::EngineError;
use crate::engine::forge::{Forge as _, RunConclusion, RunEvent};
use crate::engine::intent::Intent;
use crate::engine::journal::CandidateRecord;
use crate::engine::proof::Scope;
use crate::engine::write::Writes as _;
use crate::hunt::{
    Hunt, HuntPlan, HuntResult, HuntTag, Next, Probe, StepRecord, Trigger, Verdict, measure,
    render_end, render_plan, render_step,
};
use crate::report::{HuntName, MarkerKey, RenderedComment};
use crate::workflow_contract::{klaud_smoke_inputs, smoke_dispatch};
use klaud_claims::PullNumber;
use klaud_planner::image::ImageRef;
use serde_json::Value;

/// What every hunt smoke's test name (and so its run title) carries
/// before its identity.
const HUNT_ID: &str = "klaud-hunt-";

/// What one call of [`Engine::hunt_step`] did.
#[derive(Debug)]
pub enum HuntProgress {
    /// The PR has no hunt and none was asked to start.
    NoHunt,
    /// It moved the hunt on or waits for its run (what it did, or why).
    Waiting(String),
    /// The hunt is over (its end is published).
    Ended(HuntResult),
    /// The candidate itself ended (an ownership mismatch): return this.
    Candidate(Progress),
}

/// How the waits that report a hunt's news begin (planned, a step
/// dispatched, a step's verdict), as against its plain waits (a step
/// running, the capacity gate): what a terminal story shows.
const HUNT_NEWS: &str = "regression hunt: ";

/// Whether a candidate's wait reports a hunt's news (it starts `regression hunt: `).
pub fn is_hunt_news(waiting: &str) -> bool {
    waiting.starts_with(HUNT_NEWS)
}

/// The identity of step `step` of hunt `hunt`'s smoke: the end of its
/// test name and so of its run title.
pub fn hunt_test_name(owner_run: u64, candidate: &str, hunt: u32, step: u32) -> String {
    format!("{HUNT_ID}{owner_run}-{candidate}-h{hunt}-s{step}")
}

/// The smoke's `test-name` input: `<family key> · hunt <n> step <k> at <tag>
/// · <identity>`, so the Actions tab names the family like a candidate's
/// smoke does; the identity stays last, where the hunt finds it.
fn hunt_run_label(key: &str, hunt: u32, step: u32, tag: &str, id: &str) -> String {
    let key: String = key.split_whitespace().collect::<Vec<_>>().join(" ");
    format!("{key} · hunt {hunt} step {step} at {tag} · {id}")
}

/// Whether a run title ends with a hunt smoke's identity `id` (after a
/// space, or is exactly it), whatever the repository's `run-name` puts
/// before the test name.
fn is_hunt_title(title: &str, id: &str) -> bool {
    title
        .strip_suffix(id)
        .is_some_and(|before| before.is_empty() || before.ends_with(' '))
}

impl Engine<'_> {
    /// Advances the candidate's hunt by one thing (see the module doc).
    /// `start` is the plan to publish when the PR has no hunt yet;
    /// `week_used` the hunt runs the repository used in the last seven days.
    pub async fn hunt_step(
        &self,
        rec: &mut CandidateRecord,
        start: Option<&HuntPlan>,
        week_used: u32,
    ) -> Result<HuntProgress, EngineError> {
        self.hunt_step_with(rec, start, week_used, false).await
    }

    /// [`Engine::hunt_step`]; `stop`: the candidate was handed off (a
    /// maintainer's `/klaud stop` or an operator's hand-off). Rebuilds
    /// the hunt from the PR, then does one thing: publish the plan or the
    /// end, record the step whose run ended, or dispatch the next one.
    // Kept whole (about 90 lines): the rebuild and the choice of the one
    // action read best in one place; each branch returns.
    async fn hunt_step_with(
        &self,
        rec: &mut CandidateRecord,
        start: Option<&HuntPlan>,
        week_used: u32,
        stop: bool,
    ) -> Result<HuntProgress, EngineError> {
        let Some(number) = rec.pull else {
            return Ok(HuntProgress::NoHunt);
        };
        let cand = Self::candidate_id(rec)?;
        let comments = self.forge.list_comments(number).await?;
        let ours: Vec<&str> = comments
            .iter()
            .filter(|c| self.by_bot(c.author.as_deref()))
            .map(|c| c.body.as_str())
            .collect();
        let rebuilt = Hunt::from_comments(&cand, ours)
            .map_err(|e| EngineError::Invalid(format!("the hunt on PR #{number}: {e}")))?;
        let key = |name| MarkerKey::Hunt {
            owner_run: rec.owner_run,
            candidate: cand.clone(),
            name,
        };
        let Some(rebuilt) = rebuilt else {
            let Some(plan) = start else {
                return Ok(HuntProgress::NoHunt);
            };
            let hunt = Hunt::new(plan.clone())
                .map_err(|e| EngineError::Invalid(format!("hunt for {}: {e}", rec.family)))?;
            let key = key(HuntName::Plan { hunt: 1 });
            let body = render_plan(&key, hunt.plan());
            let served = hunt.plan().tags.iter().filter(|t| t.digest.is_some());
            let news = format!(
                "{HUNT_NEWS}planned over {} served tags between {} and {} (budget {} runs)",
                served.count(),
                hunt.plan().old.tag,
                hunt.plan().new.tag,
                hunt.plan().budget
            );
            return self.hunt_publish(rec, key, body, &news).await;
        };
        let n = rebuilt.number;
        let hunt = &rebuilt.hunt;
        let week_left = self.config.hunt.weekly_budget.saturating_sub(week_used);
        let (step, tag) = match hunt.next(week_left, stop) {
            Next::Done(result) => {
                if rebuilt.ended.is_none() {
                    let key = key(HuntName::End { hunt: n });
                    let body = render_end(&key, hunt.plan(), &result);
                    if let HuntProgress::Candidate(p) =
                        self.hunt_publish(rec, key, body, "").await?
                    {
                        return Ok(HuntProgress::Candidate(p));
                    }
                }
                return Ok(HuntProgress::Ended(result));
            }
            Next::Try { step, tag } => (step, tag.clone()),
        };
        let id = hunt_test_name(rec.owner_run, cand.as_str(), n, step);
        let test_name = hunt_run_label(&rec.key, n, step, &tag.tag, &id);
        let title = format!("e2e Test - {test_name}");
        let runs = self.bot_smoke_runs().await?;
        if let Some(run) = runs.iter().find(|r| {
            is_hunt_title(&r.title, &id)
                && r.event == RunEvent::WorkflowDispatch
                && self.by_bot(r.actor.as_deref())
        }) {
            if !run.status.is_completed() {
                return Ok(HuntProgress::Waiting(format!(
                    "hunt step {step} at {} is running",
                    tag.tag
                )));
            }
            let key = key(HuntName::Step { hunt: n, step });
            return self.hunt_record(rec, key, hunt, step, &tag, run).await;
        }
        self.hunt_dispatch(rec, hunt, step, &tag, &test_name, &title)
            .await
    }

    /// Records step `step` at `tag` from its ended `run`: its verdict (and
    /// value, for a metric probe) on the PR.
    async fn hunt_record(
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

    /// Dispatches step `step`: a commit on the candidate's head that bumps
    /// the family to `tag` (moving no ref), then its targeted smoke, named
    /// `test_name` (its run found again by `title`).
    async fn hunt_dispatch(
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

    /// The finish step's hunt, before anything else it does: `Some` while
    /// a hunt runs (the candidate waits in its finish step, PR open, claim
    /// held), `None` when there is none to run or it ended. It never
    /// changes `rec.ending`.
    pub(super) async fn hunt_before_finish(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<Option<Progress>, EngineError> {
        let Some(ending) = rec.ending.clone() else {
            return Ok(None);
        };
        let Some(number) = rec.pull else {
            return Ok(None);
        };
        if ending.hands_off {
            // Stopped by a person (`/klaud stop`, a hand-off): a running
            // hunt ends with its narrowest range, nothing more is run. A
            // PR that is not Klaud's any more (no note) gets nothing.
            if ending.note.is_some() && self.has_hunt(rec, number).await? {
                if let HuntProgress::Candidate(p) = self.hunt_step_with(rec, None, 0, true).await? {
                    return Ok(Some(p));
                }
            }
            return Ok(None);
        }
        let has_plan = self.has_hunt(rec, number).await?;
        // A plan already on the PR (started earlier, or by `/klaud hunt`)
        // runs on whatever the candidate concluded.
        let start = if has_plan {
            None
        } else {
            let failed = ending.outcome == crate::model::Outcome::Failed;
            // Only a sweep that validated is read for a regression (and
            // only where hunts are on: the read costs requests).
            let regressed = if ending.outcome == crate::model::Outcome::Validated
                && self.config.hunt.applies(&rec.family)
            {
                self.regressed_probe(rec).await?
            } else {
                None
            };
            let audit = rec.upstream.as_ref().and_then(|u| u.audit.as_ref());
            let Some(trigger) = crate::hunt::should_start(
                &self.config.hunt,
                &rec.family,
                failed,
                audit,
                regressed.is_some(),
            ) else {
                return Ok(None);
            };
            let probe = match (&trigger, regressed) {
                (Trigger::Regression, Some(probe)) => probe,
                _ => Probe::Outcome {
                    target: ending.phase.as_str().to_owned(),
                },
            };
            Some((trigger, probe))
        };
        // Closed elsewhere: nothing more is dispatched for it.
        if !self.forge.get_pull(number).await?.state.is_open() {
            return Ok(None);
        }
        let week_used = self.hunt_week_used().await?;
        let progress = match start {
            None => self.hunt_step(rec, None, week_used).await?,
            Some((trigger, probe)) => {
                let Some(plan) = self.hunt_plan(rec, probe, trigger).await? else {
                    return Ok(None);
                };
                self.hunt_step(rec, Some(&plan), week_used).await?
            }
        };
        Ok(match progress {
            HuntProgress::NoHunt | HuntProgress::Ended(_) => None,
            HuntProgress::Waiting(why) => Some(Progress::Waiting(why)),
            HuntProgress::Candidate(p) => Some(p),
        })
    }

    /// The point of `rec`'s final sweep that regressed most beyond its
    /// noise band against the frozen baseline, as the hunt's probe; `None`
    /// when none did or there is no sweep run to read.
    async fn regressed_probe(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<Option<Probe>, EngineError> {
        let Some(sweep) = &rec.sweep else {
            return Ok(None);
        };
        let (rows, ..) = self.collect(sweep.run_id).await?;
        let frozen = self.frozen(rec).await?;
        let default = self.config.hunt.noise_band;
        let points = crate::hunt::point_values(&frozen.baseline, &rows, default);
        // The results API is asked for history only when a point is past
        // the default band: most candidates cost it nothing.
        if crate::hunt::worst_regression(&points).is_none() {
            return Ok(None);
        }
        let history = self.point_history(rec, &frozen.baseline).await?;
        let points = crate::hunt::with_history(points, &history, default);
        Ok(crate::hunt::worst_regression(&points))
    }

    /// The published metrics of each frozen point for the same image,
    /// newest first, the frozen run included: the results API answers
    /// each point's newest row as of a day, so asking as of the day before
    /// the oldest row seen gives the rows before it, up to
    /// [`crate::hunt::HISTORY_RUNS`] in all. A point's history ends where
    /// its earlier row ran another image or has none (or the API fails).
    async fn point_history(
        &self,
        rec: &CandidateRecord,
        frozen: &crate::baseline::Baseline,
    ) -> Result<std::collections::BTreeMap<String, Vec<crate::artifacts::PointMetrics>>, EngineError>
    {
        use crate::baseline::BaselineValue;
        use std::collections::BTreeMap;
        let family = self.family(&rec.family)?;
        let mut history: BTreeMap<String, Vec<crate::artifacts::PointMetrics>> = BTreeMap::new();
        let mut seen: BTreeMap<String, chrono::NaiveDate> = BTreeMap::new();
        for p in &frozen.points {
            if let BaselineValue::Measured {
                metrics, published, ..
            } = &p.value
            {
                history.insert(p.label.clone(), vec![*metrics]);
                seen.insert(p.label.clone(), published.unwrap_or(frozen.date));
            }
        }
        for _ in 1..crate::hunt::HISTORY_RUNS {
            let Some(day) = seen.values().min().and_then(|d| d.pred_opt()) else {
                break;
            };
            let earlier = crate::baseline::baseline_of(
                self.baseline,
                family,
                &self.config.model_names,
                &frozen.image,
                day,
            )
            .await;
            let mut next = BTreeMap::new();
            for p in &earlier.points {
                let (
                    Some(&before),
                    BaselineValue::Measured {
                        metrics, published, ..
                    },
                ) = (seen.get(&p.label), &p.value)
                else {
                    continue;
                };
                let at = published.unwrap_or(day);
                if at < before
                    && let Some(runs) = history.get_mut(&p.label)
                {
                    runs.push(*metrics);
                    next.insert(p.label.clone(), at);
                }
            }
            seen = next;
        }
        Ok(history)
    }

    /// The plan of a hunt over `rec`'s range: `None` when the registry
    /// gives none (no port, or its answer says why; the candidate then
    /// finishes without a hunt).
    pub(super) async fn hunt_plan(
        &self,
        rec: &CandidateRecord,
        probe: Probe,
        trigger: Trigger,
    ) -> Result<Option<HuntPlan>, EngineError> {
        let Some(port) = self.hunt_tags else {
            return Ok(None);
        };
        let old = self.family(&rec.family)?.image().to_string();
        let range = match port.range(&rec.family, &old, &rec.image).await {
            Ok(r) => r,
            Err(why) => {
                tracing::warn!(family = %rec.family, "no regression hunt: {why}");
                return Ok(None);
            }
        };
        let name = rec.image.split('@').next().unwrap_or(&rec.image);
        let image = name
            .strip_suffix(&range.new.tag)
            .and_then(|n| n.strip_suffix(':'))
            .unwrap_or(name)
            .to_owned();
        Ok(Some(HuntPlan {
            version: crate::hunt::PLAN_VERSION,
            family: rec.family.clone(),
            image,
            old: range.old,
            new: range.new,
            tags: range.tags,
            probe,
            budget: self.config.hunt.budget,
            trigger,
            upstream: rec.upstream.as_ref().map(|u| u.repository.clone()),
        }))
    }

    /// A maintainer's `/klaud hunt [point]`: publishes the hunt's plan on
    /// the PR (the plan is the record; the finish step runs the hunt
    /// before the candidate's cleanup). `Ok` or `Err`: the reply.
    pub(crate) async fn hunt_on_request(
        &self,
        rec: &mut CandidateRecord,
        by: &str,
        target: &str,
    ) -> Result<Result<String, crate::engine::Refusal>, EngineError> {
        let Some(number) = rec.pull else {
            return Ok(Err(crate::engine::Refusal(
                "Not started: the candidate has no PR.".into(),
            )));
        };
        let week_used = self.hunt_week_used().await?;
        if self.has_hunt(rec, number).await? {
            return Ok(Err(crate::engine::Refusal(
                "Not started: this candidate already has a hunt (see its records above).".into(),
            )));
        }
        let probe = Probe::Outcome {
            target: target.to_owned(),
        };
        let trigger = Trigger::Command { by: by.to_owned() };
        let Some(plan) = self.hunt_plan(rec, probe, trigger).await? else {
            return Ok(Err(crate::engine::Refusal("Not started: the registry gave no tags to search between the old and the new image.".into())));
        };
        let n = plan.tags.iter().filter(|t| t.digest.is_some()).count();
        Ok(match self.hunt_step(rec, Some(&plan), week_used).await? {
            HuntProgress::Candidate(_) => Err(crate::engine::Refusal(
                "Not started: this PR is not Klaud's any more.".into(),
            )),
            _ => Ok(format!(
                "Hunt planned over {n} served tags between `{}` and `{}` (budget {} runs); it runs before the candidate finishes. `/klaud stop` ends it with the narrowest range.",
                plan.old.tag, plan.new.tag, plan.budget
            )),
        })
    }

    /// Whether PR `number` carries one of this candidate's hunt records
    /// (any of them means its plan is there).
    async fn has_hunt(
        &self,
        rec: &CandidateRecord,
        number: PullNumber,
    ) -> Result<bool, EngineError> {
        let mark = format!(
            "<!-- klaud-hunt:{}:{}:",
            rec.owner_run,
            Self::candidate_id(rec)?
        );
        Ok(self
            .forge
            .list_comments(number)
            .await?
            .iter()
            .any(|c| self.by_bot(c.author.as_deref()) && c.body.contains(&mark)))
    }

    /// Hunt runs of the last seven days, counted from GitHub itself: the
    /// bot's dispatched smokes whose title is a hunt step's. The journal
    /// would forget runs on a fresh instance; the runs are what cost.
    async fn hunt_week_used(&self) -> Result<u32, EngineError> {
        let since = self.clock.now() - chrono::Duration::days(7);
        let runs = self.bot_smoke_runs().await?;
        let used = runs
            .iter()
            .filter(|r| {
                r.title
                    .split(' ')
                    .next_back()
                    .is_some_and(|last| last.starts_with(HUNT_ID))
                    && self.by_bot(r.actor.as_deref())
                    && r.created_at.is_none_or(|t| t >= since)
            })
            .count();
        Ok(u32::try_from(used).unwrap_or(u32::MAX))
    }

    async fn hunt_publish(
        &self,
        rec: &mut CandidateRecord,
        key: MarkerKey,
        body: String,
        done: &str,
    ) -> Result<HuntProgress, EngineError> {
        match self
            .publish(rec, &[RenderedComment { key, body }], Scope::Pull)
            .await?
        {
            Some(p) => Ok(HuntProgress::Candidate(p)),
            None => Ok(HuntProgress::Waiting(done.to_owned())),
        }
    }

    /// The point's value from a finished run's `results_bmk`: `Ok(None)`
    /// when the probe reads no row, `Err` why the row is not there.
    async fn hunt_value(
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

    /// The family bumped to `image` on the base commit, as the candidate's
    /// own bump is made.
    fn hunt_files(
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

/// `image` with its tag `from` replaced by `to`; a digest-pinned image
/// (`repo:from@digest`) is pinned to `to`'s digest as the hunt's plan
/// recorded it. `None` when the image does not end in `from`.
fn retagged(image: &str, from: &str, to: &str, digest: Option<&str>) -> Option<String> {
    let (name, pinned) = match image.split_once('@') {
        Some((name, _)) => (name, true),
        None => (image, false),
    };
    let repo = name.strip_suffix(from)?.strip_suffix(':')?;
    Some(match (pinned, digest) {
        (true, Some(d)) => format!("{repo}:{to}@{d}"),
        _ => format!("{repo}:{to}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_is_swapped_only_where_the_image_ends_in_it() {
        assert_eq!(
            retagged(
                "vllm/vllm-openai:nightly-b",
                "nightly-b",
                "nightly-a",
                Some("sha256:11")
            )
            .as_deref(),
            Some("vllm/vllm-openai:nightly-a")
        );
        assert_eq!(
            retagged("r:5000/x/y:t2@sha256:00", "t2", "t1", Some("sha256:11")).as_deref(),
            Some("r:5000/x/y:t1@sha256:11")
        );
        assert_eq!(
            retagged("r:5000/x/y:t2@sha256:00", "t2", "t1", None).as_deref(),
            Some("r:5000/x/y:t1")
        );
        assert_eq!(retagged("x/y:t2", "t3", "t1", None), None);
        assert_eq!(retagged("x/yt2", "t2", "t1", None), None);
    }
}
