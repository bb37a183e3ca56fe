//! check-final before the sweep label: the sweep the repository will run at
//! the exact head must benchmark every frozen baseline point.
//!
//! The matrix is derived the way InferenceX's `utils/process_changelog.py`
//! derives it from the changelog lines a PR adds (the fixture checkout has
//! the script): each added entry selects the master entries its
//! `config-keys` name (`*` matches any run of characters, the whole key
//! must match), restricted to its `scenario-type` when it has one; an entry
//! with `evals-only` or `all-evals` benchmarks nothing, and an `append-only`
//! entry only the points it adds. A sweep label that is not a full sweep
//! (`sweep-enabled`) trims every curve to its lowest concurrency
//! (`trim_conc`). The family's points come from its master entry at the
//! head, expanded as [`crate::baseline::family_points`] expands them.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::baseline::{Baseline, BaselineError, PointSpec, scenario_points};
use klaud_planner::glob::wildcard;

/// The labels that make a PR sweep a full sweep (no `trim_conc`), as the
/// repository's reuse gate and merge helper name them.
pub const FULL_SWEEP_LABELS: &[&str] = &[
    "full-sweep-enabled",
    "non-canary-full-sweep-enabled",
    "full-sweep-fail-fast",
    "full-sweep-fail-fast-no-canary",
];

/// One changelog entry a PR adds, as far as the matrix depends on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddedEntry {
    /// `config-keys`, patterns included.
    pub config_keys: Vec<String>,
    /// `scenario-type`, when the entry restricts it.
    pub scenario_types: Option<Vec<String>>,
    /// Whether the entry benchmarks throughput at all (`evals-only` and
    /// `all-evals` suppress it).
    pub throughput: bool,
    /// `append-only`: only points the PR adds to a curve are swept.
    pub append_only: bool,
}

/// Why the matrix cannot be derived.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckFinalError {
    /// The head's changelog does not extend the base's.
    #[error("the changelog at the head does not start with the base's bytes")]
    NotAppended,
    /// The added lines are not a YAML list of entries.
    #[error("the changelog lines the PR adds do not parse: {0}")]
    Parse(String),
    /// An added entry is malformed (names the entry and field).
    #[error("changelog entry {index} the PR adds: {reason}")]
    Entry {
        /// Index among the added entries, from 0.
        index: usize,
        /// What is wrong.
        reason: String,
    },
}

/// The entries `head` adds to `base` (the head must start with the base's
/// bytes; the repository's gate enforces that too).
pub fn added_entries(base: &[u8], head: &[u8]) -> Result<Vec<AddedEntry>, CheckFinalError> {
    let added = head
        .strip_prefix(base)
        .ok_or(CheckFinalError::NotAppended)?;
    let text = std::str::from_utf8(added).map_err(|e| CheckFinalError::Parse(e.to_string()))?;
    let doc = klaud_planner::yaml::parse(text)
        .map_err(|e| CheckFinalError::Parse(e.to_string()))?
        .map(|d| d.to_json())
        .unwrap_or(Value::Null);
    let items = match doc {
        Value::Array(items) => items,
        Value::Null => Vec::new(),
        other => {
            return Err(CheckFinalError::Parse(format!(
                "expected a list of entries, found {}",
                kind(&other)
            )));
        }
    };
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let fail = |reason: String| CheckFinalError::Entry { index, reason };
            let keys = item
                .get("config-keys")
                .and_then(Value::as_array)
                .ok_or_else(|| fail("config-keys is missing or not a list".into()))?;
            let config_keys = keys
                .iter()
                .map(|k| {
                    k.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| fail("config-keys holds a non-string".into()))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let scenario_types = match item.get("scenario-type") {
                None | Some(Value::Null) => None,
                Some(Value::Array(types)) => Some(
                    types
                        .iter()
                        .map(|t| {
                            t.as_str()
                                .map(str::to_owned)
                                .ok_or_else(|| fail("scenario-type holds a non-string".into()))
                        })
                        .collect::<Result<Vec<_>, _>>()?,
                ),
                Some(_) => return Err(fail("scenario-type is not a list".into())),
            };
            let flag = |name: &str| item.get(name).and_then(Value::as_bool).unwrap_or(false);
            Ok(AddedEntry {
                config_keys,
                scenario_types,
                throughput: !(flag("evals-only") || flag("all-evals")),
                append_only: flag("append-only"),
            })
        })
        .collect()
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// The benchmark points of the family `key` (its master entry's
/// `scenarios` at the head) that the PR sweep runs, given the entries the PR adds and its
/// labels (an `evals-only` label benchmarks nothing).
pub fn swept_points(
    family: &str,
    key: &str,
    scenarios: &BTreeMap<String, Value>,
    added: &[AddedEntry],
    labels: &[String],
) -> Result<Vec<PointSpec>, BaselineError> {
    if labels.iter().any(|l| l == "evals-only") {
        return Ok(Vec::new());
    }
    // Scenarios some throughput entry selects for this key; append-only
    // entries sweep only what they add, which never covers existing points.
    let mut scenarios_of_entries: Vec<&str> = Vec::new();
    for e in added
        .iter()
        .filter(|e| e.throughput && !e.append_only)
        .filter(|e| e.config_keys.iter().any(|p| wildcard(p, key)))
    {
        match &e.scenario_types {
            None => return select(family, scenarios, None, labels),
            Some(types) => scenarios_of_entries.extend(types.iter().map(String::as_str)),
        }
    }
    if scenarios_of_entries.is_empty() {
        return Ok(Vec::new());
    }
    select(family, scenarios, Some(&scenarios_of_entries), labels)
}

fn select(
    family: &str,
    all: &BTreeMap<String, Value>,
    only: Option<&[&str]>,
    labels: &[String],
) -> Result<Vec<PointSpec>, BaselineError> {
    let chosen: BTreeMap<String, Value> = all
        .iter()
        .filter(|(name, _)| only.is_none_or(|o| o.contains(&name.as_str())))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let points = scenario_points(family, &chosen)?;
    let full = labels
        .iter()
        .any(|l| FULL_SWEEP_LABELS.contains(&l.as_str()));
    Ok(if full { points } else { trim_conc(points) })
}

/// `trim_conc` of `process_changelog.py`: every curve (the point without
/// its concurrency) keeps only its lowest concurrency.
fn trim_conc(points: Vec<PointSpec>) -> Vec<PointSpec> {
    let curve = |p: &PointSpec| PointSpec {
        conc: 0,
        ..p.clone()
    };
    let mut lowest: Vec<(PointSpec, u64)> = Vec::new();
    for p in &points {
        let c = curve(p);
        match lowest.iter_mut().find(|(k, _)| *k == c) {
            Some((_, conc)) => *conc = (*conc).min(p.conc),
            None => lowest.push((c, p.conc)),
        }
    }
    points
        .into_iter()
        .filter(|p| lowest.iter().any(|(k, c)| *k == curve(p) && *c == p.conc))
        .collect()
}

/// The labels of the frozen points the swept points do not include.
pub fn uncovered_by(baseline: &Baseline, swept: &[PointSpec]) -> Vec<String> {
    baseline
        .points
        .iter()
        .filter(|p| !swept.contains(&p.point))
        .map(|p| p.label.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline::{BaselinePoint, BaselineValue};
    use chrono::NaiveDate;
    use klaud_planner::repo::MasterEntry;

    const BASE: &str = "- config-keys:\n    - other\n  description:\n    - \"x\"\n  pr-link: https://github.com/o/r/pull/1\n";

    fn entry(scenarios: Value) -> MasterEntry {
        let scenarios = scenarios
            .as_object()
            .expect("object")
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        MasterEntry {
            image: klaud_planner::image::ImageRef::parse("a/b:1").expect("image"),
            model: "m".into(),
            model_prefix: "m".into(),
            runner: "b200".into(),
            precision: "fp4".into(),
            framework: "sglang".into(),
            multinode: false,
            disagg: None,
            router: None,
            kv_p2p_transfer: None,
            scenarios,
            unknown: BTreeMap::new(),
        }
    }

    fn two_curves() -> MasterEntry {
        entry(serde_json::json!({
            "fixed-seq-len": [{"isl": 1024, "osl": 1024, "search-space": [
                {"tp": 4, "conc-start": 4, "conc-end": 16},
                {"tp": 8, "conc-list": [8, 32]}
            ]}],
            "agentic-coding": [{"search-space": [{"tp": 8, "conc-list": [2]}]}]
        }))
    }

    fn frozen(points: Vec<PointSpec>) -> Baseline {
        Baseline {
            date: NaiveDate::from_ymd_opt(2026, 9, 15).expect("date"),
            image: "a/b:1".into(),
            model: "m".into(),
            source_urls: Vec::new(),
            evals: Vec::new(),
            evals_unavailable: None,
            agentx_datasets: Vec::new(),
            unknown_model: None,
            points: points
                .into_iter()
                .map(|p| BaselinePoint {
                    label: p.label(),
                    point: p,
                    value: BaselineValue::Unavailable { reason: "-".into() },
                })
                .collect(),
        }
    }

    fn added(text: &str) -> Vec<AddedEntry> {
        let head = format!("{BASE}\n{text}");
        added_entries(BASE.as_bytes(), head.as_bytes()).expect("parses")
    }

    fn labels(l: &[&str]) -> Vec<String> {
        l.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_full_sweep_of_the_key_covers_every_point() {
        let e = two_curves();
        let all = scenario_points("f", &e.scenarios).expect("points");
        assert_eq!(all.len(), 6);
        let a = added(
            "- config-keys:\n    - dsr1-fp4-b200-sglang\n  description:\n    - \"y\"\n  pr-link: https://github.com/o/r/pull/2\n",
        );
        let swept = swept_points(
            "f",
            "dsr1-fp4-b200-sglang",
            &e.scenarios,
            &a,
            &labels(&["full-sweep-fail-fast"]),
        )
        .expect("swept");
        assert!(uncovered_by(&frozen(all), &swept).is_empty());
    }

    #[test]
    fn a_wildcard_key_selects_the_family_and_another_key_does_not() {
        let e = two_curves();
        let all = scenario_points("f", &e.scenarios).expect("points");
        let full = labels(&["full-sweep-enabled"]);
        let star = added(
            "- config-keys:\n    - dsr1-fp4-*-sglang\n  description:\n    - \"y\"\n  pr-link: l\n",
        );
        let swept =
            swept_points("f", "dsr1-fp4-b200-sglang", &e.scenarios, &star, &full).expect("ok");
        assert_eq!(swept.len(), all.len());
        let other = added(
            "- config-keys:\n    - dsr1-fp4-b200-vllm\n  description:\n    - \"y\"\n  pr-link: l\n",
        );
        let swept =
            swept_points("f", "dsr1-fp4-b200-sglang", &e.scenarios, &other, &full).expect("ok");
        assert_eq!(uncovered_by(&frozen(all.clone()), &swept).len(), all.len());
    }

    #[test]
    fn scenario_filters_evals_only_and_trimmed_sweeps_leave_points_out() {
        let e = two_curves();
        let all = scenario_points("f", &e.scenarios).expect("points");
        let base = frozen(all);
        let full = labels(&["full-sweep-fail-fast"]);
        let fixed = added(
            "- config-keys:\n    - k\n  scenario-type:\n    - fixed-seq-len\n  description:\n    - \"y\"\n  pr-link: l\n",
        );
        let swept = swept_points("f", "k", &e.scenarios, &fixed, &full).expect("ok");
        assert_eq!(
            uncovered_by(&base, &swept),
            vec!["AgentX c2 TP8".to_owned()]
        );

        let evals = added(
            "- config-keys:\n    - k\n  evals-only: true\n  description:\n    - \"y\"\n  pr-link: l\n",
        );
        let swept = swept_points("f", "k", &e.scenarios, &evals, &full).expect("ok");
        assert_eq!(uncovered_by(&base, &swept).len(), 6);

        let plain = added("- config-keys:\n    - k\n  description:\n    - \"y\"\n  pr-link: l\n");
        let swept =
            swept_points("f", "k", &e.scenarios, &plain, &labels(&["sweep-enabled"])).expect("ok");
        // Each curve keeps its lowest concurrency: c2 of the AgentX curve,
        // c4 of TP4, c8 of TP8 (scenarios in name order).
        let concs: Vec<u64> = swept.iter().map(|p| p.conc).collect();
        assert_eq!(concs, vec![2, 4, 8]);
        assert_eq!(uncovered_by(&base, &swept).len(), 3);
        let swept = swept_points(
            "f",
            "k",
            &e.scenarios,
            &plain,
            &labels(&["full-sweep-enabled", "evals-only"]),
        )
        .expect("ok");
        assert!(swept.is_empty());
    }

    #[test]
    fn a_head_that_rewrites_the_base_or_adds_garbage_is_an_error() {
        assert_eq!(
            added_entries(BASE.as_bytes(), b"- config-keys: []\n"),
            Err(CheckFinalError::NotAppended)
        );
        let head = format!("{BASE}\nnot: [a list\n");
        assert!(matches!(
            added_entries(BASE.as_bytes(), head.as_bytes()),
            Err(CheckFinalError::Parse(_))
        ));
        let head = format!("{BASE}\n- description: [\"y\"]\n");
        let err = added_entries(BASE.as_bytes(), head.as_bytes()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "changelog entry 0 the PR adds: config-keys is missing or not a list"
        );
    }
}
