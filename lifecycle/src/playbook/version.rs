//! Engine version ranges: `>=0.20, <0.22`, `=0.5.12`, `<0.5.12`.
//!
//! Versions come from image tags (`v0.21.0`, `v0.5.12-cu130`,
//! `0.21.0rc1`): the leading `v` is dropped and the dotted numbers before
//! the first other character are compared, missing parts counting as zero
//! (so `0.21` is `0.21.0`). A tag without such numbers (`latest`,
//! `deepseek-v4-hopper`) is in no range: a scoped entry does not apply to
//! an unknown version.

use std::cmp::Ordering;
use std::fmt;

/// Most comparisons in one range.
const MAX_BOUNDS: usize = 8;
/// Most dotted parts in one version.
const MAX_PARTS: usize = 6;

/// A version range: every bound must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionRange {
    bounds: Vec<(Op, Vec<u64>)>,
    text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Ge,
    Gt,
    Le,
    Lt,
    Eq,
}

/// A range that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("version range {text:?}: {reason}")]
pub struct VersionRangeError {
    /// The range as written (cut).
    pub text: String,
    /// What is wrong.
    pub reason: String,
}

impl VersionRange {
    /// Reads `>=0.20, <0.22` (comparisons `>=`, `>`, `<=`, `<`, `=`,
    /// separated by commas).
    pub fn parse(text: &str) -> Result<VersionRange, VersionRangeError> {
        let err = |reason: String| VersionRangeError {
            text: text.chars().take(80).collect(),
            reason,
        };
        let mut bounds = Vec::new();
        for part in text.split(',') {
            let part = part.trim();
            if part.is_empty() {
                return Err(err("an empty comparison".into()));
            }
            let (op, rest) = if let Some(r) = part.strip_prefix(">=") {
                (Op::Ge, r)
            } else if let Some(r) = part.strip_prefix("<=") {
                (Op::Le, r)
            } else if let Some(r) = part.strip_prefix("==") {
                (Op::Eq, r)
            } else if let Some(r) = part.strip_prefix('>') {
                (Op::Gt, r)
            } else if let Some(r) = part.strip_prefix('<') {
                (Op::Lt, r)
            } else if let Some(r) = part.strip_prefix('=') {
                (Op::Eq, r)
            } else {
                return Err(err(format!(
                    "{part:?} does not start with >=, >, <=, < or ="
                )));
            };
            let rest = rest.trim();
            let parts = numbers(rest)
                .filter(|_| {
                    rest.trim_start_matches('v')
                        .chars()
                        .all(|c| c.is_ascii_digit() || c == '.')
                })
                .ok_or_else(|| err(format!("{rest:?} is not a dotted version like 0.20.2")))?;
            bounds.push((op, parts));
            if bounds.len() > MAX_BOUNDS {
                return Err(err(format!("more than {MAX_BOUNDS} comparisons")));
            }
        }
        Ok(VersionRange {
            bounds,
            text: text.trim().to_owned(),
        })
    }

    /// Whether a version (as an image tag writes it) is in the range; a tag
    /// without a leading dotted version is in none.
    pub fn contains(&self, version: &str) -> bool {
        let Some(v) = numbers(version.trim()) else {
            return false;
        };
        self.bounds.iter().all(|(op, bound)| {
            let ord = compare(&v, bound);
            match op {
                Op::Ge => ord != Ordering::Less,
                Op::Gt => ord == Ordering::Greater,
                Op::Le => ord != Ordering::Greater,
                Op::Lt => ord == Ordering::Less,
                Op::Eq => ord == Ordering::Equal,
            }
        })
    }
}

impl fmt::Display for VersionRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The leading dotted numbers of a version, or `None` when it has none.
fn numbers(version: &str) -> Option<Vec<u64>> {
    let v = version.strip_prefix('v').unwrap_or(version);
    let end = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let head = v[..end].trim_end_matches('.');
    if head.is_empty() {
        return None;
    }
    let mut out = Vec::new();
    for p in head.split('.') {
        if out.len() == MAX_PARTS {
            break;
        }
        out.push(p.parse::<u64>().ok()?);
    }
    Some(out)
}

fn compare(a: &[u64], b: &[u64]) -> Ordering {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| {
            a.get(i)
                .copied()
                .unwrap_or(0)
                .cmp(&b.get(i).copied().unwrap_or(0))
        })
        .find(|o| *o != Ordering::Equal)
        .unwrap_or(Ordering::Equal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_hold_for_image_tag_versions() {
        let r = VersionRange::parse(">=0.20, <0.22").unwrap();
        for v in ["v0.20.0", "0.20.2", "v0.21.0", "0.21.1rc1", "v0.21"] {
            assert!(r.contains(v), "{v}");
        }
        for v in [
            "v0.19.9",
            "0.22.0",
            "v0.22",
            "latest",
            "",
            "deepseek-v4-hopper",
        ] {
            assert!(!r.contains(v), "{v}");
        }
        let eq = VersionRange::parse("=0.5.12").unwrap();
        assert!(eq.contains("v0.5.12-cu130"));
        assert!(!eq.contains("v0.5.11-cu130"));
    }

    #[test]
    fn bad_ranges_are_refused_with_the_text() {
        for bad in [
            "",
            "0.20",
            ">=",
            ">=x",
            ">=0.20,",
            "~0.2",
            ">=1..2",
            ">=99999999999999999999999",
        ] {
            let e = VersionRange::parse(bad).unwrap_err();
            assert!(e.to_string().starts_with("version range"), "{e}");
        }
    }
}
