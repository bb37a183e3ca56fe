//! The planner's unchanged `RegistryClient` against the sandbox registry
//! simulator served on 127.0.0.1: digests, labels, pagination, pruning, the
//! token challenge, 429 with `Retry-After`, and Docker Hub push times.

use std::sync::Arc;
use std::time::Duration;

use klaud_planner::registry::{
    OCI_INDEX, OCI_MANIFEST, RegistryClient, RegistryConfig, RegistryError,
};
use klaud_sandbox::registry::{Fault, RegistrySim, SimAuth, SimRoute, TagSeed, router};
use url::Url;

const SEED: &str = r#"{
  "repositories": {
    "vllm/vllm-openai": {
      "tags": {
        "v0.25.0": {
          "pushed": "2026-01-10T12:00:00Z",
          "created": "2026-01-10T11:00:00Z",
          "labels": {"org.opencontainers.image.revision": "1111111111111111111111111111111111111111"}
        },
        "nightly-2222222222222222222222222222222222222222": {
          "pushed": "2026-02-01T03:00:00Z",
          "labels": {
            "org.opencontainers.image.revision": "2222222222222222222222222222222222222222",
            "ai.vllm.build.commit": "2222222222222222222222222222222222222222"
          },
          "platforms": [{"architecture": "amd64", "created": "2026-02-01T02:00:00Z"}]
        }
      }
    },
    "nvidia/tensorrt-llm/release": {
      "tags": {
        "1.3.0rc14": {"index": false, "platforms": [{"architecture": "amd64", "labels": {"k": "v"}}]}
      }
    }
  }
}"#;

struct Served {
    sim: Arc<RegistrySim>,
    url: Url,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(sim: RegistrySim) -> Served {
    let sim = Arc::new(sim);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = router(Arc::clone(&sim));
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    Served {
        sim,
        url: Url::parse(&format!("http://{addr}")).unwrap(),
        task,
    }
}

fn client(s: &Served, tweak: impl FnOnce(&mut RegistryConfig)) -> RegistryClient {
    let mut cfg = RegistryConfig::default();
    for host in ["docker.io", "nvcr.io", "hub.docker.com"] {
        cfg.mirrors.insert(host.into(), s.url.clone());
    }
    cfg.retry_base_delay = Duration::from_millis(1);
    cfg.max_retry_delay = Duration::from_secs(2);
    tweak(&mut cfg);
    RegistryClient::new(cfg).unwrap()
}

#[tokio::test]
async fn client_reads_digests_platforms_and_labels() {
    let s = serve(RegistrySim::from_seed_json(SEED).unwrap()).await;
    let c = client(&s, |_| {});
    let session = c.session();
    let head = session
        .head_manifest("docker.io", "vllm/vllm-openai", "v0.25.0")
        .await
        .unwrap();
    assert_eq!(
        Some(head.digest.clone()),
        s.sim.digest_of("vllm/vllm-openai", "v0.25.0")
    );
    assert_eq!(head.media_type, OCI_INDEX);
    let d = session
        .image_details("docker.io", "vllm/vllm-openai", &head.digest)
        .await
        .unwrap();
    let arches: Vec<_> = d
        .platforms
        .iter()
        .map(|p| p.architecture.as_str())
        .collect();
    assert_eq!(arches, ["amd64", "arm64"]);
    assert_eq!(
        d.platforms[1].labels["org.opencontainers.image.revision"],
        "1".repeat(40)
    );
    assert_eq!(
        d.platforms[0].created.unwrap().to_rfc3339(),
        "2026-01-10T11:00:00+00:00"
    );

    // Single-platform manifest served directly.
    let head = session
        .head_manifest("nvcr.io", "nvidia/tensorrt-llm/release", "1.3.0rc14")
        .await
        .unwrap();
    assert_eq!(head.media_type, OCI_MANIFEST);
    let d = session
        .image_details("nvcr.io", "nvidia/tensorrt-llm/release", &head.digest)
        .await
        .unwrap();
    assert_eq!(d.platforms.len(), 1);
    assert_eq!(
        (
            d.platforms[0].os.as_str(),
            d.platforms[0].architecture.as_str()
        ),
        ("linux", "amd64")
    );
    assert_eq!(d.platforms[0].labels["k"], "v");

    // Same seed, same digests.
    let again = RegistrySim::from_seed_json(SEED).unwrap();
    assert_eq!(
        again.digest_of("vllm/vllm-openai", "v0.25.0"),
        s.sim.digest_of("vllm/vllm-openai", "v0.25.0")
    );
}

#[tokio::test]
async fn second_plan_makes_no_manifest_or_blob_gets() {
    // Counts requests: without the token round trips.
    let s = serve(RegistrySim::from_seed_json(SEED).unwrap().open()).await;
    let c = client(&s, |_| {});
    for _plan in 0..2 {
        let session = c.session();
        for tag in session
            .list_tags("docker.io", "vllm/vllm-openai")
            .await
            .unwrap()
            .iter()
        {
            let head = session
                .head_manifest("docker.io", "vllm/vllm-openai", tag)
                .await
                .unwrap();
            session
                .image_details("docker.io", "vllm/vllm-openai", &head.digest)
                .await
                .unwrap();
        }
    }
    let n = c.counts();
    assert_eq!((n.tags_list, n.manifest_head), (2, 4), "{n:?}");
    // First plan only: 2 indexes + 3 platform manifests, 3 configs.
    assert_eq!(
        (n.manifest_get, n.blob_get),
        (5, 3),
        "only the first plan fetches content: {n:?}"
    );
    assert_eq!(s.sim.requests(SimRoute::ManifestGet), 5);
}

#[tokio::test]
async fn tags_paginate_with_link_and_pruned_tags_are_not_found() {
    let sim = RegistrySim::from_seed_json(SEED)
        .unwrap()
        // Counts requests: without the token round trips.
        .open()
        .with_default_page_size(2);
    for i in 0..5 {
        sim.add_tag(
            "vllm/vllm-openai",
            &format!("v0.2{i}.1"),
            &TagSeed::default(),
        )
        .unwrap();
    }
    let s = serve(sim).await;
    let c = client(&s, |_| {});
    let tags = c
        .session()
        .list_tags("docker.io", "vllm/vllm-openai")
        .await
        .unwrap();
    assert_eq!(tags.len(), 7);
    assert_eq!(c.counts().tags_list, 4, "7 tags, 2 per page");

    let c = client(&s, |cfg| cfg.tag_page_size = Some(3));
    assert_eq!(
        c.session()
            .list_tags("docker.io", "vllm/vllm-openai")
            .await
            .unwrap()
            .len(),
        7
    );
    assert_eq!(c.counts().tags_list, 3, "client n=3 wins over the default");

    assert!(s.sim.delete_tag("vllm/vllm-openai", "v0.25.0"));
    let err = c
        .session()
        .head_manifest("docker.io", "vllm/vllm-openai", "v0.25.0")
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    assert!(
        !c.session()
            .list_tags("docker.io", "vllm/vllm-openai")
            .await
            .unwrap()
            .contains(&"v0.25.0".to_owned())
    );
}

#[tokio::test]
async fn token_challenge_is_answered_once_per_scope() {
    let sim = RegistrySim::from_seed_json(SEED)
        .unwrap()
        .with_token_auth(SimAuth {
            service: "sandbox-registry".into(),
            basic: Some(("bot".into(), "s3cret".into())),
            token_lifetime: Duration::from_secs(300),
        });
    let s = serve(sim).await;

    let anonymous = client(&s, |_| {});
    let err = anonymous
        .session()
        .head_manifest("docker.io", "vllm/vllm-openai", "v0.25.0")
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::Unauthorized { .. }), "{err:?}");
    assert!(err.to_string().contains("/token"), "{err}");

    let c = client(&s, |cfg| {
        cfg.credentials.insert(
            "docker.io".into(),
            klaud_planner::registry::BasicCredentials {
                username: "bot".into(),
                password: "s3cret".into(),
            },
        );
    });
    let session = c.session();
    let head = session
        .head_manifest("docker.io", "vllm/vllm-openai", "v0.25.0")
        .await
        .unwrap();
    session
        .image_details("docker.io", "vllm/vllm-openai", &head.digest)
        .await
        .unwrap();
    session
        .list_tags("docker.io", "vllm/vllm-openai")
        .await
        .unwrap();
    let n = c.counts();
    assert_eq!(n.token, 1, "{n:?}");
    assert_eq!(
        n.manifest_head, 2,
        "challenged once, then the token is reused: {n:?}"
    );
    assert_eq!(
        s.sim.requests(SimRoute::Token),
        2,
        "one refused anonymous, one issued"
    );
}

#[tokio::test]
async fn too_many_requests_with_retry_after_then_success() {
    // Counts requests: without the token round trips.
    let s = serve(RegistrySim::from_seed_json(SEED).unwrap().open()).await;
    s.sim.inject_fault(Fault {
        route: SimRoute::ManifestHead,
        repository: Some("vllm/vllm-openai".into()),
        count: 1,
        status: 429,
        retry_after: Some("1".into()),
    });
    s.sim.inject_fault(Fault {
        route: SimRoute::BlobGet,
        repository: None,
        count: 2,
        status: 503,
        retry_after: None,
    });
    let c = client(&s, |_| {});
    let session = c.session();
    let head = session
        .head_manifest("docker.io", "vllm/vllm-openai", "v0.25.0")
        .await
        .unwrap();
    assert_eq!(c.counts().manifest_head, 2);
    session
        .image_details("docker.io", "vllm/vllm-openai", &head.digest)
        .await
        .unwrap();
    assert_eq!(c.counts().blob_get, 4, "two configs plus two retried 503s");

    s.sim.inject_fault(Fault {
        route: SimRoute::TagsList,
        repository: None,
        count: 100,
        status: 500,
        retry_after: None,
    });
    let err = client(&s, |cfg| cfg.max_retries = 2)
        .session()
        .list_tags("docker.io", "vllm/vllm-openai")
        .await
        .unwrap_err();
    assert!(
        matches!(err, RegistryError::Status { status: 500, .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn docker_hub_push_times_page_through_the_hub_api() {
    let sim = RegistrySim::from_seed_json(SEED).unwrap();
    let base = chrono::DateTime::parse_from_rfc3339("2025-06-01T00:00:00Z")
        .unwrap()
        .with_timezone(&chrono::Utc);
    for i in 0..150i64 {
        let tag = TagSeed {
            pushed: Some(base + chrono::Duration::hours(i)),
            ..TagSeed::default()
        };
        sim.add_tag("lmsysorg/sglang", &format!("nightly-dev-{i:03}"), &tag)
            .unwrap();
    }
    let s = serve(sim).await;
    let c = client(&s, |_| {});
    let session = c.session();
    let times = session
        .hub_push_times("docker.io", "lmsysorg/sglang")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(times.len(), 150);
    assert_eq!(
        times["nightly-dev-149"],
        base + chrono::Duration::hours(149)
    );
    assert_eq!(c.counts().hub_api, 2, "100 per page");

    let vllm = session
        .hub_push_times("docker.io", "vllm/vllm-openai")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(vllm["v0.25.0"].to_rfc3339(), "2026-01-10T12:00:00+00:00");
    assert!(
        session
            .hub_push_times("docker.io", "nobody/nothing")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        session
            .hub_push_times("nvcr.io", "nvidia/tensorrt-llm/release")
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn seed_file_errors_name_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seed.json");
    std::fs::write(&path, SEED).unwrap();
    assert!(RegistrySim::from_seed_file(&path).is_ok());
    std::fs::write(&path, r#"{"repositories": {"Bad/Name": {"tags": {}}}}"#).unwrap();
    let err = RegistrySim::from_seed_file(&path).unwrap_err().to_string();
    assert!(err.contains("Bad/Name"), "{err}");
    let err = RegistrySim::from_seed_file(&dir.path().join("missing.json"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("missing.json"), "{err}");
    let err = RegistrySim::from_seed_json(
        r#"{"repositories": {"a/b": {"tags": {"t": {"platforms": []}}}}}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("a/b:t"), "{err}");
}

#[tokio::test]
async fn simulator_speaks_the_distribution_protocol() {
    // Raw requests about the protocol, not its auth.
    let s = serve(RegistrySim::from_seed_json(SEED).unwrap().open()).await;
    let http = klaud_http::http_client().expect("http client");
    let url = |p: &str| format!("{}{p}", s.url.as_str().trim_end_matches('/'));
    assert_eq!(http.get(url("/v2/")).send().await.unwrap().status(), 200);

    // A client that does not offer the manifest's media type gets 404, as
    // from real registries.
    let manifest = url("/v2/vllm/vllm-openai/manifests/v0.25.0");
    assert_eq!(http.get(&manifest).send().await.unwrap().status(), 404);
    let r = http
        .get(&manifest)
        .header("accept", OCI_INDEX)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let digest = r.headers()["docker-content-digest"]
        .to_str()
        .unwrap()
        .to_owned();
    let body = r.bytes().await.unwrap();
    assert_eq!(
        digest,
        format!(
            "sha256:{}",
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&body))
        )
    );

    let r = http
        .get(url("/v2/vllm/vllm-openai/tags/list?n=1"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()["link"],
        r#"</v2/vllm/vllm-openai/tags/list?n=1&last=nightly-2222222222222222222222222222222222222222>; rel="next""#
    );
    let bad = http
        .get(url("/v2/vllm/vllm-openai/tags/list?n=x"))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let unknown = http.get(url("/v2/no/such/tags/list")).send().await.unwrap();
    assert_eq!(unknown.status(), 404);
    let body: serde_json::Value = unknown.json().await.unwrap();
    assert_eq!(body["errors"][0]["code"], "NAME_UNKNOWN");

    // DELETE by tag prunes it.
    let r = http.delete(&manifest).send().await.unwrap();
    assert_eq!(r.status(), 202);
    assert!(s.sim.digest_of("vllm/vllm-openai", "v0.25.0").is_none());
}

/// Like Docker Hub, nvcr.io and ghcr.io, the simulator challenges even
/// anonymous pulls by default; the token covers only the scope it names.
#[tokio::test]
async fn the_default_registry_needs_an_anonymous_pull_token_per_scope() {
    let s = serve(RegistrySim::from_seed_json(SEED).unwrap()).await;
    let http = klaud_http::http_client().expect("http client");
    let url = |p: &str| format!("{}{p}", s.url.as_str().trim_end_matches('/'));
    let manifest = url("/v2/vllm/vllm-openai/manifests/v0.25.0");
    let r = http
        .head(&manifest)
        .header("accept", OCI_INDEX)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let challenge = r.headers()["www-authenticate"].to_str().unwrap().to_owned();
    assert_eq!(
        challenge,
        format!(
            r#"Bearer realm="{}",service="sandbox-registry",scope="repository:vllm/vllm-openai:pull""#,
            url("/token")
        )
    );
    let wrong_service = http
        .get(url(
            "/token?service=elsewhere&scope=repository:vllm/vllm-openai:pull",
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_service.status(), 400);
    let token: serde_json::Value = http
        .get(url(
            "/token?service=sandbox-registry&scope=repository:vllm/vllm-openai:pull",
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = token["token"].as_str().unwrap().to_owned();
    let ok = http
        .head(&manifest)
        .header("accept", OCI_INDEX)
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let other = http
        .get(url("/v2/nvidia/tensorrt-llm/release/tags/list"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 401, "a token covers only its own scope");
    let forged = http
        .head(&manifest)
        .header("accept", OCI_INDEX)
        .bearer_auth("sim-1-0000000000000000")
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 401);
    assert!(
        forged.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .contains(r#"error="invalid_token""#)
    );

    // Klaud's client passes through the challenge on its own.
    let c = client(&s, |_| {});
    let session = c.session();
    let head = session
        .head_manifest("docker.io", "vllm/vllm-openai", "v0.25.0")
        .await
        .unwrap();
    session
        .image_details("docker.io", "vllm/vllm-openai", &head.digest)
        .await
        .unwrap();
    assert_eq!(c.counts().token, 1, "{:?}", c.counts());
}

/// Docker Hub's tags API answers with the fields its reference documents
/// for a tag, including one `images` entry per platform.
#[tokio::test]
async fn docker_hub_tags_carry_the_documented_fields() {
    let s = serve(RegistrySim::from_seed_json(SEED).unwrap()).await;
    let body: serde_json::Value = klaud_http::http_client()
        .expect("http client")
        .get(format!(
            "{}v2/namespaces/vllm/repositories/vllm-openai/tags?page_size=10",
            s.url
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["count"], 2);
    for tag in body["results"].as_array().unwrap() {
        for field in [
            "creator",
            "id",
            "images",
            "last_updated",
            "last_updater",
            "last_updater_username",
            "name",
            "repository",
            "full_size",
            "v2",
            "tag_status",
            "tag_last_pulled",
            "tag_last_pushed",
            "media_type",
            "content_type",
            "digest",
        ] {
            assert!(tag.get(field).is_some(), "{field} missing in {tag}");
        }
        let images = tag["images"].as_array().unwrap();
        assert!(!images.is_empty(), "{tag}");
        for image in images {
            for field in [
                "architecture",
                "features",
                "variant",
                "digest",
                "os",
                "os_features",
                "os_version",
                "size",
                "status",
                "last_pulled",
                "last_pushed",
            ] {
                assert!(image.get(field).is_some(), "{field} missing in {image}");
            }
            assert!(image["digest"].as_str().unwrap().starts_with("sha256:"));
        }
    }
}
