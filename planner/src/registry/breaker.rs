//! A circuit breaker per network host: the first connection-level failure
//! (DNS, refused, connect or request timeout) of a host stops every further
//! request to it until a cooldown passes, so one unreachable host (Docker
//! Hub's API behind a proxy that never answers, a mirror that is down)
//! costs one failed request instead of retries for every family.
//!
//! The state is a small serializable value ([`BreakerState`]) so a daemon
//! can persist it between runs and restore it with
//! [`super::RegistryClient::restore_breaker`]: a restarted daemon then does
//! not ask a host it learned minutes ago is unreachable.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One host the breaker stopped asking.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrippedHost {
    /// The network host (`hub.docker.com`, `127.0.0.1:5000`): the URL's
    /// authority, after mirrors.
    pub host: String,
    /// What failed, e.g. `dns error: failed to lookup address information`.
    pub reason: String,
    /// When it failed.
    pub since: DateTime<Utc>,
    /// No request goes to the host before this time.
    pub until: DateTime<Utc>,
}

/// Every host currently tripped; persist it and hand it back with
/// [`super::RegistryClient::restore_breaker`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakerState {
    /// Tripped hosts, by host name.
    pub hosts: Vec<TrippedHost>,
}

pub(crate) struct Breaker {
    cooldown: Duration,
    hosts: Mutex<BTreeMap<String, TrippedHost>>,
}

impl Breaker {
    pub(crate) fn new(cooldown: Duration) -> Self {
        Self {
            cooldown,
            hosts: Mutex::new(BTreeMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, TrippedHost>> {
        self.hosts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The trip in force for `host` at `now`, if any.
    pub(crate) fn tripped(&self, host: &str, now: DateTime<Utc>) -> Option<TrippedHost> {
        let mut hosts = self.lock();
        match hosts.get(host) {
            Some(trip) if trip.until > now => Some(trip.clone()),
            Some(_) => {
                hosts.remove(host);
                None
            }
            None => None,
        }
    }

    /// Records a connection-level failure; concurrent failures of the same
    /// host keep the first trip.
    pub(crate) fn trip(&self, host: &str, reason: &str, now: DateTime<Utc>) -> TrippedHost {
        let cooldown = chrono::Duration::from_std(self.cooldown).unwrap_or(chrono::Duration::MAX);
        let until = now
            .checked_add_signed(cooldown)
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        let mut hosts = self.lock();
        let entry = hosts
            .entry(host.to_owned())
            .and_modify(|t| {
                if t.until <= now {
                    *t = TrippedHost {
                        host: host.to_owned(),
                        reason: reason.to_owned(),
                        since: now,
                        until,
                    };
                }
            })
            .or_insert_with(|| TrippedHost {
                host: host.to_owned(),
                reason: reason.to_owned(),
                since: now,
                until,
            });
        entry.clone()
    }

    /// Opens `host`'s breaker until `until` (a registry that said when it
    /// answers again), keeping a later end already set.
    pub(crate) fn trip_until(
        &self,
        host: &str,
        reason: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> TrippedHost {
        let mut hosts = self.lock();
        let entry = hosts
            .entry(host.to_owned())
            .and_modify(|t| {
                if t.until < until {
                    *t = TrippedHost {
                        host: host.to_owned(),
                        reason: reason.to_owned(),
                        since: now,
                        until,
                    };
                }
            })
            .or_insert_with(|| TrippedHost {
                host: host.to_owned(),
                reason: reason.to_owned(),
                since: now,
                until,
            });
        entry.clone()
    }

    pub(crate) fn state(&self, now: DateTime<Utc>) -> BreakerState {
        BreakerState {
            hosts: self
                .lock()
                .values()
                .filter(|t| t.until > now)
                .cloned()
                .collect(),
        }
    }

    /// Adds the unexpired trips of `state`; a trip already known is kept
    /// when it lasts longer.
    pub(crate) fn restore(&self, state: &BreakerState, now: DateTime<Utc>) {
        let mut hosts = self.lock();
        for trip in state.hosts.iter().filter(|t| t.until > now) {
            let keep = hosts.get(&trip.host).is_some_and(|t| t.until >= trip.until);
            if !keep {
                hosts.insert(trip.host.clone(), trip.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn a_trip_lasts_the_cooldown_and_survives_a_round_trip_through_json() {
        let b = Breaker::new(Duration::from_secs(600));
        let now = at("2026-12-01T08:00:00Z");
        assert_eq!(b.tripped("hub.docker.com", now), None);
        let trip = b.trip("hub.docker.com", "dns error", now);
        assert_eq!(trip.until, at("2026-12-01T08:10:00Z"));
        // A second failure during the cooldown does not extend it.
        b.trip("hub.docker.com", "timeout", at("2026-12-01T08:05:00Z"));
        let held = b
            .tripped("hub.docker.com", at("2026-12-01T08:09:59Z"))
            .unwrap();
        assert_eq!(held.reason, "dns error");
        assert_eq!(b.tripped("nvcr.io", now), None, "per host");

        let json = serde_json::to_string(&b.state(now)).unwrap();
        let restored = Breaker::new(Duration::from_secs(600));
        restored.restore(
            &serde_json::from_str(&json).unwrap(),
            at("2026-12-01T08:01:00Z"),
        );
        assert!(
            restored
                .tripped("hub.docker.com", at("2026-12-01T08:02:00Z"))
                .is_some()
        );
        assert_eq!(
            restored.tripped("hub.docker.com", at("2026-12-01T08:10:00Z")),
            None
        );
        assert!(restored.state(at("2026-12-01T08:10:00Z")).hosts.is_empty());
        // Expired trips are not restored.
        let late = Breaker::new(Duration::from_secs(600));
        late.restore(
            &serde_json::from_str(&json).unwrap(),
            at("2026-12-01T09:00:00Z"),
        );
        assert!(late.state(at("2026-12-01T09:00:00Z")).hosts.is_empty());
    }
}
