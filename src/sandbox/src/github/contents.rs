//! File contents, commits and comparisons, derived from the git objects.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde::Deserialize;
use serde_json::{Value, json};

use super::git::{diff_files, link_files, repo_commit_json};
use super::http::{ApiError, FullUri, paginate};
use super::state::GithubState;

#[derive(Deserialize)]
pub struct RefQuery {
    #[serde(default, rename = "ref")]
    git_ref: Option<String>,
}

/// Largest file the contents API returns inline.
const INLINE_LIMIT: usize = 1024 * 1024;

/// GitHub wraps base64 content at 60 characters per line.
fn wrapped_base64(bytes: &[u8]) -> String {
    let enc = B64.encode(bytes);
    let mut out = String::with_capacity(enc.len() + enc.len() / 60 + 1);
    for chunk in enc.as_bytes().chunks(60) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out
}

pub async fn get_contents(
    State(st): State<GithubState>,
    Path((owner, repo, path)): Path<(String, String, String)>,
    Query(q): Query<RefQuery>,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    let url = m.repo_url(&owner, &repo);
    let spec = q.git_ref.unwrap_or_else(|| r.default_branch.clone());
    let commit = r.resolve(&spec).ok_or_else(|| {
        ApiError::new(
            axum::http::StatusCode::NOT_FOUND,
            &format!("No commit found for the ref {spec}"),
        )
    })?;
    let tree = r
        .objects
        .commits
        .get(&commit)
        .map(|c| c.tree.clone())
        .ok_or_else(ApiError::not_found)?;
    let path = path.trim_matches('/').to_string();
    let entry = r
        .objects
        .lookup(&tree, &path)
        .ok_or_else(ApiError::not_found)?;
    let item = |p: &str, name: &str, sha: &str, is_dir: bool, size: usize| {
        let kind = if is_dir { "dir" } else { "file" };
        let api = format!("{url}/contents/{p}?ref={spec}");
        let git = format!("{url}/git/{}/{sha}", if is_dir { "trees" } else { "blobs" });
        let html = format!("{}/blob/{spec}/{p}", m.html_base(&url));
        json!({
            "type": kind, "size": size, "name": name, "path": p, "sha": sha,
            "url": api, "git_url": git, "html_url": html,
            "download_url": if is_dir { Value::Null } else { json!(format!("{}/raw/{spec}/{p}", m.html_base(&url))) },
            "_links": {"self": api, "git": git, "html": html},
        })
    };
    if entry.is_tree() {
        let entries = r.objects.trees.get(&entry.sha).cloned().unwrap_or_default();
        let list: Vec<Value> = entries
            .iter()
            .map(|e| {
                let p = if path.is_empty() {
                    e.name.clone()
                } else {
                    format!("{path}/{}", e.name)
                };
                let size = r.objects.blobs.get(&e.sha).map(|b| b.len()).unwrap_or(0);
                item(&p, &e.name, &e.sha, e.is_tree(), size)
            })
            .collect();
        return Ok(Json(Value::Array(list)).into_response());
    }
    let bytes = r
        .objects
        .blobs
        .get(&entry.sha)
        .ok_or_else(ApiError::not_found)?;
    let name = path.rsplit('/').next().unwrap_or(&path);
    let mut v = item(&path, name, &entry.sha, false, bytes.len());
    // GitHub serves contents inline only up to 1 MB; larger files come back
    // with `encoding: none` and must be read through the git blobs API.
    if bytes.len() > INLINE_LIMIT {
        v["encoding"] = json!("none");
        v["content"] = json!("");
    } else {
        v["encoding"] = json!("base64");
        v["content"] = json!(wrapped_base64(bytes));
    }
    Ok(Json(v).into_response())
}

pub async fn get_commit(
    State(st): State<GithubState>,
    Path((owner, repo, spec)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    let url = m.repo_url(&owner, &repo);
    let sha = r
        .resolve(&spec)
        .ok_or_else(|| ApiError::unprocessable(&format!("No commit found for SHA: {spec}")))?;
    let c = r
        .objects
        .commits
        .get(&sha)
        .ok_or_else(ApiError::not_found)?;
    let parent_tree = c
        .parents
        .first()
        .and_then(|p| r.objects.commits.get(p))
        .map(|p| p.tree.clone())
        .unwrap_or_else(|| "4b825dc642cb6eb9a060e54bf8d69288fbee4904".into());
    let mut files = diff_files(&r.objects, &parent_tree, &c.tree);
    link_files(&mut files, &url, &m.html_base(&url), &sha);
    Ok(Json(repo_commit_json(&m, &url, &sha, c, Some(files))).into_response())
}

/// The commits a compare lists when it is not paginated ("Compare two
/// commits": up to 250, ending with the most recent).
const COMPARE_UNPAGED_COMMITS: usize = 250;

/// The changed files a compare lists, for the whole comparison, on its
/// first page only.
const COMPARE_MAX_FILES: usize = 300;

pub async fn compare(
    State(st): State<GithubState>,
    Path((owner, repo, basehead)): Path<(String, String, String)>,
    FullUri(uri): FullUri,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    let url = m.repo_url(&owner, &repo);
    let (base_spec, head_spec) = basehead.split_once("...").ok_or_else(ApiError::not_found)?;
    let base = r.resolve(base_spec).ok_or_else(ApiError::not_found)?;
    let head = r.resolve(head_spec).ok_or_else(ApiError::not_found)?;
    let mb = r
        .objects
        .merge_base(&base, &head)
        .ok_or_else(ApiError::not_found)?;
    let behind_set = r.objects.ancestors(&mb);
    // Oldest first, as GitHub lists a comparison's commits.
    let mut ahead: Vec<String> = r
        .objects
        .history(&head)
        .into_iter()
        .filter(|s| !behind_set.contains(s))
        .collect();
    ahead.reverse();
    let behind = r.objects.commits_between(&mb, &base);
    let status = match (ahead.len(), behind.len()) {
        (0, 0) => "identical",
        (_, 0) => "ahead",
        (0, _) => "behind",
        _ => "diverged",
    };
    let commit_json = |sha: &str| {
        r.objects
            .commits
            .get(sha)
            .map(|c| repo_commit_json(&m, &url, sha, c, None))
            .unwrap_or(Value::Null)
    };
    let query: Vec<(String, String)> = uri
        .query()
        .map(|q| {
            url::form_urlencoded::parse(q.as_bytes())
                .into_owned()
                .collect()
        })
        .unwrap_or_default();
    let get = |k: &str| {
        query
            .iter()
            .find(|(n, _)| n == k)
            .and_then(|(_, v)| v.parse::<usize>().ok())
            .filter(|&n| n > 0)
    };
    let paged = get("page").is_some() || get("per_page").is_some();
    let page = get("page").unwrap_or(1);
    let html = format!("{}/compare/{basehead}", m.html_base(&url));
    let mut body = json!({
        "url": format!("{url}/compare/{basehead}"), "html_url": html,
        "permalink_url": html, "diff_url": format!("{html}.diff"), "patch_url": format!("{html}.patch"),
        "base_commit": commit_json(&base), "merge_base_commit": commit_json(&mb),
        "status": status, "ahead_by": ahead.len(), "behind_by": behind.len(),
        "total_commits": ahead.len(),
    });
    // Paginated, the file list is on the first page only; unpaginated,
    // the response is the first (and only) page.
    if page == 1 {
        let mut files = match (r.objects.commits.get(&mb), r.objects.commits.get(&head)) {
            (Some(a), Some(b)) => diff_files(&r.objects, &a.tree, &b.tree),
            _ => Vec::new(),
        };
        files.truncate(COMPARE_MAX_FILES);
        link_files(&mut files, &url, &m.html_base(&url), &head);
        body["files"] = json!(files);
    }
    if !paged {
        let skip = ahead.len().saturating_sub(COMPARE_UNPAGED_COMMITS);
        body["commits"] = json!(
            ahead[skip..]
                .iter()
                .map(|s| commit_json(s))
                .collect::<Vec<_>>()
        );
        return Ok(Json(body).into_response());
    }
    // The commits page like any list (`per_page` ≤ 100, `Link`), inside
    // the comparison object.
    let commits: Vec<Value> = ahead.iter().map(|s| commit_json(s)).collect();
    let listed = paginate(commits, &m.base_url, &uri, None);
    let (parts, bytes) = listed.into_parts();
    let page_commits: Value = axum::body::to_bytes(bytes, usize::MAX)
        .await
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Array(Vec::new()));
    body["commits"] = page_commits;
    let mut resp = Json(body).into_response();
    if let Some(link) = parts.headers.get(axum::http::header::LINK) {
        resp.headers_mut()
            .insert(axum::http::header::LINK, link.clone());
    }
    Ok(resp)
}

#[derive(Deserialize)]
pub struct CommitsQuery {
    #[serde(default)]
    sha: Option<String>,
    #[serde(default)]
    path: Option<String>,
}

/// `GET commits?sha=&path=`: the commits reachable from `sha` (default
/// branch when absent), newest first, keeping with `path` only those that
/// change it from their first parent (GitHub's default history
/// simplification, for linear history), paginated.
pub async fn list_commits(
    State(st): State<GithubState>,
    Path((owner, repo)): Path<(String, String)>,
    Query(q): Query<CommitsQuery>,
    FullUri(uri): FullUri,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    let url = m.repo_url(&owner, &repo);
    let spec = q.sha.clone().unwrap_or_else(|| r.default_branch.clone());
    let head = r.resolve(&spec).ok_or_else(ApiError::not_found)?;
    let blob_at = |commit: &str, path: &str| {
        r.objects
            .commits
            .get(commit)
            .and_then(|c| r.objects.flatten(&c.tree).remove(path))
            .map(|(_, sha)| sha)
    };
    let items: Vec<Value> = r
        .objects
        .history(&head)
        .into_iter()
        .filter(|sha| match &q.path {
            None => true,
            Some(path) => {
                let parent = r.objects.commits.get(sha).and_then(|c| c.parents.first());
                blob_at(sha, path) != parent.and_then(|p| blob_at(p, path))
            }
        })
        .filter_map(|sha| {
            r.objects
                .commits
                .get(&sha)
                .map(|c| repo_commit_json(&m, &url, &sha, c, None))
        })
        .collect();
    Ok(paginate(items, &m.base_url, &uri, None))
}
