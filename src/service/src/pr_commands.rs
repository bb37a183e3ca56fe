//! Maintainer PR commands over the GitHub client and the sled store: thin
//! adapters of [`klaud_lifecycle::commands`], where the handling lives. Retry requests are kept by the store's journal
//! ([`StoreJournal`]), so a store passed here and a journal over the same
//! store see the same requests.

use klaud_claims::Clock;
use klaud_github::Github;
use klaud_github::lifecycle::GithubLifecycle;
use klaud_lifecycle::BoxFuture;
use klaud_lifecycle::commands::Retries;
use klaud_lifecycle::engine::{CandidateRecord, Engine, JournalError};
use klaud_store::Store;
use klaud_store::journal::StoreJournal;

pub use klaud_lifecycle::commands::{
    Answered, CommandError, MAX_REPLIES_PER_PASS, no_mentions, reply_marker, status_text,
};
pub use klaud_lifecycle::engine::RetryRequest;

/// Whether a retry request in `store` lifts the cooldown of the family of
/// the finished candidate `rec` (a request made after the candidate ended).
pub fn retry_requested(store: &Store, rec: &CandidateRecord) -> bool {
    let Some(family) = klaud_lifecycle::commands::retry_family(rec) else {
        return false;
    };
    match StoreJournal::new(store.clone()).retry_request_now(&family) {
        Ok(request) => klaud_lifecycle::commands::retry_lifts(rec, request.as_ref()),
        Err(_) => false,
    }
}

/// [`klaud_lifecycle::commands::request_retry`], kept in `store` and
/// stamped by `clock`.
pub fn request_retry<'f>(
    store: &'f Store,
    clock: &'f dyn Clock,
    rec: &'f CandidateRecord,
    by: &'f str,
    reason: &'f str,
) -> BoxFuture<'f, Result<Result<String, klaud_lifecycle::commands::Refusal>, JournalError>> {
    Box::pin(async move {
        let journal = StoreJournal::new(store.clone());
        klaud_lifecycle::commands::request_retry(&journal, clock, rec, by, reason).await
    })
}

/// [`klaud_lifecycle::commands::handle_commands`] over the GitHub client;
/// retry requests go to `store` (none: `/klaud retry` cannot be recorded),
/// stamped by the engine's clock.
pub fn handle_commands<'f>(
    forge: &'f Github,
    engine: &'f Engine<'f>,
    rec: &'f mut CandidateRecord,
    store: Option<&'f Store>,
) -> BoxFuture<'f, Result<Vec<Answered>, CommandError>> {
    Box::pin(async move {
        let lifecycle = GithubLifecycle::new(forge);
        let journal = store.map(|s| StoreJournal::new(s.clone()));
        let retries = journal.as_ref().map(|j| Retries {
            journal: j,
            clock: engine.clock(),
        });
        klaud_lifecycle::commands::handle_commands(&lifecycle, engine, rec, retries).await
    })
}
