//! The planner's upstream proof: does a release of an engine contain the
//! commit a nightly was built from? Asked of the engine's public source
//! repository with GitHub's compare API (`<commit>...<release tag>`).

use std::collections::HashMap;
use std::sync::Arc;

use klaud_planner::plan::UpstreamCompare;
use tokio::sync::Mutex;

use super::{Credential, Forge, ForgeConfig, GithubError, RetryPolicy};

/// [`UpstreamCompare`] over GitHub, one read-only forge per source repository.
pub struct GithubUpstream {
    api_url: String,
    credential: Credential,
    forges: Mutex<HashMap<String, Arc<Forge>>>,
}

impl GithubUpstream {
    /// Compares through `api_url` with `credential` (reads of public
    /// repositories only; the bot identity is not checked here).
    pub fn new(api_url: &str, credential: Credential) -> Self {
        Self {
            api_url: api_url.to_owned(),
            credential,
            forges: Mutex::new(HashMap::new()),
        }
    }

    async fn forge(&self, source: &str) -> Result<Arc<Forge>, GithubError> {
        let mut forges = self.forges.lock().await;
        if let Some(forge) = forges.get(source) {
            return Ok(Arc::clone(forge));
        }
        let forge = Arc::new(Forge::connect_unchecked(ForgeConfig {
            api_url: self.api_url.clone(),
            repo: source.to_owned(),
            // Only reads of a public repository: no identity to check.
            bot_login: "upstream-reader".to_owned(),
            credential: self.credential.clone(),
            retry: RetryPolicy::default(),
        })?);
        forges.insert(source.to_owned(), Arc::clone(&forge));
        Ok(forge)
    }
}

impl GithubUpstream {
    /// Commits from `from` to `to` in `source` (GitHub compare
    /// `from...to`): `Some(n)` when `to` descends from `from`, `None` when
    /// the range is unknown (a commit not found) or not linear.
    pub async fn commits_between(
        &self,
        source: &str,
        from: &str,
        to: &str,
    ) -> Result<Option<u64>, String> {
        let forge = self.forge(source).await.map_err(|e| e.to_string())?;
        match forge.compare(from, to).await {
            Ok(c) if matches!(c.status.as_str(), "ahead" | "identical") => Ok(Some(c.ahead_by)),
            Ok(_) | Err(GithubError::NotFound { .. }) => Ok(None),
            Err(err) => Err(err.to_string()),
        }
    }
}

#[async_trait::async_trait]
impl UpstreamCompare for GithubUpstream {
    async fn release_contains(
        &self,
        source: &str,
        release_tag: &str,
        commit: &str,
    ) -> Result<Option<bool>, String> {
        let forge = self.forge(source).await.map_err(|e| e.to_string())?;
        match forge.compare(commit, release_tag).await {
            // `ahead`/`identical`: the release descends from the commit.
            Ok(comparison) => Ok(Some(matches!(
                comparison.status.as_str(),
                "ahead" | "identical"
            ))),
            Err(GithubError::NotFound { .. }) => Ok(None),
            Err(err) => Err(err.to_string()),
        }
    }
}
