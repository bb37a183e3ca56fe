//! The one wildcard matcher: experiment family patterns and the simulator's
//! fault paths, where `*` matches any run of characters and every other
//! character only itself.
//!
//! globset matches, with everything but `*` escaped: its `?`, `[…]` and
//! `{a,b}` would give meaning to characters a family name or a request
//! path may hold, and with `literal_separator` off (its default) its `*`
//! crosses `/` like the `<master path>:<key>` form needs.

use globset::{GlobBuilder, GlobMatcher};

/// A `*`-only pattern, compiled once.
#[derive(Debug, Clone)]
pub struct Wildcard(Matcher);

#[derive(Debug, Clone)]
enum Matcher {
    Glob(GlobMatcher),
    // Not reached (an escaped `*`-only pattern is valid glob), but a
    // pattern from a configuration file must not be able to panic.
    Exact(String),
}

impl Wildcard {
    pub fn new(pattern: &str) -> Self {
        let escaped: Vec<String> = pattern.split('*').map(globset::escape).collect();
        match GlobBuilder::new(&escaped.join("*"))
            .literal_separator(false)
            .build()
        {
            Ok(glob) => Self(Matcher::Glob(glob.compile_matcher())),
            Err(_) => Self(Matcher::Exact(pattern.to_owned())),
        }
    }

    pub fn is_match(&self, text: &str) -> bool {
        match &self.0 {
            Matcher::Glob(glob) => glob.is_match(text),
            Matcher::Exact(pattern) => pattern == text,
        }
    }
}

/// Whether `text` matches the `*`-only `pattern`.
pub fn wildcard(pattern: &str, text: &str) -> bool {
    Wildcard::new(pattern).is_match(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn star_matches_any_run_and_nothing_else_is_special() {
        assert!(wildcard("/repos/*/pulls", "/repos/a/b/pulls"));
        assert!(!wildcard("/repos/*/pulls", "/repos/a/b/pulls/1"));
        assert!(wildcard("*", ""));
        assert!(wildcard("/x*y*z", "/xaaybbz"));
        assert!(wildcard("a**b", "ab"));
        assert!(!wildcard("a*a", "a"));
        assert!(wildcard("a*a", "aa"));
        assert!(wildcard(
            "configs/nvidia-master.yaml:dsr1-*",
            "configs/nvidia-master.yaml:dsr1-fp4"
        ));
        assert!(wildcard("k?[1]{a,b}\\", "k?[1]{a,b}\\"));
        assert!(!wildcard("k?", "kx"));
        assert!(!wildcard("[ab]", "a"));
        assert!(!wildcard("exact", "exactly"));
    }
}
