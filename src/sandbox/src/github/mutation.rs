//! A GraphQL `mutation` document run as GitHub runs one: its top-level
//! fields one after the other, in document order, each answered under its
//! alias (or name). A field GitHub refuses is `null` with an error whose
//! `path` names it, and the fields after it still run; an input that does
//! not fit the schema (a variable of the wrong shape) refuses the whole
//! document before anything runs, with no `data`.
//!
//! The fields the simulator answers: `createRef`, `createCommitOnBranch`,
//! `markPullRequestReadyForReview` and `convertPullRequestToDraft`. Each
//! takes its `input` as a variable or as an inline literal. Selection sets
//! are not evaluated: each payload carries every field Klaud selects.

use axum::Json;
use axum::response::{IntoResponse, Response};
use graphql_parser::query::{Mutation, Selection, Value as Literal};
use serde_json::{Map, Value, json};

use super::graphql::{FieldAnswer, Refusal, request_error};
use super::http::ApiError;
use super::state::GithubState;

/// One field, checked against the schema and ready to run in its turn.
pub(super) enum Planned {
    CreateRef(super::refs::GraphqlRef),
    Commit(super::commit_on_branch::Input),
    Draft {
        node: String,
        draft: bool,
    },
    /// Refused when its turn comes (what GitHub finds only by running it).
    Refused(Value),
}

/// The fields of `mutation` with `variables`, each under the key its
/// answer takes, checked before any runs; `Err` is the answer that refuses
/// the whole document (its JSON).
pub(super) fn plan_fields<'a>(
    mutation: &Mutation<'a, &'a str>,
    variables: &Value,
) -> Result<Vec<(String, Planned)>, Value> {
    let declared: Vec<&str> = mutation
        .variable_definitions
        .iter()
        .map(|d| d.name)
        .collect();
    let mut fields = Vec::new();
    for selection in &mutation.selection_set.items {
        let Selection::Field(field) = selection else {
            return Err(request_error(
                "Fragments on the mutation root are not simulated",
                None,
            ));
        };
        let mut input = Value::Null;
        for (name, literal) in &field.arguments {
            if *name != "input" {
                return Err(request_error(
                    &format!("Field '{}' doesn't accept argument '{name}'", field.name),
                    None,
                ));
            }
            input = match to_json(literal, &declared, variables) {
                Ok(v) => v,
                Err(undeclared) => {
                    return Err(request_error(
                        &format!(
                            "Variable ${undeclared} is used by {} but not declared",
                            mutation.name.unwrap_or("anonymous mutation")
                        ),
                        None,
                    ));
                }
            };
        }
        let planned = match plan(field.name, &input) {
            Ok(p) => p,
            Err(Refusal::Request(error)) => {
                return Err(json!({"errors": [error]}));
            }
            Err(Refusal::Field(error)) => Planned::Refused(error),
        };
        fields.push((field.alias.unwrap_or(field.name).to_owned(), planned));
    }
    Ok(fields)
}

/// Runs the planned `fields` for `login`, one after the other.
pub(super) async fn run(
    st: &GithubState,
    login: &str,
    fields: Vec<(String, Planned)>,
) -> Result<Response, ApiError> {
    let mut data = Map::new();
    let mut errors = Vec::new();
    for (key, planned) in fields {
        let answer: FieldAnswer = match planned {
            Planned::CreateRef(input) => super::refs::create_by_graphql(st, login, input).await?,
            Planned::Commit(input) => super::commit_on_branch::create(st, login, input).await?,
            Planned::Draft { node, draft } => {
                super::graphql::set_draft(st, login, &node, draft).await?
            }
            Planned::Refused(error) => Err(error),
        };
        match answer {
            Ok(payload) => {
                data.insert(key, payload);
            }
            Err(mut error) => {
                error["path"] = json!([&key]);
                errors.push(error);
                data.insert(key, Value::Null);
            }
        }
    }
    let mut answer = json!({"data": data});
    if !errors.is_empty() {
        answer["errors"] = Value::Array(errors);
    }
    Ok(Json(answer).into_response())
}

/// The field `name` with `input`, checked against the schema.
fn plan(name: &str, input: &Value) -> Result<Planned, Refusal> {
    match name {
        "createRef" => super::refs::graphql_input(input).map(Planned::CreateRef),
        "createCommitOnBranch" => super::commit_on_branch::parse_input(input).map(Planned::Commit),
        "markPullRequestReadyForReview" | "convertPullRequestToDraft" => {
            let draft = name == "convertPullRequestToDraft";
            match input["pullRequestId"].as_str() {
                Some(node) => Ok(Planned::Draft {
                    node: node.to_owned(),
                    draft,
                }),
                None => Err(Refusal::Request(super::graphql::field_error(
                    "Argument 'pullRequestId' on InputObject is required",
                    None,
                ))),
            }
        }
        other => Err(Refusal::Request(super::graphql::field_error(
            &format!(
                "Field '{other}' doesn't exist on type 'Mutation' (the simulator answers \
                 createRef, createCommitOnBranch, markPullRequestReadyForReview and \
                 convertPullRequestToDraft)"
            ),
            None,
        ))),
    }
}

/// A literal as JSON, its variables replaced by their values; `Err` names
/// a variable the operation does not declare.
fn to_json<'a>(
    literal: &Literal<'a, &'a str>,
    declared: &[&str],
    variables: &Value,
) -> Result<Value, String> {
    Ok(match literal {
        Literal::Variable(name) => {
            if !declared.contains(name) {
                return Err((*name).to_owned());
            }
            variables.get(*name).cloned().unwrap_or(Value::Null)
        }
        Literal::Int(n) => n.as_i64().map_or(Value::Null, Value::from),
        Literal::Float(f) => json!(f),
        Literal::String(s) => Value::String(s.clone()),
        Literal::Boolean(b) => Value::Bool(*b),
        Literal::Null => Value::Null,
        Literal::Enum(e) => Value::String((*e).to_owned()),
        Literal::List(items) => Value::Array(
            items
                .iter()
                .map(|v| to_json(v, declared, variables))
                .collect::<Result<_, _>>()?,
        ),
        Literal::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, v)| Ok(((*k).to_owned(), to_json(v, declared, variables)?)))
                .collect::<Result<_, String>>()?,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_and_variables_become_the_same_json() {
        let doc = graphql_parser::parse_query::<&str>(
            r#"mutation($x: String!) { a: createRef(input: {name: $x, n: 3, ok: true, l: [null, "s"]}) { ref { name } } }"#,
        )
        .expect("parses");
        let graphql_parser::query::Definition::Operation(
            graphql_parser::query::OperationDefinition::Mutation(m),
        ) = &doc.definitions[0]
        else {
            panic!("a mutation");
        };
        let Selection::Field(f) = &m.selection_set.items[0] else {
            panic!("a field");
        };
        let input = to_json(&f.arguments[0].1, &["x"], &json!({"x": "refs/heads/b"}));
        assert_eq!(
            input,
            Ok(json!({"name": "refs/heads/b", "n": 3, "ok": true, "l": [null, "s"]}))
        );
        assert_eq!(
            to_json(&f.arguments[0].1, &[], &json!({})),
            Err("x".to_owned())
        );
    }
}
