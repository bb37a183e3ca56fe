//! CODEOWNER sign-off verification in the benchmark repository's own
//! contract.
//!
//! When a CODEOWNER posts the PR review checklist ("As a PR reviewer and
//! CODEOWNER, I have reviewed this and have: …"), the repository's workflow
//! has a verifier re-derive every check and publish a verdict comment and the
//! `codeowner-signoff-verify` commit status. This crate holds the rules only:
//! which contract version the default branch carries ([`contract`]), the
//! checklist comparison ([`checklist`]), the CODEOWNERS last-match rule
//! ([`codeowners`]), each check as a function of gathered [`Evidence`]
//! ([`checks`]), the verdict rule and the byte-compatible rendering
//! ([`render`]). Gathering and publishing live with the GitHub client.

pub mod checklist;
pub mod checks;
pub mod codeowners;
pub mod contract;
pub mod evidence;
pub mod render;

use serde::Serialize;

pub use contract::{CheckKind, ContractVersion};
pub use evidence::Evidence;

/// The phrase that makes a comment, review or inline comment a sign-off.
pub const SIGNOFF_PHRASE: &str = "As a PR reviewer and CODEOWNER";

/// The commit status context the repository's "Protect main" ruleset requires.
pub const STATUS_CONTEXT: &str = "codeowner-signoff-verify";

/// The largest sign-off body Klaud reads; longer ones are cut (a sign-off is
/// hostile input and the template is about 13 KB in its longest version).
pub const MAX_SIGNOFF_BYTES: usize = 64 * 1024;

/// One check's result, as the repository's verdict rows name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Outcome {
    #[serde(rename = "PASS")]
    Pass,
    #[serde(rename = "FAIL")]
    Fail,
    #[serde(rename = "N/A")]
    NotApplicable,
    #[serde(rename = "WARN")]
    Warn,
}

impl Outcome {
    /// The word on the row.
    pub fn word(self) -> &'static str {
        match self {
            Outcome::Pass => "PASS",
            Outcome::Fail => "FAIL",
            Outcome::NotApplicable => "N/A",
            Outcome::Warn => "WARN",
        }
    }

    /// The status emoji that leads the row.
    pub fn emoji(self) -> &'static str {
        match self {
            Outcome::Pass => "✅",
            Outcome::Fail => "❌",
            Outcome::NotApplicable => "➖",
            Outcome::Warn => "⚠️",
        }
    }
}

/// One decided check.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckResult {
    pub number: u32,
    pub name: String,
    pub result: Outcome,
    /// One line; written by Klaud, never copied from the sign-off unescaped.
    pub reason: String,
    /// What a maintainer needs to re-check the row in a minute: run ids, job
    /// names, the CODEOWNERS line, checklist items, scores against the bar.
    pub evidence: Vec<String>,
}

/// The header of a verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum VerdictWord {
    #[serde(rename = "PASS")]
    Pass,
    #[serde(rename = "WARN")]
    Warn,
    #[serde(rename = "REJECTED")]
    Rejected,
}

/// The whole verdict on one sign-off at one commit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    pub verdict: VerdictWord,
    pub assessed_commit: String,
    pub signer: String,
    pub checks: Vec<CheckResult>,
}

impl Verdict {
    /// The repository's header rule: any FAIL rejects, else any WARN warns,
    /// else PASS.
    pub fn new(assessed_commit: String, signer: String, checks: Vec<CheckResult>) -> Self {
        let verdict = if checks.iter().any(|c| c.result == Outcome::Fail) {
            VerdictWord::Rejected
        } else if checks.iter().any(|c| c.result == Outcome::Warn) {
            VerdictWord::Warn
        } else {
            VerdictWord::Pass
        };
        Self {
            verdict,
            assessed_commit,
            signer,
            checks,
        }
    }
}

/// Why a sign-off is not verified at all (the repository's gate): the
/// workflow skips these, so Klaud publishes nothing for them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateRefusal {
    #[error("pull request #{0} is not open")]
    NotOpen(u64),
    #[error("pull request #{0} is a draft")]
    Draft(u64),
    #[error("the signer {0} is a bot, not a person")]
    Bot(String),
    #[error("the signer {login} has {permission} permission; a sign-off needs write or admin")]
    Permission { login: String, permission: String },
    #[error("the comment does not contain the sign-off phrase \"{SIGNOFF_PHRASE}\"")]
    NotASignoff,
    #[error(
        "no sign-off is required: every changed path is owned only by the core team or repository admins"
    )]
    NotRequired,
}

/// Why verification could not be decided (Klaud's own failure or missing
/// repository contract): nothing is published as PASS.
#[derive(Debug, thiserror::Error)]
pub enum SignoffError {
    #[error(
        "the default branch has no sign-off contract (.github/codeowner-signoff-verify-prompt.md with numbered checks)"
    )]
    NoContract,
    #[error("the default branch has no checklist template (docs/PR_REVIEW_CHECKLIST.md)")]
    NoChecklist,
}

/// Applies the gate, then every check the default branch's contract has.
pub fn verify(evidence: &Evidence) -> Result<Result<Verdict, GateRefusal>, SignoffError> {
    if let Err(refusal) = gate(evidence) {
        return Ok(Err(refusal));
    }
    let version = ContractVersion::detect(evidence.default_branch.prompt.as_deref())
        .ok_or(SignoffError::NoContract)?;
    let checklist = evidence
        .default_branch
        .checklist
        .as_deref()
        .ok_or(SignoffError::NoChecklist)?;
    let context = checks::Context::new(evidence, version, checklist);
    if version.scope_skips_core_and_admins() && !context.signoff_required() {
        return Ok(Err(GateRefusal::NotRequired));
    }
    let results = version
        .checks()
        .iter()
        .enumerate()
        .map(|(number, kind)| context.decide(number as u32, *kind))
        .collect();
    Ok(Ok(Verdict::new(
        evidence.head_sha.clone(),
        evidence.signer.login.clone(),
        results,
    )))
}

/// The repository's gate: an open, non-draft pull request and a person
/// with write or admin permission who wrote the phrase.
pub fn gate(evidence: &Evidence) -> Result<(), GateRefusal> {
    if !evidence.pull.open {
        return Err(GateRefusal::NotOpen(evidence.pull.number));
    }
    if evidence.pull.draft {
        return Err(GateRefusal::Draft(evidence.pull.number));
    }
    let signer = &evidence.signer;
    if !signer.user_type.eq_ignore_ascii_case("User") || signer.login.ends_with("[bot]") {
        return Err(GateRefusal::Bot(signer.login.clone()));
    }
    let permitted = matches!(signer.permission.as_str(), "admin" | "write")
        && signer
            .role_name
            .as_deref()
            .is_none_or(|role| matches!(role, "admin" | "maintain" | "write"));
    if !permitted {
        return Err(GateRefusal::Permission {
            login: signer.login.clone(),
            permission: signer
                .role_name
                .clone()
                .unwrap_or_else(|| signer.permission.clone()),
        });
    }
    if !evidence.signoff.body.contains(SIGNOFF_PHRASE) {
        return Err(GateRefusal::NotASignoff);
    }
    Ok(())
}
