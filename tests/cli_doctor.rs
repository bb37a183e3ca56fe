//! `klaud doctor` as a process against the sandbox stack (GitHub, registry
//! and baseline simulators on loopback): all checks pass and nothing is
//! written; a token of another account, an unparsable claim ref, a missing
//! workflow, an unreachable registry, a held store and a bad configuration
//! each show up in their own check while the others still run.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use klaud_sandbox::github::GithubState;
use klaud_sandbox::stack::{BOT_TOKEN, MAINTAINER};
use serde_json::Value;

use crate::support::{BOT, Harness, REPO};

/// The variable the tests' configuration reads the token from, so nothing
/// in the developer's environment leaks in.
const TOKEN_ENV: &str = "KLAUD_DOCTOR_TEST_TOKEN";
/// A recognisable token of another account.
const OTHER_LOGIN: &str = "someone-else";
const OTHER_TOKEN: &str = "ghp_doctorOTHERuserSECRET0123456789abcd";

const CHECKS: [&str; 13] = [
    "config",
    "token",
    "identity",
    "permission",
    "base-branch",
    "workflows",
    "playbook",
    "claims",
    "rate-limit",
    "registries",
    "baseline",
    "capacity",
    "store",
];

struct Sandbox {
    github: String,
    registry: String,
    baseline: String,
    capacity: String,
    /// Extra configuration text appended by [`Sandbox::config`].
    extra_toml: std::cell::RefCell<String>,
    state: GithubState,
    dir: tempfile::TempDir,
}

/// The sandbox stack with the demo repository, served from its own thread
/// for the life of the test process.
fn sandbox() -> Sandbox {
    let (github, registry, baseline, capacity, state) = crate::support::detached(
        || {
            Harness::demo()
                .poll(Duration::from_secs(3600))
                .start_stack()
        },
        |stack: &klaud_sandbox::stack::SandboxStack| {
            (
                stack.github.url(),
                stack.registry_url.clone(),
                stack.baseline_url.clone(),
                stack.capacity_url.clone(),
                stack.state().clone(),
            )
        },
    );
    Sandbox {
        github,
        registry,
        baseline,
        capacity,
        extra_toml: std::cell::RefCell::new(String::new()),
        state,
        dir: tempfile::tempdir().expect("tempdir"),
    }
}

impl Sandbox {
    /// A configuration for the stack; the registry hosts come from `--mirror`.
    fn config(&self) -> PathBuf {
        let path = self.dir.path().join("klaud.toml");
        let text = format!(
            r#"
[github]
api_url = "{github}"
repository = "{REPO}"
bot_login = "{BOT}"
token_env = ["{TOKEN_ENV}"]

[registry]
timeout = "5s"
max_retries = 1

[lifecycle]
baseline_api = "{baseline}"
"#,
            github = self.github,
            baseline = self.baseline,
        ) + self.extra_toml.borrow().as_str();
        std::fs::write(&path, text).expect("config");
        path
    }

    fn store(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    /// Runs `klaud doctor --json` with `token` and the given mirrors.
    fn doctor(&self, token: Option<&str>, mirrors: &[(&str, &str)], extra: &[&str]) -> Output {
        self.doctor_env(token, mirrors, extra, &[])
    }

    /// [`Sandbox::doctor`] with extra environment variables.
    fn doctor_env(
        &self,
        token: Option<&str>,
        mirrors: &[(&str, &str)],
        extra: &[&str],
        envs: &[(&str, &str)],
    ) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_klaud"));
        cmd.env_remove("GITHUB_ACTIONS")
            .env_remove("KLAUD_INSTANCE_ID")
            .envs(envs.iter().copied());
        cmd.args(["doctor", "--json", "--config"])
            .arg(self.config())
            .arg("--store")
            .arg(self.store())
            .args(extra)
            .env_remove("KLAUD_CONFIG")
            .env_remove("KLAUD_GITHUB_TOKEN")
            .env_remove("GITHUB_TOKEN")
            .env_remove(TOKEN_ENV)
            .env("RUST_LOG", "debug");
        for (host, url) in mirrors {
            cmd.arg("--mirror").arg(format!("{host}={url}"));
        }
        if let Some(token) = token {
            cmd.env(TOKEN_ENV, token);
        }
        let out = cmd.output().expect("run klaud doctor");
        for stream in [&out.stdout, &out.stderr] {
            let text = String::from_utf8_lossy(stream);
            for secret in [BOT_TOKEN, OTHER_TOKEN] {
                assert!(!text.contains(secret), "a token leaked:\n{text}");
            }
        }
        out
    }

    /// Both demo registry hosts served by the registry simulator.
    fn mirrors(&self) -> Vec<(&'static str, String)> {
        vec![
            ("docker.io", self.registry.clone()),
            ("nvcr.io", self.registry.clone()),
        ]
    }

    fn doctor_with_registry(&self, token: Option<&str>) -> Output {
        let mirrors = self.mirrors();
        let m: Vec<(&str, &str)> = mirrors.iter().map(|(h, u)| (*h, u.as_str())).collect();
        self.doctor(token, &m, &[])
    }
}

/// The checks as (name → (status, detail)), asserting their order.
fn checks(out: &Output) -> BTreeMap<String, (String, String)> {
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let list = v.as_array().expect("an array of checks");
    let names: Vec<&str> = list
        .iter()
        .map(|c| c["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, CHECKS, "every check, in order");
    list.iter()
        .map(|c| {
            (
                c["name"].as_str().expect("name").to_owned(),
                (
                    c["status"].as_str().expect("status").to_owned(),
                    c["detail"].as_str().expect("detail").to_owned(),
                ),
            )
        })
        .collect()
}

fn status<'a>(checks: &'a BTreeMap<String, (String, String)>, name: &str) -> &'a str {
    &checks[name].0
}

fn detail<'a>(checks: &'a BTreeMap<String, (String, String)>, name: &str) -> &'a str {
    &checks[name].1
}

fn report(checks: &BTreeMap<String, (String, String)>) -> String {
    checks
        .iter()
        .map(|(n, (s, d))| format!("{n}: {s}: {d}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn everything_passes_against_the_sandbox_and_nothing_is_written() {
    let sb = sandbox();
    let out = sb.doctor_with_registry(Some(BOT_TOKEN));
    let c = checks(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        report(&c),
        String::from_utf8_lossy(&out.stderr)
    );
    for name in CHECKS {
        assert_eq!(status(&c, name), "ok", "{}", report(&c));
    }
    assert!(detail(&c, "identity").contains(BOT), "{}", report(&c));
    assert!(
        detail(&c, "base-branch").contains("families"),
        "{}",
        report(&c)
    );
    // The demo's sweep starts on the pull requests Klaud makes.
    assert!(
        detail(&c, "workflows").contains("run-sweep.yml starts on Klaud's PR labelled"),
        "{}",
        report(&c)
    );
    assert!(
        detail(&c, "registries").contains("docker.io"),
        "{}",
        report(&c)
    );
    assert!(
        detail(&c, "registries").contains("nvcr.io"),
        "{}",
        report(&c)
    );
    // What Docker Hub lets the plan pull: no credentials are configured.
    assert!(
        detail(&c, "registries").contains("Docker Hub pulls anonymously: 10 pulls per hour"),
        "{}",
        report(&c)
    );
    assert!(
        detail(&c, "rate-limit").contains("GET /rate_limit"),
        "{}",
        report(&c)
    );
    // Every model prefix of the demo with the name the results API knows.
    assert!(
        detail(&c, "baseline").contains(r#"model names: demo = "Klaud-Demo-Bench""#),
        "{}",
        report(&c)
    );

    let log = crate::support::block_on(sb.state.request_log());
    assert!(!log.is_empty(), "doctor asked GitHub nothing");
    let writes: Vec<String> = log
        .iter()
        .filter(|e| matches!(e.method.as_str(), "POST" | "PATCH" | "PUT" | "DELETE"))
        .map(|e| format!("{} {}", e.method, e.path))
        .collect();
    assert!(writes.is_empty(), "doctor wrote to GitHub: {writes:?}");
    assert!(!sb.store().exists(), "doctor created the store");

    // The table form says the same.
    let out = Command::new(env!("CARGO_BIN_EXE_klaud"))
        .args(["doctor", "--config"])
        .arg(sb.config())
        .arg("--store")
        .arg(sb.store())
        .args(["--mirror", &format!("docker.io={}", sb.registry)])
        .args(["--mirror", &format!("nvcr.io={}", sb.registry)])
        .env_remove("KLAUD_CONFIG")
        .env(TOKEN_ENV, BOT_TOKEN)
        .output()
        .expect("run klaud doctor");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.starts_with("CHECK"), "{text}");
    assert!(
        text.ends_with("13 checks: 13 ok, 0 warn, 0 fail\n"),
        "{text}"
    );
}

#[test]
fn a_token_of_another_account_reads_as_that_account_and_the_rest_still_runs() {
    let sb = sandbox();
    crate::support::block_on(async {
        sb.state.add_user(OTHER_LOGIN, None, false).await;
        sb.state
            .add_token(OTHER_LOGIN, OTHER_TOKEN, None)
            .await
            .expect("token");
    });
    let out = sb.doctor_with_registry(Some(OTHER_TOKEN));
    let c = checks(&out);
    // Doctor only reads: a maintainer's token is accepted (a warning says
    // whose it is and that waves need the bot's).
    assert_eq!(status(&c, "identity"), "warn", "{}", report(&c));
    let identity = detail(&c, "identity");
    assert!(identity.contains("reading as"), "{identity}");
    assert!(
        identity.contains(OTHER_LOGIN) && identity.contains(BOT),
        "the identity check names both logins: {identity}"
    );
    // Reads with that token still work, so the later checks ran.
    for name in ["base-branch", "workflows", "claims", "registries", "store"] {
        assert_eq!(status(&c, name), "ok", "{}", report(&c));
    }
}

#[test]
fn an_unparsable_claim_ref_fails_the_claims_check_naming_it() {
    let sb = sandbox();
    let name = "klaud/claim-0123456789abcdef";
    crate::support::block_on(sb.state.push_commit(
        REPO,
        name,
        MAINTAINER,
        BTreeMap::new(),
        "not a claim record",
    ))
    .expect("plant");
    let out = sb.doctor_with_registry(Some(BOT_TOKEN));
    let c = checks(&out);
    assert_eq!(out.status.code(), Some(2), "{}", report(&c));
    assert_eq!(status(&c, "claims"), "fail", "{}", report(&c));
    let claims = detail(&c, "claims");
    assert!(claims.contains(&format!("refs/heads/{name}")), "{claims}");
    assert!(claims.contains("by hand"), "{claims}");
    assert_eq!(status(&c, "rate-limit"), "ok", "{}", report(&c));
}

/// A record that parses but names another family's candidate is as
/// malformed as one that does not parse: the claims check fails naming it,
/// and nothing deletes it.
#[test]
fn a_claim_naming_another_familys_candidate_fails_the_claims_check() {
    let sb = sandbox();
    let family = "configs/nvidia-master.yaml:demo-fp4-b200-sglang";
    let family_id = klaud_planner::identity::family_id(family);
    let other_id = klaud_planner::identity::family_id("configs/amd-master.yaml:other");
    let base = crate::support::block_on(sb.state.ref_sha(REPO, "refs/heads/main")).expect("main");
    let record = serde_json::json!({
        "candidates": [{"base": base, "family": family, "id": format!("{other_id}-0123456789abcdef")}],
        "fence": 1,
        "holder": "klaud/0.0.0",
        "lease-until": "2020-01-01T00:00:00Z",
        "owner": "6f1c7d0e-1b2a-4c3d-8e9f-0a1b2c3d4e5f",
        "run-id": 7,
    });
    let name = format!("klaud/claim-{family_id}");
    let planted = crate::support::block_on(sb.state.push_commit(
        REPO,
        &name,
        MAINTAINER,
        BTreeMap::new(),
        &record.to_string(),
    ))
    .expect("plant");
    let out = sb.doctor_with_registry(Some(BOT_TOKEN));
    let c = checks(&out);
    assert_eq!(out.status.code(), Some(2), "{}", report(&c));
    assert_eq!(status(&c, "claims"), "fail", "{}", report(&c));
    let claims = detail(&c, "claims");
    assert!(
        claims.contains(&format!("refs/heads/{name}")) && claims.contains(&other_id),
        "{claims}"
    );
    assert_eq!(
        crate::support::block_on(sb.state.ref_sha(REPO, &format!("refs/heads/{name}"))),
        Some(planted)
    );
}

#[test]
fn an_expired_lease_is_a_warning_for_recovery() {
    let sb = sandbox();
    let family = "configs/nvidia-master.yaml:demo-fp4-b200-sglang";
    let family_id = klaud_planner::identity::family_id(family);
    let base = crate::support::block_on(sb.state.ref_sha(REPO, "refs/heads/main")).expect("main");
    let record = serde_json::json!({
        "candidates": [{"base": base, "family": family, "id": format!("{family_id}-0123456789abcdef")}],
        "fence": 1,
        "holder": "klaud/0.0.0",
        "lease-until": "2020-01-01T00:00:00Z",
        "owner": "6f1c7d0e-1b2a-4c3d-8e9f-0a1b2c3d4e5f",
        "run-id": 7,
    });
    crate::support::block_on(sb.state.push_commit(
        REPO,
        &format!("klaud/claim-{family_id}"),
        MAINTAINER,
        BTreeMap::new(),
        &record.to_string(),
    ))
    .expect("plant");
    let out = sb.doctor_with_registry(Some(BOT_TOKEN));
    let c = checks(&out);
    assert_eq!(out.status.code(), Some(0), "{}", report(&c));
    assert_eq!(status(&c, "claims"), "warn", "{}", report(&c));
    assert!(detail(&c, "claims").contains("expired"), "{}", report(&c));
    assert!(detail(&c, "claims").contains(&family_id), "{}", report(&c));
}

#[test]
fn a_missing_workflow_fails_the_workflows_check() {
    let sb = sandbox();
    assert!(
        crate::support::block_on(sb.state.remove_workflow(REPO, "run-sweep.yml")).expect("remove")
    );
    let out = sb.doctor_with_registry(Some(BOT_TOKEN));
    let c = checks(&out);
    assert_eq!(out.status.code(), Some(2), "{}", report(&c));
    assert_eq!(status(&c, "workflows"), "fail", "{}", report(&c));
    let workflows = detail(&c, "workflows");
    assert!(
        workflows.contains("run-sweep.yml is missing"),
        "{workflows}"
    );
    assert!(!workflows.contains("e2e-tests.yml"), "{workflows}");
}

#[test]
fn an_unreachable_registry_fails_its_check_and_doctor_finishes() {
    let sb = sandbox();
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        format!("http://127.0.0.1:{}", l.local_addr().expect("addr").port())
    };
    let out = sb.doctor(
        Some(BOT_TOKEN),
        &[("docker.io", sb.registry.as_str()), ("nvcr.io", &closed)],
        &[],
    );
    let c = checks(&out);
    assert_eq!(out.status.code(), Some(2), "{}", report(&c));
    assert_eq!(status(&c, "registries"), "fail", "{}", report(&c));
    let registries = detail(&c, "registries");
    assert!(registries.contains("nvcr.io"), "{registries}");
    assert!(
        registries.contains(&closed),
        "names the mirror: {registries}"
    );
    assert!(
        registries.contains("answering: docker.io"),
        "the reachable host is still reported: {registries}"
    );
    assert_eq!(status(&c, "baseline"), "ok", "{}", report(&c));
    assert_eq!(status(&c, "store"), "ok", "{}", report(&c));
}

#[test]
fn a_store_held_by_a_running_instance_is_only_a_warning() {
    let sb = sandbox();
    let store = klaud_store::Store::open(sb.store()).expect("store");
    let out = sb.doctor_with_registry(Some(BOT_TOKEN));
    let c = checks(&out);
    assert_eq!(out.status.code(), Some(0), "{}", report(&c));
    assert_eq!(status(&c, "store"), "warn", "{}", report(&c));
    assert!(detail(&c, "store").contains("held by a running Klaud"));
    drop(store);
}

#[test]
fn without_a_token_the_github_checks_are_skipped_not_failed() {
    let sb = sandbox();
    let out = sb.doctor_with_registry(None);
    let c = checks(&out);
    assert_eq!(out.status.code(), Some(2), "{}", report(&c));
    assert_eq!(status(&c, "token"), "fail");
    assert!(detail(&c, "token").contains(TOKEN_ENV), "{}", report(&c));
    for name in ["identity", "permission", "claims", "registries"] {
        assert_eq!(status(&c, name), "warn", "{}", report(&c));
        assert!(
            detail(&c, name).starts_with("not checked"),
            "{}",
            report(&c)
        );
    }
    assert_eq!(status(&c, "baseline"), "ok", "{}", report(&c));
}

#[test]
fn a_bad_configuration_fails_first_and_skips_the_rest() {
    let sb = sandbox();
    let path = sb.dir.path().join("bad.toml");
    std::fs::write(&path, "[github]\nbot_logn = \"typo\"\n").expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_klaud"))
        .args(["doctor", "--json", "--config"])
        .arg(&path)
        .env(TOKEN_ENV, BOT_TOKEN)
        .output()
        .expect("run klaud doctor");
    let c = checks(&out);
    assert_eq!(out.status.code(), Some(2), "{}", report(&c));
    assert_eq!(status(&c, "config"), "fail");
    assert!(detail(&c, "config").contains("bot_logn"), "{}", report(&c));
    for name in &CHECKS[1..] {
        assert_eq!(status(&c, name), "warn", "{}", report(&c));
    }
    assert!(crate::support::block_on(sb.state.request_log()).is_empty());
}

#[test]
fn without_a_rate_limit_endpoint_the_budget_comes_from_response_headers() {
    use klaud_sandbox::github::{Fault, FaultAction};
    let sb = sandbox();
    // GitHub Enterprise answers 404 when rate limiting is off.
    crate::support::block_on(sb.state.add_fault(Fault {
        method: Some("GET".into()),
        path: "/rate_limit".into(),
        count: 1,
        action: FaultAction::Status {
            status: 404,
            retry_after: None,
            message: Some("Rate limiting is not enabled.".into()),
        },
    }));
    let out = sb.doctor_with_registry(Some(BOT_TOKEN));
    let c = checks(&out);
    assert_eq!(out.status.code(), Some(0), "{}", report(&c));
    assert_eq!(status(&c, "rate-limit"), "ok", "{}", report(&c));
    assert!(
        detail(&c, "rate-limit").contains("from response headers"),
        "{}",
        report(&c)
    );
}

#[test]
fn a_malformed_mirror_fails_the_config_check_and_github_is_still_checked() {
    let sb = sandbox();
    let out = sb.doctor(Some(BOT_TOKEN), &[], &["--mirror", "docker.io"]);
    let c = checks(&out);
    assert_eq!(out.status.code(), Some(2), "{}", report(&c));
    assert_eq!(status(&c, "config"), "fail", "{}", report(&c));
    assert!(detail(&c, "config").contains("HOST=URL"), "{}", report(&c));
    assert_eq!(status(&c, "registries"), "warn", "{}", report(&c));
    for name in ["identity", "base-branch", "claims"] {
        assert_eq!(status(&c, name), "ok", "{}", report(&c));
    }
}

#[test]
fn an_unreachable_github_api_fails_identity_once_and_skips_the_github_checks() {
    let sb = sandbox();
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        format!("http://127.0.0.1:{}", l.local_addr().expect("addr").port())
    };
    let out = sb.doctor(Some(BOT_TOKEN), &[], &["--github-api", &closed]);
    let c = checks(&out);
    assert_eq!(out.status.code(), Some(2), "{}", report(&c));
    assert_eq!(status(&c, "identity"), "fail", "{}", report(&c));
    assert!(
        detail(&c, "identity").contains("network error"),
        "{}",
        report(&c)
    );
    for name in [
        "permission",
        "base-branch",
        "workflows",
        "claims",
        "rate-limit",
    ] {
        assert_eq!(status(&c, name), "warn", "{}", report(&c));
        assert!(
            detail(&c, name).starts_with("not checked"),
            "{}",
            report(&c)
        );
    }
    assert_eq!(status(&c, "baseline"), "ok", "{}", report(&c));
}

#[test]
fn an_actions_run_with_a_fresh_store_and_no_instance_id_is_warned() {
    let sb = sandbox();
    let mirrors = sb.mirrors();
    let mirrors: Vec<(&str, &str)> = mirrors.iter().map(|(h, u)| (*h, u.as_str())).collect();
    let actions = [("GITHUB_ACTIONS", "true")];
    let out = sb.doctor_env(Some(BOT_TOKEN), &mirrors, &[], &actions);
    let c = checks(&out);
    assert_eq!(out.status.code(), Some(0), "{}", report(&c));
    assert_eq!(status(&c, "store"), "warn", "{}", report(&c));
    assert!(
        detail(&c, "store").contains("KLAUD_INSTANCE_ID"),
        "{}",
        report(&c)
    );

    let id = "6f1c2b3a-4d5e-4f60-8a9b-0c1d2e3f4a5b";
    let with_id = [("GITHUB_ACTIONS", "true"), ("KLAUD_INSTANCE_ID", id)];
    let out = sb.doctor_env(Some(BOT_TOKEN), &mirrors, &[], &with_id);
    let c = checks(&out);
    assert_eq!(status(&c, "store"), "ok", "{}", report(&c));
    assert!(detail(&c, "store").contains(id), "{}", report(&c));

    let out = sb.doctor(Some(BOT_TOKEN), &mirrors, &["--instance-id", "nope"]);
    let c = checks(&out);
    assert_eq!(out.status.code(), Some(2), "{}", report(&c));
    assert_eq!(status(&c, "store"), "fail", "{}", report(&c));
}

#[test]
fn doctor_says_when_no_capacity_gate_is_configured_and_reads_the_api_when_one_is() {
    let sb = sandbox();
    let c = checks(&sb.doctor_with_registry(Some(BOT_TOKEN)));
    let (status, detail) = &c["capacity"];
    assert_eq!(status, "ok", "{detail}");
    assert!(detail.contains("no capacity gate"), "{detail}");

    *sb.extra_toml.borrow_mut() = format!(
        "\n[capacity]\norigin = \"{}\"\nkey_env = \"KLAUD_DOCTOR_CAPACITY_KEY\"\n",
        sb.capacity
    );
    let mirrors = sb.mirrors();
    let m: Vec<(&str, &str)> = mirrors.iter().map(|(h, u)| (*h, u.as_str())).collect();
    let key = klaud_sandbox::stack::CAPACITY_KEY;
    let out = sb.doctor_env(
        Some(BOT_TOKEN),
        &m,
        &[],
        &[("KLAUD_DOCTOR_CAPACITY_KEY", key)],
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains(key),
        "the key leaked"
    );
    let c = checks(&out);
    let (status, detail) = &c["capacity"];
    assert_eq!(status, "ok", "{detail}");
    assert!(
        detail.contains("/api/status/clusters answers: 5 cluster(s), 5 with room"),
        "{detail}"
    );

    // No key, or a wrong one: fail, naming what to fix.
    let c = checks(&sb.doctor_env(Some(BOT_TOKEN), &m, &[], &[]));
    let (status, detail) = &c["capacity"];
    assert_eq!(status, "fail", "{detail}");
    assert!(detail.contains("set KLAUD_DOCTOR_CAPACITY_KEY"), "{detail}");
    let c = checks(&sb.doctor_env(
        Some(BOT_TOKEN),
        &m,
        &[],
        &[("KLAUD_DOCTOR_CAPACITY_KEY", "wrong")],
    ));
    let (status, detail) = &c["capacity"];
    assert_eq!(status, "fail", "{detail}");
    assert!(detail.contains("401"), "{detail}");
}

#[test]
fn doctor_names_a_model_prefix_the_results_api_knows_no_name_for() {
    let sb = sandbox();
    crate::support::block_on(async {
        let status = klaud_http::http_client()
            .expect("client")
            .post(format!("{}/_control/models", sb.baseline))
            .json(&serde_json::json!({"prefix": "demo", "name": null}))
            .send()
            .await
            .expect("control route")
            .status();
        assert!(status.is_success(), "{status}");
    });
    let out = sb.doctor_with_registry(Some(BOT_TOKEN));
    let c = checks(&out);
    assert_eq!(status(&c, "baseline"), "warn", "{}", report(&c));
    assert!(
        detail(&c, "baseline").contains(
            r#"demo: unknown to the API; set [lifecycle.model_names] "demo" = "<display name>""#
        ),
        "{}",
        report(&c)
    );
}

#[test]
fn doctor_reads_the_playbook_at_the_base_branch_and_names_each_error() {
    let sb = sandbox();
    let c = checks(&sb.doctor(Some(BOT_TOKEN), &[], &[]));
    let (status, detail) = &c["playbook"];
    assert_eq!(status, "ok", "{detail}");
    // The demo repository's own playbook (configs/demo/.github).
    assert!(
        detail.starts_with(
            ".github/klaud-playbook.yaml: 3 entries (1 engine with 2 fixes, 1 infrastructure, \
             1 teardown, 0 setup), 1 sick nodes"
        ),
        "{detail}"
    );

    // A file of the base branch that is no playbook: every problem named,
    // with its line and key.
    *sb.extra_toml.borrow_mut() = "playbook = \"configs/runners.yaml\"\n".to_owned();
    let c = checks(&sb.doctor(Some(BOT_TOKEN), &[], &[]));
    let (status, detail) = &c["playbook"];
    assert_eq!(status, "fail", "{detail}");
    for want in [
        "configs/runners.yaml:1: labels: unknown key (known: version, entries, nodes)",
        "configs/runners.yaml:1: version: missing (write `version: 1`)",
        "configs/runners.yaml:1: entries: missing",
    ] {
        assert!(detail.contains(want), "{want:?} missing in {detail}");
    }
}
