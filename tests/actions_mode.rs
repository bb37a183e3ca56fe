//! Actions mode (configs/klaud-wave.workflow.yml): light passes that wait
//! for no run (`klaud wave --wait 0s`), each a new process (a fresh GitHub
//! client) with the store kept between runs (the journal). Measures how
//! many passes carry the demo's candidates to their outcomes and what a
//! pass costs when nothing changed, with and without the GitHub answers
//! `klaud wave` keeps in the store for conditional reads.

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
    // The store kept between runs (actions/cache): the journal, and the
    // GitHub answers `klaud wave` keeps for conditional reads.
    let journal = MemoryJournal::new();
    let store = klaud_store::Store::temporary().expect("store");
    let mut outcomes: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut passes = 0u32;
    let mut busy = Duration::ZERO;
    let first = env.stack.state().request_log().await.len();
    for pass in 0..200u64 {
        // Every pass is a new Actions job: a new process, a new client,
        // given what the last pass kept (as `klaud wave` does).
        let forge = forge_of(&env.stack).await;
        klaud_service::restore_conditional_pages(&forge, &store);
        let mut options = env.wave_options(owner(), engine_config(9_000 + pass));
        options.cache = Some(&store);
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
        klaud_service::save_conditional_pages(&forge, &store);
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
    let idle_pass = |kept: bool| {
        let (env, journal, store) = (&env, &journal, &store);
        async move {
            let forge = forge_of(&env.stack).await;
            if kept {
                klaud_service::restore_conditional_pages(&forge, store);
            }
            let from = env.stack.state().request_log().await.len();
            klaud_service::run_wave(&forge, journal, &env.registry(), &env.baseline, None, {
                let mut options = env.wave_options(owner(), engine_config(9_999));
                // `klaud wave` keeps the base's blobs in its store too.
                options.cache = kept.then_some(store);
                options
            })
            .await
            .expect("idle pass");
            if kept {
                klaud_service::save_conditional_pages(&forge, store);
            }
            let log = env.stack.state().request_log().await;
            if std::env::var_os("KLAUD_FIGURES_DETAIL").is_some() {
                for e in &log[from..] {
                    eprintln!("REQ kept={kept} {} {} {}", e.method, e.path, e.status);
                }
            }
            RequestFigures::of(&log[from..])
        }
    };
    idle_pass(true).await;
    let idle = idle_pass(true).await;
    assert_eq!(idle.writes, 0, "an idle pass writes nothing: {idle:?}");
    assert!(idle.total > 0, "an idle pass still looks");
    // Without the kept answers every unchanged read is a charged 200.
    let cold = idle_pass(false).await;
    assert!(
        idle.charged < cold.charged,
        "the kept answers make unchanged reads free: kept {idle:?}, not kept {cold:?}"
    );
    // What is left is the base's tree (new to this process's caches).
    assert!(
        idle.charged <= 2,
        "an idle pass with the kept store: {idle:?}"
    );
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
         an idle pass (new process, kept store): {} requests, {} charged, {} writes; \
         the same without the kept GitHub answers: {} requests, {} charged",
        outcomes.len(),
        busy.as_millis(),
        work.total,
        work.charged,
        work.writes,
        idle.total,
        idle.charged,
        idle.writes,
        cold.total,
        cold.charged,
    );
}
