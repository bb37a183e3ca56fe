//! Three-way merges of text over lines, as git's diff3 merges a file both
//! sides changed: changes of one side that overlap or touch a different
//! change of the other conflict (so two different entries appended at the
//! end of one file conflict), everything else applies. Klaud merges its
//! base into a branch with it; the sandbox decides `mergeable` with it.

use similar::{Algorithm, DiffOp, capture_diff_slices};

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
}
