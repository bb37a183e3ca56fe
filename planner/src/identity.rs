//! Identities shared with the existing InferenceX helper.
//!
//! `identity(v) = hex(sha256(json(v)))`, where `json` is compact JSON with
//! sorted keys. A string is hashed with its JSON quotes, so the identity of a
//! family string is the hash of `"configs/...:key"` including the quotes.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Hex sha256 of the compact, sorted-key JSON encoding of `value`.
pub fn identity(value: &Value) -> String {
    let mut json = String::new();
    write_canonical(value, &mut json);
    hex::encode(Sha256::digest(json.as_bytes()))
}

/// Identity of a plain string (hashed with its JSON quotes).
pub fn identity_of_str(text: &str) -> String {
    identity(&Value::String(text.to_owned()))
}

/// `identity(family)[:16]`, e.g. `configs/nvidia-master.yaml:dsr1-fp4-b200-sglang`
/// → `d92e15065c55779d`.
pub fn family_id(family: &str) -> String {
    identity_of_str(family)[..16].to_owned()
}

/// `<family id>-<identity(normalized target image)[:16]>`.
pub fn candidate_id(family_id: &str, normalized_image: &str) -> String {
    format!("{family_id}-{}", &identity_of_str(normalized_image)[..16])
}

/// Compact JSON with object keys sorted by their UTF-16 code units, the order
/// Python's `json.dumps(sort_keys=True)` uses, so ids match the helper's
/// byte for byte.
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|(a, _), (b, _)| a.encode_utf16().cmp(b.encode_utf16()));
            out.push('{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::String(text) => write_string(text, out),
        other => out.push_str(&other.to_string()),
    }
}

/// Python's default `ensure_ascii=True`: every non-ASCII character is written
/// as `\uXXXX` (surrogate pairs above the BMP).
fn write_string(text: &str, out: &mut String) {
    out.push('"');
    for ch in text.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || !c.is_ascii() => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn family_ids_match_the_existing_helper() {
        assert_eq!(
            family_id("configs/nvidia-master.yaml:dsr1-fp4-b200-sglang"),
            "d92e15065c55779d"
        );
        assert_eq!(
            family_id("configs/nvidia-master.yaml:minimaxm3-fp8-h200-vllm-agentic-mtp"),
            "b3fff31b6f9a6956"
        );
    }

    #[test]
    fn canonical_json_is_compact_with_sorted_keys_and_ascii_escapes() {
        let mut out = String::new();
        write_canonical(
            &json!({"run-id": 7, "candidates": [{"id": "x", "base": "é"}]}),
            &mut out,
        );
        assert_eq!(
            out,
            r#"{"candidates":[{"base":"\u00e9","id":"x"}],"run-id":7}"#
        );
    }

    #[test]
    fn candidate_id_joins_family_id_and_image_identity() {
        let id = candidate_id("d92e15065c55779d", "lmsysorg/sglang:v0.5.17-cu130");
        assert_eq!(id.len(), 33);
        assert!(id.starts_with("d92e15065c55779d-"));
        assert_eq!(
            &id[17..],
            &identity_of_str("lmsysorg/sglang:v0.5.17-cu130")[..16]
        );
    }
}
