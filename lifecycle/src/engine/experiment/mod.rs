//! The race of an experiment's variants (see [`crate::experiment`]): the
//! shared claim, the concurrency bound, the one final sweep at a time, the
//! winner and the losers, the siblings section of each body, and the
//! release by the last sibling to finish. Not a step of its own: the drive
//! asks `experiment_gate` before a variant's step, and the steps ask for
//! their slot (final sweep, finish, release).

use crate::engine::context::Engine;
use crate::engine::context::Progress;
use crate::engine::error::EngineError;
use crate::engine::forge::Forge as _;
use crate::engine::intent::Intent;
use crate::engine::journal::{CandidateRecord, Step, StoredClaim};
use crate::engine::proof::Scope;
use crate::engine::repair_hook::RepairContext;
use crate::engine::write::Writes as _;
use crate::experiment::{FINAL_FIELD, Proposal, Sibling, VariantInfo, WINNER_FIELD};
use crate::model::{Outcome, Phase};
use crate::report::{MarkerKey, find_record};
use crate::{BoxFuture, experiment};
use klaud_claims::{HeldClaim, PullNumber, Renew};
use serde_json::Value;

/// How often a compare-and-swap on the shared claim is tried again when a
/// sibling moved it in between.
pub(super) const CAS_ATTEMPTS: usize = 5;

impl Engine<'_> {
    /// The claim as it is on GitHub now, adopted into `rec` when it is
    /// still ours (same owner, run and fence, and it lists `rec`): a
    /// sibling's renewal or bookkeeping moved the tip since `rec` last
    /// wrote it. `None`: no claim of ours lists `rec`.
    pub(super) async fn refresh_claim(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<Option<HeldClaim>, EngineError> {
        let book = self.book();
        let family = Self::candidate_id(rec)?.family();
        let Some(entry) = book.inspect(&family).await.map_err(EngineError::ClaimOp)? else {
            return Ok(None);
        };
        let Some(held) = book.adopt(&entry) else {
            return Ok(None);
        };
        let same_fence = match &rec.claim {
            Some(stored) => {
                let mine = stored.held()?;
                mine.record.run_id == held.record.run_id
                    && mine.record.fence_or_zero() == held.record.fence_or_zero()
            }
            None => true,
        };
        if !same_fence
            || !held
                .record
                .candidate_ids()
                .contains(&rec.candidate.as_str())
        {
            return Ok(None);
        }
        let merged = Self::adopt_listed(rec, &held.record)?;
        if rec.claim.as_ref().is_none_or(|s| s.sha != held.sha) {
            crate::engine::proof::hold(self, rec, &held);
            self.save(rec).await?;
        } else if merged {
            self.save(rec).await?;
        }
        Ok(Some(held))
    }

    /// Takes into `rec` what the claim record lists of its experiment
    /// ([`experiment::Listed`], written by `/klaud try`): the variant
    /// itself when `rec` was rebuilt without a journal as a plain
    /// candidate, and siblings it does not know yet. `true` when `rec`
    /// changed (the caller saves it).
    pub(super) fn adopt_listed(
        rec: &mut CandidateRecord,
        record: &klaud_claims::ClaimRecord,
    ) -> Result<bool, EngineError> {
        let Some(listed) = experiment::Listed::of_claim(&record.extra) else {
            return Ok(false);
        };
        let listed = listed.map_err(|e| EngineError::Claim(format!("{}: {e}", rec.family)))?;
        match rec.variant.as_mut() {
            None => match listed.info_for(rec.candidate.as_str()) {
                Some(info) => {
                    rec.variant =
                        Some(info.map_err(|e| EngineError::Claim(format!("{}: {e}", rec.family)))?);
                    Ok(true)
                }
                None => Ok(false),
            },
            Some(info) if info.experiment == listed.experiment => {
                let mut changed = false;
                for s in &listed.siblings {
                    if !info.siblings.iter().any(|x| x.candidate == s.candidate) {
                        info.siblings.push(s.clone());
                        changed = true;
                    }
                }
                Ok(changed)
            }
            Some(_) => Ok(false),
        }
    }

    /// [`Self::adopt_listed`] from the claim `rec` holds already (no
    /// request): a candidate rebuilt as plain learns it is a variant
    /// before its first step under the claim.
    pub(super) async fn adopt_listed_from_held(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<(), EngineError> {
        if rec.variant.is_some() {
            return Ok(());
        }
        let Some(stored) = rec.claim.clone() else {
            return Ok(());
        };
        if Self::adopt_listed(rec, &stored.held()?.record)? {
            self.save(rec).await?;
        }
        Ok(())
    }

    /// Writes `field` = `value` (or removes it) in the shared claim record,
    /// by compare-and-swap from the tip; `false` when the claim is not ours.
    pub(super) async fn mark_claim(
        &self,
        rec: &mut CandidateRecord,
        field: &str,
        value: Option<&str>,
    ) -> Result<bool, EngineError> {
        for _ in 0..CAS_ATTEMPTS {
            let Some(held) = self.refresh_claim(rec).await? else {
                return Ok(false);
            };
            let current = held.record.extra.get(field).and_then(Value::as_str);
            if current == value {
                return Ok(true);
            }
            let mut record = held.record.clone();
            match value {
                Some(v) => {
                    record.extra.insert(field.to_owned(), Value::from(v));
                }
                None => {
                    record.extra.remove(field);
                }
            }
            self.intend(
                rec,
                Intent::ClaimField {
                    field: field.to_owned(),
                    value: value.map(str::to_owned),
                },
            )
            .await?;
            match self
                .book()
                .amend(&held, record)
                .await
                .map_err(EngineError::ClaimOp)?
            {
                Renew::Renewed(h) => {
                    crate::engine::proof::hold(self, rec, &h);
                    self.save(rec).await?;
                    return Ok(true);
                }
                // Moved under us (a sibling renewed): read it again.
                Renew::Lost(_) => continue,
            }
        }
        Err(EngineError::Claim(format!(
            "the claim of {} kept moving while {field} was written",
            rec.family
        )))
    }

    /// `body` with the variant's "Related experiments" section showing its
    /// siblings' records and `rec` as it stands.
    pub(super) fn splice_experiment_section(
        info: &VariantInfo,
        mut rows: Vec<(Sibling, Option<CandidateRecord>)>,
        rec: &CandidateRecord,
        body: &str,
    ) -> String {
        if let Some(row) = rows.iter_mut().find(|(s, _)| s.candidate == rec.candidate) {
            row.1 = Some(rec.clone());
        }
        experiment::splice_section(body, &experiment::render_section(info, &rows))
    }

    /// For a variant, `body` with the experiments section it will show once
    /// `rec` has moved on to `next`: the baseline freeze writes it in the
    /// same edit, so the next step has nothing to change (each edit of the
    /// body also makes the next read of the pull request a charged one).
    pub(super) async fn with_experiment_section(
        &self,
        rec: &CandidateRecord,
        next: Step,
        body: String,
    ) -> Result<String, EngineError> {
        let Some(info) = &rec.variant else {
            return Ok(body);
        };
        let siblings = self.sibling_records(info).await?;
        let mut ahead = rec.clone();
        ahead.step = next;
        Ok(Self::splice_experiment_section(
            info, siblings, &ahead, &body,
        ))
    }

    /// Each sibling with its journal record, in experiment order.
    pub(super) async fn sibling_records(
        &self,
        info: &VariantInfo,
    ) -> Result<Vec<(Sibling, Option<CandidateRecord>)>, EngineError> {
        let mut out = Vec::new();
        for s in &info.siblings {
            out.push((s.clone(), self.journal.load(s.candidate.as_str()).await?));
        }
        Ok(out)
    }

    /// Whether a sibling has finished: its record is done, or (no record)
    /// its PR carries its receipt, or it never got a branch or PR.
    pub(super) async fn sibling_finished(
        &self,
        sibling: &Sibling,
        rec: Option<&CandidateRecord>,
    ) -> Result<bool, EngineError> {
        if let Some(r) = rec {
            return Ok(r.step == Step::Done);
        }
        let branch = crate::engine::target::branch_name(sibling.candidate.as_str());
        let Some(pull) = self.forge.find_pull(&branch).await? else {
            return Ok(self.branch_tip(&branch).await?.is_none());
        };
        let comments = self.forge.list_comments(pull.number).await?;
        Ok(comments.iter().any(|c| {
            self.by_bot(c.author.as_deref())
                && find_record(&c.body).ok().flatten().is_some_and(|f| {
                    matches!(&f.key, MarkerKey::Outcome { candidate, .. }
                        if candidate.as_str() == sibling.candidate)
                })
        }))
    }

    /// Before each step of a running variant: stop when a sibling won,
    /// wait for a slot under the concurrency bound, and keep the siblings
    /// section of the body current. `Some(progress)`: return it.
    pub(super) async fn experiment_gate(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<Option<Progress>, EngineError> {
        let Some(info) = rec.variant.clone() else {
            return Ok(None);
        };
        let Some(held) = self.refresh_claim(rec).await? else {
            // Not ours (any more): the ownership check says so and ends it.
            return Ok(None);
        };
        let siblings = self.sibling_records(&info).await?;
        if let Some(winner) = held.record.extra.get(WINNER_FIELD).and_then(Value::as_str)
            && winner != rec.candidate
        {
            let m = self.winner_message(&info, &siblings, winner).await?;
            // Rebuilt without a journal, the record may not know its own
            // branch and PR yet: the stop must close what exists.
            if matches!(rec.step, Step::Prepare | Step::Open) {
                self.adopt_existing(rec).await?;
            }
            self.end_now(rec, Outcome::Duplicate, m, false).await?;
            return Ok(Some(Progress::Advanced(Step::Finish)));
        }
        if rec.step == Step::Prepare
            && rec.head.is_none()
            && rec.pending_commit.is_none()
            && info.max_concurrent > 0
        {
            let running: Vec<&str> = siblings
                .iter()
                .filter(|(s, r)| {
                    s.candidate != rec.candidate
                        && r.as_ref().is_some_and(|r| {
                            !matches!(r.step, Step::Claim | Step::Done)
                                && (r.step != Step::Prepare
                                    || r.head.is_some()
                                    || r.pending_commit.is_some())
                                && !Self::parked(&info, r)
                        })
                })
                .map(|(s, _)| s.name.as_str())
                .collect();
            if running.len() >= info.max_concurrent as usize
                && self.branch_tip(&rec.branch).await?.is_none()
            {
                return Ok(Some(Progress::Waiting(format!(
                    "{} of experiment {}'s variants run already ({}); at most {} at once",
                    running.len(),
                    info.experiment,
                    running.join(", "),
                    info.max_concurrent
                ))));
            }
        }
        if let Some(number) = rec.pull
            && matches!(
                rec.step,
                Step::Smoke | Step::Repair | Step::Final | Step::Sweep
            )
        {
            let pull = self.forge.get_pull(number).await?;
            return self
                .rewrite_experiments_section(rec, &info, siblings, number, &pull.body)
                .await;
        }
        Ok(None)
    }

    /// Writes the experiments section of `rec`'s PR (body `current`) when
    /// it changed, after the ownership check.
    async fn rewrite_experiments_section(
        &self,
        rec: &mut CandidateRecord,
        info: &VariantInfo,
        siblings: Vec<(Sibling, Option<CandidateRecord>)>,
        number: PullNumber,
        current: &str,
    ) -> Result<Option<Progress>, EngineError> {
        let body = Self::splice_experiment_section(info, siblings, rec, current);
        let body = self.with_footer(&body);
        if body == current {
            return Ok(None);
        }
        let proof = match self.prove(rec, Scope::Pull).await? {
            Ok(p) => p,
            Err(p) => return Ok(Some(p)),
        };
        self.intend(rec, Intent::UpdateExperimentsSection).await?;
        self.forge.update_pull_body(&proof, number, &body).await?;
        Ok(None)
    }

    /// The stop message of a variant whose sibling `winner` validated,
    /// linking the winner's PR.
    pub(super) async fn winner_message(
        &self,
        info: &VariantInfo,
        siblings: &[(Sibling, Option<CandidateRecord>)],
        winner: &str,
    ) -> Result<String, EngineError> {
        let (name, link) = siblings
            .iter()
            .find(|(s, _)| s.candidate == winner)
            .map(|(s, r)| {
                let url = r.as_ref().and_then(|r| r.pull_url.clone());
                (s.name.clone(), url)
            })
            .unwrap_or_else(|| (winner.to_owned(), None));
        let link = match link {
            Some(url) => url,
            None => self
                .forge
                .find_pull(&crate::engine::target::branch_name(winner))
                .await?
                .map(|p| p.html_url)
                .unwrap_or_else(|| crate::engine::target::branch_name(winner)),
        };
        Ok(format!(
            "Variant {name} of experiment {} validated first: {link}",
            info.experiment
        ))
    }

    /// For a variant rebuilt without its journal in the middle of its
    /// cleanup: when a sibling is the claim's winner, the stop message
    /// (the cleanup was the stop, its end is `duplicate`); `None` when no
    /// sibling won (the reports decide the end).
    pub(super) async fn stopped_by_winner(
        &self,
        rec: &CandidateRecord,
    ) -> Result<Option<String>, EngineError> {
        let Some(info) = rec.variant.clone() else {
            return Ok(None);
        };
        let family = Self::candidate_id(rec)?.family();
        let Some(entry) = self
            .book()
            .inspect(&family)
            .await
            .map_err(|e| EngineError::Claim(e.to_string()))?
        else {
            return Ok(None);
        };
        let Ok(record) = entry.record else {
            return Ok(None);
        };
        let Some(winner) = record.extra.get(WINNER_FIELD).and_then(Value::as_str) else {
            return Ok(None);
        };
        if winner == rec.candidate || !info.siblings.iter().any(|s| s.candidate == winner) {
            return Ok(None);
        }
        let siblings = self.sibling_records(&info).await?;
        Ok(Some(self.winner_message(&info, &siblings, winner).await?))
    }

    /// The branch head (a commit with this candidate's trailer) and the
    /// bot's PR of `rec`, when they exist and the record lacks them.
    pub(super) async fn adopt_existing(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<(), EngineError> {
        if rec.head.is_none()
            && let Some(tip) = self.branch_tip(&rec.branch).await?
        {
            let trailer = format!("{}{}", crate::engine::config::TRAILER, rec.candidate);
            if tip.message.lines().any(|l| l.trim() == trailer) {
                rec.head = Some(tip.sha);
                rec.pending_commit = None;
            }
        }
        if rec.pull.is_none()
            && let Some(pull) = self.forge.find_pull(&rec.branch).await?
            && self.by_bot(pull.author.as_deref())
        {
            rec.pull = Some(pull.number);
            rec.pull_url = Some(pull.html_url.clone());
            rec.attempts = {
                let comments = self.forge.list_comments(pull.number).await?;
                self.reported_attempts(rec, &comments, true)
            };
            self.find_owned_runs(rec).await?;
        }
        self.save(rec).await
    }

    /// Before a variant's changelog and sweep label: only one variant is in
    /// its final sweep at a time. `Some(progress)`: wait.
    pub(super) async fn experiment_final_slot(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<Option<Progress>, EngineError> {
        let Some(info) = rec.variant.clone() else {
            return Ok(None);
        };
        let Some(held) = self.refresh_claim(rec).await? else {
            return Ok(None);
        };
        if let Some(other) = held.record.extra.get(FINAL_FIELD).and_then(Value::as_str)
            && other != rec.candidate
        {
            let sibling = info.siblings.iter().find(|s| s.candidate == other);
            let finished = match sibling {
                Some(s) => {
                    let r = self.journal.load(s.candidate.as_str()).await?;
                    self.sibling_finished(s, r.as_ref()).await?
                }
                None => true,
            };
            if !finished {
                return Ok(Some(Progress::Waiting(format!(
                    "passed the smoke; Variant {} is in its final sweep first",
                    sibling.map_or(other, |s| s.name.as_str())
                ))));
            }
        }
        self.mark_claim(rec, FINAL_FIELD, Some(rec.candidate.clone().as_str()))
            .await?;
        Ok(None)
    }

    /// At a variant's finish, before anything is published: a validated
    /// variant is recorded as the winner (so the others stop), another end
    /// gives up the final sweep slot if it held it.
    pub(super) async fn experiment_finish(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<(), EngineError> {
        if rec.variant.is_none() || rec.ending.as_ref().is_some_and(|e| e.hands_off) {
            return Ok(());
        }
        let Some(held) = self.refresh_claim(rec).await? else {
            return Ok(());
        };
        let validated = rec
            .ending
            .as_ref()
            .is_some_and(|e| e.outcome == Outcome::Validated);
        if validated {
            self.mark_claim(rec, WINNER_FIELD, Some(rec.candidate.clone().as_str()))
                .await?;
        } else if held.record.extra.get(FINAL_FIELD).and_then(Value::as_str)
            == Some(rec.candidate.as_str())
        {
            self.mark_claim(rec, FINAL_FIELD, None).await?;
        }
        Ok(())
    }

    /// A variant's experiments section as it ends, so the body it leaves
    /// for reviewers is not stale ("final sweep" after it ended): its own
    /// row says how it ended, and for the winner every sibling still going
    /// shows what it becomes now (each ends `duplicate` once a variant
    /// validated). Returns `Some(progress)` only when an ownership check
    /// ended the candidate.
    pub(super) async fn final_experiment_section(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<Option<Progress>, EngineError> {
        let (Some(info), Some(number)) = (rec.variant.clone(), rec.pull) else {
            return Ok(None);
        };
        let Some(ending) = rec.ending.clone().filter(|e| !e.hands_off) else {
            return Ok(None);
        };
        let won = ending.outcome == Outcome::Validated;
        let mut siblings = self.sibling_records(&info).await?;
        for (s, r) in siblings.iter_mut() {
            if !won || s.candidate == rec.candidate {
                continue;
            }
            if let Some(r) = r.as_mut().filter(|r| r.step != Step::Done) {
                r.step = Step::Finish;
                r.ending = Some(crate::engine::journal::Ending {
                    outcome: Outcome::Duplicate,
                    phase: ending.phase,
                    message: format!("Variant {} validated first", info.name),
                    hands_off: false,
                    note: None,
                    declined: None,
                });
            }
        }
        let pull = self.forge.get_pull(number).await?;
        if !pull.state.is_open() {
            return Ok(None);
        }
        self.rewrite_experiments_section(rec, &info, siblings, number, &pull.body)
            .await
    }

    /// Whether a finished variant releases the shared claim: only the last
    /// sibling to finish does (the others still need it to act).
    pub(super) async fn experiment_releases(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<bool, EngineError> {
        if rec.variant.is_none() {
            return Ok(true);
        }
        // Release what is on GitHub now, not a tip a sibling moved on from;
        // and learn of siblings a `/klaud try` added meanwhile.
        self.refresh_claim(rec).await?;
        let Some(info) = rec.variant.clone() else {
            return Ok(true);
        };
        for (s, r) in self.sibling_records(&info).await? {
            if s.candidate != rec.candidate && !self.sibling_finished(&s, r.as_ref()).await? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Adopts the claim's current tip when a sibling moved it (renewal,
    /// bookkeeping) and it is still ours; `true` when it did.
    pub(super) async fn adopt_moved_claim(
        &self,
        rec: &mut CandidateRecord,
    ) -> Result<bool, EngineError> {
        if rec.variant.is_none() {
            return Ok(false);
        }
        let before = rec.claim.clone();
        Ok(self.refresh_claim(rec).await?.is_some()
            && rec.claim.as_ref().map(|c| &c.sha) != before.as_ref().map(|c: &StoredClaim| &c.sha))
    }

    /// A maintainer's `/klaud try` on `rec`'s PR: a new variant of its
    /// candidate joins (or, for a plain candidate, starts) its experiment
    /// under the same claim. The claim lists the new candidate before any
    /// sibling's record names it, so a crash in between only leaves a
    /// listed candidate that never started. `Ok(Err(why))`: refused.
    pub async fn add_variant(
        &self,
        rec: &mut CandidateRecord,
        request: &crate::engine::TryRequest,
    ) -> Result<Result<crate::engine::target::Target, crate::engine::Refusal>, EngineError> {
        Ok(
            match self
                .add_variants(rec, std::slice::from_ref(request), None)
                .await?
            {
                Ok(mut t) => t
                    .pop()
                    .ok_or_else(|| crate::engine::Refusal("no variant was made".to_owned())),
                Err(e) => Err(e),
            },
        )
    }

    /// [`Self::add_variant`] for several variants at once, all checked
    /// before any is listed and then listed by one compare-and-swap, so a
    /// refusal or a crash never leaves some of them half-added. A request
    /// may build on one before it in `requests`. With `proposed` (the
    /// repair hook's variants), a variant the claim already lists with the
    /// same id and proposal is taken as added: the step is re-run after a
    /// crash.
    pub fn add_variants<'f>(
        &'f self,
        rec: &'f mut CandidateRecord,
        requests: &'f [crate::engine::TryRequest],
        proposed: Option<&'f experiment::Proposal>,
    ) -> BoxFuture<
        'f,
        Result<Result<Vec<crate::engine::target::Target>, crate::engine::Refusal>, EngineError>,
    > {
        Box::pin(async move {
            if matches!(rec.step, Step::Finish | Step::Done) || rec.ending.is_some() {
                return Ok(Err(crate::engine::Refusal(format!(
                    "candidate {} is finishing or finished",
                    rec.candidate
                ))));
            }
            // A plain candidate becomes the experiment's first variant, `base`.
            let mut info = rec.variant.clone().unwrap_or_else(|| VariantInfo {
                experiment: format!("try-{}", &rec.candidate.as_str()[17..25]),
                name: "base".into(),
                from: None,
                own: Vec::new(),
                edits: Vec::new(),
                siblings: vec![Sibling {
                    name: "base".into(),
                    candidate: rec.candidate.clone(),
                    from: None,
                    own: Vec::new(),
                    proposed: None,
                }],
                max_concurrent: experiment::DEFAULT_MAX_CONCURRENT,
                base_image: rec.image.clone(),
            });
            let base_target = crate::engine::target::Target {
                family: rec.family.clone(),
                candidate: Self::candidate_id(rec)?,
                image: info.base_image.clone(),
                revision: rec.revision.clone(),
                clock: rec.clock.clone(),
                not_release_reason: rec.not_release_reason.clone(),
                upstream: rec.upstream.clone(),
                versions: rec.versions.clone(),
                variant: None,
            };
            let mut targets = Vec::new();
            let many = requests.len() > 1;
            for request in requests {
                match self.variant_target(rec, &mut info, &base_target, request, proposed, many)? {
                    Ok(target) => targets.push(target),
                    Err(why) => return Ok(Err(why)),
                }
            }
            let new_ids: Vec<klaud_claims::CandidateId> =
                targets.iter().map(|t| t.candidate.clone()).collect();
            if let Err(why) = self.list_variants(rec, &info, &new_ids, requests).await? {
                return Ok(Err(why));
            }
            self.tell_siblings(rec, &info, &new_ids).await?;
            let mut mine = info.clone();
            if rec.variant.is_none() {
                mine.name = "base".into();
            }
            mine.siblings = info.siblings.clone();
            rec.variant = Some(mine);
            self.save(rec).await?;
            for target in &mut targets {
                if let Some(v) = target.variant.as_mut() {
                    v.siblings = info.siblings.clone();
                }
            }
            Ok(Ok(targets))
        })
    }

    /// The target of one requested variant, checked against the
    /// experiment as it is (`info`, which lists it when new) and against
    /// what the bump commit can make. `Ok(Err(why))`: refused.
    // Kept whole (about 90 lines): its refusals come in the order the
    // person who asked reads them, each with its own message.
    fn variant_target(
        &self,
        rec: &CandidateRecord,
        info: &mut VariantInfo,
        base_target: &crate::engine::target::Target,
        request: &crate::engine::TryRequest,
        proposed: Option<&experiment::Proposal>,
        many: bool,
    ) -> Result<Result<crate::engine::target::Target, crate::engine::Refusal>, EngineError> {
        use klaud_planner::variant::ResolvedVariant;
        let refused = |why: String| {
            crate::engine::Refusal(if many {
                format!("Variant {}: {why}", request.name)
            } else {
                why
            })
        };
        let existing = info
            .siblings
            .iter()
            .find(|s| s.name == request.name)
            .cloned();
        if let Some(existing) = &existing
            && (proposed.is_none() || existing.proposed.as_ref() != proposed)
        {
            return Ok(Err(refused(format!(
                "the experiment already has a Variant {} ({})",
                request.name,
                crate::engine::target::branch_name(existing.candidate.as_str())
            ))));
        }
        // The base's effective edits: its chain of own edits, oldest first.
        let inherited = match &request.from {
            Some(from) => match experiment::effective_edits(&info.siblings, from) {
                Ok(e) => e,
                Err(e) => return Ok(Err(refused(e.to_string()))),
            },
            None => Vec::new(),
        };
        let own: Vec<String> = request.edits.iter().map(ToString::to_string).collect();
        let resolved = ResolvedVariant {
            name: request.name.clone(),
            from: request.from.clone(),
            own: own.clone(),
            edits: inherited.iter().chain(&own).cloned().collect(),
        };
        // Refuse now what the bump commit could not make.
        let edits = match resolved.parsed() {
            Ok(e) => e,
            Err(e) => return Ok(Err(refused(e.to_string()))),
        };
        if let Err(e) = self.repository.apply_variant_edits(
            &rec.family,
            &std::collections::BTreeMap::new(),
            &edits,
        ) {
            return Ok(Err(refused(e.to_string())));
        }
        let target = match experiment::variant_targets(
            base_target,
            &info.experiment,
            std::slice::from_ref(&resolved),
            info.max_concurrent,
        ) {
            Ok(mut t) if t.len() == 1 => t.remove(0),
            Ok(_) => return Ok(Err(refused("no variant was made".into()))),
            Err(e) => return Ok(Err(refused(e.to_string()))),
        };
        match existing {
            Some(e) if e.candidate == target.candidate.as_str() => {}
            Some(e) => {
                return Ok(Err(refused(format!(
                    "the experiment already has a Variant {} with other edits ({})",
                    request.name,
                    crate::engine::target::branch_name(e.candidate.as_str())
                ))));
            }
            None => info.siblings.push(Sibling {
                name: resolved.name.clone(),
                candidate: target.candidate.clone(),
                from: resolved.from.clone(),
                own,
                proposed: proposed.cloned(),
            }),
        }
        Ok(Ok(target))
    }

    /// Lists the new candidates `new_ids` and the experiment as it now is
    /// in the claim, by one compare-and-swap, so every sibling can be
    /// rebuilt from GitHub alone. `Ok(Err(why))`: the claim is not held.
    async fn list_variants(
        &self,
        rec: &mut CandidateRecord,
        info: &VariantInfo,
        new_ids: &[klaud_claims::CandidateId],
        requests: &[crate::engine::TryRequest],
    ) -> Result<Result<(), crate::engine::Refusal>, EngineError> {
        let listed = experiment::Listed {
            experiment: info.experiment.clone(),
            base_image: info.base_image.clone(),
            max_concurrent: info.max_concurrent,
            siblings: info.siblings.clone(),
        };
        let listed_value = serde_json::to_value(&listed)
            .map_err(|e| EngineError::Claim(format!("{}: {e}", rec.family)))?;
        let mut written = false;
        for _ in 0..CAS_ATTEMPTS {
            let Some(held) = self.refresh_claim(rec).await? else {
                return Ok(Err(crate::engine::Refusal(
                    "this instance does not hold the family's claim".into(),
                )));
            };
            let ids = held.record.candidate_ids();
            let listed_now = new_ids.iter().all(|id| ids.contains(&id.as_str()))
                && held.record.extra.get(experiment::SIBLINGS_FIELD) == Some(&listed_value);
            if listed_now {
                written = true;
                break;
            }
            let mut record = held.record.clone();
            let base = held
                .record
                .candidates
                .first()
                .map(|c| c.base.clone())
                .unwrap_or_else(|| rec.base_sha.clone());
            for new_id in new_ids {
                if ids.contains(&new_id.as_str()) {
                    continue;
                }
                for member in self.bumped_together(&rec.family) {
                    record.candidates.push(klaud_claims::ClaimCandidate::new(
                        base.clone(),
                        member,
                        new_id.clone(),
                    ));
                }
            }
            record
                .extra
                .insert(experiment::SIBLINGS_FIELD.to_owned(), listed_value.clone());
            let names = requests.iter().map(|r| r.name.clone()).collect();
            self.intend(rec, Intent::ClaimAddVariants(names)).await?;
            match self
                .book()
                .amend(&held, record)
                .await
                .map_err(EngineError::ClaimOp)?
            {
                Renew::Renewed(h) => {
                    crate::engine::proof::hold(self, rec, &h);
                    self.save(rec).await?;
                    written = true;
                    break;
                }
                // Moved under us (a sibling renewed): read it again.
                Renew::Lost(_) => continue,
            }
        }
        if !written {
            // Never go on unlisted: the variant would run outside the
            // claim its siblings release.
            return Err(EngineError::Claim(format!(
                "the claim of {} kept moving while variants were added ({CAS_ATTEMPTS} tries); \
             the next pass tries again",
                rec.family
            )));
        }
        Ok(Ok(()))
    }

    /// Every sibling's record learns of the new variants.
    async fn tell_siblings(
        &self,
        rec: &CandidateRecord,
        info: &VariantInfo,
        new_ids: &[klaud_claims::CandidateId],
    ) -> Result<(), EngineError> {
        // 2. Every sibling's record learns of it.
        for s in info.siblings.clone() {
            if s.candidate == rec.candidate || new_ids.iter().any(|id| id.as_str() == s.candidate) {
                continue;
            }
            if let Some(mut other) = self.journal.load(s.candidate.as_str()).await?
                && let Some(v) = other.variant.as_mut()
                && new_ids
                    .iter()
                    .any(|id| !v.siblings.iter().any(|x| x.candidate == id.as_str()))
            {
                v.siblings = info.siblings.clone();
                self.save(&mut other).await?;
            }
        }
        Ok(())
    }

    /// Whether `r` waits for the variants the repair hook proposed instead
    /// of its next repair (it runs nothing, so takes no slot).
    pub(super) fn parked(info: &VariantInfo, r: &CandidateRecord) -> bool {
        r.step == Step::Repair
            && info.siblings.iter().any(|s| {
                s.proposed
                    .as_ref()
                    .is_some_and(|p| p.answers(&r.candidate, r.repairs + 1))
            })
    }

    /// In the repair step: when the claim lists variants the repair hook
    /// proposed instead of repair `n`, the candidate waits for their race
    /// (`Some(progress)`). A sibling's win ends it `duplicate` (the gate);
    /// when every proposed variant finished without a win, it ends
    /// `failed`. `None`: no proposal answers repair `n`.
    // Kept whole (about 80 lines): the race's endings (a sibling's win, all
    // finished without one, still running) are read from one claim listing.
    pub(super) async fn proposal_wait(
        &self,
        rec: &mut CandidateRecord,
        n: u32,
        phase: Phase,
    ) -> Result<Option<Progress>, EngineError> {
        // A plain candidate is one only after a proposal was (perhaps)
        // listed: its intent says so; the others need no claim read.
        let proposed = match &rec.intent {
            Some(Intent::ProposeVariants { repair, .. }) => *repair == n,
            Some(Intent::ClaimAddVariants(_)) => true,
            _ => false,
        };
        if rec.claim.is_none() || (rec.variant.is_none() && !proposed) {
            return Ok(None);
        }
        // A crash may have come between the listing and the record's save:
        // what counts is the claim on GitHub.
        let Some(held) = self.refresh_claim(rec).await? else {
            return Ok(None);
        };
        let Some(info) = rec.variant.clone() else {
            return Ok(None);
        };
        let proposed: Vec<Sibling> = info
            .siblings
            .iter()
            .filter(|s| {
                s.proposed
                    .as_ref()
                    .is_some_and(|p| p.answers(&rec.candidate, n))
            })
            .cloned()
            .collect();
        if proposed.is_empty() {
            return Ok(None);
        }
        if let Some(p) = self.experiment_gate(rec).await? {
            return Ok(Some(p));
        }
        // A failed final sweep held the slot: give it to the proposals.
        if held.record.extra.get(FINAL_FIELD).and_then(Value::as_str)
            == Some(rec.candidate.as_str())
        {
            self.mark_claim(rec, FINAL_FIELD, None).await?;
        }
        let names = proposed
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        for s in &proposed {
            let r = self.journal.load(s.candidate.as_str()).await?;
            // Not started yet is not finished: a listed variant is always
            // started (its record, or a rebuild from the claim).
            let finished = match &r {
                Some(r) => r.step == Step::Done,
                None => {
                    self.forge
                        .find_pull(&crate::engine::target::branch_name(s.candidate.as_str()))
                        .await?
                        .is_some()
                        && self.sibling_finished(s, None).await?
                }
            };
            let validated = r
                .as_ref()
                .and_then(|r| r.ending.as_ref())
                .is_some_and(|e| e.outcome == Outcome::Validated);
            if !finished || validated {
                return Ok(Some(Progress::Waiting(format!(
                    "the repair hook proposed Variant {names} instead of repair {n}; \
                     waiting for their race"
                ))));
            }
        }
        let m = format!(
            "the repair hook proposed Variant {names} instead of repair {n}, \
             and none of them validated"
        );
        Ok(Some(self.end(rec, Outcome::Failed, phase, m, false).await?))
    }

    /// The repair hook proposed variants instead of repair `context.repair`:
    /// each, checked like a maintainer's `/klaud try`, joins the
    /// experiment under the claim (all or none), and the candidate waits
    /// for their race. A refusal ends the candidate `failed` naming why.
    pub(super) async fn propose_variants(
        &self,
        rec: &mut CandidateRecord,
        context: &RepairContext,
        phase: Phase,
        requests: &[crate::engine::TryRequest],
    ) -> Result<Progress, EngineError> {
        let n = context.repair;
        if let Some(tip) = self.branch_tip(&rec.branch).await?
            && tip.sha != context.head
        {
            let m = format!(
                "the repair hook both pushed to {} and proposed variants on repair {n}; \
                 it must do one or the other",
                rec.branch
            );
            return self.end(rec, Outcome::Failed, phase, m, false).await;
        }
        if requests.is_empty() {
            let m = format!("the repair hook proposed no variants on repair {n}");
            return self.end(rec, Outcome::Failed, phase, m, false).await;
        }
        // Build on what the claim lists now (another proposal, a try).
        self.refresh_claim(rec).await?;
        let proposal = Proposal {
            by: rec.candidate.clone(),
            variant: rec
                .variant
                .as_ref()
                .map_or_else(|| "base".to_owned(), |v| v.name.clone()),
            repair: n,
            attempt: rec
                .attempts
                .last()
                .map_or_else(|| "attempt".to_owned(), |a| a.kind.title()),
            run: context.run.as_ref().map(crate::model::RunRef::attempt_url),
        };
        self.intend(
            rec,
            Intent::ProposeVariants {
                repair: n,
                names: requests.iter().map(|r| r.name.clone()).collect(),
            },
        )
        .await?;
        let names = requests
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        match self.add_variants(rec, requests, Some(&proposal)).await? {
            Ok(targets) => {
                for t in &targets {
                    self.open_record(t).await?;
                }
                Ok(Progress::Waiting(format!(
                    "the repair hook proposed Variant {names} instead of repair {n}; \
                     waiting for their race"
                )))
            }
            Err(why) => {
                let m = format!(
                    "the repair hook's variants for repair {n} were refused (none was added): {why}"
                );
                self.end(rec, Outcome::Failed, phase, m, false).await
            }
        }
    }
}
