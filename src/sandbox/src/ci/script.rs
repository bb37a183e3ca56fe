//! The script file: which outcome each workflow run of each family gets.
//! The format is documented in the module doc of [`super`].

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

/// Longest delay a script may ask for; a longer one is almost certainly a
/// unit mistake (milliseconds written as seconds) and would hang a demo.
pub const MAX_DELAY_SECS: u64 = 24 * 3600;

/// Why a script could not be read. Every message names the file (when there
/// is one) and the field.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// TOML syntax, or a field of the wrong shape.
    #[error("{path}: {message}")]
    Syntax { path: String, message: String },
    /// A field holds a value the simulator cannot act on.
    #[error("{path}: field `{field}`: {message}")]
    Field {
        path: String,
        field: String,
        message: String,
    },
}

/// How a run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conclusion {
    /// `success`, with result rows for every point.
    Success,
    /// `failure`: a real benchmark failure (no rows, or the first half with
    /// `partial`).
    Failure,
    /// An infrastructure failure, concluded as GitHub would report it.
    Infra(InfraKind),
}

/// The conclusions GitHub gives infrastructure failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InfraKind {
    /// `startup_failure` (the workflow never started a job).
    StartupFailure,
    /// `timed_out`.
    TimedOut,
    /// `cancelled` by the system (e.g. a lost runner).
    Cancelled,
}

impl Conclusion {
    /// The `conclusion` GitHub reports.
    pub fn as_github(self) -> &'static str {
        match self {
            Conclusion::Success => "success",
            Conclusion::Failure => "failure",
            Conclusion::Infra(InfraKind::StartupFailure) => "startup_failure",
            Conclusion::Infra(InfraKind::TimedOut) => "timed_out",
            Conclusion::Infra(InfraKind::Cancelled) => "cancelled",
        }
    }
}

/// Factors applied to the baseline values of every point of a run, so
/// reports show deltas (throughput 1.10 → +10.0%).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Multipliers {
    /// Total and output tokens/s per GPU.
    pub throughput: f64,
    /// Mean time to first token.
    pub ttft: f64,
    /// Mean time per output token.
    pub tpot: f64,
    /// Eval score (capped at 1.0).
    pub score: f64,
}

impl Default for Multipliers {
    fn default() -> Self {
        Self {
            throughput: 1.0,
            ttft: 1.0,
            tpot: 1.0,
            score: 1.0,
        }
    }
}

/// What happens to one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// How long the run stays `in_progress` before it concludes.
    pub delay: Duration,
    /// How it concludes.
    pub conclusion: Conclusion,
    /// Metric factors (only meaningful when rows are uploaded).
    pub multipliers: Multipliers,
    /// Upload the rows of the first half of the points only: a failure
    /// that got halfway, or a success whose artifacts lack points (what
    /// check-final must catch).
    pub partial: bool,
    /// The image the rows record instead of the family's: a launcher or
    /// recipe that ran another container than the master's `image`.
    pub measured_image: Option<String>,
    /// Lines the run's failed jobs print (and the jobs of an
    /// infrastructure failure), as a real engine or node would.
    pub log_lines: Vec<String>,
    /// The runner every job of the run lands on (its `runner_name`).
    pub node: Option<String>,
    /// The edit that makes this run pass: read at the run's head commit.
    pub passes_when: Option<PassesWhen>,
}

/// A run passes (with baseline numbers) when `file` at its head commit
/// contains `contains`: a failure a known edit fixes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassesWhen {
    /// Repository-relative path.
    pub file: String,
    /// Text the file must contain.
    pub contains: String,
}

/// Most log lines one step may print, and the longest line: the staged
/// text is a failure's symptom, not a whole log.
pub const MAX_LOG_LINES: usize = 200;
const MAX_LINE_CHARS: usize = 2_000;

impl Step {
    /// A plain success with baseline values.
    pub fn success() -> Self {
        Self {
            delay: Duration::ZERO,
            conclusion: Conclusion::Success,
            multipliers: Multipliers::default(),
            partial: false,
            measured_image: None,
            log_lines: Vec::new(),
            node: None,
            passes_when: None,
        }
    }
}

/// Which list of a family a run draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RunKind {
    /// A dispatched `e2e-tests.yml` run (smoke / targeted attempt).
    Smoke,
    /// A `run-sweep.yml` run on a pull request (final sweep).
    Sweep,
}

/// The outcomes of one family (or the `*` default).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FamilyScript {
    /// Smoke runs, in order; the last one repeats.
    pub smoke: Vec<Step>,
    /// Sweep runs, in order; the last one repeats.
    pub sweep: Vec<Step>,
    /// A regression staged from one image tag onward.
    pub regression: Option<Regression>,
}

/// A regression staged at a known image tag: every run whose image (the
/// family's `image` in the master config at the run's head) carries `from`
/// or a later tag of `tags` ends with `outcome` (when given) and with its
/// metrics multiplied by `multipliers`; images with an earlier tag, or a tag
/// not in `tags`, are untouched.
#[derive(Debug, Clone, PartialEq)]
pub struct Regression {
    /// The track's tags, oldest first (the simulator knows no ordering of
    /// its own: the script says it).
    pub tags: Vec<String>,
    /// Index in `tags` of the first tag with the regression.
    pub from: usize,
    /// The outcome runs of affected images get instead of their step's.
    pub outcome: Option<Conclusion>,
    /// Factors applied on top of the step's.
    pub multipliers: Multipliers,
}

impl Regression {
    /// Whether an image reference (`repo:tag`, `repo:tag@digest`) carries the
    /// regression.
    pub fn affects(&self, image: &str) -> bool {
        let Some(tag) = image_tag(image) else {
            return false;
        };
        self.tags
            .iter()
            .position(|t| t == tag)
            .is_some_and(|i| i >= self.from)
    }

    fn apply(&self, mut step: Step) -> Step {
        if let Some(c) = self.outcome {
            step.conclusion = c;
            if !matches!(c, Conclusion::Failure | Conclusion::Success) {
                step.partial = false;
            }
        }
        let (m, r) = (&mut step.multipliers, &self.multipliers);
        m.throughput *= r.throughput;
        m.ttft *= r.ttft;
        m.tpot *= r.tpot;
        m.score *= r.score;
        step
    }
}

/// The tag of an image reference: after the last `:` of the part after the
/// last `/`, without a `@digest`.
fn image_tag(image: &str) -> Option<&str> {
    let name = image.split('@').next().unwrap_or(image);
    let last = name.rsplit('/').next().unwrap_or(name);
    last.split_once(':').map(|(_, tag)| tag)
}

/// A parsed, validated script.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Script {
    /// Keyed by family (`configs/x-master.yaml:key`), config key, or `*`.
    families: BTreeMap<String, FamilyScript>,
}

/// The raw TOML shape.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScript {
    #[serde(default)]
    families: BTreeMap<String, RawFamily>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFamily {
    #[serde(default)]
    smoke: Option<Vec<RawStep>>,
    #[serde(default)]
    sweep: Option<Vec<RawStep>>,
    #[serde(default)]
    regression: Option<RawRegression>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRegression {
    #[serde(default)]
    tags: Option<Vec<String>>,
    #[serde(default)]
    from: Option<String>,
    #[serde(default)]
    outcome: Option<String>,
    #[serde(default)]
    throughput: Option<toml::Value>,
    #[serde(default)]
    ttft: Option<toml::Value>,
    #[serde(default)]
    tpot: Option<toml::Value>,
    #[serde(default)]
    score: Option<toml::Value>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawStep {
    Word(String),
    // Boxed: the table is ten times the size of a word.
    Table(Box<RawStepTable>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawStepTable {
    #[serde(default)]
    outcome: Option<String>,
    #[serde(default)]
    delay: Option<toml::Value>,
    #[serde(default)]
    seconds: Option<toml::Value>,
    #[serde(default)]
    throughput: Option<toml::Value>,
    #[serde(default)]
    ttft: Option<toml::Value>,
    #[serde(default)]
    tpot: Option<toml::Value>,
    #[serde(default)]
    score: Option<toml::Value>,
    #[serde(default)]
    partial: Option<bool>,
    #[serde(default)]
    image: Option<String>,
    #[serde(default, rename = "log_lines")]
    log_lines: Option<Vec<String>>,
    #[serde(default)]
    node: Option<String>,
    #[serde(default, rename = "passes_when")]
    passes_when: Option<RawPassesWhen>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPassesWhen {
    file: String,
    contains: String,
}

impl Script {
    /// A script where every run succeeds with baseline values.
    pub fn all_success() -> Self {
        Self::default()
    }

    /// Reads and validates a script file.
    pub fn from_file(path: &Path) -> Result<Self, ScriptError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScriptError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&path.display().to_string(), &text)
    }

    /// Parses script text; `origin` names it in errors.
    pub fn parse(origin: &str, text: &str) -> Result<Self, ScriptError> {
        let raw: RawScript = toml::from_str(text).map_err(|e| ScriptError::Syntax {
            path: origin.to_string(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let mut families = BTreeMap::new();
        for (key, fam) in raw.families {
            let at = format!("families.{}", quote_key(&key));
            if key.trim().is_empty() {
                return Err(field_err(origin, &at, "a family key must not be empty"));
            }
            let smoke = steps(origin, &format!("{at}.smoke"), fam.smoke)?;
            let sweep = steps(origin, &format!("{at}.sweep"), fam.sweep)?;
            let regression = fam
                .regression
                .map(|r| regression(origin, &format!("{at}.regression"), r))
                .transpose()?;
            families.insert(
                key,
                FamilyScript {
                    smoke,
                    sweep,
                    regression,
                },
            );
        }
        Ok(Self { families })
    }

    /// The step for the `attempt`-th run (0-based) of `kind` for `family`
    /// (`configs/x-master.yaml:key`). Lookup order: the full family, its
    /// config key, `*`; an empty or missing list falls through to the next;
    /// past the end of a list its last step repeats; with nothing scripted the
    /// run succeeds.
    pub fn step(&self, family: &str, kind: RunKind, attempt: usize) -> Step {
        let key = family.rsplit_once(':').map_or(family, |(_, k)| k);
        for name in [family, key, "*"] {
            let Some(f) = self.families.get(name) else {
                continue;
            };
            let list = match kind {
                RunKind::Smoke => &f.smoke,
                RunKind::Sweep => &f.sweep,
            };
            if let Some(last) = list.last() {
                return list.get(attempt).unwrap_or(last).clone();
            }
        }
        Step::success()
    }

    /// Every file a `passes_when` reads: what the runner copies out of the
    /// repository at a run's head.
    pub fn passes_when_files(&self) -> std::collections::BTreeSet<String> {
        self.families
            .values()
            .flat_map(|f| f.smoke.iter().chain(&f.sweep))
            .filter_map(|s| s.passes_when.as_ref().map(|p| p.file.clone()))
            .collect()
    }

    /// The step for a run of `family` whose image is `image`: [`Script::step`]
    /// with the first staged regression found (same lookup order) applied
    /// when the image carries it.
    pub fn step_for_image(&self, family: &str, kind: RunKind, attempt: usize, image: &str) -> Step {
        let step = self.step(family, kind, attempt);
        let key = family.rsplit_once(':').map_or(family, |(_, k)| k);
        let staged = [family, key, "*"]
            .into_iter()
            .find_map(|name| self.families.get(name)?.regression.as_ref());
        match staged {
            Some(r) if r.affects(image) => r.apply(step),
            _ => step,
        }
    }
}

/// Validates a `regression` table.
fn regression(origin: &str, at: &str, raw: RawRegression) -> Result<Regression, ScriptError> {
    let tags = raw.tags.unwrap_or_default();
    if tags.is_empty() {
        return Err(field_err(
            origin,
            &format!("{at}.tags"),
            "missing or empty; list the track's tags, oldest first",
        ));
    }
    for (i, t) in tags.iter().enumerate() {
        if t.is_empty()
            || t.len() > 128
            || t.chars().any(|c| c.is_whitespace() || c == ':' || c == '@')
        {
            return Err(field_err(
                origin,
                &format!("{at}.tags[{i}]"),
                format!("{t:?} is not an image tag"),
            ));
        }
        if tags[..i].contains(t) {
            return Err(field_err(
                origin,
                &format!("{at}.tags[{i}]"),
                format!("{t:?} is listed twice"),
            ));
        }
    }
    let Some(from_tag) = raw.from else {
        return Err(field_err(
            origin,
            &format!("{at}.from"),
            "missing; name the first tag with the regression",
        ));
    };
    let Some(from) = tags.iter().position(|t| *t == from_tag) else {
        return Err(field_err(
            origin,
            &format!("{at}.from"),
            format!("{from_tag:?} is not one of `tags`"),
        ));
    };
    let outcome = raw
        .outcome
        .map(|o| parse_conclusion(origin, &format!("{at}.outcome"), o.trim()))
        .transpose()?;
    let multipliers = Multipliers {
        throughput: factor(origin, at, "throughput", raw.throughput.as_ref())?,
        ttft: factor(origin, at, "ttft", raw.ttft.as_ref())?,
        tpot: factor(origin, at, "tpot", raw.tpot.as_ref())?,
        score: factor(origin, at, "score", raw.score.as_ref())?,
    };
    if outcome.is_none() && multipliers == Multipliers::default() {
        return Err(field_err(
            origin,
            at,
            "stages nothing: give an `outcome` or a factor (`throughput`, `ttft`, `tpot`, `score`)",
        ));
    }
    Ok(Regression {
        tags,
        from,
        outcome,
        multipliers,
    })
}

fn quote_key(key: &str) -> String {
    if !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        key.to_string()
    } else {
        format!("{key:?}")
    }
}

fn field_err(origin: &str, field: &str, message: impl Into<String>) -> ScriptError {
    ScriptError::Field {
        path: origin.to_string(),
        field: field.to_string(),
        message: message.into(),
    }
}

/// Turns a list of raw entries into steps: `delay` entries attach to the
/// outcome that follows them.
fn steps(origin: &str, at: &str, raw: Option<Vec<RawStep>>) -> Result<Vec<Step>, ScriptError> {
    let Some(raw) = raw else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    let mut pending_delay = Duration::ZERO;
    let mut pending_at: Option<String> = None;
    for (i, entry) in raw.into_iter().enumerate() {
        let here = format!("{at}[{i}]");
        let mut table = match entry {
            RawStep::Word(w) => word_table(origin, &here, &w)?,
            RawStep::Table(t) => *t,
        };
        let outcome = match &table.outcome {
            Some(o) => o.trim().to_string(),
            None if table.delay.is_some() => "delay".to_string(),
            None => {
                return Err(field_err(
                    origin,
                    &format!("{here}.outcome"),
                    "missing; expected success, failure, infra[:startup_failure|timed_out|cancelled] or delay",
                ));
            }
        };
        let conclusion = match outcome.as_str() {
            "delay" => {
                let secs_value = table.delay.as_ref().or(table.seconds.as_ref());
                let field = if table.delay.is_some() {
                    "delay"
                } else {
                    "seconds"
                };
                let Some(v) = secs_value else {
                    return Err(field_err(
                        origin,
                        &format!("{here}.delay"),
                        "a delay needs its length in seconds, e.g. { delay = 30 }",
                    ));
                };
                let d = seconds(origin, &format!("{here}.{field}"), v)?;
                reject_metric_fields(origin, &here, &table, "a delay")?;
                pending_delay += d;
                if pending_delay > Duration::from_secs(MAX_DELAY_SECS) {
                    return Err(field_err(
                        origin,
                        &format!("{here}.{field}"),
                        format!(
                            "delays before one outcome add up to more than {MAX_DELAY_SECS} seconds"
                        ),
                    ));
                }
                pending_at = Some(here);
                continue;
            }
            other => parse_conclusion(origin, &format!("{here}.outcome"), other)?,
        };
        if table.seconds.is_some() {
            return Err(field_err(
                origin,
                &format!("{here}.seconds"),
                "only a delay takes `seconds`; use `delay = N` to keep an outcome running first",
            ));
        }
        let mut delay = std::mem::take(&mut pending_delay);
        pending_at = None;
        if let Some(v) = &table.delay {
            delay += seconds(origin, &format!("{here}.delay"), v)?;
        }
        if delay > Duration::from_secs(MAX_DELAY_SECS) {
            return Err(field_err(
                origin,
                &format!("{here}.delay"),
                format!("more than {MAX_DELAY_SECS} seconds"),
            ));
        }
        let multipliers = Multipliers {
            throughput: factor(origin, &here, "throughput", table.throughput.as_ref())?,
            ttft: factor(origin, &here, "ttft", table.ttft.as_ref())?,
            tpot: factor(origin, &here, "tpot", table.tpot.as_ref())?,
            score: factor(origin, &here, "score", table.score.as_ref())?,
        };
        let partial = table.partial.unwrap_or(false);
        if partial && !matches!(conclusion, Conclusion::Failure | Conclusion::Success) {
            return Err(field_err(
                origin,
                &format!("{here}.partial"),
                "only a failure or a success uploads partial results",
            ));
        }
        let measured_image = table
            .image
            .as_deref()
            .map(|i| measured_image(origin, &here, conclusion, i))
            .transpose()?;
        let (log_lines, node, passes_when) = staged(origin, &here, conclusion, &mut table)?;
        out.push(Step {
            delay,
            conclusion,
            multipliers,
            partial,
            measured_image,
            log_lines,
            node,
            passes_when,
        });
    }
    if let Some(here) = pending_at {
        return Err(field_err(
            origin,
            &here,
            "a delay must be followed by the outcome it delays",
        ));
    }
    Ok(out)
}

/// The string shorthand: `success`, `failure`, `infra`, `infra:timed_out`,
/// `delay:30`.
fn word_table(origin: &str, here: &str, word: &str) -> Result<RawStepTable, ScriptError> {
    let word = word.trim();
    let mut t = RawStepTable {
        outcome: Some(word.to_string()),
        delay: None,
        seconds: None,
        throughput: None,
        ttft: None,
        tpot: None,
        score: None,
        partial: None,
        image: None,
        log_lines: None,
        node: None,
        passes_when: None,
    };
    if let Some(n) = word.strip_prefix("delay:") {
        let secs: i64 = n.trim().parse().map_err(|_| {
            field_err(
                origin,
                here,
                format!("{word:?}: expected delay:<whole seconds>, e.g. delay:30"),
            )
        })?;
        t.outcome = Some("delay".into());
        t.delay = Some(toml::Value::Integer(secs));
    } else if word == "delay" {
        return Err(field_err(
            origin,
            here,
            "\"delay\" needs its length: write delay:<seconds> or { delay = <seconds> }",
        ));
    }
    Ok(t)
}

fn parse_conclusion(origin: &str, field: &str, word: &str) -> Result<Conclusion, ScriptError> {
    Ok(match word {
        "success" => Conclusion::Success,
        "failure" => Conclusion::Failure,
        "infra" | "infra:startup_failure" => Conclusion::Infra(InfraKind::StartupFailure),
        "infra:timed_out" => Conclusion::Infra(InfraKind::TimedOut),
        "infra:cancelled" => Conclusion::Infra(InfraKind::Cancelled),
        other => {
            return Err(field_err(
                origin,
                field,
                format!(
                    "unknown outcome {other:?}; expected success, failure, infra, \
                     infra:startup_failure, infra:timed_out, infra:cancelled or delay"
                ),
            ));
        }
    })
}

fn seconds(origin: &str, field: &str, v: &toml::Value) -> Result<Duration, ScriptError> {
    let secs = match v {
        toml::Value::Integer(i) => *i as f64,
        toml::Value::Float(f) => *f,
        other => {
            return Err(field_err(
                origin,
                field,
                format!("expected a number of seconds, found {}", other.type_str()),
            ));
        }
    };
    if !secs.is_finite() || secs < 0.0 || secs > MAX_DELAY_SECS as f64 {
        return Err(field_err(
            origin,
            field,
            format!("{secs} is not a number of seconds between 0 and {MAX_DELAY_SECS}"),
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn factor(
    origin: &str,
    here: &str,
    name: &str,
    v: Option<&toml::Value>,
) -> Result<f64, ScriptError> {
    let field = format!("{here}.{name}");
    let f = match v {
        None => return Ok(1.0),
        Some(toml::Value::Integer(i)) => *i as f64,
        Some(toml::Value::Float(f)) => *f,
        Some(other) => {
            return Err(field_err(
                origin,
                &field,
                format!("expected a factor such as 1.10, found {}", other.type_str()),
            ));
        }
    };
    // A factor of 0 or less would make throughput vanish and deltas meaningless;
    // 100× is far beyond any real regression or speed-up.
    if !f.is_finite() || f <= 0.0 || f > 100.0 {
        return Err(field_err(
            origin,
            &field,
            format!("{f} is not a factor between 0 (exclusive) and 100"),
        ));
    }
    Ok(f)
}

/// Validates a step's `image`: only a run that uploads rows records one.
fn measured_image(
    origin: &str,
    here: &str,
    conclusion: Conclusion,
    image: &str,
) -> Result<String, ScriptError> {
    let field = format!("{here}.image");
    if !matches!(conclusion, Conclusion::Failure | Conclusion::Success) {
        return Err(field_err(
            origin,
            &field,
            "only a failure or a success uploads rows that record an image",
        ));
    }
    if image.is_empty() || image.len() > 512 {
        return Err(field_err(
            origin,
            &field,
            "expected an image reference of 1 to 512 characters",
        ));
    }
    if let Some(c) = image.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(field_err(
            origin,
            &field,
            format!("{image:?} contains the character {c:?}"),
        ));
    }
    Ok(image.to_owned())
}

/// Validates a step's staged failure: its log lines, node and the edit
/// that makes it pass.
#[allow(clippy::type_complexity)]
fn staged(
    origin: &str,
    here: &str,
    conclusion: Conclusion,
    t: &mut RawStepTable,
) -> Result<(Vec<String>, Option<String>, Option<PassesWhen>), ScriptError> {
    let log_lines = t.log_lines.take().unwrap_or_default();
    if log_lines.len() > MAX_LOG_LINES {
        return Err(field_err(
            origin,
            &format!("{here}.log_lines"),
            format!("more than {MAX_LOG_LINES} lines"),
        ));
    }
    for (i, line) in log_lines.iter().enumerate() {
        if line.chars().count() > MAX_LINE_CHARS || line.contains(['\n', '\r']) {
            return Err(field_err(
                origin,
                &format!("{here}.log_lines[{i}]"),
                format!("expected one line of at most {MAX_LINE_CHARS} characters"),
            ));
        }
    }
    let node = t.node.take();
    if matches!(conclusion, Conclusion::Infra(_)) && (node.is_some() || !log_lines.is_empty()) {
        return Err(field_err(
            origin,
            &format!("{here}.outcome"),
            "an infrastructure conclusion starts no job that prints; stage a node's failure \
             as `failure` with its `node` and `log_lines`",
        ));
    }
    if let Some(n) = &node
        && (n.is_empty()
            || n.len() > 128
            || !n
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(field_err(
            origin,
            &format!("{here}.node"),
            format!("{n:?} is not a runner name (letters, digits, `-`, `_`, `.`; 1 to 128)"),
        ));
    }
    let passes_when = match t.passes_when.take() {
        None => None,
        Some(p) => {
            let at = format!("{here}.passes_when");
            if conclusion == Conclusion::Success {
                return Err(field_err(origin, &at, "a success passes already"));
            }
            let file = p.file.trim_start_matches('/').to_owned();
            if file.is_empty() || file.len() > 512 || file.split('/').any(|s| s == "..") {
                return Err(field_err(
                    origin,
                    &format!("{at}.file"),
                    format!("{:?} is not a repository path", p.file),
                ));
            }
            if p.contains.is_empty() || p.contains.len() > MAX_LINE_CHARS {
                return Err(field_err(
                    origin,
                    &format!("{at}.contains"),
                    format!("expected 1 to {MAX_LINE_CHARS} characters"),
                ));
            }
            Some(PassesWhen {
                file,
                contains: p.contains,
            })
        }
    };
    Ok((log_lines, node, passes_when))
}

fn reject_metric_fields(
    origin: &str,
    here: &str,
    t: &RawStepTable,
    what: &str,
) -> Result<(), ScriptError> {
    for (name, set) in [
        ("throughput", t.throughput.is_some()),
        ("ttft", t.ttft.is_some()),
        ("tpot", t.tpot.is_some()),
        ("score", t.score.is_some()),
        ("partial", t.partial.is_some()),
        ("image", t.image.is_some()),
        ("log_lines", t.log_lines.is_some()),
        ("node", t.node.is_some()),
        ("passes_when", t.passes_when.is_some()),
    ] {
        if set {
            return Err(field_err(
                origin,
                &format!("{here}.{name}"),
                format!("{what} uploads nothing; put `{name}` on the outcome that follows it"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Script, ScriptError> {
        Script::parse("test.toml", text)
    }

    #[test]
    fn lookup_prefers_family_then_key_then_default_and_repeats_the_last_step() {
        let s = parse(
            r#"
            [families."*"]
            smoke = ["success"]
            sweep = ["infra:timed_out", "success"]
            [families.demo-a]
            smoke = ["failure", { outcome = "success", throughput = 1.1 }]
            [families."configs/x-master.yaml:demo-a"]
            sweep = ["failure"]
            "#,
        )
        .unwrap();
        let fam = "configs/x-master.yaml:demo-a";
        assert_eq!(
            s.step(fam, RunKind::Smoke, 0).conclusion,
            Conclusion::Failure
        );
        let second = s.step(fam, RunKind::Smoke, 1);
        assert_eq!(second.conclusion, Conclusion::Success);
        assert_eq!(second.multipliers.throughput, 1.1);
        assert_eq!(s.step(fam, RunKind::Smoke, 7), second);
        assert_eq!(
            s.step(fam, RunKind::Sweep, 0).conclusion,
            Conclusion::Failure
        );
        let other = "configs/x-master.yaml:other";
        assert_eq!(
            s.step(other, RunKind::Sweep, 0).conclusion,
            Conclusion::Infra(InfraKind::TimedOut)
        );
        assert_eq!(
            s.step(other, RunKind::Sweep, 1).conclusion,
            Conclusion::Success
        );
    }

    #[test]
    fn delays_attach_to_the_following_outcome() {
        let s = parse(
            r#"
            [families."*"]
            smoke = ["delay:2", { delay = 1.5 }, "failure", { outcome = "success", delay = 3 }]
            "#,
        )
        .unwrap();
        let first = s.step("f:k", RunKind::Smoke, 0);
        assert_eq!(first.delay, Duration::from_millis(3500));
        assert_eq!(first.conclusion, Conclusion::Failure);
        assert_eq!(
            s.step("f:k", RunKind::Smoke, 1).delay,
            Duration::from_secs(3)
        );
    }

    #[test]
    fn a_staged_regression_changes_runs_from_its_tag_onward() {
        let s = parse(
            r#"
            [families."*"]
            smoke = [{ outcome = "success", ttft = 0.9 }]
            [families.demo-a]
            regression = { tags = ["n1", "n2", "n3", "n4"], from = "n3", throughput = 0.8 }
            [families.demo-b]
            regression = { tags = ["n1", "n2"], from = "n2", outcome = "failure" }
            "#,
        )
        .unwrap();
        let a = "configs/x-master.yaml:demo-a";
        for (image, slower) in [
            ("vllm/vllm-openai:n1", false),
            ("vllm/vllm-openai:n2", false),
            ("vllm/vllm-openai:n3", true),
            ("registry:5000/vllm/vllm-openai:n4@sha256:00", true),
            ("vllm/vllm-openai:other", false),
            ("vllm/vllm-openai", false),
        ] {
            let step = s.step_for_image(a, RunKind::Smoke, 0, image);
            assert_eq!(step.conclusion, Conclusion::Success, "{image}");
            let want = if slower { 0.8 } else { 1.0 };
            assert_eq!(step.multipliers.throughput, want, "{image}");
            // The step's own factors stay.
            assert_eq!(step.multipliers.ttft, 0.9, "{image}");
        }
        let b = "configs/x-master.yaml:demo-b";
        assert_eq!(
            s.step_for_image(b, RunKind::Sweep, 0, "x/y:n2").conclusion,
            Conclusion::Failure
        );
        assert_eq!(
            s.step_for_image(b, RunKind::Sweep, 0, "x/y:n1").conclusion,
            Conclusion::Success
        );
    }

    #[test]
    fn a_step_can_record_another_image_than_the_masters() {
        let s = parse(
            "[families.a]\nsmoke = [{ outcome = \"success\", image = \"lmsysorg/sglang:v0.5.8-cu130\" }, \"success\"]",
        )
        .unwrap();
        assert_eq!(
            s.step("f:a", RunKind::Smoke, 0).measured_image.as_deref(),
            Some("lmsysorg/sglang:v0.5.8-cu130")
        );
        assert_eq!(s.step("f:a", RunKind::Smoke, 1).measured_image, None);
        for (text, why) in [
            (
                "{ outcome = \"infra\", image = \"a:1\" }",
                "only a failure or a success",
            ),
            ("{ outcome = \"success\", image = \"\" }", "1 to 512"),
            (
                "{ outcome = \"success\", image = \"a b:1\" }",
                "contains the character",
            ),
            ("{ delay = 3, image = \"a:1\" }", "uploads nothing"),
        ] {
            let e = parse(&format!("[families.a]\nsmoke = [{text}, \"success\"]")).unwrap_err();
            let m = e.to_string();
            assert!(m.contains("families.a.smoke[0].image"), "{m}");
            assert!(m.contains(why), "{m}");
        }
    }

    #[test]
    fn a_failure_can_be_staged_by_its_log_on_a_node_until_an_edit_lands() {
        let s = parse(
            r#"
            [families.a]
            smoke = [{ outcome = "failure", node = "mia1-p01-g09", log_lines = ["pyxis is broken"],
                       passes_when = { file = "/b/x.sh", contains = "--gpu-memory-utilization 0.90" } }]
            "#,
        )
        .unwrap();
        let step = s.step("f:a", RunKind::Smoke, 3);
        assert_eq!(step.node.as_deref(), Some("mia1-p01-g09"));
        assert_eq!(step.log_lines, vec!["pyxis is broken".to_owned()]);
        assert_eq!(
            step.passes_when,
            Some(PassesWhen {
                file: "b/x.sh".into(),
                contains: "--gpu-memory-utilization 0.90".into()
            })
        );
        assert_eq!(
            s.passes_when_files().into_iter().collect::<Vec<_>>(),
            vec!["b/x.sh".to_owned()]
        );
        for (text, field) in [
            (
                "{ outcome = \"failure\", node = \"a b\" }",
                "families.a.smoke[0].node",
            ),
            (
                "{ outcome = \"failure\", log_lines = [\"a\\nb\"] }",
                "families.a.smoke[0].log_lines[0]",
            ),
            (
                "{ outcome = \"success\", passes_when = { file = \"x\", contains = \"y\" } }",
                "families.a.smoke[0].passes_when",
            ),
            (
                "{ outcome = \"failure\", passes_when = { file = \"../x\", contains = \"y\" } }",
                "families.a.smoke[0].passes_when.file",
            ),
            (
                "{ outcome = \"infra\", node = \"n1\" }",
                "families.a.smoke[0].outcome",
            ),
            ("{ delay = 3, node = \"n1\" }", "families.a.smoke[0].node"),
        ] {
            let e = parse(&format!("[families.a]\nsmoke = [{text}, \"success\"]"))
                .expect_err(text)
                .to_string();
            assert!(e.contains(&format!("field `{field}`")), "{text}: {e}");
        }
    }

    #[test]
    fn nothing_scripted_means_success() {
        let s = parse("").unwrap();
        assert_eq!(s.step("f:k", RunKind::Sweep, 3), Step::success());
    }

    #[test]
    fn malformed_scripts_name_the_field() {
        let cases: &[(&str, &str)] = &[
            (
                "[families.a]\nsmoke = [\"sucess\"]",
                "families.a.smoke[0].outcome",
            ),
            (
                "[families.a]\nsmoke = [{ outcome = \"success\", throughput = -1 }]",
                "families.a.smoke[0].throughput",
            ),
            (
                "[families.a]\nsmoke = [{ outcome = \"success\", ttft = \"fast\" }]",
                "families.a.smoke[0].ttft",
            ),
            ("[families.a]\nsweep = [\"delay:5\"]", "families.a.sweep[0]"),
            (
                "[families.a]\nsweep = [\"delay:soon\"]",
                "families.a.sweep[0]",
            ),
            ("[families.a]\nsweep = [\"delay\"]", "families.a.sweep[0]"),
            (
                "[families.a]\nsmoke = [{ delay = -3 }, \"success\"]",
                "families.a.smoke[0].delay",
            ),
            (
                "[families.a]\nsmoke = [{ throughput = 1.2 }]",
                "families.a.smoke[0].outcome",
            ),
            (
                "[families.a]\nsmoke = [{ outcome = \"infra\", partial = true }]",
                "families.a.smoke[0].partial",
            ),
            (
                "[families.a]\nsmoke = [{ delay = 1, throughput = 1.2 }, \"success\"]",
                "families.a.smoke[0].throughput",
            ),
            ("[families.\"\"]\nsmoke = [\"success\"]", "families.\"\""),
            (
                "[families.a]\nsmoke = [{ outcome = \"success\", delay = 1e12 }]",
                "families.a.smoke[0].delay",
            ),
            (
                "[families.a]\nregression = { from = \"n1\", throughput = 0.8 }",
                "families.a.regression.tags",
            ),
            (
                "[families.a]\nregression = { tags = [\"n1\", \"n1\"], from = \"n1\", throughput = 0.8 }",
                "families.a.regression.tags[1]",
            ),
            (
                "[families.a]\nregression = { tags = [\"n1\", \"a b\"], from = \"n1\", throughput = 0.8 }",
                "families.a.regression.tags[1]",
            ),
            (
                "[families.a]\nregression = { tags = [\"n1\"], throughput = 0.8 }",
                "families.a.regression.from",
            ),
            (
                "[families.a]\nregression = { tags = [\"n1\"], from = \"n2\", throughput = 0.8 }",
                "families.a.regression.from",
            ),
            (
                "[families.a]\nregression = { tags = [\"n1\"], from = \"n1\", outcome = \"slow\" }",
                "families.a.regression.outcome",
            ),
            (
                "[families.a]\nregression = { tags = [\"n1\"], from = \"n1\", throughput = 0 }",
                "families.a.regression.throughput",
            ),
            (
                "[families.a]\nregression = { tags = [\"n1\"], from = \"n1\" }",
                "families.a.regression",
            ),
        ];
        for (text, field) in cases {
            let err = parse(text).expect_err(text).to_string();
            assert!(err.starts_with("test.toml: "), "{err}");
            assert!(
                err.contains(&format!("field `{field}`")),
                "{text:?} gave {err}"
            );
        }
    }

    #[test]
    fn unknown_keys_and_bad_shapes_are_syntax_errors_naming_the_key() {
        for (text, needle) in [
            ("[families.a]\nsmok = [\"success\"]", "smok"),
            ("[famiies.a]\nsmoke = [\"success\"]", "famiies"),
            ("[families.a]\nsmoke = \"success\"", "smoke"),
            (
                "[families.a]\nsmoke = [{ outcome = \"success\", speed = 2 }]",
                "smoke",
            ),
            ("[families.a\nsmoke = []", "test.toml"),
        ] {
            let err = parse(text).expect_err(text).to_string();
            assert!(err.starts_with("test.toml: "), "{err}");
            assert!(err.contains(needle), "{text:?} gave {err}");
        }
    }
}
