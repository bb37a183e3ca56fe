//! AgentX families compared as the incumbent compares them: the frozen
//! baseline names the dataset its producer run's `bmk_agentic_*`
//! artifacts name, the candidate's smoke is set beside it only on the same
//! dataset, and a different or unknown dataset is N/A saying why. Through
//! the sandbox: the results API names producer runs that the sandbox
//! GitHub serves, read by the octocrab forge over loopback.

use klaud_lifecycle::artifacts::ArtifactLimits;
use klaud_lifecycle::baseline::FamilyKey;
use klaud_lifecycle::dataset::{DatasetFinding, attach_datasets};
use klaud_lifecycle::engine::{CandidateRecord, MemoryJournal, Target};
use klaud_lifecycle::model::Outcome;
use klaud_sandbox::ci::{Sweep, producer};
use klaud_service::GithubLifecycle;

use crate::support::{Harness, REPO};

const KEY: &str = "demo-fp4-b300-vllm-agentic";

const SCRIPT: &str = r#"
[families."*"]
smoke = ["success"]
sweep = ["success"]
"#;

/// Publishes one more run of the family's whole line today, newer than
/// the seeded one, so the baseline is frozen from it; returns its id.
fn publish_today(env: &Harness) -> u64 {
    env.stack.published.publish(Sweep {
        key: KEY.into(),
        ..Sweep::default()
    })
}

async fn run(env: &Harness) -> (Target, CandidateRecord, String, String) {
    let target = env.target(KEY).await;
    let journal = MemoryJournal::new();
    let rec = env.finish(&journal, &target).await;
    let pull = env.pull(rec.pull.expect("a pull request")).await;
    let bodies = env.bodies(pull.number).await;
    let smoke = bodies
        .iter()
        .find(|b| b.contains("Initial smoke"))
        .cloned()
        .unwrap_or_else(|| panic!("no smoke report in {bodies:#?}"));
    (target, rec, pull.body.unwrap_or_default(), smoke)
}

fn findings(rec: &CandidateRecord) -> Vec<(u64, DatasetFinding)> {
    rec.frozen
        .as_ref()
        .expect("frozen")
        .baseline
        .agentx_datasets
        .iter()
        .map(|d| (d.run_id, d.finding.clone()))
        .collect()
}

/// The rows of the AgentX table of the English half of a report.
fn agentx_rows(report: &str) -> Vec<&str> {
    let english = report.split("<summary>中文</summary>").next().unwrap_or("");
    english
        .split("Scenario: AgentX")
        .skip(1)
        .flat_map(|t| t.lines().skip(4).take_while(|l| l.starts_with("| ")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agentx_family_is_compared_on_the_dataset_its_producer_run_names() {
    let env = Harness::demo().script(SCRIPT).start().await;
    let producer_run = publish_today(&env);
    let (_, rec, body, smoke) = run(&env).await;
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Validated, "{ending:?}");
    // The frozen baseline keeps the producer run's dataset and names it,
    // in both languages.
    let found = findings(&rec);
    let [(run, DatasetFinding::Named { dataset })] = found.as_slice() else {
        panic!("one named dataset: {found:?}");
    };
    assert_eq!(*run, producer_run);
    assert_eq!(dataset.name, producer::SANDBOX_DATASET);
    assert!(
        body.contains(&format!(
            "by run `{producer_run}`, dataset `{}`",
            producer::SANDBOX_DATASET
        )),
        "{body}"
    );
    assert!(
        body.contains(&format!(
            "运行 `{producer_run}`，数据集 `{}`",
            producer::SANDBOX_DATASET
        )),
        "{body}"
    );
    // Same dataset: every AgentX row of the smoke carries its deltas
    // against the baseline, and no N/A says otherwise.
    let rows = agentx_rows(&smoke);
    assert!(!rows.is_empty(), "{smoke}");
    for row in &rows {
        assert_eq!(row.matches("%)").count(), 3, "{row}\n{smoke}");
    }
    assert!(!smoke.contains("AgentX dataset"), "{smoke}");
    assert!(!smoke.contains("AgentX 数据集"), "{smoke}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agentx_baseline_of_another_dataset_is_na_naming_both() {
    const OTHER: &str = "semianalysis_cc_traces_weka_062126";
    let env = Harness::demo().script(SCRIPT).start().await;
    let producer_run = publish_today(&env);
    producer::set_dataset(env.stack.state(), REPO, producer_run, OTHER).await;
    let (_, rec, body, smoke) = run(&env).await;
    assert!(
        body.contains(&format!("by run `{producer_run}`, dataset `{OTHER}`")),
        "{body}"
    );
    let rows = agentx_rows(&smoke);
    assert!(!rows.is_empty(), "{smoke}");
    for row in &rows {
        assert!(!row.contains("%)"), "no delta across datasets: {row}");
    }
    let why = format!(
        "different AgentX datasets: the baseline's {OTHER}, this run's {}",
        producer::SANDBOX_DATASET
    );
    assert!(smoke.contains(&why.replace('_', "\\_")), "{smoke}");
    assert!(
        smoke.contains(
            &format!(
                "AgentX 数据集不同：基线为 {OTHER}，本次运行为 {}",
                producer::SANDBOX_DATASET
            )
            .replace('_', "\\_")
        ),
        "{smoke}"
    );
    // A dataset never makes the candidate fail: only the comparison is N/A.
    let ending = rec.ending.as_ref().expect("ending");
    assert_eq!(ending.outcome, Outcome::Validated, "{ending:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agentx_baseline_whose_artifacts_expired_is_na_saying_so() {
    let env = Harness::demo().script(SCRIPT).start().await;
    let producer_run = publish_today(&env);
    producer::expire(env.stack.state(), REPO, producer_run).await;
    let (_, rec, body, smoke) = run(&env).await;
    let why = format!("the AgentX artifacts of producer run {producer_run} have expired");
    assert_eq!(
        findings(&rec),
        vec![(
            producer_run,
            DatasetFinding::Unknown {
                reason: why.clone()
            }
        )]
    );
    assert!(body.contains(&format!("dataset unknown ({why})")), "{body}");
    assert!(
        body.contains(&format!(
            "数据集未知（生产运行 {producer_run} 的 AgentX 产物已过期）"
        )),
        "{body}"
    );
    assert!(
        smoke.contains(&format!("AgentX dataset unknown: {why}")),
        "{smoke}"
    );
    for row in agentx_rows(&smoke) {
        assert!(!row.contains("%)"), "no delta on an unknown dataset: {row}");
    }
    // Expired artifacts are never downloaded (GitHub answers them 410).
    let log = env.stack.state().request_log().await;
    assert!(
        !log.iter().any(|e| e.status == 410),
        "{:?}",
        log.iter().filter(|e| e.status == 410).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agentx_baseline_whose_producer_run_is_gone_is_na_saying_so() {
    let env = Harness::demo().script(SCRIPT).start().await;
    let producer_run = publish_today(&env);
    producer::remove(env.stack.state(), REPO, producer_run).await;
    let (_, rec, _, smoke) = run(&env).await;
    let why = format!("producer run {producer_run} is gone");
    assert_eq!(
        findings(&rec),
        vec![(
            producer_run,
            DatasetFinding::Unknown {
                reason: why.clone()
            }
        )]
    );
    assert!(
        smoke.contains(&format!("AgentX dataset unknown: {why}")),
        "{smoke}"
    );
    assert!(
        smoke.contains(&format!(
            "AgentX 数据集未知：生产运行 {producer_run} 已不存在"
        )),
        "{smoke}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_runs_artifacts_are_read_once_and_kept() {
    let env = Harness::demo().script(SCRIPT).start().await;
    let producer_run = publish_today(&env);
    let target = env.target(KEY).await;
    let journal = MemoryJournal::new();
    let rec = env.finish(&journal, &target).await;
    let frozen = rec.frozen.expect("frozen").baseline;
    let listed = format!("/actions/runs/{producer_run}/artifacts");
    let reads = |log: &[klaud_sandbox::github::LogEntry]| {
        log.iter().filter(|e| e.path.contains(&listed)).count()
    };
    let before = env.stack.state().request_log().await;
    assert_eq!(reads(&before), 1, "read once at freeze time");
    // Freezing again (another candidate of a family the run published)
    // asks the journal, not GitHub.
    let lifecycle = GithubLifecycle::new(&env.forge);
    let family = env.repository.family(&target.family).expect("family");
    let mut again = frozen.clone();
    again.agentx_datasets.clear();
    attach_datasets(
        &lifecycle,
        &journal,
        &ArtifactLimits::default(),
        &FamilyKey::of(family),
        &mut again,
    )
    .await;
    assert_eq!(again.agentx_datasets, frozen.agentx_datasets);
    let after = env.stack.state().request_log().await;
    assert_eq!(reads(&after), 1, "kept, not read again");
}
