//! Which events start a run of a workflow: its `on:` triggers, their
//! activity types and their `branches`/`tags`/`paths` filters, checked on
//! the plain YAML as GitHub checks them.

use super::*;

/// Compiled filters of one `pull_request`/`pull_request_target` trigger.
#[derive(Debug, Clone)]
pub(super) struct PrTrigger {
    types: Vec<String>,
    branches: Option<(Filter, bool)>,
    paths: Option<(Filter, bool)>,
}

/// Compiled filters of a `push` trigger.
#[derive(Debug, Clone)]
pub(super) struct PushTrigger {
    branches: Option<(Filter, bool)>,
    tags: Option<(Filter, bool)>,
    paths: Option<(Filter, bool)>,
}

/// Why `on: pull_request` does not start a run for an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TriggerRefusal {
    /// The workflow has no `pull_request` trigger.
    NoPullRequestTrigger,
    /// The event's activity type is not among `types`.
    ActivityType {
        /// The event's action (`labeled`).
        action: String,
        /// The types the trigger accepts (GitHub's default when unlisted).
        types: Vec<String>,
    },
    /// The base branch is not admitted by `branches`/`branches-ignore`.
    BaseBranch {
        /// The pull request's base branch.
        base: String,
    },
    /// None of the changed files passes `paths` (or all are in `paths-ignore`).
    Paths {
        /// The files the pull request changes.
        files: Vec<String>,
        /// The filter's patterns as written.
        patterns: Vec<String>,
        /// Whether the filter is `paths-ignore`.
        ignored: bool,
    },
}

impl std::fmt::Display for TriggerRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoPullRequestTrigger => write!(f, "it has no `on: pull_request` trigger"),
            Self::ActivityType { action, types } => write!(
                f,
                "its `on: pull_request` types ({}) do not include `{action}`",
                types.join(", ")
            ),
            Self::BaseBranch { base } => write!(
                f,
                "its `on: pull_request` branch filter does not admit the base branch `{base}`"
            ),
            Self::Paths {
                files,
                patterns,
                ignored,
            } => write!(
                f,
                "its `on: pull_request` {} ({}) admits none of the files the pull request changes ({})",
                if *ignored { "paths-ignore" } else { "paths" },
                patterns.join(", "),
                files.join(", ")
            ),
        }
    }
}

impl Workflow {
    /// Whether the event starts a run of this workflow: the event is among
    /// `on:`, its activity type is listed (`pull_request` defaults to
    /// opened, synchronize, reopened), and its `branches`/`tags`/`paths`
    /// filters admit it. Branch filters of pull request events apply to the
    /// base branch; `paths` apply to [`EventContext::changed_files`] (a
    /// `paths` filter needs one matching file, `paths-ignore` runs unless
    /// every file is ignored, so an event with no changed files runs
    /// neither). Tag pushes ignore `paths`, as on GitHub.
    pub fn triggered_by(&self, ctx: &EventContext) -> bool {
        let files = ctx.changed_files();
        let event = ctx.event_name();
        match event {
            "pull_request" | "pull_request_target" => {
                let trigger = if event == "pull_request" {
                    &self.pull_request
                } else {
                    &self.pull_request_target
                };
                let Some(trigger) = trigger else {
                    return false;
                };
                let action = ctx.action().unwrap_or_default();
                let types_ok = if trigger.types.is_empty() {
                    DEFAULT_PULL_REQUEST_TYPES.contains(&action)
                } else {
                    trigger.types.iter().any(|t| t == action)
                };
                let base = ctx
                    .event()
                    .pointer("/pull_request/base/ref")
                    .and_then(Json::as_str)
                    .unwrap_or_default();
                types_ok && admits(&trigger.branches, base) && paths_admit(&trigger.paths, files)
            }
            "push" => {
                let Some(trigger) = &self.push else {
                    return false;
                };
                let r = ctx.github_str("ref").unwrap_or_default();
                if let Some(tag) = r.strip_prefix("refs/tags/") {
                    match (&trigger.tags, &trigger.branches) {
                        (Some(_), _) => admits(&trigger.tags, tag),
                        (None, Some(_)) => false,
                        (None, None) => trigger.paths.is_none(),
                    }
                } else {
                    let branch = r.strip_prefix("refs/heads/").unwrap_or(r);
                    let ref_ok = match (&trigger.branches, &trigger.tags) {
                        (Some(_), _) => admits(&trigger.branches, branch),
                        (None, Some(_)) => false,
                        (None, None) => true,
                    };
                    ref_ok && paths_admit(&trigger.paths, files)
                }
            }
            "workflow_dispatch" => self.inputs.is_some(),
            // Only reachable through `uses:` from another workflow.
            "workflow_call" => false,
            other => match self.other_events.get(other) {
                Some(Json::String(s)) if s == "Default" => true,
                Some(Json::Object(body)) => {
                    let types = body
                        .get("Body")
                        .and_then(|b| b.get("types"))
                        .and_then(Json::as_array);
                    match types {
                        Some(types) if !types.is_empty() => {
                            let action = ctx.action().unwrap_or_default();
                            types.iter().any(|t| t.as_str() == Some(action))
                        }
                        _ => true,
                    }
                }
                // `schedule` serialises as a bare list of crons.
                Some(Json::Array(_)) => true,
                _ => false,
            },
        }
    }

    /// Which part of `on: pull_request` keeps a pull request event from
    /// starting a run (`None`: [`Workflow::triggered_by`] holds), in the
    /// order GitHub applies them, so a setup check can say what to change.
    pub fn pull_request_refusal(&self, ctx: &EventContext) -> Option<TriggerRefusal> {
        let Some(trigger) = &self.pull_request else {
            return Some(TriggerRefusal::NoPullRequestTrigger);
        };
        let action = ctx.action().unwrap_or_default();
        let types: Vec<String> = if trigger.types.is_empty() {
            DEFAULT_PULL_REQUEST_TYPES
                .iter()
                .map(|t| (*t).to_owned())
                .collect()
        } else {
            trigger.types.clone()
        };
        if !types.iter().any(|t| t == action) {
            return Some(TriggerRefusal::ActivityType {
                action: action.to_owned(),
                types,
            });
        }
        let base = ctx
            .event()
            .pointer("/pull_request/base/ref")
            .and_then(Json::as_str)
            .unwrap_or_default();
        if !admits(&trigger.branches, base) {
            return Some(TriggerRefusal::BaseBranch {
                base: base.to_owned(),
            });
        }
        if !paths_admit(&trigger.paths, ctx.changed_files()) {
            let (patterns, ignored) = trigger
                .paths
                .as_ref()
                .map(|(f, ignored)| (f.patterns().to_vec(), *ignored))
                .unwrap_or_default();
            return Some(TriggerRefusal::Paths {
                files: ctx.changed_files().to_vec(),
                patterns,
                ignored,
            });
        }
        None
    }
}

/// The models crate flattens trigger filters into `Option`s, which silently
/// drops a malformed or doubled filter; GitHub refuses such a file, so check
/// the shapes on the plain YAML tree.
pub(super) fn check_filter_shapes(raw: &yaml_serde::Value) -> Result<(), (String, String)> {
    let Some(on) = raw.get("on").and_then(yaml_serde::Value::as_mapping) else {
        return Ok(());
    };
    for (event, body) in on {
        let (Some(event), Some(body)) = (event.as_str(), body.as_mapping()) else {
            continue;
        };
        for base in ["branches", "tags", "paths"] {
            let ignore = format!("{base}-ignore");
            if body.contains_key(base) && body.contains_key(ignore.as_str()) {
                return Err((
                    format!("on.{event}"),
                    format!("`{base}` and `{ignore}` cannot both be set for one event"),
                ));
            }
            for key in [base, ignore.as_str()] {
                let Some(value) = body.get(key) else {
                    continue;
                };
                let ok = value
                    .as_sequence()
                    .is_some_and(|items| items.iter().all(|i| i.as_str().is_some()));
                if !ok {
                    return Err((
                        format!("on.{event}.{key}"),
                        "expected a list of strings".into(),
                    ));
                }
            }
        }
    }
    Ok(())
}

fn filter_pair(
    patterns: &[String],
    ignore: bool,
    key: &str,
) -> Result<Option<(Filter, bool)>, String> {
    Filter::new(patterns)
        .map(|f| Some((f, ignore)))
        .map_err(|e| format!("{key}: {e}"))
}

fn branch_filter(filters: &Option<BranchFilters>) -> Result<Option<(Filter, bool)>, String> {
    match filters {
        None => Ok(None),
        Some(BranchFilters::Branches(p)) => filter_pair(p, false, "branches"),
        Some(BranchFilters::BranchesIgnore(p)) => filter_pair(p, true, "branches-ignore"),
    }
}

fn path_filter(filters: &Option<PathFilters>) -> Result<Option<(Filter, bool)>, String> {
    match filters {
        None => Ok(None),
        Some(PathFilters::Paths(p)) => filter_pair(p, false, "paths"),
        Some(PathFilters::PathsIgnore(p)) => filter_pair(p, true, "paths-ignore"),
    }
}

fn tag_filter(filters: &Option<TagFilters>) -> Result<Option<(Filter, bool)>, String> {
    match filters {
        None => Ok(None),
        Some(TagFilters::Tags(p)) => filter_pair(p, false, "tags"),
        Some(TagFilters::TagsIgnore(p)) => filter_pair(p, true, "tags-ignore"),
    }
}

pub(super) fn pr_trigger(body: &OptionalBody<PullRequest>) -> Result<Option<PrTrigger>, String> {
    match body {
        OptionalBody::Missing => Ok(None),
        OptionalBody::Default => Ok(Some(PrTrigger {
            types: Vec::new(),
            branches: None,
            paths: None,
        })),
        OptionalBody::Body(pr) => Ok(Some(PrTrigger {
            types: pr.types.clone(),
            branches: branch_filter(&pr.branch_filters)?,
            paths: path_filter(&pr.path_filters)?,
        })),
    }
}

pub(super) fn push_trigger(body: &OptionalBody<Push>) -> Result<Option<PushTrigger>, String> {
    match body {
        OptionalBody::Missing => Ok(None),
        OptionalBody::Default => Ok(Some(PushTrigger {
            branches: None,
            tags: None,
            paths: None,
        })),
        OptionalBody::Body(push) => Ok(Some(PushTrigger {
            branches: branch_filter(&push.branch_filters)?,
            tags: tag_filter(&push.tag_filters)?,
            paths: path_filter(&push.path_filters)?,
        })),
    }
}

fn admits(filter: &Option<(Filter, bool)>, value: &str) -> bool {
    match filter {
        None => true,
        Some((f, false)) => f.includes(value),
        Some((f, true)) => !f.includes(value),
    }
}

fn paths_admit(filter: &Option<(Filter, bool)>, files: &[String]) -> bool {
    match filter {
        None => true,
        Some((f, false)) => files.iter().any(|file| f.includes(file)),
        Some((f, true)) => files.iter().any(|file| !f.includes(file)),
    }
}
