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

/// The seed's repository and pull request, with the green sweep and the
/// reuse command; the sign-off is left to each test.
async fn seed(dir: &Path) -> (Seeded, BTreeMap<String, String>) {
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
        (".github/codeowner-signoff-verify-prompt.md".into(), read(dir, "signoff/7abe6612/.github/codeowner-signoff-verify-prompt.md").into_bytes()),
        ("docs/PR_REVIEW_CHECKLIST.md".into(), read(dir, "signoff/7abe6612/docs/PR_REVIEW_CHECKLIST.md").into_bytes()),
        (".github/CODEOWNERS".into(), read(dir, "signoff/newer/.github/CODEOWNERS").into_bytes()),
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
    files.insert(
        "configs/nvidia-master.yaml".into(),
        Some(format!("{single}\n{tp1}\n{legacy}").into_bytes()),
    );
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
    let head = sim
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

    let mut jobs = Vec::new();
    for conc in ["8", "1", "128", "256", "512", "768", "4096"] {
        for group in ["multi-node 8k1k", "multi-node eval"] {
            jobs.push(json!({"name": format!("{group} / p1 | minimaxm3 fp4 b300 dynamo-vllm c{conc}"), "conclusion": "success"}));
        }
    }
    jobs.push(json!({"name": "single-node 8k1k / benchmark", "conclusion": "skipped"}));
    let rows: Vec<Value> = [0.951, 0.955, 0.961, 0.958, 0.953, 0.957, 0.960]
        .iter()
        .enumerate()
        .map(|(i, s)| json!({"model_prefix": "minimaxm3", "hw": "B300", "framework": "dynamo-vllm", "precision": "fp4",
                             "conc": i as u64 + 1, "task": "gsm8k", "em_strict": s, "score": s, "score_name": "em_strict"}))
        .collect();
    let run = call(
        &base,
        None,
        reqwest::Method::POST,
        &format!("/_sandbox/repos/{REPO}/runs"),
        Some(json!({"head_sha": head, "jobs": jobs,
                    "artifacts": {"eval_results_all": {"agg_eval_all.json": Value::Array(rows).to_string()}}})),
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
    use klaud_github::{Credential, Forge, ForgeConfig, RetryPolicy, Secret};
    use klaud_service::signoff::{SignoffQueue, SignoffWatch, announced};

    let Some(dir) = fixtures() else { return };
    let (seeded, tokens) = seed(&dir).await;
    let forge = Forge::connect(ForgeConfig {
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
