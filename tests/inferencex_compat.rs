//! Compatibility suite over the real InferenceX data (a minimal checkout in
//! the shared fixtures): every family loads with the helper's ids, every
//! image round-trips, every bump changes exactly the image tokens.

use crate::support;

use std::collections::BTreeMap;

use klaud_planner::bump::BumpError;
use klaud_planner::changelog::{self, ChangelogEntry};
use klaud_planner::image::ImageRef;
use klaud_planner::repo::{Platform, Repository};
use sha2::{Digest, Sha256};

#[test]
fn all_208_families_load_with_the_helpers_ids() {
    let Some(full) = support::inferencex_full() else {
        return;
    };
    let repository = Repository::open(&full).unwrap();
    let families = repository.families();
    assert_eq!(families.len(), 208);
    assert_eq!(
        families
            .iter()
            .filter(|f| f.file == "configs/nvidia-master.yaml")
            .count(),
        152
    );
    assert_eq!(
        families
            .iter()
            .filter(|f| f.file == "configs/amd-master.yaml")
            .count(),
        56
    );
    for family in families {
        assert_eq!(family.family, format!("{}:{}", family.file, family.key));
        // Independent computation: sha256 of the JSON string, quotes included.
        let json = serde_json::to_string(&family.family).unwrap();
        let expected = hex::encode(Sha256::digest(json.as_bytes()));
        assert_eq!(family.id, expected[..16], "{}", family.family);
    }
    let id = |name: &str| repository.family(name).unwrap().id.clone();
    assert_eq!(
        id("configs/nvidia-master.yaml:dsr1-fp4-b200-sglang"),
        "d92e15065c55779d"
    );
    let grace = repository
        .family("dsv4-fp4-gb200-dynamo-vllm-agentic-mtp-disagg")
        .unwrap();
    assert_eq!(grace.platform, Platform::LinuxArm64);
    assert_eq!(
        repository.family("dsr1-fp4-b200-sglang").unwrap().platform,
        Platform::LinuxAmd64
    );
    let arm = families
        .iter()
        .filter(|f| f.platform == Platform::LinuxArm64)
        .count();
    assert!(
        families
            .iter()
            .filter(|f| f.platform == Platform::LinuxArm64)
            .all(|f| f.entry.runner.contains("gb200") || f.entry.runner.contains("gb300"))
    );
    assert!(arm > 0);
}

#[test]
fn every_image_round_trips() {
    let Some(full) = support::inferencex_full() else {
        return;
    };
    let repository = Repository::open(&full).unwrap();
    let master_text = std::fs::read_to_string(full.join("configs/nvidia-master.yaml")).unwrap()
        + &std::fs::read_to_string(full.join("configs/amd-master.yaml")).unwrap();
    let mut recipe_images = 0;
    for family in repository.families() {
        let printed = family.image().to_string();
        assert_eq!(ImageRef::parse(&printed).unwrap(), *family.image());
        assert!(
            master_text.contains(&format!("image: {printed}\n"))
                || master_text.contains(&format!("image: \"{printed}\"\n")),
            "{printed} is not spelled that way in the file"
        );
        for recipe in &family.recipes {
            for field in repository.recipe_images(recipe).unwrap() {
                recipe_images += 1;
                // Container aliases such as `dynamo-sglang` have no tag.
                if let Ok(image) = ImageRef::parse(&field.value) {
                    assert_eq!(image.to_string(), field.value);
                }
            }
        }
    }
    assert!(
        recipe_images > 300,
        "only {recipe_images} recipe image fields were read"
    );
}

#[test]
fn recipe_references_match_the_fixture_inventory() {
    let Some(full) = support::inferencex_full() else {
        return;
    };
    let repository = Repository::open(&full).unwrap();
    let mut in_repo = 0;
    let mut by_variable: BTreeMap<&str, usize> = BTreeMap::new();
    let mut selectors = 0;
    let mut same_image = 0;
    for family in repository.families() {
        for recipe in family.recipes.iter().filter(|r| r.in_repository) {
            in_repo += 1;
            *by_variable.entry(recipe.variable.as_str()).or_default() += 1;
            selectors += usize::from(recipe.selector.is_some());
            let images = repository.recipe_images(recipe).unwrap();
            let all_same = !images.is_empty()
                && images.iter().all(|i| {
                    ImageRef::parse(&i.value).is_ok_and(|image| image.same_image(family.image()))
                });
            same_image += usize::from(all_same);
        }
    }
    // 244 plain `CONFIG_FILE=recipes/…` references resolve to a file; six
    // more carry a `:zip_override_…[N]` selector, and five `EVAL_CONFIG_FILE`
    // references name the eval twins.
    assert_eq!(by_variable.get("CONFIG_FILE"), Some(&250));
    assert_eq!(selectors, 6);
    assert_eq!(by_variable.get("EVAL_CONFIG_FILE"), Some(&5));
    assert_eq!(in_repo, 255);
    assert_eq!(same_image, 214);
}

/// A different tag (and digest, when pinned) for every family's image.
fn next_image(image: &ImageRef) -> ImageRef {
    let tag = image.tag().map(|t| format!("{t}-next"));
    let digest = image.digest().map(|_| format!("sha256:{}", "0".repeat(64)));
    image
        .with_reference(tag.as_deref(), digest.as_deref())
        .unwrap()
}

#[test]
fn bumping_each_family_changes_only_its_image_tokens() {
    let Some(full) = support::inferencex_full() else {
        return;
    };
    let repository = Repository::open(&full).unwrap();
    let mut planned = 0;
    let mut shared = 0;
    for family in repository.families() {
        let to = next_image(family.image());
        let plan = match repository.plan_bump(&family.family, family.image(), &to) {
            Ok(plan) => plan,
            Err(BumpError::MixedGroup { members, .. }) => {
                assert!(!members.is_empty());
                shared += 1;
                continue;
            }
            Err(other) => panic!("{}: {other}", family.family),
        };
        planned += 1;
        assert_eq!(plan.edits[0].path, family.file);
        for edit in &plan.edits {
            let before = std::fs::read_to_string(full.join(&edit.path)).unwrap();
            assert_only_tokens_changed(&before, &edit.after, &edit.changes);
            for change in &edit.changes {
                assert!(change.new.contains(to.tag().unwrap()), "{change:?}");
            }
        }
        // The master edit re-reads to the new image.
        let master = &plan.edits[0];
        assert_eq!(master.changes.len(), plan.keys.len());
        assert!(master.changes.iter().any(|c| c.line == family.image_line));
    }
    assert_eq!(planned + shared, 208);
    assert!(
        planned > 190,
        "only {planned} families could be bumped ({shared} share recipes)"
    );
    eprintln!("{planned} families bumped, {shared} refused for shared recipes");
}

/// `after` equals `before` with each changed token replaced, and nothing else.
fn assert_only_tokens_changed(
    before: &str,
    after: &str,
    changes: &[klaud_planner::bump::TokenChange],
) {
    let mut expected = String::new();
    let mut rest = before;
    let before_lines: Vec<&str> = before.split_inclusive('\n').collect();
    let mut by_line: BTreeMap<usize, Vec<&klaud_planner::bump::TokenChange>> = BTreeMap::new();
    for change in changes {
        by_line.entry(change.line).or_default().push(change);
    }
    let _ = &mut rest;
    for (index, line) in before_lines.iter().enumerate() {
        let mut line = line.to_string();
        for change in by_line.get(&(index + 1)).into_iter().flatten() {
            assert_eq!(
                line.matches(&change.old).count(),
                1,
                "ambiguous token on line {}",
                index + 1
            );
            line = line.replacen(&change.old, &change.new, 1);
        }
        expected.push_str(&line);
    }
    assert_eq!(expected, after);
}

#[test]
fn a_multi_node_bump_writes_master_and_recipes_together() {
    let Some(full) = support::inferencex_full() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    support::copy_tree(&full, dir.path());
    let repository = Repository::open(dir.path()).unwrap();
    let family = repository
        .family("dsv4-fp4-gb200-dynamo-vllm-agentic-mtp-disagg")
        .unwrap();
    let to = next_image(family.image());
    let before = support::snapshot(dir.path());
    let plan = repository
        .plan_bump(&family.family, family.image(), &to)
        .unwrap();
    plan.write(dir.path()).unwrap();
    let after = support::snapshot(dir.path());
    let changed: Vec<&String> = before.keys().filter(|k| before[*k] != after[*k]).collect();
    assert_eq!(before.len(), after.len(), "no file appears or disappears");
    assert_eq!(changed.len(), plan.edits.len());
    assert!(changed.len() >= 3, "master plus its recipes: {changed:?}");
    assert!(
        changed
            .iter()
            .any(|p| p.ends_with("disagg-gb200-1p1d-dep8-dep8-mtp-agentic.yaml"))
    );
    let reread = Repository::open(dir.path()).unwrap();
    assert_eq!(reread.family(&family.family).unwrap().image(), &to);
}

#[test]
fn the_new_layout_bumps_the_same_way() {
    let Some(full) = support::inferencex_full() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    support::copy_tree(&full, &dir.path().join("inferencex-e2e"));
    let repository = Repository::open(dir.path()).unwrap();
    assert_eq!(repository.prefix(), "inferencex-e2e/");
    assert_eq!(repository.families().len(), 208);
    let family = repository
        .family("dsv4-fp4-gb200-dynamo-vllm-agentic-mtp-disagg")
        .unwrap();
    assert!(
        family.family.starts_with("configs/nvidia-master.yaml:"),
        "no prefix in the family"
    );
    let to = next_image(family.image());
    let mut plan = repository
        .plan_bump(&family.family, family.image(), &to)
        .unwrap();
    plan.add_changelog_entry(
        &repository,
        &ChangelogEntry {
            config_keys: vec![family.key.clone()],
            description: "Update the vLLM image.".into(),
            pr_link: "https://github.com/SemiAnalysisAI/InferenceX/pull/9999".into(),
        },
    )
    .unwrap();
    assert!(
        plan.paths()
            .iter()
            .all(|p| p.starts_with("inferencex-e2e/")),
        "{:?}",
        plan.paths()
    );
    plan.write(dir.path()).unwrap();
    let reread = Repository::open(dir.path()).unwrap();
    assert_eq!(reread.family(&family.family).unwrap().image(), &to);
}

#[test]
fn changelog_append_over_the_real_file_passes_the_validator() {
    let Some(full) = support::inferencex_full() else {
        return;
    };
    let base = std::fs::read(full.join("perf-changelog.yaml")).unwrap();
    let entry = ChangelogEntry {
        config_keys: vec!["dsr1-fp4-b200-sglang".into()],
        description: "Update the SGLang image from v0.5.16-cu130 to v0.5.17-cu130.".into(),
        pr_link: "https://github.com/SemiAnalysisAI/InferenceX/pull/3300".into(),
    };
    let head = changelog::append_entry(&base, &entry).unwrap();
    assert!(head.starts_with(&base));
    assert_eq!(changelog::validate_append(&base, &head), Ok(1));
    let second = changelog::append_entry(&head, &entry).unwrap();
    assert_eq!(changelog::validate_append(&base, &second), Ok(2));
    // The historical whitespace-only separators are still there, byte for byte.
    let tail = String::from_utf8(second[base.len() - 200..].to_vec()).unwrap();
    assert!(tail.contains("pull/3300\n\n- config-keys:"));
    let text = String::from_utf8(base).unwrap();
    assert!(
        text.contains("\n  \n- config-keys:"),
        "the fixture still has its irregular separators"
    );
}

#[test]
fn the_families_sharing_recipes_on_main_form_one_group_bumped_together() {
    let Some(full) = support::inferencex_full() else {
        return;
    };
    let repository = Repository::open(&full).unwrap();
    let groups = repository.groups();
    assert_eq!(groups.len(), 1, "{groups:?}");
    assert_eq!(
        groups[0].keys,
        [
            "dsv4-fp4-gb200-dynamo-vllm-mtp2",
            "dsv4-fp4-gb200-dynamo-vllm-mtp2-nosynthetic"
        ]
    );
    assert!(groups[0].same_image);
    for asked in &groups[0].keys {
        let family = repository.family(asked).unwrap();
        let to = next_image(family.image());
        let plan = repository
            .plan_bump(&family.family, family.image(), &to)
            .unwrap();
        assert_eq!(plan.keys, groups[0].keys);
        assert_eq!(plan.edits[0].changes.len(), 2, "both master entries");
    }
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_klaud"))
        .args(["families", "--checkout", full.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("with dsv4-fp4-gb200-dynamo-vllm-mtp2-nosynthetic"));
    assert!(stdout.contains(
        "group dsv4-fp4-gb200-dynamo-vllm-mtp2 + dsv4-fp4-gb200-dynamo-vllm-mtp2-nosynthetic (4 shared recipe(s)): bumped together in one commit"
    ));
}

#[test]
fn the_eval_twins_and_selector_recipes_on_main_are_bumped() {
    let Some(full) = support::inferencex_full() else {
        return;
    };
    let repository = Repository::open(&full).unwrap();
    let family = repository
        .family("minimaxm3-fp4-gb300-dynamo-vllm-agentic-mtp-disagg")
        .unwrap();
    let to = next_image(family.image());
    let plan = repository
        .plan_bump(&family.family, family.image(), &to)
        .unwrap();
    let evals = plan
        .paths()
        .iter()
        .filter(|p| p.ends_with("-eval-agentic.yaml"))
        .count();
    assert_eq!(evals, 5);
    let family = repository
        .family("glm5.2-fp4-gb200-dynamo-sglang-agentic-disagg")
        .unwrap();
    let plan = repository
        .plan_bump(&family.family, family.image(), &next_image(family.image()))
        .unwrap();
    assert!(
        plan.edits
            .iter()
            .any(|e| e.path.ends_with("glm5.2-agentx.yaml")
                && e.changes
                    .iter()
                    .any(|c| c.field == "base.identity.container.image")),
        "{:?}",
        plan.paths()
    );
}
