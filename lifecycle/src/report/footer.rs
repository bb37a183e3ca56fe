//! The collapsed footer every Klaud PR body ends with: the `/klaud`
//! commands (listed from [`crate::commands::COMMANDS`], a leaf table), what closing the
//! PR without merging means, and where the dashboard issue is.
//!
//! It sits between its own markers, so a later edit of the body (the
//! baseline freeze, the experiments section) replaces it in place and
//! text others add after it stays where they put it.

use crate::commands::COMMANDS;

/// Start of the footer.
pub const FOOTER_START: &str = "<!-- klaud-footer -->";
/// End of the footer.
pub const FOOTER_END: &str = "<!-- /klaud-footer -->";

/// The footer; `dashboard` is the dashboard issue's number once there is
/// one (before the first wave has opened it, the footer names its label).
pub fn render_footer(dashboard: Option<u64>) -> String {
    let (where_en, where_zh) = match dashboard {
        Some(n) => (
            format!("the dashboard issue #{n}"),
            format!("看板 issue #{n}"),
        ),
        None => (
            "the dashboard issue (label `klaud-dashboard`)".to_owned(),
            "看板 issue（标签 `klaud-dashboard`）".to_owned(),
        ),
    };
    let mut out = format!(
        "{FOOTER_START}\n<details>\n<summary>Commands, closing this PR, dashboard / 命令、关闭此 PR、看板</summary>\n\n"
    );
    out.push_str(
        "Comment one of these on its own line (write access needed) / 单独一行评论以下命令（需要写权限）：\n\n",
    );
    for c in COMMANDS {
        out.push_str(&format!("- `{}`: {} / {}\n", c.usage, c.en, c.zh));
    }
    out.push_str(&format!(
        "\n**Closing this PR without merging** means \"not this image\": Klaud will not propose this image for this family again, and proposes a newer one when it appears. Undo it with the box on {where_en}.  \n\
         **不合并而关闭此 PR** 表示“不要这个镜像”：Klaud 不会再为该系列提议此镜像，出现更新的镜像时会再次提议。可在{where_zh}中勾选撤销。\n\n"
    ));
    out.push_str(&format!(
        "Everything Klaud does in this repository: {where_en}. / Klaud 在本仓库的全部工作：{where_zh}。\n"
    ));
    out.push_str("</details>\n");
    out.push_str(FOOTER_END);
    out
}

/// `body` with its footer replaced by `footer`, or `footer` appended when
/// there is none (or its end marker was lost: the broken start is left to
/// the person who edited it, and the body still ends with a whole footer).
pub fn splice_footer(body: &str, footer: &str) -> String {
    if let Some(start) = body.find(FOOTER_START)
        && let Some(end) = body[start..].find(FOOTER_END)
    {
        let end = start + end + FOOTER_END.len();
        return format!("{}{footer}{}", &body[..start], &body[end..]);
    }
    let sep = if body.is_empty() || body.ends_with("\n\n") {
        ""
    } else if body.ends_with('\n') {
        "\n"
    } else {
        "\n\n"
    };
    format!("{body}{sep}{footer}\n")
}

/// `body` with `section` inserted just before the footer (sections Klaud
/// adds later stay above it), or appended when there is no footer.
pub fn insert_before_footer(body: &str, section: &str) -> String {
    match body.find(FOOTER_START) {
        Some(at) => format!("{}{section}\n\n{}", &body[..at], &body[at..]),
        None => {
            let sep = if body.is_empty() || body.ends_with('\n') {
                "\n"
            } else {
                "\n\n"
            };
            format!("{body}{sep}{section}\n")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_footer_lists_every_command_closing_and_the_dashboard_in_both_languages() {
        let f = render_footer(Some(7));
        assert!(
            f.starts_with(FOOTER_START) && f.ends_with(FOOTER_END),
            "{f}"
        );
        assert!(f.contains("<details>") && f.contains("</details>"), "{f}");
        for c in COMMANDS {
            assert!(f.contains(&format!("`{}`", c.usage)), "{f}");
        }
        assert!(
            f.contains("not this image") && f.contains("不要这个镜像"),
            "{f}"
        );
        assert!(f.contains("#7") && f.contains("看板 issue #7"), "{f}");
        assert!(render_footer(None).contains("`klaud-dashboard`"));
    }

    #[test]
    fn splicing_replaces_in_place_and_keeps_other_text() {
        let body = splice_footer("<!-- klaud-baseline -->\n", &render_footer(None));
        assert!(body.ends_with(&format!("{FOOTER_END}\n")), "{body}");
        let with_bot = format!("{body}\nA bot's note\n");
        let again = splice_footer(&with_bot, &render_footer(Some(3)));
        assert_eq!(again.matches(FOOTER_START).count(), 1, "{again}");
        assert!(
            again.contains("#3") && again.ends_with("\nA bot's note\n"),
            "{again}"
        );
        assert_eq!(
            splice_footer(&again, &render_footer(Some(3))),
            again,
            "idempotent"
        );
    }

    #[test]
    fn sections_go_above_the_footer() {
        let body = splice_footer("top\n", &render_footer(None));
        let with = insert_before_footer(&body, "SECTION");
        assert!(with.find("SECTION") < with.find(FOOTER_START), "{with}");
        assert!(with.trim_end().ends_with(FOOTER_END), "{with}");
        assert_eq!(insert_before_footer("top", "S"), "top\n\nS\n");
    }
}
