//! Klaud's `perf-changelog.yaml` writes against the benchmark repository's
//! own changelog gate, `utils/validate_perf_changelog.py` of the InferenceX
//! checkout in `../shared/fixtures`, run by the Python it is written for:
//! the entry the final step appends, and the entry the upkeep merge
//! re-appends after another PR's entry landed on the base.
//!
//! Two layers of the gate run: the script's command line (what the
//! repository's workflow runs: the final newline and `process_changelog.py`
//! generating the sweep matrix from `git diff base..head`), and its
//! byte-level rules (`parse_changelog`, `compare_entries`,
//! `validate_raw_change`: append-only, one empty separator line, the PR's
//! own link), which `utils/prepare_perf_changelog_merge.py` applies at merge.

use std::path::{Path, PathBuf};
use std::process::Command;

use klaud_lifecycle::engine::changelog_entry;
use klaud_planner::changelog::append_entry;

use crate::support::{copy_tree, inferencex_full};

/// The gate's byte-level rules over two files, as
/// `prepare_perf_changelog_merge.py` calls them. Prints the number of
/// appended entries, or `REJECTED: <why>` and exits 1.
const BYTE_RULES: &str = r#"
import pathlib, sys
utils, base, head, pr = sys.argv[1:5]
sys.path.insert(0, utils)
from validate_perf_changelog import (
    ChangelogValidationError, compare_entries, parse_changelog, validate_raw_change,
)
base_raw = pathlib.Path(base).read_bytes()
head_raw = pathlib.Path(head).read_bytes()
try:
    additions, corrections = compare_entries(
        parse_changelog(base_raw, "base"), parse_changelog(head_raw, "head"), int(pr)
    )
    validate_raw_change(base_raw, head_raw, len(additions), corrections)
except ChangelogValidationError as exc:
    print(f"REJECTED: {exc}")
    sys.exit(1)
print(len(additions))
"#;

/// `python3` with what the gate imports (PyYAML, pydantic 2), or `None`
/// with a loud message on a developer machine without them. On CI (`CI`
/// set, where `.ci/run` installs them) their absence is a failure.
pub fn gate_python() -> Option<&'static str> {
    let ok = Command::new("python3")
        .args([
            "-c",
            "import yaml, pydantic, sys; sys.exit(0 if pydantic.VERSION >= '2' else 1)",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some("python3");
    }
    if std::env::var_os("CI").is_some() {
        panic!("python3 with PyYAML and pydantic 2 is missing; .ci/run installs them");
    }
    eprintln!(
        "\n*** SKIPPED: python3 with PyYAML and pydantic 2 is not installed — the repository's changelog gate needs them ***\n"
    );
    None
}

/// The repository's byte-level changelog rules on `base` → `head` for PR
/// `pr`: `Ok(appended entries)` or `Err(the gate's reason)`.
pub fn byte_rules(utils: &Path, base: &[u8], head: &[u8], pr: u64) -> Result<usize, String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let (base_path, head_path) = (dir.path().join("base.yaml"), dir.path().join("head.yaml"));
    std::fs::write(&base_path, base).expect("write base");
    std::fs::write(&head_path, head).expect("write head");
    let out = Command::new("python3")
        .arg("-c")
        .arg(BYTE_RULES)
        .arg(utils)
        .arg(&base_path)
        .arg(&head_path)
        .arg(pr.to_string())
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    match out.status.code() {
        Some(0) => Ok(stdout.parse().expect("a count")),
        Some(1) if stdout.starts_with("REJECTED: ") => Err(stdout),
        _ => panic!(
            "the gate crashed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// A git repository holding a copy of the InferenceX checkout.
struct Checkout {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Checkout {
    fn of(full: &Path) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("InferenceX");
        copy_tree(full, &root);
        let checkout = Self { _dir: dir, root };
        checkout.git(&["init", "-q", "-b", "main"]);
        checkout.git(&["add", "-A"]);
        checkout.commit("the checkout");
        checkout
    }

    fn git(&self, args: &[&str]) -> String {
        let out = Command::new("git")
            .current_dir(&self.root)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .output()
            .expect("git runs");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn commit(&self, message: &str) -> String {
        self.git(&["commit", "-q", "--allow-empty", "-m", message]);
        self.git(&["rev-parse", "HEAD"])
    }

    fn changelog(&self) -> Vec<u8> {
        std::fs::read(self.root.join("perf-changelog.yaml")).expect("changelog")
    }

    fn set_changelog(&self, bytes: &[u8]) {
        std::fs::write(self.root.join("perf-changelog.yaml"), bytes).expect("write");
        self.git(&["add", "perf-changelog.yaml"]);
    }

    /// The repository's gate command, as its workflow runs it.
    fn gate(&self, base: &str, head: &str) -> Result<(), String> {
        let out = Command::new("python3")
            .current_dir(&self.root)
            .args([
                "utils/validate_perf_changelog.py",
                "--base-ref",
                base,
                "--head-ref",
                head,
            ])
            .output()
            .expect("python3 runs");
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }
}

const PR: u64 = 4242;
const KEY: &str = "dsr1-fp4-b200-sglang";

#[test]
fn klauds_entry_and_its_reappend_after_another_pr_landed_pass_the_repositorys_gate() {
    let Some(full) = inferencex_full() else {
        return;
    };
    if gate_python().is_none() {
        return;
    }
    let utils = full.join("utils");
    let repo = Checkout::of(&full);
    let base0 = repo.git(&["rev-parse", "HEAD"]);
    let base0_log = repo.changelog();
    let link = format!("https://github.com/SemiAnalysisAI/InferenceX/pull/{PR}");
    let entry = changelog_entry(
        vec![KEY.into()],
        KEY,
        "lmsysorg/sglang:v0.5.99-cu130",
        &link,
    );

    // The final step: Klaud's entry appended on its branch.
    repo.git(&["checkout", "-q", "-b", "klaud/bump"]);
    let head1_log = append_entry(&base0_log, &entry).expect("append");
    repo.set_changelog(&head1_log);
    let head1 = repo.commit("Klaud's changelog entry");
    assert_eq!(repo.gate(&base0, &head1), Ok(()));
    assert_eq!(byte_rules(&utils, &base0_log, &head1_log, PR), Ok(1));

    // Another PR's entry lands on main, written as people write them.
    repo.git(&["checkout", "-q", "main"]);
    let mut base1_log = base0_log.clone();
    base1_log.extend_from_slice(
        b"\n- config-keys:\n    - dsr1-fp8-h200-sglang\n  description:\n    - \"Raise max-num-seqs to 512 on H200\"\n  pr-link: https://github.com/SemiAnalysisAI/InferenceX/pull/4243\n",
    );
    repo.set_changelog(&base1_log);
    let base1 = repo.commit("another PR");
    assert_eq!(repo.gate(&base0, &base1), Ok(()), "the person's entry");

    // Klaud's upkeep: main merged into the branch, the changelog taken from
    // main with Klaud's entry re-appended at its new tail.
    let head2_log = append_entry(&base1_log, &entry).expect("re-append");
    repo.set_changelog(&head2_log);
    let tree = repo.git(&["write-tree"]);
    let head2 = repo.git(&[
        "commit-tree",
        &tree,
        "-p",
        &head1,
        "-p",
        &base1,
        "-m",
        "Merge main into klaud/bump [skip-sweep]",
    ]);
    assert_eq!(repo.gate(&base1, &head2), Ok(()));
    assert_eq!(byte_rules(&utils, &base1_log, &head2_log, PR), Ok(1));

    // The gate is really judging: the branch's stale changelog against the
    // new main puts Klaud's entry where the other PR's is, and is refused.
    let stale = byte_rules(&utils, &base1_log, &head1_log, PR);
    assert!(
        stale.as_ref().is_err_and(|e| e.contains("immutable")),
        "{stale:?}"
    );
}

#[test]
fn klauds_entry_for_a_wildcard_family_and_a_long_key_pass_the_repositorys_gate() {
    let Some(full) = inferencex_full() else {
        return;
    };
    if gate_python().is_none() {
        return;
    }
    let utils = full.join("utils");
    let base = std::fs::read(full.join("perf-changelog.yaml")).expect("changelog");
    let link = format!("https://github.com/SemiAnalysisAI/InferenceX/pull/{PR}");
    // A description over 120 characters is shortened by Klaud; keys of a
    // bump that spans several configs are listed one per line.
    let long_key = format!("dsr1-fp4-b200-sglang-{}", "x".repeat(120));
    for entry in [
        changelog_entry(
            vec!["dsr1-fp4-*-sglang".into()],
            "dsr1-fp4-b200-sglang",
            "lmsysorg/sglang:v0.5.99",
            &link,
        ),
        changelog_entry(
            vec![KEY.into(), "dsr1-fp8-h200-sglang".into()],
            &long_key,
            "lmsysorg/sglang@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            &link,
        ),
    ] {
        let head = append_entry(&base, &entry).expect("append");
        assert_eq!(byte_rules(&utils, &base, &head, PR), Ok(1), "{entry:?}");
    }
}
