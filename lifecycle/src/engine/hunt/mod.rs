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
//! come from the registry through the [`crate::hunt::HuntTags`] port.
//!
//! One file per step of a hunt, in order: `plan`, `dispatch` (one step's
//! smoke), `record` (a step's result); this file drives them, one thing
//! per call, and publishes the end.

use crate::engine::context::Engine;
use crate::engine::context::Progress;
use crate::engine::error::EngineError;
use crate::engine::forge::{Forge as _, RunEvent};
use crate::engine::journal::CandidateRecord;
use crate::engine::proof::Scope;
use crate::hunt::{Hunt, HuntPlan, HuntResult, Next, render_end, render_plan};
use crate::report::{HuntName, MarkerKey, RenderedComment};

mod dispatch;
mod plan;
mod record;

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
