//! Reading the playbook file: every problem found, each naming the file,
//! the line, the entry and the field.
//!
//! The file is the benchmark repository's, so it is outside input: its
//! size, entry count, pattern count and length and compiled regex size are
//! bounded ([`Limits`]), and values a fix writes into a script must be
//! plain tokens (no spaces, quotes, `$` or `;`), so nothing it writes can
//! run code.

use std::collections::HashSet;
use std::fmt;
use std::sync::LazyLock;

use klaud_planner::yaml::{self, Node};
use regex::{Regex, RegexBuilder};

use super::fix::SAFE_VALUE;
use super::model::{Class, Diagnosis, Entry, Fix, Playbook, Scope, SeenOn, SickNode, Signature};
use super::version::VersionRange;

/// The format version this reader knows.
pub const FORMAT_VERSION: &str = "1";

/// Bounds on what a playbook may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest file, in bytes.
    pub max_bytes: usize,
    /// Most entries.
    pub max_entries: usize,
    /// Most patterns in one entry (all lists together, scope included).
    pub max_patterns: usize,
    /// Longest pattern, in characters.
    pub max_pattern_chars: usize,
    /// Largest compiled pattern (`regex`'s `size_limit`), in bytes.
    pub regex_size_limit: usize,
    /// Longest diagnosis text, in characters.
    pub max_text_chars: usize,
    /// Most sick nodes.
    pub max_nodes: usize,
    /// Most `seen_on` and `nodes` items in one entry.
    pub max_items: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: 512 * 1024,
            max_entries: 500,
            max_patterns: 32,
            max_pattern_chars: 500,
            regex_size_limit: 256 * 1024,
            max_text_chars: 4_000,
            max_nodes: 500,
            max_items: 200,
        }
    }
}

/// One problem in a playbook file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlaybookError {
    /// The file, as the caller named it.
    pub file: String,
    /// 1-based line (0 when the problem is the whole file).
    pub line: usize,
    /// The entry's id (or `entries[N]` when it has none), if the problem is
    /// inside one.
    pub entry: Option<String>,
    /// The field, as a path (`signature.any[2]`, `fix.set_arg.to`).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for PlaybookError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
        }
        if let Some(entry) = &self.entry {
            write!(f, ": entry {entry}")?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for PlaybookError {}

/// Every problem found in a playbook file (at least one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
pub struct PlaybookErrors(pub Vec<PlaybookError>);

static ID: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z0-9][a-z0-9-]{0,79}$").expect("static regex"));
static WORD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z0-9][a-z0-9._-]{0,39}$").expect("static regex"));
static ARG_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z0-9][a-z0-9_.-]{0,79}$").expect("static regex"));
static ENV_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Z_][A-Z0-9_]{0,127}$").expect("static regex"));
static NODE_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$").expect("static regex"));

struct Reader<'a> {
    file: &'a str,
    limits: &'a Limits,
    errors: Vec<PlaybookError>,
    entry: Option<String>,
}

impl Reader<'_> {
    fn err(&mut self, node: Option<&Node>, field: &str, message: impl Into<String>) {
        self.errors.push(PlaybookError {
            file: self.file.to_owned(),
            line: node.map_or(0, |n| n.alias_line.unwrap_or(n.line)),
            entry: self.entry.clone(),
            field: field.to_owned(),
            message: message.into(),
        });
    }

    /// The mapping's keys must all be known.
    fn keys(&mut self, node: &Node, field: &str, known: &[&str]) {
        for (k, _) in node.as_mapping().unwrap_or_default() {
            let name = k.as_scalar().unwrap_or("");
            if !known.contains(&name) {
                let path = join(field, name);
                self.err(
                    Some(k),
                    &path,
                    format!("unknown key (known: {})", known.join(", ")),
                );
            }
        }
    }

    fn mapping<'n>(&mut self, node: &'n Node, field: &str) -> Option<&'n Node> {
        if node.as_mapping().is_some() {
            Some(node)
        } else {
            self.err(
                Some(node),
                field,
                format!("must be a mapping, not {}", node.kind_name()),
            );
            None
        }
    }

    fn text(&mut self, node: &Node, field: &str) -> Option<String> {
        match node.as_scalar() {
            Some(s) if s.chars().count() > self.limits.max_text_chars => {
                self.err(
                    Some(node),
                    field,
                    format!("longer than {} characters", self.limits.max_text_chars),
                );
                None
            }
            Some(s) => Some(s.to_owned()),
            None => {
                self.err(
                    Some(node),
                    field,
                    format!("must be text, not {}", node.kind_name()),
                );
                None
            }
        }
    }

    /// A required non-empty text field of a mapping.
    fn required(&mut self, map: &Node, key: &str, field: &str) -> Option<(String, Node)> {
        let path = join(field, key);
        let Some(v) = map.get(key) else {
            self.err(Some(map), &path, "missing");
            return None;
        };
        let t = self.text(v, &path)?;
        if t.trim().is_empty() {
            self.err(Some(v), &path, "empty");
            return None;
        }
        Some((t, v.clone()))
    }

    /// A scalar or a sequence of scalars.
    fn list(&mut self, node: &Node, field: &str) -> Vec<(String, Node, String)> {
        let items: Vec<&Node> = match node.as_sequence() {
            Some(items) => items.iter().collect(),
            None => vec![node],
        };
        let mut out = Vec::new();
        for (i, item) in items.into_iter().enumerate() {
            if out.len() == self.limits.max_items {
                self.err(
                    Some(item),
                    field,
                    format!("more than {} items", self.limits.max_items),
                );
                break;
            }
            let path = if node.as_sequence().is_some() {
                format!("{field}[{i}]")
            } else {
                field.to_owned()
            };
            if let Some(t) = self.text(item, &path) {
                out.push((t, item.clone(), path));
            }
        }
        out
    }

    fn pattern(&mut self, text: &str, node: &Node, field: &str) -> Option<Regex> {
        if text.chars().count() > self.limits.max_pattern_chars {
            self.err(
                Some(node),
                field,
                format!(
                    "pattern longer than {} characters",
                    self.limits.max_pattern_chars
                ),
            );
            return None;
        }
        match RegexBuilder::new(text)
            .size_limit(self.limits.regex_size_limit)
            .dfa_size_limit(self.limits.regex_size_limit)
            .build()
        {
            Ok(re) if re.is_match("") => {
                self.err(
                    Some(node),
                    field,
                    "pattern matches an empty line, so it would match every log",
                );
                None
            }
            Ok(re) => Some(re),
            Err(e) => {
                let msg = e.to_string();
                let msg = msg.lines().last().unwrap_or("invalid").trim().to_owned();
                self.err(Some(node), field, format!("not a valid pattern: {msg}"));
                None
            }
        }
    }

    fn patterns(&mut self, node: Option<&Node>, field: &str, count: &mut usize) -> Vec<Regex> {
        let Some(node) = node else { return Vec::new() };
        let mut out = Vec::new();
        for (t, n, path) in self.list(node, field) {
            *count += 1;
            if *count > self.limits.max_patterns {
                self.err(
                    Some(&n),
                    field,
                    format!(
                        "more than {} patterns in one entry",
                        self.limits.max_patterns
                    ),
                );
                break;
            }
            if let Some(re) = self.pattern(&t, &n, &path) {
                out.push(re);
            }
        }
        out
    }

    fn words(&mut self, node: Option<&Node>, field: &str) -> Vec<String> {
        let Some(node) = node else { return Vec::new() };
        let mut out = Vec::new();
        for (t, n, path) in self.list(node, field) {
            let w = t.trim().to_ascii_lowercase();
            if WORD.is_match(&w) {
                out.push(w);
            } else {
                self.err(
                    Some(&n),
                    &path,
                    format!("{t:?} is not a lowercase word like vllm or b200"),
                );
            }
        }
        out
    }

    fn diagnosis(&mut self, node: Option<&Node>, parent: &Node, field: &str) -> Diagnosis {
        let Some(node) = node else {
            self.err(Some(parent), field, "missing");
            return Diagnosis::default();
        };
        let Some(map) = self.mapping(node, field) else {
            return Diagnosis::default();
        };
        self.keys(map, field, &["en", "zh"]);
        let en = self.required(map, "en", field).map(|(t, _)| t);
        let zh = self.required(map, "zh", field).map(|(t, _)| t);
        Diagnosis {
            en: en.unwrap_or_default(),
            zh: zh.unwrap_or_default(),
        }
    }

    fn signature(&mut self, node: Option<&Node>, parent: &Node) -> Signature {
        let field = "signature";
        let Some(node) = node else {
            self.err(Some(parent), field, "missing");
            return Signature::default();
        };
        let Some(map) = self.mapping(node, field) else {
            return Signature::default();
        };
        self.keys(map, field, &["any", "all", "none", "scope"]);
        let mut count = 0;
        let any = self.patterns(map.get("any"), "signature.any", &mut count);
        let all = self.patterns(map.get("all"), "signature.all", &mut count);
        let none = self.patterns(map.get("none"), "signature.none", &mut count);
        if map.get("any").is_none() && map.get("all").is_none() {
            self.err(Some(map), field, "needs `any` or `all` patterns");
        }
        let scope = match map.get("scope") {
            None => Scope::default(),
            Some(s) => self.scope(s, &mut count),
        };
        Signature {
            any,
            all,
            none,
            scope,
        }
    }

    fn scope(&mut self, node: &Node, count: &mut usize) -> Scope {
        let field = "signature.scope";
        let Some(map) = self.mapping(node, field) else {
            return Scope::default();
        };
        self.keys(
            map,
            field,
            &[
                "framework",
                "engine_version",
                "hardware",
                "runner",
                "node",
                "family",
            ],
        );
        let framework = self.words(map.get("framework"), "signature.scope.framework");
        let hardware = self.words(map.get("hardware"), "signature.scope.hardware");
        let engine_version = map.get("engine_version").and_then(|v| {
            let path = "signature.scope.engine_version";
            let t = self.text(v, path)?;
            match VersionRange::parse(&t) {
                Ok(r) => Some(r),
                Err(e) => {
                    self.err(Some(v), path, e.to_string());
                    None
                }
            }
        });
        let runner = self.patterns(map.get("runner"), "signature.scope.runner", count);
        let node = self.patterns(map.get("node"), "signature.scope.node", count);
        let family = self.patterns(map.get("family"), "signature.scope.family", count);
        Scope {
            family,
            framework,
            engine_version,
            hardware,
            runner,
            node,
        }
    }

    fn value(&mut self, map: &Node, key: &str, field: &str) -> Option<String> {
        let (t, n) = self.required(map, key, field)?;
        if SAFE_VALUE.is_match(&t) {
            Some(t)
        } else {
            self.err(
                Some(&n),
                &join(field, key),
                format!(
                    "{:?} is not a plain value (letters, digits and ._:/+@%- only, at most 200)",
                    t.chars().take(60).collect::<String>()
                ),
            );
            None
        }
    }

    fn fix(&mut self, node: &Node, field: &str) -> Option<Fix> {
        let map = self.mapping(node, field)?;
        let kinds = ["set_arg", "set_env", "unset_env"];
        self.keys(map, field, &kinds);
        let present: Vec<&str> = kinds
            .iter()
            .copied()
            .filter(|k| map.get(k).is_some())
            .collect();
        if present.len() != 1 {
            self.err(
                Some(map),
                field,
                "needs exactly one of set_arg, set_env, unset_env (nothing else is in the safe vocabulary)",
            );
            return None;
        }
        let kind = present[0];
        let path = join(field, kind);
        let body = self.mapping(map.get(kind)?, &path)?;
        match kind {
            "set_arg" => {
                self.keys(body, &path, &["name", "from", "to"]);
                let name = self.required(body, "name", &path).and_then(|(t, n)| {
                    let t = t.trim_start_matches('-').to_owned();
                    if ARG_NAME.is_match(&t) {
                        Some(t)
                    } else {
                        self.err(
                            Some(&n),
                            &join(&path, "name"),
                            "not a launch argument name like gpu-memory-utilization",
                        );
                        None
                    }
                });
                let from = match body.get("from") {
                    Some(_) => Some(self.value(body, "from", &path)?),
                    None => None,
                };
                let to = self.value(body, "to", &path);
                if let (Some(from), Some(to)) = (&from, &to)
                    && from == to
                {
                    self.err(Some(body), &path, "from and to are the same value");
                    return None;
                }
                Some(Fix::SetArg {
                    name: name?,
                    from,
                    to: to?,
                })
            }
            "set_env" | "unset_env" => {
                let known: &[&str] = if kind == "set_env" {
                    &["name", "value"]
                } else {
                    &["name"]
                };
                self.keys(body, &path, known);
                let name = self.required(body, "name", &path).and_then(|(t, n)| {
                    if ENV_NAME.is_match(&t) {
                        Some(t)
                    } else {
                        self.err(
                            Some(&n),
                            &join(&path, "name"),
                            "not an environment variable name like VLLM_FOO (uppercase, digits, _)",
                        );
                        None
                    }
                });
                if kind == "unset_env" {
                    return Some(Fix::UnsetEnv { name: name? });
                }
                let value = self.value(body, "value", &path);
                Some(Fix::SetEnv {
                    name: name?,
                    value: value?,
                })
            }
            _ => None,
        }
    }

    fn entry(&mut self, index: usize, node: &Node) -> Option<Entry> {
        self.entry = Some(format!("entries[{index}]"));
        let map = self.mapping(node, "")?;
        self.keys(
            map,
            "",
            &[
                "id",
                "class",
                "signature",
                "diagnosis",
                "fix",
                "seen_on",
                "nodes",
            ],
        );
        let id = self.required(map, "id", "").and_then(|(t, n)| {
            if ID.is_match(&t) {
                Some(t)
            } else {
                self.err(
                    Some(&n),
                    "id",
                    "not an id like vllm-oom-at-load (lowercase letters, digits, -; at most 80)",
                );
                None
            }
        });
        if let Some(id) = &id {
            self.entry = Some(id.clone());
        }
        let class = self.required(map, "class", "").and_then(|(t, n)| {
            Class::parse(&t).or_else(|| {
                self.err(
                    Some(&n),
                    "class",
                    format!("{t:?} is not one of engine, infrastructure, teardown, setup"),
                );
                None
            })
        });
        let signature = self.signature(map.get("signature"), map);
        let diagnosis = self.diagnosis(map.get("diagnosis"), map, "diagnosis");
        let mut fixes = Vec::new();
        if let Some(f) = map.get("fix") {
            match f.as_sequence() {
                Some(items) => {
                    if items.is_empty() {
                        self.err(Some(f), "fix", "an empty list: leave `fix` out instead");
                    }
                    for (i, item) in items.iter().enumerate().take(self.limits.max_items) {
                        if let Some(fix) = self.fix(item, &format!("fix[{i}]")) {
                            fixes.push(fix);
                        }
                    }
                }
                None => fixes.extend(self.fix(f, "fix")),
            }
            if class.is_some_and(|c| c != Class::Engine)
                && f.as_sequence().is_none_or(|s| !s.is_empty())
            {
                self.err(
                    Some(f),
                    "fix",
                    "only engine entries carry a fix: a recipe change cannot help an infrastructure, teardown or setup failure",
                );
            }
        }
        let mut seen_on = Vec::new();
        if let Some(s) = map.get("seen_on") {
            for (t, _, _) in self.list(s, "seen_on") {
                let digits = t.trim().trim_start_matches('#');
                seen_on.push(match digits.parse::<u64>() {
                    Ok(n) => SeenOn::Pull(n),
                    Err(_) => SeenOn::Note(t.trim().to_owned()),
                });
            }
        }
        let mut nodes = Vec::new();
        if let Some(s) = map.get("nodes") {
            for (t, n, path) in self.list(s, "nodes") {
                if NODE_NAME.is_match(&t) {
                    nodes.push(t);
                } else {
                    self.err(Some(&n), &path, format!("{t:?} is not a node name"));
                }
            }
        }
        Some(Entry {
            id: id?,
            line: node.line,
            class: class?,
            signature,
            diagnosis,
            fixes,
            seen_on,
            nodes,
        })
    }

    fn sick_node(&mut self, index: usize, node: &Node) -> Option<SickNode> {
        self.entry = None;
        let field = format!("nodes[{index}]");
        let map = self.mapping(node, &field)?;
        self.keys(map, &field, &["name", "reason", "entry"]);
        let name = self.required(map, "name", &field).and_then(|(t, n)| {
            if NODE_NAME.is_match(&t) {
                Some(t)
            } else {
                self.err(
                    Some(&n),
                    &join(&field, "name"),
                    format!("{t:?} is not a node name"),
                );
                None
            }
        });
        let reason = self.diagnosis(map.get("reason"), map, &join(&field, "reason"));
        let entry = match map.get("entry") {
            Some(e) => Some(self.text(e, &join(&field, "entry"))?),
            None => None,
        };
        Some(SickNode {
            name: name?,
            reason,
            entry,
        })
    }
}

fn join(field: &str, key: &str) -> String {
    if field.is_empty() {
        key.to_owned()
    } else {
        format!("{field}.{key}")
    }
}

impl Playbook {
    /// Reads a playbook file with the default [`Limits`]; `source` names it
    /// in errors (e.g. `.github/klaud-playbook.yaml`).
    pub fn parse(source: &str, text: &str) -> Result<Playbook, PlaybookErrors> {
        Self::parse_with(source, text, &Limits::default())
    }

    /// Reads a playbook file within `limits`, returning every problem
    /// found.
    pub fn parse_with(
        source: &str,
        text: &str,
        limits: &Limits,
    ) -> Result<Playbook, PlaybookErrors> {
        let mut r = Reader {
            file: source,
            limits,
            errors: Vec::new(),
            entry: None,
        };
        let whole = |message: String| {
            PlaybookErrors(vec![PlaybookError {
                file: source.to_owned(),
                line: 0,
                entry: None,
                field: String::new(),
                message,
            }])
        };
        if text.len() > limits.max_bytes {
            return Err(whole(format!(
                "{} bytes, more than the {} a playbook may have",
                text.len(),
                limits.max_bytes
            )));
        }
        let root = match yaml::parse(text) {
            Ok(Some(root)) => root,
            Ok(None) => {
                return Err(whole(
                    "empty: a playbook needs `version: 1` and `entries`".into(),
                ));
            }
            Err(e) => {
                return Err(PlaybookErrors(vec![PlaybookError {
                    file: source.to_owned(),
                    line: e.line,
                    entry: None,
                    field: String::new(),
                    message: format!("not valid YAML: {}", e.message),
                }]));
            }
        };
        let Some(root) = r.mapping(&root, "").cloned() else {
            return Err(PlaybookErrors(r.errors));
        };
        r.keys(&root, "", &["version", "entries", "nodes"]);
        match root.get("version") {
            None => r.err(Some(&root), "version", "missing (write `version: 1`)"),
            Some(v) if v.as_scalar() == Some(FORMAT_VERSION) => {}
            Some(v) => r.err(
                Some(v),
                "version",
                format!("this Klaud reads version {FORMAT_VERSION} only"),
            ),
        }
        let mut entries = Vec::new();
        match root.get("entries") {
            None => r.err(Some(&root), "entries", "missing"),
            Some(list) => match list.as_sequence() {
                None => r.err(Some(list), "entries", "must be a list"),
                Some(items) => {
                    if items.len() > limits.max_entries {
                        r.err(
                            Some(list),
                            "entries",
                            format!("{} entries, more than {}", items.len(), limits.max_entries),
                        );
                    }
                    let mut ids = HashSet::new();
                    for (i, item) in items.iter().enumerate().take(limits.max_entries) {
                        if let Some(e) = r.entry(i, item) {
                            if !ids.insert(e.id.clone()) {
                                r.err(Some(item), "id", "used by an earlier entry too");
                            }
                            entries.push(e);
                        }
                    }
                    r.entry = None;
                }
            },
        }
        let mut nodes = Vec::new();
        if let Some(list) = root.get("nodes") {
            match list.as_sequence() {
                None => r.err(Some(list), "nodes", "must be a list"),
                Some(items) => {
                    if items.len() > limits.max_nodes {
                        r.err(
                            Some(list),
                            "nodes",
                            format!("{} nodes, more than {}", items.len(), limits.max_nodes),
                        );
                    }
                    for (i, item) in items.iter().enumerate().take(limits.max_nodes) {
                        if let Some(n) = r.sick_node(i, item) {
                            if let Some(e) = &n.entry
                                && !entries.iter().any(|x: &Entry| &x.id == e)
                            {
                                r.err(
                                    item.get("entry"),
                                    &format!("nodes[{i}].entry"),
                                    format!("no entry has the id {e:?}"),
                                );
                            }
                            nodes.push(n);
                        }
                    }
                }
            }
        }
        if r.errors.is_empty() {
            Ok(Playbook {
                source: source.to_owned(),
                entries,
                nodes,
            })
        } else {
            Err(PlaybookErrors(r.errors))
        }
    }
}
