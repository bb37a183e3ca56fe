//! The repository's playbook, as `klaud doctor` checks it: read with the
//! engine's own reader, at the base branch or in a checkout.

use std::path::Path;

use klaud_github::Github;

use super::Check;

/// Most playbook errors the check's detail lists.
const PLAYBOOK_ERRORS_SHOWN: usize = 10;

/// The playbook check on the file's text (`None`: no such file).
pub(super) fn check_playbook(path: &str, text: Option<&str>) -> Check {
    const NAME: &str = "playbook";
    if path.is_empty() {
        return Check::ok(
            NAME,
            "lifecycle.playbook is empty: no playbook, failures are triaged as unknown",
        );
    }
    let Some(text) = text else {
        return Check::ok(
            NAME,
            format!(
                "no {path}: every failure is triaged as unknown (`klaud init` writes \
                 InferenceX's playbook there; the format is configs/playbook.md)"
            ),
        );
    };
    match klaud_lifecycle::playbook::Playbook::parse(path, text) {
        Ok(p) => {
            let count = |class| p.entries.iter().filter(|e| e.class == class).count();
            use klaud_lifecycle::playbook::Class;
            let fixes: usize = p.entries.iter().map(|e| e.fixes.len()).sum();
            Check::ok(
                NAME,
                format!(
                    "{path}: {} entries ({} engine with {fixes} fixes, {} infrastructure, {} teardown, {} setup), {} sick nodes",
                    p.entries.len(),
                    count(Class::Engine),
                    count(Class::Infrastructure),
                    count(Class::Teardown),
                    count(Class::Setup),
                    p.nodes.len()
                ),
            )
        }
        Err(errors) => {
            let all = &errors.0;
            let shown: Vec<String> = all
                .iter()
                .take(PLAYBOOK_ERRORS_SHOWN)
                .map(ToString::to_string)
                .collect();
            let more = all.len().saturating_sub(shown.len());
            Check::fail(
                NAME,
                format!(
                    "{} error(s): {}{}",
                    all.len(),
                    shown.join("; "),
                    if more > 0 {
                        format!("; and {more} more")
                    } else {
                        String::new()
                    }
                ),
            )
        }
    }
}

pub(super) fn check_playbook_in_checkout(checkout: &Path, path: &str) -> Check {
    if path.is_empty() {
        return check_playbook(path, None);
    }
    let file = checkout.join(path);
    match std::fs::read(&file) {
        Ok(bytes) => check_playbook(path, Some(&String::from_utf8_lossy(&bytes))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => check_playbook(path, None),
        Err(e) => Check::fail("playbook", format!("{}: {e}", file.display())),
    }
}

pub(super) async fn check_playbook_at_base(forge: &Github, path: &str, branch: &str) -> Check {
    if path.is_empty() {
        return check_playbook(path, None);
    }
    match forge.get_contents(path, branch).await {
        Ok(None) => check_playbook(path, None),
        Ok(Some(bytes)) => check_playbook(path, Some(&String::from_utf8_lossy(&bytes))),
        Err(e) => Check::fail("playbook", format!("{path} at {branch}: {e}")),
    }
}
