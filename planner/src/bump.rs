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
    /// A recipe that would change is also used by other families.
    #[error(
        "{path} is also used by {others}; changing its image would change those families behind their back — bump them together by hand"
    )]
    SharedRecipe { path: String, others: String },
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

/// One replaced token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TokenChange {
    /// `image` or a recipe field such as `model.container`.
    pub field: String,
    /// 1-based line.
    pub line: usize,
    /// The old token as written (with quotes).
    pub old: String,
    /// The new token as written.
    pub new: String,
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
    /// The family.
    pub family: String,
    /// The old image as written in the master.
    pub from: String,
    /// The new image as written.
    pub to: String,
    /// Files to change: the master first, then recipes.
    pub edits: Vec<FileEdit>,
    /// Recipe fields left alone because they carry something else.
    pub warnings: Vec<String>,
}

impl Repository {
    /// Computes the bump of `family` from `from` (must be the master's
    /// current value, as written) to `to`. Reads the master file and the
    /// family's in-repository recipes only; writes nothing.
    pub fn plan_bump(
        &self,
        family: &str,
        from: &ImageRef,
        to: &ImageRef,
    ) -> Result<BumpPlan, BumpError> {
        let family = self.family(family)?;
        if from.to_string() == to.to_string() {
            return Err(BumpError::Unchanged {
                image: to.to_string(),
            });
        }
        let master_path = format!("{}{}", self.prefix(), family.file);
        let master_text = repo::read_text(self.root(), &master_path)?;
        let master_doc =
            repo::parse_yaml(&master_path, &master_text)?.ok_or_else(|| BumpError::Uneditable {
                path: master_path.clone(),
                line: 1,
                field: family.key.clone(),
                reason: "the file is empty now".to_owned(),
            })?;
        let image_node = master_doc
            .get(&family.key)
            .and_then(|entry| entry.get("image"))
            .ok_or_else(|| BumpError::Uneditable {
                path: master_path.clone(),
                line: family.line,
                field: format!("{}.image", family.key),
                reason: "the key or its image field is missing now; re-plan".to_owned(),
            })?;
        let field = format!("{}.image", family.key);
        let found = image_node.as_scalar().unwrap_or_default();
        if found != from.to_string() {
            return Err(BumpError::NotOld {
                path: master_path,
                line: image_node.line,
                field,
                expected: from.to_string(),
                found: found.to_owned(),
            });
        }
        let master_edit = splice(
            &master_path,
            &master_text,
            &master_doc,
            &[(field, image_node, to.to_string())],
        )?;

        let mut edits = vec![master_edit];
        let mut warnings = Vec::new();
        for recipe in &family.recipes {
            if !recipe.in_repository {
                continue;
            }
            if let Some(edit) =
                self.plan_recipe_edit(family, &recipe.path, from, to, &mut warnings)?
            {
                edits.push(edit);
            }
        }
        Ok(BumpPlan {
            family: family.family.clone(),
            from: from.to_string(),
            to: to.to_string(),
            edits,
            warnings,
        })
    }

    fn plan_recipe_edit(
        &self,
        family: &Family,
        path: &str,
        from: &ImageRef,
        to: &ImageRef,
        warnings: &mut Vec<String>,
    ) -> Result<Option<FileEdit>, BumpError> {
        let text = repo::read_text(self.root(), path)?;
        let Some(doc) = repo::parse_recipe(path, &text)? else {
            return Ok(None);
        };
        let mut targets = Vec::new();
        for (field, node) in repo::recipe_image_nodes(&doc) {
            let Some(value) = node.as_scalar() else {
                return Err(BumpError::Uneditable {
                    path: path.to_owned(),
                    line: node.line,
                    field: field.to_owned(),
                    reason: format!("expected an image string, found {}", node.kind_name()),
                });
            };
            let same = ImageRef::parse(value).is_ok_and(|image| image.same_image(from));
            if !same {
                warnings.push(format!(
                    "{path}:{}: {field} is {value:?}, not {from}; left alone",
                    node.line
                ));
                continue;
            }
            // Keep the recipe's own spelling of the host; only tag and digest move.
            let parsed = ImageRef::parse(value).map_err(|e| BumpError::Uneditable {
                path: path.to_owned(),
                line: node.line,
                field: field.to_owned(),
                reason: e.to_string(),
            })?;
            let new_value = if parsed.normalized_repository() == to.normalized_repository() {
                parsed
                    .with_reference(to.tag(), to.digest())
                    .map(|image| image.to_string())
                    .unwrap_or_else(|_| to.to_string())
            } else {
                to.to_string()
            };
            targets.push((field.to_owned(), node, new_value));
        }
        if targets.is_empty() {
            return Ok(None);
        }
        let others: Vec<String> = self
            .recipe_users(path, &family.family)
            .map(|f| f.family.clone())
            .collect();
        if !others.is_empty() {
            return Err(BumpError::SharedRecipe {
                path: path.to_owned(),
                others: others.join(", "),
            });
        }
        splice(path, &text, &doc, &targets).map(Some)
    }
}

/// Replaces each target token, then re-parses and checks that exactly those
/// scalars changed, to exactly the new values.
fn splice(
    path: &str,
    text: &str,
    doc: &Node,
    targets: &[(String, &Node, String)],
) -> Result<FileEdit, BumpError> {
    let mut replacements = Vec::new();
    let mut changes = Vec::new();
    for (field, node, new_value) in targets {
        let uneditable = |reason: String| BumpError::Uneditable {
            path: path.to_owned(),
            line: node.line,
            field: field.clone(),
            reason,
        };
        let range = yaml::scalar_token(text, node).map_err(uneditable)?;
        let style = node.style().unwrap_or(yaml::Style::Plain);
        let token = yaml::encode_scalar(new_value, style).map_err(uneditable)?;
        changes.push(TokenChange {
            field: field.clone(),
            line: node.line,
            old: text[range.clone()].to_owned(),
            new: token.clone(),
        });
        replacements.push((range, token, node.start, new_value.clone()));
    }
    replacements.sort_by_key(|(range, ..)| range.start);
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
    let reparsed = yaml::parse_lenient(&after)
        .map_err(|e| verify(e.to_string()))?
        .0
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
    Ok(FileEdit {
        path: path.to_owned(),
        before_sha256: Sha256::digest(text.as_bytes()).into(),
        after,
        changes,
    })
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
    /// Adds the changelog entry to the same all-or-none write.
    pub fn add_changelog_entry(
        &mut self,
        repository: &Repository,
        entry: &crate::changelog::ChangelogEntry,
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
        let head =
            crate::changelog::append_entry(&base, entry).map_err(|e| BumpError::Uneditable {
                path: path.clone(),
                line: base.iter().filter(|b| **b == b'\n').count() + 1,
                field: "perf-changelog".to_owned(),
                reason: e.to_string(),
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
