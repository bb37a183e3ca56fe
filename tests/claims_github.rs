//! Claims over the real GitHub code path: `ClaimBook` on the octocrab
//! `Github`, against the GitHub simulator over loopback.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{TimeDelta, TimeZone, Utc};
use klaud_claims::{
    Acquire, CandidateId, ClaimBook, ClaimCandidate, ClaimError, ClaimRecord, Claimant, FamilyId,
    Lost, ManualClock, RefStore, Release, Renew, SystemClock, Takeover, TakeoverRefusal,
    ensure_plannable,
};
use klaud_github::{Credential, ForgeConfig, ForgeRunCompletion, Github, RetryPolicy, Secret};
use klaud_planner::identity;
use klaud_sandbox::github::{Fault, FaultAction, GithubSim, Permission};
use serde_json::json;
use uuid::Uuid;

use crate::support::GithubOnly;

const REPO: &str = "sandbox/benchmarks";
const BOT: &str = "Klaud-Cold";
const CONTENDERS: usize = 8;
const ROUNDS: usize = 100;

fn token(i: usize) -> String {
    format!("bot-token-{i}")
}

/// A simulator with the bot (one unlimited token per contender) and a
/// maintainer, and a `main` with one master file.
async fn sim() -> GithubSim {
    let mut sim = GithubOnly::new(REPO)
        .user(BOT, Some("Klaud Cold"), Some(Permission::Write))
        .user("maintainer", None, Some(Permission::Maintain));
    for i in 0..CONTENDERS {
        sim = sim.token(BOT, &token(i), Some(u64::MAX));
    }
    let sim = sim
        .files(
            "maintainer",
            "seed",
            &[(
                "configs/nvidia-master.yaml",
                b"dsr1-fp4-b200-sglang:\n  image: lmsysorg/sglang:v0.5.16-cu130\n",
            )],
        )
        .start()
        .await;
    // A load test of the race itself: a hundred rounds of eight acquirers
    // write far past GitHub's content-creation limit within a minute, which
    // would only make the rounds wait out its pauses.
    sim.state().set_content_limits(None, None).await;
    sim
}

async fn forge(sim: &GithubSim, i: usize) -> Github {
    Github::connect(ForgeConfig {
        api_url: sim.url(),
        repo: REPO.into(),
        bot_login: BOT.into(),
        credential: Credential::Token(Secret::new(token(i))),
        retry: RetryPolicy {
            max_attempts: 4,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(100),
            max_wait: Duration::from_secs(10),
        },
    })
    .await
    .unwrap()
}

async fn main_sha(f: &Github) -> String {
    f.get_ref("refs/heads/main").await.unwrap().unwrap()
}

struct Family {
    name: String,
    id: FamilyId,
}

fn family(key: &str) -> Family {
    let name = format!("configs/nvidia-master.yaml:{key}");
    let id = FamilyId::new(&identity::family_id(&name)).unwrap();
    Family { name, id }
}

fn candidate(f: &Family, base: &str, image: &str) -> ClaimCandidate {
    let id = CandidateId::new(&identity::candidate_id(f.id.as_str(), image)).unwrap();
    ClaimCandidate::new(base.parse().expect("a sha"), f.name.clone(), id)
}

fn claimant() -> Claimant {
    Claimant::new(Uuid::new_v4())
}

fn t0() -> chrono::DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 29, 20, 0, 0).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_concurrent_acquirers_of_one_family_exactly_one_wins_in_every_round() {
    let sim = sim().await;
    let mut forges = Vec::new();
    for i in 0..CONTENDERS {
        forges.push(std::sync::Arc::new(forge(&sim, i).await));
    }
    let base = main_sha(&forges[0]).await;
    for round in 0..ROUNDS {
        let fam = family(&format!("race-{round}"));
        let mut tasks = Vec::new();
        for (i, f) in forges.iter().enumerate() {
            let f = f.clone();
            let base = base.clone();
            let name = fam.name.clone();
            let id = fam.id.clone();
            tasks.push(tokio::spawn(async move {
                let owner = Uuid::new_v4();
                let clock = SystemClock;
                let book = ClaimBook::new(&*f, &clock, Claimant::new(owner));
                let fam = Family { name, id };
                let c = candidate(&fam, &base, &format!("docker.io/x/y:{i}"));
                let got = book
                    .acquire(
                        &fam.id,
                        vec![c],
                        &base,
                        1000 + i as u64,
                        TimeDelta::hours(1),
                    )
                    .await;
                (owner, got)
            }));
        }
        let mut winners = Vec::new();
        let mut holders = Vec::new();
        for task in tasks {
            let (owner, got) = task.await.unwrap();
            match got.unwrap() {
                Acquire::Won(held) => winners.push((owner, held)),
                Acquire::Occupied(entry) => {
                    holders.push(entry.record.unwrap().owner.unwrap());
                }
            }
        }
        assert_eq!(
            winners.len(),
            1,
            "round {round}: exactly one acquirer must win"
        );
        assert_eq!(holders.len(), CONTENDERS - 1, "round {round}");
        let (winner, held) = &winners[0];
        assert_eq!(held.record.fence, Some(1));
        assert!(
            holders.iter().all(|h| h == winner),
            "round {round}: every loser must see the winner as holder"
        );
        let tip = sim.state().ref_sha(REPO, &fam.id.claim_ref()).await;
        assert_eq!(tip.as_deref(), Some(held.sha.as_str()), "round {round}");
    }
    let clock = SystemClock;
    let all = ClaimBook::new(&*forges[0], &clock, claimant())
        .list_claims()
        .await
        .unwrap();
    assert_eq!(all.len(), ROUNDS);
    assert!(ensure_plannable(&all).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renew_loses_cleanly_to_a_concurrent_renew() {
    let sim = sim().await;
    let (fa, fb) = (forge(&sim, 0).await, forge(&sim, 1).await);
    let base = main_sha(&fa).await;
    let clock = ManualClock::new(t0());
    let me = claimant();
    for round in 0..20 {
        let fam = family(&format!("renew-{round}"));
        let (a, b) = (
            ClaimBook::new(&fa, &clock, me.clone()),
            ClaimBook::new(&fb, &clock, me.clone()),
        );
        let held = match a
            .acquire(
                &fam.id,
                vec![candidate(&fam, &base, "docker.io/x/y:1")],
                &base,
                7,
                TimeDelta::minutes(10),
            )
            .await
            .unwrap()
        {
            Acquire::Won(h) => h,
            other => panic!("{other:?}"),
        };
        // Two copies of the same holder (a zombie and its replacement)
        // renew at once with different leases, so their commits differ.
        let (ra, rb) = tokio::join!(
            a.renew(&held, TimeDelta::minutes(20)),
            b.renew(&held, TimeDelta::minutes(30))
        );
        let results = [ra.unwrap(), rb.unwrap()];
        let renewed: Vec<_> = results
            .iter()
            .filter_map(|r| match r {
                Renew::Renewed(h) => Some(h),
                Renew::Lost(_) => None,
            })
            .collect();
        assert_eq!(renewed.len(), 1, "round {round}: {results:?}");
        assert!(
            results
                .iter()
                .any(|r| matches!(r, Renew::Lost(Lost::Raced) | Renew::Lost(Lost::Moved(_)))),
            "round {round}: the loser must report the claim lost: {results:?}"
        );
        let tip = RefStore::read_ref(&fa, &fam.id.claim_ref())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(tip.sha, renewed[0].sha, "round {round}");
        assert_eq!(ClaimRecord::parse(&tip.message).unwrap(), renewed[0].record);
        // A renew from the stale copy now sees the move and stops.
        match a.renew(&held, TimeDelta::minutes(5)).await.unwrap() {
            Renew::Lost(Lost::Moved(_)) => {}
            other => panic!("round {round}: stale renew must lose, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_release_by_a_non_owner_is_refused_and_changes_nothing() {
    let sim = sim().await;
    let f = forge(&sim, 0).await;
    let base = main_sha(&f).await;
    let clock = SystemClock;
    let fam = family("release");
    let owner = ClaimBook::new(&f, &clock, claimant());
    let held = match owner
        .acquire(
            &fam.id,
            vec![candidate(&fam, &base, "docker.io/x/y:1")],
            &base,
            7,
            TimeDelta::hours(1),
        )
        .await
        .unwrap()
    {
        Acquire::Won(h) => h,
        other => panic!("{other:?}"),
    };
    let stranger = ClaimBook::new(&f, &clock, claimant());
    match stranger.release(&held).await {
        Err(ClaimError::NotOwner { mismatch, .. }) => {
            assert!(mismatch.contains("owner expected"), "{mismatch}");
        }
        other => panic!("expected NotOwner, got {other:?}"),
    }
    assert_eq!(
        sim.state().ref_sha(REPO, &fam.id.claim_ref()).await,
        Some(held.sha.clone())
    );
    assert_eq!(owner.release(&held).await.unwrap(), Release::Released);
    assert_eq!(sim.state().ref_sha(REPO, &fam.id.claim_ref()).await, None);
    assert_eq!(owner.release(&held).await.unwrap(), Release::AlreadyGone);
}

#[tokio::test]
async fn takeover_is_refused_before_the_lease_expires_and_raises_the_fence_after() {
    let sim = sim().await;
    let f = forge(&sim, 0).await;
    let base = main_sha(&f).await;
    let clock = ManualClock::new(t0());
    let runs = ForgeRunCompletion::new(&f);
    let fam = family("takeover");
    let first = ClaimBook::new(&f, &clock, claimant());
    let held = match first
        .acquire(
            &fam.id,
            vec![candidate(&fam, &base, "docker.io/x/y:1")],
            &base,
            7,
            TimeDelta::minutes(10),
        )
        .await
        .unwrap()
    {
        Acquire::Won(h) => h,
        other => panic!("{other:?}"),
    };
    let second = ClaimBook::new(&f, &clock, claimant());
    clock.advance(TimeDelta::minutes(5));
    match second
        .takeover(&fam.id, 8, TimeDelta::minutes(10), &runs)
        .await
        .unwrap()
    {
        Takeover::Refused(TakeoverRefusal::LeaseActive { until }) => {
            assert_eq!(until, t0() + TimeDelta::minutes(10));
        }
        other => panic!("expected LeaseActive, got {other:?}"),
    }
    assert_eq!(
        sim.state().ref_sha(REPO, &fam.id.claim_ref()).await,
        Some(held.sha.clone())
    );

    clock.advance(TimeDelta::minutes(6));
    let took = match second
        .takeover(&fam.id, 8, TimeDelta::minutes(10), &runs)
        .await
        .unwrap()
    {
        Takeover::Took { held, previous } => {
            assert_eq!(previous.owner, held_owner(&first));
            assert_eq!(previous.fence, Some(1));
            held
        }
        other => panic!("expected Took, got {other:?}"),
    };
    assert_eq!(took.record.fence, Some(2));
    assert_eq!(took.record.run_id, 8);
    assert_eq!(took.record.owner, Some(second.claimant().owner));
    assert_eq!(took.record.candidates, held.record.candidates);
    let tip = RefStore::read_ref(&f, &fam.id.claim_ref())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(tip.sha, took.sha);
    assert_eq!(
        tip.parents,
        vec![held.sha.clone()],
        "takeover is a fast-forward"
    );

    // The old holder finds out on its next renew and cannot release.
    assert!(matches!(
        first.renew(&held, TimeDelta::minutes(10)).await.unwrap(),
        Renew::Lost(Lost::Moved(_))
    ));
    assert!(matches!(
        first.release(&held).await,
        Err(ClaimError::NotOwner { .. })
    ));
}

fn held_owner(book: &ClaimBook<'_>) -> Option<Uuid> {
    Some(book.claimant().owner)
}

/// Plants a claim the way the old helper left it: a commit with exactly
/// `message` on `refs/heads/klaud/claim-<id>`, written through the
/// simulator's state (not through Klaud's code).
async fn plant(sim: &GithubSim, fam: &Family, message: &str) -> String {
    let branch = fam
        .id
        .claim_ref()
        .trim_start_matches("refs/heads/")
        .to_owned();
    sim.state()
        .push_commit(REPO, &branch, "maintainer", BTreeMap::new(), message)
        .await
        .unwrap()
}

#[tokio::test]
async fn an_old_helper_claim_parses_and_is_taken_over_only_after_its_run_completed() {
    let sim = sim().await;
    let f = forge(&sim, 0).await;
    let base = main_sha(&f).await;
    // The old helper's run, dispatched with the bot's token.
    let run = crate::support::Person::new(&sim.url(), &token(0), REPO)
        .dispatch(
            "e2e-tests.yml",
            "main",
            json!({"ref": base, "klaud-run": "true"}),
        )
        .await;
    sim.state()
        .set_run_status(REPO, run, "in_progress", None)
        .await
        .unwrap();

    let fam = family("dsr1-fp4-b200-sglang");
    assert_eq!(fam.id.as_str(), "d92e15065c55779d");
    let cand = candidate(&fam, &base, "docker.io/lmsysorg/sglang:v0.5.17-cu130");
    // Byte for byte what `python -m infx.klaud` writes.
    let old = format!(
        r#"{{"candidates":[{{"base":"{base}","family":"{}","id":"{}"}}],"run-id":{run}}}"#,
        fam.name, cand.id
    );
    let planted = plant(&sim, &fam, &old).await;

    let clock = ManualClock::new(t0());
    let runs = ForgeRunCompletion::new(&f);
    let book = ClaimBook::new(&f, &clock, claimant());
    let entry = book.inspect(&fam.id).await.unwrap().unwrap();
    assert_eq!(entry.tip.sha, planted);
    assert_eq!(entry.tip.message, old);
    let record = entry.record.clone().unwrap();
    assert_eq!(record.run_id, run);
    assert_eq!(record.owner, None);
    assert_eq!(record.lease_until, None);
    assert_eq!(record.fence, None);
    assert_eq!(record.candidates, vec![cand.clone()]);
    assert_eq!(
        record.encode(),
        old,
        "the old format round-trips byte for byte"
    );
    assert!(ensure_plannable(&book.list_claims().await.unwrap()).is_ok());

    // Its run is still going: no lease to expire, so no takeover, however late.
    clock.advance(TimeDelta::days(30));
    assert_eq!(
        book.takeover(&fam.id, 9, TimeDelta::minutes(10), &runs)
            .await
            .unwrap(),
        Takeover::Refused(TakeoverRefusal::RunActive { run_id: run })
    );
    assert_eq!(
        sim.state().ref_sha(REPO, &fam.id.claim_ref()).await,
        Some(planted.clone())
    );

    sim.state()
        .complete_run(REPO, run, "failure", BTreeMap::new())
        .await
        .unwrap();
    match book
        .takeover(&fam.id, 9, TimeDelta::minutes(10), &runs)
        .await
        .unwrap()
    {
        Takeover::Took { held, previous } => {
            assert_eq!(held.record.fence, Some(1), "absent fence reads as 0, +1");
            assert_eq!(held.record.candidates, vec![cand]);
            assert_eq!(previous.run_id, run);
            let tip = RefStore::read_ref(&f, &fam.id.claim_ref())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(tip.sha, held.sha);
            assert_eq!(tip.parents, vec![planted]);
        }
        other => panic!("expected Took, got {other:?}"),
    }
}

#[tokio::test]
async fn an_old_helper_claim_whose_run_cannot_be_found_is_not_taken_over() {
    let sim = sim().await;
    let f = forge(&sim, 0).await;
    let base = main_sha(&f).await;
    let fam = family("orphan");
    let cand = candidate(&fam, &base, "docker.io/x/y:1");
    let old = format!(
        r#"{{"candidates":[{{"base":"{base}","family":"{}","id":"{}"}}],"run-id":424242}}"#,
        fam.name, cand.id
    );
    let planted = plant(&sim, &fam, &old).await;
    let clock = ManualClock::new(t0());
    let book = ClaimBook::new(&f, &clock, claimant());
    assert_eq!(
        book.takeover(
            &fam.id,
            9,
            TimeDelta::minutes(10),
            &ForgeRunCompletion::new(&f)
        )
        .await
        .unwrap(),
        Takeover::Refused(TakeoverRefusal::RunCompletionUnknown { run_id: 424242 })
    );
    assert_eq!(
        sim.state().ref_sha(REPO, &fam.id.claim_ref()).await,
        Some(planted)
    );
}

#[tokio::test]
async fn an_unparsable_claim_blocks_planning_and_stays_in_place() {
    let sim = sim().await;
    let f = forge(&sim, 0).await;
    let base = main_sha(&f).await;
    let fam = family("broken");
    let planted = plant(&sim, &fam, "{\"candidates\": \"oops\", \"run-id\": 1}").await;
    let good = family("fine");
    let clock = ManualClock::new(t0());
    let book = ClaimBook::new(&f, &clock, claimant());
    assert!(matches!(
        book.acquire(
            &good.id,
            vec![candidate(&good, &base, "docker.io/x/y:1")],
            &base,
            7,
            TimeDelta::minutes(10)
        )
        .await
        .unwrap(),
        Acquire::Won(_)
    ));

    let entries = book.list_claims().await.unwrap();
    assert_eq!(entries.len(), 2);
    let blocked = ensure_plannable(&entries).unwrap_err();
    assert_eq!(blocked.unparsable.len(), 1);
    assert_eq!(blocked.unparsable[0].0, fam.id.claim_ref());
    let text = blocked.to_string();
    assert!(
        text.contains(&fam.id.claim_ref()) && text.contains("candidates"),
        "{text}"
    );

    // A ref under the claim prefix whose name is no family id blocks too,
    // however valid its record.
    let stray = "klaud/claim-not-a-family-id";
    let stray_sha = sim
        .state()
        .push_commit(
            REPO,
            stray,
            "maintainer",
            BTreeMap::new(),
            &entries
                .iter()
                .find(|e| e.record.is_ok())
                .unwrap()
                .tip
                .message,
        )
        .await
        .unwrap();
    let blocked = ensure_plannable(&book.list_claims().await.unwrap()).unwrap_err();
    let mut names: Vec<String> = blocked.unparsable.iter().map(|(n, _)| n.clone()).collect();
    names.sort();
    let mut want = vec![fam.id.claim_ref(), format!("refs/heads/{stray}")];
    want.sort();
    assert_eq!(names, want);
    assert_eq!(
        sim.state()
            .ref_sha(REPO, &format!("refs/heads/{stray}"))
            .await,
        Some(stray_sha)
    );

    // Nothing Klaud does on its own removes or overwrites it.
    match book
        .acquire(
            &fam.id,
            vec![candidate(&fam, &base, "docker.io/x/y:1")],
            &base,
            7,
            TimeDelta::minutes(10),
        )
        .await
        .unwrap()
    {
        Acquire::Occupied(entry) => assert!(entry.record.is_err()),
        other => panic!("expected Occupied, got {other:?}"),
    }
    clock.advance(TimeDelta::days(30));
    assert!(matches!(
        book.takeover(
            &fam.id,
            9,
            TimeDelta::minutes(10),
            &ForgeRunCompletion::new(&f)
        )
        .await,
        Err(ClaimError::Unparsable { .. })
    ));
    assert_eq!(
        sim.state().ref_sha(REPO, &fam.id.claim_ref()).await,
        Some(planted)
    );
}

async fn won(book: &ClaimBook<'_>, fam: &Family, base: &str) -> klaud_claims::HeldClaim {
    match book
        .acquire(
            &fam.id,
            vec![candidate(fam, base, "docker.io/x/y:1")],
            base,
            7,
            TimeDelta::minutes(10),
        )
        .await
        .unwrap()
    {
        Acquire::Won(h) => h,
        other => panic!("expected Won, got {other:?}"),
    }
}

#[tokio::test]
async fn a_lost_response_after_the_claim_ref_was_created_still_counts_as_won_once() {
    let sim = sim().await;
    let f = forge(&sim, 0).await;
    let base = main_sha(&f).await;
    for action in [
        FaultAction::AfterWriteStatus { status: 502 },
        FaultAction::AfterWriteDrop,
    ] {
        let fam = family(&format!("lost-{action:?}").replace(['{', '}', ' ', ':'], ""));
        sim.state()
            .add_fault(Fault {
                method: Some("POST".into()),
                path: "/repos/*/git/refs".into(),
                count: 1,
                action: action.clone(),
            })
            .await;
        let clock = SystemClock;
        let book = ClaimBook::new(&f, &clock, claimant());
        let before = sim.state().request_log().await.len();
        let held = won(&book, &fam, &base).await;
        let log = sim.state().request_log().await;
        let creates: Vec<u16> = log[before..]
            .iter()
            .filter(|e| e.method == "POST" && e.path.ends_with("/git/refs"))
            .map(|e| e.status)
            .collect();
        assert_eq!(
            creates.len(),
            1,
            "{action:?}: the create must not be sent twice"
        );
        if let FaultAction::AfterWriteStatus { status } = &action {
            assert_eq!(creates, vec![*status], "the fault must have hit the create");
        }
        assert_eq!(
            sim.state().ref_sha(REPO, &fam.id.claim_ref()).await,
            Some(held.sha.clone()),
            "{action:?}"
        );
        // A second instance still finds it occupied by the first.
        let other = ClaimBook::new(&f, &clock, claimant());
        match other
            .acquire(
                &fam.id,
                vec![candidate(&fam, &base, "docker.io/x/y:2")],
                &base,
                8,
                TimeDelta::minutes(10),
            )
            .await
            .unwrap()
        {
            Acquire::Occupied(entry) => {
                assert_eq!(entry.record.unwrap().owner, Some(book.claimant().owner));
            }
            other => panic!("{action:?}: expected Occupied, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_lost_response_after_a_renew_landed_still_counts_as_renewed() {
    let sim = sim().await;
    let f = forge(&sim, 0).await;
    let base = main_sha(&f).await;
    let clock = ManualClock::new(t0());
    let book = ClaimBook::new(&f, &clock, claimant());
    let fam = family("renew-lost");
    let held = won(&book, &fam, &base).await;
    sim.state()
        .add_fault(Fault {
            method: Some("PATCH".into()),
            path: "/repos/*/git/refs/*".into(),
            count: 1,
            action: FaultAction::AfterWriteStatus { status: 502 },
        })
        .await;
    match book.renew(&held, TimeDelta::minutes(20)).await.unwrap() {
        Renew::Renewed(renewed) => {
            assert_eq!(
                sim.state().ref_sha(REPO, &fam.id.claim_ref()).await,
                Some(renewed.sha)
            );
        }
        other => panic!("expected Renewed, got {other:?}"),
    }
}

#[tokio::test]
async fn an_unreadable_owner_run_fails_the_takeover_without_writing() {
    let sim = sim().await;
    let f = forge(&sim, 0).await;
    let base = main_sha(&f).await;
    let fam = family("run-unreadable");
    let cand = candidate(&fam, &base, "docker.io/x/y:1");
    let old = format!(
        r#"{{"candidates":[{{"base":"{base}","family":"{}","id":"{}"}}],"run-id":31337}}"#,
        fam.name, cand.id
    );
    let planted = plant(&sim, &fam, &old).await;
    sim.state()
        .add_fault(Fault {
            method: Some("GET".into()),
            path: "/repos/*/actions/runs/31337".into(),
            count: 100,
            action: FaultAction::Status {
                status: 503,
                retry_after: None,
                message: None,
            },
        })
        .await;
    let clock = ManualClock::new(t0());
    let book = ClaimBook::new(&f, &clock, claimant());
    match book
        .takeover(
            &fam.id,
            9,
            TimeDelta::minutes(10),
            &ForgeRunCompletion::new(&f),
        )
        .await
    {
        Err(ClaimError::RunCompletion { run_id, source }) => {
            assert_eq!(run_id, 31337);
            assert!(source.to_string().contains("503"), "{source}");
            let cause = std::error::Error::source(&source);
            assert!(
                cause.is_some_and(|c| c.downcast_ref::<klaud_github::GithubError>().is_some()),
                "the GitHub error is the source: {source:?}"
            );
        }
        other => panic!("expected a RunStatus error, got {other:?}"),
    }
    assert_eq!(
        sim.state().ref_sha(REPO, &fam.id.claim_ref()).await,
        Some(planted)
    );
}
