//! The lifecycle [`Journal`] over the sled [`Store`]: candidate records in
//! the `candidates` tree, flushed to disk before `save` returns — so the
//! engine's "record the intent, then act" holds across crashes. The store
//! stays a cache of GitHub: deleting it only costs a rebuild.

use async_trait::async_trait;
use klaud_lifecycle::engine::{CandidateRecord, Journal, JournalError, RetryRequest};
use serde::{Deserialize, Serialize};

use crate::{Record, Store, trees};

impl Record for CandidateRecord {
    const VERSION: u32 = 1;
}

impl Record for RetryRequest {
    const VERSION: u32 = 1;
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
            .map_err(|e| JournalError(e.to_string()))
    }

    /// Whether the store already names an instance (a store made just now
    /// does not).
    pub fn has_instance_id(&self) -> Result<bool, JournalError> {
        Ok(self
            .store
            .get::<Instance>(INSTANCE_TREE, "id")
            .map_err(|e| JournalError(e.to_string()))?
            .is_some())
    }

    /// This instance's id: made once and kept in the store, so a restart
    /// recognises its own claims. A deleted store makes a new instance whose
    /// old claims are recovered once their leases expire.
    pub async fn instance_id(&self) -> Result<uuid::Uuid, JournalError> {
        if let Some(i) = self
            .store
            .get::<Instance>(INSTANCE_TREE, "id")
            .map_err(|e| JournalError(e.to_string()))?
        {
            return Ok(i.id);
        }
        let id = uuid::Uuid::new_v4();
        self.store
            .put(INSTANCE_TREE, "id", &Instance { id })
            .map_err(|e| JournalError(e.to_string()))?;
        self.store
            .flush()
            .await
            .map_err(|e| JournalError(e.to_string()))?;
        Ok(id)
    }
}

#[async_trait]
impl Journal for StoreJournal {
    async fn save(&self, record: &CandidateRecord) -> Result<(), JournalError> {
        self.store
            .put(trees::CANDIDATES, &record.candidate, record)
            .map_err(|e| JournalError(e.to_string()))?;
        self.store
            .flush()
            .await
            .map_err(|e| JournalError(e.to_string()))
    }

    async fn load(&self, candidate: &str) -> Result<Option<CandidateRecord>, JournalError> {
        self.store
            .get(trees::CANDIDATES, candidate)
            .map_err(|e| JournalError(e.to_string()))
    }

    async fn list(&self) -> Result<Vec<CandidateRecord>, JournalError> {
        Ok(self
            .store
            .list::<CandidateRecord>(trees::CANDIDATES)
            .map_err(|e| JournalError(e.to_string()))?
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
            .map_err(|e| JournalError(e.to_string()))?;
        self.store
            .flush()
            .await
            .map_err(|e| JournalError(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn instance_id_is_kept() {
        let store = Store::temporary().expect("store");
        let j = StoreJournal::new(store);
        let a = j.instance_id().await.expect("id");
        assert_eq!(j.instance_id().await.expect("id"), a);
        assert_eq!(j.load("0123456789abcdef-0123456789abcdef").await, Ok(None));
        assert!(j.list().await.expect("list").is_empty());
    }
}
