use super::*;

const FULL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/fixtures/inferencex/full"
);

fn full() -> Option<Repository> {
    if !std::path::Path::new(FULL).join("configs").is_dir() {
        assert!(
            std::env::var_os("CI").is_none(),
            "the shared InferenceX fixtures are missing at {FULL}; CI must provide them"
        );
        eprintln!("SKIPPED: the shared InferenceX fixtures are missing at {FULL}");
        return None;
    }
    Some(Repository::open(FULL).expect("the real checkout opens"))
}

fn engine(repo: &str) -> EngineDefinitions {
    engine_for(&default_engines(), repo).unwrap().clone()
}

fn has(c: &Collected, kind: ItemKind, name: &str) -> Option<String> {
    c.items
        .iter()
        .find(|i| i.kind == kind && i.name == name)
        .map(|i| i.source.clone())
}

#[test]
fn a_real_srt_slurm_recipe_gives_its_server_flags_and_worker_environment() {
    let Some(repo) = full() else { return };
    let family = repo
        .family("configs/nvidia-master.yaml:dsv4-fp4-gb200-dynamo-vllm-agentic-mtp-disagg")
        .unwrap();
    let c = collect(&repo, family, Some(&engine("vllm-project/vllm"))).unwrap();
    let recipe = "benchmarks/multi_node/srt-slurm-recipes/vllm/deepseek-v4/agentic/disagg-gb200-1p1d-dep8-dep8-mtp-agentic.yaml";
    assert!(c.files.iter().any(|f| f == recipe), "{:?}", c.files);
    // Flags of `backend.vllm_config.<role>`, with the line they are on;
    // the merge key `<<` is not a flag, the decode role's own keys are.
    let kv = has(&c, ItemKind::Flag, "--kv-cache-dtype").expect("--kv-cache-dtype");
    assert!(kv.starts_with("benchmarks/multi_node/"), "{kv}");
    assert!(has(&c, ItemKind::Flag, "--no-disable-hybrid-kv-cache-manager").is_some());
    assert!(has(&c, ItemKind::Flag, "--stream-interval").is_some());
    assert!(has(&c, ItemKind::Flag, "--<<").is_none());
    // Worker environment and the top-level `environment`.
    assert!(has(&c, ItemKind::Env, "VLLM_RPC_TIMEOUT").is_some());
    assert!(has(&c, ItemKind::Env, "ETCD_LEASE_TTL").is_some());
    // Dynamo's frontend arguments are not vLLM flags.
    assert!(has(&c, ItemKind::Flag, "--router-mode").is_none());
    // `additional-settings` name variables; recipe references are left out.
    assert!(has(&c, ItemKind::Env, "CONFIG_FILE").is_none());
}

#[test]
fn a_single_node_family_reads_the_script_its_launcher_runs() {
    let Some(repo) = full() else { return };
    let family = repo
        .family("configs/nvidia-master.yaml:dsr1-fp4-b200-sglang")
        .unwrap();
    assert_eq!(
        benchmark_scripts(&repo, family),
        vec!["benchmarks/single_node/fixed_seq_len/dsr1_fp4_b200.sh".to_owned()]
    );
    let c = collect(&repo, family, Some(&engine("sgl-project/sglang"))).unwrap();
    // On the launch line, from an array it expands, and an inline variable.
    assert!(has(&c, ItemKind::Flag, "--chunked-prefill-size").is_some());
    let dpa = has(&c, ItemKind::Flag, "--enable-dp-attention").unwrap();
    assert!(dpa.starts_with("benchmarks/single_node/fixed_seq_len/dsr1_fp4_b200.sh:"));
    assert!(
        has(&c, ItemKind::Flag, "--context-length").is_some(),
        "{c:?}"
    );
    assert!(has(&c, ItemKind::Env, "SGLANG_RADIX_FORCE_MISS").is_some());
    // The benchmark client's flags are not the server's.
    assert!(has(&c, ItemKind::Flag, "--random-range-ratio").is_none());
}

#[test]
fn every_real_family_collects_without_error() {
    let Some(repo) = full() else { return };
    let engines = default_engines();
    let (mut scripts, mut total) = (0, 0);
    for family in repo.families() {
        let e = if family.entry.framework.contains("sglang") {
            engine_for(&engines, "sgl-project/sglang")
        } else if family.entry.framework.contains("vllm") {
            engine_for(&engines, "vllm-project/vllm")
        } else {
            None
        };
        let c = collect(&repo, family, e).unwrap_or_else(|err| panic!("{}: {err}", family.family));
        if !family.entry.multinode {
            total += 1;
            scripts += usize::from(!benchmark_scripts(&repo, family).is_empty());
        }
        // Deterministic: a second read gives the same items.
        assert_eq!(c, collect(&repo, family, e).unwrap());
    }
    assert!(
        scripts * 10 >= total * 8,
        "{scripts} of {total} single-node families map a script"
    );
}

fn file(name: &str, patch: &str) -> ChangedFile {
    ChangedFile {
        filename: name.into(),
        status: "modified".into(),
        patch: Some(patch.into()),
    }
}

#[test]
fn a_scan_sees_deleted_definitions_and_not_moved_ones() {
    let e = engine("vllm-project/vllm");
    let files = vec![
        file(
            "vllm/engine/arg_utils.py",
            "@@ -10,7 +10,6 @@ class EngineArgs:\n     model: str = \"m\"\n-    max_model_len: Optional[int] = None\n-    enable_foo: bool = False\n+    enable_bar: bool = False\n \n@@ -900,4 +899,3 @@ def add_cli_args(parser):\n-        parser.add_argument(\"--legacy-thing\", type=int)\n-        parser.add_argument(\"-O\", \"--moved-flag\", type=int)\n         parser.add_argument(\"--kept\")",
        ),
        file(
            "vllm/entrypoints/openai/cli_args.py",
            "@@ -1,2 +1,3 @@\n+    parser.add_argument(\"-O\", \"--moved-flag\", type=int)\n",
        ),
        file(
            "vllm/envs.py",
            "@@ -50,3 +50,2 @@\n-    \"VLLM_OLD_KNOB\": lambda: int(os.getenv(\"VLLM_OLD_KNOB\", \"0\")),\n     \"VLLM_RPC_TIMEOUT\": lambda: 1,",
        ),
        // Outside the definition files: a deleted `add_argument` there is
        // not the server's.
        file(
            "tests/test_args.py",
            "@@ -1 +0,0 @@\n-parser.add_argument(\"--kept\")",
        ),
    ];
    let s = scan(&e, &files).unwrap();
    let names: Vec<&str> = s.removed.keys().map(|(_, n)| n.as_str()).collect();
    assert_eq!(
        names,
        vec![
            "--enable-foo",
            "--legacy-thing",
            "--max-model-len",
            "VLLM_OLD_KNOB"
        ]
    );
    assert!(s.unreadable.is_empty());

    let collected = Collected {
        items: vec![
            Item {
                kind: ItemKind::Flag,
                name: "--no-enable-foo".into(),
                source: "r.yaml:3".into(),
            },
            Item {
                kind: ItemKind::Flag,
                name: "--kept".into(),
                source: "r.yaml:4".into(),
            },
            Item {
                kind: ItemKind::Env,
                name: "VLLM_OLD_KNOB".into(),
                source: "r.yaml:9".into(),
            },
        ],
        files: vec![],
    };
    let hits = removed_items(&collected, &s);
    assert_eq!(
        hits.iter().map(|h| h.name.as_str()).collect::<Vec<_>>(),
        vec!["--no-enable-foo", "VLLM_OLD_KNOB"]
    );
    assert_eq!(hits[1].file, "vllm/envs.py");
    assert!(patch_removes(
        &e,
        "vllm/envs.py",
        files[2].patch.as_deref().unwrap(),
        &hits[1]
    ));
    assert!(!patch_removes(
        &e,
        "vllm/engine/arg_utils.py",
        files[0].patch.as_deref().unwrap(),
        &hits[1]
    ));
}

#[test]
fn a_definition_file_without_a_patch_is_reported_unreadable() {
    let e = engine("sgl-project/sglang");
    let files = vec![ChangedFile {
        filename: "python/sglang/srt/server_args.py".into(),
        status: "modified".into(),
        patch: None,
    }];
    let s = scan(&e, &files).unwrap();
    assert_eq!(
        s.unreadable,
        vec!["python/sglang/srt/server_args.py".to_owned()]
    );
}

#[test]
fn sglang_environment_definitions_are_read_from_environ_py() {
    let e = engine("sgl-project/sglang");
    let files = vec![file(
        "python/sglang/srt/environ.py",
        "@@ -3,3 +3,2 @@ class Envs:\n-    SGLANG_OLD = EnvBool(False)\n     SGLANG_KEPT = EnvInt(1)\n-x = os.environ.get(\"SGL_LEGACY\")",
    )];
    let s = scan(&e, &files).unwrap();
    let names: Vec<&str> = s.removed.keys().map(|(_, n)| n.as_str()).collect();
    assert_eq!(names, vec!["SGLANG_OLD", "SGL_LEGACY"]);
}

#[test]
fn a_bad_rule_pattern_is_named() {
    let mut engines = default_engines();
    engines[0].rules[0].pattern = "(".into();
    let err = validate(&engines).unwrap_err().to_string();
    assert!(
        err.contains("vllm-project/vllm") && err.contains("\"(\""),
        "{err}"
    );
}

#[test]
fn an_unclosed_script_array_names_the_file_and_line() {
    let mut sink = Sink::default();
    let text = "#!/bin/bash\nARGS=(\n  --a\n";
    let err = script_items("s.sh", text, Some(&engine("vllm-project/vllm")), &mut sink)
        .unwrap_err()
        .to_string();
    assert_eq!(err, "s.sh:2: array ARGS=( is never closed");
}

#[test]
fn script_flags_come_from_the_launch_command_only() {
    let mut sink = Sink::default();
    let text = "export VLLM_A=1\nexport PORT=8\nEXTRA=\"--from-var 1\"\nARR=(\n  --from-array # comment --not-this\n)\nhf download --not-server\nVLLM_B=2 vllm serve m --port 1 \\\n  \"${ARR[@]}\" $EXTRA \\\n  --last=3 > log 2>&1 &\nrun_benchmark_serving --client-flag\n";
    script_items("s.sh", text, Some(&engine("vllm-project/vllm")), &mut sink).unwrap();
    let c = sink.finish();
    let flags: Vec<&str> = c
        .items
        .iter()
        .filter(|i| i.kind == ItemKind::Flag)
        .map(|i| i.name.as_str())
        .collect();
    assert_eq!(
        flags,
        vec!["--from-array", "--from-var", "--last", "--port"]
    );
    assert_eq!(has(&c, ItemKind::Env, "VLLM_B").as_deref(), Some("s.sh:8"));
    assert_eq!(has(&c, ItemKind::Env, "VLLM_A").as_deref(), Some("s.sh:1"));
    assert!(has(&c, ItemKind::Env, "PORT").is_some());
}

#[test]
fn additional_settings_that_are_not_strings_are_an_error_with_the_line() {
    let doc =
        yaml::parse("k:\n  scenarios:\n    x:\n    - additional-settings:\n      - { a: 1 }\n")
            .unwrap()
            .unwrap();
    let mut sink = Sink::default();
    let err = settings_items("m.yaml", doc.get("k").unwrap(), &mut sink)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("m.yaml:5:"), "{err}");
}
