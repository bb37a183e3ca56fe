use super::*;

const RECIPE: &str = "\
name: demo # the recipe
model:
  container: \"vllm/vllm-openai:v0.25.0\"
backend:
  prefill_environment:
    TLLM_LOG_LEVEL: INFO
    NCCL_GRAPH_MIXING_SUPPORT: '0'

  decode_environment:
    TLLM_LOG_LEVEL: INFO
frontend:
  args:
    router-mode: kv   # routing
    no-kv-events: true
  extra:
    - --enforce-eager
    - --max-num-seqs
    - \"256\"
    - --port=8000
flowy: {a: 1, b: 2}
";

fn edit(text: &str) -> Edit {
    parse_edits(text).unwrap().remove(0)
}

fn apply(text: &str) -> Result<String, Failure> {
    apply_edit(RECIPE, &edit(text))
}

/// Lines of `after` that are not in `before` and vice versa.
fn diff(after: &str) -> (Vec<String>, Vec<String>) {
    let old: Vec<&str> = RECIPE.lines().collect();
    let new: Vec<&str> = after.lines().collect();
    (
        new.iter()
            .filter(|l| !old.contains(l))
            .map(|s| s.to_string())
            .collect(),
        old.iter()
            .filter(|l| !new.contains(l))
            .map(|s| s.to_string())
            .collect(),
    )
}

#[test]
fn set_existing_field_keeps_its_quote_style_and_every_other_byte() {
    let after = apply("set backend.prefill_environment.NCCL_GRAPH_MIXING_SUPPORT=1").unwrap();
    assert_eq!(after, RECIPE.replace("SUPPORT: '0'", "SUPPORT: '1'"));
}

#[test]
fn set_missing_env_var_adds_one_line_beside_its_siblings() {
    let after = apply("set backend.prefill_environment.NEW_VAR=\"2\"").unwrap();
    assert_eq!(diff(&after), (vec!["    NEW_VAR: \"2\"".into()], vec![]));
    // Placed after the last entry, before the blank line that follows.
    assert!(after.contains("SUPPORT: '0'\n    NEW_VAR: \"2\"\n\n  decode_environment"));
}

#[test]
fn unset_removes_exactly_the_field_lines() {
    let after = apply("unset backend.prefill_environment.TLLM_LOG_LEVEL").unwrap();
    assert_eq!(after, RECIPE.replacen("    TLLM_LOG_LEVEL: INFO\n", "", 1));
    let nested = apply("unset frontend.extra").unwrap();
    assert!(!nested.contains("--enforce-eager"));
    assert!(nested.contains("flowy: {a: 1, b: 2}\n"));
}

#[test]
fn flags_in_a_mapping_argument_list() {
    let after = apply("add-flag frontend.args router-session-affinity-ttl-secs=\"3600\"").unwrap();
    assert!(
        after.contains("    no-kv-events: true\n    router-session-affinity-ttl-secs: \"3600\"\n")
    );
    let after = apply("remove-flag frontend.args router-mode").unwrap();
    assert_eq!(
        after,
        RECIPE.replace("    router-mode: kv   # routing\n", "")
    );
    let bare = apply("add-flag frontend.args enable-x").unwrap();
    assert!(bare.contains("    enable-x: true\n"));
}

#[test]
fn flags_in_a_sequence_argument_list() {
    let after = apply("add-flag frontend.extra --kv-offload").unwrap();
    assert!(after.contains("    - --port=8000\n    - --kv-offload\nflowy"));
    let after = apply("remove-flag frontend.extra --max-num-seqs").unwrap();
    assert_eq!(
        after,
        RECIPE.replace("    - --max-num-seqs\n    - \"256\"\n", "")
    );
    let after = apply("remove-flag frontend.extra --port").unwrap();
    assert_eq!(after, RECIPE.replace("    - --port=8000\n", ""));
}

#[test]
fn edits_that_do_not_apply_say_where_and_why() {
    let e = apply("set backend.nothing.X=1").unwrap_err();
    assert!(e.1.contains("no field backend.nothing"), "{e:?}");
    // The line where the `backend` mapping starts.
    assert_eq!(e.0, 5);
    let e = apply("unset model.missing").unwrap_err();
    assert!(e.1.contains("has no field missing"), "{e:?}");
    let e = apply("add-flag frontend.args router-mode=x").unwrap_err();
    assert!(e.1.contains("already has router-mode"), "{e:?}");
    let e = apply("add-flag name x").unwrap_err();
    assert!(e.1.contains("scalar"), "{e:?}");
    let e = apply("set flowy.c=3").unwrap_err();
    assert!(e.1.contains("flow style"), "{e:?}");
    let e = apply("set backend.prefill_environment=1").unwrap_err();
    assert!(e.1.contains("not a single value"), "{e:?}");
}

#[test]
fn the_grammar_round_trips_and_rejects_malformed_edits() {
    let text = "set a.b=\"x;y\"; unset f.yaml:c.d\nadd-flag e.args --z=1;remove-flag e.args --w; image vllm/vllm-openai:v0.26.0";
    let edits = parse_edits(text).unwrap();
    assert_eq!(edits.len(), 5);
    let again = parse_edits(
        &edits
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; "),
    )
    .unwrap();
    assert_eq!(edits, again);
    assert_eq!(
        edits[1],
        Edit::Unset {
            target: EditTarget {
                file: Some("f.yaml".into()),
                path: vec!["c".into(), "d".into()]
            }
        }
    );
    for bad in [
        "frobnicate a.b",
        "set a.b",
        "set a..b=1",
        "set a.b=\"open",
        "set a.b=",
        "unset :a",
        "add-flag a.b",
        "image not a ref !!",
        "set a b.c=1",
    ] {
        let e = parse_edits(bad).unwrap_err();
        assert_eq!(e.index, 1, "{bad}");
        assert!(!e.reason.is_empty());
    }
    let e = parse_edits("unset a; bogus").unwrap_err();
    assert_eq!((e.index, e.edit.as_str()), (2, "bogus"));
}

#[test]
fn derived_variants_inherit_their_bases_edits() {
    let v = |name: &str, from: Option<&str>, edits: &str| Variant {
        name: name.into(),
        from: from.map(Into::into),
        edits: parse_edits(edits).unwrap(),
    };
    let resolved = resolve(&[
        v("E", None, "set a.b=1"),
        v("F", Some("E"), "unset a.c"),
        v("G", Some("F"), "image vllm/vllm-openai:v1"),
    ])
    .unwrap();
    assert_eq!(resolved[1].edits, vec!["set a.b=1", "unset a.c"]);
    assert_eq!(resolved[1].own, vec!["unset a.c"]);
    assert_eq!(resolved[2].image().as_deref(), Some("vllm/vllm-openai:v1"));
    assert!(matches!(
        resolve(&[v("A", Some("B"), ""), v("B", Some("A"), "")]),
        Err(VariantError::Cycle(_))
    ));
    assert!(matches!(
        resolve(&[v("A", Some("Z"), "")]),
        Err(VariantError::UnknownBase { .. })
    ));
    assert!(matches!(
        resolve(&[v("A", None, ""), v("A", None, "")]),
        Err(VariantError::Duplicate(_))
    ));
    assert!(matches!(
        resolve(&[v("a b", None, "")]),
        Err(VariantError::BadName(_))
    ));
}

#[test]
fn malformed_documents_end_in_errors_not_panics() {
    for text in [
        "",
        "- a\n- b\n",
        "a: [1, 2\n",
        "a: |\n  x\n",
        "k: v\nk: w\n",
    ] {
        for e in [
            "set a.b=1",
            "unset a",
            "add-flag a x",
            "remove-flag a x",
            "set k=1",
        ] {
            let _ = apply_edit(text, &edit(e));
        }
    }
    assert!(apply_edit("a: |\n  x\n", &edit("set a=1")).is_err());
}

#[test]
fn variant_edits_choose_the_familys_recipes_and_name_ambiguity() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/demo");
    let repo = Repository::open(root).unwrap();
    let family = "configs/nvidia-master.yaml:demo-fp4-gb200-dynamo-vllm-disagg";
    let all = parse_edits("set resources.gpus_per_node=8").unwrap();
    let changed = repo
        .apply_variant_edits(family, &BTreeMap::new(), &all)
        .unwrap();
    assert_eq!(changed.len(), 2, "both recipes of the family");
    for (path, after) in &changed {
        let before = std::fs::read_to_string(format!("{root}/{path}")).unwrap();
        assert_eq!(
            after,
            &before.replace("gpus_per_node: 4", "gpus_per_node: 8")
        );
    }
    // A bumped text is edited on top of, not beside.
    let first = changed[0].0.clone();
    let bumped = BTreeMap::from([(first.clone(), changed[0].1.clone())]);
    let one = parse_edits("set disagg-gb200-1p1d.yaml:model.precision=fp8").unwrap();
    let again = repo.apply_variant_edits(family, &bumped, &one).unwrap();
    assert_eq!(again.len(), 1);
    assert!(again[0].1.contains("gpus_per_node: 8") && again[0].1.contains("precision: fp8"));
    let e = repo
        .apply_variant_edits(
            family,
            &BTreeMap::new(),
            &parse_edits("set demo-model/disagg-gb200-1p1d.yaml:nope.x=1").unwrap(),
        )
        .unwrap_err();
    assert!(
        e.file.ends_with("disagg-gb200-1p1d.yaml") && e.reason.contains("no field nope"),
        "{e}"
    );
    let e = repo
        .apply_variant_edits(
            family,
            &BTreeMap::new(),
            &parse_edits("unset other.yaml:a").unwrap(),
        )
        .unwrap_err();
    assert!(e.to_string().contains("is not one of"), "{e}");
    let e = repo
        .apply_variant_edits(
            family,
            &BTreeMap::new(),
            &parse_edits("unset demo-model:a").unwrap(),
        )
        .unwrap_err();
    assert!(e.to_string().contains("is not one of"), "{e}");
}
