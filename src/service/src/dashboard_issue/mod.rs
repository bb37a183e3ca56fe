//! The dashboard issue: one issue per repository, opened and kept current
//! by Klaud, in both deployments (`klaud serve`'s passes and each one-shot
//! `klaud wave`), where maintainers see what Klaud does and steer it.
//!
//! A pass reads it once ([`steer`], before the plan: one conditional list
//! of the bot's issues with the dashboard label, a free 304 when nothing
//! changed), applies the boxes a person with write access ticked (retry a
//! family now, ignore a family or one image, undo an ignore), and hands the
//! dashboard's ignores to the plan. After the wave, [`publish`] renders the
//! body from the wave's plan and the journal and edits the issue only when
//! the bytes differ.
//!
//! The ignores made here live in the issue itself (a hidden, versioned
//! block), so they survive a restart, a lost store and another instance.
//!
//! One issue even with several instances: opening an issue is not
//! idempotent, so an instance that opened one lists the dashboard issues
//! again, and every instance keeps the lowest-numbered one and closes the
//! others as duplicates. Two instances racing both see both issues after
//! their own creation, and both choose the same one.

mod kept;
mod render;

use std::collections::BTreeMap;

use klaud_claims::{Clock, PullNumber};
use klaud_github::{Github, GithubError, IssueInfo};
use klaud_lifecycle::BoxFuture;
use klaud_lifecycle::engine::{CandidateRecord, Journal, Step};
use klaud_planner::ignore::{IgnoreRule, IgnoreSource, IgnoreTarget};

pub use kept::{Action, Kept, KeptIgnore};
pub use render::{MARKER, PlanView, View};

/// The label Klaud finds its dashboard issue by.
pub const LABEL: &str = "klaud-dashboard";
/// The issue's title.
pub const TITLE: &str = "Klaud dashboard / Klaud 看板";

/// What [`steer`] found and did.
#[derive(Debug, Clone, Default)]
pub struct Steering {
    /// The dashboard issue, once there is one.
    pub issue: Option<IssueInfo>,
    /// The state kept in it, with this pass's boxes applied.
    pub kept: Kept,
    /// Why the kept state did not read, when it did not.
    pub problem: Option<String>,
}

impl Steering {
    /// The dashboard's ignores as plan rules.
    pub fn rules(&self) -> Vec<IgnoreRule> {
        self.kept
            .ignores
            .iter()
            .map(|ig| IgnoreRule {
                target: match &ig.image {
                    None => IgnoreTarget::Family(ig.family.clone()),
                    Some(image) => IgnoreTarget::FamilyImage {
                        family: klaud_planner::identity::family_id(&ig.family),
                        image: image.clone(),
                    },
                },
                reason: match ig.pull {
                    Some(_) => "closed without merging: not this image".to_owned(),
                    None => String::new(),
                },
                source: match ig.pull {
                    Some(number) => IgnoreSource::ClosedPull {
                        number: number.get(),
                        by: ig.by.clone(),
                    },
                    None => IgnoreSource::Dashboard { by: ig.by.clone() },
                },
            })
            .collect()
    }

    /// Closed Klaud PRs whose "not this image" rule was undone here: the
    /// engine may propose their image again, with a new PR.
    pub fn undone_declines(&self) -> Vec<PullNumber> {
        self.kept
            .declined
            .iter()
            .copied()
            .filter(|n| !self.kept.ignores.iter().any(|i| i.pull == Some(*n)))
            .collect()
    }

    /// The number of the dashboard issue, once there is one (the PR
    /// footers and the receipts link it).
    pub fn number(&self) -> Option<u64> {
        self.issue.as_ref().map(|i| i.number)
    }

    /// The issue's web page.
    pub fn url(&self) -> Option<&str> {
        self.issue.as_ref().map(|i| i.html_url.as_str())
    }
}

/// The "not this image" decisions in `records` (PRs a person closed
/// without merging), each with its family string.
pub fn declined_in(records: &[CandidateRecord]) -> Vec<(String, klaud_lifecycle::model::Declined)> {
    records
        .iter()
        .filter_map(|r| {
            let d = r.ending.as_ref()?.declined.clone()?;
            Some((r.family.clone(), d))
        })
        .collect()
}

/// Every ignore rule in force for one pass: the configuration's, the
/// dashboard issue's (boxes ticked there and the closed PRs it keeps), and
/// the closed PRs this instance's journal knows that the issue does not
/// keep yet (it takes them in when the pass publishes it). `klaud plan`,
/// `klaud wave` and `serve` all plan with this list.
pub fn rules_in_force(
    config: &[IgnoreRule],
    steering: Option<&Steering>,
    records: &[CandidateRecord],
) -> klaud_planner::ignore::IgnoreRules {
    let known: &[PullNumber] = steering.map_or(&[], |s| s.kept.declined.as_slice());
    let from_journal = declined_in(records)
        .into_iter()
        .filter(|(_, d)| !known.contains(&d.pull))
        .map(|(_, d)| d.rule());
    klaud_planner::ignore::IgnoreRules::new(
        config
            .iter()
            .cloned()
            .chain(steering.into_iter().flat_map(Steering::rules))
            .chain(from_journal),
    )
}

/// Klaud's dashboard issues, lowest number first (its own, labelled,
/// carrying the marker).
fn dashboards<'f>(forge: &'f Github) -> BoxFuture<'f, Result<Vec<IssueInfo>, GithubError>> {
    Box::pin(async move {
        let mut found: Vec<IssueInfo> = forge
            .own_issues(LABEL)
            .await?
            .into_iter()
            .filter(|i| i.body.contains(MARKER))
            .collect();
        found.sort_by_key(|i| i.number);
        Ok(found)
    })
}

/// Keeps the lowest-numbered dashboard and closes the others.
fn converge<'f>(
    forge: &'f Github,
    mut found: Vec<IssueInfo>,
) -> BoxFuture<'f, Result<Option<IssueInfo>, GithubError>> {
    Box::pin(async move {
        if found.is_empty() {
            return Ok(None);
        }
        let keep = found.remove(0);
        for dup in &found {
            tracing::info!(
                issue = dup.number,
                kept = keep.number,
                "closing a duplicate dashboard issue"
            );
            forge.edit_own_issue(dup, None).await?;
        }
        Ok(Some(keep))
    })
}

/// Reads the dashboard issue and applies its ticked boxes: the ignores go
/// into the kept state (returned, written by [`publish`]), a retry is
/// recorded in `journal` as `/klaud retry` records it. Boxes count only
/// when the issue's last editor may write to the repository.
pub fn steer<'f>(
    forge: &'f Github,
    journal: &'f dyn Journal,
    clock: &'f dyn Clock,
) -> BoxFuture<'f, Result<Steering, GithubError>> {
    Box::pin(async move {
        let found = dashboards(forge).await?;
        let Some(issue) = converge(forge, found).await? else {
            return Ok(Steering::default());
        };
        let (mut kept, problem) = match Kept::read(&issue.body) {
            Ok(k) => (k.unwrap_or_default(), None),
            Err(e) => {
                tracing::warn!(issue = issue.number, error = %e, "dashboard state block does not read");
                (Kept::default(), Some(e.to_string()))
            }
        };
        let actions = kept::ticked(&issue.body);
        if !actions.is_empty() {
            apply(forge, journal, clock, &mut kept, &issue, &actions).await?;
        }
        Ok(Steering {
            issue: Some(issue),
            kept,
            problem,
        })
    })
}

/// Applies `actions` when the issue's last editor may write; notes what
/// was done or refused.
fn apply<'f>(
    forge: &'f Github,
    journal: &'f dyn Journal,
    clock: &'f dyn Clock,
    kept: &'f mut Kept,
    issue: &'f IssueInfo,
    actions: &'f [Action],
) -> BoxFuture<'f, Result<(), GithubError>> {
    Box::pin(async move {
        let what: Vec<String> = actions.iter().map(Action::code).collect();
        let what = what.join("; ");
        let editor = forge.issue_editor(issue.number).await?;
        let Some(by) = editor.filter(|e| !e.eq_ignore_ascii_case(forge.bot_login())) else {
            kept.note(format!(
                "Not applied: {what} — GitHub does not say who ticked it. / 未执行：无法确定勾选者。"
            ));
            return Ok(());
        };
        let permission = forge.collaborator_permission(&by).await?;
        if !permission.may_write() {
            kept.note(format!(
                "Not applied: {what} — @{by} has {permission} access; only people with write access steer Klaud. / 未执行：@{by} 没有写权限。"
            ));
            return Ok(());
        }
        let now = clock.now();
        for action in actions {
            let note = match action {
                Action::IgnoreFamily { family } | Action::IgnoreImage { family, .. } => {
                    let image = match action {
                        Action::IgnoreImage { image, .. } => Some(image.clone()),
                        _ => None,
                    };
                    let exists = kept
                        .ignores
                        .iter()
                        .any(|i| i.family == *family && i.image == image);
                    if !exists && kept.ignores.len() >= kept::MAX_IGNORES {
                        format!(
                            "Not applied: {} — the dashboard keeps at most {} ignores; undo one first. / 未执行：忽略项已满。",
                            action.code(),
                            kept::MAX_IGNORES
                        )
                    } else {
                        if !exists {
                            kept.ignores.push(KeptIgnore {
                                family: family.clone(),
                                image: image.clone(),
                                by: by.clone(),
                                at: now,
                                pull: None,
                            });
                        }
                        match image {
                            Some(i) => format!(
                                "Applied for @{by}: image `{i}` is not proposed for `{family}` again; a newer one is. / 已执行：不再为该系列提议此镜像。"
                            ),
                            None => format!(
                                "Applied for @{by}: family `{family}` is ignored until the box below undoes it. / 已执行：忽略此系列。"
                            ),
                        }
                    }
                }
                Action::Unignore { family, image } => {
                    let before = kept.ignores.len();
                    kept.ignores
                        .retain(|i| !(i.family == *family && i.image == *image));
                    if kept.ignores.len() < before {
                        format!(
                            "Applied for @{by}: `{}` is no longer ignored. / 已执行：撤销忽略。",
                            image.as_deref().unwrap_or(family)
                        )
                    } else {
                        format!("Nothing to undo for `{family}`. / 无可撤销项。")
                    }
                }
                Action::Retry { family } => retry(journal, clock, family, &by).await,
            };
            kept.note(format!("{} — {note}", now.format("%Y-%m-%d %H:%M UTC")));
        }
        Ok(())
    })
}

/// Lifts the cooldown of `family` as `/klaud retry` does.
async fn retry(journal: &dyn Journal, clock: &dyn Clock, family: &str, by: &str) -> String {
    let records = match journal.list().await {
        Ok(r) => r,
        Err(e) => return format!("Not applied: retry `{family}` — the journal does not read: {e}"),
    };
    let Some(rec) = newest_done(&records, family) else {
        return format!(
            "Nothing to retry for `{family}`: this instance has no finished candidate of it. / 无可重试项。"
        );
    };
    match klaud_lifecycle::commands::request_retry(journal, clock, rec, by, "dashboard issue").await
    {
        Ok(Ok(text)) => format!("Applied for @{by}: {text} / 已执行：立即重试。"),
        Ok(Err(refusal)) => format!("Not applied for @{by}: {refusal}"),
        Err(e) => format!("Not applied: retry `{family}` — {e}"),
    }
}

fn newest_done<'r>(records: &'r [CandidateRecord], family: &str) -> Option<&'r CandidateRecord> {
    records
        .iter()
        .filter(|r| r.family == family && r.step == Step::Done)
        .max_by_key(|r| r.updated_at)
}

/// What [`publish`] needs besides the steering.
pub struct Publish<'a> {
    /// The base branch (for links to the master configs).
    pub base_branch: String,
    /// The wave's summary, when this pass ran one (its plan and statuses).
    pub summary: Option<&'a klaud_lifecycle::wave::WaveSummary>,
    /// How long a finished family is left alone.
    pub cooldown: std::time::Duration,
    /// The web dashboard's address, when one runs.
    pub web_dashboard: Option<String>,
    /// Whether this pass may open the issue when there is none: a wave may,
    /// a reconcile pass (which plans nothing) only keeps an existing one,
    /// so nothing is opened on GitHub before Klaud's first wave.
    pub may_open: bool,
}

/// What [`publish`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    /// Opened the issue.
    Opened(IssueInfo),
    /// Edited it (its content changed).
    Edited(IssueInfo),
    /// Left it alone: nothing changed.
    Unchanged(IssueInfo),
    /// There is none, and this pass may not open one.
    Absent,
}

impl Published {
    /// The issue, when there is one.
    pub fn issue(&self) -> Option<&IssueInfo> {
        match self {
            Published::Opened(i) | Published::Edited(i) | Published::Unchanged(i) => Some(i),
            Published::Absent => None,
        }
    }
}

/// Renders the dashboard and writes it when it changed: opens the issue
/// when there is none (then converges with any other instance's), edits
/// it when the body differs (unless a person edited it since [`steer`]
/// read it: their ticks wait for the next pass instead of being
/// overwritten), and otherwise sends nothing.
pub fn publish<'f>(
    forge: &'f Github,
    journal: &'f dyn Journal,
    clock: &'f dyn Clock,
    steering: &'f Steering,
    options: Publish<'f>,
) -> BoxFuture<'f, Result<Published, GithubError>> {
    Box::pin(async move {
        let records = journal.list().await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "journal not readable; the dashboard shows no candidates");
            Vec::new()
        });
        let repo = forge.repo();
        let web = web_of(steering.issue.as_ref(), &records)
            .unwrap_or_else(|| format!("https://github.com/{repo}"));
        let plan = options
            .summary
            .filter(|s| !s.families.is_empty() || !s.unreadable.is_empty())
            .map(|s| PlanView {
                families: &s.families,
                unreadable: &s.unreadable,
            });
        let waiting: BTreeMap<String, String> = options
            .summary
            .map(|s| {
                s.candidates
                    .iter()
                    .filter_map(|c| Some((c.candidate.to_string(), c.status.clone()?)))
                    .collect()
            })
            .unwrap_or_default();
        let view = View {
            web,
            base_branch: options.base_branch.clone(),
            records: &records,
            plan,
            waiting,
            cooldown: options.cooldown,
            now: clock.now(),
            web_dashboard: options.web_dashboard.clone(),
        };
        let previous = steering.issue.as_ref().map(|i| i.body.as_str());
        // A PR a person closed this pass (or an earlier one whose publish
        // failed) becomes a rule kept in the issue itself.
        let mut kept = steering.kept.clone();
        kept.absorb_declined(&declined_in(&records), clock.now());
        let body = render::body(&view, &kept, previous, steering.problem.as_deref());
        match &steering.issue {
            Some(issue) if issue.body == body => Ok(Published::Unchanged(issue.clone())),
            Some(issue) => {
                // Somebody may have ticked a box since the pass read the
                // issue: writing over it would lose the tick. Leave it for
                // the next pass, which applies it.
                match forge.issue(issue.number).await? {
                    Some(now) if now.body != issue.body => {
                        tracing::info!(
                            issue = issue.number,
                            "dashboard issue edited meanwhile; the next pass takes it up"
                        );
                        Ok(Published::Unchanged(now))
                    }
                    _ => Ok(Published::Edited(
                        forge.edit_own_issue(issue, Some(&body)).await?,
                    )),
                }
            }
            None if !options.may_open => Ok(Published::Absent),
            None => {
                let opened = forge.open_issue(TITLE, &body, LABEL).await?;
                // Another instance may have opened one at the same time:
                // everybody keeps the lowest number.
                let found = dashboards(forge).await?;
                match converge(forge, found).await? {
                    Some(kept) if kept.number != opened.number => Ok(Published::Unchanged(kept)),
                    _ => Ok(Published::Opened(opened)),
                }
            }
        }
    })
}

/// Opens the dashboard issue before a wave when there is none yet, so the
/// PRs this wave opens link it from their footer (and their receipts from
/// their undo sentence); the wave's own publish then edits it. Nothing is
/// sent when the issue exists.
pub fn open_before_wave<'f>(
    forge: &'f Github,
    journal: &'f dyn Journal,
    clock: &'f dyn Clock,
    steering: &'f mut Steering,
    base_branch: &'f str,
) -> BoxFuture<'f, Result<(), GithubError>> {
    Box::pin(async move {
        if steering.issue.is_some() {
            return Ok(());
        }
        let options = Publish {
            base_branch: base_branch.to_owned(),
            summary: None,
            cooldown: std::time::Duration::ZERO,
            web_dashboard: None,
            may_open: true,
        };
        let published = publish(forge, journal, clock, steering, options).await?;
        steering.issue = published.issue().cloned();
        Ok(())
    })
}

/// The repository's web address, from the issue's or a PR's page.
fn web_of(issue: Option<&IssueInfo>, records: &[CandidateRecord]) -> Option<String> {
    let from = |url: &str, sep: &str| url.rsplit_once(sep).map(|(base, _)| base.to_owned());
    issue
        .and_then(|i| from(&i.html_url, "/issues/"))
        .or_else(|| {
            records
                .iter()
                .find_map(|r| r.pull_url.as_deref().and_then(|u| from(u, "/pull/")))
        })
}

/// One dashboard pass over a wave: steer before, publish after. Errors
/// are logged, never fatal: the dashboard must not stop a wave.
pub fn log_error(what: &str, e: &GithubError) {
    tracing::warn!(error = %e, "dashboard issue: {what} failed; the next pass tries again");
}
