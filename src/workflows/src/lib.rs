//! `klaud-workflows` reads GitHub Actions workflow files and answers what
//! GitHub would do with them for one event: whether a run starts
//! ([`Workflow::triggered_by`]), its title ([`Workflow::run_title`]), whether
//! a `workflow_dispatch` is accepted ([`Workflow::validate_dispatch`]), which
//! jobs run or are skipped ([`Workflow::plan_jobs`]), its concurrency group
//! ([`Workflow::concurrency`]), its head ([`EventContext::run_head`]), and
//! which artifacts it uploads ([`Workflow::artifact_uploads`]).
//!
//! Workflow files are parsed with `github-actions-models` and expressions
//! with `github-actions-expressions` (both from the zizmor project); the
//! expression evaluator and the filter-pattern matcher are ours (see
//! `eval` and `filters` for why).
//!
//! It is pure: no I/O, no async, no GitHub calls. Files reach it as text and
//! events as JSON. It never panics on hostile input; every refusal names the
//! file and, where known, the field and line.

mod context;
mod eval;
mod filters;
mod set;
mod workflow;

pub use context::{ContextError, EventContext, RunHead};
pub use eval::EvalError;
pub use set::WorkflowSet;
pub use workflow::{
    ArtifactUpload, Assumptions, ConcurrencyGroup, DEFAULT_PULL_REQUEST_TYPES,
    DISPATCH_REFUSAL_STATUS, DispatchInput, DispatchRefusal, InputType, JobDecision, JobPlan,
    JobResult, PlannedJob, ResolvedInputs, RunOutlook, TriggerRefusal, Workflow, WorkflowError,
};
