//! Everything a verification reads, gathered once (the head SHA resolved
//! once, so a push during verification cannot borrow the verdict).

use std::collections::BTreeMap;

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
    /// Run id → commit it ran on.
    pub run_commits: BTreeMap<u64, String>,
    pub comments: Vec<CommentFact>,
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
pub fn parse_agg_eval(bytes: &[u8]) -> Result<Vec<EvalFact>, String> {
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| format!("agg_eval_all.json: {e}"))?;
    let rows = value.as_array().ok_or("agg_eval_all.json: not an array")?;
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
