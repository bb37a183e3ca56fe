//! Attempt report comments (see `klaud_lifecycle::report`): a hidden typed record followed by the
//! rendered text, English then Chinese.
//!
//! Splitting: GitHub refuses comments over 65,536 characters, and Klaud keeps
//! each one at most [`MAX_COMMENT_CHARS`]. A report that does not fit is
//! published as parts `…:<name>:part-1`, `…:part-2`, …; every part is a
//! complete report of its own (header, image, its tables) whose record holds
//! a slice of the rows plus `part: {index, count}`. [`reassemble`] joins the
//! records of all parts back into the whole report.

use chrono::{DateTime, Utc};
use klaud_render::{Bilingual, bi};
use serde::{Deserialize, Serialize};

use super::format::{
    THROUGHPUT_DECIMALS, TPOT_MS_DECIMALS, TTFT_MS_DECIMALS, code, link, ms, score, text,
    timestamp, with_delta,
};
use super::live::LiveJobs;
use super::markers::{
    HiddenRecord, MAX_PARTS, MarkerError, MarkerKey, ReportName, hidden_block, hidden_json,
    parse_json,
};
use super::{RenderedComment, ReportError, candidate_serde};
use crate::artifacts::{BenchmarkRow, EvalRow, PointMetrics};
use crate::baseline::{Baseline, PointSpec, Scenario};
use crate::dataset::comparable;
use crate::engine::forge::RunConclusion;
use crate::model::{AttemptKind, AttemptStatus, CandidateId, OwnerRun, RunRef};

/// Most characters in one published comment.
pub const MAX_COMMENT_CHARS: usize = 60_000;

/// A measured value, or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum Measure {
    /// The numbers.
    Measured {
        /// Metrics, latencies in seconds.
        metrics: PointMetrics,
    },
    /// N/A.
    Missing {
        /// Why.
        reason: String,
    },
}

impl Measure {
    fn metrics(&self) -> Option<&PointMetrics> {
        match self {
            Measure::Measured { metrics } => Some(metrics),
            Measure::Missing { .. } => None,
        }
    }
}

/// One row of a report table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportRow {
    /// The point's label (for N/A notes).
    pub label: String,
    /// Concurrency.
    pub conc: u64,
    /// This attempt's result.
    pub new: Measure,
    /// The frozen baseline.
    pub old: Measure,
}

/// Rows of one scenario and topology: one table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportSection {
    /// Scenario, e.g. `8k1k` or `AgentX MTP`.
    pub scenario: String,
    /// Topology, e.g. `TP4 EP4 DPA`.
    pub topology: String,
    /// Rows by concurrency.
    pub rows: Vec<ReportRow>,
}

/// One eval result against its baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalComparison {
    /// Task.
    pub task: String,
    /// Metric name.
    pub score_name: String,
    /// Concurrency.
    pub conc: u64,
    /// This attempt's score, `None` when missing.
    pub new: Option<f64>,
    /// The baseline score, `None` when there is none.
    pub old: Option<f64>,
    /// Why there is no delta although the baseline has a score for the
    /// eval (its sample count differs, or is unknown on either side).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_delta: Option<String>,
}

/// Why an eval's score is shown without a delta: the incumbent compares
/// scores only over the same number of samples.
pub const EVAL_SAMPLES_DIFFER: &str = "sample counts missing or different";

/// Which part of a split report a record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartInfo {
    /// From 1.
    pub index: u32,
    /// Number of parts.
    pub count: u32,
}

/// The typed record of an attempt (or baseline) report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptReport {
    /// Owner run.
    #[serde(rename = "owner-run")]
    pub owner_run: OwnerRun,
    /// Candidate.
    #[serde(with = "candidate_serde")]
    pub candidate: CandidateId,
    /// Record name.
    pub name: ReportName,
    /// The attempt; `None` for the baseline report.
    pub kind: Option<AttemptKind>,
    /// Attempt status.
    pub status: AttemptStatus,
    /// Words after the status, e.g. `smoke`.
    pub detail: Option<String>,
    /// The run, when there is one.
    pub run: Option<RunRef>,
    /// When the report was made.
    pub at: DateTime<Utc>,
    /// Image tested.
    pub image: String,
    /// Head commit tested.
    pub head: Option<String>,
    /// Tables.
    pub sections: Vec<ReportSection>,
    /// Evals.
    pub evals: Vec<EvalComparison>,
    /// Free-form remarks (e.g. why the run failed).
    pub notes: Vec<String>,
    /// Set on the records of a split report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<PartInfo>,
    /// The run's jobs that did not succeed, with links to their logs (on
    /// failed reports; in the first part of a split one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_jobs: Vec<FailedJob>,
    /// Set while the run is in progress (a live report, edited in place as
    /// jobs finish); the final report of the run has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<LiveJobs>,
    /// What the repair before this attempt changed (attempts after a
    /// repair; in the first part of a split one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair: Option<RepairChanges>,
    /// The sick nodes its failed jobs ran on, when any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sick_nodes: Option<super::sick_node::SickNodesSeen>,
}

/// What one repair pushed: from the GitHub compare between the head the
/// failed attempt tested and the head the repair left.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepairChanges {
    /// Which repair, from 1.
    pub n: u32,
    /// The head before the repair.
    pub from: String,
    /// The head after it.
    pub to: String,
    /// The subject (first line) of each pushed commit, oldest first.
    pub subjects: Vec<String>,
    /// The paths the repair touched.
    pub files: Vec<String>,
    /// The playbook fixes the repair applied, with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub playbook: Vec<PlaybookFixShown>,
}

/// One playbook fix a repair applied: the entry, which of its fixes, and
/// the entry's diagnosis in both languages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlaybookFixShown {
    /// The entry's id.
    pub entry: String,
    /// Which of its fixes, from 1.
    pub fix: usize,
    /// The diagnosis, English.
    pub en: String,
    /// The diagnosis, Chinese.
    pub zh: String,
}

/// A job of a run that did not succeed (Actions jobs API).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedJob {
    /// Job name as the run shows it.
    pub name: String,
    /// How it ended (`failure`, `timed_out`, `cancelled`, ...).
    pub conclusion: RunConclusion,
    /// The job's page (its log), `html_url`.
    pub url: Option<String>,
    /// The runner (node) it ran on, when GitHub said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// What its log says the failure is, when the log was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triage: Option<JobTriage>,
}

/// How a failed job's log reads against the playbook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TriageClass {
    /// The runner or node failed, not the candidate.
    Infrastructure,
    /// A failure the playbook knows.
    KnownEngine,
    /// A known failure of the pull request's setup stage.
    Setup,
    /// Noise after the benchmark window ended: not a failure.
    Teardown,
    /// Nothing the playbook knows.
    Unknown,
}

impl TriageClass {
    fn words(self) -> Bilingual {
        match self {
            Self::Infrastructure => bi!("infrastructure failure", "基础设施故障"),
            Self::KnownEngine => bi!("known engine failure", "已知引擎故障"),
            Self::Setup => bi!("known setup failure", "已知准备阶段故障"),
            Self::Teardown => bi!(
                "teardown noise after the window (not a failure)",
                "窗口结束后的收尾噪声（不算失败）"
            ),
            Self::Unknown => bi!("unknown failure", "未知故障"),
        }
    }
}

/// Most matching lines a report shows per job, and the longest one.
pub const MAX_TRIAGE_LINES: usize = 5;
/// Characters kept of one matching line.
pub const MAX_TRIAGE_LINE_CHARS: usize = 300;

/// The triage of one failed job: its class, the playbook entry that
/// matched (if any) and the log lines that matched, bounded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobTriage {
    /// What kind of failure it is.
    pub class: TriageClass,
    /// The ids of the playbook entries that matched, the one that decides
    /// first; for a known engine failure the others are tried next.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<String>,
    /// The log lines that matched, as printed (at most
    /// [`MAX_TRIAGE_LINES`], each cut to [`MAX_TRIAGE_LINE_CHARS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<String>,
}

impl JobTriage {
    /// A triage with its lines bounded to what a report shows.
    pub fn new(class: TriageClass, entries: Vec<String>, lines: &[String]) -> Self {
        Self {
            class,
            entries,
            lines: lines
                .iter()
                .take(MAX_TRIAGE_LINES)
                .map(|l| l.chars().take(MAX_TRIAGE_LINE_CHARS).collect())
                .collect(),
        }
    }
}

impl AttemptReport {
    /// The marker key of this record (with its part, if any).
    pub fn key(&self) -> MarkerKey {
        MarkerKey::Report {
            owner_run: self.owner_run,
            candidate: self.candidate.clone(),
            name: self.name,
            part: self.part.map(|p| p.index),
        }
    }

    /// The `baseline` report: the frozen numbers of every point as an
    /// attempt report. The engine no longer posts it (the PR body holds the
    /// baseline, and a comment repeating it is noise); PRs opened before
    /// still carry one, whose marker reads as before.
    pub fn for_baseline(
        owner_run: OwnerRun,
        candidate: CandidateId,
        at: DateTime<Utc>,
        baseline: &Baseline,
    ) -> Self {
        let mut sections = compare(baseline, &[], "");
        for row in sections.iter_mut().flat_map(|s| s.rows.iter_mut()) {
            row.new = row.old.clone();
        }
        Self {
            owner_run,
            candidate,
            name: ReportName::Baseline,
            kind: None,
            status: AttemptStatus::Passed,
            detail: Some(format!("frozen {}", baseline.date)),
            run: None,
            at,
            image: baseline.image.clone(),
            head: None,
            sections,
            evals: Vec::new(),
            notes: Vec::new(),
            part: None,
            failed_jobs: Vec::new(),
            live: None,
            repair: None,
            sick_nodes: None,
        }
    }

    /// Whether this is a live report of a run still in progress.
    pub fn is_live(&self) -> bool {
        self.live.is_some()
    }

    fn title(&self) -> Bilingual {
        match &self.kind {
            Some(kind) => kind.titles(),
            None => Bilingual::new("Baseline", "基线"),
        }
    }
}

/// The frozen points no row of a run answers, in baseline order, matched
/// as [`compare`] matches them (one row answers one point). check-final
/// after the sweep: a frozen point without a result keeps a candidate from
/// `validated`, whatever the run concluded.
pub fn uncovered_points<'b>(
    baseline: &'b Baseline,
    rows: &[BenchmarkRow],
) -> Vec<&'b crate::baseline::BaselinePoint> {
    let mut used = vec![false; rows.len()];
    let mut missing = Vec::new();
    for point in &baseline.points {
        match rows
            .iter()
            .enumerate()
            .find(|(i, r)| !used[*i] && row_is_point(r, &point.point))
        {
            Some((i, _)) => used[i] = true,
            None => missing.push(point),
        }
    }
    missing
}

/// Builds the tables: each baseline point with the attempt's row for it,
/// then attempt rows that match no baseline point. Rows are matched on
/// scenario, concurrency and topology as far as the row states them.
pub fn compare(
    baseline: &Baseline,
    rows: &[BenchmarkRow],
    missing_reason: &str,
) -> Vec<ReportSection> {
    let mut used = vec![false; rows.len()];
    let mut sections: Vec<ReportSection> = Vec::new();
    let mut push = |scenario: String, topology: String, row: ReportRow| match sections
        .iter_mut()
        .find(|s| s.scenario == scenario && s.topology == topology)
    {
        Some(section) => section.rows.push(row),
        None => sections.push(ReportSection {
            scenario,
            topology,
            rows: vec![row],
        }),
    };
    for point in &baseline.points {
        let found = rows
            .iter()
            .enumerate()
            .find(|(i, r)| !used[*i] && row_is_point(r, &point.point));
        let new = match found {
            Some((i, r)) => {
                used[i] = true;
                Measure::Measured {
                    metrics: *r.metrics(),
                }
            }
            None => Measure::Missing {
                reason: missing_reason.to_owned(),
            },
        };
        // Two AgentX replays are comparable only on the same dataset.
        let incomparable =
            found.and_then(|(_, r)| comparable(baseline, point, r).err().map(|e| e.to_string()));
        let old = match point.metrics() {
            Some(_) if incomparable.is_some() => Measure::Missing {
                reason: incomparable.unwrap_or_default(),
            },
            Some(m) => Measure::Measured { metrics: *m },
            None => Measure::Missing {
                reason: match &point.value {
                    crate::baseline::BaselineValue::Unavailable { reason } => reason.clone(),
                    crate::baseline::BaselineValue::Measured { .. } => String::new(),
                },
            },
        };
        push(
            scenario_text(&point.point),
            point.point.topology(),
            ReportRow {
                label: point.label.clone(),
                conc: point.point.conc,
                new,
                old,
            },
        );
    }
    for (row, _) in rows.iter().zip(&used).filter(|(_, used)| !**used) {
        let id = row.identity();
        let scenario = match (row, id.isl, id.osl) {
            (BenchmarkRow::Agentic(_), _, _) => "AgentX".to_owned(),
            (_, Some(isl), Some(osl)) => Scenario::FixedSeqLen { isl, osl }.to_string(),
            _ => "fixed-seq-len".to_owned(),
        };
        let mut topology = format!("TP{}", id.tp.map_or("?".into(), |t| t.to_string()));
        if let Some(ep) = id.ep.filter(|ep| *ep > 1) {
            topology.push_str(&format!(" EP{ep}"));
        }
        if id.dp_attention == Some(true) {
            topology.push_str(" DPA");
        }
        push(
            scenario.clone(),
            topology.clone(),
            ReportRow {
                label: format!("{scenario} c{} {topology}", row.conc()),
                conc: row.conc(),
                new: Measure::Measured {
                    metrics: *row.metrics(),
                },
                old: Measure::Missing {
                    reason: "not a point of the frozen baseline".to_owned(),
                },
            },
        );
    }
    sections
}

/// Everything in a point's label except concurrency and topology, so each
/// table holds one row per concurrency.
fn scenario_text(point: &PointSpec) -> String {
    let mut s = point.scenario.to_string();
    if point.spec_decoding != "none" {
        s.push(' ');
        s.push_str(&point.spec_decoding.to_ascii_uppercase());
    }
    if let Some(kv) = &point.kv_offload {
        s.push_str(" KV ");
        s.push_str(kv);
    }
    s
}

fn row_is_point(row: &BenchmarkRow, point: &PointSpec) -> bool {
    let id = row.identity();
    let scenario_ok = match (point.scenario, row) {
        (Scenario::Agentic, BenchmarkRow::Agentic(_)) => true,
        (Scenario::FixedSeqLen { isl, osl }, BenchmarkRow::FixedSeqLen(_)) => {
            id.isl.is_none_or(|v| v == isl) && id.osl.is_none_or(|v| v == osl)
        }
        _ => false,
    };
    // Disaggregated rows describe the decode side in `tp`/`ep`.
    scenario_ok
        && row.conc() == point.conc
        && id.tp.is_none_or(|v| v == point.decode.tp)
        && id.ep.is_none_or(|v| v == point.decode.ep)
        && id.dp_attention.is_none_or(|v| v == point.decode.dp_attn)
        && id
            .spec_decoding
            .as_deref()
            .is_none_or(|s| s.eq_ignore_ascii_case(&point.spec_decoding))
        && id.disagg.is_none_or(|d| d == point.prefill.is_some())
        && kv_matches(row, point)
}

/// AgentX rows state their offloading mode (`none`, `dram`); the point's
/// `mode/backend` must start with it.
fn kv_matches(row: &BenchmarkRow, point: &PointSpec) -> bool {
    let BenchmarkRow::Agentic(row) = row else {
        return true;
    };
    match (row.kv_offloading.as_deref(), point.kv_offload.as_deref()) {
        (None, _) => true,
        (Some(mode), None) => mode.eq_ignore_ascii_case("none"),
        (Some(mode), Some(kv)) => kv
            .split('/')
            .next()
            .is_some_and(|m| m.eq_ignore_ascii_case(mode)),
    }
}

/// Pairs eval rows with the baseline's published evals of the same task,
/// metric, concurrency and parallelism (where the row states it).
pub fn compare_evals(new: &[EvalRow], baseline: &Baseline) -> Vec<EvalComparison> {
    new.iter()
        .map(|row| {
            let old = baseline.evals.iter().find(|o| {
                o.task == row.task
                    && o.score_name == row.score_name
                    && o.conc.is_none_or(|c| c == row.conc)
                    && row.identity.tp.is_none_or(|tp| tp == o.decode.tp)
                    && row.identity.ep.is_none_or(|ep| ep == o.decode.ep)
            });
            let same_samples = old.is_some_and(|o| o.samples.is_some() && o.samples == row.n_eff);
            EvalComparison {
                task: row.task.clone(),
                score_name: row.score_name.clone(),
                conc: row.conc,
                new: Some(row.score),
                old: old.filter(|_| same_samples).map(|o| o.score),
                no_delta: (old.is_some() && !same_samples).then(|| EVAL_SAMPLES_DIFFER.to_owned()),
            }
        })
        .collect()
}

/// How to read the tables, said once in each language.
const LEGEND: Bilingual = bi!(
    "Output tok/s/GPU: higher is better; TTFT and TPOT (ms): lower is better; % in brackets: change against the frozen baseline; pp: the eval score's change in percentage points.",
    "输出 tok/s/GPU 越高越好，TTFT 与 TPOT（毫秒）越低越好；括号内的百分比为相对冻结基线的变化；pp 为评估分数变化的百分点。",
);

fn cell(new: &Measure, old: &Measure, pick: fn(&PointMetrics) -> f64, decimals: usize) -> String {
    match new.metrics() {
        None => "N/A".to_owned(),
        Some(n) => with_delta(pick(n), old.metrics().map(pick), decimals),
    }
}

/// The first lines: title, status, run, time, part, image and head.
fn heading(report: &AttemptReport) -> Bilingual {
    let title = report.title();
    let words = report.status.words();
    let status = match (&report.live, &report.detail) {
        (Some(live), _) => {
            let line = live.status_line();
            Bilingual::owned(
                format!("{} ({})", report.status, text(&line.en)),
                format!("{}（{}）", words.zh, text(&line.zh)),
            )
        }
        (None, Some(detail)) => Bilingual::owned(
            format!("{} ({})", report.status, text(detail)),
            format!(
                "{}（{}）",
                words.zh,
                text(&super::format::detail_words(detail).zh)
            ),
        ),
        (None, None) => Bilingual::owned(report.status.to_string(), words.zh),
    };
    let run = report
        .run
        .as_ref()
        .map(|r| {
            let url = r.attempt_url();
            Bilingual::owned(
                format!(
                    " · {}",
                    link(
                        &format!("Run {}, GitHub run attempt {}", r.id, r.attempt),
                        &url
                    )
                ),
                format!(
                    " · {}",
                    link(
                        &format!("运行 {}，GitHub 第 {} 次运行", r.id, r.attempt),
                        &url
                    )
                ),
            )
        })
        .unwrap_or_default();
    let at = timestamp(&report.at);
    let mut out = Bilingual::owned(
        format!("**{} · {}**{} · {at}", text(&title.en), status.en, run.en),
        format!("**{} · {}**{} · {at}", text(&title.zh), status.zh, run.zh),
    );
    if let Some(part) = report.part {
        out.push(
            format!("  \nPart {} of {}", part.index, part.count),
            format!("  \n第 {} 部分，共 {} 部分", part.index, part.count),
        );
    }
    out.push("\n\nImage: ", "\n\n镜像：");
    out.push_same(code(&report.image));
    if let Some(head) = &report.head {
        out.push(" · Head: ", " · 提交：");
        out.push_same(code(head));
    }
    out
}

/// The report's text: built once over the data, each piece in both
/// languages, then the Chinese folded under the English.
fn render_text(report: &AttemptReport) -> String {
    let mut out = heading(report);
    out.push(
        format!("  \n{}\n", LEGEND.en),
        format!("  \n{}\n", LEGEND.zh),
    );
    if let Some(live) = &report.live {
        let progress = live.progress();
        out.push(
            format!(
                "\n{} Rows appear as each benchmark job finishes; this comment is updated in place until the run ends.\n",
                progress.en
            ),
            format!(
                "\n{}每个基准测试作业完成后即显示其结果行；运行结束前本评论会原地更新。\n",
                progress.zh
            ),
        );
    }
    out.append(&failed_jobs(report));
    out.append(&repair_changes(report));
    out.append(&tables(report));
    for note in &report.notes {
        out.push(
            format!("\n{}\n", text(note)),
            format!("\n{}\n", text(&super::format::note_words(note).zh)),
        );
    }
    out.folded()
}

/// What the repair before this attempt changed: its commits' subjects and
/// the files it touched, or nothing.
fn repair_changes(report: &AttemptReport) -> Bilingual {
    let mut out = Bilingual::default();
    let Some(r) = &report.repair else {
        return out;
    };
    let short = |s: &str| code(&s.chars().take(7).collect::<String>());
    let (n, from, to) = (r.n, short(&r.from), short(&r.to));
    let (commits, files) = (r.subjects.len(), r.files.len());
    out.push(
        format!(
            "\n**What repair {n} changed** ({from} → {to}): {commits} commit(s), {files} file(s)\n"
        ),
        format!("\n**修复 {n} 的改动**（{from} → {to}）：{commits} 个提交，{files} 个文件\n"),
    );
    for s in &r.subjects {
        out.push_same(format!("- {}\n", text(s)));
    }
    for p in &r.playbook {
        let (entry, fix) = (code(&p.entry), p.fix);
        out.push(
            format!(
                "\nWhy playbook entry {entry} (fix {fix}): {}\n",
                text(&p.en)
            ),
            format!(
                "\n剧本条目 {entry}（第 {fix} 个修复）的原因：{}\n",
                text(&p.zh)
            ),
        );
    }
    if !r.files.is_empty() {
        let files: Vec<String> = r.files.iter().map(|f| code(f)).collect();
        out.push(
            format!("\nFiles touched: {}\n", files.join(", ")),
            format!("\n涉及的文件：{}\n", files.join("、")),
        );
    }
    out
}

/// `**Failed jobs:** [name](log) (conclusion), ...`, or nothing.
fn failed_jobs(report: &AttemptReport) -> Bilingual {
    if report.failed_jobs.is_empty() {
        return Bilingual::default();
    }
    let (mut en, mut zh) = (Vec::new(), Vec::new());
    for j in &report.failed_jobs {
        let name = match &j.url {
            Some(url) => link(&j.name, url),
            None => text(&j.name),
        };
        let conclusion = text(j.conclusion.as_str());
        en.push(format!("{name} ({conclusion})"));
        zh.push(format!("{name}（{conclusion}）"));
    }
    let mut out = Bilingual::owned(
        format!("\n**Failed jobs:** {}\n", en.join(", ")),
        format!("\n**失败的作业**：{}\n", zh.join("、")),
    );
    out.append(&triage(report));
    out.append(&super::sick_node::render(report.sick_nodes.as_ref()));
    out
}

/// One line per failed job whose log was read: where it ran, its class,
/// the playbook entry, and the matching lines quoted.
fn triage(report: &AttemptReport) -> Bilingual {
    let mut out = Bilingual::default();
    for j in &report.failed_jobs {
        let Some(t) = &j.triage else {
            continue;
        };
        let name = text(&j.name);
        let (node_en, node_zh) = match j.node.as_deref().map(code) {
            Some(node) => (format!(" on node {node}"), format!("（节点 {node}）")),
            None => (String::new(), String::new()),
        };
        let ids: Vec<String> = t.entries.iter().map(|e| code(e)).collect();
        let (entry_en, entry_zh) = if ids.is_empty() {
            (String::new(), String::new())
        } else {
            (
                format!(", playbook entry {}", ids.join(", then ")),
                format!("，剧本条目 {}", ids.join("、")),
            )
        };
        let class = t.class.words();
        out.push(
            format!("- {name}{node_en}: {}{entry_en}\n", class.en),
            format!("- {name}{node_zh}：{}{entry_zh}\n", class.zh),
        );
        for l in &t.lines {
            out.push_same(format!("  - {}\n", code(l)));
        }
    }
    if out.is_empty() {
        return out;
    }
    let mut titled = Bilingual::new("\n**Triage:**\n\n", "\n**分诊**：\n\n");
    titled.append(&out);
    titled
}

/// The result tables, eval table and N/A notes in both languages: the
/// Chinese block repeats them in full rather than pointing "above".
fn tables(report: &AttemptReport) -> Bilingual {
    let is_baseline = report.name == ReportName::Baseline;
    let no_delta = Measure::Missing {
        reason: String::new(),
    };
    let mut out = Bilingual::default();
    for section in &report.sections {
        let (scenario, topology) = (text(&section.scenario), text(&section.topology));
        out.push(
            format!(
                "\nScenario: {scenario} · Topology: {topology}\n\n| Concurrency | Output tok/s/GPU ↑ | TTFT ms ↓ | TPOT ms ↓ |\n"
            ),
            format!(
                "\n场景：{scenario} · 拓扑：{topology}\n\n| 并发 | 输出 tok/s/GPU ↑ | TTFT 毫秒 ↓ | TPOT 毫秒 ↓ |\n"
            ),
        );
        out.push_same("| ---: | ---: | ---: | ---: |\n");
        for row in &section.rows {
            // The baseline report shows the frozen numbers themselves.
            let old = if is_baseline { &no_delta } else { &row.old };
            out.push_same(format!(
                "| {} | {} | {} | {} |\n",
                row.conc,
                cell(
                    &row.new,
                    old,
                    |m| m.output_tput_per_gpu,
                    THROUGHPUT_DECIMALS
                ),
                cell(&row.new, old, |m| ms(m.mean_ttft), TTFT_MS_DECIMALS),
                cell(&row.new, old, |m| ms(m.mean_tpot), TPOT_MS_DECIMALS),
            ));
        }
    }
    let mut notes = na_notes(report);
    out.append(&eval_table(report, is_baseline, &mut notes));
    if !notes.is_empty() {
        out.push("\n**N/A:**\n", "\n**N/A**：\n");
        for (label, side, reason) in &notes {
            let label = text(label);
            let side = if *side && !is_baseline {
                bi!("result", "结果")
            } else {
                bi!("baseline", "基线")
            };
            out.push(
                format!("- {label}: {}: {}\n", side.en, text(reason)),
                format!(
                    "- {label}：{}：{}\n",
                    side.zh,
                    text(&super::format::reason_words(reason).zh)
                ),
            );
        }
    }
    out
}

/// The eval table, or nothing; an eval without a delta adds its reason
/// to `notes`.
fn eval_table(
    report: &AttemptReport,
    is_baseline: bool,
    notes: &mut Vec<(String, bool, String)>,
) -> Bilingual {
    let mut out = Bilingual::default();
    if report.evals.is_empty() {
        return out;
    }
    out.push(
        "\n| Eval | Concurrency | Score |\n| --- | ---: | ---: |\n",
        "\n| 评估 | 并发 | 分数 |\n| --- | ---: | ---: |\n",
    );
    for e in &report.evals {
        let label = format!("{} ({}) c{}", e.task, e.score_name, e.conc);
        let shown = match e.new {
            Some(new) => {
                if e.old.is_none() && !is_baseline {
                    let why = e
                        .no_delta
                        .as_deref()
                        .unwrap_or("the frozen baseline holds no score for this eval");
                    notes.push((label, false, why.to_owned()));
                }
                score(new, e.old)
            }
            None => {
                notes.push((label, true, "no score in this run".to_owned()));
                "N/A".to_owned()
            }
        };
        out.push_same(format!(
            "| {} ({}) | {} | {shown} |\n",
            text(&e.task),
            text(&e.score_name),
            e.conc
        ));
    }
    out
}

/// `(label, is_result_side, reason)` of every N/A cell.
fn na_notes(report: &AttemptReport) -> Vec<(String, bool, String)> {
    let mut notes = Vec::new();
    for row in report.sections.iter().flat_map(|s| &s.rows) {
        if let Measure::Missing { reason } = &row.new {
            notes.push((row.label.clone(), true, reason.clone()));
        } else if let Measure::Missing { reason } = &row.old {
            notes.push((row.label.clone(), false, reason.clone()));
        }
    }
    notes
}

fn render_one(report: &AttemptReport) -> RenderedComment {
    let key = report.key();
    let body = format!(
        "{}{}",
        hidden_block(&key, &hidden_json(report)),
        render_text(report)
    );
    RenderedComment { key, body }
}

/// Renders a report as one comment, or as parts when it exceeds
/// [`MAX_COMMENT_CHARS`].
pub fn render_report(report: &AttemptReport) -> Result<Vec<RenderedComment>, ReportError> {
    render_report_with_limit(report, MAX_COMMENT_CHARS)
}

/// [`render_report`] with another limit (tests use a small one).
pub fn render_report_with_limit(
    report: &AttemptReport,
    limit: usize,
) -> Result<Vec<RenderedComment>, ReportError> {
    let mut whole = report.clone();
    whole.part = None;
    let single = render_one(&whole);
    if single.body.chars().count() <= limit {
        return Ok(vec![single]);
    }
    // Items are packed greedily; each trial is rendered with the widest part
    // numbers so the final numbering can only make a part shorter.
    enum Item<'a> {
        Row(usize, &'a ReportRow),
        Eval(&'a EvalComparison),
    }
    let items: Vec<Item> = whole
        .sections
        .iter()
        .enumerate()
        .flat_map(|(i, s)| s.rows.iter().map(move |r| Item::Row(i, r)))
        .chain(whole.evals.iter().map(Item::Eval))
        .collect();
    let widest = PartInfo {
        index: MAX_PARTS,
        count: MAX_PARTS,
    };
    let build = |chunk: &[Item], first: bool| -> AttemptReport {
        let mut part = whole.clone();
        part.sections = Vec::new();
        part.evals = Vec::new();
        if !first {
            part.notes = Vec::new();
            part.failed_jobs = Vec::new();
            part.repair = None;
        }
        for item in chunk {
            match item {
                Item::Row(si, row) => {
                    let source = &whole.sections[*si];
                    match part.sections.last_mut() {
                        Some(last)
                            if last.scenario == source.scenario
                                && last.topology == source.topology =>
                        {
                            last.rows.push((*row).clone())
                        }
                        _ => part.sections.push(ReportSection {
                            scenario: source.scenario.clone(),
                            topology: source.topology.clone(),
                            rows: vec![(*row).clone()],
                        }),
                    }
                }
                Item::Eval(e) => part.evals.push((*e).clone()),
            }
        }
        part
    };
    let fits = |chunk: &[Item], first: bool| {
        let mut trial = build(chunk, first);
        trial.part = Some(widest);
        render_one(&trial).body.chars().count() <= limit
    };
    let too_large = || ReportError::TooLarge {
        marker: whole.key().to_string(),
        limit,
    };
    // A part's length grows with every item added, so the largest prefix
    // that fits is found by galloping then bisecting: O(log n) renders per
    // part instead of one per row.
    let mut chunks: Vec<std::ops::Range<usize>> = Vec::new();
    let mut start = 0;
    while start < items.len() {
        let first = chunks.is_empty();
        if !fits(&items[start..start + 1], first) {
            return Err(too_large());
        }
        let (mut good, mut step) = (start + 1, 1);
        let mut bad = loop {
            let probe = (good + step).min(items.len());
            if probe == good {
                break None;
            }
            if fits(&items[start..probe], first) {
                good = probe;
                step *= 2;
            } else {
                break Some(probe);
            }
        };
        while let Some(b) = bad {
            if b - good <= 1 {
                break;
            }
            let mid = good + (b - good) / 2;
            if fits(&items[start..mid], first) {
                good = mid;
            } else {
                bad = Some(mid);
            }
        }
        chunks.push(start..good);
        start = good;
    }
    if chunks.is_empty() {
        chunks.push(0..0);
    }
    let count = u32::try_from(chunks.len())
        .ok()
        .filter(|c| *c <= MAX_PARTS)
        .ok_or_else(|| ReportError::TooLarge {
            marker: whole.key().to_string(),
            limit,
        })?;
    Ok(chunks
        .iter()
        .enumerate()
        .map(|(i, chunk)| {
            let mut part = build(&items[chunk.clone()], i == 0);
            part.part = Some(PartInfo {
                index: i as u32 + 1,
                count,
            });
            render_one(&part)
        })
        .collect())
}

/// Reads the report record of a comment, checking that it names what its
/// marker names.
pub fn parse_report(record: &HiddenRecord<'_>) -> Result<AttemptReport, MarkerError> {
    let MarkerKey::Report { .. } = &record.key else {
        return Err(MarkerError::WrongKind {
            expected: "klaud-report",
            found: record.key.to_string(),
        });
    };
    let report: AttemptReport = parse_json(record)?;
    if report.key() != record.key {
        return Err(MarkerError::Mismatch {
            marker: record.key.to_string(),
            found: report.key().to_string(),
        });
    }
    Ok(report)
}

/// Why parts do not make one report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReassembleError {
    /// No parts were given.
    #[error("no parts to reassemble")]
    Empty,
    /// Parts of different records or counts were mixed.
    #[error("parts disagree: {0}")]
    Inconsistent(String),
    /// Some parts are absent.
    #[error("parts missing: {0:?}")]
    Missing(Vec<u32>),
}

/// Joins the records of every part of a split report (in any order) into
/// the whole report. A single unsplit record is returned as is.
pub fn reassemble(mut parts: Vec<AttemptReport>) -> Result<AttemptReport, ReassembleError> {
    let first = parts.first().ok_or(ReassembleError::Empty)?;
    let Some(info) = first.part else {
        return if parts.len() == 1 {
            Ok(parts.remove(0))
        } else {
            Err(ReassembleError::Inconsistent(
                "an unsplit record among parts".into(),
            ))
        };
    };
    let (run, candidate, name, count) = (
        first.owner_run,
        first.candidate.clone(),
        first.name,
        info.count,
    );
    for p in &parts {
        let same = p.owner_run == run && p.candidate == candidate && p.name == name;
        if !same || p.part.map(|i| i.count) != Some(count) {
            return Err(ReassembleError::Inconsistent(format!(
                "{} does not belong with {}",
                p.key(),
                first.key()
            )));
        }
    }
    parts.sort_by_key(|p| p.part.map_or(0, |i| i.index));
    parts.dedup_by_key(|p| p.part.map_or(0, |i| i.index));
    let present: Vec<u32> = parts
        .iter()
        .filter_map(|p| p.part.map(|i| i.index))
        .collect();
    let missing: Vec<u32> = (1..=count).filter(|i| !present.contains(i)).collect();
    if !missing.is_empty() || present.len() != count as usize {
        return Err(ReassembleError::Missing(missing));
    }
    let mut whole = parts[0].clone();
    whole.part = None;
    whole.sections = Vec::new();
    whole.evals = Vec::new();
    for p in parts {
        for section in p.sections {
            match whole.sections.last_mut() {
                Some(last)
                    if last.scenario == section.scenario && last.topology == section.topology =>
                {
                    last.rows.extend(section.rows)
                }
                _ => whole.sections.push(section),
            }
        }
        whole.evals.extend(p.evals);
    }
    Ok(whole)
}
