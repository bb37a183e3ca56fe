//! `POST /graphql`: documents parsed as GitHub parses them. A mutation
//! runs field by field ([`super::mutation`]): `createRef`,
//! `createCommitOnBranch` (their own modules) and the two that change a
//! pull request's draft state, addressed by the PR's node id (`node_id`
//! in PR JSON). Two queries: who last edited an issue and when (`repository(owner:, name:)
//! { issue(number:) { editor { login } lastEditedAt } }`, with the three
//! values as variables `owner`, `name`, `number`), which REST does not tell,
//! and the same of a comment by its node id (`node(id:) { ... on Comment
//! { editor { login } lastEditedAt userContentEdits(last: N) { … } } }`).

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use graphql_parser::query::{Definition, OperationDefinition};
use serde::Deserialize;
use serde_json::{Value, json};

use super::http::{ApiError, Caller};
use super::state::{GithubState, Permission};

#[derive(Deserialize)]
pub struct GraphqlIn {
    query: String,
    #[serde(default)]
    variables: Value,
    #[serde(default, rename = "operationName")]
    operation_name: Option<String>,
}

/// An error object of a GraphQL answer, before a field's `path` is set.
pub(super) fn field_error(message: &str, kind: Option<&str>) -> Value {
    let mut e = json!({"message": message, "locations": []});
    if let Some(k) = kind {
        e["type"] = json!(k);
    }
    e
}

/// GitHub's refusal of a mutation that writes to a repository `login`
/// cannot push to.
pub(super) fn no_push(login: &str) -> Value {
    field_error(
        &format!("{login} does not have permission to push to this repository."),
        Some("FORBIDDEN"),
    )
}

/// A request-level GraphQL error: HTTP 200, no `data`.
pub(super) fn request_error(message: &str, kind: Option<&str>) -> Value {
    json!({"errors": [field_error(message, kind)]})
}

/// [`request_error`] as the answer.
pub(super) fn gql_error(message: &str, kind: Option<&str>) -> Response {
    Json(request_error(message, kind)).into_response()
}

/// What one mutation field answered: its payload, or the error GitHub
/// gives for it (the field is then `null` and the next one still runs).
pub(super) type FieldAnswer = Result<Value, Value>;

/// Why a mutation's input is refused: before anything in the document
/// runs (the input does not fit the schema), or when the field's turn
/// comes (what only running it finds).
pub(super) enum Refusal {
    Request(Value),
    Field(Value),
}

/// Brackets nested deeper than this are refused before parsing: the
/// parser recurses, and no document Klaud or a person sends comes close.
const MAX_NESTING: usize = 32;

fn nesting(query: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for c in query.chars() {
        match c {
            '{' | '[' | '(' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            '}' | ']' | ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

fn operation_name<'a>(op: &OperationDefinition<'a, &'a str>) -> Option<&'a str> {
    match op {
        OperationDefinition::Query(q) => q.name,
        OperationDefinition::Mutation(m) => m.name,
        OperationDefinition::Subscription(s) => s.name,
        OperationDefinition::SelectionSet(_) => None,
    }
}

/// What a document asks, decided before anything runs (the parsed
/// document borrows the request body and is not kept across an await).
enum Asked {
    Mutation(Vec<(String, super::mutation::Planned)>),
    Query,
    Refused(Response),
}

fn asked(body: &GraphqlIn) -> Asked {
    if nesting(&body.query) > MAX_NESTING {
        return Asked::Refused(gql_error("Query has too many levels of nesting", None));
    }
    let doc = match graphql_parser::parse_query::<&str>(&body.query) {
        Ok(doc) => doc,
        Err(e) => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or_default();
            return Asked::Refused(gql_error(&format!("Parse error: {first}"), None));
        }
    };
    let operations: Vec<&OperationDefinition<'_, &str>> = doc
        .definitions
        .iter()
        .filter_map(|d| match d {
            Definition::Operation(op) => Some(op),
            Definition::Fragment(_) => None,
        })
        .collect();
    let operation = match (&body.operation_name, operations.as_slice()) {
        (None, [only]) => *only,
        (None, _) => {
            return Asked::Refused(gql_error(
                "An operation name is required when the document holds several operations",
                None,
            ));
        }
        (Some(wanted), ops) => {
            match ops
                .iter()
                .find(|op| operation_name(op) == Some(wanted.as_str()))
            {
                Some(op) => *op,
                None => {
                    let message = format!("No operation named \"{wanted}\"");
                    return Asked::Refused(gql_error(&message, None));
                }
            }
        }
    };
    match operation {
        OperationDefinition::Mutation(m) => {
            match super::mutation::plan_fields(m, &body.variables) {
                Ok(fields) => Asked::Mutation(fields),
                Err(refused) => Asked::Refused(Json(refused).into_response()),
            }
        }
        OperationDefinition::Subscription(_) => {
            Asked::Refused(gql_error("Subscriptions are not supported over HTTP", None))
        }
        OperationDefinition::Query(_) | OperationDefinition::SelectionSet(_) => Asked::Query,
    }
}

pub async fn graphql(
    State(st): State<GithubState>,
    caller: Caller,
    Json(body): Json<GraphqlIn>,
) -> Result<Response, ApiError> {
    let login = caller.require()?.to_string();
    {
        let mut m = st.lock().await;
        if m.graphql_documents.len() >= super::state::GRAPHQL_DOCUMENTS_KEPT {
            m.graphql_documents.pop_front();
        }
        m.graphql_documents
            .push_back(super::state::GraphqlDocument {
                query: body.query.clone(),
                variables: body.variables.clone(),
            });
    }
    match asked(&body) {
        Asked::Refused(answer) => Ok(answer),
        Asked::Mutation(fields) => super::mutation::run(&st, &login, fields).await,
        Asked::Query => {
            if body.query.contains("node(") && body.query.contains("editor") {
                return comment_editor(&st, &body.query, &body.variables).await;
            }
            if body.query.contains("lastEditedAt") {
                return issue_editor(&st, &body.variables).await;
            }
            Ok(gql_error(
                "The simulator answers only the editor queries of issues and comments",
                None,
            ))
        }
    }
}

/// `markPullRequestReadyForReview` (`draft` false) or
/// `convertPullRequestToDraft` (true) of the pull request with node id
/// `node`, with its `ready_for_review` or `converted_to_draft` event when
/// the state changed.
pub(super) async fn set_draft(
    st: &GithubState,
    login: &str,
    node: &str,
    draft: bool,
) -> Result<FieldAnswer, ApiError> {
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
        return Ok(Err(field_error(
            &format!("Could not resolve to a node with the global id of '{node}'"),
            Some("NOT_FOUND"),
        )));
    };
    if r.permission_of(login) < Permission::Write {
        return Ok(Err(field_error(
            &format!("{login} does not have permission to update this pull request."),
            Some("FORBIDDEN"),
        )));
    }
    let Some(p) = r.pulls.get_mut(&number) else {
        return Ok(Err(field_error("pull request vanished", Some("NOT_FOUND"))));
    };
    if !p.open {
        return Ok(Err(field_error(
            "Pull request is closed",
            Some("UNPROCESSABLE"),
        )));
    }
    let changed = p.draft != draft;
    p.draft = draft;
    p.updated_at = Utc::now();
    let payload = json!({"pullRequest": {
        "id": node, "number": p.number, "isDraft": p.draft,
    }});
    if changed {
        let (owner, name) = (r.owner.clone(), r.name.clone());
        let action = if draft {
            "converted_to_draft"
        } else {
            "ready_for_review"
        };
        super::workflow_events::pull_request_event(
            &mut m, &owner, &name, number, action, None, login,
        )?;
    }
    Ok(Ok(payload))
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
    fn nesting_counts_the_deepest_bracket() {
        assert_eq!(nesting("mutation { a(input: {b: [1]}) { c } }"), 4);
        assert_eq!(nesting("query"), 0);
    }
}
