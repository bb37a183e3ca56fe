//! Learning through the sandbox: a smoke fails with lines the demo's
//! playbook does not know, a change to the family's script makes it pass,
//! and Klaud proposes a playbook entry built from the failing lines and
//! that change, in the receipt (YAML ready to paste, kept in the hidden
//! record). Every way a fix lands is covered: the repair hook's commit, a
//! person's push to a validated PR whose sweep, run again by `/klaud
//! retry`, failed and then passed (also with the store lost in between),
//! and a writer's `/klaud try` variant that passes where the candidate it
//! was tried from failed. The dashboard issue lists it with a box; a
//! writer's tick opens one pull request adding it to the playbook,
//! whatever is repeated; a reader's tick does nothing. A repair by a known
//! entry proposes nothing.

use std::collections::BTreeMap;

use async_trait::async_trait;
use klaud_lifecycle::engine::{
    CandidateRecord, MemoryJournal, RepairContext, RepairError, RepairHook, RepairOutcome,
};
use klaud_lifecycle::model::Outcome;
use klaud_lifecycle::playbook::{Fix, JobLogView, Playbook};
use klaud_lifecycle::report::{MarkerKey, Receipt, find_record, parse_receipt};

use klaud_sandbox::github::Permission;
use klaud_sandbox::stack::MAINTAINER_TOKEN;

use crate::support::{BOT, FailsUntil, Harness, REPO, dashboard_pass, tick, upkeep_pass};

const READER: &str = "sandbox-learn-reader";
const READER_TOKEN: &str = "ghp_learn_reader";
const STEERER: &str = "sandbox-learn-steerer";
const STEERER_TOKEN: &str = "ghp_learn_steerer";

pub(crate) const SCRIPT: &str = "benchmarks/single_node/fixed_seq_len/demo_fp4_b200_vllm.sh";
pub(crate) const PLAYBOOK: &str = ".github/klaud-playbook.yaml";
/// A failure no entry of the demo's playbook knows.
pub(crate) const UNKNOWN: &str = "ValueError: fp8 KV cache is not supported by the attention \
                                  backend FLASHINFER on device sm_100 (rank 3)";
pub(crate) const FAILING: &str = "--kv-cache-dtype fp8";
pub(crate) const FIXED: &str = "--kv-cache-dtype auto";

/// A script where the vLLM family's smokes fail with `line` until `fixed`
/// is in its benchmark script.
pub(crate) fn failing_until(line: &str, fixed: &str) -> String {
    FailsUntil {
        family: "demo-fp4-b200-vllm",
        lines: &[line],
        node: "b200-dgx-07",
        file: SCRIPT,
        contains: fixed,
    }
    .smokes()
}

/// A hook that makes the fix a person would: the one launch argument
/// changed in the script, pushed as the bot with the candidate's trailer.
pub(crate) struct FixingHook<'a> {
    pub(crate) env: &'a Harness,
}

#[async_trait]
impl RepairHook for FixingHook<'_> {
    async fn repair(&self, ctx: &RepairContext) -> Result<RepairOutcome, RepairError> {
        let bytes = self
            .env
            .forge
            .get_contents(SCRIPT, &ctx.branch)
            .await
            .map_err(RepairError::new)?
            .ok_or_else(|| RepairError::new(std::io::Error::other("no script")))?;
        let text = String::from_utf8(bytes).map_err(RepairError::new)?;
        let mut files = BTreeMap::new();
        files.insert(
            SCRIPT.to_owned(),
            Some(text.replace(FAILING, FIXED).into_bytes()),
        );
        let message = format!("Use the auto KV cache dtype\n\n{}\n", ctx.trailer);
        self.env
            .stack
            .state()
            .push_commit(REPO, &ctx.branch, BOT, files, &message)
            .await
            .map_err(RepairError::new)?;
        Ok(RepairOutcome::Pushed)
    }
}

/// The candidate's receipt on its PR: the body and the record.
pub(crate) async fn receipt(env: &Harness, rec: &CandidateRecord) -> (String, Receipt) {
    let number = rec.pull.expect("pull");
    env.bodies(number)
        .await
        .into_iter()
        .find_map(|b| {
            let found = find_record(&b).ok().flatten()?;
            match &found.key {
                MarkerKey::Outcome { candidate, .. } if candidate.as_str() == rec.candidate => {
                    let r = parse_receipt(&found).ok()?;
                    Some((b.clone(), r))
                }
                _ => None,
            }
        })
        .expect("a receipt")
}

/// The demo's playbook with `yaml` appended under `entries:` as a
/// maintainer would paste it (the entries are the file's first list).
pub(crate) fn demo_playbook_with(yaml: &str) -> String {
    let base = std::fs::read_to_string(crate::support::demo_seed().join(PLAYBOOK)).expect("seed");
    let at = base.find("\nnodes:").expect("a nodes section") + 1;
    format!("{}{yaml}{}", &base[..at], &base[at..])
}

#[tokio::test]
async fn a_hook_repair_of_an_unknown_failure_proposes_an_entry_in_the_receipt() {
    let env = Harness::demo()
        .script(&failing_until(UNKNOWN, FIXED))
        .start()
        .await;
    let target = env.target("demo-fp4-b200-vllm").await;
    let journal = MemoryJournal::new();
    let hook = FixingHook { env: &env };
    let rec = env.finish_with(&journal, &target, Some(&hook)).await;
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Validated, "{ending:?}");
    assert_eq!(rec.repairs, 1);
    let (body, receipt) = receipt(&env, &rec).await;
    let learned = receipt
        .learned
        .expect("a proposed entry in the hidden record");
    assert_eq!(rec.learned.as_ref(), Some(&learned), "kept in the journal");
    assert_eq!(learned.path, PLAYBOOK);
    assert_eq!(learned.family, rec.family);
    assert_eq!(learned.pull, rec.pull);
    assert!(learned.id.starts_with("learned-"), "{learned:?}");
    assert!(
        body.contains("Proposed playbook entry / 建议的排障手册条目"),
        "{body}"
    );
    assert!(body.contains("```yaml\n  - id: learned-"), "{body}");
    assert!(body.contains(&format!("`{PLAYBOOK}`")), "{body}");
    // Pasted under `entries:`, the file reads, and the entry knows the
    // failing line (and not the demo's OOM), scoped to what it was seen on,
    // with the hook's change as its fix.
    let file = demo_playbook_with(&learned.yaml);
    let book = Playbook::parse(PLAYBOOK, &file).expect("the appended playbook reads");
    let entry = book.entry(&learned.id).expect("the entry");
    assert!(
        entry
            .signature_lines(&JobLogView::new(&format!("{UNKNOWN}\n")))
            .is_some(),
        "{entry:?}"
    );
    assert!(
        entry
            .signature_lines(&JobLogView::new(
                "torch.OutOfMemoryError: CUDA out of memory.\n"
            ))
            .is_none()
    );
    assert_eq!(
        entry.fixes,
        vec![Fix::SetArg {
            name: "kv-cache-dtype".into(),
            from: Some("fp8".into()),
            to: "auto".into(),
        }]
    );
    assert_eq!(entry.signature.scope.framework, vec!["vllm".to_owned()]);
}

#[tokio::test]
async fn a_repair_by_a_known_entry_proposes_nothing() {
    let oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.";
    let env = Harness::demo()
        .script(&failing_until(oom, "--gpu-memory-utilization 0.90"))
        .start()
        .await;
    let target = env.target("demo-fp4-b200-vllm").await;
    let journal = MemoryJournal::new();
    let rec = env.finish(&journal, &target).await;
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Validated, "{ending:?}");
    assert_eq!(rec.repairs, 1);
    let (body, receipt) = receipt(&env, &rec).await;
    assert_eq!(receipt.learned, None);
    assert_eq!(rec.learned, None);
    assert!(!body.contains("Proposed playbook entry"), "{body}");
}

/// A sandbox where the vLLM family failed with [`UNKNOWN`] and the hook's
/// fix made it pass: the record, kept in the harness's journal (the one the
/// dashboard reads).
async fn learned_env() -> (Harness, CandidateRecord) {
    let env = Harness::demo()
        .user(READER, None, READER_TOKEN, Permission::Read)
        .user(STEERER, None, STEERER_TOKEN, Permission::Write)
        .script(&failing_until(UNKNOWN, FIXED))
        .start()
        .await;
    let target = env.target("demo-fp4-b200-vllm").await;
    let hook = FixingHook { env: &env };
    let rec = env.finish_with(&env.journal, &target, Some(&hook)).await;
    assert!(rec.learned.is_some(), "{rec:#?}");
    (env, rec)
}

#[tokio::test]
async fn the_dashboard_lists_a_learned_entry_and_a_writers_box_opens_one_playbook_pr() {
    let (env, rec) = learned_env().await;
    let learned = rec.learned.clone().expect("learned");
    let (number, body) = dashboard_pass(&env).await;
    let section = body
        .split("### Learned playbook entries / 学到的排障手册条目")
        .nth(1)
        .expect("the section");
    assert!(section.contains(&format!("`{}`", learned.id)), "{section}");
    assert!(section.contains("```yaml"), "{section}");
    let code = format!("playbook-add {}", learned.id);
    let branch = format!("klaud/playbook/{}", learned.id);
    // The issue keeps it: with the store lost, the next pass lists it still.
    env.journal.clear();
    let (_, body) = dashboard_pass(&env).await;
    assert!(
        body.contains(&format!("<!-- klaud:do {code} -->")),
        "{body}"
    );

    // A reader cannot tick it (GitHub refuses their edit); a writer who
    // ticks and loses write access before the pass opens nothing, and the
    // issue says why.
    let (status, _) = env
        .person(READER_TOKEN)
        .try_edit_issue_body(number, &tick(&body, &code))
        .await;
    assert_eq!(status, 403);
    env.person(STEERER_TOKEN)
        .edit_issue_body(number, &tick(&body, &code))
        .await;
    env.stack
        .state()
        .set_permission(REPO, STEERER, Permission::Read)
        .await
        .expect("demote");
    let (_, after_reader) = dashboard_pass(&env).await;
    assert!(env.pulls(&branch).await.is_empty());
    assert!(
        after_reader.contains("@sandbox-learn-steerer has read access"),
        "{after_reader}"
    );
    assert!(!after_reader.contains("- [x]"), "{after_reader}");

    // A writer's tick: one pull request, the playbook with the entry
    // appended byte-exactly, which the playbook reader (`klaud doctor`'s)
    // accepts.
    let ticked = tick(&after_reader, &code);
    env.person(MAINTAINER_TOKEN)
        .edit_issue_body(number, &ticked)
        .await;
    let (_, after) = dashboard_pass(&env).await;
    let pulls = env.pulls(&branch).await;
    assert_eq!(pulls.len(), 1, "{pulls:?}");
    let pr = env.pull(pulls[0]).await;
    assert_eq!(pr.title, format!("playbook: add {}", learned.id));
    assert_eq!(pr.base_ref, "main");
    let body_pr = pr.body.clone().unwrap_or_default();
    assert!(
        body_pr.contains("添加 Klaud 学到的排障手册条目"),
        "{body_pr}"
    );
    assert!(
        body_pr.contains(&format!("#{}", rec.pull.expect("pull"))),
        "{body_pr}"
    );
    let file = env
        .forge
        .get_contents(PLAYBOOK, &branch)
        .await
        .expect("read")
        .expect("present");
    let file = String::from_utf8(file).expect("utf-8");
    assert_eq!(file, demo_playbook_with(&learned.yaml));
    let book = Playbook::parse(PLAYBOOK, &file).expect("doctor's reader accepts it");
    assert!(book.entry(&learned.id).is_some());
    assert!(
        // The link's label is escaped as every outside text is (`\#`
        // keeps GitHub from linking the number a second time).
        after.contains(&format!("Pull request / PR: [\\#{}]", pulls[0])),
        "{after}"
    );
    assert!(
        !after.contains(&format!("<!-- klaud:do {code} -->")),
        "{after}"
    );

    // Another pass, and the same tick read again as after a crash before
    // the issue was written: still one pull request.
    dashboard_pass(&env).await;
    env.person(MAINTAINER_TOKEN)
        .edit_issue_body(number, &ticked)
        .await;
    let (_, again) = dashboard_pass(&env).await;
    assert_eq!(env.pulls(&branch).await.len(), 1);
    assert!(
        again.contains(&format!("Pull request / PR: [\\#{}]", pulls[0])),
        "{again}"
    );

    // Merged, the playbook has it: the dashboard lists it no more.
    env.person(MAINTAINER_TOKEN).merge_pull(pulls[0]).await;
    let (_, merged) = dashboard_pass(&env).await;
    let section = merged
        .split("### Learned playbook entries / 学到的排障手册条目")
        .nth(1)
        .and_then(|s| s.split("\n### ").next())
        .expect("the section");
    assert!(!section.contains(&learned.id), "{section}");
}

/// The vLLM family's first sweep passes; every later one fails with
/// [`UNKNOWN`] until the script has [`FIXED`].
fn sweeps_fail_until_fixed() -> String {
    FailsUntil {
        family: "demo-fp4-b200-vllm",
        lines: &[UNKNOWN],
        node: "b200-dgx-07",
        file: SCRIPT,
        contains: FIXED,
    }
    .sweeps_after_a_pass()
}

/// A maintainer's commit of `path` pushed on top of `rec`'s branch.
async fn maintainers_push(env: &Harness, rec: &CandidateRecord, path: &str, bytes: Vec<u8>) {
    crate::support::maintainers_push(env, rec, path, bytes, "A maintainer's change").await;
}

/// Waves that plan nothing new until `rec`'s candidate is done with an
/// ending `done` accepts; the record.
async fn waves_until(
    env: &Harness,
    rec: &CandidateRecord,
    done: impl Fn(&CandidateRecord) -> bool,
) -> CandidateRecord {
    use klaud_lifecycle::engine::Journal as _;
    let started = std::time::Instant::now();
    loop {
        let mut options = env.wave_options(crate::support::owner(), env.config.clone());
        options.lifecycle.plan.max_candidates = 0;
        env.wave(&env.journal, options).await;
        if let Some(r) = env
            .journal
            .list()
            .await
            .expect("records")
            .into_iter()
            .find(|r| {
                r.candidate == rec.candidate
                    && r.step == klaud_lifecycle::engine::Step::Done
                    && done(r)
            })
        {
            return r;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(90),
            "no such end: {:#?}",
            env.bodies(rec.pull.expect("pull")).await
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A validated candidate whose sweep a maintainer asked for again with
/// `/klaud retry`, after a person's change withdrew its reuse line, and
/// which failed with lines the playbook does not know (the PR stays
/// open): the sandbox, the record before and after the re-sweep, its pull
/// request and the maintainer.
async fn a_failed_resweep() -> (
    Harness,
    CandidateRecord,
    klaud_claims::PullNumber,
    crate::support::Person,
    CandidateRecord,
) {
    use klaud_lifecycle::engine::{Journal as _, Upkept};
    let env = Harness::demo()
        .script(&sweeps_fail_until_fixed())
        .start()
        .await;
    let mut rec = env.validated(&env.journal, "demo-fp4-b200-vllm").await;
    let number = rec.pull.expect("pull");
    maintainers_push(&env, &rec, "NOTES.md", b"a person's change\n".to_vec()).await;
    match upkeep_pass(&env, &mut rec).await {
        Upkept::Withdrawn(_) => {}
        other => panic!("not withdrawn: {other:?}"),
    }
    env.journal.save(&rec).await.expect("save");
    let maintainer = env.person(MAINTAINER_TOKEN);
    maintainer.comment(number, "/klaud retry").await;
    let failed = waves_until(&env, &rec, |r| {
        r.ending
            .as_ref()
            .is_some_and(|e| e.outcome == Outcome::Failed)
    })
    .await;
    (env, rec, number, maintainer, failed)
}

/// A person's push of the fix to the family's script on the PR's branch.
async fn push_the_fix(env: &Harness, rec: &CandidateRecord) {
    let script = env
        .forge
        .get_contents(SCRIPT, &rec.branch)
        .await
        .expect("read")
        .expect("present");
    let fixed = String::from_utf8(script)
        .expect("utf-8")
        .replace(FAILING, FIXED);
    maintainers_push(env, rec, SCRIPT, fixed.into_bytes()).await;
}

#[tokio::test]
async fn a_persons_push_that_fixes_a_failed_sweep_is_learned() {
    let (env, rec, number, maintainer, failed) = a_failed_resweep().await;
    assert_eq!(failed.learned, None);
    assert!(
        env.forge
            .get_pull(number.get())
            .await
            .expect("pull")
            .state
            .is_open()
    );

    // The person pushes the fix to the script and asks again: the sweep of
    // the new head passes, and the receipt proposes the entry.
    push_the_fix(&env, &rec).await;
    maintainer.comment(number, "/klaud retry").await;
    let passed = waves_until(&env, &rec, |r| {
        r.ending
            .as_ref()
            .is_some_and(|e| e.outcome == Outcome::Validated)
    })
    .await;
    let learned = passed.learned.clone().expect("a learned entry");
    assert!(
        learned.change.contains("--kv-cache-dtype fp8 → auto"),
        "{learned:?}"
    );
    let (body, receipt) = receipt(&env, &passed).await;
    assert_eq!(receipt.learned.as_ref(), Some(&learned));
    assert!(
        body.contains("Proposed playbook entry / 建议的排障手册条目"),
        "{body}"
    );
    let book = Playbook::parse(PLAYBOOK, &demo_playbook_with(&learned.yaml)).expect("reads");
    let entry = book.entry(&learned.id).expect("the entry");
    assert!(
        entry
            .signature_lines(&JobLogView::new(&format!("{UNKNOWN}\n")))
            .is_some()
    );
    assert!(
        entry.diagnosis.en.contains(&format!("#{number}")),
        "{:?}",
        entry.diagnosis
    );
    // The dashboard issue lists it.
    let (_, dashboard) = dashboard_pass(&env).await;
    assert!(
        dashboard.contains(&format!("playbook-add {}", learned.id)),
        "{dashboard}"
    );
}

/// The dynamo family (its recipe lives in the repository, where a
/// variant's edits go).
const DYNAMO: &str = "demo-fp4-gb200-dynamo-vllm-disagg";
const DYNAMO_RECIPE: &str =
    "benchmarks/multi_node/srt-slurm-recipes/vllm/demo-model/disagg-gb200-1p1d.yaml";

/// Every smoke of the dynamo family fails with [`UNKNOWN`] until its
/// recipe runs fp8.
fn dynamo_fails_until_fp8() -> String {
    FailsUntil {
        family: DYNAMO,
        lines: &[UNKNOWN],
        node: "gb200-nvl-03",
        file: DYNAMO_RECIPE,
        contains: "precision: fp8",
    }
    .smokes()
}

/// A writer's `/klaud try` fixes a smoke that failed with lines the
/// playbook did not know: the variant's receipt proposes the entry (the
/// parent's failing lines, the change from the parent's failed head to the
/// variant's), the dashboard issue lists it once however often it runs,
/// and the same entry comes back from GitHub alone when the store is lost.
#[tokio::test]
async fn a_klaud_try_variant_that_fixes_an_unknown_failure_proposes_an_entry() {
    use klaud_lifecycle::engine::{Progress, Step};
    let env = Harness::demo()
        .script(&dynamo_fails_until_fp8())
        .start()
        .await;
    let base = env.target(DYNAMO).await;
    let lifecycle = klaud_service::GithubLifecycle::new(&env.forge);
    let engine = env.engine(&lifecycle, &env.journal, env.clock);
    let mut parent = engine.open_record(&base).await.expect("record");
    let started = std::time::Instant::now();
    // The parent's smoke fails (reported, triaged unknown) and it waits
    // for its repair: the try comes in while it is still in flight.
    while parent.step != Step::Repair {
        match engine.step(&mut parent).await.expect("step") {
            Progress::Done(_) | Progress::Skipped(_) => panic!("ended early: {parent:#?}"),
            Progress::Waiting(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            Progress::Advanced(_) => {}
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "{parent:#?}"
        );
    }
    let number = parent.pull.expect("pull");
    env.person(MAINTAINER_TOKEN)
        .comment(
            number,
            "/klaud try T: set disagg-gb200-1p1d.yaml:model.precision=fp8",
        )
        .await;
    let answered =
        klaud_service::pr_commands::handle_commands(&env.forge, &engine, &mut parent, None)
            .await
            .expect("commands");
    let tried: Vec<_> = answered.iter().flat_map(|a| a.started.clone()).collect();
    assert_eq!(tried.len(), 1, "{answered:#?}");
    let mut variant = engine.open_record(&tried[0]).await.expect("variant");
    let mut recs = [&mut parent, &mut variant];
    let started = std::time::Instant::now();
    while recs.iter().any(|r| r.step != Step::Done) {
        let mut waiting = true;
        for rec in recs.iter_mut().filter(|r| r.step != Step::Done) {
            if matches!(engine.step(rec).await.expect("step"), Progress::Advanced(_)) {
                waiting = false;
            }
        }
        if waiting {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(90),
            "{recs:#?}"
        );
    }
    let outcome = |r: &CandidateRecord| r.ending.as_ref().expect("ending").outcome;
    assert_eq!(outcome(&parent), Outcome::Failed, "{parent:#?}");
    assert_eq!(outcome(&variant), Outcome::Validated, "{variant:#?}");
    assert_eq!(parent.learned, None);

    // The variant's receipt holds the entry: the parent's failing line,
    // the variant's edit as its fix, seen on the parent's PR.
    let learned = variant.learned.clone().expect("a learned entry");
    let (body, receipt) = receipt(&env, &variant).await;
    assert_eq!(receipt.learned.as_ref(), Some(&learned));
    assert_eq!(learned.pull, variant.pull);
    assert!(
        body.contains("Proposed playbook entry / 建议的排障手册条目"),
        "{body}"
    );
    assert!(body.contains("A smoke failed with a signature"), "{body}");
    assert!(learned.change.contains("precision"), "{learned:?}");
    let book = Playbook::parse(PLAYBOOK, &demo_playbook_with(&learned.yaml))
        .expect("the appended playbook reads");
    let entry = book.entry(&learned.id).expect("the entry");
    assert!(
        entry
            .signature_lines(&JobLogView::new(&format!("{UNKNOWN}\n")))
            .is_some(),
        "{entry:?}"
    );
    assert!(
        entry
            .signature_lines(&JobLogView::new(
                "torch.OutOfMemoryError: CUDA out of memory.\n"
            ))
            .is_none()
    );
    assert_eq!(
        entry.fixes,
        vec![Fix::SetArg {
            name: "precision".into(),
            from: Some("fp4".into()),
            to: "fp8".into(),
        }]
    );
    assert!(
        entry
            .diagnosis
            .en
            .contains(&format!("on pull request #{number}")),
        "{:?}",
        entry.diagnosis
    );

    // The dashboard lists it, once, pass after pass.
    let code = format!("<!-- klaud:do playbook-add {} -->", learned.id);
    let (_, first) = dashboard_pass(&env).await;
    assert_eq!(first.matches(&code).count(), 1, "{first}");
    let (_, second) = dashboard_pass(&env).await;
    assert_eq!(second.matches(&code).count(), 1, "{second}");

    // With the store lost, the variant's record rebuilt from GitHub reads
    // the entry back from its receipt, and the dashboard keeps it once.
    env.journal.clear();
    let rebuilt = engine.open_record(&tried[0]).await.expect("rebuilt");
    assert_eq!(rebuilt.learned.as_ref(), Some(&learned));
    let (_, third) = dashboard_pass(&env).await;
    assert_eq!(third.matches(&code).count(), 1, "{third}");
}

/// A sweep `/klaud retry` ran again fails, and the store is lost: the
/// record rebuilt from the receipt knows from the retry's hidden marker
/// that it was a re-sweep, so the next `/klaud retry` after the person's
/// fix sweeps again (rather than only lifting the cooldown), and the pass
/// proposes an entry from the failed sweep's published report, naming it
/// a final sweep.
#[tokio::test]
async fn a_failed_resweep_rebuilt_after_a_lost_store_sweeps_again_on_retry() {
    let (env, rec, number, maintainer, failed) = a_failed_resweep().await;
    assert!(failed.swept_again, "{failed:#?}");

    // The store is lost; the person pushes the fix and asks again.
    env.journal.clear();
    push_the_fix(&env, &rec).await;
    let asked = maintainer.comment(number, "/klaud retry").await;
    let passed = waves_until(&env, &rec, |r| {
        r.ending
            .as_ref()
            .is_some_and(|e| e.outcome == Outcome::Validated)
    })
    .await;
    let replies = env.bodies(number).await;
    let reply = klaud_service::pr_commands::reply_marker(asked);
    assert!(
        replies
            .iter()
            .any(|b| b.contains(&reply) && b.contains("Sweeping again")),
        "{replies:#?}"
    );
    let learned = passed.learned.clone().expect("a learned entry");
    assert_eq!(learned.failed, klaud_lifecycle::playbook::FailedRun::Sweep);
    let (body, _) = receipt(&env, &passed).await;
    assert!(
        body.contains("A final sweep failed with a signature"),
        "{body}"
    );
    let book = Playbook::parse(PLAYBOOK, &demo_playbook_with(&learned.yaml)).expect("reads");
    let entry = book.entry(&learned.id).expect("the entry");
    assert!(
        entry
            .diagnosis
            .en
            .contains("a final sweep failed with these lines"),
        "{:?}",
        entry.diagnosis
    );
    assert!(
        entry.diagnosis.zh.contains("最终 sweep"),
        "{:?}",
        entry.diagnosis
    );
}
