//! A candidate's own writes, told from those of the lifecycles stepped
//! alongside it.

use super::{Harness, REPO};

/// Klaud's successful writes since `from` in the sandbox's request log,
/// as `METHOD path`.
pub async fn writes_since(env: &Harness, from: usize) -> Vec<String> {
    env.stack.state().request_log().await[from..]
        .iter()
        .filter(|e| e.method != "GET" && e.status < 300)
        .map(|e| format!("{} {}", e.method, e.path))
        .collect()
}

/// One candidate's own things, by which its writes are told from those
/// of the other lifecycles a wave steps alongside it.
pub struct Own<'a> {
    pub pull: u64,
    /// Ids of the comments on its PR.
    pub comments: &'a [u64],
    pub runs: &'a [u64],
    pub family: &'a str,
    pub branch: &'a str,
}

impl Own<'_> {
    /// Whether a write (`METHOD path`) names one of the candidate's things.
    /// Writes naming nothing (a dispatch, a GraphQL commit) are not
    /// attributed here: the callers check the runs and the head instead.
    pub fn named_by(&self, write: &str) -> bool {
        let path = write.split_once(' ').map_or(write, |(_, path)| path);
        let Some(rest) = path.strip_prefix(&format!("/repos/{REPO}/")) else {
            return false;
        };
        let segments: Vec<&str> = rest.split('/').collect();
        let number = |i: usize| segments.get(i).and_then(|s| s.parse::<u64>().ok());
        match segments.as_slice() {
            ["issues", "comments", ..] => number(2).is_some_and(|id| self.comments.contains(&id)),
            ["issues" | "pulls", ..] => number(1) == Some(self.pull),
            ["actions", "runs", ..] => number(2).is_some_and(|id| self.runs.contains(&id)),
            ["git", "refs", "heads", branch @ ..] => {
                let branch = branch.join("/");
                branch == self.branch
                    || (branch.starts_with("klaud/claim-") && branch.ends_with(self.family))
            }
            _ => false,
        }
    }

    /// Counts the receipt writes (a new comment on the PR, or the edit of
    /// one of its comments: a run first seen running has its live report
    /// posted then, and the receipt is folded into it) and the run cancels
    /// among `writes`; any other write but the claim's (its ref and its
    /// commit object) fails the test.
    pub fn receipt_cancels_and_claim_only(&self, writes: &[String]) -> (usize, usize) {
        let receipt = format!("POST /repos/{REPO}/issues/{}/comments", self.pull);
        let edit = format!("PATCH /repos/{REPO}/issues/comments/");
        let mut receipts = 0;
        let mut cancels = 0;
        for w in writes {
            if *w == receipt || (w.starts_with(&edit) && self.named_by(w)) {
                receipts += 1;
            } else if w.starts_with("POST ") && w.ends_with("/cancel") && self.named_by(w) {
                cancels += 1;
            } else {
                assert!(
                    w.contains("/git/refs/heads/klaud/claim-") || w.contains("/git/commits"),
                    "only the receipt, cancels and the claim release: {w} in {writes:#?}"
                );
            }
        }
        (receipts, cancels)
    }
}

/// Ids of the workflow runs on GitHub whose display title and head branch
/// (`""` where GitHub gives none) `keep` accepts.
pub async fn run_ids_where(env: &Harness, keep: impl Fn(&str, &str) -> bool) -> Vec<u64> {
    env.forge
        .list_runs(&klaud_github::RunFilter::default())
        .await
        .expect("runs")
        .into_iter()
        .filter(|r| {
            keep(
                r.display_title.as_deref().unwrap_or(""),
                r.head_branch.as_deref().unwrap_or(""),
            )
        })
        .map(|r| r.id)
        .collect()
}

/// Runs whose title or branch names `family`.
pub async fn family_runs(env: &Harness, family: &str) -> usize {
    run_ids_where(env, |title, branch| {
        title.contains(family) || branch.contains(family)
    })
    .await
    .len()
}
