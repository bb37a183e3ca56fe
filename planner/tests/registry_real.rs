//! The registry client against a real registry: Debian's `docker-registry`
//! (CNCF distribution 2.8) on 127.0.0.1, seeded by the testkit pusher.
//! Without the binary these tests fail under `CI` and skip loudly otherwise.

use std::collections::BTreeSet;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use klaud_planner::registry::testkit::{LocalRegistry, PlatformSpec, Pusher, TokenServer};
use klaud_planner::registry::{OCI_INDEX, RegistryClient, RegistryConfig, RegistryError};

const REVISION: &str = "org.opencontainers.image.revision";
const CREATED: &str = "org.opencontainers.image.created";
const VLLM_COMMIT: &str = "ai.vllm.build.commit";

fn client_for(reg: &LocalRegistry, tweak: impl FnOnce(&mut RegistryConfig)) -> RegistryClient {
    let mut cfg = RegistryConfig::default();
    // The image references say docker.io; the mirror sends them to the local registry.
    cfg.mirrors.insert("docker.io".into(), reg.base_url());
    tweak(&mut cfg);
    RegistryClient::new(cfg).expect("valid config")
}

fn time(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn platforms(commit: &str, created: &str) -> Vec<PlatformSpec> {
    ["amd64", "arm64"]
        .iter()
        .map(|arch| {
            PlatformSpec::linux(
                arch,
                &[
                    (REVISION, commit),
                    (VLLM_COMMIT, commit),
                    (CREATED, created),
                ],
                Some(time(created)),
            )
        })
        .collect()
}

#[tokio::test]
async fn head_digest_equals_index_digest_and_details_read_back() {
    let Some(reg) =
        LocalRegistry::start_or_skip("head_digest_equals_index_digest_and_details_read_back")
    else {
        return;
    };
    let pusher = Pusher::new(reg.base_url());
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let pushed = pusher
        .push_image(
            "vllm/vllm-openai",
            &format!("nightly-{commit}"),
            &platforms(commit, "2026-03-01T08:00:00Z"),
        )
        .await
        .unwrap();

    let client = client_for(&reg, |_| {});
    let s = client.session();
    let head = s
        .head_manifest(
            "docker.io",
            "vllm/vllm-openai",
            &format!("nightly-{commit}"),
        )
        .await
        .unwrap();
    assert_eq!(head.digest, pushed.index_digest);
    assert_eq!(head.media_type, OCI_INDEX);

    let details = s
        .image_details("docker.io", "vllm/vllm-openai", &head.digest)
        .await
        .unwrap();
    assert_eq!(details.media_type, OCI_INDEX);
    assert_eq!(details.platforms.len(), 2);
    for (p, (arch, manifest, _config)) in details.platforms.iter().zip(&pushed.platforms) {
        assert_eq!((&p.architecture, &p.digest), (arch, manifest));
        assert_eq!(p.os, "linux");
        assert_eq!(p.labels[REVISION], commit);
        assert_eq!(p.labels[VLLM_COMMIT], commit);
        assert_eq!(p.created, Some(time("2026-03-01T08:00:00Z")));
    }
    assert!(details.platform("linux", "arm64").is_some());
    let n = client.counts();
    assert_eq!(
        (n.manifest_head, n.manifest_get, n.blob_get),
        (1, 3, 2),
        "{n:?}"
    );
}

#[tokio::test]
async fn tag_listing_returns_every_tag_with_small_page_size() {
    let Some(reg) =
        LocalRegistry::start_or_skip("tag_listing_returns_every_tag_with_small_page_size")
    else {
        return;
    };
    let pusher = Pusher::new(reg.base_url());
    let mut expected = BTreeSet::new();
    for i in 0..7 {
        let tag = format!("v0.{i}.0");
        pusher
            .push_image(
                "lmsysorg/sglang",
                &tag,
                &platforms(&format!("c{i}"), "2026-01-01T00:00:00Z"),
            )
            .await
            .unwrap();
        expected.insert(tag);
    }
    let client = client_for(&reg, |c| c.tag_page_size = Some(2));
    let tags = client
        .session()
        .list_tags("docker.io", "lmsysorg/sglang")
        .await
        .unwrap();
    assert_eq!(tags.iter().cloned().collect::<BTreeSet<_>>(), expected);
    assert_eq!(tags.len(), 7, "no duplicates");
    // Distribution 2.8 ignores `n` for tags/list (pagination arrived in 3.0)
    // and answers in one page; a paginating registry needs ceil(7/2) = 4.
    // Link paging itself is exercised in registry_faults and the sandbox.
    let pages = client.counts().tags_list;
    assert!(pages == 1 || pages == 4, "unexpected page count {pages}");
}

#[tokio::test]
async fn deleted_tag_is_not_found() {
    let Some(reg) = LocalRegistry::start_or_skip("deleted_tag_is_not_found") else {
        return;
    };
    let pusher = Pusher::new(reg.base_url());
    pusher
        .push_image(
            "rocm/atom-dev",
            "nightly_202601010000",
            &platforms("a", "2026-01-01T00:00:00Z"),
        )
        .await
        .unwrap();
    pusher
        .push_image(
            "rocm/atom-dev",
            "nightly_202601020000",
            &platforms("b", "2026-01-02T00:00:00Z"),
        )
        .await
        .unwrap();
    pusher
        .delete_tag("rocm/atom-dev", "nightly_202601010000")
        .await
        .unwrap();

    let client = client_for(&reg, |_| {});
    let s = client.session();
    let err = s
        .head_manifest("docker.io", "rocm/atom-dev", "nightly_202601010000")
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    assert!(
        err.to_string()
            .contains("docker.io/rocm/atom-dev:nightly_202601010000"),
        "{err}"
    );
    assert!(
        s.head_manifest("docker.io", "rocm/atom-dev", "nightly_202601020000")
            .await
            .is_ok()
    );
    let err = s.list_tags("docker.io", "no/such-repo").await.unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
}

#[tokio::test]
async fn second_session_makes_no_manifest_or_blob_gets() {
    let Some(reg) = LocalRegistry::start_or_skip("second_session_makes_no_manifest_or_blob_gets")
    else {
        return;
    };
    let pusher = Pusher::new(reg.base_url());
    for tag in ["v0.25.0", "v0.26.0"] {
        pusher
            .push_image(
                "vllm/vllm-openai",
                tag,
                &platforms(tag, "2026-02-02T00:00:00Z"),
            )
            .await
            .unwrap();
    }
    let client = client_for(&reg, |_| {});

    async fn plan(client: &RegistryClient) {
        let s = client.session();
        // Two families share the repository: the session asks once.
        for _family in 0..2 {
            let tags = s.list_tags("docker.io", "vllm/vllm-openai").await.unwrap();
            for tag in tags.iter() {
                let head = s
                    .head_manifest("docker.io", "vllm/vllm-openai", tag)
                    .await
                    .unwrap();
                s.image_details("docker.io", "vllm/vllm-openai", &head.digest)
                    .await
                    .unwrap();
            }
        }
    }
    plan(&client).await;
    let first = client.counts();
    assert_eq!((first.tags_list, first.manifest_head), (1, 2), "{first:?}");
    assert_eq!((first.manifest_get, first.blob_get), (6, 4), "{first:?}");

    plan(&client).await;
    let second = client.counts();
    assert_eq!(
        second.manifest_get, first.manifest_get,
        "no manifest GETs in the second plan"
    );
    assert_eq!(
        second.blob_get, first.blob_get,
        "no blob GETs in the second plan"
    );
    assert_eq!(second.tags_list - first.tags_list, 1);
    assert_eq!(second.manifest_head - first.manifest_head, 2);
}

#[tokio::test]
async fn concurrent_list_tags_of_one_repository_send_one_request() {
    let Some(reg) =
        LocalRegistry::start_or_skip("concurrent_list_tags_of_one_repository_send_one_request")
    else {
        return;
    };
    Pusher::new(reg.base_url())
        .push_image(
            "lmsysorg/sglang",
            "v0.5.16-cu130",
            &platforms("x", "2026-01-01T00:00:00Z"),
        )
        .await
        .unwrap();
    let client = client_for(&reg, |_| {});
    let s = client.session();
    let all = futures::future::join_all((0..32).map(|_| {
        let s = s.clone();
        tokio::spawn(async move { s.list_tags("docker.io", "lmsysorg/sglang").await })
    }))
    .await;
    let lists: Vec<Arc<Vec<String>>> = all.into_iter().map(|r| r.unwrap().unwrap()).collect();
    assert!(lists.iter().all(|l| Arc::ptr_eq(l, &lists[0])));
    assert_eq!(client.counts().tags_list, 1);
}

#[tokio::test]
async fn a_hundred_tags_seed_and_list() {
    let Some(reg) = LocalRegistry::start_or_skip("a_hundred_tags_seed_and_list") else {
        return;
    };
    let pusher = Pusher::new(reg.base_url());
    let results: Vec<_> = futures::stream::iter(0..100)
        .map(|i| {
            let pusher = pusher.clone();
            async move {
                let tag = format!("nightly-dev-cu13-2026{:04}-{:08x}", i, i * 7919);
                pusher
                    .push_image(
                        "lmsysorg/sglang",
                        &tag,
                        &platforms(&format!("{i}"), "2026-01-01T00:00:00Z"),
                    )
                    .await
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    assert!(
        results.iter().all(|r| r.is_ok()),
        "{:?}",
        results.iter().find(|r| r.is_err())
    );
    let client = client_for(&reg, |c| c.tag_page_size = Some(30));
    let tags = client
        .session()
        .list_tags("docker.io", "lmsysorg/sglang")
        .await
        .unwrap();
    assert_eq!(tags.len(), 100);
}

#[tokio::test]
async fn token_challenge_flow_against_real_registry() {
    let tokens = TokenServer::start("klaud-registry", "klaud-testkit-issuer", None)
        .await
        .unwrap();
    let Some(reg) = LocalRegistry::start_with_token_auth_or_skip(
        "token_challenge_flow_against_real_registry",
        &tokens.auth_config(),
    ) else {
        return;
    };
    let pusher = Pusher::new(reg.base_url()).with_token_server(&tokens);
    let pushed = pusher
        .push_image(
            "nvidia/tensorrt-llm/release",
            "1.3.0rc14",
            &platforms("t", "2026-01-05T00:00:00Z"),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}\nregistry log:\n{}", reg.logs().join("\n")));

    let mut cfg = RegistryConfig::default();
    cfg.mirrors.insert("nvcr.io".into(), reg.base_url());
    let client = RegistryClient::new(cfg).unwrap();
    let s = client.session();
    let head = s
        .head_manifest("nvcr.io", "nvidia/tensorrt-llm/release", "1.3.0rc14")
        .await
        .unwrap_or_else(|e| panic!("{e}\nregistry log:\n{}", reg.logs().join("\n")));
    assert_eq!(head.digest, pushed.index_digest);
    let details = s
        .image_details("nvcr.io", "nvidia/tensorrt-llm/release", &head.digest)
        .await
        .unwrap();
    assert_eq!(details.platforms.len(), 2);
    let tags = s
        .list_tags("nvcr.io", "nvidia/tensorrt-llm/release")
        .await
        .unwrap();
    assert_eq!(*tags, vec!["1.3.0rc14"]);
    let n = client.counts();
    assert_eq!(n.token, 1, "one token for the scope, reused: {n:?}");
    assert_eq!(tokens.issued(), 1);
    // The first request went out anonymously and was challenged: 1 HEAD + 1 retry.
    assert_eq!(n.manifest_head, 2, "{n:?}");

    // A token for another repository is a new scope.
    let err = s
        .head_manifest("nvcr.io", "nvidia/other", "1")
        .await
        .unwrap_err();
    assert!(
        err.is_not_found() || matches!(err, RegistryError::Unauthorized { .. }),
        "{err:?}"
    );
    assert_eq!(tokens.issued(), 2);
}
