//! Property tests: hostile comment bodies never panic the command parser.

use klaud_lifecycle::commands::{Command, parse_commands};
use proptest::prelude::*;

fn markdownish() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("/klaud ".to_owned()),
        Just("/klaud retry".to_owned()),
        Just("```".to_owned()),
        Just("~~~".to_owned()),
        Just("> ".to_owned()),
        Just("<!--".to_owned()),
        Just("-->".to_owned()),
        Just("    ".to_owned()),
        Just("\t".to_owned()),
        Just("\n".to_owned()),
        Just("\r\n".to_owned()),
        Just("é".to_owned()),
        Just("`".to_owned()),
        any::<String>(),
    ];
    prop::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(body in any::<String>()) {
        let _ = parse_commands(&body);
    }

    #[test]
    fn markdown_like_text_never_panics_and_lines_are_in_range(body in markdownish()) {
        let lines = body.split('\n').count();
        for command in parse_commands(&body) {
            prop_assert!(command.line >= 1 && command.line <= lines);
            prop_assert!(command.argument.chars().count() <= 500);
        }
    }

    #[test]
    fn a_fenced_command_is_never_seen(verb in "(retry|release|stop|status)", fence in "(```|~~~)") {
        let body = format!("{fence}\n/klaud {verb}\n{fence}\n");
        prop_assert!(parse_commands(&body).is_empty());
        let body = format!("intro\n\n/klaud {verb}\n");
        let found = parse_commands(&body);
        prop_assert_eq!(found.len(), 1);
        prop_assert!(!matches!(found[0].command, Command::Unknown(_)));
    }
}
