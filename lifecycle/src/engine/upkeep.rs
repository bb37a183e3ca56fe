//! Keeping a branch mergeable when its base moves: the base is merged into
//! the branch (never a rebase: the repository's reuse gate needs the
//! validated run's commit to stay in the PR), `perf-changelog.yaml` taken
//! from the base with Klaud's own entry re-appended at its new tail, as the
//! repository's `utils/merge_with_reuse.sh` resolves the same conflict.
//!
//! Used twice: by the final step when the base moved before the changelog
//! entry is written (so the PR the sweep label starts a run on does not
//! conflict: GitHub starts no `pull_request` run on a conflicting PR), and
//! by [`Engine::keep_mergeable`] for validated PRs awaiting a maintainer's
//! merge, whose upkeep commit carries `[skip-sweep]` so the repository's
//! `check-changelog` job starts no GPU job for it.

use crate::BoxFuture;
use crate::engine::config::TRAILER;
use crate::engine::context::{Engine, Upkept};
use crate::engine::error::EngineError;
use crate::engine::forge::{Forge as _, ForgeError, Pull};
use crate::engine::intent::Intent;
use crate::engine::journal::{CandidateRecord, Step};
use crate::engine::ownership::HANDOFF_LABEL;
use crate::engine::proof::Scope;
use crate::engine::steps;
use crate::engine::write::Writes as _;
use crate::model::Outcome;
use klaud_claims::{CommitSha, PullNumber};
use klaud_planner::changelog::{CHANGELOG_PATH, ChangelogEntry, append_entry, validate_append};
use klaud_planner::merge3::merge_lines;

/// The files a merge of the base into the branch sets on top of the base's
/// tree, or why Klaud cannot merge without a person.
pub(super) enum MergePlan {
    /// The branch already contains the base tip.
    UpToDate,
    /// Set these files on the base's tree (parents: head, base tip).
    Merge {
        /// The base tip merged in.
        base_tip: CommitSha,
        /// Path → bytes.
        files: Vec<(String, Vec<u8>)>,
    },
    /// The base changed a file the branch changes too (other than the
    /// changelog): a person decides.
    HandOff(String),
}

/// The one write an upkeep pass makes under the family's claim.
enum UpkeepWrite {
    /// A person pushed this head: withdraw the reuse authorization.
    Withdraw(CommitSha),
    /// Post Klaud's pinned reuse line again.
    PostReuseLine,
    /// Merge the base into the branch at this head.
    Merge(CommitSha, MergePlan),
}

/// Whether `changelog` holds an entry whose `pr-link` is `link` (quoted
/// or not), as the repository's changelog reads the field.
pub(super) fn holds_entry_for(changelog: &[u8], link: &str) -> bool {
    String::from_utf8_lossy(changelog).lines().any(|line| {
        line.trim_start()
            .strip_prefix("pr-link:")
            .map(|v| v.trim().trim_matches(|c| c == '"' || c == '\''))
            .is_some_and(|v| v == link)
    })
}

/// Why Klaud stops keeping a PR up to date, in both languages.
pub(super) fn handoff_note(why: &str) -> String {
    // The reason names paths and errors from the repository.
    let why = klaud_render::escape::text(why);
    format!(
        "**Klaud cannot merge the base into this PR without a person:** {why}. It stops updating the branch; a maintainer resolves the conflict (for example with `utils/merge_with_reuse.sh`).\n\n<details>\n<summary>中文</summary>\n\n**Klaud 无法在无人参与的情况下将基础分支合并到此 PR**：{why}。Klaud 将不再更新该分支；请维护者解决冲突（例如使用 `utils/merge_with_reuse.sh`）。\n\n</details>\n"
    )
}

impl Engine<'_> {
    /// What merging `base_tip` into `head` takes, for `rec`'s branch.
    /// `entry_link`: Klaud's changelog entry's PR link, when the entry is
    /// (to be) on the branch; its bytes are re-appended to the base's.
    // Kept whole (about 90 lines): one three-way merge whose cases share
    // the three sides, read once.
    pub(super) async fn merge_plan(
        &self,
        rec: &CandidateRecord,
        head: &CommitSha,
        base_tip: &CommitSha,
        entry_link: Option<&str>,
    ) -> Result<MergePlan, EngineError> {
        // The base the branch was made from, or last merged in, needs no
        // comparison: the branch contains it.
        let merged_last = rec.upkeep.as_ref().and_then(|u| u.merged_bases.last());
        if *base_tip == rec.base_sha || merged_last.is_some_and(|m| m == base_tip) {
            return Ok(MergePlan::UpToDate);
        }
        let cmp = self.forge.compare_commits(base_tip, head).await?;
        if cmp.status.head_contains_base() {
            return Ok(MergePlan::UpToDate);
        }
        let Some(merge_base) = cmp.merge_base.clone() else {
            return Ok(MergePlan::HandOff(format!(
                "{} and {} share no history",
                rec.base_branch, rec.branch
            )));
        };
        let changelog = format!("{}{CHANGELOG_PATH}", self.repository.prefix());
        let mut files = Vec::new();
        for path in cmp.files.iter().filter(|p| **p != changelog) {
            let Some(ours) = self.forge.read_file(path, head).await? else {
                return Ok(MergePlan::HandOff(format!(
                    "the PR removes {path}, which Klaud never does"
                )));
            };
            let at_base = self.forge.read_file(path, &merge_base).await?;
            let at_tip = self.forge.read_file(path, base_tip).await?;
            if at_base == at_tip {
                files.push((path.clone(), ours));
                continue;
            }
            // Both sides changed the file (another family's bump in the
            // same master config, say): merged line by line as git would;
            // a change of the base to the bump's own lines is a person's.
            fn text(b: Option<&[u8]>) -> Option<&str> {
                b.and_then(|b| std::str::from_utf8(b).ok())
            }
            let merged = match (
                text(at_base.as_deref()),
                text(at_tip.as_deref()),
                text(Some(&ours)),
            ) {
                (Some(base), Some(tip), Some(ours)) => merge_lines(base, tip, ours),
                // Binary on either side: git would not merge it either.
                _ => None,
            };
            match merged {
                Some(m) => files.push((path.clone(), m.into_bytes())),
                None => {
                    return Ok(MergePlan::HandOff(format!(
                        "{} changed the lines of {path} that the bump changes since this PR branched off",
                        rec.base_branch
                    )));
                }
            }
        }
        if let Some(link) = entry_link {
            let base_bytes = self
                .forge
                .read_file(&changelog, base_tip)
                .await?
                .unwrap_or_default();
            // The base already carries this PR's entry (a maintainer
            // landed it, or an earlier merge did): the branch takes the
            // base's file as it is, never a second entry.
            if holds_entry_for(&base_bytes, link) {
                files.push((changelog, base_bytes));
                return Ok(MergePlan::Merge {
                    base_tip: base_tip.clone(),
                    files,
                });
            }
            let entry = self.changelog_entry(rec, link);
            let new = append_entry(&base_bytes, &entry)
                .map_err(|e| e.to_string())
                .and_then(|new| {
                    validate_append(&base_bytes, &new)
                        .map(|_| new)
                        .map_err(|e| e.to_string())
                });
            match new {
                Ok(new) => files.push((changelog, new)),
                Err(e) => {
                    return Ok(MergePlan::HandOff(format!(
                        "the changelog entry cannot be re-appended to {}'s {CHANGELOG_PATH}: {e}",
                        rec.base_branch
                    )));
                }
            }
        }
        Ok(MergePlan::Merge {
            base_tip: base_tip.clone(),
            files,
        })
    }

    /// Klaud's changelog entry for `rec`, linking `link` (its PR).
    pub(super) fn changelog_entry(&self, rec: &CandidateRecord, link: &str) -> ChangelogEntry {
        crate::engine::config::changelog_entry(self.changelog_keys(rec), &rec.key, &rec.image, link)
    }

    /// The PR link Klaud's changelog entry carries.
    pub(super) fn entry_link(&self, number: PullNumber) -> String {
        format!(
            "{}/{}/pull/{number}",
            self.config.pr_link_base.trim_end_matches('/'),
            self.forge.repo()
        )
    }

    /// One upkeep pass over a validated PR awaiting its merge: when GitHub
    /// says it conflicts with its base, Klaud takes the family's claim,
    /// merges the base in (`[skip-sweep]`, so no GPU job starts), and
    /// releases the claim. The record stays `done`; only its head and
    /// upkeep change.
    pub fn keep_mergeable<'f>(
        &'f self,
        rec: &'f mut CandidateRecord,
    ) -> BoxFuture<'f, Result<Upkept, EngineError>> {
        Box::pin(async move {
            let _reads = self.forge.scope();
            let upkept = self.keep_mergeable_once(rec).await?;
            if let Upkept::Settled(why) = &upkept {
                rec.upkeep.get_or_insert_with(Default::default).settled = Some(why.clone());
                rec.intent = None;
                self.save(rec).await?;
            }
            Ok(upkept)
        })
    }

    /// `pull.mergeable`, asked once more when GitHub answered `null`: it
    /// computes mergeability in the background after the first read since
    /// the base or head moved and documents asking again. An unchanged
    /// `null` is a free 304; a value spares the next pass the charged read
    /// that would bring it. Taken only for the same head.
    async fn mergeable_asked_again(&self, pull: &Pull) -> Result<Option<bool>, EngineError> {
        if pull.mergeable.is_some() {
            return Ok(pull.mergeable);
        }
        self.forge.forget_pull(pull.number);
        let again = self.forge.get_pull(pull.number).await?;
        Ok(again.mergeable.filter(|_| again.head_sha == pull.head_sha))
    }

    // Kept whole (about 90 lines): one ordered decision (settled, a
    // person's push, the reuse line, conflict, merge under the claim) over
    // facts it reads once.
    pub(super) async fn keep_mergeable_once(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<Upkept, EngineError> {
        let validated = rec
            .ending
            .as_ref()
            .is_some_and(|e| e.outcome == Outcome::Validated);
        let (Some(number), Some(head), true, Step::Done) =
            (rec.pull, rec.head.clone(), validated, rec.step)
        else {
            return Ok(Upkept::Settled("not a validated PR".into()));
        };
        if let Some(why) = rec.upkeep.as_ref().and_then(|u| u.settled.clone()) {
            return Ok(Upkept::Settled(why));
        }
        let pull = self.forge.get_pull(number).await?;
        if !pull.state.is_open() {
            let state = if pull.state.is_merged() {
                "merged"
            } else {
                "closed"
            };
            return Ok(Upkept::Settled(format!("#{number} was {state}")));
        }
        if pull.labels.iter().any(|l| l == HANDOFF_LABEL) {
            return Ok(Upkept::Settled(format!(
                "#{number} carries {HANDOFF_LABEL}"
            )));
        }
        // Withdrawn once: the branch is the person's; Klaud only watches
        // for the merge or close.
        if let Some(w) = rec.upkeep.as_ref().and_then(|u| u.withdrawn.as_ref()) {
            return Ok(Upkept::Withdrawn(w.line()));
        }
        if pull.head_sha != head {
            // A push of Klaud's own upkeep whose save was lost is adopted.
            if rec.pending_commit.as_deref() == Some(pull.head_sha.as_str()) {
                rec.head = Some(pull.head_sha.clone());
                rec.pending_commit = None;
                self.save(rec).await?;
            } else {
                // Someone else's commit on top of the validated one: the
                // sweep never ran it, so Klaud's reuse line must not stand.
                return self
                    .under_upkeep_claim(rec, number, UpkeepWrite::Withdraw(pull.head_sha.clone()))
                    .await;
            }
        }
        // The promise: the line the reuse gate goes by pins the validated
        // run (a deleted or outdone line is posted again).
        if self.reuse_line_missing(rec, number).await? {
            let posted = self
                .under_upkeep_claim(rec, number, UpkeepWrite::PostReuseLine)
                .await?;
            if posted != Upkept::Current {
                return Ok(posted);
            }
        }
        match self.mergeable_asked_again(&pull).await? {
            None => {
                return Ok(Upkept::Waiting(format!(
                    "GitHub has not computed whether #{number} merges cleanly"
                )));
            }
            Some(true) => return Ok(Upkept::Current),
            Some(false) => {}
        }
        let head = rec.head.clone().unwrap_or(head);
        let base_tip = self
            .branch_sha(&rec.base_branch)
            .await?
            .ok_or_else(|| ForgeError::NotFound(format!("base branch {}", rec.base_branch)))?;
        let plan = self
            .merge_plan(rec, &head, &base_tip, Some(&self.entry_link(number)))
            .await?;
        self.under_upkeep_claim(rec, number, UpkeepWrite::Merge(head, plan))
            .await
    }

    /// Runs `write` under the family's claim, taken for it and released
    /// after whatever happened: the PR is a maintainer's to merge, and the
    /// next pass takes the claim again if needed. The record stays `done`
    /// with its validated ending; a write that failed leaves it as it was
    /// but for the head Klaud pushed.
    async fn under_upkeep_claim(
        &self,
        rec: &mut CandidateRecord,
        number: PullNumber,
        write: UpkeepWrite,
    ) -> Result<Upkept, EngineError> {
        let before = rec.clone();
        let book = self.book();
        let cid = Self::candidate_id(rec)?;
        let members = self.bumped_together(&rec.family);
        let candidates = members
            .iter()
            .map(|m| klaud_claims::ClaimCandidate::new(self.repository_sha.clone(), m, cid.clone()))
            .collect();
        match book
            .acquire(
                &cid.family(),
                candidates,
                &self.repository_sha,
                rec.owner_run,
                self.config.lease,
            )
            .await
            .map_err(EngineError::ClaimOp)?
        {
            klaud_claims::Acquire::Won(held) => crate::engine::proof::hold(self, rec, &held),
            klaud_claims::Acquire::Occupied(entry) => {
                return Ok(Upkept::Busy(format!(
                    "the claim of {} is held by another ({})",
                    rec.family, entry.tip.sha
                )));
            }
        }
        let result = match write {
            UpkeepWrite::Withdraw(pushed) => self.withdraw_reuse(rec, number, &pushed).await,
            UpkeepWrite::PostReuseLine => {
                let run = rec.sweep.as_ref().map_or(0, |s| s.run_id);
                match steps::finish::authorize_reuse(self, rec, number, run).await {
                    Ok(Some(_)) => Ok(Upkept::Settled(self.mismatch_why(rec))),
                    Ok(None) => Ok(Upkept::Current),
                    Err(e) => Err(e),
                }
            }
            UpkeepWrite::Merge(head, plan) => {
                self.merge_under_claim(rec, number, &head, plan).await
            }
        };
        steps::finish::release(self, rec).await?;
        rec.claim = None;
        match result {
            Ok(upkept) => {
                rec.step = Step::Done;
                rec.ending = before.ending.clone();
                rec.intent = None;
                self.save(rec).await?;
                Ok(upkept)
            }
            Err(e) => {
                // The next pass reads GitHub again.
                let head = rec.head.clone();
                let pending = rec.pending_commit.clone();
                *rec = before;
                rec.head = head;
                rec.pending_commit = pending;
                self.save(rec).await?;
                Err(e)
            }
        }
    }

    pub(super) async fn merge_under_claim(
        &self,
        rec: &mut CandidateRecord,
        number: PullNumber,
        head: &CommitSha,
        plan: MergePlan,
    ) -> Result<Upkept, EngineError> {
        let proof = match self.prove(rec, Scope::Pull).await? {
            Ok(p) => p,
            // The ownership check ended the record's copy; the validated
            // ending is restored and Klaud stops touching the PR.
            Err(_) => return Ok(Upkept::Settled(self.mismatch_why(rec))),
        };
        match plan {
            MergePlan::UpToDate => Ok(Upkept::Current),
            MergePlan::HandOff(why) => {
                let body = handoff_note(&why);
                self.intend(rec, Intent::ExplainConflict).await?;
                self.forge.create_comment(&proof, number, &body).await?;
                Ok(Upkept::Settled(why))
            }
            MergePlan::Merge { base_tip, files } => {
                let message = format!(
                    "Merge {} into {} [skip-sweep]\n\nKeeps the validated PR mergeable; its sweep stays reusable.\n\n{TRAILER}{}\n",
                    rec.base_branch, rec.branch, rec.candidate
                );
                self.intend(rec, Intent::MergeBase).await?;
                let sha = self
                    .forge
                    .commit_merge(&proof, head, &base_tip, &files, &message)
                    .await?;
                rec.pending_commit = Some(sha.clone());
                self.intend(rec, Intent::PushMerge).await?;
                self.forge
                    .fast_forward_branch(&proof, &rec.branch, &sha)
                    .await?;
                rec.head = Some(sha.clone());
                rec.pending_commit = None;
                rec.upkeep
                    .get_or_insert_with(Default::default)
                    .merged_bases
                    .push(base_tip);
                Ok(Upkept::Merged(sha))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::holds_entry_for;

    #[test]
    fn an_entry_for_the_pr_is_found_by_its_link_and_only_by_it() {
        let log = b"- config-keys:\n    - a\n  description:\n    - \"x\"\n  pr-link: https://github.com/o/r/pull/12\n";
        assert!(holds_entry_for(log, "https://github.com/o/r/pull/12"));
        assert!(!holds_entry_for(log, "https://github.com/o/r/pull/1"));
        assert!(!holds_entry_for(log, "https://github.com/o/r/pull/123"));
        let quoted = b"- config-keys: [a]\n  pr-link: \"https://github.com/o/r/pull/12\"\n";
        assert!(holds_entry_for(quoted, "https://github.com/o/r/pull/12"));
        assert!(!holds_entry_for(b"", "https://github.com/o/r/pull/12"));
    }
}
