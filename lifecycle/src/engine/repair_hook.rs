//! The repair hook's side of the engine: what a repair is told
//! ([`RepairContext`]), what it may answer ([`RepairOutcome`]) and the
//! [`RepairHook`] trait the service implements (the step that calls it is
//! `steps::repair`).

use crate::model::{Phase, RunRef};
use async_trait::async_trait;
use klaud_claims::{CandidateId, CommitSha, PullNumber};
use serde::Serialize;
use serde_json::Value;

/// The version of [`RepairContext`] as a hook reads it (2: `report` is the
/// failed attempt's typed report record, not a `[kind, status]` pair).
pub const REPAIR_INPUT_VERSION: u32 = 2;

/// What the repair hook gets (as JSON on stdin for a command hook).
#[derive(Debug, Clone, Serialize)]
pub struct RepairContext {
    /// Version of this input ([`REPAIR_INPUT_VERSION`]); a change that
    /// renames or removes a field bumps it.
    pub version: u32,
    /// Candidate id.
    pub candidate: CandidateId,
    /// Family string (`configs/<file>:<key>`).
    pub family: String,
    /// Config key.
    pub key: String,
    /// The candidate image.
    pub image: String,
    /// `owner/name`.
    pub repository: String,
    /// The branch to push the repair to.
    pub branch: String,
    /// Its current head.
    pub head: CommitSha,
    /// The pull request.
    pub pull_request: Option<PullNumber>,
    /// The failed run.
    pub run: Option<RunRef>,
    /// Which repair this is, from 1.
    pub repair: u32,
    /// The budget.
    pub budget: u32,
    /// Repairs left after this one.
    pub budget_left: u32,
    /// What failed: `targeted` (the smoke) or `final-sweep`.
    pub phase: Phase,
    /// The failed attempt's typed report record as published on the PR
    /// (tables, notes, failed jobs); `null` when it cannot be read back.
    pub report: Value,
    /// The login every pushed commit must be authored by.
    pub author: String,
    /// The trailer line every pushed commit's message must carry
    /// (`Klaud-Candidate: <candidate>`); a commit without it, or by
    /// another author, is a person's, and Klaud hands the PR off.
    pub trailer: String,
    /// The failed run's jobs that did not succeed, with their log pages.
    pub failed_jobs: Vec<crate::report::FailedJob>,
    /// Names of the failed run's artifacts (download them through the
    /// Actions artifacts API).
    pub artifacts: Vec<String>,
}

/// What the repair hook did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepairOutcome {
    /// It pushed a new head to the branch as the bot.
    Pushed,
    /// It found no fix.
    GaveUp(String),
    /// It pushed nothing and proposes these variants instead (the grammar
    /// of `/klaud try`): they join the candidate's experiment as siblings,
    /// and the candidate waits for their race.
    Variants(Vec<crate::engine::TryRequest>),
}

/// Why a repair hook could not say what it did: the candidate ends failed
/// with this message. The hook's own error is kept as the source, since
/// only the implementation knows its kinds (a process, a checkout, a file).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RepairError(#[source] Box<dyn std::error::Error + Send + Sync>);

impl RepairError {
    /// A hook's failure.
    pub fn new(cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Box::new(cause))
    }
}

/// An external repair agent.
#[async_trait]
pub trait RepairHook: Send + Sync {
    /// Tries to repair; returns once a new head is pushed or it gives up.
    async fn repair(&self, context: &RepairContext) -> Result<RepairOutcome, RepairError>;
}
