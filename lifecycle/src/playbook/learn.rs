//! Learning: a playbook entry proposed from a failure that a repair fixed.
//!
//! When a smoke that failed with an unknown signature passes after a change
//! (the hook's, `/klaud try`, a person's push), the failing lines and the
//! change are what a maintainer would write down. [`Fix::infer`] reads the
//! change as a fix of the safe vocabulary when it is one (verified: the fix
//! applied to the old script gives the new one), and [`propose_entry`]
//! writes the entry as YAML a maintainer can paste under `entries:`,
//! scoped to what the failure was seen on.

use std::fmt::Write as _;
use std::sync::LazyLock;

use regex::Regex;

use super::fix::SAFE_VALUE;
use super::model::{Class, Fix, JobContext};
use super::normalize::LogSignature;

/// Most patterns a proposed entry has (all must match).
const MAX_PROPOSED_PATTERNS: usize = 3;
/// Longest proposed pattern, in bytes (the reader allows 500 characters).
const MAX_PROPOSED_PATTERN: usize = 400;
/// Fewest literal characters a line must keep to become a pattern: a line
/// of placeholders alone would match too much.
const MIN_LITERAL: usize = 12;

static FLAG: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"--([a-z0-9][a-z0-9_.-]*)(?:=|[ \t]+)("[^"\s]*"|'[^'\s]*'|[^\s"')\]]+)"#)
        .expect("static regex")
});
static KEY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"^\s*(?:-\s+)?([a-z0-9][a-z0-9_.-]*):[ \t]+("[^"\n]*"|'[^'\n]*'|[^\s#]+)"#)
        .expect("static regex")
});
static EXPORT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"^\s*export[ \t]+([A-Z_][A-Z0-9_]*)=("[^"]*"|'[^']*'|[^\s;#]*)\s*$"#)
        .expect("static regex")
});
static PLACEHOLDER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"<(?:n|path|hex|ts|digest)>").expect("static regex"));

fn unquote(v: &str) -> &str {
    let b = v.as_bytes();
    if b.len() >= 2 && (b[0] == b'"' || b[0] == b'\'') && b[b.len() - 1] == b[0] {
        &v[1..v.len() - 1]
    } else {
        v
    }
}

/// The `(name, value)` pairs of launch arguments on a line.
fn args(line: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = FLAG
        .captures_iter(line)
        .map(|c| (c[1].to_owned(), unquote(&c[2]).to_owned()))
        .collect();
    if let Some(c) = KEY.captures(line) {
        out.push((c[1].to_owned(), unquote(&c[2]).to_owned()));
    }
    out
}

impl Fix {
    /// The fix of the safe vocabulary that turns `before` into `after`
    /// (one script's texts), if the change is one: one argument's value
    /// changed, one `export` set, added or removed. Verified by applying it:
    /// `None` when the fix would not give the same change.
    pub fn infer(before: &str, after: &str) -> Option<Fix> {
        let old: Vec<&str> = before.split_inclusive('\n').collect();
        let new: Vec<&str> = after.split_inclusive('\n').collect();
        let prefix = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
        let suffix = old[prefix..]
            .iter()
            .rev()
            .zip(new[prefix..].iter().rev())
            .take_while(|(a, b)| a == b)
            .count();
        let removed = &old[prefix..old.len() - suffix];
        let added = &new[prefix..new.len() - suffix];
        let candidate = match (removed, added) {
            ([was], [now]) => {
                if let (Some(a), Some(b)) = (EXPORT.captures(was), EXPORT.captures(now)) {
                    (a[1] == b[1]).then(|| Fix::SetEnv {
                        name: b[1].to_owned(),
                        value: unquote(&b[2]).to_owned(),
                    })
                } else {
                    let (a, b) = (args(was), args(now));
                    let changed: Vec<usize> = (0..a.len().min(b.len()))
                        .filter(|&i| a[i] != b[i])
                        .collect();
                    match changed.as_slice() {
                        [i] if a.len() == b.len() && a[*i].0 == b[*i].0 => Some(Fix::SetArg {
                            name: a[*i].0.clone(),
                            from: Some(a[*i].1.clone()),
                            to: b[*i].1.clone(),
                        }),
                        _ => None,
                    }
                }
            }
            ([], [now]) => EXPORT.captures(now).map(|c| Fix::SetEnv {
                name: c[1].to_owned(),
                value: unquote(&c[2]).to_owned(),
            }),
            ([was], []) => EXPORT.captures(was).map(|c| Fix::UnsetEnv {
                name: c[1].to_owned(),
            }),
            _ => None,
        }?;
        let values_safe = match &candidate {
            Fix::SetArg { from, to, .. } => {
                SAFE_VALUE.is_match(to) && from.as_deref().is_none_or(|f| SAFE_VALUE.is_match(f))
            }
            Fix::SetEnv { value, .. } => SAFE_VALUE.is_match(value),
            Fix::UnsetEnv { .. } => true,
        };
        if !values_safe {
            return None;
        }
        let applied = candidate.apply(before).ok()?;
        // An added export may sit elsewhere than Klaud would put it: the
        // same variable with the same value is the same fix.
        let same =
            applied.text == after || matches!((removed, &candidate), ([], Fix::SetEnv { .. }));
        same.then_some(candidate)
    }
}

/// Which run failed with the lines a learned entry is made from: its
/// diagnosis, the receipt and the playbook pull request say so.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailedRun {
    /// A smoke (the first attempt or one after a repair).
    #[default]
    Smoke,
    /// The final sweep.
    Sweep,
}

impl FailedRun {
    /// Whether it is [`FailedRun::Smoke`] (the default, left out of records).
    pub fn is_smoke(&self) -> bool {
        *self == FailedRun::Smoke
    }

    /// `a smoke` / `a final sweep`.
    pub fn en(self) -> &'static str {
        match self {
            FailedRun::Smoke => "a smoke",
            FailedRun::Sweep => "a final sweep",
        }
    }

    /// `一次 smoke 测试` / `一次最终 sweep`.
    pub fn zh(self) -> &'static str {
        match self {
            FailedRun::Smoke => "一次 smoke 测试",
            FailedRun::Sweep => "一次最终 sweep",
        }
    }
}

/// What a learned entry is made from.
#[derive(Debug, Clone)]
pub struct LearnInput<'a> {
    /// The failing job's signature (its lines become the patterns).
    pub signature: &'a LogSignature,
    /// What is known of the failing job (its framework, hardware and
    /// engine version become the scope).
    pub ctx: &'a JobContext,
    /// The class to propose (usually [`Class::Engine`]).
    pub class: Class,
    /// The fix, when the change that helped is one ([`Fix::infer`]).
    pub fix: Option<Fix>,
    /// What the change was, in words, when it is not a fix of the
    /// vocabulary (e.g. `a person's push to the pull request`).
    pub change: String,
    /// The pull request it was seen on.
    pub pull: Option<u64>,
    /// Which run failed with the signature.
    pub failed: FailedRun,
}

/// A proposed entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    /// Its id: `learned-` and the signature's hex digits.
    pub id: String,
    /// The entry as YAML, indented as an item of `entries:`.
    pub yaml: String,
}

/// A regular expression for a normalised line: its text escaped, each
/// placeholder a pattern for what it replaced, runs of space any white
/// space. `None` when too little literal text is left to be specific.
pub fn line_pattern(normalised: &str) -> Option<String> {
    // A cut line may end inside a placeholder.
    let text = match normalised.rfind('<') {
        Some(i) if !normalised[i..].contains('>') => &normalised[..i],
        _ => normalised,
    };
    let mut out = String::new();
    let mut literal = 0;
    let mut last = 0;
    let literal_part = |s: &str| {
        s.split(' ')
            .map(regex::escape)
            .collect::<Vec<_>>()
            .join(r"\s+")
    };
    for m in PLACEHOLDER.find_iter(text) {
        let lit = &text[last..m.start()];
        let piece = literal_part(lit);
        let place = match m.as_str() {
            "<n>" => r"\d+(?:\.\d+)*",
            "<path>" => r#"/[^\s'"(),\]]+"#,
            "<hex>" => r"(?:0x[0-9a-fA-F]+|[0-9a-f]{7,})",
            "<ts>" => r"[-0-9:.,TZ+ ]+",
            _ => r"sha256:[0-9a-fA-F]{64}",
        };
        if out.len() + piece.len() + place.len() > MAX_PROPOSED_PATTERN {
            last = text.len();
            break;
        }
        literal += lit.trim().len();
        out.push_str(&piece);
        out.push_str(place);
        last = m.end();
    }
    if last < text.len() {
        let mut lit = &text[last..];
        while !lit.is_empty() && out.len() + literal_part(lit).len() > MAX_PROPOSED_PATTERN {
            let cut = lit
                .char_indices()
                .map(|(i, _)| i)
                .nth(lit.chars().count() / 2)
                .unwrap_or(0);
            lit = &lit[..cut];
        }
        literal += lit.trim().len();
        out.push_str(&literal_part(lit));
    }
    (literal >= MIN_LITERAL).then_some(out)
}

/// YAML single-quoted scalar.
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The leading dotted version of an image tag (`v0.21.0-cu130` → `0.21.0`).
fn leading_version(tag: &str) -> Option<String> {
    let v = tag.trim().strip_prefix('v').unwrap_or(tag.trim());
    let end = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let head = v[..end].trim_end_matches('.');
    (!head.is_empty() && head.split('.').all(|p| !p.is_empty() && p.len() <= 9))
        .then(|| head.to_owned())
}

fn word(s: &str) -> Option<String> {
    let w = s.trim().to_ascii_lowercase();
    (!w.is_empty()
        && w.len() <= 40
        && w.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        && w.as_bytes()[0].is_ascii_alphanumeric())
    .then_some(w)
}

/// A playbook entry proposed from a failure and what fixed it: its
/// signature's lines as `all` patterns, scoped to the framework, hardware
/// and exact engine version it was seen on, the fix (if the change was
/// one), the pull request and family as `seen_on`. The YAML reads back with
/// [`super::Playbook::parse`] inside a playbook's `entries:`. `None` when no
/// line of the signature keeps enough literal text to be a specific
/// pattern.
pub fn propose_entry(input: &LearnInput<'_>) -> Option<Proposal> {
    let hex = input
        .signature
        .id
        .strip_prefix("sig-")
        .unwrap_or(&input.signature.id);
    let id = format!("learned-{hex}");
    let patterns: Vec<String> = input
        .signature
        .lines
        .iter()
        .filter_map(|l| line_pattern(l))
        .take(MAX_PROPOSED_PATTERNS)
        .collect();
    if patterns.is_empty() {
        return None;
    }
    let mut y = String::new();
    let _ = writeln!(y, "  - id: {id}");
    let _ = writeln!(y, "    class: {}", input.class.as_str());
    let _ = writeln!(y, "    signature:");
    let _ = writeln!(y, "      all:");
    for p in &patterns {
        let _ = writeln!(y, "        - {}", quoted(p));
    }
    let framework = input.ctx.framework.as_deref().and_then(word);
    let hardware = input.ctx.hardware.as_deref().and_then(word);
    let version = input
        .ctx
        .engine_version
        .as_deref()
        .and_then(leading_version);
    if framework.is_some() || hardware.is_some() || version.is_some() {
        let _ = writeln!(y, "      scope:");
        if let Some(f) = &framework {
            let _ = writeln!(y, "        framework: [{f}]");
        }
        if let Some(h) = &hardware {
            let _ = writeln!(y, "        hardware: [{h}]");
        }
        if let Some(v) = &version {
            let _ = writeln!(y, "        engine_version: '={v}'");
        }
    }
    let family = input
        .ctx
        .family
        .as_deref()
        .map(|f| f.rsplit_once(':').map_or(f, |(_, k)| k))
        .filter(|k| !k.is_empty() && k.len() <= 120 && !k.contains(['\n', '\r']));
    let what = match &input.fix {
        Some(f) => f.describe(),
        None => {
            let change: String = input.change.chars().take(200).collect();
            format!("{change} (not a fix Klaud can apply by itself)")
        }
    };
    let on = family.map_or_else(String::new, |f| format!(" ({f})"));
    let pr = input
        .pull
        .map_or_else(String::new, |n| format!(" on pull request #{n}"));
    let en = format!(
        "Learned by Klaud: {} failed with these lines{on}{pr} and passed after {what}. Check the cause and widen the scope before accepting.",
        input.failed.en()
    );
    let on_zh = family.map_or_else(String::new, |f| format!("（{f}）"));
    let pr_zh = input
        .pull
        .map_or_else(String::new, |n| format!("，见 PR #{n}"));
    let zh = format!(
        "由 Klaud 学习：{}以这些日志行失败{on_zh}{pr_zh}，在 {what} 之后通过。接受前请核实原因并酌情放宽适用范围。",
        input.failed.zh()
    );
    let _ = writeln!(y, "    diagnosis:");
    let _ = writeln!(y, "      en: {}", quoted(&en));
    let _ = writeln!(y, "      zh: {}", quoted(&zh));
    if let Some(fix) = &input.fix {
        let _ = writeln!(y, "    fix:");
        let _ = match fix {
            Fix::SetArg { name, from, to } => writeln!(
                y,
                "      set_arg: {{name: {name}, {}to: {}}}",
                from.as_ref()
                    .map_or_else(String::new, |f| format!("from: {}, ", quoted(f))),
                quoted(to)
            ),
            Fix::SetEnv { name, value } => {
                writeln!(
                    y,
                    "      set_env: {{name: {name}, value: {}}}",
                    quoted(value)
                )
            }
            Fix::UnsetEnv { name } => writeln!(y, "      unset_env: {{name: {name}}}"),
        };
    }
    let mut seen = Vec::new();
    if let Some(n) = input.pull {
        seen.push(n.to_string());
    }
    if let Some(f) = family {
        seen.push(quoted(f));
    }
    if !seen.is_empty() {
        let _ = writeln!(y, "    seen_on: [{}]", seen.join(", "));
    }
    Some(Proposal { id, yaml: y })
}
