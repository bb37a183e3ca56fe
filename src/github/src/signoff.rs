//! The GitHub side of CODEOWNER sign-off verification: gathering
//! the evidence `klaud-signoff` decides on, once per verification, and
//! publishing the verdict comment (found again by its marker and edited in
//! place) and the `codeowner-signoff-verify` commit status.

use std::collections::BTreeMap;

use http::Method;
use klaud_lifecycle::BoxFuture;
use klaud_signoff::checks::run_id_of;
use klaud_signoff::evidence::{
    ChangedFile, CheckRunFact, CommentFact, DefaultBranchFiles, EvalFact, Evidence, PullFacts,
    RecipePull, RecipePullUnreadable, Signer, Signoff, SignoffEdit, SignoffKind, parse_agg_eval,
};
use klaud_signoff::{MAX_SIGNOFF_BYTES, SIGNOFF_PHRASE, STATUS_CONTEXT};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::transport::ok_or_error;
use crate::{Github, GithubError};

/// The most changed files whose head text is read (the rest are judged
/// from their patch alone).
const MAX_FILES_READ: usize = 300;
/// The largest file read whole.
const MAX_FILE_BYTES: usize = 2 * 1024 * 1024;
/// The newest commits of a pull request whose check runs are read.
const MAX_COMMITS_CHECKED: usize = 30;
/// The CODEOWNERS users whose permission is read (the newer contract).
const MAX_OWNERS_READ: usize = 30;
/// The newest runs whose eval artifacts are read.
const MAX_RUNS_READ: usize = 5;

/// Which sign-off to verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignoffRef {
    pub kind: SignoffKind,
    pub id: u64,
}

impl SignoffRef {
    /// Reads a comment URL's anchor (`#issuecomment-N`,
    /// `#pullrequestreview-N`, `#discussion_rN`).
    pub fn from_url(url: &str) -> Option<Self> {
        let (_, anchor) = url.rsplit_once('#')?;
        for kind in [
            SignoffKind::IssueComment,
            SignoffKind::Review,
            SignoffKind::ReviewComment,
        ] {
            if let Some(id) = anchor.strip_prefix(kind.anchor()) {
                return id.parse().ok().map(|id| Self { kind, id });
            }
        }
        None
    }
}

/// What the pull request number in a comment URL is (`/pull/N#…`).
pub fn pull_number_of_url(url: &str) -> Option<u64> {
    let before = url.split('#').next()?;
    let (_, after) = before.rsplit_once("/pull/")?;
    after.trim_end_matches('/').parse().ok()
}

#[derive(Deserialize)]
struct RawUser {
    login: String,
    #[serde(rename = "type", default)]
    kind: Option<String>,
}

#[derive(Deserialize)]
struct RawSignoff {
    id: u64,
    /// The GraphQL id its edit history is read by.
    #[serde(default)]
    node_id: Option<String>,
    #[serde(default)]
    body: Option<String>,
    user: Option<RawUser>,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    submitted_at: Option<String>,
    #[serde(default)]
    updated_at: Option<String>,
    /// Where an issue comment was posted (`…/issues/{n}`).
    #[serde(default)]
    issue_url: Option<String>,
    /// The pull request of a review or review comment (`…/pulls/{n}`).
    #[serde(default)]
    pull_request_url: Option<String>,
}

impl RawSignoff {
    /// Whether the comment or review belongs to pull request `pull` (a
    /// comment URL or id from elsewhere must not sign this one off).
    fn belongs_to(&self, pull: u64) -> bool {
        let number = |url: &Option<String>, segment: &str| {
            url.as_deref()
                .and_then(|u| u.rsplit_once(segment))
                .and_then(|(_, n)| n.trim_end_matches('/').parse::<u64>().ok())
        };
        number(&self.issue_url, "/issues/").or_else(|| number(&self.pull_request_url, "/pulls/"))
            == Some(pull)
    }

    fn when(&self) -> String {
        self.updated_at
            .clone()
            .or_else(|| self.submitted_at.clone())
            .or_else(|| self.created_at.clone())
            .unwrap_or_default()
    }
}

#[derive(Deserialize)]
struct RawFile {
    filename: String,
    status: String,
    #[serde(default)]
    previous_filename: Option<String>,
    #[serde(default)]
    patch: Option<String>,
}

#[derive(Deserialize)]
struct RawCheckRun {
    name: String,
    status: String,
    #[serde(default)]
    conclusion: Option<String>,
    #[serde(default)]
    details_url: Option<String>,
}

#[derive(Deserialize)]
struct ShaOnly {
    sha: String,
}

#[derive(Deserialize)]
struct RawArtifact {
    id: u64,
    name: String,
    #[serde(default)]
    expired: bool,
}

fn cut(mut text: String, limit: usize) -> String {
    if text.len() > limit {
        let mut end = limit;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// Who wrote a comment's current text, from its GraphQL `Comment` node,
/// when that is not `author` (see [`SignoffEdit`]).
fn edit_of(node: &Value, author: &str) -> Option<SignoffEdit> {
    let login = |v: &Value| {
        v["login"]
            .as_str()
            .filter(|l| !l.is_empty())
            .map(|l| cut(l.to_owned(), 100))
    };
    let newest = node["userContentEdits"]["nodes"]
        .as_array()
        .and_then(|n| n.last())
        .cloned()
        .unwrap_or(Value::Null);
    let edited = !node["lastEditedAt"].is_null() || !newest.is_null();
    if !edited {
        return None;
    }
    match login(&node["editor"]).or_else(|| login(&newest["editor"])) {
        Some(editor) if editor.eq_ignore_ascii_case(author) => None,
        Some(editor) => Some(SignoffEdit::By(editor)),
        None => Some(SignoffEdit::Unknown),
    }
}

/// A verdict to publish.
#[derive(Debug, Clone)]
pub struct Publication {
    pub pull: u64,
    pub head_sha: String,
    /// What the first line of the comment this verdict replaces starts
    /// with ([`klaud_signoff::render::slot`]).
    pub slot: String,
    pub body: String,
    /// `success` (PASS only), `failure` or `pending`.
    pub state: String,
    pub description: String,
}

impl Github {
    fn text_at<'f>(
        &'f self,
        path: &'f str,
        git_ref: &'f str,
    ) -> BoxFuture<'f, Result<Option<String>, GithubError>> {
        Box::pin(async move {
            Ok(self.get_contents(path, git_ref).await?.and_then(|bytes| {
                (bytes.len() <= MAX_FILE_BYTES)
                    .then(|| String::from_utf8(bytes).ok())
                    .flatten()
            }))
        })
    }

    async fn find_signoff(
        &self,
        pull: u64,
        wanted: Option<SignoffRef>,
    ) -> Result<(SignoffKind, RawSignoff), GithubError> {
        if let Some(wanted) = wanted {
            let path = match wanted.kind {
                SignoffKind::IssueComment => format!("issues/comments/{}", wanted.id),
                SignoffKind::Review => format!("pulls/{pull}/reviews/{}", wanted.id),
                SignoffKind::ReviewComment => format!("pulls/comments/{}", wanted.id),
            };
            let what = format!("read sign-off {}", wanted.id);
            let raw: RawSignoff = self.t.get_json(&what, &self.path(&path)).await?;
            if !raw.belongs_to(pull) {
                return Err(GithubError::NotFound {
                    what: format!("sign-off {} on #{pull} (it is on another issue)", wanted.id),
                });
            }
            return Ok((wanted.kind, raw));
        }
        let mut all: Vec<(SignoffKind, RawSignoff)> = Vec::new();
        for (kind, path) in [
            (
                SignoffKind::IssueComment,
                format!("issues/{pull}/comments?per_page=100"),
            ),
            (
                SignoffKind::Review,
                format!("pulls/{pull}/reviews?per_page=100"),
            ),
            (
                SignoffKind::ReviewComment,
                format!("pulls/{pull}/comments?per_page=100"),
            ),
        ] {
            let items: Vec<RawSignoff> = self
                .t
                .get_all(
                    &format!("list sign-offs of #{pull}"),
                    &self.path(&path),
                    None,
                )
                .await?;
            all.extend(items.into_iter().map(|i| (kind, i)));
        }
        all.into_iter()
            .filter(|(_, s)| {
                s.body
                    .as_deref()
                    .is_some_and(|b| b.contains(SIGNOFF_PHRASE))
            })
            .max_by_key(|(_, s)| (s.when(), s.id))
            .ok_or_else(|| GithubError::NotFound {
                what: format!("a sign-off (\"{SIGNOFF_PHRASE}\") on #{pull}"),
            })
    }

    /// Who wrote the sign-off's current text, when not its `author`: the
    /// latest edit's editor (GraphQL `editor`, else the newest of
    /// `userContentEdits`), which REST does not tell. `None`: never edited,
    /// or last edited by its author. A failed read fails the verification
    /// (nothing is published as a pass on an unknown signer).
    fn signoff_edit<'f>(
        &'f self,
        raw: &'f RawSignoff,
        author: &'f str,
    ) -> BoxFuture<'f, Result<Option<SignoffEdit>, GithubError>> {
        Box::pin(async move {
            let what = format!("edit history of sign-off {}", raw.id);
            let Some(node) = raw.node_id.as_deref() else {
                return Err(GithubError::Decode {
                    what,
                    detail: "no node_id to read its editor by".into(),
                });
            };
            let query = "query($id: ID!) { node(id: $id) { ... on Comment { editor { login } lastEditedAt userContentEdits(last: 1) { nodes { editor { login } editedAt } } } } }";
            let v = self.graphql(&what, query, json!({"id": node})).await?;
            Ok(edit_of(&v["data"]["node"], author))
        })
    }

    /// Gathers everything a verification reads. The head SHA is read once,
    /// first, and every later read of the pull request's files is at it.
    ///
    /// `pinned_head` is the head the caller already resolved (and may have
    /// named in a pending status); without it the pull request's head now.
    pub fn gather_signoff<'f>(
        &'f self,
        pull: u64,
        wanted: Option<SignoffRef>,
        pinned_head: Option<String>,
        eval_bars: BTreeMap<String, f64>,
    ) -> BoxFuture<'f, Result<Evidence, GithubError>> {
        Box::pin(async move {
            let pr: Value = self
                .t
                .get_json(
                    &format!("read #{pull}"),
                    &self.path(&format!("pulls/{pull}")),
                )
                .await?;
            let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            let head_sha = pinned_head.unwrap_or_else(|| text(&pr["head"]["sha"]));
            let base_sha = text(&pr["base"]["sha"]);
            let facts = PullFacts {
                number: pull,
                open: pr["state"] == "open",
                draft: pr["draft"].as_bool().unwrap_or(false),
                title: cut(text(&pr["title"]), 1024),
                body: cut(text(&pr["body"]), MAX_SIGNOFF_BYTES),
            };

            let (kind, raw) = self.find_signoff(pull, wanted).await?;
            let author = raw
                .user
                .as_ref()
                .map(|u| u.login.clone())
                .unwrap_or_default();
            let edited = self.signoff_edit(&raw, &author).await?;
            let signoff = Signoff {
                kind,
                id: raw.id,
                author: author.clone(),
                body: cut(raw.body.unwrap_or_default(), MAX_SIGNOFF_BYTES),
                edited: edited.clone(),
            };
            // The text is the word of whoever wrote it last.
            let signer = match &edited {
                Some(SignoffEdit::By(editor)) => self.signer(editor, None).await?,
                _ => self.signer(&author, raw.user.and_then(|u| u.kind)).await?,
            };

            let repo: Value = self
                .t
                .get_json(
                    "read the repository",
                    &format!("/repos/{}/{}", self.owner, self.name),
                )
                .await?;
            let default_branch = repo["default_branch"].as_str().unwrap_or("main").to_owned();
            let default_sha = self
                .get_ref(&format!("refs/heads/{default_branch}"))
                .await?
                .ok_or_else(|| GithubError::NotFound {
                    what: format!("default branch {default_branch}"),
                })?;
            let default_tree = self.tree_blobs(&default_sha).await?;
            let mut golden_al = BTreeMap::new();
            let mut waivers = Vec::new();
            for (path, _) in &default_tree {
                if path.starts_with("golden_al_distribution/") && path.ends_with(".yaml") {
                    if let Some(t) = self.text_at(path, &default_sha).await? {
                        golden_al.insert(path.clone(), t);
                    }
                } else if path.starts_with("docs/waiver/") && path.ends_with(".md") {
                    waivers.push(path.clone());
                }
            }
            let mut models_md = self.text_at("MODELS.md", &default_sha).await?;
            if models_md.is_none() {
                models_md = self.text_at("docs/MODELS.md", &default_sha).await?;
            }
            let default_files = DefaultBranchFiles {
                prompt: self
                    .text_at(".github/codeowner-signoff-verify-prompt.md", &default_sha)
                    .await?,
                checklist: self
                    .text_at("docs/PR_REVIEW_CHECKLIST.md", &default_sha)
                    .await?,
                models_md,
                golden_al,
                waivers,
            };

            let mut codeowners = None;
            for path in [".github/CODEOWNERS", "CODEOWNERS", "docs/CODEOWNERS"] {
                codeowners = self.text_at(path, &base_sha).await?;
                if codeowners.is_some() {
                    break;
                }
            }

            let raw_files: Vec<RawFile> = self
                .t
                .get_all(
                    &format!("list files of #{pull}"),
                    &self.path(&format!("pulls/{pull}/files?per_page=100")),
                    None,
                )
                .await?;
            let mut changed_files = Vec::new();
            for (index, f) in raw_files.into_iter().enumerate() {
                let head_text = if f.status != "removed" && index < MAX_FILES_READ {
                    self.text_at(&f.filename, &head_sha).await?
                } else {
                    None
                };
                changed_files.push(ChangedFile {
                    path: f.filename,
                    previous_path: f.previous_filename,
                    status: f.status,
                    patch: f.patch,
                    head_text,
                });
            }

            let is_master = |p: &str| {
                p.starts_with("configs/")
                    && !p["configs/".len()..].contains('/')
                    && p.ends_with("-master.yaml")
            };
            let head_tree = self.tree_blobs(&head_sha).await?;
            let mut masters_head = BTreeMap::new();
            let mut masters_base = BTreeMap::new();
            for (path, _) in head_tree.iter().filter(|(p, _)| is_master(p)) {
                let Some(head) = self.text_at(path, &head_sha).await? else {
                    continue;
                };
                let changed = changed_files.iter().any(|f| &f.path == path);
                let base = if changed {
                    self.text_at(path, &base_sha).await?
                } else {
                    Some(head.clone())
                };
                if let Some(base) = base {
                    masters_base.insert(path.clone(), base);
                }
                masters_head.insert(path.clone(), head);
            }

            let commits: Vec<ShaOnly> = self
                .t
                .get_all(
                    &format!("list commits of #{pull}"),
                    &self.path(&format!("pulls/{pull}/commits?per_page=100")),
                    None,
                )
                .await?;
            let pr_commits: Vec<String> = commits.into_iter().map(|c| c.sha).collect();
            let mut check_runs = Vec::new();
            for sha in pr_commits.iter().rev().take(MAX_COMMITS_CHECKED) {
                let runs: Vec<RawCheckRun> = self
                    .t
                    .get_all(
                        &format!("list check runs of {sha}"),
                        &self.path(&format!("commits/{sha}/check-runs?per_page=100")),
                        Some("check_runs"),
                    )
                    .await?;
                check_runs.extend(runs.into_iter().map(|r| CheckRunFact {
                    sha: sha.clone(),
                    run_id: r.details_url.as_deref().and_then(run_id_of),
                    name: r.name,
                    status: r.status,
                    conclusion: r.conclusion,
                }));
            }
            // The eval results of the run Check 1 accepts, and of a few of
            // the newest other runs for the evidence.
            let mut run_ids: Vec<u64> = check_runs
                .iter()
                .filter(|r| r.name.contains("eval /") && r.conclusion.as_deref() == Some("success"))
                .filter_map(|r| r.run_id)
                .collect();
            run_ids.sort_unstable();
            run_ids.dedup();
            run_ids.reverse();
            run_ids.truncate(MAX_RUNS_READ);
            if let Some(sweep) = klaud_signoff::checks::green_sweep(&pr_commits, &check_runs)
                && !run_ids.contains(&sweep.run_id)
            {
                run_ids.push(sweep.run_id);
            }
            // The measured points of the run Check 1 accepts (the newer
            // contract counts its Pareto frontier).
            let mut benchmarks = BTreeMap::new();
            if let Some(sweep) = klaud_signoff::checks::green_sweep(&pr_commits, &check_runs) {
                let points = self
                    .run_file(
                        sweep.run_id,
                        klaud_lifecycle::artifacts::AGG_BMK_ARTIFACT,
                        klaud_lifecycle::artifacts::AGG_BMK_FILE,
                    )
                    .await?
                    .and_then(|bytes| {
                        klaud_signoff::evidence::parse_agg_bmk(&bytes).map_err(|e| e.to_string())
                    });
                benchmarks.insert(sweep.run_id, points);
            }
            let mut evals = BTreeMap::new();
            let mut run_commits = BTreeMap::new();
            for run_id in run_ids {
                evals.insert(run_id, self.eval_results(run_id).await?);
                if let Some(sha) = check_runs
                    .iter()
                    .find(|r| r.run_id == Some(run_id))
                    .map(|r| r.sha.clone())
                {
                    run_commits.insert(run_id, sha);
                }
            }

            let comments = self
                .list_comments(pull, None)
                .await?
                .into_iter()
                .map(|c| CommentFact {
                    login: c.author.unwrap_or_default(),
                    author_association: c.author_association.unwrap_or_default(),
                    body: cut(c.body, MAX_SIGNOFF_BYTES),
                })
                .collect();

            let mut team_membership = BTreeMap::new();
            if let Some(owners) = &codeowners {
                let teams: std::collections::BTreeSet<String> =
                    klaud_signoff::codeowners::Codeowners::parse(owners)
                        .rules
                        .iter()
                        .flat_map(|r| r.teams().map(str::to_ascii_lowercase).collect::<Vec<_>>())
                        .collect();
                for team in teams {
                    if let Some(member) = self.team_member(&team, &author).await? {
                        team_membership.insert(team, member);
                    }
                }
            }

            // Whether each linked upstream recipe pull request merged (only
            // the 0-12 and newer contracts require it).
            let version = klaud_signoff::ContractVersion::detect(default_files.prompt.as_deref());
            let mut recipe_pulls = BTreeMap::new();
            let detail = klaud_signoff::checklist::detail_section(&signoff.body);
            let links =
                if version.is_some_and(klaud_signoff::ContractVersion::recipe_must_be_merged) {
                    klaud_signoff::checks::recipe_links(detail)
                } else {
                    Vec::new()
                };
            for link in links {
                if let Some((repo, number)) = klaud_signoff::checks::recipe_pull(&link) {
                    let state = self.recipe_pull(&repo, number).await?;
                    recipe_pulls.insert(link, state);
                }
            }

            // The newer contract's scope leaves admin owners out: read the
            // permission of the users CODEOWNERS names for the changed paths.
            let mut owner_admins = std::collections::BTreeSet::new();
            let newer =
                version.is_some_and(klaud_signoff::ContractVersion::scope_skips_core_and_admins);
            if let (true, Some(owners)) = (newer, &codeowners) {
                let owners = klaud_signoff::codeowners::Codeowners::parse(owners);
                let users: std::collections::BTreeSet<String> = changed_files
                    .iter()
                    .flat_map(|f| std::iter::once(&f.path).chain(f.previous_path.as_ref()))
                    .filter_map(|path| owners.owner_rule(path))
                    .flat_map(|rule| rule.owners.iter())
                    .filter(|o| !o.contains('/') && !o.contains('@'))
                    .map(|o| o.to_ascii_lowercase())
                    .collect();
                for user in users.into_iter().take(MAX_OWNERS_READ) {
                    let owner = self.signer(&user, None).await?;
                    if owner.permission == "admin" && owner.role_name.as_deref() == Some("admin") {
                        owner_admins.insert(user);
                    }
                }
            }

            Ok(Evidence {
                repo: format!("{}/{}", self.owner, self.name),
                pull: facts,
                head_sha,
                signoff,
                signer,
                default_branch: default_files,
                codeowners,
                team_membership,
                owner_admins,
                recipe_pulls,
                changed_files,
                masters_base,
                masters_head,
                pr_commits,
                check_runs,
                evals,
                benchmarks,
                run_commits,
                comments,
                eval_bars,
            })
        })
    }

    async fn signer(&self, login: &str, kind: Option<String>) -> Result<Signer, GithubError> {
        #[derive(Deserialize)]
        struct Perm {
            permission: String,
            #[serde(default)]
            role_name: Option<String>,
            #[serde(default)]
            user: Option<RawUser>,
        }
        let what = format!("permission of {login}");
        let raw = self
            .t
            .read(
                &what,
                &self.path(&format!(
                    "collaborators/{}/permission",
                    crate::api::seg(login)
                )),
                None,
            )
            .await?;
        // A user who is not a collaborator (or does not exist any more) has
        // no permission: the gate refuses them, it is not Klaud's failure.
        let (permission, role_name, user_kind) = if raw.status == http::StatusCode::NOT_FOUND {
            ("none".to_owned(), None, None)
        } else {
            ok_or_error(&what, &raw)?;
            let p: Perm = raw.json(&what)?;
            (p.permission, p.role_name, p.user.and_then(|u| u.kind))
        };
        Ok(Signer {
            login: login.to_owned(),
            user_type: kind.or(user_kind).unwrap_or_else(|| "User".into()),
            permission,
            role_name: role_name.filter(|r| !r.is_empty()),
        })
    }

    /// The state of an upstream pull request (`repo` is `owner/name`); a
    /// pull request GitHub does not show is unverifiable, not Klaud's
    /// failure.
    async fn recipe_pull(
        &self,
        repo: &str,
        number: u64,
    ) -> Result<Result<RecipePull, RecipePullUnreadable>, GithubError> {
        #[derive(Deserialize)]
        struct Raw {
            state: String,
            #[serde(default)]
            draft: bool,
            #[serde(default)]
            merged_at: Option<String>,
        }
        let Some((owner, name)) = repo.split_once('/') else {
            return Ok(Err(RecipePullUnreadable::NotOwnerName {
                repo: repo.to_owned(),
            }));
        };
        let what = format!("read upstream pull request {repo}#{number}");
        let path = format!(
            "/repos/{}/{}/pulls/{number}",
            crate::api::seg(owner),
            crate::api::seg(name)
        );
        let raw = self.t.read(&what, &path, None).await?;
        if matches!(raw.status.as_u16(), 403 | 404 | 410 | 451) {
            return Ok(Err(RecipePullUnreadable::Hidden {
                status: raw.status.as_u16(),
            }));
        }
        ok_or_error(&what, &raw)?;
        let pull: Raw = raw.json(&what)?;
        Ok(Ok(RecipePull {
            state: pull.state,
            draft: pull.draft,
            merged_at: pull.merged_at.filter(|at| !at.is_empty()),
        }))
    }

    /// Whether `login` is an active member of `org/team`; `None` when
    /// GitHub does not say (the token often cannot read teams).
    async fn team_member(&self, team: &str, login: &str) -> Result<Option<bool>, GithubError> {
        let Some((org, slug)) = team.split_once('/') else {
            return Ok(None);
        };
        let what = format!("membership of {login} in {team}");
        let path = format!(
            "/orgs/{}/teams/{}/memberships/{}",
            crate::api::seg(org),
            crate::api::seg(slug),
            crate::api::seg(login)
        );
        let raw = self.t.read(&what, &path, None).await?;
        if !raw.status.is_success() {
            return Ok(None);
        }
        let v: Value = raw.json(&what)?;
        Ok(Some(v["state"] == "active"))
    }

    /// File `file` of run `run_id`'s artifact named `artifact` (or why it
    /// is not there).
    async fn run_file(
        &self,
        run_id: u64,
        artifact: &str,
        file: &str,
    ) -> Result<Result<Vec<u8>, String>, GithubError> {
        let artifacts: Vec<RawArtifact> = self
            .t
            .get_all(
                &format!("list artifacts of run {run_id}"),
                &self.path(&format!("actions/runs/{run_id}/artifacts?per_page=100")),
                Some("artifacts"),
            )
            .await?;
        let Some(found) = artifacts.iter().find(|a| !a.expired && a.name == artifact) else {
            return Ok(Err(format!("run {run_id} has no {artifact} artifact")));
        };
        let zip = self.download_artifact(found.id).await?;
        let files = match klaud_lifecycle::artifacts::unzip(
            &found.name,
            &zip,
            &klaud_lifecycle::artifacts::ArtifactLimits::default(),
        ) {
            Ok(files) => files,
            Err(e) => return Ok(Err(e.to_string())),
        };
        Ok(files
            .file(file)
            .map(<[u8]>::to_vec)
            .map_err(|e| e.to_string()))
    }

    async fn eval_results(
        &self,
        run_id: u64,
    ) -> Result<Result<Vec<EvalFact>, String>, GithubError> {
        let artifacts: Vec<RawArtifact> = self
            .t
            .get_all(
                &format!("list artifacts of run {run_id}"),
                &self.path(&format!("actions/runs/{run_id}/artifacts?per_page=100")),
                Some("artifacts"),
            )
            .await?;
        let Some(artifact) = artifacts
            .iter()
            .filter(|a| !a.expired)
            .find(|a| a.name.starts_with("eval_results_"))
        else {
            return Ok(Err(format!("run {run_id} has no eval_results_* artifact")));
        };
        let zip = self.download_artifact(artifact.id).await?;
        let files = match klaud_lifecycle::artifacts::unzip(
            &artifact.name,
            &zip,
            &klaud_lifecycle::artifacts::ArtifactLimits::default(),
        ) {
            Ok(files) => files,
            Err(e) => return Ok(Err(e.to_string())),
        };
        Ok(
            match files.file(klaud_lifecycle::artifacts::AGG_EVAL_FILE) {
                Ok(bytes) => parse_agg_eval(bytes).map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            },
        )
    }

    /// Publishes a verdict: Klaud's comment in the verdict's slot is
    /// edited in place, or posted; then the commit status on the assessed
    /// commit. Returns the comment's URL.
    pub fn publish_signoff<'f>(
        &'f self,
        publication: &'f Publication,
    ) -> BoxFuture<'f, Result<String, GithubError>> {
        Box::pin(async move {
            let existing = self
                .list_comments(publication.pull, None)
                .await?
                .into_iter()
                .find(|c| {
                    klaud_signoff::render::is_verdict_for(&c.body, &publication.slot)
                        && c.author
                            .as_deref()
                            .is_some_and(|a| a.eq_ignore_ascii_case(self.bot_login()))
                });
            let comment = match existing {
                Some(c) if c.body == publication.body => c,
                Some(c) => self.update_comment(c.id, &publication.body).await?,
                None => {
                    self.create_comment(publication.pull, &publication.body)
                        .await?
                }
            };
            self.set_signoff_status(
                &publication.head_sha,
                &publication.state,
                &publication.description,
                Some(&comment.html_url),
            )
            .await?;
            Ok(comment.html_url)
        })
    }

    /// Sets the `codeowner-signoff-verify` status on a commit.
    pub fn set_signoff_status<'f>(
        &'f self,
        sha: &'f str,
        state: &'f str,
        description: &'f str,
        target_url: Option<&'f str>,
    ) -> BoxFuture<'f, Result<(), GithubError>> {
        Box::pin(async move {
            let what = format!("set {STATUS_CONTEXT} status on {sha}");
            // GitHub cuts descriptions at 140 characters.
            let description: String = description.chars().take(140).collect();
            let mut payload = json!({
                "state": state, "context": STATUS_CONTEXT, "description": description,
            });
            if let Some(url) = target_url {
                payload["target_url"] = json!(url);
            }
            let raw = self
                .t
                .write_idempotent(
                    &what,
                    Method::POST,
                    &self.path(&format!("statuses/{}", crate::api::seg(sha))),
                    Some(&payload),
                )
                .await?;
            ok_or_error(&what, &raw)
        })
    }
}

/// What changed on a pull request since Klaud last spoke: its newest
/// sign-off and Klaud's newest verdict comment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SignoffActivity {
    /// The newest sign-off and when it was last written (RFC 3339).
    pub latest: Option<(SignoffRef, String)>,
    /// When Klaud's newest verdict comment was last written.
    pub last_verdict: Option<String>,
}

impl SignoffActivity {
    /// The sign-off to verify: one written after the last verdict.
    pub fn pending(&self) -> Option<(SignoffRef, String)> {
        let (signoff, when) = self.latest.clone()?;
        match &self.last_verdict {
            Some(verdict) if verdict.as_str() >= when.as_str() => None,
            _ => Some((signoff, when)),
        }
    }
}

/// An open pull request as the catch-up needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenPull {
    pub number: u64,
    pub draft: bool,
    pub updated_at: String,
}

impl Github {
    /// Open pull requests, most recently updated first (one page: the
    /// catch-up looks at the 100 most recently active).
    pub fn open_pulls_by_update<'f>(&'f self) -> BoxFuture<'f, Result<Vec<OpenPull>, GithubError>> {
        Box::pin(async move {
            #[derive(Deserialize)]
            struct Raw {
                number: u64,
                #[serde(default)]
                draft: bool,
                #[serde(default)]
                updated_at: Option<String>,
            }
            let list: Vec<Raw> = self
                .t
                .get_json(
                    "list open pull requests by update",
                    &self.path("pulls?state=open&sort=updated&direction=desc&per_page=100"),
                )
                .await?;
            Ok(list
                .into_iter()
                .map(|p| OpenPull {
                    number: p.number,
                    draft: p.draft,
                    updated_at: p.updated_at.unwrap_or_default(),
                })
                .collect())
        })
    }

    /// The newest sign-off on `pull` and Klaud's newest verdict there.
    pub fn signoff_activity<'f>(
        &'f self,
        pull: u64,
    ) -> BoxFuture<'f, Result<SignoffActivity, GithubError>> {
        Box::pin(async move {
            let mut activity = SignoffActivity::default();
            let verdicts = self.list_comments(pull, None).await?;
            activity.last_verdict = verdicts
                .iter()
                .filter(|c| {
                    c.body.starts_with(klaud_signoff::render::MARKER_PREFIX)
                        && c.author
                            .as_deref()
                            .is_some_and(|a| a.eq_ignore_ascii_case(self.bot_login()))
                })
                .filter_map(|c| c.updated_at.clone().or_else(|| c.created_at.clone()))
                .max();
            activity.latest = match self.find_signoff(pull, None).await {
                Ok((kind, raw)) => Some((SignoffRef { kind, id: raw.id }, raw.when())),
                Err(GithubError::NotFound { .. }) => None,
                Err(e) => return Err(e),
            };
            Ok(activity)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signoff_belongs_only_to_its_own_pull_request() {
        let raw = |issue: Option<&str>, pull: Option<&str>| RawSignoff {
            id: 1,
            node_id: None,
            body: None,
            user: None,
            created_at: None,
            submitted_at: None,
            updated_at: None,
            issue_url: issue.map(str::to_owned),
            pull_request_url: pull.map(str::to_owned),
        };
        assert!(raw(Some("https://api.github.com/repos/o/r/issues/7"), None).belongs_to(7));
        assert!(!raw(Some("https://api.github.com/repos/o/r/issues/8"), None).belongs_to(7));
        assert!(raw(None, Some("https://api.github.com/repos/o/r/pulls/7")).belongs_to(7));
        assert!(!raw(None, None).belongs_to(7));
    }

    #[test]
    fn the_text_is_the_last_editors_unless_the_author_wrote_it() {
        let unedited =
            json!({"editor": null, "lastEditedAt": null, "userContentEdits": {"nodes": []}});
        assert_eq!(edit_of(&unedited, "ann"), None);
        let by = |who: Value| {
            json!({"editor": who, "lastEditedAt": "2026-07-14T10:00:00Z",
                "userContentEdits": {"nodes": [{"editor": who, "editedAt": "2026-07-14T10:00:00Z"}]}})
        };
        assert_eq!(edit_of(&by(json!({"login": "Ann"})), "ann"), None);
        assert_eq!(
            edit_of(&by(json!({"login": "bob"})), "ann"),
            Some(SignoffEdit::By("bob".into()))
        );
        assert_eq!(edit_of(&by(Value::Null), "ann"), Some(SignoffEdit::Unknown));
        // Only the history names the editor.
        let history = json!({"editor": null, "lastEditedAt": null,
            "userContentEdits": {"nodes": [{"editor": {"login": "bob"}}]}});
        assert_eq!(
            edit_of(&history, "ann"),
            Some(SignoffEdit::By("bob".into()))
        );
        assert_eq!(edit_of(&Value::Null, "ann"), None);
    }

    #[test]
    fn only_a_signoff_written_after_the_last_verdict_is_pending() {
        let signoff = SignoffRef {
            kind: SignoffKind::IssueComment,
            id: 5,
        };
        let mut activity = SignoffActivity {
            latest: Some((signoff, "2026-07-14T10:00:00Z".into())),
            last_verdict: None,
        };
        assert_eq!(activity.pending().map(|p| p.0), Some(signoff));
        activity.last_verdict = Some("2026-07-14T10:05:00Z".into());
        assert_eq!(activity.pending(), None);
        activity.latest = Some((signoff, "2026-07-14T11:00:00Z".into()));
        assert!(activity.pending().is_some());
    }

    #[test]
    fn comment_urls_name_the_signoff_and_the_pull_request() {
        let url = "https://github.com/o/r/pull/2184#issuecomment-42";
        assert_eq!(
            SignoffRef::from_url(url),
            Some(SignoffRef {
                kind: SignoffKind::IssueComment,
                id: 42
            })
        );
        assert_eq!(pull_number_of_url(url), Some(2184));
        assert_eq!(
            SignoffRef::from_url("https://github.com/o/r/pull/1#discussion_r7").map(|r| r.kind),
            Some(SignoffKind::ReviewComment)
        );
        assert_eq!(
            SignoffRef::from_url("https://github.com/o/r/pull/1#pullrequestreview-9").map(|r| r.id),
            Some(9)
        );
        assert_eq!(SignoffRef::from_url("https://github.com/o/r/pull/1"), None);
    }
}
