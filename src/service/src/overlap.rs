//! Other people's work: which families an open pull request
//! already covers, so Klaud neither duplicates a human's PR nor opens a
//! second PR of its own for a family.
//!
//! Everything is derived from GitHub (the open PRs and their files), never
//! from the journal, so it holds with a fresh store. Cost: one listing of
//! the open PRs per call; the files of a PR are listed once per head commit
//! (cached in the store by head sha) and master files are read by blob sha
//! (content-addressed, cached forever).

use klaud_lifecycle::BoxFuture;
use std::collections::{BTreeMap, BTreeSet};

use klaud_claims::{CandidateId, PullNumber};
use klaud_github::Github;
use klaud_planner::plan::{BlockKind, Blocked};
use klaud_planner::repo::Repository;
use klaud_store::{Record, Store, trees};

use super::wave_adapters::WaveError;

/// Klaud's branch prefix, and the old helper's spelling of it: both mark a
/// PR as a Klaud PR that occupies its family.
pub const BRANCH_PREFIXES: [&str; 2] = [klaud_lifecycle::engine::BRANCH_PREFIX, "klaude/auto-"];

/// The candidate id a Klaud branch names, with either spelling.
pub fn branch_candidate(head_ref: &str) -> Option<CandidateId> {
    BRANCH_PREFIXES
        .iter()
        .find_map(|p| head_ref.strip_prefix(p))
        .and_then(|id| CandidateId::new(id).ok())
}

/// The files of a PR at one head commit (valid forever for that head).
#[derive(serde::Serialize, serde::Deserialize)]
struct CachedFiles {
    /// `(path, status, blob sha)`.
    files: Vec<(String, String, Option<String>)>,
}

impl Record for CachedFiles {
    const VERSION: u32 = 1;
}

async fn pull_files(
    forge: &Github,
    number: u64,
    head: &str,
    cache: Option<&Store>,
) -> Result<Vec<(String, String, Option<String>)>, WaveError> {
    let key = format!("pull-files:{number}:{head}");
    if let Some(store) = cache
        && let Ok(Some(c)) = store.get::<CachedFiles>(trees::CACHE, &key)
    {
        return Ok(c.files);
    }
    let files: Vec<_> = forge
        .pull_files(number)
        .await?
        .into_iter()
        .map(|f| (f.filename, f.status, f.sha))
        .collect();
    if let Some(store) = cache {
        // A miss next time is the only cost of a failed write.
        let _ = store.put(
            trees::CACHE,
            &key,
            &CachedFiles {
                files: files.clone(),
            },
        );
    }
    Ok(files)
}

/// The bytes of the top-level entry `key` of a master file: from its key
/// to the next top-level key (comments and blank lines between belong to
/// the entry before). `None` when the key is absent or the text is not a
/// YAML mapping.
pub fn entry_bytes<'t>(text: &'t str, key: &str) -> Option<&'t str> {
    // Entry by entry, so that another entry's fault does not hide this one;
    // a broken entry still ends the one before it.
    let confined = klaud_planner::yaml::parse_confined(text).ok()?;
    let doc = confined.root?;
    let entries = doc.as_mapping()?;
    let i = entries
        .iter()
        .position(|(k, _)| k.as_scalar() == Some(key))?;
    let start = entries[i].0.start;
    let end = entries
        .iter()
        .map(|(k, _)| k.start)
        .chain(confined.broken.iter().map(|b| b.start))
        .filter(|s| *s > start)
        .min()
        .unwrap_or(text.len());
    text.get(start..end)
}

pub use klaud_lifecycle::wave::OpenPulls;

/// Reads the open PRs onto `base_branch` (see [`OpenPulls`]).
pub fn open_pull_blocks<'f>(
    forge: &'f Github,
    repository: &'f Repository,
    base_branch: &'f str,
    cache: Option<&'f Store>,
) -> BoxFuture<'f, Result<OpenPulls, WaveError>> {
    Box::pin(async move {
        let bot = forge.bot_login().to_owned();
        let prefix = repository.prefix().to_owned();
        let mut out: BTreeMap<String, Blocked> = BTreeMap::new();
        let mut human = Vec::new();
        let mut authors = BTreeMap::new();
        for pull in forge.list_pulls("open").await? {
            if pull.base_ref != base_branch {
                continue;
            }
            if let Some(author) = &pull.author {
                authors.insert(PullNumber::from(pull.number), author.clone());
            }
            let by_bot = pull
                .author
                .as_deref()
                .is_some_and(|a| a.eq_ignore_ascii_case(&bot));
            let legacy = pull.head_ref.starts_with(BRANCH_PREFIXES[1]);
            match branch_candidate(&pull.head_ref) {
                Some(id) if by_bot || legacy => {
                    out.entry(id.family().as_str().to_owned())
                    .or_insert(Blocked {
                        kind: BlockKind::Occupied,
                        reason: format!(
                            "Klaud's PR #{} for candidate {id} is still open (one open PR per family)",
                            pull.number
                        ),
                        pull: Some(pull.number),
                        author: pull.author.clone(),
                    });
                }
                _ => human.push(pull),
            }
        }
        let mut human_of: BTreeMap<String, Blocked> = BTreeMap::new();
        // Oldest human PR first: it is the one the reason names.
        human.sort_by_key(|p| p.number);
        for pull in human {
            let files = pull_files(forge, pull.number, &pull.head_sha, cache).await?;
            let changed: BTreeMap<&str, (&str, Option<&str>)> = files
                .iter()
                .filter_map(|(path, status, sha)| {
                    let rel = path.strip_prefix(&prefix)?;
                    Some((rel, (status.as_str(), sha.as_deref())))
                })
                .collect();
            let mut masters: BTreeMap<&str, Option<String>> = BTreeMap::new();
            for family in repository.families() {
                if human_of.contains_key(&family.id) {
                    continue;
                }
                let recipe = family
                    .recipes
                    .iter()
                    .filter(|r| r.in_repository)
                    .map(|r| r.path.as_str())
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .find(|p| changed.contains_key(p));
                let what = if let Some(recipe) = recipe {
                    Some(format!("changes its recipe {recipe}"))
                } else if let Some((status, sha)) = changed.get(family.file.as_str()) {
                    if !masters.contains_key(family.file.as_str()) {
                        let text = match (*status, sha) {
                            ("removed", _) | (_, None) => None,
                            (_, Some(sha)) => {
                                let bytes = super::wave_adapters::blob(forge, sha, cache).await?;
                                Some(String::from_utf8_lossy(&bytes).into_owned())
                            }
                        };
                        masters.insert(family.file.as_str(), text);
                    }
                    let head_text = masters[family.file.as_str()].as_deref();
                    let base_text =
                        std::fs::read_to_string(repository.root().join(&prefix).join(&family.file))
                            .map_err(|e| WaveError::Checkout(format!("{}: {e}", family.file)))?;
                    let base_entry = entry_bytes(&base_text, &family.key);
                    let head_entry = head_text.and_then(|t| entry_bytes(t, &family.key));
                    (base_entry != head_entry)
                        .then(|| format!("changes its entry {} in {}", family.key, family.file))
                } else {
                    None
                };
                if let Some(what) = what {
                    let author = pull.author.clone().unwrap_or_else(|| "(unknown)".into());
                    human_of.insert(
                        family.id.clone(),
                        Blocked {
                            kind: BlockKind::Duplicate,
                            reason: format!("PR #{} by @{author} {what}", pull.number),
                            pull: Some(pull.number),
                            author: pull.author.clone(),
                        },
                    );
                }
            }
        }
        for (family, b) in &human_of {
            out.entry(family.clone()).or_insert_with(|| b.clone());
        }
        Ok(OpenPulls {
            blocks: out,
            human: human_of,
            authors,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_bytes_run_from_the_key_to_the_next_key() {
        let text = "a:\n  image: x:1\n# about b\nb:\n  image: y:2\n";
        assert_eq!(
            entry_bytes(text, "a"),
            Some("a:\n  image: x:1\n# about b\n")
        );
        assert_eq!(entry_bytes(text, "b"), Some("b:\n  image: y:2\n"));
        assert_eq!(entry_bytes(text, "c"), None);
        assert_eq!(entry_bytes("- a\n- b\n", "a"), None);
        assert_eq!(entry_bytes("a: [\n", "a"), None);
    }

    #[test]
    fn an_entry_is_found_beside_a_broken_one_which_still_ends_it() {
        let text = "a:\n  image: x:1\nbad:\n  k: 1\n  k: 2\nb:\n  image: y:2\n";
        assert_eq!(entry_bytes(text, "a"), Some("a:\n  image: x:1\n"));
        assert_eq!(entry_bytes(text, "b"), Some("b:\n  image: y:2\n"));
        assert_eq!(entry_bytes(text, "bad"), None);
    }

    #[test]
    fn both_branch_spellings_name_a_candidate() {
        let id = "0123456789abcdef-0123456789abcdef";
        for prefix in BRANCH_PREFIXES {
            assert_eq!(
                branch_candidate(&format!("{prefix}{id}")).map(|c| c.to_string()),
                Some(id.to_owned())
            );
        }
        assert!(branch_candidate("feature/bump").is_none());
        assert!(branch_candidate("klaud/auto-not-an-id").is_none());
    }
}
