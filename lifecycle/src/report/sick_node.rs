//! The attempt report's word on a sick node: when a failed job ran on a
//! node that the sick-nodes rule names (one signature on it for several
//! families or on several days), the report says so once per node and
//! points at the dashboard issue's "Sick nodes / 异常节点" section, where
//! the node is listed once for every candidate it hit. Written side by
//! side in both languages, every outside name escaped.

use klaud_render::Bilingual;
use klaud_render::escape::{code, link, text};
use serde::{Deserialize, Serialize};

use crate::playbook::sick::SickNodeRow;

/// Most sick-node rows a report names.
pub const MAX_SHOWN: usize = 4;

/// The dashboard issue's heading of the section (one text, so the link's
/// anchor and the heading cannot drift apart).
pub const SECTION: &str = "Sick nodes / 异常节点";

/// The anchor GitHub gives a Markdown heading with `text`: lowercased,
/// every character but letters, digits, `_`, `-` and spaces removed (a
/// letter of any script is kept), then each space a `-`; so
/// `Sick nodes / 异常节点` is `sick-nodes--异常节点` (the two spaces around
/// the removed `/` stay two hyphens). GitHub adds `-1`, `-2` to repeated
/// headings; the dashboard issue has this one once.
pub fn heading_anchor(text: &str) -> String {
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// `url` (the dashboard issue's page) pointing at the section's heading;
/// an address that already names a place is kept as it is.
fn at_section(url: &str) -> String {
    if url.contains('#') {
        url.to_owned()
    } else {
        format!("{url}#{}", heading_anchor(SECTION))
    }
}

/// The sick nodes a failed run's jobs ran on, as the table that judged
/// them showed them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SickNodesSeen {
    /// One row per node and signature, at most [`MAX_SHOWN`].
    pub rows: Vec<SickNodeRow>,
    /// The dashboard issue's page, when the wave knows the issue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dashboard: Option<String>,
}

/// The paragraph, in both languages: empty when no job's node is sick.
pub fn render(seen: Option<&SickNodesSeen>) -> Bilingual {
    let Some(seen) = seen.filter(|s| !s.rows.is_empty()) else {
        return Bilingual::default();
    };
    let section = SECTION;
    let place = match seen.dashboard.as_deref().map(at_section) {
        Some(url) => Bilingual::owned(
            link(
                &format!("the dashboard issue's \"{section}\" section"),
                &url,
            ),
            link(&format!("看板 issue 的“{section}”部分"), &url),
        ),
        None => Bilingual::owned(
            format!("the dashboard issue's \"{section}\" section (label `klaud-dashboard`)"),
            format!("看板 issue（标签 `klaud-dashboard`）的“{section}”部分"),
        ),
    };
    let mut out = Bilingual::owned(
        format!(
            "\n**Sick node:** a failed job ran on a node that keeps failing the same way across candidates; it is listed once in {}:\n\n",
            place.en
        ),
        format!(
            "\n**异常节点**：本次运行失败的作业所在节点已被判定为异常节点，详见{}：\n\n",
            place.zh
        ),
    );
    let when = |t: &chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%d %H:%M UTC").to_string();
    for r in seen.rows.iter().take(MAX_SHOWN) {
        let families: Vec<String> = r.families.iter().map(|f| code(f)).collect();
        let families = match r.family_count.saturating_sub(r.families.len()) {
            0 => Bilingual::owned(families.join(", "), families.join("、")),
            n => Bilingual::owned(
                format!("{} and {n} more", families.join(", ")),
                format!("{} 等另 {n} 个", families.join("、")),
            ),
        };
        let entry = match r.entry.as_deref().map(code) {
            Some(e) => Bilingual::owned(format!(", playbook entry {e}"), format!("，剧本条目 {e}")),
            None => Bilingual::default(),
        };
        let (node, signature, class) = (code(&r.node), code(&r.signature), text(&r.class));
        let (failures, first, last) = (r.failures, when(&r.first_seen), when(&r.last_seen));
        out.push(
            format!(
                "- {node}: {signature} ({class}), families {}, {failures} failures, first seen {first}, last seen {last}{}\n",
                families.en, entry.en
            ),
            format!(
                "- {node}：{signature}（{class}），系列 {}，{failures} 次失败，首次 {first}，最近 {last}{}\n",
                families.zh, entry.zh
            ),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn row(node: &str) -> SickNodeRow {
        let at = chrono::Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0).unwrap();
        SickNodeRow {
            node: node.into(),
            signature: "vllm-oom-at-load".into(),
            entry: Some("vllm-oom-at-load".into()),
            class: "engine".into(),
            families: vec![
                "demo-fp4-b200-vllm".into(),
                "demo-fp4-b200-vllm-special".into(),
            ],
            family_count: 3,
            failures: 4,
            first_seen: at,
            last_seen: at + chrono::TimeDelta::days(1),
            line: None,
        }
    }

    #[test]
    fn nothing_is_said_without_a_sick_node() {
        assert!(render(None).is_empty());
        assert!(render(Some(&SickNodesSeen::default())).is_empty());
    }

    #[test]
    fn a_sick_node_is_named_with_its_row_and_a_link_to_the_dashboard_section() {
        let seen = SickNodesSeen {
            rows: vec![row("b200-dgx-07")],
            dashboard: Some("https://github.com/o/r/issues/9".into()),
        };
        let en = render(Some(&seen)).en;
        assert!(en.contains("**Sick node:**"), "{en}");
        assert!(
            en.contains("[the dashboard issue's \"Sick nodes / 异常节点\" section](https://github.com/o/r/issues/9#sick-nodes--异常节点)"),
            "{en}"
        );
        assert!(en.contains("- `b200-dgx-07`: `vllm-oom-at-load` (engine), families `demo-fp4-b200-vllm`, `demo-fp4-b200-vllm-special` and 1 more, 4 failures, first seen 2026-12-01 10:00 UTC, last seen 2026-12-02 10:00 UTC, playbook entry `vllm-oom-at-load`"), "{en}");
        let zh = render(Some(&seen)).zh;
        assert!(zh.contains("**异常节点**"), "{zh}");
        assert!(
            zh.contains("(https://github.com/o/r/issues/9#sick-nodes--异常节点)"),
            "{zh}"
        );
        assert!(zh.contains("首次 2026-12-01 10:00 UTC"), "{zh}");
    }

    /// GitHub's anchors: lowercase, punctuation gone, each space a hyphen,
    /// letters of every script kept.
    #[test]
    fn the_link_names_the_sections_anchor_as_github_makes_it() {
        assert_eq!(heading_anchor(SECTION), "sick-nodes--异常节点");
        assert_eq!(heading_anchor("Fee Fie Fo Fum"), "fee-fie-fo-fum");
        assert_eq!(
            heading_anchor("What's new? (v0.21.0, B200)"),
            "whats-new-v0210-b200"
        );
        assert_eq!(
            heading_anchor("snake_case and-hyphen"),
            "snake_case-and-hyphen"
        );
        assert_eq!(heading_anchor("Ünïcödé Straße 节点"), "ünïcödé-straße-节点");
        assert_eq!(heading_anchor("`code` *em* / 中文"), "code-em--中文");
        // An address that already names a place keeps it.
        assert_eq!(
            at_section("https://github.com/o/r/issues/9#issuecomment-1"),
            "https://github.com/o/r/issues/9#issuecomment-1"
        );
        assert_eq!(
            at_section("https://github.com/o/r/issues/9"),
            "https://github.com/o/r/issues/9#sick-nodes--异常节点"
        );
    }

    #[test]
    fn a_hostile_node_name_stays_text() {
        let seen = SickNodesSeen {
            rows: vec![row("<img src=x onerror=alert(1)> @team `x` | y")],
            dashboard: Some("javascript:alert(1)".into()),
        };
        let both = render(Some(&seen));
        for out in [&both.en, &both.zh] {
            assert!(!out.contains("<img"), "{out}");
            // The node is a code span, where a mention is inert.
            assert!(
                out.contains("``‹img src=x onerror=alert(1)› @team `x` ¦ y``"),
                "{out}"
            );
            // An address that is no safe link is not linked.
            assert!(!out.contains("]("), "{out}");
            assert!(!out.contains("javascript:"), "{out}");
        }
    }
}
