//! Each check of the contract as a function of the gathered evidence.
//!
//! Where data decides, the check decides; where the prompt asks for
//! judgement (whether an upstream recipe is merged and matches, whether a
//! waiver covers a patch, what the PR description claims), the row is WARN
//! "needs a reviewer" with the evidence found, never PASS.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use crate::checklist::{self, Item};
use crate::codeowners::Codeowners;
use crate::contract::{CheckKind, ContractVersion};
use crate::evidence::{BenchPoint, CheckRunFact, Evidence, SignoffEdit};
use crate::{CheckResult, Outcome};

mod changes;
mod runs;
mod statements;

/// A master-config entry the pull request adds or changes.
#[derive(Debug, Clone)]
pub struct ChangedEntry {
    pub file: String,
    pub key: String,
    pub head: Value,
    pub base: Option<Value>,
}

impl ChangedEntry {
    fn text(&self, field: &str) -> &str {
        self.head.get(field).and_then(Value::as_str).unwrap_or("")
    }

    fn flag(&self, field: &str) -> bool {
        self.head
            .get(field)
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    fn name(&self) -> String {
        format!("{}:{}", self.file, self.key)
    }

    fn is_agentic(&self) -> bool {
        self.head
            .get("scenarios")
            .is_some_and(|s| s.get("agentic-coding").is_some())
            || self.key.contains("agentic")
    }

    fn is_spec_decode(&self) -> bool {
        let key = self.key.to_lowercase();
        key.contains("-mtp") || key.contains("eagle") || has_spec_decoding(&self.head)
    }
}

fn has_spec_decoding(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.iter().any(|(k, v)| {
            (k == "spec-decoding" && v.as_str().is_some_and(|s| s != "none"))
                || has_spec_decoding(v)
        }),
        Value::Array(items) => items.iter().any(has_spec_decoding),
        _ => false,
    }
}

fn has_key_true(value: &Value, key: &str) -> bool {
    match value {
        Value::Object(map) => map
            .iter()
            .any(|(k, v)| (k == key && v.as_bool() == Some(true)) || has_key_true(v, key)),
        Value::Array(items) => items.iter().any(|v| has_key_true(v, key)),
        _ => false,
    }
}

fn parse_master(text: &str) -> BTreeMap<String, Value> {
    let Ok(Some(node)) = klaud_planner::yaml::parse(text) else {
        return BTreeMap::new();
    };
    match node.to_json() {
        Value::Object(map) => map.into_iter().collect(),
        _ => BTreeMap::new(),
    }
}

/// The hardware of a runner label: `cluster:b300-nv` → `b300`.
fn hardware(runner: &str) -> String {
    let bare = runner.rsplit(':').next().unwrap_or(runner);
    bare.split(['-', '_'])
        .next()
        .unwrap_or(bare)
        .to_ascii_lowercase()
}

const ESTABLISHED_HARDWARE: &[&str] = &[
    "h100", "h200", "b200", "b300", "gb200", "gb300", "mi300x", "mi325x", "mi355x",
];

fn short(sha: &str) -> &str {
    sha.get(..7).unwrap_or(sha)
}

static RUN_ID: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"/actions/runs/(\d+)").expect("regex"));

/// The run id in a check run's `details_url`.
pub fn run_id_of(details_url: &str) -> Option<u64> {
    RUN_ID.captures(details_url)?[1].parse().ok()
}

fn is_eval_job(name: &str) -> bool {
    name.starts_with("eval /") || name.contains(" eval /")
}

fn is_benchmark_job(name: &str) -> bool {
    !is_eval_job(name)
        && (name.starts_with("single-node ") || name.starts_with("multi-node "))
        && name.contains(" /")
}

fn executed_badly(run: &CheckRunFact) -> bool {
    matches!(
        run.conclusion.as_deref(),
        Some("failure" | "cancelled" | "timed_out" | "action_required" | "stale")
    ) || run.status != "completed"
}

/// The green sweep Check 1 found: the newest run on a commit still in the
/// PR whose benchmark and eval jobs succeeded (skipped ones do not count).
#[derive(Debug, Clone)]
pub struct GreenSweep {
    pub sha: String,
    pub run_id: u64,
    pub benchmark_jobs: Vec<String>,
    pub eval_jobs: Vec<String>,
}

/// The green sweep Check 1 accepts, from the pull request's commits (oldest
/// first, as GitHub lists them) and their check runs. Gathering reads the
/// eval artifacts of exactly this run.
pub fn green_sweep(pr_commits: &[String], check_runs: &[CheckRunFact]) -> Option<GreenSweep> {
    for sha in pr_commits.iter().rev() {
        let mut runs: BTreeMap<u64, Vec<&CheckRunFact>> = BTreeMap::new();
        for run in check_runs.iter().filter(|r| &r.sha == sha) {
            if let Some(id) = run.run_id {
                runs.entry(id).or_default().push(run);
            }
        }
        for (run_id, jobs) in runs.iter().rev() {
            let relevant: Vec<_> = jobs
                .iter()
                .filter(|j| is_eval_job(&j.name) || is_benchmark_job(&j.name))
                .collect();
            if relevant.iter().any(|j| executed_badly(j)) {
                continue;
            }
            let succeeded = |pick: fn(&str) -> bool| -> Vec<String> {
                relevant
                    .iter()
                    .filter(|j| pick(&j.name) && j.conclusion.as_deref() == Some("success"))
                    .map(|j| j.name.clone())
                    .collect()
            };
            let benchmark_jobs = succeeded(is_benchmark_job);
            let eval_jobs = succeeded(is_eval_job);
            if !benchmark_jobs.is_empty() && !eval_jobs.is_empty() {
                return Some(GreenSweep {
                    sha: sha.clone(),
                    run_id: *run_id,
                    benchmark_jobs,
                    eval_jobs,
                });
            }
        }
    }
    None
}

static RECIPE_LINK: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"https://(?:github\.com/vllm-project/recipes|github\.com/sgl-project/sglang|recipes\.vllm\.ai|docs\.sglang\.io/cookbook)[^\s)>\]]*").expect("regex")
});

static RECIPE_PULL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^https://github\.com/(vllm-project/recipes|sgl-project/sglang)/pull/(\d{1,10})(?:[/?#]|$)")
        .expect("regex")
});

/// The most recipe links of one sign-off that are followed.
pub const MAX_RECIPE_LINKS: usize = 5;

/// The upstream recipe links in a sign-off's additional detail section,
/// in order, at most [`MAX_RECIPE_LINKS`].
pub fn recipe_links(detail: &str) -> Vec<String> {
    let mut links: Vec<String> = Vec::new();
    for link in RECIPE_LINK.find_iter(detail) {
        let link = link.as_str().trim_end_matches(['.', ',', ';']).to_owned();
        if !links.contains(&link) {
            links.push(link);
        }
        if links.len() == MAX_RECIPE_LINKS {
            break;
        }
    }
    links
}

/// The upstream pull request a recipe link names (`owner/name`, number).
pub fn recipe_pull(link: &str) -> Option<(String, u64)> {
    let caps = RECIPE_PULL.captures(link)?;
    Some((caps[1].to_owned(), caps[2].parse().ok()?))
}

/// Everything the checks share, computed once.
pub struct Context<'a> {
    evidence: &'a Evidence,
    version: ContractVersion,
    template: Vec<Item>,
    codeowners: Option<Codeowners>,
    entries: Vec<ChangedEntry>,
    all_head_entries: Vec<(String, String, Value)>,
    sweep: Option<GreenSweep>,
    detail: String,
}

fn result(number: u32, kind: CheckKind, outcome: Outcome, reason: String) -> CheckResult {
    CheckResult {
        number,
        name: kind.name().to_owned(),
        result: outcome,
        reason,
        evidence: Vec::new(),
    }
}

fn with(mut check: CheckResult, evidence: Vec<String>) -> CheckResult {
    check.evidence = evidence;
    check
}

impl<'a> Context<'a> {
    pub fn new(evidence: &'a Evidence, version: ContractVersion, checklist_md: &str) -> Self {
        let mut entries = Vec::new();
        let mut all_head_entries = Vec::new();
        for (file, text) in &evidence.masters_head {
            let head = parse_master(text);
            let base = evidence
                .masters_base
                .get(file)
                .map(|t| parse_master(t))
                .unwrap_or_default();
            for (key, value) in head {
                if !value.is_object() {
                    continue;
                }
                let before = base.get(&key).cloned();
                if before.as_ref() != Some(&value) {
                    entries.push(ChangedEntry {
                        file: file.clone(),
                        key: key.clone(),
                        head: value.clone(),
                        base: before,
                    });
                }
                all_head_entries.push((file.clone(), key, value));
            }
        }
        Self {
            evidence,
            version,
            template: checklist::template_items(checklist_md),
            codeowners: evidence.codeowners.as_deref().map(Codeowners::parse),
            entries,
            all_head_entries,
            sweep: green_sweep(&evidence.pr_commits, &evidence.check_runs),
            detail: checklist::detail_section(&evidence.signoff.body).to_owned(),
        }
    }

    /// Decides check `number` of kind `kind`.
    pub fn decide(&self, number: u32, kind: CheckKind) -> CheckResult {
        match kind {
            CheckKind::Codeowner => self.codeowner_of_the_text(number, kind),
            CheckKind::PassingSweep => self.passing_sweep(number, kind),
            CheckKind::Evals => self.evals(number, kind),
            CheckKind::RecipeLink => self.recipe_link(number, kind),
            CheckKind::ReuseCommand => self.reuse_command(number, kind),
            CheckKind::LatestChecklist => self.latest_checklist(number, kind),
            CheckKind::UpstreamImages => self.upstream_images(number, kind),
            CheckKind::DeprecatedModels => self.deprecated(number, kind),
            CheckKind::ArchitectureHacks => self.architecture_hacks(number, kind),
            CheckKind::ChatTemplates => self.chat_templates(number, kind),
            CheckKind::EnginePatches => self.engine_patches(number, kind),
            CheckKind::AgenticGoldenAl => self.golden_al(number, kind),
            CheckKind::AppendOnly => self.append_only(number, kind),
            CheckKind::DraftAsShipped => self.draft_as_shipped(number, kind),
            CheckKind::ParetoCoverage => self.pareto(number, kind),
            CheckKind::PrDescription => self.pr_description(number, kind),
        }
    }

    fn signer(&self) -> &str {
        &self.evidence.signer.login
    }

    fn changed_paths(&self) -> Vec<&str> {
        let mut paths = Vec::new();
        for file in &self.evidence.changed_files {
            paths.push(file.path.as_str());
            if let Some(previous) = &file.previous_path {
                paths.push(previous.as_str());
            }
        }
        paths
    }

    fn touches_benchmarks(&self) -> bool {
        self.changed_paths().iter().any(|p| {
            p.starts_with("benchmarks/")
                || p.starts_with("configs/")
                || p.starts_with("runners/")
                || p.starts_with(".github/workflows/")
        })
    }

    /// The organisation's core team (`owner/core`), which the newer
    /// contract's scope leaves out.
    fn core_team(&self) -> String {
        let org = self.evidence.repo.split('/').next().unwrap_or_default();
        format!("{org}/core")
    }

    /// Whether `rule`'s owners are all ones the contract's scope leaves out
    /// (the core team, repository admins): then its paths need no sign-off.
    fn exempt(&self, rule: &crate::codeowners::Rule) -> bool {
        if !self.version.scope_skips_core_and_admins() {
            return false;
        }
        let core = self.core_team();
        rule.owners.iter().all(|owner| {
            owner.eq_ignore_ascii_case(&core)
                || self
                    .evidence
                    .owner_admins
                    .contains(&owner.to_ascii_lowercase())
        })
    }

    /// Whether any changed path needs a sign-off: the newer workflow
    /// verifies nothing when the core team and admins alone own them all.
    pub fn signoff_required(&self) -> bool {
        let Some(owners) = &self.codeowners else {
            return true;
        };
        self.changed_paths().into_iter().any(|path| {
            owners
                .owner_rule(path)
                .is_none_or(|rule| !self.exempt(rule))
        })
    }

    /// The CODEOWNER check of whoever wrote the sign-off's current text:
    /// an edit by someone other than its author makes it the editor's
    /// sign-off (the gathered signer is the editor), and the row says so;
    /// an edit by no one GitHub can name is no one's sign-off.
    fn codeowner_of_the_text(&self, n: u32, kind: CheckKind) -> CheckResult {
        let author = &self.evidence.signoff.author;
        match &self.evidence.signoff.edited {
            None => self.codeowner(n, kind),
            Some(SignoffEdit::Unknown) => result(
                n,
                kind,
                Outcome::Fail,
                format!(
                    "The sign-off was edited after {author} wrote it and GitHub does not say by whom, so it is no one's sign-off that can be verified; post a new one."
                ),
            ),
            Some(SignoffEdit::By(editor)) => {
                let mut r = self.codeowner(n, kind);
                r.reason = format!(
                    "The sign-off's text was last edited by {editor}, not its author {author}, so it is verified as {editor}'s. {}",
                    r.reason
                );
                r
            }
        }
    }

    fn codeowner(&self, n: u32, kind: CheckKind) -> CheckResult {
        let Some(owners) = &self.codeowners else {
            return result(
                n,
                kind,
                Outcome::Fail,
                "No .github/CODEOWNERS at the base commit, so no one can sign off as a CODEOWNER."
                    .into(),
            );
        };
        let signer = self.signer();
        let member = |team: &str| {
            self.evidence
                .team_membership
                .get(&team.to_ascii_lowercase())
                .copied()
        };
        let mut owned = Vec::new();
        let mut catch_all = Vec::new();
        let mut mismatched = Vec::new();
        let mut evidence = Vec::new();
        let mut exempt = Vec::new();
        for path in self.changed_paths() {
            match owners.owner_rule(path) {
                None => catch_all.push(path),
                Some(rule) if self.exempt(rule) => {
                    evidence.push(format!(
                        "{path}: CODEOWNERS line {}: {} (only the core team or admins: no sign-off needed)",
                        rule.line, rule.text
                    ));
                    exempt.push(path);
                }
                Some(rule) if rule.is_catch_all() => catch_all.push(path),
                Some(rule) => {
                    let by_team = rule.teams().any(|t| member(t) == Some(true));
                    if rule.lists_user(signer) || by_team {
                        evidence.push(format!(
                            "{path}: CODEOWNERS line {}: {}",
                            rule.line, rule.text
                        ));
                        owned.push(path);
                    } else {
                        mismatched.push((path, rule));
                    }
                }
            }
        }
        let recognized = !owned.is_empty()
            || owners.lists_anywhere(signer)
            || owners
                .rules
                .iter()
                .flat_map(|r| r.teams())
                .any(|t| member(t) == Some(true));
        if let Some((path, rule)) = mismatched.first() {
            let owners_text = rule
                .owners
                .iter()
                .map(|o| format!("@{o}"))
                .collect::<Vec<_>>()
                .join(" ");
            let evidence = mismatched
                .iter()
                .map(|(p, r)| format!("{p}: CODEOWNERS line {}: {}", r.line, r.text))
                .collect();
            return with(
                result(
                    n,
                    kind,
                    Outcome::Fail,
                    format!(
                        "{signer} is not a CODEOWNER of {path}; its owners are {owners_text} (CODEOWNERS line {}).",
                        rule.line
                    ),
                ),
                evidence,
            );
        }
        if !recognized {
            return result(
                n,
                kind,
                Outcome::Fail,
                format!(
                    "{signer} is not listed in CODEOWNERS, so they cannot cover the catch-all paths."
                ),
            );
        }
        let reason = if owned.is_empty() {
            format!(
                "{signer} is a listed CODEOWNER and every changed path is catch-all-only, so it is covered."
            )
        } else {
            let mut unique: Vec<&str> = owned.clone();
            unique.dedup();
            let rest = if catch_all.is_empty() {
                String::new()
            } else {
                "; all other changed paths are catch-all-only and covered".to_owned()
            };
            format!(
                "{signer} owns {} via its specific CODEOWNERS line{rest}.",
                unique.join(", ")
            )
        };
        let reason = if exempt.is_empty() {
            reason
        } else {
            format!(
                "{} {} owned only by the core team or repository admins (no sign-off needed).",
                reason,
                exempt.join(", ")
            )
        };
        with(result(n, kind, Outcome::Pass, reason), evidence)
    }

    fn golden_al(&self, n: u32, kind: CheckKind) -> CheckResult {
        static SPEC: LazyLock<Regex> = LazyLock::new(|| {
            Regex::new(r"(?i)speculative|num_speculative_tokens|spec-decoding:\s*(?:mtp|eagle|draft)|eagle|\bmtp\b|dspark").expect("regex")
        });
        static AL: LazyLock<Regex> = LazyLock::new(|| {
            Regex::new(r#"(?:SGLANG_SIMULATE_ACC_LEN["']?\s*[:=]\s*["']?|"?synthetic_acceptance_length"?\s*[:=]\s*)([0-9]+(?:\.[0-9]+)?)"#)
                .expect("regex")
        });
        static TOKENS: LazyLock<Regex> = LazyLock::new(|| {
            Regex::new(r#"(?:num_speculative_tokens"?\s*[:=]\s*|speculative-num-steps[ =]+)(\d+)"#)
                .expect("regex")
        });
        let agentic_files: Vec<&crate::evidence::ChangedFile> = self
            .evidence
            .changed_files
            .iter()
            .filter(|f| {
                f.status != "removed"
                    && (f.path.contains("/agentic/") || f.path.starts_with("agentic/"))
            })
            .filter(|f| f.head_text.as_deref().is_some_and(|t| SPEC.is_match(t)))
            .collect();
        let agentic_entries: Vec<String> = self
            .entries
            .iter()
            .filter(|e| e.is_agentic() && e.is_spec_decode())
            .map(ChangedEntry::name)
            .collect();
        if agentic_files.is_empty() && agentic_entries.is_empty() {
            return result(
                n,
                kind,
                Outcome::NotApplicable,
                "no agentic speculative-decoding changes.".into(),
            );
        }
        if agentic_files.is_empty() {
            return with(
                result(
                    n,
                    kind,
                    Outcome::Warn,
                    format!(
                        "Needs a reviewer: agentic spec-decode entries {} changed but none of their scripts or recipes did; confirm the pinned AL.",
                        agentic_entries.join(", ")
                    ),
                ),
                agentic_entries,
            );
        }
        let curves = golden_curves(&self.evidence.default_branch.golden_al);
        let mut problems = Vec::new();
        let mut evidence = Vec::new();
        for file in agentic_files {
            let text = file.head_text.as_deref().unwrap_or("");
            let Some(al) = AL.captures(text).and_then(|c| c[1].parse::<f64>().ok()) else {
                problems.push(format!("{} runs real, unsimulated acceptance (no SGLANG_SIMULATE_ACC_LEN or synthetic_acceptance_length)", file.path));
                continue;
            };
            let tokens = TOKENS.captures(text).and_then(|c| c[1].parse::<u64>().ok());
            let lower_text = text.to_lowercase();
            let lower_path = file.path.to_lowercase();
            let curve = curves.iter().find(|c| {
                lower_text.contains(&c.model)
                    || lower_path.contains(&c.file_prefix)
                    || lower_text.contains(&c.file_prefix)
            });
            let Some(curve) = curve else {
                if self.detail.to_lowercase().contains("golden") {
                    evidence.push(format!(
                        "{}: AL {al}, no committed curve; the sign-off names the source",
                        file.path
                    ));
                    continue;
                }
                problems.push(format!("{} pins AL {al} but the model has no committed golden curve and the sign-off names no source", file.path));
                continue;
            };
            let allowed: Vec<f64> = curve
                .values
                .iter()
                .filter(|(draft, _)| tokens.is_none_or(|t| *draft == t))
                .map(|(_, v)| *v)
                .collect();
            let draft = tokens.map_or_else(
                || "any draft length".to_owned(),
                |t| format!("{t} speculative tokens"),
            );
            if allowed.iter().any(|v| (v - al).abs() < 1e-6) {
                evidence.push(format!(
                    "{}: AL {al} = golden {} ({draft})",
                    file.path, curve.path
                ));
            } else {
                problems.push(format!(
                    "{} pins AL {al}; golden {} for {draft} is {}",
                    file.path,
                    curve.path,
                    allowed
                        .iter()
                        .map(|v| v.to_string())
                        .collect::<Vec<_>>()
                        .join(" or ")
                ));
            }
        }
        if problems.is_empty() {
            with(
                result(
                    n,
                    kind,
                    Outcome::Pass,
                    format!(
                        "simulated acceptance at the golden AL: {}.",
                        evidence.join("; ")
                    ),
                ),
                evidence,
            )
        } else {
            evidence.extend(problems.iter().cloned());
            with(
                result(n, kind, Outcome::Fail, format!("{}.", problems.join("; "))),
                evidence,
            )
        }
    }

    fn append_only(&self, n: u32, kind: CheckKind) -> CheckResult {
        let marked: Vec<&ChangedEntry> = self
            .entries
            .iter()
            .filter(|e| has_key_true(&e.head, "append-only"))
            .collect();
        if marked.is_empty() {
            return result(
                n,
                kind,
                Outcome::NotApplicable,
                "the PR uses no append-only: true.".into(),
            );
        }
        let mut problems = Vec::new();
        let mut evidence = Vec::new();
        for entry in marked {
            let Some(base) = &entry.base else {
                problems.push(format!(
                    "{} is new, so append-only has no existing curve",
                    entry.key
                ));
                continue;
            };
            if base.get("image") != entry.head.get("image") {
                problems.push(format!("{} changes its image", entry.key));
            }
            let before = points(base);
            let after = points(&entry.head);
            let removed: Vec<&String> = before.difference(&after).collect();
            if !removed.is_empty() {
                problems.push(format!(
                    "{} removes or changes {} prior points",
                    entry.key,
                    removed.len()
                ));
            }
            evidence.push(format!(
                "{}: {} prior points, {} now",
                entry.key,
                before.len(),
                after.len()
            ));
        }
        if problems.is_empty() {
            with(
                result(n, kind, Outcome::Pass, "append-only entries keep every prior point and the image; points are only added.".into()),
                evidence,
            )
        } else {
            with(
                result(n, kind, Outcome::Fail, format!("{}.", problems.join("; "))),
                evidence,
            )
        }
    }

    fn draft_as_shipped(&self, n: u32, kind: CheckKind) -> CheckResult {
        static BANNED: LazyLock<Regex> = LazyLock::new(|| {
            Regex::new(r#"SGLANG_NVFP4_CKPT_FP8_NEXTN_MOE["']?\s*[:=]\s*["']?(?:1|true|True|TRUE)"#)
                .expect("regex")
        });
        let found: Vec<String> = self
            .evidence
            .changed_files
            .iter()
            .filter(|f| f.head_text.as_deref().is_some_and(|t| BANNED.is_match(t)))
            .map(|f| format!("{}: SGLANG_NVFP4_CKPT_FP8_NEXTN_MOE enabled", f.path))
            .collect();
        if !found.is_empty() {
            return with(
                result(n, kind, Outcome::Fail, format!("{}.", found.join("; "))),
                found,
            );
        }
        let spec = self.spec_decode_changes();
        if spec.is_empty() {
            return result(
                n,
                kind,
                Outcome::NotApplicable,
                "no draft models or draft heads in the changes.".into(),
            );
        }
        with(
            result(
                n,
                kind,
                Outcome::Warn,
                format!(
                    "Needs a reviewer: confirm the draft runs at its shipped precision for {}.",
                    spec.join(", ")
                ),
            ),
            spec,
        )
    }

    /// The measured points of the green sweep that belong to a changed
    /// entry, by app series (model, scenario, base hardware and framework,
    /// precision, speculative method): config keys and images of one
    /// series are one curve.
    fn affected_curves(&self, points: &[BenchPoint]) -> BTreeMap<String, Vec<(f64, f64)>> {
        let mut curves: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        for point in points {
            let belongs = self.entries.iter().any(|e| {
                e.text("model-prefix")
                    .eq_ignore_ascii_case(&point.model_prefix)
                    && e.text("framework").eq_ignore_ascii_case(&point.framework)
                    && e.text("precision").eq_ignore_ascii_case(&point.precision)
                    && hardware(e.text("runner")) == hardware(&point.hw)
            });
            if !belongs {
                continue;
            }
            let spec = if point.scenario.contains('/') {
                format!(" spec {}", point.spec_decoding)
            } else {
                String::new()
            };
            let key = format!(
                "{} {} {}-{} {}{spec}",
                point.model_prefix,
                point.scenario,
                hardware(&point.hw),
                point.framework,
                point.precision
            );
            let entry = curves.entry(key).or_default();
            if let (Some(x), Some(y)) = (point.e2el, point.tput_per_gpu)
                && x.is_finite()
                && y.is_finite()
                && x > 0.0
                && y > 0.0
            {
                entry.push((x, y));
            }
        }
        curves
    }

    fn pareto(&self, n: u32, kind: CheckKind) -> CheckResult {
        if self.entries.is_empty() {
            return result(
                n,
                kind,
                Outcome::NotApplicable,
                "no curves are affected.".into(),
            );
        }
        let signer = &self.evidence.signer;
        let bypass = if signer.permission == "admin" && signer.role_name.as_deref() == Some("admin")
        {
            "the signer is a repository admin; an explicit admin bypass for the assessed commit and these curves, with rationale, still has to be recorded"
        } else {
            "admin bypass not verified: a repository admin (permission and role admin) must record one for the assessed commit and these curves"
        };
        let unverifiable = |why: String, evidence: Vec<String>| {
            with(
                result(
                    n,
                    kind,
                    Outcome::Warn,
                    format!("Pareto coverage unverifiable: {why}; {bypass}."),
                ),
                evidence,
            )
        };
        let Some(sweep) = &self.sweep else {
            return unverifiable(
                "no passing in-PR sweep to take measured points from".into(),
                Vec::new(),
            );
        };
        let points = match self.evidence.benchmarks.get(&sweep.run_id) {
            None => {
                return unverifiable(
                    format!("the results of run {} were not read", sweep.run_id),
                    Vec::new(),
                );
            }
            Some(Err(why)) => {
                return unverifiable(format!("run {}: {why}", sweep.run_id), Vec::new());
            }
            Some(Ok(points)) => points,
        };
        let curves = self.affected_curves(points);
        let mut evidence = Vec::new();
        let unmeasured: Vec<String> = self
            .entries
            .iter()
            .filter(|e| {
                !points.iter().any(|p| {
                    e.text("model-prefix").eq_ignore_ascii_case(&p.model_prefix)
                        && e.text("framework").eq_ignore_ascii_case(&p.framework)
                        && e.text("precision").eq_ignore_ascii_case(&p.precision)
                        && hardware(e.text("runner")) == hardware(&p.hw)
                })
            })
            .map(|e| e.key.clone())
            .collect();
        let mut short_curves = Vec::new();
        for (curve, measured) in &curves {
            let count = frontier_count(measured);
            evidence.push(format!(
                "{curve}: {count} frontier points of {} measured (run {}, agg_bmk.json)",
                measured.len(),
                sweep.run_id
            ));
            if count < 5 {
                short_curves.push(format!("{curve} {count}/5"));
            }
        }
        if !unmeasured.is_empty() {
            evidence.extend(
                unmeasured
                    .iter()
                    .map(|k| format!("{k}: no measured points in run {}", sweep.run_id)),
            );
            return unverifiable(
                format!(
                    "run {} has no measured points for {}",
                    sweep.run_id,
                    unmeasured.join(", ")
                ),
                evidence,
            );
        }
        if short_curves.is_empty() {
            return with(
                result(
                    n,
                    kind,
                    Outcome::Pass,
                    format!(
                        "every affected curve has at least 5 measured frontier points in run {}.",
                        sweep.run_id
                    ),
                ),
                evidence,
            );
        }
        with(
            result(
                n,
                kind,
                Outcome::Warn,
                format!(
                    "fewer than 5 frontier points ({}) in run {}; {bypass}.",
                    short_curves.join(", "),
                    sweep.run_id
                ),
            ),
            evidence,
        )
    }

    fn pr_description(&self, n: u32, kind: CheckKind) -> CheckResult {
        let keys: Vec<String> = self.entries.iter().map(ChangedEntry::name).collect();
        with(
            result(
                n,
                kind,
                Outcome::Warn,
                "Needs a reviewer: compare the PR description's claims with the assessed configuration.".into(),
            ),
            keys,
        )
    }
}

fn points(entry: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let Some(scenarios) = entry.get("scenarios").and_then(Value::as_object) else {
        return out;
    };
    for (scenario, runs) in scenarios {
        for run in runs.as_array().into_iter().flatten() {
            let shape = {
                let mut r = run.clone();
                if let Some(o) = r.as_object_mut() {
                    o.remove("search-space");
                }
                r.to_string()
            };
            for point in run
                .get("search-space")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let mut p = point.clone();
                let concs = p
                    .as_object_mut()
                    .and_then(|o| {
                        o.remove("append-only");
                        o.remove("conc-list")
                    })
                    .and_then(|v| v.as_array().cloned())
                    .unwrap_or_default();
                for conc in concs {
                    out.insert(format!("{scenario}|{shape}|{p}|{conc}"));
                }
            }
        }
    }
    out
}

/// The points on the app's throughput-versus-E2EL frontier (`upper_right`:
/// x ascending, y descending on ties, increasing y and equal-y plateaus at
/// distinct x kept; identical coordinates once).
pub fn frontier_count(points: &[(f64, f64)]) -> usize {
    let mut sorted: Vec<(f64, f64)> = points.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
    sorted.dedup();
    let mut kept: Vec<(f64, f64)> = Vec::new();
    for (x, y) in sorted {
        match kept.last() {
            None => kept.push((x, y)),
            Some(&(last_x, best)) => {
                if y > best || (y == best && x != last_x) {
                    kept.push((x, y));
                }
            }
        }
    }
    kept.len()
}

struct GoldenCurve {
    path: String,
    /// Lower-case model key (`qwen3.5-397b-a17b-nvfp4`).
    model: String,
    /// Lower-case file stem up to the first `_` (`qwen3.5`).
    file_prefix: String,
    /// (draft length, golden AL) for every thinking mode.
    values: Vec<(u64, f64)>,
}

fn golden_curves(files: &BTreeMap<String, String>) -> Vec<GoldenCurve> {
    let mut curves = Vec::new();
    for (path, text) in files {
        let Ok(Some(node)) = klaud_planner::yaml::parse(text) else {
            continue;
        };
        let stem = path
            .rsplit('/')
            .next()
            .unwrap_or(path)
            .trim_end_matches(".yaml");
        let file_prefix = stem.split('_').next().unwrap_or(stem).to_lowercase();
        let Value::Object(models) = node.to_json() else {
            continue;
        };
        for (model, modes) in models {
            let mut values = Vec::new();
            for (_, by_draft) in modes.as_object().into_iter().flatten() {
                for (draft, al) in by_draft.as_object().into_iter().flatten() {
                    let al = al
                        .as_f64()
                        .or_else(|| al.as_str().and_then(|s| s.parse().ok()));
                    if let (Ok(draft), Some(al)) = (draft.parse::<u64>(), al) {
                        values.push((draft, al));
                    }
                }
            }
            curves.push(GoldenCurve {
                path: path.clone(),
                model: model.to_lowercase(),
                file_prefix: file_prefix.clone(),
                values,
            });
        }
    }
    curves
}
