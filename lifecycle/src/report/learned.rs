//! A playbook entry Klaud learned from a failure that a change fixed, as
//! the receipt shows it (a `<details>` block with the YAML ready to paste)
//! and keeps it (in the receipt's hidden record, so the dashboard issue and
//! another instance read it back from GitHub).

use klaud_claims::PullNumber;
use serde::{Deserialize, Serialize};

use super::format::{code, text};
use crate::playbook::FailedRun;

/// Longest proposed entry kept, in bytes: a proposal is a few patterns and
/// two sentences; a record claiming more is not Klaud's.
pub const MAX_LEARNED_YAML: usize = 8 * 1024;
/// Longest id, family or path kept.
const MAX_FIELD: usize = 300;

/// One proposed playbook entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LearnedEntry {
    /// The entry's id (`learned-<signature hex>`).
    pub id: String,
    /// The family whose smoke failed and passed (`configs/<file>:<key>`).
    pub family: String,
    /// The pull request it was learned on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull: Option<PullNumber>,
    /// The playbook file the entry belongs in (the configuration's
    /// `lifecycle.playbook`).
    pub path: String,
    /// The entry as YAML, indented as an item of `entries:`.
    pub yaml: String,
    /// What the fix was, in words (`--kv-cache-dtype fp8 → auto`, or the
    /// change when it is not a fix of the safe vocabulary).
    pub change: String,
    /// Which run failed with the lines (records before it was kept were
    /// all smokes').
    #[serde(default, skip_serializing_if = "FailedRun::is_smoke")]
    pub failed: FailedRun,
}

impl LearnedEntry {
    /// Whether a record read back from GitHub is within the bounds Klaud
    /// writes: anything else is dropped, never shown.
    pub fn is_bounded(&self) -> bool {
        let short = |s: &str| !s.is_empty() && s.len() <= MAX_FIELD && !s.contains(['\n', '\r']);
        short(&self.id)
            && self
                .id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && short(&self.family)
            && short(&self.path)
            && self.change.len() <= MAX_FIELD
            && !self.yaml.is_empty()
            && self.yaml.len() <= MAX_LEARNED_YAML
    }
}

/// A fenced code block around `body` whose fence no run of backticks in it
/// can close.
pub fn fenced(lang: &str, body: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in body.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    let fence = "`".repeat((longest + 1).max(3));
    let nl = if body.ends_with('\n') { "" } else { "\n" };
    format!("{fence}{lang}\n{body}{nl}{fence}\n")
}

/// The receipt's block: what was learned, the file it goes in, the YAML to
/// paste under `entries:`, in both languages.
pub fn render_learned(entry: &LearnedEntry) -> String {
    let (what, what_zh) = match entry.failed {
        FailedRun::Smoke => ("A smoke", "一次 smoke 测试"),
        FailedRun::Sweep => ("A final sweep", "一次最终 sweep"),
    };
    format!(
        "<details>\n<summary>Proposed playbook entry / 建议的排障手册条目: {id}</summary>\n\n\
         {what} failed with a signature the playbook did not know and passed after {change}. \
         To accept the entry, add it under `entries:` in {path} (or tick its box on the dashboard issue, which opens that PR).  \n\
         {what_zh}曾以排障手册未收录的签名失败，在 {change} 之后通过。接受方法：将下面的条目加入 {path} 的 `entries:` 之下（或在看板 issue 上勾选它的复选框，由 Klaud 开 PR）。\n\n{yaml}\n</details>\n",
        id = code(&entry.id),
        change = text(&entry.change),
        path = code(&entry.path),
        yaml = fenced("yaml", &entry.yaml),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_backticks_in_the_yaml_can_close_its_fence() {
        let block = fenced("yaml", "  - id: x\n    note: '````'\n");
        assert!(block.starts_with("`````yaml\n"), "{block}");
        assert!(block.ends_with("\n`````\n"), "{block}");
        assert_eq!(fenced("", "a"), "```\na\n```\n");
    }

    #[test]
    fn a_record_out_of_bounds_is_not_klauds() {
        let good = LearnedEntry {
            id: "learned-0123abcd".into(),
            family: "configs/a.yaml:k".into(),
            pull: None,
            path: ".github/klaud-playbook.yaml".into(),
            yaml: "  - id: learned-0123abcd\n".into(),
            change: "a change".into(),
            failed: FailedRun::Smoke,
        };
        assert!(good.is_bounded());
        let mut bad = good.clone();
        bad.id = "Learned x".into();
        assert!(!bad.is_bounded());
        let mut big = good;
        big.yaml = "x".repeat(MAX_LEARNED_YAML + 1);
        assert!(!big.is_bounded());
    }
}
