//! The checks of what the sign-off and the pull request state: the upstream
//! recipe link, the reuse command and the checklist's version.

use super::*;

impl Context<'_> {
    pub(super) fn recipe_link(&self, n: u32, kind: CheckKind) -> CheckResult {
        let all_topologies = self.version.recipe_covers_all_topologies();
        let scope_files: Vec<&str> = self
            .changed_paths()
            .into_iter()
            .filter(|p| {
                p.starts_with("benchmarks/single_node/")
                    || (all_topologies && p.starts_with("benchmarks/multi_node/"))
            })
            .collect();
        let scope_entries: Vec<String> = self
            .entries
            .iter()
            .filter(|e| {
                if all_topologies {
                    // Dynamo and disaggregated serving are deployments of
                    // the engine: they need its recipe coverage too.
                    let framework = e.text("framework").to_ascii_lowercase();
                    framework.contains("vllm") || framework.contains("sglang")
                } else {
                    !e.flag("multinode")
                }
            })
            .map(ChangedEntry::name)
            .collect();
        if scope_files.is_empty() && scope_entries.is_empty() {
            return result(
                n,
                kind,
                Outcome::NotApplicable,
                self.recipe_not_applicable(),
            );
        }
        let mut evidence: Vec<String> = scope_files.iter().map(|p| (*p).to_owned()).collect();
        evidence.extend(scope_entries);
        let links = recipe_links(&self.detail);
        let Some(first) = links.first() else {
            let scope = if all_topologies {
                "the affected vLLM/SGLang serving configurations"
            } else {
                "the single-node recipes"
            };
            return with(
                result(
                    n,
                    kind,
                    Outcome::Fail,
                    format!(
                        "No upstream recipe link (vllm-project/recipes, sgl-project/sglang cookbook, recipes.vllm.ai, docs.sglang.io) in the additional detail section for {scope}."
                    ),
                ),
                evidence,
            );
        };
        if !self.version.recipe_must_be_merged() {
            evidence.push(first.clone());
            return with(
                result(
                    n,
                    kind,
                    Outcome::Warn,
                    format!(
                        "Needs a reviewer: confirm the linked recipe {first} matches the major server args."
                    ),
                ),
                evidence,
            );
        }
        // The contract requires the upstream change MERGED (a linked pull
        // request's state read from GitHub) or a published recipe page.
        let mut covering = Vec::new();
        let mut problems = Vec::new();
        for link in &links {
            if let Some((repo, number)) = recipe_pull(link) {
                match self.evidence.recipe_pulls.get(link) {
                    Some(Ok(pull)) => match &pull.merged_at {
                        Some(at) => {
                            evidence.push(format!("{repo}#{number}: merged at {at}"));
                            covering.push(link.clone());
                        }
                        None => {
                            let state = if pull.draft && pull.state == "open" {
                                "a draft".to_owned()
                            } else if pull.state == "open" {
                                "open".to_owned()
                            } else {
                                "closed without merging".to_owned()
                            };
                            evidence.push(format!("{repo}#{number}: {state}, not merged"));
                            problems.push(format!("{repo}#{number} is {state}, not merged"));
                        }
                    },
                    Some(Err(why)) => {
                        evidence.push(format!("{repo}#{number}: {why}"));
                        problems.push(format!(
                            "the merge state of {repo}#{number} cannot be verified ({why})"
                        ));
                    }
                    None => {
                        problems.push(format!("the merge state of {repo}#{number} was not read"))
                    }
                }
            } else if link.starts_with("https://recipes.vllm.ai")
                || link.starts_with("https://docs.sglang.io/cookbook")
            {
                evidence.push(format!("{link}: published recipe page"));
                covering.push(link.clone());
            } else {
                evidence.push(format!("{link}: not a pull request or published page"));
                problems.push(format!(
                    "{link} is a bare branch, file or commit, which does not establish a merged recipe"
                ));
            }
        }
        if covering.is_empty() {
            return with(
                result(
                    n,
                    kind,
                    Outcome::Fail,
                    format!("No merged upstream recipe: {}.", problems.join("; ")),
                ),
                evidence,
            );
        }
        with(
            result(
                n,
                kind,
                Outcome::Warn,
                format!(
                    "Needs a reviewer: {} is merged upstream; confirm it matches the {}.",
                    covering.join(", "),
                    if all_topologies {
                        "production-useful settings and launch commands of every affected role"
                    } else {
                        "major server args"
                    }
                ),
            ),
            evidence,
        )
    }

    pub(super) fn recipe_not_applicable(&self) -> String {
        if self.version.recipe_covers_all_topologies() {
            return "no vLLM/SGLang production serving configuration is affected (no changed vLLM/SGLang master-config entry or benchmark script).".to_owned();
        }
        let multi = self
            .changed_paths()
            .iter()
            .any(|p| p.starts_with("benchmarks/multi_node/"))
            || self.entries.iter().any(|e| e.flag("multinode"));
        if !multi {
            return "no single-node recipe changes in this PR.".to_owned();
        }
        let mut marks = Vec::new();
        if self
            .changed_paths()
            .iter()
            .any(|p| p.contains("srt-slurm-recipes/"))
        {
            marks.push("srt-slurm-recipes/**");
        }
        if self.entries.iter().any(|e| e.flag("multinode")) {
            marks.push("multinode: true");
        }
        if self.entries.iter().any(|e| e.flag("disagg")) {
            marks.push("disagg: true");
        }
        format!(
            "disaggregated/multi-node submission ({}); the recipe-link requirement applies to single-node recipes only.",
            marks.join(", ")
        )
    }

    pub(super) fn reuse_command(&self, n: u32, kind: CheckKind) -> CheckResult {
        static COMMAND: LazyLock<Regex> = LazyLock::new(|| {
            Regex::new(r"(?m)^\s*(/reuse-sweep-run|/use)(?:[ \t]+(\d{1,20}))?[ \t]*$")
                .expect("regex")
        });
        let newer = self.version.reuse_is_advisory();
        let mut unauthorized = Vec::new();
        for comment in self.evidence.comments.iter().rev() {
            for caps in COMMAND.captures_iter(&comment.body) {
                if &caps[1] == "/use" && !newer {
                    continue;
                }
                if &caps[1] == "/use" && caps.get(2).is_none() {
                    continue;
                }
                let command = match caps.get(2) {
                    Some(id) => format!("{} {}", &caps[1], id.as_str()),
                    None => caps[1].to_owned(),
                };
                if matches!(
                    comment.author_association.as_str(),
                    "OWNER" | "MEMBER" | "COLLABORATOR"
                ) {
                    return with(
                        result(
                            n,
                            kind,
                            Outcome::Pass,
                            format!(
                                "{command} posted by {} ({}).",
                                comment.login, comment.author_association
                            ),
                        ),
                        vec![format!(
                            "{command} by {} {}",
                            comment.login, comment.author_association
                        )],
                    );
                }
                unauthorized.push(format!(
                    "{command} by {} ({})",
                    comment.login, comment.author_association
                ));
            }
        }
        let outcome = if newer { Outcome::Warn } else { Outcome::Fail };
        let reminder = if newer {
            "an authorized maintainer should comment /use <run_id>"
        } else {
            "an authorized maintainer must comment /reuse-sweep-run before this PR can be merged via reuse"
        };
        with(
            result(
                n,
                kind,
                outcome,
                format!("No authorized reuse command has been posted on this PR; {reminder}."),
            ),
            unauthorized,
        )
    }

    pub(super) fn latest_checklist(&self, n: u32, kind: CheckKind) -> CheckResult {
        let signed = checklist::signoff_items(&self.evidence.signoff.body);
        let comparison = checklist::compare(&self.template, &signed);
        if comparison.complete() {
            return with(
                result(
                    n,
                    kind,
                    Outcome::Pass,
                    format!(
                        "sign-off matches the current docs/PR_REVIEW_CHECKLIST.md item-for-item ({} items), all items checked.",
                        comparison.template_count
                    ),
                ),
                vec![format!(
                    "{} template items, {} sign-off items",
                    comparison.template_count, comparison.signoff_count
                )],
            );
        }
        let clip = |t: &String| {
            let cut: String = t.chars().take(70).collect();
            if cut.len() < t.len() {
                format!("\"{cut}…\"")
            } else {
                format!("\"{cut}\"")
            }
        };
        let mut parts = Vec::new();
        if comparison.template_count == 0 {
            parts.push("the default branch's template has no checklist items".to_owned());
        }
        if !comparison.missing.is_empty() {
            parts.push(format!(
                "missing current-template items {}",
                comparison
                    .missing
                    .iter()
                    .map(clip)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if !comparison.unchecked.is_empty() {
            parts.push(format!(
                "unchecked items {}",
                comparison
                    .unchecked
                    .iter()
                    .map(clip)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let mut evidence = comparison
            .missing
            .iter()
            .map(|t| format!("missing: {t}"))
            .collect::<Vec<_>>();
        evidence.extend(
            comparison
                .unchecked
                .iter()
                .map(|t| format!("unchecked: {t}")),
        );
        with(
            result(
                n,
                kind,
                Outcome::Fail,
                format!(
                    "Stale or incomplete checklist: {}; use the current docs/PR_REVIEW_CHECKLIST.md.",
                    parts.join("; ")
                ),
            ),
            evidence,
        )
    }

    pub(super) fn claims_exception(&self) -> bool {
        let detail = self.detail.to_lowercase();
        detail.contains("new hardware")
            || detail.contains("new model architecture")
            || detail.contains("exception")
    }
}
