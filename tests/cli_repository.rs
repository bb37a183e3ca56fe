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

    // Something unreadable fails a CI gate, naming it; the flag tolerates it.
    let gated = klaud(&["families", "--checkout", repo, "--json"]);
    assert_eq!(gated.status.code(), Some(1), "{}", text(&gated.stderr));
    assert!(
        text(&gated.stderr).contains("1 unreadable: configs/amd-master.yaml:broken-tbd"),
        "{}",
        text(&gated.stderr)
    );
    let listed = klaud(&[
        "families",
        "--checkout",
        repo,
        "--json",
        "--allow-unresolved",
    ]);
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
        "--allow-unreadable",
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

/// The real masters of the InferenceX fixture in a temp dir, with `edit`
/// applied to `configs/amd-master.yaml`.
fn real_masters_with(edit: impl FnOnce(&str) -> String) -> Option<tempfile::TempDir> {
    let full = support::inferencex_full()?;
    let dir = tempfile::tempdir().unwrap();
    support::copy_tree(&full.join("configs"), &dir.path().join("configs"));
    let amd = dir.path().join("configs/amd-master.yaml");
    let master = std::fs::read_to_string(&amd).unwrap();
    std::fs::write(&amd, edit(&master)).unwrap();
    Some(dir)
}

/// Top-level keys of a master with the byte offset of their line.
fn top_level_keys(text: &str) -> Vec<(usize, String)> {
    let mut offset = 0;
    let mut keys = Vec::new();
    for line in text.split_inclusive('\n') {
        if line.starts_with(|c: char| c.is_ascii_alphanumeric())
            && let Some((key, _)) = line.split_once(':')
        {
            keys.push((offset, key.to_owned()));
        }
        offset += line.len();
    }
    keys
}

/// `families --json` rows, the command's exit code and its stderr.
fn families_of(repo: &str, extra: &[&str]) -> (Vec<serde_json::Value>, Option<i32>, String) {
    let mut args = vec!["families", "--checkout", repo, "--json"];
    args.extend_from_slice(extra);
    let out = klaud(&args);
    let rows = serde_json::from_slice(&out.stdout).unwrap_or_default();
    (rows, out.status.code(), text(&out.stderr))
}

/// Bumps an AMD family without recipes (not `except`) through the CLI and
/// checks that only its image token changed: exit 1 without
/// `--allow-unresolved` (something else is unreadable), 0 with it.
fn bump_another_amd_family(dir: &Path, rows: &[serde_json::Value], except: &str) {
    let repo = dir.to_str().unwrap();
    let row = rows
        .iter()
        .find(|r| {
            r["file"] == "configs/amd-master.yaml"
                && r["key"] != except
                && r["recipes"].as_array().is_some_and(Vec::is_empty)
        })
        .expect("an AMD family without recipes");
    let key = row["key"].as_str().unwrap();
    let image = row["image"].as_str().unwrap();
    let (repository, _) = image.rsplit_once(':').unwrap();
    let to = format!("{repository}:klaud-test-tag");
    let path = dir.join("configs/amd-master.yaml");
    let before = std::fs::read_to_string(&path).unwrap();
    // Without the flag: the bump is made, and the exit code says that
    // something else could not be read.
    let gated = klaud(&["bump", "--checkout", repo, "--family", key, "--to", &to]);
    assert_eq!(gated.status.code(), Some(1), "{}", text(&gated.stderr));
    assert!(
        text(&gated.stderr).contains("unreadable: "),
        "{}",
        text(&gated.stderr)
    );
    let stdout = text(&gated.stdout);
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("changed ")).count(),
        1,
        "{stdout}"
    );
    let after = std::fs::read_to_string(&path).unwrap();
    let line = row["line"].as_u64().unwrap() as usize;
    let at = before
        .match_indices(image)
        .map(|(i, _)| i)
        .find(|i| before[..*i].matches('\n').count() + 1 > line)
        .unwrap();
    let expected = format!("{}{to}{}", &before[..at], &before[at + image.len()..]);
    assert_eq!(after, expected, "only the image token of {key} changed");
    // With the flag, back again: exit 0.
    let back = klaud(&[
        "bump",
        "--checkout",
        repo,
        "--family",
        key,
        "--to",
        image,
        "--allow-unresolved",
    ]);
    assert!(back.status.success(), "{}", text(&back.stderr));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), before);
}

/// A key repeated in the real AMD master (as on InferenceX's AMD branches)
/// hides only its own family: 207 of the 208 real families are listed,
/// `families` exits 1 naming the broken one (both lines), and another AMD
/// family is bumped byte for byte.
#[test]
fn a_duplicate_key_in_the_real_masters_costs_one_family_and_fails_the_gate() {
    let mut duplicated = String::new();
    let Some(dir) = real_masters_with(|text| {
        let keys = top_level_keys(text);
        duplicated = keys[3].1.clone();
        let entry = &text[keys[3].0..keys[4].0];
        format!("{text}\n{entry}")
    }) else {
        return;
    };
    let repo = dir.path().to_str().unwrap();
    let (rows, code, stderr) = families_of(repo, &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(rows.len(), 207, "{stderr}");
    let family = format!("configs/amd-master.yaml:{duplicated}");
    assert!(
        stderr.contains(&format!(
            "error: {family} cannot be read: configs/amd-master.yaml:"
        )) && stderr.contains(&format!(
            "duplicate key {duplicated:?} (first defined on line"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("1 unreadable: {family}")),
        "{stderr}"
    );
    assert!(rows.iter().all(|r| r["key"] != duplicated.as_str()));
    let (tolerated, code, _) = families_of(repo, &["--allow-unresolved"]);
    assert_eq!((tolerated.len(), code), (207, Some(0)));
    bump_another_amd_family(dir.path(), &rows, &duplicated);
}

/// An alias bomb appended to the real AMD master costs the bomb's own
/// entries: all 208 real families are listed, `families` exits 1 naming
/// the bomb's entries, and an AMD family is bumped byte for byte.
#[test]
fn an_alias_bomb_in_the_real_masters_costs_only_its_entries_and_fails_the_gate() {
    let Some(dir) = real_masters_with(|text| format!("{text}{}", alias_bomb())) else {
        return;
    };
    let repo = dir.path().to_str().unwrap();
    let (rows, code, stderr) = families_of(repo, &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(rows.len(), 208, "{stderr}");
    assert!(
        stderr.contains("alias bomb") && stderr.contains("configs/amd-master.yaml:lol"),
        "{stderr}"
    );
    bump_another_amd_family(dir.path(), &rows, "");
}
