//! Benchmark: InferenceX's playbook (`configs/inferencex-playbook.yaml`)
//! over the corpus in `lifecycle/tests/playbook-corpus/` (job logs written
//! from every symptom in InferenceX's own playbook, plus near-misses with
//! the same words and another cause). Prints the share recognised, the
//! share repaired (the first fix that applies turns the case's script into
//! the expected one), wrong repairs and near-miss false positives, next to
//! the counts the manifest itself expects, then one line per case.
//!
//! `cargo bench -p klaud-lifecycle --bench playbook` (`-- --quiet` for the
//! figures alone). Exits non-zero when a figure differs from the manifest's.

#[path = "../tests/playbook-corpus/corpus.rs"]
mod corpus;

use std::time::Instant;

fn main() {
    let quiet = std::env::args().any(|a| a == "--quiet");
    let started = Instant::now();
    let playbook = corpus::inferencex_playbook();
    let cases = corpus::cases();
    let outcomes = corpus::run(&playbook, &cases);
    let elapsed = started.elapsed();
    let got = corpus::figures(&outcomes);
    let want = corpus::expected(&cases);
    print!("{}", corpus::render(&got, &want));
    println!(
        "{} entries, {} sick nodes; parsed and ran in {:.1} ms",
        playbook.entries.len(),
        playbook.nodes.len(),
        elapsed.as_secs_f64() * 1000.0
    );
    if !quiet {
        println!();
        for o in &outcomes {
            println!("{}", corpus::describe(o));
        }
    }
    if got != want {
        std::process::exit(1);
    }
}
