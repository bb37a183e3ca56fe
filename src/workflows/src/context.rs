//! The event a workflow is evaluated against: GitHub's `github` context plus
//! `inputs`, `vars` and the files the event changed (for `paths` filters).

use serde_json::{Map, Value as Json};

use crate::workflow::ResolvedInputs;

/// Why a `github` context was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    /// The context is not a JSON object.
    #[error("the github context must be a JSON object, got {0}")]
    NotAnObject(&'static str),
    /// `event_name` is missing or not a string.
    #[error("the github context has no string `event_name`")]
    NoEventName,
    /// `event` is present but not an object.
    #[error("`github.event` must be a JSON object")]
    EventNotAnObject,
}

/// One event, as GitHub presents it to expressions.
///
/// Built from a `github` context (`event_name`, `event` payload, `ref`, `sha`,
/// `repository`, `actor`, `run_id`, …). Fields GitHub derives from the payload
/// are filled in when absent, the way GitHub sets them for the event: for
/// `pull_request` `ref` is `refs/pull/<n>/merge`, `head_ref`/`base_ref` are
/// the PR branches and `sha` is the merge commit (or the head when the
/// payload has none); for `push` `sha` is `after`; `repository` comes from
/// `event.repository.full_name` and `actor` from `event.sender.login`.
#[derive(Debug, Clone, PartialEq)]
pub struct EventContext {
    github: Json,
    inputs: Json,
    vars: Json,
    changed_files: Vec<String>,
}

fn kind(j: &Json) -> &'static str {
    match j {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

fn at<'a>(j: &'a Json, path: &[&str]) -> Option<&'a Json> {
    path.iter().try_fold(j, |cur, key| cur.get(key))
}

fn str_at<'a>(j: &'a Json, path: &[&str]) -> Option<&'a str> {
    at(j, path).and_then(Json::as_str)
}

impl EventContext {
    /// Builds the context from a whole `github` context object.
    pub fn from_github(github: Json) -> Result<Self, ContextError> {
        let Json::Object(mut map) = github else {
            return Err(ContextError::NotAnObject(kind(&github)));
        };
        let event_name = map
            .get("event_name")
            .and_then(Json::as_str)
            .ok_or(ContextError::NoEventName)?
            .to_string();
        match map.get("event") {
            None | Some(Json::Null) => {
                map.insert("event".into(), Json::Object(Map::new()));
            }
            Some(Json::Object(_)) => {}
            Some(_) => return Err(ContextError::EventNotAnObject),
        }
        let event = map["event"].clone();
        let mut derive = |key: &str, value: Option<Json>| {
            if let (false, Some(v)) = (map.contains_key(key), value) {
                map.insert(key.to_string(), v);
            }
        };
        let s = |path: &[&str]| str_at(&event, path).map(|v| Json::String(v.to_string()));
        derive("repository", s(&["repository", "full_name"]));
        derive("repository_owner", s(&["repository", "owner", "login"]));
        derive("actor", s(&["sender", "login"]));
        match event_name.as_str() {
            "pull_request" | "pull_request_review" | "pull_request_review_comment" => {
                let number = at(&event, &["pull_request", "number"]).map(|n| n.to_string());
                derive(
                    "ref",
                    number.map(|n| Json::String(format!("refs/pull/{n}/merge"))),
                );
                derive(
                    "sha",
                    s(&["pull_request", "merge_commit_sha"])
                        .or_else(|| s(&["pull_request", "head", "sha"])),
                );
                derive("head_ref", s(&["pull_request", "head", "ref"]));
                derive("base_ref", s(&["pull_request", "base", "ref"]));
            }
            "pull_request_target" => {
                // Runs in the base repository's context, on its branch tip.
                derive(
                    "ref",
                    s(&["pull_request", "base", "ref"]).map(|b| {
                        Json::String(format!("refs/heads/{}", b.as_str().unwrap_or_default()))
                    }),
                );
                derive("sha", s(&["pull_request", "base", "sha"]));
                derive("head_ref", s(&["pull_request", "head", "ref"]));
                derive("base_ref", s(&["pull_request", "base", "ref"]));
            }
            "push" => {
                derive("ref", s(&["ref"]));
                derive("sha", s(&["after"]));
            }
            _ => derive("ref", s(&["ref"])),
        }
        for key in ["head_ref", "base_ref"] {
            map.entry(key)
                .or_insert_with(|| Json::String(String::new()));
        }
        map.insert("event_name".into(), Json::String(event_name));
        Ok(Self {
            github: Json::Object(map),
            inputs: Json::Object(Map::new()),
            vars: Json::Object(Map::new()),
            changed_files: Vec::new(),
        })
    }

    /// Builds the context from an event name and its webhook payload.
    pub fn new(event_name: &str, event: Json) -> Result<Self, ContextError> {
        let mut github = Map::new();
        github.insert("event_name".into(), Json::String(event_name.to_string()));
        github.insert("event".into(), event);
        Self::from_github(Json::Object(github))
    }

    /// Sets one `github` context field (`run_id`, `sha`, `repository`, …).
    pub fn with_github(mut self, key: &str, value: Json) -> Self {
        if let Json::Object(map) = &mut self.github {
            map.insert(key.to_string(), value);
        }
        self
    }

    /// Sets the `inputs` context.
    pub fn with_inputs(mut self, inputs: Map<String, Json>) -> Self {
        self.inputs = Json::Object(inputs);
        self
    }

    /// Sets the `vars` context (repository variables).
    pub fn with_vars(mut self, vars: Map<String, Json>) -> Self {
        self.vars = Json::Object(vars);
        self
    }

    /// Sets the files the event changed, as repository-relative paths. For a
    /// pull request event this is the whole PR diff against its base (what
    /// GitHub filters `paths` on), not just the last push. Without it, an
    /// event touches no file, so a workflow with `paths` filters is not
    /// triggered.
    pub fn with_changed_files<I, S>(mut self, files: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.changed_files = files.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the inputs of a validated dispatch: the `inputs` context and the
    /// payload's `github.event.inputs` (strings), as GitHub fills both.
    pub fn with_dispatch_inputs(mut self, resolved: &ResolvedInputs) -> Self {
        self.inputs = Json::Object(resolved.context().clone());
        if let Some(Json::Object(event)) = self.github.get_mut("event") {
            event.insert(
                "inputs".into(),
                Json::Object(resolved.event_inputs().clone()),
            );
        }
        self
    }

    /// The `github` context.
    pub fn github(&self) -> &Json {
        &self.github
    }

    /// The `inputs` context.
    pub fn inputs(&self) -> &Json {
        &self.inputs
    }

    /// The `vars` context.
    pub fn vars(&self) -> &Json {
        &self.vars
    }

    /// The files the event changed.
    pub fn changed_files(&self) -> &[String] {
        &self.changed_files
    }

    /// `github.event_name`.
    pub fn event_name(&self) -> &str {
        str_at(&self.github, &["event_name"]).unwrap_or_default()
    }

    /// `github.event.action`, for events that have one.
    pub fn action(&self) -> Option<&str> {
        str_at(&self.github, &["event", "action"])
    }

    /// The webhook payload (`github.event`).
    pub fn event(&self) -> &Json {
        &self.github["event"]
    }

    /// A string field of the `github` context.
    pub fn github_str(&self, key: &str) -> Option<&str> {
        str_at(&self.github, &[key])
    }

    /// The run head GitHub records for a run started by this event: the
    /// `event`, `head_branch` and `head_sha` fields of a workflow run.
    ///
    /// For `pull_request` the head is the PR's head branch and commit. For
    /// `push` and `workflow_dispatch` it is the pushed or dispatched ref and
    /// `github.sha`, which for a dispatch is the tip of the dispatched ref
    /// (never an input such as `inputs.ref`); the caller sets `sha` to that
    /// tip. Tags give the tag name as `head_branch`, as GitHub does.
    pub fn run_head(&self) -> RunHead {
        let event = self.event_name().to_string();
        let short = |r: &str| {
            r.strip_prefix("refs/heads/")
                .or_else(|| r.strip_prefix("refs/tags/"))
                .unwrap_or(r)
                .to_string()
        };
        let (head_branch, head_sha) = match event.as_str() {
            "pull_request" | "pull_request_review" | "pull_request_review_comment" => (
                str_at(self.event(), &["pull_request", "head", "ref"]).map(str::to_string),
                str_at(self.event(), &["pull_request", "head", "sha"]).map(str::to_string),
            ),
            _ => (
                self.github_str("ref").map(short),
                self.github_str("sha").map(str::to_string),
            ),
        };
        RunHead {
            event,
            head_branch,
            head_sha,
        }
    }
}

/// The head of a workflow run, as GitHub's run object reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunHead {
    /// The triggering event (`pull_request`, `push`, `workflow_dispatch`, …).
    pub event: String,
    /// The branch (or tag) name; `None` when the event carries none.
    pub head_branch: Option<String>,
    /// The commit the run runs on; `None` when the event carries none.
    pub head_sha: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pull_request_fields_are_derived_like_github() {
        let ctx = EventContext::new(
            "pull_request",
            json!({
                "action": "synchronize",
                "pull_request": {"number": 12, "head": {"ref": "klaud/auto-x", "sha": "abc"}, "base": {"ref": "main"}},
                "repository": {"full_name": "o/r", "owner": {"login": "o"}},
                "sender": {"login": "Klaud-Cold"},
            }),
        )
        .unwrap();
        assert_eq!(ctx.github_str("ref"), Some("refs/pull/12/merge"));
        assert_eq!(ctx.github_str("head_ref"), Some("klaud/auto-x"));
        assert_eq!(ctx.github_str("base_ref"), Some("main"));
        assert_eq!(ctx.github_str("sha"), Some("abc"));
        assert_eq!(ctx.github_str("repository"), Some("o/r"));
        assert_eq!(ctx.github_str("actor"), Some("Klaud-Cold"));
        assert_eq!(ctx.action(), Some("synchronize"));
        let head = ctx.run_head();
        assert_eq!(head.head_branch.as_deref(), Some("klaud/auto-x"));
        assert_eq!(head.head_sha.as_deref(), Some("abc"));
    }

    #[test]
    fn dispatch_runs_on_the_tip_of_the_dispatched_ref() {
        let ctx = EventContext::new(
            "workflow_dispatch",
            json!({"ref": "refs/heads/main", "inputs": {"ref": "cafe"}}),
        )
        .unwrap()
        .with_github("sha", json!("tip-of-main"));
        let head = ctx.run_head();
        assert_eq!(head.event, "workflow_dispatch");
        assert_eq!(head.head_branch.as_deref(), Some("main"));
        assert_eq!(head.head_sha.as_deref(), Some("tip-of-main"));
    }

    #[test]
    fn explicit_fields_win_and_bad_contexts_are_refused() {
        let ctx = EventContext::from_github(
            json!({"event_name": "push", "sha": "given", "event": {"after": "derived"}}),
        )
        .unwrap();
        assert_eq!(ctx.github_str("sha"), Some("given"));
        assert_eq!(
            EventContext::from_github(json!([])),
            Err(ContextError::NotAnObject("an array"))
        );
        assert_eq!(
            EventContext::from_github(json!({})),
            Err(ContextError::NoEventName)
        );
        assert_eq!(
            EventContext::from_github(json!({"event_name": "push", "event": 3})),
            Err(ContextError::EventNotAnObject)
        );
    }
}
