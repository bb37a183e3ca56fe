//! The verdict comment, byte-compatible with the repository's version of
//! the contract, and the marker that finds it again.
//!
//! Every text Klaud did not write itself (paths, image names, eval labels,
//! anything derived from the pull request or the sign-off) is escaped: no
//! mention, no Markdown emphasis or link, no HTML reaches the comment.

use crate::contract::ContractVersion;
use crate::evidence::SignoffKind;
use crate::{Outcome, Verdict, VerdictWord};

pub const PASS_HEADER: &str = "## ✅✅✅ **Verdict: PASS** ✅✅✅";
pub const REJECTED_HEADER: &str = "## ❌❌❌ **REJECTED** ❌❌❌";
pub const WARN_HEADER: &str = "## ⚠️ **Verdict: WARN** ⚠️";

/// The newer publisher's escalation when Check 14 (Pareto coverage) warns.
pub const PARETO_ESCALATION: &str = "⚠️ Pareto coverage needs additional review: @functionstackx @cquil11 @Oseltamivir @adibarra. At least 5 points per affected throughput-versus-E2EL frontier are highly recommended. Below 5, or when coverage cannot be verified, merge only with an explicit, recorded admin bypass for the assessed commit; this advisory comment does not grant or enforce a bypass.";

/// The most characters of one row's reason.
const MAX_REASON_CHARS: usize = 600;

/// The marker's prefix every version shares.
pub const MARKER_PREFIX: &str = "<!-- codeowner-signoff-verify";

/// The hidden first line: `sha=` in 0-10 and 0-12 (one comment per PR and
/// head), the sign-off's resource key in 0-15 (one comment per sign-off).
pub fn marker(version: ContractVersion, head_sha: &str, kind: SignoffKind, id: u64) -> String {
    match version {
        ContractVersion::Checks0To15 => {
            format!("{MARKER_PREFIX} signoff={}{id} -->", kind.anchor())
        }
        _ => format!("{MARKER_PREFIX} sha={head_sha} -->"),
    }
}

/// Escapes text for a single Markdown line by the rule every text Klaud
/// writes on GitHub follows (`klaud_render::escape`), with the longer
/// bound a check's reason needs; the files a reason names keep their
/// underscores, as the sign-off thread shows them.
pub fn escape_inline(text: &str) -> String {
    klaud_render::escape::names_within(text, MAX_REASON_CHARS)
}

fn row(check: &crate::CheckResult) -> String {
    format!(
        "{} Check {} ({}): {} — {}",
        check.result.emoji(),
        check.number,
        check.name,
        check.result.word(),
        escape_inline(&check.reason)
    )
}

fn header(verdict: VerdictWord) -> &'static str {
    match verdict {
        VerdictWord::Pass => PASS_HEADER,
        VerdictWord::Warn => WARN_HEADER,
        VerdictWord::Rejected => REJECTED_HEADER,
    }
}

fn blocking_line(verdict: &Verdict) -> String {
    let failing: Vec<String> = verdict
        .checks
        .iter()
        .filter(|c| c.result == Outcome::Fail)
        .map(|c| format!("Check {} ({})", c.number, c.name))
        .collect();
    // The signer's login comes from GitHub, whose logins are letters, digits
    // and hyphens; anything else is dropped rather than echoed.
    let login: String = verdict
        .signer
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    format!(
        "@{login} this sign-off is blocked by {}.",
        failing.join(", ")
    )
}

fn evidence_block(verdict: &Verdict) -> String {
    let mut lines = Vec::new();
    for check in &verdict.checks {
        for item in check.evidence.iter().take(20) {
            lines.push(format!("- Check {}: {}", check.number, escape_inline(item)));
        }
    }
    if lines.is_empty() {
        return String::new();
    }
    format!(
        "\n\n<details>\n<summary>Evidence</summary>\n\n{}\n\n</details>",
        lines.join("\n")
    )
}

/// The whole comment body.
pub fn comment(version: ContractVersion, verdict: &Verdict, kind: SignoffKind, id: u64) -> String {
    let mut body = marker(version, &verdict.assessed_commit, kind, id);
    body.push('\n');
    body.push_str(header(verdict.verdict));
    if version.has_details_group() {
        let pareto_warns = verdict
            .checks
            .iter()
            .any(|c| c.number == 14 && c.result == Outcome::Warn);
        if pareto_warns {
            body.push_str("\n\n");
            body.push_str(PARETO_ESCALATION);
        }
        if verdict.verdict == VerdictWord::Rejected {
            body.push_str("\n\n");
            body.push_str(&blocking_line(verdict));
        }
        let open: Vec<String> = verdict
            .checks
            .iter()
            .filter(|c| matches!(c.result, Outcome::Fail | Outcome::Warn))
            .map(row)
            .collect();
        let folded: Vec<String> = verdict
            .checks
            .iter()
            .filter(|c| matches!(c.result, Outcome::Pass | Outcome::NotApplicable))
            .map(row)
            .collect();
        for line in &open {
            body.push_str("\n\n");
            body.push_str(line);
        }
        if !folded.is_empty() {
            body.push_str("\n\n<details>\n<summary>Passed and not applicable checks</summary>\n\n");
            body.push_str(&folded.join("\n\n"));
            body.push_str("\n\n</details>");
        }
        body.push_str(&evidence_block(verdict));
        body.push_str(&format!(
            "\n\nAssessed commit: {}.\n",
            klaud_render::escape::code(&verdict.assessed_commit)
        ));
    } else {
        body.push('\n');
        if verdict.verdict == VerdictWord::Rejected {
            body.push_str(&blocking_line(verdict));
            body.push('\n');
        }
        let rows: Vec<String> = verdict.checks.iter().map(row).collect();
        body.push('\n');
        body.push_str(&rows.join("\n"));
        body.push_str(&evidence_block(verdict));
        body.push('\n');
    }
    body
}

/// What the first line of the comment a new verdict replaces starts with:
/// in 0-10 and 0-12 the pull request has one verdict comment, edited in
/// place with the newest assessed commit in its marker; in 0-15 each
/// sign-off has its own.
pub fn slot(version: ContractVersion, marker: &str) -> String {
    match version {
        ContractVersion::Checks0To15 => marker.to_owned(),
        _ => format!("{MARKER_PREFIX} sha="),
    }
}

/// Whether a comment body is the verdict in `slot` (see [`slot`]).
pub fn is_verdict_for(body: &str, slot: &str) -> bool {
    body.lines()
        .next()
        .is_some_and(|first| first.starts_with(slot))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_breaks_mentions_markdown_and_html() {
        let hostile = "@org/team <img src=x> **bold** [x](http://e) `c`\n## h";
        let escaped = escape_inline(hostile);
        assert!(!escaped.contains("@org"));
        assert!(!escaped.contains('<'));
        assert!(!escaped.contains("**"));
        assert!(!escaped.contains("[x]("));
        assert!(!escaped.contains('\n'));
    }

    #[test]
    fn older_contracts_keep_one_verdict_per_pull_request_newer_one_per_signoff() {
        let old = marker(ContractVersion::Checks0To12, "abc", SignoffKind::Review, 9);
        assert!(is_verdict_for(
            "<!-- codeowner-signoff-verify sha=def -->\n## x",
            &slot(ContractVersion::Checks0To12, &old)
        ));
        let new = marker(ContractVersion::Checks0To15, "abc", SignoffKind::Review, 9);
        assert_eq!(
            new,
            "<!-- codeowner-signoff-verify signoff=pullrequestreview-9 -->"
        );
        let slot15 = slot(ContractVersion::Checks0To15, &new);
        assert!(is_verdict_for(&format!("{new}\n## x"), &slot15));
        assert!(!is_verdict_for(
            "<!-- codeowner-signoff-verify signoff=pullrequestreview-10 -->",
            &slot15
        ));
    }

    #[test]
    fn long_reasons_are_cut() {
        let long = "a".repeat(5000);
        assert!(escape_inline(&long).chars().count() <= MAX_REASON_CHARS + 1);
    }
}
