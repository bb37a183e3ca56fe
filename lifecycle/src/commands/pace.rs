//! How often someone who may not command Klaud is told so on one PR: at
//! most once per [`REFUSAL_INTERVAL`]. Every refusal answers a reader's
//! commands with a reply GitHub notifies the PR's subscribers of, so a burst
//! of them (or one a pass, pass after pass) would spam the maintainers and
//! spend the write budget the lifecycle needs. One reply covers all of that
//! person's unanswered commands so far; the ones after it wait, unanswered,
//! until the interval is over and the next reply covers them too.
//!
//! The pace is read from GitHub, not from the store: each refusal reply
//! carries a hidden `<!-- klaud-refused:<login>:<unix seconds> -->`, so a
//! lost store or a second instance keeps the same pace.

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};

/// The least time between two refusal replies to one person on one PR.
pub const REFUSAL_INTERVAL: TimeDelta = TimeDelta::hours(1);

const REFUSED_PREFIX: &str = "<!-- klaud-refused:";

/// A login as it is kept in a marker: GitHub logins are ASCII letters,
/// digits and hyphens; anything else (an unknown author) is dropped, and
/// case does not tell two logins apart.
fn marker_login(login: &str) -> String {
    login
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .take(64)
        .collect::<String>()
        .to_ascii_lowercase()
}

/// The hidden marker of a refusal reply to `login` posted at `at`.
pub fn refusal_marker(login: &str, at: DateTime<Utc>) -> String {
    format!(
        "{REFUSED_PREFIX}{}:{} -->",
        marker_login(login),
        at.timestamp()
    )
}

/// The latest refusal each person got, from the bodies of Klaud's own
/// comments on a PR (others' comments must not be passed: anyone can write
/// a marker). Malformed markers are ignored.
pub fn last_refusals<'b>(
    bodies: impl IntoIterator<Item = &'b str>,
) -> BTreeMap<String, DateTime<Utc>> {
    let mut last: BTreeMap<String, DateTime<Utc>> = BTreeMap::new();
    for body in bodies {
        for (at, _) in body.match_indices(REFUSED_PREFIX) {
            let rest = &body[at + REFUSED_PREFIX.len()..];
            let Some(end) = rest.find("-->") else {
                continue;
            };
            let Some((login, secs)) = rest[..end].trim().rsplit_once(':') else {
                continue;
            };
            let Some(when) = secs
                .parse::<i64>()
                .ok()
                .and_then(|s| DateTime::from_timestamp(s, 0))
            else {
                continue;
            };
            let login = marker_login(login);
            if login.is_empty() {
                continue;
            }
            let entry = last.entry(login).or_insert(when);
            *entry = (*entry).max(when);
        }
    }
    last
}

/// Whether `login` may be sent a refusal now, given the refusals so far.
pub fn refusal_due(
    last: &BTreeMap<String, DateTime<Utc>>,
    login: &str,
    now: DateTime<Utc>,
) -> bool {
    last.get(&marker_login(login))
        .is_none_or(|at| now - *at >= REFUSAL_INTERVAL)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(secs, 0).expect("time")
    }

    #[test]
    fn the_latest_refusal_per_person_is_read_back_and_paces_the_next() {
        let bodies = [
            format!("x {}", refusal_marker("Reader", at(1_000))),
            format!("{} y", refusal_marker("reader", at(5_000))),
            refusal_marker("other", at(2_000)),
        ];
        let last = last_refusals(bodies.iter().map(String::as_str));
        assert_eq!(last.get("reader"), Some(&at(5_000)));
        assert!(!refusal_due(&last, "READER", at(5_000 + 3_599)));
        assert!(refusal_due(&last, "reader", at(5_000 + 3_600)));
        assert!(refusal_due(&last, "someone-new", at(0)));
    }

    #[test]
    fn malformed_markers_are_ignored() {
        for junk in [
            "<!-- klaud-refused:",
            "<!-- klaud-refused:reader -->",
            "<!-- klaud-refused:reader:soon -->",
            "<!-- klaud-refused::100 -->",
            "<!-- klaud-refused:reader:99999999999999999999 -->",
        ] {
            assert!(last_refusals([junk]).is_empty(), "{junk}");
        }
    }
}
