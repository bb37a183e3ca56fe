//! Seed 001 (InferenceX PR #2184) replayed through the rules, and the
//! negative cases of the sign-off contract as variations of it. The repository files are
//! read in place from `../shared/fixtures/inferencex/` (beside the
//! repository, never copied in): without them these tests skip loudly, and
//! fail when `CI` is set.

mod common;

use common::fixtures;
use std::collections::BTreeMap;
use std::path::Path;

use klaud_signoff::evidence::{
    ChangedFile, CheckRunFact, CommentFact, DefaultBranchFiles, EvalFact, Evidence, PullFacts,
    Signer, Signoff, SignoffKind, default_eval_bars,
};
use klaud_signoff::{ContractVersion, GateRefusal, Outcome, VerdictWord, render, verify};

const HEAD: &str = "30be9347c0ffee0000000000000000000000beef";
const RUN: u64 = 29358158271;
const TP1_IMAGE: &str = "vllm/vllm-openai:nightly-2dfaae752b4db0d43cfc0715c780e33be030d0f1";

fn read(dir: &Path, path: &str) -> String {
    std::fs::read_to_string(dir.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The seed's sign-off as the CODEOWNER wrote it: the thread is rendered
/// text, so its bullets become the template's checked boxes again.
pub fn seed_signoff_markdown(dir: &Path) -> String {
    let thread = read(dir, "signoff/seed-001-pr-thread.txt");
    let start = thread
        .find("As a PR reviewer and CODEOWNER, I have reviewed this and have:\n\n•")
        .expect("seed sign-off");
    let end = thread[start..]
        .find("Signed: Ankur-singh")
        .expect("signature")
        + start;
    let mut out = String::new();
    let mut in_detail = false;
    for line in thread[start..end].lines() {
        if line.starts_with("Additional detail section") {
            in_detail = true;
            out.push_str("### Additional detail section:\n");
            continue;
        }
        let converted = if let Some(rest) = line.strip_prefix("  • ") {
            format!("  - [x] {rest}")
        } else if let Some(rest) = line.strip_prefix("• ") {
            if in_detail {
                format!("- {rest}")
            } else {
                format!("- [x] {rest}")
            }
        } else {
            line.to_owned()
        };
        if !converted.is_empty() {
            out.push_str(&converted);
            out.push('\n');
        }
    }
    out.push_str("\nSigned: Ankur-singh\n");
    out
}

/// A top-level key's block of a master config, as written.
fn entry_block(text: &str, key: &str) -> String {
    let start = text.find(&format!("\n{key}:\n")).expect(key) + 1;
    let rest = &text[start..];
    let end = rest[1..].find("\n\n").map_or(rest.len(), |at| at + 2);
    rest[..end].to_owned()
}

fn added(path: &str, text: &str) -> ChangedFile {
    let patch = text.lines().map(|l| format!("+{l}\n")).collect::<String>();
    ChangedFile {
        path: path.to_owned(),
        previous_path: None,
        status: "added".to_owned(),
        patch: Some(patch),
        head_text: Some(text.to_owned()),
    }
}

fn modified(path: &str, added_lines: &str, head: &str) -> ChangedFile {
    ChangedFile {
        path: path.to_owned(),
        previous_path: None,
        status: "modified".to_owned(),
        patch: Some(added_lines.lines().map(|l| format!("+{l}\n")).collect()),
        head_text: Some(head.to_owned()),
    }
}

pub fn seed_evidence(dir: &Path) -> Evidence {
    let archive = read(
        dir,
        "full/configs/deprecated/nvidia-minimaxm3-8k1k-master.yaml",
    );
    let single = entry_block(&archive, "minimaxm3-fp4-b300-vllm");
    let tp1 = entry_block(&archive, "minimaxm3-fp4-b300-dynamo-vllm-8k1k-tp1").replace(
        "vllm/vllm-openai:nightly-5e35a6f4f9bbc217c599692157ca985c894373f7",
        TP1_IMAGE,
    );
    let legacy = entry_block(
        &archive,
        "minimaxm3-fp4-b300-dynamo-vllm-8k1k-legacy-max-tput",
    );
    let base_master = single.clone();
    let head_master = format!("{single}\n{tp1}\n{legacy}");
    let launcher = read(dir, "full/runners/launch_b300-nv.sh");
    let launcher_added = "elif [[ $FRAMEWORK == \"dynamo-vllm\" && $MODEL_PREFIX == \"minimaxm3\" && $PRECISION == \"fp4\" && \"$CONFIG_FILE\" == recipes/vllm/minimax-m3/b300-fp4/8k1k/*-tp1-*.yaml ]]; then\n    git clone https://github.com/NVIDIA/srt-slurm.git \"$SRT_REPO_DIR\"\n    cd \"$SRT_REPO_DIR\" || exit 1\n    git checkout c1fb6989fc5aca803b4ca0f2d17d8be85fad9732\n    mkdir -p recipes/vllm/minimax-m3\n    cp -rT \"$GITHUB_WORKSPACE/benchmarks/multi_node/srt-slurm-recipes/vllm/minimax-m3\" recipes/vllm/minimax-m3\n    SRTCTL_APPLY_ARGS+=(--no-preflight)\n";
    let recipe_dir = "benchmarks/multi_node/srt-slurm-recipes/vllm/minimax-m3/b300-fp4/8k1k";
    let mut changed = vec![
        modified(
            "configs/nvidia-master.yaml",
            &format!("{tp1}\n{legacy}"),
            &head_master,
        ),
        modified(
            "perf-changelog.yaml",
            "- config-keys:\n  - minimaxm3-fp4-b300-dynamo-vllm-8k1k-tp1\n  - minimaxm3-fp4-b300-dynamo-vllm-8k1k-legacy-max-tput\n  pr-link: https://github.com/SemiAnalysisAI/InferenceX/pull/2184\n",
            "",
        ),
        modified("runners/launch_b300-nv.sh", launcher_added, &launcher),
    ];
    for recipe in [
        "1p1d-tp1-tp4-8k1k.yaml",
        "1p1d-tp1-tp8-8k1k.yaml",
        "2p1d-tp1-tp4-8k1k.yaml",
        "3p1d-tp1-tp4-8k1k.yaml",
        "5p2d-tp1-dep8-8k1k.yaml",
        "8p2d-tp1-dep8-8k1k.yaml",
    ] {
        changed.push(added(
            &format!("{recipe_dir}/{recipe}"),
            &format!("name: minimax-m3-{recipe}\nmodel:\n  path: /scratch/models/MiniMax-M3-NVFP4\n  container: {TP1_IMAGE}\n"),
        ));
    }
    changed.push(ChangedFile {
        path: format!("{recipe_dir}/4p2d-dep2-tep4-8k1k.yaml"),
        status: "added".into(),
        ..ChangedFile::default()
    });

    let mut check_runs = Vec::new();
    for (i, conc) in ["8", "1", "128", "256", "512", "768", "4096"]
        .iter()
        .enumerate()
    {
        for group in ["multi-node 8k1k", "multi-node eval"] {
            check_runs.push(CheckRunFact {
                sha: HEAD.into(),
                name: format!("{group} / p1 | minimaxm3 fp4 b300 dynamo-vllm c{conc} #{i}"),
                status: "completed".into(),
                conclusion: Some("success".into()),
                run_id: Some(RUN),
            });
        }
    }
    check_runs.push(CheckRunFact {
        sha: HEAD.into(),
        name: "single-node 8k1k / benchmark".into(),
        status: "completed".into(),
        conclusion: Some("skipped".into()),
        run_id: Some(RUN),
    });
    let scores = [0.951, 0.955, 0.961, 0.958, 0.953, 0.957, 0.960];
    let eval_rows = scores
        .iter()
        .map(|s| EvalFact {
            task: "gsm8k".into(),
            score: Some(*s),
            score_name: "em_strict".into(),
            label: "minimaxm3 B300 dynamo-vllm fp4".into(),
            image: None,
        })
        .collect();

    let golden = std::fs::read_dir(dir.join("full/golden_al_distribution"))
        .expect("golden_al_distribution")
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "yaml"))
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (
                format!("golden_al_distribution/{name}"),
                std::fs::read_to_string(e.path()).expect("golden"),
            )
        })
        .collect();

    Evidence {
        repo: "SemiAnalysisAI/InferenceX".into(),
        pull: PullFacts {
            number: 2184,
            open: true,
            draft: false,
            title: "Update MiniMax-M3 NVFP4 B300 8k1k disaggregated Dynamo-vLLM sweep".into(),
            body: String::new(),
        },
        head_sha: HEAD.into(),
        signoff: Signoff {
            kind: SignoffKind::IssueComment,
            id: 4_200_000_001,
            author: "Ankur-singh".into(),
            body: seed_signoff_markdown(dir),
            edited: None,
        },
        signer: Signer {
            login: "Ankur-singh".into(),
            user_type: "User".into(),
            permission: "write".into(),
            role_name: Some("write".into()),
        },
        default_branch: DefaultBranchFiles {
            prompt: Some(read(
                dir,
                "signoff/7abe6612/.github/codeowner-signoff-verify-prompt.md",
            )),
            checklist: Some(read(dir, "signoff/7abe6612/docs/PR_REVIEW_CHECKLIST.md")),
            models_md: Some(read(dir, "full/MODELS.md")),
            golden_al: golden,
            waivers: vec![],
        },
        codeowners: Some(read(dir, "signoff/newer/.github/CODEOWNERS")),
        team_membership: BTreeMap::new(),
        owner_admins: Default::default(),
        recipe_pulls: Default::default(),
        benchmarks: Default::default(),
        changed_files: changed,
        masters_base: BTreeMap::from([("configs/nvidia-master.yaml".into(), base_master)]),
        masters_head: BTreeMap::from([("configs/nvidia-master.yaml".into(), head_master)]),
        pr_commits: vec![
            "8840ef6b00000000000000000000000000000000".into(),
            HEAD.into(),
        ],
        check_runs,
        evals: BTreeMap::from([(RUN, Ok(eval_rows))]),
        run_commits: BTreeMap::from([(RUN, HEAD.into())]),
        comments: vec![CommentFact {
            login: "Ankur-singh".into(),
            author_association: "COLLABORATOR".into(),
            body: format!("/reuse-sweep-run {RUN}"),
        }],
        eval_bars: default_eval_bars(),
    }
}

fn outcomes(evidence: &Evidence) -> Vec<(u32, Outcome, String)> {
    let verdict = verify(evidence).expect("decidable").expect("gate passes");
    verdict
        .checks
        .iter()
        .map(|c| (c.number, c.result, c.reason.clone()))
        .collect()
}

fn outcome_of(evidence: &Evidence, number: usize) -> (Outcome, String) {
    let all = outcomes(evidence);
    (all[number].1, all[number].2.clone())
}

#[test]
fn seed_001_replays_as_pass_with_checks_3_8_10_not_applicable() {
    let Some(dir) = fixtures() else { return };
    let evidence = seed_evidence(&dir);
    let verdict = verify(&evidence).unwrap().unwrap();
    let rows: Vec<(u32, &str, Outcome)> = verdict
        .checks
        .iter()
        .map(|c| (c.number, c.name.as_str(), c.result))
        .collect();
    use Outcome::{NotApplicable as NA, Pass};
    assert_eq!(
        rows,
        vec![
            (0, "CODEOWNER", Pass),
            (1, "Passing sweep on in-PR commit", Pass),
            (2, "Evals pass", Pass),
            (3, "Recipe link", NA),
            (4, "Reuse command", Pass),
            (5, "Latest checklist", Pass),
            (6, "Upstream images / engine-first", Pass),
            (7, "No architecture hacks", Pass),
            (8, "Spec-decode chat templates", NA),
            (9, "No engine patches", Pass),
            (10, "Agentic golden AL", NA),
        ],
        "{verdict:#?}"
    );
    assert_eq!(verdict.verdict, VerdictWord::Pass);
    let reason = |n: usize| verdict.checks[n].reason.as_str();
    assert!(
        reason(0).contains("configs/nvidia-master.yaml"),
        "{}",
        reason(0)
    );
    assert!(
        reason(1).contains("29358158271") && reason(1).contains("7 multi-node 8k1k"),
        "{}",
        reason(1)
    );
    assert!(
        reason(2).contains("7/7 GSM8K em_strict 0.951–0.961 vs 0.85 bar"),
        "{}",
        reason(2)
    );
    assert!(
        reason(3).starts_with("disaggregated/multi-node submission"),
        "{}",
        reason(3)
    );
    assert_eq!(
        reason(4),
        "/reuse-sweep-run 29358158271 posted by Ankur-singh (COLLABORATOR)."
    );
    assert!(
        reason(6).contains("minimaxm3-fp4-b300-vllm"),
        "{}",
        reason(6)
    );
    assert!(
        verdict.checks[0]
            .evidence
            .iter()
            .any(|e| e.contains("CODEOWNERS line"))
    );

    let body = render::comment(
        ContractVersion::Checks0To10,
        &verdict,
        SignoffKind::IssueComment,
        1,
    );
    let mut lines = body.lines();
    assert_eq!(
        lines.next(),
        Some(format!("<!-- codeowner-signoff-verify sha={HEAD} -->").as_str())
    );
    assert_eq!(lines.next(), Some(render::PASS_HEADER));
    assert_eq!(lines.next(), Some(""));
    assert!(
        lines
            .next()
            .unwrap()
            .starts_with("✅ Check 0 (CODEOWNER): PASS — Ankur-singh owns")
    );
    assert!(body.contains("\n➖ Check 3 (Recipe link): N/A — disaggregated/multi-node submission"));
    assert!(body.contains(
        "\n➖ Check 10 (Agentic golden AL): N/A — no agentic speculative-decoding changes."
    ));
    assert!(!body.contains("@Ankur"), "no mention on a pass");
}

#[test]
fn a_signer_who_owns_none_of_the_specific_paths_is_rejected() {
    let Some(dir) = fixtures() else { return };
    let mut evidence = seed_evidence(&dir);
    evidence.signer.login = "billishyahao".into();
    evidence.signoff.author = "billishyahao".into();
    let (outcome, reason) = outcome_of(&evidence, 0);
    assert_eq!(outcome, Outcome::Fail);
    assert!(
        reason.contains("not a CODEOWNER of configs/nvidia-master.yaml"),
        "{reason}"
    );
    let verdict = verify(&evidence).unwrap().unwrap();
    let body = render::comment(
        ContractVersion::Checks0To10,
        &verdict,
        SignoffKind::IssueComment,
        1,
    );
    assert!(body.lines().nth(1) == Some(render::REJECTED_HEADER));
    assert!(body.contains("\n@billishyahao this sign-off is blocked by Check 0 (CODEOWNER)."));
}

#[test]
fn a_reader_and_a_bot_are_refused_by_the_gate() {
    let Some(dir) = fixtures() else { return };
    let mut reader = seed_evidence(&dir);
    reader.signer.permission = "read".into();
    reader.signer.role_name = Some("triage".into());
    assert!(matches!(
        verify(&reader).unwrap(),
        Err(GateRefusal::Permission { .. })
    ));
    let mut bot = seed_evidence(&dir);
    bot.signer.user_type = "Bot".into();
    bot.signer.login = "klaud-cold[bot]".into();
    assert!(matches!(verify(&bot).unwrap(), Err(GateRefusal::Bot(_))));
    let mut draft = seed_evidence(&dir);
    draft.pull.draft = true;
    assert!(matches!(
        verify(&draft).unwrap(),
        Err(GateRefusal::Draft(2184))
    ));
}

#[test]
fn an_old_checklist_missing_or_unchecked_item_fails_check_5() {
    let Some(dir) = fixtures() else { return };
    let mut unchecked = seed_evidence(&dir);
    unchecked.signoff.body = unchecked.signoff.body.replacen(
        "- [x] Verified that the general code quality",
        "- [ ] Verified that the general code quality",
        1,
    );
    let (outcome, reason) = outcome_of(&unchecked, 5);
    assert_eq!(outcome, Outcome::Fail);
    assert!(
        reason.contains("unchecked items \"Verified that the general code quality"),
        "{reason}"
    );

    let mut newer_template = seed_evidence(&dir);
    newer_template.default_branch.checklist =
        Some(read(&dir, "signoff/843c6254/docs/PR_REVIEW_CHECKLIST.md"));
    let (outcome, reason) = outcome_of(&newer_template, 5);
    assert_eq!(outcome, Outcome::Fail);
    assert!(reason.contains("MODELS.md"), "{reason}");
    assert!(reason.contains("append-only"), "{reason}");
}

#[test]
fn no_green_sweep_on_a_commit_in_the_pr_fails_checks_1_and_2() {
    let Some(dir) = fixtures() else { return };
    let mut evidence = seed_evidence(&dir);
    evidence.pr_commits = vec!["1111111111111111111111111111111111111111".into()];
    assert_eq!(outcome_of(&evidence, 1).0, Outcome::Fail);
    assert!(
        outcome_of(&evidence, 1)
            .1
            .starts_with("No passing sweep/eval was found on any commit in this PR.")
    );
    assert_eq!(outcome_of(&evidence, 2).0, Outcome::Fail);

    let mut failed_job = seed_evidence(&dir);
    failed_job.check_runs[3].conclusion = Some("failure".into());
    assert_eq!(outcome_of(&failed_job, 1).0, Outcome::Fail);
}

#[test]
fn evals_below_the_bar_fail_check_2() {
    let Some(dir) = fixtures() else { return };
    let mut evidence = seed_evidence(&dir);
    if let Some(Ok(rows)) = evidence.evals.get_mut(&RUN) {
        rows[2].score = Some(0.62);
    }
    let (outcome, reason) = outcome_of(&evidence, 2);
    assert_eq!(outcome, Outcome::Fail);
    assert!(reason.contains("0.620 < 0.85"), "{reason}");
}

fn with_head_entry(evidence: &mut Evidence, entry: &str) {
    let head = evidence
        .masters_head
        .get_mut("configs/nvidia-master.yaml")
        .unwrap();
    head.push('\n');
    head.push_str(entry);
}

#[test]
fn a_non_upstream_image_on_established_hardware_fails_check_6() {
    let Some(dir) = fixtures() else { return };
    let mut evidence = seed_evidence(&dir);
    with_head_entry(
        &mut evidence,
        "qwen3.5-fp8-mi355x-sglang:\n  image: rocm/sgl-dev:v0.5.9-rocm720-mi35x-20260301\n  model: Qwen/Qwen3.5-397B-A17B-FP8\n  model-prefix: qwen3.5\n  runner: mi355x\n  precision: fp8\n  framework: sglang\n  multinode: true\n  scenarios: {}\n",
    );
    let (outcome, reason) = outcome_of(&evidence, 6);
    assert_eq!(outcome, Outcome::Fail);
    assert!(reason.contains("rocm/sgl-dev"), "{reason}");
}

#[test]
fn a_deprecated_model_fails_check_7_of_the_843c6254_contract() {
    let Some(dir) = fixtures() else { return };
    let mut evidence = seed_evidence(&dir);
    evidence.default_branch.prompt = Some(read(
        &dir,
        "signoff/843c6254/.github/codeowner-signoff-verify-prompt.md",
    ));
    with_head_entry(
        &mut evidence,
        "gptoss-fp4-b300-vllm:\n  image: vllm/vllm-openai:v0.11.0\n  model: openai/gpt-oss-120b\n  model-prefix: gptoss\n  runner: b300\n  precision: fp4\n  framework: vllm\n  multinode: true\n  scenarios: {}\n",
    );
    let verdict = verify(&evidence).unwrap().unwrap();
    assert_eq!(verdict.checks.len(), 13);
    assert_eq!(verdict.checks[7].name, "Deprecated models");
    assert_eq!(
        verdict.checks[7].result,
        Outcome::Fail,
        "{:?}",
        verdict.checks[7]
    );
    assert!(verdict.checks[7].reason.contains("gptoss"));
}

#[test]
fn hf_overrides_in_the_diff_fails_the_architecture_check() {
    let Some(dir) = fixtures() else { return };
    let mut evidence = seed_evidence(&dir);
    evidence.changed_files.push(added(
        "benchmarks/single_node/dsv4_fp8_b200_vllm.sh",
        "vllm serve $MODEL --hf-overrides '{\"index_topk_freq\": 4}'\n",
    ));
    let (outcome, reason) = outcome_of(&evidence, 7);
    assert_eq!(outcome, Outcome::Fail);
    assert!(reason.contains("--hf-overrides"), "{reason}");
}

#[test]
fn an_engine_patch_fails_without_a_waiver_and_passes_with_a_linked_one() {
    let Some(dir) = fixtures() else { return };
    let mut evidence = seed_evidence(&dir);
    evidence.changed_files.push(added(
        "benchmarks/multi_node/minimax_fix.sh",
        "python3 - <<'EOF'\nimport importlib.util\npath = importlib.util.find_spec('vllm').origin\nEOF\n",
    ));
    let (outcome, reason) = outcome_of(&evidence, 9);
    assert_eq!(outcome, Outcome::Fail);
    assert!(reason.contains("docs/waiver/2184.md"), "{reason}");

    let waiver = read(&dir, "signoff/843c6254/docs/waiver/2508.md");
    evidence
        .changed_files
        .push(added("docs/waiver/2184.md", &waiver));
    let (outcome, reason) = outcome_of(&evidence, 9);
    assert_eq!(outcome, Outcome::Fail, "not linked yet");
    assert!(reason.contains("does not link"), "{reason}");

    evidence.signoff.body = evidence.signoff.body.replace(
        "### Additional detail section:\n",
        "### Additional detail section:\n- Waiver: docs/waiver/2184.md\n",
    );
    let (outcome, reason) = outcome_of(&evidence, 9);
    assert_eq!(outcome, Outcome::Pass, "{reason}");
}

#[test]
fn agentic_speculative_decoding_needs_the_golden_acceptance_length() {
    let Some(dir) = fixtures() else { return };
    let mut evidence = seed_evidence(&dir);
    let recipe = "benchmarks/single_node/agentic/qwen3.5_fp4_b300_vllm_mtp.sh";
    evidence.changed_files.push(added(
        recipe,
        "MODEL=nvidia/Qwen3.5-397B-A17B-NVFP4\nvllm serve $MODEL --speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 3}'\n",
    ));
    let (outcome, reason) = outcome_of(&evidence, 10);
    assert_eq!(outcome, Outcome::Fail);
    assert!(reason.contains("unsimulated"), "{reason}");

    let pinned = |al: &str| {
        format!(
            "MODEL=nvidia/Qwen3.5-397B-A17B-NVFP4\nvllm serve $MODEL --speculative-config '{{\"method\": \"mtp\", \"num_speculative_tokens\": 3, \"rejection_sample_method\": \"synthetic\", \"synthetic_acceptance_length\": {al}}}'\n"
        )
    };
    evidence.changed_files.last_mut().unwrap().head_text = Some(pinned("3.00"));
    let (outcome, reason) = outcome_of(&evidence, 10);
    assert_eq!(outcome, Outcome::Fail);
    assert!(reason.contains("3.39"), "{reason}");

    evidence.changed_files.last_mut().unwrap().head_text = Some(pinned("3.39"));
    let (outcome, reason) = outcome_of(&evidence, 10);
    assert_eq!(outcome, Outcome::Pass, "{reason}");
}

#[test]
fn the_newer_contract_folds_passes_into_details_and_names_the_assessed_commit() {
    let Some(dir) = fixtures() else { return };
    let mut evidence = seed_evidence(&dir);
    evidence.default_branch.prompt = Some(read(
        &dir,
        "signoff/newer/.github/codeowner-signoff-verify-prompt.md",
    ));
    evidence.default_branch.checklist =
        Some(read(&dir, "signoff/newer/docs/PR_REVIEW_CHECKLIST.md"));
    let verdict = verify(&evidence).unwrap().unwrap();
    assert_eq!(verdict.checks.len(), 16);
    let body = render::comment(
        ContractVersion::Checks0To15,
        &verdict,
        SignoffKind::IssueComment,
        77,
    );
    assert!(body.starts_with("<!-- codeowner-signoff-verify signoff=issuecomment-77 -->\n## "));
    assert!(body.contains("<details>\n<summary>Passed and not applicable checks</summary>\n\n"));
    assert!(body.ends_with(&format!("\n\nAssessed commit: `{HEAD}`.\n")));
    // The seed's sign-off predates this checklist: Check 5 fails, and the
    // failing row stays outside the folded group.
    assert_eq!(verdict.verdict, VerdictWord::Rejected);
    let folded_at = body.find("<details>").unwrap();
    assert!(body.find("❌ Check 5 (Latest checklist): FAIL").unwrap() < folded_at);
    // The legacy max-throughput curve has one point: Check 14 warns, the
    // publisher's escalation follows the header once, and the signer is
    // still told what blocks.
    assert_eq!(
        verdict.checks[14].result,
        Outcome::Warn,
        "{:?}",
        verdict.checks[14]
    );
    assert!(body.contains(&format!(
        "{}\n\n{}",
        render::REJECTED_HEADER,
        render::PARETO_ESCALATION
    )));
    assert_eq!(body.matches("@functionstackx").count(), 1);
    assert!(
        body.contains(
            "\n\n@Ankur-singh this sign-off is blocked by Check 3 (Recipe link), Check 5 (Latest checklist)."
        )
    );
    assert!(body.find("⚠️ Check 14 (Pareto coverage): WARN").unwrap() < folded_at);
    // Passing rows are folded, blank-line separated, without `open`.
    assert!(body.contains("\n\n✅ Check 0 (CODEOWNER): PASS"));
    assert!(!body.contains("<details open"));
}

#[test]
fn hostile_signoff_text_is_never_echoed_as_markup() {
    let Some(dir) = fixtures() else { return };
    let mut evidence = seed_evidence(&dir);
    evidence.changed_files.push(added(
        "benchmarks/single_node/@everyone <img src=x onerror=alert(1)>.sh",
        "vllm serve x --hf-overrides '{}'\n",
    ));
    let verdict = verify(&evidence).unwrap().unwrap();
    let body = render::comment(
        ContractVersion::Checks0To10,
        &verdict,
        SignoffKind::IssueComment,
        1,
    );
    assert!(!body.contains("@everyone"));
    assert!(!body.contains("<img"));
}

#[test]
fn the_frontier_keeps_rising_throughput_and_plateaus_once_per_point() {
    use klaud_signoff::checks::frontier_count;
    // x = E2EL, y = throughput per GPU; (3, 15) and (4, 25) are dominated,
    // (5, 30) is a plateau at a new x, the repeated point counts once.
    let points = [
        (1.0, 10.0),
        (2.0, 20.0),
        (3.0, 15.0),
        (4.0, 30.0),
        (4.0, 25.0),
        (5.0, 30.0),
        (5.0, 30.0),
    ];
    assert_eq!(frontier_count(&points), 4);
    assert_eq!(frontier_count(&[]), 0);
    // Seven measured concurrencies whose throughput falls with latency
    // make a frontier of one point.
    let falling: Vec<(f64, f64)> = (1..=7).map(|i| (i as f64, 100.0 - i as f64)).collect();
    assert_eq!(frontier_count(&falling), 1);
}

fn with_recipe(evidence: &mut Evidence, link: &str) {
    evidence.changed_files.push(added(
        "benchmarks/single_node/minimaxm3_fp4_b300_vllm.sh",
        "vllm serve $MODEL --tensor-parallel-size 4\n",
    ));
    evidence.signoff.body = evidence.signoff.body.replace(
        "### Additional detail section:\n",
        &format!("### Additional detail section:\n- Recipe: {link}\n"),
    );
}

#[test]
fn check_3_of_the_843c6254_contract_requires_the_linked_recipe_merged() {
    use klaud_signoff::evidence::RecipePull;
    let Some(dir) = fixtures() else { return };
    let link = "https://github.com/vllm-project/recipes/pull/312";
    let mut evidence = seed_evidence(&dir);
    with_recipe(&mut evidence, link);
    // The 0-10 contract asks for a link whose arguments match, not a merge.
    let (outcome, reason) = outcome_of(&evidence, 3);
    assert_eq!(outcome, Outcome::Warn, "{reason}");

    evidence.default_branch.prompt = Some(read(
        &dir,
        "signoff/843c6254/.github/codeowner-signoff-verify-prompt.md",
    ));
    let (outcome, reason) = outcome_of(&evidence, 3);
    assert_eq!(outcome, Outcome::Fail);
    assert!(
        reason.contains("merge state of vllm-project/recipes#312 was not read"),
        "{reason}"
    );

    let pull = |state: &str, draft: bool, merged_at: Option<&str>| {
        Ok(RecipePull {
            state: state.into(),
            draft,
            merged_at: merged_at.map(str::to_owned),
        })
    };
    for (state, draft, words) in [
        ("open", false, "is open, not merged"),
        ("open", true, "is a draft, not merged"),
        ("closed", false, "is closed without merging, not merged"),
    ] {
        evidence
            .recipe_pulls
            .insert(link.into(), pull(state, draft, None));
        let (outcome, reason) = outcome_of(&evidence, 3);
        assert_eq!(outcome, Outcome::Fail, "{reason}");
        assert!(reason.contains(words), "{reason}");
    }
    evidence.recipe_pulls.insert(
        link.into(),
        Err(klaud_signoff::evidence::RecipePullUnreadable::Hidden { status: 404 }),
    );
    let (outcome, reason) = outcome_of(&evidence, 3);
    assert_eq!(outcome, Outcome::Fail);
    assert!(
        reason.contains("cannot be verified (GitHub answers 404"),
        "{reason}"
    );

    evidence.recipe_pulls.insert(
        link.into(),
        pull("closed", false, Some("2026-08-01T10:00:00Z")),
    );
    let verdict = verify(&evidence).unwrap().unwrap();
    let check = &verdict.checks[3];
    assert_eq!(check.result, Outcome::Warn, "{check:?}");
    assert!(check.reason.contains("is merged upstream"), "{check:?}");
    assert!(
        check
            .evidence
            .iter()
            .any(|e| e == "vllm-project/recipes#312: merged at 2026-08-01T10:00:00Z")
    );

    // A published page counts as merged documentation; a bare commit not.
    let mut page = seed_evidence(&dir);
    page.default_branch.prompt = evidence.default_branch.prompt.clone();
    with_recipe(&mut page, "https://recipes.vllm.ai/MiniMax/MiniMax-M3");
    assert_eq!(outcome_of(&page, 3).0, Outcome::Warn);
    let mut commit = seed_evidence(&dir);
    commit.default_branch.prompt = evidence.default_branch.prompt.clone();
    with_recipe(
        &mut commit,
        "https://github.com/vllm-project/recipes/commit/0123abc",
    );
    let (outcome, reason) = outcome_of(&commit, 3);
    assert_eq!(outcome, Outcome::Fail);
    assert!(reason.contains("bare branch, file or commit"), "{reason}");
}

#[test]
fn check_3_of_the_newer_contract_covers_multi_node_and_dynamo_too() {
    let Some(dir) = fixtures() else { return };
    let mut evidence = seed_evidence(&dir);
    // The seed is a disaggregated Dynamo-vLLM submission: N/A before,
    // in scope for the newer contract.
    assert_eq!(outcome_of(&evidence, 3).0, Outcome::NotApplicable);
    evidence.default_branch.prompt = Some(read(
        &dir,
        "signoff/newer/.github/codeowner-signoff-verify-prompt.md",
    ));
    let (outcome, reason) = outcome_of(&evidence, 3);
    assert_eq!(outcome, Outcome::Fail, "{reason}");
    assert!(
        reason.contains("affected vLLM/SGLang serving configurations"),
        "{reason}"
    );
}

#[test]
fn the_newer_scope_needs_no_signoff_where_only_core_and_admins_own() {
    let Some(dir) = fixtures() else { return };
    let mut evidence = seed_evidence(&dir);
    evidence.default_branch.prompt = Some(read(
        &dir,
        "signoff/newer/.github/codeowner-signoff-verify-prompt.md",
    ));
    evidence.default_branch.checklist =
        Some(read(&dir, "signoff/newer/docs/PR_REVIEW_CHECKLIST.md"));
    // The fixture's CODEOWNERS names the core team as InferenceX/core.
    evidence.repo = "InferenceX/InferenceX".into();
    evidence.owner_admins = ["ankur-singh".to_owned(), "kedarpotdar-nv".to_owned()].into();
    assert_eq!(verify(&evidence).unwrap(), Err(GateRefusal::NotRequired));

    // One owner of the NVIDIA master config who is not an admin: the
    // sign-off is verified, and Check 0 names what needed no sign-off.
    evidence.owner_admins = ["kedarpotdar-nv".to_owned()].into();
    let verdict = verify(&evidence).unwrap().unwrap();
    let check = &verdict.checks[0];
    assert_eq!(check.result, Outcome::Pass, "{check:?}");
    assert!(
        check
            .reason
            .contains("owned only by the core team or repository admins"),
        "{check:?}"
    );

    // The older contracts have no such scope: the core team's paths are
    // catch-all ones any CODEOWNER covers.
    evidence.default_branch.prompt = Some(read(
        &dir,
        "signoff/7abe6612/.github/codeowner-signoff-verify-prompt.md",
    ));
    evidence.default_branch.checklist =
        Some(read(&dir, "signoff/7abe6612/docs/PR_REVIEW_CHECKLIST.md"));
    evidence.owner_admins = ["ankur-singh".to_owned(), "kedarpotdar-nv".to_owned()].into();
    assert!(verify(&evidence).unwrap().is_ok());
}

#[test]
#[ignore = "prints the seed's rendered verdict for a reviewer"]
fn print_seed_verdict() {
    let Some(dir) = fixtures() else { return };
    let verdict = verify(&seed_evidence(&dir)).unwrap().unwrap();
    println!(
        "{}",
        render::comment(
            ContractVersion::Checks0To10,
            &verdict,
            SignoffKind::IssueComment,
            1
        )
    );
}
