//! Everything a verification reads, gathered once (the head SHA resolved
//! once, so a push during verification cannot borrow the verdict).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

/// The pull request.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PullFacts {
    pub number: u64,
    pub open: bool,
    pub draft: bool,
    pub title: String,
    /// Bounded like the sign-off.
    pub body: String,
}

/// Where the sign-off was posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum SignoffKind {
    /// A conversation comment (`#issuecomment-N`).
    IssueComment,
    /// A review (`#pullrequestreview-N`).
    Review,
    /// An inline review comment (`#discussion_rN`).
    ReviewComment,
}

impl SignoffKind {
    /// The anchor GitHub uses in the comment's URL.
    pub fn anchor(self) -> &'static str {
        match self {
            SignoffKind::IssueComment => "issuecomment-",
            SignoffKind::Review => "pullrequestreview-",
            SignoffKind::ReviewComment => "discussion_r",
        }
    }
}

/// The sign-off itself.
#[derive(Debug, Clone, Serialize)]
pub struct Signoff {
    pub kind: SignoffKind,
    pub id: u64,
    pub author: String,
    /// Cut to [`crate::MAX_SIGNOFF_BYTES`].
    pub body: String,
    /// Set when someone other than the author wrote the current text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edited: Option<SignoffEdit>,
}

/// Who wrote a sign-off's current text when it was not its author: a user
/// with write access may edit anyone's comment, and what the text then
/// promises is the editor's word, not the author's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum SignoffEdit {
    /// The last edit's editor (GraphQL `editor`): the sign-off is
    /// verified as theirs (the gathered signer is this login).
    By(String),
    /// Edited, but GitHub names no editor (a deleted account): it is no
    /// one's sign-off that can be verified.
    Unknown,
}

/// The signer as GitHub reports them.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Signer {
    pub login: String,
    /// `User` or `Bot`.
    pub user_type: String,
    /// `permission` of `GET /collaborators/{u}/permission`.
    pub permission: String,
    /// `role_name` of the same answer.
    pub role_name: Option<String>,
}

/// Files read at the default branch (the contract's source of truth).
#[derive(Debug, Clone, Default, Serialize)]
pub struct DefaultBranchFiles {
    pub prompt: Option<String>,
    pub checklist: Option<String>,
    pub models_md: Option<String>,
    /// `golden_al_distribution/*.yaml`: path → text.
    pub golden_al: BTreeMap<String, String>,
    /// `docs/waiver/*.md` paths.
    pub waivers: Vec<String>,
}

/// One changed file of the pull request.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ChangedFile {
    pub path: String,
    pub previous_path: Option<String>,
    /// `added`, `modified`, `removed`, `renamed`, …
    pub status: String,
    /// The unified diff GitHub gives (absent for large or binary files).
    pub patch: Option<String>,
    /// The file at the head (absent when removed, binary or too large).
    pub head_text: Option<String>,
}

impl ChangedFile {
    /// Lines the pull request adds.
    pub fn added_lines(&self) -> impl Iterator<Item = &str> {
        self.patch
            .as_deref()
            .unwrap_or("")
            .lines()
            .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
            .map(|l| &l[1..])
    }
}

/// A check run on a commit (a job of a workflow run).
#[derive(Debug, Clone, Default, Serialize)]
pub struct CheckRunFact {
    pub sha: String,
    pub name: String,
    pub status: String,
    pub conclusion: Option<String>,
    /// From the `details_url` (`/actions/runs/<id>/…`).
    pub run_id: Option<u64>,
}

/// One row of a run's aggregated eval results.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EvalFact {
    pub task: String,
    pub score: Option<f64>,
    pub score_name: String,
    /// What the row names: model prefix, hardware, framework, precision, conc.
    pub label: String,
    /// The image the point ran, when the row carries it.
    pub image: Option<String>,
}

/// One measured point of a run's aggregated benchmark results
/// (`results_bmk/agg_bmk.json`, rows as `utils/process_result.py` writes
/// them).
#[derive(Debug, Clone, Default, Serialize)]
pub struct BenchPoint {
    pub model_prefix: String,
    pub hw: String,
    pub framework: String,
    pub precision: String,
    pub spec_decoding: String,
    /// `isl/osl` for fixed sequence lengths, else the scenario type.
    pub scenario: String,
    pub conc: u64,
    /// Total token throughput per GPU.
    pub tput_per_gpu: Option<f64>,
    /// End-to-end latency in seconds: the median for fixed sequence
    /// lengths, P90 for AgentX (the app's series).
    pub e2el: Option<f64>,
    pub image: Option<String>,
}

/// The most benchmark rows read from one run.
pub const MAX_BENCH_POINTS: usize = 10_000;

/// Why a run's result file could not be read; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// Not JSON.
    #[error("{file}: {source}")]
    Json {
        /// The file's name.
        file: &'static str,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// JSON, but not an array of rows.
    #[error("{file}: not an array")]
    NotAnArray {
        /// The file's name.
        file: &'static str,
    },
    /// More rows than any real run writes.
    #[error("{file}: {rows} rows, more than {limit}")]
    TooManyRows {
        /// The file's name.
        file: &'static str,
        /// Rows found.
        rows: usize,
        /// Rows allowed.
        limit: usize,
    },
}

/// The rows of a result file that must hold a JSON array.
fn json_rows(bytes: &[u8], file: &'static str) -> Result<Vec<serde_json::Value>, ArtifactError> {
    match serde_json::from_slice(bytes) {
        Ok(serde_json::Value::Array(rows)) => Ok(rows),
        Ok(_) => Err(ArtifactError::NotAnArray { file }),
        Err(source) => Err(ArtifactError::Json { file, source }),
    }
}

/// Reads `agg_bmk.json` (an array of rows).
pub fn parse_agg_bmk(bytes: &[u8]) -> Result<Vec<BenchPoint>, ArtifactError> {
    let rows = json_rows(bytes, "agg_bmk.json")?;
    if rows.len() > MAX_BENCH_POINTS {
        return Err(ArtifactError::TooManyRows {
            file: "agg_bmk.json",
            rows: rows.len(),
            limit: MAX_BENCH_POINTS,
        });
    }
    Ok(rows
        .iter()
        .map(|row| {
            let field = |k: &str| {
                row.get(k)
                    .or_else(|| row.get("metrics").and_then(|m| m.get(k)))
            };
            let text = |k: &str| field(k).and_then(|v| v.as_str()).unwrap_or("").to_owned();
            let number = |k: &str| field(k).and_then(serde_json::Value::as_f64);
            let prefix = match text("infmax_model_prefix") {
                p if p.is_empty() => text("model_prefix"),
                p => p,
            };
            let agentic = row.get("scenario_type").is_some() || field("isl").is_none();
            let scenario = if agentic {
                match text("scenario_type") {
                    s if s.is_empty() => "agentic".to_owned(),
                    s => s,
                }
            } else {
                format!(
                    "{}/{}",
                    field("isl")
                        .and_then(serde_json::Value::as_u64)
                        .unwrap_or(0),
                    field("osl")
                        .and_then(serde_json::Value::as_u64)
                        .unwrap_or(0)
                )
            };
            BenchPoint {
                model_prefix: prefix,
                hw: text("hw"),
                framework: text("framework"),
                precision: text("precision"),
                spec_decoding: match text("spec_decoding") {
                    s if s.is_empty() => "none".to_owned(),
                    s => s,
                },
                scenario,
                conc: field("conc")
                    .and_then(serde_json::Value::as_u64)
                    .unwrap_or(0),
                tput_per_gpu: number("tput_per_gpu"),
                e2el: if agentic {
                    number("p90_e2el")
                } else {
                    number("median_e2el")
                },
                image: field("image").and_then(|v| v.as_str()).map(str::to_owned),
            }
        })
        .collect())
}

/// Why an upstream recipe pull request a sign-off links could not be read
/// (the contract then fails it as not verifiable).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecipePullUnreadable {
    /// The link's repository is not `owner/name`.
    #[error("{repo} is not owner/name")]
    NotOwnerName {
        /// The repository part of the link.
        repo: String,
    },
    /// GitHub does not show it (403, 404, 410 or 451).
    #[error("GitHub answers {status} for it")]
    Hidden {
        /// GitHub's status.
        status: u16,
    },
}

// Written as its sentence, as the evidence always showed it.
impl Serialize for RecipePullUnreadable {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// An upstream recipe pull request a sign-off links, as GitHub reports it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RecipePull {
    /// `open` or `closed`.
    pub state: String,
    pub draft: bool,
    /// Set only when the pull request merged.
    pub merged_at: Option<String>,
}

/// A conversation comment (for the reuse command).
#[derive(Debug, Clone, Default, Serialize)]
pub struct CommentFact {
    pub login: String,
    pub author_association: String,
    pub body: String,
}

/// All gathered evidence.
#[derive(Debug, Clone, Serialize)]
pub struct Evidence {
    pub repo: String,
    pub pull: PullFacts,
    /// The head SHA resolved once at the start.
    pub head_sha: String,
    pub signoff: Signoff,
    pub signer: Signer,
    pub default_branch: DefaultBranchFiles,
    /// CODEOWNERS at the base commit.
    pub codeowners: Option<String>,
    /// `org/team` → whether the signer is a member; absent when GitHub did
    /// not say (an unreadable membership is not a failure).
    pub team_membership: BTreeMap<String, bool>,
    /// Lower-case logins of the users CODEOWNERS names for the changed
    /// paths whose repository `permission` and `role_name` are both
    /// `admin` (read for the newer contract only, whose scope leaves them
    /// out).
    pub owner_admins: BTreeSet<String>,
    pub changed_files: Vec<ChangedFile>,
    /// `configs/*-master.yaml` at the base: path → text.
    pub masters_base: BTreeMap<String, String>,
    /// The same files at the head.
    pub masters_head: BTreeMap<String, String>,
    /// Commits currently in the pull request.
    pub pr_commits: Vec<String>,
    pub check_runs: Vec<CheckRunFact>,
    /// Run id → its eval rows, or why they could not be read.
    pub evals: BTreeMap<u64, Result<Vec<EvalFact>, String>>,
    /// The green sweep's run id → its measured benchmark points, or why
    /// they could not be read.
    pub benchmarks: BTreeMap<u64, Result<Vec<BenchPoint>, String>>,
    /// Run id → commit it ran on.
    pub run_commits: BTreeMap<u64, String>,
    pub comments: Vec<CommentFact>,
    /// Each upstream recipe pull request the sign-off links (by its link):
    /// its state, or why it could not be read (a link that does not
    /// resolve is not verifiable, which the contract fails).
    pub recipe_pulls: BTreeMap<String, Result<RecipePull, RecipePullUnreadable>>,
    /// Least score per eval task (lower-case), the repository's bar.
    pub eval_bars: BTreeMap<String, f64>,
}

/// The eval bar the repository's verifier applied in its published verdicts
/// (GSM8K exact match, strict, 0.85); the repository does not write it in a
/// file, so the configuration may override or extend it.
pub fn default_eval_bars() -> BTreeMap<String, f64> {
    BTreeMap::from([("gsm8k".to_owned(), 0.85)])
}

/// Reads `agg_eval_all.json` (an array of rows as
/// `utils/collect_eval_results.py` writes them).
pub fn parse_agg_eval(bytes: &[u8]) -> Result<Vec<EvalFact>, ArtifactError> {
    let rows = json_rows(bytes, "agg_eval_all.json")?;
    Ok(rows
        .iter()
        .map(|row| {
            let text = |k: &str| row.get(k).and_then(|v| v.as_str()).unwrap_or("");
            let score = row
                .get("score")
                .and_then(|v| v.as_f64())
                .or_else(|| row.get("em_strict").and_then(|v| v.as_f64()));
            let score_name = match text("score_name") {
                "" => "em_strict".to_owned(),
                name => name.to_owned(),
            };
            let conc = row.get("conc").and_then(|v| v.as_u64()).unwrap_or(0);
            EvalFact {
                task: text("task").to_owned(),
                score,
                score_name,
                label: format!(
                    "{} {} {} {} c{}",
                    text("model_prefix"),
                    text("hw"),
                    text("framework"),
                    text("precision"),
                    conc
                ),
                image: row.get("image").and_then(|v| v.as_str()).map(str::to_owned),
            }
        })
        .collect())
}
