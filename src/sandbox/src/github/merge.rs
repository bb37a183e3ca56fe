//! Three-way merges of trees, as git merges a pull request into its base:
//! per path, a side that left the merge base's version unchanged takes the
//! other side's; both sides changing a text file merge line by line (git's
//! diff3: changes that overlap or touch conflict, so two different entries
//! appended at the end of one file conflict); anything else that differs on
//! both sides is a conflict.

use std::collections::{BTreeMap, BTreeSet};

use klaud_planner::merge3::merge_lines;

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

#[cfg(test)]
mod tests {
    use super::*;

    const CHANGELOG: &str = "- config-keys: [a]\n  description: [\"x\"]\n\n- config-keys: [b]\n  description: [\"y\"]\n";

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
