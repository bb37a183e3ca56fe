//! The bounded event log behind the dashboard's "recent outcomes" and
//! "recent errors": append-only, keyed by UUID v7 (time-ordered, so key order
//! is time order), trimmed to the newest N entries on every append.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{Record, Store, StoreError, record, trees};

/// How many events the log keeps unless configured otherwise.
pub const DEFAULT_EVENT_LIMIT: usize = 1000;

/// What an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EventKind {
    /// A candidate reached its outcome.
    Outcome,
    /// Something failed and needs a human's eye.
    Error,
    /// Something odd that Klaud handled.
    Warning,
    /// Anything else worth showing (a wave ran, a claim was taken over).
    Info,
}

/// One entry of the event log. Never put secrets in `message`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// What kind of event.
    pub kind: EventKind,
    /// `owner/name` of the repository, when it concerns one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// Candidate id, when it concerns one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate: Option<String>,
    /// One line for a human.
    pub message: String,
    /// A PR or run URL to follow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

impl Event {
    /// An event with just a kind and a message.
    pub fn new(kind: EventKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            repository: None,
            candidate: None,
            message: message.into(),
            link: None,
        }
    }
}

impl Record for Event {
    const VERSION: u32 = 1;
}

/// An event as read back from the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoredEvent {
    /// Its key in the log (UUID v7).
    pub id: Uuid,
    /// When it was appended.
    pub at: DateTime<Utc>,
    /// The event.
    pub event: Event,
}

impl Store {
    /// Appends `event` to the log and drops the oldest entries beyond the
    /// configured limit. Returns the new entry's id. Like every write, it is
    /// durable after the next [`Store::flush`].
    pub fn append_event(&self, event: &Event) -> Result<Uuid, StoreError> {
        let tree = self.raw_tree(trees::EVENTS)?;
        let id = Uuid::now_v7();
        let key = id.to_string();
        let bytes = record::encode(trees::EVENTS, &key, event, super::now_millis())?;
        tree.insert(id.as_bytes(), bytes)
            .map_err(|source| self.backend("append event", trees::EVENTS, source))?;
        self.prune_events(self.event_limit)?;
        Ok(id)
    }

    /// The newest `limit` events, newest first. An entry that does not
    /// decode fails the call with its id, rather than vanishing.
    pub fn recent_events(&self, limit: usize) -> Result<Vec<StoredEvent>, StoreError> {
        let tree = self.raw_tree(trees::EVENTS)?;
        let mut out = Vec::new();
        for entry in tree.iter().rev().take(limit) {
            let (key, bytes) =
                entry.map_err(|source| self.backend("read events", trees::EVENTS, source))?;
            let key_text = display_event_key(&key);
            let id = Uuid::from_slice(&key).map_err(|_| StoreError::Decode {
                tree: trees::EVENTS.to_owned(),
                key: key_text.clone(),
                reason: "an event key must be a 16-byte UUID".to_owned(),
            })?;
            let (at_millis, event) = record::decode::<Event>(trees::EVENTS, &key_text, &bytes)?;
            let at = DateTime::<Utc>::from_timestamp_millis(at_millis).ok_or_else(|| {
                StoreError::Decode {
                    tree: trees::EVENTS.to_owned(),
                    key: key_text.clone(),
                    reason: format!("write time {at_millis} ms is out of range"),
                }
            })?;
            out.push(StoredEvent { id, at, event });
        }
        Ok(out)
    }

    /// Keeps only the newest `keep` events; returns how many were removed.
    pub fn prune_events(&self, keep: usize) -> Result<usize, StoreError> {
        let tree = self.raw_tree(trees::EVENTS)?;
        let oldest_kept_or_beyond = tree
            .iter()
            .keys()
            .rev()
            .nth(keep)
            .transpose()
            .map_err(|source| self.backend("prune events", trees::EVENTS, source))?;
        let Some(newest_to_drop) = oldest_kept_or_beyond else {
            return Ok(0);
        };
        let doomed = tree
            .range(..=newest_to_drop)
            .keys()
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| self.backend("prune events", trees::EVENTS, source))?;
        let mut removed = 0;
        for key in doomed {
            if tree
                .remove(key)
                .map_err(|source| self.backend("prune events", trees::EVENTS, source))?
                .is_some()
            {
                removed += 1;
            }
        }
        Ok(removed)
    }
}

/// An event key as text for messages: the UUID, or hex when it is not one.
pub(crate) fn display_event_key(key: &[u8]) -> String {
    match Uuid::from_slice(key) {
        Ok(id) => id.to_string(),
        Err(_) => format!("0x{}", hex::encode(key)),
    }
}
