//! The dashboard issue's "Sick nodes" section: nodes that failed the same
//! way for several families or on several days, from GitHub's runs (see
//! `crate::sick_nodes`), one row per node and signature whatever the
//! number of candidates it hit. A pass that could not read the runs keeps
//! the section as the issue shows it, so a failed read edits nothing.

use chrono::{DateTime, Utc};
use klaud_lifecycle::playbook::sick::{SICK_DAYS, SICK_FAMILIES, SickNodeRow};
use klaud_lifecycle::report::sick_node::SECTION;

use super::render::{code, text};

const START: &str = "<!-- klaud:nodes-start -->";
const END: &str = "<!-- klaud:nodes-end -->";
/// Most rows shown (the rest are counted).
const MAX_ROWS: usize = 30;

/// Appends the section: from `rows` when this pass read them, else the
/// one in `previous` (the body now on the issue), else a line saying the
/// runs were not read yet.
pub(super) fn push(out: &mut String, rows: Option<&[SickNodeRow]>, previous: Option<&str>) {
    match rows {
        Some(rows) => out.push_str(&section(rows)),
        None => match previous.and_then(kept_section) {
            Some(kept) => out.push_str(kept),
            None => {
                out.push_str(&format!(
                    "{START}\n### {SECTION}\n\nNot read yet. / 尚未读取。\n{END}\n"
                ));
            }
        },
    }
}

fn kept_section(previous: &str) -> Option<&str> {
    let at = previous.find(START)?;
    let end = previous[at..].find(END)? + at + END.len();
    // The newline after the end marker belongs to the section.
    let end = end + usize::from(previous[end..].starts_with('\n'));
    Some(&previous[at..end])
}

fn day(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

fn section(rows: &[SickNodeRow]) -> String {
    let mut out = format!("{START}\n### {SECTION}\n\n");
    out.push_str(&format!(
        "Nodes where Klaud's runs failed the same way for {SICK_FAMILIES} or more families, or on {SICK_DAYS} or more days, over the last two weeks; each is listed once, whatever the number of candidates it hit.\n\
         过去两周内，Klaud 的运行在同一节点上以相同方式失败（涉及 {SICK_FAMILIES} 个及以上系列，或 {SICK_DAYS} 天及以上）；每个节点只列出一次。\n\n"
    ));
    if rows.is_empty() {
        out.push_str("None. / 无。\n");
    } else {
        out.push_str("| Node / 节点 | Signature / 签名 | Families / 系列 | Failures / 失败次数 | First seen / 首次出现 | Last seen / 最近出现 | Playbook entry / 剧本条目 |\n| --- | --- | --- | --- | --- | --- | --- |\n");
        for r in rows.iter().take(MAX_ROWS) {
            let mut families: Vec<String> = r.families.iter().map(|f| code(f)).collect();
            if r.family_count > r.families.len() {
                families.push(format!("+{}", r.family_count - r.families.len()));
            }
            let signature = match &r.line {
                Some(line) if r.entry.is_none() => {
                    format!(
                        "{} ({}: {})",
                        code(&r.signature),
                        text(&r.class),
                        code(line)
                    )
                }
                _ => format!("{} ({})", code(&r.signature), text(&r.class)),
            };
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} |\n",
                code(&r.node),
                signature,
                families.join(", "),
                r.failures,
                day(r.first_seen),
                day(r.last_seen),
                r.entry.as_deref().map_or_else(|| "— / 无".to_owned(), code),
            ));
        }
        if rows.len() > MAX_ROWS {
            out.push_str(&format!(
                "\n…and {} more. / 另有 {} 项。\n",
                rows.len() - MAX_ROWS,
                rows.len() - MAX_ROWS
            ));
        }
    }
    out.push_str(END);
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn row(node: &str) -> SickNodeRow {
        SickNodeRow {
            node: node.into(),
            signature: "sig-0123456789abcdef".into(),
            entry: None,
            class: "unknown".into(),
            families: vec!["fam-a".into(), "fam|b".into()],
            family_count: 3,
            failures: 4,
            first_seen: Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0).unwrap(),
            last_seen: Utc.with_ymd_and_hms(2026, 12, 2, 11, 0, 0).unwrap(),
            line: Some("srun: error: `oops` <b>".into()),
        }
    }

    #[test]
    fn a_row_names_node_signature_families_and_times_and_cannot_break_the_table() {
        let mut out = String::new();
        push(&mut out, Some(&[row("gpu|node`7")]), None);
        let line = out.lines().find(|l| l.contains("gpu")).expect("a row");
        assert_eq!(line.matches(" | ").count(), 6, "{line}");
        // The shared code-span rule: a pipe cannot end the cell, a
        // backtick widens the span's fence, angle brackets are look-alikes.
        assert!(line.contains("``gpu¦node`7``"), "{line}");
        assert!(line.contains("`fam-a`, `fam¦b`, +1"), "{line}");
        assert!(line.contains("2026-12-01 10:00 UTC"), "{line}");
        assert!(line.contains("2026-12-02 11:00 UTC"), "{line}");
        assert!(line.contains("``srun: error: `oops` ‹b›``"), "{line}");
        assert!(!line.contains('<'), "{line}");
    }

    #[test]
    fn a_pass_that_read_nothing_keeps_the_section_as_shown() {
        let mut shown = String::from("head\n");
        push(&mut shown, Some(&[row("n1")]), None);
        shown.push_str("### Ignored\n");
        let mut again = String::new();
        push(&mut again, None, Some(&shown));
        let mut fresh = String::new();
        push(&mut fresh, Some(&[row("n1")]), None);
        assert_eq!(again, fresh);
        let mut first = String::new();
        push(&mut first, None, None);
        assert!(first.contains("Not read yet."), "{first}");
    }
}
