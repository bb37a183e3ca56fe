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

impl Model {
    /// Appends to the request log, dropping the oldest entries past
    /// [`LOG_CAPACITY`].
    pub fn record(&mut self, mut entry: LogEntry) {
        entry.at.get_or_insert_with(Utc::now);
        if self.log.len() >= LOG_CAPACITY {
            let excess = self.log.len() + 1 - LOG_CAPACITY;
            self.log.drain(..excess);
        }
        self.log.push(entry);
        self.recorded
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub fn repo(&self, owner: &str, repo: &str) -> Result<&Repo, ApiError> {
        self.repos
            .get(&key(owner, repo))
            .ok_or_else(ApiError::not_found)
    }

    pub fn repo_mut(&mut self, owner: &str, repo: &str) -> Result<&mut Repo, ApiError> {
        self.repos
            .get_mut(&key(owner, repo))
            .ok_or_else(ApiError::not_found)
    }

    fn repo_by_full(&mut self, full: &str) -> Result<&mut Repo, SimError> {
        self.repos
            .get_mut(&full.to_ascii_lowercase())
            .ok_or_else(|| SimError::NoRepo(full.to_string()))
    }

    /// API URL of a repository (`{base}/repos/{owner}/{repo}`).
    pub fn repo_url(&self, owner: &str, repo: &str) -> String {
        match self.repos.get(&key(owner, repo)) {
            Some(r) => format!("{}/repos/{}/{}", self.base_url, r.owner, r.name),
            None => format!("{}/repos/{owner}/{repo}", self.base_url),
        }
    }

    /// Web URL matching an API repository URL: the simulator's pages
    /// (`pages.rs`) under `/_html/` on the same server.
    pub fn html_base(&self, api_repo_url: &str) -> String {
        api_repo_url.replacen("/repos/", "/_html/", 1)
    }

    pub fn user(&self, login: &str) -> Option<&User> {
        self.users.get(&login.to_ascii_lowercase())
    }

    pub fn user_by_email(&self, email: &str) -> Option<&User> {
        self.users.values().find(|u| u.email == email)
    }

    /// The git signature of a user (or a neutral one).
    pub fn signature_of(&self, login: Option<&str>) -> Signature {
        let (name, email) = match login.and_then(|l| self.user(l)) {
            Some(u) => (
                u.name.clone().unwrap_or_else(|| u.login.clone()),
                u.email.clone(),
            ),
            None => ("GitHub".to_string(), "noreply@github.com".to_string()),
        };
        Signature {
            name,
            email,
            date: Utc::now(),
        }
    }

    /// The simple-user JSON shape (octocrab's `Author`).
    pub fn user_json(&self, u: &User) -> Value {
        let b = &self.base_url;
        let l = &u.login;
        json!({
            "login": l, "id": u.id, "node_id": format!("U_{}", u.id),
            "avatar_url": format!("{b}/_avatars/{}", u.id), "gravatar_id": "",
            "url": format!("{b}/users/{l}"), "html_url": format!("{b}/_html/{l}"),
            "followers_url": format!("{b}/users/{l}/followers"),
            "following_url": format!("{b}/users/{l}/following{{/other_user}}"),
            "gists_url": format!("{b}/users/{l}/gists{{/gist_id}}"),
            "starred_url": format!("{b}/users/{l}/starred{{/owner}}{{/repo}}"),
            "subscriptions_url": format!("{b}/users/{l}/subscriptions"),
            "organizations_url": format!("{b}/users/{l}/orgs"),
            "repos_url": format!("{b}/users/{l}/repos"),
            "events_url": format!("{b}/users/{l}/events{{/privacy}}"),
            "received_events_url": format!("{b}/users/{l}/received_events"),
            "type": if u.is_bot { "Bot" } else { "User" }, "site_admin": false,
        })
    }

    /// The `public-user` shape (`GET /user`, `GET /users/{login}`): the
    /// simple user plus the profile fields GitHub always sends, mostly
    /// `null` for a sandbox account.
    pub fn public_user_json(&self, u: &User) -> Value {
        let mut v = self.user_json(u);
        let extra = json!({
            "name": u.name, "company": null, "blog": "", "location": null, "email": null,
            "hireable": null, "bio": null, "twitter_username": null,
            "public_repos": 0, "public_gists": 0, "followers": 0, "following": 0,
            "created_at": fmt_time(self.created_at), "updated_at": fmt_time(self.created_at),
            "user_view_type": "public",
        });
        if let (Some(o), Value::Object(extra)) = (v.as_object_mut(), extra) {
            o.extend(extra);
        }
        v
    }

    /// User JSON by login; unknown logins (e.g. a repository owner that is
    /// not registered) get a synthetic organisation-like record.
    pub fn login_json(&self, login: &str) -> Value {
        match self.user(login) {
            Some(u) => self.user_json(u),
            None => {
                let fake = User {
                    login: login.to_string(),
                    id: 1,
                    name: None,
                    email: String::new(),
                    is_bot: false,
                };
                self.user_json(&fake)
            }
        }
    }

    /// The full repository JSON shape (GitHub's `full-repository`, a
    /// superset of `repository` and `minimal-repository`).
    pub fn repo_json(&self, r: &Repo) -> Value {
        let url = self.repo_url(&r.owner, &r.name);
        let html = self.html_base(&url);
        let u = |suffix: &str| format!("{url}/{suffix}");
        let open_issues = r.pulls.values().filter(|p| p.open).count();
        let mut v = json!({
            "id": r.id, "node_id": format!("R_{}", r.id), "name": r.name,
            "full_name": r.full_name(), "private": false, "fork": false,
            "owner": self.login_json(&r.owner),
            "html_url": html, "description": null, "homepage": null, "language": null,
            "url": url, "mirror_url": null, "license": null,
            "git_url": format!("{url}.git"), "clone_url": format!("{html}.git"),
            "ssh_url": format!("git@sandbox:{}.git", r.full_name()), "svn_url": html,
            "default_branch": r.default_branch,
            "visibility": "public", "archived": false, "disabled": false, "is_template": false,
            "created_at": fmt_time(r.created_at), "updated_at": fmt_time(r.created_at),
            "pushed_at": fmt_time(r.created_at),
        });
        let counts = json!({
            "size": 0, "forks": 0, "forks_count": 0, "stargazers_count": 0, "watchers": 0,
            "watchers_count": 0, "open_issues": open_issues, "open_issues_count": open_issues,
            "network_count": 0, "subscribers_count": 0,
            "has_issues": true, "has_projects": false, "has_wiki": false, "has_pages": false,
            "has_downloads": true, "has_discussions": false, "topics": [],
            "allow_forking": true, "web_commit_signoff_required": false,
            "permissions": {"admin": false, "maintain": false, "push": true, "triage": true, "pull": true},
        });
        if let (Some(o), Value::Object(counts)) = (v.as_object_mut(), counts) {
            o.extend(counts);
        }
        // The hypermedia URL templates every repository object carries.
        for (key, suffix) in [
            ("archive_url", "{archive_format}{/ref}"),
            ("assignees_url", "assignees{/user}"),
            ("blobs_url", "git/blobs{/sha}"),
            ("branches_url", "branches{/branch}"),
            ("collaborators_url", "collaborators{/collaborator}"),
            ("comments_url", "comments{/number}"),
            ("commits_url", "commits{/sha}"),
            ("compare_url", "compare/{base}...{head}"),
            ("contents_url", "contents/{+path}"),
            ("contributors_url", "contributors"),
            ("deployments_url", "deployments"),
            ("downloads_url", "downloads"),
            ("events_url", "events"),
            ("forks_url", "forks"),
            ("git_commits_url", "git/commits{/sha}"),
            ("git_refs_url", "git/refs{/sha}"),
            ("git_tags_url", "git/tags{/sha}"),
            ("hooks_url", "hooks"),
            ("issue_comment_url", "issues/comments{/number}"),
            ("issue_events_url", "issues/events{/number}"),
            ("issues_url", "issues{/number}"),
            ("keys_url", "keys{/key_id}"),
            ("labels_url", "labels{/name}"),
            ("languages_url", "languages"),
            ("merges_url", "merges"),
            ("milestones_url", "milestones{/number}"),
            (
                "notifications_url",
                "notifications{?since,all,participating}",
            ),
            ("pulls_url", "pulls{/number}"),
            ("releases_url", "releases{/id}"),
            ("stargazers_url", "stargazers"),
            ("statuses_url", "statuses/{sha}"),
            ("subscribers_url", "subscribers"),
            ("subscription_url", "subscription"),
            ("tags_url", "tags"),
            ("teams_url", "teams"),
            ("trees_url", "git/trees{/sha}"),
        ] {
            v[key] = json!(u(suffix));
        }
        v
    }

    /// The "minimal repository" a workflow run's `repository` and
    /// `head_repository` carry on GitHub: identity, owner and the URL
    /// templates, without the counts and timestamps of the full object
    /// (so a run's answer, and its `ETag`, do not change when another pull
    /// request opens or closes).
    pub fn minimal_repo_json(&self, r: &Repo) -> Value {
        const KEPT: &[&str] = &[
            "id",
            "node_id",
            "name",
            "full_name",
            "private",
            "owner",
            "html_url",
            "description",
            "fork",
            "url",
        ];
        let full = self.repo_json(r);
        let mut out = serde_json::Map::new();
        if let Value::Object(o) = full {
            for (k, v) in o {
                // The clone addresses belong to the full object only.
                let clone = matches!(
                    k.as_str(),
                    "mirror_url" | "git_url" | "clone_url" | "ssh_url" | "svn_url"
                );
                if KEPT.contains(&k.as_str()) || (k.ends_with("_url") && !clone) {
                    out.insert(k, v);
                }
            }
        }
        Value::Object(out)
    }

    pub fn label_json(&self, r: &Repo, name: &str) -> Value {
        let url = self.repo_url(&r.owner, &r.name);
        let l = r.labels.get(&name.to_ascii_lowercase());
        json!({
            "id": l.map(|l| l.id).unwrap_or(0),
            "node_id": format!("LA_{}", l.map(|l| l.id).unwrap_or(0)),
            "url": format!("{url}/labels/{}", url::form_urlencoded::byte_serialize(name.as_bytes()).collect::<String>()),
            "name": l.map(|l| l.name.as_str()).unwrap_or(name),
            "description": l.and_then(|l| l.description.clone()),
            "color": l.map(|l| l.color.as_str()).unwrap_or("ededed"),
            "default": false,
        })
    }

    /// Pull request JSON (octocrab's `PullRequest`), including the node id
    /// the GraphQL mutations take.
    pub fn pull_json(&self, r: &Repo, p: &Pull) -> Value {
        let url = self.repo_url(&r.owner, &r.name);
        let repo = self.repo_json(r);
        let base_sha = r.resolve(&p.base_ref).unwrap_or_default();
        let merge_base = r.objects.merge_base(&base_sha, &p.head_sha);
        let (commits, changed) = match &merge_base {
            Some(mb) => {
                let files = match (
                    r.objects.commits.get(mb),
                    r.objects.commits.get(&p.head_sha),
                ) {
                    (Some(a), Some(b)) => {
                        super::git::diff_files(&r.objects, &a.tree, &b.tree).len()
                    }
                    _ => 0,
                };
                (r.objects.commits_between(mb, &p.head_sha).len(), files)
            }
            None => (0, 0),
        };
        let (mergeable, mergeable_state) = r.mergeability(p);
        let html = format!("{}/pull/{}", self.html_base(&url), p.number);
        let links = json!({
            "self": {"href": format!("{url}/pulls/{}", p.number)},
            "html": {"href": html},
            "issue": {"href": format!("{url}/issues/{}", p.number)},
            "comments": {"href": format!("{url}/issues/{}/comments", p.number)},
            "review_comments": {"href": format!("{url}/pulls/{}/comments", p.number)},
            "review_comment": {"href": format!("{url}/pulls/comments{{/number}}")},
            "commits": {"href": format!("{url}/pulls/{}/commits", p.number)},
            "statuses": {"href": format!("{url}/statuses/{}", p.head_sha)},
        });
        let mut v = json!({
            "url": format!("{url}/pulls/{}", p.number), "id": p.id,
            "node_id": format!("PR_{}", p.id),
            "html_url": html, "diff_url": format!("{html}.diff"), "patch_url": format!("{html}.patch"),
            "issue_url": format!("{url}/issues/{}", p.number),
            "commits_url": format!("{url}/pulls/{}/commits", p.number),
            "review_comments_url": format!("{url}/pulls/{}/comments", p.number),
            "review_comment_url": format!("{url}/pulls/comments{{/number}}"),
            "comments_url": format!("{url}/issues/{}/comments", p.number),
            "statuses_url": format!("{url}/statuses/{}", p.head_sha),
            "number": p.number, "state": if p.open { "open" } else { "closed" },
            "locked": false, "title": p.title, "user": self.login_json(&p.user), "body": p.body,
            "labels": p.labels.iter().map(|l| self.label_json(r, l)).collect::<Vec<_>>(),
            "milestone": null, "active_lock_reason": null,
            "created_at": fmt_time(p.created_at), "updated_at": fmt_time(p.updated_at),
            "closed_at": p.closed_at.map(fmt_time),
            "merged_at": p.merged.as_ref().map(|x| fmt_time(x.at)),
            "merge_commit_sha": p.merged.as_ref().map(|x| x.sha.clone()),
        });
        let rest = json!({
            "assignee": null, "assignees": [], "requested_reviewers": [], "requested_teams": [],
            "head": {"label": format!("{}:{}", r.owner, p.head_ref), "ref": p.head_ref, "sha": p.head_sha,
                     "user": self.login_json(&r.owner), "repo": repo.clone()},
            "base": {"label": format!("{}:{}", r.owner, p.base_ref), "ref": p.base_ref, "sha": base_sha,
                     "user": self.login_json(&r.owner), "repo": repo},
            "author_association": self.author_association(r, &p.user), "auto_merge": null, "draft": p.draft,
            "merged": p.merged.is_some(), "mergeable": mergeable, "rebaseable": mergeable, "mergeable_state": mergeable_state,
            "merged_by": p.merged.as_ref().map(|x| self.login_json(&x.by)), "comments": r.comments.values().filter(|c| c.issue == p.number).count(),
            "review_comments": 0, "maintainer_can_modify": false,
            "commits": commits, "additions": 0, "deletions": 0, "changed_files": changed,
        });
        if let (Some(o), Value::Object(r2)) = (v.as_object_mut(), rest) {
            o.extend(r2);
        }
        v["_links"] = links;
        v
    }

    /// Issue JSON of a pull request (octocrab's `Issue`).
    pub fn issue_json(&self, r: &Repo, p: &Pull) -> Value {
        let url = self.repo_url(&r.owner, &r.name);
        let html = format!("{}/pull/{}", self.html_base(&url), p.number);
        json!({
            "id": p.id, "node_id": format!("I_{}", p.id),
            "url": format!("{url}/issues/{}", p.number), "repository_url": url,
            "labels_url": format!("{url}/issues/{}/labels{{/name}}", p.number),
            "comments_url": format!("{url}/issues/{}/comments", p.number),
            "events_url": format!("{url}/issues/{}/events", p.number),
            "html_url": html, "number": p.number,
            "state": if p.open { "open" } else { "closed" }, "title": p.title, "body": p.body,
            "user": self.login_json(&p.user),
            "labels": p.labels.iter().map(|l| self.label_json(r, l)).collect::<Vec<_>>(),
            "assignee": null, "assignees": [], "milestone": null, "locked": false,
            "comments": r.comments.values().filter(|c| c.issue == p.number).count(),
            "pull_request": {"url": format!("{url}/pulls/{}", p.number), "html_url": html,
                             "diff_url": format!("{html}.diff"), "patch_url": format!("{html}.patch")},
            "closed_at": p.closed_at.map(fmt_time), "created_at": fmt_time(p.created_at),
            "updated_at": fmt_time(p.updated_at), "draft": p.draft,
            "author_association": self.author_association(r, &p.user),
            "closed_by": if p.open { Value::Null } else {
                p.closed_by.as_deref().map_or(Value::Null, |l| self.login_json(l))
            },
        })
    }

    /// JSON of a plain issue (GitHub's `issue` schema).
    pub fn plain_issue_json(&self, r: &Repo, i: &Issue) -> Value {
        let url = self.repo_url(&r.owner, &r.name);
        json!({
            "id": i.id, "node_id": format!("I_{}", i.id),
            "url": format!("{url}/issues/{}", i.number), "repository_url": url,
            "labels_url": format!("{url}/issues/{}/labels{{/name}}", i.number),
            "comments_url": format!("{url}/issues/{}/comments", i.number),
            "events_url": format!("{url}/issues/{}/events", i.number),
            "html_url": format!("{}/issues/{}", self.html_base(&url), i.number),
            "number": i.number,
            "state": if i.open { "open" } else { "closed" }, "state_reason": i.state_reason,
            "title": i.title, "body": i.body,
            "user": self.login_json(&i.user),
            "labels": i.labels.iter().map(|l| self.label_json(r, l)).collect::<Vec<_>>(),
            "assignee": null, "assignees": [], "milestone": null, "locked": false,
            "comments": r.comments.values().filter(|c| c.issue == i.number).count(),
            "closed_at": i.closed_at.map(fmt_time), "created_at": fmt_time(i.created_at),
            "updated_at": fmt_time(i.updated_at),
            "author_association": self.author_association(r, &i.user),
            "closed_by": if i.open { Value::Null } else {
                i.closed_by.as_deref().map_or(Value::Null, |l| self.login_json(l))
            },
        })
    }

    /// JSON of issue or pull request `number` as an issue.
    pub fn any_issue_json(&self, r: &Repo, number: u64) -> Option<Value> {
        match r.pulls.get(&number) {
            Some(p) => Some(self.issue_json(r, p)),
            None => r.issues.get(&number).map(|i| self.plain_issue_json(r, i)),
        }
    }

    pub fn comment_json(&self, r: &Repo, c: &IssueComment) -> Value {
        let url = self.repo_url(&r.owner, &r.name);
        json!({
            "id": c.id, "node_id": format!("IC_{}", c.id),
            "url": format!("{url}/issues/comments/{}", c.id),
            "html_url": format!(
                "{}/{}/{}#issuecomment-{}",
                self.html_base(&url),
                if r.issues.contains_key(&c.issue) { "issues" } else { "pull" },
                c.issue,
                c.id
            ),
            "issue_url": format!("{url}/issues/{}", c.issue),
            "body": c.body, "user": self.login_json(&c.user),
            "created_at": fmt_time(c.created_at), "updated_at": fmt_time(c.updated_at),
            "author_association": self.author_association(r, &c.user),
        })
    }

    /// GitHub's `author_association` of `login` on a repository: `OWNER`
    /// for the owner account; `COLLABORATOR` for an invited collaborator
    /// of any permission (the simulator has no organizations, so never
    /// `MEMBER`); otherwise `CONTRIBUTOR` when they authored a commit on
    /// the default branch, else `NONE` (the values of the REST schema
    /// `author-association` in github/rest-api-description; GraphQL
    /// `CommentAuthorAssociation`: "CONTRIBUTOR: Author has previously
    /// committed to the repository", "NONE: Author has no association with
    /// the repository"). A GitHub App's bot is never a collaborator,
    /// whatever its installation may write: its comments read `NONE`, or
    /// `CONTRIBUTOR` once it has commits on the default branch, which is
    /// why reuse gates that trust OWNER/MEMBER/COLLABORATOR never trust an
    /// App's own comment.
    pub fn author_association(&self, r: &Repo, login: &str) -> &'static str {
        if login.eq_ignore_ascii_case(&r.owner) {
            return "OWNER";
        }
        let user = self.user(login);
        let is_bot = user.is_none_or(|u| u.is_bot);
        if !is_bot
            && r.collaborators
                .get(&login.to_ascii_lowercase())
                .is_some_and(|p| *p > Permission::None)
        {
            return "COLLABORATOR";
        }
        match user {
            Some(u) if r.has_contributed(u) => "CONTRIBUTOR",
            _ => "NONE",
        }
    }

    pub fn workflow_json(&self, r: &Repo, w: &Workflow) -> Value {
        let url = self.repo_url(&r.owner, &r.name);
        json!({
            "id": w.id, "node_id": format!("W_{}", w.id), "name": w.name, "path": w.path,
            "state": "active", "created_at": fmt_time(r.created_at), "updated_at": fmt_time(r.created_at),
            "url": format!("{url}/actions/workflows/{}", w.id),
            "html_url": format!("{}/blob/{}/{}", self.html_base(&url), r.default_branch, w.path),
            "badge_url": format!("{}/workflows/{}/badge.svg", self.html_base(&url), w.name),
        })
    }

    pub fn run_json(&self, r: &Repo, run: &Run) -> Value {
        let url = self.repo_url(&r.owner, &r.name);
        let path = r
            .workflows
            .iter()
            .find(|w| w.id == run.workflow_id)
            .map(|w| w.path.clone())
            .unwrap_or_default();
        let html = format!("{}/actions/runs/{}", self.html_base(&url), run.id);
        let prs: Vec<Value> = run
            .pull_requests
            .iter()
            .filter_map(|n| r.pulls.get(n))
            .map(|p| {
                json!({"id": p.id, "number": p.number, "url": format!("{url}/pulls/{}", p.number),
                       "head": {"ref": p.head_ref, "sha": p.head_sha, "repo": {"id": r.id, "url": url, "name": r.name}},
                       "base": {"ref": p.base_ref, "sha": r.resolve(&p.base_ref).unwrap_or_default(),
                                "repo": {"id": r.id, "url": url, "name": r.name}}})
            })
            .collect();
        let head_commit = r.objects.commits.get(&run.head_sha).map(|c| {
            json!({"id": run.head_sha, "tree_id": c.tree, "message": c.message,
                   "timestamp": fmt_time(c.committer.date),
                   "author": {"name": c.author.name, "email": c.author.email},
                   "committer": {"name": c.committer.name, "email": c.committer.email}})
        });
        json!({
            "id": run.id, "name": run.name, "node_id": format!("WFR_{}", run.id),
            "head_branch": run.head_branch, "head_sha": run.head_sha, "path": path,
            "display_title": run.display_title, "run_number": run.id % 100_000, "event": run.event,
            "status": run.status, "conclusion": run.conclusion, "workflow_id": run.workflow_id,
            "check_suite_id": run.id + 1, "check_suite_node_id": format!("CS_{}", run.id + 1),
            "url": format!("{url}/actions/runs/{}", run.id), "html_url": html,
            "pull_requests": prs, "created_at": fmt_time(run.created_at),
            "updated_at": fmt_time(run.updated_at), "run_started_at": fmt_time(run.run_started_at),
            "actor": self.login_json(&run.actor), "triggering_actor": self.login_json(&run.triggering_actor),
            "run_attempt": run.run_attempt,
            "jobs_url": format!("{url}/actions/runs/{}/jobs", run.id),
            "logs_url": format!("{url}/actions/runs/{}/logs", run.id),
            "check_suite_url": format!("{url}/check-suites/{}", run.id + 1),
            "artifacts_url": format!("{url}/actions/runs/{}/artifacts", run.id),
            "cancel_url": format!("{url}/actions/runs/{}/cancel", run.id),
            "rerun_url": format!("{url}/actions/runs/{}/rerun", run.id),
            "workflow_url": format!("{url}/actions/workflows/{}", run.workflow_id),
            "head_commit": head_commit, "repository": self.minimal_repo_json(r),
            "head_repository": self.minimal_repo_json(r),
        })
    }

    /// The jobs GitHub lists for a run's latest attempt.
    pub fn jobs_json(&self, r: &Repo, run: &Run) -> Vec<Value> {
        if run.jobs.is_empty() {
            return vec![self.job_json(r, run)];
        }
        let url = self.repo_url(&r.owner, &r.name);
        run.jobs
            .iter()
            .map(|j| {
                // A run that ended (cancelled, say) ends its open jobs with it.
                let (status, conclusion, completed) = if j.status != "completed"
                    && run.status == "completed"
                {
                    ("completed", run.conclusion.clone(), Some(run.updated_at))
                } else {
                    (j.status.as_str(), j.conclusion.clone(), j.completed_at)
                };
                json!({
                    "id": j.id, "run_id": run.id, "run_url": format!("{url}/actions/runs/{}", run.id),
                    "run_attempt": run.run_attempt, "node_id": format!("J_{}", j.id),
                    "head_sha": run.head_sha, "head_branch": run.head_branch,
                    "url": format!("{url}/actions/jobs/{}", j.id),
                    "html_url": format!("{}/actions/runs/{}/job/{}", self.html_base(&url), run.id, j.id),
                    "status": status, "conclusion": conclusion,
                    "created_at": fmt_time(run.run_started_at), "started_at": fmt_time(j.started_at),
                    "completed_at": completed.map(fmt_time),
                    "name": j.name, "steps": [], "check_run_url": format!("{url}/check-runs/{}", j.id),
                    "labels": ["ubuntu-latest"], "runner_id": null, "runner_name": j.runner_name,
                    "runner_group_id": null, "runner_group_name": null, "workflow_name": run.name,
                })
            })
            .collect()
    }

    pub fn job_json(&self, r: &Repo, run: &Run) -> Value {
        let url = self.repo_url(&r.owner, &r.name);
        let completed = run.status == "completed";
        json!({
            "id": run.job_id, "run_id": run.id, "run_url": format!("{url}/actions/runs/{}", run.id),
            "run_attempt": run.run_attempt, "node_id": format!("J_{}", run.job_id),
            "head_sha": run.head_sha, "head_branch": run.head_branch,
            "url": format!("{url}/actions/jobs/{}", run.job_id),
            "html_url": format!("{}/actions/runs/{}/job/{}", self.html_base(&url), run.id, run.job_id),
            "status": run.status, "conclusion": run.conclusion,
            "created_at": fmt_time(run.created_at), "started_at": fmt_time(run.run_started_at),
            "completed_at": if completed { Some(fmt_time(run.updated_at)) } else { None },
            "name": run.name, "steps": [], "check_run_url": format!("{url}/check-runs/{}", run.job_id),
            "labels": ["ubuntu-latest"], "runner_id": null, "runner_name": null,
            "runner_group_id": null, "runner_group_name": null, "workflow_name": run.name,
        })
    }

    pub fn artifact_json(&self, r: &Repo, a: &Artifact) -> Value {
        let url = self.repo_url(&r.owner, &r.name);
        json!({
            "id": a.id, "node_id": format!("MDg6QXJ0aWZhY3Q{}", a.id), "name": a.name,
            "size_in_bytes": a.zip.len(), "url": format!("{url}/actions/artifacts/{}", a.id),
            "archive_download_url": format!("{url}/actions/artifacts/{}/zip", a.id),
            "expired": a.expired, "digest": format!("sha256:{}", hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&a.zip))),
            "created_at": fmt_time(a.created_at), "updated_at": fmt_time(a.created_at),
            "expires_at": fmt_time(a.created_at + chrono::Duration::days(90)),
            "workflow_run": {"id": a.run_id, "repository_id": r.id, "head_repository_id": r.id,
                             "head_branch": r.runs.get(&a.run_id).map(|x| x.head_branch.clone()),
                             "head_sha": r.runs.get(&a.run_id).map(|x| x.head_sha.clone())},
        })
    }
}

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

impl GithubState {
    /// An empty GitHub with no users, tokens or repositories.
    pub fn new() -> Self {
        let recorded = Arc::new(std::sync::atomic::AtomicU64::new(0));
        Self {
            recorded: Arc::clone(&recorded),
            inner: Arc::new(Mutex::new(Model {
                base_url: "http://127.0.0.1".into(),
                users: BTreeMap::new(),
                tokens: HashMap::new(),
                repos: BTreeMap::new(),
                next_id: 10_000,
                faults: Vec::new(),
                log: Vec::new(),
                recorded,
                apps: HashMap::new(),
                run_details_supported: true,
                content_limit_per_minute: Some(CONTENT_LIMIT_PER_MINUTE),
                content_limit_per_hour: Some(CONTENT_LIMIT_PER_HOUR),
                content_writes: HashMap::new(),
                workflow_sets: HashMap::new(),
                cancel_delay: DEFAULT_CANCEL_DELAY,
                clock_offset: chrono::TimeDelta::zero(),
                created_at: Utc::now(),
                producer_overrides: BTreeMap::new(),
            })),
        }
    }

    pub(crate) async fn lock(&self) -> MutexGuard<'_, Model> {
        self.inner.lock().await
    }

    /// Sets the absolute base URL used in `url` fields and `Link` headers.
    pub async fn set_base_url(&self, url: &str) {
        self.lock().await.base_url = url.trim_end_matches('/').to_string();
    }

    /// The base URL the simulator answers on.
    pub async fn base_url(&self) -> String {
        self.lock().await.base_url.clone()
    }

    /// Registers an account (idempotent by login) and returns its id.
    pub async fn add_user(&self, login: &str, name: Option<&str>, is_bot: bool) -> u64 {
        let mut m = self.lock().await;
        if let Some(u) = m.user(login) {
            return u.id;
        }
        let id = m.id();
        m.users.insert(
            login.to_ascii_lowercase(),
            User {
                login: login.to_string(),
                id,
                name: name.map(str::to_string),
                email: format!("{id}+{login}@users.noreply.github.com"),
                is_bot,
            },
        );
        id
    }

    /// Registers a token for a user, with an optional primary limit per hour.
    pub async fn add_token(
        &self,
        login: &str,
        token: &str,
        limit: Option<u64>,
    ) -> Result<(), SimError> {
        if token.trim().is_empty() || token.chars().any(char::is_whitespace) {
            return Err(SimError::Invalid(
                "a token must be non-empty without whitespace".into(),
            ));
        }
        let mut m = self.lock().await;
        let user = m
            .user(login)
            .ok_or_else(|| SimError::NoUser(login.into()))?;
        let login = user.login.clone();
        m.tokens.insert(
            token.to_string(),
            TokenInfo {
                login,
                limit: limit.unwrap_or(DEFAULT_RATE_LIMIT),
                used: 0,
                reset: Utc::now().timestamp() + 3600,
                expires_at: None,
            },
        );
        Ok(())
    }

    /// Puts this GitHub's clock (the `Date` of its answers) `offset` from
    /// the local one.
    pub async fn set_clock_offset(&self, offset: chrono::TimeDelta) {
        self.lock().await.clock_offset = offset;
    }

    /// How far this GitHub's clock is from the local one.
    pub async fn clock_offset(&self) -> chrono::TimeDelta {
        self.lock().await.clock_offset
    }

    /// Revokes `token` as its owner or an organization admin would: GitHub
    /// then answers every request carrying it 401 "Bad credentials".
    /// `false` when there was no such token.
    pub async fn revoke_token(&self, token: &str) -> bool {
        self.lock().await.tokens.remove(token).is_some()
    }

    /// Creates an empty repository `owner/name` (with the two InferenceX
    /// workflows registered, since Klaud dispatches and watches them).
    pub async fn create_repo(&self, full: &str, default_branch: &str) -> Result<(), SimError> {
        let (owner, name) = full
            .split_once('/')
            .filter(|(o, n)| !o.is_empty() && !n.is_empty() && !n.contains('/'))
            .ok_or_else(|| SimError::Invalid(format!("repository {full:?} is not OWNER/NAME")))?;
        let mut m = self.lock().await;
        if m.repos.contains_key(&key(owner, name)) {
            return Err(SimError::RepoExists(full.into()));
        }
        let id = m.id();
        let mut workflows = Vec::new();
        for (file, wname) in [
            ("e2e-tests.yml", "End-to-End Tests"),
            ("run-sweep.yml", "Run Sweep"),
        ] {
            workflows.push(Workflow {
                id: m.id(),
                name: wname.into(),
                path: format!(".github/workflows/{file}"),
            });
        }
        m.repos.insert(
            key(owner, name),
            Repo {
                id,
                owner: owner.into(),
                name: name.into(),
                default_branch: default_branch.into(),
                created_at: Utc::now(),
                objects: Objects::default(),
                refs: BTreeMap::new(),
                pulls: BTreeMap::new(),
                issues: BTreeMap::new(),
                next_number: 1,
                comments: BTreeMap::new(),
                labels: BTreeMap::new(),
                collaborators: HashMap::new(),
                workflows,
                runs: BTreeMap::new(),
                artifacts: BTreeMap::new(),
                statuses: Vec::new(),
                reviews: BTreeMap::new(),
                review_comments: BTreeMap::new(),
            },
        );
        Ok(())
    }

    /// Commits every file under `dir` as the initial commit of the default
    /// branch (or on top of it) and returns the commit sha.
    pub async fn seed_from_dir(
        &self,
        full: &str,
        dir: &Path,
        login: Option<&str>,
    ) -> Result<String, SimError> {
        let mut files = BTreeMap::new();
        let mut stack = vec![dir.to_path_buf()];
        let io = |p: &Path, e| SimError::Io {
            path: p.display().to_string(),
            source: e,
        };
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).map_err(|e| io(&d, e))? {
                let entry = entry.map_err(|e| io(&d, e))?;
                let path = entry.path();
                let ft = entry.file_type().map_err(|e| io(&path, e))?;
                if ft.is_dir() {
                    if entry.file_name() != ".git" {
                        stack.push(path);
                    }
                } else if ft.is_file() {
                    let rel = path.strip_prefix(dir).map_err(|_| {
                        SimError::Invalid(format!("{} escapes the seed", path.display()))
                    })?;
                    let rel = rel
                        .to_str()
                        .ok_or_else(|| {
                            SimError::Invalid(format!("{} is not UTF-8", path.display()))
                        })?
                        .replace('\\', "/");
                    let bytes = std::fs::read(&path).map_err(|e| io(&path, e))?;
                    #[cfg(unix)]
                    let exec = {
                        use std::os::unix::fs::PermissionsExt;
                        entry
                            .metadata()
                            .map(|m| m.permissions().mode() & 0o111 != 0)
                            .unwrap_or(false)
                    };
                    #[cfg(not(unix))]
                    let exec = false;
                    files.insert(rel, (Some(bytes), exec));
                }
            }
        }
        let m = self.lock().await;
        let branch = m
            .repos
            .get(&full.to_ascii_lowercase())
            .ok_or_else(|| SimError::NoRepo(full.into()))?
            .default_branch
            .clone();
        drop(m);
        self.push_files(full, &branch, login, files, "Initial commit")
            .await
    }

    /// Pushes one commit on `branch` (created when missing) changing the
    /// given files (`None` deletes), authored by `login` — e.g. a maintainer
    /// pushing onto a bot branch. Returns the new commit sha.
    pub async fn push_commit(
        &self,
        full: &str,
        branch: &str,
        login: &str,
        files: BTreeMap<String, Option<Vec<u8>>>,
        message: &str,
    ) -> Result<String, SimError> {
        let files = files.into_iter().map(|(k, v)| (k, (v, false))).collect();
        self.push_files(full, branch, Some(login), files, message)
            .await
    }

    async fn push_files(
        &self,
        full: &str,
        branch: &str,
        login: Option<&str>,
        files: BTreeMap<String, (Option<Vec<u8>>, bool)>,
        message: &str,
    ) -> Result<String, SimError> {
        let mut m = self.lock().await;
        if let Some(l) = login
            && m.user(l).is_none()
        {
            return Err(SimError::NoUser(l.into()));
        }
        let sig = m.signature_of(login);
        let r = m.repo_by_full(full)?;
        let full_ref = format!("refs/heads/{branch}");
        let parent = r.refs.get(&full_ref).cloned();
        let mut flat = match parent.as_ref().and_then(|p| r.objects.commits.get(p)) {
            Some(c) => r.objects.flatten(&c.tree.clone()),
            None => BTreeMap::new(),
        };
        for (path, (content, exec)) in files {
            match content {
                Some(bytes) => {
                    let sha = r.objects.put_blob(bytes);
                    let mode = if exec { MODE_EXEC } else { MODE_FILE };
                    flat.insert(path, (mode.to_string(), sha));
                }
                None => {
                    flat.remove(&path);
                }
            }
        }
        let tree = r.objects.build_tree(&flat);
        let sha = r.objects.put_commit(CommitObj {
            tree,
            parents: parent.iter().cloned().collect(),
            author: sig.clone(),
            committer: sig,
            message: message.to_string(),
        });
        r.set_ref(&full_ref, &sha);
        let default_branch = r.default_branch == branch;
        let pulls: Vec<u64> = r
            .pulls
            .values()
            .filter(|p| p.open && p.head_ref == branch)
            .map(|p| p.number)
            .collect();
        let (owner, name) = full.split_once('/').unwrap_or((full, ""));
        let sender = login.unwrap_or("web-flow").to_string();
        let sim = |e: ApiError| SimError::Invalid(e.message);
        if default_branch {
            super::workflow_events::register_files(&mut m, owner, name, &sha).map_err(sim)?;
        }
        if let Some(before) = &parent {
            super::workflow_events::push_event(
                &mut m, owner, name, &full_ref, before, &sha, &sender,
            )
            .map_err(sim)?;
        }
        for number in pulls {
            super::workflow_events::pull_request_event(
                &mut m,
                owner,
                name,
                number,
                "synchronize",
                None,
                &sender,
            )
            .map_err(sim)?;
        }
        Ok(sha)
    }

    /// Sets a user's permission on a repository.
    pub async fn set_permission(
        &self,
        full: &str,
        login: &str,
        perm: Permission,
    ) -> Result<(), SimError> {
        let mut m = self.lock().await;
        if m.user(login).is_none() {
            return Err(SimError::NoUser(login.into()));
        }
        m.repo_by_full(full)?
            .collaborators
            .insert(login.to_ascii_lowercase(), perm);
        Ok(())
    }

    /// The workflow files (`.github/workflows/*.yml`, by file name) at the tip
    /// of the default branch that parse; empty when the repository has none
    /// (then the simulator keeps its built-in InferenceX behaviour).
    pub async fn workflow_files(&self, full: &str) -> Vec<String> {
        let mut m = self.lock().await;
        let Some((owner, name)) = full.split_once('/') else {
            return Vec::new();
        };
        let Some(tip) = m
            .repo(owner, name)
            .ok()
            .and_then(|r| r.resolve(&r.default_branch))
        else {
            return Vec::new();
        };
        super::workflow_events::set_at(&mut m, owner, name, &tip)
            .map(|set| set.names().map(str::to_string).collect())
            .unwrap_or_default()
    }

    /// Registers a workflow file (e.g. `.github/workflows/x.yml`) and returns its id.
    pub async fn add_workflow(&self, full: &str, path: &str, name: &str) -> Result<u64, SimError> {
        let mut m = self.lock().await;
        let id = m.id();
        let r = m.repo_by_full(full)?;
        if let Some(w) = r.workflows.iter().find(|w| w.path == path) {
            return Ok(w.id);
        }
        r.workflows.push(Workflow {
            id,
            name: name.into(),
            path: path.into(),
        });
        Ok(id)
    }

    /// Removes a workflow (by file name, path or id), as if its file had
    /// been deleted from the default branch; `false` when there was none.
    pub async fn remove_workflow(&self, full: &str, workflow: &str) -> Result<bool, SimError> {
        let mut m = self.lock().await;
        let r = m.repo_by_full(full)?;
        let Some(id) = r.workflow(workflow).map(|w| w.id) else {
            return Ok(false);
        };
        r.workflows.retain(|w| w.id != id);
        Ok(true)
    }

    /// Completes a workflow run with a conclusion and artifacts (zipped here).
    pub async fn complete_run(
        &self,
        full: &str,
        run_id: u64,
        conclusion: &str,
        artifacts: ArtifactFiles,
    ) -> Result<(), SimError> {
        let mut zipped = Vec::new();
        for (name, files) in artifacts {
            zipped.push((name, zip_files(&files)?));
        }
        let mut m = self.lock().await;
        let ids: Vec<u64> = zipped.iter().map(|_| m.id()).collect();
        let r = m.repo_by_full(full)?;
        let now = Utc::now();
        let run = r
            .runs
            .get_mut(&run_id)
            .ok_or_else(|| SimError::NotFound(format!("workflow run {run_id}")))?;
        run.status = "completed".into();
        run.conclusion = Some(conclusion.to_string());
        run.cancel_requested = false;
        run.updated_at = now;
        for ((name, zip), id) in zipped.into_iter().zip(ids) {
            r.artifacts.insert(
                id,
                Artifact {
                    id,
                    run_id,
                    name,
                    zip,
                    created_at: now,
                    expired: false,
                },
            );
        }
        Ok(())
    }

    /// Records a finished workflow run on `head_sha` with the given jobs
    /// (name, conclusion) and artifacts, as if the repository's workflow had
    /// run there (a sweep that ran before the test started); returns its id.
    pub async fn add_finished_run(&self, full: &str, run: FinishedRun) -> Result<u64, SimError> {
        let FinishedRun {
            workflow,
            head_sha,
            event,
            conclusion,
            jobs,
            artifacts,
        } = run;
        let (workflow, head_sha, event, conclusion) = (
            workflow.as_str(),
            head_sha.as_str(),
            event.as_str(),
            conclusion.as_str(),
        );
        let mut zipped = Vec::new();
        for (name, files) in artifacts {
            zipped.push((name, zip_files(&files)?));
        }
        let mut m = self.lock().await;
        let run_id = m.id();
        let job_id = m.id();
        let job_ids: Vec<u64> = jobs.iter().map(|_| m.id()).collect();
        let artifact_ids: Vec<u64> = zipped.iter().map(|_| m.id()).collect();
        let r = m.repo_by_full(full)?;
        if !r.objects.commits.contains_key(head_sha) {
            return Err(SimError::NotFound(format!("commit {head_sha}")));
        }
        let w = r
            .workflow(workflow)
            .cloned()
            .ok_or_else(|| SimError::NotFound(format!("workflow {workflow}")))?;
        let head_branch = r
            .pulls
            .values()
            .find(|p| p.head_sha == head_sha)
            .map(|p| p.head_ref.clone())
            .unwrap_or_else(|| r.default_branch.clone());
        let pull_requests = r
            .pulls
            .values()
            .filter(|p| p.open && p.head_sha == head_sha)
            .map(|p| p.number)
            .collect();
        let now = Utc::now();
        let jobs = jobs
            .into_iter()
            .zip(job_ids)
            .map(|((name, conclusion), id)| Job {
                id,
                name,
                status: "completed".into(),
                conclusion: Some(conclusion),
                started_at: now,
                completed_at: Some(now),
                log: String::new(),
                runner_name: None,
            })
            .collect();
        r.runs.insert(
            run_id,
            Run {
                id: run_id,
                workflow_id: w.id,
                name: w.name.clone(),
                display_title: w.name.clone(),
                event: event.into(),
                status: "completed".into(),
                conclusion: Some(conclusion.into()),
                head_branch,
                head_sha: head_sha.into(),
                actor: r.owner.clone(),
                triggering_actor: r.owner.clone(),
                run_attempt: 1,
                inputs: Value::Null,
                pull_requests,
                created_at: now,
                updated_at: now,
                run_started_at: now,
                job_id,
                concurrency_group: None,
                past_attempts: Vec::new(),
                cancel_requested: false,
                jobs,
                context: None,
            },
        );
        for ((name, zip), id) in zipped.into_iter().zip(artifact_ids) {
            r.artifacts.insert(
                id,
                Artifact {
                    id,
                    run_id,
                    name,
                    zip,
                    created_at: now,
                    expired: false,
                },
            );
        }
        Ok(run_id)
    }

    /// Every repository's `owner/name`.
    pub async fn repo_names(&self) -> Vec<String> {
        let m = self.lock().await;
        m.repos.values().map(Repo::full_name).collect()
    }

    /// Sets how long an accepted cancel takes to finish its run (the 202
    /// comes at once either way, as on GitHub).
    pub async fn set_cancel_delay(&self, delay: std::time::Duration) {
        self.lock().await.cancel_delay = delay;
    }

    /// Sets a run's status (`queued`, `in_progress`, `completed`, ...).
    pub async fn set_run_status(
        &self,
        full: &str,
        run_id: u64,
        status: &str,
        conclusion: Option<&str>,
    ) -> Result<(), SimError> {
        let mut m = self.lock().await;
        let r = m.repo_by_full(full)?;
        let run = r
            .runs
            .get_mut(&run_id)
            .ok_or_else(|| SimError::NotFound(format!("workflow run {run_id}")))?;
        run.status = status.to_string();
        run.conclusion = conclusion.map(str::to_string);
        run.cancel_requested = false;
        run.updated_at = Utc::now();
        Ok(())
    }

    /// Registers a GitHub App (RS256 public key in PEM) with one
    /// installation that has write access to `repo`. Its installation
    /// tokens act as `<slug>[bot]`, which is returned.
    pub async fn add_app(
        &self,
        app_id: u64,
        slug: &str,
        public_key_pem: &str,
        installation_id: u64,
        repo: &str,
    ) -> Result<String, SimError> {
        let login = format!("{slug}[bot]");
        self.add_user(&login, None, true).await;
        self.set_permission(repo, &login, Permission::Write).await?;
        let mut m = self.lock().await;
        m.apps.insert(
            app_id,
            super::apps::App {
                id: app_id,
                slug: slug.to_string(),
                name: slug.to_string(),
                public_key_pem: public_key_pem.to_string(),
                installations: vec![super::apps::Installation {
                    id: installation_id,
                    account: repo.split('/').next().unwrap_or_default().to_string(),
                    repositories: vec![repo.to_string()],
                }],
                token_lifetime_secs: super::apps::INSTALLATION_TOKEN_LIFETIME_SECS,
            },
        );
        Ok(login)
    }

    /// Makes dispatches accept or reject `return_run_details`.
    pub async fn set_return_run_details_supported(&self, supported: bool) {
        self.lock().await.run_details_supported = supported;
    }

    /// Sets GitHub's secondary limit for content-creating requests per
    /// minute (`None` turns it off; the hourly one stays): past
    /// `per_minute` writes in a minute a token gets 403 with
    /// `retry-after`, and the write is not performed.
    pub async fn set_content_limit(&self, per_minute: Option<u32>) {
        self.lock().await.content_limit_per_minute = per_minute;
    }

    /// Sets both content-creation limits (`None` turns one off).
    pub async fn set_content_limits(&self, per_minute: Option<u32>, per_hour: Option<u32>) {
        let mut m = self.lock().await;
        m.content_limit_per_minute = per_minute;
        m.content_limit_per_hour = per_hour;
    }

    /// Installs a fault.
    pub async fn add_fault(&self, fault: Fault) {
        self.lock().await.faults.push(fault);
    }

    /// Removes every installed fault.
    pub async fn clear_faults(&self) {
        self.lock().await.faults.clear();
    }

    /// A copy of the request log.
    pub async fn request_log(&self) -> Vec<LogEntry> {
        self.lock().await.log.clone()
    }

    /// How many requests the log has recorded since start (entries dropped
    /// past [`LOG_CAPACITY`] included). Readable without waiting for the
    /// lock, so a synchronous observer can mark a position in the log: a
    /// request is recorded before its response is sent, so every request a
    /// client has seen answered is below the mark.
    pub fn requests_recorded(&self) -> u64 {
        self.recorded.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The request log with the sequence number of its first entry (the
    /// entry at index `i` is request number `first + i`, counted from 0 as
    /// [`GithubState::requests_recorded`] counts).
    pub async fn request_log_numbered(&self) -> (u64, Vec<LogEntry>) {
        let m = self.lock().await;
        let total = m.recorded.load(std::sync::atomic::Ordering::SeqCst);
        (total - m.log.len() as u64, m.log.clone())
    }

    /// The sha a ref (full name) points at.
    pub async fn ref_sha(&self, full: &str, name: &str) -> Option<String> {
        let m = self.lock().await;
        m.repos
            .get(&full.to_ascii_lowercase())?
            .refs
            .get(name)
            .cloned()
    }

    /// Numbers of all pull requests whose head is `branch`.
    pub async fn pulls_for_head(&self, full: &str, branch: &str) -> Vec<u64> {
        let m = self.lock().await;
        m.repos
            .get(&full.to_ascii_lowercase())
            .map(|r| {
                r.pulls
                    .values()
                    .filter(|p| p.head_ref == branch)
                    .map(|p| p.number)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Ids of all runs, oldest first.
    pub async fn run_ids(&self, full: &str) -> Vec<u64> {
        let m = self.lock().await;
        m.repos
            .get(&full.to_ascii_lowercase())
            .map(|r| r.runs.keys().copied().collect())
            .unwrap_or_default()
    }

    /// Ids of the runs someone dispatched (`workflow_dispatch`): the smokes,
    /// not the published producer runs the results API names.
    pub async fn dispatched_run_ids(&self, full: &str) -> Vec<u64> {
        let m = self.lock().await;
        m.repos
            .get(&full.to_ascii_lowercase())
            .map(|r| {
                r.runs
                    .values()
                    .filter(|run| run.event == "workflow_dispatch")
                    .map(|run| run.id)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Bodies of the comments on an issue or PR, oldest first.
    pub async fn comment_bodies(&self, full: &str, number: u64) -> Vec<String> {
        let m = self.lock().await;
        m.repos
            .get(&full.to_ascii_lowercase())
            .map(|r| {
                r.comments
                    .values()
                    .filter(|c| c.issue == number)
                    .map(|c| c.body.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every Markdown text on a repository: issue and pull request titles
    /// and bodies and every comment, each with where it is
    /// (`issue #3 body`, `comment 12 on #5`), in that order.
    pub async fn markdown_texts(&self, full: &str) -> Vec<(String, String)> {
        let m = self.lock().await;
        let Some(r) = m.repos.get(&full.to_ascii_lowercase()) else {
            return Vec::new();
        };
        let issues = r.issues.values().flat_map(|i| {
            [
                (format!("issue #{} title", i.number), i.title.clone()),
                (
                    format!("issue #{} body", i.number),
                    i.body.clone().unwrap_or_default(),
                ),
            ]
        });
        let pulls = r.pulls.values().flat_map(|p| {
            [
                (format!("pull #{} title", p.number), p.title.clone()),
                (
                    format!("pull #{} body", p.number),
                    p.body.clone().unwrap_or_default(),
                ),
            ]
        });
        let comments = r
            .comments
            .iter()
            .map(|(id, c)| (format!("comment {id} on #{}", c.issue), c.body.clone()));
        issues.chain(pulls).chain(comments).collect()
    }

    /// The plain issues of a repository (number, title, body, open, labels),
    /// by number.
    pub async fn issues(&self, full: &str) -> Vec<IssueView> {
        let m = self.lock().await;
        m.repos
            .get(&full.to_ascii_lowercase())
            .map(|r| {
                r.issues
                    .values()
                    .map(|i| IssueView {
                        number: i.number,
                        title: i.title.clone(),
                        body: i.body.clone().unwrap_or_default(),
                        open: i.open,
                        author: i.user.clone(),
                        labels: i.labels.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Remaining primary budget of a token.
    pub async fn rate_remaining(&self, token: &str) -> Option<u64> {
        let m = self.lock().await;
        m.tokens.get(token).map(|t| t.limit.saturating_sub(t.used))
    }
}

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
