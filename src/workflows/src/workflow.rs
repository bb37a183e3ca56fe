//! One parsed workflow file and what GitHub derives from it for an event.

use std::collections::{BTreeSet, HashMap};

use github_actions_models::common::expr::LoE;
use github_actions_models::common::{EnvValue, If, Uses};
use github_actions_models::workflow::event::{
    BranchFilters, OptionalBody, PathFilters, PullRequest, Push, TagFilters,
    WorkflowDispatchInputType,
};
use github_actions_models::workflow::job::{ParallelStep, Step, UsesStep};
use github_actions_models::workflow::{self as model, Concurrency, Job};
use serde_json::{Map, Value as Json};

use crate::context::EventContext;
use crate::eval::{self, EvalError, Scope, Status, V};
use crate::filters::Filter;

/// A workflow file that could not be read, or an expression in it that could
/// not be evaluated. Names the file and, where known, the field and line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkflowError {
    /// The workflow file, as given to [`Workflow::parse`].
    pub file: String,
    /// The field, as a dotted path (`jobs.setup.if`), when known.
    pub field: Option<String>,
    /// 1-based line, when the YAML parser gives one.
    pub line: Option<usize>,
    /// 1-based column, when the YAML parser gives one.
    pub column: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for WorkflowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.file)?;
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(f, ":{l}:{c}")?,
            (Some(l), None) => write!(f, ":{l}")?,
            _ => {}
        }
        if let Some(field) = &self.field {
            write!(f, ": field `{field}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for WorkflowError {}

/// Activity types a `pull_request` trigger has when it lists none.
pub const DEFAULT_PULL_REQUEST_TYPES: &[&str] = &["opened", "synchronize", "reopened"];

/// The HTTP status GitHub answers a refused `workflow_dispatch` with.
pub const DISPATCH_REFUSAL_STATUS: u16 = 422;

/// The type of a `workflow_dispatch` input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputType {
    /// `type: boolean`; the `inputs` context holds a boolean.
    Boolean,
    /// `type: choice`; the value must be one of `options`.
    Choice,
    /// `type: string` (also the default).
    String,
    /// `type: number`; the `inputs` context holds a number.
    Number,
    /// `type: environment`; the name of a deployment environment.
    Environment,
}

/// One declared `workflow_dispatch` input.
#[derive(Debug, Clone, PartialEq)]
pub struct DispatchInput {
    /// The input name (the key under `inputs:`).
    pub name: String,
    /// `description:`.
    pub description: Option<String>,
    /// `required:`.
    pub required: bool,
    /// `type:`.
    pub kind: InputType,
    /// `default:`, as written (string, boolean or number).
    pub default: Option<Json>,
    /// `options:` of a choice input, stringified.
    pub options: Vec<String>,
}

/// Why GitHub refuses a `workflow_dispatch` (HTTP 422). `message` is the text
/// GitHub puts in the response's `message` field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DispatchRefusal {
    /// GitHub's message.
    pub message: String,
    /// The inputs the refusal is about.
    pub inputs: Vec<String>,
}

/// Dispatch inputs after GitHub's validation, with defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedInputs {
    typed: Map<String, Json>,
    strings: Map<String, Json>,
}

impl ResolvedInputs {
    /// The `inputs` context: booleans and numbers keep their type.
    pub fn context(&self) -> &Map<String, Json> {
        &self.typed
    }

    /// `github.event.inputs`: every value as a string, as in the payload.
    pub fn event_inputs(&self) -> &Map<String, Json> {
        &self.strings
    }
}

/// A concurrency group evaluated for one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConcurrencyGroup {
    /// The group name. GitHub compares groups case-insensitively.
    pub group: String,
    /// Whether a new run cancels the in-progress one in the same group.
    pub cancel_in_progress: bool,
}

impl ConcurrencyGroup {
    /// Whether two runs share a group (case-insensitive, as on GitHub).
    pub fn same_group(&self, other: &ConcurrencyGroup) -> bool {
        self.group.to_lowercase() == other.group.to_lowercase()
    }
}

/// The result of a finished job, as `needs.<job>.result` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobResult {
    /// `success`.
    Success,
    /// `failure`.
    Failure,
    /// `cancelled`.
    Cancelled,
    /// `skipped`.
    Skipped,
}

impl JobResult {
    /// The string GitHub uses.
    pub fn as_str(self) -> &'static str {
        match self {
            JobResult::Success => "success",
            JobResult::Failure => "failure",
            JobResult::Cancelled => "cancelled",
            JobResult::Skipped => "skipped",
        }
    }
}

/// Whether a job runs for the event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobDecision {
    /// Its condition holds.
    Runs,
    /// Its condition is false (or a needed job did not succeed).
    Skipped,
    /// Its condition reads values only known while the run executes (job or
    /// step outputs, matrix values) or depends on a job that may run. The
    /// job may run; callers that must decide treat it as running.
    MayRun,
}

/// One job of a [`JobPlan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedJob {
    /// The job id (the key under `jobs:`).
    pub id: String,
    /// The job's `name:`, when set.
    pub name: Option<String>,
    /// Direct `needs`.
    pub needs: Vec<String>,
    /// Whether it runs.
    pub decision: JobDecision,
    /// The result assumed for it when later jobs were planned; `None` when
    /// that result cannot be known before the run.
    pub assumed_result: Option<JobResult>,
}

/// What a run's jobs do for one event, in dependency order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPlan {
    /// Every job, dependencies before dependants.
    pub jobs: Vec<PlannedJob>,
}

/// Whether a run has work to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOutlook {
    /// Every job is skipped: GitHub concludes the run `skipped`.
    Skipped,
    /// At least one job runs.
    Runs,
    /// No job certainly runs, but some may.
    MayRun,
}

impl JobPlan {
    /// The planned job with this id.
    pub fn job(&self, id: &str) -> Option<&PlannedJob> {
        self.jobs.iter().find(|j| j.id == id)
    }

    /// Whether the run has work to do.
    pub fn outlook(&self) -> RunOutlook {
        if self.jobs.iter().any(|j| j.decision == JobDecision::Runs) {
            RunOutlook::Runs
        } else if self.jobs.iter().any(|j| j.decision == JobDecision::MayRun) {
            RunOutlook::MayRun
        } else {
            RunOutlook::Skipped
        }
    }

    /// The conclusion GitHub gives the run before any job executes:
    /// `Some("skipped")` when every job is skipped, otherwise `None` (the
    /// jobs decide).
    pub fn conclusion(&self) -> Option<&'static str> {
        (self.outlook() == RunOutlook::Skipped).then_some("skipped")
    }
}

/// Results and outputs to assume for jobs while planning, in place of the
/// default (a job that runs succeeds, its outputs are unknown).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Assumptions {
    results: HashMap<String, JobResult>,
    outputs: HashMap<String, Map<String, Json>>,
}

impl Assumptions {
    /// Assume this result for a job that runs.
    pub fn result(mut self, job: &str, result: JobResult) -> Self {
        self.results.insert(job.to_string(), result);
        self
    }

    /// Assume these outputs for a job that runs.
    pub fn outputs(mut self, job: &str, outputs: Map<String, Json>) -> Self {
        self.outputs.insert(job.to_string(), outputs);
        self
    }
}

/// An `actions/upload-artifact` step, found in a workflow or in a reusable
/// workflow it calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactUpload {
    /// The workflow file holding the step.
    pub workflow: String,
    /// The job holding the step.
    pub job: String,
    /// The step's `name:`.
    pub step: Option<String>,
    /// The artifact name as written (may hold `${{ }}`); `artifact` when the
    /// step sets none, as upload-artifact does.
    pub name: String,
    /// The step's `if:`, as written.
    pub condition: Option<String>,
    /// The calling jobs, outermost first, when reached through reusable
    /// workflows (`caller.yml#job`).
    pub via: Vec<String>,
}

impl ArtifactUpload {
    /// The artifact name when it holds no expression.
    pub fn literal_name(&self) -> Option<&str> {
        (!self.name.contains("${{")).then_some(self.name.as_str())
    }

    /// Whether the step's `if:` holds for the event: `Some(true)` when the
    /// step runs if its job runs, `Some(false)` when it never does, `None`
    /// when the condition reads values only known while the run executes
    /// (steps, matrix, env; and the inputs of a reusable workflow, which its
    /// caller's `with:` sets). Like GitHub, a condition without a status
    /// function means `success() && …`; earlier steps are assumed to
    /// succeed.
    pub fn condition_holds(&self, ctx: &EventContext) -> Result<Option<bool>, WorkflowError> {
        let Some(cond) = &self.condition else {
            return Ok(Some(true));
        };
        let needs = V::Unknown;
        let scope = Scope {
            github: ctx.github(),
            inputs: self.via.is_empty().then(|| ctx.inputs()),
            vars: ctx.vars(),
            needs: Some(&needs),
            status: Status::FRESH,
        };
        eval::eval_condition(cond, &scope).map_err(|e| WorkflowError {
            file: self.workflow.clone(),
            field: Some(format!("jobs.{}.steps.if", self.job)),
            line: None,
            column: None,
            message: e.to_string(),
        })
    }

    /// Whether the step can produce an artifact called `name`. Literal text
    /// must match; a `${{ }}` matches its possible literal values where the
    /// expression only chooses between literals (`inputs.x && 'a' || 'b'`),
    /// and any text where it reads a context (`env.RESULT_FILENAME`).
    pub fn may_be_named(&self, name: &str) -> bool {
        eval::template_pattern(&self.name)
            .ok()
            .and_then(|p| regex::Regex::new(&p).ok())
            .is_some_and(|r| r.is_match(name))
    }
}

/// A parsed workflow file.
#[derive(Debug)]
pub struct Workflow {
    file: String,
    path: String,
    model: model::Workflow,
    order: Vec<String>,
    inputs: Option<Vec<DispatchInput>>,
    pull_request: Option<PrTrigger>,
    pull_request_target: Option<PrTrigger>,
    push: Option<PushTrigger>,
    other_events: Json,
    uses_status: HashMap<String, bool>,
}

/// Maximum depth of reusable-workflow calls followed (GitHub allows 10 levels).
const MAX_CALL_DEPTH: usize = 10;

impl Workflow {
    /// Parses a workflow file. `file_name` is the file's name (`run-sweep.yml`)
    /// or its repository path (`.github/workflows/run-sweep.yml`); errors name
    /// it. Every expression Klaud evaluates (run-name, concurrency, job `if:`)
    /// is checked here, as are `needs` references and filter patterns.
    pub fn parse(file_name: &str, text: &str) -> Result<Self, WorkflowError> {
        let err = |field: Option<String>, message: String| WorkflowError {
            file: file_name.to_string(),
            field,
            line: None,
            column: None,
            message,
        };
        let de = yaml_serde::Deserializer::from_str(text);
        let model: model::Workflow = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            let loc = inner.location();
            WorkflowError {
                file: file_name.to_string(),
                field: (path != ".").then_some(path),
                line: loc.as_ref().map(|l| l.line()),
                column: loc.as_ref().map(|l| l.column()),
                message: inner.to_string(),
            }
        })?;
        // The models crate does not keep input defaults; read them from the
        // plain YAML tree (the text parsed above, so this cannot fail).
        let raw: yaml_serde::Value =
            yaml_serde::from_str(text).map_err(|e| err(None, e.to_string()))?;

        let path = if file_name.contains('/') {
            file_name.to_string()
        } else {
            format!(".github/workflows/{file_name}")
        };

        let check = |field: String, result: Result<(), EvalError>| {
            result.map_err(|e| err(Some(field), e.to_string()))
        };
        if let Some(run_name) = &model.run_name {
            check("run-name".into(), eval::check_template(run_name))?;
        }
        if let Some(c) = &model.concurrency {
            check_concurrency(c, "concurrency", &check)?;
        }
        let mut uses_status = HashMap::new();
        for (id, job) in &model.jobs {
            let (cond, needs, concurrency) = job_parts(job);
            if let Some(If::Expr(cond)) = cond {
                let field = format!("jobs.{id}.if");
                check(field.clone(), eval::check_condition(cond))?;
                let uses = eval::condition_uses_status(cond)
                    .map_err(|e| err(Some(field), e.to_string()))?;
                uses_status.insert(id.clone(), uses);
            }
            if let Some(c) = concurrency {
                check_concurrency(c, &format!("jobs.{id}.concurrency"), &check)?;
            }
            for need in needs {
                if !model.jobs.contains_key(need) {
                    return Err(err(
                        Some(format!("jobs.{id}.needs")),
                        format!("job '{id}' depends on unknown job '{need}'"),
                    ));
                }
            }
        }
        let order = topological_order(&model).map_err(|id| {
            err(
                Some(format!("jobs.{id}.needs")),
                format!("job '{id}' is part of a dependency cycle"),
            )
        })?;

        let events = &model.on.events;
        let inputs = match &events.workflow_dispatch {
            OptionalBody::Missing => None,
            OptionalBody::Default => Some(Vec::new()),
            OptionalBody::Body(body) => Some(
                body.inputs
                    .iter()
                    .map(|(name, input)| {
                        let default = raw
                            .get("on")
                            .and_then(|on| on.get("workflow_dispatch"))
                            .and_then(|d| d.get("inputs"))
                            .and_then(|i| i.get(name.as_str()))
                            .and_then(|i| i.get("default"))
                            .and_then(|d| serde_json::to_value(d).ok())
                            .filter(|d| !d.is_null());
                        DispatchInput {
                            name: name.clone(),
                            description: input.description.clone(),
                            required: input.required,
                            kind: match input.r#type {
                                WorkflowDispatchInputType::Boolean => InputType::Boolean,
                                WorkflowDispatchInputType::Choice => InputType::Choice,
                                WorkflowDispatchInputType::Environment => InputType::Environment,
                                WorkflowDispatchInputType::Number => InputType::Number,
                                WorkflowDispatchInputType::String => InputType::String,
                            },
                            default,
                            options: input.options.iter().map(EnvValue::to_string).collect(),
                        }
                    })
                    .collect(),
            ),
        };
        check_filter_shapes(&raw).map_err(|(field, message)| err(Some(field), message))?;
        let field = |event: &str| Some(format!("on.{event}"));
        let pull_request =
            pr_trigger(&events.pull_request).map_err(|m| err(field("pull_request"), m))?;
        let pull_request_target = pr_trigger(&events.pull_request_target)
            .map_err(|m| err(field("pull_request_target"), m))?;
        let push = push_trigger(&events.push).map_err(|m| err(field("push"), m))?;
        let other_events = serde_json::to_value(&**events).unwrap_or(Json::Null);

        Ok(Self {
            file: file_name.to_string(),
            path,
            model,
            order,
            inputs,
            pull_request,
            pull_request_target,
            push,
            other_events,
            uses_status,
        })
    }

    /// The file name given to [`Workflow::parse`].
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The workflow's name: `name:`, or its path in the repository
    /// (`.github/workflows/x.yml`) when it has none, as GitHub shows it.
    pub fn name(&self) -> &str {
        self.model
            .name
            .as_deref()
            .filter(|n| !n.trim().is_empty())
            .unwrap_or(&self.path)
    }

    /// Job ids in dependency order.
    pub fn job_ids(&self) -> &[String] {
        &self.order
    }

    /// The underlying model, for anything this crate does not interpret.
    pub fn model(&self) -> &model::Workflow {
        &self.model
    }

    fn err(&self, field: &str, e: impl std::fmt::Display) -> WorkflowError {
        WorkflowError {
            file: self.file.clone(),
            field: Some(field.to_string()),
            line: None,
            column: None,
            message: e.to_string(),
        }
    }

    fn scope<'a>(&self, ctx: &'a EventContext) -> Scope<'a> {
        Scope {
            github: ctx.github(),
            inputs: Some(ctx.inputs()),
            vars: ctx.vars(),
            needs: None,
            status: Status::FRESH,
        }
    }

    /// The run's title (`display_title`): `run-name` evaluated against the
    /// event. Without `run-name`, or when it evaluates to whitespace, GitHub
    /// uses event-specific information: the PR title for pull request
    /// events, the head commit message for `push`, and the workflow name
    /// otherwise (`workflow_dispatch`, `schedule`, …).
    pub fn run_title(&self, ctx: &EventContext) -> Result<String, WorkflowError> {
        if let Some(run_name) = &self.model.run_name {
            let title = eval::eval_string(run_name, &self.scope(ctx))
                .map_err(|e| self.err("run-name", e))?;
            if !title.trim().is_empty() {
                return Ok(title);
            }
        }
        let event = ctx.event();
        let fallback = match ctx.event_name() {
            "pull_request"
            | "pull_request_target"
            | "pull_request_review"
            | "pull_request_review_comment" => {
                event.pointer("/pull_request/title").and_then(Json::as_str)
            }
            "push" => event.pointer("/head_commit/message").and_then(Json::as_str),
            _ => None,
        };
        Ok(fallback.unwrap_or(self.name()).to_string())
    }

    /// The declared `workflow_dispatch` inputs, in file order; `None` when
    /// the workflow has no `workflow_dispatch` trigger.
    pub fn dispatch_inputs(&self) -> Option<&[DispatchInput]> {
        self.inputs.as_deref()
    }

    /// Validates `workflow_dispatch` inputs as GitHub's API does before
    /// creating a run, and applies defaults. The refusal carries the message
    /// GitHub answers with HTTP 422 ([`DISPATCH_REFUSAL_STATUS`]).
    ///
    /// Values may be strings, booleans or numbers. Undeclared inputs are
    /// refused first, all named at once; then each declared input in file
    /// order: a required input without a value or default is refused, a
    /// boolean must be `true`/`false`, a choice one of its options. Number
    /// inputs are not checked further.
    pub fn validate_dispatch(
        &self,
        given: &Map<String, Json>,
    ) -> Result<ResolvedInputs, DispatchRefusal> {
        let Some(declared) = &self.inputs else {
            return Err(DispatchRefusal {
                message: "Workflow does not have 'workflow_dispatch' trigger".into(),
                inputs: Vec::new(),
            });
        };
        let unexpected: Vec<String> = given
            .keys()
            .filter(|k| !declared.iter().any(|d| &d.name == *k))
            .cloned()
            .collect();
        if !unexpected.is_empty() {
            let list = unexpected
                .iter()
                .map(|n| Json::String(n.clone()).to_string())
                .collect::<Vec<_>>()
                .join(", ");
            return Err(DispatchRefusal {
                message: format!("Unexpected inputs provided: [{list}]"),
                inputs: unexpected,
            });
        }
        let mut typed = Map::new();
        let mut strings = Map::new();
        for input in declared {
            let value = match given.get(&input.name) {
                Some(v @ (Json::String(_) | Json::Bool(_) | Json::Number(_))) => Some(v.clone()),
                Some(other) => {
                    return Err(DispatchRefusal {
                        message: format!(
                            "For 'properties/{}', {other} is not a string.",
                            input.name
                        ),
                        inputs: vec![input.name.clone()],
                    });
                }
                None => None,
            };
            let value = match (value, &input.default) {
                (Some(v), _) => v,
                (None, Some(d)) => d.clone(),
                (None, None) if input.required => {
                    return Err(DispatchRefusal {
                        message: format!("Required input '{}' not provided", input.name),
                        inputs: vec![input.name.clone()],
                    });
                }
                (None, None) => match input.kind {
                    InputType::Boolean => Json::Bool(false),
                    _ => Json::String(String::new()),
                },
            };
            let text = eval::stringify(&value);
            let not_allowed = || DispatchRefusal {
                message: format!(
                    "Provided value '{text}' for input '{}' not in the list of allowed values",
                    input.name
                ),
                inputs: vec![input.name.clone()],
            };
            let typed_value = match input.kind {
                InputType::Boolean => match text.as_str() {
                    "true" => Json::Bool(true),
                    "false" => Json::Bool(false),
                    _ => return Err(not_allowed()),
                },
                InputType::Choice => {
                    if !input.options.contains(&text) {
                        return Err(not_allowed());
                    }
                    Json::String(text.clone())
                }
                InputType::Number => text
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .and_then(|n| {
                        if n.fract() == 0.0 && n.abs() < 9.0e15 {
                            Some(Json::from(n as i64))
                        } else {
                            serde_json::Number::from_f64(n).map(Json::Number)
                        }
                    })
                    .unwrap_or(Json::String(text.clone())),
                InputType::String | InputType::Environment => Json::String(text.clone()),
            };
            typed.insert(input.name.clone(), typed_value);
            strings.insert(input.name.clone(), Json::String(text));
        }
        Ok(ResolvedInputs { typed, strings })
    }

    /// The workflow-level concurrency group for the event, when declared.
    pub fn concurrency(
        &self,
        ctx: &EventContext,
    ) -> Result<Option<ConcurrencyGroup>, WorkflowError> {
        let Some(c) = &self.model.concurrency else {
            return Ok(None);
        };
        self.eval_concurrency(c, "concurrency", &self.scope(ctx))
            .map(Some)
    }

    /// A job's own concurrency group for the event, when declared. Values
    /// from `needs` outputs or the matrix make this an error (they are only
    /// known while the run executes).
    pub fn job_concurrency(
        &self,
        job: &str,
        ctx: &EventContext,
    ) -> Result<Option<ConcurrencyGroup>, WorkflowError> {
        let field = format!("jobs.{job}.concurrency");
        let Some(j) = self.model.jobs.get(job) else {
            return Err(self.err(&format!("jobs.{job}"), format!("no job '{job}'")));
        };
        let Some(c) = job_parts(j).2 else {
            return Ok(None);
        };
        let needs = V::Unknown;
        let mut scope = self.scope(ctx);
        scope.needs = Some(&needs);
        self.eval_concurrency(c, &field, &scope).map(Some)
    }

    fn eval_concurrency(
        &self,
        c: &Concurrency,
        field: &str,
        scope: &Scope<'_>,
    ) -> Result<ConcurrencyGroup, WorkflowError> {
        let (group, cancel) = match c {
            Concurrency::Bare(group) => (group, None),
            Concurrency::Rich {
                group,
                cancel_in_progress,
            } => (group, Some(cancel_in_progress)),
        };
        let group =
            eval::eval_string(group, scope).map_err(|e| self.err(&format!("{field}.group"), e))?;
        let cancel_in_progress = match cancel {
            None => false,
            Some(LoE::Literal(b)) => *b,
            Some(LoE::Expr(e)) => eval::eval_template(e.as_raw(), scope)
                .map_err(|err| self.err(&format!("{field}.cancel-in-progress"), err))?
                .truthy()
                .ok_or_else(|| {
                    self.err(
                        &format!("{field}.cancel-in-progress"),
                        EvalError::NotKnowable(e.as_raw().to_string()),
                    )
                })?,
        };
        Ok(ConcurrencyGroup {
            group,
            cancel_in_progress,
        })
    }

    /// Decides which jobs run for the event, assuming every job that runs
    /// succeeds. See [`Workflow::plan_jobs_assuming`].
    pub fn plan_jobs(&self, ctx: &EventContext) -> Result<JobPlan, WorkflowError> {
        self.plan_jobs_assuming(ctx, &Assumptions::default())
    }

    /// Decides which jobs run for the event.
    ///
    /// Each job's `if:` is evaluated in dependency order with the `needs`
    /// context of its direct dependencies. A condition without a status
    /// function is `success() && <condition>`, as on GitHub, and status
    /// functions look at every upstream job, transitively (so a job whose
    /// ancestor was skipped is skipped even when its direct dependency ran
    /// under `always()`, as GitHub does; actions/runner#491). A job that runs
    /// is assumed to end with the result given in `assumed` (default:
    /// success); a skipped job's outputs are empty; the outputs of a job that
    /// runs are unknown unless given. Conditions reading unknown values make
    /// the job [`JobDecision::MayRun`], and so its dependants' view of it.
    pub fn plan_jobs_assuming(
        &self,
        ctx: &EventContext,
        assumed: &Assumptions,
    ) -> Result<JobPlan, WorkflowError> {
        let mut results: HashMap<&str, Option<JobResult>> = HashMap::new();
        let mut planned = Vec::with_capacity(self.order.len());
        for id in &self.order {
            let job = &self.model.jobs[id];
            let (cond, needs, _) = job_parts(job);
            let ancestors = self.ancestors(id);
            let known: Vec<Option<JobResult>> =
                ancestors.iter().map(|a| results[a.as_str()]).collect();
            let success = if known
                .iter()
                .any(|r| matches!(r, Some(r) if *r != JobResult::Success))
            {
                Some(false)
            } else if known.iter().all(Option::is_some) {
                Some(true)
            } else {
                None
            };
            let failure = if known.contains(&Some(JobResult::Failure)) {
                Some(true)
            } else if known.iter().all(Option::is_some) {
                Some(false)
            } else {
                None
            };
            let needs_ctx = V::Partial(
                needs
                    .iter()
                    .map(|n| {
                        let result = results[n.as_str()];
                        let outputs = match (result, assumed.outputs.get(n)) {
                            (Some(JobResult::Skipped), _) => V::Json(Json::Object(Map::new())),
                            (Some(_), Some(outputs)) => V::Json(Json::Object(outputs.clone())),
                            _ => V::Unknown,
                        };
                        let result =
                            result.map_or(V::Unknown, |r| V::Json(Json::String(r.as_str().into())));
                        (
                            n.clone(),
                            V::Partial(vec![
                                ("result".into(), result),
                                ("outputs".into(), outputs),
                            ]),
                        )
                    })
                    .collect(),
            );
            let scope = Scope {
                github: ctx.github(),
                inputs: Some(ctx.inputs()),
                vars: ctx.vars(),
                needs: Some(&needs_ctx),
                status: Status { success, failure },
            };
            let truth = match cond {
                None => success,
                Some(If::Bool(b)) => and(success, Some(*b)),
                Some(If::Expr(src)) => {
                    let value = eval::eval_condition(src, &scope)
                        .map_err(|e| self.err(&format!("jobs.{id}.if"), e))?;
                    if self.uses_status.get(id).copied().unwrap_or(false) {
                        value
                    } else {
                        and(success, value)
                    }
                }
            };
            let (decision, result) = match truth {
                Some(true) => (
                    JobDecision::Runs,
                    Some(
                        assumed
                            .results
                            .get(id)
                            .copied()
                            .unwrap_or(JobResult::Success),
                    ),
                ),
                Some(false) => (JobDecision::Skipped, Some(JobResult::Skipped)),
                None => (JobDecision::MayRun, None),
            };
            results.insert(id.as_str(), result);
            planned.push(PlannedJob {
                id: id.clone(),
                name: job.name().map(str::to_string),
                needs: needs.to_vec(),
                decision,
                assumed_result: result,
            });
        }
        Ok(JobPlan { jobs: planned })
    }

    fn ancestors(&self, id: &str) -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<&str> = job_parts(&self.model.jobs[id])
            .1
            .iter()
            .map(String::as_str)
            .collect();
        while let Some(next) = stack.pop() {
            if seen.insert(next.to_string()) {
                stack.extend(
                    job_parts(&self.model.jobs[next])
                        .1
                        .iter()
                        .map(String::as_str),
                );
            }
        }
        seen
    }

    /// Whether any job runs (or may run) for a draft pull request that
    /// carries `label`, for the events Klaud causes on its own PRs: the
    /// label being added, and a push to the PR while it carries the label.
    /// The probe PR comes from a branch of the same repository. Answers from
    /// the job conditions only; triggers and `paths` are the caller's
    /// concern ([`Workflow::triggered_by`]).
    pub fn runs_on_draft(&self, label: &str) -> Result<bool, WorkflowError> {
        for action in ["labeled", "synchronize"] {
            let mut event = serde_json::json!({
                "action": action,
                "pull_request": {
                    "number": 1,
                    "title": "probe",
                    "draft": true,
                    "state": "open",
                    "labels": [{"name": label}],
                    "user": {"login": "probe"},
                    "head": {"ref": "probe", "sha": "0000000000000000000000000000000000000000", "repo": {"full_name": "probe/repo"}},
                    "base": {"ref": "main", "sha": "0000000000000000000000000000000000000000", "repo": {"full_name": "probe/repo"}},
                },
                "repository": {"full_name": "probe/repo", "owner": {"login": "probe"}},
                "sender": {"login": "probe"},
            });
            if action == "labeled" {
                event["label"] = serde_json::json!({"name": label});
            }
            let ctx = EventContext::new("pull_request", event)
                .map_err(|e| self.err("on.pull_request", e))?
                .with_github("run_id", Json::from(1));
            if self.plan_jobs(&ctx)?.outlook() != RunOutlook::Skipped {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Every `actions/upload-artifact` step of the workflow, including steps
    /// in reusable workflows it calls with `uses: ./.github/workflows/x.yml`
    /// (or `$/…`). `resolve` gets the called file's repository path
    /// (`.github/workflows/x.yml`) and returns its text, or `None` when it is
    /// not available (then that call is not followed). Calls into other
    /// repositories are not followed.
    pub fn artifact_uploads(
        &self,
        resolve: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Vec<ArtifactUpload>, WorkflowError> {
        let mut out = Vec::new();
        let mut visiting = vec![self.path.clone()];
        self.collect_uploads(resolve, &mut Vec::new(), &mut visiting, &mut out)?;
        Ok(out)
    }

    /// The jobs (ids, dependencies first) with a `run:` step whose script
    /// contains `text`: where a workflow calls a given script or module.
    pub fn jobs_running(&self, text: &str) -> Vec<String> {
        self.order
            .iter()
            .filter(|id| match &self.model.jobs[id.as_str()] {
                Job::NormalJob(job) => job.steps.iter().any(|step| match step {
                    Step::Run(r) => r.run.contains(text),
                    Step::Parallel { parallel } => parallel
                        .iter()
                        .any(|p| matches!(p, ParallelStep::Run(r) if r.run.contains(text))),
                    _ => false,
                }),
                Job::ReusableWorkflowCallJob(_) => false,
            })
            .cloned()
            .collect()
    }

    /// Whether some upload step can produce an artifact called `name`.
    pub fn may_upload(
        &self,
        name: &str,
        resolve: &dyn Fn(&str) -> Option<String>,
    ) -> Result<bool, WorkflowError> {
        Ok(self
            .artifact_uploads(resolve)?
            .iter()
            .any(|u| u.may_be_named(name)))
    }

    fn collect_uploads(
        &self,
        resolve: &dyn Fn(&str) -> Option<String>,
        via: &mut Vec<String>,
        visiting: &mut Vec<String>,
        out: &mut Vec<ArtifactUpload>,
    ) -> Result<(), WorkflowError> {
        for id in &self.order {
            match &self.model.jobs[id] {
                Job::NormalJob(job) => {
                    for step in &job.steps {
                        let uses_steps: Vec<&UsesStep> = match step {
                            Step::Uses(u) => vec![u],
                            Step::Parallel { parallel } => parallel
                                .iter()
                                .filter_map(|p| match p {
                                    ParallelStep::Uses(u) => Some(u),
                                    ParallelStep::Run(_) => None,
                                })
                                .collect(),
                            _ => Vec::new(),
                        };
                        for u in uses_steps {
                            if let Some(upload) = self.upload_of(id, u, via) {
                                out.push(upload);
                            }
                        }
                    }
                }
                Job::ReusableWorkflowCallJob(call) => {
                    let Uses::Local(local) = &call.uses else {
                        continue;
                    };
                    let raw = local.raw();
                    let target = raw
                        .strip_prefix("./")
                        .or_else(|| raw.strip_prefix("$/"))
                        .unwrap_or(raw);
                    if visiting.iter().any(|v| v == target) || visiting.len() > MAX_CALL_DEPTH {
                        continue;
                    }
                    let Some(text) = resolve(target) else {
                        continue;
                    };
                    let called = Workflow::parse(target, &text)?;
                    via.push(format!("{}#{id}", self.file));
                    visiting.push(target.to_string());
                    let result = called.collect_uploads(resolve, via, visiting, out);
                    visiting.pop();
                    via.pop();
                    result?;
                }
            }
        }
        Ok(())
    }

    fn upload_of(&self, job: &str, step: &UsesStep, via: &[String]) -> Option<ArtifactUpload> {
        let Uses::Repository(repo) = &step.uses else {
            return None;
        };
        if !(repo.owner().eq_ignore_ascii_case("actions")
            && repo.repo().eq_ignore_ascii_case("upload-artifact"))
        {
            return None;
        }
        let name = match &step.with {
            LoE::Literal(with) => with.get("name").map(EnvValue::to_string),
            LoE::Expr(e) => Some(e.as_raw().to_string()),
        };
        Some(ArtifactUpload {
            workflow: self.file.clone(),
            job: job.to_string(),
            step: step.shared.name.clone(),
            name: name
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| "artifact".into()),
            condition: step.shared.r#if.as_ref().map(|c| match c {
                If::Bool(b) => b.to_string(),
                If::Expr(e) => e.clone(),
            }),
            via: via.to_vec(),
        })
    }
}

fn and(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(false), _) | (_, Some(false)) => Some(false),
        (Some(true), Some(true)) => Some(true),
        _ => None,
    }
}

fn job_parts(job: &Job) -> (Option<&If>, &[String], Option<&Concurrency>) {
    match job {
        Job::NormalJob(j) => (j.r#if.as_ref(), &j.needs, j.concurrency.as_ref()),
        Job::ReusableWorkflowCallJob(j) => (j.r#if.as_ref(), &j.needs, None),
    }
}

fn check_concurrency(
    c: &Concurrency,
    field: &str,
    check: &dyn Fn(String, Result<(), EvalError>) -> Result<(), WorkflowError>,
) -> Result<(), WorkflowError> {
    match c {
        Concurrency::Bare(group) => check(field.to_string(), eval::check_template(group)),
        Concurrency::Rich {
            group,
            cancel_in_progress,
        } => {
            check(format!("{field}.group"), eval::check_template(group))?;
            if let LoE::Expr(e) = cancel_in_progress {
                check(
                    format!("{field}.cancel-in-progress"),
                    eval::check_template(e.as_raw()),
                )?;
            }
            Ok(())
        }
    }
}

/// Jobs in dependency order (file order among independent jobs); `Err`
/// names a job on a cycle.
fn topological_order(model: &model::Workflow) -> Result<Vec<String>, String> {
    let mut order: Vec<String> = Vec::with_capacity(model.jobs.len());
    let mut placed: BTreeSet<&str> = BTreeSet::new();
    while order.len() < model.jobs.len() {
        let before = order.len();
        for (id, job) in &model.jobs {
            if placed.contains(id.as_str()) {
                continue;
            }
            if job_parts(job).1.iter().all(|n| placed.contains(n.as_str())) {
                placed.insert(id);
                order.push(id.clone());
            }
        }
        if order.len() == before {
            let stuck = model
                .jobs
                .keys()
                .find(|id| !placed.contains(id.as_str()))
                .cloned()
                .unwrap_or_default();
            return Err(stuck);
        }
    }
    Ok(order)
}

mod triggers;

pub use triggers::TriggerRefusal;
use triggers::{PrTrigger, PushTrigger, check_filter_shapes, pr_trigger, push_trigger};

#[cfg(test)]
mod tests;
