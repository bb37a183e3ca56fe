//! Fuzzing on stable: property tests that feed the readers of outside input
//! arbitrary bytes and structure-aware mutations of the real InferenceX
//! files, and assert that nothing panics and every output stays bounded.
//!
//! Targets (each a `fuzz_*` test):
//! - the YAML reader ([`yaml::parse`], [`yaml::parse_lenient`]): node count
//!   within [`limits::node_budget`], JSON conversion, no panic;
//! - the splice ([`yaml::scalar_token`], [`yaml::encode_scalar`]): tokens are
//!   in bounds, and an encoded scalar reads back as the same value;
//! - a whole checkout ([`Repository::open`]) of a mutated master: never
//!   fails as a whole for one bad entry, every unreadable family is named;
//! - image references ([`ImageRef::parse`]): display parses back to the same
//!   image;
//! - tag ordering ([`tracks`]): an inferred track matches its own tag, and
//!   version order is a total order.
//!
//! The default case count keeps CI fast (a few seconds per target). A longer
//! run:
//!
//! ```text
//! PROPTEST_CASES=100000 cargo test -p klaud-planner --test fuzz fuzz_
//! ```
//!
//! A failure is shrunk and saved under `planner/tests/fuzz.proptest-regressions`
//! (commit it: it is replayed first on every run).

use std::path::Path;

use klaud_planner::image::ImageRef;
use klaud_planner::limits;
use klaud_planner::repo::Repository;
use klaud_planner::tracks::{self, Version};
use klaud_planner::yaml::{self, Node, NodeKind, Style};
use proptest::prelude::*;
use proptest::test_runner::Config;

/// Cases per target: `PROPTEST_CASES`, else a CI-sized default.
fn config(default_cases: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases);
    Config {
        cases,
        // Shrinking a hostile YAML document can take long; a failure is
        // already informative.
        max_shrink_iters: 2048,
        ..Config::default()
    }
}

fn fixtures() -> &'static Path {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/fixtures/inferencex"
    ))
}

/// Lines of the real NVIDIA master excerpt (the seed of the mutations).
fn seed_lines() -> Vec<String> {
    std::fs::read_to_string(fixtures().join("nvidia-master.excerpt.yaml"))
        .expect("the fixture excerpt")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Every `image:` value of the real masters.
fn real_images() -> Vec<String> {
    let mut images = Vec::new();
    for master in ["nvidia-master.yaml", "amd-master.yaml"] {
        let text = std::fs::read_to_string(fixtures().join("full/configs").join(master))
            .expect("the full fixture checkout");
        for line in text.lines() {
            if let Some(value) = line.trim().strip_prefix("image:") {
                images.push(value.trim().trim_matches(['"', '\'']).to_owned());
            }
        }
    }
    images.sort();
    images.dedup();
    assert!(images.len() > 10, "real images found: {images:?}");
    images
}

/// Nodes a walk of the tree visits (an alias counted as all it stands for).
fn walked(node: &Node) -> usize {
    1 + match &node.kind {
        NodeKind::Scalar { .. } => 0,
        NodeKind::Sequence(items) => items.iter().map(walked).sum(),
        NodeKind::Mapping(entries) => entries.iter().map(|(k, v)| walked(k) + walked(v)).sum(),
    }
}

/// Parses both ways and checks the bounds; returns the tree when it parsed.
fn parse_bounded(text: &str) -> Result<Option<Node>, TestCaseError> {
    let lenient = yaml::parse_lenient(text);
    let strict = yaml::parse(text);
    if let Ok((Some(doc), _)) = &lenient {
        let nodes = walked(doc);
        prop_assert!(
            nodes <= limits::node_budget(text.len()),
            "{nodes} nodes from {} bytes",
            text.len()
        );
        // The JSON view walks the same tree: bounded by the same budget.
        let _ = doc.to_json();
    }
    if let Err(e) = &strict {
        prop_assert!(e.line >= 1, "{e}");
        prop_assert!(!e.message.is_empty());
    }
    if strict.is_ok() {
        prop_assert!(lenient.is_ok(), "strict parsed what lenient refused");
    }
    // Entry by entry: the readable entries together stay within the one
    // budget, and a document the strict reader takes loses no entry.
    let confined = yaml::parse_confined(text);
    if let Ok(confined) = &confined {
        if let Some(doc) = &confined.root {
            let nodes = walked(doc);
            prop_assert!(nodes <= limits::node_budget(text.len()), "{nodes} nodes");
        }
        for broken in &confined.broken {
            prop_assert!(broken.line >= 1 && broken.error.line >= 1, "{broken:?}");
        }
    }
    if let Ok(Some(doc)) = &strict {
        let Ok(confined) = &confined else {
            return Err(TestCaseError::fail("confined refused what strict read"));
        };
        prop_assert!(confined.broken.is_empty(), "{:?}", confined.broken);
        prop_assert_eq!(
            confined.root.as_ref().map(Node::to_json),
            Some(doc.to_json())
        );
    }
    Ok(strict.ok().flatten())
}

/// One structure-aware edit of a list of YAML lines.
#[derive(Debug, Clone)]
enum Mutation {
    Swap(usize, usize),
    Duplicate(usize),
    Delete(usize),
    /// Puts an anchor on the value of a `key:` line.
    Anchor(usize, u8),
    /// Replaces a value with an alias.
    Alias(usize, u8),
    /// Adds an alias-bomb level: a list of `n` aliases of an earlier anchor.
    Bomb(u8, u8),
    Insert(usize, String),
    Reindent(usize, u8),
    Truncate(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::Swap(a, b)),
        any::<usize>().prop_map(Mutation::Duplicate),
        any::<usize>().prop_map(Mutation::Delete),
        (any::<usize>(), 0u8..4).prop_map(|(l, a)| Mutation::Anchor(l, a)),
        (any::<usize>(), 0u8..4).prop_map(|(l, a)| Mutation::Alias(l, a)),
        (0u8..4, 1u8..12).prop_map(|(a, n)| Mutation::Bomb(a, n)),
        (
            any::<usize>(),
            prop_oneof![
                "[ -~]{0,40}",
                "[\\[\\]{}:,&*!|>'\"#%@`-]{1,12}",
                "\\PC{0,12}",
                Just("image: TBD".to_owned()),
                Just("  image: [unclosed".to_owned()),
                Just("? complex\n: key".to_owned()),
                Just("--- \n...".to_owned()),
            ]
        )
            .prop_map(|(l, t)| Mutation::Insert(l, t)),
        (any::<usize>(), 0u8..8).prop_map(|(l, n)| Mutation::Reindent(l, n)),
        (any::<usize>(), any::<usize>()).prop_map(|(l, c)| Mutation::Truncate(l, c)),
    ]
}

fn apply(lines: &mut Vec<String>, mutation: &Mutation) {
    if lines.is_empty() {
        lines.push(String::new());
    }
    let at = |i: usize, len: usize| i % len;
    let len = lines.len();
    match mutation {
        Mutation::Swap(a, b) => lines.swap(at(*a, len), at(*b, len)),
        Mutation::Duplicate(i) => {
            let line = lines[at(*i, len)].clone();
            lines.insert(at(*i, len), line);
        }
        Mutation::Delete(i) => {
            lines.remove(at(*i, len));
        }
        Mutation::Anchor(i, a) => {
            let line = &mut lines[at(*i, len)];
            if let Some(colon) = line.find(": ") {
                line.insert_str(colon + 2, &format!("&a{a} "));
            } else if line.ends_with(':') {
                line.push_str(&format!(" &a{a}"));
            }
        }
        Mutation::Alias(i, a) => {
            let line = &mut lines[at(*i, len)];
            if let Some(colon) = line.find(": ") {
                line.truncate(colon + 2);
                line.push_str(&format!("*a{a}"));
            }
        }
        Mutation::Bomb(a, n) => {
            let aliases = vec![format!("*a{a}"); usize::from(*n)].join(", ");
            lines.push(format!("bomb{a}{n}: &a{} [{aliases}]", (a + 1) % 4));
        }
        Mutation::Insert(i, text) => lines.insert(at(*i, len), text.clone()),
        Mutation::Reindent(i, n) => {
            let line = &mut lines[at(*i, len)];
            let trimmed = line.trim_start().to_owned();
            *line = format!("{}{trimmed}", " ".repeat(usize::from(*n)));
        }
        Mutation::Truncate(i, c) => {
            let line = &mut lines[at(*i, len)];
            let cut = line
                .char_indices()
                .map(|(i, _)| i)
                .nth(c % (line.chars().count() + 1))
                .unwrap_or(line.len());
            line.truncate(cut);
        }
    }
}

prop_compose! {
    /// The real excerpt, with a few structure-aware edits.
    fn mutated_master()(edits in proptest::collection::vec(mutation(), 1..12)) -> String {
        let mut lines = seed_lines();
        for edit in &edits {
            apply(&mut lines, edit);
        }
        let mut text = lines.join("\n");
        text.push('\n');
        text
    }
}

fn check_tokens(text: &str, node: &Node, budget: &mut usize) -> Result<(), TestCaseError> {
    if *budget == 0 {
        return Ok(());
    }
    *budget -= 1;
    match &node.kind {
        NodeKind::Scalar { .. } => {
            if let Ok(range) = yaml::scalar_token(text, node) {
                prop_assert!(range.start <= range.end && range.end <= text.len());
                prop_assert!(
                    text.is_char_boundary(range.start) && text.is_char_boundary(range.end)
                );
            }
        }
        NodeKind::Sequence(items) => {
            for item in items.iter() {
                check_tokens(text, item, budget)?;
            }
        }
        NodeKind::Mapping(entries) => {
            for (k, v) in entries.iter() {
                check_tokens(text, k, budget)?;
                check_tokens(text, v, budget)?;
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn fuzz_yaml_reader_bounds_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let text = String::from_utf8_lossy(&bytes);
        parse_bounded(&text)?;
    }

    #[test]
    fn fuzz_yaml_reader_bounds_yaml_shaped_text(text in "([a-z]{1,3}|[ \\n:,&*\\[\\]{}\\-?|>#'\"!]){0,400}") {
        parse_bounded(&text)?;
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn fuzz_yaml_reader_and_splice_on_mutated_masters(text in mutated_master()) {
        if let Some(doc) = parse_bounded(&text)? {
            let mut budget = 20_000;
            check_tokens(&text, &doc, &mut budget)?;
        }
    }

    #[test]
    fn fuzz_encoded_scalars_read_back_as_written(value in "\\PC{0,40}", style in 0u8..3) {
        let style = [Style::Plain, Style::SingleQuoted, Style::DoubleQuoted][usize::from(style)];
        if let Ok(token) = yaml::encode_scalar(&value, style) {
            let text = format!("k: {token}\n");
            let doc = yaml::parse(&text).map_err(|e| TestCaseError::fail(format!("{token}: {e}")))?;
            let read = doc.as_ref().and_then(|d| d.get("k")).and_then(Node::as_scalar);
            prop_assert_eq!(read, Some(value.as_str()), "token {}", token);
            let node = doc.as_ref().and_then(|d| d.get("k")).expect("k");
            let range = yaml::scalar_token(&text, node).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&text[range], token.as_str());
        }
    }
}

proptest! {
    #![proptest_config(config(48))]

    #[test]
    fn fuzz_a_mutated_master_never_stops_the_other_families(text in mutated_master()) {
        let dir = tempfile::tempdir().expect("tempdir");
        let configs = dir.path().join("configs");
        std::fs::create_dir_all(&configs).expect("configs");
        std::fs::write(configs.join("amd-master.yaml"), &text).expect("write");
        let good = "good-family:\n  image: lmsysorg/sglang:v0.5.16-cu130\n  model: m\n  model-prefix: p\n  runner: b200\n  precision: fp4\n  framework: sglang\n  multinode: false\n";
        std::fs::write(configs.join("zz-master.yaml"), good).expect("write");
        let repository = Repository::open(dir.path()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(repository.family("good-family").is_ok());
        for broken in repository.unreadable() {
            prop_assert!(broken.line >= 1);
            prop_assert!(broken.to_string().contains("configs/amd-master.yaml"), "{}", broken);
        }
    }
}

fn mutated_image(images: Vec<String>) -> impl Strategy<Value = String> {
    (
        proptest::sample::select(images),
        proptest::collection::vec(
            (any::<usize>(), 0u8..3, "[a-zA-Z0-9/:@._\\-+ é]{0,3}"),
            0..4,
        ),
    )
        .prop_map(|(image, edits)| {
            let mut chars: Vec<char> = image.chars().collect();
            for (at, kind, text) in edits {
                let at = at % (chars.len() + 1);
                match kind {
                    0 => {
                        chars.splice(at..at, text.chars());
                    }
                    1 if at < chars.len() => {
                        chars.remove(at);
                    }
                    _ => {
                        let copy: Vec<char> = chars[at..].to_vec();
                        chars.extend(copy);
                    }
                }
            }
            chars.into_iter().collect()
        })
}

fn check_image(text: &str) -> Result<(), TestCaseError> {
    if let Ok(image) = ImageRef::parse(text) {
        let shown = image.to_string();
        prop_assert!(shown.len() <= 2 * text.len() + 64);
        let again = ImageRef::parse(&shown).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(again.normalized(), image.normalized());
        prop_assert!(image.normalized().len() <= 2 * text.len() + 64);
        if let Some(tag) = image.tag() {
            check_tag(tag)?;
        }
    }
    Ok(())
}

fn check_tag(tag: &str) -> Result<(), TestCaseError> {
    if let Some(track) = tracks::infer_track(tag) {
        prop_assert!(
            track.matches(tag).is_some(),
            "the track {} inferred from {:?} does not match it",
            track,
            tag
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(1024))]

    #[test]
    fn fuzz_image_references_from_arbitrary_text(text in "\\PC{0,80}") {
        check_image(&text)?;
    }

    #[test]
    fn fuzz_image_references_mutated_from_real_ones(text in mutated_image(real_images())) {
        check_image(&text)?;
    }

    #[test]
    fn fuzz_tag_tracks_match_the_tags_they_are_inferred_from(
        tag in "[a-z0-9._-]{0,6}(v?[0-9]{1,3}(\\.[0-9]{1,3}){1,3}(rc[0-9])?|nightly|20[0-9]{6}|[0-9a-f]{7,12}|cu1[23][0-9]|[-._]){1,5}"
    ) {
        check_tag(&tag)?;
    }

    #[test]
    fn fuzz_version_order_is_total(a in "v?[0-9]{1,2}(\\.[0-9]{1,2}){1,3}((rc|a|b)[0-9])?(\\.post[0-9])?",
                                   b in "v?[0-9]{1,2}(\\.[0-9]{1,2}){1,3}((rc|a|b)[0-9])?(\\.post[0-9])?",
                                   c in "v?[0-9]{1,2}(\\.[0-9]{1,2}){1,3}((rc|a|b)[0-9])?(\\.post[0-9])?") {
        let (Some(a), Some(b), Some(c)) = (Version::parse(&a), Version::parse(&b), Version::parse(&c)) else {
            return Ok(());
        };
        prop_assert_eq!(a.cmp(&b), b.cmp(&a).reverse());
        if a <= b && b <= c {
            prop_assert!(a <= c);
        }
        prop_assert_eq!(a.cmp(&a), std::cmp::Ordering::Equal);
    }

    #[test]
    fn fuzz_version_parse_never_panics(text in "\\PC{0,40}") {
        let _ = Version::parse(&text);
        let _ = tracks::infer_track(&text);
    }
}
