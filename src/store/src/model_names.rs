//! The display names a results API knows, kept across restarts in the cache
//! tree ([`Store::model_names`], [`Store::save_model_names`]): finding them
//! costs one request per name, and a short-lived `klaud wave` process would
//! otherwise ask every time.
//!
//! Re-fetchable like the rest of the cache tree: a record that cannot be
//! read is a miss, and the names are asked again.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{Record, Store, StoreError, trees};

/// Key prefix in the cache tree; the API's base URL follows.
const PREFIX: &str = "model-names/";

/// What a results API answered about its display names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnownModelNames {
    /// Display name → the model prefix its rows carry (`None`: it answered
    /// no row, so it is asked again at the next refresh).
    pub names: BTreeMap<String, Option<String>>,
    /// When the API's list of names was last read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refreshed: Option<DateTime<Utc>>,
}

impl KnownModelNames {
    /// The display name whose rows carry `prefix` (the first by name, if
    /// the API ever answered two: it keeps one name per model key).
    pub fn name_of(&self, prefix: &str) -> Option<&str> {
        self.names.iter().find_map(|(name, p)| {
            p.as_deref()
                .filter(|p| p.eq_ignore_ascii_case(prefix))
                .map(|_| name.as_str())
        })
    }
}

impl Record for KnownModelNames {
    const VERSION: u32 = 1;
}

impl Store {
    /// The names kept for the results API at `api` (its base URL), if any.
    pub fn model_names(&self, api: &str) -> Option<KnownModelNames> {
        let key = format!("{PREFIX}{api}");
        match self.get::<KnownModelNames>(trees::CACHE, &key) {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(key, error = %e, "kept model names unreadable; asking the results API");
                None
            }
        }
    }

    /// Keeps the names of the results API at `api`, replacing what was kept.
    /// Durable after the next [`Store::flush`].
    pub fn save_model_names(&self, api: &str, names: &KnownModelNames) -> Result<(), StoreError> {
        self.put(trees::CACHE, &format!("{PREFIX}{api}"), names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_kept_per_api_and_found_by_prefix() {
        let store = Store::temporary().expect("store");
        assert_eq!(store.model_names("https://a.example"), None);
        let mut names = KnownModelNames::default();
        names
            .names
            .insert("DeepSeek-R1-0528".into(), Some("dsr1".into()));
        names.names.insert("Retired".into(), None);
        store
            .save_model_names("https://a.example", &names)
            .expect("saved");
        let kept = store.model_names("https://a.example").expect("kept");
        assert_eq!(kept, names);
        assert_eq!(kept.name_of("dsr1"), Some("DeepSeek-R1-0528"));
        assert_eq!(kept.name_of("qwen3.5"), None);
        assert_eq!(store.model_names("https://b.example"), None);
    }
}
