//! The dashboard issue's body, in English with Chinese beside every
//! heading, label and box, from what the wave and the journal already
//! know. Nothing in it depends on the time of the pass, so a pass that
//! changed nothing renders the same bytes and edits nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use klaud_lifecycle::engine::{CandidateRecord, Step};
use klaud_lifecycle::model::Outcome;
use klaud_planner::image::ImageRef;
use klaud_planner::plan::{BlockKind, FamilyPlan, Status};

use super::kept::{Action, Kept, untick};

/// Marks Klaud's dashboard issue (found again by it).
pub const MARKER: &str = "<!-- klaud:dashboard -->";
/// The part rendered from the latest plan, kept as is by a pass that made
/// no plan.
const PLAN_START: &str = "<!-- klaud:plan-start -->";
const PLAN_END: &str = "<!-- klaud:plan-end -->";
/// The latest plan's stale count, read again by a pass without a plan.
const STALE_OPEN: &str = "<!-- klaud:stale ";
/// Most finished candidates listed under "failed recently".
const MAX_FAILED: usize = 10;
/// Most rows in one planned section (the rest are counted), tried in
/// turn until the body fits in [`MAX_BODY`].
const ROWS: [usize; 4] = [60, 20, 5, 0];
/// GitHub refuses an issue body over 65536 characters; this leaves room.
pub const MAX_BODY: usize = 60_000;

/// The latest plan's families.
pub struct PlanView<'a> {
    /// Every family planned.
    pub families: &'a [FamilyPlan],
    /// Families or master files that did not read, naming file and line.
    pub unreadable: &'a [String],
}

/// What the body is rendered from.
pub struct View<'a> {
    /// The repository's web address, `https://github.com/OWNER/NAME`.
    pub web: String,
    /// The base branch (links to the master config's lines).
    pub base_branch: String,
    /// This instance's journal records.
    pub records: &'a [CandidateRecord],
    /// The plan of this pass; `None`: keep the last one shown.
    pub plan: Option<PlanView<'a>>,
    /// What each unfinished candidate waits for (the wave's status), by id.
    pub waiting: BTreeMap<String, String>,
    /// How long a finished family is left alone.
    pub cooldown: Duration,
    /// Now (decides only whether a cooldown is over; never printed).
    pub now: DateTime<Utc>,
    /// The web dashboard, when `klaud serve` runs one.
    pub web_dashboard: Option<String>,
    /// The sick nodes this pass read from GitHub's runs; `None`: keep the
    /// section the issue shows.
    pub sick_nodes: Option<&'a [klaud_lifecycle::playbook::sick::SickNodeRow]>,
}

pub(super) use klaud_render::escape::{code, link};

/// Longest outside text shown in a table cell or list item.
const MAX_TEXT: usize = 400;

/// Text for a table cell or list item, by the rule every text Klaud
/// writes on GitHub follows (`klaud_render::escape`), its runs of white
/// space squeezed to one space first. Klaud's own sentences here (notes,
/// reasons, messages) name families and images in code spans and live in
/// a body people edit, so backtick pairs stay code spans, escaped as such.
pub(super) fn text(t: &str) -> String {
    let squeezed = t.split_whitespace().collect::<Vec<_>>().join(" ");
    klaud_render::escape::text_with_code(&squeezed, MAX_TEXT)
}

/// Outside text inside an HTML attribute or element of the body.
fn attr(t: &str) -> String {
    klaud_render::escape::attribute(t, MAX_TEXT)
}

/// An image with its digest cut short, the full reference a hover away:
/// a 64-digit digest pushes a table's other columns off GitHub's width.
fn image(full: &str) -> String {
    let short = crate::dashboard::short_image(full);
    if short == full {
        return code(full);
    }
    format!("<code title=\"{}\">{}</code>", attr(full), attr(&short))
}

fn time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

impl View<'_> {
    /// The family's line in its master config: `configs/x.yaml:key` at
    /// `line`.
    fn config_link(&self, family: &str, line: Option<usize>) -> String {
        let file = family.rsplit_once(':').map_or(family, |(f, _)| f);
        let anchor = line.filter(|l| *l > 0).map(|l| format!("#L{l}"));
        format!(
            "{} ({})",
            code(family),
            link(
                "config / 配置",
                &format!(
                    "{}/blob/{}/{file}{}",
                    self.web,
                    self.base_branch,
                    anchor.unwrap_or_default()
                )
            )
        )
    }

    /// The family's key linked to its line in the master config: the
    /// compact form for table cells.
    fn key_link(&self, family: &str) -> String {
        let (file, key) = family.rsplit_once(':').unwrap_or(("", family));
        let anchor = self
            .line_of(family)
            .filter(|l| *l > 0)
            .map(|l| format!("#L{l}"))
            .unwrap_or_default();
        let url = format!("{}/blob/{}/{file}{anchor}", self.web, self.base_branch);
        if file.is_empty() || !klaud_render::escape::is_safe_url(&url) {
            return code(family);
        }
        format!("[{}]({url})", code(key))
    }

    fn pr(rec: &CandidateRecord) -> String {
        match (&rec.pull_url, rec.pull) {
            (Some(url), Some(n)) => link(&format!("#{n}"), url),
            (Some(url), None) => link("PR", url),
            _ => "—".to_owned(),
        }
    }

    fn run(rec: &CandidateRecord) -> String {
        rec.runs().last().map_or_else(
            || "—".to_owned(),
            |r| link(&format!("run {} #{}", r.id, r.attempt), &r.attempt_url()),
        )
    }

    fn line_of(&self, family: &str) -> Option<usize> {
        self.plan
            .as_ref()
            .and_then(|p| p.families.iter().find(|f| f.family == family))
            .map(|f| f.line)
    }
}

/// The head of a candidate's ended regression hunt (its verdict, the last
/// good and first bad tag, their commit range), English then Chinese, as
/// nested items under its row; the whole result is in its receipt. The
/// lines are rendered (and escaped) by the hunt.
fn hunt_lines(rec: &CandidateRecord) -> String {
    const SHOWN: usize = 3;
    rec.hunt
        .en
        .iter()
        .take(SHOWN)
        .chain(rec.hunt.zh.iter().take(SHOWN))
        .map(|line| format!("  - {line}\n"))
        .collect()
}

fn ending(rec: &CandidateRecord) -> Option<&klaud_lifecycle::engine::Ending> {
    rec.ending.as_ref().filter(|_| rec.step == Step::Done)
}

/// The normalized `repository:tag` of an image as written, for an
/// ignore-this-image box.
pub fn image_key(image: &str) -> Option<String> {
    let r = ImageRef::parse(image).ok()?;
    Some(format!("{}:{}", r.normalized_repository(), r.tag()?))
}

/// The body for `view`, keeping `kept` in its hidden block; `previous`
/// is the body now on the issue (its plan part stays when `view` has no
/// plan); `problem` is why its state block did not read.
pub fn body(view: &View<'_>, kept: &Kept, previous: Option<&str>, problem: Option<&str>) -> String {
    let mut out = String::new();
    for rows in ROWS {
        out = body_with(view, kept, previous, problem, rows);
        if out.chars().count() <= MAX_BODY {
            break;
        }
    }
    out
}

// The body's parts in the order they stand; each pushes its section.
fn body_with(
    view: &View<'_>,
    kept: &Kept,
    previous: Option<&str>,
    problem: Option<&str>,
    rows: usize,
) -> String {
    let mut out = String::new();
    push_header(&mut out, view);
    let records = view.records;
    let awaiting: Vec<&CandidateRecord> = records
        .iter()
        .filter(|r| {
            ending(r).is_some_and(|e| e.outcome == Outcome::Validated)
                && r.upkeep.as_ref().is_none_or(|u| u.settled.is_none())
        })
        .collect();
    let running: Vec<&CandidateRecord> = records.iter().filter(|r| r.step != Step::Done).collect();

    let (part, stale) = match &view.plan {
        Some(plan) => plan_part(view, kept, plan, rows),
        None => previous_plan_part(previous),
    };
    let state = if stale > 0 {
        "**Stale / 有待更新**"
    } else if !running.is_empty() {
        "**In progress / 进行中**"
    } else {
        "**Up to date / 已是最新**"
    };
    out.push_str(&format!(
        "\n{state} — {stale} stale / 待更新 · {} in progress / 进行中 · {} awaiting merge / 等待合并\n",
        running.len(),
        awaiting.len()
    ));
    out.push_str(&part);
    push_awaiting(&mut out, view, &awaiting);
    push_running(&mut out, view, &running);
    push_cooling(&mut out, view);
    let (failed, other): (Vec<&CandidateRecord>, Vec<&CandidateRecord>) = records
        .iter()
        .filter(|r| ending(r).is_some_and(|e| e.outcome != Outcome::Validated))
        .partition(|r| ending(r).is_some_and(|e| is_failure(e.outcome)));
    out.push_str("\n### Failed recently / 最近失败\n\n");
    push_ended(&mut out, view, failed, rows);
    // Duplicates, capacity deferrals, hand-offs and the like are no
    // failure of the image: listed apart so a real failure stands out.
    out.push_str("\n### Duplicates, deferrals and other ends / 重复、延后及其他结束\n\n");
    push_ended(&mut out, view, other, rows);
    push_experiments(&mut out, view);
    super::nodes::push(&mut out, view.sick_nodes, previous);
    push_ignores(&mut out, kept);
    super::learned::push_learned(&mut out, &view.web, kept);
    push_steering(&mut out, kept, problem);
    out
}

/// The marker, the title, what the issue is for and the web dashboard.
fn push_header(out: &mut String, view: &View<'_>) {
    out.push_str(MARKER);
    out.push_str("\n## Klaud dashboard / Klaud 看板\n\n");
    out.push_str(
        "Klaud keeps this issue current on every pass; tick a box and the next pass applies it, says so below and unticks it. Only people with write access to the repository steer Klaud.\n\
         Klaud 每次运行都会更新此 issue；勾选复选框后，下一次运行会执行并在下方说明，然后取消勾选。只有对仓库有写权限的人可以操控 Klaud。\n",
    );
    if let Some(url) = &view.web_dashboard {
        out.push_str(&format!("\nWeb dashboard / 网页看板: {}\n", text(url)));
    }
}

/// Validated PRs awaiting their merge, and their regression hunts.
fn push_awaiting(out: &mut String, view: &View<'_>, awaiting: &[&CandidateRecord]) {
    out.push_str("\n### Awaiting merge / 等待合并\n\n");
    if awaiting.is_empty() {
        out.push_str("None. / 无。\n");
    } else {
        out.push_str("| Family / 系列 | Image / 镜像 | PR | Run / 运行 | Merge / 合并 |\n| --- | --- | --- | --- | --- |\n");
        for r in awaiting {
            let merge = r
                .upkeep
                .as_ref()
                .map(|u| u.describe())
                .filter(|d| !d.is_empty())
                .unwrap_or_else(|| "validated; the sweep run is reusable".to_owned());
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} |\n",
                view.key_link(&r.family),
                image(&r.image),
                View::pr(r),
                View::run(r),
                text(&merge)
            ));
        }
        // A table row has no room for a hunt's lines: a validated PR whose
        // point regressed names its first bad tag below the table.
        let hunted: Vec<&&CandidateRecord> =
            awaiting.iter().filter(|r| !r.hunt.en.is_empty()).collect();
        if !hunted.is_empty() {
            out.push_str("\nRegression hunts / 回归排查:\n\n");
            for r in hunted {
                out.push_str(&format!(
                    "- {} {}\n{}",
                    view.config_link(&r.family, view.line_of(&r.family)),
                    View::pr(r),
                    hunt_lines(r)
                ));
            }
        }
    }
}

/// Candidates on their way, with what each waits for.
fn push_running(out: &mut String, view: &View<'_>, running: &[&CandidateRecord]) {
    out.push_str("\n### In progress / 进行中\n\n");
    if running.is_empty() {
        out.push_str("None. / 无。\n");
    } else {
        out.push_str("| Family / 系列 | Image / 镜像 | Phase / 阶段 | Attempt / 尝试 | Since / 开始于 | Waits for / 等待 | PR | Run / 运行 |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n");
        for r in running {
            let last = r.attempts.last();
            let attempt = last.map_or_else(
                || "—".to_owned(),
                |a| format!("{} · {}", a.kind.title(), a.status),
            );
            let since = last
                .and_then(|a| a.dispatched_at)
                .map_or_else(|| "—".to_owned(), time);
            let waits = view
                .waiting
                .get(r.candidate.as_str())
                .map_or_else(|| "the next pass".to_owned(), |w| text(w));
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                view.key_link(&r.family),
                image(&r.image),
                r.step.as_str(),
                text(&attempt),
                since,
                waits,
                View::pr(r),
                View::run(r)
            ));
        }
    }
}

/// Finished families Klaud leaves alone for now: a failure cools down,
/// a capacity deferral is tried again at the next wave.
fn push_cooling(out: &mut String, view: &View<'_>) {
    let records = view.records;
    let cooldown = TimeDelta::from_std(view.cooldown).unwrap_or(TimeDelta::MAX);
    let mut newest: BTreeMap<&str, &CandidateRecord> = BTreeMap::new();
    for r in records.iter().filter(|r| ending(r).is_some()) {
        let slot = newest.entry(r.family.as_str()).or_insert(r);
        if slot.updated_at < r.updated_at {
            *slot = r;
        }
    }
    let waiting: Vec<&&CandidateRecord> = newest
        .values()
        .filter(|r| {
            ending(r).is_some_and(|e| e.outcome != Outcome::Validated)
                && (r.deferred() || view.now - r.updated_at < cooldown)
        })
        .collect();
    out.push_str("\n### Cooling down or deferred / 冷却或延后\n\n");
    if waiting.is_empty() {
        out.push_str("None. / 无。\n");
    }
    for r in waiting {
        let e = ending(r).map(|e| e.outcome.to_string()).unwrap_or_default();
        let again = if r.deferred() {
            "capacity: deferred, tried again at the next wave / 容量不足：下一轮重试".to_owned()
        } else {
            format!(
                "cooldown after `{e}` until {} / 冷却至 {}",
                time(r.updated_at + cooldown),
                time(r.updated_at + cooldown)
            )
        };
        let pr = Some(View::pr(r))
            .filter(|l| l != "—")
            .map_or_else(String::new, |l| format!(" — {l}"));
        out.push_str(&format!(
            "- {} → {} — {again}{pr}\n",
            view.config_link(&r.family, view.line_of(&r.family)),
            image(&r.image),
        ));
        if !r.deferred() {
            out.push_str("  ");
            out.push_str(
                &Action::Retry {
                    family: r.family.clone(),
                }
                .checkbox("Retry now / 立即重试"),
            );
            out.push('\n');
        }
    }
}

/// The experiments and the state of each variant.
fn push_experiments(out: &mut String, view: &View<'_>) {
    let records = view.records;
    let experiments = crate::dashboard::experiment_rows(records);
    if !experiments.is_empty() {
        out.push_str("\n### Experiments / 实验\n\n");
        for x in &experiments {
            let variants: Vec<String> = x
                .variants
                .iter()
                .map(|v| {
                    let pr = v
                        .pull_request
                        .as_ref()
                        .map_or_else(String::new, |l| format!(" {}", link(&l.label, &l.url)));
                    format!("{}: {}{pr}", text(&v.name), text(&v.state))
                })
                .collect();
            out.push_str(&format!(
                "- {} {} — {}\n",
                view.config_link(&x.family, view.line_of(&x.family)),
                code(&x.experiment),
                variants.join(", ")
            ));
        }
    }
}

/// The ignores in force, each with its undo box.
fn push_ignores(out: &mut String, kept: &Kept) {
    out.push_str(
        "\n### Ignored on this dashboard or by closing a PR / 在此看板上或因关闭 PR 而忽略\n\n",
    );
    if kept.ignores.is_empty() {
        out.push_str("None. / 无。\n");
    }
    for ig in &kept.ignores {
        let what = match &ig.image {
            Some(image) => format!(
                "image {} for {} (until a newer one / 直到有更新的镜像)",
                code(image),
                code(&ig.family)
            ),
            None => format!("family {} / 整个系列", code(&ig.family)),
        };
        let how = match ig.pull {
            Some(n) => format!("closed #{n} without merging / 未合并即关闭 #{n}"),
            None => "on this dashboard / 在此看板上".to_owned(),
        };
        out.push_str(&format!(
            "- {what}: {} {how}, {}\n  {}\n",
            text(&format!("@{}", ig.by)),
            time(ig.at),
            Action::Unignore {
                family: ig.family.clone(),
                image: ig.image.clone(),
            }
            .checkbox("Undo / 撤销")
        ));
    }
}

/// What steering did, a warning when the state block did not read, and
/// the state block itself.
fn push_steering(out: &mut String, kept: &Kept, problem: Option<&str>) {
    out.push_str("\n### Steering / 操控记录\n\n");
    if let Some(p) = problem {
        out.push_str(&format!(
            "> [!WARNING]\n> Klaud could not read the state it keeps in this issue (the hidden `klaud:state` block at the end), so it starts no new candidate until the block reads again; it keeps the block as it is. Restore the block from the issue's edit history, or delete it to start over without the ignores it holds: {}\n> Klaud 无法读取此 issue 末尾隐藏的 `klaud:state` 状态块，在它恢复可读之前不会开始新的候选；该状态块保持原样。请从编辑历史中恢复它，或删除它以清空其中的忽略设置。\n\n",
            text(p)
        ));
    }
    if kept.notes.is_empty() {
        out.push_str("Nothing applied yet. / 尚无操作。\n");
    }
    for n in &kept.notes {
        out.push_str(&format!("- {}\n", text(n)));
    }
    out.push('\n');
    out.push_str(&kept.block());
    out.push('\n');
}

/// Whether a candidate that ended with `outcome` failed (as opposed to
/// ending because another PR, the capacity, the repository or a person
/// decided so).
fn is_failure(outcome: Outcome) -> bool {
    matches!(
        outcome,
        Outcome::Failed | Outcome::Incompatible | Outcome::Uncertain | Outcome::UnexpectedError
    )
}

/// The newest of `ended` as list items, each with its outcome, message,
/// PR, run and regression hunt.
fn push_ended(out: &mut String, view: &View<'_>, mut ended: Vec<&CandidateRecord>, rows: usize) {
    ended.sort_by_key(|r| std::cmp::Reverse((r.updated_at, r.candidate.to_string())));
    if ended.is_empty() {
        out.push_str("None. / 无。\n");
    }
    for r in ended.into_iter().take(MAX_FAILED.min(rows.max(1))) {
        let Some(e) = ending(r) else { continue };
        // A candidate that ended before its PR or run existed has neither:
        // no placeholder dashes for them.
        let links: Vec<String> = [View::pr(r), View::run(r)]
            .into_iter()
            .filter(|l| l != "—")
            .collect();
        let links = if links.is_empty() {
            String::new()
        } else {
            format!(" — {}", links.join(" "))
        };
        out.push_str(&format!(
            "- {} {} → {}: **{}** ({}) — {}{links}\n",
            time(r.updated_at),
            view.config_link(&r.family, view.line_of(&r.family)),
            image(&r.image),
            e.outcome,
            e.phase,
            text(&e.message),
        ));
        out.push_str(&hunt_lines(r));
    }
}

/// The plan part of `previous` and its stale count, its boxes unticked
/// (a pass without a plan keeps what the last plan showed).
fn previous_plan_part(previous: Option<&str>) -> (String, usize) {
    let part = previous.and_then(|b| {
        let start = b.find(PLAN_START)?;
        let end = b[start..].find(PLAN_END)? + start + PLAN_END.len();
        Some(&b[start..end])
    });
    match part {
        Some(p) => {
            let stale = p
                .find(STALE_OPEN)
                .map(|i| &p[i + STALE_OPEN.len()..])
                .and_then(|r| r.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            (format!("\n{}\n", untick(p)), stale)
        }
        None => (
            format!("\n{PLAN_START}\nNo plan yet. / 尚无计划。\n{PLAN_END}\n"),
            0,
        ),
    }
}

fn plan_part(view: &View<'_>, kept: &Kept, plan: &PlanView<'_>, rows: usize) -> (String, usize) {
    let fams = plan.families;
    let blocked = |f: &&FamilyPlan| f.blocked.is_some();
    // The plan was made at the start of the pass; what the wave did since
    // (a PR opened, a candidate validated or merged, one that failed and
    // now cools down) is in the journal, and the issue shows the end.
    let (stale, moved): (Vec<&FamilyPlan>, Vec<&FamilyPlan>) = fams
        .iter()
        .filter(|f| {
            f.blocked.is_none() && matches!(f.status, Status::StaleNewer | Status::StalePruned)
        })
        .partition(|f| taken_up(view, f).is_none());
    let held: Vec<&FamilyPlan> = fams
        .iter()
        .filter(blocked)
        .filter(|f| {
            f.blocked
                .as_ref()
                .is_some_and(|b| b.kind != BlockKind::Ignored)
        })
        .collect();
    let ignored: Vec<&FamilyPlan> = fams
        .iter()
        .filter(|f| {
            f.blocked
                .as_ref()
                .is_some_and(|b| b.kind == BlockKind::Ignored)
        })
        .collect();
    let broken: Vec<&FamilyPlan> = fams
        .iter()
        .filter(|f| f.blocked.is_none() && matches!(f.status, Status::Error | Status::UnknownTrack))
        .collect();
    let current = fams
        .iter()
        .filter(|f| f.blocked.is_none() && f.status == Status::UpToDate)
        .count();
    let mut out = format!(
        "\n{PLAN_START}\n{STALE_OPEN}{} -->\nLatest plan / 最新计划: {} stale / 待更新 · {} held / 暂缓 · {} ignored / 已忽略 · {} unreadable / 无法读取 · {current} up to date / 已是最新\n",
        stale.len(),
        stale.len(),
        held.len(),
        ignored.len(),
        broken.len() + plan.unreadable.len()
    );

    push_stale(&mut out, view, kept, (&stale, &moved), rows);
    push_held(&mut out, view, &held, rows);
    push_ignored(&mut out, view, &ignored, rows);
    push_broken(&mut out, view, (&broken, plan.unreadable), rows);
    out.push_str(PLAN_END);
    out.push('\n');
    (out, stale.len())
}

/// "… and N more" under a list cut at `rows`.
fn push_more(out: &mut String, rows: usize, n: usize) {
    if n > rows {
        out.push_str(&format!(
            "- … and {} more / 另有 {} 个\n",
            n - rows,
            n - rows
        ));
    }
}

/// The stale families the next wave takes up, each with its boxes, and
/// those the wave took up since the plan.
fn push_stale(
    out: &mut String,
    view: &View<'_>,
    kept: &Kept,
    (stale, moved): (&[&FamilyPlan], &[&FamilyPlan]),
    rows: usize,
) {
    out.push_str("\n### Stale, planned next / 待更新\n\n");
    if stale.is_empty() {
        out.push_str("None. / 无。\n");
    }
    for f in stale.iter().take(rows) {
        let to = f
            .candidate
            .as_ref()
            .map(|c| format!(" → {}", image(&c.image.to_string())))
            .unwrap_or_default();
        let pruned = if f.status == Status::StalePruned {
            " — current tag pruned upstream / 当前标签已被上游删除"
        } else {
            ""
        };
        out.push_str(&format!(
            "- {} {}{to}{pruned}\n",
            view.config_link(&f.family, Some(f.line)),
            image(&f.current)
        ));
        push_run_now(out, kept, f);
        push_ignore_boxes(out, f);
    }
    push_more(out, rows, stale.len());
    if !moved.is_empty() {
        let names: Vec<String> = moved
            .iter()
            .take(rows.max(1))
            .map(|f| {
                let key = f
                    .family
                    .rsplit_once(':')
                    .map_or(f.family.as_str(), |(_, k)| k);
                format!("{} ({})", code(key), taken_up(view, f).unwrap_or_default())
            })
            .collect();
        let rest = moved.len().saturating_sub(rows.max(1));
        let rest = if rest > 0 {
            format!(" … +{rest}")
        } else {
            String::new()
        };
        out.push_str(&format!(
            "\nTaken up since the plan / 计划后已处理: {}{rest}\n",
            names.join(", ")
        ));
    }
}

/// The families a rule holds back, with when Klaud looks again.
fn push_held(out: &mut String, view: &View<'_>, held: &[&FamilyPlan], rows: usize) {
    out.push_str("\n### Deferred or blocked / 暂缓或受阻\n\n");
    if held.is_empty() {
        out.push_str("None. / 无。\n");
    }
    for f in held.iter().take(rows) {
        let Some(b) = &f.blocked else { continue };
        let again = match b.kind {
            BlockKind::Retired => "never (retired) / 不再检查（已退役）",
            BlockKind::Duplicate => "when that PR closes / 该 PR 关闭后",
            BlockKind::Occupied => "when Klaud's PR ends / Klaud 的 PR 结束后",
            BlockKind::ReadinessBlocked => {
                "at the next wave, once the baseline is published / 基线发布后的下一轮"
            }
            BlockKind::Ignored => "when the ignore is undone / 撤销忽略后",
        };
        out.push_str(&format!(
            "- {} — **{}**: {} — looks again / 再次检查: {again}\n",
            view.config_link(&f.family, Some(f.line)),
            b.kind.as_str(),
            text(&b.reason)
        ));
        if b.kind != BlockKind::Retired {
            push_ignore_boxes(out, f);
        }
    }
    push_more(out, rows, held.len());
}

/// The families an ignore holds back, with its reason.
fn push_ignored(out: &mut String, view: &View<'_>, ignored: &[&FamilyPlan], rows: usize) {
    out.push_str("\n### Ignored / 已忽略\n\n");
    if ignored.is_empty() {
        out.push_str("None. / 无。\n");
    }
    for f in ignored.iter().take(rows) {
        let why = f.blocked.as_ref().map_or("", |b| b.reason.as_str());
        out.push_str(&format!(
            "- {} — {}\n",
            view.config_link(&f.family, Some(f.line)),
            text(why)
        ));
    }
    push_more(out, rows, ignored.len());
}

/// The files and families the plan could not read.
fn push_broken(
    out: &mut String,
    view: &View<'_>,
    (broken, unreadable): (&[&FamilyPlan], &[String]),
    rows: usize,
) {
    out.push_str("\n### Does not parse or resolve / 无法解析\n\n");
    if broken.is_empty() && unreadable.is_empty() {
        out.push_str("None. / 无。\n");
    }
    for u in unreadable.iter().take(rows) {
        out.push_str(&format!("- {}\n", text(u)));
    }
    for f in broken.iter().take(rows) {
        let why = f.reasons.first().map_or("", String::as_str);
        out.push_str(&format!(
            "- {} — {}: {}\n",
            view.config_link(&f.family, Some(f.line)),
            match f.status {
                Status::UnknownTrack => "tag has no order Klaud knows / 标签无法排序",
                _ => "the registry could not be asked / 无法访问镜像仓库",
            },
            text(why)
        ));
    }
    push_more(out, rows, broken.len() + unreadable.len());
}

/// Why a stale family of the plan is no longer "planned next" at the end
/// of the pass: its candidate is in flight, validated (awaiting merge or
/// merged) or cooling down after it ended. `None`: the next wave plans it.
fn taken_up(view: &View<'_>, f: &FamilyPlan) -> Option<&'static str> {
    let ours = view.records.iter().filter(|r| r.family == f.family);
    if ours.clone().any(|r| r.step != Step::Done) {
        return Some("in progress / 进行中");
    }
    let newest = ours
        .filter(|r| ending(r).is_some())
        .max_by_key(|r| r.updated_at)?;
    let e = ending(newest)?;
    let same_image = f.candidate.as_ref().is_some_and(|c| {
        let planned = c.image.normalized();
        ImageRef::parse(&newest.image).map_or(newest.image == c.image.to_string(), |i| {
            i.normalized() == planned
        })
    });
    let cooldown = TimeDelta::from_std(view.cooldown).unwrap_or(TimeDelta::MAX);
    if e.outcome == Outcome::Validated && same_image {
        return Some(
            match newest.upkeep.as_ref().and_then(|u| u.settled.as_ref()) {
                Some(_) => "validated, merged or closed / 已验证，已合并或关闭",
                None => "validated, awaiting merge / 已验证，等待合并",
            },
        );
    }
    if e.outcome != Outcome::Validated
        && !newest.deferred()
        && view.now - newest.updated_at < cooldown
    {
        return Some("cooling down / 冷却中");
    }
    None
}

/// The run-now box of a stale family, or the note that a maintainer
/// asked already (the next wave plans it first).
fn push_run_now(out: &mut String, kept: &Kept, f: &FamilyPlan) {
    out.push_str("  ");
    match kept.run_now.iter().find(|r| r.family == f.family) {
        Some(r) => out.push_str(&format!(
            "- run now asked by {} {}: the next wave plans it first / 已请求立即运行，下一轮优先计划\n",
            text(&format!("@{}", r.by)),
            time(r.at)
        )),
        None => {
            out.push_str(
                &Action::RunNow {
                    family: f.family.clone(),
                }
                .checkbox("Run now: plan it first on the next wave / 立即运行：下一轮优先计划"),
            );
            out.push('\n');
        }
    }
}

/// Settles the run-now requests a wave planned with (`summary`): each ends
/// with a note saying what became of it, except one still waiting for a
/// wave that may start a candidate (the pass planned nothing, or had no
/// free slot), which stays asked.
pub fn settle_run_now(
    kept: &mut Kept,
    summary: &klaud_lifecycle::wave::WaveSummary,
    records: &[CandidateRecord],
    cooldown: Duration,
    now: DateTime<Utc>,
) {
    if summary.families.is_empty() || kept.run_now.is_empty() {
        return;
    }
    let view = View {
        web: String::new(),
        base_branch: String::new(),
        records,
        plan: None,
        waiting: BTreeMap::new(),
        cooldown,
        now,
        web_dashboard: None,
        sick_nodes: None,
    };
    let mut notes = Vec::new();
    kept.run_now.retain(|r| {
        let family = &r.family;
        let started = summary.candidates.iter().find(|c| c.family == *family);
        let planned = summary.families.iter().find(|f| f.family == *family);
        let said = match (started, planned) {
            (Some(c), _) => Some(format!(
                "Run now `{family}` (asked by @{}): started {}{}. / 已开始运行。",
                r.by,
                crate::dashboard::short_image(&c.image),
                c.pull_request
                    .as_deref()
                    .map(|u| format!(", {u}"))
                    .unwrap_or_default()
            )),
            (None, None) => Some(format!(
                "Run now `{family}` (asked by @{}): the plan has no such family. / 计划中没有此系列。",
                r.by
            )),
            (None, Some(f)) => match (&f.blocked, f.status) {
                (Some(b), _) => Some(format!(
                    "Run now `{family}` (asked by @{}): not started, it is {}: {}. / 未开始：受阻。",
                    r.by,
                    b.kind.as_str(),
                    b.reason
                )),
                (None, Status::StaleNewer | Status::StalePruned) => {
                    taken_up(&view, f).map(|why| {
                        format!(
                            "Run now `{family}` (asked by @{}): not started, {why}; tick its Retry box to lift a cooldown. / 未开始。",
                            r.by
                        )
                    })
                }
                (None, Status::UpToDate) => Some(format!(
                    "Run now `{family}` (asked by @{}): it is up to date, nothing to run. / 已是最新，无需运行。",
                    r.by
                )),
                (None, _) => Some(format!(
                    "Run now `{family}` (asked by @{}): not started, its images do not resolve (see below). / 未开始：无法解析。",
                    r.by
                )),
            },
        };
        match said {
            Some(n) => {
                notes.push(format!("{} — {n}", now.format("%Y-%m-%d %H:%M UTC")));
                false
            }
            None => true,
        }
    });
    for n in notes {
        kept.note(n);
    }
}

fn push_ignore_boxes(out: &mut String, f: &FamilyPlan) {
    if let Some(image) = f
        .candidate
        .as_ref()
        .and_then(|c| image_key(&c.image.to_string()))
    {
        out.push_str("  ");
        out.push_str(
            &Action::IgnoreImage {
                family: f.family.clone(),
                image: image.clone(),
            }
            .checkbox(&format!(
                "Ignore {} until a newer image / 忽略此镜像直到有更新的",
                code(&image)
            )),
        );
        out.push('\n');
    }
    out.push_str("  ");
    out.push_str(
        &Action::IgnoreFamily {
            family: f.family.clone(),
        }
        .checkbox("Ignore this family / 忽略此系列"),
    );
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_image_keeps_the_full_reference_on_hover_and_cannot_break_out() {
        let full = "lmsysorg/sglang:v0.5.17@sha256:d6e7288627be8b02be88e4bba38e73f6d50e2826869f753c13a4c4385ab3eda9";
        assert_eq!(
            image(full),
            format!("<code title=\"{full}\">lmsysorg/sglang:v0.5.17@sha256:d6e7288627be…</code>")
        );
        // Without a digest there is nothing to cut: plain code.
        assert_eq!(image("vllm/vllm-openai:v1"), "`vllm/vllm-openai:v1`");
        let hostile = "x\"><script>|**_`[a](b)@sha256:0123456789abcdef0123";
        let shown = image(hostile);
        for bad in ["<script", "|", "**", "`", "[a]"] {
            assert!(!shown.contains(bad), "{bad} in {shown}");
        }
        // The only quotes are the title's own.
        assert_eq!(shown.matches('"').count(), 2, "{shown}");
    }
}
