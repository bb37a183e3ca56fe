//! The workflows at the candidate's base commit and the smoke's dispatch:
//! which inputs the smoke workflow takes, the title its run carries, the
//! sweep's run-name, and finding the run a dispatch made (by title, actor,
//! event, branch and time) or dispatching it once.

use crate::engine::config::{is_smoke_title, smoke_run_label, smoke_test_name};
use crate::engine::context::Progress;
use crate::engine::context::{BaseWorkflows, Engine};
use crate::engine::error::EngineError;
use crate::engine::forge::{Forge as _, ForgeError, Run, RunEvent, RunQuery};
use crate::engine::intent::Intent;
use crate::engine::journal::{CandidateRecord, Step};
use crate::engine::proof::Scope;
use crate::engine::write::Writes as _;
use crate::model::{AttemptStatus, RunRef};
use crate::workflow_contract::{
    SmokeDispatch, Workflow, klaud_smoke_inputs, smoke_dispatch, workflow_path,
};
use chrono::TimeDelta;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// How far GitHub's clock may be behind Klaud's when a run's creation time
/// is compared with the dispatch time.
pub(super) const CLOCK_SKEW: TimeDelta = TimeDelta::minutes(5);

impl Engine<'_> {
    /// The smoke's `test-config` command: every key the bump changes (a
    /// family group is smoked together, as it is bumped together) and
    /// their master files, each once, in repository order.
    pub(super) fn smoke_command(&self, rec: &CandidateRecord) -> Result<String, EngineError> {
        let members = self.bumped_together(&rec.family);
        let mut files: Vec<&str> = Vec::new();
        let mut keys: Vec<&str> = Vec::new();
        for member in &members {
            let family = self.family(member)?;
            if !files.contains(&family.file.as_str()) {
                files.push(&family.file);
            }
            keys.push(&family.key);
        }
        Ok(format!(
            "test-config --config-files {} --config-keys {} --smoke",
            files.join(" "),
            keys.join(" ")
        ))
    }

    /// The smoke workflow's runs the bot dispatched (one listing, charged
    /// each time): where a candidate's and a hunt's smokes are found again
    /// by their titles.
    pub(super) async fn bot_smoke_runs(&self) -> Result<Vec<Run>, EngineError> {
        Ok(self
            .forge
            .list_runs(&RunQuery {
                workflow: self.config.smoke_workflow.clone(),
                event: Some("workflow_dispatch".into()),
                actor: Some(self.forge.bot_login()),
                head_sha: None,
            })
            .await?)
    }

    /// The smoke and sweep workflows at the candidate's base commit.
    pub(super) async fn base_workflows(
        &self,
        sha: &str,
    ) -> Result<Arc<BaseWorkflows>, EngineError> {
        if let Some(w) = self.lock_workflows().get(sha) {
            return Ok(w.clone());
        }
        let mut read = Vec::new();
        for file in [&self.config.smoke_workflow, &self.config.sweep_workflow] {
            let parsed = match self.forge.read_file(&workflow_path(file), sha).await? {
                None => Ok(None),
                Some(bytes) => String::from_utf8(bytes)
                    .map_err(|_| format!("{}: not UTF-8", workflow_path(file)))
                    .and_then(|text| {
                        Workflow::parse(file, &text)
                            .map(Some)
                            .map_err(|e| e.to_string())
                    }),
            };
            read.push(parsed);
        }
        let sweep = read.pop().unwrap_or(Ok(None));
        let smoke = read.pop().unwrap_or(Ok(None));
        let w = Arc::new(BaseWorkflows { smoke, sweep });
        self.lock_workflows().insert(sha.to_owned(), w.clone());
        Ok(w)
    }

    pub(super) fn lock_workflows(
        &self,
    ) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<BaseWorkflows>>> {
        // A poisoned cache only means a panic elsewhere; its entries are
        // still whole (inserted in one call).
        self.workflows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What the smoke of `rec` dispatches and the title its run carries,
    /// from the smoke workflow at the base commit. `Ok(Err(message))`: the
    /// workflow cannot be dispatched as Klaud needs (the candidate ends).
    pub(super) async fn smoke_plan(
        &self,
        rec: &CandidateRecord,
        head: &str,
    ) -> Result<Result<SmokeDispatch, String>, EngineError> {
        let workflows = self.base_workflows(&rec.base_sha).await?;
        let smoke = match &workflows.smoke {
            Ok(w) => w.as_ref(),
            Err(e) => return Ok(Err(e.clone())),
        };
        // The attempt being dispatched is the last one; without one (a
        // rebuild, a cleanup) the title only has to identify the candidate.
        let test_name = match rec.attempts.last() {
            Some(a) => smoke_run_label(
                &rec.key,
                &a.kind.title(),
                rec.owner_run,
                rec.candidate.as_str(),
            ),
            None => smoke_test_name(rec.owner_run, rec.candidate.as_str()),
        };
        let command = match self.smoke_command(rec) {
            Ok(command) => command,
            Err(e) => return Ok(Err(e.to_string())),
        };
        let wanted = klaud_smoke_inputs(head, &command, &test_name);
        Ok(smoke_dispatch(
            smoke,
            &wanted,
            &rec.base_branch,
            &self.forge.bot_login(),
            &format!("e2e Test - {test_name}"),
        )
        .map_err(|e| e.to_string()))
    }

    /// The title GitHub gives the sweep of `pull` (`None`: no sweep file).
    pub(super) async fn sweep_title(
        &self,
        rec: &CandidateRecord,
        pull: &super::forge::Pull,
    ) -> Result<Option<String>, EngineError> {
        let workflows = self.base_workflows(&rec.base_sha).await?;
        let Ok(Some(w)) = &workflows.sweep else {
            return Ok(None);
        };
        // A run-name that does not evaluate is GitHub's problem to show;
        // the run is still recognised by pull request and head.
        Ok(crate::workflow_contract::sweep_title(
            Some(w),
            pull,
            &rec.base_branch,
            &self.forge.repo(),
            &self.config.sweep_label,
        )
        .ok()
        .flatten())
    }

    /// Finds the run this attempt dispatched, or dispatches it. A
    /// dispatched run's `head_sha` is the tip of the dispatched branch, not
    /// the candidate head, so the run is found by what Klaud controls: its
    /// title (which echoes the test name), actor, event, branch, and a
    /// creation time after the dispatch.
    // Kept whole (about 100 lines): the search and the dispatch are one
    // unit; the dispatch comes only after the search found nothing, and the
    // intent recorded between them makes a restart search, never dispatch
    // twice.
    pub(super) async fn find_or_dispatch(
        &self,
        rec: &mut CandidateRecord,
        idx: usize,
        plan: SmokeDispatch,
    ) -> Result<Progress, EngineError> {
        let title = plan.title.as_str();
        let known: Vec<u64> = rec.runs().iter().map(|r| r.id).collect();
        // An attempt of a record that opened its PR, never dispatched (its
        // `dispatched_at` is saved before any dispatch), has no run to find:
        // the listing, charged every time, is only asked when one may exist.
        let never_dispatched = rec.pull_opened_here && rec.attempts[idx].dispatched_at.is_none();
        let runs = if never_dispatched {
            Vec::new()
        } else {
            self.bot_smoke_runs().await?
        };
        // Clocks of Klaud and GitHub differ a little; a run of an earlier
        // attempt is excluded by id (`known`) anyway.
        let after = rec.attempts[idx].dispatched_at.map(|t| t - CLOCK_SKEW);
        let created_after = |r: &Run| match (after, r.created_at) {
            (Some(after), Some(at)) => at >= after,
            _ => true,
        };
        // Newest first: the oldest unknown run is the one of this attempt.
        if let Some(found) = runs.iter().rev().find(|r| {
            // A run dispatched before titles named the family is found by
            // the candidate's identity at the end of its title: not found,
            // it would be dispatched again and the GPUs spent twice.
            (r.title == title || is_smoke_title(&r.title, rec.owner_run, rec.candidate.as_str()))
                && r.event == RunEvent::WorkflowDispatch
                && self.by_bot(r.actor.as_deref())
                && r.head_branch
                    .as_deref()
                    .is_none_or(|b| b == rec.base_branch)
                && !known.contains(&r.id)
                && created_after(r)
        }) {
            rec.attempts[idx].run = Some(RunRef {
                id: found.id,
                attempt: found.attempt,
                url: found.html_url.clone(),
            });
            rec.attempts[idx].status = AttemptStatus::Running;
            self.save(rec).await?;
            return Ok(Progress::Advanced(Step::Smoke));
        }
        if let Some(at) = rec.attempts[idx].dispatched_at
            && self.clock.now() - at < self.config.dispatch_grace
        {
            return Ok(Progress::Waiting(format!(
                "the smoke run dispatched at {at} is not visible yet"
            )));
        }
        if let Some(p) = self.capacity_deferred(rec, "the smoke dispatch").await? {
            return Ok(p);
        }
        let proof = match self.prove(rec, Scope::Pull).await? {
            Ok(p) => p,
            Err(p) => return Ok(p),
        };
        let inputs = Value::Object(plan.inputs);
        rec.attempts[idx].dispatched_at = Some(self.clock.now());
        self.intend(rec, Intent::Dispatch(self.config.smoke_workflow.clone()))
            .await?;
        match self
            .forge
            .dispatch_run(
                &proof,
                &self.config.smoke_workflow,
                &rec.base_branch,
                &inputs,
            )
            .await
        {
            Ok(Some((id, url))) => {
                // A new run is attempt 1; its page, when the dispatch did
                // not say, is read.
                let (attempt, url) = match url {
                    Some(url) => (1, url),
                    None => {
                        let live = self.forge.get_run(id).await?;
                        (live.attempt, live.html_url)
                    }
                };
                rec.attempts[idx].run = Some(RunRef { id, attempt, url });
                rec.attempts[idx].status = AttemptStatus::Queued;
                self.save(rec).await?;
                Ok(Progress::Advanced(Step::Smoke))
            }
            Ok(None) | Err(ForgeError::Ambiguous(_)) => Ok(Progress::Waiting(
                "dispatched; looking for the run by title".into(),
            )),
            Err(e) => Err(e.into()),
        }
    }
}
