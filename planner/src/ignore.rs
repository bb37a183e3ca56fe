//! What maintainers told Klaud to leave alone.
//!
//! Three sources feed one list: the configuration's ignore rules, boxes
//! ticked on the dashboard issue, and Klaud PRs a person closed ("not this
//! image"). Each rule keeps its reason and source, so the plan, the
//! dashboard and a receipt can say why a family was not bumped and how to
//! undo it. The plan consults the list twice: before asking the registry
//! (a whole family, or an image repository the family runs: nothing to ask)
//! and after choosing a candidate (one image: the family is bumped again
//! when a newer one appears, because the newer one is the candidate then).

use crate::glob::Wildcard;
use crate::image::ImageRef;

/// What a rule leaves alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IgnoreTarget {
    /// Families whose `<master path>:<key>`, key or id matches the `*`
    /// pattern: never bumped.
    Family(String),
    /// Every tag of an image repository, normalized as
    /// [`ImageRef::normalized_repository`] spells it (`lmsysorg/sglang`,
    /// `nvcr.io/nvidia/sglang`): families running it are never bumped.
    Repository(String),
    /// Tags of a repository matching the `*` pattern, for every family:
    /// such a tag is never proposed.
    Tag {
        /// Normalized repository.
        repository: String,
        /// Tag pattern.
        tag: String,
    },
    /// One image for one family (its id): that image is never proposed for
    /// it again; a newer one is.
    FamilyImage {
        /// The family id (for a family group, the id every member's claim
        /// uses).
        family: String,
        /// The normalized image without its digest (`repository:tag`).
        image: String,
    },
}

/// Who made a rule, which also says how to undo it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IgnoreSource {
    /// The configuration file.
    Config,
    /// A box ticked on the dashboard issue, by this login.
    Dashboard {
        /// Who ticked it.
        by: String,
    },
    /// The dashboard issue, where maintainers record ignores, could not be
    /// read this pass: the rule holds every family until it reads again.
    DashboardUnread,
    /// A Klaud PR closed without merging, by this login.
    ClosedPull {
        /// The PR.
        number: u64,
        /// Who closed it.
        by: String,
    },
}

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IgnoreRule {
    /// What it leaves alone.
    pub target: IgnoreTarget,
    /// Why, in the words of whoever made it (shown on the dashboard and in
    /// `klaud plan`).
    pub reason: String,
    /// Who made it.
    pub source: IgnoreSource,
}

impl IgnoreRule {
    /// One line for a plan's reasons: what is ignored, why and by whom.
    pub fn describe(&self) -> String {
        let what = match &self.target {
            IgnoreTarget::Family(pattern) => format!("family `{pattern}`"),
            IgnoreTarget::Repository(repository) => format!("image repository `{repository}`"),
            IgnoreTarget::Tag { repository, tag } => format!("tags `{repository}:{tag}`"),
            IgnoreTarget::FamilyImage { image, .. } => format!("image `{image}` for this family"),
        };
        let by = match &self.source {
            IgnoreSource::Config => "the configuration".to_owned(),
            IgnoreSource::Dashboard { by } => format!("@{by} on the dashboard issue"),
            IgnoreSource::ClosedPull { number, by } => format!("@{by} closing #{number}"),
            IgnoreSource::DashboardUnread => return format!("held: {}", self.reason),
        };
        if self.reason.is_empty() {
            format!("ignored: {what} (by {by})")
        } else {
            format!("ignored: {what} (by {by}): {}", self.reason)
        }
    }
}

/// Every rule in force, each target compiled once.
#[derive(Debug, Clone, Default)]
pub struct IgnoreRules {
    rules: Vec<(IgnoreRule, Option<Wildcard>)>,
}

impl IgnoreRules {
    /// The rules, patterns compiled.
    pub fn new(rules: impl IntoIterator<Item = IgnoreRule>) -> Self {
        Self {
            rules: rules
                .into_iter()
                .map(|rule| {
                    let pattern = match &rule.target {
                        IgnoreTarget::Family(pattern) => Some(Wildcard::new(pattern)),
                        IgnoreTarget::Tag { tag, .. } => Some(Wildcard::new(tag)),
                        IgnoreTarget::Repository(_) | IgnoreTarget::FamilyImage { .. } => None,
                    };
                    (rule, pattern)
                })
                .collect(),
        }
    }

    /// Whether there is no rule.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rules, in the order given.
    pub fn iter(&self) -> impl Iterator<Item = &IgnoreRule> {
        self.rules.iter().map(|(rule, _)| rule)
    }

    /// The first rule that leaves the whole family alone: its name, key or
    /// id matches a family pattern, or it runs an ignored repository.
    pub fn family(&self, family: &crate::repo::Family) -> Option<&IgnoreRule> {
        let repository = family.image().normalized_repository();
        self.rules.iter().find_map(|(rule, pattern)| {
            let hit = match (&rule.target, pattern) {
                (IgnoreTarget::Family(_), Some(pattern)) => {
                    pattern.is_match(&family.family)
                        || pattern.is_match(&family.key)
                        || pattern.is_match(&family.id)
                }
                (IgnoreTarget::Repository(ignored), _) => *ignored == repository,
                _ => false,
            };
            hit.then_some(rule)
        })
    }

    /// The first rule that forbids proposing `candidate` to the family
    /// `family_id`.
    pub fn candidate(&self, family_id: &str, candidate: &ImageRef) -> Option<&IgnoreRule> {
        let repository = candidate.normalized_repository();
        let tag = candidate.tag().unwrap_or_default();
        self.rules.iter().find_map(|(rule, pattern)| {
            let hit = match (&rule.target, pattern) {
                (IgnoreTarget::Repository(ignored), _) => *ignored == repository,
                (IgnoreTarget::Tag { repository: r, .. }, Some(pattern)) => {
                    *r == repository && pattern.is_match(tag)
                }
                (IgnoreTarget::FamilyImage { family, image }, _) => {
                    family == family_id && *image == format!("{repository}:{tag}")
                }
                _ => false,
            };
            hit.then_some(rule)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(target: IgnoreTarget) -> IgnoreRule {
        IgnoreRule {
            target,
            reason: "waiting for the fix".into(),
            source: IgnoreSource::Config,
        }
    }

    fn image(text: &str) -> ImageRef {
        ImageRef::parse(text).expect("test image parses")
    }

    #[test]
    fn a_family_image_rule_forbids_that_image_for_that_family_only() {
        let rules = IgnoreRules::new([rule(IgnoreTarget::FamilyImage {
            family: "abc".into(),
            image: "lmsysorg/sglang:v0.5.6".into(),
        })]);
        let ignored = image(&format!(
            "docker.io/lmsysorg/sglang:v0.5.6@sha256:{}",
            "0".repeat(64)
        ));
        assert!(rules.candidate("abc", &ignored).is_some());
        assert!(rules.candidate("other", &ignored).is_none());
        assert!(
            rules
                .candidate("abc", &image("lmsysorg/sglang:v0.5.7"))
                .is_none(),
            "a newer image is proposed again"
        );
    }

    #[test]
    fn tag_patterns_match_only_their_repository() {
        let rules = IgnoreRules::new([rule(IgnoreTarget::Tag {
            repository: "nvcr.io/nvidia/sglang".into(),
            tag: "*-rc*".into(),
        })]);
        assert!(
            rules
                .candidate("f", &image("nvcr.io#nvidia/sglang:25.10-rc1"))
                .is_some()
        );
        assert!(
            rules
                .candidate("f", &image("nvcr.io/nvidia/sglang:25.10"))
                .is_none()
        );
        assert!(
            rules
                .candidate("f", &image("lmsysorg/sglang:25.10-rc1"))
                .is_none()
        );
    }

    #[test]
    fn describe_names_the_target_the_source_and_the_reason() {
        let closed = IgnoreRule {
            target: IgnoreTarget::FamilyImage {
                family: "abc".into(),
                image: "vllm/vllm-openai:v0.11.0".into(),
            },
            reason: String::new(),
            source: IgnoreSource::ClosedPull {
                number: 12,
                by: "alice".into(),
            },
        };
        assert_eq!(
            closed.describe(),
            "ignored: image `vllm/vllm-openai:v0.11.0` for this family (by @alice closing #12)"
        );
        assert_eq!(
            rule(IgnoreTarget::Repository("rocm/atom-dev".into())).describe(),
            "ignored: image repository `rocm/atom-dev` (by the configuration): waiting for the fix"
        );
    }
}
