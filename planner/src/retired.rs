//! Which families the benchmark repository itself has retired, so Klaud
//! never bumps them: keys archived under `configs/deprecated/`
//! and models or scenarios MODELS.md marks as deprecated or retired.
//!
//! The shapes are those of InferenceX's own MODELS.md:
//! - the model matrix: a row whose *Prefix* cell names model prefixes in
//!   backticks and whose *Active scenarios* cell reads `None (retired
//!   2026-07-18, [#2276](…))` (or `fully retired`);
//! - any row of the form `… Deprecated … since YYYY-MM-DD ([#N](…))`:
//!   with a backticked prefix it retires that model, with an `ISL / OSL`
//!   cell (the scenario table) it retires the fixed-sequence scenario.
//!
//! A family is retired by a scenario row only when *every* scenario it runs
//! is deprecated: a model that still runs another scenario stays active.
//! The same holds for the archive: InferenceX archives a retired
//! *scenario* of a key under the key's own name (`dsr1-fp4-b200-sglang`'s
//! 1k1k lives in `configs/deprecated/nvidia-1k1k-master.yaml` while its
//! 8k1k still runs), so an archived key retires the active family only when
//! the archived entry covers every scenario the active one runs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;

use crate::repo::{Family, Repository};

/// Why a family is retired, in plain words (names the source and the PR).
pub type RetiredReason = String;

static RETIRED_CELL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\bNone \((?:fully )?retired (\d{4}-\d{2}-\d{2}),\s*\[#(\d+)\]").expect("regex")
});
static DEPRECATED_SINCE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)deprecated\b[^|]*?\bsince (\d{4}-\d{2}-\d{2}) \(\[#(\d+)\]").expect("regex")
});
static PREFIX: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"`([A-Za-z0-9_.\-]+)`").expect("regex"));
static ISL_OSL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\s*(\d+)\s*/\s*(\d+)\s*$").expect("regex"));

/// What MODELS.md retires.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Retirements {
    /// Model prefix → reason.
    pub models: BTreeMap<String, RetiredReason>,
    /// `(isl, osl)` of a fixed-sequence scenario → reason.
    pub scenarios: BTreeMap<(u64, u64), RetiredReason>,
    /// Config key archived under `configs/deprecated/` → the archive file
    /// and the scenarios the archived entry ran.
    pub archived: Archived,
}

/// Config key archived under `configs/deprecated/` → the archive file and
/// the scenarios the archived entry ran.
pub type Archived = BTreeMap<String, (String, Scenarios)>;

/// The scenarios of a master entry: fixed-sequence `(isl, osl)` pairs, and
/// the other scenario kinds it runs (`agentic-coding`, …) by name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Scenarios {
    /// Fixed-sequence `(isl, osl)` pairs.
    pub fixed: BTreeSet<(u64, u64)>,
    /// Other scenario kinds, and fixed-sequence entries without both lengths.
    pub other: BTreeSet<String>,
}

impl Scenarios {
    fn of<'a>(scenarios: impl IntoIterator<Item = (&'a String, &'a serde_json::Value)>) -> Self {
        let mut out = Self::default();
        for (kind, value) in scenarios {
            if kind != "fixed-seq-len" {
                out.other.insert(kind.clone());
                continue;
            }
            for s in value.as_array().into_iter().flatten() {
                match (
                    s.get("isl").and_then(serde_json::Value::as_u64),
                    s.get("osl").and_then(serde_json::Value::as_u64),
                ) {
                    (Some(i), Some(o)) => {
                        out.fixed.insert((i, o));
                    }
                    _ => {
                        out.other.insert(kind.clone());
                    }
                }
            }
        }
        out
    }

    /// `self` with `other`'s scenarios too (a key archived in several
    /// entries retires what they run together).
    fn absorb(&mut self, other: Scenarios) {
        self.fixed.extend(other.fixed);
        self.other.extend(other.other);
    }

    /// Whether every scenario of `self` is also in `archived`.
    fn covered_by(&self, archived: &Scenarios) -> bool {
        self.fixed.is_subset(&archived.fixed) && self.other.is_subset(&archived.other)
    }
}

/// Reads MODELS.md's table rows (see the module documentation). Lines that
/// are not table rows, or rows of another shape, are ignored: MODELS.md is
/// prose for people and Klaud only trusts the two shapes it knows.
pub fn parse_models_md(text: &str) -> Retirements {
    let mut out = Retirements::default();
    for line in text.lines() {
        let line = line.trim();
        if !line.starts_with('|') {
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let (date, pr) = if let Some(c) = cells.iter().find_map(|c| RETIRED_CELL.captures(c)) {
            (c[1].to_owned(), c[2].to_owned())
        } else if let Some(c) = DEPRECATED_SINCE.captures(line) {
            (c[1].to_owned(), c[2].to_owned())
        } else {
            continue;
        };
        let reason = format!("retired in MODELS.md since {date} (#{pr})");
        if let Some(isl_osl) = cells.iter().find_map(|c| ISL_OSL.captures(c)) {
            if let (Ok(isl), Ok(osl)) = (isl_osl[1].parse(), isl_osl[2].parse()) {
                out.scenarios
                    .insert((isl, osl), format!("{reason}: scenario {isl}/{osl}"));
            }
            continue;
        }
        // The prefix column of the matrix, or the backticked prefix in the
        // model name of the deprecation tables (`Kimi-K2.5 (`kimik2.5`)`).
        let named = cells.iter().take(2).flat_map(|c| PREFIX.captures_iter(c));
        for p in named {
            out.models
                .entry(p[1].to_owned())
                .or_insert_with(|| format!("{reason}: model {}", &p[1]));
        }
    }
    out
}

/// The YAML files under `base`'s `configs/deprecated/`, by name
/// (`configs/deprecated/<file>`) and path, in name order.
fn archive_paths(base: &Path) -> Vec<(String, std::path::PathBuf)> {
    let mut paths: Vec<_> = std::fs::read_dir(base.join("configs/deprecated"))
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let name = format!(
                "configs/deprecated/{}",
                path.file_name().unwrap_or_default().to_string_lossy()
            );
            (name, path)
        })
        .collect()
}

/// One archive file's text; one past the YAML parser's size limit is
/// refused without being read whole.
fn read_archive_file(path: &Path) -> Result<String, String> {
    use std::io::Read as _;
    let limit = crate::limits::MAX_DOCUMENT_BYTES;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(limit as u64 + 1).read_to_string(&mut text))
        .map_err(|e| e.to_string())?;
    if text.len() > limit {
        return Err(format!(
            "larger than {} MiB; split it",
            limit / (1024 * 1024)
        ));
    }
    Ok(text)
}

/// The byte offset and key of each line of `text` that opens a key: the
/// key unquoted, at the start of a line (see [`ArchiveText`]).
fn key_lines(text: &str) -> impl Iterator<Item = (usize, String)> + '_ {
    let mut offset = 0;
    text.split_inclusive('\n').filter_map(move |line| {
        let at = offset;
        offset += line.len();
        if line.starts_with([' ', '\t', '#', '-', '%', '?', '{', '[']) {
            return None;
        }
        let (key, _) = line.split_once(':')?;
        let key = key.trim_end();
        let unquoted = key
            .strip_prefix('"')
            .and_then(|k| k.strip_suffix('"'))
            .or_else(|| key.strip_prefix('\'').and_then(|k| k.strip_suffix('\'')))
            .unwrap_or(key);
        Some((at, unquoted.to_owned()))
    })
}

/// The scenarios of one archived entry.
fn entry_scenarios(entry: &crate::yaml::Node) -> Scenarios {
    let json = entry.to_json();
    Scenarios::of(
        json.get("scenarios")
            .and_then(serde_json::Value::as_object)
            .into_iter()
            .flatten(),
    )
}

/// The files of `configs/deprecated/`, read once, and where each key's
/// entries lie in them, found by the lines that open a key without a
/// parse (a small fraction of its time). A plan asks it whether a few
/// families are retired, parsing their entries alone, before its first
/// requests; the whole parse ([`ArchiveText::parse`]) then reuses the
/// texts. Every top-level key InferenceX writes opens a line (`key:`,
/// plain or quoted); one written otherwise (in a flow mapping, as a
/// complex key) is found by the whole parse only.
#[derive(Debug, Default)]
pub struct ArchiveText {
    /// `(configs/deprecated/<file>, its text)`, in name order; a file past
    /// [`crate::limits::MAX_HELD_ARCHIVE_BYTES`] in all is left on disk.
    files: Vec<(String, ArchiveFile)>,
    /// Key → (index in `files`, byte range from its key line to the next),
    /// for the files held.
    entries: BTreeMap<String, Vec<(usize, std::ops::Range<usize>)>>,
}

#[derive(Debug)]
enum ArchiveFile {
    Held(String),
    OnDisk(std::path::PathBuf),
}

impl ArchiveText {
    /// Reads the archive under `base`; a file that cannot be read, or is
    /// past the YAML parser's limit (refused without being read whole), is
    /// left out with a warning.
    pub fn read(base: &Path) -> Self {
        let mut out = Self::default();
        let mut held: u64 = 0;
        for (name, path) in archive_paths(base) {
            // A file that would cross the bound is not read here at all: the
            // whole parse reads it (and says why when it cannot).
            let size = std::fs::metadata(&path).map_or(0, |m| m.len());
            if held + size > crate::limits::MAX_HELD_ARCHIVE_BYTES as u64 {
                out.files.push((name, ArchiveFile::OnDisk(path)));
                continue;
            }
            let text = match read_archive_file(&path) {
                Ok(text) => text,
                Err(e) => {
                    tracing::warn!(file = name, error = %e, "archived configs unreadable");
                    continue;
                }
            };
            held += text.len() as u64;
            let index = out.files.len();
            let starts: Vec<(usize, String)> = key_lines(&text).collect();
            for (i, (start, key)) in starts.iter().enumerate() {
                let end = starts.get(i + 1).map_or(text.len(), |(next, _)| *next);
                out.entries
                    .entry(key.clone())
                    .or_default()
                    .push((index, *start..end));
            }
            out.files.push((name, ArchiveFile::Held(text)));
        }
        out
    }

    /// Whether `key` opens a line of an archive file held.
    pub fn contains(&self, key: &str) -> bool {
        self.entries.contains_key(key)
    }

    /// The keys that open a line of the archive's files held.
    #[cfg(test)]
    fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Whether the archive retires `family` (see [`Retirements::reason`]),
    /// judged from its key's entries alone, each parsed by itself. `None`
    /// when one does not parse alone (an alias to an anchor elsewhere,
    /// say): only the whole parse can tell. The whole parse skips a file
    /// it cannot read whole, so the two can differ there; the plan decides
    /// with the whole parse and uses this only to start its reads early.
    pub fn retires(&self, family: &Family) -> Option<bool> {
        let Some(spans) = self.entries.get(&family.key) else {
            return Some(false);
        };
        let mut archived = Scenarios::default();
        for (file, range) in spans {
            let ArchiveFile::Held(text) = &self.files.get(*file)?.1 else {
                return None;
            };
            let text = text.get(range.clone())?;
            let doc = crate::yaml::parse(text).ok()??;
            for (k, entry) in doc.as_mapping()? {
                if k.as_scalar() == Some(family.key.as_str()) {
                    archived.absorb(entry_scenarios(entry));
                }
            }
        }
        Some(Scenarios::of(&family.entry.scenarios).covered_by(&archived))
    }

    /// Every archived key with its file and scenarios, each file parsed
    /// whole; a file that does not parse is skipped with a warning (it
    /// cannot make a family bumpable that another rule retires).
    pub fn parse(&self) -> Archived {
        let mut out = Archived::new();
        for (name, file) in &self.files {
            let read;
            let text = match file {
                ArchiveFile::Held(text) => text,
                ArchiveFile::OnDisk(path) => match read_archive_file(path) {
                    Ok(text) => {
                        read = text;
                        &read
                    }
                    Err(e) => {
                        tracing::warn!(file = name, error = %e, "archived configs unreadable");
                        continue;
                    }
                },
            };
            match crate::yaml::parse(text) {
                Ok(Some(doc)) => {
                    for (k, entry) in doc.as_mapping().unwrap_or_default() {
                        if let Some(key) = k.as_scalar() {
                            let (_, known) = out
                                .entry(key.to_owned())
                                .or_insert_with(|| (name.clone(), Scenarios::default()));
                            known.absorb(entry_scenarios(entry));
                        }
                    }
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(file = name, error = %e, "archived configs unreadable"),
            }
        }
        out
    }
}

impl Retirements {
    /// Reads `MODELS.md` and `configs/deprecated/*.yaml` of the checkout.
    /// Missing files retire nothing; an unreadable archive file is skipped
    /// with a warning (it cannot make a family bumpable that is retired by
    /// another rule).
    pub fn read(repository: &Repository) -> Self {
        let base = Self::base(repository);
        Self::models_md(&base).with_archive(Self::archive(&base))
    }

    /// The checkout folder both sources are read from.
    pub fn base(repository: &Repository) -> std::path::PathBuf {
        repository.root().join(repository.prefix())
    }

    /// What `MODELS.md` under `base` retires (a small file: cheap to read).
    pub fn models_md(base: &Path) -> Self {
        std::fs::read_to_string(base.join("MODELS.md"))
            .map(|t| parse_models_md(&t))
            .unwrap_or_default()
    }

    /// `self` with the keys archived under `configs/deprecated/` too.
    pub fn with_archive(mut self, archived: Archived) -> Self {
        self.archived = archived;
        self
    }

    /// The keys archived under `base`'s `configs/deprecated/`, with their
    /// file and scenarios. On InferenceX this is about half a megabyte of
    /// YAML, most of what a plan parses after the masters.
    pub fn archive(base: &Path) -> Archived {
        ArchiveText::read(base).parse()
    }

    /// Why `family` is retired, if it is.
    pub fn reason(&self, family: &Family) -> Option<RetiredReason> {
        let runs = Scenarios::of(&family.entry.scenarios);
        if let Some((file, archived)) = self.archived.get(&family.key)
            && runs.covered_by(archived)
        {
            return Some(format!(
                "key {} is archived in {file} with every scenario it runs",
                family.key
            ));
        }
        if let Some(r) = self.models.get(&family.entry.model_prefix) {
            return Some(r.clone());
        }
        if !runs.other.is_empty() || runs.fixed.is_empty() {
            return None;
        }
        let reasons: Vec<&str> = runs
            .fixed
            .iter()
            .map(|p| self.scenarios.get(p).map(String::as_str))
            .collect::<Option<_>>()?;
        Some(reasons.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/fixtures/inferencex/full"
    );

    #[test]
    fn key_lines_are_the_keys_that_open_a_line_plain_or_quoted() {
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("configs/deprecated");
        std::fs::create_dir_all(&archive).unwrap();
        std::fs::write(
            archive.join("a.yaml"),
            "# Archived.\n---\nplain-key:\n  image: x:1\n  scenarios:\n    fixed-seq-len:\n    - isl: 1\n      osl: 1\n\"double-quoted\": {}\n'single-quoted' :\n  model: m\n",
        )
        .unwrap();
        let text = ArchiveText::read(dir.path());
        let keys: BTreeSet<String> = text.keys().map(str::to_owned).collect();
        let parsed: BTreeSet<String> = text.parse().into_keys().collect();
        assert_eq!(parsed, keys);
        assert_eq!(
            keys.into_iter().collect::<Vec<_>>(),
            ["double-quoted", "plain-key", "single-quoted"]
        );
        // Sequence items, flow mappings and complex keys open no key line.
        let odd = "- not: a key\n{flow: mapping}\n? complex\n";
        assert_eq!(key_lines(odd).count(), 0);
        // A file past the parser's limit is refused unread, for both.
        let huge = " ".repeat(crate::limits::MAX_DOCUMENT_BYTES) + "\nhuge-key: 1\n";
        std::fs::write(archive.join("b.yaml"), huge).unwrap();
        assert!(!ArchiveText::read(dir.path()).contains("huge-key"));
        assert!(!Retirements::archive(dir.path()).contains_key("huge-key"));
    }

    #[test]
    fn an_archive_past_the_held_bound_is_parsed_from_disk_a_file_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("configs/deprecated");
        std::fs::create_dir_all(&archive).unwrap();
        // Files just under the parser's limit: comment lines, then a key.
        let filler = "#".repeat(1023) + "\n";
        let lines = crate::limits::MAX_DOCUMENT_BYTES / filler.len() - 1;
        let files = crate::limits::MAX_HELD_ARCHIVE_BYTES / (lines * filler.len()) + 1;
        for i in 0..files {
            let text = filler.repeat(lines) + &format!("key-{i}:\n  scenarios: {{}}\n");
            std::fs::write(archive.join(format!("f{i}.yaml")), text).unwrap();
        }
        let text = ArchiveText::read(dir.path());
        let held: Vec<&str> = text.keys().collect();
        let last = format!("key-{}", files - 1);
        assert_eq!(held.len(), files - 1, "{held:?}");
        assert!(!text.contains(&last));
        let parsed = text.parse();
        assert_eq!(parsed.len(), files);
        assert!(parsed.contains_key(&last));
    }

    #[test]
    fn the_real_archive_keys_are_found_and_judged_without_the_whole_parse() {
        let base = std::path::Path::new(FULL);
        let parsed = Retirements::archive(base);
        if parsed.is_empty() {
            assert!(
                std::env::var_os("CI").is_none(),
                "fixtures missing under CI"
            );
            eprintln!("SKIPPED: {FULL}/configs/deprecated is missing");
            return;
        }
        let text = ArchiveText::read(base);
        assert!(parsed.len() > 100, "{}", parsed.len());
        let missed: Vec<&String> = parsed.keys().filter(|k| !text.contains(k)).collect();
        assert!(missed.is_empty(), "{missed:?}");
        // Each live family's entries parsed alone say what the whole parse
        // says of it.
        let repository = Repository::open(FULL).expect("the real checkout");
        let whole = Retirements::default().with_archive(parsed);
        let mut archived = 0;
        for family in repository.families() {
            archived += usize::from(text.contains(&family.key));
            assert_eq!(
                text.retires(family),
                Some(whole.reason(family).is_some()),
                "{}",
                family.key
            );
        }
        assert!(archived > 50, "{archived}");
    }

    #[test]
    fn the_real_models_md_retires_models_and_scenarios() {
        let Ok(text) = std::fs::read_to_string(format!("{FULL}/MODELS.md")) else {
            assert!(
                std::env::var_os("CI").is_none(),
                "fixtures missing under CI"
            );
            eprintln!("SKIPPED: {FULL}/MODELS.md is missing");
            return;
        };
        let r = parse_models_md(&text);
        assert!(r.models["glm5"].contains("2026-07-18 (#2276)"), "{r:?}");
        assert!(r.models.contains_key("glm5.1"));
        assert!(r.models["kimik2.5"].contains("#2527"));
        assert!(r.models.contains_key("gptoss"));
        assert!(r.scenarios[&(1024, 1024)].contains("2026-07-17 (#2263)"));
        assert!(r.scenarios.contains_key(&(1024, 8192)));
        // Active models and the live scenario are not retired.
        for active in ["dsr1", "dsv4", "kimik3", "qwen3.5", "minimaxm3"] {
            assert!(!r.models.contains_key(active), "{active}: {r:?}");
        }
        assert!(!r.scenarios.contains_key(&(8192, 1024)));
    }

    #[test]
    fn a_key_archived_for_another_scenario_stays_active() {
        let Ok(repository) = Repository::open(FULL) else {
            assert!(
                std::env::var_os("CI").is_none(),
                "fixtures missing under CI"
            );
            eprintln!("SKIPPED: {FULL} is missing");
            return;
        };
        let r = Retirements::read(&repository);
        // Its 1k1k is archived under the same key; its 8k1k still runs.
        assert!(r.archived.contains_key("dsr1-fp4-b200-sglang"), "{r:?}");
        let family = repository
            .families()
            .iter()
            .find(|f| f.key == "dsr1-fp4-b200-sglang")
            .expect("active family");
        assert_eq!(r.reason(family), None);
        // The same entry archived with its own scenarios retires it.
        let mut whole = r.clone();
        let runs = Scenarios::of(&family.entry.scenarios);
        whole.archived.insert(
            family.key.clone(),
            ("configs/deprecated/x.yaml".into(), runs),
        );
        assert!(
            whole
                .reason(family)
                .is_some_and(|why| why.contains("x.yaml"))
        );
    }

    #[test]
    fn the_issue_shape_and_odd_rows_are_read_without_panics() {
        let text = "| Llama (`llama9`) | Deprecated since 2026-01-02 ([#7](https://x/7)) |\n\
                    | broken | Deprecated since yesterday |\n| | | |\n|\nnot a row `x`\n";
        let r = parse_models_md(text);
        assert_eq!(
            r.models.get("llama9").map(String::as_str),
            Some("retired in MODELS.md since 2026-01-02 (#7): model llama9")
        );
        assert_eq!(r.models.len(), 1);
        assert!(r.scenarios.is_empty());
    }
}
