//! The flag and environment audit: which command-line flags and
//! environment variables a family's recipes, `additional-settings` and
//! benchmark script set, and which of them an upstream change deleted from
//! the engine's argument or environment definitions.
//!
//! Two halves, both pure: [`collect`] reads the checkout (byte-exact, every
//! finding names its file and line), [`scan`] reads the changed files of an
//! upstream compare (GitHub's `files[].patch` hunks, handed in as
//! [`ChangedFile`]s by whoever asked GitHub). Where an engine defines its
//! flags and variables is data ([`EngineDefinitions`], with InferenceX
//! defaults in [`default_engines`]), not code.

use std::collections::{BTreeMap, BTreeSet};

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::repo::{Family, RepoError, Repository};
use crate::yaml::{self, Node};

/// Whether an item is a command-line flag or an environment variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ItemKind {
    /// A `--flag` of the engine's server.
    Flag,
    /// An environment variable.
    Env,
}

impl ItemKind {
    /// `flag` or `environment variable`.
    pub fn noun(self) -> &'static str {
        match self {
            ItemKind::Flag => "flag",
            ItemKind::Env => "environment variable",
        }
    }
}

/// One flag or variable the repository sets, with where it is first set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    /// Flag or variable.
    pub kind: ItemKind,
    /// `--name` for a flag, `NAME` for a variable.
    pub name: String,
    /// Where it is set first (`path:line`, repository-relative).
    pub source: String,
}

/// Everything a family sets, deduplicated by kind and name (the first
/// place wins), in a stable order (flags, then variables, by name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Collected {
    /// The items.
    pub items: Vec<Item>,
    /// Files read (repository-relative), for the report.
    pub files: Vec<String>,
}

impl Collected {
    /// How many flags and how many variables.
    pub fn counts(&self) -> (usize, usize) {
        let flags = self
            .items
            .iter()
            .filter(|i| i.kind == ItemKind::Flag)
            .count();
        (flags, self.items.len() - flags)
    }
}

/// How one engine's source repository defines flags and variables, and how
/// the benchmark repository passes them to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineDefinitions {
    /// The engine's source repository, `owner/name` (as in `[upstream]`).
    pub repository: String,
    /// The srt-slurm recipe section whose per-role keys are server flags
    /// (`backend.<recipe_config>.<role>.<flag>`), e.g. `vllm_config`.
    #[serde(default)]
    pub recipe_config: Option<String>,
    /// Text that starts the engine's server in a benchmark script
    /// (`vllm serve`, `sglang.launch_server`): the flags of that command
    /// line are the script's flags.
    #[serde(default)]
    pub launch: Vec<String>,
    /// Definition rules, each over some files of the source repository.
    pub rules: Vec<DefinitionRule>,
}

/// One shape of definition: lines of `files` matching `pattern` define the
/// names its first capture group holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DefinitionRule {
    /// What the names are.
    pub kind: ItemKind,
    /// Source paths: an entry ending in `/` is a folder prefix, any other
    /// an exact file.
    pub files: Vec<String>,
    /// A regular expression; every match's group 1 is a name.
    pub pattern: String,
    /// Names are dataclass fields turned into flags: `max_model_len` →
    /// `--max-model-len`.
    #[serde(default)]
    pub field: bool,
}

impl EngineDefinitions {
    /// Whether a source path is one where this engine defines flags or
    /// variables (what a regression hunt's report calls an engine path).
    pub fn covers(&self, path: &str) -> bool {
        self.rules.iter().any(|r| r.covers(path))
    }
}

impl DefinitionRule {
    fn covers(&self, path: &str) -> bool {
        self.files.iter().any(|f| {
            if f.ends_with('/') {
                path.starts_with(f.as_str())
            } else {
                path == f
            }
        })
    }
}

/// The InferenceX engines whose definition shapes are known: vLLM
/// (`add_argument("--x")` in its CLI modules, `EngineArgs` dataclass fields
/// in `arg_utils.py`, `"VLLM_X": lambda:` entries of `envs.py`) and SGLang
/// (`add_argument("--x")` in `server_args.py`, `SGLANG_X = EnvBool(..)` in
/// `environ.py`, and the `os.environ` reads left there).
pub fn default_engines() -> Vec<EngineDefinitions> {
    let add_argument = r#"add_argument\(\s*(?:["']-[A-Za-z0-9]+["']\s*,\s*)*["']--([A-Za-z0-9][A-Za-z0-9_-]*)["']"#;
    vec![
        EngineDefinitions {
            repository: "vllm-project/vllm".into(),
            recipe_config: Some("vllm_config".into()),
            launch: vec![
                "vllm serve".into(),
                "vllm.entrypoints.openai.api_server".into(),
            ],
            rules: vec![
                DefinitionRule {
                    kind: ItemKind::Flag,
                    files: vec![
                        "vllm/engine/arg_utils.py".into(),
                        "vllm/entrypoints/openai/cli_args.py".into(),
                        "vllm/entrypoints/cli/".into(),
                    ],
                    pattern: add_argument.into(),
                    field: false,
                },
                DefinitionRule {
                    kind: ItemKind::Flag,
                    files: vec!["vllm/engine/arg_utils.py".into()],
                    // Class-level annotated fields (four spaces): the
                    // `EngineArgs` dataclass, whose fields become flags.
                    pattern: r"^ {4}([a-z][a-z0-9_]*)\s*:\s*[A-Za-z\[(]".into(),
                    field: true,
                },
                DefinitionRule {
                    kind: ItemKind::Env,
                    files: vec!["vllm/envs.py".into()],
                    pattern: r#"^\s*["']([A-Z][A-Z0-9_]*)["']\s*:"#.into(),
                    field: false,
                },
            ],
        },
        EngineDefinitions {
            repository: "sgl-project/sglang".into(),
            recipe_config: Some("sglang_config".into()),
            launch: vec!["sglang.launch_server".into(), "sglang serve".into()],
            rules: vec![
                DefinitionRule {
                    kind: ItemKind::Flag,
                    files: vec!["python/sglang/srt/server_args.py".into()],
                    pattern: add_argument.into(),
                    field: false,
                },
                DefinitionRule {
                    kind: ItemKind::Env,
                    files: vec!["python/sglang/srt/environ.py".into()],
                    pattern: r"^\s*([A-Z][A-Z0-9_]*)\s*=\s*Env[A-Za-z]*\(".into(),
                    field: false,
                },
                DefinitionRule {
                    kind: ItemKind::Env,
                    files: vec!["python/sglang/srt/environ.py".into()],
                    pattern:
                        r#"os\.(?:environ(?:\.get)?|getenv)[\(\[]\s*["']([A-Z][A-Z0-9_]*)["']"#
                            .into(),
                    field: false,
                },
            ],
        },
    ]
}

/// A problem with the audit's own configuration or input.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// A file of the checkout could not be read or parsed.
    #[error(transparent)]
    Repo(#[from] RepoError),
    /// A definition rule's pattern is not a regular expression.
    #[error("audit rule for {repository}: pattern {pattern:?} is invalid: {message}")]
    Pattern {
        repository: String,
        pattern: String,
        message: String,
    },
    /// A benchmark script line that cannot be read as shell words.
    #[error("{path}:{line}: {message}")]
    Script {
        path: String,
        line: usize,
        message: String,
    },
}

/// The definitions of the engine built from `repository`, if known.
pub fn engine_for<'a>(
    engines: &'a [EngineDefinitions],
    repository: &str,
) -> Option<&'a EngineDefinitions> {
    engines
        .iter()
        .find(|e| e.repository.eq_ignore_ascii_case(repository))
}

/// Checks every rule's pattern, so a bad configuration fails at start-up
/// with the rule named, not at the first audit.
pub fn validate(engines: &[EngineDefinitions]) -> Result<(), AuditError> {
    for e in engines {
        for r in &e.rules {
            compile(e, r)?;
        }
    }
    Ok(())
}

fn compile(e: &EngineDefinitions, r: &DefinitionRule) -> Result<Regex, AuditError> {
    Regex::new(&r.pattern).map_err(|err| AuditError::Pattern {
        repository: e.repository.clone(),
        pattern: r.pattern.clone(),
        message: err.to_string(),
    })
}

/// Settings that are the benchmark repository's own plumbing, not the
/// engine's: recipe references (`CONFIG_FILE`, `*_CONFIG_FILE`).
fn is_recipe_setting(name: &str) -> bool {
    name == "CONFIG_FILE" || name.ends_with("_CONFIG_FILE")
}

#[derive(Default)]
struct Sink {
    seen: BTreeMap<(ItemKind, String), String>,
    files: BTreeSet<String>,
}

impl Sink {
    fn add(&mut self, kind: ItemKind, name: String, path: &str, line: usize) {
        self.seen
            .entry((kind, name))
            .or_insert_with(|| format!("{path}:{line}"));
    }

    fn finish(self) -> Collected {
        Collected {
            items: self
                .seen
                .into_iter()
                .map(|((kind, name), source)| Item { kind, name, source })
                .collect(),
            files: self.files.into_iter().collect(),
        }
    }
}

/// The flags and variables `family` sets: its in-repository srt-slurm
/// recipes (`backend.<recipe_config>.<role>` keys as flags, the
/// `*environment` maps as variables), the `additional-settings` of its
/// master entry (`NAME=value` as variables, recipe references left out) and,
/// for a single-node family, the benchmark script its launcher runs.
pub fn collect(
    repository: &Repository,
    family: &Family,
    engine: Option<&EngineDefinitions>,
) -> Result<Collected, AuditError> {
    let mut sink = Sink::default();
    let root = repository.root();
    for recipe in &family.recipes {
        if !recipe.in_repository || recipe.missing {
            continue;
        }
        let text = crate::repo::read_text(root, &recipe.path)?;
        let Some(doc) = crate::repo::parse_recipe(&recipe.path, &text)? else {
            continue;
        };
        sink.files.insert(recipe.path.clone());
        recipe_items(&recipe.path, &doc, engine, &mut sink);
    }
    let master = format!("{}{}", repository.prefix(), family.file);
    let text = crate::repo::read_text(root, &master)?;
    let doc = yaml::parse_readable(&text)
        .map_err(|e| RepoError::Yaml {
            path: master.clone(),
            line: e.line,
            column: e.column,
            message: e.message,
        })?
        .and_then(|d| d.get(&family.key).cloned());
    if let Some(entry) = doc {
        settings_items(&master, &entry, &mut sink)?;
        sink.files.insert(master);
    }
    if !family.entry.multinode {
        for script in benchmark_scripts(repository, family) {
            let text = crate::repo::read_text(root, &script)?;
            script_items(&script, &text, engine, &mut sink)?;
            sink.files.insert(script);
        }
    }
    Ok(sink.finish())
}

fn mapping_entries(node: &Node) -> Vec<(&Node, &Node)> {
    // A `<<` merge key brings in the entries of the mapping(s) it names.
    let mut out = Vec::new();
    if let Some(m) = node.as_mapping() {
        for (k, v) in m {
            if k.as_scalar() == Some("<<") {
                match v.as_sequence() {
                    Some(seq) => seq.iter().for_each(|s| out.extend(mapping_entries(s))),
                    None => out.extend(mapping_entries(v)),
                }
            } else {
                out.push((k, v));
            }
        }
    }
    out
}

fn recipe_items(path: &str, doc: &Node, engine: Option<&EngineDefinitions>, sink: &mut Sink) {
    let env_maps = |node: &Node, sink: &mut Sink| {
        for (k, _) in mapping_entries(node) {
            if let Some(name) = k.as_scalar() {
                sink.add(ItemKind::Env, name.to_owned(), path, k.line);
            }
        }
    };
    if let Some(env) = doc.get("environment") {
        env_maps(env, sink);
    }
    let Some(backend) = doc.get("backend") else {
        return;
    };
    for (k, v) in mapping_entries(backend) {
        let Some(key) = k.as_scalar() else { continue };
        if key == "environment" || key.ends_with("_environment") {
            env_maps(v, sink);
        }
    }
    let Some(section) = engine
        .and_then(|e| e.recipe_config.as_deref())
        .and_then(|c| backend.get(c))
    else {
        return;
    };
    for (_, role) in mapping_entries(section) {
        for (k, _) in mapping_entries(role) {
            if let Some(flag) = k.as_scalar() {
                // srt-slurm passes `key: value` as `--key value`; vLLM and
                // SGLang accept `_` and `-` alike, so names are compared in
                // the kebab spelling their parsers print.
                sink.add(
                    ItemKind::Flag,
                    format!("--{}", flag.replace('_', "-")),
                    path,
                    k.line,
                );
            }
        }
    }
}

fn settings_items(path: &str, entry: &Node, sink: &mut Sink) -> Result<(), AuditError> {
    for (k, v) in mapping_entries(entry) {
        if k.as_scalar() == Some("additional-settings") {
            let Some(seq) = v.as_sequence() else {
                return Err(RepoError::Field {
                    path: path.to_owned(),
                    line: v.line,
                    field: "additional-settings".into(),
                    message: format!("expected a list of NAME=value, found {}", v.kind_name()),
                }
                .into());
            };
            for s in seq {
                let Some(text) = s.as_scalar() else {
                    return Err(RepoError::Field {
                        path: path.to_owned(),
                        line: s.line,
                        field: "additional-settings".into(),
                        message: format!("expected NAME=value, found {}", s.kind_name()),
                    }
                    .into());
                };
                let name = text.split_once('=').map_or(text, |(n, _)| n).trim();
                if is_env_name(name) && !is_recipe_setting(name) {
                    sink.add(ItemKind::Env, name.to_owned(), path, s.line);
                }
            }
            continue;
        }
        if v.as_mapping().is_some() || v.as_sequence().is_some() {
            walk_settings(path, v, sink)?;
        }
    }
    Ok(())
}

fn walk_settings(path: &str, node: &Node, sink: &mut Sink) -> Result<(), AuditError> {
    match node.as_sequence() {
        Some(seq) => {
            for s in seq {
                walk_settings(path, s, sink)?;
            }
            Ok(())
        }
        None if node.as_mapping().is_some() => settings_items(path, node, sink),
        None => Ok(()),
    }
}

fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_uppercase() || b == b'_')
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// The benchmark scripts a single-node family's launcher runs, as the
/// InferenceX launchers name them: under
/// `benchmarks/single_node/<fixed_seq_len|agentic>/`,
/// `<model-prefix>_<precision>_<gpu>_<framework>[_mtp].sh`, else the older
/// `<model-prefix>_<precision>_<gpu>[_trt][_mtp].sh`. Only files that exist.
pub fn benchmark_scripts(repository: &Repository, family: &Family) -> Vec<String> {
    let e = &family.entry;
    let runner = e.runner.strip_prefix("cluster:").unwrap_or(&e.runner);
    let gpu = runner.split('-').next().unwrap_or(runner);
    let mut out = Vec::new();
    for (scenario, body) in &e.scenarios {
        let sub = if scenario.starts_with("agentic") {
            "agentic/"
        } else {
            "fixed_seq_len/"
        };
        let mut specs = BTreeSet::new();
        let text = serde_json::to_string(body).unwrap_or_default();
        specs.insert(if text.contains(r#""spec-decoding":"mtp""#) {
            "_mtp"
        } else {
            ""
        });
        if text.contains(r#""spec-decoding":"none""#) || !text.contains("spec-decoding") {
            specs.insert("");
        }
        for spec in specs {
            let base = format!(
                "{}benchmarks/single_node/{sub}{}_{}_{gpu}",
                repository.prefix(),
                e.model_prefix,
                e.precision
            );
            let legacy = if e.framework == "trt" { "_trt" } else { "" };
            for rel in [
                format!("{base}_{}{spec}.sh", e.framework),
                format!("{base}{legacy}{spec}.sh"),
            ] {
                if repository.root().join(&rel).is_file() {
                    if !out.contains(&rel) {
                        out.push(rel);
                    }
                    break;
                }
            }
        }
    }
    out
}

/// The flags on the engine's launch command line (continuation lines
/// joined, with the bash arrays and `--`-valued variables it expands), and
/// the variables the script exports or sets in front of that command.
fn script_items(
    path: &str,
    text: &str,
    engine: Option<&EngineDefinitions>,
    sink: &mut Sink,
) -> Result<(), AuditError> {
    let lines: Vec<&str> = text.split('\n').collect();
    // Bash arrays (`NAME=(...)`, maybe over several lines) and scalars whose
    // value holds flags, by name, with the line each piece starts on.
    let mut expansions: BTreeMap<String, Vec<(usize, String)>> = BTreeMap::new();
    let assign = Regex::new(r"^\s*(?:export\s+|local\s+)?([A-Za-z_][A-Za-z0-9_]*)(\+?)=(.*)$")
        .expect("static regex");
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(c) = assign.captures(line) {
            let name = c[1].to_owned();
            let value = c[3].to_owned();
            if value.starts_with('(') {
                // Each line of the array keeps its own number, so a flag
                // is named where it is written.
                let start = i;
                let mut body = value.clone();
                let mut pieces = vec![(start + 1, value.clone())];
                while !closes_array(&body) {
                    i += 1;
                    let Some(next) = lines.get(i) else {
                        return Err(AuditError::Script {
                            path: path.to_owned(),
                            line: start + 1,
                            message: format!("array {name}=( is never closed"),
                        });
                    };
                    body.push('\n');
                    body.push_str(next);
                    pieces.push((i + 1, (*next).to_owned()));
                }
                expansions.entry(name).or_default().extend(pieces);
            } else if value.contains("--") {
                expansions.entry(name).or_default().push((i + 1, value));
            }
            let exported = line.trim_start().starts_with("export ");
            if exported && is_env_name(&c[1]) {
                sink.add(ItemKind::Env, c[1].to_owned(), path, i + 1);
            }
        }
        i += 1;
    }
    let Some(engine) = engine else {
        return Ok(());
    };
    let flag = Regex::new(r#"(?:^|[\s"'(])--([a-z0-9][a-z0-9_-]*)"#).expect("static regex");
    let expand = Regex::new(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)").expect("static regex");
    let prefix_env = Regex::new(r"^([A-Z_][A-Z0-9_]*)=\S*$").expect("static regex");
    let mut i = 0;
    while i < lines.len() {
        let start = i;
        let is_launch = engine
            .launch
            .iter()
            .any(|l| lines[i].contains(l.as_str()) && !lines[i].trim_start().starts_with('#'));
        // The logical line: continuation backslashes join physical lines.
        let mut pieces = vec![(i + 1, lines[i].to_owned())];
        while lines[i].trim_end().ends_with('\\') && i + 1 < lines.len() {
            i += 1;
            pieces.push((i + 1, lines[i].to_owned()));
        }
        i += 1;
        if !is_launch {
            continue;
        }
        let launch_at = engine
            .launch
            .iter()
            .filter_map(|l| pieces[0].1.find(l.as_str()))
            .min()
            .unwrap_or(0);
        for word in pieces[0].1[..launch_at].split_whitespace() {
            if let Some(c) = prefix_env.captures(word) {
                sink.add(ItemKind::Env, c[1].to_owned(), path, start + 1);
            }
        }
        let mut seen_vars = BTreeSet::new();
        let mut queue: Vec<(usize, String)> = pieces;
        if let Some(first) = queue.first_mut() {
            first.1 = first.1[launch_at..].to_owned();
        }
        while let Some((line, piece)) = queue.pop() {
            let code = strip_comment(&piece);
            for c in flag.captures_iter(code) {
                sink.add(ItemKind::Flag, format!("--{}", &c[1]), path, line);
            }
            for c in expand.captures_iter(code) {
                if seen_vars.insert(c[1].to_owned())
                    && let Some(defs) = expansions.get(&c[1])
                {
                    queue.extend(defs.iter().cloned());
                }
            }
        }
    }
    Ok(())
}

fn closes_array(body: &str) -> bool {
    let mut depth = 0i32;
    let mut quote: Option<char> = None;
    for ch in strip_comment_lines(body).chars() {
        match (quote, ch) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(ch),
            (None, '(') => depth += 1,
            (None, ')') => {
                depth -= 1;
                if depth == 0 {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

fn strip_comment_lines(body: &str) -> String {
    body.split('\n')
        .map(strip_comment)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The code before an unquoted `#` that starts a word.
fn strip_comment(line: &str) -> &str {
    let mut quote: Option<char> = None;
    let mut prev = ' ';
    for (i, ch) in line.char_indices() {
        match (quote, ch) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(ch),
            (None, '#') if prev.is_whitespace() => return &line[..i],
            _ => {}
        }
        prev = ch;
    }
    line
}

/// One changed file of an upstream compare, as GitHub lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangedFile {
    /// Path in the source repository.
    pub filename: String,
    /// `added`, `removed`, `modified`, `renamed`, ...
    pub status: String,
    /// The unified-diff hunks; GitHub leaves it out for a binary file or a
    /// diff too large to show.
    pub patch: Option<String>,
}

/// What the changed files delete from the definitions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    /// Names defined before and not after (deleted and not added anywhere
    /// in the compare, so moves and renames within it are not deletions),
    /// with the file that lost them.
    pub removed: BTreeMap<(ItemKind, String), String>,
    /// Definition files whose patch GitHub did not show: deletions there
    /// cannot be seen.
    pub unreadable: Vec<String>,
}

/// Reads the `-` and `+` lines of every definition file's patch.
pub fn scan(engine: &EngineDefinitions, files: &[ChangedFile]) -> Result<Scan, AuditError> {
    let rules: Vec<(&DefinitionRule, Regex)> = engine
        .rules
        .iter()
        .map(|r| compile(engine, r).map(|re| (r, re)))
        .collect::<Result<_, _>>()?;
    let mut removed: BTreeMap<(ItemKind, String), String> = BTreeMap::new();
    let mut added: BTreeSet<(ItemKind, String)> = BTreeSet::new();
    let mut unreadable = Vec::new();
    for f in files {
        let relevant: Vec<&(&DefinitionRule, Regex)> = rules
            .iter()
            .filter(|(r, _)| r.covers(&f.filename))
            .collect();
        if relevant.is_empty() {
            continue;
        }
        let Some(patch) = &f.patch else {
            unreadable.push(f.filename.clone());
            continue;
        };
        for line in patch.split('\n') {
            let (sign, body) = match line.as_bytes().first() {
                Some(b'-') => ('-', &line[1..]),
                Some(b'+') => ('+', &line[1..]),
                _ => continue,
            };
            for (rule, re) in &relevant {
                for c in re.captures_iter(body) {
                    let Some(m) = c.get(1) else { continue };
                    let name = if rule.field {
                        format!("--{}", m.as_str().replace('_', "-"))
                    } else if rule.kind == ItemKind::Flag {
                        format!("--{}", m.as_str())
                    } else {
                        m.as_str().to_owned()
                    };
                    if sign == '-' {
                        removed
                            .entry((rule.kind, name))
                            .or_insert_with(|| f.filename.clone());
                    } else {
                        added.insert((rule.kind, name));
                    }
                }
            }
        }
    }
    removed.retain(|k, _| !added.contains(k));
    Ok(Scan {
        removed,
        unreadable,
    })
}

/// A collected item the upstream change deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemovedItem {
    /// Flag or variable.
    pub kind: ItemKind,
    /// `--name` or `NAME`.
    pub name: String,
    /// Where the benchmark repository sets it (`path:line`).
    pub source: String,
    /// The source repository file that lost its definition.
    pub file: String,
    /// The upstream commit that deleted it, when it could be found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

/// The collected items whose definition `scan` deleted. A boolean flag set
/// as `--no-x` is the `--x` definition (argparse's `BooleanOptionalAction`).
pub fn removed_items(collected: &Collected, scan: &Scan) -> Vec<RemovedItem> {
    collected
        .items
        .iter()
        .filter_map(|item| {
            let file = scan
                .removed
                .get(&(item.kind, item.name.clone()))
                .or_else(|| {
                    let base = item.name.strip_prefix("--no-")?;
                    (item.kind == ItemKind::Flag)
                        .then(|| scan.removed.get(&(ItemKind::Flag, format!("--{base}"))))
                        .flatten()
                })?;
            Some(RemovedItem {
                kind: item.kind,
                name: item.name.clone(),
                source: item.source.clone(),
                file: file.clone(),
                commit: None,
            })
        })
        .collect()
}

/// The definition text a commit's patch must delete for it to be the one
/// that removed `item` (the bare name as the rules match it).
pub fn defines(engine: &EngineDefinitions, file: &str, line: &str, item: &RemovedItem) -> bool {
    engine
        .rules
        .iter()
        .filter(|r| r.kind == item.kind && r.covers(file))
        .any(|r| {
            let Ok(re) = Regex::new(&r.pattern) else {
                return false;
            };
            re.captures_iter(line).any(|c| {
                c.get(1).is_some_and(|m| {
                    let name = if r.field {
                        format!("--{}", m.as_str().replace('_', "-"))
                    } else if r.kind == ItemKind::Flag {
                        format!("--{}", m.as_str())
                    } else {
                        m.as_str().to_owned()
                    };
                    name == item.name
                        || item
                            .name
                            .strip_prefix("--no-")
                            .is_some_and(|b| name == format!("--{b}"))
                })
            })
        })
}

/// Whether `patch` deletes `item`'s definition without adding it back.
pub fn patch_removes(
    engine: &EngineDefinitions,
    file: &str,
    patch: &str,
    item: &RemovedItem,
) -> bool {
    let mut minus = false;
    let mut plus = false;
    for line in patch.split('\n') {
        match line.as_bytes().first() {
            Some(b'-') => minus |= defines(engine, file, &line[1..], item),
            Some(b'+') => plus |= defines(engine, file, &line[1..], item),
            _ => {}
        }
    }
    minus && !plus
}

/// The audit's result as the reports carry it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum AuditResult {
    /// Every collected item is still defined.
    Present {
        /// Flags checked.
        flags: usize,
        /// Variables checked.
        env: usize,
    },
    /// Some were deleted upstream.
    Removed {
        /// Flags checked.
        flags: usize,
        /// Variables checked.
        env: usize,
        /// The deleted ones.
        items: Vec<RemovedItem>,
    },
    /// The change could not be checked (compare too large or unavailable,
    /// engine unknown); this never blocks.
    Unchecked {
        /// Flags collected.
        flags: usize,
        /// Variables collected.
        env: usize,
        /// Which kind of reason.
        cause: UncheckedCause,
        /// Why, in one sentence without a trailing period.
        reason: String,
    },
}

/// Why an audit did not check the change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UncheckedCause {
    /// More changed files than GitHub lists or the audit reads, or a
    /// definition file whose diff GitHub does not show.
    TooLarge,
    /// GitHub could not be asked, or a commit is not found.
    Unavailable,
    /// The new commit does not descend from the old one.
    NotLinear,
    /// No definitions are configured for the source repository.
    NotConfigured,
    /// A file of the benchmark repository could not be read or parsed.
    Unreadable,
}

impl AuditResult {
    /// The deleted items, when some were.
    pub fn removed(&self) -> &[RemovedItem] {
        match self {
            AuditResult::Removed { items, .. } => items,
            _ => &[],
        }
    }
}

#[cfg(test)]
#[path = "audit_tests.rs"]
mod tests;
