//! Completion receipts (see `klaud_lifecycle::report`) and the cleanup marker comment.
//!
//! Layout follows the helper's `<details>` receipt (PR #3023):
//!
//! ```text
//! <!-- klaud-outcome:<owner run>:<candidate>
//! {"head":…,"outcome":…,"validation":{…}}
//! -->
//! **failed** · Repairs: 0 · Runs: [id](url), [id](url)
//! <sentence>
//!
//! <details>
//! <summary>中文</summary>
//! …
//! </details>
//! ```

use klaud_claims::{CommitSha, PullNumber};
use serde::{Deserialize, Serialize};

use klaud_render::Bilingual;

use super::RenderedComment;
use super::format::{code, link, text};
use super::learned::{LearnedEntry, render_learned};
use super::markers::{
    HiddenRecord, MarkerError, MarkerKey, cleanup_marker, hidden_block, hidden_json, parse_json,
};
use crate::model::{CandidateId, Declined, FinishedResult, Outcome, OwnerRun, Phase, RunRef};

/// What the final sweep verification found (from the sweep manifest and the
/// run), kept in the receipt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepCheck {
    /// The sweep run.
    #[serde(rename = "run-id")]
    pub run_id: u64,
    /// Its attempt.
    #[serde(rename = "run-attempt")]
    pub run_attempt: u32,
    /// The head it ran on.
    pub head: CommitSha,
    /// Whether it was a full sweep.
    #[serde(rename = "full-sweep")]
    pub full_sweep: bool,
    /// Whether a `klaud-sweep-manifest` confirmed the above.
    pub manifest: bool,
}

/// A receipt: the checked result plus what was verified.
#[derive(Debug, Clone, PartialEq)]
pub struct Receipt {
    /// Owner run.
    pub owner_run: OwnerRun,
    /// Candidate.
    pub candidate: CandidateId,
    /// Branch head at the end, if a branch existed.
    pub head: Option<CommitSha>,
    /// The result.
    pub result: FinishedResult,
    /// Final sweep verification, when one ran.
    pub sweep: Option<SweepCheck>,
    /// Extra sentence in English (e.g. who released the claim and why).
    pub note: Option<String>,
    /// The same sentence in Chinese.
    pub note_zh: Option<String>,
    /// A person closed the PR without merging: the receipt says what that
    /// means and how to undo it, and keeps it for an instance that rebuilds
    /// from GitHub.
    pub declined: Option<Declined>,
    /// The closed PR was one variant's while a sibling of the same image
    /// still ran or was validated: the close ended this variant only, and
    /// the receipt says so instead of "not this image" (see
    /// `Declined::stands`). Not kept in the marker: it is only how the
    /// receipt reads.
    pub declined_waits: bool,
    /// The dashboard issue's web page, when known (the undo box is there).
    pub dashboard: Option<(u64, String)>,
    /// A regression hunt's result lines ([`crate::hunt::result_lines`]),
    /// English then Chinese; empty when none ran.
    pub hunt: (Vec<String>, Vec<String>),
    /// A playbook entry learned from a failure this candidate's repair
    /// fixed, kept in the hidden record.
    pub learned: Option<LearnedEntry>,
}

#[derive(Serialize, Deserialize)]
struct Wire {
    head: Option<CommitSha>,
    outcome: Outcome,
    validation: Validation,
}

#[derive(Serialize, Deserialize)]
struct Validation {
    phase: Phase,
    #[serde(rename = "pull-request")]
    pull_request: Option<PullNumber>,
    runs: Vec<RunRef>,
    repairs: u32,
    sweep: Option<SweepCheck>,
    #[serde(default)]
    note: Option<String>,
    #[serde(default, rename = "note-zh")]
    note_zh: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    declined: Option<Declined>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    hunt: Vec<String>,
    #[serde(default, rename = "hunt-zh", skip_serializing_if = "Vec::is_empty")]
    hunt_zh: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    learned: Option<LearnedEntry>,
}

impl Receipt {
    /// The marker key.
    pub fn key(&self) -> MarkerKey {
        MarkerKey::Outcome {
            owner_run: self.owner_run,
            candidate: self.candidate.clone(),
        }
    }

    fn wire(&self) -> Wire {
        Wire {
            head: self.head.clone(),
            outcome: self.result.outcome(),
            validation: Validation {
                phase: self.result.phase(),
                pull_request: self.result.pull_request(),
                runs: self.result.runs().to_vec(),
                repairs: self.result.repairs(),
                sweep: self.sweep.clone(),
                note: self.note.clone(),
                note_zh: self.note_zh.clone(),
                declined: self.declined.clone(),
                hunt: self.hunt.0.clone(),
                hunt_zh: self.hunt.1.clone(),
                learned: self.learned.clone(),
            },
        }
    }
}

fn sentences(outcome: Outcome) -> (&'static str, &'static str) {
    match outcome {
        Outcome::Validated => (
            "The full sweep is verified; this PR is ready for review.",
            "完整 sweep 已通过验证；PR 已就绪，等待审查。",
        ),
        Outcome::CapacityDeferred => (
            "No GPU capacity was available; a later wave will try again.",
            "没有可用的 GPU 资源；之后的轮次会再次尝试。",
        ),
        Outcome::ReadinessBlocked => (
            "The repository was not ready for this candidate.",
            "仓库尚未准备好处理该候选。",
        ),
        Outcome::Incompatible => (
            "The candidate image cannot run this configuration.",
            "候选镜像无法运行此配置。",
        ),
        Outcome::Duplicate => (
            "Another pull request already proposes this image.",
            "已有其他 PR 提出相同的镜像。",
        ),
        Outcome::Retired => (
            "The configuration no longer exists on the base branch.",
            "基础分支上已不存在该配置。",
        ),
        Outcome::AlreadyUpdated => (
            "The base branch already uses this image.",
            "基础分支已使用该镜像。",
        ),
        Outcome::Uncertain => (
            "Klaud could not determine the result of its runs.",
            "Klaud 无法确定其运行的结果。",
        ),
        Outcome::Failed => (
            "All owned runs ended without a passing result.",
            "所有自有运行均已结束，未获得通过的结果。",
        ),
        Outcome::Handoff => (
            "A maintainer took over; Klaud no longer changes this PR.",
            "维护者已接手；Klaud 不再修改此 PR。",
        ),
        Outcome::UnexpectedError => (
            "Klaud stopped after an unexpected error and cleaned up its runs.",
            "Klaud 因意外错误停止，并已清理其运行。",
        ),
    }
}

fn run_links(runs: &[RunRef]) -> String {
    if runs.is_empty() {
        return "—".to_owned();
    }
    runs.iter()
        .map(|r| link(&r.id.to_string(), &r.attempt_url()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Renders the receipt comment: each sentence in English and Chinese side
/// by side, the Chinese folded under the English.
pub fn render_receipt(receipt: &Receipt) -> RenderedComment {
    let key = receipt.key();
    let outcome = receipt.result.outcome();
    let runs = run_links(receipt.result.runs());
    let repairs = receipt.result.repairs();
    let (en, zh) = match (outcome, &receipt.note) {
        // A person's decision (`/klaud stop|release`, `klaud claims release`,
        // `klaud candidate handoff`): the note says who and why, and the
        // candidate may have been cleaned up rather than taken over.
        (Outcome::Handoff, Some(_)) => (
            "A maintainer ended this candidate; Klaud no longer changes this PR.",
            "维护者已结束此候选；Klaud 不再修改此 PR。",
        ),
        _ => sentences(outcome),
    };
    let mut words = Bilingual::owned(
        format!("**{outcome}** · Repairs: {repairs} · Runs: {runs}  \n{en}"),
        format!("**{outcome}** · 修复次数：{repairs} · 运行：{runs}  \n{zh}"),
    );
    // A person's note has no translation: the Chinese quotes it as the
    // original, never as an unmarked English sentence.
    let note_en = receipt.note.as_ref().map(|note| format!(" {}", text(note)));
    let note_zh = match (&receipt.note_zh, &receipt.note) {
        (Some(zh), _) => Some(text(zh)),
        (None, Some(note)) => Some(text(&format!("原文：{note}"))),
        (None, None) => None,
    };
    words.push(note_en.unwrap_or_default(), note_zh.unwrap_or_default());
    if let Some(d) = &receipt.declined {
        let declined = if receipt.declined_waits {
            variant_declined_words(d)
        } else {
            declined_words(d, receipt.dashboard.as_ref())
        };
        words.push(
            format!("\n\n{}", declined.en),
            format!("\n\n{}", declined.zh),
        );
    }
    // The lines are rendered by the hunt (escaped there), as on the PR.
    let hunt_lines = |lines: &[String]| match lines.is_empty() {
        true => String::new(),
        false => format!("\n\n{}", lines.join("  \n")),
    };
    words.push(hunt_lines(&receipt.hunt.0), hunt_lines(&receipt.hunt.1));
    // The learned entry's block carries both languages itself.
    if let Some(entry) = &receipt.learned {
        words.push(format!("\n\n{}", render_learned(entry)), "");
    }
    let mut body = hidden_block(&key, &hidden_json(&receipt.wire()));
    body.push_str(&words.en);
    body.push_str("\n\n<details>\n<summary>中文</summary>\n\n");
    body.push_str(&words.zh);
    body.push_str("\n\n</details>\n");
    RenderedComment { key, body }
}

/// What closing the PR without merging means, in one paragraph: the image
/// is not proposed for this family again, a newer one is, and the
/// dashboard issue's box undoes it.
pub fn declined_words(d: &Declined, dashboard: Option<&(u64, String)>) -> Bilingual {
    let image = code(&d.image);
    let issue = match dashboard {
        Some((n, url)) => link(&format!("#{n}"), url),
        None => "`klaud-dashboard`".to_owned(),
    };
    Bilingual::owned(
        format!(
            "**Not this image:** this PR was closed without merging, so Klaud will not propose {image} for this family again; it will propose a newer image when one appears. To undo this, tick the undo box beside {image} in the \"Ignored\" section of the dashboard issue {issue}; the next pass may propose it again."
        ),
        format!(
            "**不要这个镜像**：此 PR 未合并即被关闭，Klaud 不会再为该系列提议 {image}；出现更新的镜像时，Klaud 会提议更新的镜像。撤销方法：在看板 issue {issue} 的“已忽略”部分勾选 {image} 旁的撤销框，下一轮即可再次提议它。"
        ),
    )
}

/// What closing one variant's PR means while another variant of the same
/// image still runs or was validated: this variant ended, the image is not
/// ruled out.
pub fn variant_declined_words(d: &Declined) -> Bilingual {
    let image = code(&d.image);
    Bilingual::owned(
        format!(
            "**This variant only:** this PR was closed without merging, which ends this variant; the experiment's other variants of {image} go on. {image} becomes \"not this image\" for this family only if the last of their PRs is closed without merging too and none was validated."
        ),
        format!(
            "**仅结束此变体**：此 PR 未合并即被关闭，只结束了这个变体；该实验中使用 {image} 的其他变体继续运行。只有当其中最后一个 PR 也未合并即被关闭、且没有变体通过验证时，{image} 才会被视为“不要这个镜像”。"
        ),
    )
}

/// The receipt of `candidate` a comment `body` carries (its record, read
/// and re-checked), if that is what the comment is.
pub fn candidate_receipt(body: &str, candidate: &str) -> Option<Receipt> {
    let found = super::find_record(body).ok().flatten()?;
    match &found.key {
        MarkerKey::Outcome {
            candidate: named, ..
        } if named.as_str() == candidate => parse_receipt(&found).ok(),
        _ => None,
    }
}

/// Reads a receipt record, re-checking the outcome rules.
pub fn parse_receipt(record: &HiddenRecord<'_>) -> Result<Receipt, MarkerError> {
    let MarkerKey::Outcome {
        owner_run,
        candidate,
    } = &record.key
    else {
        return Err(MarkerError::WrongKind {
            expected: "klaud-outcome",
            found: record.key.to_string(),
        });
    };
    let wire: Wire = parse_json(record)?;
    let v = wire.validation;
    let result = FinishedResult::new(wire.outcome, v.phase, v.pull_request, v.runs, v.repairs)
        .map_err(|e| MarkerError::Json {
            marker: record.key.to_string(),
            reason: e.to_string(),
        })?;
    Ok(Receipt {
        owner_run: *owner_run,
        candidate: candidate.clone(),
        head: wire.head,
        result,
        sweep: v.sweep,
        note: v.note,
        note_zh: v.note_zh,
        declined: v.declined,
        declined_waits: false,
        dashboard: None,
        // Only Klaud's own receipts are read; still, a record is bounded.
        hunt: (
            v.hunt.into_iter().take(MAX_HUNT_LINES).collect(),
            v.hunt_zh.into_iter().take(MAX_HUNT_LINES).collect(),
        ),
        learned: v.learned.filter(LearnedEntry::is_bounded),
    })
}

/// The most hunt lines a receipt keeps.
const MAX_HUNT_LINES: usize = 16;

/// The comment posted when cleanup starts: the marker line and a sentence.
pub fn render_cleanup(owner_run: OwnerRun, candidate: &CandidateId) -> RenderedComment {
    let key = MarkerKey::Cleanup {
        owner_run,
        candidate: candidate.clone(),
    };
    let body = format!(
        "{}\nKlaud is cleaning up this candidate: cancelling its runs, removing sweep labels and closing the PR.\n\n\
         <details>\n<summary>中文</summary>\n\nKlaud 正在清理该候选：取消其运行、移除 sweep 标签并关闭 PR。\n\n</details>\n",
        cleanup_marker(owner_run, candidate)
    );
    RenderedComment { key, body }
}
