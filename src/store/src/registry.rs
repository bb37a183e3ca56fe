//! The planner's registry state kept across restarts, in the cache tree:
//! image creation times by digest ([`CreationTimes`] on [`Store`]) and the
//! per-host breaker ([`Store::save_breaker`], [`Store::load_breaker`]).
//!
//! Both are re-fetchable, so losing them costs requests, never correctness:
//! a failed read is a cache miss and a failed write is logged and dropped.

use klaud_planner::plan::{CreationTime, CreationTimes};
use klaud_planner::registry::BreakerState;

use crate::{Record, Store, StoreError, trees};

/// Key prefix of creation times in the cache tree. Digests are content
/// addresses, so these records never expire and nothing prunes them.
const CREATION_PREFIX: &str = "creation-time/";
/// Key of the breaker record in the cache tree.
const BREAKER_KEY: &str = "registry-breaker";

impl Record for CreationTime {
    const VERSION: u32 = 1;
}

impl Record for BreakerState {
    const VERSION: u32 = 1;
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
}
