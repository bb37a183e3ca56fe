//! Gathering a verification's evidence: one named read per part of
//! [`Evidence`], each at the head read first.

use std::collections::{BTreeMap, BTreeSet};

use klaud_lifecycle::BoxFuture;
use klaud_lifecycle::artifacts::{AGG_EVAL_FILE, ArtifactFiles, ArtifactLimits, unzip};
use klaud_signoff::checks::run_id_of;
use klaud_signoff::evidence::{
    ChangedFile, CheckRunFact, CommentFact, DefaultBranchFiles, EvalFact, Evidence, PullFacts,
    RecipePull, RecipePullUnreadable, Signer, Signoff, SignoffEdit, SignoffKind, parse_agg_eval,
};
use klaud_signoff::{MAX_SIGNOFF_BYTES, SIGNOFF_PHRASE};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    RawArtifact, RawCheckRun, RawFile, RawSignoff, RawUser, ShaOnly, SignoffRef, cut, edit_of,
};
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

/// What the runs a verification reads gave.
#[derive(Default)]
struct RunEvidence {
    evals: BTreeMap<u64, Result<Vec<EvalFact>, String>>,
    benchmarks: BTreeMap<u64, Result<Vec<klaud_signoff::evidence::BenchPoint>, String>>,
    run_commits: BTreeMap<u64, String>,
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

    pub(super) async fn find_signoff(
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
            (SignoffKind::IssueComment, format!("issues/{pull}/comments")),
            (SignoffKind::Review, format!("pulls/{pull}/reviews")),
            (SignoffKind::ReviewComment, format!("pulls/{pull}/comments")),
        ] {
            let items: Vec<RawSignoff> = self
                .listing(&format!("list sign-offs of #{pull}"), &path, None)
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
            let (facts, head_sha, base_sha) = self.pull_facts(pull, pinned_head).await?;
            let (signoff, signer) = self.signoff_and_signer(pull, wanted).await?;
            let default_files = self.default_branch_files().await?;
            let codeowners = self.codeowners_at(&base_sha).await?;
            let changed_files = self.changed_files(pull, &head_sha).await?;
            let (masters_base, masters_head) =
                self.masters(&head_sha, &base_sha, &changed_files).await?;
            let (pr_commits, check_runs) = self.check_runs(pull).await?;
            let runs = self.run_evidence(&pr_commits, &check_runs).await?;
            let comments = self.comment_facts(pull).await?;
            let team_membership = self
                .team_membership(codeowners.as_deref(), &signoff.author)
                .await?;
            let version = klaud_signoff::ContractVersion::detect(default_files.prompt.as_deref());
            let recipe_pulls = self.recipe_pulls(version, &signoff.body).await?;
            let owner_admins = self
                .owner_admins(version, codeowners.as_deref(), &changed_files)
                .await?;
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
                evals: runs.evals,
                benchmarks: runs.benchmarks,
                run_commits: runs.run_commits,
                comments,
                eval_bars,
            })
        })
    }

    /// The pull request's facts, the head every later read is at, and its
    /// base.
    async fn pull_facts(
        &self,
        pull: u64,
        pinned_head: Option<String>,
    ) -> Result<(PullFacts, String, String), GithubError> {
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
        Ok((facts, head_sha, base_sha))
    }

    /// The sign-off and who signed it: the text is the word of whoever
    /// wrote it last.
    async fn signoff_and_signer(
        &self,
        pull: u64,
        wanted: Option<SignoffRef>,
    ) -> Result<(Signoff, Signer), GithubError> {
        let (kind, raw) = self.find_signoff(pull, wanted).await?;
        let author = raw
            .user
            .as_ref()
            .map(|u| u.login.clone())
            .unwrap_or_default();
        let edited = self.signoff_edit(&raw, &author).await?;
        let signer = match &edited {
            Some(SignoffEdit::By(editor)) => self.signer(editor, None).await?,
            _ => self.signer(&author, raw.user.and_then(|u| u.kind)).await?,
        };
        let signoff = Signoff {
            kind,
            id: raw.id,
            author,
            body: cut(raw.body.unwrap_or_default(), MAX_SIGNOFF_BYTES),
            edited,
        };
        Ok((signoff, signer))
    }

    /// The contract's files on the default branch: the prompt, the
    /// checklist, MODELS.md, the golden accuracy distributions and the
    /// waivers.
    async fn default_branch_files(&self) -> Result<DefaultBranchFiles, GithubError> {
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
        Ok(DefaultBranchFiles {
            prompt: self
                .text_at(".github/codeowner-signoff-verify-prompt.md", &default_sha)
                .await?,
            checklist: self
                .text_at("docs/PR_REVIEW_CHECKLIST.md", &default_sha)
                .await?,
            models_md,
            golden_al,
            waivers,
        })
    }

    /// The CODEOWNERS file at the base, where GitHub looks for it.
    async fn codeowners_at(&self, base_sha: &str) -> Result<Option<String>, GithubError> {
        for path in [".github/CODEOWNERS", "CODEOWNERS", "docs/CODEOWNERS"] {
            if let Some(text) = self.text_at(path, base_sha).await? {
                return Ok(Some(text));
            }
        }
        Ok(None)
    }

    /// The changed files, each with its text at the head (the first
    /// [`MAX_FILES_READ`] that still exist).
    async fn changed_files(
        &self,
        pull: u64,
        head_sha: &str,
    ) -> Result<Vec<ChangedFile>, GithubError> {
        let raw_files: Vec<RawFile> = self
            .listing(
                &format!("list files of #{pull}"),
                &format!("pulls/{pull}/files"),
                None,
            )
            .await?;
        let mut changed_files = Vec::new();
        for (index, f) in raw_files.into_iter().enumerate() {
            let head_text = if f.status != "removed" && index < MAX_FILES_READ {
                self.text_at(&f.filename, head_sha).await?
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
        Ok(changed_files)
    }

    /// Every master config at the base and at the head (a file the pull
    /// request does not change is read once).
    async fn masters(
        &self,
        head_sha: &str,
        base_sha: &str,
        changed_files: &[ChangedFile],
    ) -> Result<(BTreeMap<String, String>, BTreeMap<String, String>), GithubError> {
        let is_master = |p: &str| {
            p.starts_with("configs/")
                && !p["configs/".len()..].contains('/')
                && p.ends_with("-master.yaml")
        };
        let head_tree = self.tree_blobs(head_sha).await?;
        let mut masters_head = BTreeMap::new();
        let mut masters_base = BTreeMap::new();
        for (path, _) in head_tree.iter().filter(|(p, _)| is_master(p)) {
            let Some(head) = self.text_at(path, head_sha).await? else {
                continue;
            };
            let changed = changed_files.iter().any(|f| &f.path == path);
            let base = if changed {
                self.text_at(path, base_sha).await?
            } else {
                Some(head.clone())
            };
            if let Some(base) = base {
                masters_base.insert(path.clone(), base);
            }
            masters_head.insert(path.clone(), head);
        }
        Ok((masters_base, masters_head))
    }

    /// The pull request's commits and the check runs of the newest
    /// [`MAX_COMMITS_CHECKED`].
    async fn check_runs(&self, pull: u64) -> Result<(Vec<String>, Vec<CheckRunFact>), GithubError> {
        let commits: Vec<ShaOnly> = self
            .listing(
                &format!("list commits of #{pull}"),
                &format!("pulls/{pull}/commits"),
                None,
            )
            .await?;
        let pr_commits: Vec<String> = commits.into_iter().map(|c| c.sha).collect();
        let mut check_runs = Vec::new();
        for sha in pr_commits.iter().rev().take(MAX_COMMITS_CHECKED) {
            let runs: Vec<RawCheckRun> = self
                .listing(
                    &format!("list check runs of {sha}"),
                    &format!("commits/{sha}/check-runs"),
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
        Ok((pr_commits, check_runs))
    }

    /// The artifacts of the runs the checks read: the eval results of the
    /// run Check 1 accepts and of a few of the newest other runs, and the
    /// measured points of the accepted run (the newer contract counts its
    /// Pareto frontier).
    async fn run_evidence(
        &self,
        pr_commits: &[String],
        check_runs: &[CheckRunFact],
    ) -> Result<RunEvidence, GithubError> {
        let mut run_ids: Vec<u64> = check_runs
            .iter()
            .filter(|r| r.name.contains("eval /") && r.conclusion.as_deref() == Some("success"))
            .filter_map(|r| r.run_id)
            .collect();
        run_ids.sort_unstable();
        run_ids.dedup();
        run_ids.reverse();
        run_ids.truncate(MAX_RUNS_READ);
        let sweep = klaud_signoff::checks::green_sweep(pr_commits, check_runs);
        let mut out = RunEvidence::default();
        if let Some(sweep) = sweep {
            if !run_ids.contains(&sweep.run_id) {
                run_ids.push(sweep.run_id);
            }
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
            out.benchmarks.insert(sweep.run_id, points);
        }
        for run_id in run_ids {
            out.evals.insert(run_id, self.eval_results(run_id).await?);
            if let Some(sha) = check_runs
                .iter()
                .find(|r| r.run_id == Some(run_id))
                .map(|r| r.sha.clone())
            {
                out.run_commits.insert(run_id, sha);
            }
        }
        Ok(out)
    }

    /// The pull request's comments as the checks read them.
    async fn comment_facts(&self, pull: u64) -> Result<Vec<CommentFact>, GithubError> {
        Ok(self
            .list_comments(pull, None)
            .await?
            .into_iter()
            .map(|c| CommentFact {
                login: c.author.unwrap_or_default(),
                author_association: c.author_association.unwrap_or_default(),
                body: cut(c.body, MAX_SIGNOFF_BYTES),
            })
            .collect())
    }

    /// Whether `author` belongs to each team CODEOWNERS names (a team
    /// whose membership cannot be read is left out).
    async fn team_membership(
        &self,
        codeowners: Option<&str>,
        author: &str,
    ) -> Result<BTreeMap<String, bool>, GithubError> {
        let mut team_membership = BTreeMap::new();
        let Some(owners) = codeowners else {
            return Ok(team_membership);
        };
        let teams: BTreeSet<String> = klaud_signoff::codeowners::Codeowners::parse(owners)
            .rules
            .iter()
            .flat_map(|r| r.teams().map(str::to_ascii_lowercase).collect::<Vec<_>>())
            .collect();
        for team in teams {
            if let Some(member) = self.team_member(&team, author).await? {
                team_membership.insert(team, member);
            }
        }
        Ok(team_membership)
    }

    /// Whether each upstream recipe pull request the sign-off links merged
    /// (only the 0-12 and newer contracts require it).
    async fn recipe_pulls(
        &self,
        version: Option<klaud_signoff::ContractVersion>,
        signoff_body: &str,
    ) -> Result<BTreeMap<String, Result<RecipePull, RecipePullUnreadable>>, GithubError> {
        let mut recipe_pulls = BTreeMap::new();
        if !version.is_some_and(klaud_signoff::ContractVersion::recipe_must_be_merged) {
            return Ok(recipe_pulls);
        }
        let detail = klaud_signoff::checklist::detail_section(signoff_body);
        for link in klaud_signoff::checks::recipe_links(detail) {
            if let Some((repo, number)) = klaud_signoff::checks::recipe_pull(&link) {
                let state = self.recipe_pull(&repo, number).await?;
                recipe_pulls.insert(link, state);
            }
        }
        Ok(recipe_pulls)
    }

    /// The admin users CODEOWNERS names for the changed paths: the newer
    /// contract's scope leaves admin owners out.
    async fn owner_admins(
        &self,
        version: Option<klaud_signoff::ContractVersion>,
        codeowners: Option<&str>,
        changed_files: &[ChangedFile],
    ) -> Result<BTreeSet<String>, GithubError> {
        let mut owner_admins = BTreeSet::new();
        let newer =
            version.is_some_and(klaud_signoff::ContractVersion::scope_skips_core_and_admins);
        let (true, Some(owners)) = (newer, codeowners) else {
            return Ok(owner_admins);
        };
        let owners = klaud_signoff::codeowners::Codeowners::parse(owners);
        let users: BTreeSet<String> = changed_files
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
        Ok(owner_admins)
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

    /// Every page of the repository's listing at `path` (below
    /// `repos/{owner}/{name}/`, 100 a page): the one shape of the sign-off's
    /// paged reads. `key` names the array when the answer is an object.
    async fn listing<T: serde::de::DeserializeOwned>(
        &self,
        what: &str,
        path: &str,
        key: Option<&str>,
    ) -> Result<Vec<T>, GithubError> {
        self.t
            .get_all(what, &self.path(&format!("{path}?per_page=100")), key)
            .await
    }

    /// The files of run `run_id`'s first unexpired artifact that `wanted`
    /// picks (or why there are none: `described` names the artifact).
    async fn run_artifact(
        &self,
        run_id: u64,
        described: &str,
        wanted: impl Fn(&RawArtifact) -> bool,
    ) -> Result<Result<ArtifactFiles, String>, GithubError> {
        let artifacts: Vec<RawArtifact> = self
            .listing(
                &format!("list artifacts of run {run_id}"),
                &format!("actions/runs/{run_id}/artifacts"),
                Some("artifacts"),
            )
            .await?;
        let Some(found) = artifacts.iter().find(|a| !a.expired && wanted(a)) else {
            return Ok(Err(format!("run {run_id} has no {described} artifact")));
        };
        let zip = self.download_artifact(found.id).await?;
        Ok(unzip(&found.name, &zip, &ArtifactLimits::default()).map_err(|e| e.to_string()))
    }

    /// File `file` of run `run_id`'s artifact named `artifact` (or why it
    /// is not there).
    async fn run_file(
        &self,
        run_id: u64,
        artifact: &str,
        file: &str,
    ) -> Result<Result<Vec<u8>, String>, GithubError> {
        let files = self
            .run_artifact(run_id, artifact, |a| a.name == artifact)
            .await?;
        Ok(files.and_then(|f| f.file(file).map(<[u8]>::to_vec).map_err(|e| e.to_string())))
    }

    async fn eval_results(
        &self,
        run_id: u64,
    ) -> Result<Result<Vec<EvalFact>, String>, GithubError> {
        let files = self
            .run_artifact(run_id, "eval_results_*", |a| {
                a.name.starts_with("eval_results_")
            })
            .await?;
        Ok(files.and_then(|f| {
            let bytes = f.file(AGG_EVAL_FILE).map_err(|e| e.to_string())?;
            parse_agg_eval(bytes).map_err(|e| e.to_string())
        }))
    }
}
