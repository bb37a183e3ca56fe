//! Klaud's own PRs with recent activity, listed at most once a pass: the
//! rebuild of lost records and the commands phase both ask for them, and
//! a second identical listing in one pass would only cost a request.

use std::collections::BTreeSet;

use chrono::{DurationRound as _, TimeDelta};
use klaud_claims::PullNumber;

use super::{FINISHED_COMMANDS_LOOKBACK, Pass, Wave};

impl Wave<'_> {
    /// Klaud's PRs (any state) with activity within
    /// [`FINISHED_COMMANDS_LOOKBACK`], or the listing's error. A listing
    /// that succeeded is kept for the rest of the pass; a failed one is
    /// asked again by the next phase that needs it.
    pub(super) async fn recently_active_pulls(
        &self,
        pass: &mut Pass<'_>,
    ) -> Result<BTreeSet<PullNumber>, crate::engine::ForgeError> {
        if let Some(active) = &pass.recently_active {
            return Ok(active.clone());
        }
        // Whole days, so the passes of one day ask the same question and
        // an idle one is answered by a free 304.
        let since = (pass.now - FINISHED_COMMANDS_LOOKBACK)
            .duration_trunc(TimeDelta::days(1))
            .unwrap_or(pass.now - FINISHED_COMMANDS_LOOKBACK);
        let active: BTreeSet<PullNumber> = self
            .ports
            .forge
            .own_pulls_active_since(since)
            .await?
            .into_iter()
            .collect();
        pass.recently_active = Some(active.clone());
        Ok(active)
    }
}
