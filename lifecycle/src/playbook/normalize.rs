//! Job logs made readable and comparable.
//!
//! A [`JobLogView`] keeps a bounded part of one job's log (its head, where
//! SLURM names the node, and its tail, where the failure is), each line
//! cleaned of GitHub's timestamp prefix and terminal colours and cut to
//! [`MAX_LINE_CHARS`]: the playbook's patterns match these lines.
//!
//! [`normalize_line`] goes further for comparison: timestamps, digests,
//! hex hashes, absolute paths and numbers become placeholders, so the same
//! failure on another node, rank, port or day reads the same, and a
//! [`LogSignature`] hashes such lines into a stable id.

use std::collections::HashSet;
use std::sync::LazyLock;

use regex::Regex;
use sha2::{Digest, Sha256};

/// Longest line kept, in characters; the rest is cut.
pub const MAX_LINE_CHARS: usize = 2_000;
/// Lines kept from the start of a log.
pub const HEAD_LINES: usize = 2_000;
/// Lines kept from the end of a log.
pub const TAIL_LINES: usize = 20_000;
/// Most lines a [`LogSignature`] is made of.
pub const MAX_SIGNATURE_LINES: usize = 8;
/// Longest normalised line kept in a signature, in characters.
pub const MAX_SIGNATURE_LINE_CHARS: usize = 300;

static GITHUB_PREFIX: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?Z ?").expect("static regex")
});
static ANSI: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\x1b\[[0-9;?]*[A-Za-z]").expect("static regex"));
static TIMESTAMP: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)?|\b\d{2}:\d{2}:\d{2}(?:[.,]\d+)?",
    )
    .expect("static regex")
});
static DIGEST: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"sha256:[0-9a-fA-F]{64}").expect("static regex"));
static HEX: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b0x[0-9a-fA-F]+\b|\b[0-9a-f]{7,}\b").expect("static regex"));
static PATH: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"(^|[\s'"(=,\[:])/[^\s'"(),\]]+"#).expect("static regex"));
static NUMBER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\d+(?:\.\d+)*").expect("static regex"));
static SPACE: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\s+").expect("static regex"));
static ERRORISH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)error|exception|traceback|fatal|failed|failure|killed|out of memory|assert|abort|panic|denied|no space")
        .expect("static regex")
});

/// One kept line of a job log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// 1-based line number in the whole log.
    pub number: usize,
    /// The line without GitHub's timestamp prefix, terminal colours and
    /// trailing `\r`, cut to [`MAX_LINE_CHARS`].
    pub text: String,
}

/// The bounded, cleaned view of one job's log that triage reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobLogView {
    /// Kept lines, in order.
    pub lines: Vec<LogLine>,
    /// Lines left out between the head and the tail.
    pub omitted: usize,
}

impl JobLogView {
    /// Reads a job's log text (as GitHub's job-log download gives it). The
    /// caller bounds how much it downloads; this bounds what is kept.
    pub fn new(text: &str) -> JobLogView {
        // A trailing newline ends the last line; it does not start another.
        let text = text.strip_suffix('\n').unwrap_or(text);
        let mut head = Vec::new();
        let mut tail = std::collections::VecDeque::new();
        let mut total = 0usize;
        for (i, raw) in text.split('\n').enumerate() {
            total = i + 1;
            if head.len() < HEAD_LINES {
                head.push(LogLine {
                    number: i + 1,
                    text: clean_line(raw),
                });
                continue;
            }
            if tail.len() == TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back((i + 1, raw));
        }
        let kept = head.len() + tail.len();
        head.extend(tail.into_iter().map(|(number, raw)| LogLine {
            number,
            text: clean_line(raw),
        }));
        JobLogView {
            lines: head,
            omitted: total.saturating_sub(kept),
        }
    }

    /// The log's own signature: its error-looking lines (the last
    /// [`MAX_SIGNATURE_LINES`] distinct ones once normalised), else its last
    /// lines.
    pub fn signature(&self) -> LogSignature {
        let errorish: Vec<&str> = self
            .lines
            .iter()
            .filter(|l| ERRORISH.is_match(&l.text))
            .map(|l| l.text.as_str())
            .collect();
        if errorish.is_empty() {
            let nonempty: Vec<&str> = self
                .lines
                .iter()
                .map(|l| l.text.as_str())
                .filter(|t| !t.trim().is_empty())
                .collect();
            LogSignature::of_last(&nonempty)
        } else {
            LogSignature::of_last(&errorish)
        }
    }
}

/// A line without GitHub's timestamp prefix, terminal colours and trailing
/// `\r`, cut to [`MAX_LINE_CHARS`] characters.
pub fn clean_line(raw: &str) -> String {
    let raw = raw.strip_suffix('\r').unwrap_or(raw);
    let raw = cut(raw, MAX_LINE_CHARS * 2);
    let raw = GITHUB_PREFIX.replace(raw, "");
    let text = ANSI.replace_all(&raw, "");
    cut(&text, MAX_LINE_CHARS).to_owned()
}

/// A line with timestamps, digests, hex hashes, absolute paths and numbers
/// replaced by `<ts>`, `<digest>`, `<hex>`, `<path>` and `<n>`, runs of
/// white space made one space, cut to [`MAX_SIGNATURE_LINE_CHARS`].
pub fn normalize_line(line: &str) -> String {
    let line = clean_line(line);
    let line = TIMESTAMP.replace_all(&line, "<ts>");
    let line = DIGEST.replace_all(&line, "<digest>");
    let line = HEX.replace_all(&line, |c: &regex::Captures<'_>| {
        let m = &c[0];
        if m.starts_with("0x") || m.bytes().any(|b| b.is_ascii_digit()) {
            "<hex>".to_owned()
        } else {
            m.to_owned()
        }
    });
    let line = PATH.replace_all(&line, "${1}<path>");
    let line = NUMBER.replace_all(&line, "<n>");
    let line = SPACE.replace_all(line.trim(), " ");
    cut(&line, MAX_SIGNATURE_LINE_CHARS).to_owned()
}

/// A stable id for a set of log lines, the same across nodes, ranks, ports,
/// paths and days: what sick-node tracking and learning compare.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LogSignature {
    /// `sig-` and 16 hex digits of the SHA-256 of the normalised lines.
    pub id: String,
    /// The normalised lines, distinct, in log order (at most
    /// [`MAX_SIGNATURE_LINES`]).
    pub lines: Vec<String>,
}

impl LogSignature {
    /// The signature of these lines: normalised, repeats dropped, the first
    /// [`MAX_SIGNATURE_LINES`] kept.
    pub fn of<'a>(lines: impl IntoIterator<Item = &'a str>) -> LogSignature {
        let mut seen = HashSet::new();
        let mut kept = Vec::new();
        for line in lines {
            let n = normalize_line(line);
            if n.is_empty() || !seen.insert(n.clone()) {
                continue;
            }
            kept.push(n);
            if kept.len() == MAX_SIGNATURE_LINES {
                break;
            }
        }
        Self::from_normalized(kept)
    }

    /// The signature of the last [`MAX_SIGNATURE_LINES`] distinct lines.
    fn of_last(lines: &[&str]) -> LogSignature {
        let mut seen = HashSet::new();
        let mut kept = Vec::new();
        for line in lines.iter().rev() {
            let n = normalize_line(line);
            if n.is_empty() || !seen.insert(n.clone()) {
                continue;
            }
            kept.push(n);
            if kept.len() == MAX_SIGNATURE_LINES {
                break;
            }
        }
        kept.reverse();
        Self::from_normalized(kept)
    }

    fn from_normalized(lines: Vec<String>) -> LogSignature {
        let mut hash = Sha256::new();
        for l in &lines {
            hash.update(l.as_bytes());
            hash.update(b"\n");
        }
        let digest = hash.finalize();
        let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        LogSignature {
            id: format!("sig-{hex}"),
            lines,
        }
    }
}

/// At most `max` characters of `s`, on a character boundary.
pub(crate) fn cut(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn github_prefix_colours_and_cr_are_cleaned() {
        assert_eq!(
            clean_line("2026-05-01T12:00:01.1234567Z \x1b[31mERROR\x1b[0m boom\r"),
            "ERROR boom"
        );
    }

    #[test]
    fn normalisation_strips_what_varies_between_runs() {
        let a = normalize_line(
            "[2026-05-01 12:00:01] (Worker_TP3 pid=4711) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 139.81 GiB of which 512.00 MiB is free. /opt/venv/lib/python3.12/site-packages/torch/x.py",
        );
        let b = normalize_line(
            "2026-06-02T01:02:03.5Z [2026-06-02 01:02:03] (Worker_TP0 pid=99) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 79.1 GiB of which 2 MiB is free. /usr/lib/python3/torch/y.py",
        );
        assert_eq!(a, b);
        assert!(
            a.contains("torch.OutOfMemoryError: CUDA out of memory"),
            "{a}"
        );
        assert_eq!(
            normalize_line(
                "pulled image@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef commit 4f2a9c1e"
            ),
            "pulled image@<digest> commit <hex>"
        );
    }

    #[test]
    fn view_keeps_head_and_tail_and_counts_the_rest() {
        let text: String = (1..=HEAD_LINES + TAIL_LINES + 10)
            .map(|i| format!("line {i}\n"))
            .collect();
        let view = JobLogView::new(&text);
        assert_eq!(view.lines.len(), HEAD_LINES + TAIL_LINES);
        assert_eq!(view.omitted, 10);
        assert_eq!(view.lines[0].text, "line 1");
        let last = view.lines.last().unwrap();
        assert_eq!(last.number, HEAD_LINES + TAIL_LINES + 10);
        assert_eq!(JobLogView::new("a\nb\n").lines.len(), 2);
        assert_eq!(JobLogView::new("").lines.len(), 1);
    }

    #[test]
    fn long_lines_are_cut_on_a_character_boundary() {
        let line = "é".repeat(MAX_LINE_CHARS * 3);
        assert_eq!(clean_line(&line).chars().count(), MAX_LINE_CHARS);
    }

    #[test]
    fn signatures_agree_across_nodes_and_ranks() {
        let a = JobLogView::new(
            "JOB 1 running on mia1-p01-g09\nRuntimeError: CUDA error: out of memory on rank 3\n",
        );
        let b = JobLogView::new(
            "JOB 77 running on chi-mi300x-034\nRuntimeError: CUDA error: out of memory on rank 0\n",
        );
        assert_eq!(a.signature(), b.signature());
        assert!(a.signature().id.starts_with("sig-"));
        assert_eq!(a.signature().id.len(), 20);
    }
}
