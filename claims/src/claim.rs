//! Claim operations over a [`RefStore`]: acquire, renew, release, takeover,
//! recovery leases and listing.
//!
//! Every write is a single compare-and-swap on GitHub's side: creating a ref
//! fails when it exists, and a non-forced update fails unless it is a
//! fast-forward of the tip we read. Nothing here retries a write that could
//! land on top of somebody else's; when a write's response is lost, the ref is
//! re-read to learn whether it happened.

use futures::future::BoxFuture;
use std::fmt;
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, Utc};
use uuid::Uuid;

use crate::names::{CLAIM_REF_PREFIX, CandidateId, FamilyId, RECOVERY_REF_PREFIX};
use crate::record::{ClaimCandidate, ClaimRecord, RecordError, format_lease};
use crate::store::{RefStore, RefStoreError, RefTip};

/// Longest lease Klaud will write: a claim that outlives its holder this long
/// would block its family for too long before recovery may take it over.
pub const MAX_LEASE: TimeDelta = TimeDelta::days(7);

/// Times how many a create may meet a ref that vanished before it could be
/// read (a release racing the acquire) before giving up.
const CREATE_ATTEMPTS: usize = 3;

/// The source of "now"; injected so tests control lease expiry.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that only moves when told to, for tests.
#[derive(Debug)]
pub struct ManualClock(Mutex<DateTime<Utc>>);

impl ManualClock {
    /// A clock stopped at `now`.
    pub fn new(now: DateTime<Utc>) -> Self {
        Self(Mutex::new(now))
    }

    /// Moves the clock by `by` (may be negative).
    pub fn advance(&self, by: TimeDelta) {
        let mut now = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *now += by;
    }

    /// Sets the clock.
    pub fn set(&self, to: DateTime<Utc>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The system clock moved by an offset that only grows when told to: time
/// flows as usual (waits and grace periods still end), and a test that must
/// see a lease run out moves the clock past it instead of sleeping.
#[derive(Debug, Default)]
pub struct ShiftedClock(Mutex<TimeDelta>);

impl ShiftedClock {
    /// The system clock, not shifted yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock `by` further ahead of the system's.
    pub fn advance(&self, by: TimeDelta) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) += by;
    }
}

impl Clock for ShiftedClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now() + *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A failure to learn a workflow run's state. Its message is the
/// underlying error's (which names the run it asked about), kept as the
/// source as well.
#[derive(Debug, thiserror::Error)]
#[error("{source}")]
pub struct RunCompletionError {
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl RunCompletionError {
    /// Asking for the run's state failed with `source`.
    pub fn new(source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self {
            source: Box::new(source),
        }
    }
}

/// Answers whether the run that owns a lease-less (old helper) claim is over.
#[async_trait]
pub trait RunCompletion: Send + Sync {
    /// `Some(true)` when the run has completed, `Some(false)` while it is
    /// queued or running, `None` when it cannot be told (e.g. not found).
    async fn run_completed(&self, run_id: u64) -> Result<Option<bool>, RunCompletionError>;
}

/// Who is claiming: this Klaud instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimant {
    /// The instance uuid written as `owner`.
    pub owner: Uuid,
    /// Written as `holder`, e.g. `klaud/0.1.0`.
    pub holder: String,
}

impl Claimant {
    /// A claimant with the holder `klaud/<this crate's version>`.
    pub fn new(owner: Uuid) -> Self {
        Self {
            owner,
            holder: default_holder(),
        }
    }
}

/// `klaud/<version>`.
pub fn default_holder() -> String {
    format!("klaud/{}", env!("CARGO_PKG_VERSION"))
}

/// A claim (or recovery lease) this instance holds, as last written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldClaim {
    /// Full ref name.
    pub ref_name: String,
    /// The commit we last moved the ref to.
    pub sha: String,
    /// The record in that commit.
    pub record: ClaimRecord,
}

/// Why a claim ref could not be read as a claim.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimParseError {
    /// The ref name is not a well-formed claim or recovery lease name.
    #[error(
        "ref name {0} is not klaud/claim-<16 hex family id> or klaud/recovery-<run>-<candidate id>"
    )]
    BadRefName(String),
    /// The commit message is not a claim record.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// The record names a candidate of another family than the claim ref's:
    /// acting on it could drive or release the wrong family's work.
    #[error(
        "the record names candidate {candidate}, whose family id {found} is not the claim's family id {family}"
    )]
    ForeignCandidate {
        /// The candidate id in the record.
        candidate: String,
        /// Its family id part.
        found: String,
        /// The family id in the claim ref's name.
        family: String,
    },
}

/// A claim ref as found on the store: the record, or why it does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimEntry {
    /// The ref and its commit.
    pub tip: RefTip,
    /// The parsed record, or the parse error (surfaced, never acted on).
    pub record: Result<ClaimRecord, ClaimParseError>,
}

impl ClaimEntry {
    fn from_tip(tip: RefTip) -> Self {
        let record = ClaimRecord::parse(&tip.message).map_err(ClaimParseError::from);
        Self { tip, record }
    }

    /// The entry of a ref whose name must pass `well_named`; a bad name
    /// is a parse error like a bad record.
    fn named(tip: RefTip, well_named: bool) -> Self {
        if !well_named {
            let name = tip.name.clone();
            return Self {
                tip,
                record: Err(ClaimParseError::BadRefName(name)),
            };
        }
        Self::from_tip(tip)
    }

    fn claim_from_tip(tip: RefTip) -> Self {
        let Some(family) = FamilyId::from_claim_ref(&tip.name) else {
            return Self::named(tip, false);
        };
        let mut entry = Self::from_tip(tip);
        // Fail closed, as for a record that does not parse: every candidate
        // of a claim (a family group's members included) carries the
        // claimed family's id, as `acquire` writes them.
        if let Ok(record) = &entry.record
            && let Some(foreign) = record.candidates.iter().find(|c| c.id.family() != family)
        {
            entry.record = Err(ClaimParseError::ForeignCandidate {
                candidate: foreign.id.to_string(),
                found: foreign.id.family().to_string(),
                family: family.to_string(),
            });
        }
        entry
    }

    fn recovery_from_tip(tip: RefTip) -> Self {
        let ok = CandidateId::from_recovery_ref(&tip.name).is_some();
        Self::named(tip, ok)
    }

    /// The family id in the ref name, when it is a well-formed claim ref.
    pub fn family(&self) -> Option<FamilyId> {
        FamilyId::from_claim_ref(&self.tip.name)
    }

    /// Whether the lease has run out at `now`; `None` for lease-less or
    /// unparsable claims.
    pub fn lease_expired(&self, now: DateTime<Utc>) -> Option<bool> {
        let until = self.record.as_ref().ok()?.lease_until?;
        Some(until <= now)
    }
}

/// Result of [`ClaimBook::acquire`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquire {
    /// The ref was created; we hold it.
    Won(HeldClaim),
    /// Somebody holds it; their record (or why it does not parse).
    Occupied(Box<ClaimEntry>),
}

/// How a claim slipped away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lost {
    /// The ref no longer exists.
    Gone,
    /// The ref points at a commit we did not write.
    Moved(Box<ClaimEntry>),
    /// Somebody moved the ref between our read and our write.
    Raced,
}

impl fmt::Display for Lost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lost::Gone => f.write_str("the ref was deleted"),
            Lost::Moved(entry) => match &entry.record {
                Ok(r) => write!(
                    f,
                    "the ref moved to {} (owner {}, run {}, fence {})",
                    entry.tip.sha,
                    r.owner.map_or_else(|| "none".to_owned(), |o| o.to_string()),
                    r.run_id,
                    r.fence_or_zero()
                ),
                Err(e) => write!(
                    f,
                    "the ref moved to {}, which does not parse: {e}",
                    entry.tip.sha
                ),
            },
            Lost::Raced => f.write_str("another writer moved the ref first"),
        }
    }
}

/// Result of [`ClaimBook::renew`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renew {
    /// The lease was extended.
    Renewed(HeldClaim),
    /// The claim is no longer ours; stop working on it.
    Lost(Lost),
}

/// Result of [`ClaimBook::release`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// We deleted the ref.
    Released,
    /// The ref did not exist any more.
    AlreadyGone,
}

/// Why a takeover was not allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakeoverRefusal {
    /// The lease is still running.
    LeaseActive {
        /// When it runs out.
        until: DateTime<Utc>,
    },
    /// A lease-less claim whose owner run is still going.
    RunActive {
        /// The owner run.
        run_id: u64,
    },
    /// A lease-less claim whose owner run's state is unknown: refuse rather
    /// than guess.
    RunCompletionUnknown {
        /// The owner run.
        run_id: u64,
    },
}

impl fmt::Display for TakeoverRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::LeaseActive { until } => {
                write!(f, "the lease runs until {}", format_lease(*until))
            }
            Self::RunActive { run_id } => write!(
                f,
                "lease-less claim whose owner run {run_id} has not completed"
            ),
            Self::RunCompletionUnknown { run_id } => {
                write!(
                    f,
                    "lease-less claim whose owner run {run_id} cannot be found; refusing to guess"
                )
            }
        }
    }
}

/// Result of a takeover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Takeover {
    /// We hold the claim now, with the fence raised by one.
    Took {
        /// The claim as we wrote it.
        held: HeldClaim,
        /// The record we replaced (its run is the orphan to recover).
        previous: Box<ClaimRecord>,
    },
    /// Not allowed yet.
    Refused(TakeoverRefusal),
    /// Another writer got there first.
    Lost(Lost),
    /// No such ref: nothing to take over.
    Vacant,
}

/// A claim operation failed; the message says what to do next.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// The ref store failed.
    #[error("could not {action} {ref_name}: {source}")]
    Store {
        /// What was being done.
        action: &'static str,
        /// The ref concerned.
        ref_name: String,
        /// The store's error.
        #[source]
        source: RefStoreError,
    },
    /// A claim ref does not parse; it is left untouched.
    #[error(
        "{ref_name} does not parse ({source}); it was left untouched: inspect it and fix or delete it by hand"
    )]
    Unparsable {
        /// The ref.
        ref_name: String,
        /// Why it does not parse.
        #[source]
        source: ClaimParseError,
    },
    /// The claim is not ours; nothing was changed.
    #[error("refusing to touch {ref_name}: it is not ours ({mismatch})")]
    NotOwner {
        /// The ref.
        ref_name: String,
        /// Expected vs found, field by field.
        mismatch: String,
    },
    /// The caller asked for something invalid.
    #[error("invalid claim request: {0}")]
    InvalidRequest(String),
    /// The owner run's state could not be read.
    #[error("could not learn whether run {run_id} completed: {source}")]
    RunCompletion {
        /// The run.
        run_id: u64,
        /// The underlying error.
        #[source]
        source: RunCompletionError,
    },
    /// A forced delete found the ref at another commit than the one the
    /// operator was shown; nothing was deleted.
    #[error(
        "{ref_name} moved from {expected} to {found} while it was being released; nothing was deleted"
    )]
    Moved {
        /// The ref.
        ref_name: String,
        /// The commit the operator saw.
        expected: String,
        /// The commit it points at now.
        found: String,
    },
    /// The ref kept being created and deleted under us.
    #[error("{ref_name} kept changing between create and read; try again later")]
    Contended {
        /// The ref.
        ref_name: String,
    },
}

/// Planning must stop: some claim refs do not parse (fail closed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanningBlocked {
    /// Each unparsable ref and why.
    pub unparsable: Vec<(String, String)>,
}

impl fmt::Display for PlanningBlocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "planning stopped: {} claim ref(s) do not parse, so Klaud cannot tell which families are taken: ",
            self.unparsable.len()
        )?;
        for (i, (name, why)) in self.unparsable.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{name}: {why}")?;
        }
        f.write_str(". Klaud never deletes them; fix or delete them by hand, then plan again")
    }
}

impl std::error::Error for PlanningBlocked {}

/// Fail-closed check before planning: every claim must parse.
pub fn ensure_plannable(entries: &[ClaimEntry]) -> Result<(), PlanningBlocked> {
    let unparsable: Vec<(String, String)> = entries
        .iter()
        .filter_map(|e| {
            e.record
                .as_ref()
                .err()
                .map(|err| (e.tip.name.clone(), err.to_string()))
        })
        .collect();
    if unparsable.is_empty() {
        Ok(())
    } else {
        Err(PlanningBlocked { unparsable })
    }
}

/// Compares the fields that make a claim ours; `None` when they all match.
pub fn ownership_mismatch(expected: &ClaimRecord, found: &ClaimRecord) -> Option<String> {
    let mut diffs = Vec::new();
    let show = |o: Option<Uuid>| o.map_or_else(|| "none".to_owned(), |o| o.to_string());
    if expected.owner != found.owner {
        diffs.push(format!(
            "owner expected {}, found {}",
            show(expected.owner),
            show(found.owner)
        ));
    }
    if expected.run_id != found.run_id {
        diffs.push(format!(
            "run-id expected {}, found {}",
            expected.run_id, found.run_id
        ));
    }
    if expected.fence_or_zero() != found.fence_or_zero() {
        diffs.push(format!(
            "fence expected {}, found {}",
            expected.fence_or_zero(),
            found.fence_or_zero()
        ));
    }
    let (want, have) = (expected.candidate_ids(), found.candidate_ids());
    if want != have {
        diffs.push(format!(
            "candidates expected [{}], found [{}]",
            want.join(", "),
            have.join(", ")
        ));
    }
    if diffs.is_empty() {
        None
    } else {
        Some(diffs.join("; "))
    }
}

/// Claim operations for one Klaud instance.
pub struct ClaimBook<'a> {
    store: &'a dyn RefStore,
    clock: &'a dyn Clock,
    claimant: Claimant,
}

impl fmt::Debug for ClaimBook<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClaimBook")
            .field("claimant", &self.claimant)
            .finish_non_exhaustive()
    }
}

fn store_err(action: &'static str, ref_name: &str) -> impl FnOnce(RefStoreError) -> ClaimError {
    let ref_name = ref_name.to_owned();
    move |source| ClaimError::Store {
        action,
        ref_name,
        source,
    }
}

impl<'a> ClaimBook<'a> {
    /// Claim operations on `store` as `claimant`, with time from `clock`.
    pub fn new(store: &'a dyn RefStore, clock: &'a dyn Clock, claimant: Claimant) -> Self {
        Self {
            store,
            clock,
            claimant,
        }
    }

    /// Who this book claims as.
    pub fn claimant(&self) -> &Claimant {
        &self.claimant
    }

    fn lease_end(&self, lease_for: TimeDelta) -> Result<DateTime<Utc>, ClaimError> {
        if lease_for <= TimeDelta::zero() || lease_for > MAX_LEASE {
            return Err(ClaimError::InvalidRequest(format!(
                "lease of {}s is outside 1s..={}s",
                lease_for.num_seconds(),
                MAX_LEASE.num_seconds()
            )));
        }
        // Whole seconds, so the record re-reads to the same value; rounded
        // up, so a lease is never shorter than asked (a writer needs its
        // margin left: see the lifecycle's lease check).
        let now = self.clock.now();
        let start = now
            .timestamp()
            .saturating_add(i64::from(now.timestamp_subsec_nanos() > 0));
        let end = start.saturating_add(lease_for.num_seconds().max(1));
        DateTime::from_timestamp(end, 0)
            .ok_or_else(|| ClaimError::InvalidRequest("lease end is out of range".into()))
    }

    fn our_record(
        &self,
        candidates: Vec<ClaimCandidate>,
        run_id: u64,
        fence: u64,
        lease_until: DateTime<Utc>,
    ) -> ClaimRecord {
        ClaimRecord {
            candidates,
            run_id,
            fence: Some(fence),
            holder: Some(self.claimant.holder.clone()),
            lease_until: Some(lease_until),
            owner: Some(self.claimant.owner),
            extra: Default::default(),
        }
    }

    /// Claims `family` for `candidates`: a commit on `base_sha` (same tree,
    /// parent = base) whose message is our record, then an exclusive ref
    /// create. An existing ref is never overwritten.
    pub fn acquire<'f>(
        &'f self,
        family: &'f FamilyId,
        candidates: Vec<ClaimCandidate>,
        base_sha: &'f str,
        run_id: u64,
        lease_for: TimeDelta,
    ) -> BoxFuture<'f, Result<Acquire, ClaimError>> {
        Box::pin(async move {
            if candidates.is_empty() {
                return Err(ClaimError::InvalidRequest(
                    "a claim needs at least one candidate".into(),
                ));
            }
            if let Some(c) = candidates.iter().find(|c| c.id.family() != *family) {
                return Err(ClaimError::InvalidRequest(format!(
                    "candidate {} does not belong to family {family}",
                    c.id
                )));
            }
            let record = self.our_record(candidates, run_id, 1, self.lease_end(lease_for)?);
            self.create_exclusive(
                &family.claim_ref(),
                base_sha,
                record,
                ClaimEntry::claim_from_tip,
            )
            .await
        })
    }

    async fn create_exclusive(
        &self,
        ref_name: &str,
        base_sha: &str,
        record: ClaimRecord,
        entry: fn(RefTip) -> ClaimEntry,
    ) -> Result<Acquire, ClaimError> {
        let message = record.encode();
        // Never write a record that we (or the next instance) could not read
        // back: it would block planning for everybody.
        match ClaimRecord::parse(&message) {
            Ok(back) if back == record => {}
            Ok(_) => {
                return Err(ClaimError::InvalidRequest(format!(
                    "the record for {ref_name} does not survive encoding"
                )));
            }
            Err(e) => {
                return Err(ClaimError::InvalidRequest(format!(
                    "the record for {ref_name} would not parse: {e}"
                )));
            }
        }
        let tree = self
            .store
            .commit_tree(base_sha)
            .await
            .map_err(store_err("read the tree of base commit for", ref_name))?;
        let sha = self
            .store
            .create_commit(&message, &tree, &[base_sha.to_owned()])
            .await
            .map_err(store_err("create the claim commit for", ref_name))?;
        let won = |sha: String| {
            Acquire::Won(HeldClaim {
                ref_name: ref_name.to_owned(),
                sha,
                record: record.clone(),
            })
        };
        for _ in 0..CREATE_ATTEMPTS {
            match self.store.create_ref(ref_name, &sha).await {
                Ok(()) => return Ok(won(sha)),
                Err(RefStoreError::AlreadyExists(_)) => {
                    match self
                        .store
                        .read_ref(ref_name)
                        .await
                        .map_err(store_err("read", ref_name))?
                    {
                        Some(tip) if tip.sha == sha => return Ok(won(sha)),
                        Some(tip) => return Ok(Acquire::Occupied(Box::new(entry(tip)))),
                        // Released between our create and our read: creating
                        // again is safe, a create never overwrites.
                        None => continue,
                    }
                }
                Err(source) => {
                    // The response may have been lost after the ref was made.
                    return match self.store.read_ref(ref_name).await {
                        Ok(Some(tip)) if tip.sha == sha => Ok(won(sha)),
                        _ => Err(ClaimError::Store {
                            action: "create",
                            ref_name: ref_name.to_owned(),
                            source,
                        }),
                    };
                }
            }
        }
        Err(ClaimError::Contended {
            ref_name: ref_name.to_owned(),
        })
    }

    /// Reads the claim of `family`, if any.
    pub fn inspect<'f>(
        &'f self,
        family: &'f FamilyId,
    ) -> BoxFuture<'f, Result<Option<ClaimEntry>, ClaimError>> {
        Box::pin(async move {
            let name = family.claim_ref();
            let tip = self
                .store
                .read_ref(&name)
                .await
                .map_err(store_err("read", &name))?;
            Ok(tip.map(ClaimEntry::claim_from_tip))
        })
    }

    /// Every claim ref with its record or parse error. Unparsable claims are
    /// surfaced here and must stop planning (see [`ensure_plannable`]).
    pub fn list_claims<'f>(&'f self) -> BoxFuture<'f, Result<Vec<ClaimEntry>, ClaimError>> {
        Box::pin(async move {
            let tips = self
                .store
                .list_refs(CLAIM_REF_PREFIX)
                .await
                .map_err(store_err("list", CLAIM_REF_PREFIX))?;
            Ok(tips.into_iter().map(ClaimEntry::claim_from_tip).collect())
        })
    }

    /// Every recovery lease with its record or parse error.
    pub fn list_recovery_leases<'f>(
        &'f self,
    ) -> BoxFuture<'f, Result<Vec<ClaimEntry>, ClaimError>> {
        Box::pin(async move {
            let tips = self
                .store
                .list_refs(RECOVERY_REF_PREFIX)
                .await
                .map_err(store_err("list", RECOVERY_REF_PREFIX))?;
            Ok(tips
                .into_iter()
                .map(ClaimEntry::recovery_from_tip)
                .collect())
        })
    }

    /// Recognises a claim this instance wrote (e.g. found again after a
    /// crash between creating the ref and journaling it) so it can be
    /// renewed or released instead of waiting for its lease to run out.
    /// `None` unless the record parses and names this instance as owner.
    pub fn adopt(&self, entry: &ClaimEntry) -> Option<HeldClaim> {
        let record = entry.record.as_ref().ok()?;
        (record.owner == Some(self.claimant.owner)).then(|| HeldClaim {
            ref_name: entry.tip.name.clone(),
            sha: entry.tip.sha.clone(),
            record: record.clone(),
        })
    }

    /// Extends the lease of a held claim: a new commit on the tip we wrote,
    /// moved by a non-forced fast-forward. Any change by someone else since
    /// our last write means the claim is lost; it is never overwritten.
    pub fn renew<'f>(
        &'f self,
        held: &'f HeldClaim,
        lease_for: TimeDelta,
    ) -> BoxFuture<'f, Result<Renew, ClaimError>> {
        Box::pin(async move {
            let lease_until = self.lease_end(lease_for)?;
            let name = held.ref_name.as_str();
            let Some(tip) = self
                .store
                .read_ref(name)
                .await
                .map_err(store_err("read", name))?
            else {
                return Ok(Renew::Lost(Lost::Gone));
            };
            if tip.sha != held.sha {
                return Ok(Renew::Lost(Lost::Moved(Box::new(ClaimEntry::from_tip(
                    tip,
                )))));
            }
            let record = ClaimRecord {
                lease_until: Some(lease_until),
                ..held.record.clone()
            };
            match self.advance(&tip, &record).await? {
                Ok(sha) => Ok(Renew::Renewed(HeldClaim {
                    ref_name: held.ref_name.clone(),
                    sha,
                    record,
                })),
                Err(lost) => Ok(Renew::Lost(lost)),
            }
        })
    }

    /// Rewrites a held claim's record by compare-and-swap, as [`ClaimBook::renew`]
    /// does its lease: for Klaud's own bookkeeping (the fields in `extra`,
    /// the candidates of an experiment). Owner, run and fence cannot change
    /// this way; the lease is kept as it is.
    pub fn amend<'f>(
        &'f self,
        held: &'f HeldClaim,
        record: ClaimRecord,
    ) -> BoxFuture<'f, Result<Renew, ClaimError>> {
        Box::pin(async move {
            if record.owner != held.record.owner
                || record.run_id != held.record.run_id
                || record.fence != held.record.fence
                || record.candidates.is_empty()
            {
                return Err(ClaimError::InvalidRequest(
                    "an amended claim keeps its owner, run, fence and at least one candidate"
                        .into(),
                ));
            }
            let name = held.ref_name.as_str();
            let Some(tip) = self
                .store
                .read_ref(name)
                .await
                .map_err(store_err("read", name))?
            else {
                return Ok(Renew::Lost(Lost::Gone));
            };
            if tip.sha != held.sha {
                return Ok(Renew::Lost(Lost::Moved(Box::new(ClaimEntry::from_tip(
                    tip,
                )))));
            }
            match self.advance(&tip, &record).await? {
                Ok(sha) => Ok(Renew::Renewed(HeldClaim {
                    ref_name: held.ref_name.clone(),
                    sha,
                    record,
                })),
                Err(lost) => Ok(Renew::Lost(lost)),
            }
        })
    }

    /// Writes `record` on top of `tip` and fast-forwards the ref to it.
    async fn advance(
        &self,
        tip: &RefTip,
        record: &ClaimRecord,
    ) -> Result<Result<String, Lost>, ClaimError> {
        let name = tip.name.as_str();
        let sha = self
            .store
            .create_commit(&record.encode(), &tip.tree, std::slice::from_ref(&tip.sha))
            .await
            .map_err(store_err("create the claim commit for", name))?;
        match self.store.fast_forward_ref(name, &sha).await {
            Ok(()) => Ok(Ok(sha)),
            Err(RefStoreError::NotFastForward(_)) => Ok(Err(Lost::Raced)),
            Err(RefStoreError::NotFound(_)) => match self.store.read_ref(name).await {
                Ok(None) => Ok(Err(Lost::Gone)),
                _ => Ok(Err(Lost::Raced)),
            },
            Err(source) => match self.store.read_ref(name).await {
                // The update landed but its response was lost.
                Ok(Some(now)) if now.sha == sha => Ok(Ok(sha)),
                _ => Err(ClaimError::Store {
                    action: "fast-forward",
                    ref_name: name.to_owned(),
                    source,
                }),
            },
        }
    }

    /// Deletes a held claim if the stored owner, run, fence and candidates
    /// are still ours.
    ///
    /// GitHub has no conditional delete, so there is an inherent window
    /// between the read and the delete: a takeover landing in it would be
    /// deleted too. Takeovers only happen after the lease expired, and a
    /// holder releases while its lease runs, so the window needs a holder
    /// whose lease ran out mid-release.
    pub fn release<'f>(
        &'f self,
        held: &'f HeldClaim,
    ) -> BoxFuture<'f, Result<Release, ClaimError>> {
        Box::pin(async move { self.release_expected(&held.ref_name, &held.record).await })
    }

    /// [`ClaimBook::release`] for a ref and the record expected in it (e.g.
    /// read back from the journal after a restart). The stored owner must be
    /// this instance, whatever `expected.owner` says.
    pub fn release_expected<'f>(
        &'f self,
        ref_name: &'f str,
        expected: &'f ClaimRecord,
    ) -> BoxFuture<'f, Result<Release, ClaimError>> {
        Box::pin(async move {
            let Some(tip) = self
                .store
                .read_ref(ref_name)
                .await
                .map_err(store_err("read", ref_name))?
            else {
                return Ok(Release::AlreadyGone);
            };
            let found = ClaimRecord::parse(&tip.message).map_err(|e| ClaimError::Unparsable {
                ref_name: ref_name.to_owned(),
                source: e.into(),
            })?;
            // "Ours" means this instance, whatever the caller expected.
            let expected = ClaimRecord {
                owner: Some(self.claimant.owner),
                ..expected.clone()
            };
            if let Some(mismatch) = ownership_mismatch(&expected, &found) {
                return Err(ClaimError::NotOwner {
                    ref_name: ref_name.to_owned(),
                    mismatch,
                });
            }
            match self.store.delete_ref(ref_name).await {
                Ok(()) => Ok(Release::Released),
                Err(RefStoreError::NotFound(_)) => Ok(Release::AlreadyGone),
                Err(source) => match self.store.read_ref(ref_name).await {
                    Ok(None) => Ok(Release::Released),
                    _ => Err(ClaimError::Store {
                        action: "delete",
                        ref_name: ref_name.to_owned(),
                        source,
                    }),
                },
            }
        })
    }

    /// Deletes the claim `shown` whatever its record says (an operator's
    /// `--force`, for a claim that does not parse): only a claim ref, and
    /// only while it still points at the commit the operator was shown. It
    /// is re-read right before the delete because GitHub has no conditional
    /// delete.
    pub fn force_delete<'f>(
        &'f self,
        shown: &'f RefTip,
    ) -> BoxFuture<'f, Result<Release, ClaimError>> {
        Box::pin(async move {
            let ref_name = shown.name.as_str();
            if !ref_name.starts_with(CLAIM_REF_PREFIX) {
                return Err(ClaimError::InvalidRequest(format!(
                    "{ref_name} is not a claim ref"
                )));
            }
            match self
                .store
                .read_ref(ref_name)
                .await
                .map_err(store_err("read", ref_name))?
            {
                None => return Ok(Release::AlreadyGone),
                Some(tip) if tip.sha != shown.sha => {
                    return Err(ClaimError::Moved {
                        ref_name: ref_name.to_owned(),
                        expected: shown.sha.clone(),
                        found: tip.sha,
                    });
                }
                Some(_) => {}
            }
            match self.store.delete_ref(ref_name).await {
                Ok(()) => Ok(Release::Released),
                Err(RefStoreError::NotFound(_)) => Ok(Release::AlreadyGone),
                Err(source) => Err(ClaimError::Store {
                    action: "delete",
                    ref_name: ref_name.to_owned(),
                    source,
                }),
            }
        })
    }

    /// Takes over the claim of `family` for our run `run_id`: only when its
    /// lease expired, or, for a lease-less (old helper) claim, when its owner
    /// run has completed. Writes fence + 1 by CAS; of concurrent takeovers
    /// exactly one wins. The candidates are kept: recovery finishes them.
    pub fn takeover<'f>(
        &'f self,
        family: &'f FamilyId,
        run_id: u64,
        lease_for: TimeDelta,
        runs: &'f dyn RunCompletion,
    ) -> BoxFuture<'f, Result<Takeover, ClaimError>> {
        Box::pin(async move {
            self.take_over_ref(
                &family.claim_ref(),
                run_id,
                lease_for,
                Some(runs),
                ClaimEntry::claim_from_tip,
            )
            .await
        })
    }

    /// Takes over the claim of `family` whatever its lease says: a
    /// maintainer's forced release (`klaud claims release --force`). Still a
    /// compare-and-swap with `fence + 1`, so the holder's next ownership
    /// check sees the change and stops; never [`Takeover::Refused`].
    pub fn force_takeover<'f>(
        &'f self,
        family: &'f FamilyId,
        run_id: u64,
        lease_for: TimeDelta,
    ) -> BoxFuture<'f, Result<Takeover, ClaimError>> {
        Box::pin(async move {
            self.take_over_ref(
                &family.claim_ref(),
                run_id,
                lease_for,
                None,
                ClaimEntry::claim_from_tip,
            )
            .await
        })
    }

    /// `runs` is `None` for a forced takeover (no lease or run check).
    async fn take_over_ref(
        &self,
        ref_name: &str,
        run_id: u64,
        lease_for: TimeDelta,
        runs: Option<&dyn RunCompletion>,
        entry: fn(RefTip) -> ClaimEntry,
    ) -> Result<Takeover, ClaimError> {
        let lease_until = self.lease_end(lease_for)?;
        let Some(tip) = self
            .store
            .read_ref(ref_name)
            .await
            .map_err(store_err("read", ref_name))?
        else {
            return Ok(Takeover::Vacant);
        };
        let ClaimEntry { tip, record } = entry(tip);
        let previous = record.map_err(|source| ClaimError::Unparsable {
            ref_name: ref_name.to_owned(),
            source,
        })?;
        match (runs, previous.lease_until) {
            (None, _) => {}
            (Some(_), Some(until)) if until > self.clock.now() => {
                return Ok(Takeover::Refused(TakeoverRefusal::LeaseActive { until }));
            }
            (Some(_), Some(_)) => {}
            (Some(runs), None) => {
                let owner_run = previous.run_id;
                match runs.run_completed(owner_run).await {
                    Ok(Some(true)) => {}
                    Ok(Some(false)) => {
                        return Ok(Takeover::Refused(TakeoverRefusal::RunActive {
                            run_id: owner_run,
                        }));
                    }
                    Ok(None) => {
                        return Ok(Takeover::Refused(TakeoverRefusal::RunCompletionUnknown {
                            run_id: owner_run,
                        }));
                    }
                    Err(source) => {
                        return Err(ClaimError::RunCompletion {
                            run_id: owner_run,
                            source,
                        });
                    }
                }
            }
        }
        let fence = previous.fence_or_zero().checked_add(1).ok_or_else(|| {
            ClaimError::InvalidRequest(format!(
                "fence of {ref_name} is at its maximum; delete the ref by hand"
            ))
        })?;
        let record = ClaimRecord {
            extra: previous.extra.clone(),
            ..self.our_record(previous.candidates.clone(), run_id, fence, lease_until)
        };
        match self.advance(&tip, &record).await? {
            Ok(sha) => Ok(Takeover::Took {
                held: HeldClaim {
                    ref_name: ref_name.to_owned(),
                    sha,
                    record,
                },
                previous: Box::new(previous),
            }),
            Err(lost) => Ok(Takeover::Lost(lost)),
        }
    }

    /// Takes the recovery lease `refs/heads/klaud/recovery-<owner run>-<candidate>`
    /// for our run `run_id`, on top of `claim_sha` (the claim commit being
    /// recovered). Exclusive create, like a claim.
    pub fn acquire_recovery_lease<'f>(
        &'f self,
        owner_run: u64,
        candidate: &'f ClaimCandidate,
        claim_sha: &'f str,
        run_id: u64,
        lease_for: TimeDelta,
    ) -> BoxFuture<'f, Result<Acquire, ClaimError>> {
        Box::pin(async move {
            let record = self.our_record(
                vec![candidate.clone()],
                run_id,
                1,
                self.lease_end(lease_for)?,
            );
            self.create_exclusive(
                &candidate.id.recovery_ref(owner_run),
                claim_sha,
                record,
                ClaimEntry::recovery_from_tip,
            )
            .await
        })
    }

    /// Takes over a recovery lease whose recoverer died (same rules as
    /// [`ClaimBook::takeover`]).
    pub fn takeover_recovery_lease<'f>(
        &'f self,
        owner_run: u64,
        candidate: &'f CandidateId,
        run_id: u64,
        lease_for: TimeDelta,
        runs: &'f dyn RunCompletion,
    ) -> BoxFuture<'f, Result<Takeover, ClaimError>> {
        Box::pin(async move {
            self.take_over_ref(
                &candidate.recovery_ref(owner_run),
                run_id,
                lease_for,
                Some(runs),
                ClaimEntry::recovery_from_tip,
            )
            .await
        })
    }
}
