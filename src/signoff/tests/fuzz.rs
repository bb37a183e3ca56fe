//! Fuzzing on stable: property tests that feed the sign-off
//! verifier hostile bodies, comments, CODEOWNERS files, diffs, eval
//! artifacts and master configs, built from mutations of the repository's
//! own files in all three contract versions, and assert that nothing
//! panics, every published verdict stays bounded, and nothing a PR author
//! wrote reaches the verdict as a mention, HTML or a Markdown link.
//!
//! Targets (each a `fuzz_*` test):
//! - the whole verification ([`verify`] and [`render::comment`]) of a
//!   mutated sign-off against a mutated pull request;
//! - the checklist reader ([`checklist::signoff_items`],
//!   [`checklist::compare`]) on arbitrary text;
//! - the CODEOWNERS reader on mutated and arbitrary text;
//! - the eval artifact reader ([`evidence::parse_agg_eval`]) on arbitrary
//!   bytes and mutated rows.
//!
//! The default case count keeps CI fast (a few seconds per target). A longer
//! run:
//!
//! ```text
//! PROPTEST_CASES=20000 cargo test -p klaud-signoff --test fuzz
//! ```
//!
//! The repository's files are read in place from
//! `../shared/fixtures/inferencex/` (never copied in): without them these
//! targets skip loudly, and fail when `CI` is set.

mod common;

use common::fixtures;
use std::collections::BTreeMap;
use std::sync::OnceLock;

use klaud_signoff::codeowners::Codeowners;
use klaud_signoff::evidence::{
    ChangedFile, CheckRunFact, CommentFact, DefaultBranchFiles, EvalFact, Evidence, PullFacts,
    Signer, Signoff, SignoffKind, default_eval_bars, parse_agg_eval,
};
use klaud_signoff::{ContractVersion, MAX_SIGNOFF_BYTES, checklist, render, verify};
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
        max_shrink_iters: 1024,
        ..Config::default()
    }
}

/// What a hostile author plants; none of it may reach a verdict as written.
const PLANTED: [&str; 6] = [
    "@fuzz-victim",
    "<script>alert(1)</script>",
    "</details>",
    "[click](https://evil.example/x)",
    "<img src=x onerror=alert(1)>",
    "| forged | row |",
];

/// The three contract versions' files: (prompt, checklist, CODEOWNERS).
struct Version {
    prompt: String,
    checklist: String,
    codeowners: String,
}

struct Seeds {
    versions: Vec<Version>,
    master: String,
    models_md: String,
}

fn seeds() -> Option<&'static Seeds> {
    static SEEDS: OnceLock<Option<Seeds>> = OnceLock::new();
    SEEDS
        .get_or_init(|| {
            let dir = fixtures()?;
            let read = |path: &str| {
                std::fs::read_to_string(dir.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
            };
            let owners = read("signoff/newer/.github/CODEOWNERS");
            let versions = ["7abe6612", "843c6254", "newer"]
                .iter()
                .map(|v| Version {
                    prompt: read(&format!(
                        "signoff/{v}/.github/codeowner-signoff-verify-prompt.md"
                    )),
                    checklist: read(&format!("signoff/{v}/docs/PR_REVIEW_CHECKLIST.md")),
                    codeowners: if *v == "843c6254" {
                        read("signoff/843c6254/.github/CODEOWNERS")
                    } else {
                        owners.clone()
                    },
                })
                .collect();
            // One family of the real master is enough to exercise the
            // master checks; the whole file would slow every case.
            let nvidia = read("full/configs/nvidia-master.yaml");
            let master = nvidia
                .split("\n\n")
                .take(3)
                .collect::<Vec<_>>()
                .join("\n\n");
            Some(Seeds {
                versions,
                master,
                models_md: read("full/MODELS.md"),
            })
        })
        .as_ref()
}

/// A text mutated line by line: lines dropped, duplicated, cut, or replaced
/// by hostile text.
fn mutate(text: &str, edits: &[(usize, u8, String)]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    for (at, how, junk) in edits {
        if lines.is_empty() {
            lines.push(junk.clone());
            continue;
        }
        let i = at % lines.len();
        match how % 6 {
            0 => {
                lines.remove(i);
            }
            1 => {
                let copy = lines[i].clone();
                lines.insert(i, copy);
            }
            2 => {
                let cut = lines[i].char_indices().nth(junk.len() % 40).map(|(b, _)| b);
                if let Some(b) = cut {
                    lines[i].truncate(b);
                }
            }
            3 => lines[i].push_str(junk),
            4 => lines.insert(i, junk.clone()),
            _ => lines[i] = lines[i].replace("[x]", "[ ]"),
        }
    }
    lines.join("\n")
}

/// The template's items, all ticked: a sign-off as a CODEOWNER writes it.
fn ticked(checklist_md: &str) -> String {
    let mut body =
        String::from("As a PR reviewer and CODEOWNER, I have reviewed this and have:\n\n");
    for line in checklist_md.lines() {
        body.push_str(&line.replace("- [ ]", "- [x]"));
        body.push('\n');
    }
    body
}

fn hostile_text() -> impl Strategy<Value = String> {
    prop_oneof![
        (0..PLANTED.len()).prop_map(|i| PLANTED[i].to_owned()),
        "\\PC{0,80}",
        "[@<>\\[\\]()|`*_~!&#\n -]{0,60}",
        Just("As a PR reviewer and CODEOWNER".to_owned()),
    ]
}

fn edits() -> impl Strategy<Value = Vec<(usize, u8, String)>> {
    prop::collection::vec((any::<usize>(), any::<u8>(), hostile_text()), 0..12)
}

#[derive(Debug)]
struct Case {
    version: usize,
    body_edits: Vec<(usize, u8, String)>,
    owners_edits: Vec<(usize, u8, String)>,
    patch: String,
    path: String,
    comment: String,
    eval: Vec<u8>,
    score: f64,
    kind: u8,
    draft: bool,
    permission: u8,
}

fn cases() -> impl Strategy<Value = Case> {
    (
        0..3usize,
        edits(),
        edits(),
        prop::collection::vec(hostile_text(), 0..6),
        (hostile_text(), 0..PLANTED.len()).prop_map(|(t, i)| format!("{t}{}", PLANTED[i])),
        hostile_text(),
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..200),
            hostile_text().prop_map(|t| format!(
                "[{{\"task\": {t:?}, \"score\": 0.9, \"score_name\": \"em_strict\"}}]"
            )
            .into_bytes()),
        ],
        prop_oneof![Just(f64::NAN), Just(f64::INFINITY), -2.0..2.0f64],
        any::<u8>(),
        any::<bool>(),
        any::<u8>(),
    )
        .prop_map(
            |(
                version,
                body_edits,
                owners_edits,
                patch,
                path,
                comment,
                eval,
                score,
                kind,
                draft,
                permission,
            )| {
                Case {
                    version,
                    body_edits,
                    owners_edits,
                    patch: patch.join("\n"),
                    path,
                    comment,
                    eval,
                    score,
                    kind,
                    draft,
                    permission,
                }
            },
        )
}

const HEAD: &str = "30be9347c0ffee0000000000000000000000beef";
const RUN: u64 = 29358158271;

fn evidence(seeds: &Seeds, case: &Case) -> Evidence {
    let version = &seeds.versions[case.version];
    let body = mutate(&ticked(&version.checklist), &case.body_edits);
    let patch: String = case
        .patch
        .lines()
        .chain(["--hf-overrides '{}'", "image: vllm/vllm-openai:v0.11.0"])
        .map(|l| format!("+{l}\n"))
        .collect();
    let kind = match case.kind % 3 {
        0 => SignoffKind::IssueComment,
        1 => SignoffKind::Review,
        _ => SignoffKind::ReviewComment,
    };
    let permission = ["admin", "write", "read", "maintain", "<b>x</b>"]
        [usize::from(case.permission) % 5]
        .to_owned();
    let eval_rows = parse_agg_eval(&case.eval)
        .map_err(|e| e.to_string())
        .map(|mut rows| {
            rows.push(EvalFact {
                task: "gsm8k".into(),
                score: Some(case.score),
                score_name: "em_strict".into(),
                label: case.comment.clone(),
                image: Some(case.comment.clone()),
            });
            rows
        });
    Evidence {
        repo: "SemiAnalysisAI/InferenceX".into(),
        pull: PullFacts {
            number: 2184,
            open: true,
            draft: case.draft,
            title: case.comment.clone(),
            body: case.comment.clone(),
        },
        head_sha: HEAD.into(),
        signoff: Signoff {
            kind,
            id: 4_200_000_001,
            author: "Ankur-singh".into(),
            body: body.chars().take(MAX_SIGNOFF_BYTES).collect(),
            edited: None,
        },
        signer: Signer {
            login: "Ankur-singh".into(),
            user_type: "User".into(),
            permission: permission.clone(),
            role_name: Some(permission),
        },
        default_branch: DefaultBranchFiles {
            prompt: Some(version.prompt.clone()),
            checklist: Some(version.checklist.clone()),
            models_md: Some(seeds.models_md.clone()),
            golden_al: BTreeMap::new(),
            waivers: vec![format!("docs/waiver/{}.md", case.comment)],
        },
        codeowners: Some(mutate(&version.codeowners, &case.owners_edits)),
        team_membership: BTreeMap::new(),
        owner_admins: [case.comment.to_ascii_lowercase(), "ankur-singh".to_owned()].into(),
        recipe_pulls: BTreeMap::from([(
            "https://github.com/vllm-project/recipes/pull/1".to_owned(),
            Ok(klaud_signoff::evidence::RecipePull {
                state: case.comment.clone(),
                draft: case.draft,
                merged_at: Some(case.comment.clone()),
            }),
        )]),
        benchmarks: BTreeMap::from([(
            RUN,
            klaud_signoff::evidence::parse_agg_bmk(&case.eval).map_err(|e| e.to_string()),
        )]),
        changed_files: vec![
            ChangedFile {
                path: "configs/nvidia-master.yaml".into(),
                previous_path: None,
                status: "modified".into(),
                patch: Some(patch.clone()),
                head_text: Some(format!("{}\n{}", seeds.master, case.patch)),
            },
            ChangedFile {
                path: case.path.clone(),
                previous_path: Some(case.comment.clone()),
                status: case.comment.clone(),
                patch: Some(patch),
                head_text: None,
            },
        ],
        masters_base: BTreeMap::from([("configs/nvidia-master.yaml".into(), seeds.master.clone())]),
        masters_head: BTreeMap::from([(
            "configs/nvidia-master.yaml".into(),
            format!("{}\n{}", seeds.master, case.patch),
        )]),
        pr_commits: vec![HEAD.into()],
        check_runs: vec![CheckRunFact {
            sha: HEAD.into(),
            name: case.comment.clone(),
            status: "completed".into(),
            conclusion: Some("success".into()),
            run_id: Some(RUN),
        }],
        evals: BTreeMap::from([(RUN, eval_rows)]),
        run_commits: BTreeMap::from([(RUN, HEAD.into())]),
        comments: vec![CommentFact {
            login: case.comment.clone(),
            author_association: case.comment.clone(),
            body: format!("/reuse-sweep-run {RUN} {}", case.comment),
        }],
        eval_bars: default_eval_bars(),
    }
}

/// Nothing planted in the author's text reaches the verdict as written:
/// the only HTML is the verdict's own, every mention but the signer's
/// is broken, and no planted link or table row survives.
fn assert_nothing_planted(rendered: &str) {
    for planted in PLANTED {
        if planted == "</details>" {
            continue;
        }
        assert!(
            !rendered.contains(planted),
            "{planted:?} echoed into the verdict:\n{rendered}"
        );
    }
    let mut markup = rendered.to_owned();
    for own in [
        "<!-- codeowner-signoff-verify",
        "<details>",
        "</details>",
        "<summary>",
        "</summary>",
    ] {
        markup = markup.replace(own, "");
    }
    assert!(
        !markup.contains('<'),
        "HTML that is not the verdict's own:\n{rendered}"
    );
    // The blocking line mentions the signer on purpose; every other `@`
    // carries a word joiner so GitHub notifies nobody.
    let unbroken = rendered
        .match_indices('@')
        .filter(|(at, _)| !rendered[at + 1..].starts_with('\u{2060}'))
        .filter(|(at, _)| !rendered[at + 1..].starts_with("Ankur-singh this sign-off"))
        .count();
    assert_eq!(unbroken, 0, "a live mention in the verdict:\n{rendered}");
    assert!(
        rendered.matches("</details>").count() <= rendered.matches("<details>").count(),
        "a planted </details> closes the verdict's group:\n{rendered}"
    );
}

proptest! {
    #![proptest_config(config(300))]

    #[test]
    fn fuzz_verification_of_a_hostile_signoff(case in cases()) {
        let Some(seeds) = seeds() else { return Ok(()) };
        let evidence = evidence(seeds, &case);
        let version = ContractVersion::detect(evidence.default_branch.prompt.as_deref())
            .expect("the repository's prompts are detected");
        // A refused gate or a missing contract publishes no verdict.
        if let Ok(Ok(verdict)) = verify(&evidence) {
            let rendered = render::comment(
                version,
                &verdict,
                evidence.signoff.kind,
                evidence.signoff.id,
            );
            // Bounded whatever the author wrote: rows and evidence are
            // cut, never the sign-off copied in.
            prop_assert!(rendered.len() <= 64 * 1024, "{} bytes", rendered.len());
            assert_nothing_planted(&rendered);
            let json = serde_json::to_string(&verdict).expect("JSON");
            prop_assert!(json.len() <= 256 * 1024, "{} bytes of JSON", json.len());
        }
    }

}

proptest! {
    // Unicode text generation dominates these two; fewer, larger cases.
    #![proptest_config(config(100))]

    #[test]
    fn fuzz_checklist_reader(text in "\\PC{0,2000}", edits in edits()) {
        let Some(seeds) = seeds() else { return Ok(()) };
        let template = checklist::template_items(&seeds.versions[2].checklist);
        for body in [text.clone(), mutate(&ticked(&seeds.versions[2].checklist), &edits)] {
            let signed = checklist::signoff_items(&body);
            prop_assert!(signed.len() <= body.lines().count() + 1);
            let _ = checklist::compare(&template, &signed);
            let _ = checklist::detail_section(&body);
        }
    }

    #[test]
    fn fuzz_codeowners_reader(text in "\\PC{0,1500}", edits in edits(), path in "\\PC{0,60}") {
        let Some(seeds) = seeds() else { return Ok(()) };
        for owners in [text.clone(), mutate(&seeds.versions[2].codeowners, &edits)] {
            let parsed = Codeowners::parse(&owners);
            let _ = parsed.owner_rule(&path);
            let _ = parsed.owner_rule("configs/nvidia-master.yaml");
            let _ = parsed.lists_anywhere("Ankur-singh");
        }
    }

}

proptest! {
    #![proptest_config(config(300))]

    #[test]
    fn fuzz_eval_artifact_reader(bytes in prop::collection::vec(any::<u8>(), 0..4096)) {
        if let Ok(rows) = parse_agg_eval(&bytes) {
            prop_assert!(rows.len() <= bytes.len());
        }
    }
}
