//! The playbook in the engine: the failed jobs of a finished run are read
//! once each, in order, and triaged against the playbook the base commit
//! carries, up to the first known engine failure with a fix to make; that
//! fix becomes a repair of Klaud's own, inside the repair budget, before
//! any retry and before the repair hook is asked.
//!
//! What was tried is read back from GitHub, never remembered: every
//! playbook repair is a commit by the bot carrying the candidate's trailer
//! and `Klaud-Playbook: <entry>#<fix>`, so after a crash, or on another
//! instance, the same branch gives the same list, and a fix is never
//! applied twice.

use std::collections::BTreeSet;

use crate::engine::config::TRAILER;
use crate::engine::context::Engine;
use crate::engine::context::Progress;
use crate::engine::error::EngineError;
use crate::engine::forge::{Forge as _, ForgeError, Run};
use crate::engine::intent::Intent;
use crate::engine::journal::CandidateRecord;
use crate::engine::proof::Scope;
use crate::engine::write::Writes as _;
use crate::job_log::MAX_JOB_LOG_BYTES;
use crate::model::AttemptStatus;
use crate::playbook::sick::{BrokenRunners, NodeFailure, settles_run};
use crate::playbook::{self, JobContext, JobLogView, Playbook, Triage};
use crate::report::{FailedJob, JobTriage, PlaybookFixShown, TriageClass};
use klaud_claims::CommitSha;

/// The trailer naming the playbook entry and fix a repair commit applied.
pub(crate) const PLAYBOOK_TRAILER: &str = "Klaud-Playbook: ";

/// Most failed jobs of one run whose logs are read: a run where every one
/// of hundreds of jobs failed says what it says in the first few.
const MAX_LOGS_READ: usize = 16;

/// One fix of one entry, as a repair commit's trailer names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Tried {
    pub(crate) entry: String,
    /// 1-based index among the entry's fixes.
    pub(crate) fix: usize,
}

impl std::fmt::Display for Tried {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}#{}", self.entry, self.fix)
    }
}

impl Tried {
    fn parse(text: &str) -> Option<Tried> {
        let (entry, fix) = text.trim().rsplit_once('#')?;
        Some(Tried {
            entry: entry.to_owned(),
            fix: fix.parse().ok().filter(|n| *n > 0)?,
        })
    }
}

/// A failed run's failed jobs as their logs were triaged
/// ([`Engine::triaged_jobs`]).
#[derive(Debug, Default)]
pub(crate) struct Triaged {
    /// Every failed job, with its triage where its log was read.
    pub(crate) jobs: Vec<FailedJob>,
    /// A known engine failure gives the playbook a fix to make: the repair
    /// comes first, before any retry a node failure elsewhere would ask
    /// for (that retry would meet the same engine failure again, on
    /// shared GPUs; the repaired run lands on nodes anew).
    pub(crate) repair_first: bool,
    /// Failed jobs after the deciding one whose logs were not read.
    pub(crate) unread: usize,
}

impl Triaged {
    /// The report's note on logs left unread, if any were (its Chinese
    /// twin: [`crate::report::format::note_words`]).
    pub(crate) fn unread_note(&self) -> Option<String> {
        (self.unread > 0).then(|| crate::report::format::unread_logs_note(self.unread))
    }
}

/// The fix [`Engine::choose_fix`] found, and what matched without one.
#[derive(Default)]
struct FirstFix {
    chosen: Option<ChosenFix>,
    skipped: Vec<String>,
}

/// One fix of one entry, placed in the family's files.
struct ChosenFix {
    tried: Tried,
    /// The fix in words (its commit's subject).
    describe: String,
    /// The entry's diagnosis (its commit's body).
    diagnosis: String,
    /// The files it changes, with their new bytes.
    files: Vec<(String, Vec<u8>)>,
}

/// What the playbook did for a repair.
pub(crate) enum PlaybookRepair {
    /// A fix was committed and pushed: the new head is the repair's; the
    /// commit, when GitHub took the push (its one parent is the old head).
    Pushed(Option<CommitSha>),
    /// Waiting, or the candidate ended (a proof failed): return this.
    Stop(Progress),
    /// No fix left to apply; these were tried before (oldest first), and
    /// these entries matched without a fix that could be placed.
    Nothing {
        tried: Vec<Tried>,
        skipped: Vec<String>,
    },
}

impl Engine<'_> {
    /// The playbook at the candidate's base commit; `None` when there is
    /// none, or it does not parse (its errors are for `klaud doctor`: a
    /// broken playbook repairs nothing and classifies nothing).
    pub(super) async fn playbook(
        &self,
        rec: &CandidateRecord,
    ) -> Result<Option<Playbook>, EngineError> {
        let path = self.config.playbook.as_str();
        if path.is_empty() {
            return Ok(None);
        }
        let Some(bytes) = self.forge.read_file(path, &rec.base_sha).await? else {
            return Ok(None);
        };
        let text = String::from_utf8_lossy(&bytes);
        match Playbook::parse(path, &text) {
            Ok(p) => Ok(Some(p)),
            Err(e) => {
                tracing::warn!(candidate = %rec.candidate, error = %e,
                    "the playbook does not parse; nothing is triaged or repaired by it");
                Ok(None)
            }
        }
    }

    /// What is known about `rec`'s jobs for the playbook's scopes.
    pub(super) fn job_context(
        &self,
        rec: &CandidateRecord,
        runner_name: Option<&str>,
    ) -> JobContext {
        let family = self.repository.family(&rec.family).ok();
        JobContext {
            family: Some(rec.family.clone()),
            ..playbook::family_context(family, Some(&rec.image), runner_name)
        }
    }

    /// The failed jobs of a failed run, each with the triage of its log
    /// when the base carries a playbook (each log read once, bounded; not
    /// on a runner an earlier log showed broken, see [`BrokenRunners`]);
    /// what they say of their nodes is kept for the sick-nodes table.
    ///
    /// When `repair_follows` (the run's failure goes to the repair step),
    /// reading stops at the first job whose known engine failure gives the
    /// playbook a fix to make: no later log changes that repair (fixes
    /// are taken in job order, and a known fix comes before any retry, see
    /// [`Triaged::repair_first`]), and a run where every job failed the
    /// same way would otherwise be read job by job to say it again.
    pub(super) async fn triaged_jobs(
        &self,
        rec: &CandidateRecord,
        run: &Run,
        status: AttemptStatus,
        repair_follows: bool,
    ) -> Result<Triaged, EngineError> {
        if status != AttemptStatus::Failed {
            return Ok(Triaged::default());
        }
        let jobs = self.forge.list_jobs(run.id).await?;
        let ids: Vec<u64> = jobs
            .iter()
            .filter(|j| j.conclusion.as_ref().is_some_and(|c| c.counts_as_failure()))
            .map(|j| j.id)
            .collect();
        let mut failed = super::attempt::failed_of(jobs);
        let Some(book) = self.playbook(rec).await? else {
            return Ok(Triaged {
                jobs: failed,
                ..Triaged::default()
            });
        };
        let mut nodes = Vec::new();
        let mut broken = BrokenRunners::default();
        let mut tried: Option<Vec<Tried>> = None;
        let mut repair_first = false;
        let mut settled = false;
        let mut read = 0;
        for (i, id) in ids.into_iter().enumerate().take(MAX_LOGS_READ) {
            let Some(job) = failed.get_mut(i) else {
                break;
            };
            if broken.skips(job.node.as_deref()) {
                continue;
            }
            let log = match self.forge.job_log(id, MAX_JOB_LOG_BYTES).await {
                Ok(l) => l,
                // A log GitHub no longer has (expired) leaves the job as
                // it was: its class is unknown, not a reason to stop.
                Err(ForgeError::NotFound(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            read = i + 1;
            let view = JobLogView::new(&String::from_utf8_lossy(&log));
            let ctx = self.job_context(rec, job.node.as_deref());
            let t = playbook::triage(&view, &book, &ctx);
            job.triage = Some(job_triage(&t));
            let node = playbook::log_node(&view).or_else(|| job.node.clone());
            let failure = NodeFailure::of(&t, node.as_deref());
            broken.note(job.node.as_deref(), &t, failure.as_ref());
            if !settled {
                nodes.extend(failure);
            }
            if job.node.is_none()
                && let Triage::Infrastructure { node: Some(n), .. } = &t
            {
                job.node = Some(n.chars().take(128).collect());
            }
            if !settled && settles_run(&t, &book, &ctx) {
                // The sick-nodes pass reads no further: neither does
                // what is kept for its table.
                settled = true;
                if !repair_follows {
                    continue;
                }
                let head = Engine::head(rec)?;
                let tried = match &tried {
                    Some(t) => t,
                    None => tried.insert(self.tried(rec, &head).await?),
                };
                if self
                    .choose_fix(rec, &failed[..=i], &head, tried)
                    .await?
                    .chosen
                    .is_some()
                {
                    repair_first = true;
                    break;
                }
            }
        }
        self.keep_run_failures(rec, run, nodes).await;
        let unread = if repair_first {
            failed.len().saturating_sub(read)
        } else {
            0
        };
        Ok(Triaged {
            jobs: failed,
            repair_first,
            unread,
        })
    }

    /// Whether a failed run's jobs failed on infrastructure by their logs:
    /// some job's triage says so.
    pub(super) fn infra_by_triage(jobs: &[FailedJob]) -> bool {
        jobs.iter().any(|j| {
            j.triage
                .as_ref()
                .is_some_and(|t| t.class == TriageClass::Infrastructure)
        })
    }

    /// The playbook fixes Klaud's own `commits` applied, each with its
    /// entry's diagnosis (from the playbook at the base): what a report
    /// after a repair says about why.
    pub(super) async fn playbook_fixes_shown(
        &self,
        rec: &CandidateRecord,
        commits: &[crate::engine::forge::ComparedCommit],
    ) -> Result<Vec<PlaybookFixShown>, EngineError> {
        let trailer = format!("{TRAILER}{}", rec.candidate);
        let applied: Vec<Tried> = commits
            .iter()
            .filter(|c| self.by_klaud(c, &trailer))
            .flat_map(|c| {
                c.message
                    .lines()
                    .filter_map(playbook_line)
                    .collect::<Vec<_>>()
            })
            .collect();
        if applied.is_empty() {
            return Ok(Vec::new());
        }
        let book = self.playbook(rec).await?;
        Ok(applied
            .into_iter()
            .map(|t| {
                let d = book
                    .as_ref()
                    .and_then(|b| b.entry(&t.entry))
                    .map(|e| e.diagnosis.clone())
                    .unwrap_or_default();
                PlaybookFixShown {
                    entry: t.entry,
                    fix: t.fix,
                    en: d.en,
                    zh: d.zh,
                }
            })
            .collect())
    }

    /// Whether every failed job (at least one) is teardown noise after the
    /// benchmark window by its log.
    pub(super) fn teardown_only(jobs: &[FailedJob]) -> bool {
        !jobs.is_empty()
            && jobs.iter().all(|j| {
                j.triage
                    .as_ref()
                    .is_some_and(|t| t.class == TriageClass::Teardown)
            })
    }

    /// The playbook repairs on the branch between the base and `head`:
    /// commits by the bot carrying this candidate's trailer and a
    /// playbook trailer, oldest first.
    async fn tried(
        &self,
        rec: &CandidateRecord,
        head: &CommitSha,
    ) -> Result<Vec<Tried>, EngineError> {
        if no_repair_yet(rec) {
            return Ok(Vec::new());
        }
        let cmp = self
            .forge
            .compare_commits(rec.base_sha.as_str(), head.as_str())
            .await?;
        let trailer = format!("{TRAILER}{}", rec.candidate);
        let mut out = Vec::new();
        for c in &cmp.commits {
            if !self.by_klaud(c, &trailer) {
                continue;
            }
            out.extend(c.message.lines().filter_map(playbook_line));
        }
        Ok(out)
    }

    /// `" (playbook fixes tried: …)"` for an ending after the repair
    /// budget, or nothing when the playbook repaired nothing.
    pub(super) async fn tried_note(
        &self,
        rec: &CandidateRecord,
        head: &str,
    ) -> Result<String, EngineError> {
        let Ok(head) = CommitSha::parse(head) else {
            return Ok(String::new());
        };
        let tried = self.tried(rec, &head).await?;
        Ok(match tried_sentence(&tried, &[]) {
            Some(t) => format!(" ({t})"),
            None => String::new(),
        })
    }

    /// Repair `n` by the playbook: the fix [`Engine::choose_fix`] finds,
    /// committed onto `old_head` and pushed.
    pub(super) async fn playbook_repair(
        &self,
        rec: &mut CandidateRecord,
        failed_jobs: &[FailedJob],
        n: u32,
        old_head: &CommitSha,
    ) -> Result<PlaybookRepair, EngineError> {
        let tried = self.tried(rec, old_head).await?;
        let FirstFix { chosen, skipped } =
            self.choose_fix(rec, failed_jobs, old_head, &tried).await?;
        let Some(fix) = chosen else {
            return Ok(PlaybookRepair::Nothing { tried, skipped });
        };
        let proof = match self.prove(rec, Scope::Pull).await? {
            Ok(p) => p,
            Err(p) => return Ok(PlaybookRepair::Stop(p)),
        };
        let message = format!(
            "Playbook repair {n} of {}: {} ({})\n\n{}\n\n{PLAYBOOK_TRAILER}{}\n{TRAILER}{}\n",
            rec.key, fix.tried.entry, fix.describe, fix.diagnosis, fix.tried, rec.candidate
        );
        self.intend(rec, Intent::Repair(n)).await?;
        let branch = rec.branch.clone();
        let pushed = match self
            .forge
            .commit_on_branch(&proof, &branch, old_head, &fix.files, &message)
            .await
        {
            // Klaud's own commit, on the branch: the step's reads follow
            // it, and the repair step takes the tip from them.
            Ok(sha) => Some(sha),
            // Re-read by the repair step: the tip tells (this commit is
            // the bot's and carries the trailer; a push by someone else
            // meanwhile is a handoff there).
            Err(ForgeError::Ambiguous(_)) | Err(ForgeError::NotFastForward(_)) => {
                self.forge.forget();
                None
            }
            Err(e) => return Err(e.into()),
        };
        Ok(PlaybookRepair::Pushed(pushed))
    }

    /// The fix a playbook repair onto `head` makes: the first fix, of the
    /// entries `failed_jobs` matched (in job order), that is in scope, not
    /// in `tried` and places cleanly in the family's scripts at `head`;
    /// with the entries that matched but gave nothing to apply.
    async fn choose_fix(
        &self,
        rec: &CandidateRecord,
        failed_jobs: &[FailedJob],
        head: &CommitSha,
        tried: &[Tried],
    ) -> Result<FirstFix, EngineError> {
        let mut entries: Vec<(String, Option<String>)> = Vec::new();
        for j in failed_jobs {
            let Some(t) = j
                .triage
                .as_ref()
                .filter(|t| t.class == TriageClass::KnownEngine)
            else {
                continue;
            };
            for e in &t.entries {
                if !entries.iter().any(|(id, _)| id == e) {
                    entries.push((e.clone(), j.node.clone()));
                }
            }
        }
        let mut out = FirstFix::default();
        if entries.is_empty() {
            return Ok(out);
        }
        let Some(book) = self.playbook(rec).await? else {
            return Ok(out);
        };
        let targets = self.fix_targets(rec);
        for (id, node) in entries {
            let Some(entry) = book.entry(&id) else {
                continue;
            };
            // The scope is checked again here: the report's triage may be
            // older than the playbook at this base.
            if entry.fixes.is_empty() || !entry.applies_to(&self.job_context(rec, node.as_deref()))
            {
                out.skipped.push(id.clone());
                continue;
            }
            for (k, fix) in entry.fixes.iter().enumerate() {
                let this = Tried {
                    entry: id.clone(),
                    fix: k + 1,
                };
                if tried.contains(&this) {
                    continue;
                }
                let mut files = Vec::new();
                for path in &targets {
                    let Some(bytes) = self.forge.read_file(path, head.as_str()).await? else {
                        continue;
                    };
                    let Ok(text) = String::from_utf8(bytes) else {
                        continue;
                    };
                    if let Ok(applied) = fix.apply(&text) {
                        files.push((path.clone(), applied.text.into_bytes()));
                    }
                }
                if files.is_empty() {
                    out.skipped.push(this.to_string());
                    continue;
                }
                out.chosen = Some(ChosenFix {
                    tried: this,
                    describe: fix.describe(),
                    diagnosis: entry.diagnosis.en.trim().to_owned(),
                    files,
                });
                return Ok(out);
            }
        }
        Ok(out)
    }

    /// The files a fix may edit: the family's benchmark scripts, its
    /// recipes in the repository and its launchers, each once.
    pub(super) fn fix_targets(&self, rec: &CandidateRecord) -> Vec<String> {
        let Ok(family) = self.repository.family(&rec.family) else {
            return Vec::new();
        };
        let mut out: Vec<String> = Vec::new();
        let recipes = family
            .recipes
            .iter()
            .filter(|r| r.in_repository && !r.missing)
            .map(|r| r.path.clone());
        for p in klaud_planner::audit::benchmark_scripts(self.repository, family)
            .into_iter()
            .chain(recipes)
            .chain(klaud_planner::launcher_pin::launchers_of(
                self.repository,
                family,
            ))
        {
            if !out.contains(&p) {
                out.push(p);
            }
        }
        out
    }
}

/// Whether `rec` knows, without a compare, that its branch holds no
/// repair commit: this journal opened the pull request, so every step of
/// the lifecycle ran from this record, and no repair was taken yet. A
/// playbook repair is only made under `Intent::Repair`, and its push is
/// either taken (`repairs` counts it, or the resumed repair step finds it
/// by the moved tip and never asks) or not on the branch at all. A record
/// rebuilt from GitHub, or adopted, reads the branch as before.
pub(super) fn no_repair_yet(rec: &CandidateRecord) -> bool {
    rec.pull_opened_here
        && rec.repairs == 0
        && !rec
            .attempts
            .iter()
            .any(|a| matches!(a.kind, crate::model::AttemptKind::Repair { .. }))
}

/// The fix a commit message line's playbook trailer names.
fn playbook_line(line: &str) -> Option<Tried> {
    line.trim()
        .strip_prefix(PLAYBOOK_TRAILER.trim_end())
        .and_then(Tried::parse)
}

/// The report's view of one triage.
fn job_triage(t: &Triage) -> JobTriage {
    let class = match t {
        Triage::Infrastructure { .. } => TriageClass::Infrastructure,
        Triage::KnownEngine { .. } => TriageClass::KnownEngine,
        Triage::Setup { .. } => TriageClass::Setup,
        Triage::TeardownNoise { .. } => TriageClass::Teardown,
        Triage::Unknown { .. } => TriageClass::Unknown,
    };
    let mut entries: Vec<String> = t.entry().map(str::to_owned).into_iter().collect();
    if let Triage::KnownEngine { next, .. } = t {
        entries.extend(next.iter().cloned());
    }
    let lines: Vec<String> = t.lines().iter().map(|l| l.text.clone()).collect();
    JobTriage::new(class, entries, &lines)
}

/// The end of a candidate the playbook could not repair, listing what was
/// tried: `None` when it tried nothing.
pub(super) fn tried_sentence(tried: &[Tried], skipped: &[String]) -> Option<String> {
    if tried.is_empty() && skipped.is_empty() {
        return None;
    }
    let list = |v: Vec<String>| v.join(", ");
    let mut s = String::new();
    if !tried.is_empty() {
        s.push_str(&format!(
            "playbook fixes tried without success: {}",
            list(tried.iter().map(Tried::to_string).collect())
        ));
    }
    let skipped: BTreeSet<&String> = skipped.iter().collect();
    if !skipped.is_empty() {
        if !s.is_empty() {
            s.push_str("; ");
        }
        s.push_str(&format!(
            "matched but not applied (out of scope, no fix, or it does not place): {}",
            list(skipped.into_iter().cloned().collect())
        ));
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trailer_names_an_entry_and_a_fix() {
        assert_eq!(
            Tried::parse(" vllm-oom-at-load#2 "),
            Some(Tried {
                entry: "vllm-oom-at-load".into(),
                fix: 2
            })
        );
        for bad in ["vllm", "x#0", "x#", "x#-1", "x#a"] {
            assert_eq!(Tried::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_ending_lists_every_fix_tried() {
        let tried = vec![Tried::parse("a#1").unwrap(), Tried::parse("b#1").unwrap()];
        assert_eq!(
            tried_sentence(&tried, &["c".into()]).unwrap(),
            "playbook fixes tried without success: a#1, b#1; matched but not applied \
             (out of scope, no fix, or it does not place): c"
        );
        assert_eq!(tried_sentence(&[], &[]), None);
    }

    const DEMO_PLAYBOOK: &str = include_str!("../../../configs/demo/.github/klaud-playbook.yaml");
    const DEMO_SCRIPT: &str = include_str!(
        "../../../configs/demo/benchmarks/single_node/fixed_seq_len/demo_fp4_b200_vllm.sh"
    );

    fn vllm_job(node: &str) -> JobContext {
        JobContext {
            framework: Some("vllm".into()),
            engine_version: Some("v0.26.0".into()),
            hardware: Some("b200".into()),
            runner_name: Some(node.into()),
            family: None,
        }
    }

    #[test]
    fn the_demo_playbook_knows_its_oom_and_its_sick_node() {
        let book = Playbook::parse("demo", DEMO_PLAYBOOK).expect("parses");
        let oom = JobLogView::new(
            "Runner name: 'b200-demo_00'\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
        );
        let t = playbook::triage(&oom, &book, &vllm_job("b200-demo_00"));
        let jt = job_triage(&t);
        assert_eq!(jt.class, TriageClass::KnownEngine, "{t:?}");
        assert_eq!(jt.entries, vec!["vllm-oom-at-load".to_owned()]);
        // The entry's first fix places in the demo's script, changing only
        // the one value.
        let fix = &book.entry("vllm-oom-at-load").unwrap().fixes[0];
        let applied = fix.apply(DEMO_SCRIPT).expect("places");
        assert_eq!(
            applied.text,
            DEMO_SCRIPT.replace(
                "--gpu-memory-utilization 0.95",
                "--gpu-memory-utilization 0.90"
            )
        );
        // Out of scope (another framework): not the entry's.
        let mut sglang = vllm_job("b200-demo_00");
        sglang.framework = Some("sglang".into());
        assert_eq!(
            job_triage(&playbook::triage(&oom, &book, &sglang)).class,
            TriageClass::Unknown
        );
        let sick = JobLogView::new("srun: error: pyxis is broken\n");
        let t = playbook::triage(&sick, &book, &vllm_job("mia1-p01-g09"));
        assert_eq!(job_triage(&t).class, TriageClass::Infrastructure, "{t:?}");
        let teardown = JobLogView::new(
            "============ Serving Benchmark Result ============\nSuccessful requests: 64\nvllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue\n",
        );
        let t = playbook::triage(&teardown, &book, &vllm_job("b200-demo_00"));
        assert_eq!(job_triage(&t).class, TriageClass::Teardown, "{t:?}");
    }
}
