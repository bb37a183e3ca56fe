//! A file-backed [`Journal`]: one JSON file per candidate in a directory,
//! written to a temporary file, synced and renamed into place, so a crash
//! leaves either the old or the new record. It stands in for the sled store
//! until that lands; GitHub stays the truth either way.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use klaud_lifecycle::engine::{CandidateRecord, Journal, JournalError};

/// Candidate records as files under one directory.
#[derive(Debug, Clone)]
pub struct FileJournal {
    dir: PathBuf,
}

impl FileJournal {
    /// Opens (creating) the journal directory.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, JournalError> {
        let dir = dir.as_ref().join("candidates");
        std::fs::create_dir_all(&dir)
            .map_err(|e| JournalError(format!("create {}: {e}", dir.display())))?;
        Ok(Self { dir })
    }

    fn path(&self, candidate: &str) -> Result<PathBuf, JournalError> {
        // Candidate ids are `<16 hex>-<16 hex>`; anything else never
        // becomes a file name.
        if candidate.is_empty()
            || candidate.len() > 64
            || !candidate
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b'-')
        {
            return Err(JournalError(format!("{candidate:?} is not a candidate id")));
        }
        Ok(self.dir.join(format!("{candidate}.json")))
    }
}

fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("json.tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[async_trait]
impl Journal for FileJournal {
    async fn save(&self, record: &CandidateRecord) -> Result<(), JournalError> {
        let path = self.path(&record.candidate)?;
        let bytes = serde_json::to_vec_pretty(record)
            .map_err(|e| JournalError(format!("encode {}: {e}", record.candidate)))?;
        tokio::task::spawn_blocking(move || write_durably(&path, &bytes).map_err(|e| (path, e)))
            .await
            .map_err(|e| JournalError(format!("journal writer: {e}")))?
            .map_err(|(p, e)| JournalError(format!("write {}: {e}", p.display())))
    }

    async fn load(&self, candidate: &str) -> Result<Option<CandidateRecord>, JournalError> {
        let path = self.path(candidate)?;
        match tokio::fs::read(&path).await {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| JournalError(format!("{} does not parse: {e}", path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(JournalError(format!("read {}: {e}", path.display()))),
        }
    }

    async fn list(&self) -> Result<Vec<CandidateRecord>, JournalError> {
        let mut out = Vec::new();
        let mut dir = tokio::fs::read_dir(&self.dir)
            .await
            .map_err(|e| JournalError(format!("list {}: {e}", self.dir.display())))?;
        while let Some(entry) = dir
            .next_entry()
            .await
            .map_err(|e| JournalError(format!("list {}: {e}", self.dir.display())))?
        {
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".json")) else {
                continue;
            };
            if let Some(rec) = self.load(id).await? {
                out.push(rec);
            }
        }
        out.sort_by(|a, b| a.candidate.cmp(&b.candidate));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn rejects_ids_that_are_not_file_safe() {
        let dir = tempfile::tempdir().expect("tempdir");
        let j = FileJournal::open(dir.path()).expect("open");
        assert!(j.load("../etc/passwd").await.is_err());
        assert_eq!(j.load("0123456789abcdef-0123456789abcdef").await, Ok(None));
        assert!(j.list().await.expect("list").is_empty());
    }
}
