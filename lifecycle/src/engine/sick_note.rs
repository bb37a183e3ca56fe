//! The sick-nodes rule in the engine, beside the steps that report a
//! failed run: what the run's failed jobs say of their nodes is kept by run
//! and attempt (the pass's sick-nodes table then need not read them
//! again), and the report names the nodes among them that the rule calls
//! sick, judged with the runs the last pass's table was made from plus
//! this run.
//!
//! Reads the journal (and the base's families); writes nothing on GitHub.
//! Before any pass kept a table (a new or lost store), a report judges its
//! nodes by its own run alone, which never makes one sick: the report
//! says nothing of sick nodes, and the next pass's table shows them.

use std::collections::BTreeSet;

use crate::engine::context::Engine;
use crate::engine::forge::Run;
use crate::engine::journal::CandidateRecord;
use crate::playbook::sick::{
    MAX_FAILURES_PER_RUN, NodeFailure, RunFailures, SickNodeRow, WINDOW, sick_nodes,
};
use crate::report::sick_node::{MAX_SHOWN, SickNodesSeen};
use crate::report::{FailedJob, TriageClass};

impl Engine<'_> {
    /// Keeps what `run`'s failed jobs said of their nodes, as the
    /// sick-nodes table counts them; a journal that cannot keep it only
    /// costs the table reading the run's logs again.
    pub(super) async fn keep_run_failures(
        &self,
        rec: &CandidateRecord,
        run: &Run,
        mut failures: Vec<NodeFailure>,
    ) {
        // The table counts runs by their creation time on GitHub.
        let Some(at) = run.created_at else {
            return;
        };
        failures.truncate(MAX_FAILURES_PER_RUN);
        let kept = RunFailures {
            run: run.id,
            attempt: u64::from(run.attempt),
            family: rec.candidate.family().to_string(),
            family_key: self
                .repository
                .family(&rec.family)
                .ok()
                .map(|f| f.key.clone()),
            at,
            failures,
            scoped: true,
        };
        if let Err(e) = self.journal.record_run_failures(&kept).await {
            tracing::warn!(candidate = %rec.candidate, run = run.id, error = %e,
                "could not keep the run's failed jobs for the sick-nodes table");
        }
    }

    /// The sick nodes among the nodes `run`'s failed jobs ran on (teardown
    /// noise is no failure), with the dashboard issue to read more on;
    /// `None` when none is sick.
    pub(super) async fn sick_nodes_seen(
        &self,
        rec: &CandidateRecord,
        run: &Run,
        jobs: &[FailedJob],
    ) -> Option<SickNodesSeen> {
        let attempt = u64::from(run.attempt);
        let current = self
            .journal
            .run_failures(run.id, attempt)
            .await
            .ok()
            .flatten();
        let mut names: BTreeSet<String> = jobs
            .iter()
            .filter(|j| {
                j.triage
                    .as_ref()
                    .is_none_or(|t| t.class != TriageClass::Teardown)
            })
            .filter_map(|j| j.node.clone())
            .collect();
        names.extend(
            current
                .iter()
                .flat_map(|c| c.failures.iter().map(|f| f.node.clone())),
        );
        if names.is_empty() {
            return None;
        }
        let mut runs = match self.journal.sick_window().await {
            Ok(w) => w.map(|w| w.runs).unwrap_or_default(),
            Err(e) => {
                tracing::warn!(candidate = %rec.candidate, error = %e,
                    "the runs of the last sick-nodes table are unreadable; judging by this run alone");
                Vec::new()
            }
        };
        let since = self.clock.now() - WINDOW;
        runs.retain(|r| r.at >= since && (r.run, r.attempt) != (run.id, attempt));
        runs.extend(current);
        let rows: Vec<SickNodeRow> = sick_nodes(&runs)
            .into_iter()
            .filter(|r| names.contains(&r.node))
            .take(MAX_SHOWN)
            .collect();
        if rows.is_empty() {
            return None;
        }
        let dashboard = self.config.dashboard_issue.and_then(|n| {
            let (repo, _) = rec.pull_url.as_deref()?.rsplit_once("/pull/")?;
            Some(format!("{repo}/issues/{n}"))
        });
        Some(SickNodesSeen { rows, dashboard })
    }
}
