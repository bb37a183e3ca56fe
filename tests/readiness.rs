//! Baseline readiness: a family whose published
//! baseline cannot be found, or does not cover its points, is
//! `readiness-blocked` in the wave's plan, before anything is claimed or
//! written; `[lifecycle] require_baseline = false` lets it go on with N/A
//! rows. The baseline is what the results API published as of the day,
//! each point with its own publication day and run. The real wave and
//! engine, the octocrab forge and the sandbox (whose results API publishes
//! in the past, and withholds or re-publishes what the test says).

use klaud_lifecycle::baseline::BaselineValue;
use klaud_lifecycle::engine::MemoryJournal;
use klaud_lifecycle::report::{FrozenBaseline, parse_baseline_block};
use klaud_lifecycle::wave::{BlockedFamily, render_summary};
use klaud_planner::identity::family_id;
use klaud_planner::plan::BlockKind;
use klaud_sandbox::ci::Sweep;
use klaud_service::wave_adapters::{CandidateSummary, WaveSummary};

use crate::people::{KEY, wave_config};
use crate::support::{Harness, REPO};

const MASTER: &str = "configs/nvidia-master.yaml";

fn candidate_of<'a>(summary: &'a WaveSummary, key: &str) -> &'a CandidateSummary {
    summary
        .candidates
        .iter()
        .find(|c| c.family.ends_with(&format!(":{key}")))
        .unwrap_or_else(|| panic!("{key} is not a candidate: {:#?}", summary.candidates))
}

fn pull_number(c: &CandidateSummary) -> u64 {
    c.pull_request
        .as_deref()
        .and_then(|u| u.rsplit('/').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no pull request: {c:#?}"))
}

/// The PR body of candidate `c` and the baseline record frozen into it.
async fn frozen_body(env: &Harness, c: &CandidateSummary) -> (String, FrozenBaseline) {
    let body = env
        .forge
        .get_pull(pull_number(c))
        .await
        .expect("pull")
        .body
        .unwrap_or_default();
    let frozen = parse_baseline_block(&body)
        .expect("a record")
        .expect("frozen");
    (body, frozen)
}

/// Workflow runs on GitHub whose title names `candidate` (the smoke's
/// `test-name` carries it) or that ran on its branch.
async fn runs_of(env: &Harness, candidate: &str) -> Vec<u64> {
    let branch_of = format!("klaud/auto-{candidate}");
    crate::support::run_ids_where(env, |title, branch| {
        title.contains(candidate) || branch == branch_of
    })
    .await
}

/// The receipt, `klaud status` (the journal's outcome rows, which the
/// dashboard shows too) and the wave summary all say `outcome`.
async fn agree(env: &Harness, journal: &MemoryJournal, c: &CandidateSummary, outcome: &str) {
    assert_eq!(c.outcome.as_deref(), Some(outcome), "{c:#?}");
    let bodies = env.bodies(pull_number(c)).await;
    let receipt = bodies
        .iter()
        .rfind(|b| b.starts_with("<!-- klaud-outcome:"))
        .expect("a receipt");
    assert!(
        receipt.contains(&format!("\"outcome\":\"{outcome}\"")),
        "{receipt}"
    );
    let status = klaud_service::status::repository_status(
        &env.forge,
        journal,
        env.clock,
        klaud_claims::Claimant::new(uuid::Uuid::from_u128(0x7265_6164)),
    )
    .await
    .expect("status");
    let row = status
        .outcomes
        .iter()
        .find(|o| o.candidate == c.candidate)
        .expect("an outcome row");
    assert_eq!(row.outcome, outcome);
}

/// The plan's block of the family `key`, which must not be a candidate.
fn blocked_of<'a>(summary: &'a WaveSummary, key: &str) -> &'a BlockedFamily {
    assert!(
        summary
            .candidates
            .iter()
            .all(|c| !c.family.ends_with(&format!(":{key}"))),
        "{key} must not be a candidate: {:#?}",
        summary.candidates
    );
    summary
        .blocked
        .iter()
        .find(|b| b.family.ends_with(&format!(":{key}")))
        .unwrap_or_else(|| panic!("{key} is not blocked: {:#?}", summary.blocked))
}

/// Nothing was written for `key`: no claim ref, no branch, no pull request.
async fn nothing_written_for(env: &Harness, key: &str) {
    let id = family_id(&format!("{MASTER}:{key}"));
    let claims = env.claims().await;
    assert!(
        claims.iter().all(|(name, _)| !name.contains(&id)),
        "{claims:?}"
    );
    let branches = env
        .forge
        .list_refs("refs/heads/klaud/auto-")
        .await
        .expect("branches");
    assert!(
        branches.iter().all(|(name, _)| !name.contains(&id)),
        "{branches:?}"
    );
    let pulls = env.forge.list_pulls("all").await.expect("pulls");
    assert!(
        pulls.iter().all(|p| !p.head_ref.contains(&id)),
        "{:#?}",
        pulls.iter().map(|p| &p.head_ref).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_family_never_published_is_readiness_blocked_in_the_plan_with_no_claim_and_no_pr() {
    let env = Harness::demo().start().await;
    env.stack.published.withhold_key(KEY);
    let journal = MemoryJournal::new();
    let summary = wave_config(&env, crate::support::engine_config(5201), &journal).await;
    let b = blocked_of(&summary, KEY);
    assert_eq!(b.outcome, "readiness-blocked", "{b:#?}");
    assert!(b.reason.starts_with("baseline-unavailable"), "{b:#?}");
    assert!(b.reason.contains("not published as of"), "{b:#?}");
    nothing_written_for(&env, KEY).await;
    // The wave's table says it too.
    let table = render_summary(&summary);
    assert!(
        table.contains(&format!(
            "readiness-blocked {MASTER}:{KEY}: baseline-unavailable"
        )),
        "{table}"
    );
    // The plan the dashboard shows carries the block.
    let plan = summary
        .families
        .iter()
        .find(|f| f.family.ends_with(&format!(":{KEY}")))
        .expect("planned");
    assert_eq!(
        plan.blocked.as_ref().map(|b| b.kind),
        Some(BlockKind::ReadinessBlocked)
    );
    // The other families, whose baselines are published, go on to smoke.
    assert!(
        summary
            .candidates
            .iter()
            .any(|x| !x.family.ends_with(&format!(":{KEY}")) && !x.runs.is_empty()),
        "{:#?}",
        summary.candidates
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_baseline_missing_some_points_is_readiness_blocked_in_the_plan_naming_them() {
    let env = Harness::demo().start().await;
    // demo-fp4-b200-vllm runs 1k1k TP8 at c4…c64: two of its points are
    // not published.
    env.stack.published.withhold_points(KEY, &[8, 32]);
    let journal = MemoryJournal::new();
    let summary = wave_config(&env, crate::support::engine_config(5202), &journal).await;
    let b = blocked_of(&summary, KEY);
    assert_eq!(b.outcome, "readiness-blocked", "{b:#?}");
    let message = &b.reason;
    assert!(message.starts_with("baseline-incomplete"), "{message}");
    assert!(
        message.contains("lacks 2 of the family's 5 points"),
        "{message}"
    );
    assert!(
        message.contains("c8") && message.contains("c32"),
        "{message}"
    );
    assert!(!message.contains("c16 "), "{message}");
    nothing_written_for(&env, KEY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readiness_blocked_pick_frees_its_slot_for_the_next_stale_family() {
    let env = Harness::demo().start().await;
    // Only one family has a published baseline; the wave may start one
    // candidate, and whichever family the plan ranks first, the wave ends
    // with that one.
    const READY: &str = "demo-fp4-b200-sglang";
    for key in [
        KEY,
        "demo-fp4-b300-vllm-agentic",
        "demo-fp8-h200-trt",
        "demo-fp4-b200-vllm-special",
        "demo-fp4-gb200-dynamo-vllm-disagg",
        "demo-fp8-mi355x-sglang",
    ] {
        env.stack.published.withhold_key(key);
    }
    let journal = MemoryJournal::new();
    let mut options = env.wave_options(
        klaud_claims::Claimant::new(uuid::Uuid::from_u128(0x7265_6164_7931)),
        crate::support::engine_config(5206),
    );
    options.lifecycle.plan.min_age = std::time::Duration::ZERO;
    options.lifecycle.cooldown = std::time::Duration::ZERO;
    options.lifecycle.plan.max_candidates = 1;
    let summary = env.wave(&journal, options).await;
    let families: Vec<&str> = summary
        .candidates
        .iter()
        .map(|c| c.family.as_str())
        .collect();
    assert_eq!(families, vec![format!("{MASTER}:{READY}")], "{summary:#?}");
    let blocked: Vec<&BlockedFamily> = summary
        .blocked
        .iter()
        .filter(|b| b.outcome == "readiness-blocked")
        .collect();
    assert!(!blocked.is_empty(), "{summary:#?}");
    for b in blocked {
        let key = b.family.rsplit(':').next().expect("key");
        nothing_written_for(&env, key).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_results_api_publishing_in_the_past_gives_a_full_baseline_with_each_points_own_day_and_run()
 {
    const DISAGG: &str = "demo-fp4-gb200-dynamo-vllm-disagg";
    let env = Harness::demo().start().await;
    let published = &env.stack.published;
    let today = published.today();
    let seeded = published.seeded_on(DISAGG);
    assert!(seeded < today, "{seeded} {today}");
    // The 2p1d line (c128) was re-swept yesterday with the current image;
    // the 1p1d line (c32, c64) still has its seeded run.
    let yesterday = today.pred_opt().expect("a day");
    let resweep = published.publish(Sweep {
        key: DISAGG.into(),
        conc: Some(vec![128]),
        image: None,
        date: Some(yesterday),
        throughput: None,
    });
    let journal = MemoryJournal::new();
    let summary = wave_config(&env, crate::support::engine_config(5204), &journal).await;
    let c = candidate_of(&summary, DISAGG);
    assert_ne!(c.outcome.as_deref(), Some("readiness-blocked"), "{c:#?}");
    let (body, frozen) = frozen_body(&env, c).await;
    let b = &frozen.baseline;
    assert_eq!(b.date, today, "asked as of today");
    assert!(
        b.source_urls.iter().all(|u| !u.contains("exact")),
        "{:?}",
        b.source_urls
    );
    let days: Vec<(String, Option<chrono::NaiveDate>, Option<u64>)> = b
        .points
        .iter()
        .map(|p| match &p.value {
            BaselineValue::Measured {
                published, run_id, ..
            } => (p.label.clone(), *published, *run_id),
            BaselineValue::Unavailable { reason } => panic!("{}: N/A {reason}", p.label),
        })
        .collect();
    assert_eq!(days.len(), 3, "{days:?}");
    // Each point keeps its run's address in the record.
    assert!(frozen.baseline.points.iter().all(|p| matches!(
        &p.value,
        BaselineValue::Measured { run_url: Some(u), run_id: Some(id), .. }
            if u.ends_with(&format!("/{REPO}/actions/runs/{id}/attempts/1"))
    )));
    for (label, day, run) in &days {
        if label.contains("c128") {
            assert_eq!((*day, *run), (Some(yesterday), Some(resweep)), "{label}");
        } else {
            assert_eq!(*day, Some(seeded), "{label}");
            assert!(run.is_some_and(|r| r != resweep), "{label}");
        }
    }
    let (english, chinese) = body
        .split_once("<summary>中文</summary>")
        .expect("both languages");
    assert!(
        english.contains(&format!("**Baseline:** published {seeded} by run `"))
            && english.contains(&format!("{yesterday} by run `{resweep}` (1 point)"))
            && english.contains("(2 points)"),
        "{english}"
    );
    assert!(
        chinese.contains(&format!("**基线**：{seeded} 发布，运行 `"))
            && chinese.contains(&format!("{yesterday} 发布，运行 `{resweep}`"))
            && chinese.contains("（1 个点位）"),
        "{chinese}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_point_whose_newest_publication_ran_another_image_is_na_naming_the_image() {
    const OTHER: &str = "vllm/vllm-openai:v0.24.0";
    let env = Harness::demo().start().await;
    let yesterday = env.stack.published.today().pred_opt().expect("a day");
    // A partial re-sweep of the line with another image: c8 ran it; the
    // rest of the line keeps its seeded rows (the API answers each point's
    // newest row).
    let run = env.stack.published.publish(Sweep {
        key: KEY.into(),
        conc: Some(vec![8]),
        image: Some(OTHER.into()),
        date: Some(yesterday),
        throughput: None,
    });
    let mut engine = crate::support::engine_config(5205);
    engine.require_baseline = false;
    let journal = MemoryJournal::new();
    let summary = wave_config(&env, engine, &journal).await;
    let c = candidate_of(&summary, KEY);
    let (body, frozen) = frozen_body(&env, c).await;
    let reason_of = |label: &str| match &frozen
        .baseline
        .points
        .iter()
        .find(|p| p.label == label)
        .unwrap_or_else(|| panic!("{label}"))
        .value
    {
        BaselineValue::Unavailable { reason } => reason.clone(),
        other => panic!("{label} must be N/A: {other:?}"),
    };
    assert_eq!(
        reason_of("1k1k c8 TP8"),
        format!("published result ran another image ({OTHER})")
    );
    let seeded = env.stack.published.seeded_on(KEY);
    assert!(
        frozen.baseline.points.iter().any(|p| p.label == "1k1k c16 TP8"
            && matches!(&p.value, BaselineValue::Measured { published: Some(d), run_id: Some(r), .. }
                if *d == seeded && *r != run)),
        "{:#?}",
        frozen.baseline.points
    );
    assert!(
        body.contains(&format!("ran another image ({OTHER})"))
            && body.contains(&format!("公开结果使用的是另一个镜像（{OTHER}）")),
        "{body}"
    );

    // Required, the same publication blocks the family in the plan, naming
    // the image.
    let env = Harness::demo().start().await;
    let yesterday = env.stack.published.today().pred_opt().expect("a day");
    env.stack.published.publish(Sweep {
        key: KEY.into(),
        conc: None,
        image: Some(OTHER.into()),
        date: Some(yesterday),
        throughput: None,
    });
    let summary = wave_config(
        &env,
        crate::support::engine_config(5207),
        &MemoryJournal::new(),
    )
    .await;
    let b = blocked_of(&summary, KEY);
    assert!(
        b.reason.starts_with("baseline-unavailable") && b.reason.contains(OTHER),
        "{b:#?}"
    );
    nothing_written_for(&env, KEY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_require_baseline_a_missing_baseline_gives_na_rows_and_the_smoke_runs() {
    let env = Harness::demo().start().await;
    env.stack.published.withhold_key(KEY);
    let mut engine = crate::support::engine_config(5203);
    engine.require_baseline = false;
    let journal = MemoryJournal::new();
    let summary = wave_config(&env, engine, &journal).await;
    let c = candidate_of(&summary, KEY);
    assert_ne!(c.outcome.as_deref(), Some("readiness-blocked"), "{c:#?}");
    assert!(!c.runs.is_empty(), "the smoke was dispatched: {c:#?}");
    let pull = env.forge.get_pull(pull_number(c)).await.expect("pull");
    let body = pull.body.unwrap_or_default();
    assert!(body.contains("<!-- klaud-baseline-body -->"), "{body}");
    assert!(body.contains("N/A"), "{body}");
    // Every point is an N/A row with its reason, and the smoke still ran.
    assert!(
        body.contains("| 1k1k c64 TP8 | N/A | N/A | N/A | N/A |")
            && body.contains("not published as of"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_baseline_withdrawn_between_the_plan_and_the_freeze_still_ends_the_candidate_cleanly() {
    let env = Harness::demo().start().await;
    let target = env.target(KEY).await;
    let journal = MemoryJournal::new();
    {
        let lifecycle = klaud_service::GithubLifecycle::new(&env.forge);
        let clock = klaud_claims::SystemClock;
        let engine = env.engine(&lifecycle, &journal, &clock);
        assert_eq!(
            engine.readiness_before_claim(&target.family).await,
            None,
            "ready when planned"
        );
    }
    // Withdrawn after the plan's check: the freeze finds nothing.
    env.stack.published.withhold_key(KEY);
    let rec = env.finish(&journal, &target).await;
    let c = CandidateSummary::of(&rec, None);
    agree(&env, &journal, &c, "readiness-blocked").await;
    assert_eq!(c.phase, "baseline", "{c:#?}");
    let message = c.message.as_deref().unwrap_or_default();
    assert!(message.contains("baseline-unavailable"), "{message}");
    assert!(c.runs.is_empty(), "{c:#?}");
    assert!(runs_of(&env, c.candidate.as_str()).await.is_empty());
    let number = pull_number(&c);
    assert!(!env.pull(number).await.state.is_open());
    let id = family_id(&format!("{MASTER}:{KEY}"));
    assert!(
        env.claims()
            .await
            .iter()
            .all(|(name, _)| !name.contains(&id)),
        "the claim is released"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pr_body_freezes_the_evals_the_baselines_own_runs_published_and_no_other_images() {
    let env = Harness::demo().start().await;
    let published = &env.stack.published;
    let seeded = published.seeded_on(KEY);
    // Another family's later run, of another image, publishes its own eval
    // row: only the runs that produced this family's frozen points count.
    let yesterday = published.today().pred_opt().expect("a day");
    let other = published.publish(Sweep {
        key: "demo-fp8-h200-trt".into(),
        conc: None,
        image: Some("nvcr.io/nvidia/tensorrt-llm/release:0.99.0".into()),
        date: Some(yesterday),
        throughput: None,
    });
    let journal = MemoryJournal::new();
    let summary = wave_config(&env, crate::support::engine_config(5209), &journal).await;
    let c = candidate_of(&summary, KEY);
    let (body, frozen) = frozen_body(&env, c).await;
    let producers: Vec<u64> = frozen
        .baseline
        .points
        .iter()
        .filter_map(|p| match &p.value {
            BaselineValue::Measured { run_id, .. } => *run_id,
            BaselineValue::Unavailable { .. } => None,
        })
        .collect();
    let evals = &frozen.baseline.evals;
    assert_eq!(
        evals.len(),
        1,
        "one eval per family in the sandbox: {evals:#?}"
    );
    let eval = &evals[0];
    assert_eq!(
        (
            eval.task.as_str(),
            eval.score_name.as_str(),
            eval.samples,
            eval.published
        ),
        ("gsm8k", "em_strict", Some(1319), Some(seeded))
    );
    assert!((0.0..=1.0).contains(&eval.score), "{eval:?}");
    let run = eval
        .run_url
        .as_deref()
        .and_then(klaud_lifecycle::baseline::run_id_of_url)
        .expect("its run");
    assert!(
        producers.contains(&run) && run != other,
        "{run} {producers:?}"
    );
    assert!(
        frozen
            .baseline
            .source_urls
            .iter()
            .any(|u| u.ends_with("/api/v1/evaluations")),
        "{:?}",
        frozen.baseline.source_urls
    );
    let (english, chinese) = body
        .split_once("<summary>中文</summary>")
        .expect("both languages");
    assert!(
        english.contains("| Eval | Score ↑ | Samples |")
            && english.contains("| gsm8k/em\\_strict · c"),
        "{english}"
    );
    assert!(chinese.contains("| 评估 | 分数 ↑ | 样本数 |"), "{chinese}");
}

/// Sets the sandbox's display name of `prefix` (`None`: the API forgets
/// it), listed in its OpenAPI description or not, over its control route.
async fn name_model(env: &Harness, prefix: &str, name: Option<&str>, listed: bool) {
    let client = klaud_http::http_client().expect("client");
    let status = client
        .post(format!("{}/_control/models", env.stack.baseline_url))
        .json(&serde_json::json!({"prefix": prefix, "name": name, "openapi": listed}))
        .send()
        .await
        .expect("control route")
        .status();
    assert!(status.is_success(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_re_sweep_with_the_same_image_keeps_every_point_with_its_own_run() {
    let env = Harness::demo().start().await;
    let published = &env.stack.published;
    let seeded = published.seeded_on(KEY);
    let yesterday = published.today().pred_opt().expect("a day");
    // c8 alone re-swept yesterday: the API answers each point's newest row,
    // so the line's other points keep the seeded run's.
    let resweep = published.publish(Sweep {
        key: KEY.into(),
        conc: Some(vec![8]),
        image: None,
        date: Some(yesterday),
        throughput: None,
    });
    let journal = MemoryJournal::new();
    let summary = wave_config(&env, crate::support::engine_config(5211), &journal).await;
    let c = candidate_of(&summary, KEY);
    assert_ne!(c.outcome.as_deref(), Some("readiness-blocked"), "{c:#?}");
    let (body, frozen) = frozen_body(&env, c).await;
    let mut runs = std::collections::BTreeSet::new();
    for p in &frozen.baseline.points {
        let BaselineValue::Measured {
            published, run_id, ..
        } = &p.value
        else {
            panic!("{}: {:?}", p.label, p.value);
        };
        if p.label.contains(" c8 ") {
            assert_eq!((*published, *run_id), (Some(yesterday), Some(resweep)));
        } else {
            assert_eq!(*published, Some(seeded), "{}", p.label);
        }
        runs.insert(*run_id);
    }
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert!(
        body.contains(&format!("{yesterday} by run `{resweep}` (1 point)"))
            && body.contains(&format!("**Baseline:** published {seeded} by run `")),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_name_only_the_openapi_enum_gives_is_found_and_frozen() {
    let env = Harness::demo().start().await;
    let journal = MemoryJournal::new();
    let summary = wave_config(&env, crate::support::engine_config(5212), &journal).await;
    let c = candidate_of(&summary, KEY);
    let (_, frozen) = frozen_body(&env, c).await;
    // No `model:` path of the demo spells it.
    assert_eq!(frozen.baseline.model, "Klaud-Demo-Bench");
    assert!(
        frozen.baseline.source_urls[0].contains("model=Klaud-Demo-Bench&"),
        "{:?}",
        frozen.baseline.source_urls
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_prefix_the_api_knows_no_name_for_is_readiness_blocked_naming_what_to_set() {
    let env = Harness::demo().start().await;
    name_model(&env, "demo", None, true).await;
    let journal = MemoryJournal::new();
    let summary = wave_config(&env, crate::support::engine_config(5213), &journal).await;
    let b = blocked_of(&summary, KEY);
    assert_eq!(b.outcome, "readiness-blocked", "{b:#?}");
    assert!(b.reason.starts_with("baseline-model-unknown"), "{b:#?}");
    assert!(
        b.reason
            .contains(r#"set [lifecycle.model_names] "demo" = "<display name>""#),
        "{b:#?}"
    );
    nothing_written_for(&env, KEY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_name_wins_where_the_description_does_not_list_it() {
    let env = Harness::demo().start().await;
    // The route knows the name; the description leaves it out.
    name_model(&env, "demo", Some("Demo-Unlisted"), false).await;
    let mut engine = crate::support::engine_config(5214);
    engine
        .model_names
        .insert("demo".into(), "Demo-Unlisted".into());
    let journal = MemoryJournal::new();
    let summary = wave_config(&env, engine, &journal).await;
    let c = candidate_of(&summary, KEY);
    assert_ne!(c.outcome.as_deref(), Some("readiness-blocked"), "{c:#?}");
    let (_, frozen) = frozen_body(&env, c).await;
    assert_eq!(frozen.baseline.model, "Demo-Unlisted");
}
