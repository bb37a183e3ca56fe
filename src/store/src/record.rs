//! The on-disk shape of one record: a small JSON envelope that carries the
//! record's schema version and write time around the caller's value.
//!
//! `{"v":<schema version>,"at":<unix milliseconds>,"data":<value>}`
//!
//! The version lets an older Klaud refuse a record a newer one wrote instead
//! of silently decoding it into something wrong; the time drives
//! `Store::prune_older_than` without the caller's types having to carry one.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{StoreError, UpgradeError};

/// A value kept in the store. `VERSION` is written next to every record; bump
/// it when a change to the type is not readable by the old code (a removed or
/// renamed field, a changed meaning), and teach [`Record::upgrade`] how to
/// lift older records. Additive changes with `#[serde(default)]` need no bump.
pub trait Record: Serialize + DeserializeOwned {
    /// The schema version this build writes and the newest it reads.
    const VERSION: u32;

    /// Turns the JSON of a record written at schema version `from` (always
    /// lower than [`Record::VERSION`]) into the JSON of the current version.
    /// The default keeps it as it is, which is right while every change has
    /// been additive. An `Err` names what could not be upgraded.
    fn upgrade(from: u32, data: serde_json::Value) -> Result<serde_json::Value, UpgradeError> {
        let _ = from;
        Ok(data)
    }
}

#[derive(Serialize)]
struct EnvelopeOut<'a, T> {
    v: u32,
    at: i64,
    data: &'a T,
}

#[derive(Deserialize)]
struct EnvelopeIn {
    v: u32,
    at: i64,
    data: serde_json::Value,
}

/// The envelope without its value decoded: what pruning needs.
pub(crate) struct Header {
    pub(crate) at: i64,
}

pub(crate) fn encode<T: Record>(
    tree: &str,
    key: &str,
    value: &T,
    at_millis: i64,
) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(&EnvelopeOut {
        v: T::VERSION,
        at: at_millis,
        data: value,
    })
    .map_err(|e| StoreError::Encode {
        tree: tree.to_owned(),
        key: key.to_owned(),
        reason: e.to_string(),
    })
}

/// Decodes a record, returning its write time and value.
pub(crate) fn decode<T: Record>(
    tree: &str,
    key: &str,
    bytes: &[u8],
) -> Result<(i64, T), StoreError> {
    let fail = |reason: String| StoreError::Decode {
        tree: tree.to_owned(),
        key: key.to_owned(),
        reason,
    };
    let envelope: EnvelopeIn =
        serde_json::from_slice(bytes).map_err(|e| fail(format!("not a Klaud record: {e}")))?;
    let data = match envelope.v {
        v if v == T::VERSION => envelope.data,
        v if v > T::VERSION => {
            return Err(StoreError::NewerVersion {
                tree: tree.to_owned(),
                key: key.to_owned(),
                found: v,
                supported: T::VERSION,
            });
        }
        v => T::upgrade(v, envelope.data)
            .map_err(|e| fail(format!("cannot upgrade from schema version {v}: {e}")))?,
    };
    let value = serde_path_to_error::deserialize(data).map_err(|e| {
        let path = e.path().to_string();
        fail(format!("at `{path}`: {}", e.into_inner()))
    })?;
    Ok((envelope.at, value))
}

/// Reads only the envelope; used where the value's type does not matter.
pub(crate) fn decode_header(tree: &str, key: &str, bytes: &[u8]) -> Result<Header, StoreError> {
    #[derive(Deserialize)]
    struct HeaderIn {
        // Required so that arbitrary JSON with an `at` is not taken for a record.
        #[serde(rename = "v")]
        _version: u32,
        at: i64,
    }
    serde_json::from_slice::<HeaderIn>(bytes)
        .map(|h| Header { at: h.at })
        .map_err(|e| StoreError::Decode {
            tree: tree.to_owned(),
            key: key.to_owned(),
            reason: format!("not a Klaud record: {e}"),
        })
}
