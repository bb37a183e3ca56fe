//! What a wave needs from the outside world besides the lifecycle
//! [`Forge`](crate::engine::Forge) and [`Journal`](crate::engine::Journal):
//! small traits (ports) that `klaud-service` implements over the GitHub
//! client and the local store, and tests implement over a directory.

use std::collections::BTreeMap;

use async_trait::async_trait;
use klaud_claims::CommitSha;
use klaud_planner::plan::Blocked;
use klaud_planner::registry::RegistryClient;
use klaud_planner::repo::{Family, RepoOptions, Repository};

use super::WaveFailure;
use super::summary::WaveSummary;
use crate::engine::{CandidateRecord, EngineError, Progress, Pull};
use crate::report::UpstreamRange;

/// The base branch's head, read into a checkout of what the planner reads.
pub struct BaseCheckout {
    /// The base commit.
    pub sha: CommitSha,
    /// The checkout, opened with the configured recipe roots.
    pub repository: Repository,
    /// Whatever keeps the checkout's files (a temporary directory); dropped
    /// when the wave ends.
    pub keep: Box<dyn std::any::Any + Send + Sync>,
}

/// Reads commits of the benchmark repository into something the planner
/// can open.
#[async_trait]
pub trait BaseSource: Send + Sync {
    /// The head of `branch` and a checkout of it opened with `options`. A
    /// missing branch or repository is an error naming which.
    async fn base(&self, branch: &str, options: &RepoOptions) -> Result<BaseCheckout, WaveFailure>;
    /// The bytes of `path` (repository-relative) at the head of Klaud's
    /// branch `branch`; `None` when the branch or the file is absent.
    async fn branch_file(&self, branch: &str, path: &str) -> Result<Option<Vec<u8>>, WaveFailure>;
}

/// What the open pull requests say about the families of a base checkout.
#[derive(Debug, Default, Clone)]
pub struct OpenPulls {
    /// Family id → its block for the plan: `occupied` for Klaud's own open
    /// PR (either branch spelling), else `duplicate` for another PR that
    /// overlaps it.
    pub blocks: BTreeMap<String, Blocked>,
    /// Family id → the oldest PR that is not Klaud's and changes the
    /// family's entry in its master file or one of its recipe files (also
    /// for families Klaud has a PR for).
    pub human: BTreeMap<String, Blocked>,
    /// Every listed pull request's author (those onto the base branch with
    /// one): the maintainer commands' reply permit is granted from it
    /// without reading each PR again (GitHub never changes an author).
    pub authors: BTreeMap<klaud_claims::PullNumber, String>,
}

/// Klaud's own open pull requests and candidate branches, listed once for
/// a round of steps of every candidate: each candidate's first look at its
/// pull request and branch in that round (see `Engine::seed_listed`).
#[derive(Debug, Default, Clone)]
pub struct Listed {
    /// Klaud's open pull requests onto the base branch, as GitHub's list
    /// shows them (no `mergeable`).
    pub pulls: Vec<Pull>,
    /// Klaud's candidate branches (name without `refs/heads/`) → head.
    pub branches: BTreeMap<String, String>,
}

/// Reads the open pull requests onto the base branch.
#[async_trait]
pub trait PullSource: Send + Sync {
    /// The blocks the open PRs onto `base_branch` put on `repository`'s
    /// families (see [`OpenPulls`]).
    async fn open_pulls(
        &self,
        repository: &Repository,
        base_branch: &str,
    ) -> Result<OpenPulls, WaveFailure>;

    /// Klaud's own open pull requests onto `base_branch` and its candidate
    /// branches (see [`Listed`]), read conditionally so that a round in
    /// which nothing moved costs nothing. A source that cannot list them
    /// answers nothing, and every step reads its own.
    async fn listed(&self, _base_branch: &str) -> Result<Listed, WaveFailure> {
        Ok(Listed::default())
    }
}

/// Knows the upstream source history behind image tags.
#[async_trait]
pub trait UpstreamSource: Send + Sync {
    /// The upstream range of bumping `family` of `repository` to the image
    /// `new` (built from `revision`, when its label says), with the flag
    /// and environment audit; `None` when it cannot be known.
    async fn range(
        &self,
        repository: &Repository,
        family: &Family,
        new: &str,
        revision: Option<&str>,
    ) -> Option<UpstreamRange>;
}

/// Keeps what a plan learned about the registries across runs.
pub trait PlanMemory: Send + Sync {
    /// Called after every plan of the wave with the registry it asked (its
    /// breaker state is worth keeping).
    fn planned(&self, registry: &RegistryClient);
}

/// Listens to a wave: every engine step and the summary.
pub trait WaveObserver: Send + Sync {
    /// An engine step of `candidate` is about to run. Steps of one wave run
    /// one after another, so whatever the forge is asked until
    /// [`WaveObserver::stepped`] is that step's (`klaud demo --stats` cuts
    /// its request log there).
    fn step_started(&self, _candidate: &CandidateRecord) {}
    /// One engine step changed `before` into `after`; `progress` is what
    /// the step answered, or why it stopped.
    fn stepped(
        &self,
        before: &CandidateRecord,
        after: &CandidateRecord,
        progress: Result<&Progress, &EngineError>,
    );
    /// The wave ended.
    fn done(&self, summary: &WaveSummary);
}
