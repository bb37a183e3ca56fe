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

fn facts(framework: &str, prefix: &str, precision: &str, multinode: bool) -> LaunchFacts {
    LaunchFacts {
        framework: framework.into(),
        model_prefix: prefix.into(),
        precision: precision.into(),
        multinode,
    }
}

const H100_LIKE: &str = r#"#!/usr/bin/bash
NGINX_SQUASH_FILE="/mnt/containers/nginx_1.27.4.sqsh"
if [[ "$IS_MULTINODE" == "true" ]]; then
    if [[ $FRAMEWORK == "dynamo-sglang" ]]; then
        # SGLang container mapping
        SQUASH_FILE="/mnt/containers/lmsysorg_sglang_v0.5.8.post1-cu130.sqsh"
        CONTAINER_KEY="lmsysorg/sglang:v0.5.8-cu130"
    elif [[ $FRAMEWORK == "dynamo-trt" ]]; then
        CONTAINER_KEY=$(echo "$IMAGE" | sed 's|nvcr.io/|nvcr.io#|')
        SQUASH_FILE="/mnt/containers/$(echo "$IMAGE" | sed 's/[\/:@#]/+/g').sqsh"
    fi
    cat > srtslurm.yaml <<EOF
containers:
  dynamo-sglang: "/mnt/containers/fixed.sqsh"
fi
EOF
else
    SQUASH_FILE="/mnt/squash/$(echo "$IMAGE" | sed 's/[\/:@#]/_/g').sqsh"
    srun --container-image=$SQUASH_FILE \
        --no-container-entrypoint
fi
"#;

#[test]
fn a_literal_squash_file_for_the_framework_is_a_pin() {
    let pins = pins_for(
        "runners/launch_x.sh",
        H100_LIKE,
        &facts("dynamo-sglang", "dsr1", "fp8", true),
    );
    assert_eq!(pins.len(), 2, "{pins:?}");
    assert_eq!(pins[0].line, 6);
    assert_eq!(pins[0].variable, "SQUASH_FILE");
    assert_eq!(
        pins[0].value,
        "/mnt/containers/lmsysorg_sglang_v0.5.8.post1-cu130.sqsh"
    );
    assert_eq!(pins[1].variable, "CONTAINER_KEY");
    assert_eq!(
        pins[0].to_string(),
        "runners/launch_x.sh:6 sets SQUASH_FILE=/mnt/containers/lmsysorg_sglang_v0.5.8.post1-cu130.sqsh"
    );
}

#[test]
fn another_framework_or_a_single_node_run_is_not_pinned() {
    for f in [
        facts("dynamo-trt", "dsr1", "fp8", true),
        facts("dynamo-sglang", "dsr1", "fp8", false),
        facts("sglang", "dsr1", "fp8", false),
    ] {
        let pins = pins_for("runners/launch_x.sh", H100_LIKE, &f);
        assert!(pins.is_empty(), "{f:?}: {pins:?}");
    }
}

#[test]
fn tests_klaud_cannot_evaluate_count_as_maybe() {
    let text = "if [[ $CONFIG_FILE == recipes/* ]]; then\n  IMAGE=\"repo/x:1\"\nfi\n\
                if [[ $FRAMEWORK == dyn* && $MODEL_PREFIX != \"dsr1\" ]]; then\n  export DOCKER_IMAGE=repo/y:2\nfi\n\
                if ! [[ $PRECISION == \"fp8\" ]] || ( [[ $FRAMEWORK == \"a\" ]] ); then\n  CONTAINER_IMAGE='repo/z:3'\nfi\n";
    let pins = pins_for("l", text, &facts("dynamo-vllm", "dsv4", "fp4", true));
    let lines: Vec<usize> = pins.iter().map(|p| p.line).collect();
    assert_eq!(lines, vec![2, 5, 8], "{pins:?}");
    // The same tests, now false for the family.
    let pins = pins_for("l", text, &facts("vllm", "dsr1", "fp8", false));
    let lines: Vec<usize> = pins.iter().map(|p| p.line).collect();
    assert_eq!(lines, vec![2], "{pins:?}");
}

#[test]
fn else_branches_follow_what_came_before() {
    let text = "if [[ $FRAMEWORK == \"a\" ]]; then\n  x=1\nelif [[ $FRAMEWORK == \"b\" ]]\nthen\n  x=2\nelse\n  IMAGE=repo/fixed:1\nfi\n";
    assert!(pins_for("l", text, &facts("a", "p", "q", false)).is_empty());
    assert!(pins_for("l", text, &facts("b", "p", "q", false)).is_empty());
    assert_eq!(pins_for("l", text, &facts("c", "p", "q", false))[0].line, 7);
}

#[test]
fn derived_values_comments_and_auxiliary_containers_are_not_pins() {
    let text = "# IMAGE=repo/commented:1\n\
                NGINX_IMAGE=\"nginx:1.27.4\"\n\
                DCGM_EXPORTER_IMAGE=\"nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0\"\n\
                CONTAINER_IMAGE=$(realpath $SQUASH_FILE)\n\
                export IMAGE=$SQUASH_FILE\n\
                DOCKER_IMAGE=\"${IMAGE//#//}\"\n\
                echo \"SQUASH_FILE=/x.sqsh\"\n\
                srun --container-image=\"$SQUASH_FILE\" x\n";
    assert!(pins_for("l", text, &facts("a", "p", "q", false)).is_empty());
    let text = "srun --container-image=/fixed/image.sqsh \\\n  --x\ndocker run --container-image 'repo/fixed:1'\n";
    let pins = pins_for("l", text, &facts("a", "p", "q", false));
    assert_eq!(pins.len(), 2, "{pins:?}");
    assert_eq!(pins[0].value, "/fixed/image.sqsh");
    assert_eq!(pins[1].line, 3);
}

#[test]
fn hostile_launchers_are_bounded_and_never_panic() {
    let f = facts("a", "p", "q", true);
    // Deep nesting of tests and of ifs, unbalanced keywords, stray quotes.
    let deep = format!(
        "if {}[[ $FRAMEWORK == \"a\" ]]{}; then\nIMAGE=r/x:1\nfi\n",
        "( ".repeat(10_000),
        " )".repeat(10_000)
    );
    assert_eq!(pins_for("l", &deep, &f).len(), 1);
    let ifs = "if [[ $FRAMEWORK == \"b\" ]]; then\n".repeat(5_000) + "IMAGE=r/x:1\n";
    assert!(pins_for("l", &ifs, &f).is_empty());
    let odd = "fi\nfi\nelse\nelif\nesac\ncase\nif\nIMAGE='unclosed\nIMAGE=\"\"\n<<\n<<-\ncat <<<x\n]] [[ && || ( ) !\n\u{0}\u{feff}é=1\n";
    let _ = pins_for("l", odd, &f);
    for cut in 0..H100_LIKE.len() {
        if H100_LIKE.is_char_boundary(cut) {
            let _ = pins_for("l", &H100_LIKE[..cut], &f);
        }
    }
    // One enormous line, and a continuation that never ends.
    let long = format!("IMAGE=r/x:1 {}\n", "a".repeat(MAX_LAUNCHER_LINE_BYTES * 3));
    assert_eq!(pins_for("l", &long, &f).len(), 1);
    // Past the line bound the rest of a continuation is read as new
    // lines: still one pass over the text.
    let cont = "IMAGE=r/x:1 \\\n".repeat(50_000);
    let pins = pins_for("l", &cont, &f);
    assert!(!pins.is_empty() && pins.len() < 50, "{}", pins.len());
    // A heredoc that never ends hides the rest, it does not fail.
    assert!(pins_for("l", "cat <<EOF\nIMAGE=r/x:1\n", &f).is_empty());
}

#[test]
fn a_launcher_over_the_size_bound_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("runners")).unwrap();
    let path = "runners/launch_big.sh";
    std::fs::write(dir.path().join(path), "#".repeat(MAX_LAUNCHER_BYTES + 1)).unwrap();
    let e = read_launcher(dir.path(), path).unwrap_err();
    assert!(matches!(e, LauncherPinError::TooLarge { .. }));
    assert!(e.to_string().starts_with("runners/launch_big.sh: "), "{e}");
    std::fs::write(dir.path().join(path), [0xff, 0xfe]).unwrap();
    let e = read_launcher(dir.path(), path).unwrap_err();
    assert!(e.to_string().contains("not valid UTF-8"), "{e}");
}

/// Every family of the real masters against its real launchers: the
/// H100 `dynamo-sglang` family is blocked, and each block names a line
/// that really sets a fixed container for that family.
#[test]
fn real_masters_block_only_families_whose_launcher_pins_the_image() {
    let Some(repo) = full() else { return };
    let mut blocked = Vec::new();
    for family in repo.families() {
        if let Some(pin) = launcher_pin(&repo, family).expect("the real launchers read") {
            blocked.push((family.key.clone(), pin));
        }
    }
    eprintln!(
        "{} of {} real families are blocked by their launcher:",
        blocked.len(),
        repo.families().len()
    );
    for (key, pin) in &blocked {
        eprintln!("  {key}: {pin}");
    }
    assert!(
        blocked
            .iter()
            .any(|(k, _)| k == "dsr1-fp8-h100-dynamo-sglang"),
        "{blocked:?}"
    );
    // Read by hand: the only literal container among the launchers is the
    // H100 launcher's dynamo-sglang squash file (and its key), in its
    // multi-node branch.
    for (key, pin) in &blocked {
        let family = repo.family(key).unwrap();
        assert_eq!(pin.launcher, "runners/launch_h100-dgxc-slurm.sh", "{key}");
        assert_eq!(pin.line, 85, "{key}");
        assert_eq!(family.entry.framework, "dynamo-sglang", "{key}");
        assert!(family.entry.multinode, "{key}");
    }
    // A family on the same runner with another framework is not blocked.
    let trt = repo.family("dsr1-fp8-h100-dynamo-trt").unwrap();
    assert_eq!(launcher_pin(&repo, trt).unwrap(), None);
    assert!(blocked.len() < repo.families().len() / 10);
}

#[test]
fn the_reason_starts_with_its_code_and_names_the_line() {
    let Some(repo) = full() else { return };
    let family = repo.family("dsr1-fp8-h100-dynamo-sglang").unwrap();
    let pin = launcher_pin(&repo, family).unwrap().expect("pinned");
    let reason = block_reason(&pin, family);
    assert!(
        reason.starts_with(
            "launcher-pins-image: runners/launch_h100-dgxc-slurm.sh:85 sets SQUASH_FILE="
        ),
        "{reason}"
    );
    assert!(reason.contains("dynamo-sglang"), "{reason}");
    assert_eq!(
        launchers_of(&repo, family),
        vec!["runners/launch_h100-dgxc-slurm.sh".to_owned()]
    );
}
