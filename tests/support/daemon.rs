//! The daemon (`klaud serve`'s loop) in process over a sandbox stack, for
//! the daemon and first-contact tests.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use klaud_claims::Claimant;
use klaud_lifecycle::engine::{EngineConfig, Journal};
use klaud_sandbox::stack::SandboxStack;
use klaud_service::daemon::schedule::WaveSchedule;
use klaud_service::daemon::serve::{Daemon, RepoService, ServeSettings};
use klaud_service::dashboard::{SnapshotFeed, StatusSnapshot};

/// Daemon settings for `claimant` with `engine`: a schedule that never
/// fires within a test, reconcile passes every 200 ms, `max` candidates
/// at once, and no cooldown.
pub fn serve_settings(
    claimant: Claimant,
    engine: EngineConfig,
    max: usize,
    wave_on_start: bool,
) -> ServeSettings {
    ServeSettings {
        claimant,
        engine,
        // Never fires on its own within a test.
        schedule: WaveSchedule::parse("0 0 1 1 *", "UTC").expect("schedule"),
        wave_on_start,
        reconcile_interval: Duration::from_millis(200),
        concurrency: max,
        max_candidates: max,
        min_age: klaud_planner::plan::PlanOptions::new(chrono::Utc::now()).min_age,
        cooldown: Duration::ZERO,
        rules: Vec::new(),
        release_rules: Vec::new(),
        upstream: BTreeMap::new(),
        max_timed_tags: klaud_planner::plan::DEFAULT_MAX_TIMED_TAGS,
        poll: Duration::from_millis(50),
        pass_wait: Duration::ZERO,
        ignore: Vec::new(),
    }
}

/// A daemon over the stack's repository with `journal`, and its snapshot
/// feed.
pub async fn daemon(
    stack: &SandboxStack,
    settings: ServeSettings,
    journal: Arc<dyn Journal>,
) -> (Daemon, SnapshotFeed) {
    let forge = super::forge_of(stack).await;
    let registry = super::registry_at(&stack.registry_url);
    let baseline = klaud_service::HttpBaselineSource::new(&stack.baseline_url).expect("baseline");
    let (tx, feed) = Daemon::feed();
    let daemon = Daemon::new(
        vec![RepoService {
            forge,
            journal,
            store: None,
        }],
        registry,
        Box::new(baseline),
        None,
        settings,
        tx,
    )
    .expect("daemon");
    (daemon, feed)
}

/// Waits (at most three minutes) until `done` holds for the latest
/// snapshot.
pub async fn wait_for(feed: &mut SnapshotFeed, what: &str, done: impl Fn(&StatusSnapshot) -> bool) {
    let waited = tokio::time::timeout(Duration::from_secs(180), async {
        loop {
            if done(&feed.borrow_and_update()) {
                return;
            }
            if feed.changed().await.is_err() {
                panic!("the daemon stopped before {what}");
            }
        }
    })
    .await;
    assert!(waited.is_ok(), "timed out waiting for {what}");
}
