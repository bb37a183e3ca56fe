//! The claim record: the commit message of a claim ref.
//!
//! The existing InferenceX helper writes compact JSON with sorted keys,
//! `{"candidates":[{"base":SHA,"family":F,"id":ID}],"run-id":N}`. Klaud writes
//! the superset with `fence`, `holder`, `lease-until` and `owner`, in the same
//! compact sorted form. Parsing accepts both and keeps unknown fields so a
//! record written by a newer tool survives a renew or takeover unchanged.
//!
//! Keys are sorted explicitly: `serde_json` is built with `preserve_order`
//! workspace-wide, so its maps keep insertion order.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::names::{CandidateId, CommitSha, truncate_for_message};

/// Largest commit message accepted as a record. Real records are a few
/// hundred bytes; the cap bounds the work hostile input can cause.
pub const MAX_RECORD_BYTES: usize = 64 * 1024;

const KEY_CANDIDATES: &str = "candidates";
const KEY_RUN_ID: &str = "run-id";
const KEY_FENCE: &str = "fence";
const KEY_HOLDER: &str = "holder";
const KEY_LEASE_UNTIL: &str = "lease-until";
const KEY_OWNER: &str = "owner";
const KEY_BASE: &str = "base";
const KEY_FAMILY: &str = "family";
const KEY_ID: &str = "id";

/// Why a commit message is not a claim record. Each variant names the field
/// and what was expected, so a maintainer can fix the ref by hand.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The message is larger than [`MAX_RECORD_BYTES`].
    #[error("claim record is {0} bytes, more than the {MAX_RECORD_BYTES} allowed")]
    TooLarge(usize),
    /// The message is not JSON at all.
    #[error("claim record is not valid JSON: {0}")]
    NotJson(String),
    /// The message is JSON but not an object.
    #[error("claim record must be a JSON object, found {0}")]
    NotAnObject(&'static str),
    /// A required field is absent.
    #[error("claim record has no `{0}` field")]
    MissingField(String),
    /// A field has the wrong JSON type.
    #[error("claim record field `{field}` must be {expected}, found {found}")]
    WrongType {
        /// Path of the field, e.g. `candidates[0].base`.
        field: String,
        /// What was expected.
        expected: &'static str,
        /// The JSON type found.
        found: &'static str,
    },
    /// A field has the right type but an unacceptable value.
    #[error("claim record field `{field}` is invalid: expected {expected}, found {found}")]
    InvalidValue {
        /// Path of the field.
        field: String,
        /// What was expected.
        expected: &'static str,
        /// The (truncated) value found.
        found: String,
    },
    /// `candidates` is an empty list: a claim must name what it claims.
    #[error("claim record field `candidates` is empty; a claim must name at least one candidate")]
    EmptyCandidates,
}

/// One claimed candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimCandidate {
    /// The base commit the candidate branch starts from.
    pub base: CommitSha,
    /// The family string, e.g. `configs/nvidia-master.yaml:dsr1-fp4-b200-sglang`.
    pub family: String,
    /// The candidate id.
    pub id: CandidateId,
    /// Fields this version does not know, kept for round-tripping.
    pub extra: BTreeMap<String, Value>,
}

impl ClaimCandidate {
    /// A candidate with no extra fields.
    pub fn new(base: CommitSha, family: impl Into<String>, id: CandidateId) -> Self {
        Self {
            base,
            family: family.into(),
            id,
            extra: BTreeMap::new(),
        }
    }
}

/// A parsed claim record. The Klaud fields are `None` on claims written by
/// the existing helper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRecord {
    /// Claimed candidates, never empty.
    pub candidates: Vec<ClaimCandidate>,
    /// The GitHub Actions run (or Klaud wave run) that owns the claim.
    pub run_id: u64,
    /// Incremented on every takeover; absent on old-helper claims (read as 0).
    pub fence: Option<u64>,
    /// `klaud/<version>` of the writer.
    pub holder: Option<String>,
    /// End of the lease, whole seconds, UTC.
    pub lease_until: Option<DateTime<Utc>>,
    /// Instance uuid of the Klaud process that holds the claim.
    pub owner: Option<Uuid>,
    /// Top-level fields this version does not know, kept for round-tripping.
    pub extra: BTreeMap<String, Value>,
}

impl ClaimRecord {
    /// The fence, reading an absent one (old helper) as 0.
    pub fn fence_or_zero(&self) -> u64 {
        self.fence.unwrap_or(0)
    }

    /// Candidate ids, sorted, for set comparisons.
    pub fn candidate_ids(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = self.candidates.iter().map(|c| c.id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Encodes the record as compact JSON with sorted keys (nested objects
    /// included), the byte form stored in the claim commit.
    pub fn encode(&self) -> String {
        let mut top: BTreeMap<String, Value> = self.extra.clone();
        let candidates = self
            .candidates
            .iter()
            .map(|c| {
                let mut fields = c.extra.clone();
                fields.insert(KEY_BASE.into(), Value::String(c.base.to_string()));
                fields.insert(KEY_FAMILY.into(), Value::String(c.family.clone()));
                fields.insert(KEY_ID.into(), Value::String(c.id.as_str().to_owned()));
                sorted_object(fields)
            })
            .collect();
        top.insert(KEY_CANDIDATES.into(), Value::Array(candidates));
        top.insert(KEY_RUN_ID.into(), Value::from(self.run_id));
        if let Some(fence) = self.fence {
            top.insert(KEY_FENCE.into(), Value::from(fence));
        }
        if let Some(holder) = &self.holder {
            top.insert(KEY_HOLDER.into(), Value::String(holder.clone()));
        }
        if let Some(lease) = self.lease_until {
            top.insert(KEY_LEASE_UNTIL.into(), Value::String(format_lease(lease)));
        }
        if let Some(owner) = self.owner {
            top.insert(
                KEY_OWNER.into(),
                Value::String(owner.hyphenated().to_string()),
            );
        }
        // Serializing a `Value` cannot fail: all keys are strings and there are
        // no non-finite floats (serde_json refuses to build those).
        ascii_escape(serde_json::to_string(&sorted_object(top)).unwrap_or_default())
    }

    /// Parses a claim commit message written by Klaud or the existing helper.
    pub fn parse(message: &str) -> Result<Self, RecordError> {
        if message.len() > MAX_RECORD_BYTES {
            return Err(RecordError::TooLarge(message.len()));
        }
        // Git tooling may append a trailing newline to a commit message.
        let value: Value = serde_json::from_str(message.trim_end_matches(['\n', '\r']))
            .map_err(|e| RecordError::NotJson(e.to_string()))?;
        let Value::Object(mut top) = value else {
            return Err(RecordError::NotAnObject(type_name(&value)));
        };

        let candidates = match top.remove(KEY_CANDIDATES) {
            None => return Err(RecordError::MissingField(KEY_CANDIDATES.into())),
            Some(Value::Array(items)) => items
                .into_iter()
                .enumerate()
                .map(|(i, item)| parse_candidate(i, item))
                .collect::<Result<Vec<_>, _>>()?,
            Some(other) => return Err(wrong_type(KEY_CANDIDATES, "an array", &other)),
        };
        if candidates.is_empty() {
            return Err(RecordError::EmptyCandidates);
        }
        let run_id = match top.remove(KEY_RUN_ID) {
            None => return Err(RecordError::MissingField(KEY_RUN_ID.into())),
            Some(v) => parse_u64(KEY_RUN_ID, &v)?,
        };
        let fence = top
            .remove(KEY_FENCE)
            .map(|v| parse_u64(KEY_FENCE, &v))
            .transpose()?;
        let holder = top
            .remove(KEY_HOLDER)
            .map(|v| match v {
                Value::String(s) if !s.is_empty() => Ok(s),
                Value::String(_) => Err(invalid(
                    KEY_HOLDER,
                    "a non-empty string such as \"klaud/0.1.0\"",
                    "",
                )),
                other => Err(wrong_type(KEY_HOLDER, "a string", &other)),
            })
            .transpose()?;
        let lease_until = top
            .remove(KEY_LEASE_UNTIL)
            .map(|v| match v {
                Value::String(s) => DateTime::parse_from_rfc3339(&s)
                    .map(|t| t.with_timezone(&Utc))
                    .map_err(|_| {
                        invalid(
                            KEY_LEASE_UNTIL,
                            "an RFC 3339 time such as 2026-11-29T20:15:00Z",
                            &s,
                        )
                    }),
                other => Err(wrong_type(KEY_LEASE_UNTIL, "an RFC 3339 string", &other)),
            })
            .transpose()?;
        let owner = top
            .remove(KEY_OWNER)
            .map(|v| match v {
                Value::String(s) => {
                    Uuid::parse_str(&s).map_err(|_| invalid(KEY_OWNER, "an instance uuid", &s))
                }
                other => Err(wrong_type(KEY_OWNER, "a uuid string", &other)),
            })
            .transpose()?;

        Ok(Self {
            candidates,
            run_id,
            fence,
            holder,
            lease_until,
            owner,
            extra: top.into_iter().collect(),
        })
    }
}

/// Formats a lease end the way Klaud writes it: `2026-11-29T20:15:00Z`.
pub fn format_lease(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Escapes non-ASCII as `\uXXXX` (UTF-16, lowercase hex), as Python's
/// `json.dumps` does by default, so both tools write the same bytes. serde_json
/// only emits non-ASCII inside strings, so a pass over the output is exact.
fn ascii_escape(json: String) -> String {
    if json.is_ascii() {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for ch in json.chars() {
        if ch.is_ascii() {
            out.push(ch);
        } else {
            let mut units = [0u16; 2];
            for unit in ch.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

fn parse_candidate(index: usize, item: Value) -> Result<ClaimCandidate, RecordError> {
    let path = |key: &str| format!("{KEY_CANDIDATES}[{index}].{key}");
    let Value::Object(mut fields) = item else {
        return Err(RecordError::WrongType {
            field: format!("{KEY_CANDIDATES}[{index}]"),
            expected: "an object",
            found: type_name(&item),
        });
    };
    let mut take_string = |key: &str| -> Result<String, RecordError> {
        match fields.remove(key) {
            None => Err(RecordError::MissingField(path(key))),
            Some(Value::String(s)) => Ok(s),
            Some(other) => Err(wrong_type(&path(key), "a string", &other)),
        }
    };
    let base = take_string(KEY_BASE)?;
    let family = take_string(KEY_FAMILY)?;
    let id = take_string(KEY_ID)?;
    let base = CommitSha::parse(&base)
        .map_err(|_| invalid(&path(KEY_BASE), "a 40- or 64-digit hex commit sha", &base))?;
    if family.is_empty() {
        return Err(invalid(&path(KEY_FAMILY), "a non-empty family string", ""));
    }
    let id = CandidateId::new(&id)
        .map_err(|_| invalid(&path(KEY_ID), "<16 lowercase hex>-<16 lowercase hex>", &id))?;
    Ok(ClaimCandidate {
        base,
        family,
        id,
        extra: fields.into_iter().collect(),
    })
}

fn parse_u64(field: &str, v: &Value) -> Result<u64, RecordError> {
    match v {
        Value::Number(n) => n.as_u64().ok_or_else(|| {
            invalid(
                field,
                "a non-negative integer that fits in 64 bits",
                &n.to_string(),
            )
        }),
        other => Err(wrong_type(field, "an integer", other)),
    }
}

/// Rebuilds objects recursively with keys in byte order; with
/// `preserve_order`, insertion order is serialization order.
fn sorted_object(fields: BTreeMap<String, Value>) -> Value {
    Value::Object(
        fields
            .into_iter()
            .map(|(k, v)| (k, sorted(v)))
            .collect::<Map<_, _>>(),
    )
}

fn sorted(v: Value) -> Value {
    match v {
        Value::Object(map) => sorted_object(map.into_iter().collect()),
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

fn wrong_type(field: &str, expected: &'static str, found: &Value) -> RecordError {
    RecordError::WrongType {
        field: field.to_owned(),
        expected,
        found: type_name(found),
    }
}

fn invalid(field: &str, expected: &'static str, found: &str) -> RecordError {
    RecordError::InvalidValue {
        field: field.to_owned(),
        expected,
        found: truncate_for_message(found),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "843c6254ff69b567f772f6a5fd97675af3d04431";
    const FAMILY: &str = "configs/nvidia-master.yaml:dsr1-fp4-b200-sglang";
    const CANDIDATE: &str = "d92e15065c55779d-0123456789abcdef";
    const OWNER: &str = "0192f0a4-7d1c-7c3e-9b1a-2f4e5d6c7b8a";

    fn old_helper_message() -> String {
        format!(
            r#"{{"candidates":[{{"base":"{BASE}","family":"{FAMILY}","id":"{CANDIDATE}"}}],"run-id":35570778795}}"#
        )
    }

    fn klaud_record() -> ClaimRecord {
        ClaimRecord {
            candidates: vec![ClaimCandidate::new(
                CommitSha::parse(BASE).unwrap(),
                FAMILY,
                CandidateId::new(CANDIDATE).unwrap(),
            )],
            run_id: 35570778795,
            fence: Some(3),
            holder: Some("klaud/0.1.0".into()),
            lease_until: Some(
                DateTime::parse_from_rfc3339("2026-11-29T20:15:00Z")
                    .unwrap()
                    .with_timezone(&Utc),
            ),
            owner: Some(Uuid::parse_str(OWNER).unwrap()),
            extra: BTreeMap::new(),
        }
    }

    #[test]
    fn klaud_record_encodes_to_exact_sorted_compact_bytes() {
        let expected = format!(
            r#"{{"candidates":[{{"base":"{BASE}","family":"{FAMILY}","id":"{CANDIDATE}"}}],"fence":3,"holder":"klaud/0.1.0","lease-until":"2026-11-29T20:15:00Z","owner":"{OWNER}","run-id":35570778795}}"#
        );
        assert_eq!(klaud_record().encode(), expected);
        assert_eq!(ClaimRecord::parse(&expected).unwrap(), klaud_record());
    }

    #[test]
    fn old_helper_record_parses_and_reencodes_byte_for_byte() {
        let message = old_helper_message();
        let record = ClaimRecord::parse(&message).unwrap();
        assert_eq!(record.run_id, 35570778795);
        assert_eq!(record.owner, None);
        assert_eq!(record.lease_until, None);
        assert_eq!(record.fence, None);
        assert_eq!(record.fence_or_zero(), 0);
        assert_eq!(record.holder, None);
        assert_eq!(record.encode(), message);
    }

    #[test]
    fn unknown_fields_round_trip_sorted_at_every_level() {
        let message = format!(
            r#"{{"zeta":{{"b":1,"a":[{{"y":true,"x":null}}]}},"run-id":7,"candidates":[{{"note":"hi","id":"{CANDIDATE}","family":"{FAMILY}","base":"{BASE}"}}],"alpha":"first"}}"#
        );
        let record = ClaimRecord::parse(&message).unwrap();
        assert_eq!(record.extra.len(), 2);
        assert_eq!(
            record.candidates[0].extra.get("note"),
            Some(&Value::String("hi".into()))
        );
        let expected = format!(
            r#"{{"alpha":"first","candidates":[{{"base":"{BASE}","family":"{FAMILY}","id":"{CANDIDATE}","note":"hi"}}],"run-id":7,"zeta":{{"a":[{{"x":null,"y":true}}],"b":1}}}}"#
        );
        assert_eq!(record.encode(), expected);
        assert_eq!(ClaimRecord::parse(&expected).unwrap(), record);
    }

    #[test]
    fn non_ascii_is_escaped_like_python_json_dumps() {
        let mut record = klaud_record();
        record.candidates[0].family = "configs/nvidia-master.yaml:ä-😀".into();
        let encoded = record.encode();
        // python3 -c 'import json; print(json.dumps("ä-😀"))' → "\u00e4-\ud83d\ude00"
        assert!(
            encoded.contains(r#""family":"configs/nvidia-master.yaml:\u00e4-\ud83d\ude00""#),
            "{encoded}"
        );
        assert!(encoded.is_ascii());
        assert_eq!(ClaimRecord::parse(&encoded).unwrap(), record);
    }

    #[test]
    fn trailing_newline_and_offset_lease_are_accepted() {
        let message = format!(
            r#"{{"candidates":[{{"base":"{BASE}","family":"{FAMILY}","id":"{CANDIDATE}"}}],"lease-until":"2026-11-29T21:15:00+01:00","run-id":1}}"#
        ) + "\n";
        let record = ClaimRecord::parse(&message).unwrap();
        assert_eq!(
            record.lease_until.map(format_lease).as_deref(),
            Some("2026-11-29T20:15:00Z")
        );
    }

    fn err(message: &str) -> RecordError {
        match ClaimRecord::parse(message) {
            Ok(record) => panic!("{message:?} parsed as {record:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn garbage_and_truncated_json_are_clear_errors() {
        assert!(matches!(err(""), RecordError::NotJson(_)));
        assert!(matches!(
            err("Merge branch 'main'"),
            RecordError::NotJson(_)
        ));
        let full = old_helper_message();
        for cut in 1..full.len() {
            let e = err(&full[..cut]);
            assert!(!e.to_string().is_empty());
        }
        assert_eq!(err("[1,2]"), RecordError::NotAnObject("an array"));
        assert_eq!(err("null"), RecordError::NotAnObject("null"));
        assert!(matches!(
            err(&" ".repeat(MAX_RECORD_BYTES + 1)),
            RecordError::TooLarge(_)
        ));
    }

    #[test]
    fn missing_fields_and_wrong_types_name_the_field() {
        assert_eq!(
            err(r#"{"run-id":1}"#),
            RecordError::MissingField("candidates".into())
        );
        assert_eq!(err(r#"{"candidates":[]}"#), RecordError::EmptyCandidates);
        let c = format!(r#"{{"base":"{BASE}","family":"{FAMILY}","id":"{CANDIDATE}"}}"#);
        assert_eq!(
            err(&format!(r#"{{"candidates":[{c}]}}"#)),
            RecordError::MissingField("run-id".into())
        );
        let e = err(&format!(r#"{{"candidates":[{c}],"run-id":"12"}}"#));
        assert_eq!(
            e.to_string(),
            "claim record field `run-id` must be an integer, found a string"
        );
        let e = err(r#"{"candidates":{},"run-id":1}"#);
        assert_eq!(
            e.to_string(),
            "claim record field `candidates` must be an array, found an object"
        );
        let e = err(r#"{"candidates":[42],"run-id":1}"#);
        assert_eq!(
            e.to_string(),
            "claim record field `candidates[0]` must be an object, found a number"
        );
        let e = err(&format!(
            r#"{{"candidates":[{{"base":"{BASE}","id":"{CANDIDATE}"}}],"run-id":1}}"#
        ));
        assert_eq!(e, RecordError::MissingField("candidates[0].family".into()));
        let e = err(&format!(
            r#"{{"candidates":[{{"base":1,"family":"{FAMILY}","id":"{CANDIDATE}"}}],"run-id":1}}"#
        ));
        assert_eq!(
            e.to_string(),
            "claim record field `candidates[0].base` must be a string, found a number"
        );
        let e = err(&format!(
            r#"{{"candidates":[{{"base":"main","family":"{FAMILY}","id":"{CANDIDATE}"}}],"run-id":1}}"#
        ));
        assert!(e.to_string().contains("candidates[0].base"), "{e}");
        let e = err(&format!(
            r#"{{"candidates":[{{"base":"{BASE}","family":"{FAMILY}","id":"nope"}}],"run-id":1}}"#
        ));
        assert!(e.to_string().contains("candidates[0].id"), "{e}");
        let e = err(&format!(
            r#"{{"candidates":[{c}],"run-id":1,"owner":"me"}}"#
        ));
        assert!(e.to_string().contains("`owner`"), "{e}");
        let e = err(&format!(
            r#"{{"candidates":[{c}],"run-id":1,"lease-until":"tomorrow"}}"#
        ));
        assert!(e.to_string().contains("`lease-until`"), "{e}");
        let e = err(&format!(r#"{{"candidates":[{c}],"run-id":1,"holder":7}}"#));
        assert!(e.to_string().contains("`holder`"), "{e}");
    }

    #[test]
    fn huge_negative_and_fractional_numbers_are_refused() {
        let c = format!(r#"{{"base":"{BASE}","family":"{FAMILY}","id":"{CANDIDATE}"}}"#);
        for n in [
            "18446744073709551616",
            "1e400",
            "-1",
            "1.5",
            "99999999999999999999999999999999",
        ] {
            let message = format!(r#"{{"candidates":[{c}],"run-id":{n}}}"#);
            match ClaimRecord::parse(&message) {
                Err(RecordError::InvalidValue { field, .. }) => assert_eq!(field, "run-id"),
                Err(RecordError::NotJson(_)) => {} // 1e400 is out of range for serde_json
                other => panic!("{n}: {other:?}"),
            }
            let message = format!(r#"{{"candidates":[{c}],"run-id":1,"fence":{n}}}"#);
            assert!(ClaimRecord::parse(&message).is_err(), "fence {n} accepted");
        }
        let max = format!(r#"{{"candidates":[{c}],"run-id":18446744073709551615}}"#);
        assert_eq!(ClaimRecord::parse(&max).unwrap().run_id, u64::MAX);
    }

    #[test]
    fn deeply_nested_garbage_does_not_overflow_the_stack() {
        let deep = "[".repeat(100_000);
        assert!(matches!(
            ClaimRecord::parse(&deep),
            Err(RecordError::TooLarge(_))
        ));
        let deep = "[".repeat(10_000);
        assert!(matches!(
            ClaimRecord::parse(&deep),
            Err(RecordError::NotJson(_))
        ));
    }
}
