//! Registry client behaviour the real `docker-registry` cannot produce:
//! faults, hostile bodies, Docker Hub's REST API. Served by wiremock on
//! 127.0.0.1.

use std::sync::Arc;
use std::time::Duration;

use klaud_planner::registry::{
    BasicCredentials, DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST, RegistryClient, RegistryConfig,
    RegistryError,
};
use serde_json::json;
use sha2::{Digest, Sha256};
use url::Url;
use wiremock::matchers::{header, header_exists, method, path, query_param};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const HOST: &str = "registry.test";
const REPO: &str = "vllm/vllm-openai";

fn digest(b: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(b)))
}

fn config(server: &MockServer) -> RegistryConfig {
    let mut c = RegistryConfig::default();
    let url = Url::parse(&server.uri()).unwrap();
    c.mirrors.insert(HOST.into(), url.clone());
    c.mirrors.insert("docker.io".into(), url.clone());
    c.mirrors.insert("hub.docker.com".into(), url);
    c.retry_base_delay = Duration::from_millis(1);
    c.max_retry_delay = Duration::from_secs(2);
    c.max_retries = 3;
    c
}

fn client(server: &MockServer) -> RegistryClient {
    RegistryClient::new(config(server)).unwrap()
}

fn manifest_path(reference: &str) -> String {
    format!("/v2/{REPO}/manifests/{reference}")
}

fn head_ok(d: &str) -> ResponseTemplate {
    ResponseTemplate::new(200)
        .insert_header("docker-content-digest", d)
        .insert_header("content-type", OCI_INDEX)
}

#[tokio::test]
async fn head_returns_digest_and_media_type() {
    let server = MockServer::start().await;
    let d = digest(b"index");
    Mock::given(method("HEAD"))
        .and(path(manifest_path("v1")))
        .and(|r: &Request| {
            r.headers.get("accept").and_then(|v| v.to_str().ok())
                == Some(klaud_planner::registry::MANIFEST_ACCEPT)
        })
        .respond_with(head_ok(&d))
        .expect(1)
        .mount(&server)
        .await;
    let c = client(&server);
    let head = c.session().head_manifest(HOST, REPO, "v1").await.unwrap();
    assert_eq!(head.digest, d);
    assert_eq!(head.media_type, OCI_INDEX);
    assert_eq!(c.counts().manifest_head, 1);
    assert_eq!(c.counts().total(), 1);
}

#[tokio::test]
async fn missing_content_digest_falls_back_to_hashing_the_body() {
    let server = MockServer::start().await;
    let body = json!({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST, "config": {"digest": digest(b"c"), "size": 1}, "layers": []}).to_string();
    Mock::given(method("HEAD"))
        .and(path(manifest_path("v1")))
        .respond_with(ResponseTemplate::new(200))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(manifest_path("v1")))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw(body.clone(), "application/octet-stream"),
        )
        .expect(1)
        .mount(&server)
        .await;
    let c = client(&server);
    let head = c.session().head_manifest(HOST, REPO, "v1").await.unwrap();
    assert_eq!(head.digest, digest(body.as_bytes()));
    assert_eq!(
        head.media_type, DOCKER_MANIFEST,
        "media type read from the JSON when the header has none"
    );
    let n = c.counts();
    assert_eq!((n.manifest_head, n.manifest_get), (1, 1));
}

#[tokio::test]
async fn not_found_is_distinct() {
    let server = MockServer::start().await;
    Mock::given(method("HEAD"))
        .respond_with(ResponseTemplate::new(404))
        .mount(&server)
        .await;
    let err = client(&server)
        .session()
        .head_manifest(HOST, REPO, "gone")
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("registry.test/vllm/vllm-openai:gone"), "{msg}");
}

struct Challenge(String);
impl Respond for Challenge {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        ResponseTemplate::new(401).insert_header("www-authenticate", self.0.as_str())
    }
}

fn bearer_challenge(server: &MockServer) -> Challenge {
    Challenge(format!(
        r#"Bearer realm="{}/token",service="registry.test",scope="repository:{REPO}:pull""#,
        server.uri()
    ))
}

#[tokio::test]
async fn token_flow_answers_challenge_and_caches_token() {
    let server = MockServer::start().await;
    let d = digest(b"x");
    Mock::given(method("HEAD"))
        .and(header("authorization", "Bearer tok-1"))
        .respond_with(head_ok(&d))
        .expect(2)
        .mount(&server)
        .await;
    Mock::given(method("HEAD"))
        .respond_with(bearer_challenge(&server))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/token"))
        .and(query_param("service", "registry.test"))
        .and(query_param("scope", format!("repository:{REPO}:pull")))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"token": "tok-1", "expires_in": 300})),
        )
        .expect(1)
        .mount(&server)
        .await;
    let c = client(&server);
    let s = c.session();
    assert_eq!(s.head_manifest(HOST, REPO, "a").await.unwrap().digest, d);
    assert_eq!(s.head_manifest(HOST, REPO, "b").await.unwrap().digest, d);
    let n = c.counts();
    assert_eq!(
        (n.token, n.manifest_head),
        (1, 3),
        "one token for both tags: {n:?}"
    );
}

#[tokio::test]
async fn second_401_after_a_fresh_token_is_an_error_not_a_loop() {
    let server = MockServer::start().await;
    Mock::given(method("HEAD"))
        .respond_with(bearer_challenge(&server))
        .expect(2)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/token"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"access_token": "secret-token-value"})),
        )
        .expect(1)
        .mount(&server)
        .await;
    let c = client(&server);
    let err = c
        .session()
        .head_manifest(HOST, REPO, "a")
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::Unauthorized { .. }), "{err:?}");
    assert!(
        !err.to_string().contains("secret-token-value")
            && !format!("{err:?}").contains("secret-token-value")
    );
}

#[tokio::test]
async fn basic_challenge_uses_configured_credentials_without_leaking_them() {
    let server = MockServer::start().await;
    // "bot:pa55word" in base64.
    Mock::given(method("HEAD"))
        .and(header("authorization", "Basic Ym90OnBhNTV3b3Jk"))
        .respond_with(head_ok(&digest(b"y")))
        .mount(&server)
        .await;
    Mock::given(method("HEAD"))
        .respond_with(Challenge(r#"Basic realm="r""#.into()))
        .mount(&server)
        .await;
    let mut cfg = config(&server);
    let anon = RegistryClient::new(cfg.clone()).unwrap();
    let err = anon
        .session()
        .head_manifest(HOST, REPO, "a")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("none are configured"), "{err}");

    cfg.credentials.insert(
        HOST.into(),
        BasicCredentials {
            username: "bot".into(),
            password: "pa55word".into(),
        },
    );
    assert!(!format!("{cfg:?}").contains("pa55word"));
    let c = RegistryClient::new(cfg).unwrap();
    assert_eq!(
        c.session()
            .head_manifest(HOST, REPO, "a")
            .await
            .unwrap()
            .digest,
        digest(b"y")
    );
    // Known Basic host: credentials are sent up front afterwards.
    c.session().head_manifest(HOST, REPO, "b").await.unwrap();
    assert_eq!(c.counts().manifest_head, 3);
}

#[tokio::test]
async fn token_endpoint_failure_names_the_endpoint_not_the_secret() {
    let server = MockServer::start().await;
    Mock::given(method("HEAD"))
        .respond_with(bearer_challenge(&server))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/token"))
        .and(header_exists("authorization"))
        .respond_with(ResponseTemplate::new(401))
        .mount(&server)
        .await;
    let mut cfg = config(&server);
    cfg.credentials.insert(
        HOST.into(),
        BasicCredentials {
            username: "bot".into(),
            password: "pa55word".into(),
        },
    );
    let err = RegistryClient::new(cfg)
        .unwrap()
        .session()
        .head_manifest(HOST, REPO, "a")
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("/token") && msg.contains("401") && !msg.contains("pa55word"),
        "{msg}"
    );
}

#[tokio::test]
async fn too_many_requests_honours_retry_after_then_succeeds() {
    let server = MockServer::start().await;
    let d = digest(b"z");
    Mock::given(method("HEAD"))
        .respond_with(ResponseTemplate::new(429).insert_header("retry-after", "1"))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("HEAD"))
        .respond_with(head_ok(&d))
        .with_priority(2)
        .mount(&server)
        .await;
    let c = client(&server);
    assert_eq!(
        c.session()
            .head_manifest(HOST, REPO, "a")
            .await
            .unwrap()
            .digest,
        d
    );
    assert_eq!(c.counts().manifest_head, 2);
}

#[tokio::test]
async fn server_errors_are_retried_then_reported() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(format!("/v2/{REPO}/tags/list")))
        .respond_with(ResponseTemplate::new(502))
        .up_to_n_times(2)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("/v2/{REPO}/tags/list")))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"name": REPO, "tags": ["b", "a"]})),
        )
        .with_priority(2)
        .mount(&server)
        .await;
    let c = client(&server);
    assert_eq!(
        *c.session().list_tags(HOST, REPO).await.unwrap(),
        vec!["b", "a"]
    );
    assert_eq!(c.counts().tags_list, 3);

    let always = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(503))
        .mount(&always)
        .await;
    let c = client(&always);
    let err = c.session().list_tags(HOST, REPO).await.unwrap_err();
    assert!(
        matches!(err, RegistryError::Status { status: 503, .. }),
        "{err:?}"
    );
    assert_eq!(c.counts().tags_list, 4, "one try plus max_retries = 3");
}

#[tokio::test]
async fn connection_refused_trips_the_host_breaker_without_retries() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let mut cfg = RegistryConfig::default();
    cfg.mirrors
        .insert(HOST.into(), Url::parse(&format!("http://{addr}")).unwrap());
    cfg.retry_base_delay = Duration::from_millis(1);
    cfg.max_retries = 1;
    let client = RegistryClient::new(cfg).unwrap();
    let err = client.session().list_tags(HOST, REPO).await.unwrap_err();
    assert!(err.is_unreachable(), "{err:?}");
    assert!(err.to_string().contains("not asked again before"), "{err}");
    assert_eq!(
        client.counts().tags_list,
        1,
        "a refused connection is not retried"
    );
    // The rest of the plan, and the next plans within the cooldown, fail fast.
    let again = client
        .session()
        .head_manifest(HOST, REPO, "v1")
        .await
        .unwrap_err();
    assert!(again.is_unreachable(), "{again:?}");
    assert_eq!(
        client.counts().manifest_head,
        0,
        "nothing sent to a tripped host"
    );
    let state = client.breaker_state();
    assert_eq!(state.hosts.len(), 1);
    assert_eq!(state.hosts[0].host, addr.to_string());
    // A restarted client given the persisted state does not ask either.
    let mut cfg = RegistryConfig::default();
    cfg.mirrors
        .insert(HOST.into(), Url::parse(&format!("http://{addr}")).unwrap());
    let restarted = RegistryClient::new(cfg).unwrap();
    restarted.restore_breaker(&state);
    assert!(
        restarted
            .session()
            .list_tags(HOST, REPO)
            .await
            .unwrap_err()
            .is_unreachable()
    );
    assert_eq!(restarted.counts().tags_list, 0);
}

#[tokio::test]
async fn malformed_json_names_the_document() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(format!("/v2/{REPO}/tags/list")))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw(r#"{"tags": [1, 2"#, "application/json"),
        )
        .mount(&server)
        .await;
    let idx = r#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"digest":42}]}"#;
    Mock::given(method("GET"))
        .and(path(manifest_path(&digest(idx.as_bytes()))))
        .respond_with(ResponseTemplate::new(200).set_body_raw(idx, OCI_INDEX))
        .mount(&server)
        .await;
    let c = client(&server);
    let err = c.session().list_tags(HOST, REPO).await.unwrap_err();
    assert!(err.to_string().contains("invalid tag list JSON"), "{err}");
    let err = c
        .session()
        .image_details(HOST, REPO, &digest(idx.as_bytes()))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("manifest JSON at `manifests[0].digest`"),
        "{err}"
    );
}

#[tokio::test]
async fn huge_bodies_are_rejected() {
    let server = MockServer::start().await;
    let big = format!(r#"{{"tags":["{}"]}}"#, "a".repeat(10_000));
    Mock::given(method("GET"))
        .and(path(format!("/v2/{REPO}/tags/list")))
        .respond_with(ResponseTemplate::new(200).set_body_raw(big, "application/json"))
        .mount(&server)
        .await;
    let big_manifest = "x".repeat(5000);
    let d = digest(big_manifest.as_bytes());
    Mock::given(method("GET"))
        .and(path(manifest_path(&d)))
        .respond_with(ResponseTemplate::new(200).set_body_raw(big_manifest, OCI_MANIFEST))
        .mount(&server)
        .await;
    let mut cfg = config(&server);
    cfg.max_tag_list_bytes = 4096;
    cfg.max_manifest_bytes = 4096;
    let c = RegistryClient::new(cfg).unwrap();
    let err = c.session().list_tags(HOST, REPO).await.unwrap_err();
    assert!(
        matches!(err, RegistryError::TooLarge { limit: 4096, .. }),
        "{err:?}"
    );
    let err = c.session().image_details(HOST, REPO, &d).await.unwrap_err();
    assert!(matches!(err, RegistryError::TooLarge { .. }), "{err:?}");
}

#[tokio::test]
async fn tag_pages_follow_absolute_and_relative_links_without_assuming_order() {
    let server = MockServer::start().await;
    let base = format!("/v2/{REPO}/tags/list");
    Mock::given(method("GET"))
        .and(path(base.clone()))
        .and(query_param("last", "m"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"tags": ["z", "c"]})))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(base.clone()))
        .and(query_param("last", "b"))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("link", format!(r#"<{base}?n=2&last=m>; rel="next""#))
                .set_body_json(json!({"tags": ["m", "b"]})),
        )
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(base.clone()))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header(
                    "link",
                    format!(r#"<{}{base}?n=2&last=b>; rel="next""#, server.uri()),
                )
                .set_body_json(json!({"tags": ["x", "b"]})),
        )
        .with_priority(10)
        .mount(&server)
        .await;
    let c = client(&server);
    let tags = c.session().list_tags(HOST, REPO).await.unwrap();
    assert_eq!(
        *tags,
        vec!["x", "b", "m", "z", "c"],
        "registry order kept, duplicates dropped"
    );
    assert_eq!(c.counts().tags_list, 3);

    let mut cfg = config(&server);
    cfg.max_tag_pages = 2;
    let err = RegistryClient::new(cfg)
        .unwrap()
        .session()
        .list_tags(HOST, REPO)
        .await
        .unwrap_err();
    assert!(
        matches!(err, RegistryError::TooManyPages { limit: 2, .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn link_to_another_origin_is_refused() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header(
                    "link",
                    r#"<http://203.0.113.9/v2/x/tags/list?last=a>; rel="next""#,
                )
                .set_body_json(json!({"tags": ["a"]})),
        )
        .mount(&server)
        .await;
    let err = client(&server)
        .session()
        .list_tags(HOST, REPO)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("leaves the origin"), "{err}");
}

#[tokio::test]
async fn docker_hub_tags_api_pages_with_next() {
    let server = MockServer::start().await;
    let api = "/v2/namespaces/vllm/repositories/vllm-openai/tags".to_string();
    Mock::given(method("GET"))
        .and(path(api.clone()))
        .and(query_param("page", "2"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "count": 3, "next": null,
            "results": [{"name": "v0.1.0", "tag_last_pushed": "2025-01-01T00:00:00.000000Z"}]
        })))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(api.clone()))
        .and(query_param("page_size", "100"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "count": 3, "next": format!("{}{api}?page=2&page_size=100", server.uri()),
            "results": [
                {"name": "nightly-abc", "tag_last_pushed": "2026-03-02T10:11:12.123456Z"},
                {"name": "never-pushed", "tag_last_pushed": null}
            ]
        })))
        .with_priority(10)
        .mount(&server)
        .await;
    let c = client(&server);
    let s = c.session();
    let times = s
        .hub_push_times("docker.io", "vllm/vllm-openai")
        .await
        .unwrap()
        .expect("hub knows the repo");
    assert_eq!(times.len(), 2);
    assert_eq!(
        times["nightly-abc"].to_rfc3339(),
        "2026-03-02T10:11:12.123456+00:00"
    );
    assert!(
        s.hub_push_times("docker.io", "vllm/vllm-openai")
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(c.counts().hub_api, 2, "memoized per session");
    assert!(
        s.hub_push_times("nvcr.io", "nvidia/x")
            .await
            .unwrap()
            .is_none(),
        "not Docker Hub"
    );
}

#[tokio::test]
async fn docker_hub_unknown_repository_is_none_and_bad_time_is_an_error() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v2/namespaces/a/repositories/missing/tags"))
        .respond_with(ResponseTemplate::new(404))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/v2/namespaces/a/repositories/bad/tags"))
        .respond_with(ResponseTemplate::new(200).set_body_json(
            json!({"next": null, "results": [{"name": "t", "tag_last_pushed": "yesterday"}]}),
        ))
        .mount(&server)
        .await;
    let s = client(&server).session();
    assert!(
        s.hub_push_times("docker.io", "a/missing")
            .await
            .unwrap()
            .is_none()
    );
    let err = s.hub_push_times("docker.io", "a/bad").await.unwrap_err();
    assert!(err.to_string().contains("tag_last_pushed"), "{err}");
}

fn index_fixture(server_blobs: &mut Vec<(String, String, &'static str)>) -> String {
    // Two platforms plus a buildx attestation entry that must be ignored.
    let mut entries = Vec::new();
    for (arch, rev) in [("amd64", "aaa"), ("arm64", "bbb")] {
        let cfg = json!({"architecture": arch, "os": "linux", "created": "2026-02-01T12:00:00Z",
            "config": {"Labels": {"org.opencontainers.image.revision": rev}}})
        .to_string();
        let man = json!({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(cfg.as_bytes()), "size": cfg.len()},
            "layers": []})
        .to_string();
        entries.push(
            json!({"mediaType": OCI_MANIFEST, "digest": digest(man.as_bytes()), "size": man.len(),
            "platform": {"os": "linux", "architecture": arch}}),
        );
        server_blobs.push((
            format!("/v2/{REPO}/blobs/{}", digest(cfg.as_bytes())),
            cfg,
            "application/octet-stream",
        ));
        server_blobs.push((manifest_path(&digest(man.as_bytes())), man, OCI_MANIFEST));
    }
    entries.push(
        json!({"mediaType": OCI_MANIFEST, "digest": digest(b"att"), "size": 3,
        "platform": {"os": "unknown", "architecture": "unknown"}}),
    );
    json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}).to_string()
}

#[tokio::test]
async fn image_details_are_cached_by_digest_across_sessions() {
    let server = MockServer::start().await;
    let mut docs = Vec::new();
    let index = index_fixture(&mut docs);
    let d = digest(index.as_bytes());
    docs.push((manifest_path(&d), index, OCI_INDEX));
    for (p, body, ct) in docs {
        Mock::given(method("GET"))
            .and(path(p))
            .respond_with(ResponseTemplate::new(200).set_body_raw(body, ct))
            .expect(1)
            .mount(&server)
            .await;
    }
    let c = client(&server);
    let details = c.session().image_details(HOST, REPO, &d).await.unwrap();
    assert_eq!(details.media_type, OCI_INDEX);
    let arches: Vec<_> = details
        .platforms
        .iter()
        .map(|p| p.architecture.as_str())
        .collect();
    assert_eq!(arches, ["amd64", "arm64"]);
    assert_eq!(
        details.platform("linux", "arm64").unwrap().labels["org.opencontainers.image.revision"],
        "bbb"
    );
    assert_eq!(
        details.platforms[0].created.unwrap().to_rfc3339(),
        "2026-02-01T12:00:00+00:00"
    );
    let again = c.session().image_details(HOST, REPO, &d).await.unwrap();
    assert!(Arc::ptr_eq(&details, &again));
    let n = c.counts();
    assert_eq!((n.manifest_get, n.blob_get), (3, 2), "{n:?}");
}

#[tokio::test]
async fn content_that_does_not_match_its_digest_is_rejected() {
    let server = MockServer::start().await;
    let claimed = digest(b"the real thing");
    Mock::given(method("GET"))
        .and(path(manifest_path(&claimed)))
        .respond_with(ResponseTemplate::new(200).set_body_raw(r#"{"manifests":[]}"#, OCI_INDEX))
        .mount(&server)
        .await;
    let err = client(&server)
        .session()
        .image_details(HOST, REPO, &claimed)
        .await
        .unwrap_err();
    assert!(
        matches!(err, RegistryError::DigestMismatch { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn concurrent_lookups_share_one_request() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"tags": ["a"]}))
                .set_delay(Duration::from_millis(50)),
        )
        .mount(&server)
        .await;
    Mock::given(method("HEAD"))
        .respond_with(head_ok(&digest(b"q")).set_delay(Duration::from_millis(50)))
        .mount(&server)
        .await;
    let c = client(&server);
    let s = c.session();
    let tags = futures::future::join_all((0..20).map(|_| s.list_tags(HOST, REPO))).await;
    let heads = futures::future::join_all((0..20).map(|_| s.head_manifest(HOST, REPO, "a"))).await;
    assert!(tags.iter().all(|t| t.is_ok()) && heads.iter().all(|h| h.is_ok()));
    let n = c.counts();
    assert_eq!((n.tags_list, n.manifest_head), (1, 1), "{n:?}");
    // A new session asks again: tags and tag heads can move between plans.
    c.session().list_tags(HOST, REPO).await.unwrap();
    assert_eq!(c.counts().tags_list, 2);
}

#[tokio::test]
async fn invalid_names_never_reach_the_network() {
    let server = MockServer::start().await;
    let c = client(&server);
    let s = c.session();
    for (repo, reference) in [
        ("../x", "t"),
        ("a/b", "../../v2/_catalog"),
        ("a/b", "t?x=1"),
        ("A/b", "t"),
    ] {
        let err = s.head_manifest(HOST, repo, reference).await.unwrap_err();
        assert!(matches!(err, RegistryError::Invalid { .. }), "{err:?}");
    }
    assert_eq!(c.counts().total(), 0);
}

#[tokio::test]
async fn a_body_cut_off_mid_stream_is_fetched_again() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&served);
    let body = r#"{"name":"vllm/vllm-openai","tags":["v1","v2"]}"#;
    let server = tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let n = counter.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = sock.read(&mut buf).await;
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = sock.write_all(head.as_bytes()).await;
            // The first answer stops after a few bytes and drops the connection.
            let payload = if n == 0 { &body[..5] } else { body };
            let _ = sock.write_all(payload.as_bytes()).await;
            let _ = sock.shutdown().await;
        }
    });
    let mut cfg = RegistryConfig::default();
    cfg.mirrors
        .insert(HOST.into(), Url::parse(&format!("http://{addr}")).unwrap());
    cfg.retry_base_delay = Duration::from_millis(1);
    let c = RegistryClient::new(cfg).unwrap();
    let tags = c.session().list_tags(HOST, REPO).await.unwrap();
    assert_eq!(*tags, vec!["v1", "v2"]);
    assert_eq!(served.load(Ordering::SeqCst), 2);
    assert_eq!(c.counts().tags_list, 2);
    server.abort();
}

#[tokio::test]
async fn requests_challenged_together_share_one_token_fetch() {
    let server = MockServer::start().await;
    Mock::given(method("HEAD"))
        .and(header("authorization", "Bearer shared"))
        .respond_with(head_ok(&digest(b"s")).set_delay(Duration::from_millis(20)))
        .mount(&server)
        .await;
    Mock::given(method("HEAD"))
        .respond_with(bearer_challenge(&server))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/token"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"token": "shared"}))
                .set_delay(Duration::from_millis(50)),
        )
        .mount(&server)
        .await;
    let c = client(&server);
    let s = c.session();
    let tags: Vec<String> = (0..12).map(|i| format!("t{i}")).collect();
    let all = futures::future::join_all(tags.iter().map(|t| s.head_manifest(HOST, REPO, t))).await;
    assert!(all.iter().all(|r| r.is_ok()), "{all:?}");
    assert_eq!(c.counts().token, 1, "{:?}", c.counts());
}

#[tokio::test]
async fn a_failed_image_lookup_is_not_repeated_within_a_plan() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(500))
        .mount(&server)
        .await;
    let mut cfg = config(&server);
    cfg.max_retries = 1;
    let c = RegistryClient::new(cfg).unwrap();
    let s = c.session();
    let d = digest(b"broken");
    for _family in 0..3 {
        let err = s.image_details(HOST, REPO, &d).await.unwrap_err();
        assert!(
            matches!(err, RegistryError::Status { status: 500, .. }),
            "{err:?}"
        );
    }
    assert_eq!(
        c.counts().manifest_get,
        2,
        "one try and one retry, shared by all families"
    );
    // The next plan tries again: the failure may have been transient.
    assert!(c.session().image_details(HOST, REPO, &d).await.is_err());
    assert_eq!(c.counts().manifest_get, 4);
}

#[tokio::test]
async fn mirrors_may_carry_a_path_prefix() {
    let server = MockServer::start().await;
    Mock::given(method("HEAD"))
        .and(path(format!("/mirror/docker/v2/{REPO}/manifests/v1")))
        .respond_with(head_ok(&digest(b"m")))
        .expect(1)
        .mount(&server)
        .await;
    let mut cfg = RegistryConfig::default();
    cfg.mirrors.insert(
        "docker.io".into(),
        Url::parse(&format!("{}/mirror/docker/", server.uri())).unwrap(),
    );
    let c = RegistryClient::new(cfg).unwrap();
    let head = c
        .session()
        .head_manifest("docker.io", REPO, "v1")
        .await
        .unwrap();
    assert_eq!(head.digest, digest(b"m"));
}

/// Every image written in the real InferenceX masters passes the client's
/// name checks (host, repository, tag, digest) and reaches the registry.
#[tokio::test]
async fn every_fixture_image_name_is_accepted() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/inferencex/full/configs");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "fixtures missing at {}",
            dir.display()
        );
        eprintln!(
            "\n!!!!! SKIP every_fixture_image_name_is_accepted: no fixtures at {} !!!!!\n",
            dir.display()
        );
        return;
    };
    let mut images = std::collections::BTreeSet::new();
    for e in entries {
        let p = e.unwrap().path();
        if !p
            .file_name()
            .unwrap()
            .to_string_lossy()
            .ends_with("-master.yaml")
        {
            continue;
        }
        for line in std::fs::read_to_string(&p).unwrap().lines() {
            if let Some(v) = line.trim_start().strip_prefix("image:") {
                images.insert(v.trim().trim_matches('"').trim_matches('\'').to_owned());
            }
        }
    }
    assert!(images.len() > 50, "found only {} images", images.len());
    let server = MockServer::start().await;
    Mock::given(method("HEAD"))
        .respond_with(head_ok(&digest(b"any")))
        .mount(&server)
        .await;
    let mut cfg = config(&server);
    for host in ["nvcr.io", "ghcr.io", "quay.io"] {
        cfg.mirrors
            .insert(host.into(), Url::parse(&server.uri()).unwrap());
    }
    let c = RegistryClient::new(cfg).unwrap();
    let s = c.session();
    for image in &images {
        // Enough reference parsing for this check; the planner owns the real parser.
        let image = image.replacen('#', "/", 1);
        let (name, pinned) = match image.split_once('@') {
            Some((n, d)) => (n.to_owned(), Some(d.to_owned())),
            None => (image.clone(), None),
        };
        let (name, tag) = name.rsplit_once(':').expect("tagged");
        let (host, repo) = match name.split_once('/') {
            Some((h, r)) if h.contains('.') => (h.to_owned(), r.to_owned()),
            _ => ("docker.io".to_owned(), name.to_owned()),
        };
        s.head_manifest(&host, &repo, tag)
            .await
            .unwrap_or_else(|e| panic!("{image}: {e}"));
        if let Some(d) = pinned {
            // The mock answers one digest for everything: reaching it and
            // being caught by the digest check proves the name was accepted.
            let err = s.head_manifest(&host, &repo, &d).await.unwrap_err();
            assert!(
                matches!(err, RegistryError::DigestMismatch { .. }),
                "{image}: {err}"
            );
        }
    }
}

/// Serves each document at its path, slowly enough that concurrent callers
/// overlap; the client's counters say what was sent.
async fn serve(server: &MockServer, docs: Vec<(String, String, &'static str)>) {
    for (p, body, ct) in docs {
        Mock::given(method("GET"))
            .and(path(p))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_body_raw(body, ct)
                    .set_delay(Duration::from_millis(20)),
            )
            .mount(server)
            .await;
    }
}

#[tokio::test]
async fn a_family_reads_the_index_and_only_its_own_platform() {
    let server = MockServer::start().await;
    let mut docs = Vec::new();
    let index = index_fixture(&mut docs);
    let d = digest(index.as_bytes());
    docs.push((manifest_path(&d), index, OCI_INDEX));
    serve(&server, docs).await;
    let c = client(&server);
    let s = c.session();
    let gets = |c: &RegistryClient| (c.counts().manifest_get, c.counts().blob_get);

    let image = s.image_platforms(HOST, REPO, &d).await.unwrap();
    assert_eq!(image.media_type, OCI_INDEX);
    assert_eq!(image.names(), ["linux/amd64", "linux/arm64"]);
    assert_eq!(gets(&c), (1, 0), "the index alone names the platforms");

    // Two amd64 families at once: one platform manifest, one config.
    let amd64 = image.platform("linux", "amd64").unwrap();
    let family = || async {
        let image = s.image_platforms(HOST, REPO, &d).await?;
        let platform = image.platform("linux", "amd64").cloned();
        s.platform_image(HOST, REPO, &platform.unwrap_or_else(|| amd64.clone()))
            .await
    };
    let (a, b) = tokio::join!(family(), family());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.labels["org.opencontainers.image.revision"], "aaa");
    assert_eq!(a.created.unwrap().to_rfc3339(), "2026-02-01T12:00:00+00:00");
    assert_eq!((a.os.as_str(), a.architecture.as_str()), ("linux", "amd64"));
    assert_eq!(a.digest, amd64.digest);
    assert_eq!(a, b);
    assert_eq!(gets(&c), (2, 1), "{:?}", c.counts());

    // An arm64 family on the same tag reads its own platform.
    let arm64 = image.platform("linux", "arm64").unwrap();
    let p = s.platform_image(HOST, REPO, arm64).await.unwrap();
    assert_eq!(p.labels["org.opencontainers.image.revision"], "bbb");
    assert_eq!(gets(&c), (3, 2), "{:?}", c.counts());

    // The next plan and the all-platforms view come from the caches.
    let next = c.session();
    let again = next.image_platforms(HOST, REPO, &d).await.unwrap();
    assert_eq!(again, image);
    next.platform_image(HOST, REPO, arm64).await.unwrap();
    let details = next.image_details(HOST, REPO, &d).await.unwrap();
    assert_eq!(details.platforms.len(), 2);
    assert_eq!(details.platform("linux", "amd64").unwrap(), &*a);
    assert_eq!(details.platform("linux", "arm64").unwrap(), &*p);
    assert_eq!(gets(&c), (3, 2), "{:?}", c.counts());
}

#[tokio::test]
async fn a_single_platform_image_is_read_once() {
    let server = MockServer::start().await;
    let cfg = json!({"architecture": "arm64", "os": "linux", "variant": "v8",
        "config": {"Labels": {"k": "v"}}})
    .to_string();
    let man = json!({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST,
        "config": {"digest": digest(cfg.as_bytes()), "size": cfg.len()}, "layers": []})
    .to_string();
    let d = digest(man.as_bytes());
    serve(
        &server,
        vec![
            (manifest_path(&d), man, DOCKER_MANIFEST),
            (
                format!("/v2/{REPO}/blobs/{}", digest(cfg.as_bytes())),
                cfg,
                "application/octet-stream",
            ),
        ],
    )
    .await;
    let c = client(&server);
    let s = c.session();
    let image = s.image_platforms(HOST, REPO, &d).await.unwrap();
    assert_eq!(image.media_type, DOCKER_MANIFEST);
    assert_eq!(image.names(), ["linux/arm64"]);
    let only = &image.platforms[0];
    assert_eq!(
        (only.digest.as_str(), only.variant.as_deref()),
        (d.as_str(), Some("v8"))
    );
    // Its platform is only known from its config, read once for both.
    let p = s.platform_image(HOST, REPO, only).await.unwrap();
    assert_eq!(p.labels["k"], "v");
    assert_eq!(p.created, None);
    let n = c.counts();
    assert_eq!((n.manifest_get, n.blob_get), (1, 1), "{n:?}");
}

#[tokio::test]
async fn a_broken_platform_spoils_only_the_families_that_run_on_it() {
    let server = MockServer::start().await;
    let mut docs = Vec::new();
    let index = index_fixture(&mut docs);
    let d = digest(index.as_bytes());
    docs.push((manifest_path(&d), index, OCI_INDEX));
    // The arm64 manifest is served with bytes that do not hash to its digest.
    let arm64_manifest = docs
        .iter()
        .filter(|(p, _, ct)| p.contains("/manifests/") && *ct == OCI_MANIFEST)
        .nth(1)
        .map(|(p, _, _)| p.clone())
        .unwrap();
    for doc in &mut docs {
        if doc.0 == arm64_manifest {
            doc.1 = json!({"schemaVersion": 2, "config": {"digest": digest(b"x")}}).to_string();
        }
    }
    serve(&server, docs).await;
    let c = client(&server);
    let s = c.session();
    let image = s.image_platforms(HOST, REPO, &d).await.unwrap();
    let amd64 = image.platform("linux", "amd64").unwrap();
    let arm64 = image.platform("linux", "arm64").unwrap();
    assert!(arm64_manifest.ends_with(&arm64.digest));
    let ok = s.platform_image(HOST, REPO, amd64).await.unwrap();
    assert_eq!(ok.labels["org.opencontainers.image.revision"], "aaa");
    let err = s.platform_image(HOST, REPO, arm64).await.unwrap_err();
    assert!(
        matches!(err, RegistryError::DigestMismatch { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains(&arm64.digest), "{err}");
    // The all-platforms view needs every platform, so it fails as a whole.
    let err = s.image_details(HOST, REPO, &d).await.unwrap_err();
    assert!(
        matches!(err, RegistryError::DigestMismatch { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_malformed_index_entry_is_an_error_before_any_platform_is_read() {
    let server = MockServer::start().await;
    let idx = json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {"mediaType": OCI_MANIFEST, "digest": digest(b"fine"), "platform": {"os": "linux", "architecture": "amd64"}},
        {"mediaType": OCI_MANIFEST, "digest": "sha256:../../x", "platform": {"os": "linux", "architecture": "arm64"}}
    ]})
    .to_string();
    let d = digest(idx.as_bytes());
    serve(&server, vec![(manifest_path(&d), idx, OCI_INDEX)]).await;
    let c = client(&server);
    let err = c
        .session()
        .image_platforms(HOST, REPO, &d)
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::Invalid { .. }), "{err:?}");
    assert!(err.to_string().contains("index entry `digest`"), "{err}");
    assert_eq!(c.counts().manifest_get, 1);
    // A platform reference that was never in an index is checked too.
    let forged = klaud_planner::registry::PlatformRef {
        os: "linux".into(),
        architecture: "amd64".into(),
        variant: None,
        digest: "sha256:../../v2/_catalog".into(),
    };
    let err = c
        .session()
        .platform_image(HOST, REPO, &forged)
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::Invalid { .. }), "{err:?}");
    assert_eq!(c.counts().total(), 1);
}

#[tokio::test]
async fn api_base_check_accepts_200_and_answerable_challenges_only() {
    use klaud_planner::registry::{ApiBase, Challenge};
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v2/"))
        .respond_with(ResponseTemplate::new(200).set_body_string("{}"))
        .expect(1)
        .mount(&server)
        .await;
    assert_eq!(
        client(&server).check_api_base(HOST).await.unwrap(),
        ApiBase::Open
    );

    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v2/"))
        .respond_with(ResponseTemplate::new(401).insert_header(
            "www-authenticate",
            "Bearer realm=\"https://auth.test/token\",service=\"registry.test\"",
        ))
        .mount(&server)
        .await;
    match client(&server).check_api_base(HOST).await.unwrap() {
        ApiBase::Challenge(Challenge::Bearer { realm, .. }) => {
            assert_eq!(realm, "https://auth.test/token")
        }
        other => panic!("expected a bearer challenge, got {other:?}"),
    }

    // A 401 without a challenge, a garbled challenge and a 404 (not a
    // registry at that URL) are errors that name the host.
    for response in [
        ResponseTemplate::new(401),
        ResponseTemplate::new(401).insert_header("www-authenticate", "Negotiate"),
        ResponseTemplate::new(404),
    ] {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path("/v2/"))
            .respond_with(response)
            .mount(&server)
            .await;
        let err = client(&server).check_api_base(HOST).await.unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("registry.test:"), "{text}");
    }
}

#[tokio::test]
async fn api_base_check_of_a_closed_port_is_unreachable() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut c = RegistryConfig::default();
    c.mirrors.insert(
        HOST.into(),
        Url::parse(&format!("http://127.0.0.1:{port}")).unwrap(),
    );
    c.retry_base_delay = Duration::from_millis(1);
    c.max_retries = 1;
    let err = RegistryClient::new(c)
        .unwrap()
        .check_api_base(HOST)
        .await
        .unwrap_err();
    assert!(err.is_unreachable(), "{err}");
    assert!(err.to_string().contains("unreachable"), "{err}");
}

fn index_body() -> String {
    json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {"mediaType": OCI_MANIFEST, "digest": digest(b"amd64"), "size": 1,
         "platform": {"os": "linux", "architecture": "amd64"}}
    ]})
    .to_string()
}

#[tokio::test]
async fn a_tag_read_next_is_resolved_by_one_get_and_later_only_headed() {
    let server = MockServer::start().await;
    let body = index_body();
    let d = digest(body.as_bytes());
    Mock::given(method("GET"))
        .and(path(manifest_path("v1")))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("docker-content-digest", d.as_str())
                .set_body_raw(body.clone(), OCI_INDEX),
        )
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("HEAD"))
        .and(path(manifest_path("v1")))
        .respond_with(head_ok(&d))
        .expect(1)
        .mount(&server)
        .await;
    let c = client(&server);
    let head = c
        .session()
        .resolve_for_read(HOST, REPO, "v1")
        .await
        .unwrap();
    assert_eq!(
        (head.digest.as_str(), head.media_type.as_str()),
        (d.as_str(), OCI_INDEX)
    );
    // The index came with the GET: reading it costs nothing.
    let image = c.image_platforms(HOST, REPO, &d).await.unwrap();
    assert_eq!(image.platforms.len(), 1);
    assert_eq!((c.counts().manifest_get, c.counts().manifest_head), (1, 0));
    // A new plan: the tag's index is held, so a HEAD says whether it moved.
    let again = c
        .session()
        .resolve_for_read(HOST, REPO, "v1")
        .await
        .unwrap();
    assert_eq!(again.digest, d);
    assert_eq!((c.counts().manifest_get, c.counts().manifest_head), (1, 1));
}

#[tokio::test]
async fn a_tag_get_whose_bytes_do_not_hash_to_the_header_digest_is_refused() {
    let server = MockServer::start().await;
    let body = index_body();
    let claimed = digest(b"something else");
    Mock::given(method("GET"))
        .and(path(manifest_path("v1")))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("docker-content-digest", claimed.as_str())
                .set_body_raw(body, OCI_INDEX),
        )
        .mount(&server)
        .await;
    let c = client(&server);
    let err = c
        .session()
        .resolve_for_read(HOST, REPO, "v1")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RegistryError::DigestMismatch { expected, .. } if *expected == claimed),
        "{err:?}"
    );
    // Nothing was cached under either digest.
    assert!(c.image_platforms(HOST, REPO, &claimed).await.is_err());
}

/// Docker Hub's pull-limit headers (its documented `<count>;w=<seconds>`).
fn with_quota(t: ResponseTemplate, remaining: u64) -> ResponseTemplate {
    t.insert_header("ratelimit-limit", "100;w=21600")
        .insert_header(
            "ratelimit-remaining",
            format!("{remaining};w=21600").as_str(),
        )
}

#[tokio::test]
async fn a_429_toomanyrequests_is_out_of_quota_until_the_window_turns_not_retried_or_a_family_error()
 {
    let server = MockServer::start().await;
    let d = digest(b"index");
    // Docker Hub's answer once the pulls of the window are spent.
    Mock::given(method("GET"))
        .and(path(manifest_path(&d)))
        .respond_with(with_quota(ResponseTemplate::new(429), 0).set_body_json(json!({
            "errors": [{"code": "TOOMANYREQUESTS", "message": "You have reached your unauthenticated pull rate limit."}]
        })))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("HEAD"))
        .respond_with(head_ok(&d))
        .expect(0)
        .mount(&server)
        .await;
    let c = client(&server);
    let before = chrono::Utc::now();
    let err = c
        .session()
        .image_platforms(HOST, REPO, &d)
        .await
        .unwrap_err();
    assert!(err.is_unreachable(), "{err:?}");
    assert!(
        err.to_string()
            .contains("out of pull quota (0 of 100 pulls left per 6 h)"),
        "{err}"
    );
    assert_eq!(
        c.counts().manifest_get,
        1,
        "a spent quota is not asked again"
    );
    // Nothing more goes to the host until the window turns: the rest of
    // the plan leaves its families for later.
    let again = c
        .session()
        .head_manifest(HOST, REPO, "v1")
        .await
        .unwrap_err();
    assert!(again.is_unreachable(), "{again:?}");
    let state = c.breaker_state();
    assert_eq!(state.hosts.len(), 1, "{state:?}");
    let hours = (state.hosts[0].until - before).num_minutes() as f64 / 60.0;
    assert!((5.9..=6.1).contains(&hours), "{hours} h");
    assert_eq!(
        c.pull_quotas().values().next().map(|q| q.remaining),
        Some(0)
    );
}

#[tokio::test]
async fn the_last_pull_of_the_window_stops_manifest_gets_before_the_registry_refuses() {
    let server = MockServer::start().await;
    let mut docs = Vec::new();
    let index = index_fixture(&mut docs);
    let d = digest(index.as_bytes());
    Mock::given(method("GET"))
        .and(path(manifest_path(&d)))
        .respond_with(with_quota(ResponseTemplate::new(200), 0).set_body_raw(index, OCI_INDEX))
        .expect(1)
        .mount(&server)
        .await;
    // HEAD is free on Docker Hub: still answered, still stating the quota.
    Mock::given(method("HEAD"))
        .respond_with(with_quota(head_ok(&d), 0))
        .mount(&server)
        .await;
    let other = digest(b"another index");
    Mock::given(method("GET"))
        .and(path(manifest_path(&other)))
        .respond_with(ResponseTemplate::new(500))
        .expect(0)
        .mount(&server)
        .await;
    let c = client(&server);
    let s = c.session();
    s.image_platforms(HOST, REPO, &d).await.unwrap();
    let quota = c.pull_quotas().into_values().next().expect("stated");
    assert_eq!(
        (quota.limit, quota.remaining, quota.window_secs),
        (100, 0, 21600)
    );
    // What a plan's reads of undated Docker Hub tags are capped by, asked
    // by the host as image references name it.
    assert_eq!(c.pulls_left(HOST), Some(0));
    assert_eq!(c.pulls_left("ghcr.io"), None);
    let err = s.image_platforms(HOST, REPO, &other).await.unwrap_err();
    assert!(
        err.is_unreachable() && err.to_string().contains("out of pull quota"),
        "{err}"
    );
    assert_eq!(
        c.counts().manifest_get,
        1,
        "the refused pull was never sent"
    );
}

#[tokio::test]
async fn a_429_from_a_registry_without_a_quota_is_a_passing_overload_and_retried() {
    // Unchanged behaviour for registries that state no quota (NGC, GHCR).
    let server = MockServer::start().await;
    let d = digest(b"z");
    Mock::given(method("HEAD"))
        .respond_with(ResponseTemplate::new(429))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("HEAD"))
        .respond_with(head_ok(&d))
        .with_priority(2)
        .mount(&server)
        .await;
    let c = client(&server);
    assert_eq!(
        c.session()
            .head_manifest(HOST, REPO, "a")
            .await
            .unwrap()
            .digest,
        d
    );
    assert!(c.breaker_state().hosts.is_empty());
}

#[tokio::test]
async fn a_spent_quota_window_is_not_held_against_the_next() {
    let server = MockServer::start().await;
    let mut docs = Vec::new();
    let index = index_fixture(&mut docs);
    let d = digest(index.as_bytes());
    // A one-second window, spent by this pull.
    Mock::given(method("GET"))
        .and(path(manifest_path(&d)))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("ratelimit-limit", "100;w=1")
                .insert_header("ratelimit-remaining", "0;w=1")
                .set_body_raw(index.clone(), OCI_INDEX),
        )
        .mount(&server)
        .await;
    let other = digest(b"another index");
    Mock::given(method("GET"))
        .and(path(manifest_path(&other)))
        .respond_with(ResponseTemplate::new(404))
        .mount(&server)
        .await;
    let c = client(&server);
    c.image_platforms(HOST, REPO, &d).await.unwrap();
    let spent = c.image_platforms(HOST, REPO, &other).await.unwrap_err();
    assert!(spent.to_string().contains("out of pull quota"), "{spent}");
    assert_eq!(c.counts().manifest_get, 1);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // The next window: the pull is sent (and answered, here 404).
    let answered = c.image_platforms(HOST, REPO, &other).await.unwrap_err();
    assert!(
        !answered.to_string().contains("out of pull quota"),
        "{answered}"
    );
    assert_eq!(c.counts().manifest_get, 2);
}

#[tokio::test]
async fn a_hostile_quota_window_is_read_without_panicking() {
    let server = MockServer::start().await;
    let d = digest(b"index");
    Mock::given(method("GET"))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("ratelimit-limit", "100;w=18446744073709551615")
                .insert_header("ratelimit-remaining", "0;w=18446744073709551615")
                .insert_header("retry-after", "99999999999999999999"),
        )
        .mount(&server)
        .await;
    let c = client(&server);
    let err = c.image_platforms(HOST, REPO, &d).await.unwrap_err();
    assert!(err.to_string().contains("out of pull quota"), "{err}");
    let again = c
        .image_platforms(HOST, REPO, &digest(b"other"))
        .await
        .unwrap_err();
    assert!(again.is_unreachable(), "{again}");
}

/// A checkout with one family on `registry.test/vllm/vllm-openai:v0.5.0`.
fn one_family_checkout() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("configs")).unwrap();
    std::fs::write(
        dir.path().join("configs/x-master.yaml"),
        format!(
            "fam:\n  image: {HOST}/{REPO}:v0.5.0\n  model: m\n  model-prefix: m\n  runner: h200\n  precision: fp8\n  framework: vllm\n  multinode: false\n"
        ),
    )
    .unwrap();
    dir
}

/// `{"tags": null}` (or an empty list) is not a 404: the current tag's own
/// HEAD decides whether it is pruned, and a listing with nothing in it is
/// said as such instead of "up to date" or "pruned".
#[tokio::test]
async fn a_null_tag_list_is_not_a_pruned_tag() {
    use klaud_planner::plan::{PlanOptions, Status, plan};
    for (tags, head_status) in [
        (json!({"name": REPO, "tags": null}), 200),
        (json!({"name": REPO, "tags": []}), 200),
        (json!({"name": REPO, "tags": null}), 404),
    ] {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path(format!("/v2/{REPO}/tags/list")))
            .respond_with(ResponseTemplate::new(200).set_body_json(&tags))
            .mount(&server)
            .await;
        let template = match head_status {
            200 => head_ok(&digest(b"index")),
            status => ResponseTemplate::new(status),
        };
        Mock::given(method("HEAD"))
            .and(path(manifest_path("v0.5.0")))
            .respond_with(template)
            .expect(1)
            .mount(&server)
            .await;
        let dir = one_family_checkout();
        let repository = klaud_planner::repo::Repository::open(dir.path()).unwrap();
        let c = client(&server);
        let report = plan(
            &repository,
            &c.session(),
            &PlanOptions::new(chrono::Utc::now()),
        )
        .await;
        let [family] = &report.families[..] else {
            panic!("{:?}", report.families);
        };
        let reasons = family.reasons.join("; ");
        if head_status == 200 {
            assert_eq!(family.status, Status::Error, "{tags}: {reasons}");
            assert!(
                reasons.contains("lists no tags") && !reasons.contains("pruned;"),
                "{tags}: {reasons}"
            );
            assert!(!reasons.contains("gone from the registry"), "{reasons}");
        } else {
            assert_eq!(family.status, Status::StalePruned, "{reasons}");
            assert!(reasons.contains("gone from the registry"), "{reasons}");
        }
        assert!(family.candidate.is_none());
    }
}

#[tokio::test]
async fn concurrent_pulls_never_exceed_the_remaining_quota_stated() {
    let server = MockServer::start().await;
    let d = digest(b"index");
    // A free HEAD states 2 pulls left; every pull answers slowly, so the
    // plan's concurrent reads are all on their way before any answer.
    Mock::given(method("HEAD"))
        .respond_with(with_quota(head_ok(&d), 2))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .respond_with(
            with_quota(ResponseTemplate::new(404), 1).set_delay(Duration::from_millis(300)),
        )
        .mount(&server)
        .await;
    let c = client(&server);
    let s = c.session();
    s.head_manifest(HOST, REPO, "v1").await.unwrap();
    let digests: Vec<String> = (0..6)
        .map(|i| digest(format!("index {i}").as_bytes()))
        .collect();
    let reads = digests.iter().map(|d| s.image_platforms(HOST, REPO, d));
    let results = futures::future::join_all(reads).await;
    let refused = results
        .iter()
        .filter(|r| {
            r.as_ref()
                .is_err_and(|e| e.to_string().contains("out of pull quota"))
        })
        .count();
    assert!(
        c.counts().manifest_get <= 2,
        "{} pulls sent with 2 left",
        c.counts().manifest_get
    );
    assert_eq!(refused as u64 + c.counts().manifest_get, 6);
}

#[tokio::test]
async fn a_kept_tag_list_is_asked_again_conditionally_and_a_304_reads_as_it() {
    let server = MockServer::start().await;
    let list_path = format!("/v2/{REPO}/tags/list");
    // Unchanged since the last run: a 304, without a body.
    Mock::given(method("GET"))
        .and(path(list_path.as_str()))
        .and(header("if-none-match", "\"v1\""))
        .respond_with(ResponseTemplate::new(304).insert_header("etag", "\"v1\""))
        .expect(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(list_path.as_str()))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("etag", "\"v1\"")
                .set_body_json(json!({"name": REPO, "tags": ["v1", "v2"]})),
        )
        .expect(1)
        .with_priority(2)
        .mount(&server)
        .await;
    let kept = Arc::new(klaud_planner::registry::MemoryContentCache::default());
    // Two processes sharing one store.
    let first = client(&server);
    first.set_content_cache(kept.clone());
    assert_eq!(first.list_tags(HOST, REPO).await.unwrap(), ["v1", "v2"]);
    let second = client(&server);
    second.set_content_cache(kept.clone());
    assert_eq!(second.list_tags(HOST, REPO).await.unwrap(), ["v1", "v2"]);
    assert_eq!(second.counts().tags_list, 1);
}
