//! The `[[recipe_roots]]` documented in `configs/inferencex.toml` cover
//! every literal `cp -rT` folder copy of the real InferenceX launchers: a
//! recipe named through the copy's destination resolves to the copied
//! repository file.

use crate::support;

use klaud::config::Config;
use klaud_planner::launchers::launcher_copies;
use klaud_planner::repo::{RECIPES_DIR, Repository};

#[test]
fn the_documented_mapping_covers_every_literal_launcher_copy() {
    let Some(full) = support::inferencex_full() else {
        return;
    };
    let config = Config::load(
        &std::path::Path::new(crate::support::REPO_ROOT).join("configs/inferencex.toml"),
    )
    .unwrap();
    let copies = launcher_copies(&full, "").unwrap();
    assert!(copies.len() >= 25, "only {} copies found", copies.len());
    let (literal, variable): (Vec<_>, Vec<_>) = copies.iter().partition(|c| c.is_literal());
    // The two `$TRTLLM_RECIPES_DIR` copies of launch_gb300-nv.sh are mapped by hand.
    assert_eq!(variable.len(), 2, "{variable:?}");

    // One probe recipe per copy: a master that names `<destination>/probe-N.yaml`
    // and the file at `<folder>/probe-N.yaml`.
    let dir = tempfile::tempdir().unwrap();
    let mut settings = String::new();
    for (n, copy) in literal.iter().enumerate() {
        assert!(copy.folder.starts_with(RECIPES_DIR), "{copy:?}");
        let file = dir
            .path()
            .join(&copy.folder)
            .join(format!("probe-{n}.yaml"));
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, "name: probe\n").unwrap();
        settings.push_str(&format!(
            "        - \"CONFIG_FILE={}/probe-{n}.yaml\"\n",
            copy.destination
        ));
    }
    let master = format!(
        "probe:\n  image: vllm/vllm-openai:v0.25.0\n  model: m\n  model-prefix: m\n  runner: gb200\n  precision: fp4\n  framework: dynamo-vllm\n  multinode: true\n  scenarios:\n    fixed-seq-len:\n    - search-space:\n      - additional-settings:\n{settings}"
    );
    std::fs::create_dir_all(dir.path().join("configs")).unwrap();
    std::fs::write(dir.path().join("configs/x-master.yaml"), master).unwrap();
    let repository = Repository::open_with(dir.path(), &config.repo_options()).unwrap();
    let family = repository.family("probe").unwrap();
    assert_eq!(family.recipes.len(), literal.len());
    for (recipe, copy) in family.recipes.iter().zip(&literal) {
        assert!(
            recipe.in_repository,
            "{}:{}: cp -rT {} {} is not covered by [[recipe_roots]] (resolved to {})",
            copy.launcher, copy.line, copy.folder, copy.destination, recipe.path
        );
    }
    // The rename is what the built-in `recipes/` rule alone would miss.
    let plain = Repository::open(dir.path()).unwrap();
    let missed: Vec<&str> = plain
        .family("probe")
        .unwrap()
        .recipes
        .iter()
        .filter(|r| !r.in_repository)
        .map(|r| r.setting.as_str())
        .collect();
    assert!(
        missed
            .iter()
            .any(|s| s.starts_with("recipes/trtllm/kimi-k25-nvfp4/b200-fp4/")),
        "{missed:?}"
    );
}
