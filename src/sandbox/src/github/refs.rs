//! Git references: the compare-and-swap primitives claims are built on.
//! Creating an existing ref and a non-forced, non-fast-forward update both
//! answer 422 exactly like GitHub.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde::Deserialize;
use serde_json::{Value, json};

use super::graphql::{FieldAnswer, Refusal, field_error, no_push};
use super::http::{ApiError, Caller, FullUri, paginate};
use super::state::{GithubState, Model, Permission, Repo};

fn ref_json(m: &Model, r: &Repo, name: &str, sha: &str) -> Value {
    let url = m.repo_url(&r.owner, &r.name);
    json!({
        "ref": name,
        "node_id": format!("REF_{}", hex::encode(name.as_bytes())),
        "url": format!("{url}/git/{name}"),
        "object": {"sha": sha, "type": "commit", "url": format!("{url}/git/commits/{sha}")},
    })
}

fn full_name(name: &str) -> String {
    let name = name.trim_start_matches('/');
    if name.starts_with("refs/") {
        name.to_string()
    } else {
        format!("refs/{name}")
    }
}

/// A ref name git would accept (the subset GitHub checks up front).
fn valid_ref(name: &str) -> bool {
    name.starts_with("refs/")
        && name.matches('/').count() >= 2
        && !name.ends_with('/')
        && !name.ends_with(".lock")
        && !name.contains("..")
        && !name.contains("//")
        && !name.contains("@{")
        && !name
            .chars()
            .any(|c| c.is_control() || " ~^:?*[\\".contains(c))
}

pub async fn get_ref(
    State(st): State<GithubState>,
    Path((owner, repo, name)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    let full = full_name(&name);
    let sha = r.refs.get(&full).ok_or_else(ApiError::not_found)?;
    Ok(Json(ref_json(&m, r, &full, sha)).into_response())
}

pub async fn matching_refs(
    State(st): State<GithubState>,
    Path((owner, repo, prefix)): Path<(String, String, String)>,
    FullUri(uri): FullUri,
) -> Result<Response, ApiError> {
    let m = st.lock().await;
    let r = m.repo(&owner, &repo)?;
    let prefix = full_name(&prefix);
    let items: Vec<Value> = r
        .refs
        .iter()
        .filter(|(n, _)| n.starts_with(&prefix))
        .map(|(n, s)| ref_json(&m, r, n, s))
        .collect();
    Ok(paginate(items, &m.base_url, &uri, None))
}

#[derive(Deserialize)]
pub struct CreateRef {
    #[serde(rename = "ref")]
    name: String,
    sha: String,
}

/// A branch moved from `before` (`None` when created) to `after`: the
/// `push` and, for open PRs from that branch, `synchronize` events of the
/// repository's workflow files.
pub(super) fn branch_moved(
    m: &mut Model,
    owner: &str,
    repo: &str,
    full: &str,
    before: Option<&str>,
    after: &str,
    sender: &str,
) -> Result<(), ApiError> {
    let Some(branch) = full.strip_prefix("refs/heads/") else {
        return Ok(());
    };
    let r = m.repo(owner, repo)?;
    let default_branch = r.default_branch == branch;
    let pulls: Vec<u64> = r
        .pulls
        .values()
        .filter(|p| p.open && p.head_ref == branch)
        .map(|p| p.number)
        .collect();
    if default_branch {
        super::workflow_events::register_files(m, owner, repo, after)?;
    }
    if let Some(before) = before {
        super::workflow_events::push_event(m, owner, repo, full, before, after, sender)?;
    }
    for number in pulls {
        super::workflow_events::pull_request_event(
            m,
            owner,
            repo,
            number,
            "synchronize",
            None,
            sender,
        )?;
    }
    Ok(())
}

/// Why a ref cannot be created.
enum NotCreated {
    InvalidName,
    NoObject,
    Exists,
}

/// Creates ref `name` at commit `sha` of `owner/repo`, with the events of
/// a created branch: the one rule behind REST's `POST git/refs` and
/// GraphQL's `createRef`.
fn create_in(
    m: &mut Model,
    owner: &str,
    repo: &str,
    name: &str,
    sha: &str,
    sender: &str,
) -> Result<Result<(), NotCreated>, ApiError> {
    let r = m.repo_mut(owner, repo)?;
    if !valid_ref(name) {
        return Ok(Err(NotCreated::InvalidName));
    }
    if !r.objects.commits.contains_key(sha) {
        return Ok(Err(NotCreated::NoObject));
    }
    if r.refs.contains_key(name) {
        return Ok(Err(NotCreated::Exists));
    }
    r.set_ref(name, sha);
    branch_moved(m, owner, repo, name, None, sha, sender)?;
    Ok(Ok(()))
}

pub async fn create_ref(
    State(st): State<GithubState>,
    caller: Caller,
    Path((owner, repo)): Path<(String, String)>,
    Json(body): Json<CreateRef>,
) -> Result<Response, ApiError> {
    let mut m = st.lock().await;
    let sender = caller.login().unwrap_or("web-flow").to_string();
    match create_in(&mut m, &owner, &repo, &body.name, &body.sha, &sender)? {
        Ok(()) => {}
        Err(NotCreated::InvalidName) => {
            return Err(ApiError::unprocessable(&format!(
                "{} is not a valid ref name.",
                body.name
            )));
        }
        Err(NotCreated::NoObject) => return Err(ApiError::unprocessable("Object does not exist")),
        Err(NotCreated::Exists) => {
            return Err(ApiError::unprocessable("Reference already exists"));
        }
    }
    let r = m.repo(&owner, &repo)?;
    Ok((
        StatusCode::CREATED,
        Json(ref_json(&m, r, &body.name, &body.sha)),
    )
        .into_response())
}

/// GraphQL `createRef`'s input: the repository by node id (`R_<id>` here,
/// as `node_id` in repository JSON), the fully qualified ref name and the
/// object it points at.
pub(super) struct GraphqlRef {
    repository: String,
    name: String,
    oid: String,
}

/// The input checked against the schema (`CreateRefInput`).
pub(super) fn graphql_input(input: &Value) -> Result<GraphqlRef, Refusal> {
    let field = |name: &str| input[name].as_str().map(str::to_owned);
    match (field("repositoryId"), field("name"), field("oid")) {
        (Some(repository), Some(name), Some(oid)) => Ok(GraphqlRef {
            repository,
            name,
            oid: oid.to_ascii_lowercase(),
        }),
        _ => Err(Refusal::Request(json!({
            "message": "Variable $input of type CreateRefInput! was provided invalid value \
                        (repositoryId, name and oid are required)",
            "locations": [],
            "extensions": {"code": "variableMismatch"},
        }))),
    }
}

/// GraphQL `createRef`: the same ref REST creates, answered as GitHub's
/// `CreateRefPayload` (`ref { id name prefix target { oid } }`, `name`
/// without its prefix).
pub(super) async fn create_by_graphql(
    st: &GithubState,
    login: &str,
    input: GraphqlRef,
) -> Result<FieldAnswer, ApiError> {
    let mut m = st.lock().await;
    let Some((owner, repo)) = m
        .repos
        .values()
        .find(|r| r.node_id() == input.repository)
        .map(|r| (r.owner.clone(), r.name.clone()))
    else {
        return Ok(Err(field_error(
            &format!(
                "Could not resolve to a node with the global id of '{}'",
                input.repository
            ),
            Some("NOT_FOUND"),
        )));
    };
    if m.repo(&owner, &repo)?.permission_of(login) < Permission::Write {
        return Ok(Err(no_push(login)));
    }
    let refused = |message: String| Ok(Err(field_error(&message, Some("UNPROCESSABLE"))));
    match create_in(&mut m, &owner, &repo, &input.name, &input.oid, login)? {
        Ok(()) => {}
        Err(NotCreated::InvalidName) => {
            return refused(format!("Invalid ref name \"{}\".", input.name));
        }
        Err(NotCreated::NoObject) => {
            return refused(format!("Object {} does not exist.", input.oid));
        }
        Err(NotCreated::Exists) => {
            return refused(format!(
                "A ref named \"{}\" already exists in the repository.",
                input.name
            ));
        }
    }
    let (prefix, short) = match input.name.strip_prefix("refs/heads/") {
        Some(short) => ("refs/heads/", short),
        None => match input.name.strip_prefix("refs/tags/") {
            Some(short) => ("refs/tags/", short),
            None => ("refs/", input.name.trim_start_matches("refs/")),
        },
    };
    Ok(Ok(json!({"ref": {
        "id": format!("REF_{}", hex::encode(input.name.as_bytes())),
        "name": short, "prefix": prefix,
        "target": {"oid": input.oid},
    }})))
}

#[derive(Deserialize)]
pub struct UpdateRef {
    sha: String,
    #[serde(default)]
    force: bool,
}

pub async fn update_ref(
    State(st): State<GithubState>,
    caller: Caller,
    Path((owner, repo, name)): Path<(String, String, String)>,
    Json(body): Json<UpdateRef>,
) -> Result<Response, ApiError> {
    let mut m = st.lock().await;
    let r = m.repo_mut(&owner, &repo)?;
    let full = full_name(&name);
    let current = r
        .refs
        .get(&full)
        .cloned()
        .ok_or_else(|| ApiError::unprocessable("Reference does not exist"))?;
    if !r.objects.commits.contains_key(&body.sha) {
        return Err(ApiError::unprocessable("Object does not exist"));
    }
    if !body.force && !r.objects.is_ancestor(&current, &body.sha) {
        return Err(ApiError::unprocessable("Update is not a fast forward"));
    }
    r.set_ref(&full, &body.sha);
    if current != body.sha {
        let sender = caller.login().unwrap_or("web-flow").to_string();
        branch_moved(
            &mut m,
            &owner,
            &repo,
            &full,
            Some(&current),
            &body.sha,
            &sender,
        )?;
    }
    let r = m.repo(&owner, &repo)?;
    Ok(Json(ref_json(&m, r, &full, &body.sha)).into_response())
}

pub async fn delete_ref(
    State(st): State<GithubState>,
    Path((owner, repo, name)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let mut m = st.lock().await;
    let r = m.repo_mut(&owner, &repo)?;
    let full = full_name(&name);
    if r.refs.remove(&full).is_none() {
        return Err(ApiError::unprocessable("Reference does not exist"));
    }
    // GitHub closes open pull requests whose head branch disappears.
    if let Some(branch) = full.strip_prefix("refs/heads/") {
        let now = Utc::now();
        for p in r
            .pulls
            .values_mut()
            .filter(|p| p.open && p.head_ref == branch)
        {
            p.open = false;
            p.closed_at = Some(now);
            p.updated_at = now;
        }
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use super::valid_ref;

    #[test]
    fn ref_names_are_checked_like_git() {
        assert!(valid_ref("refs/heads/klaud/claim-d92e15065c55779d"));
        assert!(!valid_ref("heads/x"));
        assert!(!valid_ref("refs/heads"));
        assert!(!valid_ref("refs/heads/a..b"));
        assert!(!valid_ref("refs/heads/a b"));
        assert!(!valid_ref("refs/heads/x.lock"));
    }
}
