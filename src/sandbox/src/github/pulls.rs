//! Pull requests: create (draft allowed, one open PR per head), get, list
//! with `head`/`state`/`base` filters, update, changed files, and merge.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde::Deserialize;
use serde_json::{Value, json};

use super::git::{diff_files, link_files};
use super::http::{ApiError, Caller, FullUri, paginate};
use super::state::{GithubState, Pull};

#[derive(Deserialize)]
pub struct CreatePull {
    title: String,
    head: String,
    base: String,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    draft: bool,
}

pub async fn create(
    State(st): State<GithubState>,
    caller: Caller,
    Path((owner, repo)): Path<(String, String)>,
    Json(body): Json<CreatePull>,
) -> Result<Response, ApiError> {
    let login = caller.require()?.to_string();
    let mut m = st.lock().await;
    let id = m.id();
    let r = m.repo_mut(&owner, &repo)?;
    let head = match body.head.split_once(':') {
        Some((o, b)) if o.eq_ignore_ascii_case(&r.owner) => b.to_string(),
        Some(_) => {
            // Forks are not simulated: Klaud only opens same-repository PRs.
            return Err(ApiError::validation(
                json!({"resource": "PullRequest", "field": "head", "code": "invalid"}),
            ));
        }
        None => body.head.clone(),
    };
    let head_sha = r
        .refs
        .get(&format!("refs/heads/{head}"))
        .cloned()
        .ok_or_else(|| {
            ApiError::validation(
                json!({"resource": "PullRequest", "field": "head", "code": "invalid"}),
            )
        })?;
    let base_sha = r
        .refs
        .get(&format!("refs/heads/{}", body.base))
        .cloned()
        .ok_or_else(|| {
            ApiError::validation(
                json!({"resource": "PullRequest", "field": "base", "code": "invalid"}),
            )
        })?;
    if body.title.trim().is_empty() {
        return Err(ApiError::validation(
            json!({"resource": "PullRequest", "field": "title", "code": "missing_field"}),
        ));
    }
    if r.pulls
        .values()
        .any(|p| p.open && p.head_ref == head && p.base_ref == body.base)
    {
        return Err(ApiError::validation(json!({
            "resource": "PullRequest", "code": "custom",
            "message": format!("A pull request already exists for {}:{head}.", r.owner),
        })));
    }
    if r.objects.is_ancestor(&head_sha, &base_sha) {
        return Err(ApiError::validation(json!({
            "resource": "PullRequest", "code": "custom",
            "message": format!("No commits between {} and {head}", body.base),
        })));
    }
    let number = r.next_number;
    r.next_number += 1;
    let now = Utc::now();
    let pull = Pull {
        number,
        id,
        title: body.title,
        body: body.body,
        open: true,
        draft: body.draft,
        head_ref: head,
        head_sha,
        base_ref: body.base,
        user: login,
        labels: Vec::new(),
        created_at: now,
        updated_at: now,
        closed_at: None,
        closed_by: None,
        merged: None,
        mergeability: None,
    };
    let sender = pull.user.clone();
    r.pulls.insert(number, pull);
    super::workflow_events::pull_request_event(
        &mut m, &owner, &repo, number, "opened", None, &sender,
    )?;
    let r = m.repo(&owner, &repo)?;
    let p = r.pulls.get(&number).ok_or_else(ApiError::not_found)?;
    Ok((StatusCode::CREATED, Json(m.pull_json(r, p))).into_response())
}

fn parse_number(n: &str) -> Result<u64, ApiError> {
    n.parse().map_err(|_| ApiError::not_found())
}

pub async fn get(
    State(st): State<GithubState>,
    Path((owner, repo, number)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let number = parse_number(&number)?;
    let mut m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    let p = r.pulls.get(&number).ok_or_else(ApiError::not_found)?;
    let body = m.pull_json(r, p);
    // GitHub answers `null` to the first read after the base or the head
    // moved and computes mergeability in the background; the read after
    // that gets the value.
    m.repo_mut(&owner, &repo)?.ask_mergeability(number);
    Ok(Json(body).into_response())
}

#[derive(Deserialize, Default)]
pub struct ListQuery {
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    head: Option<String>,
    #[serde(default)]
    base: Option<String>,
    #[serde(default)]
    direction: Option<String>,
    #[serde(default)]
    sort: Option<String>,
}

pub async fn list(
    State(st): State<GithubState>,
    Path((owner, repo)): Path<(String, String)>,
    Query(q): Query<ListQuery>,
    FullUri(uri): FullUri,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    let state = q.state.as_deref().unwrap_or("open");
    if !["open", "closed", "all"].contains(&state) {
        return Err(ApiError::validation(
            json!({"resource": "PullRequest", "field": "state", "code": "invalid"}),
        ));
    }
    // `head` must be `owner:branch`; GitHub ignores a bare branch name.
    let head = q.head.as_deref().and_then(|h| h.split_once(':'));
    let mut pulls: Vec<&Pull> = r
        .pulls
        .values()
        .filter(|p| match state {
            "open" => p.open,
            "closed" => !p.open,
            _ => true,
        })
        .filter(|p| head.is_none_or(|(o, b)| o.eq_ignore_ascii_case(&r.owner) && p.head_ref == b))
        .filter(|p| q.base.as_deref().is_none_or(|b| p.base_ref == b))
        .collect();
    // GitHub sorts by `created` unless asked for `updated` (ties by number).
    if q.sort.as_deref() == Some("updated") {
        pulls.sort_by_key(|p| (p.updated_at, p.number));
    }
    if q.direction.as_deref() != Some("asc") {
        pulls.reverse();
    }
    let items: Vec<Value> = pulls.into_iter().map(|p| m.pull_list_json(r, p)).collect();
    Ok(paginate(items, &m.base_url, &uri, None))
}

#[derive(Deserialize)]
pub struct UpdatePull {
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    base: Option<String>,
}

pub async fn update(
    State(st): State<GithubState>,
    caller: Caller,
    Path((owner, repo, number)): Path<(String, String, String)>,
    Json(body): Json<UpdatePull>,
) -> Result<Response, ApiError> {
    let number = parse_number(&number)?;
    let mut m = st.lock().await;
    let r = m.repo_mut(&owner, &repo)?;
    let head_exists = {
        let p = r.pulls.get(&number).ok_or_else(ApiError::not_found)?;
        r.refs.contains_key(&format!("refs/heads/{}", p.head_ref))
    };
    if let Some(b) = &body.base
        && !r.refs.contains_key(&format!("refs/heads/{b}"))
    {
        return Err(ApiError::validation(
            json!({"resource": "PullRequest", "field": "base", "code": "invalid"}),
        ));
    }
    let p = r.pulls.get_mut(&number).ok_or_else(ApiError::not_found)?;
    let now = Utc::now();
    if let Some(t) = body.title {
        p.title = t;
    }
    if let Some(b) = body.body {
        p.body = Some(b);
    }
    if let Some(b) = body.base {
        p.base_ref = b;
    }
    match body.state.as_deref() {
        None => {}
        Some("closed") if p.open => {
            p.open = false;
            p.closed_at = Some(now);
            p.closed_by = caller.login().map(str::to_owned);
        }
        Some("open") if !p.open => {
            if p.merged.is_some() {
                return Err(ApiError::unprocessable(
                    "state cannot be changed. The pull request cannot be reopened.",
                ));
            }
            if !head_exists {
                return Err(ApiError::unprocessable(
                    "Cannot reopen a pull request whose head branch was deleted",
                ));
            }
            p.open = true;
            p.closed_at = None;
            p.closed_by = None;
        }
        Some("open") | Some("closed") => {}
        Some(_) => {
            return Err(ApiError::validation(
                json!({"resource": "PullRequest", "field": "state", "code": "invalid"}),
            ));
        }
    }
    p.updated_at = now;
    let r = m.repo(&owner, &repo)?;
    let p = r.pulls.get(&number).ok_or_else(ApiError::not_found)?;
    Ok(Json(m.pull_json(r, p)).into_response())
}

pub async fn files(
    State(st): State<GithubState>,
    Path((owner, repo, number)): Path<(String, String, String)>,
    FullUri(uri): FullUri,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    let p = r
        .pulls
        .get(&parse_number(&number)?)
        .ok_or_else(ApiError::not_found)?;
    let base = r.resolve(&p.base_ref).unwrap_or_default();
    let items = match r.objects.merge_base(&base, &p.head_sha) {
        Some(mb) => match (
            r.objects.commits.get(&mb),
            r.objects.commits.get(&p.head_sha),
        ) {
            (Some(a), Some(b)) => diff_files(&r.objects, &a.tree, &b.tree),
            _ => Vec::new(),
        },
        None => Vec::new(),
    };
    let mut items = items;
    let url = m.repo_url(&owner, &repo);
    link_files(&mut items, &url, &m.html_base(&url), &p.head_sha);
    Ok(paginate(items, &m.base_url, &uri, None))
}

#[derive(Deserialize, Default)]
pub struct MergePull {
    #[serde(default)]
    commit_title: Option<String>,
    #[serde(default)]
    commit_message: Option<String>,
    #[serde(default)]
    sha: Option<String>,
    #[serde(default)]
    merge_method: Option<String>,
}

/// `PUT /repos/{owner}/{repo}/pulls/{number}/merge` as GitHub documents
/// it: 200 `{sha, merged, message}`; 405 when the PR cannot be merged
/// (closed, a draft, or changes that conflict with the base); 409 when
/// `sha` is not the head; 403 without write permission. A merge commit
/// (method `merge`) or one commit on the base (`squash`, `rebase`) moves
/// the base branch; the PR then reads closed and merged. Whether it
/// conflicts is the same three-way merge `mergeable` reports
/// ([`super::merge`]).
pub async fn merge(
    State(st): State<GithubState>,
    caller: Caller,
    Path((owner, repo, number)): Path<(String, String, String)>,
    body: Option<Json<MergePull>>,
) -> Result<Response, ApiError> {
    let number = parse_number(&number)?;
    let body = body.map(|Json(b)| b).unwrap_or_default();
    let login = caller.require()?.to_string();
    let method = body.merge_method.as_deref().unwrap_or("merge");
    if !["merge", "squash", "rebase"].contains(&method) {
        return Err(ApiError::validation(
            json!({"resource": "PullRequest", "field": "merge_method", "code": "invalid"}),
        ));
    }
    let mut m = st.lock().await;
    let sig = m.signature_of(Some(&login));
    let r = m.repo_mut(&owner, &repo)?;
    if r.permission_of(&login) < super::state::Permission::Write {
        return Err(ApiError::forbidden(
            "Resource not accessible by personal access token",
        ));
    }
    let p = r
        .pulls
        .get(&number)
        .ok_or_else(ApiError::not_found)?
        .clone();
    let not_mergeable = || {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "Pull Request is not mergeable",
        )
    };
    if !p.open || p.merged.is_some() {
        return Err(not_mergeable());
    }
    if p.draft {
        return Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "Pull Request is still a draft",
        ));
    }
    if body.sha.as_deref().is_some_and(|s| s != p.head_sha) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "Head branch was modified. Review and try the merge again.",
        ));
    }
    let base_ref = format!("refs/heads/{}", p.base_ref);
    let base = r.refs.get(&base_ref).cloned().ok_or_else(not_mergeable)?;
    let mb = r
        .objects
        .merge_base(&base, &p.head_sha)
        .ok_or_else(not_mergeable)?;
    let merged = match super::merge::merge_commits(&r.objects, &mb, &base, &p.head_sha) {
        Some(super::merge::TreeMerge::Clean(merged)) => merged,
        _ => return Err(not_mergeable()),
    };
    let merged: std::collections::BTreeMap<String, (String, String)> = merged
        .into_iter()
        .map(|(path, entry)| {
            let entry = match entry {
                super::merge::Merged::Existing(e) => e,
                super::merge::Merged::Content { mode, bytes } => (mode, r.objects.put_blob(bytes)),
            };
            (path, entry)
        })
        .collect();
    let tree = r.objects.build_tree(&merged);
    let title = body.commit_title.unwrap_or_else(|| match method {
        "merge" => format!(
            "Merge pull request #{number} from {}/{}",
            r.owner, p.head_ref
        ),
        _ => format!("{} (#{number})", p.title),
    });
    let message = match body.commit_message {
        Some(extra) if !extra.is_empty() => format!("{title}\n\n{extra}"),
        _ => title,
    };
    let parents = if method == "merge" {
        vec![base.clone(), p.head_sha.clone()]
    } else {
        vec![base.clone()]
    };
    let sha = r.objects.put_commit(super::git::CommitObj {
        tree,
        parents,
        author: sig.clone(),
        committer: sig,
        message,
    });
    r.set_ref(&base_ref, &sha);
    let now = Utc::now();
    let default_branch = r.default_branch == p.base_ref;
    if let Some(p) = r.pulls.get_mut(&number) {
        p.open = false;
        p.closed_at = Some(now);
        p.closed_by = Some(login.clone());
        p.updated_at = now;
        p.merged = Some(super::state::Merged {
            at: now,
            by: login.clone(),
            sha: sha.clone(),
        });
    }
    if default_branch {
        super::workflow_events::register_files(&mut m, &owner, &repo, &sha)?;
    }
    super::workflow_events::push_event(&mut m, &owner, &repo, &base_ref, &base, &sha, &login)?;
    Ok(Json(json!({
        "sha": sha,
        "merged": true,
        "message": "Pull Request successfully merged",
    }))
    .into_response())
}

/// `GET /repos/{o}/{r}/pulls/{n}/commits`: the PR's commits in the
/// `repos/{o}/{r}/commits` shape, oldest first, paginated.
pub async fn commits(
    State(st): State<GithubState>,
    Path((owner, repo, number)): Path<(String, String, String)>,
    FullUri(uri): FullUri,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    let p = r
        .pulls
        .get(&parse_number(&number)?)
        .ok_or_else(ApiError::not_found)?;
    let url = m.repo_url(&owner, &repo);
    let items: Vec<Value> = r
        .pull_commit_shas(p)
        .into_iter()
        .filter_map(|sha| {
            let c = r.objects.commits.get(&sha)?;
            Some(super::git::repo_commit_json(&m, &url, &sha, c, None))
        })
        .collect();
    Ok(paginate(items, &m.base_url, &uri, None))
}

/// `GET /repos/{o}/{r}/commits/{sha}/pulls`: the PRs a commit belongs to —
/// the merged PR whose merge (or squash) commit it is, and the open or
/// merged PRs that have it among their commits — newest first, paginated.
pub async fn pulls_of_commit(
    State(st): State<GithubState>,
    Path((owner, repo, spec)): Path<(String, String, String)>,
    FullUri(uri): FullUri,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    let sha = r
        .resolve(&spec)
        .ok_or_else(|| ApiError::unprocessable(&format!("No commit found for SHA: {spec}")))?;
    let items: Vec<Value> = r
        .pulls
        .values()
        .rev()
        .filter(|p| p.open || p.merged.is_some())
        .filter(|p| {
            p.merged.as_ref().is_some_and(|x| x.sha == sha) || r.pull_commit_shas(p).contains(&sha)
        })
        .map(|p| m.pull_json(r, p))
        .collect();
    Ok(paginate(items, &m.base_url, &uri, None))
}
