//! The pull request's title and body (see `klaud_lifecycle::report`).
//!
//! The body is opened with only the placeholder `<!-- klaud-baseline -->`.
//! Once the baseline is frozen, the placeholder is replaced by the block
//! `<!-- klaud-baseline-body -->…<!-- /klaud-baseline-body -->`, which holds
//! the hidden record (provenance and baseline, the frozen truth later
//! reports compare against) and the rendered goal, provenance and table in
//! English and Chinese. Text outside the markers belongs to others (bots
//! that append to PR bodies) and is kept byte for byte.

use klaud_render::{Bilingual, bi};
use serde::{Deserialize, Serialize};

use super::format::{
    THROUGHPUT_DECIMALS, TPOT_MS_DECIMALS, TTFT_MS_DECIMALS, clock_words, code, link, ms, number,
    reason_words, score, text, title_text,
};
use super::markers::hidden_json;
use crate::baseline::{Baseline, BaselineValue};
use klaud_planner::audit::{AuditResult, ItemKind, UncheckedCause};
use klaud_planner::provenance::ImageVersions;

/// The bot's display name in titles.
pub const DEFAULT_DISPLAY_NAME: &str = "Klaud Cold";
/// What a fresh PR body starts with.
pub const BASELINE_PLACEHOLDER: &str = "<!-- klaud-baseline -->";
/// Start of the baseline block.
pub const BASELINE_START: &str = "<!-- klaud-baseline-body -->";
/// End of the baseline block.
pub const BASELINE_END: &str = "<!-- /klaud-baseline-body -->";
/// Start of the hidden record inside the block.
const RECORD_START: &str = "<!-- klaud-baseline-record\n";

/// The engine's display name for a framework and image repository:
/// `SGLang`, `vLLM`, `TensorRT-LLM`, `ATOM`, with `ROCm` for ROCm builds and
/// `Dynamo` for Dynamo runtime images, e.g. `SGLang ROCm`.
pub fn engine_display(framework: &str, repository: &str) -> String {
    let repo = repository.to_ascii_lowercase();
    let last = repo.rsplit(['/', '#']).next().unwrap_or(&repo);
    let framework = framework.to_ascii_lowercase();
    let engine = |s: &str| -> Option<&'static str> {
        if s.contains("tensorrt") || s.contains("trtllm") || s.split(['-', '_']).any(|t| t == "trt")
        {
            Some("TensorRT-LLM")
        } else if s.contains("atom") {
            Some("ATOM")
        } else if s.contains("sglang") || s.split(['-', '_']).any(|t| t == "sgl") {
            Some("SGLang")
        } else if s.contains("vllm") {
            Some("vLLM")
        } else if s.contains("tilert") {
            Some("TileRT")
        } else {
            None
        }
    };
    let Some(name) = engine(last).or_else(|| engine(&framework)) else {
        return title_text(&framework);
    };
    let mut out = String::new();
    if repo.contains("dynamo") {
        out.push_str("Dynamo ");
    }
    out.push_str(name);
    if repo.contains("rocm") && name != "ATOM" {
        out.push_str(" ROCm");
    }
    out
}

/// `[Klaud Cold] Update <key> <Engine> image to <tag> / 将 <key> 的 <Engine> 镜像更新至 <tag>`.
pub fn pr_title(display_name: &str, key: &str, engine: &str, tag: &str) -> String {
    let (d, k, e, t) = (
        title_text(display_name),
        title_text(key),
        title_text(engine),
        title_text(tag),
    );
    format!("[{d}] Update {k} {e} image to {t} / 将 {k} 的 {e} 镜像更新至 {t}")
}

/// The body a PR is opened with.
pub fn initial_body() -> String {
    format!("{BASELINE_PLACEHOLDER}\n")
}

/// The body a PR is opened with, its footer included (see
/// [`super::footer`]); `dashboard` is the dashboard issue's number.
pub fn opening_body(dashboard: Option<u64>) -> String {
    super::footer::splice_footer(&initial_body(), &super::footer::render_footer(dashboard))
}

/// Upstream source commits between the old and new image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamRange {
    /// Source repository, `owner/name`.
    pub repository: String,
    /// Old commit.
    pub from: String,
    /// New commit.
    pub to: String,
    /// Commits in between, when known.
    pub commits: Option<u64>,
    /// Compare URL.
    pub compare_url: Option<String>,
    /// The flag and environment audit of this range, when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<AuditResult>,
}

/// The PR body's audit line in both languages: what was checked against
/// the upstream change and what it found.
pub fn audit_line(u: &UpstreamRange) -> Option<Bilingual> {
    let a = u.audit.as_ref()?;
    let mut line = match a {
        AuditResult::Present { flags, env } => Bilingual::owned(
            format!(
                "**Flags and environment:** every recipe flag and environment variable is still present ({flags} flags and {env} environment variables checked against the upstream change)."
            ),
            format!(
                "**参数与环境变量**：所有配方参数和环境变量仍然存在（已对照上游变更检查 {flags} 个参数和 {env} 个环境变量）。"
            ),
        ),
        AuditResult::Removed { flags, env, items } => {
            let (mut en, mut zh) = (Vec::new(), Vec::new());
            for i in items {
                let (name, kind) = (code(&i.name), kind_words(i.kind));
                let (source, file) = (code(&i.source), code(&i.file));
                let by = i.commit.as_deref().map(|c| {
                    let short: String = c.chars().take(12).collect();
                    link(
                        &short,
                        &format!("https://github.com/{}/commit/{c}", u.repository),
                    )
                });
                match by {
                    Some(by) => {
                        en.push(format!(
                            "{name} ({}, set in {source}, removed from {file} by {by})",
                            kind.en
                        ));
                        zh.push(format!(
                            "{name}（{}，设置于 {source}，由 {by} 从 {file} 中删除）",
                            kind.zh
                        ));
                    }
                    None => {
                        en.push(format!(
                            "{name} ({}, set in {source}, removed from {file} in this range)",
                            kind.en
                        ));
                        zh.push(format!(
                            "{name}（{}，设置于 {source}，在此范围内从 {file} 中删除）",
                            kind.zh
                        ));
                    }
                }
            }
            Bilingual::owned(
                format!(
                    "**Flags and environment:** removed upstream: {} ({flags} flags and {env} environment variables checked).",
                    en.join("; ")
                ),
                format!(
                    "**参数与环境变量**：上游已删除：{}（共检查 {flags} 个参数和 {env} 个环境变量）。",
                    zh.join("；")
                ),
            )
        }
        // The English shows the audit's own reason, which names the
        // specifics; the Chinese the translated cause.
        AuditResult::Unchecked {
            flags,
            env,
            reason,
            cause,
        } => Bilingual::owned(
            format!(
                "**Flags and environment:** not checked: {}; this does not block the candidate ({flags} flags and {env} environment variables collected).",
                text(reason)
            ),
            format!(
                "**参数与环境变量**：未检查：{}；这不会阻止该候选（已收集 {flags} 个参数和 {env} 个环境变量）。",
                cause_words(*cause).zh
            ),
        ),
    };
    line.push_same("  \n");
    Some(line)
}

/// A flag or an environment variable, in both languages.
fn kind_words(kind: ItemKind) -> Bilingual {
    match kind {
        ItemKind::Flag => bi!("flag", "参数"),
        ItemKind::Env => bi!("environment variable", "环境变量"),
    }
}

/// Why the audit did not check, in both languages (the English line shows
/// the audit's own reason, which names the specifics).
fn cause_words(cause: UncheckedCause) -> Bilingual {
    match cause {
        UncheckedCause::TooLarge => bi!(
            "the upstream comparison is too large to read whole",
            "上游比较过大，无法完整读取"
        ),
        UncheckedCause::Unavailable => bi!(
            "the upstream comparison is not available",
            "无法获取上游比较"
        ),
        UncheckedCause::NotLinear => bi!(
            "the new commit does not descend from the old one",
            "新提交并非旧提交的后继"
        ),
        UncheckedCause::NotConfigured => bi!(
            "no flag and environment definitions are configured for this upstream repository",
            "未为该上游仓库配置参数和环境变量定义"
        ),
        UncheckedCause::Unreadable => bi!(
            "a file of the benchmark repository could not be read",
            "基准测试仓库中的文件无法读取"
        ),
    }
}

/// The receipt note of an audit that found deletions: the first deleted
/// items and the commits that deleted them.
pub fn audit_note(u: &UpstreamRange) -> Option<Bilingual> {
    let items = u.audit.as_ref()?.removed();
    if items.is_empty() {
        return None;
    }
    let (mut en, mut zh) = (Vec::new(), Vec::new());
    for i in items {
        let (kind, name, repository) = (kind_words(i.kind), &i.name, &u.repository);
        match &i.commit {
            Some(c) => {
                en.push(format!("{} {name} (removed by {repository}@{c})", kind.en));
                zh.push(format!("{} {name}（由 {repository}@{c} 删除）", kind.zh));
            }
            None => {
                let (file, from, to) = (&i.file, &u.from, &u.to);
                en.push(format!(
                    "{} {name} (removed from {file} between {from} and {to})",
                    kind.en
                ));
                zh.push(format!(
                    "{} {name}（在 {from} 与 {to} 之间从 {file} 中删除）",
                    kind.zh
                ));
            }
        }
    }
    Some(Bilingual::owned(
        format!(
            "the recipes use what the new engine no longer defines: {}; nothing was dispatched",
            en.join("; ")
        ),
        format!(
            "配方使用了新引擎已不再定义的内容：{}；未进行任何调度",
            zh.join("；")
        ),
    ))
}

/// Where the new image comes from and why it was chosen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// Engine display name ([`engine_display`]).
    pub engine: String,
    /// The image on the base branch.
    pub old_image: String,
    /// The pinned candidate image.
    pub new_image: String,
    /// Old tag, when the old image has one.
    pub old_tag: Option<String>,
    /// New tag.
    pub new_tag: String,
    /// The index digest pinned.
    pub digest: String,
    /// The image's revision label, when present.
    pub revision: Option<String>,
    /// The clock that ordered the tags (`registry push time`, `image created
    /// label`, `tag version`).
    pub clock: Option<String>,
    /// Upstream commit range, when a source repository is configured.
    pub upstream: Option<UpstreamRange>,
    /// Why a nightly was taken rather than a release, when it was.
    pub not_release_reason: Option<String>,
    /// What the bump covered beyond the one master entry: group members
    /// and recipes aligned or left (from `klaud_planner::bump::BumpPlan`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<BumpScope>,
    /// Toolkit and engine versions the two images declare, when the new
    /// image's config was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versions: Option<VersionsCompared>,
}

/// The versions the old and the new image declare in their configs
/// (labels and environment), side by side.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionsCompared {
    /// The old image's, `None` when its config could not be read (a pruned
    /// tag).
    pub old: Option<ImageVersions>,
    /// The new image's.
    pub new: ImageVersions,
    /// The planner found the old tag gone from its registry (pruned
    /// upstream): nodes that do not have it cached cannot pull the image
    /// the base branch runs, which makes the bump more than an upgrade.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub old_pruned: bool,
}

impl VersionsCompared {
    /// Whether either side declares anything.
    pub fn is_notable(&self) -> bool {
        !self.new.is_empty() || self.old.as_ref().is_some_and(|o| !o.is_empty())
    }

    /// The side-by-side table: a row per field either image declares; the
    /// new cell says "unchanged" when equal; a value an image does not
    /// declare is shown as not declared, never guessed.
    fn table(&self) -> Bilingual {
        const MISSING: Bilingual = bi!("not declared", "未声明");
        let mut out = bi!(
            "| Component | Old image | New image |\n| --- | --- | --- |\n",
            "| 组件 | 原镜像 | 新镜像 |\n| --- | --- | --- |\n",
        );
        let old = self.old.clone().unwrap_or_default();
        for ((name, new), (_, was)) in self.new.rows().into_iter().zip(old.rows()) {
            if new.is_none() && was.is_none() {
                continue;
            }
            let was_cell = match (was, self.old.is_some()) {
                (Some(v), _) => Bilingual::same(code(v)),
                (None, true) => MISSING,
                (None, false) => Bilingual::same("—"),
            };
            let new_cell = match new {
                Some(v) if was == Some(v) => bi!("unchanged", "未变"),
                Some(v) => Bilingual::same(code(v)),
                None => MISSING,
            };
            let name = field_words(name);
            out.push(
                format!("| {} | {} | {} |\n", name.en, was_cell.en, new_cell.en),
                format!("| {} | {} | {} |\n", name.zh, was_cell.zh, new_cell.zh),
            );
        }
        if self.old.is_none() {
            out.push(
                "\nThe old image's config could not be read (its tag is no longer in the registry), so its column is empty.\n",
                "\n原镜像的配置无法读取（标签已不在镜像仓库中），因此原镜像一列为空。\n",
            );
        }
        out
    }
}

/// A row name of the versions table; fields without a translation read
/// the same in both languages.
fn field_words(name: &str) -> Bilingual {
    match name {
        "engine version" => bi!("engine version", "引擎版本"),
        "engine build commit" => bi!("engine build commit", "引擎构建提交"),
        other => Bilingual::same(other),
    }
}

/// The reach of one bump commit, as the PR body states it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BumpScope {
    /// Config keys bumped together (more than one for a family group).
    pub keys: Vec<String>,
    /// Recipes whose disagreeing image was aligned to the new image.
    pub aligned: Vec<String>,
    /// Recipes whose disagreeing image was left as it was.
    pub left: Vec<String>,
}

impl BumpScope {
    /// The scope of a computed bump.
    pub fn of(plan: &klaud_planner::bump::BumpPlan) -> Self {
        let owned = |paths: Vec<&str>| paths.into_iter().map(str::to_owned).collect();
        Self {
            keys: plan.keys.clone(),
            aligned: owned(plan.aligned_recipes()),
            left: owned(plan.left_recipes()),
        }
    }

    /// Whether the scope says more than "this one key": a group bumped
    /// together, or recipes aligned or left. A plain bump records no scope,
    /// so its PR body stays as it was before scopes were kept.
    pub fn is_notable(&self) -> bool {
        self.keys.len() > 1 || !self.aligned.is_empty() || !self.left.is_empty()
    }

    fn lines(&self) -> Bilingual {
        let list = |items: &[String]| items.iter().map(|i| code(i)).collect::<Vec<_>>().join(", ");
        let mut out = Bilingual::default();
        if self.keys.len() > 1 {
            let keys = list(&self.keys);
            out.push(
                format!("**Bumped together (shared recipes):** {keys}  \n"),
                format!("**共享配方，一并更新**：{keys}  \n"),
            );
        }
        if !self.aligned.is_empty() {
            let aligned = list(&self.aligned);
            out.push(
                format!("**Recipes aligned to the new image:** {aligned}  \n"),
                format!("**已对齐到新镜像的配方**：{aligned}  \n"),
            );
        }
        if !self.left.is_empty() {
            let left = list(&self.left);
            out.push(
                format!("**Recipes left on their own image:** {left}  \n"),
                format!("**保留原镜像的配方**：{left}  \n"),
            );
        }
        out
    }
}

/// `from..to` with commits cut to 12 characters, as `git log` ranges read.
fn short_range(u: &UpstreamRange) -> String {
    let cut = |s: &str| s.chars().take(12).collect::<String>();
    format!("{}..{}", cut(&u.from), cut(&u.to))
}

/// The frozen record inside the body block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrozenBaseline {
    /// Provenance.
    pub provenance: Provenance,
    /// Baseline.
    pub baseline: Baseline,
}

/// Why the baseline has no eval table when the results source publishes
/// no evals at all (frozen before evals were, or no `evaluations` route).
const EVAL_NA: Bilingual = bi!(
    "no baseline: the published benchmarks carry no eval scores",
    "无基线：公开的基准测试结果不含评估分数",
);

/// The frozen published evals as the incumbent's body shows them
/// (`SUITE/METRIC · cN | SCORE% | N`), or the N/A line saying why there
/// are none. The parallelism is named only when the evals ran with more
/// than one.
fn eval_lines(b: &Baseline) -> Bilingual {
    if b.evals.is_empty() {
        let why = match &b.evals_unavailable {
            None => EVAL_NA,
            Some(why) => Bilingual::owned(
                format!("no baseline: {}", text(why)),
                format!("无基线：{}", text(&reason_words(why).zh)),
            ),
        };
        return Bilingual::owned(
            format!("\n**Eval:** N/A ({})\n", why.en),
            format!("\n**评估**：N/A（{}）\n", why.zh),
        );
    }
    let topologies: std::collections::BTreeSet<(u64, u64, bool)> = b
        .evals
        .iter()
        .map(|e| (e.decode.tp, e.decode.ep, e.decode.dp_attn))
        .collect();
    let mut out = bi!(
        "\n| Eval | Score ↑ | Samples |\n| --- | ---: | ---: |\n",
        "\n| 评估 | 分数 ↑ | 样本数 |\n| --- | ---: | ---: |\n",
    );
    for e in &b.evals {
        let mut label = format!("{}/{}", e.task, e.score_name);
        if let Some(c) = e.conc {
            label.push_str(&format!(" · c{c}"));
        }
        if topologies.len() > 1 {
            label.push_str(&format!(" · TP{} EP{}", e.decode.tp, e.decode.ep));
            if e.decode.dp_attn {
                label.push_str(" DPA");
            }
        }
        let samples = e
            .samples
            .map_or_else(|| "N/A".to_owned(), |n| number(n as f64, 0));
        out.push_same(format!(
            "| {} | {} | {samples} |\n",
            text(&label),
            score(e.score, None)
        ));
    }
    out
}

const TABLE_HEAD: Bilingual = bi!(
    "| Point | Total tok/s/GPU ↑ | Output tok/s/GPU ↑ | TTFT ms ↓ | TPOT ms ↓ |\n| --- | ---: | ---: | ---: | ---: |\n",
    "| 点位 | 总 tok/s/GPU ↑ | 输出 tok/s/GPU ↑ | TTFT 毫秒 ↓ | TPOT 毫秒 ↓ |\n| --- | ---: | ---: | ---: | ---: |\n",
);

/// The points' table: headed in each language, the rows are numbers and
/// labels, the same in both.
fn baseline_table(baseline: &Baseline) -> Bilingual {
    let mut out = TABLE_HEAD;
    for p in &baseline.points {
        match p.metrics() {
            Some(m) => out.push_same(format!(
                "| {} | {} | {} | {} | {} |\n",
                text(&p.label),
                number(m.tput_per_gpu, THROUGHPUT_DECIMALS),
                number(m.output_tput_per_gpu, THROUGHPUT_DECIMALS),
                number(ms(m.mean_ttft), TTFT_MS_DECIMALS),
                number(ms(m.mean_tpot), TPOT_MS_DECIMALS)
            )),
            None => out.push_same(format!("| {} | N/A | N/A | N/A | N/A |\n", text(&p.label))),
        }
    }
    out
}

/// `(reason, labels)` of the N/A points, reasons in first-seen order.
fn unavailable(baseline: &Baseline) -> Vec<(String, Vec<String>)> {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for p in &baseline.points {
        if let BaselineValue::Unavailable { reason } = &p.value {
            match groups.iter_mut().find(|(r, _)| r == reason) {
                Some((_, labels)) => labels.push(p.label.clone()),
                None => groups.push((reason.clone(), vec![p.label.clone()])),
            }
        }
    }
    groups
}

fn sources(baseline: &Baseline, word: &str) -> String {
    baseline
        .source_urls
        .iter()
        .enumerate()
        .map(|(i, url)| link(&format!("{word} {}", i + 1), url))
        .collect::<Vec<_>>()
        .join(", ")
}

/// When and by which producer runs the frozen numbers were published:
/// `published 2026-09-15 by run `34896669482``, one entry per run when
/// the points come from several, with how many points each gave.
fn published_words(baseline: &Baseline) -> Bilingual {
    let publications = baseline.publications();
    if publications.is_empty() {
        return Bilingual::owned(
            format!("nothing published as of {}", baseline.date),
            format!("截至 {} 无公开结果", baseline.date),
        );
    }
    let several = publications.len() > 1;
    let (mut en, mut zh) = (Vec::new(), Vec::new());
    for p in &publications {
        // The id, not a link: the hidden record keeps each point's run
        // URL, and the body stays readable where the producer's Actions
        // pages are not (a mirror, the sandbox).
        let mut run = Bilingual::same(p.run_id.map(|id| code(&id.to_string())).unwrap_or_default());
        let count = if several {
            Bilingual::owned(
                format!(
                    " ({} point{})",
                    p.points,
                    if p.points == 1 { "" } else { "s" }
                ),
                format!("（{} 个点位）", p.points),
            )
        } else {
            Bilingual::default()
        };
        // An AgentX replay is only comparable on its dataset, which the
        // producer run named.
        if let Some(words) = p.run_id.and_then(|id| dataset_words(baseline, id)) {
            run.push(format!(", {}", words.en), format!("，{}", words.zh));
        }
        let date = &p.date;
        if run.en.is_empty() {
            en.push(format!("{date}{}", count.en));
            zh.push(format!("{date} 发布{}", count.zh));
        } else {
            en.push(format!("{date} by run {}{}", run.en, count.en));
            zh.push(format!("{date} 发布，运行 {}{}", run.zh, count.zh));
        }
    }
    Bilingual::owned(format!("published {}", en.join(", ")), zh.join("；"))
}

/// The sentence saying the old tag was pruned upstream, when the planner
/// found it so; empty otherwise.
fn pruned_line(p: &Provenance) -> Bilingual {
    if !p.versions.as_ref().is_some_and(|v| v.old_pruned) {
        return Bilingual::default();
    }
    let old = code(p.old_tag.as_deref().unwrap_or(&p.old_image));
    Bilingual::owned(
        format!(
            "**Old image pruned upstream:** tag {old} is gone from its registry (it returns 404), so fresh nodes without a cached copy cannot pull the current image; merging this PR restores a pullable one.  \n"
        ),
        format!(
            "**原镜像已被上游删除**：标签 {old} 已不在镜像仓库中（返回 404），没有缓存的新节点无法拉取当前镜像；合并此 PR 即恢复为可拉取的镜像。  \n"
        ),
    )
}

/// Renders the baseline block that replaces the placeholder: the hidden
/// record, then the text built once over the record, each piece in both
/// languages, the Chinese folded under the English.
pub fn render_baseline_block(frozen: &FrozenBaseline) -> String {
    let p = &frozen.provenance;
    let b = &frozen.baseline;
    let engine = text(&p.engine);
    let (old_image, new_image) = (code(&p.old_image), code(&p.new_image));
    let mut out = Bilingual::owned(
        format!("**Goal:** Update {engine} image from {old_image} to {new_image}.  \n"),
        format!("**目标**：将 {engine} 镜像从 {old_image} 更新为 {new_image}。  \n"),
    );
    let old_tag = p.old_tag.as_deref().map_or("—".to_owned(), code);
    let (new_tag, digest) = (code(&p.new_tag), code(&p.digest));
    out.push(
        format!("**Provenance:** tag {old_tag} → {new_tag} · digest {digest}"),
        format!("**来源**：标签 {old_tag} → {new_tag} · 摘要 {digest}"),
    );
    if let Some(rev) = &p.revision {
        let rev = code(rev);
        out.push(format!(" · revision {rev}"), format!(" · 修订 {rev}"));
    }
    if let Some(clock) = &p.clock {
        let clock = clock_words(clock);
        out.push(
            format!(" · ordered by {}", text(&clock.en)),
            format!(" · 排序依据：{}", text(&clock.zh)),
        );
    }
    // A newer build on another ROCm or CUDA changes more than the engine.
    let base_moves = p
        .old_tag
        .as_deref()
        .map(|old| klaud_planner::tracks::base_changes(old, &p.new_tag))
        .unwrap_or_default()
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if !base_moves.is_empty() {
        let moves = text(&base_moves);
        out.push(
            format!(" · also moves {moves}"),
            format!(" · 同时更换基础环境：{moves}"),
        );
    }
    out.push_same("  \n");
    if let Some(u) = &p.upstream {
        let range = short_range(u);
        let shown = match &u.compare_url {
            Some(url) => link(&range, url),
            None => code(&range),
        };
        let count = u.commits.map_or_else(Bilingual::default, |n| {
            Bilingual::owned(format!(" · {n} commits"), format!(" · {n} 个提交"))
        });
        let repository = text(&u.repository);
        out.push(
            format!("**Upstream:** {repository} {shown}{}  \n", count.en),
            format!("**上游**：{repository} {shown}{}  \n", count.zh),
        );
        out.append(&audit_line(u).unwrap_or_default());
    }
    if let Some(why) = &p.not_release_reason {
        out.push(
            format!("**Why not a release:** {}  \n", text(why)),
            format!(
                "**为何不用正式版本**：{}  \n",
                text(&format!("原文：{why}"))
            ),
        );
    }
    out.append(&pruned_line(p));
    if let Some(scope) = &p.scope {
        out.append(&scope.lines());
    }
    if let Some(v) = p.versions.as_ref().filter(|v| v.is_notable()) {
        out.push(
            "\n**Image versions** (declared in the image configs):\n\n",
            "\n**镜像版本**（镜像配置中声明的）：\n\n",
        );
        out.append(&v.table());
        out.push_same("\n");
    }
    let (published, image) = (published_words(b), code(&b.image));
    out.push(
        format!("**Baseline:** {} · {image}  \n", published.en),
        format!("**基线**：{} · {image}  \n", published.zh),
    );
    let sources = sources(b, "API");
    out.push(
        format!("Mean latency · Sources: {sources}\n\n"),
        format!("平均延迟 · 来源：{sources}\n\n"),
    );
    out.append(&baseline_table(b));
    let na = unavailable(b);
    if !na.is_empty() {
        let (mut en, mut zh) = (Vec::new(), Vec::new());
        for (reason, labels) in &na {
            let labels: Vec<String> = labels.iter().map(|l| text(l)).collect();
            en.push(format!("{}: {}.", labels.join(", "), text(reason)));
            zh.push(format!(
                "{}：{}。",
                labels.join("、"),
                text(&reason_words(reason).zh)
            ));
        }
        out.push(
            format!("\n**Note:** {}\n", en.join(" ")),
            format!("\n**说明**：{}\n", zh.join(" ")),
        );
    }
    out.append(&eval_lines(b));
    format!(
        "{BASELINE_START}\n{RECORD_START}{}\n-->\n{}{BASELINE_END}",
        hidden_json(frozen),
        out.folded()
    )
}

/// Why the block could not be placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpliceError {
    /// Neither the placeholder nor a block is in the body.
    #[error("the PR body has neither {BASELINE_PLACEHOLDER} nor a baseline block")]
    NotFound,
    /// More than one placeholder or block.
    #[error("the PR body has {0} baseline markers; expected one")]
    Ambiguous(usize),
    /// A block start without its end.
    #[error("the PR body's baseline block has no {BASELINE_END}")]
    Unterminated,
}

/// Replaces the placeholder, or an existing block, with `block`, keeping
/// every byte outside the markers. Returns the new body; when it equals the
/// old one there is nothing to edit.
pub fn splice_baseline(body: &str, block: &str) -> Result<String, SpliceError> {
    let starts: Vec<usize> = body.match_indices(BASELINE_START).map(|(i, _)| i).collect();
    match starts.as_slice() {
        [start] => {
            let end = body[*start..]
                .find(BASELINE_END)
                .map(|i| start + i + BASELINE_END.len())
                .ok_or(SpliceError::Unterminated)?;
            Ok(format!("{}{block}{}", &body[..*start], &body[end..]))
        }
        [] => {
            let found: Vec<usize> = body
                .match_indices(BASELINE_PLACEHOLDER)
                .map(|(i, _)| i)
                .collect();
            match found.as_slice() {
                [at] => Ok(format!(
                    "{}{block}{}",
                    &body[..*at],
                    &body[at + BASELINE_PLACEHOLDER.len()..]
                )),
                [] => Err(SpliceError::NotFound),
                many => Err(SpliceError::Ambiguous(many.len())),
            }
        }
        many => Err(SpliceError::Ambiguous(many.len())),
    }
}

/// Why a frozen baseline could not be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrozenError {
    /// The block has no hidden record, or it is unterminated.
    #[error("the baseline block has no readable hidden record")]
    NoRecord,
    /// The record is not valid.
    #[error("the baseline block's hidden record is not valid: {0}")]
    Json(String),
    /// Markers are broken.
    #[error(transparent)]
    Splice(#[from] SpliceError),
}

/// Reads the frozen baseline back from a body: `Ok(None)` while only the
/// placeholder is there.
pub fn parse_baseline_block(body: &str) -> Result<Option<FrozenBaseline>, FrozenError> {
    let starts: Vec<usize> = body.match_indices(BASELINE_START).map(|(i, _)| i).collect();
    let start = match starts.as_slice() {
        [] => return Ok(None),
        [one] => *one,
        many => return Err(SpliceError::Ambiguous(many.len()).into()),
    };
    let block = &body[start..];
    let end = block.find(BASELINE_END).ok_or(SpliceError::Unterminated)?;
    let block = &block[..end].replace("\r\n", "\n");
    let record = block
        .find(RECORD_START)
        .map(|i| &block[i + RECORD_START.len()..])
        .ok_or(FrozenError::NoRecord)?;
    let json_end = record.find("\n-->").ok_or(FrozenError::NoRecord)?;
    serde_json::from_str(&record[..json_end])
        .map(Some)
        .map_err(|e| FrozenError::Json(e.to_string()))
}

/// The dataset words of producer run `run` for the PR body's baseline
/// line (`dataset semianalysis_cc_traces_weka_062126`), or `None` when the
/// baseline froze nothing for it (a run of fixed-seq-len points only).
pub fn dataset_words(baseline: &Baseline, run: u64) -> Option<Bilingual> {
    use crate::dataset::DatasetFinding;
    let d = baseline.agentx_datasets.iter().find(|d| d.run_id == run)?;
    Some(match &d.finding {
        DatasetFinding::Named { dataset } => {
            let name = code(&dataset.name);
            Bilingual::owned(format!("dataset {name}"), format!("数据集 {name}"))
        }
        DatasetFinding::Unknown { reason } => {
            let zh = crate::dataset::reason_words(reason)
                .map_or_else(|| reason.clone(), |w| w.zh.into_owned());
            Bilingual::owned(
                format!("dataset unknown ({})", text(reason)),
                format!("数据集未知（{}）", text(&zh)),
            )
        }
    })
}
