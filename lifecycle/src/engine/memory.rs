//! An in-memory [`Forge`] with GitHub's semantics as the engine sees them,
//! like `klaud_claims::MemoryRefStore` for claims: branches and commits
//! (with file contents), pull requests, comments, labels and workflow runs
//! whose conclusions and artifacts a test scripts. Every write checks its
//! proof exactly as the GitHub forge does, and is logged, so each engine
//! step can be tested without HTTP or sleeps. Transport-level behaviour
//! (retries, ambiguous writes, pagination) stays with the GitHub simulator.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use klaud_claims::{
    CommitSha, MemoryRefStore, PullNumber, RefStore, RefStoreError, RefTip, is_coordination_ref,
};
use serde_json::Value;

use super::context::forge_sha;
use super::forge::{
    ArtifactInfo, Comment, Forge, ForgeError, Pull, PullState, Run, RunConclusion, RunEvent,
    RunQuery, RunStatus,
};
use super::forge::{Permitted, Write, Written};

/// The title the benchmark repository's smoke workflow gives a dispatched
/// run (its `run-name`), from the `test-name` input.
fn dispatch_title(inputs: &Value) -> String {
    let name = inputs
        .get("test-name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    format!("e2e Test - {name}")
}

/// The claim store a [`MemoryForge`] hands out: every read, and writes of
/// claim and recovery-lease refs only.
#[derive(Debug)]
struct ClaimRefs(Arc<MemoryRefStore>);

fn coordination_only(name: &str) -> Result<(), RefStoreError> {
    if is_coordination_ref(name) {
        Ok(())
    } else {
        Err(RefStoreError::Other(format!(
            "{name} is not a claim or recovery-lease ref; the claim store does not write it"
        )))
    }
}

#[async_trait]
impl RefStore for ClaimRefs {
    async fn read_ref(&self, name: &str) -> Result<Option<RefTip>, RefStoreError> {
        self.0.read_ref(name).await
    }
    async fn list_refs(&self, prefix: &str) -> Result<Vec<RefTip>, RefStoreError> {
        self.0.list_refs(prefix).await
    }
    async fn create_commit(
        &self,
        message: &str,
        tree: &str,
        parents: &[String],
    ) -> Result<String, RefStoreError> {
        self.0.create_commit(message, tree, parents).await
    }
    async fn create_ref(&self, name: &str, sha: &str) -> Result<(), RefStoreError> {
        coordination_only(name)?;
        self.0.create_ref(name, sha).await
    }
    async fn fast_forward_ref(&self, name: &str, sha: &str) -> Result<(), RefStoreError> {
        coordination_only(name)?;
        self.0.fast_forward_ref(name, sha).await
    }
    async fn delete_ref(&self, name: &str) -> Result<(), RefStoreError> {
        coordination_only(name)?;
        self.0.delete_ref(name).await
    }
    async fn commit_tree(&self, sha: &str) -> Result<String, RefStoreError> {
        self.0.commit_tree(sha).await
    }
}

#[derive(Debug, Clone)]
struct StoredRun {
    run: Run,
    workflow: String,
    artifacts: Vec<(ArtifactInfo, Vec<u8>)>,
    /// Its one job's log and runner, when a test staged them.
    job: Option<(String, Option<String>)>,
}

#[derive(Debug, Default)]
struct State {
    trees: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    pulls: Vec<Pull>,
    comments: Vec<(PullNumber, Comment)>,
    runs: Vec<StoredRun>,
    writes: Vec<String>,
    next_id: u64,
    /// sha → (message, parents, changed paths, author) of every commit
    /// made through this forge, for the compare API.
    commits: BTreeMap<String, (String, Vec<String>, Vec<String>, String)>,
    /// login → repository role; anyone else is no collaborator (404).
    permissions: BTreeMap<String, String>,
}

impl State {
    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn pull_mut(&mut self, number: PullNumber) -> Result<&mut Pull, ForgeError> {
        self.pulls
            .iter_mut()
            .find(|p| p.number == number)
            .ok_or_else(|| ForgeError::NotFound(format!("pull request #{number}")))
    }

    fn run_mut(&mut self, id: u64) -> Result<&mut StoredRun, ForgeError> {
        self.runs
            .iter_mut()
            .find(|r| r.run.id == id)
            .ok_or_else(|| ForgeError::NotFound(format!("run {id}")))
    }
}

/// A stateful fake of the lifecycle [`Forge`] for one repository.
#[derive(Debug)]
pub struct MemoryForge {
    repo: String,
    bot: String,
    store: Arc<MemoryRefStore>,
    claims: ClaimRefs,
    sweep: Option<(String, Vec<String>)>,
    return_run_details: bool,
    state: Mutex<State>,
}

fn store_err(e: RefStoreError) -> ForgeError {
    match e {
        RefStoreError::AlreadyExists(w) => ForgeError::AlreadyExists(w),
        RefStoreError::NotFastForward(w) => ForgeError::NotFastForward(w),
        RefStoreError::NotFound(w) => ForgeError::NotFound(w),
        // The fake store's failures are injected messages: keep the text
        // the tests inject, without the store's `ref store:` prefix.
        RefStoreError::Other(w) | RefStoreError::CredentialRefused(w) => ForgeError::Other(w),
    }
}

impl MemoryForge {
    /// An empty repository `repo` (`owner/name`) where the bot is `bot`.
    pub fn new(repo: &str, bot: &str) -> Self {
        let store = Arc::new(MemoryRefStore::new());
        Self {
            repo: repo.to_owned(),
            bot: bot.to_owned(),
            claims: ClaimRefs(store.clone()),
            store,
            sweep: None,
            return_run_details: true,
            state: Mutex::new(State::default()),
        }
    }

    /// Adding any of `labels` to a pull request starts a `pull_request` run
    /// of `workflow` on its head, titled like the PR (what the benchmark
    /// repository's sweep workflow does).
    pub fn with_sweep(mut self, workflow: &str, labels: &[String]) -> Self {
        self.sweep = Some((workflow.to_owned(), labels.to_vec()));
        self
    }

    /// Dispatches answer without the run id, as older GitHub servers do.
    pub fn without_run_details(mut self) -> Self {
        self.return_run_details = false;
        self
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A test that panicked mid-write poisons nothing worth keeping.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn log(&self, write: String) {
        self.lock().writes.push(write);
    }

    /// Every write made so far, e.g. `comment #1`, in order.
    pub fn writes(&self) -> Vec<String> {
        self.lock().writes.clone()
    }

    /// The underlying git objects and refs (for tests that plant claims or
    /// foreign commits).
    pub fn git(&self) -> &MemoryRefStore {
        &self.store
    }

    async fn commit(
        &self,
        parent: Option<&str>,
        files: &[(String, Vec<u8>)],
        message: &str,
    ) -> Result<String, ForgeError> {
        self.commit_with(parent, parent, files, message).await
    }

    /// A commit on `tree_of`'s tree plus `files`, whose first parent is
    /// `parent` and second `merged` when it differs from `parent`.
    async fn commit_with(
        &self,
        parent: Option<&str>,
        tree_of: Option<&str>,
        files: &[(String, Vec<u8>)],
        message: &str,
    ) -> Result<String, ForgeError> {
        let mut tree = match tree_of {
            Some(p) => {
                let id = self.store.commit_tree(p).await.map_err(store_err)?;
                self.lock().trees.get(&id).cloned().unwrap_or_default()
            }
            None => BTreeMap::new(),
        };
        for (path, bytes) in files {
            tree.insert(path.clone(), bytes.clone());
        }
        let tree_id = {
            let mut st = self.lock();
            let id = format!("tree-{}", st.id());
            st.trees.insert(id.clone(), tree);
            id
        };
        let mut parents: Vec<String> = parent.map(str::to_owned).into_iter().collect();
        if let Some(second) = tree_of.filter(|t| Some(*t) != parent) {
            parents.push(second.to_owned());
        }
        let sha = self.store.commit_on_tree(message, &tree_id, &parents);
        let paths = files.iter().map(|(p, _)| p.clone()).collect();
        let bot = self.bot.clone();
        self.lock()
            .commits
            .insert(sha.clone(), (message.to_owned(), parents, paths, bot));
        Ok(sha)
    }

    /// Records `login` as the author of `sha` (a commit made through this
    /// forge is the bot's until then).
    pub fn set_author(&self, sha: &str, login: &str) {
        if let Some(c) = self.lock().commits.get_mut(sha) {
            c.3 = login.to_owned();
        }
    }

    /// Commits `files` on `branch` (created when missing) as someone else
    /// would push them; the new head.
    pub async fn push(
        &self,
        branch: &str,
        files: &[(&str, &[u8])],
        message: &str,
    ) -> Result<CommitSha, ForgeError> {
        let name = format!("refs/heads/{branch}");
        let parent = self.store.ref_sha(&name);
        let files: Vec<(String, Vec<u8>)> = files
            .iter()
            .map(|(p, b)| ((*p).to_owned(), b.to_vec()))
            .collect();
        let sha = self.commit(parent.as_deref(), &files, message).await?;
        self.set_author(&sha, "someone-else");
        self.store.force_ref(&name, &sha);
        forge_sha("pushed commit", &sha)
    }

    /// Puts `label` on a pull request as a maintainer would.
    pub fn label_as_maintainer(&self, number: PullNumber, label: &str) -> Result<(), ForgeError> {
        let mut st = self.lock();
        let pull = st.pull_mut(number)?;
        if !pull.labels.iter().any(|l| l == label) {
            pull.labels.push(label.to_owned());
        }
        Ok(())
    }

    /// Moves a run to `in_progress`.
    pub fn start_run(&self, id: u64) -> Result<(), ForgeError> {
        let mut st = self.lock();
        st.run_mut(id)?.run.status = RunStatus::InProgress;
        Ok(())
    }

    /// Completes a run with `conclusion` and `artifacts` (name → zip bytes).
    pub fn complete_run(
        &self,
        id: u64,
        conclusion: impl Into<RunConclusion>,
        artifacts: Vec<(String, Vec<u8>)>,
    ) -> Result<(), ForgeError> {
        let mut st = self.lock();
        let mut stored = Vec::new();
        for (name, bytes) in artifacts {
            let id = st.id();
            stored.push((
                ArtifactInfo {
                    id,
                    name,
                    expired: false,
                },
                bytes,
            ));
        }
        let run = st.run_mut(id)?;
        run.run.status = RunStatus::Completed;
        run.run.conclusion = Some(conclusion.into());
        run.artifacts = stored;
        Ok(())
    }

    /// What run `id`'s job printed and the node it ran on.
    pub fn set_job_log(&self, id: u64, log: &str, node: Option<&str>) -> Result<(), ForgeError> {
        let mut st = self.lock();
        st.run_mut(id)?.job = Some((log.to_owned(), node.map(str::to_owned)));
        Ok(())
    }

    /// Gives run `id` another title, as a run dispatched by an earlier
    /// Klaud (another `test-name`) carries.
    pub fn retitle_run(&self, id: u64, title: &str) -> Result<(), ForgeError> {
        let mut st = self.lock();
        st.run_mut(id)?.run.title = title.to_owned();
        Ok(())
    }

    /// Every run, oldest first.
    pub fn runs(&self) -> Vec<Run> {
        self.lock().runs.iter().map(|r| r.run.clone()).collect()
    }

    /// Every pull request, oldest first.
    pub fn pulls(&self) -> Vec<Pull> {
        self.lock().pulls.clone()
    }

    fn new_run(
        &self,
        st: &mut State,
        workflow: &str,
        event: &str,
        title: String,
        (head, head_branch, pull_requests): (CommitSha, &str, Vec<PullNumber>),
    ) -> u64 {
        let id = st.id();
        st.runs.push(StoredRun {
            run: Run {
                id,
                attempt: 1,
                title,
                event: RunEvent::parse(event),
                status: RunStatus::Queued,
                conclusion: None,
                head_sha: head,
                head_branch: Some(head_branch.to_owned()),
                head_repo: Some(self.repo.clone()),
                pull_requests,
                actor: Some(self.bot.clone()),
                created_at: None,
                html_url: format!("https://github.com/{}/actions/runs/{id}", self.repo),
            },
            workflow: workflow.to_owned(),
            artifacts: Vec::new(),
            job: None,
        });
        id
    }

    /// A branch name's tip, or `git_ref` itself (a sha).
    fn resolve(&self, git_ref: &str) -> String {
        self.store
            .ref_sha(&format!("refs/heads/{git_ref}"))
            .unwrap_or_else(|| git_ref.to_owned())
    }
}

#[async_trait]
impl Forge for MemoryForge {
    fn repo(&self) -> String {
        self.repo.clone()
    }

    fn bot_login(&self) -> String {
        self.bot.clone()
    }

    fn refs(&self) -> &dyn RefStore {
        &self.claims
    }

    async fn read_file(&self, path: &str, git_ref: &str) -> Result<Option<Vec<u8>>, ForgeError> {
        let sha = self.resolve(git_ref);
        let tree = match self.store.commit_tree(&sha).await {
            Ok(t) => t,
            Err(RefStoreError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(store_err(e)),
        };
        Ok(self
            .lock()
            .trees
            .get(&tree)
            .and_then(|t| t.get(path).cloned()))
    }

    async fn find_pull(&self, branch: &str) -> Result<Option<Pull>, ForgeError> {
        Ok(self
            .lock()
            .pulls
            .iter()
            .rev()
            .find(|p| p.head_ref == branch)
            .cloned())
    }

    async fn get_pull(&self, number: PullNumber) -> Result<Pull, ForgeError> {
        let head = {
            let st = self.lock();
            let p = st
                .pulls
                .iter()
                .find(|p| p.number == number)
                .ok_or_else(|| ForgeError::NotFound(format!("pull request #{number}")))?;
            p.head_ref.clone()
        };
        let sha = self.store.ref_sha(&format!("refs/heads/{head}"));
        let mut st = self.lock();
        let p = st.pull_mut(number)?;
        if let Some(sha) = sha {
            p.head_sha = forge_sha(&format!("head of #{number}"), &sha)?;
        }
        Ok(p.clone())
    }

    async fn own_pulls_active_since(
        &self,
        _since: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<PullNumber>, ForgeError> {
        // Nothing here keeps times: every pull request counts as active,
        // which only costs an in-memory read of its comments.
        Ok(self.lock().pulls.iter().map(|p| p.number).collect())
    }

    async fn closed_by(&self, _number: PullNumber) -> Result<Option<String>, ForgeError> {
        // Pulls here close only through the engine's own proof-checked
        // writes; who closed them is never in question.
        Ok(None)
    }

    async fn permission(&self, login: &str) -> Result<crate::engine::Permission, ForgeError> {
        self.lock()
            .permissions
            .get(&login.to_ascii_lowercase())
            .map(|role| crate::engine::Permission::parse(role))
            .ok_or_else(|| ForgeError::NotFound(format!("permission of {login}")))
    }

    async fn list_comments(&self, number: PullNumber) -> Result<Vec<Comment>, ForgeError> {
        Ok(self
            .lock()
            .comments
            .iter()
            .filter(|(n, _)| *n == number)
            .map(|(_, c)| c.clone())
            .collect())
    }

    async fn list_runs(&self, query: &RunQuery) -> Result<Vec<Run>, ForgeError> {
        Ok(self
            .lock()
            .runs
            .iter()
            .rev()
            .filter(|r| r.workflow == query.workflow)
            .filter(|r| query.event.as_ref().is_none_or(|e| &r.run.event == e))
            .filter(|r| {
                query
                    .actor
                    .as_ref()
                    .is_none_or(|a| r.run.actor.as_ref() == Some(a))
            })
            .filter(|r| query.head_sha.as_ref().is_none_or(|h| &r.run.head_sha == h))
            .map(|r| r.run.clone())
            .collect())
    }

    async fn get_run(&self, id: u64) -> Result<Run, ForgeError> {
        Ok(self.lock().run_mut(id)?.run.clone())
    }

    async fn list_artifacts(&self, run: u64) -> Result<Vec<ArtifactInfo>, ForgeError> {
        Ok(self
            .lock()
            .run_mut(run)?
            .artifacts
            .iter()
            .map(|(a, _)| a.clone())
            .collect())
    }

    async fn compare_commits(
        &self,
        base: &str,
        head: &str,
    ) -> Result<super::forge::Comparison, ForgeError> {
        // Commits made here have one parent at most: walk first parents.
        let st = self.lock();
        // `head` an ancestor of `base`: GitHub says behind, with no commit
        // of `head`'s that `base` lacks.
        let mut down = st.commits.get(base).and_then(|c| c.1.first().cloned());
        while let Some(at) = down {
            if at == head {
                return Ok(super::forge::Comparison {
                    status: "behind".into(),
                    commits: Vec::new(),
                    total_commits: 0,
                    files: Vec::new(),
                    merge_base: Some(forge_sha("merge base", head)?),
                });
            }
            down = st.commits.get(&at).and_then(|c| c.1.first().cloned());
        }
        let mut chain = Vec::new();
        let mut at = head.to_owned();
        while at != base {
            let Some((message, parents, _, author)) = st.commits.get(&at) else {
                // `base` is not an ancestor: GitHub would say diverged.
                return Ok(super::forge::Comparison {
                    status: "diverged".into(),
                    commits: Vec::new(),
                    total_commits: 0,
                    files: Vec::new(),
                    merge_base: None,
                });
            };
            chain.push(super::forge::ComparedCommit {
                sha: forge_sha("compared commit", &at)?,
                message: message.clone(),
                author: Some(author.clone()),
                parents: parents
                    .iter()
                    .map(|p| forge_sha("compared commit parent", p))
                    .collect::<Result<_, _>>()?,
            });
            match parents.first() {
                Some(p) => at = p.clone(),
                None => break,
            }
        }
        chain.reverse();
        let mut files: Vec<String> = chain
            .iter()
            .flat_map(|c| st.commits[c.sha.as_str()].2.iter().cloned())
            .collect();
        files.sort();
        files.dedup();
        Ok(super::forge::Comparison {
            status: if chain.is_empty() {
                "identical"
            } else {
                "ahead"
            }
            .into(),
            total_commits: chain.len() as u64,
            commits: chain,
            files,
            merge_base: Some(forge_sha("merge base", base)?),
        })
    }

    async fn list_jobs(&self, run: u64) -> Result<Vec<super::forge::Job>, ForgeError> {
        // One job per run, named after the run, as the sandbox's Actions
        // simulator serves them.
        let mut st = self.lock();
        let stored = st.run_mut(run)?;
        let run = &stored.run;
        Ok(vec![super::forge::Job {
            id: run.id,
            name: run.title.clone(),
            status: Some(run.status.clone()),
            conclusion: run.conclusion.clone(),
            html_url: Some(format!("{}/job/{}", run.html_url, run.id)),
            runner_name: stored.job.as_ref().and_then(|(_, n)| n.clone()),
        }])
    }

    async fn job_log(&self, job: u64, limit: usize) -> Result<Vec<u8>, ForgeError> {
        // A run's one job has the run's id.
        let mut st = self.lock();
        let stored = st.run_mut(job)?;
        let log = stored.job.as_ref().map_or("", |(l, _)| l.as_str());
        Ok(crate::job_log::bounded(log.as_bytes(), limit))
    }

    async fn download_artifact(&self, id: u64) -> Result<Vec<u8>, ForgeError> {
        self.lock()
            .runs
            .iter()
            .flat_map(|r| r.artifacts.iter())
            .find(|(a, _)| a.id == id)
            .map(|(_, b)| b.clone())
            .ok_or_else(|| ForgeError::NotFound(format!("artifact {id}")))
    }

    async fn write(&self, permitted: Permitted<'_>) -> Result<Written, ForgeError> {
        let done = |()| Written::Done;
        match *permitted.write() {
            Write::CommitFiles {
                parent,
                files,
                message,
            } => self
                .apply_commit_files(parent, files, message)
                .await
                .map(Written::Commit),
            Write::CommitMerge {
                head,
                base,
                files,
                message,
            } => self
                .apply_commit_merge(head, base, files, message)
                .await
                .map(Written::Commit),
            Write::CommitOnBranch {
                branch,
                expected_head,
                files,
                message,
            } => self
                .apply_commit_on_branch(branch, expected_head, files, message)
                .await
                .map(Written::Commit),
            Write::CreateBranch { branch, sha } => {
                self.apply_create_branch(branch, sha).await.map(done)
            }
            // Both mutations of the one document, in GitHub's order: the
            // commit is tried whether the ref was created now or was
            // already there.
            Write::CreateBranchWithCommit {
                branch,
                base,
                files,
                message,
            } => {
                match self.apply_create_branch(branch, base).await {
                    Ok(()) | Err(ForgeError::AlreadyExists(_)) => {}
                    Err(e) => return Err(e),
                }
                self.apply_commit_on_branch(branch, base, files, message)
                    .await
                    .map(Written::Commit)
            }
            Write::FastForwardBranch { branch, sha } => {
                self.apply_fast_forward_branch(branch, sha).await.map(done)
            }
            Write::DeleteBranch { branch } => self.apply_delete_branch(branch).await.map(done),
            Write::CreateDraftPull {
                title,
                head,
                base,
                body,
            } => self
                .apply_create_draft_pull(title, head, base, body)
                .await
                .map(Written::Pull),
            Write::UpdatePullBody { number, body } => {
                self.apply_update_pull_body(number, body).await.map(done)
            }
            Write::ClosePull { number } => self.apply_close_pull(number).await.map(done),
            Write::SetDraft { pull, draft } => self.apply_set_draft(pull, draft).await.map(done),
            Write::CreateComment { number, body } => self
                .apply_create_comment(number, body)
                .await
                .map(Written::Comment),
            Write::UpdateComment {
                number,
                comment,
                body,
            } => self
                .apply_update_comment(number, comment, body)
                .await
                .map(Written::Comment),
            Write::Reply { number, body } => {
                self.apply_reply(number, body).await.map(Written::Comment)
            }
            Write::AddLabels { number, labels } => {
                self.apply_add_labels(number, labels).await.map(done)
            }
            Write::RemoveLabel { number, label } => {
                self.apply_remove_label(number, label).await.map(done)
            }
            Write::Dispatch {
                workflow,
                git_ref,
                inputs,
            } => self
                .apply_dispatch(workflow, git_ref, inputs)
                .await
                .map(|id| Written::Dispatched(id.map(|id| (id, None)))),
            Write::RerunRun { id } => self.apply_rerun_run(id).await.map(done),
            Write::CancelRun { id } => self.apply_cancel_run(id).await.map(done),
        }
    }
}

/// The writes as plain operations; [`Forge::write`] sends them once their
/// proof has permitted them.
impl MemoryForge {
    async fn apply_commit_files(
        &self,
        parent: &str,
        files: &[(String, Vec<u8>)],
        message: &str,
    ) -> Result<CommitSha, ForgeError> {
        self.log(format!("commit on {parent}"));
        let sha = self.commit(Some(parent), files, message).await?;
        forge_sha("new commit", &sha)
    }

    async fn apply_commit_merge(
        &self,
        head: &str,
        base: &str,
        files: &[(String, Vec<u8>)],
        message: &str,
    ) -> Result<CommitSha, ForgeError> {
        self.log(format!("merge {base} into {head}"));
        let sha = self
            .commit_with(Some(head), Some(base), files, message)
            .await?;
        forge_sha("new merge commit", &sha)
    }

    /// The commit and the move as GitHub makes them, in one: a branch
    /// elsewhere than `expected_head` refuses before any commit is made.
    async fn apply_commit_on_branch(
        &self,
        branch: &str,
        expected_head: &str,
        files: &[(String, Vec<u8>)],
        message: &str,
    ) -> Result<CommitSha, ForgeError> {
        let name = format!("refs/heads/{branch}");
        match self.store.ref_sha(&name) {
            None => return Err(ForgeError::NotFound(format!("branch {branch}"))),
            Some(tip) if tip != expected_head => {
                return Err(ForgeError::NotFastForward(format!(
                    "commit on branch {branch}: expected it at {expected_head}, it is at {tip}"
                )));
            }
            Some(_) => {}
        }
        self.log(format!("commit on branch {branch} at {expected_head}"));
        let sha = self.commit(Some(expected_head), files, message).await?;
        self.store
            .fast_forward_ref(&name, &sha)
            .await
            .map_err(store_err)?;
        forge_sha("new commit", &sha)
    }

    async fn apply_create_branch(&self, branch: &str, sha: &str) -> Result<(), ForgeError> {
        self.log(format!("create branch {branch}"));
        self.store
            .create_ref(&format!("refs/heads/{branch}"), sha)
            .await
            .map_err(store_err)
    }

    async fn apply_fast_forward_branch(&self, branch: &str, sha: &str) -> Result<(), ForgeError> {
        self.log(format!("push branch {branch}"));
        self.store
            .fast_forward_ref(&format!("refs/heads/{branch}"), sha)
            .await
            .map_err(store_err)
    }

    async fn apply_delete_branch(&self, branch: &str) -> Result<(), ForgeError> {
        self.log(format!("delete branch {branch}"));
        self.store
            .delete_ref(&format!("refs/heads/{branch}"))
            .await
            .map_err(store_err)
    }

    async fn apply_create_draft_pull(
        &self,
        title: &str,
        head: &str,
        _base: &str,
        body: &str,
    ) -> Result<Pull, ForgeError> {
        let head_sha = self
            .store
            .ref_sha(&format!("refs/heads/{head}"))
            .ok_or_else(|| ForgeError::NotFound(format!("branch {head}")))?;
        let head_sha = forge_sha(&format!("tip of {head}"), &head_sha)?;
        let mut st = self.lock();
        st.writes.push(format!("open pull request for {head}"));
        let number = PullNumber::from(st.id());
        let pull = Pull {
            number,
            state: PullState::Open,
            draft: true,
            title: title.to_owned(),
            body: body.to_owned(),
            head_ref: head.to_owned(),
            head_sha,
            head_repo: Some(self.repo.clone()),
            author: Some(self.bot.clone()),
            labels: Vec::new(),
            html_url: format!("https://github.com/{}/pull/{number}", self.repo),
            mergeable: None,
            node_id: None,
        };
        st.pulls.push(pull.clone());
        Ok(pull)
    }

    async fn apply_update_pull_body(
        &self,
        number: PullNumber,
        body: &str,
    ) -> Result<(), ForgeError> {
        let mut st = self.lock();
        st.writes.push(format!("body #{number}"));
        st.pull_mut(number)?.body = body.to_owned();
        Ok(())
    }

    async fn apply_close_pull(&self, number: PullNumber) -> Result<(), ForgeError> {
        let mut st = self.lock();
        st.writes.push(format!("close #{number}"));
        st.pull_mut(number)?.state = PullState::Closed;
        Ok(())
    }

    async fn apply_set_draft(&self, pull: &Pull, draft: bool) -> Result<(), ForgeError> {
        let mut st = self.lock();
        st.writes.push(format!(
            "{} #{}",
            if draft { "draft" } else { "ready" },
            pull.number
        ));
        st.pull_mut(pull.number)?.draft = draft;
        Ok(())
    }

    async fn apply_create_comment(
        &self,
        number: PullNumber,
        body: &str,
    ) -> Result<Comment, ForgeError> {
        self.post(number, body, "comment")
    }

    async fn apply_update_comment(
        &self,
        number: PullNumber,
        comment: u64,
        body: &str,
    ) -> Result<Comment, ForgeError> {
        let bot = self.bot.clone();
        let mut st = self.lock();
        let found = st
            .comments
            .iter_mut()
            .find(|(n, c)| *n == number && c.id == comment)
            .ok_or_else(|| ForgeError::NotFound(format!("comment {comment} on #{number}")))?;
        // GitHub lets a token edit only its own comments.
        if found.1.author.as_deref() != Some(bot.as_str()) {
            return Err(ForgeError::Other(format!(
                "comment {comment} on #{number} is not the bot's: 403"
            )));
        }
        found.1.body = body.to_owned();
        let edited = found.1.clone();
        st.writes.push(format!("edit comment #{number}"));
        Ok(edited)
    }

    async fn apply_reply(&self, number: PullNumber, body: &str) -> Result<Comment, ForgeError> {
        self.post(number, body, "reply")
    }

    async fn apply_add_labels(
        &self,
        number: PullNumber,
        labels: &[String],
    ) -> Result<(), ForgeError> {
        let head = self.get_pull(number).await?;
        let mut st = self.lock();
        for label in labels {
            st.writes.push(format!("label #{number} {label}"));
            let pull = st.pull_mut(number)?;
            if pull.labels.contains(label) {
                continue;
            }
            pull.labels.push(label.clone());
            if let Some((workflow, sweep)) = &self.sweep
                && sweep.contains(label)
            {
                self.new_run(
                    &mut st,
                    workflow,
                    "pull_request",
                    head.title.clone(),
                    (head.head_sha.clone(), &head.head_ref, vec![number]),
                );
            }
        }
        Ok(())
    }

    async fn apply_remove_label(&self, number: PullNumber, label: &str) -> Result<(), ForgeError> {
        let mut st = self.lock();
        st.writes.push(format!("unlabel #{number} {label}"));
        st.pull_mut(number)?.labels.retain(|l| l != label);
        Ok(())
    }

    async fn apply_dispatch(
        &self,
        workflow: &str,
        git_ref: &str,
        inputs: &Value,
    ) -> Result<Option<u64>, ForgeError> {
        // As on GitHub: a dispatched run's head is the tip of the ref it was
        // dispatched on, whatever `inputs.ref` says.
        let head = forge_sha(&format!("tip of {git_ref}"), &self.resolve(git_ref))?;
        let mut st = self.lock();
        st.writes.push(format!("dispatch {workflow} {inputs}"));
        let id = self.new_run(
            &mut st,
            workflow,
            "workflow_dispatch",
            dispatch_title(inputs),
            (head, git_ref, Vec::new()),
        );
        Ok(self.return_run_details.then_some(id))
    }

    async fn apply_rerun_run(&self, id: u64) -> Result<(), ForgeError> {
        let mut st = self.lock();
        st.writes.push(format!("rerun {id}"));
        let run = &mut st.run_mut(id)?.run;
        run.attempt += 1;
        run.status = RunStatus::Queued;
        run.conclusion = None;
        Ok(())
    }

    async fn apply_cancel_run(&self, id: u64) -> Result<(), ForgeError> {
        let mut st = self.lock();
        st.writes.push(format!("cancel {id}"));
        let run = &mut st.run_mut(id)?.run;
        if !run.status.is_completed() {
            run.status = RunStatus::Completed;
            run.conclusion = Some(RunConclusion::Cancelled);
        }
        Ok(())
    }
}

impl MemoryForge {
    fn post(&self, number: PullNumber, body: &str, what: &str) -> Result<Comment, ForgeError> {
        let mut st = self.lock();
        st.pull_mut(number)?;
        st.writes.push(format!("{what} #{number}"));
        let comment = Comment {
            id: st.id(),
            body: body.to_owned(),
            author: Some(self.bot.clone()),
            author_association: None,
        };
        st.comments.push((number, comment.clone()));
        Ok(comment)
    }

    /// Gives `login` the repository role `role` (`write`, `read`, ...), as
    /// the collaborator permission API reports it.
    pub fn set_permission(&self, login: &str, role: &str) {
        self.lock()
            .permissions
            .insert(login.to_ascii_lowercase(), role.to_owned());
    }

    /// Posts a comment as `author` (a maintainer's command, say).
    pub fn comment_as(
        &self,
        author: &str,
        number: PullNumber,
        body: &str,
    ) -> Result<u64, ForgeError> {
        let mut st = self.lock();
        st.pull_mut(number)?;
        let id = st.id();
        st.comments.push((
            number,
            Comment {
                id,
                body: body.to_owned(),
                author: Some(author.to_owned()),
                author_association: None,
            },
        ));
        Ok(id)
    }
}
