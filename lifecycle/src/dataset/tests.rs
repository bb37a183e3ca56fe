use chrono::NaiveDate;
use serde_json::{Value, json};

use super::*;
use crate::artifacts::{PointIdentity, PointMetrics};
use crate::baseline::{PointSpec, Workers};
use crate::report::pr::dataset_words;
use klaud_render::Bilingual;

fn minimal(dataset: Value) -> AgenticRow {
    let mut row = AgenticRow {
        conc: 4,
        identity: PointIdentity {
            hw: Some("b300-nv".into()),
            framework: Some("vllm".into()),
            precision: Some("fp4".into()),
            model_prefix: Some("demo".into()),
            tp: Some(4),
            ..PointIdentity::default()
        },
        scenario_type: Some("agentic-coding".into()),
        kv_offloading: None,
        recipe_fingerprint: None,
        metrics: PointMetrics {
            tput_per_gpu: 1.0,
            output_tput_per_gpu: 1.0,
            mean_ttft: 1.0,
            mean_tpot: 1.0,
        },
        num_requests_total: None,
        num_requests_successful: None,
        extra: Default::default(),
    };
    if !dataset.is_null() {
        row.extra.insert("dataset".into(), dataset);
    }
    row
}

#[test]
fn a_row_without_a_loader_is_named_by_its_hugging_face_dataset_and_without_both_by_none() {
    let hf = row_dataset(&minimal(json!({"hf_dataset_name": "org/traces"}))).expect("ok");
    assert_eq!(hf.map(|d| d.name).as_deref(), Some("org/traces"));
    assert_eq!(row_dataset(&minimal(Value::Null)), Ok(None));
    assert_eq!(row_dataset(&minimal(json!({"loader": "  "}))), Ok(None));
}

#[test]
fn a_hostile_dataset_field_is_refused_naming_the_field() {
    let cases = [
        (json!("traces"), "dataset"),
        (json!({"loader": 7}), "dataset.loader"),
        (json!({"loader": "a\u{0}b"}), "dataset.loader"),
        (
            json!({"loader": "x".repeat(MAX_DATASET_CHARS + 1)}),
            "dataset.loader",
        ),
        (
            json!({"loader": "ok", "hf_dataset_name": ["x"]}),
            "dataset.hf_dataset_name",
        ),
    ];
    for (value, field) in cases {
        let err = row_dataset(&minimal(value.clone())).expect_err("refused");
        assert_eq!(err.field, field, "{value}");
        assert!(
            err.to_string().starts_with(&format!("field {field}: ")),
            "{err}"
        );
    }
}

fn key() -> FamilyKey {
    FamilyKey {
        hardware: "b300".into(),
        framework: "vllm".into(),
        model_prefix: "demo".into(),
        precision: "fp4".into(),
    }
}

fn produced(rows: &[(&str, Option<&str>)]) -> ProducerDatasets {
    ProducerDatasets::Read {
        rows: rows
            .iter()
            .map(|(prefix, dataset)| ProducerRow {
                model_prefix: Some((*prefix).into()),
                hw: Some("b300-nv_0".into()),
                framework: Some("vllm".into()),
                precision: Some("fp4".into()),
                conc: 4,
                tp: Some(4),
                dataset: dataset.map(|d| Dataset {
                    name: d.into(),
                    hf_dataset_name: None,
                }),
            })
            .collect(),
    }
}

#[test]
fn a_producer_runs_dataset_is_the_one_its_rows_of_the_family_name() {
    let named = |d: &ProducerDatasets| match finding_for(5, d, &key()) {
        DatasetFinding::Named { dataset } => Ok(dataset.name),
        DatasetFinding::Unknown { reason } => Err(reason),
    };
    // Rows of other configs in the same sweep do not count.
    assert_eq!(
        named(&produced(&[("demo", Some("a")), ("other", Some("b"))])),
        Ok("a".into())
    );
    assert_eq!(
        named(&produced(&[("other", Some("a"))])),
        Err("producer run 5 has no AgentX row of this config".into())
    );
    assert_eq!(
        named(&produced(&[("demo", None)])),
        Err("the AgentX rows of producer run 5 name no dataset".into())
    );
    assert_eq!(
        named(&produced(&[("demo", Some("b")), ("demo", Some("a"))])),
        Err("the AgentX rows of producer run 5 name several datasets: a, b".into())
    );
    let gone = ProducerDatasets::Unknown { reason: gone(5) };
    assert_eq!(named(&gone), Err("producer run 5 is gone".into()));
}

fn point(run_id: Option<u64>) -> BaselinePoint {
    let spec = PointSpec {
        scenario: Scenario::Agentic,
        conc: 4,
        spec_decoding: "none".into(),
        kv_offload: None,
        decode: Workers {
            num_workers: None,
            tp: 4,
            ep: 1,
            dp_attn: false,
        },
        prefill: None,
    };
    BaselinePoint {
        label: spec.label(),
        point: spec,
        value: BaselineValue::Measured {
            metrics: PointMetrics {
                tput_per_gpu: 1.0,
                output_tput_per_gpu: 1.0,
                mean_ttft: 1.0,
                mean_tpot: 1.0,
            },
            run_url: None,
            published: None,
            run_id,
        },
    }
}

fn baseline(findings: Vec<FrozenDataset>) -> Baseline {
    Baseline {
        date: NaiveDate::from_ymd_opt(2026, 9, 15).expect("date"),
        image: "i:1".into(),
        model: "m".into(),
        unknown_model: None,
        source_urls: Vec::new(),
        points: vec![point(Some(9))],
        evals: Vec::new(),
        evals_unavailable: None,
        agentx_datasets: findings,
    }
}

fn frozen(run_id: u64, name: &str) -> FrozenDataset {
    FrozenDataset {
        run_id,
        finding: DatasetFinding::Named {
            dataset: Dataset {
                name: name.into(),
                hf_dataset_name: None,
            },
        },
    }
}

#[test]
fn agentx_rows_compare_only_on_the_producer_runs_dataset_and_say_why_not() {
    let b = baseline(vec![frozen(9, "traces_a")]);
    let row = |d: Value| BenchmarkRow::Agentic(minimal(d));
    assert_eq!(
        comparable(&b, &point(Some(9)), &row(json!({"loader": "traces_a"})))
            .map_err(|e| e.to_string()),
        Ok(())
    );
    assert_eq!(
        comparable(&b, &point(Some(9)), &row(json!({"loader": "traces_b"})))
            .map_err(|e| e.to_string()),
        Err("different AgentX datasets: the baseline's traces_a, this run's traces_b".into())
    );
    assert_eq!(
        comparable(&b, &point(Some(9)), &row(Value::Null)).map_err(|e| e.to_string()),
        Err("AgentX dataset unknown: this run's AgentX row names no dataset".into())
    );
    assert_eq!(
        comparable(&b, &point(None), &row(json!({"loader": "traces_a"})))
            .map_err(|e| e.to_string()),
        Err("AgentX dataset unknown: the published row names no producer run".into())
    );
    assert_eq!(
        comparable(&b, &point(Some(8)), &row(json!({"loader": "traces_a"})))
            .map_err(|e| e.to_string()),
        Err(
            "AgentX dataset unknown: the baseline was frozen without its producer run's dataset"
                .into()
        )
    );
    let expired = baseline(vec![FrozenDataset {
        run_id: 9,
        finding: DatasetFinding::Unknown { reason: expired(9) },
    }]);
    assert_eq!(
        comparable(
            &expired,
            &point(Some(9)),
            &row(json!({"loader": "traces_a"}))
        )
        .map_err(|e| e.to_string()),
        Err("AgentX dataset unknown: the AgentX artifacts of producer run 9 have expired".into())
    );
}

#[test]
fn every_reason_of_the_module_has_its_chinese_text() {
    let reasons = [
        format!("{UNKNOWN}{}", gone(3)),
        format!("{UNKNOWN}{}", expired(3)),
        format!("{UNKNOWN}{}", none_uploaded(3)),
        format!("{UNKNOWN}{}", unreadable(3, "bad zip")),
        format!("{UNKNOWN}{}", not_read(3, "timeout")),
        format!("{UNKNOWN}{}", no_row(3)),
        format!("{UNKNOWN}{}", unnamed(3)),
        format!("{UNKNOWN}{}", several(3, &["a".into(), "b".into()])),
        format!("{UNKNOWN}{NO_PRODUCER}"),
        format!("{UNKNOWN}{NOT_FROZEN}"),
        format!("{UNKNOWN}{NEW_UNNAMED}"),
        format!("{UNKNOWN}this run's AgentX row: field dataset: expected an object"),
        format!("{DIFFERENT}the baseline's a, this run's b"),
    ];
    for r in reasons {
        let zh = reason_words(&r)
            .map(|w| w.zh.into_owned())
            .unwrap_or_else(|| panic!("no translation: {r}"));
        assert!(zh.starts_with("AgentX 数据集"), "{zh}");
        // Klaud's own words are translated, not quoted as the original.
        let tail = zh.trim_start_matches("AgentX 数据集未知：");
        assert!(!tail.starts_with("原文"), "{r} → {zh}");
    }
    assert_eq!(reason_words("something else"), None);
    assert_eq!(
        reason_words("different AgentX datasets: the baseline's a, this run's b")
            .map(|w| w.zh.into_owned())
            .as_deref(),
        Some("AgentX 数据集不同：基线为 a，本次运行为 b")
    );
}

#[test]
fn the_pr_body_words_name_the_dataset_or_why_it_is_unknown() {
    let b = baseline(vec![
        frozen(9, "traces_a"),
        FrozenDataset {
            run_id: 10,
            finding: DatasetFinding::Unknown { reason: gone(10) },
        },
    ]);
    assert_eq!(
        dataset_words(&b, 9),
        Some(Bilingual::new("dataset `traces_a`", "数据集 `traces_a`"))
    );
    assert_eq!(
        dataset_words(&b, 10),
        Some(Bilingual::new(
            "dataset unknown (producer run 10 is gone)",
            "数据集未知（生产运行 10 已不存在）"
        ))
    );
    assert_eq!(dataset_words(&b, 11), None);
}

#[test]
fn a_frozen_dataset_record_reads_back() {
    let b = baseline(vec![frozen(9, "traces_a")]);
    let text = serde_json::to_string(&b).expect("json");
    let back: Baseline = serde_json::from_str(&text).expect("reads");
    assert_eq!(back, b);
    // Records frozen before datasets were read have none.
    let mut old: Value = serde_json::from_str(&text).expect("json");
    old.as_object_mut()
        .expect("object")
        .remove("agentx_datasets");
    let back: Baseline = serde_json::from_value(old).expect("reads");
    assert!(back.agentx_datasets.is_empty());
}
