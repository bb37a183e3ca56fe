//! The simulator's in-memory model and its Rust-level control API. Every
//! response is derived from this state; there is no global state — each
//! [`GithubState`] is an independent GitHub.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::{Mutex, MutexGuard};

use super::faults::Fault;
use super::git::{CommitObj, MODE_EXEC, MODE_FILE, Objects, Signature};
use super::http::ApiError;

mod control;
mod model;

/// Primary rate limit of a token unless configured otherwise (GitHub: 5,000/h).
pub const DEFAULT_RATE_LIMIT: u64 = 5000;

/// Formats a time the way GitHub does (`2026-08-22T10:11:12Z`).
pub fn fmt_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Why a control operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("repository {0} does not exist in the simulator")]
    NoRepo(String),
    #[error("repository {0} already exists")]
    RepoExists(String),
    #[error("user {0} is not registered")]
    NoUser(String),
    #[error("{0} does not exist")]
    NotFound(String),
    #[error("invalid input: {0}")]
    Invalid(String),
    #[error("reading seed directory {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// Repository permission levels, ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    None,
    Read,
    Triage,
    Write,
    Maintain,
    Admin,
}

impl Permission {
    /// The lowercase name GitHub uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::None => "none",
            Permission::Read => "read",
            Permission::Triage => "triage",
            Permission::Write => "write",
            Permission::Maintain => "maintain",
            Permission::Admin => "admin",
        }
    }
}

/// A registered account.
#[derive(Debug, Clone)]
pub struct User {
    pub login: String,
    pub id: u64,
    pub name: Option<String>,
    pub email: String,
    pub is_bot: bool,
}

/// A token: who it belongs to and its primary-limit window.
#[derive(Debug, Clone)]
pub struct TokenInfo {
    pub login: String,
    pub limit: u64,
    pub used: u64,
    pub reset: i64,
    /// When the token stops working (installation tokens); `None`: never.
    pub expires_at: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct Pull {
    pub number: u64,
    pub id: u64,
    pub title: String,
    pub body: Option<String>,
    pub open: bool,
    pub draft: bool,
    pub head_ref: String,
    pub head_sha: String,
    pub base_ref: String,
    pub user: String,
    pub labels: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub closed_at: Option<DateTime<Utc>>,
    /// Who closed it (GitHub's issue `closed_by`), while closed.
    pub closed_by: Option<String>,
    /// When, by whom and as which commit it was merged.
    pub merged: Option<Merged>,
    /// The mergeability a read asked GitHub to compute: GitHub computes it
    /// after that first read, so reads of the same (base, head) answer it
    /// and a read after either side moved answers `null` again.
    pub mergeability: Option<Mergeability>,
}

/// A computed mergeability, valid while base and head stay where they were
/// (the merge of two fixed commits never changes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mergeability {
    pub base: String,
    pub head: String,
    /// Whether the merge conflicts; `None`: no common history.
    pub conflicts: Option<bool>,
}

/// A pull request's merge (`merged_at`, `merged_by`, `merge_commit_sha`).
#[derive(Debug, Clone)]
pub struct Merged {
    pub at: DateTime<Utc>,
    pub by: String,
    pub sha: String,
}

/// A plain issue as tests see it ([`GithubState::issues`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueView {
    pub number: u64,
    pub title: String,
    pub body: String,
    pub open: bool,
    pub author: String,
    pub labels: Vec<String>,
}

/// A plain issue (pull requests are [`Pull`]s; both share the numbers).
#[derive(Debug, Clone)]
pub struct Issue {
    pub number: u64,
    pub id: u64,
    pub title: String,
    pub body: Option<String>,
    pub open: bool,
    pub user: String,
    pub labels: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub closed_at: Option<DateTime<Utc>>,
    pub closed_by: Option<String>,
    /// `completed`, `not_planned`, `reopened` or `duplicate`.
    pub state_reason: Option<String>,
    /// Who last changed the title or body, and when (GraphQL's `editor`
    /// and `lastEditedAt`); `None` until someone edits it.
    pub last_edit: Option<(String, DateTime<Utc>)>,
}

#[derive(Debug, Clone)]
pub struct IssueComment {
    pub id: u64,
    pub issue: u64,
    pub body: String,
    pub user: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Every edit of the body, oldest first: who and when (GraphQL's
    /// `editor`, `lastEditedAt` and `userContentEdits`).
    pub edits: Vec<(String, DateTime<Utc>)>,
}

/// A workflow run that already finished, for seeding
/// ([`GithubState::add_finished_run`]).
#[derive(Debug, Clone)]
pub struct FinishedRun {
    /// Workflow file name or id, e.g. `run-sweep.yml`.
    pub workflow: String,
    pub head_sha: String,
    pub event: String,
    pub conclusion: String,
    /// (job name, conclusion) in order.
    pub jobs: Vec<(String, String)>,
    pub artifacts: ArtifactFiles,
}

/// A commit status (`POST /repos/{o}/{r}/statuses/{sha}`).
#[derive(Debug, Clone)]
pub struct CommitStatus {
    pub id: u64,
    pub sha: String,
    /// `error`, `failure`, `pending` or `success`.
    pub state: String,
    pub context: String,
    pub description: Option<String>,
    pub target_url: Option<String>,
    pub creator: String,
    pub created_at: DateTime<Utc>,
}

/// A pull request review.
#[derive(Debug, Clone)]
pub struct Review {
    pub id: u64,
    pub pull: u64,
    pub user: String,
    pub body: String,
    /// `APPROVED`, `CHANGES_REQUESTED`, `COMMENTED` (or `PENDING`).
    pub state: String,
    pub commit_id: String,
    pub submitted_at: DateTime<Utc>,
}

/// An inline review comment on a pull request's diff.
#[derive(Debug, Clone)]
pub struct ReviewComment {
    pub id: u64,
    pub pull: u64,
    pub review_id: Option<u64>,
    pub user: String,
    pub body: String,
    pub path: String,
    pub line: Option<u64>,
    pub commit_id: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Clone)]
pub struct LabelDef {
    pub id: u64,
    pub name: String,
    pub color: String,
    pub description: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Workflow {
    pub id: u64,
    pub name: String,
    pub path: String,
}

#[derive(Debug, Clone)]
pub struct Run {
    pub id: u64,
    pub workflow_id: u64,
    pub name: String,
    pub display_title: String,
    pub event: String,
    pub status: String,
    pub conclusion: Option<String>,
    pub head_branch: String,
    pub head_sha: String,
    pub actor: String,
    pub triggering_actor: String,
    pub run_attempt: u64,
    pub inputs: Value,
    pub pull_requests: Vec<u64>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub run_started_at: DateTime<Utc>,
    pub job_id: u64,
    /// The run's concurrency group, from its workflow file.
    pub concurrency_group: Option<String>,
    /// Earlier attempts of a re-run run, oldest first (the fields above
    /// describe the latest attempt).
    pub past_attempts: Vec<PastAttempt>,
    /// A cancel was accepted (202) for this attempt and has not finished
    /// yet: like GitHub, the run keeps its status until it ends as
    /// `cancelled`, and its script no longer decides the outcome.
    pub cancel_requested: bool,
    /// The jobs of the latest attempt, as the CI simulator creates them
    /// (named as the InferenceX workflows name them, finishing one by one);
    /// empty until it plans the run, and for runs it does not run, which
    /// then show one job named after the run.
    pub jobs: Vec<Job>,
    /// The event the run was created for, as its workflow file saw it
    /// (`None` for runs the built-in behaviour created): job conditions
    /// that depend on outputs are decided again from it when the run starts.
    pub context: Option<klaud_workflows::EventContext>,
}

/// One job of a run (Actions jobs API).
#[derive(Debug, Clone)]
pub struct Job {
    pub id: u64,
    pub name: String,
    /// `queued`, `in_progress` or `completed`.
    pub status: String,
    pub conclusion: Option<String>,
    pub started_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
    /// What the job printed (`GET /actions/jobs/{id}/logs`).
    pub log: String,
    /// The runner (node) it ran on, GitHub's `runner_name`; `None` until
    /// one picked it up, or when the simulator does not say.
    pub runner_name: Option<String>,
}

/// A finished attempt of a run that was re-run.
#[derive(Debug, Clone)]
pub struct PastAttempt {
    pub attempt: u64,
    pub status: String,
    pub conclusion: Option<String>,
    pub triggering_actor: String,
    pub started_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Clone)]
pub struct Artifact {
    pub id: u64,
    pub run_id: u64,
    pub name: String,
    pub zip: Vec<u8>,
    pub created_at: DateTime<Utc>,
    /// Past its retention: listed with `expired: true`, its zip is 410.
    pub expired: bool,
}

/// What a test changed about a published (producer) run the results API
/// names, which the sandbox creates when the API first answers it
/// (`klaud_sandbox::ci::producer`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerOverride {
    /// The dataset its AgentX artifacts name instead of the sandbox's.
    pub dataset: Option<String>,
    /// Its artifacts are past their retention.
    pub expired: bool,
    /// The run was deleted (404).
    pub gone: bool,
}

/// One repository.
#[derive(Debug)]
pub struct Repo {
    pub id: u64,
    pub owner: String,
    pub name: String,
    pub default_branch: String,
    pub created_at: DateTime<Utc>,
    pub objects: Objects,
    pub refs: BTreeMap<String, String>,
    pub pulls: BTreeMap<u64, Pull>,
    /// Plain issues, numbered with the pull requests.
    pub issues: BTreeMap<u64, Issue>,
    pub next_number: u64,
    pub comments: BTreeMap<u64, IssueComment>,
    pub labels: BTreeMap<String, LabelDef>,
    pub collaborators: HashMap<String, Permission>,
    pub workflows: Vec<Workflow>,
    pub runs: BTreeMap<u64, Run>,
    pub artifacts: BTreeMap<u64, Artifact>,
    /// Commit statuses, oldest first (GitHub keeps every one; the newest
    /// per context wins in the combined status).
    pub statuses: Vec<CommitStatus>,
    pub reviews: BTreeMap<u64, Review>,
    pub review_comments: BTreeMap<u64, ReviewComment>,
}

impl Repo {
    /// Whether `number` is an issue or a pull request here.
    pub fn has_issue(&self, number: u64) -> bool {
        self.pulls.contains_key(&number) || self.issues.contains_key(&number)
    }

    /// The labels of issue or pull request `number`.
    pub fn issue_labels(&self, number: u64) -> Option<&Vec<String>> {
        self.pulls
            .get(&number)
            .map(|p| &p.labels)
            .or_else(|| self.issues.get(&number).map(|i| &i.labels))
    }

    /// The repository's spelling of label `name`, defining it (with `id`)
    /// when it is new, as GitHub does when an issue is given an unknown label.
    pub fn label_named(&mut self, name: &str, id: u64) -> String {
        self.labels
            .entry(name.to_ascii_lowercase())
            .or_insert_with(|| LabelDef {
                id,
                name: name.to_owned(),
                color: "ededed".into(),
                description: None,
            })
            .name
            .clone()
    }

    /// The labels of issue or pull request `number`, to change.
    pub fn issue_labels_mut(&mut self, number: u64) -> Option<&mut Vec<String>> {
        match self.pulls.get_mut(&number) {
            Some(p) => Some(&mut p.labels),
            None => self.issues.get_mut(&number).map(|i| &mut i.labels),
        }
    }

    /// Activity on issue or pull request `number` moves its `updated_at`.
    pub fn touch_issue(&mut self, number: u64, now: DateTime<Utc>) {
        if let Some(p) = self.pulls.get_mut(&number) {
            p.updated_at = now;
        }
        if let Some(i) = self.issues.get_mut(&number) {
            i.updated_at = now;
        }
    }

    /// Resolves a branch name, full ref or sha to a commit sha.
    pub fn resolve(&self, spec: &str) -> Option<String> {
        if super::git::is_sha(spec) && self.objects.commits.contains_key(spec) {
            return Some(spec.to_string());
        }
        let spec = spec.strip_prefix("refs/").unwrap_or(spec);
        self.refs
            .get(&format!("refs/{spec}"))
            .or_else(|| self.refs.get(&format!("refs/heads/{spec}")))
            .or_else(|| self.refs.get(&format!("refs/tags/{spec}")))
            .cloned()
    }

    /// Moves (or creates) a ref and keeps the head sha of open PRs current.
    pub fn set_ref(&mut self, full: &str, sha: &str) {
        self.refs.insert(full.to_string(), sha.to_string());
        if let Some(branch) = full.strip_prefix("refs/heads/") {
            for p in self.pulls.values_mut() {
                if p.head_ref == branch && p.open {
                    p.head_sha = sha.to_string();
                }
            }
        }
    }

    /// The commits of a PR, oldest first: reachable from the head and not
    /// from the base (for a merged PR, the base as it was before the merge,
    /// so the list survives a merge commit that made them reachable from
    /// the base). GitHub lists at most 250.
    pub fn pull_commit_shas(&self, p: &Pull) -> Vec<String> {
        const PULL_COMMITS_MAX: usize = 250;
        let base = match &p.merged {
            Some(merged) => self
                .objects
                .commits
                .get(&merged.sha)
                .and_then(|c| c.parents.first().cloned()),
            None => self.resolve(&p.base_ref),
        };
        let exclude = base.map(|b| self.objects.ancestors(&b)).unwrap_or_default();
        let mut shas: Vec<String> = self
            .objects
            .history(&p.head_sha)
            .into_iter()
            .filter(|s| !exclude.contains(s))
            .collect();
        shas.reverse();
        shas.truncate(PULL_COMMITS_MAX);
        shas
    }

    /// The (base tip, head) pair a PR's mergeability is computed for.
    pub fn mergeability_pair(&self, p: &Pull) -> Option<(String, String)> {
        Some((self.resolve(&p.base_ref)?, p.head_sha.clone()))
    }

    /// Whether merging the PR's head into the tip of its base conflicts
    /// (a real three-way merge over their nearest common ancestor); `None`
    /// when that cannot be computed (no base branch, unrelated histories).
    pub fn pull_conflicts(&self, p: &Pull) -> Option<bool> {
        let (base, head) = self.mergeability_pair(p)?;
        let mb = self.objects.merge_base(&base, &head)?;
        super::merge::merge_commits(&self.objects, &mb, &base, &head).map(|m| !m.is_clean())
    }

    /// What a read of the PR starts: GitHub computes mergeability for the
    /// current base and head in the background, unless it knows it already.
    pub fn ask_mergeability(&mut self, number: u64) {
        let Some(p) = self.pulls.get(&number) else {
            return;
        };
        let Some((base, head)) = self.mergeability_pair(p) else {
            return;
        };
        if p.mergeability
            .as_ref()
            .is_some_and(|k| k.base == base && k.head == head)
        {
            return;
        }
        let conflicts = self.pull_conflicts(p);
        if let Some(p) = self.pulls.get_mut(&number) {
            p.mergeability = Some(Mergeability {
                base,
                head,
                conflicts,
            });
        }
    }

    /// `mergeable` and `mergeable_state` as GitHub answers them: unknown
    /// until a read asked for the current pair (see
    /// [`Repo::ask_mergeability`]), and for closed PRs.
    /// Required checks and reviews are not simulated, so a PR that merges
    /// cleanly is `clean` (or `draft`).
    pub fn mergeability(&self, p: &Pull) -> (Option<bool>, &'static str) {
        let current = self.mergeability_pair(p);
        let Some(known) = p
            .mergeability
            .as_ref()
            .filter(|k| p.open && current == Some((k.base.clone(), k.head.clone())))
        else {
            return (None, "unknown");
        };
        match known.conflicts {
            Some(true) => (Some(false), "dirty"),
            Some(false) if p.draft => (Some(true), "draft"),
            Some(false) => (Some(true), "clean"),
            None => (Some(false), "dirty"),
        }
    }

    /// Whether `login` authored a commit reachable from the default branch
    /// (GitHub's `CONTRIBUTOR`), matched by the commit's author email.
    pub fn has_contributed(&self, user: &User) -> bool {
        let Some(tip) = self.resolve(&self.default_branch) else {
            return false;
        };
        self.objects.ancestors(&tip).iter().any(|sha| {
            self.objects
                .commits
                .get(sha)
                .is_some_and(|c| c.author.email == user.email)
        })
    }

    pub fn permission_of(&self, login: &str) -> Permission {
        if login.eq_ignore_ascii_case(&self.owner) {
            return Permission::Admin;
        }
        self.collaborators
            .get(&login.to_ascii_lowercase())
            .copied()
            .unwrap_or(Permission::Read)
    }

    pub fn workflow(&self, id_or_file: &str) -> Option<&Workflow> {
        self.workflows.iter().find(|w| {
            w.id.to_string() == id_or_file
                || w.path == id_or_file
                || w.path.rsplit('/').next() == Some(id_or_file)
        })
    }

    pub fn full_name(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }

    /// Its GraphQL node id (`node_id` in its JSON; what `createRef` names
    /// it by).
    pub fn node_id(&self) -> String {
        format!("R_{}", self.id)
    }
}

/// A request as the request log records it (never the token).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LogEntry {
    pub method: String,
    pub path: String,
    pub status: u16,
    pub login: Option<String>,
    /// When it arrived (or, where the gate did not say, when it was
    /// recorded by [`Model::record`]).
    pub at: Option<DateTime<Utc>>,
}

/// GitHub's secondary limit on content-creating requests a minute, per
/// credential: on by default, as on GitHub.
pub const CONTENT_LIMIT_PER_MINUTE: u32 = 80;
/// The same an hour.
pub const CONTENT_LIMIT_PER_HOUR: u32 = 500;

/// One GraphQL request as it arrived: what a test checks against GitHub's
/// published schema.
#[derive(Debug, Clone)]
pub struct GraphqlDocument {
    pub query: String,
    pub variables: serde_json::Value,
}

/// GraphQL documents kept for [`GithubState::graphql_documents`].
pub const GRAPHQL_DOCUMENTS_KEPT: usize = 256;

/// The whole simulated GitHub.
#[derive(Debug)]
pub struct Model {
    pub base_url: String,
    pub users: BTreeMap<String, User>,
    pub tokens: HashMap<String, TokenInfo>,
    pub repos: BTreeMap<String, Repo>,
    pub next_id: u64,
    pub faults: Vec<Fault>,
    pub log: Vec<LogEntry>,
    /// The newest GraphQL documents received, with their variables (see
    /// [`GithubState::graphql_documents`]).
    pub graphql_documents: std::collections::VecDeque<GraphqlDocument>,
    /// Requests recorded since start, dropped ones included (see
    /// [`GithubState::requests_recorded`]).
    pub recorded: Arc<std::sync::atomic::AtomicU64>,
    pub apps: HashMap<u64, super::apps::App>,
    /// Whether dispatches accept `return_run_details` (older GitHub
    /// versions reject the key; Klaud must fall back).
    pub run_details_supported: bool,
    /// Secondary limit on content-creating requests per token and minute
    /// (GitHub's 80, on unless turned off).
    pub content_limit_per_minute: Option<u32>,
    /// The same per token and hour (GitHub's 500, on unless turned off).
    pub content_limit_per_hour: Option<u32>,
    /// Times (unix seconds) of the last hour's content-creating requests per token.
    pub content_writes: HashMap<String, std::collections::VecDeque<i64>>,
    /// Parsed workflow folders by tree sha (see `workflow_events::set_at`).
    pub workflow_sets: HashMap<String, std::sync::Arc<klaud_workflows::WorkflowSet>>,
    /// How far this GitHub's clock (its `Date` headers) is from the local
    /// one (`POST /_sandbox/clock`).
    pub clock_offset: chrono::TimeDelta,
    /// When this GitHub started (accounts' `created_at`).
    pub created_at: DateTime<Utc>,
    /// How long an accepted cancel takes to finish the run (GitHub's
    /// runners need a moment to stop; the answer comes before that).
    pub cancel_delay: std::time::Duration,
    /// Producer runs a test changed, by run id.
    pub producer_overrides: BTreeMap<u64, ProducerOverride>,
}

fn key(owner: &str, repo: &str) -> String {
    format!("{owner}/{repo}").to_ascii_lowercase()
}

/// Entries kept in the request log; older ones are dropped so a long-running
/// sandbox stays small.
pub const LOG_CAPACITY: usize = 10_000;

/// Shared handle on the simulated GitHub. Cloning shares the same state.
#[derive(Clone, Debug)]
pub struct GithubState {
    inner: Arc<Mutex<Model>>,
    /// The model's request counter, readable without the lock.
    recorded: Arc<std::sync::atomic::AtomicU64>,
}

impl Default for GithubState {
    fn default() -> Self {
        Self::new()
    }
}

/// How long an accepted cancel takes by default before the run is
/// `cancelled` (see [`GithubState::set_cancel_delay`]).
pub const DEFAULT_CANCEL_DELAY: std::time::Duration = std::time::Duration::from_millis(500);

/// A workflow run's artifacts: artifact name → (path inside the zip → bytes).
pub type ArtifactFiles = BTreeMap<String, BTreeMap<String, Vec<u8>>>;

/// Zips files in memory (deflate), like `actions/upload-artifact` does.
pub fn zip_files(files: &BTreeMap<String, Vec<u8>>) -> Result<Vec<u8>, SimError> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    let err = |e: &dyn std::fmt::Display| SimError::Invalid(format!("zipping artifact: {e}"));
    for (path, bytes) in files {
        w.start_file(path.as_str(), opts).map_err(|e| err(&e))?;
        w.write_all(bytes).map_err(|e| err(&e))?;
    }
    Ok(w.finish().map_err(|e| err(&e))?.into_inner())
}
