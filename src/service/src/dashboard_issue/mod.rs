//! The dashboard issue: one issue per repository, opened and kept current
//! by Klaud, in both deployments (`klaud serve`'s passes and each one-shot
//! `klaud wave`), where maintainers see what Klaud does and steer it.
//!
//! A pass reads it once ([`steer`], before the plan: one conditional list
//! of the bot's issues with the dashboard label, a free 304 when nothing
//! changed), applies the boxes a person with write access ticked (retry a
//! family now, run a stale family now, ignore a family or one image, undo
//! an ignore, open the playbook pull request of a learned entry), and
//! hands the dashboard's ignores and run-now requests to
//! the plan. After the wave, [`publish`] renders the
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
mod learned;
mod nodes;
mod render;
mod visit;

use std::collections::BTreeMap;

use klaud_claims::{Clock, PullNumber};
use klaud_github::{Github, GithubError, IssueInfo};
use klaud_lifecycle::BoxFuture;
use klaud_lifecycle::engine::{CandidateRecord, Journal, Step};
use klaud_planner::ignore::{IgnoreRule, IgnoreSource, IgnoreTarget};

pub use kept::{Action, Kept, KeptIgnore, KeptRunNow, ticked};
pub use render::{MARKER, PlanView, View, body};
pub use visit::{Visit, around_wave};

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
    /// Why this pass plans nothing a maintainer's decision on the issue
    /// could cover (every family): the issue, its state block, or who
    /// ticked its boxes could not be read. `None`: read in full. The
    /// dashboard fails closed: an ignore that cannot be read must not turn
    /// into a PR, a smoke and a sweep.
    pub hold: Option<String>,
    /// The unreadable state block as found, written back byte for byte.
    kept_block: Option<String>,
    /// The issue must not be written this pass: its state block is a newer
    /// format (the newer instance that wrote it keeps the issue), or ticked
    /// boxes wait for a pass that can apply them (a new body would untick
    /// them).
    leave_alone: bool,
    /// The sick nodes read from GitHub's runs this pass, for the issue's
    /// section; `None`: not read, the issue keeps the section it shows.
    pub sick_nodes: Option<crate::sick_nodes::SickNodes>,
}

impl Steering {
    /// The steering of a pass whose dashboard issue could not be read at
    /// all (`why`): nothing the issue could decide is planned, nothing is
    /// written to it, and the next good read resumes.
    pub fn unread(why: impl std::fmt::Display) -> Self {
        Self {
            hold: Some(format!("the dashboard issue could not be read: {why}")),
            ..Self::default()
        }
    }

    /// The dashboard's ignores as plan rules, and while it holds, one rule
    /// over every family that says why.
    pub fn rules(&self) -> Vec<IgnoreRule> {
        let hold = self.hold.iter().map(|why| IgnoreRule {
            target: IgnoreTarget::Family("*".to_owned()),
            reason: format!(
                "{why}; a maintainer's ignore there may cover this family, so Klaud starts nothing until it reads the issue again"
            ),
            source: IgnoreSource::DashboardUnread,
        });
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
            .chain(hold)
            .collect()
    }

    /// The family ids a maintainer asked to run now, for the plan's
    /// `run_first`: they stay asked until a wave's publish settles them.
    pub fn run_first(&self) -> std::collections::BTreeSet<String> {
        self.kept
            .run_now
            .iter()
            .map(|r| klaud_planner::identity::family_id(&r.family))
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
/// without merging) that stand, each with its family string: a closed
/// variant's waits for its siblings of the same image (see
/// `Declined::stands`).
pub fn declined_in(records: &[CandidateRecord]) -> Vec<(String, klaud_lifecycle::model::Declined)> {
    records
        .iter()
        .filter_map(|r| {
            let d = r.ending.as_ref()?.declined.clone()?;
            d.stands(r, records).then(|| (r.family.clone(), d))
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

/// Most pages of the bot's issues and pull requests (100 a page, newest
/// first) read to find a dashboard issue whose label was removed.
const MAX_UNLABELLED_PAGES: usize = 20;

/// Klaud's dashboard issues in any state, lowest number first: its own,
/// carrying the marker, not closed by Klaud as a duplicate. Found by the
/// label (one conditional read), else (a person removed the label) among
/// the bot's newest issues.
fn dashboards<'f>(forge: &'f Github) -> BoxFuture<'f, Result<Vec<IssueInfo>, GithubError>> {
    Box::pin(async move {
        // Issues Klaud itself closed as duplicates are no candidates.
        let keep = |i: &IssueInfo| {
            i.body.contains(MARKER) && (i.open || i.state_reason.as_deref() != Some("duplicate"))
        };
        let mut found: Vec<IssueInfo> = forge
            .own_issues(LABEL)
            .await?
            .into_iter()
            .filter(keep)
            .collect();
        if found.is_empty() {
            found = forge
                .own_issues_with_marker(MARKER, MAX_UNLABELLED_PAGES)
                .await?
                .into_iter()
                .filter(keep)
                .collect();
        }
        found.sort_by_key(|i| i.number);
        Ok(found)
    })
}

/// The one dashboard issue: of the open ones the lowest-numbered (the
/// others are closed as duplicates); with none open, the newest a person
/// closed, reopened. One that lost its label gets it back. Either is said
/// on the issue (a note in `kept`).
fn converge<'f>(
    forge: &'f Github,
    found: Vec<IssueInfo>,
    notes: &'f mut Vec<String>,
) -> BoxFuture<'f, Result<Option<IssueInfo>, GithubError>> {
    Box::pin(async move {
        let (mut open, closed): (Vec<IssueInfo>, Vec<IssueInfo>) =
            found.into_iter().partition(|i| i.open);
        if open.is_empty() {
            let Some(newest) = closed.into_iter().max_by_key(|i| i.number) else {
                return Ok(None);
            };
            tracing::info!(
                issue = newest.number,
                "reopening the dashboard issue a person closed"
            );
            notes.push(
                "Reopened: this issue was closed, and Klaud keeps maintainers' decisions here; close it again only to have it reopened. / 已重新打开：此 issue 被关闭，但 Klaud 在此保存维护者的决定。"
                    .to_owned(),
            );
            return Ok(Some(forge.restore_own_issue(&newest, LABEL).await?));
        }
        let mut keep = open.remove(0);
        if !keep.has_label(LABEL) {
            tracing::info!(issue = keep.number, "labelling the dashboard issue again");
            notes.push(format!(
                "Labelled again: the `{LABEL}` label was removed; Klaud finds this issue by it. / 已重新添加标签 `{LABEL}`。"
            ));
            keep = forge.restore_own_issue(&keep, LABEL).await?;
        }
        let found = open;
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
        let mut restored = Vec::new();
        let Some(issue) = converge(forge, found, &mut restored).await? else {
            return Ok(Steering::default());
        };
        let mut steering = match Kept::read(&issue.body) {
            Ok(k) => Steering {
                kept: k.unwrap_or_default(),
                ..Steering::default()
            },
            Err(e) => {
                tracing::warn!(issue = issue.number, error = %e, "dashboard state block does not read; planning holds");
                Steering {
                    hold: Some(format!(
                        "the state block of dashboard issue #{} does not read: {e}",
                        issue.number
                    )),
                    problem: Some(e.to_string()),
                    kept_block: Kept::raw_block(&issue.body).map(str::to_owned),
                    leave_alone: e.newer,
                    ..Steering::default()
                }
            }
        };
        for note in restored {
            steering.kept.note(note);
        }
        let actions = kept::ticked(&issue.body);
        // Boxes change the kept state: with a block that does not read
        // they wait (ticked) until it does.
        if !actions.is_empty() && steering.problem.is_some() {
            steering.leave_alone = true;
        }
        if !actions.is_empty() && steering.problem.is_none() {
            let before = steering.kept.clone();
            if let Err(e) = apply(forge, journal, clock, &mut steering.kept, &issue, &actions).await
            {
                tracing::warn!(issue = issue.number, error = %e, "who ticked the dashboard issue's boxes could not be read; planning holds");
                steering.kept = before;
                steering.leave_alone = true;
                steering.hold = Some(format!(
                    "the boxes ticked on dashboard issue #{} could not be checked: {e}",
                    issue.number
                ));
            }
        }
        steering.issue = Some(issue);
        Ok(steering)
    })
}

/// [`steer`] as a pass uses it: when the issue cannot be read at all, the
/// steering of [`Steering::unread`] (logged), so the pass plans nothing a
/// decision on the issue could cover and writes nothing to it.
pub async fn steer_or_hold(forge: &Github, journal: &dyn Journal, clock: &dyn Clock) -> Steering {
    match steer(forge, journal, clock).await {
        Ok(s) => s,
        Err(e) => {
            log_error("reading", &e);
            Steering::unread(&e)
        }
    }
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
                Action::IgnoreFamily { family } => ignore(kept, action, family, None, &by, now),
                Action::IgnoreImage { family, image } => {
                    ignore(kept, action, family, Some(image.clone()), &by, now)
                }
                Action::Unignore { family, image } => unignore(kept, family, image, &by),
                Action::Retry { family } => retry(journal, clock, family, &by).await,
                Action::AddPlaybookEntry { id } => learned::accept(forge, kept, id, &by).await,
                Action::RunNow { family } => run_now(kept, family, &by, now),
            };
            kept.note(format!("{} — {note}", now.format("%Y-%m-%d %H:%M UTC")));
        }
        Ok(())
    })
}

/// Ignores `family` (or only `image` for it) as `by` ticked, within the
/// dashboard's bound; the note says what was done.
fn ignore(
    kept: &mut Kept,
    action: &Action,
    family: &str,
    image: Option<String>,
    by: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> String {
    let exists = kept
        .ignores
        .iter()
        .any(|i| i.family == *family && i.image == image);
    if !exists && kept.ignores.len() >= kept::MAX_IGNORES {
        return format!(
            "Not applied: {} — the dashboard keeps at most {} ignores; undo one first. / 未执行：忽略项已满。",
            action.code(),
            kept::MAX_IGNORES
        );
    }
    if !exists {
        kept.ignores.push(KeptIgnore {
            family: family.to_owned(),
            image: image.clone(),
            by: by.to_owned(),
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

/// Undoes an ignore of `family` (or of its `image`).
fn unignore(kept: &mut Kept, family: &str, image: &Option<String>, by: &str) -> String {
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

/// Asks the next wave to plan `family` first, within the dashboard's bound.
fn run_now(kept: &mut Kept, family: &str, by: &str, now: chrono::DateTime<chrono::Utc>) -> String {
    if kept.run_now.iter().any(|r| r.family == *family) {
        format!("`{family}` is already asked to run on the next wave. / 已在下一轮优先运行之列。")
    } else if kept.run_now.len() >= kept::MAX_RUN_NOW {
        format!(
            "Not applied: run `{family}` now — at most {} families wait to run now. / 未执行：待运行的系列已满。",
            kept::MAX_RUN_NOW
        )
    } else {
        kept.run_now.push(KeptRunNow {
            family: kept::clip(family),
            by: by.to_owned(),
            at: now,
        });
        format!(
            "Applied for @{by}: the next wave plans `{family}` first, whatever its budget. / 已执行：下一轮将优先计划此系列。"
        )
    }
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
        let view = view_of(forge, steering, &options, &records, clock.now());
        let previous = steering.issue.as_ref().map(|i| i.body.as_str());
        // A PR a person closed this pass (or an earlier one whose publish
        // failed) becomes a rule kept in the issue itself.
        let mut kept = steering.kept.clone();
        kept.absorb_declined(&declined_in(&records), clock.now());
        learned::absorb(&mut kept, &records);
        if let Err(e) = learned::drop_accepted(forge, &mut kept).await {
            tracing::warn!(error = %e, "the playbook could not be read; learned entries stay listed");
        }
        if let Some(summary) = options.summary {
            render::settle_run_now(&mut kept, summary, &records, options.cooldown, clock.now());
        }
        let mut body = render::body(&view, &kept, previous, steering.problem.as_deref());
        if let Some(raw) = &steering.kept_block {
            // A block this Klaud cannot read is somebody's decision record
            // all the same: it goes back exactly as it was.
            let ours = kept.block();
            if let Some(at) = body.rfind(&ours) {
                body.replace_range(at..at + ours.len(), raw);
            }
        }
        write_body(forge, steering, &body, options.may_open).await
    })
}

/// What the issue shows of this pass: the records, the wave's plan and
/// statuses, the sick nodes.
fn view_of<'v>(
    forge: &Github,
    steering: &'v Steering,
    options: &Publish<'v>,
    records: &'v [CandidateRecord],
    now: chrono::DateTime<chrono::Utc>,
) -> View<'v> {
    let repo = forge.repo();
    let web = web_of(steering.issue.as_ref(), records)
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
    View {
        web,
        base_branch: options.base_branch.clone(),
        records,
        plan,
        waiting,
        cooldown: options.cooldown,
        now,
        web_dashboard: options.web_dashboard.clone(),
        sick_nodes: steering.sick_nodes.as_ref().map(|s| s.rows.as_slice()),
    }
}

/// Writes `body` when it changed: edits the issue (unless a person edited
/// it since the pass read it), or opens one when there is none and this
/// pass may.
async fn write_body(
    forge: &Github,
    steering: &Steering,
    body: &str,
    may_open: bool,
) -> Result<Published, GithubError> {
    match &steering.issue {
        // Nothing is known of the issue, or it is left alone this pass
        // (see `leave_alone`): writing now could lose a decision.
        None if steering.hold.is_some() => Ok(Published::Absent),
        Some(issue) if steering.leave_alone => Ok(Published::Unchanged(issue.clone())),
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
                    forge.edit_own_issue(issue, Some(body)).await?,
                )),
            }
        }
        None if !may_open => Ok(Published::Absent),
        None => {
            let opened = forge.open_issue(TITLE, body, LABEL).await?;
            // Another instance may have opened one at the same time:
            // everybody keeps the lowest number.
            let found = dashboards(forge).await?;
            match converge(forge, found, &mut Vec::new()).await? {
                Some(kept) if kept.number != opened.number => Ok(Published::Unchanged(kept)),
                _ => Ok(Published::Opened(opened)),
            }
        }
    }
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
        // While the issue cannot be read, one may exist: never open another.
        if steering.issue.is_some() || steering.hold.is_some() {
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
