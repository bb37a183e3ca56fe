//! No file of this crate imports, through any chain of `use` lines and
//! paths, a file that imports it back: a loop makes every file in it
//! depend on all the others, so none can be read, changed or tested alone.
//! The test reads every `.rs` file under `src/`, resolves the crate's own
//! paths (`crate::…`, `super::…`, `self::…`, a child module's name, and a
//! name a `use` bound to one of the crate's modules) to the file that holds
//! the module, and fails naming one loop. A path through a `pub use`
//! re-export (`crate::engine::CandidateRecord`, re-exported by
//! `engine/mod.rs` from `engine/journal.rs`) is followed to the file that
//! defines the name: stopping at the re-exporting file would hide a loop
//! that runs through it. A module's file holds its child modules (its
//! declarations, re-exports and calls of them are no imports; a child's
//! `super::` is). Glob re-exports (`pub use x::*`) are not followed. Test modules (`tests.rs` files and inline
//! `#[cfg(test)] mod … { … }`) are left out: they sit beside the code they
//! test, and their `use super::*` is no design.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use regex::Regex;

/// Module path (segments below the crate root) → file, and file → the
/// files it imports.
struct Graph {
    modules: BTreeMap<Vec<String>, String>,
    /// (module, name it re-exports) → the path the `pub use` names.
    reexports: HashMap<(Vec<String>, String), Vec<String>>,
    edges: BTreeMap<String, BTreeSet<String>>,
    /// (file, file it imports) → the paths that make the arrow.
    names: BTreeMap<(String, String), BTreeSet<String>>,
}

/// The module path of a file relative to `src/`: `lib.rs` → `[]`,
/// `a/b.rs` and `a/b/mod.rs` → `[a, b]`.
fn module_of(file: &str) -> Vec<String> {
    let mut parts: Vec<String> = file
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// `text` with comments, string and char literals blanked (so that a
/// brace or a path inside them counts for nothing), line breaks kept.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_'))
        {
            // A raw string: r"…", r#"…"#, …
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let close: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let rest: String = chars[j + 1..].iter().collect();
            let len = rest.find(&close).map_or(rest.len(), |p| p + close.len());
            let end = j + 1 + rest[..len].chars().count();
            out.extend(chars[i..end.min(chars.len())].iter().map(|&c| blank(c)));
            i = end;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < chars.len() {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && next == Some('\\') {
            // An escaped char literal: '\n', '\'', '\u{…}'.
            out.push_str("  ");
            i += 2;
            while i < chars.len() && chars[i] != '\'' {
                out.push(' ');
                i += 1;
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            out.push_str("   ");
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// `code` without its inline `#[cfg(test)] mod name { … }` blocks.
fn without_test_modules(code: &str) -> String {
    let start = Regex::new(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{").unwrap();
    let mut out = String::new();
    let mut rest = code;
    while let Some(m) = start.find(rest) {
        out.push_str(&rest[..m.start()]);
        let mut depth = 0usize;
        let mut end = rest.len();
        for (i, c) in rest[m.end() - 1..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = m.end() - 1 + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// Expands a use tree (`a::b::{c, d::{e as f, self}}`) into its paths,
/// each with the name it binds.
fn expand_use(tree: &str) -> Vec<(Vec<String>, String)> {
    fn split_top(s: &str) -> Vec<&str> {
        let (mut depth, mut start, mut parts) = (0, 0, Vec::new());
        for (i, c) in s.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&s[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&s[start..]);
        parts
    }
    fn walk(prefix: &[String], tree: &str, out: &mut Vec<(Vec<String>, String)>) {
        let tree = tree.trim();
        if tree.is_empty() {
            return;
        }
        if let Some(open) = tree.find('{') {
            let mut path = prefix.to_vec();
            path.extend(
                tree[..open]
                    .split("::")
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned),
            );
            let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
            for part in split_top(inner) {
                walk(&path, part, out);
            }
            return;
        }
        let (path, alias) = match tree.split_once(" as ") {
            Some((p, a)) => (p.trim(), Some(a.trim())),
            None => (tree, None),
        };
        let mut segs = prefix.to_vec();
        segs.extend(path.split("::").map(|s| s.trim().to_owned()));
        if segs.last().map(String::as_str) == Some("self") {
            segs.pop();
        }
        let name = alias
            .map(str::to_owned)
            .or_else(|| segs.last().cloned())
            .unwrap_or_default();
        out.push((segs, name));
    }
    let mut out = Vec::new();
    let squeezed: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    walk(&[], &squeezed, &mut out);
    out
}

impl Graph {
    /// The graph of `files` (path under `src/` → text).
    fn of(files: &BTreeMap<String, String>) -> Graph {
        let modules: BTreeMap<Vec<String>, String> =
            files.keys().map(|f| (module_of(f), f.clone())).collect();
        let mut graph = Graph {
            modules,
            reexports: HashMap::new(),
            edges: BTreeMap::new(),
            names: BTreeMap::new(),
        };
        let use_item = Regex::new(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);").unwrap();
        let path = Regex::new(r"\b[A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)+").unwrap();
        let code: BTreeMap<&String, String> = files
            .iter()
            .map(|(f, t)| (f, without_test_modules(&code_only(t))))
            .collect();
        // Every re-export first: a path may pass through one in a file
        // read later.
        for (file, code) in &code {
            let here = module_of(file);
            for item in use_item.captures_iter(code) {
                if item.get(1).is_none() {
                    continue;
                }
                for (segs, name) in expand_use(&item[2]) {
                    if name == "*" {
                        continue;
                    }
                    if let Some(abs) = graph.absolute(&here, &segs, &HashMap::new()) {
                        graph.reexports.insert((here.clone(), name), abs);
                    }
                }
            }
        }
        for (file, code) in &code {
            let here = module_of(file);
            let mut aliases: HashMap<String, Vec<String>> = HashMap::new();
            let mut found: Vec<(Vec<String>, String)> = Vec::new();
            for item in use_item.captures_iter(code) {
                for (segs, name) in expand_use(&item[2]) {
                    if let Some(abs) = graph.absolute(&here, &segs, &aliases) {
                        if graph.modules.contains_key(&abs) {
                            aliases.insert(name, abs.clone());
                        }
                        found.push((abs, segs.join("::")));
                    }
                }
            }
            let rest = use_item.replace_all(code, "");
            for m in path.find_iter(&rest) {
                let segs: Vec<String> = m.as_str().split("::").map(|s| s.trim().into()).collect();
                if let Some(abs) = graph.absolute(&here, &segs, &aliases) {
                    found.push((abs, segs.join("::")));
                }
            }
            let mut targets = BTreeSet::new();
            for (abs, text) in found {
                if let Some(target) = graph.file_of(&abs) {
                    graph
                        .names
                        .entry(((*file).clone(), target.clone()))
                        .or_default()
                        .insert(text);
                    targets.insert(target);
                }
            }
            // A module's file holds its child modules: what it declares,
            // re-exports or calls of them is containment, not an import.
            targets.retain(|t| {
                let m = module_of(t);
                !(m.len() > here.len() && m.starts_with(&here)) && t != *file
            });
            graph.edges.insert((*file).clone(), targets);
        }
        graph
    }

    /// `segs` as a path from the crate root, when it names something of
    /// this crate.
    fn absolute(
        &self,
        here: &[String],
        segs: &[String],
        aliases: &HashMap<String, Vec<String>>,
    ) -> Option<Vec<String>> {
        let (first, tail) = segs.split_first()?;
        let mut base = match first.as_str() {
            "crate" => Vec::new(),
            "self" => here.to_vec(),
            "super" => here[..here.len().checked_sub(1)?].to_vec(),
            name => {
                let mut child = here.to_vec();
                child.push(name.to_owned());
                if self.modules.contains_key(&child) {
                    child
                } else {
                    aliases.get(name)?.clone()
                }
            }
        };
        let mut tail = tail;
        while tail.first().map(String::as_str) == Some("super") {
            base.pop();
            tail = &tail[1..];
        }
        base.extend(tail.iter().cloned());
        Some(base)
    }

    /// The file that defines what `path` names: the deepest module on it,
    /// or, where that module re-exports the next name, the file the
    /// re-export leads to (`None`: a path outside the crate's modules).
    fn file_of(&self, path: &[String]) -> Option<String> {
        let mut path = path.to_vec();
        // Bounded: re-exports that lead round in a circle end here.
        for _ in 0..16 {
            let n = (0..=path.len())
                .rev()
                .find(|n| self.modules.contains_key(&path[..*n]))?;
            let Some(name) = path.get(n) else {
                break;
            };
            let Some(target) = self.reexports.get(&(path[..n].to_vec(), name.clone())) else {
                break;
            };
            let mut next = target.clone();
            next.extend(path[n + 1..].iter().cloned());
            path = next;
        }
        (0..=path.len())
            .rev()
            .find_map(|n| self.modules.get(&path[..n]))
            .cloned()
    }

    /// One loop of files, in import order, when there is one.
    fn cycle(&self) -> Option<Vec<String>> {
        // Depth first; a file met again while still on the path closes a loop.
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            Open,
            Done,
        }
        fn visit(
            g: &Graph,
            file: &str,
            marks: &mut HashMap<String, Mark>,
            path: &mut Vec<String>,
        ) -> Option<Vec<String>> {
            marks.insert(file.to_owned(), Mark::Open);
            path.push(file.to_owned());
            for next in g.edges.get(file).into_iter().flatten() {
                match marks.get(next) {
                    Some(Mark::Open) => {
                        let at = path.iter().position(|p| p == next)?;
                        let mut circle = path[at..].to_vec();
                        circle.push(next.clone());
                        return Some(circle);
                    }
                    Some(Mark::Done) => {}
                    None => {
                        if let Some(c) = visit(g, next, marks, path) {
                            return Some(c);
                        }
                    }
                }
            }
            path.pop();
            marks.insert(file.to_owned(), Mark::Done);
            None
        }
        let mut marks = HashMap::new();
        for file in self.edges.keys() {
            if !marks.contains_key(file)
                && let Some(c) = visit(self, file, &mut marks, &mut Vec::new())
            {
                return Some(c);
            }
        }
        None
    }
}

/// Every `.rs` file under `dir` but test modules, by path under `dir`.
fn read_tree(dir: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
            .map(|e| e.expect("directory entry").path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(root, &path, out);
            } else if path.extension().is_some_and(|e| e == "rs")
                && path.file_name().is_some_and(|n| n != "tests.rs")
            {
                let rel = path.strip_prefix(root).expect("under root");
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
                out.insert(rel.to_string_lossy().replace('\\', "/"), text);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

#[test]
fn the_crate_has_no_import_loop() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = Graph::of(&read_tree(&src));
    assert!(
        graph.edges.len() > 50,
        "read only {} files",
        graph.edges.len()
    );
    if let Some(circle) = graph.cycle() {
        let ties: Vec<String> = circle
            .windows(2)
            .map(|w| {
                let names = &graph.names[&(w[0].clone(), w[1].clone())];
                format!("{} -> {}: {names:?}", w[0], w[1])
            })
            .collect();
        panic!(
            "import loop in klaud-lifecycle (move what they share into a file that imports \
             neither):\n{}",
            ties.join("\n")
        );
    }
}

fn tree(files: &[(&str, &str)]) -> BTreeMap<String, String> {
    files
        .iter()
        .map(|(p, t)| ((*p).to_owned(), (*t).to_owned()))
        .collect()
}

#[test]
fn the_checker_finds_a_loop_through_use_lines_super_and_inline_paths() {
    let files = tree(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a/mod.rs", "mod c;\nuse crate::b::{self, Thing as _};\n"),
        ("a/c.rs", "fn f() { super::super::b::g(); }\n"),
        (
            "b.rs",
            "// crate::a::c is named only here\nfn g() { crate::a::c::f(); }\n",
        ),
    ]);
    let graph = Graph::of(&files);
    assert_eq!(graph.edges["a/mod.rs"], BTreeSet::from(["b.rs".to_owned()]));
    assert_eq!(graph.edges["a/c.rs"], BTreeSet::from(["b.rs".to_owned()]));
    let circle = graph.cycle().expect("b -> a/c -> b is a loop");
    assert_eq!(circle.first(), circle.last());
    assert!(circle.contains(&"a/c.rs".to_owned()) && circle.contains(&"b.rs".to_owned()));
}

#[test]
fn the_checker_follows_a_module_bound_by_use_and_leaves_tests_out() {
    let files = tree(&[
        ("lib.rs", "mod steps;\nmod drive;\n"),
        ("steps/mod.rs", "pub mod claim;\n"),
        (
            "steps/claim.rs",
            "use crate::drive::Progress;\n#[cfg(test)]\nmod tests {\n    use super::*;\n    fn t() { let s = \"}\"; }\n}\n",
        ),
        (
            "drive.rs",
            "use crate::steps;\nfn d() { steps::claim::run(); }\n",
        ),
    ]);
    let graph = Graph::of(&files);
    assert!(graph.edges["drive.rs"].contains("steps/claim.rs"));
    assert!(graph.cycle().is_some(), "drive -> steps/claim -> drive");

    let fixed = tree(&[
        ("lib.rs", "mod steps;\nmod drive;\nmod types;\n"),
        ("types.rs", "pub enum Progress {}\n"),
        ("steps/mod.rs", "pub mod claim;\n"),
        (
            "steps/claim.rs",
            "use crate::types::Progress;\n#[cfg(test)]\nmod tests {\n    use crate::drive::*;\n}\n",
        ),
        (
            "drive.rs",
            "use crate::steps;\nfn d() { steps::claim::run(); }\n",
        ),
    ]);
    assert_eq!(Graph::of(&fixed).cycle(), None);
}

#[test]
fn the_checker_counts_a_child_s_super_but_not_its_parent_s_re_export() {
    let files = tree(&[
        ("lib.rs", "pub mod report;\n"),
        (
            "report.rs",
            "mod pr;\npub use pr::render;\nfn f() { pr::render(); }\n",
        ),
        ("report/pr.rs", "use super::Shared;\npub fn render() {}\n"),
    ]);
    let graph = Graph::of(&files);
    assert!(graph.edges["report.rs"].is_empty());
    assert!(graph.edges["report/pr.rs"].contains("report.rs"));
    assert_eq!(graph.cycle(), None);
}

#[test]
fn the_checker_follows_a_re_export_to_the_file_that_defines_the_name() {
    let files = tree(&[
        ("lib.rs", "mod model;\nmod engine;\n"),
        (
            "engine/mod.rs",
            "mod journal;\npub use journal::{Record, Step as Stage};\n",
        ),
        (
            "engine/journal.rs",
            "use crate::model::Outcome;\npub struct Record;\n",
        ),
        (
            "model.rs",
            "pub enum Outcome {}\nfn f(r: &crate::engine::Record) {}\n",
        ),
    ]);
    let graph = Graph::of(&files);
    assert_eq!(
        graph.edges["model.rs"],
        BTreeSet::from(["engine/journal.rs".to_owned()])
    );
    let circle = graph
        .cycle()
        .expect("model -> engine/journal (through the re-export) -> model");
    assert!(
        circle.contains(&"model.rs".to_owned()) && circle.contains(&"engine/journal.rs".to_owned())
    );

    let aliased = tree(&[
        ("lib.rs", "mod model;\nmod engine;\n"),
        (
            "engine/mod.rs",
            "mod journal;\npub use journal::Step as Stage;\n",
        ),
        (
            "engine/journal.rs",
            "use crate::model::Outcome;\npub enum Step {}\n",
        ),
        (
            "model.rs",
            "use crate::engine::Stage;\npub enum Outcome {}\n",
        ),
    ]);
    assert!(Graph::of(&aliased).cycle().is_some(), "through an alias");

    let broken = tree(&[
        ("lib.rs", "mod model;\nmod engine;\n"),
        ("engine/mod.rs", "mod journal;\npub use journal::Record;\n"),
        (
            "engine/journal.rs",
            "use crate::model::Outcome;\npub struct Record;\n",
        ),
        ("model.rs", "pub enum Outcome {}\n"),
    ]);
    assert_eq!(Graph::of(&broken).cycle(), None);
}
