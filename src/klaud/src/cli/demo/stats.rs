//! `klaud demo --stats`: the simulator's request log cut into what each
//! candidate's lifecycle cost and what each pass cost around them.
//!
//! The cut does not trust Klaud's idea of what it sent. The wave runs the
//! engine steps of one repository one after another and tells a
//! [`StepSink`] before and after each step; [`RequestCutter`] marks the
//! simulator's request counter ([`GithubState::requests_recorded`]) at those
//! moments. A request is recorded before its answer is sent, so every
//! request between two marks was made by that step. A step is a *poll*
//! when it changed nothing in the candidate's record but `updated_at` and
//! wrote nothing to GitHub; a *live-report refresh* when it changed nothing
//! but that and wrote only the live report comment of a running workflow
//! (how many there are depends on how long runs take and on
//! `live_report_interval`, not on the lifecycle). Requests outside any step
//! (maintainer command reads, the overlap check, planning, claim listing)
//! go to the candidate whose PR, run or branch the path names, else to the
//! pass they fell in, sorted by what they read. A step the wave takes for
//! no lifecycle (keeping a validated PR mergeable after its receipt) is
//! the pass's too.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use klaud_claims::{CandidateId, PullNumber};
use klaud_sandbox::github::LogEntry;
use klaud_sandbox::github::state::GithubState;
use klaud_service::story::{StepNote, StepSink};
use serde::Serialize;

use super::RequestFigures;

/// Charged GitHub requests one validated lifecycle should cost, polls
/// excluded: the goal `--stats` measures each lifecycle against, next to
/// its floor. Met by the plain lifecycle (b200-sglang 23), an experiment
/// variant (Variant B 24), one with an infrastructure retry (h200-trt 29)
/// and the playbook repair, which reports each attempt (b200-vllm 30; see
/// configs/README.md).
pub const LIFECYCLE_TARGET: usize = 30;

/// Charged GitHub requests one validated lifecycle without a failed run
/// may cost, polls excluded, before a test fails: the measured spread (an
/// experiment variant's own-row section edits and final-sweep slot, a
/// sweep first seen running; b200-sglang costs 30 in the integration
/// harness, which drives the engine without a wave's listings) with a
/// little room for timing, none for a regression.
pub const LIFECYCLE_LIMIT: usize = 32;

/// Charged GitHub requests a validated lifecycle with a failed run (a
/// repair, an infrastructure retry) may cost above its floor, polls
/// excluded, before a test fails: the failed job's log and a report per
/// attempt come on top of what the floor counts (measured 5 with a
/// playbook repair, whose triage stops at the first job it can repair, and
/// 5 with an infrastructure retry; 11–12 when the repair read every failed
/// job's log), with room for timing.
pub const FAILED_RUN_ALLOWANCE: usize = 10;

/// What one lifecycle left on GitHub, read from the simulator when it ended:
/// the scenario its floor is computed from (see [`Scenario::floor`]), not
/// the requests Klaud made.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Scenario {
    /// Commits Klaud made on the candidate's branch (the bump, the
    /// changelog entry): the heads its runs tested. The first one, the
    /// bump, is the one that created the branch.
    pub commits: usize,
    /// Runs started by a dispatch (the smokes).
    pub dispatched: usize,
    /// Runs started by the sweep label (found by a listing, which is also
    /// the read that can see one completed).
    pub labelled: usize,
    /// Attempts after a run's first (infrastructure re-runs).
    pub reruns: usize,
    /// Run attempts whose result the reports show.
    pub judged: usize,
    /// Of those, failed ones (their jobs name what failed).
    pub failed: usize,
    /// The run-level artifacts of the judged attempts (`results_bmk`,
    /// `eval_results_all`, the sweep manifest): each read once.
    pub run_level_artifacts: usize,
    /// Labels on the pull request (the sweep label).
    pub labels: usize,
    /// Whether the pull request left draft.
    pub ready: bool,
    /// Whether the merge's reuse line (`/reuse-sweep-run <id>`) is on it.
    pub reuse_line: bool,
}

impl Scenario {
    /// The requests a lifecycle that leaves this on GitHub cannot avoid,
    /// every one charged: the claim (its record commit, its ref, its
    /// deletion; a lifecycle shorter than the lease renews nothing); the
    /// commits, each in one GraphQL request (`createCommitOnBranch`, the
    /// commit and the branch's move; the first with the `createRef` that
    /// creates the branch at the base, in the same document); the
    /// draft pull request with its body (the baseline is known
    /// before it opens); a dispatch per dispatched run, a re-run per later
    /// attempt; per judged attempt the read that sees it completed (for a
    /// labelled run the listing that finds it), its artifact list and each
    /// run-level artifact, the jobs of a failed one; each label, the draft
    /// state;
    /// one comment holding every report and the receipt, and the reuse
    /// line (a command of its own). Checks that GitHub answers 304 while
    /// nothing changed are free and not counted; neither are polls.
    pub fn floor(&self) -> usize {
        3 + self.commits
            + 1
            + self.dispatched
            + self.reruns
            + 2 * self.judged
            + self.run_level_artifacts
            + self.failed
            + self.labels
            + usize::from(self.ready)
            + 1
            + usize::from(self.reuse_line)
    }
}

/// A position in the request log and what happened there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mark {
    /// A step of this candidate starts at this request number.
    StepStarted(CandidateId),
    /// The step ended; `changed` as [`StepSink::step_ended`] says.
    StepEnded {
        /// Candidate id.
        candidate: CandidateId,
        /// Whether the record changed beyond `updated_at`.
        changed: bool,
    },
    /// A wave or reconcile pass ended.
    PassEnded,
}

/// A [`StepSink`] that marks the simulator's request log at every step
/// and pass boundary, and passes every note on to `inner`.
pub struct RequestCutter {
    inner: Arc<dyn StepSink>,
    github: GithubState,
    marks: Mutex<Vec<(u64, Mark)>>,
}

impl RequestCutter {
    /// Marks `github`'s log and tells `inner` the story.
    pub fn new(inner: Arc<dyn StepSink>, github: GithubState) -> Self {
        Self {
            inner,
            github,
            marks: Mutex::new(Vec::new()),
        }
    }

    fn mark(&self, mark: Mark) {
        let at = self.github.requests_recorded();
        if let Ok(mut m) = self.marks.lock() {
            m.push((at, mark));
        }
    }

    /// Every mark so far, in order.
    pub fn marks(&self) -> Vec<(u64, Mark)> {
        self.marks.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

impl StepSink for RequestCutter {
    fn note(&self, note: &StepNote<'_>) {
        self.inner.note(note);
    }

    fn wave_done(&self, repository: &str, summary: &klaud_service::WaveSummary) {
        self.mark(Mark::PassEnded);
        self.inner.wave_done(repository, summary);
    }

    fn step_started(&self, repository: &str, candidate: &CandidateId) {
        self.mark(Mark::StepStarted(candidate.clone()));
        self.inner.step_started(repository, candidate);
    }

    fn step_ended(&self, repository: &str, candidate: &CandidateId, changed: bool) {
        self.mark(Mark::StepEnded {
            candidate: candidate.clone(),
            changed,
        });
        self.inner.step_ended(repository, candidate, changed);
    }
}

/// What a candidate's requests outside its steps are recognized by.
#[derive(Debug, Clone)]
pub struct CandidatePaths {
    /// Candidate id.
    pub candidate: CandidateId,
    /// Its pull request.
    pub pull: Option<PullNumber>,
    /// Its branch (`klaud/auto-…`).
    pub branch: String,
    /// Its runs.
    pub runs: Vec<u64>,
}

impl CandidatePaths {
    fn names(&self, path: &str) -> bool {
        let (route, query) = path.split_once('?').unwrap_or((path, ""));
        let segs: Vec<&str> = route.split('/').collect();
        let after = |word: &str| {
            segs.windows(2)
                .filter(|w| w[0] == word)
                .filter_map(|w| w[1].parse::<u64>().ok())
                .collect::<Vec<_>>()
        };
        if let Some(n) = self.pull.map(PullNumber::get)
            && (after("pulls").contains(&n) || after("issues").contains(&n))
        {
            return true;
        }
        if after("runs").iter().any(|id| self.runs.contains(id)) {
            return true;
        }
        let decoded: String = url::form_urlencoded::parse(query.as_bytes())
            .map(|(k, v)| format!("{k}={v}&"))
            .collect();
        !self.branch.is_empty()
            && (route.ends_with(&format!("/heads/{}", self.branch))
                || decoded.contains(&format!(":{}&", self.branch))
                || decoded.contains(&format!("={}&", self.branch)))
    }
}

/// One candidate's lifecycle, claim to receipt.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct LifecycleRequests {
    /// Engine steps taken.
    pub steps: usize,
    /// Of which polls.
    pub poll_steps: usize,
    /// Everything but polls: non-poll steps plus the requests outside
    /// steps that name this candidate's PR, runs or branch.
    pub work: RequestFigures,
    /// Of `work`, the part outside steps (maintainer command reads, …).
    pub outside_steps: RequestFigures,
    /// Poll steps.
    pub polls: RequestFigures,
    /// Of the steps, live-report refreshes.
    pub refresh_steps: usize,
    /// Live-report refresh steps.
    pub refreshes: RequestFigures,
    /// What the lifecycle left on GitHub, and so its floor.
    pub scenario: Scenario,
    /// The requests it cannot avoid ([`Scenario::floor`]), for a validated
    /// lifecycle; 0 for the others.
    pub floor: usize,
}

/// A write that posts or edits an issue comment (a live report).
fn comment_write(e: &LogEntry) -> bool {
    let route = e.path.split('?').next().unwrap_or(&e.path);
    (e.method == "POST" && route.ends_with("/comments") && route.contains("/issues/"))
        || (e.method == "PATCH" && route.contains("/issues/comments/"))
}

impl LifecycleRequests {
    /// Adds one step's slice of the log; `changed` as
    /// [`StepSink::step_ended`] says.
    pub fn add_step(&mut self, slice: &[LogEntry], changed: bool) {
        let f = RequestFigures::of(slice);
        self.steps += 1;
        if !changed && f.writes == 0 {
            self.poll_steps += 1;
            self.polls.add(f);
        } else if !changed
            && slice
                .iter()
                .filter(|e| super::is_write(e))
                .all(comment_write)
        {
            self.refresh_steps += 1;
            self.refreshes.add(f);
        } else {
            self.work.add(f);
        }
    }
}

/// Requests of one pass that no lifecycle's step made and, outside steps,
/// no candidate's path names, by what they read.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct PassRequests {
    /// Pass number, from 1 (the first is the wave that claims).
    pub pass: usize,
    /// All of them.
    pub all: RequestFigures,
    /// The base branch's ref, commits, trees, blobs and files (planning).
    pub plan: RequestFigures,
    /// Claim and recovery-lease listings and reads.
    pub claims: RequestFigures,
    /// Open pull requests and their files (the overlap check).
    pub overlap: RequestFigures,
    /// Compares (the upstream audit).
    pub audit: RequestFigures,
    /// Comments of other pull requests (maintainer commands).
    pub comments: RequestFigures,
    /// Anything else.
    pub other: RequestFigures,
    /// Upkeep of validated pull requests after their receipt (the base
    /// merged in to keep them mergeable): a step of no lifecycle.
    pub upkeep: RequestFigures,
}

impl PassRequests {
    fn add(&mut self, e: &LogEntry) {
        let f = RequestFigures::of(std::slice::from_ref(e));
        self.all.add(f);
        let route = e.path.split('?').next().unwrap_or(&e.path);
        let bucket = if route.contains("/klaud/claim") || route.contains("/klaud/recover") {
            &mut self.claims
        } else if route.contains("/compare/") {
            &mut self.audit
        } else if route.ends_with("/pulls") || route.ends_with("/files") {
            &mut self.overlap
        } else if route.ends_with("/comments") {
            &mut self.comments
        } else if route.contains("/git/") || route.contains("/contents/") {
            &mut self.plan
        } else {
            &mut self.other
        };
        bucket.add(f);
    }
}

/// The whole cut.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Cut {
    /// Per candidate id.
    pub candidates: BTreeMap<CandidateId, LifecycleRequests>,
    /// Per pass, in order.
    pub passes: Vec<PassRequests>,
    /// Requests another account made meanwhile (the demo's maintainer):
    /// charged to its own rate limit, not to Klaud's.
    pub others: RequestFigures,
}

/// Whether `e` was made by another account than `klaud` (a request
/// without a credential is nobody's and stays Klaud's).
fn by_other(e: &LogEntry, klaud: &str) -> bool {
    e.login
        .as_deref()
        .is_some_and(|l| !l.eq_ignore_ascii_case(klaud))
}

/// Whether `e` is a request of Klaud's to GitHub's API (not the
/// simulator's own control routes, not another account's).
fn klauds_own(e: &LogEntry, klaud: &str) -> bool {
    !e.path.starts_with("/_sandbox") && !by_other(e, klaud)
}

/// Cuts `log` (whose first entry is request number `first`) at `marks`,
/// from request number `start` (where the first pass began). Requests
/// after the last pass are left out (the caller measures its idle passes
/// itself).
// Kept whole (about 85 lines): one walk over the marks in log order, where
// the requests between two marks go to the open step, its candidate or
// the pass; split, each part would need the walk's position and the open
// step handed back and forth.
pub fn cut(
    first: u64,
    start: u64,
    log: &[LogEntry],
    marks: &[(u64, Mark)],
    owners: &[CandidatePaths],
    klaud: &str,
) -> Cut {
    let mut out = Cut::default();
    let mut others = RequestFigures::default();
    for e in log.iter().filter(|e| by_other(e, klaud)) {
        others.add(RequestFigures::of(std::slice::from_ref(e)));
    }
    out.others = others;
    let entry = |seq: u64| {
        seq.checked_sub(first)
            .and_then(|i| usize::try_from(i).ok())
            .and_then(|i| log.get(i))
    };
    let slice = |from: u64, to: u64| {
        let lo = usize::try_from(from.saturating_sub(first)).unwrap_or(usize::MAX);
        let hi = usize::try_from(to.saturating_sub(first)).unwrap_or(usize::MAX);
        &log[lo.min(log.len())..hi.min(log.len()).max(lo.min(log.len()))]
    };
    let mut pass = PassRequests {
        pass: 1,
        ..PassRequests::default()
    };
    // Requests not inside a step start here.
    let mut loose_from = start.max(first);
    let mut open: Option<(u64, &CandidateId)> = None;
    let outside = |pass: &mut PassRequests,
                   candidates: &mut BTreeMap<CandidateId, LifecycleRequests>,
                   from: u64,
                   to: u64| {
        for seq in from..to {
            let Some(e) = entry(seq) else { continue };
            if !klauds_own(e, klaud) {
                continue;
            }
            match owners.iter().find(|o| o.names(&e.path)) {
                Some(o) => {
                    let f = RequestFigures::of(std::slice::from_ref(e));
                    let c = candidates.entry(o.candidate.clone()).or_default();
                    c.work.add(f);
                    c.outside_steps.add(f);
                }
                None => pass.add(e),
            }
        }
    };
    for (at, mark) in marks {
        match mark {
            Mark::StepStarted(candidate) => {
                outside(&mut pass, &mut out.candidates, loose_from, *at);
                open = Some((*at, candidate));
            }
            Mark::StepEnded { candidate, changed } => {
                let started = open.take();
                if started.is_none() {
                    // A step the wave took without starting a lifecycle's
                    // (upkeep after the receipt): the pass's.
                    for e in slice(loose_from, *at)
                        .iter()
                        .filter(|e| klauds_own(e, klaud))
                    {
                        let f = RequestFigures::of(std::slice::from_ref(e));
                        pass.all.add(f);
                        pass.upkeep.add(f);
                    }
                }
                if let Some((from, c)) = started
                    && c == candidate
                {
                    let klauds: Vec<LogEntry> = slice(from, *at)
                        .iter()
                        .filter(|e| !by_other(e, klaud))
                        .cloned()
                        .collect();
                    out.candidates
                        .entry(candidate.clone())
                        .or_default()
                        .add_step(&klauds, *changed);
                }
                loose_from = *at;
            }
            Mark::PassEnded => {
                outside(&mut pass, &mut out.candidates, loose_from, *at);
                loose_from = *at;
                let next = pass.pass + 1;
                out.passes.push(std::mem::take(&mut pass));
                pass.pass = next;
            }
        }
    }
    out
}

/// The log between marks, one request a line (`KLAUD_STATS_DETAIL=1`), to
/// see what each step asked.
pub fn dump(first: u64, log: &[LogEntry], marks: &[(u64, Mark)]) -> String {
    let mut out = String::new();
    let mut at = first;
    for (to, mark) in marks.iter().chain(std::iter::once(&(
        first + log.len() as u64,
        Mark::PassEnded,
    ))) {
        for seq in at..*to {
            if let Some(e) = usize::try_from(seq - first).ok().and_then(|i| log.get(i)) {
                let by = e.login.as_deref().unwrap_or("-");
                out.push_str(&format!(
                    "    {seq} {} {} {} {by}\n",
                    e.method, e.path, e.status
                ));
            }
        }
        at = at.max(*to);
        out.push_str(&format!("  {to} {mark:?}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c1() -> CandidateId {
        "d92e15065c55779d-0123456789abcdef"
            .parse()
            .expect("a candidate id")
    }

    fn e(method: &str, path: &str, status: u16) -> LogEntry {
        LogEntry {
            method: method.into(),
            path: path.into(),
            status,
            login: None,
            at: None,
        }
    }

    #[test]
    fn requests_are_cut_at_step_and_pass_boundaries() {
        let log = vec![
            // pass 1, before any step: planning and claims
            e("GET", "/repos/o/r/git/ref/heads/main", 200),
            e(
                "GET",
                "/repos/o/r/git/matching-refs/heads/klaud/claim-?per_page=100",
                200,
            ),
            // step of c1: a write
            e("POST", "/repos/o/r/pulls", 201),
            // c1's comments read outside steps
            e("GET", "/repos/o/r/issues/7/comments?per_page=100", 200),
            // step of c1: a poll
            e("GET", "/repos/o/r/actions/runs/9", 304),
            // pass 2: the maintainer reads c1's PR (its own rate limit),
            // a human PR's comments, and the overlap listing
            LogEntry {
                login: Some("maintainer".into()),
                ..e("GET", "/repos/o/r/pulls/7", 200)
            },
            e("GET", "/repos/o/r/issues/8/comments", 200),
            e("GET", "/repos/o/r/pulls?state=open&per_page=100", 304),
            // after the last pass: not counted
            e("GET", "/repos/o/r/git/ref/heads/main", 304),
        ];
        let marks = vec![
            (12, Mark::StepStarted(c1())),
            (
                13,
                Mark::StepEnded {
                    candidate: c1(),
                    changed: true,
                },
            ),
            (14, Mark::StepStarted(c1())),
            (
                15,
                Mark::StepEnded {
                    candidate: c1(),
                    changed: false,
                },
            ),
            (15, Mark::PassEnded),
            (18, Mark::PassEnded),
        ];
        let owners = [CandidatePaths {
            candidate: c1(),
            pull: Some(PullNumber::from(7)),
            branch: "klaud/auto-c1".into(),
            runs: vec![9],
        }];
        // The log starts at request 10, the first pass at 12.
        let cut = cut(10, 12, &log, &marks, &owners, "klaud[bot]");
        let c1 = &cut.candidates[&c1()];
        assert_eq!((c1.steps, c1.poll_steps), (2, 1));
        assert_eq!((c1.work.total, c1.work.charged, c1.work.writes), (2, 2, 1));
        assert_eq!(c1.outside_steps.total, 1);
        assert_eq!((c1.polls.total, c1.polls.charged), (1, 0));
        assert_eq!(cut.passes.len(), 2);
        // Requests 10 and 11 come before the first pass: left out.
        assert_eq!(cut.passes[0].all.total, 0);
        let from_start = super::cut(10, 10, &log, &marks, &owners, "klaud[bot]");
        assert_eq!(from_start.passes[0].plan.total, 1);
        assert_eq!(from_start.passes[0].claims.total, 1);
        assert_eq!(cut.passes[1].comments.charged, 1);
        assert_eq!(
            (cut.passes[1].overlap.total, cut.passes[1].overlap.charged),
            (1, 0)
        );
        assert_eq!(cut.passes[1].all.total, 2);
        assert_eq!((cut.others.total, cut.others.charged), (1, 1));
    }

    #[test]
    fn an_upkeep_step_after_the_receipt_is_the_passs_not_dropped() {
        let log = vec![
            // upkeep of c1's validated PR: no step was started for it
            e("GET", "/repos/o/r/pulls/7", 200),
            e("PATCH", "/repos/o/r/git/refs/heads/klaud/auto-c1", 200),
        ];
        let marks = vec![
            (
                12,
                Mark::StepEnded {
                    candidate: c1(),
                    changed: true,
                },
            ),
            (12, Mark::PassEnded),
        ];
        let owners = [CandidatePaths {
            candidate: c1(),
            pull: Some(PullNumber::from(7)),
            branch: "klaud/auto-c1".into(),
            runs: vec![],
        }];
        let cut = cut(10, 10, &log, &marks, &owners, "klaud[bot]");
        assert!(cut.candidates.is_empty(), "{:?}", cut.candidates);
        assert_eq!(
            (cut.passes[0].upkeep.total, cut.passes[0].upkeep.writes),
            (2, 1)
        );
        assert_eq!(cut.passes[0].all.total, 2);
    }

    #[test]
    fn a_poll_that_writes_is_work_unless_it_only_refreshed_the_live_report() {
        let mut l = LifecycleRequests::default();
        l.add_step(&[e("POST", "/repos/o/r/issues/3/labels", 200)], false);
        assert_eq!((l.poll_steps, l.refresh_steps, l.work.writes), (0, 0, 1));
        l.add_step(
            &[
                e("GET", "/repos/o/r/issues/3/comments", 200),
                e("PATCH", "/repos/o/r/issues/comments/3", 200),
            ],
            false,
        );
        assert_eq!((l.poll_steps, l.refresh_steps, l.work.writes), (0, 1, 1));
        assert_eq!((l.refreshes.total, l.refreshes.writes), (2, 1));
        // A step that changed the record is work, whatever it wrote.
        l.add_step(&[e("PATCH", "/repos/o/r/issues/comments/3", 200)], true);
        assert_eq!((l.refresh_steps, l.work.writes), (1, 2));
    }

    #[test]
    fn the_floor_of_a_validated_lifecycle_counts_what_github_shows() {
        // The demo's validated candidate: the bump and the changelog
        // commit, a dispatched smoke and a labelled sweep, each read with
        // its results and evals, the sweep label, ready for review, the
        // reuse line.
        let s = Scenario {
            commits: 2,
            dispatched: 1,
            labelled: 1,
            reruns: 0,
            judged: 2,
            failed: 0,
            run_level_artifacts: 4,
            labels: 1,
            ready: true,
            reuse_line: true,
        };
        // The bump 1 (the branch's ref and the commit onto it, one
        // document), the changelog 1.
        assert_eq!(s.floor(), 3 + 2 + 1 + 1 + 4 + 4 + 1 + 1 + 1 + 1);
        // A repair commit onto the existing branch costs one more.
        let repaired = Scenario {
            commits: 3,
            ..s.clone()
        };
        assert_eq!(repaired.floor(), s.floor() + 1);
        // A lifecycle that made no commit pays for no branch.
        let none = Scenario {
            commits: 0,
            ..s.clone()
        };
        assert_eq!(none.floor(), s.floor() - 2);
        // An infrastructure failure adds its dispatch, its judgement and
        // its failed jobs.
        let retried = Scenario {
            dispatched: 2,
            judged: 3,
            failed: 1,
            ..s.clone()
        };
        assert_eq!(retried.floor(), s.floor() + 1 + 2 + 1);
    }

    #[test]
    fn paths_name_their_candidate_only() {
        let c = CandidatePaths {
            candidate: c1(),
            pull: Some(PullNumber::from(12)),
            branch: "klaud/auto-x".into(),
            runs: vec![100],
        };
        assert!(c.names("/repos/o/r/pulls/12"));
        assert!(c.names("/repos/o/r/issues/12/labels"));
        assert!(!c.names("/repos/o/r/pulls/120"));
        assert!(c.names("/repos/o/r/actions/runs/100/artifacts"));
        assert!(c.names("/repos/o/r/git/ref/heads/klaud/auto-x"));
        assert!(!c.names("/repos/o/r/git/ref/heads/klaud/auto-xy"));
        assert!(c.names("/repos/o/r/pulls?head=o%3Aklaud%2Fauto-x&state=all"));
        assert!(!c.names("/repos/o/r/pulls?state=open"));
    }
}
