//! Step 1 of 3 of a regression hunt, the plan: the finish step asks
//! first whether a hunt runs (one is due when `[hunt]` applies to the
//! family and the candidate failed for real or validated with a point of
//! its final sweep regressed beyond its band, or when a maintainer's
//! `/klaud hunt` published a plan); the plan searches the served tags
//! between the old and the new image, within the week's run budget.
//!
//! First, from the finish step while the PR is open and the claim held,
//! or on a maintainer's `/klaud hunt`. Reads the registry's tags (the
//! `HuntTags` port), the final sweep's results, the results API's history
//! of a point, the bot's hunt comments and smoke runs. May write: the
//! plan's comment on the PR, under a proof.

use crate::engine::context::Engine;
use crate::engine::context::Progress;
use crate::engine::error::EngineError;
use crate::engine::forge::Forge as _;
use crate::engine::journal::CandidateRecord;
use crate::hunt::{HuntPlan, Probe, Trigger};
use klaud_claims::PullNumber;

use super::{HUNT_ID, HuntProgress};

impl Engine<'_> {
    /// The finish step's hunt, before anything else it does: `Some` while
    /// a hunt runs (the candidate waits in its finish step, PR open, claim
    /// held), `None` when there is none to run or it ended. It never
    /// changes `rec.ending`.
    pub(in crate::engine) async fn hunt_before_finish(
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

    /// The plan of a hunt over `rec`'s range: `None` when the registry
    /// gives none (no port, or its answer says why; the candidate then
    /// finishes without a hunt).
    pub(in crate::engine) async fn hunt_plan(
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

    /// The point of `rec`'s final sweep that regressed most beyond its
    /// noise band against the frozen baseline, as the hunt's probe; `None`
    /// when none did or there is no sweep run to read.
    pub(super) async fn regressed_probe(
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
    pub(super) async fn point_history(
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
    pub(super) async fn has_hunt(
        &self,
        rec: &mut CandidateRecord,
        number: PullNumber,
    ) -> Result<bool, EngineError> {
        let mark = format!(
            "<!-- klaud-hunt:{}:{}:",
            rec.owner_run,
            Self::candidate_id(rec)?
        );
        Ok(crate::engine::steps::finish::own_markers(self, rec, number)
            .await?
            .iter()
            .any(|c| self.by_bot(c.author.as_deref()) && c.body.contains(&mark)))
    }

    /// Hunt runs of the last seven days, counted from GitHub itself: the
    /// bot's dispatched smokes whose title is a hunt step's. The journal
    /// would forget runs on a fresh instance; the runs are what cost.
    pub(super) async fn hunt_week_used(&self) -> Result<u32, EngineError> {
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
}
