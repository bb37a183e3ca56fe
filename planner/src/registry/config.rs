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
    /// Most HTTP requests in flight at once. Default 16.
    pub concurrency: usize,
    /// Retries after a 5xx, 429 or connection error (reads only). Default 4.
    pub max_retries: u32,
    /// First backoff delay; doubles each retry, with full jitter. Default 250 ms.
    pub retry_base_delay: Duration,
    /// Upper bound of any wait, including a server's `Retry-After`. Default 30 s.
    pub max_retry_delay: Duration,
    /// `User-Agent` header. Default `klaud/<version>`.
    pub user_agent: String,
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

    pub(crate) fn hub_api_url(&self) -> Url {
        match self.mirrors.get(HUB_API_HOST) {
            Some(u) => u.clone(),
            None => Url::parse("https://hub.docker.com")
                .unwrap_or_else(|_| unreachable!("constant URL parses")),
        }
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
