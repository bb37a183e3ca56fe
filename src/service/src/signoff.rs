//! CODEOWNER sign-off verification as a service: one
//! verification (gather over the forge, decide with `klaud-signoff`,
//! publish), the sign-offs the webhook announced, and the reconcile pass's
//! catch-up on sign-offs written after Klaud's last verdict.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use klaud_github::signoff::{Publication, SignoffRef};
use klaud_github::{Github, GithubError};
use klaud_lifecycle::BoxFuture;
use klaud_signoff::evidence::SignoffKind;
use klaud_signoff::{ContractVersion, SIGNOFF_PHRASE, SignoffError, Verdict, VerdictWord, render};
use serde_json::Value;

/// The status description when Klaud could not decide.
pub const INCOMPLETE: &str = "verification did not complete";

/// Why a verification ended without a verdict.
#[derive(Debug, thiserror::Error)]
pub enum SignoffRunError {
    /// GitHub or the network failed (the status says the verification did
    /// not complete).
    #[error("{context}: {source}")]
    Github {
        context: &'static str,
        #[source]
        source: GithubError,
    },
    /// The repository has no contract Klaud can apply.
    #[error("{0}")]
    Contract(#[source] SignoffError),
}

/// Why one pull request of a catch-up pass was not verified: which one,
/// and the cause.
#[derive(Debug, thiserror::Error)]
#[error("{at}: {source}")]
pub struct PassError {
    /// `owner/name` or `owner/name#N`.
    pub at: String,
    /// What failed.
    #[source]
    pub source: SignoffRunError,
}

/// What one verification did.
#[derive(Debug)]
pub enum Done {
    /// A verdict, published unless dry.
    Verdict {
        verdict: Verdict,
        version: ContractVersion,
        body: String,
        comment_url: Option<String>,
    },
    /// The repository's gate refused the sign-off: nothing published.
    Refused(String),
}

async fn incomplete(forge: &Github, head: &str, dry_run: bool) {
    if dry_run {
        return;
    }
    if let Err(e) = forge
        .set_signoff_status(head, "failure", INCOMPLETE, None)
        .await
    {
        tracing::warn!(error = %e, "could not set the sign-off status");
    }
}

/// Verifies one sign-off and, unless `dry_run`, publishes the verdict
/// comment and status. The head is resolved once, first; when Klaud fails
/// after that, the status on it says the verification did not complete and
/// no verdict is published.
pub fn verify_and_publish<'f>(
    forge: &'f Github,
    pr: u64,
    wanted: Option<SignoffRef>,
    eval_bars: BTreeMap<String, f64>,
    dry_run: bool,
) -> BoxFuture<'f, Result<Done, SignoffRunError>> {
    Box::pin(async move {
        let head = forge
            .get_pull(pr)
            .await
            .map_err(|source| SignoffRunError::Github {
                context: "read the pull request",
                source,
            })?
            .head_sha;
        let evidence = match forge
            .gather_signoff(pr, wanted, Some(head.clone()), eval_bars)
            .await
        {
            Ok(evidence) => evidence,
            Err(source) => {
                incomplete(forge, &head, dry_run).await;
                return Err(SignoffRunError::Github {
                    context: "gather the sign-off evidence",
                    source,
                });
            }
        };
        let verdict = match klaud_signoff::verify(&evidence) {
            Ok(Ok(verdict)) => verdict,
            Ok(Err(refusal)) => return Ok(Done::Refused(refusal.to_string())),
            Err(e) => {
                incomplete(forge, &head, dry_run).await;
                return Err(SignoffRunError::Contract(e));
            }
        };
        let version = ContractVersion::detect(evidence.default_branch.prompt.as_deref())
            .ok_or(SignoffRunError::Contract(SignoffError::NoContract))?;
        let (kind, id) = (evidence.signoff.kind, evidence.signoff.id);
        let body = render::comment(version, &verdict, kind, id);
        let mut comment_url = None;
        if !dry_run {
            let (state, description) = match verdict.verdict {
                VerdictWord::Pass => ("success", "Verdict: PASS"),
                VerdictWord::Warn => ("failure", "Verdict: WARN (needs a reviewer)"),
                VerdictWord::Rejected => ("failure", "REJECTED"),
            };
            let publication = Publication {
                pull: pr,
                head_sha: verdict.assessed_commit.clone(),
                slot: render::slot(
                    version,
                    &render::marker(version, &verdict.assessed_commit, kind, id),
                ),
                body: body.clone(),
                state: state.into(),
                description: description.into(),
            };
            match forge.publish_signoff(&publication).await {
                Ok(url) => comment_url = Some(url),
                Err(source) => {
                    incomplete(forge, &head, dry_run).await;
                    return Err(SignoffRunError::Github {
                        context: "publish the verdict",
                        source,
                    });
                }
            }
        }
        Ok(Done::Verdict {
            verdict,
            version,
            body,
            comment_url,
        })
    })
}

/// A sign-off a webhook delivery announced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announced {
    /// `owner/name`.
    pub repository: String,
    pub pull: u64,
    pub signoff: SignoffRef,
}

/// Reads a webhook delivery the repository's workflow would act on: a PR
/// comment, a review or an inline review comment that contains the phrase,
/// created, edited or submitted.
pub fn announced(event: &str, payload: &Value) -> Option<Announced> {
    let action = payload["action"].as_str()?;
    let (kind, item, pull) = match event {
        "issue_comment" => {
            // An issue comment is on a pull request only when the issue is one.
            payload["issue"].get("pull_request")?;
            (
                SignoffKind::IssueComment,
                &payload["comment"],
                payload["issue"]["number"].as_u64()?,
            )
        }
        "pull_request_review" => (
            SignoffKind::Review,
            &payload["review"],
            payload["pull_request"]["number"].as_u64()?,
        ),
        "pull_request_review_comment" => (
            SignoffKind::ReviewComment,
            &payload["comment"],
            payload["pull_request"]["number"].as_u64()?,
        ),
        _ => return None,
    };
    if !matches!(action, "created" | "edited" | "submitted") {
        return None;
    }
    if !item["body"].as_str()?.contains(SIGNOFF_PHRASE) {
        return None;
    }
    Some(Announced {
        repository: payload["repository"]["full_name"].as_str()?.to_owned(),
        pull,
        signoff: SignoffRef {
            kind,
            id: item["id"].as_u64()?,
        },
    })
}

/// Sign-offs announced and not verified yet, shared by the webhook and the
/// daemon loop. Bounded: a flood of deliveries drops the oldest (the
/// catch-up finds them again).
#[derive(Debug, Clone, Default)]
pub struct SignoffQueue {
    inner: Arc<Mutex<VecDeque<Announced>>>,
}

/// The most announced sign-offs kept waiting.
const QUEUE_CAPACITY: usize = 256;

impl SignoffQueue {
    pub fn push(&self, item: Announced) {
        let Ok(mut queue) = self.inner.lock() else {
            return;
        };
        if queue.contains(&item) {
            return;
        }
        if queue.len() >= QUEUE_CAPACITY {
            queue.pop_front();
        }
        queue.push_back(item);
    }

    /// Takes the announced sign-offs of `repository`.
    pub fn take(&self, repository: &str) -> Vec<Announced> {
        let Ok(mut queue) = self.inner.lock() else {
            return Vec::new();
        };
        let (mine, rest): (VecDeque<_>, VecDeque<_>) = queue
            .drain(..)
            .partition(|a| a.repository.eq_ignore_ascii_case(repository));
        *queue = rest;
        mine.into_iter().collect()
    }
}

/// The daemon's sign-off duty for one process: what it verified already
/// (so an unchanged verdict is not verified again every pass) and the
/// open pull requests' update times it looked at.
#[derive(Debug, Default)]
pub struct SignoffWatch {
    verified: HashMap<(String, u64), (SignoffRef, String)>,
    /// Each pull request's `updated_at` and how many passes saw it so.
    seen: HashMap<(String, u64), (String, u8)>,
}

/// How many pull requests one catch-up pass inspects at most.
const MAX_INSPECTED: usize = 30;

impl SignoffWatch {
    /// Verifies the announced sign-offs, then every open, non-draft pull
    /// request updated since the last look whose newest sign-off is newer
    /// than Klaud's newest verdict. Returns one line per verification
    /// (errors included) for the log.
    pub fn pass<'f>(
        &'f mut self,
        forge: &'f Github,
        announced: Vec<Announced>,
        eval_bars: &'f BTreeMap<String, f64>,
    ) -> BoxFuture<'f, Vec<Result<String, PassError>>> {
        Box::pin(async move {
            let repo = forge.repo();
            let mut out = Vec::new();
            for a in announced {
                out.push(
                    self.verify(forge, a.pull, Some(a.signoff), None, eval_bars)
                        .await,
                );
            }
            let pulls = match forge.open_pulls_by_update().await {
                Ok(pulls) => pulls,
                Err(source) => {
                    out.push(Err(PassError {
                        at: repo,
                        source: SignoffRunError::Github {
                            context: "list open pull requests",
                            source,
                        },
                    }));
                    return out;
                }
            };
            for pull in pulls.into_iter().filter(|p| !p.draft).take(MAX_INSPECTED) {
                let key = (repo.clone(), pull.number);
                // GitHub's times have whole seconds: activity in the second
                // of a look leaves `updated_at` as it was, so a pull request
                // is looked at twice before an unchanged time skips it.
                let looks = match self.seen.get(&key) {
                    Some((at, looks)) if *at == pull.updated_at => *looks,
                    _ => 0,
                };
                if looks >= 2 {
                    continue;
                }
                let activity = match forge.signoff_activity(pull.number).await {
                    Ok(activity) => activity,
                    Err(source) => {
                        out.push(Err(PassError {
                            at: format!("{repo}#{}", pull.number),
                            source: SignoffRunError::Github {
                                context: "read its sign-offs",
                                source,
                            },
                        }));
                        continue;
                    }
                };
                self.seen
                    .insert(key.clone(), (pull.updated_at.clone(), looks + 1));
                let Some((signoff, when)) = activity.pending() else {
                    continue;
                };
                if self.verified.get(&key) == Some(&(signoff, when.clone())) {
                    continue;
                }
                out.push(
                    self.verify(forge, pull.number, Some(signoff), Some(when), eval_bars)
                        .await,
                );
            }
            out
        })
    }

    async fn verify(
        &mut self,
        forge: &Github,
        pull: u64,
        signoff: Option<SignoffRef>,
        when: Option<String>,
        eval_bars: &BTreeMap<String, f64>,
    ) -> Result<String, PassError> {
        let repo = forge.repo();
        match verify_and_publish(forge, pull, signoff, eval_bars.clone(), false).await {
            Ok(done) => {
                if let (Some(signoff), Some(when)) = (signoff, when) {
                    self.verified.insert((repo.clone(), pull), (signoff, when));
                }
                Ok(match done {
                    Done::Verdict { verdict, .. } => {
                        format!("{repo}#{pull}: sign-off verdict {:?}", verdict.verdict)
                    }
                    Done::Refused(why) => format!("{repo}#{pull}: sign-off not verified: {why}"),
                })
            }
            Err(source) => Err(PassError {
                at: format!("{repo}#{pull}: sign-off verification"),
                source,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn comment(body: &str) -> Value {
        json!({
            "action": "created",
            "issue": {"number": 7, "pull_request": {"url": "x"}},
            "comment": {"id": 42, "body": body},
            "repository": {"full_name": "o/r"},
        })
    }

    #[test]
    fn a_pr_comment_with_the_phrase_is_announced() {
        let a = announced(
            "issue_comment",
            &comment("As a PR reviewer and CODEOWNER, I have"),
        )
        .unwrap();
        assert_eq!(a.pull, 7);
        assert_eq!(
            a.signoff,
            SignoffRef {
                kind: SignoffKind::IssueComment,
                id: 42
            }
        );
        assert_eq!(a.repository, "o/r");
    }

    #[test]
    fn other_comments_issues_and_actions_are_not() {
        assert!(announced("issue_comment", &comment("LGTM")).is_none());
        let mut on_issue = comment("As a PR reviewer and CODEOWNER");
        on_issue["issue"] = json!({"number": 7});
        assert!(announced("issue_comment", &on_issue).is_none());
        let mut deleted = comment("As a PR reviewer and CODEOWNER");
        deleted["action"] = json!("deleted");
        assert!(announced("issue_comment", &deleted).is_none());
        assert!(announced("push", &comment("As a PR reviewer and CODEOWNER")).is_none());
    }

    #[test]
    fn reviews_and_inline_comments_are_announced() {
        let review = json!({
            "action": "submitted", "pull_request": {"number": 3},
            "review": {"id": 9, "body": "As a PR reviewer and CODEOWNER"},
            "repository": {"full_name": "o/r"},
        });
        assert_eq!(
            announced("pull_request_review", &review).map(|a| a.signoff.kind),
            Some(SignoffKind::Review)
        );
        let inline = json!({
            "action": "edited", "pull_request": {"number": 3},
            "comment": {"id": 11, "body": "As a PR reviewer and CODEOWNER"},
            "repository": {"full_name": "o/r"},
        });
        assert_eq!(
            announced("pull_request_review_comment", &inline).map(|a| a.signoff.id),
            Some(11)
        );
    }

    #[test]
    fn the_queue_hands_each_repository_its_own_and_forgets_duplicates() {
        let queue = SignoffQueue::default();
        let a = announced("issue_comment", &comment("As a PR reviewer and CODEOWNER")).unwrap();
        queue.push(a.clone());
        queue.push(a.clone());
        let mut other = a.clone();
        other.repository = "x/y".into();
        queue.push(other);
        assert_eq!(queue.take("O/R"), vec![a]);
        assert_eq!(queue.take("o/r"), Vec::new());
        assert_eq!(queue.take("x/y").len(), 1);
    }
}
