//! What an image declares about the software inside it: the CUDA/ROCm
//! toolkit, torch and the engine's version and build commit, read from the
//! image config's labels and environment (the config blob the planner
//! already reads for a candidate). Only declared values are kept: a value
//! the image does not state is absent, never inferred from the tag.

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::image::ImageRef;
use crate::registry::{PlatformImage, RegistryClient, RegistryError};

/// Environment variables and labels, in order of preference, per field.
/// The environment names are the ones the images' own Dockerfiles set
/// (NVIDIA CUDA base images: `CUDA_VERSION`; ROCm bases: `ROCM_VERSION`;
/// NGC PyTorch: `PYTORCH_VERSION`); labels are the engines' build labels.
const CUDA: &[Source] = &[
    Source::Env("CUDA_VERSION"),
    Source::Label("com.nvidia.cuda.version"),
];
const ROCM: &[Source] = &[Source::Env("ROCM_VERSION")];
const TORCH: &[Source] = &[
    Source::Env("PYTORCH_VERSION"),
    Source::Env("TORCH_VERSION"),
    Source::Label("org.pytorch.version"),
];
const ENGINE_VERSION: &[Source] = &[
    Source::Env("VLLM_VERSION"),
    Source::Env("SGLANG_VERSION"),
    Source::Env("TRTLLM_VERSION"),
    Source::Env("TENSORRT_LLM_VERSION"),
    Source::Env("ATOM_VERSION"),
    Source::Label("ai.vllm.version"),
];
const ENGINE_COMMIT: &[Source] = &[
    Source::Label("ai.vllm.build.commit"),
    Source::Label("org.opencontainers.image.revision"),
];

#[derive(Clone, Copy)]
enum Source {
    Env(&'static str),
    Label(&'static str),
}

/// The versions one image declares. Every field is `None` when the image
/// does not state it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageVersions {
    /// CUDA toolkit (`CUDA_VERSION`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda: Option<String>,
    /// ROCm (`ROCM_VERSION`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rocm: Option<String>,
    /// torch (`PYTORCH_VERSION`, `TORCH_VERSION`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch: Option<String>,
    /// The engine's own version (`VLLM_VERSION`, `SGLANG_VERSION`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_version: Option<String>,
    /// The engine's build commit (`ai.vllm.build.commit`, else the OCI
    /// revision label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_commit: Option<String>,
}

impl ImageVersions {
    /// What `platform`'s labels and environment declare.
    pub fn of(platform: &PlatformImage) -> Self {
        let pick = |sources: &[Source]| {
            sources.iter().find_map(|s| {
                let value = match s {
                    Source::Env(name) => platform.env.get(*name),
                    Source::Label(name) => platform.labels.get(*name),
                }?;
                let value = value.trim();
                (!value.is_empty()).then(|| value.to_owned())
            })
        };
        Self {
            cuda: pick(CUDA),
            rocm: pick(ROCM),
            torch: pick(TORCH),
            engine_version: pick(ENGINE_VERSION),
            engine_commit: pick(ENGINE_COMMIT),
        }
    }

    /// Whether nothing is declared.
    pub fn is_empty(&self) -> bool {
        self.rows().iter().all(|(_, v)| v.is_none())
    }

    /// `(field name, value)` in display order; the names are the ones the
    /// PR body shows.
    pub fn rows(&self) -> [(&'static str, Option<&str>); 5] {
        [
            ("CUDA", self.cuda.as_deref()),
            ("ROCm", self.rocm.as_deref()),
            ("torch", self.torch.as_deref()),
            ("engine version", self.engine_version.as_deref()),
            ("engine build commit", self.engine_commit.as_deref()),
        ]
    }
}

/// What `image` declares for `architecture` (linux), reading its manifest,
/// index entry and config through `client` (cached by digest). `Ok(None)`
/// when the image or that platform is not in the registry (a pruned tag).
pub fn image_versions<'f>(
    client: &'f RegistryClient,
    image: &'f ImageRef,
    architecture: &'f str,
) -> BoxFuture<'f, Result<Option<ImageVersions>, RegistryError>> {
    Box::pin(async move {
        Ok(declared(client, image, architecture)
            .await?
            .map(|d| d.versions))
    })
}

/// What an image's config declares: its versions and the upstream revision
/// its labels name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Declared {
    /// The toolkit and engine versions.
    pub versions: ImageVersions,
    /// The upstream revision label, when the image has one.
    pub revision: Option<String>,
}

/// [`image_versions`] with the revision label: what a wave reads of a
/// candidate the plan decided from Docker Hub's tags API alone
/// ([`crate::plan::Candidate::image_read`]).
pub fn declared<'f>(
    client: &'f RegistryClient,
    image: &'f ImageRef,
    architecture: &'f str,
) -> BoxFuture<'f, Result<Option<Declared>, RegistryError>> {
    Box::pin(async move {
        let host = image.registry();
        let repository = image.repository();
        // A pinned digest is read as it is: the read itself says whether
        // the registry has it (a `HEAD` first would only add a round trip,
        // and where its tag is to be checked, `tag_digest` does that).
        let digest = match image.digest() {
            Some(digest) => digest.to_owned(),
            None => match tag_digest(client, image).await? {
                Some(digest) => digest,
                None => return Ok(None),
            },
        };
        let index = match client.image_platforms(host, &repository, &digest).await {
            Ok(index) => index,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        let Some(platform) = index.platform("linux", architecture) else {
            return Ok(None);
        };
        let platform = client.platform_image(host, &repository, platform).await?;
        Ok(Some(Declared {
            versions: ImageVersions::of(&platform),
            revision: crate::plan::revision(&platform).map(str::to_owned),
        }))
    })
}

/// The digest `image`'s tag points at now (`None`: the registry has no
/// such tag). A candidate the plan took from Docker Hub's tags API pins
/// the digest the API named ([`crate::plan::Candidate::image_read`]); a
/// wave compares the two before it acts on it.
pub fn tag_digest<'f>(
    client: &'f RegistryClient,
    image: &'f ImageRef,
) -> BoxFuture<'f, Result<Option<String>, RegistryError>> {
    Box::pin(async move {
        let tag = image.tag().unwrap_or("latest");
        match client
            .head_manifest(image.registry(), &image.repository(), tag)
            .await
        {
            Ok(head) => Ok(Some(head.digest)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn platform(labels: &[(&str, &str)], env: &[(&str, &str)]) -> PlatformImage {
        let map = |kv: &[(&str, &str)]| -> BTreeMap<String, String> {
            kv.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        PlatformImage {
            os: "linux".into(),
            architecture: "amd64".into(),
            variant: None,
            digest: "sha256:0".into(),
            labels: map(labels),
            env: map(env),
            created: None,
        }
    }

    #[test]
    fn declared_values_only_with_engine_label_before_oci_revision() {
        let p = platform(
            &[
                ("org.opencontainers.image.revision", "oci"),
                ("ai.vllm.build.commit", "vllm"),
            ],
            &[("ROCM_VERSION", " 7.2.3 "), ("SGLANG_VERSION", "0.5.17")],
        );
        let v = ImageVersions::of(&p);
        assert_eq!(v.engine_commit.as_deref(), Some("vllm"));
        assert_eq!(v.rocm.as_deref(), Some("7.2.3"));
        assert_eq!(v.engine_version.as_deref(), Some("0.5.17"));
        assert_eq!((v.cuda, v.torch), (None, None));
        assert!(ImageVersions::of(&platform(&[], &[("PATH", "/bin")])).is_empty());
    }
}
