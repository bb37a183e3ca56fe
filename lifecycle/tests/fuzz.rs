//! Fuzzing on stable: maintainer comments and hidden records are outside
//! input. Arbitrary text and mutations of real Klaud PR text (seeded from
//! `klaud-pr-text.samples.md`) must never panic the parsers, and their
//! output stays within the input (commands per line, argument length,
//! records borrowed from the body).
//!
//! The default case count keeps CI fast. A longer run:
//!
//! ```text
//! PROPTEST_CASES=100000 cargo test -p klaud-lifecycle --test fuzz fuzz_
//! ```

use std::path::Path;

use klaud_lifecycle::commands::{
    MAX_ARGUMENT_CHARS, find_retry_release, parse_commands, parse_try,
};
use klaud_lifecycle::report::find_record;
use klaud_lifecycle::report::markers::parse_json;
use proptest::prelude::*;
use proptest::test_runner::Config;

fn config(default_cases: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases);
    Config {
        cases,
        ..Config::default()
    }
}

/// Lines of real Klaud Cold PR text.
fn real_lines() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/inferencex/klaud-pr-text.samples.md");
    std::fs::read_to_string(path)
        .expect("the PR text samples")
        .lines()
        .map(str::to_owned)
        .collect()
}

fn comment_body() -> impl Strategy<Value = String> {
    let lines = real_lines();
    let piece = prop_oneof![
        4 => proptest::sample::select(lines),
        1 => Just("/klaud retry".to_owned()),
        1 => Just("/klaud try vllm/vllm-openai:v0.26.0".to_owned()),
        1 => Just("/klaud release".to_owned()),
        1 => Just("```".to_owned()),
        1 => Just("<!-- klaud-report:1:d92e15065c55779d-0123456789abcdef:run-1-1".to_owned()),
        1 => Just("<!-- klaud-outcome:1:d92e15065c55779d-0123456789abcdef".to_owned()),
        1 => Just("-->".to_owned()),
        1 => "[\\[\\]{}\"\\\\:,]{0,20}",
        1 => "\\PC{0,30}",
    ];
    proptest::collection::vec(piece, 0..30).prop_map(|lines| lines.join("\n"))
}

fn check_commands(body: &str) -> Result<(), TestCaseError> {
    let lines = body.split('\n').count();
    for command in parse_commands(body) {
        prop_assert!(command.line >= 1 && command.line <= lines);
        prop_assert!(command.argument.chars().count() <= MAX_ARGUMENT_CHARS);
        let _ = parse_try(&command.argument);
    }
    let _ = find_retry_release(body);
    Ok(())
}

fn check_record(body: &str) -> Result<(), TestCaseError> {
    if let Ok(Some(record)) = find_record(body) {
        prop_assert!(record.json.len() + record.rest.len() <= body.len());
        let _ = parse_json::<serde_json::Value>(&record);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn fuzz_commands_in_mutated_real_comments_stay_in_bounds(body in comment_body()) {
        check_commands(&body)?;
    }

    #[test]
    fn fuzz_records_in_mutated_real_comments_stay_in_bounds(body in comment_body()) {
        check_record(&body)?;
    }

    #[test]
    fn fuzz_arbitrary_text_never_panics_the_comment_parsers(body in "\\PC{0,400}") {
        check_commands(&body)?;
        check_record(&body)?;
    }

    #[test]
    fn fuzz_deeply_nested_record_json_is_refused_not_overflowing(depth in 1usize..20_000) {
        // serde_json's recursion limit (128) bounds the stack.
        let json = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let body = format!("<!-- klaud-outcome:1:d92e15065c55779d-0123456789abcdef\n{json}\n-->\n");
        let record = find_record(&body)
            .map_err(|e| TestCaseError::fail(e.to_string()))?
            .ok_or_else(|| TestCaseError::fail("the marker is not found"))?;
        let parsed = parse_json::<serde_json::Value>(&record);
        prop_assert_eq!(parsed.is_ok(), depth < 128, "depth {}", depth);
    }
}
