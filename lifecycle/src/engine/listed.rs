//! The first look of a run of steps, answered from the pass's own
//! listings. A pass lists the open pull requests and Klaud's candidate
//! branches (conditionally, shared by every candidate) moments before it
//! drives them; reading each candidate's pull request and branch again at
//! the first step would be one charged answer each, since Klaud's own last
//! write changed their `ETag`.
//!
//! A listed thing is used only when it shows exactly what Klaud last wrote
//! (its pull request open, on its branch, at the head Klaud pushed; its
//! branch at that head): anything else (a person's push, a close, a
//! listing older than Klaud's own last write) is read from GitHub as
//! before. A person's change after the listing is then the same as one
//! right after the step's own read: the claim is still read before every
//! step, and every branch write is a compare-and-swap that fails on a
//! foreign head. Seeds live in the run's scope only (never across passes,
//! never in the journal).
//!
//! The pass's claim listing likewise tells which claims can be created
//! without reading them first, and which claims still sit where Klaud's
//! own last write left them; its listing of open pull requests tells who
//! authored them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use klaud_claims::{PullNumber, RefTip};

use crate::engine::context::Engine;
use crate::engine::forge::{Forge as _, Pull};
use crate::engine::journal::CandidateRecord;

impl Engine<'_> {
    /// Seeds the open run of steps' reads (see [`Engine::keep_reads`]) for
    /// `rec` with its pull request as the pass's open-PR listing showed it
    /// (`listed`, found by number) and its branch's head as the pass's
    /// branch listing showed it (`branch_head`). Without an open scope it
    /// does nothing.
    pub fn seed_listed(
        &self,
        rec: &CandidateRecord,
        listed: Option<&Pull>,
        branch_head: Option<&str>,
    ) {
        let Some(head) = rec.head.as_ref() else {
            return;
        };
        if let (Some(number), Some(pull)) = (rec.pull, listed)
            && pull.number == number
            && pull.state.is_open()
            && pull.head_ref == rec.branch
            && pull.head_sha == *head
        {
            self.forge.seed_pull(pull.clone());
        }
        if branch_head == Some(head.as_str()) {
            self.forge
                .seed_ref_sha(&format!("refs/heads/{}", rec.branch), head.as_str());
        }
    }
}

/// The claim listing of the pass: which claims can be created without a
/// read first.
impl Engine<'_> {
    /// The claim refs (full names) a listing made in this pass showed: a
    /// family not among them is claimed by creating its ref without reading
    /// it first, as that read finds nothing on almost every claim and a 404
    /// is charged. A claim made meanwhile answers the create with "already
    /// exists" and is read then (the create never overwrites), at the price
    /// of one unused claim commit. Without a listing the ref is read first.
    pub fn with_listed_claims(mut self, refs: BTreeSet<String>) -> Self {
        self.listed_claims = Mutex::new(Some(refs));
        self
    }

    /// Whether the pass's listing showed no claim ref `name` and this
    /// engine has not created it since.
    pub(super) fn listed_free(&self, name: &str) -> bool {
        self.listed_claims
            .lock()
            .is_ok_and(|l| l.as_ref().is_some_and(|l| !l.contains(name)))
    }

    /// Claim ref `name` exists now (`created`: this engine created it).
    pub(super) fn listed_taken(&self, name: &str, created: bool) {
        if let Ok(mut l) = self.listed_claims.lock()
            && let Some(l) = l.as_mut()
        {
            l.insert(name.to_owned());
        }
        if created && let Ok(mut c) = self.created_claims.lock() {
            c.insert(name.to_owned());
        }
    }

    /// Whether this engine created claim ref `name`.
    pub(super) fn created_claim(&self, name: &str) -> bool {
        self.created_claims.lock().is_ok_and(|c| c.contains(name))
    }

    /// Seeds the open run of steps' reads with `rec`'s claim as this
    /// engine created it earlier in the pass, or as its own last write to
    /// it left it (an experiment's siblings amend the claim they share),
    /// while the record still holds that very commit. The claim step's own
    /// answer shows the ref; reading it back at the next step would be a
    /// charged answer that only repeats Klaud's own write (its first read
    /// has no `ETag` to send), and no other holder can take a claim whose
    /// lease Klaud set moments ago. Every later pass reads it from GitHub
    /// (conditionally) as before.
    pub fn seed_created_claim(&self, rec: &CandidateRecord) {
        if let Some(held) = rec.claim.as_ref() {
            self.seed_own_claim(&held.ref_name, Some(&held.sha));
        }
    }

    /// Seeds the open scope with claim ref `name` as this engine's own
    /// last write left it, when this engine created it in this pass: a
    /// variant joining the claim its sibling created moments ago adopts
    /// that tip instead of reading it back (a charged answer, as the read
    /// has no `ETag` yet). A sibling's later amendment is adopted as usual
    /// at the next ownership check, which reads GitHub.
    pub(in crate::engine) fn seed_sibling_claim(&self, name: &str) {
        self.seed_own_claim(name, None);
    }

    /// Seeds the open scope with claim ref `name` at the tip this engine's
    /// own last write left it, when this engine created it (and, with
    /// `expected`, only while that tip is still that commit).
    fn seed_own_claim(&self, name: &str, expected: Option<&str>) {
        if !self.created_claim(name) {
            return;
        }
        if let Some(tip) = self
            .forge
            .last_written(name)
            .filter(|t| expected.is_none_or(|sha| t.sha == sha))
        {
            self.forge.seed_ref(tip);
        }
    }
}

/// Who authored a pull request, without reading it.
impl Engine<'_> {
    /// The authors of the open pull requests the pass listed (its plan
    /// lists them every pass, conditionally), by number.
    pub fn with_listed_authors(mut self, authors: BTreeMap<PullNumber, String>) -> Self {
        self.listed_authors = authors;
        self
    }

    /// The author of pull request `number` as a GitHub answer already
    /// showed it: the bot, when `rec` holds its creation's (or an earlier
    /// read's) answer; else the pass's listing's. GitHub never changes a
    /// pull request's author, so neither answer can be stale. `None`: not
    /// known.
    pub fn known_author(&self, rec: &CandidateRecord, number: PullNumber) -> Option<String> {
        if rec.bot_pull == Some(number) {
            return Some(self.forge.bot_login());
        }
        self.listed_authors.get(&number).cloned()
    }
}

/// The claim listing of the pass: a claim still where Klaud left it.
impl Engine<'_> {
    /// Seeds the open run of steps' reads with `rec`'s claim as the pass's
    /// claim listing showed it (`listed`), when that is the very commit
    /// Klaud's own last write to the claim left (the record's): the step's
    /// ownership check then needs no read of the claim, which is a charged
    /// answer on the first read of a pass (the claim was written, never
    /// read, so no `ETag` is held). A claim someone moved or deleted
    /// before the listing shows another commit or none and is read as
    /// before. The caller seeds only in the pass's first round of steps:
    /// a move between the listing and the step is then the same as one
    /// between a step's read and its write, and only a person can make
    /// it, since every proof leaves more than half of the lease and no
    /// other instance takes a claim before its lease ends.
    pub fn seed_listed_claim(&self, rec: &CandidateRecord, listed: &RefTip) {
        // An experiment's sibling may have amended the shared claim in
        // this pass, after the listing: this engine's own write wins then.
        let moved_since = self
            .forge
            .last_written(&listed.name)
            .is_some_and(|t| t.sha != listed.sha);
        if let Some(held) = rec.claim.as_ref()
            && held.ref_name == listed.name
            && held.sha == listed.sha
            && !moved_since
        {
            self.forge.seed_ref(listed.clone());
        }
    }
}
