//! Classifying one failed job from its log.
//!
//! The order is fixed: a node or runner at fault explains whatever the
//! engine then printed, so infrastructure entries win; then the first
//! engine or setup entry in file order; then teardown noise (an entry of
//! class teardown whose lines come after the benchmark printed its result
//! summary); a job on a node the playbook lists as sick is infrastructure
//! even when nothing matched; everything else is unknown, with the log's
//! own signature.

use std::sync::LazyLock;

use regex::Regex;

use super::model::{Class, Diagnosis, Entry, JobContext, Playbook};
use super::normalize::{JobLogView, LogSignature, cut};

/// Most matching lines a classification carries.
pub const MAX_MATCHED_LINES: usize = 8;
/// Longest matching line carried, in characters.
pub const MAX_MATCHED_LINE_CHARS: usize = 300;

/// What InferenceX's serving benchmark prints once its window is over
/// (`utils/bench_serving/benchmark_serving.py`): the result banner, then
/// the counts.
static WINDOW_END: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"=+ Serving Benchmark Result =+|^\s*Successful requests:\s+\d+")
        .expect("static regex")
});

/// Where SLURM and InferenceX's scripts name the compute node: the
/// scripts' `JOB <id> running on <node>`, SLURM's variables, `scontrol`'s
/// fields and `srun`'s per-node errors. A node list with ranges
/// (`g[09,19]`) names no single node and is skipped.
static NODE_LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?:\bJOB \d+ running on |\bSLURMD_NODENAME=|\bNodeList=|\bNodeName=)([A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?)(?:[\s,;'"]|$)|\bsrun: error: ([A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?): task\b"#,
    )
    .expect("static regex")
});

/// One log line that matched, bounded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchedLine {
    /// 1-based line number in the job's log.
    pub number: usize,
    /// The cleaned line, cut to [`MAX_MATCHED_LINE_CHARS`].
    pub text: String,
}

/// One entry whose scope holds and whose signature matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Match {
    /// The entry's id.
    pub entry: String,
    /// The entry's class.
    pub class: Class,
    /// The lines that matched (at most [`MAX_MATCHED_LINES`]).
    pub lines: Vec<MatchedLine>,
}

/// How a failed job is classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Triage {
    /// The runner or node is at fault: retry, elsewhere if possible.
    Infrastructure {
        /// The node the log names, else the job's runner.
        node: Option<String>,
        /// The playbook entry that matched (`None`: the node is listed as
        /// sick and nothing matched).
        entry: Option<String>,
        /// The signature of the matching lines (or of the log).
        signature: LogSignature,
        /// The matching lines.
        lines: Vec<MatchedLine>,
    },
    /// A known engine failure: the entry's fixes may be tried.
    KnownEngine {
        /// The first matching engine entry.
        entry: String,
        /// The other matching engine entries, in file order: what is tried
        /// next when the first entry's fixes do not help.
        next: Vec<String>,
        /// The signature of the matching lines.
        signature: LogSignature,
        /// The matching lines.
        lines: Vec<MatchedLine>,
    },
    /// A known failure of the pull request's setup stage.
    Setup {
        /// The entry.
        entry: String,
        /// The signature of the matching lines.
        signature: LogSignature,
        /// The matching lines.
        lines: Vec<MatchedLine>,
    },
    /// Noise after the benchmark window finished: not a serving failure.
    TeardownNoise {
        /// The teardown entry that matched.
        entry: String,
        /// Line where the benchmark printed its results.
        window_end: usize,
        /// The matching lines.
        lines: Vec<MatchedLine>,
    },
    /// Nothing known.
    Unknown {
        /// The log's own signature (its error-looking lines).
        signature: LogSignature,
        /// The lines it was made from.
        lines: Vec<MatchedLine>,
    },
}

impl Triage {
    /// The class's word for reports: `infrastructure`, `engine`, `setup`,
    /// `teardown` or `unknown`.
    pub fn class_name(&self) -> &'static str {
        match self {
            Triage::Infrastructure { .. } => "infrastructure",
            Triage::KnownEngine { .. } => "engine",
            Triage::Setup { .. } => "setup",
            Triage::TeardownNoise { .. } => "teardown",
            Triage::Unknown { .. } => "unknown",
        }
    }

    /// The playbook entry, if one matched.
    pub fn entry(&self) -> Option<&str> {
        match self {
            Triage::Infrastructure { entry, .. } => entry.as_deref(),
            Triage::KnownEngine { entry, .. }
            | Triage::Setup { entry, .. }
            | Triage::TeardownNoise { entry, .. } => Some(entry),
            Triage::Unknown { .. } => None,
        }
    }

    /// The matching lines.
    pub fn lines(&self) -> &[MatchedLine] {
        match self {
            Triage::Infrastructure { lines, .. }
            | Triage::KnownEngine { lines, .. }
            | Triage::Setup { lines, .. }
            | Triage::TeardownNoise { lines, .. }
            | Triage::Unknown { lines, .. } => lines,
        }
    }

    /// The signature, where the class has one (not teardown noise).
    pub fn signature(&self) -> Option<&LogSignature> {
        match self {
            Triage::Infrastructure { signature, .. }
            | Triage::KnownEngine { signature, .. }
            | Triage::Setup { signature, .. }
            | Triage::Unknown { signature, .. } => Some(signature),
            Triage::TeardownNoise { .. } => None,
        }
    }

    /// Whether the job failed for real (everything but teardown noise).
    pub fn is_failure(&self) -> bool {
        !matches!(self, Triage::TeardownNoise { .. })
    }

    /// One paragraph for an attempt report, in both languages: the class,
    /// the entry and node, and the entry's diagnosis (or the sick node's
    /// reason) from `playbook`.
    pub fn summary(&self, playbook: &Playbook) -> Diagnosis {
        let diagnosis = |id: &str| playbook.entry(id).map(|e| e.diagnosis.clone());
        let with = |en: String, zh: String, d: Option<Diagnosis>| match d {
            Some(d) => Diagnosis {
                en: format!("{en}: {}", d.en),
                zh: format!("{zh}：{}", d.zh),
            },
            None => Diagnosis { en, zh },
        };
        match self {
            Triage::Infrastructure { node, entry, .. } => {
                let at = node.as_deref().unwrap_or("an unnamed node");
                let at_zh = node.as_deref().unwrap_or("未知节点");
                let d = entry.as_deref().and_then(diagnosis).or_else(|| {
                    node.as_deref()
                        .and_then(|n| playbook.sick_node(n))
                        .map(|s| s.reason.clone())
                });
                let tag = entry
                    .as_deref()
                    .map_or_else(String::new, |e| format!(" ({e})"));
                let tag_zh = entry
                    .as_deref()
                    .map_or_else(String::new, |e| format!("（{e}）"));
                with(
                    format!("Infrastructure failure on {at}{tag}"),
                    format!("{at_zh} 上的基础设施故障{tag_zh}"),
                    d,
                )
            }
            Triage::KnownEngine { entry, .. } => with(
                format!("Known engine failure {entry}"),
                format!("已知引擎故障 {entry}"),
                diagnosis(entry),
            ),
            Triage::Setup { entry, .. } => with(
                format!("Known setup failure {entry}"),
                format!("已知 setup 阶段故障 {entry}"),
                diagnosis(entry),
            ),
            Triage::TeardownNoise {
                entry, window_end, ..
            } => with(
                format!(
                    "Teardown noise after the benchmark window (results printed on line {window_end}), not a failure ({entry})"
                ),
                format!(
                    "基准窗口结束后的关闭噪声（第 {window_end} 行已输出结果），不是失败（{entry}）"
                ),
                diagnosis(entry),
            ),
            Triage::Unknown { signature, .. } => Diagnosis {
                en: format!("Unknown failure, signature {}", signature.id),
                zh: format!("未知故障，签名 {}", signature.id),
            },
        }
    }
}

/// The compute node a job's log names (SLURM's or InferenceX's own
/// "running on" lines), the first one found.
pub fn log_node(view: &JobLogView) -> Option<String> {
    view.lines.iter().find_map(|l| {
        NODE_LINE
            .captures(&l.text)
            .and_then(|c| c.get(1).or_else(|| c.get(2)))
            .map(|m| m.as_str().to_owned())
    })
}

/// The line where the benchmark printed its result summary, if it did.
pub fn window_end(view: &JobLogView) -> Option<usize> {
    view.lines
        .iter()
        .find(|l| WINDOW_END.is_match(&l.text))
        .map(|l| l.number)
}

fn bounded(view: &JobLogView, mut numbers: Vec<usize>) -> Vec<MatchedLine> {
    numbers.sort_unstable();
    numbers.dedup();
    numbers
        .into_iter()
        .take(MAX_MATCHED_LINES)
        .filter_map(|n| {
            view.lines
                .binary_search_by_key(&n, |l| l.number)
                .ok()
                .map(|i| MatchedLine {
                    number: n,
                    text: cut(&view.lines[i].text, MAX_MATCHED_LINE_CHARS).to_owned(),
                })
        })
        .collect()
}

/// The numbers of the lines an entry's signature matches, or `None` when
/// it does not match.
fn entry_lines(entry: &Entry, view: &JobLogView) -> Option<Vec<usize>> {
    let sig = &entry.signature;
    if view
        .lines
        .iter()
        .any(|l| sig.none.iter().any(|p| p.is_match(&l.text)))
    {
        return None;
    }
    let mut hits = Vec::new();
    for pattern in &sig.all {
        let found: Vec<usize> = view
            .lines
            .iter()
            .filter(|l| pattern.is_match(&l.text))
            .map(|l| l.number)
            .collect();
        if found.is_empty() {
            return None;
        }
        hits.extend(found);
    }
    if !sig.any.is_empty() {
        let found: Vec<usize> = view
            .lines
            .iter()
            .filter(|l| sig.any.iter().any(|p| p.is_match(&l.text)))
            .map(|l| l.number)
            .collect();
        if found.is_empty() {
            return None;
        }
        hits.extend(found);
    }
    (!hits.is_empty()).then_some(hits)
}

/// Every entry whose scope holds for the job and whose signature matches
/// its log, in file order. A teardown entry counts only when its lines come
/// after the benchmark's result summary; an engine or setup entry only
/// when some of its lines come before it (after the window, a failure
/// does not touch the measurement).
pub fn matches(view: &JobLogView, playbook: &Playbook, ctx: &JobContext) -> Vec<Match> {
    let node = log_node(view);
    let end = window_end(view);
    let mut out = Vec::new();
    for entry in &playbook.entries {
        if !entry.signature.scope.applies_to(ctx, node.as_deref()) {
            continue;
        }
        let Some(numbers) = entry_lines(entry, view) else {
            continue;
        };
        let first = numbers.iter().copied().min().unwrap_or(0);
        let after_window = end.is_some_and(|e| first > e);
        let counts = match entry.class {
            Class::Teardown => after_window,
            Class::Engine | Class::Setup => !after_window,
            Class::Infrastructure => true,
        };
        if counts {
            out.push(Match {
                entry: entry.id.clone(),
                class: entry.class,
                lines: bounded(view, numbers),
            });
        }
    }
    out
}

impl Entry {
    /// The lines this entry's patterns match in a log, whatever its scope
    /// (`None`: the patterns do not match).
    pub fn signature_lines(&self, view: &JobLogView) -> Option<Vec<MatchedLine>> {
        entry_lines(self, view).map(|numbers| bounded(view, numbers))
    }
}

fn signature_of(lines: &[MatchedLine]) -> LogSignature {
    LogSignature::of(lines.iter().map(|l| l.text.as_str()))
}

/// Classifies one failed job from its log, the playbook and what is known
/// of the job.
pub fn triage(view: &JobLogView, playbook: &Playbook, ctx: &JobContext) -> Triage {
    let found = matches(view, playbook, ctx);
    let node = log_node(view).or_else(|| ctx.runner_name.clone());
    if let Some(m) = found.iter().find(|m| m.class == Class::Infrastructure) {
        return Triage::Infrastructure {
            node,
            entry: Some(m.entry.clone()),
            signature: signature_of(&m.lines),
            lines: m.lines.clone(),
        };
    }
    if let Some(m) = found
        .iter()
        .find(|m| matches!(m.class, Class::Engine | Class::Setup))
    {
        if m.class == Class::Setup {
            return Triage::Setup {
                entry: m.entry.clone(),
                signature: signature_of(&m.lines),
                lines: m.lines.clone(),
            };
        }
        return Triage::KnownEngine {
            entry: m.entry.clone(),
            next: found
                .iter()
                .filter(|o| o.class == Class::Engine && o.entry != m.entry)
                .map(|o| o.entry.clone())
                .collect(),
            signature: signature_of(&m.lines),
            lines: m.lines.clone(),
        };
    }
    if let Some(m) = found.iter().find(|m| m.class == Class::Teardown) {
        return Triage::TeardownNoise {
            entry: m.entry.clone(),
            window_end: window_end(view).unwrap_or(0),
            lines: m.lines.clone(),
        };
    }
    let signature = view.signature();
    let lines = unknown_lines(view, &signature);
    if let Some(sick) = node.as_deref().and_then(|n| playbook.sick_node(n)) {
        return Triage::Infrastructure {
            node: node.clone(),
            entry: sick.entry.clone(),
            signature,
            lines,
        };
    }
    Triage::Unknown { signature, lines }
}

/// The log lines a signature was made from (the last occurrence of each).
fn unknown_lines(view: &JobLogView, signature: &LogSignature) -> Vec<MatchedLine> {
    let mut wanted: std::collections::HashSet<&str> =
        signature.lines.iter().map(String::as_str).collect();
    let mut numbers = Vec::new();
    for l in view.lines.iter().rev() {
        if wanted.is_empty() {
            break;
        }
        if wanted.remove(super::normalize::normalize_line(&l.text).as_str()) {
            numbers.push(l.number);
        }
    }
    bounded(view, numbers)
}
