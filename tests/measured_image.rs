//! The measured image is the bumped image: a smoke or final sweep whose
//! result rows record another image than the PR's ends the candidate
//! `failed` (not retried, not repaired) with reports naming the image that
//! ran, in both languages; a family whose launcher runs a fixed container
//! whatever the master's image is readiness-blocked before any claim, PR or
//! dispatch. The real engine and wave, the octocrab forge and the sandbox,
//! whose CI script stages the run that measured another image.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use klaud_lifecycle::engine::{
    CandidateRecord, MemoryJournal, PullState, RepairContext, RepairError, RepairHook,
    RepairOutcome,
};
use klaud_lifecycle::model::{Outcome, Phase};
use klaud_planner::identity::family_id;
use klaud_sandbox::stack::MAINTAINER;

use crate::people::wave_config;
use crate::support::{Harness, REPO};

const MASTER: &str = "configs/nvidia-master.yaml";
const SGLANG: &str = "demo-fp4-b200-sglang";
/// An older SGLang than any the demo proposes.
const OLD: &str = "lmsysorg/sglang:v0.5.8-cu130";

/// A repair hook that only counts its calls: a run of another container
/// must never reach it.
#[derive(Default)]
struct Counting(Mutex<usize>);

impl Counting {
    fn calls(&self) -> usize {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl RepairHook for Counting {
    async fn repair(&self, _: &RepairContext) -> Result<RepairOutcome, RepairError> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        Ok(RepairOutcome::GaveUp("counting only".into()))
    }
}

/// The run reports and the receipt on the candidate's PR.
async fn reports_and_receipt(env: &Harness, rec: &CandidateRecord) -> (Vec<String>, String) {
    let bodies = env.bodies(rec.pull.expect("a pull request")).await;
    let reports: Vec<String> = bodies
        .iter()
        .filter(|b| b.contains("klaud-report:") && b.contains("/actions/runs/"))
        .cloned()
        .collect();
    let receipt = bodies
        .iter()
        .rfind(|b| b.starts_with("<!-- klaud-outcome:"))
        .expect("a receipt")
        .clone();
    (reports, receipt)
}

/// `body` names `image` and the family, in English and in Chinese; an
/// attempt report (`report`) also says what follows.
fn names_in_both_languages(body: &str, image: &str, key: &str, report: bool) {
    let (english, chinese) = body
        .split_once("<summary>中文</summary>")
        .unwrap_or_else(|| panic!("both languages: {body}"));
    for (part, words) in [
        (english, "Measured another image: "),
        (chinese, "测得的是另一个镜像："),
    ] {
        assert!(part.contains(words), "{words:?} in {part}");
        // Published text breaks `@` so GitHub mentions no one: each side
        // of it is there.
        for piece in image.split('@') {
            assert!(part.contains(piece), "{piece} in {part}");
        }
        assert!(part.contains(key), "{key} in {part}");
    }
    if report {
        assert!(
            english.contains("nor send it to the repair hook"),
            "{english}"
        );
        assert!(chinese.contains("也不将其交给修复钩子"), "{chinese}");
    }
}

#[tokio::test]
async fn a_smoke_that_measured_another_image_fails_without_retry_or_repair_naming_it() {
    let env = Harness::demo()
        .script(&format!(
            r#"
[families."*"]
smoke = ["success"]
sweep = ["success"]
[families.{SGLANG}]
smoke = [{{ outcome = "success", image = "{OLD}" }}, "success"]
"#
        ))
        .start()
        .await;
    let target = env.target(SGLANG).await;
    let journal = MemoryJournal::new();
    let hook = Counting::default();
    let rec = env.finish_with(&journal, &target, Some(&hook)).await;
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Failed, "{ending:?}");
    assert_eq!(ending.phase, Phase::Targeted, "{ending:?}");
    assert!(ending.message.contains(OLD), "{ending:?}");
    assert!(ending.message.contains(&rec.image), "{ending:?}");
    // The run passed, yet nothing followed it: no retry, no repair, no
    // changelog, no sweep.
    assert_eq!(rec.attempts.len(), 1, "{:#?}", rec.attempts);
    assert_eq!(hook.calls(), 0);
    assert!(rec.sweep_requested_at.is_none());
    assert_eq!(env.dispatches().await, 1);
    let (reports, receipt) = reports_and_receipt(&env, &rec).await;
    let smoke = reports
        .iter()
        .find(|r| r.contains("Measured another image"))
        .unwrap_or_else(|| panic!("the smoke report names the image: {reports:#?}"));
    names_in_both_languages(smoke, OLD, &format!("{MASTER}:{SGLANG}"), true);
    assert!(receipt.contains("\"outcome\":\"failed\""), "{receipt}");
    names_in_both_languages(&receipt, OLD, SGLANG, false);
    // The demo has no launchers: Klaud says what it can see, nothing more.
    assert!(!receipt.contains("chosen by"), "{receipt}");
}

#[tokio::test]
async fn a_final_sweep_that_measured_another_build_of_the_tag_is_not_validated() {
    // Same repository and tag as the PR's image, another digest: the tag
    // moved and the sweep ran another build.
    const MOVED: &str = "lmsysorg/sglang:v0.5.17-cu130@sha256:0000000000000000000000000000000000000000000000000000000000000000";
    let env = Harness::demo()
        .script(&format!(
            r#"
[families."*"]
smoke = ["success"]
sweep = ["success"]
[families.{SGLANG}]
sweep = [{{ outcome = "success", image = "{MOVED}" }}, "success"]
"#
        ))
        .start()
        .await;
    let target = env.target(SGLANG).await;
    let journal = MemoryJournal::new();
    let hook = Counting::default();
    let rec = env.finish_with(&journal, &target, Some(&hook)).await;
    assert!(
        rec.image
            .starts_with("lmsysorg/sglang:v0.5.17-cu130@sha256:")
            && rec.image != MOVED,
        "{}",
        rec.image
    );
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Failed, "{ending:?}");
    assert_eq!(ending.phase, Phase::FinalSweep, "{ending:?}");
    assert!(
        rec.sweep.is_none(),
        "check-final must not hold: {:?}",
        rec.sweep
    );
    assert_eq!(hook.calls(), 0);
    // One smoke, one sweep: the sweep is not run again.
    assert_eq!(rec.attempts.len(), 2, "{:#?}", rec.attempts);
    let (reports, receipt) = reports_and_receipt(&env, &rec).await;
    let sweep = reports
        .iter()
        .find(|r| r.contains("Final full sweep") && r.contains("Measured another image"))
        .unwrap_or_else(|| panic!("the sweep report names the image: {reports:#?}"));
    names_in_both_languages(sweep, MOVED, &format!("{MASTER}:{SGLANG}"), true);
    names_in_both_languages(&receipt, MOVED, SGLANG, false);
    // The PR is not left looking validated: cleaned up like any failure.
    let pull = env.pull(rec.pull.expect("pull")).await;
    assert_eq!(pull.state, PullState::Closed, "{pull:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launcher_that_pins_its_container_blocks_the_family_before_any_claim() {
    const VLLM: &str = "demo-fp4-b200-vllm";
    let env = Harness::demo().start().await;
    // The b200 demo cluster's launcher runs one fixed squash file for
    // vLLM whatever the tag; SGLang follows $IMAGE.
    let launcher = "#!/usr/bin/bash\n\
        if [[ $FRAMEWORK == \"vllm\" ]]; then\n\
        \x20   SQUASH_FILE=\"/data/squash/vllm_vllm-openai_v0.25.0.sqsh\"\n\
        else\n\
        \x20   SQUASH_FILE=\"/data/squash/$(echo \"$IMAGE\" | sed 's/[\\/:@#]/_/g').sqsh\"\n\
        fi\n\
        srun --container-image=$SQUASH_FILE bash benchmarks/x.sh\n";
    let mut files = BTreeMap::new();
    files.insert(
        "runners/launch_b200-demo.sh".to_owned(),
        Some(launcher.as_bytes().to_vec()),
    );
    env.stack
        .state()
        .push_commit(REPO, "main", MAINTAINER, files, "a launcher")
        .await
        .expect("push");
    let journal = MemoryJournal::new();
    let summary = wave_config(&env, crate::support::engine_config(5301), &journal).await;
    let blocked = summary
        .blocked
        .iter()
        .find(|b| b.family == format!("{MASTER}:{VLLM}"))
        .unwrap_or_else(|| panic!("{VLLM} is not blocked: {summary:#?}"));
    assert_eq!(blocked.outcome, "readiness-blocked", "{blocked:#?}");
    assert!(
        blocked.reason.starts_with(
            "launcher-pins-image: runners/launch_b200-demo.sh:3 sets SQUASH_FILE=/data/squash/vllm_vllm-openai_v0.25.0.sqsh"
        ),
        "{blocked:#?}"
    );
    // No claim, no branch, no PR, no run for it.
    let id = family_id(&format!("{MASTER}:{VLLM}"));
    assert!(summary.candidates.iter().all(|c| !c.family.ends_with(VLLM)));
    let claims = env.claims().await;
    assert!(claims.iter().all(|(n, _)| !n.contains(&id)), "{claims:?}");
    let pulls = env.forge.list_pulls("all").await.expect("pulls");
    assert!(pulls.iter().all(|p| !p.head_ref.contains(&id)));
    let runs = env
        .forge
        .list_runs(&klaud_github::RunFilter::default())
        .await
        .expect("runs");
    assert!(
        runs.iter()
            .all(|r| !r.display_title.as_deref().is_some_and(|t| t.contains(&id))),
        "{runs:#?}"
    );
    // The family on the same launcher whose framework follows $IMAGE goes on.
    assert!(
        summary
            .candidates
            .iter()
            .any(|c| c.family == format!("{MASTER}:{SGLANG}")),
        "{summary:#?}"
    );
}
