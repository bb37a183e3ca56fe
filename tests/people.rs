//! Other people's work and the repository's own decisions: a
//! human PR for a family's key or recipe, Klaud's own open PR, retired
//! keys. The real wave and engine, the octocrab forge and the sandbox.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use klaud_claims::Claimant;
use klaud_lifecycle::engine::MemoryJournal;
use klaud_planner::plan::BlockKind;
use klaud_sandbox::stack::MAINTAINER;
use klaud_service::wave_adapters::WaveSummary;

use crate::support::{Harness, REPO, engine_config};

pub(crate) const KEY: &str = "demo-fp4-b200-vllm";
const RECIPE_KEY: &str = "demo-fp4-gb200-dynamo-vllm-disagg";
const MASTER: &str = "configs/nvidia-master.yaml";

pub(crate) fn demo() -> std::path::PathBuf {
    Path::new(crate::support::REPO_ROOT).join("configs/demo")
}

fn instance() -> Claimant {
    Claimant::new(uuid::Uuid::from_u128(0x7065_6f70_6c65))
}

async fn wave(env: &Harness, owner_run: u64) -> WaveSummary {
    wave_with(env, owner_run, &MemoryJournal::new()).await
}

pub(crate) async fn wave_with(
    env: &Harness,
    owner_run: u64,
    journal: &MemoryJournal,
) -> WaveSummary {
    wave_config(env, engine_config(owner_run), journal).await
}

pub(crate) async fn wave_config(
    env: &Harness,
    engine: klaud_lifecycle::engine::EngineConfig,
    journal: &MemoryJournal,
) -> WaveSummary {
    let mut options = env.wave_options(instance(), engine);
    options.lifecycle.plan.min_age = Duration::ZERO;
    options.lifecycle.cooldown = Duration::ZERO;
    env.wave(journal, options).await
}

/// A maintainer pushes `files` to `branch` and opens a PR from it.
pub(crate) async fn human_pull(
    env: &Harness,
    branch: &str,
    files: BTreeMap<String, Option<Vec<u8>>>,
) -> u64 {
    let person = env.person(klaud_sandbox::stack::MAINTAINER_TOKEN);
    // Branched from main, as a contributor's PR is.
    person.create_branch(branch, &env.base).await;
    env.stack
        .state()
        .push_commit(REPO, branch, MAINTAINER, files, "bump by hand")
        .await
        .expect("push");
    person.open_pull(branch, "main", "Bump by hand").await
}

fn master_with(old: &str, new: &str) -> BTreeMap<String, Option<Vec<u8>>> {
    let text = std::fs::read_to_string(demo().join(MASTER)).expect("master");
    assert!(text.contains(old), "{old} not in the demo master");
    BTreeMap::from([(
        MASTER.to_owned(),
        Some(text.replacen(old, new, 1).into_bytes()),
    )])
}

pub(crate) fn family_of<'a>(
    summary: &'a WaveSummary,
    key: &str,
) -> &'a klaud_planner::plan::FamilyPlan {
    summary
        .families
        .iter()
        .find(|f| f.family.ends_with(&format!(":{key}")))
        .unwrap_or_else(|| panic!("{key} not planned"))
}

pub(crate) fn klaud_pulls_of(summary: &WaveSummary, key: &str) -> usize {
    summary
        .candidates
        .iter()
        .filter(|c| c.family.ends_with(&format!(":{key}")))
        .count()
}

/// The sandbox's open pull requests by number, with their head branches.
pub(crate) async fn open_pulls(env: &Harness) -> Vec<(u64, String)> {
    env.forge
        .list_pulls("open")
        .await
        .expect("pulls")
        .into_iter()
        .map(|p| (p.number, p.head_ref))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_human_pr_for_the_key_makes_the_family_a_duplicate() {
    let env = Harness::demo().start().await;
    // The human bumps the key's image (only its entry changes).
    let number = human_pull(
        &env,
        "human/bump-vllm",
        master_with(
            "demo-fp4-b200-vllm:\n  image: vllm/vllm-openai:v0.25.0",
            "demo-fp4-b200-vllm:\n  image: vllm/vllm-openai:v0.26.0",
        ),
    )
    .await;
    let summary = wave(&env, 5101).await;

    let f = family_of(&summary, KEY);
    let b = f.blocked.as_ref().expect("blocked");
    assert_eq!(b.kind, BlockKind::Duplicate, "{b:?}");
    assert_eq!(b.pull, Some(number));
    assert_eq!(b.author.as_deref(), Some(MAINTAINER));
    assert!(
        b.reason.contains(&format!("#{number} by @{MAINTAINER}")),
        "{b:?}"
    );
    assert!(
        summary
            .blocked
            .iter()
            .any(|x| x.family == f.family && x.outcome == "duplicate"),
        "{:?}",
        summary.blocked
    );
    let rendered = klaud_service::wave_adapters::render_summary(&summary);
    assert!(
        rendered.contains(&format!("duplicate {}", f.family)),
        "{rendered}"
    );
    assert_eq!(klaud_pulls_of(&summary, KEY), 0, "{summary:#?}");
    // Other keys of the same master file are not held up by it.
    assert!(
        family_of(&summary, "demo-fp4-b200-sglang")
            .blocked
            .is_none()
    );
    assert!(
        summary.candidates.iter().any(|c| c.pull_request.is_some()),
        "the other stale families still get PRs: {summary:#?}"
    );
    // Nothing is posted on the human's PR, and no Klaud PR names the family.
    assert!(env.bodies(number).await.is_empty());
    let klaud_branch_for_key = summary
        .candidates
        .iter()
        .any(|c| c.family.ends_with(KEY) && c.pull_request.is_some());
    assert!(!klaud_branch_for_key);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_human_pr_for_a_recipe_makes_its_family_a_duplicate() {
    let env = Harness::demo().start().await;
    let recipe = "benchmarks/multi_node/srt-slurm-recipes/vllm/demo-model/disagg-gb200-2p1d.yaml";
    let mut text = std::fs::read(demo().join(recipe)).expect("recipe");
    text.extend_from_slice(b"# tuned by hand\n");
    let number = human_pull(
        &env,
        "human/tune-recipe",
        BTreeMap::from([(recipe.to_owned(), Some(text))]),
    )
    .await;
    let summary = wave(&env, 5102).await;
    let b = family_of(&summary, RECIPE_KEY)
        .blocked
        .clone()
        .expect("blocked");
    assert_eq!(b.kind, BlockKind::Duplicate);
    assert!(b.reason.contains(recipe), "{b:?}");
    assert_eq!(b.pull, Some(number));
    assert_eq!(klaud_pulls_of(&summary, RECIPE_KEY), 0);
    // A key whose entry the PR does not touch is planned as usual.
    assert!(family_of(&summary, KEY).blocked.is_none());
    assert!(env.bodies(number).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_klaud_pr_occupies_its_family_with_a_fresh_store() {
    let env = Harness::demo().start().await;
    let first = wave(&env, 5103).await;
    let opened: Vec<_> = first
        .candidates
        .iter()
        .filter(|c| c.pull_request.is_some())
        .map(|c| c.family.clone())
        .collect();
    assert!(!opened.is_empty(), "{first:#?}");
    let before = open_pulls(&env).await;
    // Another instance (new claimant id would still see the claims; here
    // the claims are released by hand) with an empty journal: the open PRs
    // alone keep the families occupied.
    for (name, _) in env.claims().await {
        env.person(klaud_sandbox::stack::BOT_TOKEN)
            .delete_ref(&name)
            .await;
    }
    let second = wave(&env, 5104).await;
    for family in &opened {
        let f = second
            .families
            .iter()
            .find(|f| &f.family == family)
            .expect("planned");
        let b = f.blocked.as_ref().expect("occupied");
        assert_eq!(b.kind, BlockKind::Occupied, "{b:?}");
        assert!(b.reason.contains("still open"), "{b:?}");
    }
    assert_eq!(open_pulls(&env).await.len(), before.len(), "no second PR");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_helpers_branch_spelling_occupies_the_family() {
    let env = Harness::demo().start().await;
    let probe = wave(&env, 5105).await;
    let f = family_of(&probe, KEY);
    let c = f.candidate.as_ref().expect("stale");
    let id = klaud_planner::identity::candidate_id(&f.id, &c.image.normalized());
    // Start over on a fresh sandbox where the old helper has a PR open.
    let env = Harness::demo().start().await;
    let branch = format!("klaude/auto-{id}");
    human_pull(
        &env,
        &branch,
        master_with(
            "image: vllm/vllm-openai:v0.25.0",
            &format!("image: {}", c.image),
        ),
    )
    .await;
    let summary = wave(&env, 5106).await;
    let b = family_of(&summary, KEY).blocked.clone().expect("occupied");
    assert_eq!(b.kind, BlockKind::Occupied, "{b:?}");
    assert_eq!(klaud_pulls_of(&summary, KEY), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retired_key_is_never_bumped_and_the_plan_says_why() {
    let seed = tempfile::tempdir().expect("tempdir");
    crate::support::copy_tree(&demo(), seed.path());
    // Archived with every scenario it runs, as InferenceX archives a key
    // it retires (an archive of only some scenarios retires nothing).
    let master =
        std::fs::read_to_string(seed.path().join("configs/nvidia-master.yaml")).expect("master");
    let start = master.find("demo-fp4-b200-vllm:").expect("entry");
    let end = master[start + 1..]
        .find("\n\n")
        .map_or(master.len(), |i| start + 1 + i);
    let archive = format!("# Archived by hand.\n\n{}\n", &master[start..end]);
    std::fs::create_dir_all(seed.path().join("configs/deprecated")).expect("mkdir");
    std::fs::write(
        seed.path()
            .join("configs/deprecated/nvidia-old-master.yaml"),
        archive,
    )
    .expect("write");
    std::fs::write(
        seed.path().join("MODELS.md"),
        "| Model | Deprecated | Remains |\n|---|---|---|\n\
         | Demo H200 (`demo-h200`) | Deprecated since 2026-01-02 ([#7](https://example.invalid/7)) | Nothing |\n",
    )
    .expect("write");
    let env = Harness::demo().seed_dir(seed.path()).start().await;
    let summary = wave(&env, 5107).await;
    let b = family_of(&summary, KEY).blocked.clone().expect("retired");
    assert_eq!(b.kind, BlockKind::Retired);
    assert!(
        b.reason
            .contains("archived in configs/deprecated/nvidia-old-master.yaml"),
        "{b:?}"
    );
    assert_eq!(klaud_pulls_of(&summary, KEY), 0);
    assert!(
        summary
            .blocked
            .iter()
            .any(|x| x.outcome == "retired" && x.family.ends_with(KEY))
    );
    // The other families still move.
    assert!(summary.candidates.iter().any(|c| c.pull_request.is_some()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_maintainer_closing_the_pr_ends_it_handoff_naming_who_without_touching_it_again() {
    let env = Harness::demo().start().await;
    let journal = MemoryJournal::new();
    let first = wave_with(&env, 5108, &journal).await;
    let c = first
        .candidates
        .iter()
        .find(|c| c.pull_request.is_some() && !c.runs.is_empty())
        .expect("a candidate with a PR and a smoke run")
        .clone();
    let number: u64 = c
        .pull_request
        .as_deref()
        .and_then(|u| u.rsplit('/').next())
        .and_then(|n| n.parse().ok())
        .expect("pull number");
    env.person(klaud_sandbox::stack::MAINTAINER_TOKEN)
        .close_pull(number)
        .await;
    let comments_before = env.bodies(number).await.len();
    let log_before = env.stack.state().request_log().await.len();
    let closed = env.pull(number).await;
    let family_id = c.candidate.family();
    let runs_before = crate::support::family_runs(&env, family_id.as_str()).await;

    let second = wave_with(&env, 5108, &journal).await;
    let ended = second
        .candidates
        .iter()
        .find(|x| x.candidate == c.candidate)
        .expect("still reported");
    assert_eq!(ended.outcome.as_deref(), Some("handoff"), "{ended:#?}");
    assert!(
        ended
            .message
            .as_deref()
            .is_some_and(|m| m.contains(&format!("closed by @{MAINTAINER}"))),
        "{ended:#?}"
    );
    // Exactly one new comment: the receipt, naming who closed it.
    let bodies = env.bodies(number).await;
    assert_eq!(bodies.len(), comments_before + 1, "{bodies:#?}");
    let receipt = bodies.last().expect("receipt");
    assert!(receipt.starts_with("<!-- klaud-outcome:"), "{receipt}");
    // (The rendered receipt defuses the mention; the name is there.)
    assert!(
        receipt.contains("was closed by") && receipt.contains(MAINTAINER),
        "{receipt}"
    );
    // The wave steps the other candidates too: only the writes naming this
    // one's things are its own. Besides the claim release, only the
    // receipt and its smoke's cancel: no label, report, changelog commit or
    // dispatch.
    let comment_ids = env.stack.state().comment_ids(REPO, number).await;
    let run_ids: Vec<u64> = ended.runs.iter().map(|r| r.id).collect();
    let own = crate::support::Own {
        pull: number,
        comments: &comment_ids,
        runs: &run_ids,
        family: family_id.as_str(),
        branch: &closed.head_ref,
    };
    let writes: Vec<String> = crate::support::writes_since(&env, log_before)
        .await
        .into_iter()
        .filter(|w| own.named_by(w))
        .collect();
    let (receipts, cancels) = own.receipt_cancels_and_claim_only(&writes);
    assert_eq!(receipts, 1, "{writes:#?}");
    assert_eq!(cancels, 1, "its smoke run is cancelled: {writes:#?}");
    assert_eq!(
        crate::support::family_runs(&env, family_id.as_str()).await,
        runs_before
    );
    assert_eq!(env.pull(number).await.head_sha, closed.head_sha);
    // Its smoke run was cancelled and the family's claim released.
    // (GitHub cancels asynchronously: the run ends a moment after the 202.)
    for run in &ended.runs {
        let live = crate::support::run_once_completed(&env.forge, run.id).await;
        assert_eq!(
            live.conclusion.as_ref().map(|c| c.as_str()),
            Some("cancelled"),
            "{live:?}"
        );
    }
    assert!(
        !env.claims()
            .await
            .iter()
            .any(|(name, _)| name.ends_with(family_id.as_str())),
        "claim released"
    );
    assert!(!env.pull(number).await.state.is_open());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_human_pr_overlapping_an_open_klaud_pr_is_left_or_handed_off_as_configured() {
    use klaud_lifecycle::engine::HumanOverlap;
    let env = Harness::demo().start().await;
    let journal = MemoryJournal::new();
    let first = wave_with(&env, 5109, &journal).await;
    let ours = first
        .candidates
        .iter()
        .find(|c| c.family.ends_with(&format!(":{KEY}")) && c.pull_request.is_some())
        .expect("Klaud's PR for the key")
        .clone();
    let human = human_pull(
        &env,
        "human/bump-vllm-too",
        master_with(
            "demo-fp4-b200-vllm:\n  image: vllm/vllm-openai:v0.25.0",
            "demo-fp4-b200-vllm:\n  image: vllm/vllm-openai:v0.26.1",
        ),
    )
    .await;
    let number: u64 = ours
        .pull_request
        .as_deref()
        .and_then(|u| u.rsplit('/').next())
        .and_then(|n| n.parse().ok())
        .expect("number");

    // Default: left as is, with a note.
    let second = wave_with(&env, 5109, &journal).await;
    let c = second
        .candidates
        .iter()
        .find(|c| c.candidate == ours.candidate)
        .expect("still ours");
    assert!(c.outcome.is_none(), "{c:#?}");
    let status = c.status.clone().unwrap_or_default();
    assert!(
        status.contains("left as is") && status.contains(&format!("#{human}")),
        "{status}"
    );
    assert!(env.pull(number).await.state.is_open());

    // handoff: Klaud ends its own candidate and closes its own PR.
    let mut engine = engine_config(5109);
    engine.on_human_overlap = HumanOverlap::Handoff;
    let third = wave_config(&env, engine, &journal).await;
    let c = third
        .candidates
        .iter()
        .find(|c| c.candidate == ours.candidate)
        .expect("reported");
    assert_eq!(c.outcome.as_deref(), Some("handoff"), "{c:#?}");
    assert!(!env.pull(number).await.state.is_open());
    assert!(env.pull(human).await.state.is_open());
    assert!(env.bodies(human).await.is_empty());
}
