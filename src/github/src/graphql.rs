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
        ok_or_error(what, &raw)?;
        let answer: Value = raw.json(what)?;
        if let Some(errors) = answer
            .get("errors")
            .and_then(Value::as_array)
            .filter(|e| !e.is_empty())
        {
            let message = errors
                .iter()
                .filter_map(|e| e.get("message").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("; ");
            return Err(GithubError::Rejected {
                what: what.to_owned(),
                status: 200,
                message: cut_chars(&message, MAX_ERROR_CHARS),
            });
        }
        Ok(answer)
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
