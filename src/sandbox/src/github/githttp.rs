//! Git over HTTP at the repositories' `clone_url`s
//! (`/_html/<owner>/<name>.git`), so `git clone` and `git fetch` work
//! against the simulator. GitHub speaks git's smart protocol; this serves
//! the "dumb" one (`info/refs`, `HEAD`, loose objects), which every git
//! client falls back to when a server does not advertise the smart one.
//! The objects are the simulator's own, hashed as git hashes them, so a
//! fetched commit has the sha the REST API shows. Read-only: pushes go
//! through the REST API.

use std::io::Write as _;

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::state::GithubState;

/// The git routes, nested under `/_html` beside the pages.
pub fn router() -> axum::Router<GithubState> {
    use axum::routing::get;
    axum::Router::new()
        .route("/{owner}/{repo}/info/refs", get(info_refs))
        .route("/{owner}/{repo}/HEAD", get(head))
        .route("/{owner}/{repo}/objects/{dir}/{file}", get(object))
}

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "not found").into_response()
}

/// `name.git` → `name`; anything else is not a git URL.
fn git_name(repo: &str) -> Option<&str> {
    repo.strip_suffix(".git")
}

/// Every branch and tag, `<sha>\t<ref>` per line, sorted by name (what
/// `git update-server-info` writes). Claim and recovery refs are branches
/// too, as on GitHub.
async fn info_refs(
    State(st): State<GithubState>,
    Path((owner, repo)): Path<(String, String)>,
) -> Response {
    let Some(name) = git_name(&repo) else {
        return not_found();
    };
    let m = st.lock().await;
    let Ok(r) = m.repo(&owner, name) else {
        return not_found();
    };
    let mut body = String::new();
    for (full, sha) in &r.refs {
        if full.starts_with("refs/heads/") || full.starts_with("refs/tags/") {
            body.push_str(&format!("{sha}\t{full}\n"));
        }
    }
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

async fn head(
    State(st): State<GithubState>,
    Path((owner, repo)): Path<(String, String)>,
) -> Response {
    let Some(name) = git_name(&repo) else {
        return not_found();
    };
    let m = st.lock().await;
    let Ok(r) = m.repo(&owner, name) else {
        return not_found();
    };
    (
        [(header::CONTENT_TYPE, "text/plain")],
        format!("ref: refs/heads/{}\n", r.default_branch),
    )
        .into_response()
}

/// A loose object (`objects/ab/cdef…`: zlib over `<type> <len>\0<payload>`),
/// or the empty pack list (`objects/info/packs`: every object is loose).
async fn object(
    State(st): State<GithubState>,
    Path((owner, repo, dir, file)): Path<(String, String, String, String)>,
) -> Response {
    let Some(name) = git_name(&repo) else {
        return not_found();
    };
    if dir == "info" {
        return if file == "packs" {
            ([(header::CONTENT_TYPE, "text/plain")], "").into_response()
        } else {
            not_found()
        };
    }
    let sha = format!("{dir}{file}");
    if !super::git::is_sha(&sha) {
        return not_found();
    }
    let m = st.lock().await;
    let Ok(r) = m.repo(&owner, name) else {
        return not_found();
    };
    let Some((kind, payload)) = r.objects.raw(&sha) else {
        return not_found();
    };
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    let written = z
        .write_all(format!("{kind} {}\0", payload.len()).as_bytes())
        .and_then(|()| z.write_all(&payload));
    match written.and_then(|()| z.finish()) {
        Ok(bytes) => (
            [(header::CONTENT_TYPE, "application/x-git-loose-object")],
            bytes,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}
