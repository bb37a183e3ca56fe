//! `POST /graphql`: `createCommitOnBranch` (its own module), the two
//! mutations that change a pull request's draft state, addressed by the PR's node id (`node_id` in PR JSON), and one
//! query: who last edited an issue and when (`repository(owner:, name:)
//! { issue(number:) { editor { login } lastEditedAt } }`, with the three
//! values as variables `owner`, `name`, `number`), which REST does not tell,
//! and the same of a comment by its node id (`node(id:) { ... on Comment
//! { editor { login } lastEditedAt userContentEdits(last: N) { … } } }`).

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde::Deserialize;
use serde_json::{Value, json};

use super::http::{ApiError, Caller};
use super::state::{GithubState, Permission};

#[derive(Deserialize)]
pub struct GraphqlIn {
    query: String,
    #[serde(default)]
    variables: Value,
}

fn find_pr_id(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if s.starts_with("PR_") => Some(s.clone()),
        Value::Object(o) => o.values().find_map(find_pr_id),
        Value::Array(a) => a.iter().find_map(find_pr_id),
        _ => None,
    }
}

fn inline_pr_id(query: &str) -> Option<String> {
    let rest = &query[query.find("pullRequestId")? + "pullRequestId".len()..];
    let rest = rest
        .trim_start()
        .strip_prefix(':')?
        .trim_start()
        .strip_prefix('"')?;
    Some(rest[..rest.find('"')?].to_string())
}

fn gql_error(message: &str, kind: Option<&str>) -> Response {
    let mut e = json!({"message": message, "locations": []});
    if let Some(k) = kind {
        e["type"] = json!(k);
    }
    Json(json!({"errors": [e]})).into_response()
}

pub async fn graphql(
    State(st): State<GithubState>,
    caller: Caller,
    Json(body): Json<GraphqlIn>,
) -> Result<Response, ApiError> {
    let login = caller.require()?.to_string();
    if body.query.contains("createCommitOnBranch") {
        return super::commit_on_branch::create(&st, &login, &body.variables).await;
    }
    if body.query.contains("node(") && body.query.contains("editor") {
        return comment_editor(&st, &body.query, &body.variables).await;
    }
    if body.query.contains("lastEditedAt") {
        return issue_editor(&st, &body.variables).await;
    }
    let (field, draft) = if body.query.contains("markPullRequestReadyForReview") {
        ("markPullRequestReadyForReview", false)
    } else if body.query.contains("convertPullRequestToDraft") {
        ("convertPullRequestToDraft", true)
    } else {
        return Ok(gql_error(
            "The simulator implements only markPullRequestReadyForReview and convertPullRequestToDraft",
            None,
        ));
    };
    let Some(node) = find_pr_id(&body.variables).or_else(|| inline_pr_id(&body.query)) else {
        return Ok(gql_error(
            "Argument 'pullRequestId' on InputObject is required",
            None,
        ));
    };
    let mut m = st.lock().await;
    let target = m.repos.iter_mut().find_map(|(_, r)| {
        let number = r
            .pulls
            .values()
            .find(|p| format!("PR_{}", p.id) == node)?
            .number;
        Some((r, number))
    });
    let Some((r, number)) = target else {
        return Ok(gql_error(
            &format!("Could not resolve to a node with the global id of '{node}'"),
            Some("NOT_FOUND"),
        ));
    };
    if r.permission_of(&login) < Permission::Write {
        return Ok(gql_error(
            &format!("{login} does not have permission to update this pull request."),
            Some("FORBIDDEN"),
        ));
    }
    let Some(p) = r.pulls.get_mut(&number) else {
        return Ok(gql_error("pull request vanished", Some("NOT_FOUND")));
    };
    if !p.open {
        return Ok(gql_error("Pull request is closed", Some("UNPROCESSABLE")));
    }
    let changed = p.draft != draft;
    p.draft = draft;
    p.updated_at = Utc::now();
    let answer = Json(json!({"data": {field: {"pullRequest": {
        "id": node, "number": p.number, "isDraft": p.draft,
    }}}}))
    .into_response();
    if changed {
        let (owner, name) = (r.owner.clone(), r.name.clone());
        let action = if draft {
            "converted_to_draft"
        } else {
            "ready_for_review"
        };
        super::workflow_events::pull_request_event(
            &mut m, &owner, &name, number, action, None, &login,
        )?;
    }
    Ok(answer)
}

/// `editor` and `lastEditedAt` of an issue (`null` both before any edit).
async fn issue_editor(st: &GithubState, vars: &Value) -> Result<Response, ApiError> {
    let (Some(owner), Some(name), Some(number)) = (
        vars["owner"].as_str(),
        vars["name"].as_str(),
        vars["number"].as_u64(),
    ) else {
        return Ok(gql_error(
            "Variables owner (String!), name (String!) and number (Int!) are required",
            None,
        ));
    };
    let m = st.lock().await;
    let Ok(r) = m.repo(owner, name) else {
        return Ok(gql_error(
            &format!("Could not resolve to a Repository with the name '{owner}/{name}'."),
            Some("NOT_FOUND"),
        ));
    };
    let Some(issue) = r.issues.get(&number) else {
        return Ok(gql_error(
            &format!("Could not resolve to an Issue with the number of {number}."),
            Some("NOT_FOUND"),
        ));
    };
    let (editor, at) = match &issue.last_edit {
        Some((login, at)) => (json!({"login": login}), json!(super::state::fmt_time(*at))),
        None => (Value::Null, Value::Null),
    };
    Ok(Json(json!({"data": {"repository": {"issue": {
        "editor": editor, "lastEditedAt": at,
    }}}}))
    .into_response())
}

/// `node(id:)` of a comment, as the `Comment` interface answers it:
/// `author`, `editor` and `lastEditedAt` (the latest edit's, `null` both
/// before any), and `userContentEdits(last: N)` (the newest `N` edits,
/// oldest first). Issue comments keep their edits; reviews and review
/// comments are edited only by their authors here and answer as unedited.
async fn comment_editor(st: &GithubState, query: &str, vars: &Value) -> Result<Response, ApiError> {
    let Some(id) = vars["id"].as_str() else {
        return Ok(gql_error("Variable id (ID!) is required", None));
    };
    let last = query
        .find("last:")
        .map(|at| &query[at + "last:".len()..])
        .and_then(|rest| {
            let digits: String = rest
                .trim_start()
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse::<usize>().ok()
        })
        .unwrap_or(100)
        .min(100);
    let m = st.lock().await;
    let (prefix, number) = id.split_once('_').unwrap_or(("", ""));
    let number: Option<u64> = number.parse().ok();
    let comment = number.and_then(|n| {
        m.repos.values().find_map(|r| match prefix {
            "IC" => r
                .comments
                .get(&n)
                .map(|c| (c.user.clone(), c.edits.clone())),
            "PRR" => r.reviews.get(&n).map(|v| (v.user.clone(), Vec::new())),
            "PRRC" => r
                .review_comments
                .get(&n)
                .map(|c| (c.user.clone(), Vec::new())),
            _ => None,
        })
    });
    let Some((author, edits)) = comment else {
        return Ok(gql_error(
            &format!("Could not resolve to a node with the global id of '{id}'"),
            Some("NOT_FOUND"),
        ));
    };
    let (editor, at) = match edits.last() {
        Some((who, at)) => (json!({"login": who}), json!(super::state::fmt_time(*at))),
        None => (Value::Null, Value::Null),
    };
    let nodes: Vec<Value> = edits[edits.len().saturating_sub(last)..]
        .iter()
        .map(|(who, at)| json!({"editor": {"login": who}, "editedAt": super::state::fmt_time(*at)}))
        .collect();
    Ok(Json(json!({"data": {"node": {
        "id": id,
        "author": {"login": author},
        "editor": editor,
        "lastEditedAt": at,
        "userContentEdits": {"nodes": nodes},
    }}}))
    .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pr_id_is_found_in_variables_or_inline() {
        assert_eq!(
            find_pr_id(&json!({"input": {"pullRequestId": "PR_12"}})).as_deref(),
            Some("PR_12")
        );
        assert_eq!(
            inline_pr_id(r#"mutation { convertPullRequestToDraft(input: {pullRequestId: "PR_7"}) { pullRequest { isDraft } } }"#).as_deref(),
            Some("PR_7")
        );
        assert_eq!(inline_pr_id("mutation { x }"), None);
    }
}
