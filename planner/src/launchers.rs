//! The recipe folders the benchmark repository's launchers
//! (`runners/launch_*.sh`) copy into their srt-slurm checkout with
//! `cp -rT <folder> <destination>`.
//!
//! Klaud does not take its `[[recipe_roots]]` from here at run time: the
//! copies sit inside framework/model branches and some destinations are
//! shell variables, so only evaluating the shell would be exact. This reader
//! finds the literal copies so a check can say which ones the configuration
//! does not cover.

use std::path::Path;

use crate::repo::{self, RepoError};

/// One `cp -rT` of a repository folder in a launcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LauncherCopy {
    /// Repository-relative launcher path, e.g. `runners/launch_gb200-nv.sh`.
    pub launcher: String,
    /// 1-based line of the `cp`.
    pub line: usize,
    /// The copied folder, project-relative (`benchmarks/multi_node/…`).
    pub folder: String,
    /// The destination as written, quotes removed; it may hold `$VARIABLES`.
    pub destination: String,
}

impl LauncherCopy {
    /// Whether the destination is a literal path (no shell expansion).
    pub fn is_literal(&self) -> bool {
        !self.destination.contains(['$', '`', '*', '?'])
    }
}

/// Every `cp -rT "$GITHUB_WORKSPACE/<folder>" <destination>` in the
/// checkout's `runners/launch_*.sh`, launchers in name order.
pub fn launcher_copies(root: &Path, prefix: &str) -> Result<Vec<LauncherCopy>, RepoError> {
    let dir = root.join(prefix).join("runners");
    let mut names: Vec<String> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.starts_with("launch_") && n.ends_with(".sh"))
            .collect(),
        Err(_) => return Ok(Vec::new()),
    };
    names.sort();
    let mut copies = Vec::new();
    for name in names {
        let path = format!("{prefix}runners/{name}");
        let text = repo::read_text(root, &path)?;
        copies.extend(copies_in(&path, &text));
    }
    Ok(copies)
}

/// The copies in one launcher's text. Hand-written: a shell parser crate
/// would be far more than these two words and a line continuation need.
fn copies_in(path: &str, text: &str) -> Vec<LauncherCopy> {
    let mut out = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    let mut index = 0;
    while index < lines.len() {
        let first = index;
        let mut command = lines[index].trim_end().to_owned();
        while command.ends_with('\\') && index + 1 < lines.len() {
            command.pop();
            index += 1;
            command.push(' ');
            command.push_str(lines[index].trim());
        }
        index += 1;
        let words: Vec<String> = command
            .split_whitespace()
            .map(|w| w.trim_matches(|c| c == '"' || c == '\'').to_owned())
            .collect();
        let Some(at) = words
            .windows(2)
            .position(|pair| pair[0] == "cp" && pair[1] == "-rT")
        else {
            continue;
        };
        let (Some(source), Some(destination)) = (words.get(at + 2), words.get(at + 3)) else {
            continue;
        };
        let Some(folder) = source.strip_prefix("$GITHUB_WORKSPACE/") else {
            continue;
        };
        out.push(LauncherCopy {
            launcher: path.to_owned(),
            line: first + 1,
            folder: folder.trim_end_matches('/').to_owned(),
            destination: destination.trim_end_matches('/').to_owned(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_and_continued_copies_are_found() {
        let text = "if x; then\n    cp -rT \"$GITHUB_WORKSPACE/benchmarks/a/b\" recipes/b || exit 1\n    cp -rT \\\n        \"$GITHUB_WORKSPACE/benchmarks/c\" \\\n        \"$DIR\"\n    cp -r \"$LOGS\" x\nfi\n";
        let copies = copies_in("runners/launch_x.sh", text);
        assert_eq!(copies.len(), 2);
        assert_eq!(copies[0].folder, "benchmarks/a/b");
        assert_eq!(copies[0].destination, "recipes/b");
        assert_eq!(copies[0].line, 2);
        assert!(copies[0].is_literal());
        assert_eq!(copies[1].line, 3);
        assert_eq!(copies[1].destination, "$DIR");
        assert!(!copies[1].is_literal());
    }
}
