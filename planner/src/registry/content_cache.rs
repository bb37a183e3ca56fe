//! What the registry client keeps across plans and processes: manifests
//! and config blobs by digest, the digest each tag last resolved to, and
//! tag lists with their validator ([`ContentCache`]), with an in-memory
//! one ([`MemoryContentCache`]).

use std::collections::HashMap;
use std::sync::Mutex;

/// A content-addressed cache of manifests and config blobs kept across
/// plans and processes (the daemon's store; in Actions mode the store kept
/// between runs). The key is the digest of the bytes, so an entry never goes
/// stale; what comes back is hashed again before use, so a damaged entry is
/// a miss, never a wrong answer. With it, a manifest is pulled once ever per
/// digest. It also keeps the digest each tag last resolved to, as a hint:
/// a tag whose hinted digest is cached is only `HEAD`ed (not a pull) to see
/// whether it still points there.
pub trait ContentCache: Send + Sync {
    /// The bytes whose digest is `digest`, if kept.
    fn get(&self, digest: &str) -> Option<Vec<u8>>;
    /// Keeps `bytes` (already checked to hash to `digest`).
    fn put(&self, digest: &str, bytes: &[u8]);
    /// The digest `host/repository:tag` resolved to last, if kept.
    fn tag_digest(&self, host: &str, repository: &str, tag: &str) -> Option<String>;
    /// Remembers what `host/repository:tag` resolved to.
    fn put_tag_digest(&self, host: &str, repository: &str, tag: &str, digest: &str);
    /// The tag list of `host/repository` last read, with its validator
    /// (`ETag`), if kept: the next listing asks `If-None-Match` and an
    /// unchanged list is a `304` without a body.
    fn tag_list(&self, _host: &str, _repository: &str) -> Option<KeptTagList> {
        None
    }
    /// Keeps a tag list that came with a validator.
    fn put_tag_list(&self, _host: &str, _repository: &str, _list: &KeptTagList) {}
}

/// A repository's tag list as last read, with the `ETag` it came with.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KeptTagList {
    /// The registry's validator of the list.
    pub etag: String,
    /// The tags, in the registry's order.
    pub tags: Vec<String>,
}

/// [`ContentCache`] in memory (benchmarks and tests: what a kept store
/// holds, without one), counting hits.
#[derive(Debug, Default)]
pub struct MemoryContentCache {
    content: Mutex<HashMap<String, Vec<u8>>>,
    tags: Mutex<HashMap<String, String>>,
    tag_lists: Mutex<HashMap<String, KeptTagList>>,
    hits: std::sync::atomic::AtomicU64,
}

impl MemoryContentCache {
    /// (manifests and configs kept, tag hints kept, hits so far).
    pub fn stats(&self) -> (usize, usize, u64) {
        (
            self.content.lock().unwrap_or_else(|p| p.into_inner()).len(),
            self.tags.lock().unwrap_or_else(|p| p.into_inner()).len(),
            self.hits.load(std::sync::atomic::Ordering::Relaxed),
        )
    }
}

impl ContentCache for MemoryContentCache {
    fn get(&self, digest: &str) -> Option<Vec<u8>> {
        let found = self
            .content
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(digest)
            .cloned();
        if found.is_some() {
            self.hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        found
    }

    fn put(&self, digest: &str, bytes: &[u8]) {
        self.content
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(digest.to_owned(), bytes.to_vec());
    }

    fn tag_digest(&self, host: &str, repository: &str, tag: &str) -> Option<String> {
        self.tags
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&format!("{host}/{repository}:{tag}"))
            .cloned()
    }

    fn put_tag_digest(&self, host: &str, repository: &str, tag: &str, digest: &str) {
        self.tags
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(format!("{host}/{repository}:{tag}"), digest.to_owned());
    }

    fn tag_list(&self, host: &str, repository: &str) -> Option<KeptTagList> {
        self.tag_lists
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&format!("{host}/{repository}"))
            .cloned()
    }

    fn put_tag_list(&self, host: &str, repository: &str, list: &KeptTagList) {
        self.tag_lists
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(format!("{host}/{repository}"), list.clone());
    }
}
