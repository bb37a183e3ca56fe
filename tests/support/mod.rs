//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The repository root (the tests are compiled as part of `src/klaud`).
pub const REPO_ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// The shared InferenceX fixtures beside the checkout, or `None` (with a loud
/// message) when they are absent on a developer machine. On CI (`CI` set)
/// their absence is a failure.
pub fn inferencex_full() -> Option<PathBuf> {
    let path = Path::new(REPO_ROOT).join("../shared/fixtures/inferencex/full");
    if path.join("configs/nvidia-master.yaml").is_file() {
        return Some(path);
    }
    if std::env::var_os("CI").is_some() {
        panic!(
            "the shared InferenceX fixtures are missing at {}; CI must provide them",
            path.display()
        );
    }
    eprintln!(
        "\n*** SKIPPED: the shared InferenceX fixtures are not at {} — this test needs them ***\n",
        path.display()
    );
    None
}

/// Copies a directory tree (the fixtures are read-only; tests edit copies).
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
            let mut permissions = std::fs::metadata(&target).unwrap().permissions();
            #[allow(clippy::permissions_set_readonly_false)]
            permissions.set_readonly(false);
            std::fs::set_permissions(&target, permissions).unwrap();
        }
    }
}

/// Every file under `root`, relative path → bytes.
pub fn snapshot(root: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut files = std::collections::BTreeMap::new();
    fn walk(root: &Path, dir: &Path, files: &mut std::collections::BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                walk(root, &entry.path(), files);
            } else {
                let relative = entry
                    .path()
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                files.insert(relative, std::fs::read(entry.path()).unwrap());
            }
        }
    }
    walk(root, root, &mut files);
    files
}

/// The real InferenceX workflow files of one version (`843c6254`, `newer`)
/// beside the checkout, or `None` (with a loud message) when they are absent
/// on a developer machine. On CI (`CI` set) their absence is a failure.
pub fn inferencex_workflows(version: &str) -> Option<PathBuf> {
    let path = Path::new(REPO_ROOT)
        .join("../shared/fixtures/inferencex/workflows")
        .join(version);
    if path.join("run-sweep.yml").is_file() && path.join("e2e-tests.yml").is_file() {
        return Some(path);
    }
    if std::env::var_os("CI").is_some() {
        panic!(
            "the shared InferenceX workflow fixtures are missing at {}; CI must provide them",
            path.display()
        );
    }
    eprintln!(
        "\n*** SKIPPED: the shared InferenceX workflow fixtures are not at {} — this test needs them ***\n",
        path.display()
    );
    None
}
