//! Fault injection: a route pattern plus method and count, answered with a
//! status (and optional `retry-after`), a delay, or "perform the write, then
//! fail" (502 or a dropped connection) — the ambiguous failures Klaud's write
//! policy must survive.

use serde::{Deserialize, Serialize};

/// What an injected fault does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FaultAction {
    /// Answer `status` without running the handler. A 403/429 with
    /// `retry_after` is how GitHub reports a secondary rate limit.
    Status {
        status: u16,
        #[serde(default)]
        retry_after: Option<u64>,
        #[serde(default)]
        message: Option<String>,
    },
    /// GitHub's secondary rate limit as GitHub sends it: `status` (403 by
    /// default, or 429) with GitHub's message, the usual `x-ratelimit-*`
    /// headers (the primary window is not spent), and `retry-after` only
    /// when given — GitHub often omits it, and then clients must wait at
    /// least a minute. The request is not performed.
    SecondaryLimit {
        #[serde(default = "default_forbidden")]
        status: u16,
        #[serde(default)]
        retry_after: Option<u64>,
    },
    /// Wait before handling the request normally.
    Delay { millis: u64 },
    /// Run the handler (the write happens), then answer `status` instead
    /// (default 502 Bad Gateway).
    AfterWriteStatus {
        #[serde(default = "default_bad_gateway")]
        status: u16,
    },
    /// Run the handler (the write happens), then break the response stream
    /// so the client never sees a complete answer.
    AfterWriteDrop,
}

fn default_bad_gateway() -> u16 {
    502
}

fn default_forbidden() -> u16 {
    403
}

/// GitHub's words for its secondary limit.
pub const SECONDARY_LIMIT_MESSAGE: &str = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. If you reach out to GitHub Support for help, please include the request ID.";

fn default_count() -> u32 {
    1
}

/// One installed fault. `path` is a glob over the request path where `*`
/// matches any run of characters (slashes included).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    /// HTTP method to match; any method when absent.
    #[serde(default)]
    pub method: Option<String>,
    /// Glob over the path (no query), e.g. `/repos/*/pulls`.
    pub path: String,
    /// How many matching requests it affects.
    #[serde(default = "default_count")]
    pub count: u32,
    pub action: FaultAction,
}

impl Fault {
    /// `count` `method` requests to `path` answered with `status` and no
    /// `retry-after` or message: the plain failure most tests stage.
    pub fn status(method: &str, path: impl Into<String>, count: u32, status: u16) -> Self {
        Self {
            method: Some(method.to_owned()),
            path: path.into(),
            count,
            action: FaultAction::Status {
                status,
                retry_after: None,
                message: None,
            },
        }
    }

    /// Whether this fault applies to a request.
    pub fn matches(&self, method: &str, path: &str) -> bool {
        self.count > 0
            && self
                .method
                .as_deref()
                .is_none_or(|m| m.eq_ignore_ascii_case(method))
            && klaud_planner::glob::wildcard(&self.path, path)
    }
}

/// Takes the first live fault matching the request, consuming one use.
pub fn take(faults: &mut Vec<Fault>, method: &str, path: &str) -> Option<FaultAction> {
    let idx = faults.iter().position(|f| f.matches(method, path))?;
    let f = &mut faults[idx];
    f.count -= 1;
    let action = f.action.clone();
    if f.count == 0 {
        faults.remove(idx);
    }
    Some(action)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_is_consumed_after_count_uses() {
        let mut fs = vec![Fault {
            method: Some("POST".into()),
            path: "/a".into(),
            count: 2,
            action: FaultAction::AfterWriteDrop,
        }];
        assert!(take(&mut fs, "GET", "/a").is_none());
        assert!(take(&mut fs, "post", "/a").is_some());
        assert!(take(&mut fs, "POST", "/a").is_some());
        assert!(take(&mut fs, "POST", "/a").is_none());
    }
}
