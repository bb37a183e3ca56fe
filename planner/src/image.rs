//! Container image references as the benchmark repository spells them.
//!
//! The real configs mix Docker spellings (`vllm/vllm-openai:v0.25.0`,
//! `nvcr.io/nvidia/x:1`), enroot spellings (`nvcr.io#nvidia/x:1`), digest
//! pins (`repo:tag@sha256:…`) and quoted values. An [`ImageRef`] keeps the
//! original spelling for printing and edits, and offers a normalized form for
//! comparison and identities.

use std::fmt;

/// The registry Docker Hub references resolve to when no host is written.
pub const DOCKER_HUB: &str = "docker.io";

/// How the registry host is joined to the repository path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostSeparator {
    /// `host/path` (Docker).
    Slash,
    /// `host#path` (enroot / pyxis).
    Hash,
}

/// A parsed image reference that remembers how it was written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ImageRef {
    /// The registry host as written (`nvcr.io`, `127.0.0.1:5000`), if any.
    host: Option<String>,
    separator: HostSeparator,
    /// The repository path as written (`vllm/vllm-openai`, `ubuntu`).
    path: String,
    tag: Option<String>,
    /// `algorithm:hex`, e.g. `sha256:1bf5…`.
    digest: Option<String>,
}

/// Why an image reference did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid image reference {text:?}: {reason}")]
pub struct ImageRefError {
    /// The text that failed to parse.
    pub text: String,
    /// What is wrong with it.
    pub reason: String,
}

impl ImageRef {
    /// Parses an image reference (already unquoted from YAML).
    pub fn parse(text: &str) -> Result<Self, ImageRefError> {
        let fail = |reason: &str| ImageRefError {
            text: text.to_owned(),
            reason: reason.to_owned(),
        };
        if text.is_empty() {
            return Err(fail("it is empty"));
        }
        if text.len() > 512 {
            return Err(fail("it is longer than 512 characters"));
        }
        if let Some(bad) = text.chars().find(|c| c.is_whitespace() || c.is_control()) {
            return Err(fail(&format!("it contains the character {bad:?}")));
        }

        let (rest, digest) = match text.split_once('@') {
            Some((rest, digest)) => {
                validate_digest(digest).map_err(|reason| fail(&reason))?;
                (rest, Some(digest.to_owned()))
            }
            None => (text, None),
        };

        let (host, separator, remainder) = if let Some((host, path)) = rest.split_once('#') {
            validate_host(host).map_err(|reason| fail(&reason))?;
            (Some(host.to_owned()), HostSeparator::Hash, path)
        } else {
            match rest.split_once('/') {
                Some((first, path)) if looks_like_host(first) => {
                    validate_host(first).map_err(|reason| fail(&reason))?;
                    (Some(first.to_owned()), HostSeparator::Slash, path)
                }
                _ => (None, HostSeparator::Slash, rest),
            }
        };

        // The tag is after the last ':' of the last path component; a ':' in an
        // earlier component would be a port, which is only valid in the host.
        let last_component_start = remainder.rfind('/').map_or(0, |i| i + 1);
        let (path, tag) = match remainder[last_component_start..].rfind(':') {
            Some(i) => {
                let split = last_component_start + i;
                (&remainder[..split], Some(&remainder[split + 1..]))
            }
            None => (remainder, None),
        };
        validate_path(path).map_err(|reason| fail(&reason))?;
        if let Some(tag) = tag {
            validate_tag(tag).map_err(|reason| fail(&reason))?;
        }
        if tag.is_none() && digest.is_none() {
            return Err(fail(
                "it has neither a tag nor a digest; Klaud only tracks explicit tags",
            ));
        }

        Ok(Self {
            host,
            separator,
            path: path.to_owned(),
            tag: tag.map(str::to_owned),
            digest,
        })
    }

    /// The registry host to contact: the written host, or `docker.io`.
    /// `index.docker.io` and `registry-1.docker.io` are Docker Hub too.
    pub fn registry(&self) -> &str {
        match self.host.as_deref() {
            None | Some("index.docker.io") | Some("registry-1.docker.io") => DOCKER_HUB,
            Some(host) => host,
        }
    }

    /// The repository path inside its registry, with Docker Hub's implied
    /// `library/` for single-component names (`ubuntu` → `library/ubuntu`).
    pub fn repository(&self) -> String {
        if self.registry() == DOCKER_HUB && !self.path.contains('/') {
            format!("library/{}", self.path)
        } else {
            self.path.clone()
        }
    }

    /// The repository path as written.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The tag, if any.
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// The pinned digest (`sha256:…`), if any.
    pub fn digest(&self) -> Option<&str> {
        self.digest.as_deref()
    }

    /// Whether the host is written in enroot style (`host#path`).
    pub fn is_enroot(&self) -> bool {
        self.separator == HostSeparator::Hash
    }

    /// The normalized spelling used for equality and identities: enroot `#`
    /// becomes `/`, and Docker Hub's implied parts are dropped (`docker.io/`,
    /// `library/`), so every spelling of one image compares equal. Dropping
    /// rather than adding them keeps the normalized form identical to the
    /// spelling the benchmark repository uses for Docker Hub images.
    pub fn normalized(&self) -> String {
        let mut out = String::new();
        let registry = self.registry();
        if registry == DOCKER_HUB {
            out.push_str(self.path.strip_prefix("library/").unwrap_or(&self.path));
        } else {
            out.push_str(registry);
            out.push('/');
            out.push_str(&self.path);
        }
        if let Some(tag) = &self.tag {
            out.push(':');
            out.push_str(tag);
        }
        if let Some(digest) = &self.digest {
            out.push('@');
            out.push_str(digest);
        }
        out
    }

    /// The repository without tag or digest, normalized (`nvcr.io/nvidia/x`,
    /// `vllm/vllm-openai`): what tag tracks and registry queries key on.
    pub fn normalized_repository(&self) -> String {
        let full = self.normalized();
        let end = full.find('@').unwrap_or(full.len());
        let without_digest = &full[..end];
        match (&self.tag, without_digest.rfind(':')) {
            (Some(_), Some(i)) => without_digest[..i].to_owned(),
            _ => without_digest.to_owned(),
        }
    }

    /// Whether two references name the same image (normalized equality).
    pub fn same_image(&self, other: &ImageRef) -> bool {
        self.normalized() == other.normalized()
    }

    /// This reference with a new tag and digest, keeping the host spelling
    /// (enroot or Docker) and the repository path exactly as written.
    pub fn with_reference(
        &self,
        tag: Option<&str>,
        digest: Option<&str>,
    ) -> Result<Self, ImageRefError> {
        let mut next = self.clone();
        next.tag = tag.map(str::to_owned);
        next.digest = digest.map(str::to_owned);
        // Re-parse the printed form so the result obeys every parse rule.
        let printed = next.to_string();
        let parsed = Self::parse(&printed)?;
        Ok(parsed)
    }
}

impl fmt::Display for ImageRef {
    /// Prints the original spelling.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(host) = &self.host {
            let separator = match self.separator {
                HostSeparator::Slash => '/',
                HostSeparator::Hash => '#',
            };
            write!(f, "{host}{separator}")?;
        }
        f.write_str(&self.path)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for ImageRef {
    type Err = ImageRefError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

/// Docker's rule: the first component is a host when it has a `.` or a `:`,
/// or is `localhost`.
fn looks_like_host(component: &str) -> bool {
    component.contains('.') || component.contains(':') || component == "localhost"
}

fn validate_host(host: &str) -> Result<(), String> {
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) => (name, Some(port)),
        None => (host, None),
    };
    let name_ok = !name.is_empty()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if !name_ok {
        return Err(format!("{host:?} is not a valid registry host"));
    }
    if let Some(port) = port
        && (port.is_empty() || port.len() > 5 || !port.chars().all(|c| c.is_ascii_digit()))
    {
        return Err(format!("{host:?} has an invalid port"));
    }
    Ok(())
}

/// Repository path components: lowercase alphanumerics joined by `.`, `_`,
/// `__` or runs of `-` (the OCI distribution grammar).
fn validate_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("the repository name is empty".to_owned());
    }
    for component in path.split('/') {
        let valid = !component.is_empty()
            && component.chars().all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-')
            })
            && component.starts_with(|c: char| c.is_ascii_alphanumeric())
            && component.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !valid {
            return Err(format!(
                "repository component {component:?} must be lowercase letters and digits joined by '.', '_' or '-'"
            ));
        }
    }
    Ok(())
}

fn validate_tag(tag: &str) -> Result<(), String> {
    let valid = !tag.is_empty()
        && tag.len() <= 128
        && tag.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        && tag
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if valid {
        Ok(())
    } else {
        Err(format!(
            "tag {tag:?} must be 1–128 letters, digits, '_', '.' or '-', not starting with '.' or '-'"
        ))
    }
}

fn validate_digest(digest: &str) -> Result<(), String> {
    let Some((algorithm, hex)) = digest.split_once(':') else {
        return Err(format!(
            "digest {digest:?} must look like sha256:<64 hex digits>"
        ));
    };
    let expected_len = match algorithm {
        "sha256" => 64,
        "sha512" => 128,
        _ => {
            return Err(format!(
                "digest algorithm {algorithm:?} is not sha256 or sha512"
            ));
        }
    };
    if hex.len() != expected_len
        || !hex
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    {
        return Err(format!(
            "digest {digest:?} must be {algorithm}:<{expected_len} lowercase hex digits>"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPELLINGS: &[&str] = &[
        "vllm/vllm-openai:v0.25.0",
        "vllm/vllm-openai:nightly-3ee2df30337a301164c46ae444b76ee67e71c106",
        "vllm/vllm-openai:nightly-dev-x86_64-cu13.0.1-426e59f",
        "lmsysorg/sglang:v0.5.16-cu130",
        "lmsysorg/sglang:nightly-dev-cu13-20260815-a5ba081f",
        "lmsysorg/sglang-rocm:v0.5.17-rocm720-mi35x-20260817",
        "lmsysorg/sglang:deepseek-v4-hopper@sha256:1bf5d508ab110cc0fe1659a5f21d1be02a7f0d7ca8f58cea7e7f4e11f6ae208f",
        "nvcr.io#nvidia/tensorrt-llm/release:1.3.0rc14",
        "ghcr.io#semianalysisai/trtllm-deepseek-v4:feat-deepseek_v4-c185066",
        "rocm/atom-dev:nightly_202606101403",
        "vllm/vllm-openai:kimi-k3",
        "127.0.0.1:5000/vllm/vllm-openai:v1",
        "ubuntu:24.04",
    ];

    #[test]
    fn every_real_spelling_round_trips() {
        for text in SPELLINGS {
            let image = ImageRef::parse(text).unwrap();
            assert_eq!(image.to_string(), *text);
        }
    }

    #[test]
    fn enroot_and_docker_spellings_normalize_equal() {
        let enroot = ImageRef::parse("nvcr.io#nvidia/x:1").unwrap();
        let docker = ImageRef::parse("nvcr.io/nvidia/x:1").unwrap();
        assert!(enroot.same_image(&docker));
        assert_eq!(enroot.normalized(), "nvcr.io/nvidia/x:1");
        assert_eq!(enroot.registry(), "nvcr.io");
        assert_eq!(enroot.repository(), "nvidia/x");
        assert!(enroot.is_enroot());
    }

    #[test]
    fn docker_hub_defaults_are_implied() {
        let short = ImageRef::parse("ubuntu:24.04").unwrap();
        let long = ImageRef::parse("docker.io/library/ubuntu:24.04").unwrap();
        assert!(short.same_image(&long));
        assert_eq!(short.registry(), "docker.io");
        assert_eq!(short.repository(), "library/ubuntu");
        let vllm = ImageRef::parse("docker.io/vllm/vllm-openai:v1").unwrap();
        assert_eq!(vllm.normalized(), "vllm/vllm-openai:v1");
        assert_eq!(vllm.normalized_repository(), "vllm/vllm-openai");
    }

    #[test]
    fn with_reference_keeps_the_spelling() {
        let image = ImageRef::parse("nvcr.io#nvidia/tensorrt-llm/release:1.3.0rc14").unwrap();
        let digest = format!("sha256:{}", "a".repeat(64));
        let next = image
            .with_reference(Some("1.3.0rc18"), Some(&digest))
            .unwrap();
        assert_eq!(
            next.to_string(),
            format!("nvcr.io#nvidia/tensorrt-llm/release:1.3.0rc18@{digest}")
        );
        assert_eq!(
            next.normalized_repository(),
            "nvcr.io/nvidia/tensorrt-llm/release"
        );
    }

    #[test]
    fn malformed_references_are_clear_errors() {
        for (text, needle) in [
            ("", "empty"),
            ("vllm/vllm-openai", "neither a tag nor a digest"),
            ("vllm/VLLM:v1", "lowercase"),
            ("vllm/vllm:", "tag"),
            ("vllm/vllm:-x", "tag"),
            ("vllm/vllm:v1@sha256:abc", "64"),
            ("vllm/vllm:v1@md5:abc", "algorithm"),
            ("vllm/vllm :v1", "character"),
            ("host.io:99999999/x:1", "port"),
            ("#x:1", "host"),
            ("a//b:1", "component"),
        ] {
            let err = ImageRef::parse(text).unwrap_err();
            assert!(err.to_string().contains(needle), "{text:?}: {err}");
        }
    }
}
