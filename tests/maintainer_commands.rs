//! Maintainer commands on Klaud's candidate PRs and `klaud recover`,
//! through the real octocrab forge against the GitHub simulator.

use std::collections::BTreeSet;
use std::time::Duration;

use klaud_claims::{CandidateId, Claimant, Clock as _};
use klaud_github::{ForgeRunCompletion, Github};
use klaud_lifecycle::engine::{CandidateRecord, Journal, MemoryJournal, Step, Target};
use klaud_lifecycle::model::Outcome;
use klaud_sandbox::github::{Fault, FaultAction, Permission};
use klaud_sandbox::stack::{MAINTAINER, MAINTAINER_TOKEN};

use crate::support::{Harness, REPO};
use klaud_service::GithubLifecycle;
use klaud_service::pr_commands::{handle_commands, reply_marker};

const READER: &str = "sandbox-reader";
const READER_TOKEN: &str = "ghp_sandbox_reader";
const OWNER_RUN: u64 = 5151;
const KEY: &str = "demo-fp4-b200-sglang";

fn owner() -> Claimant {
    Claimant::new(uuid::Uuid::from_u128(0x636f_6d6d_616e_6473))
}

/// The demo sandbox with a reader besides the maintainer; no CI.
async fn env() -> Harness {
    Harness::demo()
        .owner(owner())
        .owner_run(OWNER_RUN)
        .user(
            READER,
            Some("Sandbox Reader"),
            READER_TOKEN,
            Permission::Read,
        )
        .start()
        .await
}

impl Harness {
    /// The target of [`KEY`], as the wave hands it over without a source
    /// repository.
    async fn plain_target(&self) -> Target {
        let mut target = self.target(KEY).await;
        target.upstream = None;
        target
    }

    /// A candidate driven until its smoke run is dispatched (no CI: the
    /// run stays queued), so it has a PR and holds its claim.
    async fn live_candidate(&self) -> CandidateRecord {
        let target = self.plain_target().await;
        let lifecycle = GithubLifecycle::new(&self.forge);
        let engine = self.engine(&lifecycle, &self.journal, self.clock);
        let mut rec = engine.open_record(&target).await.expect("record");
        for _ in 0..100 {
            engine.step(&mut rec).await.expect("step");
            if rec.attempts.first().is_some_and(|a| a.run.is_some()) {
                return rec;
            }
        }
        panic!("never dispatched: {rec:#?}");
    }

    /// One pass of command handling, as the wave runs it.
    async fn handle(&self, forge: &Github, rec: &mut CandidateRecord) -> usize {
        let lifecycle = GithubLifecycle::new(forge);
        let engine = self.engine(&lifecycle, &self.journal, self.clock);
        handle_commands(forge, &engine, rec, None)
            .await
            .expect("handle commands")
            .len()
    }

    /// Posts `body` as the user `_login` (whom `token` belongs to).
    async fn comment_as(
        &self,
        _login: &str,
        token: &str,
        number: impl Into<u64>,
        body: &str,
    ) -> u64 {
        let number: u64 = number.into();
        self.person(token).comment(number, body).await
    }

    async fn replies_to(&self, number: impl Into<u64>, comment: u64) -> Vec<String> {
        let number: u64 = number.into();
        let marker = reply_marker(comment);
        self.bodies(number)
            .await
            .into_iter()
            .filter(|b| b.contains(&marker))
            .collect()
    }
}

fn assert_no_mention(reply: &str) {
    assert!(!reply.contains('@'), "a reply must not @mention: {reply}");
}

#[tokio::test]
async fn maintainer_stop_ends_the_candidate_as_handoff_with_one_reply() {
    let env = env().await;
    let mut rec = env.live_candidate().await;
    let pr = rec.pull.expect("pull");
    assert_eq!(env.claims().await.len(), 1);
    let id = env
        .comment_as(
            MAINTAINER,
            MAINTAINER_TOKEN,
            pr,
            "Taking this over.\n/klaud stop flaky node",
        )
        .await;

    assert_eq!(env.handle(&env.forge, &mut rec).await, 1);
    assert_eq!(rec.step, Step::Done);
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Handoff);
    assert!(ending.hands_off);
    assert!(ending.message.contains(MAINTAINER), "{}", ending.message);
    assert!(ending.message.contains("flaky node"), "{}", ending.message);
    assert!(env.claims().await.is_empty(), "the claim is released");
    // Hands off: the PR stays open and the branch stays.
    assert!(env.pull(pr).await.state.is_open());
    let replies = env.replies_to(pr, id).await;
    assert_eq!(replies.len(), 1, "{replies:#?}");
    assert!(replies[0].starts_with("Stopped") || replies[0].contains("Stopped"));
    assert_no_mention(&replies[0]);
}

#[tokio::test]
async fn each_command_is_answered_once_across_passes_and_a_restart() {
    let env = env().await;
    let mut rec = env.live_candidate().await;
    let pr = rec.pull.expect("pull");
    let id = env
        .comment_as(MAINTAINER, MAINTAINER_TOKEN, pr, "/klaud status")
        .await;
    assert_eq!(env.handle(&env.forge, &mut rec).await, 1);
    assert_eq!(env.handle(&env.forge, &mut rec).await, 0);
    // A restart: a new forge and an empty journal; GitHub's markers remain.
    env.journal.clear();
    let restarted = crate::support::forge_of(&env.stack).await;
    assert_eq!(env.handle(&restarted, &mut rec).await, 0);
    let replies = env.replies_to(pr, id).await;
    assert_eq!(replies.len(), 1, "{replies:#?}");
    assert!(
        replies[0].contains(rec.candidate.as_str()),
        "{}",
        replies[0]
    );
    assert!(replies[0].contains("in progress"), "{}", replies[0]);
    assert_eq!(rec.step, Step::Smoke, "status changes nothing");
}

#[tokio::test]
async fn reader_command_is_refused_with_a_reply() {
    let env = env().await;
    let mut rec = env.live_candidate().await;
    let pr = rec.pull.expect("pull");
    let id = env
        .comment_as(READER, READER_TOKEN, pr, "/klaud stop")
        .await;
    assert_eq!(env.handle(&env.forge, &mut rec).await, 1);
    assert_ne!(rec.step, Step::Done, "a reader cannot stop Klaud");
    assert_eq!(env.claims().await.len(), 1);
    let replies = env.replies_to(pr, id).await;
    assert_eq!(replies.len(), 1);
    assert!(replies[0].contains("Refused"), "{}", replies[0]);
    assert!(replies[0].contains("read permission"), "{}", replies[0]);
    assert_no_mention(&replies[0]);
}

#[tokio::test]
async fn failed_permission_lookup_refuses() {
    let env = env().await;
    let mut rec = env.live_candidate().await;
    let pr = rec.pull.expect("pull");
    let id = env
        .comment_as(MAINTAINER, MAINTAINER_TOKEN, pr, "/klaud release")
        .await;
    env.stack
        .state()
        .add_fault(Fault {
            method: Some("GET".into()),
            path: "/repos/*/collaborators/*/permission".into(),
            count: 100,
            action: FaultAction::Status {
                status: 502,
                retry_after: None,
                message: None,
            },
        })
        .await;
    assert_eq!(env.handle(&env.forge, &mut rec).await, 1);
    assert_ne!(rec.step, Step::Done, "fail closed");
    assert_eq!(env.claims().await.len(), 1);
    let replies = env.replies_to(pr, id).await;
    assert_eq!(replies.len(), 1);
    assert!(replies[0].contains("Could not verify"), "{}", replies[0]);
}

#[tokio::test]
async fn commands_in_code_blocks_quotes_and_own_comments_are_ignored() {
    let env = env().await;
    let mut rec = env.live_candidate().await;
    let pr = rec.pull.expect("pull");
    env.comment_as(
        MAINTAINER,
        MAINTAINER_TOKEN,
        pr,
        "To stop it, write:\n```\n/klaud stop\n```\n> /klaud release\n\n    /klaud stop",
    )
    .await;
    // Klaud's own text mentioning a command is never an order.
    env.person(klaud_sandbox::stack::BOT_TOKEN)
        .comment(pr, "/klaud stop")
        .await;
    assert_eq!(env.handle(&env.forge, &mut rec).await, 0);
    assert_ne!(rec.step, Step::Done);
    assert_eq!(env.claims().await.len(), 1);
    let bodies = env.bodies(pr).await;
    assert!(
        !bodies.iter().any(|b| b.contains("klaud-reply:")),
        "{bodies:#?}"
    );
}

#[tokio::test]
async fn release_cleans_up_and_the_receipt_names_who_and_why() {
    let env = env().await;
    let mut rec = env.live_candidate().await;
    let pr = rec.pull.expect("pull");
    env.comment_as(
        MAINTAINER,
        MAINTAINER_TOKEN,
        pr,
        "/klaud release base image broken",
    )
    .await;
    assert_eq!(env.handle(&env.forge, &mut rec).await, 1);
    assert_eq!(rec.step, Step::Done);
    assert!(!rec.ending.as_ref().expect("ending").hands_off);
    assert!(env.claims().await.is_empty());
    assert!(!env.pull(pr).await.state.is_open(), "cleanup closes the PR");
    let bodies = env.bodies(pr).await;
    let receipt = bodies
        .iter()
        .find(|b| b.contains("<!-- klaud-outcome:"))
        .expect("receipt");
    assert!(receipt.contains(MAINTAINER), "{receipt}");
    assert!(receipt.contains("base image broken"), "{receipt}");
}

/// Takes over every orphan as instance `who` with recovery leases of
/// `lease`, and stops there (as if it crashed right after).
async fn take_over_as(
    env: &Harness,
    who: u128,
    lease: chrono::TimeDelta,
) -> Vec<klaud_service::recover::Orphan> {
    use klaud_service::recover::{RecoveryContext, take_over_orphans};
    let clock = env.clock;
    let book = klaud_claims::ClaimBook::new(&env.forge, clock, instance(who));
    let runs = ForgeRunCompletion::new(&env.forge);
    let ctx = RecoveryContext {
        book: &book,
        runs: &runs,
        owner_run: 9000 + who as u64,
        lease,
        now: env.clock.now(),
    };
    let claims = book.list_claims().await.expect("claims");
    let leases = book.list_recovery_leases().await.expect("leases");
    take_over_orphans(&ctx, &claims, &leases, &BTreeSet::new(), None)
        .await
        .0
}

fn instance(who: u128) -> Claimant {
    Claimant::new(uuid::Uuid::from_u128(who))
}

/// One `klaud recover` pass as instance `who` with an empty journal: take
/// over, finish, settle the recovery leases.
async fn recover_as(env: &Harness, who: u128) -> Vec<klaud_service::recover::Recovered> {
    use klaud_service::recover::{
        RecoveryContext, finish_orphans, settle_recovery_leases, take_over_orphans,
    };
    let claimant = instance(who);
    let clock = env.clock;
    let book = klaud_claims::ClaimBook::new(&env.forge, clock, claimant.clone());
    let config = crate::support::engine_config(9000 + who as u64);
    let runs = ForgeRunCompletion::new(&env.forge);
    let ctx = RecoveryContext {
        book: &book,
        runs: &runs,
        owner_run: config.owner_run,
        lease: config.lease,
        now: env.clock.now(),
    };
    let claims = book.list_claims().await.expect("claims");
    let leases = book.list_recovery_leases().await.expect("leases");
    let (orphans, _skipped) =
        take_over_orphans(&ctx, &claims, &leases, &BTreeSet::new(), None).await;
    let lifecycle = GithubLifecycle::new(&env.forge);
    let journal = MemoryJournal::new();
    let engine = env.engine_as(&lifecycle, &journal, clock, claimant, &config);
    let recovered = finish_orphans(&engine, &book, &orphans, 64).await.recovered;
    let records = journal.list().await.expect("journal");
    settle_recovery_leases(&ctx, &leases, &[], &claims, &records).await;
    recovered
}

async fn recovery_leases(env: &Harness) -> Vec<(String, String)> {
    env.forge
        .list_refs("refs/heads/klaud/recovery-")
        .await
        .expect("recovery leases")
}

async fn receipts(env: &Harness, number: impl Into<u64>) -> usize {
    let number: u64 = number.into();
    env.bodies(number)
        .await
        .iter()
        .filter(|b| b.contains("<!-- klaud-outcome:"))
        .count()
}

#[tokio::test]
async fn recover_finishes_an_expired_claim_once_with_two_concurrent_recoverers() {
    let mut env = env().await;
    env.config.lease = chrono::TimeDelta::seconds(1);
    let rec = env.live_candidate().await;
    let pr = rec.pull.expect("pull");
    // The lease runs out.
    env.clock.advance(chrono::TimeDelta::milliseconds(2100));

    let (a, b) = tokio::join!(recover_as(&env, 1), recover_as(&env, 2));
    let all: Vec<_> = a.iter().chain(b.iter()).collect();
    assert_eq!(all.len(), 1, "exactly one recoverer wins: {all:#?}");
    assert_eq!(all[0].candidate, rec.candidate);
    assert_eq!(
        all[0].outcome.as_deref(),
        Some("unexpected-error"),
        "{all:#?}"
    );
    assert_eq!(receipts(&env, pr).await, 1, "one cleanup, one receipt");
    assert!(!env.pull(pr).await.state.is_open());
    assert!(env.claims().await.is_empty());
    assert!(
        recovery_leases(&env).await.is_empty(),
        "recovery lease released"
    );
    // Nothing left: a later pass finds nothing to do.
    assert!(recover_as(&env, 3).await.is_empty());
}

#[tokio::test]
async fn a_recoverer_that_crashed_after_the_takeover_resumes_from_its_recovery_lease() {
    let mut env = env().await;
    env.config.lease = chrono::TimeDelta::seconds(1);
    let rec = env.live_candidate().await;
    let pr = rec.pull.expect("pull");
    env.clock.advance(chrono::TimeDelta::milliseconds(2100));

    // Instance 7 takes the recovery lease and the claim, then dies.
    let orphans = take_over_as(&env, 7, chrono::TimeDelta::hours(1)).await;
    assert_eq!(orphans.len(), 1);
    let lease_ref = CandidateId::new(rec.candidate.as_str())
        .expect("id")
        .recovery_ref(OWNER_RUN);
    let leases = recovery_leases(&env).await;
    assert_eq!(
        leases.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        [lease_ref.as_str()],
        "the recovery lease names the orphan's run and candidate"
    );
    // Nobody else may recover it meanwhile: the claim is 7's now.
    assert!(recover_as(&env, 8).await.is_empty());
    assert_eq!(receipts(&env, pr).await, 0);

    // 7 restarts with an empty journal: its recovery lease says what it was
    // doing, and it finishes the orphan once.
    let recovered = recover_as(&env, 7).await;
    assert_eq!(recovered.len(), 1, "{recovered:#?}");
    assert_eq!(recovered[0].orphan_run, OWNER_RUN);
    assert_eq!(recovered[0].outcome.as_deref(), Some("unexpected-error"));
    assert_eq!(receipts(&env, pr).await, 1);
    assert!(env.claims().await.is_empty());
    assert!(recovery_leases(&env).await.is_empty());
}

#[tokio::test]
async fn a_live_recovery_lease_blocks_other_recoverers_until_it_expires() {
    let mut env = env().await;
    env.config.lease = chrono::TimeDelta::seconds(1);
    let rec = env.live_candidate().await;
    let pr = rec.pull.expect("pull");
    env.clock.advance(chrono::TimeDelta::milliseconds(2100));

    // Instance 7 took the recovery lease but died before the claim; a
    // recoverer of some earlier, finished orphan run left a lease behind.
    let clock = env.clock;
    let dead = klaud_claims::ClaimBook::new(&env.forge, clock, instance(7));
    let (claim_ref, claim_sha) = env.claims().await.into_iter().next().expect("claim");
    let candidate = klaud_claims::ClaimCandidate::new(
        rec.base_sha.clone(),
        &rec.family,
        CandidateId::new(rec.candidate.as_str()).expect("id"),
    );
    for run in [OWNER_RUN, 1] {
        let taken = dead
            .acquire_recovery_lease(
                run,
                &candidate,
                &claim_sha,
                9007,
                chrono::TimeDelta::seconds(2),
            )
            .await
            .expect("recovery lease");
        assert!(matches!(taken, klaud_claims::Acquire::Won(_)), "{taken:?}");
    }
    assert!(recover_as(&env, 8).await.is_empty(), "7 is recovering it");
    let claims = env.claims().await;
    assert_eq!(claims, [(claim_ref, claim_sha)], "claim untouched");
    assert_eq!(recovery_leases(&env).await.len(), 2);
    // `klaud status` and the dashboard show them beside the claim.
    let status =
        klaud_service::status::repository_status(&env.forge, &env.journal, env.clock, instance(8))
            .await
            .expect("status");
    let shown: Vec<&str> = status
        .claims
        .iter()
        .filter_map(|c| c.recovering.as_deref())
        .collect();
    assert_eq!(
        shown,
        [
            format!("{} of run 1", rec.candidate),
            format!("{} of run {OWNER_RUN}", rec.candidate)
        ],
        "{status:#?}"
    );

    // A 2 s lease ends within 3 s (leases are rounded up to the second).
    env.clock.advance(chrono::TimeDelta::milliseconds(3100));
    let recovered = recover_as(&env, 8).await;
    assert_eq!(recovered.len(), 1, "{recovered:#?}");
    assert_eq!(recovered[0].outcome.as_deref(), Some("unexpected-error"));
    assert_eq!(receipts(&env, pr).await, 1);
    assert!(env.claims().await.is_empty());
    assert!(
        recovery_leases(&env).await.is_empty(),
        "the taken-over lease is released and the stale one swept"
    );
}

#[tokio::test]
async fn recover_takes_over_a_lease_less_old_helper_claim_whose_run_completed() {
    let env = env().await;
    let rec = env.live_candidate().await;
    let pr = rec.pull.expect("pull");
    let run = rec.attempts[0].run.as_ref().expect("run").id;
    // Rewrite the claim as the old helper writes it: no owner, lease or
    // fence, owned by the (now completed) run.
    let (claim_ref, _) = env.claims().await.into_iter().next().expect("claim");
    let message = format!(
        r#"{{"candidates":[{{"base":"{}","family":"{}","id":"{}"}}],"run-id":{run}}}"#,
        rec.base_sha, rec.family, rec.candidate
    );
    let tree = klaud_claims::RefStore::commit_tree(&env.forge, &rec.base_sha)
        .await
        .expect("tree");
    let commit = klaud_claims::RefStore::create_commit(
        &env.forge,
        &message,
        &tree,
        &[rec.base_sha.to_string()],
    )
    .await
    .expect("commit");
    klaud_claims::RefStore::delete_ref(&env.forge, &claim_ref)
        .await
        .expect("drop the claim");
    klaud_claims::RefStore::create_ref(&env.forge, &claim_ref, &commit)
        .await
        .expect("rewrite claim");

    // While the run is going the claim is left alone.
    assert!(recover_as(&env, 1).await.is_empty());
    assert_eq!(env.claims().await.len(), 1);
    assert!(
        recovery_leases(&env).await.is_empty(),
        "no recovery lease is taken for a claim whose run goes on"
    );

    env.stack
        .state()
        .complete_run(REPO, run, "failure", Default::default())
        .await
        .expect("complete run");
    let recovered = recover_as(&env, 1).await;
    assert_eq!(recovered.len(), 1, "{recovered:#?}");
    assert_eq!(recovered[0].orphan_run, run);
    assert_eq!(recovered[0].outcome.as_deref(), Some("unexpected-error"));
    assert_eq!(receipts(&env, pr).await, 1);
    assert!(env.claims().await.is_empty());
}

#[tokio::test]
async fn the_wave_honours_stop_and_answers_once_across_two_waves() {
    let env = env().await;
    let rec = env.live_candidate().await;
    let pr = rec.pull.expect("pull");
    let id = env
        .comment_as(MAINTAINER, MAINTAINER_TOKEN, pr, "/klaud stop")
        .await;
    let store = klaud_store::Store::temporary().expect("store");
    for wave in 0..2 {
        let mut options = env.wave_options(owner(), env.config.clone());
        options.lifecycle.plan.max_candidates = 0;
        options.lifecycle.wait = Duration::from_secs(5);
        options.cache = Some(&store);
        let summary = env.wave(&env.journal, options).await;
        assert_eq!(
            summary.answered.len(),
            usize::from(wave == 0),
            "wave {wave}: {summary:#?}"
        );
    }
    let rec = env
        .journal
        .list()
        .await
        .expect("journal")
        .into_iter()
        .find(|r| r.candidate == rec.candidate)
        .expect("record");
    assert_eq!(rec.step, Step::Done);
    assert_eq!(
        rec.ending.as_ref().map(|e| e.outcome),
        Some(Outcome::Handoff)
    );
    assert!(env.claims().await.is_empty());
    assert_eq!(env.replies_to(pr, id).await.len(), 1);
}

#[tokio::test]
async fn retry_is_refused_while_running_and_lifts_the_cooldown_once_finished() {
    use klaud_service::pr_commands::retry_requested;
    let env = env().await;
    let mut rec = env.live_candidate().await;
    let pr = rec.pull.expect("pull");
    let store = klaud_store::Store::temporary().expect("store");
    let handle = async |rec: &mut CandidateRecord| {
        let lifecycle = GithubLifecycle::new(&env.forge);
        let clock = env.clock;
        let engine = env.engine(&lifecycle, &env.journal, clock);
        handle_commands(&env.forge, &engine, rec, Some(&store))
            .await
            .expect("handle")
    };
    let early = env
        .comment_as(MAINTAINER, MAINTAINER_TOKEN, pr, "/klaud retry")
        .await;
    handle(&mut rec).await;
    assert!(env.replies_to(pr, early).await[0].contains("Nothing to retry"));
    assert!(!retry_requested(&store, &rec));

    env.comment_as(MAINTAINER, MAINTAINER_TOKEN, pr, "/klaud release")
        .await;
    handle(&mut rec).await;
    assert_eq!(rec.step, Step::Done);
    let late = env
        .comment_as(
            MAINTAINER,
            MAINTAINER_TOKEN,
            pr,
            "/klaud retry new driver is out",
        )
        .await;
    handle(&mut rec).await;
    assert!(
        env.replies_to(pr, late).await[0].contains("Retry recorded"),
        "{:?}",
        env.replies_to(pr, late).await
    );
    assert!(retry_requested(&store, &rec));
}

#[tokio::test]
async fn a_flood_of_commands_is_answered_over_several_passes() {
    use klaud_service::pr_commands::MAX_REPLIES_PER_PASS;
    let env = env().await;
    let mut rec = env.live_candidate().await;
    let pr = rec.pull.expect("pull");
    let total = MAX_REPLIES_PER_PASS + 2;
    for _ in 0..total {
        env.comment_as(MAINTAINER, MAINTAINER_TOKEN, pr, "/klaud status")
            .await;
    }
    assert_eq!(env.handle(&env.forge, &mut rec).await, MAX_REPLIES_PER_PASS);
    assert_eq!(env.handle(&env.forge, &mut rec).await, 2);
    assert_eq!(env.handle(&env.forge, &mut rec).await, 0);
}

/// `klaud claims release` as a process against the sandbox.
async fn claims_release(env: &Harness, args: &[&str]) -> std::process::Output {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("klaud.toml");
    std::fs::write(
        &config,
        format!(
            "[lifecycle]\nbaseline_api = \"{}\"\n",
            env.stack.baseline_url
        ),
    )
    .expect("config");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_klaud"));
    cmd.args(["claims", "release"])
        .args(args)
        .args(["--github-api", &env.stack.github.url(), "--repo", REPO])
        .arg("--config")
        .arg(&config)
        .env("KLAUD_GITHUB_TOKEN", klaud_sandbox::stack::BOT_TOKEN)
        .env_remove("GITHUB_TOKEN")
        .env_remove("GITHUB_RUN_ID")
        .env_remove("KLAUD_CONFIG");
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("run klaud"))
        .await
        .expect("process task");
    drop(dir);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_release_refuses_a_live_owner_and_forced_it_cleans_up_with_a_receipt_naming_who_and_why()
 {
    let env = env().await;
    let rec = env.live_candidate().await;
    let pr = rec.pull.expect("pull");
    let reason = "bad base image, see #12";
    let args = ["--family", &rec.family, "--reason", reason, "--by", "alice"];

    let out = claims_release(&env, &args).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("live owner"), "{stderr}");
    assert_eq!(env.claims().await.len(), 1, "a refusal changes nothing");
    assert!(env.pull(pr).await.state.is_open());

    let forced: Vec<&str> = args.iter().copied().chain(["--force", "--json"]).collect();
    let out = claims_release(&env, &forced).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let released: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(released["result"], "released");
    assert_eq!(released["forced"], true);
    assert_eq!(
        released["candidates"][0]["candidate"],
        rec.candidate.as_str()
    );
    assert_eq!(released["candidates"][0]["outcome"], "handoff");
    assert!(env.claims().await.is_empty());
    assert!(!env.pull(pr).await.state.is_open(), "cleanup closes the PR");
    let bodies = env.bodies(pr).await;
    let receipt = bodies
        .iter()
        .find(|b| b.contains("<!-- klaud-outcome:"))
        .expect("receipt");
    assert!(receipt.contains("alice"), "{receipt}");
    assert!(receipt.contains(reason), "{receipt}");
    assert!(receipt.contains("klaud claims release"), "{receipt}");
    assert!(
        receipt.contains("A maintainer ended this candidate"),
        "{receipt}"
    );

    // The fenced-out holder cannot touch the candidate any more.
    let lifecycle = GithubLifecycle::new(&env.forge);
    let clock = env.clock;
    let engine = env.engine(&lifecycle, &env.journal, clock);
    let mut stale = rec.clone();
    // The release's cancel lands a moment after GitHub's 202; until then
    // the stale holder only waits for its run.
    for _ in 0..100 {
        engine.drive(&mut stale, 16).await.expect("drive");
        if stale.step == Step::Done {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(stale.step, Step::Done);
    // Its journal, and so `klaud status` and the dashboard, agree with the
    // receipt.
    let ending = stale.ending.as_ref().expect("ending");
    assert_eq!(
        ending.outcome,
        klaud_lifecycle::model::Outcome::Handoff,
        "{ending:?}"
    );
    let row = klaud_service::dashboard::OutcomeRow::of(&stale).expect("outcome row");
    assert_eq!(row.outcome, "handoff", "{row:?}");
    let summary = klaud_service::CandidateSummary::of(&stale, None);
    assert_eq!(summary.outcome.as_deref(), Some("handoff"));
    assert_eq!(
        env.bodies(pr)
            .await
            .iter()
            .filter(|b| b.contains("<!-- klaud-outcome:"))
            .count(),
        1,
        "one receipt"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_only_releases_when_the_orphan_already_wrote_its_receipt() {
    let mut env = env().await;
    env.config.lease = chrono::TimeDelta::seconds(1);
    let mut rec = env.live_candidate().await;
    let pr = rec.pull.expect("pull");
    // The owner ends the candidate and writes its receipt, but dies before
    // the claim is released (every delete of the claim ref fails).
    env.stack
        .state()
        .add_fault(Fault {
            method: Some("DELETE".into()),
            path: "*/git/refs/heads/klaud/claim-*".into(),
            count: 50,
            action: FaultAction::Status {
                status: 500,
                retry_after: None,
                message: None,
            },
        })
        .await;
    {
        let lifecycle = GithubLifecycle::new(&env.forge);
        let clock = env.clock;
        let engine = env.engine(&lifecycle, &env.journal, clock);
        engine
            .end_now(&mut rec, Outcome::Failed, "smoke failed".into(), false)
            .await
            .expect("end");
        let _ = engine.drive(&mut rec, 32).await;
    }
    env.stack.state().clear_faults().await;
    assert_eq!(receipts(&env, pr).await, 1, "the receipt was written");
    assert_eq!(env.claims().await.len(), 1, "the claim was not released");
    env.clock.advance(chrono::TimeDelta::milliseconds(2100));

    let before = env.bodies(pr).await.len();
    let recovered = recover_as(&env, 8).await;
    assert_eq!(recovered.len(), 1, "{recovered:#?}");
    assert_eq!(
        recovered[0].outcome.as_deref(),
        Some("failed"),
        "the receipt's outcome stands: {recovered:#?}"
    );
    assert_eq!(
        env.bodies(pr).await.len(),
        before,
        "only released: nothing written on the PR"
    );
    assert!(env.claims().await.is_empty());
    assert!(recovery_leases(&env).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_release_that_cannot_finish_a_candidate_keeps_the_claim_and_says_so() {
    let env = env().await;
    let rec = env.live_candidate().await;
    let pr = rec.pull.expect("pull");
    let args = [
        "--family",
        rec.family.as_str(),
        "--reason",
        "stuck",
        "--force",
    ];
    // GitHub cannot list pull requests: the candidate cannot be looked up.
    env.stack
        .state()
        .add_fault(Fault {
            method: Some("GET".into()),
            path: "/repos/*/pulls".into(),
            count: 100,
            action: FaultAction::Status {
                status: 500,
                retry_after: None,
                message: None,
            },
        })
        .await;
    let out = claims_release(&env, &args).await;
    env.stack.state().clear_faults().await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("did not finish"), "{stdout}");
    assert!(stderr.contains("stays leased"), "{stderr}");
    assert_eq!(env.claims().await.len(), 1, "the claim is kept");
    assert!(env.pull(pr).await.state.is_open());
    assert_eq!(receipts(&env, pr).await, 0);

    // Once GitHub answers again, a forced re-run finishes it.
    let out = claims_release(&env, &args).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(env.claims().await.is_empty());
    assert_eq!(receipts(&env, pr).await, 1);
}

/// The old helper's hidden retry request for `rec` at `head`.
fn retry_release(rec: &CandidateRecord, candidate: &str, head: &str) -> String {
    format!(
        "Retrying after the driver fix.\n<!-- klaud-retry-release:{}:{candidate}:{head} -->",
        rec.owner_run
    )
}

#[tokio::test]
async fn the_old_helpers_retry_release_marker_from_a_writer_is_honoured_like_retry() {
    use klaud_service::pr_commands::retry_requested;
    let env = env().await;
    let mut rec = env.live_candidate().await;
    let pr = rec.pull.expect("pull");
    let store = klaud_store::Store::temporary().expect("store");
    let handle = async |rec: &mut CandidateRecord| {
        let lifecycle = GithubLifecycle::new(&env.forge);
        let clock = env.clock;
        let engine = env.engine(&lifecycle, &env.journal, clock);
        handle_commands(&env.forge, &engine, rec, Some(&store))
            .await
            .expect("handle")
    };
    env.comment_as(MAINTAINER, MAINTAINER_TOKEN, pr, "/klaud release")
        .await;
    handle(&mut rec).await;
    assert_eq!(rec.step, Step::Done);
    let head = rec.head.clone().expect("head");
    let id = env
        .comment_as(
            MAINTAINER,
            MAINTAINER_TOKEN,
            pr,
            &retry_release(&rec, rec.candidate.as_str(), &head),
        )
        .await;
    let answered = handle(&mut rec).await;
    assert_eq!(answered.len(), 1, "{answered:?}");
    assert_eq!(answered[0].verbs, vec!["retry".to_owned()]);
    assert!(answered[0].allowed);
    let replies = env.replies_to(pr, id).await;
    assert_eq!(replies.len(), 1);
    assert!(replies[0].contains("Retry recorded"), "{}", replies[0]);
    assert!(retry_requested(&store, &rec));
    // Answered once: the next pass leaves it.
    assert!(handle(&mut rec).await.is_empty());
    assert_eq!(env.replies_to(pr, id).await.len(), 1);
}

#[tokio::test]
async fn a_retry_release_marker_from_a_reader_or_for_another_head_or_candidate_is_ignored() {
    use klaud_service::pr_commands::retry_requested;
    let env = env().await;
    let mut rec = env.live_candidate().await;
    let pr = rec.pull.expect("pull");
    let store = klaud_store::Store::temporary().expect("store");
    let handle = async |rec: &mut CandidateRecord| {
        let lifecycle = GithubLifecycle::new(&env.forge);
        let clock = env.clock;
        let engine = env.engine(&lifecycle, &env.journal, clock);
        handle_commands(&env.forge, &engine, rec, Some(&store))
            .await
            .expect("handle")
    };
    env.comment_as(MAINTAINER, MAINTAINER_TOKEN, pr, "/klaud release")
        .await;
    handle(&mut rec).await;
    assert_eq!(rec.step, Step::Done);
    let head = rec.head.clone().expect("head");
    let other_head = "0".repeat(40);
    let family = &rec.candidate.as_str()[..16];
    let other_candidate = format!("{family}-{}", "f".repeat(16));
    let ignored = [
        env.comment_as(
            READER,
            READER_TOKEN,
            pr,
            &retry_release(&rec, rec.candidate.as_str(), &head),
        )
        .await,
        env.comment_as(
            MAINTAINER,
            MAINTAINER_TOKEN,
            pr,
            &retry_release(&rec, rec.candidate.as_str(), &other_head),
        )
        .await,
        env.comment_as(
            MAINTAINER,
            MAINTAINER_TOKEN,
            pr,
            &retry_release(&rec, &other_candidate, &head),
        )
        .await,
        env.comment_as(
            MAINTAINER,
            MAINTAINER_TOKEN,
            pr,
            "<!-- klaud-retry-release:not-a-run:x:y -->",
        )
        .await,
    ];
    assert!(handle(&mut rec).await.is_empty());
    for id in ignored {
        assert!(env.replies_to(pr, id).await.is_empty(), "comment {id}");
    }
    assert!(!retry_requested(&store, &rec));
}

/// A candidate a maintainer released (its PR closed, its claim freed),
/// with the wave's clock moved past the wave options' hour of cooldown.
async fn finished_past_the_cooldown(env: &Harness) -> CandidateRecord {
    let mut rec = env.live_candidate().await;
    let pr = rec.pull.expect("pull");
    env.comment_as(MAINTAINER, MAINTAINER_TOKEN, pr, "/klaud release")
        .await;
    assert_eq!(env.handle(&env.forge, &mut rec).await, 1);
    assert_eq!(rec.step, Step::Done);
    assert!(!env.pull(pr).await.state.is_open());
    env.clock.advance(chrono::TimeDelta::hours(2));
    rec
}

/// One wave that plans nothing, with a store for retry requests.
async fn command_wave(
    env: &Harness,
    store: &klaud_store::Store,
) -> klaud_lifecycle::wave::WaveSummary {
    let mut options = env.wave_options(owner(), env.config.clone());
    options.lifecycle.plan.max_candidates = 0;
    options.cache = Some(store);
    env.wave(&env.journal, options).await
}

/// `command` on a PR finished longer ago than the cooldown gets its one
/// reply in the next wave (and none in the wave after). Returns it.
async fn answered_after_the_cooldown(command: &str) -> String {
    let env = env().await;
    let rec = finished_past_the_cooldown(&env).await;
    let pr = rec.pull.expect("pull");
    let store = klaud_store::Store::temporary().expect("store");
    let id = env
        .comment_as(MAINTAINER, MAINTAINER_TOKEN, pr, command)
        .await;
    let summary = command_wave(&env, &store).await;
    assert_eq!(summary.answered.len(), 1, "{command}: {summary:#?}");
    assert_eq!(command_wave(&env, &store).await.answered.len(), 0);
    let replies = env.replies_to(pr, id).await;
    assert_eq!(replies.len(), 1, "{command}: {replies:#?}");
    // The image's digest (`@sha256:…`, in a code span) mentions no one.
    assert_no_mention(&replies[0].replace(&rec.image, ""));
    replies[0].clone()
}

#[tokio::test]
async fn status_on_a_pr_finished_before_the_cooldown_says_how_it_ended_and_what_next() {
    let reply = answered_after_the_cooldown("/klaud status").await;
    assert!(reply.contains("finished: **handoff**"), "{reply}");
    assert!(
        reply.contains("Next:") && reply.contains("/klaud retry"),
        "{reply}"
    );
}

#[tokio::test]
async fn retry_on_a_pr_finished_before_the_cooldown_is_recorded() {
    let reply = answered_after_the_cooldown("/klaud retry the fix landed").await;
    assert!(reply.contains("Retry recorded"), "{reply}");
}

#[tokio::test]
async fn stop_on_a_pr_finished_before_the_cooldown_says_it_already_finished() {
    let reply = answered_after_the_cooldown("/klaud stop").await;
    assert!(reply.contains("Nothing to stop"), "{reply}");
}

#[tokio::test]
async fn release_on_a_pr_finished_before_the_cooldown_says_it_already_finished() {
    let reply = answered_after_the_cooldown("/klaud release").await;
    assert!(reply.contains("Nothing to release"), "{reply}");
}

#[tokio::test]
async fn hunt_on_a_pr_finished_before_the_cooldown_says_there_is_nothing_to_hunt() {
    let reply = answered_after_the_cooldown("/klaud hunt").await;
    assert!(reply.contains("Nothing to hunt"), "{reply}");
}

#[tokio::test]
async fn try_on_a_pr_finished_before_the_cooldown_is_answered() {
    let reply = answered_after_the_cooldown("/klaud try b: tp=4").await;
    assert!(reply.contains("started"), "{reply}");
}

#[tokio::test]
async fn an_unknown_command_on_a_pr_finished_before_the_cooldown_lists_the_commands() {
    let reply = answered_after_the_cooldown("/klaud frobnicate").await;
    assert!(reply.contains("Unknown command"), "{reply}");
}

#[tokio::test]
async fn a_finished_pr_without_activity_in_the_lookback_is_not_read_again() {
    let env = env().await;
    let rec = finished_past_the_cooldown(&env).await;
    let pr = rec.pull.expect("pull");
    // Past the lookback: nothing happened on the PR since, as GitHub's
    // `since` listing tells in one request.
    env.clock
        .advance(klaud_lifecycle::wave::FINISHED_COMMANDS_LOOKBACK + chrono::TimeDelta::days(1));
    let store = klaud_store::Store::temporary().expect("store");
    let before = env.stack.state().request_log().await.len();
    assert!(command_wave(&env, &store).await.answered.is_empty());
    let log = env.stack.state().request_log().await;
    let comments = format!("/issues/{pr}/comments");
    assert!(
        !log[before..]
            .iter()
            .any(|e| e.method == "GET" && e.path.contains(&comments)),
        "an idle finished PR's comments were read"
    );
    assert!(
        log[before..]
            .iter()
            .any(|e| e.method == "GET" && e.path.contains("/issues") && e.path.contains("since=")),
        "the wave lists recently active PRs once"
    );
}

#[tokio::test]
async fn a_readers_burst_of_commands_gets_one_refusal_an_hour() {
    let env = env().await;
    let mut rec = env.live_candidate().await;
    let pr = rec.pull.expect("pull");
    let mut burst = Vec::new();
    for verb in ["stop", "release", "status", "retry"] {
        burst.push(
            env.comment_as(READER, READER_TOKEN, pr, &format!("/klaud {verb}"))
                .await,
        );
    }
    let refusals = async || {
        env.bodies(pr)
            .await
            .into_iter()
            .filter(|b| b.contains("Refused"))
            .collect::<Vec<_>>()
    };
    // One reply answers the whole burst.
    assert_eq!(env.handle(&env.forge, &mut rec).await, burst.len());
    let first = refusals().await;
    assert_eq!(first.len(), 1, "{first:#?}");
    for id in &burst {
        assert!(first[0].contains(&reply_marker(*id)), "{}", first[0]);
    }
    assert_no_mention(&first[0]);
    assert_ne!(rec.step, Step::Done, "a reader cannot stop Klaud");

    // Within the hour, more refused commands wait unanswered, pass after
    // pass; a maintainer's command on the same PR is still answered.
    let later = env
        .comment_as(READER, READER_TOKEN, pr, "/klaud stop")
        .await;
    let maintainer = env
        .comment_as(MAINTAINER, MAINTAINER_TOKEN, pr, "/klaud status")
        .await;
    assert_eq!(env.handle(&env.forge, &mut rec).await, 1);
    assert_eq!(env.handle(&env.forge, &mut rec).await, 0);
    assert_eq!(env.replies_to(pr, maintainer).await.len(), 1);
    assert!(env.replies_to(pr, later).await.is_empty());
    // A restart with an empty journal keeps the pace: it is read from the
    // replies on the PR.
    env.journal.clear();
    let restarted = crate::support::forge_of(&env.stack).await;
    assert_eq!(env.handle(&restarted, &mut rec).await, 0);
    assert_eq!(refusals().await.len(), 1);

    // An hour after the refusal, the waiting command gets the next one.
    env.clock.advance(chrono::TimeDelta::hours(1));
    assert_eq!(env.handle(&env.forge, &mut rec).await, 1);
    assert_eq!(refusals().await.len(), 2);
    assert_eq!(env.replies_to(pr, later).await.len(), 1);
    assert_eq!(env.handle(&env.forge, &mut rec).await, 0);
}

/// One pass of command handling whose engine knows pull request authors
/// from the pass's listing (`listed`), as the wave builds it; returns the
/// answers and whether `GET pulls/<pr>` was sent.
async fn handle_with_listing(
    env: &Harness,
    rec: &mut CandidateRecord,
    listed: std::collections::BTreeMap<klaud_claims::PullNumber, String>,
) -> (usize, bool) {
    let pr = rec.pull.expect("pull");
    let lifecycle = GithubLifecycle::new(&env.forge);
    let engine = env
        .engine(&lifecycle, &env.journal, env.clock)
        .with_listed_authors(listed);
    let before = env.stack.state().request_log().await.len();
    let answered = handle_commands(&env.forge, &engine, rec, None)
        .await
        .expect("handle commands")
        .len();
    let read = env.stack.state().request_log().await[before..]
        .iter()
        .any(|e| e.method == "GET" && e.path.ends_with(&format!("/pulls/{pr}")));
    (answered, read)
}

#[tokio::test]
async fn the_reply_permit_reads_the_pull_request_only_when_no_answer_named_its_author() {
    let env = env().await;
    let mut rec = env.live_candidate().await;
    let pr = rec.pull.expect("pull");
    // The creation's answer named the bot: kept with the record.
    assert_eq!(rec.bot_pull, Some(pr));
    let bot = env.forge.bot_login().to_owned();
    let status = async |rec: &mut CandidateRecord, listed| {
        env.comment_as(MAINTAINER, MAINTAINER_TOKEN, pr, "/klaud status")
            .await;
        handle_with_listing(&env, rec, listed).await
    };
    assert_eq!(status(&mut rec, Default::default()).await, (1, false));
    // A record that does not know (kept before, rebuilt): the pass's
    // listing of open pull requests tells.
    rec.bot_pull = None;
    let listed = [(pr, bot.clone())].into_iter().collect();
    assert_eq!(status(&mut rec, listed).await, (1, false));
    // Neither knows: one read, whose answer the record keeps.
    rec.bot_pull = None;
    assert_eq!(status(&mut rec, Default::default()).await, (1, true));
    assert_eq!(rec.bot_pull, Some(pr));
}

#[tokio::test]
async fn a_pull_request_the_listing_shows_by_someone_else_takes_no_orders() {
    let env = env().await;
    let mut rec = env.live_candidate().await;
    let pr = rec.pull.expect("pull");
    rec.bot_pull = None;
    let id = env
        .comment_as(MAINTAINER, MAINTAINER_TOKEN, pr, "/klaud stop")
        .await;
    let listed = [(pr, MAINTAINER.to_owned())].into_iter().collect();
    assert_eq!(
        handle_with_listing(&env, &mut rec, listed).await,
        (0, false)
    );
    assert!(env.replies_to(pr, id).await.is_empty());
    assert_ne!(rec.step, Step::Done);
    assert_eq!(rec.bot_pull, None);
}

#[tokio::test]
async fn a_wave_grants_the_reply_permit_from_its_listing_of_open_pull_requests() {
    let env = env().await;
    let mut rec = env.live_candidate().await;
    let pr = rec.pull.expect("pull");
    // A record that does not know who authored its PR (kept before it was
    // recorded): the wave's own listing of open PRs names the bot.
    rec.bot_pull = None;
    env.journal.save(&rec).await.expect("save");
    let id = env
        .comment_as(MAINTAINER, MAINTAINER_TOKEN, pr, "/klaud status")
        .await;
    let store = klaud_store::Store::temporary().expect("store");
    let before = env.stack.state().request_log().await.len();
    let summary = command_wave(&env, &store).await;
    assert_eq!(summary.answered.len(), 1, "{summary:#?}");
    assert_eq!(env.replies_to(pr, id).await.len(), 1);
    let log = env.stack.state().request_log().await;
    let read = format!("/pulls/{pr}");
    assert!(
        !log[before..]
            .iter()
            .any(|e| e.method == "GET" && e.path.ends_with(&read)),
        "the PR was read although the wave's listing named its author"
    );
}
