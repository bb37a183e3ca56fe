//! The flag and environment audit end to end: the engine's source
//! repository lives in a GitHub simulator whose commits change real files
//! (vLLM's `arg_utils.py` and `envs.py`); a wave bumps the demo's nightly
//! family, whose benchmark script sets a flag and a variable, and the
//! audit reads the compare's `files[].patch` through the real forge.

use std::collections::BTreeMap;
use std::path::Path;

use klaud_claims::Claimant;
use klaud_github::upstream::{AuditOptions, GithubUpstream};
use klaud_github::{Credential, Secret};
use klaud_lifecycle::engine::Journal as _;
use klaud_lifecycle::engine::MemoryJournal;
use klaud_planner::audit::{AuditResult, Collected, Item, ItemKind, UncheckedCause};
use klaud_sandbox::github::{GithubSim, Permission};
use klaud_service::wave_adapters::WaveSummary;

use crate::support::{Harness, engine_config};

const TOKEN: &str = "ghp_audit_upstream_reader";
const SOURCE: &str = "vllm-project/vllm";
const DEMO_NIGHTLY: &str = "3ee2df30337a301164c46ae444b76ee67e71c106";
const DEMO_NEXT: &str = "5e35a6f4f9bbc217c599692157ca985c894373f7";
const FAMILY: &str = ":demo-fp4-b300-vllm-agentic";

const ARGS_OLD: &str = "class EngineArgs:\n    model: str = \"m\"\n    max_model_len: Optional[int] = None\n\n    @staticmethod\n    def add_cli_args(parser):\n        parser.add_argument(\"--old-flag\", type=int)\n        parser.add_argument(\"--kept-flag\", action=\"store_true\")\n        return parser\n";
const ARGS_NEW: &str = "class EngineArgs:\n    model: str = \"m\"\n    max_model_len: Optional[int] = None\n\n    @staticmethod\n    def add_cli_args(parser):\n        parser.add_argument(\"--kept-flag\", action=\"store_true\")\n        return parser\n";
const ENVS: &str =
    "environment_variables = {\n    \"VLLM_KEPT\": lambda: os.getenv(\"VLLM_KEPT\"),\n}\n";

/// The engine's source repository: `old` defines `--old-flag`, `removing`
/// deletes it (when `remove`), `new` changes only the README.
struct Upstream {
    sim: GithubSim,
    old: String,
    removing: String,
    new: String,
}

fn files(pairs: &[(&str, &str)]) -> BTreeMap<String, Option<Vec<u8>>> {
    pairs
        .iter()
        .map(|(p, t)| ((*p).to_owned(), Some(t.as_bytes().to_vec())))
        .collect()
}

async fn upstream(remove: bool) -> Upstream {
    let (state, _) = crate::support::GithubOnly::new(SOURCE)
        .user("engine-dev", None, Some(Permission::Write))
        .token("engine-dev", TOKEN, None)
        .state()
        .await;
    let push = |f: BTreeMap<String, Option<Vec<u8>>>, message: &'static str| {
        let state = state.clone();
        async move {
            state
                .push_commit(SOURCE, "main", "engine-dev", f, message)
                .await
                .unwrap()
        }
    };
    let old = push(
        files(&[
            ("vllm/engine/arg_utils.py", ARGS_OLD),
            ("vllm/envs.py", ENVS),
            ("README.md", "one\n"),
        ]),
        "one",
    )
    .await;
    let removing = if remove {
        push(
            files(&[("vllm/engine/arg_utils.py", ARGS_NEW)]),
            "[Misc] Remove the deprecated --old-flag",
        )
        .await
    } else {
        push(files(&[("docs/flags.md", "kept\n")]), "docs").await
    };
    let new = push(files(&[("README.md", "two\n")]), "two").await;
    let sim = crate::support::serve(state).await;
    Upstream {
        sim,
        old,
        removing,
        new,
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The demo repository with its nightly family pinned at `old`, and the
/// benchmark script that family's launcher runs (`flag`, `env` on it).
fn seed(old: &str, flag: &str, env: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let demo = Path::new(crate::support::REPO_ROOT).join("configs/demo");
    copy_dir(&demo, dir.path());
    let master = dir.path().join("configs/nvidia-master.yaml");
    let text = std::fs::read_to_string(&master).unwrap();
    std::fs::write(&master, text.replace(DEMO_NIGHTLY, old)).unwrap();
    let script = dir
        .path()
        .join("benchmarks/single_node/agentic/demo_fp4_b300_vllm.sh");
    std::fs::create_dir_all(script.parent().unwrap()).unwrap();
    std::fs::write(
        &script,
        format!(
            "#!/usr/bin/env bash\nexport {env}=1\nARGS=(\n  {flag} 3\n)\nvllm serve \"$MODEL\" --port \"$PORT\" \\\n  \"${{ARGS[@]}}\" \\\n  --kept-flag > server.log 2>&1 &\nrun_benchmark_serving --model \"$MODEL\"\n"
        ),
    )
    .unwrap();
    dir
}

fn registry_seed(old: &str, new: &str) -> String {
    let root = Path::new(crate::support::REPO_ROOT);
    std::fs::read_to_string(root.join("configs/demo-registry.json"))
        .unwrap()
        .replace(DEMO_NIGHTLY, old)
        .replace(DEMO_NEXT, new)
}

async fn wave(env: &Harness, upstream: &GithubUpstream, journal: &MemoryJournal) -> WaveSummary {
    let mut options = env.wave_options(
        Claimant::new(uuid::Uuid::from_u128(0x6175_6469)),
        engine_config(7_200),
    );
    options
        .lifecycle
        .plan
        .upstream
        .insert("vllm/vllm-openai".into(), SOURCE.into());
    options.upstream = Some(upstream);
    env.wave(journal, options).await
}

fn reader(url: &str) -> GithubUpstream {
    GithubUpstream::new(url, Credential::Token(Secret::new(TOKEN)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flag_removed_upstream_ends_the_candidate_incompatible_before_any_dispatch() {
    let up = upstream(true).await;
    let dir = seed(&up.old, "--old-flag", "VLLM_KEPT");
    let env = Harness::demo()
        .seed_dir(dir.path())
        .registry_seed(&registry_seed(&up.old, &up.new))
        .start()
        .await;
    let journal = MemoryJournal::new();
    let summary = wave(&env, &reader(&up.sim.url()), &journal).await;
    let c = summary
        .candidates
        .iter()
        .find(|c| c.family.ends_with(FAMILY))
        .unwrap_or_else(|| panic!("no nightly candidate: {summary:#?}"));
    assert_eq!(c.outcome.as_deref(), Some("incompatible"), "{c:#?}");
    assert!(c.runs.is_empty(), "no GPU run: {c:#?}");
    let message = c.message.clone().unwrap_or_default();
    assert!(message.contains("--old-flag"), "{message}");
    assert!(
        message.contains(&up.removing),
        "names the removing commit: {message}"
    );
    // The receipt names the flag and the commit, in both languages; the
    // journal (what `klaud status` and the dashboard show) agrees.
    let branch = format!("klaud/auto-{}", c.candidate);
    let dispatched = env
        .forge
        .list_runs(&klaud_github::RunFilter {
            event: Some("workflow_dispatch".into()),
            branch: Some(branch.clone()),
            ..Default::default()
        })
        .await
        .expect("runs");
    assert!(dispatched.is_empty(), "nothing dispatched: {dispatched:?}");
    assert!(
        env.dispatches().await > 0,
        "the other candidates did dispatch"
    );
    let pulls = env.pulls(&branch).await;
    assert_eq!(pulls.len(), 1);
    let bodies = env.bodies(pulls[0]).await;
    let receipt = bodies
        .iter()
        .find(|b| b.contains("<!-- klaud-outcome:"))
        .expect("a receipt");
    assert!(
        receipt.contains("--old-flag") && receipt.contains(&up.removing),
        "{receipt}"
    );
    assert!(receipt.contains("由 vllm-project/vllm@"), "{receipt}");
    let rec = journal
        .load(c.candidate.as_str())
        .await
        .unwrap()
        .expect("record");
    let row = klaud_service::dashboard::OutcomeRow::of(&rec).expect("outcome row");
    assert_eq!(row.outcome, "incompatible");
    assert_eq!(
        klaud_service::CandidateSummary::of(&rec, None)
            .outcome
            .as_deref(),
        Some("incompatible")
    );
    // The PR body says which flag, where it is set and who removed it.
    let body = env.pull(pulls[0]).await.body.unwrap_or_default();
    assert!(body.contains("**Flags and environment:** removed upstream: `--old-flag` (flag, set in `benchmarks/single_node/agentic/demo_fp4_b300_vllm.sh:4`"), "{body}");
    assert!(body.contains("**参数与环境变量**：上游已删除"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_everything_is_still_defined_the_pr_body_says_so_with_the_count() {
    let up = upstream(false).await;
    let dir = seed(&up.old, "--old-flag", "VLLM_KEPT");
    let env = Harness::demo()
        .seed_dir(dir.path())
        .registry_seed(&registry_seed(&up.old, &up.new))
        .start()
        .await;
    let journal = MemoryJournal::new();
    let summary = wave(&env, &reader(&up.sim.url()), &journal).await;
    let c = summary
        .candidates
        .iter()
        .find(|c| c.family.ends_with(FAMILY))
        .unwrap_or_else(|| panic!("no nightly candidate: {summary:#?}"));
    assert_ne!(c.outcome.as_deref(), Some("incompatible"), "{c:#?}");
    let pulls = env.pulls(&format!("klaud/auto-{}", c.candidate)).await;
    let body = env.pull(pulls[0]).await.body.unwrap_or_default();
    // `--port`, `--old-flag`, `--kept-flag`; `VLLM_KEPT`.
    assert!(
        body.contains("every recipe flag and environment variable is still present (3 flags and 1 environment variables checked against the upstream change)"),
        "{body}"
    );
    assert!(
        body.contains(
            "所有配方参数和环境变量仍然存在（已对照上游变更检查 3 个参数和 1 个环境变量）"
        ),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unavailable_compare_says_so_and_does_not_block() {
    let up = upstream(true).await;
    let dir = seed(&up.old, "--old-flag", "VLLM_KEPT");
    let env = Harness::demo()
        .seed_dir(dir.path())
        .registry_seed(&registry_seed(&up.old, &up.new))
        .start()
        .await;
    let journal = MemoryJournal::new();
    // A token GitHub does not know: every read of the source fails.
    let reader = GithubUpstream::new(
        &up.sim.url(),
        Credential::Token(Secret::new("ghp_not_a_known_token")),
    );
    let summary = wave(&env, &reader, &journal).await;
    let c = summary
        .candidates
        .iter()
        .find(|c| c.family.ends_with(FAMILY))
        .unwrap_or_else(|| panic!("no nightly candidate: {summary:#?}"));
    assert_ne!(c.outcome.as_deref(), Some("incompatible"), "{c:#?}");
    let pulls = env.pulls(&format!("klaud/auto-{}", c.candidate)).await;
    let body = env.pull(pulls[0]).await.body.unwrap_or_default();
    assert!(
        body.contains("**Flags and environment:** not checked: the compare is unavailable"),
        "{body}"
    );
    assert!(body.contains("this does not block the candidate"), "{body}");
    assert!(body.contains("未检查：无法获取上游比较"), "{body}");
}

fn collected(flag: &str) -> Collected {
    Collected {
        items: vec![Item {
            kind: ItemKind::Flag,
            name: flag.into(),
            source: "s.sh:3".into(),
        }],
        files: vec![],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compare_too_large_to_read_whole_does_not_block() {
    let up = upstream(true).await;
    // A commit of 300 files: GitHub lists no more than that, so the
    // compare may hide the deletion.
    let many: BTreeMap<String, Option<Vec<u8>>> = (0..300)
        .map(|i| (format!("gen/f{i:03}.txt"), Some(b"x\n".to_vec())))
        .collect();
    let head = up
        .sim
        .state()
        .push_commit(SOURCE, "main", "engine-dev", many, "generated")
        .await
        .unwrap();
    let r = reader(&up.sim.url());
    let got = r
        .audit(SOURCE, &up.old, &head, &collected("--old-flag"))
        .await
        .expect("audited");
    match got {
        AuditResult::Unchecked { cause, reason, .. } => {
            assert_eq!(cause, UncheckedCause::TooLarge);
            assert!(reason.contains("300"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // A lower configured bound counts too, and within it the deletion is
    // found with the commit that made it.
    let bounded = reader(&up.sim.url()).with_audit(AuditOptions {
        max_files: 1,
        ..AuditOptions::default()
    });
    let got = bounded
        .audit(SOURCE, &up.old, &up.new, &collected("--old-flag"))
        .await
        .unwrap();
    assert!(
        matches!(&got, AuditResult::Unchecked { reason, .. } if reason.contains("lists 2 changed files, more than the 1")),
        "{got:?}"
    );
    let got = r
        .audit(SOURCE, &up.old, &up.new, &collected("--old-flag"))
        .await
        .unwrap();
    let removed = got.removed();
    assert_eq!(removed.len(), 1, "{got:?}");
    assert_eq!(removed[0].commit.as_deref(), Some(up.removing.as_str()));
    assert_eq!(removed[0].file, "vllm/engine/arg_utils.py");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulated_compare_pages_commits_and_lists_patches_like_github() {
    let up = upstream(true).await;
    let http = klaud_http::http_client().expect("http client");
    let get = |path: String| {
        let http = http.clone();
        let url = format!("{}/repos/{SOURCE}/{path}", up.sim.url());
        async move {
            http.get(url)
                .bearer_auth(TOKEN)
                .header("user-agent", "klaud-test")
                .send()
                .await
                .unwrap()
        }
    };
    let first = get(format!("compare/{}...{}?per_page=1&page=1", up.old, up.new)).await;
    let link = first
        .headers()
        .get("link")
        .map(|v| v.to_str().unwrap().to_owned())
        .expect("a Link header");
    assert!(
        link.contains("rel=\"next\"") && link.contains("page=2"),
        "{link}"
    );
    let v: serde_json::Value = first.json().await.unwrap();
    assert_eq!(v["total_commits"], 2);
    assert_eq!(v["commits"].as_array().unwrap().len(), 1);
    assert_eq!(v["commits"][0]["sha"], up.removing.as_str(), "oldest first");
    let args = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["filename"] == "vllm/engine/arg_utils.py")
        .expect("arg_utils.py changed");
    assert_eq!(args["deletions"], 1);
    assert_eq!(args["additions"], 0);
    let patch = args["patch"].as_str().unwrap();
    assert!(patch.starts_with("@@ -4,6 +4,5 @@"), "{patch}");
    assert!(
        patch.contains("\n-        parser.add_argument(\"--old-flag\", type=int)\n"),
        "{patch}"
    );
    assert!(!patch.ends_with('\n'));
    // Later pages carry commits only.
    let second: serde_json::Value =
        get(format!("compare/{}...{}?per_page=1&page=2", up.old, up.new))
            .await
            .json()
            .await
            .unwrap();
    assert_eq!(second["commits"][0]["sha"], up.new.as_str());
    assert!(second.get("files").is_none(), "{second}");
    // Commits touching one file, newest first.
    let touching: serde_json::Value = get(format!(
        "commits?sha={}&path=vllm/engine/arg_utils.py",
        up.new
    ))
    .await
    .json()
    .await
    .unwrap();
    let shas: Vec<&str> = touching
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["sha"].as_str().unwrap())
        .collect();
    assert_eq!(shas, vec![up.removing.as_str(), up.old.as_str()]);
}
