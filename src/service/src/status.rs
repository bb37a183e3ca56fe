//! The state of one repository for `klaud status` and the dashboard: claim
//! refs on GitHub, candidates from the journal, and Klaud's open PRs that
//! this instance's journal does not know (another instance's, or a journal
//! that was deleted).

use klaud_claims::{ClaimBook, Claimant, Clock, PullNumber};
use klaud_lifecycle::BoxFuture;
use klaud_lifecycle::engine::{Journal, Step};

use super::wave_adapters::WaveError;
use crate::dashboard::{CandidateRow, LinkRow, OutcomeRow, RepositoryStatus};
use klaud_github::Github;

/// Most recent outcomes kept in the status.
pub const MAX_OUTCOMES: usize = 50;

/// Claims, candidates, recent outcomes and open Klaud PRs of the forge's
/// repository (read-only; `claimant` is only needed to open the claim
/// book). `families` is left empty: it comes from a plan. Leases are
/// shown expired or live on `clock` corrected to GitHub's time.
pub fn repository_status<'f>(
    forge: &'f Github,
    journal: &'f dyn Journal,
    clock: &'f dyn Clock,
    claimant: Claimant,
) -> BoxFuture<'f, Result<RepositoryStatus, WaveError>> {
    Box::pin(async move {
        let clock = forge.clock_on(clock);
        let book = ClaimBook::new(forge, &clock, claimant);
        let claims = crate::dashboard::claim_rows(&book)
            .await
            .map_err(|e| WaveError::Claims(e.to_string()))?;
        let mut records = journal
            .list()
            .await
            .map_err(|e| WaveError::Journal(e.to_string()))?;
        records.sort_by_key(|r| std::cmp::Reverse(r.updated_at));
        let mut candidates: Vec<CandidateRow> = records
            .iter()
            .filter(|r| r.step != Step::Done)
            .map(CandidateRow::of)
            .collect();
        let outcomes = records
            .iter()
            .filter(|r| r.step == Step::Done)
            .filter_map(OutcomeRow::of)
            .take(MAX_OUTCOMES)
            .collect();
        let experiments = crate::dashboard::experiment_rows(&records);
        let bot = forge.bot_login().to_owned();
        for pull in forge.list_pulls("open").await? {
            let Some(id) = pull.head_ref.strip_prefix("klaud/auto-") else {
                continue;
            };
            let ours = pull
                .author
                .as_deref()
                .is_some_and(|a| a.eq_ignore_ascii_case(&bot));
            if !ours
                || records
                    .iter()
                    .any(|r| r.pull == Some(PullNumber::from(pull.number)))
            {
                continue;
            }
            candidates.push(CandidateRow {
                id: id.to_owned(),
                family: String::new(),
                image: String::new(),
                old_image: String::new(),
                state: "open PR, not in this instance's journal".into(),
                attempt: None,
                pull_request: Some(LinkRow {
                    label: format!("#{}", pull.number),
                    url: pull.html_url.clone(),
                }),
                runs: Vec::new(),
                outcome: None,
                merge: None,
            });
        }
        let name = forge.repo();
        Ok(RepositoryStatus {
            url: format!("https://github.com/{name}"),
            name,
            families: Vec::new(),
            claims,
            candidates,
            outcomes,
            experiments,
            dashboard_issue: None,
            sick_nodes: Vec::new(),
        })
    })
}
