//! Safe Markdown pieces and number formats shared by every rendering.
//!
//! Anything interpolated into a comment or body comes from outside (config
//! keys, tags, labels, reasons). It goes through [`text`] or [`code`], the
//! one escaping rule every writer on GitHub shares (`klaud_render::escape`),
//! so it can never mention a user, open HTML (and so never end one of
//! Klaud's hidden markers early), break a table or span lines.

use chrono::{DateTime, Utc};
use klaud_render::{Bilingual, bi};

use crate::engine::forge::RunConclusion;

pub use klaud_render::escape::{MAX_FIELD_CHARS, code, is_loopback_http, link, text};

/// Text for a title (no Markdown is rendered there): one line, no mentions.
pub fn title_text(s: &str) -> String {
    klaud_render::escape::title(s)
}

/// Decimals of throughput columns (tok/s/GPU): one precision per metric,
/// so a column never shows `93.6` beside `24.57`.
pub const THROUGHPUT_DECIMALS: usize = 1;
/// Decimals of TTFT in milliseconds.
pub const TTFT_MS_DECIMALS: usize = 1;
/// Decimals of TPOT in milliseconds (a few ms: hundredths matter).
pub const TPOT_MS_DECIMALS: usize = 2;
/// Decimals of an eval score in percent.
pub const SCORE_DECIMALS: usize = 2;

/// `1,266.30`, `87,274.51`, `110.00`: thousands separators and exactly
/// `decimals` decimals, so the numbers of one metric line up.
pub fn number(v: f64, decimals: usize) -> String {
    if !v.is_finite() {
        return "N/A".to_owned();
    }
    let fixed = format!("{:.*}", decimals, v.abs());
    let (int, frac) = match fixed.split_once('.') {
        Some((i, f)) => (i.to_owned(), f.to_owned()),
        None => (fixed.clone(), String::new()),
    };
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let negative = v < 0.0 && (grouped != "0" || frac.chars().any(|c| c != '0'));
    let sign = if negative { "-" } else { "" };
    if frac.is_empty() {
        format!("{sign}{grouped}")
    } else {
        format!("{sign}{grouped}.{frac}")
    }
}

/// `(new/old − 1) × 100` with one decimal and a sign, e.g. `+10.0%`; `None`
/// when there is no meaningful ratio.
pub fn delta_percent(new: f64, old: f64) -> Option<String> {
    if !(new.is_finite() && old.is_finite()) || old == 0.0 {
        return None;
    }
    let delta = (new / old - 1.0) * 100.0;
    let rounded = (delta * 10.0).round() / 10.0;
    // `-0.0` would print as "-0.0%".
    let rounded = if rounded == 0.0 { 0.0 } else { rounded };
    Some(format!("{rounded:+.1}%"))
}

/// A value with its delta: `110 (+10.0%)`, or just `110`.
pub fn with_delta(new: f64, old: Option<f64>, decimals: usize) -> String {
    match old.and_then(|old| delta_percent(new, old)) {
        Some(delta) => format!("{} ({delta})", number(new, decimals)),
        None => number(new, decimals),
    }
}

/// A score in `[0, 1]` as a percentage with its change in points:
/// `97.00% (+0.50 pp)`.
pub fn score(new: f64, old: Option<f64>) -> String {
    let shown = format!("{}%", number(new * 100.0, SCORE_DECIMALS));
    match old.filter(|o| o.is_finite()) {
        Some(old) if new.is_finite() => {
            let pp = ((new - old) * 100.0 * 100.0).round() / 100.0;
            let pp = if pp == 0.0 { 0.0 } else { pp };
            format!("{shown} ({pp:+.2} pp)")
        }
        _ => shown,
    }
}

/// Seconds to milliseconds, for display.
pub fn ms(seconds: f64) -> f64 {
    seconds * 1000.0
}

/// `YYYY-MM-DD HH:MM UTC`.
pub fn timestamp(at: &DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M UTC").to_string()
}

/// A reason Klaud itself writes (N/A reasons of the baseline and the
/// reports) in both languages. The reasons are kept in records in English;
/// a reason from outside (an error message of a server or a file) has no
/// translation, so its Chinese quotes it as it was, marked as the original
/// text, rather than dropping it.
pub fn reason_words(reason: &str) -> Bilingual {
    Bilingual::owned(reason, chinese_reason(reason))
}

/// The known reasons, each in both languages.
const KNOWN_REASONS: &[Bilingual] = &[
    bi!("not a point of the frozen baseline", "不是冻结基线中的点位"),
    bi!("no result in this run", "本次运行没有该点位的结果"),
    bi!("its job has not finished yet", "该点位的作业尚未完成"),
    bi!("no result artifact for this point", "没有该点位的结果产物"),
    bi!("no score in this run", "本次运行没有该评估的分数"),
    bi!("sample counts missing or different", "样本数缺失或不同"),
    bi!(
        "the published baseline does not name its AgentX dataset, so the replay is not comparable",
        "公开的基线未注明其 AgentX 数据集，回放结果无法比较"
    ),
    bi!(
        "no eval result published by the runs the baseline points come from",
        "基线点位所来自的运行没有公开的评估结果"
    ),
    bi!(
        "the frozen baseline holds no score for this eval",
        "冻结基线中没有该评估的分数"
    ),
];

fn chinese_reason(reason: &str) -> String {
    const PREFIXES: &[(&str, &str, &str)] = &[
        ("no baseline: ", "无基线：", ""),
        ("not published as of ", "截至 ", " 未公开"),
        ("not benchmarked on ", "", " 未做此项基准测试"),
        (
            "no published result for this point on ",
            "",
            " 没有该点位的公开结果",
        ),
        ("published result lacks ", "公开结果缺少 ", ""),
        (
            "published result ran another image (",
            "公开结果使用的是另一个镜像（",
            "",
        ),
    ];
    if let Some(known) = Bilingual::find(KNOWN_REASONS, reason) {
        return known.zh.to_string();
    }
    if let Some(words) = crate::dataset::reason_words(reason) {
        return words.zh.into_owned();
    }
    if let Some((prefix, _)) = reason
        .strip_prefix("the results API knows no display name for model-prefix ")
        .and_then(|r| r.split_once(" (none of the names"))
    {
        return format!(
            "结果 API 不知道模型前缀 {prefix} 的显示名称（其 OpenAPI 描述列出的名称都不返回该前缀的行）；请设置 [lifecycle.model_names] {prefix} = \"<显示名称>\""
        );
    }
    if let Some((day, line)) = reason
        .strip_prefix("not published as of ")
        .and_then(|r| r.strip_suffix(')'))
        .and_then(|r| r.split_once(" (its line's newest row: "))
    {
        let line = match line.strip_prefix("run ").and_then(|r| r.split_once(" on ")) {
            Some((run, on)) => format!("运行 {run}（{on}）"),
            None => line.to_owned(),
        };
        return format!("截至 {day} 未公开（所在系列最新的公开结果：{line}）");
    }
    for (en, before, after) in PREFIXES {
        if let Some(rest) = reason.strip_prefix(en) {
            let rest = if *en == "no baseline: " {
                chinese_reason(rest)
            } else if let Some((run, day)) =
                rest.strip_prefix("run ").and_then(|r| r.split_once(" on "))
            {
                format!("运行 {run}（{day}）")
            } else if let Some(inner) = rest.strip_suffix(')') {
                format!("{inner}）")
            } else {
                rest.to_owned()
            };
            return format!("{before}{rest}{after}");
        }
    }
    format!("原文：{reason}")
}

/// The detail of a live report whose run Klaud cancelled because its
/// candidate ended (who and why are in the receipt, said once).
pub const STOPPED_DETAIL: &str =
    "the candidate ended and Klaud cancelled this run; the receipt says why";

/// The words after an attempt's status (its `detail`: `smoke`, `full
/// sweep`, `frozen <date>`, ...) in both languages; an unknown one is
/// quoted as the original in Chinese, like [`reason_words`].
pub fn detail_words(detail: &str) -> Bilingual {
    const KNOWN: &[Bilingual] = &[
        bi!("smoke", "冒烟测试"),
        bi!("full sweep", "完整 sweep"),
        bi!("smoke, infrastructure failure", "冒烟测试，基础设施故障"),
        bi!(
            "full sweep, infrastructure failure",
            "完整 sweep，基础设施故障"
        ),
        bi!(STOPPED_DETAIL, "候选已结束，Klaud 取消了此运行；原因见回执"),
    ];
    if let Some(known) = Bilingual::find(KNOWN, detail) {
        return known.clone();
    }
    if let Some(date) = detail.strip_prefix("frozen ") {
        return Bilingual::owned(detail, format!("冻结于 {date}"));
    }
    Bilingual::owned(detail, format!("原文：{detail}"))
}

/// The note of an attempt report whose triage stopped at a known engine
/// failure with a playbook fix: around the number of failed jobs whose
/// logs were not read.
const UNREAD_LOGS_NOTE: (&str, &str) = (
    "The logs of ",
    " later failed job(s) were not read: a known engine failure above has a playbook fix, \
     which is made before anything else (the repaired run shows what is left).",
);

/// The note of an attempt report whose triage left the logs of `n`
/// failed jobs unread.
pub fn unread_logs_note(n: usize) -> String {
    format!("{}{n}{}", UNREAD_LOGS_NOTE.0, UNREAD_LOGS_NOTE.1)
}

/// A report note Klaud writes, in both languages; like [`reason_words`],
/// a note it does not know is quoted as the original in Chinese.
pub fn note_words(note: &str) -> Bilingual {
    Bilingual::owned(note, chinese_note(note))
}

fn chinese_note(note: &str) -> String {
    if let Some(words) = crate::measured::note_words(note) {
        return words.zh.into_owned();
    }
    if let Some(c) = note
        .strip_prefix("Run conclusion: ")
        .and_then(|r| r.strip_suffix('.'))
    {
        let c_zh = match RunConclusion::parse(c) {
            RunConclusion::Success => "成功",
            RunConclusion::Failure => "失败",
            RunConclusion::Cancelled => "已取消",
            RunConclusion::TimedOut => "超时",
            RunConclusion::Skipped => "已跳过",
            RunConclusion::StartupFailure => "启动失败",
            RunConclusion::ActionRequired => "需要操作",
            RunConclusion::Neutral => "中性",
            RunConclusion::Stale => "已过时",
            RunConclusion::Unknown(_) => c,
        };
        return format!("运行结论：{c_zh}（{c}）。");
    }
    if let Some(name) = note
        .strip_prefix("Artifact ")
        .and_then(|r| r.strip_suffix(" expired."))
    {
        return format!("产物 {name} 已过期。");
    }
    if let Some((name, err)) = note
        .strip_prefix("Artifact ")
        .and_then(|r| r.split_once(" unreadable: "))
    {
        return format!("产物 {name} 无法读取：{err}");
    }
    if let Some(n) = note
        .strip_prefix(UNREAD_LOGS_NOTE.0)
        .and_then(|r| r.strip_suffix(UNREAD_LOGS_NOTE.1))
        .and_then(|n| n.parse::<usize>().ok())
    {
        return format!(
            "后续 {n} 个失败作业的日志未读取：上面的已知引擎故障有剧本修复，会先于其他一切进行（修复后的运行会显示剩下的问题）。"
        );
    }
    if let Some(rest) = note.strip_prefix("The sweep manifest does not match: ") {
        return format!("扫描清单不一致：{rest}");
    }
    format!("原文：{note}")
}

/// The words for the clock that ordered the tags (the planner's `Clock`,
/// kebab-case in the typed record), in both languages; an unknown name is
/// shown as the original.
pub fn clock_words(clock: &str) -> Bilingual {
    const KNOWN: &[(&str, Bilingual)] = &[
        ("tag-text", bi!("the tag text", "标签文本")),
        (
            "registry-push-time",
            bi!("the registry's push time", "镜像仓库的推送时间"),
        ),
        (
            "created-label",
            bi!("the image's created label", "镜像的 created 标签"),
        ),
        (
            "config-created",
            bi!("the image config's creation time", "镜像配置中的创建时间"),
        ),
    ];
    match KNOWN.iter().find(|(name, _)| *name == clock) {
        Some((_, words)) => words.clone(),
        None => Bilingual::owned(clock, format!("原文：{clock}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_klaud_writes_read_in_chinese() {
        assert_eq!(
            reason_words("no baseline: not benchmarked on 2026-09-09").zh,
            "无基线：2026-09-09 未做此项基准测试"
        );
        assert_eq!(
            reason_words("not published as of 2026-09-21").zh,
            "截至 2026-09-21 未公开"
        );
        assert_eq!(
            reason_words(
                "not published as of 2026-09-21 (its line's newest row: run 7 on 2026-09-15)"
            )
            .zh,
            "截至 2026-09-21 未公开（所在系列最新的公开结果：运行 7（2026-09-15））"
        );
        assert_eq!(
            reason_words("published result ran another image (x:1)").zh,
            "公开结果使用的是另一个镜像（x:1）"
        );
        assert_eq!(
            reason_words("published result lacks mean_tpot").zh,
            "公开结果缺少 mean_tpot"
        );
        assert_eq!(reason_words("HTTP 502").zh, "原文：HTTP 502");
        assert_eq!(
            reason_words(
                "no baseline: the results API knows no display name for model-prefix \"demo\" (none of the names its OpenAPI description lists answers with rows of it); set [lifecycle.model_names] \"demo\" = \"<display name>\""
            ).zh,
            "无基线：结果 API 不知道模型前缀 \"demo\" 的显示名称（其 OpenAPI 描述列出的名称都不返回该前缀的行）；请设置 [lifecycle.model_names] \"demo\" = \"<显示名称>\""
        );
        assert_eq!(clock_words("registry-push-time").zh, "镜像仓库的推送时间");
        assert!(
            note_words(&unread_logs_note(5))
                .zh
                .starts_with("后续 5 个失败作业的日志未读取")
        );
        assert_eq!(clock_words("tag-text").en, "the tag text");
        assert_eq!(clock_words("sundial").zh, "原文：sundial");
        assert_eq!(
            note_words("Run conclusion: failure.").zh,
            "运行结论：失败（failure）。"
        );
        assert_eq!(
            note_words("Artifact bmk_1 expired.").zh,
            "产物 bmk_1 已过期。"
        );
        assert_eq!(detail_words("full sweep").zh, "完整 sweep");
        assert_eq!(detail_words("frozen 2026-09-09").zh, "冻结于 2026-09-09");
    }

    #[test]
    fn numbers_group_thousands_and_keep_a_fixed_precision() {
        assert_eq!(number(87274.51, 2), "87,274.51");
        assert_eq!(number(1266.30, 2), "1,266.30");
        assert_eq!(number(110.0, 2), "110.00");
        assert_eq!(number(93.6, 2), "93.60", "beside 24.57");
        assert_eq!(number(0.004, 2), "0.00");
        assert_eq!(number(-1234.5, 1), "-1,234.5");
        assert_eq!(number(-0.001, 2), "0.00");
        assert_eq!(number(12.0, 0), "12");
        assert_eq!(number(f64::NAN, 2), "N/A");
    }

    #[test]
    fn deltas_follow_the_spec_formula() {
        assert_eq!(delta_percent(110.0, 100.0).as_deref(), Some("+10.0%"));
        assert_eq!(delta_percent(94.7, 100.0).as_deref(), Some("-5.3%"));
        assert_eq!(delta_percent(100.0, 100.0).as_deref(), Some("+0.0%"));
        assert_eq!(delta_percent(99.99, 100.0).as_deref(), Some("+0.0%"));
        assert_eq!(delta_percent(1.0, 0.0), None);
        assert_eq!(with_delta(110.0, Some(100.0), 1), "110.0 (+10.0%)");
        assert_eq!(score(0.97, Some(0.965)), "97.00% (+0.50 pp)");
        assert_eq!(score(0.5, None), "50.00%");
    }
}
