//! Sick nodes across candidates through the sandbox: an infrastructure
//! failure staged on one node for two families is shown once, with both
//! families, the times and the playbook entry, on the dashboard issue and
//! on the web page (read from the DOM headless Chromium builds, where a
//! hostile node name stays text, and from its JSON); a pass with nothing
//! new reads no job list and no log, only one free conditional list of the
//! runs; a lost store gives the same table. An engine entry scoped to a
//! framework matches there as in the engine's own triage, and the second
//! family's attempt report names the sick node and links the dashboard
//! section. An entry scoped to an engine version matches a candidate's run
//! on an instance that never ran it, as on the one that did: the version
//! comes from a commit of the candidate on GitHub, and a read of it that
//! fails is made again by the next pass.

use std::sync::Arc;
use std::time::Duration;

use klaud_lifecycle::engine::{Journal, MemoryJournal};
use klaud_lifecycle::playbook::sick::SickNodeRow;
use klaud_lifecycle::wave::WaveSummary;
use klaud_service::dashboard::{RepositoryStatus, StatusSnapshot, router};
use klaud_service::dashboard_issue::{LABEL, Visit, around_wave};
use klaud_service::sick_nodes::SickNodes;

use crate::support::{FailsUntil, Harness, REPO, forge_of};

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
    visit_as(env, &env.forge, journal).await
}

/// [`visit`] by the instance with `forge` and `journal`.
async fn visit_as(
    env: &Harness,
    forge: &klaud_github::Github,
    journal: &dyn Journal,
) -> (String, SickNodes) {
    let options = Visit {
        base_branch: "main".into(),
        cooldown: Duration::from_secs(3600),
        web_dashboard: None,
        wave: true,
        playbook: klaud_lifecycle::playbook::DEFAULT_PATH.into(),
        repo: klaud_planner::repo::RepoOptions::default(),
        cache: None,
    };
    let (result, issue, nodes) = around_wave(forge, journal, env.clock, options, async |_| {
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
    // One failed job per smoke: each smoke's jobs all ran on the node its
    // first log shows broken, and the others' logs are not read.
    assert_eq!(row.failures, 2, "{row:?}");
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

    // A lost store: the runs are read again and give the same table, one
    // log a run.
    let from = env.stack.state().request_log().await.len();
    let (rebuilt_body, rebuilt) = visit(&env, &MemoryJournal::new()).await;
    assert_eq!(rebuilt, nodes);
    assert_eq!(rebuilt_body, body);
    let logs = env.stack.state().request_log().await[from..]
        .iter()
        .filter(|r| r.path.ends_with("/logs"))
        .count();
    assert_eq!(logs, 2);

    // The web page and its JSON show the same row; beside it, a row whose
    // node, signature, families and entry are hostile text.
    let mut rows = nodes.rows.clone();
    rows.push(hostile_row());
    let snapshot = StatusSnapshot {
        repositories: vec![RepositoryStatus {
            name: REPO.into(),
            sick_nodes: rows,
            ..RepositoryStatus::default()
        }],
        ..StatusSnapshot::default()
    };
    browser_shows(snapshot.clone(), row, &families).await;
    let (_sender, receiver) = tokio::sync::watch::channel(Arc::new(snapshot));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, router(receiver)).await });
    let http = klaud_http::http_client().expect("http client");
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

/// A sick-node row made of hostile text: markup with event handlers, a
/// script, a mention and Markdown in every field the page shows.
fn hostile_row() -> SickNodeRow {
    let at = chrono::DateTime::parse_from_rfc3339("2026-12-01T10:00:00Z")
        .expect("time")
        .to_utc();
    SickNodeRow {
        node: "<img src=x onerror=\"top.__pwned=1\">gpu-node-9".into(),
        signature: "<script>top.__pwned=1</script>sig-1".into(),
        entry: None,
        class: "infrastructure".into(),
        families: vec![
            "<a href=\"javascript:top.__pwned=1\">fam</a>".into(),
            "@team **bold** <svg onload=\"top.__pwned=1\">".into(),
        ],
        family_count: 2,
        failures: 2,
        first_seen: at,
        last_seen: at,
        line: Some("<iframe src=\"javascript:top.__pwned=1\"></iframe>".into()),
    }
}

/// The page in headless Chromium: the sandbox's row read from the DOM
/// cell by cell (node, signature, families, times, entry), and the
/// hostile row shown as the text it is, with no element made from it and
/// no payload run.
async fn browser_shows(snapshot: StatusSnapshot, row: &SickNodeRow, families: &[String]) {
    let Some(read) = crate::support::dashboard_dom_rows(snapshot, "tr.sick-node").await else {
        assert!(
            std::env::var_os("CI").is_none(),
            "chromium is missing (apt-get install -y chromium)"
        );
        eprintln!(
            "SKIP: chromium is not installed; the sick-node table was not opened in a browser"
        );
        return;
    };
    assert_eq!(read["pwned"], false, "a payload ran: {read:#}");
    let rows = read["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{read:#}");
    let when = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%d %H:%M UTC").to_string();
    let cells = &rows[0]["cells"];
    assert_eq!(cells["Node"], NODE, "{read:#}");
    assert_eq!(
        cells["Signature"], "node-pyxis-broken (infrastructure)",
        "{read:#}"
    );
    assert_eq!(cells["Families"], families.join("\n"), "{read:#}");
    assert_eq!(cells["Failures"], row.failures.to_string(), "{read:#}");
    assert_eq!(cells["First seen"], when(row.first_seen), "{read:#}");
    assert_eq!(cells["Last seen"], when(row.last_seen), "{read:#}");
    assert_eq!(cells["Playbook entry"], "node-pyxis-broken", "{read:#}");

    let hostile = hostile_row();
    let cells = &rows[1]["cells"];
    assert_eq!(rows[1]["foreign"], 0, "an element was injected: {read:#}");
    assert_eq!(cells["Node"], hostile.node.as_str(), "{read:#}");
    assert_eq!(
        cells["Signature"],
        format!(
            "{} (infrastructure)\n{}",
            hostile.signature,
            hostile.line.as_deref().unwrap_or_default()
        ),
        "{read:#}"
    );
    assert_eq!(cells["Families"], hostile.families.join("\n"), "{read:#}");
    assert_eq!(cells["Playbook entry"], "—", "{read:#}");
}

const OOM: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. \
                   GPU 3 has a total capacity of 178.35 GiB of which 1.12 GiB is free.";
const OOM_NODE: &str = "b200-dgx-07";
/// Two vLLM families of the demo: the playbook's OOM entry is scoped to
/// vLLM, so it matches only when the triage knows the framework.
const VLLM: [&str; 2] = ["demo-fp4-b200-vllm", "demo-fp4-b300-vllm-agentic"];
/// The dashboard issue the engine's configuration names.
const DASHBOARD: u64 = 77;

#[tokio::test]
async fn a_scoped_engine_entry_on_one_node_for_two_families_shows_its_entry_and_the_second_report_names_the_node()
 {
    let mut script =
        String::from("[families.\"*\"]\nsmoke = [\"success\"]\nsweep = [\"success\"]\n");
    for key in VLLM {
        script.push_str(&format!(
            "[families.{key}]\nsmoke = [{{ outcome = \"failure\", log_lines = [{OOM:?}], node = \"{OOM_NODE}\" }}]\n"
        ));
    }
    let env = Harness::demo()
        .script(&script)
        .configure(|c| c.dashboard_issue = Some(DASHBOARD))
        .start()
        .await;
    let journal = MemoryJournal::new();

    // The first family alone: one family on one day makes no node sick.
    let first = env.finish(&journal, &env.target(VLLM[0]).await).await;
    let pull = first.pull.expect("a PR");
    let reports: Vec<String> = env
        .bodies(pull)
        .await
        .into_iter()
        .filter(|b| b.contains("klaud-report:"))
        .collect();
    assert!(!reports.is_empty());
    assert!(
        reports.iter().all(|b| !b.contains("**Sick node:**")),
        "{reports:#?}"
    );
    // A pass keeps the runs its table was made from.
    let (_, none) = visit(&env, &journal).await;
    assert!(none.rows.is_empty(), "{none:#?}");

    // The second family fails the same way on the same node: its report
    // says the node is sick, with the row, and links the dashboard.
    let second = env.finish(&journal, &env.target(VLLM[1]).await).await;
    let pull = second.pull.expect("a PR");
    let report = env
        .bodies(pull)
        .await
        .into_iter()
        .find(|b| b.contains("klaud-report:") && b.contains("**Failed jobs:**"))
        .expect("a failed attempt's report");
    let (en, zh) = report
        .split_once("<summary>中文</summary>")
        .expect("both languages");
    // The link goes to the section's heading, by GitHub's anchor for it.
    let link = format!("/issues/{DASHBOARD}#sick-nodes--异常节点)");
    assert!(en.contains("**Sick node:**"), "{report}");
    assert!(
        en.contains("\"Sick nodes / 异常节点\" section]("),
        "{report}"
    );
    assert!(en.contains(&link), "{report}");
    assert!(
        en.contains(&format!(
            "- `{OOM_NODE}`: `vllm-oom-at-load` (engine), families `{}`, `{}`",
            VLLM[0], VLLM[1]
        )),
        "{report}"
    );
    assert!(en.contains("playbook entry `vllm-oom-at-load`"), "{report}");
    assert!(zh.contains("**异常节点**"), "{report}");
    assert!(zh.contains(&link), "{report}");

    // The table, read from GitHub's runs by a store that kept nothing:
    // each job triaged with its family's framework, so the entry scoped
    // to vLLM is the row's, not an unknown signature.
    let (body, nodes) = visit(&env, &MemoryJournal::new()).await;
    assert_eq!(nodes.rows.len(), 1, "{nodes:#?}");
    let row = &nodes.rows[0];
    assert_eq!(row.node, OOM_NODE);
    assert_eq!(row.entry.as_deref(), Some("vllm-oom-at-load"), "{row:#?}");
    assert_eq!(row.signature, "vllm-oom-at-load");
    assert_eq!(row.class, "engine");
    assert_eq!(row.families, VLLM.map(str::to_owned).to_vec());
    let line = body
        .lines()
        .find(|l| l.starts_with(&format!("| `{OOM_NODE}`")))
        .unwrap_or_else(|| panic!("no row for the node: {body}"));
    assert!(line.ends_with("| `vllm-oom-at-load` |"), "{line}");
}

/// The dashboard issue's sick-node section of `body`.
fn nodes_section(body: &str) -> &str {
    let start = body
        .find("<!-- klaud:nodes-start -->")
        .unwrap_or_else(|| panic!("no sick-node section: {body}"));
    let end = body[start..]
        .find("<!-- klaud:nodes-end -->")
        .unwrap_or_else(|| panic!("no end of the sick-node section: {body}"))
        + start;
    &body[start..end]
}

/// Two vLLM families whose candidates run v0.26.0 (their base runs
/// v0.25.0): the dynamo family's framework is `dynamo-vllm`.
const V026: [&str; 2] = ["demo-fp4-b200-vllm", "demo-fp4-gb200-dynamo-vllm-disagg"];

#[tokio::test]
async fn an_entry_scoped_to_the_candidates_engine_version_shows_alike_on_an_instance_that_never_ran_it()
 {
    // The demo with its OOM entry scoped to the candidates' engine
    // version: the base's v0.25.0 is outside it, so only a triage that
    // knows the version a run tested finds the entry.
    let seed = tempfile::tempdir().expect("tempdir");
    crate::support::copy_tree(&crate::support::demo_seed(), seed.path());
    let path = seed.path().join(klaud_lifecycle::playbook::DEFAULT_PATH);
    let book = std::fs::read_to_string(&path).expect("the demo playbook");
    let scoped = book.replacen(
        "      scope:\n        framework: [vllm]\n",
        "      scope:\n        framework: [vllm, dynamo-vllm]\n        engine_version: '>=0.26, <0.27'\n",
        1,
    );
    assert_ne!(scoped, book, "the demo's OOM entry is scoped to vLLM");
    std::fs::write(&path, scoped).expect("write the playbook");

    let script = FailsUntil::smokes_of(&[
        FailsUntil {
            family: V026[0],
            lines: &[OOM],
            node: OOM_NODE,
            file: "benchmarks/single_node/fixed_seq_len/demo_fp4_b200_vllm.sh",
            contains: "--gpu-memory-utilization 0.90",
        },
        FailsUntil {
            family: V026[1],
            lines: &[OOM],
            node: OOM_NODE,
            file: "benchmarks/multi_node/srt-slurm-recipes/vllm/demo-model/disagg-gb200-1p1d.yaml",
            contains: "gpu-memory-utilization: 0.90",
        },
    ]);
    let env = Harness::demo()
        .seed_dir(seed.path())
        .script(&script)
        .start()
        .await;

    // Instance A runs both candidates; its own triage knows their image.
    let journal_a = MemoryJournal::new();
    for key in V026 {
        let target = env.target(key).await;
        assert!(
            target.image.contains(":v0.26.0@"),
            "{key}: {}",
            target.image
        );
        env.finish(&journal_a, &target).await;
    }
    let (body_a, nodes_a) = visit(&env, &journal_a).await;
    assert_eq!(nodes_a.rows.len(), 1, "{nodes_a:#?}");
    let row = &nodes_a.rows[0];
    assert_eq!(row.node, OOM_NODE);
    assert_eq!(row.entry.as_deref(), Some("vllm-oom-at-load"), "{row:#?}");
    let mut families = V026.map(str::to_owned).to_vec();
    families.sort();
    assert_eq!(row.families, families);

    // Instance B (its own store and GitHub client) never ran them and the
    // base still names v0.25.0: its table reads each run's candidate, and its
    // rows and the issue's section are A's, entry included.
    let forge_b = forge_of(&env.stack).await;
    let journal_b = MemoryJournal::new();
    let before = env.stack.state().request_log().await.len();
    let (body_b, nodes_b) = visit_as(&env, &forge_b, &journal_b).await;
    assert_eq!(nodes_b, nodes_a);
    assert_eq!(nodes_section(&body_b), nodes_section(&body_a));
    let line = body_b
        .lines()
        .find(|l| l.starts_with(&format!("| `{OOM_NODE}`")))
        .unwrap_or_else(|| panic!("no row for the node: {body_b}"));
    assert!(line.ends_with("| `vllm-oom-at-load` |"), "{line}");

    // Each run's candidate read once: the repaired one at its branch, the
    // failed one (its branch deleted by the cleanup) at its pull request's
    // head.
    let log = env.stack.state().request_log().await;
    let masters = log[before..]
        .iter()
        .filter(|r| r.path.contains("/contents/configs/nvidia-master.yaml") && r.status == 200)
        .count();
    assert_eq!(masters, 2, "{:#?}", &log[before..]);
    let pulls = log[before..]
        .iter()
        .filter(|r| r.path.contains("/pulls?head="))
        .count();
    assert_eq!(pulls, 1, "{:#?}", &log[before..]);

    // B's next pass reads no candidate again: one free conditional list.
    let from = env.stack.state().request_log().await.len();
    let (_, again) = visit_as(&env, &forge_b, &journal_b).await;
    assert_eq!(again, nodes_b);
    let log = env.stack.state().request_log().await;
    let read: Vec<_> = log[from..]
        .iter()
        .filter(|r| r.path.contains("/actions/") || r.path.contains("/contents/"))
        .collect();
    assert_eq!(read.len(), 1, "{read:#?}");
    assert_eq!(read[0].status, 304, "{read:#?}");

    // Instance C cannot read the failed candidate's pull request at first:
    // that run's version stays unknown, so its failure is no row of A's
    // (and no error of the pass); the next pass reads the run again and
    // agrees with A.
    env.stack
        .state()
        .add_fault(klaud_sandbox::github::Fault::status(
            "GET",
            format!("/repos/{REPO}/pulls"),
            100,
            502,
        ))
        .await;
    let forge_c = forge_of(&env.stack).await;
    let journal_c = MemoryJournal::new();
    let (_, blind) = visit_as(&env, &forge_c, &journal_c).await;
    assert_ne!(blind.rows, nodes_a.rows, "{blind:#?}");
    env.stack.state().clear_faults().await;
    let (body_c, nodes_c) = visit_as(&env, &forge_c, &journal_c).await;
    assert_eq!(nodes_c, nodes_a);
    assert_eq!(nodes_section(&body_c), nodes_section(&body_a));
}
