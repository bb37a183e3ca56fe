//! Rendering, parsing and idempotence of everything Klaud publishes, with
//! insta snapshots of the texts people read.

use chrono::{NaiveDate, TimeZone, Utc};
use klaud_claims::PullNumber;
use klaud_lifecycle::artifacts::{BenchmarkRow, EvalRow, FixedSeqRow, PointIdentity, PointMetrics};
use klaud_lifecycle::baseline::{
    Baseline, BaselinePoint, BaselineValue, FrozenEval, PointSpec, Scenario, Workers,
};
use klaud_lifecycle::dataset::{Dataset, DatasetFinding, FrozenDataset};
use klaud_lifecycle::model::{
    AttemptKind, AttemptStatus, CandidateId, FinishedResult, Outcome, Phase, RunRef,
};
use klaud_lifecycle::report::*;

const CAND: &str = "d92e15065c55779d-0123456789abcdef";
const OWNER: u64 = 35570000001;

fn cand() -> CandidateId {
    CandidateId::new(CAND).expect("valid id")
}

fn run(id: u64, attempt: u32) -> RunRef {
    RunRef {
        id,
        attempt,
        url: format!("https://github.com/SemiAnalysisAI/InferenceX/actions/runs/{id}"),
    }
}

fn spec(conc: u64, tp: u64, ep: u64, dpa: bool) -> PointSpec {
    PointSpec {
        scenario: Scenario::FixedSeqLen {
            isl: 8192,
            osl: 1024,
        },
        conc,
        spec_decoding: "none".into(),
        kv_offload: None,
        decode: Workers {
            num_workers: None,
            tp,
            ep,
            dp_attn: dpa,
        },
        prefill: None,
    }
}

fn metrics(out: f64, ttft: f64, tpot: f64) -> PointMetrics {
    PointMetrics {
        tput_per_gpu: out * 9.5,
        output_tput_per_gpu: out,
        mean_ttft: ttft,
        mean_tpot: tpot,
    }
}

fn baseline() -> Baseline {
    let measured = |p: PointSpec, m| BaselinePoint {
        label: p.label(),
        point: p,
        value: BaselineValue::Measured {
            metrics: m,
            run_url: Some(
                "https://github.com/SemiAnalysisAI/InferenceX/actions/runs/1/attempts/1".into(),
            ),
            published: None,
            run_id: None,
        },
    };
    let na = |p: PointSpec, reason: &str| BaselinePoint {
        label: p.label(),
        point: p,
        value: BaselineValue::Unavailable {
            reason: reason.into(),
        },
    };
    Baseline {
        date: NaiveDate::from_ymd_opt(2026, 9, 9).expect("date"),
        image: "lmsysorg/sglang:v0.5.16-cu130".into(),
        model: "DeepSeek-R1-0528".into(),
        source_urls: vec![
            "https://inferencex.semianalysis.com/api/v1/benchmarks?model=DeepSeek-R1-0528&date=2026-09-09&exact=true".into(),
            "https://inferencex.semianalysis.com/api/v1/workflow-info?date=2026-09-09".into(),
        ],
        evals: Vec::new(),
        evals_unavailable: None,
        agentx_datasets: Vec::new(),
        unknown_model: None,
        points: vec![
            measured(spec(1, 4, 1, false), metrics(100.0, 0.2, 0.01)),
            measured(spec(32, 4, 1, false), metrics(1266.3, 4.20116, 0.00616)),
            na(spec(64, 4, 4, true), "not benchmarked on 2026-09-09"),
            na(spec(128, 4, 4, true), "not benchmarked on 2026-09-09"),
            na(spec(256, 4, 4, true), "published result lacks mean_tpot"),
        ],
    }
}

fn row(conc: u64, tp: u64, ep: u64, dpa: bool, m: PointMetrics) -> BenchmarkRow {
    BenchmarkRow::FixedSeqLen(FixedSeqRow {
        conc,
        identity: PointIdentity {
            isl: Some(8192),
            osl: Some(1024),
            tp: Some(tp),
            ep: Some(ep),
            dp_attention: Some(dpa),
            ..PointIdentity::default()
        },
        metrics: m,
        extra: Default::default(),
    })
}

fn provenance() -> Provenance {
    Provenance {
        engine: engine_display("sglang", "lmsysorg/sglang"),
        old_image: "lmsysorg/sglang:v0.5.16-cu130".into(),
        new_image: "lmsysorg/sglang:v0.5.17-cu130@sha256:d6e7288627be8b02be88e4bba38e73f6d50e2826869f753c13a4c4385ab3eda9".into(),
        old_tag: Some("v0.5.16-cu130".into()),
        new_tag: "v0.5.17-cu130".into(),
        digest: "sha256:d6e7288627be8b02be88e4bba38e73f6d50e2826869f753c13a4c4385ab3eda9".into(),
        revision: Some("bb5e6198".into()),
        clock: Some("tag-text".into()),
        upstream: Some(UpstreamRange {
            repository: "sgl-project/sglang".into(),
            from: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".into(),
            to: "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb".into(),
            commits: Some(214),
            compare_url: Some("https://github.com/sgl-project/sglang/compare/aaaaaaaa...bbbbbbbb".into()),
            audit: None,
        }),
        not_release_reason: None,
        scope: None,
        versions: Some(klaud_lifecycle::report::VersionsCompared {
            old: Some(klaud_planner::provenance::ImageVersions {
                cuda: Some("13.0.2".into()),
                torch: Some("2.13.0".into()),
                engine_version: Some("0.5.16".into()),
                ..Default::default()
            }),
            new: klaud_planner::provenance::ImageVersions {
                cuda: Some("13.0.2".into()),
                torch: Some("2.13.0".into()),
                engine_version: Some("0.5.17".into()),
                engine_commit: Some("bb5e6198".into()),
                ..Default::default()
            },
            old_pruned: false,
        }),
    }
}

fn attempt_report() -> AttemptReport {
    let rows = vec![
        row(1, 4, 1, false, metrics(110.0, 0.19, 0.0098)),
        row(32, 4, 1, false, metrics(1200.0, 4.5, 0.0065)),
        row(64, 4, 4, true, metrics(2000.0, 6.0, 0.012)),
        row(256, 4, 4, true, metrics(3000.0, 9.0, 0.02)),
    ];
    let sections = compare(&baseline(), &rows, "no result artifact for this point");
    let evals = compare_evals(
        &[EvalRow {
            task: "gsm8k".into(),
            conc: 28,
            score: 0.97,
            score_name: "em_strict".into(),
            n_eff: Some(1319),
            identity: PointIdentity::default(),
            extra: Default::default(),
        }],
        &Baseline {
            evals: vec![FrozenEval {
                task: "gsm8k".into(),
                score_name: "em_strict".into(),
                score: 0.965,
                conc: Some(28),
                samples: Some(1319),
                decode: Workers {
                    num_workers: None,
                    tp: 4,
                    ep: 1,
                    dp_attn: false,
                },
                published: NaiveDate::from_ymd_opt(2026, 9, 9),
                run_url: Some("https://github.com/o/r/actions/runs/61/attempts/1".into()),
            }],
            ..baseline()
        },
    );
    AttemptReport {
        owner_run: OWNER,
        candidate: cand(),
        name: ReportName::Run {
            id: 35570778795,
            attempt: 1,
        },
        kind: Some(AttemptKind::Initial { budget: 5 }),
        status: AttemptStatus::Passed,
        detail: Some("smoke".into()),
        run: Some(run(35570778795, 1)),
        at: Utc
            .with_ymd_and_hms(2026, 9, 17, 12, 34, 56)
            .single()
            .expect("time"),
        image: provenance().new_image,
        head: Some("9d5bbb82a1d648054e300003efb5692433f0fee8".into()),
        sections,
        evals,
        notes: vec![],
        part: None,
        failed_jobs: Vec::new(),
        live: None,
        repair: None,
        sick_nodes: None,
    }
}

#[test]
fn pr_title_matches_the_real_sample() {
    let engine = engine_display("sglang", "lmsysorg/sglang-rocm");
    let title = pr_title(
        DEFAULT_DISPLAY_NAME,
        "qwen3.5-fp8-mi300x-sglang",
        &engine,
        "v0.5.19-rocm720-mi30x",
    );
    assert_eq!(
        title,
        "[Klaud Cold] Update qwen3.5-fp8-mi300x-sglang SGLang ROCm image to v0.5.19-rocm720-mi30x / 将 qwen3.5-fp8-mi300x-sglang 的 SGLang ROCm 镜像更新至 v0.5.19-rocm720-mi30x"
    );
    insta::assert_snapshot!(
        "pr_title",
        pr_title(
            DEFAULT_DISPLAY_NAME,
            "dsr1-fp4-b200-sglang",
            &engine_display("sglang", "lmsysorg/sglang"),
            "v0.5.17-cu130"
        )
    );
}

#[test]
fn engine_names_come_from_image_and_framework() {
    let cases = [
        ("sglang", "lmsysorg/sglang", "SGLang"),
        ("sglang", "lmsysorg/sglang-rocm", "SGLang ROCm"),
        ("sglang", "rocm/sgl-dev", "SGLang ROCm"),
        ("vllm", "vllm/vllm-openai", "vLLM"),
        ("vllm", "vllm/vllm-openai-rocm", "vLLM ROCm"),
        ("trt", "nvcr.io/nvidia/tensorrt-llm/release", "TensorRT-LLM"),
        (
            "trt",
            "ghcr.io/semianalysisai/trtllm-deepseek-v4",
            "TensorRT-LLM",
        ),
        (
            "dynamo-trt",
            "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime",
            "Dynamo TensorRT-LLM",
        ),
        ("dynamo-sglang", "lmsysorg/sglang", "SGLang"),
        ("atom", "rocm/atom", "ATOM"),
        ("atom", "rocm/atom-dev", "ATOM"),
        (
            "llmd-vllm",
            "quay.io/rh-ee-imarkov/llm-d-nokube-vllm",
            "vLLM",
        ),
        ("tilert", "ghcr.io/tile-ai/tilert", "TileRT"),
        ("mystery", "example/thing", "mystery"),
    ];
    for (framework, repo, want) in cases {
        assert_eq!(engine_display(framework, repo), want, "{framework} {repo}");
    }
}

#[test]
fn pr_body_block_replaces_placeholder_and_keeps_other_text() {
    let frozen = FrozenBaseline {
        provenance: provenance(),
        baseline: baseline(),
    };
    let block = render_baseline_block(&frozen);
    insta::assert_snapshot!("pr_body_block", block);

    let other = "\r\n\n<!-- other-bot -->\nCoverage: 93% \u{1F600}\r\n";
    let body = format!("{}{other}", initial_body());
    let spliced = splice_baseline(&body, &block).expect("placeholder found");
    assert!(spliced.starts_with(BASELINE_START));
    assert!(
        spliced.ends_with(&format!("\n{other}")),
        "other text must stay byte for byte"
    );
    // Re-splicing the same block changes nothing; a new block replaces only the block.
    assert_eq!(
        splice_baseline(&spliced, &block).expect("block found"),
        spliced
    );
    let mut changed = frozen.clone();
    changed.baseline.points.pop();
    let block2 = render_baseline_block(&changed);
    let respliced = splice_baseline(&spliced, &block2).expect("block found");
    assert!(respliced.ends_with(&format!("\n{other}")));
    assert_eq!(
        parse_baseline_block(&respliced).expect("parses"),
        Some(changed)
    );
    assert_eq!(
        parse_baseline_block(&spliced).expect("parses"),
        Some(frozen)
    );
    assert_eq!(parse_baseline_block(&body).expect("placeholder only"), None);

    assert_eq!(
        splice_baseline("no markers", &block),
        Err(SpliceError::NotFound)
    );
    assert_eq!(
        splice_baseline(
            &format!("{BASELINE_PLACEHOLDER}{BASELINE_PLACEHOLDER}"),
            &block
        ),
        Err(SpliceError::Ambiguous(2))
    );
    assert_eq!(
        splice_baseline(&format!("x{BASELINE_START} y"), &block),
        Err(SpliceError::Unterminated)
    );
    assert!(
        parse_baseline_block(&format!(
            "{BASELINE_START}\n<!-- klaud-baseline-record\n{{nope\n-->\n{BASELINE_END}"
        ))
        .is_err()
    );
}

#[test]
fn interpolated_text_never_mentions_anyone() {
    let mut frozen = FrozenBaseline {
        provenance: provenance(),
        baseline: baseline(),
    };
    frozen.provenance.not_release_reason = Some("@octocat asked for the nightly -->".into());
    frozen.baseline.points[2].value = BaselineValue::Unavailable {
        reason: "ask @team/maintainers".into(),
    };
    let block = render_baseline_block(&frozen);
    assert!(
        !block.contains("@octocat") && !block.contains("@team"),
        "{block}"
    );
    // The block still splices and reads back: the hostile `-->` did not end a marker.
    let spliced = splice_baseline(&initial_body(), &block).expect("splices");
    assert_eq!(
        parse_baseline_block(&spliced).expect("parses"),
        Some(frozen)
    );
    let title = pr_title("Klaud Cold", "@x", "SGLang", "t");
    assert!(!title.contains("@x"));
}

#[test]
fn attempt_report_renders_with_deltas_and_na() {
    let report = attempt_report();
    let comments = render_report(&report).expect("renders");
    assert_eq!(comments.len(), 1);
    let body = &comments[0].body;
    insta::assert_snapshot!("attempt_report", body);
    assert!(body.starts_with(&format!(
        "<!-- klaud-report:{OWNER}:{CAND}:run-35570778795-1\n"
    )));
    assert!(body.contains("**Initial smoke, repair 0/5 · passed (smoke)** · [Run 35570778795, GitHub run attempt 1](https://github.com/SemiAnalysisAI/InferenceX/actions/runs/35570778795) · 2026-09-17 12:34 UTC"));
    assert!(
        body.contains("| 1 | 110.0 (+10.0%) | 190.0 (-5.0%) | 9.80 (-2.0%) |"),
        "{body}"
    );
    assert!(body.contains("97.00% (+0.50 pp)"));
    let record = find_record(body).expect("valid").expect("ours");
    assert_eq!(parse_report(&record).expect("typed"), report);
}

#[test]
fn baseline_report_without_run_renders() {
    let at = Utc
        .with_ymd_and_hms(2026, 9, 17, 12, 34, 56)
        .single()
        .expect("time");
    let report = AttemptReport::for_baseline(OWNER, cand(), at, &baseline());
    let comments = render_report(&report).expect("renders");
    let body = &comments[0].body;
    insta::assert_snapshot!("baseline_report_na", body);
    assert!(body.starts_with(&format!("<!-- klaud-report:{OWNER}:{CAND}:baseline\n")));
    assert!(body.contains("**Baseline · passed (frozen 2026-09-09)** · 2026-09-17 12:34 UTC"));
    assert!(body.contains("| 32 | 1,266.3 | 4,201.2 | 6.16 |"), "{body}");
    assert!(body.contains("- 8k1k c64 TP4 EP4 DPA: baseline: not benchmarked on 2026-09-09"));
}

fn big_report(rows: u64) -> AttemptReport {
    let mut report = attempt_report();
    report.sections = vec![ReportSection {
        scenario: "8k1k".into(),
        topology: "TP8".into(),
        rows: (1..=rows)
            .map(|c| ReportRow {
                label: format!("8k1k c{c} TP8"),
                conc: c,
                new: Measure::Measured {
                    metrics: metrics(100.0 + c as f64, 0.5, 0.01),
                },
                old: if c % 7 == 0 {
                    Measure::Missing {
                        reason: "not benchmarked on 2026-09-09".into(),
                    }
                } else {
                    Measure::Measured {
                        metrics: metrics(100.0, 0.5, 0.01),
                    }
                },
            })
            .collect(),
    }];
    report
}

#[test]
fn large_reports_split_into_standalone_parts_that_reassemble() {
    let report = big_report(1500);
    let parts = render_report(&report).expect("splits");
    assert!(parts.len() > 1, "1500 rows must not fit one comment");
    let mut records = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        assert!(part.body.chars().count() <= MAX_COMMENT_CHARS);
        let record = find_record(&part.body).expect("valid").expect("ours");
        assert_eq!(record.key, part.key);
        let MarkerKey::Report { part: Some(n), .. } = record.key else {
            panic!("part marker missing")
        };
        assert_eq!(n as usize, i + 1);
        assert!(
            part.body
                .contains("| Concurrency | Output tok/s/GPU ↑ | TTFT ms ↓ | TPOT ms ↓ |")
        );
        records.push(parse_report(&record).expect("typed"));
    }
    records.reverse();
    assert_eq!(reassemble(records.clone()).expect("whole"), report);
    records.pop();
    assert!(matches!(
        reassemble(records),
        Err(ReassembleError::Missing(_))
    ));
}

#[test]
fn split_report_snapshot() {
    let parts = render_report_with_limit(&big_report(12), 3500).expect("splits");
    assert!(parts.len() >= 2);
    let joined: Vec<String> = parts.iter().map(|p| p.body.clone()).collect();
    insta::assert_snapshot!("split_report", joined.join("\n=== next comment ===\n"));
}

#[test]
fn republishing_the_same_record_is_detected() {
    let wanted = render_report(&attempt_report()).expect("renders").remove(0);
    assert_eq!(
        compare_existing(&wanted.body, &wanted),
        Ok(Existing::Identical)
    );
    assert_eq!(
        compare_existing(&wanted.body.replace('\n', "\r\n"), &wanted),
        Ok(Existing::Identical)
    );
    // Other wording, same record (a newer Klaud): still identical.
    let reworded = wanted.body.replace("Scenario:", "Szenario:");
    assert_eq!(
        compare_existing(&reworded, &wanted),
        Ok(Existing::Identical)
    );
    let mut changed = attempt_report();
    changed.status = AttemptStatus::Failed;
    let changed = render_report(&changed).expect("renders").remove(0);
    assert_eq!(
        compare_existing(&changed.body, &wanted),
        Ok(Existing::Changed)
    );
    assert_eq!(
        compare_existing("LGTM /klaud retry", &wanted),
        Ok(Existing::Unrelated)
    );
    let receipt = render_receipt(&failed_receipt());
    assert_eq!(
        compare_existing(&receipt.body, &wanted),
        Ok(Existing::Unrelated)
    );
    let broken = wanted.body.replacen("{", "{nope", 1);
    assert!(compare_existing(&broken, &wanted).is_err());
}

fn failed_receipt() -> Receipt {
    Receipt {
        owner_run: OWNER,
        candidate: cand(),
        head: Some("9d5bbb82a1d648054e300003efb5692433f0fee8".parse().unwrap()),
        result: FinishedResult::new(
            Outcome::Failed,
            Phase::Targeted,
            Some(PullNumber::from(3023)),
            vec![run(34647177620, 1), run(34648882312, 1)],
            0,
        )
        .expect("valid"),
        sweep: None,
        note: Some("PR closed; exact-candidate branch retained pending maintainer review.".into()),
        note_zh: Some("PR 已关闭；保留精确候选分支，等待维护者检查。".into()),
        declined: None,
        declined_waits: false,
        dashboard: None,
        hunt: Default::default(),
        learned: None,
    }
}

#[test]
fn a_declined_receipt_says_not_this_image_a_newer_one_and_how_to_undo_in_both_languages() {
    let declined = Receipt {
        result: FinishedResult::new(
            Outcome::Handoff,
            Phase::Targeted,
            Some(PullNumber::from(3023)),
            vec![run(34647177620, 1)],
            0,
        )
        .expect("valid"),
        note: Some("#3023 was closed by @alice without merging".into()),
        note_zh: Some("#3023 已被 @alice 关闭，未合并".into()),
        declined: Some(klaud_lifecycle::model::Declined {
            pull: PullNumber::from(3023),
            by: "alice".into(),
            family: "d92e15065c55779d".into(),
            image: "lmsysorg/sglang:v0.5.6".into(),
        }),
        dashboard: Some((
            12,
            "https://github.com/SemiAnalysisAI/InferenceX/issues/12".into(),
        )),
        ..failed_receipt()
    };
    let rendered = render_receipt(&declined);
    insta::assert_snapshot!("receipt_declined", rendered.body);
    let body = &rendered.body;
    let (en, zh) = body.split_once("<summary>中文</summary>").expect("both");
    for part in [en, zh] {
        assert!(part.contains("`lmsysorg/sglang:v0.5.6`"), "{part}");
        assert!(
            part.contains("[\\#12](https://github.com/SemiAnalysisAI/InferenceX/issues/12)"),
            "{part}"
        );
    }
    assert!(en.contains("will not propose") && en.contains("newer image") && en.contains("undo"));
    assert!(zh.contains("不会再为该系列提议") && zh.contains("更新的镜像") && zh.contains("撤销"));
    let record = find_record(body).expect("valid").expect("ours");
    let back = parse_receipt(&record).expect("typed");
    assert_eq!(
        back.declined, declined.declined,
        "kept for a rebuild from GitHub"
    );
}

#[test]
fn a_closed_variant_whose_sibling_goes_on_ends_that_variant_only() {
    let declined = Receipt {
        result: FinishedResult::new(
            Outcome::Handoff,
            Phase::Targeted,
            Some(PullNumber::from(3023)),
            vec![run(34647177620, 1)],
            0,
        )
        .expect("valid"),
        declined: Some(klaud_lifecycle::model::Declined {
            pull: PullNumber::from(3023),
            by: "alice".into(),
            family: "d92e15065c55779d".into(),
            image: "lmsysorg/sglang:v0.5.6".into(),
        }),
        declined_waits: true,
        ..failed_receipt()
    };
    let body = render_receipt(&declined).body;
    let (en, zh) = body.split_once("<summary>中文</summary>").expect("both");
    assert!(
        en.contains("This variant only") && !en.contains("will not propose"),
        "{en}"
    );
    assert!(
        zh.contains("仅结束此变体") && !zh.contains("不会再为该系列提议"),
        "{zh}"
    );
    let record = find_record(&body).expect("valid").expect("ours");
    assert_eq!(
        parse_receipt(&record).expect("typed").declined,
        declined.declined,
        "the decline is kept for a rebuild: it stands once the siblings end"
    );
}

#[test]
fn receipts_render_like_the_helper_and_parse_back() {
    let failed = failed_receipt();
    let rendered = render_receipt(&failed);
    insta::assert_snapshot!("receipt_failed", rendered.body);
    assert!(rendered.body.contains("**failed** · Repairs: 0 · Runs: [34647177620](https://github.com/SemiAnalysisAI/InferenceX/actions/runs/34647177620), [34648882312](https://github.com/SemiAnalysisAI/InferenceX/actions/runs/34648882312)  \n"));
    let record = find_record(&rendered.body).expect("valid").expect("ours");
    assert_eq!(parse_receipt(&record).expect("typed"), failed);
    let json: serde_json::Value = serde_json::from_str(record.json).expect("json");
    assert_eq!(json["outcome"], "failed");
    assert!(json.get("head").is_some() && json.get("validation").is_some());

    let validated = Receipt {
        result: FinishedResult::new(
            Outcome::Validated,
            Phase::FinalSweep,
            Some(PullNumber::from(3010)),
            vec![run(34592860782, 1), run(34600160889, 1)],
            0,
        )
        .expect("valid"),
        sweep: Some(SweepCheck {
            run_id: 34600160889,
            run_attempt: 1,
            head: "9d5bbb82a1d648054e300003efb5692433f0fee8".parse().unwrap(),
            full_sweep: true,
            manifest: true,
        }),
        note: None,
        note_zh: None,
        ..failed.clone()
    };
    insta::assert_snapshot!("receipt_validated", render_receipt(&validated).body);

    let uncertain = Receipt {
        result: FinishedResult::new(Outcome::Uncertain, Phase::Resolve, None, vec![], 0)
            .expect("valid"),
        note: None,
        note_zh: None,
        ..failed.clone()
    };
    let body = render_receipt(&uncertain).body;
    assert!(
        body.contains("**uncertain** · Repairs: 0 · Runs: —"),
        "{body}"
    );

    // A forged receipt claiming validated without runs is refused on read.
    let forged = render_receipt(&validated).body.replace(r#""runs":[{"id":34592860782,"attempt":1,"url":"https://github.com/SemiAnalysisAI/InferenceX/actions/runs/34592860782"},{"id":34600160889,"attempt":1,"url":"https://github.com/SemiAnalysisAI/InferenceX/actions/runs/34600160889"}]"#, r#""runs":[]"#);
    let record = find_record(&forged).expect("valid").expect("ours");
    let err = parse_receipt(&record).unwrap_err();
    assert!(
        err.to_string().contains("validated needs at least one run"),
        "{err}"
    );
}

#[test]
fn cleanup_comment_renders_and_parses() {
    let rendered = render_cleanup(OWNER, &cand());
    insta::assert_snapshot!("cleanup", rendered.body);
    let record = find_record(&rendered.body).expect("valid").expect("ours");
    assert_eq!(
        record.key,
        MarkerKey::Cleanup {
            owner_run: OWNER,
            candidate: cand()
        }
    );
    assert_eq!(
        compare_existing(&rendered.body, &rendered),
        Ok(Existing::Identical)
    );
}

#[test]
fn a_record_whose_marker_and_json_disagree_is_refused() {
    let body = render_report(&attempt_report())
        .expect("renders")
        .remove(0)
        .body;
    let tampered = body.replacen(&format!("klaud-report:{OWNER}:"), "klaud-report:1:", 1);
    let record = find_record(&tampered).expect("header valid").expect("ours");
    assert!(matches!(
        parse_report(&record),
        Err(MarkerError::Mismatch { .. })
    ));
    assert!(matches!(
        parse_receipt(&record),
        Err(MarkerError::WrongKind { .. })
    ));
}

#[test]
fn compare_puts_each_variant_in_its_own_table_and_keeps_unmatched_rows() {
    use klaud_lifecycle::artifacts::AgenticRow;
    let agentic = |kv: Option<&str>| PointSpec {
        scenario: Scenario::Agentic,
        conc: 12,
        spec_decoding: "mtp".into(),
        kv_offload: kv.map(str::to_owned),
        decode: Workers {
            num_workers: None,
            tp: 8,
            ep: 8,
            dp_attn: false,
        },
        prefill: None,
    };
    let mut b = baseline();
    b.points = [agentic(None), agentic(Some("dram/hicache"))]
        .into_iter()
        .map(|p| BaselinePoint {
            label: p.label(),
            point: p,
            value: BaselineValue::Measured {
                metrics: metrics(10.0, 1.0, 0.01),
                run_url: None,
                published: None,
                run_id: Some(7),
            },
        })
        .collect();
    b.agentx_datasets = vec![FrozenDataset {
        run_id: 7,
        finding: DatasetFinding::Named {
            dataset: Dataset {
                name: "traces_a".into(),
                hf_dataset_name: None,
            },
        },
    }];
    let row = |kv: &str, out: f64, dataset: &str| {
        BenchmarkRow::Agentic(AgenticRow {
            conc: 12,
            identity: PointIdentity {
                tp: Some(8),
                ep: Some(8),
                dp_attention: Some(false),
                spec_decoding: Some("mtp".into()),
                ..PointIdentity::default()
            },
            scenario_type: Some("agentic-coding".into()),
            kv_offloading: Some(kv.into()),
            recipe_fingerprint: None,
            metrics: metrics(out, 1.0, 0.01),
            num_requests_total: None,
            num_requests_successful: None,
            extra: [(
                "dataset".to_owned(),
                serde_json::json!({"loader": dataset, "hf_dataset_name": "x/y"}),
            )]
            .into(),
        })
    };
    let rows = [
        row("dram", 12.0, "traces_a"),
        row("none", 11.0, "traces_b"),
        row("none", 99.0, "traces_a"),
    ];
    let sections = compare(&b, &rows, "missing");
    let summary: Vec<(String, Vec<String>)> = sections
        .iter()
        .map(|s| {
            (
                format!("{} | {}", s.scenario, s.topology),
                s.rows
                    .iter()
                    .map(|r| match (&r.new, &r.old) {
                        (Measure::Measured { metrics: n }, Measure::Measured { metrics: o }) => {
                            format!(
                                "{} {}/{}",
                                r.conc, n.output_tput_per_gpu, o.output_tput_per_gpu
                            )
                        }
                        (Measure::Measured { metrics: n }, Measure::Missing { reason }) => {
                            format!("{} {} ({reason})", r.conc, n.output_tput_per_gpu)
                        }
                        _ => format!("{} ?", r.conc),
                    })
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            // Another dataset than the producer run's: no delta.
            (
                "AgentX MTP | TP8 EP8".to_owned(),
                vec![
                    "12 11 (different AgentX datasets: the baseline's traces_a, this run's traces_b)"
                        .to_owned()
                ]
            ),
            // The producer run's dataset: the baseline beside it.
            (
                "AgentX MTP KV dram/hicache | TP8 EP8".to_owned(),
                vec!["12 12/10".to_owned()]
            ),
            (
                "AgentX | TP8 EP8".to_owned(),
                vec!["12 99 (not a point of the frozen baseline)".to_owned()]
            ),
        ]
    );
}

#[test]
fn pr_body_says_which_recipes_were_aligned_or_left_and_which_keys_moved_together() {
    let mut frozen = FrozenBaseline {
        provenance: provenance(),
        baseline: baseline(),
    };
    let plain = render_baseline_block(&frozen);
    assert!(!plain.contains("Recipes"), "no scope, no lines");
    frozen.provenance.scope = Some(BumpScope {
        keys: vec!["dsv4-a".into(), "dsv4-b".into()],
        aligned: vec!["benchmarks/x/a.yaml".into()],
        left: vec!["benchmarks/x/b.yaml".into()],
    });
    let block = render_baseline_block(&frozen);
    assert!(block.contains("**Bumped together (shared recipes):** `dsv4-a`, `dsv4-b`  \n"));
    assert!(block.contains("**Recipes aligned to the new image:** `benchmarks/x/a.yaml`  \n"));
    assert!(block.contains("**Recipes left on their own image:** `benchmarks/x/b.yaml`  \n"));
    assert!(block.contains("**保留原镜像的配方**：`benchmarks/x/b.yaml`"));
    // The typed record round-trips with the scope, and old records without it still parse.
    let body = splice_baseline(&initial_body(), &block).unwrap();
    assert_eq!(parse_baseline_block(&body).unwrap(), Some(frozen));
}

#[test]
fn a_pull_whose_old_tag_was_pruned_upstream_says_so_in_both_languages() {
    let mut frozen = FrozenBaseline {
        provenance: provenance(),
        baseline: baseline(),
    };
    let plain = render_baseline_block(&frozen);
    assert!(
        !plain.contains("pruned") && !plain.contains("删除"),
        "{plain}"
    );
    if let Some(v) = frozen.provenance.versions.as_mut() {
        v.old = None;
        v.old_pruned = true;
    }
    let block = render_baseline_block(&frozen);
    assert!(
        block.contains(
            "**Old image pruned upstream:** tag `v0.5.16-cu130` is gone from its registry"
        ),
        "{block}"
    );
    assert!(
        block.contains("**原镜像已被上游删除**：标签 `v0.5.16-cu130` 已不在镜像仓库中"),
        "{block}"
    );
    // The snapshot is also read by the GFM render check of every snapshot.
    insta::assert_snapshot!("pr_body_block_pruned", block);
    let body = splice_baseline(&initial_body(), &block).unwrap();
    assert_eq!(parse_baseline_block(&body).unwrap(), Some(frozen));
}

#[test]
fn a_failed_report_links_its_failed_jobs_in_both_languages() {
    let mut report = attempt_report();
    report.status = klaud_lifecycle::model::AttemptStatus::Failed;
    report.failed_jobs = vec![klaud_lifecycle::report::FailedJob {
        name: "benchmark 8k1k c64".into(),
        conclusion: "timed_out".into(),
        url: Some("https://github.com/o/r/actions/runs/1/job/2".into()),
        node: None,
        triage: None,
    }];
    let body = render_report(&report).expect("renders").remove(0).body;
    assert!(
        body.contains("**Failed jobs:** [benchmark 8k1k c64](https://github.com/o/r/actions/runs/1/job/2) (timed\\_out)"),
        "{body}"
    );
    assert!(
        body.contains("**失败的作业**：[benchmark 8k1k c64](https://github.com/o/r/actions/runs/1/job/2)（timed\\_out）"),
        "{body}"
    );
    let record = find_record(&body).expect("record").expect("a record");
    assert_eq!(
        parse_report(&record).expect("parses").failed_jobs,
        report.failed_jobs
    );
}

#[test]
fn a_failed_jobs_triage_names_node_class_entries_and_bounded_lines_in_both_languages() {
    use klaud_lifecycle::report::{
        JobTriage, MAX_TRIAGE_LINE_CHARS, MAX_TRIAGE_LINES, TriageClass,
    };
    let mut report = attempt_report();
    report.status = klaud_lifecycle::model::AttemptStatus::Failed;
    // Hostile log text: markdown, a mention, an HTML comment, and far too
    // many and too long lines.
    let mut lines =
        vec!["torch.OutOfMemoryError: CUDA out of memory <!-- x --> @someone **bold**".to_owned()];
    lines.extend((0..20).map(|i| format!("line {i} {}", "y".repeat(1000))));
    report.failed_jobs = vec![klaud_lifecycle::report::FailedJob {
        name: "benchmark 8k1k c64".into(),
        conclusion: "failure".into(),
        url: None,
        node: Some("b200-dgx-07".into()),
        triage: Some(JobTriage::new(
            TriageClass::KnownEngine,
            vec!["vllm-oom-at-load".into(), "vllm-kv-negative".into()],
            &lines,
        )),
    }];
    let t = report.failed_jobs[0].triage.as_ref().unwrap();
    assert_eq!(t.lines.len(), MAX_TRIAGE_LINES);
    assert!(
        t.lines
            .iter()
            .all(|l| l.chars().count() <= MAX_TRIAGE_LINE_CHARS)
    );
    let body = render_report(&report).expect("renders").remove(0).body;
    assert!(
        body.contains(
            "- benchmark 8k1k c64 on node `b200-dgx-07`: known engine failure, playbook entry \
             `vllm-oom-at-load`, then `vllm-kv-negative`"
        ),
        "{body}"
    );
    assert!(
        body.contains(
            "- benchmark 8k1k c64（节点 `b200-dgx-07`）：已知引擎故障，剧本条目 \
             `vllm-oom-at-load`、`vllm-kv-negative`"
        ),
        "{body}"
    );
    assert!(
        body.contains("**Triage:**") && body.contains("**分诊**："),
        "{body}"
    );
    assert!(!body.contains("<!-- x -->"), "{body}");
    let record = find_record(&body).expect("record").expect("a record");
    assert_eq!(
        parse_report(&record).expect("parses").failed_jobs,
        report.failed_jobs
    );
}

#[test]
fn a_baseline_from_several_sweeps_names_each_day_and_run_in_both_languages() {
    let mut b = baseline();
    b.date = NaiveDate::from_ymd_opt(2026, 9, 21).expect("date");
    b.source_urls = vec![
        "https://inferencex.semianalysis.com/api/v1/benchmarks?model=DeepSeek-R1-0528&date=2026-09-21"
            .into(),
    ];
    let runs = [
        (34896669482_u64, NaiveDate::from_ymd_opt(2026, 9, 15)),
        (34000000001, NaiveDate::from_ymd_opt(2026, 9, 12)),
    ];
    for (point, (id, day)) in b.points.iter_mut().zip(runs) {
        point.value = BaselineValue::Measured {
            metrics: metrics(100.0, 0.2, 0.01),
            run_url: Some(format!(
                "https://github.com/SemiAnalysisAI/InferenceX/actions/runs/{id}/attempts/1"
            )),
            published: day,
            run_id: Some(id),
        };
    }
    let block = render_baseline_block(&FrozenBaseline {
        provenance: provenance(),
        baseline: b.clone(),
    });
    let (english, chinese) = block.split_once("<summary>中文</summary>").expect("both");
    assert!(
        english.contains(
            "**Baseline:** published 2026-09-12 by run `34000000001` (1 point), 2026-09-15 by run `34896669482` (1 point) · `lmsysorg/sglang:v0.5.16-cu130`"
        ),
        "{english}"
    );
    assert!(
        chinese.contains("**基线**：2026-09-12 发布，运行 `34000000001`（1 个点位）；2026-09-15 发布，运行 `34896669482`（1 个点位） ·"),
        "{chinese}"
    );
    // Nothing published at all says so, with the day asked.
    for p in &mut b.points {
        p.value = BaselineValue::Unavailable {
            reason: "not published as of 2026-09-21".into(),
        };
    }
    let block = render_baseline_block(&FrozenBaseline {
        provenance: provenance(),
        baseline: b,
    });
    assert!(
        block.contains("**Baseline:** nothing published as of 2026-09-21 ·"),
        "{block}"
    );
    assert!(
        block.contains("**基线**：截至 2026-09-21 无公开结果 ·"),
        "{block}"
    );
    assert!(block.contains("截至 2026-09-21 未公开"), "{block}");
}

#[test]
fn the_pr_body_freezes_published_evals_in_both_languages_and_says_why_when_there_are_none() {
    let eval = |tp: u64, score: f64| FrozenEval {
        task: "gsm8k".into(),
        score_name: "em_strict".into(),
        score,
        conc: Some(28),
        samples: Some(1319),
        decode: Workers {
            num_workers: None,
            tp,
            ep: 1,
            dp_attn: false,
        },
        published: NaiveDate::from_ymd_opt(2026, 9, 9),
        run_url: Some("https://github.com/o/r/actions/runs/61/attempts/1".into()),
    };
    let with = |evals: Vec<FrozenEval>, why: Option<&str>| FrozenBaseline {
        provenance: provenance(),
        baseline: Baseline {
            evals,
            evals_unavailable: why.map(str::to_owned),
            ..baseline()
        },
    };

    let block = render_baseline_block(&with(vec![eval(4, 0.965)], None));
    assert!(block.contains("| Eval | Score ↑ | Samples |"), "{block}");
    assert!(
        block.contains("| gsm8k/em\\_strict · c28 | 96.50% | 1,319 |"),
        "{block}"
    );
    assert!(block.contains("| 评估 | 分数 ↑ | 样本数 |"), "{block}");
    assert!(!block.contains("**Eval:** N/A"), "{block}");
    // The record keeps them: later reports compare against them.
    let parsed = parse_baseline_block(&block)
        .expect("parses")
        .expect("record");
    assert_eq!(parsed.baseline.evals, vec![eval(4, 0.965)]);

    // Two parallelisms: each row names its own.
    let block = render_baseline_block(&with(vec![eval(4, 0.965), eval(8, 0.97)], None));
    assert!(
        block.contains("| gsm8k/em\\_strict · c28 · TP8 EP1 | 97.00% | 1,319 |"),
        "{block}"
    );

    let block = render_baseline_block(&with(
        vec![],
        Some("no eval result published by the runs the baseline points come from"),
    ));
    assert!(
        block.contains("**Eval:** N/A (no baseline: no eval result published by the runs the baseline points come from)"),
        "{block}"
    );
    assert!(
        block.contains("**评估**：N/A（无基线：基线点位所来自的运行没有公开的评估结果）"),
        "{block}"
    );
}

#[test]
fn an_eval_over_another_number_of_samples_has_no_delta_and_says_why() {
    let frozen = Baseline {
        evals: vec![FrozenEval {
            task: "gsm8k".into(),
            score_name: "em_strict".into(),
            score: 0.965,
            conc: Some(28),
            samples: Some(1319),
            decode: Workers {
                num_workers: None,
                tp: 4,
                ep: 1,
                dp_attn: false,
            },
            published: NaiveDate::from_ymd_opt(2026, 9, 9),
            run_url: None,
        }],
        ..baseline()
    };
    let result = |n_eff: Option<u64>| EvalRow {
        task: "gsm8k".into(),
        conc: 28,
        score: 0.97,
        score_name: "em_strict".into(),
        n_eff,
        identity: PointIdentity::default(),
        extra: Default::default(),
    };
    let same = compare_evals(&[result(Some(1319))], &frozen);
    assert_eq!(
        (same[0].old, same[0].no_delta.as_deref()),
        (Some(0.965), None)
    );
    for n_eff in [Some(200), None] {
        let other = compare_evals(&[result(n_eff)], &frozen);
        assert_eq!(
            (other[0].old, other[0].no_delta.as_deref()),
            (None, Some(EVAL_SAMPLES_DIFFER))
        );
        let mut report = attempt_report();
        report.evals = other;
        let text: String = render_report(&report)
            .expect("renders")
            .into_iter()
            .map(|c| c.body)
            .collect();
        assert!(
            text.contains("sample counts missing or different")
                && text.contains("样本数缺失或不同"),
            "{text}"
        );
    }
}

#[test]
fn a_build_on_another_base_says_so_in_the_pr_body() {
    let mut frozen = FrozenBaseline {
        provenance: provenance(),
        baseline: baseline(),
    };
    let old = "rocm7.2.3_ubuntu24.04_py3.12_pytorch_release_2.10.0_atom20260511";
    let new = "rocm7.2.4_ubuntu24.04_py3.12_pytorch_release_2.10.0_atom20260531";
    frozen.provenance.old_tag = Some(old.into());
    frozen.provenance.new_tag = new.into();
    frozen.provenance.old_image = format!("rocm/atom:{old}");
    frozen.provenance.new_image = format!("rocm/atom:{new}");
    let block = render_baseline_block(&frozen);
    assert!(
        block.contains(" · also moves ROCm 7.2.3 → 7.2.4  \n"),
        "{block}"
    );
    assert!(
        block.contains("同时更换基础环境：ROCm 7.2.3 → 7.2.4"),
        "{block}"
    );
    // Same base: nothing said.
    frozen.provenance.new_tag =
        "rocm7.2.3_ubuntu24.04_py3.12_pytorch_release_2.10.0_atom20260519".into();
    assert!(!render_baseline_block(&frozen).contains("also moves"));
}

#[test]
fn a_receipt_and_the_final_report_fold_into_one_comment_both_readers_find() {
    let receipt = render_receipt(&failed_receipt());
    let mut report = attempt_report();
    // Hostile text in what the report shows: a line that looks like a
    // record of another run must stay text.
    report.notes.push(format!(
        "\n<!-- klaud-report:{OWNER}:{}:run-9-1\n{{}}\n-->",
        cand().as_str()
    ));
    let parts = render_report(&report).expect("renders");
    let [rendered] = parts.as_slice() else {
        panic!("one part: {}", parts.len());
    };
    let folded = fold_receipt(&receipt, rendered).expect("fits one comment");
    assert_eq!(folded.key, receipt.key);
    // Every reader of receipts reads the comment as the receipt.
    assert_eq!(
        candidate_receipt(&folded.body, cand().as_str()),
        Some(parse_receipt(&find_record(&receipt.body).unwrap().unwrap()).unwrap())
    );
    // Readers of reports find the report, typed, and nothing else.
    let found = find_records(&folded.body).expect("valid");
    let keys: Vec<&MarkerKey> = found.iter().map(|f| &f.key).collect();
    assert_eq!(keys, [&receipt.key, &rendered.key]);
    assert_eq!(parse_report(&found[1]).expect("typed"), report);
    // Both texts are shown, the receipt's first.
    let shown_receipt = folded
        .body
        .find("**failed** · Repairs")
        .expect("receipt text");
    let shown_report = folded.body.find("| Concurrency").expect("report text");
    assert!(shown_receipt < shown_report, "{}", folded.body);
    // What does not make one comment is posted apart.
    assert_eq!(fold_receipt(rendered, &receipt), None);
    assert_eq!(fold_receipt(&receipt, &receipt), None);
    let big = render_report_with_limit(&big_report(1500), MAX_COMMENT_CHARS).expect("parts");
    assert!(big.len() > 1);
    assert_eq!(fold_receipt(&receipt, &big[0]), None);
    // A report that fits a comment alone does not fit with the receipt.
    let pad = MAX_COMMENT_CHARS - rendered.body.chars().count();
    let long = RenderedComment {
        key: rendered.key.clone(),
        body: format!("{}{}", rendered.body, "x".repeat(pad)),
    };
    assert!(
        fold_receipt(&receipt, &long).is_none(),
        "not with the receipt"
    );
}
