//! The byte-exact image bump: "set the image of family F from OLD to NEW".
//!
//! Only the image tokens change: the master entry's `image` and, in the
//! family's in-repository recipe files, the image fields that carry the same
//! (normalized) image. Every other byte stays. The edit is computed in memory
//! and checked by re-parsing before anything is written; writing is all files
//! or none.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::image::ImageRef;
use crate::repo::{self, Family, RepoError, Repository};

use crate::yaml::{self, Node};

/// Why a bump was refused. Nothing has been written when this is returned.
#[derive(Debug, thiserror::Error)]
pub enum BumpError {
    /// Reading the repository failed.
    #[error(transparent)]
    Repo(#[from] RepoError),
    /// The current value is not the expected old image.
    #[error(
        "{path}:{line}: {field} is {found:?}, expected {expected:?}; the file changed since it was planned — re-plan"
    )]
    NotOld {
        path: String,
        line: usize,
        field: String,
        expected: String,
        found: String,
    },
    /// A value Klaud must not or cannot edit.
    #[error("{path}:{line}: {field}: {reason}")]
    Uneditable {
        path: String,
        line: usize,
        field: String,
        reason: String,
    },
    /// Families share recipes but run different images: one bump cannot
    /// keep every one of them consistent.
    #[error(
        "{family} shares {path} with other families that run different images: {members}. Align them first: \
         re-run with --align (or `[bump] disagreeing_recipes = \"align\"`) to move all of them to the new image \
         in one commit, or set their master `image:` values to one image by hand"
    )]
    MixedGroup {
        family: String,
        path: String,
        members: String,
    },
    /// A recipe the family runs should be in the repository but is not.
    #[error(
        "{master}:{line}: {family}: {setting} names {path}, which is not in the repository; \
         add the file or fix the setting (or its [[recipe_roots]] mapping)"
    )]
    MissingRecipe {
        family: String,
        master: String,
        line: usize,
        setting: String,
        path: String,
    },
    /// The edited text did not re-parse to exactly the intended change.
    #[error("{path}: the edit did not re-parse as intended ({reason}); nothing was written")]
    Verify { path: String, reason: String },
    /// The new image equals the old one.
    #[error("the family already uses {image}; nothing to bump")]
    Unchanged { image: String },
    /// A file changed on disk between planning and writing.
    #[error("{path} changed on disk since the bump was planned; nothing was written — re-run")]
    Concurrent { path: String },
    /// Writing failed (temporary files were removed).
    #[error("{path}: cannot write: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// What to do with a recipe image field that carries another image than
/// the family's master (configuration `[bump] disagreeing_recipes`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DisagreePolicy {
    /// Leave it as it is, with a warning (the default).
    #[default]
    Leave,
    /// Set it to the new image too, as maintainers did by hand.
    Align,
}

/// A [`DisagreePolicy`] that is neither `leave` nor `align`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not \"leave\" or \"align\"")]
pub struct UnknownPolicy(pub String);

impl std::str::FromStr for DisagreePolicy {
    type Err = UnknownPolicy;
    fn from_str(text: &str) -> Result<Self, UnknownPolicy> {
        match text {
            "leave" => Ok(Self::Leave),
            "align" => Ok(Self::Align),
            other => Err(UnknownPolicy(other.to_owned())),
        }
    }
}

/// How a bump treats what does not simply carry the old image.
#[derive(Debug, Clone, Default)]
pub struct BumpOptions {
    /// Recipe image fields that disagree with the master.
    pub disagreeing: DisagreePolicy,
}

/// Why a token changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChangeKind {
    /// A master entry's `image`.
    Master,
    /// A recipe image field that carried the old image.
    RecipeImage,
    /// Another recipe field holding exactly the old image.
    SameValue,
    /// A recipe image field that disagreed and was aligned (`--align`).
    Aligned,
}

/// One replaced token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TokenChange {
    /// `image` (`<key>.image`) or a recipe field such as `model.container`.
    pub field: String,
    /// 1-based line.
    pub line: usize,
    /// The old token as written (with quotes).
    pub old: String,
    /// The new token as written.
    pub new: String,
    /// Why it changed.
    pub kind: ChangeKind,
}

/// A recipe image field that disagreed with the master, and what was done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecipeDisagreement {
    /// Repository-relative recipe path.
    pub path: String,
    /// `model.container` or `identity.container.image`.
    pub field: String,
    /// Its line.
    pub line: usize,
    /// The value it had.
    pub value: String,
    /// Whether it was aligned to the new image (else left alone).
    pub aligned: bool,
    /// Why it was left, when it was.
    pub reason: Option<String>,
}

/// The new contents of one file.
#[derive(Debug, Clone, Serialize)]
pub struct FileEdit {
    /// Repository-relative path.
    pub path: String,
    /// sha256 of the bytes the edit was computed from.
    #[serde(skip)]
    before_sha256: [u8; 32],
    /// The complete new contents.
    #[serde(skip)]
    pub after: String,
    /// What changed.
    pub changes: Vec<TokenChange>,
}

/// A computed bump, ready to write or to commit through the forge.
#[derive(Debug, Clone, Serialize)]
pub struct BumpPlan {
    /// The family asked for.
    pub family: String,
    /// Every family the bump changes: the asked one's whole group, in
    /// repository order (just the family when it shares no recipes).
    pub families: Vec<String>,
    /// Their config keys, in the same order (the changelog's `config-keys`).
    pub keys: Vec<String>,
    /// The old image as written in the master.
    pub from: String,
    /// The new image as written.
    pub to: String,
    /// Files to change: master files first, then recipes.
    pub edits: Vec<FileEdit>,
    /// Recipe image fields that disagreed with the master: aligned or left.
    pub disagreements: Vec<RecipeDisagreement>,
    /// Findings for the operator (fields left alone and why).
    pub warnings: Vec<String>,
}

impl BumpPlan {
    /// Recipes whose disagreeing image fields were aligned to the new image.
    pub fn aligned_recipes(&self) -> Vec<&str> {
        self.disagreement_paths(true)
    }

    /// Recipes whose disagreeing image fields were left as they were.
    pub fn left_recipes(&self) -> Vec<&str> {
        self.disagreement_paths(false)
    }

    fn disagreement_paths(&self, aligned: bool) -> Vec<&str> {
        let mut paths: Vec<&str> = self
            .disagreements
            .iter()
            .filter(|d| d.aligned == aligned)
            .map(|d| d.path.as_str())
            .collect();
        paths.dedup();
        paths
    }

    /// Every changed field, one line each: `path:line: field: old -> new`.
    pub fn change_lines(&self) -> Vec<String> {
        self.edits
            .iter()
            .flat_map(|edit| {
                edit.changes.iter().map(move |c| {
                    format!(
                        "{}:{}: {}: {} -> {}",
                        edit.path, c.line, c.field, c.old, c.new
                    )
                })
            })
            .collect()
    }
}

/// One member of a bump: its family and the image it runs now.
struct Member<'a> {
    family: &'a Family,
    from: String,
}

impl Repository {
    /// Computes the bump of `family` from `from` (must be the master's
    /// current value, as written) to `to`, with the default options. Reads
    /// the master files and the in-repository recipes only; writes nothing.
    pub fn plan_bump(
        &self,
        family: &str,
        from: &ImageRef,
        to: &ImageRef,
    ) -> Result<BumpPlan, BumpError> {
        self.plan_bump_with(family, from, to, &BumpOptions::default())
    }

    /// [`Repository::plan_bump`] with options. A family that shares
    /// in-repository recipes with others is bumped with its whole group (one
    /// edit over every member's master entry and recipes); a group whose
    /// members run different images is refused unless the options align.
    pub fn plan_bump_with(
        &self,
        family: &str,
        from: &ImageRef,
        to: &ImageRef,
        options: &BumpOptions,
    ) -> Result<BumpPlan, BumpError> {
        let family = self.family(family)?;
        if from.to_string() == to.to_string() {
            return Err(BumpError::Unchanged {
                image: to.to_string(),
            });
        }
        let mut members = vec![Member {
            family,
            from: from.to_string(),
        }];
        if let Some(group) = self.group_of(&family.family) {
            if !group.same_image && options.disagreeing != DisagreePolicy::Align {
                return Err(BumpError::MixedGroup {
                    family: family.family.clone(),
                    path: group.shared_recipes.first().cloned().unwrap_or_default(),
                    members: group.describe(),
                });
            }
            // Members are checked against the image the repository was read
            // with; the asked family against the caller's `from`.
            members = group
                .families
                .iter()
                .map(|name| {
                    let member = self.family(name)?;
                    Ok(Member {
                        family: member,
                        from: if member.family == family.family {
                            from.to_string()
                        } else {
                            member.image().to_string()
                        },
                    })
                })
                .collect::<Result<_, RepoError>>()?;
        }

        let mut edits = self.plan_master_edits(&members, to)?;
        let olds: Vec<ImageRef> = members
            .iter()
            .filter_map(|m| ImageRef::parse(&m.from).ok())
            .collect();
        let mut recipe_paths: Vec<&str> = Vec::new();
        for member in &members {
            for recipe in &member.family.recipes {
                if recipe.missing {
                    return Err(BumpError::MissingRecipe {
                        family: member.family.family.clone(),
                        master: format!("{}{}", self.prefix(), member.family.file),
                        line: recipe.line,
                        setting: format!("{}={}", recipe.variable, recipe.setting),
                        path: recipe.path.clone(),
                    });
                }
                if recipe.in_repository && !recipe_paths.contains(&recipe.path.as_str()) {
                    recipe_paths.push(&recipe.path);
                }
            }
        }
        let mut disagreements = Vec::new();
        let mut warnings = Vec::new();
        for path in recipe_paths {
            if let Some(edit) =
                self.plan_recipe_edit(path, &olds, to, options, &mut disagreements)?
            {
                edits.push(edit);
            }
        }
        for d in disagreements.iter().filter(|d| !d.aligned) {
            warnings.push(format!(
                "{}:{}: {} is {:?}, not the family's image; left alone ({})",
                d.path,
                d.line,
                d.field,
                d.value,
                d.reason.as_deref().unwrap_or("")
            ));
        }
        Ok(BumpPlan {
            family: family.family.clone(),
            families: members.iter().map(|m| m.family.family.clone()).collect(),
            keys: members.iter().map(|m| m.family.key.clone()).collect(),
            from: from.to_string(),
            to: to.to_string(),
            edits,
            disagreements,
            warnings,
        })
    }

    /// One edit per master file, covering every member's `image`.
    fn plan_master_edits(
        &self,
        members: &[Member<'_>],
        to: &ImageRef,
    ) -> Result<Vec<FileEdit>, BumpError> {
        let mut files: Vec<&str> = Vec::new();
        for member in members {
            if !files.contains(&member.family.file.as_str()) {
                files.push(&member.family.file);
            }
        }
        let mut edits = Vec::new();
        for file in files {
            let master_path = format!("{}{}", self.prefix(), file);
            let master_text = repo::read_text(self.root(), &master_path)?;
            // Read entry by entry, as the repository was: a broken entry
            // elsewhere in the file does not stop this family's bump, and
            // the splice below checks that it is left as it was.
            let master_doc = repo::parse_master(&master_path, &master_text)?
                .root
                .ok_or_else(|| BumpError::Uneditable {
                    path: master_path.clone(),
                    line: 1,
                    field: "(top level)".to_owned(),
                    reason: "the file is empty now".to_owned(),
                })?;
            let mut targets = Vec::new();
            for member in members.iter().filter(|m| m.family.file == file) {
                let family = member.family;
                let field = format!("{}.image", family.key);
                if master_doc.key_count(&family.key) > 1 {
                    return Err(BumpError::Uneditable {
                        path: master_path.clone(),
                        line: family.line,
                        field,
                        reason: "the key is defined more than once now; re-plan".to_owned(),
                    });
                }
                let image_node = master_doc
                    .get(&family.key)
                    .and_then(|entry| entry.get("image"))
                    .ok_or_else(|| BumpError::Uneditable {
                        path: master_path.clone(),
                        line: family.line,
                        field: field.clone(),
                        reason: "the key or its image field is missing now; re-plan".to_owned(),
                    })?;
                let found = image_node.as_scalar().unwrap_or_default();
                if found != member.from {
                    return Err(BumpError::NotOld {
                        path: master_path,
                        line: image_node.line,
                        field,
                        expected: member.from.clone(),
                        found: found.to_owned(),
                    });
                }
                targets.push(Target {
                    field,
                    node: image_node,
                    value: to.to_string(),
                    kind: ChangeKind::Master,
                });
            }
            edits.extend(splice(
                &master_path,
                &master_text,
                &master_doc,
                &targets,
                Reparse::Master,
            )?);
        }
        Ok(edits)
    }

    fn plan_recipe_edit(
        &self,
        path: &str,
        olds: &[ImageRef],
        to: &ImageRef,
        options: &BumpOptions,
        disagreements: &mut Vec<RecipeDisagreement>,
    ) -> Result<Option<FileEdit>, BumpError> {
        let text = repo::read_text(self.root(), path)?;
        let Some(doc) = repo::parse_recipe(path, &text)? else {
            return Ok(None);
        };
        let mut targets = Vec::new();
        let image_nodes = repo::recipe_image_nodes(&doc);
        for (field, node) in &image_nodes {
            let Some(value) = node.as_scalar() else {
                return Err(BumpError::Uneditable {
                    path: path.to_owned(),
                    line: node.line,
                    field: (*field).to_owned(),
                    reason: format!("expected an image string, found {}", node.kind_name()),
                });
            };
            let parsed = ImageRef::parse(value).ok();
            let same = parsed
                .as_ref()
                .is_some_and(|image| olds.iter().any(|old| image.same_image(old)));
            if !same {
                // A container alias (`dynamo-sglang`) names an srtslurm.yaml
                // entry, not an image: aligning it would change what it means.
                let alias = parsed
                    .as_ref()
                    .is_none_or(|image| image.tag().is_none() && image.digest().is_none());
                let aligned = options.disagreeing == DisagreePolicy::Align && !alias;
                let reason = if aligned {
                    None
                } else if alias {
                    Some("a container alias, not an image reference".to_owned())
                } else {
                    Some("another image; --align sets it to the new image".to_owned())
                };
                disagreements.push(RecipeDisagreement {
                    path: path.to_owned(),
                    field: (*field).to_owned(),
                    line: node.line,
                    value: value.to_owned(),
                    aligned,
                    reason,
                });
                if aligned {
                    targets.push(Target {
                        field: (*field).to_owned(),
                        node,
                        value: to.to_string(),
                        kind: ChangeKind::Aligned,
                    });
                }
                continue;
            }
            // Keep the recipe's own spelling of the host; only tag and digest move.
            let parsed = parsed.unwrap_or_else(|| to.clone());
            let new_value = if parsed.normalized_repository() == to.normalized_repository() {
                parsed
                    .with_reference(to.tag(), to.digest())
                    .map(|image| image.to_string())
                    .unwrap_or_else(|_| to.to_string())
            } else {
                to.to_string()
            };
            targets.push(Target {
                field: (*field).to_owned(),
                node,
                value: new_value,
                kind: ChangeKind::RecipeImage,
            });
        }
        // Other fields holding exactly an old image (as the master spells
        // it) run the same container: they move too.
        let old_texts: Vec<String> = olds.iter().map(ImageRef::to_string).collect();
        let mut same_values = Vec::new();
        same_value_nodes(&doc, &mut String::new(), &old_texts, &mut same_values);
        for (field, node) in same_values {
            if image_nodes.iter().any(|(_, n)| n.start == node.start) {
                continue;
            }
            targets.push(Target {
                field,
                node,
                value: to.to_string(),
                kind: ChangeKind::SameValue,
            });
        }
        if targets.is_empty() {
            return Ok(None);
        }
        splice(path, &text, &doc, &targets, Reparse::Recipe)
    }
}

/// Scalar values (not keys) equal to one of `olds`, with their dotted path.
fn same_value_nodes<'a>(
    node: &'a Node,
    path: &mut String,
    olds: &[String],
    out: &mut Vec<(String, &'a Node)>,
) {
    match &node.kind {
        yaml::NodeKind::Scalar { value, .. } => {
            if olds.iter().any(|old| old.as_str() == &**value) {
                out.push((path.clone(), node));
            }
        }
        yaml::NodeKind::Sequence(items) => {
            for (index, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{index}]"));
                same_value_nodes(item, path, olds, out);
                path.truncate(len);
            }
        }
        yaml::NodeKind::Mapping(entries) => {
            for (key, value) in entries.iter() {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key.as_scalar().unwrap_or("?"));
                same_value_nodes(value, path, olds, out);
                path.truncate(len);
            }
        }
    }
}

/// One token to replace.
struct Target<'a> {
    field: String,
    node: &'a Node,
    value: String,
    kind: ChangeKind,
}

/// How [`splice`] reads the edited text back: the way the original was read.
#[derive(Clone, Copy)]
enum Reparse {
    /// Entry by entry ([`yaml::parse_confined`]): the readable entries.
    Master,
    /// With repeated keys kept ([`yaml::parse_lenient`]).
    Recipe,
}

impl Reparse {
    fn read(self, text: &str) -> Result<Option<Node>, yaml::YamlError> {
        match self {
            Self::Master => yaml::parse_readable(text),
            Self::Recipe => yaml::parse_lenient(text).map(|(doc, _)| doc),
        }
    }
}

/// Replaces each target token, then re-parses and checks that exactly those
/// scalars changed, to exactly the new values. A target already written as
/// its new token is no change; a file with no change is no edit (`None`),
/// so a bump reports only files whose bytes change.
fn splice(
    path: &str,
    text: &str,
    doc: &Node,
    targets: &[Target<'_>],
    reparse: Reparse,
) -> Result<Option<FileEdit>, BumpError> {
    let mut replacements = Vec::new();
    let mut changes = Vec::new();
    for target in targets {
        let (field, node, new_value) = (&target.field, target.node, &target.value);
        if replacements.iter().any(
            |(_, _, start, _): &(std::ops::Range<usize>, String, usize, String)| {
                *start == node.start
            },
        ) {
            continue;
        }
        let uneditable = |reason: yaml::ScalarEditError| BumpError::Uneditable {
            path: path.to_owned(),
            line: node.line,
            field: field.clone(),
            reason: reason.to_string(),
        };
        let range = yaml::scalar_token(text, node).map_err(uneditable)?;
        let style = node.style().unwrap_or(yaml::Style::Plain);
        let token = yaml::encode_scalar(new_value, style).map_err(uneditable)?;
        if text[range.clone()] == token {
            continue;
        }
        changes.push(TokenChange {
            field: field.clone(),
            line: node.line,
            old: text[range.clone()].to_owned(),
            new: token.clone(),
            kind: target.kind,
        });
        replacements.push((range, token, node.start, new_value.clone()));
    }
    if replacements.is_empty() {
        return Ok(None);
    }
    replacements.sort_by_key(|(range, ..)| range.start);
    changes.sort_by_key(|change| change.line);
    let mut after = String::with_capacity(text.len() + 128);
    let mut cursor = 0;
    for (range, token, ..) in &replacements {
        after.push_str(&text[cursor..range.start]);
        after.push_str(token);
        cursor = range.end;
    }
    after.push_str(&text[cursor..]);

    let verify = |reason: String| BumpError::Verify {
        path: path.to_owned(),
        reason,
    };
    let reparsed = reparse
        .read(&after)
        .map_err(|e| verify(e.to_string()))?
        .ok_or_else(|| verify("the document vanished".to_owned()))?;
    let mut old_scalars = Vec::new();
    let mut new_scalars = Vec::new();
    flatten(doc, &mut old_scalars);
    flatten(&reparsed, &mut new_scalars);
    if old_scalars.len() != new_scalars.len() {
        return Err(verify("the document structure changed".to_owned()));
    }
    let expected: BTreeMap<usize, &str> = replacements
        .iter()
        .map(|(_, _, start, value)| (*start, value.as_str()))
        .collect();
    for ((old_start, old_value), (_, new_value)) in old_scalars.iter().zip(&new_scalars) {
        let want = expected.get(old_start).copied().unwrap_or(old_value);
        if want != *new_value {
            return Err(verify(format!("expected {want:?}, found {new_value:?}")));
        }
    }
    Ok(Some(FileEdit {
        path: path.to_owned(),
        before_sha256: Sha256::digest(text.as_bytes()).into(),
        after,
        changes,
    }))
}

/// Every scalar of a document, in order, with its start offset.
fn flatten<'a>(node: &'a Node, out: &mut Vec<(usize, &'a str)>) {
    match &node.kind {
        yaml::NodeKind::Scalar { value, .. } => out.push((node.start, value)),
        yaml::NodeKind::Sequence(items) => items.iter().for_each(|item| flatten(item, out)),
        yaml::NodeKind::Mapping(entries) => entries.iter().for_each(|(k, v)| {
            flatten(k, out);
            flatten(v, out);
        }),
    }
}

impl BumpPlan {
    /// Repository-relative paths this bump changes.
    pub fn paths(&self) -> Vec<&str> {
        self.edits.iter().map(|edit| edit.path.as_str()).collect()
    }

    /// Writes every edit under `root`: all files or none. Each file must
    /// still hold the bytes the plan was computed from. New contents go to
    /// temporary files beside the targets first and are renamed into place
    /// only once all of them are written.
    pub fn write(&self, root: &Path) -> Result<(), BumpError> {
        let mut originals = Vec::new();
        for edit in &self.edits {
            let current =
                std::fs::read(root.join(&edit.path)).map_err(|source| BumpError::Write {
                    path: edit.path.clone(),
                    source,
                })?;
            if <[u8; 32]>::from(Sha256::digest(&current)) != edit.before_sha256 {
                return Err(BumpError::Concurrent {
                    path: edit.path.clone(),
                });
            }
            originals.push(current);
        }
        let mut staged = Vec::new();
        for edit in &self.edits {
            let target = root.join(&edit.path);
            let temp = target.with_file_name(format!(
                ".{}.klaud-tmp",
                target
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or("edit")
            ));
            let permissions = std::fs::metadata(&target).map(|m| m.permissions());
            let written = write_synced(&temp, edit.after.as_bytes())
                .and_then(|()| permissions.and_then(|p| std::fs::set_permissions(&temp, p)));
            staged.push(temp.clone());
            if let Err(source) = written {
                staged.iter().for_each(|t| {
                    let _ = std::fs::remove_file(t);
                });
                return Err(BumpError::Write {
                    path: edit.path.clone(),
                    source,
                });
            }
        }
        for (index, (edit, temp)) in self.edits.iter().zip(&staged).enumerate() {
            if let Err(source) = std::fs::rename(temp, root.join(&edit.path)) {
                staged.iter().for_each(|t| {
                    let _ = std::fs::remove_file(t);
                });
                // Put back the files already replaced, so none stays changed.
                for (done, original) in self.edits[..index].iter().zip(&originals) {
                    let _ = write_synced(&root.join(&done.path), original);
                }
                return Err(BumpError::Write {
                    path: edit.path.clone(),
                    source,
                });
            }
        }
        Ok(())
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::File::create(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

impl BumpPlan {
    /// Adds the changelog entry to the same all-or-none write. The entry's
    /// `pr-link` must point at the repository's own pull requests: those the
    /// existing changelog links to most.
    pub fn add_changelog_entry(
        &mut self,
        repository: &Repository,
        entry: &crate::changelog::ChangelogEntry,
    ) -> Result<(), BumpError> {
        self.add_changelog_entry_in(repository, entry, None)
    }

    /// [`BumpPlan::add_changelog_entry`] with the repository (`owner/name`)
    /// given, e.g. from configuration, instead of read from the changelog.
    pub fn add_changelog_entry_in(
        &mut self,
        repository: &Repository,
        entry: &crate::changelog::ChangelogEntry,
        own: Option<&str>,
    ) -> Result<(), BumpError> {
        let path = format!(
            "{}{}",
            repository.prefix(),
            crate::changelog::CHANGELOG_PATH
        );
        let base =
            std::fs::read(repository.root().join(&path)).map_err(|source| RepoError::Io {
                path: path.clone(),
                source,
            })?;
        let end_line = base.iter().filter(|b| **b == b'\n').count() + 1;
        let uneditable = |line: usize, reason: String| BumpError::Uneditable {
            path: path.clone(),
            line,
            field: "perf-changelog".to_owned(),
            reason,
        };
        let own = own
            .map(str::to_owned)
            .or_else(|| crate::changelog::own_repository(&base));
        if let Some(own) = &own {
            entry
                .validate_repository(own)
                .map_err(|problem| uneditable(end_line, problem.to_string()))?;
        }
        let head = crate::changelog::append_entry(&base, entry).map_err(|e| {
            let line = match &e {
                crate::changelog::ChangelogError::Base(
                    crate::changelog::ChangelogViolation::NotAList { line, .. },
                ) => *line,
                _ => end_line,
            };
            uneditable(line, e.to_string())
        })?;
        let after = String::from_utf8(head).map_err(|_| RepoError::NotUtf8 {
            path: path.clone(),
            offset: 0,
        })?;
        self.edits.push(FileEdit {
            path,
            before_sha256: Sha256::digest(&base).into(),
            after,
            changes: Vec::new(),
        });
        Ok(())
    }
}
