//! What the tests of validated PRs awaiting their merge share: one
//! validated candidate, the repository read as a maintainer, Klaud's reuse
//! lines on a PR, and its writes as kinds that compare across PRs.

use klaud_lifecycle::engine::{CandidateRecord, Journal};
use klaud_lifecycle::model::Outcome;
use klaud_sandbox::github::LogEntry;
use klaud_sandbox::stack::MAINTAINER_TOKEN;
use serde_json::Value;

use super::{BOT, Harness, REPO};

impl Harness {
    /// Drives family `key`'s candidate to its end over `journal` and checks
    /// that it was validated (the harness must run `VALIDATED_SCRIPT`).
    pub async fn validated(&self, journal: &dyn Journal, key: &str) -> CandidateRecord {
        let target = self.target(key).await;
        let rec = self.finish(journal, &target).await;
        assert_eq!(
            rec.ending.as_ref().map(|e| e.outcome),
            Some(Outcome::Validated),
            "{rec:#?}"
        );
        rec
    }

    /// `GET` of a repository path as the maintainer, raw.
    pub async fn get_as_maintainer(&self, path: &str) -> Value {
        klaud_http::http_client_builder()
            .user_agent("klaud-test")
            .build()
            .expect("client")
            .get(format!("{}/repos/{REPO}/{path}", self.stack.github.url()))
            .bearer_auth(MAINTAINER_TOKEN)
            .send()
            .await
            .expect("send")
            .json()
            .await
            .expect("json")
    }

    /// The ids of the bot's comments on `number` holding `line` as a whole
    /// line.
    pub async fn bot_lines(&self, number: impl Into<u64>, line: &str) -> Vec<u64> {
        let number: u64 = number.into();
        self.get_as_maintainer(&format!("issues/{number}/comments?per_page=100"))
            .await
            .as_array()
            .expect("comments")
            .iter()
            .filter(|c| c["user"]["login"].as_str() == Some(BOT))
            .filter(|c| {
                c["body"]
                    .as_str()
                    .is_some_and(|b| b.lines().any(|l| l.trim() == line))
            })
            .filter_map(|c| c["id"].as_u64())
            .collect()
    }

    /// The bot's writes since request number `from`, as [`write_kind`]s.
    pub async fn writes_since(&self, from: u64) -> Vec<String> {
        let (first, log) = self.stack.state().request_log_numbered().await;
        assert!(
            first <= from,
            "the request log dropped the entries looked at"
        );
        log[(from - first) as usize..]
            .iter()
            .filter(|e| is_bot_write(e))
            .map(|e| write_kind(&e.method, &e.path))
            .collect()
    }
}

/// Whether a logged request is one of the bot's writes (anything but a
/// read).
pub fn is_bot_write(e: &LogEntry) -> bool {
    e.method != "GET"
        && e.method != "HEAD"
        && e.login
            .as_deref()
            .is_some_and(|l| l.eq_ignore_ascii_case(BOT))
}

/// A write's kind: its method and path with what names one PR, branch,
/// claim or commit replaced, so two PRs' writes compare.
pub fn write_kind(method: &str, path: &str) -> String {
    let path = path.split('?').next().unwrap_or(path);
    let segments: Vec<&str> = path
        .split('/')
        .map(|s| {
            if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
                "{n}"
            } else if s.contains("auto-") {
                "{branch}"
            } else if s.contains("claim-") {
                "{claim}"
            } else if s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
                "{sha}"
            } else {
                s
            }
        })
        .collect();
    format!("{method} {}", segments.join("/"))
}
