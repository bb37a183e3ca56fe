//! Learned playbook entries on the dashboard issue: each entry a repair
//! taught (from a candidate's receipt, see `klaud_lifecycle::report::learned`)
//! is listed with its YAML and a box that opens a pull request adding it to
//! the repository's playbook.
//!
//! The proposals are kept in the state block, so a lost store loses
//! none; one already in the playbook on the base branch (same id, or the
//! same patterns) is dropped, which is also how an accepted one leaves the
//! list once its pull request is merged or a maintainer pasted it.

use std::collections::BTreeMap;

use klaud_claims::PullNumber;
use klaud_github::{Github, GithubError, PLAYBOOK_BRANCH_PREFIX, PlaybookPull};
use klaud_lifecycle::engine::CandidateRecord;
use klaud_lifecycle::playbook::Playbook;
use klaud_lifecycle::report::{LearnedEntry, learned::fenced};
use serde::{Deserialize, Serialize};

use super::kept::{Action, Kept, clip};
use super::render::{code, link, text};

/// Most proposals kept in the state block (their YAML counts against its
/// size): the newest wait until one is accepted or dropped.
pub const MAX_LEARNED: usize = 8;

/// One proposal kept in the issue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeptLearned {
    /// The entry and where it was learned.
    pub entry: LearnedEntry,
    /// The base branch the playbook is read from and the pull request
    /// targets.
    pub base: String,
    /// The pull request that adds it, once a maintainer asked for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<PullNumber>,
}

impl KeptLearned {
    /// The branch its pull request comes from: one per entry, so a box
    /// applied again finds the pull request instead of opening another.
    pub fn branch(&self) -> String {
        format!("{PLAYBOOK_BRANCH_PREFIX}{}", self.entry.id)
    }

    /// Whether a kept proposal reads as one Klaud writes.
    pub fn is_bounded(&self) -> bool {
        self.entry.is_bounded()
            && !self.base.is_empty()
            && self.base.len() <= 255
            && !self.base.contains(char::is_whitespace)
    }
}

/// Takes in the proposals of `records` not kept yet (by id); returns
/// whether anything changed.
pub fn absorb(kept: &mut Kept, records: &[CandidateRecord]) -> bool {
    let mut changed = false;
    for rec in records {
        let Some(entry) = rec.learned.as_ref().filter(|e| e.is_bounded()) else {
            continue;
        };
        if kept.learned.iter().any(|k| k.entry.id == entry.id) {
            continue;
        }
        if kept.learned.len() >= MAX_LEARNED {
            // An accepted one makes room first: its pull request holds it.
            match kept.learned.iter().position(|k| k.pull_request.is_some()) {
                Some(i) => {
                    kept.learned.remove(i);
                }
                None => continue,
            }
        }
        kept.learned.push(KeptLearned {
            entry: entry.clone(),
            base: rec.base_branch.clone(),
            pull_request: None,
        });
        // The YAML lives in the state block too: half of what a block may
        // hold is theirs, the rest stays for the ignores and notes.
        if kept.block().len() > super::kept::MAX_STATE_BYTES / 2 {
            kept.learned.pop();
            break;
        }
        changed = true;
    }
    changed
}

/// The playbook file at `base`, parsed (`None`: absent or unreadable, so
/// nothing is known to be in it).
async fn playbook_at(
    forge: &Github,
    path: &str,
    base: &str,
) -> Result<Option<String>, GithubError> {
    Ok(forge
        .get_contents(path, base)
        .await?
        .and_then(|b| String::from_utf8(b).ok()))
}

/// The patterns of a proposal, read as the playbook reads them.
fn patterns_of(entry: &LearnedEntry) -> Option<Vec<String>> {
    let book = Playbook::parse(
        &entry.path,
        &format!("version: 1\nentries:\n{}", entry.yaml),
    )
    .ok()?;
    let e = book.entries.first()?;
    Some(
        e.signature
            .all
            .iter()
            .map(|r| r.as_str().to_owned())
            .collect(),
    )
}

/// Whether `file` (a playbook's text) has the entry already: its id, or an
/// entry with the same patterns.
pub fn in_playbook(file: &str, entry: &LearnedEntry) -> bool {
    match Playbook::parse(&entry.path, file) {
        Ok(book) => {
            let same = patterns_of(entry);
            book.entry(&entry.id).is_some()
                || same.is_some_and(|p| {
                    book.entries.iter().any(|e| {
                        let theirs: Vec<&str> =
                            e.signature.all.iter().map(|r| r.as_str()).collect();
                        !p.is_empty() && theirs == p.iter().map(String::as_str).collect::<Vec<_>>()
                    })
                })
        }
        // A file that does not parse (being edited, or broken) still says
        // whether the id was pasted.
        Err(_) => file
            .lines()
            .any(|l| l.trim_start().trim_start_matches("- ").trim() == format!("id: {}", entry.id)),
    }
}

/// Drops the kept proposals the playbook on their base branch has already
/// (one read per file and branch). Returns whether anything changed.
pub async fn drop_accepted(forge: &Github, kept: &mut Kept) -> Result<bool, GithubError> {
    let mut files: BTreeMap<(String, String), Option<String>> = BTreeMap::new();
    for k in &kept.learned {
        if let std::collections::btree_map::Entry::Vacant(slot) =
            files.entry((k.entry.path.clone(), k.base.clone()))
        {
            let text = playbook_at(forge, &k.entry.path, &k.base).await?;
            slot.insert(text);
        }
    }
    let before = kept.learned.len();
    kept.learned.retain(|k| {
        !files
            .get(&(k.entry.path.clone(), k.base.clone()))
            .and_then(Option::as_ref)
            .is_some_and(|file| in_playbook(file, &k.entry))
    });
    Ok(kept.learned.len() != before)
}

/// The playbook with `entry` appended under `entries:`, byte-exactly: the
/// file's bytes up to the end of its `entries:` list, the entry, the rest.
/// A file without one gets a header. `None` when the file has no top-level
/// `entries:` list Klaud can find.
pub fn appended(file: Option<&str>, entry: &LearnedEntry) -> Option<String> {
    let yaml = if entry.yaml.ends_with('\n') {
        entry.yaml.clone()
    } else {
        format!("{}\n", entry.yaml)
    };
    let Some(file) = file.filter(|f| !f.trim().is_empty()) else {
        return Some(format!(
            "# The playbook of known failures Klaud reads (format: Klaud's configs/playbook.md).\nversion: 1\nentries:\n{yaml}"
        ));
    };
    let lines: Vec<&str> = file.split_inclusive('\n').collect();
    let start = lines
        .iter()
        .position(|l| l.trim_end() == "entries:" || l.trim_end() == "entries: []")?;
    if lines[start].trim_end() == "entries: []" {
        let mut out: String = lines[..start].concat();
        out.push_str("entries:\n");
        out.push_str(&yaml);
        out.push_str(&lines[start + 1..].concat());
        return Some(out);
    }
    // The list ends at the next line that starts a top-level key (or the
    // end); comments and blank lines before it stay after the entry.
    let mut end = lines.len();
    for (i, l) in lines.iter().enumerate().skip(start + 1) {
        let first = l.chars().next();
        if first.is_some_and(|c| !c.is_whitespace() && c != '#' && c != '-') {
            end = i;
            break;
        }
    }
    let trailing = |l: &str| {
        let t = l.trim();
        t.is_empty() || (t.starts_with('#') && !l.starts_with(' '))
    };
    let mut last = end;
    while last > start + 1 && trailing(lines[last - 1]) {
        last -= 1;
    }
    let mut out: String = lines[..last].concat();
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&yaml);
    out.push_str(&lines[last..].concat());
    Some(out)
}

/// Opens (or finds) the pull request adding the kept proposal `id` for
/// `by`, and records it; the note said on the issue.
pub async fn accept(forge: &Github, kept: &mut Kept, id: &str, by: &str) -> String {
    let Some(k) = kept.learned.iter_mut().find(|k| k.entry.id == id) else {
        return format!(
            "Nothing to add: no proposed playbook entry `{}` is kept here. / 无此建议条目。",
            clip(id)
        );
    };
    if let Some(n) = k.pull_request {
        return format!("`{id}` already has its pull request #{n}. / 已有 PR #{n}。");
    }
    match open_pull(forge, k, by).await {
        Ok(n) => {
            k.pull_request = Some(n);
            format!(
                "Applied for @{by}: pull request #{n} adds `{id}` to `{}`. / 已执行：PR #{n} 将此条目加入排障手册。",
                k.entry.path
            )
        }
        Err(e) => format!("Not applied: add `{id}` to the playbook — {e}"),
    }
}

async fn open_pull(forge: &Github, k: &KeptLearned, by: &str) -> Result<PullNumber, GithubError> {
    let full = format!("refs/heads/{}", k.base);
    let Some(base_sha) = forge.get_ref(&full).await? else {
        return Err(GithubError::NotFound {
            what: format!("branch {}", k.base),
        });
    };
    let file = playbook_at(forge, &k.entry.path, &base_sha).await?;
    let Some(content) = appended(file.as_deref(), &k.entry) else {
        return Err(GithubError::Config(format!(
            "{} has no top-level `entries:` list to add the entry to",
            k.entry.path
        )));
    };
    let source = k
        .entry
        .pull
        .map_or_else(String::new, |n| format!(" (learned on #{n})"));
    let message = format!(
        "playbook: add {}\n\nLearned by Klaud from a failure a change fixed{source}; asked for by @{by} on the dashboard issue.\n",
        k.entry.id
    );
    let title = format!("playbook: add {}", k.entry.id);
    let body = format!(
        "Adds the playbook entry {id} that Klaud learned on {family}{source}: {what} failed with lines the playbook did not know and passed after {change}. Asked for on the dashboard issue by @{by}. Check the cause and widen the scope before merging.\n\n\
         添加 Klaud 学到的排障手册条目 {id}（系列 {family}{source_zh}）：{what_zh}以排障手册未收录的日志行失败，在 {change} 之后通过。由 @{by} 在看板 issue 上请求。合并前请核实原因并酌情放宽适用范围。\n\n{yaml}",
        what = k.entry.failed.en(),
        what_zh = k.entry.failed.zh(),
        // The entry came back from GitHub (a receipt, the kept
        // block): its words are shown through the one escaping rule.
        id = code(&k.entry.id),
        family = code(&k.entry.family),
        change = text(&k.entry.change),
        source_zh = k
            .entry
            .pull
            .map_or_else(String::new, |n| format!("，学自 #{n}")),
        yaml = fenced("yaml", &k.entry.yaml),
    );
    let branch = k.branch();
    let pull = forge
        .open_playbook_pull(&PlaybookPull {
            base: &k.base,
            base_sha: &base_sha,
            branch: &branch,
            path: &k.entry.path,
            content: content.as_bytes(),
            message: &message,
            title: &title,
            body: &body,
        })
        .await?;
    Ok(PullNumber::from(pull.number))
}

/// The section: each proposal with its YAML and its box (or its pull
/// request, once opened).
pub fn push_learned(out: &mut String, web: &str, kept: &Kept) {
    out.push_str("\n### Learned playbook entries / 学到的排障手册条目\n\n");
    if kept.learned.is_empty() {
        out.push_str("None. / 无。\n");
        return;
    }
    for k in &kept.learned {
        let e = &k.entry;
        let pr = e.pull.map_or_else(String::new, |n| {
            format!(
                ", learned on / 学自 {}",
                link(&format!("#{n}"), &format!("{web}/pull/{n}"))
            )
        });
        out.push_str(&format!(
            "- {} for {}{pr}: {}\n",
            code(&e.id),
            code(&e.family),
            text(&e.change),
        ));
        match k.pull_request {
            Some(n) => out.push_str(&format!(
                "  - Pull request / PR: {}\n",
                link(&format!("#{n}"), &format!("{web}/pull/{n}"))
            )),
            None => {
                let label = format!(
                    "open a PR adding this entry to {} / 开 PR 将此条目加入排障手册",
                    code(&e.path)
                );
                out.push_str(&format!(
                    "  {}\n",
                    Action::AddPlaybookEntry { id: e.id.clone() }.checkbox(&label)
                ));
            }
        }
        out.push_str(&format!(
            "\n  <details><summary>YAML</summary>\n\n{}\n  </details>\n\n",
            indent(&fenced("yaml", &e.yaml))
        ));
    }
}

fn indent(block: &str) -> String {
    block
        .lines()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> LearnedEntry {
        LearnedEntry {
            id: "learned-0123456789abcdef".into(),
            family: "configs/a.yaml:k".into(),
            pull: Some(PullNumber::from(7)),
            path: ".github/klaud-playbook.yaml".into(),
            yaml: "  - id: learned-0123456789abcdef\n    class: engine\n    signature:\n      all:\n        - 'fp8 KV cache is not supported'\n    diagnosis:\n      en: 'x'\n      zh: 'y'\n".into(),
            change: "a change".into(),
            failed: Default::default(),
        }
    }

    const DEMO: &str = include_str!("../../../../configs/demo/.github/klaud-playbook.yaml");

    #[test]
    fn the_entry_goes_at_the_end_of_the_entries_list_byte_exactly() {
        let e = entry();
        let out = appended(Some(DEMO), &e).expect("appended");
        let at = DEMO.find("nodes:\n").expect("nodes");
        assert_eq!(out, format!("{}{}{}", &DEMO[..at], e.yaml, &DEMO[at..]));
        let book = Playbook::parse("demo", &out).expect("reads");
        assert!(book.entry(&e.id).is_some());
        assert_eq!(
            book.nodes.len(),
            Playbook::parse("demo", DEMO).unwrap().nodes.len()
        );
        assert!(in_playbook(&out, &e));
        assert!(!in_playbook(DEMO, &e));
        // No file: one with a header.
        let fresh = appended(None, &e).expect("fresh");
        assert!(
            Playbook::parse("fresh", &fresh)
                .expect("reads")
                .entry(&e.id)
                .is_some()
        );
        let empty = appended(Some("version: 1\nentries: []\n"), &e).expect("empty list");
        assert!(
            Playbook::parse("empty", &empty)
                .expect("reads")
                .entry(&e.id)
                .is_some()
        );
        assert_eq!(appended(Some("version: 1\n"), &e), None);
    }

    #[test]
    fn inferencex_playbook_takes_the_entry_before_its_nodes() {
        const INFERENCEX: &str = include_str!("../../../../configs/inferencex-playbook.yaml");
        let e = entry();
        let out = appended(Some(INFERENCEX), &e).expect("appended");
        let before = Playbook::parse("x", INFERENCEX).expect("reads");
        let after = Playbook::parse("x", &out).expect("reads");
        assert_eq!(after.entries.len(), before.entries.len() + 1);
        assert_eq!(
            after.entries.last().map(|x| x.id.as_str()),
            Some(e.id.as_str())
        );
        assert_eq!(after.nodes.len(), before.nodes.len());
        // Only the entry's lines were added.
        assert_eq!(out.len(), INFERENCEX.len() + e.yaml.len());
    }

    #[test]
    fn the_same_patterns_under_another_id_are_in_the_playbook() {
        let e = entry();
        let renamed = appended(Some(DEMO), &e)
            .unwrap()
            .replace("id: learned-0123456789abcdef", "id: fp8-kv-unsupported");
        assert!(in_playbook(&renamed, &e));
    }
}
