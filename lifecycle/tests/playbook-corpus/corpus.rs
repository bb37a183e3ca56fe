//! The playbook corpus: job logs written from the symptoms in InferenceX's
//! playbook, near-misses (same words, other cause), and scripts before and
//! after the one expected fix. Shared by the corpus test
//! (`tests/playbook.rs`) and the benchmark (`benches/playbook.rs`).
//!
//! The expected figures come from the manifest alone; the measured ones
//! from triage and the fixes: a case is recognised when its classification
//! (class, entry, node) is exactly the expected one, repaired when the first
//! fix that applies turns its script into the expected one, and a repair is
//! wrong when a fix applies where none is expected or yields another script.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use klaud_lifecycle::playbook::{JobContext, JobLogView, Playbook, Triage, triage};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    #[allow(dead_code)]
    about: String,
    cases: Vec<Case>,
}

/// One case of the manifest.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// The log file, under `logs/`.
    pub log: String,
    /// `symptom`, `near_miss` or `sick_node`.
    pub kind: String,
    /// The entry the case is a symptom or near-miss of.
    pub of: String,
    /// What is known of the job.
    pub context: Context,
    /// The expected classification.
    pub expect: Expect,
    /// The family's script, relative to the corpus.
    #[serde(default)]
    pub script: Option<String>,
    /// The script after the one expected fix (none: no repair expected).
    #[serde(default)]
    pub fixed: Option<String>,
}

/// [`JobContext`] as the manifest writes it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Context {
    #[serde(default)]
    framework: Option<String>,
    #[serde(default)]
    engine_version: Option<String>,
    #[serde(default)]
    hardware: Option<String>,
    #[serde(default)]
    runner_name: Option<String>,
    #[serde(default)]
    family: Option<String>,
}

impl Context {
    pub fn job(&self) -> JobContext {
        JobContext {
            framework: self.framework.clone(),
            engine_version: self.engine_version.clone(),
            hardware: self.hardware.clone(),
            runner_name: self.runner_name.clone(),
            family: self.family.clone(),
        }
    }
}

/// The expected classification.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    pub class: String,
    #[serde(default)]
    pub entry: Option<String>,
    #[serde(default)]
    pub node: Option<String>,
}

/// What the playbook made of one case.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub case: Case,
    pub triage: Triage,
    /// The classification as an [`Expect`].
    pub got: Expect,
    /// The fix applied (described) and the script it produced.
    pub repair: Option<(String, String)>,
    /// The expected script after the fix, read from the corpus.
    pub fixed: Option<String>,
}

impl Outcome {
    pub fn recognised(&self) -> bool {
        self.got == self.case.expect && self.got.class != "unknown"
    }
    pub fn classified_as_expected(&self) -> bool {
        self.got == self.case.expect
    }
    pub fn repaired(&self) -> bool {
        matches!((&self.repair, &self.fixed), (Some((_, text)), Some(want)) if text == want)
    }
    pub fn wrong_repair(&self) -> bool {
        match (&self.repair, &self.fixed) {
            (Some(_), None) => true,
            (Some((_, text)), Some(want)) => text != want,
            _ => false,
        }
    }
}

/// The figures of a run, next to the manifest's own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Figures {
    pub cases: usize,
    pub symptoms: usize,
    pub near_misses: usize,
    pub sick_nodes: usize,
    /// Cases the manifest expects to be recognised (known class).
    pub expected_recognised: usize,
    pub recognised: usize,
    /// Cases the manifest expects a repair for.
    pub expected_repairs: usize,
    pub repaired: usize,
    pub wrong_repairs: usize,
    /// Near-misses classified as anything but what the manifest says.
    pub near_miss_false_positives: usize,
    /// Cases classified otherwise than expected.
    pub misclassified: usize,
}

/// The corpus directory.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/playbook-corpus")
}

/// InferenceX's playbook, as the repository ships it.
pub fn inferencex_playbook() -> Playbook {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/inferencex-playbook.yaml");
    let text = std::fs::read_to_string(&path).expect("configs/inferencex-playbook.yaml");
    Playbook::parse("configs/inferencex-playbook.yaml", &text).unwrap_or_else(|e| panic!("{e}"))
}

pub fn cases() -> Vec<Case> {
    let text = std::fs::read_to_string(dir().join("manifest.json")).expect("manifest.json");
    let manifest: Manifest = serde_json::from_str(&text).expect("manifest.json parses");
    manifest.cases
}

pub fn read(rel: &str) -> String {
    std::fs::read_to_string(dir().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn classification(t: &Triage) -> Expect {
    let node = match t {
        Triage::Infrastructure { node, .. } => node.clone(),
        _ => None,
    };
    Expect {
        class: t.class_name().to_owned(),
        entry: t.entry().map(str::to_owned),
        node,
    }
}

/// The repair Klaud would try first: the matched entry's fixes in order,
/// then the next matching entries', the first that applies.
fn first_repair(playbook: &Playbook, t: &Triage, script: &str) -> Option<(String, String)> {
    let Triage::KnownEngine { entry, next, .. } = t else {
        return None;
    };
    std::iter::once(entry)
        .chain(next)
        .filter_map(|id| playbook.entry(id))
        .flat_map(|e| e.fixes.iter())
        .find_map(|fix| fix.apply(script).ok().map(|a| (fix.describe(), a.text)))
}

pub fn run(playbook: &Playbook, cases: &[Case]) -> Vec<Outcome> {
    cases
        .iter()
        .map(|case| {
            let view = JobLogView::new(&read(&format!("logs/{}", case.log)));
            let t = triage(&view, playbook, &case.context.job());
            let repair = case
                .script
                .as_deref()
                .and_then(|s| first_repair(playbook, &t, &read(s)));
            Outcome {
                case: case.clone(),
                got: classification(&t),
                triage: t,
                repair,
                fixed: case.fixed.as_deref().map(read),
            }
        })
        .collect()
}

/// The manifest's own expectations (independent of the classifier).
pub fn expected(cases: &[Case]) -> Figures {
    Figures {
        cases: cases.len(),
        symptoms: cases.iter().filter(|c| c.kind == "symptom").count(),
        near_misses: cases.iter().filter(|c| c.kind == "near_miss").count(),
        sick_nodes: cases.iter().filter(|c| c.kind == "sick_node").count(),
        expected_recognised: cases.iter().filter(|c| c.expect.class != "unknown").count(),
        recognised: cases.iter().filter(|c| c.expect.class != "unknown").count(),
        expected_repairs: cases.iter().filter(|c| c.fixed.is_some()).count(),
        repaired: cases.iter().filter(|c| c.fixed.is_some()).count(),
        wrong_repairs: 0,
        near_miss_false_positives: 0,
        misclassified: 0,
    }
}

pub fn figures(outcomes: &[Outcome]) -> Figures {
    let cases: Vec<Case> = outcomes.iter().map(|o| o.case.clone()).collect();
    let mut f = expected(&cases);
    f.recognised = outcomes.iter().filter(|o| o.recognised()).count();
    f.repaired = outcomes.iter().filter(|o| o.repaired()).count();
    f.wrong_repairs = outcomes.iter().filter(|o| o.wrong_repair()).count();
    f.near_miss_false_positives = outcomes
        .iter()
        .filter(|o| o.case.kind == "near_miss" && !o.classified_as_expected())
        .count();
    f.misclassified = outcomes
        .iter()
        .filter(|o| !o.classified_as_expected())
        .count();
    f
}

fn pct(n: usize, d: usize) -> String {
    if d == 0 {
        "-".into()
    } else {
        format!("{:.1}%", 100.0 * n as f64 / d as f64)
    }
}

/// The figures as the benchmark prints them, measured next to expected.
pub fn render(f: &Figures, want: &Figures) -> String {
    let row =
        |name: &str, got: String, expected: String| format!("{name:<28} {got:<18} {expected}\n");
    let mut out = format!(
        "playbook corpus: {} cases: {} symptoms, {} near-misses, {} on a sick node\n",
        f.cases, f.symptoms, f.near_misses, f.sick_nodes
    );
    out += &row("", "measured".into(), "expected (manifest)".into());
    out += &row(
        "recognised",
        format!(
            "{}/{} {}",
            f.recognised,
            f.expected_recognised,
            pct(f.recognised, f.expected_recognised)
        ),
        format!("{}/{}", want.recognised, want.expected_recognised),
    );
    out += &row(
        "repaired",
        format!(
            "{}/{} {}",
            f.repaired,
            f.expected_repairs,
            pct(f.repaired, f.expected_repairs)
        ),
        format!("{}/{}", want.repaired, want.expected_repairs),
    );
    out += &row("wrong repairs", f.wrong_repairs.to_string(), "0".into());
    out += &row(
        "near-miss false positives",
        format!("{}/{}", f.near_miss_false_positives, f.near_misses),
        "0".into(),
    );
    out += &row("misclassified", f.misclassified.to_string(), "0".into());
    out
}

/// One line per case, for a failing test or the benchmark's detail.
pub fn describe(o: &Outcome) -> String {
    format!(
        "{:<36} want {:<15} {:<40} got {:<15} {:<40}{}{}",
        o.case.log,
        o.case.expect.class,
        o.case.expect.entry.as_deref().unwrap_or("-"),
        o.got.class,
        o.got.entry.as_deref().unwrap_or("-"),
        o.got
            .node
            .as_deref()
            .map(|n| format!(" node {n}"))
            .unwrap_or_default(),
        match &o.repair {
            Some((fix, _)) if o.repaired() => format!(" repaired: {fix}"),
            Some((fix, _)) => format!(" WRONG REPAIR: {fix}"),
            None if o.fixed.is_some() => " NOT REPAIRED".to_owned(),
            None => String::new(),
        }
    )
}
