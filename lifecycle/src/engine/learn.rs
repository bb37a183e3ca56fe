//! Learning in the engine: when a candidate's run passes after an earlier
//! run failed with a signature the playbook did not know, and what changed
//! between the two heads touched the family's scripts or recipes, the
//! failing lines and that change become a proposed playbook entry
//! ([`crate::playbook::propose_entry`]), shown in the receipt. The earlier
//! run is the candidate's own (fixed by the hook's repair or a person's
//! push), or, for a variant, the candidate it was tried from (fixed by the
//! variant's edits: `/klaud try`, or the hook's proposal).
//!
//! Everything is read back from GitHub, never remembered: the failed run's
//! published report (its triage and lines, on the candidate's pull request
//! or the parent's), the commits between the two heads (whose they are
//! says what the change was) and the changed files at both heads. So a
//! record rebuilt after a crash or a lost store proposes the same entry.
//!
//! Reads the report comments (the parent's pull request's for a variant),
//! one compare and the fix targets at two commits. Writes nothing.

use crate::engine::attempt::{INFRA_DETAIL, SWEEP_INFRA_DETAIL};
use crate::engine::config::TRAILER;
use crate::engine::context::Engine;
use crate::engine::error::EngineError;
use crate::engine::forge::Forge as _;
use crate::engine::journal::{AttemptRecord, CandidateRecord};
use crate::engine::playbook_repair::PLAYBOOK_TRAILER;
use crate::engine::steps::repair::published_report;
use crate::engine::target::branch_name;
use crate::model::{AttemptKind, AttemptStatus};
use crate::playbook::{Class, FailedRun, Fix, LearnInput, LogSignature, propose_entry};
use crate::report::{
    FailedJob, LearnedEntry, MarkerKey, ReportName, TriageClass, find_records, parse_report,
};
use klaud_claims::{CommitSha, PullNumber};

/// Largest script or recipe compared, in bytes: the family's files are a
/// few kilobytes; anything larger is not read as a fix.
const MAX_SCRIPT_BYTES: usize = 256 * 1024;

/// A failed run a later pass may have taught something: the failed jobs
/// its published report names, what the run was, the head it tested and
/// where it was seen.
struct Failure {
    jobs: Vec<FailedJob>,
    failed: FailedRun,
    head: CommitSha,
    /// The image it tested when it is not the candidate's own (the
    /// entry's scope).
    image: Option<String>,
    /// The pull request it failed on.
    pull: Option<PullNumber>,
}

impl Engine<'_> {
    /// The playbook entry `rec`'s passing run teaches, if any: a failed
    /// run (not infrastructure) whose jobs' logs matched no entry, and a
    /// change in the family's files between its head and the passing
    /// one. The failed run is `rec`'s own attempt before the pass (the
    /// hook's repair, a person's push), or, for a variant, the last failed
    /// run of the candidate it was tried from (`/klaud try`, the hook's
    /// proposal). `None` when any of those is missing, the failure was a
    /// known one, or the entry is in the playbook already.
    pub(super) async fn learned_entry(
        &self,
        rec: &CandidateRecord,
    ) -> Result<Option<LearnedEntry>, EngineError> {
        if self.config.playbook.is_empty() {
            return Ok(None);
        }
        if let Some(entry) = self.own_lesson(rec).await? {
            return Ok(Some(entry));
        }
        self.variant_lesson(rec).await
    }

    /// `rec`'s attempts: the journal's, or when some were rebuilt from its
    /// receipt after a lost store (which names runs, not heads), the ones
    /// its published reports name.
    async fn lesson_attempts(
        &self,
        rec: &CandidateRecord,
    ) -> Result<Vec<AttemptRecord>, EngineError> {
        if !rec.attempts.iter().any(|a| a.head.is_empty()) {
            return Ok(rec.attempts.clone());
        }
        let Some(number) = rec.pull else {
            return Ok(rec.attempts.clone());
        };
        let comments = self.comments_with_reports(rec, number).await?;
        Ok(self.reported_attempts(rec, &comments, true))
    }

    /// What `rec`'s own failed attempt and the pass after it teach.
    async fn own_lesson(&self, rec: &CandidateRecord) -> Result<Option<LearnedEntry>, EngineError> {
        let attempts = self.lesson_attempts(rec).await?;
        let Some((failed, passed)) = failed_then_passed(&attempts) else {
            return Ok(None);
        };
        let (Ok(from), Ok(to)) = (
            CommitSha::parse(&failed.head),
            CommitSha::parse(&passed.head),
        ) else {
            return Ok(None);
        };
        let Some(run) = failed.run.as_ref() else {
            return Ok(None);
        };
        let report = published_report(self, rec, run).await?;
        let jobs: Vec<FailedJob> = report
            .get("failed_jobs")
            .and_then(|j| serde_json::from_value(j.clone()).ok())
            .unwrap_or_default();
        let failure = Failure {
            jobs,
            failed: failed_run(failed.kind),
            head: from,
            // Both attempts ran the candidate's image: its record's scopes it.
            image: None,
            pull: rec.pull,
        };
        self.lesson(rec, &failure, &to, None).await
    }

    /// What a variant's pass teaches about the failure of the candidate it
    /// was tried from: that candidate's last failed run (read from its
    /// pull request's reports) and the change from the head it failed at
    /// to the variant's passing head.
    async fn variant_lesson(
        &self,
        rec: &CandidateRecord,
    ) -> Result<Option<LearnedEntry>, EngineError> {
        let Some(info) = rec.variant.as_ref() else {
            return Ok(None);
        };
        let Some(me) = info.siblings.iter().find(|s| s.candidate == rec.candidate) else {
            return Ok(None);
        };
        // The hook's proposal answers its proposer's failed attempt; a
        // maintainer's try builds on its base variant.
        let parent = match &me.proposed {
            Some(p) => info.siblings.iter().find(|s| s.candidate == p.by),
            None => {
                let from = info.from.as_deref().unwrap_or("base");
                info.siblings.iter().find(|s| s.name == from)
            }
        };
        let Some(parent) = parent.filter(|p| p.candidate != rec.candidate) else {
            return Ok(None);
        };
        let attempts = self.lesson_attempts(rec).await?;
        let Some(to) = attempts
            .iter()
            .rev()
            .find(|a| a.status == AttemptStatus::Passed)
            .and_then(|a| CommitSha::parse(&a.head).ok())
        else {
            return Ok(None);
        };
        let Some(failure) = self.last_failure_of(parent.candidate.as_str()).await? else {
            return Ok(None);
        };
        if failure.head == to {
            return Ok(None);
        }
        let how = if me.proposed.is_some() {
            "proposed by the repair hook"
        } else {
            "started by `/klaud try`"
        };
        let change = format!("the edits of Variant {} ({how})", me.name);
        self.lesson(rec, &failure, &to, Some(change)).await
    }

    /// The last failed run (not infrastructure) of `candidate` whose
    /// report Klaud published on its pull request, found by its branch.
    async fn last_failure_of(&self, candidate: &str) -> Result<Option<Failure>, EngineError> {
        let Some(pull) = self.forge.find_pull(&branch_name(candidate)).await? else {
            return Ok(None);
        };
        let comments = self.forge.list_comments(pull.number).await?;
        let report = comments
            .iter()
            .filter(|c| self.by_bot(c.author.as_deref()))
            .flat_map(|c| find_records(&c.body).unwrap_or_default())
            .filter(|f| {
                matches!(&f.key, MarkerKey::Report {
                    candidate: c, name: ReportName::Run { .. }, part, ..
                } if c.as_str() == candidate && part.is_none_or(|p| p == 1))
            })
            .filter_map(|f| parse_report(&f).ok())
            .rfind(|r| {
                r.kind.is_some()
                    && r.status == AttemptStatus::Failed
                    && !r.is_live()
                    && !matches!(r.detail.as_deref(), Some(INFRA_DETAIL | SWEEP_INFRA_DETAIL))
            });
        let Some(report) = report else {
            return Ok(None);
        };
        let Some(head) = report
            .head
            .as_deref()
            .and_then(|h| CommitSha::parse(h).ok())
        else {
            return Ok(None);
        };
        Ok(Some(Failure {
            failed: report.kind.map_or(FailedRun::Smoke, failed_run),
            jobs: report.failed_jobs,
            head,
            image: Some(report.image).filter(|i| !i.is_empty()),
            pull: Some(pull.number),
        }))
    }

    /// The entry `failure` and the change from its head to `to` make, in
    /// `rec`'s receipt; `change` says what the change was when it is not
    /// a fix of the safe vocabulary (`None`: whose commits lie between the
    /// heads, read only once the family's files are known to differ).
    async fn lesson(
        &self,
        rec: &CandidateRecord,
        failure: &Failure,
        to: &CommitSha,
        change: Option<String>,
    ) -> Result<Option<LearnedEntry>, EngineError> {
        // A failure the playbook knew teaches nothing new; only a run whose
        // every triaged job was unknown does.
        let triaged: Vec<&FailedJob> = failure.jobs.iter().filter(|j| j.triage.is_some()).collect();
        if triaged.is_empty()
            || triaged.iter().any(|j| {
                j.triage
                    .as_ref()
                    .is_some_and(|t| t.class != TriageClass::Unknown)
            })
        {
            return Ok(None);
        }
        let Some(job) = triaged
            .iter()
            .find(|j| j.triage.as_ref().is_some_and(|t| !t.lines.is_empty()))
        else {
            return Ok(None);
        };
        let lines = job
            .triage
            .as_ref()
            .map(|t| t.lines.clone())
            .unwrap_or_default();
        let signature = LogSignature::of(lines.iter().map(String::as_str));
        let Some((fix, files)) = self.change_between(rec, &failure.head, to).await? else {
            return Ok(None);
        };
        let change = match change {
            Some(c) => c,
            None => self.who_changed(rec, &failure.head, to).await?,
        };
        let words = match &fix {
            Some(f) => f.describe(),
            None => format!("{change} ({})", files.join(", ")),
        };
        let mut ctx = self.job_context(rec, job.node.as_deref());
        // Scoped to the engine the failure was seen with (a variant may
        // run another image).
        if let Some(image) = &failure.image {
            ctx.engine_version = klaud_planner::image::ImageRef::parse(image)
                .ok()
                .and_then(|i| i.tag().map(str::to_owned));
        }
        let Some(proposal) = propose_entry(&LearnInput {
            signature: &signature,
            ctx: &ctx,
            class: Class::Engine,
            fix,
            change,
            pull: failure.pull.map(|n| n.get()),
            failed: failure.failed,
        }) else {
            return Ok(None);
        };
        if self
            .playbook(rec)
            .await?
            .is_some_and(|book| book.entry(&proposal.id).is_some())
        {
            return Ok(None);
        }
        let entry = LearnedEntry {
            id: proposal.id,
            family: rec.family.clone(),
            pull: rec.pull,
            path: self.config.playbook.clone(),
            yaml: proposal.yaml,
            change: words.chars().take(300).collect(),
            failed: failure.failed,
        };
        Ok(entry.is_bounded().then_some(entry))
    }

    /// The family's files that differ between `from` and `to`, and the fix
    /// of the safe vocabulary the change is when exactly one file changed
    /// by one. `None` when none of them changed.
    async fn change_between(
        &self,
        rec: &CandidateRecord,
        from: &CommitSha,
        to: &CommitSha,
    ) -> Result<Option<(Option<Fix>, Vec<String>)>, EngineError> {
        let mut changed = Vec::new();
        let mut fixes = Vec::new();
        for path in self.fix_targets(rec) {
            let before = self.forge.read_file(&path, from.as_str()).await?;
            let after = self.forge.read_file(&path, to.as_str()).await?;
            if before == after {
                continue;
            }
            let text = |b: Option<Vec<u8>>| {
                b.filter(|b| b.len() <= MAX_SCRIPT_BYTES)
                    .and_then(|b| String::from_utf8(b).ok())
            };
            if let (Some(before), Some(after)) = (text(before), text(after))
                && let Some(fix) = Fix::infer(&before, &after)
            {
                fixes.push(fix);
            }
            changed.push(path);
        }
        if changed.is_empty() {
            return Ok(None);
        }
        let fix = match (changed.len(), fixes.len()) {
            (1, 1) => fixes.pop(),
            _ => None,
        };
        Ok(Some((fix, changed)))
    }

    /// Whose commits lie between `from` and `to`, in words: the repair
    /// hook's (the bot's, with the candidate's trailer) or a person's push.
    async fn who_changed(
        &self,
        rec: &CandidateRecord,
        from: &CommitSha,
        to: &CommitSha,
    ) -> Result<String, EngineError> {
        let cmp = self
            .forge
            .compare_commits(from.as_str(), to.as_str())
            .await?;
        let trailer = format!("{TRAILER}{}", rec.candidate);
        let ours = |c: &crate::engine::forge::ComparedCommit| self.by_klaud(c, &trailer);
        Ok(if cmp.commits.is_empty() || !cmp.commits.iter().all(ours) {
            "a person's push to the pull request".to_owned()
        } else if cmp.commits.iter().any(|c| {
            c.message
                .lines()
                .any(|l| l.trim().starts_with(PLAYBOOK_TRAILER.trim()))
        }) {
            "Klaud's playbook repair".to_owned()
        } else {
            "the repair hook's commit".to_owned()
        })
    }
}

/// Which run an attempt of `kind` is.
fn failed_run(kind: AttemptKind) -> FailedRun {
    match kind {
        AttemptKind::FinalSweep => FailedRun::Sweep,
        _ => FailedRun::Smoke,
    }
}

/// The last passed attempt and the last failed one before it at another
/// head (not an infrastructure failure, with its run).
fn failed_then_passed(attempts: &[AttemptRecord]) -> Option<(&AttemptRecord, &AttemptRecord)> {
    let at = attempts
        .iter()
        .rposition(|a| a.status == AttemptStatus::Passed && !a.head.is_empty())?;
    let passed = &attempts[at];
    let failed = attempts[..at].iter().rev().find(|a| {
        a.status == AttemptStatus::Failed && !a.infra && a.run.is_some() && a.head != passed.head
    })?;
    Some((failed, passed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AttemptKind, RunRef};

    fn attempt(head: &str, status: AttemptStatus, infra: bool) -> AttemptRecord {
        AttemptRecord {
            kind: AttemptKind::Initial { budget: 5 },
            head: head.into(),
            dispatched_at: None,
            run: Some(RunRef {
                id: 1,
                attempt: 1,
                url: "https://github.com/o/r/actions/runs/1".into(),
            }),
            status,
            infra,
            reported: true,
        }
    }

    #[test]
    fn a_pass_after_a_failure_at_another_head_is_a_lesson() {
        let a = "a".repeat(40);
        let b = "b".repeat(40);
        let attempts = [
            attempt(&a, AttemptStatus::Failed, false),
            attempt(&b, AttemptStatus::Passed, false),
        ];
        let (f, p) = failed_then_passed(&attempts).expect("a lesson");
        assert_eq!((f.head.as_str(), p.head.as_str()), (a.as_str(), b.as_str()));
        // An infrastructure failure, or a failure at the same head, is not.
        let infra = [
            attempt(&a, AttemptStatus::Failed, true),
            attempt(&b, AttemptStatus::Passed, false),
        ];
        assert!(failed_then_passed(&infra).is_none());
        let same = [
            attempt(&b, AttemptStatus::Failed, false),
            attempt(&b, AttemptStatus::Passed, false),
        ];
        assert!(failed_then_passed(&same).is_none());
        assert!(failed_then_passed(&attempts[..1]).is_none());
    }
}
