//! The lifecycle [`Journal`] over the sled [`Store`]: candidate records in
//! the `candidates` tree, flushed to disk before `save` returns — so the
//! engine's "record the intent, then act" holds across crashes. The store
//! stays a cache of GitHub: deleting it only costs a rebuild.

use async_trait::async_trait;
use klaud_lifecycle::dataset::ProducerDatasets;
use klaud_lifecycle::engine::{CandidateRecord, Journal, JournalError, RetryRequest};
use klaud_lifecycle::playbook::sick::{RunFailures, SickWindow};
use serde::{Deserialize, Serialize};

use crate::{Record, Store, trees};

impl Record for CandidateRecord {
    const VERSION: u32 = 1;
}

impl Record for RetryRequest {
    const VERSION: u32 = 1;
}

impl Record for ProducerDatasets {
    const VERSION: u32 = 1;
}

impl Record for RunFailures {
    const VERSION: u32 = 1;
}

impl Record for SickWindow {
    const VERSION: u32 = 1;
}

/// Where the runs of the last sick-nodes table are kept (the cache tree:
/// losing it leaves reports judging a node by their own run until the next
/// pass).
const SICK_WINDOW_KEY: &str = "sick-window";

/// Where what a producer run's AgentX artifacts said is kept (the cache
/// tree: losing it costs one more download of that run's artifacts).
fn producer_key(run: u64) -> String {
    format!("producer-datasets:{run}")
}

/// Where what a completed run attempt's failed jobs said is kept (the
/// cache tree: losing it costs reading that run's jobs and logs again).
fn run_failures_key(run: u64, attempt: u64) -> String {
    format!("run-failures:{run}:{attempt}")
}

/// Where a family's retry request is kept (the cache tree: losing it only
/// costs the cooldown).
fn retry_key(family: &str) -> String {
    format!("retry:{family}")
}

/// This instance's identity, kept in the store.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Instance {
    id: uuid::Uuid,
}

impl Record for Instance {
    const VERSION: u32 = 1;
}

const INSTANCE_TREE: &str = "instance";

/// Candidate records in the local store.
#[derive(Debug, Clone)]
pub struct StoreJournal {
    store: Store,
}

impl StoreJournal {
    /// A journal over `store`.
    pub fn new(store: Store) -> Self {
        Self { store }
    }

    /// The store (for its cache).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The retry request of `family` (see [`Journal::retry_request`]),
    /// read without waiting: the store answers from memory.
    pub fn retry_request_now(&self, family: &str) -> Result<Option<RetryRequest>, JournalError> {
        self.store
            .get(trees::CACHE, &retry_key(family))
            .map_err(|e| JournalError::new(format!("read the retry request of {family}"), e))
    }

    /// Whether the store already names an instance (a store made just now
    /// does not).
    pub fn has_instance_id(&self) -> Result<bool, JournalError> {
        Ok(self
            .store
            .get::<Instance>(INSTANCE_TREE, "id")
            .map_err(|e| JournalError::new("read the instance id", e))?
            .is_some())
    }

    /// This instance's id: made once and kept in the store, so a restart
    /// recognises its own claims. A deleted store makes a new instance whose
    /// old claims are recovered once their leases expire.
    pub async fn instance_id(&self) -> Result<uuid::Uuid, JournalError> {
        if let Some(i) = self
            .store
            .get::<Instance>(INSTANCE_TREE, "id")
            .map_err(|e| JournalError::new("read the instance id", e))?
        {
            return Ok(i.id);
        }
        let id = uuid::Uuid::new_v4();
        self.store
            .put(INSTANCE_TREE, "id", &Instance { id })
            .map_err(|e| JournalError::new(format!("keep the new instance id {id}"), e))?;
        self.store
            .flush()
            .await
            .map_err(|e| JournalError::new(format!("flush the new instance id {id}"), e))?;
        Ok(id)
    }
}

#[async_trait]
impl Journal for StoreJournal {
    async fn save(&self, record: &CandidateRecord) -> Result<(), JournalError> {
        self.store
            .put(trees::CANDIDATES, record.candidate.as_str(), record)
            .map_err(|e| JournalError::new(format!("save candidate {}", record.candidate), e))?;
        self.store
            .flush()
            .await
            .map_err(|e| JournalError::new(format!("flush candidate {}", record.candidate), e))
    }

    async fn load(&self, candidate: &str) -> Result<Option<CandidateRecord>, JournalError> {
        self.store
            .get(trees::CANDIDATES, candidate)
            .map_err(|e| JournalError::new(format!("load candidate {candidate}"), e))
    }

    async fn list(&self) -> Result<Vec<CandidateRecord>, JournalError> {
        Ok(self
            .store
            .list::<CandidateRecord>(trees::CANDIDATES)
            .map_err(|e| JournalError::new("list the candidates", e))?
            .into_iter()
            .map(|(_, r)| r)
            .collect())
    }

    async fn retry_request(&self, family: &str) -> Result<Option<RetryRequest>, JournalError> {
        self.retry_request_now(family)
    }

    async fn record_retry_request(
        &self,
        family: &str,
        request: &RetryRequest,
    ) -> Result<(), JournalError> {
        self.store
            .put(trees::CACHE, &retry_key(family), request)
            .map_err(|e| JournalError::new(format!("save the retry request of {family}"), e))?;
        self.store
            .flush()
            .await
            .map_err(|e| JournalError::new(format!("flush the retry request of {family}"), e))
    }

    async fn producer_datasets(&self, run: u64) -> Result<Option<ProducerDatasets>, JournalError> {
        self.store
            .get(trees::CACHE, &producer_key(run))
            .map_err(|e| JournalError::new(format!("read the datasets of producer run {run}"), e))
    }

    async fn record_producer_datasets(
        &self,
        run: u64,
        datasets: &ProducerDatasets,
    ) -> Result<(), JournalError> {
        self.store
            .put(trees::CACHE, &producer_key(run), datasets)
            .map_err(|e| {
                JournalError::new(format!("keep the datasets of producer run {run}"), e)
            })?;
        self.store
            .flush()
            .await
            .map_err(|e| JournalError::new(format!("flush the datasets of producer run {run}"), e))
    }

    async fn run_failures(
        &self,
        run: u64,
        attempt: u64,
    ) -> Result<Option<RunFailures>, JournalError> {
        self.store
            .get(trees::CACHE, &run_failures_key(run, attempt))
            .map_err(|e| JournalError::new(format!("read the failed jobs of run {run}"), e))
    }

    async fn record_run_failures(&self, failures: &RunFailures) -> Result<(), JournalError> {
        let run = failures.run;
        self.store
            .put(
                trees::CACHE,
                &run_failures_key(run, failures.attempt),
                failures,
            )
            .map_err(|e| JournalError::new(format!("keep the failed jobs of run {run}"), e))
    }
    async fn sick_window(&self) -> Result<Option<SickWindow>, JournalError> {
        self.store
            .get(trees::CACHE, SICK_WINDOW_KEY)
            .map_err(|e| JournalError::new("read the runs of the last sick-nodes table", e))
    }

    async fn record_sick_window(&self, window: &SickWindow) -> Result<(), JournalError> {
        self.store
            .put(trees::CACHE, SICK_WINDOW_KEY, window)
            .map_err(|e| JournalError::new("keep the runs of the sick-nodes table", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_producer_runs_datasets_are_kept_across_a_reopen() {
        let dir = tempfile::tempdir().expect("dir");
        let kept = ProducerDatasets::Unknown {
            reason: "producer run 5 is gone".into(),
        };
        {
            let j = StoreJournal::new(Store::open(dir.path()).expect("store"));
            assert_eq!(j.producer_datasets(5).await.expect("read"), None);
            j.record_producer_datasets(5, &kept).await.expect("kept");
        }
        let j = StoreJournal::new(Store::open(dir.path()).expect("store"));
        assert_eq!(j.producer_datasets(5).await.expect("read"), Some(kept));
        assert_eq!(j.producer_datasets(6).await.expect("read"), None);
    }

    #[tokio::test]
    async fn a_runs_failures_are_kept_by_run_and_attempt_across_a_reopen() {
        let dir = tempfile::tempdir().expect("dir");
        let kept = RunFailures {
            run: 9,
            attempt: 2,
            family: "0123456789abcdef".into(),
            family_key: Some("demo-fp8-h200-trt".into()),
            at: chrono::DateTime::parse_from_rfc3339("2026-12-01T10:00:00Z")
                .expect("time")
                .into(),
            failures: Vec::new(),
            scoped: true,
        };
        {
            let j = StoreJournal::new(Store::open(dir.path()).expect("store"));
            assert_eq!(j.run_failures(9, 2).await.expect("read"), None);
            assert_eq!(j.sick_window().await.expect("read"), None);
            j.record_sick_window(&SickWindow {
                runs: vec![kept.clone()],
            })
            .await
            .expect("kept");
            j.record_run_failures(&kept).await.expect("kept");
            j.store().flush().await.expect("flush");
        }
        let j = StoreJournal::new(Store::open(dir.path()).expect("store"));
        assert_eq!(
            j.run_failures(9, 2).await.expect("read"),
            Some(kept.clone())
        );
        assert_eq!(j.run_failures(9, 1).await.expect("read"), None);
        assert_eq!(
            j.sick_window().await.expect("read"),
            Some(SickWindow { runs: vec![kept] })
        );
    }

    #[tokio::test]
    async fn instance_id_is_kept() {
        let store = Store::temporary().expect("store");
        let j = StoreJournal::new(store);
        let a = j.instance_id().await.expect("id");
        assert_eq!(j.instance_id().await.expect("id"), a);
        let none = j.load("0123456789abcdef-0123456789abcdef").await;
        assert!(none.expect("load").is_none());
        assert!(j.list().await.expect("list").is_empty());
    }

    /// A candidate record exactly as the code before typed intents wrote it
    /// (field order, spelling and all).
    fn old_record(candidate: &str, intent: &str) -> String {
        format!(
            concat!(
                r#"{{"candidate":"{c}","family":"configs/nvidia-master.yaml:k","key":"k","#,
                r#""old_image":"lmsysorg/sglang:v0.4.1","image":"lmsysorg/sglang:v0.4.2","#,
                r#""revision":null,"clock":null,"not_release_reason":null,"upstream":null,"#,
                r#""owner_run":42,"base_branch":"main","base_sha":"{z}","branch":"klaud/auto-{c}","#,
                r#""step":"repair","claim":null,"head":"{z}","pending_commit":null,"pull":7,"#,
                r#""pull_url":"https://github.com/o/r/pull/7","frozen":null,"#,
                r#""attempts":[{{"kind":{{"kind":"initial","budget":2}},"head":"{z}","#,
                r#""dispatched_at":"2026-01-01T00:00:00Z","run":{{"id":9,"attempt":1,"#,
                r#""url":"https://github.com/o/r/actions/runs/9"}},"status":"failed","#,
                r#""infra":false,"reported":true}}],"repairs":0,"sweep_requested_at":null,"#,
                r#""sweep":null,"ending":null,"intent":{i},"updated_at":"2026-01-01T00:00:00Z"}}"#
            ),
            c = candidate,
            z = "0".repeat(40),
            i = serde_json::to_string(intent).expect("json"),
        )
    }

    #[tokio::test]
    async fn records_written_before_typed_intents_load_and_save_unchanged() {
        use klaud_lifecycle::engine::Intent;
        let store = Store::temporary().expect("store");
        let cases = [
            (
                "d92e15065c55779d-0123456789abcdef",
                "repair 1",
                Intent::Repair(1),
            ),
            (
                "d92e15065c55779d-1123456789abcdef",
                "cancel stuck run 9",
                Intent::CancelStuckRun(9),
            ),
            (
                "d92e15065c55779d-2123456789abcdef",
                "claim: experiment-state = Some(\"won\")",
                Intent::ClaimField {
                    field: "experiment-state".into(),
                    value: Some("won".into()),
                },
            ),
            (
                "d92e15065c55779d-3123456789abcdef",
                "tune the flux capacitor",
                Intent::Other("tune the flux capacitor".into()),
            ),
        ];
        for (candidate, text, _) in &cases {
            let data = old_record(candidate, text);
            let bytes = format!(r#"{{"v":1,"at":0,"data":{data}}}"#);
            store
                .raw_tree(trees::CANDIDATES)
                .expect("tree")
                .insert(candidate.as_bytes(), bytes.as_bytes())
                .expect("insert");
        }
        let j = StoreJournal::new(store);
        for (candidate, text, intent) in cases {
            let rec = j.load(candidate).await.expect("loads").expect("present");
            assert_eq!(rec.intent.as_ref(), Some(&intent), "{text}");
            // Written back, the record is the bytes the old code wrote.
            let again = serde_json::to_string(&rec).expect("encodes");
            assert_eq!(again, old_record(candidate, text));
        }
    }
}
