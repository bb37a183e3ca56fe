//! Byte-exact replay of real historic InferenceX image bumps.
//!
//! Each case under `tests/replay/<key>/` holds excerpts of the real files as
//! a maintainer wrote them at the new image (`expected/`) and the same bytes
//! at the old image (`base/`); `generate.py` there says how they were made.
//! Klaud's bump of the base must give the expected bytes exactly, and must
//! leave every other file alone.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use klaud_planner::image::ImageRef;
use klaud_planner::repo::Repository;

fn files(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let relative = path.strip_prefix(root).unwrap().display().to_string();
                out.insert(relative, std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

struct Case {
    dir: PathBuf,
    family: String,
    from: String,
    to: String,
    keys: Vec<String>,
}

fn cases() -> Vec<Case> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/replay");
    let mut cases: Vec<Case> = std::fs::read_dir(&root)
        .unwrap()
        .filter_map(|e| {
            let dir = e.unwrap().path();
            let text = std::fs::read_to_string(dir.join("case.json")).ok()?;
            let case: serde_json::Value = serde_json::from_str(&text).unwrap();
            let field = |name: &str| case[name].as_str().unwrap().to_owned();
            Some(Case {
                family: field("family"),
                from: field("from"),
                to: field("to"),
                keys: case["keys"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|k| k.as_str().unwrap().to_owned())
                    .collect(),
                dir,
            })
        })
        .collect();
    cases.sort_by(|a, b| a.family.cmp(&b.family));
    cases
}

fn write_tree(files: &BTreeMap<String, Vec<u8>>, root: &Path) {
    for (path, bytes) in files {
        let target = root.join(path);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::write(target, bytes).unwrap();
    }
}

#[test]
fn historic_bumps_are_reproduced_byte_for_byte() {
    let cases = cases();
    assert!(cases.len() >= 20, "only {} replay cases", cases.len());
    let (mut eval, mut selector, mut group, mut recipes) = (false, false, false, 0);
    for case in &cases {
        let base = files(&case.dir.join("base"));
        let expected = files(&case.dir.join("expected"));
        assert_eq!(
            base.keys().collect::<Vec<_>>(),
            expected.keys().collect::<Vec<_>>(),
            "{}: base and expected name the same files",
            case.family
        );
        let dir = tempfile::tempdir().unwrap();
        write_tree(&base, dir.path());
        let repository = Repository::open(dir.path()).unwrap();
        let from = ImageRef::parse(&case.from).unwrap();
        let to = ImageRef::parse(&case.to).unwrap();
        let plan = repository
            .plan_bump(&case.family, &from, &to)
            .unwrap_or_else(|e| panic!("{}: {e}", case.family));
        assert_eq!(plan.keys, case.keys, "{}", case.family);
        plan.write(dir.path()).unwrap();
        let after = files(dir.path());
        for (path, want) in &expected {
            let got = &after[path];
            assert!(
                got == want,
                "{}: {path} differs from what the maintainer wrote:\n--- got\n{}\n--- want\n{}",
                case.family,
                String::from_utf8_lossy(got),
                String::from_utf8_lossy(want)
            );
        }
        assert_eq!(
            after.len(),
            expected.len(),
            "{}: no file appears",
            case.family
        );
        let changed: Vec<&String> = base.keys().filter(|p| base[*p] != expected[*p]).collect();
        assert_eq!(
            plan.paths().len(),
            changed.len(),
            "{}: exactly the changed files are edited",
            case.family
        );
        for name in &case.keys {
            let family = repository.family(name).unwrap();
            for recipe in family.recipes.iter().filter(|r| r.in_repository) {
                recipes += 1;
                let edited = plan.paths().contains(&recipe.path.as_str());
                eval |= recipe.variable == "EVAL_CONFIG_FILE" && edited;
                selector |= recipe.selector.is_some() && edited;
            }
        }
        group |= case.keys.len() > 1;
    }
    assert!(eval, "an EVAL_CONFIG_FILE case");
    assert!(selector, "a selector case");
    assert!(group, "a group case");
    eprintln!(
        "{} historic bumps replayed, {recipes} recipe references",
        cases.len()
    );
}
