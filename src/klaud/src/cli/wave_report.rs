//! What a wave did, said twice: the candidates' table, fitted like every
//! CLI table, and a few lines a workflow log can be skimmed by (families
//! planned, candidates advanced, validated or failed, families held and
//! why, the GitHub requests it cost). `klaud wave --json` writes the JSON
//! to a file in the shipped workflow, so the lines go to stderr there and
//! the job's log still says what the pass did.

use std::collections::BTreeMap;

use klaud_github::RateBudget;
use klaud_planner::plan::Status;
use klaud_service::WaveSummary;

use super::table::Fit;

/// Held families (and skipped candidates) named one by one, at most.
const NAMED: usize = 5;

/// A reason in the brief is cut to this many characters (the table and the
/// JSON keep it whole).
const REASON_WIDTH: usize = 120;

/// The candidates' table: the family gives up width first, the outcome,
/// phase and pull request link are kept whole.
pub fn table(summary: &WaveSummary) -> String {
    let rows: Vec<[String; 5]> = summary
        .candidates
        .iter()
        .map(|c| {
            [
                c.family.clone(),
                c.outcome
                    .clone()
                    .unwrap_or_else(|| format!("({})", c.status.as_deref().unwrap_or("running"))),
                c.phase.clone(),
                c.runs.len().to_string(),
                c.pull_request.clone().unwrap_or_else(|| "—".into()),
            ]
        })
        .collect();
    let mut out = super::table::render_fitted(
        &["FAMILY", "OUTCOME", "PHASE", "RUNS", "PULL REQUEST"],
        &[Fit::Tail, Fit::Elide, Fit::Keep, Fit::Keep, Fit::Keep],
        &rows,
        super::output::table_width(),
    );
    for (id, why) in &summary.skipped {
        out.push_str(&format!("skipped {id}: {why}\n"));
    }
    for b in &summary.blocked {
        out.push_str(&format!("{} {}: {}\n", b.outcome, b.family, b.reason));
    }
    out
}

/// The GitHub rate-limit budget before and after the wave: what it cost,
/// as GitHub counts it (answers from the conditional cache are free).
#[derive(Debug, Clone, Default)]
pub struct Requests {
    /// The `core` budget after connecting.
    pub before: Option<RateBudget>,
    /// The `core` budget at the end.
    pub after: Option<RateBudget>,
}

impl Requests {
    fn line(&self) -> Option<String> {
        let after = self.after.as_ref()?;
        let left = format!("{} of {} left", after.remaining, after.limit);
        Some(match &self.before {
            // The same rate-limit window: the difference is this pass's
            // (and that of anything else on the same credential).
            Some(before) if before.reset_unix == after.reset_unix => format!(
                "GitHub: {} request(s) charged to the rate limit ({left})",
                after.used.saturating_sub(before.used)
            ),
            _ => format!("GitHub: rate limit {left} (its window turned during the pass)"),
        })
    }
}

/// A few lines: what was planned, what the candidates did, what was held
/// and why, what GitHub was asked.
pub fn brief(summary: &WaveSummary, requests: &Requests) -> Vec<String> {
    let mut lines = Vec::new();
    let stale = summary
        .families
        .iter()
        .filter(|f| matches!(f.status, Status::StaleNewer | Status::StalePruned))
        .count();
    let mut planned = format!(
        "wave at {}: {} families planned, {stale} stale",
        summary.base.get(..12).unwrap_or(&summary.base),
        summary.families.len(),
    );
    if !summary.unreadable.is_empty() {
        planned.push_str(&format!(", {} unreadable", summary.unreadable.len()));
    }
    lines.push(planned);

    let mut ended: BTreeMap<&str, usize> = BTreeMap::new();
    let mut going: BTreeMap<&str, usize> = BTreeMap::new();
    for c in &summary.candidates {
        match &c.outcome {
            Some(outcome) => *ended.entry(outcome).or_default() += 1,
            None => *going.entry(&c.phase).or_default() += 1,
        }
    }
    if summary.candidates.is_empty() {
        lines.push("candidates: none worked on".to_owned());
    } else {
        let mut parts = Vec::new();
        let advancing: usize = going.values().sum();
        if advancing > 0 {
            parts.push(format!("{advancing} advanced ({})", counts(&going, "at ")));
        }
        if !ended.is_empty() {
            parts.push(format!("ended: {}", counts(&ended, "")));
        }
        lines.push(format!(
            "candidates: {} worked on; {}",
            summary.candidates.len(),
            parts.join("; ")
        ));
    }
    for c in &summary.candidates {
        if let (Some(outcome), Some(message)) = (&c.outcome, &c.message)
            && outcome != "validated"
        {
            lines.push(format!(
                "  {outcome} {}: {}",
                c.family,
                super::table::elide(&one_line(message), REASON_WIDTH)
            ));
        }
    }

    let held = held(summary);
    if !held.is_empty() {
        let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, kind, _) in &held {
            *kinds.entry(kind).or_default() += 1;
        }
        lines.push(format!("held: {} ({})", held.len(), counts(&kinds, "")));
        for (family, kind, reason) in held.iter().take(NAMED) {
            lines.push(format!(
                "  {kind} {family}: {}",
                super::table::elide(&one_line(reason), REASON_WIDTH)
            ));
        }
        if held.len() > NAMED {
            lines.push(format!("  and {} more", held.len() - NAMED));
        }
    }
    if !summary.skipped.is_empty() {
        lines.push(format!(
            "skipped: {} planned candidate(s) not taken up",
            summary.skipped.len()
        ));
        for (candidate, why) in summary.skipped.iter().take(NAMED) {
            lines.push(format!(
                "  {candidate}: {}",
                super::table::elide(&one_line(why), REASON_WIDTH)
            ));
        }
        if summary.skipped.len() > NAMED {
            lines.push(format!("  and {} more", summary.skipped.len() - NAMED));
        }
    }
    if !summary.answered.is_empty() {
        lines.push(format!(
            "commands: {} maintainer command(s) answered",
            summary.answered.len()
        ));
    }
    if let Some(line) = requests.line() {
        lines.push(line);
    }
    if let Some(cause) = &summary.stopped_by {
        lines.push(format!("stopped: {}", one_line(cause)));
    }
    lines
}

/// Families held, with the kind and the reason: the plan's blocks
/// (retired, duplicate, occupied, ignored, readiness-blocked) and those
/// the wave added, each family once.
fn held(summary: &WaveSummary) -> Vec<(String, String, String)> {
    let mut held: Vec<(String, String, String)> = summary
        .families
        .iter()
        .filter_map(|f| {
            let b = f.blocked.as_ref()?;
            Some((
                f.family.clone(),
                b.kind.as_str().to_owned(),
                b.reason.clone(),
            ))
        })
        .collect();
    for b in &summary.blocked {
        if !held.iter().any(|(family, _, _)| *family == b.family) {
            held.push((b.family.clone(), b.outcome.clone(), b.reason.clone()));
        }
    }
    held
}

/// `2 validated, 1 failed`, most first.
fn counts(by: &BTreeMap<&str, usize>, prefix: &str) -> String {
    let mut items: Vec<(&str, usize)> = by.iter().map(|(k, v)| (*k, *v)).collect();
    items.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    items
        .iter()
        .map(|(k, v)| format!("{v} {prefix}{k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(used: u64, reset_unix: i64) -> RateBudget {
        RateBudget {
            limit: 5000,
            remaining: 5000 - used,
            used,
            reset_unix,
            resource: "core".into(),
        }
    }

    #[test]
    fn the_requests_line_is_the_budget_spent_in_one_window() {
        let same = Requests {
            before: Some(budget(10, 1)),
            after: Some(budget(47, 1)),
        };
        assert_eq!(
            same.line().as_deref(),
            Some("GitHub: 37 request(s) charged to the rate limit (4953 of 5000 left)")
        );
        let turned = Requests {
            before: Some(budget(10, 1)),
            after: Some(budget(3, 2)),
        };
        assert!(turned.line().unwrap().contains("window turned"));
        assert_eq!(Requests::default().line(), None);
    }

    fn candidate(
        family: &str,
        outcome: Option<&str>,
        phase: &str,
    ) -> klaud_service::CandidateSummary {
        klaud_service::CandidateSummary {
            candidate: "d92e15065c55779d-0123456789abcdef".parse().unwrap(),
            family: family.into(),
            image: "lmsysorg/sglang:v2".into(),
            outcome: outcome.map(str::to_owned),
            phase: phase.into(),
            pull_request: None,
            runs: vec![],
            repairs: 0,
            status: None,
            message: outcome.map(|_| "smoke failed\ntwice".to_owned()),
            merge: None,
        }
    }

    #[test]
    fn the_brief_says_what_was_planned_done_held_and_asked() {
        let summary = WaveSummary {
            base: "0123456789abcdef0123".into(),
            candidates: vec![
                candidate("configs/a-master.yaml:x", Some("failed"), "targeted"),
                candidate("configs/a-master.yaml:y", Some("validated"), "final"),
                candidate("configs/a-master.yaml:z", None, "smoke"),
            ],
            skipped: vec![],
            answered: vec![],
            families: vec![],
            unreadable: vec!["configs/b-master.yaml".into()],
            stopped_by: None,
            blocked: vec![klaud_service::wave_adapters::BlockedFamily {
                family: "configs/a-master.yaml:w".into(),
                outcome: "occupied".into(),
                reason: "Klaud's PR #12 is still open".into(),
            }],
        };
        let requests = Requests {
            before: Some(budget(10, 1)),
            after: Some(budget(47, 1)),
        };
        assert_eq!(
            brief(&summary, &requests),
            [
                "wave at 0123456789ab: 0 families planned, 0 stale, 1 unreadable",
                "candidates: 3 worked on; 1 advanced (1 at smoke); ended: 1 failed, 1 validated",
                "  failed configs/a-master.yaml:x: smoke failed twice",
                "held: 1 (1 occupied)",
                "  occupied configs/a-master.yaml:w: Klaud's PR #12 is still open",
                "GitHub: 37 request(s) charged to the rate limit (4953 of 5000 left)",
            ]
        );
    }
}
