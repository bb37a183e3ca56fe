//! How `klaud.toml` and the command line write durations (`30s`, `90m`,
//! `2 hours`, `1h 30m`), and the least an interval may be.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// Durations are written like `30s`, `90m`, `2 hours` or `1h 30m`.
pub(super) fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

/// [`duration`] for a key whose absence means "the default".
pub(super) fn optional_duration<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Duration>, D::Error> {
    duration(deserializer).map(Some)
}

/// Parses an interval or timeout (`30s`, `90m`, …) that must be at least
/// `min`; errors say the minimum.
pub fn parse_interval(text: &str, min: Duration) -> Result<Duration, DurationError> {
    let value = parse_duration(text)?;
    at_least(value, min)?;
    Ok(value)
}

pub(super) fn at_least(value: Duration, min: Duration) -> Result<(), DurationError> {
    if value < min {
        return Err(DurationError::TooShort { value, min });
    }
    Ok(())
}

/// How a duration is written, for error messages.
const DURATION_SYNTAX: &str = "write it like 30s, 90m, 24h, 7d, \"2 hours\" or \"1h 30m\"";

/// A duration that does not read, or is shorter than allowed.
#[derive(Debug, thiserror::Error)]
pub enum DurationError {
    #[error("{text:?} is negative; {syntax}", syntax = DURATION_SYNTAX)]
    Negative { text: String },
    #[error("{text:?} has no unit; {syntax}", syntax = DURATION_SYNTAX)]
    NoUnit { text: String },
    #[error("{text:?} is too long")]
    TooLong { text: String },
    #[error("{text:?} is not a duration ({source}); {syntax}", syntax = DURATION_SYNTAX)]
    Invalid {
        text: String,
        #[source]
        source: humantime::DurationError,
    },
    #[error(
        "{}s is too short: an interval must be at least {}s",
        value.as_secs(),
        min.as_secs()
    )]
    TooShort { value: Duration, min: Duration },
}

/// Parses `30s`, `90m`, `2 hours`, `1h 30m` (humantime's units).
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let text = text.trim();
    if text.starts_with('-') {
        return Err(DurationError::Negative { text: text.into() });
    }
    humantime::parse_duration(text).map_err(|source| match source {
        humantime::DurationError::UnknownUnit { unit, .. } if unit.is_empty() => {
            DurationError::NoUnit { text: text.into() }
        }
        humantime::DurationError::NumberOverflow => DurationError::TooLong { text: text.into() },
        source => DurationError::Invalid {
            text: text.into(),
            source,
        },
    })
}
