//! What can stop a step: [`EngineError`]. A step that cannot go on because of
//! something on GitHub (a person's change, a run still going) does not fail:
//! it answers a [`crate::engine::Progress`].

use crate::engine::forge::ForgeError;
use crate::engine::journal::JournalError;

/// Why the engine could not go on (transient: the next wave tries again).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// GitHub failed.
    #[error(transparent)]
    Forge(#[from] ForgeError),
    /// The journal failed.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// A claim operation failed.
    #[error("claim: {0}")]
    ClaimOp(#[from] klaud_claims::ClaimError),
    /// A claim record is not what the engine needs (the experiment
    /// fields of a shared claim).
    #[error("claim: {0}")]
    Claim(String),
    /// The candidate does not fit the repository.
    #[error("{0}")]
    Invalid(String),
}

impl EngineError {
    /// The cause when this failure is not the candidate's but the whole
    /// instance's: GitHub refused the credential, or the local store cannot
    /// be written. Every other candidate stops the same way, so a wave
    /// that ends on it must not look successful.
    pub fn global_cause(&self) -> Option<String> {
        let credential = match self {
            Self::Forge(e) => e.is_credential_refused(),
            Self::ClaimOp(klaud_claims::ClaimError::Store { source, .. }) => {
                matches!(source, klaud_claims::RefStoreError::CredentialRefused(_))
            }
            _ => false,
        };
        if credential {
            return Some(format!("GitHub refused the credential: {self}"));
        }
        matches!(self, Self::Journal(_)).then(|| format!("the local store failed: {self}"))
    }
}
