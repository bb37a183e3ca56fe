//! Actions mode (configs/klaud-wave.workflow.yml): light passes that wait
//! for no run (`klaud wave --wait 0s`), each a new process (a fresh GitHub
//! client) with the store kept between runs (the journal). Measures how
//! many passes carry the demo's candidates to their outcomes and what a
//! pass costs when nothing changed.

use std::collections::BTreeMap;
use std::time::Duration;

use klaud::cli::demo::RequestFigures;
use klaud_lifecycle::engine::MemoryJournal;

use crate::support::{Harness, engine_config, forge_of, owner};

/// Runs that take a while: a pass that does not wait cannot carry a
/// candidate through on its own, as with real GPU runs.
const SLOW_RUNS: &str = r#"
[families."*"]
smoke = [{ delay = 1, outcome = "success" }]
sweep = [{ delay = 1, outcome = "success" }]

[families.demo-fp4-b200-vllm]
smoke = [{ delay = 1, outcome = "failure", partial = true }]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn light_passes_with_a_kept_store_carry_every_candidate_and_an_idle_pass_writes_nothing() {
    let env = Harness::demo().script(SLOW_RUNS).start().await;
    // The store kept between runs (actions/cache).
    let journal = MemoryJournal::new();
    let mut outcomes: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut passes = 0u32;
    let mut busy = Duration::ZERO;
    let first = env.stack.state().request_log().await.len();
    for pass in 0..200u64 {
        // Every pass is a new Actions job: a new process, a new client.
        let forge = forge_of(&env.stack).await;
        let options = env.wave_options(owner(), engine_config(9_000 + pass));
        let started = std::time::Instant::now();
        let summary = klaud_service::run_wave(
            &forge,
            &journal,
            &env.registry(),
            &env.baseline,
            None,
            options,
        )
        .await
        .expect("pass");
        busy += started.elapsed();
        passes += 1;
        for c in &summary.candidates {
            outcomes.insert(c.candidate.to_string(), c.outcome.clone());
        }
        if !outcomes.is_empty() && outcomes.values().all(Option::is_some) {
            break;
        }
        // The next pass: the schedule, or a smoke or sweep that ended.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        !outcomes.is_empty() && outcomes.values().all(Option::is_some),
        "unfinished after {passes} passes: {outcomes:?}"
    );
    assert!(passes >= 3, "the runs outlast a pass: {passes} passes");
    let work = RequestFigures::of(&env.stack.state().request_log().await[first..]);

    // Nothing changed since: a pass reads what the last one wrote, the next
    // one is what an idle scheduled pass costs.
    let idle_pass = || async {
        let forge = forge_of(&env.stack).await;
        let from = env.stack.state().request_log().await.len();
        klaud_service::run_wave(
            &forge,
            &journal,
            &env.registry(),
            &env.baseline,
            None,
            env.wave_options(owner(), engine_config(9_999)),
        )
        .await
        .expect("idle pass");
        RequestFigures::of(&env.stack.state().request_log().await[from..])
    };
    idle_pass().await;
    let idle = idle_pass().await;
    assert_eq!(idle.writes, 0, "an idle pass writes nothing: {idle:?}");
    assert!(idle.total > 0, "an idle pass still looks");
    let finished: BTreeMap<&str, usize> =
        outcomes
            .values()
            .flatten()
            .fold(BTreeMap::new(), |mut m, o| {
                *m.entry(o.as_str()).or_default() += 1;
                m
            });
    eprintln!(
        "FIGURES actions mode: {} candidates ({finished:?}) finished in {passes} light passes \
         ({} ms of Klaud's own time in all, {} GitHub requests, {} charged, {} writes); \
         an idle pass (new process, kept store): {} requests, {} charged, {} writes",
        outcomes.len(),
        busy.as_millis(),
        work.total,
        work.charged,
        work.writes,
        idle.total,
        idle.charged,
        idle.writes,
    );
}
