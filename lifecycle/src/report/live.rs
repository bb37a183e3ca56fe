//! The live part of an attempt report: what a run's jobs say while it is in
//! progress, as a status line such as "evals passed, throughput running"
//! (the wording of the incumbent's seed PRs).
//!
//! Jobs are grouped by their names as the InferenceX workflows give them
//! (both the 843c6254 and the newer versions): a reusable-workflow job is
//! named `<caller name> / <called name>` by GitHub, the callers are named
//! `eval /`, `agentic eval /`, `single-node 8k1k /`, `canary /`, ..., and
//! the called benchmark job of `benchmark-tmpl.yml` /
//! `benchmark-multinode-tmpl.yml` is `[klaud | ]p<priority> | <model> ...
//! c<conc>[ | eval-only| | eval]`. Everything else (`get-jobs`, `setup`,
//! `collect-results`, `calc-success-rate`, ...) is bookkeeping.

use klaud_render::{Bilingual, bi};
use serde::{Deserialize, Serialize};

use crate::engine::forge::{Job, RunConclusion, RunStatus};

/// What a job does, read from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobGroup {
    /// A benchmark job measuring throughput.
    Throughput,
    /// An eval job (`eval /` callers, `| eval-only` jobs).
    Evals,
    /// Matrix set-up, collection and reporting jobs.
    Other,
}

impl JobGroup {
    /// The group of a job name.
    pub fn of(name: &str) -> Self {
        // A caller named `eval /` gives `eval / / p1 | ...`: empty
        // segments and stray slashes are trimmed away.
        let segments: Vec<&str> = name
            .split(" / ")
            .map(|s| s.trim_matches(|c: char| c == '/' || c.is_whitespace()))
            .filter(|s| !s.is_empty())
            .collect();
        let callee = segments.last().copied().unwrap_or("").trim();
        let benchmark = is_benchmark_job(callee);
        let eval_caller = segments[..segments.len().saturating_sub(1)]
            .iter()
            .any(|s| s.split_whitespace().any(|w| w == "eval"));
        if benchmark && (eval_caller || callee.ends_with("| eval-only")) {
            JobGroup::Evals
        } else if benchmark {
            JobGroup::Throughput
        } else {
            JobGroup::Other
        }
    }
}

/// `[klaud | ]p<digits> | ...`: the benchmark templates' job name.
fn is_benchmark_job(callee: &str) -> bool {
    let rest = callee.strip_prefix("klaud | ").unwrap_or(callee);
    let Some(rest) = rest.strip_prefix('p') else {
        return false;
    };
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    digits > 0 && rest[digits..].starts_with(" |")
}

/// Where one group of jobs stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupState {
    /// Which jobs.
    pub group: JobGroup,
    /// Jobs GitHub lists for the group so far.
    pub total: u32,
    /// Jobs started (in progress or completed).
    #[serde(default)]
    pub started: u32,
    /// Jobs completed.
    pub done: u32,
    /// Completed jobs that did not succeed.
    pub failed: u32,
}

impl GroupState {
    fn word(&self) -> Bilingual {
        if self.failed > 0 {
            bi!("failed", "失败")
        } else if self.done == self.total {
            bi!("passed", "通过")
        } else if self.started == 0 && self.done == 0 {
            bi!("queued", "排队中")
        } else {
            bi!("running", "运行中")
        }
    }
}

/// The jobs of a run in progress, as a live report shows them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveJobs {
    /// Eval, throughput and other jobs, in that order, those with jobs only.
    pub groups: Vec<GroupState>,
}

impl LiveJobs {
    /// Summarises a job list (`Forge::list_jobs`).
    pub fn of(jobs: &[Job]) -> Self {
        let mut groups = Vec::new();
        for group in [JobGroup::Evals, JobGroup::Throughput, JobGroup::Other] {
            let mine: Vec<&Job> = jobs
                .iter()
                .filter(|j| JobGroup::of(&j.name) == group)
                .collect();
            if mine.is_empty() {
                continue;
            }
            let done: Vec<&&Job> = mine
                .iter()
                .filter(|j| j.conclusion.is_some() || j.status == Some(RunStatus::Completed))
                .collect();
            let started = mine
                .iter()
                .filter(|j| {
                    matches!(j.status, Some(RunStatus::InProgress | RunStatus::Completed))
                        || j.conclusion.is_some()
                })
                .count() as u32;
            groups.push(GroupState {
                group,
                total: mine.len() as u32,
                started,
                done: done.len() as u32,
                failed: done
                    .iter()
                    .filter(|j| {
                        j.conclusion
                            .as_ref()
                            .is_some_and(RunConclusion::counts_as_failure)
                    })
                    .count() as u32,
            });
        }
        Self { groups }
    }

    fn group(&self, g: JobGroup) -> Option<&GroupState> {
        self.groups.iter().find(|s| s.group == g)
    }

    /// `evals passed, throughput running` / `评估通过，吞吐量测试运行中`;
    /// before the matrix exists (only bookkeeping jobs), `setting up`.
    pub fn status_line(&self) -> Bilingual {
        let (mut en, mut zh) = (Vec::new(), Vec::new());
        for (g, name) in [
            (JobGroup::Evals, bi!("evals", "评估")),
            (JobGroup::Throughput, bi!("throughput", "吞吐量测试")),
        ] {
            if let Some(s) = self.group(g) {
                let word = s.word();
                en.push(format!("{} {}", name.en, word.en));
                zh.push(format!("{}{}", name.zh, word.zh));
            }
        }
        if en.is_empty() {
            bi!("setting up", "准备中")
        } else {
            Bilingual::owned(en.join(", "), zh.join("，"))
        }
    }

    /// `Jobs: 5 of 12 done (throughput 3 of 8, evals 2 of 2).`
    pub fn progress(&self) -> Bilingual {
        let total: u32 = self.groups.iter().map(|g| g.total).sum();
        let done: u32 = self.groups.iter().map(|g| g.done).sum();
        let (mut en, mut zh) = (Vec::new(), Vec::new());
        for (g, name) in [
            (JobGroup::Throughput, bi!("throughput", "吞吐量测试")),
            (JobGroup::Evals, bi!("evals", "评估")),
        ] {
            if let Some(s) = self.group(g) {
                en.push(format!("{} {} of {}", name.en, s.done, s.total));
                zh.push(format!("{} {}/{}", name.zh, s.done, s.total));
            }
        }
        if en.is_empty() {
            Bilingual::owned(
                format!("Jobs: {done} of {total} done."),
                format!("作业：已完成 {done}/{total}。"),
            )
        } else {
            Bilingual::owned(
                format!("Jobs: {done} of {total} done ({}).", en.join(", ")),
                format!("作业：已完成 {done}/{total}（{}）。", zh.join("，")),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(name: &str, conclusion: Option<&str>) -> Job {
        Job {
            id: 1,
            name: name.into(),
            status: Some(
                if conclusion.is_some() {
                    "completed"
                } else {
                    "in_progress"
                }
                .into(),
            ),
            conclusion: conclusion.map(RunConclusion::from),
            html_url: None,
            runner_name: None,
        }
    }

    // Names as GitHub builds them from the real workflows: the caller's
    // `name:` (e2e-tests.yml / run-sweep.yml), " / ", then the evaluated
    // `name:` of the benchmark templates.
    const EVAL_OLD: &str = "eval / / p1 | dsr1 fp4 b200 vllm TP8 c64 | eval-only";
    const EVAL_NEW: &str =
        "agentic eval / / klaud | p1 | minimaxm3 fp8 h200 vllm TP4 mtp c16 | eval-only";
    const TPUT_OLD: &str = "single-node 8k1k / / p2 | dsr1 fp4 b200 vllm TP8/EP8/DPA c128";
    const TPUT_MULTI: &str =
        "multi-node / / p1 | dsr1 fp8 h100 dyn-sgl 1P (TP8) x 2D (TP8/EP8/DPA) c256x512";
    const CANARY: &str = "canary / / klaud | p0 | dsr1 fp4 b200 vllm TP8 c4";

    #[test]
    fn job_names_of_both_workflow_versions_fall_into_groups() {
        assert_eq!(JobGroup::of(EVAL_OLD), JobGroup::Evals);
        assert_eq!(JobGroup::of(EVAL_NEW), JobGroup::Evals);
        assert_eq!(
            JobGroup::of("eval / p1 | x fp4 b200 vllm TP8 c64 | eval-only"),
            JobGroup::Evals
        );
        assert_eq!(JobGroup::of(TPUT_OLD), JobGroup::Throughput);
        assert_eq!(JobGroup::of(TPUT_MULTI), JobGroup::Throughput);
        assert_eq!(JobGroup::of(CANARY), JobGroup::Throughput);
        for other in [
            "get-jobs",
            "setup",
            "collect-results / collect-results",
            "calc-success-rate",
            "check-changelog",
        ] {
            assert_eq!(JobGroup::of(other), JobGroup::Other, "{other}");
        }
        // A model called "eval" in the callee does not make it an eval job.
        assert_eq!(
            JobGroup::of("single-node / p1 | eval fp4 b200 vllm TP8 c4"),
            JobGroup::Throughput
        );
    }

    #[test]
    fn the_status_line_reads_like_the_seed_prs() {
        let live = LiveJobs::of(&[
            job("get-jobs", Some("success")),
            job(EVAL_OLD, Some("success")),
            job(TPUT_OLD, Some("success")),
            job(TPUT_MULTI, None),
        ]);
        assert_eq!(live.status_line().en, "evals passed, throughput running");
        assert_eq!(live.status_line().zh, "评估通过，吞吐量测试运行中");
        assert_eq!(
            live.progress().en,
            "Jobs: 3 of 4 done (throughput 1 of 2, evals 1 of 1)."
        );
        let mut waiting = job(EVAL_OLD, None);
        waiting.status = Some("queued".into());
        let failed = LiveJobs::of(&[job(TPUT_OLD, Some("failure")), waiting]);
        assert_eq!(failed.status_line().en, "evals queued, throughput failed");
        assert_eq!(
            LiveJobs::of(&[job("get-jobs", None)]).status_line().en,
            "setting up"
        );
        assert_eq!(LiveJobs::of(&[]).status_line().en, "setting up");
    }
}
