//! The store is a cache, for every record kind: each scenario runs once
//! undisturbed, then once per cut point with the whole store deleted (a
//! fresh journal, the records opened again as a restart opens them) right
//! after that point, and the two end states must match: the same pull
//! requests (number, title, state, body), the same writes in kind (method
//! and path shape, as a multiset; comment edits by presence, see
//! [`LIVE_EDITS`]) and so no duplicate dispatch, every comment marker once
//! per PR.
//!
//! The kinds: a candidate in flight (after each of its steps, on the
//! validated path and on a repaired one), a validated PR awaiting its
//! merge (the store lost after the finish step, then an upkeep wave), a
//! regression hunt (after each of its steps: plan, each step's dispatch
//! and record) and an experiment (after each step a variant takes). One
//! sandbox per run; the kinds are separate tests so the harness runs them
//! side by side.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use klaud_claims::SystemClock;
use klaud_lifecycle::engine::{
    CandidateRecord, Engine, MemoryJournal, Progress, RepairHook, Step, Target, is_hunt_news,
};
use klaud_lifecycle::hunt::HuntTags;
use klaud_service::GithubLifecycle;

use crate::lifecycle_e2e::{PushingHook, VALIDATED_SCRIPT};
use crate::support::{Harness, assert_unique, markers, owner};

/// Where the store is deleted: after the engine call at which this says
/// so (given what the call did).
type Cut = Box<dyn Fn(&Event) -> bool>;

/// One engine call of a drive, as a cut sees it.
struct Event<'a> {
    /// The record's step before and after the call.
    before: Step,
    after: Step,
    progress: &'a Progress,
    /// How many hunt news (plan, dispatch, record) came before, this one
    /// included.
    hunt_news: usize,
}

/// What a run left on GitHub, compared between runs.
#[derive(Debug, PartialEq, Eq)]
struct EndState {
    /// Every pull request: number, title, state, body.
    pulls: Vec<(u64, String, String, String)>,
    /// The bot's writes as kinds, with how often each came.
    writes: BTreeMap<String, usize>,
    /// Successful workflow dispatches.
    dispatches: usize,
}

/// One scenario: its CI script, the candidates it drives together, and
/// what the engine gets besides the defaults.
#[derive(Clone, Copy)]
struct Scenario {
    script: &'static str,
    targets: Targets,
    hook: bool,
    hunt: bool,
    configure: fn(&mut klaud_lifecycle::engine::EngineConfig),
    /// An upkeep wave after the candidates finished (validated PRs).
    upkeep: bool,
}

/// Runs `scenario` in a fresh sandbox, deleting the store once where `cut`
/// says; the end state, and whether the cut happened.
async fn run(scenario: Scenario, cut: Option<Cut>) -> (EndState, bool, Vec<CandidateRecord>) {
    let env = Harness::demo()
        .script(scenario.script)
        .configure(scenario.configure)
        .start()
        .await;
    let targets = scenario.targets.of(&env).await;
    let from = env.stack.state().requests_recorded();
    let hook = PushingHook::new(env.stack.state().clone());
    let journal = MemoryJournal::new();
    let lifecycle = GithubLifecycle::new(&env.forge);
    let clock = SystemClock;
    let engine = |_: ()| {
        let mut e: Engine<'_> = env.engine_as(&lifecycle, &journal, &clock, owner(), &env.config);
        if scenario.hook {
            e = e.with_repair(&hook as &dyn RepairHook);
        }
        if scenario.hunt {
            e = e.with_hunt_tags(&crate::regression_hunt::engine::Tags as &dyn HuntTags);
        }
        e
    };
    let mut recs = Vec::new();
    for t in &targets {
        recs.push((
            engine(()).open_record(t).await.expect("record"),
            Progress::Advanced(Step::Claim),
        ));
    }
    let mut cut = cut;
    let mut was_cut = false;
    let mut hunt_news = 0;
    let started = Instant::now();
    loop {
        let mut busy = false;
        let mut advanced = false;
        let mut restart = false;
        for (rec, progress) in recs.iter_mut() {
            if matches!(progress, Progress::Done(_) | Progress::Skipped(_)) {
                continue;
            }
            busy = true;
            let before = rec.step;
            let p = engine(()).step(rec).await.expect("step");
            if let Progress::Waiting(w) = &p
                && is_hunt_news(w)
            {
                hunt_news += 1;
            }
            advanced |= matches!(p, Progress::Advanced(_)) || before != rec.step;
            let event = Event {
                before,
                after: rec.step,
                progress: &p,
                hunt_news,
            };
            if cut.as_ref().is_some_and(|c| c(&event)) {
                cut = None;
                restart = true;
            }
            *progress = p;
            if restart {
                break;
            }
        }
        if restart {
            // The store is gone: every record not finished is opened again
            // from GitHub, as the next wave's restart does.
            journal.clear();
            was_cut = true;
            for ((rec, progress), t) in recs.iter_mut().zip(&targets) {
                if rec.step != Step::Done {
                    *rec = engine(()).open_record(t).await.expect("reopen");
                    *progress = Progress::Advanced(Step::Claim);
                }
            }
            continue;
        }
        if !busy {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no end after 120 s: {recs:#?}"
        );
        if !advanced {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    if scenario.upkeep {
        let mut options = env.wave_options(owner(), env.config.clone());
        options.lifecycle.plan.max_candidates = 0;
        env.wave(&journal, options).await;
    }
    let recs: Vec<CandidateRecord> = recs.into_iter().map(|(r, _)| r).collect();
    for rec in &recs {
        if let Some(number) = rec.pull {
            assert_unique(&markers(&env.bodies(number).await));
        }
    }
    assert!(env.claims().await.is_empty(), "a claim left: {recs:#?}");
    let ports = regex::Regex::new(r"127\.0\.0\.1:\d+").expect("pattern");
    let pulls = env
        .get_as_maintainer("pulls?state=all&per_page=100")
        .await
        .as_array()
        .expect("pulls")
        .iter()
        .map(|p| {
            (
                p["number"].as_u64().unwrap_or_default(),
                p["title"].as_str().unwrap_or_default().to_owned(),
                p["state"].as_str().unwrap_or_default().to_owned(),
                // Each sandbox serves on its own ports.
                ports
                    .replace_all(p["body"].as_str().unwrap_or_default(), "127.0.0.1:{port}")
                    .into_owned(),
            )
        })
        .collect::<Vec<_>>();
    let mut writes = BTreeMap::new();
    for w in env.writes_since(from).await {
        *writes.entry(w).or_insert(0) += 1;
    }
    let state = EndState {
        pulls,
        writes,
        dispatches: env.dispatches().await,
    };
    (state, was_cut, recs)
}

/// Edits of a comment: a live report is edited as a run's jobs finish,
/// and how many of its states a poll sees depends on the runs' timing,
/// between two undisturbed runs too. Whether it was edited at all counts.
const LIVE_EDITS: &str = "PATCH /repos/demo/benchmarks/issues/comments/{n}";

/// Runs `scenario` undisturbed, then once per cut, and compares; every
/// cut runs, and the failures are reported together. `edits_may_differ`:
/// the kinds of writes whose count may differ (each still present in both
/// or in neither), for the reason the caller gives.
async fn compare(scenario: Scenario, cuts: Vec<(String, Cut)>, edits_may_differ: &[&str]) {
    let (undisturbed, _, recs) = run(scenario, None).await;
    assert!(
        !undisturbed.pulls.is_empty() && undisturbed.dispatches > 0,
        "{undisturbed:#?} {recs:#?}"
    );
    let counted = |mut state: EndState| {
        for (kind, n) in state.writes.iter_mut() {
            if kind == LIVE_EDITS || edits_may_differ.contains(&kind.as_str()) {
                *n = 1;
            }
        }
        state
    };
    let undisturbed = counted(undisturbed);
    let mut failures = Vec::new();
    for (name, cut) in cuts {
        let (disturbed, was_cut, recs) = run(scenario, Some(cut)).await;
        if !was_cut {
            failures.push(format!("{name}: the run never reached its cut point"));
            continue;
        }
        let disturbed = counted(disturbed);
        if disturbed != undisturbed {
            failures.push(format!(
                "{name}: the end differs from the undisturbed run's:\n{}\nrecords: {:?}",
                difference(&undisturbed, &disturbed),
                recs.iter()
                    .map(|r| (
                        r.branch.clone(),
                        r.step,
                        r.ending.as_ref().map(|e| e.outcome)
                    ))
                    .collect::<Vec<_>>()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// What differs between two end states, field by field.
fn difference(undisturbed: &EndState, disturbed: &EndState) -> String {
    let mut out = Vec::new();
    if undisturbed.pulls != disturbed.pulls {
        out.push(format!(
            "pulls: undisturbed {:#?}\ndisturbed {:#?}",
            undisturbed.pulls, disturbed.pulls
        ));
    }
    let kinds: std::collections::BTreeSet<&String> = undisturbed
        .writes
        .keys()
        .chain(disturbed.writes.keys())
        .collect();
    for kind in kinds {
        let (a, b) = (
            undisturbed.writes.get(kind).copied().unwrap_or(0),
            disturbed.writes.get(kind).copied().unwrap_or(0),
        );
        if a != b {
            out.push(format!("{kind}: {a} undisturbed, {b} disturbed"));
        }
    }
    if undisturbed.dispatches != disturbed.dispatches {
        out.push(format!(
            "dispatches: {} undisturbed, {} disturbed",
            undisturbed.dispatches, disturbed.dispatches
        ));
    }
    out.join("\n")
}

/// A cut right after the first call that moved a record off `step`.
fn after_step(step: Step) -> (String, Cut) {
    (
        format!("after {step:?}"),
        Box::new(move |e: &Event| e.before == step && e.after != step),
    )
}

/// The candidates a scenario drives together.
#[derive(Clone, Copy)]
enum Targets {
    /// The candidate of one family.
    One(&'static str),
    /// The experiment's three variants.
    Variants,
}

impl Targets {
    async fn of(self, env: &Harness) -> Vec<Target> {
        match self {
            Targets::One(key) => vec![env.target(key).await],
            Targets::Variants => crate::experiments::variants(env).await,
        }
    }
}

fn no_change(_: &mut klaud_lifecycle::engine::EngineConfig) {}

#[tokio::test]
async fn a_candidate_validated_with_the_store_lost_after_any_step_ends_the_same() {
    let scenario = Scenario {
        script: VALIDATED_SCRIPT,
        targets: Targets::One("demo-fp4-b200-sglang"),
        hook: false,
        hunt: false,
        configure: no_change,
        upkeep: true,
    };
    let cuts = [
        Step::Claim,
        Step::Prepare,
        Step::Open,
        Step::Baseline,
        Step::Smoke,
        Step::Final,
        Step::Sweep,
        // Then the validated PR awaits its merge with no record: the
        // upkeep wave rebuilds it from its receipt.
        Step::Finish,
    ]
    .into_iter()
    .map(after_step)
    .collect();
    compare(scenario, cuts, &[]).await;
}

#[tokio::test]
async fn a_repaired_candidate_with_the_store_lost_after_any_step_ends_the_same() {
    let scenario = Scenario {
        script: VALIDATED_SCRIPT,
        targets: Targets::One("demo-fp4-b300-vllm-agentic"),
        hook: true,
        hunt: false,
        configure: no_change,
        upkeep: false,
    };
    let cuts = [Step::Smoke, Step::Repair, Step::Final, Step::Sweep]
        .into_iter()
        .map(after_step)
        .collect();
    compare(scenario, cuts, &[]).await;
}

fn hunt_on(c: &mut klaud_lifecycle::engine::EngineConfig) {
    c.hunt.enabled = true;
    c.hunt.families = vec![crate::regression_hunt::engine::KEY.into()];
}

#[tokio::test]
async fn a_hunt_with_the_store_lost_after_any_of_its_steps_ends_the_same() {
    static SCRIPT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let script = SCRIPT.get_or_init(|| crate::regression_hunt::engine::script("t4"));
    let scenario = Scenario {
        script,
        targets: Targets::One(crate::regression_hunt::engine::KEY),
        hook: false,
        hunt: true,
        configure: hunt_on,
        upkeep: false,
    };
    // Plan, then three steps each dispatched and recorded: seven news.
    let mut cuts: Vec<(String, Cut)> = (1..=7)
        .map(|n| {
            (
                format!("after hunt news {n}"),
                Box::new(move |e: &Event| {
                    e.hunt_news == n
                        && matches!(e.progress, Progress::Waiting(w) if is_hunt_news(w))
                }) as Cut,
            )
        })
        .collect();
    cuts.push(after_step(Step::Smoke));
    compare(scenario, cuts, &[]).await;
}

/// Cuts after the first move off each step any variant makes.
fn variant_cuts() -> Vec<(String, Cut)> {
    [
        Step::Claim,
        Step::Prepare,
        Step::Open,
        Step::Baseline,
        Step::Smoke,
        Step::Final,
        Step::Sweep,
    ]
    .into_iter()
    .map(after_step)
    .collect()
}

#[tokio::test]
async fn an_experiment_with_the_store_lost_after_any_variant_step_ends_the_same() {
    let scenario = Scenario {
        script: crate::experiments::RACE,
        targets: Targets::Variants,
        hook: false,
        hunt: false,
        configure: no_change,
        upkeep: false,
    };
    // Each variant's PR body lists its siblings as this instance's records
    // show them. Rebuilt siblings pass through their earlier steps again
    // within a pass, so a section may be rewritten to those and back: more
    // edits of the body than in the undisturbed race, never another kind
    // of write, and the bodies end the same.
    compare(
        scenario,
        variant_cuts(),
        &["PATCH /repos/demo/benchmarks/pulls/{n}"],
    )
    .await;
}
