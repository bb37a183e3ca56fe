//! The GitHub forge (real octocrab code path) against the GitHub simulator
//! over loopback, including injected faults.

use klaud_claims::{
    Acquire, CandidateId, ClaimBook, ClaimCandidate, Claimant, Clock, CommitSha, HeldClaim,
    PullNumber, RefStore, RefStoreError, SystemClock,
};
use std::collections::BTreeMap;
use std::time::Duration;

use chrono::TimeDelta;
use klaud_github::lifecycle::GithubLifecycle;
use klaud_github::{Credential, ForgeConfig, Github, GithubError, RetryPolicy, RunFilter, Secret};
use klaud_lifecycle::engine::ownership::check;
use klaud_lifecycle::engine::{
    Expectation, Forge as _, ForgeError, OwnershipProof, Pull, Writes as _,
};
use klaud_sandbox::github::state::FinishedRun;
use klaud_sandbox::github::{Fault, FaultAction, GithubSim, Permission};
use serde_json::json;

use crate::support::GithubOnly;

const REPO: &str = "sandbox/benchmarks";
const BOT: &str = "Klaud-Cold";
const BOT_TOKEN: &str = "bot-token-1";
const MAINTAINER_TOKEN: &str = "maintainer-token-1";

async fn sim() -> GithubSim {
    GithubOnly::new(REPO)
        .user(BOT, Some("Klaud Cold"), Some(Permission::Write))
        .user(
            "maintainer",
            Some("A Maintainer"),
            Some(Permission::Maintain),
        )
        .token(BOT, BOT_TOKEN, None)
        .token("maintainer", MAINTAINER_TOKEN, None)
        .files(
            "maintainer",
            "seed",
            &[
                ("configs/nvidia-master.yaml", b"a: 1\n"),
                ("perf-changelog.yaml", b"- config-keys:\n    - a\n"),
            ],
        )
        .start()
        .await
}

/// GitHub applies the next `POST` to `path` (a fault pattern) and its
/// answer is lost on the way back.
async fn lose_the_answer_to_the_next_post(sim: &GithubSim, path: &str) {
    sim.state()
        .add_fault(Fault {
            method: Some("POST".into()),
            path: path.into(),
            count: 1,
            action: FaultAction::AfterWriteDrop,
        })
        .await;
}

fn config(sim: &GithubSim, token: &str) -> ForgeConfig {
    ForgeConfig {
        api_url: sim.url(),
        repo: REPO.into(),
        bot_login: BOT.into(),
        credential: Credential::Token(Secret::new(token)),
        retry: RetryPolicy {
            max_attempts: 4,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(100),
            max_wait: Duration::from_secs(10),
        },
    }
}

async fn forge(sim: &GithubSim) -> Github {
    Github::connect(config(sim, BOT_TOKEN)).await.unwrap()
}

const CANDIDATE: &str = "d92e15065c55779d-0123456789abcdef";

/// Klaud as the engine writes: through the lifecycle forge, each write with
/// an ownership proof over a claim the bot holds.
struct Klaud<'a> {
    forge: GithubLifecycle<'a>,
    held: HeldClaim,
}

impl<'a> Klaud<'a> {
    async fn new(f: &'a Github) -> Self {
        let main = f.get_ref("refs/heads/main").await.unwrap().unwrap();
        let clock = SystemClock;
        let book = ClaimBook::new(f, &clock, Claimant::new(uuid::Uuid::from_u128(1)));
        let id = CandidateId::new(CANDIDATE).unwrap();
        let Acquire::Won(held) = book
            .acquire(
                &id.family(),
                vec![ClaimCandidate::new(
                    main.parse().expect("a sha"),
                    "configs/nvidia-master.yaml:a",
                    id.clone(),
                )],
                &main,
                1,
                TimeDelta::hours(1),
            )
            .await
            .unwrap()
        else {
            panic!("the claim is occupied");
        };
        Self {
            forge: GithubLifecycle::new(f),
            held,
        }
    }

    async fn prove(
        &self,
        branch: Option<(&str, &str)>,
        creates: Option<&str>,
        pull: Option<PullNumber>,
        run: Option<(u64, &str)>,
    ) -> OwnershipProof {
        let expect = Expectation {
            claim: &self.held,
            branch,
            creates,
            pull,
            run,
        };
        check(&self.forge, expect).await.expect("ownership proof")
    }

    /// Pushes a commit changing `path` on a new branch; its sha.
    async fn branch(&self, branch: &str, path: &str, content: &[u8]) -> CommitSha {
        let main = self
            .forge
            .read_file("configs/nvidia-master.yaml", "main")
            .await
            .unwrap();
        assert!(main.is_some());
        let base = RefStore::read_ref(self.forge.refs(), "refs/heads/main")
            .await
            .unwrap()
            .unwrap()
            .sha
            .parse::<CommitSha>()
            .unwrap();
        let proof = self.prove(None, Some(branch), None, None).await;
        let sha = self
            .forge
            .commit_files(
                &proof,
                &base,
                &[(path.to_owned(), content.to_vec())],
                "bump",
            )
            .await
            .unwrap();
        self.forge
            .create_branch(&proof, branch, &sha)
            .await
            .unwrap();
        sha
    }

    /// Opens the draft PR for `branch` at `head`.
    async fn pull(&self, branch: &str, head: &str, body: &str) -> Pull {
        let proof = self.prove(Some((branch, head)), None, None, None).await;
        self.forge
            .create_draft_pull(&proof, "t", branch, "main", body)
            .await
            .unwrap()
    }

    /// A proof for `pull` and its branch at `head`.
    async fn on_pull(&self, branch: &str, head: &str, pull: PullNumber) -> OwnershipProof {
        self.prove(Some((branch, head)), None, Some(pull), None)
            .await
    }
}

fn count(log: &[klaud_sandbox::github::LogEntry], method: &str, path_suffix: &str) -> usize {
    log.iter()
        .filter(|e| {
            e.method == method
                && e.path
                    .split('?')
                    .next()
                    .unwrap_or("")
                    .ends_with(path_suffix)
        })
        .count()
}

#[tokio::test]
async fn identity_preflight_refuses_a_foreign_token() {
    let sim = sim().await;
    let err = Github::connect(config(&sim, MAINTAINER_TOKEN))
        .await
        .unwrap_err();
    match &err {
        GithubError::IdentityMismatch { expected, found } => {
            assert_eq!(expected, BOT);
            assert_eq!(found, "maintainer");
        }
        other => panic!("expected IdentityMismatch, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("Klaud-Cold") && text.contains("maintainer"),
        "{text}"
    );
    assert!(!text.contains(MAINTAINER_TOKEN));

    let err = Github::connect(config(&sim, "no-such-token"))
        .await
        .unwrap_err();
    assert!(matches!(err, GithubError::Unauthorized { .. }), "{err:?}");
    assert!(!err.to_string().contains("no-such-token"));
    assert!(!format!("{:?}", config(&sim, "secret-xyz")).contains("secret-xyz"));
}

#[tokio::test]
async fn a_502_after_creating_the_pull_request_does_not_create_a_second_one() {
    let sim = sim().await;
    let f = forge(&sim).await;
    let k = Klaud::new(&f).await;
    let head = k
        .branch("klaud/auto-x", "configs/nvidia-master.yaml", b"a: 2\n")
        .await;
    sim.state()
        .add_fault(Fault {
            method: Some("POST".into()),
            path: "/repos/*/pulls".into(),
            count: 1,
            action: FaultAction::AfterWriteStatus { status: 502 },
        })
        .await;
    let pr = k
        .pull("klaud/auto-x", &head, "<!-- klaud-baseline -->")
        .await;
    assert!(pr.draft && pr.state.is_open());
    assert_eq!(pr.head_ref, "klaud/auto-x");
    assert_eq!(
        sim.state().pulls_for_head(REPO, "klaud/auto-x").await,
        vec![pr.number.get()]
    );
    let log = sim.state().request_log().await;
    assert_eq!(
        count(&log, "POST", "/pulls"),
        1,
        "the write must not be repeated"
    );
    let post = log
        .iter()
        .position(|e| e.method == "POST" && e.path.ends_with("/pulls"))
        .unwrap();
    assert_eq!(log[post].status, 502);
    assert!(
        log[post..]
            .iter()
            .any(|e| e.method == "GET" && e.path.contains("/pulls?") && e.path.contains("head=")),
        "the forge must re-read the PR for the head after the 502"
    );
}

#[tokio::test]
async fn a_dropped_connection_after_commenting_does_not_post_twice() {
    let sim = sim().await;
    let f = forge(&sim).await;
    let k = Klaud::new(&f).await;
    let head = k
        .branch("klaud/auto-y", "configs/nvidia-master.yaml", b"a: 3\n")
        .await;
    let pr = k.pull("klaud/auto-y", &head, "b").await;
    let proof = k.on_pull("klaud/auto-y", &head, pr.number).await;
    lose_the_answer_to_the_next_post(&sim, "/repos/*/issues/*/comments").await;
    let body = "<!-- klaud-report:1:c:baseline\n{}\n-->\nreport";
    let c = k
        .forge
        .create_comment(&proof, pr.number, body)
        .await
        .unwrap();
    assert_eq!(c.body, body);
    assert_eq!(
        sim.state().comment_bodies(REPO, pr.number.get()).await,
        vec![body.to_string()]
    );
    let log = sim.state().request_log().await;
    assert_eq!(
        count(&log, "POST", "/comments"),
        1,
        "the write must not be repeated"
    );
    assert_eq!(
        count(&log, "GET", "/comments"),
        1,
        "the forge re-reads the comments"
    );
}

#[tokio::test]
async fn a_secondary_rate_limit_with_retry_after_is_waited_out() {
    let sim = sim().await;
    let f = forge(&sim).await;
    let k = Klaud::new(&f).await;
    let head = k
        .branch("klaud/auto-z", "configs/nvidia-master.yaml", b"a: 4\n")
        .await;
    let pr = k.pull("klaud/auto-z", &head, "b").await;
    let proof = k.on_pull("klaud/auto-z", &head, pr.number).await;
    sim.state()
        .add_fault(Fault {
            method: Some("POST".into()),
            path: "/repos/*/issues/*/comments".into(),
            count: 1,
            action: FaultAction::Status {
                status: 403,
                retry_after: Some(1),
                message: Some("You have exceeded a secondary rate limit. Please wait a few minutes before you try again.".into()),
            },
        })
        .await;
    k.forge
        .create_comment(&proof, pr.number, "hello")
        .await
        .unwrap();
    assert_eq!(
        sim.state().comment_bodies(REPO, pr.number.get()).await,
        vec!["hello".to_string()]
    );
    let log = sim.state().request_log().await;
    let posts: Vec<u16> = log
        .iter()
        .filter(|e| e.method == "POST" && e.path.ends_with("/comments"))
        .map(|e| e.status)
        .collect();
    assert_eq!(posts, vec![403, 201]);

    // A read hitting the same limit is retried too.
    sim.state()
        .add_fault(Fault {
            method: Some("GET".into()),
            path: "/repos/*/issues/*/labels".into(),
            count: 1,
            action: FaultAction::Status {
                status: 429,
                retry_after: Some(1),
                message: None,
            },
        })
        .await;
    assert!(f.list_labels(pr.number.get()).await.unwrap().is_empty());
}

/// GitHub's secondary limit without `retry-after` on the next request
/// matching `method` and `path`.
async fn secondary_limit(sim: &GithubSim, method: &str, path: &str, status: u16) {
    sim.state()
        .add_fault(Fault {
            method: Some(method.into()),
            path: path.into(),
            count: 1,
            action: FaultAction::SecondaryLimit {
                status,
                retry_after: None,
            },
        })
        .await;
}

fn rate_limited_for(err: &GithubError) -> u64 {
    match err {
        GithubError::RateLimited {
            retry_after_secs, ..
        } => *retry_after_secs,
        other => panic!("expected a rate-limit refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn a_secondary_limit_without_retry_after_pauses_every_request_for_at_least_a_minute() {
    let sim = sim().await;
    // max_wait (10 s) is below GitHub's minute: the forge gives up instead of
    // sleeping, so the test observes the pause without waiting it out.
    let f = forge(&sim).await;
    let pr = f.get_ref("refs/heads/main").await.unwrap();
    assert!(pr.is_some());
    secondary_limit(&sim, "GET", "/repos/*/git/ref/*", 403).await;
    let mark = sim.state().request_log().await.len();
    let started = chrono::Utc::now();
    let err = f.get_ref("refs/heads/klaud/x").await.unwrap_err();
    assert!(rate_limited_for(&err) >= 60, "{err}");
    let pause = f.secondary_pause().expect("paused");
    assert!(
        pause.until >= started + TimeDelta::seconds(60),
        "{pause:?} starts at least a minute after {started}"
    );
    assert!(pause.route.contains("/git/ref/"), "{pause:?}");
    assert!(!pause.writes_only);
    assert_eq!(pause.strikes, 1);
    let sent: Vec<u16> = sim.state().request_log().await[mark..]
        .iter()
        .map(|e| e.status)
        .collect();
    assert_eq!(
        sent,
        [403],
        "the rejected read was not retried before the minute"
    );

    // Every other request waits for the pause too: nothing is sent.
    let err = f.list_refs("refs/heads/klaud/").await.unwrap_err();
    assert!(rate_limited_for(&err) >= 50, "{err}");
    let main = f.get_ref("refs/heads/main").await.unwrap_err();
    assert!(rate_limited_for(&main) >= 50, "{main}");
    assert_eq!(sim.state().request_log().await.len(), mark + 1);
}

#[tokio::test]
async fn a_429_without_retry_after_is_the_secondary_limit_too() {
    let sim = sim().await;
    let f = forge(&sim).await;
    secondary_limit(&sim, "GET", "/repos/*/git/ref/*", 429).await;
    let err = f.get_ref("refs/heads/main").await.unwrap_err();
    assert!(rate_limited_for(&err) >= 60, "{err}");
    assert!(f.secondary_pause().is_some());
}

#[tokio::test]
async fn a_write_hit_by_the_secondary_limit_is_not_performed_nor_resent_within_the_minute() {
    let sim = sim().await;
    let f = forge(&sim).await;
    let main = f.get_ref("refs/heads/main").await.unwrap().unwrap();
    secondary_limit(&sim, "POST", "/repos/*/git/refs", 403).await;
    let mark = sim.state().request_log().await.len();
    let name = "refs/heads/klaud/claim-secondary";
    let err = RefStore::create_ref(&f, name, &main).await.unwrap_err();
    assert!(
        matches!(&err, RefStoreError::Other(m) if m.contains("rate limited")),
        "{err:?}"
    );
    assert_eq!(sim.state().ref_sha(REPO, name).await, None);
    let pause = f.secondary_pause().expect("paused");
    assert!(pause.writes_only, "{pause:?}");
    // Another write is held back without being sent; reads still go.
    assert!(
        RefStore::create_ref(&f, "refs/heads/klaud/claim-other", &main)
            .await
            .is_err()
    );
    assert!(f.get_ref("refs/heads/main").await.unwrap().is_some());
    let posts: Vec<u16> = sim.state().request_log().await[mark..]
        .iter()
        .filter(|e| e.method == "POST")
        .map(|e| e.status)
        .collect();
    assert_eq!(posts, [403]);
}

#[tokio::test]
async fn a_secondary_limit_with_retry_after_is_waited_for_exactly_that_long() {
    let sim = sim().await;
    let f = forge(&sim).await;
    sim.state()
        .add_fault(Fault {
            method: Some("GET".into()),
            path: "/repos/*/git/ref/*".into(),
            count: 1,
            action: FaultAction::SecondaryLimit {
                status: 403,
                retry_after: Some(1),
            },
        })
        .await;
    let mark = sim.state().request_log().await.len();
    assert!(f.get_ref("refs/heads/main").await.unwrap().is_some());
    let sent: Vec<u16> = sim.state().request_log().await[mark..]
        .iter()
        .map(|e| e.status)
        .collect();
    assert_eq!(sent, [403, 200]);
    assert!(f.secondary_pause().is_none(), "the pause is over");
}

#[tokio::test]
async fn a_304_poll_costs_no_rate_limit() {
    let sim = sim().await;
    let f = forge(&sim).await;
    let k = Klaud::new(&f).await;
    let head = k
        .branch("klaud/auto-p", "configs/nvidia-master.yaml", b"a: 5\n")
        .await;
    let pr = k.pull("klaud/auto-p", &head, "b").await;
    let proof = k.on_pull("klaud/auto-p", &head, pr.number).await;
    let first = f.get_pull(pr.number.get()).await.unwrap();
    let before = sim.state().rate_remaining(BOT_TOKEN).await.unwrap();
    let second = f.get_pull(pr.number.get()).await.unwrap();
    let after = sim.state().rate_remaining(BOT_TOKEN).await.unwrap();
    assert_eq!(first, second);
    assert_eq!(before, after, "a 304 must not count");
    let log = sim.state().request_log().await;
    assert_eq!(log.last().map(|e| e.status), Some(304));
    assert_eq!(f.rate_budget().map(|b| b.remaining), Some(after));

    // A change invalidates the ETag and is seen.
    k.forge
        .update_pull_body(&proof, pr.number, "new body")
        .await
        .unwrap();
    assert_eq!(
        f.get_pull(pr.number.get()).await.unwrap().body.as_deref(),
        Some("new body")
    );
}

#[tokio::test]
async fn listing_follows_pagination_over_250_refs() {
    let sim = sim().await;
    // The 250 refs are set up through the API, past GitHub's content limit
    // of 80 a minute; the listing's pagination is what is under test.
    sim.state().set_content_limits(None, None).await;
    let f = forge(&sim).await;
    let main = f.get_ref("refs/heads/main").await.unwrap().unwrap();
    for i in 0..250 {
        RefStore::create_ref(&f, &format!("refs/heads/klaud/claim-{i:04}"), &main)
            .await
            .unwrap();
    }
    let refs = f.list_refs("refs/heads/klaud/claim-").await.unwrap();
    assert_eq!(refs.len(), 250);
    assert!(refs.iter().all(|(_, s)| s == &main));
    let log = sim.state().request_log().await;
    assert_eq!(
        log.iter()
            .filter(|e| e.method == "GET" && e.path.contains("/git/matching-refs/"))
            .count(),
        3,
        "100 + 100 + 50"
    );
}

#[tokio::test]
async fn ref_store_reports_already_exists_and_not_fast_forward() {
    let sim = sim().await;
    let f = forge(&sim).await;
    let store: &dyn RefStore = &f;
    let main = f.get_ref("refs/heads/main").await.unwrap().unwrap();
    let tree = store.commit_tree(&main).await.unwrap();
    let claim = store
        .create_commit(
            "{\"candidates\":[],\"run-id\":1}",
            &tree,
            std::slice::from_ref(&main),
        )
        .await
        .unwrap();
    let name = "refs/heads/klaud/claim-d92e15065c55779d";
    store.create_ref(name, &claim).await.unwrap();
    let err = store.create_ref(name, &main).await.unwrap_err();
    assert!(matches!(err, RefStoreError::AlreadyExists(_)), "{err:?}");

    let tip = store.read_ref(name).await.unwrap().unwrap();
    assert_eq!(tip.sha, claim);
    assert_eq!(tip.parents, vec![main.clone()]);
    assert_eq!(tip.tree, tree);
    assert_eq!(tip.message, "{\"candidates\":[],\"run-id\":1}");

    // A sibling of the tip is not a fast-forward: the CAS loses.
    let sibling = store
        .create_commit("other", &tree, std::slice::from_ref(&main))
        .await
        .unwrap();
    let err = store.fast_forward_ref(name, &sibling).await.unwrap_err();
    assert!(matches!(err, RefStoreError::NotFastForward(_)), "{err:?}");
    let child = store
        .create_commit("renew", &tree, std::slice::from_ref(&claim))
        .await
        .unwrap();
    store.fast_forward_ref(name, &child).await.unwrap();

    assert_eq!(
        store
            .list_refs("refs/heads/klaud/claim-")
            .await
            .unwrap()
            .len(),
        1
    );
    store.delete_ref(name).await.unwrap();
    assert!(store.read_ref(name).await.unwrap().is_none());
    assert!(matches!(
        store.delete_ref(name).await,
        Err(RefStoreError::NotFound(_))
    ));
}

/// The draft mutations address the pull request's GraphQL id, which the
/// engine's own read (here the creation's answer) already carries: a read of
/// the pull request only for it would be one more charged answer. A pull
/// request the engine knows without it is read first, as before.
#[tokio::test]
async fn draft_state_needs_no_read_when_the_pull_request_carries_its_node_id() {
    let sim = sim().await;
    let f = forge(&sim).await;
    let k = Klaud::new(&f).await;
    let head = k
        .branch("klaud/auto-n", "perf-changelog.yaml", b"x: 1\n")
        .await;
    let pr = k.pull("klaud/auto-n", &head, "b").await;
    assert!(
        pr.node_id.is_some(),
        "the creation's answer carries the node id"
    );
    let proof = k.on_pull("klaud/auto-n", &head, pr.number).await;
    let read = format!("/pulls/{}", pr.number);

    let before = sim.state().request_log().await.len();
    k.forge.set_draft(&proof, &pr, false).await.unwrap();
    let log = sim.state().request_log().await;
    assert_eq!(
        count(&log[before..], "GET", &read),
        0,
        "{:?}",
        &log[before..]
    );
    assert_eq!(count(&log[before..], "POST", "/graphql"), 1);
    assert!(!f.get_pull(pr.number.get()).await.unwrap().draft);

    // Without the id the backend reads it, and skips a mutation that would
    // change nothing.
    let unknown = Pull {
        node_id: None,
        ..pr.clone()
    };
    let before = sim.state().request_log().await.len();
    k.forge.set_draft(&proof, &unknown, false).await.unwrap();
    let log = sim.state().request_log().await;
    assert_eq!(count(&log[before..], "GET", &read), 1);
    assert_eq!(count(&log[before..], "POST", "/graphql"), 0);
    k.forge.set_draft(&proof, &unknown, true).await.unwrap();
    assert!(f.get_pull(pr.number.get()).await.unwrap().draft);
}

#[tokio::test]
async fn draft_state_labels_and_final_sweep_trigger() {
    let sim = sim().await;
    let f = forge(&sim).await;
    let k = Klaud::new(&f).await;
    let head = k
        .branch(
            "klaud/auto-s",
            "perf-changelog.yaml",
            b"- config-keys:\n    - a\n\n- config-keys:\n    - b\n",
        )
        .await;
    let pr = k.pull("klaud/auto-s", &head, "b").await;
    let proof = k.on_pull("klaud/auto-s", &head, pr.number).await;
    k.forge.set_draft(&proof, &pr, false).await.unwrap();
    assert!(!f.get_pull(pr.number.get()).await.unwrap().draft);
    k.forge.set_draft(&proof, &pr, true).await.unwrap();
    assert!(f.get_pull(pr.number.get()).await.unwrap().draft);

    assert!(
        f.pull_files(pr.number.get())
            .await
            .unwrap()
            .iter()
            .any(|c| c.filename == "perf-changelog.yaml")
    );
    k.forge
        .add_labels(&proof, pr.number, &["full-sweep-fail-fast".to_owned()])
        .await
        .unwrap();
    assert_eq!(
        f.list_labels(pr.number.get()).await.unwrap(),
        vec!["full-sweep-fail-fast".to_string()]
    );
    let runs = f
        .list_runs(&RunFilter {
            event: Some("pull_request".into()),
            branch: Some("klaud/auto-s".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].pull_requests, vec![pr.number.get()]);
    for _ in 0..2 {
        k.forge
            .remove_label(&proof, pr.number, "full-sweep-fail-fast")
            .await
            .unwrap();
    }
    assert!(f.list_labels(pr.number.get()).await.unwrap().is_empty());
    assert_eq!(
        f.collaborator_permission("maintainer").await.unwrap(),
        klaud_lifecycle::commands::Permission::Maintain
    );
}

#[tokio::test]
async fn dispatch_run_and_artifacts_round_trip() {
    let sim = sim().await;
    let f = forge(&sim).await;
    let k = Klaud::new(&f).await;
    let head = k
        .branch("klaud/auto-d", "configs/nvidia-master.yaml", b"a: 9\n")
        .await;
    let pr = k.pull("klaud/auto-d", &head, "b").await;
    let proof = k.on_pull("klaud/auto-d", &head, pr.number).await;
    let inputs = json!({"ref": head, "test-name": "klaud-1-abc", "fail-fast": "true"});
    let out = k
        .forge
        .dispatch(&proof, "e2e-tests.yml", "main", &inputs)
        .await
        .unwrap();
    let id = out.expect("run id from return_run_details");
    let run = f.get_run(id).await.unwrap();
    assert_eq!(run.display_title.as_deref(), Some("e2e Test - klaud-1-abc"));
    assert_eq!(run.event, "workflow_dispatch");
    assert_eq!(run.actor.as_deref(), Some(BOT));
    assert_eq!(run.head_sha, head);
    assert_eq!(run.status.as_ref().map(|s| s.as_str()), Some("queued"));
    let mine = f
        .list_runs(&RunFilter {
            actor: Some(BOT.into()),
            event: Some("workflow_dispatch".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(mine.iter().map(|r| r.id).collect::<Vec<_>>(), vec![id]);

    let mut files = BTreeMap::new();
    files.insert("agg_bmk.json".to_string(), b"[]".to_vec());
    let mut arts = BTreeMap::new();
    arts.insert("results_bmk".to_string(), files);
    sim.state()
        .complete_run(REPO, id, "success", arts)
        .await
        .unwrap();
    let run = f.get_run(id).await.unwrap();
    assert_eq!(run.conclusion.as_ref().map(|c| c.as_str()), Some("success"));
    let artifacts = f.list_artifacts(id).await.unwrap();
    assert_eq!(artifacts.len(), 1);
    let zip = f.download_artifact(artifacts[0].id).await.unwrap();
    assert_eq!(&zip[..2], b"PK");
    let title = "e2e Test - klaud-1-abc";
    let run_proof = k
        .prove(
            Some(("klaud/auto-d", &head)),
            None,
            Some(pr.number),
            Some((id, title)),
        )
        .await;
    k.forge.cancel_run(&run_proof, id).await.unwrap();

    let jobs = f.list_jobs(id).await.unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(
        jobs[0].conclusion.as_ref().map(|c| c.as_str()),
        Some("success")
    );
    sim.state()
        .add_fault(Fault {
            method: Some("POST".into()),
            path: "/repos/*/actions/runs/*/rerun".into(),
            count: 1,
            action: FaultAction::AfterWriteStatus { status: 504 },
        })
        .await;
    k.forge.rerun_run(&run_proof, id).await.unwrap();
    let run = f.get_run(id).await.unwrap();
    assert_eq!(
        (run.run_attempt, run.status.as_ref().map(|s| s.as_str())),
        (2, Some("queued"))
    );

    let cmp = f.compare("main", &head).await.unwrap();
    assert_eq!(
        (cmp.status.as_str(), cmp.ahead_by, cmp.behind_by),
        ("ahead", 1, 0)
    );
}

/// A job's log is read through GitHub's redirect and only its two ends are
/// ever held: a log of megabytes comes back within the limit, its first
/// and last lines kept and the cut said.
#[tokio::test]
async fn a_long_job_log_is_read_through_the_redirect_keeping_both_ends_within_the_limit() {
    let sim = sim().await;
    let f = forge(&sim).await;
    let k = Klaud::new(&f).await;
    let head = k
        .branch("klaud/auto-l", "configs/nvidia-master.yaml", b"a: 8\n")
        .await;
    let id = sim
        .state()
        .add_finished_run(
            REPO,
            FinishedRun {
                workflow: "e2e-tests.yml".into(),
                head_sha: head.to_string(),
                event: "workflow_dispatch".into(),
                conclusion: "failure".into(),
                jobs: vec![("benchmark".into(), "failure".into())],
                artifacts: BTreeMap::new(),
            },
        )
        .await
        .unwrap();
    let job = f.list_jobs(id).await.unwrap()[0].id;
    let mut log = String::from("vllm serve --gpu-memory-utilization 0.95\n");
    while log.len() < 6 * 1024 * 1024 {
        log.push_str("INFO: request served in 12 ms\n");
    }
    log.push_str("torch.OutOfMemoryError: CUDA out of memory\n");
    sim.state()
        .set_job_log(REPO, job, log.clone())
        .await
        .unwrap();
    let kept = f.job_log(job, 64 * 1024).await.unwrap();
    assert!(kept.len() <= 64 * 1024, "{} bytes", kept.len());
    assert_eq!(
        kept,
        klaud_lifecycle::job_log::bounded(log.as_bytes(), 64 * 1024)
    );
    let text = String::from_utf8(kept).unwrap();
    assert!(text.starts_with("vllm serve --gpu-memory-utilization 0.95\n"));
    assert!(text.ends_with("torch.OutOfMemoryError: CUDA out of memory\n"));
    assert!(text.contains("bytes left out ...]"), "the cut is said");
    let short = "one line\n".to_string();
    sim.state()
        .set_job_log(REPO, job, short.clone())
        .await
        .unwrap();
    assert_eq!(f.job_log(job, 64 * 1024).await.unwrap(), short.into_bytes());
    assert!(matches!(
        f.job_log(job + 1_000_000, 1024).await,
        Err(GithubError::NotFound { .. })
    ));
}

#[tokio::test]
async fn octocrab_typed_models_parse_simulator_responses() {
    let sim = sim().await;
    let f = forge(&sim).await;
    let k = Klaud::new(&f).await;
    let head = k
        .branch("klaud/auto-o", "configs/nvidia-master.yaml", b"a: 7\n")
        .await;
    let pr = k.pull("klaud/auto-o", &head, "b").await;
    let proof = k.on_pull("klaud/auto-o", &head, pr.number).await;
    k.forge
        .add_labels(&proof, pr.number, &["sweep-enabled".to_owned()])
        .await
        .unwrap();
    let gh = octocrab::Octocrab::builder()
        .base_uri(sim.url())
        .unwrap()
        .personal_token(BOT_TOKEN.to_string())
        .build()
        .unwrap();
    let me = gh.current().user().await.unwrap();
    assert_eq!(me.login, BOT);
    let repo = gh.repos("sandbox", "benchmarks").get().await.unwrap();
    assert_eq!(repo.default_branch.as_deref(), Some("main"));
    let p = gh
        .pulls("sandbox", "benchmarks")
        .get(pr.number.get())
        .await
        .unwrap();
    assert_eq!(p.draft, Some(true));
    let c = gh
        .issues("sandbox", "benchmarks")
        .create_comment(pr.number.get(), "x")
        .await
        .unwrap();
    let c2 = gh
        .issues("sandbox", "benchmarks")
        .update_comment(c.id, "y")
        .await
        .unwrap();
    assert_eq!(c2.body.as_deref(), Some("y"));
    gh.issues("sandbox", "benchmarks")
        .delete_comment(c.id)
        .await
        .unwrap();
    assert!(
        f.list_comments(pr.number.get(), None)
            .await
            .unwrap()
            .is_empty()
    );
    let issue = gh
        .issues("sandbox", "benchmarks")
        .get(pr.number.get())
        .await
        .unwrap();
    assert_eq!(issue.labels.len(), 1);
    let page = gh
        .pulls("sandbox", "benchmarks")
        .list()
        .send()
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1);
}

/// A throwaway RSA key pair from the `openssl` binary (skipped loudly when
/// it is missing, required under CI).
fn rsa_key_pair(dir: &std::path::Path) -> Option<(String, String)> {
    let key = dir.join("app.pem");
    let ok = std::process::Command::new("openssl")
        .args(["genrsa", "-traditional", "-out"])
        .arg(&key)
        .arg("2048")
        .output()
        .is_ok_and(|o| o.status.success());
    let public = ok
        .then(|| {
            std::process::Command::new("openssl")
                .args(["rsa", "-pubout", "-in"])
                .arg(&key)
                .output()
                .ok()
                .filter(|o| o.status.success())
        })
        .flatten();
    match public {
        Some(p) => Some((
            std::fs::read_to_string(&key).unwrap(),
            String::from_utf8(p.stdout).unwrap(),
        )),
        None if std::env::var_os("CI").is_some() => panic!("openssl is required under CI"),
        None => {
            eprintln!("SKIP: openssl not available; GitHub App auth not tested");
            None
        }
    }
}

#[tokio::test]
async fn github_app_installation_tokens_act_as_the_app_bot() {
    let dir = tempfile::tempdir().unwrap();
    let Some((private, public)) = rsa_key_pair(dir.path()) else {
        return;
    };
    let sim = sim().await;
    let login = sim
        .state()
        .add_app(4242, "klaud-cold", &public, 77, REPO)
        .await
        .unwrap();
    assert_eq!(login, "klaud-cold[bot]");
    let mut cfg = config(&sim, "unused");
    cfg.credential = Credential::App {
        app_id: 4242,
        private_key_pem: Secret::new(private.clone()),
        installation_id: 77,
    };
    assert!(!format!("{cfg:?}").contains("PRIVATE KEY"));

    // The preflight resolves the app to `<slug>[bot]`.
    let err = Github::connect(cfg.clone()).await.unwrap_err();
    assert!(
        matches!(&err, GithubError::IdentityMismatch { found, .. } if found == "klaud-cold[bot]"),
        "{err:?}"
    );
    cfg.bot_login = "klaud-cold[bot]".into();
    let f = Github::connect(cfg.clone()).await.unwrap();
    let k = Klaud::new(&f).await;
    let head = k
        .branch("klaud/auto-app", "configs/nvidia-master.yaml", b"a: 11\n")
        .await;
    let pr = k.pull("klaud/auto-app", &head, "b").await;
    assert_eq!(pr.author.as_deref(), Some("klaud-cold[bot]"));
    let log = sim.state().request_log().await;
    assert!(log.iter().all(|e| !e.path.contains("ghs_")));

    // A key that is not the app's is refused.
    let other = tempfile::tempdir().unwrap();
    if let Some((wrong, _)) = rsa_key_pair(other.path()) {
        cfg.credential = Credential::App {
            app_id: 4242,
            private_key_pem: Secret::new(wrong),
            installation_id: 77,
        };
        assert!(Github::connect(cfg).await.is_err());
    }
}

#[tokio::test]
async fn contents_small_large_missing_and_directories() {
    let sim = sim().await;
    let big: Vec<u8> = (0..1_200_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let mut files = BTreeMap::new();
    files.insert("big/perf-changelog.yaml".to_string(), Some(big.clone()));
    sim.state()
        .push_commit(REPO, "main", "maintainer", files, "big file")
        .await
        .unwrap();
    let f = forge(&sim).await;
    assert_eq!(
        f.get_contents("configs/nvidia-master.yaml", "main")
            .await
            .unwrap(),
        Some(b"a: 1\n".to_vec())
    );
    assert_eq!(
        f.get_contents("big/perf-changelog.yaml", "main")
            .await
            .unwrap(),
        Some(big)
    );
    assert_eq!(f.get_contents("nope.yaml", "main").await.unwrap(), None);
    let err = f.get_contents("configs", "main").await.unwrap_err();
    assert!(matches!(err, GithubError::Decode { .. }), "{err:?}");
}

#[tokio::test]
async fn a_file_at_a_commit_whose_tree_was_read_is_its_blob_without_a_contents_request() {
    let sim = sim().await;
    let f = forge(&sim).await;
    let main = f.get_ref("refs/heads/main").await.unwrap().unwrap();
    // What a plan pass reads: the commit's whole tree, then a master.
    let blobs = f.tree_blobs(&main).await.unwrap();
    let (_, master) = blobs
        .iter()
        .find(|(p, _)| p == "configs/nvidia-master.yaml")
        .unwrap();
    f.get_blob(master).await.unwrap();
    let before = sim.state().request_log().await.len();
    assert_eq!(
        f.get_contents("configs/nvidia-master.yaml", &main)
            .await
            .unwrap(),
        Some(b"a: 1\n".to_vec())
    );
    assert_eq!(f.get_contents("nope.yaml", &main).await.unwrap(), None);
    let log = sim.state().request_log().await;
    assert_eq!(log.len(), before, "{:?}", &log[before..]);
    // A directory is no blob: the contents API still says what it is.
    let err = f.get_contents("configs", &main).await.unwrap_err();
    assert!(matches!(err, GithubError::Decode { .. }), "{err:?}");
}

#[tokio::test]
async fn concurrent_creates_of_one_ref_have_exactly_one_winner() {
    let sim = sim().await;
    let f = std::sync::Arc::new(forge(&sim).await);
    let main = f.get_ref("refs/heads/main").await.unwrap().unwrap();
    let tree = RefStore::commit_tree(&*f, &main).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let f = f.clone();
        let (tree, main) = (tree.clone(), main.clone());
        tasks.push(tokio::spawn(async move {
            let c = RefStore::create_commit(&*f, &format!("owner {i}"), &tree, &[main])
                .await
                .unwrap();
            RefStore::create_ref(&*f, "refs/heads/klaud/claim-race", &c).await
        }));
    }
    let mut wins = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(()) => wins += 1,
            Err(RefStoreError::AlreadyExists(_)) => {}
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!(wins, 1);
}

#[tokio::test]
async fn an_exhausted_primary_limit_is_reported_not_waited_for_an_hour() {
    let sim = sim().await;
    sim.state()
        .add_token(BOT, "bot-small-budget", Some(3))
        .await
        .unwrap();
    let f = Github::connect(config(&sim, "bot-small-budget"))
        .await
        .unwrap();
    // Distinct refs: a repeated read of one ref is a free 304.
    f.get_ref("refs/heads/main").await.unwrap();
    f.get_ref("refs/heads/absent-a").await.unwrap();
    let err = f.get_ref("refs/heads/absent-b").await.unwrap_err();
    assert!(
        matches!(err, GithubError::RateLimited { retry_after_secs, .. } if retry_after_secs > 60),
        "{err:?}"
    );
    let budget = f.rate_budget().unwrap();
    assert_eq!((budget.limit, budget.remaining), (3, 0));
}

#[tokio::test]
async fn dispatch_falls_back_when_return_run_details_is_rejected() {
    let sim = sim().await;
    sim.state().set_return_run_details_supported(false).await;
    let f = forge(&sim).await;
    let k = Klaud::new(&f).await;
    let head = k
        .branch("klaud/auto-f", "configs/nvidia-master.yaml", b"a: 12\n")
        .await;
    let pr = k.pull("klaud/auto-f", &head, "b").await;
    let proof = k.on_pull("klaud/auto-f", &head, pr.number).await;
    let inputs = json!({"ref": head, "test-name": "klaud-2-def"});
    let out = k
        .forge
        .dispatch(&proof, "e2e-tests.yml", "main", &inputs)
        .await
        .unwrap();
    assert_eq!(out, None);
    let log = sim.state().request_log().await;
    let statuses: Vec<u16> = log
        .iter()
        .filter(|e| e.path.ends_with("/dispatches"))
        .map(|e| e.status)
        .collect();
    assert_eq!(statuses, vec![422, 204]);
    // The run is found by its title, as the lifecycle does.
    let runs = f
        .list_runs(&RunFilter {
            workflow: Some("e2e-tests.yml".into()),
            event: Some("workflow_dispatch".into()),
            actor: Some(BOT.into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(
        runs[0].display_title.as_deref(),
        Some("e2e Test - klaud-2-def")
    );
    let none = f
        .list_runs(&RunFilter {
            workflow: Some("run-sweep.yml".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(none.is_empty());
}

#[tokio::test]
async fn the_secondary_content_limit_refuses_writes_without_performing_them() {
    let sim = sim().await;
    sim.state().set_content_limit(Some(2)).await;
    let mut cfg = config(&sim, BOT_TOKEN);
    // GitHub asks for up to a minute; allow less so the forge reports it.
    cfg.retry.max_wait = Duration::from_secs(1);
    let f = Github::connect(cfg).await.unwrap();
    let main = f.get_ref("refs/heads/main").await.unwrap().unwrap();
    let name = |i: u32| format!("refs/heads/klaud/claim-w{i}");
    RefStore::create_ref(&f, &name(1), &main).await.unwrap();
    RefStore::create_ref(&f, &name(2), &main).await.unwrap();
    let err = RefStore::create_ref(&f, &name(3), &main).await.unwrap_err();
    assert!(
        matches!(&err, RefStoreError::Other(m) if m.contains("rate limited")),
        "{err:?}"
    );
    assert_eq!(sim.state().ref_sha(REPO, &name(3)).await, None);
    // Reads are not content-creating.
    assert!(f.get_ref(&name(2)).await.unwrap().is_some());
}

#[tokio::test]
async fn an_unchanged_list_is_answered_by_a_free_304_and_a_change_is_seen() {
    let sim = sim().await;
    let f = forge(&sim).await;
    let main = f.get_ref("refs/heads/main").await.unwrap().unwrap();
    RefStore::create_ref(&f, "refs/heads/klaud/claim-0123456789abcdef", &main)
        .await
        .unwrap();
    let first = f.list_refs("refs/heads/klaud/claim-").await.unwrap();
    let before = sim.state().rate_remaining(BOT_TOKEN).await.unwrap();
    let second = f.list_refs("refs/heads/klaud/claim-").await.unwrap();
    let after = sim.state().rate_remaining(BOT_TOKEN).await.unwrap();
    assert_eq!(first, second);
    assert_eq!(before, after, "an idle listing must not count");
    let log = sim.state().request_log().await;
    assert_eq!(log.last().map(|e| e.status), Some(304));

    RefStore::delete_ref(&f, "refs/heads/klaud/claim-0123456789abcdef")
        .await
        .unwrap();
    assert!(
        f.list_refs("refs/heads/klaud/claim-")
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_proof_for_one_pull_request_writes_nothing_to_another() {
    let sim = sim().await;
    let f = forge(&sim).await;
    let k = Klaud::new(&f).await;
    let head = k
        .branch("klaud/auto-a", "configs/nvidia-master.yaml", b"a: 13\n")
        .await;
    let pr = k.pull("klaud/auto-a", &head, "b").await;
    let proof = k.on_pull("klaud/auto-a", &head, pr.number).await;
    let other = PullNumber::from(pr.number.get() + 1);
    let before = sim.state().request_log().await.len();
    let err = k
        .forge
        .create_comment(&proof, other, "not yours")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ForgeError::Proof(e) if e.asked.contains(&format!("#{other}"))),
        "{err:?}"
    );
    assert!(matches!(
        k.forge.cancel_run(&proof, 1).await,
        Err(ForgeError::Proof(_))
    ));
    assert!(matches!(
        k.forge.delete_branch(&proof, "main").await,
        Err(ForgeError::Proof(_))
    ));
    assert_eq!(
        sim.state().request_log().await.len(),
        before,
        "a refused write sends nothing"
    );
    // Nor can the claim store move a branch.
    let err = RefStore::delete_ref(&f, "refs/heads/klaud/auto-a")
        .await
        .unwrap_err();
    assert!(matches!(err, RefStoreError::Other(_)), "{err:?}");
    assert_eq!(
        sim.state().ref_sha(REPO, "refs/heads/klaud/auto-a").await,
        Some(head.to_string())
    );
}

/// The lease check sends a write only with `lease_margin + write_timeout`
/// of lease left: the client must give a write up within that timeout end
/// to end, even when GitHub keeps the connection open without answering.
#[tokio::test]
async fn a_write_unanswered_within_the_write_timeout_has_an_unknown_outcome() {
    let sim = sim().await;
    let f = forge(&sim)
        .await
        .with_write_timeout(Duration::from_millis(300));
    let main = f.get_ref("refs/heads/main").await.unwrap().unwrap();
    sim.state()
        .add_fault(Fault {
            method: Some("POST".into()),
            path: "/repos/*/git/refs".into(),
            // create_ref re-reads after an unknown outcome and sends once
            // more when nothing landed: both sends go unanswered.
            count: 2,
            action: FaultAction::Delay { millis: 5_000 },
        })
        .await;
    let err = RefStore::create_ref(&f, "refs/heads/klaud/claim-slow", &main)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("outcome unknown"), "{err}");
}

/// A machine whose clock runs ten minutes ahead of GitHub's: on its own
/// clock a healthy instance's five-minute lease looks expired. Leases are
/// kept on GitHub's time (the `Date` of its answers), so it is not.
#[tokio::test]
async fn leases_are_kept_on_githubs_clock_so_a_machine_clock_ahead_takes_no_live_claim() {
    let sim = sim().await;
    sim.state().set_clock_offset(TimeDelta::minutes(-10)).await;
    let f = forge(&sim).await;
    let skew = f.clock_skew().expect("GitHub answered with a Date");
    assert!(
        (skew + TimeDelta::minutes(10)).abs() <= TimeDelta::seconds(3),
        "{skew:?}"
    );
    let github = f.clock();
    let main = f.get_ref("refs/heads/main").await.unwrap().unwrap();
    let id = CandidateId::new(CANDIDATE).unwrap();
    let family = id.family();
    let healthy = ClaimBook::new(&f, &github, Claimant::new(uuid::Uuid::from_u128(1)));
    let Acquire::Won(_) = healthy
        .acquire(
            &family,
            vec![ClaimCandidate::new(
                main.parse().expect("a sha"),
                "configs/nvidia-master.yaml:a",
                id,
            )],
            &main,
            1,
            TimeDelta::minutes(5),
        )
        .await
        .unwrap()
    else {
        panic!("the claim is occupied");
    };
    let other = ClaimBook::new(&f, &github, Claimant::new(uuid::Uuid::from_u128(2)));
    let entry = other.inspect(&family).await.unwrap().expect("claim");
    assert_eq!(
        entry.lease_expired(SystemClock.now()),
        Some(true),
        "on this machine's clock alone the live lease looks expired"
    );
    assert_eq!(entry.lease_expired(github.now()), Some(false));
    let runs = klaud_github::ForgeRunCompletion::new(&f);
    let taken = other
        .takeover(&family, 2, TimeDelta::minutes(5), &runs)
        .await
        .unwrap();
    assert!(
        matches!(taken, klaud_claims::Takeover::Refused(_)),
        "{taken:?}"
    );
}

/// A commit onto Klaud's branch is one GraphQL request: the branch moves
/// to it, and the commit's file and its compare with its parent are then
/// known without a request. The proof must cover the branch at that head;
/// a branch that moved meanwhile refuses it untouched (the
/// compare-and-swap); a lost answer is ambiguous and never sent twice.
// Kept whole (about 100 lines): the four outcomes of one write.
#[tokio::test]
async fn a_commit_on_the_branch_is_one_graphql_request_and_a_compare_and_swap() {
    let sim = sim().await;
    let f = forge(&sim).await;
    let k = Klaud::new(&f).await;
    let branch = "klaud/auto-g";
    let head = k
        .branch(branch, "configs/nvidia-master.yaml", b"a: 2\n")
        .await;
    let proof = k.prove(Some((branch, &head)), None, None, None).await;
    let files = [("perf-changelog.yaml".to_owned(), b"- entry\n".to_vec())];
    let message = "Add perf-changelog entry for a\n\nklaud-candidate: x\n";
    let before = sim.state().request_log().await.len();
    let sha = k
        .forge
        .commit_on_branch(&proof, branch, &head, &files, message)
        .await
        .expect("commit");
    let log = sim.state().request_log().await;
    let sent: Vec<_> = log[before..]
        .iter()
        .map(|e| format!("{} {}", e.method, e.path))
        .collect();
    assert_eq!(sent, ["POST /graphql"]);
    assert_eq!(
        sim.state()
            .ref_sha(REPO, &format!("refs/heads/{branch}"))
            .await,
        Some(sha.to_string())
    );
    let read = k
        .forge
        .read_file("perf-changelog.yaml", sha.as_str())
        .await
        .unwrap();
    assert_eq!(read.as_deref(), Some(&b"- entry\n"[..]));
    let cmp = k.forge.compare_commits(&head, &sha).await.unwrap();
    assert_eq!(cmp.commits.len(), 1);
    assert_eq!(cmp.commits[0].message, message);
    assert_eq!(cmp.commits[0].author.as_deref(), Some(BOT));
    assert_eq!(
        sim.state().request_log().await.len(),
        before + 1,
        "no reads"
    );

    // The proof saw the old head: it does not cover a commit on another.
    let refused = k
        .forge
        .commit_on_branch(&proof, branch, &sha, &files, message)
        .await;
    assert!(matches!(refused, Err(ForgeError::Proof(_))), "{refused:?}");

    // Someone else moved the branch after the proof: refused, untouched.
    let proof = k.prove(Some((branch, &sha)), None, None, None).await;
    let theirs = k
        .forge
        .commit_files(&proof, &sha, &files, "a person's commit")
        .await
        .unwrap();
    k.forge
        .fast_forward_branch(&proof, branch, &theirs)
        .await
        .unwrap();
    let stale = k
        .forge
        .commit_on_branch(&proof, branch, &sha, &files, message)
        .await;
    assert!(
        matches!(stale, Err(ForgeError::NotFastForward(_))),
        "{stale:?}"
    );
    assert_eq!(
        sim.state()
            .ref_sha(REPO, &format!("refs/heads/{branch}"))
            .await,
        Some(theirs.to_string())
    );

    // The answer is lost after GitHub made the commit: ambiguous, once.
    let proof = k.prove(Some((branch, &theirs)), None, None, None).await;
    lose_the_answer_to_the_next_post(&sim, "/graphql").await;
    let before = sim.state().request_log().await.len();
    let lost = k
        .forge
        .commit_on_branch(&proof, branch, &theirs, &files, message)
        .await;
    assert!(matches!(lost, Err(ForgeError::Ambiguous(_))), "{lost:?}");
    let log = sim.state().request_log().await;
    assert_eq!(count(&log[before..], "POST", "/graphql"), 1, "sent once");
    let moved = sim
        .state()
        .ref_sha(REPO, &format!("refs/heads/{branch}"))
        .await;
    assert_ne!(moved, Some(theirs.to_string()), "GitHub applied it");
}

/// GitHub's `createCommitOnBranch` writes every file as 100644: a commit
/// that edits an executable launcher (a playbook repair) goes through the
/// tree API instead and keeps the mode a person gave it, as the REST
/// commit does; a regular file still costs the one mutation.
#[tokio::test]
async fn a_commit_on_the_branch_keeps_an_executable_files_mode() {
    let sim = sim().await;
    let seed = tempfile::tempdir().unwrap();
    let launcher = seed.path().join("runners/launch_b200.sh");
    std::fs::create_dir_all(launcher.parent().unwrap()).unwrap();
    std::fs::write(&launcher, "#!/bin/bash\necho old\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    sim.state()
        .seed_from_dir(REPO, seed.path(), Some("maintainer"))
        .await
        .unwrap();
    let f = forge(&sim).await;
    let k = Klaud::new(&f).await;
    let branch = "klaud/auto-m";
    let head = k
        .branch(branch, "configs/nvidia-master.yaml", b"a: 2\n")
        .await;
    let mode_at = |sha: String| {
        let url = format!("{}/repos/{REPO}/git/trees/{sha}?recursive=1", sim.url());
        async move {
            let tree: serde_json::Value = klaud_http::http_client_builder()
                .user_agent("klaud-test")
                .build()
                .unwrap()
                .get(url)
                .bearer_auth(BOT_TOKEN)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            tree["tree"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["path"] == "runners/launch_b200.sh")
                .map(|e| e["mode"].as_str().unwrap().to_owned())
        }
    };
    assert_eq!(mode_at(head.to_string()).await.as_deref(), Some("100755"));

    let proof = k.prove(Some((branch, &head)), None, None, None).await;
    let files = [(
        "runners/launch_b200.sh".to_owned(),
        b"#!/bin/bash\necho new\n".to_vec(),
    )];
    let before = sim.state().request_log().await.len();
    let sha = k
        .forge
        .commit_on_branch(&proof, branch, &head, &files, "Repair the launcher\n")
        .await
        .expect("commit");
    let log = sim.state().request_log().await;
    assert!(
        !log[before..].iter().any(|e| e.path == "/graphql"),
        "the mutation would drop the mode"
    );
    assert_eq!(mode_at(sha.to_string()).await.as_deref(), Some("100755"));
    assert_eq!(
        sim.state()
            .ref_sha(REPO, &format!("refs/heads/{branch}"))
            .await,
        Some(sha.to_string())
    );

    // A regular file beside it: the one mutation, and the launcher's mode
    // stays what it was.
    let proof = k.prove(Some((branch, &sha)), None, None, None).await;
    let files = [("perf-changelog.yaml".to_owned(), b"- entry\n".to_vec())];
    let before = sim.state().request_log().await.len();
    let next = k
        .forge
        .commit_on_branch(&proof, branch, &sha, &files, "Add perf-changelog entry\n")
        .await
        .expect("commit");
    let sent: Vec<_> = sim.state().request_log().await[before..]
        .iter()
        .map(|e| format!("{} {}", e.method, e.path))
        .collect();
    assert_eq!(sent, ["POST /graphql"]);
    assert_eq!(mode_at(next.to_string()).await.as_deref(), Some("100755"));
}

/// The candidate's branch and its first commit are one GraphQL request
/// (after one read of the repository's node id per client): the branch is
/// at the commit, whose parent is the base. A branch an earlier try left
/// at the base takes the commit all the same; one that is elsewhere is
/// refused untouched; a lost answer is ambiguous and never sent twice.
// Kept whole (about 90 lines): the outcomes of one write.
#[tokio::test]
async fn a_new_branch_and_its_commit_are_one_graphql_request() {
    let sim = sim().await;
    let f = forge(&sim).await;
    let k = Klaud::new(&f).await;
    let base: CommitSha = f
        .get_ref("refs/heads/main")
        .await
        .unwrap()
        .unwrap()
        .parse()
        .unwrap();
    let files = [("configs/nvidia-master.yaml".to_owned(), b"a: 2\n".to_vec())];
    let message = "Bump a\n\nklaud-candidate: x\n";
    let tip = |branch: &'static str| {
        let sim = &sim;
        async move {
            sim.state()
                .ref_sha(REPO, &format!("refs/heads/{branch}"))
                .await
        }
    };
    let sent_since = |before: usize| {
        let sim = &sim;
        async move {
            sim.state().request_log().await[before..]
                .iter()
                .map(|e| format!("{} {}", e.method, e.path))
                .collect::<Vec<_>>()
        }
    };

    let before = sim.state().request_log().await.len();
    let proof = k.prove(None, Some("klaud/auto-one"), None, None).await;
    let after_proof = sim.state().request_log().await.len();
    let sha = k
        .forge
        .create_branch_with_commit(&proof, "klaud/auto-one", &base, &files, message)
        .await
        .expect("made");
    assert!(after_proof >= before);
    let sent = sent_since(after_proof).await;
    let writes: Vec<&String> = sent.iter().filter(|s| !s.starts_with("GET ")).collect();
    assert_eq!(writes, ["POST /graphql"], "{sent:?}");
    // Reads once per client: the base's tree (a file's mode decides the
    // way the commit is made) and the repository's node id.
    assert!(
        sent.contains(&"GET /repos/sandbox/benchmarks".to_owned()) && sent.len() <= 3,
        "{sent:?}"
    );
    assert_eq!(tip("klaud/auto-one").await, Some(sha.to_string()));
    let cmp = k.forge.compare_commits(&base, &sha).await.unwrap();
    assert_eq!(cmp.commits.len(), 1);
    assert_eq!(cmp.commits[0].message, message);

    // Left at the base by an earlier try: the ref is refused, the commit
    // lands, still one request.
    let proof = k.prove(None, Some("klaud/auto-two"), None, None).await;
    k.forge
        .create_branch(&proof, "klaud/auto-two", &base)
        .await
        .unwrap();
    let proof = k.prove(None, Some("klaud/auto-two"), None, None).await;
    let before = sim.state().request_log().await.len();
    let two = k
        .forge
        .create_branch_with_commit(&proof, "klaud/auto-two", &base, &files, message)
        .await
        .expect("the commit lands on the branch left at the base");
    assert_eq!(sent_since(before).await, ["POST /graphql"]);
    assert_eq!(tip("klaud/auto-two").await, Some(two.to_string()));

    // Elsewhere (the branch holds a commit): refused, untouched.
    let proof = k.prove(None, Some("klaud/auto-two"), None, None).await;
    let stale = k
        .forge
        .create_branch_with_commit(&proof, "klaud/auto-two", &base, &files, message)
        .await;
    assert!(
        matches!(stale, Err(ForgeError::NotFastForward(_))),
        "{stale:?}"
    );
    assert_eq!(tip("klaud/auto-two").await, Some(two.to_string()));

    // The answer is lost after GitHub ran both: ambiguous, sent once.
    lose_the_answer_to_the_next_post(&sim, "/graphql").await;
    let proof = k.prove(None, Some("klaud/auto-three"), None, None).await;
    let before = sim.state().request_log().await.len();
    let lost = k
        .forge
        .create_branch_with_commit(&proof, "klaud/auto-three", &base, &files, message)
        .await;
    assert!(matches!(lost, Err(ForgeError::Ambiguous(_))), "{lost:?}");
    assert_eq!(sent_since(before).await, ["POST /graphql"], "sent once");
    assert!(tip("klaud/auto-three").await.is_some(), "GitHub applied it");
}
