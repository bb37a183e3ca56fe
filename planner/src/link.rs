//! The one `Link` header reader (RFC 8288 pagination), for the registries
//! and GitHub alike.
//!
//! Written out rather than taken from `parse_link_header`: that crate (one
//! maintainer, a regex and `lazy_static` behind it) accepts
//! `<unterminated; rel=next` as a link to `unterminated`, misses `next` in
//! a relation list (`rel="prev next"`) and refuses `REL=` in capitals,
//! where RFC 8288 makes relation types lists and names case-insensitive.

/// The `rel="next"` target of one `Link` header value, if it has one.
pub fn next_link(header: &str) -> Option<&str> {
    let mut rest = header;
    loop {
        let open = rest.find('<')?;
        let close = open + rest[open..].find('>')?;
        let target = &rest[open + 1..close];
        let after = &rest[close + 1..];
        let end = after.find('<').unwrap_or(after.len());
        let params = &after[..end];
        let is_next = params.split(';').any(|p| {
            let p = p.trim().trim_end_matches(',').trim();
            p.split_once('=').is_some_and(|(k, v)| {
                k.trim().eq_ignore_ascii_case("rel")
                    && v.trim()
                        .trim_matches('"')
                        .split_ascii_whitespace()
                        .any(|r| r.eq_ignore_ascii_case("next"))
            })
        });
        if is_next {
            return Some(target);
        }
        rest = &after[end..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_links_are_found() {
        assert_eq!(
            next_link(r#"</v2/r/tags/list?last=b&n=2>; rel="next""#),
            Some("/v2/r/tags/list?last=b&n=2")
        );
        assert_eq!(
            next_link("<https://h/v2/r/tags/list?n=1&last=a>; rel=next"),
            Some("https://h/v2/r/tags/list?n=1&last=a")
        );
        assert_eq!(
            next_link(r#"<https://a/p1>; rel="prev", <https://a/p3>; rel="next""#),
            Some("https://a/p3")
        );
        assert_eq!(next_link(r#"<https://a/p1>; rel="prev""#), None);
        assert_eq!(next_link("garbage"), None);
        assert_eq!(next_link("<unterminated; rel=next"), None);
        assert_eq!(
            next_link(r#"<https://a/p1>; REL="prev Next""#),
            Some("https://a/p1")
        );
    }
}
