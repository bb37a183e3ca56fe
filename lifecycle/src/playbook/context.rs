//! What a failed job's triage knows of the job from its family: the
//! framework, the hardware and the engine version a playbook entry may be
//! scoped to. One rule for the engine's own triage of its runs and for the
//! sick-nodes table's triage of every instance's runs, so an entry scoped
//! to a framework matches the same jobs in both.

use klaud_planner::image::ImageRef;
use klaud_planner::repo::Family;

use super::model::JobContext;

/// The context of a job of `family`'s candidate for `image` (the image the
/// candidate tests; `None` when not known, so no entry scoped to an engine
/// version holds), run on `runner_name`.
pub fn family_context(
    family: Option<&Family>,
    image: Option<&str>,
    runner_name: Option<&str>,
) -> JobContext {
    // The master's runner names the hardware first (`b200-dgx`,
    // `cluster:mi355x-amds`), as InferenceX's runner labels do.
    let hardware = family.map(|f| {
        let runner = f
            .entry
            .runner
            .strip_prefix("cluster:")
            .unwrap_or(&f.entry.runner);
        runner
            .split('-')
            .next()
            .unwrap_or(runner)
            .to_ascii_lowercase()
    });
    let engine_version = image
        .and_then(|i| ImageRef::parse(i).ok())
        .and_then(|i| i.tag().map(str::to_owned));
    JobContext {
        framework: family.map(|f| f.entry.framework.to_ascii_lowercase()),
        engine_version,
        hardware,
        runner_name: runner_name.map(str::to_owned),
        family: family.map(|f| f.family.clone()),
    }
}
