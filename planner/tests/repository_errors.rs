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
fn an_alias_bomb_in_one_master_costs_only_its_own_entries() {
    let bomb = format!("{}{}", entry("amd-a", "rocm/sgl-dev:v0.5.1"), alias_bomb());
    let nvidia = entry("good-nv", "lmsysorg/sglang:v0.5.16-cu130");
    let dir = repo_with(&[
        ("configs/amd-master.yaml", bomb.as_bytes()),
        ("configs/nvidia-master.yaml", nvidia.as_bytes()),
    ]);
    let repository = Repository::open(dir.path()).unwrap();
    let keys: Vec<&str> = repository
        .families()
        .iter()
        .map(|f| f.key.as_str())
        .collect();
    assert_eq!(keys, ["amd-a", "good-nv"]);
    // Every bomb entry is unreadable on its own line; the ones that alias
    // a refused level say so.
    let unreadable = repository.unreadable();
    assert!(!unreadable.is_empty());
    assert!(
        unreadable
            .iter()
            .all(|u| u.key.as_deref().is_some_and(|k| k.starts_with("lol")) && u.line >= 15),
        "{unreadable:?}"
    );
    let text = unreadable
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(text.contains("alias bomb"), "{text}");
    let first = &unreadable[0];
    assert!(
        first
            .to_string()
            .contains(&format!("configs/amd-master.yaml:{}:", first.line)),
        "{first}"
    );
    // The bomb's neighbour is bumped, its token alone.
    let from = repository.family("amd-a").unwrap().image().clone();
    let plan = repository
        .plan_bump(
            "amd-a",
            &from,
            &ImageRef::parse("rocm/sgl-dev:v0.5.2").unwrap(),
        )
        .unwrap();
    plan.write(dir.path()).unwrap();
    let after = std::fs::read_to_string(dir.path().join("configs/amd-master.yaml")).unwrap();
    assert_eq!(
        after,
        bomb.replace("rocm/sgl-dev:v0.5.1", "rocm/sgl-dev:v0.5.2")
    );
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
fn a_key_twice_in_one_file_is_an_error_of_that_family_naming_both_lines() {
    let text = format!(
        "{ENTRY}\n{}\n{ENTRY}",
        entry("other", "lmsysorg/sglang:v0.5.16-cu130")
    );
    let dir = repo_with(&[("configs/x-master.yaml", text.as_bytes())]);
    let repository = Repository::open(dir.path()).unwrap();
    let keys: Vec<&str> = repository
        .families()
        .iter()
        .map(|f| f.key.as_str())
        .collect();
    assert_eq!(keys, ["other"]);
    let [broken] = repository.unreadable() else {
        panic!("{:?}", repository.unreadable());
    };
    assert_eq!(broken.family, "configs/x-master.yaml:demo-a");
    let err = broken.to_string();
    assert!(
        err.contains(
            "configs/x-master.yaml:31: duplicate key \"demo-a\" (first defined on line 1)"
        ),
        "{err}"
    );
    assert!(matches!(
        repository.family("demo-a"),
        Err(RepoError::Unreadable { .. })
    ));
}

#[test]
fn a_key_repeated_over_a_broken_entry_is_still_a_duplicate() {
    let text = format!(
        "{ENTRY}\ndemo-a:\n  image: TBD\n  deep: {}1{}\n",
        "[".repeat(70),
        "]".repeat(70)
    );
    let err = open_err(&[("configs/x-master.yaml", text.as_bytes())]);
    assert!(err.contains("duplicate key \"demo-a\""), "{err}");
    assert!(!err.contains("levels deep"), "{err}");
}

#[test]
fn errors_inside_one_entry_cost_that_entry_alone() {
    let nested_duplicate = ENTRY
        .replace("demo-a:", "dup-inside:")
        .replace("  runner: b200\n", "  runner: b200\n  runner: h200\n");
    let deep = format!(
        "too-deep:\n  image: x/y:1\n  scenarios: {}1{}\n",
        "[".repeat(70),
        "]".repeat(70)
    );
    let text = format!(
        "{}\n{nested_duplicate}\n{deep}\n{}",
        entry("first", "lmsysorg/sglang:v0.5.16-cu130"),
        entry("last", "lmsysorg/sglang:v0.5.16-cu130")
    );
    let dir = repo_with(&[("configs/x-master.yaml", text.as_bytes())]);
    let repository = Repository::open(dir.path()).unwrap();
    let keys: Vec<&str> = repository
        .families()
        .iter()
        .map(|f| f.key.as_str())
        .collect();
    assert_eq!(keys, ["first", "last"]);
    let broken: Vec<(&str, String)> = repository
        .unreadable()
        .iter()
        .map(|u| (u.key.as_deref().unwrap(), u.to_string()))
        .collect();
    assert_eq!(broken.len(), 2, "{broken:?}");
    assert_eq!(broken[0].0, "dup-inside");
    assert!(
        broken[0].1.contains("duplicate key \"runner\""),
        "{broken:?}"
    );
    assert_eq!(broken[1].0, "too-deep");
    assert!(broken[1].1.contains("levels deep"), "{broken:?}");
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

fn inferencex_full() -> Option<std::path::PathBuf> {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/inferencex/full");
    if full.join("configs/nvidia-master.yaml").is_file() {
        return Some(full);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "the shared InferenceX fixtures are missing at {}",
        full.display()
    );
    eprintln!(
        "\n*** SKIPPED: no shared InferenceX fixtures at {} ***\n",
        full.display()
    );
    None
}

/// The real masters (`configs/` of the fixture checkout) in a temp dir,
/// with `edit` applied to the text of `configs/amd-master.yaml`.
fn real_masters_with(full: &Path, edit: impl FnOnce(&str) -> String) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let configs = dir.path().join("configs");
    std::fs::create_dir_all(&configs).unwrap();
    for entry in std::fs::read_dir(full.join("configs")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, configs.join(path.file_name().unwrap())).unwrap();
        }
    }
    let amd = configs.join("amd-master.yaml");
    let text = std::fs::read_to_string(&amd).unwrap();
    std::fs::write(&amd, edit(&text)).unwrap();
    dir
}

/// The top-level keys of a master text with the byte offset of each.
fn top_level_keys(text: &str) -> Vec<(usize, &str)> {
    let mut offset = 0;
    let mut keys = Vec::new();
    for line in text.split_inclusive('\n') {
        if line.starts_with(|c: char| c.is_ascii_alphanumeric())
            && let Some((key, _)) = line.split_once(':')
        {
            keys.push((offset, key));
        }
        offset += line.len();
    }
    keys
}

/// Bumps `key` (a single-node family) to a new tag and checks that exactly
/// its image token changed in the file.
fn bump_changes_only_its_token(dir: &Path, key: &str) {
    let repository = Repository::open(dir).unwrap();
    let family = repository.family(key).unwrap();
    assert!(family.recipes.is_empty(), "pick a family without recipes");
    let path = dir.join(&family.file);
    let before = std::fs::read_to_string(&path).unwrap();
    let from = family.image().clone();
    let to = from.with_reference(Some("klaud-test-tag"), None).unwrap();
    let plan = repository.plan_bump(&family.family, &from, &to).unwrap();
    assert_eq!(plan.paths(), [family.file.as_str()]);
    plan.write(dir).unwrap();
    let after = std::fs::read_to_string(&path).unwrap();
    let old = from.to_string();
    let at = before
        .lines()
        .take(family.image_line - 1)
        .map(|l| l.len() + 1)
        .sum::<usize>()
        + before
            .lines()
            .nth(family.image_line - 1)
            .unwrap()
            .find(&old)
            .unwrap();
    let expected = format!("{}{}{}", &before[..at], to, &before[at + old.len()..]);
    assert_eq!(after, expected, "only the image token of {key} changes");
}

/// A repeated key in a copy of the real AMD master (as InferenceX's own
/// history had on its AMD branches) costs that key's family alone: the 207
/// other real families are read, and another AMD family is bumped.
#[test]
fn a_duplicate_key_in_the_real_amd_master_costs_one_family_of_208() {
    let Some(full) = inferencex_full() else {
        return;
    };
    assert_eq!(Repository::open(&full).unwrap().families().len(), 208);
    let mut duplicated = String::new();
    let mut duplicate_line = 0;
    let dir = real_masters_with(&full, |text| {
        let keys = top_level_keys(text);
        let (start, key) = keys[0];
        duplicated = key.to_owned();
        let entry = &text[start..keys[1].0];
        // Inserted in the middle, before the 20th key.
        let at = keys[20].0;
        duplicate_line = text[..at].matches('\n').count() + 1;
        format!("{}{entry}{}", &text[..at], &text[at..])
    });
    let repository = Repository::open(dir.path()).unwrap();
    assert_eq!(repository.families().len(), 207);
    let [broken] = repository.unreadable() else {
        panic!("{:?}", repository.unreadable());
    };
    assert_eq!(broken.key.as_deref(), Some(duplicated.as_str()));
    let message = broken.to_string();
    assert!(
        message.contains(&format!(
            "configs/amd-master.yaml:{duplicate_line}: duplicate key {duplicated:?} (first defined on line "
        )),
        "{message}"
    );
    let other = repository
        .families()
        .iter()
        .find(|f| {
            f.file == "configs/amd-master.yaml" && f.recipes.is_empty() && f.key != duplicated
        })
        .unwrap()
        .key
        .clone();
    bump_changes_only_its_token(dir.path(), &other);
}

/// An alias bomb appended to a copy of the real AMD master costs the bomb's
/// own entries: all 208 real families are read and bumped as usual.
#[test]
fn an_alias_bomb_in_the_real_amd_master_costs_only_its_own_entries() {
    let Some(full) = inferencex_full() else {
        return;
    };
    let dir = real_masters_with(&full, |text| format!("{text}{}", alias_bomb()));
    let repository = Repository::open(dir.path()).unwrap();
    assert_eq!(repository.families().len(), 208);
    let unreadable = repository.unreadable();
    assert!(!unreadable.is_empty());
    assert!(
        unreadable
            .iter()
            .all(|u| u.key.as_deref().is_some_and(|k| k.starts_with("lol"))),
        "{unreadable:?}"
    );
    assert!(
        unreadable
            .iter()
            .any(|u| u.to_string().contains("alias bomb")),
        "{unreadable:?}"
    );
    let other = repository
        .families()
        .iter()
        .rev()
        .find(|f| f.file == "configs/amd-master.yaml" && f.recipes.is_empty())
        .unwrap()
        .key
        .clone();
    bump_changes_only_its_token(dir.path(), &other);
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
