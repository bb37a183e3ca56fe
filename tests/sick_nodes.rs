//! Sick nodes across candidates through the sandbox: an infrastructure
//! failure staged on one node for two families is shown once, with both
//! families, the times and the playbook entry, on the dashboard issue and
//! on the web page (its HTML and its JSON, served by the dashboard's
//! router); a pass with nothing new reads no job list and no log, only one
//! free conditional list of the runs; a lost store gives the same table.

use std::sync::Arc;
use std::time::Duration;

use klaud_lifecycle::engine::{Journal, MemoryJournal};
use klaud_lifecycle::wave::WaveSummary;
use klaud_service::dashboard::{RepositoryStatus, StatusSnapshot, router};
use klaud_service::dashboard_issue::{LABEL, Visit, around_wave};
use klaud_service::sick_nodes::SickNodes;

use crate::support::{Harness, REPO};

const NODE: &str = "gpu-node-7";
const FAMILIES: [&str; 2] = ["demo-fp8-h200-trt", "demo-fp4-b200-sglang"];

fn script() -> String {
    let mut s = String::from("[families.\"*\"]\nsmoke = [\"success\"]\nsweep = [\"success\"]\n");
    for key in FAMILIES {
        s.push_str(&format!(
            "[families.{key}]\nsmoke = [{{ outcome = \"failure\", log_lines = [\"srun: error: pyxis is broken\"], node = \"{NODE}\" }}, \"success\"]\n"
        ));
    }
    s
}

/// One pass's visit of the dashboard issue around a wave that does
/// nothing: what `klaud serve` and `klaud wave` do after their wave.
async fn visit(env: &Harness, journal: &dyn Journal) -> (String, SickNodes) {
    let options = Visit {
        base_branch: "main".into(),
        cooldown: Duration::from_secs(3600),
        web_dashboard: None,
        wave: true,
        playbook: klaud_lifecycle::playbook::DEFAULT_PATH.into(),
    };
    let (result, issue, nodes) = around_wave(&env.forge, journal, env.clock, options, async |_| {
        Ok::<_, std::convert::Infallible>(WaveSummary {
            base: String::new(),
            candidates: Vec::new(),
            skipped: Vec::new(),
            answered: Vec::new(),
            blocked: Vec::new(),
            families: Vec::new(),
            unreadable: Vec::new(),
            stopped_by: None,
        })
    })
    .await;
    result.expect("the wave");
    assert!(issue.is_some(), "the dashboard issue is published");
    let body = env
        .stack
        .state()
        .issues(REPO)
        .await
        .into_iter()
        .find(|i| i.open && i.labels.iter().any(|l| l == LABEL))
        .expect("the dashboard issue")
        .body;
    (body, nodes.expect("Klaud's runs read"))
}

#[tokio::test]
async fn a_node_failing_for_two_families_is_shown_once_on_the_issue_and_the_page() {
    let env = Harness::demo().script(&script()).start().await;
    for key in FAMILIES {
        let target = env.target(key).await;
        let rec = env.finish(&MemoryJournal::new(), &target).await;
        assert!(rec.attempts[0].infra, "{key}: {:?}", rec.attempts);
    }

    let cache = MemoryJournal::new();
    let (body, nodes) = visit(&env, &cache).await;
    assert_eq!(nodes.rows.len(), 1, "{nodes:#?}");
    let row = &nodes.rows[0];
    assert_eq!(row.node, NODE);
    assert_eq!(row.entry.as_deref(), Some("node-pyxis-broken"));
    assert_eq!(row.class, "infrastructure");
    let mut families = FAMILIES.map(str::to_owned).to_vec();
    families.sort();
    assert_eq!(row.families, families);
    // Every failed job of both smokes (a smoke runs several points).
    assert!(row.failures >= 2, "{row:?}");
    // GitHub gives times to the second: two smokes may share one.
    assert!(row.first_seen <= row.last_seen, "{row:?}");

    // The issue: one row for the node, naming both families, the times
    // and the entry.
    assert!(body.contains("### Sick nodes / 异常节点"), "{body}");
    let rows: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("| `gpu-node-7`"))
        .collect();
    assert_eq!(rows.len(), 1, "{body}");
    let line = rows[0];
    for key in FAMILIES {
        assert!(line.contains(&format!("`{key}`")), "{line}");
    }
    assert!(line.contains("`node-pyxis-broken`"), "{line}");
    for t in [row.first_seen, row.last_seen] {
        assert!(
            line.contains(&t.format("%Y-%m-%d %H:%M UTC").to_string()),
            "{line}"
        );
    }

    // A pass with nothing new: one conditional list of the runs, answered
    // 304, and no job list or log.
    let from = env.stack.state().request_log().await.len();
    let (again, same) = visit(&env, &cache).await;
    assert_eq!(same, nodes);
    assert_eq!(again, body);
    let log = env.stack.state().request_log().await;
    let actions: Vec<_> = log[from..]
        .iter()
        .filter(|r| r.path.contains("/actions/"))
        .collect();
    assert_eq!(actions.len(), 1, "{actions:#?}");
    assert!(actions[0].path.contains("/actions/runs?"), "{actions:#?}");
    assert_eq!(actions[0].status, 304, "{actions:#?}");

    // A lost store: the runs are read again and give the same table.
    let (rebuilt_body, rebuilt) = visit(&env, &MemoryJournal::new()).await;
    assert_eq!(rebuilt, nodes);
    assert_eq!(rebuilt_body, body);

    // The web page and its JSON show the same row.
    let snapshot = StatusSnapshot {
        repositories: vec![RepositoryStatus {
            name: REPO.into(),
            sick_nodes: nodes.rows.clone(),
            ..RepositoryStatus::default()
        }],
        ..StatusSnapshot::default()
    };
    let (_sender, receiver) = tokio::sync::watch::channel(Arc::new(snapshot));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, router(receiver)).await });
    let http = klaud_http::http_client().expect("http client");
    let page = http
        .get(&url)
        .send()
        .await
        .expect("page")
        .text()
        .await
        .expect("text");
    assert!(page.contains("Sick nodes"), "{page}");
    assert_eq!(
        page.matches("<tr class=\"sick-node\">").count(),
        1,
        "{page}"
    );
    for text in [NODE, "node-pyxis-broken", FAMILIES[0], FAMILIES[1]] {
        assert!(page.contains(text), "{text}: {page}");
    }
    let json: serde_json::Value = http
        .get(format!("{url}/api/v1/status"))
        .send()
        .await
        .expect("json")
        .json()
        .await
        .expect("decode");
    let shown = &json["repositories"][0]["sick_nodes"][0];
    assert_eq!(shown["node"], NODE, "{json}");
    assert_eq!(shown["entry"], "node-pyxis-broken", "{json}");
    assert_eq!(
        shown["families"].as_array().map(Vec::len),
        Some(2),
        "{json}"
    );
}
