//! Errors of the local store. Every variant names the store or the tree and
//! key it is about, and says what the operator can do next.

use std::path::PathBuf;

/// What went wrong in the local store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store directory is locked by another process (sled takes an
    /// exclusive file lock per path).
    #[error(
        "the Klaud store at {path} is held by another running Klaud instance \
         (only one process may open a store); stop that instance, or give this \
         one its own store path"
    )]
    Locked {
        /// The store directory.
        path: PathBuf,
    },

    /// The files on disk cannot be read back.
    #[error(
        "the Klaud store at {path} is corrupt ({detail}); it is only a journal \
         and cache: delete the directory and Klaud will rebuild its state from \
         GitHub"
    )]
    Corrupt {
        /// The store directory.
        path: PathBuf,
        /// What sled or Klaud found.
        detail: String,
    },

    /// The store was written by a newer Klaud with a layout this one does not
    /// know.
    #[error(
        "the Klaud store at {path} has format {found}, this Klaud understands up \
         to format {supported}; run the newer Klaud, or delete the directory and \
         Klaud will rebuild its state from GitHub"
    )]
    UnsupportedFormat {
        /// The store directory.
        path: PathBuf,
        /// The format recorded in the store.
        found: u64,
        /// The newest format this build reads.
        supported: u64,
    },

    /// Opening failed for another reason (permissions, not a directory, ...).
    #[error("cannot open the Klaud store at {path}: {source}")]
    Open {
        /// The store directory.
        path: PathBuf,
        /// The underlying sled error.
        #[source]
        source: sled::Error,
    },

    /// A read or write failed inside sled after the store was open.
    #[error("store operation `{op}` on tree `{tree}` failed: {source}")]
    Backend {
        /// The store operation (`get`, `put`, `flush`, ...).
        op: &'static str,
        /// The tree it worked on (`*` when the whole store).
        tree: String,
        /// The underlying sled error.
        #[source]
        source: sled::Error,
    },

    /// A record was written with a schema version newer than the reading type
    /// knows; decoding it would produce garbage.
    #[error(
        "record {key:?} in tree `{tree}` has schema version {found}, newer than \
         version {supported} that this Klaud understands (written by a newer \
         Klaud?)"
    )]
    NewerVersion {
        /// The tree.
        tree: String,
        /// The record key.
        key: String,
        /// The version stored with the record.
        found: u32,
        /// `Record::VERSION` of the reading type.
        supported: u32,
    },

    /// A stored record cannot be turned back into its type.
    #[error("record {key:?} in tree `{tree}` cannot be decoded: {reason}")]
    Decode {
        /// The tree.
        tree: String,
        /// The record key (lossy UTF-8 or hex when the key is not text).
        key: String,
        /// Why: the JSON path and the serde message, or the upgrade failure.
        reason: String,
    },

    /// A value could not be serialized (a map with non-string keys, a
    /// failing `Serialize` impl, ...).
    #[error("record {key:?} for tree `{tree}` cannot be encoded: {reason}")]
    Encode {
        /// The tree.
        tree: String,
        /// The record key.
        key: String,
        /// The serde message.
        reason: String,
    },

    /// The caller named a tree that is not allowed (empty, internal or
    /// reserved for a dedicated API).
    #[error("invalid store tree name {tree:?}: {reason}")]
    InvalidTree {
        /// The rejected name.
        tree: String,
        /// Why it is rejected.
        reason: &'static str,
    },

    /// The caller passed an empty key.
    #[error("empty record key for tree `{tree}`")]
    EmptyKey {
        /// The tree.
        tree: String,
    },
}

/// Why a record written at an older schema version cannot be lifted to
/// the current one ([`crate::Record::upgrade`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpgradeError {
    /// This build knows no way from that version.
    #[error("no upgrade path from version {from}")]
    NoPath {
        /// The version the record was written at.
        from: u32,
    },
    /// The old record lacks what the upgrade needs, or has it in another shape.
    #[error("version {from} record: {field} {problem}")]
    Shape {
        /// The version the record was written at.
        from: u32,
        /// The field (or `record` for the whole value).
        field: String,
        /// What is wrong with it.
        problem: &'static str,
    },
}
