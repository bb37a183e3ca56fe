//! The forge's GitHub Actions side: workflow dispatch, runs, jobs,
//! artifacts, compares and the rate limit.

use super::*;

impl Github {
    /// Dispatches a workflow. Asks for `return_run_details`; a server that
    /// rejects the parameter is asked again without it (then `run_id` is
    /// `None`: find the run by title). An ambiguous failure is returned as
    /// is — the caller must search for the run before dispatching again.
    pub(crate) async fn dispatch_workflow(
        &self,
        workflow: &str,
        git_ref: &str,
        inputs: &Value,
    ) -> Result<DispatchOutcome, GithubError> {
        #[derive(Deserialize)]
        struct Details {
            workflow_run_id: u64,
            #[serde(default)]
            html_url: Option<String>,
        }
        let what = format!("dispatch {workflow} on {git_ref}");
        let path = self.path(&format!("actions/workflows/{}/dispatches", seg(workflow)));
        let with = json!({"ref": git_ref, "inputs": inputs, "return_run_details": true});
        let raw = self
            .t
            .write(&what, Method::POST, &path, Some(&with))
            .await?;
        let raw = if matches!(raw.status.as_u16(), 400 | 422)
            && raw.message().contains("return_run_details")
        {
            let without = json!({"ref": git_ref, "inputs": inputs});
            self.t
                .write(&what, Method::POST, &path, Some(&without))
                .await?
        } else {
            raw
        };
        ok_or_error(&what, &raw)?;
        if raw.status == http::StatusCode::NO_CONTENT || raw.body.is_empty() {
            return Ok(DispatchOutcome {
                run_id: None,
                html_url: None,
            });
        }
        let d: Details = raw.json(&what)?;
        Ok(DispatchOutcome {
            run_id: Some(d.workflow_run_id),
            html_url: d.html_url,
        })
    }

    /// A workflow by file name (or id); `None` when the repository has no
    /// such workflow.
    pub fn get_workflow<'f>(
        &'f self,
        workflow: &'f str,
    ) -> BoxFuture<'f, Result<Option<WorkflowInfo>, GithubError>> {
        Box::pin(async move {
            let what = format!("read workflow {workflow}");
            let path = self.path(&format!("actions/workflows/{}", seg(workflow)));
            self.t
                .read_found(&what, &path)
                .await?
                .map(|raw| raw.json(&what))
                .transpose()
        })
    }

    /// The REST (`core`) budget from `GET /rate_limit`, which GitHub does
    /// not count against it; `None` when the server has rate limiting
    /// turned off (GitHub Enterprise answers 404 then).
    pub fn rate_limit<'f>(
        &'f self,
    ) -> BoxFuture<'f, Result<Option<crate::RateBudget>, GithubError>> {
        Box::pin(async move {
            #[derive(Deserialize)]
            struct Window {
                limit: u64,
                remaining: u64,
                #[serde(default)]
                used: Option<u64>,
                #[serde(default)]
                reset: i64,
            }
            #[derive(Deserialize)]
            struct Resources {
                core: Window,
            }
            #[derive(Deserialize)]
            struct RateLimit {
                resources: Resources,
            }
            let what = "read the rate limit (GET /rate_limit)";
            let Some(raw) = self.t.read_found(what, "/rate_limit").await? else {
                return Ok(None);
            };
            let core = raw.json::<RateLimit>(what)?.resources.core;
            Ok(Some(crate::RateBudget {
                limit: core.limit,
                remaining: core.remaining,
                used: core
                    .used
                    .unwrap_or(core.limit.saturating_sub(core.remaining)),
                reset_unix: core.reset,
                resource: "core".into(),
            }))
        })
    }

    /// The runs listing's path for `filter` (100 a page); its `created`
    /// qualifier only when `with_created`.
    fn runs_path(&self, filter: &RunFilter, with_created: bool) -> String {
        let mut q: Vec<(&str, &str)> = vec![("per_page", "100")];
        for (k, v) in [
            ("event", &filter.event),
            ("actor", &filter.actor),
            ("branch", &filter.branch),
            ("status", &filter.status),
            ("head_sha", &filter.head_sha),
            ("created", &filter.created),
        ] {
            if let Some(v) = v
                && (with_created || k != "created")
            {
                q.push((k, v));
            }
        }
        let base = match &filter.workflow {
            Some(w) => format!("actions/workflows/{}/runs", seg(w)),
            None => "actions/runs".to_string(),
        };
        self.path(&format!("{base}?{}", query(&q)))
    }

    /// Workflow runs matching the filter, newest first (all pages).
    pub fn list_runs<'f>(
        &'f self,
        filter: &'f RunFilter,
    ) -> BoxFuture<'f, Result<Vec<RunInfo>, GithubError>> {
        Box::pin(async move {
            let p = self.runs_path(filter, true);
            let runs: Vec<RawRun> = self
                .t
                .get_all("list workflow runs", &p, Some("workflow_runs"))
                .await?;
            Ok(runs.into_iter().map(RunInfo::from).collect())
        })
    }

    /// The newest runs matching the filter (its `created` is not used), at
    /// most `max_pages` pages of 100, stopping at the first page that
    /// reaches a run created before `since`: each page is a conditional
    /// read, so a list that has not changed costs one free 304.
    pub fn recent_runs<'f>(
        &'f self,
        filter: &'f RunFilter,
        since: chrono::DateTime<chrono::Utc>,
        max_pages: usize,
    ) -> BoxFuture<'f, Result<Vec<RunInfo>, GithubError>> {
        Box::pin(async move {
            let p = self.runs_path(filter, false);
            let older = |r: &RawRun| {
                r.created_at
                    .as_deref()
                    .and_then(|c| chrono::DateTime::parse_from_rfc3339(c).ok())
                    .is_some_and(|c| c < since)
            };
            let runs: Vec<RawRun> = self
                .t
                .get_pages(
                    "list recent workflow runs",
                    &p,
                    Some("workflow_runs"),
                    max_pages.max(1),
                    &|so_far: &[RawRun]| so_far.last().is_some_and(older),
                )
                .await?;
            Ok(runs.into_iter().map(RunInfo::from).collect())
        })
    }

    /// One run (conditional GET: polling costs no budget while unchanged).
    pub fn get_run<'f>(&'f self, id: u64) -> BoxFuture<'f, Result<RunInfo, GithubError>> {
        Box::pin(async move {
            let what = format!("read workflow run {id}");
            let r: RawRun = self
                .t
                .get_json_cached(&what, &self.path(&format!("actions/runs/{id}")))
                .await?;
            Ok(r.into())
        })
    }

    /// Cancels a run; a run that already completed counts as done.
    pub(crate) async fn cancel_run(&self, id: u64) -> Result<(), GithubError> {
        let what = format!("cancel workflow run {id}");
        let path = self.path(&format!("actions/runs/{id}/cancel"));
        match self.t.write(&what, Method::POST, &path, None).await {
            Ok(raw) if raw.status == http::StatusCode::CONFLICT => Ok(()),
            Ok(raw) => ok_or_error(&what, &raw),
            Err(GithubError::Ambiguous { detail, .. }) => {
                let run = self.get_run(id).await?;
                if run.status.as_ref().is_some_and(RunStatus::is_completed) {
                    return Ok(());
                }
                let raw = self
                    .t
                    .write(&what, Method::POST, &path, None)
                    .await
                    .map_err(|_| GithubError::Ambiguous {
                        what: what.clone(),
                        detail,
                    })?;
                if raw.status == http::StatusCode::CONFLICT {
                    return Ok(());
                }
                ok_or_error(&what, &raw)
            }
            Err(e) => Err(e),
        }
    }

    /// Artifacts of a run.
    pub fn list_artifacts<'f>(
        &'f self,
        run_id: u64,
    ) -> BoxFuture<'f, Result<Vec<Artifact>, GithubError>> {
        Box::pin(async move {
            let p = self.path(&format!("actions/runs/{run_id}/artifacts?per_page=100"));
            self.t
                .get_all(
                    &format!("list artifacts of run {run_id}"),
                    &p,
                    Some("artifacts"),
                )
                .await
        })
    }

    /// An artifact's zip bytes (GitHub redirects to a signed URL; octocrab
    /// follows it without sending the token to the other host).
    pub fn download_artifact<'f>(&'f self, id: u64) -> BoxFuture<'f, Result<Vec<u8>, GithubError>> {
        Box::pin(async move {
            let what = format!("download artifact {id}");
            // An artifact never changes once uploaded (GitHub gives a re-upload
            // a new id), so every report step after the first reads it from
            // memory instead of asking for a new signed URL.
            match self
                .t
                .read_immutable(&what, &self.path(&format!("actions/artifacts/{id}/zip")))
                .await?
            {
                Some(body) => Ok(body.to_vec()),
                None => Err(GithubError::NotFound { what }),
            }
        })
    }

    /// Compares two commits or branches.
    pub fn compare<'f>(
        &'f self,
        base: &'f str,
        head: &'f str,
    ) -> BoxFuture<'f, Result<Comparison, GithubError>> {
        Box::pin(async move {
            let what = format!("compare {base}...{head}");
            let p = self.path(&format!("compare/{}...{}?per_page=1", seg(base), seg(head)));
            self.t.get_json(&what, &p).await
        })
    }

    /// Compares two commits with the commits and files between them.
    pub fn compare_detail<'f>(
        &'f self,
        base: &'f str,
        head: &'f str,
    ) -> BoxFuture<'f, Result<CompareDetail, GithubError>> {
        Box::pin(async move {
            let what = format!("compare {base}...{head}");
            let p = self.path(&format!("compare/{}...{}", seg(base), seg(head)));
            // Between two commit shas the answer is fixed by the commits
            // themselves: asked once per process (a repair's report and
            // the steps around it compare the same two heads).
            if is_full_sha(base) && is_full_sha(head) {
                return self.t.get_json_immutable(&what, &p).await;
            }
            self.t.get_json(&what, &p).await
        })
    }

    /// The compare `base...head` with its changed files and their patches.
    /// Only the first page is read: GitHub puts the file list there and
    /// nowhere else (later pages carry only commits).
    pub fn compare_files<'f>(
        &'f self,
        base: &'f str,
        head: &'f str,
    ) -> BoxFuture<'f, Result<ComparisonFiles, GithubError>> {
        Box::pin(async move {
            let what = format!("compare {base}...{head} with files");
            let p = self.path(&format!(
                "compare/{}...{}?per_page=100&page=1",
                seg(base),
                seg(head)
            ));
            self.t.get_json(&what, &p).await
        })
    }

    /// Up to `limit` (at most 100: one page) commits reachable from `sha`
    /// that touch `path`, newest first (`GET commits?sha=&path=`).
    pub fn commits_touching<'f>(
        &'f self,
        path: &'f str,
        sha: &'f str,
        limit: usize,
    ) -> BoxFuture<'f, Result<Vec<String>, GithubError>> {
        Box::pin(async move {
            let what = format!("list commits touching {path}");
            let per_page = limit.clamp(1, 100).to_string();
            let p = self.path(&format!(
                "commits?{}",
                query(&[("sha", sha), ("path", path), ("per_page", &per_page)])
            ));
            let list: Vec<ShaOnly> = self.t.get_json(&what, &p).await?;
            Ok(list.into_iter().map(|c| c.sha).collect())
        })
    }

    /// The files one commit changes, with their patches (first page).
    pub fn commit_files<'f>(
        &'f self,
        sha: &'f str,
    ) -> BoxFuture<'f, Result<Vec<klaud_planner::audit::ChangedFile>, GithubError>> {
        Box::pin(async move {
            let what = format!("get commit {sha}");
            let p = self.path(&format!("commits/{}", seg(sha)));
            // A commit never changes: cached by its sha.
            let c: CommitFiles = self.t.get_json_immutable(&what, &p).await?;
            Ok(c.files)
        })
    }

    /// Jobs of a run's latest attempt.
    pub fn list_jobs<'f>(
        &'f self,
        run_id: u64,
    ) -> BoxFuture<'f, Result<Vec<JobInfo>, GithubError>> {
        Box::pin(async move {
            let p = self.path(&format!("actions/runs/{run_id}/jobs?per_page=100"));
            self.t
                .get_all(&format!("list jobs of run {run_id}"), &p, Some("jobs"))
                .await
        })
    }

    /// A job's plain-text log (GitHub answers 302 to a short-lived URL;
    /// octocrab follows it without sending the token to the other host).
    /// Read once per failed job: only its first and last bytes, `limit` in
    /// all, are ever held (the middle of a long log is left out while it
    /// streams in, with a line saying how much), and nothing is kept.
    pub fn job_log<'f>(
        &'f self,
        job_id: u64,
        limit: usize,
    ) -> BoxFuture<'f, Result<Vec<u8>, GithubError>> {
        Box::pin(async move {
            let what = format!("read the log of job {job_id}");
            let path = self.path(&format!("actions/jobs/{job_id}/logs"));
            match self.t.read_head_tail(&what, &path, limit).await? {
                Some(body) => Ok(body.to_vec()),
                None => Err(GithubError::NotFound { what }),
            }
        })
    }

    /// Re-runs a completed run. After an ambiguous failure the run is
    /// re-read: a higher attempt than before means the re-run was accepted.
    pub(crate) async fn rerun_run(&self, id: u64) -> Result<(), GithubError> {
        let what = format!("re-run workflow run {id}");
        let before = self.get_run(id).await?.run_attempt;
        let path = self.path(&format!("actions/runs/{id}/rerun"));
        match self.t.write(&what, Method::POST, &path, None).await {
            Ok(raw) => ok_or_error(&what, &raw),
            Err(GithubError::Ambiguous { detail, .. }) => {
                if self.get_run(id).await?.run_attempt > before {
                    Ok(())
                } else {
                    Err(GithubError::Ambiguous { what, detail })
                }
            }
            Err(e) => Err(e),
        }
    }
}

/// Whether `name` is a whole commit sha (40 or 64 hex digits), not a
/// branch or an abbreviation whose meaning can change.
fn is_full_sha(name: &str) -> bool {
    matches!(name.len(), 40 | 64) && name.bytes().all(|b| b.is_ascii_hexdigit())
}
