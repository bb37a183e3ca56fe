//! The dashboard's routes over a published snapshot.

use std::sync::Arc;

use chrono::Utc;
use klaud_service::dashboard::{
    BudgetSample, CandidateRow, ClaimRow, ExperimentRow, FamilyRow, LinkRow, RateBudgetRow,
    RepositoryStatus, StatusSnapshot, VariantRow, render_page, router,
};
use tokio::sync::watch;

fn sample() -> StatusSnapshot {
    StatusSnapshot {
        generated_at: Some(Utc::now()),
        version: "0.1.0".into(),
        bot_login: "Klaud-Cold".into(),
        repositories: vec![RepositoryStatus {
            name: "sandbox/benchmarks".into(),
            url: "https://github.com/sandbox/benchmarks".into(),
            families: vec![FamilyRow {
                family: "configs/nvidia-master.yaml:demo-fp4-b200-sglang".into(),
                id: "8e003d7af66d38c9".into(),
                status: "stale-newer".into(),
                current: "lmsysorg/sglang:v0.5.16-cu130".into(),
                candidate: Some("lmsysorg/sglang:v0.5.17-cu130@sha256:abc".into()),
                stale_hours: Some(72),
                reasons: vec!["v0.5.18-cu130: only 2h old (minimum 24h); skipped".into()],
            }],
            claims: vec![ClaimRow {
                family_id: "8e003d7af66d38c9".into(),
                owner: Some("0193-owner".into()),
                run_id: Some(7),
                fence: Some(1),
                ..ClaimRow::default()
            }],
            candidates: vec![CandidateRow {
                id: "8e003d7af66d38c9-0123456789abcdef".into(),
                family: "configs/nvidia-master.yaml:demo-fp4-b200-sglang".into(),
                image: "lmsysorg/sglang:v0.5.17-cu130@sha256:abc".into(),
                state: "smoke".into(),
                attempt: Some("Repair 2/5".into()),
                pull_request: Some(LinkRow {
                    label: "#12".into(),
                    url: "https://github.com/sandbox/benchmarks/pull/12".into(),
                }),
                runs: vec![],
                outcome: None,
                merge: None,
            }],
            outcomes: vec![],
            ..RepositoryStatus::default()
        }],
        github_budget: vec![RateBudgetRow {
            resource: "core".into(),
            limit: 5000,
            remaining: 4990,
            reset: None,
        }],
        ..StatusSnapshot::default()
    }
}

async fn serve(snapshot: StatusSnapshot) -> (String, watch::Sender<Arc<StatusSnapshot>>) {
    let (sender, receiver) = watch::channel(Arc::new(snapshot));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router(receiver)).await });
    (url, sender)
}

#[tokio::test]
async fn the_page_json_and_metrics_show_the_snapshot() {
    let (url, _sender) = serve(sample()).await;
    let http = klaud_http::http_client().expect("http client");
    let page = http.get(&url).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(
        page.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let page = page.text().await.unwrap();
    for needle in [
        "demo-fp4-b200-sglang",
        "Repair 2/5",
        "stale-newer",
        "pull/12",
        "4990 / 5000",
        "0193-owner",
    ] {
        assert!(page.contains(needle), "{needle} missing");
    }
    let json: serde_json::Value = http
        .get(format!("{url}/api/v1/status"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        json["repositories"][0]["candidates"][0]["attempt"],
        "Repair 2/5"
    );
    assert_eq!(json["github_budget"][0]["remaining"], 4990);
    let metrics = http
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("klaud_candidates{repository=\"sandbox/benchmarks\",state=\"smoke\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("klaud_github_rate_limit_remaining{resource=\"core\"} 4990"));
    assert!(metrics.contains("# TYPE klaud_waves_total counter"));
}

#[test]
fn the_page_says_planning_and_charts_the_budget() {
    let mut snapshot = sample();
    assert!(!render_page(&snapshot).contains("planning…"));
    assert!(
        !render_page(&snapshot).contains("<svg"),
        "no samples, no chart"
    );
    snapshot.planning = true;
    let start = Utc::now() - chrono::TimeDelta::hours(2);
    snapshot.budget_history = (0..3)
        .map(|i| BudgetSample {
            at: start + chrono::TimeDelta::hours(i),
            remaining: 5000 - 1000 * i as u64,
            limit: 5000,
        })
        .collect();
    let page = render_page(&snapshot);
    assert!(page.contains("planning…"));
    assert!(page.contains("<svg") && page.contains("</svg>"));
    // Full budget at the top (y 0), 3000 left at 40% of the height.
    assert!(
        page.contains("points=\"0.0,0.0 300.0,24.0 600.0,48.0\""),
        "{page}"
    );
    assert!(page.contains("3000 now"));
    assert!(page.contains("3 d"), "Stale for of 72 h");
    assert!(!page.contains("<script"), "no JavaScript");
}

#[tokio::test]
async fn healthz_waits_for_the_first_snapshot() {
    let (url, sender) = serve(StatusSnapshot::default()).await;
    let http = klaud_http::http_client().expect("http client");
    assert_eq!(
        http.get(format!("{url}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        503
    );
    sender.send(Arc::new(sample())).unwrap();
    assert_eq!(
        http.get(format!("{url}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}

/// An experiment's variants as the dashboard groups them: one table per
/// family and experiment, in the experiment's order, each with its state and
/// PR, as a real browser renders the page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_shows_an_experiments_variants_grouped() {
    let variant = |name: &str, from: Option<&str>, state: &str, pull: u64| VariantRow {
        name: name.into(),
        from: from.map(Into::into),
        candidate: format!("7277e80e16ff6abb-{pull:016x}")
            .parse()
            .expect("a candidate id"),
        state: state.into(),
        pull_request: Some(LinkRow {
            label: format!("#{pull}"),
            url: format!("https://github.com/sandbox/benchmarks/pull/{pull}"),
        }),
    };
    let mut snapshot = sample();
    snapshot.repositories[0].experiments = vec![ExperimentRow {
        family: "configs/nvidia-master.yaml:demo-fp4-gb200-dynamo-vllm-disagg".into(),
        experiment: "demo-disagg".into(),
        variants: vec![
            variant("A", None, "duplicate", 4),
            variant("B", None, "validated", 5),
            variant("C", Some("B"), "smoke", 6),
        ],
    }];
    let (url, _sender) = serve(snapshot).await;
    let Some(dom) = crate::first_contact::browser_dom(&url).await else {
        assert!(
            std::env::var_os("CI").is_none(),
            "chromium is missing (apt-get install -y chromium)"
        );
        eprintln!("SKIP: chromium is not installed; the dashboard was not opened in a browser");
        return;
    };
    let section = dom
        .split_once("<h3>Experiments</h3>")
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("no Experiments section: {dom}"));
    assert!(
        section.contains("Experiment demo-disagg"),
        "the table names the experiment: {section}"
    );
    assert!(section.contains("demo-fp4-gb200-dynamo-vllm-disagg"));
    // The three variants sit in one table, in the experiment's order.
    let table = section
        .split_once("</table>")
        .map_or(section, |(table, _)| table);
    let at = |needle: &str| {
        table
            .find(needle)
            .unwrap_or_else(|| panic!("{needle} is not in the experiment's table: {table}"))
    };
    assert!(at("Variant A") < at("Variant B"));
    assert!(at("Variant B") < at("Variant C (= B plus …)"));
    for needle in [
        "duplicate",
        "validated",
        "smoke",
        "pull/4",
        "pull/5",
        "pull/6",
    ] {
        at(needle);
    }
    assert_eq!(table.matches("class=\"variant\"").count(), 3, "{table}");
}
