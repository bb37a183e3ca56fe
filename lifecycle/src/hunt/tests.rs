use super::*;
use crate::report::markers::{HuntName, MarkerKey};

const CAND: &str = "d92e15065c55779d-0123456789abcdef";

fn digest(i: usize) -> String {
    format!("sha256:{i:064x}")
}

fn tag(name: &str, i: usize) -> HuntTag {
    HuntTag {
        tag: name.to_owned(),
        digest: Some(digest(i)),
        commit: Some(format!("{:040x}", i + 1)),
    }
}

/// A plan over `n` nightlies between `old` and `new`.
fn plan(n: usize, budget: u32) -> HuntPlan {
    HuntPlan {
        version: PLAN_VERSION,
        family: "configs/nvidia-master.yaml:dsr1-fp8-b200-vllm".into(),
        image: "vllm/vllm-openai".into(),
        old: tag("nightly-old", 1000),
        new: tag("nightly-new", 2000),
        tags: (0..n).map(|i| tag(&format!("nightly-{i:02}"), i)).collect(),
        probe: Probe::Metric {
            point: "1k/1k tp8 conc64".into(),
            metric: Metric::Throughput,
            baseline: 100.0,
            band: 0.05,
            at: None,
        },
        budget,
        trigger: Trigger::Regression,
        upstream: Some("vllm-project/vllm".into()),
    }
}

/// Runs a hunt where tags from index `bad_from` on (the new image when
/// `bad_from == n`) are 20% slower; returns the result and the tags tried.
fn run(mut hunt: Hunt, bad_from: usize, week_left: u32) -> (HuntResult, Vec<String>) {
    let mut tried = Vec::new();
    loop {
        let (step, t) = match hunt.next(week_left.saturating_sub(hunt.runs_used()), false) {
            Next::Done(r) => return (r, tried),
            Next::Try { step, tag } => (step, tag.clone()),
        };
        let i = hunt.index_of(&t.tag).expect("a planned tag");
        let value = if i >= bad_from { 80.0 } else { 101.0 };
        let verdict = hunt.verdict_of(true, Some(value));
        tried.push(t.tag.clone());
        hunt.record(StepRecord {
            step,
            tag: t.tag,
            run: Some(100 + u64::from(step)),
            verdict,
            value: Some(value),
            note: String::new(),
        })
        .expect("the step the hunt asked for");
    }
}

#[test]
fn minimum_runs_is_the_binary_search_bound() {
    assert_eq!(minimum_runs(0), 0);
    assert_eq!(minimum_runs(1), 1);
    assert_eq!(minimum_runs(3), 2);
    assert_eq!(minimum_runs(7), 3);
    assert_eq!(minimum_runs(8), 4);
    assert_eq!(minimum_runs(15), 4);
}

#[test]
fn a_regression_at_each_position_of_seven_tags_is_found_in_three_runs() {
    // Positions 0..7: at one of the seven nightlies, or only at the new
    // image (7).
    for bad_from in 0..=7 {
        let (r, tried) = run(Hunt::new(plan(7, 4)).unwrap(), bad_from, 100);
        assert_eq!(r.reason, EndReason::Found, "position {bad_from}");
        assert!(r.is_exact());
        assert_eq!(r.runs, 3, "position {bad_from}: tried {tried:?}");
        assert_eq!(r.minimum, 3);
        let expect_bad = if bad_from == 7 {
            "nightly-new".to_owned()
        } else {
            format!("nightly-{bad_from:02}")
        };
        let expect_good = if bad_from == 0 {
            "nightly-old".to_owned()
        } else {
            format!("nightly-{:02}", bad_from - 1)
        };
        assert_eq!(r.first_bad.tag, expect_bad);
        assert_eq!(r.last_good.tag, expect_good);
        // Never the same tag twice.
        let mut uniq = tried.clone();
        uniq.dedup();
        assert_eq!(uniq.len(), tried.len());
    }
}

#[test]
fn every_range_size_stays_within_the_minimum() {
    for n in 0..=20 {
        for bad_from in 0..=n {
            let (r, _) = run(Hunt::new(plan(n, MAX_BUDGET)).unwrap(), bad_from, 100);
            assert_eq!(r.reason, EndReason::Found);
            assert!(
                r.runs <= minimum_runs(n),
                "n={n} bad={bad_from}: {}",
                r.runs
            );
        }
    }
}

#[test]
fn a_pruned_tag_in_the_middle_is_never_tried_and_the_range_says_so() {
    let mut p = plan(7, 4);
    p.tags[3].digest = None;
    // The regression arrives at nightly-04, right after the pruned one.
    let (r, tried) = run(Hunt::new(p.clone()).unwrap(), 4, 100);
    assert!(!tried.contains(&"nightly-03".to_owned()), "{tried:?}");
    assert_eq!(r.last_good.tag, "nightly-02");
    assert_eq!(r.first_bad.tag, "nightly-04");
    assert_eq!(r.reason, EndReason::TagsGone);
    assert_eq!(r.untested, vec!["nightly-03".to_owned()]);
    assert!(!r.is_exact());
    assert!(r.runs <= minimum_runs(6), "{}", r.runs);
    // Elsewhere the pruned tag does not matter.
    let (r, _) = run(Hunt::new(p).unwrap(), 6, 100);
    assert_eq!(
        (r.last_good.tag.as_str(), r.first_bad.tag.as_str()),
        ("nightly-05", "nightly-06")
    );
    assert!(r.is_exact());
}

#[test]
fn a_tag_gone_during_the_hunt_uses_no_run_and_is_skipped() {
    let mut hunt = Hunt::new(plan(7, 4)).unwrap();
    let Next::Try { step, tag } = hunt.next(10, false) else {
        panic!("a first step");
    };
    assert_eq!((step, tag.tag.as_str()), (1, "nightly-03"));
    hunt.record(StepRecord {
        step: 1,
        tag: "nightly-03".into(),
        run: None,
        verdict: Verdict::Gone,
        value: None,
        note: "manifest unknown".into(),
    })
    .unwrap();
    assert_eq!(hunt.runs_used(), 0);
    let Next::Try { step, tag } = hunt.next(10, false) else {
        panic!("a second step");
    };
    assert_eq!(step, 2);
    assert_ne!(tag.tag, "nightly-03");
}

#[test]
fn infrastructure_failures_retry_a_tag_once_then_skip_it() {
    let mut hunt = Hunt::new(plan(3, 8)).unwrap();
    for step in 1..=2 {
        let Next::Try { tag, .. } = hunt.next(10, false) else {
            panic!("a step");
        };
        assert_eq!(tag.tag, "nightly-01");
        hunt.record(StepRecord {
            step,
            tag: "nightly-01".into(),
            run: Some(u64::from(step)),
            verdict: Verdict::Infra,
            value: None,
            note: String::new(),
        })
        .unwrap();
    }
    assert_eq!(hunt.runs_used(), 2);
    let Next::Try { tag, .. } = hunt.next(10, false) else {
        panic!("a step");
    };
    assert_ne!(tag.tag, "nightly-01");
}

#[test]
fn the_budget_ends_the_hunt_with_the_narrowest_range() {
    // 15 tags need 4 runs; a budget of 2 leaves a range of three tags.
    let (r, tried) = run(Hunt::new(plan(15, 2)).unwrap(), 5, 100);
    assert_eq!(r.reason, EndReason::Budget);
    assert_eq!(r.runs, 2);
    assert_eq!(tried, vec!["nightly-07", "nightly-03"]);
    assert_eq!(r.last_good.tag, "nightly-03");
    assert_eq!(r.first_bad.tag, "nightly-07");
    assert_eq!(r.untested, vec!["nightly-04", "nightly-05", "nightly-06"]);
    // The week's budget ends it the same way.
    let (r, _) = run(Hunt::new(plan(15, 8)).unwrap(), 5, 1);
    assert_eq!(r.reason, EndReason::WeeklyBudget);
    assert_eq!(r.runs, 1);
}

#[test]
fn a_stop_ends_the_hunt_where_it_is() {
    let mut hunt = Hunt::new(plan(7, 4)).unwrap();
    hunt.record(StepRecord {
        step: 1,
        tag: "nightly-03".into(),
        run: Some(1),
        verdict: Verdict::Good,
        value: Some(100.0),
        note: String::new(),
    })
    .unwrap();
    let Next::Done(r) = hunt.next(10, true) else {
        panic!("stopped");
    };
    assert_eq!(r.reason, EndReason::Stopped);
    assert_eq!(r.last_good.tag, "nightly-03");
    assert_eq!(r.first_bad.tag, "nightly-new");
    assert_eq!(r.untested.len(), 3);
}

#[test]
fn a_step_that_does_not_follow_is_refused() {
    let mut hunt = Hunt::new(plan(7, 4)).unwrap();
    let step = |k: u32, t: &str| StepRecord {
        step: k,
        tag: t.into(),
        run: Some(1),
        verdict: Verdict::Bad,
        value: None,
        note: String::new(),
    };
    let e = hunt.record(step(2, "nightly-03")).unwrap_err();
    assert!(e.to_string().contains("expected step 1"), "{e}");
    let e = hunt.record(step(1, "nightly-05")).unwrap_err();
    assert!(
        e.to_string().contains("not the one the search picks"),
        "{e}"
    );
    hunt.record(step(1, "nightly-03")).unwrap();
}

#[test]
fn hostile_plans_are_refused_naming_the_field() {
    type Change = Box<dyn Fn(&mut HuntPlan)>;
    let cases: Vec<(Change, &str)> = vec![
        (Box::new(|p| p.version = 9), "version"),
        (Box::new(|p| p.budget = 0), "budget"),
        (Box::new(|p| p.budget = 99), "budget"),
        (Box::new(|p| p.tags[1].tag = "nightly-00".into()), "tags[1]"),
        (Box::new(|p| p.tags[2].tag = "a b".into()), "tags[2]"),
        (
            Box::new(|p| p.tags[2].digest = Some("md5".into())),
            "tags[2].digest",
        ),
        (Box::new(|p| p.old.commit = Some("zz".into())), "old.commit"),
        (Box::new(|p| p.new.tag = "nightly-old".into()), "new"),
        (
            Box::new(|p| p.tags = (0..200).map(|i| tag(&format!("t{i}"), i)).collect()),
            "tags",
        ),
        (
            Box::new(|p| {
                p.probe = Probe::Metric {
                    point: "x".into(),
                    metric: Metric::Ttft,
                    baseline: f64::NAN,
                    band: 0.1,
                    at: None,
                }
            }),
            "probe.baseline",
        ),
        (Box::new(|p| p.upstream = Some("nope".into())), "upstream"),
    ];
    for (change, field) in cases {
        let mut p = plan(3, 4);
        change(&mut p);
        let e = Hunt::new(p).unwrap_err().to_string();
        assert!(e.contains(&format!("field `{field}`")), "{field}: {e}");
    }
}

#[test]
fn judging_uses_the_direction_of_the_metric_and_the_band() {
    assert_eq!(judge(Metric::Throughput, 96.0, 100.0, 0.05), Verdict::Good);
    assert_eq!(judge(Metric::Throughput, 94.0, 100.0, 0.05), Verdict::Bad);
    assert_eq!(judge(Metric::Throughput, 300.0, 100.0, 0.05), Verdict::Good);
    assert_eq!(judge(Metric::Ttft, 104.0, 100.0, 0.05), Verdict::Good);
    assert_eq!(judge(Metric::Tpot, 106.0, 100.0, 0.05), Verdict::Bad);
    assert_eq!(judge(Metric::Tpot, f64::NAN, 100.0, 0.05), Verdict::Bad);
    assert_eq!(noise_band(&[], 0.05, 0.01), 0.05);
    assert_eq!(noise_band(&[100.0, 101.0], 0.05, 0.01), 0.05);
    let band = noise_band(&[100.0, 103.0, 97.0, f64::NAN], 0.05, 0.01);
    assert!((band - 0.06).abs() < 1e-9, "{band}");
    assert_eq!(noise_band(&[100.0, 100.0, 100.0], 0.05, 0.01), 0.01);
}

fn key(name: HuntName, owner_run: u64) -> MarkerKey {
    MarkerKey::Hunt {
        owner_run,
        candidate: CandidateId::new(CAND).unwrap(),
        name,
    }
}

#[test]
fn a_hunt_is_rebuilt_from_its_comments_and_resumes_at_the_same_step() {
    let p = plan(7, 4);
    let mut comments = vec![
        "LGTM".to_owned(),
        render_plan(&key(HuntName::Plan { hunt: 1 }, 5), &p),
    ];
    let mut hunt = Hunt::new(p.clone()).unwrap();
    // Two steps recorded, then a crash.
    for _ in 0..2 {
        let Next::Try { step, tag } = hunt.next(10, false) else {
            panic!("a step");
        };
        let s = StepRecord {
            step,
            tag: tag.tag.clone(),
            run: Some(u64::from(step)),
            verdict: Verdict::Good,
            value: Some(100.0),
            note: String::new(),
        };
        comments.push(render_step(
            &key(HuntName::Step { hunt: 1, step }, 5),
            &p,
            &s,
        ));
        hunt.record(s).unwrap();
    }
    // A retried write published step 2 twice.
    comments.push(comments.last().unwrap().clone());
    let cand = CandidateId::new(CAND).unwrap();
    let rebuilt = Hunt::from_comments(&cand, comments.iter().map(String::as_str))
        .unwrap()
        .expect("a hunt");
    assert_eq!(rebuilt.number, 1);
    assert_eq!(rebuilt.hunt, hunt);
    assert_eq!(rebuilt.ended, None);
    // The same next step as before the crash: no run repeated.
    assert_eq!(rebuilt.hunt.next(10, false), hunt.next(10, false));
    let Next::Try { step, .. } = rebuilt.hunt.next(10, false) else {
        panic!("a third step");
    };
    assert_eq!(step, 3);
    // A newer hunt (started again after a stop) is the one rebuilt.
    comments.push(render_plan(&key(HuntName::Plan { hunt: 2 }, 6), &p));
    let rebuilt = Hunt::from_comments(&cand, comments.iter().map(String::as_str))
        .unwrap()
        .unwrap();
    assert_eq!((rebuilt.number, rebuilt.hunt.steps().len()), (2, 0));
    // No hunt at all.
    assert_eq!(Hunt::from_comments(&cand, ["LGTM"]).unwrap(), None);
}

#[test]
fn forged_or_conflicting_records_are_errors() {
    let p = plan(7, 4);
    let cand = CandidateId::new(CAND).unwrap();
    let plan_c = render_plan(&key(HuntName::Plan { hunt: 1 }, 5), &p);
    let wrong = StepRecord {
        step: 1,
        tag: "nightly-06".into(),
        run: Some(1),
        verdict: Verdict::Bad,
        value: None,
        note: String::new(),
    };
    let step_c = render_step(&key(HuntName::Step { hunt: 1, step: 1 }, 5), &p, &wrong);
    let e = Hunt::from_comments(&cand, [plan_c.as_str(), step_c.as_str()]).unwrap_err();
    assert!(e.to_string().contains("hunt step 1"), "{e}");
    let mut other = p.clone();
    other.budget = 3;
    let plan_d = render_plan(&key(HuntName::Plan { hunt: 1 }, 5), &other);
    let e = Hunt::from_comments(&cand, [plan_c.as_str(), plan_d.as_str()]).unwrap_err();
    assert!(e.to_string().contains("different record"), "{e}");
    let bad_json = format!("<!-- klaud-hunt:5:{CAND}:h1-plan\n{{\"version\":1}}\n-->");
    let e = Hunt::from_comments(&cand, [bad_json.as_str()]).unwrap_err();
    assert!(e.to_string().contains("h1-plan"), "{e}");
    let unterminated = format!("<!-- klaud-hunt:5:{CAND}:h1-step-1\n{{}}");
    let e = Hunt::from_comments(&cand, [plan_c.as_str(), unterminated.as_str()]).unwrap_err();
    assert!(e.to_string().contains("h1-step-1"), "{e}");
    // Another kind's malformed record does not stop the hunt.
    let other = format!("<!-- klaud-report:5:{CAND}:baseline\n{{}}");
    let rebuilt = Hunt::from_comments(&cand, [plan_c.as_str(), other.as_str()]).unwrap();
    assert!(rebuilt.is_some());
}

#[test]
fn reports_say_the_range_the_compare_link_and_the_engine_commits_in_both_languages() {
    let p = plan(7, 4);
    let (mut r, _) = run(Hunt::new(p.clone()).unwrap(), 4, 100);
    let engines = klaud_planner::audit::default_engines();
    let files_a = vec![
        "vllm/engine/arg_utils.py".to_owned(),
        "docs/x.md".to_owned(),
    ];
    let files_b = vec!["README.md".to_owned()];
    let (a, b) = ("a".repeat(40), "b".repeat(40));
    r.commits = engine_commits(
        "vllm-project/vllm",
        &engines,
        vec![
            (
                a.as_str(),
                "Drop --foo\n\nsecret-detail",
                files_a.as_slice(),
            ),
            (b.as_str(), "docs", files_b.as_slice()),
        ],
    );
    assert_eq!(r.commits.len(), 1);
    assert_eq!(r.commits[0].paths, vec!["vllm/engine/arg_utils.py"]);
    let body = render_end(&key(HuntName::End { hunt: 1 }, 5), &p, &r);
    assert!(body.contains("first bad: `nightly-04`"), "{body}");
    assert!(body.contains("Last good: `nightly-03`"), "{body}");
    assert!(body.contains(&format!(
        "https://github.com/vllm-project/vllm/compare/{:040x}...{:040x}",
        4, 5
    )));
    assert!(body.contains("Drop --foo") && !body.contains("secret-detail"));
    assert!(body.contains("第一个出问题：`nightly-04`"), "{body}");
    assert!(body.contains("GPU runs used: 3 (a binary search needs 3)"));
    let back = Hunt::from_comments(
        &CandidateId::new(CAND).unwrap(),
        [
            render_plan(&key(HuntName::Plan { hunt: 1 }, 5), &p).as_str(),
            body.as_str(),
        ],
    )
    .unwrap()
    .unwrap();
    assert_eq!(back.ended, Some(r));
}

#[test]
fn settings_are_off_by_default_and_match_family_patterns() {
    let family = "configs/nvidia-master.yaml:dsr1-fp8-b200-vllm";
    assert!(!HuntSettings::default().applies(family));
    let on = |families: &[&str]| HuntSettings {
        enabled: true,
        families: families.iter().map(|f| (*f).to_owned()).collect(),
        ..HuntSettings::default()
    };
    assert!(on(&["*"]).applies(family));
    assert!(on(&["*-vllm"]).applies(family));
    assert!(on(&["configs/nvidia-*:*"]).applies(family));
    assert!(!on(&["*-sglang"]).applies(family));
    assert!(!on(&["configs/amd-*:*"]).applies(family));
    assert!(!on(&[]).applies(family));
}

mod between {
    use super::super::tags::{ServedTag, tags_between};
    use chrono::{TimeZone, Utc};
    use klaud_planner::tracks::infer_track;

    fn sha(i: u8) -> String {
        format!("{:02x}", i).repeat(20)
    }

    fn served(tag: &str, day: Option<u32>, digest: bool) -> ServedTag {
        ServedTag {
            tag: tag.to_owned(),
            digest: digest.then(|| format!("sha256:{}", "ab".repeat(32))),
            revision: None,
            time: day.map(|d| Utc.with_ymd_and_hms(2026, 11, d, 10, 0, 0).unwrap()),
        }
    }

    #[test]
    fn a_push_ordered_nightly_track_is_ordered_by_the_registry_clock() {
        let old = served(&format!("nightly-{}", sha(1)), Some(1), true);
        let new = served(&format!("nightly-{}", sha(9)), Some(20), true);
        let track = infer_track(&old.tag).expect("a nightly track");
        let mut labelled = served(&format!("nightly-{}", sha(5)), Some(8), true);
        labelled.revision = Some(sha(55).to_uppercase());
        let list = vec![
            served(&format!("nightly-{}", sha(3)), Some(12), true),
            served(&format!("nightly-{}", sha(2)), Some(5), false),
            labelled,
            served("v0.26.0", Some(6), true),
            served("latest", Some(7), true),
            // No clock: cannot be placed.
            served(&format!("nightly-{}", sha(4)), None, true),
            // Before the old and after the new image.
            served(&format!("nightly-{}", sha(6)), Some(1), true),
            served(&format!("nightly-{}", sha(7)), Some(25), true),
            old.clone(),
            new.clone(),
        ];
        let tags = tags_between(&track, &old, &new, &list).unwrap();
        let names: Vec<&str> = tags.iter().map(|t| t.tag.as_str()).collect();
        assert_eq!(
            names,
            vec![
                format!("nightly-{}", sha(2)),
                format!("nightly-{}", sha(5)),
                format!("nightly-{}", sha(3))
            ]
        );
        // A pruned tag stays in the range, never to be tried.
        assert_eq!(tags[0].digest, None);
        // The revision label wins over the commit the tag names.
        assert_eq!(tags[1].commit.as_deref(), Some(sha(55).as_str()));
        // Unlabelled, the commit is what the track reads from the tag (the
        // inferred push-ordered track captures none).
        let from_tag = track.matches(&tags[2].tag).unwrap().commit;
        assert_eq!(tags[2].commit, from_tag);
        // The ends the other way round are refused, naming the field.
        let e = tags_between(&track, &new, &old, &list)
            .unwrap_err()
            .to_string();
        assert!(e.contains("field `new`"), "{e}");
        let e = tags_between(&track, &served("latest", Some(2), true), &new, &list)
            .unwrap_err()
            .to_string();
        assert!(e.contains("field `old`"), "{e}");
    }

    #[test]
    fn a_dated_track_is_ordered_by_its_dates() {
        let old = served("v0.5.17-rocm720-mi35x-20260801", Some(1), true);
        let new = served("v0.5.17-rocm720-mi35x-20260820", Some(2), true);
        let track = infer_track(&old.tag).expect("a dated track");
        let list = vec![
            served("v0.5.17-rocm720-mi35x-20260810", Some(3), true),
            served("v0.5.17-rocm720-mi35x-20260805", Some(4), true),
            served("v0.5.17-rocm720-mi30x-20260806", Some(4), true),
            served("v0.5.17-rocm720-mi35x-20260825", Some(4), true),
        ];
        let tags = tags_between(&track, &old, &new, &list).unwrap();
        let names: Vec<&str> = tags.iter().map(|t| t.tag.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "v0.5.17-rocm720-mi35x-20260805",
                "v0.5.17-rocm720-mi35x-20260810"
            ]
        );
    }
}

#[test]
fn a_point_is_measured_from_the_rows_it_names() {
    use crate::artifacts::{BenchmarkRow, FixedSeqRow, PointIdentity, PointMetrics};
    let row = |isl: u64, tp: Option<u64>, conc: u64, tput: f64| {
        BenchmarkRow::FixedSeqLen(FixedSeqRow {
            conc,
            identity: PointIdentity {
                isl: Some(isl),
                osl: Some(1024),
                tp,
                ..PointIdentity::default()
            },
            metrics: PointMetrics {
                tput_per_gpu: tput,
                output_tput_per_gpu: tput / 2.0,
                mean_ttft: 0.5,
                mean_tpot: 0.02,
            },
            extra: Default::default(),
        })
    };
    let rows = vec![
        row(1024, Some(8), 64, 100.0),
        row(8192, Some(8), 64, 40.0),
        row(1024, Some(8), 4, 10.0),
    ];
    let at = |isl: Option<u64>, conc: u64| PointKey {
        isl,
        osl: Some(1024),
        tp: Some(8),
        conc,
        agentic: false,
    };
    assert_eq!(
        measure(&rows, &at(Some(1024), 64), Metric::Throughput),
        Ok(100.0)
    );
    assert_eq!(measure(&rows, &at(Some(8192), 64), Metric::Ttft), Ok(0.5));
    assert_eq!(measure(&rows, &at(Some(1024), 4), Metric::Tpot), Ok(0.02));
    let e = measure(&rows, &at(None, 64), Metric::Throughput).unwrap_err();
    assert!(e.to_string().contains("2 rows match"), "{e}");
    let e = measure(&rows, &at(Some(1024), 128), Metric::Throughput).unwrap_err();
    assert!(e.to_string().contains("no row for conc 128"), "{e}");
    // A row that does not state its tp still matches.
    let loose = vec![row(1024, None, 64, 7.0)];
    assert_eq!(
        measure(&loose, &at(Some(1024), 64), Metric::Throughput),
        Ok(7.0)
    );
}

#[test]
fn a_hunt_starts_on_an_unexplained_failure_or_a_regression_where_it_is_on() {
    use klaud_planner::audit::AuditResult;
    let family = "configs/nvidia-master.yaml:dsr1-fp8-b200-vllm";
    let on = HuntSettings {
        enabled: true,
        ..HuntSettings::default()
    };
    let present = AuditResult::Present { flags: 3, env: 1 };
    let removed = AuditResult::Removed {
        flags: 3,
        env: 1,
        items: Vec::new(),
    };
    assert_eq!(
        should_start(&on, family, true, Some(&present), false),
        Some(Trigger::Failure)
    );
    assert_eq!(
        should_start(&on, family, true, None, false),
        Some(Trigger::Failure)
    );
    // The audit already names the cause.
    assert_eq!(should_start(&on, family, true, Some(&removed), false), None);
    assert_eq!(
        should_start(&on, family, false, None, true),
        Some(Trigger::Regression)
    );
    assert_eq!(should_start(&on, family, false, None, false), None);
    // Off by default, and only for the families configured.
    assert_eq!(
        should_start(&HuntSettings::default(), family, true, None, true),
        None
    );
    let other = HuntSettings {
        enabled: true,
        families: vec!["*-sglang".into()],
        ..HuntSettings::default()
    };
    assert_eq!(should_start(&other, family, true, None, true), None);
}

#[test]
fn the_worst_regression_beyond_its_band_is_the_probe() {
    let at = |conc| PointKey {
        isl: Some(1024),
        osl: Some(1024),
        tp: Some(8),
        conc,
        agentic: false,
    };
    let p = |point: &str, metric, value, band| PointValue {
        point: point.into(),
        at: at(if point == "a" { 4 } else { 64 }),
        metric,
        value,
        baseline: 100.0,
        band,
    };
    // 20% slower in a 15% band (5 points past it) is worse than 8% slower
    // in a 5% band (3 points past); a 4% drop within its band and a faster
    // point are no regression.
    let points = vec![
        p("a", Metric::Throughput, 92.0, 0.05),
        p("b", Metric::Throughput, 80.0, 0.15),
        p("c", Metric::Throughput, 96.0, 0.05),
        p("d", Metric::Ttft, 90.0, 0.05),
    ];
    let Some(Probe::Metric {
        point,
        at: Some(key),
        ..
    }) = worst_regression(&points)
    else {
        panic!("a regression");
    };
    assert_eq!((point.as_str(), key.conc), ("b", 64));
    // A latency that rose beyond its band counts too.
    let latency = vec![
        p("a", Metric::Tpot, 112.0, 0.05),
        p("c", Metric::Throughput, 99.0, 0.05),
    ];
    let Some(Probe::Metric { point, metric, .. }) = worst_regression(&latency) else {
        panic!("a regression");
    };
    assert_eq!((point.as_str(), metric), ("a", Metric::Tpot));
    assert_eq!(worst_regression(&points[2..]), None);
}

#[test]
fn a_metric_hunts_smoke_is_narrowed_to_its_point() {
    let smoke = "test-config --config-files configs/x.yaml --config-keys k --smoke";
    let metric = |isl, osl| Probe::Metric {
        point: "p".into(),
        metric: Metric::Throughput,
        baseline: 1.0,
        band: 0.05,
        at: Some(PointKey {
            isl,
            osl,
            tp: Some(8),
            conc: 64,
            agentic: false,
        }),
    };
    assert_eq!(
        targeted_command(smoke, &metric(Some(8192), Some(1024))),
        format!("{smoke} --conc 64 --seq-lens 8k1k")
    );
    assert_eq!(
        targeted_command(smoke, &metric(Some(1024), Some(1024))),
        format!("{smoke} --conc 64 --seq-lens 1k1k")
    );
    // Lengths the generator has no name for: concurrency only.
    assert_eq!(
        targeted_command(smoke, &metric(Some(2048), Some(128))),
        format!("{smoke} --conc 64")
    );
    let outcome = Probe::Outcome {
        target: "smoke".into(),
    };
    assert_eq!(targeted_command(smoke, &outcome), smoke);
}

mod agentx {
    use super::*;
    use crate::artifacts::{AgenticRow, BenchmarkRow, FixedSeqRow, PointIdentity, PointMetrics};
    use crate::baseline::{Baseline, BaselinePoint, BaselineValue, PointSpec, Scenario, Workers};
    use crate::dataset::{Dataset, DatasetFinding, FrozenDataset};

    fn metrics(out: f64) -> PointMetrics {
        PointMetrics {
            tput_per_gpu: out * 2.0,
            output_tput_per_gpu: out,
            mean_ttft: 0.5,
            mean_tpot: 0.02,
        }
    }

    fn spec(scenario: Scenario, conc: u64) -> PointSpec {
        PointSpec {
            scenario,
            conc,
            spec_decoding: "none".into(),
            kv_offload: None,
            decode: Workers {
                num_workers: None,
                tp: 4,
                ep: 1,
                dp_attn: false,
            },
            prefill: None,
        }
    }

    fn agentic(conc: u64, dataset: &str, out: f64) -> BenchmarkRow {
        BenchmarkRow::Agentic(AgenticRow {
            conc,
            identity: PointIdentity {
                tp: Some(4),
                ..PointIdentity::default()
            },
            scenario_type: Some("agentic-coding".into()),
            kv_offloading: None,
            recipe_fingerprint: None,
            metrics: metrics(out),
            num_requests_total: None,
            num_requests_successful: None,
            extra: [(
                "dataset".to_owned(),
                serde_json::json!({ "loader": dataset }),
            )]
            .into(),
        })
    }

    fn fixed(conc: u64, out: f64) -> BenchmarkRow {
        BenchmarkRow::FixedSeqLen(FixedSeqRow {
            conc,
            identity: PointIdentity {
                isl: Some(1024),
                osl: Some(1024),
                tp: Some(4),
                ..PointIdentity::default()
            },
            metrics: metrics(out),
            extra: Default::default(),
        })
    }

    fn baseline() -> Baseline {
        let fsl = Scenario::FixedSeqLen {
            isl: 1024,
            osl: 1024,
        };
        let points = [
            spec(Scenario::Agentic, 1),
            spec(Scenario::Agentic, 4),
            spec(fsl, 1),
        ];
        Baseline {
            date: chrono::NaiveDate::from_ymd_opt(2026, 9, 15).expect("date"),
            image: "i:1".into(),
            model: "m".into(),
            unknown_model: None,
            source_urls: Vec::new(),
            points: points
                .into_iter()
                .map(|p| BaselinePoint {
                    label: p.label(),
                    point: p,
                    value: BaselineValue::Measured {
                        metrics: metrics(100.0),
                        run_url: None,
                        published: None,
                        run_id: Some(9),
                    },
                })
                .collect(),
            evals: Vec::new(),
            evals_unavailable: None,
            agentx_datasets: vec![FrozenDataset {
                run_id: 9,
                finding: DatasetFinding::Named {
                    dataset: Dataset {
                        name: "traces_a".into(),
                        hf_dataset_name: None,
                    },
                },
            }],
        }
    }

    #[test]
    fn agentx_points_are_hunted_only_on_the_baselines_dataset() {
        let rows = [
            agentic(1, "traces_a", 60.0),
            agentic(4, "traces_b", 10.0),
            fixed(1, 99.0),
        ];
        let values = point_values(&baseline(), &rows, 0.05);
        let points: std::collections::BTreeSet<&str> =
            values.iter().map(|v| v.point.as_str()).collect();
        assert_eq!(
            points,
            ["1k1k c1 TP4", "AgentX c1 TP4"].into_iter().collect(),
            "the AgentX point of another dataset is left out"
        );
        // The AgentX point on the same dataset regressed most, and its
        // probe reads AgentX rows only.
        let Some(Probe::Metric {
            point,
            at: Some(at),
            ..
        }) = worst_regression(&values)
        else {
            panic!("a regression");
        };
        assert_eq!(point, "AgentX c1 TP4");
        assert!(at.agentic);
        assert_eq!(measure(&rows, &at, Metric::Throughput), Ok(120.0));
        // A fixed-seq-len key at the same concurrency never reads the
        // AgentX row.
        let fixed_key = PointKey {
            agentic: false,
            ..at
        };
        assert_eq!(measure(&rows, &fixed_key, Metric::Throughput), Ok(198.0));
    }

    #[test]
    fn an_agentic_probe_key_round_trips_and_old_keys_read_as_fixed() {
        let key = PointKey {
            isl: None,
            osl: None,
            tp: Some(4),
            conc: 1,
            agentic: true,
        };
        let text = serde_json::to_string(&key).expect("json");
        assert_eq!(serde_json::from_str::<PointKey>(&text).expect("reads"), key);
        let old: PointKey =
            serde_json::from_str(r#"{"isl":1024,"osl":1024,"tp":4,"conc":1}"#).expect("reads");
        assert!(!old.agentic);
        let fixed = serde_json::to_string(&old).expect("json");
        assert!(!fixed.contains("agentic"), "{fixed}");
    }
}

/// A hunt's plan, a step and its end comments, byte for byte in both
/// languages: a metric probe whose range has an upstream link, untested
/// tags and an engine commit, and a step with a value and a run.
#[test]
fn a_hunts_comments_read_the_same_in_both_languages() {
    let p = plan(7, 4);
    let (mut r, _) = run(Hunt::new(p.clone()).unwrap(), 4, 100);
    r.untested = vec!["nightly-05".into()];
    r.commits = vec![StepCommit {
        sha: "a".repeat(40),
        title: "Drop --foo @someone".into(),
        paths: vec!["vllm/engine/arg_utils.py".into()],
    }];
    let step = StepRecord {
        step: 1,
        tag: "nightly-03".into(),
        run: Some(101),
        verdict: Verdict::Good,
        value: Some(101.0),
        note: String::new(),
    };
    let comments = [
        render_plan(&key(HuntName::Plan { hunt: 1 }, 5), &p),
        render_step(&key(HuntName::Step { hunt: 1, step: 1 }, 5), &p, &step),
        render_end(&key(HuntName::End { hunt: 1 }, 5), &p, &r),
    ];
    insta::assert_snapshot!(comments.join("\n---\n"));
}
