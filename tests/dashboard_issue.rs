//! The dashboard issue through the real octocrab forge against the GitHub
//! simulator: opened once and found again, one per repository with two
//! instances racing, an unchanged pass that costs one free conditional
//! read and no edit, a maintainer's ticked box applied, said and unticked,
//! a reader's (or a demoted writer's) tick not applied, and a malformed
//! state block answered with a note.

use klaud_claims::Clock as _;
use klaud_lifecycle::wave::{CandidateSummary, WaveSummary};
use klaud_planner::ignore::IgnoreRules;
use klaud_planner::plan::{BlockKind, PlanOptions};
use klaud_sandbox::github::{IssueView, Permission};
use klaud_sandbox::stack::MAINTAINER_TOKEN;
use klaud_service::dashboard_issue::{
    LABEL, MARKER, Publish, Published, Steering, TITLE, publish, steer, steer_or_hold,
};

use crate::support::{Harness, REPO, forge_of, tick};

const KEY: &str = "demo-fp4-b200-sglang";
const READER: &str = "sandbox-reader";
const READER_TOKEN: &str = "ghp_dashboard_reader";
const STEERER: &str = "sandbox-steerer";
const STEERER_TOKEN: &str = "ghp_dashboard_steerer";
const TRIAGER: &str = "sandbox-triager";
const TRIAGER_TOKEN: &str = "ghp_dashboard_triager";

async fn env() -> Harness {
    Harness::demo()
        .user(READER, None, READER_TOKEN, Permission::Read)
        .user(STEERER, None, STEERER_TOKEN, Permission::Write)
        .start()
        .await
}

/// One pass as `klaud wave` and `klaud serve` make it, with a plan that
/// starts nothing: read and steer, plan with the dashboard's ignores,
/// publish.
async fn pass(env: &Harness, forge: &klaud_github::Github) -> (Steering, WaveSummary, Published) {
    pass_with(env, forge, 0, |_| Vec::new()).await
}

/// [`pass`] with a plan of at most `max` candidates (plus the run-now
/// ones, as `klaud wave` passes them), and `started` saying which of the
/// plan's picks the wave worked on.
async fn pass_with(
    env: &Harness,
    forge: &klaud_github::Github,
    max: usize,
    started: impl FnOnce(&klaud_planner::plan::PlanReport) -> Vec<CandidateSummary>,
) -> (Steering, WaveSummary, Published) {
    // As `klaud wave` and `serve` read it: an issue that cannot be read
    // holds the plan instead of failing the pass.
    let steering = steer_or_hold(forge, &env.journal, env.clock).await;
    let mut options = PlanOptions::new(env.clock.now());
    options.max_candidates = max;
    options.ignore = IgnoreRules::new(steering.rules());
    options.run_first = steering.run_first();
    let registry = env.registry();
    let report = klaud_planner::plan::plan(&env.repository, &registry.session(), &options).await;
    let summary = WaveSummary {
        base: env.base.to_string(),
        candidates: started(&report),
        skipped: Vec::new(),
        answered: Vec::new(),
        blocked: Vec::new(),
        families: report.families,
        unreadable: report.unreadable,
        stopped_by: None,
    };
    let published = publish(
        forge,
        &env.journal,
        env.clock,
        &steering,
        Publish {
            base_branch: "main".into(),
            summary: Some(&summary),
            cooldown: std::time::Duration::from_secs(3600),
            web_dashboard: None,
            may_open: true,
        },
    )
    .await
    .expect("publish");
    (steering, summary, published)
}

async fn dashboards(env: &Harness) -> Vec<IssueView> {
    env.stack
        .state()
        .issues(REPO)
        .await
        .into_iter()
        .filter(|i| i.labels.iter().any(|l| l == LABEL))
        .collect()
}

async fn the_dashboard(env: &Harness) -> IssueView {
    let open: Vec<IssueView> = dashboards(env)
        .await
        .into_iter()
        .filter(|i| i.open)
        .collect();
    assert_eq!(open.len(), 1, "{open:#?}");
    open.into_iter().next().expect("one")
}

fn family() -> String {
    format!("configs/nvidia-master.yaml:{KEY}")
}

#[tokio::test]
async fn one_issue_is_opened_found_again_and_an_unchanged_pass_reads_once_for_free() {
    let env = env().await;
    let (_, summary, first) = pass(&env, &env.forge).await;
    assert!(matches!(first, Published::Opened(_)), "{first:?}");
    let issue = the_dashboard(&env).await;
    assert_eq!(issue.title, TITLE);
    assert!(issue.author.eq_ignore_ascii_case("Klaud-Cold"));
    assert!(issue.body.starts_with(MARKER), "{}", issue.body);
    for heading in [
        "Awaiting merge / 等待合并",
        "In progress / 进行中",
        "Deferred or blocked / 暂缓或受阻",
        "Failed recently / 最近失败",
        "Does not parse or resolve / 无法解析",
        "Stale, planned next / 待更新",
    ] {
        assert!(issue.body.contains(heading), "{heading}:\n{}", issue.body);
    }
    // The stale family links to its line in the master config.
    let line = summary
        .families
        .iter()
        .find(|f| f.family == family())
        .expect("planned")
        .line;
    assert!(
        issue
            .body
            .contains(&format!("/blob/main/configs/nvidia-master.yaml#L{line})")),
        "{}",
        issue.body
    );
    assert!(
        issue
            .body
            .contains(&format!("<!-- klaud:do ignore {} -->", family()))
    );

    // Passes until nothing changes; the one after that costs one
    // conditional read that GitHub answers 304, and writes nothing.
    let mut settled = false;
    for _ in 0..3 {
        let (_, _, p) = pass(&env, &env.forge).await;
        if matches!(p, Published::Unchanged(_)) {
            settled = true;
            break;
        }
    }
    assert!(settled, "the dashboard kept changing");
    let from = env.stack.state().request_log().await.len();
    let (_, _, p) = pass(&env, &env.forge).await;
    assert!(matches!(p, Published::Unchanged(_)), "{p:?}");
    let log = env.stack.state().request_log().await;
    let github: Vec<_> = log[from..].iter().collect();
    assert_eq!(github.len(), 1, "{github:#?}");
    assert_eq!(github[0].method, "GET");
    assert!(github[0].path.contains("/issues?"), "{github:#?}");
    assert_eq!(github[0].status, 304, "{github:#?}");
    assert_eq!(dashboards(&env).await.len(), 1);
}

/// Publishes for `steering` (what an instance read before its wave).
async fn publish_only(
    env: &Harness,
    forge: &klaud_github::Github,
    steering: &Steering,
) -> Published {
    publish(
        forge,
        &env.journal,
        env.clock,
        steering,
        Publish {
            base_branch: "main".into(),
            summary: None,
            cooldown: std::time::Duration::from_secs(3600),
            web_dashboard: None,
            may_open: true,
        },
    )
    .await
    .expect("publish")
}

#[tokio::test]
async fn two_instances_racing_keep_one_issue() {
    let env = env().await;
    let other = forge_of(&env.stack).await;
    // Both read before either opened one: both open one.
    let a = steer(&env.forge, &env.journal, env.clock).await.expect("a");
    let b = steer(&other, &env.journal, env.clock).await.expect("b");
    assert!(a.issue.is_none() && b.issue.is_none());
    let first = publish_only(&env, &env.forge, &a).await;
    let second = publish_only(&env, &other, &b).await;
    let all = dashboards(&env).await;
    assert_eq!(all.len(), 2, "both opened one: {all:#?}");
    let open: Vec<&IssueView> = all.iter().filter(|i| i.open).collect();
    assert_eq!(open.len(), 1, "the later one is closed: {all:#?}");
    let kept = open[0].number;
    assert!(all.iter().all(|i| i.number >= kept), "the lowest is kept");
    assert!(matches!(first, Published::Opened(_)), "{first:?}");
    assert_eq!(first.issue().expect("issue").number, kept);
    assert_eq!(second.issue().expect("issue").number, kept, "{second:?}");

    // Racing whole passes: still one open issue, the same for both.
    let (a, b) = tokio::join!(pass(&env, &env.forge), pass(&env, &other));
    assert_eq!(a.2.issue().expect("issue").number, kept, "{:?}", a.2);
    assert_eq!(b.2.issue().expect("issue").number, kept, "{:?}", b.2);
    assert_eq!(dashboards(&env).await.iter().filter(|i| i.open).count(), 1);
}

#[tokio::test]
async fn a_maintainers_tick_is_applied_said_unticked_and_undone() {
    let env = env().await;
    pass(&env, &env.forge).await;
    let issue = the_dashboard(&env).await;
    let maintainer = env.person(MAINTAINER_TOKEN);
    let code = format!("ignore {}", family());
    maintainer
        .edit_issue_body(issue.number, &tick(&issue.body, &code))
        .await;

    let (steering, summary, _) = pass(&env, &env.forge).await;
    assert_eq!(steering.kept.ignores.len(), 1, "{steering:?}");
    assert_eq!(steering.kept.ignores[0].by, "sandbox-maintainer");
    let planned = summary
        .families
        .iter()
        .find(|f| f.family == family())
        .expect("planned");
    let blocked = planned.blocked.as_ref().expect("ignored");
    assert_eq!(blocked.kind, BlockKind::Ignored);
    assert!(
        blocked
            .reason
            .contains("@sandbox-maintainer on the dashboard issue"),
        "{blocked:?}"
    );
    let body = the_dashboard(&env).await.body;
    assert!(!body.contains("- [x]"), "unticked:\n{body}");
    assert!(
        body.contains(&format!(
            "Applied for @\u{2060}sandbox-maintainer: family `{}` is ignored",
            family()
        )),
        "{body}"
    );
    let undo = format!("unignore {}", family());
    assert!(
        body.contains(&format!("<!-- klaud:do {undo} -->")),
        "{body}"
    );

    // The ignore lives in the issue: a fresh instance with an empty
    // journal and cache sees it too.
    let fresh = forge_of(&env.stack).await;
    let again = steer(
        &fresh,
        &klaud_lifecycle::engine::MemoryJournal::new(),
        env.clock,
    )
    .await
    .expect("steer");
    assert_eq!(again.rules().len(), 1);

    maintainer
        .edit_issue_body(issue.number, &tick(&body, &undo))
        .await;
    let (steering, summary, _) = pass(&env, &env.forge).await;
    assert!(steering.kept.ignores.is_empty(), "{steering:?}");
    let planned = summary
        .families
        .iter()
        .find(|f| f.family == family())
        .expect("planned");
    assert!(planned.blocked.is_none(), "{planned:?}");
    let body = the_dashboard(&env).await.body;
    assert!(body.contains("is no longer ignored"), "{body}");
    assert!(!body.contains("- [x]"), "{body}");
}

#[tokio::test]
async fn a_readers_tick_is_refused_and_a_demoted_writers_is_not_applied() {
    let env = env().await;
    pass(&env, &env.forge).await;
    let issue = the_dashboard(&env).await;
    let code = format!("ignore {}", family());
    let ticked = tick(&issue.body, &code);

    // GitHub itself refuses a reader's edit of somebody else's issue.
    let (status, _) = env
        .person(READER_TOKEN)
        .try_edit_issue_body(issue.number, &ticked)
        .await;
    assert_eq!(status, 403);

    // A writer ticks, and loses write access before the pass: Klaud asks
    // who edited and what they may do now.
    env.person(STEERER_TOKEN)
        .edit_issue_body(issue.number, &ticked)
        .await;
    env.stack
        .state()
        .set_permission(REPO, STEERER, Permission::Read)
        .await
        .expect("demote");
    let (steering, summary, _) = pass(&env, &env.forge).await;
    assert!(steering.kept.ignores.is_empty(), "{steering:?}");
    let planned = summary
        .families
        .iter()
        .find(|f| f.family == family())
        .expect("planned");
    assert!(planned.blocked.is_none(), "{planned:?}");
    let body = the_dashboard(&env).await.body;
    assert!(
        body.contains(
            "@\u{2060}sandbox-steerer has read access; only people with write access steer Klaud"
        ),
        "{body}"
    );
    assert!(!body.contains("- [x]"), "unticked:\n{body}");
}

/// Every planned family is held back by the unread dashboard, and says so.
fn assert_all_held(summary: &WaveSummary, why: &str) {
    assert!(!summary.families.is_empty());
    for f in &summary.families {
        let blocked = f
            .blocked
            .as_ref()
            .unwrap_or_else(|| panic!("{} planned while the dashboard is unread", f.family));
        assert_eq!(blocked.kind, BlockKind::Ignored, "{blocked:?}");
        assert!(
            blocked.reason.starts_with("held: ") && blocked.reason.contains(why),
            "{}: {}",
            f.family,
            blocked.reason
        );
    }
}

/// Whether only the ignored family is held back (the dashboard read well).
fn only_the_ignored_family_is_held(summary: &WaveSummary) -> bool {
    summary.families.iter().all(|f| {
        f.blocked
            .as_ref()
            .is_some_and(|b| b.kind == BlockKind::Ignored)
            == (f.family == family())
    })
}

/// The dashboard with the family ignored by a maintainer's tick, applied.
async fn ignored(env: &Harness) -> IssueView {
    pass(env, &env.forge).await;
    let issue = the_dashboard(env).await;
    env.person(MAINTAINER_TOKEN)
        .edit_issue_body(
            issue.number,
            &tick(&issue.body, &format!("ignore {}", family())),
        )
        .await;
    let (steering, summary, _) = pass(env, &env.forge).await;
    assert_eq!(steering.kept.ignores.len(), 1, "{steering:?}");
    assert!(only_the_ignored_family_is_held(&summary));
    the_dashboard(env).await
}

#[tokio::test]
async fn a_malformed_state_block_is_kept_byte_for_byte_and_holds_the_plan() {
    let env = env().await;
    let issue = ignored(&env).await;
    let start = issue.body.find("<!-- klaud:state v1").expect("state block");
    let stray = "<!-- klaud:state v1 {\"ignores\": [{\"family\": 7}]} -->";
    let broken = format!("{}{stray}\n", &issue.body[..start]);
    env.person(MAINTAINER_TOKEN)
        .edit_issue_body(issue.number, &broken)
        .await;
    let (steering, summary, _) = pass(&env, &env.forge).await;
    let problem = steering.problem.clone().expect("a problem");
    assert!(problem.contains("not valid"), "{problem}");
    assert_all_held(&summary, "does not read");
    let body = the_dashboard(&env).await.body;
    assert!(
        body.contains("Klaud could not read the state it keeps in this issue"),
        "{body}"
    );
    assert!(body.contains(stray), "the block is kept as it was:\n{body}");
    // Still unreadable on the next pass: still held, never written anew.
    let (steering, summary, _) = pass(&env, &env.forge).await;
    assert!(steering.problem.is_some());
    assert_all_held(&summary, "does not read");
    assert!(the_dashboard(&env).await.body.contains(stray));
}

#[tokio::test]
async fn a_newer_state_block_is_left_to_the_newer_instance_and_holds_the_plan() {
    let env = env().await;
    let issue = ignored(&env).await;
    let newer = issue.body.replace(
        "<!-- klaud:state v1 ",
        "<!-- klaud:state v2 {\"future\":true} ",
    );
    env.person(MAINTAINER_TOKEN)
        .edit_issue_body(issue.number, &newer)
        .await;
    let (steering, summary, published) = pass(&env, &env.forge).await;
    assert!(steering.problem.is_some());
    assert_all_held(&summary, "version");
    assert!(
        matches!(published, Published::Unchanged(_)),
        "{published:?}"
    );
    assert_eq!(
        the_dashboard(&env).await.body,
        newer,
        "not one byte changed"
    );
}

#[tokio::test]
async fn an_issue_listing_that_fails_holds_every_family_and_writes_nothing() {
    let env = env().await;
    ignored(&env).await;
    let before = the_dashboard(&env).await.body;
    env.stack
        .state()
        .add_fault(klaud_sandbox::github::Fault::status(
            "GET",
            format!("/repos/{REPO}/issues"),
            100,
            502,
        ))
        .await;
    let (steering, summary, published) = pass(&env, &env.forge).await;
    assert!(steering.issue.is_none());
    assert_all_held(&summary, "could not be read");
    assert!(matches!(published, Published::Absent), "{published:?}");
    assert_eq!(dashboards(&env).await.len(), 1, "no second issue opened");
    assert_eq!(the_dashboard(&env).await.body, before);
    // The next good read resumes.
    env.stack.state().clear_faults().await;
    let (_, summary, _) = pass(&env, &env.forge).await;
    assert!(only_the_ignored_family_is_held(&summary));
}

#[tokio::test]
async fn a_tick_whose_editor_cannot_be_looked_up_waits_and_holds_the_plan() {
    let env = env().await;
    pass(&env, &env.forge).await;
    let issue = the_dashboard(&env).await;
    let ticked = tick(&issue.body, &format!("ignore {}", family()));
    env.person(MAINTAINER_TOKEN)
        .edit_issue_body(issue.number, &ticked)
        .await;
    env.stack
        .state()
        .add_fault(klaud_sandbox::github::Fault {
            method: Some("POST".into()),
            path: "/graphql".into(),
            count: 100,
            action: klaud_sandbox::github::FaultAction::Status {
                status: 502,
                retry_after: None,
                message: None,
            },
        })
        .await;
    let (steering, summary, published) = pass(&env, &env.forge).await;
    assert!(steering.kept.ignores.is_empty());
    assert_all_held(&summary, "could not be checked");
    assert!(
        matches!(published, Published::Unchanged(_)),
        "{published:?}"
    );
    assert!(
        the_dashboard(&env).await.body.contains("- [x]"),
        "the tick waits for a pass that can apply it"
    );
    env.stack.state().clear_faults().await;
    let (steering, summary, _) = pass(&env, &env.forge).await;
    assert_eq!(steering.kept.ignores.len(), 1);
    assert!(only_the_ignored_family_is_held(&summary));
}

#[tokio::test]
async fn a_dashboard_issue_closed_by_triage_is_reopened_with_its_ignores() {
    let env = Harness::demo()
        .user(TRIAGER, None, TRIAGER_TOKEN, Permission::Triage)
        .start()
        .await;
    let issue = ignored(&env).await;
    env.person(TRIAGER_TOKEN).close_issue(issue.number).await;
    assert!(!dashboards(&env).await[0].open);
    let (steering, summary, _) = pass(&env, &env.forge).await;
    assert_eq!(steering.number(), Some(issue.number), "the same issue");
    assert!(only_the_ignored_family_is_held(&summary));
    let now = the_dashboard(&env).await;
    assert_eq!(now.number, issue.number);
    assert!(
        now.body.contains("Reopened: this issue was closed"),
        "{}",
        now.body
    );
    assert_eq!(dashboards(&env).await.len(), 1, "no new issue");
}

#[tokio::test]
async fn a_dashboard_issue_whose_label_was_removed_is_found_and_labelled_again() {
    let env = Harness::demo()
        .user(TRIAGER, None, TRIAGER_TOKEN, Permission::Triage)
        .start()
        .await;
    let issue = ignored(&env).await;
    env.person(TRIAGER_TOKEN)
        .remove_label(issue.number, LABEL)
        .await;
    assert!(dashboards(&env).await.is_empty(), "unlabelled");
    let (steering, summary, _) = pass(&env, &env.forge).await;
    assert_eq!(steering.number(), Some(issue.number), "the same issue");
    assert!(only_the_ignored_family_is_held(&summary));
    let now = the_dashboard(&env).await;
    assert_eq!(now.number, issue.number);
    assert!(now.body.contains("Labelled again"), "{}", now.body);
    let all = env.stack.state().issues(REPO).await;
    assert_eq!(all.len(), 1, "no new issue: {all:#?}");
}

/// A record of the family's candidate that ended with `outcome`, not yet
/// saved.
async fn finished(
    env: &Harness,
    outcome: klaud_lifecycle::model::Outcome,
    phase: klaud_lifecycle::model::Phase,
    message: &str,
) -> klaud_lifecycle::engine::CandidateRecord {
    use klaud_lifecycle::engine::{Ending, Step};
    let target = env.target(KEY).await;
    let lifecycle = klaud_service::GithubLifecycle::new(&env.forge);
    let engine = env.engine(&lifecycle, &env.journal, env.clock);
    let mut rec = engine.open_record(&target).await.expect("record");
    rec.step = Step::Done;
    rec.ending = Some(Ending {
        outcome,
        phase,
        message: message.into(),
        hands_off: false,
        note: None,
        declined: None,
    });
    rec
}

#[tokio::test]
async fn a_validated_prs_regression_hunt_is_named_under_awaiting_merge() {
    use klaud_lifecycle::engine::Journal as _;
    use klaud_lifecycle::model::{Outcome, Phase};

    let env = env().await;
    let mut rec = finished(
        &env,
        Outcome::Validated,
        Phase::FinalSweep,
        "the final sweep passed",
    )
    .await;
    rec.hunt = klaud_lifecycle::engine::journal::HuntLines {
        en: vec![
            "**Regression hunt:** first bad tag found.".into(),
            "Last good: `t2` · first bad: `t3`".into(),
        ],
        zh: vec!["**回归排查**：已找到第一个出问题的标签。".into()],
    };
    rec.updated_at = env.clock.now();
    env.journal.save(&rec).await.expect("save");

    pass(&env, &env.forge).await;
    let issue = the_dashboard(&env).await;
    let awaiting = issue
        .body
        .split("### Awaiting merge / 等待合并")
        .nth(1)
        .and_then(|rest| rest.split("### In progress").next())
        .expect("awaiting section");
    assert!(
        awaiting.contains("Regression hunts / 回归排查:"),
        "{awaiting}"
    );
    assert!(
        awaiting.contains("  - Last good: `t2` · first bad: `t3`\n"),
        "{awaiting}"
    );
    assert!(
        awaiting.contains("  - **回归排查**：已找到第一个出问题的标签。\n"),
        "{awaiting}"
    );
}

#[tokio::test]
async fn a_ticked_retry_lifts_the_cooldown_of_a_failed_family() {
    use klaud_lifecycle::engine::Journal as _;
    use klaud_lifecycle::model::{Outcome, Phase};

    let env = env().await;
    // A candidate of the family that failed a moment ago: it cools down.
    let mut rec = finished(
        &env,
        Outcome::Failed,
        Phase::Targeted,
        "the smoke failed twice",
    )
    .await;
    // Its regression hunt ended: its head shows under the row.
    rec.hunt = klaud_lifecycle::engine::journal::HuntLines {
        en: vec![
            "**Regression hunt:** first bad tag found.".into(),
            "Last good: `t3` · first bad: `t4`".into(),
            "Upstream change: `aaa...bbb`".into(),
            "GPU runs used: 3".into(),
        ],
        zh: vec!["**回归排查**：已找到第一个出问题的标签。".into()],
    };
    rec.updated_at = env.clock.now();
    env.journal.save(&rec).await.expect("save");
    assert!(!klaud_lifecycle::commands::retry_requested(&env.journal, &rec).await);

    pass(&env, &env.forge).await;
    let issue = the_dashboard(&env).await;
    let failed = issue
        .body
        .split("### Failed recently / 最近失败")
        .nth(1)
        .expect("failed section");
    for line in [
        "  - Last good: `t3` · first bad: `t4`\n",
        "  - Upstream change: `aaa...bbb`\n",
        "  - **回归排查**：已找到第一个出问题的标签。\n",
    ] {
        assert!(failed.contains(line), "{line:?}:\n{failed}");
    }
    assert!(!failed.contains("GPU runs used"), "{failed}");
    assert!(
        issue.body.contains("Failed recently / 最近失败"),
        "{}",
        issue.body
    );
    assert!(
        issue.body.contains("the smoke failed twice"),
        "{}",
        issue.body
    );
    env.person(MAINTAINER_TOKEN)
        .edit_issue_body(
            issue.number,
            &tick(&issue.body, &format!("retry {}", family())),
        )
        .await;
    pass(&env, &env.forge).await;
    assert!(
        klaud_lifecycle::commands::retry_requested(&env.journal, &rec).await,
        "the retry is recorded as /klaud retry records it"
    );
    let body = the_dashboard(&env).await.body;
    assert!(
        body.contains("Applied for @\u{2060}sandbox-maintainer: Retry recorded"),
        "{body}"
    );
    assert!(!body.contains("- [x]"), "{body}");
}

/// `klaud wave` (a scheduled Actions job) opens the issue; `klaud serve`
/// (the daemon) finds the same one, keeps it, and its web page links it.
#[tokio::test]
async fn klaud_wave_and_klaud_serve_keep_the_same_issue() {
    use std::sync::Arc;

    let stack = Harness::demo().start_stack().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = crate::support::write_klaud_toml(&stack, dir.path(), "");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_klaud"));
    cmd.env("KLAUD_GITHUB_TOKEN", klaud_sandbox::stack::BOT_TOKEN)
        .env_remove("GITHUB_TOKEN")
        .env_remove("GITHUB_STEP_SUMMARY")
        .arg("wave")
        .arg("--config")
        .arg(&config)
        .arg("--store")
        .arg(dir.path().join("store"))
        .args(["--max", "0", "--json"]);
    for host in ["docker.io", "nvcr.io", "hub.docker.com"] {
        cmd.args(["--mirror", &format!("{host}={}", stack.registry_url)]);
    }
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("run klaud wave"))
        .await
        .expect("wave task");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let issues = stack.state().issues(REPO).await;
    let opened: Vec<&IssueView> = issues.iter().filter(|i| i.open).collect();
    assert_eq!(opened.len(), 1, "klaud wave opened the issue: {issues:#?}");
    let number = opened[0].number;
    assert!(opened[0].body.contains(MARKER));

    let journal: Arc<dyn klaud_lifecycle::engine::Journal> =
        Arc::new(klaud_lifecycle::engine::MemoryJournal::new());
    let settings = crate::support::serve_settings(
        klaud_claims::Claimant::new(uuid::Uuid::new_v4()),
        crate::support::engine_config(4242),
        0,
        false,
    );
    let (daemon, mut feed) = crate::support::daemon(&stack, settings, journal).await;
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let running =
        tokio::spawn(async move { daemon.run(Arc::new(tokio::sync::Notify::new()), stop).await });
    crate::support::wait_for(&mut feed, "the dashboard issue on the web dashboard", |s| {
        s.repositories.iter().any(|r| r.dashboard_issue.is_some())
    })
    .await;
    let snapshot = feed.borrow().clone();
    let link = snapshot.repositories[0]
        .dashboard_issue
        .clone()
        .expect("link");
    assert!(link.url.ends_with(&format!("/issues/{number}")), "{link:?}");
    let page = klaud_service::dashboard::render_page(&snapshot);
    assert!(page.contains(&link.url), "the page links the issue");
    let _ = stop_tx.send(true);
    running.await.expect("daemon task").expect("daemon");
    let issues = stack.state().issues(REPO).await;
    assert_eq!(issues.len(), 1, "serve kept the same issue: {issues:#?}");
    assert!(issues[0].open);
}

/// A box ticked while a pass runs (after it read the issue, before it
/// writes) is not written over: the pass leaves the issue alone, and the
/// next one applies the tick.
#[tokio::test]
async fn a_tick_made_during_a_pass_is_not_lost() {
    let env = env().await;
    pass(&env, &env.forge).await;
    // A pass that will want to edit: its kept state gets a note.
    let mut steering = steer(&env.forge, &env.journal, env.clock)
        .await
        .expect("steer");
    steering.kept.note("something to say".into());
    let issue = the_dashboard(&env).await;
    let code = format!("ignore {}", family());
    env.person(MAINTAINER_TOKEN)
        .edit_issue_body(issue.number, &tick(&issue.body, &code))
        .await;
    let published = publish_only(&env, &env.forge, &steering).await;
    assert!(
        matches!(published, Published::Unchanged(_)),
        "{published:?}"
    );
    assert!(
        the_dashboard(&env).await.body.contains("- [x]"),
        "the tick is still there"
    );
    let (steering, _, _) = pass(&env, &env.forge).await;
    assert_eq!(steering.kept.ignores.len(), 1, "{steering:?}");
    assert!(!the_dashboard(&env).await.body.contains("- [x]"));
}

/// The summary of a wave that started `pick` (its candidate worked on).
fn started(pick: &klaud_planner::plan::Selected) -> CandidateSummary {
    CandidateSummary {
        candidate: pick.id.parse().expect("a candidate id"),
        family: pick.family.clone(),
        image: pick.image.clone(),
        outcome: None,
        phase: "smoke".into(),
        pull_request: None,
        runs: Vec::new(),
        repairs: 0,
        status: None,
        message: None,
        merge: None,
    }
}

/// A maintainer ticks "run now" on a stale family the wave's budget does
/// not reach: the next wave plans it first, on top of the budget, and the
/// request is then cleared with a note saying what became of it.
#[tokio::test]
async fn a_ticked_run_now_plans_the_family_first_beyond_the_budget_and_is_cleared_with_a_note() {
    let env = env().await;
    let (_, summary, _) = pass(&env, &env.forge).await;
    // The family a budget of one picks, and one it does not reach.
    let registry = env.registry();
    let mut options = PlanOptions::new(env.clock.now());
    options.max_candidates = 1;
    let report = klaud_planner::plan::plan(&env.repository, &registry.session(), &options).await;
    assert_eq!(report.candidates.len(), 1, "{:?}", report.candidates);
    let first = report.candidates[0].family.clone();
    let other = summary
        .families
        .iter()
        .find(|f| f.candidate.is_some() && f.blocked.is_none() && f.family != first)
        .map(|f| f.family.clone())
        .expect("a second stale family in the demo");
    let issue = the_dashboard(&env).await;
    env.person(MAINTAINER_TOKEN)
        .edit_issue_body(
            issue.number,
            &tick(&issue.body, &format!("run-now {other}")),
        )
        .await;

    // A pass that starts nothing keeps the request, and says it waits.
    let (steering, _, _) = pass(&env, &env.forge).await;
    assert_eq!(
        steering.run_first(),
        [klaud_planner::identity::family_id(&other)].into()
    );
    let body = the_dashboard(&env).await.body;
    assert!(!body.contains("- [x]"), "unticked:\n{body}");
    assert!(
        body.contains(&format!(
            "Applied for @\u{2060}sandbox-maintainer: the next wave plans `{other}` first"
        )),
        "{body}"
    );
    assert!(
        body.contains("run now asked by @\u{2060}sandbox-maintainer"),
        "{body}"
    );
    assert!(!body.contains(&format!("<!-- klaud:do run-now {other} -->")));
    crate::gfm_render::assert_renders("the dashboard issue", &body);
    crate::support::screenshot_issue("dashboard-issue-run-now-asked", &body);

    // The next wave with a budget of one: the asked family comes first,
    // and the budget still goes to the family it would have picked.
    let mut picks = Vec::new();
    let (_, _, _) = pass_with(&env, &env.forge, 1, |report| {
        picks = report.candidates.iter().map(|c| c.family.clone()).collect();
        report.candidates.iter().map(started).collect()
    })
    .await;
    assert_eq!(picks, vec![other.clone(), first], "{picks:?}");
    let (steering, _, _) = pass(&env, &env.forge).await;
    assert!(steering.kept.run_now.is_empty(), "{steering:?}");
    assert!(steering.run_first().is_empty());
    let body = the_dashboard(&env).await.body;
    assert!(
        body.contains(&format!(
            "Run now `{other}` (asked by @\u{2060}sandbox-maintainer): started"
        )),
        "{body}"
    );
    assert!(!body.contains("run now asked by"), "{body}");
}

/// The issue at the end of a pass: a family validated during the wave is
/// no longer "planned next" (it awaits its merge, its digest cut short with
/// the full reference on hover); a duplicate and a capacity deferral are
/// listed apart from a real failure.
#[tokio::test]
async fn the_issue_shows_the_end_of_the_pass_and_failures_apart_from_duplicates_and_deferrals() {
    use klaud_lifecycle::engine::Journal as _;
    use klaud_lifecycle::model::{Outcome, Phase};

    let env = env().await;
    let mut validated = finished(
        &env,
        Outcome::Validated,
        Phase::FinalSweep,
        "the final sweep passed",
    )
    .await;
    validated.updated_at = env.clock.now();
    env.journal.save(&validated).await.expect("save");
    let (_, summary, _) = pass(&env, &env.forge).await;
    let others: Vec<String> = summary
        .families
        .iter()
        .filter(|f| f.family != family())
        .map(|f| f.family.clone())
        .take(3)
        .collect();
    assert_eq!(others.len(), 3, "the demo has four families or more");
    let outcomes = [
        (Outcome::Duplicate, "another PR proposes this image"),
        (Outcome::CapacityDeferred, "no GPU capacity"),
        (Outcome::Failed, "the smoke failed twice"),
    ];
    for (i, (family, (outcome, message))) in others.iter().zip(outcomes).enumerate() {
        let mut rec = validated.clone();
        rec.family = family.clone();
        rec.candidate = format!(
            "{}-{:016x}",
            klaud_planner::identity::family_id(family),
            i + 1
        )
        .parse()
        .expect("id");
        rec.pull = None;
        rec.pull_url = None;
        if let Some(e) = rec.ending.as_mut() {
            e.outcome = outcome;
            e.phase = Phase::Targeted;
            e.message = message.into();
        }
        env.journal.save(&rec).await.expect("save");
    }
    pass(&env, &env.forge).await;
    let body = the_dashboard(&env).await.body;
    let section = |from: &str| -> String {
        let rest = body
            .split_once(from)
            .unwrap_or_else(|| panic!("no {from}:\n{body}"))
            .1;
        rest.split("\n### ").next().unwrap_or("").to_owned()
    };
    let planned = section("### Stale, planned next / 待更新\n");
    assert!(
        !planned.contains(&format!("<!-- klaud:do run-now {} -->", family())),
        "the validated family is not planned next:\n{planned}"
    );
    assert!(
        planned.contains(&format!(
            "`{KEY}` (validated, awaiting merge / 已验证，等待合并)"
        )),
        "{planned}"
    );
    // No 64-digit digest in the table's text; the full one is the hover.
    let awaiting = section("### Awaiting merge / 等待合并\n");
    let row = awaiting
        .lines()
        .find(|l| l.contains(KEY))
        .unwrap_or_else(|| panic!("{awaiting}"));
    let digest = validated
        .image
        .split_once("@sha256:")
        .map(|(_, d)| d)
        .expect("a pinned image");
    assert!(
        row.contains(&format!("title=\"{}\"", validated.image)),
        "{row}"
    );
    let shown = row.replace(&format!("title=\"{}\"", validated.image), "");
    assert!(!shown.contains(digest), "{row}");
    assert!(
        shown.contains(&format!("@sha256:{}…", &digest[..12])),
        "{row}"
    );

    let failed = section("### Failed recently / 最近失败\n");
    assert!(failed.contains("the smoke failed twice"), "{failed}");
    assert!(
        !failed.contains("duplicate") && !failed.contains("capacity"),
        "{failed}"
    );
    let other = section("### Duplicates, deferrals and other ends / 重复、延后及其他结束\n");
    assert!(other.contains("**duplicate**"), "{other}");
    assert!(other.contains("**capacity-deferred**"), "{other}");
    assert!(!other.contains("the smoke failed twice"), "{other}");
    crate::gfm_render::assert_renders("the dashboard issue", &body);
    // With `KLAUD_SCREENSHOTS` set: how it reads at GitHub's width.
    crate::support::screenshot_issue("dashboard-issue-end-of-pass", &body);
}
