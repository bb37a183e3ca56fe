//! Records the commit the binary is built from, and whether the tree had
//! changes, for `klaud --version`: Klaud is deployed by git revision, so
//! the version number alone does not say what runs. Without git, or
//! outside Klaud's own checkout (a crate tarball), the commit is
//! `unknown`; nothing here can fail the build. `KLAUD_GIT_COMMIT` set at
//! build time wins (a packager that knows the commit but ships no `.git`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=KLAUD_GIT_COMMIT");
    let build = match std::env::var("KLAUD_GIT_COMMIT") {
        Ok(commit) if is_commit(commit.trim()) => format!("commit {}", commit.trim()),
        _ => from_git().unwrap_or_else(|| "commit unknown".to_owned()),
    };
    println!("cargo:rustc-env=KLAUD_BUILD={build}");
}

/// `commit <sha>`, with `, uncommitted changes` when the tree differs from
/// it; `None` when git or Klaud's checkout is not there.
fn from_git() -> Option<String> {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    // The workspace root: a git tree found further up (an unpacked tarball
    // inside some other repository) is not Klaud's.
    let root = manifest.join("../..");
    let top = git(&root, &["rev-parse", "--show-toplevel"])?;
    if std::fs::canonicalize(&top).ok()? != std::fs::canonicalize(&root).ok()? {
        return None;
    }
    watch(&root);
    let commit = git(&root, &["rev-parse", "HEAD"])?;
    if !is_commit(&commit) {
        return None;
    }
    // Untracked files are left out: `cargo install --git` leaves its own
    // `.cargo-ok` in the checkout it builds, and a new source file is
    // built only once a tracked file names it.
    let changed =
        git(&root, &["status", "--porcelain", "--untracked-files=no"]).map(|s| !s.is_empty());
    Some(match changed {
        Some(true) => format!("commit {commit}, uncommitted changes"),
        Some(false) => format!("commit {commit}"),
        None => format!("commit {commit}, changes unknown"),
    })
}

/// Reruns only when what the answer depends on moves: HEAD, the branch it
/// names, the index, and this crate's sources (an edit not yet staged).
/// Paths that do not exist are left out: cargo would rerun every build.
fn watch(root: &Path) {
    let mut paths = vec![
        git_path(root, "HEAD"),
        git_path(root, "index"),
        git_path(root, "packed-refs"),
    ];
    if let Some(branch) = git(root, &["symbolic-ref", "-q", "HEAD"]) {
        paths.push(git_path(root, &branch));
    }
    paths.push(Some(root.join("src/klaud/src")));
    for path in paths.into_iter().flatten().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

fn git_path(root: &Path, name: &str) -> Option<PathBuf> {
    let path = PathBuf::from(git(root, &["rev-parse", "--git-path", name])?);
    Some(if path.is_absolute() {
        path
    } else {
        root.join(path)
    })
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn is_commit(text: &str) -> bool {
    matches!(text.len(), 40 | 64) && text.bytes().all(|b| b.is_ascii_hexdigit())
}
