//! GraphQL `createCommitOnBranch`, as GitHub documents it
//! (docs.github.com/graphql/reference/mutations#createcommitonbranch): one
//! commit whose only parent is the branch's head, made of that head's tree
//! with `fileChanges` applied, and the branch moved to it, in one atomic
//! request. `expectedHeadOid` is a compare-and-swap: a branch that is
//! elsewhere is left untouched and the answer is a `STALE_DATA` error
//! (HTTP 200, the field `null`) with GitHub's words. Run as one field of a
//! mutation document ([`super::mutation`]): after a `createRef` of the
//! same document it finds the branch that one created.
//! The author is the credential's owner (the mutation takes no author or
//! committer); the committer is GitHub's, as for commits made on the web.
//! The branch is named by `repositoryNameWithOwner` and `branchName`, with
//! or without `refs/heads/`; addressing it by node id is not simulated.
//! Moving the branch has the effects a REST ref update has (`push`,
//! `pull_request: synchronize`).
//!
//! The answer carries every field Klaud selects (`oid`, `message`,
//! `tree { oid }`, `parents`, `url`); the simulator does not evaluate
//! selection sets.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};

use super::git::{CommitObj, MODE_FILE, Signature, is_sha};
use super::graphql::{FieldAnswer, Refusal, field_error, no_push};
use super::http::ApiError;
use super::state::{GithubState, Permission};

/// A refusal GitHub gives when the field runs (`data.createCommitOnBranch`
/// is then `null`).
fn refused(message: &str, kind: Option<&str>) -> Refusal {
    Refusal::Field(field_error(message, kind))
}

/// GraphQL's words for an input that does not fit the schema: the whole
/// document is refused before anything runs.
fn invalid(field: &str, why: &str) -> Refusal {
    let m = format!(
        "Variable $input of type CreateCommitOnBranchInput! was provided invalid value for {field} ({why})"
    );
    Refusal::Request(
        json!({"message": m, "locations": [], "extensions": {"code": "variableMismatch"}}),
    )
}

/// The input, checked against the schema before anything is looked up.
pub(super) struct Input {
    owner: String,
    name: String,
    branch: String,
    expected: String,
    message: String,
    additions: Vec<(String, Vec<u8>)>,
    deletions: Vec<String>,
}

/// A repository-relative file path GitHub would accept.
fn clean_path(raw: &str) -> Option<String> {
    let path = raw.trim_matches('/');
    let bad = path.is_empty()
        || path
            .split('/')
            .any(|p| p.is_empty() || p == "." || p == ".." || p == ".git");
    (!bad).then(|| path.to_owned())
}

// Kept whole (about 70 lines): one field after the other, each with the
// error GraphQL gives when it does not fit.
pub(super) fn parse_input(input: &Value) -> Result<Input, Refusal> {
    if !input.is_object() {
        return Err(invalid("input", "Expected value to not be null"));
    }
    let branch = &input["branch"];
    let (Some(full_name), Some(branch_name)) = (
        branch["repositoryNameWithOwner"].as_str(),
        branch["branchName"].as_str(),
    ) else {
        return Err(invalid(
            "branch",
            "repositoryNameWithOwner and branchName are required by this simulator",
        ));
    };
    let Some((owner, name)) = full_name.split_once('/') else {
        return Err(refused(
            &format!("Could not resolve to a Repository with the name '{full_name}'."),
            Some("NOT_FOUND"),
        ));
    };
    let expected = match input["expectedHeadOid"].as_str() {
        Some(s) if is_sha(s) => s.to_ascii_lowercase(),
        Some(s) => {
            return Err(invalid(
                "expectedHeadOid",
                &format!("{s:?} is not a valid GitObjectID"),
            ));
        }
        None => return Err(invalid("expectedHeadOid", "Expected value to not be null")),
    };
    let Some(headline) = input["message"]["headline"].as_str() else {
        return Err(invalid("message.headline", "Expected value to not be null"));
    };
    if headline.trim().is_empty() || headline.contains('\n') {
        return Err(refused(
            "A commit message headline must be one non-empty line",
            Some("UNPROCESSABLE"),
        ));
    }
    // GitHub joins the headline and the body with a blank line.
    let message = match input["message"]["body"].as_str() {
        Some(body) if !body.is_empty() => format!("{headline}\n\n{body}"),
        _ => headline.to_owned(),
    };
    let changes = &input["fileChanges"];
    let mut additions = Vec::new();
    for a in changes["additions"].as_array().into_iter().flatten() {
        let (Some(raw), Some(contents)) = (a["path"].as_str(), a["contents"].as_str()) else {
            return Err(invalid(
                "fileChanges.additions",
                "path and contents are required",
            ));
        };
        let path = clean_path(raw)
            .ok_or_else(|| refused(&format!("Invalid path {raw:?}"), Some("UNPROCESSABLE")))?;
        let bytes = B64
            .decode(contents.replace(['\n', '\r'], ""))
            .map_err(|_| {
                invalid(
                    "fileChanges.additions.contents",
                    "Base64String is not valid base64",
                )
            })?;
        additions.push((path, bytes));
    }
    let mut deletions = Vec::new();
    for d in changes["deletions"].as_array().into_iter().flatten() {
        let Some(raw) = d["path"].as_str() else {
            return Err(invalid("fileChanges.deletions", "path is required"));
        };
        let path = clean_path(raw)
            .ok_or_else(|| refused(&format!("Invalid path {raw:?}"), Some("UNPROCESSABLE")))?;
        deletions.push(path);
    }
    Ok(Input {
        owner: owner.to_owned(),
        name: name.to_owned(),
        branch: branch_name
            .strip_prefix("refs/heads/")
            .unwrap_or(branch_name)
            .to_owned(),
        expected,
        message,
        additions,
        deletions,
    })
}

/// Answers the mutation for `login`.
// Kept whole (about 80 lines): the checks, the commit and the ref move
// happen under one lock, which is what makes the mutation atomic.
pub(super) async fn create(
    st: &GithubState,
    login: &str,
    input: Input,
) -> Result<FieldAnswer, ApiError> {
    let mut m = st.lock().await;
    let author = m.signature_of(Some(login));
    let base = m.repo_url(&input.owner, &input.name);
    let Ok(r) = m.repo_mut(&input.owner, &input.name) else {
        return Ok(Err(field_error(
            &format!(
                "Could not resolve to a Repository with the name '{}/{}'.",
                input.owner, input.name
            ),
            Some("NOT_FOUND"),
        )));
    };
    if r.permission_of(login) < Permission::Write {
        return Ok(Err(no_push(login)));
    }
    let full = format!("refs/heads/{}", input.branch);
    let Some(head) = r.refs.get(&full).cloned() else {
        return Ok(Err(field_error(
            &format!("A branch named '{}' could not be found.", input.branch),
            Some("NOT_FOUND"),
        )));
    };
    if head != input.expected {
        return Ok(Err(field_error(
            &format!(
                "Expected branch to point to \"{}\" but it did not.  Pull and try again.",
                input.expected
            ),
            Some("STALE_DATA"),
        )));
    }
    let Some(parent_tree) = r.objects.commits.get(&head).map(|c| c.tree.clone()) else {
        return Err(ApiError::not_found());
    };
    let mut files: BTreeMap<String, (String, String)> = r.objects.flatten(&parent_tree);
    for path in &input.deletions {
        let prefix = format!("{path}/");
        files.retain(|p, _| p != path && !p.starts_with(&prefix));
    }
    // Applied after the deletions: a path in both lists is written.
    // Every addition is a regular file: GitHub's mutation takes no mode
    // and writes an executable file it replaces as 100644 too.
    for (path, bytes) in input.additions {
        let sha = r.objects.put_blob(bytes);
        files.insert(path, (MODE_FILE.to_owned(), sha));
    }
    let tree = r.objects.build_tree(&files);
    let committer = Signature {
        name: "GitHub".into(),
        email: "noreply@github.com".into(),
        date: author.date,
    };
    let commit = CommitObj {
        tree: tree.clone(),
        parents: vec![head.clone()],
        author,
        committer,
        message: input.message.clone(),
    };
    let sha = r.objects.put_commit(commit);
    r.set_ref(&full, &sha);
    super::refs::branch_moved(
        &mut m,
        &input.owner,
        &input.name,
        &full,
        Some(&head),
        &sha,
        login,
    )?;
    Ok(Ok(json!({
        "commit": {
            "oid": sha,
            "url": format!("{}/commit/{sha}", m.html_base(&base)),
            "message": input.message,
            "messageHeadline": input.message.lines().next().unwrap_or_default(),
            "tree": {"oid": tree},
            "parents": {"nodes": [{"oid": head}], "totalCount": 1},
        },
        "ref": {"name": full, "target": {"oid": sha}},
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_that_git_refuses_are_not_clean() {
        assert_eq!(clean_path("/a/b.yaml").as_deref(), Some("a/b.yaml"));
        for bad in ["", "a//b", "a/../b", "./a", ".git/config"] {
            assert_eq!(clean_path(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_message_joins_headline_and_body_with_a_blank_line() {
        let vars = json!({"input": {
            "branch": {"repositoryNameWithOwner": "o/r", "branchName": "refs/heads/x"},
            "expectedHeadOid": "a".repeat(40),
            "message": {"headline": "Add", "body": "why\n"},
        }});
        let input = parse_input(&vars["input"])
            .map_err(|_| "refused")
            .expect("parses");
        assert_eq!(input.message, "Add\n\nwhy\n");
        assert_eq!(input.branch, "x");
        assert!(input.additions.is_empty() && input.deletions.is_empty());
    }
}
