//! Experiment variants: a named set of extra edits on top of a
//! candidate's bump, applied byte-exact to the family's recipe files.
//!
//! The edit grammar is the one `[[experiments]]` and `/klaud try` share:
//!
//! ```text
//! edits  := edit (";" edit)*
//! edit   := "set" target "=" value         set a field (added when missing)
//!         | "unset" target                 remove a field
//!         | "add-flag" target flag         add a flag to an argument list
//!         | "remove-flag" target flag      remove a flag from it
//!         | "image" image-ref              use another image
//! target := [recipe ":"] key ("." key)*    recipe: a path or its tail
//! flag   := name ["=" value]
//! value  := plain text | "double quoted" | 'single quoted'
//! ```
//!
//! Every edit splices only the lines it concerns (a new field is one new
//! line beside its siblings, a removed one loses exactly its lines), then
//! the file is re-parsed and must read as the old document with exactly
//! that change; anything else is an error naming file, line and edit.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value;

use crate::repo::Repository;
use crate::yaml::{self, Node, NodeKind, Style};

/// Where an edit applies: a recipe (all of the family's when omitted) and a
/// dotted key path inside it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EditTarget {
    /// A repository-relative recipe path, or a tail of one (`x.yaml`).
    pub file: Option<String>,
    /// Keys from the document root.
    pub path: Vec<String>,
}

impl fmt::Display for EditTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{file}:")?;
        }
        f.write_str(&self.path.join("."))
    }
}

/// A value as the user wrote it: the text and whether it was quoted.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EditValue {
    /// The value.
    pub text: String,
    /// `None`: unquoted (YAML types it); else the quote style to write.
    pub quoted: Option<char>,
}

impl fmt::Display for EditValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.quoted {
            Some('\'') => write!(f, "'{}'", self.text.replace('\'', "''")),
            Some(_) => write!(
                f,
                "\"{}\"",
                self.text.replace('\\', "\\\\").replace('"', "\\\"")
            ),
            None => f.write_str(&self.text),
        }
    }
}

/// One extra edit of a variant.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Edit {
    /// Set a field (an environment variable is a field of an environment
    /// mapping), adding it when the parent mapping lacks it.
    Set {
        /// Where.
        target: EditTarget,
        /// The new value.
        value: EditValue,
    },
    /// Remove a field.
    Unset {
        /// Where.
        target: EditTarget,
    },
    /// Add a flag to the argument list at `target`: a mapping (`flag:
    /// value`, `true` without a value) or a sequence (`- flag[=value]`).
    AddFlag {
        /// The argument list.
        target: EditTarget,
        /// The flag as the list spells it (`router-mode`, `--enforce-eager`).
        flag: String,
        /// Its value, if any.
        value: Option<EditValue>,
    },
    /// Remove a flag (and, in a sequence, its `flag=value` form).
    RemoveFlag {
        /// The argument list.
        target: EditTarget,
        /// The flag.
        flag: String,
    },
    /// Run another image than the candidate's.
    Image(String),
}

impl fmt::Display for Edit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Edit::Set { target, value } => write!(f, "set {target}={value}"),
            Edit::Unset { target } => write!(f, "unset {target}"),
            Edit::AddFlag {
                target,
                flag,
                value: Some(v),
            } => write!(f, "add-flag {target} {flag}={v}"),
            Edit::AddFlag { target, flag, .. } => write!(f, "add-flag {target} {flag}"),
            Edit::RemoveFlag { target, flag } => write!(f, "remove-flag {target} {flag}"),
            Edit::Image(image) => write!(f, "image {image}"),
        }
    }
}

/// An edit list that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("edit {index} `{edit}`: {reason}")]
pub struct EditSyntaxError {
    /// 1-based position in the list.
    pub index: usize,
    /// The edit's text.
    pub edit: String,
    /// What is wrong.
    pub reason: String,
}

/// Splits `text` at `sep` outside quotes.
fn split_outside_quotes(text: &str, sep: &[char]) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match quote {
            Some('"') if c == '\\' => {
                current.push(c);
                if let Some(n) = chars.next() {
                    current.push(n);
                }
            }
            Some(q) if c == q => {
                quote = None;
                current.push(c);
            }
            Some(_) => current.push(c),
            None if c == '"' || c == '\'' => {
                quote = Some(c);
                current.push(c);
            }
            None if sep.contains(&c) => parts.push(std::mem::take(&mut current)),
            None => current.push(c),
        }
    }
    parts.push(current);
    parts
}

fn parse_value(text: &str) -> Result<EditValue, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("the value is empty (write \"\" for an empty string)".into());
    }
    let first = text.chars().next().unwrap_or(' ');
    if first == '"' || first == '\'' {
        if text.len() < 2 || !text.ends_with(first) {
            return Err(format!("the quoted value {text} is not closed"));
        }
        let inner = &text[1..text.len() - 1];
        let unquoted = if first == '\'' {
            if inner.replace("''", "").contains('\'') {
                return Err(format!("{text}: a quote inside '…' is written ''"));
            }
            inner.replace("''", "'")
        } else {
            let mut out = String::new();
            let mut chars = inner.chars();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => match chars.next() {
                        Some(e @ ('"' | '\\')) => out.push(e),
                        other => {
                            return Err(format!(
                                "{text}: unknown escape \\{}",
                                other.map(String::from).unwrap_or_default()
                            ));
                        }
                    },
                    '"' => return Err(format!("{text}: a quote inside \"…\" is written \\\"")),
                    c => out.push(c),
                }
            }
            out
        };
        return Ok(EditValue {
            text: unquoted,
            quoted: Some(first),
        });
    }
    if text.contains(['"', '\'']) {
        return Err(format!("{text}: quote the whole value or none of it"));
    }
    Ok(EditValue {
        text: text.to_owned(),
        quoted: None,
    })
}

fn parse_target(text: &str) -> Result<EditTarget, String> {
    let text = text.trim();
    let (file, path) = match text.split_once(':') {
        Some((file, path)) => (Some(file.trim()), path.trim()),
        None => (None, text),
    };
    if file.is_some_and(str::is_empty) {
        return Err("the recipe before `:` is empty".into());
    }
    let keys: Vec<String> = path.split('.').map(|k| k.trim().to_owned()).collect();
    if path.is_empty() || keys.iter().any(String::is_empty) {
        return Err(format!(
            "{text:?} is not a dotted key path such as backend.env.NAME"
        ));
    }
    if let Some(k) = keys.iter().find(|k| k.contains(char::is_whitespace)) {
        return Err(format!("key {k:?} contains a space"));
    }
    Ok(EditTarget {
        file: file.map(str::to_owned),
        path: keys,
    })
}

fn parse_one(text: &str) -> Result<Edit, String> {
    let text = text.trim();
    let (verb, rest) = text
        .split_once(char::is_whitespace)
        .map_or((text, ""), |(v, r)| (v, r.trim()));
    match verb {
        "set" => {
            let (target, value) = rest
                .split_once('=')
                .ok_or("expected `set <target>=<value>`")?;
            Ok(Edit::Set {
                target: parse_target(target)?,
                value: parse_value(value)?,
            })
        }
        "unset" => Ok(Edit::Unset {
            target: parse_target(rest)?,
        }),
        "add-flag" | "remove-flag" => {
            let (target, flag) = rest
                .split_once(char::is_whitespace)
                .ok_or_else(|| format!("expected `{verb} <target> <flag>`"))?;
            let target = parse_target(target)?;
            let flag = flag.trim();
            if verb == "remove-flag" {
                if flag.is_empty() || flag.contains(char::is_whitespace) || flag.contains('=') {
                    return Err(format!("{flag:?} is not a flag name"));
                }
                return Ok(Edit::RemoveFlag {
                    target,
                    flag: flag.to_owned(),
                });
            }
            let (name, value) = match flag.split_once('=') {
                Some((n, v)) => (n.trim(), Some(parse_value(v)?)),
                None => (flag, None),
            };
            if name.is_empty() || name.contains(char::is_whitespace) {
                return Err(format!("{name:?} is not a flag name"));
            }
            Ok(Edit::AddFlag {
                target,
                flag: name.to_owned(),
                value,
            })
        }
        "image" => {
            crate::image::ImageRef::parse(rest).map_err(|e| format!("image {rest:?}: {e}"))?;
            Ok(Edit::Image(rest.to_owned()))
        }
        "" => Err("the edit is empty".into()),
        other => Err(format!(
            "unknown edit {other:?}; expected set, unset, add-flag, remove-flag or image"
        )),
    }
}

/// Parses an edit list (edits separated by `;` or new lines; blank parts
/// are skipped).
pub fn parse_edits(text: &str) -> Result<Vec<Edit>, EditSyntaxError> {
    let mut out = Vec::new();
    for part in split_outside_quotes(text, &[';', '\n']) {
        if part.trim().is_empty() {
            continue;
        }
        let edit = parse_one(&part).map_err(|reason| EditSyntaxError {
            index: out.len() + 1,
            edit: part.trim().to_owned(),
            reason,
        })?;
        out.push(edit);
    }
    Ok(out)
}

/// A variant as declared: a name, optionally the variant it builds on, and
/// its own edits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variant {
    /// `A`, `F`, `worker-parser` (letters, digits, `-`, `_`).
    pub name: String,
    /// The variant this one extends ("Variant F = Variant E plus …").
    pub from: Option<String>,
    /// Its own edits.
    pub edits: Vec<Edit>,
}

/// A variant with every inherited edit spelled out.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ResolvedVariant {
    /// Its name.
    pub name: String,
    /// The variant it extends, if any.
    pub from: Option<String>,
    /// Its own edits, as text (the grammar above).
    pub own: Vec<String>,
    /// Inherited then own edits, as text: what is applied.
    pub edits: Vec<String>,
}

impl ResolvedVariant {
    /// The effective edits, parsed.
    pub fn parsed(&self) -> Result<Vec<Edit>, EditSyntaxError> {
        parse_edits(&self.edits.join("\n"))
    }

    /// The image the variant runs instead of the candidate's, if it says.
    pub fn image(&self) -> Option<String> {
        self.parsed().ok()?.into_iter().rev().find_map(|e| match e {
            Edit::Image(i) => Some(i),
            _ => None,
        })
    }
}

/// Variants that do not make a set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VariantError {
    /// A name that is not allowed.
    #[error("variant name {0:?} must be 1 to 32 letters, digits, '-' or '_'")]
    BadName(String),
    /// Two variants with one name.
    #[error("variant {0} is declared twice")]
    Duplicate(String),
    /// `from` names no variant of the set.
    #[error("variant {name} builds on {from}, which is not a variant of this experiment")]
    UnknownBase {
        /// The variant.
        name: String,
        /// What it names.
        from: String,
    },
    /// `from` goes round in a circle.
    #[error("variants {0} build on each other in a circle")]
    Cycle(String),
}

/// Whether `name` may name a variant (it appears in titles and bodies).
pub fn valid_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Resolves derived variants: each one's effective edits are its base's
/// followed by its own, in declaration order.
pub fn resolve(variants: &[Variant]) -> Result<Vec<ResolvedVariant>, VariantError> {
    let mut by_name: BTreeMap<&str, &Variant> = BTreeMap::new();
    for v in variants {
        if !valid_name(&v.name) {
            return Err(VariantError::BadName(v.name.clone()));
        }
        if by_name.insert(&v.name, v).is_some() {
            return Err(VariantError::Duplicate(v.name.clone()));
        }
    }
    let mut out = Vec::new();
    for v in variants {
        let mut chain = vec![v];
        let mut seen = BTreeSet::from([v.name.as_str()]);
        while let Some(from) = &chain.last().and_then(|c| c.from.as_ref()) {
            let base = by_name
                .get(from.as_str())
                .ok_or_else(|| VariantError::UnknownBase {
                    name: chain.last().map(|c| c.name.clone()).unwrap_or_default(),
                    from: (*from).clone(),
                })?;
            if !seen.insert(&base.name) {
                let names: Vec<&str> = chain.iter().map(|c| c.name.as_str()).collect();
                return Err(VariantError::Cycle(names.join(" → ")));
            }
            chain.push(base);
        }
        let edits = chain
            .iter()
            .rev()
            .flat_map(|c| c.edits.iter().map(ToString::to_string))
            .collect();
        out.push(ResolvedVariant {
            name: v.name.clone(),
            from: v.from.clone(),
            own: v.edits.iter().map(ToString::to_string).collect(),
            edits,
        });
    }
    Ok(out)
}

/// An edit that does not apply to a file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: edit `{edit}`: {reason}")]
pub struct EditError {
    /// Repository-relative file (`-` when no file could be chosen).
    pub file: String,
    /// 1-based line the problem is at (1 when it is the file as a whole).
    pub line: usize,
    /// The edit's text.
    pub edit: String,
    /// What is wrong.
    pub reason: String,
}

impl Repository {
    /// Applies `edits` (all but `image`, which the caller applies to the
    /// bump) to `family`'s in-repository recipes. `files` holds contents
    /// already edited (the bump's); other recipes are read from the
    /// checkout. Returns the changed files' complete new contents, in the
    /// order first touched.
    pub fn apply_variant_edits(
        &self,
        family: &str,
        files: &BTreeMap<String, String>,
        edits: &[Edit],
    ) -> Result<Vec<(String, String)>, EditError> {
        let recipes: Vec<String> = match self.family(family) {
            Ok(f) => {
                let mut paths: Vec<String> = Vec::new();
                for r in f.recipes.iter().filter(|r| r.in_repository && !r.missing) {
                    if !paths.contains(&r.path) {
                        paths.push(r.path.clone());
                    }
                }
                paths
            }
            Err(e) => {
                return Err(EditError {
                    file: "-".into(),
                    line: 1,
                    edit: String::new(),
                    reason: e.to_string(),
                });
            }
        };
        let mut changed: Vec<(String, String)> = Vec::new();
        for edit in edits {
            let target = match edit {
                Edit::Image(_) => continue,
                Edit::Set { target, .. }
                | Edit::Unset { target }
                | Edit::AddFlag { target, .. }
                | Edit::RemoveFlag { target, .. } => target,
            };
            let fail = |file: &str, line: usize, reason: String| EditError {
                file: file.to_owned(),
                line,
                edit: edit.to_string(),
                reason,
            };
            let chosen: Vec<&String> = match &target.file {
                None => recipes.iter().collect(),
                Some(want) => {
                    let exact: Vec<&String> = recipes.iter().filter(|p| *p == want).collect();
                    if exact.is_empty() {
                        recipes
                            .iter()
                            .filter(|p| p.ends_with(&format!("/{want}")))
                            .collect()
                    } else {
                        exact
                    }
                }
            };
            if chosen.is_empty() {
                let reason = match &target.file {
                    None => format!("{family} runs no recipe file in the repository"),
                    Some(f) => format!(
                        "{f} is not one of {family}'s recipes ({})",
                        if recipes.is_empty() {
                            "it has none in the repository".to_owned()
                        } else {
                            recipes.join(", ")
                        }
                    ),
                };
                return Err(fail("-", 1, reason));
            }
            if target.file.is_some() && chosen.len() > 1 {
                let names: Vec<&str> = chosen.iter().map(|s| s.as_str()).collect();
                return Err(fail(
                    "-",
                    1,
                    format!(
                        "ambiguous recipe: it matches {}; name the file by a longer path",
                        names.join(", ")
                    ),
                ));
            }
            for path in chosen {
                let text = match changed.iter().find(|(p, _)| p == path) {
                    Some((_, t)) => t.clone(),
                    None => match files.get(path) {
                        Some(t) => t.clone(),
                        None => crate::repo::read_text(self.root(), path)
                            .map_err(|e| fail(path, 1, e.to_string()))?,
                    },
                };
                let after =
                    apply_edit(&text, edit).map_err(|(line, reason)| fail(path, line, reason))?;
                match changed.iter_mut().find(|(p, _)| p == path) {
                    Some(entry) => entry.1 = after,
                    None => changed.push((path.clone(), after)),
                }
            }
        }
        Ok(changed)
    }
}

type Failure = (usize, String);

/// Applies one edit to one document's text; `Err((line, reason))`.
pub fn apply_edit(text: &str, edit: &Edit) -> Result<String, Failure> {
    let doc = yaml::parse(text)
        .map_err(|e| (e.line, format!("the file does not parse: {}", e.message)))?
        .ok_or((1, "the file is empty".to_owned()))?;
    let mut expected = doc.to_json();
    let after = match edit {
        Edit::Image(_) => return Ok(text.to_owned()),
        Edit::Set { target, value } => {
            let (parent, key) = walk_parent(&doc, &target.path)?;
            let (after, token) = match parent.get(key) {
                Some(node) => replace_scalar(text, node, value)?,
                None => insert_entry(text, parent, key, value)?,
            };
            set_json(&mut expected, &target.path, Some(token_json(&token)));
            after
        }
        Edit::Unset { target } => {
            let (parent, key) = walk_parent(&doc, &target.path)?;
            if parent.get(key).is_none() {
                return Err((
                    parent.line,
                    format!("{} has no field {key}", shown(&target.path)),
                ));
            }
            set_json(&mut expected, &target.path, None);
            remove_entry(text, parent, key)?
        }
        Edit::AddFlag {
            target,
            flag,
            value,
        } => {
            let list = walk(&doc, &target.path)?;
            match &list.kind {
                NodeKind::Mapping(_) => {
                    if list.get(flag).is_some() {
                        return Err((
                            list.line,
                            format!(
                                "{} already has {flag}; use set to change its value",
                                shown(&target.path)
                            ),
                        ));
                    }
                    let v = value.clone().unwrap_or(EditValue {
                        text: "true".into(),
                        quoted: None,
                    });
                    let mut path = target.path.clone();
                    path.push(flag.clone());
                    let (after, token) = insert_entry(text, list, flag, &v)?;
                    set_json(&mut expected, &path, Some(token_json(&token)));
                    after
                }
                NodeKind::Sequence(items) => {
                    if items.iter().any(|i| flag_matches(i, flag)) {
                        return Err((
                            list.line,
                            format!("{} already has {flag}", shown(&target.path)),
                        ));
                    }
                    let item = match value {
                        Some(v) => EditValue {
                            text: format!("{flag}={}", v.text),
                            quoted: v.quoted,
                        },
                        None => EditValue {
                            text: flag.clone(),
                            quoted: None,
                        },
                    };
                    let (after, token) = append_item(text, list, &item)?;
                    if let Some(Value::Array(a)) = json_at(&mut expected, &target.path) {
                        a.push(token_json(&token));
                    }
                    after
                }
                NodeKind::Scalar { .. } => {
                    return Err((
                        list.line,
                        format!(
                            "{} is a scalar, not an argument list (a mapping or a sequence)",
                            shown(&target.path)
                        ),
                    ));
                }
            }
        }
        Edit::RemoveFlag { target, flag } => {
            let list = walk(&doc, &target.path)?;
            match &list.kind {
                NodeKind::Mapping(_) => {
                    if list.get(flag).is_none() {
                        return Err((
                            list.line,
                            format!("{} has no flag {flag}", shown(&target.path)),
                        ));
                    }
                    let mut path = target.path.clone();
                    path.push(flag.clone());
                    set_json(&mut expected, &path, None);
                    remove_entry(text, list, flag)?
                }
                NodeKind::Sequence(items) => {
                    let found: Vec<usize> = items
                        .iter()
                        .enumerate()
                        .filter(|(_, i)| flag_matches(i, flag))
                        .map(|(n, _)| n)
                        .collect();
                    let [index] = found[..] else {
                        return Err((
                            list.line,
                            if found.is_empty() {
                                format!("{} has no flag {flag}", shown(&target.path))
                            } else {
                                format!(
                                    "{} has {flag} {} times: ambiguous",
                                    shown(&target.path),
                                    found.len()
                                )
                            },
                        ));
                    };
                    // `- --flag` followed by its value item goes with it.
                    let with_value = items[index].as_scalar() == Some(flag.as_str())
                        && items
                            .get(index + 1)
                            .and_then(Node::as_scalar)
                            .is_some_and(|v| !v.starts_with('-'));
                    let count = if with_value { 2 } else { 1 };
                    if let Some(Value::Array(a)) = json_at(&mut expected, &target.path) {
                        a.drain(index..index + count);
                    }
                    remove_items(text, list, index, count)?
                }
                NodeKind::Scalar { .. } => {
                    return Err((
                        list.line,
                        format!("{} is a scalar, not an argument list", shown(&target.path)),
                    ));
                }
            }
        }
    };
    // The edited file must read as the old one with exactly this change.
    let reparsed = yaml::parse(&after)
        .map_err(|e| (e.line, format!("the edited file does not parse: {e}")))?
        .ok_or((1, "the edited file is empty".to_owned()))?;
    if reparsed.to_json() != expected {
        return Err((
            1,
            "the edit did not re-parse as exactly the intended change; nothing was written"
                .to_owned(),
        ));
    }
    Ok(after)
}

fn shown(path: &[String]) -> String {
    path.join(".")
}

fn flag_matches(item: &Node, flag: &str) -> bool {
    item.as_scalar()
        .is_some_and(|s| s == flag || s.strip_prefix(flag).is_some_and(|r| r.starts_with('=')))
}

/// The value a token reads as, typed the way the file's readers (PyYAML)
/// type it.
fn token_json(token: &str) -> Value {
    yaml::parse(&format!("v: {token}\n"))
        .ok()
        .flatten()
        .and_then(|d| d.get("v").map(Node::to_json))
        .unwrap_or_else(|| Value::String(token.to_owned()))
}

fn json_at<'a>(root: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    path.iter().try_fold(root, |v, k| v.get_mut(k.as_str()))
}

fn set_json(root: &mut Value, path: &[String], value: Option<Value>) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    if let Some(Value::Object(map)) = json_at(root, parents) {
        match value {
            Some(v) => {
                map.insert(last.clone(), v);
            }
            None => {
                map.remove(last);
            }
        }
    }
}

/// The node at `path`.
fn walk<'a>(doc: &'a Node, path: &[String]) -> Result<&'a Node, Failure> {
    let mut node = doc;
    for (i, key) in path.iter().enumerate() {
        if node.as_mapping().is_none() {
            return Err((
                node.line,
                format!(
                    "{} is {}, not a mapping",
                    shown(&path[..i]),
                    node.kind_name()
                ),
            ));
        }
        if node.key_count(key) > 1 {
            return Err((node.line, format!("{key} appears twice: ambiguous")));
        }
        node = node.get(key).ok_or_else(|| {
            (
                node.line,
                format!(
                    "there is no field {}{}",
                    shown(&path[..=i]),
                    if i == 0 {
                        String::new()
                    } else {
                        format!(" (the mapping {} has no {key})", shown(&path[..i]))
                    }
                ),
            )
        })?;
    }
    Ok(node)
}

/// The mapping that holds the last key of `path`, and that key.
fn walk_parent<'a, 'p>(doc: &'a Node, path: &'p [String]) -> Result<(&'a Node, &'p str), Failure> {
    let (last, parents) = path.split_last().ok_or((1, "empty key path".to_owned()))?;
    let parent = walk(doc, parents)?;
    if parent.as_mapping().is_none() {
        return Err((
            parent.line,
            format!(
                "{} is {}, not a mapping",
                if parents.is_empty() {
                    "the document".to_owned()
                } else {
                    shown(parents)
                },
                parent.kind_name()
            ),
        ));
    }
    if parent.key_count(last) > 1 {
        return Err((parent.line, format!("{last} appears twice: ambiguous")));
    }
    Ok((parent, last))
}

/// The scalar token for `value`: its own quote style, or, unquoted, plain
/// when that reads back as written (else double-quoted).
fn token(value: &EditValue, like: Option<Style>) -> Result<String, yaml::ScalarEditError> {
    let style = match (value.quoted, like) {
        (Some('\''), _) => Style::SingleQuoted,
        (Some(_), _) => Style::DoubleQuoted,
        (None, Some(s @ (Style::SingleQuoted | Style::DoubleQuoted))) => s,
        (None, _) => Style::Plain,
    };
    if style == Style::Plain {
        // A typed value (number, boolean) is written plain on purpose.
        // `-`, `?` and `:` start a plain scalar unless a space follows
        // (`--flag` is plain).
        let mut chars = value.text.chars();
        let first = chars.next().unwrap_or(' ');
        let indicator = match first {
            '-' | '?' | ':' => chars.next().is_none_or(|c| c == ' '),
            c => ",[]{}#&*!|>'\"%@`~ ".contains(c),
        };
        let safe = !value.text.is_empty()
            && !indicator
            && !value.text.contains(": ")
            && !value.text.contains(" #")
            && !value.text.ends_with([' ', ':']);
        if safe && !value.text.contains(['\n', '\r']) {
            return Ok(value.text.clone());
        }
        return yaml::encode_scalar(&value.text, Style::DoubleQuoted);
    }
    yaml::encode_scalar(&value.text, style)
}

fn replace_scalar(text: &str, node: &Node, value: &EditValue) -> Result<(String, String), Failure> {
    if node.as_scalar().is_none() {
        return Err((
            node.line,
            format!("the field is {}, not a single value", node.kind_name()),
        ));
    }
    let range = yaml::scalar_token(text, node).map_err(|e| (node.line, e.to_string()))?;
    let new = token(value, node.style()).map_err(|e| (node.line, e.to_string()))?;
    let after = format!("{}{new}{}", &text[..range.start], &text[range.end..]);
    Ok((after, new))
}

fn line_start(text: &str, offset: usize) -> usize {
    text[..offset].rfind('\n').map_or(0, |i| i + 1)
}

/// Bytes of the block entry whose key starts at `key_start`: from its
/// line's start through the last line more indented than the key (blank
/// lines and comments inside count; trailing ones do not).
fn entry_span(text: &str, key_start: usize, indent: usize) -> std::ops::Range<usize> {
    let start = line_start(text, key_start);
    let mut end = text[key_start..]
        .find('\n')
        .map_or(text.len(), |i| key_start + i + 1);
    let mut probe = end;
    while probe < text.len() {
        let line_end = text[probe..]
            .find('\n')
            .map_or(text.len(), |i| probe + i + 1);
        let line = &text[probe..line_end];
        let body = line.trim_start_matches(' ');
        let blank = body.trim().is_empty() || body.starts_with('#');
        if !blank {
            if line.len() - body.len() <= indent {
                break;
            }
            end = line_end;
        }
        probe = line_end;
    }
    start..end
}

/// Checks that `node` starts its own block line (not in a flow collection
/// nor after `- ` or another key) and returns its indentation.
fn block_indent(text: &str, node: &Node, what: &str) -> Result<usize, Failure> {
    if node.in_flow {
        return Err((
            node.line,
            format!("{what} is written in flow style ({{…}} or […]); write it as a block first"),
        ));
    }
    let start = line_start(text, node.start);
    let lead = &text[start..node.start];
    if lead.bytes().all(|b| b == b' ') {
        Ok(lead.len())
    } else {
        Err((
            node.line,
            format!("{what} does not start its own line; write it as a block first"),
        ))
    }
}

fn insert_entry(
    text: &str,
    parent: &Node,
    key: &str,
    value: &EditValue,
) -> Result<(String, String), Failure> {
    let entries = parent.as_mapping().unwrap_or_default();
    let Some((last_key, _)) = entries.last() else {
        return Err((
            parent.line,
            "the mapping is empty; an entry cannot be placed in it".to_owned(),
        ));
    };
    let indent = block_indent(text, last_key, "the mapping")?;
    let like = entries.iter().rev().find_map(|(_, v)| v.style());
    let key_token = token(
        &EditValue {
            text: key.to_owned(),
            quoted: None,
        },
        None,
    )
    .map_err(|e| (parent.line, e.to_string()))?;
    let value_token = token(value, like).map_err(|e| (parent.line, e.to_string()))?;
    let span = entry_span(text, last_key.start, indent);
    let mut out = String::with_capacity(text.len() + 64);
    out.push_str(&text[..span.end]);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&format!(
        "{}{key_token}: {value_token}\n",
        " ".repeat(indent)
    ));
    out.push_str(&text[span.end..]);
    Ok((out, value_token))
}

fn remove_entry(text: &str, parent: &Node, key: &str) -> Result<String, Failure> {
    let entries = parent.as_mapping().unwrap_or_default();
    let Some((k, _)) = entries.iter().find(|(k, _)| k.as_scalar() == Some(key)) else {
        return Err((parent.line, format!("there is no field {key}")));
    };
    if entries.len() == 1 {
        return Err((
            k.line,
            format!(
                "{key} is the mapping's only entry; removing it would change the parent's type"
            ),
        ));
    }
    let indent = block_indent(text, k, key)?;
    let span = entry_span(text, k.start, indent);
    Ok(format!("{}{}", &text[..span.start], &text[span.end..]))
}

/// The `- ` of a block sequence item: its offset and indentation.
fn dash_of(text: &str, item: &Node) -> Result<(usize, usize), Failure> {
    if item.in_flow {
        return Err((
            item.line,
            "the list is written in flow style ([…]); write it as a block first".to_owned(),
        ));
    }
    let start = line_start(text, item.start);
    let lead = &text[start..item.start];
    let trimmed = lead.trim_end_matches(' ');
    match trimmed.strip_suffix('-') {
        Some(spaces) if spaces.bytes().all(|b| b == b' ') => {
            Ok((start + spaces.len(), spaces.len()))
        }
        _ => Err((
            item.line,
            "the list item does not start its own `- ` line".to_owned(),
        )),
    }
}

fn append_item(text: &str, list: &Node, item: &EditValue) -> Result<(String, String), Failure> {
    let items = list.as_sequence().unwrap_or_default();
    let Some(last) = items.last() else {
        return Err((list.line, "the list is empty".to_owned()));
    };
    let (dash, indent) = dash_of(text, last)?;
    let like = items.iter().rev().find_map(Node::style);
    let token = token(item, like).map_err(|e| (list.line, e.to_string()))?;
    let span = entry_span(text, dash, indent);
    let mut out = String::with_capacity(text.len() + 64);
    out.push_str(&text[..span.end]);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&format!("{}- {token}\n", " ".repeat(indent)));
    out.push_str(&text[span.end..]);
    Ok((out, token))
}

fn remove_items(text: &str, list: &Node, index: usize, count: usize) -> Result<String, Failure> {
    let items = list.as_sequence().unwrap_or_default();
    if items.len() <= count {
        return Err((
            list.line,
            "removing it would leave the list empty, which changes its type".to_owned(),
        ));
    }
    let (first, indent) = dash_of(text, &items[index])?;
    let (last, last_indent) = dash_of(text, &items[index + count - 1])?;
    let start = line_start(text, first);
    let end = entry_span(text, last, last_indent.max(indent)).end;
    Ok(format!("{}{}", &text[..start], &text[end..]))
}

#[cfg(test)]
mod tests;
