//! One wave (spec §1): read the base branch, plan, claim, and drive every
//! candidate of this instance as far as it can go. Running a wave again
//! resumes (from the journal, or from GitHub when the journal is empty) and
//! never duplicates anything.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use klaud_claims::{CandidateId, ClaimBook, Claimant, SystemClock, ensure_plannable};
use klaud_lifecycle::baseline::BaselineSource;
use klaud_lifecycle::engine::{
    CandidateRecord, Engine, EngineConfig, Journal, Progress, RepairHook, Step, Target,
};
use klaud_lifecycle::model::{Outcome, RunRef};
use klaud_lifecycle::report::UpstreamRange;
use klaud_planner::image::ImageRef;
use klaud_planner::plan::{BlockKind, CreationTimes, PlanOptions, PlanReport, plan};
use klaud_planner::registry::RegistryClient;
use klaud_planner::repo::{RepoOptions, Repository};
use serde::Serialize;

use super::recover::{
    Orphan, RecoveryContext, open_orphans, settle_recovery_leases, take_over_orphans,
};
use klaud_github::lifecycle::GithubLifecycle;
use klaud_github::upstream::GithubUpstream;
use klaud_github::{Forge, ForgeRunStatus, GithubError};
use klaud_store::{Record, Store, trees};

/// Paths (after an optional `inferencex-e2e/` prefix) the planner and the
/// bump read from the base branch.
fn needed(path: &str) -> bool {
    let rel = path.strip_prefix("inferencex-e2e/").unwrap_or(path);
    rel.starts_with("configs/")
        || rel.starts_with("benchmarks/multi_node/srt-slurm-recipes/")
        || rel == "perf-changelog.yaml"
        // Retirements (issue 11) are read from it.
        || rel == "MODELS.md"
        // The flag and environment audit reads the script a single-node
        // family's launcher runs (blobs are cached by content).
        || benchmark_script(rel)
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
/// unreachable. An unreadable record is logged and ignored: the breaker is
/// only a saving.
pub fn restore_breaker(registry: &RegistryClient, store: &Store) {
    match store.load_breaker() {
        Ok(Some(state)) => registry.restore_breaker(&state),
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %e, "saved registry breaker unreadable; not restored"),
    }
}

/// Saves the registry's breaker after a plan (see [`restore_breaker`]).
fn save_breaker(registry: &RegistryClient, store: Option<&Store>) {
    if let Some(store) = store
        && let Err(e) = store.save_breaker(&registry.breaker_state())
    {
        tracing::warn!(error = %e, "registry breaker not saved");
    }
}

pub(crate) async fn blob(
    forge: &Forge,
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
pub async fn materialize(
    forge: &Forge,
    sha: &str,
    dir: &Path,
    cache: Option<&Store>,
) -> Result<usize, WaveError> {
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
}

/// The base branch's head and a checkout of what the planner reads, opened
/// with `options` (the configured recipe roots).
pub async fn base_checkout(
    forge: &Forge,
    base_branch: &str,
    options: &RepoOptions,
    cache: Option<&Store>,
) -> Result<(String, tempfile::TempDir, Repository), WaveError> {
    base_checkout_from(forge, base_branch, options, cache, None).await
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
    forge: &Forge,
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
pub async fn base_checkout_from(
    forge: &Forge,
    base_branch: &str,
    options: &RepoOptions,
    cache: Option<&Store>,
    checkout: Option<&Path>,
) -> Result<(String, tempfile::TempDir, Repository), WaveError> {
    let Some(base) = forge.get_ref(&format!("refs/heads/{base_branch}")).await? else {
        // GitHub answers 404 for a missing branch and a missing (or hidden)
        // repository alike: say which one it is.
        if !forge.repository_visible().await? {
            return Err(WaveError::NoRepository(forge.repo()));
        }
        return Err(WaveError::NoBase(base_branch.to_owned()));
    };
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
    Ok((base, dir, repository))
}

/// What a wave needs besides the forge and the journal.
pub struct WaveOptions<'a> {
    /// This instance.
    pub claimant: Claimant,
    /// The engine settings (owner run, workflows, labels, budgets).
    pub engine: EngineConfig,
    /// The planner settings (`occupied` is filled in by the wave).
    pub plan: PlanOptions<'a>,
    /// How often to look at running workflows.
    pub poll: Duration,
    /// How long this wave keeps waiting for runs before it returns (a later
    /// wave resumes).
    pub wait: Duration,
    /// A family whose candidate finished (in this instance's journal) less
    /// than this long ago is not planned again.
    pub cooldown: Duration,
    /// Upstream source repositories, asked for the commit range of a bump
    /// (the image repositories come from `plan.upstream`).
    pub upstream: Option<&'a GithubUpstream>,
    /// The store: caches the base branch's blobs, keeps the registry
    /// breaker after each plan, and answers image creation times when
    /// `plan.creation_times` is unset.
    pub cache: Option<&'a Store>,
    /// When it turns true the wave stops between steps: the current step
    /// finishes, nothing new starts (the daemon's graceful shutdown).
    pub stop: Option<tokio::sync::watch::Receiver<bool>>,
    /// A local git checkout of the base commit to read instead of
    /// downloading blobs (its HEAD is checked first).
    pub checkout: Option<&'a Path>,
}

/// One candidate at the end of a wave.
#[derive(Debug, Clone, Serialize)]
pub struct CandidateSummary {
    /// Candidate id.
    pub candidate: String,
    /// Family.
    pub family: String,
    /// Candidate image.
    pub image: String,
    /// Outcome, once finished.
    pub outcome: Option<String>,
    /// Phase of the outcome, or the step it is at.
    pub phase: String,
    /// The PR URL.
    pub pull_request: Option<String>,
    /// Runs Klaud owns.
    pub runs: Vec<RunRef>,
    /// Repairs used.
    pub repairs: u32,
    /// Why it is not finished (waiting on, or the error it stopped at).
    pub status: Option<String>,
    /// Why it ended, once it did.
    pub message: Option<String>,
}

impl CandidateSummary {
    /// The summary of a journal record.
    pub fn of(rec: &CandidateRecord, status: Option<String>) -> Self {
        Self {
            candidate: rec.candidate.to_string(),
            family: rec.family.clone(),
            image: rec.image.clone(),
            outcome: rec
                .ending
                .as_ref()
                .filter(|_| rec.step == Step::Done)
                .map(|e| e.outcome.to_string()),
            phase: match (&rec.ending, rec.step) {
                (Some(e), Step::Done) => e.phase.to_string(),
                (_, step) => step.as_str().to_owned(),
            },
            pull_request: rec.pull_url.clone(),
            runs: rec.runs(),
            repairs: rec.repairs,
            status,
            message: rec.ending.as_ref().map(|e| e.message.clone()),
        }
    }
}

/// A family the wave's plan blocked.
#[derive(Debug, Clone, Serialize)]
pub struct BlockedFamily {
    /// The family.
    pub family: String,
    /// `retired`, `duplicate` or `occupied`.
    pub outcome: String,
    /// Why, naming the PR and its author when there is one.
    pub reason: String,
}

/// The result of a wave.
#[derive(Debug, Clone, Serialize)]
pub struct WaveSummary {
    /// Base commit.
    pub base: String,
    /// Candidates worked on.
    pub candidates: Vec<CandidateSummary>,
    /// Planned candidates not taken up, with why.
    pub skipped: Vec<(String, String)>,
    /// Maintainer command comments answered in this wave.
    pub answered: Vec<crate::pr_commands::Answered>,
    /// Families the plan did not bump whatever the registry says, with
    /// why: `retired`, `duplicate` (somebody else's PR) or `occupied`
    /// (Klaud's own open PR).
    pub blocked: Vec<BlockedFamily>,
    /// Every family of the wave's plan (for the dashboard).
    #[serde(skip)]
    pub families: Vec<klaud_planner::plan::FamilyPlan>,
}

impl WaveSummary {
    /// Whether every candidate has an outcome.
    pub fn all_finished(&self) -> bool {
        self.candidates.iter().all(|c| c.outcome.is_some())
    }
}

/// Targets for the plan's selected candidates plus `wanted` (claims this
/// instance holds), looked up among every family's candidate.
fn targets_from_plan(report: &PlanReport, wanted: &BTreeSet<String>) -> Vec<Target> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    let selected = report.candidates.iter().map(|s| s.id.clone());
    for id in selected.chain(wanted.iter().cloned()) {
        if !seen.insert(id.clone()) {
            continue;
        }
        let found = report.families.iter().find_map(|fp| {
            let c = fp.candidate.as_ref()?;
            (klaud_planner::identity::candidate_id(&fp.id, &c.image.normalized()) == id)
                .then_some((fp, c))
        });
        let (Some((fp, c)), Ok(candidate)) = (found, CandidateId::new(&id)) else {
            continue;
        };
        out.push(Target {
            family: fp.family.clone(),
            candidate,
            image: c.image.to_string(),
            revision: c.revision.clone(),
            clock: serde_json::to_value(c.clock)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned)),
            not_release_reason: None,
            upstream: None,
            versions: Some(klaud_lifecycle::report::VersionsCompared {
                old: None,
                new: c.versions.clone(),
            }),
            variant: None,
        });
    }
    out
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
    (repository, family): (&Repository, &klaud_planner::repo::Family),
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

/// The target of a candidate this instance holds a claim for, read from
/// its branch: the family's image in the bumped master config names the
/// candidate. `None` when there is no branch, or it does not carry that
/// image; an error when GitHub could not be read (try again next pass).
async fn held_target(
    forge: &Forge,
    repository: &Repository,
    candidate: &klaud_claims::ClaimCandidate,
    cache: Option<&Store>,
    experiments: &[klaud_lifecycle::experiment::ExperimentSpec],
    claim: &klaud_claims::ClaimRecord,
) -> Result<Option<Target>, WaveError> {
    // A sibling a `/klaud try` listed in the claim: rebuilt from the claim
    // record alone, branch or not (issue 15).
    if let Some(listed) = klaud_lifecycle::experiment::Listed::of_claim(&claim.extra) {
        let listed = match listed {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(family = %candidate.family, error = %e, "listed variants not read");
                return Ok(None);
            }
        };
        if let Some(t) = listed_target(candidate, &listed) {
            return Ok(Some(t));
        }
    }
    let branch = klaud_lifecycle::engine::branch_name(candidate.id.as_str());
    let Some(head) = forge.get_ref(&format!("refs/heads/{branch}")).await? else {
        return Ok(None);
    };
    let Some((file, key)) = candidate.family.rsplit_once(':') else {
        return Ok(None);
    };
    let path = format!("{}{file}", repository.prefix());
    let Some((_, sha)) = forge
        .tree_blobs(&head)
        .await?
        .into_iter()
        .find(|(p, _)| *p == path)
    else {
        return Ok(None);
    };
    let bytes = blob(forge, &sha, cache).await?;
    let image = std::str::from_utf8(&bytes)
        .ok()
        .and_then(|text| klaud_planner::yaml::parse(text).ok().flatten())
        .and_then(|doc| doc.get(key)?.get("image")?.as_scalar().map(str::to_owned));
    let Some(image) = image else {
        return Ok(None);
    };
    let Ok(parsed) = ImageRef::parse(&image) else {
        return Ok(None);
    };
    let plain =
        klaud_planner::identity::candidate_id(candidate.id.family().as_str(), &parsed.normalized());
    let Ok(plain) = CandidateId::new(&plain) else {
        return Ok(None);
    };
    let target = Target {
        family: candidate.family.clone(),
        candidate: plain,
        image,
        revision: None,
        clock: None,
        not_release_reason: None,
        upstream: None,
        versions: None,
        variant: None,
    };
    if target.candidate == candidate.id {
        return Ok(Some(target));
    }
    // A variant of a configured experiment: its id is rebuilt from the
    // image its branch runs (issue 15).
    Ok(
        match klaud_lifecycle::experiment::expand(&target, experiments) {
            Some(Ok(variants)) => variants.into_iter().find(|v| v.candidate == candidate.id),
            _ => None,
        },
    )
}

/// The target of `candidate` when the claim's [`Listed`] experiment names
/// it: its id is rebuilt from the experiment's base image and the
/// variant's edits, and must come out the same.
///
/// [`Listed`]: klaud_lifecycle::experiment::Listed
fn listed_target(
    candidate: &klaud_claims::ClaimCandidate,
    listed: &klaud_lifecycle::experiment::Listed,
) -> Option<Target> {
    let info = match listed.info_for(candidate.id.as_str())? {
        Ok(i) => i,
        Err(e) => {
            tracing::warn!(candidate = %candidate.id, error = %e, "listed variant not rebuilt");
            return None;
        }
    };
    let image = ImageRef::parse(&listed.base_image).ok()?;
    let plain =
        klaud_planner::identity::candidate_id(candidate.id.family().as_str(), &image.normalized());
    let base = Target {
        family: candidate.family.clone(),
        candidate: CandidateId::new(&plain).ok()?,
        image: listed.base_image.clone(),
        revision: None,
        clock: None,
        not_release_reason: None,
        upstream: None,
        versions: None,
        variant: None,
    };
    let mut target = if base.candidate == candidate.id {
        base
    } else {
        let resolved = klaud_planner::variant::ResolvedVariant {
            name: info.name.clone(),
            from: info.from.clone(),
            own: info.own.clone(),
            edits: info.edits.clone(),
        };
        let mut made = klaud_lifecycle::experiment::variant_targets(
            &base,
            &info.experiment,
            std::slice::from_ref(&resolved),
            info.max_concurrent,
        )
        .ok()?;
        let t = made.pop()?;
        if t.candidate != candidate.id {
            tracing::warn!(candidate = %candidate.id, rebuilt = %t.candidate, "listed variant rebuilds to another id");
            return None;
        }
        t
    };
    target.variant = Some(info);
    Some(target)
}

/// The plan's picks with each pick on an experiment's family replaced by
/// the experiment's variants (issue 15); each variant is marked seen.
fn expand_experiments(
    picked: Vec<Target>,
    experiments: &[klaud_lifecycle::experiment::ExperimentSpec],
    seen: &mut BTreeSet<String>,
) -> Vec<Target> {
    if experiments.is_empty() {
        return picked;
    }
    let mut out = Vec::new();
    for t in picked {
        match klaud_lifecycle::experiment::expand(&t, experiments) {
            None => out.push(t),
            Some(Ok(variants)) => out.extend(
                variants
                    .into_iter()
                    .filter(|v| seen.insert(v.candidate.as_str().to_owned())),
            ),
            Some(Err(e)) => {
                tracing::warn!(candidate = %t.candidate, error = %e, "experiment not started")
            }
        }
    }
    out
}

/// How often a wave re-plans to replace picks whose claim another instance
/// won first.
const REFILL_ROUNDS: usize = 3;

/// The targets of `report` (its picks plus the claims in `ours`) not in
/// `seen`, with their upstream commit range when it can be known and the
/// versions the old image declares next to the new one's.
async fn plan_targets(
    report: &PlanReport,
    ours: &BTreeSet<String>,
    seen: &mut BTreeSet<String>,
    options: &WaveOptions<'_>,
    repository: &Repository,
    registry: &RegistryClient,
) -> Vec<Target> {
    let mut out = Vec::new();
    for mut t in targets_from_plan(report, ours) {
        if !seen.insert(t.candidate.as_str().to_owned()) {
            continue;
        }
        if let (Some(up), Ok(family)) = (options.upstream, repository.family(&t.family)) {
            t.upstream = upstream_range(
                up,
                &options.plan.upstream,
                (repository, family),
                &t.image,
                t.revision.as_deref(),
            )
            .await;
        }
        if let (Some(v), Ok(family)) = (t.versions.as_mut(), repository.family(&t.family)) {
            // Only the picks' old images are read (not every family's), so
            // the plan keeps its request discipline; an unreadable one
            // (pruned tag, registry down) leaves the old column empty.
            let architecture = family.platform.architecture();
            v.old = match klaud_planner::provenance::image_versions(
                registry,
                family.image(),
                architecture,
            )
            .await
            {
                Ok(old) => old,
                Err(e) => {
                    tracing::warn!(image = %family.image(), error = %e, "old image versions unknown");
                    None
                }
            };
        }
        out.push(t);
    }
    out
}

/// Runs one wave.
pub async fn run_wave(
    forge: &Forge,
    journal: &dyn Journal,
    registry: &RegistryClient,
    baseline: &dyn BaselineSource,
    repair: Option<&dyn RepairHook>,
    options: WaveOptions<'_>,
) -> Result<WaveSummary, WaveError> {
    run_wave_told(forge, journal, registry, baseline, repair, options, None).await
}

/// Runs one wave and tells `sink` every visible candidate step
/// ([`crate::story`]).
pub async fn run_wave_told(
    forge: &Forge,
    journal: &dyn Journal,
    registry: &RegistryClient,
    baseline: &dyn BaselineSource,
    repair: Option<&dyn RepairHook>,
    mut options: WaveOptions<'_>,
    sink: Option<&dyn crate::story::StepSink>,
) -> Result<WaveSummary, WaveError> {
    let repo_name = forge.repo();
    // Records are compared around each step only when someone listens.
    let step = async |engine: &Engine<'_>, rec: &mut CandidateRecord| {
        let before = sink.map(|_| rec.clone());
        let progress = engine.step(rec).await;
        if let Some(before) = &before {
            let told = progress
                .as_ref()
                .map(Clone::clone)
                .map_err(ToString::to_string);
            crate::story::tell(sink, &repo_name, before, rec, &told);
        }
        progress
    };
    let (base, _dir, repository) = base_checkout_from(
        forge,
        &options.engine.base_branch,
        &options.engine.repo,
        options.cache,
        options.checkout,
    )
    .await?;
    if options.plan.creation_times.is_none() {
        options.plan.creation_times = options.cache.map(|s| s as &dyn CreationTimes);
    }

    let clock = SystemClock;
    let book = ClaimBook::new(forge, &clock, options.claimant.clone());
    let claims = book
        .list_claims()
        .await
        .map_err(|e| WaveError::Claims(e.to_string()))?;
    ensure_plannable(&claims).map_err(|e| WaveError::Claims(e.to_string()))?;
    let leases = book
        .list_recovery_leases()
        .await
        .map_err(|e| WaveError::Claims(e.to_string()))?;
    let (done, unfinished): (Vec<CandidateRecord>, Vec<CandidateRecord>) = journal
        .list()
        .await
        .map_err(|e| WaveError::Journal(e.to_string()))?
        .into_iter()
        .partition(|r| r.step == Step::Done);
    let now = chrono::Utc::now();
    let runs = ForgeRunStatus::new(forge);
    let recovery = RecoveryContext {
        book: &book,
        runs: &runs,
        owner_run: options.engine.owner_run,
        lease: options.engine.lease,
        now,
    };
    // Recovery (spec §6) before planning: orphaned claims are taken over
    // and their candidates finished in this wave.
    let journaled: BTreeSet<String> = done
        .iter()
        .chain(&unfinished)
        .map(|r| r.candidate.to_string())
        .collect();
    let (orphans, not_recovered) =
        take_over_orphans(&recovery, &claims, &leases, &journaled, None).await;
    for (claim, why) in &not_recovered {
        tracing::debug!(claim, why, "not recovered");
    }
    let recovering: BTreeSet<String> = orphans
        .iter()
        .flat_map(|o| o.candidates.iter().map(|c| c.id.as_str().to_owned()))
        .collect();
    let mut ours = BTreeSet::new();
    let mut held_by_us = Vec::new();
    for entry in &claims {
        match book.adopt(entry) {
            Some(held) => {
                ours.extend(
                    held.record
                        .candidate_ids()
                        .iter()
                        .map(|s| s.to_string())
                        .filter(|id| !recovering.contains(id)),
                );
                held_by_us.push(held);
            }
            None => {
                if let Some(family) = entry.family() {
                    options.plan.occupied.insert(family.as_str().to_owned());
                }
                // A family group is claimed under its first member's ref;
                // the record lists every member, and each is occupied.
                if let Ok(record) = &entry.record {
                    options.plan.occupied.extend(
                        record
                            .candidates
                            .iter()
                            .map(|c| klaud_planner::identity::family_id(&c.family)),
                    );
                }
            }
        }
    }
    // Other people's work and Klaud's own open PRs (issue 11), read from
    // GitHub before claiming; the blocked families are still planned so the
    // plan says what they would get.
    let open_pulls = crate::overlap::open_pull_blocks(
        forge,
        &repository,
        &options.engine.base_branch,
        options.cache,
    )
    .await?;
    options.plan.blocked = open_pulls.blocks.clone();
    // This instance's own candidates in flight are resumed, not blocked:
    // their PR is the open one, and the plan keeps counting them as picks.
    let in_flight: BTreeSet<String> = ours
        .iter()
        .map(String::as_str)
        .chain(unfinished.iter().map(|r| r.candidate.as_str()))
        .filter_map(|id| CandidateId::new(id).ok())
        .map(|id| id.family().as_str().to_owned())
        .collect();
    options
        .plan
        .blocked
        .retain(|family, b| b.kind != BlockKind::Occupied || !in_flight.contains(family));
    let cooldown = chrono::TimeDelta::from_std(options.cooldown).unwrap_or(chrono::TimeDelta::MAX);
    for rec in &done {
        // A maintainer's retry request (`/klaud retry`) lifts the cooldown.
        let retried = options
            .cache
            .is_some_and(|store| crate::pr_commands::retry_requested(store, rec));
        // A capacity deferral is retried in the next wave (spec §3.7).
        if now - rec.updated_at < cooldown
            && !retried
            && !rec.deferred()
            && let Ok(id) = CandidateId::new(rec.candidate.as_str())
        {
            options
                .plan
                .cooling_down
                .insert(id.family().as_str().to_owned());
        }
    }

    // A pass that may start nothing new (the daemon's reconcile) and has no
    // held claim to rebuild from the plan skips the registry entirely: at
    // one pass a minute, a plan each time would burn the registries' budget.
    let journal_ids: BTreeSet<&str> = unfinished.iter().map(|r| r.candidate.as_str()).collect();
    // One session for the wave: a re-plan after a lost claim race is
    // answered from its cache.
    let session = registry.session();
    let report = if options.plan.max_candidates == 0
        && ours.iter().all(|id| journal_ids.contains(id.as_str()))
    {
        PlanReport::empty()
    } else {
        let report = plan(&repository, &session, &options.plan).await;
        save_breaker(registry, options.cache);
        report
    };
    let mut targets = Vec::new();
    let mut seen = BTreeSet::new();
    // This instance's leftovers first: unfinished journal records, then
    // claims it holds, then the plan.
    for rec in &unfinished {
        if let Ok(candidate) = CandidateId::new(rec.candidate.as_str())
            && seen.insert(rec.candidate.to_string())
        {
            targets.push(Target {
                family: rec.family.clone(),
                candidate,
                image: rec.image.clone(),
                revision: rec.revision.clone(),
                clock: rec.clock.clone(),
                not_release_reason: rec.not_release_reason.clone(),
                upstream: rec.upstream.clone(),
                versions: rec.versions.clone(),
                variant: rec.variant.clone(),
            });
        }
    }
    let picked = plan_targets(&report, &ours, &mut seen, &options, &repository, registry).await;
    let picked = expand_experiments(picked, &options.engine.experiments, &mut seen);
    let mut new_picks: BTreeSet<String> = picked
        .iter()
        .map(|t| t.candidate.as_str().to_owned())
        .filter(|id| !ours.contains(id))
        .collect();
    targets.extend(picked);
    // A claim of ours whose candidate neither the journal nor the plan knows
    // (a one-shot run with a fresh store, after upstream moved on): its
    // target is rebuilt from its branch; without a branch there is nothing
    // to resume, so it is finished like an orphan and the family freed.
    let done_ids: BTreeSet<&str> = done.iter().map(|r| r.candidate.as_str()).collect();
    let mut lost_track = Vec::new();
    for held in &held_by_us {
        for c in &held.record.candidates {
            let id = c.id.as_str();
            if seen.contains(id) || done_ids.contains(id) || recovering.contains(id) {
                continue;
            }
            match held_target(
                forge,
                &repository,
                c,
                options.cache,
                &options.engine.experiments,
                &held.record,
            )
            .await
            {
                Ok(Some(t)) => {
                    seen.insert(id.to_owned());
                    targets.push(t);
                }
                // A variant that never got a branch, of an experiment whose
                // siblings are resumed: they finish and release the claim.
                Ok(None)
                    if held
                        .record
                        .candidates
                        .iter()
                        .any(|o| o.id != c.id && seen.contains(o.id.as_str())) => {}
                Ok(None) => lost_track.push(Orphan {
                    held: held.clone(),
                    orphan_run: held.record.run_id,
                    candidates: vec![c.clone()],
                    leases: Vec::new(),
                }),
                Err(e) => tracing::warn!(candidate = id, error = %e, "held claim not resumed"),
            }
        }
    }

    let lifecycle = GithubLifecycle::new(forge);
    let mut engine = Engine::new(
        &lifecycle,
        journal,
        &clock,
        options.claimant.clone(),
        baseline,
        &repository,
        base.clone(),
        &options.engine,
    );
    if let Some(hook) = repair {
        engine = engine.with_repair(hook);
    }

    let (recovered, mut skipped) = open_orphans(&engine, &orphans).await;
    let (mut lost, lost_skipped) = open_orphans(&engine, &lost_track).await;
    skipped.extend(lost_skipped);
    for rec in &mut lost {
        if let Some(ending) = rec.ending.as_mut().filter(|e| !e.hands_off) {
            ending.message = "this instance lost track of the candidate: no journal record, \
                              no branch, and the plan proposes another image"
                .to_owned();
        }
    }
    let mut records: Vec<(CandidateRecord, Option<String>, bool)> = recovered
        .into_iter()
        .chain(lost)
        .map(|r| (r, None, false))
        .collect();
    for t in &targets {
        match engine.open_record(t).await {
            Ok(rec) => records.push((rec, None, false)),
            Err(e) => skipped.push((t.candidate.as_str().to_owned(), e.to_string())),
        }
    }
    // Claim the plan's new picks now: a family lost to another instance's
    // race frees its slot for the next stale family, so instances started
    // together split the work instead of one of them idling until the next
    // wave.
    for _ in 0..REFILL_ROUNDS {
        if new_picks.is_empty() || options.stop.as_ref().is_some_and(|s| *s.borrow()) {
            break;
        }
        // Families, not candidates: an experiment's variants lose together.
        let mut lost = BTreeSet::new();
        for (rec, status, skip) in records.iter_mut() {
            if !new_picks.remove(rec.candidate.as_str()) || rec.step != Step::Claim {
                continue;
            }
            match step(&engine, rec).await {
                Ok(Progress::Skipped(why)) => {
                    *status = Some(why);
                    *skip = true;
                    lost.insert(rec.family.clone());
                }
                Ok(_) => {}
                Err(e) => *status = Some(format!("stopped: {e}")),
            }
        }
        if lost.is_empty() {
            break;
        }
        for (rec, _, _) in &records {
            if let Ok(id) = CandidateId::new(rec.candidate.as_str()) {
                options
                    .plan
                    .occupied
                    .insert(id.family().as_str().to_owned());
            }
        }
        options.plan.max_candidates = lost.len();
        let again = plan(&repository, &session, &options.plan).await;
        save_breaker(registry, options.cache);
        let refill = plan_targets(
            &again,
            &BTreeSet::new(),
            &mut seen,
            &options,
            &repository,
            registry,
        )
        .await;
        let refill = expand_experiments(refill, &options.engine.experiments, &mut seen);
        for t in &refill {
            match engine.open_record(t).await {
                Ok(rec) => {
                    new_picks.insert(rec.candidate.to_string());
                    records.push((rec, None, false));
                }
                Err(e) => skipped.push((t.candidate.as_str().to_owned(), e.to_string())),
            }
        }
    }
    // Maintainer commands on this wave's PRs, before driving (a `stop`
    // must win over the next step) — and on recently finished candidates,
    // where `retry` and `status` still make sense.
    let mut answered = Vec::new();
    let mut tried = Vec::new();
    for (rec, status, skip) in records.iter_mut() {
        if *skip || rec.pull.is_none() {
            continue;
        }
        match crate::pr_commands::handle_commands(forge, &engine, rec, options.cache).await {
            Ok(a) => {
                tried.extend(a.iter().flat_map(|x| x.started.iter().cloned()));
                answered.extend(a)
            }
            Err(e) => {
                *status = Some(format!("commands not handled: {e}"));
                tracing::warn!(candidate = %rec.candidate, error = %e, "maintainer commands not handled");
            }
        }
    }
    for rec in done
        .iter()
        .filter(|r| r.pull.is_some() && now - r.updated_at < cooldown)
    {
        if records.iter().any(|(r, _, _)| r.candidate == rec.candidate) {
            continue;
        }
        let mut rec = rec.clone();
        match crate::pr_commands::handle_commands(forge, &engine, &mut rec, options.cache).await {
            Ok(a) => answered.extend(a),
            Err(e) => {
                tracing::warn!(candidate = %rec.candidate, error = %e, "maintainer commands not handled")
            }
        }
    }
    // Variants a maintainer's `/klaud try` started run in this wave.
    for t in &tried {
        if !seen.insert(t.candidate.as_str().to_owned()) {
            continue;
        }
        match engine.open_record(t).await {
            Ok(rec) => records.push((rec, None, false)),
            Err(e) => skipped.push((t.candidate.as_str().to_owned(), e.to_string())),
        }
    }
    // Again before any PR is opened: a human PR that appeared since the
    // plan ends the candidate `duplicate` (its branch is cleaned up, nothing
    // is posted on the human's PR).
    // A Klaud PR already open that a human PR now overlaps: the configured
    // decision (`on_human_overlap`).
    let human = if records
        .iter()
        .any(|(r, _, skip)| !*skip && r.pull.is_none() && r.step != Step::Done)
    {
        crate::overlap::open_pull_blocks(
            forge,
            &repository,
            &options.engine.base_branch,
            options.cache,
        )
        .await?
        .human
    } else {
        open_pulls.human
    };
    let mut overlap_notes: BTreeMap<String, String> = BTreeMap::new();
    for (rec, status, skip) in records.iter_mut() {
        if *skip || matches!(rec.step, Step::Done | Step::Finish) {
            continue;
        }
        let Ok(id) = CandidateId::new(rec.candidate.as_str()) else {
            continue;
        };
        let Some(b) = human.get(id.family().as_str()) else {
            continue;
        };
        let ended = match (rec.pull, options.engine.on_human_overlap) {
            (None, _) => {
                engine
                    .end_now(rec, Outcome::Duplicate, b.reason.clone(), false)
                    .await
            }
            (Some(_), klaud_lifecycle::engine::HumanOverlap::Handoff) => {
                engine
                    .end_now(rec, Outcome::Handoff, b.reason.clone(), false)
                    .await
            }
            (Some(_), klaud_lifecycle::engine::HumanOverlap::Leave) => {
                overlap_notes.insert(
                    rec.candidate.to_string(),
                    format!("left as is (on_human_overlap = \"leave\"): {}", b.reason),
                );
                Ok(())
            }
        };
        if let Err(e) = ended {
            *status = Some(format!("stopped: {e}"));
        }
    }
    let stopping = || options.stop.as_ref().is_some_and(|s| *s.borrow());
    let started = Instant::now();
    loop {
        let mut waiting = false;
        for (rec, status, skip) in records.iter_mut() {
            if *skip || rec.step == Step::Done {
                continue;
            }
            if stopping() {
                *status = Some("paused: shutting down".to_owned());
                continue;
            }
            // One step at a time so a shutdown request is seen between steps.
            let mut progress = Ok(Progress::Advanced(rec.step));
            for _ in 0..64 {
                progress = step(&engine, rec).await;
                if !matches!(progress, Ok(Progress::Advanced(_))) || stopping() {
                    break;
                }
            }
            match progress {
                Ok(Progress::Waiting(why)) => {
                    *status = Some(why);
                    waiting = true;
                }
                Ok(Progress::Skipped(why)) => {
                    *status = Some(why);
                    *skip = true;
                }
                Ok(Progress::Done(_)) => *status = None,
                Ok(Progress::Advanced(_)) => waiting = true,
                Err(e) => {
                    // Transient: the next wave resumes from here.
                    *status = Some(format!("stopped: {e}"));
                    tracing::warn!(candidate = %rec.candidate, error = %e, "candidate stopped");
                }
            }
        }
        if !waiting || stopping() || started.elapsed() >= options.wait {
            break;
        }
        tokio::time::sleep(options.poll).await;
    }
    let acquired: Vec<_> = orphans.iter().flat_map(|o| o.leases.clone()).collect();
    let mut journal_now: Vec<CandidateRecord> = done;
    journal_now.extend(records.iter().map(|(r, _, _)| r.clone()));
    settle_recovery_leases(&recovery, &leases, &acquired, &claims, &journal_now).await;
    let mut candidates = Vec::new();
    for (rec, status, skip) in &records {
        if *skip {
            skipped.push((
                rec.candidate.to_string(),
                status.clone().unwrap_or_default(),
            ));
        } else {
            let status = match (status, overlap_notes.get(rec.candidate.as_str())) {
                (Some(s), Some(note)) => Some(format!("{s}; {note}")),
                (None, Some(note)) => Some(note.clone()),
                (s, None) => s.clone(),
            };
            candidates.push(CandidateSummary::of(rec, status));
        }
    }
    let summary = WaveSummary {
        base,
        candidates,
        skipped,
        answered,
        blocked: report
            .families
            .iter()
            .filter_map(|f| {
                let b = f.blocked.as_ref()?;
                Some(BlockedFamily {
                    family: f.family.clone(),
                    outcome: b.kind.as_str().to_owned(),
                    reason: b.reason.clone(),
                })
            })
            .collect(),
        families: report.families,
    };
    if let Some(sink) = sink {
        sink.wave_done(&repo_name, &summary);
    }
    Ok(summary)
}

/// Renders a wave summary as a table.
pub fn render_summary(summary: &WaveSummary) -> String {
    let mut rows: Vec<[String; 5]> = vec![[
        "FAMILY".into(),
        "OUTCOME".into(),
        "PHASE".into(),
        "RUNS".into(),
        "PULL REQUEST".into(),
    ]];
    for c in &summary.candidates {
        rows.push([
            c.family.clone(),
            c.outcome
                .clone()
                .unwrap_or_else(|| format!("({})", c.status.as_deref().unwrap_or("running"))),
            c.phase.clone(),
            c.runs.len().to_string(),
            c.pull_request.clone().unwrap_or_else(|| "—".into()),
        ]);
    }
    let mut widths = [0usize; 5];
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    for (id, why) in &summary.skipped {
        out.push_str(&format!("skipped {id}: {why}\n"));
    }
    for b in &summary.blocked {
        out.push_str(&format!("{} {}: {}\n", b.outcome, b.family, b.reason));
    }
    out
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
