//! The lifecycle's [`Forge`](klaud_lifecycle::engine::Forge) over the
//! octocrab [`crate::Github`]: a thin mapping, the retry and write
//! policy stay in `crate`.
//!
//! This is the only public way to write to GitHub besides the claim store:
//! every write first checks that its proof covers its target (the pull
//! request, run or branch it names) and sends nothing when it does not.

use async_trait::async_trait;
use klaud_claims::{CommitSha, PullNumber, RefStore};
use klaud_lifecycle::engine::{
    ArtifactInfo, Comment, Forge as LifecycleForge, ForgeError, Permitted, Pull, Run, RunEvent,
    RunQuery, RunStatus, Write, Written,
};
use serde_json::Value;

use crate::{Github, GithubError, PullInfo, RunFilter, RunInfo, TreeChange};

/// The lifecycle forge over GitHub.
#[derive(Debug)]
pub struct GithubLifecycle<'a> {
    forge: &'a Github,
}

impl<'a> GithubLifecycle<'a> {
    /// Wraps a connected (identity-checked) forge.
    pub fn new(forge: &'a Github) -> Self {
        Self { forge }
    }
}

fn map(e: GithubError) -> ForgeError {
    match e {
        GithubError::NotFound { what } => ForgeError::NotFound(what),
        GithubError::AlreadyExists { what, .. } => ForgeError::AlreadyExists(what),
        GithubError::NotFastForward { what } => ForgeError::NotFastForward(what),
        GithubError::Ambiguous { what, detail } => {
            ForgeError::Ambiguous(format!("{what} ({detail})"))
        }
        e @ GithubError::Unauthorized { .. } => ForgeError::CredentialRefused(Box::new(e)),
        other => ForgeError::backend(other),
    }
}

/// A sha GitHub answered in `field` of `what`, checked before the
/// lifecycle can store it.
fn sha(what: impl FnOnce() -> String, field: &str, text: &str) -> Result<CommitSha, GithubError> {
    CommitSha::parse(text).map_err(|e| GithubError::Decode {
        what: what(),
        detail: format!("{field}: {e}"),
    })
}

/// A pull request as the lifecycle engine reads it, from a read or a
/// listing (a listing has no `mergeable`: GitHub's list omits it).
pub fn engine_pull(p: PullInfo) -> Result<Pull, GithubError> {
    let head_sha = sha(
        || format!("pull request #{}", p.number),
        "head.sha",
        &p.head_sha,
    )?;
    Ok(Pull {
        number: PullNumber::from(p.number),
        state: p.state,
        draft: p.draft,
        title: p.title,
        body: p.body.unwrap_or_default(),
        head_ref: p.head_ref,
        head_sha,
        head_repo: p.head_repo,
        author: p.author,
        labels: p.labels,
        html_url: p.html_url,
        mergeable: p.mergeable,
        node_id: (!p.node_id.is_empty()).then_some(p.node_id),
    })
}

fn run(r: RunInfo) -> Result<Run, GithubError> {
    let head_sha = sha(|| format!("workflow run {}", r.id), "head_sha", &r.head_sha)?;
    Ok(Run {
        id: r.id,
        attempt: u32::try_from(r.run_attempt).unwrap_or(u32::MAX),
        title: r.display_title.or(r.name).unwrap_or_default(),
        event: RunEvent::parse(&r.event),
        // A run without a status is no known state: never completed.
        status: r
            .status
            .unwrap_or_else(|| RunStatus::Unknown(String::new())),
        conclusion: r.conclusion,
        head_sha,
        actor: r.actor,
        // Parsed here, at the boundary: the engine compares times only.
        created_at: r
            .created_at
            .as_deref()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&chrono::Utc)),
        html_url: r.html_url,
        head_branch: r.head_branch,
        head_repo: r.head_repository,
        pull_requests: r.pull_requests.into_iter().map(PullNumber::from).collect(),
    })
}

impl GithubLifecycle<'_> {
    /// Which of `files` are executable at `commit`: their writes keep it.
    async fn executable(
        &self,
        commit: &str,
        files: &[(String, Vec<u8>)],
    ) -> Result<Vec<String>, ForgeError> {
        let paths: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
        self.forge
            .executable_paths(commit, &paths)
            .await
            .map_err(map)
    }

    /// A new tree: `commit`'s with `files` (path → bytes) set, and the
    /// changes that made it.
    async fn tree_with(
        &self,
        commit: &str,
        files: &[(String, Vec<u8>)],
    ) -> Result<(String, Vec<TreeChange>), ForgeError> {
        let base_tree = self.forge.tree_of(commit).await.map_err(map)?;
        let executable = self.executable(commit, files).await?;
        let changes: Vec<TreeChange> = files
            .iter()
            .map(|(path, bytes)| TreeChange {
                path: path.clone(),
                content: Some(bytes.clone()),
                executable: executable.contains(path),
            })
            .collect();
        let tree = self
            .forge
            .create_tree(Some(&base_tree), &changes)
            .await
            .map_err(map)?;
        Ok((tree, changes))
    }
}

/// Pages of recently active PRs read per pass (100 each): more activity
/// than that on Klaud's own PRs since the lookback is a flood, and the
/// commands beyond it wait for a quieter pass.
const ACTIVE_PULL_PAGES: usize = 5;

#[async_trait]
impl LifecycleForge for GithubLifecycle<'_> {
    fn repo(&self) -> String {
        self.forge.repo()
    }

    fn bot_login(&self) -> String {
        self.forge.bot_login().to_owned()
    }

    fn refs(&self) -> &dyn RefStore {
        self.forge
    }

    async fn read_file(&self, path: &str, git_ref: &str) -> Result<Option<Vec<u8>>, ForgeError> {
        self.forge.get_contents(path, git_ref).await.map_err(map)
    }

    async fn find_pull(&self, branch: &str) -> Result<Option<Pull>, ForgeError> {
        Ok(self
            .forge
            .find_pull_for_head(branch, "all")
            .await
            .map_err(map)?
            .map(engine_pull)
            .transpose()
            .map_err(map)?)
    }

    async fn get_pull(&self, number: PullNumber) -> Result<Pull, ForgeError> {
        self.forge
            .get_pull(number.get())
            .await
            .and_then(engine_pull)
            .map_err(map)
    }

    async fn closed_by(&self, number: PullNumber) -> Result<Option<String>, ForgeError> {
        self.forge.closed_by(number.get()).await.map_err(map)
    }

    async fn own_pulls_active_since(
        &self,
        since: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<PullNumber>, ForgeError> {
        let since = since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        Ok(self
            .forge
            .own_pulls_active_since(&since, ACTIVE_PULL_PAGES)
            .await
            .map_err(map)?
            .into_iter()
            .map(PullNumber::from)
            .collect())
    }

    async fn permission(
        &self,
        login: &str,
    ) -> Result<klaud_lifecycle::commands::Permission, ForgeError> {
        self.forge.collaborator_permission(login).await.map_err(map)
    }

    async fn list_comments(&self, number: PullNumber) -> Result<Vec<Comment>, ForgeError> {
        Ok(self
            .forge
            .list_comments(number.get(), None)
            .await
            .map_err(map)?
            .into_iter()
            .map(engine_comment)
            .collect())
    }

    async fn list_runs(&self, query: &RunQuery) -> Result<Vec<Run>, ForgeError> {
        let filter = RunFilter {
            workflow: Some(query.workflow.clone()),
            event: query.event.as_ref().map(ToString::to_string),
            actor: query.actor.clone(),
            head_sha: query.head_sha.as_ref().map(CommitSha::to_string),
            ..RunFilter::default()
        };
        self.forge
            .list_runs(&filter)
            .await
            .map_err(map)?
            .into_iter()
            .map(run)
            .collect::<Result<_, _>>()
            .map_err(map)
    }

    async fn get_run(&self, id: u64) -> Result<Run, ForgeError> {
        self.forge.get_run(id).await.and_then(run).map_err(map)
    }

    async fn list_artifacts(&self, run: u64) -> Result<Vec<ArtifactInfo>, ForgeError> {
        Ok(self
            .forge
            .list_artifacts(run)
            .await
            .map_err(map)?
            .into_iter()
            .map(|a| ArtifactInfo {
                id: a.id,
                name: a.name,
                expired: a.expired,
            })
            .collect())
    }

    async fn download_artifact(&self, id: u64) -> Result<Vec<u8>, ForgeError> {
        self.forge.download_artifact(id).await.map_err(map)
    }

    async fn list_jobs(
        &self,
        run: u64,
    ) -> Result<Vec<klaud_lifecycle::engine::forge::Job>, ForgeError> {
        Ok(self
            .forge
            .list_jobs(run)
            .await
            .map_err(map)?
            .into_iter()
            .map(|j| klaud_lifecycle::engine::forge::Job {
                id: j.id,
                name: j.name,
                status: j.status,
                conclusion: j.conclusion,
                html_url: j.html_url,
                runner_name: j.runner_name.filter(|n| !n.is_empty()),
            })
            .collect())
    }

    async fn job_log(&self, job: u64, limit: usize) -> Result<Vec<u8>, ForgeError> {
        self.forge.job_log(job, limit).await.map_err(map)
    }

    async fn compare_commits(
        &self,
        base: &str,
        head: &str,
    ) -> Result<klaud_lifecycle::engine::Comparison, ForgeError> {
        let d = match self.forge.own_child_compare(base, head) {
            Some(d) => d,
            None => self.forge.compare_detail(base, head).await.map_err(map)?,
        };
        let what = || format!("compare {base}...{head}");
        let commits = d
            .commits
            .into_iter()
            .map(|c| {
                Ok(klaud_lifecycle::engine::ComparedCommit {
                    sha: sha(what, "commits[].sha", &c.sha)?,
                    message: c.commit.message,
                    author: c.author.map(|a| a.login),
                    parents: c
                        .parents
                        .iter()
                        .map(|p| sha(what, "commits[].parents[].sha", &p.sha))
                        .collect::<Result<_, _>>()?,
                })
            })
            .collect::<Result<_, GithubError>>()
            .map_err(map)?;
        let merge_base = d
            .merge_base_commit
            .map(|c| sha(what, "merge_base_commit.sha", &c.sha))
            .transpose()
            .map_err(map)?;
        Ok(klaud_lifecycle::engine::Comparison {
            status: d.status,
            total_commits: d.total_commits,
            commits,
            files: d.files.into_iter().map(|f| f.filename).collect(),
            merge_base,
        })
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
            Write::CreateBranchWithCommit {
                branch,
                base,
                files,
                message,
            } => self
                .apply_create_branch_with_commit(branch, base, files, message)
                .await
                .map(Written::Commit),
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
            // A reply is a comment on GitHub; only the permit that allowed
            // it differs.
            Write::CreateComment { number, body } | Write::Reply { number, body } => self
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
                .apply_dispatch_run(workflow, git_ref, inputs)
                .await
                .map(Written::Dispatched),
            Write::RerunRun { id } => self.apply_rerun_run(id).await.map(done),
            Write::CancelRun { id } => self.apply_cancel_run(id).await.map(done),
        }
    }
}

/// The writes as plain operations over the GitHub client; [`LifecycleForge::write`]
/// sends them once their proof has permitted them.
impl GithubLifecycle<'_> {
    async fn apply_commit_files(
        &self,
        parent: &str,
        files: &[(String, Vec<u8>)],
        message: &str,
    ) -> Result<CommitSha, ForgeError> {
        let (tree, changes) = self.tree_with(parent, files).await?;
        let made = self
            .forge
            .create_commit(message, &tree, &[parent.to_owned()])
            .await
            .map_err(map)?;
        let made = sha(|| "create commit".into(), "sha", &made).map_err(map)?;
        self.forge.remember_own_commit(&made, parent, &changes);
        Ok(made)
    }

    async fn apply_commit_merge(
        &self,
        head: &str,
        base: &str,
        files: &[(String, Vec<u8>)],
        message: &str,
    ) -> Result<CommitSha, ForgeError> {
        let (tree, changes) = self.tree_with(base, files).await?;
        let made = self
            .forge
            .create_commit(message, &tree, &[head.to_owned(), base.to_owned()])
            .await
            .map_err(map)?;
        let made = sha(|| "create merge commit".into(), "sha", &made).map_err(map)?;
        // Its tree is `base`'s with `files` set: a file read at the merge
        // (check-final's changelog and master) is answered from memory.
        self.forge.remember_own_commit(&made, base, &changes);
        Ok(made)
    }

    async fn apply_commit_on_branch(
        &self,
        branch: &str,
        expected_head: &str,
        files: &[(String, Vec<u8>)],
        message: &str,
    ) -> Result<CommitSha, ForgeError> {
        // GitHub's mutation writes every file as 100644: an executable one
        // (a launcher a repair edits) goes through the tree API, which
        // keeps its mode, at two requests more.
        if !self.executable(expected_head, files).await?.is_empty() {
            let made = self
                .apply_commit_files(expected_head, files, message)
                .await?;
            self.apply_fast_forward_branch(branch, made.as_str())
                .await?;
            return Ok(made);
        }
        let made = self
            .forge
            .commit_on_branch(branch, expected_head, &regular_files(files), message)
            .await
            .map_err(map)?;
        sha(|| format!("commit on branch {branch}"), "oid", &made).map_err(map)
    }

    async fn apply_create_branch_with_commit(
        &self,
        branch: &str,
        base: &str,
        files: &[(String, Vec<u8>)],
        message: &str,
    ) -> Result<CommitSha, ForgeError> {
        // An executable file keeps its mode only through the tree API (see
        // `apply_commit_on_branch`): the commit made apart, then the
        // branch created at it.
        if !self.executable(base, files).await?.is_empty() {
            let made = self.apply_commit_files(base, files, message).await?;
            self.apply_create_branch(branch, made.as_str()).await?;
            return Ok(made);
        }
        let made = self
            .forge
            .branch_with_commit(branch, base, &regular_files(files), message)
            .await
            .map_err(map)?;
        sha(
            || format!("create branch {branch} with a commit"),
            "oid",
            &made,
        )
        .map_err(map)
    }

    async fn apply_create_branch(&self, branch: &str, sha: &str) -> Result<(), ForgeError> {
        self.forge
            .create_ref(&format!("refs/heads/{branch}"), sha)
            .await
            .map_err(map)
    }

    async fn apply_fast_forward_branch(&self, branch: &str, sha: &str) -> Result<(), ForgeError> {
        self.forge
            .update_ref(&format!("refs/heads/{branch}"), sha, false)
            .await
            .map_err(map)
    }

    async fn apply_delete_branch(&self, branch: &str) -> Result<(), ForgeError> {
        self.forge
            .delete_ref(&format!("refs/heads/{branch}"))
            .await
            .map_err(map)
    }

    async fn apply_create_draft_pull(
        &self,
        title: &str,
        head: &str,
        base: &str,
        body: &str,
    ) -> Result<Pull, ForgeError> {
        self.forge
            .create_pull(title, head, base, body, true)
            .await
            .and_then(engine_pull)
            .map_err(map)
    }

    async fn apply_update_pull_body(
        &self,
        number: PullNumber,
        body: &str,
    ) -> Result<(), ForgeError> {
        self.forge
            .update_pull(number.get(), None, Some(body), None)
            .await
            .map(|_| ())
            .map_err(map)
    }

    async fn apply_close_pull(&self, number: PullNumber) -> Result<(), ForgeError> {
        self.forge
            .update_pull(number.get(), None, None, Some("closed"))
            .await
            .map(|_| ())
            .map_err(map)
    }

    async fn apply_set_draft(&self, pull: &Pull, draft: bool) -> Result<(), ForgeError> {
        // The mutations address the node id: the engine's own read of the
        // pull request carries it (the engine asked only because that read
        // showed the other state; the mutation is a no-op on a pull
        // request already in `draft`). A pull request without one is read.
        if let Some(node) = pull.node_id.as_deref() {
            return self
                .forge
                .set_draft(pull.number.get(), node, draft)
                .await
                .map_err(map);
        }
        let info = self.forge.get_pull(pull.number.get()).await.map_err(map)?;
        if info.draft == draft {
            return Ok(());
        }
        self.forge
            .set_draft(info.number, &info.node_id, draft)
            .await
            .map_err(map)
    }

    async fn apply_create_comment(
        &self,
        number: PullNumber,
        body: &str,
    ) -> Result<Comment, ForgeError> {
        let c = self
            .forge
            .create_comment(number.get(), body)
            .await
            .map_err(map)?;
        Ok(engine_comment(c))
    }

    async fn apply_update_comment(
        &self,
        // The comment's id alone names it on GitHub; the number is what
        // the proof checked.
        _number: PullNumber,
        comment: u64,
        body: &str,
    ) -> Result<Comment, ForgeError> {
        let c = self
            .forge
            .update_comment(comment, body)
            .await
            .map_err(map)?;
        Ok(engine_comment(c))
    }

    async fn apply_add_labels(
        &self,
        number: PullNumber,
        labels: &[String],
    ) -> Result<(), ForgeError> {
        let names: Vec<&str> = labels.iter().map(String::as_str).collect();
        self.forge
            .add_labels(number.get(), &names)
            .await
            .map(|_| ())
            .map_err(map)
    }

    async fn apply_remove_label(&self, number: PullNumber, label: &str) -> Result<(), ForgeError> {
        self.forge
            .remove_label(number.get(), label)
            .await
            .map_err(map)
    }

    async fn apply_dispatch_run(
        &self,
        workflow: &str,
        git_ref: &str,
        inputs: &Value,
    ) -> Result<Option<(u64, Option<String>)>, ForgeError> {
        self.forge
            .dispatch_workflow(workflow, git_ref, inputs)
            .await
            .map(|d| d.run_id.map(|id| (id, d.html_url)))
            .map_err(map)
    }

    async fn apply_rerun_run(&self, id: u64) -> Result<(), ForgeError> {
        self.forge.rerun_run(id).await.map_err(map)
    }

    async fn apply_cancel_run(&self, id: u64) -> Result<(), ForgeError> {
        self.forge.cancel_run(id).await.map_err(map)
    }
}

/// A comment as the engine reads it: GitHub's association as its word.
fn engine_comment(c: crate::CommentInfo) -> Comment {
    Comment {
        id: c.id,
        body: c.body,
        author: c.author,
        author_association: c.author_association.map(Into::into),
    }
}

/// `files` (path, bytes) as regular-file changes: GitHub's GraphQL
/// commits write every file as 100644.
fn regular_files(files: &[(String, Vec<u8>)]) -> Vec<TreeChange> {
    files
        .iter()
        .map(|(path, bytes)| TreeChange {
            path: path.clone(),
            content: Some(bytes.clone()),
            executable: false,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn a_github_failure_keeps_its_message_and_is_the_source() {
        let e = map(GithubError::Server {
            what: "read run 5".into(),
            status: 502,
        });
        assert_eq!(e.to_string(), "read run 5: GitHub server error 502");
        let source = e.source().expect("kept");
        assert!(
            matches!(
                source.downcast_ref::<GithubError>(),
                Some(GithubError::Server { status: 502, .. })
            ),
            "{source:?}"
        );
        assert!(matches!(
            map(GithubError::NotFound { what: "run 5".into() }),
            ForgeError::NotFound(w) if w == "run 5"
        ));
    }
}
