//! Ownership proofs (spec §5). Before any mutation Klaud re-reads the claim
//! (owner, run, fence, candidates), the pull request (author = bot, head
//! repository = the repository, no `klaud-handoff` label), the branch head
//! (= the head Klaud last wrote) and, for runs, actor and title. Only
//! [`check`] can make an [`OwnershipProof`]; every mutating forge call
//! requires one.

use std::fmt;

use klaud_claims::claim::ownership_mismatch;
use klaud_claims::{ClaimRecord, HeldClaim};

use super::forge::{Forge, ForgeError};

/// The label with which a maintainer takes a PR over.
pub const HANDOFF_LABEL: &str = "klaud-handoff";

/// Evidence that, when it was made, the claim, branch, PR and run named in
/// it were still Klaud's. It cannot be built outside this module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnershipProof {
    fence: u64,
    head: Option<String>,
    pull: Option<u64>,
    run: Option<u64>,
}

impl OwnershipProof {
    /// The claim fence that was checked.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// The branch head that was checked, if a branch was.
    pub fn head(&self) -> Option<&str> {
        self.head.as_deref()
    }

    /// The pull request that was checked, if one was.
    pub fn pull(&self) -> Option<u64> {
        self.pull
    }

    /// The run that was checked, if one was.
    pub fn run(&self) -> Option<u64> {
        self.run
    }
}

/// What the candidate's things must look like.
#[derive(Debug, Clone, Copy)]
pub struct Expectation<'a> {
    /// The claim as Klaud last wrote it.
    pub claim: &'a HeldClaim,
    /// `(branch name, head Klaud last wrote)`.
    pub branch: Option<(&'a str, &'a str)>,
    /// The pull request.
    pub pull: Option<u64>,
    /// `(run id, expected title)`.
    pub run: Option<(u64, &'a str)>,
}

/// Whether a mismatch means a maintainer took over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MismatchKind {
    /// A maintainer took over (handoff label, foreign commit).
    Handoff,
    /// Anything else that is not Klaud's any more.
    Unexpected,
}

/// Something is not Klaud's: what differed, expected and found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// Handoff or unexpected.
    pub kind: MismatchKind,
    /// What was checked, e.g. `branch klaud/auto-… head`.
    pub what: String,
    /// What Klaud expected.
    pub expected: String,
    /// What it found.
    pub found: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ownership check failed on {}: expected {}, found {}",
            self.what, self.expected, self.found
        )
    }
}

/// Why no proof could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OwnershipError {
    /// The check ran and something is not ours: mutate nothing.
    #[error("{0}")]
    Mismatch(Mismatch),
    /// The check could not read what it must check.
    #[error("ownership check could not read GitHub: {0}")]
    Forge(#[from] ForgeError),
}

fn mismatch(kind: MismatchKind, what: String, expected: String, found: String) -> OwnershipError {
    OwnershipError::Mismatch(Mismatch {
        kind,
        what,
        expected,
        found,
    })
}

fn same_login(a: Option<&str>, bot: &str) -> bool {
    a.is_some_and(|a| a.eq_ignore_ascii_case(bot))
}

/// Re-reads everything `expect` names and returns a proof when all of it is
/// still Klaud's.
pub async fn check(
    forge: &dyn Forge,
    expect: Expectation<'_>,
) -> Result<OwnershipProof, OwnershipError> {
    let bot = forge.bot_login();
    let claim_ref = expect.claim.ref_name.as_str();
    let tip = forge
        .refs()
        .read_ref(claim_ref)
        .await
        .map_err(|e| ForgeError::Other(format!("read claim {claim_ref}: {e}")))?;
    let Some(tip) = tip else {
        return Err(mismatch(
            MismatchKind::Unexpected,
            format!("claim {claim_ref}"),
            describe(&expect.claim.record),
            "no claim ref (deleted)".into(),
        ));
    };
    let found = ClaimRecord::parse(&tip.message).map_err(|e| {
        mismatch(
            MismatchKind::Unexpected,
            format!("claim {claim_ref}"),
            describe(&expect.claim.record),
            format!("a record that does not parse ({e})"),
        )
    })?;
    if let Some(diff) = ownership_mismatch(&expect.claim.record, &found) {
        return Err(mismatch(
            MismatchKind::Unexpected,
            format!("claim {claim_ref}"),
            describe(&expect.claim.record),
            format!("{} ({diff})", describe(&found)),
        ));
    }

    if let Some(number) = expect.pull {
        let pull = forge.get_pull(number).await?;
        if pull
            .labels
            .iter()
            .any(|l| l.eq_ignore_ascii_case(HANDOFF_LABEL))
        {
            return Err(mismatch(
                MismatchKind::Handoff,
                format!("labels of #{number}"),
                format!("no {HANDOFF_LABEL} label"),
                format!("the {HANDOFF_LABEL} label"),
            ));
        }
        if !same_login(pull.author.as_deref(), &bot) {
            return Err(mismatch(
                MismatchKind::Unexpected,
                format!("author of #{number}"),
                bot.clone(),
                pull.author.unwrap_or_else(|| "no author".into()),
            ));
        }
        let repo = forge.repo();
        if !pull
            .head_repo
            .as_deref()
            .is_some_and(|r| r.eq_ignore_ascii_case(&repo))
        {
            return Err(mismatch(
                MismatchKind::Unexpected,
                format!("head repository of #{number}"),
                repo,
                pull.head_repo
                    .unwrap_or_else(|| "none (deleted fork?)".into()),
            ));
        }
        if let Some((branch, _)) = expect.branch
            && pull.head_ref != branch
        {
            return Err(mismatch(
                MismatchKind::Unexpected,
                format!("head branch of #{number}"),
                branch.to_owned(),
                pull.head_ref,
            ));
        }
    }

    if let Some((branch, head)) = expect.branch {
        let name = format!("refs/heads/{branch}");
        let tip = forge
            .refs()
            .read_ref(&name)
            .await
            .map_err(|e| ForgeError::Other(format!("read branch {branch}: {e}")))?;
        match tip {
            None => {
                return Err(mismatch(
                    MismatchKind::Unexpected,
                    format!("branch {branch}"),
                    format!("head {head}"),
                    "no branch (deleted)".into(),
                ));
            }
            Some(tip) if tip.sha != head => {
                return Err(mismatch(
                    MismatchKind::Handoff,
                    format!("head of branch {branch}"),
                    format!("{head} (the last head Klaud wrote)"),
                    format!("{} (a foreign commit)", tip.sha),
                ));
            }
            Some(_) => {}
        }
    }

    if let Some((id, title)) = expect.run {
        let run = forge.get_run(id).await?;
        if !same_login(run.actor.as_deref(), &bot) {
            return Err(mismatch(
                MismatchKind::Unexpected,
                format!("actor of run {id}"),
                bot.clone(),
                run.actor.unwrap_or_else(|| "none".into()),
            ));
        }
        if run.title != title {
            return Err(mismatch(
                MismatchKind::Unexpected,
                format!("title of run {id}"),
                format!("{title:?}"),
                format!("{:?}", run.title),
            ));
        }
    }

    Ok(OwnershipProof {
        fence: found.fence_or_zero(),
        head: expect.branch.map(|(_, h)| h.to_owned()),
        pull: expect.pull,
        run: expect.run.map(|(id, _)| id),
    })
}

fn describe(r: &ClaimRecord) -> String {
    format!(
        "owner {}, run {}, fence {}",
        r.owner.map_or_else(|| "none".to_owned(), |o| o.to_string()),
        r.run_id,
        r.fence_or_zero()
    )
}
