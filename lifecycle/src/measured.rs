//! The measured image is the bumped image: every result row of a smoke or
//! final sweep records the image that actually ran (`image`, with its
//! digest in a current InferenceX), and a launcher or an external recipe
//! can run another container than the master's `image` (a fixed squash
//! file, a recipe's own `container`). A run is accepted only when every
//! row shows the PR's image.
//!
//! The rules:
//! - Both sides have a digest: the digests decide (a digest names the
//!   content, whatever tag it was pulled by).
//! - Otherwise the normalized repository and the tag decide
//!   ([`ImageRef::normalized_repository`], so enroot's `nvcr.io#x` and
//!   Docker Hub's implied `docker.io/library/` compare equal).
//! - A row that records no image does not show the PR's image, so it is not
//!   accepted either: Klaud would rather fail a candidate than validate a
//!   PR whose benchmark may have run the old container. A current
//!   InferenceX workflow always records it; an older one that does not
//!   gets a failure that says so.
//! - A mismatch ends the candidate `failed` at once, whatever the run
//!   concluded: it is not an infrastructure failure (a re-run measures the
//!   same container) and not the engine's failure (the repair hook changes
//!   the PR's recipes, not what the launcher runs), so it is neither
//!   retried nor repaired. The report and the receipt name the image that
//!   ran, the family and, where Klaud can see it, the launcher line or
//!   external recipe that chose it.

use std::collections::BTreeMap;

use klaud_planner::image::ImageRef;
use klaud_render::{Bilingual, bi};

use crate::artifacts::BenchmarkRow;

/// Distinct recorded images a note names; the rest are counted.
const MAX_NAMED: usize = 4;

/// Longest recorded image text shown (a row is outside input).
const MAX_SHOWN_CHARS: usize = 200;

/// How the English note starts; [`note_words`] recognises it by this.
const PREFIX: &str = "Measured another image: ";

/// What a run's rows showed about the image that ran, when it is not the
/// PR's image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeasuredMismatch {
    /// The family (`configs/x-master.yaml:key`).
    pub family: String,
    /// The PR's image.
    pub expected: String,
    /// Each other recorded image (as recorded, shortened) and its rows, at
    /// most [`MAX_NAMED`], most rows first.
    pub ran: Vec<(String, usize)>,
    /// Rows of other images not named in `ran`.
    pub more: usize,
    /// Rows that record no image.
    pub without_image: usize,
    /// Rows in the run.
    pub rows: usize,
    /// Where Klaud can see what chose the container (a launcher line, an
    /// external recipe, the launchers the runs used), each one phrase.
    pub chosen_by: Vec<ChosenBy>,
}

/// One place that can choose the container a run measures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChosenBy {
    /// A launcher line that sets a fixed container for the family.
    LauncherPin {
        /// `path:line`.
        at: String,
        /// `VARIABLE=value` as written.
        sets: String,
    },
    /// A recipe kept outside the repository, which may name its own
    /// container.
    ExternalRecipe(String),
    /// A launcher the family's runs use (nothing fixed found in it).
    Launcher(String),
}

/// Whether `recorded` (a result row's `image`) is the image `expected`
/// names: by digest when both have one, else by normalized repository and
/// tag. A recorded text that is not an image reference is not the image.
pub fn same_image(expected: &ImageRef, recorded: &str) -> bool {
    let Ok(ran) = ImageRef::parse(recorded.trim()) else {
        return false;
    };
    if let (Some(a), Some(b)) = (expected.digest(), ran.digest()) {
        return a.eq_ignore_ascii_case(b);
    }
    match (expected.tag(), ran.tag()) {
        (Some(a), Some(b)) => {
            a == b && expected.normalized_repository() == ran.normalized_repository()
        }
        // One side has only a digest the other lacks: nothing to compare.
        _ => false,
    }
}

/// The mismatch of `rows` against the PR's image `expected`, if any row
/// records another image or none. No rows: nothing to judge here (the
/// missing results are judged as such). An `expected` that does not parse
/// (never one Klaud wrote) is compared as text.
pub fn check(
    family: &str,
    expected: &str,
    rows: &[BenchmarkRow],
    chosen_by: Vec<ChosenBy>,
) -> Option<MeasuredMismatch> {
    let parsed = ImageRef::parse(expected).ok();
    let mut others: BTreeMap<String, usize> = BTreeMap::new();
    let mut without_image = 0;
    for row in rows {
        match row.identity().image.as_deref().map(str::trim) {
            None | Some("") => without_image += 1,
            Some(image) => {
                let same = match &parsed {
                    Some(e) => same_image(e, image),
                    None => image == expected,
                };
                if !same {
                    *others.entry(shown(image)).or_default() += 1;
                }
            }
        }
    }
    if others.is_empty() && without_image == 0 {
        return None;
    }
    let mut ran: Vec<(String, usize)> = others.into_iter().collect();
    ran.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let more = ran.iter().skip(MAX_NAMED).map(|(_, n)| n).sum();
    ran.truncate(MAX_NAMED);
    Some(MeasuredMismatch {
        family: family.to_owned(),
        expected: expected.to_owned(),
        ran,
        more,
        without_image,
        rows: rows.len(),
        chosen_by,
    })
}

/// A recorded text made safe to quote: one line, no `"`, bounded.
fn shown(text: &str) -> String {
    let mut out: String = text
        .chars()
        .map(|c| if c == '"' || c.is_control() { '\'' } else { c })
        .take(MAX_SHOWN_CHARS)
        .collect();
    if text.chars().count() > MAX_SHOWN_CHARS {
        out.push('…');
    }
    out
}

fn quoted(text: &str) -> String {
    format!("\"{}\"", shown(text))
}

impl MeasuredMismatch {
    /// The notes of the attempt report, in English, one sentence each (a
    /// published note is cut at `MAX_FIELD_CHARS`): the images the rows
    /// record, the rows with none, the family and what chose its
    /// container, and what follows. Every outside text is in double
    /// quotes, which [`note_words`] leaves as is.
    pub fn notes(&self) -> Vec<String> {
        let expected = quoted(&self.expected);
        let mut out: Vec<String> = self
            .ran
            .iter()
            .map(|(image, n)| {
                format!(
                    "{PREFIX}{} in {n}/{} result rows, not the PR image {expected}.",
                    quoted(image),
                    self.rows
                )
            })
            .collect();
        if self.more > 0 {
            out.push(format!(
                "{PREFIX}other images in {}/{} result rows.",
                self.more, self.rows
            ));
        }
        if self.without_image > 0 {
            out.push(format!(
                "{PREFIX}{}/{} result rows record no image, so they do not show the PR image {expected}.",
                self.without_image, self.rows
            ));
        }
        let family = format!("{PREFIX}family {}", quoted(&self.family));
        if self.chosen_by.is_empty() {
            out.push(format!("{family}."));
        }
        for c in &self.chosen_by {
            out.push(match c {
                ChosenBy::LauncherPin { at, sets } => format!(
                    "{family}, chosen by launcher {}, which sets {}.",
                    quoted(at),
                    quoted(sets)
                ),
                ChosenBy::ExternalRecipe(r) => format!(
                    "{family}, chosen by the external recipe {}, kept outside the repository, which may name its own container.",
                    quoted(r)
                ),
                ChosenBy::Launcher(l) => format!("{family}, run by launcher {}.", quoted(l)),
            });
        }
        out.push(format!("{PREFIX}{TAIL}"));
        out
    }

    /// The receipt's one note (cut at `MAX_FIELD_CHARS` when published):
    /// the family by its key, the image most rows record, and the launcher
    /// line or recipe that chose it when Klaud saw one.
    pub fn receipt_note(&self) -> String {
        let key = self
            .family
            .rsplit_once(':')
            .map_or(self.family.as_str(), |(_, k)| k);
        let mut out = format!("{PREFIX}family {}", quoted(key));
        match self.ran.first() {
            Some((image, n)) => out.push_str(&format!(
                " ran {} in {n}/{} result rows, not the PR image",
                quoted(image),
                self.rows
            )),
            None => out.push_str(&format!(
                ": {}/{} result rows record no image",
                self.without_image, self.rows
            )),
        }
        match self.chosen_by.first() {
            Some(ChosenBy::LauncherPin { at, .. }) => {
                out.push_str(&format!("; chosen by launcher {}", quoted(at)));
            }
            Some(ChosenBy::ExternalRecipe(r)) => {
                out.push_str(&format!("; chosen by the external recipe {}", quoted(r)));
            }
            Some(ChosenBy::Launcher(_)) | None => {}
        }
        out.push('.');
        out
    }
}

const TAIL: &str = "Klaud does not validate this run nor send it to the repair hook; make the launcher or recipe run the master's image.";

/// The fixed phrases of the notes and their Chinese, in the order they
/// are replaced (a phrase before any shorter one it contains).
const PHRASES: &[Bilingual] = &[
    bi!(PREFIX, "测得的是另一个镜像："),
    bi!(
        TAIL,
        "Klaud 不验证此次运行，也不将其交给修复钩子；请让启动脚本或配方运行主配置中的镜像。"
    ),
    bi!(
        " result rows record no image, so they do not show the PR image ",
        " 个结果行未记录镜像，无法表明运行的是 PR 镜像 "
    ),
    bi!(" result rows record no image", " 个结果行未记录镜像"),
    bi!(
        " result rows, not the PR image ",
        " 个结果行中，而非 PR 镜像 "
    ),
    bi!(
        " result rows, not the PR image",
        " 个结果行中，而非 PR 镜像"
    ),
    bi!(" result rows.", " 个结果行中。"),
    bi!("other images in ", "其他镜像出现在 "),
    bi!(" in ", "，出现在 "),
    bi!(" ran ", " 运行的是 "),
    bi!(", chosen by launcher ", "，选择该容器的是启动脚本 "),
    bi!("; chosen by launcher ", "；选择该容器的是启动脚本 "),
    bi!(", which sets ", "，它设置了 "),
    bi!(
        ", chosen by the external recipe ",
        "，选择该容器的可能是仓库外的配方 "
    ),
    bi!(
        "; chosen by the external recipe ",
        "；选择该容器的可能是仓库外的配方 "
    ),
    bi!(
        ", kept outside the repository, which may name its own container.",
        "（它可以自行指定容器）。"
    ),
    bi!(", run by launcher ", "，运行所用的启动脚本为 "),
    bi!("family ", "系列 "),
    bi!(": ", "："),
    bi!(".", "。"),
];

/// A note made by [`MeasuredMismatch::notes`] or
/// [`MeasuredMismatch::receipt_note`] in both languages; `None` for any
/// other note. Only the text outside double quotes is translated.
pub fn note_words(note: &str) -> Option<Bilingual> {
    if !note.starts_with(PREFIX) {
        return None;
    }
    let mut out = String::new();
    for (i, part) in note.split('"').enumerate() {
        if i % 2 == 1 {
            out.push('"');
            out.push_str(part);
            out.push('"');
            continue;
        }
        let mut zh = part.to_owned();
        for phrase in PHRASES {
            zh = zh.replace(&*phrase.en, &phrase.zh);
        }
        out.push_str(&zh);
    }
    Some(Bilingual::owned(note, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zh_note(note: &str) -> Option<String> {
        note_words(note).map(|w| w.zh.into_owned())
    }
    use crate::artifacts::{FixedSeqRow, PointIdentity, PointMetrics};

    const D1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const D2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    fn image(s: &str) -> ImageRef {
        ImageRef::parse(s).unwrap()
    }

    fn row(image: Option<&str>) -> BenchmarkRow {
        BenchmarkRow::FixedSeqLen(FixedSeqRow {
            conc: 4,
            identity: PointIdentity {
                image: image.map(str::to_owned),
                ..Default::default()
            },
            metrics: PointMetrics {
                tput_per_gpu: 1.0,
                output_tput_per_gpu: 1.0,
                mean_ttft: 1.0,
                mean_tpot: 1.0,
            },
            extra: Default::default(),
        })
    }

    #[test]
    fn digests_decide_when_both_sides_have_one() {
        let pr = image(&format!("lmsysorg/sglang:v0.5.9@{D1}"));
        assert!(same_image(&pr, &format!("lmsysorg/sglang:v0.5.9@{D1}")));
        // Same content pulled by another tag or spelling.
        assert!(same_image(
            &pr,
            &format!("docker.io/lmsysorg/sglang:latest@{D1}")
        ));
        // Same tag, other content: the tag moved, another build ran.
        assert!(!same_image(&pr, &format!("lmsysorg/sglang:v0.5.9@{D2}")));
    }

    #[test]
    fn the_tag_decides_when_a_side_has_no_digest() {
        let pr = image(&format!("nvcr.io#nvidia/tensorrt-llm/release:1.3.0@{D1}"));
        assert!(same_image(&pr, "nvcr.io/nvidia/tensorrt-llm/release:1.3.0"));
        assert!(!same_image(
            &pr,
            "nvcr.io/nvidia/tensorrt-llm/release:1.2.0"
        ));
        assert!(!same_image(
            &pr,
            "ghcr.io/nvidia/tensorrt-llm/release:1.3.0"
        ));
        let pr = image("ubuntu:24.04");
        assert!(same_image(&pr, "docker.io/library/ubuntu:24.04"));
        assert!(same_image(&pr, &format!("ubuntu:24.04@{D2}")));
        assert!(!same_image(&pr, &format!("ubuntu@{D2}")));
        // Outside text that is no image reference at all.
        for bad in ["", " ", "not an image", "a:b:c:d@x", &"x".repeat(5000)] {
            assert!(!same_image(&pr, bad), "{bad:?}");
        }
    }

    #[test]
    fn every_row_must_record_the_prs_image() {
        let pr = format!("lmsysorg/sglang:v0.5.9-cu130@{D1}");
        let good = row(Some(&pr));
        assert_eq!(check("f", &pr, &[good.clone(), good.clone()], vec![]), None);
        assert_eq!(check("f", &pr, &[], vec![]), None);
        let old = row(Some("lmsysorg/sglang:v0.5.8-cu130"));
        let m = check(
            "f",
            &pr,
            &[good.clone(), old.clone(), old, row(None)],
            vec![],
        )
        .expect("mismatch");
        assert_eq!(m.ran, vec![("lmsysorg/sglang:v0.5.8-cu130".to_owned(), 2)]);
        assert_eq!((m.without_image, m.rows, m.more), (1, 4, 0));
        let m = check("f", &pr, &[good, row(Some(""))], vec![]).expect("no image");
        assert!(m.ran.is_empty());
        assert_eq!(m.without_image, 1);
    }

    /// The text outside quotes has no English left but `Klaud` and `PR`.
    fn all_translated(zh: &str) {
        for (i, part) in zh.split('"').enumerate() {
            if i % 2 == 1 {
                continue;
            }
            let english: Vec<&str> = part
                .split(|c: char| !c.is_ascii_alphabetic())
                .filter(|w| w.len() > 1 && *w != "Klaud" && *w != "PR")
                .collect();
            assert!(english.is_empty(), "{english:?} left in {zh}");
        }
    }

    #[test]
    fn the_notes_name_the_image_the_family_and_the_launcher_in_both_languages() {
        let pr = "lmsysorg/sglang:v0.5.9-cu130";
        let m = check(
            "configs/nvidia-master.yaml:dsr1-fp8-h100-dynamo-sglang",
            pr,
            &[row(Some("lmsysorg/sglang:v0.5.8-cu130")), row(None)],
            vec![
                ChosenBy::LauncherPin {
                    at: "runners/launch_h100-dgxc-slurm.sh:85".into(),
                    sets: "SQUASH_FILE=/mnt/x.sqsh".into(),
                },
                ChosenBy::ExternalRecipe("recipes/h100/x.yaml".into()),
                ChosenBy::Launcher("runners/launch_a.sh".into()),
            ],
        )
        .unwrap();
        let notes = m.notes();
        assert_eq!(
            notes,
            vec![
                "Measured another image: \"lmsysorg/sglang:v0.5.8-cu130\" in 1/2 result rows, not the PR image \"lmsysorg/sglang:v0.5.9-cu130\".",
                "Measured another image: 1/2 result rows record no image, so they do not show the PR image \"lmsysorg/sglang:v0.5.9-cu130\".",
                "Measured another image: family \"configs/nvidia-master.yaml:dsr1-fp8-h100-dynamo-sglang\", chosen by launcher \"runners/launch_h100-dgxc-slurm.sh:85\", which sets \"SQUASH_FILE=/mnt/x.sqsh\".",
                "Measured another image: family \"configs/nvidia-master.yaml:dsr1-fp8-h100-dynamo-sglang\", chosen by the external recipe \"recipes/h100/x.yaml\", kept outside the repository, which may name its own container.",
                "Measured another image: family \"configs/nvidia-master.yaml:dsr1-fp8-h100-dynamo-sglang\", run by launcher \"runners/launch_a.sh\".",
                "Measured another image: Klaud does not validate this run nor send it to the repair hook; make the launcher or recipe run the master's image.",
            ]
        );
        let zh: Vec<String> = notes.iter().map(|n| zh_note(n).unwrap()).collect();
        assert_eq!(
            zh[0],
            "测得的是另一个镜像：\"lmsysorg/sglang:v0.5.8-cu130\"，出现在 1/2 个结果行中，而非 PR 镜像 \"lmsysorg/sglang:v0.5.9-cu130\"。"
        );
        assert_eq!(
            zh[2],
            "测得的是另一个镜像：系列 \"configs/nvidia-master.yaml:dsr1-fp8-h100-dynamo-sglang\"，选择该容器的是启动脚本 \"runners/launch_h100-dgxc-slurm.sh:85\"，它设置了 \"SQUASH_FILE=/mnt/x.sqsh\"。"
        );
        for z in &zh {
            all_translated(z);
        }
        let receipt = m.receipt_note();
        assert_eq!(
            receipt,
            "Measured another image: family \"dsr1-fp8-h100-dynamo-sglang\" ran \"lmsysorg/sglang:v0.5.8-cu130\" in 1/2 result rows, not the PR image; chosen by launcher \"runners/launch_h100-dgxc-slurm.sh:85\"."
        );
        all_translated(&zh_note(&receipt).unwrap());
        let none = check(
            "f:k",
            pr,
            &[row(None)],
            vec![ChosenBy::ExternalRecipe("r".into())],
        )
        .unwrap();
        all_translated(&zh_note(&none.receipt_note()).unwrap());
        for n in none.notes() {
            all_translated(&zh_note(&n).unwrap());
        }
        assert_eq!(zh_note("Run conclusion: failure."), None);
    }

    #[test]
    fn hostile_recorded_images_are_bounded_and_quoted() {
        let pr = "repo/x:1";
        let weird = format!("\"evil\" (1/1 rows){}", "é".repeat(1000));
        let rows: Vec<BenchmarkRow> = (0..10)
            .map(|i| row(Some(&format!("repo/x:{i}0"))))
            .chain([row(Some(&weird))])
            .collect();
        let m = check("f", pr, &rows, vec![]).unwrap();
        assert_eq!(m.ran.len(), MAX_NAMED);
        assert_eq!(m.more, 11 - MAX_NAMED);
        let notes = m.notes();
        assert!(notes.len() <= MAX_NAMED + 4, "{notes:?}");
        all_translated(&zh_note(&notes[MAX_NAMED]).unwrap());
        let m = check("f", pr, &[row(Some(&weird))], vec![]).unwrap();
        let note = m.notes().remove(0);
        assert!(!note.contains("\"evil\""), "{note}");
        assert!(note.contains('…'));
        let _ = zh_note(&note).unwrap();
        let _ = zh_note(&m.receipt_note()).unwrap();
    }
}
