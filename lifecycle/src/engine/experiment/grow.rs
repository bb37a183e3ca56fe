//! Step 5 of 6 of an experiment's race, growing it: a maintainer's
//! `/klaud try` (or the repair hook's proposal) adds variants to the
//! candidate's experiment under the same claim, all checked before any is
//! listed and then listed by one compare-and-swap, so a refusal or a crash
//! never leaves some of them half-added; every sibling's record then
//! learns of them.
//!
//! Whenever a command or the repair step asks, while the claim is held.
//! Reads the claim and the base checkout (what a bump commit can make).
//! May write: the shared claim record (the new candidates and the
//! experiment as it now is).

use super::CAS_ATTEMPTS;
use super::claim::Amended;
use crate::engine::context::Engine;
use crate::engine::error::EngineError;
use crate::engine::intent::Intent;
use crate::engine::journal::{CandidateRecord, Step};
use crate::experiment::{Sibling, VariantInfo};
use crate::{BoxFuture, experiment};

impl Engine<'_> {
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
    pub(super) fn variant_target(
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
    pub(super) async fn list_variants(
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
        // The edit reads these while `amend_claim` holds `rec`.
        let (family, rec_base) = (rec.family.clone(), rec.base_sha.clone());
        let amended = self
            .amend_claim(rec, |held| {
                let ids = held.record.candidate_ids();
                let listed_now = new_ids.iter().all(|id| ids.contains(&id.as_str()))
                    && held.record.extra.get(experiment::SIBLINGS_FIELD) == Some(&listed_value);
                if listed_now {
                    return None;
                }
                let mut record = held.record.clone();
                let base = held
                    .record
                    .candidates
                    .first()
                    .map(|c| c.base.clone())
                    .unwrap_or_else(|| rec_base.clone());
                for new_id in new_ids {
                    if ids.contains(&new_id.as_str()) {
                        continue;
                    }
                    for member in self.bumped_together(&family) {
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
                Some((record, Intent::ClaimAddVariants(names)))
            })
            .await?;
        match amended {
            Amended::Done => {}
            Amended::NotHeld => {
                return Ok(Err(crate::engine::Refusal(
                    "this instance does not hold the family's claim".into(),
                )));
            }
            // Never go on unlisted: the variant would run outside the
            // claim its siblings release.
            Amended::KeptMoving => {
                return Err(EngineError::Claim(format!(
                    "the claim of {} kept moving while variants were added ({CAS_ATTEMPTS} tries); \
             the next pass tries again",
                    rec.family
                )));
            }
        }
        Ok(Ok(()))
    }

    /// Every sibling's record learns of the new variants.
    pub(super) async fn tell_siblings(
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
}
