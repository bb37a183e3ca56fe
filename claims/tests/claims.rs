//! Claim semantics over the in-memory ref store: exclusivity, CAS renewals,
//! owner-only release, fenced takeover, old-helper claims and fail-closed
//! listing.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, Utc};
use klaud_claims::memory::{Fault, Op};
use klaud_claims::{
    Acquire, CandidateId, ClaimBook, ClaimCandidate, ClaimError, ClaimParseError, ClaimRecord,
    Claimant, CommitSha, FamilyId, Lost, ManualClock, MemoryRefStore, RefStore, RefStoreError,
    RefTip, Release, Renew, RunCompletion, RunCompletionError, Takeover, TakeoverRefusal,
    ensure_plannable,
};
use uuid::Uuid;

const FAMILY: &str = "configs/nvidia-master.yaml:dsr1-fp4-b200-sglang";
const FAMILY_ID: &str = "d92e15065c55779d";
const CANDIDATE: &str = "d92e15065c55779d-0123456789abcdef";
const RUN: u64 = 35570778795;

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-29T20:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

fn family() -> FamilyId {
    FamilyId::new(FAMILY_ID).unwrap()
}

fn candidate(base: &str) -> ClaimCandidate {
    ClaimCandidate::new(
        CommitSha::parse(base).unwrap(),
        FAMILY,
        CandidateId::new(CANDIDATE).unwrap(),
    )
}

fn lease() -> TimeDelta {
    TimeDelta::minutes(10)
}

fn claimant() -> Claimant {
    Claimant::new(Uuid::new_v4())
}

fn won(result: Acquire) -> klaud_claims::HeldClaim {
    match result {
        Acquire::Won(held) => held,
        Acquire::Occupied(entry) => panic!("occupied by {entry:?}"),
    }
}

/// Answers `run_completed` from a fixed value; `Err(text)` fails with
/// `text` as the underlying error.
struct Runs(Result<Option<bool>, &'static str>);

#[async_trait]
impl RunCompletion for Runs {
    async fn run_completed(&self, _run_id: u64) -> Result<Option<bool>, RunCompletionError> {
        self.0
            .map_err(|text| RunCompletionError::new(std::io::Error::other(text)))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claim_acquire_eight_concurrent_acquirers_exactly_one_wins() {
    for round in 0..100 {
        let store = Arc::new(MemoryRefStore::new());
        let clock = Arc::new(ManualClock::new(t0()));
        let base = store.seed_commit("base");
        let barrier = Arc::new(tokio::sync::Barrier::new(8));
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (store, clock, barrier, base) =
                (store.clone(), clock.clone(), barrier.clone(), base.clone());
            tasks.push(tokio::spawn(async move {
                let me = claimant();
                let book = ClaimBook::new(store.as_ref(), clock.as_ref(), me.clone());
                barrier.wait().await;
                let result = book
                    .acquire(&family(), vec![candidate(&base)], &base, RUN, lease())
                    .await;
                (me.owner, result)
            }));
        }
        let mut winners = Vec::new();
        let mut holders_seen = Vec::new();
        for task in tasks {
            match task.await.unwrap() {
                (owner, Ok(Acquire::Won(held))) => winners.push((owner, held)),
                (_, Ok(Acquire::Occupied(entry))) => {
                    holders_seen.push(entry.record.expect("winner's record parses").owner)
                }
                (_, Err(e)) => panic!("round {round}: {e}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}");
        let (owner, held) = &winners[0];
        assert_eq!(holders_seen.len(), 7);
        assert!(
            holders_seen.iter().all(|h| *h == Some(*owner)),
            "round {round}"
        );
        assert_eq!(
            store.ref_sha(&family().claim_ref()).as_deref(),
            Some(held.sha.as_str())
        );
    }
}

#[tokio::test]
async fn claim_acquire_writes_record_on_base_tree_and_parent() {
    let store = MemoryRefStore::new();
    let clock = ManualClock::new(t0());
    let base = store.seed_commit("base");
    let me = claimant();
    let book = ClaimBook::new(&store, &clock, me.clone());
    let held = won(book
        .acquire(&family(), vec![candidate(&base)], &base, RUN, lease())
        .await
        .unwrap());
    let tip = store
        .read_ref("refs/heads/klaud/claim-d92e15065c55779d")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(tip.parents, vec![base.clone()]);
    assert_eq!(tip.tree, store.commit_tree(&base).await.unwrap());
    assert_eq!(
        tip.message,
        format!(
            r#"{{"candidates":[{{"base":"{base}","family":"{FAMILY}","id":"{CANDIDATE}"}}],"fence":1,"holder":"klaud/{}","lease-until":"2026-11-29T20:10:00Z","owner":"{}","run-id":{RUN}}}"#,
            env!("CARGO_PKG_VERSION"),
            me.owner
        )
    );
    assert_eq!(ClaimRecord::parse(&tip.message).unwrap(), held.record);
}

#[tokio::test]
async fn claim_acquire_rejects_invalid_requests_without_writing() {
    let store = MemoryRefStore::new();
    let clock = ManualClock::new(t0());
    let base = store.seed_commit("base");
    let book = ClaimBook::new(&store, &clock, claimant());
    let other_family = FamilyId::new("b3fff31b6f9a6956").unwrap();
    let e = book
        .acquire(&other_family, vec![candidate(&base)], &base, RUN, lease())
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("does not belong to family b3fff31b6f9a6956"),
        "{e}"
    );
    let e = book
        .acquire(&family(), vec![], &base, RUN, lease())
        .await
        .unwrap_err();
    assert!(matches!(e, ClaimError::InvalidRequest(_)), "{e}");
    let e = book
        .acquire(
            &family(),
            vec![candidate(&base)],
            &base,
            RUN,
            TimeDelta::zero(),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, ClaimError::InvalidRequest(_)), "{e}");
    let e = book
        .acquire(
            &family(),
            vec![candidate(&base)],
            &base,
            RUN,
            TimeDelta::days(30),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, ClaimError::InvalidRequest(_)), "{e}");
    assert!(store.ref_names().is_empty());
}

#[tokio::test]
async fn claim_acquire_survives_a_lost_create_response() {
    let store = MemoryRefStore::new();
    let clock = ManualClock::new(t0());
    let base = store.seed_commit("base");
    let book = ClaimBook::new(&store, &clock, claimant());
    store.inject(
        Op::CreateRef,
        Fault::FailAfterWrite("502 Bad Gateway".into()),
    );
    let held = won(book
        .acquire(&family(), vec![candidate(&base)], &base, RUN, lease())
        .await
        .unwrap());
    assert_eq!(store.ref_sha(&family().claim_ref()), Some(held.sha));

    let store = MemoryRefStore::new();
    let base = store.seed_commit("base");
    let book = ClaimBook::new(&store, &clock, claimant());
    store.inject(Op::CreateRef, Fault::Fail("502 Bad Gateway".into()));
    let e = book
        .acquire(&family(), vec![candidate(&base)], &base, RUN, lease())
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            ClaimError::Store {
                source: RefStoreError::Other(_),
                ..
            }
        ),
        "{e}"
    );
    assert!(store.ref_names().is_empty());
}

#[tokio::test]
async fn claim_renew_extends_lease_by_fast_forward() {
    let store = MemoryRefStore::new();
    let clock = ManualClock::new(t0());
    let base = store.seed_commit("base");
    let book = ClaimBook::new(&store, &clock, claimant());
    let held = won(book
        .acquire(&family(), vec![candidate(&base)], &base, RUN, lease())
        .await
        .unwrap());
    clock.advance(TimeDelta::minutes(5));
    let Renew::Renewed(renewed) = book.renew(&held, lease()).await.unwrap() else {
        panic!("lost")
    };
    assert_eq!(
        renewed.record.lease_until.unwrap(),
        t0() + TimeDelta::minutes(15)
    );
    assert_eq!(renewed.record.fence, held.record.fence);
    let tip = store.read_ref(&held.ref_name).await.unwrap().unwrap();
    assert_eq!(tip.sha, renewed.sha);
    assert_eq!(tip.parents, vec![held.sha.clone()]);

    store.inject(Op::FastForwardRef, Fault::FailAfterWrite("502".into()));
    let Renew::Renewed(again) = book.renew(&renewed, lease()).await.unwrap() else {
        panic!("lost")
    };
    assert_eq!(store.ref_sha(&held.ref_name), Some(again.sha));
}

type Hook = Box<dyn FnOnce(&MemoryRefStore) + Send>;

/// Lets a test move the ref between a renewer's read and its write.
struct Interposer {
    inner: MemoryRefStore,
    before_fast_forward: Mutex<Option<Hook>>,
}

#[async_trait]
impl RefStore for Interposer {
    async fn read_ref(&self, name: &str) -> Result<Option<RefTip>, RefStoreError> {
        self.inner.read_ref(name).await
    }
    async fn list_refs(&self, prefix: &str) -> Result<Vec<RefTip>, RefStoreError> {
        self.inner.list_refs(prefix).await
    }
    async fn create_commit(
        &self,
        message: &str,
        tree: &str,
        parents: &[String],
    ) -> Result<String, RefStoreError> {
        self.inner.create_commit(message, tree, parents).await
    }
    async fn create_ref(&self, name: &str, sha: &str) -> Result<(), RefStoreError> {
        self.inner.create_ref(name, sha).await
    }
    async fn fast_forward_ref(&self, name: &str, sha: &str) -> Result<(), RefStoreError> {
        let hook = self.before_fast_forward.lock().unwrap().take();
        if let Some(hook) = hook {
            hook(&self.inner);
        }
        self.inner.fast_forward_ref(name, sha).await
    }
    async fn delete_ref(&self, name: &str) -> Result<(), RefStoreError> {
        self.inner.delete_ref(name).await
    }
    async fn commit_tree(&self, sha: &str) -> Result<String, RefStoreError> {
        self.inner.commit_tree(sha).await
    }
}

#[tokio::test]
async fn claim_renew_loses_cleanly_to_a_concurrent_renew() {
    let store = Interposer {
        inner: MemoryRefStore::new(),
        before_fast_forward: Mutex::new(None),
    };
    let clock = ManualClock::new(t0());
    let base = store.inner.seed_commit("base");
    let book = ClaimBook::new(&store, &clock, claimant());
    let held = won(book
        .acquire(&family(), vec![candidate(&base)], &base, RUN, lease())
        .await
        .unwrap());

    // Another renewer lands between our read and our fast-forward.
    let (name, parent, message) = (
        held.ref_name.clone(),
        held.sha.clone(),
        held.record.encode(),
    );
    let rival = Arc::new(Mutex::new(None));
    let rival_sha = rival.clone();
    *store.before_fast_forward.lock().unwrap() = Some(Box::new(move |inner: &MemoryRefStore| {
        *rival_sha.lock().unwrap() = inner.plant(&name, &message, &parent);
    }));
    let outcome = book.renew(&held, lease()).await.unwrap();
    assert_eq!(outcome, Renew::Lost(Lost::Raced));
    let rival = rival.lock().unwrap().clone().expect("rival commit planted");
    assert_eq!(
        store.inner.ref_sha(&held.ref_name),
        Some(rival.clone()),
        "the rival's renewal stands"
    );

    // A renewer with a stale view is told the ref moved, and writes nothing.
    let commits_before = store
        .inner
        .calls()
        .iter()
        .filter(|op| **op == Op::CreateCommit)
        .count();
    match book.renew(&held, lease()).await.unwrap() {
        Renew::Lost(Lost::Moved(entry)) => assert_eq!(entry.tip.sha, rival),
        other => panic!("{other:?}"),
    }
    let commits_after = store
        .inner
        .calls()
        .iter()
        .filter(|op| **op == Op::CreateCommit)
        .count();
    assert_eq!(commits_before, commits_after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claim_renew_two_concurrent_renewals_exactly_one_lands() {
    for _ in 0..50 {
        let store = Arc::new(MemoryRefStore::new());
        let clock = Arc::new(ManualClock::new(t0()));
        let base = store.seed_commit("base");
        let me = claimant();
        let held = {
            let book = ClaimBook::new(store.as_ref(), clock.as_ref(), me.clone());
            won(book
                .acquire(&family(), vec![candidate(&base)], &base, RUN, lease())
                .await
                .unwrap())
        };
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let tasks: Vec<_> = (0..2)
            .map(|_| {
                let (store, clock, barrier, me, held) = (
                    store.clone(),
                    clock.clone(),
                    barrier.clone(),
                    me.clone(),
                    held.clone(),
                );
                tokio::spawn(async move {
                    let book = ClaimBook::new(store.as_ref(), clock.as_ref(), me);
                    barrier.wait().await;
                    book.renew(&held, lease()).await
                })
            })
            .collect();
        let mut renewed = Vec::new();
        for task in tasks {
            match task.await.unwrap().unwrap() {
                Renew::Renewed(h) => renewed.push(h),
                Renew::Lost(Lost::Raced | Lost::Moved(_)) => {}
                Renew::Lost(Lost::Gone) => panic!("ref vanished"),
            }
        }
        assert_eq!(renewed.len(), 1);
        assert_eq!(store.ref_sha(&held.ref_name), Some(renewed[0].sha.clone()));
    }
}

#[tokio::test]
async fn claim_release_by_non_owner_is_refused() {
    let store = MemoryRefStore::new();
    let clock = ManualClock::new(t0());
    let base = store.seed_commit("base");
    let owner = ClaimBook::new(&store, &clock, claimant());
    let held = won(owner
        .acquire(&family(), vec![candidate(&base)], &base, RUN, lease())
        .await
        .unwrap());

    let stranger = claimant();
    let other = ClaimBook::new(&store, &clock, stranger.clone());
    let guess = ClaimRecord {
        owner: Some(stranger.owner),
        ..held.record.clone()
    };
    let e = other
        .release_expected(&held.ref_name, &guess)
        .await
        .unwrap_err();
    let message = e.to_string();
    assert!(matches!(e, ClaimError::NotOwner { .. }));
    assert!(
        message.contains(&format!(
            "owner expected {}, found {}",
            stranger.owner,
            held.record.owner.unwrap()
        )),
        "{message}"
    );

    let wrong_run = ClaimRecord {
        run_id: RUN + 1,
        ..held.record.clone()
    };
    let e = owner
        .release_expected(&held.ref_name, &wrong_run)
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("run-id expected {}, found {RUN}", RUN + 1)),
        "{e}"
    );

    let mut wrong_candidates = held.record.clone();
    wrong_candidates.candidates[0].id =
        CandidateId::new("d92e15065c55779d-fedcba9876543210").unwrap();
    let e = owner
        .release_expected(&held.ref_name, &wrong_candidates)
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("candidates expected [d92e15065c55779d-fedcba9876543210]"),
        "{e}"
    );
    assert!(
        store.ref_sha(&held.ref_name).is_some(),
        "refused releases delete nothing"
    );

    assert_eq!(owner.release(&held).await.unwrap(), Release::Released);
    assert_eq!(store.ref_sha(&held.ref_name), None);
    assert_eq!(owner.release(&held).await.unwrap(), Release::AlreadyGone);
}

#[tokio::test]
async fn claim_takeover_requires_expired_lease_and_raises_fence() {
    let store = MemoryRefStore::new();
    let clock = ManualClock::new(t0());
    let base = store.seed_commit("base");
    let first = ClaimBook::new(&store, &clock, claimant());
    let held = won(first
        .acquire(&family(), vec![candidate(&base)], &base, RUN, lease())
        .await
        .unwrap());
    let rescuer = ClaimBook::new(&store, &clock, claimant());
    let runs = Runs(Ok(Some(false)));

    clock.advance(TimeDelta::minutes(5));
    let refused = rescuer
        .takeover(&family(), RUN + 1, lease(), &runs)
        .await
        .unwrap();
    assert_eq!(
        refused,
        Takeover::Refused(TakeoverRefusal::LeaseActive {
            until: t0() + TimeDelta::minutes(10)
        })
    );
    assert_eq!(
        store.ref_sha(&held.ref_name).as_deref(),
        Some(held.sha.as_str())
    );

    clock.advance(TimeDelta::minutes(5));
    let Takeover::Took {
        held: taken,
        previous,
    } = rescuer
        .takeover(&family(), RUN + 1, lease(), &runs)
        .await
        .unwrap()
    else {
        panic!("takeover refused after expiry")
    };
    assert_eq!(*previous, held.record);
    assert_eq!(taken.record.fence, Some(2));
    assert_eq!(taken.record.owner, Some(rescuer.claimant().owner));
    assert_eq!(taken.record.run_id, RUN + 1);
    assert_eq!(taken.record.candidates, held.record.candidates);
    let tip = store.read_ref(&held.ref_name).await.unwrap().unwrap();
    assert_eq!(
        (tip.sha.clone(), tip.parents.clone()),
        (taken.sha.clone(), vec![held.sha.clone()])
    );

    // The old holder is fenced out: its renew and release both fail.
    assert!(matches!(
        first.renew(&held, lease()).await.unwrap(),
        Renew::Lost(Lost::Moved(_))
    ));
    let e = first.release(&held).await.unwrap_err();
    assert!(e.to_string().contains("fence expected 1, found 2"), "{e}");
    assert_eq!(rescuer.release(&taken).await.unwrap(), Release::Released);
    assert_eq!(
        rescuer
            .takeover(&family(), RUN, lease(), &runs)
            .await
            .unwrap(),
        Takeover::Vacant
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claim_takeover_concurrent_takeovers_exactly_one_wins() {
    for _ in 0..30 {
        let store = Arc::new(MemoryRefStore::new());
        let clock = Arc::new(ManualClock::new(t0()));
        let base = store.seed_commit("base");
        {
            let book = ClaimBook::new(store.as_ref(), clock.as_ref(), claimant());
            won(book
                .acquire(&family(), vec![candidate(&base)], &base, RUN, lease())
                .await
                .unwrap());
        }
        clock.advance(TimeDelta::hours(1));
        let barrier = Arc::new(tokio::sync::Barrier::new(8));
        let tasks: Vec<_> = (0..8u64)
            .map(|i| {
                let (store, clock, barrier) = (store.clone(), clock.clone(), barrier.clone());
                tokio::spawn(async move {
                    let book = ClaimBook::new(store.as_ref(), clock.as_ref(), claimant());
                    barrier.wait().await;
                    book.takeover(&family(), 100 + i, lease(), &Runs(Ok(None)))
                        .await
                })
            })
            .collect();
        let mut took = Vec::new();
        for task in tasks {
            match task.await.unwrap().unwrap() {
                Takeover::Took { held, .. } => took.push(held),
                Takeover::Lost(_) | Takeover::Refused(TakeoverRefusal::LeaseActive { .. }) => {}
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(took.len(), 1);
        assert_eq!(took[0].record.fence, Some(2));
        assert_eq!(
            store.ref_sha(&family().claim_ref()),
            Some(took[0].sha.clone())
        );
    }
}

fn old_helper_message(base: &str) -> String {
    format!(
        r#"{{"candidates":[{{"base":"{base}","family":"{FAMILY}","id":"{CANDIDATE}"}}],"run-id":{RUN}}}"#
    )
}

fn sha40(store: &MemoryRefStore) -> String {
    // The helper writes real 40-hex shas; the memory store's are sha-shaped.
    let sha = store.seed_commit("base");
    assert_eq!(sha.len(), 40);
    sha
}

#[tokio::test]
async fn claim_old_helper_claims_are_taken_over_only_after_their_run_completed() {
    let store = MemoryRefStore::new();
    let clock = ManualClock::new(t0());
    let base = sha40(&store);
    let name = family().claim_ref();
    let planted = store
        .plant(&name, &old_helper_message(&base), &base)
        .unwrap();
    let book = ClaimBook::new(&store, &clock, claimant());

    let listed = book.list_claims().await.unwrap();
    assert_eq!(listed.len(), 1);
    let record = listed[0].record.clone().unwrap();
    assert_eq!(
        (record.owner, record.lease_until, record.fence),
        (None, None, None)
    );
    assert_eq!(listed[0].family(), Some(family()));
    assert!(ensure_plannable(&listed).is_ok());

    let far_future = TimeDelta::days(365);
    clock.advance(far_future);
    assert_eq!(
        book.takeover(&family(), 7, lease(), &Runs(Ok(Some(false))))
            .await
            .unwrap(),
        Takeover::Refused(TakeoverRefusal::RunActive { run_id: RUN })
    );
    assert_eq!(
        book.takeover(&family(), 7, lease(), &Runs(Ok(None)))
            .await
            .unwrap(),
        Takeover::Refused(TakeoverRefusal::RunCompletionUnknown { run_id: RUN })
    );
    let e = book
        .takeover(&family(), 7, lease(), &Runs(Err("HTTP 503")))
        .await
        .unwrap_err();
    assert!(e.to_string().contains(&format!("run {RUN}")), "{e}");
    let cause = std::error::Error::source(&e).and_then(std::error::Error::source);
    assert_eq!(cause.map(ToString::to_string).as_deref(), Some("HTTP 503"));
    assert_eq!(store.ref_sha(&name), Some(planted.clone()));

    let Takeover::Took { held, previous } = book
        .takeover(&family(), 7, lease(), &Runs(Ok(Some(true))))
        .await
        .unwrap()
    else {
        panic!("takeover refused")
    };
    assert_eq!(previous.run_id, RUN);
    assert_eq!(held.record.fence, Some(1));
    assert_eq!(held.record.run_id, 7);
    assert_eq!(held.record.candidates, record.candidates);
    assert_eq!(
        store.read_ref(&name).await.unwrap().unwrap().parents,
        vec![planted]
    );
}

#[tokio::test]
async fn claim_unparsable_claim_stops_planning_and_is_never_touched() {
    let store = MemoryRefStore::new();
    let clock = ManualClock::new(t0());
    let base = store.seed_commit("base");
    let name = family().claim_ref();
    let planted = store
        .plant(&name, "{\"candidates\":[],\"run-id\":1}", &base)
        .unwrap();
    store
        .plant(
            "refs/heads/klaud/claim-not-a-family",
            &old_helper_message(&sha40(&store)),
            &base,
        )
        .unwrap();
    let book = ClaimBook::new(&store, &clock, claimant());
    let ok_family = FamilyId::new("b3fff31b6f9a6956").unwrap();
    let ok_candidate = ClaimCandidate::new(
        CommitSha::parse(&base).unwrap(),
        "x",
        CandidateId::new("b3fff31b6f9a6956-0000000000000000").unwrap(),
    );
    won(book
        .acquire(&ok_family, vec![ok_candidate], &base, RUN, lease())
        .await
        .unwrap());

    let listed = book.list_claims().await.unwrap();
    assert_eq!(listed.len(), 3);
    let blocked = ensure_plannable(&listed).unwrap_err();
    assert_eq!(blocked.unparsable.len(), 2);
    let message = blocked.to_string();
    assert!(
        message.starts_with("planning stopped: 2 claim ref(s) do not parse"),
        "{message}"
    );
    assert!(
        message.contains(&name) && message.contains("claim-not-a-family"),
        "{message}"
    );
    assert!(
        listed
            .iter()
            .any(|e| matches!(e.record, Err(ClaimParseError::BadRefName(_))))
    );

    clock.advance(TimeDelta::days(30));
    let e = book
        .takeover(&family(), 9, lease(), &Runs(Ok(Some(true))))
        .await
        .unwrap_err();
    assert!(matches!(e, ClaimError::Unparsable { .. }), "{e}");
    let fake = ClaimRecord::parse(&old_helper_message(&sha40(&store))).unwrap();
    let e = book.release_expected(&name, &fake).await.unwrap_err();
    assert!(e.to_string().contains("left untouched"), "{e}");
    match book
        .acquire(&family(), vec![candidate(&base)], &base, RUN, lease())
        .await
        .unwrap()
    {
        Acquire::Occupied(entry) => assert!(entry.record.is_err()),
        Acquire::Won(_) => panic!("overwrote an unparsable claim"),
    }
    assert_eq!(store.ref_sha(&name), Some(planted));
}

/// A record whose candidate belongs to another family (its id's first 16
/// hex differ from the claim ref's family id) is read as malformed: it
/// stops planning like a record that does not parse, and is never
/// taken over or overwritten.
#[tokio::test]
async fn claim_naming_another_familys_candidate_is_malformed_and_never_touched() {
    let store = MemoryRefStore::new();
    let clock = ManualClock::new(t0());
    let base = sha40(&store);
    let name = family().claim_ref();
    let foreign = format!(
        r#"{{"candidates":[{{"base":"{base}","family":"{FAMILY}","id":"b3fff31b6f9a6956-0123456789abcdef"}}],"run-id":{RUN}}}"#
    );
    assert!(
        ClaimRecord::parse(&foreign).is_ok(),
        "the record itself parses"
    );
    let planted = store.plant(&name, &foreign, &base).unwrap();
    let book = ClaimBook::new(&store, &clock, claimant());
    let listed = book.list_claims().await.unwrap();
    let [entry] = &listed[..] else {
        panic!("{listed:?}");
    };
    let Err(ClaimParseError::ForeignCandidate {
        candidate: named,
        found,
        family: claimed,
    }) = &entry.record
    else {
        panic!("{:?}", entry.record);
    };
    assert_eq!(named, "b3fff31b6f9a6956-0123456789abcdef");
    assert_eq!(found, "b3fff31b6f9a6956");
    assert_eq!(claimed, FAMILY_ID);
    let blocked = ensure_plannable(&listed).unwrap_err();
    assert_eq!(blocked.unparsable.len(), 1);
    assert!(
        blocked
            .to_string()
            .contains("b3fff31b6f9a6956-0123456789abcdef"),
        "{blocked}"
    );
    clock.advance(TimeDelta::days(30));
    let e = book
        .takeover(&family(), 9, lease(), &Runs(Ok(Some(true))))
        .await
        .unwrap_err();
    assert!(matches!(e, ClaimError::Unparsable { .. }), "{e}");
    match book
        .acquire(&family(), vec![candidate(&base)], &base, RUN, lease())
        .await
        .unwrap()
    {
        Acquire::Occupied(entry) => assert!(entry.record.is_err()),
        Acquire::Won(_) => panic!("overwrote a malformed claim"),
    }
    assert_eq!(store.ref_sha(&name), Some(planted));
}

#[tokio::test]
async fn claim_recovery_lease_is_exclusive_and_owner_released() {
    let store = MemoryRefStore::new();
    let clock = ManualClock::new(t0());
    let base = store.seed_commit("base");
    let a = ClaimBook::new(&store, &clock, claimant());
    let b = ClaimBook::new(&store, &clock, claimant());
    let held = won(a
        .acquire_recovery_lease(RUN, &candidate(&base), &base, 11, lease())
        .await
        .unwrap());
    assert_eq!(
        held.ref_name,
        format!("refs/heads/klaud/recovery-{RUN}-{CANDIDATE}")
    );
    match b
        .acquire_recovery_lease(RUN, &candidate(&base), &base, 12, lease())
        .await
        .unwrap()
    {
        Acquire::Occupied(entry) => assert_eq!(entry.record.unwrap().run_id, 11),
        Acquire::Won(_) => panic!("two recovery leases"),
    }
    let id = CandidateId::new(CANDIDATE).unwrap();
    assert!(matches!(
        b.takeover_recovery_lease(RUN, &id, 12, lease(), &Runs(Ok(Some(true))))
            .await
            .unwrap(),
        Takeover::Refused(TakeoverRefusal::LeaseActive { .. })
    ));
    assert!(matches!(
        b.release(&held).await,
        Err(ClaimError::NotOwner { .. })
    ));
    assert_eq!(a.release(&held).await.unwrap(), Release::Released);
    // Recovery leases are not claims: listing claims ignores them.
    assert!(a.list_claims().await.unwrap().is_empty());
}

#[tokio::test]
async fn claim_acquire_refuses_a_record_it_could_not_read_back() {
    let store = MemoryRefStore::new();
    let clock = ManualClock::new(t0());
    let base = store.seed_commit("base");
    let book = ClaimBook::new(&store, &clock, claimant());
    // A base that is no sha cannot be built any more; an empty family is
    // still a record that would not read back.
    let bad = ClaimCandidate::new(
        CommitSha::parse(&base).unwrap(),
        "",
        CandidateId::new(CANDIDATE).unwrap(),
    );
    let e = book
        .acquire(&family(), vec![bad], &base, RUN, lease())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("would not parse"), "{e}");
    assert!(e.to_string().contains("candidates[0].family"), "{e}");
    assert!(store.ref_names().is_empty());
    assert!(!store.calls().contains(&Op::CreateCommit));
}

#[tokio::test]
async fn claim_takeover_keeps_fields_it_does_not_know() {
    let store = MemoryRefStore::new();
    let clock = ManualClock::new(t0());
    let base = sha40(&store);
    let name = family().claim_ref();
    let message = format!(
        r#"{{"candidates":[{{"base":"{base}","family":"{FAMILY}","id":"{CANDIDATE}","pr":3010}}],"fence":4,"future":{{"b":2,"a":1}},"lease-until":"2026-11-29T19:00:00Z","owner":"0192f0a4-7d1c-7c3e-9b1a-2f4e5d6c7b8a","run-id":{RUN}}}"#
    );
    store.plant(&name, &message, &base).unwrap();
    let book = ClaimBook::new(&store, &clock, claimant());
    let Takeover::Took { held, .. } = book
        .takeover(&family(), 8, lease(), &Runs(Ok(None)))
        .await
        .unwrap()
    else {
        panic!("expired claim not taken over")
    };
    assert_eq!(held.record.fence, Some(5));
    let written = store.read_ref(&name).await.unwrap().unwrap().message;
    assert!(written.contains(r#""future":{"a":1,"b":2}"#), "{written}");
    assert!(written.contains(r#""pr":3010"#), "{written}");
}

#[tokio::test]
async fn claim_adopt_recognises_only_our_own_claims() {
    let store = MemoryRefStore::new();
    let clock = ManualClock::new(t0());
    let base = store.seed_commit("base");
    let me = ClaimBook::new(&store, &clock, claimant());
    let other = ClaimBook::new(&store, &clock, claimant());
    let held = won(me
        .acquire(&family(), vec![candidate(&base)], &base, RUN, lease())
        .await
        .unwrap());
    let entry = me.inspect(&family()).await.unwrap().unwrap();
    assert_eq!(me.adopt(&entry), Some(held.clone()));
    assert_eq!(other.adopt(&entry), None);
    let Renew::Renewed(_) = me.renew(&me.adopt(&entry).unwrap(), lease()).await.unwrap() else {
        panic!("adopted claim could not be renewed")
    };
}

#[tokio::test]
async fn claim_recovery_leases_are_listed_with_parse_errors() {
    let store = MemoryRefStore::new();
    let clock = ManualClock::new(t0());
    let base = store.seed_commit("base");
    let book = ClaimBook::new(&store, &clock, claimant());
    won(book
        .acquire_recovery_lease(RUN, &candidate(&base), &base, 11, lease())
        .await
        .unwrap());
    store
        .plant("refs/heads/klaud/recovery-oops", "{}", &base)
        .unwrap();
    let leases = book.list_recovery_leases().await.unwrap();
    assert_eq!(leases.len(), 2);
    assert!(
        leases
            .iter()
            .any(|e| e.record.as_ref().is_ok_and(|r| r.run_id == 11))
    );
    assert!(
        leases
            .iter()
            .any(|e| matches!(e.record, Err(ClaimParseError::BadRefName(_))))
    );
}

#[tokio::test]
async fn claim_force_takeover_ignores_a_live_lease_but_still_fences_the_holder() {
    let store = MemoryRefStore::new();
    let clock = ManualClock::new(t0());
    let base = store.seed_commit("base");
    let holder = ClaimBook::new(&store, &clock, claimant());
    let held = won(holder
        .acquire(&family(), vec![candidate(&base)], &base, RUN, lease())
        .await
        .unwrap());
    let maintainer = ClaimBook::new(&store, &clock, claimant());
    let Takeover::Took {
        held: taken,
        previous,
    } = maintainer
        .force_takeover(&family(), RUN + 7, lease())
        .await
        .unwrap()
    else {
        panic!("a forced takeover is never refused")
    };
    assert_eq!(*previous, held.record);
    assert_eq!(taken.record.fence, Some(2));
    assert_eq!(taken.record.owner, Some(maintainer.claimant().owner));
    // The live holder learns it lost the claim on its next renew.
    assert!(matches!(
        holder.renew(&held, lease()).await.unwrap(),
        Renew::Lost(Lost::Moved(_))
    ));
    assert_eq!(maintainer.release(&taken).await.unwrap(), Release::Released);
    assert_eq!(
        maintainer
            .force_takeover(&family(), RUN, lease())
            .await
            .unwrap(),
        Takeover::Vacant
    );
}

#[tokio::test]
async fn claim_force_delete_deletes_only_the_claim_commit_it_was_shown() {
    let store = MemoryRefStore::new();
    let clock = ManualClock::new(t0());
    let base = store.seed_commit("base");
    let name = family().claim_ref();
    store.plant(&name, "not a record", &base).unwrap();
    let book = ClaimBook::new(&store, &clock, claimant());
    let shown = store.read_ref(&name).await.unwrap().unwrap();

    // Moved since it was shown: nothing is deleted.
    let moved = store.plant(&name, "still not a record", &base).unwrap();
    let e = book.force_delete(&shown).await.unwrap_err();
    assert!(
        matches!(&e, ClaimError::Moved { expected, found, .. } if *expected == shown.sha && *found == moved),
        "{e}"
    );
    assert_eq!(store.ref_sha(&name), Some(moved));

    // The commit shown is deleted, once.
    let shown = store.read_ref(&name).await.unwrap().unwrap();
    assert_eq!(book.force_delete(&shown).await.unwrap(), Release::Released);
    assert_eq!(store.ref_sha(&name), None);
    assert_eq!(
        book.force_delete(&shown).await.unwrap(),
        Release::AlreadyGone
    );

    // Only claim refs.
    store.force_ref("refs/heads/main", &base);
    let main = store.read_ref("refs/heads/main").await.unwrap().unwrap();
    let e = book.force_delete(&main).await.unwrap_err();
    assert!(matches!(e, ClaimError::InvalidRequest(_)), "{e}");
    assert_eq!(store.ref_sha("refs/heads/main"), Some(base));
}
