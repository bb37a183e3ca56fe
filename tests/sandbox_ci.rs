//! The CI simulator against the GitHub simulator over loopback HTTP: smoke
//! dispatches and labelled sweeps run by themselves, with scripted outcomes
//! and artifacts in the InferenceX formats; the baseline API matches them.

use crate::support;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use klaud_sandbox::ci::{CiSim, Published, RunKind, Script, baseline_router_with};
use klaud_sandbox::github::{GithubSim, Permission};
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};

const REPO: &str = "sandbox/benchmarks";
const BOT: &str = "Klaud-Cold";
const TOKEN: &str = "bot-token";
const MASTER: &str = "configs/nvidia-master.yaml";
const SGLANG: &str = "demo-fp4-b200-sglang";
/// Waiting longer than this for the simulator means it is broken, not slow.
const PATIENCE: Duration = Duration::from_secs(60);

fn demo_dir() -> PathBuf {
    PathBuf::from(crate::support::REPO_ROOT).join("configs/demo")
}

struct T {
    sim: GithubSim,
    ci: CiSim,
    http: Client,
    main: String,
}

impl T {
    async fn new(script: &str) -> Self {
        let (st, main) = support::GithubOnly::new(REPO)
            .user(BOT, Some("Klaud Cold"), Some(Permission::Write))
            .user("maintainer", None, Some(Permission::Write))
            .token(BOT, TOKEN, None)
            .seed_dir(&demo_dir(), "maintainer")
            .state()
            .await;
        let main = main.expect("seeded");
        let sim = support::serve(st.clone()).await;
        let script = Script::parse("test script", script).unwrap();
        let ci = CiSim::spawn_with_poll(st, script, Duration::from_millis(20));
        Self {
            sim,
            ci,
            http: klaud_http::http_client_builder()
                .user_agent("klaud-test")
                .build()
                .unwrap(),
            main,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}/repos/{REPO}{path}", self.sim.url())
    }

    async fn get(&self, path: &str) -> Value {
        let resp = self
            .http
            .get(self.url(path))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "GET {path}: {}", resp.status());
        resp.json().await.unwrap()
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        let resp = self
            .http
            .post(self.url(path))
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let bytes = resp.bytes().await.unwrap();
        assert!(
            status.is_success(),
            "POST {path}: {status} {}",
            String::from_utf8_lossy(&bytes)
        );
        serde_json::from_slice(&bytes).unwrap_or(Value::Null)
    }

    /// Dispatches the smoke workflow for `key` at `sha` the way Klaud does.
    async fn dispatch(&self, key: &str, sha: &str) -> u64 {
        self.dispatch_in(MASTER, key, sha).await
    }

    async fn dispatch_in(&self, master: &str, key: &str, sha: &str) -> u64 {
        let v = self
            .post(
                "/actions/workflows/e2e-tests.yml/dispatches",
                json!({
                    "ref": "main",
                    "inputs": {
                        "ref": sha,
                        "generate-cli-command": format!("test-config --config-files {master} --config-keys {key} --smoke"),
                        "fail-fast": "true",
                        "klaud-run": "true",
                        "test-name": format!("klaud-1-{key}"),
                    },
                    "return_run_details": true,
                }),
            )
            .await;
        v["workflow_run_id"].as_u64().unwrap()
    }

    async fn run(&self, id: u64) -> Value {
        self.get(&format!("/actions/runs/{id}")).await
    }

    /// Polls the run until it is completed and returns it.
    async fn completed(&self, id: u64) -> Value {
        let start = tokio::time::Instant::now();
        loop {
            let run = self.run(id).await;
            if run["status"] == "completed" {
                return run;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "run {id} never completed: {run}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the simulator has decided about `id` (it is then in progress).
    async fn decided(&self, id: u64) {
        let start = tokio::time::Instant::now();
        while !self.ci.events().iter().any(|e| e.run_id == id) {
            assert!(start.elapsed() < PATIENCE, "run {id} was never picked up");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The run's artifacts: name → (file → bytes), downloaded like Klaud does.
    async fn artifacts(&self, id: u64) -> BTreeMap<String, BTreeMap<String, Vec<u8>>> {
        let list = self.get(&format!("/actions/runs/{id}/artifacts")).await;
        let mut out = BTreeMap::new();
        for a in list["artifacts"].as_array().unwrap() {
            let zip = self
                .http
                .get(a["archive_download_url"].as_str().unwrap())
                .bearer_auth(TOKEN)
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            let mut archive = zip::ZipArchive::new(std::io::Cursor::new(zip.to_vec())).unwrap();
            let mut files = BTreeMap::new();
            for i in 0..archive.len() {
                let mut f = archive.by_index(i).unwrap();
                let mut bytes = Vec::new();
                f.read_to_end(&mut bytes).unwrap();
                files.insert(f.name().to_string(), bytes);
            }
            out.insert(a["name"].as_str().unwrap().to_string(), files);
        }
        out
    }

    /// Serves the baseline API and returns its base URL.
    async fn baseline_api(&self) -> String {
        self.baseline_api_with(Published::default()).await
    }

    /// Serves the baseline API publishing what `published` says.
    async fn baseline_api_with(&self, published: Published) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = baseline_router_with(self.sim.state().clone(), REPO, published);
        tokio::spawn(async move { axum::serve(listener, app).await });
        url
    }
}

fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

/// The only JSON file of a per-point artifact.
fn row_of(files: &BTreeMap<String, Vec<u8>>) -> Value {
    let json: Vec<_> = files.iter().filter(|(n, _)| n.ends_with(".json")).collect();
    assert_eq!(json.len(), 1, "{:?}", files.keys());
    json_of(json[0].1)
}

#[tokio::test]
async fn dispatched_smoke_run_of_a_demo_family_succeeds_with_rows_in_the_real_shape() {
    let t = T::new("").await;
    let id = t.dispatch(SGLANG, &t.main).await;
    let run = t.completed(id).await;
    assert_eq!(run["conclusion"], "success", "{run}");
    assert_eq!(run["head_sha"], t.main.as_str());
    assert_eq!(run["display_title"], format!("e2e Test - klaud-1-{SGLANG}"));

    let arts = t.artifacts(id).await;
    // conc-start 1 .. conc-end 32, doubling.
    let concs = [1u64, 2, 4, 8, 16, 32];
    for conc in concs {
        let name = format!("bmk_{SGLANG}_8192_1024_tp4_ep1_dpafalse_conc{conc}");
        let row = row_of(
            arts.get(&name)
                .unwrap_or_else(|| panic!("{name} missing: {:?}", arts.keys())),
        );
        assert_eq!(row["conc"], conc);
        assert_eq!(row["isl"], 8192);
        assert_eq!(row["osl"], 1024);
        assert_eq!(row["tp"], 4);
        assert_eq!(row["ep"], 1);
        assert_eq!(row["dp_attention"], false);
        assert_eq!(row["hw"], "b200");
        assert_eq!(row["framework"], "sglang");
        assert_eq!(row["precision"], "fp4");
        assert_eq!(row["model"], "demo/Demo-R1-FP4");
        assert_eq!(row["infmax_model_prefix"], "demo");
        assert_eq!(row["image"], "lmsysorg/sglang:v0.5.16-cu130");
        for f in [
            "tput_per_gpu",
            "output_tput_per_gpu",
            "mean_ttft",
            "mean_tpot",
        ] {
            let v = row[f].as_f64().unwrap_or_else(|| panic!("{f} in {row}"));
            assert!(v > 0.0, "{f} = {v}");
        }
        // Latencies are seconds, not milliseconds.
        assert!(row["mean_tpot"].as_f64().unwrap() < 1.0, "{row}");
    }
    let agg = json_of(&arts["results_bmk"]["agg_bmk.json"]);
    assert_eq!(agg.as_array().unwrap().len(), concs.len());
    let evals = json_of(&arts["eval_results_all"]["agg_eval_all.json"]);
    let e = &evals[0];
    assert_eq!(e["task"], "gsm8k");
    assert_eq!(e["conc"], 32);
    assert!(e["score"].as_f64().unwrap() > 0.5 && e["score"].as_f64().unwrap() <= 1.0);
    assert_eq!(e["score_name"], "em_strict");
    assert!(e["n_eff"].as_u64().is_some());
    assert!(!arts.contains_key("klaud-sweep-manifest"));

    // With no multipliers the run reproduces the published baseline exactly.
    let api = t.baseline_api().await;
    let published: Value = t
        .http
        .get(format!("{api}/api/v1/benchmarks?model=Klaud-Demo-Bench"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // The demo's one model prefix names every demo family's rows.
    let p8 = published
        .as_array()
        .unwrap()
        .iter()
        .find(|r| {
            r["conc"] == 8
                && r["isl"] == 8192
                && r["hardware"] == "b200"
                && r["framework"] == "sglang"
        })
        .unwrap_or_else(|| panic!("{published}"));
    let r8 = &agg.as_array().unwrap()[3];
    assert_eq!(r8["conc"], 8);
    for f in [
        "tput_per_gpu",
        "output_tput_per_gpu",
        "mean_ttft",
        "mean_tpot",
    ] {
        assert_eq!(p8["metrics"][f], r8[f], "{f}");
    }
}

#[tokio::test]
async fn agentic_family_uploads_agentx_rows() {
    let t = T::new("").await;
    let key = "demo-fp4-b300-vllm-agentic";
    let id = t.dispatch(key, &t.main).await;
    assert_eq!(t.completed(id).await["conclusion"], "success");
    let arts = t.artifacts(id).await;
    let names: Vec<&String> = arts.keys().filter(|n| n.starts_with("bmk_")).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    for conc in [1u64, 4, 8] {
        let result = format!("{key}_agentic_tp4_ep1_dpafalse_conc{conc}");
        let files = &arts[&format!("bmk_agentic_{result}")];
        // The single-node template uploads `<R>.json` for AgentX.
        assert_eq!(
            files.keys().collect::<Vec<_>>(),
            [&format!("{result}.json")]
        );
        let row = row_of(files);
        assert_eq!(row["conc"], conc);
        assert_eq!(row["scenario_type"], "agentic-coding");
        assert_eq!(row["dp_attention"], "false");
        let per_gpu = &row["request_metrics"]["throughput"]["per_gpu"];
        assert!(per_gpu["output_tput_tps"].as_f64().unwrap() > 0.0);
        assert!(per_gpu["total_tput_tps"].as_f64().unwrap() > 0.0);
        assert!(
            row["request_metrics"]["latency"]["ttft"]["mean"]
                .as_f64()
                .unwrap()
                > 0.0
        );
        assert!(
            row["request_metrics"]["latency"]["tpot"]["mean"]
                .as_f64()
                .unwrap()
                > 0.0
        );
        assert!(row["isl"].is_null() || row.get("isl").is_none());
    }
}

#[tokio::test]
async fn scripted_failure_infra_and_delay_behave_as_scripted() {
    let t = T::new(
        r#"
        [families.demo-fp4-b200-vllm]
        smoke = ["failure", { outcome = "success", throughput = 1.25 }]
        [families.demo-fp8-mi355x-sglang]
        smoke = [{ outcome = "failure", partial = true }]
        [families.demo-fp8-h200-trt]
        smoke = ["infra", "infra:timed_out", "infra:cancelled", "success"]
        [families.demo-fp4-b200-sglang]
        smoke = [{ delay = 3600 }, "success", "success", "delay:1", "success"]
        "#,
    )
    .await;

    // A real failure: conclusion failure, no result rows.
    let id = t.dispatch("demo-fp4-b200-vllm", &t.main).await;
    let run = t.completed(id).await;
    assert_eq!(run["conclusion"], "failure");
    assert!(t.artifacts(id).await.is_empty());
    // A re-run is the family's next run: it passes with the scripted speed-up.
    t.post(&format!("/actions/runs/{id}/rerun"), json!({}))
        .await;
    let rerun = t.completed(id).await;
    assert_eq!(rerun["run_attempt"], 2);
    assert_eq!(rerun["conclusion"], "success");
    let arts = t.artifacts(id).await;
    assert!(
        arts.keys()
            .any(|n| n.starts_with("bmk_demo-fp4-b200-vllm_"))
    );

    // A partial failure uploads the first half of the points.
    let id = t
        .dispatch_in("configs/amd-master.yaml", "demo-fp8-mi355x-sglang", &t.main)
        .await;
    assert_eq!(t.completed(id).await["conclusion"], "failure");
    let arts = t.artifacts(id).await;
    let rows: Vec<_> = arts.keys().filter(|n| n.starts_with("bmk_")).collect();
    // conc 4..64 doubling is 5 points; half (rounded up) is 3.
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(
        json_of(&arts["results_bmk"]["agg_bmk.json"])
            .as_array()
            .unwrap()
            .len(),
        3
    );
    assert!(!arts.contains_key("eval_results_all"));

    // Infrastructure failures in their three GitHub spellings, then a pass.
    for expected in ["startup_failure", "timed_out", "cancelled", "success"] {
        let id = t.dispatch("demo-fp8-h200-trt", &t.main).await;
        let run = t.completed(id).await;
        assert_eq!(run["conclusion"], expected);
        let arts = t.artifacts(id).await;
        assert_eq!(
            arts.is_empty(),
            expected != "success",
            "{expected}: {:?}",
            arts.keys()
        );
    }

    // A long delay keeps the run in progress; a cancel wins over the script.
    let slow = t.dispatch(SGLANG, &t.main).await;
    t.decided(slow).await;
    assert_eq!(t.run(slow).await["status"], "in_progress");
    // Let the runner handle another run, so it has polled past the slow one.
    let other = t.dispatch("demo-fp4-b200-vllm", &t.main).await;
    t.completed(other).await;
    assert_eq!(t.run(slow).await["status"], "in_progress");
    t.post(&format!("/actions/runs/{slow}/cancel"), json!({}))
        .await;
    assert_eq!(t.completed(slow).await["conclusion"], "cancelled");
    // The next runs of the family follow the rest of its list.
    let id = t.dispatch(SGLANG, &t.main).await;
    assert_eq!(t.completed(id).await["conclusion"], "success");
    let delayed = t.dispatch(SGLANG, &t.main).await;
    t.decided(delayed).await;
    let run = t.completed(delayed).await;
    assert_eq!(run["conclusion"], "success");

    let events = t.ci.events();
    let sglang: Vec<usize> = events
        .iter()
        .filter(|e| e.family.as_deref() == Some(&format!("{MASTER}:{SGLANG}")))
        .map(|e| e.attempt_index)
        .collect();
    assert_eq!(sglang, vec![0, 1, 2]);
    assert!(events.iter().all(|e| e.kind == RunKind::Smoke));
}

#[tokio::test]
async fn a_run_for_an_unknown_config_key_fails_like_the_real_matrix_generation() {
    let t = T::new("").await;
    let id = t.dispatch("no-such-key", &t.main).await;
    assert_eq!(t.completed(id).await["conclusion"], "failure");
    assert!(t.artifacts(id).await.is_empty());
    let e = t.ci.events().into_iter().find(|e| e.run_id == id).unwrap();
    assert_eq!(e.family, None);
    assert!(e.note.contains("no-such-key"), "{}", e.note);
}

#[tokio::test]
async fn labelled_sweep_run_completes_with_a_manifest_naming_the_exact_head() {
    let t = T::new(
        r#"
        [families."*"]
        sweep = ["failure"]
        [families.demo-fp4-b200-sglang]
        sweep = [{ outcome = "success", throughput = 1.10 }]
        "#,
    )
    .await;
    let st = t.sim.state();
    let branch = "klaud/auto-0123456789abcdef-fedcba9876543210";
    t.post(
        "/git/refs",
        json!({"ref": format!("refs/heads/{branch}"), "sha": t.main}),
    )
    .await;
    let master = std::fs::read_to_string(demo_dir().join(MASTER)).unwrap();
    let bumped = master.replacen(
        "lmsysorg/sglang:v0.5.16-cu130",
        "lmsysorg/sglang:v0.5.17-cu130",
        1,
    );
    let changelog = std::fs::read_to_string(demo_dir().join("perf-changelog.yaml")).unwrap();
    let appended = format!(
        "{changelog}\n- config-keys:\n    - {SGLANG}\n  description:\n    - \"Update SGLang image to v0.5.17-cu130\"\n  pr-link: https://github.com/{REPO}/pull/1\n"
    );
    let mut files = BTreeMap::new();
    files.insert(MASTER.to_string(), Some(bumped.into_bytes()));
    files.insert(
        "perf-changelog.yaml".to_string(),
        Some(appended.into_bytes()),
    );
    let head = st
        .push_commit(REPO, branch, BOT, files, "Update image")
        .await
        .unwrap();
    let pr = t
        .post(
            "/pulls",
            // Ready: the demo's sweep workflow skips drafts.
            json!({"title": "[Klaud Cold] Update", "head": branch, "base": "main", "body": "x", "draft": false}),
        )
        .await;
    let n = pr["number"].as_u64().unwrap();
    t.post(
        &format!("/issues/{n}/labels"),
        json!({"labels": ["full-sweep-fail-fast"]}),
    )
    .await;
    let runs = t.get("/actions/runs?event=pull_request").await;
    let id = runs["workflow_runs"][0]["id"].as_u64().unwrap();
    let run = t.completed(id).await;
    assert_eq!(run["conclusion"], "success", "{run}");
    assert_eq!(run["head_sha"], head.as_str());

    let arts = t.artifacts(id).await;
    let manifest = json_of(&arts["klaud-sweep-manifest"]["sweep_manifest.json"]);
    assert_eq!(manifest["head"], head.as_str());
    assert_eq!(manifest["run-id"], id);
    assert_eq!(manifest["run-attempt"], 1);
    assert_eq!(manifest["full-sweep"], true);
    let agg = json_of(&arts["results_bmk"]["agg_bmk.json"]);
    let rows = agg.as_array().unwrap();
    assert_eq!(rows.len(), 6);
    assert!(
        rows.iter()
            .all(|r| r["image"] == "lmsysorg/sglang:v0.5.17-cu130")
    );

    let e = t.ci.events().into_iter().find(|e| e.run_id == id).unwrap();
    assert_eq!(e.kind, RunKind::Sweep);
    assert_eq!(
        e.family.as_deref(),
        Some(format!("{MASTER}:{SGLANG}").as_str())
    );

    // The scripted +10% shows against the published baseline of the old image.
    let api = t.baseline_api().await;
    let published: Value = t
        .http
        .get(format!("{api}/api/v1/benchmarks?model=Klaud-Demo-Bench"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let base = published
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["conc"] == 16 && r["hardware"] == "b200" && r["framework"] == "sglang")
        .unwrap();
    assert_eq!(base["image"], "lmsysorg/sglang:v0.5.16-cu130");
    let new = rows.iter().find(|r| r["conc"] == 16).unwrap();
    let delta = (new["output_tput_per_gpu"].as_f64().unwrap()
        / base["metrics"]["output_tput_per_gpu"].as_f64().unwrap()
        - 1.0)
        * 100.0;
    assert_eq!(format!("{delta:+.1}%"), "+10.0%");
}

#[tokio::test]
async fn baseline_api_serves_the_seeded_families_published_days_ago_in_the_public_api_shape() {
    let t = T::new("").await;
    let published = Published::default();
    let today = chrono::NaiveDate::from_ymd_opt(2026, 9, 21).unwrap();
    published.set_today(today);
    let api = t.baseline_api_with(published.clone()).await;
    let get = |path: String| {
        let http = t.http.clone();
        async move {
            let r = http.get(path).send().await.unwrap();
            let s = r.status();
            (s, r.json::<Value>().await.unwrap())
        }
    };
    // The rows of the two Demo-V4 families: demo-fp4-b200-vllm and the
    // disaggregated gb200 one (the demo's one name answers every demo
    // family; demo-fp4-b200-vllm-special shares hardware and framework).
    let v4 = |rows: &Value| -> Vec<Value> {
        rows.as_array()
            .unwrap()
            .iter()
            .filter(|r| {
                r["hardware"] == "gb200"
                    || (r["hardware"] == "b200"
                        && r["framework"] == "vllm"
                        && r["image"] != "vllm/vllm-openai:demo-special")
            })
            .cloned()
            .collect()
    };
    let (s, all_rows) = get(format!("{api}/api/v1/benchmarks?model=Klaud-Demo-Bench")).await;
    assert_eq!(s, StatusCode::OK);
    let rows = v4(&all_rows);
    // demo-fp4-b200-vllm (4..64: 5 points) and the disaggregated gb200 family (3).
    assert_eq!(rows.len(), 8);
    let disagg = rows.iter().find(|r| r["disagg"] == true).unwrap();
    assert_eq!(disagg["hardware"], "gb200");
    assert_eq!(disagg["prefill_num_workers"], 1);
    assert_eq!(disagg["prefill_ep"], 8);
    assert_eq!(disagg["prefill_dp_attention"], true);
    let single = rows.iter().find(|r| r["disagg"] == false).unwrap();
    for f in [
        "hardware",
        "framework",
        "model",
        "precision",
        "spec_method",
        "is_multinode",
        "prefill_tp",
        "decode_tp",
        "num_prefill_gpu",
        "num_decode_gpu",
        "isl",
        "osl",
        "conc",
        "image",
        "date",
        "run_url",
    ] {
        assert!(single.get(f).is_some(), "{f} missing in {single}");
    }
    assert_eq!(single["model"], "demo");
    assert_eq!(single["image"], "vllm/vllm-openai:v0.25.0");
    assert!(single["metrics"]["mean_tpot"].as_f64().unwrap() > 0.0);
    // Published by a sweep 2 to 9 days ago, not today.
    let seeded = published.seeded_on("demo-fp4-b200-vllm");
    let days_ago = (today - seeded).num_days();
    assert!((2..=9).contains(&days_ago), "{seeded}");
    assert_eq!(single["date"], seeded.to_string());
    let seeded_url = single["run_url"].as_str().unwrap().to_owned();
    assert!(
        seeded_url.contains("/actions/runs/") && seeded_url.ends_with("/attempts/1"),
        "{seeded_url}"
    );
    // As of today is the latest; the same question gets the same answer.
    let (_, as_of) = get(format!(
        "{api}/api/v1/benchmarks?model=Klaud-Demo-Bench&date={today}"
    ))
    .await;
    assert_eq!(as_of, all_rows);
    // Today's rows exactly: nothing was published today.
    let (s, exact) = get(format!(
        "{api}/api/v1/benchmarks?model=Klaud-Demo-Bench&date={today}&exact=true"
    ))
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(exact, json!([]));
    // The seeded day exactly: that family's rows; the day before: none of them.
    let (_, exact) = get(format!(
        "{api}/api/v1/benchmarks?model=Klaud-Demo-Bench&date={seeded}&exact=true"
    ))
    .await;
    assert!(
        exact
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["run_url"] == seeded_url.as_str())
    );
    let before = seeded.pred_opt().unwrap();
    let (_, earlier) = get(format!(
        "{api}/api/v1/benchmarks?model=Klaud-Demo-Bench&date={before}"
    ))
    .await;
    assert!(
        earlier
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["run_url"] != seeded_url.as_str()),
        "{earlier}"
    );

    // A partial re-sweep with another image answers for its points only:
    // every other point keeps its own newest row.
    let r = t
        .http
        .post(format!("{api}/_control/published"))
        .json(&json!({"key": "demo-fp4-b200-vllm", "conc": [8],
                      "image": "vllm/vllm-openai:v0.26.0", "date": "2026-09-20"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let run: Value = r.json().await.unwrap();
    assert_eq!(run["date"], "2026-09-20");
    let run_id = run["run_id"].as_u64().unwrap();
    let (_, latest) = get(format!("{api}/api/v1/benchmarks?model=Klaud-Demo-Bench")).await;
    let latest = v4(&latest);
    let line: Vec<&Value> = latest.iter().filter(|r| r["hardware"] == "b200").collect();
    assert_eq!(line.len(), 5, "{latest:?}");
    for r in line {
        if r["conc"] == 8 {
            assert_eq!(r["image"], "vllm/vllm-openai:v0.26.0");
            assert_eq!(r["date"], "2026-09-20");
            assert!(
                r["run_url"]
                    .as_str()
                    .unwrap()
                    .contains(&format!("/actions/runs/{run_id}/attempts/1"))
            );
        } else {
            assert_eq!(r["image"], "vllm/vllm-openai:v0.25.0", "{r}");
            assert_eq!(r["date"], seeded.to_string(), "{r}");
            assert_eq!(r["run_url"], seeded_url.as_str(), "{r}");
        }
    }
    // The disaggregated family's points are untouched.
    assert_eq!(latest.len(), 8);
    // As of the day before the re-sweep, the seeded run still answers.
    let (_, before) = get(format!(
        "{api}/api/v1/benchmarks?model=Klaud-Demo-Bench&date=2026-09-19"
    ))
    .await;
    let before: Vec<Value> = v4(&before)
        .into_iter()
        .filter(|r| r["hardware"] == "b200")
        .collect();
    assert_eq!(before.len(), 5);
    assert!(before.iter().all(|r| r["date"] == seeded.to_string()));
    let (_, info) = get(format!("{api}/api/v1/workflow-info?date=2026-09-20")).await;
    assert_eq!(info["runs"][0]["github_run_id"], run_id.to_string());
    assert_eq!(info["runs"][0]["date"], "2026-09-20");
    assert!(
        info["configs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["hardware"] == "b200" && c["isl"] == 1024)
    );
    let (_, info) = get(format!("{api}/api/v1/workflow-info?date={today}")).await;
    assert_eq!(info["runs"], json!([]));

    // An unknown display name is the real API's 400: names are looked up
    // exactly, and neither the prefix nor a `model:` path is a name.
    for path in [
        "/api/v1/benchmarks?model=Demo-X9",
        "/api/v1/benchmarks?model=Demo-X9&date=2026-09-01&exact=true",
        "/api/v1/benchmarks?date=2026-09-01",
        "/api/v1/benchmarks?model=Klaud-Demo",
        "/api/v1/benchmarks?model=klaud-demo-bench",
        "/api/v1/benchmarks?model=demo",
        "/api/v1/benchmarks?model=Demo-V4",
        "/api/v1/benchmarks?model=demo/Demo-V4",
    ] {
        let (s, v) = get(format!("{api}{path}")).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{path}");
        assert_eq!(v, json!({"error": "Unknown model"}), "{path}");
    }
    // A day the database cannot read throws in the app's query: its 500.
    for path in [
        "/api/v1/benchmarks?model=Klaud-Demo-Bench&date=yesterday",
        "/api/v1/workflow-info?date=2026-13-01",
    ] {
        let (s, v) = get(format!("{api}{path}")).await;
        assert_eq!(s, StatusCode::INTERNAL_SERVER_ERROR, "{path}");
        assert_eq!(v, json!({"error": "Internal server error"}), "{path}");
    }
    let (s, v) = get(format!("{api}/api/v1/workflow-info?date=20260920")).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(
        v,
        json!({"error": "Invalid date format (YYYY-MM-DD required)"})
    );
}

#[test]
fn malformed_script_files_give_clear_errors_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "[families.a]\nsmoke = [\"succes\"]\n",
            "families.a.smoke[0].outcome",
        ),
        (
            "[families.a]\nsmoke = [{ outcome = \"success\", throughput = 0 }]\n",
            "families.a.smoke[0].throughput",
        ),
        (
            "[families.a]\nsweep = [\"success\", \"delay:3\"]\n",
            "families.a.sweep[1]",
        ),
        (
            "[families.a]\nsmoke = [\"delay:-1\", \"success\"]\n",
            "families.a.smoke[0].delay",
        ),
    ];
    for (i, (text, field)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("s{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let err = Script::from_file(&path).unwrap_err().to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(err.contains(&format!("`{field}`")), "{text:?}: {err}");
    }
    let path = dir.path().join("syntax.toml");
    std::fs::write(&path, "[families.a]\nsmoke = [\"success\"\n").unwrap();
    let err = Script::from_file(&path).unwrap_err().to_string();
    assert!(
        err.contains("syntax.toml") && err.contains("smoke"),
        "{err}"
    );
    let err = Script::from_file(&dir.path().join("absent.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("absent.toml") && err.contains("cannot read"),
        "{err}"
    );

    // The shipped example parses.
    Script::from_file(&PathBuf::from(crate::support::REPO_ROOT).join("configs/demo-ci.toml"))
        .unwrap();

    // The command line refuses a bad script before serving anything.
    let bad = dir.path().join("s0.toml");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_klaud"))
        .args(["sandbox", "--ci"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("families.a.smoke[0].outcome"), "{err}");
    assert!(out.stdout.is_empty());
}

/// Kills the child (by its own handle) when the test ends, even on panic.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn sandbox_with_ci_runs_dispatched_workflows_by_itself() {
    use std::io::BufRead;
    let root = PathBuf::from(crate::support::REPO_ROOT);
    let mut child = Child(
        std::process::Command::new(env!("CARGO_BIN_EXE_klaud"))
            .arg("sandbox")
            .arg("--seed")
            .arg(root.join("configs/demo"))
            .arg("--ci")
            .arg(root.join("configs/demo-ci.toml"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap();
        line
    })
    .await
    .unwrap();
    let info: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(info["ci"], true);
    let api = info["github_api"].as_str().unwrap();
    let token = info["bot_token"].as_str().unwrap();
    let repo = info["repo"].as_str().unwrap();
    let http = klaud_http::http_client_builder()
        .user_agent("klaud-test")
        .build()
        .unwrap();
    let main: Value = http
        .get(format!("{api}/repos/{repo}/git/ref/heads/main"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let sha = main["object"]["sha"].as_str().unwrap();
    // demo-fp8-h200-trt is scripted to fail first on a sick node, whose
    // name its jobs carry and whose log says what is wrong.
    let dispatched: Value = http
        .post(format!("{api}/repos/{repo}/actions/workflows/e2e-tests.yml/dispatches"))
        .bearer_auth(token)
        .json(&json!({
            "ref": "main",
            "inputs": {
                "ref": sha,
                "generate-cli-command": format!("test-config --config-files {MASTER} --config-keys demo-fp8-h200-trt --smoke"),
                "test-name": "klaud-1-x",
            },
            "return_run_details": true,
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = dispatched["workflow_run_id"].as_u64().unwrap();
    let start = tokio::time::Instant::now();
    let run = loop {
        let run: Value = http
            .get(format!("{api}/repos/{repo}/actions/runs/{id}"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if run["status"] == "completed" {
            break run;
        }
        assert!(start.elapsed() < PATIENCE, "{run}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(run["conclusion"], "failure");
    let jobs: Value = http
        .get(format!("{api}/repos/{repo}/actions/runs/{id}/jobs"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let failed = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["conclusion"] == "failure")
        .expect("a failed job")
        .clone();
    assert_eq!(failed["runner_name"], "mia1-p01-g09", "{failed}");
    let log = http
        .get(format!(
            "{api}/repos/{repo}/actions/jobs/{}/logs",
            failed["id"]
        ))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(log.contains("srun: error: pyxis is broken"), "{log}");

    let baseline = info["baseline_api"].as_str().unwrap();
    let rows: Value = http
        .get(format!(
            "{baseline}/api/v1/benchmarks?model=Klaud-Demo-Bench"
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // demo-fp8-h200-trt (4..32: 4 points) and demo-fp8-mi355x-sglang (4..64: 5).
    let fp8 = rows
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["precision"] == "fp8")
        .count();
    assert_eq!(fp8, 9, "{rows}");
}

#[test]
fn every_real_inferencex_family_expands_into_points() {
    let Some(full) = support::inferencex_full() else {
        return;
    };
    let mut families = 0;
    let mut points = 0;
    for file in ["configs/nvidia-master.yaml", "configs/amd-master.yaml"] {
        let text = std::fs::read_to_string(full.join(file)).unwrap();
        let doc = klaud_sandbox::ci::points::parse_master(file, &text).unwrap();
        for key in doc.as_object().unwrap().keys() {
            let spec = klaud_sandbox::ci::points::family_spec(file, key, &doc)
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(!spec.points.is_empty(), "{file}:{key} has no points");
            families += 1;
            points += spec.points.len();
        }
    }
    assert_eq!(families, 152 + 56);
    eprintln!("{families} real families expand into {points} points");
}

#[tokio::test]
async fn a_real_inferencex_family_runs_at_its_exact_head() {
    let Some(full) = support::inferencex_full() else {
        return;
    };
    let (st, main) = support::GithubOnly::new(REPO)
        .user(BOT, None, Some(Permission::Write))
        .token(BOT, TOKEN, None)
        .seed_dir(&full, BOT)
        .state()
        .await;
    let main = main.expect("seeded");
    let sim = support::serve(st.clone()).await;
    let ci = CiSim::spawn(st, Script::all_success());
    let t = T {
        sim,
        ci,
        http: klaud_http::http_client_builder()
            .user_agent("klaud-test")
            .build()
            .unwrap(),
        main,
    };
    for key in [
        "dsr1-fp4-b200-sglang",
        "dsv4-fp4-gb200-dynamo-vllm-agentic-mtp-disagg",
    ] {
        let id = t.dispatch(key, &t.main).await;
        let run = t.completed(id).await;
        assert_eq!(run["conclusion"], "success", "{key}: {run}");
        let arts = t.artifacts(id).await;
        let agg = json_of(&arts["results_bmk"]["agg_bmk.json"]);
        let rows = agg.as_array().unwrap();
        assert!(!rows.is_empty(), "{key}");
        // One result file per point, in one artifact per benchmark job.
        let per_point: usize = arts
            .iter()
            .filter(|(n, _)| n.starts_with("bmk_"))
            .map(|(_, files)| files.len())
            .sum();
        assert_eq!(per_point, rows.len(), "{key}: one file per point");
        if key.contains("disagg") {
            // A multi-node job runs its whole conc-list: `<R>_conc<C>.json`
            // files in `bmk_agentic_<R>`, R naming every concurrency.
            let jobs: Vec<(&String, &std::collections::BTreeMap<String, Vec<u8>>)> = arts
                .iter()
                .filter(|(n, _)| n.starts_with("bmk_agentic_"))
                .collect();
            assert!(!jobs.is_empty(), "{key}: {:?}", arts.keys());
            assert!(jobs.len() < rows.len(), "{key}: jobs group points");
            for (name, files) in jobs {
                let result = name.trim_start_matches("bmk_agentic_");
                for file in files.keys() {
                    let conc = file
                        .strip_prefix(&format!("{result}_conc"))
                        .and_then(|rest| rest.strip_suffix(".json"))
                        .unwrap_or_else(|| panic!("{name}: {file}"));
                    let concs = result.rsplit_once("_conc").map(|(_, c)| c).unwrap_or("");
                    assert!(concs.split('x').any(|c| c == conc), "{name}: {file}");
                }
            }
            assert!(
                arts.keys()
                    .any(|n| n.starts_with("eval_") && n != "eval_results_all"),
                "{key}: the job's eval artifact: {:?}",
                arts.keys()
            );
        }
    }
}
