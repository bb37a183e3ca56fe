//! The ownership check (see `klaud_lifecycle::engine::ownership`): a proof only when the claim, PR, branch
//! and run are all still Klaud's; otherwise a mismatch naming what differed,
//! what was expected and what was found.

use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{TimeDelta, TimeZone, Utc};
use klaud_claims::{
    Acquire, CandidateId, ClaimBook, ClaimCandidate, Claimant, HeldClaim, ManualClock,
    MemoryRefStore, PullNumber, RefStore,
};
use klaud_lifecycle::engine::ownership::check;
use klaud_lifecycle::engine::{
    ArtifactInfo, Comment, Expectation, Forge, ForgeError, MismatchKind, OwnershipError, Permitted,
    ProofError, Pull, PullState, Run, RunQuery, Write, Writes, Written, reply_permit,
};

const BOT: &str = "Klaud-Cold";
const CAND: &str = "d92e15065c55779d-0123456789abcdef";
const BRANCH: &str = "klaud/auto-d92e15065c55779d-0123456789abcdef";

struct Fake {
    refs: MemoryRefStore,
    /// The writes that reached the backend.
    sent: Mutex<Vec<&'static str>>,
    /// How many times the pull request was read.
    pull_reads: Mutex<usize>,
    pull: Mutex<Pull>,
    run: Mutex<Run>,
}

fn unused<T>() -> Result<T, ForgeError> {
    Err(ForgeError::Other("not used by the ownership check".into()))
}

#[async_trait]
impl Forge for Fake {
    fn repo(&self) -> String {
        "owner/bench".into()
    }
    fn bot_login(&self) -> String {
        BOT.into()
    }
    fn refs(&self) -> &dyn RefStore {
        &self.refs
    }
    async fn read_file(&self, _: &str, _: &str) -> Result<Option<Vec<u8>>, ForgeError> {
        unused()
    }
    async fn find_pull(&self, _: &str) -> Result<Option<Pull>, ForgeError> {
        unused()
    }
    async fn get_pull(&self, _: PullNumber) -> Result<Pull, ForgeError> {
        *self.pull_reads.lock().expect("reads") += 1;
        Ok(self.pull.lock().expect("pull").clone())
    }
    async fn closed_by(&self, _: PullNumber) -> Result<Option<String>, ForgeError> {
        unused()
    }
    async fn list_comments(&self, _: PullNumber) -> Result<Vec<Comment>, ForgeError> {
        unused()
    }
    async fn own_pulls_active_since(
        &self,
        _: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<PullNumber>, ForgeError> {
        unused()
    }
    async fn permission(
        &self,
        _: &str,
    ) -> Result<klaud_lifecycle::commands::Permission, ForgeError> {
        unused()
    }
    async fn list_runs(&self, _: &RunQuery) -> Result<Vec<Run>, ForgeError> {
        unused()
    }
    async fn get_run(&self, _: u64) -> Result<Run, ForgeError> {
        Ok(self.run.lock().expect("run").clone())
    }
    async fn list_artifacts(&self, _: u64) -> Result<Vec<ArtifactInfo>, ForgeError> {
        unused()
    }
    async fn download_artifact(&self, _: u64) -> Result<Vec<u8>, ForgeError> {
        unused()
    }
    async fn list_jobs(&self, _: u64) -> Result<Vec<klaud_lifecycle::engine::Job>, ForgeError> {
        unused()
    }
    async fn job_log(&self, _: u64, _: usize) -> Result<Vec<u8>, ForgeError> {
        unused()
    }
    async fn compare_commits(
        &self,
        _: &str,
        _: &str,
    ) -> Result<klaud_lifecycle::engine::forge::Comparison, ForgeError> {
        unused()
    }
    async fn write(&self, permitted: Permitted<'_>) -> Result<Written, ForgeError> {
        let write = *permitted.write();
        self.sent.lock().expect("sent").push(write.what());
        Ok(match write {
            Write::CreateComment { body, .. } | Write::Reply { body, .. } => {
                Written::Comment(Comment {
                    id: 1,
                    body: body.to_owned(),
                    author: Some(BOT.into()),
                    author_association: None,
                })
            }
            _ => Written::Done,
        })
    }
}

/// A forge where everything is Klaud's: the claim, PR #7, the branch at
/// `head` and run 99 titled `e2e Test - t`.
async fn world() -> (Fake, HeldClaim, String) {
    let refs = MemoryRefStore::new();
    let base = refs.seed_commit("base");
    let head = refs.seed_commit("Update\n\nKlaud-Candidate: x");
    refs.force_ref(&format!("refs/heads/{BRANCH}"), &head);
    let clock = ManualClock::new(Utc.with_ymd_and_hms(2026, 9, 1, 0, 0, 0).unwrap());
    let book = ClaimBook::new(&refs, &clock, Claimant::new(uuid::Uuid::from_u128(1)));
    let id = CandidateId::new(CAND).expect("id");
    let Acquire::Won(held) = book
        .acquire(
            &id.family(),
            vec![ClaimCandidate::new(
                base.parse().expect("a sha"),
                "configs/x-master.yaml:k",
                id.clone(),
            )],
            &base,
            42,
            TimeDelta::hours(1),
        )
        .await
        .expect("acquire")
    else {
        panic!("occupied");
    };
    let fake = Fake {
        refs,
        sent: Mutex::new(Vec::new()),
        pull_reads: Mutex::new(0),
        pull: Mutex::new(Pull {
            number: PullNumber::from(7),
            state: PullState::Open,
            draft: true,
            title: "t".into(),
            body: String::new(),
            head_ref: BRANCH.into(),
            head_sha: head.parse().expect("a sha"),
            head_repo: Some("owner/bench".into()),
            author: Some("klaud-cold".into()),
            labels: vec!["full-sweep-fail-fast".into()],
            html_url: String::new(),
            mergeable: None,
            node_id: None,
        }),
        run: Mutex::new(Run {
            id: 99,
            attempt: 1,
            title: "e2e Test - t".into(),
            event: "workflow_dispatch".into(),
            status: "in_progress".into(),
            conclusion: None,
            head_sha: head.parse().expect("a sha"),
            actor: Some(BOT.into()),
            created_at: None,
            html_url: String::new(),
            head_branch: None,
            head_repo: None,
            pull_requests: Vec::new(),
        }),
    };
    (fake, held, head)
}

fn all<'a>(held: &'a HeldClaim, head: &'a str) -> Expectation<'a> {
    Expectation {
        claim: held,
        branch: Some((BRANCH, head)),
        creates: None,
        pull: Some(PullNumber::from(7)),
        run: Some((99, "e2e Test - t")),
    }
}

async fn mismatch(fake: &Fake, expect: Expectation<'_>) -> (MismatchKind, String) {
    match check(fake, expect).await {
        Err(OwnershipError::Mismatch(m)) => (m.kind, m.to_string()),
        other => panic!("expected a mismatch, got {other:?}"),
    }
}

#[tokio::test]
async fn everything_ours_gives_a_proof_of_what_was_checked() {
    let (fake, held, head) = world().await;
    let proof = check(&fake, all(&held, &head)).await.expect("proof");
    assert_eq!(proof.head(), Some(head.as_str()));
    assert_eq!(proof.pull(), Some(PullNumber::from(7)));
    assert_eq!(proof.run(), Some(99));
    assert_eq!(proof.fence(), held.record.fence_or_zero());
}

#[tokio::test]
async fn handoff_label_is_a_handoff() {
    let (fake, held, head) = world().await;
    fake.pull
        .lock()
        .expect("pull")
        .labels
        .push("klaud-handoff".into());
    let (kind, msg) = mismatch(&fake, all(&held, &head)).await;
    assert_eq!(kind, MismatchKind::Handoff);
    assert!(
        msg.contains("labels of #7") && msg.contains("klaud-handoff"),
        "{msg}"
    );
}

#[tokio::test]
async fn foreign_commit_is_a_handoff_naming_both_heads() {
    let (fake, held, head) = world().await;
    let foreign = fake.refs.seed_commit("maintainer fix");
    fake.refs
        .force_ref(&format!("refs/heads/{BRANCH}"), &foreign);
    let (kind, msg) = mismatch(&fake, all(&held, &head)).await;
    assert_eq!(kind, MismatchKind::Handoff);
    assert!(msg.contains(&head) && msg.contains(&foreign), "{msg}");
}

#[tokio::test]
async fn other_author_fork_and_run_are_unexpected() {
    let (fake, held, head) = world().await;
    fake.pull.lock().expect("pull").author = Some("someone".into());
    let (kind, msg) = mismatch(&fake, all(&held, &head)).await;
    assert_eq!(kind, MismatchKind::Unexpected);
    assert!(
        msg.contains("author of #7") && msg.contains(BOT) && msg.contains("someone"),
        "{msg}"
    );

    let (fake, held, head) = world().await;
    fake.pull.lock().expect("pull").head_repo = Some("fork/bench".into());
    let (_, msg) = mismatch(&fake, all(&held, &head)).await;
    assert!(
        msg.contains("head repository") && msg.contains("fork/bench"),
        "{msg}"
    );

    let (fake, held, head) = world().await;
    fake.run.lock().expect("run").actor = Some("someone".into());
    let (_, msg) = mismatch(&fake, all(&held, &head)).await;
    assert!(msg.contains("actor of run 99"), "{msg}");

    let (fake, held, head) = world().await;
    fake.run.lock().expect("run").title = "e2e Test - other".into();
    let (_, msg) = mismatch(&fake, all(&held, &head)).await;
    assert!(
        msg.contains("title of run 99") && msg.contains("other"),
        "{msg}"
    );
}

#[tokio::test]
async fn a_claim_taken_or_deleted_is_unexpected() {
    let (fake, held, head) = world().await;
    let mut theirs = held.record.clone();
    theirs.owner = Some(uuid::Uuid::from_u128(2));
    theirs.fence = Some(theirs.fence_or_zero() + 1);
    fake.refs
        .plant(&held.ref_name, &theirs.encode(), &held.sha)
        .expect("plant");
    let (kind, msg) = mismatch(&fake, all(&held, &head)).await;
    assert_eq!(kind, MismatchKind::Unexpected);
    assert!(
        msg.contains("owner expected") && msg.contains("fence expected"),
        "{msg}"
    );

    let (fake, held, head) = world().await;
    fake.refs.delete_ref(&held.ref_name).await.expect("delete");
    let (_, msg) = mismatch(&fake, all(&held, &head)).await;
    assert!(msg.contains("deleted"), "{msg}");
}

#[tokio::test]
async fn a_proof_covers_only_what_it_checked() {
    let (fake, held, head) = world().await;
    let proof = check(&fake, all(&held, &head)).await.expect("proof");
    assert_eq!(proof.for_pull(PullNumber::from(7)), Ok(()));
    assert_eq!(proof.for_run(99), Ok(()));
    assert_eq!(proof.for_branch(BRANCH), Ok(()));
    assert_eq!(proof.for_commit(&head), Ok(()));
    assert_eq!(proof.for_dispatch(), Ok(()));

    let ProofError { proved, asked } = proof.for_pull(PullNumber::from(8)).expect_err("another PR");
    assert!(
        proved.contains("#7") && asked.contains("#8"),
        "{proved} / {asked}"
    );
    assert!(proof.for_run(100).is_err());
    assert!(proof.for_branch("klaud/auto-other").is_err());
    assert!(proof.for_commit("some-other-parent").is_err());

    // A claim-only proof (before the branch exists) may create only its
    // branch, and touches no PR or run.
    let expect = Expectation {
        claim: &held,
        branch: None,
        creates: Some(BRANCH),
        pull: None,
        run: None,
    };
    let proof = check(&fake, expect).await.expect("proof");
    assert_eq!(proof.for_branch(BRANCH), Ok(()));
    assert_eq!(proof.for_commit("any-base"), Ok(()));
    assert!(proof.for_branch("main").is_err());
    assert!(proof.for_pull(PullNumber::from(7)).is_err());
    assert!(proof.for_dispatch().is_err());
}

#[tokio::test]
async fn a_reply_permit_needs_a_pull_request_by_the_bot() {
    let (fake, _, _) = world().await;
    let permit = reply_permit(&fake, PullNumber::from(7), None)
        .await
        .expect("read")
        .expect("ours");
    assert_eq!(permit.pull(), PullNumber::from(7));
    // Handoff does not matter for a reply: the maintainer still gets one.
    fake.pull
        .lock()
        .expect("pull")
        .labels
        .push("klaud-handoff".into());
    assert!(
        reply_permit(&fake, PullNumber::from(7), None)
            .await
            .expect("read")
            .is_some()
    );
    fake.pull.lock().expect("pull").author = Some("someone".into());
    assert!(
        reply_permit(&fake, PullNumber::from(7), None)
            .await
            .expect("read")
            .is_none()
    );
}

#[tokio::test]
async fn a_reply_permit_from_a_known_author_reads_no_pull_request() {
    let (fake, _, _) = world().await;
    let reads = || *fake.pull_reads.lock().expect("reads");
    // What GitHub showed earlier stands even where a read would now answer
    // otherwise: a pull request's author never changes.
    fake.pull.lock().expect("pull").author = Some("someone".into());
    let permit = reply_permit(&fake, PullNumber::from(7), Some("klaud-cold"))
        .await
        .expect("no read")
        .expect("the bot's PR, whatever the case of its login");
    assert_eq!(permit.pull(), PullNumber::from(7));
    // A known author that is not the bot still gets no permit.
    assert!(
        reply_permit(&fake, PullNumber::from(7), Some("someone"))
            .await
            .expect("no read")
            .is_none()
    );
    assert_eq!(reads(), 0, "a known author needs no read");
    // Unknown: read, and the read's author decides.
    assert!(
        reply_permit(&fake, PullNumber::from(7), None)
            .await
            .expect("read")
            .is_none()
    );
    assert_eq!(reads(), 1);
}

#[tokio::test]
async fn a_write_reaches_the_backend_only_when_its_proof_covers_its_target() {
    let (fake, held, head) = world().await;
    let proof = check(&fake, all(&held, &head)).await.expect("proof");
    let sent = || fake.sent.lock().expect("sent").clone();

    let err = fake
        .create_comment(&proof, PullNumber::from(8), "hello")
        .await
        .expect_err("another PR");
    assert!(matches!(err, ForgeError::Proof(_)), "{err}");
    assert!(fake.cancel_run(&proof, 100).await.is_err());
    assert!(fake.delete_branch(&proof, "main").await.is_err());
    assert!(sent().is_empty(), "nothing sent: {:?}", sent());

    let posted = fake
        .create_comment(&proof, PullNumber::from(7), "hello")
        .await
        .expect("ours");
    assert_eq!(posted.body, "hello");
    fake.cancel_run(&proof, 99).await.expect("our run");
    assert_eq!(sent(), ["a comment", "a cancel"]);

    // A dispatch permit names the workflow, ref and inputs it allows.
    let inputs = serde_json::json!({"ref": head});
    let permitted = proof
        .permit(Write::Dispatch {
            workflow: "e2e-tests.yml",
            git_ref: "main",
            inputs: &inputs,
        })
        .expect("checked head and PR");
    match permitted.write() {
        Write::Dispatch {
            workflow, inputs, ..
        } => {
            assert_eq!(*workflow, "e2e-tests.yml");
            assert_eq!(inputs["ref"], head.as_str());
        }
        other => panic!("{other:?}"),
    }

    // A reply needs no proof, only the permit for its pull request.
    let permit = reply_permit(&fake, PullNumber::from(7), None)
        .await
        .expect("read")
        .expect("ours");
    fake.reply(&permit, "done").await.expect("reply");
    assert_eq!(sent().last(), Some(&"a reply"));
}
