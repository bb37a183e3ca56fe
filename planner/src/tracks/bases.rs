//! The bases a build is made on (ROCm, CUDA, Python, PyTorch) as tags
//! name them: where a track's name shows their versions, and which of them
//! a move between two tags of one track changes ([`base_changes`]).

use std::fmt;

use super::{MAX_TAG_LEN, dotted, tokens};

/// The bases a build is made on, as tags name them (`rocm7.2.4`,
/// `py3.12`, `cu13.0.1`, `pytorch_release_2.10.0`), with the name a plan
/// and a pull request give them.
const BASES: &[(&str, &str)] = &[
    ("rocm", "ROCm"),
    ("cuda", "CUDA"),
    ("cu", "CUDA"),
    ("py", "Python"),
    ("python", "Python"),
    ("pytorch", "PyTorch"),
    ("torch", "PyTorch"),
];

/// The dotted version of a base capture.
pub(super) const BASE_PATTERN: &str = r"[0-9]{1,9}(?:\.[0-9]{1,9}){1,3}";

/// How a track's name shows a base version: `rocm<rocm>`, `py<py>`, or
/// `<pytorch>` for the version after `pytorch_release_`.
pub(super) fn base_placeholder(base: &BaseToken<'_>) -> String {
    if base.word.is_empty() {
        format!("<{}>", base.name.to_ascii_lowercase())
    } else {
        format!("{}<{}>", base.word, base.word.to_ascii_lowercase())
    }
}

pub(super) fn base_capture(i: usize) -> String {
    format!("base{i}")
}

fn base_name(word: &str) -> Option<&'static str> {
    BASES
        .iter()
        .find(|(w, _)| w.eq_ignore_ascii_case(word))
        .map(|(_, name)| *name)
}

/// A base version in a tag's text: its token's index, the fixed text
/// before the version inside the token (`rocm`, or empty for the version
/// after `pytorch_release_`), the version and the base's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct BaseToken<'a> {
    pub(super) index: usize,
    pub(super) word: &'a str,
    pub(super) version: &'a str,
    pub(super) name: &'static str,
}

/// The base versions among `texts` (a tag's tokens, separators included):
/// a base's name glued to a dotted version (`rocm7.2.4`), or a bare version
/// whose word before it (skipping `release`) names one (`pytorch_release_2.10.0`).
pub(super) fn base_tokens<'a>(texts: &[&'a str]) -> Vec<BaseToken<'a>> {
    let mut out = Vec::new();
    for (index, text) in texts.iter().enumerate() {
        let letters = text.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (word, version) = text.split_at(letters);
        if letters > 0 {
            if let Some(name) = base_name(word)
                && dotted(version).is_some()
            {
                out.push(BaseToken {
                    index,
                    word,
                    version,
                    name,
                });
            }
            continue;
        }
        if dotted(text).is_none() {
            continue;
        }
        let before = texts[..index]
            .iter()
            .rev()
            .copied()
            .find(|t| !matches!(*t, "-" | "_") && !t.eq_ignore_ascii_case("release"));
        if let Some(name) = before.and_then(base_name) {
            out.push(BaseToken {
                index,
                word: "",
                version: text,
                name,
            });
        }
    }
    out
}

/// How a build's bases changed between two tags of one track.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseChange {
    /// What the base is (`ROCm`, `CUDA`, `Python`, `PyTorch`).
    pub name: &'static str,
    /// Its version in the old tag.
    pub from: String,
    /// Its version in the new tag.
    pub to: String,
}

impl fmt::Display for BaseChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} → {}", self.name, self.from, self.to)
    }
}

/// The bases `to` moves a build to from `from`, when both tags name the
/// same bases in the same places (`rocm7.2.3_…_atom20260511` →
/// `rocm7.2.4_…_atom20260531`: ROCm 7.2.3 → 7.2.4); empty otherwise.
pub fn base_changes(from: &str, to: &str) -> Vec<BaseChange> {
    if from.len() > MAX_TAG_LEN || to.len() > MAX_TAG_LEN {
        return Vec::new();
    }
    let (old, new) = (tokens(from), tokens(to));
    if old.len() != new.len() {
        return Vec::new();
    }
    let (old_bases, new_bases) = (base_tokens(&old), base_tokens(&new));
    if old_bases.len() != new_bases.len() {
        return Vec::new();
    }
    old_bases
        .iter()
        .zip(&new_bases)
        .filter(|(a, b)| a.index == b.index && a.name == b.name && a.version != b.version)
        .map(|(a, b)| BaseChange {
            name: a.name,
            from: a.version.to_owned(),
            to: b.version.to_owned(),
        })
        .collect()
}

/// The words a plan and a pull request use for [`base_changes`]: `also
/// moves ROCm 7.2.3 → 7.2.4`; `None` when no base changes.
pub fn base_change_sentence(from: &str, to: &str) -> Option<String> {
    let changes = base_changes(from, to);
    (!changes.is_empty()).then(|| {
        let list: Vec<String> = changes.iter().map(ToString::to_string).collect();
        format!("also moves {}", list.join(", "))
    })
}
