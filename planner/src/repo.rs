//! The benchmark repository as Klaud reads it: master configs, families,
//! platforms and the multi-node recipe files they point at (see `klaud_planner::identity`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::identity::family_id;
use crate::image::ImageRef;
use crate::yaml::{self, Node};

mod groups;
use groups::*;

mod recipes;
pub use recipes::recipe_setting;
use recipes::*;

/// Directory that holds the project when the repository uses the new layout.
pub const E2E_PREFIX: &str = "inferencex-e2e";
/// Where `CONFIG_FILE=recipes/<path>` settings point, project-relative.
pub const RECIPES_DIR: &str = "benchmarks/multi_node/srt-slurm-recipes";
/// The master entry fields Klaud knows; others are kept and reported.
const KNOWN_FIELDS: &[&str] = &[
    "image",
    "model",
    "model-prefix",
    "runner",
    "precision",
    "framework",
    "multinode",
    "disagg",
    "router",
    "kv-p2p-transfer",
    "scenarios",
];
/// Recipe fields that repeat the master's image (`a.b.c` paths). Recipes
/// built from a `base:` plus `zip_override_<name>` selections keep them
/// under `base`.
pub const RECIPE_IMAGE_FIELDS: &[&str] = &[
    "model.container",
    "identity.container.image",
    "base.model.container",
    "base.identity.container.image",
];

/// A problem reading the repository. Every variant names the file and, where
/// it has one, the line, and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum RepoError {
    /// A file could not be read.
    #[error("{path}: cannot read: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A file is not UTF-8.
    #[error(
        "{path}: not valid UTF-8 (first bad byte at offset {offset}); re-save the file as UTF-8"
    )]
    NotUtf8 { path: String, offset: usize },
    /// A file has CR line endings, which edits could not preserve byte for byte.
    #[error(
        "{path}:{line}: carriage return (CRLF line endings); convert the file to LF line endings"
    )]
    CarriageReturn { path: String, line: usize },
    /// YAML syntax.
    #[error("{path}:{line}:{column}: {message}")]
    Yaml {
        path: String,
        line: usize,
        column: usize,
        message: String,
    },
    /// A field has the wrong shape or value.
    #[error("{path}:{line}: {field}: {message}")]
    Field {
        path: String,
        line: usize,
        field: String,
        message: String,
    },
    /// The same config key in two master files.
    #[error(
        "config key {key:?} is defined in both {first} (line {first_line}) and {second} (line {second_line}); keep it in one master file"
    )]
    DuplicateKey {
        key: String,
        first: String,
        first_line: usize,
        second: String,
        second_line: usize,
    },
    /// The same config key twice in one master file.
    #[error(
        "{path}:{line}: duplicate key {key:?} (first defined on line {first_line}); InferenceX's loader silently keeps the later one, Klaud reads neither: remove one of them"
    )]
    RepeatedKey {
        path: String,
        key: String,
        first_line: usize,
        line: usize,
    },
    /// A recipe setting whose path leaves the repository.
    #[error(
        "{path}:{line}: {family}: {setting:?} points outside the repository; recipe paths must stay under {RECIPES_DIR}"
    )]
    RecipeEscapes {
        path: String,
        line: usize,
        family: String,
        setting: String,
    },
    /// No master configs at all.
    #[error(
        "no configs/*-master.yaml under {root}; point --checkout at a benchmark repository checkout"
    )]
    NoMasters { root: String },
    /// A family that does not exist.
    #[error("no family {family:?} in this repository; `klaud families` lists them")]
    UnknownFamily { family: String },
    /// A family (or its whole master file) that could not be read; the
    /// other families were read as usual.
    #[error("{family} cannot be read: {source}")]
    Unreadable {
        family: String,
        #[source]
        source: Arc<RepoError>,
    },
}

/// A family, or a whole master file, that could not be read. One bad entry
/// (an `image: TBD`, an alias bomb) must not stop every other family, so
/// [`Repository::open`] keeps the error here and reads on.
#[derive(Debug, Clone)]
pub struct Unreadable {
    /// `<master>:<key>`, or the master path when the file itself could not
    /// be read (then none of its families are known).
    pub family: String,
    /// The config key, when the entry's key was read.
    pub key: Option<String>,
    /// Project-relative master path.
    pub file: String,
    /// Line of the key (1 for a file-level problem).
    pub line: usize,
    /// What is wrong, naming the file and line.
    pub error: Arc<RepoError>,
}

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} cannot be read: {}", self.family, self.error)
    }
}

/// The platform a family's runners pull images for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
pub enum Platform {
    /// `linux/amd64`.
    #[serde(rename = "linux/amd64")]
    LinuxAmd64,
    /// `linux/arm64` (Grace: GB200, GB300).
    #[serde(rename = "linux/arm64")]
    LinuxArm64,
}

impl Platform {
    /// The OCI architecture name.
    pub fn architecture(self) -> &'static str {
        match self {
            Platform::LinuxAmd64 => "amd64",
            Platform::LinuxArm64 => "arm64",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "linux/amd64" | "amd64" | "x86_64" => Some(Self::LinuxAmd64),
            "linux/arm64" | "arm64" | "aarch64" | "linux/arm64/v8" => Some(Self::LinuxArm64),
            _ => None,
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Platform::LinuxAmd64 => "linux/amd64",
            Platform::LinuxArm64 => "linux/arm64",
        })
    }
}

/// One `*-master.yaml` entry, typed.
#[derive(Debug, Clone, Serialize)]
pub struct MasterEntry {
    /// The image, as written.
    #[serde(serialize_with = "serialize_display")]
    pub image: ImageRef,
    pub model: String,
    pub model_prefix: String,
    pub runner: String,
    pub precision: String,
    pub framework: String,
    pub multinode: bool,
    pub disagg: Option<bool>,
    pub router: Option<Value>,
    pub kv_p2p_transfer: Option<String>,
    /// `fixed-seq-len` and/or `agentic-coding`, kept as data.
    pub scenarios: BTreeMap<String, Value>,
    /// Fields Klaud does not know, kept verbatim.
    pub unknown: BTreeMap<String, Value>,
}

fn serialize_display<S: serde::Serializer, T: fmt::Display>(
    value: &T,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_str(value)
}

/// A `CONFIG_FILE=recipes/<path>` (or `EVAL_CONFIG_FILE=`, or any
/// `*_CONFIG_FILE=`) setting of a multi-node family.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecipeRef {
    /// The variable, e.g. `CONFIG_FILE` or `EVAL_CONFIG_FILE`.
    pub variable: String,
    /// The setting's value as written, selector included, e.g.
    /// `recipes/vllm/x.yaml:zip_override_a[0]`.
    pub setting: String,
    /// The `:name[...]` selector the launchers strip (`${CONFIG_FILE%%:*}`).
    pub selector: Option<String>,
    /// Repository-relative path of the file.
    pub path: String,
    /// Whether the file is in the repository (the others live in the
    /// srt-slurm project and are not Klaud's to edit).
    pub in_repository: bool,
    /// The setting names a place that only the repository fills (a spelled
    /// out project path or a configured `[[recipe_roots]]` folder), yet no
    /// file is there: bumping the family is an error.
    pub missing: bool,
    /// The `[[recipe_roots]]` prefix the path was resolved through, if any.
    pub root: Option<String>,
    /// Line of the setting in the master file.
    pub line: usize,
}

/// A launcher copy mapping: recipes named under `prefix` in settings (as the
/// launcher sees them after `cp -rT`) live in the project folder `folder`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecipeRoot {
    /// Setting prefix, e.g. `recipes/trtllm/kimi-k25-nvfp4/b200-fp4`.
    pub prefix: String,
    /// Project-relative folder, e.g.
    /// `benchmarks/multi_node/srt-slurm-recipes/trtllm/kimi-k2.5/disagg/trtllm_dynamo/b200-fp4`.
    pub folder: String,
}

/// How a checkout is read: what the configuration adds to the built-in
/// knowledge of the repository layout.
#[derive(Debug, Clone, Default)]
pub struct RepoOptions {
    /// `[[recipe_roots]]`, in configuration order; the longest matching
    /// prefix wins.
    pub recipe_roots: Vec<RecipeRoot>,
}

/// Families that share in-repository recipes. With one current image they
/// are bumped together; with several they cannot be bumped until aligned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FamilyGroup {
    /// Member families (`<master>:<key>`), in repository order.
    pub families: Vec<String>,
    /// Member config keys, in the same order.
    pub keys: Vec<String>,
    /// Repository-relative recipe paths used by more than one member.
    pub shared_recipes: Vec<String>,
    /// Each member's current image, as written, in member order.
    pub images: Vec<String>,
    /// Whether all members run the same (normalized) image.
    pub same_image: bool,
}

impl FamilyGroup {
    /// A one-line description: members and, for a mixed group, their images.
    pub fn describe(&self) -> String {
        if self.same_image {
            self.keys.join(" + ")
        } else {
            self.keys
                .iter()
                .zip(&self.images)
                .map(|(key, image)| format!("{key} ({image})"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    }
}

/// An image field inside a recipe file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecipeImage {
    /// `model.container` or `identity.container.image`.
    pub field: &'static str,
    /// The value as read.
    pub value: String,
    /// Its line.
    pub line: usize,
}

/// A config family: one key of one master file.
#[derive(Debug, Clone)]
pub struct Family {
    /// `<master path>:<key>`, project-relative, e.g. `configs/nvidia-master.yaml:dsr1-fp4-b200-sglang`.
    pub family: String,
    /// `identity(family)[:16]`.
    pub id: String,
    /// The config key.
    pub key: String,
    /// Project-relative master path, e.g. `configs/nvidia-master.yaml`.
    pub file: String,
    /// Line of the key in the master file.
    pub line: usize,
    /// Line of the `image:` value.
    pub image_line: usize,
    /// The typed entry.
    pub entry: MasterEntry,
    /// The platform its runner pulls for.
    pub platform: Platform,
    /// Recipe settings, in file order, without duplicates.
    pub recipes: Vec<RecipeRef>,
}

impl Family {
    /// The current image.
    pub fn image(&self) -> &ImageRef {
        &self.entry.image
    }
}

/// A non-fatal finding while reading the repository.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Warning {
    /// Which kind of finding, so a command can count them by kind.
    pub kind: WarningKind,
    /// Where (`path:line`).
    pub location: String,
    /// What.
    pub message: String,
}

/// The kinds of [`Warning`]: a real repository repeats a few kinds many
/// times (InferenceX: about 200 external recipes), so commands summarise
/// them by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WarningKind {
    /// A master entry field Klaud does not know, kept as is.
    UnknownField,
    /// A runner label missing from `configs/runners.yaml`.
    UnlistedRunner,
    /// A recipe setting names a repository file that does not exist.
    MissingRecipe,
    /// A recipe outside the repository, which a bump does not edit.
    ExternalRecipe,
    /// `configs/runners.yaml` could not be read.
    UnreadableRunners,
    /// A runner's declared platform is not one Klaud knows.
    UnknownPlatform,
}

impl WarningKind {
    /// The kind as one short phrase, for summaries.
    pub fn describe(self) -> &'static str {
        match self {
            Self::UnknownField => "unknown master entry field kept as is",
            Self::UnlistedRunner => "runner not listed in configs/runners.yaml",
            Self::MissingRecipe => "recipe file named but missing",
            Self::ExternalRecipe => "external recipe, not edited",
            Self::UnreadableRunners => "configs/runners.yaml unreadable",
            Self::UnknownPlatform => "runner platform not linux/amd64 or linux/arm64",
        }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}

/// A benchmark repository checkout, read.
#[derive(Debug, Clone)]
pub struct Repository {
    root: PathBuf,
    /// `""` or `"inferencex-e2e/"`.
    prefix: String,
    families: Vec<Family>,
    unreadable: Vec<Unreadable>,
    warnings: Vec<Warning>,
    groups: Vec<FamilyGroup>,
    /// `configs/runners.yaml` as read at open (the capacity gate maps
    /// runner labels to clusters from it after the checkout is gone).
    runners: Option<String>,
}

impl Repository {
    /// Reads every `configs/*-master.yaml` of the checkout at `root` (and
    /// `configs/runners.yaml` when present), with the built-in layout only.
    /// Recipe files are read on demand.
    pub fn open(root: impl AsRef<Path>) -> Result<Self, RepoError> {
        Self::open_with(root, &RepoOptions::default())
    }

    /// [`Repository::open`] with configuration (launcher copy mappings).
    pub fn open_with(root: impl AsRef<Path>, options: &RepoOptions) -> Result<Self, RepoError> {
        let root = root.as_ref().to_path_buf();
        let prefix = if root.join(E2E_PREFIX).is_dir() {
            format!("{E2E_PREFIX}/")
        } else {
            String::new()
        };
        let configs_dir = root.join(&prefix).join("configs");
        let display_root = root.display().to_string();
        let mut masters: Vec<String> = match std::fs::read_dir(&configs_dir) {
            Ok(entries) => entries
                .filter_map(Result::ok)
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|name| name.ends_with("-master.yaml"))
                .collect(),
            Err(_) => Vec::new(),
        };
        if masters.is_empty() {
            return Err(RepoError::NoMasters { root: display_root });
        }
        masters.sort();

        let mut warnings = Vec::new();
        let runner_platforms = read_runner_platforms(&root, &prefix, &mut warnings);
        let mut families: Vec<Family> = Vec::new();
        let mut unreadable: Vec<Unreadable> = Vec::new();
        let mut seen: BTreeMap<String, (String, usize)> = BTreeMap::new();
        let mut duplicated: BTreeMap<String, RepoError> = BTreeMap::new();
        for name in masters {
            let file = format!("configs/{name}");
            let path = format!("{prefix}{file}");
            let whole_file = |error: RepoError| Unreadable {
                family: path.clone(),
                key: None,
                file: file.clone(),
                line: error_line(&error),
                error: Arc::new(error),
            };
            // One bad entry costs its own family: the file is read entry by
            // entry, and only what cannot be confined to an entry (YAML
            // syntax) makes the whole file unreadable.
            let confined = match read_text(&root, &path).and_then(|text| parse_master(&path, &text))
            {
                Ok(confined) => confined,
                Err(error) => {
                    unreadable.push(whole_file(error));
                    continue;
                }
            };
            let Some(doc) = confined.root else {
                continue;
            };
            let Some(entries) = doc.as_mapping() else {
                unreadable.push(whole_file(field_error(
                    &path,
                    &doc,
                    "(top level)",
                    "expected a mapping of config key → entry",
                )));
                continue;
            };
            // Readable and broken entries in file order, so that a key
            // repeated across the two is still found.
            let mut items: Vec<(usize, MasterItem<'_>)> = entries
                .iter()
                .map(|(k, v)| (k.start, Ok((k, v))))
                .chain(confined.broken.iter().map(|b| (b.start, Err(b))))
                .collect();
            items.sort_by_key(|(start, _)| *start);
            for (_, item) in items {
                let (key_node, value) = match item {
                    Ok(entry) => entry,
                    Err(broken) => {
                        let error = Arc::new(RepoError::Yaml {
                            path: path.clone(),
                            line: broken.error.line,
                            column: broken.error.column,
                            message: broken.error.message.clone(),
                        });
                        let Some(key) = broken.key.as_deref() else {
                            unreadable.push(Unreadable {
                                family: format!("{file}:(line {})", broken.line),
                                key: None,
                                file: file.clone(),
                                line: broken.line,
                                error,
                            });
                            continue;
                        };
                        if let Some(error) =
                            repeated(&seen, &prefix, &file, &path, key, broken.line)
                        {
                            duplicated.insert(key.to_owned(), error);
                            continue;
                        }
                        seen.insert(key.to_owned(), (file.clone(), broken.line));
                        unreadable.push(Unreadable {
                            family: format!("{file}:{key}"),
                            key: Some(key.to_owned()),
                            file: file.clone(),
                            line: broken.line,
                            error,
                        });
                        continue;
                    }
                };
                let Some(key) = key_node.as_scalar() else {
                    unreadable.push(Unreadable {
                        family: format!("{file}:(line {})", key_node.line),
                        key: None,
                        file: file.clone(),
                        line: key_node.line,
                        error: Arc::new(field_error(
                            &path,
                            key_node,
                            "(key)",
                            "config keys must be plain strings",
                        )),
                    });
                    continue;
                };
                let family = format!("{file}:{key}");
                let broken = |error: RepoError| Unreadable {
                    family: family.clone(),
                    key: Some(key.to_owned()),
                    file: file.clone(),
                    line: key_node.line,
                    error: Arc::new(error),
                };
                if let Some(error) = repeated(&seen, &prefix, &file, &path, key, key_node.line) {
                    duplicated.insert(key.to_owned(), error);
                    continue;
                }
                seen.insert(key.to_owned(), (file.clone(), key_node.line));
                match read_family(
                    &root,
                    &prefix,
                    options,
                    &file,
                    key,
                    key_node.line,
                    value,
                    &runner_platforms,
                    &mut warnings,
                ) {
                    Ok(family) => families.push(family),
                    Err(error) => unreadable.push(broken(error)),
                }
            }
        }
        if !duplicated.is_empty() {
            families.retain(|f| !duplicated.contains_key(&f.key));
            unreadable.retain(|u| u.key.as_ref().is_none_or(|k| !duplicated.contains_key(k)));
            for (key, error) in duplicated {
                let (file, line) = seen.get(&key).cloned().unwrap_or_default();
                unreadable.push(Unreadable {
                    family: format!("{file}:{key}"),
                    key: Some(key),
                    file,
                    line,
                    error: Arc::new(error),
                });
            }
        }
        let groups = family_groups(&families);
        let runners =
            std::fs::read_to_string(root.join(format!("{prefix}configs/runners.yaml"))).ok();
        Ok(Self {
            root,
            prefix,
            families,
            unreadable,
            warnings,
            groups,
            runners,
        })
    }

    /// Every set of families that share in-repository recipes (two or more
    /// members each), in repository order of their first member.
    pub fn groups(&self) -> &[FamilyGroup] {
        &self.groups
    }

    /// The group `family` belongs to, if it shares recipes with others.
    pub fn group_of(&self, family: &str) -> Option<&FamilyGroup> {
        self.groups
            .iter()
            .find(|g| g.families.iter().any(|f| f == family))
    }

    /// The text of `configs/runners.yaml` when the checkout had one.
    pub fn runners_file(&self) -> Option<&str> {
        self.runners.as_deref()
    }

    /// The checkout's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `""`, or `"inferencex-e2e/"` for the new layout: prepend it to a
    /// project-relative path to get a repository-relative one.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Every family, master files in name order, keys in file order.
    pub fn families(&self) -> &[Family] {
        &self.families
    }

    /// Families (and master files) that could not be read, in repository
    /// order; every other family is in [`Repository::families`].
    pub fn unreadable(&self) -> &[Unreadable] {
        &self.unreadable
    }

    /// Non-fatal findings (unknown fields, external recipes, unknown runners).
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// The family named `family` (`configs/x-master.yaml:key`, just the key,
    /// or its family id).
    pub fn family(&self, family: &str) -> Result<&Family, RepoError> {
        if let Some(found) = self
            .families
            .iter()
            .find(|f| f.family == family || f.key == family || f.id == family)
        {
            return Ok(found);
        }
        let named = |u: &&Unreadable| {
            u.family == family
                || u.key.as_deref() == Some(family)
                || u.key
                    .as_deref()
                    .map(|k| family_id(&format!("{}:{k}", u.file)))
                    == Some(family.to_owned())
        };
        // A family in a master file that could not be read at all is
        // unknown, but say why the file was skipped.
        let in_file = |u: &&Unreadable| {
            u.key.is_none()
                && family
                    .split_once(':')
                    .is_some_and(|(file, _)| file == u.file)
        };
        match self
            .unreadable
            .iter()
            .find(named)
            .or_else(|| self.unreadable.iter().find(in_file))
        {
            Some(broken) => Err(RepoError::Unreadable {
                family: broken.family.clone(),
                source: broken.error.clone(),
            }),
            None => Err(RepoError::UnknownFamily {
                family: family.to_owned(),
            }),
        }
    }

    /// Families other than `except` that reference the recipe at `path`.
    pub fn recipe_users<'a>(
        &'a self,
        path: &'a str,
        except: &'a str,
    ) -> impl Iterator<Item = &'a Family> + 'a {
        self.families
            .iter()
            .filter(move |f| f.family != except && f.recipes.iter().any(|r| r.path == path))
    }

    /// Reads a recipe file's image fields (`model.container`,
    /// `identity.container.image`); an external recipe has none.
    pub fn recipe_images(&self, recipe: &RecipeRef) -> Result<Vec<RecipeImage>, RepoError> {
        if !recipe.in_repository {
            return Ok(Vec::new());
        }
        let text = read_text(&self.root, &recipe.path)?;
        let Some(doc) = parse_recipe(&recipe.path, &text)? else {
            return Ok(Vec::new());
        };
        recipe_image_nodes(&doc)
            .into_iter()
            .map(|(field, node)| match node.as_scalar() {
                Some(value) => Ok(RecipeImage {
                    field,
                    value: value.to_owned(),
                    line: node.line,
                }),
                None => Err(field_error(
                    &recipe.path,
                    node,
                    field,
                    &format!("expected an image string, found {}", node.kind_name()),
                )),
            })
            .collect()
    }
}

/// The image-carrying nodes of a recipe document that exist.
pub(crate) fn recipe_image_nodes(doc: &Node) -> Vec<(&'static str, &Node)> {
    RECIPE_IMAGE_FIELDS
        .iter()
        .filter_map(|field| {
            let mut node = doc;
            for part in field.split('.') {
                node = node.get(part)?;
            }
            Some((*field, node))
        })
        .collect()
}

/// Reads a repository-relative file as UTF-8 text with LF line endings.
pub(crate) fn read_text(root: &Path, path: &str) -> Result<String, RepoError> {
    let bytes = std::fs::read(root.join(path)).map_err(|source| RepoError::Io {
        path: path.to_owned(),
        source,
    })?;
    text_from_bytes(path, bytes)
}

/// Checks that bytes are UTF-8 without carriage returns.
pub(crate) fn text_from_bytes(path: &str, bytes: Vec<u8>) -> Result<String, RepoError> {
    let text = String::from_utf8(bytes).map_err(|e| RepoError::NotUtf8 {
        path: path.to_owned(),
        offset: e.utf8_error().valid_up_to(),
    })?;
    if let Some(offset) = text.find('\r') {
        return Err(RepoError::CarriageReturn {
            path: path.to_owned(),
            line: text[..offset].matches('\n').count() + 1,
        });
    }
    Ok(text)
}

/// Parses a recipe: srt-slurm recipes in the wild repeat keys (PyYAML keeps
/// the last), so duplicates are tolerated unless they sit on an image path.
pub(crate) fn parse_recipe(path: &str, text: &str) -> Result<Option<Node>, RepoError> {
    let (doc, _duplicates) = yaml::parse_lenient(text).map_err(|e| RepoError::Yaml {
        path: path.to_owned(),
        line: e.line,
        column: e.column,
        message: e.message,
    })?;
    if let Some(doc) = &doc {
        for field in RECIPE_IMAGE_FIELDS {
            let mut node = doc;
            for part in field.split('.') {
                if node.key_count(part) > 1 {
                    return Err(RepoError::Field {
                        path: path.to_owned(),
                        line: node.line,
                        field: (*field).to_owned(),
                        message: format!(
                            "the key {part:?} is defined more than once on the image path; remove the duplicate"
                        ),
                    });
                }
                match node.get(part) {
                    Some(next) => node = next,
                    None => break,
                }
            }
        }
    }
    Ok(doc)
}

pub(crate) fn parse_yaml(path: &str, text: &str) -> Result<Option<Node>, RepoError> {
    yaml::parse(text).map_err(|e| RepoError::Yaml {
        path: path.to_owned(),
        line: e.line,
        column: e.column,
        message: e.message,
    })
}

/// A top-level entry of a master in file order: read (key, value), or broken.
type MasterItem<'a> = Result<(&'a Node, &'a Node), &'a yaml::BrokenEntry>;

/// Reads a master config entry by entry ([`yaml::parse_confined`]): an
/// entry that cannot be read is left out of the root and listed as broken.
pub(crate) fn parse_master(path: &str, text: &str) -> Result<yaml::Confined, RepoError> {
    yaml::parse_confined(text).map_err(|e| RepoError::Yaml {
        path: path.to_owned(),
        line: e.line,
        column: e.column,
        message: e.message,
    })
}

/// The error of a config key defined a second time, at `line` of `file`,
/// when `seen` already has it. Neither definition is the family: a
/// changelog entry naming the key could not say which one it bumped.
fn repeated(
    seen: &BTreeMap<String, (String, usize)>,
    prefix: &str,
    file: &str,
    path: &str,
    key: &str,
    line: usize,
) -> Option<RepoError> {
    let (first, first_line) = seen.get(key)?;
    Some(if first == file {
        RepoError::RepeatedKey {
            path: path.to_owned(),
            key: key.to_owned(),
            first_line: *first_line,
            line,
        }
    } else {
        RepoError::DuplicateKey {
            key: key.to_owned(),
            first: format!("{prefix}{first}"),
            first_line: *first_line,
            second: path.to_owned(),
            second_line: line,
        }
    })
}

/// The line a repository error points at (1 when it names none).
fn error_line(error: &RepoError) -> usize {
    match error {
        RepoError::CarriageReturn { line, .. }
        | RepoError::RepeatedKey { line, .. }
        | RepoError::Yaml { line, .. }
        | RepoError::Field { line, .. }
        | RepoError::RecipeEscapes { line, .. } => *line,
        _ => 1,
    }
}

fn field_error(path: &str, node: &Node, field: &str, message: &str) -> RepoError {
    RepoError::Field {
        path: path.to_owned(),
        line: node.line,
        field: field.to_owned(),
        message: message.to_owned(),
    }
}

#[allow(clippy::too_many_arguments)]
fn read_family(
    root: &Path,
    prefix: &str,
    options: &RepoOptions,
    file: &str,
    key: &str,
    line: usize,
    node: &Node,
    runner_platforms: &RunnerPlatforms,
    warnings: &mut Vec<Warning>,
) -> Result<Family, RepoError> {
    let path = format!("{prefix}{file}");
    let family = format!("{file}:{key}");
    let Some(fields) = node.as_mapping() else {
        return Err(field_error(
            &path,
            node,
            key,
            &format!(
                "expected a mapping (the config entry), found {}",
                node.kind_name()
            ),
        ));
    };
    let string = |name: &str| -> Result<String, RepoError> {
        let value = node.get(name).ok_or_else(|| {
            field_error(
                &path,
                node,
                &format!("{key}.{name}"),
                "missing; every master entry needs it",
            )
        })?;
        value.as_scalar().map(str::to_owned).ok_or_else(|| {
            field_error(
                &path,
                value,
                &format!("{key}.{name}"),
                &format!("expected a string, found {}", value.kind_name()),
            )
        })
    };
    let optional_bool = |name: &str| -> Result<Option<bool>, RepoError> {
        match node.get(name) {
            None => Ok(None),
            Some(value) => match value.to_json() {
                Value::Bool(b) => Ok(Some(b)),
                _ => Err(field_error(
                    &path,
                    value,
                    &format!("{key}.{name}"),
                    "expected true or false",
                )),
            },
        }
    };

    let image_node = node.get("image").ok_or_else(|| {
        field_error(
            &path,
            node,
            &format!("{key}.image"),
            "missing; every master entry needs an image",
        )
    })?;
    let image_text = image_node.as_scalar().ok_or_else(|| {
        field_error(
            &path,
            image_node,
            &format!("{key}.image"),
            "expected an image reference string",
        )
    })?;
    let image = ImageRef::parse(image_text).map_err(|e| {
        field_error(
            &path,
            image_node,
            &format!("{key}.image"),
            &format!("family {family}: {e}; fix the image reference"),
        )
    })?;

    let runner = string("runner")?;
    let multinode = optional_bool("multinode")?.ok_or_else(|| {
        field_error(
            &path,
            node,
            &format!("{key}.multinode"),
            "missing; every master entry says whether it is multi-node",
        )
    })?;
    let mut scenarios = BTreeMap::new();
    if let Some(value) = node.get("scenarios") {
        let Some(entries) = value.as_mapping() else {
            return Err(field_error(
                &path,
                value,
                &format!("{key}.scenarios"),
                "expected a mapping of scenario → settings",
            ));
        };
        for (name, settings) in entries {
            scenarios.insert(
                name.as_scalar().unwrap_or_default().to_owned(),
                settings.to_json(),
            );
        }
    }
    let mut unknown = BTreeMap::new();
    for (name, value) in fields {
        let name = name.as_scalar().unwrap_or_default();
        if !KNOWN_FIELDS.contains(&name) {
            unknown.insert(name.to_owned(), value.to_json());
            warnings.push(Warning {
                kind: WarningKind::UnknownField,
                location: format!("{path}:{}", value.line),
                message: format!("{family}: unknown field {name:?} kept as is"),
            });
        }
    }

    let entry = MasterEntry {
        image,
        model: string("model")?,
        model_prefix: string("model-prefix")?,
        precision: string("precision")?,
        framework: string("framework")?,
        runner: runner.clone(),
        multinode,
        disagg: optional_bool("disagg")?,
        router: node.get("router").map(Node::to_json),
        kv_p2p_transfer: node
            .get("kv-p2p-transfer")
            .and_then(|n| n.as_scalar())
            .map(str::to_owned),
        scenarios,
        unknown,
    };

    let platform = runner_platforms.platform(&runner);
    if runner_platforms.known && !runner_platforms.labels.contains(&runner) {
        warnings.push(Warning {
            kind: WarningKind::UnlistedRunner,
            location: format!("{path}:{line}"),
            message: format!("{family}: runner {runner:?} is not listed in configs/runners.yaml"),
        });
    }

    let mut recipes: Vec<RecipeRef> = Vec::new();
    collect_recipe_settings(node, &mut |setting_node, variable, setting| {
        if recipes
            .iter()
            .any(|r| r.variable == variable && r.setting == setting)
        {
            return Ok(());
        }
        let recipe = resolve_recipe(
            root,
            prefix,
            options,
            &path,
            &family,
            setting_node.line,
            variable,
            setting,
        )?;
        if recipe.missing {
            warnings.push(Warning {
 kind: WarningKind::MissingRecipe,
                location: format!("{path}:{}", setting_node.line),
                message: format!(
                    "{family}: {variable}={setting} names {} in the repository, which does not exist; bumping this family fails until it does",
                    recipe.path
                ),
            });
        } else if !recipe.in_repository {
            warnings.push(Warning {
 kind: WarningKind::ExternalRecipe,
                location: format!("{path}:{}", setting_node.line),
                message: format!("{family}: recipe {setting} is not in the repository (external recipe); it is not edited"),
            });
        }
        recipes.push(recipe);
        Ok(())
    })?;

    Ok(Family {
        id: family_id(&family),
        family,
        key: key.to_owned(),
        file: file.to_owned(),
        line,
        image_line: image_node.line,
        entry,
        platform,
        recipes,
    })
}

/// Runner → platform knowledge from `configs/runners.yaml`.
#[derive(Debug, Default)]
struct RunnerPlatforms {
    /// Whether runners.yaml was there.
    known: bool,
    labels: Vec<String>,
    /// Explicit `platform:`/`arch:` under `hardware.<runner>`.
    explicit: BTreeMap<String, Platform>,
}

impl RunnerPlatforms {
    /// Explicit configuration wins; otherwise Grace-based runners (GB200,
    /// GB300, GH200) are arm64 and everything else amd64.
    fn platform(&self, runner: &str) -> Platform {
        if let Some(platform) = self.explicit.get(runner) {
            return *platform;
        }
        let name = runner.to_ascii_lowercase();
        if ["gb200", "gb300", "gh200"]
            .iter()
            .any(|grace| name.contains(grace))
        {
            Platform::LinuxArm64
        } else {
            Platform::LinuxAmd64
        }
    }
}

/// The runner platforms `configs/runners.yaml` declares. A file that cannot
/// be read is a warning, not an error: platforms are then told from runner
/// names, as for a checkout without the file.
fn read_runner_platforms(
    root: &Path,
    prefix: &str,
    warnings: &mut Vec<Warning>,
) -> RunnerPlatforms {
    let path = format!("{prefix}configs/runners.yaml");
    if !root.join(&path).is_file() {
        return RunnerPlatforms::default();
    }
    let doc = match read_text(root, &path).and_then(|text| parse_yaml(&path, &text)) {
        Ok(Some(doc)) => doc,
        Ok(None) => return RunnerPlatforms::default(),
        Err(error) => {
            warnings.push(Warning {
                kind: WarningKind::UnreadableRunners,
                location: format!("{path}:{}", error_line(&error)),
                message: format!("{error}; runner platforms are told from runner names instead"),
            });
            return RunnerPlatforms::default();
        }
    };
    let mut result = RunnerPlatforms {
        known: true,
        ..Default::default()
    };
    if let Some(labels) = doc.get("labels").and_then(Node::as_mapping) {
        result.labels = labels
            .iter()
            .filter_map(|(k, _)| k.as_scalar().map(str::to_owned))
            .collect();
    }
    if let Some(hardware) = doc.get("hardware").and_then(Node::as_mapping) {
        for (runner, info) in hardware {
            let Some(runner) = runner.as_scalar() else {
                continue;
            };
            let declared = info.get("platform").or_else(|| info.get("arch"));
            if let Some(value) = declared {
                match value.as_scalar().and_then(Platform::parse) {
                    Some(platform) => {
                        result.explicit.insert(runner.to_owned(), platform);
                    }
                    None => warnings.push(Warning {
 kind: WarningKind::UnknownPlatform,
                        location: format!("{path}:{}", value.line),
                        message: format!("runner {runner:?}: platform {:?} is not linux/amd64 or linux/arm64; ignored", value.as_scalar().unwrap_or("")),
                    }),
                }
            }
        }
    }
    result
}
