use super::*;

fn point(conc: u64, tp: u64) -> PointSpec {
    PointSpec {
        scenario: Scenario::FixedSeqLen {
            isl: 1024,
            osl: 1024,
        },
        conc,
        spec_decoding: "none".into(),
        kv_offload: None,
        decode: Workers {
            num_workers: None,
            tp,
            ep: 1,
            dp_attn: false,
        },
        prefill: None,
    }
}

fn request(points: Vec<PointSpec>) -> BaselineRequest {
    BaselineRequest {
        model: "DeepSeek-R1-0528".into(),
        date: NaiveDate::from_ymd_opt(2026, 2, 27).expect("date"),
        image: "lmsysorg/sglang:v0.5.9-rocm700-mi35x".into(),
        key: FamilyKey {
            hardware: "mi355x".into(),
            framework: "sglang".into(),
            model_prefix: "dsr1".into(),
            precision: "fp4".into(),
        },
        points,
    }
}

const ROW: &str = r#"{"hardware":"mi355x","framework":"sglang","model":"dsr1","precision":"fp4","spec_method":"none","disagg":false,"is_multinode":false,"prefill_tp":4,"prefill_ep":1,"prefill_dp_attention":false,"prefill_num_workers":0,"decode_tp":4,"decode_ep":1,"decode_dp_attention":false,"decode_num_workers":0,"isl":1024,"osl":1024,"conc":4,"image":"IMAGE","metrics":{"mean_tpot":0.0106,"mean_ttft":0.1477,"tput_per_gpu":180.65,"output_tput_per_gpu":89.88},"date":"2026-02-27","run_url":"https://github.com/o/r/actions/runs/1/attempts/1"}"#;

fn fetched(body: String) -> Fetched {
    Fetched {
        url: "https://api.example/api/v1/benchmarks?model=x".into(),
        body,
    }
}

const CURRENT: &str = "lmsysorg/sglang:v0.5.9-rocm700-mi35x";

/// A row of `point(conc, tp)` published on `date` by run `run` with
/// `image` (`None`: the row records no image).
fn row(conc: u64, tp: u64, image: Option<&str>, date: &str, run: u64) -> String {
    let image = image.map_or_else(|| "null".to_owned(), |i| format!("\"{i}\""));
    ROW.replace(r#""conc":4,"#, &format!(r#""conc":{conc},"#))
        .replace(r#""prefill_tp":4,"#, &format!(r#""prefill_tp":{tp},"#))
        .replace(r#""decode_tp":4,"#, &format!(r#""decode_tp":{tp},"#))
        .replace("\"IMAGE\"", &image)
        .replace("2026-02-27", date)
        .replace("runs/1/attempts/1", &format!("runs/{run}/attempts/2"))
}

fn rows(rows: &[String]) -> Fetched {
    fetched(format!("[{}]", rows.join(",")))
}

fn day(d: &str) -> NaiveDate {
    NaiveDate::parse_from_str(d, "%Y-%m-%d").expect("date")
}

/// An `/api/v1/evaluations` row (InferenceX-app's `EvalRow` shape) of
/// the request's config at TP `tp`, published on `date` by run `run`.
fn eval_row(task: &str, conc: u64, tp: u64, em: f64, date: &str, run: u64) -> String {
    format!(
        r#"{{"config_id":7,"hardware":"mi355x","framework":"sglang","model":"dsr1","precision":"fp4","spec_method":"none","decode_tp":{tp},"decode_ep":1,"decode_dp_attention":false,"task":"{task}","date":"{date}","conc":{conc},"metrics":{{"em_strict":{em},"em_flexible":0.99,"n_eff":1319}},"timestamp":"{date}T10:00:00Z","run_url":"https://github.com/o/r/actions/runs/{run}"}}"#
    )
}

fn frozen_of(points: Vec<PointSpec>, benchmark_rows: &[String]) -> Baseline {
    build_baseline(&request(points), &rows(benchmark_rows)).expect("baseline")
}

#[test]
fn published_evals_of_the_runs_that_produced_the_points_are_frozen_newest_first() {
    let b = frozen_of(
        vec![point(4, 4), point(8, 8)],
        &[
            row(4, 4, Some(CURRENT), "2026-02-20", 61),
            row(8, 8, Some(CURRENT), "2026-02-25", 62),
        ],
    );
    let answer = format!(
        "[{}]",
        [
            eval_row("gsm8k", 28, 4, 0.95, "2026-02-20", 61),
            // The same eval published again by the later producer of TP8.
            eval_row("gsm8k", 28, 8, 0.97, "2026-02-25", 62),
            // Another run (another image's): not this image's score.
            eval_row("gsm8k", 28, 4, 0.10, "2026-02-26", 99),
            // Another config.
            eval_row("gsm8k", 28, 4, 0.20, "2026-02-20", 61).replace("mi355x", "b200"),
            // A row the API got wrong: skipped, the rest stand.
            r#"{"task":7}"#.to_owned(),
        ]
        .join(",")
    );
    let evals = freeze_evals(
        &request(vec![]).key,
        &b,
        &parse_evaluations(&fetched(answer)).expect("rows"),
    );
    let shown: Vec<(u64, f64, Option<u64>, Option<NaiveDate>)> = evals
        .iter()
        .map(|e| (e.decode.tp, e.score, e.samples, e.published))
        .collect();
    assert_eq!(
        shown,
        vec![
            (4, 0.95, Some(1319), Some(day("2026-02-20"))),
            (8, 0.97, Some(1319), Some(day("2026-02-25"))),
        ]
    );
    assert!(
        evals
            .iter()
            .all(|e| e.score_name == "em_strict" && e.conc == Some(28))
    );
}

#[test]
fn no_eval_is_frozen_for_points_published_for_another_image() {
    let b = frozen_of(
        vec![point(4, 4)],
        &[row(4, 4, Some("lmsysorg/sglang:v0.5.8"), "2026-02-20", 61)],
    );
    let rows = parse_evaluations(&fetched(format!(
        "[{}]",
        eval_row("gsm8k", 28, 4, 0.95, "2026-02-20", 61)
    )))
    .expect("rows");
    assert!(freeze_evals(&request(vec![]).key, &b, &rows).is_empty());
}

#[test]
fn an_evaluations_answer_that_is_not_a_list_names_its_url() {
    let err = parse_evaluations(&fetched("{\"error\":\"x\"}".into())).expect_err("refused");
    assert!(err.to_string().contains("api.example"), "{err}");
}

struct Evals(Result<Option<Fetched>, SourceError>);

#[async_trait]
impl BaselineSource for Evals {
    async fn benchmarks(&self, _: &str, _: NaiveDate) -> Result<Fetched, SourceError> {
        unreachable!("only evals are asked")
    }
    async fn workflow_info(&self, _: NaiveDate) -> Result<Fetched, SourceError> {
        unreachable!("only evals are asked")
    }
    async fn evaluations(&self) -> Result<Option<Fetched>, SourceError> {
        self.0.clone()
    }
}

#[tokio::test]
async fn attached_evals_say_why_when_there_are_none() {
    let key = request(vec![]).key;
    let measured = || {
        frozen_of(
            vec![point(4, 4)],
            &[row(4, 4, Some(CURRENT), "2026-02-20", 61)],
        )
    };

    let mut b = measured();
    let source = Evals(Ok(Some(fetched(format!(
        "[{}]",
        eval_row("gsm8k", 28, 4, 0.95, "2026-02-20", 61)
    )))));
    attach_evals(&source, &key, &mut b).await;
    assert_eq!((b.evals.len(), b.evals_unavailable.as_deref()), (1, None));
    assert_eq!(b.source_urls.len(), 2, "the evals answer is a source too");

    let mut b = measured();
    attach_evals(&Evals(Ok(Some(fetched("[]".into())))), &key, &mut b).await;
    assert_eq!(
        b.evals_unavailable.as_deref(),
        Some("no eval result published by the runs the baseline points come from")
    );

    let mut b = measured();
    let down = Evals(Err(SourceError {
        url: "https://api.example/api/v1/evaluations".into(),
        reason: "HTTP 503".into(),
    }));
    attach_evals(&down, &key, &mut b).await;
    assert!(b.evals.is_empty());
    assert!(
        b.evals_unavailable
            .as_deref()
            .is_some_and(|w| w.contains("HTTP 503"))
    );

    // A source without an evals route leaves the baseline as it was.
    let mut b = measured();
    attach_evals(&Evals(Ok(None)), &key, &mut b).await;
    assert_eq!(b, measured());
}

#[test]
fn matching_row_gives_numbers_and_others_are_na_with_reason() {
    let answer = rows(&[row(4, 4, Some(CURRENT), "2026-02-20", 71)]);
    let req = request(vec![point(4, 4), point(8, 4), point(4, 8)]);
    let b = build_baseline(&req, &answer).expect("builds");
    assert_eq!(b.points[0].label, "1k1k c4 TP4");
    let m = b.points[0].metrics().expect("measured");
    assert_eq!(m.output_tput_per_gpu, 89.88);
    assert_eq!(
        b.points[1].value,
        BaselineValue::Unavailable {
            reason: "not published as of 2026-02-27 (its line's newest row: run 71 on 2026-02-20)"
                .into()
        }
    );
    assert_eq!(
        b.points[2].value,
        BaselineValue::Unavailable {
            reason: "not published as of 2026-02-27".into()
        }
    );
    assert_eq!(b.source_urls.len(), 1);
}

#[test]
fn each_point_keeps_its_own_publication_day_and_producer_run() {
    // Two lines (TP4, TP8) last published by different sweeps.
    let answer = rows(&[
        row(4, 4, Some(CURRENT), "2026-02-20", 34896669482),
        row(8, 4, Some(CURRENT), "2026-02-20", 34896669482),
        row(4, 8, Some(CURRENT), "2026-02-13", 34000000001),
    ]);
    let req = request(vec![point(4, 4), point(8, 4), point(4, 8)]);
    let b = build_baseline(&req, &answer).expect("builds");
    let BaselineValue::Measured {
        published,
        run_id,
        run_url,
        ..
    } = &b.points[2].value
    else {
        panic!("measured: {:?}", b.points[2]);
    };
    assert_eq!(*published, Some(day("2026-02-13")));
    assert_eq!(*run_id, Some(34000000001));
    assert_eq!(
        run_url.as_deref(),
        Some("https://github.com/o/r/actions/runs/34000000001/attempts/2")
    );
    assert_eq!(readiness_gap(&b), None);
    let publications = b.publications();
    assert_eq!(
        publications
            .iter()
            .map(|p| (p.date, p.run_id, p.points))
            .collect::<Vec<_>>(),
        vec![
            (day("2026-02-13"), Some(34000000001), 1),
            (day("2026-02-20"), Some(34896669482), 2),
        ]
    );
}

#[test]
fn a_point_whose_only_published_row_ran_another_image_is_na_naming_it() {
    let other = "lmsysorg/sglang:v0.5.8-rocm700-mi35x";
    let answer = rows(&[row(4, 4, Some(other), "2026-02-20", 71)]);
    let b = build_baseline(&request(vec![point(4, 4)]), &answer).expect("ok");
    assert_eq!(
        b.points[0].value,
        BaselineValue::Unavailable {
            reason: format!("published result ran another image ({other})")
        }
    );
    let gap = readiness_gap(&b).expect("blocked");
    assert!(gap.starts_with(BASELINE_UNAVAILABLE), "{gap}");
    assert!(gap.contains(other), "{gap}");
}

#[test]
fn of_several_rows_for_one_point_the_newest_of_the_current_image_is_taken() {
    let other = "lmsysorg/sglang:v0.5.8-rocm700-mi35x";
    // Two configs the API cannot tell apart, each with its own image:
    // the family's own row is its baseline, however recent the other.
    let answer = rows(&[
        row(4, 4, Some(CURRENT), "2026-02-10", 60),
        row(4, 4, Some(CURRENT), "2026-02-12", 61),
        row(4, 4, Some(other), "2026-02-20", 71),
    ]);
    let b = build_baseline(&request(vec![point(4, 4)]), &answer).expect("ok");
    assert!(
        matches!(
            &b.points[0].value,
            BaselineValue::Measured { run_id: Some(61), published: Some(d), .. }
                if *d == day("2026-02-12")
        ),
        "{:?}",
        b.points[0]
    );
}

#[test]
fn rows_of_another_image_are_not_a_baseline() {
    let answer = rows(&[row(
        4,
        4,
        Some("lmsysorg/sglang:v0.5.8-rocm700-mi35x"),
        "2026-02-20",
        71,
    )]);
    let b = build_baseline(&request(vec![point(4, 4)]), &answer).expect("ok");
    let BaselineValue::Unavailable { reason } = &b.points[0].value else {
        panic!("must be N/A");
    };
    assert!(reason.contains("another image"), "{reason}");
    let answer = rows(&[row(4, 4, None, "2026-02-20", 71)]);
    let b = build_baseline(&request(vec![point(4, 4)]), &answer).expect("ok");
    assert!(b.points[0].metrics().is_some());
}

#[test]
fn a_partly_measured_family_is_incomplete_and_an_unpublished_one_unavailable() {
    let req = request(vec![point(4, 4), point(8, 4)]);
    let answer = rows(&[row(4, 4, Some(CURRENT), "2026-02-20", 71)]);
    let gap = readiness_gap(&build_baseline(&req, &answer).expect("ok")).expect("gap");
    assert!(
            gap.starts_with("baseline-incomplete: the published baseline of lmsysorg/sglang:v0.5.9-rocm700-mi35x as of 2026-02-27 lacks 1 of the family's 2 points: 1k1k c8 TP4 (not published as of 2026-02-27"),
            "{gap}"
        );
    let gap = readiness_gap(&build_baseline(&req, &rows(&[])).expect("ok")).expect("gap");
    assert!(
            gap.starts_with("baseline-unavailable: no published baseline of lmsysorg/sglang:v0.5.9-rocm700-mi35x as of 2026-02-27 for any of the family's 2 points"),
            "{gap}"
        );
}

#[test]
fn records_frozen_before_points_carried_their_day_still_load() {
    let old = r#"{"date":"2026-09-15","image":"i:1","model":"M","source_urls":["u"],"points":[{"label":"1k1k c4 TP4","point":{"scenario":{"kind":"fixed-seq-len","isl":1024,"osl":1024},"conc":4,"spec_decoding":"none","decode":{"num_workers":null,"tp":4,"ep":1,"dp_attn":false},"prefill":null},"value":{"state":"measured","metrics":{"tput_per_gpu":1.0,"output_tput_per_gpu":1.0,"mean_ttft":0.1,"mean_tpot":0.01},"run_url":"https://github.com/o/r/actions/runs/34896669482/attempts/1"}}]}"#;
    let b: Baseline = serde_json::from_str(old).expect("an old record loads");
    let publications = b.publications();
    assert_eq!(publications.len(), 1);
    assert_eq!(publications[0].date, day("2026-09-15"));
    assert_eq!(publications[0].run_id, Some(34896669482));
    // And writes back without the new fields.
    assert_eq!(
        serde_json::to_value(&b).expect("json"),
        serde_json::from_str::<Value>(old).expect("json")
    );
}

#[test]
fn producer_run_ids_are_read_from_run_urls() {
    assert_eq!(
        run_id_of_url(
            "https://github.com/SemiAnalysisAI/InferenceX/actions/runs/34896669482/attempts/1"
        ),
        Some(34896669482)
    );
    assert_eq!(
        run_id_of_url("https://github.com/o/r/actions/runs/7"),
        Some(7)
    );
    assert_eq!(run_id_of_url("https://github.com/o/r/pull/7"), None);
    assert_eq!(
        run_id_of_url("https://github.com/o/r/actions/runs/x/attempts/1"),
        None
    );
}

#[test]
fn malformed_answers_name_url_row_and_field() {
    let req = request(vec![point(4, 4)]);
    let err = build_baseline(&req, &fetched("{".into())).unwrap_err();
    assert!(err.to_string().contains("not valid JSON"), "{err}");
    let err = build_baseline(&req, &fetched("{}".into())).unwrap_err();
    assert!(err.to_string().contains("expected a list of rows"), "{err}");
    let bad = ROW.replace(r#""conc":4,"#, "");
    let err = build_baseline(&req, &fetched(format!("[{bad}]"))).unwrap_err();
    assert!(
        err.to_string().contains("row 0: missing field `conc`"),
        "{err}"
    );
}

#[test]
fn missing_metric_is_na_naming_it() {
    let rows = format!(
        "[{}]",
        ROW.replace("\"IMAGE\"", "null")
            .replace(r#""mean_tpot":0.0106,"#, "")
    );
    let b = build_baseline(&request(vec![point(4, 4)]), &fetched(rows)).expect("ok");
    assert_eq!(
        b.points[0].value,
        BaselineValue::Unavailable {
            reason: "published result lacks mean_tpot".into()
        }
    );
}

struct FakeSource {
    benchmarks: Result<String, String>,
}

#[async_trait]
impl BaselineSource for FakeSource {
    async fn benchmarks(&self, model: &str, date: NaiveDate) -> Result<Fetched, SourceError> {
        let url = benchmarks_url("https://api.example", model, date);
        match &self.benchmarks {
            Ok(body) => Ok(Fetched {
                url,
                body: body.clone(),
            }),
            Err(reason) => Err(SourceError {
                url,
                reason: reason.clone(),
            }),
        }
    }

    async fn workflow_info(&self, _date: NaiveDate) -> Result<Fetched, SourceError> {
        Err(SourceError {
            url: "https://api.example/api/v1/workflow-info".into(),
            reason: "the freeze does not ask workflow-info".into(),
        })
    }
}

#[tokio::test]
async fn freeze_asks_the_source_as_of_the_day_and_reports_its_failures() {
    let req = request(vec![point(4, 4)]);
    let ok = FakeSource {
        benchmarks: Ok(format!("[{}]", row(4, 4, Some(CURRENT), "2026-02-20", 71))),
    };
    let b = freeze(&ok, &req).await.expect("freezes");
    assert!(b.points[0].metrics().is_some());
    assert_eq!(
        b.source_urls,
        vec!["https://api.example/api/v1/benchmarks?model=DeepSeek-R1-0528&date=2026-02-27"]
    );
    let down = FakeSource {
        benchmarks: Err("HTTP 503".into()),
    };
    let err = freeze(&down, &req).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "baseline source https://api.example/api/v1/benchmarks?model=DeepSeek-R1-0528&date=2026-02-27: HTTP 503"
    );
}

#[test]
fn a_partial_re_sweep_keeps_every_point_with_its_own_run_and_day() {
    // The API answers each point's newest row: a re-sweep of c4 alone
    // (run 71) leaves c8 with the older sweep's row (run 60). Both are
    // the family's baseline, each named with its run and day.
    let answer = rows(&[
        row(4, 4, Some(CURRENT), "2026-02-20", 71),
        row(8, 4, Some(CURRENT), "2026-02-10", 60),
    ]);
    let b = build_baseline(&request(vec![point(4, 4), point(8, 4)]), &answer).expect("ok");
    assert_eq!(readiness_gap(&b), None, "{b:#?}");
    assert_eq!(
        b.publications()
            .iter()
            .map(|p| (p.date, p.run_id, p.points))
            .collect::<Vec<_>>(),
        vec![
            (day("2026-02-10"), Some(60), 1),
            (day("2026-02-20"), Some(71), 1),
        ]
    );
    let block = crate::report::render_baseline_block(&crate::report::FrozenBaseline {
        provenance: crate::report::Provenance {
            engine: "SGLang".into(),
            old_image: CURRENT.into(),
            new_image: "lmsysorg/sglang:v0.5.10-rocm700-mi35x".into(),
            old_tag: None,
            new_tag: "v0.5.10-rocm700-mi35x".into(),
            digest: String::new(),
            revision: None,
            clock: None,
            upstream: None,
            not_release_reason: None,
            scope: None,
            versions: None,
        },
        baseline: b,
    });
    assert!(
        block.contains(
            "published 2026-02-10 by run `60` (1 point), 2026-02-20 by run `71` (1 point)"
        ),
        "{block}"
    );
}

/// A source whose display names are a table, recording what it is asked.
struct Names {
    names: BTreeMap<String, String>,
    asked: std::sync::Mutex<Vec<String>>,
}

impl Names {
    fn of(pairs: &[(&str, &str)]) -> Self {
        Self {
            names: pairs
                .iter()
                .map(|(p, n)| ((*p).to_owned(), (*n).to_owned()))
                .collect(),
            asked: Default::default(),
        }
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().expect("asked").clone()
    }
}

#[async_trait]
impl BaselineSource for Names {
    async fn benchmarks(&self, model: &str, date: NaiveDate) -> Result<Fetched, SourceError> {
        self.asked
            .lock()
            .expect("asked")
            .push(format!("benchmarks {model}"));
        Ok(Fetched {
            url: benchmarks_url("https://api.example", model, date),
            body: "[]".into(),
        })
    }
    async fn workflow_info(&self, _: NaiveDate) -> Result<Fetched, SourceError> {
        unreachable!("not asked by the freeze")
    }
    async fn display_name(&self, prefix: &str) -> Result<Option<String>, SourceError> {
        self.asked
            .lock()
            .expect("asked")
            .push(format!("name {prefix}"));
        Ok(self.names.get(prefix).cloned())
    }
}

fn demo_family() -> (klaud_planner::repo::Repository, String) {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/demo"));
    let repository = klaud_planner::repo::Repository::open(root).expect("demo repository");
    (
        repository,
        "configs/nvidia-master.yaml:demo-fp4-b200-sglang".into(),
    )
}

#[tokio::test]
async fn an_unknown_model_prefix_is_its_own_readiness_block_naming_what_to_set() {
    let (repository, id) = demo_family();
    let family = repository.family(&id).expect("family");
    let source = Names::of(&[("dsr1", "DeepSeek-R1-0528")]);
    let b = baseline_of(
        &source,
        family,
        &BTreeMap::new(),
        CURRENT,
        day("2026-02-27"),
    )
    .await;
    let gap = readiness_gap(&b).expect("blocked");
    assert!(gap.starts_with(BASELINE_MODEL_UNKNOWN), "{gap}");
    assert!(
        gap.contains(r#"set [lifecycle.model_names] "demo" = "<display name>""#),
        "{gap}"
    );
    assert_eq!(b.unknown_model.as_deref(), Some("demo"));
    assert!(!b.points.is_empty());
    assert!(b.points.iter().all(|p| p.metrics().is_none()));
    // Nothing is asked under a guessed name.
    assert_eq!(source.asked(), vec!["name demo"]);
}

#[tokio::test]
async fn the_found_name_is_asked_and_an_override_wins() {
    let (repository, id) = demo_family();
    let family = repository.family(&id).expect("family");
    let source = Names::of(&[("demo", "Klaud-Demo-Bench")]);
    let b = baseline_of(
        &source,
        family,
        &BTreeMap::new(),
        CURRENT,
        day("2026-02-27"),
    )
    .await;
    assert_eq!(b.model, "Klaud-Demo-Bench");
    assert_eq!(
        source.asked(),
        vec!["name demo", "benchmarks Klaud-Demo-Bench"]
    );

    let source = Names::of(&[("demo", "Klaud-Demo-Bench")]);
    let overrides = BTreeMap::from([("demo".to_owned(), "Demo-Override".to_owned())]);
    let b = baseline_of(&source, family, &overrides, CURRENT, day("2026-02-27")).await;
    assert_eq!(b.model, "Demo-Override");
    assert_eq!(source.asked(), vec!["benchmarks Demo-Override"]);
    // Rows were found for no point: an ordinary unavailable baseline.
    assert!(
        readiness_gap(&b).is_some_and(|g| g.starts_with(BASELINE_UNAVAILABLE)),
        "{b:#?}"
    );
}

#[test]
fn runner_labels_map_to_api_hardware() {
    assert_eq!(hardware_of_runner("cluster:b200-dgxc"), "b200");
    assert_eq!(hardware_of_runner("h100-multinode"), "h100");
    assert_eq!(hardware_of_runner("mi355x"), "mi355x");
    assert_eq!(hardware_of_runner("b200-dsv4"), "b200");
}

#[test]
fn urls_encode_the_model() {
    let date = NaiveDate::from_ymd_opt(2026, 9, 9).expect("date");
    assert_eq!(
        benchmarks_url(
            "https://inferencex.semianalysis.com/",
            "Qwen-3.5-397B-A17B",
            date
        ),
        "https://inferencex.semianalysis.com/api/v1/benchmarks?model=Qwen-3.5-397B-A17B&date=2026-09-09"
    );
    assert!(benchmarks_url("h", "a b&c", date).contains("model=a+b%26c&"));
    assert!(!benchmarks_url("h", "m", date).contains("exact"));
    assert_eq!(
        workflow_info_url("h", date),
        "h/api/v1/workflow-info?date=2026-09-09"
    );
}
