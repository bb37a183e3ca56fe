//! One wave over GitHub and the local store. The wave itself — its phases
//! and every rule in them — lives in [`klaud_lifecycle::wave`]; this module
//! reads the base commit into a checkout (blobs cached by content in the
//! store, or taken from a local git checkout), lists the open pull requests
//! for the overlap, asks upstream repositories for the range of a bump,
//! keeps the registry breaker, and adapts [`run_wave`] / [`run_wave_told`]
//! for the daemon, the CLI and the tests.

use klaud_lifecycle::BoxFuture;
use std::collections::BTreeMap;
use std::path::Path;

use async_trait::async_trait;
use klaud_claims::CommitSha;
use klaud_github::lifecycle::GithubLifecycle;
use klaud_github::upstream::GithubUpstream;
use klaud_github::{ForgeRunCompletion, Github, GithubError};
use klaud_lifecycle::baseline::BaselineSource;
use klaud_lifecycle::commands::Retries;
use klaud_lifecycle::engine::{
    CandidateRecord, EngineError, Intent, Journal, Progress, RepairHook,
};
use klaud_lifecycle::report::UpstreamRange;
use klaud_lifecycle::wave::{
    self as lifecycle_wave, BaseCheckout, BaseSource, Listed, OpenPulls, PlanMemory, PullSource,
    UpstreamSource, Wave, WaveObserver, WavePorts,
};
use klaud_planner::image::ImageRef;
use klaud_planner::plan::CreationTimes;
use klaud_planner::registry::RegistryClient;
use klaud_planner::repo::{Family, RepoOptions, Repository};
use klaud_store::journal::StoreJournal;
use klaud_store::{Record, Store, trees};

pub use klaud_lifecycle::wave::{BlockedFamily, CandidateSummary, WaveSummary, render_summary};

/// Paths (after an optional `inferencex-e2e/` prefix) the planner and the
/// bump read from the base branch.
fn needed(path: &str) -> bool {
    let rel = path.strip_prefix("inferencex-e2e/").unwrap_or(path);
    rel.starts_with("configs/")
        || rel.starts_with("benchmarks/multi_node/srt-slurm-recipes/")
        || rel == "perf-changelog.yaml"
        // Retirements are read from it.
        || rel == "MODELS.md"
        // The flag and environment audit reads the script a single-node
        // family's launcher runs (blobs are cached by content).
        || benchmark_script(rel)
        // The readiness gate reads which container each launcher runs.
        || rel
            .strip_prefix("runners/launch_")
            .is_some_and(|name| !name.contains('/') && name.ends_with(".sh"))
        // The engine triages every failed run against the playbook at its
        // base: read here, its blob is read once per version (the store
        // keeps it) instead of once per base commit by the contents API.
        // A playbook configured elsewhere is read by the engine as before.
        || rel == klaud_lifecycle::playbook::DEFAULT_PATH
}

fn benchmark_script(rel: &str) -> bool {
    [
        "benchmarks/single_node/fixed_seq_len/",
        "benchmarks/single_node/agentic/",
    ]
    .iter()
    .any(|dir| {
        rel.strip_prefix(dir)
            .is_some_and(|name| !name.contains('/') && name.ends_with(".sh"))
    })
}

/// Why a wave stopped.
#[derive(Debug, thiserror::Error)]
pub enum WaveError {
    /// GitHub failed.
    #[error(transparent)]
    Github(#[from] GithubError),
    /// The base branch is missing.
    #[error("the base branch {0} does not exist")]
    NoBase(String),
    /// The repository is missing, or the credential cannot see it.
    #[error(
        "the repository {0} does not exist, or the credential cannot see it; check \
         github.repository / --repo (OWNER/NAME) and the token's or App installation's access"
    )]
    NoRepository(String),
    /// The local checkout given for the base commit is not at it.
    #[error("{0}")]
    CheckoutMismatch(String),
    /// The checkout could not be written or read.
    #[error("base checkout: {0}")]
    Checkout(String),
    /// Claims block planning (fail closed) or could not be listed.
    #[error("{0}")]
    Claims(String),
    /// The journal failed.
    #[error("{0}")]
    Journal(String),
}

/// A blob kept in the store's cache tree (content-addressed: valid forever).
#[derive(serde::Serialize, serde::Deserialize)]
struct CachedBlob {
    base64: String,
}

impl Record for CachedBlob {
    const VERSION: u32 = 1;
}

/// Re-opens the registry breakers an earlier run saved in `store`, so a
/// restarted Klaud does not spend a timeout on a host it just found
/// unreachable, and keeps the manifests and configs the client pulls in
/// `store` (reading them back first): on Docker Hub a manifest GET is a
/// pull, and a restarted Klaud (every Actions pass) pulls none it already
/// read. An unreadable record is logged and ignored: both are only savings.
pub fn restore_breaker(registry: &RegistryClient, store: &Store) {
    registry.set_content_cache(std::sync::Arc::new(store.clone()));
    match store.load_breaker() {
        Ok(Some(state)) => registry.restore_breaker(&state),
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %e, "saved registry breaker unreadable; not restored"),
    }
}

/// Where the GitHub client's conditional-read answers are kept.
const CONDITIONAL_PAGES_KEY: &str = "github-conditional-pages";

/// The GitHub client's conditional-read answers, as kept in the store.
#[derive(serde::Serialize, serde::Deserialize)]
struct KeptPages {
    pages: Vec<klaud_github::ConditionalPage>,
}

impl Record for KeptPages {
    const VERSION: u32 = 1;
}

/// Gives `forge` the conditional-read answers an earlier run kept in
/// `store` ([`save_conditional_pages`]), so that a new process (a light
/// Actions pass) asks GitHub `If-None-Match` and an unchanged answer is a
/// 304 that costs no rate limit. An unreadable entry is only a warning:
/// the reads then cost what they cost without it.
pub fn restore_conditional_pages(forge: &Github, store: &Store) {
    match store.get::<KeptPages>(trees::CACHE, CONDITIONAL_PAGES_KEY) {
        Ok(Some(kept)) => forge.restore_conditional_pages(kept.pages),
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %e, "kept GitHub answers unreadable; not restored"),
    }
}

/// Keeps `forge`'s conditional-read answers in `store` for the next run.
pub fn save_conditional_pages(forge: &Github, store: &Store) {
    let kept = KeptPages {
        pages: forge.conditional_pages(),
    };
    if let Err(e) = store.put(trees::CACHE, CONDITIONAL_PAGES_KEY, &kept) {
        tracing::warn!(error = %e, "GitHub answers not kept for the next run");
    }
}

/// Saves the registry's breaker after each plan (see [`restore_breaker`]).
struct BreakerMemory<'a>(&'a Store);

impl PlanMemory for BreakerMemory<'_> {
    fn planned(&self, registry: &RegistryClient) {
        if let Err(e) = self.0.save_breaker(&registry.breaker_state()) {
            tracing::warn!(error = %e, "registry breaker not saved");
        }
    }
}

pub(crate) async fn blob(
    forge: &Github,
    sha: &str,
    cache: Option<&Store>,
) -> Result<Vec<u8>, WaveError> {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let key = format!("blob:{sha}");
    if let Some(store) = cache
        && let Ok(Some(c)) = store.get::<CachedBlob>(trees::CACHE, &key)
        && let Ok(bytes) = b64.decode(&c.base64)
    {
        // The engine's reads of a file at this base find the blob without
        // a request, as if this process had read it.
        forge.remember_blob(sha, &c.base64);
        return Ok(bytes);
    }
    let bytes = forge.get_blob(sha).await?;
    if let Some(store) = cache {
        // A cache miss next time is the only cost of a failed write.
        let _ = store.put(
            trees::CACHE,
            &key,
            &CachedBlob {
                base64: b64.encode(&bytes),
            },
        );
    }
    Ok(bytes)
}

/// Writes the files the planner needs from `sha` into `dir`. Blobs are
/// content-addressed, so with a store they are read from GitHub once.
pub fn materialize<'f>(
    forge: &'f Github,
    sha: &'f str,
    dir: &'f Path,
    cache: Option<&'f Store>,
) -> BoxFuture<'f, Result<usize, WaveError>> {
    Box::pin(async move {
        let mut n = 0;
        for (path, sha) in forge.tree_blobs(sha).await? {
            if !needed(&path) {
                continue;
            }
            // Tree paths come from GitHub: never let one escape the directory.
            if path
                .split('/')
                .any(|c| c.is_empty() || c == "." || c == "..")
            {
                return Err(WaveError::Checkout(format!("refusing tree path {path:?}")));
            }
            let target = dir.join(&path);
            let bytes = blob(forge, &sha, cache).await?;
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| WaveError::Checkout(format!("{}: {e}", parent.display())))?;
            }
            std::fs::write(&target, bytes)
                .map_err(|e| WaveError::Checkout(format!("{}: {e}", target.display())))?;
            n += 1;
        }
        Ok(n)
    })
}

/// The base branch's head and a checkout of what the planner reads, opened
/// with `options` (the configured recipe roots).
pub fn base_checkout<'f>(
    forge: &'f Github,
    base_branch: &'f str,
    options: &'f RepoOptions,
    cache: Option<&'f Store>,
) -> BoxFuture<'f, Result<(CommitSha, tempfile::TempDir, Repository), WaveError>> {
    Box::pin(async move { base_checkout_from(forge, base_branch, options, cache, None).await })
}

/// The HEAD commit of the git checkout at `dir`.
fn checkout_head(dir: &Path) -> Result<String, WaveError> {
    // `git rev-parse` knows every way HEAD can be stored (detached, packed
    // refs, worktrees); reading `.git/HEAD` by hand would not.
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", "--verify", "HEAD^{commit}"])
        .output()
        .map_err(|e| {
            WaveError::CheckoutMismatch(format!(
                "--checkout {}: cannot run git to read its HEAD: {e}",
                dir.display()
            ))
        })?;
    if !out.status.success() {
        return Err(WaveError::CheckoutMismatch(format!(
            "--checkout {}: not a git checkout with a HEAD commit ({})",
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The git blob id of `bytes` (what a tree entry names).
fn git_blob_sha(bytes: &[u8]) -> String {
    use sha1::{Digest, Sha1};
    let mut h = Sha1::new();
    h.update(format!("blob {}\0", bytes.len()).as_bytes());
    h.update(bytes);
    hex::encode(h.finalize())
}

/// Like [`materialize`], but each file comes from the local checkout
/// `local` when its bytes are the base commit's blob (the tree says which);
/// a file that differs (an edit, line-ending conversion) is downloaded.
async fn materialize_from_checkout(
    forge: &Github,
    sha: &str,
    local: &Path,
    dir: &Path,
    cache: Option<&Store>,
) -> Result<(usize, usize), WaveError> {
    let (mut from_checkout, mut downloaded) = (0, 0);
    for (path, blob_sha) in forge.tree_blobs(sha).await? {
        if !needed(&path) {
            continue;
        }
        if path
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
        {
            return Err(WaveError::Checkout(format!("refusing tree path {path:?}")));
        }
        let bytes = match std::fs::read(local.join(&path)) {
            Ok(bytes) if git_blob_sha(&bytes) == blob_sha => {
                from_checkout += 1;
                bytes
            }
            _ => {
                tracing::debug!(%path, "not as in the base commit in the checkout; downloaded");
                downloaded += 1;
                blob(forge, &blob_sha, cache).await?
            }
        };
        let target = dir.join(&path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| WaveError::Checkout(format!("{}: {e}", parent.display())))?;
        }
        std::fs::write(&target, bytes)
            .map_err(|e| WaveError::Checkout(format!("{}: {e}", target.display())))?;
    }
    Ok((from_checkout, downloaded))
}

/// [`base_checkout`], reading the files from the local git checkout
/// `checkout` when given: its HEAD must be the base branch's head (else
/// [`WaveError::CheckoutMismatch`]), and only files that differ from the
/// base commit are downloaded.
pub fn base_checkout_from<'f>(
    forge: &'f Github,
    base_branch: &'f str,
    options: &'f RepoOptions,
    cache: Option<&'f Store>,
    checkout: Option<&'f Path>,
) -> BoxFuture<'f, Result<(CommitSha, tempfile::TempDir, Repository), WaveError>> {
    Box::pin(async move {
        let Some(base) = forge.get_ref(&format!("refs/heads/{base_branch}")).await? else {
            // GitHub answers 404 for a missing branch and a missing (or hidden)
            // repository alike: say which one it is.
            if !forge.repository_visible().await? {
                return Err(WaveError::NoRepository(forge.repo()));
            }
            return Err(WaveError::NoBase(base_branch.to_owned()));
        };
        let base = CommitSha::parse(&base).map_err(|e| {
            WaveError::Github(GithubError::Decode {
                what: format!("head of base branch {base_branch}"),
                detail: e.to_string(),
            })
        })?;
        let dir = tempfile::tempdir().map_err(|e| WaveError::Checkout(e.to_string()))?;
        match checkout {
            None => {
                materialize(forge, &base, dir.path(), cache).await?;
            }
            Some(local) => {
                let head = checkout_head(local)?;
                if !head.eq_ignore_ascii_case(&base) {
                    return Err(WaveError::CheckoutMismatch(format!(
                        "--checkout {}: its HEAD is {head}, but the base branch {base_branch} of {} \
                     is at {base}; check out {base} there (or drop --checkout to download it)",
                        local.display(),
                        forge.repo()
                    )));
                }
                let (local_files, downloaded) =
                    materialize_from_checkout(forge, &base, local, dir.path(), cache).await?;
                tracing::info!(
                    checkout = %local.display(),
                    local_files,
                    downloaded,
                    "read the base commit from the local checkout"
                );
            }
        }
        let repository = Repository::open_with(dir.path(), options)
            .map_err(|e| WaveError::Checkout(e.to_string()))?;
        // The wave carries on with every readable family.
        for broken in repository.unreadable() {
            tracing::warn!(
                family = %broken.family,
                "left out of this wave: {}",
                broken.error
            );
        }
        Ok((base, dir, repository))
    })
}

/// What a wave needs besides the forge and the journal: the lifecycle
/// wave's own settings, and what its GitHub side reads.
pub struct WaveOptions<'a> {
    /// Instance, engine and planner settings, timing and the stop signal.
    /// When `plan.creation_times` is unset, `cache` answers them.
    pub lifecycle: lifecycle_wave::WaveSettings<'a>,
    /// Upstream source repositories, asked for the commit range of a bump
    /// (the image repositories come from `plan.upstream`).
    pub upstream: Option<&'a GithubUpstream>,
    /// The store: caches the base branch's blobs, keeps the registry
    /// breaker after each plan, and answers image creation times when
    /// `lifecycle.plan.creation_times` is unset.
    pub cache: Option<&'a Store>,
    /// A local git checkout of the base commit to read instead of
    /// downloading blobs (its HEAD is checked first).
    pub checkout: Option<&'a Path>,
    /// This machine's clock ([`klaud_claims::SystemClock`] but in tests);
    /// the wave reads it corrected to GitHub's time, on which leases are
    /// written and compared.
    pub clock: &'a dyn klaud_claims::Clock,
}

/// The upstream commit an image tag names: `nightly-<sha>` or a tag ending
/// in `-<7 to 40 hex>` with at least one letter (so dates are not taken for
/// commits).
pub fn tag_commit(tag: &str) -> Option<&str> {
    let last = tag.rsplit('-').next()?;
    let hex = last.len() >= 7
        && last.len() <= 40
        && last
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    (hex && (last.len() == 40 || last.bytes().any(|b| b.is_ascii_alphabetic()))).then_some(last)
}

/// The upstream range of a bump, when the image repository has a source
/// repository and both commits are known; the count is asked of GitHub,
/// and the family's flags and variables are audited against the change.
async fn upstream_range(
    upstream: &GithubUpstream,
    sources: &BTreeMap<String, String>,
    (repository, family): (&Repository, &Family),
    new: &str,
    revision: Option<&str>,
) -> Option<UpstreamRange> {
    let old = &family.image().to_string();
    let new_ref = ImageRef::parse(new).ok()?;
    let source = sources.get(&new_ref.normalized_repository())?;
    let old_ref = ImageRef::parse(old).ok()?;
    let from = tag_commit(old_ref.tag()?)?.to_owned();
    let to = match revision {
        Some(r) => r.to_owned(),
        None => tag_commit(new_ref.tag()?)?.to_owned(),
    };
    let commits = match upstream.commits_between(source, &from, &to).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(source, error = %e, "upstream range unknown");
            None
        }
    };
    let audit = audit_range(upstream, source, &from, &to, repository, family).await;
    Some(UpstreamRange {
        compare_url: Some(format!("https://github.com/{source}/compare/{from}...{to}")),
        repository: source.clone(),
        from,
        to,
        commits,
        audit,
    })
}

/// The flag and environment audit of `family` over `from...to`. A checkout
/// file the collectors cannot read is reported by name and line as the
/// reason the audit did not check (it does not block).
async fn audit_range(
    upstream: &GithubUpstream,
    source: &str,
    from: &str,
    to: &str,
    repository: &Repository,
    family: &klaud_planner::repo::Family,
) -> Option<klaud_planner::audit::AuditResult> {
    if !upstream.audit_options().enabled {
        return None;
    }
    let engine = klaud_planner::audit::engine_for(&upstream.audit_options().engines, source);
    let collected = match klaud_planner::audit::collect(repository, family, engine) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(family = %family.family, error = %e, "flags and environment not collected");
            return Some(klaud_planner::audit::AuditResult::Unchecked {
                flags: 0,
                env: 0,
                cause: klaud_planner::audit::UncheckedCause::Unreadable,
                reason: e.to_string(),
            });
        }
    };
    upstream.audit(source, from, to, &collected).await
}

/// The GitHub side of a wave: the base commit, Klaud's branches and the
/// open pull requests, with blobs and PR files cached in the store.
struct GithubSide<'a> {
    forge: &'a Github,
    cache: Option<&'a Store>,
    checkout: Option<&'a Path>,
}

fn port(e: WaveError) -> lifecycle_wave::WaveFailure {
    lifecycle_wave::WaveFailure::Port(Box::new(e))
}

#[async_trait]
impl BaseSource for GithubSide<'_> {
    async fn base(
        &self,
        branch: &str,
        options: &RepoOptions,
    ) -> Result<BaseCheckout, lifecycle_wave::WaveFailure> {
        let (sha, dir, repository) =
            base_checkout_from(self.forge, branch, options, self.cache, self.checkout)
                .await
                .map_err(port)?;
        Ok(BaseCheckout {
            sha,
            repository,
            keep: Box::new(dir),
        })
    }

    async fn branch_file(
        &self,
        branch: &str,
        path: &str,
    ) -> Result<Option<Vec<u8>>, lifecycle_wave::WaveFailure> {
        let read = async {
            let Some(head) = self.forge.get_ref(&format!("refs/heads/{branch}")).await? else {
                return Ok(None);
            };
            let Some((_, sha)) = self
                .forge
                .tree_blobs(&head)
                .await?
                .into_iter()
                .find(|(p, _)| *p == path)
            else {
                return Ok(None);
            };
            blob(self.forge, &sha, self.cache).await.map(Some)
        };
        read.await.map_err(port)
    }
}

#[async_trait]
impl PullSource for GithubSide<'_> {
    async fn open_pulls(
        &self,
        repository: &Repository,
        base_branch: &str,
    ) -> Result<OpenPulls, lifecycle_wave::WaveFailure> {
        crate::overlap::open_pull_blocks(self.forge, repository, base_branch, self.cache)
            .await
            .map_err(port)
    }

    async fn listed(&self, base_branch: &str) -> Result<Listed, lifecycle_wave::WaveFailure> {
        let bot = self.forge.bot_login().to_owned();
        let listing = async {
            // The same conditional pages the plan reads: a round in which
            // nothing moved is two free 304s.
            let pulls = self
                .forge
                .list_pulls("open")
                .await?
                .into_iter()
                .filter(|p| p.base_ref == base_branch)
                .filter(|p| {
                    p.author
                        .as_deref()
                        .is_some_and(|a| a.eq_ignore_ascii_case(&bot))
                })
                .filter(|p| crate::overlap::branch_candidate(&p.head_ref).is_some())
                // Unreadable as a lifecycle pull request (a bad sha): the
                // step reads it itself and says what is wrong.
                .filter_map(|p| klaud_github::lifecycle::engine_pull(p).ok())
                .collect();
            let prefix = format!("refs/heads/{}", klaud_lifecycle::engine::BRANCH_PREFIX);
            let branches = Github::list_refs(self.forge, &prefix)
                .await?
                .into_iter()
                .filter_map(|(name, sha)| Some((name.strip_prefix("refs/heads/")?.to_owned(), sha)))
                .collect();
            Ok::<_, GithubError>(Listed { pulls, branches })
        };
        listing.await.map_err(|e| port(e.into()))
    }
}

/// Upstream ranges from the source repositories of the image repositories
/// (`sources`: normalized image repository → `owner/name`).
struct UpstreamRanges<'a> {
    upstream: &'a GithubUpstream,
    sources: BTreeMap<String, String>,
}

#[async_trait]
impl UpstreamSource for UpstreamRanges<'_> {
    async fn range(
        &self,
        repository: &Repository,
        family: &Family,
        new: &str,
        revision: Option<&str>,
    ) -> Option<UpstreamRange> {
        upstream_range(
            self.upstream,
            &self.sources,
            (repository, family),
            new,
            revision,
        )
        .await
    }
}

/// Tells a [`crate::story::StepSink`] what the wave does on `repository`.
struct Story<'a> {
    sink: &'a dyn crate::story::StepSink,
    repository: String,
}

impl WaveObserver for Story<'_> {
    fn stepped(
        &self,
        before: &CandidateRecord,
        after: &CandidateRecord,
        progress: Result<&Progress, &EngineError>,
    ) {
        crate::story::tell(Some(self.sink), &self.repository, before, after, progress);
        // A step that only refreshed the live report of a running workflow
        // records that intent and nothing else: still a look at a run.
        let live_refresh = matches!(
            after.intent,
            Some(Intent::EditLiveReport(_) | Intent::CommentLiveReport(_))
        );
        // Its copy of Klaud's own comments is bookkeeping of those writes.
        let changed = CandidateRecord {
            updated_at: after.updated_at,
            own_comments: after.own_comments.clone(),
            intent: if live_refresh {
                after.intent.clone()
            } else {
                before.intent.clone()
            },
            ..before.clone()
        } != *after;
        self.sink
            .step_ended(&self.repository, &after.candidate, changed);
    }

    fn step_started(&self, candidate: &CandidateRecord) {
        self.sink
            .step_started(&self.repository, &candidate.candidate);
    }

    fn done(&self, summary: &WaveSummary) {
        self.sink.wave_done(&self.repository, summary);
    }
}

impl From<lifecycle_wave::WaveFailure> for WaveError {
    fn from(e: lifecycle_wave::WaveFailure) -> Self {
        match e {
            // Every port of this module fails with a `WaveError`.
            lifecycle_wave::WaveFailure::Port(inner) => match inner.downcast::<WaveError>() {
                Ok(e) => *e,
                Err(other) => WaveError::Checkout(other.to_string()),
            },
            lifecycle_wave::WaveFailure::Claims(why) => WaveError::Claims(why),
            lifecycle_wave::WaveFailure::Journal(why) => WaveError::Journal(why),
        }
    }
}

/// Runs one wave.
pub fn run_wave<'f>(
    forge: &'f Github,
    journal: &'f dyn Journal,
    registry: &'f RegistryClient,
    baseline: &'f dyn BaselineSource,
    repair: Option<&'f dyn RepairHook>,
    options: WaveOptions<'f>,
) -> BoxFuture<'f, Result<WaveSummary, WaveError>> {
    Box::pin(async move {
        run_wave_told(forge, journal, registry, baseline, repair, options, None).await
    })
}

/// Runs one wave ([`klaud_lifecycle::wave::Wave`]) over GitHub and tells
/// `sink` every visible candidate step ([`crate::story`]).
pub fn run_wave_told<'f>(
    forge: &'f Github,
    journal: &'f dyn Journal,
    registry: &'f RegistryClient,
    baseline: &'f dyn BaselineSource,
    repair: Option<&'f dyn RepairHook>,
    mut options: WaveOptions<'f>,
    sink: Option<&'f dyn crate::story::StepSink>,
) -> BoxFuture<'f, Result<WaveSummary, WaveError>> {
    Box::pin(async move {
        let plan = &mut options.lifecycle.plan;
        if plan.max_candidates > 0
            && let Err(e) = forge.repository_id().await
        {
            // Read here, once per process, rather than inside the first
            // candidate's step that creates a branch (which reads it
            // again when this failed).
            tracing::debug!(error = %e, "repository node id not read yet");
        }
        if plan.creation_times.is_none() {
            plan.creation_times = options.cache.map(|s| s as &dyn CreationTimes);
        }
        let lifecycle = GithubLifecycle::new(forge);
        let side = GithubSide {
            forge,
            cache: options.cache,
            checkout: options.checkout,
        };
        let upstream = options.upstream.map(|upstream| UpstreamRanges {
            upstream,
            sources: options.lifecycle.plan.upstream.clone(),
        });
        let breaker = options.cache.map(BreakerMemory);
        let retry_journal = options.cache.map(|s| StoreJournal::new(s.clone()));
        let story = sink.map(|sink| Story {
            sink,
            repository: forge.repo(),
        });
        // Leases are compared on GitHub's time, whatever this machine's says.
        let clock = forge.clock_on(options.clock);
        let runs = ForgeRunCompletion::new(forge);
        let ports = WavePorts {
            forge: &lifecycle,
            journal,
            clock: &clock,
            runs: &runs,
            registry,
            baseline,
            repair,
            base: &side,
            pulls: &side,
            upstream: upstream.as_ref().map(|u| u as &dyn UpstreamSource),
            plans: breaker.as_ref().map(|b| b as &dyn PlanMemory),
            retries: retry_journal.as_ref().map(|j| Retries {
                journal: j,
                clock: &clock,
            }),
            observer: story.as_ref().map(|s| s as &dyn WaveObserver),
        };
        let wave = Wave::new(ports, options.lifecycle);
        Ok(wave.run().await?)
    })
}

#[cfg(test)]
mod tests {
    use super::tag_commit;

    #[test]
    fn commits_are_read_from_commit_named_tags_only() {
        let sha = "3ee2df30337a301164c46ae444b76ee67e71c106";
        assert_eq!(tag_commit(&format!("nightly-{sha}")), Some(sha));
        assert_eq!(
            tag_commit("nightly-dev-x86_64-cu13.0.1-8f2a3b1"),
            Some("8f2a3b1")
        );
        assert_eq!(
            tag_commit("nightly-dev-cu13-20260817-a1b2c3d4"),
            Some("a1b2c3d4")
        );
        for tag in [
            "v0.25.0",
            "v0.5.17-cu130",
            "v0.5.17-rocm720-mi35x-20260817",
            "kimi-k3",
            "latest",
        ] {
            assert_eq!(tag_commit(tag), None, "{tag}");
        }
    }
}
