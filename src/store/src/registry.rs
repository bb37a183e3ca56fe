//! The planner's registry state kept across restarts, in the cache tree:
//! image creation times by digest ([`CreationTimes`] on [`Store`]), the
//! manifests and configs Klaud pulled, by digest, with the digest each tag
//! last resolved to ([`ContentCache`] on [`Store`]: on Docker Hub every
//! manifest GET is a pull, so none is pulled twice), and the per-host
//! breaker ([`Store::save_breaker`], [`Store::load_breaker`]).
//!
//! Both are re-fetchable, so losing them costs requests, never correctness:
//! a failed read is a cache miss and a failed write is logged and dropped.

use klaud_planner::plan::{CreationTime, CreationTimes};
use klaud_planner::registry::{BreakerState, ContentCache, KeptTagList};

use crate::{Record, Store, StoreError, trees};

/// Key prefix of creation times in the cache tree. Digests are content
/// addresses, so these records never expire and nothing prunes them.
const CREATION_PREFIX: &str = "creation-time/";
/// Key prefix of manifests and configs by digest: content addresses too.
const CONTENT_PREFIX: &str = "registry-content/";
/// Key prefix of the digest a tag last resolved to (a hint, checked with a
/// `HEAD` before use).
const TAG_PREFIX: &str = "registry-tag/";
/// Key prefix of a repository's tag list kept with its `ETag` (asked again
/// with `If-None-Match`; a changed list replaces it).
const TAG_LIST_PREFIX: &str = "registry-tag-list/";
/// Key of the breaker record in the cache tree.
const BREAKER_KEY: &str = "registry-breaker";

impl Record for CreationTime {
    const VERSION: u32 = 1;
}

impl Record for BreakerState {
    const VERSION: u32 = 1;
}

impl Record for KeptTagList {
    const VERSION: u32 = 1;
}

/// A manifest or config as pulled: registry JSON, so kept as text.
#[derive(serde::Serialize, serde::Deserialize)]
struct KeptContent {
    text: String,
}

impl Record for KeptContent {
    const VERSION: u32 = 1;
}

/// A tag's last digest.
#[derive(serde::Serialize, serde::Deserialize, PartialEq)]
struct TagDigest {
    digest: String,
}

impl Record for TagDigest {
    const VERSION: u32 = 1;
}

impl ContentCache for Store {
    fn get(&self, digest: &str) -> Option<Vec<u8>> {
        let key = format!("{CONTENT_PREFIX}{digest}");
        match Store::get::<KeptContent>(self, trees::CACHE, &key) {
            Ok(found) => found.map(|c| c.text.into_bytes()),
            Err(e) => {
                tracing::warn!(key, error = %e, "kept registry content unreadable; asking the registry");
                None
            }
        }
    }

    fn put(&self, digest: &str, bytes: &[u8]) {
        // Registry manifests and configs are JSON; anything else is not kept
        // (asked again next time) rather than stored in a bloated encoding.
        let Ok(text) = std::str::from_utf8(bytes) else {
            return;
        };
        let key = format!("{CONTENT_PREFIX}{digest}");
        let value = KeptContent {
            text: text.to_owned(),
        };
        if let Err(e) = Store::put(self, trees::CACHE, &key, &value) {
            tracing::warn!(key, error = %e, "could not keep registry content");
        }
    }

    fn tag_digest(&self, host: &str, repository: &str, tag: &str) -> Option<String> {
        let key = format!("{TAG_PREFIX}{host}/{repository}:{tag}");
        Store::get::<TagDigest>(self, trees::CACHE, &key)
            .ok()
            .flatten()
            .map(|t| t.digest)
    }

    fn put_tag_digest(&self, host: &str, repository: &str, tag: &str, digest: &str) {
        let key = format!("{TAG_PREFIX}{host}/{repository}:{tag}");
        let value = TagDigest {
            digest: digest.to_owned(),
        };
        // Most plans see the same digest again: no write then.
        if Store::get::<TagDigest>(self, trees::CACHE, &key)
            .ok()
            .flatten()
            .is_some_and(|old| old == value)
        {
            return;
        }
        if let Err(e) = Store::put(self, trees::CACHE, &key, &value) {
            tracing::warn!(key, error = %e, "could not keep a tag's digest");
        }
    }

    fn tag_list(&self, host: &str, repository: &str) -> Option<KeptTagList> {
        let key = format!("{TAG_LIST_PREFIX}{host}/{repository}");
        match Store::get::<KeptTagList>(self, trees::CACHE, &key) {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(key, error = %e, "kept tag list unreadable; listing again");
                None
            }
        }
    }

    fn put_tag_list(&self, host: &str, repository: &str, list: &KeptTagList) {
        let key = format!("{TAG_LIST_PREFIX}{host}/{repository}");
        if let Err(e) = Store::put(self, trees::CACHE, &key, list) {
            tracing::warn!(key, error = %e, "could not keep a tag list");
        }
    }
}

fn creation_key(digest: &str, architecture: &str) -> String {
    format!("{CREATION_PREFIX}{digest} {architecture}")
}

impl CreationTimes for Store {
    fn get(&self, digest: &str, architecture: &str) -> Option<CreationTime> {
        let key = creation_key(digest, architecture);
        match Store::get::<CreationTime>(self, trees::CACHE, &key) {
            Ok(found) => found,
            Err(e) => {
                // An undecodable entry is overwritten by the next `put`.
                tracing::warn!(key, error = %e, "cached creation time unreadable; asking the registry");
                None
            }
        }
    }

    fn put(&self, digest: &str, architecture: &str, time: CreationTime) {
        let key = creation_key(digest, architecture);
        if let Err(e) = Store::put(self, trees::CACHE, &key, &time) {
            tracing::warn!(key, error = %e, "could not cache a creation time");
        }
    }
}

impl Store {
    /// Persists the registry breaker (replacing the previous state), so a
    /// restarted Klaud does not ask a host it just found unreachable.
    /// Durable after the next [`Store::flush`].
    pub fn save_breaker(&self, state: &BreakerState) -> Result<(), StoreError> {
        self.put(trees::CACHE, BREAKER_KEY, state)
    }

    /// The breaker state last saved; `None` when none was.
    pub fn load_breaker(&self) -> Result<Option<BreakerState>, StoreError> {
        self.get(trees::CACHE, BREAKER_KEY)
    }
}

#[cfg(test)]
mod tests {
    use chrono::{Duration, TimeZone, Utc};
    use klaud_planner::plan::Clock;
    use klaud_planner::registry::TrippedHost;

    use super::*;

    const DIGEST: &str = "sha256:4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945";

    fn time() -> CreationTime {
        CreationTime {
            time: Utc.with_ymd_and_hms(2026, 11, 3, 7, 15, 0).unwrap(),
            clock: Clock::CreatedLabel,
        }
    }

    #[test]
    fn a_reopened_store_answers_a_cached_creation_time() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path()).unwrap();
            let cache: &dyn CreationTimes = &store;
            assert_eq!(cache.get(DIGEST, "amd64"), None);
            cache.put(DIGEST, "amd64", time());
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            runtime.block_on(store.flush()).unwrap();
        }
        let store = Store::open(dir.path()).unwrap();
        let cache: &dyn CreationTimes = &store;
        assert_eq!(cache.get(DIGEST, "amd64"), Some(time()));
        // Keyed by digest and platform: another platform is a miss.
        assert_eq!(cache.get(DIGEST, "arm64"), None);
        assert_eq!(cache.get("sha256:00", "amd64"), None);
    }

    #[test]
    fn an_unreadable_creation_time_is_a_miss_and_is_replaced() {
        #[derive(serde::Serialize, serde::Deserialize)]
        struct Wrong {
            nothing: u8,
        }
        impl Record for Wrong {
            const VERSION: u32 = 1;
        }
        let store = Store::temporary().unwrap();
        Store::put(
            &store,
            trees::CACHE,
            &creation_key(DIGEST, "amd64"),
            &Wrong { nothing: 1 },
        )
        .unwrap();
        let cache: &dyn CreationTimes = &store;
        assert_eq!(cache.get(DIGEST, "amd64"), None);
        cache.put(DIGEST, "amd64", time());
        assert_eq!(cache.get(DIGEST, "amd64"), Some(time()));
    }

    #[test]
    fn the_breaker_state_round_trips_through_a_reopened_store() {
        let dir = tempfile::tempdir().unwrap();
        let since = Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0).unwrap();
        let state = BreakerState {
            hosts: vec![TrippedHost {
                host: "hub.docker.com".to_owned(),
                reason: "dns error: failed to lookup address information".to_owned(),
                since,
                until: since + Duration::minutes(15),
            }],
        };
        {
            let store = Store::open(dir.path()).unwrap();
            assert_eq!(store.load_breaker().unwrap(), None);
            store.save_breaker(&state).unwrap();
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            runtime.block_on(store.flush()).unwrap();
        }
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.load_breaker().unwrap(), Some(state));
        store.save_breaker(&BreakerState::default()).unwrap();
        assert_eq!(store.load_breaker().unwrap(), Some(BreakerState::default()));
    }

    #[test]
    fn kept_registry_content_and_tag_digests_survive_a_reopened_store() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = br#"{"schemaVersion":2,"manifests":[]}"#;
        {
            let store = Store::open(dir.path()).unwrap();
            let cache: &dyn ContentCache = &store;
            assert_eq!(cache.get(DIGEST), None);
            cache.put(DIGEST, manifest);
            // Not registry JSON: not kept.
            cache.put("sha256:00", &[0xff, 0xfe]);
            cache.put_tag_digest("docker.io", "vllm/vllm-openai", "v0.11.0", DIGEST);
            cache.put_tag_list(
                "docker.io",
                "vllm/vllm-openai",
                &KeptTagList {
                    etag: "\"v1\"".to_owned(),
                    tags: vec!["v0.11.0".to_owned()],
                },
            );
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            runtime.block_on(store.flush()).unwrap();
        }
        let store = Store::open(dir.path()).unwrap();
        let cache: &dyn ContentCache = &store;
        assert_eq!(cache.get(DIGEST).as_deref(), Some(&manifest[..]));
        assert_eq!(cache.get("sha256:00"), None);
        assert_eq!(
            cache
                .tag_digest("docker.io", "vllm/vllm-openai", "v0.11.0")
                .as_deref(),
            Some(DIGEST)
        );
        assert_eq!(
            cache.tag_digest("docker.io", "vllm/vllm-openai", "v0.12.0"),
            None
        );
        assert_eq!(
            cache
                .tag_list("docker.io", "vllm/vllm-openai")
                .map(|l| (l.etag, l.tags)),
            Some(("\"v1\"".to_owned(), vec!["v0.11.0".to_owned()]))
        );
        assert_eq!(cache.tag_list("docker.io", "lmsysorg/sglang"), None);
    }
}
