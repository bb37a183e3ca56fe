//! Per-plan memoization with single-flight semantics.

use futures::future::BoxFuture;
use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::client::{HubTags, OnceMap, RegistryClient};
use super::error::RegistryError;
use super::model::{ImageDetails, ImagePlatforms, ManifestHead, PlatformImage, PlatformRef};

type Shared<T> = Result<T, RegistryError>;
type PushTimes = Option<Arc<BTreeMap<String, DateTime<Utc>>>>;
type HubAnswer = Option<(Arc<HubTags>, Arc<BTreeMap<String, DateTime<Utc>>>)>;

/// One plan's view of the registries. Within a session each repository's tags
/// are listed once, each reference resolved once and each Docker Hub history
/// read once, however many families ask and however concurrently: callers of
/// the same key wait for one shared request and get the same answer, errors
/// included, so a plan sees a consistent picture. Image platforms and
/// per-platform labels come from the client's by-digest caches, which outlive
/// sessions.
#[derive(Clone)]
pub struct RegistrySession {
    client: RegistryClient,
    memo: Arc<Memo>,
}

impl std::fmt::Debug for RegistrySession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistrySession").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Memo {
    tags: OnceMap<(String, String), Shared<Arc<Vec<String>>>>,
    heads: OnceMap<(String, String, String), Shared<ManifestHead>>,
    hub: OnceMap<(String, String), Shared<HubAnswer>>,
    details: OnceMap<(String, String, String), Shared<Arc<ImageDetails>>>,
    indexes: OnceMap<(String, String, String), Shared<Arc<ImagePlatforms>>>,
    platforms: OnceMap<(String, String, PlatformRef), Shared<Arc<PlatformImage>>>,
}

impl RegistryClient {
    /// A per-plan view that lists each repository's tags and resolves each
    /// tag at most once.
    pub fn session(&self) -> RegistrySession {
        RegistrySession::new(self.clone())
    }
}

impl RegistrySession {
    pub(crate) fn new(client: RegistryClient) -> Self {
        Self {
            client,
            memo: Arc::default(),
        }
    }

    /// The client this session reads through.
    pub fn client(&self) -> &RegistryClient {
        &self.client
    }

    /// Digest and media type of `reference` (tag or digest); a missing one is
    /// [`RegistryError::NotFound`].
    pub fn head_manifest<'f>(
        &'f self,
        host: &'f str,
        repository: &'f str,
        reference: &'f str,
    ) -> BoxFuture<'f, Result<ManifestHead, RegistryError>> {
        Box::pin(async move {
            let key = (host.to_owned(), repository.to_owned(), reference.to_owned());
            let cell = self.memo.heads.cell(&key);
            cell.get_or_init(|| self.client.head_manifest(host, repository, reference))
                .await
                .clone()
        })
    }

    /// Like [`Self::head_manifest`], for a reference whose index the caller
    /// reads next: see [`RegistryClient::resolve_for_read`]. Shares the
    /// memo of [`Self::head_manifest`], so a tag is resolved once per plan
    /// whichever way is asked first.
    pub fn resolve_for_read<'f>(
        &'f self,
        host: &'f str,
        repository: &'f str,
        reference: &'f str,
    ) -> BoxFuture<'f, Result<ManifestHead, RegistryError>> {
        Box::pin(async move {
            let key = (host.to_owned(), repository.to_owned(), reference.to_owned());
            let cell = self.memo.heads.cell(&key);
            cell.get_or_init(|| self.client.resolve_for_read(host, repository, reference))
                .await
                .clone()
        })
    }

    /// Every tag of the repository, in the registry's order.
    pub fn list_tags<'f>(
        &'f self,
        host: &'f str,
        repository: &'f str,
    ) -> BoxFuture<'f, Result<Arc<Vec<String>>, RegistryError>> {
        Box::pin(async move {
            let key = (host.to_owned(), repository.to_owned());
            let cell = self.memo.tags.cell(&key);
            cell.get_or_init(|| async {
                self.client.list_tags(host, repository).await.map(Arc::new)
            })
            .await
            .clone()
        })
    }

    /// Platforms, labels and `created` of an image by digest. Successes come
    /// from the client's by-digest cache, which outlives the session; a
    /// failure is remembered for the rest of this session only, so families
    /// sharing a broken candidate do not each retry it.
    pub fn image_details<'f>(
        &'f self,
        host: &'f str,
        repository: &'f str,
        digest: &'f str,
    ) -> BoxFuture<'f, Result<Arc<ImageDetails>, RegistryError>> {
        Box::pin(async move {
            let key = (host.to_owned(), repository.to_owned(), digest.to_owned());
            let cell = self.memo.details.cell(&key);
            cell.get_or_init(|| self.client.image_details(host, repository, digest))
                .await
                .clone()
        })
    }

    /// Which platforms an image by digest lists (the index only; see
    /// [`RegistryClient::image_platforms`]). Successes come from the client's
    /// by-digest cache; a failure is remembered for the rest of this session.
    pub fn image_platforms<'f>(
        &'f self,
        host: &'f str,
        repository: &'f str,
        digest: &'f str,
    ) -> BoxFuture<'f, Result<Arc<ImagePlatforms>, RegistryError>> {
        Box::pin(async move {
            let key = (host.to_owned(), repository.to_owned(), digest.to_owned());
            let cell = self.memo.indexes.cell(&key);
            cell.get_or_init(|| self.client.image_platforms(host, repository, digest))
                .await
                .clone()
        })
    }

    /// Labels and `created` of one platform from [`Self::image_platforms`]:
    /// only that platform's manifest and config are read, once per client;
    /// a failure is remembered for the rest of this session.
    pub fn platform_image<'f>(
        &'f self,
        host: &'f str,
        repository: &'f str,
        platform: &'f PlatformRef,
    ) -> BoxFuture<'f, Result<Arc<PlatformImage>, RegistryError>> {
        Box::pin(async move {
            let key = (host.to_owned(), repository.to_owned(), platform.clone());
            let cell = self.memo.platforms.cell(&key);
            cell.get_or_init(|| self.client.platform_image(host, repository, platform))
                .await
                .clone()
        })
    }

    /// Docker Hub push times (`tag_last_pushed`) for a repository. `None`
    /// when `host` has no Docker Hub tags API (only Docker Hub itself or
    /// registries configured with one do) or the API has nothing for the
    /// repository; the planner then falls back to image creation times.
    pub fn hub_push_times<'f>(
        &'f self,
        host: &'f str,
        repository: &'f str,
    ) -> BoxFuture<'f, Result<PushTimes, RegistryError>> {
        Box::pin(async move {
            Ok(self
                .hub_answer(host, repository)
                .await?
                .map(|(_, times)| times))
        })
    }

    /// What Docker Hub's tags API says of each tag (push time, digest,
    /// platforms), read once per plan like [`Self::hub_push_times`], which
    /// shares the same listing; `None` likewise.
    pub fn hub_tags<'f>(
        &'f self,
        host: &'f str,
        repository: &'f str,
    ) -> BoxFuture<'f, Result<Option<Arc<HubTags>>, RegistryError>> {
        Box::pin(async move {
            Ok(self
                .hub_answer(host, repository)
                .await?
                .map(|(tags, _)| tags))
        })
    }

    /// What the tags API said of `tag`, when the listing was already read
    /// in this plan (by ordering its track); never sends a request.
    pub fn hub_tag_if_read(
        &self,
        host: &str,
        repository: &str,
        tag: &str,
    ) -> Option<super::HubTagInfo> {
        let cell = self
            .memo
            .hub
            .cell(&(host.to_owned(), repository.to_owned()));
        match cell.get()? {
            Ok(Some((tags, _))) => tags.get(tag).cloned(),
            _ => None,
        }
    }

    /// Whether this plan read the tags API listing of the repository (and
    /// it answered).
    pub fn hub_tag_listing_read(&self, host: &str, repository: &str) -> bool {
        let cell = self
            .memo
            .hub
            .cell(&(host.to_owned(), repository.to_owned()));
        matches!(cell.get(), Some(Ok(Some(_))))
    }

    /// The tag list this plan read, if it read one; never sends a request.
    pub fn tags_if_listed(&self, host: &str, repository: &str) -> Option<Arc<Vec<String>>> {
        self.memo
            .tags
            .peek(&(host.to_owned(), repository.to_owned()))
            .and_then(Result::ok)
    }

    /// What the tags API said of the repository, if this plan read it and
    /// it answered; never sends a request.
    pub fn hub_tags_if_read(&self, host: &str, repository: &str) -> Option<Arc<HubTags>> {
        match self
            .memo
            .hub
            .peek(&(host.to_owned(), repository.to_owned()))?
        {
            Ok(Some((tags, _))) => Some(tags),
            _ => None,
        }
    }

    /// What this plan learned of `tag`'s image (see
    /// [`super::ObservedImage`]); never sends a request.
    pub fn observed(
        &self,
        host: &str,
        repository: &str,
        tag: &str,
    ) -> Option<super::ObservedImage> {
        let head = self
            .memo
            .heads
            .peek(&(host.to_owned(), repository.to_owned(), tag.to_owned()))?
            .ok()?;
        self.client.observed(&head.digest)
    }

    fn hub_answer<'f>(
        &'f self,
        host: &'f str,
        repository: &'f str,
    ) -> BoxFuture<'f, Result<HubAnswer, RegistryError>> {
        Box::pin(async move {
            if self.client.config().hub_api_for(host).is_none() {
                return Ok(None);
            }
            let cell = self
                .memo
                .hub
                .cell(&(host.to_owned(), repository.to_owned()));
            cell.get_or_init(|| async {
                let tags = self.client.hub_tags(host, repository).await?;
                Ok(tags.map(|tags| {
                    let times = tags
                        .iter()
                        .filter_map(|(tag, info)| info.pushed.map(|p| (tag.clone(), p)))
                        .collect();
                    (Arc::new(tags), Arc::new(times))
                }))
            })
            .await
            .clone()
        })
    }
}
