//! Workflow artifacts (see configs/README.md#what-klaud-reads-from-the-benchmark-repositorys-workflows) parsed into typed rows.
//!
//! GitHub serves every artifact as a zip file. The bytes come from a workflow
//! anyone with push access can change, so unpacking is bounded: the archive
//! size, the number of entries and the bytes actually inflated are capped
//! (declared sizes in the zip headers are never trusted).
//!
//! Parsing is lenient about fields Klaud does not know (they are kept in
//! `extra`) and strict about the ones it needs: a missing or mistyped field
//! is an error naming the artifact, the file and the field.

use std::collections::BTreeMap;
use std::io::{Cursor, Read};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Artifact holding the sweep manifest.
pub const SWEEP_MANIFEST_ARTIFACT: &str = "klaud-sweep-manifest";
/// File of the sweep manifest inside its artifact.
pub const SWEEP_MANIFEST_FILE: &str = "sweep_manifest.json";
/// Artifact holding the aggregated benchmark rows.
pub const AGG_BMK_ARTIFACT: &str = "results_bmk";
/// File of the aggregated benchmark rows.
pub const AGG_BMK_FILE: &str = "agg_bmk.json";
/// Artifact holding the aggregated eval rows.
pub const AGG_EVAL_ARTIFACT: &str = "eval_results_all";
/// File of the aggregated eval rows.
pub const AGG_EVAL_FILE: &str = "agg_eval_all.json";

/// Bounds on what one artifact may make Klaud read or inflate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArtifactLimits {
    /// Largest accepted zip file.
    pub max_archive_bytes: u64,
    /// Most entries (files and directories) in one archive.
    pub max_entries: usize,
    /// Most inflated bytes of one file.
    pub max_file_bytes: u64,
    /// Most inflated bytes over all files.
    pub max_total_bytes: u64,
}

impl Default for ArtifactLimits {
    /// Benchmark artifacts are a few JSON files of some kilobytes; the
    /// defaults leave two orders of magnitude of room and still keep a zip
    /// bomb from exhausting memory.
    fn default() -> Self {
        Self {
            max_archive_bytes: 64 * 1024 * 1024,
            max_entries: 4096,
            max_file_bytes: 32 * 1024 * 1024,
            max_total_bytes: 128 * 1024 * 1024,
        }
    }
}

/// Why an artifact could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArtifactError {
    /// The zip container is unusable.
    #[error("artifact {artifact}: not a readable zip file: {reason}")]
    Zip {
        /// Artifact name.
        artifact: String,
        /// What the zip reader said.
        reason: String,
    },
    /// A limit was exceeded.
    #[error("artifact {artifact}: {what} exceeds the limit of {limit}")]
    TooLarge {
        /// Artifact name.
        artifact: String,
        /// What was too large (names the file where there is one).
        what: String,
        /// The limit.
        limit: u64,
    },
    /// A file Klaud needs is not in the artifact.
    #[error("artifact {artifact}: missing file {file}")]
    MissingFile {
        /// Artifact name.
        artifact: String,
        /// The file expected.
        file: String,
    },
    /// Several files could be the one wanted.
    #[error("artifact {artifact}: expected one JSON result file, found {found:?}")]
    Ambiguous {
        /// Artifact name.
        artifact: String,
        /// The candidates found.
        found: Vec<String>,
    },
    /// The file is not JSON.
    #[error("artifact {artifact}, file {file}: not valid JSON: {reason}")]
    Json {
        /// Artifact name.
        artifact: String,
        /// File inside it.
        file: String,
        /// The JSON parser's message.
        reason: String,
    },
    /// A required field is absent or has the wrong type.
    #[error("artifact {artifact}, file {file}, field {field}: {problem}")]
    Field {
        /// Artifact name.
        artifact: String,
        /// File inside it.
        file: String,
        /// Dotted path of the field, with the row index for lists (`[3].conc`).
        field: String,
        /// What is wrong.
        problem: String,
    },
    /// The artifact name is not one Klaud knows.
    #[error("artifact {artifact}: not a benchmark, eval or manifest artifact")]
    UnknownArtifact {
        /// Artifact name.
        artifact: String,
    },
}

/// The regular files of an unpacked artifact, in archive order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactFiles {
    /// Artifact name, as GitHub lists it.
    pub artifact: String,
    /// `(path inside the archive, bytes)`.
    pub files: Vec<(String, Vec<u8>)>,
}

impl ArtifactFiles {
    /// The file with this exact path, or with this base name at any depth
    /// when exactly one matches.
    pub fn file(&self, name: &str) -> Result<&[u8], ArtifactError> {
        if let Some((_, bytes)) = self.files.iter().find(|(path, _)| path == name) {
            return Ok(bytes);
        }
        let matches: Vec<&(String, Vec<u8>)> = self
            .files
            .iter()
            .filter(|(path, _)| base_name(path) == name)
            .collect();
        match matches.as_slice() {
            [(_, bytes)] => Ok(bytes),
            [] => Err(ArtifactError::MissingFile {
                artifact: self.artifact.clone(),
                file: name.to_owned(),
            }),
            many => Err(ArtifactError::Ambiguous {
                artifact: self.artifact.clone(),
                found: many.iter().map(|(p, _)| p.clone()).collect(),
            }),
        }
    }
}

fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Unpacks an artifact zip within `limits`.
pub fn unzip(
    artifact: &str,
    bytes: &[u8],
    limits: &ArtifactLimits,
) -> Result<ArtifactFiles, ArtifactError> {
    let too_large = |what: String, limit: u64| ArtifactError::TooLarge {
        artifact: artifact.to_owned(),
        what,
        limit,
    };
    let zip_error = |e: zip::result::ZipError| ArtifactError::Zip {
        artifact: artifact.to_owned(),
        reason: e.to_string(),
    };
    if bytes.len() as u64 > limits.max_archive_bytes {
        return Err(too_large(
            format!("archive size {}", bytes.len()),
            limits.max_archive_bytes,
        ));
    }
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).map_err(zip_error)?;
    if archive.len() > limits.max_entries {
        return Err(too_large(
            format!("entry count {}", archive.len()),
            limits.max_entries as u64,
        ));
    }
    let mut total: u64 = 0;
    let mut files = Vec::new();
    for index in 0..archive.len() {
        let mut entry = archive.by_index(index).map_err(zip_error)?;
        if entry.is_dir() {
            continue;
        }
        let name = match entry.enclosed_name() {
            Some(path) => path.to_string_lossy().replace('\\', "/"),
            None => {
                return Err(ArtifactError::Zip {
                    artifact: artifact.to_owned(),
                    reason: format!("entry {index} has an unsafe path"),
                });
            }
        };
        // The declared size is only a hint; the reader below enforces the
        // limits on what actually inflates.
        let remaining_total = limits.max_total_bytes.saturating_sub(total);
        let cap = limits.max_file_bytes.min(remaining_total);
        let mut data = Vec::new();
        (&mut entry)
            .take(cap.saturating_add(1))
            .read_to_end(&mut data)
            .map_err(|e| ArtifactError::Zip {
                artifact: artifact.to_owned(),
                reason: format!("file {name}: {e}"),
            })?;
        if data.len() as u64 > cap {
            return Err(if cap == limits.max_file_bytes {
                too_large(format!("file {name}"), limits.max_file_bytes)
            } else {
                too_large("total inflated size".to_owned(), limits.max_total_bytes)
            });
        }
        total += data.len() as u64;
        files.push((name, data));
    }
    Ok(ArtifactFiles {
        artifact: artifact.to_owned(),
        files,
    })
}

/// The four numbers Klaud compares (see `klaud_lifecycle::report`); latencies in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PointMetrics {
    /// Total (input + output) tokens/s per GPU.
    pub tput_per_gpu: f64,
    /// Output tokens/s per GPU.
    pub output_tput_per_gpu: f64,
    /// Mean time to first token, seconds.
    pub mean_ttft: f64,
    /// Mean time per output token, seconds.
    pub mean_tpot: f64,
}

/// What identifies a benchmark point besides its concurrency. Every field is
/// optional because rows differ by workflow version; matching only compares
/// what both sides state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PointIdentity {
    /// Hardware label (`hw`), e.g. `b200` or `cluster:h100-dgxc`.
    pub hw: Option<String>,
    /// Engine (`framework`).
    pub framework: Option<String>,
    /// Precision.
    pub precision: Option<String>,
    /// Model prefix (`infmax_model_prefix`).
    pub model_prefix: Option<String>,
    /// Full model name.
    pub model: Option<String>,
    /// Image the point ran.
    pub image: Option<String>,
    /// Input sequence length (fixed-seq-len only).
    pub isl: Option<u64>,
    /// Output sequence length (fixed-seq-len only).
    pub osl: Option<u64>,
    /// Tensor parallelism.
    pub tp: Option<u64>,
    /// Expert parallelism.
    pub ep: Option<u64>,
    /// Data-parallel attention.
    pub dp_attention: Option<bool>,
    /// Speculative decoding method (`none`, `mtp`, …).
    pub spec_decoding: Option<String>,
    /// Disaggregated prefill/decode.
    pub disagg: Option<bool>,
    /// Multi-node.
    pub is_multinode: Option<bool>,
    /// GPUs used.
    pub num_gpus: Option<u64>,
}

/// A fixed-seq-len row (`bmk_<name>` artifact).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FixedSeqRow {
    /// Concurrency.
    pub conc: u64,
    /// What the point is.
    pub identity: PointIdentity,
    /// Its results.
    pub metrics: PointMetrics,
    /// Every other top-level field, verbatim.
    pub extra: BTreeMap<String, Value>,
}

/// An AgentX row (`bmk_agentic_<name>` artifact).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgenticRow {
    /// Concurrency.
    pub conc: u64,
    /// What the point is.
    pub identity: PointIdentity,
    /// `scenario_type`, e.g. `agentic-coding`.
    pub scenario_type: Option<String>,
    /// KV offloading mode.
    pub kv_offloading: Option<String>,
    /// Recipe fingerprint.
    pub recipe_fingerprint: Option<String>,
    /// Per-GPU throughput and mean latencies from `request_metrics`.
    pub metrics: PointMetrics,
    /// Requests sent and completed, when stated.
    pub num_requests_total: Option<u64>,
    /// Requests completed successfully, when stated.
    pub num_requests_successful: Option<u64>,
    /// Every other top-level field, verbatim.
    pub extra: BTreeMap<String, Value>,
}

/// A benchmark row of either kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "scenario", rename_all = "kebab-case")]
pub enum BenchmarkRow {
    /// Fixed sequence lengths.
    FixedSeqLen(FixedSeqRow),
    /// AgentX traces.
    Agentic(AgenticRow),
}

impl BenchmarkRow {
    /// Concurrency.
    pub fn conc(&self) -> u64 {
        match self {
            BenchmarkRow::FixedSeqLen(r) => r.conc,
            BenchmarkRow::Agentic(r) => r.conc,
        }
    }

    /// Identity fields.
    pub fn identity(&self) -> &PointIdentity {
        match self {
            BenchmarkRow::FixedSeqLen(r) => &r.identity,
            BenchmarkRow::Agentic(r) => &r.identity,
        }
    }

    /// The compared metrics.
    pub fn metrics(&self) -> &PointMetrics {
        match self {
            BenchmarkRow::FixedSeqLen(r) => &r.metrics,
            BenchmarkRow::Agentic(r) => &r.metrics,
        }
    }
}

/// One row of `agg_eval_all.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalRow {
    /// Eval task, e.g. `gsm8k`.
    pub task: String,
    /// Concurrency.
    pub conc: u64,
    /// Score in `[0, 1]` terms as published.
    pub score: f64,
    /// Which metric `score` is (`score_name`, or the metric field it was taken from).
    pub score_name: String,
    /// Effective sample count.
    pub n_eff: Option<u64>,
    /// What the point is.
    pub identity: PointIdentity,
    /// Every other top-level field, verbatim.
    pub extra: BTreeMap<String, Value>,
}

/// `klaud-sweep-manifest/sweep_manifest.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepManifest {
    /// Head commit the sweep ran on (40 hex).
    pub head: String,
    /// Run id.
    pub run_id: u64,
    /// Run attempt.
    pub run_attempt: u32,
    /// Whether it was a full sweep.
    pub full_sweep: bool,
    /// Every other top-level field (`matrix`, `points`, …), verbatim.
    pub extra: BTreeMap<String, Value>,
}

/// A parsed artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Artifact {
    /// `bmk_<name>` or `bmk_agentic_<name>`: one row per result file (a
    /// multi-node artifact holds several `agg_<name>_*.json`, an agentic one
    /// `<name>.json` or several `<name>_conc*.json`), ordered by file path.
    Benchmark {
        /// Artifact name.
        name: String,
        /// The rows, at least one.
        rows: Vec<BenchmarkRow>,
    },
    /// `results_bmk`.
    AggregatedBenchmarks {
        /// The rows.
        rows: Vec<BenchmarkRow>,
    },
    /// `eval_results_all`.
    Evals {
        /// The rows.
        rows: Vec<EvalRow>,
    },
    /// `klaud-sweep-manifest`.
    Manifest(SweepManifest),
}

/// Unpacks and parses an artifact, choosing the format by its name.
pub fn parse_artifact(
    name: &str,
    zip_bytes: &[u8],
    limits: &ArtifactLimits,
) -> Result<Artifact, ArtifactError> {
    let kind = ArtifactKind::of(name).ok_or_else(|| ArtifactError::UnknownArtifact {
        artifact: name.to_owned(),
    })?;
    let files = unzip(name, zip_bytes, limits)?;
    parse_files(kind, &files)
}

/// Which format an artifact name means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArtifactKind {
    /// `bmk_agentic_<name>`.
    Agentic,
    /// `bmk_<name>`.
    FixedSeqLen,
    /// `results_bmk`.
    AggregatedBenchmarks,
    /// `eval_results_all`.
    Evals,
    /// `klaud-sweep-manifest`.
    Manifest,
}

impl ArtifactKind {
    /// One benchmark job's artifact (`bmk_*`), as opposed to a run-level
    /// one written after every job ended.
    pub fn is_per_point(self) -> bool {
        matches!(self, Self::FixedSeqLen | Self::Agentic)
    }

    /// The kind of an artifact name, if Klaud reads it.
    pub fn of(name: &str) -> Option<Self> {
        match name {
            SWEEP_MANIFEST_ARTIFACT => Some(Self::Manifest),
            AGG_BMK_ARTIFACT => Some(Self::AggregatedBenchmarks),
            AGG_EVAL_ARTIFACT => Some(Self::Evals),
            _ => match name.strip_prefix("bmk_") {
                Some(rest) if rest.starts_with("agentic_") && rest.len() > "agentic_".len() => {
                    Some(Self::Agentic)
                }
                Some(rest) if !rest.is_empty() => Some(Self::FixedSeqLen),
                _ => None,
            },
        }
    }
}

/// Parses already unpacked files as an artifact of `kind`.
pub fn parse_files(kind: ArtifactKind, files: &ArtifactFiles) -> Result<Artifact, ArtifactError> {
    match kind {
        ArtifactKind::Manifest => {
            let (file, value) = json_file(files, SWEEP_MANIFEST_FILE)?;
            let ctx = Ctx::new(&files.artifact, &file);
            Ok(Artifact::Manifest(parse_manifest(&ctx, &value)?))
        }
        ArtifactKind::AggregatedBenchmarks => {
            let (file, value) = json_file(files, AGG_BMK_FILE)?;
            let ctx = Ctx::new(&files.artifact, &file);
            let rows = ctx
                .array(&value, "")?
                .iter()
                .enumerate()
                .map(|(i, row)| parse_benchmark_row(&ctx.at(i), row, None))
                .collect::<Result<_, _>>()?;
            Ok(Artifact::AggregatedBenchmarks { rows })
        }
        ArtifactKind::Evals => {
            let (file, value) = json_file(files, AGG_EVAL_FILE)?;
            let ctx = Ctx::new(&files.artifact, &file);
            let rows = ctx
                .array(&value, "")?
                .iter()
                .enumerate()
                .map(|(i, row)| parse_eval_row(&ctx.at(i), row))
                .collect::<Result<_, _>>()?;
            Ok(Artifact::Evals { rows })
        }
        ArtifactKind::Agentic | ArtifactKind::FixedSeqLen => {
            let agentic = Some(kind == ArtifactKind::Agentic);
            let rows = result_files(files)?
                .into_iter()
                .map(|(file, bytes)| {
                    let value = parse_json(&files.artifact, file, bytes)?;
                    parse_benchmark_row(&Ctx::new(&files.artifact, file), &value, agentic)
                })
                .collect::<Result<_, _>>()?;
            Ok(Artifact::Benchmark {
                name: files.artifact.clone(),
                rows,
            })
        }
    }
}

fn json_file(files: &ArtifactFiles, name: &str) -> Result<(String, Value), ArtifactError> {
    let bytes = files.file(name)?;
    let value = parse_json(&files.artifact, name, bytes)?;
    Ok((name.to_owned(), value))
}

fn parse_json(artifact: &str, file: &str, bytes: &[u8]) -> Result<Value, ArtifactError> {
    serde_json::from_slice(bytes).map_err(|e| ArtifactError::Json {
        artifact: artifact.to_owned(),
        file: file.to_owned(),
        reason: e.to_string(),
    })
}

/// The result files of a per-point artifact, each one JSON row, ordered by
/// path so a report lists them the same way every time. The names vary with
/// the template (`agg_<name>.json`; multi-node `agg_<name>_*.json`; agentic
/// `<name>.json` or `<name>_conc*.json`); when `agg*` files sit next to
/// other JSON (an older layout that bundled the raw result too), only the
/// `agg*` files are rows.
fn result_files(files: &ArtifactFiles) -> Result<Vec<(&str, &[u8])>, ArtifactError> {
    let mut json: Vec<(&str, &[u8])> = files
        .files
        .iter()
        .filter(|(p, _)| p.ends_with(".json"))
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect();
    if json.is_empty() {
        return Err(ArtifactError::MissingFile {
            artifact: files.artifact.clone(),
            file: "*.json".to_owned(),
        });
    }
    if json.iter().any(|(p, _)| base_name(p).starts_with("agg")) {
        json.retain(|(p, _)| base_name(p).starts_with("agg"));
    }
    json.sort_by(|a, b| a.0.cmp(b.0));
    Ok(json)
}

/// Where a field lives, for error messages.
struct Ctx<'a> {
    artifact: &'a str,
    file: &'a str,
    prefix: String,
}

impl<'a> Ctx<'a> {
    fn new(artifact: &'a str, file: &'a str) -> Self {
        Self {
            artifact,
            file,
            prefix: String::new(),
        }
    }

    fn at(&self, index: usize) -> Ctx<'a> {
        Ctx {
            artifact: self.artifact,
            file: self.file,
            prefix: format!("{}[{index}]", self.prefix),
        }
    }

    fn path(&self, field: &str) -> String {
        match (self.prefix.is_empty(), field.is_empty()) {
            (true, true) => "(top level)".to_owned(),
            (true, false) => field.to_owned(),
            (false, true) => self.prefix.clone(),
            (false, false) => format!("{}.{field}", self.prefix),
        }
    }

    fn error(&self, field: &str, problem: impl Into<String>) -> ArtifactError {
        ArtifactError::Field {
            artifact: self.artifact.to_owned(),
            file: self.file.to_owned(),
            field: self.path(field),
            problem: problem.into(),
        }
    }

    fn array<'v>(&self, value: &'v Value, field: &str) -> Result<&'v Vec<Value>, ArtifactError> {
        value
            .as_array()
            .ok_or_else(|| self.error(field, format!("expected a list, found {}", kind(value))))
    }

    fn object<'v>(&self, value: &'v Value) -> Result<&'v Map<String, Value>, ArtifactError> {
        value
            .as_object()
            .ok_or_else(|| self.error("", format!("expected an object, found {}", kind(value))))
    }

    /// Follows a dotted path of objects.
    fn lookup<'v>(
        &self,
        obj: &'v Map<String, Value>,
        path: &str,
    ) -> Result<Option<&'v Value>, ArtifactError> {
        let mut parts = path.split('.');
        let mut current = parts.next().and_then(|first| obj.get(first));
        let mut walked = path.split('.').next().unwrap_or_default().to_owned();
        for part in parts {
            current = match current {
                None | Some(Value::Null) => return Ok(None),
                Some(Value::Object(inner)) => inner.get(part),
                Some(other) => {
                    return Err(self.error(
                        &walked,
                        format!("expected an object, found {}", kind(other)),
                    ));
                }
            };
            walked.push('.');
            walked.push_str(part);
        }
        Ok(current.filter(|v| !v.is_null()))
    }

    fn req_f64(&self, obj: &Map<String, Value>, path: &str) -> Result<f64, ArtifactError> {
        match self.lookup(obj, path)? {
            None => Err(self.error(path, "required number is missing")),
            Some(v) => number(v).ok_or_else(|| {
                self.error(path, format!("expected a finite number, found {}", kind(v)))
            }),
        }
    }

    fn req_u64(&self, obj: &Map<String, Value>, path: &str) -> Result<u64, ArtifactError> {
        match self.lookup(obj, path)? {
            None => Err(self.error(path, "required integer is missing")),
            Some(v) => unsigned(v).ok_or_else(|| {
                self.error(
                    path,
                    format!("expected a non-negative integer, found {}", kind(v)),
                )
            }),
        }
    }

    fn opt_u64(&self, obj: &Map<String, Value>, path: &str) -> Result<Option<u64>, ArtifactError> {
        self.lookup(obj, path)?
            .map(|v| {
                unsigned(v).ok_or_else(|| {
                    self.error(
                        path,
                        format!("expected a non-negative integer, found {}", kind(v)),
                    )
                })
            })
            .transpose()
    }

    fn req_str(&self, obj: &Map<String, Value>, path: &str) -> Result<String, ArtifactError> {
        self.opt_str(obj, path)?
            .ok_or_else(|| self.error(path, "required text is missing"))
    }

    fn opt_str(
        &self,
        obj: &Map<String, Value>,
        path: &str,
    ) -> Result<Option<String>, ArtifactError> {
        match self.lookup(obj, path)? {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            // Workflow versions differ in whether they quote numbers such as `tp`.
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(Value::Bool(b)) => Ok(Some(b.to_string())),
            Some(v) => Err(self.error(path, format!("expected text, found {}", kind(v)))),
        }
    }

    /// Booleans are written as JSON booleans or as the strings "true"/"false"
    /// (the AgentX sample has `"dp_attention": "false"`).
    fn opt_bool(
        &self,
        obj: &Map<String, Value>,
        path: &str,
    ) -> Result<Option<bool>, ArtifactError> {
        match self.lookup(obj, path)? {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => Ok(Some(true)),
            Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => Ok(Some(false)),
            Some(Value::Number(n)) if n.as_u64() == Some(0) => Ok(Some(false)),
            Some(Value::Number(n)) if n.as_u64() == Some(1) => Ok(Some(true)),
            Some(v) => Err(self.error(path, format!("expected true or false, found {}", kind(v)))),
        }
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "text",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn number(v: &Value) -> Option<f64> {
    v.as_f64().filter(|f| f.is_finite())
}

fn unsigned(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64().or_else(|| {
            // Python writes some integers as floats (`4.0`).
            n.as_f64()
                .filter(|f| f.is_finite() && *f >= 0.0 && f.fract() == 0.0 && *f <= 9.0e15)
                .map(|f| f as u64)
        }),
        _ => None,
    }
}

const IDENTITY_FIELDS: &[&str] = &[
    "hw",
    "framework",
    "precision",
    "infmax_model_prefix",
    "model",
    "image",
    "isl",
    "osl",
    "tp",
    "ep",
    "dp_attention",
    "spec_decoding",
    "disagg",
    "is_multinode",
    "num_gpus",
];

fn parse_identity(ctx: &Ctx, obj: &Map<String, Value>) -> Result<PointIdentity, ArtifactError> {
    Ok(PointIdentity {
        hw: ctx.opt_str(obj, "hw")?,
        framework: ctx.opt_str(obj, "framework")?,
        precision: ctx.opt_str(obj, "precision")?,
        model_prefix: ctx.opt_str(obj, "infmax_model_prefix")?,
        model: ctx.opt_str(obj, "model")?,
        image: ctx.opt_str(obj, "image")?,
        isl: ctx.opt_u64(obj, "isl")?,
        osl: ctx.opt_u64(obj, "osl")?,
        tp: ctx.opt_u64(obj, "tp")?,
        ep: ctx.opt_u64(obj, "ep")?,
        dp_attention: ctx.opt_bool(obj, "dp_attention")?,
        spec_decoding: ctx.opt_str(obj, "spec_decoding")?,
        disagg: ctx.opt_bool(obj, "disagg")?,
        is_multinode: ctx.opt_bool(obj, "is_multinode")?,
        num_gpus: ctx.opt_u64(obj, "num_gpus")?,
    })
}

fn extra_fields(obj: &Map<String, Value>, known: &[&str]) -> BTreeMap<String, Value> {
    obj.iter()
        .filter(|(k, _)| !IDENTITY_FIELDS.contains(&k.as_str()) && !known.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// `agentic`: `Some(true)` for AgentX artifacts, `Some(false)` for
/// fixed-seq-len ones, `None` to decide from the row (aggregated files mix
/// both kinds).
fn parse_benchmark_row(
    ctx: &Ctx,
    value: &Value,
    agentic: Option<bool>,
) -> Result<BenchmarkRow, ArtifactError> {
    let obj = ctx.object(value)?;
    let agentic = agentic.unwrap_or_else(|| {
        obj.contains_key("request_metrics")
            || obj
                .get("scenario_type")
                .and_then(Value::as_str)
                .is_some_and(|s| s.starts_with("agentic"))
    });
    let identity = parse_identity(ctx, obj)?;
    let conc = ctx.req_u64(obj, "conc")?;
    if agentic {
        const KNOWN: &[&str] = &[
            "conc",
            "scenario_type",
            "kv_offloading",
            "recipe_fingerprint",
            "num_requests_total",
            "num_requests_successful",
        ];
        let metrics = PointMetrics {
            tput_per_gpu: ctx.req_f64(obj, "request_metrics.throughput.per_gpu.total_tput_tps")?,
            output_tput_per_gpu: ctx
                .req_f64(obj, "request_metrics.throughput.per_gpu.output_tput_tps")?,
            mean_ttft: ctx.req_f64(obj, "request_metrics.latency.ttft.mean")?,
            mean_tpot: ctx.req_f64(obj, "request_metrics.latency.tpot.mean")?,
        };
        Ok(BenchmarkRow::Agentic(AgenticRow {
            conc,
            scenario_type: ctx.opt_str(obj, "scenario_type")?,
            kv_offloading: ctx.opt_str(obj, "kv_offloading")?,
            recipe_fingerprint: ctx.opt_str(obj, "recipe_fingerprint")?,
            num_requests_total: ctx.opt_u64(obj, "num_requests_total")?,
            num_requests_successful: ctx.opt_u64(obj, "num_requests_successful")?,
            identity,
            metrics,
            extra: extra_fields(obj, KNOWN),
        }))
    } else {
        const KNOWN: &[&str] = &[
            "conc",
            "tput_per_gpu",
            "output_tput_per_gpu",
            "mean_ttft",
            "mean_tpot",
        ];
        let metrics = PointMetrics {
            tput_per_gpu: ctx.req_f64(obj, "tput_per_gpu")?,
            output_tput_per_gpu: ctx.req_f64(obj, "output_tput_per_gpu")?,
            mean_ttft: ctx.req_f64(obj, "mean_ttft")?,
            mean_tpot: ctx.req_f64(obj, "mean_tpot")?,
        };
        Ok(BenchmarkRow::FixedSeqLen(FixedSeqRow {
            conc,
            identity,
            metrics,
            extra: extra_fields(obj, KNOWN),
        }))
    }
}

/// Metric fields that stand in for `score` in eval rows without one, in
/// order of preference (lm-eval's strict exact match first).
const SCORE_FALLBACKS: &[&str] = &["em_strict", "em_flexible", "acc", "exact_match"];

fn parse_eval_row(ctx: &Ctx, value: &Value) -> Result<EvalRow, ArtifactError> {
    let obj = ctx.object(value)?;
    let (score, score_name) = if ctx.lookup(obj, "score")?.is_some() {
        let score = ctx.req_f64(obj, "score")?;
        let name = ctx
            .opt_str(obj, "score_name")?
            .unwrap_or_else(|| "score".to_owned());
        (score, name)
    } else {
        let mut found = None;
        for field in SCORE_FALLBACKS {
            if ctx.lookup(obj, field)?.is_some() {
                found = Some((ctx.req_f64(obj, field)?, (*field).to_owned()));
                break;
            }
        }
        found.ok_or_else(|| {
            ctx.error(
                "score",
                format!(
                    "required number is missing (nor any of {})",
                    SCORE_FALLBACKS.join(", ")
                ),
            )
        })?
    };
    const KNOWN: &[&str] = &["task", "conc", "score", "score_name", "n_eff"];
    Ok(EvalRow {
        task: ctx.req_str(obj, "task")?,
        conc: ctx.req_u64(obj, "conc")?,
        score,
        score_name,
        n_eff: ctx.opt_u64(obj, "n_eff")?,
        identity: parse_identity(ctx, obj)?,
        extra: extra_fields(obj, KNOWN),
    })
}

fn parse_manifest(ctx: &Ctx, value: &Value) -> Result<SweepManifest, ArtifactError> {
    let obj = ctx.object(value)?;
    let head = ctx.req_str(obj, "head")?;
    if head.len() != 40 || !head.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ctx.error("head", "expected a 40-hex commit sha"));
    }
    let run_attempt = ctx.req_u64(obj, "run-attempt")?;
    let run_attempt =
        u32::try_from(run_attempt).map_err(|_| ctx.error("run-attempt", "is out of range"))?;
    let full_sweep = match ctx.lookup(obj, "full-sweep")? {
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            return Err(ctx.error(
                "full-sweep",
                format!("expected true or false, found {}", kind(v)),
            ));
        }
        None => return Err(ctx.error("full-sweep", "required boolean is missing")),
    };
    Ok(SweepManifest {
        head: head.to_ascii_lowercase(),
        run_id: ctx.req_u64(obj, "run-id")?,
        run_attempt,
        full_sweep,
        extra: obj
            .iter()
            .filter(|(k, _)| !["head", "run-id", "run-attempt", "full-sweep"].contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    pub(crate) fn zip_of(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        {
            let mut w = zip::ZipWriter::new(&mut out);
            let opts = zip::write::SimpleFileOptions::default()
                .compression_method(zip::CompressionMethod::Deflated);
            for (name, data) in files {
                w.start_file(*name, opts).expect("start");
                w.write_all(data).expect("write");
            }
            w.finish().expect("finish");
        }
        out.into_inner()
    }

    const FIXED_ROW: &str = r#"{"hw":"b200","conc":64,"image":"lmsysorg/sglang:v0.5.16-cu130","model":"nvidia/DeepSeek-R1","infmax_model_prefix":"dsr1","framework":"sglang","precision":"fp4","spec_decoding":"none","disagg":false,"isl":8192,"osl":1024,"is_multinode":false,"tp":4,"ep":4,"dp_attention":true,"tput_per_gpu":1200.5,"output_tput_per_gpu":110.25,"input_tput_per_gpu":1090.25,"mean_ttft":0.5,"mean_tpot":0.02,"p99_ttft":1.5}"#;

    #[test]
    fn fixed_seq_len_row_parses_with_identity_and_keeps_unknown_fields() {
        let zip = zip_of(&[("agg_dsr1_b200.json", FIXED_ROW.as_bytes())]);
        let parsed =
            parse_artifact("bmk_dsr1_b200_tp4", &zip, &ArtifactLimits::default()).expect("parses");
        let Artifact::Benchmark { mut rows, .. } = parsed else {
            panic!("wrong kind: {parsed:?}");
        };
        assert_eq!(rows.len(), 1);
        let Some(BenchmarkRow::FixedSeqLen(row)) = rows.pop() else {
            panic!("not a fixed-seq-len row");
        };
        assert_eq!(row.conc, 64);
        assert_eq!(row.identity.isl, Some(8192));
        assert_eq!(row.identity.dp_attention, Some(true));
        assert_eq!(row.metrics.output_tput_per_gpu, 110.25);
        assert_eq!(row.metrics.mean_ttft, 0.5);
        assert!(row.extra.contains_key("p99_ttft"));
        assert!(row.extra.contains_key("input_tput_per_gpu"));
        assert!(!row.extra.contains_key("conc"));
    }

    #[test]
    fn multi_file_artifacts_give_every_row_in_path_order() {
        let row = |conc: u32| FIXED_ROW.replace(r#""conc":64"#, &format!(r#""conc":{conc}"#));
        let (a, b, c) = (row(16), row(4), row(8));
        // Multi-node: several agg_<name>_*.json, archive order scrambled.
        let zip = zip_of(&[
            ("agg_r_conc16_gb200.json", a.as_bytes()),
            ("agg_r_conc4_gb200.json", b.as_bytes()),
            ("agg_r_conc8_gb200.json", c.as_bytes()),
        ]);
        let limits = ArtifactLimits::default();
        let Artifact::Benchmark { rows, .. } = parse_artifact("bmk_r", &zip, &limits).unwrap()
        else {
            panic!("not a benchmark artifact");
        };
        let concs: Vec<u64> = rows.iter().map(BenchmarkRow::conc).collect();
        assert_eq!(concs, [16, 4, 8], "ordered by file path, not by archive");
        let reversed = zip_of(&[
            ("agg_r_conc8_gb200.json", c.as_bytes()),
            ("agg_r_conc4_gb200.json", b.as_bytes()),
            ("agg_r_conc16_gb200.json", a.as_bytes()),
        ]);
        let Artifact::Benchmark { rows: again, .. } =
            parse_artifact("bmk_r", &reversed, &limits).unwrap()
        else {
            panic!("not a benchmark artifact");
        };
        assert_eq!(again, rows, "the same rows in the same order");
        // An older bundle: agg_* next to the raw result: only agg_* are rows.
        let zip = zip_of(&[("r.json", b"{}"), ("agg_r.json", a.as_bytes())]);
        let Artifact::Benchmark { rows, .. } = parse_artifact("bmk_r", &zip, &limits).unwrap()
        else {
            panic!("not a benchmark artifact");
        };
        assert_eq!(rows.len(), 1);
    }

    #[test]
    fn missing_required_field_names_artifact_file_and_field() {
        let row = FIXED_ROW.replace(r#""mean_tpot":0.02,"#, "");
        let zip = zip_of(&[("r.json", row.as_bytes())]);
        let err = parse_artifact("bmk_x", &zip, &ArtifactLimits::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "artifact bmk_x, file r.json, field mean_tpot: required number is missing"
        );
        let row = FIXED_ROW.replace(r#""conc":64"#, r#""conc":"many""#);
        let zip = zip_of(&[("r.json", row.as_bytes())]);
        let err = parse_artifact("bmk_x", &zip, &ArtifactLimits::default()).unwrap_err();
        assert!(
            err.to_string()
                .contains("field conc: expected a non-negative integer, found text"),
            "{err}"
        );
    }

    #[test]
    fn manifest_requires_its_four_fields() {
        let good = r#"{"head":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","run-id":123,"run-attempt":1,"full-sweep":false,"matrix":{}}"#;
        let zip = zip_of(&[(SWEEP_MANIFEST_FILE, good.as_bytes())]);
        let Artifact::Manifest(m) =
            parse_artifact(SWEEP_MANIFEST_ARTIFACT, &zip, &ArtifactLimits::default()).expect("ok")
        else {
            panic!("not a manifest")
        };
        assert_eq!((m.run_id, m.run_attempt, m.full_sweep), (123, 1, false));
        assert!(m.extra.contains_key("matrix"));

        let bad = good.replace(r#""full-sweep":false"#, r#""full-sweep":"no""#);
        let zip = zip_of(&[(SWEEP_MANIFEST_FILE, bad.as_bytes())]);
        let err =
            parse_artifact(SWEEP_MANIFEST_ARTIFACT, &zip, &ArtifactLimits::default()).unwrap_err();
        assert!(
            err.to_string()
                .contains("field full-sweep: expected true or false"),
            "{err}"
        );

        let bad = good.replace("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "main");
        let zip = zip_of(&[(SWEEP_MANIFEST_FILE, bad.as_bytes())]);
        let err =
            parse_artifact(SWEEP_MANIFEST_ARTIFACT, &zip, &ArtifactLimits::default()).unwrap_err();
        assert!(
            err.to_string()
                .contains("field head: expected a 40-hex commit sha"),
            "{err}"
        );
    }

    #[test]
    fn eval_rows_take_score_or_a_known_metric() {
        let rows = r#"[{"task":"gsm8k","conc":28,"score":0.97,"score_name":"em_strict","n_eff":1319},
                       {"task":"gsm8k","conc":4,"em_strict":0.5,"em_flexible":1.0,"n_eff":2,"hw":"h200-nv"}]"#;
        let zip = zip_of(&[(AGG_EVAL_FILE, rows.as_bytes())]);
        let Artifact::Evals { rows } =
            parse_artifact(AGG_EVAL_ARTIFACT, &zip, &ArtifactLimits::default()).expect("ok")
        else {
            panic!("not evals")
        };
        assert_eq!(rows[0].score, 0.97);
        assert_eq!(rows[1].score_name, "em_strict");
        assert!(rows[1].extra.contains_key("em_flexible"));

        let zip = zip_of(&[(AGG_EVAL_FILE, br#"[{"task":"gsm8k","conc":1}]"#)]);
        let err = parse_artifact(AGG_EVAL_ARTIFACT, &zip, &ArtifactLimits::default()).unwrap_err();
        assert!(
            err.to_string()
                .contains("field [0].score: required number is missing"),
            "{err}"
        );
    }

    #[test]
    fn malformed_inputs_end_in_clear_errors() {
        let limits = ArtifactLimits::default();
        let err = parse_artifact("bmk_x", b"not a zip", &limits).unwrap_err();
        assert!(matches!(err, ArtifactError::Zip { .. }), "{err}");
        let zip = zip_of(&[("a.json", b"{")]);
        assert!(matches!(
            parse_artifact("bmk_x", &zip, &limits).unwrap_err(),
            ArtifactError::Json { .. }
        ));
        let zip = zip_of(&[("a.txt", b"{}")]);
        assert!(matches!(
            parse_artifact("bmk_x", &zip, &limits).unwrap_err(),
            ArtifactError::MissingFile { .. }
        ));
        // Several result files are several rows; a broken one names itself.
        let zip = zip_of(&[("a.json", b"{}"), ("b.json", b"{")]);
        let err = parse_artifact("bmk_x", &zip, &limits).unwrap_err();
        assert!(err.to_string().contains("file a.json"), "{err}");
        let zip = zip_of(&[("a.json", b"[1,2]")]);
        let err = parse_artifact("bmk_x", &zip, &limits).unwrap_err();
        assert!(
            err.to_string().contains("expected an object, found a list"),
            "{err}"
        );
        let zip = zip_of(&[(AGG_BMK_FILE, b"{}")]);
        let err = parse_artifact(AGG_BMK_ARTIFACT, &zip, &limits).unwrap_err();
        assert!(err.to_string().contains("expected a list"), "{err}");
        assert!(matches!(
            parse_artifact("logs", &zip, &limits).unwrap_err(),
            ArtifactError::UnknownArtifact { .. }
        ));
        let row = r#"{"conc":1,"request_metrics":{"throughput":7}}"#;
        let zip = zip_of(&[("agg.json", row.as_bytes())]);
        let err = parse_artifact("bmk_agentic_x", &zip, &limits).unwrap_err();
        assert!(
            err.to_string()
                .contains("field request_metrics.throughput: expected an object, found a number"),
            "{err}"
        );
    }

    #[test]
    fn zip_bombs_are_stopped_by_inflated_size_not_declared_size() {
        let zeros = vec![0u8; 2 * 1024 * 1024];
        let zip = zip_of(&[("agg.json", &zeros)]);
        assert!(zip.len() < 64 * 1024, "deflate should shrink zeros");
        let limits = ArtifactLimits {
            max_file_bytes: 1024 * 1024,
            ..ArtifactLimits::default()
        };
        let err = unzip("bmk_x", &zip, &limits).unwrap_err();
        assert!(matches!(err, ArtifactError::TooLarge { .. }), "{err}");

        let limits = ArtifactLimits {
            max_total_bytes: 3 * 1024 * 1024,
            ..ArtifactLimits::default()
        };
        let zip = zip_of(&[("a", &zeros), ("b", &zeros)]);
        let err = unzip("bmk_x", &zip, &limits).unwrap_err();
        assert!(err.to_string().contains("total inflated size"), "{err}");

        let limits = ArtifactLimits {
            max_entries: 2,
            ..ArtifactLimits::default()
        };
        let zip = zip_of(&[("a", b"1"), ("b", b"2"), ("c", b"3")]);
        assert!(
            unzip("bmk_x", &zip, &limits)
                .unwrap_err()
                .to_string()
                .contains("entry count 3")
        );

        let limits = ArtifactLimits {
            max_archive_bytes: 10,
            ..ArtifactLimits::default()
        };
        assert!(matches!(
            unzip("bmk_x", &zip, &limits).unwrap_err(),
            ArtifactError::TooLarge { .. }
        ));
    }

    #[test]
    fn artifact_kinds_follow_names() {
        assert_eq!(
            ArtifactKind::of("bmk_agentic_x"),
            Some(ArtifactKind::Agentic)
        );
        assert_eq!(ArtifactKind::of("bmk_x"), Some(ArtifactKind::FixedSeqLen));
        assert_eq!(
            ArtifactKind::of("bmk_agentic_"),
            Some(ArtifactKind::FixedSeqLen)
        );
        assert_eq!(ArtifactKind::of("bmk_"), None);
        assert_eq!(
            ArtifactKind::of("klaud-sweep-manifest"),
            Some(ArtifactKind::Manifest)
        );
        assert_eq!(ArtifactKind::of("agentic_x"), None);
    }
}
