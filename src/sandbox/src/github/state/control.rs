//! The simulator's Rust-level control API: seeding repositories, users,
//! tokens and runs, setting faults and limits, and reading back what was
//! asked and written.

use super::*;

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
                graphql_documents: std::collections::VecDeque::new(),
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

    pub(super) async fn push_files(
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
            crate::github::workflow_events::register_files(&mut m, owner, name, &sha)
                .map_err(sim)?;
        }
        if let Some(before) = &parent {
            crate::github::workflow_events::push_event(
                &mut m, owner, name, &full_ref, before, &sha, &sender,
            )
            .map_err(sim)?;
        }
        for number in pulls {
            crate::github::workflow_events::pull_request_event(
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
        crate::github::workflow_events::set_at(&mut m, owner, name, &tip)
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

    /// Replaces the log text of job `job_id` (GitHub serves it through the
    /// job's `logs` redirect).
    pub async fn set_job_log(&self, full: &str, job_id: u64, log: String) -> Result<(), SimError> {
        let mut m = self.lock().await;
        let r = m.repo_by_full(full)?;
        let job = r
            .runs
            .values_mut()
            .flat_map(|run| run.jobs.iter_mut())
            .find(|j| j.id == job_id)
            .ok_or_else(|| SimError::NotFound(format!("job {job_id}")))?;
        job.log = log;
        Ok(())
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
            crate::github::apps::App {
                id: app_id,
                slug: slug.to_string(),
                name: slug.to_string(),
                public_key_pem: public_key_pem.to_string(),
                installations: vec![crate::github::apps::Installation {
                    id: installation_id,
                    account: repo.split('/').next().unwrap_or_default().to_string(),
                    repositories: vec![repo.to_string()],
                }],
                token_lifetime_secs: crate::github::apps::INSTALLATION_TOKEN_LIFETIME_SECS,
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

    /// The newest GraphQL documents received (at most
    /// [`super::GRAPHQL_DOCUMENTS_KEPT`]), oldest first.
    pub async fn graphql_documents(&self) -> Vec<super::GraphqlDocument> {
        self.lock()
            .await
            .graphql_documents
            .iter()
            .cloned()
            .collect()
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

    /// `read` over repository `full` (any case) under the lock; a
    /// repository that does not exist reads as nothing (`T::default()`).
    async fn read_repo<T: Default>(&self, full: &str, read: impl FnOnce(&Repo) -> T) -> T {
        let m = self.lock().await;
        m.repos
            .get(&full.to_ascii_lowercase())
            .map(read)
            .unwrap_or_default()
    }

    /// The sha a ref (full name) points at.
    pub async fn ref_sha(&self, full: &str, name: &str) -> Option<String> {
        self.read_repo(full, |r| r.refs.get(name).cloned()).await
    }

    /// Numbers of all pull requests whose head is `branch`.
    pub async fn pulls_for_head(&self, full: &str, branch: &str) -> Vec<u64> {
        self.read_repo(full, |r| {
            r.pulls
                .values()
                .filter(|p| p.head_ref == branch)
                .map(|p| p.number)
                .collect()
        })
        .await
    }

    /// Ids of all runs, oldest first.
    pub async fn run_ids(&self, full: &str) -> Vec<u64> {
        self.read_repo(full, |r| r.runs.keys().copied().collect())
            .await
    }

    /// Ids of the runs someone dispatched (`workflow_dispatch`): the smokes,
    /// not the published producer runs the results API names.
    pub async fn dispatched_run_ids(&self, full: &str) -> Vec<u64> {
        self.read_repo(full, |r| {
            r.runs
                .values()
                .filter(|run| run.event == "workflow_dispatch")
                .map(|run| run.id)
                .collect()
        })
        .await
    }

    /// Names of the artifacts run `run` uploaded, in id order.
    pub async fn artifact_names(&self, full: &str, run: u64) -> Vec<String> {
        self.read_repo(full, |r| {
            r.artifacts
                .values()
                .filter(|a| a.run_id == run)
                .map(|a| a.name.clone())
                .collect()
        })
        .await
    }

    /// Bodies of the comments on an issue or PR, oldest first.
    pub async fn comment_bodies(&self, full: &str, number: u64) -> Vec<String> {
        self.read_repo(full, |r| {
            r.comments
                .values()
                .filter(|c| c.issue == number)
                .map(|c| c.body.clone())
                .collect()
        })
        .await
    }

    /// Ids of the comments on an issue or PR, oldest first.
    pub async fn comment_ids(&self, full: &str, number: u64) -> Vec<u64> {
        self.read_repo(full, |r| {
            r.comments
                .iter()
                .filter(|(_, c)| c.issue == number)
                .map(|(id, _)| *id)
                .collect()
        })
        .await
    }

    /// Every Markdown text on a repository: issue and pull request titles
    /// and bodies and every comment, each with where it is
    /// (`issue #3 body`, `comment 12 on #5`), in that order.
    pub async fn markdown_texts(&self, full: &str) -> Vec<(String, String)> {
        self.read_repo(full, |r| {
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
        })
        .await
    }

    /// The plain issues of a repository (number, title, body, open, labels),
    /// by number.
    pub async fn issues(&self, full: &str) -> Vec<IssueView> {
        self.read_repo(full, |r| {
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
        .await
    }

    /// Remaining primary budget of a token.
    pub async fn rate_remaining(&self, token: &str) -> Option<u64> {
        let m = self.lock().await;
        m.tokens.get(token).map(|t| t.limit.saturating_sub(t.used))
    }
}
