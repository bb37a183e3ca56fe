//! Three-way merges of trees, as git merges a pull request into its base:
//! per path, a side that left the merge base's version unchanged takes the
//! other side's; both sides changing a text file merge line by line (git's
//! diff3: changes that overlap or touch conflict, so two different entries
//! appended at the end of one file conflict); anything else that differs on
//! both sides is a conflict.

use std::collections::{BTreeMap, BTreeSet};

use similar::{Algorithm, DiffOp, capture_diff_slices};

use super::git::Objects;

/// A path's `(mode, blob sha)` in a flattened tree.
pub type Entry = (String, String);

/// One path of a clean merge result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Merged {
    /// An entry that exists already (one side's, unchanged).
    Existing(Entry),
    /// A new blob of merged lines, with its mode.
    Content { mode: String, bytes: Vec<u8> },
}

/// The outcome of merging `theirs` into `ours` over `base`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TreeMerge {
    /// Every path merged: the merged tree, flattened.
    Clean(BTreeMap<String, Merged>),
    /// The paths that conflict, sorted.
    Conflicts(Vec<String>),
}

impl TreeMerge {
    pub fn is_clean(&self) -> bool {
        matches!(self, TreeMerge::Clean(_))
    }
}

/// Merges the trees of three commits (`base` is their merge base); `None`
/// when a commit is unknown.
pub fn merge_commits(objs: &Objects, base: &str, ours: &str, theirs: &str) -> Option<TreeMerge> {
    let tree = |sha: &str| objs.commits.get(sha).map(|c| objs.flatten(&c.tree));
    Some(merge_trees(
        objs,
        &tree(base)?,
        &tree(ours)?,
        &tree(theirs)?,
    ))
}

/// Merges flattened trees.
pub fn merge_trees(
    objs: &Objects,
    base: &BTreeMap<String, Entry>,
    ours: &BTreeMap<String, Entry>,
    theirs: &BTreeMap<String, Entry>,
) -> TreeMerge {
    let paths: BTreeSet<&String> = base
        .keys()
        .chain(ours.keys())
        .chain(theirs.keys())
        .collect();
    let mut merged = BTreeMap::new();
    let mut conflicts = Vec::new();
    for path in paths {
        let (o, a, b) = (base.get(path), ours.get(path), theirs.get(path));
        let chosen = if a == b || b == o {
            a.cloned().map(Merged::Existing)
        } else if a == o {
            b.cloned().map(Merged::Existing)
        } else {
            match (a, b) {
                // Both sides keep the path and changed it differently.
                (Some(a), Some(b)) => match merge_file(objs, o, a, b) {
                    Some(m) => Some(m),
                    None => {
                        conflicts.push(path.clone());
                        continue;
                    }
                },
                // Deleted on one side, changed on the other.
                _ => {
                    conflicts.push(path.clone());
                    continue;
                }
            }
        };
        if let Some(entry) = chosen {
            merged.insert(path.clone(), entry);
        }
    }
    if conflicts.is_empty() {
        TreeMerge::Clean(merged)
    } else {
        TreeMerge::Conflicts(conflicts)
    }
}

/// Merges one file changed on both sides; `None` on a conflict.
fn merge_file(
    objs: &Objects,
    base: Option<&Entry>,
    ours: &Entry,
    theirs: &Entry,
) -> Option<Merged> {
    let base_mode = base.map(|e| e.0.as_str());
    let mode = if ours.0 == theirs.0 || Some(theirs.0.as_str()) == base_mode {
        ours.0.clone()
    } else if Some(ours.0.as_str()) == base_mode {
        theirs.0.clone()
    } else {
        return None;
    };
    let text = |e: &Entry| {
        objs.blobs
            .get(&e.1)
            .and_then(|b| std::str::from_utf8(b).ok())
    };
    let base_text = match base {
        Some(e) => text(e)?,
        // Added on both sides: git merges them over an empty file.
        None => "",
    };
    if ours.1 == theirs.1 {
        return Some(Merged::Existing((mode, ours.1.clone())));
    }
    let merged = merge_lines(base_text, text(ours)?, text(theirs)?)?;
    Some(Merged::Content {
        mode,
        bytes: merged.into_bytes(),
    })
}

/// A change of one side: base lines `start..end` become `lines`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Hunk<'a> {
    start: usize,
    end: usize,
    lines: Vec<&'a str>,
}

fn hunks<'a>(base: &[&'a str], side: &[&'a str]) -> Vec<Hunk<'a>> {
    let mut out: Vec<Hunk<'a>> = Vec::new();
    let mut last_end: Option<usize> = None;
    for op in capture_diff_slices(Algorithm::Myers, base, side) {
        let (old, new) = match op {
            DiffOp::Equal { .. } => {
                last_end = None;
                continue;
            }
            DiffOp::Delete {
                old_index,
                old_len,
                new_index,
            } => (old_index..old_index + old_len, new_index..new_index),
            DiffOp::Insert {
                old_index,
                new_index,
                new_len,
            } => (old_index..old_index, new_index..new_index + new_len),
            DiffOp::Replace {
                old_index,
                old_len,
                new_index,
                new_len,
            } => (
                old_index..old_index + old_len,
                new_index..new_index + new_len,
            ),
        };
        // Consecutive changes without equal lines between are one hunk.
        match out.last_mut() {
            Some(h) if last_end == Some(old.start) => {
                h.end = old.end;
                h.lines.extend_from_slice(&side[new]);
            }
            _ => out.push(Hunk {
                start: old.start,
                end: old.end,
                lines: side[new].to_vec(),
            }),
        }
        last_end = Some(old.end);
    }
    out
}

/// diff3 over lines: the merged text, or `None` when a change of one side
/// overlaps or touches a different change of the other (git's rule, which
/// makes two insertions at one place a conflict).
pub fn merge_lines(base: &str, ours: &str, theirs: &str) -> Option<String> {
    fn split(s: &str) -> Vec<&str> {
        s.split_inclusive('\n').collect()
    }
    let (b, o, t) = (split(base), split(ours), split(theirs));
    let mut changes: Vec<Hunk> = hunks(&b, &o);
    let theirs_hunks = hunks(&b, &t);
    for h in theirs_hunks {
        if changes.contains(&h) {
            continue;
        }
        let clash = changes.iter().any(|c| h.start <= c.end && c.start <= h.end);
        if clash {
            return None;
        }
        changes.push(h);
    }
    changes.sort_by_key(|h| (h.start, h.end));
    let mut out = String::with_capacity(ours.len().max(theirs.len()));
    let mut cursor = 0;
    for h in &changes {
        for line in &b[cursor..h.start] {
            out.push_str(line);
        }
        for line in &h.lines {
            out.push_str(line);
        }
        cursor = h.end;
    }
    for line in &b[cursor..] {
        out.push_str(line);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHANGELOG: &str = "- config-keys: [a]\n  description: [\"x\"]\n\n- config-keys: [b]\n  description: [\"y\"]\n";

    #[test]
    fn two_entries_appended_at_the_tail_conflict_as_in_git() {
        let ours = format!("{CHANGELOG}\n- config-keys: [c]\n");
        let theirs = format!("{CHANGELOG}\n- config-keys: [d]\n");
        assert_eq!(merge_lines(CHANGELOG, &ours, &theirs), None);
    }

    #[test]
    fn the_same_entry_appended_on_both_sides_merges() {
        let both = format!("{CHANGELOG}\n- config-keys: [c]\n");
        assert_eq!(
            merge_lines(CHANGELOG, &both, &both).as_deref(),
            Some(both.as_str())
        );
    }

    #[test]
    fn changes_apart_from_each_other_merge_line_by_line() {
        let base = "one\ntwo\nthree\nfour\nfive\n";
        let ours = "ONE\ntwo\nthree\nfour\nfive\n";
        let theirs = "one\ntwo\nthree\nfour\nfive\nsix\n";
        assert_eq!(
            merge_lines(base, ours, theirs).as_deref(),
            Some("ONE\ntwo\nthree\nfour\nfive\nsix\n")
        );
    }

    #[test]
    fn adjacent_changes_conflict() {
        let base = "one\ntwo\nthree\n";
        assert_eq!(
            merge_lines(base, "ONE\ntwo\nthree\n", "one\nTWO\nthree\n"),
            None
        );
    }

    #[test]
    fn merging_main_into_a_branch_then_the_branch_back_is_clean() {
        // The branch took main's entry and re-appended its own after it.
        let main = format!("{CHANGELOG}\n- config-keys: [c]\n");
        let branch = format!("{main}\n- config-keys: [d]\n");
        assert_eq!(
            merge_lines(&main, &main, &branch).as_deref(),
            Some(branch.as_str())
        );
    }

    fn tree(objs: &mut Objects, files: &[(&str, &str)]) -> BTreeMap<String, Entry> {
        files
            .iter()
            .map(|(p, t)| {
                let sha = objs.put_blob(t.as_bytes().to_vec());
                (p.to_string(), ("100644".to_string(), sha))
            })
            .collect()
    }

    #[test]
    fn trees_merge_per_path_and_report_conflicting_paths() {
        let mut objs = Objects::default();
        let base = tree(
            &mut objs,
            &[("a", "1\n"), ("log", CHANGELOG), ("gone", "x\n")],
        );
        let ours = tree(
            &mut objs,
            &[
                ("a", "1\n"),
                ("log", &format!("{CHANGELOG}- c\n")),
                ("new", "n\n"),
            ],
        );
        let theirs = tree(
            &mut objs,
            &[("a", "2\n"), ("log", CHANGELOG), ("gone", "x\n")],
        );
        let TreeMerge::Clean(merged) = merge_trees(&objs, &base, &ours, &theirs) else {
            panic!("expected a clean merge");
        };
        let names: Vec<&str> = merged.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            ["a", "log", "new"],
            "deleted on ours, unchanged on theirs"
        );
        assert_eq!(merged["a"], Merged::Existing(theirs["a"].clone()));

        let theirs = tree(
            &mut objs,
            &[("a", "1\n"), ("log", &format!("{CHANGELOG}- d\n"))],
        );
        assert_eq!(
            merge_trees(&objs, &base, &ours, &theirs),
            TreeMerge::Conflicts(vec!["log".into()])
        );
    }

    #[test]
    fn deleted_on_one_side_and_changed_on_the_other_conflicts() {
        let mut objs = Objects::default();
        let base = tree(&mut objs, &[("a", "1\n")]);
        let ours = tree(&mut objs, &[]);
        let theirs = tree(&mut objs, &[("a", "2\n")]);
        assert_eq!(
            merge_trees(&objs, &base, &ours, &theirs),
            TreeMerge::Conflicts(vec!["a".into()])
        );
    }
}
