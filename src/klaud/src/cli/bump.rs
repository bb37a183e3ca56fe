//! `klaud bump`: apply Klaud's exact image edit to a local checkout.

use std::path::PathBuf;

use klaud_planner::bump::DisagreePolicy;
use klaud_planner::changelog::{ChangelogEntry, MAX_DESCRIPTION_CHARS};
use klaud_planner::image::ImageRef;
use klaud_planner::repo::Repository;

use super::CliError;

/// Arguments of `klaud bump`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    checkout: super::LocalCheckout,
    /// Configuration file (`klaud.toml`): `[[recipe_roots]]`, `[bump]` and
    /// `github.repository` (whose pull requests `--pr-link` must name).
    #[arg(long, value_name = "FILE", env = "KLAUD_CONFIG")]
    config: Option<PathBuf>,
    /// The family: `configs/<x>-master.yaml:<key>`, just the key, or its
    /// 16-hex family id (the forms `klaud claims --family` takes).
    #[arg(long)]
    family: String,
    /// The new image, e.g. `lmsysorg/sglang:v0.5.17-cu130@sha256:<digest>`.
    #[arg(long, value_name = "IMAGE")]
    to: String,
    /// Also append the perf-changelog entry with this pull request link.
    #[arg(long, value_name = "URL")]
    pr_link: Option<String>,
    /// The changelog sentence (at most 120 characters); generated when absent.
    /// It may start with `-`.
    #[arg(
        long,
        value_name = "TEXT",
        requires = "pr_link",
        allow_hyphen_values = true
    )]
    description: Option<String>,
    /// Also set recipe image fields that disagree with the master to the new
    /// image (overrides `[bump] disagreeing_recipes`).
    #[arg(long)]
    align: bool,
    /// Validate and show what would change, writing nothing.
    #[arg(long)]
    check: bool,
    /// Exit 0 even when other families (or whole master files) could not be
    /// read; by default the bump is made and the command then exits 1
    /// naming each, so that a CI gate notices the hidden families.
    #[arg(long, visible_alias = "allow-unreadable")]
    allow_unresolved: bool,
}

/// Runs the command.
pub fn run(args: Args) -> Result<(), CliError> {
    let config = super::load_config(args.config.as_deref(), args.checkout.path()?)?;
    let repository = Repository::open_with(args.checkout.path()?, &config.repo_options())?;
    let family = repository.family(&args.family)?;
    let to = ImageRef::parse(&args.to).map_err(|e| anyhow::anyhow!("--to: {e}"))?;
    let mut options = config.bump_options();
    if args.align {
        options.disagreeing = DisagreePolicy::Align;
    }
    let mut plan = repository.plan_bump_with(&family.family, family.image(), &to, &options)?;
    if let Some(pr_link) = args.pr_link {
        let description = match args.description {
            Some(text) => text,
            None => default_description(&family.entry.framework, family.image(), &to)?,
        };
        // A group bump is one change: one entry naming every member.
        let entry = ChangelogEntry {
            config_keys: plan.keys.clone(),
            description,
            pr_link,
        };
        plan.add_changelog_entry_in(&repository, &entry, config.github.repository.as_deref())?;
    }
    for warning in &plan.warnings {
        eprintln!("warning: {warning}");
    }
    if !args.check {
        plan.write(repository.root()).map_err(|e| match e {
            klaud_planner::bump::BumpError::Write { .. } => CliError::failure(e),
            other => CliError::bad_input(other),
        })?;
    }
    let verb = if args.check {
        "would change"
    } else {
        "changed"
    };
    let mut out = String::new();
    if plan.families.len() > 1 {
        out.push_str(&format!(
            "group bump (shared recipes): {}\n",
            plan.keys.join(", ")
        ));
    }
    for edit in &plan.edits {
        out.push_str(&format!("{verb} {}\n", edit.path));
        for change in &edit.changes {
            out.push_str(&format!(
                "  line {}: {}: {} -> {}{}\n",
                change.line,
                change.field,
                change.old,
                change.new,
                match change.kind {
                    klaud_planner::bump::ChangeKind::SameValue => " (same value as the image)",
                    klaud_planner::bump::ChangeKind::Aligned => " (aligned)",
                    _ => "",
                }
            ));
        }
    }
    for path in plan.aligned_recipes() {
        out.push_str(&format!("aligned {path} to the new image\n"));
    }
    for path in plan.left_recipes() {
        out.push_str(&format!("left {path} on its own image\n"));
    }
    if plan.edits.is_empty() {
        out.push_str(&format!(
            "nothing to change: {} already has {}\n",
            family.family, plan.to
        ));
    }
    super::emit(&out);
    for broken in repository.unreadable() {
        eprintln!("error: {broken}");
    }
    super::families::unreadable_gate(repository.unreadable(), args.allow_unresolved)
}

/// `Update the <framework> image from <old tag> to <new tag>.`, shortened
/// when the tags are long.
fn default_description(
    framework: &str,
    from: &ImageRef,
    to: &ImageRef,
) -> Result<String, CliError> {
    let tag = |image: &ImageRef| image.tag().unwrap_or("its pinned digest").to_owned();
    let candidates = [
        format!(
            "Update the {framework} image from {} to {}.",
            tag(from),
            tag(to)
        ),
        format!("Update the {framework} image to {}.", tag(to)),
    ];
    candidates
        .into_iter()
        .find(|text| text.chars().count() <= MAX_DESCRIPTION_CHARS)
        .ok_or_else(|| {
            CliError::bad_input(anyhow::anyhow!(
                "the generated changelog sentence is longer than {MAX_DESCRIPTION_CHARS} characters; pass --description"
            ))
        })
}
