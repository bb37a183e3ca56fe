//! Experiments: several variants of one candidate race under one
//! claim; the first whose final sweep validates wins and the others end
//! `duplicate`.
//!
//! A variant is an ordinary candidate with its own deterministic id (the
//! family id and a hash of image, experiment, variant name and edits), so
//! its branch, PR, smoke title, reports, receipt and recovery lease are the
//! single-candidate ones. What the siblings share lives in the claim record
//! they all run under (the claim lists every variant candidate), in two of
//! Klaud's own fields written by compare-and-swap before acting on them:
//! `experiment-final` (the variant now in its final sweep: at most one; it
//! keeps the field when it validates, which makes it the winner) and
//! `experiment-winner` (the variant that validated without the slot naming
//! it). Either way the others stop.

use klaud_planner::glob::wildcard;
use klaud_planner::image::ImageRef;
use klaud_planner::variant::ResolvedVariant;
use serde::{Deserialize, Serialize};

use crate::engine::journal::{CandidateRecord, Step};
use crate::engine::target::{Target, branch_name};

pub mod variant;
pub use variant::{Proposal, Sibling, VariantInfo};

/// Claim record field: the variant in its final sweep.
pub const FINAL_FIELD: &str = "experiment-final";
/// Claim record field: the variant that validated.
pub const WINNER_FIELD: &str = "experiment-winner";
/// Claim record field: the experiment as a `/klaud try` grew it (a
/// [`Listed`]), so that every sibling, the tried ones included, can be
/// rebuilt from GitHub when the journal is gone.
pub const SIBLINGS_FIELD: &str = "experiment-siblings";

/// How many variants of one family run at once when nothing configured
/// another bound: `[[experiments]]`' default, and the bound of an
/// experiment a `/klaud try` or the repair hook starts from a plain
/// candidate (shared GPUs are never asked for more by default).
pub const DEFAULT_MAX_CONCURRENT: u32 = 2;
/// Start of the PR body's section listing the siblings.
pub const SECTION_START: &str = "<!-- klaud-experiments -->";
/// End of that section.
pub const SECTION_END: &str = "<!-- /klaud-experiments -->";

/// What the claim record keeps of an experiment a maintainer's `/klaud try`
/// grew ([`SIBLINGS_FIELD`]): written by compare-and-swap together with
/// the new candidate, before any record names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listed {
    /// The experiment's name.
    pub experiment: String,
    /// The candidate image the experiment started from.
    pub base_image: String,
    /// How many variants may run at once (0: no bound).
    #[serde(default)]
    pub max_concurrent: u32,
    /// Every variant, in order.
    pub siblings: Vec<Sibling>,
}

/// Why an experiment's variants could not be read or made; each names the
/// variant or field.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// The claim record's siblings field does not parse.
    #[error("claim record field {SIBLINGS_FIELD}: {0}")]
    Siblings(#[source] serde_json::Error),
    /// A variant builds on one the experiment does not have.
    #[error("the experiment has no Variant {0}")]
    NoVariant(String),
    /// Variants build on each other in a loop.
    #[error("variants build on each other in a circle")]
    Circle,
    /// A variant's `image …` is not an image reference.
    #[error("variant {variant}: image {image:?}: {source}")]
    Image {
        /// The variant.
        variant: String,
        /// What it names.
        image: String,
        /// Why it does not parse.
        #[source]
        source: klaud_planner::image::ImageRefError,
    },
    /// The variant's candidate id is not one (cannot happen for ids made
    /// here; kept rather than unwrapped).
    #[error("variant {variant}: {source}")]
    CandidateId {
        /// The variant.
        variant: String,
        /// The id's problem.
        #[source]
        source: klaud_claims::IdError,
    },
    /// The configured experiment `name` could not be expanded.
    #[error("experiment {name}: {source}")]
    Configured {
        /// The experiment.
        name: String,
        /// Why.
        #[source]
        source: Box<ExperimentError>,
    },
}

impl Listed {
    /// The field of a claim record's top-level `extra`; `None` when the
    /// record has none, an error naming the field when it does not parse.
    pub fn of_claim(
        extra: &std::collections::BTreeMap<String, serde_json::Value>,
    ) -> Option<Result<Listed, ExperimentError>> {
        let value = extra.get(SIBLINGS_FIELD)?;
        Some(serde_json::from_value(value.clone()).map_err(ExperimentError::Siblings))
    }

    /// The variant of `candidate`, when it is one of the siblings.
    pub fn info_for(&self, candidate: &str) -> Option<Result<VariantInfo, ExperimentError>> {
        let me = self.siblings.iter().find(|s| s.candidate == candidate)?;
        Some(
            effective_edits(&self.siblings, &me.name).map(|edits| VariantInfo {
                experiment: self.experiment.clone(),
                name: me.name.clone(),
                from: me.from.clone(),
                own: me.own.clone(),
                edits,
                siblings: self.siblings.clone(),
                max_concurrent: self.max_concurrent,
                base_image: self.base_image.clone(),
            }),
        )
    }
}

/// The edits variant `name` applies: the own edits of its chain of bases,
/// oldest first, then its own.
pub fn effective_edits(siblings: &[Sibling], name: &str) -> Result<Vec<String>, ExperimentError> {
    let mut edits: Vec<String> = Vec::new();
    let mut at = Some(name.to_owned());
    let mut guard = 0;
    while let Some(n) = at {
        let Some(s) = siblings.iter().find(|s| s.name == n) else {
            return Err(ExperimentError::NoVariant(n));
        };
        edits.splice(0..0, s.own.iter().cloned());
        at = s.from.clone();
        guard += 1;
        if guard > siblings.len() {
            return Err(ExperimentError::Circle);
        }
    }
    Ok(edits)
}

/// `<family id>-<16 hex>`: a variant's candidate id, from everything that
/// makes it differ, so a restart (or another instance) names it the same.
pub fn variant_candidate_id(
    family_id: &str,
    normalized_image: &str,
    experiment: &str,
    variant: &ResolvedVariant,
) -> String {
    let value = serde_json::json!({
        "edits": variant.edits,
        "experiment": experiment,
        "image": normalized_image,
        "variant": variant.name,
    });
    let hash = klaud_planner::identity::identity(&value);
    format!("{family_id}-{}", &hash[..16])
}

/// The targets of an experiment on `base`'s family: one per variant, each
/// with its own candidate id and image (the base's unless the variant
/// says `image …`).
pub fn variant_targets(
    base: &Target,
    experiment: &str,
    variants: &[ResolvedVariant],
    max_concurrent: u32,
) -> Result<Vec<Target>, ExperimentError> {
    let family_id = base.candidate.family();
    let mut planned = Vec::new();
    for v in variants {
        let image_text = v.image().unwrap_or_else(|| base.image.clone());
        let image = ImageRef::parse(&image_text).map_err(|source| ExperimentError::Image {
            variant: v.name.clone(),
            image: image_text.clone(),
            source,
        })?;
        let id = variant_candidate_id(family_id.as_str(), &image.normalized(), experiment, v);
        let candidate =
            klaud_claims::CandidateId::new(&id).map_err(|source| ExperimentError::CandidateId {
                variant: v.name.clone(),
                source,
            })?;
        planned.push((v, image_text, candidate));
    }
    let siblings: Vec<Sibling> = planned
        .iter()
        .map(|(v, _, c)| Sibling {
            name: v.name.clone(),
            candidate: c.clone(),
            from: v.from.clone(),
            own: v.own.clone(),
            proposed: None,
        })
        .collect();
    Ok(planned
        .into_iter()
        .map(|(v, image, candidate)| {
            let same = image == base.image;
            Target {
                family: base.family.clone(),
                candidate,
                image,
                revision: if same { base.revision.clone() } else { None },
                clock: if same { base.clock.clone() } else { None },
                not_release_reason: if same {
                    base.not_release_reason.clone()
                } else {
                    None
                },
                upstream: if same { base.upstream.clone() } else { None },
                versions: if same { base.versions.clone() } else { None },
                variant: Some(VariantInfo {
                    experiment: experiment.to_owned(),
                    name: v.name.clone(),
                    from: v.from.clone(),
                    own: v.own.clone(),
                    edits: v.edits.clone(),
                    siblings: siblings.clone(),
                    max_concurrent,
                    base_image: base.image.clone(),
                }),
            }
        })
        .collect())
}

/// An experiment as configured (`[[experiments]]`): the families it runs
/// on and its variants, derived ones resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExperimentSpec {
    /// Its name (in bodies, commit messages and candidate ids).
    pub name: String,
    /// Family patterns: `<master>:<key>` or a key alone, `*` matching any
    /// run of characters.
    pub families: Vec<String>,
    /// How many variants of one family run at once (0: no bound).
    pub max_concurrent: u32,
    /// Its variants, in order.
    pub variants: Vec<ResolvedVariant>,
}

impl ExperimentSpec {
    /// Whether the experiment runs on `family` (`<master>:<key>`): a
    /// pattern with a `:` is matched against the whole family, one
    /// without against the key.
    pub fn matches(&self, family: &str) -> bool {
        let key = family.rsplit_once(':').map_or(family, |(_, k)| k);
        self.families.iter().any(|p| {
            if p.contains(':') {
                wildcard(p, family)
            } else {
                wildcard(p, key)
            }
        })
    }
}

/// The first configured experiment on `target`'s family, as variant
/// targets; `None` when no experiment matches.
pub fn expand(
    target: &Target,
    experiments: &[ExperimentSpec],
) -> Option<Result<Vec<Target>, ExperimentError>> {
    let spec = experiments.iter().find(|e| e.matches(&target.family))?;
    Some(
        variant_targets(target, &spec.name, &spec.variants, spec.max_concurrent).map_err(
            |source| ExperimentError::Configured {
                name: spec.name.clone(),
                source: Box::new(source),
            },
        ),
    )
}

/// `[Klaud Cold][experiment][Variant A] Update …`: the single-candidate
/// title with the experiment tags after the bot's bracket.
pub fn variant_title(title: &str, display_name: &str, variant: &str) -> String {
    let bracket = format!("[{display_name}]");
    match title.strip_prefix(&bracket) {
        Some(rest) => format!("{bracket}[experiment][Variant {variant}]{rest}"),
        None => format!("[experiment][Variant {variant}] {title}"),
    }
}

/// A sibling's state in one short bilingual phrase.
pub fn state_text(rec: Option<&CandidateRecord>) -> String {
    let Some(rec) = rec else {
        return "not started / 未开始".into();
    };
    if let (Step::Finish | Step::Done, Some(e)) = (rec.step, &rec.ending) {
        let zh = match e.outcome {
            crate::model::Outcome::Validated => "已验证",
            crate::model::Outcome::Duplicate => "已被取代",
            crate::model::Outcome::Failed => "失败",
            _ => "已结束",
        };
        return format!("{} / {zh}", e.outcome.as_str());
    }
    match rec.step {
        Step::Claim | Step::Prepare => "waiting for a slot / 等待名额".into(),
        Step::Open | Step::Baseline => "opening / 开启中".into(),
        Step::Smoke | Step::Repair => format!(
            "smoke, {} repair(s) used / 冒烟测试，已修复 {} 次",
            rec.repairs, rec.repairs
        ),
        Step::Final | Step::Sweep => "final sweep / 最终扫描".into(),
        Step::Finish | Step::Done => "finishing / 收尾中".into(),
    }
}

/// The "Related experiments / 相关实验" section of one variant's PR body.
/// `records` gives each sibling's record, when there is one.
pub fn render_section(
    info: &VariantInfo,
    records: &[(Sibling, Option<CandidateRecord>)],
) -> String {
    let edits = |own: &[String]| {
        if own.is_empty() {
            "the plain bump / 仅更新镜像".to_owned()
        } else {
            own.iter()
                .map(|e| klaud_render::escape::code(e))
                .collect::<Vec<_>>()
                .join("; ")
        }
    };
    let mut out = format!("{SECTION_START}\n### Related experiments / 相关实验\n\n");
    out.push_str(&format!(
        "Experiment `{}`: the variants race; whichever validates first goes on and the others close. \
         / 实验 `{}`：各变体并行，先验证通过者继续，其余关闭。\n\n",
        info.experiment, info.experiment
    ));
    if let Some(from) = &info.from {
        out.push_str(&format!(
            "Variant {} = Variant {from} plus {} / 变体 {} = 变体 {from} 加上上述修改\n\n",
            info.name,
            edits(&info.own),
            info.name
        ));
    }
    if let Some(p) = info
        .siblings
        .iter()
        .find(|s| s.name == info.name)
        .and_then(|s| s.proposed.as_ref())
    {
        let run = p
            .run
            .as_ref()
            .map(|u| format!(" ({u})"))
            .unwrap_or_default();
        out.push_str(&format!(
            "Variant {} was proposed by the repair hook, instead of repair {}, after Variant {}'s {} failed{run}. \
             / 变体 {} 由修复钩子在变体 {} 的{}失败后提出（代替第 {} 次修复）。\n\n",
            info.name, p.repair, p.variant, p.attempt, info.name, p.variant, p.attempt, p.repair
        ));
    }
    out.push_str(
        "| Variant / 变体 | Edits / 修改 | PR | State / 状态 |\n| --- | --- | --- | --- |\n",
    );
    for (s, rec) in records {
        let name = match &s.from {
            Some(from) => format!("{} (= {from} + …)", s.name),
            None => s.name.clone(),
        };
        let name = match &s.proposed {
            Some(p) => format!("{name} (repair hook, after {} / 修复钩子提出)", p.variant),
            None => name,
        };
        let name = if s.name == info.name {
            format!("**{name}** (this PR / 本 PR)")
        } else {
            name
        };
        let link = rec
            .as_ref()
            .and_then(|r| Some(format!("[#{}]({})", r.pull?, r.pull_url.clone()?)))
            .unwrap_or_else(|| format!("`{}`", branch_name(s.candidate.as_str())));
        out.push_str(&format!(
            "| {name} | {} | {link} | {} |\n",
            edits(&s.own),
            state_text(rec.as_ref())
        ));
    }
    out.push_str(SECTION_END);
    out
}

/// The experiments section of `body`, markers included, if it has one.
pub fn section_of(body: &str) -> Option<&str> {
    let start = body.find(SECTION_START)?;
    let end = body[start..].find(SECTION_END)?;
    Some(&body[start..start + end + SECTION_END.len()])
}

/// `body` with its experiments section replaced by (or appended as)
/// `section`; other text (other bots', the baseline block) is kept.
pub fn splice_section(body: &str, section: &str) -> String {
    if let Some(start) = body.find(SECTION_START)
        && let Some(end) = body[start..].find(SECTION_END)
    {
        let end = start + end + SECTION_END.len();
        return format!("{}{section}{}", &body[..start], &body[end..]);
    }
    crate::report::insert_before_footer(body, section)
}

#[cfg(test)]
mod tests {
    use super::*;
    use klaud_claims::CandidateId;

    fn resolved(name: &str, from: Option<&str>, own: &[&str], edits: &[&str]) -> ResolvedVariant {
        ResolvedVariant {
            name: name.into(),
            from: from.map(Into::into),
            own: own.iter().map(|s| s.to_string()).collect(),
            edits: edits.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn base() -> Target {
        Target {
            family: "configs/nvidia-master.yaml:k".into(),
            candidate: klaud_claims::CandidateId::new("d92e15065c55779d-0123456789abcdef").unwrap(),
            image: "vllm/vllm-openai:v0.26.0".into(),
            revision: Some("abc".into()),
            clock: None,
            not_release_reason: None,
            upstream: None,
            versions: None,
            variant: None,
        }
    }

    #[test]
    fn variants_get_distinct_stable_ids_in_the_familys_claim() {
        let vs = [
            resolved("A", None, &["set a.b=1"], &["set a.b=1"]),
            resolved("F", Some("A"), &["unset a.c"], &["set a.b=1", "unset a.c"]),
            resolved(
                "I",
                None,
                &["image vllm/vllm-openai:v0.27.0"],
                &["image vllm/vllm-openai:v0.27.0"],
            ),
        ];
        let targets = variant_targets(&base(), "exp", &vs, 2).unwrap();
        let again = variant_targets(&base(), "exp", &vs, 2).unwrap();
        assert_eq!(targets, again);
        let ids: std::collections::BTreeSet<_> =
            targets.iter().map(|t| t.candidate.clone()).collect();
        assert_eq!(ids.len(), 3);
        assert!(
            targets
                .iter()
                .all(|t| t.candidate.family() == base().candidate.family())
        );
        assert!(!ids.contains(&base().candidate));
        assert_eq!(targets[2].image, "vllm/vllm-openai:v0.27.0");
        assert_eq!(
            targets[2].revision, None,
            "another image's provenance is unknown"
        );
        assert_eq!(targets[0].revision.as_deref(), Some("abc"));
        let info = targets[1].variant.as_ref().unwrap();
        assert_eq!(info.siblings.len(), 3);
        assert_eq!(info.others().count(), 2);
        // Another experiment name gives other ids.
        let other = variant_targets(&base(), "exp2", &vs, 2).unwrap();
        assert_ne!(other[0].candidate, targets[0].candidate);
    }

    #[test]
    fn family_patterns_match_whole_families_or_keys() {
        let spec = |p: &str| ExperimentSpec {
            name: "e".into(),
            families: vec![p.into()],
            max_concurrent: 0,
            variants: Vec::new(),
        };
        let f = "configs/nvidia-master.yaml:dsr1-fp4-b200-sglang";
        for yes in [
            "dsr1-*",
            "*-sglang",
            "dsr1-fp4-b200-sglang",
            "configs/nvidia-master.yaml:*",
            "*b200*",
            "*",
        ] {
            assert!(spec(yes).matches(f), "{yes}");
        }
        for no in [
            "dsr1",
            "*-vllm",
            "configs/amd-master.yaml:*",
            "dsr1-*-vllm",
            "configs/*:x",
        ] {
            assert!(!spec(no).matches(f), "{no}");
        }
        assert!(!wildcard("a*a", "a"));
        assert!(wildcard("a*a", "aa"));
        let targets = expand(&base(), &[spec("k")]).unwrap().unwrap();
        assert!(targets.is_empty(), "no variants, no targets");
        assert!(expand(&base(), &[spec("other")]).is_none());
    }

    #[test]
    fn the_title_carries_the_experiment_tags() {
        assert_eq!(
            variant_title(
                "[Klaud Cold] Update k vLLM image to v1 / 将 k 的 vLLM 镜像更新至 v1",
                "Klaud Cold",
                "A"
            ),
            "[Klaud Cold][experiment][Variant A] Update k vLLM image to v1 / 将 k 的 vLLM 镜像更新至 v1"
        );
    }

    #[test]
    fn the_section_lists_every_sibling_and_splices_in_place() {
        let vs = [
            resolved("E", None, &["set a.b=1"], &["set a.b=1"]),
            resolved("F", Some("E"), &["unset a.c"], &["set a.b=1", "unset a.c"]),
        ];
        let targets = variant_targets(&base(), "exp", &vs, 0).unwrap();
        let info = targets[1].variant.clone().unwrap();
        let rows: Vec<(Sibling, Option<CandidateRecord>)> =
            info.siblings.iter().map(|s| (s.clone(), None)).collect();
        let section = render_section(&info, &rows);
        assert!(
            section.contains("Variant F = Variant E plus `unset a.c`"),
            "{section}"
        );
        assert!(
            section.contains("| **F (= E + …)** (this PR / 本 PR) | `unset a.c` |"),
            "{section}"
        );
        assert!(
            section.contains("| E | `set a.b=1` | `klaud/auto-"),
            "{section}"
        );
        let body = "<!-- klaud-baseline -->\nother bot text\n";
        let once = splice_section(body, &section);
        assert!(once.starts_with(body));
        let twice = splice_section(&once, &section.replace("not started", "smoke"));
        assert_eq!(twice.matches(SECTION_START).count(), 1);
        assert!(twice.starts_with(body) && twice.contains("smoke / 未开始"));
    }

    #[test]
    fn a_listed_experiment_rebuilds_each_variant_and_names_a_bad_field() {
        // A distinct id per name: its bytes as the hex digits.
        let id = |name: &str| {
            let n = name.bytes().fold(0u64, |n, b| n << 8 | u64::from(b));
            CandidateId::new(&format!("d92e15065c55779d-{n:016x}")).unwrap()
        };
        let sib = |name: &str, from: Option<&str>, own: &[&str]| Sibling {
            name: name.into(),
            candidate: id(name),
            from: from.map(Into::into),
            own: own.iter().map(|s| s.to_string()).collect(),
            proposed: None,
        };
        let listed = Listed {
            experiment: "try-x".into(),
            base_image: "vllm/vllm-openai:v0.26.0".into(),
            max_concurrent: 2,
            siblings: vec![
                sib("base", None, &[]),
                sib("E", None, &["set a.b=1"]),
                sib("F", Some("E"), &["unset a.c"]),
            ],
        };
        let mut extra = std::collections::BTreeMap::new();
        extra.insert(
            SIBLINGS_FIELD.to_owned(),
            serde_json::to_value(&listed).unwrap(),
        );
        let back = Listed::of_claim(&extra).unwrap().unwrap();
        assert_eq!(back, listed);
        let f = back.info_for(id("F").as_str()).unwrap().unwrap();
        assert_eq!(f.edits, ["set a.b=1", "unset a.c"]);
        assert_eq!(f.siblings.len(), 3);
        assert_eq!(f.max_concurrent, 2);
        assert!(back.info_for("d92e15065c55779d-ffffffffffffffff").is_none());
        assert!(Listed::of_claim(&std::collections::BTreeMap::new()).is_none());
        extra.insert(
            SIBLINGS_FIELD.to_owned(),
            serde_json::json!({"experiment": 3}),
        );
        let err = Listed::of_claim(&extra).unwrap().unwrap_err().to_string();
        assert!(err.contains(SIBLINGS_FIELD), "{err}");
        // A sibling's candidate is checked as an id when read.
        extra.insert(
            SIBLINGS_FIELD.to_owned(),
            serde_json::json!({
                "experiment": "try-x",
                "base_image": "vllm/vllm-openai:v0.26.0",
                "siblings": [{"name": "A", "candidate": "c", "own": []}],
            }),
        );
        let err = Listed::of_claim(&extra).unwrap().unwrap_err().to_string();
        assert!(err.contains("candidate id \"c\""), "{err}");
        let circle = [sib("X", Some("Y"), &[]), sib("Y", Some("X"), &[])];
        assert!(
            effective_edits(&circle, "X")
                .unwrap_err()
                .to_string()
                .contains("circle")
        );
        assert!(
            effective_edits(&circle, "Z")
                .unwrap_err()
                .to_string()
                .contains("no Variant Z")
        );
    }

    #[test]
    fn a_proposed_variant_says_which_attempt_it_answers() {
        let vs = [
            resolved("base", None, &[], &[]),
            resolved("B", None, &["set a.b=1"], &["set a.b=1"]),
        ];
        let targets = variant_targets(&base(), "try-x", &vs, 0).unwrap();
        let mut info = targets[1].variant.clone().unwrap();
        let proposal = Proposal {
            by: info.siblings[0].candidate.clone(),
            variant: "base".into(),
            repair: 1,
            attempt: "Initial smoke attempt".into(),
            run: Some("https://github.com/o/r/actions/runs/7".into()),
        };
        info.siblings[1].proposed = Some(proposal.clone());
        assert!(proposal.answers(&info.siblings[0].candidate, 1));
        assert!(!proposal.answers(&info.siblings[0].candidate, 2));
        assert!(!proposal.answers(&info.siblings[1].candidate, 1));
        let rows: Vec<(Sibling, Option<CandidateRecord>)> =
            info.siblings.iter().map(|s| (s.clone(), None)).collect();
        let section = render_section(&info, &rows);
        assert!(
            section.contains(
                "Variant B was proposed by the repair hook, instead of repair 1, after Variant base's \
                 Initial smoke attempt failed (https://github.com/o/r/actions/runs/7)."
            ),
            "{section}"
        );
        assert!(section.contains("B (repair hook, after base"), "{section}");
        // The base's own PR does not claim to be proposed.
        let mut base_info = info.clone();
        base_info.name = "base".into();
        assert!(!render_section(&base_info, &rows).contains("was proposed"));
        // Listed without the field (an older claim) still parses; with it,
        // it round-trips.
        let old = serde_json::json!({
            "name": "B",
            "candidate": "d92e15065c55779d-0123456789abcdef",
            "own": [],
        });
        let sib: Sibling = serde_json::from_value(old).unwrap();
        assert_eq!(sib.proposed, None);
        let back: Sibling =
            serde_json::from_value(serde_json::to_value(&info.siblings[1]).unwrap()).unwrap();
        assert_eq!(back.proposed, Some(proposal));
    }
}
