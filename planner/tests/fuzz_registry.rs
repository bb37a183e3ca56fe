//! Fuzzing on stable of the registry client's parsing of what registries
//! answer: manifests and indexes, image configs, `tags/list` pages, token
//! answers and `WWW-Authenticate` challenges. A wiremock server on
//! 127.0.0.1 answers every request with the case's body, so the real client
//! code path (status handling, size limits, JSON decoding, token flow) reads
//! it. Each target asserts that nothing panics and that what comes back is
//! bounded by what was sent.
//!
//! Inputs: arbitrary bytes, and structure-aware JSON built from the shapes
//! real registries send (Docker Hub's and NGC's index, manifest, config and
//! tag list answers, as in `registry_faults.rs`) with mutated fields.
//!
//! The default case count keeps CI fast; a longer run:
//!
//! ```text
//! PROPTEST_CASES=20000 cargo test -p klaud-planner --test fuzz_registry -- --nocapture
//! ```
//!
//! Each target prints how many inputs it ran.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use klaud_planner::registry::{
    Challenge, DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST, RegistryClient, RegistryConfig,
    parse_challenge,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};
use url::Url;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const HOST: &str = "registry.test";
const REPO: &str = "lmsysorg/sglang";
const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// Cases per target: `PROPTEST_CASES`, else a CI-sized default.
fn cases(default_cases: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases)
}

/// What the server answers with for the case being run.
#[derive(Clone, Debug, Default)]
struct Answer {
    status: u16,
    content_type: String,
    body: Vec<u8>,
    /// Ask for a bearer token first (then the token endpoint answers the
    /// case's body too).
    challenge: bool,
}

#[derive(Clone)]
struct Fuzzed(Arc<Mutex<Answer>>);

impl Respond for Fuzzed {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let answer = self.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let authorized = request.headers.contains_key("authorization");
        if answer.challenge && !authorized && request.url.path() != "/token" {
            let realm = format!(
                "Bearer realm=\"http://{}/token\",service=\"registry.test\",scope=\"repository:{REPO}:pull\"",
                request.url.authority()
            );
            return ResponseTemplate::new(401).insert_header("www-authenticate", realm.as_str());
        }
        ResponseTemplate::new(answer.status)
            .insert_header("content-type", answer.content_type.as_str())
            .insert_header("docker-content-digest", DIGEST)
            .set_body_bytes(answer.body)
    }
}

/// The registry answers: a structure-aware JSON body, or arbitrary bytes.
fn answer() -> impl Strategy<Value = Answer> {
    let body = prop_oneof![
        3 => registry_json().prop_map(|v| serde_json::to_vec(&v).unwrap_or_default()),
        1 => proptest::collection::vec(any::<u8>(), 0..1024),
        1 => registry_json().prop_flat_map(|v| {
            // A valid answer cut or with bytes flipped.
            let bytes = serde_json::to_vec(&v).unwrap_or_default();
            let len = bytes.len().max(1);
            (Just(bytes), 0..len, any::<u8>())
        })
        .prop_map(|(mut bytes, at, byte)| {
            if at < bytes.len() {
                if byte % 2 == 0 {
                    bytes.truncate(at);
                } else {
                    bytes[at] = byte;
                }
            }
            bytes
        }),
    ];
    (
        prop_oneof![8 => Just(200u16), 1 => Just(404u16), 1 => Just(500u16), 1 => 100u16..600],
        prop_oneof![
            Just(OCI_INDEX.to_owned()),
            Just(OCI_MANIFEST.to_owned()),
            Just(DOCKER_MANIFEST.to_owned()),
            Just("application/json".to_owned()),
            "[a-z/.+-]{0,30}",
        ],
        body,
        any::<bool>(),
    )
        .prop_map(|(status, content_type, body, challenge)| Answer {
            status,
            content_type,
            body,
            challenge,
        })
}

fn text() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(DIGEST)),
        Just(json!("sha256:")),
        Just(json!("linux")),
        Just(json!("amd64")),
        "\\PC{0,24}".prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        Just(Value::Null),
    ]
}

fn platform() -> impl Strategy<Value = Value> {
    (text(), text(), text())
        .prop_map(|(os, arch, variant)| json!({"os": os, "architecture": arch, "variant": variant}))
}

/// The shapes registries answer with, fields mutated.
fn registry_json() -> impl Strategy<Value = Value> {
    let descriptor = || {
        (text(), text(), any::<i64>(), platform()).prop_map(|(media_type, digest, size, platform)| {
            json!({"mediaType": media_type, "digest": digest, "size": size, "platform": platform})
        })
    };
    let index = (
        text(),
        proptest::collection::vec(descriptor(), 0..12),
    )
        .prop_map(|(media_type, manifests)| {
            json!({"schemaVersion": 2, "mediaType": media_type, "manifests": manifests})
        });
    let manifest = (
        descriptor(),
        proptest::collection::vec(descriptor(), 0..6),
    )
        .prop_map(|(config, layers)| {
            json!({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config, "layers": layers})
        });
    let config = (
        proptest::collection::btree_map("\\PC{0,16}", text(), 0..8),
        text(),
        platform(),
    )
        .prop_map(|(labels, created, p)| {
            json!({"created": created, "os": p["os"], "architecture": p["architecture"],
                   "config": {"Labels": labels}})
        });
    let tags = (text(), proptest::collection::vec(text(), 0..40))
        .prop_map(|(name, tags)| json!({"name": name, "tags": tags}));
    let token = (text(), text(), any::<i64>()).prop_map(|(token, access, expires)| {
        json!({"token": token, "access_token": access, "expires_in": expires})
    });
    prop_oneof![index, manifest, config, tags, token]
}

fn client(server: &MockServer) -> RegistryClient {
    let mut c = RegistryConfig::default();
    let url = Url::parse(&server.uri()).expect("server URL");
    c.mirrors.insert(HOST.into(), url);
    c.retry_base_delay = Duration::from_millis(1);
    c.max_retry_delay = Duration::from_millis(5);
    c.max_retries = 1;
    RegistryClient::new(c).expect("client")
}

#[test]
fn fuzz_registry_answers_never_panic_and_stay_bounded() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let shared = Arc::new(Mutex::new(Answer::default()));
    let server = runtime.block_on(async {
        let server = MockServer::start().await;
        Mock::given(wiremock::matchers::any())
            .respond_with(Fuzzed(Arc::clone(&shared)))
            .mount(&server)
            .await;
        server
    });
    let total = cases(64);
    let mut runner = TestRunner::new(Config {
        cases: total,
        max_shrink_iters: 256,
        // A failure prints its input; there is no source file to save it by.
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&answer(), |answer| {
            let sent = answer.body.len();
            *shared.lock().unwrap_or_else(|p| p.into_inner()) = answer;
            // A fresh client per case: its digest cache must not hide the
            // next body.
            let client = client(&server);
            runtime.block_on(async {
                let session = client.session();
                if let Ok(tags) = session.list_tags(HOST, REPO).await {
                    // Each tag is at least a character and its quotes.
                    prop_assert!(
                        tags.len() <= sent / 3 + 1,
                        "{} tags from {sent} bytes",
                        tags.len()
                    );
                }
                let _ = session.head_manifest(HOST, REPO, "v1").await;
                if let Ok(details) = session.image_details(HOST, REPO, DIGEST).await {
                    prop_assert!(details.platforms.len() <= sent + 1);
                }
                let _ = session.image_platforms(HOST, REPO, DIGEST).await;
                Ok(())
            })
        })
        .unwrap_or_else(|e| panic!("{e}"));
    println!(
        "fuzz_registry_answers: {total} inputs, each read as tags, manifest head, image details and platforms"
    );
}

proptest! {
    #![proptest_config(Config { cases: cases(2000), ..Config::default() })]

    #[test]
    fn fuzz_www_authenticate_challenges_never_panic(header in "\\PC{0,200}") {
        let _ = parse_challenge(&header);
    }

    #[test]
    fn fuzz_bearer_challenges_keep_their_parameters(
        realm in "[ -~&&[^\"\\\\]]{0,40}",
        service in "[ -~&&[^\"\\\\]]{0,40}",
        scope in "[ -~&&[^\"\\\\]]{0,40}",
    ) {
        let header = format!("Bearer realm=\"{realm}\",service=\"{service}\",scope=\"{scope}\"");
        match parse_challenge(&header) {
            Ok(Challenge::Bearer { realm: r, service: s, scope: sc }) => {
                prop_assert_eq!(r, realm);
                prop_assert_eq!(s.unwrap_or_default(), service);
                prop_assert_eq!(sc.unwrap_or_default(), scope);
            }
            Ok(Challenge::Basic) => prop_assert!(false, "a Bearer challenge read as Basic"),
            // Only a realm-less challenge is refused.
            Err(e) => prop_assert!(realm.trim().is_empty(), "{e}"),
        }
    }
}
