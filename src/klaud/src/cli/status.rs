//! `klaud status [--json]`: claims on GitHub, this instance's candidates
//! and recent outcomes, and Klaud's open PRs. JSON is a
//! [`klaud_service::dashboard::StatusSnapshot`], the dashboard's `/api/v1/status`.

use super::CliError;
use super::table::Fit;
use crate::compose::{Access, Connection, connect_for};
use klaud_service::dashboard::StatusSnapshot;
use klaud_service::status::repository_status;

/// Arguments of `klaud status`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print the status snapshot as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    connection: Connection,
}

/// Runs the command.
pub fn run(args: Args) -> Result<(), CliError> {
    let runtime = super::runtime()?;
    runtime.block_on(async {
        // Status only reads: any credential that can read the repository
        // will do, and the reader is told whose it is.
        let session = connect_for(&args.connection, Access::Read).await?;
        eprintln!(
            "reading {} as {}",
            session.forge.repo(),
            session.identity.login
        );
        let repository = repository_status(
            &session.forge,
            &session.journal,
            session.base_clock,
            session.claimant.clone(),
        )
        .await
        .map_err(CliError::failure)?;
        let snapshot = StatusSnapshot {
            generated_at: Some(session.base_clock.now()),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            bot_login: session.forge.bot_login().to_owned(),
            repositories: vec![repository],
            ..StatusSnapshot::default()
        };
        if args.json {
            let mut text = serde_json::to_string_pretty(&snapshot).map_err(anyhow::Error::from)?;
            text.push('\n');
            super::emit(&text);
        } else {
            super::emit(&render(&snapshot));
        }
        Ok(())
    })
}

/// A section's table, indented under its heading and fitted (with the
/// indent) into the table width unless `--wide`.
fn indented<const N: usize>(header: &[&str], fits: &[Fit], rows: &[[String; N]]) -> String {
    let limit = super::output::table_width().map(|w| w - 2);
    super::table::render_fitted(header, fits, rows, limit)
        .lines()
        .map(|line| format!("  {line}\n"))
        .collect()
}

fn render(snapshot: &StatusSnapshot) -> String {
    let mut out = String::new();
    for repo in &snapshot.repositories {
        out.push_str(&format!("{}\n\nclaims:\n", repo.name));
        if repo.claims.is_empty() {
            out.push_str("  none\n");
        }
        let claims: Vec<[String; 5]> = repo
            .claims
            .iter()
            .map(|c| match &c.parse_error {
                Some(e) => [
                    c.family_id.to_string(),
                    "UNPARSABLE".into(),
                    "-".into(),
                    "-".into(),
                    e.clone(),
                ],
                None => [
                    c.family_id.to_string(),
                    c.run_id.map_or_else(|| "?".into(), |r| r.to_string()),
                    c.fence.unwrap_or(0).to_string(),
                    c.lease_until
                        .map_or_else(|| "none (old helper)".into(), |t| t.to_rfc3339()),
                    format!(
                        "{}{}",
                        c.family.as_deref().unwrap_or("?"),
                        c.recovering
                            .as_deref()
                            .map_or_else(String::new, |w| format!(
                                "; recovery lease: finishing {w}"
                            ))
                    ),
                ],
            })
            .collect();
        if !claims.is_empty() {
            out.push_str(&indented(
                &["FAMILY ID", "RUN", "FENCE", "LEASE UNTIL", "FAMILY"],
                &[Fit::Keep, Fit::Keep, Fit::Keep, Fit::Keep, Fit::Below],
                &claims,
            ));
        }
        out.push_str("\ncandidates:\n");
        if repo.candidates.is_empty() {
            out.push_str("  none\n");
        }
        // Within 100 columns the pull request is its number, and its
        // address goes under the row with the family.
        let narrow = super::output::table_width().is_some();
        let candidates: Vec<[String; 5]> = repo
            .candidates
            .iter()
            .map(|c| {
                let (pull, family) = match &c.pull_request {
                    None => ("-".to_owned(), c.family.clone()),
                    Some(p) if narrow => (p.label.clone(), format!("{} {}", c.family, p.url)),
                    Some(p) => (p.url.clone(), c.family.clone()),
                };
                [
                    c.id.to_string(),
                    c.state.to_string(),
                    c.attempt.clone().unwrap_or_else(|| "-".into()),
                    pull,
                    family,
                ]
            })
            .collect();
        if !candidates.is_empty() {
            out.push_str(&indented(
                &["CANDIDATE", "STATE", "ATTEMPT", "PULL REQUEST", "FAMILY"],
                &[Fit::Keep, Fit::Elide, Fit::Elide, Fit::Keep, Fit::Below],
                &candidates,
            ));
        }
        if !repo.experiments.is_empty() {
            out.push_str("\nexperiments:\n");
        }
        for e in &repo.experiments {
            out.push_str(&format!("  {}  {}\n", e.experiment, e.family));
            for v in &e.variants {
                out.push_str(&format!(
                    "    Variant {}{}  {}  {}  {}\n",
                    v.name,
                    v.from
                        .as_deref()
                        .map_or_else(String::new, |f| format!(" (= {f} plus …)")),
                    v.state,
                    v.pull_request.as_ref().map_or("-", |p| p.url.as_str()),
                    v.candidate
                ));
            }
        }
        out.push_str("\nrecent outcomes:\n");
        if repo.outcomes.is_empty() {
            out.push_str("  none\n");
        }
        for o in &repo.outcomes {
            out.push_str(&format!(
                "  {}  {}  {}  {}\n",
                o.candidate,
                o.outcome,
                o.phase,
                o.pull_request.as_ref().map_or("-", |p| p.url.as_str())
            ));
            for line in o.hunt.iter().chain(&o.hunt_zh) {
                out.push_str(&format!("    {}\n", line.replace("**", "")));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use klaud_service::dashboard::{ExperimentRow, LinkRow, RepositoryStatus, VariantRow};

    #[test]
    fn candidates_fit_100_columns_with_the_family_under_its_row() {
        let family = "configs/nvidia-master.yaml:dsv4-fp4-gb200-dynamo-vllm-mtp2-nosynthetic";
        let snapshot = StatusSnapshot {
            repositories: vec![RepositoryStatus {
                name: "o/r".into(),
                candidates: vec![klaud_service::dashboard::CandidateRow {
                    id: "d92e15065c55779d-0123456789abcdef".into(),
                    family: family.into(),
                    old_image: "vllm/vllm-openai:v0.20.0".into(),
                    image: "vllm/vllm-openai:v0.20.1".into(),
                    state: "final-sweep".into(),
                    attempt: Some("Repair 2/5".into()),
                    pull_request: Some(LinkRow {
                        label: "#1234".into(),
                        url: "https://github.com/SemiAnalysisAI/InferenceX/pull/1234".into(),
                    }),
                    runs: vec![],
                    outcome: None,
                    merge: None,
                }],
                ..RepositoryStatus::default()
            }],
            ..StatusSnapshot::default()
        };
        let text = render(&snapshot);
        assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
        assert!(
            text.contains(&format!(
                "\n      {family}\n      https://github.com/SemiAnalysisAI/InferenceX/pull/1234\n"
            )),
            "the family whole, under its row: {text}"
        );
        assert!(
            text.contains("https://github.com/SemiAnalysisAI/InferenceX/pull/1234"),
            "{text}"
        );
    }

    #[test]
    fn a_hunt_is_listed_under_its_outcome_in_both_languages() {
        let snapshot = StatusSnapshot {
            repositories: vec![RepositoryStatus {
                name: "o/r".into(),
                outcomes: vec![klaud_service::dashboard::OutcomeRow {
                    at: None,
                    family: "configs/nvidia-master.yaml:k".into(),
                    candidate: "d92e15065c55779d-0123456789abcdef".parse().expect("id"),
                    outcome: "failed".into(),
                    phase: "targeted".into(),
                    pull_request: None,
                    hunt: vec!["**Regression hunt:** first bad tag found.".into()],
                    hunt_zh: vec!["**回归排查**：已找到第一个出问题的标签。".into()],
                }],
                ..RepositoryStatus::default()
            }],
            ..StatusSnapshot::default()
        };
        let text = render(&snapshot);
        assert!(
            text.ends_with(
                "failed  targeted  -\n    Regression hunt: first bad tag found.\n    \
                 回归排查：已找到第一个出问题的标签。\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn variants_of_an_experiment_are_listed_under_their_family() {
        let variant = |name: &str, from: Option<&str>, state: &str, pull: Option<u64>| VariantRow {
            name: name.into(),
            from: from.map(Into::into),
            candidate: format!("d92e15065c55779d-{:0>16}", name.to_lowercase())
                .parse()
                .expect("a candidate id"),
            state: state.into(),
            pull_request: pull.map(|n| LinkRow {
                label: format!("#{n}"),
                url: format!("https://github.com/o/r/pull/{n}"),
            }),
            image: String::new(),
            edits: Vec::new(),
        };
        let snapshot = StatusSnapshot {
            repositories: vec![RepositoryStatus {
                name: "o/r".into(),
                experiments: vec![ExperimentRow {
                    family: "configs/nvidia-master.yaml:k".into(),
                    experiment: "exp".into(),
                    variants: vec![
                        variant("A", None, "duplicate", Some(4)),
                        variant("B", None, "validated", Some(5)),
                        variant("C", Some("B"), "smoke", None),
                    ],
                }],
                ..RepositoryStatus::default()
            }],
            ..StatusSnapshot::default()
        };
        let text = render(&snapshot);
        let section = &text[text.find("experiments:\n").expect("section")..];
        assert!(
            section.starts_with(
                "experiments:\n  exp  configs/nvidia-master.yaml:k\n    \
                 Variant A  duplicate  https://github.com/o/r/pull/4  d92e15065c55779d-000000000000000a\n    \
                 Variant B  validated  https://github.com/o/r/pull/5  d92e15065c55779d-000000000000000b\n    \
                 Variant C (= B plus …)  smoke  -  d92e15065c55779d-000000000000000c\n"
            ),
            "{section}"
        );
    }
}
