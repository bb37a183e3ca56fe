//! Everything Klaud writes on GitHub renders as intended under GitHub's
//! Markdown (cmark-gfm): no `**`, backtick or table row is left as literal
//! text. The renderer here is `pulldown-cmark`, which follows the same
//! CommonMark emphasis rules (left- and right-flanking delimiter runs with
//! Unicode punctuation) and the GFM table extension; the first test pins
//! the case that bit the Chinese halves (`**目标：**将` stays literal on
//! GitHub) so the check itself is known to catch it.
//!
//! Checked: every insta snapshot of a rendered body (PR bodies, reports,
//! receipts, cleanups, titles), and every title, body and comment on the
//! simulated repository after the daemon has run the demo's families to
//! their outcomes (PRs, attempt reports, receipts, the dashboard issue).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use klaud_claims::Claimant;
use klaud_lifecycle::engine::MemoryJournal;
use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
use tokio::sync::{Notify, watch};

use crate::support::{Harness, REPO, serve_settings, wait_for};

/// The pieces of `markdown` that GitHub would show as literal markup: an
/// unmatched `**`, a stray backtick, or a table row that did not become a
/// table. Text inside code spans and code blocks is code, not markup.
fn leftovers(markdown: &str) -> Vec<String> {
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_FOOTNOTES;
    let mut found = Vec::new();
    let mut in_code_block = 0usize;
    // The parser splits text at delimiter runs it could not match, so the
    // check reads the text of one inline run at a time.
    let mut run = String::new();
    let flush = |run: &mut String, found: &mut Vec<String>| {
        let text = std::mem::take(run);
        let literal_table_row = text
            .lines()
            .any(|l| l.trim_start().starts_with('|') && l.matches('|').count() >= 2);
        if text.contains("**") || text.contains('`') || literal_table_row {
            found.push(text);
        }
    };
    for event in Parser::new_ext(markdown, options) {
        match event {
            Event::Start(Tag::CodeBlock(_)) => in_code_block += 1,
            Event::End(TagEnd::CodeBlock) => in_code_block = in_code_block.saturating_sub(1),
            Event::Text(t) if in_code_block == 0 => run.push_str(&t),
            Event::SoftBreak => run.push('\n'),
            _ => flush(&mut run, &mut found),
        }
    }
    flush(&mut run, &mut found);
    found
}

pub(crate) fn assert_renders(place: &str, markdown: &str) {
    let left = leftovers(markdown);
    assert!(
        left.is_empty(),
        "{place} shows literal markup on GitHub: {left:?}\n--- text ---\n{markdown}"
    );
}

#[test]
fn the_check_catches_emphasis_github_leaves_literal() {
    assert!(!leftovers("**目标：**将 vLLM 镜像更新。").is_empty());
    assert!(!leftovers("**Baseline:**none").is_empty());
    assert!(!leftovers("a `code span that never closes").is_empty());
    assert!(leftovers("**目标**：将 vLLM 镜像更新。").is_empty());
    assert!(leftovers("**N/A：**\n- a point").is_empty());
    assert!(leftovers("**Goal:** update `x**y` now\n\n```\n**raw**\n```\n").is_empty());
    assert!(leftovers("| a | b |\n| --- | --- |\n| 1 | 2 |\n").is_empty());
}

/// The rendered text of an insta snapshot: what follows its header.
fn snapshot_text(raw: &str) -> &str {
    raw.strip_prefix("---\n")
        .and_then(|rest| rest.split_once("\n---\n"))
        .map_or(raw, |(_, body)| body)
}

#[test]
fn every_snapshot_renders_without_literal_markup() {
    let root = Path::new(crate::support::REPO_ROOT);
    let mut checked = 0;
    for dir in ["tests/snapshots", "lifecycle/tests/snapshots"] {
        let mut files: Vec<_> = std::fs::read_dir(root.join(dir))
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "snap"))
            .collect();
        files.sort();
        for file in files {
            let raw = std::fs::read_to_string(&file).expect("snapshot");
            assert_renders(&file.display().to_string(), snapshot_text(&raw));
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} snapshots found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_text_the_daemon_writes_for_the_demo_renders_without_literal_markup() {
    let stack = Harness::demo()
        .demo_ci()
        .poll(Duration::from_millis(20))
        .start_stack()
        .await;
    let settings = serve_settings(
        Claimant::new(uuid::Uuid::new_v4()),
        crate::support::engine_config(42),
        10,
        true,
    );
    let (daemon, mut feed) =
        crate::support::daemon(&stack, settings, Arc::new(MemoryJournal::new())).await;
    let (stop_tx, stop) = watch::channel(false);
    let running = tokio::spawn(async move { daemon.run(Arc::new(Notify::new()), stop).await });
    wait_for(&mut feed, "every candidate's outcome", |s| {
        !s.repositories.is_empty()
            && s.repositories.iter().all(|r| {
                !r.candidates.is_empty() && r.candidates.iter().all(|c| c.outcome.is_some())
            })
    })
    .await;
    // The pass that ended the last candidate publishes the dashboard issue
    // after it: let it finish before reading.
    let _ = stop_tx.send(true);
    let _ = running.await;
    let texts = stack.github.state().markdown_texts(REPO).await;
    assert!(
        texts.iter().any(|(place, _)| place.starts_with("pull #"))
            && texts.iter().any(|(place, _)| place.starts_with("comment ")),
        "the demo wrote no PR or comment: {texts:?}"
    );
    for (place, text) in &texts {
        assert_renders(place, text);
    }
}

/// The demo's `demo-fp8-mi355x-sglang` runs a tag its registry no longer
/// serves: the wave's PR for it says so in both halves of its body, and
/// the body renders under GFM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pruned_familys_pr_body_says_so_in_both_languages() {
    let env = Harness::demo().start().await;
    let journal = MemoryJournal::new();
    let options = env.wave_options(
        Claimant::new(uuid::Uuid::new_v4()),
        crate::support::engine_config(4343),
    );
    let summary = env.wave(&journal, options).await;
    let pruned = summary
        .families
        .iter()
        .find(|f| f.family.ends_with(":demo-fp8-mi355x-sglang"))
        .expect("planned");
    assert_eq!(
        pruned.status,
        klaud_planner::plan::Status::StalePruned,
        "{pruned:?}"
    );
    let candidate = summary
        .candidates
        .iter()
        .find(|c| c.family == pruned.family)
        .unwrap_or_else(|| panic!("not started: {summary:#?}"));
    let url = candidate.pull_request.as_deref().expect("a PR");
    let number: u64 = url
        .rsplit('/')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("number");
    let body = env.pull(number).await.body.unwrap_or_default();
    assert!(
        body.contains("**Old image pruned upstream:** tag `"),
        "{body}"
    );
    assert!(body.contains("**原镜像已被上游删除**：标签 `"), "{body}");
    assert_renders("the pruned family's PR body", &body);
    // Other families' PRs say nothing of the kind.
    for c in summary
        .candidates
        .iter()
        .filter(|c| c.family != pruned.family)
    {
        let Some(n) = c
            .pull_request
            .as_deref()
            .and_then(|u| u.rsplit('/').next()?.parse::<u64>().ok())
        else {
            continue;
        };
        let body = env.pull(n).await.body.unwrap_or_default();
        assert!(!body.contains("pruned upstream"), "{}: {body}", c.family);
    }
}
