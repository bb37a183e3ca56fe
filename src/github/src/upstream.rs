//! The planner's upstream proof: does a release of an engine contain the
//! commit a nightly was built from? Asked of the engine's public source
//! repository with GitHub's compare API (`<commit>...<release tag>`).

use klaud_lifecycle::BoxFuture;
use std::collections::HashMap;
use std::sync::Arc;

use klaud_planner::audit::{
    self, AuditResult, Collected, EngineDefinitions, RemovedItem, UncheckedCause,
};
use klaud_planner::plan::{UpstreamCompare, UpstreamError};
use tokio::sync::Mutex;

use super::{Credential, ForgeConfig, Github, GithubError, RetryPolicy};

/// [`UpstreamCompare`] over GitHub, one read-only forge per source repository.
pub struct GithubUpstream {
    api_url: String,
    credential: Credential,
    forges: Mutex<HashMap<String, Arc<Github>>>,
    audit: AuditOptions,
}

/// How the flag and environment audit reads an upstream compare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditOptions {
    /// Whether to audit at all.
    pub enabled: bool,
    /// The most changed files a compare may list to be audited (GitHub
    /// lists at most [`crate::api::COMPARE_FILE_LIMIT`]; a compare at that
    /// limit may hide more and is never read as complete).
    pub max_files: usize,
    /// Commits read per deleted item to find the one that deleted it (one
    /// `GET commits?path=` plus up to this many `GET commits/{sha}`).
    pub max_commit_lookups: usize,
    /// Where each engine defines its flags and variables.
    pub engines: Vec<EngineDefinitions>,
}

impl Default for AuditOptions {
    fn default() -> Self {
        Self {
            enabled: true,
            max_files: crate::api::COMPARE_FILE_LIMIT,
            max_commit_lookups: 10,
            engines: audit::default_engines(),
        }
    }
}

impl GithubUpstream {
    /// Compares through `api_url` with `credential` (reads of public
    /// repositories only; the bot identity is not checked here).
    pub fn new(api_url: &str, credential: Credential) -> Self {
        Self {
            api_url: api_url.to_owned(),
            credential,
            forges: Mutex::new(HashMap::new()),
            audit: AuditOptions::default(),
        }
    }

    /// Audits with `options` instead of the defaults.
    pub fn with_audit(mut self, options: AuditOptions) -> Self {
        self.audit = options;
        self
    }

    /// The audit settings.
    pub fn audit_options(&self) -> &AuditOptions {
        &self.audit
    }

    async fn forge(&self, source: &str) -> Result<Arc<Github>, GithubError> {
        let mut forges = self.forges.lock().await;
        if let Some(forge) = forges.get(source) {
            return Ok(Arc::clone(forge));
        }
        let forge = Arc::new(Github::connect_unchecked(ForgeConfig {
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
    pub fn commits_between<'f>(
        &'f self,
        source: &'f str,
        from: &'f str,
        to: &'f str,
    ) -> BoxFuture<'f, Result<Option<u64>, GithubError>> {
        Box::pin(async move {
            let forge = self.forge(source).await?;
            match forge.compare(from, to).await {
                Ok(c) if c.status.head_contains_base() => Ok(Some(c.ahead_by)),
                Ok(_) | Err(GithubError::NotFound { .. }) => Ok(None),
                Err(err) => Err(err),
            }
        })
    }
}

#[async_trait::async_trait]
impl UpstreamCompare for GithubUpstream {
    async fn release_contains(
        &self,
        source: &str,
        release_tag: &str,
        commit: &str,
    ) -> Result<Option<bool>, UpstreamError> {
        let forge = self
            .forge(source)
            .await
            .map_err(|e| UpstreamError(Box::new(e)))?;
        match forge.compare(commit, release_tag).await {
            // `ahead`/`identical`: the release descends from the commit.
            Ok(comparison) => Ok(Some(comparison.status.head_contains_base())),
            Err(GithubError::NotFound { .. }) => Ok(None),
            Err(err) => Err(UpstreamError(Box::new(err))),
        }
    }
}

impl GithubUpstream {
    /// Checks `collected` against the change `from...to` of `source`:
    /// `None` when auditing is off. Never an error: a compare that cannot
    /// be read, or is too large to read whole, is
    /// [`AuditResult::Unchecked`] with the reason, and does not block.
    pub fn audit<'f>(
        &'f self,
        source: &'f str,
        from: &'f str,
        to: &'f str,
        collected: &'f Collected,
    ) -> BoxFuture<'f, Option<AuditResult>> {
        Box::pin(async move {
            if !self.audit.enabled {
                return None;
            }
            let (flags, env) = collected.counts();
            let unchecked = |cause: UncheckedCause, reason: String| AuditResult::Unchecked {
                flags,
                env,
                cause,
                reason,
            };
            let Some(engine) = audit::engine_for(&self.audit.engines, source) else {
                return Some(unchecked(
                    UncheckedCause::NotConfigured,
                    format!("no flag and environment definitions are configured for {source}"),
                ));
            };
            let forge = match self.forge(source).await {
                Ok(f) => f,
                Err(e) => {
                    return Some(unchecked(
                        UncheckedCause::Unavailable,
                        format!("the compare is unavailable: {e}"),
                    ));
                }
            };
            let compare = match forge.compare_files(from, to).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(source, error = %e, "upstream compare for the audit unavailable");
                    return Some(unchecked(
                        UncheckedCause::Unavailable,
                        format!("the compare is unavailable: {e}"),
                    ));
                }
            };
            if !compare.status.head_contains_base() {
                return Some(unchecked(
                    UncheckedCause::NotLinear,
                    format!(
                        "the new commit does not descend from the old one (compare status {})",
                        compare.status
                    ),
                ));
            }
            let listed = compare.files.len();
            if listed >= crate::api::COMPARE_FILE_LIMIT {
                return Some(unchecked(
                    UncheckedCause::TooLarge,
                    format!(
                        "the compare is too large: GitHub lists at most {} changed files and this one may have more",
                        crate::api::COMPARE_FILE_LIMIT
                    ),
                ));
            }
            if listed > self.audit.max_files {
                return Some(unchecked(
                    UncheckedCause::TooLarge,
                    format!(
                        "the compare is too large: it lists {listed} changed files, more than the {} the audit reads",
                        self.audit.max_files
                    ),
                ));
            }
            let scan = match audit::scan(engine, &compare.files) {
                Ok(s) => s,
                Err(e) => return Some(unchecked(UncheckedCause::NotConfigured, e.to_string())),
            };
            let mut items = audit::removed_items(collected, &scan);
            if items.is_empty() {
                if let Some(file) = scan.unreadable.first() {
                    return Some(unchecked(
                        UncheckedCause::TooLarge,
                        format!("the compare is too large: GitHub shows no diff for {file}"),
                    ));
                }
                return Some(AuditResult::Present { flags, env });
            }
            for item in &mut items {
                item.commit = self.removing_commit(&forge, engine, to, item).await;
            }
            Some(AuditResult::Removed { flags, env, items })
        })
    }

    /// The newest commit up to `to` whose patch of the item's file deletes
    /// its definition: since `to` lacks it and the old commit had it, that
    /// commit lies in the range. A per-file lookup (the commits touching
    /// that one file) costs a page plus a few commits, where walking the
    /// compare's commits would cost one request per commit in the range.
    async fn removing_commit(
        &self,
        forge: &Github,
        engine: &EngineDefinitions,
        to: &str,
        item: &RemovedItem,
    ) -> Option<String> {
        let max = self.audit.max_commit_lookups;
        if max == 0 {
            return None;
        }
        let shas = match forge.commits_touching(&item.file, to, max).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(file = %item.file, error = %e, "commits touching a definition file unknown");
                return None;
            }
        };
        for sha in shas.into_iter().take(max) {
            let files = match forge.commit_files(&sha).await {
                Ok(f) => f,
                Err(e) => {
                    tracing::warn!(%sha, error = %e, "upstream commit unreadable");
                    return None;
                }
            };
            let removes = files.iter().any(|f| {
                f.filename == item.file
                    && f.patch
                        .as_deref()
                        .is_some_and(|p| audit::patch_removes(engine, &f.filename, p, item))
            });
            if removes {
                return Some(sha);
            }
        }
        None
    }
}
