//! Decoder tests from schema-valid samples: for each GitHub component Klaud
//! decodes, two samples are generated from GitHub's published REST
//! description (the extract in `tests/github_rest_schema/`): a *minimal*
//! one (only required fields, every nullable field `null`, the last value
//! of every enum) and a *full* one (every field, non-null). Each sample is
//! first checked against the schema, so the generator cannot drift into
//! shapes GitHub never sends; then Klaud's decoder must accept it.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::*;

const EXTRACT: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/github_rest_schema/rest-2022-11-28.extract.json"
));

#[derive(Clone, Copy, Debug)]
enum Mode {
    Minimal,
    Full,
}

fn doc() -> Value {
    serde_json::from_str(EXTRACT).expect("the schema extract is JSON")
}

fn component<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["components"]["schemas"]
        .get(name)
        .unwrap_or_else(|| panic!("component {name} is not in the extract"))
}

fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => component(doc, r.rsplit('/').next().unwrap_or_default()),
        None => schema,
    }
}

fn is_null_schema(s: &Value) -> bool {
    s.get("type") == Some(&json!("null"))
}

/// A value of `schema` in `mode` (depth-limited: past it, `null`, which the
/// schema check then reports).
fn sample(doc: &Value, schema: &Value, mode: Mode, depth: usize) -> Value {
    let schema = resolve(doc, schema);
    if depth > 12 {
        return Value::Null;
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(variants) = schema.get(key).and_then(Value::as_array) {
            let pick = match mode {
                Mode::Minimal => variants.iter().find(|v| is_null_schema(v)),
                Mode::Full => variants.iter().find(|v| !is_null_schema(v)),
            }
            .or(variants.first());
            return pick.map_or(Value::Null, |v| sample(doc, v, mode, depth + 1));
        }
    }
    if let Some(parts) = schema.get("allOf").and_then(Value::as_array) {
        let mut out = Map::new();
        for p in parts {
            if let Value::Object(o) = sample(doc, p, mode, depth + 1) {
                out.extend(o);
            }
        }
        return Value::Object(out);
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let non_null = values.iter().rev().find(|v| !v.is_null());
        return match mode {
            Mode::Minimal if values.iter().any(Value::is_null) => Value::Null,
            _ => non_null.cloned().unwrap_or(Value::Null),
        };
    }
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ if schema.get("properties").is_some() => vec!["object"],
        _ => vec![],
    };
    if matches!(mode, Mode::Minimal) && types.contains(&"null") {
        return Value::Null;
    }
    match types.into_iter().find(|t| *t != "null") {
        Some("object") => {
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut out = Map::new();
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (name, s) in props {
                    if matches!(mode, Mode::Full) || required.contains(&name.as_str()) {
                        out.insert(name.clone(), sample(doc, s, mode, depth + 1));
                    }
                }
            }
            Value::Object(out)
        }
        // One element, so the element decoder runs too.
        Some("array") => match schema.get("items") {
            Some(items) => json!([sample(doc, items, mode, depth + 1)]),
            None => json!([]),
        },
        Some("string") => match schema.get("format").and_then(Value::as_str) {
            Some("date-time") => json!("2026-08-22T10:00:00Z"),
            Some("uri") => json!("https://api.github.com/x"),
            Some("email") => json!("x@example.com"),
            // Shas are exactly 40 characters in the schema.
            _ => match schema.get("minLength").and_then(Value::as_u64) {
                Some(n) => json!("0".repeat(n as usize)),
                None => json!("x"),
            },
        },
        Some("integer") => json!(1),
        Some("number") => json!(1.5),
        Some("boolean") => json!(false),
        _ => Value::Null,
    }
}

/// Generates both samples of `name`, checks them against the schema and
/// decodes them as `T`.
fn decodes<T: DeserializeOwned>(name: &str) {
    let doc = doc();
    let root = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "components": doc["components"],
        "$ref": format!("#/components/schemas/{name}"),
    });
    let validator = jsonschema::validator_for(&root).expect("schema compiles");
    for mode in [Mode::Minimal, Mode::Full] {
        let s = sample(&doc, component(&doc, name), mode, 0);
        let errors: Vec<String> = validator
            .iter_errors(&s)
            .map(|e| format!("{e} at {}", e.instance_path))
            .collect();
        assert!(errors.is_empty(), "{name} {mode:?} sample: {errors:?}\n{s}");
        if let Err(e) = serde_json::from_value::<T>(s.clone()) {
            panic!("{name} {mode:?}: Klaud's decoder refuses a schema-valid answer: {e}\n{s}");
        }
    }
}

#[test]
fn workflow_runs_decode_with_every_nullable_field_null() {
    decodes::<RawRun>("workflow-run");
    // The generator really produces the nullable shapes.
    let d = doc();
    let run = sample(&d, component(&d, "workflow-run"), Mode::Minimal, 0);
    assert!(
        run["pull_requests"].is_null() && run["conclusion"].is_null(),
        "{run}"
    );
}

#[test]
fn pull_requests_decode_in_both_shapes() {
    decodes::<RawPull>("pull-request");
    decodes::<RawPull>("pull-request-simple");
}

#[test]
fn comments_users_and_labels_decode() {
    decodes::<RawComment>("issue-comment");
    decodes::<UserInfo>("simple-user");
    decodes::<UserInfo>("public-user");
    decodes::<UserInfo>("private-user");
    decodes::<LabelName>("label");
}

#[test]
fn actions_objects_decode_with_enum_values_klaud_does_not_use() {
    decodes::<WorkflowInfo>("workflow");
    decodes::<Artifact>("artifact");
    decodes::<JobInfo>("job");
    let d = doc();
    let job = sample(&d, component(&d, "job"), Mode::Full, 0);
    assert_ne!(job["status"], "completed", "the last enum value: {job}");
}

#[test]
fn git_and_compare_objects_decode() {
    decodes::<RawGitCommit>("git-commit");
    decodes::<RawRef>("git-ref");
    decodes::<FileChange>("diff-entry");
    decodes::<Comparison>("commit-comparison");
}

/// Fuzzing on stable: GitHub's answers as Klaud decodes and
/// converts them, from the schema's own samples with fields removed or
/// replaced by any JSON (structure-aware), and the headers and bodies Klaud
/// reads by hand (`Link`, `retry-after`, rate-limit headers, error
/// messages, `Date`) from arbitrary text. Nothing may panic; what is read
/// back is bounded by what was sent. `PROPTEST_CASES` sets a longer run:
/// `PROPTEST_CASES=20000 cargo test -p klaud-github --lib fuzz_`.
mod fuzz {
    use proptest::prelude::*;
    use proptest::test_runner::Config;

    use super::*;
    use crate::transport::{Raw, skew_of};

    fn config(default_cases: u32) -> Config {
        let cases = std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default_cases);
        Config {
            cases,
            ..Config::default()
        }
    }

    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            "\\PC{0,30}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                proptest::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Every path to a value of `v`.
    fn paths(v: &Value, at: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        if let Value::Object(m) = v {
            for (k, child) in m {
                at.push(k.clone());
                out.push(at.clone());
                paths(child, at, out);
                at.pop();
            }
        }
    }

    /// `v` with the value at each chosen path removed or replaced.
    fn mutate(mut v: Value, edits: &[(usize, bool, Value)]) -> Value {
        for (pick, remove, with) in edits {
            let mut all = Vec::new();
            paths(&v, &mut Vec::new(), &mut all);
            let Some(path) = all.get(pick % all.len().max(1)) else {
                return with.clone();
            };
            let (last, parents) = path.split_last().expect("a path has a key");
            let mut node = &mut v;
            for key in parents {
                node = &mut node[key.as_str()];
            }
            if let Value::Object(m) = node {
                if *remove {
                    m.remove(last);
                } else {
                    m.insert(last.clone(), with.clone());
                }
            }
        }
        v
    }

    fn edits() -> impl Strategy<Value = Vec<(usize, bool, Value)>> {
        proptest::collection::vec((any::<usize>(), any::<bool>(), any_json()), 1..6)
    }

    /// The full sample of `name`, generated once per test process (reading
    /// the schema extract is most of a case's time otherwise).
    fn full_sample(name: &str) -> Value {
        static SAMPLES: std::sync::OnceLock<
            std::sync::Mutex<std::collections::BTreeMap<String, Value>>,
        > = std::sync::OnceLock::new();
        let samples = SAMPLES.get_or_init(Default::default);
        let mut samples = samples.lock().unwrap_or_else(|p| p.into_inner());
        samples
            .entry(name.to_owned())
            .or_insert_with(|| {
                let doc = doc();
                sample(&doc, component(&doc, name), Mode::Full, 0)
            })
            .clone()
    }

    /// Decodes a mutated sample of `name` as `T` and converts it as Klaud
    /// does; a refusal is fine, a panic is not.
    fn decode_mutated<T: DeserializeOwned>(
        name: &str,
        edits: &[(usize, bool, Value)],
        convert: impl Fn(T),
    ) {
        let full = full_sample(name);
        let bytes = serde_json::to_vec(&mutate(full, edits)).unwrap_or_default();
        if let Ok(t) = serde_json::from_slice::<T>(&bytes) {
            convert(t);
        }
    }

    proptest! {
        #![proptest_config(config(256))]

        #[test]
        fn fuzz_mutated_github_answers_decode_or_refuse(edits in edits()) {
            decode_mutated::<RawRun>("workflow-run", &edits, |r| drop(RunInfo::from(r)));
            decode_mutated::<RawPull>("pull-request", &edits, |p| drop(PullInfo::from(p)));
            decode_mutated::<RawPull>("pull-request-simple", &edits, |p| drop(PullInfo::from(p)));
            decode_mutated::<RawComment>("issue-comment", &edits, |c| drop(CommentInfo::from(c)));
            decode_mutated::<JobInfo>("job", &edits, drop);
            decode_mutated::<Artifact>("artifact", &edits, drop);
            decode_mutated::<RawRef>("git-ref", &edits, drop);
            decode_mutated::<RawGitCommit>("git-commit", &edits, drop);
            decode_mutated::<Comparison>("commit-comparison", &edits, drop);
        }

        #[test]
        fn fuzz_arbitrary_bytes_never_panic_the_decoders(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = serde_json::from_slice::<RawRun>(&bytes).map(RunInfo::from);
            let _ = serde_json::from_slice::<RawPull>(&bytes).map(PullInfo::from);
            let _ = serde_json::from_slice::<RawComment>(&bytes).map(CommentInfo::from);
            let _ = serde_json::from_slice::<Comparison>(&bytes);
        }

        #[test]
        fn fuzz_headers_and_error_bodies_read_by_hand(
            status in 100u16..600,
            link in "\\PC{0,120}",
            retry_after in "\\PC{0,12}",
            reset in "\\PC{0,12}",
            remaining in "\\PC{0,6}",
            date in "\\PC{0,40}",
            body in "\\PC{0,200}",
            now in any::<i64>(),
        ) {
            let mut headers = http::HeaderMap::new();
            for (name, value) in [
                ("link", &link),
                ("retry-after", &retry_after),
                ("x-ratelimit-reset", &reset),
                ("x-ratelimit-remaining", &remaining),
                ("date", &date),
            ] {
                if let Ok(v) = http::HeaderValue::from_str(value) {
                    headers.insert(name, v);
                }
            }
            let raw = Raw {
                status: http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK),
                headers,
                body: bytes::Bytes::from(body.clone()),
            };
            if let Some(next) = raw.next_link() {
                prop_assert!(next.len() <= link.len());
            }
            prop_assert!(raw.message().len() <= body.len() + 64);
            let _ = raw.requested_wait(now);
            let _ = raw.is_secondary_limit();
            let _ = raw.is_rate_limited();
            let _ = skew_of(&raw.headers, chrono::Utc::now());
        }
    }
}
