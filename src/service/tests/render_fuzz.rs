//! Fuzzing on stable: every text Klaud writes on GitHub that carries
//! outside input (the PR title and the baseline block of its body, attempt
//! reports, receipts, command replies, the dashboard issue, the sign-off
//! verdict, the wave's Actions step summary) is rendered with hostile strings in every outside field:
//! mentions, `<script>`, `</details>`, `<!--` and `-->`, backticks, pipes,
//! line breaks, bidi controls and arbitrary unicode. Each body is read back
//! by a CommonMark parser, as GitHub would, and must hold no live mention,
//! no HTML but Klaud's own tags (balanced `<details>`, hidden comments
//! that end where Klaud ends them), no link to an unsafe address; and its
//! hidden markers must still parse back to what was rendered.
//!
//! The default case count keeps CI fast. A longer run:
//!
//! ```text
//! PROPTEST_CASES=5000 cargo test -p klaud-service --test render_fuzz
//! ```

use chrono::{NaiveDate, TimeZone, Utc};
use klaud_claims::PullNumber;
use klaud_lifecycle::baseline::{
    Baseline, BaselinePoint, BaselineValue, PointSpec, Scenario, Workers,
};
use klaud_lifecycle::commands::{parse_error_reply, parse_try, status_text, unknown_reply};
use klaud_lifecycle::engine::CandidateRecord;
use klaud_lifecycle::model::{
    AttemptKind, AttemptStatus, CandidateId, Declined, FinishedResult, Outcome, Phase, RunRef,
};
use klaud_lifecycle::playbook::sick::SickNodeRow;
use klaud_lifecycle::report::LearnedEntry;
use klaud_lifecycle::report::{
    AttemptReport, FrozenBaseline, Measure, Provenance, Receipt, ReportName, ReportRow,
    ReportSection, UpstreamRange, find_record, initial_body, parse_baseline_block, parse_receipt,
    parse_report, pr_title, render_baseline_block, render_receipt, render_report, splice_baseline,
};
use klaud_service::dashboard_issue::{Kept, KeptIgnore, KeptRunNow, View, body};
use klaud_service::{CandidateSummary, WaveSummary};
use klaud_signoff::evidence::SignoffKind;
use klaud_signoff::{CheckResult, ContractVersion, Verdict, render};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError};
use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

const CAND: &str = "d92e15065c55779d-0123456789abcdef";

fn config(default_cases: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases);
    Config {
        cases,
        ..Config::default()
    }
}

/// What a hostile author plants in a field.
const PLANTED: &[&str] = &[
    "@victim",
    "@org/team",
    "<script>alert(1)</script>",
    "</details>",
    "<details open>",
    "<!--",
    "-->",
    "<img src=x onerror=alert(1)>",
    "`",
    "```",
    "|",
    "\n",
    "\r\n\n# heading\n",
    "[x](javascript:alert(1))",
    "**bold**",
    "#12",
    "\u{202e}",
    "\u{200b}",
    "\u{2060}",
    "&lt;",
    "\\",
    "\"",
    "<code title=\"x\">",
    "</code>",
    "<!-- klaud:state v1 {} -->",
];

/// One hostile field: planted pieces and arbitrary text, never empty.
fn hostile() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        3 => proptest::sample::select(PLANTED).prop_map(str::to_owned),
        1 => "\\PC{0,8}",
        1 => "[a-z0-9_.:/-]{1,8}",
    ];
    proptest::collection::vec(piece, 1..8).prop_map(|v| format!("x{}", v.concat()))
}

/// A field that must read back through a hidden marker as a token (a
/// family in a steering box): hostile, but without white space, as the
/// kept block requires.
fn hostile_token() -> impl Strategy<Value = String> {
    hostile().prop_map(|s| s.split_whitespace().collect::<Vec<_>>().join("_"))
}

/// The logins Klaud mentions on purpose: the sign-off's escalation.
const MEANT: &[&str] = &[
    "functionstackx",
    "cquil11",
    "Oseltamivir",
    "adibarra",
    "signer-1",
];

/// Reads `body` as GitHub's Markdown does and fails on anything outside
/// input could have made live.
fn assert_inert(what: &str, body: &str) -> Result<(), TestCaseError> {
    let mut in_code = false;
    // A fenced block's text is shown as written: no mention in it is live.
    let mut in_fence = false;
    let (mut opened, mut closed) = (0usize, 0usize);
    // A hidden comment spans lines, which the parser hands over one by
    // one: kept here until it ends.
    let mut comment: Option<String> = None;
    for event in Parser::new_ext(body, Options::all()) {
        if let Some(open) = comment.as_mut() {
            match &event {
                Event::Html(t) | Event::InlineHtml(t) | Event::Text(t) | Event::Code(t) => {
                    open.push_str(t)
                }
                _ => open.push('\n'),
            }
            if open.contains("-->") {
                let scan = klaud_html(what, &comment.take().unwrap_or_default(), body)?;
                opened += scan.opened;
                closed += scan.closed;
                comment = scan.unfinished;
            }
            continue;
        }
        match event {
            Event::Start(Tag::CodeBlock(_)) => in_fence = true,
            Event::End(TagEnd::CodeBlock) => in_fence = false,
            Event::Text(t) if !in_code && !in_fence => live_mention(what, &t, body)?,
            Event::Html(h) | Event::InlineHtml(h) => {
                let scan = klaud_html(what, &h, body)?;
                opened += scan.opened;
                closed += scan.closed;
                if let Some(code) = scan.code {
                    in_code = code;
                }
                comment = scan.unfinished;
            }
            Event::Start(Tag::Link { dest_url, .. }) => {
                prop_assert!(
                    dest_url.starts_with("https://") || dest_url.starts_with("http://127.0.0.1"),
                    "{what}: a link to {dest_url:?} in\n{body}"
                );
            }
            Event::Start(Tag::Image { .. }) => {
                prop_assert!(false, "{what}: an image in\n{body}");
            }
            _ => {}
        }
    }
    prop_assert!(
        comment.is_none(),
        "{what}: a comment that does not end in\n{body}"
    );
    prop_assert_eq!(
        opened,
        closed,
        "{}: unbalanced <details> in\n{}",
        what,
        body
    );
    Ok(())
}

/// Every row of every table in `body` has `columns` cells: no outside text
/// split a cell or ended a row.
fn assert_cells(what: &str, body: &str, columns: usize) -> Result<(), TestCaseError> {
    let mut cells = 0usize;
    let mut tables = 0usize;
    for event in Parser::new_ext(body, Options::all()) {
        match event {
            Event::Start(Tag::Table(_)) => tables += 1,
            Event::Start(Tag::TableHead | Tag::TableRow) => cells = 0,
            Event::Start(Tag::TableCell) => cells += 1,
            Event::End(TagEnd::TableHead | TagEnd::TableRow) => {
                prop_assert_eq!(
                    cells,
                    columns,
                    "{}: a row of {} cells in\n{}",
                    what,
                    cells,
                    body
                );
            }
            _ => {}
        }
    }
    prop_assert!(tables > 0, "{what}: no table in\n{body}");
    Ok(())
}

/// A wave whose one candidate carries hostile text in every field the
/// step summary shows.
fn wave_summary(h: &[String]) -> WaveSummary {
    WaveSummary {
        base: h[0].clone(),
        candidates: vec![CandidateSummary {
            candidate: cand(),
            family: h[1].clone(),
            image: h[2].clone(),
            outcome: Some(h[3].clone()),
            phase: h[4].clone(),
            pull_request: Some(format!("https://github.com/o/r/pull/{}", h[5])),
            runs: vec![RunRef {
                id: 7,
                attempt: 1,
                url: h[6].clone(),
            }],
            repairs: 0,
            status: None,
            message: Some(h[7].clone()),
            merge: None,
        }],
        skipped: vec![(h[8].clone(), h[9].clone())],
        answered: vec![],
        families: vec![],
        unreadable: vec![],
        stopped_by: None,
        blocked: vec![],
    }
}

/// What one piece of HTML holds.
struct HtmlScan {
    /// `<details>` opened.
    opened: usize,
    /// `</details>` closed.
    closed: usize,
    /// A `<code>` element starts (`Some(true)`) or ends (`Some(false)`).
    code: Option<bool>,
    /// A comment that starts here and ends in a later piece.
    unfinished: Option<String>,
}

/// A `@` that starts a login GitHub would notify.
fn live_mention(what: &str, text: &str, body: &str) -> Result<(), TestCaseError> {
    let chars: Vec<char> = text.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        if *c != '@' || (i > 0 && chars[i - 1].is_alphanumeric()) {
            continue;
        }
        let login: String = chars[i + 1..]
            .iter()
            .take_while(|c| c.is_ascii_alphanumeric() || **c == '-')
            .collect();
        prop_assert!(
            login.is_empty() || MEANT.contains(&login.as_str()),
            "{what}: a live mention @{login} in {text:?} of\n{body}"
        );
    }
    Ok(())
}

/// Checks one piece of HTML: every tag in it is one Klaud writes, and
/// every comment is one of Klaud's markers.
fn klaud_html(what: &str, html: &str, body: &str) -> Result<HtmlScan, TestCaseError> {
    const TAGS: &[&str] = &[
        "<details>",
        "<details open>",
        "</details>",
        "<summary>",
        "</summary>",
        "<code title=\"",
        "</code>",
    ];
    let (mut opened, mut closed, mut code) = (0, 0, None);
    let mut rest = html;
    while let Some(at) = rest.find('<') {
        rest = &rest[at..];
        if let Some(after) = rest.strip_prefix("<!--") {
            let name = after.trim_start().trim_start_matches('/');
            prop_assert!(
                name.starts_with("klaud") || name.starts_with("codeowner-signoff-verify"),
                "{what}: a comment Klaud did not write: {rest:?} in\n{body}"
            );
            let Some(end) = after.find("-->") else {
                return Ok(HtmlScan {
                    opened,
                    closed,
                    code,
                    unfinished: Some(rest.to_owned()),
                });
            };
            rest = &after[end + 3..];
            continue;
        }
        let Some(tag) = TAGS.iter().find(|t| rest.starts_with(**t)) else {
            return Err(TestCaseError::fail(format!(
                "{what}: HTML Klaud does not write: {:?} in\n{body}",
                rest.chars().take(40).collect::<String>()
            )));
        };
        match *tag {
            "<details>" | "<details open>" => opened += 1,
            "</details>" => closed += 1,
            "<code title=\"" => code = Some(true),
            "</code>" => code = Some(false),
            _ => {}
        }
        rest = &rest[tag.len()..];
    }
    Ok(HtmlScan {
        opened,
        closed,
        code,
        unfinished: None,
    })
}

/// The title is plain text: one line, no mention.
fn assert_title(title: &str) -> Result<(), TestCaseError> {
    prop_assert!(!title.contains('\n'), "{title:?}");
    live_mention("PR title", title, title)
}

fn cand() -> CandidateId {
    CandidateId::new(CAND).expect("valid id")
}

fn run(id: u64) -> RunRef {
    RunRef {
        id,
        attempt: 1,
        url: format!("https://github.com/o/r/actions/runs/{id}"),
    }
}

fn spec(conc: u64) -> PointSpec {
    PointSpec {
        scenario: Scenario::FixedSeqLen {
            isl: 8192,
            osl: 1024,
        },
        conc,
        spec_decoding: "none".into(),
        kv_offload: None,
        decode: Workers {
            num_workers: None,
            tp: 4,
            ep: 1,
            dp_attn: false,
        },
        prefill: None,
    }
}

fn frozen(h: &[String]) -> FrozenBaseline {
    let point = spec(64);
    FrozenBaseline {
        provenance: Provenance {
            engine: h[0].clone(),
            old_image: h[1].clone(),
            new_image: h[2].clone(),
            old_tag: Some(h[3].clone()),
            new_tag: h[4].clone(),
            digest: h[5].clone(),
            revision: Some(h[6].clone()),
            clock: Some(h[7].clone()),
            upstream: Some(UpstreamRange {
                repository: h[8].clone(),
                from: h[9].clone(),
                to: h[0].clone(),
                commits: Some(3),
                compare_url: Some(h[1].clone()),
                audit: None,
            }),
            not_release_reason: Some(h[2].clone()),
            scope: None,
            versions: None,
        },
        baseline: Baseline {
            date: NaiveDate::from_ymd_opt(2026, 9, 9).expect("date"),
            image: h[3].clone(),
            model: h[4].clone(),
            unknown_model: Some(h[5].clone()),
            source_urls: vec![h[6].clone()],
            points: vec![BaselinePoint {
                label: h[7].clone(),
                point,
                value: BaselineValue::Unavailable {
                    reason: h[8].clone(),
                },
            }],
            evals: Vec::new(),
            evals_unavailable: Some(h[9].clone()),
            agentx_datasets: Vec::new(),
        },
    }
}

fn report(h: &[String]) -> AttemptReport {
    AttemptReport {
        owner_run: 1,
        candidate: cand(),
        name: ReportName::Run { id: 7, attempt: 1 },
        kind: Some(AttemptKind::Initial { budget: 5 }),
        status: AttemptStatus::Failed,
        detail: Some(h[0].clone()),
        run: Some(RunRef {
            id: 7,
            attempt: 1,
            url: h[1].clone(),
        }),
        at: Utc.with_ymd_and_hms(2026, 9, 9, 12, 0, 0).unwrap(),
        image: h[2].clone(),
        head: Some(h[3].clone()),
        sections: vec![ReportSection {
            scenario: h[4].clone(),
            topology: h[5].clone(),
            rows: vec![ReportRow {
                label: h[6].clone(),
                conc: 64,
                new: Measure::Missing {
                    reason: h[7].clone(),
                },
                old: Measure::Missing {
                    reason: h[8].clone(),
                },
            }],
        }],
        evals: Vec::new(),
        notes: vec![h[9].clone(), h[0].clone()],
        part: None,
        failed_jobs: vec![klaud_lifecycle::report::FailedJob {
            name: h[1].clone(),
            conclusion: klaud_lifecycle::engine::RunConclusion::Failure,
            url: None,
            node: Some(h[2].clone()),
            triage: None,
        }],
        live: None,
        repair: None,
        // A sick node named by outside text, and a dashboard link that
        // may be no safe address.
        sick_nodes: Some(klaud_lifecycle::report::sick_node::SickNodesSeen {
            rows: vec![SickNodeRow {
                node: h[2].clone(),
                signature: h[3].clone(),
                entry: Some(h[4].clone()),
                class: h[5].clone(),
                families: vec![h[6].clone(), h[7].clone()],
                family_count: 3,
                failures: 2,
                first_seen: Utc.with_ymd_and_hms(2026, 9, 8, 12, 0, 0).unwrap(),
                last_seen: Utc.with_ymd_and_hms(2026, 9, 9, 12, 0, 0).unwrap(),
                line: Some(h[8].clone()),
            }],
            dashboard: Some(h[9].clone()),
        }),
    }
}

fn receipt(h: &[String]) -> Receipt {
    Receipt {
        owner_run: 1,
        candidate: cand(),
        head: None,
        result: FinishedResult::new(
            Outcome::Handoff,
            Phase::Targeted,
            Some(PullNumber::from(3023)),
            vec![run(1)],
            0,
        )
        .expect("valid"),
        sweep: None,
        note: Some(h[0].clone()),
        note_zh: Some(h[1].clone()),
        declined: Some(Declined {
            pull: PullNumber::from(3023),
            by: h[2].clone(),
            family: h[3].clone(),
            image: h[4].clone(),
        }),
        declined_waits: true,
        dashboard: Some((12, h[5].clone())),
        hunt: Default::default(),
        learned: Some(LearnedEntry {
            id: "learned-0123abcd".into(),
            family: h[3].clone(),
            pull: Some(PullNumber::from(3023)),
            path: h[6].clone(),
            yaml: format!(
                "  - id: learned-0123abcd\n    patterns:\n      - {:?}\n",
                h[7]
            ),
            change: h[8].clone(),
            failed: Default::default(),
        }),
    }
}

/// A finished record whose PR a hostile person closed: the dashboard lists
/// it under the ended candidates, `/klaud status` describes it.
fn closed_record(h: &[String]) -> CandidateRecord {
    let mut rec: CandidateRecord = serde_json::from_value(serde_json::json!({
        "candidate": CAND, "family": "configs/x-master.yaml:k", "key": "k",
        "old_image": "a:1", "image": "a:2", "owner_run": 1, "base_branch": "main",
        "base_sha": "0000000000000000000000000000000000000000",
        "branch": format!("klaud/auto-{CAND}"), "step": "done", "claim": null,
        "head": null, "pending_commit": null, "pull": 12,
        "pull_url": "https://github.com/o/r/pull/12",
        "frozen": null, "attempts": [], "repairs": 0, "sweep_requested_at": null,
        "sweep": null,
        "ending": {"outcome": "failed", "phase": "targeted", "message": "m"},
        "intent": null, "updated_at": "2026-01-01T00:00:00Z"
    }))
    .expect("record");
    rec.family = h[0].clone();
    rec.image = h[1].clone();
    if let Some(e) = rec.ending.as_mut() {
        e.message = format!("#12 was closed by @{} without merging: {}", h[2], h[3]);
    }
    rec
}

fn kept(h: &[String], token: &str) -> Kept {
    let at = Utc.with_ymd_and_hms(2026, 9, 9, 12, 0, 0).unwrap();
    let mut kept = Kept {
        ignores: vec![
            KeptIgnore {
                family: token.to_owned(),
                image: Some(token.to_owned()),
                by: token.to_owned(),
                at,
                pull: Some(PullNumber::from(12)),
            },
            KeptIgnore {
                family: token.to_owned(),
                image: None,
                by: token.to_owned(),
                at,
                pull: None,
            },
        ],
        run_now: vec![KeptRunNow {
            family: token.to_owned(),
            by: token.to_owned(),
            at,
        }],
        ..Kept::default()
    };
    kept.note(h[4].clone());
    kept.note(format!(
        "Applied for @{}: family `{}` is ignored",
        h[5], h[6]
    ));
    kept
}

/// A hunt's three comments with hostile tags, family, point, note, commit
/// titles and paths (a registry's tags and an upstream's commits are
/// outside input).
fn hunt_comments(h: &[String]) -> [String; 3] {
    use klaud_lifecycle::hunt::{
        EndReason, HuntPlan, HuntResult, HuntTag, Probe, StepCommit, StepRecord, Trigger,
        render_end, render_plan, render_step,
    };
    use klaud_lifecycle::report::{HuntName, MarkerKey};
    let tag = |t: &str| HuntTag {
        tag: t.to_owned(),
        digest: Some(format!("sha256:{}", "a".repeat(64))),
        commit: Some(h[9].clone()),
    };
    let plan = HuntPlan {
        version: klaud_lifecycle::hunt::PLAN_VERSION,
        family: h[0].clone(),
        image: h[1].clone(),
        old: tag(&h[2]),
        new: tag(&h[3]),
        tags: vec![tag(&h[4]), tag(&h[5])],
        probe: Probe::Outcome {
            target: h[6].clone(),
        },
        budget: 2,
        trigger: Trigger::Command { by: h[7].clone() },
        upstream: Some(h[8].clone()),
    };
    let step = StepRecord {
        step: 1,
        tag: h[4].clone(),
        run: Some(7),
        verdict: klaud_lifecycle::hunt::Verdict::Bad,
        value: None,
        note: h[5].clone(),
    };
    let result = HuntResult {
        reason: EndReason::Found,
        last_good: tag(&h[2]),
        first_bad: tag(&h[4]),
        untested: vec![h[5].clone()],
        runs: 1,
        minimum: 2,
        commits: vec![StepCommit {
            sha: "b".repeat(40),
            title: h[6].clone(),
            paths: vec![h[7].clone()],
        }],
    };
    let key = |name| MarkerKey::Hunt {
        owner_run: 5,
        candidate: cand(),
        name,
    };
    [
        render_plan(&key(HuntName::Plan { hunt: 1 }), &plan),
        render_step(&key(HuntName::Step { hunt: 1, step: 1 }), &plan, &step),
        render_end(&key(HuntName::End { hunt: 1 }), &plan, &result),
    ]
}

fn verdict(h: &[String]) -> Verdict {
    let check = |number, result, reason: &String| CheckResult {
        number,
        name: format!("Check {number}"),
        result,
        reason: reason.clone(),
        evidence: vec![h[9].clone()],
    };
    Verdict::new(
        // The head commit GitHub names: it goes into the marker as it is.
        "9d5bbb82a1d648054e300003efb5692433f0fee8".into(),
        "signer-1".into(),
        vec![
            check(0, klaud_signoff::Outcome::Fail, &h[0]),
            check(3, klaud_signoff::Outcome::Pass, &h[1]),
            check(14, klaud_signoff::Outcome::Warn, &h[2]),
            check(5, klaud_signoff::Outcome::NotApplicable, &h[3]),
            check(6, klaud_signoff::Outcome::Pass, &h[8]),
        ],
    )
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn fuzz_hostile_fields_never_become_live_anywhere_klaud_writes(
        h in proptest::collection::vec(hostile(), 10),
        token in hostile_token(),
    ) {
        // The PR: its title and the frozen baseline in its body.
        assert_title(&pr_title(&h[0], &h[1], &h[2], &h[3]))?;
        let frozen = frozen(&h);
        let pr_body = splice_baseline(&initial_body(), &render_baseline_block(&frozen))
            .expect("the placeholder is there");
        assert_inert("PR body", &pr_body)?;
        prop_assert_eq!(parse_baseline_block(&pr_body).expect("parses"), Some(frozen));

        // An attempt report comment.
        let report = report(&h);
        for part in render_report(&report).expect("renders") {
            assert_inert("attempt report", &part.body)?;
            let record = find_record(&part.body).expect("marker reads").expect("marker");
            prop_assert_eq!(parse_report(&record).expect("parses").image, report.image.clone());
        }

        // The receipt.
        let receipt = receipt(&h);
        let rendered = render_receipt(&receipt);
        assert_inert("receipt", &rendered.body)?;
        let record = find_record(&rendered.body).expect("marker reads").expect("marker");
        // How the declined rule waits and the dashboard's link are words of
        // the receipt, not part of its record.
        // A learned entry out of Klaud's bounds is dropped when read back.
        let kept_in_record = Receipt {
            declined_waits: false,
            dashboard: None,
            learned: receipt.learned.clone().filter(LearnedEntry::is_bounded),
            ..receipt
        };
        prop_assert_eq!(parse_receipt(&record).expect("parses"), kept_in_record);

        // Command replies that quote the commenter or the record.
        let rec = closed_record(&h);
        assert_inert("status reply", &status_text(&rec))?;
        assert_inert("unknown-verb reply", &unknown_reply(&h[4]))?;
        if let Err(e) = parse_try(&h[5]) {
            assert_inert("try reply", &parse_error_reply(&e))?;
        }

        // The dashboard issue, with hostile records, ignores, notes and a
        // problem; its state block and boxes read back.
        let kept = kept(&h, &token);
        let records = [rec];
        let sick = [SickNodeRow {
            node: h[0].clone(),
            signature: h[1].clone(),
            entry: Some(h[2].clone()),
            class: h[3].clone(),
            families: vec![h[4].clone(), h[5].clone()],
            family_count: 2,
            failures: 3,
            first_seen: Utc.with_ymd_and_hms(2026, 9, 8, 12, 0, 0).unwrap(),
            last_seen: Utc.with_ymd_and_hms(2026, 9, 9, 12, 0, 0).unwrap(),
            line: Some(h[6].clone()),
        }];
        let view = View {
            web: "https://github.com/o/r".into(),
            base_branch: "main".into(),
            records: &records,
            plan: None,
            waiting: Default::default(),
            cooldown: std::time::Duration::from_secs(3600),
            now: Utc.with_ymd_and_hms(2026, 9, 10, 12, 0, 0).unwrap(),
            web_dashboard: None,
            sick_nodes: Some(&sick),
        };
        let issue = body(&view, &kept, None, Some(&h[7]));
        assert_inert("dashboard issue", &issue)?;
        prop_assert_eq!(Kept::read(&issue).expect("reads"), Some(kept));
        let ticked = klaud_service::dashboard_issue::ticked(&issue.replace("- [ ]", "- [x]"));
        for action in &ticked {
            prop_assert!(action.code().contains(token.as_str()), "{:?} from\n{}", action, issue);
        }
        if !token.contains(['<', '>']) {
            prop_assert!(!ticked.is_empty(), "the undo boxes read back:\n{}", issue);
        }

        // The wave's Actions step summary: its table keeps six cells a row.
        let brief = [h[0].clone(), format!("  {}", h[1])];
        let summary = klaud_service::step_summary::render(&wave_summary(&h), &brief);
        assert_inert("step summary", &summary)?;
        assert_cells("step summary", &summary, 6)?;

        // A regression hunt's plan, step and end comments.
        for comment in hunt_comments(&h) {
            assert_inert("hunt comment", &comment)?;
        }

        // The sign-off verdict, in every contract version.
        let verdict = verdict(&h);
        for version in [
            ContractVersion::Checks0To10,
            ContractVersion::Checks0To12,
            ContractVersion::Checks0To15,
        ] {
            let comment = render::comment(version, &verdict, SignoffKind::IssueComment, 9);
            assert_inert("sign-off verdict", &comment)?;
            let marker = render::marker(version, &verdict.assessed_commit, SignoffKind::IssueComment, 9);
            prop_assert!(render::is_verdict_for(&comment, &render::slot(version, &marker)));
        }
    }
}

/// The bug this rule closed: a person who closed a Klaud PR was shown on
/// the dashboard issue as a live mention (and every other ended message
/// with a mention as well), where the receipt broke it.
#[test]
fn the_dashboard_issue_breaks_the_mention_of_who_closed_a_pr() {
    let h: Vec<String> = (0..10).map(|i| format!("v{i}")).collect();
    let mut rec = closed_record(&h);
    rec.family = "configs/x-master.yaml:k".into();
    rec.image = "a:2".into();
    if let Some(e) = rec.ending.as_mut() {
        e.message = "#12 was closed by @someone without merging".into();
    }
    let records = [rec];
    let view = View {
        web: "https://github.com/o/r".into(),
        base_branch: "main".into(),
        records: &records,
        plan: None,
        waiting: Default::default(),
        cooldown: std::time::Duration::from_secs(3600),
        now: Utc.with_ymd_and_hms(2026, 9, 10, 12, 0, 0).unwrap(),
        web_dashboard: None,
        sick_nodes: None,
    };
    let mut kept = Kept::default();
    kept.absorb_declined(
        &[(
            "configs/x-master.yaml:k".into(),
            Declined {
                pull: PullNumber::from(12),
                by: "someone".into(),
                family: "configs/x-master.yaml:k".into(),
                image: "a:2".into(),
            },
        )],
        Utc.with_ymd_and_hms(2026, 9, 10, 12, 0, 0).unwrap(),
    );
    let issue = body(&view, &kept, None, None);
    assert!(issue.contains("closed by @\u{2060}someone"), "{issue}");
    assert!(issue.contains("@\u{2060}someone closed #12"), "{issue}");
    assert!(assert_inert("dashboard issue", &issue).is_ok(), "{issue}");
}
