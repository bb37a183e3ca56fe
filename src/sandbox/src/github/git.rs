//! Git object model of the simulator: blobs, trees and commits hashed exactly
//! like git does (sha1 over `<type> <len>\0<payload>`), so shas are stable and
//! realistic, plus the REST handlers for `git/blobs`, `git/trees` and
//! `git/commits`.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};
use sha1::{Digest, Sha1};

use super::http::{ApiError, Caller};
use super::state::{GithubState, Model, fmt_time};

/// File mode of a regular file.
pub const MODE_FILE: &str = "100644";
/// File mode of an executable file.
pub const MODE_EXEC: &str = "100755";
/// File mode of a directory.
pub const MODE_TREE: &str = "040000";

/// One entry of a tree object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeEntry {
    pub name: String,
    pub mode: String,
    pub sha: String,
}

impl TreeEntry {
    pub fn is_tree(&self) -> bool {
        self.mode == MODE_TREE
    }
}

/// Name and e-mail plus a timestamp, as in a git commit header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    pub name: String,
    pub email: String,
    pub date: DateTime<Utc>,
}

/// A commit object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitObj {
    pub tree: String,
    pub parents: Vec<String>,
    pub author: Signature,
    pub committer: Signature,
    pub message: String,
}

/// Content-addressed object store of one repository.
#[derive(Debug, Default)]
pub struct Objects {
    pub blobs: HashMap<String, Vec<u8>>,
    pub trees: HashMap<String, Vec<TreeEntry>>,
    pub commits: HashMap<String, CommitObj>,
}

fn hash_object(kind: &str, payload: &[u8]) -> String {
    let mut h = Sha1::new();
    h.update(format!("{kind} {}\0", payload.len()).as_bytes());
    h.update(payload);
    hex::encode(h.finalize())
}

/// Git orders tree entries by name, comparing a directory as if its name
/// ended in `/`.
fn tree_sort_key(e: &TreeEntry) -> Vec<u8> {
    let mut k = e.name.as_bytes().to_vec();
    if e.is_tree() {
        k.push(b'/');
    }
    k
}

fn sig_line(s: &Signature) -> String {
    format!("{} <{}> {} +0000", s.name, s.email, s.date.timestamp())
}

/// A tree object's payload; `entries` in git's order.
fn tree_payload(entries: &[TreeEntry]) -> Vec<u8> {
    let mut payload = Vec::new();
    for e in entries {
        // git writes directory modes without the leading zero
        let mode = if e.is_tree() {
            "40000"
        } else {
            e.mode.as_str()
        };
        payload.extend_from_slice(format!("{mode} {}\0", e.name).as_bytes());
        // shas come from our own store, so they are always valid hex
        payload.extend_from_slice(&hex::decode(&e.sha).unwrap_or_default());
    }
    payload
}

/// A commit object's text.
fn commit_text(c: &CommitObj) -> String {
    let mut text = format!("tree {}\n", c.tree);
    for p in &c.parents {
        text.push_str(&format!("parent {p}\n"));
    }
    text.push_str(&format!("author {}\n", sig_line(&c.author)));
    text.push_str(&format!("committer {}\n\n", sig_line(&c.committer)));
    text.push_str(&c.message);
    text
}

/// Whether `s` looks like a full 40-hex sha.
pub fn is_sha(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

impl Objects {
    pub fn put_blob(&mut self, content: Vec<u8>) -> String {
        let sha = hash_object("blob", &content);
        self.blobs.entry(sha.clone()).or_insert(content);
        sha
    }

    pub fn put_tree(&mut self, mut entries: Vec<TreeEntry>) -> String {
        entries.sort_by_key(tree_sort_key);
        let sha = hash_object("tree", &tree_payload(&entries));
        self.trees.entry(sha.clone()).or_insert(entries);
        sha
    }

    pub fn put_commit(&mut self, c: CommitObj) -> String {
        let sha = hash_object("commit", commit_text(&c).as_bytes());
        self.commits.entry(sha.clone()).or_insert(c);
        sha
    }

    /// The object `sha` as git stores it: its type and payload (what the
    /// sha is computed over, after the `<type> <len>\0` header).
    pub fn raw(&self, sha: &str) -> Option<(&'static str, Vec<u8>)> {
        if let Some(b) = self.blobs.get(sha) {
            return Some(("blob", b.clone()));
        }
        if let Some(t) = self.trees.get(sha) {
            return Some(("tree", tree_payload(t)));
        }
        self.commits
            .get(sha)
            .map(|c| ("commit", commit_text(c).into_bytes()))
    }

    /// Every file under a tree as path → (mode, blob sha).
    pub fn flatten(&self, tree: &str) -> BTreeMap<String, (String, String)> {
        let mut out = BTreeMap::new();
        let mut stack = vec![(String::new(), tree.to_string())];
        while let Some((prefix, sha)) = stack.pop() {
            let Some(entries) = self.trees.get(&sha) else {
                continue;
            };
            for e in entries {
                let path = format!("{prefix}{}", e.name);
                if e.is_tree() {
                    stack.push((format!("{path}/"), e.sha.clone()));
                } else {
                    out.insert(path, (e.mode.clone(), e.sha.clone()));
                }
            }
        }
        out
    }

    /// Builds (and stores) a tree from a flat path → (mode, blob sha) map.
    pub fn build_tree(&mut self, files: &BTreeMap<String, (String, String)>) -> String {
        #[derive(Default)]
        struct Dir {
            files: Vec<TreeEntry>,
            dirs: BTreeMap<String, Dir>,
        }
        fn write(objs: &mut Objects, d: Dir) -> String {
            let mut entries = d.files;
            for (name, sub) in d.dirs {
                let sha = write(objs, sub);
                entries.push(TreeEntry {
                    name,
                    mode: MODE_TREE.into(),
                    sha,
                });
            }
            objs.put_tree(entries)
        }
        let mut root = Dir::default();
        for (path, (mode, sha)) in files {
            let mut parts: Vec<&str> = path.split('/').collect();
            let Some(file) = parts.pop() else { continue };
            let mut dir = &mut root;
            for p in parts {
                dir = dir.dirs.entry(p.to_string()).or_default();
            }
            dir.files.push(TreeEntry {
                name: file.to_string(),
                mode: mode.clone(),
                sha: sha.clone(),
            });
        }
        write(self, root)
    }

    /// Resolves a path inside a tree: `None` when missing.
    pub fn lookup(&self, tree: &str, path: &str) -> Option<TreeEntry> {
        let mut cur = TreeEntry {
            name: String::new(),
            mode: MODE_TREE.into(),
            sha: tree.to_string(),
        };
        for part in path.split('/').filter(|p| !p.is_empty()) {
            if !cur.is_tree() {
                return None;
            }
            cur = self
                .trees
                .get(&cur.sha)?
                .iter()
                .find(|e| e.name == part)?
                .clone();
        }
        Some(cur)
    }

    /// All commits reachable from `start` (inclusive).
    pub fn ancestors(&self, start: &str) -> HashSet<String> {
        let mut seen = HashSet::new();
        let mut queue = VecDeque::from([start.to_string()]);
        while let Some(sha) = queue.pop_front() {
            if !seen.insert(sha.clone()) {
                continue;
            }
            if let Some(c) = self.commits.get(&sha) {
                queue.extend(c.parents.iter().cloned());
            }
        }
        seen
    }

    /// The commits reachable from `head`, newest first in topological
    /// order (every commit before its parents; first parents first), as
    /// `git log` lists them.
    pub fn history(&self, head: &str) -> Vec<String> {
        // Reverse post-order of a depth-first walk: deterministic, where a
        // sort by date is not (commits of one second tie).
        let mut seen = HashSet::new();
        let mut post = Vec::new();
        let mut stack = vec![(head.to_string(), false)];
        while let Some((sha, done)) = stack.pop() {
            if done {
                post.push(sha);
                continue;
            }
            if !seen.insert(sha.clone()) {
                continue;
            }
            stack.push((sha.clone(), true));
            if let Some(c) = self.commits.get(&sha) {
                for p in c.parents.iter().rev() {
                    if !seen.contains(p) {
                        stack.push((p.clone(), false));
                    }
                }
            }
        }
        post.reverse();
        post
    }

    /// Whether `ancestor` is reachable from `descendant`.
    pub fn is_ancestor(&self, ancestor: &str, descendant: &str) -> bool {
        self.ancestors(descendant).contains(ancestor)
    }

    /// The nearest common ancestor (breadth-first from `b`).
    pub fn merge_base(&self, a: &str, b: &str) -> Option<String> {
        let from_a = self.ancestors(a);
        let mut seen = HashSet::new();
        let mut queue = VecDeque::from([b.to_string()]);
        while let Some(sha) = queue.pop_front() {
            if from_a.contains(&sha) {
                return Some(sha);
            }
            if !seen.insert(sha.clone()) {
                continue;
            }
            if let Some(c) = self.commits.get(&sha) {
                queue.extend(c.parents.iter().cloned());
            }
        }
        None
    }

    /// Commits reachable from `head` but not from `base`, oldest first.
    pub fn commits_between(&self, base: &str, head: &str) -> Vec<String> {
        let exclude = self.ancestors(base);
        let mut out: Vec<String> = self
            .ancestors(head)
            .into_iter()
            .filter(|s| !exclude.contains(s))
            .collect();
        out.sort_by_key(|s| self.commits.get(s).map(|c| c.committer.date));
        out
    }
}

// ---------------------------------------------------------------- rendering

fn sig_json(s: &Signature) -> Value {
    json!({"name": s.name, "email": s.email, "date": fmt_time(s.date)})
}

/// The `git/commits/{sha}` JSON shape.
pub fn git_commit_json(base: &str, sha: &str, c: &CommitObj) -> Value {
    json!({
        "sha": sha,
        "node_id": format!("C_{sha}"),
        "url": format!("{base}/git/commits/{sha}"),
        "html_url": format!("{base}/commit/{sha}"),
        "author": sig_json(&c.author),
        "committer": sig_json(&c.committer),
        "tree": {"sha": c.tree, "url": format!("{base}/git/trees/{}", c.tree)},
        "message": c.message,
        "parents": c.parents.iter().map(|p| json!({
            "sha": p, "url": format!("{base}/git/commits/{p}"), "html_url": format!("{base}/commit/{p}")
        })).collect::<Vec<_>>(),
        "verification": {"verified": false, "reason": "unsigned", "signature": null, "payload": null,
                         "verified_at": null},
    })
}

fn tree_json(base: &str, objs: &Objects, sha: &str, recursive: bool) -> Option<Value> {
    let entries = objs.trees.get(sha)?;
    let mut out = Vec::new();
    let mut stack: Vec<(String, &Vec<TreeEntry>)> = vec![(String::new(), entries)];
    while let Some((prefix, entries)) = stack.pop() {
        for e in entries {
            let path = format!("{prefix}{}", e.name);
            let mut v = json!({
                "path": path,
                "mode": e.mode,
                "type": if e.is_tree() { "tree" } else { "blob" },
                "sha": e.sha,
                "url": format!("{base}/git/{}s/{}", if e.is_tree() { "tree" } else { "blob" }, e.sha),
            });
            if !e.is_tree() {
                v["size"] = json!(objs.blobs.get(&e.sha).map(|b| b.len()).unwrap_or(0));
            } else if recursive && let Some(sub) = objs.trees.get(&e.sha) {
                stack.push((format!("{path}/"), sub));
            }
            out.push(v);
        }
    }
    Some(
        json!({"sha": sha, "url": format!("{base}/git/trees/{sha}"), "tree": out, "truncated": false}),
    )
}

// ---------------------------------------------------------------- handlers

#[derive(Deserialize)]
pub struct BlobIn {
    content: String,
    #[serde(default)]
    encoding: Option<String>,
}

pub async fn create_blob(
    State(st): State<GithubState>,
    Path((owner, repo)): Path<(String, String)>,
    Json(body): Json<BlobIn>,
) -> Result<Response, ApiError> {
    let bytes = match body.encoding.as_deref().unwrap_or("utf-8") {
        "base64" => B64
            .decode(body.content.replace(['\n', '\r'], ""))
            .map_err(|_| ApiError::unprocessable("content is not valid base64"))?,
        "utf-8" | "utf8" => body.content.into_bytes(),
        other => {
            return Err(ApiError::unprocessable(&format!(
                "encoding {other:?} is not supported"
            )));
        }
    };
    let mut m = st.lock().await;
    let base = m.repo_url(&owner, &repo);
    let r = m.repo_mut(&owner, &repo)?;
    let sha = r.objects.put_blob(bytes);
    Ok((
        StatusCode::CREATED,
        Json(json!({"sha": sha, "url": format!("{base}/git/blobs/{sha}")})),
    )
        .into_response())
}

pub async fn get_blob(
    State(st): State<GithubState>,
    Path((owner, repo, sha)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let base = m.repo_url(&owner, &repo);
    let r = m.repo(&owner, &repo)?;
    let b = r.objects.blobs.get(&sha).ok_or_else(ApiError::not_found)?;
    Ok(Json(json!({
        "sha": sha, "node_id": format!("B_{sha}"), "size": b.len(),
        "url": format!("{base}/git/blobs/{sha}"), "content": B64.encode(b), "encoding": "base64",
    }))
    .into_response())
}

#[derive(Deserialize)]
pub struct TreeEntryIn {
    path: String,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    /// `None`: absent; `Some(None)`: `"sha": null`, which deletes the path.
    #[serde(default, deserialize_with = "present")]
    sha: Option<Option<String>>,
    #[serde(default)]
    content: Option<String>,
}

/// serde reads `null` into an outer `Option` as absent; a field that is
/// there, even as `null`, is `Some` here (absent ones take the default).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

#[derive(Deserialize)]
pub struct TreeIn {
    #[serde(default)]
    base_tree: Option<String>,
    tree: Vec<TreeEntryIn>,
}

/// Applies `git/trees` entries (nested paths, deletions by `sha: null`) on
/// top of an optional base tree.
fn apply_tree(objs: &mut Objects, body: TreeIn) -> Result<String, ApiError> {
    let mut files = match &body.base_tree {
        Some(b) => {
            if !objs.trees.contains_key(b) {
                return Err(ApiError::unprocessable("base_tree is not a valid tree"));
            }
            objs.flatten(b)
        }
        None => BTreeMap::new(),
    };
    for e in body.tree {
        let path = e.path.trim_matches('/').to_string();
        if path.is_empty()
            || path
                .split('/')
                .any(|p| p.is_empty() || p == "." || p == "..")
        {
            return Err(ApiError::unprocessable(&format!(
                "tree.path {:?} is invalid",
                e.path
            )));
        }
        if matches!(e.sha, Some(None)) {
            // GitHub deletes a file or a whole folder this way, whatever the
            // entry's mode and type.
            let prefix = format!("{path}/");
            files.retain(|p, _| p != &path && !p.starts_with(&prefix));
            continue;
        }
        let mode = e.mode.unwrap_or_else(|| MODE_FILE.into());
        if e.kind.as_deref().is_some_and(|k| k != "blob") || mode == MODE_TREE || mode == "40000" {
            // Klaud only writes files; sub-tree entries would need a
            // recursive merge the real API does not promise either.
            return Err(ApiError::unprocessable(
                "only blob entries are supported by the simulator",
            ));
        }
        if mode != MODE_FILE && mode != MODE_EXEC {
            return Err(ApiError::unprocessable(&format!(
                "tree.mode {mode:?} is invalid"
            )));
        }
        match (e.sha.flatten(), e.content) {
            (Some(sha), _) => {
                if !objs.blobs.contains_key(&sha) {
                    return Err(ApiError::unprocessable(&format!(
                        "tree.sha {sha} is not a valid blob"
                    )));
                }
                files.insert(path, (mode, sha));
            }
            (None, Some(content)) => {
                let sha = objs.put_blob(content.into_bytes());
                files.insert(path, (mode, sha));
            }
            (None, None) => {
                return Err(ApiError::unprocessable("tree entry needs sha or content"));
            }
        }
    }
    Ok(objs.build_tree(&files))
}

pub async fn create_tree(
    State(st): State<GithubState>,
    Path((owner, repo)): Path<(String, String)>,
    Json(body): Json<TreeIn>,
) -> Result<Response, ApiError> {
    let mut m = st.lock().await;
    let base = m.repo_url(&owner, &repo);
    let r = m.repo_mut(&owner, &repo)?;
    let sha = apply_tree(&mut r.objects, body)?;
    let v = tree_json(&base, &r.objects, &sha, false).ok_or_else(ApiError::not_found)?;
    Ok((StatusCode::CREATED, Json(v)).into_response())
}

#[derive(Deserialize)]
pub struct TreeQuery {
    #[serde(default)]
    recursive: Option<String>,
}

pub async fn get_tree(
    State(st): State<GithubState>,
    Path((owner, repo, sha)): Path<(String, String, String)>,
    axum::extract::Query(q): axum::extract::Query<TreeQuery>,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let base = m.repo_url(&owner, &repo);
    let r = m.repo(&owner, &repo)?;
    let sha = r
        .resolve(&sha)
        .and_then(|c| r.objects.commits.get(&c).map(|c| c.tree.clone()))
        .unwrap_or(sha);
    let recursive = q
        .recursive
        .is_some_and(|v| !v.is_empty() && v != "0" && v != "false");
    let v = tree_json(&base, &r.objects, &sha, recursive).ok_or_else(ApiError::not_found)?;
    Ok(Json(v).into_response())
}

#[derive(Deserialize)]
pub struct SigIn {
    name: String,
    email: String,
    #[serde(default)]
    date: Option<DateTime<Utc>>,
}

#[derive(Deserialize)]
pub struct CommitIn {
    message: String,
    tree: String,
    #[serde(default)]
    parents: Vec<String>,
    #[serde(default)]
    author: Option<SigIn>,
    #[serde(default)]
    committer: Option<SigIn>,
}

fn sig_from(input: Option<SigIn>, fallback: &Signature) -> Signature {
    match input {
        Some(s) => Signature {
            name: s.name,
            email: s.email,
            date: s.date.unwrap_or(fallback.date),
        },
        None => fallback.clone(),
    }
}

pub async fn create_commit(
    State(st): State<GithubState>,
    caller: Caller,
    Path((owner, repo)): Path<(String, String)>,
    Json(body): Json<CommitIn>,
) -> Result<Response, ApiError> {
    let mut m = st.lock().await;
    let base = m.repo_url(&owner, &repo);
    let default_sig = m.signature_of(caller.login());
    let r = m.repo_mut(&owner, &repo)?;
    if !r.objects.trees.contains_key(&body.tree) {
        return Err(ApiError::unprocessable("Tree SHA does not exist"));
    }
    for p in &body.parents {
        if !r.objects.commits.contains_key(p) {
            return Err(ApiError::unprocessable(
                "Parent SHA does not exist or is not a commit object",
            ));
        }
    }
    let author = sig_from(body.author, &default_sig);
    let committer = sig_from(body.committer, &author);
    let c = CommitObj {
        tree: body.tree,
        parents: body.parents,
        author,
        committer,
        message: body.message,
    };
    let sha = r.objects.put_commit(c.clone());
    Ok((StatusCode::CREATED, Json(git_commit_json(&base, &sha, &c))).into_response())
}

pub async fn get_commit(
    State(st): State<GithubState>,
    Path((owner, repo, sha)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let base = m.repo_url(&owner, &repo);
    let r = m.repo(&owner, &repo)?;
    let c = r
        .objects
        .commits
        .get(&sha)
        .ok_or_else(ApiError::not_found)?;
    Ok(Json(git_commit_json(&base, &sha, c)).into_response())
}

/// Used by the model: a commit's JSON in the `repos/{o}/{r}/commits` shape.
pub fn repo_commit_json(
    m: &Model,
    base: &str,
    sha: &str,
    c: &CommitObj,
    files: Option<Vec<Value>>,
) -> Value {
    let user_of = |s: &Signature| m.user_by_email(&s.email).map(|u| m.user_json(u));
    let mut v = json!({
        "sha": sha,
        "node_id": format!("C_{sha}"),
        "url": format!("{base}/commits/{sha}"),
        "html_url": format!("{}/commit/{sha}", m.html_base(base)),
        "comments_url": format!("{base}/commits/{sha}/comments"),
        "commit": {
            "url": format!("{base}/git/commits/{sha}"),
            "author": sig_json(&c.author),
            "committer": sig_json(&c.committer),
            "message": c.message,
            "tree": {"sha": c.tree, "url": format!("{base}/git/trees/{}", c.tree)},
            "comment_count": 0,
        },
        "author": user_of(&c.author),
        "committer": user_of(&c.committer),
        "parents": c.parents.iter().map(|p| json!({
            "sha": p, "url": format!("{base}/commits/{p}"), "html_url": format!("{}/commit/{p}", m.html_base(base))
        })).collect::<Vec<_>>(),
    });
    if let Some(files) = files {
        v["files"] = Value::Array(files);
    }
    v
}

/// File-level diff between two trees in the `files` shape of GitHub.
pub fn diff_files(objs: &Objects, old_tree: &str, new_tree: &str) -> Vec<Value> {
    let old = objs.flatten(old_tree);
    let new = objs.flatten(new_tree);
    let mut out = Vec::new();
    let blob = |sha: Option<&String>| -> &[u8] {
        sha.and_then(|s| objs.blobs.get(s))
            .map_or(&[][..], |b| b.as_slice())
    };
    let mut push =
        |path: &str, status: &str, sha: &str, before: Option<&String>, after: Option<&String>| {
            let (adds, dels, patch) = file_patch(blob(before), blob(after));
            let mut v = json!({
                "sha": sha, "filename": path, "status": status,
                "additions": adds, "deletions": dels, "changes": adds + dels,
            });
            if let Some(p) = patch {
                v["patch"] = json!(p);
            }
            out.push(v);
        };
    for (path, (_, sha)) in &new {
        let before = old.get(path).map(|(_, o)| o);
        let status = match before {
            None => "added",
            Some(o) if o != sha => "modified",
            _ => continue,
        };
        push(path, status, sha, before, Some(sha));
    }
    for (path, (_, sha)) in &old {
        if !new.contains_key(path) {
            push(path, "removed", sha, Some(sha), None);
        }
    }
    out.sort_by(|a, b| a["filename"].as_str().cmp(&b["filename"].as_str()));
    out
}

/// The most lines a file's diff may have for GitHub to show its `patch`
/// (GitHub's documented diff limit for a single file: 20,000 lines).
pub const PATCH_MAX_LINES: usize = 20_000;

/// Line counts and the `patch` GitHub shows for one file: the unified-diff
/// hunks with three lines of context and no `---`/`+++` header, without a
/// trailing newline. No patch for a binary file (not UTF-8, or holding a
/// NUL byte) or a diff over [`PATCH_MAX_LINES`] lines.
pub fn file_patch(before: &[u8], after: &[u8]) -> (usize, usize, Option<String>) {
    let text = |b: &[u8]| {
        std::str::from_utf8(b)
            .ok()
            .filter(|t| !t.contains('\0'))
            .map(str::to_owned)
    };
    let (Some(a), Some(b)) = (text(before), text(after)) else {
        return (0, 0, None);
    };
    let diff = similar::TextDiff::from_lines(&a, &b);
    let (mut adds, mut dels) = (0, 0);
    for change in diff.iter_all_changes() {
        match change.tag() {
            similar::ChangeTag::Insert => adds += 1,
            similar::ChangeTag::Delete => dels += 1,
            similar::ChangeTag::Equal => {}
        }
    }
    if adds + dels == 0 || adds + dels > PATCH_MAX_LINES {
        return (adds, dels, None);
    }
    let patch = diff.unified_diff().context_radius(3).to_string();
    (adds, dels, Some(patch.trim_end_matches('\n').to_owned()))
}

/// Adds the `blob_url`, `raw_url` and `contents_url` GitHub puts on each
/// changed file, pointing at `commit`.
pub fn link_files(files: &mut [Value], api_repo_url: &str, html_repo_url: &str, commit: &str) {
    for f in files {
        let name = f["filename"].as_str().unwrap_or_default().to_string();
        f["blob_url"] = json!(format!("{html_repo_url}/blob/{commit}/{name}"));
        f["raw_url"] = json!(format!("{html_repo_url}/raw/{commit}/{name}"));
        f["contents_url"] = json!(format!("{api_repo_url}/contents/{name}?ref={commit}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_hash_matches_git() {
        let mut o = Objects::default();
        // `printf 'hello\n' | git hash-object --stdin`
        assert_eq!(
            o.put_blob(b"hello\n".to_vec()),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
        // empty tree is a well-known constant
        assert_eq!(
            o.put_tree(vec![]),
            "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
        );
    }

    #[test]
    fn nested_tree_round_trips_through_flatten() {
        let mut o = Objects::default();
        let a = o.put_blob(b"a".to_vec());
        let b = o.put_blob(b"b".to_vec());
        let mut files = BTreeMap::new();
        files.insert("x/y/a.txt".to_string(), (MODE_FILE.to_string(), a.clone()));
        files.insert("b.txt".to_string(), (MODE_FILE.to_string(), b.clone()));
        let t = o.build_tree(&files);
        assert_eq!(o.flatten(&t), files);
        assert_eq!(o.lookup(&t, "x/y/a.txt").map(|e| e.sha), Some(a));
        assert!(o.lookup(&t, "x/nope").is_none());
    }
}
