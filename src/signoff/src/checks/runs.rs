//! The checks of the runs: a passing sweep at the head and its eval results
//! against their bars.

use super::*;

impl Context<'_> {
    pub(super) fn passing_sweep(&self, n: u32, kind: CheckKind) -> CheckResult {
        let Some(sweep) = &self.sweep else {
            let evidence = self
                .evidence
                .pr_commits
                .iter()
                .map(|sha| {
                    let jobs: Vec<String> = self
                        .evidence
                        .check_runs
                        .iter()
                        .filter(|r| {
                            &r.sha == sha && (is_eval_job(&r.name) || is_benchmark_job(&r.name))
                        })
                        .map(|r| {
                            format!(
                                "{} {}",
                                r.name,
                                r.conclusion.as_deref().unwrap_or(&r.status)
                            )
                        })
                        .collect();
                    format!(
                        "{}: {}",
                        short(sha),
                        if jobs.is_empty() {
                            "no sweep or eval check runs".to_owned()
                        } else {
                            jobs.join(", ")
                        }
                    )
                })
                .collect();
            return with(
                result(
                    n,
                    kind,
                    Outcome::Fail,
                    "No passing sweep/eval was found on any commit in this PR. Run (or re-anchor with /reuse-sweep-run) a passing full sweep on a commit currently in this PR.".into(),
                ),
                evidence,
            );
        };
        let groups: BTreeSet<&str> = sweep
            .benchmark_jobs
            .iter()
            .filter_map(|j| j.split(" /").next())
            .collect();
        let eval_groups: BTreeSet<&str> = sweep
            .eval_jobs
            .iter()
            .filter_map(|j| j.split(" /").next())
            .collect();
        let head = if sweep.sha == self.evidence.head_sha {
            format!("head {} (the assessed commit)", short(&sweep.sha))
        } else {
            format!("commit {} (still in this PR)", short(&sweep.sha))
        };
        let reason = format!(
            "{head} carries run {} with {} {} / and {} {} / check-runs success (executed, not skipped).",
            sweep.run_id,
            sweep.benchmark_jobs.len(),
            groups.into_iter().collect::<Vec<_>>().join(" / and "),
            sweep.eval_jobs.len(),
            eval_groups.into_iter().collect::<Vec<_>>().join(" / and "),
        );
        let mut evidence = vec![format!("run {} on {}", sweep.run_id, sweep.sha)];
        evidence.extend(sweep.benchmark_jobs.iter().cloned());
        evidence.extend(sweep.eval_jobs.iter().cloned());
        with(result(n, kind, Outcome::Pass, reason), evidence)
    }

    pub(super) fn bar_for(&self, task: &str) -> Option<f64> {
        let task = task.to_ascii_lowercase();
        self.evidence
            .eval_bars
            .iter()
            .filter(|(name, _)| task == **name || task.starts_with(name.as_str()))
            .map(|(_, bar)| *bar)
            .next()
    }

    pub(super) fn head_images(&self) -> BTreeSet<String> {
        self.entries
            .iter()
            .map(|e| e.text("image").replace('#', "/"))
            .filter(|i| !i.is_empty())
            .collect()
    }

    pub(super) fn evals(&self, n: u32, kind: CheckKind) -> CheckResult {
        let Some(sweep) = &self.sweep else {
            return result(
                n,
                kind,
                Outcome::Fail,
                "No passing eval run on a commit in this PR, so there are no eval results to check.".into(),
            );
        };
        let rows = match self.evidence.evals.get(&sweep.run_id) {
            None => {
                return result(
                    n,
                    kind,
                    Outcome::Fail,
                    format!(
                        "Run {} has no eval results artifact (eval_results_*).",
                        sweep.run_id
                    ),
                );
            }
            Some(Err(why)) => {
                return result(
                    n,
                    kind,
                    Outcome::Fail,
                    format!(
                        "The eval results of run {} could not be read: {why}.",
                        sweep.run_id
                    ),
                );
            }
            Some(Ok(rows)) if rows.is_empty() => {
                return result(
                    n,
                    kind,
                    Outcome::Fail,
                    format!("The eval results of run {} are empty.", sweep.run_id),
                );
            }
            Some(Ok(rows)) => rows,
        };
        let mut below = Vec::new();
        let mut unknown_bar = Vec::new();
        let mut evidence = Vec::new();
        let mut by_task: BTreeMap<String, (f64, f64, f64, String)> = BTreeMap::new();
        for row in rows {
            let Some(score) = row.score else {
                below.push(format!("{} {}: no score", row.label, row.task));
                continue;
            };
            let Some(bar) = self.bar_for(&row.task) else {
                unknown_bar.push(format!("{} {} {score:.3}", row.label, row.task));
                continue;
            };
            evidence.push(format!(
                "{} {} {} {score:.3} vs {bar}",
                row.label, row.task, row.score_name
            ));
            if score < bar {
                below.push(format!("{} {} {score:.3} < {bar}", row.label, row.task));
            }
            let entry = by_task.entry(row.task.to_uppercase()).or_insert((
                score,
                score,
                bar,
                row.score_name.clone(),
            ));
            entry.0 = entry.0.min(score);
            entry.1 = entry.1.max(score);
        }
        let images = self.head_images();
        let foreign: Vec<String> = rows
            .iter()
            .filter_map(|r| r.image.as_ref())
            .map(|i| i.replace('#', "/"))
            .filter(|i| !images.is_empty() && !images.contains(i))
            .collect();
        if !below.is_empty() {
            return with(
                result(
                    n,
                    kind,
                    Outcome::Fail,
                    format!(
                        "Evals below the bar in run {}: {}.",
                        sweep.run_id,
                        below.join("; ")
                    ),
                ),
                evidence,
            );
        }
        if !foreign.is_empty() {
            return with(
                result(
                    n,
                    kind,
                    Outcome::Fail,
                    format!(
                        "Run {} evaluated a different image than this PR's configs: {}.",
                        sweep.run_id,
                        foreign.join(", ")
                    ),
                ),
                evidence,
            );
        }
        if !unknown_bar.is_empty() {
            return with(
                result(
                    n,
                    kind,
                    Outcome::Warn,
                    format!(
                        "Needs a reviewer: no configured bar for {} in run {}.",
                        unknown_bar.join("; "),
                        sweep.run_id
                    ),
                ),
                evidence,
            );
        }
        let scores = by_task
            .iter()
            .map(|(task, (lo, hi, bar, name))| {
                if (hi - lo).abs() < 1e-9 {
                    format!("{task} {name} {lo:.3} vs {bar} bar")
                } else {
                    format!("{task} {name} {lo:.3}–{hi:.3} vs {bar} bar")
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        let image_note = if images.is_empty() {
            String::new()
        } else if sweep.sha == self.evidence.head_sha || rows.iter().all(|r| r.image.is_some()) {
            format!(
                "; eval jobs ran the PR's images ({})",
                images.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        } else {
            return with(
                result(
                    n,
                    kind,
                    Outcome::Warn,
                    format!(
                        "Needs a reviewer: {scores} in run {}, which ran on {} rather than the assessed head; confirm it ran the PR's images ({}).",
                        sweep.run_id,
                        short(&sweep.sha),
                        images.iter().cloned().collect::<Vec<_>>().join(", ")
                    ),
                ),
                evidence,
            );
        };
        with(
            result(
                n,
                kind,
                Outcome::Pass,
                format!(
                    "{}/{} {scores} (agg_eval_all.json of run {}){image_note}.",
                    rows.len(),
                    rows.len(),
                    sweep.run_id
                ),
            ),
            evidence,
        )
    }
}
