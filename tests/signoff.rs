//! `klaud signoff` against the GitHub simulator seeded with seed 001
//! (InferenceX PR #2184): the 7abe6612 checklist and prompt on `main`, the
//! PR's changed paths on a branch, a green sweep with its eval results on
//! the head, the reuse command and the CODEOWNER's sign-off, posted by
//! people the sandbox's users route made. The repository files are read in
//! place from `../shared/fixtures/inferencex/`; without them these tests
//! skip loudly, and fail when `CI` is set.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use klaud_sandbox::github::{GithubSim, Permission};
use serde_json::{Value, json};

use crate::support::GithubOnly;

const REPO: &str = "SemiAnalysisAI/InferenceX";
const BOT: &str = "Klaud-Cold";
const BOT_TOKEN: &str = "ghp_signoffBOTtoken0123456789abcdef";
const TP1_IMAGE: &str = "vllm/vllm-openai:nightly-2dfaae752b4db0d43cfc0715c780e33be030d0f1";
const RECIPES: &str = "benchmarks/multi_node/srt-slurm-recipes/vllm/minimax-m3/b300-fp4/8k1k";

/// The shared InferenceX fixtures (`full/` and `signoff/`), by the shared
/// rule: skipped loudly on a developer machine without them, a failure on CI.
fn fixtures() -> Option<PathBuf> {
    let dir = crate::support::inferencex_full()?.parent()?.to_path_buf();
    assert!(
        dir.join("signoff/seed-001-pr-thread.txt").is_file(),
        "the sign-off fixtures are missing at {}",
        dir.join("signoff").display()
    );
    Some(dir)
}

fn read(dir: &Path, path: &str) -> String {
    std::fs::read_to_string(dir.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The seed's sign-off as markdown: the thread is rendered text, so its
/// bullets become the template's checked boxes again.
fn seed_signoff(dir: &Path) -> String {
    let thread = read(dir, "signoff/seed-001-pr-thread.txt");
    let start = thread
        .find("As a PR reviewer and CODEOWNER, I have reviewed this and have:\n\n•")
        .expect("seed sign-off");
    let end = thread[start..]
        .find("Signed: Ankur-singh")
        .expect("signature")
        + start;
    let mut out = String::new();
    let mut in_detail = false;
    for line in thread[start..end].lines() {
        if line.starts_with("Additional detail section") {
            in_detail = true;
            out.push_str("### Additional detail section:\n");
            continue;
        }
        let converted = if let Some(rest) = line.strip_prefix("  • ") {
            format!("  - [x] {rest}")
        } else if let Some(rest) = line.strip_prefix("• ") {
            if in_detail {
                format!("- {rest}")
            } else {
                format!("- [x] {rest}")
            }
        } else {
            line.to_owned()
        };
        if !converted.is_empty() {
            out.push_str(&converted);
            out.push('\n');
        }
    }
    out.push_str("\nSigned: Ankur-singh\n");
    out
}

/// A top-level key's block of a master config, as written.
fn entry_block(text: &str, key: &str) -> String {
    let start = text.find(&format!("\n{key}:\n")).expect(key) + 1;
    let rest = &text[start..];
    let end = rest[1..].find("\n\n").map_or(rest.len(), |at| at + 2);
    rest[..end].to_owned()
}

struct Seeded {
    sim: GithubSim,
    pr: u64,
    head: String,
    run_id: u64,
}

impl Seeded {
    fn url(&self) -> String {
        self.sim.url()
    }
}

async fn call(
    base: &str,
    token: Option<&str>,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Value {
    let http = klaud_http::http_client().expect("http client");
    let mut req = http
        .request(method, format!("{base}{path}"))
        .header("User-Agent", "klaud-test");
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status();
    let value = resp.json::<Value>().await.unwrap_or(Value::Null);
    assert!(status.is_success(), "{path}: {status} {value}");
    value
}

/// Sets `login`'s permission on `repo` through the sandbox's control route.
async fn grant(base: &str, repo: &str, login: &str, permission: &str) {
    let http = klaud_http::http_client().expect("http client");
    let answer = http
        .put(format!(
            "{base}/_sandbox/repos/{repo}/collaborators/{login}"
        ))
        .json(&json!({"permission": permission}))
        .send()
        .await
        .expect("set permission");
    assert!(answer.status().is_success(), "{}", answer.status());
}

/// A person made through `POST /_sandbox/users`; answers their token.
async fn person(base: &str, login: &str, permission: &str, kind: &str) -> String {
    let made = call(
        base,
        None,
        reqwest::Method::POST,
        "/_sandbox/users",
        Some(json!({"login": login, "permission": permission, "type": kind})),
    )
    .await;
    made["token"].as_str().expect("token").to_owned()
}

async fn comment(base: &str, token: &str, pr: u64, body: &str) -> Value {
    call(
        base,
        Some(token),
        reqwest::Method::POST,
        &format!("/repos/{REPO}/issues/{pr}/comments"),
        Some(json!({"body": body})),
    )
    .await
}

/// What a negative case changes in the seed's repository and pull request.
#[derive(Default)]
struct Tweak {
    /// The contract folder on `main` (`7abe6612` unless named).
    contract: Option<&'static str>,
    /// A master-config entry the pull request adds to `configs/nvidia-master.yaml`.
    entry: Option<&'static str>,
    /// Files the pull request adds or changes besides the seed's.
    files: Vec<(&'static str, String)>,
    /// `docs/waiver/<PR>.md`, pushed once the pull request has its number.
    waiver: Option<String>,
    /// The eval scores of the sweep (the seed's when empty).
    scores: Vec<f64>,
    /// The sweep's benchmark jobs failed.
    failed_sweep: bool,
    /// Rows of the sweep's `results_bmk/agg_bmk.json` (none when empty).
    bench_rows: Vec<Value>,
    /// `.github/CODEOWNERS` on `main` (the newer fixture's unless set).
    codeowners: Option<String>,
}

/// The seed's repository and pull request, with the green sweep and the
/// reuse command; the sign-off is left to each test.
async fn seed(dir: &Path) -> (Seeded, BTreeMap<String, String>) {
    seed_with(dir, &Tweak::default()).await
}

/// [`seed`] with one negative case's change.
async fn seed_with(dir: &Path, tweak: &Tweak) -> (Seeded, BTreeMap<String, String>) {
    let contract = tweak.contract.unwrap_or("7abe6612");
    let archive = read(
        dir,
        "full/configs/deprecated/nvidia-minimaxm3-8k1k-master.yaml",
    );
    let single = entry_block(&archive, "minimaxm3-fp4-b300-vllm");
    let tp1 = entry_block(&archive, "minimaxm3-fp4-b300-dynamo-vllm-8k1k-tp1").replace(
        "vllm/vllm-openai:nightly-5e35a6f4f9bbc217c599692157ca985c894373f7",
        TP1_IMAGE,
    );
    let legacy = entry_block(
        &archive,
        "minimaxm3-fp4-b300-dynamo-vllm-8k1k-legacy-max-tput",
    );
    let launcher = read(dir, "full/runners/launch_b300-nv.sh");
    let tp1_branch_at = launcher
        .find("elif [[ $FRAMEWORK == \"dynamo-vllm\" && $MODEL_PREFIX == \"minimaxm3\" && $PRECISION == \"fp4\" && \"$CONFIG_FILE\" == recipes/vllm/minimax-m3/b300-fp4/8k1k/*-tp1-*.yaml ]]; then")
        .expect("the TP1 branch of the launcher");
    let tp1_branch_end = tp1_branch_at
        + launcher[tp1_branch_at + 1..]
            .find("\nelif ")
            .expect("next branch")
        + 1;
    let base_launcher = format!(
        "{}{}",
        &launcher[..tp1_branch_at],
        &launcher[tp1_branch_end + 1..]
    );

    let mut main: Vec<(String, Vec<u8>)> = vec![
        (".github/codeowner-signoff-verify-prompt.md".into(), read(dir, &format!("signoff/{contract}/.github/codeowner-signoff-verify-prompt.md")).into_bytes()),
        ("docs/PR_REVIEW_CHECKLIST.md".into(), read(dir, &format!("signoff/{contract}/docs/PR_REVIEW_CHECKLIST.md")).into_bytes()),
        (".github/CODEOWNERS".into(), tweak.codeowners.clone().unwrap_or_else(|| read(dir, "signoff/newer/.github/CODEOWNERS")).into_bytes()),
        ("MODELS.md".into(), read(dir, "full/MODELS.md").into_bytes()),
        ("configs/nvidia-master.yaml".into(), single.clone().into_bytes()),
        ("runners/launch_b300-nv.sh".into(), base_launcher.into_bytes()),
        ("perf-changelog.yaml".into(), b"- config-keys:\n  - minimaxm3-fp4-b300-vllm\n  pr-link: https://github.com/SemiAnalysisAI/InferenceX/pull/2198\n".to_vec()),
    ];
    for entry in std::fs::read_dir(dir.join("full/golden_al_distribution")).expect("golden") {
        let entry = entry.expect("entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        main.push((
            format!("golden_al_distribution/{name}"),
            std::fs::read(entry.path()).expect("golden file"),
        ));
    }
    let main_refs: Vec<(&str, &[u8])> = main
        .iter()
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect();
    let sim = GithubOnly::new(REPO)
        .user(BOT, Some("Klaud Cold"), Some(Permission::Write))
        .user("SemiAnalysisAI", None, None)
        .token(BOT, BOT_TOKEN, Some(u64::MAX))
        .files("SemiAnalysisAI", "seed", &main_refs)
        .start()
        .await;
    let base = sim.url();
    let author = person(&base, "jasonlizhengjian", "write", "User").await;
    let mut tokens = BTreeMap::new();
    tokens.insert(
        "Ankur-singh".to_owned(),
        person(&base, "Ankur-singh", "write", "User").await,
    );
    tokens.insert("jasonlizhengjian".to_owned(), author.clone());

    let mut files: BTreeMap<String, Option<Vec<u8>>> = BTreeMap::new();
    let extra = tweak.entry.map_or_else(String::new, |e| format!("\n{e}"));
    files.insert(
        "configs/nvidia-master.yaml".into(),
        Some(format!("{single}\n{tp1}\n{legacy}{extra}").into_bytes()),
    );
    for (path, text) in &tweak.files {
        files.insert((*path).to_owned(), Some(text.clone().into_bytes()));
    }
    files.insert(
        "runners/launch_b300-nv.sh".into(),
        Some(launcher.into_bytes()),
    );
    files.insert("perf-changelog.yaml".into(), Some(b"- config-keys:\n  - minimaxm3-fp4-b300-vllm\n  pr-link: https://github.com/SemiAnalysisAI/InferenceX/pull/2198\n\n- config-keys:\n  - minimaxm3-fp4-b300-dynamo-vllm-8k1k-tp1\n  - minimaxm3-fp4-b300-dynamo-vllm-8k1k-legacy-max-tput\n  pr-link: https://github.com/SemiAnalysisAI/InferenceX/pull/2184\n".to_vec()));
    for recipe in [
        "1p1d-tp1-tp4",
        "1p1d-tp1-tp8",
        "2p1d-tp1-tp4",
        "3p1d-tp1-tp4",
        "5p2d-tp1-dep8",
        "8p2d-tp1-dep8",
    ] {
        files.insert(
            format!("{RECIPES}/{recipe}-8k1k.yaml"),
            Some(format!("name: minimax-m3-{recipe}\nmodel:\n  path: /scratch/models/MiniMax-M3-NVFP4\n  container: {TP1_IMAGE}\n").into_bytes()),
        );
    }
    // The branch starts at `main`, as a contributor's branch does.
    let main_sha = call(
        &base,
        Some(&author),
        reqwest::Method::GET,
        &format!("/repos/{REPO}/git/ref/heads/main"),
        None,
    )
    .await["object"]["sha"]
        .as_str()
        .expect("main")
        .to_owned();
    call(
        &base,
        Some(&author),
        reqwest::Method::POST,
        &format!("/repos/{REPO}/git/refs"),
        Some(json!({"ref": "refs/heads/minimax-8k1k-tp1", "sha": main_sha})),
    )
    .await;
    let mut head = sim
        .state()
        .push_commit(
            REPO,
            "minimax-8k1k-tp1",
            "jasonlizhengjian",
            files,
            "Update 8k1k B300 Minimax Dynamo Disagg",
        )
        .await
        .expect("push");
    let pr = call(
        &base,
        Some(&author),
        reqwest::Method::POST,
        &format!("/repos/{REPO}/pulls"),
        Some(
            json!({"title": "Update MiniMax-M3 NVFP4 B300 8k1k disaggregated Dynamo-vLLM sweep",
                    "head": "minimax-8k1k-tp1", "base": "main", "body": "Summary"}),
        ),
    )
    .await["number"]
        .as_u64()
        .expect("number");
    if let Some(waiver) = &tweak.waiver {
        let mut files = BTreeMap::new();
        files.insert(
            format!("docs/waiver/{pr}.md"),
            Some(waiver.clone().into_bytes()),
        );
        head = sim
            .state()
            .push_commit(
                REPO,
                "minimax-8k1k-tp1",
                "jasonlizhengjian",
                files,
                "waiver",
            )
            .await
            .expect("push the waiver");
    }

    let mut jobs = Vec::new();
    for conc in ["8", "1", "128", "256", "512", "768", "4096"] {
        for group in ["multi-node 8k1k", "multi-node eval"] {
            let failed = tweak.failed_sweep && group == "multi-node 8k1k" && conc == "512";
            let conclusion = if failed { "failure" } else { "success" };
            jobs.push(json!({"name": format!("{group} / p1 | minimaxm3 fp4 b300 dynamo-vllm c{conc}"), "conclusion": conclusion}));
        }
    }
    jobs.push(json!({"name": "single-node 8k1k / benchmark", "conclusion": "skipped"}));
    let seed_scores = [0.951, 0.955, 0.961, 0.958, 0.953, 0.957, 0.960];
    let scores: &[f64] = if tweak.scores.is_empty() {
        &seed_scores
    } else {
        &tweak.scores
    };
    let rows: Vec<Value> = scores
        .iter()
        .enumerate()
        .map(|(i, s)| json!({"model_prefix": "minimaxm3", "hw": "B300", "framework": "dynamo-vllm", "precision": "fp4",
                             "conc": i as u64 + 1, "task": "gsm8k", "em_strict": s, "score": s, "score_name": "em_strict"}))
        .collect();
    let mut artifacts =
        json!({"eval_results_all": {"agg_eval_all.json": Value::Array(rows).to_string()}});
    if !tweak.bench_rows.is_empty() {
        artifacts["results_bmk"] =
            json!({"agg_bmk.json": Value::Array(tweak.bench_rows.clone()).to_string()});
    }
    let run = call(
        &base,
        None,
        reqwest::Method::POST,
        &format!("/_sandbox/repos/{REPO}/runs"),
        Some(json!({"head_sha": head, "jobs": jobs, "artifacts": artifacts})),
    )
    .await;
    let run_id = run["id"].as_u64().expect("run id");
    comment(
        &base,
        &tokens["Ankur-singh"],
        pr,
        &format!("/reuse-sweep-run {run_id}"),
    )
    .await;
    (
        Seeded {
            sim,
            pr,
            head,
            run_id,
        },
        tokens,
    )
}

async fn klaud(seeded: &Seeded, args: &[&str]) -> Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_klaud"));
    cmd.arg("signoff")
        .args([
            "--github-api",
            &seeded.url(),
            "--repo",
            REPO,
            "--pr",
            &seeded.pr.to_string(),
        ])
        .args(args)
        .env_remove("GITHUB_TOKEN")
        .env_remove("KLAUD_CONFIG")
        .env("KLAUD_GITHUB_TOKEN", BOT_TOKEN);
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("klaud runs"))
        .await
        .expect("join");
    for stream in [&out.stdout, &out.stderr] {
        assert!(
            !String::from_utf8_lossy(stream).contains(BOT_TOKEN),
            "the token leaked"
        );
    }
    out
}

fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "klaud signoff failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

async fn combined_status(seeded: &Seeded) -> Value {
    call(
        &seeded.url(),
        Some(BOT_TOKEN),
        reqwest::Method::GET,
        &format!("/repos/{REPO}/commits/{}/status", seeded.head),
        None,
    )
    .await
}

async fn verdict_comments(seeded: &Seeded) -> Vec<String> {
    call(
        &seeded.url(),
        Some(BOT_TOKEN),
        reqwest::Method::GET,
        &format!("/repos/{REPO}/issues/{}/comments", seeded.pr),
        None,
    )
    .await
    .as_array()
    .expect("comments")
    .iter()
    .filter_map(|c| c["body"].as_str())
    .filter(|b| b.starts_with("<!-- codeowner-signoff-verify"))
    .map(str::to_owned)
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_001_replays_through_the_sandbox_as_the_seeds_pass_verdict() {
    let Some(dir) = fixtures() else { return };
    let (seeded, tokens) = seed(&dir).await;
    let signoff = comment(
        &seeded.url(),
        &tokens["Ankur-singh"],
        seeded.pr,
        &seed_signoff(&dir),
    )
    .await;

    let verdict = json_of(&klaud(&seeded, &["--dry-run", "--json"]).await);
    let rows: Vec<(u64, String)> = verdict["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .map(|c| {
            (
                c["number"].as_u64().unwrap(),
                c["result"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected: Vec<(u64, String)> = [
        "PASS", "PASS", "PASS", "N/A", "PASS", "PASS", "PASS", "PASS", "N/A", "PASS", "N/A",
    ]
    .iter()
    .enumerate()
    .map(|(n, r)| (n as u64, (*r).to_owned()))
    .collect();
    assert_eq!(rows, expected, "{verdict:#}");
    assert_eq!(verdict["verdict"], "PASS");
    assert_eq!(verdict["signer"], "Ankur-singh");
    assert_eq!(verdict["assessed_commit"], seeded.head.as_str());
    let reason = |n: usize| verdict["checks"][n]["reason"].as_str().unwrap().to_owned();
    assert!(
        reason(1).contains(&format!("run {}", seeded.run_id)),
        "{}",
        reason(1)
    );
    assert!(
        reason(2).contains("7/7 GSM8K em_strict 0.951–0.961 vs 0.85 bar"),
        "{}",
        reason(2)
    );
    assert_eq!(
        reason(4),
        format!(
            "/reuse-sweep-run {} posted by Ankur-singh (COLLABORATOR).",
            seeded.run_id
        )
    );
    assert!(
        verdict_comments(&seeded).await.is_empty(),
        "--dry-run publishes nothing"
    );

    // Published: one marked comment and the status the ruleset requires.
    let out = klaud(
        &seeded,
        &["--comment-url", signoff["html_url"].as_str().unwrap()],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let comments = verdict_comments(&seeded).await;
    assert_eq!(comments.len(), 1);
    let mut lines = comments[0].lines();
    assert_eq!(
        lines.next(),
        Some(format!("<!-- codeowner-signoff-verify sha={} -->", seeded.head).as_str())
    );
    assert_eq!(lines.next(), Some("## ✅✅✅ **Verdict: PASS** ✅✅✅"));
    assert!(
        comments[0]
            .contains("\n➖ Check 3 (Recipe link): N/A — disaggregated/multi-node submission")
    );
    let status = combined_status(&seeded).await;
    assert_eq!(status["state"], "success", "{status:#}");
    assert_eq!(status["statuses"][0]["context"], "codeowner-signoff-verify");

    // Verifying again edits the same comment rather than adding one.
    let out = klaud(&seeded, &[]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(verdict_comments(&seeded).await.len(), 1);

    // A push after the sweep: the verdict names the new head, in the same
    // comment, and the sweep's commit still counts (it is in the PR), but
    // whether its evals ran this head's images needs a reviewer: no PASS
    // is borrowed for the new commit.
    let mut files = BTreeMap::new();
    files.insert("docs/notes.md".to_owned(), Some(b"notes\n".to_vec()));
    let new_head = seeded
        .sim
        .state()
        .push_commit(REPO, "minimax-8k1k-tp1", "jasonlizhengjian", files, "notes")
        .await
        .expect("push");
    let verdict = json_of(&klaud(&seeded, &["--json"]).await);
    assert_eq!(verdict["assessed_commit"], new_head.as_str());
    assert_eq!(verdict["checks"][1]["result"], "PASS", "{verdict:#}");
    assert_eq!(verdict["checks"][2]["result"], "WARN", "{verdict:#}");
    let comments = verdict_comments(&seeded).await;
    assert_eq!(comments.len(), 1);
    assert!(comments[0].starts_with(&format!("<!-- codeowner-signoff-verify sha={new_head} -->")));
    let status = call(
        &seeded.url(),
        Some(BOT_TOKEN),
        reqwest::Method::GET,
        &format!("/repos/{REPO}/commits/{new_head}/status"),
        None,
    )
    .await;
    assert_eq!(status["state"], "failure", "{status:#}");
}

/// Posts `body` as a sign-off with `token`, verifies and publishes it, and
/// answers the verdict, Klaud's one verdict comment and the head's status.
async fn signed(seeded: &Seeded, token: &str, body: &str) -> (Value, String, Value) {
    comment(&seeded.url(), token, seeded.pr, body).await;
    let verdict = json_of(&klaud(seeded, &["--json"]).await);
    let comments = verdict_comments(seeded).await;
    assert_eq!(comments.len(), 1, "{comments:?}");
    (verdict, comments[0].clone(), combined_status(seeded).await)
}

/// Check `n` of `verdict`: its result, a piece of its reason and of one
/// evidence item, and its row in the published comment with the matching
/// emoji, its reason and its evidence line.
fn assert_row(
    verdict: &Value,
    published: &str,
    n: usize,
    result: &str,
    reason: &str,
    evidence: &str,
) {
    let check = &verdict["checks"][n];
    assert_eq!(check["number"], n as u64, "{verdict:#}");
    assert_eq!(check["result"], result, "check {n}: {check:#}");
    let why = check["reason"].as_str().expect("reason");
    assert!(why.contains(reason), "check {n}: {why}");
    let items: Vec<&str> = check["evidence"]
        .as_array()
        .expect("evidence")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        items.iter().any(|e| e.contains(evidence)),
        "check {n} evidence lacks {evidence:?}: {items:?}"
    );
    let emoji = match result {
        "PASS" => "✅",
        "FAIL" => "❌",
        "WARN" => "⚠️",
        _ => "➖",
    };
    let row = format!(
        "{emoji} Check {n} ({}): {result} — ",
        check["name"].as_str().expect("name")
    );
    let line = published
        .lines()
        .find(|l| l.contains(&row))
        .unwrap_or_else(|| panic!("no row {row:?} in:\n{published}"));
    let first_words: String = reason
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        line.contains(&first_words),
        "the row does not carry the reason: {line}"
    );
    assert!(
        published.contains(&format!("- Check {n}: ")),
        "no evidence line for check {n}:\n{published}"
    );
}

/// A verdict that rejects: header, the signer told what blocks, and the
/// status the ruleset reads.
fn assert_rejected(verdict: &Value, published: &str, status: &Value) {
    assert_eq!(verdict["verdict"], "REJECTED", "{verdict:#}");
    assert_eq!(
        published.lines().nth(1),
        Some("## ❌❌❌ **REJECTED** ❌❌❌")
    );
    assert!(
        published.contains("\n@Ankur-singh this sign-off is blocked by Check "),
        "{published}"
    );
    assert_eq!(status["state"], "failure", "{status:#}");
    assert_eq!(status["statuses"][0]["context"], "codeowner-signoff-verify");
    assert_eq!(status["statuses"][0]["description"], "REJECTED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_checklist_with_an_item_unchecked_or_missing_fails_check_5() {
    let Some(dir) = fixtures() else { return };
    let (seeded, tokens) = seed(&dir).await;
    let item = "Verified that the general code quality";
    let unchecked =
        seed_signoff(&dir).replacen(&format!("- [x] {item}"), &format!("- [ ] {item}"), 1);
    let (verdict, published, status) = signed(&seeded, &tokens["Ankur-singh"], &unchecked).await;
    assert_row(
        &verdict,
        &published,
        5,
        "FAIL",
        "unchecked items \"Verified that the general code quality",
        "unchecked: Verified that the general code quality",
    );
    assert_rejected(&verdict, &published, &status);

    // The same verdict comment is edited for the next sign-off.
    let missing: String = seed_signoff(&dir)
        .lines()
        .filter(|l| !l.contains(item))
        .map(|l| format!("{l}\n"))
        .collect();
    let (verdict, published, status) = signed(&seeded, &tokens["Ankur-singh"], &missing).await;
    assert_row(
        &verdict,
        &published,
        5,
        "FAIL",
        "missing current-template items \"Verified that the general code quality",
        "missing: Verified that the general code quality",
    );
    assert_rejected(&verdict, &published, &status);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_green_sweep_on_a_commit_in_the_pr_fails_checks_1_and_2() {
    let Some(dir) = fixtures() else { return };
    let tweak = Tweak {
        failed_sweep: true,
        ..Tweak::default()
    };
    let (seeded, tokens) = seed_with(&dir, &tweak).await;
    let (verdict, published, status) =
        signed(&seeded, &tokens["Ankur-singh"], &seed_signoff(&dir)).await;
    assert_row(
        &verdict,
        &published,
        1,
        "FAIL",
        "No passing sweep/eval was found on any commit in this PR",
        "multi-node 8k1k / p1 | minimaxm3 fp4 b300 dynamo-vllm c512 failure",
    );
    assert_eq!(verdict["checks"][2]["result"], "FAIL", "{verdict:#}");
    assert_rejected(&verdict, &published, &status);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evals_below_the_bar_fail_check_2() {
    let Some(dir) = fixtures() else { return };
    let tweak = Tweak {
        scores: vec![0.951, 0.955, 0.62, 0.958, 0.953, 0.957, 0.960],
        ..Tweak::default()
    };
    let (seeded, tokens) = seed_with(&dir, &tweak).await;
    let (verdict, published, status) =
        signed(&seeded, &tokens["Ankur-singh"], &seed_signoff(&dir)).await;
    assert_row(
        &verdict,
        &published,
        2,
        "FAIL",
        &format!(
            "Evals below the bar in run {}: minimaxm3 B300 dynamo-vllm fp4 c3 gsm8k 0.620 < 0.85",
            seeded.run_id
        ),
        "c3 gsm8k em_strict 0.620 vs 0.85",
    );
    assert_eq!(verdict["checks"][1]["result"], "PASS", "{verdict:#}");
    assert_rejected(&verdict, &published, &status);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_upstream_image_on_established_hardware_fails_check_6() {
    let Some(dir) = fixtures() else { return };
    let tweak = Tweak {
        entry: Some(
            "qwen3.5-fp8-mi355x-sglang:\n  image: rocm/sgl-dev:v0.5.9-rocm720-mi35x-20260301\n  model: Qwen/Qwen3.5-397B-A17B-FP8\n  model-prefix: qwen3.5\n  runner: mi355x\n  precision: fp8\n  framework: sglang\n  multinode: true\n  scenarios: {}\n",
        ),
        ..Tweak::default()
    };
    let (seeded, tokens) = seed_with(&dir, &tweak).await;
    let (verdict, published, status) =
        signed(&seeded, &tokens["Ankur-singh"], &seed_signoff(&dir)).await;
    assert_row(
        &verdict,
        &published,
        6,
        "FAIL",
        "No documented exception for qwen3.5-fp8-mi355x-sglang runs rocm/sgl-dev:v0.5.9-rocm720-mi35x-20260301, not an upstream lmsysorg/ image, on established hardware mi355x",
        "framework sglang, runner mi355x, image rocm/sgl-dev",
    );
    assert_rejected(&verdict, &published, &status);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deprecated_model_fails_check_7_of_the_843c6254_contract() {
    let Some(dir) = fixtures() else { return };
    let tweak = Tweak {
        contract: Some("843c6254"),
        entry: Some(
            "gptoss-fp4-b300-vllm:\n  image: vllm/vllm-openai:v0.11.0\n  model: openai/gpt-oss-120b\n  model-prefix: gptoss\n  runner: b300\n  precision: fp4\n  framework: vllm\n  multinode: true\n  scenarios: {}\n",
        ),
        ..Tweak::default()
    };
    let (seeded, tokens) = seed_with(&dir, &tweak).await;
    let (verdict, published, status) =
        signed(&seeded, &tokens["Ankur-singh"], &seed_signoff(&dir)).await;
    assert_eq!(verdict["checks"].as_array().map(Vec::len), Some(13));
    assert_row(
        &verdict,
        &published,
        7,
        "FAIL",
        "gptoss-fp4-b300-vllm submits deprecated model gptoss (retired in MODELS.md since 2026-07-06 (#2101)",
        "deprecated model gptoss",
    );
    assert_rejected(&verdict, &published, &status);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hf_overrides_in_the_diff_fail_the_architecture_check() {
    let Some(dir) = fixtures() else { return };
    let tweak = Tweak {
        files: vec![(
            "benchmarks/multi_node/minimax_m3_overrides.sh",
            "vllm serve $MODEL --hf-overrides '{\"index_topk_freq\": 4}'\n".to_owned(),
        )],
        ..Tweak::default()
    };
    let (seeded, tokens) = seed_with(&dir, &tweak).await;
    let (verdict, published, status) =
        signed(&seeded, &tokens["Ankur-singh"], &seed_signoff(&dir)).await;
    assert_row(
        &verdict,
        &published,
        7,
        "FAIL",
        "Architecture override in the diff: benchmarks/multi_node/minimax_m3_overrides.sh: --hf-overrides",
        "benchmarks/multi_node/minimax_m3_overrides.sh: --hf-overrides",
    );
    assert_rejected(&verdict, &published, &status);
}

const ENGINE_PATCH: (&str, &str) = (
    "benchmarks/multi_node/minimax_fix.sh",
    "python3 - <<'EOF'\nimport importlib.util\npath = importlib.util.find_spec('vllm').origin\nEOF\n",
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_patch_without_a_waiver_fails_check_9() {
    let Some(dir) = fixtures() else { return };
    let tweak = Tweak {
        files: vec![(ENGINE_PATCH.0, ENGINE_PATCH.1.to_owned())],
        ..Tweak::default()
    };
    let (seeded, tokens) = seed_with(&dir, &tweak).await;
    let (verdict, published, status) =
        signed(&seeded, &tokens["Ankur-singh"], &seed_signoff(&dir)).await;
    assert_row(
        &verdict,
        &published,
        9,
        "FAIL",
        &format!(
            "Engine patching without a waiver: benchmarks/multi_node/minimax_fix.sh: importlib.util.find_spec; this PR adds no docs/waiver/{}.md",
            seeded.pr
        ),
        "benchmarks/multi_node/minimax_fix.sh: importlib.util.find_spec",
    );
    assert_rejected(&verdict, &published, &status);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_patch_with_a_linked_waiver_passes_check_9() {
    let Some(dir) = fixtures() else { return };
    let tweak = Tweak {
        files: vec![(ENGINE_PATCH.0, ENGINE_PATCH.1.to_owned())],
        waiver: Some(read(&dir, "signoff/843c6254/docs/waiver/2508.md")),
        ..Tweak::default()
    };
    let (seeded, tokens) = seed_with(&dir, &tweak).await;
    let waiver = format!("docs/waiver/{}.md", seeded.pr);
    let linked = seed_signoff(&dir).replace(
        "### Additional detail section:\n",
        &format!("### Additional detail section:\n- Waiver: {waiver}\n"),
    );
    let (verdict, published, status) = signed(&seeded, &tokens["Ankur-singh"], &linked).await;
    assert_row(
        &verdict,
        &published,
        9,
        "PASS",
        &format!(
            "patching (benchmarks/multi_node/minimax_fix.sh: importlib.util.find_spec) is covered by {waiver}, added in this PR and linked in the sign-off"
        ),
        &format!("waiver {waiver} added in this PR and linked in the sign-off"),
    );
    assert_eq!(verdict["verdict"], "PASS", "{verdict:#}");
    assert_eq!(status["state"], "success", "{status:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agentic_speculative_decoding_without_the_golden_acceptance_length_fails_check_10() {
    let Some(dir) = fixtures() else { return };
    let recipe = "benchmarks/single_node/agentic/qwen3.5_fp4_b300_vllm_mtp.sh";
    let tweak = Tweak {
        files: vec![(
            recipe,
            "MODEL=nvidia/Qwen3.5-397B-A17B-NVFP4\nvllm serve $MODEL --speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 3}'\n".to_owned(),
        )],
        ..Tweak::default()
    };
    let (seeded, tokens) = seed_with(&dir, &tweak).await;
    let (verdict, published, status) =
        signed(&seeded, &tokens["Ankur-singh"], &seed_signoff(&dir)).await;
    assert_row(
        &verdict,
        &published,
        10,
        "FAIL",
        &format!("{recipe} runs real, unsimulated acceptance"),
        &format!("{recipe} runs real, unsimulated acceptance"),
    );
    assert_rejected(&verdict, &published, &status);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signer_who_owns_none_of_the_changed_files_is_rejected_and_mentioned() {
    let Some(dir) = fixtures() else { return };
    let (seeded, _) = seed(&dir).await;
    let amd = person(&seeded.url(), "billishyahao", "write", "User").await;
    comment(
        &seeded.url(),
        &amd,
        seeded.pr,
        &seed_signoff(&dir).replace("Signed: Ankur-singh", "Signed: billishyahao"),
    )
    .await;
    let out = klaud(&seeded, &[]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let comments = verdict_comments(&seeded).await;
    assert_eq!(comments.len(), 1);
    assert_eq!(
        comments[0].lines().nth(1),
        Some("## ❌❌❌ **REJECTED** ❌❌❌")
    );
    assert!(
        comments[0].contains("\n@billishyahao this sign-off is blocked by Check 0 (CODEOWNER).")
    );
    assert!(comments[0].contains("❌ Check 0 (CODEOWNER): FAIL — billishyahao is not a CODEOWNER of configs/nvidia-master.yaml"));
    assert_eq!(combined_status(&seeded).await["state"], "failure");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_or_a_bot_signing_off_is_not_verified_and_nothing_is_published() {
    let Some(dir) = fixtures() else { return };
    let (seeded, _) = seed(&dir).await;
    let reader = person(&seeded.url(), "curious-reader", "read", "User").await;
    comment(&seeded.url(), &reader, seeded.pr, &seed_signoff(&dir)).await;
    let verdict = json_of(&klaud(&seeded, &["--json"]).await);
    assert!(
        verdict["refused"]
            .as_str()
            .unwrap()
            .contains("needs write or admin"),
        "{verdict}"
    );

    let bot = person(&seeded.url(), "helper-bot[bot]", "write", "Bot").await;
    comment(&seeded.url(), &bot, seeded.pr, &seed_signoff(&dir)).await;
    let verdict = json_of(&klaud(&seeded, &["--json"]).await);
    assert!(
        verdict["refused"].as_str().unwrap().contains("is a bot"),
        "{verdict}"
    );
    assert!(verdict_comments(&seeded).await.is_empty());
    assert_eq!(combined_status(&seeded).await["total_count"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signoff_posted_as_a_review_is_verified_from_its_url() {
    let Some(dir) = fixtures() else { return };
    let (seeded, tokens) = seed(&dir).await;
    let review = call(
        &seeded.url(),
        Some(&tokens["Ankur-singh"]),
        reqwest::Method::POST,
        &format!("/repos/{REPO}/pulls/{}/reviews", seeded.pr),
        Some(json!({"body": seed_signoff(&dir), "event": "APPROVE"})),
    )
    .await;
    assert_eq!(review["author_association"], "COLLABORATOR");
    let url = review["html_url"].as_str().unwrap();
    assert!(url.contains("#pullrequestreview-"), "{url}");
    let verdict = json_of(&klaud(&seeded, &["--dry-run", "--json", "--comment-url", url]).await);
    assert_eq!(verdict["verdict"], "PASS", "{verdict:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn klauds_own_failure_publishes_no_verdict_and_marks_the_status_incomplete() {
    let Some(dir) = fixtures() else { return };
    let (seeded, tokens) = seed(&dir).await;
    comment(
        &seeded.url(),
        &tokens["Ankur-singh"],
        seeded.pr,
        &seed_signoff(&dir),
    )
    .await;
    let fault: klaud_sandbox::github::faults::Fault = serde_json::from_value(json!({
        "method": "GET", "path": "/repos/*/*/commits/*/check-runs", "count": 1000,
        "action": {"kind": "status", "status": 500}
    }))
    .expect("fault");
    seeded.sim.state().add_fault(fault).await;
    let out = klaud(&seeded, &[]).await;
    assert!(
        !out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(verdict_comments(&seeded).await.is_empty());
    let status = combined_status(&seeded).await;
    assert_eq!(status["state"], "failure", "{status:#}");
    assert_eq!(
        status["statuses"][0]["description"],
        "verification did not complete"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reconcile_catch_up_verifies_a_signoff_newer_than_the_last_verdict_once() {
    use klaud_github::{Credential, ForgeConfig, Github, RetryPolicy, Secret};
    use klaud_service::signoff::{SignoffQueue, SignoffWatch, announced};

    let Some(dir) = fixtures() else { return };
    let (seeded, tokens) = seed(&dir).await;
    let forge = Github::connect(ForgeConfig {
        api_url: seeded.url(),
        repo: REPO.into(),
        bot_login: BOT.into(),
        credential: Credential::Token(Secret::new(BOT_TOKEN)),
        retry: RetryPolicy::default(),
    })
    .await
    .expect("forge");
    let bars = klaud_signoff::evidence::default_eval_bars();
    let mut watch = SignoffWatch::default();

    // Nothing signed yet: nothing to verify.
    assert!(watch.pass(&forge, Vec::new(), &bars).await.is_empty());

    let signoff = comment(
        &seeded.url(),
        &tokens["Ankur-singh"],
        seeded.pr,
        &seed_signoff(&dir),
    )
    .await;
    let lines = watch.pass(&forge, Vec::new(), &bars).await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].as_ref().unwrap().contains("Pass"), "{lines:?}");
    assert_eq!(verdict_comments(&seeded).await.len(), 1);
    assert_eq!(combined_status(&seeded).await["state"], "success");

    // The verdict is newer than the sign-off: the next pass leaves it.
    assert!(watch.pass(&forge, Vec::new(), &bars).await.is_empty());

    // A delivery for the same sign-off (as the webhook queues it) is
    // verified again at once, and the verdict is still one comment.
    let queue = SignoffQueue::default();
    let payload = json!({
        "action": "edited",
        "issue": {"number": seeded.pr, "pull_request": {"url": "u"}},
        "comment": {"id": signoff["id"], "body": signoff["body"]},
        "repository": {"full_name": REPO},
    });
    queue.push(announced("issue_comment", &payload).expect("announced"));
    let lines = watch.pass(&forge, queue.take(REPO), &bars).await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(verdict_comments(&seeded).await.len(), 1);
}

/// The example workflow as GitHub reads it: it runs for a sign-off posted
/// any of the three ways, and not for another comment or an issue.
#[test]
fn the_example_signoff_workflow_runs_for_signoffs_only() {
    use klaud_workflows::{EventContext, JobDecision, Workflow};

    let text = std::fs::read_to_string(
        Path::new(crate::support::REPO_ROOT).join("configs/klaud-signoff.workflow.yml"),
    )
    .expect("the example workflow");
    let workflow = Workflow::parse(".github/workflows/klaud-signoff.yml", &text).expect("valid");
    let phrase = "As a PR reviewer and CODEOWNER, I have reviewed this and have:";
    let decision = |event: &str, payload: Value| {
        let ctx = EventContext::new(event, payload).expect("context");
        assert!(workflow.triggered_by(&ctx), "{event} triggers the workflow");
        let plan = workflow.plan_jobs(&ctx).expect("plan");
        plan.job("verify").expect("the verify job").decision
    };
    let comment = |body: &str, on_pr: bool| {
        let mut issue = json!({"number": 7});
        if on_pr {
            issue["pull_request"] = json!({"url": "u"});
        }
        json!({"action": "created", "issue": issue, "comment": {"body": body, "html_url": "u"}})
    };
    assert_eq!(
        decision("issue_comment", comment(phrase, true)),
        JobDecision::Runs
    );
    assert_eq!(
        decision("issue_comment", comment("LGTM", true)),
        JobDecision::Skipped
    );
    assert_eq!(
        decision("issue_comment", comment(phrase, false)),
        JobDecision::Skipped
    );
    assert_eq!(
        decision(
            "pull_request_review",
            json!({"action": "submitted", "review": {"body": phrase}, "pull_request": {"number": 7}})
        ),
        JobDecision::Runs
    );
    assert_eq!(
        decision(
            "pull_request_review_comment",
            json!({"action": "edited", "comment": {"body": phrase}, "pull_request": {"number": 7}})
        ),
        JobDecision::Runs
    );
    let verify = text
        .lines()
        .skip_while(|l| !l.contains("klaud\" signoff"))
        .take(6)
        .collect::<Vec<_>>()
        .join("\n");
    for flag in ["--config ", "--repo ", "--comment-url \"$COMMENT_URL\""] {
        assert!(verify.contains(flag), "the step passes {flag}: {verify}");
    }
}

/// `klaud serve` with `[signoff]` on, against the seeded sandbox: the
/// first pass's catch-up verifies a sign-off posted before it started;
/// then, with the next timed pass an hour away, only deliveries to its
/// `POST /webhook` (signed, in the shapes GitHub sends for `issue_comment`,
/// `pull_request_review` and `pull_request_review_comment`) get later
/// sign-offs verified: an edit, a review and an inline review comment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_verifies_signoffs_its_webhook_announces_and_catches_up_at_start() {
    use hmac::Mac;
    use std::time::Duration;

    let Some(dir) = fixtures() else { return };
    let (seeded, tokens) = seed(&dir).await;
    let base = seeded.url();
    let signer = &tokens["Ankur-singh"];
    let item = "Verified that the general code quality";
    let stale = seed_signoff(&dir).replacen(&format!("- [x] {item}"), &format!("- [ ] {item}"), 1);
    let first = comment(&base, signer, seeded.pr, &stale).await;

    let work = tempfile::tempdir().expect("tempdir");
    let secret = "klaud-signoff-webhook-secret";
    let config = work.path().join("klaud.toml");
    std::fs::write(
        &config,
        format!(
            "[github]\napi_url = \"{base}\"\nrepository = \"{REPO}\"\n\
             [daemon]\nreconcile_interval = \"3600s\"\nlease = \"5h\"\nschedule = \"0 0 1 1 *\"\n\
             webhook_secret_env = \"KLAUD_TEST_WEBHOOK_SECRET\"\n\
             [signoff]\nenabled = true\n[upstream]\n"
        ),
    )
    .expect("config");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_klaud"));
    cmd.env("KLAUD_GITHUB_TOKEN", BOT_TOKEN)
        .env("KLAUD_TEST_WEBHOOK_SECRET", secret)
        .env_remove("GITHUB_TOKEN")
        .env_remove("KLAUD_CONFIG")
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .arg("--store")
        .arg(work.path().join("store"))
        .args(["--dashboard", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // No registry is reached from a test: every host goes to a closed port.
    for host in ["docker.io", "nvcr.io", "hub.docker.com", "ghcr.io"] {
        cmd.args(["--mirror", &format!("{host}=http://127.0.0.1:9")]);
    }
    let mut child = cmd.spawn().expect("spawn klaud serve");
    struct Stop(std::process::Child);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = child.stdout.take().expect("stdout");
    let stderr = child.stderr.take().expect("stderr");
    let mut child = Stop(child);
    let logs = std::thread::spawn(move || {
        use std::io::Read;
        let mut text = String::new();
        let _ = std::io::BufReader::new(stderr).read_to_string(&mut text);
        text
    });
    let line = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("first line");
        line
    })
    .await
    .expect("read task");
    let Some(url) = line.trim().strip_prefix("dashboard: ") else {
        let _ = child.0.kill();
        let _ = child.0.wait();
        panic!(
            "first line names the dashboard: {line:?}\n{}",
            logs.join().expect("logs")
        );
    };
    let url = url.trim_end_matches('/').to_owned();

    let statuses = || async {
        call(
            &base,
            Some(BOT_TOKEN),
            reqwest::Method::GET,
            &format!("/repos/{REPO}/commits/{}/statuses", seeded.head),
            None,
        )
        .await
        .as_array()
        .map_or(0, Vec::len)
    };
    let wait_for = |what: &'static str, at_least: usize| {
        let statuses = &statuses;
        let seeded = &seeded;
        async move {
            let waited = tokio::time::timeout(Duration::from_secs(180), async {
                loop {
                    // The comment is written before the status.
                    if statuses().await >= at_least {
                        let comments = verdict_comments(seeded).await;
                        assert_eq!(comments.len(), 1, "{comments:?}");
                        return comments[0].clone();
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
            .await;
            waited.unwrap_or_else(|_| panic!("no verdict after {what}"))
        }
    };

    // Posted before the daemon started: the first pass catches up.
    let verdict = wait_for("the first pass", 1).await;
    assert!(
        verdict.contains("## ❌❌❌ **REJECTED** ❌❌❌"),
        "{verdict}"
    );
    assert!(
        verdict.contains("❌ Check 5 (Latest checklist): FAIL"),
        "{verdict}"
    );

    let repository = call(
        &base,
        Some(BOT_TOKEN),
        reqwest::Method::GET,
        &format!("/repos/{REPO}"),
        None,
    )
    .await;
    let pull = call(
        &base,
        Some(BOT_TOKEN),
        reqwest::Method::GET,
        &format!("/repos/{REPO}/pulls/{}", seeded.pr),
        None,
    )
    .await;
    let issue = call(
        &base,
        Some(BOT_TOKEN),
        reqwest::Method::GET,
        &format!("/repos/{REPO}/issues/{}", seeded.pr),
        None,
    )
    .await;
    assert!(issue["pull_request"].is_object(), "{issue:#}");
    let http = klaud_http::http_client().expect("http client");
    let deliver = |event: &'static str, payload: Value| {
        let body = payload.to_string().into_bytes();
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("key");
        mac.update(&body);
        let signature = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
        let request = http
            .post(format!("{url}/webhook"))
            .header("x-github-event", event)
            .header("x-github-delivery", uuid::Uuid::new_v4().to_string())
            .header("x-hub-signature-256", signature)
            .header("content-type", "application/json")
            .body(body);
        async move {
            let answer = request.send().await.expect("deliver");
            assert_eq!(answer.status(), 202, "{event}");
        }
    };

    // The signer fixes the checklist in place: `issue_comment` `edited`.
    let edited = call(
        &base,
        Some(signer),
        reqwest::Method::PATCH,
        &format!("/repos/{REPO}/issues/comments/{}", first["id"]),
        Some(json!({"body": seed_signoff(&dir)})),
    )
    .await;
    deliver(
        "issue_comment",
        json!({"action": "edited", "changes": {"body": {"from": stale}},
               "issue": issue, "comment": edited, "repository": repository,
               "sender": edited["user"]}),
    )
    .await;
    let verdict = wait_for("the edit's delivery", 2).await;
    assert!(
        verdict.contains("## ✅✅✅ **Verdict: PASS** ✅✅✅"),
        "{verdict}"
    );
    assert_eq!(combined_status(&seeded).await["state"], "success");

    // A sign-off as a review: `pull_request_review` `submitted`.
    let before = statuses().await;
    let review = call(
        &base,
        Some(signer),
        reqwest::Method::POST,
        &format!("/repos/{REPO}/pulls/{}/reviews", seeded.pr),
        Some(json!({"body": stale, "event": "COMMENT"})),
    )
    .await;
    deliver(
        "pull_request_review",
        json!({"action": "submitted", "review": review, "pull_request": pull,
               "repository": repository, "sender": review["user"]}),
    )
    .await;
    let verdict = wait_for("the review's delivery", before + 1).await;
    assert!(
        verdict.contains("❌ Check 5 (Latest checklist): FAIL"),
        "{verdict}"
    );
    assert_eq!(combined_status(&seeded).await["state"], "failure");

    // An inline review comment: `pull_request_review_comment` `created`.
    let before = statuses().await;
    let inline = call(
        &base,
        Some(signer),
        reqwest::Method::POST,
        &format!("/repos/{REPO}/pulls/{}/comments", seeded.pr),
        Some(json!({"body": seed_signoff(&dir), "commit_id": seeded.head,
                    "path": "configs/nvidia-master.yaml", "line": 1, "side": "RIGHT"})),
    )
    .await;
    deliver(
        "pull_request_review_comment",
        json!({"action": "created", "comment": inline, "pull_request": pull,
               "repository": repository, "sender": inline["user"]}),
    )
    .await;
    let verdict = wait_for("the inline comment's delivery", before + 1).await;
    assert!(
        verdict.contains("## ✅✅✅ **Verdict: PASS** ✅✅✅"),
        "{verdict}"
    );
    assert_eq!(combined_status(&seeded).await["state"], "success");

    let _ = child.0.kill();
    let _ = child.0.wait();
    let logs = logs.join().expect("logs");
    assert!(!logs.contains(BOT_TOKEN), "the token leaked");
    assert!(!logs.contains(secret), "the webhook secret leaked");
}

/// A sign-off is hostile input: at GitHub's largest comment, with
/// mentions, HTML, markdown links and a `</details>` in the detail
/// section (whose recipe link a check reads), the verdict is published
/// bounded and none of it comes back as markup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_signoff_is_bounded_and_never_echoed_as_markup() {
    let Some(dir) = fixtures() else { return };
    let tweak = Tweak {
        files: vec![(
            "benchmarks/single_node/minimaxm3_fp4_b300_vllm.sh",
            "vllm serve $MODEL --tensor-parallel-size 4\n".to_owned(),
        )],
        ..Tweak::default()
    };
    let (seeded, tokens) = seed_with(&dir, &tweak).await;
    let hostile = "- Recipe: https://recipes.vllm.ai/@everyone<img/src=x/onerror=alert(1)>**bold**[x](https://evil.test)</details>\n\
                   - @SemiAnalysisAI/core please merge <script>alert(1)</script> [click](https://evil.test) </details><details open>\n";
    let mut body = seed_signoff(&dir).replace(
        "### Additional detail section:\n",
        &format!("### Additional detail section:\n{hostile}"),
    );
    // Up to GitHub's limit (65536 characters), in characters of two bytes.
    let room = 65_536 - body.chars().count() - 1;
    body.push('\n');
    body.push_str(&"é".repeat(room));
    assert!(body.len() > klaud_signoff::MAX_SIGNOFF_BYTES);
    let (verdict, published, status) = signed(&seeded, &tokens["Ankur-singh"], &body).await;
    let recipe = &verdict["checks"][3];
    assert_eq!(recipe["result"], "WARN", "{recipe:#}");
    assert!(
        recipe["reason"]
            .as_str()
            .unwrap()
            .contains("https://recipes.vllm.ai/@everyone<img"),
        "the check read the link: {recipe:#}"
    );
    for markup in [
        "@everyone",
        "@SemiAnalysisAI/core",
        "<img",
        "<script",
        "</details><details",
        "<details open",
        "[x](https://evil.test)",
        "[click](https://evil.test)",
        "**bold**",
    ] {
        assert!(!published.contains(markup), "{markup} echoed:\n{published}");
    }
    assert_eq!(
        published.matches("<details>").count(),
        published.matches("</details>").count(),
        "only Klaud's own groups: {published}"
    );
    assert!(!published.contains('é'), "the body is not copied");
    assert!(published.len() < 16 * 1024, "{} bytes", published.len());
    assert_ne!(verdict["verdict"], "PASS", "{verdict:#}");
    assert_eq!(status["state"], "failure");
}

/// Klaud failing while it publishes (GitHub refuses the verdict comment)
/// leaves no verdict and no PASS: the status says the verification did
/// not complete, and the command fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_while_publishing_leaves_no_pass_but_an_incomplete_status() {
    let Some(dir) = fixtures() else { return };
    let (seeded, tokens) = seed(&dir).await;
    comment(
        &seeded.url(),
        &tokens["Ankur-singh"],
        seeded.pr,
        &seed_signoff(&dir),
    )
    .await;
    let fault: klaud_sandbox::github::faults::Fault = serde_json::from_value(json!({
        "method": "POST", "path": "/repos/*/*/issues/*/comments", "count": 1000,
        "action": {"kind": "status", "status": 500}
    }))
    .expect("fault");
    seeded.sim.state().add_fault(fault).await;
    let out = klaud(&seeded, &["--json"]).await;
    assert!(
        !out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(verdict_comments(&seeded).await.is_empty());
    let status = combined_status(&seeded).await;
    assert_eq!(status["state"], "failure", "{status:#}");
    assert_eq!(status["total_count"], 1, "{status:#}");
    assert_eq!(
        status["statuses"][0]["description"],
        "verification did not complete"
    );
}

/// The 843c6254 contract's Check 3 requires the linked upstream recipe
/// MERGED: Klaud reads the linked pull request's state from GitHub (here
/// the sandbox's `vllm-project/recipes`), fails it while open and hands
/// the argument comparison to a reviewer once it merged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_3_reads_whether_the_linked_recipe_pull_request_merged() {
    let Some(dir) = fixtures() else { return };
    let tweak = Tweak {
        contract: Some("843c6254"),
        files: vec![(
            "benchmarks/single_node/minimaxm3_fp4_b300_vllm.sh",
            "vllm serve $MODEL --tensor-parallel-size 4\n".to_owned(),
        )],
        ..Tweak::default()
    };
    let (seeded, tokens) = seed_with(&dir, &tweak).await;
    let base = seeded.url();
    let upstream = "vllm-project/recipes";
    let readme = tempfile::tempdir().expect("tempdir");
    std::fs::write(readme.path().join("README.md"), "recipes\n").expect("readme");
    call(
        &base,
        None,
        reqwest::Method::POST,
        "/_sandbox/repos",
        Some(json!({"repo": upstream, "seed_dir": readme.path(), "committer": "jasonlizhengjian"})),
    )
    .await;
    grant(&base, upstream, "jasonlizhengjian", "write").await;
    let author = &tokens["jasonlizhengjian"];
    let main_sha = call(
        &base,
        Some(author),
        reqwest::Method::GET,
        &format!("/repos/{upstream}/git/ref/heads/main"),
        None,
    )
    .await["object"]["sha"]
        .as_str()
        .expect("main")
        .to_owned();
    call(
        &base,
        Some(author),
        reqwest::Method::POST,
        &format!("/repos/{upstream}/git/refs"),
        Some(json!({"ref": "refs/heads/minimax-m3", "sha": main_sha})),
    )
    .await;
    let mut files = BTreeMap::new();
    files.insert(
        "MiniMax/MiniMax-M3.md".to_owned(),
        Some(b"vllm serve nvidia/MiniMax-M3-NVFP4 -tp 4\n".to_vec()),
    );
    seeded
        .sim
        .state()
        .push_commit(
            upstream,
            "minimax-m3",
            "jasonlizhengjian",
            files,
            "MiniMax-M3 on B300",
        )
        .await
        .expect("push");
    let recipe = call(
        &base,
        Some(author),
        reqwest::Method::POST,
        &format!("/repos/{upstream}/pulls"),
        Some(json!({"title": "MiniMax-M3", "head": "minimax-m3", "base": "main"})),
    )
    .await;
    let number = recipe["number"].as_u64().expect("number");
    let link = format!("https://github.com/{upstream}/pull/{number}");
    let signoff = seed_signoff(&dir).replace(
        "### Additional detail section:\n",
        &format!("### Additional detail section:\n- Recipe: {link}\n"),
    );

    let (verdict, published, status) = signed(&seeded, &tokens["Ankur-singh"], &signoff).await;
    assert_row(
        &verdict,
        &published,
        3,
        "FAIL",
        &format!("No merged upstream recipe: {upstream}#{number} is open, not merged"),
        &format!("{upstream}#{number}: open, not merged"),
    );
    assert_rejected(&verdict, &published, &status);

    call(
        &base,
        Some(author),
        reqwest::Method::PUT,
        &format!("/repos/{upstream}/pulls/{number}/merge"),
        Some(json!({"merge_method": "squash"})),
    )
    .await;
    let verdict = json_of(&klaud(&seeded, &["--json"]).await);
    let published = verdict_comments(&seeded).await.remove(0);
    assert_row(
        &verdict,
        &published,
        3,
        "WARN",
        &format!("Needs a reviewer: {link} is merged upstream"),
        &format!("{upstream}#{number}: merged at "),
    );
}

/// The newer contract's Check 14 counts the frontier of the points the
/// sweep measured (its `results_bmk`), not the configured concurrencies:
/// seven measured points whose throughput falls after the third make a
/// 3-point curve, a WARN; a later run of the same commit with a rising
/// curve passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pareto_check_counts_the_frontier_of_the_measured_points() {
    let Some(dir) = fixtures() else { return };
    let row = |conc: u64, e2el: f64, tput: f64| {
        json!({"hw": "b300-nv", "conc": conc, "image": TP1_IMAGE, "infmax_model_prefix": "minimaxm3",
               "framework": "dynamo-vllm", "precision": "fp4", "spec_decoding": "none",
               "disagg": true, "isl": 8192, "osl": 1024, "tput_per_gpu": tput, "median_e2el": e2el})
    };
    let concs = [1u64, 8, 128, 256, 512, 768, 4096];
    let falling: Vec<Value> = concs
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let tput = if i < 3 {
                100.0 * (i + 1) as f64
            } else {
                250.0 - i as f64
            };
            row(*c, 2.0 + i as f64, tput)
        })
        .collect();
    let tweak = Tweak {
        contract: Some("newer"),
        bench_rows: falling,
        ..Tweak::default()
    };
    let (seeded, tokens) = seed_with(&dir, &tweak).await;
    let (verdict, published, status) =
        signed(&seeded, &tokens["Ankur-singh"], &seed_signoff(&dir)).await;
    assert_eq!(verdict["checks"].as_array().map(Vec::len), Some(16));
    let curve = "minimaxm3 8192/1024 b300-dynamo-vllm fp4 spec none";
    assert_row(
        &verdict,
        &published,
        14,
        "WARN",
        &format!(
            "fewer than 5 frontier points ({curve} 3/5) in run {}; admin bypass not verified",
            seeded.run_id
        ),
        &format!(
            "{curve}: 3 frontier points of 7 measured (run {}, agg_bmk.json)",
            seeded.run_id
        ),
    );
    assert_eq!(status["state"], "failure");

    let jobs: Vec<Value> = concs
        .iter()
        .flat_map(|c| {
            ["multi-node 8k1k", "multi-node eval"].map(|g| {
                json!({"name": format!("{g} / p1 | minimaxm3 fp4 b300 dynamo-vllm c{c}"), "conclusion": "success"})
            })
        })
        .collect();
    let rising: Vec<Value> = concs
        .iter()
        .enumerate()
        .map(|(i, c)| row(*c, 2.0 + i as f64, 100.0 * (i + 1) as f64))
        .collect();
    let evals: Vec<Value> = concs
        .iter()
        .map(|c| json!({"model_prefix": "minimaxm3", "hw": "B300", "framework": "dynamo-vllm", "precision": "fp4",
                        "conc": c, "task": "gsm8k", "em_strict": 0.95, "score": 0.95, "score_name": "em_strict"}))
        .collect();
    let rerun = call(
        &seeded.url(),
        None,
        reqwest::Method::POST,
        &format!("/_sandbox/repos/{REPO}/runs"),
        Some(json!({"head_sha": seeded.head, "jobs": jobs, "artifacts": {
            "eval_results_all": {"agg_eval_all.json": Value::Array(evals).to_string()},
            "results_bmk": {"agg_bmk.json": Value::Array(rising).to_string()}}})),
    )
    .await["id"]
        .as_u64()
        .expect("run id");
    let verdict = json_of(&klaud(&seeded, &["--json"]).await);
    let published = verdict_comments(&seeded).await;
    let published = published.last().expect("verdict");
    assert_row(
        &verdict,
        published,
        14,
        "PASS",
        &format!("every affected curve has at least 5 measured frontier points in run {rerun}"),
        &format!("{curve}: 7 frontier points of 7 measured"),
    );
}

/// The newer contract's scope leaves out the organisation's core team and
/// repository admins as owners: where they alone own every changed path,
/// no sign-off is required and Klaud publishes nothing; once an owner
/// who is not an admin owns one, the sign-off is verified.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_newer_scope_needs_no_signoff_where_only_core_and_admins_own() {
    let Some(dir) = fixtures() else { return };
    let tweak = Tweak {
        contract: Some("newer"),
        codeowners: Some(
            read(&dir, "signoff/newer/.github/CODEOWNERS")
                .replace("@InferenceX/core", "@SemiAnalysisAI/core"),
        ),
        ..Tweak::default()
    };
    let (seeded, tokens) = seed_with(&dir, &tweak).await;
    let base = seeded.url();
    person(&base, "kedarpotdar-nv", "admin", "User").await;
    grant(&base, REPO, "Ankur-singh", "admin").await;
    comment(
        &base,
        &tokens["Ankur-singh"],
        seeded.pr,
        &seed_signoff(&dir),
    )
    .await;
    let refused = json_of(&klaud(&seeded, &["--json"]).await);
    assert!(
        refused["refused"]
            .as_str()
            .unwrap_or_default()
            .contains("no sign-off is required"),
        "{refused:#}"
    );
    assert!(verdict_comments(&seeded).await.is_empty());
    assert_eq!(combined_status(&seeded).await["total_count"], 0);

    grant(&base, REPO, "kedarpotdar-nv", "write").await;
    let verdict = json_of(&klaud(&seeded, &["--json"]).await);
    let published = verdict_comments(&seeded).await;
    assert_eq!(published.len(), 1, "{verdict:#}");
    assert_row(
        &verdict,
        &published[0],
        0,
        "PASS",
        "Ankur-singh owns configs/nvidia-master.yaml via its specific CODEOWNERS line",
        "configs/nvidia-master.yaml: CODEOWNERS line",
    );
}

/// `login` (through `token`) edits comment `id`, replacing its body: GitHub
/// lets anyone with write access edit another's comment.
async fn edit_comment(base: &str, token: &str, id: u64, body: &str) {
    call(
        base,
        Some(token),
        reqwest::Method::PATCH,
        &format!("/repos/{REPO}/issues/comments/{id}"),
        Some(json!({"body": body})),
    )
    .await;
}

/// The simulator tells who edited a comment the way GitHub's GraphQL does:
/// `editor`, `lastEditedAt` and `userContentEdits` of the comment's node.
async fn comment_node(base: &str, node: &str) -> Value {
    call(
        base,
        Some(BOT_TOKEN),
        reqwest::Method::POST,
        "/graphql",
        Some(json!({
            "query": "query($id: ID!) { node(id: $id) { ... on Comment { editor { login } lastEditedAt userContentEdits(last: 5) { nodes { editor { login } editedAt } } } } }",
            "variables": {"id": node},
        })),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signoff_edited_by_a_writer_who_owns_nothing_is_rejected_naming_the_editor() {
    let Some(dir) = fixtures() else { return };
    let (seeded, tokens) = seed(&dir).await;
    let base = seeded.url();
    let posted = comment(
        &base,
        &tokens["Ankur-singh"],
        seeded.pr,
        &seed_signoff(&dir),
    )
    .await;
    let id = posted["id"].as_u64().expect("id");
    let node = posted["node_id"].as_str().expect("node id").to_owned();
    let unedited = comment_node(&base, &node).await;
    assert!(unedited["data"]["node"]["editor"].is_null(), "{unedited:#}");

    // A writer who owns none of the changed files puts their words in the
    // CODEOWNER's comment: the text is now theirs.
    let amd = person(&base, "billishyahao", "write", "User").await;
    edit_comment(&base, &amd, id, &seed_signoff(&dir)).await;
    let edited = comment_node(&base, &node).await;
    assert_eq!(
        edited["data"]["node"]["editor"]["login"], "billishyahao",
        "{edited:#}"
    );
    assert!(
        edited["data"]["node"]["lastEditedAt"].is_string(),
        "{edited:#}"
    );
    assert_eq!(
        edited["data"]["node"]["userContentEdits"]["nodes"][0]["editor"]["login"],
        "billishyahao"
    );

    let verdict = json_of(&klaud(&seeded, &["--json"]).await);
    assert_eq!(verdict["verdict"], "REJECTED", "{verdict:#}");
    assert_eq!(verdict["signer"], "billishyahao", "{verdict:#}");
    let reason = verdict["checks"][0]["reason"].as_str().expect("reason");
    assert!(
        reason.contains("last edited by billishyahao, not its author Ankur-singh")
            && reason.contains("billishyahao is not a CODEOWNER of configs/nvidia-master.yaml"),
        "{reason}"
    );
    let published = verdict_comments(&seeded).await;
    assert_eq!(published.len(), 1);
    assert!(
        published[0].contains("last edited by billishyahao"),
        "{}",
        published[0]
    );
    assert_eq!(combined_status(&seeded).await["state"], "failure");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signoff_edited_by_another_codeowner_is_verified_as_the_editors() {
    let Some(dir) = fixtures() else { return };
    let (seeded, tokens) = seed(&dir).await;
    let base = seeded.url();
    let posted = comment(
        &base,
        &tokens["Ankur-singh"],
        seeded.pr,
        &seed_signoff(&dir),
    )
    .await;
    let id = posted["id"].as_u64().expect("id");
    let kedar = person(&base, "kedarpotdar-nv", "write", "User").await;
    edit_comment(&base, &kedar, id, &seed_signoff(&dir)).await;

    let verdict = json_of(&klaud(&seeded, &["--json"]).await);
    assert_eq!(verdict["signer"], "kedarpotdar-nv", "{verdict:#}");
    let check = &verdict["checks"][0];
    assert_eq!(check["result"], "PASS", "{check:#}");
    let reason = check["reason"].as_str().expect("reason");
    assert!(
        reason.contains("verified as kedarpotdar-nv's")
            && reason.contains("kedarpotdar-nv owns configs/nvidia-master.yaml"),
        "{reason}"
    );
    assert_eq!(verdict["verdict"], "PASS", "{verdict:#}");

    // The author editing their own text again makes it theirs once more.
    edit_comment(&base, &tokens["Ankur-singh"], id, &seed_signoff(&dir)).await;
    let verdict = json_of(&klaud(&seeded, &["--json", "--dry-run"]).await);
    assert_eq!(verdict["signer"], "Ankur-singh", "{verdict:#}");
}
