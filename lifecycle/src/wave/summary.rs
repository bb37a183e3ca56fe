//! What a wave reports: each candidate it worked on, what it skipped and
//! blocked, and the commands it answered.

use klaud_claims::CandidateId;
use serde::Serialize;

use crate::engine::{CandidateRecord, Step};
use crate::model::RunRef;

/// One candidate at the end of a wave.
#[derive(Debug, Clone, Serialize)]
pub struct CandidateSummary {
    /// Candidate id.
    pub candidate: CandidateId,
    /// Family string (`configs/<file>:<key>`).
    pub family: String,
    /// Candidate image.
    pub image: String,
    /// Outcome, once finished.
    pub outcome: Option<String>,
    /// Phase of the outcome, or the step it is at.
    pub phase: String,
    /// The PR URL.
    pub pull_request: Option<String>,
    /// Runs Klaud owns.
    pub runs: Vec<RunRef>,
    /// Repairs used.
    pub repairs: u32,
    /// Why it is not finished (waiting on, or the error it stopped at).
    pub status: Option<String>,
    /// Why it ended, once it did.
    pub message: Option<String>,
    /// A validated PR awaiting its merge: how the merge reuses the sweep
    /// and what Klaud did to keep it mergeable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge: Option<String>,
}

impl CandidateSummary {
    /// The summary of a journal record.
    pub fn of(rec: &CandidateRecord, status: Option<String>) -> Self {
        Self {
            candidate: rec.candidate.clone(),
            family: rec.family.clone(),
            image: rec.image.clone(),
            outcome: rec
                .ending
                .as_ref()
                .filter(|_| rec.step == Step::Done)
                .map(|e| e.outcome.to_string()),
            phase: match (&rec.ending, rec.step) {
                (Some(e), Step::Done) => e.phase.to_string(),
                (_, step) => step.as_str().to_owned(),
            },
            pull_request: rec.pull_url.clone(),
            runs: rec.runs(),
            repairs: rec.repairs,
            status,
            message: rec.ending.as_ref().map(|e| e.message.clone()),
            merge: rec
                .upkeep
                .as_ref()
                .map(|u| u.describe())
                .filter(|d| !d.is_empty()),
        }
    }
}

/// A family the wave's plan blocked.
#[derive(Debug, Clone, Serialize)]
pub struct BlockedFamily {
    /// The family.
    pub family: String,
    /// `retired`, `duplicate` or `occupied`.
    pub outcome: String,
    /// Why, naming the PR and its author when there is one.
    pub reason: String,
}

/// The result of a wave.
#[derive(Debug, Clone, Serialize)]
pub struct WaveSummary {
    /// Base commit; empty in summaries made without a wave (a demo, a
    /// story), so not a [`CommitSha`].
    pub base: String,
    /// Candidates worked on.
    pub candidates: Vec<CandidateSummary>,
    /// Planned candidates not taken up, with why.
    pub skipped: Vec<(String, String)>,
    /// Maintainer command comments answered in this wave.
    pub answered: Vec<crate::commands::Answered>,
    /// Families the plan did not bump whatever the registry says, with
    /// why: `retired`, `duplicate` (somebody else's PR) or `occupied`
    /// (Klaud's own open PR).
    pub blocked: Vec<BlockedFamily>,
    /// Every family of the wave's plan (for the dashboard).
    #[serde(skip)]
    pub families: Vec<klaud_planner::plan::FamilyPlan>,
    /// Families (or master files) the plan could not read, each naming
    /// the file and line (for the dashboard issue).
    #[serde(skip)]
    pub unreadable: Vec<String>,
    /// Set when every unfinished candidate stopped on an instance-wide
    /// failure (GitHub refused the credential, the store cannot be
    /// written): its cause. `klaud wave` then exits non-zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<String>,
}

impl WaveSummary {
    /// Whether every candidate has an outcome.
    pub fn all_finished(&self) -> bool {
        self.candidates.iter().all(|c| c.outcome.is_some())
    }
}

/// Renders a wave summary as a table.
pub fn render_summary(summary: &WaveSummary) -> String {
    let mut rows: Vec<[String; 5]> = vec![[
        "FAMILY".into(),
        "OUTCOME".into(),
        "PHASE".into(),
        "RUNS".into(),
        "PULL REQUEST".into(),
    ]];
    for c in &summary.candidates {
        rows.push([
            c.family.clone(),
            c.outcome
                .clone()
                .unwrap_or_else(|| format!("({})", c.status.as_deref().unwrap_or("running"))),
            c.phase.clone(),
            c.runs.len().to_string(),
            c.pull_request.clone().unwrap_or_else(|| "—".into()),
        ]);
    }
    let mut widths = [0usize; 5];
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    for (id, why) in &summary.skipped {
        out.push_str(&format!("skipped {id}: {why}\n"));
    }
    for b in &summary.blocked {
        out.push_str(&format!("{} {}: {}\n", b.outcome, b.family, b.reason));
    }
    out
}
