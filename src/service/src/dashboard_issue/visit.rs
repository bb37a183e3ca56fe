//! One visit of the dashboard issue per pass, around the pass's wave: the
//! issue is read and steered before the plan (and opened before a wave's
//! first PR, whose footer links it), and published from the wave's end.
//! Both deployments (`klaud serve`'s passes and a one-shot `klaud wave`)
//! go through it, so neither can read the issue without publishing it or
//! publish from steering it did not read.

use std::time::Duration;

use klaud_claims::Clock;
use klaud_github::{Github, IssueInfo};
use klaud_lifecycle::engine::Journal;
use klaud_lifecycle::wave::WaveSummary;

use super::{Publish, Steering, log_error, open_before_wave, publish, steer_or_hold};

/// How a pass visits the issue.
#[derive(Debug, Clone)]
pub struct Visit {
    /// The base branch (for links to the master configs).
    pub base_branch: String,
    /// How long a finished family is left alone.
    pub cooldown: Duration,
    /// The web dashboard's address, when one runs.
    pub web_dashboard: Option<String>,
    /// Whether the pass runs a wave, which may open the issue; a
    /// reconcile pass plans nothing and only keeps an existing issue.
    pub wave: bool,
    /// The playbook's path in the repository (empty: none), which the
    /// sick-nodes section triages failed jobs with.
    pub playbook: String,
    /// How the base's checkout is read, for the families' scopes there.
    pub repo: klaud_planner::repo::RepoOptions,
    /// The store whose blob cache that checkout reads through, if any.
    pub cache: Option<klaud_store::Store>,
}

// Generic over the wave, so it cannot be boxed like the other async
// entry points other crates call (src/README.md, "Build cost"): its own
// body is a handful of awaits of boxed futures.
/// Runs `wave` with the issue's steering inside one visit, and returns
/// what it answered with the issue as published (`None`: there is none,
/// or it could not be written) and the sick nodes read after the wave
/// (`None`: Klaud's runs could not be read; the issue keeps its section). The issue's errors are logged, never
/// fatal: the dashboard must not stop a wave; one that cannot be read
/// holds the wave's planning (see [`Steering::hold`]).
pub async fn around_wave<E>(
    forge: &Github,
    journal: &dyn Journal,
    clock: &dyn Clock,
    visit: Visit,
    wave: impl AsyncFnOnce(&Steering) -> Result<WaveSummary, E>,
) -> (
    Result<WaveSummary, E>,
    Option<IssueInfo>,
    Option<crate::sick_nodes::SickNodes>,
) {
    let mut steering = steer_or_hold(forge, journal, clock).await;
    if visit.wave
        && let Err(e) =
            open_before_wave(forge, journal, clock, &mut steering, &visit.base_branch).await
    {
        log_error("opening", &e);
    }
    let result = wave(&steering).await;
    let sources = crate::sick_nodes::Sources {
        base_branch: &visit.base_branch,
        playbook: &visit.playbook,
        repo: &visit.repo,
        cache: visit.cache.as_ref(),
    };
    steering.sick_nodes = match crate::sick_nodes::gather(forge, journal, clock.now(), sources)
        .await
    {
        Ok(nodes) => Some(nodes),
        Err(e) => {
            tracing::warn!(error = %e, "sick nodes: Klaud's failed runs could not be read; the next pass tries again");
            None
        }
    };
    let options = Publish {
        base_branch: visit.base_branch,
        summary: result.as_ref().ok(),
        cooldown: visit.cooldown,
        web_dashboard: visit.web_dashboard,
        may_open: visit.wave,
    };
    let issue = match publish(forge, journal, clock, &steering, options).await {
        Ok(published) => published.issue().cloned(),
        Err(e) => {
            log_error("publishing", &e);
            None
        }
    };
    let nodes = steering.sick_nodes.take();
    (result, issue, nodes)
}
