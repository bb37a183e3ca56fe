//! The playbook's typed model, as [`Playbook::parse`] returns it.

use regex::Regex;

use super::version::VersionRange;

/// A parsed and validated playbook.
#[derive(Debug, Clone, Default)]
pub struct Playbook {
    /// Where it was read from, as the caller named it (errors and reports
    /// repeat it).
    pub source: String,
    /// The entries, in file order: when several match, the first wins and
    /// the others are the next ones tried.
    pub entries: Vec<Entry>,
    /// Nodes known to be sick whatever the log says (drained, broken).
    pub nodes: Vec<SickNode>,
}

/// One known failure.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Stable id, e.g. `vllm-oom-at-load`: lowercase letters, digits, `-`.
    pub id: String,
    /// 1-based line of the entry in the file.
    pub line: usize,
    /// What kind of failure it is.
    pub class: Class,
    /// How it is recognised.
    pub signature: Signature,
    /// What it means, in English and Chinese.
    pub diagnosis: Diagnosis,
    /// The fixes to try, in order (empty: diagnosis only). Only
    /// [`Class::Engine`] entries may carry fixes.
    pub fixes: Vec<Fix>,
    /// Where it was seen (pull requests, families).
    pub seen_on: Vec<SeenOn>,
    /// Nodes it has been seen on (infrastructure entries).
    pub nodes: Vec<String>,
}

/// What kind of failure an entry describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// The inference engine failed with the recipe as written: a recipe
    /// or launcher change may help.
    Engine,
    /// The runner or node is at fault: nothing in the recipe helps; retry
    /// elsewhere.
    Infrastructure,
    /// Noise after the benchmark window finished: not a failure of the
    /// measurement.
    Teardown,
    /// The pull request's setup stage (before any benchmark job) failed.
    Setup,
}

impl Class {
    /// The word the file uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Engine => "engine",
            Class::Infrastructure => "infrastructure",
            Class::Teardown => "teardown",
            Class::Setup => "setup",
        }
    }

    /// Reads the word the file uses.
    pub fn parse(word: &str) -> Option<Class> {
        Some(match word {
            "engine" => Class::Engine,
            "infrastructure" => Class::Infrastructure,
            "teardown" => Class::Teardown,
            "setup" => Class::Setup,
            _ => return None,
        })
    }
}

/// How an entry is recognised: patterns over a job's log lines (each line
/// with GitHub's timestamp prefix and terminal colours removed, see
/// [`super::JobLogView`]) and the scope the entry holds in.
#[derive(Debug, Clone, Default)]
pub struct Signature {
    /// At least one line must match one of these (when any are given).
    pub any: Vec<Regex>,
    /// Each of these must match some line.
    pub all: Vec<Regex>,
    /// No line may match any of these: what tells a look-alike apart.
    pub none: Vec<Regex>,
    /// Which jobs the entry holds for.
    pub scope: Scope,
}

/// Which jobs an entry holds for. An empty field means any; a set field
/// needs the job's [`JobContext`] to carry a value that fits (unknown never
/// fits, so a fix is never applied outside its scope).
#[derive(Debug, Clone, Default)]
pub struct Scope {
    /// Frameworks, lowercase as the master configs write them (`vllm`,
    /// `sglang`, `trt`, `atom`, `dynamo-vllm`…).
    pub framework: Vec<String>,
    /// The engine's version range, e.g. `>=0.20, <0.22`.
    pub engine_version: Option<VersionRange>,
    /// Hardware, lowercase (`b200`, `mi355x`, `gb300`…).
    pub hardware: Vec<String>,
    /// Patterns one of which must match the whole runner name.
    pub runner: Vec<Regex>,
    /// Patterns one of which must match the whole node name.
    pub node: Vec<Regex>,
    /// Patterns one of which must match the whole config key of the family
    /// (`dsv4-fp8-h200-sglang`) or the whole family (`<master>:<key>`).
    pub family: Vec<Regex>,
}

/// A diagnosis in both languages the reports are written in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnosis {
    /// English.
    pub en: String,
    /// Chinese.
    pub zh: String,
}

/// A fix from the safe vocabulary: one launch argument or one environment
/// variable in the family's recipe or launcher; nothing that runs code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fix {
    /// Change the value of `--name value`, `--name=value` or a recipe's
    /// `name: value` to `to`; when `from` is given, only if the current
    /// value is exactly `from`.
    SetArg {
        /// The argument's name without its leading dashes.
        name: String,
        /// The value it must have now, if any.
        from: Option<String>,
        /// The value it gets.
        to: String,
    },
    /// Set `export NAME=value` (changing an existing one, or adding one line
    /// before the engine's launch command).
    SetEnv {
        /// The variable.
        name: String,
        /// Its value.
        value: String,
    },
    /// Remove the one `export NAME=...` line.
    UnsetEnv {
        /// The variable.
        name: String,
    },
}

impl Fix {
    /// A one-line description, e.g. `--gpu-memory-utilization 0.95 → 0.90`.
    pub fn describe(&self) -> String {
        match self {
            Fix::SetArg {
                name,
                from: Some(from),
                to,
            } => format!("--{name} {from} → {to}"),
            Fix::SetArg {
                name,
                from: None,
                to,
            } => format!("--{name} → {to}"),
            Fix::SetEnv { name, value } => format!("export {name}={value}"),
            Fix::UnsetEnv { name } => format!("unset {name}"),
        }
    }
}

/// Where an entry was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeenOn {
    /// A pull request of the benchmark repository, by number.
    Pull(u64),
    /// A family (config key) or other free note, as written.
    Note(String),
}

/// A node known to be sick, from the playbook's `nodes` section.
#[derive(Debug, Clone)]
pub struct SickNode {
    /// The node's name, as jobs and SLURM name it (e.g. `mia1-p01-g09`).
    pub name: String,
    /// Why it is sick.
    pub reason: Diagnosis,
    /// The entry describing its symptom, if one does.
    pub entry: Option<String>,
}

/// What is known about the failed job whose log is triaged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobContext {
    /// The family's framework (`vllm`, `sglang`, …), lowercase.
    pub framework: Option<String>,
    /// The engine version the candidate's image carries (e.g. `v0.21.0`,
    /// `0.5.12-cu130`).
    pub engine_version: Option<String>,
    /// The hardware (`b200`, `mi355x`, …), lowercase.
    pub hardware: Option<String>,
    /// GitHub's `runner_name` of the job.
    pub runner_name: Option<String>,
    /// The family (`<master>:<key>`, or the config key alone).
    pub family: Option<String>,
}

impl Playbook {
    /// The entry with this id.
    pub fn entry(&self, id: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.id == id)
    }

    /// The sick node of this name (case-insensitive).
    pub fn sick_node(&self, name: &str) -> Option<&SickNode> {
        self.nodes
            .iter()
            .find(|n| n.name.eq_ignore_ascii_case(name))
    }
}

impl Entry {
    /// Whether the entry's scope holds for this job: every scope field the
    /// entry sets must be fitted by a known value of the job's.
    pub fn applies_to(&self, ctx: &JobContext) -> bool {
        self.signature.scope.applies_to(ctx, None)
    }
}

impl Scope {
    /// Whether this scope holds for the job, `node` being the node its log
    /// names (if any).
    pub fn applies_to(&self, ctx: &JobContext, node: Option<&str>) -> bool {
        let listed = |list: &[String], value: &Option<String>| {
            list.is_empty()
                || value
                    .as_deref()
                    .is_some_and(|v| list.iter().any(|l| l.eq_ignore_ascii_case(v.trim())))
        };
        let whole = |patterns: &[Regex], value: Option<&str>| {
            patterns.is_empty()
                || value.is_some_and(|v| {
                    patterns.iter().any(|p| {
                        p.find(v)
                            .is_some_and(|m| m.start() == 0 && m.end() == v.len())
                    })
                })
        };
        listed(&self.framework, &ctx.framework)
            && listed(&self.hardware, &ctx.hardware)
            && self.engine_version.as_ref().is_none_or(|range| {
                ctx.engine_version
                    .as_deref()
                    .is_some_and(|v| range.contains(v))
            })
            && whole(&self.runner, ctx.runner_name.as_deref())
            && whole(&self.node, node.or(ctx.runner_name.as_deref()))
            && (self.family.is_empty()
                || ctx.family.as_deref().is_some_and(|f| {
                    let key = f.rsplit_once(':').map_or(f, |(_, k)| k);
                    whole(&self.family, Some(key)) || whole(&self.family, Some(f))
                }))
    }
}
