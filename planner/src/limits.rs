//! Every bound Klaud puts on what it reads from outside, in one place.
//!
//! The benchmark repository is written by many hands (and by anyone who can
//! open a pull request against a fork Klaud is pointed at), so its files are
//! treated as hostile input: a 3 KB "billion laughs" alias bomb must not take
//! the process down, and one bad file must not stop the others.
//!
//! # YAML (`crate::yaml`, the only reader of repository YAML)
//!
//! Every repository YAML file — master configs, `perf-changelog.yaml`,
//! recipes, `configs/runners.yaml` — goes through [`crate::yaml::parse`],
//! [`crate::yaml::parse_lenient`] or, for the master configs,
//! [`crate::yaml::parse_confined`] (where a bound crossed inside one
//! top-level entry costs that entry alone), which enforce:
//!
//! - [`MAX_DOCUMENT_BYTES`]: larger files are refused before parsing.
//! - [`MAX_DEPTH`]: nesting of sequences and mappings (the tree builder is
//!   recursive, so deeper input would otherwise overflow the stack).
//! - [`MAX_SCALAR_BYTES`]: one scalar's resolved text.
//! - A node budget of [`MIN_NODE_BUDGET`] plus [`NODES_PER_INPUT_BYTE`] per
//!   byte of input, at most [`MAX_NODES`] ([`node_budget`]). An alias (`*name`) is *not* copied —
//!   the anchored subtree is shared — but it counts as every node it stands
//!   for, so a walk over the tree (to JSON, the bump's scalar flattening) is
//!   bounded by the same budget. Real recipes use anchors a few times over; a
//!   billion-laughs bomb passes the budget within a few thousand nodes and is
//!   refused with the line of the alias that crossed it.
//!
//! The workflow files (`klaud-workflows`) are read with `yaml_serde`, which
//! refuses alias expansion past 100 times the document's event count
//! ("repetition limit exceeded") and nesting past 128 levels.
//!
//! # JSON (registries, GitHub, artifacts, markers)
//!
//! `serde_json` refuses 128 or more levels of nesting by default
//! ("recursion limit exceeded"), which bounds its stack; Klaud never turns
//! that limit off. Bodies are bounded before they are parsed:
//!
//! - registry responses: `RegistryConfig::max_manifest_bytes` and
//!   `max_tag_list_bytes` (`crate::registry`), refused while streaming;
//! - GitHub responses: `klaud_github`'s transport refuses a body past its
//!   `MAX_RESPONSE_BYTES` (64 MiB) while streaming.
//!
//! # TOML (`klaud.toml`)
//!
//! The configuration is the operator's own file; the `toml` parser bounds
//! nesting of arrays and inline tables itself (recursion limit 80).

/// Largest YAML file read. The biggest real InferenceX files are about
/// 400 KB (`perf-changelog.yaml`, `configs/nvidia-master.yaml`); the
/// changelog only grows, so this leaves ten times the room. A node costs
/// about 100 bytes of memory, so with [`MAX_NODES`] a read holds at most
/// about 100 MB whatever the file says.
pub const MAX_DOCUMENT_BYTES: usize = 4 * 1024 * 1024;

/// Most nodes any document may have (aliases counted as what they repeat).
/// The real NVIDIA master has under 100,000.
pub const MAX_NODES: usize = 1_000_000;

/// Deepest nesting of sequences and mappings. Real masters and recipes
/// nest fewer than 12 levels.
pub const MAX_DEPTH: usize = 64;

/// Longest resolved scalar. Real scalars are at most a few KB (changelog
/// descriptions, recipe shell snippets).
pub const MAX_SCALAR_BYTES: usize = 1024 * 1024;

/// Nodes (aliases counted as every node they stand for) allowed per byte of
/// input, on top of [`MIN_NODE_BUDGET`]. Without aliases a document has at
/// most about one node per byte, so only alias expansion can approach this.
pub const NODES_PER_INPUT_BYTE: usize = 8;

/// Nodes any document may have regardless of its size, so that a short
/// recipe may still alias a block a few times.
pub const MIN_NODE_BUDGET: usize = 4096;

/// The node budget of a document of `input_bytes` bytes: at most
/// [`MAX_NODES`].
pub fn node_budget(input_bytes: usize) -> usize {
    MIN_NODE_BUDGET
        .saturating_add(NODES_PER_INPUT_BYTE.saturating_mul(input_bytes))
        .min(MAX_NODES)
}

/// Most archive text (`configs/deprecated/`) a plan holds at once to judge
/// a few archived keys before its first requests: the real archive is
/// about 500 KB. Files past it are not held (their keys are judged by the
/// whole parse alone), and that parse reads them one at a time.
pub const MAX_HELD_ARCHIVE_BYTES: usize = 16 * 1024 * 1024;

/// Largest launcher (`runners/launch_*.sh`) the launcher analysis reads.
/// The real ones are at most about 40 KB.
pub const MAX_LAUNCHER_BYTES: usize = 1024 * 1024;

/// Longest logical launcher line (continuations joined) the launcher
/// analysis reads; the rest of a longer one is not looked at.
pub const MAX_LAUNCHER_LINE_BYTES: usize = 64 * 1024;
