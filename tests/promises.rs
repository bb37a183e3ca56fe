//! What Klaud promises on a validated PR awaiting its merge, re-verified on
//! every upkeep pass through the GitHub simulator, and read back with the
//! simulator's copy of the repository's reuse gate: a person's push
//! withdraws Klaud's `/reuse-sweep-run` (the PR and the dashboard issue
//! say so), a bare line is never relied on and a deleted one is posted
//! again, a maintainer's line pinning the same run is left to stand, and
//! the upkeep merge never appends a changelog entry the base already
//! holds. A second pass writes nothing.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use klaud_claims::PullNumber;
use klaud_lifecycle::engine::{CandidateRecord, Journal as _, Upkept};
use klaud_planner::changelog::validate_append;
use klaud_sandbox::ci::reuse::{GateComment, REUSE_COMMAND, find_reuse_authorization};
use klaud_sandbox::github::Permission;
use klaud_sandbox::stack::{MAINTAINER, MAINTAINER_TOKEN};

use crate::lifecycle_e2e::VALIDATED_SCRIPT;
use crate::support::{Harness, REPO, dashboard_pass, is_bot_write, maintainers_push, upkeep_pass};

const KEY: &str = "demo-fp8-h200-trt";
const CHANGELOG: &str = "perf-changelog.yaml";
/// Read access only, yet GitHub calls their comments COLLABORATOR's.
const OUTSIDER: &str = "outside-reader";
const OUTSIDER_TOKEN: &str = "ghp_promises_outsider";

async fn validated() -> (Harness, CandidateRecord) {
    let env = Harness::demo()
        .script(VALIDATED_SCRIPT)
        .user(OUTSIDER, None, OUTSIDER_TOKEN, Permission::Read)
        .start()
        .await;
    let rec = env.validated(&env.journal, KEY).await;
    (env, rec)
}

fn run_of(rec: &CandidateRecord) -> u64 {
    rec.sweep.as_ref().expect("a verified sweep").run_id
}

/// Klaud's writes so far (every request of the bot but reads).
async fn bot_writes(env: &Harness) -> usize {
    env.stack
        .state()
        .request_log()
        .await
        .iter()
        .filter(|e| is_bot_write(e))
        .count()
}

/// What the simulator's reuse gate reads on PR `number` at merge:
/// (authorized, pinned run).
async fn gate(env: &Harness, number: impl Into<u64>) -> (bool, Option<u64>) {
    let number: u64 = number.into();
    let comments: Vec<GateComment> = env
        .get_as_maintainer(&format!("issues/{number}/comments?per_page=100"))
        .await
        .as_array()
        .expect("comments")
        .iter()
        .map(|c| GateComment {
            created_at: c["created_at"].as_str().unwrap_or_default().to_owned(),
            author_association: c["author_association"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            body: c["body"].as_str().unwrap_or_default().to_owned(),
        })
        .collect();
    find_reuse_authorization(&comments, &[REUSE_COMMAND.to_owned()])
}

/// A maintainer's commit pushed on top of `rec`'s branch; its sha.
async fn persons_push(env: &Harness, rec: &CandidateRecord) -> String {
    maintainers_push(
        env,
        rec,
        "NOTES.md",
        b"a person's change\n".to_vec(),
        "A person's change",
    )
    .await
}

/// The dashboard issue as a pass publishes it from the journal.
async fn dashboard(env: &Harness) -> String {
    dashboard_pass(env).await.1
}

#[tokio::test]
async fn a_persons_push_withdraws_klauds_reuse_line_and_the_pr_and_dashboard_say_so() {
    let (env, mut rec) = validated().await;
    let number = rec.pull.expect("pull");
    let run = run_of(&rec);
    assert_eq!(gate(&env, number).await, (true, Some(run)));
    // Nothing changed: a pass re-verifies and writes nothing.
    let writes = bot_writes(&env).await;
    assert_eq!(upkeep_pass(&env, &mut rec).await, Upkept::Current);
    assert_eq!(
        bot_writes(&env).await,
        writes,
        "an idle pass writes nothing"
    );

    // A person pushes on top of the validated commit; the gate would still
    // accept the run (its commit stays in the PR).
    let pushed = persons_push(&env, &rec).await;
    assert_eq!(gate(&env, number).await, (true, Some(run)));

    let upkept = upkeep_pass(&env, &mut rec).await;
    let Upkept::Withdrawn(line) = &upkept else {
        panic!("{upkept:?}")
    };
    assert!(line.contains("`/reuse-sweep-run` with the id"), "{line}");
    // Klaud's own line no longer stands: the gate finds no authorization.
    assert_eq!(gate(&env, number).await, (false, None));
    assert!(
        env.bot_lines(number, &format!("/reuse-sweep-run {run}"))
            .await
            .is_empty()
    );
    let bodies = env.bodies(number).await;
    let note = bodies
        .iter()
        .find(|b| b.contains("The validated sweep no longer covers this PR's head"))
        .unwrap_or_else(|| panic!("the PR says so: {bodies:#?}"));
    assert!(note.contains(&pushed), "{note}");
    assert!(note.contains("`/reuse-sweep-run` with the id"), "{note}");
    assert!(
        note.contains("a maintainer comments `/klaud retry`"),
        "{note}"
    );
    assert!(note.contains("<summary>中文</summary>"), "{note}");
    let withdrawn = rec
        .upkeep
        .as_ref()
        .and_then(|u| u.withdrawn.as_ref())
        .expect("recorded");
    assert_eq!(withdrawn.head.as_str(), pushed);
    assert!(env.claims().await.is_empty(), "the claim is released");

    // `/klaud retry` on it answers with what a maintainer can do.
    let answer =
        klaud_lifecycle::commands::request_retry(&env.journal, env.clock, &rec, "maintainer", "")
            .await
            .expect("journal");
    let Err(klaud_lifecycle::commands::Refusal(text)) = answer else {
        panic!("a validated PR has nothing to retry: {answer:?}")
    };
    assert!(
        text.contains("no longer covers the head") && text.contains("with the id"),
        "{text}"
    );

    // The next pass re-verifies and writes nothing.
    let writes = bot_writes(&env).await;
    assert!(matches!(
        upkeep_pass(&env, &mut rec).await,
        Upkept::Withdrawn(_)
    ));
    assert_eq!(
        bot_writes(&env).await,
        writes,
        "a second pass writes nothing"
    );

    // The dashboard issue names it under awaiting merge.
    let body = dashboard(&env).await;
    let awaiting = body
        .split("### Awaiting merge / 等待合并")
        .nth(1)
        .and_then(|rest| rest.split("### In progress").next())
        .expect("awaiting section");
    assert!(
        awaiting.contains("the sweep no longer covers the head")
            && awaiting.contains("`/klaud retry` sweeps this head again")
            && awaiting.contains("/reuse-sweep-run` with the id"),
        "{awaiting}"
    );
}

#[tokio::test]
async fn a_bare_line_is_never_relied_on_and_a_deleted_line_is_posted_again() {
    let (env, mut rec) = validated().await;
    let number = rec.pull.expect("pull");
    let run = run_of(&rec);
    let line = format!("/reuse-sweep-run {run}");
    let maintainer = env.person(MAINTAINER_TOKEN);
    let outsider = env.person(OUTSIDER_TOKEN);

    // What an older Klaud left: no line of its own, relying on a stray bare
    // line from someone GitHub calls a collaborator.
    for id in env.bot_lines(number, &line).await {
        maintainer.delete_comment(id).await;
    }
    let stray = outsider.comment(number, REUSE_COMMAND).await;
    assert_eq!(
        gate(&env, number).await,
        (true, None),
        "the stray line stands"
    );
    // The stray line is deleted: nothing authorizes reuse any more.
    maintainer.delete_comment(stray).await;
    assert_eq!(gate(&env, number).await, (false, None));
    assert_eq!(upkeep_pass(&env, &mut rec).await, Upkept::Current);
    assert_eq!(gate(&env, number).await, (true, Some(run)));
    assert_eq!(env.bot_lines(number, &line).await.len(), 1);

    // A newer bare line would let the gate pick a run itself: Klaud's
    // pinned line is posted again, once.
    outsider.comment(number, REUSE_COMMAND).await;
    assert_eq!(gate(&env, number).await, (true, None));
    assert_eq!(upkeep_pass(&env, &mut rec).await, Upkept::Current);
    assert_eq!(gate(&env, number).await, (true, Some(run)));
    assert_eq!(env.bot_lines(number, &line).await.len(), 2);
    let writes = bot_writes(&env).await;
    assert_eq!(upkeep_pass(&env, &mut rec).await, Upkept::Current);
    assert_eq!(
        bot_writes(&env).await,
        writes,
        "a second pass writes nothing"
    );
    assert!(env.claims().await.is_empty(), "the claim is released");
}

#[tokio::test]
async fn a_maintainers_line_naming_the_same_run_stands_and_klaud_posts_none() {
    let (env, mut rec) = validated().await;
    let number = rec.pull.expect("pull");
    let run = run_of(&rec);
    let line = format!("/reuse-sweep-run {run}");
    let maintainer = env.person(MAINTAINER_TOKEN);
    for id in env.bot_lines(number, &line).await {
        maintainer.delete_comment(id).await;
    }
    maintainer
        .comment(number, &format!("Looks good.\n{line}"))
        .await;
    let writes = bot_writes(&env).await;
    assert_eq!(upkeep_pass(&env, &mut rec).await, Upkept::Current);
    assert_eq!(
        bot_writes(&env).await,
        writes,
        "Klaud posts no line of its own"
    );
    assert!(env.bot_lines(number, &line).await.is_empty());
    assert_eq!(gate(&env, number).await, (true, Some(run)));

    // A maintainer who pins another run decides; Klaud does not post over it.
    maintainer
        .comment(number, &format!("/reuse-sweep-run {}", run + 1000))
        .await;
    assert_eq!(upkeep_pass(&env, &mut rec).await, Upkept::Current);
    assert_eq!(bot_writes(&env).await, writes);
    assert_eq!(gate(&env, number).await, (true, Some(run + 1000)));
}

#[tokio::test]
async fn upkeep_never_appends_an_entry_the_base_already_holds() {
    let (env, mut rec) = validated().await;
    let number = rec.pull.expect("pull");
    let head = rec.head.clone().expect("head");
    let main = env.get_as_maintainer("git/ref/heads/main").await["object"]["sha"]
        .as_str()
        .expect("main")
        .to_owned();
    let read = async |sha: &str| {
        env.forge
            .get_contents(CHANGELOG, sha)
            .await
            .expect("read")
            .expect("changelog")
    };
    let main_log = read(&main).await;
    let branch_log = read(head.as_str()).await;
    let ours = branch_log[main_log.len()..].to_vec();
    let link = format!("/{REPO}/pull/{number}\n");
    assert!(String::from_utf8_lossy(&ours).contains(&link));

    // A maintainer lands another PR's entry and then this PR's own entry on
    // main: the PR now conflicts on the changelog.
    let mut landed = main_log.clone();
    landed.extend_from_slice(
        format!(
            "\n- config-keys:\n    - demo-fp4-b200-sglang\n  description:\n    - \"A person's entry\"\n  pr-link: https://github.com/{REPO}/pull/9999\n"
        )
        .as_bytes(),
    );
    landed.extend_from_slice(&ours);
    env.stack
        .state()
        .push_commit(
            REPO,
            "main",
            MAINTAINER,
            BTreeMap::from([(CHANGELOG.to_owned(), Some(landed.clone()))]),
            "Land the entries",
        )
        .await
        .expect("push");

    let upkept = upkeep_pass(&env, &mut rec).await;
    let Upkept::Merged(new_head) = upkept else {
        panic!("{upkept:?}")
    };
    let merged_log = read(new_head.as_str()).await;
    assert_eq!(
        validate_append(&landed, &merged_log),
        Ok(0),
        "no second entry: {}",
        String::from_utf8_lossy(&merged_log)
    );
    assert_eq!(
        String::from_utf8_lossy(&merged_log).matches(&link).count(),
        1
    );
    // The reuse line still pins the validated run, and a second pass
    // writes nothing.
    let run = run_of(&rec);
    assert_eq!(gate(&env, number).await, (true, Some(run)));
    let writes = bot_writes(&env).await;
    assert_eq!(upkeep_pass(&env, &mut rec).await, Upkept::Current);
    assert_eq!(
        bot_writes(&env).await,
        writes,
        "a second pass writes nothing"
    );
}

#[tokio::test]
async fn after_a_persons_push_a_maintainers_line_still_standing_is_named_not_edited() {
    let (env, mut rec) = validated().await;
    let number = rec.pull.expect("pull");
    let run = run_of(&rec);
    let maintainer = env.person(MAINTAINER_TOKEN);
    maintainer
        .comment(number, &format!("/reuse-sweep-run {run}"))
        .await;
    persons_push(&env, &rec).await;
    assert!(matches!(
        upkeep_pass(&env, &mut rec).await,
        Upkept::Withdrawn(_)
    ));
    // Klaud's own line is withdrawn; the maintainer's is theirs to delete,
    // and the note names them.
    assert!(
        env.bot_lines(number, &format!("/reuse-sweep-run {run}"))
            .await
            .is_empty()
    );
    assert_eq!(gate(&env, number).await, (true, Some(run)));
    let bodies = env.bodies(number).await;
    let note = bodies
        .iter()
        .find(|b| b.contains("The validated sweep no longer covers this PR's head"))
        .unwrap_or_else(|| panic!("{bodies:#?}"));
    assert!(note.contains(&format!("@{MAINTAINER}")), "{note}");
}

/// Waves that plan nothing new, over the harness's journal, until Klaud's
/// reuse line on `number` pins a run other than `old`; that run.
async fn waves_until_repinned(env: &Harness, number: PullNumber, old: u64) -> u64 {
    let started = Instant::now();
    loop {
        let mut options = env.wave_options(crate::support::owner(), env.config.clone());
        options.lifecycle.plan.max_candidates = 0;
        env.wave(&env.journal, options).await;
        if let (true, Some(run)) = gate(env, number).await
            && run != old
        {
            return run;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no new reuse line on #{number}: {:#?}",
            env.bodies(number).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every sweep after the first runs for a few seconds: a wave that does
/// not wait leaves the sweep a retry started running.
const SLOW_RESWEEP: &str = r#"
[families."*"]
smoke = ["success"]
sweep = ["success", { outcome = "success", delay = 3 }, { outcome = "success", delay = 3 }, { outcome = "success", delay = 3 }]
"#;

#[tokio::test]
async fn a_maintainers_retry_after_a_persons_push_sweeps_the_new_head_once() {
    let env = Harness::demo().script(SLOW_RESWEEP).start().await;
    let mut rec = env.validated(&env.journal, KEY).await;
    let number = rec.pull.expect("pull");
    let run = run_of(&rec);
    let pushed = persons_push(&env, &rec).await;
    assert!(matches!(
        upkeep_pass(&env, &mut rec).await,
        Upkept::Withdrawn(_)
    ));
    env.journal.save(&rec).await.expect("save");
    let note = env
        .bodies(number)
        .await
        .into_iter()
        .find(|b| b.contains("The validated sweep no longer covers this PR's head"))
        .expect("the note");
    assert!(note.contains("`/klaud retry`"), "{note}");

    // A maintainer asks for the sweep again. The wave that answers starts
    // it; the store is then lost while the sweep runs, and the next waves
    // finish it from GitHub alone.
    let maintainer = env.person(MAINTAINER_TOKEN);
    let asked = maintainer.comment(number, "/klaud retry").await;
    let mut options = env.wave_options(crate::support::owner(), env.config.clone());
    options.lifecycle.plan.max_candidates = 0;
    let summary = env.wave(&env.journal, options).await;
    assert_eq!(summary.answered.len(), 1, "{summary:#?}");
    let marker = klaud_service::pr_commands::reply_marker(asked);
    let bodies = env.bodies(number).await;
    let replies: Vec<&String> = bodies.iter().filter(|b| b.contains(&marker)).collect();
    assert_eq!(replies.len(), 1, "{bodies:#?}");
    assert!(
        replies[0].contains("Sweeping again") && replies[0].contains(&pushed),
        "{}",
        replies[0]
    );
    let at = env.journal.list().await.expect("records");
    eprintln!(
        "the store is lost with the record at {:?}",
        at.iter().map(|r| r.step).collect::<Vec<_>>()
    );
    env.journal.clear();
    let new_run = waves_until_repinned(&env, number, run).await;

    // The new run swept the pushed head; the receipt, replaced, names it.
    let swept = env.forge.get_run(new_run).await.expect("run");
    assert_eq!(swept.head_sha, pushed);
    let receipts: Vec<klaud_lifecycle::report::Receipt> = env
        .bodies(number)
        .await
        .iter()
        .filter_map(|b| klaud_lifecycle::report::find_record(b).ok().flatten())
        .filter(|f| matches!(f.key, klaud_lifecycle::report::MarkerKey::Outcome { .. }))
        .map(|f| klaud_lifecycle::report::parse_receipt(&f).expect("receipt"))
        .collect();
    assert_eq!(receipts.len(), 1, "{receipts:#?}");
    assert_eq!(
        receipts[0].head.as_ref().map(|h| h.to_string()),
        Some(pushed.clone())
    );
    assert_eq!(
        receipts[0].sweep.as_ref().map(|s| s.run_id),
        Some(new_run),
        "{receipts:#?}"
    );
    assert!(env.claims().await.is_empty(), "the claim is released");
    // Both sweeps' reports stay on the PR, once each: the first in the
    // comment of the receipt it replaced, the second alone.
    let m = crate::support::markers(&env.bodies(number).await);
    for swept in [run, new_run] {
        let named = format!(":run-{swept}-");
        assert_eq!(
            m.iter().filter(|k| k.contains(&named)).count(),
            1,
            "{swept}: {m:#?}"
        );
    }

    // Once: the next waves, with the store kept or lost again, write
    // nothing and keep the new line standing.
    for lose in [false, true] {
        if lose {
            env.journal.clear();
        }
        let writes = bot_writes(&env).await;
        let mut options = env.wave_options(crate::support::owner(), env.config.clone());
        options.lifecycle.plan.max_candidates = 0;
        env.wave(&env.journal, options).await;
        assert_eq!(bot_writes(&env).await, writes, "store lost: {lose}");
        assert_eq!(gate(&env, number).await, (true, Some(new_run)));
    }
    assert_eq!(env.pulls(&rec.branch).await.len(), 1);
    crate::support::assert_unique(&crate::support::markers(&env.bodies(number).await));
}

/// Every sweep after the first fails.
const FAILING_RESWEEP: &str = r#"
[families."*"]
smoke = ["success"]
sweep = ["success", "failure", "failure", "failure", "failure", "failure"]
"#;

/// A sweep a maintainer's `/klaud retry` ran again after a person's push
/// that fails leaves the PR open and its branch at the person's commit:
/// Klaud's cleanup would close a PR that carries someone else's work.
#[tokio::test]
async fn a_failed_sweep_after_a_persons_push_leaves_the_pr_and_its_branch() {
    let env = Harness::demo().script(FAILING_RESWEEP).start().await;
    let mut rec = env.validated(&env.journal, KEY).await;
    let number = rec.pull.expect("pull");
    let pushed = persons_push(&env, &rec).await;
    assert!(matches!(
        upkeep_pass(&env, &mut rec).await,
        Upkept::Withdrawn(_)
    ));
    env.journal.save(&rec).await.expect("save");
    env.person(MAINTAINER_TOKEN)
        .comment(number, "/klaud retry")
        .await;
    let started = Instant::now();
    loop {
        let mut options = env.wave_options(crate::support::owner(), env.config.clone());
        options.lifecycle.plan.max_candidates = 0;
        env.wave(&env.journal, options).await;
        let ended = env
            .journal
            .list()
            .await
            .expect("records")
            .into_iter()
            .any(|r| {
                r.candidate == rec.candidate
                    && r.step == klaud_lifecycle::engine::Step::Done
                    && r.ending
                        .as_ref()
                        .is_some_and(|e| e.outcome != klaud_lifecycle::model::Outcome::Validated)
            });
        if ended {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the sweep run again never ended: {:#?}",
            env.bodies(number).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pull = env.forge.get_pull(number.get()).await.expect("pull");
    assert!(pull.state.is_open(), "{pull:#?}");
    assert_eq!(pull.head_sha.to_string(), pushed);
    assert!(env.claims().await.is_empty(), "the claim is released");
    crate::support::assert_unique(&crate::support::markers(&env.bodies(number).await));
}
