//! The one escaping rule for outside input (config keys, tags, labels,
//! error messages, PR titles, logins, reasons, anything a person or a
//! server wrote) in what Klaud writes on GitHub.
//!
//! Whatever goes through [`text`] can never mention a user or a team, open
//! HTML (and so never end one of Klaud's hidden markers or a `<details>`
//! block early), link an issue, break a table, span lines, or hide or
//! reorder characters with bidirectional or zero-width controls; and it is
//! bounded. [`code`] is the same promise for a code span, [`title`] for a
//! title (no Markdown is rendered there), [`attribute`] for an HTML
//! attribute or element Klaud itself writes, [`link`] for a link whose
//! address came from outside.

/// Longest outside value kept; longer text is cut with `…`.
pub const MAX_FIELD_CHARS: usize = 300;

/// A word joiner after `@` stops GitHub from reading a mention while the
/// text still looks the same.
pub const MENTION_BREAK: &str = "@\u{2060}";

/// Characters that change how text reads without being seen: zero-width
/// spaces and joiners, bidirectional marks, embeddings, overrides and
/// isolates, the byte-order mark and the soft hyphen. Dropped, so a value
/// cannot look like another or smuggle a character past a reader; the
/// mention break is added back where it belongs.
pub fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00ad}'
            | '\u{061c}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}'
            | '\u{feff}'
    )
}

/// One line of at most `max` characters: control characters (line breaks,
/// tabs) become spaces, invisible ones are dropped, the rest is cut with
/// `…`.
pub fn one_line(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max.saturating_mul(4)));
    let mut count = 0;
    for c in s.chars() {
        if is_invisible(c) {
            continue;
        }
        if count == max {
            out.push('…');
            break;
        }
        count += 1;
        out.push(if c.is_control() { ' ' } else { c });
    }
    out
}

/// Outside text as inline Markdown, at most [`MAX_FIELD_CHARS`]
/// characters: see [`text_within`].
pub fn text(s: &str) -> String {
    text_within(s, MAX_FIELD_CHARS)
}

/// Outside text as inline Markdown of at most `max` characters: one line,
/// emphasis, code, links, images, tables, headings, math and issue links
/// (`#123`) escaped with a backslash, HTML as entities, mentions broken.
pub fn text_within(s: &str, max: usize) -> String {
    escape_chars(&one_line(s, max), true)
}

/// Like [`text_within`], except that `_` stays as written: for reasons
/// that name repository files (`benchmarks/single_node/dsr1_fp8.sh`),
/// which InferenceX's sign-off thread shows verbatim. An underscore can
/// only make emphasis, never a mention, link, tag or code span.
pub fn names_within(s: &str, max: usize) -> String {
    escape_chars(&one_line(s, max), false)
}

/// Like [`text_within`], except that a pair of backticks stays a code span
/// (its inside escaped as [`code`] escapes it): for sentences Klaud wrote
/// with code spans and keeps where people can edit them (the dashboard
/// issue's notes), so they read as written while whatever was planted in
/// them, inside or outside the backticks, stays inert. An unpaired
/// backtick is escaped.
pub fn text_with_code(s: &str, max: usize) -> String {
    let line = one_line(s, max);
    let pieces: Vec<&str> = line.split('`').collect();
    let mut out = String::with_capacity(line.len() + 8);
    for (i, piece) in pieces.iter().enumerate() {
        if i % 2 == 0 {
            out.push_str(&escape_chars(piece, true));
        } else if i + 1 < pieces.len() {
            out.push_str(&code_span(piece));
        } else {
            out.push_str("\\`");
            out.push_str(&escape_chars(piece, true));
        }
    }
    out
}

fn escape_chars(line: &str, underscore: bool) -> String {
    let mut out = String::with_capacity(line.len() + 8);
    for c in line.chars() {
        match c {
            '_' if !underscore => out.push(c),
            // `$` opens GitHub's inline math, which would swallow a
            // following code span's backtick.
            '\\' | '`' | '*' | '_' | '[' | ']' | '|' | '#' | '~' | '!' | '$' => {
                out.push('\\');
                out.push(c);
            }
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '@' => out.push_str(MENTION_BREAK),
            _ => out.push(c),
        }
    }
    out
}

/// Outside text in a title (an issue's or pull request's: GitHub renders
/// no Markdown there): one line, bounded, no mentions.
pub fn title(s: &str) -> String {
    break_mentions(&one_line(s, MAX_FIELD_CHARS))
}

/// Only the mentions of `s` broken: for outside text Klaud stores (a
/// command's reason, who released a claim) and escapes again with [`text`]
/// where it is shown; idempotent, so the second pass adds nothing.
pub fn break_mentions(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if is_invisible(c) {
            continue;
        }
        if c == '@' {
            out.push_str(MENTION_BREAK);
        } else {
            out.push(c);
        }
    }
    out
}

/// Outside text as a code span of at most [`MAX_FIELD_CHARS`] characters.
/// GitHub never reads mentions inside code, so `@` stays copyable
/// (`repo:tag@sha256:…`); angle brackets become look-alikes because code
/// spans cannot escape them and a literal `-->` would end a marker, and a
/// pipe becomes one because it splits a table's cells even inside code. The
/// fence is longer than any run of backticks inside.
pub fn code(s: &str) -> String {
    code_span(&one_line(s, MAX_FIELD_CHARS))
}

fn code_span(line: &str) -> String {
    let body: String = line
        .chars()
        .map(|c| match c {
            '<' => '‹',
            '>' => '›',
            '|' => '¦',
            _ => c,
        })
        .collect();
    let longest_run = body.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest_run + 1);
    let pad = if body.starts_with('`') || body.ends_with('`') || body.is_empty() {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{body}{pad}{fence}")
}

/// Outside text inside an HTML attribute or element Klaud writes into a
/// Markdown body (`<code title="…">…</code>`), at most `max` characters:
/// no character can end the attribute, open a tag or start Markdown, and
/// no mention is read.
pub fn attribute(s: &str, max: usize) -> String {
    let mut out = String::new();
    for c in s
        .chars()
        .filter(|c| !c.is_control() && !is_invisible(*c))
        .take(max)
    {
        match c {
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '|' => out.push_str("&#124;"),
            '`' => out.push_str("&#96;"),
            '*' => out.push_str("&#42;"),
            '_' => out.push_str("&#95;"),
            '[' => out.push_str("&#91;"),
            '\\' => out.push_str("&#92;"),
            c => out.push(c),
        }
    }
    out
}

/// A Markdown link whose URL must be `https://` (or `http://` to a loopback
/// host: the sandbox and local test servers); anything else renders as
/// plain [`text`] so a hostile URL cannot inject Markdown or script.
pub fn link(label: &str, url: &str) -> String {
    if is_safe_url(url) {
        format!("[{}]({url})", text(label))
    } else {
        text(label)
    }
}

/// Whether `url` may be a link's address as it is: `https://` (or
/// `http://` to a loopback host), bounded, and nothing in it can close the
/// link or open HTML. A backslash is refused too: before the closing
/// parenthesis it escapes it, and the link never closes.
pub fn is_safe_url(url: &str) -> bool {
    (url.starts_with("https://") || is_loopback_http(url))
        && url.len() <= 2048
        && !url.chars().any(|c| {
            c.is_whitespace()
                || c.is_control()
                || is_invisible(c)
                || matches!(c, '(' | ')' | '<' | '>' | '"' | '\'' | '\\')
        })
}

/// `http://` to 127.0.0.0/8, `[::1]` or `localhost`: plain HTTP there never
/// leaves the machine.
pub fn is_loopback_http(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return false;
    }
    let host = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((h, port)) if port.is_empty() || port.starts_with(':') => h,
            _ => return false,
        },
        None => authority.split(':').next().unwrap_or(""),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_text_cannot_mention_or_inject() {
        assert_eq!(text("@octocat"), "@\u{2060}octocat");
        assert_eq!(text("a|b <!-- x -->"), "a\\|b &lt;\\!-- x --&gt;");
        assert_eq!(text("</details>"), "&lt;/details&gt;");
        assert_eq!(text("see #12"), "see \\#12");
        assert_eq!(text("line\nbreak"), "line break");
        assert_eq!(text("a\u{202e}b\u{200b}@\u{2060}c"), "ab@\u{2060}c");
        assert_eq!(title("@x\ny"), "@\u{2060}x y");
        assert_eq!(break_mentions(&break_mentions("@a")), "@\u{2060}a");
        assert_eq!(code("repo:t@sha256:ab"), "`repo:t@sha256:ab`");
        assert_eq!(code("a`b"), "``a`b``");
        assert_eq!(code("`"), "`` ` ``");
        assert_eq!(code("x --> |"), "`x --› ¦`");
        assert_eq!(
            text_with_code("family `a_b|<c>` by @x, `odd", 300),
            "family `a_b¦‹c›` by @\u{2060}x, \\`odd"
        );
        assert_eq!(text_with_code("``", 300), "`  `");
        assert_eq!(attribute("x\"><b>_", 400), "x&quot;&gt;&lt;b&gt;&#95;");
        let long = "é".repeat(1000);
        assert_eq!(text(&long).chars().count(), MAX_FIELD_CHARS + 1);
        assert_eq!(text_within(&long, 600).chars().count(), 601);
    }

    #[test]
    fn links_need_a_safe_address() {
        assert_eq!(
            link("Run 1", "https://github.com/o/r/actions/runs/1"),
            "[Run 1](https://github.com/o/r/actions/runs/1)"
        );
        assert_eq!(link("Run 1", "javascript:alert(1)"), "Run 1");
        assert_eq!(link("x", "https://a/b) [y](https://evil"), "x");
        assert_eq!(link("x", "https://github.com/o/r/pull/x@victim\\"), "x");
        assert_eq!(
            link("PR 1", "http://127.0.0.1:4000/_html/o/r/pull/1"),
            "[PR 1](http://127.0.0.1:4000/_html/o/r/pull/1)"
        );
        assert_eq!(link("x", "http://[::1]:80/x"), "[x](http://[::1]:80/x)");
        assert_eq!(link("x", "http://localhost/x"), "[x](http://localhost/x)");
        for remote in [
            "http://example.com/x",
            "http://127.0.0.1.evil.com/x",
            "http://127.0.0.1@evil.com/x",
            "http://[::1].evil/x",
        ] {
            assert_eq!(link("x", remote), "x", "{remote}");
        }
    }
}
