//! Learning in the engine: when a candidate's run passes after an earlier
//! run of it failed with a signature the playbook did not know, and what
//! changed between the two heads touched the family's scripts or recipes,
//! the failing lines and that change become a proposed playbook entry
//! ([`crate::playbook::propose_entry`]), shown in the receipt.
//!
//! Everything is read back from GitHub, never remembered: the failed run's
//! published report (its triage and lines), the commits between the two
//! heads (whose they are says what the change was) and the changed files at
//! both heads. So a record rebuilt after a crash proposes the same entry.
//!
//! Reads the report comments, one compare and the fix targets at two
//! commits. Writes nothing.

use crate::engine::config::TRAILER;
use crate::engine::context::Engine;
use crate::engine::error::EngineError;
use crate::engine::forge::Forge as _;
use crate::engine::journal::{AttemptRecord, CandidateRecord};
use crate::engine::playbook_repair::PLAYBOOK_TRAILER;
use crate::engine::steps::repair::published_report;
use crate::model::AttemptStatus;
use crate::playbook::{Class, Fix, LearnInput, LogSignature, propose_entry};
use crate::report::{FailedJob, LearnedEntry, TriageClass};
use klaud_claims::CommitSha;

/// Largest script or recipe compared, in bytes: the family's files are a
/// few kilobytes; anything larger is not read as a fix.
const MAX_SCRIPT_BYTES: usize = 256 * 1024;

impl Engine<'_> {
    /// The playbook entry `rec`'s passing run teaches, if any: its last
    /// passed attempt, the failed attempt before it (not infrastructure)
    /// whose jobs' logs matched no entry, and a change between their heads
    /// in the family's files. `None` when any of those is missing, the
    /// failure was a known one, or the entry is in the playbook already.
    pub(super) async fn learned_entry(
        &self,
        rec: &CandidateRecord,
    ) -> Result<Option<LearnedEntry>, EngineError> {
        let path = self.config.playbook.as_str();
        if path.is_empty() {
            return Ok(None);
        }
        let Some((failed, passed)) = failed_then_passed(&rec.attempts) else {
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
        // A failure the playbook knew teaches nothing new; only a run whose
        // every triaged job was unknown does.
        let triaged: Vec<&FailedJob> = jobs.iter().filter(|j| j.triage.is_some()).collect();
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
        let Some((fix, files)) = self.change_between(rec, &from, &to).await? else {
            return Ok(None);
        };
        let change = self.who_changed(rec, &from, &to).await?;
        let words = match &fix {
            Some(f) => f.describe(),
            None => format!("{change} ({})", files.join(", ")),
        };
        let ctx = self.job_context(rec, job.node.as_deref());
        let Some(proposal) = propose_entry(&LearnInput {
            signature: &signature,
            ctx: &ctx,
            class: Class::Engine,
            fix,
            change: change.clone(),
            pull: rec.pull.map(|n| n.get()),
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
            path: path.to_owned(),
            yaml: proposal.yaml,
            change: words.chars().take(300).collect(),
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
        let ours = |c: &crate::engine::forge::ComparedCommit| {
            self.by_bot(c.author.as_deref()) && c.message.lines().any(|l| l.trim() == trailer)
        };
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
