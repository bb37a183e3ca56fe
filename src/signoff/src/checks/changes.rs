//! The checks of what the changed files do: upstream images, deprecated
//! settings, architecture hacks, chat templates and engine patches.

use super::*;

impl Context<'_> {
    pub(super) fn upstream_images(&self, n: u32, kind: CheckKind) -> CheckResult {
        if self.entries.is_empty() {
            return result(
                n,
                kind,
                Outcome::NotApplicable,
                "the PR changes no master-config entries.".into(),
            );
        }
        let mut problems = Vec::new();
        let mut evidence = Vec::new();
        let mut upstream_images = BTreeSet::new();
        let mut engine_first = Vec::new();
        for entry in &self.entries {
            let framework = entry.text("framework");
            let image = entry.text("image").replace('#', "/");
            let image = image
                .strip_prefix("docker.io/")
                .unwrap_or(&image)
                .to_owned();
            let hw = hardware(entry.text("runner"));
            evidence.push(format!(
                "{}: framework {framework}, runner {}, image {image}",
                entry.name(),
                entry.text("runner")
            ));
            let upstream_org = match framework {
                "vllm" => Some("vllm/"),
                "sglang" => Some("lmsysorg/"),
                _ => None,
            };
            if let Some(org) = upstream_org {
                if image.starts_with(org) {
                    upstream_images.insert(image.clone());
                } else if ESTABLISHED_HARDWARE.contains(&hw.as_str()) {
                    problems.push(format!("{} runs {image}, not an upstream {org} image, on established hardware {hw}", entry.key));
                }
                continue;
            }
            if image.starts_with("vllm/") || image.starts_with("lmsysorg/") {
                upstream_images.insert(image.clone());
            }
            let prefix = entry.text("model-prefix");
            let first = self.all_head_entries.iter().find(|(_, _, v)| {
                let text = |f: &str| v.get(f).and_then(Value::as_str).unwrap_or("");
                matches!(text("framework"), "vllm" | "sglang")
                    && text("model-prefix") == prefix
                    && hardware(text("runner")) == hw
            });
            match first {
                Some((file, key, _)) => engine_first.push(format!("{key} in {file}")),
                None => problems.push(format!(
                    "{} ({framework}) has no vLLM or SGLang entry for {prefix} on {hw} yet",
                    entry.key
                )),
            }
        }
        if !problems.is_empty() {
            let (outcome, lead) = if self.claims_exception() {
                (
                    Outcome::Warn,
                    "Needs a reviewer: the sign-off claims an exception for",
                )
            } else {
                (Outcome::Fail, "No documented exception for")
            };
            return with(
                result(n, kind, outcome, format!("{lead} {}.", problems.join("; "))),
                evidence,
            );
        }
        let images = if upstream_images.is_empty() {
            "no vLLM/SGLang images".to_owned()
        } else {
            format!(
                "upstream images {}",
                upstream_images.into_iter().collect::<Vec<_>>().join(", ")
            )
        };
        engine_first.dedup();
        let order = if engine_first.is_empty() {
            String::new()
        } else {
            format!(
                "; vLLM/SGLang-first is satisfied by {}",
                engine_first.join(", ")
            )
        };
        with(
            result(
                n,
                kind,
                Outcome::Pass,
                format!("changed master-config entries use {images}{order}."),
            ),
            evidence,
        )
    }

    pub(super) fn deprecated(&self, n: u32, kind: CheckKind) -> CheckResult {
        if self.entries.is_empty() {
            return result(
                n,
                kind,
                Outcome::NotApplicable,
                "the PR changes no master-config entries.".into(),
            );
        }
        let Some(models_md) = &self.evidence.default_branch.models_md else {
            return result(
                n,
                kind,
                Outcome::Warn,
                "Needs a reviewer: MODELS.md is not on the default branch.".into(),
            );
        };
        let retired = klaud_planner::retired::parse_models_md(models_md);
        let mut problems = Vec::new();
        for entry in &self.entries {
            let prefix = entry.text("model-prefix");
            if let Some(reason) = retired.models.get(prefix) {
                problems.push(format!(
                    "{} submits deprecated model {prefix} ({reason})",
                    entry.key
                ));
            }
            let fixed = entry
                .head
                .get("scenarios")
                .and_then(|s| s.get("fixed-seq-len"))
                .and_then(Value::as_array);
            for scenario in fixed.into_iter().flatten() {
                let isl = scenario.get("isl").and_then(Value::as_u64);
                let osl = scenario.get("osl").and_then(Value::as_u64);
                if let (Some(isl), Some(osl)) = (isl, osl)
                    && let Some(reason) = retired.scenarios.get(&(isl, osl))
                {
                    problems.push(format!(
                        "{} submits deprecated scenario {isl}/{osl} ({reason})",
                        entry.key
                    ));
                }
            }
        }
        if problems.is_empty() {
            let keys = self
                .entries
                .iter()
                .map(|e| e.key.clone())
                .collect::<Vec<_>>();
            with(
                result(
                    n,
                    kind,
                    Outcome::Pass,
                    "no changed entry submits a model or scenario MODELS.md deprecates.".into(),
                ),
                keys,
            )
        } else {
            with(
                result(n, kind, Outcome::Fail, format!("{}.", problems.join("; "))),
                problems.clone(),
            )
        }
    }

    pub(super) fn scan_added(&self, pattern: &Regex) -> Vec<String> {
        let mut found = Vec::new();
        for file in &self.evidence.changed_files {
            for line in file.added_lines() {
                if let Some(m) = pattern.find(line) {
                    found.push(format!("{}: {}", file.path, m.as_str()));
                }
            }
        }
        found.dedup();
        found
    }

    pub(super) fn architecture_hacks(&self, n: u32, kind: CheckKind) -> CheckResult {
        static HACK: LazyLock<Regex> = LazyLock::new(|| {
            Regex::new(r"--hf-overrides|hf_overrides|--json-model-override-args|json_model_override_args|--override-generation-config")
                .expect("regex")
        });
        static NO_METRICS: LazyLock<Regex> =
            LazyLock::new(|| Regex::new(r"publish_events_and_metrics\s*:\s*false").expect("regex"));
        if !self.touches_benchmarks() {
            return result(
                n,
                kind,
                Outcome::NotApplicable,
                "the PR touches no server args.".into(),
            );
        }
        let mut found = self.scan_added(&HACK);
        if self.version == ContractVersion::Checks0To15 {
            found.extend(self.scan_added(&NO_METRICS));
        }
        if found.is_empty() {
            return result(
                n,
                kind,
                Outcome::Pass,
                "no --hf-overrides, --json-model-override-args or other named architecture overrides in the diff.".into(),
            );
        }
        with(
            result(
                n,
                kind,
                Outcome::Fail,
                format!("Architecture override in the diff: {}.", found.join("; ")),
            ),
            found,
        )
    }

    pub(super) fn spec_decode_changes(&self) -> Vec<String> {
        static SPEC: LazyLock<Regex> = LazyLock::new(|| {
            Regex::new(r"--speculative-config|--speculative-algorithm|speculative_config|spec-decoding:\s*(?:mtp|eagle|draft)")
                .expect("regex")
        });
        let mut found: Vec<String> = self
            .entries
            .iter()
            .filter(|e| e.is_spec_decode())
            .map(ChangedEntry::name)
            .collect();
        found.extend(self.scan_added(&SPEC));
        found
    }

    pub(super) fn chat_templates(&self, n: u32, kind: CheckKind) -> CheckResult {
        static CHAT: LazyLock<Regex> = LazyLock::new(|| {
            Regex::new(r"--use-chat-template|openai-chat|chat/completions|--backend[ =]+(?:vllm-chat|sglang-oai-chat)|apply_chat_template")
                .expect("regex")
        });
        let spec = self.spec_decode_changes();
        if spec.is_empty() {
            return result(
                n,
                kind,
                Outcome::NotApplicable,
                "no speculative-decoding changes in this PR.".into(),
            );
        }
        let chat: Vec<String> = self
            .evidence
            .changed_files
            .iter()
            .filter(|f| f.head_text.as_deref().is_some_and(|t| CHAT.is_match(t)))
            .map(|f| f.path.clone())
            .collect();
        let mut evidence = spec.clone();
        evidence.extend(chat.iter().map(|p| format!("chat template: {p}")));
        if chat.is_empty() {
            return with(
                result(
                    n,
                    kind,
                    Outcome::Warn,
                    format!(
                        "Needs a reviewer: speculative decoding changes ({}) with no chat-template client flag in the changed scripts.",
                        spec.join(", ")
                    ),
                ),
                evidence,
            );
        }
        with(
            result(
                n,
                kind,
                Outcome::Pass,
                format!(
                    "the spec-decode benchmark drives the chat template ({}).",
                    chat.join(", ")
                ),
            ),
            evidence,
        )
    }

    pub(super) fn engine_patches(&self, n: u32, kind: CheckKind) -> CheckResult {
        static PATCH: LazyLock<Regex> = LazyLock::new(|| {
            Regex::new(concat!(
                r"git apply|\bpatch\s+-p\d|sed -i\b.*(?:site-packages|/sgl-workspace|vllm/|sglang/)",
                r"|site-packages|importlib\.util\.find_spec|/sgl-workspace|sitecustomize",
                r"|pip3? install\b.*\b(?:vllm|sglang|tensorrt[_-]llm|flashinfer)\b"
            ))
            .expect("regex")
        });
        if !self.touches_benchmarks() {
            return result(
                n,
                kind,
                Outcome::NotApplicable,
                "the PR touches no benchmark scripts, images or configs.".into(),
            );
        }
        let mut found = self.scan_added(&PATCH);
        found.extend(
            self.evidence
                .changed_files
                .iter()
                .filter(|f| {
                    f.status != "removed"
                        && (f.path.ends_with(".patch") || f.path.ends_with(".diff"))
                })
                .map(|f| format!("{}: patch file", f.path)),
        );
        if found.is_empty() {
            return result(
                n,
                kind,
                Outcome::Pass,
                "no .patch files, git apply, site-packages edits, sed/heredoc engine rewrites or engine wheel installs in the diff.".into(),
            );
        }
        let waiver_path = format!("docs/waiver/{}.md", self.evidence.pull.number);
        let waiver = self
            .evidence
            .changed_files
            .iter()
            .find(|f| f.path == waiver_path && f.status != "removed");
        let linked = self.detail.contains(&waiver_path);
        let mut evidence = found.clone();
        match waiver {
            None => with(
                result(
                    n,
                    kind,
                    Outcome::Fail,
                    format!(
                        "Engine patching without a waiver: {}; this PR adds no {waiver_path}.",
                        found.join("; ")
                    ),
                ),
                evidence,
            ),
            Some(_) if !linked => with(
                result(
                    n,
                    kind,
                    Outcome::Fail,
                    format!(
                        "Engine patching ({}) has {waiver_path}, but the sign-off does not link it.",
                        found.join("; ")
                    ),
                ),
                evidence,
            ),
            Some(file) => {
                let text = file.head_text.as_deref().unwrap_or("");
                let filled = text.contains("http") && text.trim().len() > 200;
                evidence.push(format!(
                    "waiver {waiver_path} added in this PR and linked in the sign-off"
                ));
                if filled {
                    with(
                        result(
                            n,
                            kind,
                            Outcome::Pass,
                            format!(
                                "patching ({}) is covered by {waiver_path}, added in this PR and linked in the sign-off.",
                                found.join("; ")
                            ),
                        ),
                        evidence,
                    )
                } else {
                    with(
                        result(
                            n,
                            kind,
                            Outcome::Fail,
                            format!(
                                "{waiver_path} is not filled out (no upstream link or too short) for {}.",
                                found.join("; ")
                            ),
                        ),
                        evidence,
                    )
                }
            }
        }
    }
}
