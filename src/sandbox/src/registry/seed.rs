//! Seed format of the registry simulator and deterministic image content.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest as _, Sha256};

/// OCI media types the simulator serves.
pub(crate) const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub(crate) const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub(crate) const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";

/// The simulator's seed file.
///
/// ```json
/// {
///   "repositories": {
///     "vllm/vllm-openai": {
///       "tags": {
///         "v0.25.0": {
///           "pushed": "2026-01-10T12:00:00Z",
///           "created": "2026-01-10T11:00:00Z",
///           "labels": {"org.opencontainers.image.revision": "0123abcd..."},
///           "env": {"CUDA_VERSION": "13.0.2", "PYTORCH_VERSION": "2.13.0"},
///           "platforms": [
///             {"architecture": "amd64"},
///             {"architecture": "arm64", "variant": "v8", "labels": {"extra": "x"}}
///           ]
///         },
///         "kimi-k3": {"index": false, "platforms": [{"architecture": "amd64"}]}
///       }
///     }
///   }
/// }
/// ```
///
/// * `repositories`: repository path within the registry (`library/ubuntu`,
///   `nvidia/tensorrt-llm/release`) → repository. Serve one simulator per
///   registry host, or several hosts' repositories in one (the client maps
///   every host to the simulator with its mirror setting).
/// * `tags`: tag → image. Every field is optional:
///   * `pushed` (RFC 3339): Docker Hub's `tag_last_pushed`; absent → `null`.
///   * `created` (RFC 3339): the config `created` of every platform.
///   * `labels`: `config.Labels` of every platform.
///   * `env`: `config.Env` of every platform, as name → value (written as
///     Docker's `NAME=value` list; left out of the config when empty).
///   * `platforms`: default `linux/amd64` and `linux/arm64`. Each has
///     `architecture` (required), `os` (default `linux`), `variant`, and
///     `labels` / `env` / `created` that extend / replace the tag-level values.
///   * `index` (default `true`): serve an OCI index; `false` serves the single
///     platform manifest directly (requires exactly one platform).
///
/// Manifests and configs are generated as compact JSON with keys in a fixed
/// order, so the same seed always yields the same digests.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistrySeed {
    /// Repository path → its tags.
    #[serde(default)]
    pub repositories: BTreeMap<String, RepositorySeed>,
}

/// One repository of the seed.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepositorySeed {
    /// Tag → image.
    #[serde(default)]
    pub tags: BTreeMap<String, TagSeed>,
}

/// One tag of the seed.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TagSeed {
    /// Docker Hub `tag_last_pushed`.
    pub pushed: Option<DateTime<Utc>>,
    /// Config `created` for every platform.
    pub created: Option<DateTime<Utc>>,
    /// Labels for every platform.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// `config.Env` of every platform, name → value.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Platforms; default linux/amd64 + linux/arm64.
    pub platforms: Option<Vec<PlatformSeed>>,
    /// Serve an index (default) or the single manifest.
    pub index: Option<bool>,
}

/// One platform of a tag.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlatformSeed {
    /// `amd64`, `arm64`, ...
    pub architecture: String,
    /// Default `linux`.
    pub os: Option<String>,
    /// `v8`, ...
    pub variant: Option<String>,
    /// Extra labels (override tag-level ones with the same key).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Extra environment variables (override tag-level ones).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Replaces the tag-level `created`.
    pub created: Option<DateTime<Utc>>,
}

/// Generated documents of one tag: (digest, media type, bytes) for the
/// top-level manifest, plus every manifest and blob it references.
#[derive(Debug)]
pub(crate) struct Generated {
    pub(crate) top: (String, &'static str),
    pub(crate) manifests: Vec<(String, &'static str, Vec<u8>)>,
    pub(crate) blobs: Vec<(String, Vec<u8>)>,
}

pub(crate) fn sha256(b: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(b)))
}

/// Builds the documents for a tag; errors name the tag and the problem.
pub(crate) fn generate(repo: &str, tag: &str, seed: &TagSeed) -> Result<Generated, String> {
    let default_platforms = || {
        ["amd64", "arm64"]
            .iter()
            .map(|a| PlatformSeed {
                architecture: (*a).to_owned(),
                os: None,
                variant: None,
                labels: BTreeMap::new(),
                env: BTreeMap::new(),
                created: None,
            })
            .collect::<Vec<_>>()
    };
    let platforms = seed.platforms.clone().unwrap_or_else(default_platforms);
    if platforms.is_empty() {
        return Err(format!("{repo}:{tag}: `platforms` is empty"));
    }
    let as_index = seed.index.unwrap_or(true);
    if !as_index && platforms.len() != 1 {
        return Err(format!(
            "{repo}:{tag}: `index: false` needs exactly one platform, got {}",
            platforms.len()
        ));
    }
    let mut out = Generated {
        top: (String::new(), OCI_INDEX),
        manifests: Vec::new(),
        blobs: Vec::new(),
    };
    let mut entries = Vec::new();
    for p in &platforms {
        if p.architecture.is_empty() {
            return Err(format!(
                "{repo}:{tag}: a platform has an empty `architecture`"
            ));
        }
        let os = p.os.clone().unwrap_or_else(|| "linux".to_owned());
        let mut labels = seed.labels.clone();
        labels.extend(p.labels.clone());
        let mut config = json!({"architecture": p.architecture, "os": os});
        if let Some(v) = &p.variant {
            config["variant"] = json!(v);
        }
        if let Some(c) = p.created.or(seed.created) {
            config["created"] = json!(c.to_rfc3339_opts(SecondsFormat::AutoSi, true));
        }
        config["config"] = json!({"Labels": labels});
        let mut env = seed.env.clone();
        env.extend(p.env.clone());
        // Docker's `config.Env` is a list of `NAME=value`; left out when
        // empty so existing seeds keep their digests.
        if !env.is_empty() {
            let env: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
            config["config"]["Env"] = json!(env);
        }
        config["rootfs"] = json!({"type": "layers", "diff_ids": []});
        let config = config.to_string().into_bytes();
        let config_digest = sha256(&config);
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": config.len()},
            "layers": [],
        })
        .to_string()
        .into_bytes();
        let manifest_digest = sha256(&manifest);
        let mut platform = json!({"architecture": p.architecture, "os": os});
        if let Some(v) = &p.variant {
            platform["variant"] = json!(v);
        }
        entries.push(json!({
            "mediaType": OCI_MANIFEST,
            "digest": manifest_digest,
            "size": manifest.len(),
            "platform": platform,
        }));
        out.blobs.push((config_digest, config));
        if !as_index {
            out.top = (manifest_digest.clone(), OCI_MANIFEST);
        }
        out.manifests
            .push((manifest_digest, OCI_MANIFEST, manifest));
    }
    if as_index {
        let index = json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries})
            .to_string()
            .into_bytes();
        let digest = sha256(&index);
        out.top = (digest.clone(), OCI_INDEX);
        out.manifests.push((digest, OCI_INDEX, index));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_is_deterministic_and_labels_merge() {
        let seed: TagSeed = serde_json::from_str(
            r#"{"labels": {"a": "1", "b": "tag"}, "created": "2026-01-01T00:00:00Z",
                "platforms": [{"architecture": "amd64", "labels": {"b": "platform"}}, {"architecture": "arm64"}]}"#,
        )
        .unwrap();
        let one = generate("r", "t", &seed).unwrap();
        let two = generate("r", "t", &seed).unwrap();
        assert_eq!(one.top, two.top);
        assert_eq!(one.manifests.len(), 3);
        let amd_config = String::from_utf8(one.blobs[0].1.clone()).unwrap();
        assert!(
            amd_config.contains(r#""Labels":{"a":"1","b":"platform"}"#),
            "{amd_config}"
        );
        assert!(amd_config.contains(r#""created":"2026-01-01T00:00:00Z""#));
    }

    #[test]
    fn bad_seeds_are_explained() {
        let no_platforms: TagSeed = serde_json::from_str(r#"{"platforms": []}"#).unwrap();
        assert!(
            generate("r", "t", &no_platforms)
                .unwrap_err()
                .contains("r:t")
        );
        let single: TagSeed = serde_json::from_str(r#"{"index": false}"#).unwrap();
        assert!(
            generate("r", "t", &single)
                .unwrap_err()
                .contains("exactly one")
        );
        assert!(serde_json::from_str::<RegistrySeed>(r#"{"repos": {}}"#).is_err());
        assert!(serde_json::from_str::<TagSeed>(r#"{"pushed": "yesterday"}"#).is_err());
    }
}
