//! The regression hunt's core (`klaud_lifecycle::hunt`) against the sandbox
//! over loopback HTTP: the CI simulator stages a regression at a known
//! nightly (its script's `regression`), each step is a targeted smoke of one
//! family with the image at one tag (a commit that sets only the image,
//! dispatched as `inputs.ref` like Klaud's smokes), judged from the rows the
//! run uploads, and recorded as a hidden-marker comment on the candidate's
//! PR; the hunt is rebuilt from those comments alone. GPU runs are counted
//! from the CI simulator's decisions, against ⌈log2(n + 1)⌉.
//!
//! The first tests drive the steps with their own loop (each step a plain
//! commit and dispatch over REST): they prove the search, its records and
//! the simulator's staging together. [`engine`] drives them with the
//! engine's `Engine::hunt_step` through the real forge, and the candidate's
//! own steps: a failed smoke with `[hunt]` on hunts in the finish step
//! before the PR is cleaned up, and ends as it would have.

use crate::support;

use std::path::PathBuf;
use std::time::Duration;

use klaud_lifecycle::artifacts::{AGG_BMK_ARTIFACT, Artifact, ArtifactLimits, parse_artifact};
use klaud_lifecycle::hunt::{
    EndReason, Hunt, HuntPlan, HuntResult, HuntTag, Metric, Next, PLAN_VERSION, PointKey, Probe,
    StepRecord, Trigger, measure, minimum_runs, render_end, render_plan, render_step,
};
use klaud_lifecycle::model::CandidateId;
use klaud_lifecycle::report::{HuntName, MarkerKey};
use klaud_sandbox::ci::{CiSim, RunKind, Script};
use klaud_sandbox::github::{GithubSim, Permission};
use reqwest::Client;
use serde_json::{Value, json};

const REPO: &str = "sandbox/benchmarks";
const BOT: &str = "Klaud-Cold";
const TOKEN: &str = "bot-token";
const MAINTAINER: &str = "maintainer";
const MAINTAINER_TOKEN: &str = "maintainer-token";
const MASTER: &str = "configs/nvidia-master.yaml";
const KEY: &str = "demo-fp4-b200-vllm";
const FAMILY: &str = "configs/nvidia-master.yaml:demo-fp4-b200-vllm";
const SEEDED_IMAGE: &str = "demo-fp4-b200-vllm:\n  image: vllm/vllm-openai:v0.25.0\n";
const CAND: &str = "d92e15065c55779d-0123456789abcdef";
const OWNER_RUN: u64 = 4242;
/// The point each step measures (`conc` of the family's 1k/1k tp8 line).
const CONC: u64 = 64;
const PATIENCE: Duration = Duration::from_secs(60);

fn old_tag() -> String {
    "nightly-old".into()
}

fn new_tag() -> String {
    "nightly-new".into()
}

fn nightly(i: usize) -> String {
    format!("nightly-{i:02}")
}

/// The track, oldest first: the old image, `n` nightlies, the new image.
fn track(n: usize) -> Vec<String> {
    let mut t = vec![old_tag()];
    t.extend((0..n).map(nightly));
    t.push(new_tag());
    t
}

/// A script where the family's images from `from` on are 25% slower.
fn slower_from(n: usize, from: &str) -> String {
    let tags: Vec<String> = track(n).iter().map(|t| format!("{t:?}")).collect();
    format!(
        "[families.{KEY}]\nregression = {{ tags = [{}], from = {from:?}, throughput = 0.75 }}\n",
        tags.join(", ")
    )
}

struct T {
    sim: GithubSim,
    ci: CiSim,
    http: Client,
    main: String,
    master: String,
    issue: u64,
}

impl T {
    async fn new(script: &str) -> Self {
        let dir = PathBuf::from(support::REPO_ROOT).join("configs/demo");
        let (st, main) = support::GithubOnly::new(REPO)
            .user(BOT, Some("Klaud Cold"), Some(Permission::Write))
            .user(MAINTAINER, None, Some(Permission::Write))
            .token(BOT, TOKEN, None)
            .token(MAINTAINER, MAINTAINER_TOKEN, None)
            .seed_dir(&dir, MAINTAINER)
            .state()
            .await;
        let sim = support::serve(st.clone()).await;
        let ci = CiSim::spawn_with_poll(
            st,
            Script::parse("hunt script", script).unwrap(),
            Duration::from_millis(10),
        );
        let master = std::fs::read_to_string(dir.join(MASTER)).unwrap();
        assert_eq!(master.matches(SEEDED_IMAGE).count(), 1);
        let mut t = Self {
            sim,
            ci,
            http: klaud_http::http_client_builder()
                .user_agent("klaud-test")
                .build()
                .unwrap(),
            main: main.expect("seeded"),
            master,
            issue: 0,
        };
        // The candidate's conversation: every hunt record is a comment on it.
        let issue = t
            .send("POST", "/issues", TOKEN, json!({"title": "candidate"}))
            .await;
        t.issue = issue["number"].as_u64().unwrap();
        t
    }

    async fn send(&self, method: &str, path: &str, token: &str, body: Value) -> Value {
        let url = format!("{}/repos/{REPO}{path}", self.sim.url());
        let req = match method {
            "GET" => self.http.get(url),
            _ => self.http.post(url).json(&body),
        };
        let resp = req.bearer_auth(token).send().await.unwrap();
        let status = resp.status();
        let bytes = resp.bytes().await.unwrap();
        assert!(
            status.is_success(),
            "{method} {path}: {status} {}",
            String::from_utf8_lossy(&bytes)
        );
        serde_json::from_slice(&bytes).unwrap_or(Value::Null)
    }

    /// A commit on main that sets only the family's image to `tag`; no ref
    /// moves (the smoke checks it out as `inputs.ref`).
    async fn commit_at(&self, tag: &str) -> String {
        let text = self.master.replace(
            SEEDED_IMAGE,
            &format!("{KEY}:\n  image: vllm/vllm-openai:{tag}\n"),
        );
        let base = self
            .send(
                "GET",
                &format!("/git/commits/{}", self.main),
                TOKEN,
                Value::Null,
            )
            .await;
        let tree = self
            .send(
                "POST",
                "/git/trees",
                TOKEN,
                json!({
                    "base_tree": base["tree"]["sha"],
                    "tree": [{"path": MASTER, "mode": "100644", "type": "blob", "content": text}],
                }),
            )
            .await;
        let commit = self
            .send(
                "POST",
                "/git/commits",
                TOKEN,
                json!({"message": format!("hunt: {tag}"), "tree": tree["sha"], "parents": [self.main]}),
            )
            .await;
        commit["sha"].as_str().unwrap().to_owned()
    }

    /// Dispatches the targeted smoke of the family at `sha` and returns the
    /// run once completed.
    async fn smoke(&self, sha: &str, test_name: &str) -> Value {
        let v = self
            .send(
                "POST",
                "/actions/workflows/e2e-tests.yml/dispatches",
                TOKEN,
                json!({
                    "ref": "main",
                    "inputs": {
                        "ref": sha,
                        "generate-cli-command": format!("test-config --config-files {MASTER} --config-keys {KEY} --smoke"),
                        "fail-fast": "true",
                        "klaud-run": "true",
                        "test-name": test_name,
                    },
                    "return_run_details": true,
                }),
            )
            .await;
        let id = v["workflow_run_id"].as_u64().unwrap();
        let start = tokio::time::Instant::now();
        loop {
            let run = self
                .send("GET", &format!("/actions/runs/{id}"), TOKEN, Value::Null)
                .await;
            if run["status"] == "completed" {
                return run;
            }
            assert!(start.elapsed() < PATIENCE, "run {id} never completed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The measured throughput of the point, read from `results_bmk` by
    /// Klaud's artifact parser.
    async fn throughput(&self, run: u64) -> Option<f64> {
        let list = self
            .send(
                "GET",
                &format!("/actions/runs/{run}/artifacts"),
                TOKEN,
                Value::Null,
            )
            .await;
        let a = list["artifacts"]
            .as_array()?
            .iter()
            .find(|a| a["name"] == AGG_BMK_ARTIFACT)?;
        let zip = self
            .http
            .get(a["archive_download_url"].as_str()?)
            .bearer_auth(TOKEN)
            .send()
            .await
            .ok()?
            .bytes()
            .await
            .ok()?;
        let Ok(Artifact::AggregatedBenchmarks { rows }) =
            parse_artifact(AGG_BMK_ARTIFACT, &zip, &ArtifactLimits::default())
        else {
            panic!("results_bmk does not parse");
        };
        let at = PointKey {
            isl: Some(1024),
            osl: Some(1024),
            tp: Some(8),
            conc: CONC,
            agentic: false,
        };
        Some(measure(&rows, &at, Metric::Throughput).unwrap())
    }

    async fn comment(&self, token: &str, body: &str) {
        self.send(
            "POST",
            &format!("/issues/{}/comments", self.issue),
            token,
            json!({ "body": body }),
        )
        .await;
    }

    async fn comments(&self) -> Vec<(String, String)> {
        let list = self
            .send(
                "GET",
                &format!("/issues/{}/comments?per_page=100", self.issue),
                TOKEN,
                Value::Null,
            )
            .await;
        list.as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["user"]["login"].as_str().unwrap_or_default().to_owned(),
                    c["body"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    /// Smoke runs the CI simulator ran for the family.
    fn gpu_runs(&self) -> usize {
        self.ci
            .events()
            .iter()
            .filter(|e| e.kind == RunKind::Smoke && e.family.as_deref() == Some(FAMILY))
            .count()
    }
}

fn cand() -> CandidateId {
    CandidateId::new(CAND).unwrap()
}

fn key(name: HuntName) -> MarkerKey {
    MarkerKey::Hunt {
        owner_run: OWNER_RUN,
        candidate: cand(),
        name,
    }
}

fn hunt_tag(tag: &str) -> HuntTag {
    let n = tag
        .bytes()
        .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    HuntTag {
        tag: tag.to_owned(),
        digest: Some(format!("sha256:{n:064x}")),
        commit: Some(format!("{n:040x}")),
    }
}

/// The plan of a hunt over `n` nightlies against a baseline `baseline`.
fn plan(n: usize, baseline: f64, budget: u32) -> HuntPlan {
    HuntPlan {
        version: PLAN_VERSION,
        family: FAMILY.into(),
        image: "vllm/vllm-openai".into(),
        old: hunt_tag(&old_tag()),
        new: hunt_tag(&new_tag()),
        tags: (0..n).map(|i| hunt_tag(&nightly(i))).collect(),
        probe: Probe::Metric {
            point: format!("1k/1k tp8 conc{CONC}"),
            metric: Metric::Throughput,
            baseline,
            band: 0.05,
            at: None,
        },
        budget,
        trigger: Trigger::Regression,
        upstream: Some("vllm-project/vllm".into()),
    }
}

/// Starts a hunt: the baseline is the old image's value (its run is not a
/// hunt run), the plan is published.
async fn start(t: &T, n: usize, budget: u32, edit: impl FnOnce(&mut HuntPlan)) -> HuntPlan {
    let sha = t.commit_at(&old_tag()).await;
    let run = t.smoke(&sha, "klaud-baseline").await;
    assert_eq!(run["conclusion"], "success");
    let baseline = t.throughput(run["id"].as_u64().unwrap()).await.unwrap();
    let mut p = plan(n, baseline, budget);
    edit(&mut p);
    t.comment(TOKEN, &render_plan(&key(HuntName::Plan { hunt: 1 }), &p))
        .await;
    p
}

/// Runs steps of the hunt rebuilt from the PR's comments (nothing else is
/// kept between calls) until it is over or `max_steps` ran; a `/klaud stop`
/// by a maintainer after the plan stops it.
async fn drive(t: &T, week_left: u32, max_steps: usize) -> Option<HuntResult> {
    for _ in 0..=max_steps {
        let comments = t.comments().await;
        let rebuilt = Hunt::from_comments(&cand(), comments.iter().map(|(_, b)| b.as_str()))
            .expect("records")
            .expect("a hunt");
        let hunt = rebuilt.hunt;
        let plan_at = comments
            .iter()
            .position(|(_, b)| b.contains(":h1-plan"))
            .unwrap();
        let stopped = comments[plan_at..].iter().any(|(login, body)| {
            login == MAINTAINER
                && klaud_lifecycle::commands::parse_commands(body)
                    .iter()
                    .any(|c| c.command == klaud_lifecycle::commands::Command::Stop)
        });
        let used = hunt.runs_used();
        match hunt.next(week_left.saturating_sub(used), stopped) {
            Next::Done(r) => {
                if rebuilt.ended.is_none() {
                    t.comment(
                        TOKEN,
                        &render_end(&key(HuntName::End { hunt: 1 }), hunt.plan(), &r),
                    )
                    .await;
                }
                return Some(r);
            }
            Next::Try { step, tag } if hunt.steps().len() < max_steps => {
                let sha = t.commit_at(&tag.tag).await;
                let run = t
                    .smoke(&sha, &format!("klaud-hunt-{CAND}-h1-s{step}"))
                    .await;
                let id = run["id"].as_u64().unwrap();
                let passed = run["conclusion"] == "success";
                let value = t.throughput(id).await;
                let record = StepRecord {
                    step,
                    tag: tag.tag.clone(),
                    run: Some(id),
                    verdict: hunt.verdict_of(passed, value),
                    value,
                    note: run["conclusion"].as_str().unwrap_or_default().to_owned(),
                };
                t.comment(
                    TOKEN,
                    &render_step(&key(HuntName::Step { hunt: 1, step }), hunt.plan(), &record),
                )
                .await;
            }
            Next::Try { .. } => return None,
        }
    }
    None
}

#[tokio::test]
async fn a_regression_at_each_position_of_seven_nightlies_is_found_in_three_runs() {
    let n = 7;
    for position in 0..=n {
        let from = if position == n {
            new_tag()
        } else {
            nightly(position)
        };
        let t = T::new(&slower_from(n, &from)).await;
        start(&t, n, 4, |_| {}).await;
        let before = t.gpu_runs();
        let r = drive(&t, 100, 10).await.expect("over");
        assert_eq!(r.reason, EndReason::Found, "position {position}");
        assert_eq!(r.first_bad.tag, from, "position {position}");
        let good = if position == 0 {
            old_tag()
        } else {
            nightly(position - 1)
        };
        assert_eq!(r.last_good.tag, good);
        assert_eq!(t.gpu_runs() - before, 3, "position {position}");
        assert_eq!((r.runs, r.minimum), (3, minimum_runs(n)));
        // The PR says it, in both languages, with the compare link.
        let end = t.comments().await.pop().unwrap().1;
        assert!(end.contains(&format!("first bad: `{from}`")), "{end}");
        assert!(end.contains(&format!("第一个出问题：`{from}`")), "{end}");
        assert!(
            end.contains("https://github.com/vllm-project/vllm/compare/"),
            "{end}"
        );
        // Each step said its tag, result and value against the baseline.
        let steps: Vec<String> = t
            .comments()
            .await
            .into_iter()
            .map(|(_, b)| b)
            .filter(|b| b.contains(":h1-step-"))
            .collect();
        assert_eq!(steps.len(), 3);
        assert!(
            steps
                .iter()
                .all(|s| s.contains("(baseline ") && s.contains("基线"))
        );
    }
}

#[tokio::test]
async fn a_pruned_nightly_in_the_middle_is_never_run_and_the_range_names_it() {
    let n = 7;
    let t = T::new(&slower_from(n, &nightly(4))).await;
    start(&t, n, 4, |p| p.tags[3].digest = None).await;
    let before = t.gpu_runs();
    let r = drive(&t, 100, 10).await.expect("over");
    assert_eq!(r.last_good.tag, nightly(2));
    assert_eq!(r.first_bad.tag, nightly(4));
    assert_eq!(r.untested, vec![nightly(3)]);
    assert_eq!(r.reason, EndReason::TagsGone);
    assert!(t.gpu_runs() - before <= minimum_runs(6) as usize);
    let never = format!("\"tag\":\"{}\"", nightly(3));
    let comments = t.comments().await;
    assert!(comments.iter().any(|(_, b)| b.contains(":h1-step-")));
    assert!(
        !comments
            .iter()
            .any(|(_, b)| b.contains(":h1-step-") && b.contains(&never))
    );
}

#[tokio::test]
async fn a_crash_after_a_step_resumes_from_the_pr_without_repeating_a_run() {
    let n = 7;
    for crash_after in 1..=2 {
        let t = T::new(&slower_from(n, &nightly(5))).await;
        start(&t, n, 4, |_| {}).await;
        let before = t.gpu_runs();
        // The first process records `crash_after` steps and dies.
        assert_eq!(drive(&t, 100, crash_after).await, None);
        assert_eq!(t.gpu_runs() - before, crash_after);
        // A new one, with no memory but the PR, finishes.
        let r = drive(&t, 100, 10).await.expect("over");
        assert_eq!(r.first_bad.tag, nightly(5));
        assert_eq!(t.gpu_runs() - before, 3, "no run repeated");
        // And once more: an ended hunt runs nothing and posts nothing new.
        let comments = t.comments().await.len();
        assert_eq!(drive(&t, 100, 10).await, Some(r));
        assert_eq!(t.comments().await.len(), comments);
        assert_eq!(t.gpu_runs() - before, 3);
    }
}

#[tokio::test]
async fn the_budget_ends_the_hunt_with_the_narrowest_range() {
    let n = 15;
    let t = T::new(&slower_from(n, &nightly(5))).await;
    start(&t, n, 2, |_| {}).await;
    let before = t.gpu_runs();
    let r = drive(&t, 100, 10).await.expect("over");
    assert_eq!(r.reason, EndReason::Budget);
    assert_eq!(t.gpu_runs() - before, 2);
    assert_eq!(
        (r.last_good.tag.as_str(), r.first_bad.tag.as_str()),
        ("nightly-03", "nightly-07")
    );
    let end = t.comments().await.pop().unwrap().1;
    assert!(end.contains("budget of runs is spent"), "{end}");
    assert!(
        end.contains("nightly-04") && end.contains("运行预算已用完"),
        "{end}"
    );
}

#[tokio::test]
async fn a_maintainers_stop_ends_the_hunt_mid_way() {
    let n = 7;
    let t = T::new(&slower_from(n, &nightly(6))).await;
    start(&t, n, 4, |_| {}).await;
    let before = t.gpu_runs();
    assert_eq!(drive(&t, 100, 1).await, None);
    // Only a maintainer's command counts; quoting it does not.
    t.comment(TOKEN, "/klaud stop").await;
    t.comment(MAINTAINER_TOKEN, "> /klaud stop").await;
    assert_eq!(drive(&t, 100, 2).await, None);
    assert_eq!(t.gpu_runs() - before, 2);
    t.comment(MAINTAINER_TOKEN, "/klaud stop").await;
    let r = drive(&t, 100, 10).await.expect("stopped");
    assert_eq!(r.reason, EndReason::Stopped);
    assert_eq!(t.gpu_runs() - before, 2);
    assert_eq!(r.last_good.tag, nightly(5));
    assert_eq!(r.first_bad.tag, new_tag());
}

pub(crate) mod engine {
    //! The engine's own hunt steps (`Engine::hunt_step`) through the real
    //! forge (octocrab against the GitHub simulator) while the CI simulator
    //! runs the smokes: the commit per step, the dispatch, the run found by
    //! title, the records on the PR.

    use std::time::{Duration, Instant};

    use klaud_lifecycle::engine::{
        CandidateRecord, Ending, HuntProgress, MemoryJournal, Progress, Step,
    };
    use klaud_lifecycle::hunt::{
        EndReason, HuntPlan, HuntRange, HuntResult, HuntTag, HuntTags, PLAN_VERSION, Probe, Trigger,
    };
    use klaud_lifecycle::model::Outcome;
    use klaud_sandbox::ci::RunKind;
    use klaud_sandbox::stack::{MAINTAINER, MAINTAINER_TOKEN};
    use klaud_service::GithubLifecycle;
    use klaud_service::pr_commands::handle_commands;

    use crate::support::Harness;

    pub(crate) const KEY: &str = "demo-fp4-b200-vllm";

    fn tag(name: &str) -> HuntTag {
        HuntTag {
            tag: name.into(),
            digest: Some(format!("sha256:{}", "ef".repeat(32))),
            commit: None,
        }
    }

    pub(crate) fn script(from: &str) -> String {
        let mut tags = vec!["\"v0.25.0\"".to_owned()];
        tags.extend((0..7).map(|i| format!("\"t{i}\"")));
        tags.push("\"v0.26.0\"".into());
        format!(
            "[families.\"*\"]\nsmoke = [\"success\"]\nsweep = [\"success\"]\n\
             [families.{KEY}]\nregression = {{ tags = [{}], from = {from:?}, outcome = \"failure\" }}\n",
            tags.join(", ")
        )
    }

    fn plan(family: &str, new: &str) -> HuntPlan {
        HuntPlan {
            version: PLAN_VERSION,
            family: family.into(),
            image: "vllm/vllm-openai".into(),
            old: tag("v0.25.0"),
            new: tag(new),
            tags: (0..7).map(|i| tag(&format!("t{i}"))).collect(),
            probe: Probe::Outcome {
                target: "smoke".into(),
            },
            budget: 4,
            trigger: Trigger::Failure,
            upstream: None,
        }
    }

    /// The candidate driven to its smoke: claim held, PR open.
    async fn at_smoke(env: &Harness, journal: &MemoryJournal) -> CandidateRecord {
        let lifecycle = GithubLifecycle::new(&env.forge);
        let engine = env.engine(&lifecycle, journal, env.clock);
        let target = env.target(KEY).await;
        let mut rec = engine.open_record(&target).await.expect("record");
        while rec.step != Step::Smoke || rec.pull.is_none() {
            engine.step(&mut rec).await.expect("step");
        }
        rec
    }

    fn smokes(env: &Harness) -> usize {
        smokes_of(env, KEY)
    }

    fn smokes_of(env: &Harness, key: &str) -> usize {
        env.stack
            .ci
            .as_ref()
            .expect("a CI simulator")
            .events()
            .iter()
            .filter(|e| {
                e.kind == RunKind::Smoke && e.family.as_deref().is_some_and(|f| f.ends_with(key))
            })
            .count()
    }

    /// Calls the hunt until it ends; every call from a copy of `rec` as it
    /// was before the hunt and a fresh engine (a crash between any two).
    async fn hunt(env: &Harness, rec: &CandidateRecord, plan: &HuntPlan) -> HuntResult {
        let lifecycle = GithubLifecycle::new(&env.forge);
        let journal = MemoryJournal::new();
        let started = Instant::now();
        loop {
            let engine = env.engine(&lifecycle, &journal, env.clock);
            let mut r = rec.clone();
            match engine.hunt_step(&mut r, Some(plan), 0).await.expect("hunt") {
                HuntProgress::Ended(result) => return result,
                HuntProgress::Waiting(_) => tokio::time::sleep(Duration::from_millis(15)).await,
                other => panic!("{other:?}"),
            }
            assert!(started.elapsed() < Duration::from_secs(60), "no end");
        }
    }

    #[tokio::test]
    async fn the_engine_finds_the_first_bad_nightly_in_three_smokes_through_the_sandbox() {
        for from in ["t2", "v0.26.0"] {
            let env = Harness::demo().script(&script(from)).start().await;
            let journal = MemoryJournal::new();
            let rec = at_smoke(&env, &journal).await;
            let name = rec.image.split('@').next().unwrap();
            let new = name.rsplit(':').next().unwrap().to_owned();
            assert_eq!(new, "v0.26.0");
            // The candidate waits at its smoke step, not dispatched yet.
            let before = smokes(&env);
            let result = hunt(&env, &rec, &plan(&rec.family, &new)).await;
            assert_eq!(result.reason, EndReason::Found, "{from}");
            assert_eq!(result.first_bad.tag, from);
            assert_eq!(smokes(&env) - before, 3, "{from}: ⌈log2 8⌉ smokes");
            // The PR carries the plan, three steps and the end.
            let bodies = env.bodies(rec.pull.unwrap()).await;
            let hunt: Vec<&String> = bodies
                .iter()
                .filter(|b| b.starts_with("<!-- klaud-hunt:"))
                .collect();
            assert_eq!(hunt.len(), 5, "{hunt:#?}");
            assert!(
                hunt[4].contains(&format!("first bad: `{from}`")),
                "{}",
                hunt[4]
            );
        }
    }

    /// The registry's answer of a test: the seven tags of [`script`].
    pub(crate) struct Tags;

    #[async_trait::async_trait]
    impl HuntTags for Tags {
        async fn range(
            &self,
            _: &str,
            old: &str,
            new: &str,
        ) -> Result<HuntRange, klaud_lifecycle::hunt::HuntRangeError> {
            let tag_of = |i: &str| {
                i.split('@')
                    .next()
                    .unwrap()
                    .rsplit(':')
                    .next()
                    .unwrap()
                    .to_owned()
            };
            Ok(HuntRange {
                old: tag(&tag_of(old)),
                new: tag(&tag_of(new)),
                tags: (0..7).map(|i| tag(&format!("t{i}"))).collect(),
            })
        }
    }

    /// Drives the candidate to its end with a fresh engine each step (a
    /// crash between any two), the hunt's tags from [`Tags`].
    async fn to_the_end(env: &Harness) -> (CandidateRecord, Option<Ending>) {
        to_the_end_of(env, KEY).await
    }

    async fn to_the_end_of(env: &Harness, key: &str) -> (CandidateRecord, Option<Ending>) {
        let lifecycle = GithubLifecycle::new(&env.forge);
        let journal = MemoryJournal::new();
        let target = env.target(key).await;
        let mut rec = {
            let engine = env
                .engine(&lifecycle, &journal, env.clock)
                .with_hunt_tags(&Tags);
            engine.open_record(&target).await.expect("record")
        };
        let started = Instant::now();
        loop {
            let engine = env
                .engine(&lifecycle, &journal, env.clock)
                .with_hunt_tags(&Tags);
            match engine.step(&mut rec).await.expect("step") {
                Progress::Done(ending) => return (rec, ending),
                Progress::Waiting(_) => tokio::time::sleep(Duration::from_millis(15)).await,
                Progress::Advanced(_) => {}
                other => panic!("{other:?}"),
            }
            assert!(started.elapsed() < Duration::from_secs(90), "no end");
        }
    }

    fn hunt_bodies(bodies: &[String]) -> Vec<&String> {
        bodies
            .iter()
            .filter(|b| b.starts_with("<!-- klaud-hunt:"))
            .collect()
    }

    #[tokio::test]
    async fn a_failed_smoke_hunts_before_the_candidate_finishes_and_ends_as_it_would_have() {
        let env = Harness::demo()
            .script(&script("t4"))
            .configure(|c| {
                c.hunt.enabled = true;
                c.hunt.families = vec![KEY.into()];
            })
            .start()
            .await;
        let (rec, ending) = to_the_end(&env).await;
        let ending = ending.expect("an ending");
        assert_eq!(ending.outcome, Outcome::Failed, "{ending:?}");
        // The candidate's own smoke, then ⌈log2 8⌉ = 3 hunt smokes.
        assert_eq!(smokes(&env), 1 + 3);
        let bodies = env.bodies(rec.pull.unwrap()).await;
        let hunt = hunt_bodies(&bodies);
        assert_eq!(hunt.len(), 5, "{hunt:#?}");
        assert!(hunt[4].contains("first bad: `t4`"), "{}", hunt[4]);
        // The hunt ended before the receipt: the PR was still open for it.
        let end_at = bodies.iter().position(|b| b == hunt[4]).unwrap();
        let receipt_at = bodies
            .iter()
            .position(|b| b.starts_with("<!-- klaud-outcome:"))
            .expect("a receipt");
        assert!(end_at < receipt_at);
        // The receipt carries the hunt's result in both languages, and
        // keeps it in its record.
        let receipt = &bodies[receipt_at];
        assert!(receipt.contains("**Regression hunt:**"), "{receipt}");
        assert!(receipt.contains("**回归排查**："), "{receipt}");
        let record = klaud_lifecycle::report::find_record(receipt)
            .expect("record")
            .expect("a record");
        let parsed = klaud_lifecycle::report::parse_receipt(&record).expect("receipt");
        assert!(
            parsed.hunt.0.iter().any(|l| l.contains("`t4`")),
            "{:?}",
            parsed.hunt
        );
        assert!(!parsed.hunt.1.is_empty());
        // `klaud status` and the web dashboard read it from the record.
        let row = klaud_service::dashboard::OutcomeRow::of(&rec).expect("an outcome row");
        assert_eq!(row.hunt, parsed.hunt.0);
        assert_eq!(row.hunt_zh, parsed.hunt.1);
        let page =
            klaud_service::dashboard::render_page(&klaud_service::dashboard::StatusSnapshot {
                repositories: vec![klaud_service::dashboard::RepositoryStatus {
                    name: "o/r".into(),
                    outcomes: vec![row],
                    ..Default::default()
                }],
                ..Default::default()
            });
        assert!(page.contains("Regression hunt:"), "{page}");
        assert!(page.contains("回归排查："), "{page}");
    }

    /// The sandbox with every run of t3 and later (the candidate v0.26.0
    /// too) 20% slower, and hunts on for the family.
    async fn slower_from_t3() -> Harness {
        let mut tags = vec!["\"v0.25.0\"".to_owned()];
        tags.extend((0..7).map(|i| format!("\"t{i}\"")));
        tags.push("\"v0.26.0\"".into());
        let script = format!(
            "[families.\"*\"]\nsmoke = [\"success\"]\nsweep = [\"success\"]\n\
             [families.{KEY}]\nregression = {{ tags = [{}], from = \"t3\", throughput = 0.8 }}\n",
            tags.join(", ")
        );
        Harness::demo()
            .script(&script)
            .configure(|c| {
                c.hunt.enabled = true;
                c.hunt.families = vec![KEY.into()];
            })
            .start()
            .await
    }

    #[tokio::test]
    async fn a_validated_candidate_whose_point_regressed_hunts_that_point() {
        // Every run of t3 and later (the candidate v0.26.0 too) is 20%
        // slower: the candidate still validates, its sweep is read against
        // the frozen baseline, and the hunt measures the worst point.
        let env = slower_from_t3().await;
        let (rec, ending) = to_the_end(&env).await;
        let ending = ending.expect("an ending");
        // A hunt never changes what the candidate concluded.
        assert_eq!(ending.outcome, Outcome::Validated, "{ending:?}");
        assert_eq!(smokes(&env), 1 + 3, "the candidate's smoke, then ⌈log2 8⌉");
        let bodies = env.bodies(rec.pull.unwrap()).await;
        let hunt = hunt_bodies(&bodies);
        assert_eq!(hunt.len(), 5, "{hunt:#?}");
        assert!(hunt[0].contains("throughput"), "{}", hunt[0]);
        assert!(hunt[4].contains("first bad: `t3`"), "{}", hunt[4]);
        // The receipt says which point regressed, in both languages.
        let receipt = bodies
            .iter()
            .find(|b| b.starts_with("<!-- klaud-outcome:"))
            .expect("a receipt");
        assert!(receipt.contains("**Regression hunt:**"), "{receipt}");
        // The final sweep's report is on the PR once, posted while the hunt
        // runs rather than held for the receipt.
        let sweep = rec.sweep.as_ref().expect("the sweep").run_id;
        let named = format!(":run-{sweep}-");
        let holding: Vec<usize> = bodies
            .iter()
            .enumerate()
            .filter(|(_, b)| {
                klaud_lifecycle::report::find_records(b)
                    .is_ok_and(|f| f.iter().any(|r| r.key.to_string().contains(&named)))
            })
            .map(|(i, _)| i)
            .collect();
        let second_step = bodies.iter().position(|b| b == hunt[1]).expect("a step");
        assert!(
            holding.len() == 1 && holding[0] < second_step,
            "{holding:?} {bodies:#?}"
        );
    }

    #[tokio::test]
    async fn a_validated_agentx_candidate_whose_point_regressed_on_the_same_dataset_hunts_it() {
        // The AgentX family, every run of t3 and later 20% slower: its
        // sweep replays the dataset the baseline's producer run did, so its
        // points count, and the hunt measures the worst of them.
        const AGENTIC: &str = "demo-fp4-b300-vllm-agentic";
        let tag_of = |image: &str| {
            let name = image.split('@').next().unwrap_or(image);
            name.rsplit(':').next().unwrap_or(name).to_owned()
        };
        let (old, new) = {
            let probe = Harness::demo().start().await;
            let target = probe.target(AGENTIC).await;
            let family = probe.repository.family(&target.family).expect("family");
            (tag_of(&family.image().to_string()), tag_of(&target.image))
        };
        let mut tags = vec![format!("{old:?}")];
        tags.extend((0..7).map(|i| format!("\"t{i}\"")));
        tags.push(format!("{new:?}"));
        let script = format!(
            "[families.\"*\"]\nsmoke = [\"success\"]\nsweep = [\"success\"]\n\
             [families.{AGENTIC}]\nregression = {{ tags = [{}], from = \"t3\", throughput = 0.8 }}\n",
            tags.join(", ")
        );
        let env = Harness::demo()
            .script(&script)
            .configure(|c| {
                c.hunt.enabled = true;
                c.hunt.families = vec![AGENTIC.into()];
            })
            .start()
            .await;
        let (rec, ending) = to_the_end_of(&env, AGENTIC).await;
        assert_eq!(ending.expect("an ending").outcome, Outcome::Validated);
        assert_eq!(smokes_of(&env, AGENTIC), 1 + 3, "the smoke, then ⌈log2 8⌉");
        let bodies = env.bodies(rec.pull.unwrap()).await;
        let hunt = hunt_bodies(&bodies);
        assert_eq!(hunt.len(), 5, "{hunt:#?}");
        assert!(hunt[0].contains("AgentX"), "{}", hunt[0]);
        assert!(hunt[4].contains("first bad: `t3`"), "{}", hunt[4]);
    }

    #[tokio::test]
    async fn a_point_whose_published_history_spreads_wider_is_not_hunted() {
        // The same 20% drop, but the results API has published this image
        // three times with 25% between its runs: within the point's noise,
        // so no hunt (and no extra GPU run).
        let env = slower_from_t3().await;
        let published = &env.stack.published;
        let seeded = published.seeded_on(KEY);
        for (days, throughput) in [(3, 0.75), (6, 1.0)] {
            published.publish(klaud_sandbox::ci::Sweep {
                key: KEY.into(),
                conc: None,
                image: None,
                date: seeded.checked_sub_days(chrono::Days::new(days)),
                throughput: Some(throughput),
            });
        }
        let (rec, ending) = to_the_end(&env).await;
        assert_eq!(ending.expect("an ending").outcome, Outcome::Validated);
        assert_eq!(smokes(&env), 1, "no hunt smoke");
        let bodies = env.bodies(rec.pull.unwrap()).await;
        assert!(hunt_bodies(&bodies).is_empty(), "{bodies:#?}");
    }

    #[tokio::test]
    async fn with_the_hunt_off_a_failed_smoke_spends_no_extra_run() {
        let env = Harness::demo().script(&script("t4")).start().await;
        let (rec, ending) = to_the_end(&env).await;
        assert_eq!(ending.expect("an ending").outcome, Outcome::Failed);
        assert_eq!(smokes(&env), 1);
        let bodies = env.bodies(rec.pull.unwrap()).await;
        assert!(hunt_bodies(&bodies).is_empty());
    }

    /// Steps the candidate with a fresh engine each time until `done`.
    async fn step_until(
        env: &Harness,
        journal: &MemoryJournal,
        rec: &mut CandidateRecord,
        done: impl Fn(&CandidateRecord) -> bool,
    ) {
        let lifecycle = GithubLifecycle::new(&env.forge);
        let started = Instant::now();
        while !done(rec) {
            let engine = env
                .engine(&lifecycle, journal, env.clock)
                .with_hunt_tags(&Tags);
            if let Progress::Waiting(_) = engine.step(rec).await.expect("step") {
                tokio::time::sleep(Duration::from_millis(15)).await;
            }
            assert!(
                started.elapsed() < Duration::from_secs(90),
                "never: {rec:#?}"
            );
        }
    }

    /// One pass of command handling, as the wave runs it.
    async fn handle(env: &Harness, journal: &MemoryJournal, rec: &mut CandidateRecord) {
        let lifecycle = GithubLifecycle::new(&env.forge);
        let engine = env
            .engine(&lifecycle, journal, env.clock)
            .with_hunt_tags(&Tags);
        handle_commands(&env.forge, &engine, rec, None)
            .await
            .expect("commands");
    }

    #[tokio::test]
    async fn a_maintainers_hunt_command_starts_one_with_the_hunt_off() {
        let env = Harness::demo().script(&script("t2")).start().await;
        let journal = MemoryJournal::new();
        let mut rec = at_smoke(&env, &journal).await;
        let pr = rec.pull.unwrap();
        env.person(MAINTAINER_TOKEN)
            .comment(pr, "/klaud hunt smoke")
            .await;
        handle(&env, &journal, &mut rec).await;
        let bodies = env.bodies(pr).await;
        let plan = hunt_bodies(&bodies);
        assert_eq!(plan.len(), 1, "{bodies:#?}");
        assert!(plan[0].contains(MAINTAINER), "{}", plan[0]);
        assert!(
            bodies
                .iter()
                .any(|b| b.contains("Hunt planned over 7 served tags")),
            "{bodies:#?}"
        );
        step_until(&env, &journal, &mut rec, |r| r.step == Step::Done).await;
        assert_eq!(rec.ending.as_ref().unwrap().outcome, Outcome::Failed);
        assert_eq!(smokes(&env), 1 + 3);
        let bodies = env.bodies(pr).await;
        let hunt = hunt_bodies(&bodies);
        assert_eq!(hunt.len(), 5, "{hunt:#?}");
        assert!(hunt[4].contains("first bad: `t2`"), "{}", hunt[4]);
    }

    #[tokio::test]
    async fn a_maintainers_stop_mid_hunt_ends_it_with_the_narrowest_range_and_hands_off() {
        let env = Harness::demo()
            .script(&script("t4"))
            .configure(|c| c.hunt.enabled = true)
            .start()
            .await;
        let journal = MemoryJournal::new();
        let mut rec = at_smoke(&env, &journal).await;
        let pr = rec.pull.unwrap();
        // The candidate's smoke, then the first hunt step's.
        step_until(&env, &journal, &mut rec, |_| smokes(&env) == 2).await;
        env.person(MAINTAINER_TOKEN)
            .comment(pr, "/klaud stop")
            .await;
        handle(&env, &journal, &mut rec).await;
        step_until(&env, &journal, &mut rec, |r| r.step == Step::Done).await;
        let ending = rec.ending.as_ref().unwrap();
        assert!(ending.hands_off, "{ending:?}");
        assert_eq!(smokes(&env), 2, "no run after the stop");
        let bodies = env.bodies(pr).await;
        let hunt = hunt_bodies(&bodies);
        let end = hunt.last().unwrap();
        assert!(end.contains("-end"), "{hunt:#?}");
        assert!(end.contains("stopped by a maintainer"), "{end}");
    }

    #[tokio::test]
    async fn a_stop_whose_permission_lookup_fails_mid_hunt_is_refused_and_the_hunt_goes_on() {
        use klaud_sandbox::github::{Fault, FaultAction};
        for status in [404, 502] {
            let env = Harness::demo()
                .script(&script("t4"))
                .configure(|c| c.hunt.enabled = true)
                .start()
                .await;
            let journal = MemoryJournal::new();
            let mut rec = at_smoke(&env, &journal).await;
            let pr = rec.pull.unwrap();
            step_until(&env, &journal, &mut rec, |_| smokes(&env) == 2).await;
            env.stack
                .state()
                .add_fault(Fault {
                    method: Some("GET".into()),
                    path: format!("/repos/{}/collaborators/*/permission", crate::support::REPO),
                    count: 1000,
                    action: FaultAction::Status {
                        status,
                        retry_after: None,
                        message: None,
                    },
                })
                .await;
            env.person(MAINTAINER_TOKEN)
                .comment(pr, "/klaud stop")
                .await;
            handle(&env, &journal, &mut rec).await;
            let bodies = env.bodies(pr).await;
            let reply = bodies
                .iter()
                .find(|b| b.contains("Refused:"))
                .unwrap_or_else(|| panic!("{status}: no refusal in {bodies:#?}"));
            assert!(reply.contains("Could not verify"), "{status}: {reply}");
            // Refused: the candidate waits in its hunt as before, not handed off.
            let ending = rec
                .ending
                .as_ref()
                .expect("the hunt runs before the finish");
            assert!(!ending.hands_off, "{status}: {ending:?}");
            // The hunt reads no commands: it runs on to its end and the
            // candidate ends as it would have, the lookup error counted
            // nowhere as a vanished PR.
            step_until(&env, &journal, &mut rec, |r| r.step == Step::Done).await;
            let ending = rec.ending.as_ref().unwrap();
            assert_eq!(ending.outcome, Outcome::Failed, "{status}: {ending:?}");
            assert!(!ending.hands_off, "{status}: {ending:?}");
            assert!(
                !ending.message.to_lowercase().contains("no longer exist"),
                "{status}: {ending:?}"
            );
            assert_eq!(smokes(&env), 1 + 3, "{status}");
            let bodies = env.bodies(pr).await;
            let end = hunt_bodies(&bodies).last().cloned().unwrap();
            assert!(end.contains("first bad: `t4`"), "{status}: {end}");
        }
    }

    #[tokio::test]
    async fn the_weekly_budget_counts_the_hunt_runs_on_github() {
        let env = Harness::demo()
            .script(&script("t4"))
            .configure(|c| {
                c.hunt.enabled = true;
                c.hunt.weekly_budget = 2;
            })
            .start()
            .await;
        let (rec, ending) = to_the_end(&env).await;
        assert_eq!(ending.unwrap().outcome, Outcome::Failed);
        assert_eq!(smokes(&env), 1 + 2);
        let bodies = env.bodies(rec.pull.unwrap()).await;
        let end = hunt_bodies(&bodies).last().cloned().unwrap();
        assert!(end.contains("this week"), "{end}");
    }

    #[tokio::test]
    async fn the_wave_reads_a_hunts_tags_from_the_registry() {
        use klaud_lifecycle::hunt::RegistryHuntTags;
        use klaud_sandbox::registry::TagSeed;
        let env = Harness::demo().start().await;
        for tag in [
            "v0.24.0", "v0.25.1", "v0.25.2", "v0.25.3", "v0.27.0", "nightly",
        ] {
            env.stack
                .registry
                .add_tag("vllm/vllm-openai", tag, &TagSeed::default())
                .expect("tag");
        }
        let registry = env.registry();
        let tags = RegistryHuntTags { registry };
        let old = "vllm/vllm-openai:v0.25.0";
        let range = tags
            .range(KEY, old, "vllm/vllm-openai:v0.26.0")
            .await
            .expect("range");
        assert_eq!(range.old.tag, "v0.25.0");
        assert_eq!(range.new.tag, "v0.26.0");
        let between: Vec<&str> = range.tags.iter().map(|t| t.tag.as_str()).collect();
        assert_eq!(between, ["v0.25.1", "v0.25.2", "v0.25.3"], "{range:#?}");
        for t in range.tags.iter().chain([&range.old, &range.new]) {
            assert!(
                t.digest
                    .as_deref()
                    .is_some_and(|d| d.starts_with("sha256:")),
                "{t:?}"
            );
        }
        // A push-ordered nightly track: placed by Docker Hub's push times
        // (a tag pushed outside the range, and one without a time, left
        // out); each step's commit is the one its tag names.
        let at = |day: u32| {
            chrono::DateTime::parse_from_rfc3339(&format!("2026-08-{day:02}T10:00:00Z"))
                .unwrap()
                .with_timezone(&chrono::Utc)
        };
        let nightly = |n: u32| format!("nightly-{:040x}", 0xabc000 + n);
        for (n, day) in [(1, 20), (2, 10), (3, 30), (4, 3)] {
            let seed = TagSeed {
                pushed: Some(at(day)),
                ..TagSeed::default()
            };
            env.stack
                .registry
                .add_tag("vllm/vllm-openai", &nightly(n), &seed)
                .expect("tag");
        }
        env.stack
            .registry
            .add_tag("vllm/vllm-openai", &nightly(5), &TagSeed::default())
            .expect("tag");
        let range = tags
            .range(
                KEY,
                "vllm/vllm-openai:nightly-3ee2df30337a301164c46ae444b76ee67e71c106",
                "vllm/vllm-openai:nightly-5e35a6f4f9bbc217c599692157ca985c894373f7",
            )
            .await
            .expect("nightly range");
        // The demo's own seven nightlies in between are there too.
        assert_eq!(range.tags.len(), 7 + 3, "{range:#?}");
        let added: Vec<&klaud_lifecycle::hunt::HuntTag> = range
            .tags
            .iter()
            .filter(|t| t.tag.starts_with("nightly-0000"))
            .collect();
        let between: Vec<&str> = added.iter().map(|t| t.tag.as_str()).collect();
        assert_eq!(between, [nightly(2), nightly(1), nightly(3)], "{range:#?}");
        assert_eq!(
            added[0].commit.as_deref(),
            Some(&nightly(2)["nightly-".len()..])
        );
        // Not one repository: no plan, and the error says why.
        let err = tags
            .range(KEY, old, "lmsysorg/sglang:v0.26.0")
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("not one image repository"),
            "{err}"
        );
    }
}
