//! `perf-changelog.yaml`: the append-only list of performance changes, and
//! the byte rules the benchmark repository's gate enforces.
//!
//! Historical bytes are never touched — including the file's irregular
//! separators and key orders — so the append works on bytes, not on a parsed
//! and re-serialized document.

use std::fmt;

use crate::yaml;

/// File name, project-relative.
pub const CHANGELOG_PATH: &str = "perf-changelog.yaml";
/// Longest allowed description sentence, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 120;

/// One entry Klaud appends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangelogEntry {
    /// Config keys the change touches.
    pub config_keys: Vec<String>,
    /// One plain-English sentence, at most 120 characters.
    pub description: String,
    /// `https://github.com/<owner>/<repo>/pull/<N>`.
    pub pr_link: String,
}

/// A broken byte rule, with where it broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChangelogViolation {
    /// The head does not start with the base bytes.
    #[error(
        "historical bytes changed at byte {offset} (line {line}); the changelog is append-only — re-take the base file and append again"
    )]
    HistoryChanged { offset: usize, line: usize },
    /// The base does not end in a newline, so no append can be well-formed.
    #[error("the base file does not end with a newline; fix the base branch first")]
    BaseWithoutNewline,
    /// The appended part does not start with exactly one empty line.
    #[error(
        "the appended part must start with exactly one empty line before `- config-keys:` (line {line})"
    )]
    Separator { line: usize },
    /// Appended entries are not separated by exactly one empty line.
    #[error("line {line}: appended entries must be separated by exactly one empty line")]
    EntrySeparation { line: usize },
    /// The file does not end with exactly one newline.
    #[error("the file must end with exactly one newline")]
    Ending,
    /// A forbidden byte in the appended part.
    #[error("line {line}: forbidden {name} character in the appended part")]
    ForbiddenByte { line: usize, name: &'static str },
    /// The appended part is not well-formed entries.
    #[error("line {line}: {reason}")]
    Entry { line: usize, reason: String },
    /// The base is not a YAML list, so an appended `- config-keys:` item
    /// would not parse.
    #[error(
        "line {line}: the base file is not a YAML list of entries ({found}); nothing was appended — fix the base branch first"
    )]
    NotAList { line: usize, found: String },
}

/// Why an entry could not be appended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChangelogError {
    /// The entry itself is invalid.
    #[error("changelog entry: {0}")]
    InvalidEntry(#[from] EntryProblem),
    /// The base breaks a rule that makes appending impossible.
    #[error(transparent)]
    Base(#[from] ChangelogViolation),
}

/// What is wrong with an entry's own fields, as the repository's gate
/// (`utils/validate_perf_changelog.py`) would refuse it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryProblem {
    /// `config-keys` is empty.
    #[error("at least one config key is needed")]
    NoConfigKey,
    /// A key with characters the gate refuses.
    #[error("config key {key:?} must be letters, digits, '.', '_', '-' or '*'")]
    BadConfigKey {
        /// The key.
        key: String,
    },
    /// An empty or blank description.
    #[error("the description is empty")]
    EmptyDescription,
    /// A description over the gate's length.
    #[error("the description has {chars} characters; at most {MAX_DESCRIPTION_CHARS} are allowed")]
    LongDescription {
        /// Its length in characters.
        chars: usize,
    },
    /// A description over several lines or with control characters.
    #[error("the description must be one line without control characters")]
    ControlCharacters,
    /// Leading or trailing spaces.
    #[error("the description must not start or end with spaces")]
    PaddedDescription,
    /// `pr-link` is not a pull request address.
    #[error("pr-link {link:?} must look like https://github.com/<owner>/<repo>/pull/<number>")]
    BadPrLink {
        /// The link.
        link: String,
    },
    /// `pr-link` names another repository's pull request.
    #[error(
        "pr-link {link:?} must point at this repository's own pull requests: https://github.com/{repository}/pull/<number>"
    )]
    ForeignPrLink {
        /// The link.
        link: String,
        /// The repository it must name.
        repository: String,
    },
}

impl ChangelogEntry {
    /// Checks the entry's fields.
    pub fn validate(&self) -> Result<(), EntryProblem> {
        if self.config_keys.is_empty() {
            return Err(EntryProblem::NoConfigKey);
        }
        for key in &self.config_keys {
            let ok = !key.is_empty()
                && key.len() <= 200
                && key.starts_with(|c: char| c.is_ascii_alphanumeric())
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '*'));
            if !ok {
                return Err(EntryProblem::BadConfigKey { key: key.clone() });
            }
        }
        let description = self.description.as_str();
        let chars = description.chars().count();
        if description.trim().is_empty() {
            return Err(EntryProblem::EmptyDescription);
        }
        if chars > MAX_DESCRIPTION_CHARS {
            return Err(EntryProblem::LongDescription { chars });
        }
        if description.chars().any(char::is_control) {
            return Err(EntryProblem::ControlCharacters);
        }
        if description != description.trim() {
            return Err(EntryProblem::PaddedDescription);
        }
        if !is_pr_link(&self.pr_link) {
            return Err(EntryProblem::BadPrLink {
                link: self.pr_link.clone(),
            });
        }
        Ok(())
    }
}

impl fmt::Display for ChangelogEntry {
    /// The entry's exact bytes, without the separating empty line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "- config-keys:")?;
        for key in &self.config_keys {
            writeln!(f, "    - {key}")?;
        }
        writeln!(f, "  description:")?;
        let quoted = yaml::encode_scalar(&self.description, yaml::Style::DoubleQuoted)
            .map_err(|_| fmt::Error)?;
        writeln!(f, "    - {quoted}")?;
        writeln!(f, "  pr-link: {}", self.pr_link)
    }
}

fn is_pr_link(link: &str) -> bool {
    let Some(rest) = link.strip_prefix("https://github.com/") else {
        return false;
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let name_ok = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    };
    parts.len() == 4
        && name_ok(parts[0])
        && name_ok(parts[1])
        && parts[2] == "pull"
        && !parts[3].is_empty()
        && parts[3].len() <= 10
        && parts[3].chars().all(|c| c.is_ascii_digit())
}

impl ChangelogEntry {
    /// Checks that `pr-link` points at `repository`'s (`owner/name`) own
    /// pull requests, as the repository's gate demands. GitHub names are
    /// case-insensitive.
    pub fn validate_repository(&self, repository: &str) -> Result<(), EntryProblem> {
        let linked = link_repository(&self.pr_link);
        if linked
            .as_deref()
            .is_some_and(|linked| linked.eq_ignore_ascii_case(repository))
        {
            return Ok(());
        }
        Err(EntryProblem::ForeignPrLink {
            link: self.pr_link.clone(),
            repository: repository.to_owned(),
        })
    }
}

/// `owner/name` of a `https://github.com/<owner>/<name>/pull/<N>` link.
fn link_repository(link: &str) -> Option<String> {
    if !is_pr_link(link) {
        return None;
    }
    let rest = link.strip_prefix("https://github.com/")?;
    let mut parts = rest.split('/');
    Some(format!("{}/{}", parts.next()?, parts.next()?))
}

/// The repository whose pull requests the changelog's existing `pr-link`s
/// name most often: the repository's own, in a real changelog (a few entries
/// link upstream PRs instead). `None` for a changelog without links.
pub fn own_repository(base: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(base);
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    for line in text.lines() {
        if let Some(link) = line.trim().strip_prefix("pr-link:")
            && let Some(repository) = link_repository(link.trim())
        {
            *counts.entry(repository).or_default() += 1;
        }
    }
    counts
        .into_iter()
        .max_by_key(|(_, count)| *count)
        .map(|(repository, _)| repository)
}

/// Refuses a base whose top level is not a sequence (or empty): appending a
/// list item to a mapping or a scalar yields a file that does not parse.
fn check_base_is_list(base: &[u8]) -> Result<(), ChangelogViolation> {
    let Ok(text) = std::str::from_utf8(base) else {
        return Err(ChangelogViolation::NotAList {
            line: 1,
            found: "it is not valid UTF-8".to_owned(),
        });
    };
    match yaml::parse_lenient(text) {
        Err(e) => Err(ChangelogViolation::NotAList {
            line: e.line,
            found: format!("it is not valid YAML: {}", e.message),
        }),
        Ok((None, _)) => Ok(()),
        Ok((Some(doc), _)) if doc.as_sequence().is_some() => Ok(()),
        Ok((Some(doc), _)) => Err(ChangelogViolation::NotAList {
            line: doc.line,
            found: format!("its top level is {}", doc.kind_name()),
        }),
    }
}

/// Appends `entry` to the base file's bytes, obeying every byte rule. The
/// base must be a YAML list (or empty).
pub fn append_entry(base: &[u8], entry: &ChangelogEntry) -> Result<Vec<u8>, ChangelogError> {
    entry.validate()?;
    check_base_is_list(base)?;
    let mut head = base.to_vec();
    if !base.is_empty() {
        if !base.ends_with(b"\n") {
            return Err(ChangelogViolation::BaseWithoutNewline.into());
        }
        if !base.ends_with(b"\n\n") {
            head.push(b'\n');
        }
    }
    head.extend_from_slice(entry.to_string().as_bytes());
    validate_append(base, &head)?;
    Ok(head)
}

/// Checks a (base, head) pair against the byte rules and returns how many
/// entries were appended. Used for check-final.
pub fn validate_append(base: &[u8], head: &[u8]) -> Result<usize, ChangelogViolation> {
    if !head.starts_with(base) {
        let offset = base.iter().zip(head).take_while(|(a, b)| a == b).count();
        let line = head[..offset.min(head.len())]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
            + 1;
        return Err(ChangelogViolation::HistoryChanged { offset, line });
    }
    let appended = &head[base.len()..];
    if appended.is_empty() {
        return Ok(0);
    }
    if !base.is_empty() && !base.ends_with(b"\n") {
        return Err(ChangelogViolation::BaseWithoutNewline);
    }
    let base_lines = base.iter().filter(|b| **b == b'\n').count();
    let line_of =
        |offset: usize| base_lines + appended[..offset].iter().filter(|b| **b == b'\n').count() + 1;

    for (offset, byte) in appended.iter().enumerate() {
        let name = match byte {
            b'\r' => "carriage return",
            b'\t' => "tab",
            0 => "NUL",
            _ => continue,
        };
        return Err(ChangelogViolation::ForbiddenByte {
            line: line_of(offset),
            name,
        });
    }
    let text = std::str::from_utf8(appended).map_err(|e| ChangelogViolation::Entry {
        line: line_of(e.valid_up_to()),
        reason: "the appended part is not valid UTF-8".to_owned(),
    })?;

    // Exactly one empty line before the first appended entry, counting an
    // empty line the base already ends with.
    let expected_prefix = if base.is_empty() || base.ends_with(b"\n\n") {
        ""
    } else {
        "\n"
    };
    let body = text
        .strip_prefix(expected_prefix)
        .filter(|rest| rest.starts_with("- config-keys:"));
    let Some(body) = body else {
        return Err(ChangelogViolation::Separator { line: line_of(0) });
    };
    if !head.ends_with(b"\n") || head.ends_with(b"\n\n") {
        return Err(ChangelogViolation::Ending);
    }

    let body_offset = text.len() - body.len();
    let mut entries = 0;
    let mut previous_blank = false;
    let mut offset = body_offset;
    let mut entry_start = body_offset;
    let lines: Vec<&str> = body.split_inclusive('\n').collect();
    for (index, raw) in lines.iter().enumerate() {
        let line = raw.trim_end_matches('\n');
        if line.starts_with("- ") {
            if entries > 0 && !previous_blank {
                return Err(ChangelogViolation::EntrySeparation {
                    line: line_of(offset),
                });
            }
            if entries > 0 {
                check_entry(&text[entry_start..offset], line_of(entry_start))?;
            }
            entries += 1;
            entry_start = offset;
        } else if line.is_empty() {
            let next_starts_entry = lines
                .get(index + 1)
                .is_some_and(|next| next.starts_with("- "));
            if !next_starts_entry {
                return Err(ChangelogViolation::EntrySeparation {
                    line: line_of(offset),
                });
            }
        } else if line.trim().is_empty() {
            return Err(ChangelogViolation::EntrySeparation {
                line: line_of(offset),
            });
        } else if !line.starts_with("  ") {
            return Err(ChangelogViolation::Entry {
                line: line_of(offset),
                reason: "entry lines must be indented under `- config-keys:`".to_owned(),
            });
        }
        previous_blank = line.is_empty();
        offset += raw.len();
    }
    check_entry(&text[entry_start..], line_of(entry_start))?;
    Ok(entries)
}

/// Parses one appended entry and checks its fields.
fn check_entry(text: &str, line: usize) -> Result<(), ChangelogViolation> {
    let fail = |reason: String| ChangelogViolation::Entry { line, reason };
    let doc = yaml::parse(text)
        .map_err(|e| fail(format!("the entry is not valid YAML: {e}")))?
        .ok_or_else(|| fail("empty entry".to_owned()))?;
    let item = match doc.as_sequence() {
        Some([item]) => item,
        _ => {
            return Err(fail(
                "expected exactly one `- config-keys:` list item".to_owned(),
            ));
        }
    };
    let strings = |name: &str| -> Result<Vec<String>, ChangelogViolation> {
        let node = item
            .get(name)
            .ok_or_else(|| fail(format!("the entry has no {name}")))?;
        let items = node
            .as_sequence()
            .ok_or_else(|| fail(format!("{name} must be a list")))?;
        items
            .iter()
            .map(|n| {
                n.as_scalar()
                    .map(str::to_owned)
                    .ok_or_else(|| fail(format!("{name} items must be strings")))
            })
            .collect()
    };
    let config_keys = strings("config-keys")?;
    let descriptions = strings("description")?;
    let pr_link = item
        .get("pr-link")
        .and_then(yaml::Node::as_scalar)
        .ok_or_else(|| fail("the entry has no pr-link".to_owned()))?
        .to_owned();
    let [description] = descriptions.as_slice() else {
        return Err(fail("description must be exactly one sentence".to_owned()));
    };
    ChangelogEntry {
        config_keys,
        description: description.clone(),
        pr_link,
    }
    .validate()
    .map_err(|problem| fail(problem.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, n: u32) -> ChangelogEntry {
        ChangelogEntry {
            config_keys: vec![key.to_owned()],
            description: format!("Update the image of {key} to v{n}."),
            pr_link: format!("https://github.com/o/r/pull/{n}"),
        }
    }

    const BASE: &str = "- config-keys:\n    - a\n  description:\n    - \"x\"\n  pr-link: https://github.com/o/r/pull/1\n";

    #[test]
    fn append_after_a_single_newline_adds_one_empty_line() {
        let head = append_entry(BASE.as_bytes(), &entry("k", 2)).unwrap();
        let text = String::from_utf8(head).unwrap();
        assert_eq!(
            &text[BASE.len()..],
            "\n- config-keys:\n    - k\n  description:\n    - \"Update the image of k to v2.\"\n  pr-link: https://github.com/o/r/pull/2\n"
        );
    }

    #[test]
    fn append_after_an_empty_line_adds_none() {
        let base = format!("{BASE}\n");
        let head = append_entry(base.as_bytes(), &entry("k", 2)).unwrap();
        assert!(String::from_utf8(head).unwrap()[base.len()..].starts_with("- config-keys:"));
    }

    #[test]
    fn two_appends_validate_together() {
        let once = append_entry(BASE.as_bytes(), &entry("k", 2)).unwrap();
        let twice = append_entry(&once, &entry("j", 3)).unwrap();
        assert_eq!(validate_append(BASE.as_bytes(), &twice), Ok(2));
    }

    #[test]
    fn each_byte_rule_is_named_when_broken() {
        let good =
            String::from_utf8(append_entry(BASE.as_bytes(), &entry("k", 2)).unwrap()).unwrap();
        let appended = &good[BASE.len()..];
        let cases: Vec<(String, &str)> = vec![
            (good.replacen("- a", "- b", 1), "historical"),
            (
                format!("{BASE}{}", appended.trim_start_matches('\n')),
                "start with exactly one empty line",
            ),
            (
                format!("{BASE}\n{appended}"),
                "start with exactly one empty line",
            ),
            (format!("{good}\n"), "end with exactly one newline"),
            (good.trim_end().to_owned(), "end with exactly one newline"),
            (good.replace("v2.", "v2.\t"), "tab"),
            (good.replace("pull/2\n", "pull/2\r\n"), "carriage return"),
            (good.replace("v2.", "v2.\0"), "NUL"),
            (
                format!("{good}{}", appended.trim_start_matches('\n')),
                "separated by exactly one empty line",
            ),
            (
                format!("{good}\n\n{}", appended.trim_start_matches('\n')),
                "separated by exactly one empty line",
            ),
            (
                format!("{good}  \n{}", appended.trim_start_matches('\n')),
                "separated by exactly one empty line",
            ),
            (good.replace("pull/2", "issues/2"), "pr-link"),
            (
                good.replace("Update the image", &"x".repeat(130)),
                "characters",
            ),
        ];
        for (head, needle) in cases {
            let err = validate_append(BASE.as_bytes(), head.as_bytes()).unwrap_err();
            assert!(err.to_string().contains(needle), "{needle}: got {err}");
        }
    }

    #[test]
    fn invalid_entries_are_refused_before_touching_bytes() {
        let mut bad = entry("k", 2);
        bad.description = "x".repeat(121);
        assert!(matches!(
            append_entry(BASE.as_bytes(), &bad),
            Err(ChangelogError::InvalidEntry(_))
        ));
        bad = entry("k", 2);
        bad.pr_link = "http://example.com".to_owned();
        assert!(append_entry(BASE.as_bytes(), &bad).is_err());
        bad = entry("k k", 2);
        assert!(append_entry(BASE.as_bytes(), &bad).is_err());
        assert_eq!(
            append_entry(b"- x", &entry("k", 2)),
            Err(ChangelogError::Base(ChangelogViolation::BaseWithoutNewline))
        );
    }

    #[test]
    fn descriptions_with_quotes_are_escaped() {
        let mut e = entry("k", 2);
        e.description = "Use \"fast\" path \\ now.".to_owned();
        let head = append_entry(BASE.as_bytes(), &e).unwrap();
        assert_eq!(validate_append(BASE.as_bytes(), &head), Ok(1));
    }
}
