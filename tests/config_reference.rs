//! The configuration reference (`configs/README.md`, "Configuration keys")
//! cannot drift from the configuration types: every key a configuration
//! struct accepts has a row, every row names a key that exists, and every
//! documented default is a value the loader accepts for that key.

use std::collections::BTreeSet;
use std::path::Path;

use klaud::config::{
    AuditConfig, CapacityConfig, Config, CredentialEnv, DaemonConfig, ExperimentConfig,
    GithubConfig, LifecycleConfig, PlannerConfig, RecipeRootConfig, RegistryConfig,
    ReleaseTrackConfig, TrackConfig, VariantConfig,
};
use klaud_planner::audit::{DefinitionRule, EngineDefinitions};
use serde::de::{self, Deserializer, Visitor};

/// A deserializer that only asks for a struct's field names (serde passes
/// them to `deserialize_struct`) and then stops.
struct FieldNames<'a>(&'a mut Vec<&'static str>);

impl<'de> Deserializer<'de> for FieldNames<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.extend(fields);
        Err(de::Error::custom("fields recorded"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

fn fields<'de, T: serde::Deserialize<'de>>() -> Vec<&'static str> {
    let mut names = Vec::new();
    let _ = T::deserialize(FieldNames(&mut names));
    assert!(
        !names.is_empty(),
        "{} is not a struct",
        std::any::type_name::<T>()
    );
    names
}

/// Every key the configuration types accept, spelled as the reference
/// spells them (`section.key`, `list[].key`, `map.*.key`).
fn accepted_keys() -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let mut add = |prefix: &str, names: Vec<&'static str>| {
        for name in names {
            keys.insert(format!("{prefix}{name}"));
        }
    };
    add("github.", fields::<GithubConfig>());
    add("planner.", fields::<PlannerConfig>());
    add("registry.", fields::<RegistryConfig>());
    add("registry.credentials.*.", fields::<CredentialEnv>());
    add("tracks[].", fields::<TrackConfig>());
    add("release_tracks[].", fields::<ReleaseTrackConfig>());
    add("daemon.", fields::<DaemonConfig>());
    add("lifecycle.", fields::<LifecycleConfig>());
    add("recipe_roots[].", fields::<RecipeRootConfig>());
    add("bump.", fields::<klaud::config::BumpConfig>());
    add("capacity.", fields::<CapacityConfig>());
    add("audit.", fields::<AuditConfig>());
    add("audit.engines[].", fields::<EngineDefinitions>());
    add("audit.engines[].rules[].", fields::<DefinitionRule>());
    add("experiments[].", fields::<ExperimentConfig>());
    add("experiments[].variants[].", fields::<VariantConfig>());
    add("signoff.", fields::<klaud::config::SignoffConfig>());
    add("ignore[].", fields::<klaud::config::IgnoreConfig>());
    add("hunt.", fields::<klaud::config::HuntConfig>());
    // Sections whose members are rows of their own are not rows; a table
    // keyed by the user (`upstream`) is.
    let sections: BTreeSet<String> = keys
        .iter()
        .filter_map(|k| k.split(['.', '[']).next().map(str::to_owned))
        .collect();
    for top in fields::<Config>() {
        assert!(
            sections.contains(top) || top == "upstream",
            "the top-level section {top:?} is not covered by this test; add its struct"
        );
    }
    keys.insert("upstream".to_owned());
    // Lists of tables are documented by their members' rows.
    for nested in [
        "audit.engines",
        "audit.engines[].rules",
        "experiments[].variants",
    ] {
        keys.remove(nested);
    }
    keys
}

/// The rows of the reference table: key → default cell.
fn documented() -> Vec<(String, String)> {
    let text =
        std::fs::read_to_string(Path::new(crate::support::REPO_ROOT).join("configs/README.md"))
            .unwrap();
    let start = text
        .find("### Configuration keys")
        .expect("configs/README.md has a \"Configuration keys\" section");
    let section = &text[start..];
    let section = &section[..section[4..]
        .find("\n#")
        .map_or(section.len(), |end| end + 4)];
    section
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split(" | ").collect();
            let key = cells.first()?.strip_prefix("| `")?.strip_suffix('`')?;
            Some((key.to_owned(), cells.get(1)?.trim().to_owned()))
        })
        .collect()
}

#[test]
fn every_configuration_key_is_documented_and_every_documented_key_exists() {
    let accepted = accepted_keys();
    let rows = documented();
    let documented: BTreeSet<String> = rows.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(rows.len(), documented.len(), "a key has two rows");
    let missing: Vec<&String> = accepted.difference(&documented).collect();
    let unknown: Vec<&String> = documented.difference(&accepted).collect();
    assert!(
        missing.is_empty(),
        "accepted but not in configs/README.md: {missing:?}"
    );
    assert!(
        unknown.is_empty(),
        "in configs/README.md but not accepted: {unknown:?}"
    );
}

#[test]
fn every_documented_default_of_a_section_key_loads() {
    let mut checked = 0;
    for (key, default) in documented() {
        let Some((section, name)) = key.split_once('.') else {
            continue;
        };
        // Keys of lists and maps need their siblings; their defaults are
        // checked where the loader's own tests build whole entries.
        if section.contains('[') || name.contains('.') {
            continue;
        }
        let Some(value) = default.strip_prefix('`').and_then(|d| d.strip_suffix('`')) else {
            continue;
        };
        let mut text = format!("[{section}]\n{name} = {value}\n");
        if section == "capacity" && name != "origin" {
            text.push_str("origin = \"https://dashboard.example\"\n");
        }
        Config::parse("reference", &text).unwrap_or_else(|e| {
            panic!("the documented default of {key}, {value}, does not load: {e}")
        });
        checked += 1;
    }
    assert!(checked > 40, "only {checked} defaults checked");
}

/// GitHub's anchor for a Markdown heading: lower case, punctuation other
/// than `-` and `_` dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn code_comments_cite_sections_that_exist_in_the_repository() {
    let root = Path::new(crate::support::REPO_ROOT);
    let readme = std::fs::read_to_string(root.join("configs/README.md")).unwrap();
    let anchors: BTreeSet<String> = readme
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect();
    let mut files = Vec::new();
    for dir in ["planner", "lifecycle", "claims", "src", "tests"] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 50);
    let cite = regex::Regex::new(r"configs/README\.md#([A-Za-z0-9_-]+)").unwrap();
    // Written apart so this file does not match its own search.
    let outside = format!("spec {}", '§');
    let mut problems = Vec::new();
    let mut cited = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.contains(&outside) {
                problems.push(format!(
                    "{}:{}: cites the spec, which is not in the repository",
                    file.display(),
                    n + 1
                ));
            }
            for found in cite.captures_iter(line) {
                cited += 1;
                if !anchors.contains(&found[1]) {
                    problems.push(format!(
                        "{}:{}: no heading for #{}",
                        file.display(),
                        n + 1,
                        &found[1]
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(
        cited > 20,
        "only {cited} citations of configs/README.md found"
    );
}
