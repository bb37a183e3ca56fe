//! Klaud's HTTP clients: every reqwest client is built here.
//!
//! reqwest's own TLS default is aws-lc, a C library whose build alone was about
//! 8% of a cold release build. Klaud builds reqwest without a provider
//! and installs ring — which octocrab's TLS uses anyway — as the process's
//! rustls provider before a client is built. A reqwest client built before
//! that would panic, so [`http_client`] and [`http_client_builder`] are the
//! only ways in (clippy's `disallowed-methods`, configured in the
//! workspace's `.clippy.toml`, refuses `reqwest::Client::new` and
//! `::builder` anywhere else).
//!
//! This crate must never hold a rule of Klaud's: no URLs, retries or
//! timeouts; callers set those on the builder.

/// Installs ring as the process's rustls provider. Idempotent and cheap.
pub fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Losing to a provider someone installed first is fine: reqwest
        // then uses that one.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The client [`http_client_builder`] builds, for crates that keep one
/// without depending on reqwest themselves.
pub type Client = reqwest::Client;

/// A reqwest client builder whose TLS is backed by the installed provider.
#[allow(clippy::disallowed_methods)] // the one place allowed to call it
pub fn http_client_builder() -> reqwest::ClientBuilder {
    install();
    reqwest::Client::builder()
}

/// A reqwest client with default settings, as `reqwest::Client::new()`.
///
/// # Errors
/// When the TLS backend cannot be set up (e.g. no readable system roots).
pub fn http_client() -> reqwest::Result<reqwest::Client> {
    http_client_builder().build()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_client_builds_with_tls_on_ring() {
        assert!(super::http_client().is_ok());
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
