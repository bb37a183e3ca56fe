//! `Engine`'s methods stay grouped: no file of this crate holds more than
//! [`MOST_PER_FILE`] of them. A file that gathers more is no longer one
//! concern (the steps, the race, the pass's listings each have their own),
//! and a reader has to hold too much of it at once. The test reads every
//! `.rs` file under `src/` (test modules left out, as they sit beside the
//! code they test), finds each `impl … Engine … {` block, counts the
//! functions declared at its top level and fails naming every file over
//! the bound.

use std::path::Path;

use regex::Regex;

const MOST_PER_FILE: usize = 25;

/// The functions declared directly inside each `impl … Engine` block of
/// `source` (nested blocks, closures and test modules are not counted).
fn engine_methods(source: &str) -> usize {
    let header = Regex::new(r"(?m)^impl(<[^>]*>)?\s+Engine\b[^{;]*\{").expect("regex");
    let item = Regex::new(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?fn\s").expect("regex");
    // Test modules sit at the end of a file.
    let source = match source.find("#[cfg(test)]\nmod ") {
        Some(at) => &source[..at],
        None => source,
    };
    let mut count = 0;
    for found in header.find_iter(source) {
        let mut depth = 1usize;
        for line in source[found.end()..].lines() {
            if depth == 1 && item.is_match(line) {
                count += 1;
            }
            for c in line.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth = depth.saturating_sub(1),
                    _ => {}
                }
            }
            if depth == 0 {
                break;
            }
        }
    }
    count
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(path);
        }
    }
}

#[test]
fn no_file_holds_more_than_25_engine_methods() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut total = 0;
    let mut over = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read");
        let n = engine_methods(&text);
        total += n;
        if n > MOST_PER_FILE {
            over.push(format!("{} holds {n}", file.display()));
        }
    }
    // The engine is found at all: a regex that matched nothing would pass.
    assert!(total > 100, "only {total} Engine methods found");
    assert!(
        over.is_empty(),
        "more than {MOST_PER_FILE} Engine methods in one file (group them by concern): {over:?}"
    );
}

#[test]
fn methods_are_counted_at_the_impl_blocks_top_level_only() {
    let source = "impl<'a> Engine<'a> {\n    pub fn new() -> Self {\n        fn inner() {}\n        todo!()\n    }\n    pub(super) async fn step(&self) {}\n    fn private(&self) {}\n}\nimpl std::fmt::Debug for Engine<'_> {\n    fn fmt(&self) {}\n}\nimpl Engine<'_> {\n    const fn limit() -> usize { 1 }\n}\n#[cfg(test)]\nmod tests {\n    impl Engine<'_> {\n        fn helper() {}\n    }\n}\n";
    assert_eq!(engine_methods(source), 4);
}
