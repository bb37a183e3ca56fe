//! [`klaud_claims::RefStore`] over the forge: claim refs live on GitHub.
//!
//! Claims coordinate by compare-and-swap, not by ownership proofs, so this
//! store writes only claim and recovery-lease refs: a caller holding the
//! store cannot move or delete a candidate branch without a proof.

use async_trait::async_trait;
use klaud_claims::{RefStore, RefStoreError, RefTip, is_coordination_ref};

use super::{Github, GithubError};

fn map(e: GithubError) -> RefStoreError {
    match e {
        GithubError::AlreadyExists { what, .. } => RefStoreError::AlreadyExists(what),
        GithubError::NotFastForward { what } => RefStoreError::NotFastForward(what),
        GithubError::NotFound { what } => RefStoreError::NotFound(what),
        e @ GithubError::Unauthorized { .. } => RefStoreError::CredentialRefused(e.to_string()),
        other => RefStoreError::Other(other.to_string()),
    }
}

fn coordination_only(name: &str) -> Result<(), RefStoreError> {
    if is_coordination_ref(name) {
        Ok(())
    } else {
        Err(RefStoreError::Other(format!(
            "{name} is not a claim or recovery-lease ref; the claim store does not write it"
        )))
    }
}

impl Github {
    async fn tip(&self, name: String, sha: String) -> Result<RefTip, GithubError> {
        let c = self.git_commit(&sha).await?;
        Ok(RefTip {
            name,
            sha,
            message: c.message,
            parents: c.parents,
            tree: c.tree,
        })
    }
}

#[async_trait]
impl RefStore for Github {
    async fn read_ref(&self, name: &str) -> Result<Option<RefTip>, RefStoreError> {
        match self.get_ref(name).await.map_err(map)? {
            Some(sha) => Ok(Some(self.tip(name.to_string(), sha).await.map_err(map)?)),
            None => Ok(None),
        }
    }

    async fn read_ref_sha(&self, name: &str) -> Result<Option<String>, RefStoreError> {
        // The ref alone: its commit would be one more charged read the
        // first time this process sees it.
        self.get_ref(name).await.map_err(map)
    }

    async fn list_refs(&self, prefix: &str) -> Result<Vec<RefTip>, RefStoreError> {
        let refs = Github::list_refs(self, prefix).await.map_err(map)?;
        let mut out = Vec::with_capacity(refs.len());
        for (name, sha) in refs {
            out.push(self.tip(name, sha).await.map_err(map)?);
        }
        Ok(out)
    }

    async fn create_commit(
        &self,
        message: &str,
        tree: &str,
        parents: &[String],
    ) -> Result<String, RefStoreError> {
        Github::create_commit(self, message, tree, parents)
            .await
            .map_err(map)
    }

    async fn create_ref(&self, name: &str, sha: &str) -> Result<(), RefStoreError> {
        coordination_only(name)?;
        Github::create_ref(self, name, sha).await.map_err(map)
    }

    async fn fast_forward_ref(&self, name: &str, sha: &str) -> Result<(), RefStoreError> {
        coordination_only(name)?;
        self.update_ref(name, sha, false).await.map_err(map)
    }

    async fn delete_ref(&self, name: &str) -> Result<(), RefStoreError> {
        coordination_only(name)?;
        Github::delete_ref(self, name).await.map_err(map)
    }

    async fn commit_tree(&self, sha: &str) -> Result<String, RefStoreError> {
        self.tree_of(sha).await.map_err(map)
    }
}
