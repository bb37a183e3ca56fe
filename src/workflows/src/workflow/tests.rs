use super::*;
use serde_json::json;

const SWEEP: &str = r#"
name: Sweep
run-name: Sweep - ${{ github.event.pull_request.title || github.event.head_commit.message }}
concurrency:
  group: sweep-${{ github.event.pull_request.number || github.sha }}-${{ github.event.action == 'labeled' && github.event.label.name != 'go' && github.run_id || 'active' }}
  cancel-in-progress: ${{ github.event_name == 'pull_request' }}
on:
  push:
    branches: [main]
    paths: ["changelog.yaml"]
  pull_request:
    branches: [main]
    types: [synchronize, labeled]
    paths: ["changelog.yaml"]
jobs:
  gate:
    if: >-
      !github.event.pull_request.draft &&
      (github.event.action != 'labeled' || github.event.label.name == 'go')
    runs-on: ubuntu-latest
    outputs:
      skip: ${{ steps.s.outputs.skip }}
    steps:
      - id: s
        run: echo skip=false >> "$GITHUB_OUTPUT"
  sweep:
    needs: gate
    if: needs.gate.outputs.skip != 'true'
    uses: ./.github/workflows/tmpl.yml
  collect:
    needs: sweep
    if: always() && needs.sweep.result != 'skipped'
    runs-on: ubuntu-latest
    steps:
      - uses: actions/upload-artifact@v4
        with:
          name: results_all
          path: agg.json
  notify:
    needs: collect
    runs-on: ubuntu-latest
    steps:
      - run: echo done
"#;

const TMPL: &str = r#"
on:
  workflow_call:
jobs:
  bench:
    runs-on: gpu
    steps:
      - uses: actions/upload-artifact@v4
        with:
          name: bmk_${{ env.RESULT }}
          path: x.json
      - name: manifest
        if: ${{ inputs.klaud }}
        uses: actions/upload-artifact@v4
        with:
          name: klaud-sweep-manifest
          path: m.json
"#;

const SMOKE: &str = r#"
name: Smoke
run-name: Smoke - ${{ inputs.test-name }}
on:
  workflow_dispatch:
    inputs:
      test-name:
        description: Name
        required: true
        type: string
      ref:
        type: string
      fast:
        type: boolean
        default: false
      level:
        type: choice
        options: [low, high]
        default: low
      count:
        type: number
        default: 3
jobs:
  run:
    runs-on: ubuntu-latest
    steps:
      - run: echo
"#;

fn pr(action: &str, draft: bool, labels: &[&str], label: Option<&str>) -> EventContext {
    let mut event = json!({
        "action": action,
        "pull_request": {
            "number": 5, "title": "Bump image", "draft": draft,
            "labels": labels.iter().map(|l| json!({"name": l})).collect::<Vec<_>>(),
            "head": {"ref": "klaud/auto-1", "sha": "h1", "repo": {"full_name": "o/r"}},
            "base": {"ref": "main", "repo": {"full_name": "o/r"}},
        },
        "repository": {"full_name": "o/r"},
    });
    if let Some(l) = label {
        event["label"] = json!({"name": l});
    }
    EventContext::new("pull_request", event)
        .unwrap()
        .with_github("run_id", json!(99))
        .with_changed_files(["changelog.yaml", "configs/x.yaml"])
}

fn sweep() -> Workflow {
    Workflow::parse("sweep.yml", SWEEP).unwrap()
}

#[test]
fn run_title_uses_run_name_then_event_fallbacks() {
    let wf = sweep();
    assert_eq!(
        wf.run_title(&pr("labeled", false, &[], None)).unwrap(),
        "Sweep - Bump image"
    );
    let push = EventContext::new(
        "push",
        json!({"ref": "refs/heads/main", "after": "s", "head_commit": {"message": "Merge #5"}}),
    )
    .unwrap();
    assert_eq!(wf.run_title(&push).unwrap(), "Sweep - Merge #5");

    let bare = Workflow::parse(
        "bare.yml",
        "on: [push, workflow_dispatch]\njobs:\n  a:\n    runs-on: x\n    steps: [{run: echo}]\n",
    )
    .unwrap();
    assert_eq!(bare.name(), ".github/workflows/bare.yml");
    assert_eq!(bare.run_title(&push).unwrap(), "Merge #5");
    let dispatch =
        EventContext::new("workflow_dispatch", json!({"ref": "refs/heads/main"})).unwrap();
    assert_eq!(
        bare.run_title(&dispatch).unwrap(),
        ".github/workflows/bare.yml"
    );
    assert_eq!(
        bare.run_title(&pr("opened", false, &[], None)).unwrap(),
        "Bump image"
    );
}

#[test]
fn triggers_follow_types_branches_and_paths() {
    let wf = sweep();
    assert!(wf.triggered_by(&pr("labeled", false, &[], Some("go"))));
    assert!(wf.triggered_by(&pr("synchronize", false, &[], None)));
    assert!(
        !wf.triggered_by(&pr("opened", false, &[], None)),
        "opened is not listed"
    );
    assert!(!wf.triggered_by(&pr("labeled", false, &[], None).with_changed_files(["README.md"])));
    let other_base = EventContext::new(
        "pull_request",
        json!({"action": "labeled", "pull_request": {"base": {"ref": "release"}}}),
    )
    .unwrap()
    .with_changed_files(["changelog.yaml"]);
    assert!(!wf.triggered_by(&other_base));
    let push = |r: &str, files: &[&str]| {
        EventContext::new("push", json!({"ref": r, "after": "s"}))
            .unwrap()
            .with_changed_files(files.iter().copied())
    };
    assert!(wf.triggered_by(&push("refs/heads/main", &["changelog.yaml"])));
    assert!(!wf.triggered_by(&push("refs/heads/dev", &["changelog.yaml"])));
    assert!(!wf.triggered_by(&push("refs/tags/v1", &["changelog.yaml"])));
    assert!(!wf.triggered_by(&EventContext::new("workflow_dispatch", json!({})).unwrap()));

    let default_types = Workflow::parse(
        "d.yml",
        "on:\n  pull_request:\n  issue_comment:\n    types: [created]\njobs: {}\n",
    )
    .unwrap();
    assert!(default_types.triggered_by(&pr("opened", false, &[], None)));
    assert!(!default_types.triggered_by(&pr("labeled", false, &[], None)));
    let comment = |a: &str| EventContext::new("issue_comment", json!({"action": a})).unwrap();
    assert!(default_types.triggered_by(&comment("created")));
    assert!(!default_types.triggered_by(&comment("deleted")));
    assert!(!default_types.triggered_by(&EventContext::new("push", json!({})).unwrap()));
}

#[test]
fn job_plan_skips_dependants_and_respects_status_functions() {
    let wf = sweep();
    let draft = wf
        .plan_jobs(&pr("labeled", true, &["go"], Some("go")))
        .unwrap();
    assert!(
        draft
            .jobs
            .iter()
            .all(|j| j.decision == JobDecision::Skipped),
        "{draft:?}"
    );
    assert_eq!(draft.outlook(), RunOutlook::Skipped);
    assert_eq!(draft.conclusion(), Some("skipped"));

    // The gate runs, but its output is only known once its steps ran.
    let ready = wf
        .plan_jobs(&pr("labeled", false, &["go"], Some("go")))
        .unwrap();
    assert_eq!(ready.job("gate").unwrap().decision, JobDecision::Runs);
    assert_eq!(ready.job("sweep").unwrap().decision, JobDecision::MayRun);
    assert_eq!(ready.job("collect").unwrap().decision, JobDecision::MayRun);
    assert_eq!(ready.outlook(), RunOutlook::Runs);
    assert_eq!(ready.conclusion(), None);

    let mut outputs = Map::new();
    outputs.insert("skip".into(), json!("true"));
    let skipping = wf
        .plan_jobs_assuming(
            &pr("labeled", false, &["go"], Some("go")),
            &Assumptions::default().outputs("gate", outputs),
        )
        .unwrap();
    assert_eq!(
        skipping.job("sweep").unwrap().decision,
        JobDecision::Skipped
    );
    assert_eq!(
        skipping.job("collect").unwrap().decision,
        JobDecision::Skipped
    );
    assert_eq!(
        skipping.job("notify").unwrap().decision,
        JobDecision::Skipped
    );

    let mut outputs = Map::new();
    outputs.insert("skip".into(), json!("false"));
    let failing = wf
        .plan_jobs_assuming(
            &pr("labeled", false, &["go"], Some("go")),
            &Assumptions::default()
                .outputs("gate", outputs)
                .result("sweep", JobResult::Failure),
        )
        .unwrap();
    assert_eq!(failing.job("sweep").unwrap().decision, JobDecision::Runs);
    assert_eq!(
        failing.job("collect").unwrap().decision,
        JobDecision::Runs,
        "always() runs after a failure"
    );
    assert_eq!(
        failing.job("notify").unwrap().decision,
        JobDecision::Skipped,
        "an ancestor failed"
    );

    // A label that is not ours: the gate is skipped and so is everything after it.
    let other = wf
        .plan_jobs(&pr("labeled", false, &["go"], Some("docs")))
        .unwrap();
    assert_eq!(other.outlook(), RunOutlook::Skipped);
}

#[test]
fn transitive_skips_are_seen_by_success() {
    let text = r#"
on: push
jobs:
  a:
    if: false
    runs-on: x
    steps: [{run: echo}]
  b:
    needs: a
    if: always()
    runs-on: x
    steps: [{run: echo}]
  c:
    needs: b
    runs-on: x
    steps: [{run: echo}]
"#;
    let wf = Workflow::parse("t.yml", text).unwrap();
    let plan = wf
        .plan_jobs(&EventContext::new("push", json!({})).unwrap())
        .unwrap();
    let d = |id: &str| plan.job(id).unwrap().decision;
    assert_eq!(
        (d("a"), d("b"), d("c")),
        (
            JobDecision::Skipped,
            JobDecision::Runs,
            JobDecision::Skipped
        )
    );
}

#[test]
fn concurrency_is_evaluated_per_event() {
    let wf = sweep();
    let ours = wf
        .concurrency(&pr("labeled", false, &[], Some("go")))
        .unwrap()
        .unwrap();
    assert_eq!(ours.group, "sweep-5-active");
    assert!(ours.cancel_in_progress);
    let foreign = wf
        .concurrency(&pr("labeled", false, &[], Some("docs")))
        .unwrap()
        .unwrap();
    assert_eq!(foreign.group, "sweep-5-99");
    assert!(!ours.same_group(&foreign));
    let push =
        EventContext::new("push", json!({"ref": "refs/heads/main", "after": "abc"})).unwrap();
    let c = wf.concurrency(&push).unwrap().unwrap();
    assert_eq!(c.group, "sweep-abc-active");
    assert!(!c.cancel_in_progress);
    assert!(
        ConcurrencyGroup {
            group: "A".into(),
            cancel_in_progress: true
        }
        .same_group(&ConcurrencyGroup {
            group: "a".into(),
            cancel_in_progress: false
        })
    );
}

#[test]
fn dispatch_inputs_are_validated_like_github() {
    let wf = Workflow::parse("smoke.yml", SMOKE).unwrap();
    let inputs = wf.dispatch_inputs().unwrap();
    assert_eq!(
        inputs.iter().map(|i| i.name.as_str()).collect::<Vec<_>>(),
        ["test-name", "ref", "fast", "level", "count"]
    );
    assert_eq!(inputs[2].kind, InputType::Boolean);
    assert_eq!(inputs[2].default, Some(json!(false)));
    assert_eq!(inputs[3].options, ["low", "high"]);
    assert!(inputs[0].required);

    let given = |v: Json| v.as_object().unwrap().clone();
    let refused = wf
        .validate_dispatch(&given(
            json!({"test-name": "t", "klaud-run": "true", "zz": "1"}),
        ))
        .unwrap_err();
    assert_eq!(
        refused.message,
        r#"Unexpected inputs provided: ["klaud-run", "zz"]"#
    );
    assert_eq!(refused.inputs, ["klaud-run", "zz"]);
    let refused = wf
        .validate_dispatch(&given(json!({"ref": "x"})))
        .unwrap_err();
    assert_eq!(refused.message, "Required input 'test-name' not provided");
    let refused = wf
        .validate_dispatch(&given(json!({"test-name": "t", "fast": "yes"})))
        .unwrap_err();
    assert_eq!(
        refused.message,
        "Provided value 'yes' for input 'fast' not in the list of allowed values"
    );
    let refused = wf
        .validate_dispatch(&given(json!({"test-name": "t", "level": "mid"})))
        .unwrap_err();
    assert_eq!(
        refused.message,
        "Provided value 'mid' for input 'level' not in the list of allowed values"
    );
    assert!(
        wf.validate_dispatch(&given(json!({"test-name": {"a": 1}})))
            .is_err()
    );

    let ok = wf
        .validate_dispatch(&given(json!({"test-name": "t", "fast": "true"})))
        .unwrap();
    assert_eq!(
        Json::Object(ok.context().clone()),
        json!({"test-name": "t", "ref": "", "fast": true, "level": "low", "count": 3})
    );
    assert_eq!(ok.event_inputs()["fast"], json!("true"));
    assert_eq!(ok.event_inputs()["count"], json!("3"));
    let ctx = EventContext::new("workflow_dispatch", json!({"ref": "refs/heads/main"}))
        .unwrap()
        .with_dispatch_inputs(&ok);
    assert_eq!(wf.run_title(&ctx).unwrap(), "Smoke - t");
    assert_eq!(ctx.event()["inputs"]["fast"], json!("true"));
    assert!(
        wf.validate_dispatch(&given(json!({"test-name": "t", "fast": false})))
            .is_ok()
    );

    let no_dispatch = sweep();
    assert_eq!(
        no_dispatch
            .validate_dispatch(&Map::new())
            .unwrap_err()
            .message,
        "Workflow does not have 'workflow_dispatch' trigger"
    );
    assert!(no_dispatch.dispatch_inputs().is_none());
}

#[test]
fn draft_analysis_reads_job_conditions() {
    assert!(!sweep().runs_on_draft("go").unwrap());
    let drafts_ok = SWEEP.replace("!github.event.pull_request.draft &&", "");
    let wf = Workflow::parse("sweep.yml", &drafts_ok).unwrap();
    assert!(wf.runs_on_draft("go").unwrap());
    // A push to a draft carrying any label runs this gate.
    assert!(wf.runs_on_draft("docs").unwrap());
    let label_gated = drafts_ok.replace(
        "(github.event.action != 'labeled' || github.event.label.name == 'go')",
        "contains(github.event.pull_request.labels.*.name, 'go')",
    );
    let wf = Workflow::parse("sweep.yml", &label_gated).unwrap();
    assert!(wf.runs_on_draft("go").unwrap());
    assert!(!wf.runs_on_draft("docs").unwrap());
}

#[test]
fn artifact_uploads_follow_local_reusable_workflows() {
    let wf = sweep();
    let resolve = |path: &str| (path == ".github/workflows/tmpl.yml").then(|| TMPL.to_string());
    let uploads = wf.artifact_uploads(&resolve).unwrap();
    let names: Vec<&str> = uploads.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "bmk_${{ env.RESULT }}",
            "klaud-sweep-manifest",
            "results_all"
        ]
    );
    assert_eq!(uploads[0].via, ["sweep.yml#sweep"]);
    assert_eq!(uploads[0].workflow, ".github/workflows/tmpl.yml");
    assert_eq!(uploads[1].condition.as_deref(), Some("${{ inputs.klaud }}"));
    assert_eq!(uploads[1].literal_name(), Some("klaud-sweep-manifest"));
    assert!(uploads[0].may_be_named("bmk_dsr1_fp4"));
    assert!(!uploads[0].may_be_named("eval_x"));
    assert!(wf.may_upload("klaud-sweep-manifest", &resolve).unwrap());
    let ctx = pr("labeled", false, &["go"], Some("go"));
    assert_eq!(
        uploads[1].condition_holds(&ctx).unwrap(),
        None,
        "a template's inputs come from its caller"
    );
    assert_eq!(
        uploads[2].condition_holds(&ctx).unwrap(),
        Some(true),
        "no if: at all"
    );
    assert!(!wf.may_upload("klaud-sweep-manifest", &|_| None).unwrap());

    let looping = "on: workflow_call\njobs:\n  again:\n    uses: ./.github/workflows/loop.yml\n";
    let wf = Workflow::parse("loop.yml", looping).unwrap();
    assert!(
        wf.artifact_uploads(&|_| Some(looping.to_string()))
            .unwrap()
            .is_empty()
    );
    let broken = Workflow::parse(
        "c.yml",
        "on: push\njobs:\n  a:\n    uses: ./.github/workflows/b.yml\n",
    )
    .unwrap();
    let err = broken
        .artifact_uploads(&|_| Some("jobs: [".into()))
        .unwrap_err();
    assert_eq!(err.file, ".github/workflows/b.yml");
}

#[test]
fn workflows_can_be_shared_between_threads() {
    fn shared<T: Send + Sync>() {}
    shared::<Workflow>();
    shared::<EventContext>();
}

#[test]
fn errors_name_the_file_field_and_line() {
    let err = Workflow::parse(
        "w.yml",
        "on: push\njobs:\n  a:\n    runs-on: x\n    steps: [{run: echo}]\n    if: github.x ==\n",
    )
    .unwrap_err();
    assert_eq!(err.field.as_deref(), Some("jobs.a.if"));
    assert!(
        err.to_string()
            .starts_with("w.yml: field `jobs.a.if`: invalid expression"),
        "{err}"
    );

    let err = Workflow::parse(
        "w.yml",
        "on: push\njobs:\n  a:\n    needs: b\n    runs-on: x\n    steps: []\n",
    )
    .unwrap_err();
    assert_eq!(err.message, "job 'a' depends on unknown job 'b'");
    let err = Workflow::parse(
            "w.yml",
            "on: push\njobs:\n  a:\n    needs: b\n    runs-on: x\n    steps: []\n  b:\n    needs: a\n    runs-on: x\n    steps: []\n",
        )
        .unwrap_err();
    assert!(err.message.contains("dependency cycle"), "{err}");
    let err =
        Workflow::parse("w.yml", "on:\n  push:\n    paths: ['[oops']\njobs: {}\n").unwrap_err();
    assert_eq!(err.field.as_deref(), Some("on.push"));
    let err =
        Workflow::parse("w.yml", "name: x\non: push\njobs:\n  a:\n    steps: 3\n").unwrap_err();
    assert_eq!(err.field.as_deref(), Some("jobs.a"), "{err}");
    let err = Workflow::parse("w.yml", "on: push\njobs: {}\nrun-name: ${{ a ==\n").unwrap_err();
    assert_eq!(err.field.as_deref(), Some("run-name"));
    let err = Workflow::parse("w.yml", "on: push\n  bad: [\n").unwrap_err();
    assert!(err.line.is_some(), "{err:?}");
    let wf = Workflow::parse(
        "w.yml",
        "on: push\njobs:\n  a:\n    runs-on: x\n    steps: []\n    if: fromJSON('nope')\n",
    )
    .unwrap();
    let err = wf
        .plan_jobs(&EventContext::new("push", json!({})).unwrap())
        .unwrap_err();
    assert_eq!(err.field.as_deref(), Some("jobs.a.if"));
}

#[test]
fn hostile_yaml_is_refused_without_panicking() {
    let bomb = "a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: [*f,*f,*f,*f,*f,*f,*f,*f,*f]\non: push\njobs: {}\n";
    let deep = format!(
        "on: push\njobs: {}{}\n",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let cases = [
        "",
        "---",
        "[]",
        "42",
        "on: push",
        "jobs: {}",
        "on: 3\njobs: {}",
        "on: push\njobs: [a]",
        "on: push\njobs:\n  a: 1",
        "\u{0}\u{1}",
        "on: {push: {branches: 3}}\njobs: {}",
        "on:\n  workflow_dispatch:\n    inputs:\n      a: {type: nonsense}\njobs: {}",
        "on: push\nconcurrency: {group: '${{ unclosed'}\njobs: {}",
        "on: push\njobs:\n  a:\n    uses: 'docker://x'\n",
        "&a on: *a",
        bomb,
        &deep,
    ];
    for case in cases {
        assert!(
            Workflow::parse("h.yml", case).is_err(),
            "{case:?} should be refused"
        );
    }
}
