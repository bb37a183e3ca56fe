//! The `families` and `bump` commands as a user runs them: output, files
//! written, exit codes.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn klaud(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_klaud"))
        .args(args)
        .output()
        .unwrap()
}

fn demo() -> PathBuf {
    Path::new(crate::support::REPO_ROOT).join("configs/demo")
}

fn demo_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    support::copy_tree(&demo(), dir.path());
    dir
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn families_json_lists_every_family_with_its_identity() {
    let output = klaud(&["families", "--checkout", demo().to_str().unwrap(), "--json"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(rows.len(), 7);
    for row in &rows {
        for field in [
            "family", "id", "key", "file", "image", "platform", "recipes",
        ] {
            assert!(row.get(field).is_some(), "{field} missing in {row}");
        }
    }
    let disagg = rows
        .iter()
        .find(|r| r["key"] == "demo-fp4-gb200-dynamo-vllm-disagg")
        .unwrap();
    assert_eq!(disagg["platform"], "linux/arm64");
    assert_eq!(disagg["recipes"].as_array().unwrap().len(), 2);
    assert_eq!(
        disagg["recipes"][0]["images"][1]["field"],
        "identity.container.image"
    );
}

#[test]
fn families_table_has_a_row_per_family() {
    let output = klaud(&["families", "--checkout", demo().to_str().unwrap()]);
    assert!(output.status.success());
    let stdout = text(&output.stdout);
    assert!(stdout.starts_with("FAMILY"));
    assert_eq!(stdout.lines().count(), 8);
    assert!(stdout.contains("configs/nvidia-master.yaml:demo-fp8-h200-trt"));
}

/// The 9-level "billion laughs" (3 KB that would expand to 9^9 nodes).
fn alias_bomb() -> String {
    let mut text = String::from("lol0: &l0 [a,a,a,a,a,a,a,a,a]\n");
    for level in 1..9 {
        let aliases = vec![format!("*l{}", level - 1); 9].join(",");
        text.push_str(&format!("lol{level}: &l{level} [{aliases}]\n"));
    }
    text
}

#[test]
fn one_unreadable_family_is_named_and_every_other_family_is_listed_and_bumped() {
    let dir = demo_copy();
    let repo = dir.path().to_str().unwrap();
    let amd = dir.path().join("configs/amd-master.yaml");
    let mut master = std::fs::read_to_string(&amd).unwrap();
    let key_line = master.lines().count() + 2;
    master.push_str(
        "\nbroken-tbd:\n  image: TBD\n  model: demo/Demo-R1\n  model-prefix: demo\n  runner: mi355x\n  precision: fp8\n  framework: sglang\n  multinode: false\n",
    );
    std::fs::write(&amd, master).unwrap();

    let listed = klaud(&["families", "--checkout", repo, "--json"]);
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(rows.len(), 7, "every readable family is listed");
    let stderr = text(&listed.stderr);
    assert!(
        stderr.contains(&format!(
            "error: configs/amd-master.yaml:broken-tbd cannot be read: configs/amd-master.yaml:{}: broken-tbd.image",
            key_line + 1
        )) && stderr.contains("TBD"),
        "{stderr}"
    );

    let other = klaud(&[
        "bump",
        "--checkout",
        repo,
        "--family",
        "demo-fp4-b200-sglang",
        "--to",
        "lmsysorg/sglang:v0.5.99-cu130",
        "--check",
    ]);
    assert!(other.status.success(), "{}", text(&other.stderr));
    let broken = klaud(&[
        "bump",
        "--checkout",
        repo,
        "--family",
        "broken-tbd",
        "--to",
        "lmsysorg/sglang-rocm:v0.5.99",
        "--check",
    ]);
    assert_eq!(broken.status.code(), Some(2));
    assert!(
        text(&broken.stderr).contains("TBD"),
        "{}",
        text(&broken.stderr)
    );
}

#[test]
fn an_alias_bomb_in_the_changelog_refuses_the_changelog_append_and_nothing_else() {
    let dir = demo_copy();
    let repo = dir.path().to_str().unwrap();
    std::fs::write(dir.path().join("perf-changelog.yaml"), alias_bomb()).unwrap();
    let listed = klaud(&["families", "--checkout", repo]);
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let bump = klaud(&[
        "bump",
        "--checkout",
        repo,
        "--family",
        "demo-fp4-b200-sglang",
        "--to",
        "lmsysorg/sglang:v0.5.99-cu130",
        "--pr-link",
        "https://github.com/sandbox/benchmarks/pull/7",
        "--check",
    ]);
    assert!(!bump.status.success());
    let stderr = text(&bump.stderr);
    assert!(
        stderr.contains("perf-changelog.yaml") && stderr.contains("alias bomb"),
        "{stderr}"
    );
}

#[test]
fn bump_check_writes_nothing_and_bump_writes_master_recipes_and_changelog() {
    let dir = demo_copy();
    let repo = dir.path().to_str().unwrap();
    let before = support::snapshot(dir.path());
    let args = [
        "bump",
        "--checkout",
        repo,
        "--family",
        "demo-fp4-gb200-dynamo-vllm-disagg",
        "--to",
        "vllm/vllm-openai:v0.26.0",
        "--pr-link",
        "https://github.com/sandbox/benchmarks/pull/7",
    ];
    let check = klaud(&[&args[..], &["--check"]].concat());
    assert!(check.status.success(), "{}", text(&check.stderr));
    assert!(text(&check.stdout).contains("would change perf-changelog.yaml"));
    assert_eq!(support::snapshot(dir.path()), before);

    let run = klaud(&args);
    assert!(run.status.success(), "{}", text(&run.stderr));
    let after = support::snapshot(dir.path());
    let changed: Vec<&String> = before.keys().filter(|k| before[*k] != after[*k]).collect();
    assert_eq!(changed.len(), 4, "{changed:?}");
    let changelog = text(&after["perf-changelog.yaml"]);
    assert!(changelog.ends_with(
        "\n\n- config-keys:\n    - demo-fp4-gb200-dynamo-vllm-disagg\n  description:\n    - \"Update the dynamo-vllm image from v0.25.0 to v0.26.0.\"\n  pr-link: https://github.com/sandbox/benchmarks/pull/7\n"
    ));
}

#[test]
fn bad_input_exits_2_with_an_actionable_message() {
    let dir = demo_copy();
    let repo = dir.path().to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["families", "--checkout", "/nonexistent/klaud"],
            "point --checkout at a benchmark repository checkout",
        ),
        (
            &[
                "bump",
                "--checkout",
                repo,
                "--family",
                "nope",
                "--to",
                "x/y:1",
            ],
            "no family \"nope\"",
        ),
        (
            &[
                "bump",
                "--checkout",
                repo,
                "--family",
                "demo-fp4-b200-vllm",
                "--to",
                "vllm/VLLM:1",
            ],
            "--to: invalid image reference",
        ),
        (
            &[
                "bump",
                "--checkout",
                repo,
                "--family",
                "demo-fp4-b200-vllm",
                "--to",
                "vllm/vllm-openai:v0.25.0",
            ],
            "already uses",
        ),
        (
            &[
                "bump",
                "--checkout",
                repo,
                "--family",
                "demo-fp4-b200-vllm",
                "--to",
                "vllm/vllm-openai:v1",
                "--pr-link",
                "not-a-link",
            ],
            "pr-link",
        ),
        (&["bump", "--checkout", repo], "--family"),
        // `--repo` is OWNER/NAME everywhere; a path gets the new spelling.
        (
            &["families", "--repo", repo],
            "for a local checkout pass --checkout",
        ),
        (
            &["plan", "--repo", repo],
            "for a local checkout pass --checkout",
        ),
    ];
    let before = support::snapshot(dir.path());
    for (args, needle) in cases {
        let output = klaud(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = text(&output.stderr);
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
    assert_eq!(support::snapshot(dir.path()), before);
}

#[test]
fn every_command_has_help() {
    for command in [
        &["--help"][..],
        &["families", "--help"],
        &["bump", "--help"],
    ] {
        let output = klaud(command);
        assert!(output.status.success(), "{command:?}");
        assert!(text(&output.stdout).contains("Usage"));
    }
}

#[test]
fn bump_takes_a_dash_description_and_refuses_a_foreign_pr_link() {
    let dir = demo_copy();
    let repo = dir.path().to_str().unwrap();
    let args = [
        "bump",
        "--checkout",
        repo,
        "--family",
        "demo-fp4-b200-vllm",
        "--to",
        "vllm/vllm-openai:v0.26.0",
    ];
    let before = support::snapshot(dir.path());
    let foreign = klaud(
        &[
            &args[..],
            &["--pr-link", "https://github.com/vllm-project/vllm/pull/7"],
        ]
        .concat(),
    );
    assert_eq!(foreign.status.code(), Some(2));
    assert!(
        text(&foreign.stderr).contains("https://github.com/sandbox/benchmarks/pull/<number>"),
        "{}",
        text(&foreign.stderr)
    );
    assert_eq!(support::snapshot(dir.path()), before);

    let run = klaud(
        &[
            &args[..],
            &[
                "--pr-link",
                "https://github.com/sandbox/benchmarks/pull/8",
                "--description",
                "- vLLM v0.26.0 for the demo.",
            ],
        ]
        .concat(),
    );
    assert!(run.status.success(), "{}", text(&run.stderr));
    let changelog = text(&support::snapshot(dir.path())["perf-changelog.yaml"]);
    assert!(changelog.contains("    - \"- vLLM v0.26.0 for the demo.\"\n"));
}

#[test]
fn bump_align_reports_every_changed_field_and_the_aligned_recipes() {
    let dir = demo_copy();
    let repo = dir.path().to_str().unwrap();
    // Make one recipe of the disagg family disagree with the master.
    let snapshot = support::snapshot(dir.path());
    let recipe = snapshot
        .iter()
        .find(|(path, bytes)| {
            path.contains("srt-slurm-recipes")
                && String::from_utf8_lossy(bytes).contains("vllm/vllm-openai:v0.25.0")
        })
        .map(|(path, bytes)| (path.clone(), String::from_utf8_lossy(bytes).into_owned()))
        .unwrap();
    std::fs::write(
        dir.path().join(&recipe.0),
        recipe
            .1
            .replacen("vllm/vllm-openai:v0.25.0", "vllm/vllm-openai:v0.24.0", 1),
    )
    .unwrap();
    let args = [
        "bump",
        "--checkout",
        repo,
        "--family",
        "demo-fp4-gb200-dynamo-vllm-disagg",
        "--to",
        "vllm/vllm-openai:v0.26.0",
        "--check",
    ];
    let left = klaud(&args);
    assert!(left.status.success(), "{}", text(&left.stderr));
    assert!(text(&left.stdout).contains(&format!("left {} on its own image", recipe.0)));
    assert!(text(&left.stderr).contains("warning:"));
    let aligned = klaud(&[&args[..], &["--align"]].concat());
    assert!(aligned.status.success(), "{}", text(&aligned.stderr));
    let stdout = text(&aligned.stdout);
    assert!(
        stdout.contains(&format!("aligned {} to the new image", recipe.0)),
        "{stdout}"
    );
    assert!(stdout.contains("(aligned)"), "{stdout}");
}

#[test]
fn bump_takes_the_family_string_its_key_or_its_id() {
    let dir = demo_copy();
    let repo = dir.path().to_str().unwrap();
    let listed = klaud(&["families", "--checkout", repo, "--json"]);
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let families: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let family = families
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["key"] == "demo-fp4-b200-vllm")
        .expect("the demo family");
    for form in [
        family["family"].as_str().unwrap(),
        family["key"].as_str().unwrap(),
        family["id"].as_str().unwrap(),
    ] {
        let out = klaud(&[
            "bump",
            "--checkout",
            repo,
            "--family",
            form,
            "--to",
            "vllm/vllm-openai:v9.9.9",
            "--check",
        ]);
        assert!(out.status.success(), "{form}: {}", text(&out.stderr));
    }
}

#[test]
fn families_counts_warnings_by_kind_and_lists_each_with_verbose() {
    let Some(full) = support::inferencex_full() else {
        return;
    };
    let full = full.to_str().unwrap();
    let summary = klaud(&["families", "--checkout", full]);
    assert!(summary.status.success(), "{}", text(&summary.stderr));
    let stderr = text(&summary.stderr);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("warning: "))
        .collect();
    // A handful of kinds, not one line per external recipe.
    assert!(lines.len() <= 6, "{stderr}");
    let external = lines
        .iter()
        .find(|l| l.contains(" x external recipe, not edited (e.g. "))
        .unwrap_or_else(|| panic!("{stderr}"));
    let count: usize = external["warning: ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(count > 100, "{external}");
    assert!(
        stderr.contains("(above by kind; -v lists each)"),
        "{stderr}"
    );

    let verbose = klaud(&["families", "--checkout", full, "-v"]);
    let stderr = text(&verbose.stderr);
    let listed = stderr
        .lines()
        .filter(|l| l.contains("(external recipe); it is not edited"))
        .count();
    assert_eq!(listed, count, "-v lists each external recipe once");
}
