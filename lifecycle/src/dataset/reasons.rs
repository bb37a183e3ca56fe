//! The N/A reasons of the dataset comparison in both languages. A leaf:
//! the reports that show these reasons read it without importing the
//! dataset reader, which reads through the engine's journal (and the
//! engine writes the reports).

use klaud_render::{Bilingual, bi};

/// Prefix of every N/A reason that says a dataset is unknown.
pub(super) const UNKNOWN: &str = "AgentX dataset unknown: ";
/// Prefix of the N/A reason of two different datasets.
pub(super) const DIFFERENT: &str = "different AgentX datasets: ";
/// The baseline row names no producer run to ask.
pub(super) const NO_PRODUCER: &str = "the published row names no producer run";
/// A record frozen before datasets were read.
pub(super) const NOT_FROZEN: &str = "the baseline was frozen without its producer run's dataset";
/// The candidate's row names none.
pub(super) const NEW_UNNAMED: &str = "this run's AgentX row names no dataset";

/// A reason of this module (also as the tail of an N/A reason) in both
/// languages, or `None` when `reason` is not one.
pub fn reason_words(reason: &str) -> Option<Bilingual> {
    chinese_reason(reason).map(|zh| Bilingual::owned(reason, zh))
}

/// The reasons that are whole sentences, each in both languages.
const KNOWN: &[Bilingual] = &[
    bi!(NO_PRODUCER, "公开的结果行未注明生产运行"),
    bi!(NOT_FROZEN, "冻结基线时未读取其生产运行的数据集"),
    bi!(NEW_UNNAMED, "本次运行的 AgentX 结果行未注明数据集"),
];

fn chinese_reason(reason: &str) -> Option<String> {
    if let Some(rest) = reason.strip_prefix(UNKNOWN) {
        let inner = chinese_reason(rest).unwrap_or_else(|| format!("原文：{rest}"));
        return Some(format!("AgentX 数据集未知：{inner}"));
    }
    if let Some(rest) = reason.strip_prefix(DIFFERENT) {
        let (old, new) = rest
            .strip_prefix("the baseline's ")?
            .split_once(", this run's ")?;
        return Some(format!("AgentX 数据集不同：基线为 {old}，本次运行为 {new}"));
    }
    if let Some(known) = Bilingual::find(KNOWN, reason) {
        return Some(known.zh.to_string());
    }
    if let Some(rest) = reason.strip_prefix("this run's AgentX row: ") {
        return Some(format!("本次运行的 AgentX 结果行：原文：{rest}"));
    }
    if let Some(rest) = reason.strip_prefix("producer run ") {
        let (run, tail) = rest.split_once(' ')?;
        return match tail {
            "is gone" => Some(format!("生产运行 {run} 已不存在")),
            "uploaded no AgentX artifact" => Some(format!("生产运行 {run} 未上传 AgentX 产物")),
            "has no AgentX row of this config" => {
                Some(format!("生产运行 {run} 没有该配置的 AgentX 结果行"))
            }
            _ => tail
                .strip_prefix("could not be read: ")
                .map(|why| format!("无法读取生产运行 {run}：原文：{why}")),
        };
    }
    if let Some(rest) = reason.strip_prefix("the AgentX artifacts of producer run ") {
        let (run, tail) = rest.split_once(' ')?;
        return match tail {
            "have expired" => Some(format!("生产运行 {run} 的 AgentX 产物已过期")),
            _ => tail
                .strip_prefix("are unreadable: ")
                .map(|why| format!("生产运行 {run} 的 AgentX 产物无法读取：原文：{why}")),
        };
    }
    if let Some(rest) = reason.strip_prefix("the AgentX rows of producer run ") {
        let (run, tail) = rest.split_once(' ')?;
        return match tail {
            "name no dataset" => Some(format!("生产运行 {run} 的 AgentX 结果行未注明数据集")),
            _ => tail
                .strip_prefix("name several datasets: ")
                .map(|names| format!("生产运行 {run} 的 AgentX 结果行注明了多个数据集：{names}")),
        };
    }
    None
}
