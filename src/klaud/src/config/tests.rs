use super::*;

#[test]
fn repair_timeout_is_configurable_and_kept_below_the_lease() {
    let config = Config::parse("t.toml", "[lifecycle]\nrepair_timeout = \"30m\"\n").unwrap();
    assert_eq!(config.lifecycle.repair_timeout, Duration::from_secs(1800));
    assert!(Config::default().lifecycle.repair_timeout < Config::default().daemon.lease);
    let err = Config::parse(
            "t.toml",
            "[daemon]\nlease = \"1h\"\n[lifecycle]\nrepair_command = [\"fix\"]\nrepair_timeout = \"1h\"\n",
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("lifecycle.repair_timeout"), "{err}");
    assert!(err.contains("daemon.lease"), "{err}");
}

#[test]
fn the_playbook_path_stays_inside_the_repository() {
    assert_eq!(
        Config::default().lifecycle.playbook,
        ".github/klaud-playbook.yaml"
    );
    for ok in ["", "ops/playbook.yaml", ".github/klaud-playbook.yaml"] {
        let text = format!("[lifecycle]\nplaybook = {ok:?}\n");
        assert_eq!(
            Config::parse("t.toml", &text).unwrap().lifecycle.playbook,
            ok
        );
    }
    for bad in ["/etc/passwd", "../x.yaml", "a//b.yaml", "a/./b", "a\\b"] {
        let text = format!("[lifecycle]\nplaybook = {bad:?}\n");
        let err = Config::parse("t.toml", &text).unwrap_err().to_string();
        assert!(err.contains("lifecycle.playbook"), "{bad}: {err}");
    }
}

#[test]
fn hunt_is_off_by_default_and_its_keys_are_checked() {
    let absent = Config::parse("t.toml", "").unwrap();
    assert_eq!(
        absent.hunt.settings(),
        klaud_lifecycle::hunt::HuntSettings::default()
    );
    assert!(!absent.hunt.enabled);
    let on = Config::parse(
            "t.toml",
            "[hunt]\nenabled = true\nfamilies = [\"*-nightly\"]\nbudget = 5\nweekly_budget = 20\nnoise_band = 0.08\n",
        )
        .unwrap();
    let s = on.hunt.settings();
    assert!(s.applies("configs/x-master.yaml:dsr1-nightly"));
    assert!(!s.applies("configs/x-master.yaml:dsr1"));
    assert_eq!((s.budget, s.weekly_budget, s.noise_band), (5, 20, 0.08));
    for (text, key) in [
        ("[hunt]\nbudget = 0\n", "hunt.budget"),
        ("[hunt]\nbudget = 17\nweekly_budget = 40\n", "hunt.budget"),
        (
            "[hunt]\nbudget = 6\nweekly_budget = 5\n",
            "hunt.weekly_budget",
        ),
        ("[hunt]\nnoise_band = 5\n", "hunt.noise_band"),
        ("[hunt]\nnoise_band = 0.0\n", "hunt.noise_band"),
        ("[hunt]\nfamilies = [\" \"]\n", "hunt.families"),
    ] {
        let err = Config::parse("t.toml", text).unwrap_err().to_string();
        assert!(err.contains(key), "{text:?}: {err}");
    }
    let err = Config::parse("t.toml", "[hunt]\nbudgt = 3\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("budgt"), "{err}");
}

#[test]
fn audit_defaults_and_its_limits_are_checked() {
    let absent = Config::parse("t.toml", "").unwrap();
    assert!(absent.audit.enabled);
    assert_eq!(absent.audit.max_files, 300);
    assert_eq!(absent.audit.max_commit_lookups, 10);
    assert_eq!(
        absent.audit.engines,
        klaud_planner::audit::default_engines()
    );
    let err = Config::parse("t.toml", "[audit]\nmax_files = 301\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("audit.max_files"), "{err}");
    let bad = "[[audit.engines]]\nrepository = \"a/b\"\n[[audit.engines.rules]]\nkind = \"flag\"\nfiles = [\"x.py\"]\npattern = \"(\"\n";
    let err = Config::parse("t.toml", bad).unwrap_err().to_string();
    assert!(
        err.contains("audit.engines") && err.contains("a/b"),
        "{err}"
    );
    let off = Config::parse("t.toml", "[audit]\nenabled = false\n").unwrap();
    assert!(!off.audit.options().enabled);
}

#[test]
fn upstream_defaults_to_the_inferencex_engines_and_an_empty_table_turns_it_off() {
    let absent = Config::parse("t.toml", "").unwrap();
    assert_eq!(absent.upstream, default_upstream());
    assert_eq!(
        absent
            .upstream
            .get("nvcr.io/nvidia/tensorrt-llm/release")
            .map(String::as_str),
        Some("NVIDIA/TensorRT-LLM")
    );
    assert_eq!(
        absent.upstream.get("rocm/atom").map(String::as_str),
        Some("ROCm/ATOM")
    );
    let off = Config::parse("t.toml", "[upstream]\n").unwrap();
    assert!(off.upstream.is_empty());
    let own = Config::parse("t.toml", "[upstream]\n\"a/b\" = \"c/d\"\n").unwrap();
    assert_eq!(own.upstream.len(), 1, "a table replaces the defaults");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/inferencex.toml");
    assert_eq!(
        Config::load(&path).unwrap().upstream,
        default_upstream(),
        "the example lists the defaults"
    );
}

#[test]
fn repositories_link_to_the_web_origin_of_their_api() {
    let mut github = GithubConfig::default();
    assert_eq!(github.repository_web_url("o/r"), "https://github.com/o/r");
    github.api_url = "https://ghe.example.com/api/v3/".into();
    assert_eq!(
        github.repository_web_url("o/r"),
        "https://ghe.example.com/o/r"
    );
    github.web_url = Some("http://127.0.0.1:4000/_html/".into());
    assert_eq!(
        github.repository_web_url("o/r"),
        "http://127.0.0.1:4000/_html/o/r"
    );
    let err = Config::parse("t.toml", "[github]\nweb_url = \"not a url\"\n")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("github.web_url"), "{err}");
}

#[test]
fn the_example_configuration_parses_and_matches_the_defaults() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/inferencex.toml");
    let config = Config::load(&path).unwrap();
    let defaults = Config::default();
    assert_eq!(
        config.github.repository.as_deref(),
        Some("SemiAnalysisAI/InferenceX")
    );
    assert_eq!(config.github.bot_login, defaults.github.bot_login);
    assert_eq!(
        config.planner.max_candidates,
        defaults.planner.max_candidates
    );
    assert_eq!(config.planner.min_age, defaults.planner.min_age);
    assert_eq!(config.registry.concurrency, defaults.registry.concurrency);
    assert_eq!(config.registry.timeout, defaults.registry.timeout);
    assert_eq!(
        config.registry.breaker_cooldown,
        defaults.registry.breaker_cooldown
    );
    assert_eq!(
        config.registry.max_timed_tags,
        defaults.registry.max_timed_tags
    );
    assert_eq!(config.registry.hub_api, defaults.registry.hub_api);
    assert_eq!(config.daemon.schedule, defaults.daemon.schedule);
    assert_eq!(config.daemon.lease, defaults.daemon.lease);
    assert_eq!(
        config.daemon.dashboard_listen,
        defaults.daemon.dashboard_listen
    );
}

#[test]
fn model_names_are_keyed_by_model_prefix_and_a_model_path_key_is_refused() {
    let ok = Config::parse(
        "t",
        "[lifecycle.model_names]\n\"qwen3.5\" = \"Qwen-3.5-397B-A17B\"\n",
    )
    .unwrap();
    assert_eq!(
        ok.lifecycle.model_names.get("qwen3.5").map(String::as_str),
        Some("Qwen-3.5-397B-A17B")
    );
    let err = Config::parse(
        "t",
        "[lifecycle.model_names]\n\"Qwen/Qwen3.5-397B-A17B-FP8\" = \"Qwen-3.5-397B-A17B\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("lifecycle.model_names") && err.contains("model prefixes"),
        "{err}"
    );
    let err = Config::parse("t", "[lifecycle.model_names]\n\"dsr1\" = \"\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("may be empty"), "{err}");
}

#[test]
fn capacity_is_off_by_default_and_checked_when_present() {
    assert!(Config::parse("t", "").unwrap().capacity.is_none());
    let c = Config::parse("t", "[capacity]\norigin = \"https://dash.example\"\n")
        .unwrap()
        .capacity
        .unwrap();
    assert_eq!(c.path, "/api/status/clusters");
    assert_eq!(c.key_env, "KLAUD_DASHBOARD_API_KEY");
    assert_eq!(c.timeout, Duration::from_secs(10));
    let missing = c
        .gate_from(|_| Err(std::env::VarError::NotPresent))
        .unwrap_err()
        .to_string();
    assert!(missing.contains("set KLAUD_DASHBOARD_API_KEY"), "{missing}");
    let gate = c.gate_from(|_| Ok("s3cret".into())).unwrap();
    assert!(!format!("{gate:?}").contains("s3cret"));
    for (text, key) in [
        ("origin = \"https://d.example/x\"", "capacity.origin"),
        (
            "origin = \"https://d.example\"\npath = \"x\"",
            "capacity.path",
        ),
        (
            "origin = \"https://d.example\"\ntimeout = \"0s\"",
            "capacity.timeout",
        ),
        (
            "origin = \"https://d.example\"\nclusters = { h100 = [] }",
            "capacity.clusters.h100",
        ),
        ("path = \"/x\"", "origin"),
    ] {
        let err = Config::parse("t", &format!("[capacity]\n{text}\n")).unwrap_err();
        assert!(err.to_string().contains(key), "{text}: {err}");
    }
}

#[test]
fn sweep_runs_on_drafts_is_auto_true_or_false() {
    for (text, want) in [
        ("", DraftPolicy::Auto),
        (
            "[lifecycle]\nsweep_runs_on_drafts = \"auto\"\n",
            DraftPolicy::Auto,
        ),
        (
            "[lifecycle]\nsweep_runs_on_drafts = true\n",
            DraftPolicy::Runs,
        ),
        (
            "[lifecycle]\nsweep_runs_on_drafts = false\n",
            DraftPolicy::Skips,
        ),
    ] {
        let config = Config::parse("klaud.toml", text).unwrap();
        assert_eq!(config.lifecycle.sweep_runs_on_drafts, want, "{text:?}");
    }
}

#[test]
fn ignore_rules_are_read_normalized_and_errors_name_the_file_and_field() {
    use klaud_planner::ignore::{IgnoreSource, IgnoreTarget};
    let text = r#"
[[ignore]]
family = "configs/amd-master.yaml:*-atom-*"
reason = "ATOM images are bumped by hand"

[[ignore]]
repository = "docker.io/rocm/atom-dev"
reason = "a dev repository"

[[ignore]]
repository = "nvcr.io#nvidia/sglang"
tag = "*-rc*"
reason = "release candidates"
"#;
    let rules = Config::parse("klaud.toml", text)
        .unwrap()
        .ignore_rules()
        .unwrap();
    assert_eq!(
        rules.iter().map(|r| r.target.clone()).collect::<Vec<_>>(),
        vec![
            IgnoreTarget::Family("configs/amd-master.yaml:*-atom-*".into()),
            IgnoreTarget::Repository("rocm/atom-dev".into()),
            IgnoreTarget::Tag {
                repository: "nvcr.io/nvidia/sglang".into(),
                tag: "*-rc*".into()
            },
        ]
    );
    assert!(rules.iter().all(|r| r.source == IgnoreSource::Config));
    assert_eq!(rules[2].reason, "release candidates");
    for (bad, key, what) in [
        ("[[ignore]]\nfamily = \"k\"\n", "klaud.toml", "reason"),
        (
            "[[ignore]]\nfamily = \"k\"\nreason = \" \"\n",
            "ignore[0].reason",
            "say why",
        ),
        ("[[ignore]]\nreason = \"r\"\n", "ignore[0]", "set `family`"),
        (
            "[[ignore]]\nfamily = \"k\"\nrepository = \"a/b\"\nreason = \"r\"\n",
            "ignore[0].repository",
            "not both",
        ),
        (
            "[[ignore]]\nfamily = \"k\"\ntag = \"v1\"\nreason = \"r\"\n",
            "ignore[0].tag",
            "narrows",
        ),
        (
            "[[ignore]]\nrepository = \"a/b:v1\"\nreason = \"r\"\n",
            "ignore[0].repository",
            "not an image repository",
        ),
        (
            "[[ignore]]\nfamily = \"\"\nreason = \"r\"\n",
            "ignore[0].family",
            "empty",
        ),
        (
            "[[ignore]]\nfamily = \"k\"\nreason = \"r\"\nwhy = \"x\"\n",
            "klaud.toml",
            "unknown field",
        ),
    ] {
        let e = Config::parse("klaud.toml", bad).unwrap_err().to_string();
        assert!(
            e.starts_with("klaud.toml") && e.contains(key) && e.contains(what),
            "{bad}: {e}"
        );
    }
}

#[test]
fn experiments_are_read_with_derived_variants_and_checked() {
    let text = r#"
[[experiments]]
name = "parser"
families = ["configs/nvidia-master.yaml:dsr1-*", "kimi-*"]
max_concurrent = 3

[[experiments.variants]]
name = "E"
edits = ["set backend.decode_environment.X=\"1\"; add-flag frontend.args router-mode=kv"]

[[experiments.variants]]
name = "F"
from = "E"
edits = ["unset backend.decode_environment.Y"]
"#;
    let config = Config::parse("klaud.toml", text).unwrap();
    let specs = config.experiment_specs().unwrap();
    assert_eq!(specs.len(), 1);
    assert_eq!(specs[0].max_concurrent, 3);
    assert_eq!(
        specs[0].variants[1].edits.len(),
        3,
        "{:?}",
        specs[0].variants[1]
    );
    assert!(specs[0].matches("configs/nvidia-master.yaml:dsr1-fp4-b200-sglang"));
    assert!(specs[0].matches("configs/amd-master.yaml:kimi-k2"));
    let defaults = Config::parse(
            "klaud.toml",
            "[[experiments]]\nname = \"x\"\nfamilies = [\"k\"]\n[[experiments.variants]]\nname = \"A\"\n",
        )
        .unwrap();
    assert_eq!(defaults.experiment_specs().unwrap()[0].max_concurrent, 2);
    for (bad, key, what) in [
        (
            text.replace("unset backend", "frobnicate backend"),
            "experiments[0].variants[1].edits[0]",
            "unknown edit",
        ),
        (
            text.replace("from = \"E\"", "from = \"Z\""),
            "experiments[0].variants",
            "not a variant",
        ),
        (
            text.replace("name = \"F\"", "name = \"E\""),
            "experiments[0].variants",
            "twice",
        ),
        (
            text.replace("name = \"parser\"", "name = \"a b\""),
            "experiments[0].name",
            "letters",
        ),
        (
            text.replace(
                "families = [\"configs/nvidia-master.yaml:dsr1-*\", \"kimi-*\"]",
                "families = []",
            ),
            "experiments[0].families",
            "at least one",
        ),
    ] {
        let e = Config::parse("klaud.toml", &bad).unwrap_err().to_string();
        assert!(e.contains(key) && e.contains(what), "{e}");
    }
    let unknown = text.replace("max_concurrent = 3", "max_concurrency = 3");
    assert!(Config::parse("klaud.toml", &unknown).is_err());
}

#[test]
fn recipe_roots_and_the_bump_policy_are_read_and_checked() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/inferencex.toml");
    let config = Config::load(&path).unwrap();
    let options = config.repo_options();
    assert!(options.recipe_roots.iter().any(|r| {
        r.prefix == "recipes/trtllm/kimi-k25-nvfp4/b200-fp4"
            && r.folder
                .ends_with("trtllm/kimi-k2.5/disagg/trtllm_dynamo/b200-fp4")
    }));
    let align = Config::parse("t", "[bump]\ndisagreeing_recipes = \"align\"\n").unwrap();
    assert_eq!(
        align.bump_options().disagreeing,
        klaud_planner::bump::DisagreePolicy::Align
    );
    let err = Config::parse("t", "[bump]\ndisagreeing_recipes = \"sometimes\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("disagreeing_recipes"), "{err}");
    let err = Config::parse(
        "t",
        "[[recipe_roots]]\nprefix = \"recipes/x\"\nfolder = \"../outside\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("recipe_roots[0]"), "{err}");
}

#[test]
fn an_empty_file_is_all_defaults() {
    let config = Config::parse("empty", "").unwrap();
    assert_eq!(config.planner.max_candidates, 5);
    assert_eq!(config.planner.min_age, Duration::from_secs(86_400));
}

#[test]
fn mistakes_name_the_key() {
    for (text, needle) in [
        ("[planner]\nmax_candidate = 3\n", "max_candidate"),
        ("[planner]\nmin_age = \"24\"\n", "no unit"),
        ("[planner]\nmax_candidates = 0\n", "planner.max_candidates"),
        ("[github]\nrepository = \"nope\"\n", "owner/name"),
        (
            "[registry.mirrors]\n\"docker.io\" = \"not a url\"\n",
            "registry.mirrors.docker.io",
        ),
        (
            "[[tracks]]\nrepository = \"x/y\"\npattern = \"(\"\nordering = \"semver\"\n",
            "tracks[0]",
        ),
        (
            "[[tracks]]\nrepository = \"x/y\"\npattern = \"^(?P<version>.*)$\"\nordering = \"sideways\"\n",
            "tracks[0].ordering",
        ),
        ("planner = 3\n", "planner"),
        ("[daemon]\nschedule = \"0 9 * *\"\n", "daemon.schedule"),
        (
            "[daemon]\ndashboard_listen = \"0.0.0.0:8723\"\n",
            "daemon.dashboard_allow_remote = true",
        ),
        ("[daemon]\nlease = \"1m\"\n", "daemon.lease"),
        (
            "[lifecycle]\nsweep_runs_on_drafts = \"maybe\"\n",
            "lifecycle.sweep_runs_on_drafts",
        ),
        (
            "[daemon]\nreconcile_interval = \"10s\"\nlease = \"39s\"\n",
            "daemon.lease",
        ),
        (
            "[daemon]\nreconcile_interval = \"1s\"\nlease = \"4s\"\n",
            "at least 5s",
        ),
        (
            "[daemon]\nreconcile_interval = \"0s\"\n",
            "daemon.reconcile_interval",
        ),
        ("[daemon]\nreconcile_interval = \"0m\"\n", "at least 1s"),
        ("[daemon]\nreconcile_interval = \"-30s\"\n", "negative"),
        ("[daemon]\nlease = \"0s\"\n", "daemon.lease"),
        ("[daemon]\nlease = \"-2h\"\n", "negative"),
        ("[registry]\ntimeout = \"0s\"\n", "registry.timeout"),
        ("[planner]\ncooldown = \"-1d\"\n", "negative"),
        ("[daemon]\nschedule = \"0 0 30 2 *\"\n", "never fires"),
        ("[daemon]\nschedule = \"* * * * * *\"\n", "at least 60s"),
    ] {
        let err = Config::parse("klaud.toml", text).unwrap_err().to_string();
        assert!(err.contains(needle), "{text:?}: {err}");
    }
}

#[test]
fn registry_hub_api_breaker_and_timed_tags_are_read_with_defaults() {
    let defaults = Config::parse("empty", "").unwrap().registry;
    assert!(defaults.hub_api.is_empty());
    assert_eq!(defaults.breaker_cooldown, Duration::from_secs(15 * 60));
    assert_eq!(
        defaults.max_timed_tags,
        klaud_planner::plan::DEFAULT_MAX_TIMED_TAGS
    );
    let config = Config::parse(
        "klaud.toml",
        "[registry]\nbreaker_cooldown = \"2m\"\nmax_timed_tags = 300\n\
             [registry.hub_api]\n\"registry.example\" = \"http://127.0.0.1:9000\"\n",
    )
    .unwrap();
    assert_eq!(config.registry.breaker_cooldown, Duration::from_secs(120));
    assert_eq!(config.registry.max_timed_tags, 300);
    assert_eq!(
        config
            .registry
            .hub_api
            .get("registry.example")
            .map(String::as_str),
        Some("http://127.0.0.1:9000")
    );
    for (text, needle) in [
        (
            "[registry.hub_api]\n\"registry.example\" = \"not a url\"\n",
            "registry.hub_api.registry.example",
        ),
        (
            "[registry.hub_api]\n\"registry.example\" = \"file:///tmp/x\"\n",
            "registry.hub_api.registry.example",
        ),
        (
            "[registry]\nbreaker_cooldown = \"15\"\n",
            "breaker_cooldown",
        ),
        (
            "[registry]\nbreaker_cooldown = \"0s\"\n",
            "registry.breaker_cooldown",
        ),
        (
            "[registry]\nmax_timed_tags = 0\n",
            "registry.max_timed_tags",
        ),
        ("[registry]\nmax_timed_tags = \"many\"\n", "max_timed_tags"),
        ("[registry]\nmax_timed_tags = -3\n", "max_timed_tags"),
        ("[registry]\nhub_api = 3\n", "hub_api"),
    ] {
        let err = Config::parse("klaud.toml", text).unwrap_err().to_string();
        assert!(err.contains(needle), "{text:?}: {err}");
    }
}

#[test]
fn the_token_is_the_first_set_variable_trimmed() {
    use std::env::VarError;
    let github = GithubConfig::default();
    let env = |name: &str| match name {
        "KLAUD_GITHUB_TOKEN" => Ok("  ".to_owned()),
        "GITHUB_TOKEN" => Ok(" ghp_x\n".to_owned()),
        _ => Err(VarError::NotPresent),
    };
    let found = github.token_from(env).unwrap().expect("found");
    assert_eq!(found.variable, "GITHUB_TOKEN", "a blank variable is unset");
    let gh = |name: &str| match name {
        "GH_TOKEN" => Ok("ghp_secret".to_owned()),
        _ => Err(VarError::NotPresent),
    };
    let hint = github.unread_token_hint(gh).expect("a hint");
    assert!(
        hint.contains("GH_TOKEN is set but Klaud does not read it"),
        "{hint}"
    );
    assert!(!hint.contains("ghp_secret"), "{hint}");
    assert!(github.missing_token_in(gh).ends_with(&hint));
    assert_eq!(github.unread_token_hint(env), None, "a token was found");
    let reads_it = GithubConfig {
        token_env: vec!["GH_TOKEN".to_owned()],
        ..GithubConfig::default()
    };
    assert_eq!(reads_it.unread_token_hint(gh), None, "GH_TOKEN is read");
    let none = github.token_from(|_| Err(VarError::NotPresent)).unwrap();
    assert!(none.is_none());
    assert!(
        github
            .missing_token()
            .contains("KLAUD_GITHUB_TOKEN, GITHUB_TOKEN")
    );
    let bad = github
        .token_from(|_| Err(VarError::NotUnicode("\u{fffd}".into())))
        .unwrap_err()
        .to_string();
    assert!(bad.contains("KLAUD_GITHUB_TOKEN"), "{bad}");
}

#[test]
fn zero_waits_turn_the_wait_off_but_zero_intervals_are_refused() {
    let config = Config::parse(
        "klaud.toml",
        "[planner]\nmin_age = \"0s\"\ncooldown = \"0h\"\n",
    )
    .unwrap();
    assert_eq!(config.planner.min_age, Duration::ZERO);
    assert_eq!(config.planner.cooldown, Duration::ZERO);
    assert_eq!(
        parse_interval("30s", MIN_INTERVAL).unwrap(),
        Duration::from_secs(30)
    );
    for text in ["0s", "0d"] {
        let err = parse_interval(text, MIN_INTERVAL).unwrap_err().to_string();
        assert!(err.contains("at least 1s"), "{text}: {err}");
    }
    let err = parse_interval("-5m", MIN_INTERVAL).unwrap_err().to_string();
    assert!(err.contains("negative"), "{err}");
}

#[test]
fn durations_take_spelled_out_and_compound_units() {
    for (text, seconds) in [
        ("90s", 90),
        ("2 hours", 7200),
        ("1h 30m", 5400),
        ("1h30m", 5400),
        ("7d", 604_800),
        (" 24h ", 86_400),
    ] {
        assert_eq!(
            parse_duration(text).ok(),
            Some(Duration::from_secs(seconds)),
            "{text}"
        );
    }
    let config = Config::parse("t.toml", "[planner]\nmin_age = \"2 hours\"\n").unwrap();
    assert_eq!(config.planner.min_age, Duration::from_secs(7200));
    let err = parse_duration("30").unwrap_err().to_string();
    assert!(
        err.contains("has no unit") && err.contains("1h 30m"),
        "{err}"
    );
    let err = parse_duration("5 fortnights").unwrap_err();
    assert!(
        std::error::Error::source(&err).is_some(),
        "humantime's cause is kept"
    );
    let err = err.to_string();
    assert!(
        err.contains("not a duration") && err.contains("30s"),
        "{err}"
    );
    assert!(
        parse_duration("99999999999999999999d")
            .unwrap_err()
            .to_string()
            .contains("too long")
    );
    let err = Config::parse("t.toml", "[planner]\nmin_age = \"soon\"\n")
        .unwrap_err()
        .to_string();
    // TOML's error names the file, line and key; ours what to write.
    assert!(
        err.contains("t.toml") && err.contains("min_age") && err.contains("2 hours"),
        "{err}"
    );
}

#[test]
fn a_lease_scales_with_the_reconcile_interval() {
    let config = Config::parse(
        "klaud.toml",
        "[github]\nwrite_timeout = \"1s\"\n\
             [daemon]\nreconcile_interval = \"1s\"\nlease = \"8s\"\nlease_margin = \"0s\"\n",
    )
    .unwrap();
    assert_eq!(config.daemon.lease, Duration::from_secs(8));
    let config = Config::parse(
        "klaud.toml",
        "[github]\nwrite_timeout = \"20s\"\n\
             [daemon]\nreconcile_interval = \"60s\"\nlease = \"4m\"\nlease_margin = \"30s\"\n",
    )
    .unwrap();
    assert_eq!(config.daemon.lease, Duration::from_secs(240));
}

#[test]
fn a_lease_too_short_for_the_write_window_is_refused() {
    // The defaults: a write is sent with 60 s + 75 s of lease left,
    // so the lease must hold that window four times and a second.
    let daemon = "[daemon]\nreconcile_interval = \"1s\"\n";
    let err = Config::parse("klaud.toml", &format!("{daemon}lease = \"20s\"\n"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("daemon.lease"), "{err}");
    assert!(err.contains("write window"), "{err}");
    assert!(err.contains("541s"), "{err}");
    assert!(Config::parse("klaud.toml", &format!("{daemon}lease = \"540s\"\n")).is_err());
    let config = Config::parse("klaud.toml", &format!("{daemon}lease = \"541s\"\n")).unwrap();
    assert_eq!(config.daemon.lease, Duration::from_secs(541));
    // A shorter write timeout makes room for a shorter lease, and the
    // engine is told the same figure the GitHub client enforces.
    let config = Config::parse(
        "klaud.toml",
        "[github]\nwrite_timeout = \"10s\"\n\
             [daemon]\nreconcile_interval = \"1s\"\nlease = \"5m\"\nlease_margin = \"20s\"\n",
    )
    .unwrap();
    let engine = crate::compose::engine_config(&config, 1);
    assert_eq!(engine.write_timeout, chrono::TimeDelta::seconds(10));
    assert_eq!(engine.lease_margin, chrono::TimeDelta::seconds(20));
    let err = Config::parse("klaud.toml", "[github]\nwrite_timeout = \"0s\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("github.write_timeout"), "{err}");
}
