//! What the tests of staged failures, learning and promises share: the CI
//! script of a failure staged by its log lines on a node and fixed by an
//! edit, a person's commit on a candidate's branch, one upkeep pass, one
//! dashboard issue pass, and a ticked box of its body.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use klaud_lifecycle::engine::{CandidateRecord, Upkept};
use klaud_sandbox::stack::MAINTAINER;
use klaud_service::GithubLifecycle;
use klaud_service::dashboard_issue::{LABEL, Publish, publish, steer_or_hold};

use super::{Harness, REPO};

/// A failure staged for the CI simulator: `family`'s runs fail with
/// `lines` on `node` until `file` at the run's head contains `contains`.
pub struct FailsUntil<'a> {
    /// A config key or full family.
    pub family: &'a str,
    /// What every failed job prints.
    pub lines: &'a [&'a str],
    /// The runner every job lands on.
    pub node: &'a str,
    /// Repository-relative path of the file the fix edits.
    pub file: &'a str,
    /// What the fixed file contains.
    pub contains: &'a str,
}

impl FailsUntil<'_> {
    fn step(&self) -> String {
        let lines: Vec<String> = self.lines.iter().map(|l| format!("{l:?}")).collect();
        format!(
            r#"{{ outcome = "failure", log_lines = [{}], node = "{}", passes_when = {{ file = "{}", contains = "{}" }} }}"#,
            lines.join(", "),
            self.node,
            self.file,
            self.contains
        )
    }

    /// Every smoke of the family fails until the fix; everything else
    /// passes.
    pub fn smokes(&self) -> String {
        format!(
            r#"
[families."*"]
smoke = ["success"]
sweep = ["success"]
[families.{}]
smoke = [{}]
"#,
            self.family,
            self.step()
        )
    }

    /// Every smoke of each family of `failures` fails as staged until its
    /// fix; everything else passes.
    pub fn smokes_of(failures: &[FailsUntil<'_>]) -> String {
        let mut out = String::from(
            r#"
[families."*"]
smoke = ["success"]
sweep = ["success"]
"#,
        );
        for f in failures {
            out.push_str(&format!(
                "[families.{}]\nsmoke = [{}]\n",
                f.family,
                f.step()
            ));
        }
        out
    }

    /// The family's first sweep passes and every later one fails until
    /// the fix; everything else passes.
    pub fn sweeps_after_a_pass(&self) -> String {
        format!(
            r#"
[families."*"]
smoke = ["success"]
sweep = ["success"]
[families.{}]
sweep = ["success", {}]
"#,
            self.family,
            self.step()
        )
    }
}

/// A maintainer's commit of `path` (with `bytes`) on top of `rec`'s
/// branch; its sha.
pub async fn maintainers_push(
    env: &Harness,
    rec: &CandidateRecord,
    path: &str,
    bytes: Vec<u8>,
    message: &str,
) -> String {
    env.stack
        .state()
        .push_commit(
            REPO,
            &rec.branch,
            MAINTAINER,
            BTreeMap::from([(path.to_owned(), Some(bytes))]),
            message,
        )
        .await
        .expect("push")
}

/// One upkeep pass as the wave makes it (waiting while GitHub computes
/// mergeability), on the harness's journal.
pub async fn upkeep_pass(env: &Harness, rec: &mut CandidateRecord) -> Upkept {
    let lifecycle = GithubLifecycle::new(&env.forge);
    let engine = env.engine(&lifecycle, &env.journal, env.clock);
    let started = Instant::now();
    loop {
        match engine.keep_mergeable(rec).await.expect("upkeep") {
            Upkept::Waiting(_) if started.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return other,
        }
    }
}

/// One dashboard issue pass from the harness's journal (steer, then
/// publish without a plan); the open issue's number and body.
pub async fn dashboard_pass(env: &Harness) -> (u64, String) {
    let steering = steer_or_hold(&env.forge, &env.journal, env.clock).await;
    publish(
        &env.forge,
        &env.journal,
        env.clock,
        &steering,
        Publish {
            base_branch: "main".into(),
            summary: None,
            cooldown: Duration::from_secs(3600),
            web_dashboard: None,
            may_open: true,
        },
    )
    .await
    .expect("publish");
    let issue = env
        .stack
        .state()
        .issues(REPO)
        .await
        .into_iter()
        .find(|i| i.open && i.labels.iter().any(|l| l == LABEL))
        .expect("the dashboard issue");
    (issue.number, issue.body)
}

/// `body` with the box whose marker holds `code` ticked.
pub fn tick(body: &str, code: &str) -> String {
    let marker = format!("<!-- klaud:do {code} -->");
    assert!(body.contains(&marker), "no box {marker} in:\n{body}");
    body.lines()
        .map(|l| {
            if l.contains(&marker) {
                l.replacen("- [ ]", "- [x]", 1)
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}
