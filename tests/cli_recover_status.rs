//! `klaud status --json` and `klaud recover` as processes against an
//! in-process GitHub simulator.

use std::process::{Command, Output};

use chrono::TimeDelta;
use klaud_claims::{CandidateId, ClaimBook, ClaimCandidate, Claimant, SystemClock};
use klaud_github::{Credential, ForgeConfig, Github, RetryPolicy, Secret};
use klaud_sandbox::github::{GithubState, Permission};
use serde_json::Value;

const REPO: &str = "sandbox/benchmarks";
const BOT: &str = "Klaud-Cold";
const BOT_TOKEN: &str = "ghp_botSECRETtoken0123456789abcdef";
const FAMILY: &str = "configs/nvidia-master.yaml:demo-fp4-b200-sglang";

struct Sandbox {
    url: String,
    state: GithubState,
}

fn sandbox() -> Sandbox {
    let (url, state) = crate::support::GithubOnly::new(REPO)
        .user(BOT, Some("Klaud Cold"), Some(Permission::Write))
        .user("maintainer", None, None)
        .token(BOT, BOT_TOKEN, Some(u64::MAX))
        .seed_dir(&crate::support::demo_seed(), "maintainer")
        .start_detached();
    Sandbox { url, state }
}

fn klaud(sb: &Sandbox, store: &std::path::Path, args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_klaud"))
        .args(args)
        .args(["--github-api", &sb.url, "--repo", REPO])
        .arg("--store")
        .arg(store)
        .env_remove("KLAUD_CONFIG")
        .env_remove("GITHUB_TOKEN")
        .env_remove("GITHUB_RUN_ID")
        .env("KLAUD_GITHUB_TOKEN", BOT_TOKEN)
        .output()
        .expect("run klaud");
    for stream in [&out.stdout, &out.stderr] {
        assert!(
            !String::from_utf8_lossy(stream).contains(BOT_TOKEN),
            "the token leaked"
        );
    }
    out
}

fn json(out: &Output) -> Value {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

#[test]
fn status_lists_an_expired_claim_and_recover_releases_it() {
    let sb = sandbox();
    let dir = tempfile::tempdir().expect("tempdir");
    let family_id = klaud_planner::identity::family_id(FAMILY);
    let candidate = format!("{family_id}-0123456789abcdef");
    // Another instance claimed the family with a one-second lease and died.
    crate::support::block_on(async {
        let forge = Github::connect_unchecked(ForgeConfig {
            api_url: sb.url.clone(),
            repo: REPO.into(),
            bot_login: BOT.into(),
            credential: Credential::Token(Secret::new(BOT_TOKEN)),
            retry: RetryPolicy::default(),
        })
        .expect("forge");
        let base = forge
            .get_ref("refs/heads/main")
            .await
            .expect("main")
            .expect("main exists");
        let clock = SystemClock;
        let book = ClaimBook::new(&forge, &clock, Claimant::new(uuid::Uuid::new_v4()));
        let cand = ClaimCandidate::new(
            base.parse().expect("a sha"),
            FAMILY,
            CandidateId::new(&candidate).expect("id"),
        );
        book.acquire(
            &cand.id.family(),
            vec![cand],
            &base,
            31337,
            TimeDelta::seconds(1),
        )
        .await
        .expect("acquire");
    });
    // GitHub's clock moves past the lease: `klaud` reads leases on it.
    crate::support::block_on(sb.state.set_clock_offset(TimeDelta::minutes(1)));

    let status = json(&klaud(&sb, dir.path(), &["status", "--json"]));
    assert_eq!(status["bot_login"], BOT);
    let repo = &status["repositories"][0];
    assert_eq!(repo["name"], REPO);
    assert_eq!(
        repo["claims"][0]["family_id"],
        family_id.as_str(),
        "{status:#}"
    );
    assert_eq!(repo["claims"][0]["run_id"], 31337);

    let recovered = json(&klaud(&sb, dir.path(), &["recover", "--json"]));
    let list = recovered["recovered"].as_array().expect("recovered");
    assert_eq!(list.len(), 1, "{recovered:#}");
    assert_eq!(list[0]["candidate"], candidate.as_str());
    assert_eq!(list[0]["orphan_run"], 31337);
    assert_eq!(list[0]["outcome"], "unexpected-error");
    assert_eq!(
        crate::support::block_on(
            sb.state
                .ref_sha(REPO, &format!("refs/heads/klaud/claim-{family_id}"))
        ),
        None
    );

    let again = json(&klaud(&sb, dir.path(), &["recover", "--json"]));
    assert_eq!(again["recovered"].as_array().map(Vec::len), Some(0));
    let status = json(&klaud(&sb, dir.path(), &["status", "--json"]));
    assert_eq!(
        status["repositories"][0]["claims"].as_array().map(Vec::len),
        Some(0)
    );
}

/// `recover --family` with a family neither a claim nor the repository
/// has is a typo, not "nothing to recover": exit 2 naming it and where the
/// families are listed. A family that exists but has no claim is fine.
#[test]
fn recover_of_an_unknown_family_exits_non_zero_naming_it() {
    let sb = sandbox();
    let dir = tempfile::tempdir().expect("tempdir");
    let unknown = klaud(&sb, dir.path(), &["recover", "--family", "nope"]);
    assert_eq!(
        unknown.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&unknown.stderr)
    );
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        stderr.contains("\"nope\"") && stderr.contains("klaud families"),
        "{stderr}"
    );
    let string = klaud(
        &sb,
        dir.path(),
        &["recover", "--family", "configs/nvidia-master.yaml:nope"],
    );
    assert_eq!(string.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&string.stderr).contains("nope"),
        "{}",
        String::from_utf8_lossy(&string.stderr)
    );
    for known in [FAMILY, "demo-fp4-b200-sglang"] {
        let out = klaud(&sb, dir.path(), &["recover", "--family", known]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{known}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("no claims to recover"));
    }
}
