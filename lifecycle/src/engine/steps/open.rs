//! Step 3 of 9, `Step::Open`: open the draft pull request for the branch,
//! titled in both languages, with the initial body.
//!
//! After `prepare`, before `baseline`. Reads the branch's pull request (an
//! open one of Klaud's is adopted; a person's is a mismatch) and the
//! baseline it is opened with (the baseline step then finds it frozen).
//! May write: one draft pull request, under a proof.

use crate::engine::context::Engine;
use crate::engine::context::Progress;
use crate::engine::error::EngineError;
use crate::engine::forge::{Forge as _, ForgeError};
use crate::engine::intent::Intent;
use crate::engine::journal::{CandidateRecord, Step};
use crate::engine::ownership::{Mismatch, MismatchKind};
use crate::engine::proof::Scope;
use crate::engine::write::Writes as _;
use crate::report::{engine_display, opening_body, pr_title};
use klaud_planner::image::ImageRef;

/// The longest key list a PR title spells out: the title says it twice
/// (English and Chinese), and GitHub refuses titles over 256 characters.
pub(in crate::engine) const TITLE_KEYS_MAX: usize = 80;

pub(in crate::engine) fn title(cx: &Engine<'_>, rec: &CandidateRecord) -> String {
    let image = ImageRef::parse(&rec.image).ok();
    let engine = cx
        .family(&rec.family)
        .ok()
        .zip(image.as_ref())
        .map(|(f, i)| engine_display(&f.entry.framework, &i.repository()))
        .unwrap_or_else(|| "engine".into());
    let tag = image
        .as_ref()
        .and_then(|i| i.tag().map(str::to_owned))
        .unwrap_or_else(|| rec.image.clone());
    let title = pr_title(&cx.config.display_name, &title_keys(cx, rec), &engine, &tag);
    match &rec.variant {
        Some(v) => crate::experiment::variant_title(&title, &cx.config.display_name, &v.name),
        None => title,
    }
}

/// The keys a PR title names: the family's own, or every member of a
/// family group (`a + b`). GitHub cuts titles at 256 characters, so a
/// group too long to list names its first key and how many more.
pub(in crate::engine) fn title_keys(cx: &Engine<'_>, rec: &CandidateRecord) -> String {
    let keys = cx.changelog_keys(rec);
    let all = keys.join(" + ");
    if keys.len() <= 1 || all.chars().count() <= TITLE_KEYS_MAX {
        return all;
    }
    format!("{} + {} more", keys[0], keys.len() - 1)
}

pub(in crate::engine) async fn run(
    cx: &Engine<'_>,
    rec: &mut CandidateRecord,
) -> Result<Progress, EngineError> {
    if let Some(pull) = cx.forge.find_pull(&rec.branch).await?
        && !cx.deferred_pull(rec, &pull).await?
    {
        if !pull.state.is_open() || !cx.by_bot(pull.author.as_deref()) {
            let m = Mismatch {
                kind: MismatchKind::Unexpected,
                what: format!("pull request #{} for {}", pull.number, rec.branch),
                expected: format!("an open PR by {}", cx.forge.bot_login()),
                found: format!(
                    "{} PR by {}",
                    if pull.state.is_open() {
                        "an open"
                    } else {
                        "a closed"
                    },
                    pull.author.as_deref().unwrap_or("nobody")
                ),
            };
            return cx.on_mismatch(rec, m).await;
        }
        rec.pull = Some(pull.number);
        rec.pull_url = Some(pull.html_url);
        rec.bot_pull = Some(pull.number);
        rec.step = Step::Baseline;
        cx.save(rec).await?;
        return Ok(Progress::Advanced(Step::Baseline));
    }
    let proof = match cx.prove(rec, Scope::Branch).await? {
        Ok(p) => p,
        Err(p) => return Ok(p),
    };
    let title = title(cx, rec);
    let body = super::baseline::opening_body_with_baseline(
        cx,
        rec,
        opening_body(cx.config.dashboard_issue),
    )
    .await?;
    cx.intend(rec, Intent::OpenPull).await?;
    match cx
        .forge
        .create_draft_pull(&proof, &title, &rec.branch, &rec.base_branch, &body)
        .await
    {
        Ok(pull) => {
            // The creation's answer names the author for good.
            rec.bot_pull = cx.by_bot(pull.author.as_deref()).then_some(pull.number);
            rec.pull = Some(pull.number);
            rec.pull_url = Some(pull.html_url);
            rec.pull_opened_here = true;
            // A new PR: no comment of Klaud's yet.
            rec.own_comments = Some(Default::default());
            rec.step = Step::Baseline;
            cx.save(rec).await?;
            Ok(Progress::Advanced(Step::Baseline))
        }
        // Look again next step.
        Err(ForgeError::Ambiguous(_)) => Ok(Progress::Advanced(Step::Open)),
        Err(e) => Err(e.into()),
    }
}
