//! Malformed and hostile repositories: every problem is a clear error that
//! names the file (and line), and a refused bump writes nothing.

use std::collections::BTreeMap;
use std::path::Path;

use klaud_planner::bump::BumpError;
use klaud_planner::image::ImageRef;
use klaud_planner::repo::{RepoError, Repository, WarningKind};

const ENTRY: &str = "demo-a:
  image: lmsysorg/sglang:v0.5.16-cu130
  model: demo/Model
  model-prefix: demo
  runner: b200
  precision: fp4
  framework: sglang
  multinode: false
  scenarios:
    fixed-seq-len:
    - isl: 1024
      osl: 1024
      search-space:
      - { tp: 8, conc-start: 1, conc-end: 8 }
";

fn repo_with(files: &[(&str, &[u8])]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, bytes) in files {
        let target = dir.path().join(path);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::write(target, bytes).unwrap();
    }
    dir
}

fn snapshot(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.insert(
                    path.strip_prefix(root).unwrap().display().to_string(),
                    std::fs::read(&path).unwrap(),
                );
            }
        }
    }
    out
}

/// The error of opening the repository, or, when it opens, the errors of
/// the families it could not read (one bad entry does not stop the others).
fn open_err(files: &[(&str, &[u8])]) -> String {
    let dir = repo_with(files);
    match Repository::open(dir.path()) {
        Err(e) => e.to_string(),
        Ok(repository) => {
            assert!(
                !repository.unreadable().is_empty(),
                "expected an unreadable family"
            );
            repository
                .unreadable()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        }
    }
}

fn entry(key: &str, image: &str) -> String {
    ENTRY
        .replace("demo-a:", &format!("{key}:"))
        .replace("lmsysorg/sglang:v0.5.16-cu130", image)
}

/// The 9-level "billion laughs" a fuzzer found in master configs.
fn alias_bomb() -> String {
    let mut text = String::from("lol0: &l0 [a,a,a,a,a,a,a,a,a]\n");
    for level in 1..9 {
        let aliases = vec![format!("*l{}", level - 1); 9].join(",");
        text.push_str(&format!("lol{level}: &l{level} [{aliases}]\n"));
    }
    text
}

#[test]
fn one_malformed_image_is_an_error_of_its_family_only() {
    let amd = format!(
        "{}\n{}",
        entry("good-amd", "rocm/sgl-dev:v0.5.1"),
        entry("tbd-amd", "TBD")
    );
    let nvidia = entry("good-nv", "lmsysorg/sglang:v0.5.16-cu130");
    let dir = repo_with(&[
        ("configs/amd-master.yaml", amd.as_bytes()),
        ("configs/nvidia-master.yaml", nvidia.as_bytes()),
    ]);
    let repository = Repository::open(dir.path()).unwrap();
    let keys: Vec<&str> = repository
        .families()
        .iter()
        .map(|f| f.key.as_str())
        .collect();
    assert_eq!(keys, ["good-amd", "good-nv"]);
    let [broken] = repository.unreadable() else {
        panic!("one unreadable family: {:?}", repository.unreadable());
    };
    assert_eq!(broken.family, "configs/amd-master.yaml:tbd-amd");
    assert_eq!(broken.line, 16);
    let text = broken.to_string();
    assert!(
        text.contains("configs/amd-master.yaml:17: tbd-amd.image") && text.contains("TBD"),
        "{text}"
    );
    // Asking for it says why; asking for another family works.
    let err = repository.family("tbd-amd").unwrap_err();
    assert!(matches!(err, RepoError::Unreadable { .. }), "{err}");
    assert!(err.to_string().contains("TBD"), "{err}");
    let from = repository.family("good-nv").unwrap().image().clone();
    let plan = repository
        .plan_bump(
            "good-nv",
            &from,
            &ImageRef::parse("lmsysorg/sglang:v0.5.17-cu130").unwrap(),
        )
        .unwrap();
    plan.write(dir.path()).unwrap();
    let after = std::fs::read_to_string(dir.path().join("configs/nvidia-master.yaml")).unwrap();
    assert!(after.contains("lmsysorg/sglang:v0.5.17-cu130"), "{after}");
}

#[test]
fn an_alias_bomb_in_one_master_leaves_the_other_masters_readable() {
    let bomb = format!("{}{}", entry("amd-a", "rocm/sgl-dev:v0.5.1"), alias_bomb());
    let nvidia = entry("good-nv", "lmsysorg/sglang:v0.5.16-cu130");
    let dir = repo_with(&[
        ("configs/amd-master.yaml", bomb.as_bytes()),
        ("configs/nvidia-master.yaml", nvidia.as_bytes()),
    ]);
    let repository = Repository::open(dir.path()).unwrap();
    assert_eq!(repository.families().len(), 1);
    assert_eq!(repository.families()[0].key, "good-nv");
    let [broken] = repository.unreadable() else {
        panic!(
            "the bomb's file is unreadable: {:?}",
            repository.unreadable()
        );
    };
    assert_eq!(broken.family, "configs/amd-master.yaml");
    assert!(broken.key.is_none());
    assert!(
        broken.line > 15,
        "the line of the bomb, not of the file: {broken}"
    );
    let text = broken.to_string();
    assert!(text.contains("alias bomb"), "{text}");
    assert!(
        text.contains(&format!("configs/amd-master.yaml:{}:", broken.line)),
        "{text}"
    );
    // A family of the unreadable file is not silently unknown.
    let err = repository
        .family("configs/amd-master.yaml:amd-a")
        .unwrap_err();
    assert!(err.to_string().contains("alias bomb"), "{err}");
}

#[test]
fn a_hostile_runners_file_is_a_warning_and_platforms_come_from_runner_names() {
    let dir = repo_with(&[
        ("configs/x-master.yaml", ENTRY.as_bytes()),
        ("configs/runners.yaml", alias_bomb().as_bytes()),
    ]);
    let repository = Repository::open(dir.path()).unwrap();
    assert_eq!(repository.families().len(), 1);
    assert!(
        repository
            .warnings()
            .iter()
            .any(|w| w.location.starts_with("configs/runners.yaml:")
                && w.message.contains("alias bomb")),
        "{:?}",
        repository.warnings()
    );
}

#[test]
fn malformed_yaml_names_file_and_line() {
    let err = open_err(&[(
        "configs/x-master.yaml",
        b"demo-a:\n  image: [unclosed\n  model: x\n",
    )]);
    assert!(err.contains("configs/x-master.yaml:3:"), "{err}");
}

#[test]
fn a_missing_field_names_the_key_and_field() {
    let text = ENTRY.replace("  runner: b200\n", "");
    let err = open_err(&[("configs/x-master.yaml", text.as_bytes())]);
    assert!(
        err.contains("configs/x-master.yaml:2: demo-a.runner: missing"),
        "{err}"
    );
}

#[test]
fn a_key_in_two_master_files_names_both() {
    let err = open_err(&[
        ("configs/amd-master.yaml", ENTRY.as_bytes()),
        ("configs/nvidia-master.yaml", ENTRY.as_bytes()),
    ]);
    assert!(err.contains("configs/amd-master.yaml (line 1)"), "{err}");
    assert!(err.contains("configs/nvidia-master.yaml (line 1)"), "{err}");
}

#[test]
fn a_key_twice_in_one_file_is_an_error() {
    let text = format!("{ENTRY}\n{ENTRY}");
    let err = open_err(&[("configs/x-master.yaml", text.as_bytes())]);
    assert!(err.contains("duplicate key \"demo-a\""), "{err}");
    assert!(err.contains("configs/x-master.yaml:16"), "{err}");
}

#[test]
fn non_utf8_and_crlf_are_refused() {
    let mut bytes = ENTRY.as_bytes().to_vec();
    bytes[20] = 0xff;
    let err = open_err(&[("configs/x-master.yaml", &bytes)]);
    assert!(
        err.contains("not valid UTF-8") && err.contains("offset 20"),
        "{err}"
    );
    let crlf = ENTRY.replace('\n', "\r\n");
    let err = open_err(&[("configs/x-master.yaml", crlf.as_bytes())]);
    assert!(
        err.contains("configs/x-master.yaml:1: carriage return"),
        "{err}"
    );
}

#[test]
fn a_malformed_image_names_family_and_text() {
    let text = ENTRY.replace("lmsysorg/sglang:v0.5.16-cu130", "lmsysorg/SGLang:v1");
    let err = open_err(&[("configs/x-master.yaml", text.as_bytes())]);
    assert!(
        err.contains("configs/x-master.yaml:demo-a") && err.contains("lmsysorg/SGLang:v1"),
        "{err}"
    );
}

#[test]
fn a_recipe_path_that_escapes_is_an_error() {
    for setting in [
        "recipes/../../../../etc/passwd",
        "recipes/../x.yaml",
        "recipes/a/../../b.yaml",
    ] {
        let text = ENTRY.replace(
            "      - { tp: 8, conc-start: 1, conc-end: 8 }\n",
            &format!("      - additional-settings:\n        - \"CONFIG_FILE={setting}\"\n"),
        );
        let err = open_err(&[("configs/x-master.yaml", text.as_bytes())]);
        assert!(
            err.contains("points outside the repository"),
            "{setting}: {err}"
        );
        assert!(err.contains("configs/x-master.yaml:15"), "{err}");
    }
}

#[test]
fn external_recipes_and_unknown_fields_are_warnings() {
    let text = ENTRY
        .replace(
            "  multinode: false\n",
            "  multinode: true\n  shiny-new-field: 3\n",
        )
        .replace(
            "      - { tp: 8, conc-start: 1, conc-end: 8 }\n",
            "      - additional-settings:\n        - \"CONFIG_FILE=recipes/not/here.yaml\"\n",
        );
    let dir = repo_with(&[("configs/x-master.yaml", text.as_bytes())]);
    let repository = Repository::open(dir.path()).unwrap();
    let family = &repository.families()[0];
    assert_eq!(
        family.entry.unknown.get("shiny-new-field"),
        Some(&serde_json::json!(3))
    );
    assert!(!family.recipes[0].in_repository);
    let warnings: Vec<String> = repository
        .warnings()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        warnings.iter().any(|w| w.contains("shiny-new-field")),
        "{warnings:?}"
    );
    assert!(
        warnings.iter().any(|w| w.contains("external recipe")),
        "{warnings:?}"
    );
    let kinds: Vec<WarningKind> = repository.warnings().iter().map(|w| w.kind).collect();
    assert!(kinds.contains(&WarningKind::UnknownField), "{kinds:?}");
    assert!(kinds.contains(&WarningKind::ExternalRecipe), "{kinds:?}");
}

fn bump_err(files: &[(&str, &[u8])], family: &str, from: &str, to: &str) -> BumpError {
    let dir = repo_with(files);
    let before = snapshot(dir.path());
    let repository = Repository::open(dir.path()).unwrap();
    let result = repository
        .plan_bump(
            family,
            &ImageRef::parse(from).unwrap(),
            &ImageRef::parse(to).unwrap(),
        )
        .and_then(|plan| plan.write(dir.path()));
    assert_eq!(
        snapshot(dir.path()),
        before,
        "a refused bump wrote something"
    );
    result.unwrap_err()
}

#[test]
fn a_bump_refuses_when_the_current_value_is_not_old() {
    let err = bump_err(
        &[("configs/x-master.yaml", ENTRY.as_bytes())],
        "demo-a",
        "lmsysorg/sglang:v0.5.15-cu130",
        "lmsysorg/sglang:v0.5.17-cu130",
    );
    assert!(matches!(err, BumpError::NotOld { .. }), "{err}");
    assert!(err.to_string().contains("configs/x-master.yaml:2"), "{err}");
}

#[test]
fn a_bump_refuses_block_and_multiline_values() {
    for (replacement, needle) in [
        (
            "  image: >-\n    lmsysorg/sglang:v0.5.16-cu130\n",
            "block scalar",
        ),
        ("  image: lmsysorg/sglang:v0.5.16-cu130\n    \n", ""),
        // An escaped line break joins the halves without a space.
        (
            "  image: \"lmsysorg/sglang:v0.5.16-\\\n    cu130\"\n",
            "another line",
        ),
    ] {
        let text = ENTRY.replace("  image: lmsysorg/sglang:v0.5.16-cu130\n", replacement);
        let dir = repo_with(&[("configs/x-master.yaml", text.as_bytes())]);
        let repository = Repository::open(dir.path()).unwrap();
        let from = repository.families()[0].image().clone();
        let result = repository.plan_bump(
            "demo-a",
            &from,
            &ImageRef::parse("lmsysorg/sglang:v0.5.17-cu130").unwrap(),
        );
        if needle.is_empty() {
            assert!(result.is_ok(), "a trailing blank line is fine");
        } else {
            let err = result.unwrap_err().to_string();
            assert!(err.contains(needle), "{err}");
        }
    }
}

#[test]
fn a_bump_of_a_missing_family_is_refused() {
    let err = bump_err(
        &[("configs/x-master.yaml", ENTRY.as_bytes())],
        "demo-b",
        "lmsysorg/sglang:v0.5.16-cu130",
        "lmsysorg/sglang:v0.5.17-cu130",
    );
    assert!(err.to_string().contains("no family \"demo-b\""), "{err}");
}

const RECIPE: &str = "name: r\nmodel:\n  container: \"lmsysorg/sglang:v0.5.16-cu130\"  # pinned\nidentity:\n  container: { image: lmsysorg/sglang:v0.5.16-cu130 }\n";

fn multinode(key: &str, recipe: &str) -> String {
    ENTRY
        .replace("demo-a:", &format!("{key}:"))
        .replace("  multinode: false\n", "  multinode: true\n")
        .replace(
            "      - { tp: 8, conc-start: 1, conc-end: 8 }\n",
            &format!("      - additional-settings:\n        - \"CONFIG_FILE=recipes/{recipe}\"\n"),
        )
}

#[test]
fn a_bump_changes_master_and_recipe_tokens_only() {
    let master = multinode("demo-a", "s/r.yaml");
    let dir = repo_with(&[
        ("configs/x-master.yaml", master.as_bytes()),
        (
            "benchmarks/multi_node/srt-slurm-recipes/s/r.yaml",
            RECIPE.as_bytes(),
        ),
    ]);
    let repository = Repository::open(dir.path()).unwrap();
    let from = repository.families()[0].image().clone();
    let to = ImageRef::parse(&format!(
        "lmsysorg/sglang:v0.5.17-cu130@sha256:{}",
        "a".repeat(64)
    ))
    .unwrap();
    let plan = repository.plan_bump("demo-a", &from, &to).unwrap();
    plan.write(dir.path()).unwrap();
    let recipe = std::fs::read_to_string(
        dir.path()
            .join("benchmarks/multi_node/srt-slurm-recipes/s/r.yaml"),
    )
    .unwrap();
    assert_eq!(
        recipe,
        RECIPE.replace(
            "v0.5.16-cu130",
            &format!("v0.5.17-cu130@sha256:{}", "a".repeat(64))
        )
    );
    let master_after = std::fs::read_to_string(dir.path().join("configs/x-master.yaml")).unwrap();
    assert_eq!(
        master_after,
        master.replacen("lmsysorg/sglang:v0.5.16-cu130", &to.to_string(), 1)
    );
}

#[test]
fn recipe_fields_with_another_image_are_left_alone_with_a_warning() {
    let master = multinode("demo-a", "s/r.yaml");
    let recipe = RECIPE.replacen("\"lmsysorg/sglang:v0.5.16-cu130\"", "dynamo-sglang", 1);
    let dir = repo_with(&[
        ("configs/x-master.yaml", master.as_bytes()),
        (
            "benchmarks/multi_node/srt-slurm-recipes/s/r.yaml",
            recipe.as_bytes(),
        ),
    ]);
    let repository = Repository::open(dir.path()).unwrap();
    let from = repository.families()[0].image().clone();
    let plan = repository
        .plan_bump(
            "demo-a",
            &from,
            &ImageRef::parse("lmsysorg/sglang:v0.5.17-cu130").unwrap(),
        )
        .unwrap();
    assert_eq!(plan.edits.len(), 2);
    assert_eq!(
        plan.edits[1].changes.len(),
        1,
        "only identity.container.image"
    );
    assert!(
        plan.warnings[0].contains("model.container") && plan.warnings[0].contains("dynamo-sglang")
    );
    assert_eq!(
        plan.left_recipes(),
        ["benchmarks/multi_node/srt-slurm-recipes/s/r.yaml"]
    );
}

#[test]
fn families_sharing_a_recipe_with_different_images_are_refused_with_how_to_align() {
    let master = format!(
        "{}\n{}",
        multinode("demo-a", "s/r.yaml"),
        multinode("demo-b", "s/r.yaml").replace("v0.5.16-cu130", "v0.5.15-cu130")
    );
    let err = bump_err(
        &[
            ("configs/x-master.yaml", master.as_bytes()),
            (
                "benchmarks/multi_node/srt-slurm-recipes/s/r.yaml",
                RECIPE.as_bytes(),
            ),
        ],
        "demo-a",
        "lmsysorg/sglang:v0.5.16-cu130",
        "lmsysorg/sglang:v0.5.17-cu130",
    );
    assert!(matches!(err, BumpError::MixedGroup { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("demo-b (lmsysorg/sglang:v0.5.15-cu130)"),
        "{text}"
    );
    assert!(text.contains("--align"), "{text}");
}

#[test]
fn a_file_changed_after_planning_is_not_overwritten() {
    let dir = repo_with(&[("configs/x-master.yaml", ENTRY.as_bytes())]);
    let repository = Repository::open(dir.path()).unwrap();
    let from = repository.families()[0].image().clone();
    let plan = repository
        .plan_bump(
            "demo-a",
            &from,
            &ImageRef::parse("lmsysorg/sglang:v0.5.17-cu130").unwrap(),
        )
        .unwrap();
    let changed = format!("{ENTRY}# a maintainer's edit\n");
    std::fs::write(dir.path().join("configs/x-master.yaml"), &changed).unwrap();
    let err = plan.write(dir.path()).unwrap_err();
    assert!(matches!(err, BumpError::Concurrent { .. }), "{err}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("configs/x-master.yaml")).unwrap(),
        changed
    );
}

#[test]
fn a_repository_without_masters_says_where_it_looked() {
    let dir = tempfile::tempdir().unwrap();
    let err = Repository::open(dir.path()).unwrap_err();
    assert!(matches!(err, RepoError::NoMasters { .. }));
    assert!(
        err.to_string()
            .contains("point --checkout at a benchmark repository checkout")
    );
}

#[tokio::test]
async fn a_plan_names_the_unreadable_family_and_plans_every_other() {
    use klaud_planner::plan::{PlanOptions, plan};
    use klaud_planner::registry::{RegistryClient, RegistryConfig};
    let master = format!(
        "{}\n{}",
        entry("good-a", "lmsysorg/sglang:v0.5.16-cu130"),
        entry("tbd-b", "TBD")
    );
    let dir = repo_with(&[("configs/x-master.yaml", master.as_bytes())]);
    let repository = Repository::open(dir.path()).unwrap();
    // No registry answers: the readable family is still planned (with the
    // registry's error as its reason).
    let mut config = RegistryConfig::default();
    config.mirrors.insert(
        "docker.io".to_owned(),
        "http://127.0.0.1:9".parse().unwrap(),
    );
    let client = RegistryClient::new(config).unwrap();
    let options = PlanOptions::new(chrono::Utc::now());
    let report = plan(&repository, &client.session(), &options).await;
    let planned: Vec<&str> = report.families.iter().map(|f| f.family.as_str()).collect();
    assert_eq!(planned, ["configs/x-master.yaml:good-a"]);
    let [unreadable] = &report.unreadable[..] else {
        panic!("{:?}", report.unreadable);
    };
    assert!(
        unreadable.starts_with(
            "configs/x-master.yaml:tbd-b cannot be read: configs/x-master.yaml:17: tbd-b.image"
        ),
        "{unreadable}"
    );
}

/// Every YAML file of the real InferenceX checkout (masters, changelog,
/// runners, and the srt-slurm recipes, some of which use anchors and
/// aliases) reads within the limits, and every real family is readable.
#[test]
fn the_real_inferencex_checkout_reads_within_the_limits() {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/inferencex/full");
    if !full.join("configs/nvidia-master.yaml").is_file() {
        assert!(std::env::var_os("CI").is_none(), "fixtures missing");
        return;
    }
    let repository = Repository::open(&full).unwrap();
    assert!(
        repository.unreadable().is_empty(),
        "{:?}",
        repository.unreadable()
    );
    assert!(repository.families().len() > 100);
    let mut stack = vec![full.clone()];
    let (mut files, mut with_aliases) = (0, 0);
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if !path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            files += 1;
            if text.contains(": *") || text.contains("- *") {
                with_aliases += 1;
            }
            if let Err(e) = klaud_planner::yaml::parse_lenient(&text) {
                assert!(
                    !e.message.contains("alias bomb")
                        && !e.message.contains("levels deep")
                        && !e.message.contains("bytes"),
                    "{}: {e}",
                    path.display()
                );
            }
        }
    }
    assert!(files > 400, "{files} YAML files");
    assert!(with_aliases > 0, "no real file uses aliases");
}
