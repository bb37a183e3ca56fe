//! The ref-store boundary: the few git-ref operations claims need. The GitHub
//! forge implements it in production; tests use an in-memory store.

use async_trait::async_trait;

/// A ref and the commit it points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefTip {
    /// Full ref name, e.g. `refs/heads/klaud/claim-d92e15065c55779d`.
    pub name: String,
    /// The commit the ref points at.
    pub sha: String,
    /// That commit's message (a claim record is stored there).
    pub message: String,
    /// That commit's parents.
    pub parents: Vec<String>,
    /// That commit's tree.
    pub tree: String,
}

/// Why a ref-store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RefStoreError {
    /// Creating a ref that exists (GitHub: 422 "Reference already exists").
    #[error("reference {0} already exists")]
    AlreadyExists(String),
    /// A non-forced update that is not a fast-forward (GitHub: 422).
    #[error("update of {0} is not a fast-forward")]
    NotFastForward(String),
    /// The ref or commit does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// The forge refused the credential (revoked, expired): nothing works
    /// until it is replaced. The message must never carry the credential.
    #[error("ref store: {0}")]
    CredentialRefused(String),
    /// Anything else: transport, permissions, rate limits. The message must
    /// never carry a credential.
    #[error("ref store: {0}")]
    Other(String),
}

/// The git-ref operations claims are built from. Every method is a single
/// request-level operation; none retries a write on its own.
#[async_trait]
pub trait RefStore: Send + Sync {
    /// Reads one ref (full name) and its commit; `None` when it does not exist.
    async fn read_ref(&self, name: &str) -> Result<Option<RefTip>, RefStoreError>;
    /// The sha one ref (full name) points at; `None` when it does not
    /// exist. For a caller that needs no more than where the ref is (the
    /// base branch's tip), a store may leave the commit unread.
    async fn read_ref_sha(&self, name: &str) -> Result<Option<String>, RefStoreError> {
        Ok(self.read_ref(name).await?.map(|t| t.sha))
    }
    /// Lists every ref whose full name starts with `prefix`, with commits.
    async fn list_refs(&self, prefix: &str) -> Result<Vec<RefTip>, RefStoreError>;
    /// Creates a commit object and returns its sha.
    async fn create_commit(
        &self,
        message: &str,
        tree: &str,
        parents: &[String],
    ) -> Result<String, RefStoreError>;
    /// Creates a ref; [`RefStoreError::AlreadyExists`] when it exists.
    async fn create_ref(&self, name: &str, sha: &str) -> Result<(), RefStoreError>;
    /// Moves a ref without force; [`RefStoreError::NotFastForward`] when `sha`
    /// does not descend from the current tip (the compare-and-swap).
    async fn fast_forward_ref(&self, name: &str, sha: &str) -> Result<(), RefStoreError>;
    /// Deletes a ref.
    async fn delete_ref(&self, name: &str) -> Result<(), RefStoreError>;
    /// The tree of a commit (a claim commit reuses its base commit's tree).
    async fn commit_tree(&self, sha: &str) -> Result<String, RefStoreError>;
}
