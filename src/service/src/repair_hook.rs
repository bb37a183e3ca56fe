//! The repair hook as a command: it gets the failure context as JSON on
//! stdin and pushes a fix to the candidate's branch as the bot. Exit 0
//! means "pushed"; any other exit means it gave up (its last stderr line
//! says why).

use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use klaud_lifecycle::engine::{RepairContext, RepairHook, RepairOutcome};
use tokio::io::AsyncWriteExt;

/// Most stderr kept for the reason.
const MAX_REASON: usize = 400;

/// A command run once per repair.
#[derive(Debug, Clone)]
pub struct CommandHook {
    argv: Vec<String>,
    timeout: Duration,
    api_base: Option<String>,
}

impl CommandHook {
    /// A hook running `argv` (at least the program), killed after `timeout`.
    pub fn new(argv: Vec<String>, timeout: Duration) -> Result<Self, String> {
        if argv.first().is_none_or(|p| p.trim().is_empty()) {
            return Err("the repair command is empty".into());
        }
        Ok(Self {
            argv,
            timeout,
            api_base: None,
        })
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
    async fn repair(&self, context: &RepairContext) -> Result<RepairOutcome, String> {
        let mut input =
            serde_json::to_value(context).map_err(|e| format!("encode context: {e}"))?;
        if let (Some(base), Some(map)) = (&self.api_base, input.as_object_mut()) {
            map.insert("api_base".into(), serde_json::Value::String(base.clone()));
        }
        let input = serde_json::to_vec(&input).map_err(|e| format!("encode context: {e}"))?;
        let mut child = tokio::process::Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {:?}: {e}", self.argv[0]))?;
        if let Some(mut stdin) = child.stdin.take() {
            // A hook that does not read its input is its own business.
            let _ = stdin.write_all(&input).await;
        }
        let output = tokio::time::timeout(self.timeout, child.wait_with_output())
            .await
            .map_err(|_| format!("timed out after {}s", self.timeout.as_secs()))?
            .map_err(|e| format!("waiting for the hook: {e}"))?;
        if output.status.success() {
            return Ok(RepairOutcome::Pushed);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn context() -> RepairContext {
        RepairContext {
            version: klaud_lifecycle::engine::REPAIR_INPUT_VERSION,
            candidate: "c".into(),
            family: "f".into(),
            key: "k".into(),
            image: "i".into(),
            repository: "o/r".into(),
            branch: "b".into(),
            head: "h".into(),
            pull_request: Some(1),
            run: None,
            repair: 1,
            budget: 5,
            budget_left: 4,
            report: serde_json::Value::Null,
            failed_jobs: vec![klaud_lifecycle::report::FailedJob {
                name: "End-to-End Tests".into(),
                conclusion: "failure".into(),
                url: Some("https://github.com/o/r/actions/runs/1/job/2".into()),
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
        assert_eq!(ok.repair(&context()).await, Ok(RepairOutcome::Pushed));
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
        assert_eq!(hook.repair(&context()).await, Ok(RepairOutcome::Pushed));
        let input: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&out).expect("input")).expect("JSON");
        assert_eq!(input["version"], 1);
        assert_eq!(input["api_base"], "https://api.github.com");
        assert_eq!(input["budget_left"], 4);
        assert_eq!(input["candidate"], "c");
        assert_eq!(
            input["failed_jobs"][0]["url"],
            "https://github.com/o/r/actions/runs/1/job/2"
        );
        assert_eq!(input["artifacts"][0], "bmk_1");
    }
}
