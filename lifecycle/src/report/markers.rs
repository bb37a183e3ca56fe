//! Klaud's hidden markers (see `klaud_lifecycle::report`) and their parsers.
//!
//! A record comment starts with an HTML comment that GitHub does not show:
//!
//! ```text
//! <!-- klaud-report:<owner run>:<candidate>:<name>[:part-<i>]
//! {typed JSON}
//! -->
//! ```
//!
//! (`klaud-outcome:<owner run>:<candidate>` for receipts,
//! `klaud-hunt:<owner run>:<candidate>:h<n>-plan|h<n>-step-<k>|h<n>-end` for
//! the steps of a regression hunt, [`crate::hunt`]), and the cleanup
//! marker is the single line `<!-- klaud-cleanup:<owner run>:<candidate> -->`.
//! A receipt may carry the final report's record right after its own
//! (the report's hidden block on the next line, before any shown text):
//! [`find_records`] reads both, [`find_record`] the receipt.
//! The JSON is written with `<`, `>` and `&` as `\u003c`-style escapes, so no
//! value can end the comment early. Markers are recognised only at the very
//! start of a body: a person quoting a Klaud comment starts with `>` and is
//! never mistaken for Klaud.

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::model::{CandidateId, OwnerRun, shorten};

/// Longest marker header line accepted.
const MAX_HEADER: usize = 200;
/// Longest part number accepted.
pub const MAX_PARTS: u32 = 999;

/// What a record is called: the frozen baseline or one run attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReportName {
    /// `baseline`.
    Baseline,
    /// `run-<id>-<attempt>`.
    Run {
        /// Run id.
        id: u64,
        /// Run attempt.
        attempt: u32,
    },
}

impl fmt::Display for ReportName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReportName::Baseline => f.write_str("baseline"),
            ReportName::Run { id, attempt } => write!(f, "run-{id}-{attempt}"),
        }
    }
}

impl ReportName {
    /// Parses `baseline` or `run-<id>-<attempt>`.
    pub fn parse(s: &str) -> Option<Self> {
        if s == "baseline" {
            return Some(Self::Baseline);
        }
        let (id, attempt) = s.strip_prefix("run-")?.split_once('-')?;
        Some(Self::Run {
            id: digits(id)?,
            attempt: u32::try_from(digits(attempt)?).ok()?,
        })
    }
}

impl Serialize for ReportName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ReportName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        ReportName::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format!("invalid report name {:?}", shorten(&s, 40)))
        })
    }
}

/// Which record of a regression hunt a `klaud-hunt` marker names: the
/// plan (tags, digests, point, budget), one step, or the end. Hunts of one
/// candidate are numbered from 1, so a hunt started again after `/klaud stop`
/// never reads the steps of the one before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HuntName {
    /// `h<n>-plan`.
    Plan {
        /// Hunt number.
        hunt: u32,
    },
    /// `h<n>-step-<k>` (steps from 1).
    Step {
        /// Hunt number.
        hunt: u32,
        /// Step number.
        step: u32,
    },
    /// `h<n>-end`.
    End {
        /// Hunt number.
        hunt: u32,
    },
}

impl HuntName {
    /// The hunt number.
    pub fn hunt(self) -> u32 {
        match self {
            HuntName::Plan { hunt } | HuntName::Step { hunt, .. } | HuntName::End { hunt } => hunt,
        }
    }

    /// Parses `h<n>-plan`, `h<n>-step-<k>` or `h<n>-end`.
    pub fn parse(s: &str) -> Option<Self> {
        let (hunt, rest) = s.strip_prefix('h')?.split_once('-')?;
        let hunt = u32::try_from(digits(hunt)?).ok()?;
        match rest {
            "plan" => Some(Self::Plan { hunt }),
            "end" => Some(Self::End { hunt }),
            _ => {
                let step = u32::try_from(digits(rest.strip_prefix("step-")?)?).ok()?;
                Some(Self::Step { hunt, step })
            }
        }
    }
}

impl fmt::Display for HuntName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HuntName::Plan { hunt } => write!(f, "h{hunt}-plan"),
            HuntName::Step { hunt, step } => write!(f, "h{hunt}-step-{step}"),
            HuntName::End { hunt } => write!(f, "h{hunt}-end"),
        }
    }
}

fn digits(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Which record a marker names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MarkerKey {
    /// An attempt or baseline report (or one part of it).
    Report {
        /// Owner run.
        owner_run: OwnerRun,
        /// Candidate.
        candidate: CandidateId,
        /// Record name.
        name: ReportName,
        /// Part number (from 1) of a split record.
        part: Option<u32>,
    },
    /// The completion receipt.
    Outcome {
        /// Owner run.
        owner_run: OwnerRun,
        /// Candidate.
        candidate: CandidateId,
    },
    /// Cleanup in progress.
    Cleanup {
        /// Owner run.
        owner_run: OwnerRun,
        /// Candidate.
        candidate: CandidateId,
    },
    /// A record of a regression hunt.
    Hunt {
        /// Owner run.
        owner_run: OwnerRun,
        /// Candidate.
        candidate: CandidateId,
        /// Which record.
        name: HuntName,
    },
}

impl fmt::Display for MarkerKey {
    /// The marker text after `<!-- `.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MarkerKey::Report {
                owner_run,
                candidate,
                name,
                part,
            } => {
                write!(f, "klaud-report:{owner_run}:{candidate}:{name}")?;
                if let Some(part) = part {
                    write!(f, ":part-{part}")?;
                }
                Ok(())
            }
            MarkerKey::Outcome {
                owner_run,
                candidate,
            } => write!(f, "klaud-outcome:{owner_run}:{candidate}"),
            MarkerKey::Cleanup {
                owner_run,
                candidate,
            } => write!(f, "klaud-cleanup:{owner_run}:{candidate}"),
            MarkerKey::Hunt {
                owner_run,
                candidate,
                name,
            } => write!(f, "klaud-hunt:{owner_run}:{candidate}:{name}"),
        }
    }
}

impl MarkerKey {
    /// The owner run named.
    pub fn owner_run(&self) -> OwnerRun {
        match self {
            MarkerKey::Report { owner_run, .. }
            | MarkerKey::Outcome { owner_run, .. }
            | MarkerKey::Cleanup { owner_run, .. }
            | MarkerKey::Hunt { owner_run, .. } => *owner_run,
        }
    }

    /// The candidate named.
    pub fn candidate(&self) -> &CandidateId {
        match self {
            MarkerKey::Report { candidate, .. }
            | MarkerKey::Outcome { candidate, .. }
            | MarkerKey::Cleanup { candidate, .. }
            | MarkerKey::Hunt { candidate, .. } => candidate,
        }
    }
}

/// Why a body that claims to be a Klaud record is not a valid one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MarkerError {
    /// The header line is malformed.
    #[error("malformed Klaud marker {found:?}: {reason}")]
    Header {
        /// The header, shortened.
        found: String,
        /// What is wrong.
        reason: String,
    },
    /// No `-->` ends the hidden record.
    #[error("Klaud marker {marker}: the hidden record is not terminated by a line \"-->\"")]
    Unterminated {
        /// The marker.
        marker: String,
    },
    /// The hidden JSON does not parse as the record type.
    #[error("Klaud marker {marker}: hidden record is not valid: {reason}")]
    Json {
        /// The marker.
        marker: String,
        /// The JSON error.
        reason: String,
    },
    /// The record names another owner, candidate or name than its marker.
    #[error("Klaud marker {marker}: the hidden record names {found}")]
    Mismatch {
        /// The marker.
        marker: String,
        /// What the record says instead.
        found: String,
    },
    /// A marker was found where another kind was expected.
    #[error("expected a {expected} marker, found {found}")]
    WrongKind {
        /// Expected kind.
        expected: &'static str,
        /// The marker found.
        found: String,
    },
}

/// A hidden record found at the start of a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HiddenRecord<'a> {
    /// The marker.
    pub key: MarkerKey,
    /// The JSON text (empty for cleanup markers).
    pub json: &'a str,
    /// The rendered text after the hidden record.
    pub rest: &'a str,
}

/// Serializes a record for a hidden comment: compact JSON with `<`, `>` and
/// `&` (and `@`) escaped, so the text can never contain `-->` or a mention.
pub fn hidden_json<T: Serialize>(record: &T) -> String {
    let json = serde_json::to_string(record).unwrap_or_else(|e| {
        // Records are plain data (no maps with non-string keys), so this
        // cannot happen; a visible error string still makes a valid record.
        format!("{{\"error\":{:?}}}", e.to_string())
    });
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            // Mentions are not read inside HTML comments, but nothing Klaud
            // writes should even look like one.
            '@' => out.push_str("\\u0040"),
            _ => out.push(c),
        }
    }
    out
}

/// `<!-- <key>\n<json>\n-->\n`.
pub fn hidden_block(key: &MarkerKey, json: &str) -> String {
    format!("<!-- {key}\n{json}\n-->\n")
}

/// The cleanup marker line.
pub fn cleanup_marker(owner_run: OwnerRun, candidate: &CandidateId) -> String {
    format!(
        "<!-- {} -->",
        MarkerKey::Cleanup {
            owner_run,
            candidate: candidate.clone()
        }
    )
}

/// Finds the Klaud record a body starts with. `Ok(None)` means the body is
/// not a Klaud record at all (someone else's comment); `Err` means it claims
/// to be one but is malformed.
pub fn find_record(body: &str) -> Result<Option<HiddenRecord<'_>>, MarkerError> {
    let trimmed = body.trim_start_matches(['\u{feff}', ' ', '\t', '\r', '\n']);
    let Some(after) = trimmed.strip_prefix("<!--") else {
        return Ok(None);
    };
    let after = after.trim_start_matches([' ', '\t']);
    if !after.starts_with("klaud-report:")
        && !after.starts_with("klaud-outcome:")
        && !after.starts_with("klaud-cleanup:")
        && !after.starts_with("klaud-hunt:")
    {
        return Ok(None);
    }
    let line_end = after.find('\n').unwrap_or(after.len());
    let line = after[..line_end].trim_end_matches('\r');
    if line.len() > MAX_HEADER {
        return Err(header_error(line, "too long"));
    }
    if let Some(header) = line.strip_prefix("klaud-cleanup:") {
        let header = header.trim_end();
        let Some(header) = header.strip_suffix("-->") else {
            return Err(header_error(
                line,
                "a cleanup marker ends on its line with \"-->\"",
            ));
        };
        let (owner_run, candidate) = run_and_candidate(header.trim_end(), line)?;
        return Ok(Some(HiddenRecord {
            key: MarkerKey::Cleanup {
                owner_run,
                candidate,
            },
            json: "",
            rest: &after[line_end..],
        }));
    }
    let key = if let Some(header) = line.strip_prefix("klaud-hunt:") {
        let (head, name) = header
            .trim_end()
            .rsplit_once(':')
            .ok_or_else(|| header_error(line, "expected <owner run>:<candidate>:<hunt record>"))?;
        let (owner_run, candidate) = run_and_candidate(head, line)?;
        let name = HuntName::parse(name).ok_or_else(|| {
            header_error(
                line,
                "hunt record is neither h<n>-plan, h<n>-step-<k> nor h<n>-end",
            )
        })?;
        MarkerKey::Hunt {
            owner_run,
            candidate,
            name,
        }
    } else if let Some(header) = line.strip_prefix("klaud-outcome:") {
        let (owner_run, candidate) = run_and_candidate(header.trim_end(), line)?;
        MarkerKey::Outcome {
            owner_run,
            candidate,
        }
    } else {
        let header = line
            .strip_prefix("klaud-report:")
            .unwrap_or(line)
            .trim_end();
        let mut fields = header.splitn(4, ':');
        let (run, candidate, name, part) = (
            fields.next().unwrap_or_default(),
            fields.next().unwrap_or_default(),
            fields.next().unwrap_or_default(),
            fields.next(),
        );
        let owner_run =
            digits(run).ok_or_else(|| header_error(line, "owner run is not a number"))?;
        let candidate =
            CandidateId::new(candidate).map_err(|e| header_error(line, &e.to_string()))?;
        let name = ReportName::parse(name)
            .ok_or_else(|| header_error(line, "name is neither baseline nor run-<id>-<attempt>"))?;
        let part = match part {
            None => None,
            Some(p) => Some(
                p.strip_prefix("part-")
                    .and_then(digits)
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|n| (1..=MAX_PARTS).contains(n))
                    .ok_or_else(|| header_error(line, "part is not part-<1..999>"))?,
            ),
        };
        MarkerKey::Report {
            owner_run,
            candidate,
            name,
            part,
        }
    };
    if line_end == after.len() {
        return Err(MarkerError::Unterminated {
            marker: key.to_string(),
        });
    }
    let json_start = line_end + 1;
    let rest_of_body = &after[json_start..];
    let end = find_terminator(rest_of_body).ok_or_else(|| MarkerError::Unterminated {
        marker: key.to_string(),
    })?;
    let json = rest_of_body[..end].trim_end_matches(['\r', '\n']);
    let after_terminator = &rest_of_body[end..];
    let after_terminator = after_terminator
        .strip_prefix("-->")
        .unwrap_or(after_terminator);
    Ok(Some(HiddenRecord {
        key,
        json,
        rest: after_terminator,
    }))
}

/// The Klaud records a body starts with: the one [`find_record`] finds
/// and, when that is a receipt, the attempt report folded into the same
/// comment (the final report the candidate ended on, posted with its
/// receipt to save a write). The folded record is read only where Klaud
/// puts it: its hidden block starting on the line right after the
/// receipt's `-->`, before any text shown. Both hidden blocks hold escaped
/// JSON that cannot end early, so a marker-like line anywhere in the shown
/// text (a quoted job log, a config name) is never read as a record. A
/// folded block that does not read (a person edited the comment) is left
/// out, so the receipt before it still counts for every reader.
pub fn find_records(body: &str) -> Result<Vec<HiddenRecord<'_>>, MarkerError> {
    let Some(first) = find_record(body)? else {
        return Ok(Vec::new());
    };
    let folded = match first.key {
        MarkerKey::Outcome { .. } => folded_report(first.rest).ok().flatten(),
        _ => None,
    };
    Ok(std::iter::once(first).chain(folded).collect())
}

/// The report record whose hidden block opens `rest`, the text right
/// after a receipt's terminator; `None` when the receipt comes alone.
fn folded_report(rest: &str) -> Result<Option<HiddenRecord<'_>>, MarkerError> {
    let Some(next) = rest
        .strip_prefix("\r\n")
        .or_else(|| rest.strip_prefix('\n'))
        .filter(|next| next.starts_with("<!-- klaud-report:"))
    else {
        return Ok(None);
    };
    find_record(next)
}

/// Index of the `-->` that starts a line.
fn find_terminator(s: &str) -> Option<usize> {
    if s.starts_with("-->") {
        return Some(0);
    }
    s.match_indices("\n-->").next().map(|(i, _)| i + 1)
}

fn run_and_candidate(header: &str, line: &str) -> Result<(OwnerRun, CandidateId), MarkerError> {
    let (run, candidate) = header
        .split_once(':')
        .ok_or_else(|| header_error(line, "expected <owner run>:<candidate>"))?;
    let owner_run = digits(run).ok_or_else(|| header_error(line, "owner run is not a number"))?;
    let candidate = CandidateId::new(candidate).map_err(|e| header_error(line, &e.to_string()))?;
    Ok((owner_run, candidate))
}

fn header_error(line: &str, reason: &str) -> MarkerError {
    MarkerError::Header {
        found: shorten(line, 120),
        reason: reason.to_owned(),
    }
}

/// Parses a hidden record's JSON as `T`.
pub fn parse_json<T: DeserializeOwned>(record: &HiddenRecord<'_>) -> Result<T, MarkerError> {
    serde_json::from_str(record.json).map_err(|e| MarkerError::Json {
        marker: record.key.to_string(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAND: &str = "d92e15065c55779d-0123456789abcdef";

    #[test]
    fn report_marker_round_trips() {
        let body = format!(
            "<!-- klaud-report:35570778795:{CAND}:run-355-2:part-3\n{{\"a\":1}}\n-->\n**text**"
        );
        let rec = find_record(&body).expect("valid").expect("ours");
        assert_eq!(rec.json, "{\"a\":1}");
        assert_eq!(rec.rest, "\n**text**");
        let MarkerKey::Report { name, part, .. } = &rec.key else {
            panic!("not a report");
        };
        assert_eq!(
            *name,
            ReportName::Run {
                id: 355,
                attempt: 2
            }
        );
        assert_eq!(*part, Some(3));
        assert_eq!(
            rec.key.to_string(),
            format!("klaud-report:35570778795:{CAND}:run-355-2:part-3")
        );
    }

    #[test]
    fn crlf_bodies_parse() {
        let body = format!("<!-- klaud-outcome:1:{CAND}\r\n{{}}\r\n-->\r\n**failed**");
        let rec = find_record(&body).expect("valid").expect("ours");
        assert_eq!(rec.json, "{}");
    }

    #[test]
    fn foreign_and_quoted_bodies_are_not_ours() {
        for body in [
            "",
            "LGTM",
            "> <!-- klaud-outcome:1:x",
            "<!-- other-bot:1 -->",
            "text\n<!-- klaud-outcome:1:d92e15065c55779d-0123456789abcdef\n{}\n-->",
        ] {
            assert_eq!(find_record(body), Ok(None), "{body:?}");
        }
    }

    #[test]
    fn malformed_markers_are_clear_errors() {
        let cases = [
            format!("<!-- klaud-report:x:{CAND}:baseline\n{{}}\n-->"),
            "<!-- klaud-report:1:nothex:baseline\n{}\n-->".to_owned(),
            format!("<!-- klaud-report:1:{CAND}:latest\n{{}}\n-->"),
            format!("<!-- klaud-report:1:{CAND}:baseline:part-0\n{{}}\n-->"),
            format!("<!-- klaud-report:1:{CAND}:baseline\n{{}}"),
            format!("<!-- klaud-report:1:{CAND}:baseline"),
            format!("<!-- klaud-cleanup:1:{CAND}"),
            format!("<!-- klaud-outcome:{}:{CAND}\n{{}}\n-->", "9".repeat(30)),
            format!("<!-- klaud-outcome:1:{CAND}{}\n{{}}\n-->", "x".repeat(500)),
        ];
        for body in &cases {
            assert!(find_record(body).is_err(), "{body:?} accepted");
        }
    }

    #[test]
    fn cleanup_marker_round_trips() {
        let cand = CandidateId::new(CAND).expect("id");
        let line = cleanup_marker(42, &cand);
        assert_eq!(line, format!("<!-- klaud-cleanup:42:{CAND} -->"));
        let rec = find_record(&line).expect("valid").expect("ours");
        assert_eq!(
            rec.key,
            MarkerKey::Cleanup {
                owner_run: 42,
                candidate: cand
            }
        );
    }

    #[test]
    fn hunt_markers_round_trip_and_reject_bad_names() {
        let cand = CandidateId::new(CAND).expect("id");
        for name in [
            HuntName::Plan { hunt: 1 },
            HuntName::Step { hunt: 2, step: 3 },
            HuntName::End { hunt: 1 },
        ] {
            let key = MarkerKey::Hunt {
                owner_run: 7,
                candidate: cand.clone(),
                name,
            };
            let body = hidden_block(&key, "{}");
            let rec = find_record(&body).expect("valid").expect("ours");
            assert_eq!(rec.key, key);
        }
        for bad in [
            "h1-stop",
            "h-plan",
            "hx-end",
            "h1-step-",
            "h1-step-x",
            "plan",
        ] {
            let body = format!("<!-- klaud-hunt:7:{CAND}:{bad}\n{{}}\n-->");
            assert!(find_record(&body).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn a_report_is_read_folded_only_right_after_a_receipt() {
        let receipt = format!("<!-- klaud-outcome:1:{CAND}\n{{}}\n-->\n");
        let report = format!("<!-- klaud-report:1:{CAND}:run-5-1\n{{}}\n-->\n");
        let keys = |body: &str| -> Vec<String> {
            find_records(body)
                .expect("valid")
                .iter()
                .map(|r| r.key.to_string())
                .collect()
        };
        let folded = format!("{receipt}{report}**validated**\n");
        assert_eq!(
            keys(&folded),
            [
                format!("klaud-outcome:1:{CAND}"),
                format!("klaud-report:1:{CAND}:run-5-1")
            ]
        );
        assert_eq!(keys(&receipt).len(), 1);
        assert_eq!(keys(&report).len(), 1, "a report folds nothing in");
        assert_eq!(keys("LGTM"), Vec::<String>::new());
        // Marker-like lines in the shown text (a quoted log, a note) are
        // text: only the block on the line right after the receipt counts.
        for hostile in [
            format!("{receipt}\n{report}"),
            format!("{receipt}text\n{report}"),
            format!("{receipt} {report}"),
            format!("{receipt}{report}log:\n<!-- klaud-report:1:{CAND}:run-6-1\n{{}}\n-->\n"),
            format!("{report}<!-- klaud-outcome:1:{CAND}\n{{}}\n-->\n"),
        ] {
            assert!(keys(&hostile).len() <= 2, "{hostile:?}");
            assert!(
                !keys(&hostile).iter().any(|k| k.contains("run-6-1")),
                "{hostile:?}"
            );
        }
        assert_eq!(keys(&format!("{receipt}\n{report}")).len(), 1);
        assert_eq!(keys(&format!("{receipt}text\n{report}")).len(), 1);
        // A folded block that claims to be a record and is not one is left
        // out: the receipt still counts (a publish never posts it again).
        let broken = format!("{receipt}<!-- klaud-report:1:{CAND}:latest\n{{}}\n-->\n");
        assert_eq!(keys(&broken), [format!("klaud-outcome:1:{CAND}")]);
        let unterminated = format!("{receipt}<!-- klaud-report:1:{CAND}:run-5-1\n{{}}");
        assert_eq!(keys(&unterminated).len(), 1);
        assert!(find_records(&format!("<!-- klaud-outcome:x:{CAND}\n{{}}\n-->")).is_err());
    }

    #[test]
    fn hidden_json_never_contains_a_comment_end() {
        let json = hidden_json(&serde_json::json!({"reason": "--> <b>& @x"}));
        assert!(
            !json.contains("-->")
                && !json.contains('<')
                && !json.contains('&')
                && !json.contains('@')
        );
        let back: serde_json::Value = serde_json::from_str(&json).expect("still JSON");
        assert_eq!(back["reason"], "--> <b>& @x");
    }
}
