//! Which version of the sign-off contract the default branch carries, and
//! which checks (in which order, under which names) that version has.
//!
//! The version is read from the verifier prompt at the default branch
//! (`.github/codeowner-signoff-verify-prompt.md`): its `## Check N — …`
//! headings are the specification, and the highest number says the version
//! (10: the 11 checks of mirror commit 7abe6612, 12: 843c6254, 15: the newer
//! prompt whose publisher adds the marker and the assessed-commit footer).

use std::sync::LazyLock;

use regex::Regex;
use serde::Serialize;

/// What one check is about; the same check has different numbers across
/// versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CheckKind {
    Codeowner,
    PassingSweep,
    Evals,
    RecipeLink,
    ReuseCommand,
    LatestChecklist,
    UpstreamImages,
    DeprecatedModels,
    ArchitectureHacks,
    ChatTemplates,
    EnginePatches,
    AgenticGoldenAl,
    AppendOnly,
    DraftAsShipped,
    ParetoCoverage,
    PrDescription,
}

impl CheckKind {
    /// The short name in the verdict row (the seed's verdicts and the newer
    /// prompt's examples).
    pub fn name(self) -> &'static str {
        match self {
            CheckKind::Codeowner => "CODEOWNER",
            CheckKind::PassingSweep => "Passing sweep on in-PR commit",
            CheckKind::Evals => "Evals pass",
            CheckKind::RecipeLink => "Recipe link",
            CheckKind::ReuseCommand => "Reuse command",
            CheckKind::LatestChecklist => "Latest checklist",
            CheckKind::UpstreamImages => "Upstream images / engine-first",
            CheckKind::DeprecatedModels => "Deprecated models",
            CheckKind::ArchitectureHacks => "No architecture hacks",
            CheckKind::ChatTemplates => "Spec-decode chat templates",
            CheckKind::EnginePatches => "No engine patches",
            CheckKind::AgenticGoldenAl => "Agentic golden AL",
            CheckKind::AppendOnly => "Append-only",
            CheckKind::DraftAsShipped => "Draft runs as shipped",
            CheckKind::ParetoCoverage => "Pareto coverage",
            CheckKind::PrDescription => "PR description",
        }
    }
}

/// A version of the repository's sign-off contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ContractVersion {
    /// Checks 0-10 (mirror commit 7abe6612, the seed's numbering); the
    /// verifier posts one comment marked with the head SHA.
    Checks0To10,
    /// Checks 0-12 (mirror commit 843c6254): adds deprecated models and
    /// append-only; same marker.
    Checks0To12,
    /// Checks 0-15 (newer): draft as shipped, Pareto coverage and PR
    /// description; WARN header, details group, sign-off keyed marker and
    /// the assessed-commit footer.
    Checks0To15,
}

static CHECK_HEADING: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?m)^##\s+Check\s+(\d+)\b").expect("regex"));

impl ContractVersion {
    /// Reads the version from the prompt's check headings; `None` when the
    /// prompt is missing or numbers its checks in a way Klaud does not know.
    pub fn detect(prompt: Option<&str>) -> Option<Self> {
        let prompt = prompt?;
        let highest = CHECK_HEADING
            .captures_iter(prompt)
            .filter_map(|c| c[1].parse::<u32>().ok())
            .max()?;
        match highest {
            10 => Some(ContractVersion::Checks0To10),
            12 => Some(ContractVersion::Checks0To12),
            15 => Some(ContractVersion::Checks0To15),
            _ => None,
        }
    }

    /// The checks in row order; the index is the check number.
    pub fn checks(self) -> &'static [CheckKind] {
        use CheckKind::*;
        match self {
            ContractVersion::Checks0To10 => &[
                Codeowner,
                PassingSweep,
                Evals,
                RecipeLink,
                ReuseCommand,
                LatestChecklist,
                UpstreamImages,
                ArchitectureHacks,
                ChatTemplates,
                EnginePatches,
                AgenticGoldenAl,
            ],
            ContractVersion::Checks0To12 => &[
                Codeowner,
                PassingSweep,
                Evals,
                RecipeLink,
                ReuseCommand,
                LatestChecklist,
                UpstreamImages,
                DeprecatedModels,
                ArchitectureHacks,
                ChatTemplates,
                EnginePatches,
                AgenticGoldenAl,
                AppendOnly,
            ],
            ContractVersion::Checks0To15 => &[
                Codeowner,
                PassingSweep,
                Evals,
                RecipeLink,
                ReuseCommand,
                LatestChecklist,
                UpstreamImages,
                DeprecatedModels,
                ArchitectureHacks,
                ChatTemplates,
                EnginePatches,
                AgenticGoldenAl,
                AppendOnly,
                DraftAsShipped,
                ParetoCoverage,
                PrDescription,
            ],
        }
    }

    /// Whether the version's publisher keeps only failing and warning rows
    /// in view and folds the rest into a `<details>` group.
    pub fn has_details_group(self) -> bool {
        self == ContractVersion::Checks0To15
    }

    /// Whether Check 3 requires the linked upstream recipe MERGED (a pull
    /// request's state, or a published page); the 0-10 contract asks only
    /// for a link whose arguments match.
    pub fn recipe_must_be_merged(self) -> bool {
        self != ContractVersion::Checks0To10
    }

    /// Whether Check 3 covers every vLLM/SGLang serving topology (the newer
    /// contract: multi-node, disaggregated and Dynamo are no exemption).
    pub fn recipe_covers_all_topologies(self) -> bool {
        self == ContractVersion::Checks0To15
    }

    /// Whether the sign-off scope leaves out the organisation's `core` team
    /// and repository admins as owners (the newer workflow's scope step:
    /// a path they alone own needs no sign-off).
    pub fn scope_skips_core_and_admins(self) -> bool {
        self == ContractVersion::Checks0To15
    }

    /// Whether a missing reuse command only warns (the newer prompt: Check 4
    /// may WARN but never FAIL).
    pub fn reuse_is_advisory(self) -> bool {
        self == ContractVersion::Checks0To15
    }
}
