//! Applying a [`Fix`] to a recipe or launcher script, byte-exactly.
//!
//! Only the one value token changes (or one `export` line is added or
//! removed); every other byte stays as it was, as a bump's edit does. A fix
//! that cannot be placed with certainty is refused: the argument absent or
//! written twice, its value not the expected one or not a literal, the value
//! already the target (a fix is never applied twice).

use std::sync::LazyLock;

use regex::Regex;

use super::model::Fix;

/// What applying a fix did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The whole script after the edit.
    pub text: String,
    /// 1-based line that changed, was added or was removed.
    pub line: usize,
    /// That line before the edit (`None`: the line was added).
    pub before: Option<String>,
    /// That line after the edit (`None`: the line was removed).
    pub after: Option<String>,
}

/// Why a fix was not applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FixError {
    /// The argument or variable is not in the script.
    #[error("{what} is not in the script")]
    Absent {
        /// `--name` or `export NAME`.
        what: String,
    },
    /// It is written more than once, so which one is meant is unclear.
    #[error("{what} is written {} times (lines {}): which one to change is unclear", lines.len(), join(lines))]
    Ambiguous {
        /// `--name` or `export NAME`.
        what: String,
        /// Its lines.
        lines: Vec<usize>,
    },
    /// It already has the value the fix gives.
    #[error("{what} already is {value} (line {line}): the fix is not applied twice")]
    AlreadyApplied {
        /// `--name` or `export NAME`.
        what: String,
        /// The value.
        value: String,
        /// Its line.
        line: usize,
    },
    /// Its value is not the one the fix is for.
    #[error("{what} is {found} on line {line}, not {expected}: the fix is for {expected}")]
    ValueMismatch {
        /// `--name`.
        what: String,
        /// The value the fix needs.
        expected: String,
        /// The value found.
        found: String,
        /// Its line.
        line: usize,
    },
    /// Its value is computed (a variable, an expansion), not a literal.
    #[error(
        "{what} on line {line} is {found}, not a literal value: Klaud changes only literal values"
    )]
    NotLiteral {
        /// `--name` or `export NAME`.
        what: String,
        /// The value as written.
        found: String,
        /// Its line.
        line: usize,
    },
    /// No single place to add an `export` line: the script launches no
    /// engine Klaud recognises, or launches it in several places without a
    /// top-level `export` before them.
    #[error("no single place to add export {name}: {reason}")]
    NoPlace {
        /// The variable.
        name: String,
        /// Why.
        reason: String,
    },
}

fn join(lines: &[usize]) -> String {
    lines
        .iter()
        .map(|l| l.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a literal value may be made of: what the playbook's own values are
/// checked against too, so nothing it writes can run code.
pub(crate) static SAFE_VALUE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z0-9._:/+@%-]{1,200}$").expect("static regex"));

static LAUNCH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^(\s*)(?:exec\s+)?(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*(?:vllm\s+serve|python3?\s+-m\s+(?:sglang\.launch_server|vllm\.entrypoints\S*|atom\S*|dynamo\S*)|trtllm-serve|sglang\s+serve)\b",
    )
    .expect("static regex")
});

/// One line of the script: its byte range (without the newline).
struct Line<'a> {
    start: usize,
    text: &'a str,
}

fn lines(script: &str) -> Vec<Line<'_>> {
    let mut out = Vec::new();
    let mut start = 0;
    for piece in script.split_inclusive('\n') {
        let text = piece.strip_suffix('\n').unwrap_or(piece);
        let text = text.strip_suffix('\r').unwrap_or(text);
        out.push(Line { start, text });
        start += piece.len();
    }
    out
}

fn is_comment(line: &str) -> bool {
    line.trim_start().starts_with('#')
}

/// A value token found in the script.
struct Token {
    line: usize,
    /// Byte range of the value itself (inside any quotes).
    range: std::ops::Range<usize>,
    value: String,
}

impl Fix {
    /// Applies the fix to a script's text, changing only its one token or
    /// line.
    pub fn apply(&self, script: &str) -> Result<Applied, FixError> {
        match self {
            Fix::SetArg { name, from, to } => set_arg(script, name, from.as_deref(), to),
            Fix::SetEnv { name, value } => set_env(script, name, value),
            Fix::UnsetEnv { name } => unset_env(script, name),
        }
    }
}

/// Strips one pair of matching quotes around a token, returning the inner
/// byte range.
fn unquote(token: &str, at: usize) -> (std::ops::Range<usize>, &str) {
    let b = token.as_bytes();
    if b.len() >= 2 && (b[0] == b'"' || b[0] == b'\'') && b[b.len() - 1] == b[0] {
        (at + 1..at + token.len() - 1, &token[1..token.len() - 1])
    } else {
        (at..at + token.len(), token)
    }
}

fn arg_tokens(script: &str, name: &str) -> Vec<Token> {
    let flag = Regex::new(&format!(
        r#"(?:^|[\s"'(\[])--{}(?:=|[ \t]+)("[^"\s]*"|'[^'\s]*'|[^\s"')\]]+)"#,
        regex::escape(name)
    ))
    .expect("escaped name");
    let key = Regex::new(&format!(
        r#"^\s*(?:-\s+)?{}:[ \t]+("[^"\n]*"|'[^'\n]*'|[^\s#]+)[ \t]*(?:#.*)?$"#,
        regex::escape(name)
    ))
    .expect("escaped name");
    let mut out = Vec::new();
    for (i, line) in lines(script).iter().enumerate() {
        if is_comment(line.text) {
            continue;
        }
        for re in [&flag, &key] {
            for c in re.captures_iter(line.text) {
                let m = c.get(1).expect("group 1");
                let (range, value) = unquote(m.as_str(), line.start + m.start());
                out.push(Token {
                    line: i + 1,
                    range,
                    value: value.to_owned(),
                });
            }
        }
    }
    out
}

fn one(tokens: Vec<Token>, what: &str) -> Result<Token, FixError> {
    match tokens.len() {
        0 => Err(FixError::Absent {
            what: what.to_owned(),
        }),
        1 => Ok(tokens.into_iter().next().expect("one")),
        _ => Err(FixError::Ambiguous {
            what: what.to_owned(),
            lines: tokens.iter().map(|t| t.line).collect(),
        }),
    }
}

fn splice(script: &str, token: &Token, to: &str) -> Applied {
    let mut text = String::with_capacity(script.len() + to.len());
    text.push_str(&script[..token.range.start]);
    text.push_str(to);
    text.push_str(&script[token.range.end..]);
    let before = lines(script)[token.line - 1].text.to_owned();
    let after = lines(&text)[token.line - 1].text.to_owned();
    Applied {
        text,
        line: token.line,
        before: Some(before),
        after: Some(after),
    }
}

fn set_arg(script: &str, name: &str, from: Option<&str>, to: &str) -> Result<Applied, FixError> {
    let what = format!("--{name}");
    let token = one(arg_tokens(script, name), &what)?;
    if token.value == to {
        return Err(FixError::AlreadyApplied {
            what,
            value: token.value,
            line: token.line,
        });
    }
    if !SAFE_VALUE.is_match(&token.value) {
        return Err(FixError::NotLiteral {
            what,
            found: token.value,
            line: token.line,
        });
    }
    if let Some(from) = from
        && token.value != from
    {
        return Err(FixError::ValueMismatch {
            what,
            expected: from.to_owned(),
            found: token.value,
            line: token.line,
        });
    }
    Ok(splice(script, &token, to))
}

fn export_regex(name: &str) -> Regex {
    Regex::new(&format!(
        r#"^(\s*)export[ \t]+{}=("[^"]*"|'[^']*'|[^\s;#]*)"#,
        regex::escape(name)
    ))
    .expect("escaped name")
}

fn env_tokens(script: &str, name: &str) -> Vec<Token> {
    let re = export_regex(name);
    let mut out = Vec::new();
    for (i, line) in lines(script).iter().enumerate() {
        if let Some(c) = re.captures(line.text) {
            let m = c.get(2).expect("group 2");
            let (range, value) = unquote(m.as_str(), line.start + m.start());
            out.push(Token {
                line: i + 1,
                range,
                value: value.to_owned(),
            });
        }
    }
    out
}

fn set_env(script: &str, name: &str, value: &str) -> Result<Applied, FixError> {
    let what = format!("export {name}");
    let tokens = env_tokens(script, name);
    if !tokens.is_empty() {
        let token = one(tokens, &what)?;
        if token.value == value {
            return Err(FixError::AlreadyApplied {
                what,
                value: token.value,
                line: token.line,
            });
        }
        if !token.value.is_empty() && !SAFE_VALUE.is_match(&token.value) {
            return Err(FixError::NotLiteral {
                what,
                found: token.value,
                line: token.line,
            });
        }
        return Ok(splice(script, &token, value));
    }
    let all = lines(script);
    let launches: Vec<usize> = all
        .iter()
        .enumerate()
        .filter(|(_, l)| !is_comment(l.text) && LAUNCH.is_match(l.text))
        .map(|(i, _)| i)
        .collect();
    let no_place = |reason: String| FixError::NoPlace {
        name: name.to_owned(),
        reason,
    };
    let Some(&first) = launches.first() else {
        return Err(no_place(
            "the script launches no engine Klaud recognises".into(),
        ));
    };
    // Where the export goes, and with which indentation: right before the
    // one launch, or after the last top-level export before the first of
    // several launches (an export inside one branch would miss the others).
    let (at, indent) = if launches.len() == 1 {
        let indent = LAUNCH
            .captures(all[first].text)
            .and_then(|c| c.get(1))
            .map_or("", |m| m.as_str());
        (first, indent.to_owned())
    } else {
        let last_export = all[..first]
            .iter()
            .rposition(|l| l.text.starts_with("export "))
            .ok_or_else(|| {
                no_place(format!(
                    "the engine is launched on {} lines ({}) and no top-level export comes before them",
                    launches.len(),
                    join(&launches.iter().map(|i| i + 1).collect::<Vec<_>>())
                ))
            })?;
        (last_export + 1, String::new())
    };
    let newline = if script.contains("\r\n") {
        "\r\n"
    } else {
        "\n"
    };
    let added = format!("{indent}export {name}={value}");
    let offset = all.get(at).map_or(script.len(), |l| l.start);
    let mut text = String::with_capacity(script.len() + added.len() + 2);
    text.push_str(&script[..offset]);
    text.push_str(&added);
    text.push_str(newline);
    text.push_str(&script[offset..]);
    Ok(Applied {
        text,
        line: at + 1,
        before: None,
        after: Some(added),
    })
}

fn unset_env(script: &str, name: &str) -> Result<Applied, FixError> {
    let what = format!("export {name}");
    let token = one(env_tokens(script, name), &what)?;
    let all = lines(script);
    let line = &all[token.line - 1];
    let end = all.get(token.line).map_or(script.len(), |next| next.start);
    let mut text = String::with_capacity(script.len());
    text.push_str(&script[..line.start]);
    text.push_str(&script[end..]);
    Ok(Applied {
        text,
        line: token.line,
        before: Some(line.text.to_owned()),
        after: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arg(name: &str, from: Option<&str>, to: &str) -> Fix {
        Fix::SetArg {
            name: name.into(),
            from: from.map(str::to_owned),
            to: to.into(),
        }
    }

    const VLLM: &str = "#!/usr/bin/env bash\nexport VLLM_ENGINE_READY_TIMEOUT_S=3600\n# --gpu-memory-utilization 0.5 in a comment\nset -x\nvllm serve $MODEL --port $PORT \\\n--gpu-memory-utilization 0.95 \\\n--max-num-seqs 512 > $LOG 2>&1 &\n";

    #[test]
    fn set_arg_changes_only_the_value() {
        let a = arg("gpu-memory-utilization", Some("0.95"), "0.90")
            .apply(VLLM)
            .unwrap();
        assert_eq!(a.text, VLLM.replace("utilization 0.95", "utilization 0.90"));
        assert_eq!(a.line, 6);
        assert_eq!(
            a.before.as_deref(),
            Some("--gpu-memory-utilization 0.95 \\")
        );
        assert_eq!(a.after.as_deref(), Some("--gpu-memory-utilization 0.90 \\"));
    }

    #[test]
    fn set_arg_refuses_what_it_cannot_place() {
        let fix = arg("gpu-memory-utilization", Some("0.95"), "0.90");
        let once = fix.apply(VLLM).unwrap().text;
        assert!(matches!(
            fix.apply(&once),
            Err(FixError::AlreadyApplied { line: 6, .. })
        ));
        let twice = format!("{VLLM}vllm serve --gpu-memory-utilization 0.95\n");
        assert!(matches!(fix.apply(&twice), Err(FixError::Ambiguous { .. })));
        let other = VLLM.replace("0.95", "0.8");
        assert!(matches!(
            fix.apply(&other),
            Err(FixError::ValueMismatch { .. })
        ));
        let var = VLLM.replace("0.95", "$MEM_FRAC");
        assert!(matches!(fix.apply(&var), Err(FixError::NotLiteral { .. })));
        assert!(matches!(
            arg("max-model-len", None, "1").apply(VLLM),
            Err(FixError::Absent { .. })
        ));
        // A longer flag with the same start is another flag.
        let longer = VLLM.replace(
            "--gpu-memory-utilization 0.95",
            "--gpu-memory-utilization-x 0.95",
        );
        assert!(matches!(fix.apply(&longer), Err(FixError::Absent { .. })));
    }

    #[test]
    fn set_arg_reads_equals_arrays_and_recipe_keys() {
        let eq = "python3 -m sglang.launch_server --cuda-graph-max-bs=128 --x 1\n";
        let a = arg("cuda-graph-max-bs", None, "64").apply(eq).unwrap();
        assert_eq!(
            a.text,
            "python3 -m sglang.launch_server --cuda-graph-max-bs=64 --x 1\n"
        );
        let arr = "GMU_ARGS=(--gpu-memory-utilization 0.95)\n";
        let a = arg("gpu-memory-utilization", Some("0.95"), "0.90")
            .apply(arr)
            .unwrap();
        assert_eq!(a.text, "GMU_ARGS=(--gpu-memory-utilization 0.90)\n");
        let yaml = "decode:\n  max-num-seqs: 4096  # global\n  gpu-memory-utilization: \"0.90\"\n";
        let a = arg("max-num-seqs", None, "512").apply(yaml).unwrap();
        assert_eq!(a.text, yaml.replace("4096", "512"));
        assert!(matches!(
            arg("gpu-memory-utilization", None, "0.90").apply(yaml),
            Err(FixError::AlreadyApplied { .. })
        ));
    }

    #[test]
    fn set_env_changes_or_adds_one_line() {
        let fix = Fix::SetEnv {
            name: "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS".into(),
            value: "0".into(),
        };
        let a = fix.apply(VLLM).unwrap();
        assert_eq!(a.line, 5);
        assert_eq!(
            a.text,
            VLLM.replace(
                "set -x\n",
                "set -x\nexport VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0\n"
            )
        );
        assert!(matches!(
            fix.apply(&a.text),
            Err(FixError::AlreadyApplied { .. })
        ));
        let changed = Fix::SetEnv {
            name: "VLLM_ENGINE_READY_TIMEOUT_S".into(),
            value: "7200".into(),
        }
        .apply(VLLM)
        .unwrap();
        assert_eq!(changed.text, VLLM.replace("=3600", "=7200"));
        let indented = "if x; then\n    SGLANG_X=1 python3 -m sglang.launch_server --a 1\nfi\n";
        let a = Fix::SetEnv {
            name: "SGL_ENABLE_JIT_DEEPGEMM".into(),
            value: "0".into(),
        }
        .apply(indented)
        .unwrap();
        assert_eq!(
            a.text,
            "if x; then\n    export SGL_ENABLE_JIT_DEEPGEMM=0\n    SGLANG_X=1 python3 -m sglang.launch_server --a 1\nfi\n"
        );
    }

    #[test]
    fn set_env_with_several_launches_goes_after_the_last_top_level_export() {
        let s = "export A=1\nif x; then\n  vllm serve a\nelse\n  vllm serve b\nfi\n";
        let a = Fix::SetEnv {
            name: "B".into(),
            value: "0".into(),
        }
        .apply(s)
        .unwrap();
        assert_eq!(
            a.text,
            "export A=1\nexport B=0\nif x; then\n  vllm serve a\nelse\n  vllm serve b\nfi\n"
        );
        let no_export = "if x; then\n  vllm serve a\nelse\n  vllm serve b\nfi\n";
        assert!(matches!(
            Fix::SetEnv {
                name: "B".into(),
                value: "0".into()
            }
            .apply(no_export),
            Err(FixError::NoPlace { .. })
        ));
        assert!(matches!(
            Fix::SetEnv {
                name: "B".into(),
                value: "0".into()
            }
            .apply("echo hi\n"),
            Err(FixError::NoPlace { .. })
        ));
    }

    #[test]
    fn unset_env_removes_its_one_line() {
        let a = Fix::UnsetEnv {
            name: "VLLM_ENGINE_READY_TIMEOUT_S".into(),
        }
        .apply(VLLM)
        .unwrap();
        assert_eq!(
            a.text,
            VLLM.replace("export VLLM_ENGINE_READY_TIMEOUT_S=3600\n", "")
        );
        assert_eq!(a.line, 2);
        assert!(matches!(
            Fix::UnsetEnv {
                name: "NOPE".into()
            }
            .apply(VLLM),
            Err(FixError::Absent { .. })
        ));
    }
}
