//! Klaud's local store: a crash-safe journal and cache on sled 0.34.7.
//!
//! Several Klaud instances coordinate only through claim refs on GitHub; this
//! store is private to one process and can always be deleted — Klaud then
//! rebuilds its picture from GitHub (claims, branches, PRs, markers, runs).
//! So it holds nothing that GitHub does not also know, except the intent
//! journal that tells a restarted Klaud what it may have been doing.
//!
//! Everything about sled stays behind [`Store`]:
//!
//! - **One process per store.** sled takes an exclusive file lock; a second
//!   open fails with [`StoreError::Locked`] naming the path.
//! - **Durability is explicit.** A write is in memory (and flushed in the
//!   background within about half a second) until [`Store::flush`] returns.
//!   Callers flush after every state transition that must survive a crash,
//!   *before* acting on GitHub: record the intent, flush, then push / comment
//!   / dispatch. A crash after the flush leaves a journal that says the action
//!   may have happened, which recovery checks on GitHub.
//! - **Typed records with a schema version.** Values are JSON in a small
//!   envelope (see [`Record`]); a record from a newer schema is an error,
//!   never garbage, and a record that does not decode is reported with its
//!   tree and key.
//! - **Compare-and-swap updates.** [`Store::update`] re-runs its closure
//!   when another writer got in between, so the closure must not have side
//!   effects.
//! - **Small on disk.** sled grows; the store runs in `Mode::LowSpace`, the
//!   event log is bounded, and [`Store::prune_older_than`] drops old history.
//!
//! sled calls are synchronous and fast (memory first); only [`Store::flush`]
//! waits for the disk, and it is async.
//!
//! `klaud-store` must never be the only place a fact lives that another
//! instance needs: coordination goes through GitHub. It also implements the
//! lifecycle [`klaud_lifecycle::engine::Journal`] ([`journal::StoreJournal`]),
//! the planner's [`klaud_planner::plan::CreationTimes`] over the cache tree,
//! keeps the registry breaker ([`Store::save_breaker`]) and the display
//! names the results API knows ([`Store::model_names`]).

mod error;
mod events;
pub mod journal;
mod model_names;
mod record;
mod registry;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

pub use error::{StoreError, UpgradeError};
pub use events::{DEFAULT_EVENT_LIMIT, Event, EventKind, StoredEvent};
pub use model_names::KnownModelNames;
pub use record::Record;

/// Names of the trees Klaud uses. Any other non-reserved name works too;
/// these exist so that callers agree on the spelling.
pub mod trees {
    /// Candidates and their lifecycle journal, keyed by candidate id.
    pub const CANDIDATES: &str = "candidates";
    /// Planner waves, keyed by wave id.
    pub const WAVES: &str = "waves";
    /// Final outcomes, keyed by candidate id.
    pub const OUTCOMES: &str = "outcomes";
    /// Re-fetchable data (registry answers, ETags), keyed by what was asked.
    pub const CACHE: &str = "cache";
    /// The bounded event log; written only through `Store::append_event`.
    pub const EVENTS: &str = "events";
}

/// Internal tree holding the store's own format marker.
/// How long `open` waits for another handle's lock to go before reporting
/// the store as held by another instance.
const LOCK_WAIT: Duration = Duration::from_secs(3);

const META_TREE: &str = "__klaud_meta";
const FORMAT_KEY: &str = "format";
/// Layout of the store itself (envelope shape, reserved trees). Bump when an
/// older Klaud would misread a store written by this one.
const FORMAT: u64 = 1;

/// sled's default cache is 1 GiB; Klaud's whole store is a few megabytes.
const CACHE_CAPACITY: u64 = 32 * 1024 * 1024;

/// Settings of a store beyond its path.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// How many events the event log keeps (the newest ones). Default
    /// [`DEFAULT_EVENT_LIMIT`].
    pub event_limit: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            event_limit: DEFAULT_EVENT_LIMIT,
        }
    }
}

/// The local store. Cheap to clone (clones share the same database) and safe
/// to use from several threads and tasks.
#[derive(Clone)]
pub struct Store {
    db: sled::Db,
    /// `None` for a temporary store.
    path: Option<PathBuf>,
    event_limit: usize,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.path)
            .field("event_limit", &self.event_limit)
            .finish_non_exhaustive()
    }
}

/// Record counts and disk use, for the dashboard and `/metrics`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoreStats {
    /// The store directory; `None` for a temporary store.
    pub path: Option<PathBuf>,
    /// Bytes sled uses on disk.
    pub size_on_disk: u64,
    /// Records per tree (internal trees left out).
    pub records: BTreeMap<String, usize>,
}

/// What [`Store::prune_older_than`] did.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct PruneReport {
    /// Records removed.
    pub removed: usize,
    /// Keys whose envelope could not be read, so their age is unknown; they
    /// are kept and named here rather than dropped silently.
    pub undecodable: Vec<String>,
}

impl Store {
    /// Opens (or creates) the store in directory `path` with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, StoreOptions::default())
    }

    /// Opens (or creates) the store in directory `path`.
    pub fn open_with(path: impl AsRef<Path>, options: StoreOptions) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        // sled writes `conf` when it creates a store; its presence tells a
        // fresh store from one that lost its whole log.
        let existed = path.join("conf").exists();
        let config = base_config().path(&path);
        // sled releases its file lock only when its background flusher lets
        // go of the last handle, a moment after the owner dropped it: a
        // restart in the same process (or right after the old one exited)
        // may see the lock briefly. Wait a little before calling it held.
        let deadline = std::time::Instant::now() + LOCK_WAIT;
        let db = loop {
            match open_db(&config, &path) {
                Err(StoreError::Locked { .. }) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                other => break other?,
            }
        };
        Self::init(db, Some(path), options, existed)
    }

    /// A store in a temporary directory that is deleted when the last clone
    /// is dropped: for tests and one-shot CI runs that rebuild from GitHub.
    pub fn temporary() -> Result<Self, StoreError> {
        Self::temporary_with(StoreOptions::default())
    }

    /// [`Store::temporary`] with options.
    pub fn temporary_with(options: StoreOptions) -> Result<Self, StoreError> {
        let config = base_config().temporary(true);
        let db = open_db(&config, Path::new("<temporary store>"))?;
        Self::init(db, None, options, false)
    }

    fn init(
        db: sled::Db,
        path: Option<PathBuf>,
        options: StoreOptions,
        existed: bool,
    ) -> Result<Self, StoreError> {
        let store = Self {
            db,
            path,
            event_limit: options.event_limit,
        };
        store.check_format(existed)?;
        Ok(store)
    }

    /// The store directory; `None` for a temporary store.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    fn display_path(&self) -> PathBuf {
        self.path
            .clone()
            .unwrap_or_else(|| PathBuf::from("<temporary store>"))
    }

    /// Refuses a store whose layout comes from a newer Klaud, and stamps a
    /// fresh one with this build's format.
    ///
    /// sled 0.34.7 does not report a damaged log: it recovers up to the first
    /// segment that fails its checksum and silently drops the rest. The format
    /// marker is the first record of every store and is flushed at once, so
    /// an existing store without it has lost flushed data and is reported as
    /// corrupt rather than served half-empty. (Damage further into the log
    /// keeps the marker and stays undetectable at this level.)
    fn check_format(&self, existed: bool) -> Result<(), StoreError> {
        let meta = self.raw_tree(META_TREE)?;
        let stored = meta
            .get(FORMAT_KEY)
            .map_err(|source| self.backend("open", META_TREE, source))?;
        match stored {
            None if existed => Err(StoreError::Corrupt {
                path: self.display_path(),
                detail: "its format marker is missing, so sled dropped part of its log".to_owned(),
            }),
            None => {
                meta.insert(FORMAT_KEY, FORMAT.to_string().as_bytes())
                    .map_err(|source| self.backend("open", META_TREE, source))?;
                self.db
                    .flush()
                    .map_err(|source| self.backend("open", META_TREE, source))?;
                Ok(())
            }
            Some(bytes) => {
                let found = std::str::from_utf8(&bytes)
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok())
                    .ok_or_else(|| StoreError::Corrupt {
                        path: self.display_path(),
                        detail: format!(
                            "its format marker is not a number: {}",
                            display_key(&bytes)
                        ),
                    })?;
                if found > FORMAT {
                    return Err(StoreError::UnsupportedFormat {
                        path: self.display_path(),
                        found,
                        supported: FORMAT,
                    });
                }
                Ok(())
            }
        }
    }

    /// Writes `value` under `key` in `tree`, replacing what was there.
    pub fn put<T: Record>(&self, tree: &str, key: &str, value: &T) -> Result<(), StoreError> {
        let t = self.user_tree(tree)?;
        check_key(tree, key)?;
        let bytes = record::encode(tree, key, value, now_millis())?;
        t.insert(key, bytes)
            .map_err(|source| self.backend("put", tree, source))?;
        Ok(())
    }

    /// Reads the record under `key` in `tree`.
    pub fn get<T: Record>(&self, tree: &str, key: &str) -> Result<Option<T>, StoreError> {
        let t = self.user_tree(tree)?;
        check_key(tree, key)?;
        match t
            .get(key)
            .map_err(|source| self.backend("get", tree, source))?
        {
            None => Ok(None),
            Some(bytes) => record::decode(tree, key, &bytes).map(|(_, v)| Some(v)),
        }
    }

    /// Removes the record under `key`; `true` when there was one. The record
    /// is not decoded, so an undecodable record can always be removed.
    pub fn remove(&self, tree: &str, key: &str) -> Result<bool, StoreError> {
        let t = self.user_tree(tree)?;
        check_key(tree, key)?;
        let old = t
            .remove(key)
            .map_err(|source| self.backend("remove", tree, source))?;
        Ok(old.is_some())
    }

    /// Every record of `tree` in key order. Fails on the first record that
    /// does not decode, naming its key; use [`Store::scan`] to get the good
    /// records and the failures side by side.
    pub fn list<T: Record>(&self, tree: &str) -> Result<Vec<(String, T)>, StoreError> {
        self.scan(tree)?
            .into_iter()
            .map(|(key, value)| value.map(|v| (key, v)))
            .collect()
    }

    /// Every record of `tree` in key order, each with its own decode result,
    /// so that one bad record neither hides the others nor gets skipped.
    /// The outer error is a failure to read the tree at all.
    #[allow(clippy::type_complexity)]
    pub fn scan<T: Record>(
        &self,
        tree: &str,
    ) -> Result<Vec<(String, Result<T, StoreError>)>, StoreError> {
        let t = self.user_tree(tree)?;
        let mut out = Vec::new();
        for entry in t.iter() {
            let (key, bytes) = entry.map_err(|source| self.backend("list", tree, source))?;
            let value = match std::str::from_utf8(&key) {
                Ok(key_text) => record::decode(tree, key_text, &bytes).map(|(_, v)| v),
                Err(_) => Err(StoreError::Decode {
                    tree: tree.to_owned(),
                    key: display_key(&key),
                    reason: "the key is not UTF-8 text".to_owned(),
                }),
            };
            out.push((display_key(&key), value));
        }
        Ok(out)
    }

    /// Compare-and-swap update: reads the record, calls `f` with it (`None`
    /// when absent), and writes what `f` returns (`None` removes the record)
    /// only if nobody changed the record in between; otherwise reads again and
    /// re-runs `f`. So `f` may run several times and must have no side
    /// effects. Returning the value unchanged still rewrites it (with a new
    /// write time); use [`Store::try_update`] to leave it alone. Returns the
    /// value written. A stored record that does not
    /// decode is an error: it is never overwritten blindly.
    pub fn update<T, F>(&self, tree: &str, key: &str, mut f: F) -> Result<Option<T>, StoreError>
    where
        T: Record,
        F: FnMut(Option<T>) -> Option<T>,
    {
        match self.try_update(tree, key, |v| Ok::<_, std::convert::Infallible>(f(v)))? {
            Ok(v) => Ok(v),
            Err(never) => match never {},
        }
    }

    /// [`Store::update`] whose closure may refuse the change: `Err(e)` from
    /// `f` leaves the record as it is and comes back as the inner `Err(e)`
    /// (for "move to state B only from state A").
    pub fn try_update<T, E, F>(
        &self,
        tree: &str,
        key: &str,
        mut f: F,
    ) -> Result<Result<Option<T>, E>, StoreError>
    where
        T: Record,
        F: FnMut(Option<T>) -> Result<Option<T>, E>,
    {
        let t = self.user_tree(tree)?;
        check_key(tree, key)?;
        loop {
            let current = t
                .get(key)
                .map_err(|source| self.backend("update", tree, source))?;
            let decoded = match &current {
                Some(bytes) => Some(record::decode::<T>(tree, key, bytes)?.1),
                None => None,
            };
            let next = match f(decoded) {
                Ok(next) => next,
                Err(refused) => return Ok(Err(refused)),
            };
            let encoded = match &next {
                Some(value) => Some(record::encode(tree, key, value, now_millis())?),
                None => None,
            };
            let swapped = t
                .compare_and_swap(key, current, encoded)
                .map_err(|source| self.backend("update", tree, source))?;
            if swapped.is_ok() {
                return Ok(Ok(next));
            }
            // Someone else wrote in between: start over from their value.
        }
    }

    /// Makes every write so far durable. Call it after each state transition
    /// that must survive a crash, before acting on GitHub.
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.db
            .flush_async()
            .await
            .map_err(|source| self.backend("flush", "*", source))?;
        Ok(())
    }

    /// Removes records of `tree` written more than `age` ago. Works on any
    /// tree, the event log included.
    pub fn prune_older_than(&self, tree: &str, age: Duration) -> Result<PruneReport, StoreError> {
        let age = chrono::Duration::from_std(age).unwrap_or(chrono::Duration::MAX);
        let cutoff = Utc::now()
            .checked_sub_signed(age)
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        self.prune_written_before(tree, cutoff)
    }

    /// Removes records of `tree` written before `cutoff`.
    pub fn prune_written_before(
        &self,
        tree: &str,
        cutoff: DateTime<Utc>,
    ) -> Result<PruneReport, StoreError> {
        let t = if tree == trees::EVENTS {
            self.raw_tree(tree)?
        } else {
            self.user_tree(tree)?
        };
        let cutoff = cutoff.timestamp_millis();
        let mut report = PruneReport::default();
        for entry in t.iter() {
            let (key, bytes) = entry.map_err(|source| self.backend("prune", tree, source))?;
            let key_text = if tree == trees::EVENTS {
                events::display_event_key(&key)
            } else {
                display_key(&key)
            };
            match record::decode_header(tree, &key_text, &bytes) {
                Ok(header) if header.at < cutoff => {
                    // Only remove what we looked at: a record rewritten
                    // meanwhile is fresh and stays.
                    let removed = t
                        .compare_and_swap(&key, Some(&bytes), None::<&[u8]>)
                        .map_err(|source| self.backend("prune", tree, source))?;
                    if removed.is_ok() {
                        report.removed += 1;
                    }
                }
                Ok(_) => {}
                Err(_) => report.undecodable.push(key_text),
            }
        }
        Ok(report)
    }

    /// Record counts per tree and the size on disk.
    pub fn stats(&self) -> Result<StoreStats, StoreError> {
        let mut records = BTreeMap::new();
        for name in self.db.tree_names() {
            let Ok(name) = std::str::from_utf8(&name) else {
                continue;
            };
            if name.starts_with("__") {
                continue;
            }
            let t = self.raw_tree(name)?;
            records.insert(name.to_owned(), t.len());
        }
        let size_on_disk = self
            .db
            .size_on_disk()
            .map_err(|source| self.backend("stats", "*", source))?;
        Ok(StoreStats {
            path: self.path.clone(),
            size_on_disk,
            records,
        })
    }

    /// A tree callers may read and write through the typed API.
    fn user_tree(&self, tree: &str) -> Result<sled::Tree, StoreError> {
        let reason = if tree.is_empty() {
            Some("a tree name must not be empty")
        } else if tree.starts_with("__") {
            Some("names starting with `__` are internal to the store")
        } else if tree == trees::EVENTS {
            Some("the event log is written with `append_event` and read with `recent_events`")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(StoreError::InvalidTree {
                tree: tree.to_owned(),
                reason,
            });
        }
        self.raw_tree(tree)
    }

    fn raw_tree(&self, tree: &str) -> Result<sled::Tree, StoreError> {
        self.db
            .open_tree(tree)
            .map_err(|source| self.backend("open tree", tree, source))
    }

    fn backend(&self, op: &'static str, tree: &str, source: sled::Error) -> StoreError {
        if let sled::Error::Corruption { at, .. } = &source {
            return StoreError::Corrupt {
                path: self.display_path(),
                detail: format!("sled found corruption at {at:?} during `{op}` on tree `{tree}`"),
            };
        }
        StoreError::Backend {
            op,
            tree: tree.to_owned(),
            source,
        }
    }
}

fn base_config() -> sled::Config {
    sled::Config::new()
        .mode(sled::Mode::LowSpace)
        .cache_capacity(CACHE_CAPACITY)
}

/// Opens sled and turns its errors into ones an operator can act on.
fn open_db(config: &sled::Config, path: &Path) -> Result<sled::Db, StoreError> {
    // sled 0.34.7's recovery asserts its invariants (pagecache/snapshot.rs,
    // segment.rs) instead of returning errors, so some damage panics; a
    // damaged cache must not take the daemon down.
    let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| config.open()));
    match opened {
        Ok(Ok(db)) => Ok(db),
        Ok(Err(source)) => Err(classify_open_error(path, source)),
        Err(panic) => {
            let detail = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "sled panicked while reading it".to_owned());
            Err(StoreError::Corrupt {
                path: path.to_path_buf(),
                detail,
            })
        }
    }
}

fn classify_open_error(path: &Path, source: sled::Error) -> StoreError {
    match source {
        // sled 0.34.7 reports a held lock as a plain I/O error with this text
        // (config.rs `try_lock`); the version is pinned, and a test breaks if
        // the wording changes.
        sled::Error::Io(ref e)
            if e.kind() == std::io::ErrorKind::Other
                && e.to_string().starts_with("could not acquire lock") =>
        {
            StoreError::Locked {
                path: path.to_path_buf(),
            }
        }
        sled::Error::Corruption { at, .. } => StoreError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("sled found corruption at {at:?}"),
        },
        // Unsupported at open means the files do not match sled's expected
        // layout (another sled version, changed segment size).
        sled::Error::Unsupported(detail) => StoreError::Corrupt {
            path: path.to_path_buf(),
            detail,
        },
        source => StoreError::Open {
            path: path.to_path_buf(),
            source,
        },
    }
}

fn check_key(tree: &str, key: &str) -> Result<(), StoreError> {
    if key.is_empty() {
        return Err(StoreError::EmptyKey {
            tree: tree.to_owned(),
        });
    }
    Ok(())
}

/// A key as text for messages: itself when UTF-8, else `0x` + hex.
fn display_key(key: &[u8]) -> String {
    match std::str::from_utf8(key) {
        Ok(text) => text.to_owned(),
        Err(_) => format!("0x{}", hex::encode(key)),
    }
}

fn now_millis() -> i64 {
    Utc::now().timestamp_millis()
}
