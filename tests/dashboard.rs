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
                old_image: "lmsysorg/sglang:v0.5.16-cu130".into(),
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
        image: "vllm/vllm-openai:v0.11.0".into(),
        edits: vec![format!("env VLLM_FLAG_{name}=1")],
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

/// What a maintainer reads on the page, as a real browser lays it out:
/// each candidate's old → new image (short digest, full one on hover),
/// experiments by name with what each variant changes (not candidate
/// hashes), a candidate that ended as a duplicate shown as such (its
/// never-started run not "queued"), Markdown from reasons and upkeep shown
/// as code (no raw backticks), and names that wrap only at separators.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_shows_old_to_new_images_true_states_and_no_raw_markdown() {
    let digest = "sha256:d6e7288627be8b02be88e4bba38e73f6d50e2826869f753c13a4c4385ab3eda9";
    let mut snapshot = sample();
    let repo = &mut snapshot.repositories[0];
    repo.candidates[0].image = format!("lmsysorg/sglang:v0.5.17-cu130@{digest}");
    repo.candidates[0].merge = Some("validated; reuse `/reuse-sweep-run 7` at merge".into());
    repo.candidates.push(CandidateRow {
        id: "0d1f3f5d5c1e2b7a-0123456789abcdef".into(),
        family: "configs/amd-master.yaml:dsr1-fp8-mi355x-sglang-disagg-mtp".into(),
        image: format!("lmsysorg/sglang:v0.5.17-rocm700-mi35x@{digest}"),
        old_image: "lmsysorg/sglang:v0.5.16-rocm700-mi35x".into(),
        state: "done".into(),
        // What the record says of a candidate whose smoke never started
        // before another PR made it a duplicate.
        attempt: Some("Smoke · queued, ended with the candidate (duplicate)".into()),
        pull_request: None,
        runs: vec![],
        outcome: Some("duplicate".into()),
        merge: None,
    });
    repo.families[0].reasons = vec!["tag `v0.5.18-cu130` is only 2h old; skipped".into()];
    repo.experiments = vec![ExperimentRow {
        family: "configs/nvidia-master.yaml:demo-fp4-gb200-dynamo-vllm-disagg".into(),
        experiment: "flashinfer-vs-triton".into(),
        variants: vec![VariantRow {
            name: "A".into(),
            from: None,
            candidate: "7277e80e16ff6abb-00000000000000aa".parse().expect("id"),
            state: "duplicate".into(),
            pull_request: None,
            image: format!("vllm/vllm-openai:v0.11.0@{digest}"),
            edits: vec!["env VLLM_ATTENTION_BACKEND=FLASHINFER".into()],
        }],
    }];
    let (url, _sender) = serve(snapshot).await;
    if let Some(dir) = crate::support::screenshot_dir() {
        crate::support::screenshot(&url, &dir.join("web-dashboard.png"), 1280, 1800);
        crate::support::screenshot(&url, &dir.join("web-dashboard-phone.png"), 420, 3200);
    }
    let Some(dom) = crate::first_contact::browser_dom(&url).await else {
        assert!(
            std::env::var_os("CI").is_none(),
            "chromium is missing (apt-get install -y chromium)"
        );
        eprintln!("SKIP: chromium is not installed; the dashboard was not opened in a browser");
        return;
    };
    let body = dom.split_once("<body").map_or(dom.as_str(), |(_, b)| b);
    assert!(!body.contains('`'), "raw backticks on the page: {body}");
    assert!(body.contains("<code>v0.5.18-cu130</code>"), "{body}");
    assert!(body.contains("<code>/reuse-sweep-run 7</code>"), "{body}");
    // Old → new, in that order, the new one short with the full one on hover.
    let candidates = body
        .split_once("<h3>Candidates</h3>")
        .and_then(|(_, rest)| rest.split_once("</table>"))
        .map(|(table, _)| table)
        .expect("candidates table");
    let old = candidates.find("v0.5.16-cu130").expect("the old image");
    let new = candidates.find("v0.5.17-cu130").expect("the new image");
    assert!(old < new, "{candidates}");
    assert!(candidates.contains(&format!("title=\"lmsysorg/sglang:v0.5.17-cu130@{digest}\"")));
    assert!(candidates.contains("d6e7288627be…"), "{candidates}");
    assert!(
        !candidates.contains(">d6e7288627be8b02be88e4bba38e73f6"),
        "{candidates}"
    );
    // The duplicate is a duplicate, not a queued run.
    assert!(
        candidates.contains("badge warn\">duplicate<"),
        "{candidates}"
    );
    assert!(!candidates.contains("badge info\">queued<"), "{candidates}");
    // Experiments by name, each variant with its change, no candidate hash
    // shown as text.
    let experiments = body
        .split_once("<h3>Experiments</h3>")
        .map(|(_, rest)| rest)
        .expect("experiments");
    assert!(experiments.contains("Experiment flashinfer-vs-triton"));
    assert!(experiments.contains("<code>env VLLM_ATTENTION_BACKEND=FLASHINFER</code>"));
    assert!(
        !experiments.contains(">7277e80e16ff6abb-00000000000000aa<"),
        "{experiments}"
    );
    // Names break at separators only: no `break-all` in the styles.
    assert!(!dom.contains("break-all"));
    assert!(
        candidates.contains("mi355x-sglang-disagg-mtp"),
        "{candidates}"
    );
}
