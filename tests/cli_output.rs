//! What the CLI prints around its commands: `--version` with the commit it
//! was built from, tables within 100 columns unless `--wide`, `--quiet`,
//! the configuration found the way `klaud doctor` finds it, and a hint
//! when the token is in a variable Klaud does not read.

use std::path::Path;
use std::process::{Command, Output};

use crate::support::REPO_ROOT;

/// The binary with no token and no configuration from this environment,
/// run in `dir`.
fn klaud(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_klaud"));
    for name in [
        "GITHUB_TOKEN",
        "KLAUD_GITHUB_TOKEN",
        "GH_TOKEN",
        "GH_ENTERPRISE_TOKEN",
        "KLAUD_CONFIG",
        "KLAUD_GITHUB_APP_PRIVATE_KEY",
        "GITHUB_ACTIONS",
        "RUST_LOG",
    ] {
        cmd.env_remove(name);
    }
    cmd.current_dir(dir);
    cmd
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn demo() -> std::path::PathBuf {
    Path::new(REPO_ROOT).join("configs/demo")
}

fn widest(text: &str) -> usize {
    text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

#[test]
fn version_names_the_commit_it_was_built_from() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = klaud(dir.path()).arg("--version").output().expect("klaud");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let line = text(&out.stdout);
    let prefix = format!("klaud {} (commit ", env!("CARGO_PKG_VERSION"));
    assert!(line.starts_with(&prefix), "{line}");
    let head = Command::new("git")
        .args(["-C", REPO_ROOT, "rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| text(&o.stdout).trim().to_owned());
    match head {
        // Built from this checkout: its commit, said whole, and whether
        // the tree had changes.
        Some(head) => assert!(
            line == format!("{prefix}{head})\n")
                || line == format!("{prefix}{head}, uncommitted changes)\n"),
            "{line} (HEAD is {head})"
        ),
        None => assert_eq!(line, format!("{prefix}unknown)\n")),
    }
}

#[test]
fn tables_fit_100_columns_unless_wide_and_quiet_leaves_them_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |flags: &[&str]| -> Output {
        let out = klaud(dir.path())
            .arg("families")
            .args(flags)
            .arg("--checkout")
            .arg(demo())
            .output()
            .expect("klaud families");
        assert!(out.status.success(), "{}", text(&out.stderr));
        out
    };
    let wide = text(&run(&["--wide"]).stdout);
    assert!(
        widest(&wide) > 100,
        "the demo's families table is wider than 100 columns: {wide}"
    );
    let image = "lmsysorg/sglang-rocm:v0.5.16-rocm720-mi35x-20260726";
    assert!(wide.contains(image), "{wide}");

    let fitted = text(&run(&[]).stdout);
    assert!(widest(&fitted) <= 100, "{fitted}");
    assert!(fitted.contains('…'), "long cells are elided: {fitted}");
    assert!(
        fitted.contains("demo-fp8-mi355x-sglang"),
        "a family keeps its key: {fitted}"
    );
    assert_eq!(
        fitted.lines().filter(|l| l.contains(":demo-")).count(),
        wide.lines().filter(|l| l.contains(":demo-")).count(),
        "one line per family either way"
    );

    let quiet = run(&["--quiet"]);
    assert!(
        !text(&quiet.stdout).contains("FAMILY"),
        "{}",
        text(&quiet.stdout)
    );
    assert!(
        text(&quiet.stderr).contains(" families, "),
        "the count is still said: {}",
        text(&quiet.stderr)
    );
}

#[test]
fn every_command_finds_configs_klaud_toml_as_doctor_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("configs")).expect("dir");
    // A configuration only its own token variable tells apart.
    std::fs::write(
        dir.path().join("configs/klaud.toml"),
        "[github]\nrepository = \"o/r\"\ntoken_env = [\"KLAUD_TEST_ONLY_TOKEN\"]\n",
    )
    .expect("config");
    for args in [
        &["status"][..],
        &["wave"],
        &["recover"],
        &["claims", "list"],
    ] {
        let out = klaud(dir.path()).args(args).output().expect("klaud");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("KLAUD_TEST_ONLY_TOKEN"),
            "{args:?} read configs/klaud.toml: {stderr}"
        );
        assert!(
            stderr.contains("configuration: configs/klaud.toml (found"),
            "{args:?} says which file it read: {stderr}"
        );
    }
    // `--config` still wins.
    let other = dir.path().join("other.toml");
    std::fs::write(&other, "[github]\nrepository = \"o/r\"\n").expect("config");
    let out = klaud(dir.path())
        .arg("status")
        .arg("--config")
        .arg(&other)
        .output()
        .expect("klaud");
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("KLAUD_TEST_ONLY_TOKEN"), "{stderr}");
    assert!(!stderr.contains("(found"), "{stderr}");
}

#[test]
fn a_token_in_gh_token_is_named_with_how_to_hand_it_over() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = klaud(dir.path())
        .args(["status", "--repo", "o/r"])
        .env("GH_TOKEN", "ghp_not_shown")
        .output()
        .expect("klaud");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("GH_TOKEN is set but Klaud does not read it"),
        "{stderr}"
    );
    assert!(
        stderr.contains("KLAUD_GITHUB_TOKEN=\"$GH_TOKEN\""),
        "{stderr}"
    );
    assert!(!stderr.contains("ghp_not_shown"), "{stderr}");
    // Without GH_TOKEN there is nothing to hint at.
    let out = klaud(dir.path())
        .args(["status", "--repo", "o/r"])
        .output()
        .expect("klaud");
    assert!(
        !text(&out.stderr).contains("GH_TOKEN"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_quiet_doctor_lists_only_the_checks_that_did_not_pass() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |flags: &[&str]| {
        let out = klaud(dir.path())
            .args(["doctor", "--offline", "--checkout"])
            .arg(demo())
            .arg("--store")
            .arg(dir.path().join("store"))
            .args(flags)
            .output()
            .expect("klaud doctor");
        text(&out.stdout)
    };
    let row = |table: &str, name: &str| table.lines().any(|l| l.starts_with(&format!("{name} ")));
    let all = run(&[]);
    assert!(row(&all, "store"), "{all}");
    let quiet = run(&["--quiet"]);
    assert!(!row(&quiet, "store"), "the store check passed: {quiet}");
    assert!(row(&quiet, "token"), "a check not run still shows: {quiet}");
    let count = |t: &str| {
        t.lines()
            .find(|l| l.contains(" checks: "))
            .map(str::to_owned)
    };
    assert_eq!(count(&quiet), count(&all), "{quiet}");
    assert!(widest(&all) <= 100, "{all}");
}
