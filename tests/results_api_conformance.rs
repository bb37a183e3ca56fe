//! The sandbox's results API against InferenceX-app's own query code: for
//! many seeded random publication histories, the sandbox's book is
//! exported as the app's table dumps, the app's JSON provider
//! (`packages/db/src/json-provider.ts` of the fixture checkout, run by
//! `tsx` in a separate process) answers `getLatestBenchmarks` over them, and
//! the sandbox answers the same questions over HTTP; every row must agree.
//!
//! The app's code is GPL test data: it is run from
//! `../shared/fixtures/inferencex-app`, never copied. `tsx` is found at
//! `KLAUD_TSX` (set by `.ci/run`), else where `.ci/run` installs it, else
//! on `PATH`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use chrono::{Days, NaiveDate};
use futures::StreamExt;
use klaud_sandbox::ci::{Publication, Published, RunOf, Sweep, baseline_router_with};
use klaud_sandbox::github::Permission;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support;

const REPO: &str = "conformance/benchmarks";
/// The tsx version `.ci/run` installs.
const TSX_VERSION: &str = "4.23.15";
const HISTORIES: u64 = 200;

/// Families of several models: two that share one config (their rows
/// collide per point, as two such families do in the app), a disaggregated
/// multi-node one, an AgentX one, and a prefix the API has no name for.
const MASTER: &str = r#"
dsr1-fp8-h200-sglang:
  image: lmsysorg/sglang:v0.5.9-cu129
  model: deepseek-ai/DeepSeek-R1-0528
  model-prefix: dsr1
  runner: h200
  precision: fp8
  framework: sglang
  multinode: false
  scenarios:
    fixed-seq-len:
    - isl: 1024
      osl: 1024
      search-space:
      - { tp: 8, conc-start: 4, conc-end: 32 }
    - isl: 8192
      osl: 1024
      search-space:
      - { tp: 8, conc-start: 4, conc-end: 16 }
dsr1-fp8-h200-sglang-twin:
  image: lmsysorg/sglang:v0.5.10-cu129
  model: deepseek-ai/DeepSeek-R1-0528
  model-prefix: dsr1
  runner: h200
  precision: fp8
  framework: sglang
  multinode: false
  scenarios:
    fixed-seq-len:
    - isl: 1024
      osl: 1024
      search-space:
      - { tp: 8, conc-start: 8, conc-end: 64 }
dsr1-fp4-b200-trt:
  image: nvcr.io#nvidia/tensorrt-llm/release:1.3.0rc14
  model: nvidia/DeepSeek-R1-0528-FP4-V2
  model-prefix: dsr1
  runner: b200
  precision: fp4
  framework: trt
  multinode: false
  scenarios:
    fixed-seq-len:
    - isl: 1024
      osl: 1024
      search-space:
      - { tp: 4, conc-start: 4, conc-end: 16 }
      - { tp: 8, ep: 8, dp-attn: true, spec-decoding: mtp, conc-start: 4, conc-end: 16 }
qwen3.5-fp8-mi355x-vllm:
  image: vllm/vllm-openai-rocm:v0.20.0
  model: Qwen/Qwen3.5-397B-A17B-FP8
  model-prefix: qwen3.5
  runner: mi355x
  precision: fp8
  framework: vllm
  multinode: false
  scenarios:
    fixed-seq-len:
    - isl: 8192
      osl: 1024
      search-space:
      - { tp: 8, conc-start: 4, conc-end: 64 }
dsv4-fp4-gb200-dynamo-vllm-disagg:
  image: vllm/vllm-openai:v0.25.0
  model: deepseek-ai/DeepSeek-V4-Pro
  model-prefix: dsv4
  runner: gb200
  precision: fp4
  framework: dynamo-vllm
  multinode: true
  disagg: true
  scenarios:
    fixed-seq-len:
    - isl: 8192
      osl: 1024
      search-space:
      - conc-list: [32, 64]
        prefill: { num-worker: 1, tp: 8, ep: 8, dp-attn: true }
        decode: { num-worker: 1, tp: 8, ep: 8, dp-attn: true }
      - conc-list: [64, 128]
        prefill: { num-worker: 2, tp: 8, ep: 8, dp-attn: true }
        decode: { num-worker: 1, tp: 8, ep: 8, dp-attn: true }
kimik3-fp4-b300-vllm-agentic:
  image: vllm/vllm-openai:v0.25.0
  model: moonshotai/Kimi-K3
  model-prefix: kimik3
  runner: b300
  precision: fp4
  framework: vllm
  multinode: false
  scenarios:
    agentic-coding:
    - search-space:
      - { tp: 4, conc-list: [1, 4, 8] }
demo-fp4-b200-sglang:
  image: lmsysorg/sglang:v0.5.16-cu130
  model: demo/Demo-R1-FP4
  model-prefix: demo
  runner: b200
  precision: fp4
  framework: sglang
  multinode: false
  scenarios:
    fixed-seq-len:
    - isl: 8192
      osl: 1024
      search-space:
      - { tp: 4, conc-start: 1, conc-end: 8 }
glm5.2-fp8-h200-sglang:
  image: lmsysorg/sglang:v0.5.9-cu129
  model: zai-org/GLM-5.2-FP8
  model-prefix: glm5.2
  runner: h200
  precision: fp8
  framework: sglang
  multinode: false
  scenarios:
    fixed-seq-len:
    - isl: 1024
      osl: 1024
      search-space:
      - { tp: 8, conc-start: 4, conc-end: 8 }
"#;

/// Every key of [`MASTER`] with its concurrencies.
fn keys() -> Vec<(&'static str, Vec<u64>)> {
    vec![
        ("dsr1-fp8-h200-sglang", vec![4, 8, 16, 32]),
        ("dsr1-fp8-h200-sglang-twin", vec![8, 16, 32, 64]),
        ("dsr1-fp4-b200-trt", vec![4, 8, 16]),
        ("qwen3.5-fp8-mi355x-vllm", vec![4, 8, 16, 32, 64]),
        ("dsv4-fp4-gb200-dynamo-vllm-disagg", vec![32, 64, 128]),
        ("kimik3-fp4-b300-vllm-agentic", vec![1, 4, 8]),
        ("demo-fp4-b200-sglang", vec![1, 2, 4, 8]),
        ("glm5.2-fp8-h200-sglang", vec![4, 8]),
    ]
}

/// The JSON provider of the fixture checkout, or `None` (skipped loudly;
/// a failure on CI).
fn provider() -> Option<PathBuf> {
    let app = support::inferencex_app()?;
    Some(app.join("packages/db/src/json-provider.ts"))
}

/// `tsx`, or `None` (skipped loudly; a failure on CI).
fn tsx() -> Option<PathBuf> {
    let tmp = std::env::var_os("TMPDIR").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    let candidates = [
        std::env::var_os("KLAUD_TSX").map(PathBuf::from),
        Some(tmp.join(format!("klaud-ci-tsx-{TSX_VERSION}/node_modules/.bin/tsx"))),
        Some(PathBuf::from("tsx")),
    ];
    for c in candidates.into_iter().flatten() {
        let runs = std::process::Command::new(&c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if runs {
            return Some(c);
        }
    }
    support::missing_tool(&format!(
        "tsx (npm install --prefix <dir> tsx@{TSX_VERSION}, then KLAUD_TSX=<dir>/node_modules/.bin/tsx)"
    ));
    None
}

fn day(d: NaiveDate) -> String {
    d.format("%Y-%m-%d").to_string()
}

/// One history's questions: (display name, DB key, date, exact).
type Question = (String, String, Option<NaiveDate>, bool);

/// Publishes a random history into `published`; returns the days it
/// published on, and the fortnight before today.
fn random_history(seed: u64, published: &Published) -> (Vec<NaiveDate>, Vec<NaiveDate>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let today = NaiveDate::from_ymd_opt(2026, 9, 21).expect("a day") + Days::new(seed % 5);
    published.set_today(today);
    let ago = |rng: &mut StdRng, max: u64| today - Days::new(rng.random_range(0..=max));
    let keys = keys();
    let mut runs: Vec<u64> = Vec::new();
    let mut touched = Vec::new();
    for (key, concs) in &keys {
        // Several keys often share a seeded day: ties between runs.
        let seeded = ago(&mut rng, 6) - Days::new(4);
        touched.push(seeded);
        published.set_seeded_on(key, seeded);
        runs.push(published.seeded_run(key));
        match rng.random_range(0..12) {
            0 => published.withhold_key(key),
            1 => published.withhold_points(key, &[concs[rng.random_range(0..concs.len())]]),
            _ => {}
        }
    }
    let images = [
        None,
        Some("lmsysorg/sglang:v0.5.11-cu130"),
        Some("vllm/vllm-openai:v0.26.0"),
    ];
    for _ in 0..rng.random_range(2..10) {
        let (key, concs) = &keys[rng.random_range(0..keys.len())];
        let subset = |rng: &mut StdRng, p: f64| -> Vec<u64> {
            concs
                .iter()
                .copied()
                .filter(|_| rng.random_bool(p))
                .collect()
        };
        let conc = rng.random_bool(0.5).then(|| subset(&mut rng, 0.6));
        let failed = if rng.random_bool(0.3) {
            subset(&mut rng, 0.4)
        } else {
            Vec::new()
        };
        let run = match rng.random_range(0..10) {
            0..=1 => RunOf::Attempt(runs[rng.random_range(0..runs.len())]),
            2..=3 => RunOf::Join(runs[rng.random_range(0..runs.len())]),
            _ => RunOf::New,
        };
        let date = match run {
            RunOf::New => Some(ago(&mut rng, 9)),
            // Now and then a re-run attempt recorded on a later day.
            _ => rng.random_bool(0.2).then(|| ago(&mut rng, 3)),
        };
        touched.extend(date);
        let id = published.publish_run(Publication {
            sweep: Sweep {
                key: (*key).to_owned(),
                conc,
                image: images[rng.random_range(0..images.len())].map(str::to_owned),
                date,
                throughput: rng.random_bool(0.3).then(|| rng.random_range(0.8..1.2)),
            },
            failed,
            run,
        });
        runs.push(id);
    }
    (touched, (0..=14).map(|d| today - Days::new(d)).collect())
}

/// A row as comparable text: numbers as `f64` (JavaScript writes `1` where
/// Rust writes `1.0`), objects with sorted keys.
fn canonical(v: &Value) -> Value {
    match v {
        Value::Number(n) => json!(n.as_f64()),
        Value::Array(a) => Value::Array(a.iter().map(canonical).collect()),
        Value::Object(o) => {
            Value::Object(o.iter().map(|(k, v)| (k.clone(), canonical(v))).collect())
        }
        other => other.clone(),
    }
}

fn multiset(rows: &Value) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for r in rows.as_array().map(Vec::as_slice).unwrap_or_default() {
        *out.entry(canonical(r).to_string()).or_default() += 1;
    }
    out
}

/// The rows one side has more of than the other.
fn surplus(a: &BTreeMap<String, usize>, b: &BTreeMap<String, usize>) -> Vec<String> {
    a.iter()
        .filter(|(row, n)| b.get(*row).copied().unwrap_or(0) < **n)
        .map(|(row, _)| row.clone())
        .collect()
}

struct History {
    seed: u64,
    dir: PathBuf,
    questions: Vec<Question>,
    sandbox: Vec<Value>,
}

async fn serve(
    published: Published,
    state: klaud_sandbox::github::GithubState,
) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    let app = baseline_router_with(state, REPO, published);
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_answers_every_random_history_as_the_apps_own_query_code() {
    let (Some(provider), Some(tsx)) = (provider(), tsx()) else {
        return;
    };
    let started = Instant::now();
    let (state, _) = support::GithubOnly::new(REPO)
        .user("maintainer", None, Some(Permission::Write))
        .files(
            "maintainer",
            "masters",
            &[("configs/nvidia-master.yaml", MASTER.as_bytes())],
        )
        .state()
        .await;
    let work = tempfile::tempdir().expect("temp dir");
    // The gzip-decoding client public clients use; it says what it accepts.
    let http = klaud_http::http_client_builder()
        .user_agent("klaud-conformance")
        .build()
        .expect("client");
    // Every name whose prefix has families, and one whose prefix has none.
    let names: BTreeMap<String, String> = Published::default()
        .model_names()
        .into_iter()
        .filter(|(prefix, _)| {
            prefix == "gptoss120b"
                || keys()
                    .iter()
                    .any(|(k, _)| k.starts_with(&format!("{prefix}-")))
        })
        .collect();
    assert_eq!(names.len(), 6, "{names:?}");
    let mut histories = Vec::new();
    for seed in 0..HISTORIES {
        let published = Published::default();
        let (touched, days) = random_history(seed, &published);
        let (url, task) = serve(published.clone(), state.clone()).await;
        let dump: Value = http
            .get(format!("{url}/_control/dump"))
            .send()
            .await
            .expect("dump")
            .json()
            .await
            .expect("dump JSON");
        let dir = work.path().join(format!("h{seed}"));
        std::fs::create_dir_all(&dir).expect("dump dir");
        for (file, rows) in dump.as_object().expect("files") {
            std::fs::write(dir.join(file), rows.to_string()).expect("dump file");
        }
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
        let mut questions: Vec<Question> = Vec::new();
        for (prefix, name) in &names {
            questions.push((name.clone(), prefix.clone(), None, false));
            for exact in [false, false, true, true] {
                // Mostly a day something was published, where answers differ.
                let d = if rng.random_bool(0.7) {
                    touched[rng.random_range(0..touched.len())]
                } else {
                    days[rng.random_range(0..days.len())]
                };
                questions.push((name.clone(), prefix.clone(), Some(d), exact));
            }
        }
        let asks = questions.iter().map(|(name, _, date, exact)| {
            let mut q = vec![("model", name.clone())];
            if let Some(d) = date {
                q.push(("date", day(*d)));
            }
            if *exact {
                q.push(("exact", "true".into()));
            }
            let (http, url) = (&http, &url);
            async move {
                let resp = http
                    .get(format!("{url}/api/v1/benchmarks"))
                    .query(&q)
                    .send()
                    .await
                    .expect("benchmarks");
                assert_eq!(resp.status(), StatusCode::OK, "seed {seed}: {q:?}");
                resp.json::<Value>().await.expect("rows")
            }
        });
        // In order, a few at a time.
        let sandbox: Vec<Value> = futures::stream::iter(asks).buffered(8).collect().await;
        // A prefix without a name is the app's 400, whatever its rows.
        let resp = http
            .get(format!("{url}/api/v1/benchmarks?model=GLM-5.2"))
            .send()
            .await
            .expect("unknown");
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        task.abort();
        histories.push(History {
            seed,
            dir,
            questions,
            sandbox,
        });
    }
    let asked = started.elapsed();

    let batch: Vec<Value> = histories
        .iter()
        .map(|h| {
            json!({
                "dir": h.dir,
                "queries": h.questions.iter()
                    .map(|(_, key, date, exact)| json!([key, date.map(day), exact]))
                    .collect::<Vec<_>>(),
            })
        })
        .collect();
    let batch_path = work.path().join("batch.json");
    let answers_path = work.path().join("answers.json");
    std::fs::write(&batch_path, Value::Array(batch).to_string()).expect("batch");
    let driver = Path::new(support::REPO_ROOT).join("tests/support/results_conformance.mts");
    let out = std::process::Command::new(&tsx)
        .arg(&driver)
        .arg(&provider)
        .arg(&batch_path)
        .arg(&answers_path)
        .output()
        .expect("tsx runs");
    assert!(
        out.status.success(),
        "the app's provider failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: Value =
        serde_json::from_slice(&std::fs::read(&answers_path).expect("answers")).expect("JSON");

    let mut compared = 0;
    let mut rows = 0;
    let mut disagreements = Vec::new();
    for (h, app) in histories.iter().zip(answers.as_array().expect("histories")) {
        for (i, (name, key, date, exact)) in h.questions.iter().enumerate() {
            let app = multiset(&app[i]);
            let ours = multiset(&h.sandbox[i]);
            compared += 1;
            rows += ours.values().sum::<usize>();
            if app != ours {
                disagreements.push(format!(
                    "history seed {} (dump {}), model={name} ({key}) date={:?} exact={exact}:\n  only the app: {:#?}\n  only the sandbox: {:#?}",
                    h.seed,
                    h.dir.display(),
                    date.map(day),
                    surplus(&app, &ours),
                    surplus(&ours, &app),
                ));
            }
        }
    }
    eprintln!(
        "results API conformance: {} histories, {compared} queries, {rows} rows compared in {:.1?} (sandbox {:.1?})",
        histories.len(),
        started.elapsed(),
        asked,
    );
    if !disagreements.is_empty() {
        // Keep the dumps for a look.
        let kept = work.keep();
        panic!(
            "{} of {compared} answers differ from the app's (dumps kept in {}):\n{}",
            disagreements.len(),
            kept.display(),
            disagreements
                .iter()
                .take(5)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    assert!(rows > 0, "the histories published nothing");
}

/// The demo repository behind the API, a client that decodes nothing and
/// sends no `Accept-Encoding`, and the API's address.
async fn demo_api(published: Published) -> (reqwest::Client, String, tokio::task::JoinHandle<()>) {
    let (state, _) = support::GithubOnly::new(REPO)
        .user("maintainer", None, Some(Permission::Write))
        .seed_dir(
            &Path::new(support::REPO_ROOT).join("configs/demo"),
            "maintainer",
        )
        .state()
        .await;
    let (url, task) = serve(published, state).await;
    let raw = klaud_http::http_client_builder()
        .user_agent("klaud-test")
        .no_gzip()
        .build()
        .expect("client");
    (raw, url, task)
}

/// Status, `Content-Encoding` and the body decoded from gzip when so marked.
async fn fetch(http: &reqwest::Client, url: String) -> (StatusCode, Option<String>, Value) {
    use std::io::Read;
    let resp = http.get(url).send().await.expect("answer");
    let status = resp.status();
    let encoding = resp
        .headers()
        .get(reqwest::header::CONTENT_ENCODING)
        .map(|v| v.to_str().expect("text").to_owned());
    let bytes = resp.bytes().await.expect("body");
    let body = if encoding.as_deref() == Some("gzip") {
        assert_eq!(bytes.get(..2), Some(&[0x1f, 0x8b][..]), "gzip magic");
        let mut text = Vec::new();
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_end(&mut text)
            .expect("gzip");
        text
    } else {
        bytes.to_vec()
    };
    (
        status,
        encoding,
        serde_json::from_slice(&body).expect("JSON"),
    )
}

#[tokio::test]
async fn every_successful_answer_is_gzip_whatever_the_client_accepts_and_errors_are_plain_json() {
    let published = Published::default();
    let today = published.today();
    let (http, api, _task) = demo_api(published.clone()).await;
    for path in [
        "/api/v1/benchmarks?model=Klaud-Demo-Bench".to_owned(),
        format!("/api/v1/benchmarks?model=Klaud-Demo-Bench&date={today}&exact=true"),
        "/api/v1/evaluations".to_owned(),
        format!("/api/v1/workflow-info?date={today}"),
        "/api/openapi.json".to_owned(),
    ] {
        let (s, encoding, _) = fetch(&http, format!("{api}{path}")).await;
        assert_eq!(s, StatusCode::OK, "{path}");
        assert_eq!(encoding.as_deref(), Some("gzip"), "{path}");
    }
    let (s, encoding, body) = fetch(&http, format!("{api}/api/v1/benchmarks?model=Demo-R1")).await;
    assert_eq!((s, encoding), (StatusCode::BAD_REQUEST, None));
    assert_eq!(body, json!({"error": "Unknown model"}));
    let (s, encoding, _) = fetch(&http, format!("{api}/api/v1/workflow-info?date=5")).await;
    assert_eq!((s, encoding), (StatusCode::BAD_REQUEST, None));
    // The switch, for a client that cannot decode yet.
    published.set_gzip(false);
    let (s, encoding, rows) = fetch(
        &http,
        format!("{api}/api/v1/benchmarks?model=Klaud-Demo-Bench"),
    )
    .await;
    assert_eq!((s, encoding), (StatusCode::OK, None));
    assert!(!rows.as_array().expect("rows").is_empty());
}

#[tokio::test]
async fn openapi_lists_the_display_names_and_the_route_knows_exactly_those_it_is_told() {
    let published = Published::default();
    let (http, api, _task) = demo_api(published.clone()).await;
    let enum_of = |doc: &Value| -> Vec<String> {
        let params = doc["paths"]["/api/v1/benchmarks"]["get"]["parameters"]
            .as_array()
            .expect("parameters");
        let model = params.iter().find(|p| p["name"] == "model").expect("model");
        assert_eq!(model["in"], "query");
        serde_json::from_value(model["schema"]["enum"].clone()).expect("names")
    };
    let (_, _, doc) = fetch(&http, format!("{api}/api/openapi.json")).await;
    assert!(doc["openapi"].as_str().expect("version").starts_with("3."));
    let names = enum_of(&doc);
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    for n in [
        "DeepSeek-R1-0528",
        "gpt-oss-120b",
        "Llama-3.3-70B-Instruct-FP8",
        "Qwen-3.5-397B-A17B",
        "Kimi-K2.5",
        "MiniMax-M2.5",
        "GLM-5",
        "DeepSeek-V4-Pro",
        "Kimi-K3",
        "Klaud-Demo-Bench",
    ] {
        assert!(names.contains(&n.to_owned()), "{n}: {names:?}");
    }
    assert_eq!(names.len(), 10, "{names:?}");

    let bench = |name: &str| format!("{api}/api/v1/benchmarks?model={name}");
    let control = |body: Value| {
        let http = http.clone();
        let api = api.clone();
        async move {
            let r = http
                .post(format!("{api}/_control/models"))
                .json(&body)
                .send()
                .await
                .expect("control");
            assert_eq!(r.status(), StatusCode::OK, "{body}");
        }
    };
    // Renamed: the old name is unknown, the new one answers the demo's rows.
    control(json!({"prefix": "demo", "name": "Demo-Renamed"})).await;
    assert_eq!(
        fetch(&http, bench("Klaud-Demo-Bench")).await.0,
        StatusCode::BAD_REQUEST
    );
    let (s, _, rows) = fetch(&http, bench("Demo-Renamed")).await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        rows.as_array()
            .expect("rows")
            .iter()
            .all(|r| r["model"] == "demo")
    );
    // Known to the route, left out of the description.
    control(json!({"prefix": "demo", "name": "Demo-Quiet", "openapi": false})).await;
    assert_eq!(fetch(&http, bench("Demo-Quiet")).await.0, StatusCode::OK);
    let (_, _, doc) = fetch(&http, format!("{api}/api/openapi.json")).await;
    assert!(
        !enum_of(&doc).iter().any(|n| n.starts_with("Demo-")),
        "{doc}"
    );
    // A stale description: the route forgot the name, the enum still lists it.
    control(json!({"prefix": "demo", "name": "Klaud-Demo-Bench"})).await;
    control(json!({"prefix": "demo", "name": null, "openapi": true})).await;
    assert_eq!(
        fetch(&http, bench("Klaud-Demo-Bench")).await.0,
        StatusCode::BAD_REQUEST
    );
    let (_, _, doc) = fetch(&http, format!("{api}/api/openapi.json")).await;
    assert!(enum_of(&doc).contains(&"Klaud-Demo-Bench".to_owned()));
    // A hostile body is refused, naming the field.
    let r = http
        .post(format!("{api}/_control/models"))
        .json(&json!({"prefix": "", "name": "x"}))
        .send()
        .await
        .expect("control");
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.text().await.expect("text").contains("`prefix`"));
    // The same from Rust.
    published.name_model("dsv4", None);
    assert!(
        !published
            .openapi_enum()
            .contains(&"DeepSeek-V4-Pro".to_owned())
    );
    published.name_model("glm5.2", Some("GLM-5.2"));
    assert_eq!(
        published.model_names().get("glm5.2").map(String::as_str),
        Some("GLM-5.2")
    );
}

#[tokio::test]
async fn as_of_a_day_each_point_keeps_its_newest_row_past_failed_points_and_superseded_attempts() {
    const KEY: &str = "demo-fp4-b200-sglang";
    let published = Published::default();
    let today = NaiveDate::from_ymd_opt(2026, 9, 21).expect("a day");
    published.set_today(today);
    let seeded = today - Days::new(5);
    published.set_seeded_on(KEY, seeded);
    let (http, api, _task) = demo_api(published.clone()).await;
    let post = |body: Value| {
        let http = http.clone();
        let api = api.clone();
        async move {
            let r = http
                .post(format!("{api}/_control/published"))
                .json(&body)
                .send()
                .await
                .expect("publish");
            assert_eq!(r.status(), StatusCode::OK, "{body}");
            let v: Value = r.json().await.expect("JSON");
            v["run_id"].as_u64().expect("run id")
        }
    };
    // Three days ago: a partial re-sweep of c1 and c2 with another image,
    // in which c2 failed.
    let resweep = post(
        json!({"key": KEY, "conc": [1, 2], "image": "lmsysorg/sglang:v0.5.17-cu130",
                              "failed": [2], "date": day(today - Days::new(3))}),
    )
    .await;
    // Yesterday: a run of c4, then a second attempt of it that measured c8 only.
    let run = post(json!({"key": KEY, "conc": [4], "date": day(today - Days::new(1))})).await;
    let again = post(json!({"key": KEY, "conc": [8], "attempt_of": run})).await;
    assert_eq!(again, run);
    let sglang = |rows: &Value| -> BTreeMap<u64, (String, String, String)> {
        rows.as_array()
            .expect("rows")
            .iter()
            .filter(|r| r["hardware"] == "b200" && r["framework"] == "sglang")
            .map(|r| {
                let url = r["run_url"].as_str().expect("url");
                let tail = url.rsplit("/runs/").next().expect("run").to_owned();
                (
                    r["conc"].as_u64().expect("conc"),
                    (
                        r["date"].as_str().expect("date").to_owned(),
                        tail,
                        r["image"].as_str().expect("image").to_owned(),
                    ),
                )
            })
            .collect()
    };
    let seeded_run = published.seeded_run(KEY);
    let old = "lmsysorg/sglang:v0.5.16-cu130".to_owned();
    let from_seed = (day(seeded), format!("{seeded_run}/attempts/1"), old.clone());
    let (s, _, rows) = fetch(
        &http,
        format!(
            "{api}/api/v1/benchmarks?model=Klaud-Demo-Bench&date={}",
            day(today)
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let rows = sglang(&rows);
    assert_eq!(rows.len(), 6, "{rows:?}");
    assert_eq!(
        rows[&1],
        (
            day(today - Days::new(3)),
            format!("{resweep}/attempts/1"),
            "lmsysorg/sglang:v0.5.17-cu130".into()
        )
    );
    // c2 failed in the re-sweep: its older row stands.
    assert_eq!(rows[&2], from_seed);
    // Attempt 2 superseded attempt 1: its c4 no longer counts.
    assert_eq!(rows[&4], from_seed);
    assert_eq!(
        rows[&8],
        (
            day(today - Days::new(1)),
            format!("{run}/attempts/2"),
            old.clone()
        )
    );
    for c in [16, 32] {
        assert_eq!(rows[&c], from_seed);
    }
    // As of the re-sweep's eve everything is the seeded run's; exactly on
    // its day only the point it measured without error.
    let eve = day(today - Days::new(4));
    let (_, _, rows) = fetch(
        &http,
        format!("{api}/api/v1/benchmarks?model=Klaud-Demo-Bench&date={eve}"),
    )
    .await;
    assert!(sglang(&rows).values().all(|r| *r == from_seed));
    let on = day(today - Days::new(3));
    let (_, _, rows) = fetch(
        &http,
        format!("{api}/api/v1/benchmarks?model=Klaud-Demo-Bench&date={on}&exact=true"),
    )
    .await;
    assert_eq!(sglang(&rows).keys().copied().collect::<Vec<_>>(), [1]);
}
