//! Families and their benchmark points, read from master-config text the
//! way the InferenceX sweep generator expands them.

use serde_json::Value;

/// Most points one family may expand to (the real masters stay far below);
/// a hostile config must not make the simulator allocate without bound.
pub const MAX_POINTS: usize = 4096;

/// A master entry the simulator runs.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilySpec {
    /// `configs/<file>:<key>`.
    pub family: String,
    /// Config key.
    pub key: String,
    /// Image as written in the master (unquoted).
    pub image: String,
    /// `model`.
    pub model: String,
    /// `model-prefix`.
    pub model_prefix: String,
    /// `runner`.
    pub runner: String,
    /// `precision`.
    pub precision: String,
    /// `framework`.
    pub framework: String,
    /// `multinode`.
    pub multinode: bool,
    /// The expanded points, in config order.
    pub points: Vec<Point>,
}

/// Parallelism of the server (single node) or of one role (disaggregated).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Workers {
    /// Worker count (disaggregated roles).
    pub num_workers: u64,
    pub tp: u64,
    pub ep: u64,
    pub dp_attn: bool,
}

/// One benchmark point.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Point {
    /// `None` for agentic points.
    pub isl: Option<u64>,
    pub osl: Option<u64>,
    pub conc: u64,
    /// `none`, `mtp`, …
    pub spec_decoding: String,
    /// `none` unless set.
    pub kv_offloading: String,
    /// The server, or the decode workers of a disaggregated point.
    pub decode: Workers,
    /// Prefill workers of a disaggregated point.
    pub prefill: Option<Workers>,
}

impl Point {
    /// Whether this is an AgentX point.
    pub fn agentic(&self) -> bool {
        self.isl.is_none()
    }

    /// GPUs the point occupies.
    pub fn num_gpus(&self) -> u64 {
        let role = |w: &Workers| w.tp.saturating_mul(w.num_workers.max(1));
        match &self.prefill {
            Some(p) => role(p).saturating_add(role(&self.decode)),
            None => self.decode.tp.max(1),
        }
    }

    /// A stable, artifact-name-safe description, e.g.
    /// `8192_1024_tp4_ep1_dpafalse_conc32` or `agentic_tp4_ep1_dpafalse_conc8`.
    pub fn slug(&self) -> String {
        format!("{}_conc{}", self.shape_slug(), self.conc)
    }

    /// [`Point::slug`] without the concurrency: what the points of one sweep
    /// line share.
    pub fn shape_slug(&self) -> String {
        let topo = match &self.prefill {
            Some(p) => format!(
                "p{}x{}ep{}dpa{}_d{}x{}ep{}dpa{}",
                p.tp,
                p.num_workers,
                p.ep,
                p.dp_attn,
                self.decode.tp,
                self.decode.num_workers,
                self.decode.ep,
                self.decode.dp_attn
            ),
            None => format!(
                "tp{}_ep{}_dpa{}",
                self.decode.tp, self.decode.ep, self.decode.dp_attn
            ),
        };
        let mut s = match (self.isl, self.osl) {
            (Some(i), Some(o)) => format!("{i}_{o}_{topo}"),
            _ => format!("agentic_{topo}"),
        };
        if self.spec_decoding != "none" {
            s.push('_');
            s.push_str(&sanitize(&self.spec_decoding));
        }
        if self.kv_offloading != "none" {
            s.push_str("_kv");
            s.push_str(&sanitize(&self.kv_offloading));
        }
        s
    }
}

/// Keeps `[A-Za-z0-9._-]`, replacing anything else with `-`: artifact names
/// may not contain `/`, `:` and the like.
pub fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// Why a family could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{family}: {reason}")]
pub struct PointsError {
    pub family: String,
    pub reason: String,
}

/// Parses a master file's text into JSON (PyYAML scalar rules, like the
/// benchmark's own tooling).
pub fn parse_master(path: &str, text: &str) -> Result<Value, PointsError> {
    let fail = |reason: String| PointsError {
        family: path.to_string(),
        reason,
    };
    let (doc, _) = klaud_planner::yaml::parse_lenient(text).map_err(|e| fail(e.to_string()))?;
    let doc = doc.map(|d| d.to_json()).unwrap_or(Value::Null);
    match doc {
        Value::Object(_) => Ok(doc),
        Value::Null => Ok(Value::Object(Default::default())),
        _ => Err(fail("expected a mapping of config key → entry".into())),
    }
}

/// Reads one entry of a parsed master file.
pub fn family_spec(file: &str, key: &str, master: &Value) -> Result<FamilySpec, PointsError> {
    let family = format!("{file}:{key}");
    let fail = |reason: String| PointsError {
        family: family.clone(),
        reason,
    };
    let entry = master
        .get(key)
        .ok_or_else(|| fail(format!("no config key {key:?} in {file}")))?;
    if !entry.is_object() {
        return Err(fail("the entry is not a mapping".into()));
    }
    let field = |name: &str| -> Result<String, PointsError> {
        text(entry, name).ok_or_else(|| fail(format!("`{name}` is missing or not text")))
    };
    Ok(FamilySpec {
        family: family.clone(),
        key: key.to_string(),
        image: field("image")?,
        model: field("model")?,
        model_prefix: field("model-prefix")?,
        runner: field("runner")?,
        precision: field("precision")?,
        framework: field("framework")?,
        multinode: entry
            .get("multinode")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        points: points(entry).map_err(fail)?,
    })
}

fn text(v: &Value, key: &str) -> Option<String> {
    match v.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn uint(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

/// Expands `scenarios` into points: `conc-start`..`conc-end` doubles (as
/// the InferenceX sweep generator does), `conc-list` is taken as written;
/// duplicates are dropped and unknown scenarios ignored.
fn points(entry: &Value) -> Result<Vec<Point>, String> {
    let Some(scenarios) = entry.get("scenarios").and_then(Value::as_object) else {
        return Err("`scenarios` is missing or not a mapping".into());
    };
    let mut out: Vec<Point> = Vec::new();
    for (name, blocks) in scenarios {
        let agentic = match name.as_str() {
            "fixed-seq-len" => false,
            "agentic-coding" => true,
            _ => continue,
        };
        let blocks = blocks
            .as_array()
            .ok_or_else(|| format!("scenarios.{name} is not a list"))?;
        for (bi, block) in blocks.iter().enumerate() {
            let at = format!("scenarios.{name}[{bi}]");
            let (isl, osl) = if agentic {
                (None, None)
            } else {
                (
                    Some(uint(block, "isl").ok_or_else(|| format!("{at}.isl is missing"))?),
                    Some(uint(block, "osl").ok_or_else(|| format!("{at}.osl is missing"))?),
                )
            };
            let spaces = block
                .get("search-space")
                .and_then(Value::as_array)
                .ok_or_else(|| format!("{at}.search-space is not a list"))?;
            for (si, space) in spaces.iter().enumerate() {
                let at = format!("{at}.search-space[{si}]");
                let (decode, prefill) = match (space.get("prefill"), space.get("decode")) {
                    (Some(p), Some(d)) => (
                        workers(d, true).map_err(|r| format!("{at}.decode: {r}"))?,
                        Some(workers(p, true).map_err(|r| format!("{at}.prefill: {r}"))?),
                    ),
                    (None, None) => (
                        workers(space, false).map_err(|r| format!("{at}: {r}"))?,
                        None,
                    ),
                    _ => return Err(format!("{at}: prefill and decode must come together")),
                };
                for conc in klaud_planner::search_space::concurrencies(space)
                    .map_err(|r| format!("{at}: {r}"))?
                {
                    let point = Point {
                        isl,
                        osl,
                        conc,
                        spec_decoding: text(space, "spec-decoding")
                            .unwrap_or_else(|| "none".into()),
                        kv_offloading: text(space, "kv-offloading")
                            .unwrap_or_else(|| "none".into()),
                        decode,
                        prefill,
                    };
                    if !out.contains(&point) {
                        if out.len() >= MAX_POINTS {
                            return Err(format!("more than {MAX_POINTS} points"));
                        }
                        out.push(point);
                    }
                }
            }
        }
    }
    Ok(out)
}

fn workers(v: &Value, role: bool) -> Result<Workers, String> {
    let tp = uint(v, "tp")
        .filter(|t| *t > 0)
        .ok_or("tp is missing or not a positive integer")?;
    let ep = match v.get("ep") {
        None | Some(Value::Null) => 1,
        Some(e) => e.as_u64().ok_or("ep is not an integer")?,
    };
    let dp_attn = match v.get("dp-attn") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err("dp-attn is not true or false".into()),
    };
    let num_workers = if role {
        uint(v, "num-worker").unwrap_or(1)
    } else {
        1
    };
    Ok(Workers {
        num_workers,
        tp,
        ep,
        dp_attn,
    })
}

/// Config keys named in a `generate-cli-command` input
/// (`test-config --config-files <file>... --config-keys <key>... --smoke`):
/// `(files, keys)`.
pub fn parse_cli_command(cmd: &str) -> (Vec<String>, Vec<String>) {
    let mut files = Vec::new();
    let mut keys = Vec::new();
    let mut target: Option<&mut Vec<String>> = None;
    for token in cmd.split_whitespace() {
        let token = token.trim_matches(|c| c == '"' || c == '\'');
        if token == "--config-files" {
            target = Some(&mut files);
        } else if token == "--config-keys" {
            target = Some(&mut keys);
        } else if token.starts_with("--") {
            target = None;
        } else if let Some(list) = target.as_deref_mut() {
            // The generator also accepts comma-separated lists.
            list.extend(
                token
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string),
            );
        }
    }
    (files, keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MASTER: &str = r#"
a-fp4-b200-sglang:
  image: lmsysorg/sglang:v0.5.16-cu130
  model: demo/Demo-R1-FP4
  model-prefix: demo
  runner: b200
  precision: fp4
  framework: sglang
  multinode: false
  scenarios:
    fixed-seq-len:
    - isl: 8192
      osl: 1024
      search-space:
      - { tp: 4, ep: 1, conc-start: 1, conc-end: 32 }
      - { tp: 4, ep: 1, conc-list: [32] }
    agentic-coding:
    - search-space:
      - { tp: 8, spec-decoding: mtp, conc-list: [4] }
disagg:
  image: "vllm/vllm-openai:v0.25.0"
  model: m
  model-prefix: p
  runner: gb200
  precision: fp4
  framework: dynamo-vllm
  multinode: true
  scenarios:
    fixed-seq-len:
    - isl: 1024
      osl: 1024
      search-space:
      - conc-list: [64]
        prefill: { num-worker: 2, tp: 8, ep: 8, dp-attn: true }
        decode: { num-worker: 1, tp: 4 }
"#;

    #[test]
    fn expands_ranges_lists_agentic_and_disaggregated_points() {
        let doc = parse_master("configs/x-master.yaml", MASTER).unwrap();
        let f = family_spec("configs/x-master.yaml", "a-fp4-b200-sglang", &doc).unwrap();
        assert_eq!(f.family, "configs/x-master.yaml:a-fp4-b200-sglang");
        let concs: Vec<u64> = f.points.iter().map(|p| p.conc).collect();
        // 1..32 doubling, the duplicate 32 dropped, then the agentic point.
        assert_eq!(concs, vec![1, 2, 4, 8, 16, 32, 4]);
        let agentic = f.points.last().unwrap();
        assert!(agentic.agentic());
        assert_eq!(agentic.slug(), "agentic_tp8_ep1_dpafalse_mtp_conc4");
        assert_eq!(f.points[0].slug(), "8192_1024_tp4_ep1_dpafalse_conc1");

        let d = family_spec("configs/x-master.yaml", "disagg", &doc).unwrap();
        assert_eq!(d.image, "vllm/vllm-openai:v0.25.0");
        assert!(d.multinode);
        assert_eq!(d.points[0].num_gpus(), 8 * 2 + 4);
        assert_eq!(
            d.points[0].slug(),
            "1024_1024_p8x2ep8dpatrue_d4x1ep1dpafalse_conc64"
        );
    }

    #[test]
    fn malformed_entries_give_errors_naming_the_family_and_field() {
        let doc = parse_master(
            "f",
            "k:\n  image: i\n  model: m\n  model-prefix: p\n  runner: r\n  precision: x\n  framework: y\n  scenarios:\n    fixed-seq-len:\n    - isl: 1\n      osl: 1\n      search-space:\n      - { tp: 0, conc-list: [1] }\n",
        )
        .unwrap();
        let e = family_spec("f", "k", &doc).unwrap_err().to_string();
        assert!(
            e.contains("f:k") && e.contains("search-space[0]") && e.contains("tp"),
            "{e}"
        );
        let e = family_spec("f", "missing", &doc).unwrap_err().to_string();
        assert!(e.contains("no config key"), "{e}");
        assert!(parse_master("f", "- a\n- b\n").is_err());
        assert!(parse_master("f", "a: [\n").is_err());
    }

    #[test]
    fn cli_command_names_files_and_keys() {
        let (f, k) = parse_cli_command(
            "test-config --config-files configs/nvidia-master.yaml --config-keys a-b,c --smoke",
        );
        assert_eq!(f, vec!["configs/nvidia-master.yaml"]);
        assert_eq!(k, vec!["a-b", "c"]);
        assert_eq!(parse_cli_command(""), (vec![], vec![]));
    }
}
