//! The one way Klaud asks GitHub's GraphQL API: for what REST does not
//! offer (draft state, who last edited an issue or a comment).

use http::Method;
use serde_json::{Value, json};

use super::transport::ok_or_error;
use super::{Github, GithubError};

/// GraphQL error messages are GitHub's text, echoed into Klaud's errors and
/// logs: bounded so a hostile or runaway answer cannot flood them.
const MAX_ERROR_CHARS: usize = 300;

impl Github {
    /// Sends `query` with `variables` to `POST /graphql` and returns the
    /// whole answer. GraphQL reports failures in a 200 answer's `errors`:
    /// those become [`GithubError::Rejected`] with every message joined.
    ///
    /// Sent as a repeatable write: every caller's query or mutation sets or
    /// reads a state, so asking twice changes nothing.
    pub(crate) async fn graphql(
        &self,
        what: &str,
        query: &str,
        variables: Value,
    ) -> Result<Value, GithubError> {
        let body = json!({"query": query, "variables": variables});
        let raw = self
            .t
            .write_idempotent(what, Method::POST, "/graphql", Some(&body))
            .await?;
        let answer = answer_of(what, &raw)?;
        match graphql_errors(&answer) {
            Some(errors) => Err(rejected(what, &errors)),
            None => Ok(answer),
        }
    }

    /// [`Github::graphql`] sent once, answered with its `errors` (each
    /// one's `type` and `message`) for the caller to tell apart: for a
    /// mutation that is not repeatable (a commit), where an unknown
    /// outcome stays [`GithubError::Ambiguous`] for the caller to settle.
    pub(crate) async fn graphql_once(
        &self,
        what: &str,
        query: &str,
        variables: Value,
    ) -> Result<Result<Value, Vec<GraphqlError>>, GithubError> {
        let (answer, errors) = self.graphql_once_whole(what, query, variables).await?;
        Ok(match errors.is_empty() {
            true => Ok(answer),
            false => Err(errors),
        })
    }

    /// [`Github::graphql_once`] answered whole: `data` and `errors` side
    /// by side, for a document of several mutations, where GitHub runs
    /// each field in turn and one refused field (`null`, its error's
    /// `path` naming it) leaves the others' answers standing.
    pub(crate) async fn graphql_once_whole(
        &self,
        what: &str,
        query: &str,
        variables: Value,
    ) -> Result<(Value, Vec<GraphqlError>), GithubError> {
        let body = json!({"query": query, "variables": variables});
        let raw = self
            .t
            .write(what, Method::POST, "/graphql", Some(&body))
            .await?;
        let answer = answer_of(what, &raw)?;
        let errors = graphql_errors(&answer).unwrap_or_default();
        Ok((answer, errors))
    }
}

/// One entry of a GraphQL answer's `errors`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GraphqlError {
    /// GitHub's error type (`NOT_FOUND`, `STALE_DATA`, …), when given.
    pub(crate) kind: Option<String>,
    /// The message, bounded.
    pub(crate) message: String,
    /// The top-level field it belongs to (the first entry of its `path`),
    /// when it names one.
    pub(crate) field: Option<String>,
}

fn answer_of(what: &str, raw: &crate::transport::Raw) -> Result<Value, GithubError> {
    ok_or_error(what, raw)?;
    raw.json(what)
}

/// The answer's `errors`, `None` when it has none.
fn graphql_errors(answer: &Value) -> Option<Vec<GraphqlError>> {
    let errors = answer
        .get("errors")
        .and_then(Value::as_array)
        .filter(|e| !e.is_empty())?;
    Some(
        errors
            .iter()
            .map(|e| GraphqlError {
                kind: e.get("type").and_then(Value::as_str).map(str::to_owned),
                message: cut_chars(
                    e.get("message").and_then(Value::as_str).unwrap_or_default(),
                    MAX_ERROR_CHARS,
                ),
                field: e
                    .pointer("/path/0")
                    .and_then(Value::as_str)
                    .map(|f| cut_chars(f, MAX_ERROR_CHARS)),
            })
            .collect(),
    )
}

/// GraphQL failures as one [`GithubError::Rejected`], every message joined.
pub(crate) fn rejected(what: &str, errors: &[GraphqlError]) -> GithubError {
    let message = errors
        .iter()
        .map(|e| e.message.as_str())
        .filter(|m| !m.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    GithubError::Rejected {
        what: what.to_owned(),
        status: 200,
        message: cut_chars(&message, MAX_ERROR_CHARS),
    }
}

fn cut_chars(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        Some((end, _)) => text[..end].to_owned(),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::cut_chars;

    #[test]
    fn cut_chars_keeps_whole_characters() {
        assert_eq!(cut_chars("abc", 5), "abc");
        assert_eq!(cut_chars("abcdef", 3), "abc");
        assert_eq!(cut_chars("ééé", 2), "éé");
    }
}
