//! What a hunt publishes, in English and Chinese: the plan when it starts,
//! one comment per step as it ends (tag, result, value against the
//! baseline), the result (last good and first bad tag, their upstream
//! commits, the compare link, the commits of that step touching the engine
//! paths the flag audit knows). The same lines serve the receipt,
//! `klaud status` and the dashboards ([`result_lines`]).

use klaud_planner::audit::EngineDefinitions;
use serde::{Deserialize, Serialize};

use super::{EndReason, HuntPlan, HuntResult, HuntTag, Metric, Probe, StepRecord, Verdict};
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

fn tag_words(t: &HuntTag, zh: bool) -> String {
    match (&t.commit, zh) {
        (Some(c), false) => format!("{} (upstream {})", code(&t.tag), code(short(c))),
        (Some(c), true) => format!("{}（上游 {}）", code(&t.tag), code(short(c))),
        (None, false) => format!("{} (upstream commit unknown)", code(&t.tag)),
        (None, true) => format!("{}（上游提交未知）", code(&t.tag)),
    }
}

fn verdict_words(v: Verdict, zh: bool) -> &'static str {
    match (v, zh) {
        (Verdict::Good, false) => "good",
        (Verdict::Good, true) => "正常",
        (Verdict::Bad, false) => "bad",
        (Verdict::Bad, true) => "回归",
        (Verdict::Infra, false) => "infrastructure failure (no evidence)",
        (Verdict::Infra, true) => "基础设施故障（不作为证据）",
        (Verdict::Gone, false) => "no longer served by the registry (skipped, no run used)",
        (Verdict::Gone, true) => "镜像仓库已不再提供（跳过，未使用运行）",
    }
}

fn reason_words(r: EndReason, zh: bool) -> &'static str {
    match (r, zh) {
        (EndReason::Found, false) => "first bad tag found",
        (EndReason::Found, true) => "已找到第一个出问题的标签",
        (EndReason::Budget, false) => "the hunt's budget of runs is spent; narrowest range so far",
        (EndReason::Budget, true) => "本次排查的运行预算已用完；以下为目前最窄的范围",
        (EndReason::WeeklyBudget, false) => {
            "this week's budget of hunt runs is spent; narrowest range so far"
        }
        (EndReason::WeeklyBudget, true) => "本周的排查运行预算已用完；以下为目前最窄的范围",
        (EndReason::TagsGone, false) => {
            "the tags left between are no longer served; narrowest range established"
        }
        (EndReason::TagsGone, true) => "范围内剩余的标签已不再提供；以下为已确定的最窄范围",
        (EndReason::Stopped, false) => "stopped by a maintainer; narrowest range so far",
        (EndReason::Stopped, true) => "已被维护者停止；以下为目前最窄的范围",
    }
}

fn probe_words(p: &Probe, zh: bool) -> String {
    match (p, zh) {
        (Probe::Outcome { target }, false) => format!("the outcome of {}", code(target)),
        (Probe::Outcome { target }, true) => format!("{} 的结果", code(target)),
        (
            Probe::Metric {
                point,
                metric,
                baseline,
                band,
                ..
            },
            false,
        ) => format!(
            "{} of {} against the baseline {} (noise band ±{}%)",
            metric.label(false),
            code(point),
            number(*baseline, 2),
            number(band * 100.0, 1)
        ),
        (
            Probe::Metric {
                point,
                metric,
                baseline,
                band,
                ..
            },
            true,
        ) => format!(
            "{} 的{}，对照基线 {}（噪声范围 ±{}%）",
            code(point),
            metric.label(true),
            number(*baseline, 2),
            number(band * 100.0, 1)
        ),
    }
}

/// The comment that starts a hunt (its hidden record is the plan).
pub fn render_plan(key: &MarkerKey, plan: &HuntPlan) -> String {
    let mut out = super::record_block(key, plan);
    let n = plan.tags.len();
    let served = plan.served();
    let min = super::minimum_runs(served);
    out.push_str(&format!(
        "**Regression hunt:** between {} and {}, {n} tags ({served} still served), at most {} runs (a binary search needs {min}). Each step measures {}.\n",
        code(&plan.old.tag),
        code(&plan.new.tag),
        plan.budget,
        probe_words(&plan.probe, false)
    ));
    out.push_str("This hunt does not change what the candidate concluded.\n");
    out.push_str("\n<details>\n<summary>中文</summary>\n\n");
    out.push_str(&format!(
        "**回归排查**：在 {} 与 {} 之间共 {n} 个标签（仍提供 {served} 个），最多 {} 次运行（二分查找需要 {min} 次）。每一步测量{}。\n",
        code(&plan.old.tag),
        code(&plan.new.tag),
        plan.budget,
        probe_words(&plan.probe, true)
    ));
    out.push_str("本次排查不会改变候选版本的结论。\n\n</details>\n");
    out
}

fn value_words(plan: &HuntPlan, s: &StepRecord, zh: bool) -> String {
    let (
        Probe::Metric {
            metric, baseline, ..
        },
        Some(v),
    ) = (&plan.probe, s.value)
    else {
        return String::new();
    };
    let delta = crate::report::format::delta_percent(v, *baseline).unwrap_or_default();
    let m: Metric = *metric;
    if zh {
        format!(
            "，{} {}（基线 {}，{delta}）",
            m.label(true),
            number(v, 2),
            number(*baseline, 2)
        )
    } else {
        format!(
            ", {} {} (baseline {}, {delta})",
            m.label(false),
            number(v, 2),
            number(*baseline, 2)
        )
    }
}

/// One step's comment, published as the step ends.
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
    let run = s.run.map_or(String::new(), |r| format!(" · run {r}"));
    out.push_str(&format!(
        "**Hunt step {}:** {} — {}{}{run}\n",
        s.step,
        tag_words(&tag, false),
        verdict_words(s.verdict, false),
        value_words(plan, s, false)
    ));
    out.push_str(&format!(
        "\n**排查第 {} 步**：{} — {}{}{}\n",
        s.step,
        tag_words(&tag, true),
        verdict_words(s.verdict, true),
        value_words(plan, s, true),
        s.run.map_or(String::new(), |r| format!(" · 运行 {r}"))
    ));
    out
}

/// The result, as lines for the PR, the receipt, `klaud status` and the
/// dashboards (`zh`: the Chinese ones).
pub fn result_lines(plan: &HuntPlan, result: &HuntResult, zh: bool) -> Vec<String> {
    let commits = &result.commits;
    let mut lines = Vec::new();
    let (good, bad) = (&result.last_good, &result.first_bad);
    lines.push(if zh {
        format!("**回归排查**：{}。", reason_words(result.reason, true))
    } else {
        format!(
            "**Regression hunt:** {}.",
            reason_words(result.reason, false)
        )
    });
    lines.push(if zh {
        format!(
            "最后一个正常：{} · 第一个出问题：{}",
            tag_words(good, true),
            tag_words(bad, true)
        )
    } else {
        format!(
            "Last good: {} · first bad: {}",
            tag_words(good, false),
            tag_words(bad, false)
        )
    });
    if let (Some(from), Some(to)) = (&good.commit, &bad.commit) {
        let range = format!("{}...{}", short(from), short(to));
        // Without a configured source repository the range is still the
        // answer a maintainer takes to `git log`; it is just not a link.
        lines.push(match (&plan.upstream, zh) {
            (Some(up), true) => format!(
                "上游变更：{} {}",
                text(up),
                link(&range, &compare_url(up, from, to))
            ),
            (Some(up), false) => format!(
                "Upstream change: {} {}",
                text(up),
                link(&range, &compare_url(up, from, to))
            ),
            (None, true) => format!("上游变更：{}", code(&range)),
            (None, false) => format!("Upstream change: {}", code(&range)),
        });
    }
    if !result.untested.is_empty() {
        let tags: Vec<String> = result.untested.iter().take(20).map(|t| code(t)).collect();
        let more = result.untested.len().saturating_sub(20);
        let more = match (more, zh) {
            (0, _) => String::new(),
            (n, true) => format!(" 等另 {n} 个"),
            (n, false) => format!(" and {n} more"),
        };
        lines.push(if zh {
            format!("范围内未确定的标签：{}{more}", tags.join("、"))
        } else {
            format!("Tags in between not established: {}{more}", tags.join(", "))
        });
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
        lines.push(if zh {
            format!("此步中涉及引擎参数定义路径的提交：{}", shown.join("；"))
        } else {
            format!(
                "Commits in this step touching the engine's flag and environment definitions: {}",
                shown.join("; ")
            )
        });
    }
    lines.push(if zh {
        format!(
            "使用 GPU 运行 {} 次（二分查找至少需要 {} 次）。本次排查不会改变候选版本的结论。",
            result.runs, result.minimum
        )
    } else {
        format!(
            "GPU runs used: {} (a binary search needs {}). The hunt does not change what the candidate concluded.",
            result.runs, result.minimum
        )
    });
    lines
}

/// The comment that ends a hunt (its hidden record is the result).
pub fn render_end(key: &MarkerKey, plan: &HuntPlan, result: &HuntResult) -> String {
    let mut out = super::record_block(key, result);
    out.push_str(&result_lines(plan, result, false).join("  \n"));
    out.push_str("\n\n<details>\n<summary>中文</summary>\n\n");
    out.push_str(&result_lines(plan, result, true).join("  \n"));
    out.push_str("\n\n</details>\n");
    out
}
