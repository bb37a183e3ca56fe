//! `klaud claims` as processes against an in-process GitHub simulator:
//! list / acquire / occupied (exit 3) / release, forced release, unparsable
//! claims, the identity preflight, and tokens never appearing in output.

use std::collections::BTreeMap;
use std::process::{Command, Output};

use chrono::TimeDelta;
use klaud_claims::{CandidateId, ClaimBook, ClaimCandidate, Claimant, SystemClock};
use klaud_github::{Credential, ForgeConfig, Github, RetryPolicy, Secret};
use klaud_sandbox::github::{GithubState, Permission};
use serde_json::Value;

const REPO: &str = "sandbox/benchmarks";
const BOT: &str = "Klaud-Cold";
const BOT_TOKEN: &str = "ghp_botSECRETtoken0123456789abcdef";
const MAINTAINER_TOKEN: &str = "ghp_maintainerSECRET0123456789abcd";
const FAMILY: &str = "configs/nvidia-master.yaml:dsr1-fp4-b200-sglang";
const FAMILY_ID: &str = "d92e15065c55779d";

/// A GitHub simulator served from its own thread and runtime for the life
/// of the test process.
struct Sandbox {
    url: String,
    state: GithubState,
}

fn sandbox() -> Sandbox {
    let (url, state) = crate::support::GithubOnly::new(REPO)
        .user(BOT, Some("Klaud Cold"), Some(Permission::Write))
        .user("maintainer", None, Some(Permission::Maintain))
        .token(BOT, BOT_TOKEN, Some(u64::MAX))
        .token("maintainer", MAINTAINER_TOKEN, None)
        .files(
            "maintainer",
            "seed",
            &[(
                "configs/nvidia-master.yaml",
                b"dsr1-fp4-b200-sglang:\n  image: lmsysorg/sglang:v0.5.16-cu130\n\
                  other-key:\n  image: vllm/vllm-openai:v0.25.0\n",
            )],
        )
        .start_detached();
    Sandbox { url, state }
}

/// Runs `klaud claims <args>` against the sandbox with `token`, and checks
/// that no token ever shows up in its output.
fn klaud(sb: &Sandbox, token: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_klaud"));
    cmd.arg("claims")
        .args(args)
        .args(["--github-api", &sb.url, "--repo", REPO])
        .env_remove("KLAUD_GITHUB_TOKEN")
        .env_remove("GITHUB_TOKEN")
        .env_remove("KLAUD_CONFIG")
        .env_remove("GITHUB_RUN_ID")
        .env("RUST_LOG", "debug");
    if let Some(token) = token {
        cmd.env("KLAUD_GITHUB_TOKEN", token);
    }
    let out = cmd.output().unwrap();
    assert_no_secret(&out);
    out
}

fn assert_no_secret(out: &Output) {
    for stream in [&out.stdout, &out.stderr] {
        let text = String::from_utf8_lossy(stream);
        for token in [BOT_TOKEN, MAINTAINER_TOKEN] {
            assert!(
                !text.contains(token),
                "a token leaked into the output:\n{text}"
            );
        }
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", stdout(out)))
}

fn claim_ref() -> String {
    format!("refs/heads/klaud/claim-{FAMILY_ID}")
}

fn tip(sb: &Sandbox) -> Option<String> {
    crate::support::block_on(sb.state.ref_sha(REPO, &claim_ref()))
}

#[test]
fn list_acquire_occupied_and_release_as_processes() {
    let sb = sandbox();
    let out = klaud(&sb, Some(BOT_TOKEN), &["list"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("no claims"), "{}", stdout(&out));

    let out = klaud(
        &sb,
        Some(BOT_TOKEN),
        &["acquire", "--family", FAMILY, "--run-id", "77", "--json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let won = json(&out);
    assert_eq!(won["result"], "acquired");
    assert_eq!(won["ref"], claim_ref());
    assert_eq!(won["fence"], 1);
    assert_eq!(won["run_id"], 77);
    let owner = won["owner"].as_str().unwrap().to_owned();
    assert_eq!(tip(&sb).as_deref(), won["sha"].as_str());

    // Occupied: exit 3 and the holder's owner, run, lease and fence.
    let out = klaud(&sb, Some(BOT_TOKEN), &["acquire", "--family", FAMILY]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let text = stdout(&out);
    for needle in [owner.as_str(), "run 77", "lease until", "fence 1"] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }

    let out = klaud(&sb, Some(BOT_TOKEN), &["list", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let listed = json(&out);
    let claims = listed["claims"].as_array().unwrap();
    assert_eq!(claims.len(), 1);
    let c = &claims[0];
    assert_eq!(c["family_id"], FAMILY_ID);
    assert_eq!(c["owner"], owner);
    assert_eq!(c["run_id"], 77);
    assert_eq!(c["fence"], 1);
    assert_eq!(c["state"], "active");
    assert_eq!(c["manual"], true);
    assert_eq!(c["candidates"][0]["family"], FAMILY);
    assert!(c["holder"].as_str().unwrap().starts_with("klaud/"));
    assert!(c["lease_until"].as_str().unwrap().ends_with('Z'));

    let out = klaud(&sb, Some(BOT_TOKEN), &["list"]);
    let table = stdout(&out);
    // Within 100 columns the owner loses its middle; `--wide` shows it whole.
    assert!(
        table.contains(FAMILY_ID)
            && table.contains(&owner[..7])
            && table.contains("active (manual)")
            && table.contains(FAMILY),
        "{table}"
    );
    assert!(table.lines().all(|l| l.chars().count() <= 100), "{table}");
    let wide = stdout(&klaud(&sb, Some(BOT_TOKEN), &["list", "--wide"]));
    assert!(wide.contains(&owner), "{wide}");

    // Not yours: a reason is required, and a live owner's lease is refused
    // without --force, by id or with another owner.
    let out = klaud(&sb, Some(BOT_TOKEN), &["release", "--family", FAMILY_ID]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--reason"), "{}", stderr(&out));
    let out = klaud(
        &sb,
        Some(BOT_TOKEN),
        &["release", "--family", FAMILY_ID, "--reason", "stuck"],
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("live owner") && stderr(&out).contains("--force --reason"),
        "{}",
        stderr(&out)
    );
    let stranger = uuid::Uuid::new_v4().to_string();
    let out = klaud(
        &sb,
        Some(BOT_TOKEN),
        &["release", "--family", FAMILY, "--owner", &stranger],
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(tip(&sb).is_some(), "a refused release must not delete");

    let out = klaud(
        &sb,
        Some(BOT_TOKEN),
        &["release", "--family", FAMILY, "--owner", &owner, "--json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let released = json(&out);
    assert_eq!(released["result"], "released");
    assert_eq!(released["forced"], false);
    assert_eq!(tip(&sb), None);

    let out = klaud(
        &sb,
        Some(BOT_TOKEN),
        &["release", "--family", FAMILY, "--reason", "cleanup"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("nothing to release"),
        "{}",
        stdout(&out)
    );

    // Recovery leases are listed beside claims.
    let candidate = format!("{FAMILY_ID}-0123456789abcdef");
    crate::support::block_on(async {
        let forge = Github::connect(ForgeConfig {
            api_url: sb.url.clone(),
            repo: REPO.into(),
            bot_login: BOT.into(),
            credential: Credential::Token(Secret::new(BOT_TOKEN)),
            retry: RetryPolicy::default(),
        })
        .await
        .unwrap();
        let base = forge.get_ref("refs/heads/main").await.unwrap().unwrap();
        let clock = SystemClock;
        let book = ClaimBook::new(&forge, &clock, Claimant::new(uuid::Uuid::new_v4()));
        let cand = ClaimCandidate::new(
            base.parse().expect("a sha"),
            FAMILY,
            CandidateId::new(&candidate).unwrap(),
        );
        book.acquire_recovery_lease(77, &cand, &base, 78, TimeDelta::minutes(10))
            .await
            .unwrap();
    });
    let out = klaud(&sb, Some(BOT_TOKEN), &["list", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let listed = json(&out);
    let lease = &listed["claims"][0];
    assert_eq!(lease["kind"], "recovery-lease");
    assert_eq!(
        lease["ref"],
        format!("refs/heads/klaud/recovery-77-{candidate}")
    );
    assert_eq!(lease["family_id"], FAMILY_ID);
    assert_eq!(lease["run_id"], 78);
    assert_eq!(lease["manual"], false);
    let out = klaud(&sb, Some(BOT_TOKEN), &["list"]);
    assert!(
        stdout(&out).contains(&format!("klaud/recovery-77-{candidate}")),
        "{}",
        stdout(&out)
    );
}

#[test]
fn concurrent_acquire_processes_elect_exactly_one_holder() {
    let sb = sandbox();
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_klaud"))
                .args(["claims", "acquire", "--family", FAMILY, "--json"])
                .args(["--github-api", &sb.url, "--repo", REPO])
                .env_remove("GITHUB_TOKEN")
                .env_remove("KLAUD_CONFIG")
                .env_remove("GITHUB_RUN_ID")
                .env("KLAUD_GITHUB_TOKEN", BOT_TOKEN)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<Output> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let codes: Vec<_> = outs.iter().map(|o| o.status.code()).collect();
    assert_eq!(
        codes.iter().filter(|c| **c == Some(0)).count(),
        1,
        "{codes:?}"
    );
    assert_eq!(
        codes.iter().filter(|c| **c == Some(3)).count(),
        3,
        "{codes:?}"
    );
    let winner = outs.iter().find(|o| o.status.code() == Some(0)).unwrap();
    let owner = json(winner)["owner"].as_str().unwrap().to_owned();
    for o in outs.iter().filter(|o| o.status.code() == Some(3)) {
        assert_no_secret(o);
        assert_eq!(json(o)["held_by"]["owner"], owner);
    }
}

#[test]
fn a_forced_release_needs_a_reason_and_records_who_and_why() {
    let sb = sandbox();
    let out = klaud(
        &sb,
        Some(BOT_TOKEN),
        &["acquire", "--family", FAMILY, "--json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let owner = json(&out)["owner"].as_str().unwrap().to_owned();

    let out = klaud(
        &sb,
        Some(BOT_TOKEN),
        &["release", "--family", FAMILY, "--force"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--reason"), "{}", stderr(&out));
    assert!(tip(&sb).is_some());

    let out = klaud(
        &sb,
        Some(BOT_TOKEN),
        &[
            "release",
            "--family",
            FAMILY_ID,
            "--force",
            "--reason",
            "holder crashed; alice checked",
            "--by",
            "alice",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    for needle in [
        "released",
        "by alice",
        "token of Klaud-Cold",
        "forced",
        "holder crashed; alice checked",
        owner.as_str(),
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    assert_eq!(tip(&sb), None);
}

#[test]
fn an_unparsable_claim_is_listed_with_its_error_and_only_deleted_by_hand() {
    let sb = sandbox();
    let planted = crate::support::block_on(sb.state.push_commit(
        REPO,
        &format!("klaud/claim-{FAMILY_ID}"),
        "maintainer",
        BTreeMap::new(),
        "not a claim \u{1b}[31m",
    ))
    .unwrap();

    let out = klaud(&sb, Some(BOT_TOKEN), &["list"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(
        table.contains("UNPARSABLE") && table.contains("not valid JSON"),
        "{table}"
    );
    assert!(table.contains("planning stops"), "{table}");
    assert!(
        !table.contains('\u{1b}'),
        "control characters must be escaped"
    );

    let out = klaud(&sb, Some(BOT_TOKEN), &["list", "--json"]);
    let c = &json(&out)["claims"][0];
    assert_eq!(c["state"], "unparsable");
    assert!(c["error"].as_str().unwrap().contains("not valid JSON"));

    let out = klaud(&sb, Some(BOT_TOKEN), &["acquire", "--family", FAMILY]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stdout(&out).contains("does not parse"), "{}", stdout(&out));
    let out = klaud(
        &sb,
        Some(BOT_TOKEN),
        &["release", "--family", FAMILY, "--reason", "garbage"],
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("does not parse"), "{}", stderr(&out));
    assert_eq!(tip(&sb), Some(planted));

    let out = klaud(
        &sb,
        Some(BOT_TOKEN),
        &[
            "release", "--family", FAMILY, "--force", "--reason", "garbage",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(tip(&sb), None);
}

#[test]
fn a_foreign_token_may_list_but_every_write_is_refused_naming_both_logins() {
    let sb = sandbox();
    // Listing only reads: a maintainer's own token will do, and the
    // command says whose it is.
    let out = klaud(&sb, Some(MAINTAINER_TOKEN), &["list"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("reading {REPO} as maintainer")),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).contains(&format!("no claims in {REPO}")));
    for args in [
        vec!["acquire", "--family", FAMILY],
        vec!["release", "--family", FAMILY, "--force", "--reason", "x"],
    ] {
        let out = klaud(&sb, Some(MAINTAINER_TOKEN), &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("Klaud-Cold") && err.contains("maintainer"),
            "{args:?}: {err}"
        );
        assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    }
    assert_eq!(tip(&sb), None, "nothing was written");
}

#[test]
fn bad_input_is_exit_2_with_what_to_fix() {
    let sb = sandbox();
    let out = klaud(&sb, None, &["list"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("KLAUD_GITHUB_TOKEN"),
        "{}",
        stderr(&out)
    );

    for (args, needle) in [
        (
            vec!["acquire", "--family", "0123456789abcdef"],
            "no family of",
        ),
        (vec!["acquire", "--family", "no-such-key"], "no family of"),
        (
            vec![
                "acquire",
                "--family",
                "configs/nvidia-master.yaml:no-such-key",
            ],
            "no config key",
        ),
        (
            vec!["acquire", "--family", "configs/amd-master.yaml:k"],
            "does not exist",
        ),
        (
            vec!["acquire", "--family", FAMILY, "--lease", "forever"],
            "--lease",
        ),
        (
            vec!["release", "--family", "not a family"],
            "family string like",
        ),
    ] {
        let out = klaud(&sb, Some(BOT_TOKEN), &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{args:?}: {}", stderr(&out));
    }
    assert_eq!(tip(&sb), None);
}

#[test]
fn the_configuration_file_is_read_and_flags_override_it() {
    let sb = sandbox();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("klaud.toml");
    std::fs::write(
        &config,
        format!(
            "[github]\napi_url = \"{}\"\nrepository = \"{REPO}\"\nbot_login = \"someone-else\"\n\
             token_env = [\"MY_TOKEN\"]\n",
            sb.url
        ),
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_klaud"))
            .args(["claims", "list", "--config"])
            .arg(&config)
            .args(extra)
            .env_remove("KLAUD_GITHUB_TOKEN")
            .env_remove("GITHUB_TOKEN")
            .env("MY_TOKEN", BOT_TOKEN)
            .output()
            .unwrap();
        assert_no_secret(&out);
        out
    };
    // The token comes from the file's variable; listing reads as its owner
    // whatever the bot login says.
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("as {BOT}")),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).contains(&format!("no claims in {REPO}")));
    // Writing needs the bot login: the file's does not match, the flag's does.
    let acquire = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_klaud"))
            .args(["claims", "acquire", "--family", FAMILY, "--config"])
            .arg(&config)
            .args(extra)
            .env_remove("KLAUD_GITHUB_TOKEN")
            .env_remove("GITHUB_TOKEN")
            .env("MY_TOKEN", BOT_TOKEN)
            .output()
            .unwrap();
        assert_no_secret(&out);
        out
    };
    let out = acquire(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("someone-else"), "{}", stderr(&out));
    let out = acquire(&["--bot-login", BOT]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn acquire_and_release_take_the_bare_key_and_the_family_id_like_bump() {
    let sb = sandbox();
    let key = FAMILY.split_once(':').map(|(_, k)| k).unwrap();
    let out = klaud(
        &sb,
        Some(BOT_TOKEN),
        &["acquire", "--family", key, "--json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["family"], FAMILY, "the key resolved to the family string");
    let owner = v["owner"].as_str().unwrap().to_owned();
    let out = klaud(
        &sb,
        Some(BOT_TOKEN),
        &["release", "--family", key, "--owner", &owner],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(tip(&sb), None, "released by its key");
    let out = klaud(&sb, Some(BOT_TOKEN), &["acquire", "--family", FAMILY_ID]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(tip(&sb).is_some(), "acquired by its id");
}

#[test]
fn an_unreachable_api_is_a_failure_exit_1() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = Command::new(env!("CARGO_BIN_EXE_klaud"))
        .args(["claims", "list", "--repo", REPO, "--github-api"])
        .arg(format!("http://127.0.0.1:{port}"))
        .env_remove("GITHUB_TOKEN")
        .env_remove("KLAUD_CONFIG")
        .env("KLAUD_GITHUB_TOKEN", BOT_TOKEN)
        .output()
        .unwrap();
    assert_no_secret(&out);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("network error"), "{}", stderr(&out));
}

#[test]
fn an_expired_claim_is_released_with_a_reason_and_no_force() {
    let sb = sandbox();
    let out = klaud(
        &sb,
        Some(BOT_TOKEN),
        &["acquire", "--family", FAMILY, "--lease", "1s", "--json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let owner = json(&out)["owner"].as_str().unwrap().to_owned();
    // GitHub's clock moves past the lease: `klaud` reads leases on it.
    crate::support::block_on(sb.state.set_clock_offset(chrono::TimeDelta::minutes(1)));
    let out = klaud(
        &sb,
        Some(BOT_TOKEN),
        &[
            "release", "--family", FAMILY, "--reason", "run died", "--by", "bob", "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let released = json(&out);
    assert_eq!(released["result"], "released");
    assert_eq!(released["forced"], false);
    assert_eq!(released["released_by"], "bob");
    assert_eq!(released["reason"], "run died");
    assert_eq!(released["previous"]["owner"], owner.as_str());
    assert_eq!(released["previous"]["state"], "expired");
    assert_eq!(tip(&sb), None);
}
