//! Bumps change every image a family runs: every `*_CONFIG_FILE` recipe
//! (selectors stripped, launcher copy mappings resolved), other fields that
//! hold exactly the old image, disagreeing recipes by policy, and whole
//! groups of families that share recipes.

use std::collections::BTreeMap;
use std::path::Path;

use klaud_planner::bump::{BumpError, BumpOptions, ChangeKind, DisagreePolicy};
use klaud_planner::changelog::ChangelogEntry;
use klaud_planner::image::ImageRef;
use klaud_planner::repo::{RecipeRoot, RepoOptions, Repository};

const RECIPES: &str = "benchmarks/multi_node/srt-slurm-recipes";
const OLD: &str = "vllm/vllm-openai:v0.25.0";
const NEW: &str = "vllm/vllm-openai:v0.25.1";

fn master(key: &str, image: &str, settings: &[&str]) -> String {
    let mut text = format!(
        "{key}:\n  image: {image}\n  model: demo/Model\n  model-prefix: demo\n  runner: gb200\n  precision: fp4\n  framework: dynamo-vllm\n  multinode: true\n  scenarios:\n    fixed-seq-len:\n    - isl: 1024\n      osl: 1024\n      search-space:\n      - additional-settings:\n"
    );
    for setting in settings {
        text.push_str(&format!("        - \"{setting}\"\n"));
    }
    text
}

fn recipe(image: &str) -> String {
    format!(
        "name: r\nmodel:\n  container: \"{image}\"\nidentity:\n  container:\n    image: '{image}'\n"
    )
}

fn repo_with(files: &[(&str, String)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let target = dir.path().join(path);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::write(target, text).unwrap();
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

fn image(text: &str) -> ImageRef {
    ImageRef::parse(text).unwrap()
}

#[test]
fn eval_and_other_config_file_recipes_are_bumped_and_listed() {
    let dir = repo_with(&[
        (
            "configs/x-master.yaml",
            master(
                "fam",
                OLD,
                &[
                    "CONFIG_FILE=recipes/m/run.yaml",
                    "EVAL_CONFIG_FILE=recipes/m/run-eval.yaml",
                    "WARMUP_CONFIG_FILE=recipes/m/warm.yaml",
                    "NOT_A_CONFIG=recipes/m/ignored.yaml",
                ],
            ),
        ),
        (&format!("{RECIPES}/m/run.yaml"), recipe(OLD)),
        (&format!("{RECIPES}/m/run-eval.yaml"), recipe(OLD)),
        (&format!("{RECIPES}/m/warm.yaml"), recipe(OLD)),
        (&format!("{RECIPES}/m/ignored.yaml"), recipe(OLD)),
    ]);
    let repository = Repository::open(dir.path()).unwrap();
    let family = repository.family("fam").unwrap();
    let variables: Vec<&str> = family.recipes.iter().map(|r| r.variable.as_str()).collect();
    assert_eq!(
        variables,
        ["CONFIG_FILE", "EVAL_CONFIG_FILE", "WARMUP_CONFIG_FILE"]
    );
    let plan = repository
        .plan_bump("fam", &image(OLD), &image(NEW))
        .unwrap();
    let paths = plan.paths();
    assert_eq!(paths.len(), 4, "{paths:?}");
    assert!(paths.contains(&format!("{RECIPES}/m/run-eval.yaml").as_str()));
    assert!(!paths.contains(&format!("{RECIPES}/m/ignored.yaml").as_str()));
    plan.write(dir.path()).unwrap();
    let eval =
        std::fs::read_to_string(dir.path().join(format!("{RECIPES}/m/run-eval.yaml"))).unwrap();
    assert_eq!(eval, recipe(NEW), "quote styles kept");
}

#[test]
fn selectors_are_stripped_like_the_launchers_do() {
    let dir = repo_with(&[
        (
            "configs/x-master.yaml",
            master(
                "fam",
                OLD,
                &[
                    "CONFIG_FILE=recipes/g/agentx.yaml:zip_override_lowlat[0]",
                    "CONFIG_FILE=recipes/g/agentx.yaml:zip_override_lowlat[1]",
                ],
            ),
        ),
        (&format!("{RECIPES}/g/agentx.yaml"), recipe(OLD)),
    ]);
    let repository = Repository::open(dir.path()).unwrap();
    let family = repository.family("fam").unwrap();
    assert_eq!(family.recipes.len(), 2, "both settings are listed");
    assert!(family.recipes.iter().all(|r| r.in_repository));
    assert_eq!(
        family.recipes[1].selector.as_deref(),
        Some("zip_override_lowlat[1]")
    );
    let plan = repository
        .plan_bump("fam", &image(OLD), &image(NEW))
        .unwrap();
    assert_eq!(plan.edits.len(), 2, "the file is edited once");
    assert_eq!(plan.edits[1].changes.len(), 2);
}

#[test]
fn launcher_copy_mappings_resolve_renamed_recipe_folders() {
    let files = [
        (
            "configs/x-master.yaml".to_owned(),
            master(
                "fam",
                OLD,
                &["CONFIG_FILE=recipes/trtllm/kimi-k25-nvfp4/b200-fp4/disagg-a.yaml"],
            ),
        ),
        (
            format!("{RECIPES}/trtllm/kimi-k2.5/disagg/trtllm_dynamo/b200-fp4/disagg-a.yaml"),
            recipe(OLD),
        ),
    ];
    let files: Vec<(&str, String)> = files.iter().map(|(p, t)| (p.as_str(), t.clone())).collect();
    let dir = repo_with(&files);
    // Without the mapping the recipe looks external and stays stale.
    let plain = Repository::open(dir.path()).unwrap();
    assert!(!plain.family("fam").unwrap().recipes[0].in_repository);
    let options = RepoOptions {
        recipe_roots: vec![RecipeRoot {
            prefix: "recipes/trtllm/kimi-k25-nvfp4/b200-fp4".into(),
            folder: format!("{RECIPES}/trtllm/kimi-k2.5/disagg/trtllm_dynamo/b200-fp4"),
        }],
    };
    let repository = Repository::open_with(dir.path(), &options).unwrap();
    let recipe_ref = &repository.family("fam").unwrap().recipes[0];
    assert!(recipe_ref.in_repository);
    assert_eq!(
        recipe_ref.root.as_deref(),
        Some("recipes/trtllm/kimi-k25-nvfp4/b200-fp4")
    );
    let plan = repository
        .plan_bump("fam", &image(OLD), &image(NEW))
        .unwrap();
    assert_eq!(plan.edits.len(), 2);
    assert!(
        plan.edits[1]
            .path
            .ends_with("trtllm_dynamo/b200-fp4/disagg-a.yaml")
    );
}

#[test]
fn a_missing_in_repository_recipe_is_an_error_naming_file_and_family() {
    for (setting, options) in [
        (
            format!("CONFIG_FILE={RECIPES}/m/gone.yaml"),
            RepoOptions::default(),
        ),
        (
            "EVAL_CONFIG_FILE=recipes/copied/gone.yaml".to_owned(),
            RepoOptions {
                recipe_roots: vec![RecipeRoot {
                    prefix: "recipes/copied".into(),
                    folder: format!("{RECIPES}/copied"),
                }],
            },
        ),
    ] {
        let dir = repo_with(&[(
            "configs/x-master.yaml",
            master(
                "fam",
                OLD,
                &["CONFIG_FILE=recipes/m/upstream.yaml", &setting],
            ),
        )]);
        let before = snapshot(dir.path());
        let repository = Repository::open_with(dir.path(), &options).unwrap();
        let family = repository.family("fam").unwrap();
        assert!(!family.recipes[0].missing, "not ours: an srt-slurm recipe");
        assert!(family.recipes[1].missing);
        let err = repository
            .plan_bump("fam", &image(OLD), &image(NEW))
            .unwrap_err();
        assert!(matches!(err, BumpError::MissingRecipe { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("configs/x-master.yaml:16: configs/x-master.yaml:fam"),
            "{text}"
        );
        assert!(text.contains("gone.yaml"), "{text}");
        assert_eq!(snapshot(dir.path()), before);
    }
}

#[test]
fn other_fields_holding_exactly_the_old_image_move_too_and_are_reported() {
    let text = format!(
        "{}benchmark:\n  env:\n    IMAGE: \"{OLD}\"\n    OTHER: {OLD}-not-quite\n  images: [{OLD}, other/image:1]\n",
        recipe(OLD)
    );
    let dir = repo_with(&[
        (
            "configs/x-master.yaml",
            master("fam", OLD, &["CONFIG_FILE=recipes/m/run.yaml"]),
        ),
        (&format!("{RECIPES}/m/run.yaml"), text.clone()),
    ]);
    let repository = Repository::open(dir.path()).unwrap();
    let plan = repository
        .plan_bump("fam", &image(OLD), &image(NEW))
        .unwrap();
    let recipe_edit = &plan.edits[1];
    let fields: Vec<(&str, ChangeKind)> = recipe_edit
        .changes
        .iter()
        .map(|c| (c.field.as_str(), c.kind))
        .collect();
    assert_eq!(
        fields,
        [
            ("model.container", ChangeKind::RecipeImage),
            ("identity.container.image", ChangeKind::RecipeImage),
            ("benchmark.env.IMAGE", ChangeKind::SameValue),
            ("benchmark.images[0]", ChangeKind::SameValue),
        ]
    );
    assert_eq!(
        recipe_edit.after,
        text.replace(&format!("{OLD}\""), &format!("{NEW}\""))
            .replace(&format!("{OLD}'"), &format!("{NEW}'"))
            .replace(&format!("[{OLD},"), &format!("[{NEW},"))
    );
    assert!(
        plan.change_lines()
            .iter()
            .any(|l| l.ends_with(&format!("benchmark.env.IMAGE: \"{OLD}\" -> \"{NEW}\"")))
    );
}

#[test]
fn disagreeing_recipes_are_left_by_default_and_aligned_on_request() {
    let other = "vllm/vllm-openai:v0.24.0";
    let dir = repo_with(&[
        (
            "configs/x-master.yaml",
            master(
                "fam",
                OLD,
                &[
                    "CONFIG_FILE=recipes/m/agree.yaml",
                    "CONFIG_FILE=recipes/m/differ.yaml",
                    "CONFIG_FILE=recipes/m/alias.yaml",
                ],
            ),
        ),
        (&format!("{RECIPES}/m/agree.yaml"), recipe(OLD)),
        (&format!("{RECIPES}/m/differ.yaml"), recipe(other)),
        (&format!("{RECIPES}/m/alias.yaml"), recipe("dynamo-vllm")),
    ]);
    let repository = Repository::open(dir.path()).unwrap();
    let left = repository
        .plan_bump("fam", &image(OLD), &image(NEW))
        .unwrap();
    assert_eq!(left.edits.len(), 2);
    assert!(left.aligned_recipes().is_empty());
    assert_eq!(
        left.left_recipes(),
        [
            format!("{RECIPES}/m/differ.yaml"),
            format!("{RECIPES}/m/alias.yaml")
        ]
    );
    assert!(
        left.warnings.iter().any(|w| w.contains("--align")),
        "{:?}",
        left.warnings
    );

    let options = BumpOptions {
        disagreeing: DisagreePolicy::Align,
    };
    let aligned = repository
        .plan_bump_with("fam", &image(OLD), &image(NEW), &options)
        .unwrap();
    assert_eq!(aligned.edits.len(), 3);
    assert_eq!(
        aligned.aligned_recipes(),
        [format!("{RECIPES}/m/differ.yaml")]
    );
    assert_eq!(aligned.left_recipes(), [format!("{RECIPES}/m/alias.yaml")]);
    assert_eq!(aligned.edits[2].after, recipe(NEW));
    assert!(
        aligned.edits[2]
            .changes
            .iter()
            .all(|c| c.kind == ChangeKind::Aligned)
    );
}

fn group_repo(b_image: &str) -> tempfile::TempDir {
    let text = format!(
        "{}\n{}\n{}",
        master(
            "fam-a",
            OLD,
            &[
                "CONFIG_FILE=recipes/m/shared.yaml",
                "CONFIG_FILE=recipes/m/a.yaml"
            ]
        ),
        master("fam-b", b_image, &["CONFIG_FILE=recipes/m/shared.yaml"]),
        master("fam-c", OLD, &["CONFIG_FILE=recipes/m/c.yaml"]),
    );
    repo_with(&[
        ("configs/x-master.yaml", text),
        (&format!("{RECIPES}/m/shared.yaml"), recipe(OLD)),
        (&format!("{RECIPES}/m/a.yaml"), recipe(OLD)),
        (&format!("{RECIPES}/m/c.yaml"), recipe(OLD)),
        (
            "perf-changelog.yaml",
            "- config-keys:\n    - x\n  description:\n    - \"x\"\n  pr-link: https://github.com/o/r/pull/1\n".to_owned(),
        ),
    ])
}

#[test]
fn a_group_is_bumped_together_in_one_write_with_one_changelog_entry() {
    let dir = group_repo(OLD);
    let repository = Repository::open(dir.path()).unwrap();
    let groups = repository.groups();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].keys, ["fam-a", "fam-b"]);
    assert!(groups[0].same_image);
    assert_eq!(
        groups[0].shared_recipes,
        [format!("{RECIPES}/m/shared.yaml")]
    );
    assert!(repository.group_of("configs/x-master.yaml:fam-c").is_none());

    // Asking for either member gives the same edit.
    let mut plan = repository
        .plan_bump("fam-b", &image(OLD), &image(NEW))
        .unwrap();
    assert_eq!(plan.keys, ["fam-a", "fam-b"]);
    assert_eq!(plan.edits[0].changes.len(), 2, "both master entries");
    assert_eq!(plan.edits.len(), 3, "master, shared.yaml, a.yaml");
    let entry = ChangelogEntry {
        config_keys: plan.keys.clone(),
        description: "Update the vLLM image from v0.25.0 to v0.25.1.".into(),
        pr_link: "https://github.com/o/r/pull/2".into(),
    };
    plan.add_changelog_entry(&repository, &entry).unwrap();
    plan.write(dir.path()).unwrap();
    let changelog = std::fs::read_to_string(dir.path().join("perf-changelog.yaml")).unwrap();
    assert!(changelog.ends_with("\n- config-keys:\n    - fam-a\n    - fam-b\n  description:\n    - \"Update the vLLM image from v0.25.0 to v0.25.1.\"\n  pr-link: https://github.com/o/r/pull/2\n"));
    let reread = Repository::open(dir.path()).unwrap();
    for key in ["fam-a", "fam-b"] {
        assert_eq!(reread.family(key).unwrap().image().to_string(), NEW);
    }
    assert_eq!(reread.family("fam-c").unwrap().image().to_string(), OLD);
}

#[test]
fn a_mixed_group_is_refused_unless_aligned_and_then_moves_as_one() {
    let dir = group_repo("vllm/vllm-openai:v0.24.0");
    let repository = Repository::open(dir.path()).unwrap();
    assert!(!repository.groups()[0].same_image);
    let err = repository
        .plan_bump("fam-a", &image(OLD), &image(NEW))
        .unwrap_err();
    assert!(
        err.to_string().contains("fam-b (vllm/vllm-openai:v0.24.0)"),
        "{err}"
    );
    let plan = repository
        .plan_bump_with(
            "fam-a",
            &image(OLD),
            &image(NEW),
            &BumpOptions {
                disagreeing: DisagreePolicy::Align,
            },
        )
        .unwrap();
    assert_eq!(plan.keys, ["fam-a", "fam-b"]);
    plan.write(dir.path()).unwrap();
    let reread = Repository::open(dir.path()).unwrap();
    assert!(reread.groups()[0].same_image);
}

#[test]
fn changelog_input_mistakes_are_refused_before_anything_is_written() {
    let dir = group_repo(OLD);
    let repository = Repository::open(dir.path()).unwrap();
    let before = snapshot(dir.path());
    let mut plan = repository
        .plan_bump("fam-c", &image(OLD), &image(NEW))
        .unwrap();
    let foreign = ChangelogEntry {
        config_keys: vec!["fam-c".into()],
        description: "- starts with a dash, which is fine.".into(),
        pr_link: "https://github.com/someone/else/pull/2".into(),
    };
    let err = plan.add_changelog_entry(&repository, &foreign).unwrap_err();
    assert!(
        err.to_string()
            .contains("https://github.com/o/r/pull/<number>"),
        "{err}"
    );
    let own = ChangelogEntry {
        pr_link: "https://github.com/O/R/pull/2".into(),
        ..foreign
    };
    plan.add_changelog_entry(&repository, &own).unwrap();

    std::fs::write(dir.path().join("perf-changelog.yaml"), "entries:\n  - x\n").unwrap();
    let mut plan = repository
        .plan_bump("fam-c", &image(OLD), &image(NEW))
        .unwrap();
    let err = plan.add_changelog_entry(&repository, &own).unwrap_err();
    assert!(err.to_string().contains("perf-changelog.yaml:1"), "{err}");
    assert!(err.to_string().contains("not a YAML list"), "{err}");
    let mut expected = before;
    expected.insert("perf-changelog.yaml".into(), b"entries:\n  - x\n".to_vec());
    assert_eq!(snapshot(dir.path()), expected);
}

#[test]
fn an_image_written_as_a_yaml_alias_gets_an_accurate_message() {
    let text = format!(
        "{}\n{}",
        master("fam-a", &format!("&img {OLD}"), &[]),
        master("fam-b", "*img", &[])
    );
    let dir = repo_with(&[("configs/x-master.yaml", text)]);
    let repository = Repository::open(dir.path()).unwrap();
    let err = repository
        .plan_bump("fam-b", &image(OLD), &image(NEW))
        .unwrap_err()
        .to_string();
    assert!(err.contains("YAML alias (*name, line 17)"), "{err}");
    assert!(!err.contains("another line"), "{err}");
    let err = repository
        .plan_bump("fam-a", &image(OLD), &image(NEW))
        .unwrap_err()
        .to_string();
    assert!(err.contains("YAML anchor"), "{err}");
}

/// Recipes a person already moved to the new image are no change: a bump
/// lists only the files whose bytes change, and no "A -> A" line.
#[test]
fn files_already_at_the_new_image_are_not_edits() {
    let settings: Vec<String> = (0..6)
        .map(|i| format!("CONFIG_FILE=recipes/m/r{i}.yaml"))
        .collect();
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    let mut files = vec![(
        "configs/x-master.yaml".to_owned(),
        master("fam", OLD, &settings),
    )];
    for i in 0..6 {
        files.push((format!("{RECIPES}/m/r{i}.yaml"), recipe(NEW)));
    }
    let files: Vec<(&str, String)> = files.iter().map(|(p, t)| (p.as_str(), t.clone())).collect();
    let dir = repo_with(&files);
    let repository = Repository::open(dir.path()).unwrap();
    let options = BumpOptions {
        disagreeing: DisagreePolicy::Align,
    };
    let plan = repository
        .plan_bump_with("fam", &image(OLD), &image(NEW), &options)
        .unwrap();
    assert_eq!(plan.paths(), ["configs/x-master.yaml"]);
    let changes: Vec<_> = plan.edits.iter().flat_map(|e| &e.changes).collect();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(changes.iter().all(|c| c.old != c.new), "{changes:?}");
    let before = snapshot(dir.path());
    plan.write(dir.path()).unwrap();
    let after = snapshot(dir.path());
    let changed: Vec<&String> = after
        .iter()
        .filter(|(path, bytes)| before.get(*path) != Some(*bytes))
        .map(|(path, _)| path)
        .collect();
    assert_eq!(changed, ["configs/x-master.yaml"]);

    // Asked for the image it already has, the bump is refused as no change.
    let repository = Repository::open(dir.path()).unwrap();
    let same = repository.plan_bump_with("fam", &image(NEW), &image(NEW), &options);
    assert!(matches!(same, Err(BumpError::Unchanged { .. })), "{same:?}");
}
