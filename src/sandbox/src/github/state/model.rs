//! What the simulated GitHub does to its state: the request log, rate and
//! content limits, repositories, refs, pull requests, issues and runs.

use super::*;

impl Model {
    /// Appends to the request log, dropping the oldest entries past
    /// [`LOG_CAPACITY`].
    pub fn record(&mut self, mut entry: LogEntry) {
        entry.at.get_or_insert_with(Utc::now);
        if self.log.len() >= LOG_CAPACITY {
            let excess = self.log.len() + 1 - LOG_CAPACITY;
            self.log.drain(..excess);
        }
        self.log.push(entry);
        self.recorded
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub fn repo(&self, owner: &str, repo: &str) -> Result<&Repo, ApiError> {
        self.repos
            .get(&key(owner, repo))
            .ok_or_else(ApiError::not_found)
    }

    pub fn repo_mut(&mut self, owner: &str, repo: &str) -> Result<&mut Repo, ApiError> {
        self.repos
            .get_mut(&key(owner, repo))
            .ok_or_else(ApiError::not_found)
    }

    pub(super) fn repo_by_full(&mut self, full: &str) -> Result<&mut Repo, SimError> {
        self.repos
            .get_mut(&full.to_ascii_lowercase())
            .ok_or_else(|| SimError::NoRepo(full.to_string()))
    }

    /// API URL of a repository (`{base}/repos/{owner}/{repo}`).
    pub fn repo_url(&self, owner: &str, repo: &str) -> String {
        match self.repos.get(&key(owner, repo)) {
            Some(r) => format!("{}/repos/{}/{}", self.base_url, r.owner, r.name),
            None => format!("{}/repos/{owner}/{repo}", self.base_url),
        }
    }

    /// Web URL matching an API repository URL: the simulator's pages
    /// (`pages.rs`) under `/_html/` on the same server.
    pub fn html_base(&self, api_repo_url: &str) -> String {
        api_repo_url.replacen("/repos/", "/_html/", 1)
    }

    pub fn user(&self, login: &str) -> Option<&User> {
        self.users.get(&login.to_ascii_lowercase())
    }

    pub fn user_by_email(&self, email: &str) -> Option<&User> {
        self.users.values().find(|u| u.email == email)
    }

    /// The git signature of a user (or a neutral one).
    pub fn signature_of(&self, login: Option<&str>) -> Signature {
        let (name, email) = match login.and_then(|l| self.user(l)) {
            Some(u) => (
                u.name.clone().unwrap_or_else(|| u.login.clone()),
                u.email.clone(),
            ),
            None => ("GitHub".to_string(), "noreply@github.com".to_string()),
        };
        Signature {
            name,
            email,
            date: Utc::now(),
        }
    }

    /// The simple-user JSON shape (octocrab's `Author`).
    pub fn user_json(&self, u: &User) -> Value {
        let b = &self.base_url;
        let l = &u.login;
        json!({
            "login": l, "id": u.id, "node_id": format!("U_{}", u.id),
            "avatar_url": format!("{b}/_avatars/{}", u.id), "gravatar_id": "",
            "url": format!("{b}/users/{l}"), "html_url": format!("{b}/_html/{l}"),
            "followers_url": format!("{b}/users/{l}/followers"),
            "following_url": format!("{b}/users/{l}/following{{/other_user}}"),
            "gists_url": format!("{b}/users/{l}/gists{{/gist_id}}"),
            "starred_url": format!("{b}/users/{l}/starred{{/owner}}{{/repo}}"),
            "subscriptions_url": format!("{b}/users/{l}/subscriptions"),
            "organizations_url": format!("{b}/users/{l}/orgs"),
            "repos_url": format!("{b}/users/{l}/repos"),
            "events_url": format!("{b}/users/{l}/events{{/privacy}}"),
            "received_events_url": format!("{b}/users/{l}/received_events"),
            "type": if u.is_bot { "Bot" } else { "User" }, "site_admin": false,
        })
    }

    /// The `public-user` shape (`GET /user`, `GET /users/{login}`): the
    /// simple user plus the profile fields GitHub always sends, mostly
    /// `null` for a sandbox account.
    pub fn public_user_json(&self, u: &User) -> Value {
        let mut v = self.user_json(u);
        let extra = json!({
            "name": u.name, "company": null, "blog": "", "location": null, "email": null,
            "hireable": null, "bio": null, "twitter_username": null,
            "public_repos": 0, "public_gists": 0, "followers": 0, "following": 0,
            "created_at": fmt_time(self.created_at), "updated_at": fmt_time(self.created_at),
            "user_view_type": "public",
        });
        if let (Some(o), Value::Object(extra)) = (v.as_object_mut(), extra) {
            o.extend(extra);
        }
        v
    }

    /// User JSON by login; unknown logins (e.g. a repository owner that is
    /// not registered) get a synthetic organisation-like record.
    pub fn login_json(&self, login: &str) -> Value {
        match self.user(login) {
            Some(u) => self.user_json(u),
            None => {
                let fake = User {
                    login: login.to_string(),
                    id: 1,
                    name: None,
                    email: String::new(),
                    is_bot: false,
                };
                self.user_json(&fake)
            }
        }
    }

    /// The full repository JSON shape (GitHub's `full-repository`, a
    /// superset of `repository` and `minimal-repository`).
    pub fn repo_json(&self, r: &Repo) -> Value {
        let url = self.repo_url(&r.owner, &r.name);
        let html = self.html_base(&url);
        let u = |suffix: &str| format!("{url}/{suffix}");
        let open_issues = r.pulls.values().filter(|p| p.open).count();
        let mut v = json!({
            "id": r.id, "node_id": r.node_id(), "name": r.name,
            "full_name": r.full_name(), "private": false, "fork": false,
            "owner": self.login_json(&r.owner),
            "html_url": html, "description": null, "homepage": null, "language": null,
            "url": url, "mirror_url": null, "license": null,
            "git_url": format!("{url}.git"), "clone_url": format!("{html}.git"),
            "ssh_url": format!("git@sandbox:{}.git", r.full_name()), "svn_url": html,
            "default_branch": r.default_branch,
            "visibility": "public", "archived": false, "disabled": false, "is_template": false,
            "created_at": fmt_time(r.created_at), "updated_at": fmt_time(r.created_at),
            "pushed_at": fmt_time(r.created_at),
        });
        let counts = json!({
            "size": 0, "forks": 0, "forks_count": 0, "stargazers_count": 0, "watchers": 0,
            "watchers_count": 0, "open_issues": open_issues, "open_issues_count": open_issues,
            "network_count": 0, "subscribers_count": 0,
            "has_issues": true, "has_projects": false, "has_wiki": false, "has_pages": false,
            "has_downloads": true, "has_discussions": false, "topics": [],
            "allow_forking": true, "web_commit_signoff_required": false,
            "permissions": {"admin": false, "maintain": false, "push": true, "triage": true, "pull": true},
        });
        if let (Some(o), Value::Object(counts)) = (v.as_object_mut(), counts) {
            o.extend(counts);
        }
        // The hypermedia URL templates every repository object carries.
        for (key, suffix) in [
            ("archive_url", "{archive_format}{/ref}"),
            ("assignees_url", "assignees{/user}"),
            ("blobs_url", "git/blobs{/sha}"),
            ("branches_url", "branches{/branch}"),
            ("collaborators_url", "collaborators{/collaborator}"),
            ("comments_url", "comments{/number}"),
            ("commits_url", "commits{/sha}"),
            ("compare_url", "compare/{base}...{head}"),
            ("contents_url", "contents/{+path}"),
            ("contributors_url", "contributors"),
            ("deployments_url", "deployments"),
            ("downloads_url", "downloads"),
            ("events_url", "events"),
            ("forks_url", "forks"),
            ("git_commits_url", "git/commits{/sha}"),
            ("git_refs_url", "git/refs{/sha}"),
            ("git_tags_url", "git/tags{/sha}"),
            ("hooks_url", "hooks"),
            ("issue_comment_url", "issues/comments{/number}"),
            ("issue_events_url", "issues/events{/number}"),
            ("issues_url", "issues{/number}"),
            ("keys_url", "keys{/key_id}"),
            ("labels_url", "labels{/name}"),
            ("languages_url", "languages"),
            ("merges_url", "merges"),
            ("milestones_url", "milestones{/number}"),
            (
                "notifications_url",
                "notifications{?since,all,participating}",
            ),
            ("pulls_url", "pulls{/number}"),
            ("releases_url", "releases{/id}"),
            ("stargazers_url", "stargazers"),
            ("statuses_url", "statuses/{sha}"),
            ("subscribers_url", "subscribers"),
            ("subscription_url", "subscription"),
            ("tags_url", "tags"),
            ("teams_url", "teams"),
            ("trees_url", "git/trees{/sha}"),
        ] {
            v[key] = json!(u(suffix));
        }
        v
    }

    /// The "minimal repository" a workflow run's `repository` and
    /// `head_repository` carry on GitHub: identity, owner and the URL
    /// templates, without the counts and timestamps of the full object
    /// (so a run's answer, and its `ETag`, do not change when another pull
    /// request opens or closes).
    pub fn minimal_repo_json(&self, r: &Repo) -> Value {
        const KEPT: &[&str] = &[
            "id",
            "node_id",
            "name",
            "full_name",
            "private",
            "owner",
            "html_url",
            "description",
            "fork",
            "url",
        ];
        let full = self.repo_json(r);
        let mut out = serde_json::Map::new();
        if let Value::Object(o) = full {
            for (k, v) in o {
                // The clone addresses belong to the full object only.
                let clone = matches!(
                    k.as_str(),
                    "mirror_url" | "git_url" | "clone_url" | "ssh_url" | "svn_url"
                );
                if KEPT.contains(&k.as_str()) || (k.ends_with("_url") && !clone) {
                    out.insert(k, v);
                }
            }
        }
        Value::Object(out)
    }

    pub fn label_json(&self, r: &Repo, name: &str) -> Value {
        let url = self.repo_url(&r.owner, &r.name);
        let l = r.labels.get(&name.to_ascii_lowercase());
        json!({
            "id": l.map(|l| l.id).unwrap_or(0),
            "node_id": format!("LA_{}", l.map(|l| l.id).unwrap_or(0)),
            "url": format!("{url}/labels/{}", url::form_urlencoded::byte_serialize(name.as_bytes()).collect::<String>()),
            "name": l.map(|l| l.name.as_str()).unwrap_or(name),
            "description": l.and_then(|l| l.description.clone()),
            "color": l.map(|l| l.color.as_str()).unwrap_or("ededed"),
            "default": false,
        })
    }

    /// Pull request JSON (octocrab's `PullRequest`), including the node id
    /// the GraphQL mutations take.
    pub fn pull_json(&self, r: &Repo, p: &Pull) -> Value {
        let url = self.repo_url(&r.owner, &r.name);
        let repo = self.repo_json(r);
        let base_sha = r.resolve(&p.base_ref).unwrap_or_default();
        let merge_base = r.objects.merge_base(&base_sha, &p.head_sha);
        let (commits, changed) = match &merge_base {
            Some(mb) => {
                let files = match (
                    r.objects.commits.get(mb),
                    r.objects.commits.get(&p.head_sha),
                ) {
                    (Some(a), Some(b)) => {
                        crate::github::git::diff_files(&r.objects, &a.tree, &b.tree).len()
                    }
                    _ => 0,
                };
                (r.objects.commits_between(mb, &p.head_sha).len(), files)
            }
            None => (0, 0),
        };
        let (mergeable, mergeable_state) = r.mergeability(p);
        let html = format!("{}/pull/{}", self.html_base(&url), p.number);
        let links = json!({
            "self": {"href": format!("{url}/pulls/{}", p.number)},
            "html": {"href": html},
            "issue": {"href": format!("{url}/issues/{}", p.number)},
            "comments": {"href": format!("{url}/issues/{}/comments", p.number)},
            "review_comments": {"href": format!("{url}/pulls/{}/comments", p.number)},
            "review_comment": {"href": format!("{url}/pulls/comments{{/number}}")},
            "commits": {"href": format!("{url}/pulls/{}/commits", p.number)},
            "statuses": {"href": format!("{url}/statuses/{}", p.head_sha)},
        });
        let mut v = json!({
            "url": format!("{url}/pulls/{}", p.number), "id": p.id,
            "node_id": format!("PR_{}", p.id),
            "html_url": html, "diff_url": format!("{html}.diff"), "patch_url": format!("{html}.patch"),
            "issue_url": format!("{url}/issues/{}", p.number),
            "commits_url": format!("{url}/pulls/{}/commits", p.number),
            "review_comments_url": format!("{url}/pulls/{}/comments", p.number),
            "review_comment_url": format!("{url}/pulls/comments{{/number}}"),
            "comments_url": format!("{url}/issues/{}/comments", p.number),
            "statuses_url": format!("{url}/statuses/{}", p.head_sha),
            "number": p.number, "state": if p.open { "open" } else { "closed" },
            "locked": false, "title": p.title, "user": self.login_json(&p.user), "body": p.body,
            "labels": p.labels.iter().map(|l| self.label_json(r, l)).collect::<Vec<_>>(),
            "milestone": null, "active_lock_reason": null,
            "created_at": fmt_time(p.created_at), "updated_at": fmt_time(p.updated_at),
            "closed_at": p.closed_at.map(fmt_time),
            "merged_at": p.merged.as_ref().map(|x| fmt_time(x.at)),
            "merge_commit_sha": p.merged.as_ref().map(|x| x.sha.clone()),
        });
        let rest = json!({
            "assignee": null, "assignees": [], "requested_reviewers": [], "requested_teams": [],
            "head": {"label": format!("{}:{}", r.owner, p.head_ref), "ref": p.head_ref, "sha": p.head_sha,
                     "user": self.login_json(&r.owner), "repo": repo.clone()},
            "base": {"label": format!("{}:{}", r.owner, p.base_ref), "ref": p.base_ref, "sha": base_sha,
                     "user": self.login_json(&r.owner), "repo": repo},
            "author_association": self.author_association(r, &p.user), "auto_merge": null, "draft": p.draft,
            "merged": p.merged.is_some(), "mergeable": mergeable, "rebaseable": mergeable, "mergeable_state": mergeable_state,
            "merged_by": p.merged.as_ref().map(|x| self.login_json(&x.by)), "comments": r.comments.values().filter(|c| c.issue == p.number).count(),
            "review_comments": 0, "maintainer_can_modify": false,
            "commits": commits, "additions": 0, "deletions": 0, "changed_files": changed,
        });
        if let (Some(o), Value::Object(r2)) = (v.as_object_mut(), rest) {
            o.extend(r2);
        }
        v["_links"] = links;
        v
    }

    /// A pull request as GitHub's lists show it ("pull-request-simple"):
    /// the full object without what only a read of the one pull request
    /// computes (mergeability, merge and review counts, diff sizes).
    pub fn pull_list_json(&self, r: &Repo, p: &Pull) -> Value {
        let mut v = self.pull_json(r, p);
        if let Some(o) = v.as_object_mut() {
            for key in [
                "merged",
                "mergeable",
                "rebaseable",
                "mergeable_state",
                "merged_by",
                "comments",
                "review_comments",
                "maintainer_can_modify",
                "commits",
                "additions",
                "deletions",
                "changed_files",
            ] {
                o.remove(key);
            }
        }
        v
    }

    /// Issue JSON of a pull request (octocrab's `Issue`).
    pub fn issue_json(&self, r: &Repo, p: &Pull) -> Value {
        let url = self.repo_url(&r.owner, &r.name);
        let html = format!("{}/pull/{}", self.html_base(&url), p.number);
        json!({
            "id": p.id, "node_id": format!("I_{}", p.id),
            "url": format!("{url}/issues/{}", p.number), "repository_url": url,
            "labels_url": format!("{url}/issues/{}/labels{{/name}}", p.number),
            "comments_url": format!("{url}/issues/{}/comments", p.number),
            "events_url": format!("{url}/issues/{}/events", p.number),
            "html_url": html, "number": p.number,
            "state": if p.open { "open" } else { "closed" }, "title": p.title, "body": p.body,
            "user": self.login_json(&p.user),
            "labels": p.labels.iter().map(|l| self.label_json(r, l)).collect::<Vec<_>>(),
            "assignee": null, "assignees": [], "milestone": null, "locked": false,
            "comments": r.comments.values().filter(|c| c.issue == p.number).count(),
            "pull_request": {"url": format!("{url}/pulls/{}", p.number), "html_url": html,
                             "diff_url": format!("{html}.diff"), "patch_url": format!("{html}.patch")},
            "closed_at": p.closed_at.map(fmt_time), "created_at": fmt_time(p.created_at),
            "updated_at": fmt_time(p.updated_at), "draft": p.draft,
            "author_association": self.author_association(r, &p.user),
            "closed_by": if p.open { Value::Null } else {
                p.closed_by.as_deref().map_or(Value::Null, |l| self.login_json(l))
            },
        })
    }

    /// JSON of a plain issue (GitHub's `issue` schema).
    pub fn plain_issue_json(&self, r: &Repo, i: &Issue) -> Value {
        let url = self.repo_url(&r.owner, &r.name);
        json!({
            "id": i.id, "node_id": format!("I_{}", i.id),
            "url": format!("{url}/issues/{}", i.number), "repository_url": url,
            "labels_url": format!("{url}/issues/{}/labels{{/name}}", i.number),
            "comments_url": format!("{url}/issues/{}/comments", i.number),
            "events_url": format!("{url}/issues/{}/events", i.number),
            "html_url": format!("{}/issues/{}", self.html_base(&url), i.number),
            "number": i.number,
            "state": if i.open { "open" } else { "closed" }, "state_reason": i.state_reason,
            "title": i.title, "body": i.body,
            "user": self.login_json(&i.user),
            "labels": i.labels.iter().map(|l| self.label_json(r, l)).collect::<Vec<_>>(),
            "assignee": null, "assignees": [], "milestone": null, "locked": false,
            "comments": r.comments.values().filter(|c| c.issue == i.number).count(),
            "closed_at": i.closed_at.map(fmt_time), "created_at": fmt_time(i.created_at),
            "updated_at": fmt_time(i.updated_at),
            "author_association": self.author_association(r, &i.user),
            "closed_by": if i.open { Value::Null } else {
                i.closed_by.as_deref().map_or(Value::Null, |l| self.login_json(l))
            },
        })
    }

    /// JSON of issue or pull request `number` as an issue.
    pub fn any_issue_json(&self, r: &Repo, number: u64) -> Option<Value> {
        match r.pulls.get(&number) {
            Some(p) => Some(self.issue_json(r, p)),
            None => r.issues.get(&number).map(|i| self.plain_issue_json(r, i)),
        }
    }

    pub fn comment_json(&self, r: &Repo, c: &IssueComment) -> Value {
        let url = self.repo_url(&r.owner, &r.name);
        json!({
            "id": c.id, "node_id": format!("IC_{}", c.id),
            "url": format!("{url}/issues/comments/{}", c.id),
            "html_url": format!(
                "{}/{}/{}#issuecomment-{}",
                self.html_base(&url),
                if r.issues.contains_key(&c.issue) { "issues" } else { "pull" },
                c.issue,
                c.id
            ),
            "issue_url": format!("{url}/issues/{}", c.issue),
            "body": c.body, "user": self.login_json(&c.user),
            "created_at": fmt_time(c.created_at), "updated_at": fmt_time(c.updated_at),
            "author_association": self.author_association(r, &c.user),
        })
    }

    /// GitHub's `author_association` of `login` on a repository: `OWNER`
    /// for the owner account; `COLLABORATOR` for an invited collaborator
    /// of any permission (the simulator has no organizations, so never
    /// `MEMBER`); otherwise `CONTRIBUTOR` when they authored a commit on
    /// the default branch, else `NONE` (the values of the REST schema
    /// `author-association` in github/rest-api-description; GraphQL
    /// `CommentAuthorAssociation`: "CONTRIBUTOR: Author has previously
    /// committed to the repository", "NONE: Author has no association with
    /// the repository"). A GitHub App's bot is never a collaborator,
    /// whatever its installation may write: its comments read `NONE`, or
    /// `CONTRIBUTOR` once it has commits on the default branch, which is
    /// why reuse gates that trust OWNER/MEMBER/COLLABORATOR never trust an
    /// App's own comment.
    pub fn author_association(&self, r: &Repo, login: &str) -> &'static str {
        if login.eq_ignore_ascii_case(&r.owner) {
            return "OWNER";
        }
        let user = self.user(login);
        let is_bot = user.is_none_or(|u| u.is_bot);
        if !is_bot
            && r.collaborators
                .get(&login.to_ascii_lowercase())
                .is_some_and(|p| *p > Permission::None)
        {
            return "COLLABORATOR";
        }
        match user {
            Some(u) if r.has_contributed(u) => "CONTRIBUTOR",
            _ => "NONE",
        }
    }

    pub fn workflow_json(&self, r: &Repo, w: &Workflow) -> Value {
        let url = self.repo_url(&r.owner, &r.name);
        json!({
            "id": w.id, "node_id": format!("W_{}", w.id), "name": w.name, "path": w.path,
            "state": "active", "created_at": fmt_time(r.created_at), "updated_at": fmt_time(r.created_at),
            "url": format!("{url}/actions/workflows/{}", w.id),
            "html_url": format!("{}/blob/{}/{}", self.html_base(&url), r.default_branch, w.path),
            "badge_url": format!("{}/workflows/{}/badge.svg", self.html_base(&url), w.name),
        })
    }

    pub fn run_json(&self, r: &Repo, run: &Run) -> Value {
        let url = self.repo_url(&r.owner, &r.name);
        let path = r
            .workflows
            .iter()
            .find(|w| w.id == run.workflow_id)
            .map(|w| w.path.clone())
            .unwrap_or_default();
        let html = format!("{}/actions/runs/{}", self.html_base(&url), run.id);
        let prs: Vec<Value> = run
            .pull_requests
            .iter()
            .filter_map(|n| r.pulls.get(n))
            .map(|p| {
                json!({"id": p.id, "number": p.number, "url": format!("{url}/pulls/{}", p.number),
                       "head": {"ref": p.head_ref, "sha": p.head_sha, "repo": {"id": r.id, "url": url, "name": r.name}},
                       "base": {"ref": p.base_ref, "sha": r.resolve(&p.base_ref).unwrap_or_default(),
                                "repo": {"id": r.id, "url": url, "name": r.name}}})
            })
            .collect();
        let head_commit = r.objects.commits.get(&run.head_sha).map(|c| {
            json!({"id": run.head_sha, "tree_id": c.tree, "message": c.message,
                   "timestamp": fmt_time(c.committer.date),
                   "author": {"name": c.author.name, "email": c.author.email},
                   "committer": {"name": c.committer.name, "email": c.committer.email}})
        });
        json!({
            "id": run.id, "name": run.name, "node_id": format!("WFR_{}", run.id),
            "head_branch": run.head_branch, "head_sha": run.head_sha, "path": path,
            "display_title": run.display_title, "run_number": run.id % 100_000, "event": run.event,
            "status": run.status, "conclusion": run.conclusion, "workflow_id": run.workflow_id,
            "check_suite_id": run.id + 1, "check_suite_node_id": format!("CS_{}", run.id + 1),
            "url": format!("{url}/actions/runs/{}", run.id), "html_url": html,
            "pull_requests": prs, "created_at": fmt_time(run.created_at),
            "updated_at": fmt_time(run.updated_at), "run_started_at": fmt_time(run.run_started_at),
            "actor": self.login_json(&run.actor), "triggering_actor": self.login_json(&run.triggering_actor),
            "run_attempt": run.run_attempt,
            "jobs_url": format!("{url}/actions/runs/{}/jobs", run.id),
            "logs_url": format!("{url}/actions/runs/{}/logs", run.id),
            "check_suite_url": format!("{url}/check-suites/{}", run.id + 1),
            "artifacts_url": format!("{url}/actions/runs/{}/artifacts", run.id),
            "cancel_url": format!("{url}/actions/runs/{}/cancel", run.id),
            "rerun_url": format!("{url}/actions/runs/{}/rerun", run.id),
            "workflow_url": format!("{url}/actions/workflows/{}", run.workflow_id),
            "head_commit": head_commit, "repository": self.minimal_repo_json(r),
            "head_repository": self.minimal_repo_json(r),
        })
    }

    /// The jobs GitHub lists for a run's latest attempt.
    pub fn jobs_json(&self, r: &Repo, run: &Run) -> Vec<Value> {
        if run.jobs.is_empty() {
            return vec![self.job_json(r, run)];
        }
        let url = self.repo_url(&r.owner, &r.name);
        run.jobs
            .iter()
            .map(|j| {
                // A run that ended (cancelled, say) ends its open jobs with it.
                let (status, conclusion, completed) = if j.status != "completed"
                    && run.status == "completed"
                {
                    ("completed", run.conclusion.clone(), Some(run.updated_at))
                } else {
                    (j.status.as_str(), j.conclusion.clone(), j.completed_at)
                };
                json!({
                    "id": j.id, "run_id": run.id, "run_url": format!("{url}/actions/runs/{}", run.id),
                    "run_attempt": run.run_attempt, "node_id": format!("J_{}", j.id),
                    "head_sha": run.head_sha, "head_branch": run.head_branch,
                    "url": format!("{url}/actions/jobs/{}", j.id),
                    "html_url": format!("{}/actions/runs/{}/job/{}", self.html_base(&url), run.id, j.id),
                    "status": status, "conclusion": conclusion,
                    "created_at": fmt_time(run.run_started_at), "started_at": fmt_time(j.started_at),
                    "completed_at": completed.map(fmt_time),
                    "name": j.name, "steps": [], "check_run_url": format!("{url}/check-runs/{}", j.id),
                    "labels": ["ubuntu-latest"], "runner_id": null, "runner_name": j.runner_name,
                    "runner_group_id": null, "runner_group_name": null, "workflow_name": run.name,
                })
            })
            .collect()
    }

    pub fn job_json(&self, r: &Repo, run: &Run) -> Value {
        let url = self.repo_url(&r.owner, &r.name);
        let completed = run.status == "completed";
        json!({
            "id": run.job_id, "run_id": run.id, "run_url": format!("{url}/actions/runs/{}", run.id),
            "run_attempt": run.run_attempt, "node_id": format!("J_{}", run.job_id),
            "head_sha": run.head_sha, "head_branch": run.head_branch,
            "url": format!("{url}/actions/jobs/{}", run.job_id),
            "html_url": format!("{}/actions/runs/{}/job/{}", self.html_base(&url), run.id, run.job_id),
            "status": run.status, "conclusion": run.conclusion,
            "created_at": fmt_time(run.created_at), "started_at": fmt_time(run.run_started_at),
            "completed_at": if completed { Some(fmt_time(run.updated_at)) } else { None },
            "name": run.name, "steps": [], "check_run_url": format!("{url}/check-runs/{}", run.job_id),
            "labels": ["ubuntu-latest"], "runner_id": null, "runner_name": null,
            "runner_group_id": null, "runner_group_name": null, "workflow_name": run.name,
        })
    }

    pub fn artifact_json(&self, r: &Repo, a: &Artifact) -> Value {
        let url = self.repo_url(&r.owner, &r.name);
        json!({
            "id": a.id, "node_id": format!("MDg6QXJ0aWZhY3Q{}", a.id), "name": a.name,
            "size_in_bytes": a.zip.len(), "url": format!("{url}/actions/artifacts/{}", a.id),
            "archive_download_url": format!("{url}/actions/artifacts/{}/zip", a.id),
            "expired": a.expired, "digest": format!("sha256:{}", hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&a.zip))),
            "created_at": fmt_time(a.created_at), "updated_at": fmt_time(a.created_at),
            "expires_at": fmt_time(a.created_at + chrono::Duration::days(90)),
            "workflow_run": {"id": a.run_id, "repository_id": r.id, "head_repository_id": r.id,
                             "head_branch": r.runs.get(&a.run_id).map(|x| x.head_branch.clone()),
                             "head_sha": r.runs.get(&a.run_id).map(|x| x.head_sha.clone())},
        })
    }
}
