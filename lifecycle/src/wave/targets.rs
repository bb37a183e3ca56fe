//! The targets a wave works on: the plan's picks (with their upstream
//! range and the old image's versions), experiments' variants, and the
//! candidates of claims this instance holds, rebuilt from the claim or
//! from their branch.

use std::collections::BTreeSet;

use klaud_claims::CandidateId;
use klaud_planner::image::ImageRef;
use klaud_planner::plan::PlanReport;
use klaud_planner::registry::RegistryClient;
use klaud_planner::repo::Repository;

use super::WaveFailure;
use super::ports::{BaseSource, UpstreamSource};
use crate::engine::Target;

/// Targets for the plan's selected candidates plus `wanted` (claims this
/// instance holds), looked up among every family's candidate, each with
/// its image when the plan left it unread
/// ([`klaud_planner::plan::Candidate::image_read`]).
pub(super) fn targets_from_plan(
    report: &PlanReport,
    wanted: &BTreeSet<String>,
) -> Vec<(Target, Option<ImageRef>)> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    let selected = report.candidates.iter().map(|s| s.id.clone());
    for id in selected.chain(wanted.iter().cloned()) {
        if !seen.insert(id.clone()) {
            continue;
        }
        let found = report.families.iter().find_map(|fp| {
            let c = fp.candidate.as_ref()?;
            (klaud_planner::identity::candidate_id(&fp.id, &c.image.normalized()) == id)
                .then_some((fp, c))
        });
        let (Some((fp, c)), Ok(candidate)) = (found, CandidateId::new(&id)) else {
            continue;
        };
        let target = Target {
            family: fp.family.clone(),
            candidate,
            image: c.image.to_string(),
            revision: c.revision.clone(),
            clock: serde_json::to_value(c.clock)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned)),
            not_release_reason: None,
            upstream: None,
            versions: Some(crate::report::VersionsCompared {
                old: None,
                new: c.versions.clone(),
                old_pruned: fp.status == klaud_planner::plan::Status::StalePruned,
            }),
            variant: None,
        };
        out.push((target, (!c.image_read).then(|| c.image.clone())));
    }
    out
}

/// The target of a candidate this instance holds a claim for, read from
/// its branch: the family's image in the bumped master config names the
/// candidate. `None` when there is no branch, or it does not carry that
/// image; an error when GitHub could not be read (try again next pass).
pub(super) async fn held_target(
    base: &dyn BaseSource,
    repository: &Repository,
    candidate: &klaud_claims::ClaimCandidate,
    experiments: &[crate::experiment::ExperimentSpec],
    claim: &klaud_claims::ClaimRecord,
) -> Result<Option<Target>, WaveFailure> {
    // A sibling a `/klaud try` listed in the claim: rebuilt from the claim
    // record alone, branch or not.
    if let Some(listed) = crate::experiment::Listed::of_claim(&claim.extra) {
        let listed = match listed {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(family = %candidate.family, error = %e, "listed variants not read");
                return Ok(None);
            }
        };
        if let Some(t) = listed_target(candidate, &listed) {
            return Ok(Some(t));
        }
    }
    let branch = crate::engine::branch_name(candidate.id.as_str());
    let Some((file, key)) = candidate.family.rsplit_once(':') else {
        return Ok(None);
    };
    let path = format!("{}{file}", repository.prefix());
    let Some(bytes) = base.branch_file(&branch, &path).await? else {
        return Ok(None);
    };
    let image = std::str::from_utf8(&bytes)
        .ok()
        .and_then(|text| klaud_planner::yaml::parse_readable(text).ok().flatten())
        .and_then(|doc| doc.get(key)?.get("image")?.as_scalar().map(str::to_owned));
    let Some(image) = image else {
        return Ok(None);
    };
    let Ok(parsed) = ImageRef::parse(&image) else {
        return Ok(None);
    };
    let plain =
        klaud_planner::identity::candidate_id(candidate.id.family().as_str(), &parsed.normalized());
    let Ok(plain) = CandidateId::new(&plain) else {
        return Ok(None);
    };
    let target = Target {
        family: candidate.family.clone(),
        candidate: plain,
        image,
        revision: None,
        clock: None,
        not_release_reason: None,
        upstream: None,
        versions: None,
        variant: None,
    };
    if target.candidate == candidate.id {
        return Ok(Some(target));
    }
    // A variant of a configured experiment: its id is rebuilt from the
    // image its branch runs.
    Ok(match crate::experiment::expand(&target, experiments) {
        Some(Ok(variants)) => variants.into_iter().find(|v| v.candidate == candidate.id),
        _ => None,
    })
}

/// The target of `candidate` when the claim's [`Listed`] experiment names
/// it: its id is rebuilt from the experiment's base image and the
/// variant's edits, and must come out the same.
///
/// [`Listed`]: crate::experiment::Listed
pub(super) fn listed_target(
    candidate: &klaud_claims::ClaimCandidate,
    listed: &crate::experiment::Listed,
) -> Option<Target> {
    let info = match listed.info_for(candidate.id.as_str())? {
        Ok(i) => i,
        Err(e) => {
            tracing::warn!(candidate = %candidate.id, error = %e, "listed variant not rebuilt");
            return None;
        }
    };
    let image = ImageRef::parse(&listed.base_image).ok()?;
    let plain =
        klaud_planner::identity::candidate_id(candidate.id.family().as_str(), &image.normalized());
    let base = Target {
        family: candidate.family.clone(),
        candidate: CandidateId::new(&plain).ok()?,
        image: listed.base_image.clone(),
        revision: None,
        clock: None,
        not_release_reason: None,
        upstream: None,
        versions: None,
        variant: None,
    };
    let mut target = if base.candidate == candidate.id {
        base
    } else {
        let resolved = klaud_planner::variant::ResolvedVariant {
            name: info.name.clone(),
            from: info.from.clone(),
            own: info.own.clone(),
            edits: info.edits.clone(),
        };
        let mut made = crate::experiment::variant_targets(
            &base,
            &info.experiment,
            std::slice::from_ref(&resolved),
            info.max_concurrent,
        )
        .ok()?;
        let t = made.pop()?;
        if t.candidate != candidate.id {
            tracing::warn!(candidate = %candidate.id, rebuilt = %t.candidate, "listed variant rebuilds to another id");
            return None;
        }
        t
    };
    target.variant = Some(info);
    Some(target)
}

/// The plan's picks with each pick on an experiment's family replaced by
/// the experiment's variants; each variant is marked seen.
pub(super) fn expand_experiments(
    picked: Vec<Target>,
    experiments: &[crate::experiment::ExperimentSpec],
    seen: &mut BTreeSet<String>,
) -> Vec<Target> {
    if experiments.is_empty() {
        return picked;
    }
    let mut out = Vec::new();
    for t in picked {
        match crate::experiment::expand(&t, experiments) {
            None => out.push(t),
            Some(Ok(variants)) => out.extend(
                variants
                    .into_iter()
                    .filter(|v| seen.insert(v.candidate.as_str().to_owned())),
            ),
            Some(Err(e)) => {
                tracing::warn!(candidate = %t.candidate, error = %e, "experiment not started")
            }
        }
    }
    out
}

/// The targets of `report` (its picks plus the claims in `ours`) not in
/// `seen`, with their upstream commit range when it can be known and the
/// versions the old image declares next to the new one's.
pub(super) async fn plan_targets(
    report: &PlanReport,
    ours: &BTreeSet<String>,
    seen: &mut BTreeSet<String>,
    upstream: Option<&dyn UpstreamSource>,
    repository: &Repository,
    registry: &RegistryClient,
) -> Vec<Target> {
    let mut out = Vec::new();
    for (mut t, unread) in targets_from_plan(report, ours) {
        if !seen.insert(t.candidate.as_str().to_owned()) {
            continue;
        }
        let Ok(family) = repository.family(&t.family) else {
            out.push(t);
            continue;
        };
        // Only the picks' images are read (not every family's), so the
        // plan keeps its request discipline: the old one always, the new
        // one where the plan decided it from Docker Hub's tags API alone.
        // An unreadable one (pruned tag, registry down) leaves its column
        // empty. Such a candidate pins the digest the API named, which no
        // registry answer has confirmed yet: its tag is `HEAD`ed beside
        // the reads, and a pick the registry does not confirm is not
        // worked (a claim already held was confirmed when it was taken).
        let architecture = family.platform.architecture();
        let unconfirmed = unread
            .as_ref()
            .filter(|_| !ours.contains(t.candidate.as_str()));
        let (old, new, served) = futures::join!(
            klaud_planner::provenance::image_versions(registry, family.image(), architecture),
            futures::future::OptionFuture::from(unread.as_ref().map(|image| {
                klaud_planner::provenance::declared(registry, image, architecture)
            })),
            futures::future::OptionFuture::from(
                unconfirmed.map(|image| klaud_planner::provenance::tag_digest(registry, image))
            )
        );
        if let (Some(image), Some(served)) = (unconfirmed, served) {
            match served {
                Ok(Some(digest)) if Some(digest.as_str()) == image.digest() => {}
                Ok(served) => {
                    tracing::warn!(
                        image = %t.image,
                        registry_serves = served.as_deref().unwrap_or("no such tag"),
                        "the registry does not confirm the digest Docker Hub's tags API named; not worked this pass"
                    );
                    continue;
                }
                Err(e) => {
                    tracing::warn!(
                        image = %t.image,
                        error = %e,
                        "the digest Docker Hub's tags API named could not be confirmed; not worked this pass"
                    );
                    continue;
                }
            }
        }
        if let Some(v) = t.versions.as_mut() {
            v.old = old.unwrap_or_else(|e| {
                tracing::warn!(image = %family.image(), error = %e, "old image versions unknown");
                None
            });
        }
        match new {
            Some(Ok(Some(declared))) => {
                t.revision = declared.revision;
                if let Some(v) = t.versions.as_mut() {
                    v.new = declared.versions;
                }
            }
            Some(Ok(None)) => {
                tracing::warn!(image = %t.image, "new image not found for its versions");
            }
            Some(Err(e)) => {
                tracing::warn!(image = %t.image, error = %e, "new image versions unknown");
            }
            None => {}
        }
        // The upstream range starts from the new image's revision, read
        // above where the plan did not.
        if let Some(up) = upstream {
            t.upstream = up
                .range(repository, family, &t.image, t.revision.as_deref())
                .await;
        }
        out.push(t);
    }
    out
}

#[cfg(test)]
#[path = "targets_tests.rs"]
mod tests;
