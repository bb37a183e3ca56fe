//! What a hunt publishes, in English and Chinese: the plan when it starts,
//! one comment per step as it ends (tag, result, value against the
//! baseline), the result (last good and first bad tag, their upstream
//! commits, the compare link, the commits of that step touching the engine
//! paths the flag audit knows). The same lines serve the receipt,
//! `klaud status` and the dashboards ([`result_lines`]).

use klaud_planner::audit::EngineDefinitions;
use klaud_render::{Bilingual, bi};
use serde::{Deserialize, Serialize};

use super::{EndReason, HuntPlan, HuntResult, HuntTag, Probe, StepRecord, Verdict};
use crate::report::format::{code, link, number, text};
use crate::report::markers::MarkerKey;

/// One upstream commit of the step between the last good and first bad tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepCommit {
    /// Sha.
    pub sha: String,
    /// The first line of its message.
    pub title: String,
    /// The engine paths it touches (see [`engine_commits`]).
    pub paths: Vec<String>,
}

/// Keeps the commits of `commits` (sha, message, changed paths) that touch a
/// path where `engines` of `repository` define flags or variables, with
/// those paths: the first place to look for the regression.
pub fn engine_commits<'a>(
    repository: &str,
    engines: &[EngineDefinitions],
    commits: impl IntoIterator<Item = (&'a str, &'a str, &'a [String])>,
) -> Vec<StepCommit> {
    let relevant: Vec<&EngineDefinitions> = engines
        .iter()
        .filter(|e| e.repository.eq_ignore_ascii_case(repository))
        .collect();
    commits
        .into_iter()
        .filter_map(|(sha, message, files)| {
            let paths: Vec<String> = files
                .iter()
                .filter(|f| relevant.iter().any(|e| e.covers(f)))
                .cloned()
                .collect();
            (!paths.is_empty()).then(|| StepCommit {
                sha: sha.to_owned(),
                title: message.lines().next().unwrap_or_default().to_owned(),
                paths,
            })
        })
        .collect()
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

fn compare_url(upstream: &str, from: &str, to: &str) -> String {
    format!("https://github.com/{upstream}/compare/{from}...{to}")
}

fn tag_words(t: &HuntTag) -> Bilingual {
    let tag = code(&t.tag);
    match &t.commit {
        Some(c) => {
            let c = code(short(c));
            Bilingual::owned(
                format!("{tag} (upstream {c})"),
                format!("{tag}（上游 {c}）"),
            )
        }
        None => Bilingual::owned(
            format!("{tag} (upstream commit unknown)"),
            format!("{tag}（上游提交未知）"),
        ),
    }
}

fn verdict_words(v: Verdict) -> Bilingual {
    match v {
        Verdict::Good => bi!("good", "正常"),
        Verdict::Bad => bi!("bad", "回归"),
        Verdict::Infra => bi!(
            "infrastructure failure (no evidence)",
            "基础设施故障（不作为证据）"
        ),
        Verdict::Gone => bi!(
            "no longer served by the registry (skipped, no run used)",
            "镜像仓库已不再提供（跳过，未使用运行）",
        ),
    }
}

fn reason_words(r: EndReason) -> Bilingual {
    match r {
        EndReason::Found => bi!("first bad tag found", "已找到第一个出问题的标签"),
        EndReason::Budget => bi!(
            "the hunt's budget of runs is spent; narrowest range so far",
            "本次排查的运行预算已用完；以下为目前最窄的范围",
        ),
        EndReason::WeeklyBudget => bi!(
            "this week's budget of hunt runs is spent; narrowest range so far",
            "本周的排查运行预算已用完；以下为目前最窄的范围",
        ),
        EndReason::TagsGone => bi!(
            "the tags left between are no longer served; narrowest range established",
            "范围内剩余的标签已不再提供；以下为已确定的最窄范围",
        ),
        EndReason::Stopped => bi!(
            "stopped by a maintainer; narrowest range so far",
            "已被维护者停止；以下为目前最窄的范围",
        ),
    }
}

fn probe_words(p: &Probe) -> Bilingual {
    match p {
        Probe::Outcome { target } => {
            let target = code(target);
            Bilingual::owned(
                format!("the outcome of {target}"),
                format!("{target} 的结果"),
            )
        }
        Probe::Metric {
            point,
            metric,
            baseline,
            band,
            ..
        } => {
            let (point, label) = (code(point), metric.label());
            let (baseline, band) = (number(*baseline, 2), number(band * 100.0, 1));
            Bilingual::owned(
                format!(
                    "{} of {point} against the baseline {baseline} (noise band ±{band}%)",
                    label.en
                ),
                format!(
                    "{point} 的{}，对照基线 {baseline}（噪声范围 ±{band}%）",
                    label.zh
                ),
            )
        }
    }
}

/// The comment that starts a hunt (its hidden record is the plan).
pub fn render_plan(key: &MarkerKey, plan: &HuntPlan) -> String {
    let mut out = super::record_block(key, plan);
    let n = plan.tags.len();
    let served = plan.served();
    let min = super::minimum_runs(served);
    let (old, new, budget) = (code(&plan.old.tag), code(&plan.new.tag), plan.budget);
    let probe = probe_words(&plan.probe);
    let text = Bilingual::owned(
        format!(
            "**Regression hunt:** between {old} and {new}, {n} tags ({served} still served), at most {budget} runs (a binary search needs {min}). Each step measures {}.\nThis hunt does not change what the candidate concluded.\n",
            probe.en
        ),
        format!(
            "**回归排查**：在 {old} 与 {new} 之间共 {n} 个标签（仍提供 {served} 个），最多 {budget} 次运行（二分查找需要 {min} 次）。每一步测量{}。\n本次排查不会改变候选版本的结论。\n",
            probe.zh
        ),
    );
    out.push_str(&text.folded());
    out
}

fn value_words(plan: &HuntPlan, s: &StepRecord) -> Bilingual {
    let (
        Probe::Metric {
            metric, baseline, ..
        },
        Some(v),
    ) = (&plan.probe, s.value)
    else {
        return Bilingual::default();
    };
    let delta = crate::report::format::delta_percent(v, *baseline).unwrap_or_default();
    let label = metric.label();
    let (v, baseline) = (number(v, 2), number(*baseline, 2));
    Bilingual::owned(
        format!(", {} {v} (baseline {baseline}, {delta})", label.en),
        format!("，{} {v}（基线 {baseline}，{delta}）", label.zh),
    )
}

/// One step's comment, published as the step ends: one line in each
/// language, the Chinese under the English (short enough not to fold).
pub fn render_step(key: &MarkerKey, plan: &HuntPlan, s: &StepRecord) -> String {
    let mut out = super::record_block(key, s);
    let tag = plan
        .tags
        .iter()
        .find(|t| t.tag == s.tag)
        .cloned()
        .unwrap_or_else(|| HuntTag {
            tag: s.tag.clone(),
            digest: None,
            commit: None,
        });
    let n = s.step;
    let mut line = Bilingual::owned(
        format!("**Hunt step {n}:** "),
        format!("**排查第 {n} 步**："),
    );
    line.append(&tag_words(&tag));
    line.push_same(" — ");
    line.append(&verdict_words(s.verdict));
    line.append(&value_words(plan, s));
    if let Some(r) = s.run {
        line.push(format!(" · run {r}"), format!(" · 运行 {r}"));
    }
    out.push_str(&format!("{}\n\n{}\n", line.en, line.zh));
    out
}

/// The result, as lines in both languages for the PR, the receipt,
/// `klaud status` and the dashboards.
pub fn result_lines(plan: &HuntPlan, result: &HuntResult) -> Vec<Bilingual> {
    let commits = &result.commits;
    let mut lines = Vec::new();
    let (good, bad) = (&result.last_good, &result.first_bad);
    let reason = reason_words(result.reason);
    lines.push(Bilingual::owned(
        format!("**Regression hunt:** {}.", reason.en),
        format!("**回归排查**：{}。", reason.zh),
    ));
    let (good, bad) = (tag_words(good), tag_words(bad));
    lines.push(Bilingual::owned(
        format!("Last good: {} · first bad: {}", good.en, bad.en),
        format!("最后一个正常：{} · 第一个出问题：{}", good.zh, bad.zh),
    ));
    if let (Some(from), Some(to)) = (&result.last_good.commit, &result.first_bad.commit) {
        let range = format!("{}...{}", short(from), short(to));
        // Without a configured source repository the range is still the
        // answer a maintainer takes to `git log`; it is just not a link.
        let change = match &plan.upstream {
            Some(up) => format!("{} {}", text(up), link(&range, &compare_url(up, from, to))),
            None => code(&range),
        };
        lines.push(Bilingual::owned(
            format!("Upstream change: {change}"),
            format!("上游变更：{change}"),
        ));
    }
    if !result.untested.is_empty() {
        let tags: Vec<String> = result.untested.iter().take(20).map(|t| code(t)).collect();
        let more = match result.untested.len().saturating_sub(20) {
            0 => Bilingual::default(),
            n => Bilingual::owned(format!(" and {n} more"), format!(" 等另 {n} 个")),
        };
        lines.push(Bilingual::owned(
            format!(
                "Tags in between not established: {}{}",
                tags.join(", "),
                more.en
            ),
            format!("范围内未确定的标签：{}{}", tags.join("、"), more.zh),
        ));
    }
    if !commits.is_empty() {
        let shown: Vec<String> = commits
            .iter()
            .take(20)
            .map(|c| {
                let paths: Vec<String> = c.paths.iter().take(5).map(|p| code(p)).collect();
                format!(
                    "{} {} ({})",
                    code(short(&c.sha)),
                    text(&c.title),
                    paths.join(", ")
                )
            })
            .collect();
        lines.push(Bilingual::owned(
            format!(
                "Commits in this step touching the engine's flag and environment definitions: {}",
                shown.join("; ")
            ),
            format!("此步中涉及引擎参数定义路径的提交：{}", shown.join("；")),
        ));
    }
    let (runs, minimum) = (result.runs, result.minimum);
    lines.push(Bilingual::owned(
        format!(
            "GPU runs used: {runs} (a binary search needs {minimum}). The hunt does not change what the candidate concluded."
        ),
        format!(
            "使用 GPU 运行 {runs} 次（二分查找至少需要 {minimum} 次）。本次排查不会改变候选版本的结论。"
        ),
    ));
    lines
}

/// The comment that ends a hunt (its hidden record is the result).
pub fn render_end(key: &MarkerKey, plan: &HuntPlan, result: &HuntResult) -> String {
    let mut out = super::record_block(key, result);
    let mut body = Bilingual::default();
    for (i, line) in result_lines(plan, result).iter().enumerate() {
        if i > 0 {
            body.push_same("  \n");
        }
        body.append(line);
    }
    body.push_same("\n");
    out.push_str(&body.folded());
    out
}
