//! The terminal side of a wave's story ([`klaud_service::story`]): one line
//! per candidate step, and after a pass in which some candidate's outcome
//! changed a one-line tally of those changes (a later wave that only sees
//! the same outcomes again prints nothing). On a terminal an `indicatif`
//! spinner under the lines shows what is awaited until the story is
//! closed; in a pipe or a log file only the plain lines are written (no
//! control codes).

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use klaud_service::WaveSummary;
use klaud_service::story::{StepNote, StepSink};

/// Which stream the story goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output (`klaud demo` without `--json`).
    Stdout,
    /// Standard error (`klaud serve`, `klaud demo --json`).
    Stderr,
}

/// Prints a wave's story to a terminal, a pipe or a log file.
pub struct TerminalStory {
    stream: Stream,
    spinner: Option<ProgressBar>,
    /// Per repository, each candidate's outcome as last reported
    /// (`running` while it has none), so a repeated outcome is not news.
    reported: Mutex<BTreeMap<String, BTreeMap<String, String>>>,
    /// Set by [`TerminalStory::close`]: the spinner is gone for good.
    closed: std::sync::atomic::AtomicBool,
}

impl TerminalStory {
    /// A story on `stream`; the spinner only when it is a terminal.
    pub fn new(stream: Stream) -> Self {
        let terminal = match stream {
            Stream::Stdout => std::io::stdout().is_terminal(),
            Stream::Stderr => std::io::stderr().is_terminal(),
        };
        let spinner = terminal.then(|| {
            let target = match stream {
                Stream::Stdout => ProgressDrawTarget::stdout(),
                Stream::Stderr => ProgressDrawTarget::stderr(),
            };
            let bar = ProgressBar::with_draw_target(None, target);
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.set_message("planning…");
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Self {
            stream,
            spinner,
            reported: Mutex::new(BTreeMap::new()),
            closed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Plain lines only, also on a terminal: for `klaud serve`, whose stderr
    /// also carries the log, which a spinner's redraws would tear.
    pub fn plain(stream: Stream) -> Self {
        Self {
            stream,
            spinner: None,
            reported: Mutex::new(BTreeMap::new()),
            closed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Prints one line (above the spinner on a terminal).
    pub fn line(&self, text: &str) {
        match self.spinner() {
            Some(bar) => bar.println(text),
            None => {
                let mut out: Box<dyn Write> = match self.stream {
                    Stream::Stdout => Box::new(std::io::stdout().lock()),
                    Stream::Stderr => Box::new(std::io::stderr().lock()),
                };
                let _ = writeln!(out, "{text}").and_then(|()| out.flush());
            }
        }
    }

    /// Removes the spinner (before the closing summary).
    pub fn finish(&self) {
        if let Some(bar) = &self.spinner {
            bar.finish_and_clear();
        }
    }

    /// Prints the closing line and removes the spinner for good: later
    /// waves (a demo left serving) print their news as plain lines, and
    /// nothing spins under `done:` any more.
    pub fn close(&self, text: &str) {
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        self.finish();
        self.line(text);
    }

    fn spinner(&self) -> Option<&ProgressBar> {
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            None
        } else {
            self.spinner.as_ref()
        }
    }
}

impl Drop for TerminalStory {
    fn drop(&mut self) {
        self.finish();
    }
}

/// `configs/nvidia-master.yaml:demo-fp4-b200-sglang` → `demo-fp4-b200-sglang`.
fn short_family(family: &str) -> &str {
    family.rsplit_once(':').map_or(family, |(_, key)| key)
}

/// `2 validated, 1 failed, 3 running` (empty for no candidates).
pub fn tally(summary: &WaveSummary) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for c in &summary.candidates {
        let key = c.outcome.clone().unwrap_or_else(|| "running".to_owned());
        *counts.entry(key).or_default() += 1;
    }
    counts
        .iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl StepSink for TerminalStory {
    fn note(&self, note: &StepNote<'_>) {
        let at = chrono::Local::now().format("%H:%M:%S");
        // Variants of one experiment share the family: the name tells them apart.
        let variant = note
            .variant
            .map_or_else(String::new, |v| format!(" [Variant {v}]"));
        self.line(&format!(
            "{at} {}{variant}  {}",
            short_family(note.family),
            note.event
        ));
    }

    fn wave_done(&self, repository: &str, summary: &WaveSummary) {
        if let Some(bar) = self.spinner() {
            let tally = tally(summary);
            let waiting = summary.candidates.iter().any(|c| c.outcome.is_none());
            bar.set_message(match (tally.is_empty(), waiting) {
                (true, _) => format!("{repository}: nothing to do; waiting for the next wave"),
                (false, true) => format!("{repository}: {tally}; waiting for runs"),
                (false, false) => format!("{repository}: {tally}"),
            });
        }
        let news = {
            let mut reported = self.reported.lock().unwrap_or_else(|p| p.into_inner());
            news(reported.entry(repository.to_owned()).or_default(), summary)
        };
        let tally = tally(&news);
        if !tally.is_empty() {
            let at = chrono::Local::now().format("%H:%M:%S");
            self.line(&format!("{at} {repository}: {tally}"));
        }
    }
}

/// The candidates of `summary` whose outcome differs from what `reported`
/// holds for them, which is updated: what a tally line should say.
fn news(reported: &mut BTreeMap<String, String>, summary: &WaveSummary) -> WaveSummary {
    let mut changed = WaveSummary {
        base: summary.base.clone(),
        candidates: Vec::new(),
        skipped: Vec::new(),
        answered: Vec::new(),
        blocked: Vec::new(),
        families: Vec::new(),
        unreadable: Vec::new(),
        stopped_by: summary.stopped_by.clone(),
    };
    for c in &summary.candidates {
        let state = c.outcome.clone().unwrap_or_else(|| "running".to_owned());
        if reported
            .insert(c.candidate.to_string(), state.clone())
            .as_ref()
            != Some(&state)
        {
            changed.candidates.push(c.clone());
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use klaud_service::CandidateSummary;

    fn candidate(n: u8, outcome: Option<&str>) -> CandidateSummary {
        CandidateSummary {
            candidate: klaud_claims::CandidateId::new(&format!("{n:016x}-{n:016x}"))
                .expect("a candidate id"),
            family: format!("configs/x-master.yaml:family-{n}"),
            image: "x:1".to_owned(),
            outcome: outcome.map(str::to_owned),
            phase: "final-sweep".to_owned(),
            pull_request: None,
            runs: Vec::new(),
            repairs: 0,
            status: None,
            message: None,
            merge: None,
        }
    }

    fn wave(candidates: Vec<CandidateSummary>) -> WaveSummary {
        WaveSummary {
            base: String::new(),
            candidates,
            skipped: Vec::new(),
            answered: Vec::new(),
            blocked: Vec::new(),
            families: Vec::new(),
            unreadable: Vec::new(),
            stopped_by: None,
        }
    }

    #[test]
    fn a_later_wave_that_sees_the_same_outcomes_again_has_no_news() {
        let mut reported = BTreeMap::new();
        let first = wave(vec![candidate(1, None), candidate(2, Some("failed"))]);
        assert_eq!(tally(&news(&mut reported, &first)), "1 failed, 1 running");
        let later = wave(vec![
            candidate(1, Some("capacity-deferred")),
            candidate(2, Some("failed")),
        ]);
        assert_eq!(tally(&news(&mut reported, &later)), "1 capacity-deferred");
        // The same outcomes once more: nothing new to say.
        assert_eq!(tally(&news(&mut reported, &later)), "");
    }
}
