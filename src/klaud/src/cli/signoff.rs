//! `klaud signoff --pr N [--comment-url URL] [--dry-run] [--json]`: verify
//! the latest CODEOWNER sign-off on a pull request (or the one named) in the
//! repository's own contract and publish the verdict comment and the
//! `codeowner-signoff-verify` status.
//!
//! The head SHA is resolved once, first; every check reads the pull request
//! at it and the verdict names it. When Klaud itself fails (GitHub, the
//! network), no verdict is published and the status says the verification
//! did not complete: never a PASS that was not decided.

use std::collections::BTreeMap;

use klaud_github::signoff::{SignoffRef, pull_number_of_url};
use klaud_service::signoff::{Done, SignoffRunError, verify_and_publish};

use super::CliError;
use crate::compose::{Access, Connection, forge_for, load_config};

/// Arguments of `klaud signoff`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    connection: Connection,
    /// The pull request whose sign-off is verified (default: the one
    /// `--comment-url` names).
    #[arg(long, value_name = "N", required_unless_present = "comment_url")]
    pr: Option<u64>,
    /// The sign-off to verify (`…/pull/N#issuecomment-…`,
    /// `#pullrequestreview-…` or `#discussion_r…`); default: the latest.
    #[arg(long, value_name = "URL")]
    comment_url: Option<String>,
    /// Verify and print, publish nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print the verdict as JSON.
    #[arg(long)]
    json: bool,
    /// The least eval score of a task, `TASK=SCORE` (repeatable; overrides
    /// `[signoff] eval_bars`, whose default is `gsm8k = 0.85`, the bar of the
    /// repository's published verdicts).
    #[arg(long = "eval-bar", value_name = "TASK=SCORE")]
    eval_bars: Vec<String>,
}

/// The pull request and the sign-off: `--pr`, `--comment-url`, or both
/// when they agree.
fn target(pr: Option<u64>, url: Option<&str>) -> Result<(u64, Option<SignoffRef>), CliError> {
    let Some(url) = url else {
        let pr = pr.ok_or_else(|| CliError::bad_input(anyhow::anyhow!("pass --pr N")))?;
        return Ok((pr, None));
    };
    let wanted = SignoffRef::from_url(url).ok_or_else(|| {
        CliError::bad_input(anyhow::anyhow!(
            "--comment-url {url:?}: expected a #issuecomment-, #pullrequestreview- or \
             #discussion_r anchor"
        ))
    })?;
    let named = pull_number_of_url(url);
    match (pr, named) {
        (Some(pr), Some(named)) if pr != named => Err(CliError::bad_input(anyhow::anyhow!(
            "--comment-url names pull request #{named}, not --pr {pr}"
        ))),
        (Some(pr), _) | (None, Some(pr)) => Ok((pr, Some(wanted))),
        (None, None) => Err(CliError::bad_input(anyhow::anyhow!(
            "--comment-url {url:?} names no pull request (…/pull/N#…): pass --pr N"
        ))),
    }
}

fn parse_bars(
    defaults: &BTreeMap<String, f64>,
    given: &[String],
) -> Result<BTreeMap<String, f64>, CliError> {
    let mut bars = defaults.clone();
    for item in given {
        let parsed = item
            .split_once('=')
            .and_then(|(task, score)| Some((task.trim(), score.trim().parse::<f64>().ok()?)))
            .filter(|(task, score)| !task.is_empty() && (0.0..=1.0).contains(score));
        let Some((task, score)) = parsed else {
            return Err(CliError::bad_input(anyhow::anyhow!(
                "--eval-bar {item:?}: write TASK=SCORE with a score between 0 and 1"
            )));
        };
        bars.insert(task.to_ascii_lowercase(), score);
    }
    Ok(bars)
}

/// Runs the command.
pub fn run(args: Args) -> Result<(), CliError> {
    let (pr, wanted) = target(args.pr, args.comment_url.as_deref())?;
    let config = load_config(&args.connection)?;
    let bars = parse_bars(&config.signoff.eval_bars, &args.eval_bars)?;
    let repo = config.github.repository.clone().ok_or_else(|| {
        CliError::bad_input(anyhow::anyhow!(
            "no repository: pass --repo OWNER/NAME or set github.repository"
        ))
    })?;
    let access = if args.dry_run {
        Access::Read
    } else {
        Access::Write
    };
    super::runtime()?.block_on(async {
        let (forge, _, _) = forge_for(&config, &repo, access).await?;
        let done = verify_and_publish(&forge, pr, wanted, bars, args.dry_run)
            .await
            .map_err(|e| match e {
                SignoffRunError::Github { context, source } => {
                    super::github_failure(source, context)
                }
                contract @ SignoffRunError::Contract(_) => CliError::bad_input(contract),
            })?;
        match done {
            Done::Refused(reason) => {
                if args.json {
                    super::emit(&format!(
                        "{}\n",
                        serde_json::json!({"verdict": null, "refused": reason})
                    ));
                } else {
                    super::emit(&format!("not verified: {reason}\n"));
                }
            }
            Done::Verdict {
                verdict,
                body,
                comment_url,
                ..
            } => {
                if args.json {
                    let text =
                        serde_json::to_string_pretty(&verdict).map_err(anyhow::Error::from)?;
                    super::emit(&format!("{text}\n"));
                } else {
                    super::emit(&body);
                    if let Some(url) = comment_url {
                        super::emit(&format!("\npublished: {url}\n"));
                    }
                }
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::{parse_bars, target};

    #[test]
    fn the_pull_request_comes_from_pr_or_the_comment_url() {
        let url = "https://github.com/o/r/pull/12#issuecomment-5";
        assert_eq!(target(None, Some(url)).unwrap().0, 12);
        assert_eq!(target(Some(12), Some(url)).unwrap().0, 12);
        assert!(target(Some(13), Some(url)).is_err());
        assert_eq!(target(Some(7), None).unwrap(), (7, None));
        assert!(target(None, Some("https://github.com/o/r/pull/12")).is_err());
    }
    use klaud_signoff::evidence::default_eval_bars;

    #[test]
    fn eval_bars_default_to_gsm8k_and_accept_overrides() {
        let defaults = default_eval_bars();
        let bars = parse_bars(&defaults, &["GSM8K=0.9".into(), "mmlu=0.7".into()]).unwrap();
        assert_eq!(bars.get("gsm8k"), Some(&0.9));
        assert_eq!(bars.get("mmlu"), Some(&0.7));
        assert_eq!(
            parse_bars(&defaults, &[]).unwrap().get("gsm8k"),
            Some(&0.85)
        );
        assert!(parse_bars(&defaults, &["gsm8k".into()]).is_err());
        assert!(parse_bars(&defaults, &["gsm8k=2".into()]).is_err());
    }
}
