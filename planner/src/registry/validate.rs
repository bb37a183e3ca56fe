//! Checks on names before they become URL paths: a hostile or mistyped image
//! reference must not be able to address another endpoint.

use super::error::{RegistryError, Target};

fn invalid(target: &Target, what: &str, reason: String) -> RegistryError {
    RegistryError::Invalid {
        target: target.clone(),
        what: what.to_owned(),
        reason,
    }
}

/// Registry host: DNS name or IP with an optional port.
pub(crate) fn host(t: &Target) -> Result<(), RegistryError> {
    let h = &t.host;
    let ok = !h.is_empty()
        && h.len() <= 255
        && h.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            t,
            "registry host",
            format!("{h:?} is not a host[:port]"),
        ))
    }
}

/// Repository path per the distribution spec: lowercase components of
/// alphanumerics joined by `.`, `_`, `__` or dashes, separated by `/`.
pub(crate) fn repository(t: &Target) -> Result<(), RegistryError> {
    let r = &t.repository;
    let component_ok = |c: &str| {
        let b = c.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter().all(|&x| {
                x.is_ascii_lowercase() || x.is_ascii_digit() || matches!(x, b'.' | b'_' | b'-')
            })
            && !c.contains("..")
    };
    if r.len() <= 255 && r.split('/').all(component_ok) {
        Ok(())
    } else {
        Err(invalid(
            t,
            "repository name",
            format!("{r:?} is not a valid repository path"),
        ))
    }
}

/// Tag (`[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`) or digest.
pub(crate) fn reference(t: &Target) -> Result<(), RegistryError> {
    let r = t.reference.as_deref().unwrap_or_default();
    if r.contains(':') {
        return digest_value(r).map_err(|reason| invalid(t, "digest", reason));
    }
    let b = r.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter()
            .all(|&x| x.is_ascii_alphanumeric() || matches!(x, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(invalid(t, "tag", format!("{r:?} is not a valid tag")))
    }
}

/// `sha256:<64 hex>` or `sha512:<128 hex>`, lowercase.
pub(crate) fn digest_value(d: &str) -> Result<(), String> {
    let (alg, hex) = d
        .split_once(':')
        .ok_or_else(|| format!("{d:?} is not algorithm:hex"))?;
    let len = match alg {
        "sha256" => 64,
        "sha512" => 128,
        _ => return Err(format!("{d:?}: unsupported digest algorithm {alg:?}")),
    };
    if hex.len() == len
        && hex
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
    {
        Ok(())
    } else {
        Err(format!(
            "{d:?}: expected {len} lowercase hex digits after {alg}:"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(h: &str, r: &str, reference: Option<&str>) -> Target {
        Target::new(h, r, reference)
    }

    #[test]
    fn names() {
        assert!(host(&t("127.0.0.1:5000", "a", None)).is_ok());
        assert!(host(&t("evil/x", "a", None)).is_err());
        assert!(host(&t("", "a", None)).is_err());
        for ok in [
            "library/ubuntu",
            "nvidia/tensorrt-llm/release",
            "lmsysorg/sglang-rocm",
            "a__b/c.d",
        ] {
            assert!(repository(&t("h", ok, None)).is_ok(), "{ok}");
        }
        for bad in [
            "", "Upper/x", "a//b", "../etc", "a/../b", "a/b?x", "a/b/", "-a",
        ] {
            assert!(repository(&t("h", bad, None)).is_err(), "{bad}");
        }
        for ok in [
            "v0.25.0",
            "nightly-dev-x86_64-cu13.0.1-abcdef0",
            "_x",
            "kimi-k3",
        ] {
            assert!(reference(&t("h", "r", Some(ok))).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".x",
            "a/b",
            "a b",
            "sha256:xyz",
            "md5:00",
            &"x".repeat(129),
        ] {
            assert!(reference(&t("h", "r", Some(bad))).is_err(), "{bad}");
        }
        assert!(digest_value(&format!("sha256:{}", "a".repeat(64))).is_ok());
        assert!(digest_value(&format!("sha256:{}", "A".repeat(64))).is_err());
    }
}
