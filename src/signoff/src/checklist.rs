//! The PR review checklist: the template at the default branch
//! (`docs/PR_REVIEW_CHECKLIST.md`, the fenced block under `## Template`) and
//! the items of a sign-off, compared item for item.
//!
//! Items are matched by their words, as the prompt asks ("minor wording
//! drift is fine; a missing ITEM is not"): reviewers replace the template's
//! "Please link to …" instruction with the link, so a template item is found
//! when the words of its first sentence, or most of its words, are in one
//! sign-off item.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use regex::Regex;

/// One checkbox item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// The item's text without the checkbox, links reduced to their text.
    pub text: String,
    pub checked: bool,
    /// Nested under another item.
    pub nested: bool,
}

static CHECKBOX: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^(\s*)[-*+]\s+\[([ xX])\]\s+(.*)$").expect("regex"));
static LINK: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\[([^\]]*)\]\([^)]*\)").expect("regex"));
static WORD: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"[a-z0-9][a-z0-9_-]*").expect("regex"));

/// The template's items: the checkboxes of the first fenced block after the
/// `## Template` heading (or of the whole file when it has none).
pub fn template_items(checklist_md: &str) -> Vec<Item> {
    let after_heading = checklist_md
        .find("## Template")
        .map_or(checklist_md, |at| &checklist_md[at..]);
    let block = after_heading
        .split_once("```")
        .and_then(|(_, rest)| rest.split_once("```"))
        .map_or(after_heading, |(inside, _)| inside);
    items(block)
}

/// The checkboxes of a sign-off, up to its additional detail section.
pub fn signoff_items(body: &str) -> Vec<Item> {
    let list = body
        .find("Additional detail section")
        .map_or(body, |at| &body[..at]);
    items(list)
}

/// The sign-off's additional detail section (empty when it has none).
pub fn detail_section(body: &str) -> &str {
    body.find("Additional detail section")
        .map_or("", |at| &body[at..])
}

fn items(text: &str) -> Vec<Item> {
    text.lines()
        .filter_map(|line| {
            let caps = CHECKBOX.captures(line)?;
            Some(Item {
                text: LINK.replace_all(caps[3].trim(), "$1").into_owned(),
                checked: &caps[2] != " ",
                nested: !caps[1].is_empty(),
            })
        })
        .collect()
}

const STOP_WORDS: &[&str] = &[
    "a", "an", "the", "that", "this", "is", "are", "of", "to", "in", "and", "or", "for", "with",
    "it", "i", "have", "has", "be", "as", "on", "by", "at", "any", "its",
];

fn words(text: &str) -> BTreeSet<String> {
    let lower = text.to_lowercase();
    WORD.find_iter(&lower)
        .map(|m| m.as_str().to_owned())
        .filter(|w| !STOP_WORDS.contains(&w.as_str()))
        .collect()
}

fn first_sentence(text: &str) -> &str {
    text.find(". ").map_or(text, |at| &text[..at])
}

fn contained(part: &BTreeSet<String>, whole: &BTreeSet<String>) -> f64 {
    if part.is_empty() {
        return 0.0;
    }
    part.intersection(whole).count() as f64 / part.len() as f64
}

/// How well a sign-off item answers a template item, in `[0, 1]`.
pub fn similarity(template: &str, signed: &str) -> f64 {
    Words::of(template).similarity(&words(signed))
}

/// A template item's words, computed once: a hostile sign-off may carry
/// thousands of items, each compared with every template item.
struct Words {
    head: BTreeSet<String>,
    all: BTreeSet<String>,
}

impl Words {
    fn of(template: &str) -> Self {
        Self {
            head: words(first_sentence(template)),
            all: words(template),
        }
    }

    fn similarity(&self, signed_words: &BTreeSet<String>) -> f64 {
        let head = contained(&self.head, signed_words);
        let smaller = self.all.len().min(signed_words.len()).max(1);
        let overall = self.all.intersection(signed_words).count() as f64 / smaller as f64;
        head.max(overall)
    }
}

/// The least similarity at which a sign-off item counts as the template's.
pub const MATCH_THRESHOLD: f64 = 0.75;

/// The comparison of a sign-off with the template.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Comparison {
    /// Template items with no sign-off item.
    pub missing: Vec<String>,
    /// Template items whose sign-off item is not checked.
    pub unchecked: Vec<String>,
    pub template_count: usize,
    pub signoff_count: usize,
}

impl Comparison {
    pub fn complete(&self) -> bool {
        self.missing.is_empty() && self.unchecked.is_empty() && self.template_count > 0
    }
}

/// Matches each template item to the most similar unused sign-off item.
pub fn compare(template: &[Item], signed: &[Item]) -> Comparison {
    let mut used = vec![false; signed.len()];
    let mut comparison = Comparison {
        template_count: template.len(),
        signoff_count: signed.len(),
        ..Comparison::default()
    };
    let signed_words: Vec<BTreeSet<String>> = signed.iter().map(|s| words(&s.text)).collect();
    for item in template {
        let template_words = Words::of(&item.text);
        let best = signed_words
            .iter()
            .enumerate()
            .filter(|(index, _)| !used[*index])
            .map(|(index, candidate)| (index, template_words.similarity(candidate)))
            .filter(|(_, score)| *score >= MATCH_THRESHOLD)
            .max_by(|a, b| a.1.total_cmp(&b.1));
        match best {
            Some((index, _)) => {
                used[index] = true;
                if !signed[index].checked {
                    comparison.unchecked.push(item.text.clone());
                }
            }
            None => comparison.missing.push(item.text.clone()),
        }
    }
    comparison
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_items_come_from_the_fenced_template_block() {
        let md = "# T\n- [ ] outside\n## Template\n```\nAs a PR reviewer\n- [ ] One thing\n  - [ ] Nested thing\n```\n- [ ] after\n";
        let items = template_items(md);
        assert_eq!(items.len(), 2);
        assert!(items[1].nested);
        assert!(!items[0].checked);
    }

    #[test]
    fn a_link_replacing_the_instruction_still_matches_its_item() {
        let template = "Verified that this PR has passed PR validation. Please link to GitHub Action workflow that shows this.";
        assert!(
            similarity(
                template,
                "Verified that this PR has passed PR validation. Run Sweep #1"
            ) >= MATCH_THRESHOLD
        );
        assert!(
            similarity(template, "Verified that this PR passes evals. Run Sweep #1")
                < MATCH_THRESHOLD
        );
    }

    #[test]
    fn a_missing_and_an_unchecked_item_are_named() {
        let template = items(
            "- [ ] Verified alpha beta gamma\n- [ ] Verified delta epsilon zeta\n- [ ] Verified eta theta iota\n",
        );
        let signed = items("- [x] Verified alpha beta gamma\n- [ ] Verified delta epsilon zeta\n");
        let c = compare(&template, &signed);
        assert_eq!(c.missing, vec!["Verified eta theta iota".to_owned()]);
        assert_eq!(c.unchecked, vec!["Verified delta epsilon zeta".to_owned()]);
        assert!(!c.complete());
    }
}
