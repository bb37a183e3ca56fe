use klaud_lifecycle::engine::{CandidateRecord, Journal as _};

use super::*;

#[tokio::test]
async fn a_kept_store_forgets_the_candidates_of_a_gone_sandbox_and_keeps_the_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path()).expect("store");
    let journal = StoreJournal::new(store.clone());
    let owner = journal.instance_id().await.expect("instance id");
    let record: CandidateRecord = serde_json::from_value(serde_json::json!({
        "candidate": "d92e15065c55779d-0123456789abcdef", "family": "configs/x-master.yaml:k", "key": "k",
        "old_image": "a:1", "image": "a:2", "owner_run": 1, "base_branch": "main",
        "base_sha": "0000000000000000000000000000000000000000", "branch": "klaud/auto-d92e15065c55779d-0123456789abcdef", "step": "smoke", "claim": null,
        "head": null, "pending_commit": null, "pull": 1, "pull_url": null,
        "frozen": null, "attempts": [], "repairs": 0, "sweep_requested_at": null,
        "sweep": null, "ending": null, "intent": null,
        "updated_at": "2026-01-01T00:00:00Z"
    }))
    .expect("record");
    journal.save(&record).await.expect("save");
    forget_gone_sandbox(&store, dir.path())
        .await
        .expect("forget");
    assert!(journal.list().await.expect("list").is_empty());
    assert_eq!(journal.instance_id().await.expect("instance id"), owner);
    // A second start has nothing to forget.
    forget_gone_sandbox(&store, dir.path())
        .await
        .expect("forget");
}
