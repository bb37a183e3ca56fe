//! Configuration of the registry client.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use url::Url;

use super::error::RegistryError;

/// Host key in [`RegistryConfig::mirrors`] that redirects Docker Hub's REST API
/// (tags with `tag_last_pushed`).
pub const HUB_API_HOST: &str = "hub.docker.com";

/// Username and password (or personal access token) for one registry host.
///
/// `Debug` never prints the password.
#[derive(Clone, PartialEq, Eq)]
pub struct BasicCredentials {
    /// Login name.
    pub username: String,
    /// Password or access token.
    pub password: String,
}

impl fmt::Debug for BasicCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BasicCredentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Settings of a [`super::RegistryClient`]. `Default` gives the documented
/// defaults and no mirrors or credentials.
#[derive(Debug, Clone)]
pub struct RegistryConfig {
    /// Registry host (`docker.io`, `nvcr.io`, `127.0.0.1:5000`, or
    /// [`HUB_API_HOST`]) → base URL used instead of the real one. Default: empty.
    pub mirrors: BTreeMap<String, Url>,
    /// Registry host → basic credentials, used for the token endpoint or for
    /// registries that answer with a `Basic` challenge. Default: empty.
    pub credentials: BTreeMap<String, BasicCredentials>,
    /// Timeout of one HTTP request, including reading its body. Default 30 s.
    pub timeout: Duration,
    /// Largest accepted manifest, index or config blob. Default 4 MiB.
    pub max_manifest_bytes: usize,
    /// Largest accepted page of a tag list (registry or Hub API). Default 16 MiB.
    pub max_tag_list_bytes: usize,
    /// Most pages followed when listing tags. Default 50.
    pub max_tag_pages: usize,
    /// `n=` sent with `tags/list`; `None` lets the registry choose. Default `None`.
    pub tag_page_size: Option<u32>,
    /// Most HTTP requests in flight at once to one registry host (as image
    /// references name it; a mirror counts for the host it stands in for).
    /// Default 16.
    pub concurrency: usize,
    /// Retries after a 5xx, 429 or connection error (reads only). Default 4.
    pub max_retries: u32,
    /// First backoff delay; doubles each retry, with full jitter. Default 250 ms.
    pub retry_base_delay: Duration,
    /// Upper bound of any wait, including a server's `Retry-After`. Default 30 s.
    pub max_retry_delay: Duration,
    /// `User-Agent` header. Default `klaud/<version>`.
    pub user_agent: String,
    /// Registry host → base URL of a Docker-Hub-style tags API
    /// (`/v2/namespaces/{ns}/repositories/{name}/tags` with
    /// `tag_last_pushed`), for registries other than Docker Hub that offer
    /// one. Docker Hub itself needs no entry (see
    /// [`RegistryConfig::hub_api_for`]). Default: empty.
    pub hub_api: BTreeMap<String, Url>,
    /// Timeout of one Docker Hub tags API request: push times are optional
    /// (creation times order the track without them), so a proxy that never
    /// answers costs this once, not the full `timeout`. Default 5 s.
    pub hub_api_timeout: Duration,
    /// How long a host stays unasked after a connection-level failure (DNS,
    /// refused, timeout). It should outlast one plan; the daemon may persist
    /// the state across restarts. Default 15 min.
    pub breaker_cooldown: Duration,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self {
            mirrors: BTreeMap::new(),
            credentials: BTreeMap::new(),
            timeout: Duration::from_secs(30),
            max_manifest_bytes: 4 * 1024 * 1024,
            max_tag_list_bytes: 16 * 1024 * 1024,
            max_tag_pages: 50,
            tag_page_size: None,
            concurrency: 16,
            max_retries: 4,
            retry_base_delay: Duration::from_millis(250),
            max_retry_delay: Duration::from_secs(30),
            user_agent: format!("klaud/{}", env!("CARGO_PKG_VERSION")),
            hub_api: BTreeMap::new(),
            hub_api_timeout: Duration::from_secs(5),
            breaker_cooldown: Duration::from_secs(15 * 60),
        }
    }
}

impl RegistryConfig {
    /// Adds basic credentials from environment variables of the form
    /// `KLAUD_REGISTRY_<HOST>_USERNAME` / `_PASSWORD`, where `<HOST>` is the
    /// host upper-cased with every non-alphanumeric character replaced by `_`
    /// (`nvcr.io` → `KLAUD_REGISTRY_NVCR_IO_USERNAME`). Only hosts passed in
    /// `hosts` are looked up; entries already configured are kept.
    pub fn with_env_credentials<'a>(mut self, hosts: impl IntoIterator<Item = &'a str>) -> Self {
        self.add_credentials_from(hosts, |name| std::env::var(name).ok());
        self
    }

    fn add_credentials_from<'a>(
        &mut self,
        hosts: impl IntoIterator<Item = &'a str>,
        lookup: impl Fn(&str) -> Option<String>,
    ) {
        for host in hosts {
            if self.credentials.contains_key(host) {
                continue;
            }
            let key = env_key(host);
            let user = lookup(&format!("KLAUD_REGISTRY_{key}_USERNAME"));
            let pass = lookup(&format!("KLAUD_REGISTRY_{key}_PASSWORD"));
            if let (Some(username), Some(password)) = (user, pass) {
                self.credentials
                    .insert(host.to_owned(), BasicCredentials { username, password });
            }
        }
    }

    pub(crate) fn validate(&self) -> Result<(), RegistryError> {
        let bad = |m: String| Err(RegistryError::Config(m));
        for (host, url) in &self.mirrors {
            if !matches!(url.scheme(), "http" | "https") {
                return bad(format!(
                    "mirror for {host}: scheme must be http or https, got {}",
                    url.scheme()
                ));
            }
            if url.host_str().is_none() {
                return bad(format!("mirror for {host}: URL has no host"));
            }
            if !url.username().is_empty() || url.password().is_some() {
                return bad(format!(
                    "mirror for {host}: credentials must not be written in the URL; use `credentials`"
                ));
            }
            if url.query().is_some() || url.fragment().is_some() {
                return bad(format!(
                    "mirror for {host}: URL must not have a query or fragment"
                ));
            }
        }
        if self.concurrency == 0 {
            return bad("concurrency must be at least 1".into());
        }
        if self.max_tag_pages == 0 {
            return bad("max_tag_pages must be at least 1".into());
        }
        if self.max_manifest_bytes == 0 || self.max_tag_list_bytes == 0 {
            return bad("body size limits must be greater than zero".into());
        }
        if self.tag_page_size == Some(0) {
            return bad("tag_page_size must be at least 1 when set".into());
        }
        for (host, url) in &self.hub_api {
            if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
                return bad(format!(
                    "hub_api for {host}: {url} must be an http or https URL with a host"
                ));
            }
        }
        if self.timeout.is_zero() {
            return bad("timeout must be greater than zero".into());
        }
        Ok(())
    }

    /// Base URL (no trailing slash in the path) for a registry host.
    pub(crate) fn base_url(&self, host: &str) -> Result<Url, RegistryError> {
        if let Some(url) = self.mirrors.get(host) {
            return Ok(url.clone());
        }
        let real = if host == "docker.io" {
            "https://registry-1.docker.io".to_owned()
        } else {
            format!("https://{host}")
        };
        Url::parse(&real).map_err(|e| {
            RegistryError::Config(format!("registry host {host:?} is not a valid host: {e}"))
        })
    }

    /// Where the Docker Hub tags API for `host` is, if it has one: a
    /// [`RegistryConfig::hub_api`] entry; for `docker.io`, the
    /// [`HUB_API_HOST`] mirror, or the real `hub.docker.com` unless
    /// `docker.io` itself is mirrored — a mirror of the registry does not
    /// imply one of Docker Hub's REST API, and asking the real one from a
    /// mirrored (often offline) site only costs a failed lookup.
    pub fn hub_api_for(&self, host: &str) -> Option<Url> {
        if let Some(url) = self.hub_api.get(host) {
            return Some(url.clone());
        }
        if host != "docker.io" {
            return None;
        }
        if let Some(url) = self.mirrors.get(HUB_API_HOST) {
            return Some(url.clone());
        }
        if self.mirrors.contains_key("docker.io") {
            return None;
        }
        Url::parse("https://hub.docker.com").ok()
    }
}

fn env_key(host: &str) -> String {
    host.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_debug_hides_password() {
        let c = BasicCredentials {
            username: "bot".into(),
            password: "hunter2".into(),
        };
        let s = format!("{c:?}");
        assert!(s.contains("bot") && !s.contains("hunter2"), "{s}");
    }

    #[test]
    fn env_credentials_use_normalized_host_names() {
        let mut cfg = RegistryConfig::default();
        cfg.add_credentials_from(["nvcr.io", "127.0.0.1:5000", "ghcr.io"], |k| match k {
            "KLAUD_REGISTRY_NVCR_IO_USERNAME" => Some("$oauthtoken".into()),
            "KLAUD_REGISTRY_NVCR_IO_PASSWORD" => Some("secret".into()),
            "KLAUD_REGISTRY_127_0_0_1_5000_USERNAME" => Some("u".into()),
            _ => None,
        });
        assert_eq!(cfg.credentials["nvcr.io"].username, "$oauthtoken");
        assert!(
            !cfg.credentials.contains_key("127.0.0.1:5000"),
            "password missing → no entry"
        );
        assert!(!cfg.credentials.contains_key("ghcr.io"));
    }

    #[test]
    fn mirrors_with_userinfo_are_rejected() {
        let mut cfg = RegistryConfig::default();
        cfg.mirrors.insert(
            "docker.io".into(),
            Url::parse("http://u:p@127.0.0.1:1").unwrap(),
        );
        let err = cfg.validate().unwrap_err().to_string();
        assert!(err.contains("docker.io") && !err.contains(":p@"), "{err}");
    }

    #[test]
    fn the_hub_api_is_asked_only_for_docker_hub_or_configured_registries() {
        let url = |s: &str| Url::parse(s).unwrap();
        let mut cfg = RegistryConfig::default();
        assert_eq!(
            cfg.hub_api_for("docker.io").map(|u| u.to_string()),
            Some("https://hub.docker.com/".into())
        );
        assert_eq!(cfg.hub_api_for("nvcr.io"), None);
        cfg.mirrors
            .insert("docker.io".into(), url("http://127.0.0.1:5000"));
        assert_eq!(
            cfg.hub_api_for("docker.io"),
            None,
            "a mirrored docker.io does not imply hub.docker.com"
        );
        cfg.mirrors
            .insert(HUB_API_HOST.into(), url("http://127.0.0.1:6000"));
        assert_eq!(
            cfg.hub_api_for("docker.io"),
            Some(url("http://127.0.0.1:6000"))
        );
        cfg.hub_api
            .insert("registry.example".into(), url("http://127.0.0.1:7000"));
        assert_eq!(
            cfg.hub_api_for("registry.example"),
            Some(url("http://127.0.0.1:7000"))
        );
        cfg.hub_api.insert("bad".into(), url("file:///x"));
        assert!(
            cfg.validate()
                .unwrap_err()
                .to_string()
                .contains("hub_api for bad")
        );
    }

    #[test]
    fn real_base_urls() {
        let cfg = RegistryConfig::default();
        assert_eq!(
            cfg.base_url("docker.io").unwrap().as_str(),
            "https://registry-1.docker.io/"
        );
        assert_eq!(
            cfg.base_url("nvcr.io").unwrap().as_str(),
            "https://nvcr.io/"
        );
        assert_eq!(
            cfg.base_url("127.0.0.1:5000").unwrap().as_str(),
            "https://127.0.0.1:5000/"
        );
        assert!(cfg.base_url("bad host/x").is_err());
    }
}
