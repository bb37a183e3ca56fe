//! The terminal side of a wave's story ([`klaud_service::story`]): one line
//! per candidate step, and after a pass that changed something a one-line
//! tally. On a terminal an `indicatif` spinner under the lines shows the
//! tally while runs are awaited; in a pipe or a log file only the plain
//! lines are written (no control codes).

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
    /// The last tally printed per repository, so quiet passes stay quiet.
    tallies: Mutex<BTreeMap<String, String>>,
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
            tallies: Mutex::new(BTreeMap::new()),
        }
    }

    /// Plain lines only, also on a terminal: for `klaud serve`, whose stderr
    /// also carries the log, which a spinner's redraws would tear.
    pub fn plain(stream: Stream) -> Self {
        Self {
            stream,
            spinner: None,
            tallies: Mutex::new(BTreeMap::new()),
        }
    }

    /// Prints one line (above the spinner on a terminal).
    pub fn line(&self, text: &str) {
        match &self.spinner {
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
        let tally = tally(summary);
        if let Some(bar) = &self.spinner {
            let waiting = summary.candidates.iter().any(|c| c.outcome.is_none());
            bar.set_message(match (tally.is_empty(), waiting) {
                (true, _) => format!("{repository}: nothing to do; waiting for the next wave"),
                (false, true) => format!("{repository}: {tally}; waiting for runs"),
                (false, false) => format!("{repository}: {tally}"),
            });
        }
        if tally.is_empty() {
            return;
        }
        let mut last = self.tallies.lock().unwrap_or_else(|p| p.into_inner());
        if last.get(repository) != Some(&tally) {
            last.insert(repository.to_owned(), tally.clone());
            drop(last);
            let at = chrono::Local::now().format("%H:%M:%S");
            self.line(&format!("{at} {repository}: {tally}"));
        }
    }
}
