use super::*;

#[test]
fn family_strings_and_ids_are_told_apart() {
    match parse_family("configs/nvidia-master.yaml:dsr1-fp4-b200-sglang").unwrap() {
        FamilyArg::Name { family, id } => {
            assert_eq!(family, "configs/nvidia-master.yaml:dsr1-fp4-b200-sglang");
            assert_eq!(id.as_str(), "d92e15065c55779d");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        parse_family("d92e15065c55779d").unwrap(),
        FamilyArg::Id(FamilyId::new("d92e15065c55779d").unwrap())
    );
    // The bare key `klaud bump` takes, resolved later on GitHub.
    assert_eq!(
        parse_family("dsr1-fp4-b200-sglang").unwrap(),
        FamilyArg::Key("dsr1-fp4-b200-sglang".to_owned())
    );
}

#[test]
fn malformed_families_are_refused_with_the_reason() {
    for (input, needle) in [
        ("D92E15065C55779D", "lowercase"),
        ("dsr1 fp4", "family string like"),
        ("configs/x", "family string like"),
        ("configs/nvidia-master.yaml:", "empty"),
        ("inferencex-e2e/configs/nvidia-master.yaml:k", "prefix"),
        ("configs/../x.yaml:k", "master file"),
        ("/etc/passwd:root", "master file"),
    ] {
        let err = parse_family(input).unwrap_err();
        assert_eq!(err.code, super::super::EXIT_BAD_INPUT, "{input}");
        let text = format!("{:#}", err.error);
        assert!(text.contains(needle), "{input}: {text}");
    }
}

fn target(repo: Option<&str>) -> Target {
    Target {
        github_api: None,
        repo: repo.map(str::to_owned),
        config: None,
        bot_login: None,
        auth: crate::auth::AuthArgs::default(),
    }
}

#[test]
fn the_token_comes_from_the_first_set_variable_and_flags_override_the_file() {
    let config = Config::parse(
        "klaud.toml",
        "[github]\nrepository = \"a/b\"\napi_url = \"http://127.0.0.1:9\"\nbot_login = \"x\"\n",
    )
    .unwrap();
    let env = |name: &str| match name {
        "GITHUB_TOKEN" => Ok("second".to_owned()),
        "KLAUD_GITHUB_TOKEN" => Ok("  ".to_owned()),
        _ => Err(std::env::VarError::NotPresent),
    };
    let from_file = forge_config(&config, &target(None), env).unwrap();
    assert_eq!(from_file.repo, "a/b");
    assert_eq!(from_file.github.bot_login, "x");
    assert_eq!(from_file.github.api_url, "http://127.0.0.1:9");
    let crate::auth::Auth::Token { token, .. } = &from_file.auth else {
        panic!("expected a token");
    };
    assert_eq!(format!("{token:?}"), "Secret(***)");

    let mut flags = target(Some("c/d"));
    flags.bot_login = Some("y".into());
    flags.github_api = Some("http://127.0.0.1:10".into());
    let overridden = forge_config(&config, &flags, env).unwrap();
    assert_eq!(overridden.repo, "c/d");
    assert_eq!(overridden.github.bot_login, "y");
    assert_eq!(overridden.github.api_url, "http://127.0.0.1:10");
}

#[test]
fn a_missing_token_or_repository_is_bad_input_naming_what_to_set() {
    let none = |_: &str| Err(std::env::VarError::NotPresent);
    let err = forge_config(&Config::default(), &target(Some("a/b")), none).unwrap_err();
    assert_eq!(err.code, super::super::EXIT_BAD_INPUT);
    let text = format!("{:#}", err.error);
    assert!(text.contains("KLAUD_GITHUB_TOKEN, GITHUB_TOKEN"), "{text}");
    let some = |_: &str| Ok("t".to_owned());
    let err = forge_config(&Config::default(), &target(None), some).unwrap_err();
    assert!(format!("{:#}", err.error).contains("--repo"));
}

#[test]
fn control_characters_from_github_are_escaped() {
    assert_eq!(clean("a\u{1b}[31mb\n"), "a\\u{1b}[31mb\\n");
    assert_eq!(clean("plain"), "plain");
}
