//! `klaud families`: every config family of a checkout, with its identity,
//! image and platform.

use std::path::PathBuf;

use klaud_planner::repo::{Family, Repository};
use serde_json::json;

use super::CliError;
use crate::config::Config;

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
}

/// Runs the command.
pub fn run(args: Args) -> Result<(), CliError> {
    let config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    let repository = Repository::open_with(args.checkout.path()?, &config.repo_options())?;
    // Warnings go to stderr in both modes: stdout stays the table or the
    // JSON array of families.
    for warning in repository.warnings() {
        eprintln!("warning: {warning}");
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
        print_table(
            &["FAMILY", "ID", "IMAGE", "PLATFORM", "RECIPES", "GROUP"],
            &rows,
        );
        super::emit(&render_groups(&repository));
        eprintln!(
            "{} families, {} unreadable, {} groups, {} warnings{}",
            rows.len(),
            repository.unreadable().len(),
            repository.groups().len(),
            repository.warnings().len(),
            if repository.warnings().is_empty() {
                ""
            } else {
                " (above)"
            }
        );
    }
    Ok(())
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

/// Prints rows under a header, columns padded to their widest cell.
pub fn print_table<const N: usize>(header: &[&str; N], rows: &[[String; N]]) {
    super::emit(&render_table(header, rows));
}

/// Renders rows under a header, columns padded to their widest cell.
pub fn render_table<const N: usize>(header: &[&str; N], rows: &[[String; N]]) -> String {
    let mut out = String::new();
    let mut widths = header.map(str::len);
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(padded.join("  ").trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}
