//! The crate layout's dependency rules (`src/README.md`), read from the
//! manifests themselves: a new edge between Klaud crates fails here before
//! it can blur which crate owns which rule.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each crate's folder and the Klaud crates its `[dependencies]` may name.
/// Dev-dependencies are free (tests may reach anything).
const ALLOWED: &[(&str, &[&str])] = &[
    ("src/http", &[]),
    // The escaping rule and bilingual texts every writer shares.
    ("src/render", &[]),
    ("src/workflows", &[]),
    ("claims", &[]),
    ("planner", &["klaud-http"]),
    // The sign-off rules are pure: the repository's files, no GitHub.
    ("src/signoff", &["klaud-planner", "klaud-render"]),
    (
        "lifecycle",
        &[
            "klaud-claims",
            "klaud-planner",
            "klaud-render",
            "klaud-workflows",
        ],
    ),
    (
        "src/store",
        &["klaud-lifecycle", "klaud-planner", "klaud-claims"],
    ),
    (
        "src/github",
        &[
            "klaud-planner",
            "klaud-claims",
            "klaud-lifecycle",
            "klaud-signoff",
            "klaud-workflows",
        ],
    ),
    (
        "src/service",
        &[
            "klaud-http",
            "klaud-planner",
            "klaud-claims",
            "klaud-lifecycle",
            "klaud-github",
            "klaud-render",
            "klaud-signoff",
            "klaud-store",
            "klaud-workflows",
        ],
    ),
    // The simulators read repository files like any GitHub would; nothing
    // else of Klaud.
    ("src/sandbox", &["klaud-planner", "klaud-workflows"]),
    (
        "src/klaud",
        &[
            "klaud-http",
            "klaud-planner",
            "klaud-claims",
            "klaud-lifecycle",
            "klaud-github",
            "klaud-signoff",
            "klaud-store",
            "klaud-service",
            "klaud-sandbox",
            "klaud-workflows",
        ],
    ),
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .expect("src/klaud sits two folders below the workspace root")
}

fn manifest(dir: &str) -> toml::Table {
    let path = root().join(dir).join("Cargo.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    text.parse()
        .unwrap_or_else(|e| panic!("{path:?} is not TOML: {e}"))
}

fn klaud_deps(table: &toml::Table, section: &str) -> BTreeMap<String, bool> {
    table
        .get(section)
        .and_then(toml::Value::as_table)
        .map(|deps| {
            deps.iter()
                .filter(|(name, _)| name.starts_with("klaud"))
                .map(|(name, spec)| {
                    let optional = spec
                        .get("optional")
                        .and_then(toml::Value::as_bool)
                        .unwrap_or(false);
                    (name.clone(), optional)
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn every_workspace_member_is_listed_here() {
    let workspace = manifest(".");
    let members: BTreeSet<&str> = workspace["workspace"]["members"]
        .as_array()
        .expect("members")
        .iter()
        .filter_map(toml::Value::as_str)
        .collect();
    let listed: BTreeSet<&str> = ALLOWED.iter().map(|(dir, _)| *dir).collect();
    assert_eq!(
        members, listed,
        "a new crate needs its allowed dependencies in tests/layout.rs and src/README.md"
    );
}

#[test]
fn klaud_crates_depend_only_as_the_layout_allows() {
    for (dir, allowed) in ALLOWED {
        let deps = klaud_deps(&manifest(dir), "dependencies");
        let extra: Vec<&String> = deps
            .keys()
            .filter(|name| !allowed.contains(&name.as_str()))
            .collect();
        assert!(
            extra.is_empty(),
            "{dir}/Cargo.toml depends on {extra:?}; src/README.md says which crate owns what"
        );
    }
}

#[test]
fn only_the_binary_reaches_the_sandbox_and_only_behind_its_feature() {
    for (dir, _) in ALLOWED {
        let table = manifest(dir);
        let deps = klaud_deps(&table, "dependencies");
        match (*dir, deps.get("klaud-sandbox")) {
            (_, None) => {}
            ("src/klaud", Some(optional)) => {
                assert!(optional, "klaud-sandbox must be optional in src/klaud");
                let default: Vec<&str> = table["features"]["default"]
                    .as_array()
                    .expect("default features")
                    .iter()
                    .filter_map(toml::Value::as_str)
                    .collect();
                assert_eq!(
                    default,
                    ["sandbox"],
                    "the sandbox is the one default feature"
                );
                assert_eq!(
                    table["features"]["sandbox"]
                        .as_array()
                        .expect("sandbox feature")[0]
                        .as_str(),
                    Some("dep:klaud-sandbox"),
                );
            }
            (other, Some(_)) => panic!("{other} must not depend on klaud-sandbox"),
        }
    }
}

#[test]
fn planner_claims_and_signoff_know_nothing_of_github() {
    for dir in ["planner", "claims", "src/signoff"] {
        let table = manifest(dir);
        let deps = table
            .get("dependencies")
            .and_then(toml::Value::as_table)
            .expect("dependencies");
        for forbidden in ["octocrab", "klaud-github", "jsonwebtoken"] {
            assert!(
                !deps.contains_key(forbidden),
                "{dir} depends on {forbidden}"
            );
        }
    }
}
