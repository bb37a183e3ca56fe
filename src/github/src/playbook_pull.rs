//! The pull request that adds a learned entry to the repository's playbook,
//! opened when a maintainer ticks its box on the dashboard issue.
//!
//! The write is narrow: one branch under [`PLAYBOOK_BRANCH_PREFIX`], one
//! commit on the base's tip changing one file, one pull request from that
//! branch. It is idempotent by the branch's name: a pull request already
//! opened from it (in any state: a person's close is their decision) is
//! returned, and a branch left by a crash before its pull request is used
//! as it is, so a box applied twice opens one pull request.

use klaud_lifecycle::BoxFuture;

use super::api::{PullInfo, TreeChange};
use super::{Github, GithubError};

/// The only branches [`Github::open_playbook_pull`] creates.
pub const PLAYBOOK_BRANCH_PREFIX: &str = "klaud/playbook/";

/// What the playbook pull request is made of.
#[derive(Debug, Clone)]
pub struct PlaybookPull<'a> {
    /// The base branch the pull request targets.
    pub base: &'a str,
    /// The base's tip the commit goes on (the file's bytes were read there).
    pub base_sha: &'a str,
    /// The branch, under [`PLAYBOOK_BRANCH_PREFIX`].
    pub branch: &'a str,
    /// The playbook's path.
    pub path: &'a str,
    /// The whole file with the entry added.
    pub content: &'a [u8],
    /// The commit message.
    pub message: &'a str,
    /// The pull request's title and body.
    pub title: &'a str,
    /// The pull request's body.
    pub body: &'a str,
}

impl Github {
    /// Opens (or finds) the pull request of `req`; see the module.
    pub fn open_playbook_pull<'f>(
        &'f self,
        req: &'f PlaybookPull<'f>,
    ) -> BoxFuture<'f, Result<PullInfo, GithubError>> {
        Box::pin(async move {
            let what = format!("open the playbook pull request from {}", req.branch);
            let name = req
                .branch
                .strip_prefix(PLAYBOOK_BRANCH_PREFIX)
                .unwrap_or("");
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            {
                return Err(GithubError::Config(format!(
                    "{what}: the branch is not {PLAYBOOK_BRANCH_PREFIX}<entry id>"
                )));
            }
            if let Some(p) = self.find_pull_for_head(req.branch, "all").await? {
                return Ok(p);
            }
            let full = format!("refs/heads/{}", req.branch);
            if self.get_ref(&full).await?.is_none() {
                let tree = self.tree_of(req.base_sha).await?;
                let change = [TreeChange {
                    path: req.path.to_owned(),
                    content: Some(req.content.to_vec()),
                    executable: false,
                }];
                let tree = self.create_tree(Some(&tree), &change).await?;
                let commit = self
                    .create_commit(req.message, &tree, &[req.base_sha.to_owned()])
                    .await?;
                match self.create_ref(&full, &commit).await {
                    // Another instance made it meanwhile: its commit is the
                    // same change, and its pull request is found below.
                    Ok(()) | Err(GithubError::AlreadyExists { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            match self
                .create_pull(req.title, req.branch, req.base, req.body, false)
                .await
            {
                Ok(p) => Ok(p),
                Err(e) => match self.find_pull_for_head(req.branch, "all").await? {
                    Some(p) => Ok(p),
                    None => Err(e),
                },
            }
        })
    }
}
