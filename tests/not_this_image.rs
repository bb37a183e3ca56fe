//! Closing a Klaud PR without merging means "not this image",
//! through the real octocrab forge against the GitHub and registry
//! simulators: a maintainer closes the PR; the receipt says what that
//! means and how to undo it, in both languages, linking the dashboard
//! issue; the next waves (even with the store thrown away, as in Actions)
//! do not propose that image again; a newer tag is proposed once it is
//! pushed; ticking the dashboard's undo box lets the same image be
//! proposed again. Every PR body ends with the collapsed footer.

use std::time::Duration;

use klaud_claims::Clock as _;
use klaud_lifecycle::engine::{Journal, MemoryJournal};
use klaud_lifecycle::wave::WaveSummary;
use klaud_planner::plan::{BlockKind, PlanOptions};
use klaud_sandbox::stack::MAINTAINER_TOKEN;
use klaud_service::dashboard_issue::{LABEL, Publish, Steering, publish, rules_in_force, steer};

use crate::support::{Harness, REPO, engine_config, owner};

const KEY: &str = "demo-fp4-b200-sglang";
/// The image the demo registry offers the family first, as rules spell it.
const IMAGE: &str = "lmsysorg/sglang:v0.5.17-cu130";

fn family() -> String {
    format!("configs/nvidia-master.yaml:{KEY}")
}

/// One wave as `klaud wave` composes it: read and steer the dashboard
/// issue, plan with every rule in force (none configured), drive, publish.
async fn wave(env: &Harness, journal: &dyn Journal, run: u64) -> (Steering, WaveSummary) {
    let mut steering = steer(&env.forge, journal, env.clock).await.expect("steer");
    klaud_service::dashboard_issue::open_before_wave(
        &env.forge,
        journal,
        env.clock,
        &mut steering,
        "main",
    )
    .await
    .expect("open");
    let records = journal.list().await.expect("records");
    let mut engine = engine_config(run);
    engine.dashboard_issue = steering.number();
    engine.undone_declines = steering.undone_declines();
    let mut options = env.wave_options(owner(), engine);
    // The family must not be held back by a cooldown: only the rule may.
    options.lifecycle.cooldown = Duration::ZERO;
    options.lifecycle.plan.ignore = rules_in_force(&[], Some(&steering), &records);
    let summary = env.wave(journal, options).await;
    publish(
        &env.forge,
        journal,
        env.clock,
        &steering,
        Publish {
            base_branch: "main".into(),
            summary: Some(&summary),
            cooldown: Duration::ZERO,
            web_dashboard: None,
            may_open: true,
        },
    )
    .await
    .expect("publish");
    (steering, summary)
}

fn ours(summary: &WaveSummary) -> Vec<&klaud_lifecycle::wave::CandidateSummary> {
    summary
        .candidates
        .iter()
        .filter(|c| c.family == family())
        .collect()
}

fn planned(summary: &WaveSummary) -> &klaud_planner::plan::FamilyPlan {
    summary
        .families
        .iter()
        .find(|f| f.family == family())
        .expect("the family is planned")
}

async fn dashboard_body(env: &Harness) -> (u64, String) {
    let issue = env
        .stack
        .state()
        .issues(REPO)
        .await
        .into_iter()
        .find(|i| i.open && i.labels.iter().any(|l| l == LABEL))
        .expect("the dashboard issue");
    (issue.number, issue.body)
}

/// The first wave opens the family's PR; a maintainer closes it; the next
/// wave sees it closed and ends the candidate with the receipt. Returns
/// the closed PR's number.
async fn closed_by_a_maintainer(env: &Harness, journal: &dyn Journal) -> u64 {
    let (_, first) = wave(env, journal, 7_001).await;
    let started = ours(&first);
    assert_eq!(started.len(), 1, "{first:#?}");
    assert!(started[0].image.starts_with(IMAGE), "{started:#?}");
    let url = started[0].pull_request.clone().expect("a PR");
    let number: u64 = url.rsplit('/').next().unwrap().parse().unwrap();

    // The smoke's title, as the sandbox computes it from the repository's
    // `run-name` and the dispatched `test-name`, names the family and the
    // attempt, and ends with the candidate's identity.
    let runs = env
        .forge
        .list_runs(&klaud_github::RunFilter {
            workflow: Some("e2e-tests.yml".into()),
            event: Some("workflow_dispatch".into()),
            ..Default::default()
        })
        .await
        .expect("runs");
    let title = format!(
        "e2e Test - {KEY} · Initial smoke, repair 0/5 · klaud-7001-{}",
        started[0].candidate
    );
    assert!(
        runs.iter()
            .any(|r| r.display_title.as_deref() == Some(title.as_str())),
        "{title} among {:?}",
        runs.iter().map(|r| &r.display_title).collect::<Vec<_>>()
    );

    // The footer: every command, what closing means, the dashboard.
    let body = env.pull(number).await.body.unwrap_or_default();
    let footer = body
        .rfind("<!-- klaud-footer -->")
        .map(|at| &body[at..])
        .unwrap_or_else(|| panic!("no footer:\n{body}"));
    assert!(
        footer.trim_end().ends_with("<!-- /klaud-footer -->"),
        "the body ends with it:\n{body}"
    );
    assert!(footer.contains("<details>"), "{footer}");
    for command in klaud_lifecycle::commands::COMMANDS {
        assert!(footer.contains(command.usage), "{footer}");
    }
    assert!(footer.contains("not this image"), "{footer}");
    let (dashboard, _) = dashboard_body(env).await;
    assert!(
        footer.contains(&format!("#{dashboard}")),
        "the dashboard issue, opened before the first wave, is linked:\n{footer}"
    );

    env.person(MAINTAINER_TOKEN).close_pull(number).await;
    let (_, second) = wave(env, journal, 7_002).await;
    let ended = ours(&second);
    assert!(
        ended
            .iter()
            .any(|c| c.outcome.as_deref() == Some("handoff")),
        "{second:#?}"
    );
    number
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_pr_is_not_proposed_again_but_a_newer_image_is() {
    let env = Harness::demo().start().await;
    let number = closed_by_a_maintainer(&env, &env.journal).await;

    // The receipt says what closing meant, in both languages, and where
    // the undo box is.
    let (dashboard, body) = dashboard_body(&env).await;
    let receipt = env
        .bodies(number)
        .await
        .into_iter()
        .find(|b| b.contains("<!-- klaud-outcome:"))
        .expect("a receipt");
    let (en, zh) = receipt.split_once("<summary>中文</summary>").expect("both");
    assert!(
        en.contains(&format!(
            "Klaud will not propose `{IMAGE}` for this family again; it will propose a newer image when one appears"
        )),
        "{receipt}"
    );
    assert!(
        zh.contains(&format!("Klaud 不会再为该系列提议 `{IMAGE}`")),
        "{receipt}"
    );
    for part in [en, zh] {
        assert!(
            part.contains(&format!("/issues/{dashboard})")),
            "links the dashboard issue: {part}"
        );
    }
    assert!(en.contains("closed by @"), "names who closed it: {en}");

    // The dashboard keeps the rule, with its undo box.
    assert!(
        body.contains(&format!("<!-- klaud:do unignore {} {IMAGE} -->", family())),
        "{body}"
    );
    assert!(
        body.contains(&format!("closed #{number} without merging")),
        "{body}"
    );

    // Actions mode: the next job starts with an empty store. The rule comes
    // from GitHub (the dashboard issue), and no second PR is opened.
    let fresh = MemoryJournal::new();
    let (steering, third) = wave(&env, &fresh, 7_003).await;
    assert!(
        steering
            .rules()
            .iter()
            .any(|r| matches!(r.source, klaud_planner::ignore::IgnoreSource::ClosedPull { number: n, .. } if n == number)),
        "{steering:?}"
    );
    let plan = planned(&third);
    let blocked = plan.blocked.as_ref().expect("held back");
    assert_eq!(blocked.kind, BlockKind::Ignored, "{plan:?}");
    assert!(
        blocked.reason.contains(&format!(
            "image `{IMAGE}` for this family (by @sandbox-maintainer closing #{number}): closed without merging: not this image"
        )),
        "{blocked:?}"
    );
    assert!(ours(&third).is_empty(), "{third:#?}");
    let branch_pulls = env
        .forge
        .list_pulls("all")
        .await
        .expect("pulls")
        .into_iter()
        .filter(|p| p.title.contains(KEY))
        .count();
    assert_eq!(branch_pulls, 1, "no second PR for the family");

    // Upstream publishes a newer tag: it is proposed, and a PR opens.
    env.stack
        .registry
        .add_tag(
            "lmsysorg/sglang",
            "v0.5.18-cu130",
            &klaud_sandbox::registry::TagSeed {
                pushed: Some("2026-10-01T10:00:00Z".parse().expect("time")),
                created: Some("2026-10-01T09:00:00Z".parse().expect("time")),
                ..Default::default()
            },
        )
        .expect("new tag");
    let (_, fourth) = wave(&env, &MemoryJournal::new(), 7_004).await;
    let plan = planned(&fourth);
    assert!(plan.blocked.is_none(), "{plan:?}");
    let started = ours(&fourth);
    assert_eq!(started.len(), 1, "{fourth:#?}");
    assert!(
        started[0]
            .image
            .starts_with("lmsysorg/sglang:v0.5.18-cu130@"),
        "{started:#?}"
    );
    assert!(started[0].pull_request.is_some(), "{started:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticking_undo_lets_the_same_image_be_proposed_again() {
    let env = Harness::demo().start().await;
    let number = closed_by_a_maintainer(&env, &env.journal).await;
    let (dashboard, body) = dashboard_body(&env).await;
    let undo = format!("<!-- klaud:do unignore {} {IMAGE} -->", family());
    let ticked: String = body
        .lines()
        .map(|l| {
            if l.contains(&undo) {
                l.replacen("- [ ]", "- [x]", 1)
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert_ne!(ticked, body, "no undo box in:\n{body}");
    env.person(MAINTAINER_TOKEN)
        .edit_issue_body(dashboard, &ticked)
        .await;

    // The pass applies the box; the journal still knows the closed PR, and
    // the rule is not made again from it.
    let steering = steer(&env.forge, &env.journal, env.clock)
        .await
        .expect("steer");
    assert!(
        steering
            .kept
            .ignores
            .iter()
            .all(|i| i.pull != Some(number.into())),
        "{steering:?}"
    );
    let records = env.journal.list().await.expect("records");
    let rules = rules_in_force(&[], Some(&steering), &records);
    assert!(rules.is_empty(), "{:?}", rules.iter().collect::<Vec<_>>());
    publish(
        &env.forge,
        &env.journal,
        env.clock,
        &steering,
        Publish {
            base_branch: "main".into(),
            summary: None,
            cooldown: Duration::ZERO,
            web_dashboard: None,
            may_open: true,
        },
    )
    .await
    .expect("publish");
    let (_, after) = dashboard_body(&env).await;
    assert!(!after.contains(&undo), "the rule is gone:\n{after}");
    assert!(after.contains("is no longer ignored"), "{after}");

    // The next pass's plan proposes the same image again.
    let steering = steer(&env.forge, &env.journal, env.clock)
        .await
        .expect("steer");
    let mut options = PlanOptions::new(env.clock.now());
    options.ignore = rules_in_force(&[], Some(&steering), &records);
    let report =
        klaud_planner::plan::plan(&env.repository, &env.registry().session(), &options).await;
    let plan = report
        .families
        .iter()
        .find(|f| f.family == family())
        .expect("planned");
    assert!(plan.blocked.is_none(), "{plan:?}");
    let candidate = plan.candidate.as_ref().expect("a candidate");
    assert!(
        candidate.image.to_string().starts_with(IMAGE),
        "{candidate:?}"
    );

    // And the next wave really proposes it: a new PR beside the closed
    // one, on the same branch, while the closed one stays closed.
    let (_, again) = wave(&env, &env.journal, 7_005).await;
    let started = ours(&again);
    assert_eq!(started.len(), 1, "{again:#?}");
    assert!(started[0].image.starts_with(IMAGE), "{started:#?}");
    let url = started[0].pull_request.clone().expect("a new PR");
    let reopened: u64 = url.rsplit('/').next().unwrap().parse().unwrap();
    assert_ne!(reopened, number, "a new PR, the closed one is history");
    assert!(env.pull(reopened).await.state.is_open());
    assert!(!env.pull(number).await.state.is_open());
}
