//! The results API client against a local server that answers as
//! InferenceX-app does: exact display names listed in `/api/openapi.json`,
//! 400 `{"error":"Unknown model"}` for any other name, and every answer
//! compressed (`cachedJson` sets `Content-Encoding: gzip` whatever the
//! request asked).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use chrono::NaiveDate;
use klaud_lifecycle::baseline::BaselineSource;
use klaud_service::HttpBaselineSource;
use klaud_store::Store;

#[derive(Default)]
struct App {
    /// Display name → model prefix (the app's `DISPLAY_MODEL_TO_DB`).
    names: BTreeMap<String, String>,
    /// Names the OpenAPI description lists (may differ from `names`).
    listed: Vec<String>,
    /// Every path and query asked, and the request's Accept-Encoding.
    asked: Vec<(String, Option<String>)>,
    /// Answer the benchmarks route with this many zero bytes, compressed.
    bomb: Option<usize>,
}

type Shared = Arc<Mutex<App>>;

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(bytes).expect("gzip");
    enc.finish().expect("gzip")
}

fn cached_json(body: &[u8]) -> Response {
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CONTENT_ENCODING, "gzip"),
        ],
        gzip(body),
    )
        .into_response()
}

fn note(app: &Shared, what: String, headers: &HeaderMap) {
    let encoding = headers
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    app.lock().expect("app").asked.push((what, encoding));
}

async fn openapi(State(app): State<Shared>, headers: HeaderMap) -> Response {
    note(&app, "/api/openapi.json".into(), &headers);
    let listed = app.lock().expect("app").listed.clone();
    let doc = serde_json::json!({
        "openapi": "3.1.0",
        "paths": {"/api/v1/benchmarks": {"get": {"parameters": [
            {"name": "date", "in": "query", "schema": {"type": "string"}},
            {"name": "model", "in": "query", "required": true,
             "schema": {"type": "string", "enum": listed}}
        ]}}}
    });
    cached_json(doc.to_string().as_bytes())
}

async fn benchmarks(
    State(app): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    let model = q.get("model").cloned().unwrap_or_default();
    note(
        &app,
        format!(
            "/api/v1/benchmarks?model={model}{}",
            q.get("date")
                .map(|d| format!("&date={d}"))
                .unwrap_or_default()
        ),
        &headers,
    );
    let (prefix, bomb) = {
        let app = app.lock().expect("app");
        (app.names.get(&model).cloned(), app.bomb)
    };
    if let Some(n) = bomb {
        return cached_json(&vec![b' '; n]);
    }
    let Some(prefix) = prefix else {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(serde_json::json!({"error": "Unknown model"})),
        )
            .into_response();
    };
    let rows = serde_json::json!([{
        "hardware": "b200", "framework": "sglang", "model": prefix, "precision": "fp4",
        "conc": 4, "isl": 1024, "osl": 1024, "image": null, "date": "2026-09-01",
        "metrics": {"tput_per_gpu": 1.0, "output_tput_per_gpu": 1.0, "mean_ttft": 0.1, "mean_tpot": 0.01},
        "run_url": "https://github.com/o/r/actions/runs/7/attempts/1"
    }]);
    cached_json(rows.to_string().as_bytes())
}

async fn serve(app: Shared) -> String {
    let router = Router::new()
        .route("/api/openapi.json", get(openapi))
        .route("/api/v1/benchmarks", get(benchmarks))
        .with_state(app);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}")
}

/// The app's table, with a name its OpenAPI description lists that no
/// model path spells (the demo's kind).
fn app() -> Shared {
    let names: BTreeMap<String, String> = [
        ("DeepSeek-R1-0528", "dsr1"),
        ("Qwen-3.5-397B-A17B", "qwen3.5"),
        ("Klaud-Demo-Bench", "demo"),
    ]
    .into_iter()
    .map(|(n, p)| (n.to_owned(), p.to_owned()))
    .collect();
    Arc::new(Mutex::new(App {
        listed: names.keys().cloned().collect(),
        names,
        ..App::default()
    }))
}

fn day() -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 9, 9).expect("day")
}

#[tokio::test]
async fn compressed_answers_are_read_and_gzip_is_asked_for() {
    let app = app();
    let base = serve(app.clone()).await;
    let source = HttpBaselineSource::new(&base).expect("client");
    let fetched = source
        .benchmarks("DeepSeek-R1-0528", day())
        .await
        .expect("a gzip answer is decoded");
    let rows: serde_json::Value = serde_json::from_str(&fetched.body).expect("JSON");
    assert_eq!(rows[0]["model"], "dsr1");
    let asked = app.lock().expect("app").asked.clone();
    assert!(
        asked
            .iter()
            .all(|(_, enc)| enc.as_deref().is_some_and(|e| e.contains("gzip"))),
        "{asked:?}"
    );
}

#[tokio::test]
async fn a_gzip_bomb_is_refused_at_the_decoded_cap() {
    let app = app();
    // 8 MiB of spaces compress to about 8 KiB.
    app.lock().expect("app").bomb = Some(8 * 1024 * 1024);
    let base = serve(app).await;
    let source = HttpBaselineSource::new(&base)
        .expect("client")
        .with_max_body(1024 * 1024);
    let err = source
        .benchmarks("DeepSeek-R1-0528", day())
        .await
        .expect_err("refused");
    assert!(
        err.reason
            .contains("answer is larger than 1048576 bytes (decoded)"),
        "{err}"
    );
    assert!(err.url.contains("/api/v1/benchmarks?model="), "{err}");
}

#[tokio::test]
async fn display_names_come_from_the_openapi_enum_and_the_rows_they_answer() {
    let app = app();
    let base = serve(app.clone()).await;
    let source = HttpBaselineSource::new(&base).expect("client");
    // `demo` spells no name: only the description lists it.
    assert_eq!(
        source.display_name("demo").await.expect("asked").as_deref(),
        Some("Klaud-Demo-Bench")
    );
    assert_eq!(
        source
            .display_name("qwen3.5")
            .await
            .expect("known")
            .as_deref(),
        Some("Qwen-3.5-397B-A17B")
    );
    // One description and one request per name, then nothing more: the
    // second prefix was answered by the first refresh, and an unknown
    // prefix does not ask again within the hour.
    assert_eq!(
        source.display_name("gptoss120b").await.expect("asked"),
        None
    );
    let asked: Vec<String> = app
        .lock()
        .expect("app")
        .asked
        .iter()
        .map(|(q, _)| q.clone())
        .collect();
    assert_eq!(
        asked,
        vec![
            "/api/openapi.json",
            "/api/v1/benchmarks?model=DeepSeek-R1-0528",
            "/api/v1/benchmarks?model=Klaud-Demo-Bench",
            "/api/v1/benchmarks?model=Qwen-3.5-397B-A17B",
        ]
    );
}

#[tokio::test]
async fn a_listed_name_the_app_refuses_maps_to_nothing() {
    let app = app();
    app.lock().expect("app").listed.push("Retired-Model".into());
    let base = serve(app).await;
    let source = HttpBaselineSource::new(&base).expect("client");
    assert_eq!(
        source.display_name("dsr1").await.expect("asked").as_deref(),
        Some("DeepSeek-R1-0528")
    );
}

#[tokio::test]
async fn the_store_keeps_names_between_runs_and_asks_only_for_new_ones() {
    let app = app();
    let base = serve(app.clone()).await;
    let store = Store::temporary().expect("store");
    let first = HttpBaselineSource::new(&base)
        .expect("client")
        .with_store(store.clone());
    assert_eq!(
        first.display_name("dsr1").await.expect("asked").as_deref(),
        Some("DeepSeek-R1-0528")
    );
    let kept = store.model_names(first.base()).expect("kept");
    assert_eq!(kept.name_of("demo"), Some("Klaud-Demo-Bench"));

    // A new process: known prefixes cost no request.
    app.lock().expect("app").asked.clear();
    let second = HttpBaselineSource::new(&base)
        .expect("client")
        .with_store(store.clone());
    assert_eq!(
        second.display_name("demo").await.expect("kept").as_deref(),
        Some("Klaud-Demo-Bench")
    );
    assert!(app.lock().expect("app").asked.is_empty());

    // The app learns a model: an unknown prefix reads the description
    // again and asks only the new name.
    {
        let mut a = app.lock().expect("app");
        a.names.insert("Kimi-K3".into(), "kimik3".into());
        a.listed.push("Kimi-K3".into());
    }
    assert_eq!(
        second
            .display_name("kimik3")
            .await
            .expect("asked")
            .as_deref(),
        Some("Kimi-K3")
    );
    let asked: Vec<String> = app
        .lock()
        .expect("app")
        .asked
        .iter()
        .map(|(q, _)| q.clone())
        .collect();
    assert_eq!(
        asked,
        vec!["/api/openapi.json", "/api/v1/benchmarks?model=Kimi-K3"]
    );
}

#[tokio::test]
async fn an_api_without_a_description_is_an_error_naming_its_url() {
    let router = Router::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, router).await });
    let source = HttpBaselineSource::new(&format!("http://{addr}")).expect("client");
    let err = source.display_name("dsr1").await.expect_err("no names");
    assert!(err.url.ends_with("/api/openapi.json"), "{err}");
    assert!(err.reason.contains("404"), "{err}");
}
