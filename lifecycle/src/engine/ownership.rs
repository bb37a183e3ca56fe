//! Ownership proofs. Before any mutation Klaud re-reads the claim
//! (owner, run, fence, candidates), the pull request (author = bot, head
//! repository = the repository, no `klaud-handoff` label), the branch head
//! (= the head Klaud last wrote) and, for runs, actor and title. Only
//! [`check`] can make an [`OwnershipProof`]; every mutating forge call
//! requires one.

use std::fmt;

use klaud_claims::claim::ownership_mismatch;
use klaud_claims::{ClaimRecord, HeldClaim, PullNumber};

use super::forge::{Forge, ForgeError, ProofError};

/// The label with which a maintainer takes a PR over.
pub const HANDOFF_LABEL: &str = "klaud-handoff";

/// Evidence that, when it was made, the claim, branch, PR and run named in
/// it were still Klaud's. It cannot be built outside this module, and it is
/// not `Clone`: a proof is made for one step and authorizes writes only to
/// the branch, pull request and run it checked ([`OwnershipProof::for_pull`],
/// [`OwnershipProof::for_run`], [`OwnershipProof::for_branch`]).
#[derive(Debug, PartialEq, Eq)]
pub struct OwnershipProof {
    fence: u64,
    claim_ref: String,
    branch: Option<String>,
    head: Option<String>,
    pull: Option<PullNumber>,
    run: Option<u64>,
    lease_until: Option<chrono::DateTime<chrono::Utc>>,
}

impl OwnershipProof {
    /// The claim ref that was checked.
    pub fn claim_ref(&self) -> &str {
        &self.claim_ref
    }

    /// The branch the proof covers: checked at a head, or (before the
    /// branch exists) the one it may create.
    pub fn branch(&self) -> Option<&str> {
        self.branch.as_deref()
    }

    fn refuse(&self, asked: String) -> ProofError {
        let mut proved = format!("claim {}", self.claim_ref);
        if let Some(b) = &self.branch {
            proved.push_str(&format!(", branch {b}"));
        }
        if let Some(n) = self.pull {
            proved.push_str(&format!(", #{n}"));
        }
        if let Some(r) = self.run {
            proved.push_str(&format!(", run {r}"));
        }
        ProofError { proved, asked }
    }

    /// `Ok` when the proof checked pull request `number`.
    pub fn for_pull(&self, number: PullNumber) -> Result<(), ProofError> {
        if self.pull == Some(number) {
            Ok(())
        } else {
            Err(self.refuse(format!("pull request #{number}")))
        }
    }

    /// `Ok` when the proof checked run `id`.
    pub fn for_run(&self, id: u64) -> Result<(), ProofError> {
        if self.run == Some(id) {
            Ok(())
        } else {
            Err(self.refuse(format!("run {id}")))
        }
    }

    /// `Ok` when a commit on `parent` may be made: the head the proof
    /// checked, or any parent when the proof is for a branch that does not
    /// exist yet (the bump commit on the base).
    pub fn for_commit(&self, parent: &str) -> Result<(), ProofError> {
        match (&self.head, &self.branch) {
            (Some(h), _) if h == parent => Ok(()),
            (None, Some(_)) => Ok(()),
            _ => Err(self.refuse(format!("a commit on {parent}"))),
        }
    }

    /// `Ok` when the proof checked branch `name` at `head`: a commit that
    /// moves the branch from there needs both, where a commit that moves
    /// nothing needs only its parent. A proof for a branch Klaud creates
    /// (no head checked) also covers the bump commit onto it: the write
    /// names `head` as the branch's expected head, a compare-and-swap
    /// GitHub refuses unless the branch is still where the step created
    /// or found it (at the base, holding no one's work).
    pub fn for_branch_head(&self, name: &str, head: &str) -> Result<(), ProofError> {
        self.for_branch(name)?;
        match self.head.as_deref() {
            Some(h) if h == head => Ok(()),
            None => Ok(()),
            _ => Err(self.refuse(format!("branch {name} at {head}"))),
        }
    }

    /// `Ok` when the proof checked a branch head and a pull request, which
    /// is what a run testing that head needs.
    pub fn for_dispatch(&self) -> Result<(), ProofError> {
        if self.head.is_some() && self.pull.is_some() {
            Ok(())
        } else {
            Err(self.refuse("a workflow dispatch (needs a checked head and PR)".into()))
        }
    }

    /// `Ok` when the proof covers branch `name` (short name, without
    /// `refs/heads/`).
    pub fn for_branch(&self, name: &str) -> Result<(), ProofError> {
        if self.branch.as_deref() == Some(name) {
            Ok(())
        } else {
            Err(self.refuse(format!("branch {name}")))
        }
    }

    /// The claim's lease as the check read it on GitHub (`None`: a claim
    /// without a lease, the old helper's).
    pub fn lease_until(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        self.lease_until
    }

    /// The claim fence that was checked.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// The branch head that was checked, if a branch was.
    pub fn head(&self) -> Option<&str> {
        self.head.as_deref()
    }

    /// The pull request that was checked, if one was.
    pub fn pull(&self) -> Option<PullNumber> {
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
    /// A branch that does not exist yet and that the proof may create
    /// (nothing is read for it; `branch` wins when both are set).
    pub creates: Option<&'a str>,
    /// The pull request.
    pub pull: Option<PullNumber>,
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
    /// The claim ref is gone and nobody published an ending: a person
    /// deleted it, which Klaud takes as a maintainer's release.
    ClaimRemoved,
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
#[derive(Debug, thiserror::Error)]
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
// Kept whole (about 150 lines): one pass over every fact a proof rests
// on (claim, branch, pull request, run), in the order they are checked;
// split, what a proof needs would no longer read in one place.
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
        .map_err(|e| ForgeError::refs(format!("read claim {claim_ref}"), e))?;
    let Some(tip) = tip else {
        return Err(mismatch(
            MismatchKind::ClaimRemoved,
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
        // Where it points is all the check needs (its commit would be one
        // more read).
        let tip = forge
            .refs()
            .read_ref_sha(&name)
            .await
            .map_err(|e| ForgeError::refs(format!("read branch {branch}"), e))?;
        match tip {
            // Klaud deletes its branch only in cleanup, whose proofs do not
            // check it: a person deleted it, and GitHub closed the PR.
            None => {
                return Err(mismatch(
                    MismatchKind::Handoff,
                    format!("branch {branch}"),
                    format!("head {head}"),
                    "no branch (deleted)".into(),
                ));
            }
            Some(sha) if sha != head => {
                return Err(mismatch(
                    MismatchKind::Handoff,
                    format!("head of branch {branch}"),
                    format!("{head} (the last head Klaud wrote)"),
                    format!("{sha} (a foreign commit)"),
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
        lease_until: found.lease_until,
        fence: found.fence_or_zero(),
        claim_ref: claim_ref.to_owned(),
        branch: expect
            .branch
            .map(|(b, _)| b)
            .or(expect.creates)
            .map(str::to_owned),
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

/// The one write Klaud may make on a pull request that is no longer its own
/// (after a handoff): a comment on that pull request, nothing else. Made by
/// [`reply_permit`], which checks that the bot authored the pull request.
#[derive(Debug, PartialEq, Eq)]
pub struct ReplyPermit {
    pull: PullNumber,
}

impl ReplyPermit {
    /// The pull request a reply may be posted on.
    pub fn pull(&self) -> PullNumber {
        self.pull
    }
}

/// A permit to reply on pull request `number` when the bot authored it;
/// `Ok(None)` when it did not (Klaud takes no orders on others' PRs).
///
/// `known_author` is the author an earlier GitHub answer about this very
/// pull request showed (the pass's listing of open PRs, the creation's
/// answer kept in the journal): GitHub never changes a pull request's
/// author, so that answer is as good as a read, and reading the pull
/// request again would be a charged answer after every write of Klaud's
/// (a label, a report, the draft state changes its `ETag`). `None`: not
/// known, read it.
pub async fn reply_permit(
    forge: &dyn Forge,
    number: PullNumber,
    known_author: Option<&str>,
) -> Result<Option<ReplyPermit>, ForgeError> {
    let author = match known_author {
        Some(a) => Some(a.to_owned()),
        None => forge.get_pull(number).await?.author,
    };
    Ok(same_login(author.as_deref(), &forge.bot_login()).then_some(ReplyPermit { pull: number }))
}
