//! Property: whatever surrounds it (comments, quotes, non-ASCII text, flow
//! maps), a bump replaces exactly the image token and nothing else.

use klaud_planner::image::ImageRef;
use klaud_planner::repo::Repository;
use proptest::prelude::*;

fn quoted(value: &str, style: u8) -> String {
    match style {
        0 => value.to_owned(),
        1 => format!("'{value}'"),
        _ => format!("\"{value}\""),
    }
}

prop_compose! {
    fn filler()(text in "[a-zA-Z0-9 éü中#:,{}-]{0,24}", style in 1u8..3, comment in proptest::option::of("[ a-z#é]{0,12}")) -> String {
        let text = text.replace(['\'', '"'], "");
        let mut line = format!("note: {}", quoted(&text, style));
        if let Some(comment) = comment {
            line.push_str(&format!("  # {comment}"));
        }
        line
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn a_bump_replaces_only_the_image_token(
        style in 0u8..3,
        old_minor in 0u32..40,
        new_minor in 40u32..80,
        comment in proptest::option::of("[ a-z#é\"']{0,16}"),
        before in filler(),
        after in filler(),
        header in "(# [a-z é]{0,20}\n){0,3}",
    ) {
        let old = format!("lmsysorg/sglang:v0.5.{old_minor}-cu130");
        let new = format!("lmsysorg/sglang:v0.5.{new_minor}-cu130");
        let image_line = match &comment {
            Some(c) => format!("  image: {}  # {c}", quoted(&old, style)),
            None => format!("  image: {}", quoted(&old, style)),
        };
        let text = format!(
            "{header}demo-a:\n  before-{before}\n{image_line}\n  after-{after}\n  model: m\n  model-prefix: d\n  runner: b200\n  precision: fp4\n  framework: sglang\n  multinode: false\n  extra: {{ image: \"{old}\", n: 1 }}\n"
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("configs")).unwrap();
        std::fs::write(dir.path().join("configs/x-master.yaml"), &text).unwrap();
        let repository = Repository::open(dir.path()).unwrap();
        let plan = repository
            .plan_bump("demo-a", &ImageRef::parse(&old).unwrap(), &ImageRef::parse(&new).unwrap())
            .unwrap();
        let expected_line = image_line.replacen(&quoted(&old, style), &quoted(&new, style), 1);
        let expected = text.replacen(&format!("\n{image_line}\n"), &format!("\n{expected_line}\n"), 1);
        prop_assert_eq!(&plan.edits[0].after, &expected);
    }
}
