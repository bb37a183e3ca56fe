//! Test harness for registry code (cargo feature `testkit`; never in
//! production builds).
//!
//! * [`LocalRegistry`] runs Debian's `docker-registry` (CNCF distribution
//!   2.8) on `127.0.0.1:0` with a temporary config and storage, optionally in
//!   token-auth mode, and kills it on drop.
//! * [`Pusher`] seeds any registry through the plain distribution push API
//!   (blob upload, manifest PUT): multi-arch OCI indexes whose per-platform
//!   config blobs carry chosen labels and `created` times. No docker needed.
//! * [`TokenServer`] is a bearer-token realm on 127.0.0.1 that signs ES256
//!   JWTs with an `x5c` header for a self-signed certificate, the format
//!   `docker-registry`'s `auth.token` mode verifies.
//!
//! * [`DelayProxy`] stands in front of either and adds a fixed delay to
//!   every request, as a registry across the internet answers.
//!
//! Tests call [`LocalRegistry::start_or_skip`]: when the binary is missing it
//! panics if the `CI` environment variable is set and otherwise prints a loud
//! SKIP and returns `None`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::json;
use sha2::{Digest as _, Sha256};
use url::Url;

use super::model::{OCI_CONFIG, OCI_INDEX, OCI_MANIFEST};

mod delay;
pub use delay::DelayProxy;

/// Failure of the test harness.
#[derive(Debug, thiserror::Error)]
pub enum TestkitError {
    /// `docker-registry` is not installed.
    #[error(
        "docker-registry binary not found (install with `apt-get install -y docker-registry`, or set KLAUD_DOCKER_REGISTRY)"
    )]
    BinaryMissing,
    /// The registry process did not come up.
    #[error("docker-registry did not start: {0}")]
    Start(String),
    /// A push or delete request failed.
    #[error("{0}")]
    Push(String),
    /// Key or certificate generation, or the token server, failed.
    #[error("token auth setup failed: {0}")]
    Token(String),
}

/// Path of the `docker-registry` binary: `$KLAUD_DOCKER_REGISTRY`, else the
/// first `docker-registry` on `PATH`, else `/usr/bin/docker-registry`.
pub fn registry_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("KLAUD_DOCKER_REGISTRY") {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let from_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("docker-registry"))
        .find(|p| p.is_file());
    from_path.or_else(|| Some(PathBuf::from("/usr/bin/docker-registry")).filter(|p| p.is_file()))
}

/// Token-auth settings for [`LocalRegistry::start_with_token_auth`].
#[derive(Debug, Clone)]
pub struct TokenAuth {
    /// Realm URL the registry sends in its challenge.
    pub realm: Url,
    /// `service` (also the JWT audience).
    pub service: String,
    /// JWT issuer.
    pub issuer: String,
    /// PEM of the certificate whose key signs the tokens.
    pub root_cert_pem: String,
}

/// A `docker-registry` process on 127.0.0.1 with storage in a temp dir.
pub struct LocalRegistry {
    child: Child,
    addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for LocalRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalRegistry")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// How long the registry may take to print its listening address.
const START_TIMEOUT: Duration = Duration::from_secs(20);

impl LocalRegistry {
    /// Starts an anonymous registry with deletes enabled.
    pub fn start() -> Result<Self, TestkitError> {
        Self::spawn(None)
    }

    /// Starts a registry in `auth.token` mode.
    pub fn start_with_token_auth(auth: &TokenAuth) -> Result<Self, TestkitError> {
        Self::spawn(Some(auth))
    }

    /// [`Self::start`] for tests: `None` (after a loud SKIP on stderr) when
    /// the binary is missing outside CI; panics when it is missing in CI or
    /// fails to start.
    pub fn start_or_skip(test: &str) -> Option<Self> {
        Self::or_skip(test, Self::start())
    }

    /// [`Self::start_with_token_auth`] with the same skip rules.
    pub fn start_with_token_auth_or_skip(test: &str, auth: &TokenAuth) -> Option<Self> {
        Self::or_skip(test, Self::start_with_token_auth(auth))
    }

    fn or_skip(test: &str, r: Result<Self, TestkitError>) -> Option<Self> {
        match r {
            Ok(r) => Some(r),
            Err(TestkitError::BinaryMissing) if std::env::var_os("CI").is_none() => {
                eprintln!(
                    "\n!!!!! SKIP {test}: docker-registry is not installed (apt-get install -y docker-registry); CI fails here !!!!!\n"
                );
                None
            }
            Err(e) => panic!("{test}: {e}"),
        }
    }

    fn spawn(auth: Option<&TokenAuth>) -> Result<Self, TestkitError> {
        let bin = registry_binary().ok_or(TestkitError::BinaryMissing)?;
        let dir = tempfile::tempdir().map_err(|e| TestkitError::Start(format!("temp dir: {e}")))?;
        let storage = dir.path().join("data");
        let mut config = format!(
            "version: 0.1\nlog:\n  level: info\n  formatter: text\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:0\n",
            yaml_str(&storage)
        );
        if let Some(a) = auth {
            let cert = dir.path().join("token-root.pem");
            std::fs::write(&cert, &a.root_cert_pem)
                .map_err(|e| TestkitError::Start(format!("writing cert: {e}")))?;
            config.push_str(&format!(
                "auth:\n  token:\n    realm: {}\n    service: {}\n    issuer: {}\n    rootcertbundle: {}\n",
                serde_json::Value::String(a.realm.to_string()),
                serde_json::Value::String(a.service.clone()),
                serde_json::Value::String(a.issuer.clone()),
                yaml_str(&cert)
            ));
        }
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config)
            .map_err(|e| TestkitError::Start(format!("writing config: {e}")))?;
        let mut command = Command::new(&bin);
        // The registry builds its URL router anew for every request and
        // reads each blob through a 4 MiB buffer, so on a small heap Go's
        // collector runs every few requests: a third of its CPU in the scale
        // benchmark, on the same cores as the planner it measures. A larger
        // GC target trades some memory for that (a caller's GOGC wins).
        if std::env::var_os("GOGC").is_none() {
            command.env("GOGC", "400");
        }
        let mut child = command
            .arg("serve")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| TestkitError::Start(format!("spawning {}: {e}", bin.display())))?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel::<SocketAddr>();
        // Both pipes are drained for the life of the process: a full pipe
        // would block the registry's logger and hang every request.
        let pipes: Vec<Box<dyn std::io::Read + Send>> = vec![
            Box::new(
                child
                    .stdout
                    .take()
                    .ok_or_else(|| TestkitError::Start("no stdout pipe".into()))?,
            ),
            Box::new(
                child
                    .stderr
                    .take()
                    .ok_or_else(|| TestkitError::Start("no stderr pipe".into()))?,
            ),
        ];
        for pipe in pipes {
            let log = Arc::clone(&log);
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    if let Some(addr) = listening_addr(&line) {
                        let _ = tx.send(addr);
                    }
                    let mut l = log.lock().unwrap_or_else(|p| p.into_inner());
                    if l.len() < 10_000 {
                        l.push(line);
                    }
                }
            });
        }
        drop(tx);
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(addr) => Ok(Self {
                child,
                addr,
                log,
                _dir: dir,
            }),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                let tail = log.lock().unwrap_or_else(|p| p.into_inner()).join("\n");
                Err(TestkitError::Start(format!(
                    "no `listening on` line within {START_TIMEOUT:?}; log:\n{tail}"
                )))
            }
        }
    }

    /// `127.0.0.1:<port>`: the host part of image references for this registry.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> Url {
        // A SocketAddr always forms a valid URL authority.
        Url::parse(&format!("http://{}", self.addr)).unwrap_or_else(|e| unreachable!("{e}"))
    }

    /// The registry's process id, so benchmarks can report its CPU time
    /// apart from the planner's.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The registry's log lines so far (for failure messages).
    pub fn logs(&self) -> Vec<String> {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for LocalRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn yaml_str(p: &Path) -> String {
    // JSON strings are valid YAML flow scalars, whatever the temp path holds.
    serde_json::Value::String(p.display().to_string()).to_string()
}

/// Parses distribution's `listening on 127.0.0.1:<port>` log line.
fn listening_addr(line: &str) -> Option<SocketAddr> {
    let rest = &line[line.find("listening on ")? + "listening on ".len()..];
    let end = rest
        .find(|c: char| c == '"' || c.is_whitespace() || c == ',')
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// One platform of an image to push.
#[derive(Debug, Clone)]
pub struct PlatformSpec {
    /// `linux`.
    pub os: String,
    /// `amd64`, `arm64`.
    pub architecture: String,
    /// `config.Labels`.
    pub labels: BTreeMap<String, String>,
    /// `config.Env`, as `NAME=value` entries.
    pub env: Vec<String>,
    /// Config `created`.
    pub created: Option<DateTime<Utc>>,
}

impl PlatformSpec {
    /// A linux platform with labels and a creation time.
    pub fn linux(
        architecture: &str,
        labels: &[(&str, &str)],
        created: Option<DateTime<Utc>>,
    ) -> Self {
        Self {
            os: "linux".into(),
            architecture: architecture.into(),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            env: Vec::new(),
            created,
        }
    }

    /// The same platform with `config.Env` set to `NAME=value` entries.
    pub fn with_env(mut self, env: &[(&str, &str)]) -> Self {
        self.env = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        self
    }
}

/// What a push produced.
#[derive(Debug, Clone)]
pub struct PushedImage {
    /// Digest of the index (what a tag HEAD returns).
    pub index_digest: String,
    /// (architecture, platform manifest digest, config digest).
    pub platforms: Vec<(String, String, String)>,
}

/// Pushes fixtures to a registry through the distribution push API.
#[derive(Clone)]
pub struct Pusher {
    http: reqwest::Client,
    base: Url,
    tokens: Option<TokenServer>,
    /// (repository, digest) of blobs this pusher (or a clone) already
    /// uploaded: seeding hundreds of tags then skips their existence checks.
    uploaded: Arc<Mutex<std::collections::HashSet<(String, String)>>>,
}

impl Pusher {
    /// A pusher for the registry at `base` (e.g. [`LocalRegistry::base_url`]).
    pub fn new(base: Url) -> Self {
        Self {
            http: klaud_http::http_client().expect("http client"),
            base,
            tokens: None,
            uploaded: Arc::default(),
        }
    }

    /// Authenticates pushes with tokens minted directly by `server`.
    pub fn with_token_server(mut self, server: &TokenServer) -> Self {
        self.tokens = Some(server.clone());
        self
    }

    fn url(&self, rest: &str) -> Result<Url, TestkitError> {
        self.base
            .join(rest)
            .map_err(|e| TestkitError::Push(format!("bad URL {rest:?}: {e}")))
    }

    fn req(&self, method: reqwest::Method, url: Url, repo: &str) -> reqwest::RequestBuilder {
        let r = self.http.request(method, url);
        match &self.tokens {
            Some(t) => r.bearer_auth(t.mint(repo, &["pull", "push", "delete"])),
            None => r,
        }
    }

    /// Uploads a blob (POST + PUT), skipping it when it already exists.
    pub async fn push_blob(&self, repo: &str, data: &[u8]) -> Result<String, TestkitError> {
        let digest = sha256(data);
        let key = (repo.to_owned(), digest.clone());
        if self
            .uploaded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&key)
        {
            return Ok(digest);
        }
        let exists = self
            .req(
                reqwest::Method::HEAD,
                self.url(&format!("/v2/{repo}/blobs/{digest}"))?,
                repo,
            )
            .send()
            .await
            .map_err(|e| TestkitError::Push(format!("HEAD blob {repo}@{digest}: {e}")))?;
        if exists.status().is_success() {
            self.uploaded
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key);
            return Ok(digest);
        }
        let start = self
            .req(
                reqwest::Method::POST,
                self.url(&format!("/v2/{repo}/blobs/uploads/"))?,
                repo,
            )
            .send()
            .await
            .map_err(|e| TestkitError::Push(format!("start upload to {repo}: {e}")))?;
        if start.status().as_u16() != 202 {
            return Err(TestkitError::Push(format!(
                "start upload to {repo}: HTTP {}",
                start.status()
            )));
        }
        let location = start
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| TestkitError::Push(format!("upload to {repo}: no Location")))?;
        let mut put = self.url(location)?;
        put.query_pairs_mut().append_pair("digest", &digest);
        let done = self
            .req(reqwest::Method::PUT, put, repo)
            .header("content-type", "application/octet-stream")
            .body(data.to_vec())
            .send()
            .await
            .map_err(|e| TestkitError::Push(format!("finish upload to {repo}: {e}")))?;
        if done.status().as_u16() != 201 {
            let s = done.status();
            let body = done.text().await.unwrap_or_default();
            return Err(TestkitError::Push(format!(
                "finish upload to {repo}: HTTP {s}: {body}"
            )));
        }
        self.uploaded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key);
        Ok(digest)
    }

    /// PUTs a manifest under `reference` (tag or digest) and returns its digest.
    pub async fn push_manifest(
        &self,
        repo: &str,
        reference: &str,
        media_type: &str,
        body: &[u8],
    ) -> Result<String, TestkitError> {
        let r = self
            .req(
                reqwest::Method::PUT,
                self.url(&format!("/v2/{repo}/manifests/{reference}"))?,
                repo,
            )
            .header("content-type", media_type)
            .body(body.to_vec())
            .send()
            .await
            .map_err(|e| TestkitError::Push(format!("PUT manifest {repo}:{reference}: {e}")))?;
        if r.status().as_u16() != 201 {
            let s = r.status();
            let body = r.text().await.unwrap_or_default();
            return Err(TestkitError::Push(format!(
                "PUT manifest {repo}:{reference}: HTTP {s}: {body}"
            )));
        }
        Ok(sha256(body))
    }

    /// Pushes a multi-arch OCI index under `tag`: per platform a config blob
    /// (labels, `created`), a one-layer manifest, then the index.
    pub async fn push_image(
        &self,
        repo: &str,
        tag: &str,
        platforms: &[PlatformSpec],
    ) -> Result<PushedImage, TestkitError> {
        let layer = self.push_blob(repo, b"klaud-testkit-layer").await?;
        let mut entries = Vec::new();
        let mut out = Vec::new();
        for p in platforms {
            let mut cfg = json!({
                "architecture": p.architecture,
                "os": p.os,
                "config": {"Labels": p.labels},
                "rootfs": {"type": "layers", "diff_ids": [layer]},
            });
            // Only when set, so images pushed without an environment keep
            // the digests tests already know.
            if !p.env.is_empty() {
                cfg["config"]["Env"] = json!(p.env);
            }
            if let Some(c) = p.created {
                cfg["created"] = json!(c.to_rfc3339_opts(SecondsFormat::Secs, true));
            }
            let cfg = cfg.to_string().into_bytes();
            let cfg_digest = self.push_blob(repo, &cfg).await?;
            let manifest = json!({
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": {"mediaType": OCI_CONFIG, "digest": cfg_digest, "size": cfg.len()},
                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer, "size": 19}],
            })
            .to_string()
            .into_bytes();
            let m_digest = sha256(&manifest);
            self.push_manifest(repo, &m_digest, OCI_MANIFEST, &manifest)
                .await?;
            entries.push(json!({
                "mediaType": OCI_MANIFEST, "digest": m_digest, "size": manifest.len(),
                "platform": {"os": p.os, "architecture": p.architecture},
            }));
            out.push((p.architecture.clone(), m_digest, cfg_digest));
        }
        let index = json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries})
            .to_string()
            .into_bytes();
        let index_digest = self.push_manifest(repo, tag, OCI_INDEX, &index).await?;
        Ok(PushedImage {
            index_digest,
            platforms: out,
        })
    }

    /// Deletes the manifest `tag` points at. Distribution 2.8 cannot delete
    /// a tag alone: every tag on the same manifest disappears with it.
    pub async fn delete_tag(&self, repo: &str, tag: &str) -> Result<(), TestkitError> {
        let head = self
            .req(
                reqwest::Method::HEAD,
                self.url(&format!("/v2/{repo}/manifests/{tag}"))?,
                repo,
            )
            .header("accept", super::model::MANIFEST_ACCEPT)
            .send()
            .await
            .map_err(|e| TestkitError::Push(format!("HEAD {repo}:{tag}: {e}")))?;
        let digest = head
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| {
                TestkitError::Push(format!(
                    "HEAD {repo}:{tag}: HTTP {} without digest",
                    head.status()
                ))
            })?
            .to_owned();
        let r = self
            .req(
                reqwest::Method::DELETE,
                self.url(&format!("/v2/{repo}/manifests/{digest}"))?,
                repo,
            )
            .send()
            .await
            .map_err(|e| TestkitError::Push(format!("DELETE {repo}@{digest}: {e}")))?;
        if r.status().as_u16() != 202 {
            return Err(TestkitError::Push(format!(
                "DELETE {repo}@{digest}: HTTP {}",
                r.status()
            )));
        }
        Ok(())
    }
}

fn sha256(b: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(b)))
}

/// A bearer-token realm for `docker-registry`'s `auth.token` mode, served on
/// 127.0.0.1. Grants `pull` on whatever repository scope is asked; counts
/// tokens issued. Optional basic credentials are required when set.
#[derive(Clone)]
pub struct TokenServer {
    inner: Arc<TokenInner>,
}

struct TokenInner {
    key: ring::signature::EcdsaKeyPair,
    cert_der: Vec<u8>,
    cert_pem: String,
    service: String,
    issuer: String,
    addr: SocketAddr,
    issued: AtomicU64,
    basic: Option<String>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for TokenInner {
    fn drop(&mut self) {
        if let Some(t) = self.task.lock().unwrap_or_else(|p| p.into_inner()).take() {
            t.abort();
        }
    }
}

impl TokenServer {
    /// Generates a P-256 key and a self-signed certificate, and serves
    /// `GET /token` on 127.0.0.1. `basic` = `(user, password)` the realm requires.
    pub async fn start(
        service: &str,
        issuer: &str,
        basic: Option<(&str, &str)>,
    ) -> Result<Self, TestkitError> {
        use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|e| TestkitError::Token(format!("key generation: {e}")))?;
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .map_err(|e| TestkitError::Token(format!("key load: {e}")))?;
        let rc_key = rcgen::KeyPair::try_from(pkcs8.as_ref())
            .map_err(|e| TestkitError::Token(format!("rcgen key: {e}")))?;
        let cert = rcgen::CertificateParams::new(vec!["klaud-testkit-token".to_owned()])
            .and_then(|p| p.self_signed(&rc_key))
            .map_err(|e| TestkitError::Token(format!("certificate: {e}")))?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| TestkitError::Token(format!("bind: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| TestkitError::Token(format!("local_addr: {e}")))?;
        let inner = Arc::new(TokenInner {
            key,
            cert_der: cert.der().to_vec(),
            cert_pem: cert.pem(),
            service: service.to_owned(),
            issuer: issuer.to_owned(),
            addr,
            issued: AtomicU64::new(0),
            basic: basic.map(|(u, p)| format!("Basic {}", STANDARD.encode(format!("{u}:{p}")))),
            task: Mutex::new(None),
        });
        let weak = Arc::downgrade(&inner);
        let app = axum::Router::new().route(
            "/token",
            axum::routing::get(
                move |headers: axum::http::HeaderMap,
                      axum::extract::RawQuery(q): axum::extract::RawQuery| {
                    let weak = weak.clone();
                    async move {
                        use axum::http::StatusCode;
                        use axum::response::IntoResponse;
                        let Some(inner) = weak.upgrade() else {
                            return StatusCode::SERVICE_UNAVAILABLE.into_response();
                        };
                        if let Some(expected) = &inner.basic {
                            let got = headers.get("authorization").and_then(|v| v.to_str().ok());
                            if got != Some(expected.as_str()) {
                                return StatusCode::UNAUTHORIZED.into_response();
                            }
                        }
                        let pairs: Vec<(String, String)> =
                            url::form_urlencoded::parse(q.unwrap_or_default().as_bytes())
                                .into_owned()
                                .collect();
                        let repos: Vec<String> = pairs
                            .iter()
                            .filter(|(k, _)| k == "scope")
                            .filter_map(|(_, v)| {
                                v.strip_prefix("repository:")?
                                    .rsplit_once(':')
                                    .map(|(n, _)| n.to_owned())
                            })
                            .collect();
                        inner.issued.fetch_add(1, Ordering::Relaxed);
                        let token = inner.sign(&repos, &["pull"]);
                        axum::Json(
                            json!({"token": token, "access_token": token, "expires_in": 300}),
                        )
                        .into_response()
                    }
                },
            ),
        );
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        *inner.task.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
        Ok(Self { inner })
    }

    /// Registry settings that trust this server.
    pub fn auth_config(&self) -> TokenAuth {
        TokenAuth {
            realm: Url::parse(&format!("http://{}/token", self.inner.addr))
                .unwrap_or_else(|e| unreachable!("{e}")),
            service: self.inner.service.clone(),
            issuer: self.inner.issuer.clone(),
            root_cert_pem: self.inner.cert_pem.clone(),
        }
    }

    /// Tokens issued through `GET /token` so far.
    pub fn issued(&self) -> u64 {
        self.inner.issued.load(Ordering::Relaxed)
    }

    /// A token for `repo` with `actions`, minted without an HTTP round trip.
    pub fn mint(&self, repo: &str, actions: &[&str]) -> String {
        self.inner.sign(&[repo.to_owned()], actions)
    }
}

impl TokenInner {
    fn sign(&self, repos: &[String], actions: &[&str]) -> String {
        let now = Utc::now().timestamp();
        let header =
            json!({"typ": "JWT", "alg": "ES256", "x5c": [STANDARD.encode(&self.cert_der)]});
        let access: Vec<_> = repos
            .iter()
            .map(|r| json!({"type": "repository", "name": r, "actions": actions}))
            .collect();
        let claims = json!({
            "iss": self.issuer, "sub": "klaud-testkit", "aud": self.service,
            "exp": now + 300, "nbf": now - 10, "iat": now,
            "jti": format!("{now}-{:016x}", rand::random::<u64>()), "access": access,
        });
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let rng = ring::rand::SystemRandom::new();
        // Signing with a freshly generated, valid P-256 key only fails if the
        // system RNG fails; an empty signature then makes the registry say so.
        let sig = self
            .key
            .sign(&rng, signing_input.as_bytes())
            .map(|s| s.as_ref().to_vec())
            .unwrap_or_default();
        format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(sig))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_distribution_listening_line() {
        let line = r#"time="2026-11-29T19:50:00Z" level=info msg="listening on 127.0.0.1:41235" go.version=go1.19"#;
        assert_eq!(
            listening_addr(line),
            Some("127.0.0.1:41235".parse().unwrap())
        );
        assert_eq!(listening_addr("level=info msg=\"starting\""), None);
    }
}

/// What [`seed_repository`] pushed.
#[derive(Debug, Clone, Default)]
pub struct SeedSummary {
    /// Distinct repositories that received tags.
    pub repositories: usize,
    /// Tags pushed.
    pub tags: usize,
    /// Current tags deliberately left out (they plan as pruned).
    pub pruned: Vec<String>,
    /// Newer tags pushed on a family's track.
    pub newer: Vec<String>,
}

/// Seeds a registry with every family's current image (both platforms) and,
/// where the family has a track, one newer tag on that track, so a plan over
/// `repository` has real work. Current tags of families whose id starts with
/// `0` are left out, to plan as pruned. Times are relative to `now`: current
/// images 60 days old, newer ones 10 days. Commit-named tags get a matching
/// revision label. All hosts are expected to be mirrored to this registry.
pub async fn seed_repository(
    pusher: &Pusher,
    repository: &crate::repo::Repository,
    now: DateTime<Utc>,
) -> Result<SeedSummary, TestkitError> {
    use std::collections::BTreeSet;

    let mut wanted: BTreeMap<(String, String), DateTime<Utc>> = BTreeMap::new();
    let mut pruned = BTreeSet::new();
    let mut newer = BTreeSet::new();
    for family in repository.families() {
        let image = family.image();
        let Some(tag) = image.tag() else { continue };
        let repo = image.repository();
        if family.id.starts_with('0') {
            pruned.insert(format!("{repo}:{tag}"));
        } else {
            wanted.insert(
                (repo.clone(), tag.to_owned()),
                now - chrono::Duration::days(60),
            );
        }
        let track = crate::tracks::track_for(&image.normalized_repository(), tag, &[])
            .ok()
            .flatten();
        if let Some(next) = track.and_then(|t| next_tag_on(&t, tag)) {
            newer.insert(format!("{repo}:{next}"));
            wanted.insert((repo, next), now - chrono::Duration::days(10));
        }
    }
    // A pruned tag that another family still uses stays pushed.
    pruned.retain(|name| {
        let (repo, tag) = name.split_once(':').unwrap_or_default();
        !wanted.contains_key(&(repo.to_owned(), tag.to_owned()))
    });
    let repositories: BTreeSet<&String> = wanted.keys().map(|(repo, _)| repo).collect();
    let summary = SeedSummary {
        repositories: repositories.len(),
        tags: wanted.len(),
        pruned: pruned.into_iter().collect(),
        newer: newer.into_iter().collect(),
    };
    // Tags of one repository share blobs, so they are pushed one after the
    // other; repositories in parallel, a few at a time (the registry writes
    // to disk).
    let mut by_repository: BTreeMap<&String, Vec<(&String, DateTime<Utc>)>> = BTreeMap::new();
    for ((repo, tag), created) in &wanted {
        by_repository.entry(repo).or_default().push((tag, *created));
    }
    let pushes = by_repository.into_iter().map(|(repo, tags)| async move {
        for (tag, created) in tags {
            let revision = crate::tracks::infer_track(tag)
                .and_then(|t| t.matches(tag))
                .and_then(|p| p.commit)
                .map(|commit| format!("{commit:0<40}"));
            // The version label makes every tag a distinct image, as in a real registry.
            let mut labels: Vec<(&str, &str)> =
                vec![("org.opencontainers.image.version", tag.as_str())];
            if let Some(revision) = revision.as_deref() {
                labels.push(("org.opencontainers.image.revision", revision));
            }
            let platforms = [
                PlatformSpec::linux("amd64", &labels, Some(created)),
                PlatformSpec::linux("arm64", &labels, Some(created)),
            ];
            pusher.push_image(repo, tag, &platforms).await?;
        }
        Ok::<(), TestkitError>(())
    });
    use futures::StreamExt as _;
    let mut results = futures::stream::iter(pushes).buffer_unordered(8);
    while let Some(result) = results.next().await {
        result?;
    }
    Ok(summary)
}

/// A tag one step newer than `tag` on `track`: the first digit run (from the
/// right) whose increment keeps the tag on the track and orders it later,
/// or, on push-ordered tracks, the commit replaced by another of its length.
pub fn next_tag_on(track: &crate::tracks::Track, tag: &str) -> Option<String> {
    let current = track.matches(tag)?;
    if track.ordering() == crate::tracks::TrackOrdering::Pushed {
        let commit = current.commit?;
        let replacement: String = commit
            .chars()
            .map(|c| if c == 'f' { 'e' } else { 'f' })
            .collect();
        let next = tag.replacen(&commit, &replacement, 1);
        return track.matches(&next).map(|_| next);
    }
    let key = current.key?;
    let bytes = tag.as_bytes();
    let mut end = bytes.len();
    while end > 0 {
        if !bytes[end - 1].is_ascii_digit() {
            end -= 1;
            continue;
        }
        let mut start = end;
        while start > 0 && bytes[start - 1].is_ascii_digit() {
            start -= 1;
        }
        if let Ok(number) = tag[start..end].parse::<u64>() {
            let next = format!(
                "{}{:0width$}{}",
                &tag[..start],
                number + 1,
                &tag[end..],
                width = end - start
            );
            if let Some(position) = track.matches(&next)
                && position.key.as_ref().is_some_and(|k| *k > key)
            {
                return Some(next);
            }
        }
        end = start;
    }
    None
}

/// One tag as [`HubApi`] serves it.
#[derive(Debug, Clone)]
struct HubRecord {
    pushed: DateTime<Utc>,
    digest: String,
    /// (os, architecture, manifest digest) per platform.
    platforms: Vec<(String, String, String)>,
}

type HubState = Arc<Mutex<BTreeMap<String, BTreeMap<String, HubRecord>>>>;

/// A client configuration whose Docker Hub is `registry`, with `hub` as its
/// tags API where given; without one, a mirrored `docker.io` has no tags
/// API, as on a mirror-only site.
pub fn docker_hub_mirrors(
    registry: &LocalRegistry,
    hub: Option<&HubApi>,
) -> crate::registry::RegistryConfig {
    let mut config = crate::registry::RegistryConfig::default();
    config
        .mirrors
        .insert("docker.io".to_owned(), registry.base_url());
    if let Some(hub) = hub {
        config
            .mirrors
            .insert(crate::registry::HUB_API_HOST.to_owned(), hub.base_url());
    }
    config
}

/// A checkout whose NVIDIA master has one family, `a-fp8-b200-vllm`, on
/// `image`: the smallest repository a plan of one image reads.
pub fn one_family_checkout(image: &str) -> Result<tempfile::TempDir, TestkitError> {
    let fail = |e: std::io::Error| TestkitError::Start(format!("one-family checkout: {e}"));
    let dir = tempfile::tempdir().map_err(fail)?;
    let master = format!(
        "a-fp8-b200-vllm:\n  image: {image}\n  model: demo/Demo\n  model-prefix: demo\n  runner: b200\n  precision: fp8\n  framework: vllm\n  multinode: false\n  scenarios:\n    fixed-seq-len:\n    - isl: 1024\n      osl: 1024\n      search-space:\n      - {{ tp: 8, conc-start: 4, conc-end: 64 }}\n"
    );
    std::fs::create_dir_all(dir.path().join("configs")).map_err(fail)?;
    std::fs::write(dir.path().join("configs/nvidia-master.yaml"), master).map_err(fail)?;
    Ok(dir)
}

/// Docker Hub's tags REST API (`GET /v2/namespaces/{ns}/repositories/{repo}/tags`,
/// `page`/`page_size`, newest push first, an absolute `next`) on 127.0.0.1,
/// answering from what a test records it pushed ([`HubApi::record`]): the
/// fields of Docker Hub's documented `tag` schema Klaud reads and their
/// neighbours (`digest`, `tag_last_pushed`, `images` with one entry per
/// platform manifest), as the sandbox's registry simulator serves them.
/// `docker-registry` has no such API; with both, a plan sees what it sees
/// on Docker Hub. Runs on its own thread, so it outlives the runtimes of the
/// callers.
pub struct HubApi {
    addr: SocketAddr,
    state: HubState,
    requests: Arc<AtomicU64>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl HubApi {
    /// Starts serving on 127.0.0.1 (an ephemeral port).
    pub fn start() -> Result<Self, TestkitError> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .map_err(|e| TestkitError::Token(format!("hub api bind: {e}")))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| TestkitError::Token(format!("hub api: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| TestkitError::Token(format!("hub api local_addr: {e}")))?;
        let state: HubState = Arc::default();
        let requests = Arc::new(AtomicU64::new(0));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (served, app_state, counter) = (addr, Arc::clone(&state), Arc::clone(&requests));
        std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
                    let (state, counter) = (Arc::clone(&app_state), Arc::clone(&counter));
                    async move {
                        counter.fetch_add(1, Ordering::Relaxed);
                        hub_answer(&state, served, &uri)
                    }
                });
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stopped.await;
                    })
                    .await;
            });
        });
        Ok(Self {
            addr,
            state,
            requests,
            stop: Some(stop),
        })
    }

    /// Where it serves, for [`crate::registry::RegistryConfig::mirrors`]
    /// under [`crate::registry::HUB_API_HOST`].
    pub fn base_url(&self) -> Url {
        Url::parse(&format!("http://{}", self.addr)).unwrap_or_else(|e| unreachable!("{e}"))
    }

    /// Requests answered so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Records that `image` was pushed as `repo:tag` at `pushed` (a later
    /// record of the same tag replaces it, as a push does).
    pub fn record(&self, repo: &str, tag: &str, pushed: DateTime<Utc>, image: &PushedImage) {
        let record = HubRecord {
            pushed,
            digest: image.index_digest.clone(),
            platforms: image
                .platforms
                .iter()
                .map(|(arch, manifest, _)| ("linux".to_owned(), arch.clone(), manifest.clone()))
                .collect(),
        };
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state
            .entry(repo.to_owned())
            .or_default()
            .insert(tag.to_owned(), record);
    }
}

impl Drop for HubApi {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

fn hub_answer(
    state: &HubState,
    addr: SocketAddr,
    uri: &axum::http::Uri,
) -> axum::response::Response {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    let not_found = || {
        (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"message": "object not found", "errinfo": {}})),
        )
            .into_response()
    };
    let parts: Vec<&str> = uri.path().trim_matches('/').split('/').collect();
    let ["v2", "namespaces", ns, "repositories", name, "tags"] = parts[..] else {
        return not_found();
    };
    let pairs: Vec<(String, String)> =
        url::form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    let get = |k: &str| {
        pairs
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    let page_size = get("page_size")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(10)
        .clamp(1, 100);
    let page = get("page")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1);
    let state = state.lock().unwrap_or_else(|p| p.into_inner());
    let Some(tags) = state.get(&format!("{ns}/{name}")) else {
        return not_found();
    };
    let mut tags: Vec<_> = tags.iter().collect();
    tags.sort_by(|a, b| b.1.pushed.cmp(&a.1.pushed).then_with(|| a.0.cmp(b.0)));
    let count = tags.len();
    let start = (page - 1).saturating_mul(page_size);
    let results: Vec<_> = tags
        .iter()
        .skip(start)
        .take(page_size)
        .map(|(tag, r)| {
            let pushed = r.pushed.to_rfc3339_opts(SecondsFormat::Micros, true);
            let images: Vec<_> = r
                .platforms
                .iter()
                .map(|(os, arch, digest)| {
                    json!({
                        "architecture": arch, "os": os, "variant": null, "os_version": null,
                        "features": null, "os_features": null, "digest": digest,
                        "size": 0, "status": "active", "last_pulled": null,
                        "last_pushed": pushed,
                    })
                })
                .collect();
            json!({
                "creator": 1, "last_updater": 1, "last_updater_username": ns,
                "name": tag, "v2": true, "full_size": 0, "digest": r.digest,
                "media_type": OCI_INDEX, "content_type": "image", "tag_status": "active",
                "tag_last_pulled": null, "tag_last_pushed": pushed, "last_updated": pushed,
                "images": images,
            })
        })
        .collect();
    let link = |p: usize| {
        format!(
            "http://{addr}/v2/namespaces/{ns}/repositories/{name}/tags?page={p}&page_size={page_size}&ordering=last_updated"
        )
    };
    let next = (start + page_size < count).then(|| link(page + 1));
    let previous = (page > 1).then(|| link(page - 1));
    axum::Json(json!({"count": count, "next": next, "previous": previous, "results": results}))
        .into_response()
}
