//! One read of a thing per engine step, or per run of steps. Within one
//! step the engine asks for the same pull request, comment list, run or ref
//! several times (the step's own look, then every ownership check before a
//! write); after one of Klaud's own writes GitHub's `ETag` has changed, so
//! each of those later reads would be a full, charged answer.
//!
//! While a step runs ([`StepReads::scope`]), the first read of a pull
//! request, a comment list, a run or a ref goes to GitHub and later reads
//! of it in the same step are answered from that read, kept up to date by
//! the answers of Klaud's own writes in the step (a pull request it opened,
//! a comment it posted, a body, label or draft state it set, a branch it
//! pushed, a claim it moved by compare-and-swap to a commit it made). A
//! write that fails, or whose effect its answer does not show (a re-run, a
//! cancel, a close), forgets what it touched, so the next read asks GitHub
//! again.
//!
//! A run of steps that advance one after another without waiting (the
//! wave's and [`super::Engine::drive`]'s loop) may keep one scope for all of
//! them ([`super::Engine::keep_reads`]): the next step is the same moment
//! as the end of the last one, and re-reading what Klaud itself just wrote
//! would be a charged answer that only repeats its own write. The scope
//! ends as soon as a step waits, fails or ends, so every such run's first
//! look, and so its ownership check, still reads GitHub (conditionally), and
//! a person's change is seen by the next run of steps. Nothing is kept in
//! the journal: a restart reads everything again. Outside a scope (opening
//! a record, recovery, maintainer commands) every read goes to GitHub.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use klaud_claims::{PullNumber, RefStore, RefStoreError, RefTip};

use super::forge::{ArtifactInfo, Comment, Forge, ForgeError, Job, Pull, Run, RunQuery};
use super::forge::{Permitted, Write, Written};
use super::write::LeaseWindow;

/// What one step has read so far (and what its own writes made of it).
#[derive(Debug, Default)]
struct Seen {
    pulls: HashMap<PullNumber, Pull>,
    comments: HashMap<PullNumber, Vec<Comment>>,
    runs: HashMap<u64, Run>,
    /// Full ref name → its tip (`None`: read as absent).
    refs: HashMap<String, Option<RefTip>>,
    /// Full ref name → where it points (`None`: absent), when only that is
    /// known: a ref read or moved in this scope, or listed by the pass.
    shas: HashMap<String, Option<String>>,
    /// Commits the step made through the ref store: sha → (message,
    /// tree, parents), so a compare-and-swap to one of them tells the tip.
    commits: HashMap<String, (String, String, Vec<String>)>,
}

/// The engine's forge: the backend, with reads kept for one step and
/// every write's lease checked just before it is sent.
pub(crate) struct StepReads<'a> {
    pub(crate) inner: &'a dyn Forge,
    lease: LeaseWindow<'a>,
    seen: Mutex<Option<Seen>>,
    /// Full ref name → the tip Klaud's own last write through this forge
    /// left it at (absent: never written, deleted, failed, or a commit no
    /// scope made), for
    /// the engine's whole life rather than one scope: the engine seeds a
    /// claim it created from it (`Engine::seed_created_claim`), and an
    /// experiment's siblings amend their shared claim in other scopes.
    written: Mutex<HashMap<String, RefTip>>,
}

/// While alive, reads are kept (see the module documentation); dropping
/// the outermost scope forgets them, also when the step's future is
/// dropped midway.
pub(crate) struct StepScope<'s, 'a> {
    reads: &'s StepReads<'a>,
    /// Whether this scope started the keeping (a step's scope inside a run
    /// of steps' scope leaves the reads to the run).
    outermost: bool,
}

impl Drop for StepScope<'_, '_> {
    fn drop(&mut self) {
        if self.outermost {
            *self.reads.lock() = None;
        }
    }
}

impl<'a> StepReads<'a> {
    pub(crate) fn new(inner: &'a dyn Forge, lease: LeaseWindow<'a>) -> Self {
        Self {
            inner,
            lease,
            seen: Mutex::new(None),
            written: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<Seen>> {
        // A poisoned lock only means a panic elsewhere; what it holds is
        // whole (every change is one insert or removal).
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps reads until the returned scope is dropped (one engine step,
    /// or a run of steps); inside a scope already open, the reads stay the
    /// outer scope's.
    pub(crate) fn scope(&self) -> StepScope<'_, 'a> {
        let mut seen = self.lock();
        let outermost = seen.is_none();
        if outermost {
            *seen = Some(Seen::default());
        }
        StepScope {
            reads: self,
            outermost,
        }
    }

    /// Forgets every read of this step: something other than Klaud's own
    /// writes may have changed GitHub (the repair hook pushed).
    pub(crate) fn forget(&self) {
        if let Some(seen) = self.lock().as_mut() {
            *seen = Seen::default();
        }
    }

    /// Runs `f` on what the step has seen, when a step is running.
    fn with<T>(&self, f: impl FnOnce(&mut Seen) -> T) -> Option<T> {
        self.lock().as_mut().map(f)
    }

    pub(crate) fn forget_pull(&self, number: PullNumber) {
        self.with(|s| s.pulls.remove(&number));
    }

    fn forget_comments(&self, number: PullNumber) {
        self.with(|s| s.comments.remove(&number));
    }

    fn forget_run(&self, id: u64) {
        self.with(|s| s.runs.remove(&id));
    }

    fn forget_ref(&self, name: &str) {
        self.with(|s| {
            s.refs.remove(name);
            s.shas.remove(name);
        });
    }

    /// Answers the first look at pull request `pull.number` in this scope
    /// with the pass's own listing of open pull requests, read moments
    /// before: as if the step had read it then. Outside a scope, or once
    /// the scope has read it, nothing changes. The listing has no
    /// `mergeable` (GitHub's list omits it), so `pull.mergeable` is `None`:
    /// only the run of steps of the wave's drive is seeded, and none of its
    /// steps asks whether the head merges.
    pub(crate) fn seed_pull(&self, pull: Pull) {
        self.with(|s| {
            s.pulls.entry(pull.number).or_insert(pull);
        });
    }

    /// Answers the first look at where ref `name` points in this scope with
    /// the pass's own listing of refs (see [`StepReads::seed_pull`]).
    pub(crate) fn seed_ref_sha(&self, name: &str, sha: &str) {
        self.with(|s| {
            s.shas
                .entry(name.to_owned())
                .or_insert_with(|| Some(sha.to_owned()));
        });
    }

    /// Answers the first look at ref `tip.name` in this scope with a tip
    /// Klaud itself made earlier in the pass (see
    /// `Engine::seed_created_claim`).
    pub(crate) fn seed_ref(&self, tip: RefTip) {
        self.with(|s| {
            s.shas
                .entry(tip.name.clone())
                .or_insert_with(|| Some(tip.sha.clone()));
            s.refs.entry(tip.name.clone()).or_insert(Some(tip));
        });
    }

    /// The tip of ref `name` as this scope knows it (read, or moved by
    /// Klaud's own write to a commit the scope made); `None` outside a
    /// scope or when not known.
    pub(crate) fn kept_ref(&self, name: &str) -> Option<RefTip> {
        self.with(|s| s.refs.get(name).cloned().flatten()).flatten()
    }

    /// A ref write's outcome: the ref is at `sha` when it succeeded, and
    /// unknown (read again) when it failed.
    fn after_ref_write(
        &self,
        name: &str,
        sha: &str,
        written: Result<(), RefStoreError>,
    ) -> Result<(), RefStoreError> {
        match &written {
            Ok(()) => self.moved_ref(name, sha),
            Err(_) => self.forget_ref(name),
        }
        let tip = written
            .as_ref()
            .ok()
            .and_then(|()| self.kept_ref(name))
            .filter(|t| t.sha == sha);
        self.wrote_ref(name, tip);
        written
    }

    fn wrote_ref(&self, name: &str, tip: Option<RefTip>) {
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        match tip {
            Some(tip) => written.insert(name.to_owned(), tip),
            None => written.remove(name),
        };
    }

    /// The tip Klaud's own last write through this forge left ref `name`
    /// at, when this forge wrote it and knows the commit (see `written`).
    pub(crate) fn last_written(&self, name: &str) -> Option<RefTip> {
        self.written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    /// After Klaud's own write to pull request `number` succeeded: applies
    /// it to the step's read of the pull request, if there is one.
    fn wrote_pull(&self, number: PullNumber, change: impl FnOnce(&mut Pull)) {
        self.with(|s| {
            if let Some(p) = s.pulls.get_mut(&number) {
                change(p);
            }
        });
    }

    /// A commit Klaud made through a write: kept with its tree (known to
    /// the backend that made it) so that a branch moved to it is known
    /// without reading it back. Nothing is kept outside a step.
    async fn made_commit(
        &self,
        sha: &klaud_claims::CommitSha,
        message: &str,
        parents: Vec<String>,
    ) {
        if self.lock().is_none() {
            return;
        }
        if let Ok(tree) = self.inner.refs().commit_tree(sha.as_str()).await {
            self.with(|s| {
                s.commits
                    .insert(sha.to_string(), (message.to_owned(), tree, parents))
            });
        }
    }

    /// After Klaud pushed `sha` to `branch`: the step's reads of pull
    /// requests of that branch show it as their head.
    fn pushed(&self, branch: &str, sha: &klaud_claims::CommitSha) {
        self.with(|s| {
            for p in s.pulls.values_mut().filter(|p| p.head_ref == branch) {
                p.head_sha = sha.clone();
                p.mergeable = None;
            }
        });
    }

    /// Forgets the pull requests of `branch`: its head is not known.
    fn forget_pulls_of(&self, branch: &str) {
        self.with(|s| s.pulls.retain(|_, p| p.head_ref != branch));
    }

    /// After Klaud's own comment (new or edited) on `number`: the step's
    /// read of the comment list, if there is one, holds it as GitHub does.
    fn wrote_comment(&self, number: PullNumber, comment: &Comment) {
        self.with(|s| {
            if let Some(list) = s.comments.get_mut(&number) {
                match list.iter_mut().find(|c| c.id == comment.id) {
                    Some(c) => *c = comment.clone(),
                    None => list.push(comment.clone()),
                }
            }
        });
    }

    /// After a ref was moved to `sha` by Klaud: the tip, when the step made
    /// that commit; otherwise the ref is read again next time.
    fn moved_ref(&self, name: &str, sha: &str) {
        self.with(|s| s.shas.insert(name.to_owned(), Some(sha.to_owned())));
        self.with(|s| match s.commits.get(sha).cloned() {
            Some((message, tree, parents)) => {
                let tip = RefTip {
                    name: name.to_owned(),
                    sha: sha.to_owned(),
                    message,
                    parents,
                    tree,
                };
                s.refs.insert(name.to_owned(), Some(tip));
            }
            None => {
                s.refs.remove(name);
            }
        });
    }
}

/// Forgets `forget` when `result` is an error, and passes `result` on.
fn or_forget<T>(result: Result<T, ForgeError>, forget: impl FnOnce()) -> Result<T, ForgeError> {
    if result.is_err() {
        forget();
    }
    result
}

#[async_trait]
impl Forge for StepReads<'_> {
    fn repo(&self) -> String {
        self.inner.repo()
    }
    fn bot_login(&self) -> String {
        self.inner.bot_login()
    }
    fn refs(&self) -> &dyn RefStore {
        self
    }
    async fn read_file(&self, path: &str, git_ref: &str) -> Result<Option<Vec<u8>>, ForgeError> {
        self.inner.read_file(path, git_ref).await
    }
    async fn find_pull(&self, branch: &str) -> Result<Option<Pull>, ForgeError> {
        self.inner.find_pull(branch).await
    }
    async fn get_pull(&self, number: PullNumber) -> Result<Pull, ForgeError> {
        if let Some(Some(p)) = self.with(|s| s.pulls.get(&number).cloned()) {
            return Ok(p);
        }
        let p = self.inner.get_pull(number).await?;
        self.with(|s| s.pulls.insert(number, p.clone()));
        Ok(p)
    }
    async fn closed_by(&self, number: PullNumber) -> Result<Option<String>, ForgeError> {
        self.inner.closed_by(number).await
    }
    async fn own_pulls_active_since(
        &self,
        since: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<PullNumber>, ForgeError> {
        self.inner.own_pulls_active_since(since).await
    }
    async fn permission(&self, login: &str) -> Result<crate::engine::Permission, ForgeError> {
        self.inner.permission(login).await
    }
    async fn list_comments(&self, number: PullNumber) -> Result<Vec<Comment>, ForgeError> {
        if let Some(Some(c)) = self.with(|s| s.comments.get(&number).cloned()) {
            return Ok(c);
        }
        let c = self.inner.list_comments(number).await?;
        self.with(|s| s.comments.insert(number, c.clone()));
        Ok(c)
    }
    async fn list_runs(&self, query: &RunQuery) -> Result<Vec<Run>, ForgeError> {
        let runs = self.inner.list_runs(query).await?;
        // A listed run is the same answer `get_run` gives for it.
        self.with(|s| {
            for r in &runs {
                s.runs.insert(r.id, r.clone());
            }
        });
        Ok(runs)
    }
    async fn get_run(&self, id: u64) -> Result<Run, ForgeError> {
        if let Some(Some(r)) = self.with(|s| s.runs.get(&id).cloned()) {
            return Ok(r);
        }
        let r = self.inner.get_run(id).await?;
        self.with(|s| s.runs.insert(id, r.clone()));
        Ok(r)
    }
    async fn list_artifacts(&self, run: u64) -> Result<Vec<ArtifactInfo>, ForgeError> {
        self.inner.list_artifacts(run).await
    }
    async fn download_artifact(&self, id: u64) -> Result<Vec<u8>, ForgeError> {
        self.inner.download_artifact(id).await
    }
    async fn list_jobs(&self, run: u64) -> Result<Vec<Job>, ForgeError> {
        self.inner.list_jobs(run).await
    }
    async fn job_log(&self, job: u64, limit: usize) -> Result<Vec<u8>, ForgeError> {
        self.inner.job_log(job, limit).await
    }
    async fn compare_commits(
        &self,
        base: &str,
        head: &str,
    ) -> Result<super::forge::Comparison, ForgeError> {
        self.inner.compare_commits(base, head).await
    }
    async fn write(&self, permitted: Permitted<'_>) -> Result<Written, ForgeError> {
        // The permit moves on; what it touches is kept to bring the step's
        // reads in line with the answer.
        let write = *permitted.write();
        let written = match self.lease.check(&permitted) {
            Ok(()) => self.inner.write(permitted).await,
            Err(refused) => Err(refused),
        };
        if let Ok(Written::Commit(sha)) = &written {
            match write {
                Write::CommitFiles {
                    parent, message, ..
                } => {
                    self.made_commit(sha, message, vec![parent.to_string()])
                        .await
                }
                Write::CommitMerge {
                    head,
                    base,
                    message,
                    ..
                } => {
                    let parents = vec![head.to_string(), base.to_string()];
                    self.made_commit(sha, message, parents).await;
                }
                Write::CommitOnBranch {
                    expected_head,
                    message,
                    ..
                } => {
                    self.made_commit(sha, message, vec![expected_head.to_string()])
                        .await
                }
                _ => {}
            }
        }
        self.after_write(write, written)
    }
}

impl StepReads<'_> {
    /// Brings the step's reads in line with one of Klaud's own writes: an
    /// answer that shows the write's effect updates what was read; a failed
    /// write, or one whose answer does not show its effect (a re-run, a
    /// cancel, a push, a close), forgets what it touched.
    fn after_write(
        &self,
        write: Write<'_>,
        written: Result<Written, ForgeError>,
    ) -> Result<Written, ForgeError> {
        match write {
            Write::CommitFiles { .. } | Write::CommitMerge { .. } | Write::Dispatch { .. } => {
                written
            }
            // The answer is the pull request as GitHub made it.
            Write::CreateDraftPull { .. } => {
                let w = written?;
                if let Written::Pull(p) = &w {
                    self.with(|s| s.pulls.insert(p.number, p.clone()));
                }
                Ok(w)
            }
            Write::FastForwardBranch { branch, sha } => {
                let name = format!("refs/heads/{branch}");
                match written {
                    // The branch is at the commit Klaud made (known when
                    // the step made it), and a pull request of the branch
                    // shows it as its head; whether it merges GitHub
                    // computes anew.
                    Ok(w) => {
                        self.moved_ref(&name, sha.as_str());
                        self.pushed(branch, sha);
                        Ok(w)
                    }
                    Err(e) => {
                        self.forget_ref(&name);
                        self.forget_pulls_of(branch);
                        Err(e)
                    }
                }
            }
            // The branch is at the commit the answer names (or, after a
            // refusal or a lost answer, anywhere: read it again).
            Write::CommitOnBranch { branch, .. } | Write::CreateBranchWithCommit { branch, .. } => {
                let name = format!("refs/heads/{branch}");
                match written {
                    Ok(Written::Commit(sha)) => {
                        self.moved_ref(&name, sha.as_str());
                        self.pushed(branch, &sha);
                        Ok(Written::Commit(sha))
                    }
                    other => {
                        self.forget_ref(&name);
                        self.forget_pulls_of(branch);
                        other
                    }
                }
            }
            Write::CreateBranch { branch, sha } => {
                let name = format!("refs/heads/{branch}");
                match &written {
                    Ok(_) => self.moved_ref(&name, sha.as_str()),
                    Err(_) => self.forget_ref(&name),
                }
                self.forget_pulls_of(branch);
                written
            }
            Write::DeleteBranch { branch } => {
                self.forget_ref(&format!("refs/heads/{branch}"));
                self.forget_pulls_of(branch);
                written
            }
            Write::UpdatePullBody { number, body } => {
                let w = or_forget(written, || self.forget_pull(number))?;
                self.wrote_pull(number, |p| body.clone_into(&mut p.body));
                Ok(w)
            }
            // The state of a closed pull request is GitHub's to tell.
            Write::ClosePull { number } => {
                self.forget_pull(number);
                written
            }
            Write::SetDraft { pull, draft } => {
                let w = or_forget(written, || self.forget_pull(pull.number))?;
                self.wrote_pull(pull.number, |p| p.draft = draft);
                Ok(w)
            }
            Write::CreateComment { number, .. }
            | Write::UpdateComment { number, .. }
            | Write::Reply { number, .. } => {
                let w = or_forget(written, || self.forget_comments(number))?;
                if let Written::Comment(c) = &w {
                    self.wrote_comment(number, c);
                }
                Ok(w)
            }
            Write::AddLabels { number, labels } => {
                let w = or_forget(written, || self.forget_pull(number))?;
                self.wrote_pull(number, |p| {
                    for l in labels {
                        if !p.labels.iter().any(|x| x.eq_ignore_ascii_case(l)) {
                            p.labels.push(l.clone());
                        }
                    }
                });
                Ok(w)
            }
            Write::RemoveLabel { number, label } => {
                let w = or_forget(written, || self.forget_pull(number))?;
                self.wrote_pull(number, |p| {
                    p.labels.retain(|x| !x.eq_ignore_ascii_case(label));
                });
                Ok(w)
            }
            // GitHub shows the new attempt a moment later: read it again.
            Write::RerunRun { id } | Write::CancelRun { id } => {
                self.forget_run(id);
                written
            }
        }
    }
}

#[async_trait]
impl RefStore for StepReads<'_> {
    async fn read_ref(&self, name: &str) -> Result<Option<RefTip>, RefStoreError> {
        if let Some(Some(tip)) = self.with(|s| s.refs.get(name).cloned()) {
            return Ok(tip);
        }
        let tip = self.inner.refs().read_ref(name).await?;
        self.with(|s| {
            s.shas
                .insert(name.to_owned(), tip.as_ref().map(|t| t.sha.clone()));
            s.refs.insert(name.to_owned(), tip.clone())
        });
        Ok(tip)
    }
    async fn read_ref_sha(&self, name: &str) -> Result<Option<String>, RefStoreError> {
        if let Some(Some(sha)) = self.with(|s| s.shas.get(name).cloned()) {
            return Ok(sha);
        }
        // Kept apart from `refs`: a tip without its commit is no answer to
        // a later `read_ref`.
        let sha = self.inner.refs().read_ref_sha(name).await?;
        self.with(|s| s.shas.insert(name.to_owned(), sha.clone()));
        Ok(sha)
    }
    async fn list_refs(&self, prefix: &str) -> Result<Vec<RefTip>, RefStoreError> {
        self.inner.refs().list_refs(prefix).await
    }
    async fn create_commit(
        &self,
        message: &str,
        tree: &str,
        parents: &[String],
    ) -> Result<String, RefStoreError> {
        let sha = self
            .inner
            .refs()
            .create_commit(message, tree, parents)
            .await?;
        self.with(|s| {
            let commit = (message.to_owned(), tree.to_owned(), parents.to_vec());
            s.commits.insert(sha.clone(), commit)
        });
        Ok(sha)
    }
    async fn create_ref(&self, name: &str, sha: &str) -> Result<(), RefStoreError> {
        let written = self.inner.refs().create_ref(name, sha).await;
        self.after_ref_write(name, sha, written)
    }
    async fn fast_forward_ref(&self, name: &str, sha: &str) -> Result<(), RefStoreError> {
        let written = self.inner.refs().fast_forward_ref(name, sha).await;
        self.after_ref_write(name, sha, written)
    }
    async fn delete_ref(&self, name: &str) -> Result<(), RefStoreError> {
        let r = self.inner.refs().delete_ref(name).await;
        self.forget_ref(name);
        self.wrote_ref(name, None);
        r
    }
    async fn commit_tree(&self, sha: &str) -> Result<String, RefStoreError> {
        self.inner.refs().commit_tree(sha).await
    }
}
