//! `klaud families`: every config family of a checkout, with its identity,
//! image and platform.

use std::path::PathBuf;

use klaud_planner::repo::{Family, Repository, Unreadable, Warning, WarningKind};
use serde_json::json;

use super::CliError;

/// Arguments of `klaud families`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    checkout: super::LocalCheckout,
    /// Configuration file (`klaud.toml`), for `[[recipe_roots]]`.
    #[arg(long, value_name = "FILE", env = "KLAUD_CONFIG")]
    config: Option<PathBuf>,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    json: bool,
    /// List every warning with its file and line (default: counts by kind).
    #[arg(short, long)]
    verbose: bool,
    /// Exit 0 even when some families (or whole master files) could not be
    /// read; by default that fails a CI gate. Each is named either way.
    #[arg(long, visible_alias = "allow-unreadable")]
    allow_unresolved: bool,
}

/// Runs the command.
pub fn run(args: Args) -> Result<(), CliError> {
    let config = super::load_config(args.config.as_deref(), args.checkout.path()?)?;
    let repository = Repository::open_with(args.checkout.path()?, &config.repo_options())?;
    // Warnings go to stderr in both modes: stdout stays the table or the
    // JSON array of families. A real repository repeats a few kinds a
    // couple of hundred times, so by default each kind is one line.
    let quiet = super::output::quiet() && !args.verbose;
    if args.verbose {
        for warning in repository.warnings() {
            eprintln!("warning: {warning}");
        }
    } else if !quiet {
        eprint!("{}", warning_summary(repository.warnings()));
    }
    // An unreadable family is named with its file and line; the others are
    // listed as usual.
    for broken in repository.unreadable() {
        eprintln!("error: {broken}");
    }
    if args.json {
        let rows = repository
            .families()
            .iter()
            .map(|family| family_json(&repository, family))
            .collect::<Result<Vec<_>, CliError>>()?;
        let mut text = serde_json::to_string_pretty(&rows).map_err(anyhow::Error::from)?;
        text.push('\n');
        super::emit(&text);
    } else {
        let rows: Vec<[String; 6]> = repository
            .families()
            .iter()
            .map(|f| {
                let in_repo = f.recipes.iter().filter(|r| r.in_repository).count();
                let missing = f.recipes.iter().filter(|r| r.missing).count();
                [
                    f.family.clone(),
                    f.id.clone(),
                    f.image().to_string(),
                    f.platform.to_string(),
                    match (f.recipes.len(), missing) {
                        (0, _) => "-".to_owned(),
                        (all, 0) => format!("{in_repo}/{all}"),
                        (all, missing) => format!("{in_repo}/{all}, {missing} missing"),
                    },
                    group_cell(&repository, &f.family),
                ]
            })
            .collect();
        // Quiet: only the count line below.
        if quiet {
        } else if super::output::table_width().is_none() {
            super::emit(&render_table(
                &["FAMILY", "ID", "IMAGE", "PLATFORM", "RECIPES", "GROUP"],
                &rows,
            ));
            super::emit(&render_groups(&repository));
        } else {
            super::emit(&narrow_table(&rows));
            super::emit(&render_groups(&repository));
        }
        eprintln!(
            "{} families, {} unreadable, {} groups, {} warnings{}",
            rows.len(),
            repository.unreadable().len(),
            repository.groups().len(),
            repository.warnings().len(),
            match (repository.warnings().is_empty(), args.verbose, quiet) {
                (true, _, _) => "",
                (false, true, _) => " (above)",
                (false, false, true) => " (-v lists each)",
                (false, false, false) => " (above by kind; -v lists each)",
            }
        );
    }
    unreadable_gate(repository.unreadable(), args.allow_unresolved)
}

/// After a command that reads the repository (`families`, `bump`): exit 1
/// when a family or a whole master file could not be read, naming each, so
/// that a CI gate does not pass over hidden families; `--allow-unresolved`
/// makes it a warning.
pub fn unreadable_gate(unreadable: &[Unreadable], allow: bool) -> Result<(), CliError> {
    let Some(summary) = unreadable_summary(unreadable) else {
        return Ok(());
    };
    if allow {
        eprintln!("warning: {summary} (tolerated by --allow-unresolved)");
        return Ok(());
    }
    Err(CliError::failure(anyhow::anyhow!(
        "{summary}; each is named above with its file and line (--allow-unresolved accepts this)"
    )))
}

/// `2 unreadable: configs/a-master.yaml:k, configs/b-master.yaml`: what
/// could not be read, each family (or whole file) by name.
pub fn unreadable_summary(unreadable: &[Unreadable]) -> Option<String> {
    if unreadable.is_empty() {
        return None;
    }
    let names: Vec<&str> = unreadable.iter().map(|u| u.family.as_str()).collect();
    Some(format!(
        "{} unreadable: {}",
        unreadable.len(),
        names.join(", ")
    ))
}

/// Warning kinds with their count and first warning, most frequent first.
fn by_kind(warnings: &[Warning]) -> Vec<(WarningKind, usize, &Warning)> {
    let mut by_kind: std::collections::BTreeMap<WarningKind, (usize, &Warning)> =
        std::collections::BTreeMap::new();
    for warning in warnings {
        by_kind.entry(warning.kind).or_insert((0, warning)).0 += 1;
    }
    let mut kinds: Vec<_> = by_kind
        .into_iter()
        .map(|(kind, (count, first))| (kind, count, first))
        .collect();
    kinds.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    kinds
}

/// `207 external recipe, not edited; 8 runner not listed …`: the counts
/// on one line.
pub fn warning_counts(warnings: &[Warning]) -> String {
    by_kind(warnings)
        .into_iter()
        .map(|(kind, count, _)| format!("{count} {}", kind.describe()))
        .collect::<Vec<_>>()
        .join("; ")
}

/// One line per warning kind with its count and a first example, most
/// frequent first.
pub fn warning_summary(warnings: &[Warning]) -> String {
    let mut out = String::new();
    for (kind, count, first) in by_kind(warnings) {
        out.push_str(&format!(
            "warning: {count} x {} (e.g. {first})\n",
            kind.describe()
        ));
    }
    out
}

fn family_json(repository: &Repository, family: &Family) -> Result<serde_json::Value, CliError> {
    let recipes = family
        .recipes
        .iter()
        .map(|recipe| {
            Ok(json!({
                "variable": recipe.variable,
                "setting": recipe.setting,
                "selector": recipe.selector,
                "path": recipe.path,
                "in_repository": recipe.in_repository,
                "missing": recipe.missing,
                "root": recipe.root,
                "line": recipe.line,
                "images": repository.recipe_images(recipe)?,
            }))
        })
        .collect::<Result<Vec<_>, CliError>>()?;
    Ok(json!({
        "family": family.family,
        "id": family.id,
        "key": family.key,
        "file": family.file,
        "line": family.line,
        "image": family.image().to_string(),
        "normalized_image": family.image().normalized(),
        "platform": family.platform,
        "runner": family.entry.runner,
        "framework": family.entry.framework,
        "multinode": family.entry.multinode,
        "recipes": recipes,
        "group": repository.group_of(&family.family),
    }))
}

/// The table in 100 columns: two long identifiers (the family string and
/// the image) share them, so the id (in `--wide` and `--json`) is left
/// out and a family's group goes on a line of its own under it.
fn narrow_table(rows: &[[String; 6]]) -> String {
    use super::table::Fit;
    let rows: Vec<[String; 5]> = rows
        .iter()
        .map(|[family, _id, image, platform, recipes, group]| {
            [
                family.clone(),
                image.clone(),
                platform.clone(),
                recipes.clone(),
                group.clone(),
            ]
        })
        .collect();
    super::output::table_fitted(
        &["FAMILY", "IMAGE", "PLATFORM", "RECIPES", "GROUP"],
        &[Fit::Tail, Fit::Elide, Fit::Keep, Fit::Keep, Fit::Below],
        &rows,
    )
}

/// The GROUP cell: the other members' keys, and `mixed images` when they
/// cannot be bumped together.
fn group_cell(repository: &Repository, family: &str) -> String {
    match repository.group_of(family) {
        None => "-".to_owned(),
        Some(group) => {
            let others: Vec<&str> = group
                .families
                .iter()
                .zip(&group.keys)
                .filter(|(f, _)| *f != family)
                .map(|(_, k)| k.as_str())
                .collect();
            let mixed = if group.same_image {
                ""
            } else {
                " (mixed images)"
            };
            format!("with {}{mixed}", others.join(", "))
        }
    }
}

/// One paragraph per group: members, shared recipes and what a bump does.
pub fn render_groups(repository: &Repository) -> String {
    let mut out = String::new();
    for group in repository.groups() {
        out.push_str(&format!(
            "\ngroup {} ({} shared recipe(s)): {}\n",
            group.keys.join(" + "),
            group.shared_recipes.len(),
            if group.same_image {
                "bumped together in one commit"
            } else {
                "members run different images; align them (klaud bump --align) before they can be bumped"
            }
        ));
        for (key, image) in group.keys.iter().zip(&group.images) {
            out.push_str(&format!("  {key}  {image}\n"));
        }
    }
    out
}

/// Renders rows under a header, columns padded to their widest cell and
/// two spaces apart, without trailing blanks, fitted into 100 columns
/// unless `--wide` (see [`super::table`]).
pub fn render_table<R: AsRef<[String]>>(header: &[&str], rows: &[R]) -> String {
    super::output::table(header, rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warning(kind: WarningKind, line: usize) -> Warning {
        Warning {
            kind,
            location: format!("configs/x-master.yaml:{line}"),
            message: format!("finding {line}"),
        }
    }

    #[test]
    fn warnings_are_summarised_by_kind_most_frequent_first_with_one_example() {
        let warnings = [
            warning(WarningKind::UnknownField, 1),
            warning(WarningKind::ExternalRecipe, 2),
            warning(WarningKind::ExternalRecipe, 3),
            warning(WarningKind::ExternalRecipe, 4),
        ];
        assert_eq!(
            warning_summary(&warnings),
            "warning: 3 x external recipe, not edited (e.g. configs/x-master.yaml:2: finding 2)\n\
             warning: 1 x unknown master entry field kept as is (e.g. configs/x-master.yaml:1: finding 1)\n"
        );
        assert_eq!(warning_summary(&[]), "");
        assert_eq!(
            warning_counts(&warnings),
            "3 external recipe, not edited; 1 unknown master entry field kept as is"
        );
    }
}
