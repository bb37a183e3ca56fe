//! The repair hook as a command: it gets the failure context as JSON on
//! stdin and pushes a fix to the candidate's branch as the bot. Exit 0
//! means "pushed"; any other exit means it gave up (its last stderr line
//! says why). Before it runs, Klaud can prepare a git checkout of the head
//! for it (`checkout` in the input), removed again afterwards.
//!
//! Instead of pushing, the hook may propose variants: it writes
//! `{"variants": ["<name> [from <variant>]: <edits>", …]}` (the argument
//! grammar of `/klaud try`) to the file named by the input's `output`, and
//! exits 0 without pushing.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use klaud_lifecycle::engine::{RepairContext, RepairError, RepairHook, RepairOutcome};
use tokio::io::AsyncWriteExt;

/// Most stderr kept for the reason.
const MAX_REASON: usize = 400;
/// Largest output file read (a handful of variants is a few hundred bytes).
const MAX_OUTPUT_BYTES: u64 = 64 * 1024;
/// Most variants one proposal may name.
pub const MAX_PROPOSED_VARIANTS: usize = 8;
/// What to tell a hook author whose output is refused.
const OUTPUT_HELP: &str = "write {\"variants\": [\"<name> [from <variant>]: <edit>; <edit>\", …]} \
     (the /klaud try grammar, see configs/repair-hook.md), or no file to report a pushed repair";

/// A command run once per repair.
#[derive(Debug, Clone)]
pub struct CommandHook {
    argv: Vec<String>,
    timeout: Duration,
    api_base: Option<String>,
    checkout: Option<CheckoutSource>,
}

/// Where the checkout of the head comes from and goes to.
#[derive(Debug, Clone)]
pub struct CheckoutSource {
    /// Directory the per-candidate checkouts are made in
    /// (`<root>/<candidate>`).
    pub root: PathBuf,
    /// The repository's git URL (`https://github.com/<owner>/<name>.git`).
    pub clone_url: String,
    /// The environment variable holding the token git fetches with (sent
    /// as an HTTP header, never written into the checkout); `None`: an
    /// anonymous fetch.
    pub token_env: Option<String>,
}

/// The configured repair command names no program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the repair command is empty")]
pub struct EmptyCommand;

/// Why the hook's output file was refused: the field and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HookOutputError(String);

/// Why the command hook could not say what it did: each names the step of
/// the run that failed.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// The repair context could not be written as JSON.
    #[error("encode context: {0}")]
    Encode(#[source] serde_json::Error),
    /// A local file or directory the run needs could not be made, read or
    /// removed.
    #[error("{what} {}: {source}", path.display())]
    File {
        /// What was being done (`create`, `remove the old checkout`).
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The hook's private output directory could not be made.
    #[error("create the hook's output directory: {0}")]
    OutputDir(#[source] std::io::Error),
    /// The program could not be started.
    #[error("cannot start {program:?}: {source}")]
    Start {
        /// The configured program.
        program: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The hook ran longer than its timeout and was killed.
    #[error("timed out after {0}s")]
    TimedOut(u64),
    /// Waiting for the hook failed.
    #[error("waiting for the hook: {0}")]
    Wait(#[source] std::io::Error),
    /// The output file is too large to be read.
    #[error(
        "repair hook output {}: {size} bytes, more than {MAX_OUTPUT_BYTES}; {OUTPUT_HELP}",
        path.display()
    )]
    OutputTooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
    /// The output file holds no valid proposal.
    #[error("repair hook output {}: {source}; {OUTPUT_HELP}", path.display())]
    OutputInvalid {
        /// The file.
        path: PathBuf,
        /// The field and what is wrong.
        #[source]
        source: HookOutputError,
    },
    /// The candidate id cannot name a checkout directory.
    #[error("candidate id {0:?} cannot name a directory")]
    CandidateDirectory(String),
    /// git could not be run.
    #[error("cannot run git: {0}")]
    GitMissing(#[source] std::io::Error),
    /// A git command of the checkout failed.
    #[error("git {command} for the repair checkout failed ({status}): {stderr}")]
    Git {
        /// git's subcommand.
        command: String,
        /// How git exited.
        status: std::process::ExitStatus,
        /// The end of its stderr, the token masked.
        stderr: String,
    },
    /// The checkout ended at another commit than the head.
    #[error("the checkout is at {at}, not at the head {head}")]
    CheckoutHead {
        /// Where the checkout is.
        at: String,
        /// The head asked for.
        head: String,
    },
}

impl CommandHook {
    /// A hook running `argv` (at least the program), killed after `timeout`.
    pub fn new(argv: Vec<String>, timeout: Duration) -> Result<Self, EmptyCommand> {
        if argv.first().is_none_or(|p| p.trim().is_empty()) {
            return Err(EmptyCommand);
        }
        Ok(Self {
            argv,
            timeout,
            api_base: None,
            checkout: None,
        })
    }

    /// Prepares a git checkout of the head under `source.root` before each
    /// run; its path is the input's `checkout`.
    pub fn with_checkout(mut self, source: CheckoutSource) -> Self {
        self.checkout = Some(source);
        self
    }

    /// Adds `api_base` (the GitHub REST base the hook should talk to) to
    /// the input.
    pub fn with_api_base(mut self, api_base: &str) -> Self {
        self.api_base = Some(api_base.trim_end_matches('/').to_owned());
        self
    }
}

#[async_trait]
impl RepairHook for CommandHook {
    async fn repair(&self, context: &RepairContext) -> Result<RepairOutcome, RepairError> {
        self.run(context).await.map_err(RepairError::new)
    }
}

impl CommandHook {
    async fn run(&self, context: &RepairContext) -> Result<RepairOutcome, HookError> {
        let mut input = serde_json::to_value(context).map_err(HookError::Encode)?;
        if let (Some(base), Some(map)) = (&self.api_base, input.as_object_mut()) {
            map.insert("api_base".into(), serde_json::Value::String(base.clone()));
        }
        // Removed when this call ends, however it ends (the guard's drop).
        let checkout = match &self.checkout {
            Some(source) => Some(prepare_checkout(source, context).await?),
            None => None,
        };
        if let (Some(dir), Some(map)) = (&checkout, input.as_object_mut()) {
            map.insert(
                "checkout".into(),
                serde_json::Value::String(dir.path.display().to_string()),
            );
        }
        // Where the hook may write its proposed variants: a fresh private
        // directory per run, removed when this call ends.
        let output_dir = tempfile::Builder::new()
            .prefix("klaud-repair-")
            .tempdir()
            .map_err(HookError::OutputDir)?;
        let output_path = output_dir.path().join("output.json");
        if let Some(map) = input.as_object_mut() {
            map.insert(
                "output".into(),
                serde_json::Value::String(output_path.display().to_string()),
            );
        }
        let input = serde_json::to_vec(&input).map_err(HookError::Encode)?;
        let mut child = tokio::process::Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| HookError::Start {
                program: self.argv[0].clone(),
                source,
            })?;
        if let Some(mut stdin) = child.stdin.take() {
            // A hook that does not read its input is its own business.
            let _ = stdin.write_all(&input).await;
        }
        let output = tokio::time::timeout(self.timeout, child.wait_with_output())
            .await
            .map_err(|_| HookError::TimedOut(self.timeout.as_secs()))?
            .map_err(HookError::Wait)?;
        if output.status.success() {
            return read_output(&output_path);
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        let reason: String = last.chars().take(MAX_REASON).collect();
        Ok(RepairOutcome::GaveUp(format!(
            "{} ({})",
            if reason.is_empty() {
                "no reason given"
            } else {
                &reason
            },
            output.status
        )))
    }
}

/// The hook's answer after exit 0: no output file is a pushed repair; a
/// file must hold proposed variants, all of them well-formed (else an
/// error naming the file, the field and what to write; nothing is used).
fn read_output(path: &Path) -> Result<RepairOutcome, HookError> {
    let unreadable = |source| HookError::File {
        what: "repair hook output",
        path: path.to_owned(),
        source,
    };
    let size = match std::fs::metadata(path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(RepairOutcome::Pushed),
        Err(e) => return Err(unreadable(e)),
    };
    if size > MAX_OUTPUT_BYTES {
        return Err(HookError::OutputTooLarge {
            path: path.to_owned(),
            size,
        });
    }
    let bytes = std::fs::read(path).map_err(unreadable)?;
    parse_output(&bytes)
        .map(RepairOutcome::Variants)
        .map_err(|source| HookError::OutputInvalid {
            path: path.to_owned(),
            source,
        })
}

/// Parses the hook's output file: `{"variants": [<try argument>, …]}`,
/// each entry in the grammar of `/klaud try` (`<name> [from <variant>]:
/// <edits>`); names distinct, at most [`MAX_PROPOSED_VARIANTS`]. The error
/// names the field (`variants[1]`).
pub fn parse_output(
    bytes: &[u8],
) -> Result<Vec<klaud_lifecycle::commands::TryRequest>, HookOutputError> {
    parse_variants(bytes).map_err(HookOutputError)
}

fn parse_variants(bytes: &[u8]) -> Result<Vec<klaud_lifecycle::commands::TryRequest>, String> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Output {
        variants: Vec<serde_json::Value>,
    }
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    let out: Output = serde_json::from_str(text).map_err(|e| {
        format!(
            "not a JSON object with a `variants` list (line {}, column {}): {e}",
            e.line(),
            e.column()
        )
    })?;
    if out.variants.is_empty() {
        return Err("field `variants` is empty".into());
    }
    if out.variants.len() > MAX_PROPOSED_VARIANTS {
        return Err(format!(
            "field `variants` names {} variants, at most {MAX_PROPOSED_VARIANTS} are taken",
            out.variants.len()
        ));
    }
    let mut requests: Vec<klaud_lifecycle::commands::TryRequest> = Vec::new();
    for (i, v) in out.variants.iter().enumerate() {
        let Some(arg) = v.as_str() else {
            return Err(format!(
                "field `variants[{i}]` is {v}, not a string like \"B: set a.b=1\""
            ));
        };
        let request = klaud_lifecycle::commands::parse_try(arg).map_err(|e| {
            format!(
                "field `variants[{i}]` ({:?}): {}",
                cut(arg),
                cut(&e.to_string())
            )
        })?;
        if requests.iter().any(|r| r.name == request.name) {
            return Err(format!(
                "field `variants[{i}]` names Variant {} a second time",
                request.name
            ));
        }
        requests.push(request);
    }
    Ok(requests)
}

/// At most 200 characters of hostile text for an error message.
fn cut(text: &str) -> String {
    let mut out: String = text.chars().take(200).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

/// A checkout directory, removed when dropped.
struct Checkout {
    path: PathBuf,
}

impl Drop for Checkout {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %self.path.display(), "cannot remove the repair checkout: {e}");
        }
    }
}

/// A fresh git checkout of `context.head` at `<root>/<candidate>`, on a
/// local branch named like the candidate's branch that tracks it on
/// `origin`, so the hook can commit and `git push`. A leftover of an
/// earlier run (a crash) is removed first.
async fn prepare_checkout(
    source: &CheckoutSource,
    context: &RepairContext,
) -> Result<Checkout, HookError> {
    // The candidate id names the directory: never let it leave the root.
    let id = context.candidate.as_str();
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return Err(HookError::CandidateDirectory(id.to_owned()));
    }
    let path = source.root.join(id);
    let checkout = Checkout { path };
    let dir = &checkout.path;
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|source| HookError::File {
            what: "remove the old checkout",
            path: dir.clone(),
            source,
        })?;
    }
    std::fs::create_dir_all(dir).map_err(|source| HookError::File {
        what: "create",
        path: dir.clone(),
        source,
    })?;
    let branch = &context.branch;
    git(dir, &["init", "-q"], None).await?;
    git(dir, &["remote", "add", "origin", &source.clone_url], None).await?;
    let refspec = format!("+refs/heads/{branch}:refs/remotes/origin/{branch}");
    let token = source
        .token_env
        .as_deref()
        .and_then(|name| std::env::var(name).ok())
        .filter(|t| !t.trim().is_empty());
    git(
        dir,
        &["fetch", "-q", "--no-tags", "origin", &refspec],
        token.as_deref().map(str::trim),
    )
    .await?;
    git(dir, &["checkout", "-q", "-B", branch, &context.head], None).await?;
    git(
        dir,
        &[
            "branch",
            "-q",
            &format!("--set-upstream-to=origin/{branch}"),
        ],
        None,
    )
    .await?;
    let head = git(dir, &["rev-parse", "HEAD"], None).await?;
    if !head.trim().eq_ignore_ascii_case(&context.head) {
        return Err(HookError::CheckoutHead {
            at: head.trim().to_owned(),
            head: context.head.to_string(),
        });
    }
    Ok(checkout)
}

/// Runs `git -C dir args` and returns its stdout. With `token`, the fetch
/// authenticates with an HTTP header given through git's environment
/// configuration, so the token is in neither the argv nor `.git/config`.
async fn git(dir: &Path, args: &[&str], token: Option<&str>) -> Result<String, HookError> {
    use base64::Engine as _;
    let mut cmd = tokio::process::Command::new("git");
    cmd.arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        // Tracing would print the header.
        .env_remove("GIT_TRACE")
        .env_remove("GIT_TRACE_CURL")
        .env_remove("GIT_CURL_VERBOSE")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if let Some(token) = token {
        let basic =
            base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{token}"));
        cmd.env("GIT_CONFIG_COUNT", "1")
            .env("GIT_CONFIG_KEY_0", "http.extraHeader")
            .env(
                "GIT_CONFIG_VALUE_0",
                format!("Authorization: Basic {basic}"),
            );
    }
    let out = cmd.output().await.map_err(HookError::GitMissing)?;
    if !out.status.success() {
        let mut err = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        if let Some(t) = token {
            err = err.replace(t, "***");
        }
        return Err(HookError::Git {
            command: args.first().copied().unwrap_or("").to_owned(),
            status: out.status,
            stderr: err.chars().take(MAX_REASON).collect(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use klaud_claims::PullNumber;

    fn context() -> RepairContext {
        RepairContext {
            version: klaud_lifecycle::engine::REPAIR_INPUT_VERSION,
            candidate: "d92e15065c55779d-0123456789abcdef".parse().unwrap(),
            family: "f".into(),
            key: "k".into(),
            image: "i".into(),
            repository: "o/r".into(),
            branch: "b".into(),
            head: "0123456789abcdef0123456789abcdef01234567".parse().unwrap(),
            pull_request: Some(PullNumber::from(1)),
            run: None,
            repair: 1,
            budget: 5,
            budget_left: 4,
            phase: klaud_lifecycle::model::Phase::Targeted,
            report: serde_json::Value::Null,
            author: "bot".into(),
            trailer: "Klaud-Candidate: c".into(),
            failed_jobs: vec![klaud_lifecycle::report::FailedJob {
                name: "End-to-End Tests".into(),
                conclusion: "failure".into(),
                url: Some("https://github.com/o/r/actions/runs/1/job/2".into()),
                node: None,
                triage: None,
            }],
            artifacts: vec!["bmk_1".into()],
        }
    }

    #[tokio::test]
    async fn exit_status_decides_pushed_or_gave_up() {
        let ok = CommandHook::new(
            vec!["sh".into(), "-c".into(), "cat >/dev/null".into()],
            Duration::from_secs(10),
        )
        .expect("hook");
        assert_eq!(
            ok.repair(&context()).await.ok(),
            Some(RepairOutcome::Pushed)
        );
        let no = CommandHook::new(
            vec![
                "sh".into(),
                "-c".into(),
                "echo 'no fix found' >&2; exit 3".into(),
            ],
            Duration::from_secs(10),
        )
        .expect("hook");
        match no.repair(&context()).await {
            Ok(RepairOutcome::GaveUp(why)) => assert!(why.contains("no fix found"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert!(CommandHook::new(Vec::new(), Duration::from_secs(1)).is_err());
    }

    #[tokio::test]
    async fn the_input_is_versioned_and_names_the_api_base() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("input.json");
        let hook = CommandHook::new(
            vec![
                "sh".into(),
                "-c".into(),
                format!("cat > '{}'", out.display()),
            ],
            Duration::from_secs(10),
        )
        .expect("hook")
        .with_api_base("https://api.github.com/");
        assert_eq!(
            hook.repair(&context()).await.ok(),
            Some(RepairOutcome::Pushed)
        );
        let input: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&out).expect("input")).expect("JSON");
        assert_eq!(input["version"], 2);
        assert_eq!(input["phase"], "targeted");
        assert_eq!(input["trailer"], "Klaud-Candidate: c");
        assert_eq!(input["api_base"], "https://api.github.com");
        assert_eq!(input["budget_left"], 4);
        assert_eq!(input["candidate"], "d92e15065c55779d-0123456789abcdef");
        assert_eq!(
            input["failed_jobs"][0]["url"],
            "https://github.com/o/r/actions/runs/1/job/2"
        );
        assert_eq!(input["artifacts"][0], "bmk_1");
    }

    #[tokio::test]
    async fn variants_written_to_the_output_file_are_proposed() {
        let hook = CommandHook::new(
            vec![
                "sh".into(),
                "-c".into(),
                // The input names the output file; a tiny JSON reader in sh.
                r#"out=$(sed -n 's/.*"output":"\([^"]*\)".*/\1/p'); printf '%s' '{"variants": ["B: set model.precision=fp8", "C from B: unset identity.frameworks"]}' > "$out""#.into(),
            ],
            Duration::from_secs(10),
        )
        .expect("hook");
        match hook.repair(&context()).await {
            Ok(RepairOutcome::Variants(v)) => {
                let names: Vec<(&str, Option<&str>, usize)> = v
                    .iter()
                    .map(|r| (r.name.as_str(), r.from.as_deref(), r.edits.len()))
                    .collect();
                assert_eq!(names, [("B", None, 1), ("C", Some("B"), 1)]);
            }
            other => panic!("{other:?}"),
        }
        let bad = CommandHook::new(
            vec![
                "sh".into(),
                "-c".into(),
                r#"out=$(sed -n 's/.*"output":"\([^"]*\)".*/\1/p'); echo '{"variants": ["B set"]}' > "$out""#.into(),
            ],
            Duration::from_secs(10),
        )
        .expect("hook");
        let err = bad
            .repair(&context())
            .await
            .expect_err("refused")
            .to_string();
        assert!(err.contains("repair hook output /"), "{err}");
        assert!(err.contains("output.json"), "{err}");
        assert!(err.contains("variants[0]"), "{err}");
        assert!(err.contains("configs/repair-hook.md"), "{err}");
    }

    #[test]
    fn malformed_output_is_refused_naming_the_field() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "not a JSON object"),
            (b"not json", "line 1"),
            (b"[1, 2]", "not a JSON object"),
            (b"{}", "variants"),
            (br#"{"variants": []}"#, "is empty"),
            (br#"{"variants": "B: set a=1"}"#, "not a JSON object"),
            (br#"{"variants": [3]}"#, "`variants[0]` is 3"),
            (
                br#"{"variants": ["B: set a.b=1"], "extra": 1}"#,
                "unknown field `extra`",
            ),
            (
                br#"{"variants": ["B: set a.b=1", "no colon"]}"#,
                "`variants[1]`",
            ),
            (br#"{"variants": ["B c d: set a.b=1"]}"#, "`variants[0]`"),
            (br#"{"variants": ["B/../x: set a.b=1"]}"#, "variant name"),
            (br#"{"variants": ["B:"]}"#, "at least one edit"),
            (br#"{"variants": ["B: frobnicate a"]}"#, "`variants[0]`"),
            (
                br#"{"variants": ["B: set a.b=1", "B: set a.b=2"]}"#,
                "a second time",
            ),
            (b"\xff\xfe", "not UTF-8"),
        ];
        for (input, want) in cases {
            let err = parse_output(input)
                .expect_err(&String::from_utf8_lossy(input))
                .to_string();
            assert!(
                err.contains(want),
                "{:?}: {err}",
                String::from_utf8_lossy(input)
            );
        }
        let many = format!(
            "{{\"variants\": [{}]}}",
            (0..=MAX_PROPOSED_VARIANTS)
                .map(|i| format!("\"V{i}: set a.b={i}\""))
                .collect::<Vec<_>>()
                .join(",")
        );
        assert!(
            parse_output(many.as_bytes())
                .unwrap_err()
                .to_string()
                .contains("at most")
        );
        let long = format!("{{\"variants\": [\"B: {}\"]}}", "x".repeat(5000));
        let err = parse_output(long.as_bytes()).unwrap_err().to_string();
        assert!(err.len() < 600, "hostile text is cut: {}", err.len());
        let ok = parse_output(br#"{"variants": ["B: set a.b=1", "C from B: unset a.c"]}"#)
            .expect("good");
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[1].from.as_deref(), Some("B"));
    }
}
