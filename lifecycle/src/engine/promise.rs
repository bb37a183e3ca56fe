//! What Klaud promised on a validated PR awaiting its merge, re-verified
//! every pass: merging reuses the sweep that validated the PR, and only
//! while the PR's head is what that sweep ran (or Klaud's own
//! `[skip-sweep]` merges of the base on top of it).
//!
//! The repository's reuse gate (`utils/find_reusable_sweep_run.py`) reads
//! the newest comment by an OWNER, MEMBER or COLLABORATOR holding a
//! whole-line `/reuse-sweep-run [<run>]`, and accepts a pinned run whose
//! commit is still in the PR. So a person's push on top of the validated
//! commit leaves Klaud's line accepted, and a bare line lets the gate pick
//! a run itself. GitHub gives outside collaborators of any permission the
//! association COLLABORATOR, so a bare line proves nothing about who
//! wanted reuse; only a line pinning the validated run keeps the promise.
//!
//! Reads the PR's comments. May write, under the family's claim: Klaud's
//! own pinned line, its reuse comments edited so no line of theirs stands,
//! and one note saying the sweep no longer covers the head.

use crate::engine::context::Engine;
use crate::engine::context::Upkept;
use crate::engine::error::EngineError;
use crate::engine::forge::{AuthorAssociation, Comment, Forge as _};
use crate::engine::intent::Intent;
use crate::engine::journal::{CandidateRecord, Withdrawn};
use crate::engine::proof::Scope;
use crate::engine::write::Writes as _;
use klaud_claims::{CommitSha, PullNumber};

/// The run a comment's last whole-line `/reuse-sweep-run [<id>]` names
/// (`Some(None)`: the line without an id), as the gate's
/// `(?m)^\s*/reuse-sweep-run(?:\s+(\d+))?\s*$` reads it; `None` when
/// the comment has no such line.
pub(crate) fn reuse_line_run(body: &str) -> Option<Option<u64>> {
    body.lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix("/reuse-sweep-run")?;
            if rest.is_empty() {
                return Some(None);
            }
            if !rest.starts_with(char::is_whitespace) {
                return None;
            }
            let id = rest.trim();
            (!id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
                .then(|| id.parse().ok())
                .flatten()
                .map(Some)
        })
        .next_back()
}

/// The comments whose reuse line the gate counts (an accepted
/// association), each with the run its line names (`None`: a bare line).
fn accepted_lines(comments: &[Comment]) -> impl Iterator<Item = (&Comment, Option<u64>)> {
    comments
        .iter()
        .filter(|c| {
            c.author_association
                .as_ref()
                .is_some_and(AuthorAssociation::reuse_gate_accepts)
        })
        .filter_map(|c| reuse_line_run(&c.body).map(|run| (c, run)))
}

/// The line the reuse gate goes by now: the newest comment by an accepted
/// association with a whole-line `/reuse-sweep-run`, and the run its last
/// such line names (`None`: a bare line). GitHub numbers comments in the
/// order they were created, the gate's order.
pub(crate) fn standing_line(comments: &[Comment]) -> Option<(&Comment, Option<u64>)> {
    accepted_lines(comments).max_by_key(|(c, _)| c.id)
}

/// What the standing line means for Klaud's promise of `run`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Standing {
    /// It pins `run`: merging reuses the validated sweep.
    Pinned,
    /// A person pinned another run after Klaud: their choice, left alone.
    PersonPinnedOther(u64),
    /// No line, or a bare one: Klaud's own pinned line is (re)posted.
    Missing,
}

/// How the standing line in `comments` stands to `run`; `by_bot` tells
/// Klaud's comments.
pub(crate) fn standing(
    comments: &[Comment],
    run: u64,
    by_bot: impl Fn(&Comment) -> bool,
) -> Standing {
    match standing_line(comments) {
        Some((_, Some(id))) if id == run => Standing::Pinned,
        Some((c, Some(other))) if !by_bot(c) => Standing::PersonPinnedOther(other),
        _ => Standing::Missing,
    }
}

/// The hidden marker of the note saying the sweep no longer covers the
/// head (one per candidate).
fn uncovered_marker(candidate: &str) -> String {
    format!("<!-- klaud-sweep-uncovered:{candidate} -->")
}

/// Klaud's reuse comment once withdrawn. No line of it is a reuse line the
/// gate reads (the command sits inside a sentence).
pub(crate) fn withdrawn_body(run: u64, head: &CommitSha) -> String {
    format!(
        "<!-- klaud-reuse-withdrawn -->\n**Withdrawn:** Klaud no longer authorizes reuse of run {run} (it posted `/reuse-sweep-run {run}` here): {head} was pushed on top of the validated commit and that run never ran it.\n\n<details>\n<summary>中文</summary>\n\n**已撤回**：Klaud 不再授权复用运行 {run}（此前在此发布了 `/reuse-sweep-run {run}`）：有人在已验证的提交之上推送了 {head}，该运行从未运行过它。\n\n</details>\n"
    )
}

/// The note on the PR, in both languages: the sweep no longer covers the
/// head, what Klaud withdrew, the people's lines still standing and what a
/// maintainer can do.
pub(crate) fn uncovered_note(
    marker: &str,
    run: u64,
    head: &CommitSha,
    people: &[String],
) -> String {
    let still = if people.is_empty() {
        String::new()
    } else {
        format!(
            " The reuse line of {} still names run {run}: delete it, or the merge reuses a sweep that never ran this head.",
            people.join(", ")
        )
    };
    let still_zh = if people.is_empty() {
        String::new()
    } else {
        format!(
            " {} 的复用指令仍指向运行 {run}：请删除它，否则合并会复用一个从未运行过此 head 的 sweep。",
            people.join("、")
        )
    };
    format!(
        "{marker}\n**The validated sweep no longer covers this PR's head.** {head} was pushed on top of the commit run {run} validated, so Klaud withdrew its reuse authorization: merging now runs the sweep again on main.{still} To sweep this head, a maintainer comments `/klaud retry`: Klaud runs the final sweep again here and, when it passes, replaces its receipt and posts `/reuse-sweep-run` with the new run. Or a maintainer posts `/reuse-sweep-run` with the id of a passed sweep run of this head.\n\n<details>\n<summary>中文</summary>\n\n**已验证的 sweep 不再覆盖此 PR 的 head。** 有人在运行 {run} 验证过的提交之上推送了 {head}，因此 Klaud 撤回了复用授权：现在合并会在 main 上重新运行 sweep。{still_zh}若要对此 head 运行 sweep，请维护者评论 `/klaud retry`：Klaud 会在此重新运行最终 sweep，通过后更新回执并发布指向新运行的 `/reuse-sweep-run`。或者由维护者发布 `/reuse-sweep-run`，并附上此 head 上已通过的 sweep 运行的 id。\n\n</details>\n"
    )
}

impl Engine<'_> {
    /// Whether Klaud must post its pinned line for `rec`'s validated run on
    /// PR `number` this pass (a read only).
    pub(super) async fn reuse_line_missing(
        &self,
        rec: &CandidateRecord,
        number: PullNumber,
    ) -> Result<bool, EngineError> {
        let Some(run) = rec.sweep.as_ref().map(|s| s.run_id) else {
            return Ok(false);
        };
        if !self.config.authorize_reuse {
            return Ok(false);
        }
        let comments = self.forge.list_comments(number).await?;
        Ok(standing(&comments, run, |c| self.by_bot(c.author.as_deref())) == Standing::Missing)
    }

    /// A person pushed `head` on top of the validated commit: Klaud's own
    /// reuse comments are edited so no line of theirs stands, and the PR
    /// says once that the sweep no longer covers the head. Runs under the
    /// family's claim; the pull request is checked, not the branch (it is
    /// the person's push now).
    pub(super) async fn withdraw_reuse(
        &self,
        rec: &mut CandidateRecord,
        number: PullNumber,
        head: &CommitSha,
    ) -> Result<Upkept, EngineError> {
        let run = rec.sweep.as_ref().map_or(0, |s| s.run_id);
        let cid = Self::candidate_id(rec)?;
        let marker = uncovered_marker(cid.as_str());
        let comments = self.forge.list_comments(number).await?;
        let ours: Vec<&Comment> = comments
            .iter()
            .filter(|c| self.by_bot(c.author.as_deref()))
            .collect();
        let to_edit: Vec<u64> = ours
            .iter()
            .filter(|c| reuse_line_run(&c.body).is_some())
            .map(|c| c.id)
            .collect();
        let noted = ours.iter().any(|c| c.body.contains(&marker));
        // People's lines that still let the gate reuse the run: Klaud does
        // not edit a person's comment, it names them.
        let mut people: Vec<String> = accepted_lines(&comments)
            .filter(|(c, id)| !self.by_bot(c.author.as_deref()) && id.is_none_or(|id| id == run))
            .filter_map(|(c, _)| c.author.as_ref().map(|a| format!("@{a}")))
            .collect();
        people.sort();
        people.dedup();
        if !to_edit.is_empty() || !noted {
            let proof = match self.prove(rec, Scope::PullOnly).await? {
                Ok(p) => p,
                Err(_) => return Ok(Upkept::Settled(self.mismatch_why(rec))),
            };
            let withdrawn = withdrawn_body(run, head);
            for id in to_edit {
                self.intend(rec, Intent::WithdrawReuse).await?;
                self.forge
                    .update_comment(&proof, number, id, &withdrawn)
                    .await?;
            }
            if !noted {
                self.intend(rec, Intent::SayUncovered).await?;
                self.forge
                    .create_comment(&proof, number, &uncovered_note(&marker, run, head, &people))
                    .await?;
            }
        }
        let withdrawn = Withdrawn {
            run,
            head: head.clone(),
        };
        let line = withdrawn.line();
        rec.upkeep.get_or_insert_with(Default::default).withdrawn = Some(withdrawn);
        Ok(Upkept::Withdrawn(line))
    }

    /// Why the ownership check refused an upkeep write, from the ending it
    /// wrote (the caller restores the validated one).
    pub(super) fn mismatch_why(&self, rec: &CandidateRecord) -> String {
        rec.ending
            .as_ref()
            .map(|e| e.message.clone())
            .unwrap_or_else(|| "the ownership check failed".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comment(id: u64, author: &str, association: &str, body: &str) -> Comment {
        Comment {
            id,
            body: body.into(),
            author: Some(author.into()),
            author_association: Some(AuthorAssociation::parse(association)),
        }
    }

    fn by_klaud(c: &Comment) -> bool {
        c.author.as_deref() == Some("klaud")
    }

    #[test]
    fn reuse_lines_are_read_as_the_repository_gate_reads_them() {
        assert_eq!(reuse_line_run("/reuse-sweep-run 123"), Some(Some(123)));
        assert_eq!(reuse_line_run("  /reuse-sweep-run   7  "), Some(Some(7)));
        assert_eq!(reuse_line_run("/reuse-sweep-run"), Some(None));
        assert_eq!(
            reuse_line_run("/reuse-sweep-run 1\ntext\n/reuse-sweep-run 2"),
            Some(Some(2))
        );
        assert_eq!(reuse_line_run("please /reuse-sweep-run 1"), None);
        assert_eq!(reuse_line_run("/reuse-sweep-run 12a"), None);
        assert_eq!(reuse_line_run("/reuse-sweep-runs 12"), None);
        assert_eq!(reuse_line_run("`/reuse-sweep-run 12`"), None);
        assert_eq!(reuse_line_run("/use 12"), None);
    }

    #[test]
    fn the_newest_accepted_line_stands_as_the_gate_reads_it() {
        let comments = vec![
            comment(1, "klaud", "COLLABORATOR", "/reuse-sweep-run 7"),
            comment(2, "drive-by", "NONE", "/reuse-sweep-run 9"),
        ];
        assert_eq!(standing(&comments, 7, by_klaud), Standing::Pinned);
        let mut bare = comments.clone();
        bare.push(comment(3, "outside", "COLLABORATOR", "/reuse-sweep-run"));
        assert_eq!(standing(&bare, 7, by_klaud), Standing::Missing);
        let mut other = comments.clone();
        other.push(comment(3, "maintainer", "MEMBER", "/reuse-sweep-run 8"));
        assert_eq!(
            standing(&other, 7, by_klaud),
            Standing::PersonPinnedOther(8)
        );
        assert_eq!(standing(&[], 7, by_klaud), Standing::Missing);
        let theirs = vec![comment(4, "maintainer", "OWNER", "ok\n/reuse-sweep-run 7")];
        assert_eq!(standing(&theirs, 7, by_klaud), Standing::Pinned);
    }

    #[test]
    fn a_withdrawn_comment_and_the_note_hold_no_line_the_gate_reads() {
        let head = CommitSha::parse(&"a".repeat(40)).expect("sha");
        for body in [
            withdrawn_body(7, &head),
            uncovered_note("<!-- m -->", 7, &head, &["@someone".into()]),
        ] {
            assert_eq!(reuse_line_run(&body), None, "{body}");
            assert!(body.contains("<summary>中文</summary>"));
        }
        let note = uncovered_note("<!-- m -->", 7, &head, &[]);
        assert!(note.contains("`/reuse-sweep-run` with the id"), "{note}");
        assert!(note.contains("`/klaud retry`"), "{note}");
    }
}
