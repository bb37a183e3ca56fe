//! The wave as a GitHub Actions step summary (the job's summary page,
//! `$GITHUB_STEP_SUMMARY`): what the pass did in a few lines, then, in the
//! shape the incumbent workflow wrote, a heading per candidate and the row
//! `| Outcome / 结果 | Phase / 阶段 | Reason / 原因 | PR | Repairs / 修复 | Runs / 运行 |`.
//!
//! Family names, images, reasons and addresses come from outside (the
//! benchmark repository, registries, GitHub, error text), so every one goes
//! through klaud-render's rule: a table cell stays one cell on one line, and
//! no mention, HTML or link is made live by them.

use klaud_render::escape::{code, is_safe_url, text, text_within};

use crate::wave_adapters::WaveSummary;

/// Longest brief line kept: a brief line lists families, so it may be
/// longer than one field.
const MAX_BRIEF_LINE_CHARS: usize = 2_000;

/// The step summary of one wave, after its brief (the lines the log shows).
pub fn render(summary: &WaveSummary, brief: &[String]) -> String {
    let base = summary.base.get(..12).unwrap_or(&summary.base);
    let mut out = format!("## Klaud wave at {}\n\n", code(base));
    out.push_str(&brief_markdown(brief));
    if summary.candidates.is_empty() {
        out.push_str("No candidates in this wave.\n\n");
    }
    for c in &summary.candidates {
        out.push_str(&format!(
            "### {} → {}\n\n| Outcome / 结果 | Phase / 阶段 | Reason / 原因 | PR | Repairs / 修复 | Runs / 运行 |\n| --- | --- | --- | --- | --- | --- |\n",
            text(&c.family),
            code(&c.image)
        ));
        let outcome = match &c.outcome {
            Some(o) => format!("**{}**", text(o)),
            None => "running".to_owned(),
        };
        let reason = c
            .message
            .as_deref()
            .or(c.status.as_deref())
            .map_or_else(|| "—".to_owned(), text);
        let pr = c.pull_request.as_deref().map_or_else(
            || "—".to_owned(),
            |url| {
                let number = url.rsplit('/').next().unwrap_or(url);
                linked(&format!("#{}", text(number)), url)
            },
        );
        let runs = if c.runs.is_empty() {
            "—".to_owned()
        } else {
            c.runs
                .iter()
                .map(|r| linked(&format!("{} #{}", r.id, r.attempt), &r.url))
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.push_str(&format!(
            "| {outcome} | {} | {reason} | {pr} | {} | {runs} |\n\n",
            text(&c.phase),
            c.repairs
        ));
    }
    for (candidate, why) in &summary.skipped {
        out.push_str(&format!("- skipped {}: {}\n", code(candidate), text(why)));
    }
    out
}

/// `[label](url)` when the address is safe to link, else the label alone;
/// `label` is already Markdown (Klaud's words and escaped outside text). A
/// table splits its cells at a `|` before it reads links, so one in the
/// address is percent-encoded.
fn linked(label: &str, url: &str) -> String {
    if is_safe_url(url) {
        format!("[{label}]({})", url.replace('|', "%7C"))
    } else {
        label.to_owned()
    }
}

/// The brief as a Markdown list for the step summary, under its heading:
/// an indented line stays a nested item.
pub fn brief_markdown(lines: &[String]) -> String {
    let mut out = String::new();
    for line in lines {
        let (indent, line) = match line.strip_prefix("  ") {
            Some(rest) => ("  ", rest),
            None => ("", line.as_str()),
        };
        out.push_str(&format!(
            "{indent}- {}\n",
            text_within(line, MAX_BRIEF_LINE_CHARS)
        ));
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use klaud_lifecycle::model::RunRef;
    use klaud_lifecycle::wave::CandidateSummary;

    fn summary(message: &str) -> WaveSummary {
        WaveSummary {
            base: "0123456789abcdef0123".into(),
            candidates: vec![CandidateSummary {
                candidate: "d92e15065c55779d-0123456789abcdef".parse().unwrap(),
                family: "configs/nvidia-master.yaml:k".into(),
                image: "lmsysorg/sglang:v2".into(),
                outcome: Some("failed".into()),
                phase: "targeted".into(),
                pull_request: Some("https://github.com/o/r/pull/17".into()),
                runs: vec![RunRef {
                    id: 99,
                    attempt: 2,
                    url: "https://github.com/o/r/actions/runs/99/attempts/2".into(),
                }],
                repairs: 1,
                status: None,
                message: Some(message.into()),
                merge: None,
            }],
            skipped: vec![],
            answered: vec![],
            families: vec![],
            unreadable: vec![],
            stopped_by: None,
            blocked: vec![],
        }
    }

    #[test]
    fn the_step_summary_has_the_incumbents_columns_and_escapes_cells() {
        let text = render(
            &summary("smoke failed | twice\nat step 3"),
            &["held: 1".to_owned()],
        );
        assert!(text.contains("`\n\n- held: 1\n\n###"), "{text}");
        assert!(text.contains(
            "| Outcome / 结果 | Phase / 阶段 | Reason / 原因 | PR | Repairs / 修复 | Runs / 运行 |"
        ));
        assert!(text.contains("`0123456789ab`"), "{text}");
        assert!(
            text.contains("| **failed** | targeted | smoke failed \\| twice at step 3 | [#17](https://github.com/o/r/pull/17) | 1 | [99 #2](https://github.com/o/r/actions/runs/99/attempts/2) |"),
            "{text}"
        );
    }

    #[test]
    fn a_mention_or_html_in_a_reason_stays_inert_in_its_cell() {
        let text = render(
            &summary("@victim <script>x</script> </details>\n| forged | cell |"),
            &[],
        );
        assert!(
            text.contains("| @\u{2060}victim &lt;script&gt;x&lt;/script&gt; &lt;/details&gt; \\| forged \\| cell \\| |"),
            "{text}"
        );
    }

    #[test]
    fn markdown_from_outside_is_shown_as_written() {
        assert_eq!(
            brief_markdown(&["held: 1".into(), "  occupied a: <b>[x](y)</b>".into()]),
            "- held: 1\n  - occupied a: &lt;b&gt;\\[x\\](y)&lt;/b&gt;\n\n"
        );
    }
}
