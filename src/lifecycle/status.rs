//! The state of one repository for `klaud status` and the dashboard: claim
//! refs on GitHub, candidates from the journal, and Klaud's open PRs that
//! this instance's journal does not know (another instance's, or a journal
//! that was deleted).

use klaud_claims::{ClaimBook, Claimant, SystemClock};
use klaud_lifecycle::engine::{CandidateRecord, Journal, Step};

use super::wave::WaveError;
use crate::dashboard::{CandidateRow, LinkRow, OutcomeRow, RepositoryStatus};
use crate::github::Forge;

/// Most recent outcomes kept in the status.
pub const MAX_OUTCOMES: usize = 50;

fn candidate_row(rec: &CandidateRecord) -> CandidateRow {
    let done = rec.step == Step::Done;
    CandidateRow {
        id: rec.candidate.clone(),
        family: rec.family.clone(),
        image: rec.image.clone(),
        state: rec.step.as_str().to_owned(),
        attempt: rec
            .attempts
            .last()
            .map(|a| format!("{} · {}", a.kind.title(), a.status)),
        pull_request: rec.pull.zip(rec.pull_url.clone()).map(|(n, url)| LinkRow {
            label: format!("#{n}"),
            url,
        }),
        runs: rec
            .runs()
            .into_iter()
            .map(|r| LinkRow {
                label: format!("{} / attempt {}", r.id, r.attempt),
                url: r.url,
            })
            .collect(),
        outcome: rec
            .ending
            .as_ref()
            .filter(|_| done)
            .map(|e| e.outcome.to_string()),
    }
}

/// Claims, candidates, recent outcomes and open Klaud PRs of the forge's
/// repository (read-only; `claimant` is only needed to open the claim
/// book). `families` is left empty: it comes from a plan.
pub async fn repository_status(
    forge: &Forge,
    journal: &dyn Journal,
    claimant: Claimant,
) -> Result<RepositoryStatus, WaveError> {
    let clock = SystemClock;
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
        .map(candidate_row)
        .collect();
    let outcomes = records
        .iter()
        .filter(|r| r.step == Step::Done)
        .filter_map(|r| {
            let e = r.ending.as_ref()?;
            Some(OutcomeRow {
                at: Some(r.updated_at),
                family: r.family.clone(),
                candidate: r.candidate.clone(),
                outcome: e.outcome.to_string(),
                phase: e.phase.to_string(),
                pull_request: r.pull.zip(r.pull_url.clone()).map(|(n, url)| LinkRow {
                    label: format!("#{n}"),
                    url,
                }),
            })
        })
        .take(MAX_OUTCOMES)
        .collect();
    let bot = forge.bot_login().to_owned();
    for pull in forge.list_pulls("open").await? {
        let Some(id) = pull.head_ref.strip_prefix("klaud/auto-") else {
            continue;
        };
        let ours = pull
            .author
            .as_deref()
            .is_some_and(|a| a.eq_ignore_ascii_case(&bot));
        if !ours || records.iter().any(|r| r.pull == Some(pull.number)) {
            continue;
        }
        candidates.push(CandidateRow {
            id: id.to_owned(),
            family: String::new(),
            image: String::new(),
            state: "open PR, not in this instance's journal".into(),
            attempt: None,
            pull_request: Some(LinkRow {
                label: format!("#{}", pull.number),
                url: pull.html_url.clone(),
            }),
            runs: Vec::new(),
            outcome: None,
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
    })
}
