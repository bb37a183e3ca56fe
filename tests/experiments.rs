//! Experiments end to end: the variants of one family race
//! through the real engine, the octocrab forge and the GitHub, CI and
//! registry simulators; the first validated one wins, the others stop.

use std::time::{Duration, Instant};

use klaud_claims::{Claimant, SystemClock};
use klaud_lifecycle::engine::{
    CandidateRecord, Engine, Journal, MemoryJournal, Progress, Step, Target,
};
use klaud_lifecycle::experiment::variant_targets;
use klaud_lifecycle::model::Outcome;
use klaud_lifecycle::report::find_record;
use klaud_planner::variant::{Variant, parse_edits, resolve};
use klaud_service::GithubLifecycle;

use crate::support::Harness;

const KEY: &str = "demo-fp4-gb200-dynamo-vllm-disagg";
const RECIPE: &str =
    "benchmarks/multi_node/srt-slurm-recipes/vllm/demo-model/disagg-gb200-1p1d.yaml";

/// The 1st smoke of the family (Variant A) runs long, the 2nd (B) passes
/// at once, the 3rd (C) runs long: B wins while A and C still run.
pub(crate) const RACE: &str = r#"
[families."*"]
smoke = ["success"]
sweep = ["success"]
[families.demo-fp4-gb200-dynamo-vllm-disagg]
smoke = [{ outcome = "success", delay = 30 }, "success", { outcome = "success", delay = 30 }]
sweep = ["success"]
"#;

/// [`RACE`] for waves, which drive each candidate as far as it goes before
/// the next: B's smoke takes a few seconds so that C (driven after it) has
/// opened its PR and dispatched its smoke when B passes.
const WAVE_RACE: &str = r#"
[families."*"]
smoke = ["success"]
sweep = ["success"]
[families.demo-fp4-gb200-dynamo-vllm-disagg]
smoke = [{ outcome = "success", delay = 60 }, { outcome = "success", delay = 3 }, { outcome = "success", delay = 60 }]
sweep = ["success"]
"#;

/// Every smoke of the family fails.
const ALL_FAIL: &str = r#"
[families."*"]
smoke = ["failure"]
sweep = ["success"]
"#;

fn instance(n: u128) -> Claimant {
    Claimant::new(uuid::Uuid::from_u128(0x6578_7000 + n))
}

/// Variants A, B and C = B plus one edit.
fn resolved() -> Vec<klaud_planner::variant::ResolvedVariant> {
    let v = |name: &str, from: Option<&str>, edits: &str| Variant {
        name: name.into(),
        from: from.map(Into::into),
        edits: parse_edits(edits).expect("edits"),
    };
    resolve(&[
        v("A", None, "set resources.gpus_per_node=8"),
        v("B", None, "set model.precision=fp8"),
        v("C", Some("B"), "unset identity.frameworks"),
    ])
    .expect("variants")
}

/// [`resolved`] on the family's candidate.
pub(crate) async fn variants(env: &Harness) -> Vec<Target> {
    let base = env.target(KEY).await;
    variant_targets(&base, "race", &resolved(), 0).expect("targets")
}

fn engine<'a>(
    env: &'a Harness,
    lifecycle: &'a GithubLifecycle<'a>,
    journal: &'a dyn Journal,
    clock: &'a SystemClock,
    who: Claimant,
) -> Engine<'a> {
    env.engine_as(lifecycle, journal, clock, who, &env.config)
}

type Recs = Vec<(CandidateRecord, Progress)>;

/// Drives every record round-robin until all are done (or skipped).
async fn race(env: &Harness, journal: &dyn Journal, who: Claimant, targets: &[Target]) -> Recs {
    race_until(env, journal, who, targets, |_, _| false).await
}

/// [`race`], killed (everything dropped) as soon as `kill(records, steps
/// taken)` says so after a step.
async fn race_until(
    env: &Harness,
    journal: &dyn Journal,
    who: Claimant,
    targets: &[Target],
    kill: impl Fn(&Recs, usize) -> bool,
) -> Recs {
    let lifecycle = GithubLifecycle::new(&env.forge);
    let clock = SystemClock;
    let engine = engine(env, &lifecycle, journal, &clock, who);
    let mut recs = Vec::new();
    for t in targets {
        let rec = engine.open_record(t).await.expect("record");
        recs.push((rec, Progress::Advanced(Step::Claim)));
    }
    let started = Instant::now();
    let mut taken = 0;
    loop {
        let mut busy = false;
        for i in 0..recs.len() {
            if matches!(recs[i].1, Progress::Done(_) | Progress::Skipped(_)) {
                continue;
            }
            busy = true;
            let p = engine.step(&mut recs[i].0).await.expect("step");
            if matches!(p, Progress::Advanced(_)) {
                taken += 1;
            }
            recs[i].1 = p;
            if kill(&recs, taken) {
                return recs;
            }
        }
        if !busy {
            return recs;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "no end after 90 s: {recs:#?}"
        );
        if recs
            .iter()
            .all(|(_, p)| !matches!(p, Progress::Advanced(_)))
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn ending(rec: &CandidateRecord) -> Outcome {
    rec.ending.as_ref().expect("ending").outcome
}

/// Each variant has exactly one PR, each PR one receipt; no claim is left.
async fn assert_clean_end(env: &Harness, recs: &[(CandidateRecord, Progress)]) {
    for (rec, _) in recs {
        assert_eq!(env.pulls(&rec.branch).await.len(), 1, "{}", rec.branch);
        let number = rec
            .pull
            .unwrap_or_else(|| panic!("no PR for {}: {rec:#?}", rec.branch));
        let receipts = env
            .bodies(number)
            .await
            .iter()
            .filter_map(|b| find_record(b).ok().flatten())
            .filter(|r| r.key.to_string().starts_with("klaud-outcome:"))
            .count();
        assert_eq!(receipts, 1, "#{number}");
    }
    assert!(env.claims().await.is_empty(), "claim left");
}

#[tokio::test]
async fn a_race_is_won_by_the_second_variant_and_the_others_are_stopped() {
    let env = Harness::demo().script(RACE).start().await;
    let targets = variants(&env).await;
    let journal = MemoryJournal::new();
    let recs = race(&env, &journal, instance(1), &targets).await;
    let outcomes: Vec<Outcome> = recs.iter().map(|(r, _)| ending(r)).collect();
    assert_eq!(
        outcomes,
        [Outcome::Duplicate, Outcome::Validated, Outcome::Duplicate]
    );
    let winner = &recs[1].0;
    let url = winner.pull_url.clone().expect("url");
    for i in [0, 2] {
        let loser = &recs[i].0;
        let pull = env.pull(loser.pull.expect("pull")).await;
        assert!(!pull.state.is_open(), "the loser's PR is closed");
        let bodies = env.bodies(pull.number).await;
        assert!(
            bodies
                .iter()
                .any(|b| b.contains("klaud-outcome") && b.contains(&url)),
            "the receipt links the winner: {bodies:#?}"
        );
        let run = loser.runs()[0].id;
        let live = crate::support::run_once_completed(&env.forge, run).await;
        assert_eq!(
            live.conclusion.as_ref().map(|c| c.as_str()),
            Some("cancelled"),
            "run {run}"
        );
        // Its last report does not still say "running" after it ended.
        for b in bodies.iter().filter(|b| b.contains("klaud-report:")) {
            assert!(
                !b.contains("· running") && !b.contains("· queued"),
                "a stale live report on the closed PR: {b}"
            );
        }
        let body = pull.body.clone().unwrap_or_default();
        let section = &body[body.find("Related experiments").expect("section")..];
        assert!(
            section.contains("duplicate / 已被取代"),
            "the loser's own row says how it ended: {section}"
        );
    }
    let pull = env.pull(winner.pull.expect("pull")).await;
    assert!(
        pull.state.is_open() && !pull.draft,
        "the winner is ready for review"
    );
    assert!(
        pull.title.starts_with(
            "[Klaud Cold][experiment][Variant B] Update demo-fp4-gb200-dynamo-vllm-disagg "
        ),
        "{}",
        pull.title
    );
    let body = pull.body.clone().unwrap_or_default();
    assert!(body.contains("Related experiments / 相关实验"), "{body}");
    // What reviewers read is not stale: B is validated, A and C stopped.
    let section = &body[body.find("<!-- klaud-experiments -->").expect("section")
        ..body.find("<!-- /klaud-experiments -->").expect("end")];
    assert!(!section.contains("final sweep"), "{section}");
    assert!(!section.contains("smoke,"), "{section}");
    assert_eq!(
        section.matches("duplicate / 已被取代").count(),
        2,
        "{section}"
    );
    assert_eq!(
        section.matches("validated / 已验证").count(),
        1,
        "{section}"
    );
    assert!(
        body.trim_end().ends_with("<!-- /klaud-footer -->"),
        "the footer stays last: {body}"
    );
    let head = winner.head.clone().expect("head");
    let recipe = env
        .forge
        .get_contents(RECIPE, &head)
        .await
        .expect("read")
        .expect("recipe");
    assert!(String::from_utf8_lossy(&recipe).contains("precision: fp8"));
    assert_clean_end(&env, &recs).await;
    // `klaud status` and the dashboard show the siblings together.
    let status =
        klaud_service::status::repository_status(&env.forge, &journal, env.clock, instance(1))
            .await
            .expect("status");
    assert_eq!(status.experiments.len(), 1, "{:#?}", status.experiments);
    let group = &status.experiments[0];
    assert_eq!(group.experiment, "race");
    assert!(group.family.ends_with(&format!(":{KEY}")), "{group:#?}");
    let rows: Vec<(&str, &str, Option<&str>)> = group
        .variants
        .iter()
        .map(|v| {
            (
                v.name.as_str(),
                v.state.as_str(),
                v.pull_request.as_ref().map(|p| p.url.as_str()),
            )
        })
        .collect();
    let pull_of = |i: usize| recs[i].0.pull_url.as_deref();
    assert_eq!(
        rows,
        [
            ("A", "duplicate", pull_of(0)),
            ("B", "validated", pull_of(1)),
            ("C", "duplicate", pull_of(2)),
        ]
    );
    assert_eq!(group.variants[2].from.as_deref(), Some("B"));
    let page = klaud_service::dashboard::render_page(&klaud_service::dashboard::StatusSnapshot {
        repositories: vec![status],
        ..Default::default()
    });
    let section = &page[page.find("<h3>Experiments</h3>").expect("section")..];
    let (a, b, c) = (
        section.find("Variant A").expect("A"),
        section.find("Variant B").expect("B"),
        section.find("Variant C (= B plus").expect("C"),
    );
    assert!(a < b && b < c, "{section}");
    assert!(section.contains(&url), "the winner's PR link: {section}");
}

#[tokio::test]
async fn a_variant_opens_its_pull_request_with_its_baseline_and_experiments_section() {
    let env = Harness::demo().script(RACE).start().await;
    let targets = variants(&env).await;
    let journal = MemoryJournal::new();
    // Every variant up to its first smoke step (nothing dispatched yet).
    let recs = race_until(&env, &journal, instance(1), &targets, |recs, _| {
        recs.iter().all(|(r, _)| r.step == Step::Smoke)
    })
    .await;
    let log = env.stack.state().request_log().await;
    for (rec, _) in &recs {
        let number = rec.pull.expect("pull");
        let edits = log
            .iter()
            .filter(|e| e.method == "PATCH" && e.path.ends_with(&format!("/pulls/{number}")))
            .count();
        // Both are in the body the PR is opened with: no edit after.
        assert_eq!(edits, 0, "PR #{number} body edits before the smoke");
        let body = env.pull(number).await.body.unwrap_or_default();
        assert!(
            body.contains(klaud_lifecycle::report::BASELINE_START),
            "{body}"
        );
        assert!(body.contains("Related experiments / 相关实验"), "{body}");
        assert!(body.contains("smoke, 0 repair(s) used"), "{body}");
    }
}

#[tokio::test]
async fn when_every_variant_fails_each_is_cleaned_up_and_the_family_freed() {
    let env = Harness::demo().script(ALL_FAIL).start().await;
    let targets = variants(&env).await;
    let journal = MemoryJournal::new();
    let recs = race(&env, &journal, instance(1), &targets).await;
    for (rec, _) in &recs {
        assert_eq!(ending(rec), Outcome::Failed, "{rec:#?}");
        assert!(!env.pull(rec.pull.expect("pull")).await.state.is_open());
    }
    assert_clean_end(&env, &recs).await;
}

/// A kill at every step of the losers' stop (after the winner validated),
/// then a restart with or without the journal: the same end, nothing
/// twice, no second winner, no claim left.
#[tokio::test]
async fn a_kill_while_the_losers_stop_then_a_restart_converges() {
    for keep_journal in [true, false] {
        for k in [0, 1, 2, 4, 7] {
            let env = Harness::demo().script(RACE).start().await;
            let targets = variants(&env).await;
            let journal = MemoryJournal::new();
            let validated = |recs: &Recs| {
                recs.iter().any(|(r, _)| {
                    r.step == Step::Done
                        && r.ending.as_ref().map(|e| e.outcome) == Some(Outcome::Validated)
                })
            };
            // Killed the moment the winner is done, then again k steps into
            // the losers' stop.
            race_until(&env, &journal, instance(1), &targets, |r, _| validated(r)).await;
            race_until(&env, &journal, instance(1), &targets, |_, n| n >= k).await;
            if !keep_journal {
                journal.clear();
            }
            let recs = race(&env, &journal, instance(1), &targets).await;
            let what = format!("kill {k} steps into the stop, journal kept: {keep_journal}");
            let outcomes: Vec<Outcome> = recs.iter().map(|(r, _)| ending(r)).collect();
            assert_eq!(
                outcomes,
                [Outcome::Duplicate, Outcome::Validated, Outcome::Duplicate],
                "{what}"
            );
            assert_clean_end(&env, &recs).await;
        }
    }
}

#[tokio::test]
async fn two_instances_racing_for_one_experiment_run_it_once() {
    let env = Harness::demo().script(RACE).start().await;
    let targets = variants(&env).await;
    let (j1, j2) = (MemoryJournal::new(), MemoryJournal::new());
    let (first, second) = tokio::join!(
        race(&env, &j1, instance(1), &targets),
        race(&env, &j2, instance(2), &targets),
    );
    let (won, lost) = if first.iter().all(|(_, p)| matches!(p, Progress::Skipped(_))) {
        (second, first)
    } else {
        (first, second)
    };
    assert!(
        lost.iter().all(|(_, p)| matches!(p, Progress::Skipped(_))),
        "the other instance takes none of the variants: {lost:#?}"
    );
    let outcomes: Vec<Outcome> = won.iter().map(|(r, _)| ending(r)).collect();
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| **o == Outcome::Validated)
            .count(),
        1,
        "{outcomes:?}"
    );
    assert_clean_end(&env, &won).await;
}

/// The family's 1st smoke (the plain candidate) runs long, the 2nd (the
/// maintainer's variant) passes at once.
const TRY: &str = r#"
[families."*"]
smoke = ["success"]
sweep = ["success"]
[families.demo-fp4-gb200-dynamo-vllm-disagg]
smoke = [{ outcome = "success", delay = 30 }, "success"]
sweep = ["success"]
"#;

#[tokio::test]
async fn a_maintainers_klaud_try_starts_a_variant_that_races_the_candidate() {
    use klaud_sandbox::stack::MAINTAINER_TOKEN;
    let env = Harness::demo().script(TRY).start().await;
    let base = env.target(KEY).await;
    let journal = MemoryJournal::new();
    let lifecycle = GithubLifecycle::new(&env.forge);
    let clock = SystemClock;
    let first = engine(&env, &lifecycle, &journal, &clock, instance(1));
    let mut rec = first.open_record(&base).await.expect("record");
    for _ in 0..100 {
        first.step(&mut rec).await.expect("step");
        if rec.attempts.first().is_some_and(|a| a.run.is_some()) {
            break;
        }
    }
    let number = rec.pull.expect("pull");
    let person = env.person(MAINTAINER_TOKEN);
    let bad = person
        .comment(number, "/klaud try T: set nothing.here=1")
        .await;
    let good = person
        .comment(number, "/klaud try T: set model.precision=fp8")
        .await;
    let answered = klaud_service::pr_commands::handle_commands(&env.forge, &first, &mut rec, None)
        .await
        .expect("commands");
    assert_eq!(answered.len(), 2);
    let bodies = env.bodies(number).await;
    let reply = |id: u64| {
        let marker = klaud_service::pr_commands::reply_marker(id);
        bodies
            .iter()
            .find(|b| b.contains(&marker))
            .cloned()
            .unwrap_or_default()
    };
    assert!(
        reply(bad).contains("Not started") && reply(bad).contains("no field nothing"),
        "{}",
        reply(bad)
    );
    assert!(reply(good).contains("Started Variant T"), "{}", reply(good));
    let started: Vec<Target> = answered.iter().flat_map(|a| a.started.clone()).collect();
    assert_eq!(started.len(), 1);
    // The claim lists both; the plain candidate is now the experiment's base.
    let claim = env.claims().await;
    assert_eq!(claim.len(), 1);
    let targets = vec![base.clone(), started[0].clone()];
    let recs = race(&env, &journal, instance(1), &targets).await;
    let outcomes: Vec<Outcome> = recs.iter().map(|(r, _)| ending(r)).collect();
    assert_eq!(outcomes, [Outcome::Duplicate, Outcome::Validated]);
    let winner = env.pull(recs[1].0.pull.expect("pull")).await;
    assert!(
        winner
            .title
            .starts_with("[Klaud Cold][experiment][Variant T] "),
        "{}",
        winner.title
    );
    assert!(
        !env.pull(number).await.state.is_open(),
        "the plain candidate's PR is closed"
    );
    assert_clean_end(&env, &recs).await;
    // Answered once: another pass posts nothing new.
    let lifecycle = GithubLifecycle::new(&env.forge);
    let later = engine(&env, &lifecycle, &journal, &clock, instance(1));
    let mut rec = journal
        .load(base.candidate.as_str())
        .await
        .unwrap()
        .unwrap();
    let again = klaud_service::pr_commands::handle_commands(&env.forge, &later, &mut rec, None)
        .await
        .expect("commands");
    assert!(again.is_empty());
}

/// The options of wave number `wave` that may pick only the family
/// [`KEY`], with `experiments` configured.
fn key_wave_options<'a>(
    env: &'a Harness,
    wave: u64,
    experiments: Vec<klaud_lifecycle::experiment::ExperimentSpec>,
) -> klaud_service::wave_adapters::WaveOptions<'a> {
    let mut engine = crate::support::engine_config(7_000 + wave);
    engine.experiments = experiments;
    let mut options = env.wave_options(instance(1), engine);
    options.lifecycle.plan.max_candidates = 1;
    options.lifecycle.plan.occupied = env
        .repository
        .families()
        .iter()
        .filter(|f| !f.family.ends_with(&format!(":{KEY}")))
        .map(|f| f.id.clone())
        .collect();
    options
}

/// One wave (`run_wave`, as the daemon runs it) that may pick only the
/// family [`KEY`], with `experiments` configured.
async fn one_wave(
    env: &Harness,
    journal: &dyn Journal,
    wave: u64,
    experiments: Vec<klaud_lifecycle::experiment::ExperimentSpec>,
) -> klaud_service::wave_adapters::WaveSummary {
    env.wave(journal, key_wave_options(env, wave, experiments))
        .await
}

type Summaries = std::collections::BTreeMap<String, klaud_service::wave_adapters::CandidateSummary>;

/// Waves from `first` on until no claim is left; `keep_journal: false`
/// gives every wave an empty journal (a lost store): the variants are then
/// rebuilt from their branches, PRs and claim. Each candidate's last
/// summary is added to `last`.
async fn waves_until_free(
    env: &Harness,
    first: u64,
    keep: &MemoryJournal,
    keep_journal: bool,
    experiments: &[klaud_lifecycle::experiment::ExperimentSpec],
    last: &mut Summaries,
) {
    for wave in first..first + 200 {
        let fresh = MemoryJournal::new();
        let journal = if keep_journal { keep } else { &fresh };
        let summary = one_wave(env, journal, wave, experiments.to_vec()).await;
        for c in summary.candidates {
            last.insert(c.candidate.to_string(), c);
        }
        if env.claims().await.is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the experiment did not end within 200 waves: {last:#?}");
}

/// The race `A`, `B`, `C` configured on [`KEY`].
fn race_spec() -> klaud_lifecycle::experiment::ExperimentSpec {
    klaud_lifecycle::experiment::ExperimentSpec {
        name: "race".into(),
        families: vec![KEY.into()],
        max_concurrent: 0,
        variants: resolved(),
    }
}

/// [`waves_until_free`] from the start with [`race_spec`].
async fn waves(env: &Harness, keep_journal: bool) -> Summaries {
    let spec = race_spec();
    let mut last = Summaries::new();
    let keep = MemoryJournal::new();
    waves_until_free(env, 0, &keep, keep_journal, &[spec], &mut last).await;
    last
}

/// Through the wave: B wins, A and C end `duplicate` with a receipt
/// linking B's PR; one PR per variant, no claim left.
async fn wave_race(keep_journal: bool) {
    let env = Harness::demo().script(WAVE_RACE).start().await;
    let targets = variants(&env).await;
    let last = waves(&env, keep_journal).await;
    let what = format!("journal kept: {keep_journal}");
    let outcome = |t: &Target| {
        last.get(t.candidate.as_str())
            .and_then(|c| c.outcome.clone())
            .unwrap_or_else(|| panic!("{} never ended ({what}): {last:#?}", t.candidate))
    };
    assert_eq!(
        targets.iter().map(outcome).collect::<Vec<_>>(),
        ["duplicate", "validated", "duplicate"],
        "{what}"
    );
    let winner = env
        .pulls(&klaud_lifecycle::engine::branch_name(
            targets[1].candidate.as_str(),
        ))
        .await;
    assert_eq!(winner.len(), 1, "{what}");
    let winner = env.pull(winner[0]).await;
    assert!(winner.state.is_open() && !winner.draft, "{what}");
    for (i, t) in targets.iter().enumerate() {
        let branch = klaud_lifecycle::engine::branch_name(t.candidate.as_str());
        let pulls = env.pulls(&branch).await;
        assert_eq!(pulls.len(), 1, "one PR for {branch} ({what}): {last:#?}");
        let bodies = env.bodies(pulls[0]).await;
        let receipts: Vec<&String> = bodies
            .iter()
            .filter(|b| {
                find_record(b)
                    .ok()
                    .flatten()
                    .is_some_and(|r| r.key.to_string().starts_with("klaud-outcome:"))
            })
            .collect();
        assert_eq!(receipts.len(), 1, "one receipt on #{} ({what})", pulls[0]);
        if i != 1 {
            assert!(!env.pull(pulls[0]).await.state.is_open(), "{what}");
            assert!(
                receipts[0].contains(&winner.html_url),
                "the receipt links the winner ({what}): {}",
                receipts[0]
            );
        }
    }
    assert!(env.claims().await.is_empty(), "claim left ({what})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_experiment_races_through_waves() {
    wave_race(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_experiment_races_through_waves_without_a_journal() {
    wave_race(false).await;
}

/// The plain candidate's smoke passes after a few seconds; the variant a
/// maintainer starts with `/klaud try` runs long.
const TRY_LOSES: &str = r#"
[families."*"]
smoke = ["success"]
sweep = ["success"]
[families.demo-fp4-gb200-dynamo-vllm-disagg]
smoke = [{ outcome = "success", delay = 4 }, { outcome = "success", delay = 60 }]
sweep = ["success"]
"#;

/// A `/klaud try` variant is a full sibling: listed in the claim record
/// with the experiment, rebuilt from GitHub when the journal is lost right
/// after the try, and stopped (`duplicate`, PR closed, receipt linking the
/// winner) when the plain candidate, rebuilt as plain from the plan,
/// validates first; the claim is released only after both ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tried_variant_is_rebuilt_without_the_journal_and_stopped_by_the_winner() {
    use klaud_lifecycle::experiment::{Listed, SIBLINGS_FIELD};
    use klaud_sandbox::stack::MAINTAINER_TOKEN;
    let env = Harness::demo().script(TRY_LOSES).start().await;
    let base = env.target(KEY).await;
    let journal = MemoryJournal::new();
    let first = one_wave(&env, &journal, 0, Vec::new()).await;
    let plain = first
        .candidates
        .iter()
        .find(|c| c.candidate == base.candidate.as_str())
        .unwrap_or_else(|| panic!("the plain candidate started: {first:#?}"));
    let number = env
        .pulls(&klaud_lifecycle::engine::branch_name(
            plain.candidate.as_str(),
        ))
        .await[0];
    let person = env.person(MAINTAINER_TOKEN);
    let asked = person
        .comment(number, "/klaud try T: set model.precision=fp8")
        .await;
    let second = one_wave(&env, &journal, 1, Vec::new()).await;
    assert!(
        second.answered.iter().any(|a| a.started.len() == 1),
        "the try started a variant: {second:#?}"
    );
    let reply = klaud_service::pr_commands::reply_marker(asked);
    assert!(
        env.bodies(number).await.iter().any(|b| b.contains(&reply)),
        "the try is answered"
    );
    // The claim lists both candidates and the experiment.
    let book = klaud_claims::ClaimBook::new(&env.forge, &SystemClock, instance(1));
    let entry = book
        .inspect(&base.candidate.family())
        .await
        .expect("inspect")
        .expect("claim");
    let held = book.adopt(&entry).expect("ours");
    assert_eq!(held.record.candidate_ids().len(), 2, "{:?}", held.record);
    let listed = Listed::of_claim(&held.record.extra)
        .unwrap_or_else(|| panic!("no {SIBLINGS_FIELD}: {:?}", held.record))
        .expect("parses");
    assert_eq!(
        listed
            .siblings
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>(),
        ["base", "T"]
    );
    let tried = listed.siblings[1].candidate.clone();
    // The store is lost: every later wave starts from an empty journal.
    let mut last = Summaries::new();
    waves_until_free(&env, 2, &journal, false, &[], &mut last).await;
    let outcome = |id: &str| last.get(id).and_then(|c| c.outcome.clone());
    assert_eq!(
        outcome(base.candidate.as_str()).as_deref(),
        Some("validated"),
        "{last:#?}"
    );
    assert_eq!(
        outcome(tried.as_str()).as_deref(),
        Some("duplicate"),
        "{last:#?}"
    );
    let winner = env.pull(number).await;
    assert!(winner.state.is_open() && !winner.draft);
    let loser = env
        .pulls(&klaud_lifecycle::engine::branch_name(tried.as_str()))
        .await;
    assert_eq!(loser.len(), 1, "one PR for the tried variant");
    assert!(
        !env.pull(loser[0]).await.state.is_open(),
        "the loser's PR is closed"
    );
    let receipts: Vec<String> = env
        .bodies(loser[0])
        .await
        .into_iter()
        .filter(|b| {
            find_record(b)
                .ok()
                .flatten()
                .is_some_and(|r| r.key.to_string().starts_with("klaud-outcome:"))
        })
        .collect();
    assert_eq!(receipts.len(), 1, "{receipts:#?}");
    assert!(receipts[0].contains(&winner.html_url), "{}", receipts[0]);
    assert_eq!(
        env.pulls(&klaud_lifecycle::engine::branch_name(
            base.candidate.as_str()
        ))
        .await
        .len(),
        1
    );
}

/// What every end of a [`RACE`] must look like, however it was
/// interrupted: one PR per variant branch, exactly one `validated` winner,
/// the others `duplicate` with a receipt linking it, every comment marker
/// once per PR, every run completed, no claim left.
async fn assert_race_end(env: &Harness, recs: &Recs, what: &str) {
    let winners: Vec<&CandidateRecord> = recs
        .iter()
        .map(|(r, _)| r)
        .filter(|r| ending(r) == Outcome::Validated)
        .collect();
    assert_eq!(winners.len(), 1, "one winner ({what}): {recs:#?}");
    let url = winners[0].pull_url.clone().expect("winner url");
    for (rec, _) in recs {
        let pulls = env.pulls(&rec.branch).await;
        assert_eq!(pulls.len(), 1, "one PR for {} ({what})", rec.branch);
        assert_eq!(rec.pull, Some(pulls[0].into()), "{what}");
        let bodies = env.bodies(pulls[0]).await;
        let markers: Vec<String> = bodies
            .iter()
            .filter_map(|b| find_record(b).ok().flatten().map(|r| r.key.to_string()))
            .collect();
        let unique: std::collections::BTreeSet<&String> = markers.iter().collect();
        assert_eq!(
            unique.len(),
            markers.len(),
            "markers once ({what}): {markers:#?}"
        );
        if rec.candidate != winners[0].candidate {
            assert_eq!(ending(rec), Outcome::Duplicate, "{} ({what})", rec.branch);
            assert!(
                bodies
                    .iter()
                    .any(|b| b.contains("klaud-outcome") && b.contains(&url)),
                "the receipt of {} links the winner ({what}): {bodies:#?}",
                rec.branch
            );
            assert!(!env.pull(pulls[0]).await.state.is_open(), "{what}");
        }
    }
    for id in env.stack.state().run_ids(crate::support::REPO).await {
        let run = crate::support::run_once_completed(&env.forge, id).await;
        assert_eq!(
            run.status.as_ref().map(|s| s.as_str()),
            Some("completed"),
            "run {id} left running ({what})"
        );
    }
    assert!(env.claims().await.is_empty(), "claim left ({what})");
}

/// A kill after `k` steps in total across the variants of [`RACE`], then a
/// restart with the journal kept or cleared, driven to the end; `true`
/// when the race had finished before the kill.
async fn crash_race_at(k: usize, keep_journal: bool) -> bool {
    let env = Harness::demo().script(RACE).start().await;
    let targets = variants(&env).await;
    let journal = MemoryJournal::new();
    let first = race_until(&env, &journal, instance(1), &targets, |_, n| n >= k).await;
    let finished = first.iter().all(|(r, _)| r.step == Step::Done);
    let at: Vec<String> = first.iter().map(|(r, _)| format!("{:?}", r.step)).collect();
    if !keep_journal {
        journal.clear();
    }
    let recs = race(&env, &journal, instance(1), &targets).await;
    let what = format!("killed after {k} steps at {at:?}, journal kept: {keep_journal}");
    assert_race_end(&env, &recs, &what).await;
    finished
}

/// A kill at any step, then a restart, gives no duplicate PR per variant,
/// no two winners and no leaked claim: at every step of a
/// three-variant race, with and without the journal.
#[tokio::test]
async fn a_kill_at_every_step_of_a_race_then_a_restart_converges() {
    for k in 1..=400 {
        let kept = crash_race_at(k, true).await;
        let cleared = crash_race_at(k, false).await;
        if kept && cleared {
            eprintln!("the race took {} steps; killed after each", k - 1);
            return;
        }
    }
    panic!("the interrupted race never finished");
}

/// After `k` steps of [`RACE`], the next GitHub write lands but its answer
/// is lost (the connection drops), every later write fails, and the
/// process dies in the middle of that step; `true` when the race had
/// finished before.
async fn crash_race_mid_write(k: usize, keep_journal: bool) -> bool {
    use klaud_sandbox::github::{Fault, FaultAction};
    let env = Harness::demo().script(RACE).start().await;
    let targets = variants(&env).await;
    let journal = MemoryJournal::new();
    let mut recs = race_until(&env, &journal, instance(1), &targets, |_, n| n >= k).await;
    let finished = recs.iter().all(|(r, _)| r.step == Step::Done);
    let state = env.stack.state().clone();
    let writes = || async {
        state
            .request_log()
            .await
            .iter()
            .filter(|e| e.method != "GET" && e.method != "HEAD")
            .count()
    };
    let before = writes().await;
    // The first write lands unanswered; every later one fails: the step
    // dies after that one write, wherever it is.
    for method in ["POST", "PATCH", "PUT", "DELETE"] {
        state
            .add_fault(Fault {
                method: Some(method.into()),
                path: "*".into(),
                count: 1,
                action: FaultAction::AfterWriteDrop,
            })
            .await;
    }
    for method in ["POST", "PATCH", "PUT", "DELETE"] {
        state
            .add_fault(Fault {
                method: Some(method.into()),
                path: "*".into(),
                count: 10_000,
                action: FaultAction::Status {
                    status: 500,
                    retry_after: None,
                    message: None,
                },
            })
            .await;
    }
    let mut at = String::from("finished");
    if !finished {
        let lifecycle = GithubLifecycle::new(&env.forge);
        let clock = SystemClock;
        let engine = engine(&env, &lifecycle, &journal, &clock, instance(1));
        let started = Instant::now();
        'steps: while started.elapsed() < Duration::from_secs(60) {
            for (rec, p) in recs.iter_mut() {
                if matches!(p, Progress::Done(_) | Progress::Skipped(_)) {
                    continue;
                }
                at = format!("{} in {:?}", rec.branch, rec.step);
                let result = engine.step(rec).await;
                if result.is_err() || writes().await > before {
                    break 'steps;
                }
                *p = result.expect("step");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert!(
        finished || writes().await > before,
        "no write was interrupted after {k} steps ({at})"
    );
    state.clear_faults().await;
    if !keep_journal {
        journal.clear();
    }
    let recs = race(&env, &journal, instance(1), &targets).await;
    let what = format!("killed mid-write after {k} steps ({at}), journal kept: {keep_journal}");
    assert_race_end(&env, &recs, &what).await;
    finished
}

/// The kill of [`a_kill_at_every_step_of_a_race_then_a_restart_converges`]
/// inside a step: after each step, the next write lands unanswered and the
/// process dies; the journal is kept after odd steps and cleared after
/// even ones (both at every step would double an already long test).
#[tokio::test]
async fn a_kill_inside_any_write_of_a_race_then_a_restart_converges() {
    for k in 1..=400 {
        if crash_race_mid_write(k, k % 2 == 1).await {
            return;
        }
    }
    panic!("the interrupted race never finished");
}

/// The winner is validated while its siblings still run, and main takes
/// another changelog entry before they stop. With no cooldown (the demo's,
/// or `planner.cooldown = 0`) each wave plans the family again while its
/// siblings are in flight, and the plan names the winner's candidate too:
/// its finished record must stay the pass's only copy. The wave in which
/// the siblings stop and free the claim merges the base into the winner
/// once, and a second, stale copy must not take that merge for a person's
/// push and withdraw the reuse line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_winner_kept_mergeable_in_the_wave_its_siblings_stop_keeps_its_reuse_line() {
    use klaud_lifecycle::engine::branch_name;
    let env = Harness::demo().script(WAVE_RACE).start().await;
    let targets = variants(&env).await;
    let winner = targets[1].candidate.as_str();
    let spec = race_spec();
    let journal = MemoryJournal::new();
    let wave_without_cooldown = |wave: u64| {
        let mut options = key_wave_options(&env, wave, vec![spec.clone()]);
        options.lifecycle.cooldown = Duration::ZERO;
        options
    };
    let validated = |rec: &Option<CandidateRecord>| {
        rec.as_ref().is_some_and(|r| {
            r.step == Step::Done && r.ending.as_ref().map(|e| e.outcome) == Some(Outcome::Validated)
        })
    };
    let mut wave = 0;
    while !validated(&journal.load(winner).await.expect("load")) {
        assert!(wave < 200, "Variant B never validated");
        env.wave(&journal, wave_without_cooldown(wave)).await;
        wave += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let unfinished = [&targets[0], &targets[2]].map(|t| t.candidate.as_str());
    for id in unfinished {
        let rec = journal.load(id).await.expect("load").expect("sibling");
        assert_ne!(
            rec.step,
            Step::Done,
            "{id} ended before the test could move main"
        );
    }

    // Another PR's changelog entry lands on main: B's tail entry conflicts.
    let changelog = std::fs::read_to_string(
        std::path::Path::new(crate::support::REPO_ROOT).join("configs/demo/perf-changelog.yaml"),
    )
    .expect("changelog");
    let entry = "\n- config-keys:\n    - demo-fp4-b200-sglang\n  description:\n    - \"Another PR's entry.\"\n  pr-link: https://github.com/sandbox/benchmarks/pull/99\n";
    env.stack
        .state()
        .push_commit(
            crate::support::REPO,
            "main",
            klaud_sandbox::stack::MAINTAINER,
            std::collections::BTreeMap::from([(
                "perf-changelog.yaml".to_owned(),
                Some(format!("{}{entry}", changelog.trim_end()).into_bytes()),
            )]),
            "Another PR's changelog entry",
        )
        .await
        .expect("push to main");

    // Waves until the siblings have stopped and freed the claim, and one
    // more for the upkeep the free claim allows.
    let mut freed = false;
    for _ in 0..200 {
        env.wave(&journal, wave_without_cooldown(wave)).await;
        wave += 1;
        if freed {
            break;
        }
        freed = env.claims().await.is_empty();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(freed, "the siblings never stopped");
    let rec = journal.load(winner).await.expect("load").expect("winner");
    let number = env.pulls(&branch_name(winner)).await[0];
    let pull = env.pull(number).await;
    assert!(pull.state.is_open(), "{rec:#?}");
    assert_eq!(
        rec.head.as_deref(),
        Some(pull.head_sha.as_str()),
        "the record knows the head Klaud merged: {rec:#?}"
    );
    let upkeep = rec.upkeep.clone().unwrap_or_default();
    assert_eq!(
        upkeep.merged_bases.len(),
        1,
        "the base merged in once: {upkeep:?}"
    );
    assert!(upkeep.withdrawn.is_none(), "{upkeep:?}");
    let run = rec.sweep.as_ref().expect("sweep").run_id;
    let bodies = env.bodies(number).await;
    assert_eq!(
        bodies
            .iter()
            .filter(|b| b.trim() == format!("/reuse-sweep-run {run}"))
            .count(),
        1,
        "the reuse line stands: {bodies:#?}"
    );
    assert!(
        !bodies
            .iter()
            .any(|b| b.contains("klaud-reuse-withdrawn") || b.contains("klaud-sweep-uncovered")),
        "nothing withdrawn: {bodies:#?}"
    );
}
