//! `klaud wave` as a GitHub App (the installation looked up, tokens minted
//! by octocrab over loopback) and with `--checkout` of the base commit.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use klaud_sandbox::stack::{BOT_TOKEN, SandboxStack};

use crate::support::{Harness, REPO, write_klaud_toml};

/// An RSA key pair (private PEM, public PEM) made with openssl; `None`
/// (after a loud message) where openssl is missing, a failure under CI.
fn rsa_key_pair(dir: &Path) -> Option<(String, String)> {
    let key = dir.join("app.pem");
    let made = Command::new("openssl")
        .args(["genrsa", "-traditional", "-out"])
        .arg(&key)
        .arg("2048")
        .output()
        .is_ok_and(|o| o.status.success());
    let public = made
        .then(|| {
            Command::new("openssl")
                .args(["rsa", "-pubout", "-in"])
                .arg(&key)
                .output()
                .ok()
                .filter(|o| o.status.success())
        })
        .flatten();
    match public {
        Some(p) => Some((
            std::fs::read_to_string(&key).expect("key"),
            String::from_utf8(p.stdout).expect("public key"),
        )),
        None if std::env::var_os("CI").is_some() => panic!("openssl is required under CI"),
        None => {
            eprintln!("SKIP: openssl not available; GitHub App auth not tested");
            None
        }
    }
}

fn wave_command(stack: &SandboxStack, dir: &Path, config_extra: &str) -> Command {
    let config = write_klaud_toml(stack, dir, &format!("{config_extra}\n"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_klaud"));
    cmd.env_remove("GITHUB_TOKEN")
        .env_remove("KLAUD_GITHUB_TOKEN")
        .env_remove("GITHUB_STEP_SUMMARY")
        .env_remove("KLAUD_GITHUB_APP_PRIVATE_KEY")
        .arg("wave")
        .arg("--config")
        .arg(&config)
        .arg("--store")
        .arg(dir.join("store"))
        .args(["--json", "--poll", "1s"]);
    for host in ["docker.io", "nvcr.io", "hub.docker.com"] {
        cmd.args(["--mirror", &format!("{host}={}", stack.registry_url)]);
    }
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_candidate_runs_as_a_github_app_with_its_installation_looked_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((private, public)) = rsa_key_pair(dir.path()) else {
        return;
    };
    let stack = Harness::demo()
        .demo_ci()
        .poll(Duration::from_millis(20))
        .start_stack()
        .await;
    let bot = stack
        .state()
        .add_app(4242, "klaud-cold", &public, 77, REPO)
        .await
        .expect("app");
    let summary = dir.path().join("summary.md");
    let mut cmd = wave_command(
        &stack,
        dir.path(),
        &format!("bot_login = \"{bot}\"\napp_id = 4242\n"),
    );
    // The key comes from the environment (as an Actions secret would).
    cmd.env("KLAUD_GITHUB_APP_PRIVATE_KEY", &private)
        .args(["--max", "1", "--wait", "120s", "--step-summary"])
        .arg(&summary);
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("klaud wave"))
        .await
        .expect("wave");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let candidates = v["candidates"].as_array().expect("candidates");
    assert_eq!(candidates.len(), 1, "{v:#}");
    assert!(!candidates[0]["outcome"].is_null(), "finished: {v:#}");
    // Secrets never reach the log.
    assert!(
        !stderr.contains("PRIVATE KEY") && !stderr.contains("ghs_"),
        "{stderr}"
    );

    let log = stack.state().request_log().await;
    assert!(
        log.iter()
            .any(|e| e.path == format!("/repos/{REPO}/installation") && e.status == 200),
        "the installation was looked up"
    );
    assert!(log.iter().any(|e| e.method == "POST"
        && e.path == "/app/installations/77/access_tokens"
        && e.status == 201));
    let writes: Vec<_> = log
        .iter()
        .filter(|e| e.method != "GET" && e.path.starts_with("/repos/"))
        .collect();
    assert!(!writes.is_empty());
    assert!(
        writes
            .iter()
            .all(|e| e.login.as_deref() == Some(bot.as_str())),
        "every write acts as the App's bot: {writes:?}"
    );
    let table = std::fs::read_to_string(&summary).expect("step summary");
    assert!(table.contains("| Outcome / 结果 |"), "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_or_overlong_app_jwt_and_an_expired_token_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((private, public)) = rsa_key_pair(dir.path()) else {
        return;
    };
    let stack = Harness::demo()
        .demo_ci()
        .poll(Duration::from_millis(20))
        .start_stack()
        .await;
    stack
        .state()
        .add_app(5151, "klaud-jwt", &public, 88, REPO)
        .await
        .expect("app");
    let key = octocrab::jsonwebtoken::EncodingKey::from_rsa_pem(private.as_bytes()).expect("key");
    let jwt = |iat: i64, exp: i64| {
        octocrab::jsonwebtoken::encode(
            &octocrab::jsonwebtoken::Header::new(octocrab::jsonwebtoken::Algorithm::RS256),
            &serde_json::json!({"iss": 5151, "iat": iat, "exp": exp}),
            &key,
        )
        .expect("jwt")
    };
    let now = chrono::Utc::now().timestamp();
    let http = klaud_http::http_client().expect("http client");
    let get = |token: String, path: &str| {
        http.get(format!("{}{path}", stack.github.url()))
            .bearer_auth(token)
            .header("User-Agent", "klaud-test")
            .send()
    };
    let ok = get(jwt(now - 60, now + 540), "/app/installations")
        .await
        .expect("request");
    assert_eq!(ok.status(), 200);
    let list: serde_json::Value = ok.json().await.expect("JSON");
    assert_eq!(list[0]["id"], 88);
    for (iat, exp, why) in [
        (now - 60, now + 660, "too far in the future"),
        (now - 700, now - 10, "must be a numeric value"),
    ] {
        let r = get(jwt(iat, exp), "/app").await.expect("request");
        assert_eq!(r.status(), 401, "{why}");
        assert!(r.text().await.unwrap_or_default().contains(why), "{why}");
    }
    // An installation token stops working when it expires.
    stack.state().set_app_token_lifetime(5151, 0).await;
    let minted: serde_json::Value = http
        .post(format!(
            "{}/app/installations/88/access_tokens",
            stack.github.url()
        ))
        .bearer_auth(jwt(now - 60, now + 540))
        .header("User-Agent", "klaud-test")
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("JSON");
    let token = minted["token"].as_str().expect("token").to_owned();
    let r = get(token, &format!("/repos/{REPO}"))
        .await
        .expect("request");
    assert_eq!(r.status(), 401);
}

/// A local git checkout whose HEAD is exactly the sandbox's base commit:
/// the seed's files committed with the base commit's author, committer,
/// dates and message (git object ids are content hashes).
fn checkout_of_base(stack_url: &str, dir: &Path, commit: &serde_json::Value) -> String {
    let git = |args: &[&str], envs: &[(&str, String)]| {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .expect("git");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let _ = stack_url;
    crate::support::copy_tree(
        &Path::new(crate::support::REPO_ROOT).join("configs/demo"),
        dir,
    );
    git(&["init", "-q"], &[]);
    git(&["add", "-A"], &[]);
    let tree = git(&["write-tree"], &[]);
    assert_eq!(
        tree,
        commit["tree"]["sha"].as_str().expect("tree"),
        "the seed's tree"
    );
    let sig = |who: &str| {
        let s = &commit[who];
        let date = chrono::DateTime::parse_from_rfc3339(s["date"].as_str().expect("date"))
            .expect("date")
            .timestamp();
        (
            s["name"].as_str().expect("name").to_owned(),
            s["email"].as_str().expect("email").to_owned(),
            format!("@{date} +0000"),
        )
    };
    let (an, ae, ad) = sig("author");
    let (cn, ce, cd) = sig("committer");
    let message = dir.join("../message.txt");
    std::fs::write(&message, commit["message"].as_str().expect("message")).expect("message");
    let message = message.display().to_string();
    let sha = git(
        &["commit-tree", &tree, "-F", &message],
        &[
            ("GIT_AUTHOR_NAME", an),
            ("GIT_AUTHOR_EMAIL", ae),
            ("GIT_AUTHOR_DATE", ad),
            ("GIT_COMMITTER_NAME", cn),
            ("GIT_COMMITTER_EMAIL", ce),
            ("GIT_COMMITTER_DATE", cd),
        ],
    );
    git(&["update-ref", "HEAD", &sha], &[]);
    sha
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_reads_a_checkout_of_the_base_commit_and_refuses_another() {
    let stack = Harness::demo()
        .demo_ci()
        .poll(Duration::from_millis(20))
        .start_stack()
        .await;
    let http = klaud_http::http_client().expect("http client");
    let api = |path: String| {
        http.get(format!("{}/repos/{REPO}/{path}", stack.github.url()))
            .bearer_auth(BOT_TOKEN)
            .header("User-Agent", "klaud-test")
            .send()
    };
    let head: serde_json::Value = api("git/ref/heads/main".into())
        .await
        .expect("ref")
        .json()
        .await
        .expect("JSON");
    let base = head["object"]["sha"].as_str().expect("sha").to_owned();
    let commit: serde_json::Value = api(format!("git/commits/{base}"))
        .await
        .expect("commit")
        .json()
        .await
        .expect("JSON");
    if commit["parents"].as_array().is_some_and(|p| !p.is_empty()) {
        panic!("the seeded base commit has parents; this test rebuilds a root commit only");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path().join("checkout");
    std::fs::create_dir_all(&work).expect("dir");
    let sha = checkout_of_base(&stack.github.url(), &work, &commit);
    assert_eq!(sha, base, "the local commit is the base commit");

    let blob_gets = |log: &[klaud_sandbox::github::LogEntry]| {
        log.iter()
            .filter(|e| e.method == "GET" && e.path.contains("/git/blobs/"))
            .count()
    };
    // A wave with nothing to do (no candidate may start) and the checkout,
    // after the store was lost: a few reads, no write, no blob. The first
    // wave on the repository opens the dashboard issue; the second, with
    // a fresh store, finds it.
    let mut before = 0;
    for _ in 0..2 {
        let idle_dir = tempfile::tempdir().expect("tempdir");
        let mut cmd = wave_command(&stack, idle_dir.path(), "");
        cmd.env("KLAUD_GITHUB_TOKEN", BOT_TOKEN)
            .args(["--max", "0", "--wait", "0s", "--checkout"])
            .arg(&work);
        before = stack.state().request_log().await.len();
        let out = tokio::task::spawn_blocking(move || cmd.output().expect("klaud wave"))
            .await
            .expect("wave");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let idle: Vec<klaud_sandbox::github::LogEntry> = stack.state().request_log().await[before..]
        .iter()
        .filter(|e| e.login.as_deref() == Some(crate::support::BOT))
        .cloned()
        .collect();
    let shown: Vec<String> = idle
        .iter()
        .map(|e| format!("{} {} {}", e.method, e.path, e.status))
        .collect();
    eprintln!(
        "an idle wave with a fresh store and the checkout: {} requests",
        idle.len()
    );
    assert!(idle.len() <= 30, "{shown:#?}");
    assert!(
        idle.iter()
            .all(|e| matches!(e.method.as_str(), "GET" | "HEAD") || e.path.ends_with("/graphql")),
        "{shown:#?}"
    );
    assert_eq!(blob_gets(&idle), 0, "{shown:#?}");

    let mut cmd = wave_command(&stack, dir.path(), "");
    cmd.env("KLAUD_GITHUB_TOKEN", BOT_TOKEN)
        .args(["--max", "1", "--wait", "0s", "--checkout"])
        .arg(&work);
    let before = blob_gets(&stack.state().request_log().await);
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("klaud wave"))
        .await
        .expect("wave");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        blob_gets(&stack.state().request_log().await),
        before,
        "no blob was downloaded: the checkout has them"
    );

    // Another HEAD is refused as bad input, naming both commits.
    std::fs::write(work.join("extra.txt"), "x").expect("write");
    let status = Command::new("git")
        .arg("-C")
        .arg(&work)
        .args(["add", "-A"])
        .status()
        .expect("git add");
    assert!(status.success());
    let status = Command::new("git")
        .arg("-C")
        .arg(&work)
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@e",
            "commit",
            "-qm",
            "local",
        ])
        .status()
        .expect("git commit");
    assert!(status.success());
    let mut cmd = wave_command(&stack, dir.path(), "");
    cmd.env("KLAUD_GITHUB_TOKEN", BOT_TOKEN)
        .args(["--wait", "0s", "--checkout"])
        .arg(&work);
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("klaud wave"))
        .await
        .expect("wave");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--checkout") && stderr.contains(&base),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installation_tokens_are_reused_and_minted_again_before_they_expire() {
    use klaud_github::{Credential, ForgeConfig, Github, RetryPolicy, Secret};
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((private, public)) = rsa_key_pair(dir.path()) else {
        return;
    };
    let stack = Harness::demo()
        .demo_ci()
        .poll(Duration::from_millis(20))
        .start_stack()
        .await;
    let bot = stack
        .state()
        .add_app(6262, "klaud-refresh", &public, 99, REPO)
        .await
        .expect("app");
    let forge = |bot: &str| {
        Github::connect_unchecked(ForgeConfig {
            api_url: stack.github.url(),
            repo: REPO.to_owned(),
            bot_login: bot.to_owned(),
            credential: Credential::App {
                app_id: 6262,
                private_key_pem: Secret::new(private.clone()),
                installation_id: 99,
            },
            retry: RetryPolicy::default(),
        })
        .expect("forge")
    };
    let mints = |log: &[klaud_sandbox::github::LogEntry]| {
        log.iter()
            .filter(|e| e.method == "POST" && e.path == "/app/installations/99/access_tokens")
            .count()
    };
    // An hour-long token serves every request.
    let f = forge(&bot);
    let before = mints(&stack.state().request_log().await);
    for _ in 0..3 {
        f.get_ref("refs/heads/main").await.expect("read");
    }
    assert_eq!(mints(&stack.state().request_log().await) - before, 1);
    // A token with less than the 30 s margin left is never used: each
    // request gets a fresh one, so none is sent expired.
    stack.state().set_app_token_lifetime(6262, 20).await;
    let f = forge(&bot);
    let before = mints(&stack.state().request_log().await);
    for _ in 0..3 {
        f.get_ref("refs/heads/main").await.expect("read");
    }
    assert_eq!(mints(&stack.state().request_log().await) - before, 3);
    let log = stack.state().request_log().await;
    assert!(
        log.iter()
            .filter(|e| e.path.ends_with("/git/ref/heads/main"))
            .all(|e| e.status != 401),
        "no request went out with an expired token"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_checks_an_app_from_flags_and_names_it_without_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((_, public)) = rsa_key_pair(dir.path()) else {
        return;
    };
    let stack = Harness::demo()
        .demo_ci()
        .poll(Duration::from_millis(20))
        .start_stack()
        .await;
    let bot = stack
        .state()
        .add_app(4343, "klaud-doctor", &public, 44, REPO)
        .await
        .expect("app");
    let config = dir.path().join("klaud.toml");
    std::fs::write(
        &config,
        format!(
            "[github]\napi_url = \"{}\"\nrepository = \"{REPO}\"\nbot_login = \"{bot}\"\n",
            stack.github.url()
        ),
    )
    .expect("config");
    let key = dir.path().join("app.pem");
    let store = dir.path().join("store");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_klaud"))
            .env_remove("GITHUB_TOKEN")
            .env_remove("KLAUD_GITHUB_TOKEN")
            .args([
                "doctor",
                "--json",
                "--app-id",
                "4343",
                "--app-private-key-file",
            ])
            .arg(&key)
            .arg("--config")
            .arg(&config)
            .arg("--store")
            .arg(&store)
            .output()
            .expect("klaud doctor")
    })
    .await
    .expect("doctor");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(!text.contains("PRIVATE KEY"), "{text}");
    let checks: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let check = |name: &str| {
        checks
            .as_array()
            .expect("checks")
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} missing: {checks:#}"))
    };
    let token = check("token");
    assert_eq!(token["status"], "ok", "{token}");
    assert!(
        token["detail"]
            .as_str()
            .is_some_and(|d| d.contains("GitHub App 4343") && d.contains("looked up")),
        "{token}"
    );
    let identity = check("identity");
    assert_eq!(identity["status"], "ok", "{identity}");
    assert!(
        identity["detail"]
            .as_str()
            .is_some_and(|d| d.contains(&bot))
    );
    assert_eq!(check("permission")["status"], "ok", "{checks:#}");
}

/// A token revoked while a wave runs: every candidate stops on GitHub's 401,
/// and the wave exits non-zero naming the cause, so a scheduled Actions job
/// turns red instead of staying green.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_whose_token_is_revoked_mid_run_exits_non_zero_with_the_cause() {
    // No CI script: the smoke stays queued, so the wave keeps polling it.
    let stack = Harness::demo().start_stack().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = wave_command(&stack, dir.path(), "");
    cmd.env("KLAUD_GITHUB_TOKEN", BOT_TOKEN)
        .args(["--max", "1", "--wait", "120s"]);
    let wave = tokio::task::spawn_blocking(move || cmd.output().expect("klaud wave"));
    let patience = std::time::Instant::now();
    // The smoke's dispatch, not a producer run the results API names.
    while stack.state().dispatched_run_ids(REPO).await.is_empty() {
        assert!(
            patience.elapsed() < Duration::from_secs(120),
            "the wave never dispatched a smoke"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let revoked = klaud_http::http_client_builder()
        .no_proxy()
        .build()
        .expect("client")
        .post(format!("{}/_sandbox/tokens/revoke", stack.github.url()))
        .json(&serde_json::json!({"token": BOT_TOKEN}))
        .send()
        .await
        .expect("revoke");
    assert_eq!(revoked.status(), reqwest::StatusCode::NO_CONTENT);
    let out = wave.await.expect("wave");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        !out.status.success(),
        "a green wave after a revoked token: {stderr}"
    );
    assert!(
        stderr.contains("every candidate of this wave stopped")
            && stderr.contains("GitHub refused the credential"),
        "{stderr}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON summary");
    assert!(
        v["stopped_by"]
            .as_str()
            .is_some_and(|c| c.contains("credential")),
        "{v:#}"
    );
}
