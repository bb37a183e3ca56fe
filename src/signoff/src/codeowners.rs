//! GitHub's CODEOWNERS file: the last matching line wins and owners do not
//! accumulate.
//!
//! Written here because no CODEOWNERS or gitignore-glob crate is in the lock
//! file and the rule set is small: GitHub documents CODEOWNERS patterns as
//! gitignore patterns without `!` negation, `[ ]` ranges or `\#` escapes.

use std::sync::LazyLock;

use regex::Regex;

/// One rule line.
#[derive(Debug, Clone)]
pub struct Rule {
    /// 1-based line number in the file.
    pub line: usize,
    /// The line as written (trimmed).
    pub text: String,
    pub pattern: String,
    /// Owners as written, without `@` (users, `org/team`, or e-mail).
    pub owners: Vec<String>,
    matcher: Regex,
}

impl Rule {
    /// A catch-all line (`*` or `/**`): a default, not a per-file gatekeeper.
    pub fn is_catch_all(&self) -> bool {
        matches!(self.pattern.as_str(), "*" | "/*" | "**" | "/**" | "/")
    }

    /// Whether `login` is listed on the line directly (logins are
    /// case-insensitive on GitHub).
    pub fn lists_user(&self, login: &str) -> bool {
        self.owners.iter().any(|o| o.eq_ignore_ascii_case(login))
    }

    /// The teams (`org/team`) on the line.
    pub fn teams(&self) -> impl Iterator<Item = &str> {
        self.owners
            .iter()
            .filter(|o| o.contains('/'))
            .map(String::as_str)
    }
}

/// A parsed CODEOWNERS file.
#[derive(Debug, Clone, Default)]
pub struct Codeowners {
    pub rules: Vec<Rule>,
}

static OWNER: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^@?(\S+)$").expect("regex"));

impl Codeowners {
    /// Parses the file; lines whose pattern cannot be compiled are skipped
    /// (GitHub ignores invalid lines too).
    pub fn parse(text: &str) -> Self {
        let rules = text
            .lines()
            .enumerate()
            .filter_map(|(index, raw)| {
                let line = raw.split_once(" #").map_or(raw, |(l, _)| l).trim();
                if line.is_empty() || line.starts_with('#') {
                    return None;
                }
                let mut parts = line.split_whitespace();
                let pattern = parts.next()?.to_owned();
                let owners = parts
                    .filter_map(|o| OWNER.captures(o).map(|c| c[1].to_owned()))
                    .collect();
                let matcher = compile(&pattern)?;
                Some(Rule {
                    line: index + 1,
                    text: line.to_owned(),
                    pattern,
                    owners,
                    matcher,
                })
            })
            .collect();
        Self { rules }
    }

    /// The rule that decides `path`: the last one that matches.
    pub fn owner_rule(&self, path: &str) -> Option<&Rule> {
        self.rules.iter().rev().find(|r| r.matcher.is_match(path))
    }

    /// Whether `login` is listed on any line.
    pub fn lists_anywhere(&self, login: &str) -> bool {
        self.rules.iter().any(|r| r.lists_user(login))
    }
}

/// A gitignore-style pattern as a regex over a repository-relative path.
fn compile(pattern: &str) -> Option<Regex> {
    let anchored = pattern.starts_with('/') || pattern.trim_end_matches('/').contains('/');
    let directory = pattern.ends_with('/');
    let body = pattern.trim_start_matches('/').trim_end_matches('/');
    if body.is_empty() {
        return Regex::new("^.*$").ok();
    }
    let mut re = String::new();
    let chars: Vec<char> = body.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '*' if chars.get(i + 1) == Some(&'*') => {
                let at_slash = chars.get(i + 2) == Some(&'/');
                re.push_str(if at_slash { "(?:.*/)?" } else { ".*" });
                i += if at_slash { 3 } else { 2 };
                continue;
            }
            '*' => re.push_str("[^/]*"),
            '?' => re.push_str("[^/]"),
            c => re.push_str(&regex::escape(&c.to_string())),
        }
        i += 1;
    }
    let prefix = if anchored { "^" } else { "^(?:.*/)?" };
    // A pattern names a file or a directory; a directory owns everything
    // below it.
    let suffix = if directory { "/.*$" } else { "(?:/.*)?$" };
    Regex::new(&format!("{prefix}{re}{suffix}")).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "* @InferenceX/core\n\n# NVIDIA master config\nconfigs/nvidia-master.yaml @ankur-singh @kedarpotdar-nv @InferenceX/core\nexperimental/operatorx/ @hbarclay\n*.md @docs\n";

    #[test]
    fn the_last_matching_line_wins_and_owners_do_not_accumulate() {
        let owners = Codeowners::parse(FILE);
        let rule = owners.owner_rule("configs/nvidia-master.yaml").unwrap();
        assert_eq!(rule.line, 4);
        assert!(rule.lists_user("Ankur-Singh"));
        assert!(!rule.lists_user("hbarclay"));
        assert!(
            owners
                .owner_rule("runners/launch_b300-nv.sh")
                .unwrap()
                .is_catch_all()
        );
        assert_eq!(
            owners
                .owner_rule("experimental/operatorx/a/b.py")
                .unwrap()
                .line,
            5
        );
        assert_eq!(owners.owner_rule("docs/x/readme.md").unwrap().line, 6);
        assert!(
            owners
                .owner_rule("experimental/operatorx")
                .unwrap()
                .is_catch_all()
        );
    }

    #[test]
    fn teams_are_listed_separately_from_users() {
        let owners = Codeowners::parse(FILE);
        let rule = owners.owner_rule("configs/nvidia-master.yaml").unwrap();
        assert_eq!(rule.teams().collect::<Vec<_>>(), vec!["InferenceX/core"]);
        assert!(owners.lists_anywhere("hbarclay"));
        assert!(!owners.lists_anywhere("someone"));
    }
}
