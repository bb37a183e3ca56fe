//! Everything Klaud writes for people to read: the PR title and
//! body, attempt reports, receipts and the cleanup marker — each with a
//! hidden typed record so a later run (or another instance) can find it,
//! read it back and tell whether publishing again would change anything.
//!
//! Rendering is pure; publishing is the state machine's job. Every value
//! from outside is escaped ([`format`](mod@format)) so Klaud never mentions anyone and
//! no text can break a marker.

pub mod attempt;
pub mod footer;
pub mod format;
pub mod learned;
pub mod live;
pub mod markers;
pub mod pr;
pub mod receipt;
pub mod sick_node;

pub use attempt::{
    AttemptReport, EVAL_SAMPLES_DIFFER, EvalComparison, FailedJob, JobTriage, MAX_COMMENT_CHARS,
    MAX_TRIAGE_LINE_CHARS, MAX_TRIAGE_LINES, Measure, PartInfo, PlaybookFixShown, ReassembleError,
    RepairChanges, ReportRow, ReportSection, TriageClass, compare, compare_evals, parse_report,
    reassemble, render_report, render_report_with_limit, uncovered_points,
};
pub use footer::{FOOTER_END, FOOTER_START, insert_before_footer, render_footer, splice_footer};
pub use learned::{LearnedEntry, render_learned};
pub use live::{JobGroup, LiveJobs};
pub use markers::{
    HiddenRecord, HuntName, MarkerError, MarkerKey, ReportName, find_record, find_records,
};
pub use pr::{
    BASELINE_END, BASELINE_PLACEHOLDER, BASELINE_START, BumpScope, DEFAULT_DISPLAY_NAME,
    FrozenBaseline, FrozenError, Provenance, SpliceError, UpstreamRange, VersionsCompared,
    audit_line, audit_note, engine_display, initial_body, opening_body, parse_baseline_block,
    pr_title, render_baseline_block, splice_baseline,
};
pub use receipt::{
    Receipt, SweepCheck, candidate_receipt, parse_receipt, render_cleanup, render_receipt,
};

/// A comment ready to publish, with the key that identifies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedComment {
    /// The marker key.
    pub key: MarkerKey,
    /// The full body.
    pub body: String,
}

/// One comment holding `receipt` and the final attempt `report` the
/// candidate ended on, which saves a write at the end of a lifecycle:
/// both hidden blocks first (the receipt's, so every reader of receipts
/// finds it where it always was, then the report's, which
/// [`markers::find_records`] reads only there), then the receipt's
/// text and the report's. `None` when the two do not make one comment: a
/// report in parts, a body past [`MAX_COMMENT_CHARS`], or either
/// not a record of its kind (they are then posted apart).
pub fn fold_receipt(
    receipt: &RenderedComment,
    report: &RenderedComment,
) -> Option<RenderedComment> {
    let (MarkerKey::Outcome { .. }, MarkerKey::Report { part: None, .. }) =
        (&receipt.key, &report.key)
    else {
        return None;
    };
    // Each hidden block (through its "-->" line) and the text after it,
    // as the one parser of records reads them.
    let split = |body: &str| {
        let text = markers::find_record(body).ok()??.rest.strip_prefix('\n')?;
        let end = body.len() - text.len();
        Some((body[..end].to_owned(), text.to_owned()))
    };
    let (receipt_block, receipt_text) = split(&receipt.body)?;
    let (report_block, report_text) = split(&report.body)?;
    let body = format!("{receipt_block}{report_block}{receipt_text}\n{report_text}");
    (body.chars().count() <= MAX_COMMENT_CHARS).then(|| RenderedComment {
        key: receipt.key.clone(),
        body,
    })
}

/// Why a report could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// Even one row per part does not fit, or more than 999 parts are needed.
    #[error("report {marker} cannot be split into comments of at most {limit} characters")]
    TooLarge {
        /// The record's marker.
        marker: String,
        /// The limit.
        limit: usize,
    },
}

/// How an existing comment relates to one Klaud wants to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Existing {
    /// Not this record (another record, another bot, a person).
    Unrelated,
    /// The same record with the same content: publishing changes nothing.
    Identical,
    /// The same record with other content: edit that comment.
    Changed,
}

/// Compares an existing comment body with a rendered comment. Two bodies
/// are the same record when their markers are equal; the content is equal
/// when the texts are (line endings aside) or the hidden JSON values are —
/// so a newer Klaud with different wording does not re-publish old records.
/// A malformed Klaud marker is reported as an error: it needs a person.
pub fn compare_existing(
    existing_body: &str,
    wanted: &RenderedComment,
) -> Result<Existing, MarkerError> {
    let Some(found) = find_record(existing_body)? else {
        return Ok(Existing::Unrelated);
    };
    if found.key != wanted.key {
        return Ok(Existing::Unrelated);
    }
    if existing_body.replace("\r\n", "\n").trim_end() == wanted.body.trim_end() {
        return Ok(Existing::Identical);
    }
    let ours = find_record(&wanted.body)?.ok_or_else(|| MarkerError::WrongKind {
        expected: "Klaud record",
        found: "a rendered comment without marker".to_owned(),
    })?;
    let theirs: serde_json::Value = markers::parse_json(&found)?;
    let mine: serde_json::Value = markers::parse_json(&ours)?;
    Ok(if theirs == mine {
        Existing::Identical
    } else {
        Existing::Changed
    })
}

/// Serde for [`CandidateId`] as its text, validated when read.
pub(crate) mod candidate_serde {
    use crate::model::CandidateId;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(id: &CandidateId, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(id.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<CandidateId, D::Error> {
        let text = String::deserialize(d)?;
        CandidateId::new(&text).map_err(serde::de::Error::custom)
    }
}
