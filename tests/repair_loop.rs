//! The repair hook through the sandbox: repairs after a failed final sweep,
//! several pushed commits recognised by author and trailer, the report of
//! what a repair changed, and the checkout of the head a command hook gets.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use klaud_lifecycle::engine::{
    MemoryJournal, RepairContext, RepairError, RepairHook, RepairOutcome,
};
use klaud_lifecycle::model::{AttemptKind, Outcome, Phase};
use klaud_sandbox::stack::MAINTAINER;
use klaud_service::{CheckoutSource, CommandHook};

use crate::support::{Harness, REPO};

const BOT: &str = "Klaud-Cold";

/// One commit a hook pushes: author login, subject, file, and whether its
/// message carries the candidate's trailer.
#[derive(Clone)]
struct Push {
    author: &'static str,
    subject: &'static str,
    file: &'static str,
    trailer: bool,
}

/// A hook that pushes `pushes` (through the GitHub simulator, as a hook
/// pushing as the bot would) on every call and records its input.
struct ScriptedHook {
    state: klaud_sandbox::github::GithubState,
    pushes: Vec<Push>,
    seen: Mutex<Vec<RepairContext>>,
}

impl ScriptedHook {
    fn new(env: &Harness, pushes: Vec<Push>) -> Self {
        Self {
            state: env.stack.state().clone(),
            pushes,
            seen: Mutex::new(Vec::new()),
        }
    }

    fn seen(&self) -> Vec<RepairContext> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[async_trait]
impl RepairHook for ScriptedHook {
    async fn repair(&self, ctx: &RepairContext) -> Result<RepairOutcome, RepairError> {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(ctx.clone());
        for p in &self.pushes {
            let mut files = BTreeMap::new();
            files.insert(
                p.file.to_owned(),
                Some(format!("repair {} of {}\n", ctx.repair, p.subject).into_bytes()),
            );
            let message = if p.trailer {
                format!(
                    "{}\n\nEvidence: {:?}\n\n{}\n",
                    p.subject,
                    ctx.failed_jobs
                        .iter()
                        .map(|j| j.name.as_str())
                        .collect::<Vec<_>>(),
                    ctx.trailer
                )
            } else {
                format!("{}\n", p.subject)
            };
            self.state
                .push_commit(REPO, &ctx.branch, p.author, files, &message)
                .await
                .map_err(RepairError::new)?;
        }
        Ok(RepairOutcome::Pushed)
    }
}

fn two_trailer_commits() -> Vec<Push> {
    vec![
        Push {
            author: BOT,
            subject: "Lower max-num-seqs for the smoke (修复)",
            file: "repairs/serve-args.txt",
            trailer: true,
        },
        Push {
            author: BOT,
            subject: "Raise the server start timeout",
            file: "repairs/timeouts.txt",
            trailer: true,
        },
    ]
}

/// The report comments on the candidate's PR that say what a repair
/// changed.
async fn change_reports(env: &Harness, number: impl Into<u64>) -> Vec<String> {
    let number: u64 = number.into();
    env.bodies(number)
        .await
        .into_iter()
        .filter(|b| b.contains("klaud-report:") && b.contains("What repair"))
        .collect()
}

#[tokio::test]
async fn a_failed_sweep_is_repaired_and_passes_on_the_rerun() {
    let env = Harness::demo()
        .script(
            r#"
[families."*"]
smoke = ["success"]
sweep = ["success"]
[families.demo-fp4-b200-sglang]
sweep = ["failure", "success"]
"#,
        )
        .start()
        .await;
    let target = env.target("demo-fp4-b200-sglang").await;
    let journal = MemoryJournal::new();
    let hook = ScriptedHook::new(&env, two_trailer_commits());
    let rec = env.finish_with(&journal, &target, Some(&hook)).await;
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Validated, "{ending:?}");
    assert_eq!(rec.repairs, 1);
    let kinds: Vec<AttemptKind> = rec.attempts.iter().map(|a| a.kind).collect();
    assert_eq!(
        kinds,
        vec![
            AttemptKind::Initial { budget: 5 },
            AttemptKind::FinalSweep,
            AttemptKind::FinalSweep
        ]
    );
    // The hook was called once, for the failed sweep, with its run and jobs.
    let seen = hook.seen();
    assert_eq!(seen.len(), 1);
    let ctx = &seen[0];
    assert_eq!(ctx.phase, Phase::FinalSweep);
    assert_eq!(ctx.budget_left, 4);
    assert_eq!(ctx.head, rec.attempts[1].head);
    assert_eq!(
        ctx.run.as_ref().map(|r| r.id),
        rec.attempts[1].run.as_ref().map(|r| r.id)
    );
    assert!(!ctx.failed_jobs.is_empty(), "{ctx:?}");
    // The report record the hook got is the failed sweep's, as published.
    assert_eq!(ctx.report["kind"]["kind"], "final-sweep", "{}", ctx.report);
    assert_eq!(ctx.report["status"], "failed", "{}", ctx.report);
    // The second sweep ran on the repaired head, which is the branch tip.
    let tip = env
        .forge
        .get_ref(&format!("refs/heads/{}", rec.branch))
        .await
        .expect("ref")
        .expect("branch");
    assert_eq!(rec.attempts[2].head, tip);
    assert_ne!(rec.attempts[1].head, tip);
    assert_ne!(
        rec.attempts[1].run.as_ref().map(|r| r.id),
        rec.attempts[2].run.as_ref().map(|r| r.id),
        "a new sweep run, not the failed one"
    );
    let number = rec.pull.expect("pull");
    let reports = change_reports(&env, number).await;
    assert_eq!(reports.len(), 1, "{reports:#?}");
    let report = &reports[0];
    assert!(report.contains("Final full sweep"), "{report}");
    assert!(
        report.contains("Lower max-num-seqs for the smoke (修复)"),
        "{report}"
    );
    assert!(
        report.contains("Raise the server start timeout"),
        "{report}"
    );
    assert!(report.contains("`repairs/serve-args.txt`"), "{report}");
    assert!(report.contains("`repairs/timeouts.txt`"), "{report}");
    assert!(report.contains("**修复 1 的改动**"), "{report}");
    assert!(report.contains("涉及的文件："), "{report}");
}

#[tokio::test]
async fn the_sweep_is_not_repaired_beyond_the_budget() {
    let mut env = Harness::demo()
        .script(
            r#"
[families."*"]
smoke = ["success"]
sweep = ["failure"]
"#,
        )
        .start()
        .await;
    env.config.repair_budget = 1;
    let target = env.target("demo-fp4-b200-sglang").await;
    let journal = MemoryJournal::new();
    let hook = ScriptedHook::new(&env, two_trailer_commits());
    let rec = env.finish_with(&journal, &target, Some(&hook)).await;
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Failed, "{ending:?}");
    assert_eq!(ending.phase, Phase::FinalSweep, "{ending:?}");
    assert!(ending.message.contains("after 1 repairs"), "{ending:?}");
    assert_eq!(hook.seen().len(), 1);
    assert_eq!(rec.repairs, 1);
}

#[tokio::test]
async fn two_commits_with_the_trailer_are_the_repair_and_listed_in_its_report() {
    let env = Harness::demo()
        .script(crate::lifecycle_e2e::VALIDATED_SCRIPT)
        .start()
        .await;
    // Its smoke fails once, then passes.
    let target = env.target("demo-fp4-b300-vllm-agentic").await;
    let journal = MemoryJournal::new();
    let hook = ScriptedHook::new(&env, two_trailer_commits());
    let rec = env.finish_with(&journal, &target, Some(&hook)).await;
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Validated, "{ending:?}");
    assert_eq!(rec.repairs, 1);
    assert_eq!(hook.seen()[0].phase, Phase::Targeted);
    let number = rec.pull.expect("pull");
    let reports = change_reports(&env, number).await;
    assert_eq!(reports.len(), 1, "{reports:#?}");
    let report = &reports[0];
    assert!(report.contains("Repair 1/5"), "{report}");
    assert!(
        report.contains("**What repair 1 changed**") && report.contains("2 commit(s), 2 file(s)"),
        "{report}"
    );
    assert!(
        report.contains(
            "- Lower max-num-seqs for the smoke (修复)\n- Raise the server start timeout\n"
        ),
        "{report}"
    );
    assert!(
        report.contains("Files touched: `repairs/serve-args.txt`, `repairs/timeouts.txt`"),
        "{report}"
    );
    assert!(report.contains("个提交"), "{report}");
    // The typed record carries the same.
    let record = klaud_lifecycle::report::find_record(report)
        .expect("record")
        .expect("a record");
    let parsed = klaud_lifecycle::report::parse_report(&record).expect("report");
    let changes = parsed.repair.expect("repair changes");
    assert_eq!(changes.n, 1);
    assert_eq!(changes.subjects.len(), 2);
    assert_eq!(
        changes.files,
        vec!["repairs/serve-args.txt", "repairs/timeouts.txt"]
    );
}

#[tokio::test]
async fn a_pushed_commit_without_the_trailer_is_a_handoff() {
    let env = Harness::demo()
        .script(crate::lifecycle_e2e::VALIDATED_SCRIPT)
        .start()
        .await;
    let target = env.target("demo-fp4-b300-vllm-agentic").await;
    let journal = MemoryJournal::new();
    let mut pushes = two_trailer_commits();
    pushes.push(Push {
        author: BOT,
        subject: "Tweak by hand",
        file: "repairs/by-hand.txt",
        trailer: false,
    });
    let hook = ScriptedHook::new(&env, pushes);
    let rec = env.finish_with(&journal, &target, Some(&hook)).await;
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Handoff, "{ending:?}");
    assert!(ending.message.contains("without the trailer"), "{ending:?}");
    // Handed off: the PR and branch stay as the person left them.
    let pull = env.pull(rec.pull.expect("pull")).await;
    assert!(pull.state.is_open(), "a handoff leaves the PR open");
    assert_eq!(rec.repairs, 0, "the push is not counted as Klaud's repair");
}

#[tokio::test]
async fn a_trailer_commit_by_another_author_is_a_handoff() {
    let env = Harness::demo()
        .script(crate::lifecycle_e2e::VALIDATED_SCRIPT)
        .start()
        .await;
    let target = env.target("demo-fp4-b300-vllm-agentic").await;
    let journal = MemoryJournal::new();
    let hook = ScriptedHook::new(
        &env,
        vec![Push {
            author: MAINTAINER,
            subject: "A maintainer's fix that copied the trailer",
            file: "repairs/maintainer.txt",
            trailer: true,
        }],
    );
    let rec = env.finish_with(&journal, &target, Some(&hook)).await;
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Handoff, "{ending:?}");
    assert!(ending.message.contains(MAINTAINER), "{ending:?}");
}

#[tokio::test]
async fn a_command_hook_runs_in_a_checkout_of_the_head() {
    let env = Harness::demo()
        .script(crate::lifecycle_e2e::VALIDATED_SCRIPT)
        .start()
        .await;
    // Its smoke always fails.
    let target = env.target("demo-fp4-b200-vllm").await;
    let journal = MemoryJournal::new();
    let out = tempfile::tempdir().expect("tempdir");
    let root = tempfile::tempdir().expect("checkout root");
    let script = format!(
        r#"set -eu
input=$(cat)
printf '%s' "$input" > '{out}/input.json'
dir=$(printf '%s' "$input" | sed -n 's/.*"checkout":"\([^"]*\)".*/\1/p')
git -C "$dir" rev-parse HEAD > '{out}/head'
git -C "$dir" rev-parse --abbrev-ref HEAD > '{out}/branch'
git -C "$dir" status --porcelain > '{out}/status'
ls "$dir/configs" > '{out}/configs'
echo "$dir" > '{out}/dir'
echo 'looked at the checkout; no fix' >&2
exit 3
"#,
        out = out.path().display()
    );
    let hook = CommandHook::new(
        vec!["sh".into(), "-c".into(), script],
        Duration::from_secs(60),
    )
    .expect("hook")
    .with_api_base(&env.stack.github.url())
    .with_checkout(CheckoutSource {
        root: root.path().to_path_buf(),
        clone_url: format!("{}/_html/{REPO}.git", env.stack.github.url()),
        token_env: None,
    });
    let rec = env.finish_with(&journal, &target, Some(&hook)).await;
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Failed, "{ending:?}");
    assert!(
        ending.message.contains("looked at the checkout; no fix"),
        "{ending:?}"
    );
    let read = |name: &str| {
        std::fs::read_to_string(out.path().join(name))
            .unwrap_or_else(|e| panic!("{name}: {e} (ending: {ending:?})"))
    };
    let input: serde_json::Value = serde_json::from_str(&read("input.json")).expect("input");
    assert_eq!(input["version"], 2);
    assert_eq!(input["budget_left"], 4);
    assert_eq!(input["api_base"], env.stack.github.url());
    assert_eq!(
        input["trailer"],
        format!("Klaud-Candidate: {}", rec.candidate)
    );
    assert_eq!(input["author"], BOT);
    // The checkout is at the head the failed smoke tested, on the
    // candidate's branch, clean, with the repository's files.
    let head = input["head"].as_str().expect("head");
    assert_eq!(read("head").trim(), head);
    assert_eq!(rec.attempts[0].head, head);
    assert_eq!(read("branch").trim(), rec.branch);
    assert_eq!(read("status").trim(), "");
    assert!(
        read("configs").contains("nvidia-master.yaml"),
        "{}",
        read("configs")
    );
    // In the deterministic per-candidate place, and removed afterwards.
    let dir = read("dir");
    assert_eq!(
        Path::new(dir.trim()),
        root.path().join(rec.candidate.as_str()),
        "{dir}"
    );
    assert!(
        !Path::new(dir.trim()).exists(),
        "the checkout is cleaned up"
    );
}

#[tokio::test]
async fn the_example_hook_reads_the_input_and_gives_up_with_a_reason() {
    let env = Harness::demo()
        .script(crate::lifecycle_e2e::VALIDATED_SCRIPT)
        .start()
        .await;
    let target = env.target("demo-fp4-b200-vllm").await;
    let journal = MemoryJournal::new();
    let root = tempfile::tempdir().expect("checkout root");
    let example = Path::new(crate::support::REPO_ROOT).join("configs/repair-hook-example.sh");
    let hook = CommandHook::new(vec![example.display().to_string()], Duration::from_secs(60))
        .expect("hook")
        .with_api_base(&env.stack.github.url())
        .with_checkout(CheckoutSource {
            root: root.path().to_path_buf(),
            clone_url: format!("{}/_html/{REPO}.git", env.stack.github.url()),
            token_env: None,
        });
    let rec = env.finish_with(&journal, &target, Some(&hook)).await;
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Failed, "{ending:?}");
    // Past the version check and into the checkout: its last words.
    assert!(
        ending.message.contains("the example hook makes no fix"),
        "{ending:?}"
    );
    assert!(!root.path().join(rec.candidate.as_str()).exists());
}

#[tokio::test]
async fn a_foreign_commit_after_a_sweep_repair_hands_off_in_the_final_sweep() {
    let env = Harness::demo()
        .script(
            r#"
[families."*"]
smoke = ["success"]
sweep = ["failure"]
"#,
        )
        .start()
        .await;
    let target = env.target("demo-fp4-b200-sglang").await;
    let journal = MemoryJournal::new();
    let hook = ScriptedHook::new(
        &env,
        vec![Push {
            author: BOT,
            subject: "Fix without the trailer",
            file: "repairs/x.txt",
            trailer: false,
        }],
    );
    let rec = env.finish_with(&journal, &target, Some(&hook)).await;
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Handoff, "{ending:?}");
    assert_eq!(ending.phase, Phase::FinalSweep, "{ending:?}");
    assert_eq!(hook.seen()[0].phase, Phase::FinalSweep);
}

#[tokio::test]
async fn one_shot_waves_with_empty_journals_repair_a_sweep_once_and_count_it() {
    // Runs outlast a wave that does not wait, so the repair and the sweep
    // after it are seen by waves that know only what GitHub shows.
    let env = Harness::demo()
        .script(
            r#"
[families."*"]
smoke = [{ delay = 1, outcome = "success" }]
sweep = [{ delay = 1, outcome = "failure" }, { delay = 1, outcome = "success" }]
"#,
        )
        .start()
        .await;
    let hook = ScriptedHook::new(&env, two_trailer_commits());
    let mut outcome = None;
    for wave in 0..60u64 {
        let journal = MemoryJournal::new();
        let mut options = env.wave_options(
            crate::support::owner(),
            crate::support::engine_config(9_000 + wave),
        );
        options.lifecycle.plan.max_candidates = 1;
        let summary = env.wave_repair(&journal, Some(&hook), options).await;
        let c = summary.candidates.first().expect("a candidate").clone();
        if c.outcome.is_some() {
            outcome = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let c = outcome.expect("the candidate finished within 60 waves");
    assert_eq!(c.outcome.as_deref(), Some("validated"), "{c:#?}");
    assert_eq!(hook.seen().len(), 1, "one repair, however many waves");
    let branch = klaud_lifecycle::engine::branch_name(c.candidate.as_str());
    let number = env.pulls(&branch).await[0];
    let reports = change_reports(&env, number).await;
    assert_eq!(reports.len(), 1, "{reports:#?}");
    assert!(
        reports[0].contains("**What repair 1 changed**"),
        "{}",
        reports[0]
    );
    let receipt = env
        .bodies(number)
        .await
        .into_iter()
        .find(|b| b.starts_with("<!-- klaud-outcome:"))
        .expect("receipt");
    assert!(receipt.contains("Repairs: 1"), "{receipt}");
}

/// The multi-node family whose recipe the variants edit.
const DISAGG: &str = "demo-fp4-gb200-dynamo-vllm-disagg";

/// The family's 1st smoke (the plain candidate) fails, the 2nd (the first
/// proposed variant, B) runs long, the 3rd (C) passes: C wins.
const PROPOSED_RACE: &str = r#"
[families."*"]
smoke = ["success"]
sweep = ["success"]
[families.demo-fp4-gb200-dynamo-vllm-disagg]
smoke = ["failure", { outcome = "success", delay = 30 }, "success"]
sweep = ["success"]
"#;

/// A command hook that answers a failed attempt of `candidate` by writing
/// `output` (the file's bytes) to the input's `output` path, and gives up
/// on every other candidate; each call appends a line to `calls`.
fn proposing_hook(candidate: &str, output: &str, calls: &Path) -> CommandHook {
    let script = format!(
        r#"in=$(cat); echo call >> '{calls}'
case "$in" in
  *'"candidate":"{candidate}"'*) ;;
  *) echo "no idea for this variant" >&2; exit 1 ;;
esac
out=$(printf '%s' "$in" | sed -n 's/.*"output":"\([^"]*\)".*/\1/p')
printf '%s' '{output}' > "$out""#,
        calls = calls.display(),
    );
    CommandHook::new(
        vec!["sh".into(), "-c".into(), script],
        Duration::from_secs(30),
    )
    .expect("hook")
}

fn target_of(rec: &klaud_lifecycle::engine::CandidateRecord) -> klaud_lifecycle::engine::Target {
    klaud_lifecycle::engine::Target {
        family: rec.family.clone(),
        candidate: klaud_claims::CandidateId::new(rec.candidate.as_str()).expect("id"),
        image: rec.image.clone(),
        revision: rec.revision.clone(),
        clock: rec.clock.clone(),
        not_release_reason: rec.not_release_reason.clone(),
        upstream: rec.upstream.clone(),
        versions: rec.versions.clone(),
        variant: rec.variant.clone(),
    }
}

/// Drives `targets` round-robin, taking up every candidate the journal
/// gains meanwhile (the variants the hook proposes), until all are done or
/// `stop(steps taken)` says so; returns the records and the targets known.
async fn grow_race(
    env: &Harness,
    journal: &dyn klaud_lifecycle::engine::Journal,
    hook: &dyn RepairHook,
    targets: &mut Vec<klaud_lifecycle::engine::Target>,
    stop: impl Fn(usize) -> bool,
) -> Vec<klaud_lifecycle::engine::CandidateRecord> {
    use klaud_lifecycle::engine::Progress;
    let lifecycle = klaud_service::GithubLifecycle::new(&env.forge);
    let clock = klaud_claims::SystemClock;
    let engine = env.engine(&lifecycle, journal, &clock).with_repair(hook);
    let mut recs = Vec::new();
    for t in targets.iter() {
        recs.push(engine.open_record(t).await.expect("record"));
    }
    let started = std::time::Instant::now();
    let mut taken = 0;
    loop {
        for r in journal.list().await.expect("list") {
            if !recs.iter().any(|x| x.candidate == r.candidate) {
                targets.push(target_of(&r));
                recs.push(r);
            }
        }
        let mut busy = false;
        let mut advanced = false;
        for rec in recs.iter_mut() {
            if rec.step == klaud_lifecycle::engine::Step::Done {
                continue;
            }
            busy = true;
            match engine.step(rec).await.expect("step") {
                Progress::Advanced(_) => {
                    advanced = true;
                    taken += 1;
                    if stop(taken) {
                        return recs;
                    }
                }
                Progress::Skipped(why) => panic!("{} skipped: {why}", rec.candidate),
                _ => {}
            }
        }
        if !busy {
            return recs;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "no end after 90 s: {recs:#?}"
        );
        if !advanced {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

const TWO_VARIANTS: &str =
    r#"{"variants": ["B: set resources.gpus_per_node=8", "C from B: set model.precision=fp8"]}"#;

fn outcome(rec: &klaud_lifecycle::engine::CandidateRecord) -> Outcome {
    rec.ending
        .as_ref()
        .unwrap_or_else(|| panic!("no ending: {rec:#?}"))
        .outcome
}

#[tokio::test]
async fn the_hook_proposes_two_variants_and_the_second_wins_the_race() {
    let env = Harness::demo().script(PROPOSED_RACE).start().await;
    let base = env.target(DISAGG).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let calls = dir.path().join("calls");
    let hook = proposing_hook(base.candidate.as_str(), TWO_VARIANTS, &calls);
    let journal = MemoryJournal::new();
    let mut targets = vec![base.clone()];
    let recs = grow_race(&env, &journal, &hook, &mut targets, |_| false).await;
    assert_eq!(recs.len(), 3, "the candidate and its two proposed variants");
    let by_name = |name: &str| {
        recs.iter()
            .find(|r| r.variant.as_ref().is_some_and(|v| v.name == name))
            .unwrap_or_else(|| panic!("no Variant {name}: {recs:#?}"))
    };
    let (orig, b, c) = (by_name("base"), by_name("B"), by_name("C"));
    assert_eq!(orig.candidate, base.candidate.as_str());
    assert_eq!(
        [outcome(orig), outcome(b), outcome(c)],
        [Outcome::Duplicate, Outcome::Duplicate, Outcome::Validated]
    );
    // The hook was asked once: by the candidate, not again while it waited
    // (B was stopped before its smoke ended).
    let asked = std::fs::read_to_string(&calls).unwrap_or_default();
    assert_eq!(asked.lines().count(), 1, "{asked}");
    let winner = c.pull_url.clone().expect("url");
    for loser in [orig, b] {
        let pull = env.pull(loser.pull.expect("pull")).await;
        assert!(!pull.state.is_open(), "{}", loser.branch);
        let bodies = env.bodies(pull.number).await;
        assert!(
            bodies
                .iter()
                .any(|x| x.contains("klaud-outcome") && x.contains(&winner)),
            "the receipt links the winner: {bodies:#?}"
        );
    }
    // C = B plus an edit, proposed by the hook after the failed smoke.
    let pull = env.pull(c.pull.expect("pull")).await;
    assert!(
        pull.state.is_open() && !pull.draft,
        "the winner is ready for review"
    );
    assert!(
        pull.title
            .starts_with("[Klaud Cold][experiment][Variant C] "),
        "{}",
        pull.title
    );
    let body = pull.body.clone().unwrap_or_default();
    assert!(
        body.contains(
            "Variant C was proposed by the repair hook, instead of repair 1, after Variant base's"
        ),
        "{body}"
    );
    assert!(body.contains("Variant C = Variant B plus"), "{body}");
    let head = c.head.clone().expect("head");
    let recipe = env
        .forge
        .get_contents(
            "benchmarks/multi_node/srt-slurm-recipes/vllm/demo-model/disagg-gb200-1p1d.yaml",
            &head,
        )
        .await
        .expect("read")
        .expect("recipe");
    let recipe = String::from_utf8_lossy(&recipe);
    assert!(recipe.contains("precision: fp8"), "{recipe}");
    assert!(recipe.contains("gpus_per_node: 8"), "{recipe}");
    for rec in &recs {
        assert_eq!(env.pulls(&rec.branch).await.len(), 1, "{}", rec.branch);
    }
    assert!(env.claims().await.is_empty(), "claim left");
}

#[tokio::test]
async fn a_crash_after_the_proposal_restarts_without_asking_the_hook_again() {
    for keep_journal in [true, false] {
        let env = Harness::demo().script(PROPOSED_RACE).start().await;
        let base = env.target(DISAGG).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let calls = dir.path().join("calls");
        let hook = proposing_hook(base.candidate.as_str(), TWO_VARIANTS, &calls);
        let journal = MemoryJournal::new();
        let mut targets = vec![base.clone()];
        // Killed as soon as the proposal was made (the hook asked once).
        let asked = || {
            std::fs::read_to_string(&calls)
                .unwrap_or_default()
                .lines()
                .count()
        };
        grow_race(&env, &journal, &hook, &mut targets, |_| asked() > 0).await;
        assert_eq!(asked(), 1);
        if !keep_journal {
            journal.clear();
        }
        let recs = grow_race(&env, &journal, &hook, &mut targets, |_| false).await;
        let what = format!("journal kept: {keep_journal}");
        assert_eq!(asked(), 1, "the hook is not asked again ({what})");
        let mut outcomes: Vec<(String, Outcome)> = recs
            .iter()
            .map(|r| {
                (
                    r.variant.as_ref().map_or("?".into(), |v| v.name.clone()),
                    outcome(r),
                )
            })
            .collect();
        outcomes.sort();
        assert_eq!(
            outcomes,
            [
                ("B".to_owned(), Outcome::Duplicate),
                ("C".to_owned(), Outcome::Validated),
                ("base".to_owned(), Outcome::Duplicate),
            ],
            "{what}"
        );
        for rec in &recs {
            assert_eq!(
                env.pulls(&rec.branch).await.len(),
                1,
                "{} {what}",
                rec.branch
            );
        }
        assert!(env.claims().await.is_empty(), "claim left ({what})");
    }
}

#[tokio::test]
async fn a_bad_proposal_adds_nothing_and_fails_naming_the_field() {
    let env = Harness::demo().script(PROPOSED_RACE).start().await;
    let base = env.target(DISAGG).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let calls = dir.path().join("calls");
    // The second entry's edit does not apply to the recipe.
    let hook = proposing_hook(
        base.candidate.as_str(),
        r#"{"variants": ["B: set resources.gpus_per_node=8", "C: set nothing.here=1"]}"#,
        &calls,
    );
    let journal = MemoryJournal::new();
    let mut targets = vec![base.clone()];
    let recs = grow_race(&env, &journal, &hook, &mut targets, |_| false).await;
    assert_eq!(recs.len(), 1, "no variant was added: {recs:#?}");
    let ending = recs[0].ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Failed);
    assert!(
        ending.message.contains("Variant C") && ending.message.contains("none was added"),
        "{ending:?}"
    );
    let bad_json = proposing_hook(
        base.candidate.as_str(),
        r#"{"variants": ["B set"]}"#,
        &calls,
    );
    let env = Harness::demo().script(PROPOSED_RACE).start().await;
    let journal = MemoryJournal::new();
    let mut targets = vec![base.clone()];
    let recs = grow_race(&env, &journal, &bad_json, &mut targets, |_| false).await;
    let ending = recs[0].ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Failed);
    assert!(
        ending.message.contains("output.json") && ending.message.contains("variants[0]"),
        "{ending:?}"
    );
    assert!(env.claims().await.is_empty(), "claim left");
}
