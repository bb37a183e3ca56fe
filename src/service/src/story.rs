//! What a person watching a wave wants to read: one [`StepEvent`] per
//! candidate step that changed something visible (PR opened, smoke
//! dispatched, passed, changelog appended, sweep labelled, finished), told
//! to a [`StepSink`] the caller hands the wave (the terminal of `klaud demo`
//! and `klaud serve`). No global state: without a sink nothing is told.
//!
//! Events are read off the journal record before and after each engine
//! step, so the engine needs no hook and a resumed candidate tells only
//! what happens from now on.

use klaud_claims::{CandidateId, CommitSha, PullNumber};
use klaud_lifecycle::engine::{CandidateRecord, EngineError, Progress, ReuseAuthorization, Step};
use klaud_lifecycle::model::AttemptStatus;

/// One visible change of a candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepEvent {
    /// The family's claim was taken.
    Claimed,
    /// The draft PR was opened.
    PullOpened {
        /// PR number.
        number: PullNumber,
        /// Its web page.
        url: Option<String>,
    },
    /// The baseline was frozen into the PR body.
    BaselineFrozen,
    /// A run was dispatched (or re-run) for an attempt.
    RunDispatched {
        /// Attempt title (`Initial smoke, repair 0/5`, `Final full sweep`).
        attempt: String,
        /// Run id and attempt number.
        run: u64,
        /// Run attempt, from 1.
        run_attempt: u32,
        /// The attempt's web page.
        url: String,
    },
    /// An attempt reached a terminal status.
    AttemptEnded {
        /// Attempt title.
        attempt: String,
        /// `passed`, `failed`, `cancelled`, `deferred`.
        status: String,
    },
    /// A repair was committed.
    Repaired {
        /// Repairs used so far.
        repairs: u32,
    },
    /// The changelog entry was committed and the sweep label set.
    SweepRequested,
    /// The candidate finished.
    Finished {
        /// Outcome.
        outcome: String,
        /// Phase.
        phase: String,
        /// Why, in one sentence.
        message: String,
    },
    /// Reuse of the validated run at merge was authorized (by Klaud's own
    /// line), or a maintainer was asked for the line.
    ReuseAuthorized {
        /// The `/reuse-sweep-run <run>` line.
        line: String,
        /// Whether a maintainer must post it.
        by_maintainer: bool,
    },
    /// The base was merged into a validated PR's branch to keep it
    /// mergeable.
    BaseMergedIn {
        /// The new head.
        head: CommitSha,
    },
    /// Klaud stopped keeping a validated PR mergeable.
    UpkeepSettled(String),
    /// News of the candidate's regression hunt (planned, a step
    /// dispatched, a step's verdict).
    Hunt(String),
    /// The hunt ended: its result lines (Markdown, English).
    HuntEnded(Vec<String>),
    /// Not taken up (another instance holds the family, …).
    Skipped(String),
    /// A step failed; the next pass resumes.
    Stopped(String),
}

impl std::fmt::Display for StepEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StepEvent::Claimed => f.write_str("claimed"),
            StepEvent::PullOpened { number, url } => {
                write!(f, "opened draft PR #{number}")?;
                match url {
                    Some(u) => write!(f, " {u}"),
                    None => Ok(()),
                }
            }
            StepEvent::BaselineFrozen => f.write_str("baseline frozen into the PR body"),
            StepEvent::RunDispatched {
                attempt,
                run,
                run_attempt,
                url,
            } => {
                let what = if attempt == "Final full sweep" {
                    "final sweep"
                } else {
                    "smoke"
                };
                if *run_attempt > 1 {
                    write!(
                        f,
                        "{what} re-run ({attempt}): run {run} attempt {run_attempt} {url}"
                    )
                } else {
                    write!(f, "{what} dispatched ({attempt}): run {run} {url}")
                }
            }
            StepEvent::AttemptEnded { attempt, status } => write!(f, "{attempt} {status}"),
            StepEvent::Repaired { repairs } => write!(f, "repair {repairs} committed"),
            StepEvent::SweepRequested => f.write_str("changelog appended, final sweep label set"),
            StepEvent::Finished {
                outcome,
                phase,
                message,
            } => write!(f, "{outcome} ({phase}): {message}"),
            StepEvent::ReuseAuthorized {
                line,
                by_maintainer: false,
            } => write!(f, "merge reuses the validated sweep: posted `{line}`"),
            StepEvent::ReuseAuthorized {
                line,
                by_maintainer: true,
            } => write!(
                f,
                "merge reuse needs a maintainer's `{line}` (Klaud's comments are not a collaborator's); asked in the PR"
            ),
            StepEvent::BaseMergedIn { head } => write!(
                f,
                "base merged in to keep the validated PR mergeable: head {} ([skip-sweep], no GPU job)",
                head.get(..12).unwrap_or(head)
            ),
            StepEvent::UpkeepSettled(why) => write!(f, "no longer kept up to date: {why}"),
            StepEvent::Hunt(news) => f.write_str(news),
            StepEvent::HuntEnded(lines) => {
                // A terminal shows the Markdown's words, not its marks.
                let plain: Vec<String> = lines
                    .iter()
                    .map(|l| l.replace("**", "").replace('`', ""))
                    .collect();
                f.write_str(&plain.join(" · "))
            }
            StepEvent::Skipped(why) => write!(f, "skipped: {why}"),
            StepEvent::Stopped(why) => write!(f, "stopped, resumes next pass: {why}"),
        }
    }
}

/// One event of one candidate.
#[derive(Debug, Clone)]
pub struct StepNote<'a> {
    /// `owner/name`.
    pub repository: &'a str,
    /// The family (`configs/…-master.yaml:key`).
    pub family: &'a str,
    /// Candidate id.
    pub candidate: &'a str,
    /// The experiment variant the candidate is (`B`), if it is one.
    pub variant: Option<&'a str>,
    /// What happened.
    pub event: StepEvent,
}

/// Where a wave tells its story. Implementations must not block for long:
/// they run between engine steps.
pub trait StepSink: Send + Sync {
    /// One candidate event.
    fn note(&self, note: &StepNote<'_>);
    /// A wave (or reconcile pass) over `repository` ended.
    fn wave_done(&self, _repository: &str, _summary: &crate::wave_adapters::WaveSummary) {}
    /// An engine step of `candidate` is about to run. Steps of one wave
    /// run one after another, so every GitHub request between this and
    /// [`StepSink::step_ended`] is that step's (what `klaud demo --stats`
    /// cuts the request log by).
    fn step_started(&self, _repository: &str, _candidate: &CandidateId) {}
    /// The step started last ended; `changed` is false when it changed
    /// nothing in the candidate's record but `updated_at` and a live-report
    /// intent (a look at a running workflow, perhaps refreshing its live
    /// report).
    fn step_ended(&self, _repository: &str, _candidate: &CandidateId, _changed: bool) {}
}

/// The events between two versions of a record around one engine step.
pub fn step_events(
    before: &CandidateRecord,
    after: &CandidateRecord,
    progress: Result<&Progress, &EngineError>,
) -> Vec<StepEvent> {
    let mut out = Vec::new();
    if before.step == Step::Claim && after.step != Step::Claim && after.claim.is_some() {
        out.push(StepEvent::Claimed);
    }
    if before.pull.is_none()
        && let Some(number) = after.pull
    {
        out.push(StepEvent::PullOpened {
            number,
            url: after.pull_url.clone(),
        });
    }
    if before.frozen.is_none() && after.frozen.is_some() {
        out.push(StepEvent::BaselineFrozen);
    }
    if after.repairs > before.repairs {
        out.push(StepEvent::Repaired {
            repairs: after.repairs,
        });
    }
    for (i, a) in after.attempts.iter().enumerate() {
        let old = before.attempts.get(i);
        if let Some(run) = &a.run
            && old.and_then(|o| o.run.as_ref()).map(|r| (r.id, r.attempt))
                != Some((run.id, run.attempt))
        {
            out.push(StepEvent::RunDispatched {
                attempt: a.kind.title(),
                run: run.id,
                run_attempt: run.attempt,
                url: run.attempt_url(),
            });
        }
        let was_terminal = old.is_some_and(|o| o.status.is_terminal());
        if a.status.is_terminal() && !was_terminal && a.status != AttemptStatus::Deferred {
            out.push(StepEvent::AttemptEnded {
                attempt: a.kind.title(),
                status: a.status.to_string(),
            });
        }
    }
    if before.sweep_requested_at.is_none() && after.sweep_requested_at.is_some() {
        out.push(StepEvent::SweepRequested);
    }
    if before.hunt.en.is_empty() && !after.hunt.en.is_empty() {
        out.push(StepEvent::HuntEnded(after.hunt.en.clone()));
    }
    if before.step != Step::Done
        && after.step == Step::Done
        && let Some(e) = &after.ending
    {
        out.push(StepEvent::Finished {
            outcome: e.outcome.to_string(),
            phase: e.phase.to_string(),
            message: e.message.clone(),
        });
    }
    let reuse = |r: &CandidateRecord| r.upkeep.as_ref().and_then(|u| u.reuse.clone());
    if let Some(r) = reuse(after).filter(|r| reuse(before).as_ref() != Some(r)) {
        out.push(StepEvent::ReuseAuthorized {
            line: r.line(),
            by_maintainer: matches!(r, ReuseAuthorization::Maintainer { .. }),
        });
    }
    let merged = |r: &CandidateRecord| r.upkeep.as_ref().map_or(0, |u| u.merged_bases.len());
    if merged(after) > merged(before)
        && let Some(head) = &after.head
    {
        out.push(StepEvent::BaseMergedIn { head: head.clone() });
    }
    let settled = |r: &CandidateRecord| r.upkeep.as_ref().and_then(|u| u.settled.clone());
    if settled(before).is_none()
        && let Some(why) = settled(after)
    {
        out.push(StepEvent::UpkeepSettled(why));
    }
    match progress {
        Ok(Progress::Skipped(why)) => out.push(StepEvent::Skipped(why.clone())),
        Ok(Progress::Waiting(why)) if klaud_lifecycle::engine::is_hunt_news(why) => {
            out.push(StepEvent::Hunt(why.clone()));
        }
        Err(e) => out.push(StepEvent::Stopped(e.to_string())),
        _ => {}
    }
    out
}

/// Tells `sink` what one step changed.
pub(crate) fn tell(
    sink: Option<&dyn StepSink>,
    repository: &str,
    before: &CandidateRecord,
    after: &CandidateRecord,
    progress: Result<&Progress, &EngineError>,
) {
    let Some(sink) = sink else {
        return;
    };
    for event in step_events(before, after, progress) {
        sink.note(&StepNote {
            repository,
            family: &after.family,
            candidate: after.candidate.as_str(),
            variant: after.variant.as_ref().map(|v| v.name.as_str()),
            event,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use klaud_lifecycle::engine::AttemptRecord;
    use klaud_lifecycle::model::{AttemptKind, RunRef};

    fn record() -> CandidateRecord {
        serde_json::from_value(serde_json::json!({
            "candidate": "d92e15065c55779d-0123456789abcdef", "family": "configs/x-master.yaml:k", "key": "k",
            "old_image": "a:1", "image": "a:2", "owner_run": 1, "base_branch": "main",
            "base_sha": "0000000000000000000000000000000000000000", "branch": "klaud/auto-d92e15065c55779d-0123456789abcdef", "step": "smoke", "claim": null,
            "head": null, "pending_commit": null, "pull": null, "pull_url": null,
            "frozen": null, "attempts": [], "repairs": 0, "sweep_requested_at": null,
            "sweep": null, "ending": null, "intent": null,
            "updated_at": "2026-01-01T00:00:00Z"
        }))
        .expect("record")
    }

    #[test]
    fn each_visible_change_is_told_once() {
        let before = record();
        let mut after = before.clone();
        after.pull = Some(PullNumber::from(7));
        after.pull_url = Some("http://127.0.0.1:1/_html/o/r/pull/7".into());
        after.attempts.push(AttemptRecord {
            kind: AttemptKind::Initial { budget: 5 },
            head: "h".into(),
            dispatched_at: None,
            run: Some(RunRef {
                id: 9,
                attempt: 1,
                url: "http://127.0.0.1:1/_html/o/r/actions/runs/9".into(),
            }),
            status: AttemptStatus::Queued,
            infra: false,
            reported: false,
        });
        let events = step_events(&before, &after, Ok(&Progress::Waiting("run".into())));
        let text: Vec<String> = events.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "opened draft PR #7 http://127.0.0.1:1/_html/o/r/pull/7",
                "smoke dispatched (Initial smoke, repair 0/5): run 9 http://127.0.0.1:1/_html/o/r/actions/runs/9",
            ]
        );
        // Nothing changed: nothing told.
        assert!(step_events(&after, &after, Ok(&Progress::Waiting("run".into()))).is_empty());
        // A re-run names its attempt; a terminal status is told once.
        let mut rerun = after.clone();
        rerun.attempts[0].status = AttemptStatus::Passed;
        if let Some(r) = rerun.attempts[0].run.as_mut() {
            r.attempt = 2;
        }
        let text: Vec<String> =
            step_events(&after, &rerun, Err(&EngineError::Invalid("boom".into())))
                .iter()
                .map(ToString::to_string)
                .collect();
        assert_eq!(
            text,
            [
                "smoke re-run (Initial smoke, repair 0/5): run 9 attempt 2 http://127.0.0.1:1/_html/o/r/actions/runs/9/attempts/2",
                "Initial smoke, repair 0/5 passed",
                "stopped, resumes next pass: boom",
            ]
        );
    }
}
