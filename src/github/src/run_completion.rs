//! Adapters from the forge to what `klaud-claims` needs besides refs: the
//! state of the workflow run that owns a lease-less (old helper) claim, and
//! the base a claim is made on.

use async_trait::async_trait;
use klaud_claims::{RunCompletion, RunCompletionError};
use klaud_lifecycle::BoxFuture;
use serde::Deserialize;

use super::{Github, GithubError};

/// [`RunCompletion`] over the forge's Actions reads: a lease-less claim may only
/// be taken over once its owner run has completed.
#[derive(Debug, Clone, Copy)]
pub struct ForgeRunCompletion<'a> {
    forge: &'a Github,
}

impl<'a> ForgeRunCompletion<'a> {
    /// Answers from `forge`'s repository.
    pub fn new(forge: &'a Github) -> Self {
        Self { forge }
    }
}

#[async_trait]
impl RunCompletion for ForgeRunCompletion<'_> {
    async fn run_completed(&self, run_id: u64) -> Result<Option<bool>, RunCompletionError> {
        match self.forge.get_run(run_id).await {
            // A run without a status cannot be told apart from a running
            // one; `None` makes the takeover refuse instead of guessing.
            Ok(run) => Ok(run.status.as_ref().map(|s| s.is_completed())),
            // Deleted, or from another repository: unknowable, so refuse.
            Err(GithubError::NotFound { .. }) => Ok(None),
            Err(e) => Err(RunCompletionError::new(e)),
        }
    }
}

impl Github {
    /// The repository's default branch (`GET /repos/{owner}/{name}`), the
    /// branch claims are based on.
    pub fn default_branch<'f>(&'f self) -> BoxFuture<'f, Result<String, GithubError>> {
        Box::pin(async move {
            #[derive(Deserialize)]
            struct RepoInfo {
                default_branch: String,
            }
            let what = format!("read repository {}", self.repo());
            let info: RepoInfo = self
                .t
                .get_json(&what, &format!("/repos/{}", self.repo()))
                .await?;
            if info.default_branch.trim().is_empty() {
                return Err(GithubError::Decode {
                    what,
                    detail: "the repository has an empty default_branch".into(),
                });
            }
            Ok(info.default_branch)
        })
    }
}
