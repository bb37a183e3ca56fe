//! Klaud's own open PRs the journal has no record of (the store was
//! evicted or is new): those carrying their receipt get their finished
//! record back from GitHub, so a validated PR is kept mergeable, its reuse
//! line kept standing, and commands on it answered as with the store kept.

use std::collections::BTreeSet;

use klaud_planner::plan::BlockKind;

use super::{Pass, Wave};
use crate::engine::Engine;

/// Lost PRs one pass rebuilds at most: each costs a few reads once (the
/// rebuilt record is saved), so a large backlog is spread over passes.
const MAX_REBUILT_PER_PASS: usize = 20;

impl Wave<'_> {
    /// Phase 5b: rebuilds the finished records of Klaud's open PRs that
    /// the open-PR listing the plan already read names and no record
    /// knows. A record the journal keeps costs nothing here.
    pub async fn rebuild_lost_records(&self, engine: &Engine<'_>, pass: &mut Pass<'_>) {
        let known: BTreeSet<u64> = pass
            .done
            .iter()
            .chain(&pass.unfinished)
            .chain(pass.slots.iter().map(|s| &s.rec))
            .filter_map(|r| r.pull.map(u64::from))
            .collect();
        let lost: Vec<u64> = pass
            .open_pulls
            .blocks
            .values()
            .filter(|b| b.kind == BlockKind::Occupied)
            .filter_map(|b| b.pull)
            .filter(|n| !known.contains(n))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .take(MAX_REBUILT_PER_PASS)
            .collect();
        for number in lost {
            if self.stopping() {
                break;
            }
            let pull = match self.ports.forge.get_pull(number.into()).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(pull = number, error = %e, "lost PR not read; the next pass retries");
                    continue;
                }
            };
            // A candidate this pass already works on is resumed, not
            // rebuilt as finished.
            let working = pass
                .slots
                .iter()
                .map(|s| &s.rec)
                .chain(&pass.unfinished)
                .any(|r| r.branch == pull.head_ref);
            if working {
                continue;
            }
            match engine.rebuild_finished(&pull).await {
                Ok(Some(rec)) => {
                    tracing::info!(candidate = %rec.candidate, pull = number, "finished record rebuilt from GitHub");
                    pass.done.push(rec);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(pull = number, error = %e, "lost PR not rebuilt; the next pass retries")
                }
            }
        }
    }
}
