//! Property tests: hostile comment bodies never panic the marker parsers.

use klaud_lifecycle::report::{find_record, parse_baseline_block, parse_receipt, parse_report};
use proptest::prelude::*;

fn bodyish() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("<!-- klaud-report:1:d92e15065c55779d-0123456789abcdef:run-1-1".to_owned()),
        Just("<!-- klaud-outcome:1:d92e15065c55779d-0123456789abcdef".to_owned()),
        Just("<!-- klaud-cleanup:1:d92e15065c55779d-0123456789abcdef -->".to_owned()),
        Just("<!-- klaud-baseline-body -->".to_owned()),
        Just("<!-- /klaud-baseline-body -->".to_owned()),
        Just("<!-- klaud-baseline-record\n".to_owned()),
        Just(":part-".to_owned()),
        Just("\n-->".to_owned()),
        Just("\r\n".to_owned()),
        Just("{\"head\":null}".to_owned()),
        Just("é".to_owned()),
        any::<String>(),
    ];
    prop::collection::vec(piece, 0..12).prop_map(|v| v.concat())
}

proptest! {
    #[test]
    fn parsers_never_panic(body in bodyish()) {
        if let Ok(Some(record)) = find_record(&body) {
            let _ = parse_report(&record);
            let _ = parse_receipt(&record);
        }
        let _ = parse_baseline_block(&body);
    }

    #[test]
    fn arbitrary_text_never_panics(body in any::<String>()) {
        let _ = find_record(&body);
        let _ = parse_baseline_block(&body);
    }
}

proptest! {
    #[test]
    fn splicing_keeps_every_byte_outside_the_markers(before in "[^<]{0,40}", after in any::<String>()) {
        use klaud_lifecycle::report::{BASELINE_END, BASELINE_PLACEHOLDER, BASELINE_START, splice_baseline};
        prop_assume!(!after.contains(BASELINE_PLACEHOLDER) && !after.contains(BASELINE_START));
        let block = format!("{BASELINE_START}\nx\n{BASELINE_END}");
        let body = format!("{before}{BASELINE_PLACEHOLDER}{after}");
        let spliced = splice_baseline(&body, &block).expect("one placeholder");
        prop_assert_eq!(&spliced, &format!("{before}{block}{after}"));
        let block2 = format!("{BASELINE_START}\ny\n{BASELINE_END}");
        prop_assert_eq!(splice_baseline(&spliced, &block2).expect("one block"), format!("{before}{block2}{after}"));
    }
}
