//! `klaud families`: every config family of a checkout, with its identity,
//! image and platform.

use std::path::PathBuf;

use klaud_planner::repo::{Family, Repository};
use serde_json::json;

use super::CliError;

/// Arguments of `klaud families`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Path of the benchmark repository checkout.
    #[arg(long, value_name = "PATH", default_value = ".")]
    repo: PathBuf,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs the command.
pub fn run(args: Args) -> Result<(), CliError> {
    let repository = Repository::open(&args.repo)?;
    for warning in repository.warnings() {
        tracing::debug!(%warning, "repository warning");
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
        let rows: Vec<[String; 4]> = repository
            .families()
            .iter()
            .map(|f| {
                [
                    f.family.clone(),
                    f.id.clone(),
                    f.image().to_string(),
                    f.platform.to_string(),
                ]
            })
            .collect();
        print_table(&["FAMILY", "ID", "IMAGE", "PLATFORM"], &rows);
        eprintln!(
            "{} families, {} warnings (see --json or RUST_LOG=debug)",
            rows.len(),
            repository.warnings().len()
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
                "setting": recipe.setting,
                "path": recipe.path,
                "in_repository": recipe.in_repository,
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
    }))
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
