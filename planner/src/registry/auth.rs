//! `WWW-Authenticate` challenges and the bearer token cache.
//!
//! Hand-written because no maintained crate parses the registry flavour of
//! challenges (quoted values containing commas, several schemes in one header)
//! without pulling in a whole OCI client.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A parsed authentication challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Challenge {
    /// `Bearer realm="…",service="…",scope="…"`: fetch a token from `realm`.
    Bearer {
        /// Token endpoint URL.
        realm: String,
        /// `service` parameter to pass back, if any.
        service: Option<String>,
        /// `scope` parameter to pass back, if any.
        scope: Option<String>,
    },
    /// `Basic realm="…"`: send basic credentials directly.
    Basic,
}

/// Why a `WWW-Authenticate` header could not be used: what is wrong, with
/// the header cut to 200 characters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ChallengeError(String);

/// Parses a `WWW-Authenticate` header value. Returns the first `Bearer`
/// challenge if there is one, else `Basic`, else an error describing the
/// problem. Parameter names are case-insensitive; values may be quoted (with
/// `\` escapes and commas inside) or bare tokens.
pub fn parse_challenge(header: &str) -> Result<Challenge, ChallengeError> {
    let challenges = parse_all(header).map_err(ChallengeError)?;
    let mut basic = false;
    for (scheme, params) in challenges {
        if scheme.eq_ignore_ascii_case("bearer") {
            let realm = params
                .get("realm")
                .filter(|r| !r.is_empty())
                .cloned()
                .ok_or_else(|| ChallengeError("Bearer challenge without realm".to_owned()))?;
            return Ok(Challenge::Bearer {
                realm,
                service: params.get("service").cloned(),
                scope: params.get("scope").cloned(),
            });
        }
        if scheme.eq_ignore_ascii_case("basic") {
            basic = true;
        }
    }
    if basic {
        Ok(Challenge::Basic)
    } else {
        Err(ChallengeError(format!(
            "no Bearer or Basic challenge in {:?}",
            truncate(header)
        )))
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(200).collect()
}

type Params = BTreeMap<String, String>;

fn parse_all(header: &str) -> Result<Vec<(String, Params)>, String> {
    let mut out: Vec<(String, Params)> = Vec::new();
    let b = header.as_bytes();
    let mut i = 0;
    let skip_ws = |i: &mut usize| {
        while *i < b.len() && (b[*i] == b' ' || b[*i] == b'\t') {
            *i += 1;
        }
    };
    let is_token = |c: u8| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~/:".contains(&c);
    loop {
        skip_ws(&mut i);
        while i < b.len() && (b[i] == b',' || b[i] == b' ') {
            i += 1;
        }
        if i >= b.len() {
            break;
        }
        // A token: either a new scheme or a parameter name of the current one.
        let start = i;
        while i < b.len() && is_token(b[i]) {
            i += 1;
        }
        if start == i {
            return Err(format!("unexpected character at byte {i} in challenge"));
        }
        let word = &header[start..i];
        skip_ws(&mut i);
        if i < b.len() && b[i] == b'=' {
            // Parameter (or token68 padding if no current scheme).
            let Some((_, params)) = out.last_mut() else {
                return Err("parameter before any scheme in challenge".into());
            };
            i += 1;
            skip_ws(&mut i);
            let value = if i < b.len() && b[i] == b'"' {
                i += 1;
                let mut v = String::new();
                let mut closed = false;
                while i < b.len() {
                    match b[i] {
                        b'\\' if i + 1 < b.len() => {
                            i += 1;
                            let ch_len = utf8_len(b[i]);
                            v.push_str(&header[i..i + ch_len]);
                            i += ch_len;
                        }
                        b'"' => {
                            i += 1;
                            closed = true;
                            break;
                        }
                        c => {
                            let ch_len = utf8_len(c);
                            v.push_str(&header[i..i + ch_len]);
                            i += ch_len;
                        }
                    }
                }
                if !closed {
                    return Err(format!(
                        "unterminated quoted value for {word:?} in challenge"
                    ));
                }
                v
            } else {
                let vs = i;
                while i < b.len() && b[i] != b',' && b[i] != b' ' && b[i] != b'\t' {
                    i += 1;
                }
                header[vs..i].to_owned()
            };
            params.insert(word.to_ascii_lowercase(), value);
        } else {
            out.push((word.to_owned(), Params::new()));
        }
    }
    if out.is_empty() {
        return Err("empty challenge".into());
    }
    Ok(out)
}

fn utf8_len(first: u8) -> usize {
    match first {
        0x00..=0x7f => 1,
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        _ => 4,
    }
}

/// A bearer token. `Debug` never prints it.
#[derive(Clone)]
pub(crate) struct Token(pub(crate) String);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Token endpoint response (`token` per the distribution spec, `access_token`
/// per OAuth2; registries send one or both).
#[derive(serde::Deserialize)]
pub(crate) struct TokenResponse {
    pub(crate) token: Option<String>,
    pub(crate) access_token: Option<String>,
    pub(crate) expires_in: Option<i64>,
}

/// Tokens are dropped this long before the server says they expire, so a
/// request never starts with a token that dies in flight.
const EXPIRY_MARGIN: Duration = Duration::from_secs(10);
/// Lifetime the distribution spec prescribes when `expires_in` is missing.
pub(crate) const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(60);

/// Serializes token fetches for one (host, scope).
type Gate = Arc<tokio::sync::Mutex<()>>;

/// Tokens per (host, scope), valid until their expiry minus a margin.
#[derive(Default)]
pub(crate) struct TokenCache {
    tokens: Mutex<HashMap<(String, String), (Token, Instant)>>,
    gates: Mutex<HashMap<(String, String), Gate>>,
}

impl TokenCache {
    /// The lock that serializes token fetches for one (host, scope).
    pub(crate) fn gate(&self, host: &str, scope: &str) -> Gate {
        let mut map = self.gates.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(map.entry((host.to_owned(), scope.to_owned())).or_default())
    }

    pub(crate) fn get(&self, host: &str, scope: &str) -> Option<Token> {
        let mut map = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        let key = (host.to_owned(), scope.to_owned());
        match map.get(&key) {
            Some((t, until)) if Instant::now() < *until => Some(t.clone()),
            Some(_) => {
                map.remove(&key);
                None
            }
            None => None,
        }
    }

    pub(crate) fn put(&self, host: &str, scope: &str, token: Token, lifetime: Duration) {
        let usable = lifetime.saturating_sub(EXPIRY_MARGIN.min(lifetime / 2));
        let mut map = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(
            (host.to_owned(), scope.to_owned()),
            (token, Instant::now() + usable),
        );
    }
}

/// Scope Klaud asks for when reading a repository.
pub(crate) fn pull_scope(repository: &str) -> String {
    format!("repository:{repository}:pull")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_hub_bearer_challenge() {
        let c = parse_challenge(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/ubuntu:pull""#,
        )
        .unwrap();
        assert_eq!(
            c,
            Challenge::Bearer {
                realm: "https://auth.docker.io/token".into(),
                service: Some("registry.docker.io".into()),
                scope: Some("repository:library/ubuntu:pull".into()),
            }
        );
    }

    #[test]
    fn quoted_values_may_contain_commas_and_escapes() {
        let c = parse_challenge(
            r#"Bearer realm="https://x/token",scope="repository:a/b:pull,push repository:c:pull",error="say \"hi\"""#,
        )
        .unwrap();
        let Challenge::Bearer { scope, service, .. } = c else {
            panic!("not bearer")
        };
        assert_eq!(
            scope.as_deref(),
            Some("repository:a/b:pull,push repository:c:pull")
        );
        assert_eq!(service, None);
    }

    #[test]
    fn scheme_and_params_are_case_insensitive_with_spaces() {
        let c = parse_challenge(r#"bearer  Realm = "https://r/t" , SERVICE=svc"#).unwrap();
        assert_eq!(
            c,
            Challenge::Bearer {
                realm: "https://r/t".into(),
                service: Some("svc".into()),
                scope: None
            }
        );
    }

    #[test]
    fn basic_challenge() {
        assert_eq!(
            parse_challenge(r#"Basic realm="Registry Realm""#).unwrap(),
            Challenge::Basic
        );
        assert_eq!(parse_challenge("Basic").unwrap(), Challenge::Basic);
    }

    #[test]
    fn bearer_preferred_over_basic_in_one_header() {
        let c = parse_challenge(r#"Basic realm="x", Bearer realm="https://t/token",service="s""#)
            .unwrap();
        assert!(matches!(c, Challenge::Bearer { .. }));
    }

    #[test]
    fn malformed_challenges_are_errors() {
        for bad in [
            "",
            "   ",
            r#"Bearer service="s""#,
            r#"Bearer realm="unterminated"#,
            r#"Bearer realm="""#,
            r#"=x"#,
            "Negotiate abc",
            "\u{1F600} realm=x",
            "(((",
        ] {
            assert!(parse_challenge(bad).is_err(), "{bad:?} should fail");
        }
    }

    #[test]
    fn token_cache_expires_and_hides_tokens() {
        let cache = TokenCache::default();
        cache.put("h", "s", Token("secret".into()), Duration::from_secs(60));
        assert!(cache.get("h", "s").is_some());
        assert!(cache.get("h", "other").is_none());
        cache.put("h", "s2", Token("secret".into()), Duration::ZERO);
        assert!(cache.get("h", "s2").is_none());
        assert!(!format!("{:?}", Token("secret".into())).contains("secret"));
    }
}
