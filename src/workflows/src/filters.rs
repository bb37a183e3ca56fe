//! GitHub's filter patterns for `branches`, `tags` and `paths`.
//!
//! Each pattern is translated to a regular expression and matched by the
//! `regex` crate. Not `globset`: GitHub's cheat sheet gives `?` and `+`
//! regex-like meanings ("zero or one" / "one or more" of the preceding
//! character) that no glob crate implements, and `{a,b}` is not special on
//! GitHub. The rules, from "Workflow syntax for GitHub Actions", filter
//! pattern cheat sheet:
//! - `*` matches zero or more characters but not `/`; `**` matches any
//!   characters (and `**/` also matches nothing, so `**/a` matches `a`);
//! - `?` and `+` repeat the preceding character zero-or-one / one-or-more times;
//! - `[...]` is a character class; `\` escapes the next character;
//! - a leading `!` negates: patterns apply in order and the last match wins.

use regex::Regex;

/// A filter pattern that does not compile, and why.
#[derive(Debug, thiserror::Error)]
#[error("filter pattern `{pattern}`: {problem}")]
pub(crate) struct FilterError {
    /// The pattern as written.
    pattern: String,
    problem: PatternProblem,
}

/// What is wrong with a filter pattern.
#[derive(Debug, thiserror::Error)]
enum PatternProblem {
    #[error("empty pattern")]
    Empty,
    #[error("`{0}` has no preceding character")]
    NoPreceding(char),
    #[error("unclosed `[`")]
    UnclosedClass,
    #[error("empty `[]`")]
    EmptyClass,
    #[error("trailing `\\`")]
    TrailingEscape,
    #[error("{0}")]
    Regex(#[from] regex::Error),
}

/// A compiled list of filter patterns.
#[derive(Debug, Clone)]
pub(crate) struct Filter {
    rules: Vec<(bool, Regex)>,
    /// The patterns as written, for messages.
    patterns: Vec<String>,
}

impl Filter {
    /// Compiles patterns; the error names the pattern that does not compile.
    pub(crate) fn new(patterns: &[String]) -> Result<Self, FilterError> {
        let mut rules = Vec::with_capacity(patterns.len());
        for pattern in patterns {
            let (negated, body) = match pattern.strip_prefix('!') {
                Some(rest) => (true, rest),
                None => (false, pattern.as_str()),
            };
            let regex = translate(body).map_err(|problem| FilterError {
                pattern: pattern.clone(),
                problem,
            })?;
            rules.push((negated, regex));
        }
        Ok(Self {
            rules,
            patterns: patterns.to_vec(),
        })
    }

    /// The patterns as written in the workflow file.
    pub(crate) fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// Whether `value` is included: the last matching pattern decides, and a
    /// value no positive pattern matches is excluded.
    pub(crate) fn includes(&self, value: &str) -> bool {
        let mut included = false;
        for (negated, regex) in &self.rules {
            if regex.is_match(value) {
                included = !negated;
            }
        }
        included
    }
}

fn translate(pattern: &str) -> Result<Regex, PatternProblem> {
    if pattern.is_empty() {
        return Err(PatternProblem::Empty);
    }
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::from("^");
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '*' if chars.get(i + 1) == Some(&'*') => {
                if chars.get(i + 2) == Some(&'/') {
                    out.push_str("(?:.*/)?");
                    i += 3;
                } else {
                    out.push_str(".*");
                    i += 2;
                }
                continue;
            }
            '*' => out.push_str("[^/]*"),
            '?' | '+' => {
                if i == 0 {
                    return Err(PatternProblem::NoPreceding(chars[i]));
                }
                out.push(chars[i]);
            }
            '[' => {
                let close = chars[i + 1..]
                    .iter()
                    .position(|&c| c == ']')
                    .ok_or(PatternProblem::UnclosedClass)?;
                let class: String = chars[i + 1..i + 1 + close].iter().collect();
                if class.is_empty() {
                    return Err(PatternProblem::EmptyClass);
                }
                out.push('[');
                for c in class.chars() {
                    match c {
                        '-' => out.push('-'),
                        c if c.is_ascii_alphanumeric() => out.push(c),
                        c => out.push_str(&regex::escape(&c.to_string())),
                    }
                }
                out.push(']');
                i += close + 2;
                continue;
            }
            '\\' => {
                let next = chars.get(i + 1).ok_or(PatternProblem::TrailingEscape)?;
                out.push_str(&regex::escape(&next.to_string()));
                i += 2;
                continue;
            }
            c => out.push_str(&regex::escape(&c.to_string())),
        }
        i += 1;
    }
    out.push('$');
    Ok(Regex::new(&out)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(patterns: &[&str]) -> Filter {
        Filter::new(&patterns.iter().map(|p| p.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn cheat_sheet_examples() {
        assert!(f(&["feature/*"]).includes("feature/my-branch"));
        assert!(!f(&["feature/*"]).includes("feature/your/branch"));
        assert!(f(&["feature/**"]).includes("feature/your/branch"));
        assert!(f(&["**/README.md"]).includes("README.md"));
        assert!(f(&["**/README.md"]).includes("docs/x/README.md"));
        assert!(f(&["*.js"]).includes("app.js"));
        assert!(!f(&["*.js"]).includes("src/app.js"));
        assert!(f(&["**.js"]).includes("src/app.js"));
        assert!(f(&["v2*"]).includes("v2.0"));
        assert!(f(&["v[12].[0-9]+.[0-9]+"]).includes("v1.10.1"));
        assert!(!f(&["v[12].[0-9]+.[0-9]+"]).includes("v3.1.1"));
        assert!(f(&["Octoc?t"]).includes("Octoct"));
        assert!(f(&["Octoc?t"]).includes("Octoct") && !f(&["Octoc?t"]).includes("Octocxt"));
        assert!(f(&["perf-changelog.yaml"]).includes("perf-changelog.yaml"));
        assert!(!f(&["perf-changelog.yaml"]).includes("perf-changelogXyaml"));
        assert!(f(&["release\\+x"]).includes("release+x"));
    }

    #[test]
    fn negation_is_ordered_and_last_match_wins() {
        let filter = f(&["docs/**", "!docs/private/**", "docs/private/ok.md"]);
        assert!(filter.includes("docs/a.md"));
        assert!(!filter.includes("docs/private/secret.md"));
        assert!(filter.includes("docs/private/ok.md"));
        assert!(!filter.includes("src/main.rs"));
    }

    #[test]
    fn malformed_patterns_are_errors() {
        for bad in ["", "[abc", "?x", "+", "a\\", "[]"] {
            assert!(Filter::new(&[bad.to_string()]).is_err(), "{bad:?}");
        }
    }
}
