//! The forge's git data: refs, commits, trees, blobs and file contents
//! (a tree read once answers later reads of its blobs).

use super::*;

impl Github {
    /// The sha a ref (full name) points at; `None` when absent.
    pub fn get_ref<'f>(
        &'f self,
        name: &'f str,
    ) -> BoxFuture<'f, Result<Option<String>, GithubError>> {
        Box::pin(async move {
            let what = format!("read ref {name}");
            let path = self.path(&format!("git/ref/{}", short_ref(name)));
            // Conditional: ownership checks re-read the same refs at every step,
            // and an unchanged ref is a free 304.
            let Some(body) = self.t.read_found_conditional(&what, &path).await? else {
                return Ok(None);
            };
            Ok(Some(
                crate::transport::decode::<RawRef>(&what, &body)?.object.sha,
            ))
        })
    }

    /// Every ref whose full name starts with `prefix`, as (name, sha).
    pub fn list_refs<'f>(
        &'f self,
        prefix: &'f str,
    ) -> BoxFuture<'f, Result<Vec<(String, String)>, GithubError>> {
        Box::pin(async move {
            let what = format!("list refs {prefix}*");
            let path = self.path(&format!(
                "git/matching-refs/{}?per_page=100",
                short_ref(prefix)
            ));
            let refs: Vec<RawRef> = self.t.get_all(&what, &path, None).await?;
            Ok(refs.into_iter().map(|r| (r.name, r.object.sha)).collect())
        })
    }

    /// Creates a ref. [`GithubError::AlreadyExists`] when it exists. After
    /// an ambiguous failure the ref is re-read: pointing at `sha` means our
    /// write landed — sound only when `sha` is unique to this writer (claim
    /// commits carry the owner's id, so two owners never share one).
    pub(crate) async fn create_ref(&self, name: &str, sha: &str) -> Result<(), GithubError> {
        let what = format!("create ref {name}");
        let body = json!({"ref": name, "sha": sha});
        for _ in 0..2 {
            match self
                .t
                .write(&what, Method::POST, &self.path("git/refs"), Some(&body))
                .await
            {
                Ok(raw) => return ok_or_error(&what, &raw),
                Err(GithubError::Ambiguous { detail, .. }) => match self.get_ref(name).await? {
                    Some(s) if s == sha => return Ok(()),
                    Some(_) => {
                        return Err(GithubError::AlreadyExists {
                            what,
                            message: "Reference already exists".into(),
                        });
                    }
                    None => tracing::warn!(what, detail, "write did not land; sending it again"),
                },
                Err(e) => return Err(e),
            }
        }
        Err(GithubError::Ambiguous {
            what,
            detail: "the write failed twice without landing".into(),
        })
    }

    /// Moves a ref. Without `force`, a non-fast-forward answers
    /// [`GithubError::NotFastForward`] (the compare-and-swap).
    pub(crate) async fn update_ref(
        &self,
        name: &str,
        sha: &str,
        force: bool,
    ) -> Result<(), GithubError> {
        let what = format!("update ref {name}");
        let body = json!({"sha": sha, "force": force});
        let path = self.path(&format!("git/refs/{}", short_ref(name)));
        for _ in 0..2 {
            match self.t.write(&what, Method::PATCH, &path, Some(&body)).await {
                Ok(raw)
                    if raw.status == http::StatusCode::UNPROCESSABLE_ENTITY
                        && raw.message().contains("does not exist") =>
                {
                    return Err(GithubError::NotFound { what });
                }
                Ok(raw) => return ok_or_error(&what, &raw),
                // Re-sending is safe: a non-forced update stays a CAS, and a
                // forced one converges on the same sha.
                Err(GithubError::Ambiguous { detail, .. }) => {
                    if self.get_ref(name).await?.as_deref() == Some(sha) {
                        return Ok(());
                    }
                    tracing::warn!(what, detail, "ref update did not land; sending it again");
                }
                Err(e) => return Err(e),
            }
        }
        Err(GithubError::Ambiguous {
            what,
            detail: "the write failed twice without landing".into(),
        })
    }

    /// Deletes a ref; [`GithubError::NotFound`] when it does not exist.
    pub(crate) async fn delete_ref(&self, name: &str) -> Result<(), GithubError> {
        let what = format!("delete ref {name}");
        let path = self.path(&format!("git/refs/{}", short_ref(name)));
        match self.t.write(&what, Method::DELETE, &path, None).await {
            Ok(raw)
                if raw.status == http::StatusCode::UNPROCESSABLE_ENTITY
                    && raw.message().contains("does not exist") =>
            {
                Err(GithubError::NotFound { what })
            }
            Ok(raw) => ok_or_error(&what, &raw),
            Err(GithubError::Ambiguous { detail, .. }) => match self.get_ref(name).await? {
                None => Ok(()),
                Some(_) => Err(GithubError::Ambiguous { what, detail }),
            },
            Err(e) => Err(e),
        }
    }

    pub(crate) async fn git_commit(&self, sha: &str) -> Result<GitCommit, GithubError> {
        let what = format!("read commit {sha}");
        let c: RawGitCommit = self
            .t
            .get_json_immutable(&what, &self.path(&format!("git/commits/{}", seg(sha))))
            .await?;
        Ok(GitCommit {
            message: c.message,
            tree: c.tree.sha,
            parents: c.parents.into_iter().map(|p| p.sha).collect(),
        })
    }

    /// Git objects are content-addressed, so re-sending a create after an
    /// ambiguous failure only ever yields the same object.
    async fn create_object(
        &self,
        what: &str,
        kind: &str,
        body: &Value,
    ) -> Result<(String, bytes::Bytes), GithubError> {
        let path = self.path(&format!("git/{kind}"));
        let mut last = None;
        for _ in 0..2 {
            match self.t.write(what, Method::POST, &path, Some(body)).await {
                Ok(raw) => {
                    ok_or_error(what, &raw)?;
                    return Ok((raw.json::<ShaOnly>(what)?.sha, raw.body));
                }
                Err(e @ GithubError::Ambiguous { .. }) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| GithubError::Ambiguous {
            what: what.to_string(),
            detail: "no answer".into(),
        }))
    }

    /// Creates a blob and returns its sha.
    pub(crate) async fn create_blob(&self, content: &[u8]) -> Result<String, GithubError> {
        let body = json!({"content": B64.encode(content), "encoding": "base64"});
        Ok(self.create_object("create blob", "blobs", &body).await?.0)
    }

    /// Creates a tree from `base_tree` plus changes and returns its sha.
    pub(crate) async fn create_tree(
        &self,
        base_tree: Option<&str>,
        changes: &[TreeChange],
    ) -> Result<String, GithubError> {
        let mut entries = Vec::new();
        for c in changes {
            let mode = if c.executable { "100755" } else { "100644" };
            let entry = match &c.content {
                // Text goes into the tree request itself (GitHub writes the
                // blob): one request less per file than a blob first.
                Some(bytes) if bytes.len() <= INLINE_TREE_CONTENT_MAX => {
                    match std::str::from_utf8(bytes) {
                        Ok(text) => {
                            json!({"path": c.path, "mode": mode, "type": "blob", "content": text})
                        }
                        Err(_) => {
                            let sha = self.create_blob(bytes).await?;
                            json!({"path": c.path, "mode": mode, "type": "blob", "sha": sha})
                        }
                    }
                }
                Some(bytes) => {
                    let sha = self.create_blob(bytes).await?;
                    json!({"path": c.path, "mode": mode, "type": "blob", "sha": sha})
                }
                None => json!({"path": c.path, "mode": mode, "type": "blob", "sha": null}),
            };
            entries.push(entry);
        }
        let mut body = json!({"tree": entries});
        if let Some(b) = base_tree {
            body["base_tree"] = json!(b);
        }
        Ok(self.create_object("create tree", "trees", &body).await?.0)
    }

    /// Every blob of a commit's (or tree's) tree, recursively, as
    /// `(path, blob sha)`. A truncated answer (GitHub caps recursive trees)
    /// is an error rather than a silently partial listing.
    pub fn tree_blobs<'f>(
        &'f self,
        tree_ish: &'f str,
    ) -> BoxFuture<'f, Result<Vec<(String, String)>, GithubError>> {
        Box::pin(async move {
            let t = self.recursive_tree(tree_ish).await?;
            if t.truncated {
                return Err(GithubError::Decode {
                    what: format!("read tree of {tree_ish}"),
                    detail: "GitHub truncated the recursive tree".into(),
                });
            }
            // Read by commit sha, the answer names that commit's tree: a claim
            // commit or a bump made on this commit needs no read of it.
            if is_full_sha(tree_ish)
                && let Some(tree) = t.sha.as_deref().filter(|s| is_full_sha(s))
            {
                self.t.remember_tree(tree_ish, tree);
            }
            Ok(t.tree
                .into_iter()
                .filter(|e| e.kind == "blob")
                .map(|e| (e.path, e.sha))
                .collect())
        })
    }

    /// `GET git/trees/{tree_ish}?recursive=1`, kept when read by sha (a
    /// commit's tree never changes).
    async fn recursive_tree(&self, tree_ish: &str) -> Result<RecursiveTree, GithubError> {
        let what = format!("read tree of {tree_ish}");
        let path = self.path(&format!("git/trees/{}?recursive=1", seg(tree_ish)));
        if is_full_sha(tree_ish) {
            self.t.get_json_immutable(&what, &path).await
        } else {
            self.t.get_json(&what, &path).await
        }
    }

    /// Which of `paths` are executable files (mode `100755`) at commit
    /// `sha`, so that a write keeps the mode a person gave them (a tree
    /// entry must name one, and GitHub's `createCommitOnBranch` writes
    /// every file as `100644`). A commit Klaud made keeps each path's mode
    /// from its parent (its writes keep modes, a file it adds is not
    /// executable), so the answer comes from the first commit down its
    /// parents that Klaud did not make: usually the base, whose tree
    /// planning has read already. A truncated tree (a huge repository)
    /// cannot tell: nothing is taken as executable, with a warning.
    pub(crate) async fn executable_paths(
        &self,
        sha: &str,
        paths: &[&str],
    ) -> Result<Vec<String>, GithubError> {
        let mut at = sha.to_owned();
        // A branch holds a handful of Klaud's commits; bounded all the same.
        for _ in 0..64 {
            match self.t.own_paths(&at) {
                Some((parent, _)) => at = parent,
                None => break,
            }
        }
        let tree = self.recursive_tree(&at).await?;
        if tree.truncated {
            tracing::warn!(commit = %at, "the recursive tree is truncated: file modes are not kept");
            return Ok(Vec::new());
        }
        Ok(tree
            .tree
            .into_iter()
            .filter(|e| e.kind == "blob" && e.mode == "100755")
            .filter(|e| paths.contains(&e.path.as_str()))
            .map(|e| e.path)
            .collect())
    }

    /// `Some(blob sha or None when absent)` for `path` in the recursive tree
    /// of commit `sha`, when that tree was read already and is complete;
    /// `None` when only a request can tell.
    fn blob_in_read_tree(&self, sha: &str, path: &str) -> Option<Option<String>> {
        if !is_full_sha(sha) {
            return None;
        }
        let body = self
            .t
            .cached_immutable(&self.path(&format!("git/trees/{}?recursive=1", seg(sha))))?;
        let tree: RecursiveTree = serde_json::from_slice(&body).ok()?;
        if tree.truncated {
            return None;
        }
        let entry = tree.tree.into_iter().find(|e| e.path == path);
        match entry {
            Some(e) if e.kind == "blob" => Some(Some(e.sha)),
            // A directory (or a submodule) is not a file: the contents API
            // says what it is.
            Some(_) => None,
            None => Some(None),
        }
    }

    /// Keeps blob `sha` (its bytes in base64, as kept elsewhere, e.g. the
    /// store) as if read here: a later read of a file whose tree entry
    /// names it asks nothing. A blob is its sha, so nothing can go stale.
    pub fn remember_blob(&self, sha: &str, base64: &str) {
        if !is_full_sha(sha) {
            return;
        }
        let body = serde_json::json!({ "sha": sha, "content": base64, "encoding": "base64" });
        self.t.remember_immutable(
            &self.path(&format!("git/blobs/{}", seg(sha))),
            bytes::Bytes::from(body.to_string()),
        );
    }

    /// A blob's bytes.
    pub fn get_blob<'f>(&'f self, sha: &'f str) -> BoxFuture<'f, Result<Vec<u8>, GithubError>> {
        Box::pin(async move {
            #[derive(Deserialize)]
            struct Blob {
                content: String,
                encoding: String,
            }
            let what = format!("read blob {sha}");
            let b: Blob = self
                .t
                .get_json_immutable(&what, &self.path(&format!("git/blobs/{}", seg(sha))))
                .await?;
            if b.encoding != "base64" {
                return Err(GithubError::Decode {
                    what,
                    detail: format!("blob encoding {:?}", b.encoding),
                });
            }
            B64.decode(b.content.replace(['\n', '\r'], ""))
                .map_err(|e| GithubError::Decode {
                    what,
                    detail: format!("content is not base64: {e}"),
                })
        })
    }

    /// Creates a commit object and returns its sha.
    pub(crate) async fn create_commit(
        &self,
        message: &str,
        tree: &str,
        parents: &[String],
    ) -> Result<String, GithubError> {
        let body = json!({"message": message, "tree": tree, "parents": parents});
        let (sha, answer) = self
            .create_object("create commit", "commits", &body)
            .await?;
        // GitHub answers a create with the commit object itself, the same
        // JSON `GET git/commits/{sha}` gives, and a commit never changes: the
        // next step's read of it (the claim record in its message, the head
        // it checks) is answered from memory.
        if is_full_sha(&sha)
            && crate::transport::decode::<RawGitCommit>("created commit", &answer).is_ok()
        {
            self.t
                .remember_immutable(&self.path(&format!("git/commits/{}", seg(&sha))), answer);
            self.t.remember_tree(&sha, tree);
        }
        Ok(sha)
    }

    /// One commit of `changes` on `branch` (short name), whose parent is
    /// `expected_head`, with the branch moved to it: GitHub's GraphQL
    /// `createCommitOnBranch`, one request where the git data API takes
    /// three (tree, commit, ref). Its `expectedHeadOid` is the
    /// compare-and-swap a non-forced ref update is: a branch that moved
    /// answers [`GithubError::NotFastForward`] and is left as it was.
    ///
    /// Sent once: after an answer that was lost the commit may exist and
    /// the branch may have moved, which only the branch tip can tell
    /// ([`GithubError::Ambiguous`]; a second send would be refused as
    /// stale either way, telling nothing).
    pub(crate) async fn commit_on_branch(
        &self,
        branch: &str,
        expected_head: &str,
        changes: &[TreeChange],
        message: &str,
    ) -> Result<String, GithubError> {
        let what = format!("commit on branch {branch}");
        let input = self.commit_input(branch, expected_head, changes, message);
        let query = "mutation($input: CreateCommitOnBranchInput!) { createCommitOnBranch(input: $input) { commit { oid message tree { oid } } } }";
        let answer = match self
            .graphql_once(&what, query, json!({"input": input}))
            .await?
        {
            Ok(answer) => answer,
            Err(errors) => return Err(commit_refused(what, &errors)),
        };
        let commit = &answer["data"]["createCommitOnBranch"]["commit"];
        self.made_commit(what, commit, expected_head, changes)
    }

    /// Branch `branch` created at `base` with one commit of `changes` on
    /// it, in one request where [`Github::create_ref`] and
    /// [`Github::commit_on_branch`] take two: a document of two mutations,
    /// `createRef` then `createCommitOnBranch` with `base` as its expected
    /// head, which GitHub runs in that order, each answered (or refused,
    /// `null` with its error) on its own.
    ///
    /// The commit's answer decides: made, the branch is at it, whoever
    /// created the ref (a branch an earlier try left at `base` takes the
    /// commit just as it would alone); refused as stale, the branch was
    /// elsewhere and nothing changed ([`GithubError::NotFastForward`]);
    /// with the ref refused as existing and no word of the commit,
    /// [`GithubError::AlreadyExists`]. A ref created and a commit refused
    /// leave the branch at `base`, as a crash between the two requests
    /// would: the caller's next read of the tip settles both. Sent once,
    /// like the commit alone.
    pub(crate) async fn branch_with_commit(
        &self,
        branch: &str,
        base: &str,
        changes: &[TreeChange],
        message: &str,
    ) -> Result<String, GithubError> {
        let what = format!("create branch {branch} with a commit");
        let repository = self.repository_id().await?;
        let query = "mutation($branch: CreateRefInput!, $commit: CreateCommitOnBranchInput!) { createRef(input: $branch) { ref { name } } createCommitOnBranch(input: $commit) { commit { oid message tree { oid } } } }";
        let variables = json!({
            "branch": {
                "repositoryId": repository,
                "name": format!("refs/heads/{branch}"),
                "oid": base,
            },
            "commit": self.commit_input(branch, base, changes, message),
        });
        let (answer, errors) = self.graphql_once_whole(&what, query, variables).await?;
        let commit = &answer["data"]["createCommitOnBranch"]["commit"];
        if commit.is_object() {
            return self.made_commit(what, commit, base, changes);
        }
        let of = |field: &str| -> Vec<crate::graphql::GraphqlError> {
            errors
                .iter()
                .filter(|e| e.field.as_deref() == Some(field))
                .cloned()
                .collect()
        };
        let (ref_refused, commit_refusal) = (of("createRef"), of("createCommitOnBranch"));
        // A commit that found no branch because the ref was refused: the
        // ref's refusal is the reason.
        let branch_missing = !ref_refused.is_empty()
            && commit_refusal
                .iter()
                .all(|e| e.kind.as_deref() == Some("NOT_FOUND"));
        if !commit_refusal.is_empty() && !branch_missing {
            return Err(commit_refused(what, &commit_refusal));
        }
        if commit_refusal.is_empty()
            && ref_refused
                .iter()
                .any(|e| e.message.contains("already exists"))
        {
            let message = ref_refused
                .first()
                .map(|e| e.message.clone())
                .unwrap_or_default();
            return Err(GithubError::AlreadyExists { what, message });
        }
        if errors.is_empty() {
            return Err(GithubError::Decode {
                what,
                detail: "neither a commit nor an error in the answer".into(),
            });
        }
        Err(crate::graphql::rejected(&what, &errors))
    }

    /// `createCommitOnBranch`'s input: `changes` on `branch` over
    /// `expected_head`. The message's first line is the headline and the
    /// rest, after the blank line, the body: GitHub joins them back with a
    /// blank line.
    fn commit_input(
        &self,
        branch: &str,
        expected_head: &str,
        changes: &[TreeChange],
        message: &str,
    ) -> serde_json::Value {
        let (headline, rest) = message.split_once('\n').unwrap_or((message, ""));
        let body = rest.strip_prefix('\n').unwrap_or(rest);
        let mut additions = Vec::new();
        let mut deletions = Vec::new();
        for c in changes {
            match &c.content {
                Some(bytes) => {
                    additions.push(json!({"path": c.path, "contents": B64.encode(bytes)}))
                }
                None => deletions.push(json!({"path": c.path})),
            }
        }
        json!({
            "branch": {"repositoryNameWithOwner": self.repo(), "branchName": branch},
            "expectedHeadOid": expected_head,
            "message": {"headline": headline, "body": body},
            "fileChanges": {"additions": additions, "deletions": deletions},
        })
    }

    /// The sha of the commit a `createCommitOnBranch` answer names
    /// (`commit`: its `oid`, `message` and `tree { oid }`), made of
    /// `changes` on `parent`.
    fn made_commit(
        &self,
        what: String,
        commit: &serde_json::Value,
        parent: &str,
        changes: &[TreeChange],
    ) -> Result<String, GithubError> {
        let field = |name: &str| commit[name].as_str().filter(|s| is_full_sha(s));
        let Some(sha) = field("oid").map(str::to_owned) else {
            return Err(GithubError::Decode {
                what,
                detail: "no commit oid in the answer".into(),
            });
        };
        if let (Some(tree), Some(message)) = (
            commit["tree"]["oid"].as_str().filter(|s| is_full_sha(s)),
            commit["message"].as_str(),
        ) {
            // A commit never changes, and the mutation's answer holds what
            // a later `GET git/commits/{sha}` would be read for (message,
            // tree, the one parent GitHub documents): kept in that shape,
            // the next step's read of the tip asks nothing.
            let known = json!({
                "sha": sha, "message": message,
                "tree": {"sha": tree}, "parents": [{"sha": parent}],
            });
            self.t.remember_immutable(
                &self.path(&format!("git/commits/{}", seg(&sha))),
                bytes::Bytes::from(known.to_string()),
            );
            self.t.remember_tree(&sha, tree);
            self.remember_own_commit(&sha, parent, changes);
        }
        Ok(sha)
    }

    /// The tree of commit `sha`: known without a request when the commit
    /// was made here or its tree was read by its sha, else read (and the
    /// commit is kept, like every git object read by sha).
    pub(crate) async fn tree_of(&self, sha: &str) -> Result<String, GithubError> {
        if let Some(tree) = self.t.known_tree(sha) {
            return Ok(tree);
        }
        let tree = self.git_commit(sha).await?.tree;
        self.t.remember_tree(sha, &tree);
        Ok(tree)
    }

    /// The compare `base...head` known without a request: `head` is a
    /// commit made here whose one parent is `base` (its answer kept when it
    /// was made, with the paths it set). GitHub would answer the same:
    /// ahead by that one commit, the bot's, changing those paths (a commit
    /// made here only sets what it changes). A commit no longer kept, or
    /// any other, is asked.
    pub(crate) fn own_child_compare(&self, base: &str, head: &str) -> Option<CompareDetail> {
        if !is_full_sha(base) || !is_full_sha(head) {
            return None;
        }
        let (parent, paths) = self.t.own_paths(head)?;
        let answer = self
            .t
            .cached_immutable(&self.path(&format!("git/commits/{}", seg(head))))?;
        let commit: RawGitCommit = crate::transport::decode("own commit", &answer).ok()?;
        let [only] = commit.parents.as_slice() else {
            return None;
        };
        if only.sha != base || parent != base {
            return None;
        }
        Some(CompareDetail {
            status: CompareStatus::Ahead,
            total_commits: 1,
            commits: vec![ComparedCommitInfo {
                sha: head.to_owned(),
                commit: ComparedCommitBody {
                    message: commit.message,
                },
                author: Some(UserLogin {
                    login: self.bot_login().to_owned(),
                }),
                parents: vec![ComparedParent {
                    sha: base.to_owned(),
                }],
            }],
            files: paths
                .into_iter()
                .map(|filename| ComparedFile { filename })
                .collect(),
            merge_base_commit: Some(ShaOnlyPub {
                sha: base.to_owned(),
            }),
        })
    }

    /// Remembers what a commit made here with [`Github::create_tree`] on
    /// `parent`'s tree holds: `files` as set, every other path as in
    /// `parent`. A later read of a file at that commit asks nothing.
    pub(crate) fn remember_own_commit(&self, sha: &str, parent: &str, files: &[TreeChange]) {
        if is_full_sha(sha) && is_full_sha(parent) {
            self.t.remember_own_commit(
                sha,
                parent,
                files.iter().map(|c| {
                    (
                        c.path.clone(),
                        c.content.as_ref().map(|b| bytes::Bytes::from(b.clone())),
                    )
                }),
            );
        }
    }

    /// A file's bytes at a ref; `None` when the path does not exist.
    pub fn get_contents<'f>(
        &'f self,
        path: &'f str,
        git_ref: &'f str,
    ) -> BoxFuture<'f, Result<Option<Vec<u8>>, GithubError>> {
        Box::pin(async move {
            #[derive(Deserialize)]
            struct Content {
                #[serde(default)]
                content: Option<String>,
                #[serde(default)]
                encoding: Option<String>,
                #[serde(default)]
                sha: Option<String>,
                #[serde(rename = "type", default)]
                kind: Option<String>,
            }
            // A commit Klaud made holds the files it set, and its parent's
            // everywhere else: no request for what Klaud wrote itself.
            let mut git_ref = git_ref.to_string();
            for _ in 0..64 {
                match self.t.own_file(&git_ref, path) {
                    crate::transport::OwnFile::Set(bytes) => return Ok(bytes.map(|b| b.to_vec())),
                    crate::transport::OwnFile::AsIn(parent) => git_ref = parent,
                    crate::transport::OwnFile::Unknown => break,
                }
            }
            let git_ref = git_ref.as_str();
            // The plan read this commit's whole tree by its sha: the file is
            // absent, or the blob the tree names; when that blob was read
            // too, no request. (A blob not read yet costs one request either
            // way; the contents API's is the one the caches of checkouts and
            // the store expect.)
            match self.blob_in_read_tree(git_ref, path) {
                Some(None) => return Ok(None),
                Some(Some(sha)) => {
                    let blob = self.path(&format!("git/blobs/{}", seg(&sha)));
                    if self.t.cached_immutable(&blob).is_some() {
                        return self.get_blob(&sha).await.map(Some);
                    }
                }
                None => {}
            }
            let what = format!("read {path} at {git_ref}");
            let p = self.path(&format!(
                "contents/{}?{}",
                path_of(path),
                query(&[("ref", git_ref)])
            ));
            // A file at a commit sha never changes; at a branch it may.
            let body = if is_full_sha(git_ref) {
                self.t.read_immutable(&what, &p).await?
            } else {
                self.t.read_found(&what, &p).await?.map(|raw| raw.body)
            };
            let Some(body) = body else {
                return Ok(None);
            };
            // A directory answers with an array.
            let c: Content =
                crate::transport::decode(&what, &body).map_err(|_| GithubError::Decode {
                    what: what.clone(),
                    detail: "not a file (a directory listing?)".into(),
                })?;
            if c.kind.as_deref().is_some_and(|k| k != "file") {
                return Err(GithubError::Decode {
                    what,
                    detail: format!("not a file but a {}", c.kind.unwrap_or_default()),
                });
            }
            let decode = |text: &str, what: String| {
                B64.decode(text.replace(['\n', '\r'], ""))
                    .map_err(|e| GithubError::Decode {
                        what,
                        detail: format!("content is not base64: {e}"),
                    })
            };
            match (c.content.as_deref(), c.encoding.as_deref(), c.sha) {
                (Some(text), Some("base64"), _) => decode(text, what).map(Some),
                // Files over 1 MB are not inlined: read the blob (up to 100 MB).
                (_, Some("none"), Some(sha)) | (None, _, Some(sha)) => {
                    #[derive(Deserialize)]
                    struct Blob {
                        content: String,
                        encoding: String,
                    }
                    let b: Blob = self
                        .t
                        .get_json_immutable(&what, &self.path(&format!("git/blobs/{}", seg(&sha))))
                        .await?;
                    if b.encoding != "base64" {
                        return Err(GithubError::Decode {
                            what,
                            detail: format!("blob encoding {:?}", b.encoding),
                        });
                    }
                    decode(&b.content, what).map(Some)
                }
                _ => Err(GithubError::Decode {
                    what,
                    detail: "file content missing from the response".into(),
                }),
            }
        })
    }
}

/// A refused `createCommitOnBranch`: a stale `expectedHeadOid` is the
/// compare-and-swap's refusal; a missing branch or repository is not
/// found; anything else is GitHub's message.
fn commit_refused(what: String, errors: &[crate::graphql::GraphqlError]) -> GithubError {
    let kind = |k: &str| errors.iter().any(|e| e.kind.as_deref() == Some(k));
    if kind("STALE_DATA") {
        GithubError::NotFastForward { what }
    } else if kind("NOT_FOUND") {
        GithubError::NotFound { what }
    } else {
        crate::graphql::rejected(&what, errors)
    }
}
