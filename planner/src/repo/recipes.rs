//! The recipes a master entry runs: their settings and where each resolves
//! among the recipe roots.

use super::*;

/// Splits `NAME=value` when NAME is `CONFIG_FILE` or ends in `_CONFIG_FILE`
/// (`EVAL_CONFIG_FILE`, …): every recipe variable the launchers read.
pub fn recipe_setting(text: &str) -> Option<(&str, &str)> {
    let (name, value) = text.trim().split_once('=')?;
    let is_recipe_variable = name == "CONFIG_FILE"
        || name.strip_suffix("_CONFIG_FILE").is_some_and(|head| {
            !head.is_empty()
                && head
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        });
    is_recipe_variable.then(|| (name, value.trim()))
}

/// Calls `found` for every recipe setting string in the entry (they sit in
/// `additional-settings` lists at any depth).
pub(super) fn collect_recipe_settings(
    node: &Node,
    found: &mut dyn FnMut(&Node, &str, &str) -> Result<(), RepoError>,
) -> Result<(), RepoError> {
    if let Some(text) = node.as_scalar() {
        if let Some((variable, value)) = recipe_setting(text) {
            found(node, variable, value)?;
        }
    } else if let Some(items) = node.as_sequence() {
        for item in items {
            collect_recipe_settings(item, found)?;
        }
    } else if let Some(entries) = node.as_mapping() {
        for (_, value) in entries {
            collect_recipe_settings(value, found)?;
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub(super) fn resolve_recipe(
    root: &Path,
    prefix: &str,
    options: &RepoOptions,
    path: &str,
    family: &str,
    line: usize,
    variable: &str,
    setting: &str,
) -> Result<RecipeRef, RepoError> {
    let escapes = || RepoError::RecipeEscapes {
        path: path.to_owned(),
        line,
        family: family.to_owned(),
        setting: setting.to_owned(),
    };
    // The launchers run `${CONFIG_FILE%%:*}`: everything from the first `:`
    // on selects an override inside the file, it is not part of the path.
    let (file_part, selector) = match setting.split_once(':') {
        Some((file, selector)) => (file, Some(selector.to_owned())),
        None => (setting, None),
    };
    // `recipes/<path>` is the srt-slurm convention; some entries spell the
    // project-relative directory out; configured roots map the names
    // launchers copy folders to (`cp -rT`). Anything else names a recipe kept
    // outside the repository (e.g. llm-d's own files).
    let recipes_dir_prefix = format!("{RECIPES_DIR}/");
    let configured = options
        .recipe_roots
        .iter()
        .filter_map(|r| {
            let wanted = r.prefix.trim_end_matches('/');
            let rest = file_part.strip_prefix(wanted)?;
            let rest = if rest.is_empty() {
                rest
            } else {
                rest.strip_prefix('/')?
            };
            Some((r, rest))
        })
        .max_by_key(|(r, _)| r.prefix.trim_end_matches('/').len());
    // (folder, path below it, authoritative: only the repository fills it)
    let (folder, relative, authoritative, via_root) = match configured {
        Some((r, rest)) => (
            r.folder.trim_end_matches('/').to_owned(),
            rest,
            true,
            Some(r.prefix.clone()),
        ),
        None => match file_part.strip_prefix("recipes/") {
            Some(rest) => (RECIPES_DIR.to_owned(), rest, false, None),
            None => match file_part.strip_prefix(&recipes_dir_prefix) {
                Some(rest) => (RECIPES_DIR.to_owned(), rest, true, None),
                None => {
                    return Ok(RecipeRef {
                        variable: variable.to_owned(),
                        setting: setting.to_owned(),
                        selector,
                        path: file_part.to_owned(),
                        in_repository: false,
                        missing: false,
                        root: None,
                        line,
                    });
                }
            },
        },
    };
    // Lexical normalization: the path must stay under its folder before the
    // file system is asked, so a missing file can't hide an escape.
    let mut parts: Vec<&str> = Vec::new();
    for component in Path::new(relative).components() {
        match component {
            Component::Normal(part) => parts.push(part.to_str().ok_or_else(escapes)?),
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop().ok_or_else(escapes)?;
            }
            Component::RootDir | Component::Prefix(_) => return Err(escapes()),
        }
    }
    if parts.is_empty() {
        return Err(escapes());
    }
    let repo_path = format!("{prefix}{folder}/{}", parts.join("/"));
    let full = root.join(&repo_path);
    let in_repository = full.is_file();
    if in_repository {
        // A symlink could still point outside; compare canonical paths.
        let inside = match (full.canonicalize(), root.canonicalize()) {
            (Ok(file), Ok(root)) => file.starts_with(root),
            _ => false,
        };
        if !inside {
            return Err(escapes());
        }
    }
    Ok(RecipeRef {
        variable: variable.to_owned(),
        setting: setting.to_owned(),
        selector,
        path: repo_path,
        in_repository,
        missing: authoritative && !in_repository,
        root: via_root,
        line,
    })
}
